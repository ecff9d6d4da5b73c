//! Atomic file writes on a remote host, as one POSIX `sh` script.
//!
//! Stage: apply. Input: a [`WriteRequest`] (path, bytes, mode, owner, group, check).
//! Output: the argv of a script that reads the bytes on stdin, and the
//! interpretation of its output as a [`WriteOutcome`].
//!
//! The script writes `<dir>/.<name>.toolkit-<random>` (created exclusively, umask
//! 077 so a secret is never readable by others on the way), fsyncs it, sets mode
//! and owner, runs the check command on it, and only then renames it over the
//! target, so the target is always either the old or the new complete file. When
//! the target already has the same bytes, mode and owner, nothing is replaced.

use sha2::{Digest, Sha256};

use super::{Output, TransportError, summarize};

/// One file to write.
#[derive(Debug, Clone, Copy)]
pub struct WriteRequest<'a> {
    /// Absolute path on the target.
    pub path: &'a str,
    /// The bytes.
    pub contents: &'a [u8],
    /// Permission bits (`0o644`).
    pub mode: u32,
    /// Owner user; `None` leaves it as the writing user.
    pub owner: Option<&'a str>,
    /// Owner group; `None` leaves it as the writing user's.
    pub group: Option<&'a str>,
    /// Command that must accept the temp file before it replaces the target; every
    /// `{}` in its words is replaced by the temp file's path.
    pub check: Option<&'a [String]>,
    /// The contents are secret: the check command's output is withheld from errors.
    pub secret: bool,
    /// Keep the replaced file as `<path>.<UTC time>.toolkit-backup`.
    pub backup: bool,
}

/// What a write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The file was replaced (or created).
    Written,
    /// The file already had these bytes, mode and owner; nothing was touched.
    Unchanged,
}

/// Exit status the script uses for "the check command refused the file".
const CHECK_FAILED: u32 = 97;

/// Positional parameters: path, temp, mode, owner, group, chown spec, sha256,
/// backup (`1` or empty), then the check argv.
const SCRIPT: &str = r#"set -eu
path=$1 tmp=$2 mode=$3 owner=$4 group=$5 chown_spec=$6 sha=$7 backup=$8
shift 8
if [ -d "$path" ] && [ ! -L "$path" ]; then
  echo "$path is a directory" >&2
  exit 1
