//! The lab's base image: Debian 12 from debootstrap plus the packages of
//! `lab/packages.txt`, prepared by `lab/prepare.sh`, imported with `docker import` —
//! no registry, nothing pulled.
//!
//! Stage: IO. Input: a [`Recipe`]. Output: the local image `toolkit-lab:<hash>`, where
//! the hash (12 hex of SHA-256) covers everything that goes into it, so a present tag
//! means nothing is left to do and a changed recipe gets a new tag. The root file
//! system is built in the cache directory under a lock, so two builds never collide.

use std::fs::{self, File, TryLockError};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use sha2::{Digest as _, Sha256};

use super::{Docker, DockerError, LabError};

/// The package list, compiled in so the binary carries its recipe.
pub const PACKAGES: &str = include_str!("../../lab/packages.txt");

/// The script run in the new root before import, compiled in likewise.
pub const PREPARE: &str = include_str!("../../lab/prepare.sh");

/// Image repository name; the tag is the recipe hash.
pub const REPOSITORY: &str = "toolkit-lab";

/// `docker import --change` instructions: what runs when a container starts.
pub const CHANGES: &[&str] = &["CMD [\"/sbin/init\"]", "ENV container=docker"];

/// Everything that decides the image's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipe {
    /// Debian suite.
    pub suite: String,
    /// Debian mirror.
    pub mirror: String,
    /// Packages beyond debootstrap's `minbase`.
    pub packages: Vec<String>,
    /// Shell script run in the root before import.
    pub prepare: String,
}

impl Recipe {
    /// Bookworm with the compiled-in packages and script; the mirror is
    /// `http://deb.debian.org/debian` unless `TOOLKIT_LAB_MIRROR` names another.
    #[must_use]
    pub fn standard() -> Self {
        Self {
            suite: "bookworm".to_owned(),
            mirror: std::env::var("TOOLKIT_LAB_MIRROR")
                .ok()
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "http://deb.debian.org/debian".to_owned()),
            packages: parse_packages(PACKAGES),
            prepare: PREPARE.to_owned(),
        }
    }

    /// First 12 hex digits of SHA-256 over suite, mirror, packages, script and import changes.
    #[must_use]
    pub fn hash(&self) -> String {
        let mut hasher = Sha256::new();
        // Length-prefixed fields: no two recipes hash the same text.
        let mut field = |text: &str| {
            hasher.update((text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
        };
        field("toolkit-lab recipe v1");
        field(&self.suite);
        field(&self.mirror);
        field(&self.packages.len().to_string());
        for package in &self.packages {
            field(package);
        }
        field(&self.prepare);
        for change in CHANGES {
            field(change);
        }
        hex::encode(hasher.finalize())[..12].to_owned()
    }

    /// `toolkit-lab:<hash>`.
    #[must_use]
    pub fn tag(&self) -> String {
        format!("{REPOSITORY}:{}", self.hash())
    }
}

/// Package names of a list: one per line, `#` starts a comment.
#[must_use]
pub fn parse_packages(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `$XDG_CACHE_HOME/toolkit/lab`, else `~/.cache/toolkit/lab`.
///
/// # Errors
/// [`LabError::Layout`] when neither variable is set.
pub fn cache_dir() -> Result<PathBuf, LabError> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|home| PathBuf::from(home).join(".cache")))
        .ok_or_else(|| LabError::Layout("neither XDG_CACHE_HOME nor HOME is set: no cache directory".to_owned()))?;
    Ok(base.join("toolkit").join("lab"))
}

/// Makes sure the image of `recipe` exists; builds it when it does not. Returns its tag.
///
/// # Errors
/// Missing debootstrap/chroot/tar, a failed step (with the log file to read), or Docker errors.
pub fn ensure(docker: &Docker, recipe: &Recipe, progress: &dyn Fn(&str)) -> Result<String, LabError> {
    let tag = recipe.tag();
    if docker.image_exists(&tag)? {
        return Ok(tag);
    }
    let cache = cache_dir()?;
    fs::create_dir_all(&cache).map_err(LabError::io(&cache))?;
    let lock_path = cache.join("build.lock");
    let lock = File::create(&lock_path).map_err(LabError::io(&lock_path))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            progress(&format!("lab image: waiting for another build to finish ({})", lock_path.display()));
            lock.lock().map_err(LabError::io(&lock_path))?;
        }
        Err(TryLockError::Error(error)) => return Err(LabError::io(&lock_path)(error)),
    }
    // The other build may have made it while we waited.
    if docker.image_exists(&tag)? {
        return Ok(tag);
    }
    let started = Instant::now();
    let hash = recipe.hash();
    let root = cache.join(format!("rootfs-{hash}"));
    let log_path = cache.join(format!("build-{hash}.log"));
    let mut log = File::create(&log_path).map_err(LabError::io(&log_path))?;
    progress(&format!(
        "lab image: building {tag} (debootstrap {} + {} packages from {}; log {})",
        recipe.suite,
        recipe.packages.len(),
        recipe.mirror,
        log_path.display()
    ));
    clear_root(&root)?;
    let result = build(docker, recipe, &tag, &root, &cache, &mut log, progress);
    // The image is the cache; the 900 MB tree is not worth keeping.
    let cleaned = fs::remove_dir_all(&root);
    result?;
    if let Err(error) = cleaned {
        progress(&format!("warning: cannot remove the build tree {}: {error}", root.display()));
    }
    let size = docker.output(&["image", "inspect", "--format", "{{.Size}}", &tag])?;
    let megabytes =
        size.trim().parse::<u64>().map_or_else(|_| size.clone(), |bytes| format!("{} MB", bytes / 1_000_000));
    progress(&format!("lab image: {tag} built in {:.0?}, {megabytes}", started.elapsed()));
    drop(lock);
    Ok(tag)
}

