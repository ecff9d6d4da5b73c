//! Slurm: slurm.conf, gres.conf, topology.conf, cgroup.conf, slurmdbd.conf, munge, daemons, and the sacctmgr commands for tenants.
//!
//! Stage: render. Input: the model (through [`crate::model::slurm`]) and the
//! [`Secrets`]. Output: resources appended to `out`.
//!
//! Every file is rendered once and its [`Content`] shared by every host that gets
//! it, so a 32,768-node cluster costs the same seven template calls as a 4-node
//! one. Commands are argv vectors with guards: values from the blueprint travel as
//! separate arguments, and the shell snippets used by guards are constant text.
//! Secrets reach only files marked `secret`, never an argv.
//!
//! No file here gets a `check` command: no Slurm 22.05 program validates a
//! candidate slurm.conf, gres.conf, topology.conf or slurmdbd.conf by itself
//! (slurmctld 22.05 has no check-only flag, see `slurmctld -h`; the daemons only
//! fail at start), so the services' restart is the check.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::inventory::secrets::resolve;
use crate::inventory::{Inventory, SecretRef};
use crate::model::Model;
use crate::model::slurm::{self as slurm_model, SlurmConfig, SlurmHost};
use crate::render::common::{
    Command, file, owned_secret_file, package, secret_file, unwatched_service, watching_service,
};
use crate::render::{RenderError, Renderer};
use crate::resource::{Content, Disruption, OnChange, Reads, Resource, ResourceId, Target};

/// Templates of this module: `(name under templates/, text)`.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("slurm/slurm.conf.j2", include_str!("../../templates/slurm/slurm.conf.j2")),
    ("slurm/gres.conf.j2", include_str!("../../templates/slurm/gres.conf.j2")),
    ("slurm/topology.conf.j2", include_str!("../../templates/slurm/topology.conf.j2")),
    ("slurm/cgroup.conf.j2", include_str!("../../templates/slurm/cgroup.conf.j2")),
    ("slurm/slurmdbd.conf.j2", include_str!("../../templates/slurm/slurmdbd.conf.j2")),
    ("slurm/slurmdbd-setup.sql.j2", include_str!("../../templates/slurm/slurmdbd-setup.sql.j2")),
    ("slurm/slurmdbd-client.cnf.j2", include_str!("../../templates/slurm/slurmdbd-client.cnf.j2")),
];

/// `/etc/slurm/slurm.conf`.
pub const SLURM_CONF: &str = "/etc/slurm/slurm.conf";
/// `/etc/slurm/gres.conf`.
pub const GRES_CONF: &str = "/etc/slurm/gres.conf";
/// `/etc/slurm/topology.conf`.
pub const TOPOLOGY_CONF: &str = "/etc/slurm/topology.conf";
/// `/etc/slurm/cgroup.conf`.
pub const CGROUP_CONF: &str = "/etc/slurm/cgroup.conf";
/// `/etc/slurm/slurmdbd.conf`.
pub const SLURMDBD_CONF: &str = "/etc/slurm/slurmdbd.conf";
/// `/etc/munge/munge.key`.
pub const MUNGE_KEY: &str = "/etc/munge/munge.key";
/// SQL that creates slurmdbd's database user (holds the password).
pub const DB_SETUP_SQL: &str = "/etc/slurm/slurmdbd-setup.sql";
/// Client option file to test slurmdbd's database login (holds the password).
pub const DB_CLIENT_CNF: &str = "/etc/slurm/slurmdbd-client.cnf";

/// Secrets the render stages need (the Slurm stack's, alert receivers', BMCs',
/// kubeadm's), resolved by the caller from the inventory.
/// `None` when not readable here (an offline plan on a CI runner): the files that
/// hold them get [`Content::unresolved_secret`], which plans do not compare.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Contents of `/etc/munge/munge.key`, identical on every host.
    pub munge_key: Option<String>,
    /// Password of the `slurm` database user slurmdbd connects as.
    pub db_password: Option<String>,
    /// The inventory's `secrets.named` that could be read here (alert receivers').
    pub named: std::collections::BTreeMap<String, String>,
    /// User and password of each BMC, by node, when both could be read here (the IPMI
    /// exporter's configuration and the repair service's credentials hold them).
    pub bmcs: std::collections::BTreeMap<String, (String, String)>,
    /// The kubeadm cluster's CA and bootstrap token.
    pub kubeadm: crate::render::kubeadm::KubeadmSecrets,
}

impl Secrets {
    /// The Slurm stack's secrets from an inventory; a reference that cannot be read
    /// here is `None` (offline plans leave such files uncompared; deploy requires them).
    /// Relative file paths are taken from `base`.
    #[must_use]
    pub fn from_inventory(inventory: Option<&Inventory>, base: &Path) -> Self {
        let read = |reference: Option<&SecretRef>| reference.and_then(|r| resolve(r, base).ok());
        let secrets = inventory.map(|i| &i.secrets);
        Self {
            munge_key: read(secrets.and_then(|s| s.munge_key.as_ref())),
            db_password: read(secrets.and_then(|s| s.slurmdbd_password.as_ref())),
            named: secrets
                .map(|s| &s.named)
                .into_iter()
                .flatten()
                .filter_map(|(name, reference)| resolve(reference, base).ok().map(|value| (name.clone(), value)))
                .collect(),
            bmcs: inventory
                .map(|i| &i.bmcs)
                .into_iter()
                .flatten()
                .filter_map(|(node, bmc)| {
                    let user = resolve(&bmc.username, base).ok()?;
                    let password = resolve(&bmc.password, base).ok()?;
                    Some((node.clone(), (user, password)))
                })
                .collect(),
            kubeadm: crate::render::kubeadm::KubeadmSecrets::from_inventory(inventory, base),
        }
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("Secrets").finish_non_exhaustive()
    }
}

/// Every distinct file text of the stack, rendered once.
#[derive(Debug, Clone)]
pub struct SlurmFiles {
    /// slurm.conf.
    pub slurm_conf: Content,
    /// gres.conf, when some node has GPUs.
    pub gres_conf: Option<Content>,
    /// topology.conf, when a topology plugin is set.
    pub topology_conf: Option<Content>,
    /// cgroup.conf.
    pub cgroup_conf: Content,
    /// The munge key.
    pub munge_key: Content,
    /// slurmdbd.conf, SQL for the database user and the login check file, with accounting.
    pub database: Option<DatabaseFiles>,
}

/// Files of the database host.
#[derive(Debug, Clone)]
pub struct DatabaseFiles {
    /// slurmdbd.conf.
    pub slurmdbd_conf: Content,
    /// SQL creating the database user.
    pub setup_sql: Content,
    /// MariaDB client option file with the user's password.
    pub client_cnf: Content,
}

