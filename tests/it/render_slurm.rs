//! Integration tests: render_slurm — the real slurmctld (Debian 12: Slurm 22.05)
//! reads the slurm.conf, gres.conf, topology.conf and cgroup.conf rendered for the
//! lab blueprint, and scontrol sees what the blueprint says.
//!
//! The configs are the production ones with the test-container overrides appended
//! through `scheduler.slurm.extra` (reference §5.2): local paths, the local host
//! as controller, a private munged, no cgroup plugins. Accounting and tenants are
//! off: QOS preemption and GPU TRES need a running slurmdbd.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use toolkit::model::slurm::slurm;
use toolkit::render::Renderer;
use toolkit::render::slurm::{Secrets, files};

/// A program the test needs: `None` (with a note on stderr) when it is absent and
/// CI did not ask for every tool; a failure when it did.
fn tool(name: &str) -> Option<PathBuf> {
    let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("TOOLKIT_REQUIRE_TOOLS").is_none(),
            "`{name}` is required (TOOLKIT_REQUIRE_TOOLS is set): apt-get install slurmctld slurm-client munge"
        );
        eprintln!("skipping: `{name}` is not installed (apt-get install slurmctld slurm-client munge)");
    }
    found
}

/// Kills the daemons it holds when the test ends, however it ends.
struct Daemons(Vec<Child>);

impl Drop for Daemons {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn read(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let _ = file.read_to_string(&mut text);
    }
    text
}

fn command_output(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .unwrap_or_default()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free port")
}

/// The value scontrol shows for `key` (`Key   = value` lines).
fn shown<'a>(config: &'a str, key: &str) -> Option<&'a str> {
    config.lines().find_map(|line| {
        let (name, value) = line.split_once('=')?;
        (name.trim() == key).then(|| value.trim())
    })
}

