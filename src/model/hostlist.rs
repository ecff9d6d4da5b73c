//! Slurm hostlist expressions: `node[01-04,07]` from a list of names.
//!
//! Stage: expand. Compressing here keeps slurm.conf one line per group even at
//! 32,768 nodes, as Slurm itself writes it.

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

/// A name prefix, its digit width and the number ranges seen with it.
type RangedPrefix = (String, usize, Vec<(u64, u64)>);

enum Entry {
    Plain(usize),
    Ranged(usize),
}

#[cfg(test)]
mod tests {
    use super::compress;

    #[test]
    fn compresses_ranges_and_keeps_singletons() {
        assert_eq!(compress(["node01", "node02", "node03", "node04"]), "node[01-04]");
        assert_eq!(compress(["gpu001", "gpu002", "gpu004"]), "gpu[001-002,004]");
        assert_eq!(compress(["head"]), "head");
        assert_eq!(compress(["node7"]), "node7");
        assert_eq!(compress(["head", "node01", "node02"]), "head,node[01-02]");
    }
}