#[derive(Serialize)]
struct DatabaseContext<'a> {
    cluster_name: &'a str,
    dbd_host: &'a str,
    storage_pass: &'a str,
    sql_password: String,
    cnf_password: String,
}

/// Renders every file text of `config` once.
///
/// # Errors
/// A template that fails to render.
pub fn files(config: &SlurmConfig, renderer: &Renderer, secrets: &Secrets) -> Result<SlurmFiles, RenderError> {
    let render = |name: &str| renderer.render(name, config).map(Content::new);
    let database = match &config.database {
        Some(host) => {
            let password = secrets.db_password.as_deref().unwrap_or_default();
            let context = DatabaseContext {
                cluster_name: &config.cluster_name,
                dbd_host: host,
                storage_pass: &slurm_conf_quoted(password).ok_or_else(|| {
                    invalid("the database password holds a double quote or line break, which slurmdbd.conf cannot hold")
                })?,
                sql_password: sql_quoted(password),
                cnf_password: option_file_quoted(password),
            };
            let secret = |template: &str| -> Result<Content, RenderError> {
                let text = renderer.render(template, &context)?;
                Ok(if secrets.db_password.is_some() { Content::new(text) } else { Content::unresolved_secret() })
            };
            Some(DatabaseFiles {
                slurmdbd_conf: secret("slurm/slurmdbd.conf.j2")?,
                setup_sql: secret("slurm/slurmdbd-setup.sql.j2")?,
                client_cnf: secret("slurm/slurmdbd-client.cnf.j2")?,
            })
        }
        None => None,
    };
    Ok(SlurmFiles {
        slurm_conf: render("slurm/slurm.conf.j2")?,
        gres_conf: if config.gres.is_empty() { None } else { Some(render("slurm/gres.conf.j2")?) },
        topology_conf: if config.topology.is_empty() { None } else { Some(render("slurm/topology.conf.j2")?) },
        cgroup_conf: render("slurm/cgroup.conf.j2")?,
        munge_key: secrets.munge_key.clone().map_or_else(Content::unresolved_secret, Content::new),
        database,
    })
}

/// A value as Slurm's config parser reads it back: `\\` and `#` escaped (an
/// unescaped `#` starts a comment), double-quoted when it holds spaces. `None`
/// when impossible: a quoted value ends at the next `"` and lines cannot continue.
fn slurm_conf_quoted(text: &str) -> Option<String> {
    if text.contains(['"', '\n', '\r']) {
        return None;
    }
    let escaped = text.replace('\\', "\\\\").replace('#', "\\#");
    Some(if text.contains(char::is_whitespace) || text.is_empty() { format!("\"{escaped}\"") } else { escaped })
}

/// Inside a single-quoted SQL string literal.
fn sql_quoted(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\'', "\\'")
}

/// Inside a double-quoted value of a MariaDB option file.
fn option_file_quoted(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Appends this module's resources. From the inventory only `fake_gpu_devices` is read.
///
/// # Errors
/// A blueprint the Slurm model rejects, or a template that fails to render.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    renderer: &Renderer,
    secrets: &Secrets,
    out: &mut Vec<Resource>,
) -> Result<(), RenderError> {
    let Some(config) = slurm_model::slurm(model).map_err(|error| model_error(&error))? else {
        return Ok(());
    };
    let files = files(&config, renderer, secrets)?;
    let fake_gpus = fake_gpus(model, inventory);
    resources(&config, &files, &fake_gpus, out);
    Ok(())
}

/// GPUs per node of the nodes whose inventory entry asks for fake GPU devices.
fn fake_gpus<'a>(model: &'a Model, inventory: Option<&Inventory>) -> HashMap<&'a str, u32> {
    let Some(inventory) = inventory else { return HashMap::new() };
    model
        .nodes
        .iter()
        .filter(|node| inventory.hosts.get(&node.name).is_some_and(|host| host.fake_gpu_devices))
        .filter_map(|node| {
            let group = model.groups.get(node.group)?;
            (group.gpu.is_some() && group.gpus_per_node > 0).then_some((node.name.as_str(), group.gpus_per_node))
        })
        .collect()
}

/// The NVIDIA driver's character devices `/dev/nvidia0…` (major 195, minor = index,
/// mode 0666 as the driver makes them) on a node without GPUs, so that gres.conf's
/// `File=` entries exist: slurmd gives up on a missing one after 20 s. Real device
/// nodes, not empty files, so `ConstrainDevices` can allow and deny them. `/dev` is
/// a tmpfs, emptied by every boot (and a lab container's restart), so they are
/// written as a tmpfiles.d entry, which `systemd-tmpfiles-setup-dev.service` makes
/// again early at every boot, before slurmd; the command makes them now from it.
fn fake_gpu_devices(host: &str, count: u32) -> Resource {
    let last = count.saturating_sub(1).to_string();
    let create = r##"set -e
conf=/etc/tmpfiles.d/toolkit-fake-gpus.conf
{
    echo "# toolkit: fake GPU devices for Slurm's GRES (inventory: fake_gpu_devices), made at every boot"
    for i in $(seq 0 "$1"); do echo "c /dev/nvidia$i 0666 root root - 195:$i"; done
} > "$conf.toolkit-new"
mv "$conf.toolkit-new" "$conf"
systemd-tmpfiles --create "$conf""##;
    let exist = r#"for i in $(seq 0 "$1"); do test -c /dev/nvidia$i || exit 1; done
grep -qx "c /dev/nvidia$1 0666 root root - 195:$1" /etc/tmpfiles.d/toolkit-fake-gpus.conf"#;
    Command::new(
        strings(["sh", "-c", create, "sh", &last]),
        format!("create /dev/nvidia0-{last} for Slurm's GRES, and at every boot (fake_gpu_devices: no GPUs here)"),
    )
    .unless(strings(["sh", "-c", exist, "sh", &last]))
    .on(&Target::node(host), "fake-gpu-devices")
}

/// A model error, reported through the render error type (it has no variant of its own).
fn model_error(error: &slurm_model::SlurmError) -> RenderError {
    invalid(&error.to_string())
}

fn invalid(message: &str) -> RenderError {
    RenderError::Template {
        template: "slurm".to_owned(),
        source: minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message.to_owned()),
    }
}

fn package_id(host: &str, name: &str) -> ResourceId {
    ResourceId::new(host, "package", name)
}

fn file_id(host: &str, path: &str) -> ResourceId {
    ResourceId::new(host, "file", path)
}

