//! Reads one YAML file into schema types, turning every failure into a located
//! diagnostic: unreadable, not UTF-8, empty, too large, malformed, alias bombs,
//! too deep, wrong types, unknown and missing keys.
//!
//! Stage: load. Input: a path. Output: the typed value and its [`SourceFile`], or
//! diagnostics. serde_norway bounds alias expansion and nesting depth, so hostile
//! input ends in an error, never in a hang or a crash.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_norway::Value;

use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::source::{Position, SourceFile};

/// Largest file accepted. Blueprints describe node groups, not nodes, so real ones
/// are a few KiB; the bound keeps a runaway input from exhausting memory.
pub const MAX_FILE_BYTES: usize = 8 * 1024 * 1024;

/// Reads `path` as UTF-8 text, with diagnostics for every way that fails.
///
/// # Errors
/// One diagnostic naming the file when it cannot be read, is too large, is not
/// UTF-8 or is empty.
pub fn read_text(path: &Path) -> Result<String, Diagnostics> {
    let fail = |diagnostic: Diagnostic| Err(Diagnostics(vec![diagnostic.in_file(path)]));
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) => {
            return fail(
                Diagnostic::error("unreadable-file", format!("cannot read `{}`: {error}", path.display()))
                    .help("check the path and its permissions"),
            );
        }
    };
    if bytes.len() > MAX_FILE_BYTES {
        return fail(
            Diagnostic::error(
                "file-too-large",
                format!("file is {} bytes, the limit is {MAX_FILE_BYTES}", bytes.len()),
            )
            .help("a blueprint declares node groups with a count, not one entry per node"),
        );
    }
    match String::from_utf8(bytes) {
        Ok(text) if text.trim().is_empty() => {
            fail(Diagnostic::error("empty-file", "file is empty").help("start from an example in `blueprints/`"))
        }
        Ok(text) => Ok(text),
        Err(error) => {
            let valid = &error.as_bytes()[..error.utf8_error().valid_up_to()];
            let valid = String::from_utf8_lossy(valid);
            let line = valid.matches('\n').count() + 1;
            let column = valid.rsplit('\n').next().map_or(0, |last| last.chars().count()) + 1;
            let mut diagnostic = Diagnostic::error(
                "not-utf8",
                format!("file is not UTF-8 (invalid byte at line {line}, column {column})"),
            )
            .help("save the file as UTF-8")
            .in_file(path);
            diagnostic.position = Some(Position { line, column });
            Err(Diagnostics(vec![diagnostic]))
        }
    }
}

/// Parses `text` into a YAML value tree, without interpreting it.
///
/// # Errors
/// A `yaml-syntax` diagnostic at the parser's position (also used for alias bombs,
/// nesting beyond serde_norway's recursion limit and duplicate keys).
pub fn parse_value(source: &SourceFile) -> Result<Value, Diagnostics> {
    if let Some(position) = excessive_flow_nesting(&source.text) {
        let mut diagnostic = Diagnostic::error(
            "yaml-syntax",
            format!("invalid YAML: `[`/`{{` nested deeper than {MAX_FLOW_DEPTH} levels"),
        )
        .help(syntax_help("recursion limit"))
        .in_file(&source.path);
        // No snippet: such a line can be megabytes of brackets.
        diagnostic.position = Some(position);
        return Err(Diagnostics(vec![diagnostic]));
    }
    serde_norway::from_str::<Value>(&source.text).map_err(|error| {
        let message = error.to_string();
        // serde_norway appends " at line L column C"; the position is shown separately.
        let message = message.split(" at line ").next().unwrap_or(&message).to_owned();
        let mut diagnostic = Diagnostic::error("yaml-syntax", format!("invalid YAML: {message}"))
            .help(syntax_help(&message))
            .in_file(&source.path);
        if let Some(location) = error.location() {
            diagnostic = diagnostic.at_position(source, Position { line: location.line(), column: location.column() });
        }
        Diagnostics(vec![diagnostic])
    })
}

/// Deepest `[`/`{` nesting accepted; serde_norway's own limit is 128 levels.
pub const MAX_FLOW_DEPTH: usize = 128;

