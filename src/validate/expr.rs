//! Templates and expressions of validator files, and the parser registry they name.
//!
//! Stage: validate. Input: a command template, an expression or an `explain`
//! template, and the subject's context (the model values as JSON, plus `output`
//! once parsed). Output: a shell script, a value, or a text.
//!
//! Commands are rendered with a formatter that shell-quotes every `{{ … }}`, so a
//! value from a blueprint is always one word and never reaches the remote shell
//! unquoted (`{{ x | safe }}` opts out, for values the validator itself builds).
//! Undefined values are errors everywhere (strict), so a typo in a validator is an
//! `error` verdict that names it, never an empty argument.

use std::fmt::Write as _;
use std::sync::OnceLock;

use minijinja::value::{Rest, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use crate::model::hostlist;
use crate::parsers;
use crate::transport::quote::quote;

/// Parsers provided here, for outputs that need no tool-specific reading.
pub const LOCAL_PARSERS: &[(&str, &str)] = &[
    ("json", "any JSON document (`ip -j link`, `… --json`)"),
    ("lines", "the non-empty lines of the output, trimmed, as a list of strings"),
    ("text", "the whole output as one string"),
];

/// Every parser name a validator may use: the local ones and the tool parsers.
#[must_use]
pub fn parser_names() -> Vec<&'static str> {
    LOCAL_PARSERS.iter().chain(parsers::PARSERS).map(|(name, _)| *name).collect()
}

/// Parses `text` with the parser called `name`.
///
/// # Errors
/// The parser's message, which names the line (`could not parse line 3: …`).
pub fn parse(name: &str, text: &str) -> Result<serde_json::Value, String> {
    match name {
        "json" => serde_json::from_str(text).map_err(|error| {
            format!(
                "could not parse line {}, column {}: {}",
                error.line(),
                error.column(),
                strip_position(&error.to_string())
            )
        }),
        "lines" => Ok(serde_json::Value::Array(
            text.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .map(|line| serde_json::Value::String(line.to_owned()))
                .collect(),
        )),
        "text" => Ok(serde_json::Value::String(text.to_owned())),
        other => parsers::parse_by_name(other, text).map_err(|error| error.to_string()),
    }
}

fn strip_position(message: &str) -> &str {
    message.split(" at line ").next().unwrap_or(message)
}

/// The environment commands render in: every output is shell-quoted.
fn command_env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = base_env();
        env.set_formatter(|out, _state, value| {
            if value.is_none() || value.is_undefined() {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "a value in the command is none: the model has no such value for this subject",
                ));
            }
            let text = value.to_string();
            let written = if value.is_safe() { out.write_str(&text) } else { out.write_str(&quote(&text)) };
            written.map_err(|_| Error::from(ErrorKind::WriteFailure))
        });
        env
    })
}

/// The environment of expressions and `explain` texts: values print as they are.
fn text_env() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(base_env)
}

fn base_env() -> Environment<'static> {
    let mut env = crate::render::new_environment();
    env.add_filter("flatten", flatten);
    env.add_filter("matching", matching);
    env.add_filter("hostlist", compress_hostlist);
    env.add_function("gres_count", gres_count);
    env.add_function("roce_qos_mismatches", roce_qos_mismatches);
    env
}

/// `roce_qos_mismatches(output, cluster.fabric.roce_qos, netdevs)`: one sentence per
/// difference between a node's rail NICs and the fabric's QoS (see [`super::roce_qos`]).
fn roce_qos_mismatches(output: &Value, expected: &Value, netdevs: &Value) -> Result<Value, Error> {
    fn typed<T: serde::de::DeserializeOwned>(value: &Value, what: &str) -> Result<T, Error> {
        serde_json::to_value(value)
            .and_then(serde_json::from_value)
            .map_err(|error| Error::new(ErrorKind::InvalidOperation, format!("roce_qos_mismatches: {what}: {error}")))
    }
    let dump = typed(output, "the parsed `roce-qos` output")?;
    let expected = typed(expected, "the fabric's RoCE QoS")?;
    let netdevs: Vec<String> = typed(netdevs, "the rail interface names")?;
    Ok(Value::from(super::roce_qos::mismatches(&dump, &expected, &netdevs)))
}

/// `[[a, b], c]` → `[a, b, c]`: one level of lists is opened.
fn flatten(value: &Value) -> Result<Value, Error> {
    let mut out = Vec::new();
    for element in value.try_iter()? {
        if element.kind() == ValueKind::Seq {
            out.extend(element.try_iter()?);
        } else {
            out.push(element);
        }
    }
    Ok(Value::from(out))
}

