//! Firmware versions as vendors write them, compared: which of two is newer, or why
//! the two cannot be compared.
//!
//! Stage: plan (API targets) — the minimum-version and downgrade decisions. Input: two
//! version strings exactly as a BMC reports them or a blueprint declares them
//! (`P79 v1.45 (12/06/2017)`, `U46 v2.70 (01/11/2023)`, `2.75.75.75`,
//! `1.45.455b66-rev4`). Output: a [`Comparison`]: an [`Ordering`] of the first against
//! the second, or [`Comparison::CannotCompare`] with the reason.
//!
//! The rules, documented for users in `docs/firmware.md`:
//! - identical strings are the same version;
//! - `FAMILY vX.Y` (HPE ROM families `U46 v2.70`, `iLO 5 v2.78`): the families must be
//!   the same to compare (a family is one board's ROM line), then the versions after
//!   `v`; a trailing `(MM/DD/YYYY)` release date decides nothing when the versions
//!   differ, and two dates for one version cannot be compared;
//! - the version is cut into tokens at `.`, `-` and `_`, and compared token by token,
//!   the separators included: numbers as numbers (`2.75.75.75`, `7.00.00.171`), a
//!   number with one trailing letter (`3.4a`, AMI and Supermicro BIOSes) by number,
//!   then letter, a word with a number (`rev4`) by number when the words are the same,
//!   and any other token (a build hash such as `455b66`) only when equal;
//! - a version that is another one plus trailing zeros is the same (`2.4` = `2.4.0`),
//!   plus more numbers is newer (`2.4.1` > `2.4`);
//! - everything else — different separators, a number against a word, two build
//!   hashes, one family against none — cannot be compared, and callers say so instead
//!   of guessing.

use std::cmp::Ordering;
use std::fmt;

/// The outcome of comparing two versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    /// The first is older (`Less`), the same (`Equal`) or newer (`Greater`) than the second.
    Ordered(Ordering),
    /// The two are of forms these rules do not order; the reason says which part.
    CannotCompare(String),
}

impl fmt::Display for Comparison {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ordered(Ordering::Less) => formatter.write_str("older"),
            Self::Ordered(Ordering::Equal) => formatter.write_str("the same"),
            Self::Ordered(Ordering::Greater) => formatter.write_str("newer"),
            Self::CannotCompare(reason) => write!(formatter, "cannot compare: {reason}"),
        }
    }
}

/// Compares `first` with `second` (`Ordered(Less)`: `first` is older).
#[must_use]
pub fn compare(first: &str, second: &str) -> Comparison {
    let (first, second) = (first.trim(), second.trim());
    if first == second {
        return Comparison::Ordered(Ordering::Equal);
    }
    if first.is_empty() || second.is_empty() {
        return Comparison::CannotCompare("an empty version".to_owned());
    }
    let (left, right) = (Parsed::new(first), Parsed::new(second));
    match (left.family, right.family) {
        (Some(one), Some(other)) if one != other => {
            return Comparison::CannotCompare(format!(
                "different families `{one}` and `{other}` (a family is one board's firmware line)"
            ));
        }
        (Some(family), None) | (None, Some(family)) => {
            return Comparison::CannotCompare(format!("only one is of a family (`{family} v…`)"));
        }
        _ => {}
    }
    match tokens_order(&left.tokens, &right.tokens) {
        Ok(Ordering::Equal) => match (left.date, right.date) {
            (Some(one), Some(other)) if one != other => {
                Comparison::CannotCompare(format!("the same version with two release dates (`{one}`, `{other}`)"))
            }
            _ => Comparison::Ordered(Ordering::Equal),
        },
        Ok(order) => Comparison::Ordered(order),
        Err(reason) => Comparison::CannotCompare(reason),
    }
}

/// A version cut into what the rules compare.
#[derive(Debug)]
struct Parsed<'a> {
    /// `U46` of `U46 v2.70`.
    family: Option<&'a str>,
    /// `01/11/2023` of `U46 v2.70 (01/11/2023)`.
    date: Option<&'a str>,
    /// The version proper, cut at separators; each token keeps the separator before it.
    tokens: Vec<(Option<char>, &'a str)>,
}