fn service_id(host: &str, name: &str) -> ResourceId {
    ResourceId::new(host, "service", name)
}

fn command_id(host: &str, name: &str) -> ResourceId {
    ResourceId::new(host, "command", name)
}

fn strings<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

/// The resources of every host, then the accounting commands.
fn resources(config: &SlurmConfig, files: &SlurmFiles, fake_gpus: &HashMap<&str, u32>, out: &mut Vec<Resource>) {
    let slurmdbd_service = config.database.as_deref().map(|host| service_id(host, "slurmdbd"));
    let slurmctld_service = service_id(&config.controller, "slurmctld");
    let add_cluster = config.database.as_ref().map(|_| command_id(&config.controller, "sacctmgr-cluster"));
    for host in &config.hosts {
        host_resources(
            host,
            files,
            &HostLinks {
                slurmdbd: slurmdbd_service.as_ref(),
                add_cluster: add_cluster.as_ref(),
                slurmctld: &slurmctld_service,
                fake_gpus: fake_gpus.get(host.name.as_str()).copied(),
            },
            out,
        );
    }
    if config.database.is_some() {
        accounting_commands(config, out);
    }
}

/// Cross-host dependencies of a host's daemons.
struct HostLinks<'a> {
    slurmdbd: Option<&'a ResourceId>,
    add_cluster: Option<&'a ResourceId>,
    slurmctld: &'a ResourceId,
    /// GPUs whose device files slurmd needs made first (`fake_gpu_devices`).
    fake_gpus: Option<u32>,
}

fn host_resources(host: &SlurmHost, files: &SlurmFiles, links: &HostLinks<'_>, out: &mut Vec<Resource>) {
    let name = host.name.as_str();
    let mut packages = vec!["munge", "slurm-client"];
    if host.controller {
        packages.push("slurmctld");
    }
    if host.compute {
        packages.push("slurmd");
    }
    if host.database && files.database.is_some() {
        packages.extend(["mariadb-server", "slurmdbd"]);
    }
    let target = Target::node(name);
    out.extend(packages.iter().map(|package_name| package(&target, package_name)));

    // /etc/slurm and the slurm user come with slurm-client; /etc/munge and the
    // munge user with munge.
    let client = package_id(name, "slurm-client");
    let munge_package = package_id(name, "munge");
    let munge_key =
        owned_secret_file(&target, MUNGE_KEY, files.munge_key.clone(), 0o400, "munge").after([munge_package.clone()]);
    let munge_key_id = munge_key.id.clone();
    out.push(munge_key);
    out.push(
        watching_service(&target, "munge", std::slice::from_ref(&munge_key_id), OnChange::Restart)
            .after([munge_package, munge_key_id]),
    );
    let munge_service = service_id(name, "munge");

    let mut config_files = vec![(SLURM_CONF, &files.slurm_conf), (CGROUP_CONF, &files.cgroup_conf)];
    if let Some(content) = &files.gres_conf {
        config_files.insert(1, (GRES_CONF, content));
    }
    if let Some(content) = &files.topology_conf {
        config_files.push((TOPOLOGY_CONF, content));
    }
    let mut watched = Vec::with_capacity(config_files.len());
    for (path, content) in config_files {
        // slurmd reads GPU devices and cgroup limits when it starts, and a node that
        // registers with other GRES than slurmctld expects is set INVAL: on a compute
        // node these change only once it is empty. slurm.conf itself needs daemon
        // restarts at most, which running jobs survive (slurmd's KillMode=process).
        let disruption = if host.compute && (path == GRES_CONF || path == CGROUP_CONF) {
            Disruption::Drain
        } else {
            Disruption::None
        };
        let resource = file(&target, path, content.clone(), 0o644).after([client.clone()]).disrupts(disruption);
        watched.push(resource.id.clone());
        out.push(resource);
    }

    if host.database
        && let Some(database) = &files.database
    {
        database_resources(name, database, &munge_service, out);
    }
    if host.controller {
        let mut after = vec![package_id(name, "slurmctld"), munge_service.clone()];
        after.extend(watched.iter().cloned());
        after.extend(links.slurmdbd.cloned());
        after.extend(links.add_cluster.cloned());
        out.push(watching_service(&target, "slurmctld", &watched, OnChange::Restart).after(after));
    }
    if host.compute {
        let mut after = vec![package_id(name, "slurmd"), munge_service, links.slurmctld.clone()];
        after.extend(watched.iter().cloned());
        if let Some(count) = links.fake_gpus {
            let devices = fake_gpu_devices(name, count);
            after.push(devices.id.clone());
            out.push(devices);
        }
        out.push(watching_service(&target, "slurmd", &watched, OnChange::Restart).after(after));
    }
}

fn database_resources(name: &str, database: &DatabaseFiles, munge_service: &ResourceId, out: &mut Vec<Resource>) {
    let mariadb_package = package_id(name, "mariadb-server");
    let slurmdbd_package = package_id(name, "slurmdbd");
    let client = package_id(name, "slurm-client");
    let target = Target::node(name);
    out.push(unwatched_service(&target, "mariadb", [mariadb_package]));
    let mariadb_service = service_id(name, "mariadb");

    // Owned by the slurm user the package created; slurmdbd refuses any other owner or mode.
    let slurmdbd_conf = owned_secret_file(&target, SLURMDBD_CONF, database.slurmdbd_conf.clone(), 0o600, "slurm")
        .after([slurmdbd_package.clone()]);
    let setup_sql = secret_file(&target, DB_SETUP_SQL, database.setup_sql.clone(), 0o600).after([client.clone()]);
    let client_cnf = secret_file(&target, DB_CLIENT_CNF, database.client_cnf.clone(), 0o600).after([client]);
    let (conf_id, setup_id, client_id) = (slurmdbd_conf.id.clone(), setup_sql.id.clone(), client_cnf.id.clone());
    out.extend([slurmdbd_conf, setup_sql, client_cnf]);

    // The password is only in the files: argv and guard show paths, never the secret.
    let db_user = Command::new(
        vec!["mariadb".to_owned(), format!("--execute=source {DB_SETUP_SQL}")],
        "create the database user slurmdbd connects as",
    )
    .unless(vec![
        "mariadb".to_owned(),
        format!("--defaults-extra-file={DB_CLIENT_CNF}"),
        "--execute=SELECT 1".to_owned(),
    ])
    .on(&target, "slurm-db-user")
    .after([mariadb_service.clone(), setup_id, client_id]);
    let db_user_id = db_user.id.clone();
    out.push(db_user);
    out.push(watching_service(&target, "slurmdbd", std::slice::from_ref(&conf_id), OnChange::Restart).after([
        slurmdbd_package,
        munge_service.clone(),
        mariadb_service,
        db_user_id,
        conf_id,
    ]));
}

