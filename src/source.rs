//! Source files and the map from a key path (`node_groups[1].gpu.model`) to the
//! `file:line:col` where that key's value starts.
//!
//! Stage: load. Input: the text of a YAML file. Output: [`SourceFile`] with its
//! [`SourceMap`]. Serde gives no locations for values it accepted, so every later
//! diagnostic names a key path and this map turns it into a position.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// A position in a source file, both 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Position {
    /// Line number, from 1.
    pub line: usize,
    /// Column number in characters, from 1.
    pub column: usize,
}

/// One loaded file: its path as the user named it, its text and its key map.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The path as given on the command line (kept relative so messages stay short).
    pub path: PathBuf,
    /// The whole text.
    pub text: String,
    /// Where every key path's value starts.
    pub map: SourceMap,
}

impl SourceFile {
    /// Wraps a text and indexes it; a text that is not valid YAML gets an empty map
    /// (the YAML parser reports that error with its own position).
    #[must_use]
    pub fn new(path: impl Into<PathBuf>, text: String) -> Self {
        let map = SourceMap::index(&text);
        Self { path: path.into(), text, map }
    }

    /// The text of line `line` (1-based), without its newline.
    #[must_use]
    pub fn line_text(&self, line: usize) -> Option<&str> {
        self.text.lines().nth(line.checked_sub(1)?)
    }

    /// The position of `key_path`, or of its closest ancestor that exists.
    #[must_use]
    pub fn position(&self, key_path: &str) -> Option<Position> {
        self.map.locate(key_path)
    }

    /// The file's path for messages.
    #[must_use]
    pub fn display_path(&self) -> &Path {
        &self.path
    }
}

/// Key path → position of the value (and of the key, for mapping entries).
#[derive(Debug, Clone, Default)]
pub struct SourceMap {
    values: HashMap<String, Position>,
    keys: HashMap<String, Position>,
}

impl SourceMap {
    /// Indexes `text`; stops quietly at the first YAML error.
    #[must_use]
    pub fn index(text: &str) -> Self {
        let mut builder = Builder::default();
        let mut parser = Parser::new_from_str(text);
        // Events are pulled one at a time: `Parser::load` recurses once per nesting
        // level and overflows the stack on `- - - …` input. A parse error, the end of
        // the first document, or nesting past MAX_DEPTH (which serde_norway rejects
        // anyway) ends the index: the partial map covers everything before it.
        while let Ok((event, mark)) = parser.next_token() {
            if matches!(event, Event::StreamEnd | Event::DocumentEnd) {
                break;
            }
            builder.on_event(event, mark);
            if builder.stack.len() > MAX_DEPTH {
                break;
            }
        }
        Self { values: builder.values, keys: builder.keys }
    }

    /// The position of `key_path`; when the path does not exist (a missing key),
    /// the position of its nearest existing ancestor.
    #[must_use]
    pub fn locate(&self, key_path: &str) -> Option<Position> {
        let mut path = key_path;
        loop {
            if let Some(position) = self.values.get(path) {
                // A block collection starts on the lines below its key (yaml-rust2 marks
                // it after the first inner key); the key's line is where a reader looks.
                return match self.keys.get(path) {
                    Some(key) if key.line < position.line => Some(*key),
                    _ => Some(*position),
                };
            }
            if path.is_empty() {
                return None;
            }
            path = parent(path);
        }
    }

    /// The position of the key of the mapping entry at exactly `key_path`.
    #[must_use]
    pub fn locate_key(&self, key_path: &str) -> Option<Position> {
        self.keys.get(key_path).copied()
    }

    /// Whether the exact path exists in the file.
    #[must_use]
    pub fn contains(&self, key_path: &str) -> bool {
        self.values.contains_key(key_path)
    }
}

/// `a.b[2].c` → `a.b[2]` → `a.b` → `a` → ``.
fn parent(path: &str) -> &str {
    match path.rfind(['.', '[']) {
        Some(cut) => &path[..cut],
        None => "",
    }
}

/// Joins a key path and a mapping key.
#[must_use]
pub fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_owned() } else { format!("{parent}.{key}") }
}

