//! File facts: existence, kind, SHA-256, mode, owner and group of many paths in one
//! remote command.
//!
//! Stage: observe. Input: absolute paths. Output: one [`FileState`] per path, in
//! the same order. The script prints one line per path and never the path itself,
//! so names with spaces or newlines cannot break the parsing.

use super::{FactError, ParseError, run_probe, script_argv};
use crate::transport::Executor;

/// Prints, per path: `missing`, `link`, `file <sha256> <mode> <owner> <group>`,
/// `dir <mode> <owner> <group>`, `unreadable` or `other <kind>`.
const SCRIPT: &str = r#"for p do
  if [ -L "$p" ]; then
    echo link
  elif [ -f "$p" ]; then
    if h=$(sha256sum < "$p" 2>/dev/null) && m=$(stat -c '%a %U %G' -- "$p" 2>/dev/null); then
      echo "file ${h%% *} $m"
    else
      echo unreadable
    fi
  elif [ -d "$p" ]; then
    if m=$(stat -c '%a %U %G' -- "$p" 2>/dev/null); then echo "dir $m"; else echo unreadable; fi
  elif [ -e "$p" ]; then
    echo "other $(stat -c '%F' -- "$p" 2>/dev/null)"
  else
    echo missing
  fi
done
"#;

/// Permission bits and ownership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// Permission bits, including setuid/setgid/sticky.
    pub mode: u32,
    /// Owner user name (`UNKNOWN` when the uid has no name).
    pub owner: String,
    /// Owner group name.
    pub group: String,
}

/// What is at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    /// Nothing.
    Missing,
    /// A regular file.
    File {
        /// Hex SHA-256 of the content.
        sha256: String,
        /// Mode and ownership.
        meta: Meta,
    },
    /// A directory.
    Directory {
        /// Mode and ownership.
        meta: Meta,
    },
    /// A symbolic link (not followed: writing the path would replace the link).
    Symlink,
    /// Something the probing user may not read.
    Unreadable,
    /// A device, socket or FIFO (`stat %F` wording).
    Other {
        /// Its kind.
        kind: String,
    },
}

impl FileState {
    /// Whether this is a regular file with exactly this content hash, mode, owner
    /// and group.
    #[must_use]
    pub fn is_file_with(&self, sha256: &str, mode: u32, owner: &str, group: &str) -> bool {
        matches!(self, Self::File { sha256: have, meta } if have == sha256 && meta.mode == mode && meta.owner == owner && meta.group == group)
    }

    /// Whether this is a directory with exactly this mode and owner.
    #[must_use]
    pub fn is_directory_with(&self, mode: u32, owner: &str) -> bool {
        matches!(self, Self::Directory { meta } if meta.mode == mode && meta.owner == owner)
    }
}

/// The probe's argv for `paths`.
#[must_use]
pub fn argv(paths: &[String]) -> Vec<String> {
    script_argv(SCRIPT, "toolkit-file-facts", paths.iter().cloned())
}

/// Probes `paths` on one host.
///
/// # Errors
/// When the command fails or prints something else than one line per path.
pub async fn probe<E: Executor>(executor: &E, paths: &[String]) -> Result<Vec<FileState>, FactError> {
    run_probe(executor, "file", &argv(paths), |stdout| parse(stdout, paths.len())).await
}

/// Parses the probe's output; `expected` is the number of paths asked for.
///
/// # Errors
/// On an unknown line or a line count other than `expected`.
pub fn parse(stdout: &str, expected: usize) -> Result<Vec<FileState>, ParseError> {
    let states = stdout
        .lines()
        .enumerate()
        .map(|(index, line)| parse_line(line).map_err(|reason| ParseError::new(index + 1, line, reason)))
        .collect::<Result<Vec<_>, _>>()?;
    if states.len() == expected {
        Ok(states)
    } else {
        Err(ParseError::new(states.len(), "", format!("{} lines for {expected} paths", states.len())))
    }
}

fn parse_line(line: &str) -> Result<FileState, String> {
    let mut words = line.split(' ');
    match words.next() {
        Some("missing") => Ok(FileState::Missing),
        Some("link") => Ok(FileState::Symlink),
        Some("unreadable") => Ok(FileState::Unreadable),
        Some("other") => Ok(FileState::Other { kind: words.collect::<Vec<_>>().join(" ") }),
        Some("file") => {
            let sha256 = words.next().filter(|hash| hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()));
            let sha256 = sha256.ok_or("expected a SHA-256 after `file`")?.to_owned();
            Ok(FileState::File { sha256, meta: parse_meta(&mut words)? })
        }
        Some("dir") => Ok(FileState::Directory { meta: parse_meta(&mut words)? }),
        _ => Err("expected missing, link, file, dir, unreadable or other".to_owned()),
    }
}

fn parse_meta<'a>(words: &mut impl Iterator<Item = &'a str>) -> Result<Meta, String> {
    let (Some(mode), Some(owner), Some(group), None) = (words.next(), words.next(), words.next(), words.next()) else {
        return Err("expected `<mode> <owner> <group>`".to_owned());
    };
    let mode = u32::from_str_radix(mode, 8).map_err(|_| format!("mode `{mode}` is not octal"))?;
    Ok(Meta { mode, owner: owner.to_owned(), group: group.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded on Debian 12 by running [`SCRIPT`] with `sh -c` over
    /// `/etc/hostname /etc /nonexistent /dev/null /etc/os-release /tmp
    /// /usr/bin/passwd /root/.bashrc` (see `tests/fixtures/facts/README.md`).
    const RECORDED: &str = include_str!("../../tests/fixtures/facts/file-probe.txt");

    #[test]
    fn parses_recorded_output() {
        let states = parse(RECORDED, 8).expect("parses");
        assert!(
            matches!(&states[0], FileState::File { sha256, meta } if sha256.len() == 64 && meta.mode == 0o755 && meta.owner == "root")
        );
        assert!(states[1].is_directory_with(0o755, "root"));
        assert_eq!(states[2], FileState::Missing);
        assert_eq!(states[3], FileState::Other { kind: "character special file".to_owned() });
        assert_eq!(states[4], FileState::Symlink);
        assert!(states[5].is_directory_with(0o1777, "root"));
        assert!(matches!(&states[6], FileState::File { meta, .. } if meta.mode == 0o4755));
        assert!(matches!(&states[7], FileState::File { meta, .. } if meta.mode == 0o644 && meta.group == "root"));
    }

    #[test]
    fn the_script_runs_locally_on_hostile_names() {
        let directory = tempfile::tempdir().expect("tempdir");
        let odd = directory.path().join("a'b\nc $(x)");
        std::fs::write(&odd, "abc").expect("write");
        let paths = vec![odd.to_str().expect("utf-8").to_owned(), "/nonexistent/x".to_owned()];
        let argv = argv(&paths);
        let output = std::process::Command::new(&argv[0]).args(&argv[1..]).output().expect("sh");
        let states = parse(&String::from_utf8_lossy(&output.stdout), 2).expect("parses");
        let sha = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert!(matches!(&states[0], FileState::File { sha256, .. } if sha256 == sha), "{states:?}");
        assert_eq!(states[1], FileState::Missing);
    }

    #[test]
    fn refuses_surprises() {
        assert!(parse("file xyz 644 root root\n", 1).is_err());
        assert!(parse("dir 9z root root\n", 1).is_err());
        assert!(parse("missing\n", 2).is_err());
        assert_eq!(parse("what\n", 1).expect_err("unknown").line, 1);
    }
}
