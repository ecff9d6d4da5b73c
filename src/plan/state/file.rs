//! The state file on disk: version 2, and the reading of version 1.
//!
//! Stage: plan (data). Input: a [`State`], or the text of a state file of either
//! version. Output: the bytes of a version-2 file, or the [`State`] a file holds.
//!
//! Version 2 is JSON Lines. The first line holds what a plan compares: the records
//! by id, each `[fingerprint, order]` — the fingerprint an index into the list of
//! distinct fingerprints written before them (the nodes of a group share their
//! files, packages and services) — with a third element only for what the id does
//! not say already (`{"kind", "undo", "secret"}`). Every further line is one file
//! text kept for offline diffs, `["<sha256>","<text>"]`, parsed only when a diff asks
//! for one ([`Contents`]). Version 1 was one pretty-printed JSON document with each
//! record's kind, fingerprint, content hash and undo spelled out and the texts
//! inside: it is read as it is, and the next deploy that changes a record writes
//! version 2.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{BufRead as _, Read as _};
use std::path::Path;

use foldhash::fast::RandomState;
use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeSeq as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::contents::Contents;
use super::provisioning::NodeProvisioning;
use super::{Recorded, Records, RolloutState, STATE_FORMAT_VERSION, State, StateError};
use crate::plan::undo::Undo;
use crate::text::{Interner, Text};

/// How every version-2 file starts: tells it from version 1 without parsing.
const V2_START: &str = "{\"format_version\":2,";

/// Writes `state` to `out` as a version-2 file. Streamed: the texts are most of a
/// large state (every host's files), and a copy of them as one JSON buffer was the
/// largest allocation of a deploy.
///
/// # Errors
/// When writing fails (serialization does not for these types).
pub(super) fn write(state: &State, out: &mut impl std::io::Write) -> std::io::Result<()> {
    // By id, so equal states make equal files.
    let mut records: Vec<(&String, &Recorded)> = state.resources.iter().collect();
    records.sort_unstable_by_key(|&(id, _)| id);
    let mut fingerprints: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, u32, RandomState> = HashMap::default();
    for (_, record) in &records {
        index.entry(record.fingerprint.as_str()).or_insert_with(|| {
            fingerprints.push(record.fingerprint.as_str());
            u32::try_from(fingerprints.len() - 1).unwrap_or(u32::MAX)
        });
    }
    let head = HeadOut {
        format_version: STATE_FORMAT_VERSION,
        cluster: &state.cluster,
        serial: state.serial,
        rollout: state.rollout.as_ref(),
        provisioning: &state.provisioning,
        fingerprints,
        resources: RecordsOut { records: &records, index: &index },
    };
    serde_json::to_writer(&mut *out, &head)?;
    out.write_all(b"\n")?;
    for text in state.contents.iter() {
        // JSON escapes line breaks: one text, one line.
        serde_json::to_writer(&mut *out, &text)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The state in `file`, the open state file at `path`. A version-2 file written by
/// this toolkit has its records on the first line: only that line is read, and the
/// texts after it stay in the file until a diff asks for one. Anything else is read
/// whole.
///
/// # Errors
/// [`StateError`] when the file cannot be read or is not a state file of a version
/// this toolkit reads.
pub(super) fn read(path: &Path, file: std::fs::File) -> Result<State, StateError> {
    let io = |source| StateError::Io { path: path.to_owned(), source };
    let parse = |source| StateError::Parse { path: path.to_owned(), source };
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut head = String::new();
    reader.read_line(&mut head).map_err(io)?;
    if head.starts_with(V2_START) {
        let records: HeadIn = serde_json::from_str(&head).map_err(parse)?;
        let contents = Contents::unread_in(reader.into_inner(), head.len() as u64, path, 2);
        return from_head(path, records, contents);
    }
    // Not written by this toolkit as version 2: version 1, or something else.
    let mut text = head;
    reader.read_to_string(&mut text).map_err(io)?;
    let mut first = serde_json::Deserializer::from_str(&text).into_iter::<Version>();
    let version = match first.next() {
        Some(Ok(version)) => version.format_version,
        Some(Err(source)) => return Err(parse(source)),
        None => return Err(StateError::Invalid { path: path.to_owned(), reason: "the file is empty".to_owned() }),
    };
    match version {
        1 => Ok(migrate(serde_json::from_str(&text).map_err(parse)?)),
        2 => {
            let mut stream = serde_json::Deserializer::from_str(&text).into_iter::<HeadIn>();
            let head = stream.next().transpose().map_err(parse)?;
            let offset = stream.byte_offset();
            let first_line = text[..offset].lines().count() + 1;
            let head =
                head.ok_or_else(|| StateError::Invalid { path: path.to_owned(), reason: "no records".into() })?;
            from_head(path, head, Contents::unread(text[offset..].to_owned(), path, first_line))
        }
        found => Err(StateError::Version { path: path.to_owned(), found }),
    }
}

#[derive(Deserialize)]
struct Version {
    format_version: u32,
}

#[derive(Serialize)]
struct HeadOut<'a> {
    format_version: u32,
    cluster: &'a str,
    serial: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    rollout: Option<&'a RolloutState>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    provisioning: &'a BTreeMap<String, NodeProvisioning>,
    fingerprints: Vec<&'a str>,
    resources: RecordsOut<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeadIn {
    format_version: u32,
    cluster: String,
    serial: u64,
    #[serde(default)]
    rollout: Option<RolloutState>,
    #[serde(default)]
    provisioning: BTreeMap<String, NodeProvisioning>,
    fingerprints: Vec<String>,
    /// In the file's order: no map is built here, only the state's.
    #[serde(deserialize_with = "records_in")]
    resources: Vec<(String, RecordIn)>,
}

/// The records object as its entries, in order.
fn records_in<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<(String, RecordIn)>, D::Error> {
    struct Entries;
    impl<'de> Visitor<'de> for Entries {
        type Value = Vec<(String, RecordIn)>;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("records by id")
        }

        fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
            while let Some(entry) = map.next_entry()? {
                entries.push(entry);
            }
            Ok(entries)
        }
    }
    deserializer.deserialize_map(Entries)
}

