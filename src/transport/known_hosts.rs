//! OpenSSH `known_hosts` files: lookup of a presented host key, and appending a
//! newly accepted one.
//!
//! Stage: transport (connect). Input: a known_hosts file and the names a host is
//! known by. Output: [`HostKeyStatus`] — known, unknown, changed (with the recorded
//! keys) or revoked.
//!
//! Supported syntax, as in `sshd(8)` "SSH_KNOWN_HOSTS FILE FORMAT": comma-separated
//! patterns, `[host]:port` for non-22 ports, `*`/`?` wildcards, `!` negation,
//! hashed `|1|salt|hmac` names, `@revoked` keys; `@cert-authority` lines are skipped
//! (host certificates are not accepted), as are blank, comment and malformed lines.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hmac::{Hmac, KeyInit, Mac};
use russh::keys::{HashAlg, PublicKey};
use sha1::Sha1;

use super::{TransportError, random_suffix};

/// Serializes appends from concurrent connections of this process: each append is a
/// read-modify-rename of the whole file, and two at once would lose one key.
static APPEND_LOCK: Mutex<()> = Mutex::new(());

/// How a presented host key relates to a known_hosts file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyStatus {
    /// A recorded key for one of the names equals the presented key.
    Known,
    /// No key is recorded for any of the names.
    Unknown,
    /// Keys are recorded for the names, and none is the presented key.
    Changed {
        /// The recorded keys, with their 1-based line numbers.
        expected: Vec<(usize, PublicKey)>,
    },
    /// The presented key is marked `@revoked`.
    Revoked {
        /// 1-based line of the `@revoked` entry.
        line: usize,
    },
}

/// One usable line of a known_hosts file.
#[derive(Debug, Clone)]
struct Entry {
    line: usize,
    revoked: bool,
    patterns: String,
    key: PublicKey,
}

/// A parsed known_hosts file.
#[derive(Debug, Clone, Default)]
pub struct KnownHosts {
    entries: Vec<Entry>,
}

impl KnownHosts {
    /// Reads and parses `path`; a missing file is an empty set of keys.
    ///
    /// # Errors
    /// [`TransportError::KnownHosts`] when the file exists but cannot be read.
    pub fn load(path: &Path) -> Result<Self, TransportError> {
        match fs::read_to_string(path) {
            Ok(text) => Ok(Self::parse(&text)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(TransportError::KnownHosts { path: path.to_owned(), source }),
        }
    }

    /// Parses the text of a known_hosts file. Lines that are not host keys are
    /// skipped, as OpenSSH does.
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let mut entries = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let mut fields = line.split_ascii_whitespace().peekable();
            let mut revoked = false;
            match fields.peek() {
                None => continue,
                Some(first) if first.starts_with('#') => continue,
                Some(&"@revoked") => {
                    revoked = true;
                    fields.next();
                }
                Some(first) if first.starts_with('@') => continue,
                Some(_) => {}
            }
            let (Some(patterns), Some(algorithm), Some(base64)) = (fields.next(), fields.next(), fields.next()) else {
                continue;
            };
            let Ok(key) = PublicKey::from_openssh(&format!("{algorithm} {base64}")) else {
                continue;
            };
            entries.push(Entry { line: number + 1, revoked, patterns: patterns.to_owned(), key });
        }
        Self { entries }
    }

    /// The keys recorded (not revoked) for any of `names`, with their line numbers.
    #[must_use]
    pub fn keys_for(&self, names: &[String]) -> Vec<(usize, PublicKey)> {
        self.entries
            .iter()
            .filter(|entry| !entry.revoked && names.iter().any(|name| patterns_match(&entry.patterns, name)))
            .map(|entry| (entry.line, entry.key.clone()))
            .collect()
    }

    /// Checks `key` as presented by a host known as any of `names` (each already in
    /// the `host` or `[host]:port` form, see [`host_name`]).
    #[must_use]
    pub fn check(&self, names: &[String], key: &PublicKey) -> HostKeyStatus {
        // A revoked key is refused whatever name it is presented under.
        if let Some(entry) = self.entries.iter().find(|entry| entry.revoked && entry.key.key_data() == key.key_data()) {
            return HostKeyStatus::Revoked { line: entry.line };
        }
        let recorded = self.keys_for(names);
        if recorded.is_empty() {
            HostKeyStatus::Unknown
        } else if recorded.iter().any(|(_, known)| known.key_data() == key.key_data()) {
            HostKeyStatus::Known
        } else {
            HostKeyStatus::Changed { expected: recorded }
        }
    }
}