fn build(
    docker: &Docker,
    recipe: &Recipe,
    tag: &str,
    root: &Path,
    cache: &Path,
    log: &mut File,
    progress: &dyn Fn(&str),
) -> Result<(), LabError> {
    // Daemons must not start while packages install: on the build host they would be
    // the host's daemons. prepare.sh removes this again.
    let sbin = root.join("usr/sbin");
    fs::create_dir_all(&sbin).map_err(LabError::io(&sbin))?;
    let policy = sbin.join("policy-rc.d");
    fs::write(&policy, "#!/bin/sh\nexit 101\n").map_err(LabError::io(&policy))?;
    fs::set_permissions(&policy, fs::Permissions::from_mode(0o755)).map_err(LabError::io(&policy))?;

    let debs = cache.join("debs");
    fs::create_dir_all(&debs).map_err(LabError::io(&debs))?;
    let mut debootstrap = Command::new("debootstrap");
    debootstrap
        .arg("--variant=minbase")
        .arg(format!("--include={}", recipe.packages.join(",")))
        .arg(format!("--cache-dir={}", debs.display()))
        .arg(&recipe.suite)
        .arg(root)
        .arg(&recipe.mirror);
    run_logged(debootstrap, "debootstrap", "apt-get install debootstrap (and run as root)", log, &|line| {
        if let Some(stage) = debootstrap_stage(line) {
            progress(&format!("lab image: {stage}"));
        }
    })?;

    progress("lab image: preparing the root (daemons off, no host keys, no machine id, caches cleaned)");
    let script = root.join("tmp/toolkit-lab-prepare.sh");
    fs::write(&script, &recipe.prepare).map_err(LabError::io(&script))?;
    let mut chroot = Command::new("chroot");
    chroot.arg(root).args(["/bin/sh", "/tmp/toolkit-lab-prepare.sh"]);
    run_logged(chroot, "chroot", "it comes with coreutils", log, &|_| {})?;
    fs::remove_file(&script).map_err(LabError::io(&script))?;

    progress(&format!("lab image: importing into Docker as {tag}"));
    import(docker, root, tag, &recipe.hash())
}

/// `tar -C root -c . | docker import - tag`, with the two processes piped directly.
fn import(docker: &Docker, root: &Path, tag: &str, hash: &str) -> Result<(), LabError> {
    let mut tar = Command::new("tar")
        .arg("--numeric-owner")
        .arg("-C")
        .arg(root)
        .args(["-c", "."])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| tool_spawn_error("tar", "apt-get install tar", &source))?;
    let label = format!("LABEL {}={hash}", "toolkit.lab.recipe");
    let mut args: Vec<&str> = vec!["import"];
    for change in CHANGES.iter().copied().chain([label.as_str()]) {
        args.extend(["--change", change]);
    }
    args.extend(["-", tag]);
    let mut command = docker.command(&args);
    if let Some(stdout) = tar.stdout.take() {
        command.stdin(stdout);
    }
    let imported = command.output().map_err(|source| LabError::Docker(docker.spawn_error(source)))?;
    let tarred = tar.wait_with_output().map_err(|source| tool_spawn_error("tar", "", &source))?;
    if !tarred.status.success() {
        return Err(LabError::Tool { program: "tar".to_owned(), message: super::docker::last_words(&tarred) });
    }
    if !imported.status.success() {
        return Err(LabError::Docker(DockerError::Failed {
            command: format!("import - {tag}"),
            message: super::docker::last_words(&imported),
        }));
    }
    Ok(())
}

/// Runs `command` with stdout and stderr into `log`, passing each stdout line to `each`
/// (debootstrap reports on stdout, errors included).
fn run_logged(
    mut command: Command,
    program: &'static str,
    hint: &'static str,
    log: &mut File,
    each: &dyn Fn(&str),
) -> Result<(), LabError> {
    let stderr = log.try_clone().map_err(|source| tool_spawn_error(program, hint, &source))?;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|source| tool_spawn_error(program, hint, &source))?;
    let mut tail: Vec<String> = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The log is for reading after a failure; losing a line of it is not worth failing the build.
            let _ = writeln!(log, "{line}");
            each(&line);
            tail.push(line);
            if tail.len() > 3 {
                tail.remove(0);
            }
        }
    }
    let status = child.wait().map_err(|source| tool_spawn_error(program, hint, &source))?;
    if status.success() {
        Ok(())
    } else {
        Err(LabError::Tool { program: program.to_owned(), message: format!("{status}: {}", tail.join(" / ")) })
    }
}