/// The values of a map whose keys contain every one of `parts` (`ecc_errors |
/// matching("Volatile", "Uncorrectable")`).
fn matching(map: &Value, parts: Rest<String>) -> Result<Value, Error> {
    let parts = parts.0;
    let mut out = Vec::new();
    for key in map.try_iter()? {
        let name = key.to_string();
        if parts.iter().all(|part| name.contains(part.as_str())) {
            out.push(map.get_item(&key)?);
        }
    }
    Ok(Value::from(out))
}

/// A list of names as a Slurm hostlist expression (`node[01-04]`).
fn compress_hostlist(names: &Value) -> Result<Value, Error> {
    let names: Vec<String> = names.try_iter()?.map(|name| name.to_string()).collect();
    Ok(Value::from(hostlist::compress(names.iter().map(String::as_str))))
}

/// The count of GRES `name` in a Slurm GRES string (`gpu:h100:8(S:0-1),shard:64` →
/// 8 for `gpu`); 0 for none or an empty string.
fn gres_count(gres: &Value, name: &str) -> u64 {
    let Some(text) = gres.as_str() else { return 0 };
    text.split(',')
        .filter_map(|item| {
            // `(S:0-1)` or `(IDX:0-3)` follow the count; they are not part of it.
            let item = item.split('(').next().unwrap_or(item).trim();
            let mut fields = item.split(':');
            if fields.next() != Some(name) {
                return None;
            }
            fields.next_back().and_then(|count| count.parse::<u64>().ok())
        })
        .sum()
}

/// Whether a command template compiles.
///
/// # Errors
/// minijinja's message.
pub fn check_command_template(text: &str) -> Result<(), String> {
    command_env().template_from_str(text).map(|_| ()).map_err(|error| describe(&error))
}

/// Whether an `explain` template compiles.
///
/// # Errors
/// minijinja's message.
pub fn check_text_template(text: &str) -> Result<(), String> {
    text_env().template_from_str(text).map(|_| ()).map_err(|error| describe(&error))
}

/// Whether an expression compiles.
///
/// # Errors
/// minijinja's message.
pub fn check_expression(text: &str) -> Result<(), String> {
    text_env().compile_expression(text).map(|_| ()).map_err(|error| describe(&error))
}

/// Renders a command template into a shell script.
///
/// # Errors
/// An undefined or none value, or a template error, described.
pub fn render_command(template: &str, context: &Value) -> Result<String, String> {
    script(command_env().render_str(template, context))
}

/// A rendered command as the shell runs it, or its error described.
fn script(rendered: Result<String, Error>) -> Result<String, String> {
    rendered.map(|script| script.trim().to_owned()).map_err(|error| describe(&error))
}

