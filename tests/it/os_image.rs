//! The OS image toolkit installs on bare metal, built for real from Debian's
//! packages and booted for real under QEMU (TCG: see ../shared/reference/baremetal.md),
//! from its own disk, under SeaBIOS and under OVMF (UEFI).
//!
//! The image is built once per test run into `.toolkit/os` (cached by its recipe
//! hash: a rerun takes it as it is).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use toolkit::deploy::provision::image::{self, BuiltImage, Distribution, ImageSpec};

/// The image of the bare-metal example (`blueprints/baremetal.yaml`'s packages).
pub(crate) fn spec() -> ImageSpec {
    ImageSpec {
        distribution: Distribution::Debian,
        suite: "bookworm".to_owned(),
        mirror: std::env::var("TOOLKIT_OS_MIRROR").unwrap_or_else(|_| "http://deb.debian.org/debian".to_owned()),
        kernel_package: "linux-image-amd64".to_owned(),
        packages: ["slurmctld", "slurmd", "slurm-client", "munge"].map(str::to_owned).to_vec(),
        locale: "C.UTF-8".to_owned(),
        timezone: "Etc/UTC".to_owned(),
        ssh_user: "root".to_owned(),
    }
}

pub(crate) fn cache() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".toolkit/os")
}

/// The built image, or `None` (after [`crate::support::cannot_run`]) without the tools.
pub(crate) fn built() -> Option<&'static BuiltImage> {
    static BUILT: OnceLock<Option<BuiltImage>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            for (program, package) in [
                ("debootstrap", "debootstrap"),
                ("mkfs.vfat", "dosfstools"),
                ("mcopy", "mtools"),
                ("syslinux", "syslinux"),
                ("grub-mkstandalone", "grub-efi-amd64-bin"),
                ("qemu-system-x86_64", "qemu-system-x86"),
            ] {
                if !crate::render_network::tool(program, package) {
                    return None;
                }
            }
            let started = Instant::now();
            let built = image::build(&spec(), &cache()).expect("the image builds");
            eprintln!("MEASURE image ready in {:.1} s ({} bytes)", started.elapsed().as_secs_f64(), built.size_bytes);
            Some(built)
        })
        .as_ref()
}