/// Where flow collections first nest deeper than [`MAX_FLOW_DEPTH`], if they do.
///
/// serde_norway would reject such a file too, but libyaml's scanner is quadratic in
/// flow depth: a megabyte of `[` takes minutes to reach the limit. This linear scan
/// runs first. It does not parse quotes or comments, so only a document with more
/// than 128 unclosed brackets inside strings is refused wrongly.
fn excessive_flow_nesting(text: &str) -> Option<Position> {
    let mut depth: usize = 0;
    let (mut line, mut column) = (1, 0);
    for c in text.chars() {
        column += 1;
        match c {
            '\n' => {
                line += 1;
                column = 0;
            }
            '[' | '{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Some(Position { line, column });
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

fn syntax_help(message: &str) -> &'static str {
    if message.contains("recursion limit") {
        "the document nests too deeply; blueprints need only a few levels"
    } else if message.contains("repetition limit") {
        "aliases expand to too many nodes; write the values out or use `vars`"
    } else if message.contains("duplicate") {
        "each key may appear once per mapping; remove or rename the repeated one"
    } else {
        "check indentation (spaces, not tabs) and quoting near this position"
    }
}

/// Deserializes a value tree into `T`, locating the error through the key path.
///
/// # Errors
/// One diagnostic (serde stops at the first type error) with id `unknown-key`,
/// `missing-key` or `wrong-type`.
pub fn deserialize<T: DeserializeOwned>(source: &SourceFile, value: Value) -> Result<T, Diagnostics> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|error| {
        let path = error.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let message = error.inner().to_string();
        Diagnostics(vec![describe_serde_error(source, &path, &message)])
    })
}

fn describe_serde_error(source: &SourceFile, path: &str, message: &str) -> Diagnostic {
    let shown_path = if path.is_empty() { "the top level" } else { path };
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let key = rest.split('`').next().unwrap_or_default();
        let expected: Vec<&str> = rest.split('`').skip(2).step_by(2).collect();
        let key_path = if source.map.contains(path) && !path.ends_with(key) {
            crate::source::join_key(path, key)
        } else {
            path.to_owned()
        };
        let help = match did_you_mean(key, expected.iter().copied()) {
            Some(close) => format!("did you mean `{close}`? allowed here: {}", expected.join(", ")),
            None => format!("allowed here: {}", expected.join(", ")),
        };
        let diagnostic =
            Diagnostic::error("unknown-key", format!("unknown key `{key}` in {}", parent_of(shown_path, key)))
                .at(source, &key_path)
                .help(help);
        // The caret belongs under the misspelt key, not its value.
        return match source.map.locate_key(&key_path) {
            Some(position) => diagnostic.at_position(source, position),
            None => diagnostic,
        };
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let key = rest.split('`').next().unwrap_or_default();
        return Diagnostic::error("missing-key", format!("missing key `{key}` in {shown_path}"))
            .at(source, path)
            .help(format!("add `{key}:`; `toolkit schema` lists every key"));
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let value = rest.split('`').next().unwrap_or_default();
        let expected: Vec<&str> = rest.split('`').skip(2).step_by(2).collect();
        let help = match did_you_mean(value, expected.iter().copied()) {
            Some(close) => format!("did you mean `{close}`? one of: {}", expected.join(", ")),
            None => format!("one of: {}", expected.join(", ")),
        };
        return Diagnostic::error("unknown-value", format!("`{value}` is not allowed for `{shown_path}`"))
            .at(source, path)
            .help(help);
    }
    if message.contains("`{env: VARIABLE}`") {
        // serde's "invalid type" messages quote the value, which may be the secret.
        let message = if message.starts_with("empty secret reference") {
            message
        } else {
            "secrets are never written inline: use `{env: VARIABLE}` or `{file: PATH}`"
        };
        let mut diagnostic = Diagnostic::error("inline-secret", format!("`{shown_path}`: {message}"))
            .at(source, path)
            .help("put the secret in an environment variable or a file readable only by you");
        // The line holds the secret itself: point at it, never print it.
        diagnostic.source_line = None;
        return diagnostic;
    }
    Diagnostic::error("wrong-type", format!("`{shown_path}`: {message}"))
        .at(source, path)
        .help("`toolkit schema` shows the expected type of every key")
}

fn parent_of(path: &str, key: &str) -> String {
    let parent = path.strip_suffix(key).map_or(path, |p| p.trim_end_matches('.'));
    if parent.is_empty() || parent == "the top level" { "the top level".to_owned() } else { format!("`{parent}`") }
}

/// Reads, parses and deserializes `path` in one step (no interpolation).
///
/// # Errors
/// Diagnostics from any of [`read_text`], [`parse_value`], [`deserialize`].
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<(T, SourceFile), Diagnostics> {
    let text = read_text(path)?;
    let source = SourceFile::new(path, text);
    let value = parse_value(&source)?;
    let typed = deserialize(&source, value)?;
    Ok((typed, source))
}
