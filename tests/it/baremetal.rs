//! Bare metal end to end, on machines that really boot: two blank QEMU guests of
//! the VM lab (`tests/support/vmlab.sh`), each behind its own sushy-tools BMC with
//! the libvirt driver, known to toolkit only by their BMC addresses. `toolkit
//! deploy` inspects them, refuses them while the blueprint wants more memory than
//! they have (nothing written), installs them over PXE (one with its cable cut:
//! named, the other finishes), is killed while the cut one writes its image, resumes
//! it on a rerun, and configures Slurm on both; `srun -N2 hostname` runs. Network
//! boot is served from a second host on the guests' network (an sshd at 10.77.0.2):
//! toolkit copies itself and the image there and runs the service over SSH. vm02 is
//! then reinstalled from its BMC's virtual CD with no DHCP server, served from the
//! machine running toolkit, and the next plan and deploy change nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use serde_json::Value;

const LAB: &str = "vm";

struct Lab {
    description: Value,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::env::var_os("TOOLKIT_KEEP_LAB").is_none() {
            let _ = vmlab(&["down", LAB]);
        }
    }
}

fn vmlab(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/vmlab.sh"))
        .args(args)
        .output()
        .expect("vmlab.sh runs")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `toolkit ARGS` inside the lab's network namespace, in `dir` (`ip netns exec`
/// execs it: the child is toolkit itself).
fn toolkit_command(dir: &Path, lab: &Lab, args: &[&str]) -> Command {
    let password =
        std::fs::read_to_string(lab.description["bmc_password_file"].as_str().expect("file")).expect("password");
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", lab.description["netns"].as_str().expect("netns")])
        .arg(env!("CARGO_BIN_EXE_toolkit"))
        .args(args)
        .current_dir(dir)
        .env("TOOLKIT_BMC_USER", "admin")
        .env("TOOLKIT_BMC_PASSWORD", password.trim())
        .env("TOOLKIT_SSH_PERSIST", "0");
    command
}

fn toolkit(dir: &Path, lab: &Lab, args: &[&str]) -> Output {
    toolkit_command(dir, lab, args).output().expect("toolkit runs")
}

/// What the state file says vm02 was last seen doing while it installs.
fn last_seen_installing(dir: &Path, node: &str) -> Option<String> {
    let state: Value = serde_json::from_slice(&std::fs::read(dir.join(".toolkit/baremetal/state.json")).ok()?).ok()?;
    let record = &state["provisioning"][node];
    (record["step"] == "installing").then(|| record["last_seen"].as_str().unwrap_or_default().to_owned())
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// The lab's inventory: the example's, with the lab's BMC ports, in `dir`.
fn workspace(dir: &Path) {
    std::fs::copy(repo().join("blueprints/baremetal.yaml"), dir.join("baremetal.yaml")).expect("blueprint");
    let inventory = std::fs::read_to_string(repo().join("inventories/baremetal.yaml")).expect("inventory");
    // Images come from the repository's cache, where os_image's tests put the same recipe.
    let inventory = inventory.replace(
        "  host_keys: .toolkit/baremetal/host-keys\n",
        &format!(
            "  host_keys: .toolkit/baremetal/host-keys\n  cache: {}\n  dhcp_timeout: 90\n",
            repo().join(".toolkit/os").display()
        ),
    );
    std::fs::write(dir.join("inventory.yaml"), inventory).expect("inventory");
    let keys = dir.join(".toolkit/baremetal");
    std::fs::create_dir_all(&keys).expect("mkdir");
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(keys.join("id_ed25519"))
        .status()
        .expect("ssh-keygen");
    assert!(status.success());
}

/// `srun -N2 hostname` from vm01, over SSH with the pinned host keys: both answer.
fn srun_on_both(dir: &Path, lab: &Lab) {
    let srun = Command::new("ip")
        .args(["netns", "exec", lab.description["netns"].as_str().expect("netns"), "ssh", "-o", "BatchMode=yes"])
        .args(["-o", "StrictHostKeyChecking=yes", "-i"])
        .arg(dir.join(".toolkit/baremetal/id_ed25519"))
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", dir.join(".toolkit/baremetal/known_hosts").display()))
        .args(["root@10.77.0.11", "timeout 300 srun --immediate=240 -N2 hostname | sort"])
        .output()
        .expect("ssh runs");
    assert!(srun.status.success(), "{}", text(&srun));
    assert_eq!(String::from_utf8_lossy(&srun.stdout), "vm01\nvm02\n");
}

/// Whether no `toolkit provision-service` runs (within 30 s): the boot host's
/// service ends with the connection of the run that started it.
fn service_gone() -> bool {
    for _ in 0..60 {
        let found = Command::new("pgrep").args(["-f", "toolkit provision-service"]).output().expect("pgrep");
        if !found.status.success() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    false
}

fn prerequisites() -> bool {
    for (program, package) in [
        ("qemu-system-x86_64", "qemu-system-x86 (from bookworm-backports: see .ci/setup)"),
        ("libvirtd", "libvirt-daemon-system"),
        ("dnsmasq", "dnsmasq-base"),
        ("debootstrap", "debootstrap"),
        ("ssh-keygen", "openssh-client"),
    ] {
        if !crate::render_network::tool(program, package) {
            return false;
        }
    }
    if !repo().join(".toolkit/venv-libvirt/bin/sushy-emulator").is_file() {
        crate::support::cannot_run("sushy-tools with libvirt is missing: .ci/setup makes .toolkit/venv-libvirt");
        return false;
    }
    true
}

/// Bytes a qcow2 disk holds (its file's allocated size): what was written to it.
fn written(disk: &str) -> u64 {
    std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(disk).expect("disk")) * 512
}

#[test]
fn blank_machines_behind_their_bmcs_become_a_slurm_cluster_through_deploy_alone() {
    if !prerequisites() {
        return;
    }
    // The image first (cached across runs by its recipe), so timings below are the install's.
    if crate::os_image::built().is_none() {
        return;
    }
    let _alone = crate::lab::ONE_LAB_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = vmlab(&["down", LAB]);
    let up = vmlab(&["up", LAB, "2", "1024", "8"]);
    assert!(up.status.success(), "{:?} {}", up.status, text(&up));
    let lab = Lab { description: serde_json::from_slice(&up.stdout).expect("the lab's description") };
    let disks: Vec<String> = lab.description["vms"]
        .as_array()
        .expect("vms")
        .iter()
        .map(|vm| vm["disk"].as_str().expect("disk").to_owned())
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    workspace(dir.path());
    // The provisioning service runs on a second host of the guests' network, over SSH.
    let boothost = vmlab(&["boothost", LAB, &dir.path().join(".toolkit/baremetal/id_ed25519.pub").to_string_lossy()]);
    assert!(boothost.status.success(), "{}", text(&boothost));
    std::fs::write(dir.path().join(".toolkit/baremetal/known_hosts"), &boothost.stdout).expect("known_hosts");
    let lab_dir = PathBuf::from(lab.description["dir"].as_str().expect("dir"));
    let served_from = lab_dir.join("boothost/provision");
    let inventory = std::fs::read_to_string(dir.path().join("inventory.yaml")).expect("inventory");
    let local_service = inventory.clone();
    std::fs::write(
        dir.path().join("inventory.yaml"),
        inventory.replace(
            "  address: 10.77.0.1\n",
            &format!("  address: 10.77.0.2\n  host: {{ address: 10.77.0.2, dir: {} }}\n", served_from.display()),
        ),
    )
    .expect("writes");
    let local_dnsmasq_log = repo().join(".toolkit/os/run/dnsmasq.log");
    let _ = std::fs::remove_file(&local_dnsmasq_log);

    // 1. The blueprint wants 2 GiB; the machines have 1: refused at inspection, nothing written.
    let blueprint = std::fs::read_to_string(dir.path().join("baremetal.yaml")).expect("blueprint");
    std::fs::write(dir.path().join("bigger.yaml"), blueprint.replace("memory_gib: 1", "memory_gib: 2"))
        .expect("writes");
    let before: Vec<u64> = disks.iter().map(|disk| written(disk)).collect();
    let refused = toolkit(dir.path(), &lab, &["deploy", "bigger.yaml", "-i", "inventory.yaml", "--yes"]);
    let said = text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(said.contains("error: vm01: 1 GiB memory, blueprint 2"), "{said}");
    assert!(said.contains("nothing was written to it"), "{said}");
    let after: Vec<u64> = disks.iter().map(|disk| written(disk)).collect();
    assert_eq!(before, after, "no disk was written");

    // 2. vm02's cable is cut: vm01 installs, vm02 is named with the step it never reached.
    let cut = vmlab(&["link", LAB, "vm02", "down"]);
    assert!(cut.status.success(), "{}", text(&cut));
    let started = Instant::now();
    let first = toolkit(dir.path(), &lab, &["deploy", "baremetal.yaml", "-i", "inventory.yaml", "--yes"]);
    let said = text(&first);
    eprintln!("MEASURE first deploy (vm02 cut off): {:.0} s\n{said}", started.elapsed().as_secs_f64());
    assert_eq!(first.status.code(), Some(1), "{said}");
    assert!(said.contains("vm01: installed on /dev/vda"), "{said}");
    assert!(said.contains("error: vm02: network boot: no DHCP request seen from 52:54:00:77:00:12"), "{said}");
    assert!(said.contains("image: provisioning service on 10.77.0.2 (over SSH)"), "{said}");
    assert!(said.contains("image: copied ") && said.contains(" bytes to 10.77.0.2 in "), "{said}");
    let remote_log = std::fs::read_to_string(served_from.join("run/dnsmasq.log")).expect("the boot host's dnsmasq log");
    assert!(remote_log.contains("DHCPACK(br0) 10.77.0.11 52:54:00:77:00:11"), "{remote_log}");
    assert!(!local_dnsmasq_log.exists(), "no DHCP server ran on the machine running toolkit");
    assert!(service_gone(), "the boot host's service stopped with the run");
    let status = toolkit(dir.path(), &lab, &["status", "baremetal.yaml", "-i", "inventory.yaml"]);
    let shown = text(&status);
    assert!(shown.contains("Bare metal: 1 of 2 nodes installed and reachable."), "{shown}");
    assert!(shown.contains("vm02         failed since"), "{shown}");

    // 3. The cable back, and the deploy killed (SIGKILL: no cleanup of its own) while
    // vm02 writes its image.
    let mended = vmlab(&["link", LAB, "vm02", "up"]);
    assert!(mended.status.success(), "{}", text(&mended));
    let log = dir.path().join("killed-deploy.log");
    let mut killed = toolkit_command(dir.path(), &lab, &["deploy", "baremetal.yaml", "-i", "inventory.yaml", "--yes"])
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(dir.path().join("killed-deploy.err")).expect("log"))
        .spawn()
        .expect("toolkit starts");
    let started = Instant::now();
    loop {
        if last_seen_installing(dir.path(), "vm02").is_some_and(|seen| seen.starts_with("writing the image")) {
            break;
        }
        if let Some(status) = killed.try_wait().expect("polls") {
            panic!("the deploy ended ({status}) before vm02 wrote its image: {:?}", std::fs::read_to_string(&log));
        }
        assert!(started.elapsed().as_secs() < 400, "vm02 never started writing its image");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    killed.kill().expect("kills");
    let _ = killed.wait();
    eprintln!("MEASURE deploy killed {:.0} s after its start, vm02 writing its image", started.elapsed().as_secs_f64());
    // Its connection gone, the service on the boot host stops: no DHCP left answering.
    assert!(service_gone(), "the boot host's service outlived the killed deploy");

    // The rerun finds vm02 half installed, installs it anew, then configures both.
    let started = Instant::now();
    let second = toolkit(dir.path(), &lab, &["deploy", "baremetal.yaml", "-i", "inventory.yaml", "--yes"]);
    let said = text(&second);
    eprintln!(
        "MEASURE second deploy (vm02 installed, both configured): {:.0} s\n{said}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(second.status.code(), Some(0), "{said}");
    assert!(said.contains("vm01: installed already (SSH answers with its pinned key)"), "{said}");
    assert!(
        said.contains("vm02: an earlier run stopped while installing it (last seen: writing the image at"),
        "{said}"
    );
    assert!(said.contains("vm02: installed on /dev/vda"), "{said}");
    assert!(!said.contains("image: copied "), "the boot host kept the files: {said}");

    // Slurm runs across the two installed machines.
    srun_on_both(dir.path(), &lab);

    // 4. vm02 again, from its BMC's virtual CD this time, served from the machine
    // running toolkit: no DHCP server runs.
    std::fs::write(
        dir.path().join("inventory.yaml"),
        local_service.replace("provisioning:\n", "provisioning:\n  boot: virtual-media\n"),
    )
    .expect("writes");
    // As deploy will: the plan names it reinstalled (Terraform's `-replace`).
    let plan = toolkit(dir.path(), &lab, &["plan", "baremetal.yaml", "-i", "inventory.yaml", "--reinstall", "vm02"]);
    let said = text(&plan);
    assert_eq!(plan.status.code(), Some(2), "{said}");
    assert!(said.contains("-/+ os debian bookworm on vm02  (reinstall: --reinstall"), "{said}");
    let dnsmasq_log = local_dnsmasq_log;
    let started = Instant::now();
    let from_cd = toolkit(
        dir.path(),
        &lab,
        &["deploy", "baremetal.yaml", "-i", "inventory.yaml", "--yes", "--reinstall", "vm02"],
    );
    let said = text(&from_cd);
    eprintln!("MEASURE vm02 reinstalled from virtual media: {:.0} s\n{said}", started.elapsed().as_secs_f64());
    assert_eq!(from_cd.status.code(), Some(0), "{said}");
    assert!(said.contains("vm02: powered on from its virtual CD"), "{said}");
    assert!(said.contains("vm02: boot ISO fetched by its BMC at"), "{said}");
    assert!(said.contains("vm02: installed on /dev/vda"), "{said}");
    assert!(!dnsmasq_log.exists(), "no DHCP server ran");
    srun_on_both(dir.path(), &lab);

    // 5. Nothing left to do: a further deploy installs nothing, and the plan is empty.
    let third = toolkit(dir.path(), &lab, &["deploy", "baremetal.yaml", "-i", "inventory.yaml", "--yes"]);
    let said = text(&third);
    assert_eq!(third.status.code(), Some(0), "{said}");
    assert!(!said.contains("installed on"), "{said}");
    let plan = toolkit(dir.path(), &lab, &["plan", "baremetal.yaml", "-i", "inventory.yaml"]);
    assert_eq!(plan.status.code(), Some(0), "{}", text(&plan));
}
