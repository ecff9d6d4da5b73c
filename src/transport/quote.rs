//! POSIX shell quoting for command lines sent to a remote shell.
//!
//! Stage: transport. Input: an argv (`&[String]`). Output: one command line that a
//! POSIX shell (what sshd runs the command with) splits back into exactly that argv.
//! SSH carries a single string, not an argv, so every value is quoted here and
//! nowhere else; nothing is ever concatenated raw.

use super::TransportError;

pub use crate::resource::shell::quote;

/// Joins an argv into one command line, each word quoted.
///
/// # Errors
/// [`TransportError::InvalidArgument`] when the argv is empty or a word holds a NUL
/// byte, which no remote program could receive.
pub fn command_line(argv: &[String]) -> Result<String, TransportError> {
    if argv.is_empty() {
        return Err(TransportError::InvalidArgument { reason: "empty command".to_owned() });
    }
    let mut line = String::with_capacity(argv.iter().map(|word| word.len() + 3).sum());
    for (position, word) in argv.iter().enumerate() {
        if word.contains('\0') {
            return Err(TransportError::InvalidArgument {
                reason: format!("argument {position} of `{}` contains a NUL byte", argv[0]),
            });
        }
        if position > 0 {
            line.push(' ');
        }
        line.push_str(&quote(word));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the quoted line through the local `sh` and returns the words it saw.
    fn words_seen_by_sh(argv: &[&str]) -> Vec<String> {
        let argv: Vec<String> = argv.iter().map(|word| (*word).to_owned()).collect();
        let line = command_line(&argv).expect("valid argv");
        // `printf '%s\0'` prints each word NUL-terminated, so words with newlines survive.
        let output =
            std::process::Command::new("sh").arg("-c").arg(format!("printf '%s\\0' {line}")).output().expect("sh runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8(output.stdout).expect("utf-8");
        text.split_terminator('\0').map(str::to_owned).collect()
    }

    #[test]
    fn leaves_safe_words_alone() {
        assert_eq!(quote("/etc/slurm/slurm.conf"), "/etc/slurm/slurm.conf");
        assert_eq!(quote("root:root"), "root:root");
        assert_eq!(quote("--no-install-recommends"), "--no-install-recommends");
    }

    #[test]
    fn quotes_hostile_words() {
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a'b"), r"'a'\''b'");
        assert_eq!(quote("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(quote("A=b"), "'A=b'");
        assert_eq!(quote("~root"), "'~root'");
        assert_eq!(quote("line1\nline2"), "'line1\nline2'");
    }

    #[test]
    fn a_real_shell_gets_the_exact_argv_back() {
        let hostile = [
            "a'b",
            "$(rm -rf /)",
            "`id`",
            "",
            "two words",
            "line1\nline2\n",
            "tab\there",
            "back\\slash",
            "'",
            "''",
            "\"double\"",
            "*",
            "semi;colon && x || y | z > /dev/null",
            "${HOME}",
            "ünïcödé ✓",
            "-n",
            "A=b",
        ];
        assert_eq!(words_seen_by_sh(&hostile), hostile);
    }

    #[test]
    fn refuses_nul_and_empty_argv() {
        assert!(command_line(&[]).is_err());
        let error = command_line(&["printf".to_owned(), "a\0b".to_owned()]).expect_err("NUL");
        assert!(error.to_string().contains("NUL"), "{error}");
    }
}
