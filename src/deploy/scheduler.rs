//! The scheduler as a rolling change sees it: which nodes exist and whether they
//! are empty, drain with a reason, resume, the jobs that hold a node, requeue.
//!
//! Stage: roll out. Input: an [`Executor`] on the controller. Output: node states
//! ([`NodeStatus`]) and the effect of `scontrol` commands. [`Slurm`] runs Slurm's
//! own commands (`scontrol show node`, `scontrol update`, `squeue`, `scontrol
//! requeue`); unit tests of the rollout use an in-memory scheduler instead.
//!
//! "Empty" follows Slurm's own definition of DRAINED (day2.md §2.1): DRAIN set, the
//! base state neither ALLOCATED nor MIXED, no COMPLETING flag — and, to catch an
//! epilog still running, `squeue -w` shows no job on the node.

use std::collections::BTreeMap;
use std::future::Future;

use thiserror::Error;

use crate::parsers::slurm::parse_scontrol_nodes;
use crate::transport::{Executor, TransportError};

/// One node as the scheduler reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// Base state, upper case (`IDLE`, `MIXED`, `ALLOCATED`, `DOWN`…).
    pub state: String,
    /// DRAIN is set (draining or drained).
    pub drain: bool,
    /// Jobs are running or completing on it.
    pub busy: bool,
    /// The drain or down reason, without Slurm's `[user@time]` suffix.
    pub reason: Option<String>,
    /// Its last registration reported less than its node line (`INVAL`,
    /// `INVALID_REG`): Slurm refuses to resume it until a valid registration.
    pub invalid: bool,
}

impl NodeStatus {
    /// Drained and no job running or completing: safe to change.
    #[must_use]
    pub fn is_empty_drained(&self) -> bool {
        self.drain && !self.busy
    }

    /// In service: not drained and not down (a resume has nothing left to do).
    #[must_use]
    pub fn is_serving(&self) -> bool {
        !self.is_unavailable()
    }

    /// Out of service for the budget: drained, draining, down or failing.
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        self.drain || self.invalid || matches!(self.state.as_str(), "DOWN" | "FAIL" | "FAILING" | "UNKNOWN" | "FUTURE")
    }
}

/// A job that holds a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Job id.
    pub id: String,
    /// Owner.
    pub user: String,
    /// Job state (`RUNNING`, `COMPLETING`).
    pub state: String,
}

/// Why the scheduler could not be read or changed.
#[derive(Debug, Error)]
pub enum SchedulerError {
    /// The controller could not run the command.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The command ran but said no.
    #[error("`{command}` on `{host}` failed: {message}")]
    Refused {
        /// Controller.
        host: String,
        /// The command.
        command: String,
        /// What it printed.
        message: String,
    },
    /// The output could not be read.
    #[error("cannot read `{command}` on `{host}`: {message}")]
    Unreadable {
        /// Controller.
        host: String,
        /// The command.
        command: String,
        /// Why.
        message: String,
    },
}

/// What a rolling change needs from the scheduler.
pub trait Scheduler: Sync {
    /// Every node the scheduler knows, by name; `None` when no scheduler answers
    /// (nothing is deployed yet, so nothing runs and nothing needs a drain).
    fn nodes(&self) -> impl Future<Output = Result<Option<BTreeMap<String, NodeStatus>>, SchedulerError>> + Send;
    /// Sets DRAIN with `reason`: running jobs finish, no new job starts.
    fn drain(&self, node: &str, reason: &str) -> impl Future<Output = Result<(), SchedulerError>> + Send;
    /// Clears DRAIN (and DOWN): the node takes jobs again.
    fn resume(&self, node: &str) -> impl Future<Output = Result<(), SchedulerError>> + Send;
    /// The jobs running or completing on `node`.
    fn jobs_on(&self, node: &str) -> impl Future<Output = Result<Vec<Job>, SchedulerError>> + Send;
    /// Requeues `jobs` (they run again elsewhere, from the start).
    fn requeue(&self, jobs: &[String]) -> impl Future<Output = Result<(), SchedulerError>> + Send;
}

/// Slurm through its commands on the controller.
pub struct Slurm<'a, E: Executor> {
    controller: &'a E,
}