/// What a record holds that its id does not say; written for few.
#[derive(Serialize)]
struct Extra<'a> {
    /// Only when it is not the id's second part.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
    /// Only when it is not the one the id names ([`Recorded::undo`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    undo: Option<&'a Undo>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    secret: bool,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtraIn {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    undo: Option<Undo>,
    #[serde(default)]
    secret: bool,
}

struct RecordsOut<'a> {
    /// Sorted by id.
    records: &'a [(&'a String, &'a Recorded)],
    index: &'a HashMap<&'a str, u32, RandomState>,
}

impl Serialize for RecordsOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.records.iter().map(|&(id, record)| {
            let fingerprint = self.index.get(record.fingerprint.as_str()).copied().unwrap_or(u32::MAX);
            (id, RecordOut { id, record, fingerprint })
        }))
    }
}

struct RecordOut<'a> {
    id: &'a str,
    record: &'a Recorded,
    fingerprint: u32,
}

impl Serialize for RecordOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let record = self.record;
        let extra = Extra {
            kind: (kind_in_id(self.id) != Some(record.kind.as_str())).then_some(record.kind.as_str()),
            undo: record.undo.as_ref(),
            secret: record.secret,
        };
        let plain = extra.kind.is_none() && extra.undo.is_none() && !extra.secret;
        let mut seq = serializer.serialize_seq(Some(if plain { 2 } else { 3 }))?;
        seq.serialize_element(&self.fingerprint)?;
        seq.serialize_element(&record.order)?;
        if !plain {
            seq.serialize_element(&extra)?;
        }
        seq.end()
    }
}

struct RecordIn {
    fingerprint: u32,
    order: u64,
    kind: Option<String>,
    undo: Option<Undo>,
    secret: bool,
}