/// A QEMU guest on a copy-on-write layer over `disk`, killed on drop.
pub(crate) struct Guest {
    child: Child,
    pub serial: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Guest {
    /// Boots `disk` (through a qcow2 layer, so the image stays as built) with `extra` arguments.
    pub(crate) fn boot(disk: &Path, uefi: bool, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let layer = dir.path().join("disk.qcow2");
        let status = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
            .arg(disk)
            .arg(&layer)
            .status()
            .expect("qemu-img runs");
        assert!(status.success());
        let serial = dir.path().join("serial.log");
        let mut command = Command::new("qemu-system-x86_64");
        command
            .args(["-accel", "tcg", "-m", "768", "-smp", "1", "-display", "none", "-no-reboot"])
            .arg("-serial")
            .arg(format!("file:{}", serial.display()))
            .arg("-drive")
            .arg(format!("file={},if=virtio,format=qcow2", layer.display()))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if uefi {
            command.args(["-bios", "/usr/share/ovmf/OVMF.fd"]);
        }
        let child = command.spawn().expect("qemu starts");
        Self { child, serial, _dir: dir }
    }

    /// Waits until the serial console shows `text`; the console so far on timeout.
    pub(crate) fn wait_for(&self, text: &str, timeout: Duration) -> Result<Duration, String> {
        let started = Instant::now();
        loop {
            let console = std::fs::read_to_string(&self.serial).unwrap_or_default();
            if console.contains(text) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                let tail: Vec<&str> = console.lines().rev().take(30).collect();
                return Err(tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// Guests take both cores under TCG: one VM test, or lab test, at a time.
fn machine_to_itself() -> std::sync::MutexGuard<'static, ()> {
    crate::lab::ONE_LAB_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn the_image_boots_from_its_disk_under_bios_and_uefi() {
    let Some(built) = built() else { return };
    let _alone = machine_to_itself();
    assert_eq!(image::file_sha256(&built.disk).expect("reads"), built.sha256, "the recorded checksum is the disk's");
    for uefi in [false, true] {
        let guest = Guest::boot(&built.disk, uefi, &["-nic", "none"]);
        let firmware = if uefi { "OVMF" } else { "SeaBIOS" };
        match guest.wait_for("login:", Duration::from_mins(4)) {
            Ok(elapsed) => eprintln!("MEASURE {firmware}: disk to login prompt {:.1} s", elapsed.as_secs_f64()),
            Err(console) => panic!("{firmware}: no login prompt; console:\n{console}"),
        }
    }
}

/// Debian 13 (trixie, Slurm 24.11) built from the same recipe and booted from its
/// disk under both firmwares: the suite toolkit installs next.
#[test]
fn the_debian_13_image_boots_from_its_disk_under_bios_and_uefi() {
    if built().is_none() {
        return;
    }
    let trixie = ImageSpec { suite: "trixie".to_owned(), ..spec() };
    let started = Instant::now();
    let built = image::build(&trixie, &cache()).expect("the trixie image builds");
    eprintln!("MEASURE trixie image ready in {:.1} s ({} bytes)", started.elapsed().as_secs_f64(), built.size_bytes);
    let _alone = machine_to_itself();
    for uefi in [false, true] {
        let guest = Guest::boot(&built.disk, uefi, &["-nic", "none"]);
        let firmware = if uefi { "OVMF" } else { "SeaBIOS" };
        match guest.wait_for("login:", Duration::from_mins(4)) {
            Ok(elapsed) => eprintln!("MEASURE trixie, {firmware}: disk to login prompt {:.1} s", elapsed.as_secs_f64()),
            Err(console) => panic!("{firmware}: no login prompt; console:\n{console}"),
        }
        let console = std::fs::read_to_string(&guest.serial).unwrap_or_default();
        assert!(console.contains("Debian GNU/Linux 13"), "{firmware}: not Debian 13:\n{console}");
    }
}

/// The deploy agent, booted by QEMU straight from its kernel and initrd (user-mode
/// networking: the host is 10.0.2.2), against toolkit's provisioning server: it
/// reports the machine, writes the image to the disk the rule picks, checks it,
/// lays the node's files over it and powers off; the disk then boots by itself and
/// answers SSH with the host key toolkit generated, for the key toolkit installed.
#[test]
fn the_agent_installs_a_blank_disk_that_then_boots_and_answers_ssh_with_its_pinned_key() {
    use toolkit::deploy::provision::agent;
    use toolkit::deploy::provision::disk::DiskRule;
    use toolkit::deploy::provision::host_keys;
    use toolkit::deploy::provision::overlay::NodeOverlay;
    use toolkit::deploy::provision::server::{EventKind, Files, NodeBoot, Server};

    let Some(built) = built() else { return };
    let _alone = machine_to_itself();
    let agent = agent::build(built, &cache()).expect("agent");
    let dir = tempfile::tempdir().expect("tempdir");
    let client_key = dir.path().join("id_ed25519");
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&client_key)
        .status()
        .expect("ssh-keygen");
    assert!(status.success());
    let public = std::fs::read_to_string(dir.path().join("id_ed25519.pub")).expect("public key");
    let host_key = host_keys::ensure(&dir.path().join("host-keys"), "vm01").expect("host key");
    let mac = "52:54:00:77:00:11";
    let overlay = NodeOverlay {
        hostname: "vm01".to_owned(),
        boot_macs: vec![mac.to_owned()],
        address: Some("10.0.2.15/24".parse().expect("net")),
        gateway: Some("10.0.2.2".parse().expect("ip")),
        dns: Vec::new(),
        ssh_user: "root".to_owned(),
        authorized_keys: vec![public],
        host_key: host_key.clone(),
    };
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let files = Files::of(built, &agent);
    let node = |rule: DiskRule| NodeBoot {
        name: "vm01".to_owned(),
        macs: vec![mac.to_owned()],
        disk: rule,
        overlay: overlay.tar(),
        expected: None,
        address: None,
        iso: None,
    };

    // A rule no disk meets: refused, nothing written.
    let refused_disk = dir.path().join("refused.raw");
    std::fs::File::create(&refused_disk).expect("disk").set_len(8 << 30).expect("size");
    let (server, mut events) = runtime
        .block_on(Server::start(
            "127.0.0.1:0".parse().expect("addr"),
            "10.0.2.2:0",
            files.clone(),
            vec![node(DiskRule { min_gib: Some(100), ..DiskRule::default() })],
        ))
        .expect("server");
    let port = server.address().port();
    let agent_boot = |disk: &Path, port: u16| {
        let mut command = Command::new("qemu-system-x86_64");
        command
            .args(["-accel", "tcg", "-m", "768", "-smp", "1", "-display", "none", "-no-reboot"])
            .arg("-kernel")
            .arg(&agent.kernel)
            .arg("-initrd")
            .arg(&agent.initrd)
            .arg("-append")
            .arg(format!("toolkit.server=http://10.0.2.2:{port} toolkit.mac={mac} console=ttyS0,115200 quiet"))
            .arg("-drive")
            .arg(format!("file={},if=none,id=disk1,format=raw", disk.display()))
            .args(["-device", "virtio-blk-pci,drive=disk1,serial=disk-1"])
            .args(["-nic", &format!("user,model=virtio-net-pci,mac={mac}")])
            .arg("-serial")
            .arg(format!("file:{}", dir.path().join("agent-serial.log").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    };
    let started = Instant::now();
    let status = agent_boot(&refused_disk, port).status().expect("qemu");
    assert!(status.success(), "{}", std::fs::read_to_string(dir.path().join("agent-serial.log")).unwrap_or_default());
    let mut refusal = None;
    while let Ok(event) = events.try_recv() {
        if let EventKind::Refused(reason) = event.kind {
            refusal = Some(reason);
        }
    }
    let reason = refusal.unwrap_or_else(|| {
        panic!("not refused:\n{}", std::fs::read_to_string(dir.path().join("agent-serial.log")).unwrap_or_default())
    });
    assert!(reason.contains("no disk matches the rule at least 100 GiB; the node has: vda (8 GiB"), "{reason}");
    // A sparse file never written to has no block allocated.
    let blocks = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&refused_disk).expect("meta"));
    assert_eq!(blocks, 0, "nothing is written to a refused node");
    eprintln!("MEASURE refusal: agent boot to power-off {:.1} s", started.elapsed().as_secs_f64());
    runtime.block_on(server.stop());

    // The real install.
    let disk = dir.path().join("disk.raw");
    std::fs::File::create(&disk).expect("disk").set_len(8 << 30).expect("size");
    let (server, mut events) = runtime
        .block_on(Server::start(
            "127.0.0.1:0".parse().expect("addr"),
            "10.0.2.2:0",
            files,
            vec![node(DiskRule { min_gib: Some(4), max_gib: Some(16), ..DiskRule::default() })],
        ))
        .expect("server");
    let port = server.address().port();
    let started = Instant::now();
    let status = agent_boot(&disk, port).status().expect("qemu");
    let install = started.elapsed();
    let console = std::fs::read_to_string(dir.path().join("agent-serial.log")).unwrap_or_default();
    assert!(status.success(), "{console}");
    let mut steps = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event.kind {
            EventKind::Progress { step, detail } => steps.push(format!("{step} {}", detail.unwrap_or_default())),
            EventKind::Inventory { disk, .. } => steps.push(format!("inventory {}", disk.unwrap_or_default())),
            EventKind::ImageServed { bytes } => assert_eq!(bytes, built.size_bytes),
            _ => {}
        }
    }
    runtime.block_on(server.stop());
    let names: Vec<&str> = steps.iter().map(|step| step.split(' ').next().unwrap_or_default()).collect();
    assert_eq!(names, ["inventory", "writing", "written", "verified", "overlay", "done"], "{steps:?}\n{console}");
    assert_eq!(steps[0], "inventory /dev/vda");
    eprintln!(
        "MEASURE install: agent boot to power-off {:.1} s ({} MB image)",
        install.as_secs_f64(),
        built.size_bytes >> 20
    );

    // Booted from its disk: SSH with the pinned key only.
    let ssh_port = 20_000 + (std::process::id() % 20_000) as u16;
    let guest = Guest::boot(
        &disk,
        false,
        &["-nic", &format!("user,model=virtio-net-pci,mac={mac},hostfwd=tcp:127.0.0.1:{ssh_port}-:22")],
    );
    let known_hosts = dir.path().join("known_hosts");
    std::fs::write(&known_hosts, format!("[127.0.0.1]:{ssh_port} {}\n", host_key.public_line)).expect("known_hosts");
    let started = Instant::now();
    let output = loop {
        let output = Command::new("ssh")
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5", "-i"])
            .arg(&client_key)
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-p", &ssh_port.to_string(), "root@127.0.0.1", "hostname; findmnt -no SIZE /"])
            .output()
            .expect("ssh runs");
        if output.status.success() || started.elapsed() > Duration::from_mins(4) {
            break output;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    let console = std::fs::read_to_string(&guest.serial).unwrap_or_default();
    assert!(output.status.success(), "{}\n{console}", String::from_utf8_lossy(&output.stderr));
    let said = String::from_utf8_lossy(&output.stdout);
    eprintln!("MEASURE disk boot to SSH {:.1} s; {said}", started.elapsed().as_secs_f64());
    assert!(said.starts_with("vm01\n"), "{said}");
    // The root grew to the 8 GiB disk from the image's small partition.
    let size = said.lines().nth(1).unwrap_or_default().trim().to_owned();
    assert!(size.ends_with('G') && size.trim_end_matches('G').parse::<f64>().unwrap_or(0.0) > 6.0, "root size {size}");
}

/// The boot ISO a BMC inserts as virtual media, booted as a CD under SeaBIOS
/// (isolinux) and OVMF (GRUB in the El Torito EFI image): the agent comes up, takes
/// the static address on its command line (no DHCP is asked for), reaches toolkit's
/// server and reports the machine; the disk rule refuses it, so nothing is written.
#[test]
fn the_boot_iso_brings_the_agent_up_under_bios_and_uefi_with_its_given_address() {
    use toolkit::deploy::provision::disk::DiskRule;
    use toolkit::deploy::provision::server::{EventKind, Files, NodeBoot, Server};
    use toolkit::deploy::provision::{agent, iso};

    let Some(built) = built() else { return };
    for (program, package) in [("xorriso", "xorriso"), ("grub-mkstandalone", "grub-efi-amd64-bin")] {
        if !crate::render_network::tool(program, package) {
            return;
        }
    }
    let _alone = machine_to_itself();
    let agent = agent::build(built, &cache()).expect("agent");
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mac = "52:54:00:77:00:21";
    let files = Files::of(built, &agent);
    for uefi in [false, true] {
        let firmware = if uefi { "OVMF" } else { "SeaBIOS" };
        let (server, mut events) = runtime
            .block_on(Server::start(
                "127.0.0.1:0".parse().expect("addr"),
                "10.0.2.2:0",
                files.clone(),
                vec![NodeBoot {
                    name: "vm01".to_owned(),
                    macs: vec![mac.to_owned()],
                    disk: DiskRule { min_gib: Some(100), ..DiskRule::default() },
                    overlay: Vec::new(),
                    expected: None,
                    address: Some("10.0.2.15".parse().expect("ip")),
                    iso: None,
                }],
            ))
            .expect("server");
        let base = format!("http://10.0.2.2:{}", server.address().port());
        let address = Some(("10.0.2.15/24".parse().expect("net"), Some("10.0.2.2".parse().expect("ip"))));
        let image = iso::build(&agent, &agent::cmdline(&base, mac, address), &cache()).expect("the ISO");
        let blank = dir.path().join(format!("blank-{firmware}.raw"));
        std::fs::File::create(&blank).expect("disk").set_len(8 << 30).expect("size");
        let started = Instant::now();
        let cd = format!("file={},if=none,id=cd0,media=cdrom,readonly=on", image.display());
        // The guest's DHCP server (QEMU's) is left out: the address must come from the ISO.
        let nic = format!("user,model=virtio-net-pci,mac={mac},restrict=off,dhcpstart=10.0.2.200");
        let guest =
            Guest::boot(&blank, uefi, &["-drive", &cd, "-device", "ide-cd,drive=cd0,bootindex=0", "-nic", &nic]);
        let mut refusal = None;
        while refusal.is_none() && started.elapsed() < Duration::from_mins(5) {
            match runtime.block_on(async { tokio::time::timeout(Duration::from_secs(2), events.recv()).await }) {
                Ok(Some(event)) => {
                    if let EventKind::Refused(reason) = event.kind {
                        refusal = Some(reason);
                    }
                }
                Ok(None) => break,
                Err(_) => {}
            }
        }
        let console = std::fs::read_to_string(&guest.serial).unwrap_or_default();
        let reason = refusal.unwrap_or_else(|| panic!("{firmware}: the agent never reported:\n{console}"));
        assert!(reason.contains("no disk matches the rule at least 100 GiB"), "{firmware}: {reason}");
        assert!(console.contains("10.0.2.15/24 (given on the command line)"), "{firmware}:\n{console}");
        eprintln!(
            "MEASURE boot ISO under {firmware}: power-on to the agent's report {:.1} s",
            started.elapsed().as_secs_f64()
        );
        drop(guest);
        runtime.block_on(server.stop());
    }
}