impl<'a> Parsed<'a> {
    fn new(text: &'a str) -> Self {
        let (mut rest, date) = match text.strip_suffix(')').and_then(|t| t.rsplit_once(" (")) {
            Some((rest, date)) => (rest.trim_end(), Some(date)),
            None => (text, None),
        };
        let mut family = None;
        if let Some(position) = rest.rfind(" v").or_else(|| rest.rfind(" V"))
            && rest[position + 2..].starts_with(|c: char| c.is_ascii_digit())
        {
            family = Some(rest[..position].trim());
            rest = &rest[position + 2..];
        } else if let Some(stripped) = rest.strip_prefix(['v', 'V'])
            && stripped.starts_with(|c: char| c.is_ascii_digit())
        {
            rest = stripped;
        }
        let mut tokens = Vec::new();
        let mut separator = None;
        let mut start = 0;
        for (index, character) in rest.char_indices() {
            if matches!(character, '.' | '-' | '_' | ' ') {
                tokens.push((separator, &rest[start..index]));
                separator = Some(character);
                start = index + character.len_utf8();
            }
        }
        tokens.push((separator, &rest[start..]));
        Self { family, date, tokens }
    }
}

/// How one token compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    /// Digits only.
    Number(u64),
    /// Digits and one letter: `4a`.
    NumberLetter(u64, char),
    /// A word and a number: `rev4`.
    Counted(&'a str, u64),
    /// Anything else: compared only for equality.
    Opaque(&'a str),
}

fn token(text: &str) -> Token<'_> {
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let letters_end = text.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(text.len());
    let number = |digits: &str| digits.parse::<u64>().ok();
    if digits_end == text.len() {
        if let Some(value) = number(text) {
            return Token::Number(value);
        }
    } else if digits_end > 0 && digits_end + 1 == text.len() {
        let letter = text[digits_end..].chars().next().unwrap_or('?');
        if letter.is_ascii_alphabetic()
            && let Some(value) = number(&text[..digits_end])
        {
            return Token::NumberLetter(value, letter.to_ascii_lowercase());
        }
    } else if letters_end > 0
        && letters_end < text.len()
        && text[letters_end..].chars().all(|c| c.is_ascii_digit())
        && let Some(value) = number(&text[letters_end..])
    {
        return Token::Counted(&text[..letters_end], value);
    }
    Token::Opaque(text)
}

fn tokens_order(left: &[(Option<char>, &str)], right: &[(Option<char>, &str)]) -> Result<Ordering, String> {
    for (position, (one, other)) in left.iter().zip(right).enumerate() {
        if one.0 != other.0 {
            return Err(format!(
                "the versions are written differently (`{}` and `{}` before part {})",
                one.0.map_or_else(|| "start".to_owned(), String::from),
                other.0.map_or_else(|| "start".to_owned(), String::from),
                position + 1
            ));
        }
        let order = match (token(one.1), token(other.1)) {
            (Token::Number(a), Token::Number(b)) => a.cmp(&b),
            (Token::NumberLetter(a, x), Token::NumberLetter(b, y)) => a.cmp(&b).then(x.cmp(&y)),
            (Token::Counted(word, a), Token::Counted(other_word, b)) if word.eq_ignore_ascii_case(other_word) => {
                a.cmp(&b)
            }
            (Token::Opaque(a), Token::Opaque(b)) if a.eq_ignore_ascii_case(b) => Ordering::Equal,
            _ if one.1.eq_ignore_ascii_case(other.1) => Ordering::Equal,
            _ => return Err(format!("`{}` and `{}` are not ordered (part {})", one.1, other.1, position + 1)),
        };
        if order != Ordering::Equal {
            return Ok(order);
        }
    }
    // One is the other with more parts: zeros add nothing, numbers make it newer.
    let (longer, sign) = match left.len().cmp(&right.len()) {
        Ordering::Equal => return Ok(Ordering::Equal),
        Ordering::Greater => (&left[right.len()..], Ordering::Greater),
        Ordering::Less => (&right[left.len()..], Ordering::Less),
    };
    if longer.iter().all(|(_, text)| token(text) == Token::Number(0)) {
        return Ok(Ordering::Equal);
    }
    if longer.iter().all(|(_, text)| matches!(token(text), Token::Number(_))) {
        return Ok(sign);
    }
    let extra: Vec<&str> = longer.iter().map(|(_, text)| *text).collect();
    Err(format!("one version has the extra part `{}`, which is not a number", extra.join(".")))
}

