//! POSIX shell words: one word quoted so a shell reads it back unchanged, and a
//! one-line summary of an argv for plans and messages.
//!
//! Stage: core (pure). Used by the plan (a command's description), transport (the
//! command line sshd's shell splits back into the argv) and the programs rendered
//! for the nodes. Every value is quoted through [`quote`]; nothing is concatenated raw.

use std::borrow::Cow;

/// Quotes one word for a POSIX shell: safe words stay as they are, everything else
/// is wrapped in single quotes, with each `'` written as `'\''`.
///
/// Inside single quotes a POSIX shell expands nothing (`$`, backquotes, `\`,
/// newlines are all literal), so the only character to handle is `'` itself.
#[must_use]
pub fn quote(word: &str) -> Cow<'_, str> {
    // `=` is left out of the safe set: an unquoted `A=b` as the first word would be an
    // assignment, not a command. `~` would be expanded at the start of a word.
    let is_safe = |byte: u8| byte.is_ascii_alphanumeric() || b"_-./:,@%+".contains(&byte);
    if !word.is_empty() && word.bytes().all(is_safe) {
        return Cow::Borrowed(word);
    }
    let mut quoted = String::with_capacity(word.len() + 2);
    quoted.push('\'');
    for character in word.chars() {
        if character == '\'' {
            quoted.push_str("'\\''");
        } else {
            quoted.push(character);
        }
    }
    quoted.push('\'');
    Cow::Owned(quoted)
}

/// A short, single-line form of an argv for messages: inline scripts and long
/// words are abbreviated.
#[must_use]
pub fn summarize(argv: &[String]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|word| {
            if word.contains('\n') || word.len() > 80 {
                format!("<{} bytes>", word.len())
            } else {
                quote(word).into_owned()
            }
        })
        .collect();
    words.join(" ")
}
