//! Diagnostics: what is wrong with an input, where, and how to fix it.
//!
//! Stage: check (and load). Input: findings from any offline stage. Output: a list
//! of [`Diagnostic`]s rendered for a terminal (with the source line and a caret)
//! or as JSON. Every diagnostic has a stable id so users and tests can refer to it.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use crate::source::{Position, SourceFile};

/// How bad a finding is. Errors stop the pipeline; warnings are shown and let it go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing stops.
    Warning,
    /// The input cannot be used as it is.
    Error,
}

/// One finding, located in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    /// Stable identifier, kebab-case (`unknown-gpu-model`).
    pub id: &'static str,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, with values quoted in backticks.
    pub message: String,
    /// The file it is in, when it comes from a file.
    pub file: Option<PathBuf>,
    /// Where in the file.
    pub position: Option<Position>,
    /// The key path it concerns (`node_groups[1].gpu.model`).
    pub key_path: Option<String>,
    /// The source line at `position`, for the snippet.
    #[serde(skip)]
    pub source_line: Option<String>,
    /// How to fix it.
    pub help: Option<String>,
}

impl Diagnostic {
    /// A new error with no location yet.
    #[must_use]
    pub fn error(id: &'static str, message: impl Into<String>) -> Self {
        Self::new(id, Severity::Error, message)
    }

    /// A new warning with no location yet.
    #[must_use]
    pub fn warning(id: &'static str, message: impl Into<String>) -> Self {
        Self::new(id, Severity::Warning, message)
    }

    fn new(id: &'static str, severity: Severity, message: impl Into<String>) -> Self {
        Self {
            id,
            severity,
            message: message.into(),
            file: None,
            position: None,
            key_path: None,
            source_line: None,
            help: None,
        }
    }

    /// Locates the diagnostic at `key_path` in `source` (or its nearest existing parent).
    #[must_use]
    pub fn at(mut self, source: &SourceFile, key_path: impl Into<String>) -> Self {
        let key_path = key_path.into();
        self.file = Some(source.path.clone());
        if let Some(position) = source.position(&key_path) {
            self = self.at_position(source, position);
        }
        self.key_path = Some(key_path);
        self
    }

    /// Locates the diagnostic at an explicit position in `source`.
    #[must_use]
    pub fn at_position(mut self, source: &SourceFile, position: Position) -> Self {
        self.file = Some(source.path.clone());
        self.position = Some(position);
        self.source_line = source.line_text(position.line).map(str::to_owned);
        self
    }

    /// Names the file without a position (unreadable or empty files).
    #[must_use]
    pub fn in_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Adds a fix hint.
    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Whether this diagnostic stops the pipeline.
    #[must_use]
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Renders like rustc: header, `--> file:line:col`, the line, a caret, help.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let _ = writeln!(out, "{level}[{}]: {}", self.id, self.message);
        match (&self.file, self.position) {
            (Some(file), Some(position)) => {
                let _ = writeln!(out, "  --> {}:{}:{}", file.display(), position.line, position.column);
            }
            (Some(file), None) => {
                let _ = writeln!(out, "  --> {}", file.display());
            }
            _ => {}
        }
        if let (Some(line), Some(position)) = (&self.source_line, self.position) {
            let number = position.line.to_string();
            let gutter = " ".repeat(number.len());
            let indent: String = line
                .chars()
                .take(position.column.saturating_sub(1))
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            let width = token_width(line, position.column);
            let _ = writeln!(out, "{gutter} |");
            let _ = writeln!(out, "{number} | {line}");
            let _ = writeln!(out, "{gutter} | {indent}{}", "^".repeat(width));
        }
        if let Some(help) = &self.help {
            let _ = writeln!(out, "  = help: {help}");
        }
        out
    }
}

/// Width of the token starting at `column`: up to a YAML delimiter.
fn token_width(line: &str, column: usize) -> usize {
    let rest: String = line.chars().skip(column.saturating_sub(1)).collect();
    let token = if rest.starts_with(['{', '[']) {
        rest.len()
    } else {
        rest.find([',', '}', ']', '#']).map_or(rest.len(), |end| end)
    };
    rest[..token].trim_end().chars().count().max(1)
}

/// The diagnostics of one run, in the order found.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(transparent)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Adds one.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.0.push(diagnostic);
    }

    /// Whether any is an error.
    #[must_use]
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(Diagnostic::is_error)
    }

    /// Number of errors.
    #[must_use]
    pub fn error_count(&self) -> usize {
        self.0.iter().filter(|d| d.is_error()).count()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sorts by file and position so output is stable.
    pub fn sort(&mut self) {
        self.0.sort_by(|a, b| {
            (&a.file, a.position.map(|p| (p.line, p.column)), a.id).cmp(&(
                &b.file,
                b.position.map(|p| (p.line, p.column)),
                b.id,
            ))
        });
    }

    /// Renders all, then a one-line summary.
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        for diagnostic in &self.0 {
            out.push_str(&diagnostic.render());
            out.push('\n');
        }
        let errors = self.error_count();
        let warnings = self.0.len() - errors;
        let _ = writeln!(out, "{errors} error(s), {warnings} warning(s)");
        out
    }
}

impl Extend<Diagnostic> for Diagnostics {
    fn extend<T: IntoIterator<Item = Diagnostic>>(&mut self, iter: T) {
        self.0.extend(iter);
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// The closest candidate to `word` within edit distance 3 (or a third of its length),
/// for "did you mean" hints.
#[must_use]
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(&word.to_lowercase(), &candidate.to_lowercase()), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance over characters.
#[must_use]
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        assert_eq!(did_you_mean("h10", ["a100", "h100", "h200"]), Some("h100"));
        assert_eq!(did_you_mean("compte", ["compute", "controller"]), Some("compute"));
        assert_eq!(did_you_mean("zzzz", ["h100", "b200"]), None);
    }

    #[test]
    fn renders_location_snippet_and_caret() {
        let source = SourceFile::new("bp.yaml", "gpu:\n  model: h10\n".to_owned());
        let rendered = Diagnostic::error("unknown-gpu-model", "GPU model `h10` is not known")
            .at(&source, "gpu.model")
            .help("did you mean `h100`?")
            .render();
        assert_eq!(
            rendered,
            "error[unknown-gpu-model]: GPU model `h10` is not known\n  --> bp.yaml:2:10\n  |\n2 |   model: h10\n  |          ^^^\n  = help: did you mean `h100`?\n"
        );
    }
}
