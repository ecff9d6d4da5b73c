//! The parallel walker: runs the changed resources in dependency order, hosts in
//! parallel, one connection and one step at a time per host.
//!
//! Stage: apply. Input: a [`ResourceGraph`], the set of resource indexes to change,
//! a [`Connector`] and [`ApplyOptions`]. Output: an [`ApplyReport`].
//!
//! Rules (Terraform's walk, Ansible's failure policy without its known bugs):
//! - a resource starts when every resource it depends on, on any host, succeeded;
//!   a service also waits for the files it watches;
//! - each host runs its resources one at a time over its single connection, the
//!   first ready one in graph order first; packages ready together on a host are
//!   installed in one `apt-get` call;
//! - at most `parallel` steps (and connection attempts) run at once, across hosts;
//!   nothing holds a slot while waiting for a dependency, so no host can starve
//!   another;
//! - a failure marks its transitive dependents `Skipped { upstream }`; everything
//!   else continues, on that host too;
//! - a host is connected only when it has work, so an unchanged host costs nothing;
//! - a service is restarted or reloaded when a file it watches changed in this
//!   run, once, after those files;
//! - when more than `max_fail_percent` of the hosts with work have failed, hosts
//!   not yet started are skipped (`Aborted`); started ones finish;
//! - on cancellation no new step starts, in-flight steps finish, the rest is
//!   `Skipped { Cancelled }`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

use super::ops::{self, Step};
use super::{ApplyOptions, ApplyReport, Outcome, ResourceOutcome, SkipReason};
use crate::graph::ResourceGraph;
use crate::resource::{Desired, OnChange};
use crate::transport::{Connector, Executor};

/// Applies the resources whose indexes are in `changes` to their targets.
/// Resources not in `changes` are `Unchanged` (or `Skipped` when upstream of them
/// failed); they connect nothing and run nothing, except a service whose watched
/// file changes in this run, which is restarted.
pub async fn apply<C: Connector, S: std::hash::BuildHasher>(
    graph: &ResourceGraph,
    changes: &HashSet<usize, S>,
    connector: &C,
    options: &ApplyOptions,
) -> ApplyReport {
    let count = graph.resources.len();
    let position: HashMap<usize, usize> = graph.ordered().enumerate().map(|(rank, index)| (index, rank)).collect();
    let by_id: HashMap<&str, usize> =
        graph.resources.iter().enumerate().map(|(index, resource)| (resource.id.as_str(), index)).collect();
    let mut waits: Vec<Vec<usize>> = (0..count).map(|index| graph.dependencies(index).collect()).collect();
    let mut watched: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (index, resource) in graph.resources.iter().enumerate() {
        for id in resource.watches() {
            // Only files ordered before the service can be waited for without
            // risking a cycle the graph did not check.
            if let Some(&file) = by_id.get(id.as_str())
                && position.get(&file) < position.get(&index)
            {
                watched[index].push(file);
                if !waits[index].contains(&file) {
                    waits[index].push(file);
                }
            }
        }
    }
    // Hosts and each host's resources in input (rendering) order: readiness, not
    // position, enforces dependencies, so the order only says what goes first
    // among ready resources — and the input order is the one users wrote.
    let mut hosts: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut host_slot: HashMap<&str, usize> = HashMap::new();
    let mut host_of = Vec::with_capacity(count);
    for index in 0..count {
        let host = graph.resources[index].target();
        let slot = *host_slot.entry(host).or_insert_with(|| {
            hosts.push((host, Vec::new()));
            hosts.len() - 1
        });
        hosts[slot].1.push(index);
        host_of.push(slot);
    }
    // Who to wake when a resource settles: the hosts of what waits for it.
    let mut wakes: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (index, waited) in waits.iter().enumerate() {
        for &dependency in waited {
            if !wakes[dependency].contains(&host_of[index]) {
                wakes[dependency].push(host_of[index]);
            }
        }
    }
    let hosts_with_work =
        hosts.iter().filter(|(_, resources)| resources.iter().any(|index| changes.contains(index))).count();
    let run = Run {
        graph,
        changes: (0..count).map(|index| changes.contains(&index)).collect(),
        waits,
        watched,
        connector,
        options,
        semaphore: Semaphore::new(options.parallel.max(1)),
        wakers: hosts.iter().map(|_| Notify::new()).collect(),
        wakes,
        hosts_with_work,
        state: Mutex::new(State { outcomes: vec![None; count], failed_hosts: HashSet::new(), aborted: false }),
    };
    futures::future::join_all(
        hosts.into_iter().enumerate().map(|(slot, (host, pending))| run.host(slot, host, pending)),
    )
    .await;
    let state = run.state.into_inner().unwrap_or_else(PoisonError::into_inner);
    let mut outcomes = Vec::with_capacity(count);
    for index in graph.ordered() {
        let resource = &graph.resources[index];
        // Every resource is decided before its host's future ends; the fallback
        // only guards against a bug turning into a panic.
        let (outcome, elapsed) = state.outcomes[index]
            .clone()
            .unwrap_or((Outcome::Skipped { reason: SkipReason::Cancelled }, Duration::ZERO));
        outcomes.push(ResourceOutcome {
            index,
            id: resource.id.clone(),
            target: resource.target().to_string(),
            outcome,
            elapsed_ms: elapsed.as_millis() as u64,
        });
    }
    ApplyReport { outcomes, cancelled: options.cancel.is_cancelled(), aborted: state.aborted }
}