fi
umask 077
trap 'rm -f -- "$tmp"' EXIT
(set -C; cat > "$tmp")
if [ -f "$path" ] && [ ! -L "$path" ]; then
  current=$(sha256sum < "$path")
  meta=$(stat -c '%a %U %G' -- "$path")
  cur_mode=${meta%% *} rest=${meta#* }
  cur_owner=${rest%% *} cur_group=${rest#* }
  if [ "${current%% *}" = "$sha" ] && [ "$cur_mode" = "$mode" ] \
    && { [ -z "$owner" ] || [ "$cur_owner" = "$owner" ]; } \
    && { [ -z "$group" ] || [ "$cur_group" = "$group" ]; }; then
    echo unchanged
    exit 0
  fi
fi
chmod -- "$mode" "$tmp"
if [ -n "$chown_spec" ]; then chown -- "$chown_spec" "$tmp"; fi
sync -- "$tmp"
if [ "$#" -gt 0 ]; then
  if ! out=$("$@" 2>&1 </dev/null); then
    printf '%s\n' "$out"
    exit 97
  fi
fi
if [ -n "$backup" ] && [ -f "$path" ]; then
  cp -p -- "$path" "$path.$(date -u +%Y%m%dT%H%M%SZ).toolkit-backup"
fi
mv -f -- "$tmp" "$path"
trap - EXIT
sync -- "${path%/*}/." 2>/dev/null || true
echo written
"#;

/// The temp file beside `path`: `<dir>/.<name>.toolkit-<random>`.
///
/// # Errors
/// When `path` is not absolute or names a directory (`/`, trailing slash).
pub fn temp_path(path: &str, suffix: &str) -> Result<String, TransportError> {
    let invalid = |reason: &str| TransportError::InvalidArgument { reason: format!("file path `{path}` {reason}") };
    if !path.starts_with('/') {
        return Err(invalid("is not absolute"));
    }
    let (directory, name) = path.rsplit_once('/').ok_or_else(|| invalid("has no file name"))?;
    if name.is_empty() || name == "." || name == ".." {
        return Err(invalid("has no file name"));
    }
    Ok(format!("{directory}/.{name}.toolkit-{suffix}"))
}

/// The `sh -c` argv that performs `request`, its bytes going on stdin.
///
/// # Errors
/// When the path is not absolute.
pub fn script_argv(request: &WriteRequest<'_>) -> Result<Vec<String>, TransportError> {
    script_argv_with_suffix(request, &super::random_suffix())
}

fn script_argv_with_suffix(request: &WriteRequest<'_>, suffix: &str) -> Result<Vec<String>, TransportError> {
    let temporary = temp_path(request.path, suffix)?;
    let chown_spec = match (request.owner, request.group) {
        (Some(owner), Some(group)) => format!("{owner}:{group}"),
        (Some(owner), None) => owner.to_owned(),
        (None, Some(group)) => format!(":{group}"),
        (None, None) => String::new(),
    };
    let mut argv = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        SCRIPT.to_owned(),
        "toolkit-write".to_owned(),
        request.path.to_owned(),
        temporary.clone(),
        format!("{:o}", request.mode),
        request.owner.unwrap_or_default().to_owned(),
        request.group.unwrap_or_default().to_owned(),
        chown_spec,
        hex::encode(Sha256::digest(request.contents)),
        if request.backup { "1".to_owned() } else { String::new() },
    ];
    if let Some(check) = request.check {
        argv.extend(check.iter().map(|word| word.replace("{}", &temporary)));
    }
    Ok(argv)
}

/// Reads the script's result.
///
/// # Errors
/// [`TransportError::CheckFailed`] when the check command refused the file (its
/// output withheld for secrets), [`TransportError::CommandFailed`] for any other
/// failure.
pub fn interpret(host: &str, request: &WriteRequest<'_>, output: &Output) -> Result<WriteOutcome, TransportError> {
    let check_command = || request.check.map(summarize).unwrap_or_default();
    if output.status == super::ExitStatus::Code(CHECK_FAILED) && request.check.is_some() {
        let output = if request.secret {
            "(output withheld: the file is secret)".to_owned()
        } else {
            super::tail(&output.stdout_text())
        };
        return Err(TransportError::CheckFailed {
            host: host.to_owned(),
            path: request.path.to_owned(),
            command: check_command(),
            output,
        });
    }
    if !output.success() {
        return Err(TransportError::CommandFailed {
            host: host.to_owned(),
            command: format!("write `{}`", request.path),
            status: output.status.clone(),
            stderr: output.stderr_tail(),
        });
    }
    match output.stdout_text().lines().last() {
        Some("written") => Ok(WriteOutcome::Written),
        Some("unchanged") => Ok(WriteOutcome::Unchanged),
        _ => Err(TransportError::CommandFailed {
            host: host.to_owned(),
            command: format!("write `{}`", request.path),
            status: output.status.clone(),
            stderr: format!("unexpected output: {}", super::tail(&output.stdout_text())),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::transport::ExitStatus;

    /// Runs the script locally with `sh`, as sshd would remotely.
    fn run_locally(request: &WriteRequest<'_>) -> Output {
        use std::io::Write;
        let argv = script_argv(request).expect("argv");
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        // The script may exit before reading (a refused path): a broken pipe is fine.
        let _ = child.stdin.take().expect("stdin").write_all(request.contents);
        let output = child.wait_with_output().expect("wait");
        Output {
            status: output.status.code().map_or(ExitStatus::Unknown, |code| ExitStatus::Code(code as u32)),
            stdout: output.stdout,
            stderr: output.stderr,
        }
    }

    fn request<'a>(path: &'a str, contents: &'a [u8], check: Option<&'a [String]>) -> WriteRequest<'a> {
        WriteRequest { path, contents, mode: 0o640, owner: None, group: None, check, secret: false, backup: false }
    }

    #[test]
    fn temp_path_sits_beside_the_target() {
        assert_eq!(temp_path("/etc/a b.conf", "x1").expect("ok"), "/etc/.a b.conf.toolkit-x1");
        assert!(temp_path("relative", "x").is_err());
        assert!(temp_path("/etc/", "x").is_err());
    }

    #[test]
    fn check_words_get_the_temp_path() {
        let check = vec!["sshd".to_owned(), "-t".to_owned(), "-f".to_owned(), "{}".to_owned(), "--x={}".to_owned()];
        let request = request("/etc/ssh/sshd_config", b"", Some(&check));
        let argv = script_argv_with_suffix(&request, "abc").expect("argv");
        let temporary = "/etc/ssh/.sshd_config.toolkit-abc";
        assert_eq!(&argv[argv.len() - 5..], ["sshd", "-t", "-f", temporary, &format!("--x={temporary}")]);
        assert_eq!(argv[6], "640");
    }

    #[test]
    fn writes_then_finds_it_unchanged_locally() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("hostile 'name' $(x)");
        let path = path.to_str().expect("utf-8");
        let contents = b"line one\n$(not expanded)\n";
        let first = run_locally(&request(path, contents, None));
        assert_eq!(interpret("local", &request(path, contents, None), &first).expect("ok"), WriteOutcome::Written);
        assert_eq!(std::fs::read(path).expect("read"), contents);
        let mode = std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        let second = run_locally(&request(path, contents, None));
        assert_eq!(interpret("local", &request(path, contents, None), &second).expect("ok"), WriteOutcome::Unchanged);
        // Only the target is left: no temporary files.
        assert_eq!(std::fs::read_dir(directory.path()).expect("list").count(), 1);
    }

    #[test]
    fn a_failing_check_keeps_the_old_file_and_reports_its_output() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().join("app.conf");
        let path = path.to_str().expect("utf-8");
        std::fs::write(path, "old\n").expect("seed");
        let check: Vec<String> =
            ["sh", "-c", "grep -q good \"$1\" || { echo bad config:; cat \"$1\"; exit 1; }", "check", "{}"]
                .iter()
                .map(|word| (*word).to_owned())
                .collect();
        let bad = request(path, b"broken\n", Some(&check));
        let error = interpret("local", &bad, &run_locally(&bad)).expect_err("check fails");
        let message = error.to_string();
        assert!(message.contains("bad config:\nbroken") && message.contains("old file is untouched"), "{message}");
        assert_eq!(std::fs::read_to_string(path).expect("read"), "old\n");
        assert_eq!(std::fs::read_dir(directory.path()).expect("list").count(), 1);

        let secret = WriteRequest { secret: true, ..bad };
        let message = interpret("local", &secret, &run_locally(&secret)).expect_err("fails").to_string();
        // The checker echoes the content: a secret's checker output never reaches the error.
        assert!(message.contains("withheld") && !message.contains("broken"), "{message}");

        let good = request(path, b"good\n", Some(&check));
        assert_eq!(interpret("local", &good, &run_locally(&good)).expect("ok"), WriteOutcome::Written);
        assert_eq!(std::fs::read_to_string(path).expect("read"), "good\n");
    }

    #[test]
    fn refuses_to_replace_a_directory() {
        let directory = tempfile::tempdir().expect("tempdir");
        let path = directory.path().to_str().expect("utf-8");
        let target = request(path, b"x", None);
        let error = interpret("local", &target, &run_locally(&target)).expect_err("directory");
        assert!(error.to_string().contains("is a directory"), "{error}");
    }
}
