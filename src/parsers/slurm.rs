//! Slurm node state: `sinfo --json`, `sinfo -N -h -o '%N %T %G'` and `scontrol show node`.
//!
//! Stage: parse (leaf). Input: the output of one of those commands (Slurm 22.05 and
//! later). Output: [`SlurmNodes`]: per node its base state, state flags (`DRAIN`,
//! `NOT_RESPONDING`…), reason and who set it, GRES configured and used, CPUs and memory.
//!
//! Three spellings of one state: JSON gives `"state": "idle"` plus `state_flags:
//! ["DRAIN"]`; `scontrol` gives `State=IDLE+DRAIN`; `sinfo %T` gives `drained` and marks
//! flags with suffixes (`down*` = not responding, `idle~` = powered down). All three
//! become an upper-case base state and a flag list, with `drain`/`not_responding` set.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{ParseError, Summary, integer, json_document, quoted};

/// Which command the nodes came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeSource {
    /// `sinfo --json`.
    SinfoJson,
    /// `sinfo -N -h -o '%N %T %G'`.
    SinfoText,
    /// `scontrol show node`.
    Scontrol,
}

/// Nodes as Slurm reports them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlurmNodes {
    /// Which command.
    pub source: NodeSource,
    /// Slurm release (`22.05.8`), from JSON `meta` or `Version=`.
    pub slurm_version: Option<String>,
    /// Nodes in output order.
    pub nodes: Vec<SlurmNode>,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlurmNode {
    /// 1-based line (text forms).
    pub line: Option<usize>,
    /// Node name.
    pub name: String,
    /// Base state, upper case: `IDLE`, `MIXED`, `ALLOCATED`, `DOWN`, `DRAINED`, …
    pub state: String,
    /// Flags, upper case: `DRAIN`, `NOT_RESPONDING`, `POWERED_DOWN`, …
    pub flags: Vec<String>,
    /// Draining or drained.
    pub drain: bool,
    /// slurmctld cannot reach slurmd.
    pub not_responding: bool,
    /// Reason text, without the `[user@time]` suffix.
    pub reason: Option<String>,
    /// Who set the reason.
    pub reason_set_by: Option<String>,
    /// Configured GRES (`gpu:h100:8`); `None` for `(null)`.
    pub gres: Option<String>,
    /// GRES in use (`gpu:h100:4(IDX:0-3)`).
    pub gres_used: Option<String>,
    /// Partitions.
    pub partitions: Vec<String>,
    /// CPUs.
    pub cpus: Option<u32>,
    /// Allocated CPUs.
    pub alloc_cpus: Option<u32>,
    /// Configured memory in MB.
    pub real_memory_mb: Option<u64>,
    /// Allocated memory in MB.
    pub alloc_memory_mb: Option<u64>,
    /// slurmd version on the node.
    pub version: Option<String>,
    /// Every `Key=value` of `scontrol show node`.
    pub fields: BTreeMap<String, String>,
}

impl SlurmNode {
    fn new(name: String, line: Option<usize>) -> Self {
        Self {
            line,
            name,
            state: String::new(),
            flags: Vec::new(),
            drain: false,
            not_responding: false,
            reason: None,
            reason_set_by: None,
            gres: None,
            gres_used: None,
            partitions: Vec::new(),
            cpus: None,
            alloc_cpus: None,
            real_memory_mb: None,
            alloc_memory_mb: None,
            version: None,
            fields: BTreeMap::new(),
        }
    }

    fn set_state(&mut self, state: &str, flags: impl IntoIterator<Item = String>) {
        self.state = state.to_uppercase();
        self.flags.extend(flags.into_iter().map(|flag| flag.to_uppercase()));
        self.drain = self.state.starts_with("DRAIN") || self.flags.iter().any(|flag| flag.starts_with("DRAIN"));
        self.not_responding = self.flags.iter().any(|flag| flag == "NOT_RESPONDING");
    }
}

/// `(null)`, `N/A` and empty mean "none".
fn present(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty() && value != "(null)" && value != "N/A").then(|| value.to_owned())
}

// --- sinfo ----------------------------------------------------------------------------

/// Parses `sinfo --json` (detected by a leading `{`) or `sinfo -N -h -o '%N %T %G'`.
pub fn parse_sinfo(text: &str) -> Result<SlurmNodes, ParseError> {
    if text.trim_start().starts_with('{') { sinfo_json(text) } else { sinfo_text(text) }
}

