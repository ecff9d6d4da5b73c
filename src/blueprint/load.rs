//! Loads a blueprint file: read, parse, substitute `vars`, deserialize.
//!
//! Stage: load. Input: a path. Output: [`LoadedBlueprint`] (typed blueprint and its
//! source with key positions), or diagnostics naming the file.
//!
//! Interpolation happens on the YAML value tree, before typing, so `${gpus}` can
//! fill a number: a string that is exactly `${name}` takes the variable's value and
//! type; inside a longer string the value is formatted in. `$${` escapes a literal `${`.

use std::path::Path;

use serde_norway::{Mapping, Value};

use crate::blueprint::schema::Blueprint;
use crate::diagnostic::{Diagnostic, Diagnostics, did_you_mean};
use crate::source::{SourceFile, join_index, join_key};
use crate::yaml;

/// A blueprint with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedBlueprint {
    /// The typed blueprint, variables substituted.
    pub blueprint: Blueprint,
    /// Its file, for diagnostics.
    pub source: SourceFile,
}

/// Loads the blueprint at `path`.
///
/// # Errors
/// Diagnostics for unreadable files, YAML errors, unknown variables and schema errors.
pub fn load(path: &Path) -> Result<LoadedBlueprint, Diagnostics> {
    let text = yaml::read_text(path)?;
    load_text(path, text)
}

/// Loads a blueprint from text already in memory (`path` is only for messages).
///
/// # Errors
/// As [`load`].
pub fn load_text(path: &Path, text: String) -> Result<LoadedBlueprint, Diagnostics> {
    let source = SourceFile::new(path, text);
    let mut value = yaml::parse_value(&source)?;
    if !matches!(value, Value::Mapping(_)) {
        return Err(Diagnostics(vec![
            Diagnostic::error("not-a-mapping", "a blueprint is a mapping of keys (`version:`, `cluster:`…)")
                .at(&source, "")
                .help("start from an example in `blueprints/`"),
        ]));
    }
    let variables = take_variables(&value);
    let mut diagnostics = Diagnostics::default();
    let mut budget = Some(MAX_EXPANSION_BYTES);
    if let Value::Mapping(root) = &mut value {
        for (key, child) in root.iter_mut() {
            let Some(key) = key.as_str() else { continue };
            if key != "vars" {
                interpolate(child, key, &variables, &source, &mut diagnostics, &mut budget);
            }
        }
    }
    if diagnostics.has_errors() {
        return Err(diagnostics);
    }
    let blueprint = yaml::deserialize(&source, value)?;
    Ok(LoadedBlueprint { blueprint, source })
}

fn take_variables(value: &Value) -> Mapping {
    match value.get("vars") {
        Some(Value::Mapping(vars)) => vars.clone(),
        _ => Mapping::new(),
    }
}

/// Most bytes variable references may add in total: a large variable referenced many
/// times would otherwise multiply into gigabytes (the `vars` form of an alias bomb).
const MAX_EXPANSION_BYTES: usize = crate::yaml::MAX_FILE_BYTES;

fn interpolate(
    value: &mut Value,
    path: &str,
    vars: &Mapping,
    source: &SourceFile,
    out: &mut Diagnostics,
    budget: &mut Option<usize>,
) {
    match value {
        Value::String(text) if text.contains("${") => {
            if let Some(replacement) = substitute(text, path, vars, source, out, budget) {
                *value = replacement;
            }
        }
        Value::Sequence(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                interpolate(item, &join_index(path, index), vars, source, out, budget);
            }
        }
        Value::Mapping(entries) => {
            for (key, child) in entries.iter_mut() {
                let key = key.as_str().unwrap_or("?").to_owned();
                interpolate(child, &join_key(path, &key), vars, source, out, budget);
            }
        }
        Value::Tagged(tagged) => interpolate(&mut tagged.value, path, vars, source, out, budget),
        _ => {}
    }
}

/// The substituted value, or `None` (with a diagnostic) when a variable is unknown.
fn substitute(
    text: &str,
    path: &str,
    vars: &Mapping,
    source: &SourceFile,
    out: &mut Diagnostics,
    budget: &mut Option<usize>,
) -> Option<Value> {
    // A whole-string reference keeps the variable's type.
    if let Some(name) = text.strip_prefix("${").and_then(|rest| rest.strip_suffix('}'))
        && !name.contains(['{', '}', '$'])
    {
        return lookup(name.trim(), path, vars, source, out, budget).cloned();
    }
    let mut result = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('$') {
        result.push_str(&rest[..start]);
        let after = &rest[start..];
        if let Some(escaped) = after.strip_prefix("$${") {
            result.push_str("${");
            rest = escaped;
        } else if let Some(open) = after.strip_prefix("${") {
            let Some(end) = open.find('}') else {
                out.push(
                    Diagnostic::error("unclosed-variable", format!("`${{` without a closing `}}` in `{text}`"))
                        .at(source, path)
                        .help("write `${name}`, or `$${` for a literal `${`"),
                );
                return None;
            };
            let value = lookup(open[..end].trim(), path, vars, source, out, budget)?;
            result.push_str(&scalar_text(value));
            rest = &open[end + 1..];
        } else {
            result.push('$');
            rest = &after[1..];
        }
    }
    result.push_str(rest);
    Some(Value::String(result))
}

fn lookup<'v>(
    name: &str,
    path: &str,
    vars: &'v Mapping,
    source: &SourceFile,
    out: &mut Diagnostics,
    budget: &mut Option<usize>,
) -> Option<&'v Value> {
    if let Some(value) = vars.get(name) {
        // `None`: already exhausted and reported; every later reference fails quietly.
        let remaining = (*budget)?;
        let size = scalar_text(value).len();
        let Some(left) = remaining.checked_sub(size) else {
            *budget = None;
            out.push(
                Diagnostic::error(
                    "vars-too-large",
                    format!("variable references expand to more than {MAX_EXPANSION_BYTES} bytes"),
                )
                .at(source, path)
                .help("variables are for short values; write large values out once"),
            );
            return None;
        };
        *budget = Some(left);
        return Some(value);
    }
    let known: Vec<&str> = vars.keys().filter_map(Value::as_str).collect();
    let help = match did_you_mean(name, known.iter().copied()) {
        Some(close) => format!("did you mean `${{{close}}}`?"),
        None if known.is_empty() => "declare it under `vars:`".to_owned(),
        None => format!("declare it under `vars:` (declared: {})", known.join(", ")),
    };
    out.push(
        Diagnostic::error("unknown-variable", format!("variable `{name}` is not declared")).at(source, path).help(help),
    );
    None
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => serde_norway::to_string(other).map(|s| s.trim_end().to_owned()).unwrap_or_default(),
    }
}
