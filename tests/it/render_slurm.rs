//! Integration tests: render_slurm — the real Slurm 22.05 of Debian 12 runs on
//! what toolkit renders for the lab blueprint.
//!
//! - slurmctld reads the rendered slurm.conf, gres.conf, topology.conf and
//!   cgroup.conf, and scontrol shows what the blueprint says.
//! - With MariaDB and slurmdbd, the rendered bootstrap commands (database user,
//!   cluster, QOS, accounts, users) run in graph order, a second pass runs none of
//!   them (every guard holds), and a changed quota reruns exactly its command.
//!
//! The configs are the production ones with test-container overrides appended
//! through `scheduler.slurm.extra` (reference §5.2): local paths, this host as
//! controller, a private munged, no cgroup plugins. Daemons run as the current
//! user, inside a temporary directory, and are killed when a test ends.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use toolkit::graph;
use toolkit::model::slurm::slurm;
use toolkit::render::Renderer;
use toolkit::render::slurm::{DB_CLIENT_CNF, DB_SETUP_SQL, Secrets, SlurmFiles, files, render};
use toolkit::resource::Desired;

/// A program the test needs: `None` (with a note on stderr) when it is absent and
/// CI did not ask for every tool; a failure when it did.
fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.exists());
    if found.is_none() {
        crate::support::cannot_run(&format!("`{name}` is not installed: apt-get install {package}"));
    }
    found
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

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A temporary directory with a private munged; every daemon started through it
/// is killed when it is dropped.
struct Sandbox {
    dir: tempfile::TempDir,
    daemons: Vec<(String, Child)>,
    hostname: String,
    user: String,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for (_, child) in self.daemons.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Sandbox {
    fn new(munged: &Path) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        // munged wants every directory above its socket searchable by all.
        set_mode(dir.path(), 0o755);
        let hostname = command_output("hostname", &["-s"]);
        let user = command_output("id", &["-un"]);
        assert!(!hostname.is_empty() && !user.is_empty(), "hostname `{hostname}` and user `{user}`");
        let mut sandbox = Self { dir, daemons: Vec::new(), hostname, user };
        let key = sandbox.dir.path().join("munge.key");
        std::fs::write(&key, "toolkit-render-slurm-test-key-".repeat(4)).expect("write munge key");
        set_mode(&key, 0o400);
        let args = [
            "-F".to_owned(),
            format!("--socket={}", sandbox.munge_socket()),
            format!("--key-file={}", key.display()),
            format!("--pid-file={}", sandbox.path("munged.pid")),
            format!("--log-file={}", sandbox.path("munged.log")),
            format!("--seed-file={}", sandbox.path("munged.seed")),
        ];
        sandbox.spawn("munged", Command::new(munged).args(args));
        sandbox
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    fn munge_socket(&self) -> String {
        self.path("munge.sock")
    }

    fn spawn(&mut self, name: &str, command: &mut Command) {
        let out = std::fs::File::create(self.path(&format!("{name}.out"))).expect("output file");
        let err = out.try_clone().expect("output file");
        let child = command.stdout(out).stderr(err).spawn().unwrap_or_else(|error| panic!("{name} starts: {error}"));
        self.daemons.push((name.to_owned(), child));
    }

    /// Panics with every log when a daemon has exited.
    fn assert_running(&mut self) {
        for index in 0..self.daemons.len() {
            if let Ok(Some(status)) = self.daemons[index].1.try_wait() {
                panic!("{} exited with {status}\n{}", self.daemons[index].0, self.logs());
            }
        }
    }

    /// Every log file and daemon output, for failure messages.
    fn logs(&self) -> String {
        let mut text = String::new();
        let mut entries: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .map(|dir| dir.filter_map(Result::ok).map(|entry| entry.path()).collect())
            .unwrap_or_default();
        entries.sort();
        for path in entries {
            let is_log = path.extension().is_some_and(|ext| ext == "log" || ext == "out");
            if is_log && let Ok(content) = std::fs::read_to_string(&path) {
                let _ = writeln!(text, "==> {} <==\n{content}", path.display());
            }
        }
        text
    }

    /// The test-container overrides of slurm.conf (reference §5.2).
    fn slurm_overrides(&self, controller_port: u16) -> BTreeMap<String, String> {
        [
            ("SlurmctldHost", self.hostname.clone()),
            ("SlurmUser", self.user.clone()),
            ("SlurmctldPort", controller_port.to_string()),
            ("StateSaveLocation", self.path("state")),
            ("SlurmdSpoolDir", self.path("spool")),
            ("SlurmctldLogFile", self.path("slurmctld.log")),
            ("SlurmdLogFile", self.path("slurmd.log")),
            ("SlurmctldPidFile", self.path("slurmctld.pid")),
            ("SlurmdPidFile", self.path("slurmd.pid")),
            ("AuthInfo", format!("socket={}", self.munge_socket())),
            ("ProctrackType", "proctrack/linuxproc".to_owned()),
            ("TaskPlugin", "task/affinity".to_owned()),
            ("JobAcctGatherType", "jobacct_gather/linux".to_owned()),
            ("SlurmdParameters", "config_overrides".to_owned()),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect()
    }

    /// Writes slurm.conf and its companions; returns the slurm.conf path.
    fn write_slurm_files(&self, texts: &SlurmFiles) -> String {
        std::fs::write(self.path("slurm.conf"), texts.slurm_conf.text()).expect("write slurm.conf");
        if let Some(gres) = &texts.gres_conf {
            std::fs::write(self.path("gres.conf"), gres.text()).expect("write gres.conf");
        }
        if let Some(topology) = &texts.topology_conf {
            std::fs::write(self.path("topology.conf"), topology.text()).expect("write topology.conf");
        }
        std::fs::write(self.path("cgroup.conf"), texts.cgroup_conf.text()).expect("write cgroup.conf");
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(self.path(sub)).expect("create dir");
        }
        self.path("slurm.conf")
    }

    /// Starts slurmctld on `conf`. It resolves every node name while it reads the
    /// config and drops a node after ~10 s of retries; the lab's nodes do not
    /// exist here, so where a private mount namespace is allowed it sees an
    /// /etc/hosts that points them at this machine. Returns whether it does.
    fn start_slurmctld(&mut self, slurmctld: &Path, conf: &str, nodes: &[&str]) -> bool {
        let hosts = self.path("hosts");
        let system_hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        std::fs::write(&hosts, format!("{system_hosts}\n127.0.0.1 {}\n", nodes.join(" "))).expect("write hosts");
        let private_hosts = Command::new("unshare")
            .args(["--mount", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        let mut command = if private_hosts {
            let mut command = Command::new("unshare");
            command.args(["--mount", "sh", "-c", r#"mount --bind "$0" /etc/hosts && exec "$@""#]);
            command.arg(&hosts).arg(slurmctld);
            command
        } else {
            eprintln!("note: no private mount namespace; slurmctld cannot resolve the lab's nodes");
            Command::new(slurmctld)
        };
        self.spawn("slurmctld", command.args(["-D", "-f", conf]).env("SLURM_CONF", conf));
        private_hosts
    }

    /// Polls `probe` until it succeeds, failing with the logs after `limit`.
    fn wait_for(&mut self, what: &str, limit: Duration, mut probe: impl FnMut() -> bool) {
        let started = Instant::now();
        while !probe() {
            self.assert_running();
            assert!(started.elapsed() < limit, "{what}: no answer in {limit:?}\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(300));
        }
        eprintln!("{what} after {:.1} s", started.elapsed().as_secs_f64());
    }
}

/// The lab blueprint, adjusted.
fn lab(adjust: impl FnOnce(&mut toolkit::blueprint::Blueprint)) -> toolkit::model::Model {
    let mut loaded = toolkit::blueprint::load(Path::new("blueprints/lab.yaml")).expect("lab blueprint loads");
    adjust(&mut loaded.blueprint);
    toolkit::model::expand(&loaded.blueprint).expect("lab expands")
}

fn slurm_settings(blueprint: &mut toolkit::blueprint::Blueprint) -> &mut toolkit::blueprint::schema::Slurm {
    blueprint.scheduler.slurm.as_mut().expect("lab uses slurm")
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
    let (Some(slurmctld), Some(scontrol), Some(munged)) =
        (tool("slurmctld", "slurmctld"), tool("scontrol", "slurm-client"), tool("munged", "munge"))
    else {
        return;
    };
    let mut sandbox = Sandbox::new(&munged);
    let mut overrides = sandbox.slurm_overrides(free_port());
    // Without slurmdbd (reference §5.2): no accounting, hence no tenants.
    overrides.insert("AccountingStorageType".to_owned(), "accounting_storage/none".to_owned());
    let model = lab(|blueprint| {
        blueprint.tenants.clear();
        let settings = slurm_settings(blueprint);
        settings.accounting = false;
        settings.extra = overrides;
        // A second partition whose name uses every character the lint allows
        // (`invalid-slurm-name`): slurmctld must take it as it is.
        let mut other = settings.partitions[0].clone();
        other.name = "gpu_a-1".to_owned();
        other.default = false;
        settings.partitions.push(other);
    });
    let config = slurm(&model).expect("slurm model").expect("lab uses slurm");
    let texts = files(&config, &Renderer::embedded().expect("templates parse"), &Secrets::default()).expect("renders");
    let slurm_conf = texts.slurm_conf.text();
    // Overrides replace rendered keys instead of repeating them.
    assert_eq!(slurm_conf.lines().filter(|line| line.starts_with("SlurmctldHost=")).count(), 1);
    assert!(slurm_conf.contains(&format!("\nSlurmctldHost={}\n", sandbox.hostname)));
    assert!(!slurm_conf.contains("AccountingStorageTRES") && !slurm_conf.contains("AccountingStorageEnforce"));

    let conf = sandbox.write_slurm_files(&texts);
    let nodes: Vec<&str> = model.nodes.iter().map(|node| node.name.as_str()).collect();
    let private_hosts = sandbox.start_slurmctld(&slurmctld, &conf, &nodes);
    let scontrol_run = |args: &[&str]| -> Output {
        Command::new(&scontrol).args(args).env("SLURM_CONF", &conf).output().expect("scontrol runs")
    };
    let limit = if private_hosts { Duration::from_secs(30) } else { Duration::from_mins(2) };
    sandbox.wait_for("scontrol show config", limit, || scontrol_run(&["show", "config"]).status.success());

    let shown_config = String::from_utf8_lossy(&scontrol_run(&["show", "config"]).stdout).into_owned();
    for (key, value) in [
        ("ClusterName", "lab"),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_CORE_MEMORY"),
        ("PriorityType", "priority/multifactor"),
        ("TopologyPlugin", "topology/tree"),
        ("GresTypes", "gpu"),
        ("ProctrackType", "proctrack/linuxproc"),
        ("MailProg", "/bin/true"),
    ] {
        assert_eq!(shown(&shown_config, key), Some(value), "`{key}` in scontrol show config\n{}", sandbox.logs());
    }
    let partition = String::from_utf8_lossy(&scontrol_run(&["show", "partition", "gpu"]).stdout).into_owned();
    for part in ["PartitionName=gpu", "Nodes=node[01-04]", "Default=YES", "MaxTime=UNLIMITED", "TotalNodes=4"] {
        assert!(partition.contains(part), "`{part}` in scontrol show partition:\n{partition}\n{}", sandbox.logs());
    }
    let other = String::from_utf8_lossy(&scontrol_run(&["show", "partition", "gpu_a-1"]).stdout).into_owned();
    assert!(other.contains("PartitionName=gpu_a-1"), "scontrol show partition gpu_a-1:\n{other}\n{}", sandbox.logs());
    if private_hosts {
        let node = String::from_utf8_lossy(&scontrol_run(&["show", "node", "node01"]).stdout).into_owned();
        for part in ["Gres=gpu:h100:4", "CPUTot=2", "RealMemory=972"] {
            assert!(node.contains(part), "`{part}` in scontrol show node:\n{node}\n{}", sandbox.logs());
        }
    }
    let switches = String::from_utf8_lossy(&scontrol_run(&["show", "topology"]).stdout).into_owned();
    for part in ["SwitchName=su0 Level=0", "Nodes=node[01-04]", "SwitchName=fabric Level=1", "Switches=su0"] {
        assert!(switches.contains(part), "`{part}` in scontrol show topology:\n{switches}\n{}", sandbox.logs());
    }
}

/// A spare on standby and, after node02 went to RMA, serving in its place: slurmctld takes
/// the spare partition below the tenants' (`PriorityTier=0`) and the partitions of the swap.
#[test]
fn slurmctld_takes_the_spare_partition_and_the_swap() {
    let (Some(slurmctld), Some(scontrol), Some(munged)) =
        (tool("slurmctld", "slurmctld"), tool("scontrol", "slurm-client"), tool("munged", "munge"))
    else {
        return;
    };
    let rma = [toolkit::model::spares::RmaRecord { node: "node02".to_owned(), returned: false }];
    for (records, gpu, spare) in
        [(&[][..], "Nodes=node[01-03]", Some("Nodes=node04")), (&rma[..], "Nodes=node[01,03-04]", None)]
    {
        let mut sandbox = Sandbox::new(&munged);
        let mut overrides = sandbox.slurm_overrides(free_port());
        overrides.insert("AccountingStorageType".to_owned(), "accounting_storage/none".to_owned());
        let model = lab(|blueprint| {
            blueprint.tenants.clear();
            let group = blueprint.node_groups.iter_mut().find(|group| group.name == "gpu").expect("gpu group");
            group.spares = 1;
            let settings = slurm_settings(blueprint);
            settings.accounting = false;
            settings.extra = overrides;
        })
        .with_rma(records);
        let config = slurm(&model).expect("slurm model").expect("lab uses slurm");
        let texts =
            files(&config, &Renderer::embedded().expect("templates parse"), &Secrets::default()).expect("renders");
        let conf = sandbox.write_slurm_files(&texts);
        let nodes: Vec<&str> = model.nodes.iter().map(|node| node.name.as_str()).collect();
        let private_hosts = sandbox.start_slurmctld(&slurmctld, &conf, &nodes);
        let scontrol_run = |args: &[&str]| -> Output {
            Command::new(&scontrol).args(args).env("SLURM_CONF", &conf).output().expect("scontrol runs")
        };
        let limit = if private_hosts { Duration::from_secs(30) } else { Duration::from_mins(2) };
        sandbox.wait_for("scontrol show config", limit, || scontrol_run(&["show", "config"]).status.success());
        let show =
            |name: &str| String::from_utf8_lossy(&scontrol_run(&["show", "partition", name]).stdout).into_owned();
        let tenants = show("gpu");
        assert!(tenants.contains(gpu) && tenants.contains("PriorityTier=1"), "{tenants}\n{}", sandbox.logs());
        let standing = show(toolkit::model::spares::SPARE_PARTITION);
        match spare {
            Some(nodes) => {
                assert!(
                    standing.contains(nodes) && standing.contains("PriorityTier=0"),
                    "{standing}\n{}",
                    sandbox.logs()
                );
            }
            None => assert!(!standing.contains("PartitionName=spare"), "no spare left on standby: {standing}"),
        }
    }
}

/// `key=value` lines of a rendered file replaced (or added) for the sandbox.
fn with_overrides(text: &str, overrides: &[(&str, String)]) -> String {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|line| !overrides.iter().any(|(key, _)| line.split_once('=').is_some_and(|(name, _)| name == *key)))
        .map(str::to_owned)
        .collect();
    lines.extend(overrides.iter().map(|(key, value)| format!("{key}={value}")));
    lines.join("\n") + "\n"
}

/// A rendered command as it runs in the sandbox: the secret files live in the
/// sandbox and the client talks to the sandbox's MariaDB as its administrator.
fn sandboxed(argv: &[String], sandbox: &Sandbox, mariadb_socket: &str) -> Vec<String> {
    let mut argv: Vec<String> = argv
        .iter()
        .map(|arg| {
            arg.replace(DB_SETUP_SQL, &sandbox.path("slurmdbd-setup.sql"))
                .replace(DB_CLIENT_CNF, &sandbox.path("slurmdbd-client.cnf"))
        })
        .collect();
    if argv.first().is_some_and(|program| program == "mariadb") {
        // --defaults-extra-file must stay the first option.
        let at = if argv.get(1).is_some_and(|arg| arg.starts_with("--defaults-extra-file=")) { 2 } else { 1 };
        argv.insert(at, format!("--socket={mariadb_socket}"));
        if at == 1 {
            argv.insert(2, "--user=root".to_owned());
        }
    }
    argv
}

/// Runs every command of `resources` in graph order, as apply would: a command
/// runs only when its guard fails (or, for one that reads its values, when they
/// differ), and must succeed and satisfy its guard after. Services come up when the
/// walk reaches them. Returns the ids that ran, each with the values it read first.
fn apply_commands(
    resources: Vec<toolkit::resource::Resource>,
    sandbox: &mut Sandbox,
    mariadb_socket: &str,
    mut start_service: impl FnMut(&str, &mut Sandbox),
) -> Vec<(String, Option<String>)> {
    let graph = graph::build(resources).expect("acyclic graph");
    let conf = sandbox.path("slurm.conf");
    let mut ran = Vec::new();
    for index in graph.ordered() {
        let resource = &graph.resources[index];
        match &*resource.desired {
            Desired::Service { name, .. } if resource.target() == "head" => start_service(name, sandbox),
            Desired::Command { argv, unless, reads, .. } => {
                let run = |argv: &[String]| -> Output {
                    let argv = sandboxed(argv, sandbox, mariadb_socket);
                    Command::new(&argv[0]).args(&argv[1..]).env("SLURM_CONF", &conf).output().expect("command runs")
                };
                // (done, what a read printed as a fingerprint)
                let check = || {
                    if let Some(reads) = reads {
                        let output = run(&reads.argv);
                        let observed = reads.observed(&String::from_utf8_lossy(&output.stdout));
                        (output.status.success() && observed == Some(reads.fingerprint()), observed)
                    } else {
                        let guard = unless.as_deref().expect("every bootstrap command has a guard or reads");
                        (run(guard).status.success(), None)
                    }
                };
                let (done, before) = check();
                if done {
                    continue;
                }
                let output = run(argv);
                assert!(
                    output.status.success(),
                    "{} failed: {}{}\n{}",
                    resource.id,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr),
                    sandbox.logs()
                );
                assert!(check().0, "{}: its guard still fails after it ran", resource.id);
                ran.push((resource.id.to_string(), before));
            }
            _ => {}
        }
    }
    ran
}

#[test]
fn accounting_bootstrap_converges_on_real_slurmdbd() {
    let tools = [
        ("mariadb-install-db", "mariadb-server"),
        ("mariadbd", "mariadb-server"),
        ("mariadb", "mariadb-client"),
        ("slurmdbd", "slurmdbd"),
        ("slurmctld", "slurmctld"),
        ("sacctmgr", "slurm-client"),
        ("munged", "munge"),
    ];
    let found: Vec<PathBuf> = tools.iter().filter_map(|(name, package)| tool(name, package)).collect();
    let [install_db, mariadbd, mariadb, slurmdbd, slurmctld, sacctmgr, munged] = found.as_slice() else {
        return;
    };
    let mut sandbox = Sandbox::new(munged);
    let (mariadb_port, slurmdbd_port, controller_port) = (free_port(), free_port(), free_port());

    // MariaDB in the sandbox; its administrator is `root` without a password.
    let datadir = sandbox.path("db");
    let install = Command::new(install_db)
        .args([
            format!("--datadir={datadir}"),
            format!("--user={}", sandbox.user),
            "--auth-root-authentication-method=normal".to_owned(),
            "--skip-test-db".to_owned(),
        ])
        .output()
        .expect("mariadb-install-db runs");
    assert!(install.status.success(), "mariadb-install-db: {}", String::from_utf8_lossy(&install.stderr));
    let mariadb_socket = sandbox.path("mysql.sock");
    sandbox.spawn(
        "mariadbd",
        Command::new(mariadbd).args([
            "--no-defaults".to_owned(),
            format!("--datadir={datadir}"),
            format!("--user={}", sandbox.user),
            format!("--socket={mariadb_socket}"),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--port={mariadb_port}"),
            format!("--pid-file={}", sandbox.path("mariadbd.pid")),
        ]),
    );
    let admin = format!("--socket={mariadb_socket}");
    sandbox.wait_for("mariadbd", Duration::from_mins(1), || {
        Command::new(mariadb)
            .args([&admin, "--user=root", "--execute=SELECT 1"])
            .output()
            .is_ok_and(|out| out.status.success())
    });

    // Production settings and the lab's tenants; sacctmgr (22.05) reaches munged
    // through AccountingStoragePass, not AuthInfo (reference §5.8).
    let mut overrides = sandbox.slurm_overrides(controller_port);
    overrides.insert("AccountingStorageHost".to_owned(), "localhost".to_owned());
    overrides.insert("AccountingStoragePort".to_owned(), slurmdbd_port.to_string());
    overrides.insert("AccountingStoragePass".to_owned(), sandbox.munge_socket());
    let render_lab = |guaranteed: u32, overrides: BTreeMap<String, String>| {
        let model = lab(|blueprint| {
            slurm_settings(blueprint).extra = overrides;
            blueprint.tenants[0].guaranteed_gpus = guaranteed;
        });
        let secrets = Secrets { munge_key: None, db_password: Some(r"db 'pass #1\".to_owned()), ..Secrets::default() };
        let config = slurm(&model).expect("slurm model").expect("lab uses slurm");
        let renderer = Renderer::embedded().expect("templates parse");
        let texts = files(&config, &renderer, &secrets).expect("renders");
        let mut resources = Vec::new();
        render(&model, None, &renderer, &secrets, &mut resources).expect("renders");
        let nodes: Vec<String> = model.nodes.iter().map(|node| node.name.clone()).collect();
        (texts, resources, nodes)
    };
    let (texts, resources, nodes) = render_lab(8, overrides.clone());
    let conf = sandbox.write_slurm_files(&texts);
    let database = texts.database.as_ref().expect("the lab has accounting");
    let dbd_conf = with_overrides(
        database.slurmdbd_conf.text(),
        &[
            ("DbdHost", "localhost".to_owned()),
            ("DbdPort", slurmdbd_port.to_string()),
            ("SlurmUser", sandbox.user.clone()),
            ("StorageHost", "127.0.0.1".to_owned()),
            ("StoragePort", mariadb_port.to_string()),
            ("LogFile", sandbox.path("slurmdbd.log")),
            ("PidFile", sandbox.path("slurmdbd.pid")),
            ("AuthInfo", format!("socket={}", sandbox.munge_socket())),
        ],
    );
    std::fs::write(sandbox.path("slurmdbd.conf"), dbd_conf).expect("write slurmdbd.conf");
    set_mode(Path::new(&sandbox.path("slurmdbd.conf")), 0o600);
    for (name, content) in [("slurmdbd-setup.sql", &database.setup_sql), ("slurmdbd-client.cnf", &database.client_cnf)]
    {
        std::fs::write(sandbox.path(name), content.text()).expect("write database file");
        set_mode(Path::new(&sandbox.path(name)), 0o600);
    }

    let node_names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let sacctmgr_ok = || {
        Command::new(sacctmgr)
            .args(["-n", "-P", "show", "cluster"])
            .env("SLURM_CONF", &conf)
            .output()
            .is_ok_and(|out| out.status.success())
    };
    let mut start_service = |name: &str, sandbox: &mut Sandbox| match name {
        "slurmdbd" => {
            // slurmdbd reads slurmdbd.conf next to $SLURM_CONF.
            sandbox.spawn("slurmdbd", Command::new(slurmdbd).arg("-D").env("SLURM_CONF", &conf));
            sandbox.wait_for("slurmdbd", Duration::from_mins(1), sacctmgr_ok);
        }
        "slurmctld" => {
            sandbox.start_slurmctld(slurmctld, &conf, &node_names);
        }
        _ => {}
    };

    let first = apply_commands(resources, &mut sandbox, &mariadb_socket, &mut start_service);
    assert_eq!(first.len(), 15, "every bootstrap command ran once: {first:#?}");
    let associations = Command::new(sacctmgr)
        .args(["-n", "-P", "show", "assoc", "where", "cluster=lab", "format=Account,User,Fairshare,QOS,DefaultQOS"])
        .env("SLURM_CONF", &conf)
        .output()
        .expect("sacctmgr runs");
    let associations = String::from_utf8_lossy(&associations.stdout).into_owned();
    for row in
        ["team-a||50|borrow,team-a|team-a", "team-a|alice|1|borrow,team-a|team-a", "team-b|bob|1|borrow,team-b|team-b"]
    {
        assert!(associations.lines().any(|line| line == row), "association `{row}` in:\n{associations}");
    }

    // Nothing changed: every guard holds, nothing runs.
    let (_, resources, _) = render_lab(8, overrides.clone());
    let second = apply_commands(resources, &mut sandbox, &mariadb_socket, |_, _| {});
    assert!(second.is_empty(), "a second pass ran {second:?}");

    // A changed guarantee reruns exactly the command that sets it.
    let (_, resources, _) = render_lab(12, overrides);
    let third = apply_commands(resources, &mut sandbox, &mariadb_socket, |_, _| {});
    let ids: Vec<&str> = third.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["head:command:sacctmgr-qos-team-a-settings"]);
    // What a plan shows as before: the values sacctmgr printed, the old limit among them.
    let before = third[0].1.as_deref().and_then(toolkit::resource::values_of).expect("the QOS was read");
    assert!(before.contains(&("GrpTRES".to_owned(), "gres/gpu=8".to_owned())), "{before:?}");
    let qos = Command::new(sacctmgr)
        .args(["-n", "-P", "show", "qos", "where", "name=team-a", "format=GrpTRES"])
        .env("SLURM_CONF", &conf)
        .output()
        .expect("sacctmgr runs");
    assert_eq!(String::from_utf8_lossy(&qos.stdout).trim(), "gres/gpu=12");
}