#[derive(Deserialize)]
struct RawSinfo {
    meta: Option<RawMeta>,
    nodes: Option<Vec<RawNode>>,
}

#[derive(Deserialize)]
struct RawMeta {
    #[serde(rename = "Slurm")]
    slurm: Option<RawSlurm>,
}

#[derive(Deserialize)]
struct RawSlurm {
    release: Option<String>,
}

/// 22.05 prints the state as a string; later releases as an array.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawState {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct RawNode {
    name: String,
    state: RawState,
    #[serde(default)]
    state_flags: Vec<String>,
    reason: Option<String>,
    reason_set_by_user: Option<String>,
    gres: Option<String>,
    gres_used: Option<String>,
    #[serde(default)]
    partitions: Vec<String>,
    cpus: Option<u32>,
    alloc_cpus: Option<u32>,
    real_memory: Option<u64>,
    alloc_memory: Option<u64>,
    slurmd_version: Option<String>,
}

fn sinfo_json(text: &str) -> Result<SlurmNodes, ParseError> {
    let raw: RawSinfo = json_document(text, "`sinfo --json` output")?;
    let nodes = raw
        .nodes
        .ok_or_else(|| ParseError::at(1, "a `nodes` array (the `sinfo --json` shape of Slurm 22.05)", "none"))?;
    let nodes = nodes
        .into_iter()
        .map(|raw| {
            let mut node = SlurmNode::new(raw.name, None);
            let (state, more) = match raw.state {
                RawState::One(state) => (state, Vec::new()),
                RawState::Many(mut states) => {
                    let first = if states.is_empty() { String::new() } else { states.remove(0) };
                    (first, states)
                }
            };
            node.set_state(&state, more.into_iter().chain(raw.state_flags));
            node.reason = raw.reason.as_deref().and_then(present);
            node.reason_set_by = raw.reason_set_by_user.as_deref().and_then(present);
            node.gres = raw.gres.as_deref().and_then(present);
            node.gres_used = raw.gres_used.as_deref().and_then(present);
            node.partitions = raw.partitions;
            node.cpus = raw.cpus;
            node.alloc_cpus = raw.alloc_cpus;
            node.real_memory_mb = raw.real_memory;
            node.alloc_memory_mb = raw.alloc_memory;
            node.version = raw.slurmd_version.as_deref().and_then(present);
            node
        })
        .collect();
    Ok(SlurmNodes {
        source: NodeSource::SinfoJson,
        slurm_version: raw.meta.and_then(|meta| meta.slurm).and_then(|slurm| slurm.release),
        nodes,
    })
}

/// Long state names `sinfo %T` prints (without flag suffixes).
const TEXT_STATES: &[&str] = &[
    "allocated",
    "allocated+",
    "blocked",
    "completing",
    "down",
    "drained",
    "draining",
    "fail",
    "failing",
    "future",
    "idle",
    "inval",
    "maint",
    "mixed",
    "mixed-",
    "perfctrs",
    "planned",
    "power_down",
    "powered_down",
    "powering_down",
    "powering_up",
    "reboot_issued",
    "reboot_requested",
    "reserved",
    "unknown",
    "npc",
    "drain",
    "alloc",
    "mix",
    "comp",
    "resv",
    "unk",
    "drng",
    "futr",
    "plnd",
];

/// Flag suffixes of `sinfo` states (sinfo(1), NODE STATE CODES).
const SUFFIXES: &[(char, &str)] = &[
    ('*', "NOT_RESPONDING"),
    ('~', "POWERED_DOWN"),
    ('#', "POWERING_UP"),
    ('%', "POWERING_DOWN"),
    ('!', "POWER_DOWN"),
    ('$', "MAINTENANCE"),
    ('@', "REBOOT_REQUESTED"),
    ('^', "REBOOT_ISSUED"),
    ('-', "PLANNED"),
];