/// The name a host is recorded under: `host` on port 22, `[host]:port` otherwise.
#[must_use]
pub fn host_name(host: &str, port: u16) -> String {
    if port == 22 { host.to_owned() } else { format!("[{host}]:{port}") }
}

/// The `SHA256:…` fingerprint OpenSSH prints for a key.
#[must_use]
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// Appends `name key` to the file at `path`, atomically: the new content is written
/// to a temporary file beside it, flushed to disk and renamed over the old one, so a
/// crash never leaves a truncated known_hosts.
///
/// # Errors
/// [`TransportError::KnownHosts`] when the file cannot be read or replaced.
pub fn append(path: &Path, name: &str, key: &PublicKey) -> Result<(), TransportError> {
    let line = format!("{name} {}\n", openssh_key_text(key)?);
    rewrite(path, |mut content| {
        if content.last().is_some_and(|&last| last != b'\n') {
            content.push(b'\n');
        }
        content.extend_from_slice(line.as_bytes());
        content
    })
}

/// Makes `key` the only key recorded for `names` (toolkit generated it for a host it
/// installs, so whatever was recorded before belongs to an earlier OS): lines whose
/// patterns match one of the names are dropped, `names[0] key` is appended. Hashed
/// and `@revoked` lines stay. Atomic, as [`append`].
///
/// # Errors
/// [`TransportError::KnownHosts`] when the file cannot be read or replaced.
pub fn pin(path: &Path, names: &[String], key: &PublicKey) -> Result<(), TransportError> {
    let Some(first) = names.first() else { return Ok(()) };
    let line = format!("{first} {}\n", openssh_key_text(key)?);
    rewrite(path, |content| {
        let text = String::from_utf8_lossy(&content);
        let mut kept = String::with_capacity(text.len() + line.len());
        for existing in text.lines() {
            let patterns = existing.split_ascii_whitespace().next().unwrap_or("");
            let plain = !patterns.starts_with(['#', '@']) && !patterns.contains("|1|");
            if plain && names.iter().any(|name| patterns_match(patterns, name)) {
                continue;
            }
            kept.push_str(existing);
            kept.push('\n');
        }
        kept.push_str(&line);
        kept.into_bytes()
    })
}

