//! Logs: the one `tracing` subscriber of a run. Every library event (a BMC whose
//! certificate is not verified, a state that could not be saved) reaches stderr here,
//! written as the CLI writes its own messages: `warning: node01: …`, `error: …`, no
//! timestamps, no colour. Data stays on stdout, untouched.
//!
//! How much: errors and toolkit's warnings by default; `-q` errors only; `-v` toolkit's
//! debug messages and other crates' warnings, `-vv` toolkit's trace, `-vvv` everything.
//! `RUST_LOG`, when set, replaces all of that (an `EnvFilter` directive list).

use std::fmt;
use std::io::IsTerminal as _;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter, SubscriberBuilder};
use tracing_subscriber::registry::LookupSpan;

/// `-q` and the count of `-v`, as given on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Verbosity {
    pub quiet: bool,
    pub verbose: u8,
}

impl Verbosity {
    /// The filter directives these flags stand for. Other crates stay at errors by
    /// default: russh, for one, warns about every global request OpenSSH sends.
    fn directives(self) -> &'static str {
        match (self.quiet, self.verbose) {
            (true, _) => "error",
            (false, 0) => "error,toolkit=warn",
            (false, 1) => "warn,toolkit=debug",
            (false, 2) => "info,toolkit=trace",
            (false, _) => "trace",
        }
    }
}

/// The flags' filter, or `RUST_LOG`'s when it is set and not empty. A `RUST_LOG` that
/// does not parse is named in the returned warning and the flags apply.
fn filter(verbosity: Verbosity, rust_log: Option<&str>) -> (EnvFilter, Option<String>) {
    let flags = || EnvFilter::new(verbosity.directives());
    match rust_log.map(str::trim).filter(|value| !value.is_empty()) {
        None => (flags(), None),
        Some(value) => match EnvFilter::try_new(value) {
            Ok(filter) => (filter, None),
            Err(error) => (flags(), Some(format!("`RUST_LOG={value}` is not a filter ({error}); using the flags"))),
        },
    }
}

/// The subscriber, writing to `writer`: what [`install`] installs, and what tests capture.
fn builder<W>(filter: EnvFilter, writer: W) -> SubscriberBuilder<DefaultFields, Plain, EnvFilter, W>
where
    W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
{
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).event_format(Plain)
}

/// `-q` given: no progress bars either.
static QUIET: OnceLock<bool> = OnceLock::new();

/// Installs the subscriber for the whole process (and the bridge from the `log`
/// crate, which russh and rustls use), writing to stderr.
pub(crate) fn install(verbosity: Verbosity) {
    let _ = QUIET.set(verbosity.quiet);
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, problem) = filter(verbosity, rust_log.as_deref());
    // Only fails when a subscriber is already installed: that one then stays.
    let _ = builder(filter, || Stderr).try_init();
    if let Some(problem) = problem {
        tracing::warn!("{problem}");
    }
}

/// `-q`: no progress at all, neither bars nor a line per step.
pub(crate) fn quiet() -> bool {
    QUIET.get().copied().unwrap_or(false)
}

/// Progress bars and live redraws: stderr is a terminal, and neither `NO_COLOR` nor
/// `-q` asks for plain output.
pub(crate) fn interactive() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none() && !quiet()
}

/// The progress bar on screen, if any: log lines are written with it hidden, so that
/// they do not tear it.
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Shows log lines above `bar` from now on (a hidden bar: nothing to do).
pub(crate) fn above(bar: &indicatif::ProgressBar) {
    if !bar.is_hidden()
        && let Ok(mut current) = BAR.lock()
    {
        *current = Some(bar.clone());
    }
}

/// stderr, with the progress bar (if any) suspended for each whole line.
struct Stderr;

impl std::io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let bar = BAR.lock().ok().and_then(|current| current.clone()).filter(|bar| !bar.is_finished());
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(buf)),
            None => std::io::stderr().write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// One line per event: `warning: node01: message: error (key=value, …)`. The `host`