#[test]
fn slurmctld_starts_on_the_rendered_lab_config() {
    let (Some(slurmctld), Some(scontrol), Some(munged)) = (tool("slurmctld"), tool("scontrol"), tool("munged")) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    // munged wants every directory above its socket searchable by all.
    set_mode(root, 0o755);
    let path = |name: &str| root.join(name).display().to_string();

    let key = root.join("munge.key");
    std::fs::write(&key, "toolkit-render-slurm-test-key-".repeat(4)).expect("write munge key");
    set_mode(&key, 0o400);
    let socket = path("munge.sock");
    let mut daemons = Daemons(Vec::new());
    daemons.0.push(
        Command::new(&munged)
            .args([
                "-F",
                &format!("--socket={socket}"),
                &format!("--key-file={}", key.display()),
                &format!("--pid-file={}", path("munged.pid")),
                &format!("--log-file={}", path("munged.log")),
                &format!("--seed-file={}", path("munged.seed")),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("munged starts"),
    );

    let hostname = command_output("hostname", &["-s"]);
    let user = command_output("id", &["-un"]);
    assert!(!hostname.is_empty() && !user.is_empty(), "hostname `{hostname}` and user `{user}`");
    let port = free_port();
    for sub in ["state", "spool"] {
        std::fs::create_dir(root.join(sub)).expect("create dir");
    }

    let mut loaded = toolkit::blueprint::load(Path::new("blueprints/lab.yaml")).expect("lab blueprint loads");
    loaded.blueprint.tenants.clear();
    let settings = loaded.blueprint.scheduler.slurm.as_mut().expect("lab uses slurm");
    settings.accounting = false;
    settings.extra = BTreeMap::from(
        [
            ("SlurmctldHost", hostname.clone()),
            ("SlurmUser", user),
            ("SlurmctldPort", port.to_string()),
            ("StateSaveLocation", path("state")),
            ("SlurmdSpoolDir", path("spool")),
            ("SlurmctldLogFile", path("slurmctld.log")),
            ("SlurmdLogFile", path("slurmd.log")),
            ("SlurmctldPidFile", path("slurmctld.pid")),
            ("SlurmdPidFile", path("slurmd.pid")),
            ("AuthInfo", format!("socket={socket}")),
            ("ProctrackType", "proctrack/linuxproc".to_owned()),
            ("TaskPlugin", "task/affinity".to_owned()),
            ("JobAcctGatherType", "jobacct_gather/linux".to_owned()),
            ("SlurmdParameters", "config_overrides".to_owned()),
            ("AccountingStorageType", "accounting_storage/none".to_owned()),
        ]
        .map(|(key, value)| (key.to_owned(), value)),
    );
    let model = toolkit::model::expand(&loaded.blueprint).expect("lab expands");
    let config = slurm(&model).expect("slurm model").expect("lab uses slurm");
    let renderer = Renderer::embedded().expect("templates parse");
    let texts = files(&config, &renderer, &Secrets::default()).expect("templates render");

    let slurm_conf = texts.slurm_conf.text();
    // Overrides replace rendered keys instead of repeating them.
    assert_eq!(slurm_conf.lines().filter(|line| line.starts_with("SlurmctldHost=")).count(), 1);
    assert!(slurm_conf.contains(&format!("\nSlurmctldHost={hostname}\n")));
    assert!(!slurm_conf.contains("AccountingStorageTRES") && !slurm_conf.contains("AccountingStorageEnforce"));
    let conf = root.join("slurm.conf");
    std::fs::write(&conf, slurm_conf).expect("write slurm.conf");
    let gres = texts.gres_conf.as_ref().expect("lab nodes have GPUs");
    std::fs::write(root.join("gres.conf"), gres.text()).expect("write gres.conf");
    let topology = texts.topology_conf.as_ref().expect("lab has a tree topology");
    std::fs::write(root.join("topology.conf"), topology.text()).expect("write topology.conf");
    std::fs::write(root.join("cgroup.conf"), texts.cgroup_conf.text()).expect("write cgroup.conf");

    let conf_arg = conf.display().to_string();
    let log = root.join("slurmctld.log");
    let stderr = std::fs::File::create(root.join("slurmctld.stderr")).expect("stderr file");
    // slurmctld resolves every node name while it reads the config and gives up on
    // a name after ~10 s of retries, dropping the node. The lab's nodes do not
    // exist here, so where a private mount namespace is allowed, slurmctld sees an
    // /etc/hosts that points them at this machine.
    let node_names: Vec<&str> = model.nodes.iter().map(|node| node.name.as_str()).collect();
    let hosts = root.join("hosts");
    std::fs::write(&hosts, format!("{}\n127.0.0.1 {}\n", read(Path::new("/etc/hosts")), node_names.join(" ")))
        .expect("write hosts");
    let private_hosts = Command::new("unshare")
        .args(["--mount", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    let mut launcher = if private_hosts {
        let mut command = Command::new("unshare");
        command.args(["--mount", "sh", "-c", r#"mount --bind "$0" /etc/hosts && exec "$@""#]);
        command.arg(&hosts).arg(&slurmctld);
        command
    } else {
        eprintln!(
            "note: no private mount namespace here; slurmctld cannot resolve the lab's nodes, node checks are skipped"
        );
        Command::new(&slurmctld)
    };
    daemons.0.push(
        launcher
            .args(["-D", "-f", &conf_arg])
            .env("SLURM_CONF", &conf_arg)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("slurmctld starts"),
    );
    let logs = || format!("slurmctld.log:\n{}\nstderr:\n{}", read(&log), read(&root.join("slurmctld.stderr")));
    let scontrol_run = |args: &[&str]| -> Output {
        Command::new(&scontrol).args(args).env("SLURM_CONF", &conf_arg).output().expect("scontrol runs")
    };

    // Without the private /etc/hosts, name retries take ~10 s per node.
    let started = Instant::now();
    let shown_config = loop {
        let output = scontrol_run(&["show", "config"]);
        if output.status.success() {
            break String::from_utf8_lossy(&output.stdout).into_owned();
        }
        if let Some(status) = daemons.0[1].try_wait().expect("slurmctld status") {
            panic!("slurmctld exited with {status}\n{}", logs());
        }
        assert!(started.elapsed() < Duration::from_mins(2), "scontrol got no answer in 2 min\n{}", logs());
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("slurmctld answered after {:.1} s", started.elapsed().as_secs_f64());

    let expect = |key: &str, value: &str| {
        assert_eq!(shown(&shown_config, key), Some(value), "`{key}` in scontrol show config\n{}", logs());
    };
    expect("ClusterName", "lab");
    expect("SelectType", "select/cons_tres");
    expect("SelectTypeParameters", "CR_CORE_MEMORY");
    expect("PriorityType", "priority/multifactor");
    expect("TopologyPlugin", "topology/tree");
    expect("GresTypes", "gpu");
    expect("ProctrackType", "proctrack/linuxproc");
    expect("MailProg", "/bin/true");

    let partition = String::from_utf8_lossy(&scontrol_run(&["show", "partition", "gpu"]).stdout).into_owned();
    for part in ["PartitionName=gpu", "Nodes=node[01-04]", "Default=YES", "MaxTime=UNLIMITED", "TotalNodes=4"] {
        assert!(partition.contains(part), "`{part}` in scontrol show partition:\n{partition}\n{}", logs());
    }
    if private_hosts {
        let node = String::from_utf8_lossy(&scontrol_run(&["show", "node", "node01"]).stdout).into_owned();
        for part in ["Gres=gpu:h100:4", "CPUTot=2", "RealMemory=972"] {
            assert!(node.contains(part), "`{part}` in scontrol show node:\n{node}\n{}", logs());
        }
    }
    let switches = String::from_utf8_lossy(&scontrol_run(&["show", "topology"]).stdout).into_owned();
    for part in ["SwitchName=su0 Level=0", "Nodes=node[01-04]", "SwitchName=fabric Level=1", "Switches=su0"] {
        assert!(switches.contains(part), "`{part}` in scontrol show topology:\n{switches}\n{}", logs());
    }
    drop(daemons);
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}
