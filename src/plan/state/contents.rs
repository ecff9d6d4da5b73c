//! The file texts a state keeps for offline diffs, read from the state file only
//! when something asks for them.
//!
//! Stage: plan (data). Input: the lines of a state file after its records, one text
//! each (`["<sha256>","<text>"]`), or texts recorded by a deploy. Output: texts by
//! hash. A deploy with nothing to change compares fingerprints only, so the texts —
//! most of a large cluster's state file — stay in the file, unread: the open file
//! is kept, not its bytes (at 64 hosts of the fan-out bench they were half of a
//! rerun's peak memory).

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::resource::Content;

/// One kept text: read from the state file, or the content a deploy applied, shared
/// with its resource rather than copied (a deploy's files are most of its memory).
#[derive(Debug, Clone)]
enum Kept {
    Read(String),
    Applied(Content),
}

impl Kept {
    fn as_str(&self) -> &str {
        match self {
            Self::Read(text) => text,
            Self::Applied(content) => content.text(),
        }
    }
}

impl PartialEq for Kept {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

/// Non-secret file texts by SHA-256, parsed from the state file on first use.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    /// The parsed texts; unset until first asked for when [`Self::unread`] holds lines.
    texts: OnceLock<BTreeMap<String, Kept>>,
    /// State file lines not parsed yet.
    unread: Option<Unread>,
}

#[derive(Debug, Clone)]
struct Unread {
    lines: Lines,
    /// The state file, for the log.
    path: PathBuf,
    /// Line number of the first line in the file.
    first_line: usize,
}

/// Where the unread lines are.
#[derive(Debug, Clone)]
enum Lines {
    /// In memory (a version-1 file, read whole to migrate it).
    Text(String),
    /// In the open state file from this byte on. The descriptor, not the path: a
    /// deploy replaces the file by renaming a new one over it, and this one stays
    /// readable as it was loaded.
    File(Arc<std::fs::File>, u64),
}

impl Contents {
    /// Texts kept as `lines` of the state file `path` (one `["<sha256>","<text>"]`
    /// per line, the first being line `first_line`), parsed on first use.
    #[must_use]
    pub fn unread(lines: String, path: &Path, first_line: usize) -> Self {
        Self::unread_from(Lines::Text(lines), path, first_line)
    }

    /// Texts kept in the open state file `file` (at `path`) from byte `offset` on,
    /// where line `first_line` starts; read and parsed on first use.
    #[must_use]
    pub fn unread_in(file: std::fs::File, offset: u64, path: &Path, first_line: usize) -> Self {
        Self::unread_from(Lines::File(Arc::new(file), offset), path, first_line)
    }

    fn unread_from(lines: Lines, path: &Path, first_line: usize) -> Self {
        Self { texts: OnceLock::new(), unread: Some(Unread { lines, path: path.to_owned(), first_line }) }
    }

    fn texts(&self) -> &BTreeMap<String, Kept> {
        self.texts.get_or_init(|| self.unread.as_ref().map(parse).unwrap_or_default())
    }

    fn texts_mut(&mut self) -> &mut BTreeMap<String, Kept> {
        self.texts();
        self.unread = None;
        self.texts.get_mut().expect("initialized just above")
    }

    /// Whether the texts are still the unparsed lines of the file.
    #[must_use]
    pub fn is_unread(&self) -> bool {
        self.texts.get().is_none() && self.unread.is_some()
    }

    /// The text with this hash.
    #[must_use]
    pub fn get(&self, sha256: &str) -> Option<&str> {
        self.texts().get(sha256).map(Kept::as_str)
    }

    /// Whether a text with this hash is kept.
    #[must_use]
    pub fn contains(&self, sha256: &str) -> bool {
        self.texts().contains_key(sha256)
    }

    /// Keeps `text` under `sha256`.
    pub fn insert(&mut self, sha256: String, text: String) {
        self.texts_mut().insert(sha256, Kept::Read(text));
    }

    /// Keeps `content`'s text under its hash, shared with `content` (no copy).
    pub fn share(&mut self, content: &Content) {
        self.texts_mut().insert(content.sha256().to_owned(), Kept::Applied(content.clone()));
    }

    /// Keeps only the texts whose hash `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.texts_mut().retain(|hash, _| keep(hash));
    }

    /// How many texts are kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.texts().len()
    }

    /// Whether no text is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.texts().is_empty()
    }

    /// The texts with their hashes, by hash.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.texts().iter().map(|(hash, text)| (hash.as_str(), text.as_str()))
    }
}

impl Extend<(String, String)> for Contents {
    fn extend<I: IntoIterator<Item = (String, String)>>(&mut self, texts: I) {
        self.texts_mut().extend(texts.into_iter().map(|(hash, text)| (hash, Kept::Read(text))));
    }
}

impl FromIterator<(String, String)> for Contents {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(texts: I) -> Self {
        let texts = texts.into_iter().map(|(hash, text)| (hash, Kept::Read(text))).collect::<BTreeMap<_, _>>();
        Self { texts: OnceLock::from(texts), unread: None }
    }
}

impl PartialEq for Contents {
    fn eq(&self, other: &Self) -> bool {
        self.texts() == other.texts()
    }
}

impl Eq for Contents {}

/// The texts of `unread`'s lines, a line at a time. Texts only make diffs: a line
/// that cannot be read costs its diff, said once in the log, not the deploy.
fn parse(unread: &Unread) -> BTreeMap<String, Kept> {
    let mut texts = BTreeMap::new();
    let mut parse_line = |number: usize, line: &str| {
        if line.is_empty() {
            return;
        }
        match serde_json::from_str::<(String, String)>(line) {
            Ok((hash, text)) => {
                texts.insert(hash, Kept::Read(text));
            }
            Err(error) => tracing::warn!(
                "state file `{}` line {number}: a kept file text cannot be read ({error}); its diff is not shown",
                unread.path.display()
            ),
        }
    };
    match &unread.lines {
        Lines::Text(lines) => {
            for (number, line) in (unread.first_line..).zip(lines.lines()) {
                parse_line(number, line);
            }
        }
        Lines::File(file, offset) => {
            let reader = std::io::BufReader::with_capacity(1 << 16, At { file, offset: *offset });
            for (number, line) in (unread.first_line..).zip(reader.lines()) {
                match line {
                    Ok(line) => parse_line(number, &line),
                    Err(error) => {
                        tracing::warn!(
                            "state file `{}` line {number}: cannot read the kept file texts ({error}); their diffs are not shown",
                            unread.path.display()
                        );
                        break;
                    }
                }
            }
        }
    }
    texts
}

/// Reads `file` from `offset` on without moving its cursor: clones of one
/// [`Contents`] share the descriptor.
struct At<'a> {
    file: &'a std::fs::File,
    offset: u64,
}

impl std::io::Read for At<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let read = self.file.read_at(buffer, self.offset)?;
        self.offset += read as u64;
        Ok(read)
    }
}
