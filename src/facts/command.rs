//! Command facts: whether guarded commands have done their work, and what
//! value-setting commands read now — every command of a host in one remote call.
//!
//! Stage: observe (and apply, for one command). Input: [`Probe`]s (a guard or a
//! read per command). Output: one [`CommandFact`] per probe, in order.
//!
//! The call is one `sh` script built here: each guard or read argv is quoted by
//! [`quote::command_line`] and run in a subshell (so a guard that is a shell builtin
//! such as `exit` or `cd` cannot end or move the script), with standard input from
//! `/dev/null`. A guard's standard output goes to `/dev/null` and a read's is
//! captured whole, so nothing a command prints can be taken for a status line:
//! `check INDEX STATUS` per guard, `read INDEX STATUS BYTES` followed by exactly
//! that many bytes per read. Semantics are those of running each on its own: a
//! guard holds when its `creates` path exists, else when its `unless` exits 0.
//! Probes run side by side ([`PARALLEL`] at a time, records kept apart in files),
//! so a host's probes cost about the slowest one.

use std::fmt::Write as _;

use super::{FactError, ParseError};
use crate::transport::{Executor, quote};

/// What to learn about one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe<'a> {
    /// Whether its guard says it has done its work.
    Guard {
        /// Done when this path exists.
        creates: Option<&'a str>,
        /// Done when this argv exits 0.
        unless: Option<&'a [String]>,
    },
    /// What this argv prints now.
    Read(&'a [String]),
}

/// What one [`Probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandFact {
    /// The guard holds (`true`) or not.
    Done(bool),
    /// The read's standard output when it exited 0, `None` when it failed.
    Printed(Option<String>),
}

/// Probes run at once: most guards wait on a daemon (sacctmgr takes ~0.3 s, nearly
/// all of it waiting on slurmdbd), so a host with many costs the slowest, not the sum.
pub const PARALLEL: usize = 16;