struct State {
    outcomes: Vec<Option<(Outcome, Duration)>>,
    failed_hosts: HashSet<String>,
    aborted: bool,
}

struct Run<'a, C: Connector> {
    graph: &'a ResourceGraph,
    /// Per resource: whether it is to be changed.
    changes: Vec<bool>,
    /// Per resource: what it waits for (dependencies and watched files).
    waits: Vec<Vec<usize>>,
    /// Per service: the watched files it waits for.
    watched: Vec<Vec<usize>>,
    connector: &'a C,
    options: &'a ApplyOptions,
    semaphore: Semaphore,
    /// Per host: notified when something one of its resources waits for settles
    /// (a stored permit means no wake-up is lost between a scan and the wait).
    wakers: Vec<Notify>,
    /// Per resource: the hosts to wake when it settles.
    wakes: Vec<Vec<usize>>,
    hosts_with_work: usize,
    state: Mutex<State>,
}

enum Readiness {
    Blocked,
    Ready,
    Upstream(crate::resource::ResourceId),
}

/// A ready resource's work: `restart` is set for a service whose watched file changed.
struct Work {
    restart: Option<OnChange>,
}

impl<C: Connector> Run<'_, C> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn host(&self, slot: usize, host: &str, mut pending: Vec<usize>) {
        let mut executor: Option<Result<Arc<C::Executor>, String>> = None;
        // A host has started once its first step began; only hosts that have not
        // are held back when too many have failed.
        let mut started = false;
        while !pending.is_empty() {
            if self.options.cancel.is_cancelled() {
                self.skip_all(&pending, &SkipReason::Cancelled);
                return;
            }
            let Some((index, work)) = self.next_ready(&mut pending) else {
                if !pending.is_empty() {
                    tokio::select! {
                        () = self.wakers[slot].notified() => {}
                        () = self.options.cancel.cancelled() => {}
                    }
                }
                continue;
            };
            // One slot covers the connection and the first step, so a host is not
            // dialled long before it can work.
            let Some(_permit) = self.acquire().await else { continue };
            // Checked after waiting: other hosts may have failed meanwhile.
            if !started && self.lock().aborted {
                self.skip_all(&pending, &SkipReason::Aborted);
                return;
            }
            if executor.is_none() {
                executor = Some(self.connector.connect(host).await.map_err(|error| error.to_string()));
            }
            let batch = self.batch(index, &pending);
            pending.retain(|resource| !batch.contains(resource));
            started = true;
            let executor = match &executor {
                Some(Ok(executor)) => Arc::clone(executor),
                Some(Err(error)) => {
                    for &resource in &batch {
                        self.record(resource, Outcome::Failed { error: error.clone() }, Duration::ZERO);
                    }
                    continue;
                }
                None => continue,
            };
            let began = Instant::now();
            let results = self.perform(executor.as_ref(), &batch, work).await;
            let elapsed = began.elapsed();
            for (resource, result) in batch.iter().zip(results) {
                // Not attempted after a failure earlier in its batch: back to pending,
                // where it is skipped if it depends on the failure and retried if not.
                let Some(result) = result else {
                    pending.push(*resource);
                    pending.sort_unstable();
                    continue;
                };
                let outcome = match result {
                    Ok(Step::Changed) => Outcome::Changed,
                    Ok(Step::Unchanged) => Outcome::Unchanged,
                    Err(error) => Outcome::Failed { error },
                };
                self.record(*resource, outcome, elapsed);
            }
        }
    }

    /// A slot of the run's parallelism; `None` when cancelled while waiting.
    async fn acquire(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        // Cancellation wins over a permit that became free at the same time.
        tokio::select! {
            biased;
            () = self.options.cancel.cancelled() => None,
            permit = self.semaphore.acquire() => permit.ok(),
        }
    }

    /// Settles what can be settled without work (skips, no-ops) and returns the
    /// first ready resource that has work, leaving it in `pending`.
    fn next_ready(&self, pending: &mut Vec<usize>) -> Option<(usize, Work)> {
        let mut position = 0;
        while position < pending.len() {
            let index = pending[position];
            match self.readiness(index) {
                Readiness::Blocked => position += 1,
                Readiness::Upstream(id) => {
                    pending.remove(position);
                    self.record(index, Outcome::Skipped { reason: SkipReason::Upstream { id } }, Duration::ZERO);
                }
                Readiness::Ready => {
                    if let Some(work) = self.work(index) {
                        return Some((index, work));
                    }
                    pending.remove(position);
                    self.record(index, Outcome::Unchanged, Duration::ZERO);
                }
            }
        }
        None
    }

    fn readiness(&self, index: usize) -> Readiness {
        let state = self.lock();
        for &dependency in &self.waits[index] {
            match &state.outcomes[dependency] {
                None => return Readiness::Blocked,
                Some((Outcome::Skipped { reason: SkipReason::Upstream { id } }, _)) => {
                    return Readiness::Upstream(id.clone());
                }
                Some((Outcome::Failed { .. } | Outcome::Skipped { .. }, _)) => {
                    return Readiness::Upstream(self.graph.resources[dependency].id.clone());
                }
                Some(_) => {}
            }
        }
        Readiness::Ready
    }

    fn work(&self, index: usize) -> Option<Work> {
        let restart = match &*self.graph.resources[index].desired {
            Desired::Service { on_change, .. } => {
                let state = self.lock();
                let changed =
                    self.watched[index].iter().any(|&file| matches!(state.outcomes[file], Some((Outcome::Changed, _))));
                changed.then_some(*on_change)
            }
            _ => None,
        };
        (self.changes[index] || restart.is_some()).then_some(Work { restart })
    }

    /// `index`, plus, for a package, every other package of the host that is ready
    /// and to be changed: one `apt-get` for all; for a plain file or directory, every
    /// other plain file or directory of the host whose dependencies are done or
    /// earlier in the batch: one round trip for all (the fan-out's common case).
    fn batch(&self, index: usize, pending: &[usize]) -> Vec<usize> {
        if self.writable(index) {
            return self.write_batch(index, pending);
        }
        if !matches!(*self.graph.resources[index].desired, Desired::Package { .. }) {
            return vec![index];
        }
        let mut batch = vec![index];
        batch.extend(pending.iter().copied().filter(|&other| {
            other != index
                && matches!(*self.graph.resources[other].desired, Desired::Package { .. })
                && self.changes[other]
                && matches!(self.readiness(other), Readiness::Ready)
        }));
        batch
    }

    /// A file without a check command (the check runs per file) or a directory.
    fn writable(&self, index: usize) -> bool {
        match &*self.graph.resources[index].desired {
            Desired::File { check: None, content, .. } => !content.is_unresolved(),
            Desired::Directory { .. } => true,
            _ => false,
        }
    }

    fn write_batch(&self, index: usize, pending: &[usize]) -> Vec<usize> {
        // Bounds keep one script's argv and input reasonable.
        const MAX_ITEMS: usize = 256;
        const MAX_BYTES: usize = 16 * 1024 * 1024;
        let size = |i: usize| match &*self.graph.resources[i].desired {
            Desired::File { content, .. } => content.len(),
            _ => 0,
        };
        let mut batch = vec![index];
        let mut bytes = size(index);
        let mut grew = true;
        while grew && batch.len() < MAX_ITEMS {
            grew = false;
            for &other in pending {
                if batch.len() >= MAX_ITEMS || batch.contains(&other) || !self.changes[other] || !self.writable(other) {
                    continue;
                }
                if bytes + size(other) > MAX_BYTES {
                    continue;
                }
                let state = self.lock();
                let ready = self.waits[other].iter().all(|dependency| {
                    batch.contains(dependency)
                        || matches!(state.outcomes[*dependency], Some((Outcome::Changed | Outcome::Unchanged, _)))
                });
                drop(state);
                if ready {
                    batch.push(other);
                    bytes += size(other);
                    grew = true;
                }
            }
        }
        batch
    }

    async fn perform(&self, executor: &C::Executor, batch: &[usize], work: Work) -> Vec<Option<Result<Step, String>>> {
        let resources: Vec<_> = batch.iter().map(|&index| &self.graph.resources[index]).collect();
        if resources.len() > 1 && self.writable(batch[0]) {
            tracing::info!(host = executor.host(), items = resources.len(), "writing files");
            let desired: Vec<&Desired> = resources.iter().map(|resource| &*resource.desired).collect();
            return ops::write_batch(executor, &desired, self.options.backup).await;
        }
        if resources.len() > 1 {
            let names: Vec<String> = resources
                .iter()
                .filter_map(|resource| match &*resource.desired {
                    Desired::Package { name } => Some(name.clone()),
                    _ => None,
                })
                .collect();
            tracing::info!(host = executor.host(), packages = names.len(), "installing packages");
            return match ops::install_packages(executor, &names).await {
                Ok(steps) => steps.into_iter().map(|step| Some(Ok(step))).collect(),
                Err(error) => vec![Some(Err(error.to_string())); batch.len()],
            };
        }
        let resource = resources[0];
        tracing::info!(host = executor.host(), id = %resource.id, "applying");
        vec![Some(
            ops::apply(executor, &resource.desired, work.restart, self.options.backup)
                .await
                .map_err(|error| error.to_string()),
        )]
    }

    fn record(&self, index: usize, outcome: Outcome, elapsed: Duration) {
        let resource = &self.graph.resources[index];
        match &outcome {
            Outcome::Failed { error } => tracing::warn!(id = %resource.id, %error, "failed"),
            Outcome::Changed => tracing::info!(id = %resource.id, "changed"),
            _ => tracing::debug!(id = %resource.id, ?outcome, "settled"),
        }
        if let Some(events) = &self.options.events {
            let _ = events.send(ResourceOutcome {
                index,
                id: resource.id.clone(),
                target: resource.target().to_string(),
                outcome: outcome.clone(),
                elapsed_ms: elapsed.as_millis() as u64,
            });
        }
        {
            let mut state = self.lock();
            if matches!(outcome, Outcome::Failed { .. })
                && state.failed_hosts.insert(resource.target().to_string())
                && let Some(percent) = self.options.max_fail_percent
                && state.failed_hosts.len() * 100 > usize::from(percent) * self.hosts_with_work
                && !state.aborted
            {
                state.aborted = true;
                tracing::warn!(
                    failed = state.failed_hosts.len(),
                    hosts = self.hosts_with_work,
                    "more than {percent}% of hosts failed: no new host starts"
                );
            }
            state.outcomes[index] = Some((outcome, elapsed));
        }
        for &slot in &self.wakes[index] {
            self.wakers[slot].notify_one();
        }
    }

    fn skip_all(&self, pending: &[usize], reason: &SkipReason) {
        for &index in pending {
            self.record(index, Outcome::Skipped { reason: reason.clone() }, Duration::ZERO);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::apply::fake::{Call, FakeConnector, Script, fresh_debian};
    use crate::graph;
    use crate::resource::{Content, Resource, ResourceId, Target};
    use crate::transport::{ExitStatus, Output};

    fn target(host: &str) -> Target {
        Target::node(host)
    }

    fn ids(list: &[&str]) -> Vec<ResourceId> {
        list.iter().map(|id| ResourceId((*id).into())).collect()
    }

    fn file(host: &str, path: &str, after: &[&str]) -> Resource {
        let desired = Desired::File {
            path: path.to_owned(),
            content: Content::new(format!("content of {path}\n")),
            mode: 0o644,
            owner: "root".to_owned(),
            group: "root".to_owned(),
            secret: false,
            check: None,
        };
        Resource::new(target(host), path, desired).after(ids(after))
    }

    fn package(host: &str, name: &str, after: &[&str]) -> Resource {
        Resource::new(target(host), name, Desired::Package { name: name.to_owned() }).after(ids(after))
    }

    fn service(host: &str, name: &str, watches: &[&str]) -> Resource {
        let desired = Desired::Service {
            name: name.to_owned(),
            enabled: true,
            running: true,
            watches: crate::resource::watched(&ids(watches)),
            on_change: OnChange::Restart,
        };
        Resource::new(target(host), name, desired).after(ids(watches))
    }

    /// Runs the walker over `resources`, changing all of them unless `changes` says
    /// which (by id).
    async fn walk(
        resources: Vec<Resource>,
        changes: Option<&[&str]>,
        connector: &FakeConnector,
        options: &ApplyOptions,
    ) -> ApplyReport {
        let graph = graph::build(resources).expect("graph");
        let changes: HashSet<usize> = graph
            .resources
            .iter()
            .enumerate()
            .filter(|(_, resource)| changes.is_none_or(|ids| ids.contains(&resource.id.as_str())))
            .map(|(index, _)| index)
            .collect();
        apply(&graph, &changes, connector, options).await
    }

    fn position(calls: &[Call], wanted: impl Fn(&Call) -> bool) -> usize {
        calls.iter().position(wanted).expect("call was made")
    }

    fn write_of(path: &str) -> impl Fn(&Call) -> bool + '_ {
        move |call| matches!(call, Call::Write { path: written, .. } if written == path)
    }

    #[tokio::test]
    async fn runs_dependencies_first_across_hosts() {
        let connector = FakeConnector::new(Script::new(fresh_debian));
        let report = walk(
            vec![
                file("node01", "/etc/slurm/slurm.conf", &["head:file:/etc/munge/munge.key"]),
                file("node02", "/etc/slurm/slurm.conf", &["head:file:/etc/munge/munge.key"]),
                file("head", "/etc/munge/munge.key", &[]),
                file("node01", "/etc/hosts", &[]),
            ],
            None,
            &connector,
            &ApplyOptions::default(),
        )
        .await;
        assert!(report.is_success(), "{report:?}");
        assert_eq!(report.counts().changed, 4);
        let calls = connector.script.calls();
        let key = position(&calls, write_of("/etc/munge/munge.key"));
        for (index, call) in calls.iter().enumerate() {
            if matches!(call, Call::Write { path, .. } if path == "/etc/slurm/slurm.conf") {
                assert!(index > key, "slurm.conf written before munge.key: {calls:?}");
            }
        }
    }

    #[tokio::test]
    async fn a_failure_skips_its_dependents_on_every_host_and_nothing_else() {
        let mut script = Script::new(fresh_debian);
        script.failing_writes.insert("/etc/munge/munge.key".to_owned());
        let connector = FakeConnector::new(script);
        let report = walk(
            vec![
                file("head", "/etc/munge/munge.key", &[]),
                file("head", "/etc/munge/after-key", &["head:file:/etc/munge/munge.key"]),
                file("node01", "/etc/slurm/slurm.conf", &["head:file:/etc/munge/after-key"]),
                file("head", "/etc/hosts", &[]),
                file("node01", "/etc/hosts", &[]),
            ],
            None,
            &connector,
            &ApplyOptions::default(),
        )
        .await;
        let failed = report.outcome("head:file:/etc/munge/munge.key").expect("outcome");
        assert!(matches!(failed, Outcome::Failed { error } if error.contains("rejected")), "{failed:?}");
        let upstream = Outcome::Skipped {
            reason: SkipReason::Upstream { id: ResourceId("head:file:/etc/munge/munge.key".into()) },
        };
        assert_eq!(report.outcome("head:file:/etc/munge/after-key"), Some(&upstream));
        // Transitively, on another host, naming the resource that failed.
        assert_eq!(report.outcome("node01:file:/etc/slurm/slurm.conf"), Some(&upstream));
        assert_eq!(report.outcome("head:file:/etc/hosts"), Some(&Outcome::Changed));
        assert_eq!(report.outcome("node01:file:/etc/hosts"), Some(&Outcome::Changed));
        assert_eq!(report.failed_targets().into_iter().collect::<Vec<_>>(), ["head"]);
        let calls = connector.script.calls();
        assert!(!calls.iter().any(write_of("/etc/slurm/slurm.conf")), "{calls:?}");
    }

    #[tokio::test]
    async fn an_unreachable_host_fails_its_work_and_skips_dependents_elsewhere() {
        let mut connector = FakeConnector::new(Script::new(fresh_debian));
        connector.unreachable.insert("node02".to_owned());
        let report = walk(
            vec![
                file("node02", "/etc/a", &[]),
                file("node02", "/etc/b", &[]),
                file("node01", "/etc/c", &["node02:file:/etc/a"]),
                file("node01", "/etc/d", &[]),
                file("node03", "/etc/e", &[]),
            ],
            None,
            &connector,
            &ApplyOptions::default(),
        )
        .await;
        for id in ["node02:file:/etc/a", "node02:file:/etc/b"] {
            let outcome = report.outcome(id).expect("outcome");
            assert!(
                matches!(outcome, Outcome::Failed { error } if error.contains("cannot connect to `node02`")),
                "{outcome:?}"
            );
        }
        assert!(matches!(report.outcome("node01:file:/etc/c"), Some(Outcome::Skipped { .. })));
        assert_eq!(report.outcome("node01:file:/etc/d"), Some(&Outcome::Changed));
        assert_eq!(report.outcome("node03:file:/etc/e"), Some(&Outcome::Changed));
        // One connection attempt per host, however many resources it has.
        let mut connects = connector.connects.lock().expect("connects").clone();
        connects.sort();
        assert_eq!(connects, ["node01", "node02", "node03"]);
    }

    #[tokio::test]
    async fn unchanged_hosts_are_not_contacted() {
        let connector = FakeConnector::new(Script::new(fresh_debian));
        let report = walk(
            vec![file("node01", "/etc/a", &[]), file("node02", "/etc/b", &["node01:file:/etc/a"])],
            Some(&["node02:file:/etc/b"]),
            &connector,
            &ApplyOptions::default(),
        )
        .await;
        assert_eq!(report.outcome("node01:file:/etc/a"), Some(&Outcome::Unchanged));
        assert_eq!(report.outcome("node02:file:/etc/b"), Some(&Outcome::Changed));
        assert_eq!(*connector.connects.lock().expect("connects"), ["node02"]);
    }

    #[tokio::test]
    async fn max_fail_percent_stops_new_hosts_only() {
        let mut script = Script::new(fresh_debian);
        script.failing_writes.insert("/etc/bad".to_owned());
        let connector = FakeConnector::new(script);
        // One step at a time: hosts start in order, and host1 and host2 fail.
        let options = ApplyOptions { parallel: 1, max_fail_percent: Some(25), ..ApplyOptions::default() };
        let report = walk(
            vec![
                file("host1", "/etc/bad", &[]),
                file("host1", "/etc/good", &[]),
                file("host2", "/etc/bad", &[]),
                file("host2", "/etc/good", &[]),
                file("host3", "/etc/good", &[]),
                file("host4", "/etc/good", &[]),
            ],
            None,
            &connector,
            &options,
        )
        .await;
        assert!(report.aborted);
        // 1 of 4 failed hosts is not more than 25 %: host2 still started; 2 of 4 is.
        assert!(matches!(report.outcome("host2:file:/etc/bad"), Some(Outcome::Failed { .. })));
        // Started hosts finish their work.
        assert_eq!(report.outcome("host1:file:/etc/good"), Some(&Outcome::Changed));
        assert_eq!(report.outcome("host2:file:/etc/good"), Some(&Outcome::Changed));
        for id in ["host3:file:/etc/good", "host4:file:/etc/good"] {
            assert_eq!(report.outcome(id), Some(&Outcome::Skipped { reason: SkipReason::Aborted }), "{id}");
        }
        let written: HashSet<String> = connector.script.calls().iter().map(|call| call.host().to_owned()).collect();
        assert!(!written.contains("host3") && !written.contains("host4"), "{written:?}");
    }

    #[tokio::test]
    async fn cancellation_finishes_the_step_in_flight_and_skips_the_rest() {
        let options = ApplyOptions { parallel: 1, ..ApplyOptions::default() };
        let token = options.cancel.clone();
        // The first command that runs cancels the run, as a Ctrl-C during it would.
        let script = Script::new(move |host, argv| {
            token.cancel();
            fresh_debian(host, argv)
        });
        let connector = FakeConnector::new(script);
        let command = |host: &str, name: &str| {
            Resource::new(
                target(host),
                name,
                Desired::Command {
                    argv: vec!["true".to_owned()],
                    creates: None,
                    unless: None,
                    description: name.to_owned(),
                    undo: None,
                    reads: None,
                },
            )
        };
        let report = walk(
            vec![command("host1", "first"), command("host1", "second"), command("host2", "third")],
            None,
            &connector,
            &options,
        )
        .await;
        assert!(report.cancelled);
        let counts = report.counts();
        assert_eq!((counts.changed, counts.skipped), (1, 2), "{report:?}");
        assert!(
            report.outcomes.iter().any(|outcome| outcome.outcome == Outcome::Skipped { reason: SkipReason::Cancelled })
        );
    }

    #[tokio::test]
    async fn packages_ready_together_are_one_apt_get() {
        let connector = FakeConnector::new(Script::new(fresh_debian));
        let report = walk(
            vec![
                package("node01", "munge", &[]),
                file("node01", "/etc/x", &["node01:package:munge"]),
                package("node01", "frr", &["node01:file:/etc/x"]),
                package("node01", "slurmd", &[]),
            ],
            None,
            &connector,
            &ApplyOptions::default(),
        )
        .await;
        assert!(report.is_success(), "{report:?}");
        let installs: Vec<Vec<String>> = connector
            .script
            .calls()
            .into_iter()
            .filter_map(|call| match call {
                Call::Exec { argv, .. } if argv.iter().any(|word| word == "install") => Some(argv),
                _ => None,
            })
            .collect();
        assert_eq!(installs.len(), 2, "{installs:?}");
        // munge and slurmd are ready at once; frr only after /etc/x, which needs munge.
        assert!(installs[0].ends_with(&["munge".to_owned(), "slurmd".to_owned()]), "{installs:?}");
        assert!(installs[0].contains(&"DEBIAN_FRONTEND=noninteractive".to_owned()));
        assert!(installs[1].ends_with(&["frr".to_owned()]));
    }

    #[tokio::test]
    async fn a_service_restarts_once_after_its_changed_files_only() {
        let mut script = Script::new(|host: &str, argv: &[String]| {
            if argv.get(3).map(String::as_str) == Some("toolkit-service-facts") {
                let lines = "enabled active\n".repeat(argv.len() - 4);
                return Output {
                    status: ExitStatus::Code(0),
                    stdout: format!("systemd running\n{lines}").into_bytes(),
                    stderr: Vec::new(),
                };
            }
            fresh_debian(host, argv)
        });
        script.unchanged_writes.insert("/etc/frr/frr.conf".to_owned());
        let connector = FakeConnector::new(script);
        let report = walk(
            vec![
                file("node01", "/etc/slurm/slurm.conf", &[]),
                file("node01", "/etc/slurm/gres.conf", &[]),
                service("node01", "slurmd", &["node01:file:/etc/slurm/slurm.conf", "node01:file:/etc/slurm/gres.conf"]),
                file("node01", "/etc/frr/frr.conf", &[]),
                service("node01", "frr", &["node01:file:/etc/frr/frr.conf"]),
            ],
            // The services themselves are as desired; only their files are to change.
            Some(&[
                "node01:file:/etc/slurm/slurm.conf",
                "node01:file:/etc/slurm/gres.conf",
                "node01:file:/etc/frr/frr.conf",
            ]),
            &connector,
            &ApplyOptions::default(),
        )
        .await;
        assert_eq!(report.outcome("node01:service:slurmd"), Some(&Outcome::Changed));
        assert_eq!(report.outcome("node01:service:frr"), Some(&Outcome::Unchanged));
        let calls = connector.script.calls();
        let restarts: Vec<&Call> = calls
            .iter()
            .filter(
                |call| matches!(call, Call::Exec { argv, .. } if argv.get(1).map(String::as_str) == Some("restart")),
            )
            .collect();
        assert_eq!(restarts.len(), 1, "{calls:?}");
        let restart = position(&calls, |call| restarts[0] == call);
        assert!(restart > position(&calls, write_of("/etc/slurm/gres.conf")));
    }

    #[tokio::test]
    async fn parallelism_is_bounded_across_hosts() {
        let mut script = Script::new(fresh_debian);
        script.delay = Duration::from_millis(20);
        let connector = Arc::new(FakeConnector::new(script));
        let resources = (1..=6).map(|n| file(&format!("host{n}"), "/etc/a", &[])).collect();
        let options = ApplyOptions { parallel: 2, ..ApplyOptions::default() };
        let report = walk(resources, None, &connector, &options).await;
        assert!(report.is_success());
        assert_eq!(connector.script.max_in_flight.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_unresolved_secret_is_refused_without_touching_the_host() {
        let connector = FakeConnector::new(Script::new(fresh_debian));
        let secret = Resource::new(
            target("node01"),
            "/etc/munge/munge.key",
            Desired::File {
                path: "/etc/munge/munge.key".to_owned(),
                content: Content::unresolved_secret(),
                mode: 0o400,
                owner: "munge".to_owned(),
                group: "munge".to_owned(),
                secret: true,
                check: None,
            },
        );
        let report = walk(vec![secret], None, &connector, &ApplyOptions::default()).await;
        let outcome = report.outcome("node01:file:/etc/munge/munge.key").expect("outcome");
        assert!(matches!(outcome, Outcome::Failed { error } if error.contains("could not be read")), "{outcome:?}");
        assert!(connector.script.calls().is_empty());
    }

    #[test]
    fn the_report_serializes_for_machines() {
        let report = ApplyReport {
            outcomes: vec![ResourceOutcome {
                index: 0,
                id: ResourceId("n:file:/x".into()),
                target: "n".to_owned(),
                outcome: Outcome::Skipped { reason: SkipReason::Upstream { id: ResourceId("h:file:/y".into()) } },
                elapsed_ms: 0,
            }],
            cancelled: false,
            aborted: false,
        };
        let json = serde_json::to_string(&report).expect("json");
        assert_eq!(
            json,
            r#"{"outcomes":[{"id":"n:file:/x","target":"n","outcome":"skipped","reason":"upstream","failed_upstream":"h:file:/y","elapsed_ms":0}],"cancelled":false,"aborted":false}"#
        );
    }
}
/// Many hosts waiting on one resource of another host: every host wakes once per
/// settled dependency of its own, not once per outcome anywhere.
#[cfg(test)]
mod scale {
    use std::collections::HashSet;

    use super::*;
    use crate::apply::fake::{FakeConnector, Script, fresh_debian};
    use crate::graph;
    use crate::resource::{Content, Resource, ResourceId, Target};

    #[tokio::test]
    async fn thousands_of_hosts_behind_one_head_resource() {
        let file = |host: &str, path: &str, after: Option<&str>| {
            Resource::new(
                Target::node(host),
                path,
                Desired::File {
                    path: path.to_owned(),
                    content: Content::new(String::from("x")),
                    mode: 0o644,
                    owner: "root".to_owned(),
                    group: "root".to_owned(),
                    secret: false,
                    check: None,
                },
            )
            .after(after.map(|id| ResourceId(id.into())))
        };
        let mut resources = vec![file("head", "/etc/key", None)];
        for n in 0..2000 {
            let host = format!("node{n:04}");
            for k in 0..5 {
                resources.push(file(&host, &format!("/etc/f{k}"), (k == 4).then_some("head:file:/etc/key")));
            }
        }
        let graph = graph::build(resources).expect("graph");
        let everything: HashSet<usize> = (0..graph.resources.len()).collect();
        let connector = FakeConnector::new(Script::new(fresh_debian));
        let report = apply(&graph, &everything, &connector, &ApplyOptions::default()).await;
        assert!(report.is_success());
        assert_eq!(report.counts().changed, 10_001);
        let calls = connector.script.calls();
        let key = calls.iter().position(|call| call.host() == "head").expect("head written");
        let first_dependent = calls
            .iter()
            .position(|call| matches!(call, crate::apply::fake::Call::Write { path, .. } if path == "/etc/f4"))
            .expect("dependents written");
        assert!(key < first_dependent);
    }
}
