//! What a rolling change does to a node besides its resources: the health checks a
//! changed node must pass before it takes work again, and its reboot.
//!
//! Stage: roll out. Input: the [`Model`], the validator [`Catalog`], the [`Site`] and
//! a [`Connector`]. Output: a per-node verdict ([`NodeHooks::check`]), a rebooted
//! node ([`NodeHooks::reboot`]), and its BIOS and firmware changed and read back
//! through its BMC ([`NodeHooks::apply_bmc`], [`NodeHooks::verify_bmc`]).
//!
//! The checks are the node-level acceptance validators that say whether a node can
//! run jobs — its rails up, full MTU across them, its GPUs all there and healthy —
//! restricted to the changed nodes; validators that do not apply to the cluster (no
//! GPUs, InfiniBand instead of RoCE) are skipped as in `toolkit validate`.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::Model;
use crate::results::Verdict;
use crate::transport::Connector;
use crate::validate::catalog::Catalog;
use crate::validate::run::{self, Disposition, RunOptions};
use crate::validate::subjects::Site;

use super::firmware::BmcChanges;
use super::reboot::{RebootOptions, RedfishPowerCycle, reboot_with_fallback};
use super::rollout::NodeHooks;
use crate::resource::api::ApiDesired;

/// An error and its sources, on one line.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Validators a changed node must pass before it is resumed: each judges one node
/// (or the node's rails), quickly, without the scheduler.
pub const POST_CHANGE_VALIDATORS: &[&str] = &["rail-links", "mtu", "roce-qos", "gpu-inventory", "gpu-health"];

/// Of those, the ones that read real GPUs or RDMA NICs: not run on nodes whose GPUs
/// are device files only (the inventory's `fake_gpu_devices`, as in the lab), which
/// get no RoCE QoS either.
const GPU_VALIDATORS: &[&str] = &["roce-qos", "gpu-inventory", "gpu-health"];

/// Checks and reboots through the cluster's own validators and SSH.
pub struct ClusterHooks<'a, C: Connector> {
    /// The expanded cluster.
    pub model: &'a Model,
    /// The validators.
    pub catalog: &'a Catalog,
    /// Where the hosts are.
    pub site: &'a Site,
    /// SSH.
    pub connector: &'a C,
    /// Subjects run at once.
    pub parallel: usize,
    /// Nodes whose GPUs are device files only: their GPU checks are not run.
    pub fake_gpus: BTreeSet<String>,
    /// How long a reboot may take.
    pub reboot: RebootOptions,
    /// Power-cycles a host through its BMC when it does not come back by itself.
    pub power_cycle: Option<&'a RedfishPowerCycle>,
    /// The BMCs that take a drained node's BIOS and firmware changes.
    pub bmc: Option<&'a BmcChanges>,
}

impl<C: Connector> NodeHooks for ClusterHooks<'_, C> {
    async fn reboot(&self, host: &str) -> Result<(), String> {
        let report = reboot_with_fallback(self.connector, host, &self.reboot, self.power_cycle)
            .await
            .map_err(|error| error_chain(&error))?;
        tracing::info!(
            host,
            seconds = report.settled_after.as_secs_f64(),
            power_cycled = report.power_cycled,
            "rebooted into a new boot"
        );
        Ok(())
    }

    async fn apply_bmc(&self, host: &str, items: &[&ApiDesired]) -> Result<(), String> {
        match self.bmc {
            Some(bmc) => bmc.apply(host, items).await,
            None => Err(format!("`{host}`: no BMC client for its BIOS and firmware changes")),
        }
    }

    async fn verify_bmc(&self, host: &str, items: &[&ApiDesired]) -> Result<(), String> {
        match self.bmc {
            Some(bmc) => bmc.verify(host, items).await,
            None => Ok(()),
        }
    }

    async fn check(&self, hosts: &[String]) -> BTreeMap<String, Result<(), String>> {
        let (fake, real): (Vec<String>, Vec<String>) =
            hosts.iter().cloned().partition(|host| self.fake_gpus.contains(host));
        let mut verdicts = BTreeMap::new();
        for (group, gpus) in [(real, true), (fake, false)] {
            if !group.is_empty() {
                verdicts.extend(self.check_group(&group, gpus).await);
            }
        }
        verdicts
    }
}

