//! Operating system facts: `/etc/os-release` and the running kernel.
//!
//! Stage: observe. Input: none. Output: [`OsFact`] — distribution id, version,
//! codename, kernel release and machine architecture, in one remote command.

use std::collections::BTreeMap;

use super::{FactError, ParseError, run_probe, script_argv};
use crate::transport::Executor;

/// Kernel release, machine, then os-release (`/usr/lib/os-release` is the
/// fallback os-release(5) names).
const SCRIPT: &str = r"uname -r
uname -m
cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release 2>/dev/null || true
";

/// The operating system of one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsFact {
    /// `ID` (`debian`, `ubuntu`, `rocky`).
    pub id: String,
    /// `VERSION_ID` (`12`, `22.04`).
    pub version_id: String,
    /// `VERSION_CODENAME` (`bookworm`), when given.
    pub codename: Option<String>,
    /// `PRETTY_NAME`.
    pub pretty_name: String,
    /// `uname -r`.
    pub kernel: String,
    /// `uname -m` (`x86_64`, `aarch64`).
    pub machine: String,
    /// Every os-release field.
    pub fields: BTreeMap<String, String>,
}

/// The probe's argv.
#[must_use]
pub fn argv() -> Vec<String> {
    script_argv(SCRIPT, "toolkit-os-facts", [])
}

/// Probes one host.
///
/// # Errors
/// When the command fails or prints no kernel line.
pub async fn probe<E: Executor>(executor: &E) -> Result<OsFact, FactError> {
    run_probe(executor, "os", &argv(), parse).await
}

/// Parses the probe's output.
///
/// # Errors
/// When the kernel or machine line is missing or an os-release line is not
/// `KEY=value`.
pub fn parse(stdout: &str) -> Result<OsFact, ParseError> {
    let mut lines = stdout.lines().enumerate();
    let kernel = lines.next().map(|(_, line)| line.trim()).filter(|line| !line.is_empty());
    let kernel = kernel.ok_or_else(|| ParseError::new(1, "", "expected the kernel release"))?.to_owned();
    let machine = lines.next().map(|(_, line)| line.trim()).filter(|line| !line.is_empty());
    let machine = machine.ok_or_else(|| ParseError::new(2, "", "expected the machine architecture"))?.to_owned();
    let mut fields = BTreeMap::new();
    for (index, line) in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) =
            line.split_once('=').ok_or_else(|| ParseError::new(index + 1, line, "expected KEY=value"))?;
        fields.insert(key.to_owned(), unquote(value));
    }
    let field = |key: &str| fields.get(key).cloned();
    Ok(OsFact {
        // os-release(5): ID defaults to `linux`, PRETTY_NAME to `Linux`.
        id: field("ID").unwrap_or_else(|| "linux".to_owned()),
        version_id: field("VERSION_ID").unwrap_or_default(),
        codename: field("VERSION_CODENAME"),
        pretty_name: field("PRETTY_NAME").unwrap_or_else(|| "Linux".to_owned()),
        kernel,
        machine,
        fields,
    })
}

/// os-release values are shell-quoted: `"…"` with `\"`, `\\`, `\$`, `` \` ``
/// escapes, or `'…'`, or bare.
fn unquote(value: &str) -> String {
    if let Some(inner) = value.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')) {
        let mut out = String::with_capacity(inner.len());
        let mut characters = inner.chars();
        while let Some(character) = characters.next() {
            if character == '\\' {
                if let Some(escaped) = characters.next() {
                    if !matches!(escaped, '"' | '\\' | '$' | '`') {
                        out.push('\\');
                    }
                    out.push(escaped);
                }
            } else {
                out.push(character);
            }
        }
        out
    } else if let Some(inner) = value.strip_prefix('\'').and_then(|rest| rest.strip_suffix('\'')) {
        inner.to_owned()
    } else {
        value.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_recorded_debian_12() {
        let recorded = include_str!("../../tests/fixtures/facts/os-probe-debian12.txt");
        let fact = parse(recorded).expect("parses");
        assert_eq!(fact.id, "debian");
        assert_eq!(fact.version_id, "12");
        assert_eq!(fact.codename.as_deref(), Some("bookworm"));
        assert_eq!(fact.pretty_name, "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(fact.machine, "x86_64");
        assert!(!fact.kernel.is_empty());
    }

    #[test]
    fn unquotes_like_a_shell() {
        assert_eq!(unquote(r#""a \"b\" \$c""#), r#"a "b" $c"#);
        assert_eq!(unquote("'x y'"), "x y");
        assert_eq!(unquote("bare"), "bare");
    }

    #[test]
    fn needs_a_kernel_line() {
        assert!(parse("").is_err());
        assert!(parse("6.1.0\nx86_64\nnot a field\n").is_err());
        let minimal = parse("6.1.0\nx86_64\n").expect("no os-release is fine");
        assert_eq!(minimal.id, "linux");
    }
}
