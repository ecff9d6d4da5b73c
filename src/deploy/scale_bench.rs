//! `benches/deploy_scale.sh`: a whole deploy of a generated blueprint through the
//! real observe, planner, walker and state writer, over simulated hosts
//! ([`crate::apply::sim`]) — a first deploy on empty hosts, then a deploy with
//! nothing to change — so the orchestration cost at thousands of hosts is measured
//! without the hosts. Prints figures, asserts only that the deploys did their job.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use super::ops::{self, Outcome, Request, Review};
use super::rollout::NoHooks;
use crate::apply::ApplyOptions;
use crate::apply::sim::SimCluster;
use crate::plan::Plan;
use crate::plan::diff::PlanInputs;
use crate::render::Renderer;

/// Says yes without asking, as `--yes` does.
struct Yes;

impl Review for Yes {
    fn review(&self, _plan: &Plan, unreachable: &std::collections::BTreeMap<String, String>) -> Result<bool, String> {
        assert!(unreachable.is_empty(), "every simulated host answers: {unreachable:?}");
        Ok(true)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by benches/deploy_scale.sh in release mode"]
async fn bench_deploy_scale() {
    let Some(path) = std::env::var_os("TOOLKIT_BENCH_BLUEPRINT") else {
        eprintln!("set TOOLKIT_BENCH_BLUEPRINT to a blueprint (benches/deploy_scale.sh does)");
        return;
    };
    let started = Instant::now();
    let loaded = crate::blueprint::load(Path::new(&path)).expect("the blueprint loads");
    let renderer = Renderer::embedded().expect("templates");
    let offline = super::health::compile(&loaded, None, &renderer).expect("the blueprint compiles");
    let dir = tempfile::tempdir().expect("tempdir");
    let inventory_path = dir.path().join("inventory.yaml");
    std::fs::write(&inventory_path, inventory(&offline.model, dir.path())).expect("write the inventory");
    let inventory = crate::inventory::load(&inventory_path).expect("the generated inventory loads");
    super::secrets::ensure(&inventory.inventory, dir.path()).expect("secrets");
    let compiled = super::health::compile(&loaded, Some(&inventory), &renderer).expect("the blueprint compiles");
    let compiled_in = started.elapsed();
    let graph = &compiled.graph;
    let hosts = graph.resources.iter().map(crate::resource::Resource::target).collect::<std::collections::HashSet<_>>();
    let cluster = loaded.blueprint.cluster.name.clone();
    let sim = SimCluster::new(graph);
    let state_path = dir.path().join("state.json");
    let inputs = PlanInputs { cluster: cluster.clone(), blueprint_sha256: "bench".to_owned(), inventory_sha256: None };
    let deploy = || async {
        let request = Request::<SimCluster, NoHooks> {
            graph,
            cluster: &cluster,
            connector: &sim,
            inputs: inputs.clone(),
            saved: None,
            state_path: Some(&state_path),
            api: None,
            rollout: None,
            apply: ApplyOptions::default(),
            dry_run: false,
        };
        let (started, cpu) = (Instant::now(), cpu_seconds());
        let outcome = ops::deploy(request, &Yes).await.expect("the deploy runs");
        (outcome, started.elapsed(), cpu_seconds() - cpu)
    };
    let (first, first_in, _) = deploy().await;
    let changed = match &first {
        Outcome::Applied { plan, report } => {
            let failed: Vec<String> = report
                .apply
                .outcomes
                .iter()
                .filter(|outcome| !outcome.outcome.is_success())
                .take(5)
                .map(|outcome| format!("{}: {:?}", outcome.id, outcome.outcome))
                .collect();
            assert!(report.is_success(), "the first deploy applies everything: {:?} {failed:#?}", report.stopped);
            plan.changes.len()
        }
        other => panic!("the first deploy applies: {other:?}"),
    };
    let profiled = Profiled::start();
    let (again, again_in, again_cpu) = deploy().await;
    drop(profiled);
    assert!(matches!(again, Outcome::NothingToDo(_)), "a converged cluster has nothing to do: {again:?}");
    let state_bytes = std::fs::metadata(&state_path).map_or(0, |meta| meta.len());
    // The share of the no-change deploy that is reading the state file.
    let started = Instant::now();
    let state = crate::plan::state::State::load(&state_path, &cluster).expect("the state loads");
    let load_in = started.elapsed();
    drop(state);
    println!(
        "deploy_scale hosts={} resources={} compile_s={:.2} first_s={:.2} changes={changed} nochange_s={:.2} \
         nochange_cpu_s={again_cpu:.2} state_load_s={:.2} state_mib={:.1} peak_rss_mib={}",
        hosts.len(),
        graph.resources.len(),
        compiled_in.as_secs_f64(),
        first_in.as_secs_f64(),
        again_in.as_secs_f64(),
        load_in.as_secs_f64(),
        state_bytes as f64 / 1_048_576.0,
        peak_rss_kib() / 1024
    );
}

/// `perf record --control=fifo:CTL`, with `TOOLKIT_BENCH_PERF_CTL=CTL`, records the
/// no-change deploy alone (start perf with `-D -1`): what the bench is about, without
/// the compile and the first deploy around it.
struct Profiled(Option<std::fs::File>);

impl Profiled {
    fn start() -> Self {
        let control = std::env::var_os("TOOLKIT_BENCH_PERF_CTL")
            .and_then(|path| std::fs::OpenOptions::new().write(true).open(path).ok());
        let mut profiled = Self(control);
        profiled.tell("enable");
        profiled
    }

    fn tell(&mut self, command: &str) {
        if let Some(control) = &mut self.0 {
            use std::io::Write as _;
            let _ = writeln!(control, "{command}").and_then(|()| control.flush());
        }
    }
}

impl Drop for Profiled {
    fn drop(&mut self) {
        self.tell("disable");
    }
}

/// CPU time this process has used (user and system, every thread), from
/// `/proc/self/stat`: on a machine other builds load, the figure the load moves least.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    // utime and stime are fields 14 and 15 of proc(5): 12 and 13 after the name.
    let ticks: f64 = [11, 12].iter().filter_map(|&at| fields.get(at)?.parse::<f64>().ok()).sum();
    // USER_HZ is 100 on every Linux this runs on.
    ticks / 100.0
}

/// Peak resident memory of this process (`VmHWM`), KiB.
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// An inventory for every node and switch of `model`: addresses and rail MACs made
/// up (nothing dials them), secrets generated under `dir`.
fn inventory(model: &crate::model::Model, dir: &Path) -> String {
    let mut text = String::from("version: 1\ndefaults: { user: root }\nhosts:\n");
    for (index, node) in model.nodes.iter().enumerate() {
        let [_, _, high, low] = u32::try_from(index).expect("index").to_be_bytes();
        let macs: Vec<String> = node
            .rails
            .iter()
            .map(|rail| format!("{}: \"02:00:{:02x}:{high:02x}:{low:02x}:00\"", rail.rail, rail.rail))
            .collect();
        let _ = writeln!(
            text,
            "  {}: {{ address: {}, rail_macs: {{ {} }} }}",
            node.name,
            node.mgmt_address,
            macs.join(", ")
        );
    }
    text.push_str("switches:\n");
    for (index, switch) in model.fabric.switches.iter().enumerate() {
        let [_, _, high, low] = u32::try_from(index).expect("index").to_be_bytes();
        let _ = writeln!(text, "  {}: {{ address: 172.16.{high}.{low}, os: frr }}", switch.name);
    }
    let _ = write!(
        text,
        "secrets:\n  munge_key: {{ file: {0}/munge.key }}\n  slurmdbd_password: {{ file: {0}/slurmdbd.password }}\n",
        dir.display()
    );
    text
}