fn tool_spawn_error(program: &'static str, hint: &'static str, source: &std::io::Error) -> LabError {
    if source.kind() == std::io::ErrorKind::NotFound {
        LabError::MissingTool { program, hint }
    } else {
        LabError::Tool { program: program.to_owned(), message: source.to_string() }
    }
}

/// The stage lines of debootstrap worth showing (not one per package), and every warning or error.
fn debootstrap_stage(line: &str) -> Option<&str> {
    const STAGES: &[&str] = &[
        "Retrieving InRelease",
        "Retrieving Release",
        "Resolving dependencies of base",
        "Found additional base dependencies",
        "Installing core packages",
        "Unpacking required packages",
        "Configuring required packages",
        "Unpacking the base system",
        "Configuring the base system",
        "Base system installed",
    ];
    if line.starts_with("W: ") || line.starts_with("E: ") {
        return Some(line);
    }
    let text = line.strip_prefix("I: ")?;
    STAGES.iter().any(|stage| text.starts_with(stage)).then_some(text)
}

/// Removes what an earlier, interrupted build left, refusing while anything is mounted
/// inside (debootstrap mounts /proc and /sys there; removing through them would be wrong).
fn clear_root(root: &Path) -> Result<(), LabError> {
    if !root.exists() {
        return Ok(());
    }
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = root.to_string_lossy();
    if let Some(mount) = mounts.lines().filter_map(|line| line.split(' ').nth(4)).find(|m| m.starts_with(&*prefix)) {
        return Err(LabError::Conflict(format!(
            "`{mount}` is still mounted from an interrupted build: run `umount -R {mount}`, then retry"
        )));
    }
    fs::remove_dir_all(root).map_err(LabError::io(root))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_skip_comments_and_blank_lines() {
        let packages = parse_packages("# heading\n\nsudo\nfrr  # routing\n  less\n");
        assert_eq!(packages, ["sudo", "frr", "less"]);
    }

    #[test]
    fn standard_recipe_lists_what_the_lab_needs() {
        let recipe = Recipe::standard();
        for needed in ["openssh-server", "systemd", "slurmd", "slurmctld", "slurmdbd", "frr", "munge", "netplan.io"] {
            assert!(recipe.packages.iter().any(|p| p == needed), "{needed} missing");
        }
        assert!(recipe.prepare.contains("rm -f /etc/ssh/ssh_host_*"), "host keys must not be baked in");
    }

    /// The lab's management network has no way out, so deploy can install nothing:
    /// every package the lab blueprint's resources name must be in the image.
    #[test]
    fn every_package_the_lab_blueprint_needs_is_in_the_image() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let blueprint = crate::blueprint::load(&root.join("blueprints/lab.yaml")).expect("loads");
        let inventory = crate::inventory::load(&root.join("inventories/lab.yaml")).expect("loads");
        let renderer = crate::render::Renderer::embedded().expect("templates");
        let compiled = crate::compile::compile(&blueprint, Some(&inventory), &renderer).expect("compiles");
        let recipe = Recipe::standard();
        let mut needed: Vec<&str> = compiled
            .graph
            .resources
            .iter()
            .filter_map(|resource| match &*resource.desired {
                crate::resource::Desired::Package { name } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        needed.sort_unstable();
        needed.dedup();
        assert!(needed.contains(&"frr-pythontools"), "{needed:?}");
        for package in needed {
            assert!(recipe.packages.iter().any(|p| p == package), "`{package}` is not in lab/packages.txt");
        }
    }

    #[test]
    fn hash_changes_with_every_input() {
        let base = Recipe {
            suite: "bookworm".into(),
            mirror: "http://m".into(),
            packages: vec!["a".into(), "b".into()],
            prepare: "true".into(),
        };
        let hash = base.hash();
        assert_eq!(hash.len(), 12);
        assert_eq!(hash, base.clone().hash(), "stable");
        let variants = [
            Recipe { suite: "trixie".into(), ..base.clone() },
            Recipe { mirror: "http://n".into(), ..base.clone() },
            Recipe { packages: vec!["a".into()], ..base.clone() },
            Recipe { packages: vec!["a\nb".into()], ..base.clone() },
            Recipe { prepare: "false".into(), ..base.clone() },
        ];
        for variant in variants {
            assert_ne!(variant.hash(), hash, "{variant:?}");
        }
    }

    #[test]
    fn only_stage_lines_of_debootstrap_are_shown() {
        assert_eq!(debootstrap_stage("I: Installing core packages..."), Some("Installing core packages..."));
        assert_eq!(debootstrap_stage("I: Retrieving libc6 2.36-9"), None);
        assert_eq!(debootstrap_stage("W: Failure trying to run: chroot"), Some("W: Failure trying to run: chroot"));
    }
}