impl<'a, E: Executor> Slurm<'a, E> {
    /// Slurm as `controller` sees it.
    pub fn new(controller: &'a E) -> Self {
        Self { controller }
    }

    async fn run(&self, argv: &[&str]) -> Result<String, SchedulerError> {
        let argv: Vec<String> = argv.iter().map(|word| (*word).to_owned()).collect();
        let output = self.controller.exec(&argv).await?;
        if output.success() {
            Ok(output.stdout_text())
        } else {
            Err(SchedulerError::Refused {
                host: self.controller.host().to_owned(),
                command: argv.join(" "),
                message: output.stderr_tail(),
            })
        }
    }
}

/// How often a refused resume is tried, [`RESUME_RETRY`] apart: slurmd registers a few
/// seconds after its restart.
const RESUME_ATTEMPTS: u32 = 15;
const RESUME_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// `scontrol show node` with no slurm.conf (or no slurmctld) fails at once instead
/// of looking for a configless controller in DNS for 10 s.
const SHOW_NODES: &str = r#"test -f "${SLURM_CONF:-/etc/slurm/slurm.conf}" || exit 3
scontrol show node 2>&1 || exit 4"#;

impl<E: Executor> Scheduler for Slurm<'_, E> {
    async fn nodes(&self) -> Result<Option<BTreeMap<String, NodeStatus>>, SchedulerError> {
        let argv = vec!["sh".to_owned(), "-c".to_owned(), SHOW_NODES.to_owned()];
        let output = self.controller.exec(&argv).await?;
        // 3: no slurm.conf; 4: no slurmctld answers. Either way nothing runs jobs.
        if matches!(output.status, crate::transport::ExitStatus::Code(3 | 4)) {
            return Ok(None);
        }
        let text = output.stdout_text();
        parse_nodes(&text).map(Some).map_err(|message| SchedulerError::Unreadable {
            host: self.controller.host().to_owned(),
            command: "scontrol show node".to_owned(),
            message,
        })
    }

    async fn drain(&self, node: &str, reason: &str) -> Result<(), SchedulerError> {
        let (nodename, reason) = (format!("nodename={node}"), format!("reason={reason}"));
        self.run(&["scontrol", "update", &nodename, "state=drain", &reason]).await.map(drop)
    }

    async fn resume(&self, node: &str) -> Result<(), SchedulerError> {
        let nodename = format!("nodename={node}");
        let mut attempts = 0;
        loop {
            let Err(error) = self.run(&["scontrol", "update", &nodename, "state=resume"]).await else {
                return Ok(());
            };
            // A node whose slurmd the change just restarted is refused ("Invalid node
            // state specified") until it registers again, and registering may return it
            // to service by itself (ReturnToService=2, after it was down): either way the
            // resume is done once the node serves, and worth a retry while it does not.
            attempts += 1;
            if let Ok(Some(nodes)) = self.nodes().await
                && nodes.get(node).is_some_and(NodeStatus::is_serving)
            {
                return Ok(());
            }
            if attempts >= RESUME_ATTEMPTS {
                return Err(error);
            }
            tokio::time::sleep(RESUME_RETRY).await;
        }
    }

    async fn jobs_on(&self, node: &str) -> Result<Vec<Job>, SchedulerError> {
        // Default states (pending, running, completing): an epilog still running holds the node.
        let text = self.run(&["squeue", "-h", "-w", node, "-o", "%i|%u|%T"]).await?;
        Ok(parse_jobs(&text))
    }

    async fn requeue(&self, jobs: &[String]) -> Result<(), SchedulerError> {
        if jobs.is_empty() {
            return Ok(());
        }
        let list = jobs.join(",");
        self.run(&["scontrol", "requeue", &list]).await.map(drop)
    }
}

/// `scontrol show node` → states by node.
///
/// # Errors
/// When the text is not `scontrol show node` output.
pub fn parse_nodes(text: &str) -> Result<BTreeMap<String, NodeStatus>, String> {
    let nodes = parse_scontrol_nodes(text).map_err(|error| error.to_string())?;
    Ok(nodes
        .nodes
        .into_iter()
        .map(|node| {
            let busy = matches!(node.state.as_str(), "ALLOCATED" | "MIXED" | "COMPLETING")
                || node.flags.iter().any(|flag| flag == "COMPLETING");
            let invalid = node.state == "INVAL" || node.flags.iter().any(|flag| flag == "INVALID_REG");
            let status = NodeStatus { state: node.state, drain: node.drain, busy, reason: node.reason, invalid };
            (node.name, status)
        })
        .collect())
}

