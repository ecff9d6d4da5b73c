//! `toolkit lab up|down|status|exec`: the blueprint's cluster as local Docker containers.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use tabled::settings::Style;
use tabled::{Table, Tabled};

use crate::cli::{OutputFormat, Status, load_checked, print_diagnostics};
use crate::lab::{self, Docker, Paths, layout};
use crate::{blueprint, model};

const DEFAULT_BLUEPRINT: &str = "blueprints/lab.yaml";
const DEFAULT_INVENTORY: &str = "inventories/lab.yaml";

/// Arguments of `toolkit lab`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Debug, clap::Subcommand)]
enum LabCommand {
    /// Build the image if needed, then create and start the lab's networks and
    /// containers; keeps what is already running. Prints the lab's status.
    Up(UpArgs),
    /// Remove every container and network of the lab (nothing else; the image stays cached).
    Down(TargetArgs),
    /// List the lab's containers: state, management address, interfaces and their addresses.
    Status(StatusArgs),
    /// Run a command in a container: `toolkit lab exec node01 -- ip -o link`.
    Exec(ExecArgs),
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    /// The blueprint YAML file.
    #[arg(default_value = DEFAULT_BLUEPRINT)]
    blueprint: PathBuf,
    /// The inventory (switch addresses, SSH key paths); default `inventories/lab.yaml` when it exists.
    #[arg(short, long)]
    inventory: Option<PathBuf>,
    /// Output format of the final status.
    #[arg(long, value_enum, default_value_t)]
    output: OutputFormat,
}

#[derive(Debug, clap::Args)]
struct TargetArgs {
    /// The blueprint whose cluster name names the lab.
    #[arg(default_value = DEFAULT_BLUEPRINT)]
    blueprint: PathBuf,
    /// The lab's cluster name, instead of reading it from the blueprint.
    #[arg(long)]
    cluster: Option<String>,
}

#[derive(Debug, clap::Args)]
struct StatusArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    output: OutputFormat,
}

#[derive(Debug, clap::Args)]
struct ExecArgs {
    /// The blueprint whose cluster name names the lab.
    #[arg(long, short, default_value = DEFAULT_BLUEPRINT)]
    blueprint: PathBuf,
    /// The lab's cluster name, instead of reading it from the blueprint.
    #[arg(long)]
    cluster: Option<String>,
    /// Node or switch name.
    node: String,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    let docker = Docker::new();
    match &args.command {
        LabCommand::Up(up) => run_up(&docker, up),
        LabCommand::Down(target) => {
            let Some(cluster) = cluster_name(target.cluster.as_deref(), &target.blueprint) else {
                return Ok(Status::Error);
            };
            let report = lab::down(&docker, &cluster)?;
            eprintln!(
                "lab `{cluster}`: removed {} containers and {} networks",
                report.containers.len(),
                report.networks.len()
            );
            Ok(Status::Clean)
        }
        LabCommand::Status(status) => {
            let Some(cluster) = cluster_name(status.target.cluster.as_deref(), &status.target.blueprint) else {
                return Ok(Status::Error);
            };
            print_status(&docker, &cluster, status.output)?;
            Ok(Status::Clean)
        }
        LabCommand::Exec(exec) => {
            let Some(cluster) = cluster_name(exec.cluster.as_deref(), &exec.blueprint) else {
                return Ok(Status::Error);
            };
            let mut command = lab::exec(&docker, &cluster, &exec.node, &exec.command, std::io::stdin().is_terminal())?;
            let status = command.status().context("cannot run docker exec")?;
            // The command's own exit status is the answer; Status has no room for it.
            std::process::exit(status.code().unwrap_or(1));
        }
    }
}

fn run_up(docker: &Docker, args: &UpArgs) -> anyhow::Result<Status> {
    let inventory = args.inventory.clone().or_else(|| {
        let default = PathBuf::from(DEFAULT_INVENTORY);
        (args.blueprint == Path::new(DEFAULT_BLUEPRINT) && default.exists()).then_some(default)
    });
    let Some(inputs) = load_checked(&args.blueprint, inventory.as_deref(), OutputFormat::Text) else {
        return Ok(Status::Error);
    };
    let model = model::expand(&inputs.blueprint.blueprint)?;
    let inventory = inputs.inventory.as_ref().map(|i| &i.inventory);
    let layout = layout::plan(&model, inventory)?;
    for warning in &layout.warnings {
        eprintln!("warning: {warning}");
    }
    let paths = Paths::from_inventory(inventory);
    lab::up(docker, &layout, &paths, &|line| eprintln!("{line}"))?;
    print_status(docker, &layout.cluster, args.output)?;
    Ok(Status::Clean)
}

/// The cluster name from `--cluster`, else from the blueprint (diagnostics printed on failure).
fn cluster_name(cluster: Option<&str>, blueprint: &Path) -> Option<String> {
    if let Some(cluster) = cluster {
        return Some(cluster.to_owned());
    }
    match blueprint::load(blueprint) {
        Ok(loaded) => Some(loaded.blueprint.cluster.name),
        Err(diagnostics) => {
            print_diagnostics(&diagnostics, OutputFormat::Text);
            None
        }
    }
}

#[derive(Tabled)]
struct Row {
    host: String,
    role: String,
    state: String,
    management: String,
    interfaces: String,
}

fn print_status(docker: &Docker, cluster: &str, output: OutputFormat) -> anyhow::Result<()> {
    let containers = lab::status(docker, cluster)?;
    match output {
        OutputFormat::Json => {
            let json = serde_json::json!({ "format_version": 1, "cluster": cluster, "containers": containers });
            print_stdout(&serde_json::to_string_pretty(&json)?)?;
        }
        OutputFormat::Text => {
            if containers.is_empty() {
                eprintln!("lab `{cluster}` has no containers: `toolkit lab up` creates them");
                return Ok(());
            }
            let prefix = format!("tk-{cluster}-");
            let rows = containers.iter().map(|c| Row {
                host: c.host.clone(),
                role: c.role.clone(),
                state: c.state.clone(),
                management: c.management.clone(),
                interfaces: c
                    .interfaces
                    .iter()
                    .map(|i| {
                        let addresses = if i.addresses.is_empty() { "-".to_owned() } else { i.addresses.join(" ") };
                        format!("{} {} {} {addresses}", i.name, i.network.trim_start_matches(&prefix), i.mac)
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            });
            let mut table = Table::new(rows);
            table.with(Style::sharp());
            print_stdout(&table.to_string())?;
        }
    }
    Ok(())
}

/// Prints a line on stdout; a reader that went away (`| head`) is not an error.
fn print_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match writeln!(std::io::stdout().lock(), "{text}") {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error.into()),
        _ => Ok(()),
    }
}