/// Joins a key path and a sequence index.
#[must_use]
pub fn join_index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// Deepest nesting indexed; serde_norway refuses documents deeper than 128 levels.
const MAX_DEPTH: usize = 256;
/// Longest key kept in a key path.
const MAX_KEY_CHARS: usize = 256;

enum Frame {
    Mapping { path: String, pending_key: Option<String> },
    Sequence { path: String, next: usize },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    values: HashMap<String, Position>,
    keys: HashMap<String, Position>,
}

impl Builder {
    /// The path of the node that starts now, consuming the slot it fills.
    /// Returns `None` when the node is a mapping key.
    fn next_node_path(&mut self, key_text: Option<&str>, position: Position) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Sequence { path, next }) => {
                let item = join_index(path, *next);
                *next += 1;
                Some(item)
            }
            Some(Frame::Mapping { path, pending_key }) => {
                if let Some(key) = pending_key.take() {
                    Some(join_key(path, &key))
                } else {
                    // This node is a key. Complex (non-scalar) keys get a placeholder.
                    // Paths repeat their ancestors' keys, so a long key is cut to keep
                    // the map linear in the file's size.
                    let key: String = key_text.unwrap_or("?").chars().take(MAX_KEY_CHARS).collect();
                    self.keys.entry(join_key(path, &key)).or_insert(position);
                    *pending_key = Some(key);
                    None
                }
            }
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        let position = Position {
            line: mark.line(),
            column: mark.col() + 1, // yaml-rust2 columns are 0-based
        };
        match event {
            Event::Scalar(text, ..) => {
                if let Some(path) = self.next_node_path(Some(&text), position) {
                    self.values.entry(path).or_insert(position);
                }
            }
            Event::Alias(_) => {
                if let Some(path) = self.next_node_path(Some("*alias"), position) {
                    self.values.entry(path).or_insert(position);
                }
            }
            Event::MappingStart(..) => {
                let path = self.next_node_path(None, position).unwrap_or_default();
                self.values.entry(path.clone()).or_insert(position);
                self.stack.push(Frame::Mapping { path, pending_key: None });
            }
            Event::SequenceStart(..) => {
                let path = self.next_node_path(None, position).unwrap_or_default();
                self.values.entry(path.clone()).or_insert(position);
                self.stack.push(Frame::Sequence { path, next: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "cluster:\n  name: lab\nnode_groups:\n  - name: head\n    count: 1\n  - name: gpu\n    gpu: {model: h100, count: 8}\n";

    #[test]
    fn maps_nested_keys_and_sequence_items() {
        let map = SourceMap::index(TEXT);
        assert_eq!(map.locate("cluster.name"), Some(Position { line: 2, column: 9 }));
        assert_eq!(map.locate("node_groups[1].name"), Some(Position { line: 6, column: 11 }));
        assert_eq!(map.locate("node_groups[1].gpu.model"), Some(Position { line: 7, column: 18 }));
    }

    #[test]
    fn a_block_collection_is_located_at_its_key() {
        let map = SourceMap::index("hosts:\n  a: { address: x }\nlist:\n- p\n");
        assert_eq!(map.locate("hosts"), Some(Position { line: 1, column: 1 }));
        assert_eq!(map.locate("hosts.a.address"), Some(Position { line: 2, column: 17 }));
        assert_eq!(map.locate("list"), Some(Position { line: 3, column: 1 }));
    }

    #[test]
    fn deep_nesting_neither_recurses_nor_grows_quadratically() {
        let text = format!("{}x\n", "- ".repeat(200_000));
        let map = SourceMap::index(&text);
        assert!(map.contains("[0]"));
        assert!(map.values.len() <= MAX_DEPTH + 2);
    }

    #[test]
    fn a_missing_key_falls_back_to_its_parent() {
        let map = SourceMap::index(TEXT);
        assert_eq!(map.locate("node_groups[0].cpus"), map.locate("node_groups[0]"));
        assert!(!map.contains("node_groups[0].cpus"));
    }
}