/// `prefix` followed by `rest`, each its own argument.
fn joined(mut prefix: Vec<String>, rest: &[&str]) -> Vec<String> {
    prefix.extend(rest.iter().map(|item| (*item).to_owned()));
    prefix
}

/// Guards run before anything is deployed too (a plan asks them on a fresh host).
/// Without slurm.conf, sacctmgr looks for a configless controller in DNS (an SRV
/// record) and, where DNS does not answer, waits 10 s to say so: no config means
/// nothing registered, so the guard fails at once instead. (`SLURM_CONF` is where
/// Slurm's commands read their config when it is set.)
const HAS_CONFIG: &str = r#"test -f "${SLURM_CONF:-/etc/slurm/slurm.conf}" || exit 1; "#;

/// Guard: `sacctmgr -n -P ARGS…` prints something.
fn sacctmgr_shows(query: &[&str]) -> Vec<String> {
    let script = format!(r#"{HAS_CONFIG}test -n "$(sacctmgr -n -P "$@")""#);
    joined(strings(["sh", "-c", &script, "sh"]), query)
}

/// Read: what `sacctmgr -n -P ARGS…` prints, one value per line (`-P` separates
/// them with `|`, which no value of a QOS or association holds).
fn sacctmgr_values(query: &[&str]) -> Vec<String> {
    let script = format!(r#"{HAS_CONFIG}sacctmgr -n -P "$@" | tr '|' '\n'"#);
    joined(strings(["sh", "-c", &script, "sh"]), query)
}

/// `sacctmgr -i ARGS…` (no confirmation prompt).
fn sacctmgr(words: &[&str]) -> Vec<String> {
    joined(strings(["sacctmgr", "-i"]), words)
}

/// The cluster, QOS, accounts and users, in the order sacctmgr needs them:
/// cluster → QOS (borrow first: the others preempt it) → accounts → users
/// (reference §5.8). `add` fails on an existing object, hence the guards.
fn accounting_commands(config: &SlurmConfig, out: &mut Vec<Resource>) {
    let host = config.controller.as_str();
    let cluster = config.cluster_name.as_str();
    let cluster_where = format!("cluster={cluster}");
    let target = Target::node(host);
    // slurmdbd is "started" for systemd before it listens (it first connects to
    // MariaDB and checks its tables): sacctmgr right after the start is refused.
    // A wait changes nothing: nothing to undo.
    let ready = Command::new(
        strings([
            "sh",
            "-c",
            "for attempt in $(seq 60); do sacctmgr -n -P show cluster format=Cluster >/dev/null && exit 0; sleep 2; done; exit 1",
        ]),
        "wait until slurmdbd answers",
    )
    .unless(strings(["sh", "-c", &format!("{HAS_CONFIG}sacctmgr -n -P show cluster format=Cluster >/dev/null")]))
    .undo(Vec::new())
    .on(&target, "slurmdbd-ready")
    // sacctmgr reads slurm.conf for the slurmdbd address and needs munge.
    .after([file_id(host, SLURM_CONF), service_id(host, "munge"), package_id(host, "slurm-client")])
    .after(config.database.as_deref().map(|db| service_id(db, "slurmdbd")));
    // The cluster's record holds all its accounting and stays (no undo) when
    // accounting leaves the blueprint.
    let add_cluster = Command::new(
        sacctmgr(&["add", "cluster", cluster]),
        format!("register cluster `{cluster}` with slurmdbd before slurmctld starts"),
    )
    .unless(sacctmgr_shows(&["show", "cluster", "where", &format!("name={cluster}"), "format=Cluster"]))
    .on(&target, "sacctmgr-cluster")
    .after([ready.id.clone()]);
    out.extend([ready, add_cluster]);
    if config.qos.is_empty() {
        return;
    }

    // QOS limits name TRES (gres/gpu) that exist only once slurmctld has registered
    // them with slurmdbd, shortly after it starts; sacctmgr rejects them before.
    let tres = Command::new(
        strings([
            "sh",
            "-c",
            r#"for attempt in $(seq 60); do test -n "$(sacctmgr -n -P show tres where type=gres name=gpu format=Name)" && exit 0; sleep 2; done; exit 1"#,
        ]),
        "wait until slurmctld has registered gres/gpu with slurmdbd",
    )
    .unless(sacctmgr_shows(&["show", "tres", "where", "type=gres", "name=gpu", "format=Name"]))
    .undo(Vec::new())
    .on(&target, "slurm-tres-registered")
    .after([service_id(host, "slurmctld")]);
    let mut previous = tres.id.clone();
    out.push(tres);

    for qos in &config.qos {
        let name_where = format!("name={}", qos.name);
        // Settings go with their QOS.
        let add = Command::new(sacctmgr(&["add", "qos", &qos.name]), format!("create QOS `{}`", qos.name))
            .unless(sacctmgr_shows(&["show", "qos", "where", &name_where, "format=Name"]))
            .undo(delete_accounting(&Accounting::Qos { qos: &qos.name }))
            .on(&target, &format!("sacctmgr-qos-{}", qos.name))
            .after([previous]);
        let mut fields: Vec<(&str, String)> = vec![("Priority", qos.priority.to_string())];
        fields.extend(qos.grp_tres.iter().map(|value| ("GrpTRES", value.clone())));
        fields.extend(qos.preempt.iter().map(|value| ("Preempt", value.clone())));
        fields.extend(qos.preempt_mode.iter().map(|value| ("PreemptMode", value.clone())));
        fields.extend(qos.flags.iter().map(|value| ("Flags", value.clone())));
        let modify = set_command(
            host,
            &format!("sacctmgr-qos-{}-settings", qos.name),
            &["modify", "qos", "where", &name_where, "set"],
            &["show", "qos", "where", &name_where],
            &fields,
            format!("set limits and preemption of QOS `{}`", qos.name),
        )
        .after([add.id.clone()]);
        previous = modify.id.clone();
        out.extend([add, modify]);
    }

    let mut account_ids = Vec::with_capacity(config.accounts.len());
    for account in &config.accounts {
        let name_where = format!("name={}", account.name);
        let add = Command::new(
            sacctmgr(&["add", "account", &account.name, &cluster_where]),
            format!("create account `{}`", account.name),
        )
        .unless(sacctmgr_shows(&[
            "show",
            "assoc",
            "where",
            &cluster_where,
            &format!("account={}", account.name),
            "user=",
            "format=Account",
        ]))
        .undo(delete_accounting(&Accounting::Account { account: &account.name, cluster }))
        .on(&target, &format!("sacctmgr-account-{}", account.name))
        .after([previous.clone()]);
        let mut fields: Vec<(&str, String)> = Vec::new();
        fields.extend(account.fairshare.map(|share| ("Fairshare", share.to_string())));
        // sacctmgr lists an association's QOS sorted by name.
        let mut qos = account.qos.clone();
        qos.sort();
        fields.push(("QOS", qos.join(",")));
        fields.push(("DefaultQOS", account.default_qos.clone()));
        let account_where = format!("account={}", account.name);
        let modify = set_command(
            host,
            &format!("sacctmgr-account-{}-settings", account.name),
            &["modify", "account", "where", &name_where, &cluster_where, "set"],
            &["show", "assoc", "where", &cluster_where, &account_where, "user="],
            &fields,
            format!("give account `{}` its QOS and fair share", account.name),
        )
        .after([add.id.clone()]);
        account_ids.push((account.name.as_str(), modify.id.clone()));
        out.extend([add, modify]);
    }

    for user in &config.users {
        let Some((_, account_id)) = account_ids.iter().find(|(name, _)| *name == user.account) else { continue };
        let account_arg = format!("Account={}", user.account);
        let delete = delete_accounting(&Accounting::User { user: &user.name, account: &user.account, cluster });
        out.push(
            Command::new(
                sacctmgr(&[
                    "add",
                    "user",
                    &user.name,
                    &account_arg,
                    &format!("DefaultAccount={}", user.account),
                    &cluster_where,
                ]),
                format!("add user `{}` to account `{}`", user.name, user.account),
            )
            .unless(sacctmgr_shows(&[
                "show",
                "assoc",
                "where",
                &cluster_where,
                &format!("account={}", user.account),
                &format!("user={}", user.name),
                "format=User",
            ]))
            .undo(delete)
            .on(&target, &format!("sacctmgr-user-{}-{}", user.account, user.name))
            .after([account_id.clone()]),
        );
    }
}

/// An accounting object that leaves `tenants:`.
enum Accounting<'a> {
    /// A user's association with an account.
    User { user: &'a str, account: &'a str, cluster: &'a str },
    /// An account's association with the cluster (and the account, once it has no
    /// association left on any cluster).
    Account { account: &'a str, cluster: &'a str },
    /// A QOS (QOS are not per cluster).
    Qos { qos: &'a str },
}

/// Deletes an accounting object unless jobs still run or wait under it: `squeue`
/// lists them, and the script refuses (exit 3, naming the jobs) unless
/// `TOOLKIT_FORCE=1`, which cancels them and waits up to a minute for them to end.
/// Nothing to delete is success, so a rerun after a partial removal converges.
const DELETE_ACCOUNTING: &str = r#"set -u
kind=$1 name=$2 account=$3 cluster=$4
case $kind in
user)
  what="user \`$name\` of account \`$account\`"
  list_jobs() { squeue -h -A "$account" -u "$name" -o '%i (%u, %T)'; }
  cancel_jobs() { scancel -A "$account" -u "$name"; }
  show_object() { sacctmgr -n -P show assoc where cluster="$cluster" account="$account" user="$name" format=User; }
  delete_object() { sacctmgr -i delete user where name="$name" account="$account" cluster="$cluster"; } ;;
account)
  what="account \`$name\`"
  list_jobs() { squeue -h -A "$name" -o '%i (%u, %T)'; }
  cancel_jobs() { scancel -A "$name"; }
  show_object() { sacctmgr -n -P show account where name="$name" format=Account; }
  # Only this cluster's association; the account itself once no cluster has it.
  delete_object() {
    here=$(sacctmgr -n -P show assoc where cluster="$cluster" account="$name" format=Account) || return 1
    if [ -n "$here" ]; then sacctmgr -i delete account where name="$name" cluster="$cluster" || return 1; fi
    anywhere=$(sacctmgr -n -P show assoc where account="$name" format=Cluster) || return 1
    left=$(sacctmgr -n -P show account where name="$name" format=Account) || return 1
    if [ -z "$anywhere" ] && [ -n "$left" ]; then sacctmgr -i delete account where name="$name"; fi
  } ;;
qos)
  what="QOS \`$name\`"
  list_jobs() { squeue -h -q "$name" -o '%i (%u, %T)'; }
  cancel_jobs() { scancel -q "$name"; }
  show_object() { sacctmgr -n -P show qos where name="$name" format=Name; }
  delete_object() { sacctmgr -i delete qos where name="$name"; } ;;