/// field leads, as in the CLI's own lines; `error` follows the message; another
/// crate's events name that crate.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'span> LookupSpan<'span>,
    N: for<'writer> FormatFields<'writer> + 'static,
{
    fn format_event(&self, _context: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let metadata = event.metadata();
        let label = match *metadata.level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            Level::DEBUG => "debug",
            Level::TRACE => "trace",
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        write!(writer, "{label}: ")?;
        let target = fields.log_target.as_deref().unwrap_or_else(|| metadata.target());
        if target != "toolkit" && !target.starts_with("toolkit::") {
            write!(writer, "{target}: ")?;
        }
        if let Some(host) = &fields.host {
            write!(writer, "{host}: ")?;
        }
        writer.write_str(&fields.message)?;
        if let Some(error) = &fields.error {
            write!(writer, ": {error}")?;
        }
        if !fields.rest.is_empty() {
            write!(writer, " ({})", fields.rest.join(", "))?;
        }
        writeln!(writer)
    }
}

/// An event's fields, sorted into the places [`Plain`] gives them.
#[derive(Default)]
struct Fields {
    message: String,
    host: Option<String>,
    error: Option<String>,
    /// The module of a record from the `log` crate (its event's own target is `log`).
    log_target: Option<String>,
    rest: Vec<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}"));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.message = value,
            "host" => self.host = Some(value),
            "error" => self.error = Some(value),
            "log.target" => self.log_target = Some(value),
            name if name.starts_with("log.") => {}
            name => self.rest.push(format!("{name}={value}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Captured;

    /// What `events` logs through the subscriber `install` would install for `verbosity`.
    fn logged(verbosity: Verbosity, rust_log: Option<&str>, events: impl FnOnce()) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let (filter, problem) = filter(verbosity, rust_log);
        assert_eq!(problem, None);
        let subscriber = builder(filter, move || writer.clone()).finish();
        tracing::subscriber::with_default(subscriber, events);
        captured.text()
    }

    fn events() {
        let error = "Not a directory (os error 20)";
        tracing::warn!(%error, "could not save the state");
        tracing::warn!(host = "node01", "TLS certificate of the BMC is not verified");
        tracing::warn!(
            host = "node02",
            system = "/redfish/v1/Systems/1",
            reset = "ForceRestart",
            "reset through the BMC"
        );
        tracing::error!("kubernetes: no kubeconfig");
        tracing::info!(host = "node01", "reboot issued");
        tracing::debug!(host = "node01", "no Redfish session service; using basic auth");
        tracing::warn!(target: "russh::client", "Unhandled global request");
    }

    #[test]
    fn events_read_like_the_clis_own_lines_and_the_flags_choose_how_many() {
        assert_eq!(
            logged(Verbosity::default(), None, events),
            "warning: could not save the state: Not a directory (os error 20)\n\
             warning: node01: TLS certificate of the BMC is not verified\n\
             warning: node02: reset through the BMC (system=/redfish/v1/Systems/1, reset=ForceRestart)\n\
             error: kubernetes: no kubeconfig\n"
        );
        assert_eq!(logged(Verbosity { quiet: true, verbose: 0 }, None, events), "error: kubernetes: no kubeconfig\n");
        let verbose = logged(Verbosity { quiet: false, verbose: 1 }, None, events);
        assert!(verbose.contains("info: node01: reboot issued\n"), "{verbose}");
        assert!(verbose.contains("debug: node01: no Redfish session service; using basic auth\n"), "{verbose}");
        assert!(verbose.ends_with("warning: russh::client: Unhandled global request\n"), "{verbose}");
    }

    #[test]
    fn rust_log_replaces_the_flags_and_a_broken_one_is_named() {
        let only_debug = logged(Verbosity { quiet: true, verbose: 0 }, Some("toolkit=debug"), events);
        assert!(only_debug.contains("debug: node01: no Redfish"), "{only_debug}");
        assert!(!only_debug.contains("russh"), "{only_debug}");
        assert_eq!(logged(Verbosity::default(), Some("off"), events), "");
        assert_eq!(
            logged(Verbosity::default(), Some("  "), events),
            logged(Verbosity::default(), None, events),
            "empty means unset"
        );
        let (_, problem) = filter(Verbosity::default(), Some("toolkit=loud"));
        assert!(problem.is_some_and(|problem| problem.contains("`RUST_LOG=toolkit=loud` is not a filter")));
    }
}
