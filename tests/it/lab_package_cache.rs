//! The package cache in the lab: deploy puts apt-cacher-ng on the head node and
//! points every other node's apt at it; a package the first node installs is then
//! served to the second node by the cache, with its origin already gone.
//!
//! The lab has no way out to Debian's mirrors, so the origin is a one-package
//! repository the test serves from the head node on port 80 (apt-cacher-ng only
//! proxies to port 80 by default): what is tested is toolkit's cache and proxy
//! setting, with the real apt and apt-cacher-ng of Debian 12. The head gets a
//! resolver that refuses at once, for the lab has no DNS beyond Docker's.
//!
//! Runs under its own cluster name and subnets (`lab-pkg`, 10.171.0.0/24, rail pool
//! 10.172.0.0/16). `TOOLKIT_KEEP_LAB=1` keeps the containers afterwards.

use std::path::Path;

use super::lab::{lab_or_skip, text, toolkit};
use super::lab_e2e::{Teardown, assert_success, exec_ok_in, fresh_lab};

const CLUSTER: &str = "lab-pkg";
const BLUEPRINT_EDITS: &[(&str, &str)] = &[
    ("  name: lab\n", "  name: lab-pkg\n"),
    ("subnet: 10.10.0.0/24", "subnet: 10.171.0.0/24"),
    ("rail_pool: 10.200.0.0/16", "rail_pool: 10.172.0.0/16"),
];
/// Management addresses move with the subnet; MACs are `02:42` + the rail address
/// (10.200 = `0a:c8`, 10.172 = `0a:ac`).
const INVENTORY_EDITS: &[(&str, &str)] = &[("address: 10.10.0.", "address: 10.171.0."), (":0a:c8:", ":0a:ac:")];
const HEAD: &str = "10.171.0.10";
const PROBE: &str = "toolkit-cache-probe";

/// Builds a one-package flat repository in /srv/probe on the head and serves it on
/// port 80 (its requests logged to the journal of unit `probe-origin`).
const SERVE_REPOSITORY: &str = r#"set -eu
mkdir -p /tmp/probe/DEBIAN /srv/probe
printf 'Package: toolkit-cache-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: toolkit tests <tests@example.org>\nDescription: a package the lab cache test installs\n' > /tmp/probe/DEBIAN/control
dpkg-deb --build --root-owner-group /tmp/probe /srv/probe/toolkit-cache-probe_1.0_all.deb >/dev/null
cd /srv/probe
deb=toolkit-cache-probe_1.0_all.deb
{ sed 's/^Description/Filename: .\/'"$deb"'\nSize: '"$(stat -c %s $deb)"'\nSHA256: '"$(sha256sum $deb | cut -d' ' -f1)"'\nDescription/' /tmp/probe/DEBIAN/control; } > Packages
printf 'Origin: toolkit-tests\nSuite: ./\nSHA256:\n %s %s Packages\n' "$(sha256sum Packages | cut -d' ' -f1)" "$(stat -c %s Packages)" > Release
# Under systemd, not in the background of this `lab exec`: Docker freezes what an exec leaves behind.
systemd-run --quiet --unit probe-origin python3 -m http.server 80 --bind 10.171.0.10 --directory /srv/probe
for i in $(seq 50); do python3 -c 'import urllib.request; urllib.request.urlopen("http://10.171.0.10/Release")' 2>/dev/null && exit 0; sleep 0.2; done
echo "the origin did not start" >&2; exit 1
"#;

/// apt on a node, limited to the probe's source (the lab's Debian mirrors are out of reach).
fn apt(dir: &Path, host: &str, args: &str) -> String {
    let only_probe = "-o Dir::Etc::SourceList=/etc/apt/sources.list.d/probe.list -o Dir::Etc::SourceParts=-";
    exec_ok_in(
        dir,
        CLUSTER,
        host,
        &["sh", "-c", &format!("DEBIAN_FRONTEND=noninteractive apt-get -q {only_probe} {args}")],
    )
}