*) echo "unknown accounting object \`$kind\`" >&2; exit 1 ;;
esac
shown=$(show_object) || { echo "cannot read $what from slurmdbd" >&2; exit 1; }
test -n "$shown" || exit 0
listed=$(list_jobs) || { echo "cannot list the jobs of $what: is slurmctld up?" >&2; exit 1; }
if [ -n "$listed" ]; then
  listed=$(printf '%s\n' "$listed" | awk 'NR > 1 { printf ", " } { printf "%s", $0 }')
  if [ "${TOOLKIT_FORCE:-}" != 1 ]; then
    echo "refusing to delete $what: it has running or pending jobs: $listed; delete it once they end, or deploy with --force to cancel them" >&2
    exit 3
  fi
  cancel_jobs
  for attempt in $(seq 30); do test -z "$(list_jobs)" && break; sleep 2; done
fi
delete_object
"#;

/// The undo of an accounting object's `add` command ([`DELETE_ACCOUNTING`]).
fn delete_accounting(object: &Accounting<'_>) -> Vec<String> {
    let (kind, name, account, cluster) = match object {
        Accounting::User { user, account, cluster } => ("user", *user, *account, *cluster),
        Accounting::Account { account, cluster } => ("account", *account, "", *cluster),
        Accounting::Qos { qos } => ("qos", *qos, "", ""),
    };
    strings(["sh", "-c", DELETE_ACCOUNTING, "toolkit-delete-accounting", kind, name, account, cluster])
}