impl<C: Connector> ClusterHooks<'_, C> {
    /// The post-change validators on `hosts`, the GPU ones only with `gpus`.
    async fn check_group(&self, hosts: &[String], gpus: bool) -> BTreeMap<String, Result<(), String>> {
        let nodes: BTreeSet<String> = hosts.iter().cloned().collect();
        let only = POST_CHANGE_VALIDATORS.iter().filter(|id| gpus || !GPU_VALIDATORS.contains(id));
        let options = RunOptions {
            only: Some(only.map(|id| (*id).to_owned()).collect()),
            nodes: Some(nodes),
            parallel: self.parallel.max(1),
            ..RunOptions::default()
        };
        let planned = match run::plan(self.catalog, self.model, self.site, &options) {
            Ok(planned) => planned,
            Err(problems) => {
                let problem = problems.join("; ");
                return hosts.iter().map(|host| (host.clone(), Err(format!("checks: {problem}")))).collect();
            }
        };
        let runnable: Vec<_> =
            planned.into_iter().filter(|item| matches!(item.disposition, Disposition::Run { .. })).collect();
        let outcome = run::execute(&runnable, self.model, self.site, self.connector, &options).await;
        verdicts(hosts, &outcome)
    }
}

/// Per host: `Err` with the ids of the validators it failed, or that could not judge
/// it (a check that cannot run on a node is no reason to give it work back): a node
/// verdict of `failed`, or a failed or erroring subject that names the host (its node
/// subject, or a pair or rail subject it is one end of).
fn verdicts(hosts: &[String], outcome: &run::RunOutcome) -> BTreeMap<String, Result<(), String>> {
    hosts
        .iter()
        .map(|host| {
            let mut failed: BTreeSet<&str> = outcome
                .node_verdicts
                .get(host)
                .into_iter()
                .flatten()
                .filter(|(_, verdict)| !matches!(verdict, Verdict::Passed | Verdict::Warning | Verdict::Skipped))
                .map(|(id, _)| id.as_str())
                .collect();
            for validator in &outcome.validators {
                let names_host = |subject: &str| {
                    subject
                        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
                        .any(|word| word == host)
                };
                if validator.subjects.iter().any(|subject| {
                    matches!(subject.verdict, Verdict::Failed | Verdict::Error) && names_host(&subject.subject)
                }) {
                    failed.insert(validator.id.as_str());
                }
            }
            let verdict =
                if failed.is_empty() { Ok(()) } else { Err(failed.into_iter().collect::<Vec<_>>().join(",")) };
            (host.clone(), verdict)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Docs, Scope, SubjectResult, ValidatorResult};

    #[test]
    fn a_node_fails_with_the_ids_of_what_it_failed() {
        let mut outcome = run::RunOutcome { validators: Vec::new(), node_verdicts: BTreeMap::new() };
        outcome.node_verdicts.insert(
            "node01".into(),
            [("mtu".to_owned(), Verdict::Passed), ("rail-links".to_owned(), Verdict::Passed)].into_iter().collect(),
        );
        outcome.node_verdicts.insert(
            "node02".into(),
            [("mtu".to_owned(), Verdict::Failed), ("rail-links".to_owned(), Verdict::Error)].into_iter().collect(),
        );
        let first = verdicts(&["node01".into(), "node02".into(), "node03".into()], &outcome);
        assert_eq!(first["node01"], Ok(()));
        assert_eq!(first["node02"], Err("mtu,rail-links".to_owned()));
        // Nothing applied to it (no rails, no GPUs): nothing failed.
        assert_eq!(first["node03"], Ok(()));

        // A node check that could not run (`ip` missing) names its node.
        let subject = |name: &str, verdict| SubjectResult { verdict, ..SubjectResult::judged(name, Vec::new()) };
        outcome.validators.push(ValidatorResult {
            id: "rail-links".into(),
            title: String::new(),
            failure: String::new(),
            docs: Docs { what: String::new(), why: String::new(), fix: String::new() },
            scope: Scope::Node,
            duration_seconds: None,
            subjects: vec![subject("node01", Verdict::Passed), subject("node03", Verdict::Error)],
        });
        let second = verdicts(&["node01".into(), "node03".into(), "node3".into()], &outcome);
        assert_eq!(second["node01"], Ok(()));
        assert_eq!(second["node03"], Err("rail-links".to_owned()));
        assert_eq!(second["node3"], Ok(()), "names are matched whole");
    }
}
