//! Command line: clap types (their doc comments are `--help`) and one thin file per
//! command. Exit codes follow `terraform plan -detailed-exitcode`: 0 nothing to do
//! or all passed, 2 changes pending or tests failed, 1 error.

mod connections;
mod deploy;
mod destroy;
mod inspect;
mod lab;
mod lint;
mod live;
mod log;
mod parse;
mod plan;
mod provision;
mod push;
mod report;
mod rma;
mod schema;
mod status;
mod topology;
mod unlock;
mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::blueprint::{self, LoadedBlueprint};
use crate::diagnostic::Diagnostics;
use crate::inventory::{self, LoadedInventory};

/// Provision and validate GPU clusters from one declarative blueprint.
#[derive(Debug, Parser)]
#[command(name = "toolkit", version, about, long_about = None)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
    /// More on stderr: `-v` debug messages, `-vv` trace, `-vvv` every crate's trace
    /// (`RUST_LOG`, when set, decides instead).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Errors only on stderr: no warnings, no progress bars.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a blueprint (and inventory): every problem at once, no network.
    Lint(lint::Args),
    /// Print the JSON Schema of the blueprint or inventory, for editors.
    Schema(schema::Args),
    /// Fabric sizing and the cabling (port) plan.
    Topology(topology::Args),
    /// What deploy would change: creates, updates, removals, with diffs.
    Plan(plan::Args),
    /// Each node's hardware from its BMC, against the blueprint (exit 2 on a mismatch).
    Inspect(inspect::Args),
    /// Plan against the hosts, ask, apply in graph order, record the state.
    Deploy(deploy::Args),
    /// Terminate the cloud instances the cluster owns (by tag), and only them.
    Destroy(destroy::Args),
    /// Remove the cluster lock left by a deploy that died.
    Unlock(unlock::Args),
    /// A rolling change in progress and the nodes toolkit holds drained.
    Status(status::Args),
    /// Push a manifest of files, directories, packages, services and commands to hosts.
    Push(push::Args),
    /// A local lab of Docker containers matching a blueprint (see lab/README.md).
    Lab(lab::Args),
    /// Run the acceptance tests; write the results JSON (exit 2 when any failed).
    Validate(validate::Args),
    /// The acceptance report (HTML, JUnit XML, JSON, Markdown) from a results file.
    Report(report::Args),
    /// The faulty-host report of a node sent to RMA (JSON and Markdown), for the vendor ticket.
    Rma(rma::Args),
    /// Read one acceptance-tool output (nccl-tests, dcgmi, ibstat…) as toolkit does.
    Parse(parse::Args),
    /// Close the SSH connections kept open after earlier runs (see `--ssh-persist`).
    Disconnect(connections::DisconnectArgs),
    /// The background process that keeps SSH connections between runs (started by
    /// toolkit itself).
    #[command(hide = true)]
    SshMux(connections::MuxArgs),
    /// The network-boot service on a provisioning host (started by toolkit itself
    /// over SSH, see the inventory's `provisioning.host`).
    #[command(hide = true)]
    ProvisionService(provision::ServiceArgs),
}

/// How results are printed on stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// For people.
    #[default]
    Text,
    /// For programs.
    Json,
}

/// Process exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing to change / all passed.
    Clean,
    /// An error.
    Error,
    /// Changes pending / tests failed.
    Changes,
}

impl From<Status> for ExitCode {
    fn from(status: Status) -> Self {
        match status {
            Status::Clean => Self::SUCCESS,
            Status::Error => Self::from(1),
            Status::Changes => Self::from(2),
        }
    }
}

/// Parses arguments and runs the command.
#[must_use]
pub fn run() -> ExitCode {
    let cli = Cli::parse();
    log::install(log::Verbosity { quiet: cli.quiet, verbose: cli.verbose });
    let status = match cli.command {
        Command::Lint(args) => lint::run(&args),
        Command::Schema(args) => schema::run(&args),
        Command::Topology(args) => topology::run(&args),
        Command::Plan(args) => plan::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Deploy(args) => deploy::run(&args),
        Command::Destroy(args) => destroy::run(&args),
        Command::Unlock(args) => unlock::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Rma(args) => rma::run(&args),
        Command::Push(args) => push::run(&args),
        Command::Lab(args) => lab::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Parse(args) => parse::run(&args),
        Command::Disconnect(args) => connections::disconnect(&args),
        Command::SshMux(args) => connections::serve(&args),
        Command::ProvisionService(args) => provision::serve(&args),
    };
    match status {
        Ok(status) => status.into(),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}

/// A blueprint and, optionally, an inventory, both loaded and checked.
pub(crate) struct Inputs {
    pub blueprint: LoadedBlueprint,
    pub inventory: Option<LoadedInventory>,
    pub diagnostics: Diagnostics,
}

/// Loads and checks; on any error prints the diagnostics (stderr, or JSON on
/// stdout) and returns `None`.
pub(crate) fn load_checked(
    blueprint_path: &std::path::Path,
    inventory_path: Option<&std::path::Path>,
    output: OutputFormat,
) -> Option<Inputs> {
    let mut diagnostics = Diagnostics::default();
    let blueprint = match blueprint::load(blueprint_path) {
        Ok(loaded) => Some(loaded),
        Err(found) => {
            diagnostics.extend(found);
            None
        }
    };
    let inventory = match inventory_path.map(inventory::load) {
        Some(Ok(loaded)) => Some(loaded),
        Some(Err(found)) => {
            diagnostics.extend(found);
            None
        }
        None => None,
    };
    if let Some(blueprint) = &blueprint
        && (inventory_path.is_none() || inventory.is_some())
    {
        diagnostics.extend(crate::model::check::check(blueprint, inventory.as_ref()));
    }
    diagnostics.sort();
    match blueprint {
        Some(blueprint) if !diagnostics.has_errors() => Some(Inputs { blueprint, inventory, diagnostics }),
        _ => {
            print_diagnostics(&diagnostics, output);
            None
        }
    }
}

/// Diagnostics go to stderr for people, or to stdout as JSON for programs.
pub(crate) fn print_diagnostics(diagnostics: &Diagnostics, output: OutputFormat) {
    match output {
        OutputFormat::Text => eprint!("{}", diagnostics.render()),
        OutputFormat::Json => {
            let json = serde_json::json!({ "format_version": 1, "diagnostics": diagnostics });
            emit(&format!("{}\n", serde_json::to_string_pretty(&json).unwrap_or_default()));
        }
    }
}

/// Writes data to stdout. A closed pipe (`toolkit plan … | head`) ends the
/// process quietly with the status so far, as Unix tools do, instead of a panic.
pub(crate) fn emit(text: &str) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to stdout: {error}");
        std::process::exit(1);
    }
}

/// Path arguments shared by commands that read a blueprint.
#[derive(Debug, clap::Args)]
pub struct BlueprintArgs {
    /// The blueprint YAML file.
    pub blueprint: PathBuf,
    /// The inventory YAML file.
    #[arg(short, long)]
    pub inventory: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub output: OutputFormat,
}
