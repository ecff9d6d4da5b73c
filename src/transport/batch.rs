//! Several directories and files written on one host in one round trip.
//!
//! Stage: apply. Input: [`BatchItem`]s in dependency order. Output: the argv of one
//! POSIX `sh` script plus its standard input (the files' bytes, back to back), and
//! the interpretation of its output as one result per item. Each file gets the same
//! treatment as a single [`write`](super::write): a temp file created exclusively
//! with umask 077, fsynced, mode and owner set, renamed over the target; a target
//! that already has the bytes, mode and owner is not touched. Exactly `size` bytes
//! are read per file (`dd iflag=fullblock`), so one stream carries them all. The
//! script stops at the first failure; later items are reported as not attempted.

use sha2::{Digest, Sha256};

use super::write::temp_path;
use super::{Output, TransportError};

/// One thing to make true.
#[derive(Debug, Clone, Copy)]
pub enum BatchItem<'a> {
    /// A directory with mode and owner.
    Directory {
        /// Absolute path.
        path: &'a str,
        /// Permission bits.
        mode: u32,
        /// Owner user.
        owner: &'a str,
    },
    /// A regular file.
    File {
        /// Absolute path.
        path: &'a str,
        /// The bytes.
        contents: &'a [u8],
        /// Permission bits.
        mode: u32,
        /// Owner user.
        owner: &'a str,
        /// Owner group.
        group: &'a str,
    },
}

/// What one item did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Created or replaced.
    Changed,
    /// Already as desired.
    Unchanged,
}

const SCRIPT: &str = r#"set -eu
backup=$1
shift
tmp=
trap '[ -z "$tmp" ] || rm -f -- "$tmp"' EXIT
while [ "$#" -gt 0 ]; do
  kind=$1
  if [ "$kind" = d ]; then
    p=$2 mode=$3 owner=$4
    shift 4
    if [ -d "$p" ] && [ ! -L "$p" ] && [ "$(stat -c '%a %U' -- "$p")" = "$mode $owner" ]; then
      echo unchanged
    else
      mkdir -p -- "$p"
      chmod -- "$mode" "$p"
      chown -- "$owner" "$p"
      echo changed
    fi
    continue
  fi
  path=$2 tmp=$3 mode=$4 owner=$5 group=$6 sha=$7 size=$8
  shift 8
  if [ -d "$path" ] && [ ! -L "$path" ]; then
    echo "$path is a directory" >&2
    exit 1
  fi
  (umask 077; set -C; if [ "$size" -gt 0 ]; then dd iflag=fullblock bs="$size" count=1 status=none; fi > "$tmp")
  if [ -f "$path" ] && [ ! -L "$path" ] && [ "$(sha256sum < "$path")" = "$sha  -" ] \
    && [ "$(stat -c '%a %U %G' -- "$path")" = "$mode $owner $group" ]; then
    rm -f -- "$tmp"
    tmp=
    echo unchanged
    continue
  fi
  chmod -- "$mode" "$tmp"
  chown -- "$owner:$group" "$tmp"
  sync -- "$tmp"
  if [ "$backup" = 1 ] && [ -f "$path" ]; then
    cp -p -- "$path" "$path.$(date -u +%Y%m%dT%H%M%SZ).toolkit-backup"
  fi
  mv -f -- "$tmp" "$path"
  tmp=
  sync -- "${path%/*}/." 2>/dev/null || true
  echo written
done
"#;

/// The argv and standard input that perform `items` in order. The input is the
/// files' own bytes, borrowed in order: a batch is hundreds of kilobytes per host,
/// every host at once, and a joined copy would double it.
///
/// # Errors
/// A file path that is not absolute.
pub fn script<'a>(items: &[BatchItem<'a>], backup: bool) -> Result<(Vec<String>, Vec<&'a [u8]>), TransportError> {
    let mut argv = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        SCRIPT.to_owned(),
        "toolkit-batch".to_owned(),
        if backup { "1".to_owned() } else { "0".to_owned() },
    ];
    let mut input = Vec::new();
    for item in items {
        match *item {
            BatchItem::Directory { path, mode, owner } => {
                argv.extend(["d".to_owned(), path.to_owned(), format!("{mode:o}"), owner.to_owned()]);
            }
            BatchItem::File { path, contents, mode, owner, group } => {
                argv.extend([
                    "f".to_owned(),
                    path.to_owned(),
                    temp_path(path, &super::random_suffix())?,
                    format!("{mode:o}"),
                    owner.to_owned(),
                    group.to_owned(),
                    hex::encode(Sha256::digest(contents)),
                    contents.len().to_string(),
                ]);
                input.push(contents);
            }
        }
    }
    Ok((argv, input))
}

