//! The repair service as resources on the Slurm controller: the program, its policy,
//! a timer that runs a pass every `monitoring.repair.interval`, and the webhook
//! Alertmanager posts toolkit's health alerts to (each post runs a pass at once).
//! The BMC credentials file is rendered by `render::monitoring`, which has the
//! secrets; the state file is the service's own and never a resource (a deploy must
//! not reset a ladder in progress).
//!
//! Stage: health (render-time, pure; `deploy` calls it). Input: the [`Policy`], the
//! controller's name and the address Alertmanager reaches it at. Output: [`Resource`]s.

use super::Policy;
use crate::render::common::{file, service};
use crate::resource::{Content, Desired, OnChange, Resource, Target};

/// The program.
pub const PROGRAM: &str = "/usr/local/lib/toolkit/repair/toolkit-repair";
/// What it runs with.
pub const POLICY: &str = "/etc/toolkit/repair/policy.json";
/// Where it keeps node, step, since and attempts (written by the service alone).
pub const STATE: &str = "/var/lib/toolkit/repair/state.json";
/// Executables called with a node and its RMA record when it goes to RMA.
pub const RMA_HOOKS: &str = "/etc/toolkit/repair/rma.d";
/// The program's text.
pub const TEXT: &str = include_str!("../../../templates/health/toolkit-repair.py");

pub use crate::model::monitoring::{REPAIR_WEBHOOK_PORT as WEBHOOK_PORT, repair_webhook_url as webhook_url};

/// The service on `controller`, its webhook listening on `address`.
#[must_use]
pub fn resources(policy: &Policy, controller: &str, address: &str) -> Vec<Resource> {
    let target = Target::node(controller);
    let directory = |path: &str| {
        Resource::new(
            target.clone(),
            path,
            Desired::Directory { path: path.to_owned(), mode: 0o755, owner: "root".to_owned() },
        )
    };
    let program_dir = directory("/usr/local/lib/toolkit/repair");
    let etc = directory("/etc/toolkit/repair");
    let hooks = directory(RMA_HOOKS).after([etc.id.clone()]);
    let program = file(&target, PROGRAM, Content::new(TEXT.to_owned()), 0o755).after([program_dir.id.clone()]);
    let text = serde_json::to_string_pretty(policy).unwrap_or_default() + "\n";
    let policy_file = file(&target, POLICY, Content::new(text), 0o644).after([etc.id.clone()]);
    let interval = policy.interval_seconds;
    let pass = format!(
        "# Rendered by toolkit: one pass of the repair service (monitoring.repair).\n[Unit]\n\
         Description=toolkit repair service, one pass\nAfter=slurmctld.service\n\n[Service]\nType=oneshot\n\
         ExecStart={PROGRAM} pass\n"
    );
    let timer = format!(
        "# Rendered by toolkit: a repair pass every monitoring.repair.interval.\n[Unit]\n\
         Description=toolkit repair service, every {interval} s\n\n[Timer]\nOnActiveSec=0\n\
         OnUnitInactiveSec={interval}s\nAccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n"
    );
    let quoted = crate::transport::quote::quote(address);
    let webhook = format!(
        "# Rendered by toolkit: Alertmanager's health alerts wake the repair service.\n[Unit]\n\
         Description=toolkit repair service, Alertmanager webhook\nAfter=network-online.target slurmctld.service\n\n\
         [Service]\nExecStart={PROGRAM} serve {quoted} {WEBHOOK_PORT}\nRestart=always\nRestartSec=5\n\n\
         [Install]\nWantedBy=multi-user.target\n"
    );
    let pass_unit = file(&target, "/etc/systemd/system/toolkit-repair.service", Content::new(pass), 0o644)
        .after([program.id.clone(), policy_file.id.clone()]);
    let timer_unit = file(&target, "/etc/systemd/system/toolkit-repair.timer", Content::new(timer), 0o644);
    let webhook_unit =
        file(&target, "/etc/systemd/system/toolkit-repair-webhook.service", Content::new(webhook), 0o644)
            .after([program.id.clone(), policy_file.id.clone()]);
    let timer_running =
        service(&target, "toolkit-repair.timer", vec![pass_unit.id.clone(), timer_unit.id.clone()], OnChange::Restart);
    let webhook_running = service(
        &target,
        "toolkit-repair-webhook",
        vec![webhook_unit.id.clone(), program.id.clone(), policy_file.id.clone()],
        OnChange::Restart,
    );
    vec![
        program_dir,
        etc,
        hooks,
        program,
        policy_file,
        pass_unit,
        timer_unit,
        webhook_unit,
        timer_running,
        webhook_running,
    ]
}

#[cfg(test)]
mod tests {
    use super::super::decide::tests::cases;
    use super::*;

    /// The service's Python decision makes the same actions as [`super::super::decide`]
    /// on every case of its table.
    #[test]
    fn the_service_decides_as_toolkit_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let program = dir.path().join("toolkit-repair");
        std::fs::write(&program, TEXT).expect("write");
        let cases = cases();
        let input: Vec<serde_json::Value> = cases
            .iter()
            .map(|(_, policy, observed, state, now, _)| {
                serde_json::json!({ "policy": policy, "observed": observed, "state": state, "now": now })
            })
            .collect();
        let mut child = std::process::Command::new("python3")
            .arg(&program)
            .arg("decide")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let text = serde_json::to_string(&input).expect("serializes");
        std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), text.as_bytes()).expect("writes");
        drop(child.stdin.take());
        let output = child.wait_with_output().expect("waits");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let decided: Vec<Vec<super::super::Action>> = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stdout)));
        assert_eq!(decided.len(), cases.len());
        for ((name, .., expected), decided) in cases.iter().zip(decided) {
            assert_eq!(&decided, expected, "{name}");
        }
    }
}