#[test]
fn a_package_fetched_once_is_served_to_the_next_node_by_the_cache() {
    let Some(_lab) = lab_or_skip("a_package_fetched_once_is_served_to_the_next_node_by_the_cache") else { return };
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path();
    fresh_lab(dir, CLUSTER, BLUEPRINT_EDITS, INVENTORY_EDITS);
    let _teardown = Teardown(dir, CLUSTER);
    // Five hosts are below the default's threshold: the blueprint asks for the cache.
    let blueprint = dir.join("lab.yaml");
    let mut text_of = std::fs::read_to_string(&blueprint).expect("blueprint");
    text_of.push_str("package_cache: { enabled: true }\n");
    std::fs::write(&blueprint, text_of).expect("write blueprint");

    // apt-cacher-ng resolves names for every request. Docker's resolver forwards to
    // the machine's, which has no way out here: each lookup would wait 20 s and the
    // request fail. Refused at once instead, as a site without DNS for the outside would.
    exec_ok_in(dir, CLUSTER, "head", &["sh", "-c", "echo 'nameserver 127.0.0.1' > /etc/resolv.conf"]);
    let deploy = toolkit(dir, &["deploy", "lab.yaml", "-i", "inventory.yaml", "--yes"]);
    assert_success(&deploy, "deploy with the package cache");
    assert_eq!(exec_ok_in(dir, CLUSTER, "head", &["systemctl", "is-active", "apt-cacher-ng"]).trim(), "active");
    let setting = exec_ok_in(dir, CLUSTER, "node01", &["cat", "/etc/apt/apt.conf.d/01toolkit-package-cache"]);
    assert!(setting.contains(&format!("\"http://{HEAD}:3142/\"")), "{setting}");
    let on_head = toolkit(
        dir,
        &[
            "lab",
            "exec",
            "--cluster",
            CLUSTER,
            "head",
            "--",
            "test",
            "-e",
            "/etc/apt/apt.conf.d/01toolkit-package-cache",
        ],
    );
    assert!(!on_head.status.success(), "the cache host fetches for itself");

    exec_ok_in(dir, CLUSTER, "head", &["sh", "-c", SERVE_REPOSITORY]);
    for node in ["node01", "node02"] {
        exec_ok_in(
            dir,
            CLUSTER,
            node,
            &["sh", "-c", &format!("echo 'deb [trusted=yes] http://{HEAD}/ ./' > /etc/apt/sources.list.d/probe.list")],
        );
        apt(dir, node, "update");
    }
    apt(dir, "node01", &format!("install -y {PROBE}"));
    // The origin goes away: node02 can only get the package from the cache now.
    exec_ok_in(dir, CLUSTER, "head", &["systemctl", "stop", "probe-origin"]);
    apt(dir, "node02", &format!("install -y {PROBE}"));
    let installed = exec_ok_in(dir, CLUSTER, "node02", &["dpkg-query", "-W", "-f=${Status}", PROBE]);
    assert_eq!(installed, "install ok installed");

    // The origin served the package once; the cache delivered it twice.
    let origin = exec_ok_in(dir, CLUSTER, "head", &["journalctl", "-u", "probe-origin", "--no-pager"]);
    let downloads = origin.lines().filter(|line| line.contains("GET ") && line.contains(".deb")).count();
    assert_eq!(downloads, 1, "the origin served the package once:\n{origin}");
    // apt-cacher-ng's transfer log: `I` fetched from upstream, `O` delivered to a client.
    let log = exec_ok_in(dir, CLUSTER, "head", &["cat", "/var/log/apt-cacher-ng/apt-cacher.log"]);
    let count = |kind: &str| log.lines().filter(|line| line.contains(kind) && line.contains(".deb")).count();
    assert_eq!((count("|I|"), count("|O|")), (1, 2), "fetched once, delivered to both nodes:\n{log}");
    eprintln!("{}", text(&deploy.stderr).lines().last().unwrap_or_default());
}