/// Replaces the file at `path` with `change(old content)`: written to a temporary
/// file beside it, flushed and renamed, so a crash never leaves a truncated file.
fn rewrite(path: &Path, change: impl FnOnce(Vec<u8>) -> Vec<u8>) -> Result<(), TransportError> {
    let io_error = |source| TransportError::KnownHosts { path: path.to_owned(), source };
    let _guard = APPEND_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let content = match fs::read(path) {
        Ok(content) => content,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(io_error(error)),
    };
    let content = change(content);
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&directory).map_err(io_error)?;
    let file_name = path.file_name().map_or_else(|| "known_hosts".into(), |name| name.to_string_lossy().into_owned());
    let temporary = directory.join(format!(".{file_name}.toolkit-{}", random_suffix()));
    let result = (|| {
        let mut file = fs::OpenOptions::new().write(true).create_new(true).open(&temporary)?;
        if let Ok(metadata) = fs::metadata(path) {
            file.set_permissions(metadata.permissions())?;
        }
        file.write_all(&content)?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if result.is_err() {
        // The temporary file is ours; a failed cleanup only leaves a dot-file behind.
        let _ = fs::remove_file(&temporary);
    }
    result.map_err(io_error)
}

/// `algorithm base64` without the key's comment.
fn openssh_key_text(key: &PublicKey) -> Result<String, TransportError> {
    let bare = PublicKey::new(key.key_data().clone(), "");
    bare.to_openssh()
        .map(|text| text.trim().to_owned())
        .map_err(|error| TransportError::InvalidArgument { reason: format!("cannot encode host key: {error}") })
}

/// OpenSSH `match_hostname`: the name matches when a positive pattern matches and no
/// negated one does.
fn patterns_match(patterns: &str, name: &str) -> bool {
    let mut matched = false;
    for pattern in patterns.split(',') {
        if let Some(negated) = pattern.strip_prefix('!') {
            if glob_match(negated, name) {
                return false;
            }
        } else if let Some(hashed) = pattern.strip_prefix("|1|") {
            matched |= hashed_match(hashed, name);
        } else {
            matched |= glob_match(pattern, name);
        }
    }
    matched
}

/// `salt|hash`, both base64: the name matches when HMAC-SHA1(salt, name) = hash.
fn hashed_match(salt_and_hash: &str, name: &str) -> bool {
    let Some((salt, hash)) = salt_and_hash.split_once('|') else {
        return false;
    };
    let (Ok(salt), Ok(hash)) =
        (data_encoding::BASE64.decode(salt.as_bytes()), data_encoding::BASE64.decode(hash.as_bytes()))
    else {
        return false;
    };
    let Ok(mac) = Hmac::<Sha1>::new_from_slice(&salt) else {
        return false;
    };
    mac.chain_update(name.as_bytes()).verify_slice(&hash).is_ok()
}

/// Case-insensitive glob with `*` and `?`, as OpenSSH matches host patterns.
fn glob_match(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.to_lowercase().chars().collect();
    let name: Vec<char> = name.to_lowercase().chars().collect();
    let (mut p, mut n) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            backtrack = Some((p, n));
            p += 1;
        } else if let Some((star, consumed)) = backtrack {
            p = star + 1;
            n = consumed + 1;
            backtrack = Some((star, consumed + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&character| character == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real keys made with `ssh-keygen -t ed25519`.
    const KEY_A: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFCPMrI2SKj10fXyBpN5Ch72Abulny65LL/Gj2f3yQZt";
    const KEY_B: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEoWv07zeBB59aoVE5c/9XcjPlZLoQ2GCzqTpMB99CbS";

    fn key(text: &str) -> PublicKey {
        PublicKey::from_openssh(text).expect("test key")
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn plain_names_ports_and_lists() {
        let file = KnownHosts::parse(&format!(
            "# comment\n\nnode01,10.0.0.1 {KEY_A}\n[10.0.0.2]:2222 {KEY_B} a comment\n@cert-authority *.example {KEY_B}\n"
        ));
        assert_eq!(file.check(&names(&["10.0.0.1"]), &key(KEY_A)), HostKeyStatus::Known);
        assert_eq!(file.check(&names(&["node01"]), &key(KEY_A)), HostKeyStatus::Known);
        assert_eq!(file.check(&names(&[&host_name("10.0.0.2", 2222)]), &key(KEY_B)), HostKeyStatus::Known);
        // Port 22 and port 2222 are different hosts.
        assert_eq!(file.check(&names(&["10.0.0.2"]), &key(KEY_B)), HostKeyStatus::Unknown);
        // The @cert-authority line is not a host key.
        assert_eq!(file.check(&names(&["a.example"]), &key(KEY_B)), HostKeyStatus::Unknown);
    }

    #[test]
    fn a_different_key_is_changed_with_the_recorded_key_and_line() {
        let file = KnownHosts::parse(&format!("x {KEY_B}\nnode01 {KEY_A}\n"));
        let status = file.check(&names(&["node01"]), &key(KEY_B));
        let HostKeyStatus::Changed { expected } = status else { panic!("{status:?}") };
        assert_eq!(expected.len(), 1);
        assert_eq!(expected[0].0, 2);
        assert_eq!(fingerprint(&expected[0].1), fingerprint(&key(KEY_A)));
    }

    #[test]
    fn hashed_entries_match() {
        // Made with `ssh-keygen -H -f known_hosts` from a line for `node01`.
        let file =
            KnownHosts::parse(&format!("|1|LUwn3Krgdou2TMcA3qCyJyh+7bY=|Ljg/b9geWuFV+rl+N56n7R64lvI= {KEY_A}\n"));
        assert_eq!(file.check(&names(&["node01"]), &key(KEY_A)), HostKeyStatus::Known);
        assert_eq!(file.check(&names(&["node02"]), &key(KEY_A)), HostKeyStatus::Unknown);
    }

    #[test]
    fn wildcards_negation_and_revocation() {
        let file = KnownHosts::parse(&format!("node*,!node13 {KEY_A}\n@revoked * {KEY_B}\n"));
        assert_eq!(file.check(&names(&["NODE07"]), &key(KEY_A)), HostKeyStatus::Known);
        assert_eq!(file.check(&names(&["node13"]), &key(KEY_A)), HostKeyStatus::Unknown);
        assert_eq!(file.check(&names(&["node07"]), &key(KEY_B)), HostKeyStatus::Revoked { line: 2 });
        assert!(glob_match("n?de*", "node01"));
        assert!(!glob_match("n?de", "node01"));
        assert!(glob_match("*", ""));
    }

    #[test]
    fn append_adds_one_line_and_keeps_the_rest() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("known_hosts");
        fs::write(&path, format!("node01 {KEY_A}")).expect("write");
        append(&path, "[10.0.0.9]:2200", &key(KEY_B)).expect("append");
        let text = fs::read_to_string(&path).expect("read");
        assert_eq!(text, format!("node01 {KEY_A}\n[10.0.0.9]:2200 {KEY_B}\n"));
        let file = KnownHosts::load(&path).expect("load");
        assert_eq!(file.check(&names(&["[10.0.0.9]:2200"]), &key(KEY_B)), HostKeyStatus::Known);
        // No temporary file is left behind.
        assert_eq!(fs::read_dir(directory.path()).expect("list").count(), 1);
    }

    #[test]
    fn pin_replaces_the_keys_of_the_names_and_keeps_other_lines() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("known_hosts");
        let hashed = "|1|c2FsdHNhbHRzYWx0c2FsdA==|aGFzaGhhc2hoYXNoaGFzaGg=";
        fs::write(
            &path,
            format!("# keep\nnode01,10.0.0.1 {KEY_A}\nother {KEY_A}\n{hashed} {KEY_A}\n@revoked * {KEY_A}\n"),
        )
        .expect("write");
        pin(&path, &names(&["10.0.0.1", "node01"]), &key(KEY_B)).expect("pin");
        let text = fs::read_to_string(&path).expect("read");
        assert_eq!(text, format!("# keep\nother {KEY_A}\n{hashed} {KEY_A}\n@revoked * {KEY_A}\n10.0.0.1 {KEY_B}\n"));
        let file = KnownHosts::load(&path).expect("load");
        assert_eq!(file.check(&names(&["10.0.0.1"]), &key(KEY_B)), HostKeyStatus::Known);
        // Pinning again changes nothing.
        pin(&path, &names(&["10.0.0.1", "node01"]), &key(KEY_B)).expect("pin");
        assert_eq!(fs::read_to_string(&path).expect("read"), text);
    }

    #[test]
    fn a_missing_file_is_empty() {
        let file = KnownHosts::load(Path::new("/nonexistent/known_hosts")).expect("missing is fine");
        assert_eq!(file.check(&names(&["x"]), &key(KEY_A)), HostKeyStatus::Unknown);
    }
}