/// The script for `probes`; each probe is answered by one status record.
///
/// Each probe is a function `pN` printing its record. They run [`PARALLEL`] at a
/// time, each into its own file of a private temp directory (on `/dev/shm` where
/// there is one, so a full disk does not stop a plan), and the files are printed in
/// order; where no temp directory can be made they run one after another.
/// Guards and reads only look, so running them side by side answers as running
/// them in turn would.
///
/// # Errors
/// A guard or read argv that cannot be sent (empty, or a NUL byte).
pub fn script(probes: &[Probe<'_>]) -> Result<String, crate::transport::TransportError> {
    // Commands read nothing: a guard that waits for input would hang the plan.
    let mut script = String::from("exec </dev/null\n");
    for (index, probe) in probes.iter().enumerate() {
        let _ = writeln!(script, "p{index}() {{");
        match probe {
            Probe::Guard { creates, unless } => {
                let unless = unless.map(quote::command_line).transpose()?;
                match (creates, unless) {
                    (Some(path), Some(unless)) => {
                        let path = quote::quote(path);
                        let _ = writeln!(script, "if test -e {path}; then s=0; else ({unless}) >/dev/null; s=$?; fi");
                    }
                    (Some(path), None) => {
                        let _ = writeln!(script, "if test -e {}; then s=0; else s=1; fi", quote::quote(path));
                    }
                    (None, Some(unless)) => {
                        let _ = writeln!(script, "({unless}) >/dev/null; s=$?");
                    }
                    (None, None) => script.push_str("s=1\n"),
                }
                let _ = writeln!(script, "printf 'check {index} %s\\n' \"$s\"");
            }
            Probe::Read(argv) => {
                let line = quote::command_line(argv)?;
                // `$(…)` drops trailing newlines: a final `x`, removed after, keeps them.
                let _ = writeln!(script, "out=$( ({line}); s=$?; printf x; exit \"$s\" ); s=$?; out=${{out%x}}");
                let _ = writeln!(
                    script,
                    "printf 'read {index} %s %s\\n%s\\n' \"$s\" \"$(printf %s \"$out\" | wc -c)\" \"$out\""
                );
            }
        }
        script.push_str("}\n");
    }
    let _ = write!(
        script,
        r#"n={count}
i=0
if d=$(mktemp -d /dev/shm/toolkit-facts.XXXXXX 2>/dev/null || mktemp -d 2>/dev/null); then
  trap 'rm -rf -- "$d"' EXIT
  while [ "$i" -lt "$n" ]; do
    "p$i" >"$d/$i" &
    i=$((i + 1))
    [ $((i % {PARALLEL})) -ne 0 ] || wait
  done
  wait
  i=0
  while [ "$i" -lt "$n" ]; do cat -- "$d/$i"; i=$((i + 1)); done
else
  while [ "$i" -lt "$n" ]; do "p$i"; i=$((i + 1)); done
fi
exit 0
"#,
        count = probes.len()
    );
    Ok(script)
}

/// Reads the script's output: one fact per probe, in order.
///
/// # Errors
/// A record that is malformed, out of range, repeated or missing.
pub fn parse(output: &[u8], probes: usize) -> Result<Vec<CommandFact>, ParseError> {
    let mut facts: Vec<Option<CommandFact>> = vec![None; probes];
    let mut rest = output;
    let mut line_number = 0;
    while !rest.is_empty() {
        line_number += 1;
        let end = rest.iter().position(|&byte| byte == b'\n').unwrap_or(rest.len());
        let header = String::from_utf8_lossy(&rest[..end]).into_owned();
        rest = rest.get(end + 1..).unwrap_or_default();
        let at = line_number;
        let bad = |reason: &str| ParseError::new(at, &header, reason);
        let words: Vec<&str> = header.split(' ').collect();
        let number = |word: Option<&&str>| word.and_then(|word| word.trim().parse::<usize>().ok());
        let (index, fact) = match words.first().copied() {
            Some("check") if words.len() == 3 => {
                let index = number(words.get(1)).ok_or_else(|| bad("expected `check INDEX STATUS`"))?;
                (index, CommandFact::Done(words[2] == "0"))
            }
            Some("read") if words.len() == 4 => {
                let (Some(index), Some(length)) = (number(words.get(1)), number(words.get(3))) else {
                    return Err(bad("expected `read INDEX STATUS BYTES`"));
                };
                let (Some(printed), Some(b'\n')) = (rest.get(..length), rest.get(length)) else {
                    return Err(bad("fewer bytes follow than announced"));
                };
                // The printed lines and the newline that ends them.
                line_number += printed.split(|&byte| byte == b'\n').count();
                rest = &rest[length + 1..];
                let printed = String::from_utf8_lossy(printed).into_owned();
                (index, CommandFact::Printed((words[2] == "0").then_some(printed)))
            }
            _ => return Err(bad("expected a `check` or `read` record")),
        };
        let slot = facts.get_mut(index).ok_or_else(|| bad("no such command"))?;
        if slot.replace(fact).is_some() {
            return Err(bad("answered twice"));
        }
    }
    facts
        .into_iter()
        .enumerate()
        .map(|(index, fact)| {
            fact.ok_or_else(|| ParseError::new(line_number, "", format!("command {index} not answered")))
        })
        .collect()
}

/// Runs every probe of one host in one remote call.
///
/// # Errors
/// The call fails, or its output is not one record per probe (the script died).
pub async fn probe<E: Executor>(executor: &E, probes: &[Probe<'_>]) -> Result<Vec<CommandFact>, FactError> {
    if probes.is_empty() {
        return Ok(Vec::new());
    }
    let argv = super::script_argv(&script(probes)?, "toolkit-command-facts", []);
    let output = executor.exec(&argv).await?;
    let parsed = parse(&output.stdout, probes.len());
    match parsed {
        Ok(facts) if output.success() => Ok(facts),
        Err(error) if output.success() => Err(error.for_probe(executor.host(), "command")),
        _ => Err(FactError::Probe {
            host: executor.host().to_owned(),
            fact: "command",
            stderr: output.stderr_tail(),
            status: output.status,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|word| (*word).to_owned()).collect()
    }

    /// Runs the script with the real local `sh`, in `dir`.
    fn run(probes: &[Probe<'_>], dir: &std::path::Path) -> Vec<CommandFact> {
        let script = script(probes).expect("script");
        let output =
            std::process::Command::new("sh").arg("-c").arg(&script).current_dir(dir).output().expect("sh runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        parse(&output.stdout, probes.len()).unwrap_or_else(|error| {
            panic!("{error:?}\n{}", String::from_utf8_lossy(&output.stdout));
        })
    }

    #[test]
    fn guards_run_in_one_script_with_their_own_semantics() {
        let dir = tempfile::tempdir().expect("tempdir");
        let odd = "it's a \"path\"\nwith a newline";
        std::fs::write(dir.path().join(odd), "").expect("odd file");
        let exists = dir.path().join(odd).display().to_string();
        let missing = dir.path().join("missing $(touch pwned)").display().to_string();
        let pass = words(&[
            "sh",
            "-c",
            r#"test "$1" = "a'b \"c\"
d""#,
            "sh",
            "a'b \"c\"\nd",
        ]);
        let fail = words(&["sh", "-c", "exit 3"]);
        // Output that looks like records, and input it would read: neither counts.
        let liar = words(&["sh", "-c", "printf 'check 0 0\\nread 1 0 1\\n'; cat; exit 1"]);
        let quits = words(&["exit", "0"]);
        let facts = run(
            &[
                Probe::Guard { creates: Some(&exists), unless: None },
                Probe::Guard { creates: Some(&missing), unless: None },
                Probe::Guard { creates: Some(&missing), unless: Some(&pass) },
                Probe::Guard { creates: Some(&exists), unless: Some(&fail) },
                Probe::Guard { creates: None, unless: Some(&fail) },
                Probe::Guard { creates: None, unless: Some(&liar) },
                Probe::Guard { creates: None, unless: Some(&quits) },
                Probe::Guard { creates: None, unless: None },
                Probe::Guard { creates: None, unless: Some(&words(&["no-such-program-here"])) },
            ],
            dir.path(),
        );
        let done: Vec<bool> = facts.iter().map(|fact| matches!(fact, CommandFact::Done(true))).collect();
        assert_eq!(done, [true, false, true, true, false, false, true, false, false]);
        assert!(!dir.path().join("pwned").exists(), "a path is never run");
    }

    #[test]
    fn reads_keep_their_output_byte_for_byte() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tricky = "10\ngres/gpu=8\n\ncheck 0 0\nread 0 0 3\nünï 'q' \"d\"\n\n";
        let print = words(&["printf", "%s", tricky]);
        let empty = words(&["true"]);
        let failing = words(&["sh", "-c", "echo partial; exit 2"]);
        let after = words(&["sh", "-c", "exit 0"]);
        let facts = run(
            &[
                Probe::Read(&print),
                Probe::Read(&empty),
                Probe::Read(&failing),
                Probe::Guard { creates: None, unless: Some(&after) },
            ],
            dir.path(),
        );
        assert_eq!(
            facts,
            [
                CommandFact::Printed(Some(tricky.to_owned())),
                CommandFact::Printed(Some(String::new())),
                CommandFact::Printed(None),
                CommandFact::Done(true),
            ]
        );
    }

    #[test]
    fn probes_run_side_by_side_and_one_by_one_without_a_temp_dir() {
        // Each guard waits (up to 10 s) until all four have started: only probes
        // that run at the same time all pass.
        let started = tempfile::tempdir().expect("tempdir");
        let dir = started.path().display().to_string();
        let rendezvous = r#"touch "$1/$2"; for t in $(seq 100); do [ "$(ls "$1" | wc -l)" -ge 4 ] && exit 0; sleep 0.1; done; exit 1"#;
        let guards: Vec<Vec<String>> =
            (0..4).map(|index| words(&["sh", "-c", rendezvous, "sh", &dir, &index.to_string()])).collect();
        let probes: Vec<Probe<'_>> =
            guards.iter().map(|guard| Probe::Guard { creates: None, unless: Some(guard) }).collect();
        let facts = run(&probes, started.path());
        assert_eq!(facts, vec![CommandFact::Done(true); 4]);

        // Without mktemp the same script runs them in turn, with the same records.
        let stub = tempfile::tempdir().expect("tempdir");
        std::fs::write(stub.path().join("mktemp"), "#!/bin/sh\nexit 1\n").expect("stub");
        std::fs::set_permissions(stub.path().join("mktemp"), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let path = format!("{}:{}", stub.path().display(), std::env::var("PATH").unwrap_or_default());
        let print = words(&["printf", "a\nb\n"]);
        let fail = words(&["false"]);
        let probes = [Probe::Read(&print), Probe::Guard { creates: None, unless: Some(&fail) }];
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(script(&probes).expect("script"))
            .env("PATH", path)
            .output()
            .expect("sh runs");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "read 0 0 4\na\nb\n\ncheck 1 1\n");
    }

    #[test]
    fn a_short_or_garbled_output_is_an_error() {
        assert!(parse(b"check 0 0\n", 2).is_err(), "command 1 missing");
        assert!(parse(b"check 0 0\ncheck 0 1\n", 1).is_err(), "answered twice");
        assert!(parse(b"check 7 0\n", 1).is_err(), "out of range");
        assert!(parse(b"read 0 0 10\nabc\n", 1).is_err(), "truncated");
        assert!(parse(b"hello\n", 1).is_err());
        assert_eq!(parse(b"", 0), Ok(Vec::new()));
        assert!(script(&[Probe::Read(&[])]).is_err(), "an empty argv cannot be sent");
    }
}