/// `sacctmgr -i MODIFY… set K=V…`, run when `SHOW… format=K,…` prints other values
/// than `V|…` (values as sacctmgr 22.05 shows them); a plan shows each `K` old → new.
fn set_command(
    host: &str,
    name: &str,
    modify: &[&str],
    show: &[&str],
    fields: &[(&str, String)],
    description: String,
) -> Resource {
    let assignments: Vec<String> = fields.iter().map(|(key, value)| format!("{key}={value}")).collect();
    let mut argv: Vec<&str> = modify.to_vec();
    argv.extend(assignments.iter().map(String::as_str));
    let format = format!("format={}", fields.iter().map(|(key, _)| *key).collect::<Vec<_>>().join(","));
    let mut show_args: Vec<&str> = show.to_vec();
    show_args.push(&format);
    let reads = Reads {
        argv: sacctmgr_values(&show_args),
        wanted: fields.iter().map(|(key, value)| ((*key).to_owned(), value.clone())).collect(),
    };
    // A setting goes with its object: nothing to undo on its own.
    Command::new(sacctmgr(&argv), description).reads(reads).undo(Vec::new()).on(&Target::node(host), name)
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;
    use std::path::Path;

    use super::*;
    use crate::resource::Desired;

    fn model(path: &str) -> Model {
        let loaded = crate::blueprint::load(Path::new(path)).expect("blueprint loads");
        crate::model::expand(&loaded.blueprint).expect("blueprint expands")
    }

    fn secrets() -> Secrets {
        Secrets {
            munge_key: Some("test-munge-key-0123456789abcdef0123".to_owned()),
            db_password: Some("test-db-pass".to_owned()),
            named: std::collections::BTreeMap::new(),
            bmcs: std::collections::BTreeMap::new(),
            kubeadm: crate::render::kubeadm::KubeadmSecrets::default(),
        }
    }

    fn rendered(path: &str) -> (SlurmConfig, SlurmFiles) {
        let config = slurm_model::slurm(&model(path)).expect("slurm model").expect("scheduler is slurm");
        let renderer = Renderer::embedded().expect("templates parse");
        let files = files(&config, &renderer, &secrets()).expect("templates render");
        (config, files)
    }

    fn all_files(files: &SlurmFiles) -> Vec<(&'static str, &Content)> {
        let mut out = vec![("slurm.conf", &files.slurm_conf)];
        out.extend(files.gres_conf.as_ref().map(|content| ("gres.conf", content)));
        out.extend(files.topology_conf.as_ref().map(|content| ("topology.conf", content)));
        out.push(("cgroup.conf", &files.cgroup_conf));
        if let Some(database) = &files.database {
            out.push(("slurmdbd.conf", &database.slurmdbd_conf));
            out.push(("slurmdbd-setup.sql", &database.setup_sql));
            out.push(("slurmdbd-client.cnf", &database.client_cnf));
        }
        out
    }

    fn snapshot_files(prefix: &str, path: &str) {
        let (_, files) = rendered(path);
        for (name, content) in all_files(&files) {
            assert!(
                content.text().starts_with("# Managed by toolkit")
                    || content.text().starts_with("-- Managed by toolkit")
            );
            insta::assert_snapshot!(format!("{prefix}__{name}"), content.text());
        }
    }

    #[test]
    fn lab_files() {
        snapshot_files("lab", "blueprints/lab.yaml");
    }

    #[test]
    fn superpod_files() {
        snapshot_files("superpod", "blueprints/h100-superpod-1su.yaml");
    }

    #[test]
    fn h200_roce_files() {
        snapshot_files("h200_roce", "blueprints/h200-roce-64.yaml");
    }

    fn lab_resources() -> Vec<Resource> {
        let renderer = Renderer::embedded().expect("templates parse");
        let mut out = Vec::new();
        render(&model("blueprints/lab.yaml"), None, &renderer, &secrets(), &mut out).expect("renders");
        out
    }

    /// One line per resource: id, what it is, and what it waits for.
    fn describe(resources: &[Resource]) -> String {
        let mut text = String::new();
        for resource in resources {
            let what = match &*resource.desired {
                Desired::File { mode, owner, group, secret, content, .. } => {
                    let secret = if *secret { " secret" } else { "" };
                    format!("{mode:o} {owner}:{group}{secret} sha256:{}", &content.sha256()[..12])
                }
                Desired::Service { .. } => {
                    let watches: Vec<ResourceId> = resource.watches().collect();
                    format!("watches [{}]", watches.iter().map(ResourceId::as_str).collect::<Vec<_>>().join(", "))
                }
                Desired::Command { argv, unless, reads: None, .. } => format!("{argv:?} unless {unless:?}"),
                Desired::Command { argv, reads: Some(reads), .. } => {
                    format!("{argv:?} reads {:?} wanting {:?}", reads.argv, reads.wanted)
                }
                Desired::Package { .. } | Desired::Directory { .. } | Desired::Api(_) => String::new(),
            };
            let after = resource.depends_on.iter().map(ResourceId::as_str).collect::<Vec<_>>().join(", ");
            let _ = writeln!(text, "{} {what}\n    after [{after}]", resource.id);
        }
        text
    }

    #[test]
    fn lab_resources_snapshot() {
        insta::assert_snapshot!(describe(&lab_resources()));
    }

    #[test]
    fn fake_gpu_devices_are_made_before_slurmd_where_the_inventory_asks() {
        let inventory: Inventory = serde_norway::from_str(
            "version: 1\nhosts:\n  head: { address: 10.10.0.10, fake_gpu_devices: true }\n  \
             node02: { address: 10.10.0.12, fake_gpu_devices: true }\n  node03: { address: 10.10.0.13 }\n",
        )
        .expect("inventory parses");
        let renderer = Renderer::embedded().expect("templates parse");
        let mut out = Vec::new();
        render(&model("blueprints/lab.yaml"), Some(&inventory), &renderer, &secrets(), &mut out).expect("renders");
        let devices: Vec<&Resource> =
            out.iter().filter(|r| r.id.as_str().ends_with(":command:fake-gpu-devices")).collect();
        // The head has no GPUs and node03 has real ones: only node02 gets devices.
        assert_eq!(devices.iter().map(|r| r.target()).collect::<Vec<_>>(), ["node02"]);
        let Desired::Command { argv, unless, creates, .. } = &*devices[0].desired else { panic!("{:?}", devices[0]) };
        assert_eq!(argv[..2], ["sh", "-c"]);
        assert!(argv[2].contains(r#"echo "c /dev/nvidia$i 0666 root root - 195:$i""#), "{argv:?}");
        assert!(argv[2].contains("systemd-tmpfiles --create"), "made now, and at every boot: {argv:?}");
        assert_eq!(argv[3..], ["sh", "3"], "four GPUs: /dev/nvidia0 to /dev/nvidia3");
        assert_eq!(unless.as_ref().map(|guard| guard[3..].to_vec()), Some(strings(["sh", "3"])));
        assert!(creates.is_none());
        let slurmd = out.iter().find(|r| r.id.as_str() == "node02:service:slurmd").expect("slurmd");
        assert!(slurmd.depends_on.contains(&devices[0].id));
        crate::graph::build(out).expect("no unknown dependency, no cycle");
    }

    /// Before deploy there is no slurm.conf: every guard must then say "not done"
    /// (and at once, without sacctmgr's DNS wait), whatever sacctmgr would print.
    /// The undos the lab's accounting commands declare: users, then accounts, then
    /// QOS in a removal (the reverse of the apply order); settings and waits have
    /// nothing to undo; the cluster's record stays.
    #[test]
    fn accounting_commands_declare_their_undo() {
        let undos: Vec<(String, Option<Vec<String>>)> = lab_resources()
            .into_iter()
            .filter_map(|resource| match std::sync::Arc::unwrap_or_clone(resource.desired) {
                Desired::Command { undo, .. } if resource.id.as_str().starts_with("head:command:") => {
                    Some((resource.id.to_string(), undo))
                }
                _ => None,
            })
            .collect();
        let tail = |id: &str| -> Option<Vec<String>> {
            let (_, undo) = undos.iter().find(|(found, _)| found == id).unwrap_or_else(|| panic!("{id}: {undos:?}"));
            undo.as_ref().map(|argv| argv.get(3..).unwrap_or_default().to_vec())
        };
        assert_eq!(
            tail("head:command:sacctmgr-user-team-b-bob").expect("undo"),
            ["toolkit-delete-accounting", "user", "bob", "team-b", "lab"]
        );
        assert_eq!(
            tail("head:command:sacctmgr-account-team-b").expect("undo"),
            ["toolkit-delete-accounting", "account", "team-b", "", "lab"]
        );
        assert_eq!(
            tail("head:command:sacctmgr-qos-team-b").expect("undo"),
            ["toolkit-delete-accounting", "qos", "team-b", "", ""]
        );
        for nothing in [
            "sacctmgr-qos-team-b-settings",
            "sacctmgr-account-team-b-settings",
            "slurmdbd-ready",
            "slurm-tres-registered",
        ] {
            assert_eq!(tail(&format!("head:command:{nothing}")), Some(Vec::new()), "{nothing}");
        }
        assert_eq!(tail("head:command:sacctmgr-cluster"), None);
    }

    /// [`DELETE_ACCOUNTING`] through a real `sh`, with `squeue`, `scancel` and
    /// `sacctmgr` stubs that keep the jobs and the object in files.
    #[test]
    fn an_accounting_object_with_jobs_is_deleted_only_when_forced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stub = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\necho \"{name} $*\" >> \"$STUBS/log\"\n{body}")).expect("stub");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        };
        stub("squeue", "cat \"$STUBS/jobs\" 2>/dev/null; exit 0\n");
        stub("scancel", "rm -f \"$STUBS/jobs\"\n");
        stub(
            "sacctmgr",
            "test -e \"$STUBS/down\" && exit 1\ncase $2 in delete) rm -f \"$STUBS/object\";; *) cat \"$STUBS/object\" 2>/dev/null;; esac\nexit 0\n",
        );
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
        let run = |object: &Accounting<'_>, force: bool| {
            let argv = delete_accounting(object);
            let mut command = std::process::Command::new(&argv[0]);
            command.args(&argv[1..]).env("PATH", &path).env("STUBS", dir.path()).env_remove("TOOLKIT_FORCE");
            if force {
                command.env("TOOLKIT_FORCE", "1");
            }
            let output = command.output().expect("sh");
            let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
            let _ = std::fs::remove_file(dir.path().join("log"));
            (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned(), log)
        };
        let account = Accounting::Account { account: "team-b", cluster: "lab" };
        std::fs::write(dir.path().join("object"), "team-b\n").expect("object");
        std::fs::write(dir.path().join("jobs"), "41 (bob, RUNNING)\n42 (bob, PENDING)\n").expect("jobs");

        let (code, stderr, log) = run(&account, false);
        assert_eq!(code, Some(3), "{stderr}");
        assert_eq!(
            stderr.trim(),
            "refusing to delete account `team-b`: it has running or pending jobs: 41 (bob, RUNNING), 42 (bob, PENDING); \
             delete it once they end, or deploy with --force to cancel them"
        );
        assert!(!log.contains("delete") && !log.contains("scancel"), "{log}");

        let (code, stderr, log) = run(&account, true);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(log.contains("scancel -A team-b"), "{log}");
        assert!(log.contains("sacctmgr -i delete account where name=team-b cluster=lab"), "{log}");
        assert!(!dir.path().join("object").exists());

        // Nothing left: success at once, no jobs asked for (a rerun converges).
        let (code, _, log) = run(&Accounting::Qos { qos: "team-b" }, false);
        assert_eq!(code, Some(0));
        assert!(!log.contains("squeue"), "{log}");

        // slurmdbd not answering is an error, never "nothing to delete".
        std::fs::write(dir.path().join("down"), "").expect("down");
        let (code, stderr, _) = run(&Accounting::User { user: "bob", account: "team-b", cluster: "lab" }, false);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("cannot read user `bob` of account `team-b`"), "{stderr}");
    }

    #[test]
    fn without_slurm_conf_every_accounting_guard_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A sacctmgr that prints nothing, as the real one does without a config.
        let stub = dir.path().join("sacctmgr");
        std::fs::write(&stub, "#!/bin/sh\nexit 1\n").expect("write stub");
        std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let path = format!("{}:{}", dir.path().display(), std::env::var("PATH").unwrap_or_default());
        let (mut guards, mut reads) = (0, 0);
        for resource in lab_resources() {
            let (guard, is_read) = match &*resource.desired {
                Desired::Command { unless: Some(guard), .. } => (guard, false),
                Desired::Command { reads: Some(read), .. } => (&read.argv, true),
                _ => continue,
            };
            if !guard.iter().any(|word| word.contains("sacctmgr")) {
                continue;
            }
            let output = std::process::Command::new(&guard[0])
                .args(&guard[1..])
                .env("PATH", &path)
                .env("SLURM_CONF", dir.path().join("no-slurm.conf"))
                .output()
                .expect("guard runs");
            if is_read {
                // Nothing read: the object is absent, the plan creates it.
                assert!(output.stdout.is_empty(), "{}: reads a value without slurm.conf: {guard:?}", resource.id);
                reads += 1;
            } else {
                assert!(!output.status.success(), "{}: guard passes without slurm.conf: {guard:?}", resource.id);
                guards += 1;
            }
        }
        assert_eq!(guards, 10, "ready, cluster, tres, 3 QOS, 2 accounts, 2 users");
        assert_eq!(reads, 5, "the settings of 3 QOS and 2 accounts");
    }

    fn position(graph: &crate::graph::ResourceGraph, id: &str) -> usize {
        graph
            .ordered()
            .position(|index| graph.resources[index].id.as_str() == id)
            .unwrap_or_else(|| panic!("`{id}` is rendered"))
    }

    #[test]
    fn lab_graph_orders_daemons_across_hosts() {
        let graph = crate::graph::build(lab_resources()).expect("no unknown dependency, no cycle");
        let before = |first: &str, second: &str| {
            assert!(position(&graph, first) < position(&graph, second), "`{first}` comes before `{second}`");
        };
        before("head:service:munge", "head:service:slurmctld");
        before("head:service:slurmdbd", "head:service:slurmctld");
        before("head:service:slurmctld", "node01:service:slurmd");
        before("head:service:mariadb", "head:command:slurm-db-user");
        before("head:command:slurm-db-user", "head:service:slurmdbd");
        before("head:command:sacctmgr-cluster", "head:service:slurmctld");
        before("node01:file:/etc/munge/munge.key", "node01:service:munge");
        before("node01:service:munge", "node01:service:slurmd");
        before("node01:file:/etc/slurm/gres.conf", "node01:service:slurmd");
        before("head:command:sacctmgr-qos-borrow-settings", "head:command:sacctmgr-qos-team-a");
        before("head:command:sacctmgr-qos-team-b-settings", "head:command:sacctmgr-account-team-a");
        before("head:command:sacctmgr-account-team-a-settings", "head:command:sacctmgr-user-team-a-alice");
        // Direct edges, not just an order that happens to hold.
        let slurmd = graph.resources.iter().position(|r| r.id.as_str() == "node03:service:slurmd").expect("slurmd");
        let deps: Vec<&str> = graph.dependencies(slurmd).map(|i| graph.resources[i].id.as_str()).collect();
        assert!(deps.contains(&"head:service:slurmctld"));
        assert!(deps.contains(&"node03:service:munge"));
    }

    #[test]
    fn secrets_stay_out_of_commands_and_public_files() {
        let resources = lab_resources();
        let password = secrets().db_password.expect("test password");
        for resource in &resources {
            match &*resource.desired {
                Desired::Command { argv, unless, description, reads, .. } => {
                    let read = reads.iter().flat_map(|reads| &reads.argv);
                    let all = argv.iter().chain(unless.iter().flatten()).chain(read).chain([description]);
                    assert!(all.into_iter().all(|arg| !arg.contains(&password)), "{} shows the password", resource.id);
                }
                Desired::File { content, secret, path, .. } if content.text().contains(&password) => {
                    assert!(*secret, "{path} holds the password but is not secret");
                }
                _ => {}
            }
        }
        let dbd =
            resources.iter().find(|r| r.id.as_str() == "head:file:/etc/slurm/slurmdbd.conf").expect("slurmdbd.conf");
        assert!(matches!(&*dbd.desired, Desired::File { mode: 0o600, owner, secret: true, .. } if owner == "slurm"));
        let key = resources.iter().find(|r| r.id.as_str() == "node02:file:/etc/munge/munge.key").expect("munge key");
        assert!(matches!(&*key.desired, Desired::File { mode: 0o400, owner, secret: true, .. } if owner == "munge"));
    }

    #[test]
    fn quotes_passwords_for_sql_and_option_files() {
        assert_eq!(sql_quoted(r"a'b\c"), r"a\'b\\c");
        assert_eq!(option_file_quoted(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(slurm_conf_quoted("plain").as_deref(), Some("plain"));
        assert_eq!(slurm_conf_quoted(r"a b#c\d").as_deref(), Some(r#""a b\#c\\d""#));
        assert_eq!(slurm_conf_quoted(""), Some(r#""""#.to_owned()));
        assert_eq!(slurm_conf_quoted(r#"a"b"#), None);
    }

    #[test]
    fn content_is_rendered_once_and_shared_at_scale() {
        let yaml = r#"
version: 1
cluster: { name: big }
node_groups:
  - { name: ctl, count: 1, hostname: ctl01, roles: [controller, database, login] }
  - name: gpu
    count: 4096
    hostname: "gpu{index:04}"
    roles: [compute]
    cpu: { sockets: 2, cores_per_socket: 48, threads_per_core: 2 }
    memory_gib: 2048
    gpu: { model: h200, count: 8 }
    rail_nics: { count: 8, speed_gbps: 400, link_layer: ethernet }
fabric:
  compute:
    kind: roce
    rails: 8
    link_speed_gbps: 400
    switch: { model: sn5600, radix: 128 }
    addressing: { rail_pool: 10.64.0.0/10, loopback_pool: 10.255.0.0/20 }
  management:
    inband: { subnet: 10.0.0.0/19 }
scheduler:
  kind: slurm
  slurm:
    partitions: [ { name: gpu, groups: [gpu], default: true } ]
tenants:
  - { name: a, users: [alice], guaranteed_gpus: 16384 }
  - { name: b, users: [bob], guaranteed_gpus: 16384 }
"#
        .to_owned();
        let loaded = crate::blueprint::load::load_text(Path::new("scale.yaml"), yaml).expect("loads");
        let model = crate::model::expand(&loaded.blueprint).expect("expands");
        let renderer = Renderer::embedded().expect("templates parse");
        let mut out = Vec::new();
        render(&model, None, &renderer, &secrets(), &mut out).expect("renders");

        let slurm_confs: Vec<&Content> = out
            .iter()
            .filter_map(|resource| match &*resource.desired {
                Desired::File { path, content, .. } if path == SLURM_CONF => Some(content),
                _ => None,
            })
            .collect();
        assert_eq!(slurm_confs.len(), 4096 + 1);
        let first = slurm_confs[0];
        // One rendering: every host holds the same allocation, not an equal copy.
        assert!(slurm_confs.iter().all(|content| std::ptr::eq(content.text(), first.text())));
        assert!(slurm_confs.iter().all(|content| content.sha256() == first.sha256()));
        // Node and partition lines per group, not per node.
        assert!(first.len() < 4096, "slurm.conf is {} bytes", first.len());
        assert!(first.text().contains("NodeName=gpu[0001-4096] "));
        let topology = out
            .iter()
            .find_map(|resource| match &*resource.desired {
                Desired::File { path, content, .. } if path == TOPOLOGY_CONF => Some(content.text()),
                _ => None,
            })
            .expect("topology.conf");
        assert_eq!(topology.lines().filter(|line| line.starts_with("SwitchName=su")).count(), 64);
        assert!(topology.contains("SwitchName=fabric Switches=su[0-63]"));
    }
}