fn sinfo_text(text: &str) -> Result<SlurmNodes, ParseError> {
    let mut nodes = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let tokens: Vec<&str> = raw.split_whitespace().collect();
        match tokens.as_slice() {
            // Blank, or a header from running without `-h`.
            [] => {}
            [first, ..] if *first == "NODELIST" || *first == "HOSTNAMES" => {}
            [name, state, rest @ ..] => {
                let mut word = *state;
                let mut flags = Vec::new();
                while let Some((suffix, flag)) = SUFFIXES.iter().find(|(suffix, _)| word.ends_with(*suffix)) {
                    flags.push((*flag).to_owned());
                    word = &word[..word.len() - suffix.len_utf8()];
                }
                if !TEXT_STATES.contains(&word) {
                    return Err(ParseError::at(line, "`NODE STATE [GRES]` with a Slurm node state", quoted(raw)));
                }
                let mut node = SlurmNode::new((*name).to_owned(), Some(line));
                node.set_state(word, flags);
                node.gres = present(&rest.join(" "));
                nodes.push(node);
            }
            [_] => return Err(ParseError::at(line, "`NODE STATE [GRES]` (sinfo -N -h -o '%N %T %G')", quoted(raw))),
        }
    }
    if nodes.is_empty() {
        return Err(ParseError::end_of_input(text, "a node line `NODE STATE [GRES]`"));
    }
    Ok(SlurmNodes { source: NodeSource::SinfoText, slurm_version: None, nodes })
}

// --- scontrol ---------------------------------------------------------------------------

/// Keys whose value runs to the end of the line (they contain spaces and `=`).
const TO_END_OF_LINE: &[&str] = &["OS", "Reason", "Comment", "Extra"];

/// Splits `A=1 B=two words C=3` into pairs: a key is a word followed by `=` at the start
/// of the line or after a space.
fn key_values(line: &str) -> Vec<(&str, &str)> {
    let mut starts = Vec::new();
    for (at, _) in line.match_indices('=') {
        let key_start = line[..at].rfind(' ').map_or(0, |space| space + 1);
        let key = &line[key_start..at];
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            if starts.last().is_some_and(|(_, key): &(usize, &str)| TO_END_OF_LINE.contains(key)) {
                break;
            }
            starts.push((key_start, key));
        }
    }
    let mut pairs = Vec::new();
    for (index, (start, key)) in starts.iter().enumerate() {
        let value_start = start + key.len() + 1;
        let value_end = starts.get(index + 1).map_or(line.len(), |(next, _)| *next);
        pairs.push((*key, line[value_start..value_end].trim()));
    }
    pairs
}

/// One `Key=value` of a node block and its line.
type Field = (String, String, usize);

/// Parses `scontrol [-d] show node [NAME]`.
pub fn parse_scontrol_nodes(text: &str) -> Result<SlurmNodes, ParseError> {
    let mut blocks: Vec<(usize, Vec<Field>)> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() {
            continue;
        }
        if content == "No nodes in the system" {
            return Ok(SlurmNodes { source: NodeSource::Scontrol, slurm_version: None, nodes: Vec::new() });
        }
        let pairs = key_values(content);
        if pairs.is_empty() {
            return Err(ParseError::at(line, "`Key=value` fields", quoted(content)));
        }
        if pairs[0].0 == "NodeName" {
            blocks.push((line, Vec::new()));
        }
        let Some((_, fields)) = blocks.last_mut() else {
            return Err(ParseError::at(line, "`NodeName=…` opening a node", quoted(content)));
        };
        fields.extend(pairs.into_iter().map(|(key, value)| (key.to_owned(), value.to_owned(), line)));
    }
    if blocks.is_empty() {
        return Err(ParseError::end_of_input(text, "`NodeName=…` opening a node"));
    }
    let mut slurm_version = None;
    let mut nodes = Vec::new();
    for (line, fields) in blocks {
        let node = scontrol_node(line, &fields)?;
        slurm_version = slurm_version.or_else(|| node.version.clone());
        nodes.push(node);
    }
    Ok(SlurmNodes { source: NodeSource::Scontrol, slurm_version, nodes })
}