/// A command template compiled once for many subjects (a health probe on thousands of
/// nodes: compiling it per node was a tenth of a 4,096-node plan).
pub struct Command(Environment<'static>);

/// The name [`Command`] gives its template.
const COMMAND: &str = "command";

impl Command {
    /// Compiles `template`.
    ///
    /// # Errors
    /// A template that does not parse, described.
    pub fn compile(template: &str) -> Result<Self, String> {
        let mut env = command_env().clone();
        env.add_template_owned(COMMAND, template.to_owned()).map_err(|error| describe(&error))?;
        Ok(Self(env))
    }

    /// The shell script for `context`, as [`render_command`] renders it.
    ///
    /// # Errors
    /// An undefined or none value, or a template error, described.
    pub fn render(&self, context: &Value) -> Result<String, String> {
        script(self.0.get_template(COMMAND).and_then(|template| template.render(context)))
    }
}

/// Renders an `explain` template.
///
/// # Errors
/// An undefined value or a template error, described.
pub fn render_text(template: &str, context: &Value) -> Result<String, String> {
    text_env().render_str(template, context).map(|text| text.trim().to_owned()).map_err(|error| describe(&error))
}

/// Evaluates an expression.
///
/// # Errors
/// An undefined value or a type error, described.
pub fn evaluate(expression: &str, context: &Value) -> Result<Value, String> {
    let compiled = text_env().compile_expression(expression).map_err(|error| describe(&error))?;
    compiled.eval(context).map_err(|error| describe(&error))
}

/// `base` with `item` added.
#[must_use]
pub fn with_item(base: &Value, item: Value) -> Value {
    minijinja::value::merge_maps([minijinja::context! { item => item }, base.clone()])
}

/// A JSON value as a template context value.
#[must_use]
pub fn to_value(json: &serde_json::Value) -> Value {
    Value::from(minijinja::value::Serde(json))
}

/// A value as a number: numbers as they are, booleans as 1 and 0, numeric strings
/// parsed; `None` for none, undefined and anything else.
#[must_use]
pub fn as_number(value: &Value) -> Option<f64> {
    match value.kind() {
        ValueKind::Bool => Some(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => value.to_string().parse::<f64>().ok(),
        ValueKind::String => value.as_str().and_then(|text| text.trim().parse::<f64>().ok()),
        _ => None,
    }
    .filter(|number| number.is_finite())
}

/// A minijinja error as one line: the message and, when known, what the template
/// was doing.
fn describe(error: &Error) -> String {
    let mut text = error.kind().to_string();
    if let Some(detail) = error.detail() {
        let _ = write!(text, ": {detail}");
    }
    if let Some(line) = error.line()
        && line > 1
    {
        let _ = write!(text, " (line {line})");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(json: &serde_json::Value) -> Value {
        to_value(json)
    }

    #[test]
    fn every_interpolated_value_is_one_quoted_word() {
        let ctx = context(&serde_json::json!({
            "node": { "name": "node01", "netdev": "rail 0; rm -rf /", "mtu": 9000 },
            "list": ["node01", "node02", "node03"]
        }));
        let script =
            render_command("ping -s {{ node.mtu - 28 }} -I {{ node.netdev }} {{ node.name }}", &ctx).expect("renders");
        assert_eq!(script, "ping -s 8972 -I 'rail 0; rm -rf /' node01");
        let script =
            render_command("srun -w {{ list | hostlist }} {{ '$HOME' }} {{ '$HOME' | safe }}", &ctx).expect("renders");
        assert_eq!(script, "srun -w 'node[01-03]' '$HOME' $HOME");
    }

    #[test]
    fn undefined_and_none_values_are_errors_not_empty_words() {
        let ctx = context(&serde_json::json!({ "node": { "gpu": null } }));
        let error = render_command("nvidia-smi -i {{ node.gpus }}", &ctx).expect_err("undefined");
        assert!(error.contains("undefined"), "{error}");
        let error = render_command("echo {{ node.gpu }}", &ctx).expect_err("none");
        assert!(error.contains("is none"), "{error}");
    }

    #[test]
    fn expressions_read_outputs_with_the_helper_filters() {
        let ctx = context(&serde_json::json!({
            "output": {
                "families": [{ "peers": [{ "state": "Established" }, { "state": "Idle" }] }, { "peers": [{ "state": "Established" }] }],
                "ecc": { "Volatile/SRAM Uncorrectable": 1, "Volatile/DRAM Uncorrectable": 2, "Aggregate/DRAM Uncorrectable": 7, "Volatile/SRAM Correctable": null }
            },
            "gres": "gpu:h100:8(S:0-1),shard:64"
        }));
        let peers = evaluate("output.families | map(attribute='peers') | flatten | length", &ctx).expect("evaluates");
        assert_eq!(as_number(&peers), Some(3.0));
        let ecc = evaluate("output.ecc | matching('Volatile', 'Uncorrectable') | reject('none') | sum", &ctx)
            .expect("evaluates");
        assert_eq!(as_number(&ecc), Some(3.0));
        assert_eq!(as_number(&evaluate("gres_count(gres, 'gpu')", &ctx).expect("gres")), Some(8.0));
        assert_eq!(as_number(&evaluate("gres_count(gres, 'shard')", &ctx).expect("gres")), Some(64.0));
        assert_eq!(as_number(&evaluate("gres_count(none, 'gpu')", &ctx).expect("gres")), Some(0.0));
        let item = with_item(&ctx, Value::from("Idle"));
        assert_eq!(as_number(&evaluate("item != 'Established'", &item).expect("item")), Some(1.0));
        assert!(evaluate("output.nothing + 1", &ctx).is_err());
    }

    #[test]
    fn numbers_from_values() {
        assert_eq!(as_number(&Value::from(2.5)), Some(2.5));
        assert_eq!(as_number(&Value::from(true)), Some(1.0));
        assert_eq!(as_number(&Value::from(" 42 ")), Some(42.0));
        assert_eq!(as_number(&Value::from("N/A")), None);
        assert_eq!(as_number(&Value::from(())), None);
        assert_eq!(as_number(&Value::from(f64::NAN)), None);
    }

    #[test]
    fn local_parsers() {
        assert_eq!(parse("lines", " a \n\n b\n").expect("lines"), serde_json::json!(["a", "b"]));
        assert_eq!(parse("json", "[{\"ifname\": \"lo\"}]").expect("json")[0]["ifname"], "lo");
        let error = parse("json", "[\n{\"a\": }\n]").expect_err("bad json");
        assert!(error.starts_with("could not parse line 2, column 7:"), "{error}");
        assert!(parse("nope", "").is_err());
    }
}