/// One result per item: those before a failure succeeded, the failing one carries
/// the script's error, the rest were not attempted (`None`: the caller decides
/// whether they still can be, they may not depend on the failure).
#[must_use]
pub fn interpret(host: &str, items: &[BatchItem<'_>], output: &Output) -> Vec<Option<Result<ItemOutcome, String>>> {
    let stdout = output.stdout_text();
    let mut lines = stdout.lines();
    let mut results = Vec::with_capacity(items.len());
    let mut failed = false;
    for item in items {
        let path = match item {
            BatchItem::Directory { path, .. } | BatchItem::File { path, .. } => *path,
        };
        if failed {
            results.push(None);
            continue;
        }
        match lines.next() {
            Some("written" | "changed") => results.push(Some(Ok(ItemOutcome::Changed))),
            Some("unchanged") => results.push(Some(Ok(ItemOutcome::Unchanged))),
            _ => {
                results.push(Some(Err(format!(
                    "writing `{path}` on `{host}` failed ({}): {}",
                    output.status,
                    output.stderr_tail()
                ))));
                failed = true;
            }
        }
    }
    results
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::transport::ExitStatus;

    fn run_locally(items: &[BatchItem<'_>]) -> Output {
        run_with(items, false)
    }

    fn run_with(items: &[BatchItem<'_>], backup: bool) -> Output {
        let (argv, input) = script(items, backup).expect("script");
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let _ = child.stdin.take().expect("stdin").write_all(&input.concat());
        let output = child.wait_with_output().expect("wait");
        Output {
            status: output.status.code().map_or(ExitStatus::Unknown, |code| ExitStatus::Code(code as u32)),
            stdout: output.stdout,
            stderr: output.stderr,
        }
    }

    fn me() -> (String, String) {
        let id = |flag: &str| {
            String::from_utf8(std::process::Command::new("id").arg(flag).output().expect("id").stdout)
                .expect("utf8")
                .trim()
                .to_owned()
        };
        (id("-un"), id("-gn"))
    }

    #[test]
    fn writes_a_directory_and_several_files_from_one_stream() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (user, group) = me();
        let app = dir.path().join("app").display().to_string();
        let paths: Vec<String> = ["a", "b", "empty", "c"].iter().map(|n| format!("{app}/{n}")).collect();
        let big = vec![b'x'; 300_000];
        let file = |path: &'static str, contents: &'static [u8]| (path, contents);
        let _ = file;
        let items = [
            BatchItem::Directory { path: &app, mode: 0o755, owner: &user },
            BatchItem::File { path: &paths[0], contents: b"first\n", mode: 0o644, owner: &user, group: &group },
            BatchItem::File { path: &paths[1], contents: &big, mode: 0o600, owner: &user, group: &group },
            BatchItem::File { path: &paths[2], contents: b"", mode: 0o644, owner: &user, group: &group },
            BatchItem::File { path: &paths[3], contents: b"last\n", mode: 0o644, owner: &user, group: &group },
        ];
        let output = run_locally(&items);
        let results = interpret("local", &items, &output);
        assert!(results.iter().all(|r| *r == Some(Ok(ItemOutcome::Changed))), "{results:?} {}", output.stderr_tail());
        assert_eq!(std::fs::read(&paths[0]).expect("a"), b"first\n");
        assert_eq!(std::fs::read(&paths[1]).expect("b"), big);
        assert_eq!(std::fs::read(&paths[2]).expect("empty"), b"");
        assert_eq!(std::fs::read(&paths[3]).expect("c"), b"last\n");
        assert_eq!(std::fs::metadata(&paths[1]).expect("meta").permissions().mode() & 0o777, 0o600);
        let again = interpret("local", &items, &run_locally(&items));
        assert!(again.iter().all(|r| *r == Some(Ok(ItemOutcome::Unchanged))), "{again:?}");
        let leftovers = std::fs::read_dir(&app)
            .expect("dir")
            .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().contains(".toolkit-")));
        assert_eq!(leftovers.count(), 0, "no temp file left");
    }

    #[test]
    fn keeps_the_replaced_file_when_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (user, group) = me();
        let path = dir.path().join("conf").display().to_string();
        std::fs::write(&path, "old\n").expect("old");
        let items = [BatchItem::File { path: &path, contents: b"new\n", mode: 0o644, owner: &user, group: &group }];
        let results = interpret("local", &items, &run_with(&items, true));
        assert_eq!(results, vec![Some(Ok(ItemOutcome::Changed))]);
        let backups: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".toolkit-backup"))
            .collect();
        assert_eq!(backups.len(), 1);
        assert_eq!(std::fs::read_to_string(backups[0].path()).expect("backup"), "old\n");
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "new\n");
    }

    #[test]
    fn stops_at_the_first_failure_and_reports_the_rest_as_not_attempted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (user, group) = me();
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).expect("mkdir");
        let blocked = blocked.display().to_string();
        let after = dir.path().join("after").display().to_string();
        let items = [
            BatchItem::File { path: &blocked, contents: b"x", mode: 0o644, owner: &user, group: &group },
            BatchItem::File { path: &after, contents: b"y", mode: 0o644, owner: &user, group: &group },
        ];
        let results = interpret("local", &items, &run_locally(&items));
        assert!(
            results[0].as_ref().is_some_and(|r| r.as_ref().is_err_and(|e| e.contains("is a directory"))),
            "{results:?}"
        );
        assert!(results[1].is_none(), "not attempted: {results:?}");
        assert!(!std::path::Path::new(&after).exists());
    }
}