/// `squeue -h -o '%i|%u|%T'` → jobs.
#[must_use]
pub fn parse_jobs(text: &str) -> Vec<Job> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.trim().splitn(3, '|');
            let id = fields.next().filter(|id| !id.is_empty())?;
            Some(Job {
                id: id.to_owned(),
                user: fields.next().unwrap_or_default().to_owned(),
                state: fields.next().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parsers").join(name);
        std::fs::read_to_string(&path).expect("fixture")
    }

    #[test]
    fn real_scontrol_output_says_which_nodes_are_empty() {
        // Recorded on Slurm 22.05.8: gpu01 MIXED, gpu02 IDLE+DRAIN, gpu03/04 DOWN*.
        let nodes = parse_nodes(&fixture("scontrol_22.05.8_show_node_4nodes.txt")).expect("parses");
        assert_eq!(nodes.keys().collect::<Vec<_>>(), ["gpu01", "gpu02", "gpu03", "gpu04"]);
        assert!(nodes["gpu01"].busy && !nodes["gpu01"].drain && !nodes["gpu01"].is_unavailable());
        assert!(nodes["gpu02"].is_empty_drained() && nodes["gpu02"].is_unavailable());
        assert!(nodes["gpu03"].is_unavailable(), "{:?}", nodes["gpu03"]);
    }

    #[test]
    fn a_resume_is_done_once_the_node_serves() {
        // Recorded on Slurm 22.05.8: gpu01 MIXED serves; gpu02 IDLE+DRAIN and gpu03 DOWN* do not.
        let nodes = parse_nodes(&fixture("scontrol_22.05.8_show_node_4nodes.txt")).expect("parses");
        assert!(nodes["gpu01"].is_serving());
        assert!(!nodes["gpu02"].is_serving() && !nodes["gpu03"].is_serving());
        let registering = parse_nodes("NodeName=n1 State=IDLE+DRAIN+NOT_RESPONDING\n").expect("parses");
        assert!(!registering["n1"].is_serving(), "drained and not yet registered: retry");
    }

    #[test]
    fn draining_is_not_empty() {
        let text = "NodeName=n1 State=MIXED+DRAIN Partitions=gpu\n   Reason=toolkit:rollout r1 drain: x [root@2026-11-25T10:00:00]\n";
        let nodes = parse_nodes(text).expect("parses");
        let n1 = &nodes["n1"];
        assert!(n1.drain && n1.busy && !n1.is_empty_drained());
        assert_eq!(n1.reason.as_deref(), Some("toolkit:rollout r1 drain: x"));
        let completing = parse_nodes("NodeName=n2 State=IDLE+COMPLETING+DRAIN\n").expect("parses");
        assert!(!completing["n2"].is_empty_drained());
    }

    #[test]
    fn a_registration_below_the_node_line_is_invalid() {
        // As `scontrol show node` prints it on 22.05.8 (node_state_string_complete).
        let text = "NodeName=node03 State=IDLE+DRAIN+INVALID_REG Partitions=gpu\n   Reason=gres/gpu count reported lower than configured (4 < 8) [slurm@2026-12-05T10:00:00]\n";
        let nodes = parse_nodes(text).expect("parses");
        assert!(nodes["node03"].invalid && nodes["node03"].is_unavailable() && nodes["node03"].is_empty_drained());
        let valid = parse_nodes("NodeName=node04 State=IDLE+DRAIN\n").expect("parses");
        assert!(!valid["node04"].invalid);
    }

    #[test]
    fn jobs_are_read_from_squeue() {
        let jobs = parse_jobs("42|alice|RUNNING\n43|bob|COMPLETING\n\n");
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[1].id.as_str(), jobs[1].user.as_str(), jobs[1].state.as_str()), ("43", "bob", "COMPLETING"));
    }
}
