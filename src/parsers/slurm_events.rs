//! Slurm's event log: `sacctmgr --parsable2 list events` with its header line, one row
//! per period a node (or the cluster) spent down or drained, from the accounting
//! database.
//!
//! Stage: parse (leaf). Input: the text sacctmgr printed. Output: [`SlurmEvent`]s in
//! its order. Columns are found by their header name, so any `format=` that includes
//! `NodeName`, `TimeStart`, `TimeEnd`, `State` and `Reason` reads (`User` is optional).
//! Times are sacctmgr's local civil times (`2026-12-05T22:30:41`), as printed; an
//! event still open prints `Unknown` as its end.

use jiff::civil::DateTime;
use serde::Serialize;

use super::ParseError;

/// One event: a node's (or the cluster's) period out of service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmEvent {
    /// The node; empty for a cluster event.
    pub node: String,
    /// When it began.
    pub start: DateTime,
    /// When it ended (the node resumed); `None` while it lasts.
    pub end: Option<DateTime>,
    /// The node's state during the event (`DRAIN`, `DOWN*`, `IDLE+DRAIN`).
    pub state: String,
    /// Why, as set with the drain (`toolkit:health rail-links: rail1 down`).
    pub reason: String,
    /// Who set it (`root`, `slurm`); empty when the output has no `User` column.
    pub user: String,
}

const REQUIRED: [&str; 5] = ["NodeName", "TimeStart", "TimeEnd", "State", "Reason"];

/// Reads `sacctmgr --parsable2 list events` output (header line first).
///
/// # Errors
/// A header without a required column, a row with another column count, or a time that
/// is not `YYYY-MM-DDTHH:MM:SS` (or `Unknown` for the end), naming the line.
pub fn parse_events(text: &str) -> Result<Vec<SlurmEvent>, ParseError> {
    let mut lines = text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(ParseError::Line {
            line: 1,
            expected: "the header line".to_owned(),
            found: "end of input".to_owned(),
        });
    };
    let columns: Vec<&str> = header.split('|').collect();
    let position = |name: &str| columns.iter().position(|column| *column == name);
    let mut at = [0; 5];
    for (slot, name) in at.iter_mut().zip(REQUIRED) {
        *slot = position(name).ok_or_else(|| ParseError::Line {
            line: 1,
            expected: format!("a `{name}` column (`format=NodeName,TimeStart,TimeEnd,State,Reason,User`)"),
            found: format!("`{header}`"),
        })?;
    }
    let [node, start, end, state, reason] = at;
    let user = position("User");
    let mut events = Vec::new();
    for (index, line) in lines {
        let number = index + 1;
        let fields: Vec<&str> = line.split('|').collect();
        // A reason may hold `|`: the fields past the header's count belong to it when
        // it is the last column, else the row is malformed.
        let fields = if fields.len() > columns.len() && reason == columns.len() - 1 {
            let mut joined: Vec<&str> = fields[..reason].to_vec();
            let rest = line.splitn(columns.len(), '|').last().unwrap_or_default();
            joined.push(rest);
            joined
        } else {
            fields
        };
        if fields.len() != columns.len() {
            return Err(ParseError::Line {
                line: number,
                expected: format!("{} `|`-separated columns", columns.len()),
                found: format!("{} columns", fields.len()),
            });
        }
        let time = |text: &str| -> Result<DateTime, ParseError> {
            text.parse().map_err(|_| ParseError::Line {
                line: number,
                expected: "a time `YYYY-MM-DDTHH:MM:SS`".to_owned(),
                found: format!("`{text}`"),
            })
        };
        let end = match fields[end] {
            "Unknown" | "" => None,
            text => Some(time(text)?),
        };
        events.push(SlurmEvent {
            node: fields[node].to_owned(),
            start: time(fields[start])?,
            end,
            state: fields[state].to_owned(),
            reason: fields[reason].to_owned(),
            user: user.map(|at| fields[at].to_owned()).unwrap_or_default(),
        });
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_found_by_name_and_an_open_event_has_no_end() {
        let text = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n\
                    lab|node02|2026-12-05T22:30:41|2026-12-05T22:41:02|DRAIN|toolkit:health rail-links: rail1 down|root\n\
                    lab|node03|2026-12-05T23:00:00|Unknown|DOWN+DRAIN|Not responding|slurm\n";
        let events = parse_events(text).expect("parses");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].node, "node02");
        assert_eq!(events[0].end.map(|end| end.to_string()).as_deref(), Some("2026-12-05T22:41:02"));
        assert_eq!(events[1].end, None);
        assert_eq!(events[1].user, "slurm");
        // `|` inside a reason in the middle cannot be told from a column: refused.
        let ambiguous = text.replace("Not responding", "a|b");
        assert!(parse_events(&ambiguous).expect_err("refused").to_string().contains("line 3"));
        // As the last column, the rest of the line is the reason.
        let last = "NodeName|TimeStart|TimeEnd|State|Reason\nnode01|2026-12-05T22:30:41|Unknown|DRAIN|a|b\n";
        assert_eq!(parse_events(last).expect("parses")[0].reason, "a|b");
    }

    #[test]
    fn reads_the_event_log_of_a_lab() {
        let events = parse_events(&crate::parsers::fixtures::read("sacctmgr_22.05_list_events.txt")).expect("parses");
        assert_eq!(events.len(), 7);
        assert_eq!((events[0].node.as_str(), events[0].reason.as_str()), ("", "Cluster Registered TRES"));
        let rma = events.iter().find(|event| event.reason.starts_with("toolkit:rma")).expect("node03's RMA");
        assert_eq!(
            (rma.node.as_str(), rma.end, rma.state.as_str(), rma.user.as_str()),
            ("node03", None, "DRAIN*", "root(0)")
        );
        assert!(events[1].reason.ends_with("rail1 missing, MTU 0 (planned up, MTU 9000)"));
    }

    #[test]
    fn a_bad_row_names_its_line() {
        let text = "NodeName|TimeStart|TimeEnd|State|Reason\nnode01|yesterday|Unknown|DRAIN|x\n";
        let error = parse_events(text).expect_err("refused").to_string();
        assert!(error.contains("line 2") && error.contains("`yesterday`"), "{error}");
        let missing = parse_events("NodeName|TimeStart|State\n").expect_err("refused").to_string();
        assert!(missing.contains("`TimeEnd`"), "{missing}");
    }
}