impl<'de> Deserialize<'de> for RecordIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RecordVisitor;
        impl<'de> Visitor<'de> for RecordVisitor {
            type Value = RecordIn;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("a record `[fingerprint, order]` or `[fingerprint, order, {…}]`")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RecordIn, A::Error> {
                let fingerprint = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let order = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                let extra: ExtraIn = seq.next_element()?.unwrap_or_default();
                if seq.next_element::<de::IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(4, &self));
                }
                Ok(RecordIn { fingerprint, order, kind: extra.kind, undo: extra.undo, secret: extra.secret })
            }
        }
        deserializer.deserialize_seq(RecordVisitor)
    }
}

/// `node01:file:/etc/hosts` → `file`.
fn kind_in_id(id: &str) -> Option<&str> {
    id.contains(':').then(|| crate::resource::id_parts(id).1)
}

fn from_head(path: &Path, head: HeadIn, contents: Contents) -> Result<State, StateError> {
    if head.format_version != STATE_FORMAT_VERSION {
        return Err(StateError::Version { path: path.to_owned(), found: head.format_version });
    }
    let fingerprints: Vec<Text> = head.fingerprints.into_iter().map(Text::from).collect();
    let mut kinds = Interner::default();
    let mut last_kind: Option<Text> = None;
    let mut resources = Records::with_capacity_and_hasher(head.resources.len(), RandomState::default());
    for (id, record) in head.resources {
        let Some(fingerprint) = usize::try_from(record.fingerprint).ok().and_then(|at| fingerprints.get(at)) else {
            return Err(StateError::Invalid {
                path: path.to_owned(),
                reason: format!(
                    "the record of `{id}` names fingerprint {} of {}",
                    record.fingerprint,
                    fingerprints.len()
                ),
            });
        };
        let kind = match record.kind.as_deref().or_else(|| kind_in_id(&id)) {
            // Sorted by id: a host's records of one kind follow each other.
            Some(kind) => match &last_kind {
                Some(last) if last.as_str() == kind => last.clone(),
                _ => last_kind.insert(kinds.get(kind)).clone(),
            },
            None => {
                return Err(StateError::Invalid {
                    path: path.to_owned(),
                    reason: format!("the record of `{id}` has no kind and its id names none"),
                });
            }
        };
        let recorded = Recorded {
            kind,
            fingerprint: fingerprint.clone(),
            secret: record.secret,
            undo: record.undo,
            order: record.order,
        };
        resources.insert(id, recorded);
    }
    Ok(State {
        format_version: STATE_FORMAT_VERSION,
        cluster: head.cluster,
        serial: head.serial,
        resources,
        contents,
        rollout: head.rollout,
        provisioning: head.provisioning,
    })
}

/// A version-1 file, as main wrote it until version 2.
#[derive(Deserialize)]
struct V1 {
    cluster: String,
    serial: u64,
    resources: BTreeMap<String, V1Record>,
    contents: BTreeMap<String, String>,
    #[serde(default)]
    rollout: Option<RolloutState>,
}

#[derive(Deserialize)]
struct V1Record {
    kind: String,
    fingerprint: String,
    // `content_sha256` was the hash the fingerprint starts with: derived now.
    #[serde(default)]
    secret: bool,
    #[serde(default)]
    undo: Option<Undo>,
    #[serde(default)]
    order: u64,
}

fn migrate(old: V1) -> State {
    let mut texts = Interner::default();
    let resources = old
        .resources
        .into_iter()
        .map(|(id, record)| {
            // An undo the id names is not kept: what a record without one means.
            let undo = record.undo.filter(|undo| !undo.is_derived(&id, &record.kind));
            let recorded = Recorded {
                kind: texts.get(&record.kind),
                fingerprint: texts.take(record.fingerprint),
                secret: record.secret,
                undo,
                order: record.order,
            };
            (id, recorded)
        })
        .collect();
    State {
        format_version: STATE_FORMAT_VERSION,
        cluster: old.cluster,
        serial: old.serial,
        resources,
        contents: old.contents.into_iter().collect(),
        rollout: old.rollout,
        provisioning: BTreeMap::new(),
    }
}