fn scontrol_node(line: usize, fields: &[Field]) -> Result<SlurmNode, ParseError> {
    let get =
        |key: &str| fields.iter().find(|(name, _, _)| name == key).map(|(_, value, line)| (value.as_str(), *line));
    let name = get("NodeName").map(|(name, _)| name.to_owned()).unwrap_or_default();
    let (state, _) = get("State").ok_or_else(|| {
        ParseError::at(line, format!("`State=` in node `{name}`"), "no such field (the output is truncated)")
    })?;
    let mut node = SlurmNode::new(name, Some(line));
    let mut parts = state.split('+');
    let base = parts.next().unwrap_or_default();
    let (base, mut flags) = match base.strip_suffix('*') {
        Some(base) => (base, vec!["NOT_RESPONDING".to_owned()]),
        None => (base, Vec::new()),
    };
    flags.extend(parts.map(str::to_owned));
    node.set_state(base, flags);
    let number = |key: &str| -> Result<Option<u64>, ParseError> {
        match get(key) {
            Some((value, line)) => integer(value, line, &format!("`{key}`")).map(Some),
            None => Ok(None),
        }
    };
    node.cpus = number("CPUTot")?.map(|cpus| cpus as u32);
    node.alloc_cpus = number("CPUAlloc")?.map(|cpus| cpus as u32);
    node.real_memory_mb = number("RealMemory")?;
    node.alloc_memory_mb = number("AllocMem")?;
    node.gres = get("Gres").and_then(|(gres, _)| present(gres));
    node.gres_used = get("GresUsed").and_then(|(gres, _)| present(gres));
    node.version = get("Version").and_then(|(version, _)| present(version));
    node.partitions = get("Partitions")
        .map(|(partitions, _)| partitions.split(',').filter(|p| !p.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    if let Some((reason, _)) = get("Reason") {
        // `NHC: check failed [root@2026-11-22T01:00:29]`: the suffix says who and when.
        match reason.rsplit_once(" [") {
            Some((text, by)) if by.ends_with(']') => {
                node.reason = present(text);
                node.reason_set_by = by.trim_end_matches(']').split('@').next().and_then(present);
            }
            _ => node.reason = present(reason),
        }
    }
    node.fields = fields.iter().map(|(key, value, _)| (key.clone(), value.clone())).collect();
    Ok(node)
}

impl Summary for SlurmNodes {
    fn summary(&self) -> String {
        let mut by_state: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for node in &self.nodes {
            let mut label = node.state.clone();
            for flag in &node.flags {
                let _ = write!(label, "+{flag}");
            }
            by_state.entry(label).or_default().push(&node.name);
        }
        let source = match self.source {
            NodeSource::SinfoJson => "sinfo --json",
            NodeSource::SinfoText => "sinfo",
            NodeSource::Scontrol => "scontrol show node",
        };
        let mut out = format!("{} nodes ({source})\n", self.nodes.len());
        for (state, names) in by_state {
            let _ = writeln!(out, "{state}: {}", names.join(","));
        }
        for node in self.nodes.iter().filter(|node| node.reason.is_some()) {
            let _ = writeln!(out, "{}: {}", node.name, node.reason.as_deref().unwrap_or_default());
        }
        out
    }
}

#[cfg(test)]
// Parsed decimals are compared with the literal printed in the fixture: exact by construction.
#[allow(clippy::float_cmp)]
mod tests {
    use super::super::fixtures::{first_lines, read, replace_line};
    use super::*;

    const JSON: &str = "sinfo_22.05.8_json_4nodes.json";
    const TEXT: &str = "sinfo_22.05.8_N_h_o_NTG_4nodes.txt";
    const SCONTROL: &str = "scontrol_22.05.8_show_node_4nodes.txt";

    fn states(nodes: &SlurmNodes) -> Vec<(String, bool, bool)> {
        nodes.nodes.iter().map(|node| (node.state.clone(), node.drain, node.not_responding)).collect()
    }

    fn expected() -> Vec<(String, bool, bool)> {
        vec![
            ("MIXED".to_owned(), false, false),
            ("IDLE".to_owned(), true, false),
            ("DOWN".to_owned(), false, true),
            ("DOWN".to_owned(), false, true),
        ]
    }

    #[test]
    fn sinfo_json_22_05() {
        let nodes = parse_sinfo(&read(JSON)).expect("parses");
        assert_eq!(nodes.source, NodeSource::SinfoJson);
        assert_eq!(nodes.slurm_version.as_deref(), Some("22.05.8"));
        assert_eq!(states(&nodes), expected());
        let gpu01 = &nodes.nodes[0];
        assert_eq!(gpu01.gres.as_deref(), Some("gpu:h100:8"));
        assert_eq!(gpu01.gres_used.as_deref(), Some("gpu:h100:4(IDX:0-3)"));
        assert_eq!((gpu01.cpus, gpu01.alloc_cpus, gpu01.alloc_memory_mb), (Some(2), Some(1), Some(1000)));
        assert_eq!(gpu01.partitions, ["batch"]);
        let gpu02 = &nodes.nodes[1];
        assert_eq!(gpu02.flags, ["DRAIN"]);
        assert_eq!(gpu02.reason.as_deref(), Some("NHC: check_gpu_xid: GPU Xid errors detected"));
        assert_eq!(gpu02.reason_set_by.as_deref(), Some("root"));
        assert_eq!(nodes.nodes[2].reason_set_by.as_deref(), Some("slurm"));
    }

    #[test]
    fn sinfo_text_states_with_suffixes() {
        let nodes = parse_sinfo(&read(TEXT)).expect("parses");
        assert_eq!(nodes.source, NodeSource::SinfoText);
        let names: Vec<&str> = nodes.nodes.iter().map(|node| node.name.as_str()).collect();
        assert_eq!(names, ["gpu01", "gpu02", "gpu03", "gpu04"]);
        let text_states: Vec<(String, bool, bool)> = states(&nodes);
        assert_eq!(text_states[0], ("MIXED".to_owned(), false, false));
        assert_eq!(text_states[1], ("DRAINED".to_owned(), true, false));
        assert_eq!(text_states[2], ("DOWN".to_owned(), false, true));
        assert_eq!(nodes.nodes[3].flags, ["NOT_RESPONDING"]);
        assert!(nodes.nodes.iter().all(|node| node.gres.as_deref() == Some("gpu:h100:8")));
    }

    #[test]
    fn sinfo_text_errors() {
        let text = read(TEXT);
        assert_eq!(
            parse_sinfo(&replace_line(&text, 3, "gpu03 dowm* gpu:h100:8")).expect_err("is refused").to_string(),
            "could not parse line 3: expected `NODE STATE [GRES]` with a Slurm node state, found `gpu03 dowm* gpu:h100:8`"
        );
        assert_eq!(parse_sinfo(&replace_line(&text, 2, "gpu02")).expect_err("is refused").line(), Some(2));
        let with_header = format!("NODELIST STATE GRES\n{text}");
        assert_eq!(parse_sinfo(&with_header).expect("parses").nodes.len(), 4);
        let json = read(JSON);
        assert_eq!(parse_sinfo(&first_lines(&json, 60)).expect_err("is refused").line(), Some(61));
    }

    #[test]
    fn scontrol_show_node_blocks() {
        let nodes = parse_scontrol_nodes(&read(SCONTROL)).expect("parses");
        assert_eq!(nodes.source, NodeSource::Scontrol);
        assert_eq!(nodes.slurm_version.as_deref(), Some("22.05.8"));
        assert_eq!(states(&nodes), expected());
        let gpu01 = &nodes.nodes[0];
        assert_eq!(gpu01.fields["OS"], "Linux 6.18.44-fc-v769 #1 SMP PREEMPT_DYNAMIC @0");
        assert_eq!(gpu01.fields["CfgTRES"], "cpu=2,mem=20000M,billing=2");
        assert_eq!(gpu01.fields["AvailableFeatures"], "(null)");
        assert_eq!((gpu01.cpus, gpu01.real_memory_mb), (Some(2), Some(20000)));
        assert_eq!(gpu01.gres.as_deref(), Some("gpu:h100:8"));
        let gpu02 = &nodes.nodes[1];
        assert_eq!(gpu02.flags, ["DRAIN"]);
        assert_eq!(gpu02.reason.as_deref(), Some("NHC: check_gpu_xid: GPU Xid errors detected"));
        assert_eq!(gpu02.reason_set_by.as_deref(), Some("root"));
        assert_eq!(nodes.nodes[3].reason.as_deref(), Some("Not responding"));
        assert_eq!(nodes.nodes[3].line, Some(55));
    }

    #[test]
    fn scontrol_detail_has_gres_used() {
        let nodes = parse_scontrol_nodes(&read("scontrol_22.05.8_d_show_node_gpu01.txt")).expect("parses");
        assert_eq!(nodes.nodes[0].gres_used.as_deref(), Some("gpu:h100:4(IDX:0-3)"));
        assert_eq!(nodes.nodes[0].fields["GresDrain"], "N/A");
    }

    #[test]
    fn scontrol_truncated_and_garbled() {
        let text = read(SCONTROL);
        assert_eq!(
            parse_scontrol_nodes(&first_lines(&text, 40)).expect_err("is refused").to_string(),
            "could not parse line 37: expected `State=` in node `gpu03`, found no such field (the output is truncated)"
        );
        let garbled = replace_line(&text, 2, "   CPUAlloc=one CPUEfctv=2 CPUTot=2 CPULoad=3.06");
        assert_eq!(
            parse_scontrol_nodes(&garbled).expect_err("is refused").to_string(),
            "could not parse line 2: expected an integer for `CPUAlloc`, found `one`"
        );
        assert_eq!(parse_scontrol_nodes("garbage here\n").expect_err("is refused").line(), Some(1));
        assert_eq!(parse_scontrol_nodes("").expect_err("is refused").line(), Some(1));
    }
}
