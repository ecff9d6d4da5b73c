//! Slurm hostlist expressions: `node[01-04,07]` from a list of names, and back.
//!
//! Stage: expand. Compressing here keeps slurm.conf one line per group even at
//! 32,768 nodes, as Slurm itself writes it; expanding reads the node lists a
//! blueprint writes the same way (NVLink domains).

/// Compresses names into a Slurm hostlist, keeping their order.
/// Names with the same prefix and digit width form ranges.
#[must_use]
pub fn compress<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut parts: Vec<RangedPrefix> = Vec::new();
    let mut plain: Vec<String> = Vec::new();
    let mut order: Vec<Entry> = Vec::new();
    for name in names {
        let digits = name.chars().rev().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            plain.push(name.to_owned());
            order.push(Entry::Plain(plain.len() - 1));
            continue;
        }
        let (prefix, number) = name.split_at(name.len() - digits);
        let Ok(value) = number.parse::<u64>() else {
            plain.push(name.to_owned());
            order.push(Entry::Plain(plain.len() - 1));
            continue;
        };
        match parts.last_mut() {
            Some((last_prefix, width, ranges)) if last_prefix == prefix && *width == digits => {
                match ranges.last_mut() {
                    Some((_, end)) if *end + 1 == value => *end = value,
                    _ => ranges.push((value, value)),
                }
            }
            _ => {
                parts.push((prefix.to_owned(), digits, vec![(value, value)]));
                order.push(Entry::Ranged(parts.len() - 1));
            }
        }
    }
    let rendered: Vec<String> = order
        .into_iter()
        .map(|entry| match entry {
            Entry::Plain(index) => plain[index].clone(),
            Entry::Ranged(index) => {
                let (prefix, width, ranges) = &parts[index];
                if let [(start, end)] = ranges.as_slice()
                    && start == end
                {
                    return format!("{prefix}{start:0width$}");
                }
                let inner: Vec<String> = ranges
                    .iter()
                    .map(|(start, end)| {
                        if start == end { format!("{start:0width$}") } else { format!("{start:0width$}-{end:0width$}") }
                    })
                    .collect();
                format!("{prefix}[{}]", inner.join(","))
            }
        })
        .collect();
    rendered.join(",")
}

/// Most names one expression may expand to: far above a rack, low enough that a
/// hostile `n[0-999999999]` costs nothing.
pub const MAX_EXPANDED: u64 = 65_536;

/// Expands `gb[001-018,020],head` into names, in order. Each bracket holds
/// comma-separated numbers or `first-last` ranges; the first number's digits give the
/// zero-padding width. One bracket per name, as in slurm.conf.
///
/// # Errors
/// Why the expression is malformed, or that it names more than [`MAX_EXPANDED`] hosts.
pub fn expand(expression: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = expression.trim();
    while !rest.is_empty() {
        let bracket = rest.find('[');
        let comma = rest.find(',');
        let (prefix, after) = match (bracket, comma) {
            (Some(open), comma) if comma.is_none_or(|comma| open < comma) => (&rest[..open], &rest[open + 1..]),
            (_, Some(comma)) => {
                push_plain(&rest[..comma], &mut names)?;
                rest = &rest[comma + 1..];
                continue;
            }
            (_, None) => {
                push_plain(rest, &mut names)?;
                break;
            }
        };
        let close = after.find(']').ok_or_else(|| format!("`[` after `{prefix}` is not closed with `]`"))?;
        let (inner, tail) = (&after[..close], &after[close + 1..]);
        let (suffix, next) = tail.split_once(',').unwrap_or((tail, ""));
        if suffix.contains(['[', ']']) {
            return Err(format!("`{prefix}[{inner}]{suffix}` has more than one bracket"));
        }
        for part in inner.split(',') {
            let (first, last) = part.split_once('-').unwrap_or((part, part));
            let number = |text: &str| {
                (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| text.parse::<u64>().ok())
                    .flatten()
                    .ok_or_else(|| format!("`{part}` in `[{inner}]` is not a number or a `first-last` range"))
            };
            let (start, end) = (number(first)?, number(last)?);
            if end < start {
                return Err(format!("the range `{part}` runs backwards"));
            }
            if (names.len() as u64).saturating_add(end - start + 1) > MAX_EXPANDED {
                return Err(format!("the expression names more than {MAX_EXPANDED} hosts"));
            }
            let width = first.len();
            names.extend((start..=end).map(|value| format!("{prefix}{value:0width$}{suffix}")));
        }
        rest = next;
    }
    Ok(names)
}

fn push_plain(name: &str, names: &mut Vec<String>) -> Result<(), String> {
    if name.is_empty() || name.contains(']') {
        return Err(format!("`{name}` is not a host name"));
    }
    names.push(name.to_owned());
    Ok(())
}

/// A name prefix, its digit width and the number ranges seen with it.
type RangedPrefix = (String, usize, Vec<(u64, u64)>);

enum Entry {
    Plain(usize),
    Ranged(usize),
}

#[cfg(test)]
mod tests {
    use super::{compress, expand};

    #[test]
    fn expands_what_compress_writes() {
        for names in [vec!["node01", "node02", "node03", "node04"], vec!["gpu001", "gpu002", "gpu004"], vec!["head"]] {
            let joined = compress(names.iter().copied());
            assert_eq!(expand(&joined).expect("expands"), names, "{joined}");
        }
        assert_eq!(expand("head,n[1-2]x,m7").expect("expands"), ["head", "n1x", "n2x", "m7"]);
        for wrong in ["n[1-", "n[2-1]", "n[a]", "n[1]x[2]", "a,,b", "n[0-999999999]"] {
            assert!(expand(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn compresses_ranges_and_keeps_singletons() {
        assert_eq!(compress(["node01", "node02", "node03", "node04"]), "node[01-04]");
        assert_eq!(compress(["gpu001", "gpu002", "gpu004"]), "gpu[001-002,004]");
        assert_eq!(compress(["head"]), "head");
        assert_eq!(compress(["node7"]), "node7");
        assert_eq!(compress(["head", "node01", "node02"]), "head,node[01-02]");
    }
}