#[cfg(test)]
mod tests {
    use super::*;

    use Ordering::{Equal, Greater, Less};

    fn ordered(first: &str, second: &str) -> Ordering {
        match compare(first, second) {
            Comparison::Ordered(order) => order,
            Comparison::CannotCompare(reason) => panic!("`{first}` vs `{second}`: cannot compare: {reason}"),
        }
    }

    fn refused(first: &str, second: &str) -> String {
        match compare(first, second) {
            Comparison::CannotCompare(reason) => reason,
            Comparison::Ordered(order) => panic!("`{first}` vs `{second}` ordered {order:?}"),
        }
    }

    /// Versions as real Redfish payloads carry them; sources in `docs/firmware.md`.
    #[test]
    fn orders_vendor_versions() {
        let table: &[(&str, &str, Ordering)] = &[
            // DMTF mockup `BiosVersion` (sushy's system.json): HPE-style family, date.
            ("P79 v1.45 (12/06/2017)", "P79 v1.45 (12/06/2017)", Equal),
            ("P79 v1.45 (12/06/2017)", "P79 v1.46 (02/01/2018)", Less),
            // HPE ProLiant Gen10 `BiosVersion`s.
            ("U46 v1.56 (11/29/2021)", "U46 v2.70 (01/11/2023)", Less),
            ("U46 v2.70 (01/11/2023)", "U46 v1.80 (07/05/2023)", Greater),
            ("U46 v1.80", "U46 v1.80 (07/05/2023)", Equal),
            // iLO manager `FirmwareVersion`.
            ("iLO 5 v2.78", "iLO 5 v3.19", Less),
            // Dell iDRAC `FirmwareVersion` and BIOS.
            ("2.75.75.75", "2.75.75.75", Equal),
            ("2.75.75.75", "4.40.00.00", Less),
            ("7.00.00.171", "6.10.30.00", Greater),
            ("2.19.1", "2.2.1", Greater),
            // DMTF mockup SoftwareInventory `Version` / `LowestSupportedVersion`.
            ("1.45.455b66-rev4", "1.30.367a12-rev1", Greater),
            ("1.45.455b66-rev4", "1.45.455b66-rev5", Less),
            // AMI / Supermicro letters, TPM `1.13b` of the DMTF mockup.
            ("3.4a", "3.4b", Less),
            ("1.13b", "1.13a", Greater),
            // Trailing zeros and more numbers.
            ("2.4", "2.4.0", Equal),
            ("2.4.1", "2.4", Greater),
            ("v2.80", "2.81", Less),
            // NVIDIA ConnectX firmware (`ibstat` `Firmware version`).
            ("28.43.2026", "28.39.1002", Greater),
        ];
        for (first, second, expected) in table {
            assert_eq!(ordered(first, second), *expected, "`{first}` vs `{second}`");
            assert_eq!(ordered(second, first), expected.reverse(), "`{second}` vs `{first}`");
        }
    }

    #[test]
    fn says_why_it_cannot_compare() {
        assert!(
            refused("U46 v2.70 (01/11/2023)", "U50 v2.80 (02/02/2023)").contains("different families `U46` and `U50`")
        );
        assert!(refused("U46 v2.70", "2.70.1").contains("only one is of a family"));
        assert!(refused("1.45.455b66-rev4", "1.45.512c01-rev4").contains("`455b66` and `512c01` are not ordered"));
        assert!(refused("1.2.3-4", "1.2.3.4").contains("written differently"));
        assert!(refused("2.4", "2.4.beta").contains("extra part `beta`"));
        assert!(refused("U46 v2.70 (01/11/2023)", "U46 v2.70 (02/11/2023)").contains("two release dates"));
        assert!(refused("", "1.0").contains("empty"));
        // NVIDIA GPU VBIOS-like hex parts are equal or not ordered, never guessed.
        assert_eq!(ordered("96.00.5E.00.01", "96.00.5e.00.01"), Equal);
        assert!(refused("96.00.5E.00.01", "96.00.61.00.01").contains("`5E` and `61`"));
    }

    #[test]
    fn display_reads_as_a_sentence() {
        assert_eq!(compare("1.0", "2.0").to_string(), "older");
        assert_eq!(
            compare("U46 v1", "U50 v1").to_string(),
            "cannot compare: different families `U46` and `U50` (a family is one board's firmware line)"
        );
    }
}
