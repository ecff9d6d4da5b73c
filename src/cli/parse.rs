//! `toolkit parse PARSER FILE`: what toolkit reads from one tool output, for checking a
//! capture or writing a validator. Exit 1 with the file and line when it cannot be read.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

use crate::cli::{OutputFormat, Status, emit};
use crate::parsers::{self, PARSERS};

/// Arguments of `toolkit parse`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Parser name (`nccl-tests`, `dcgmi-diag`, `ibstat`, …; `list` prints them all).
    parser: String,
    /// File holding the tool's output (`-` reads stdin); not needed with `list`.
    file: Option<PathBuf>,
    /// Output format: `text` is a short summary, `json` everything parsed.
    #[arg(long, value_enum, default_value_t)]
    output: OutputFormat,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<Status> {
    if args.parser == "list" {
        let mut out = String::new();
        let width = PARSERS.iter().map(|(name, _)| name.len()).max().unwrap_or_default();
        for (name, description) in PARSERS {
            let _ = writeln!(out, "{name:width$}  {description}");
        }
        emit(&out);
        return Ok(Status::Clean);
    }
    let parser = match parsers::lookup(&args.parser) {
        Ok(parser) => parser,
        Err(error) => {
            eprintln!("error: {error}");
            return Ok(Status::Error);
        }
    };
    let Some(file) = &args.file else {
        anyhow::bail!("`toolkit parse {}` needs the FILE holding the tool's output", args.parser);
    };
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        // Tool captures may hold stray non-UTF-8 bytes (terminal escapes, truncated
        // multibyte characters); they are replaced rather than refused.
        let bytes = std::fs::read(file).with_context(|| format!("reading `{}`", file.display()))?;
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let parsed = match parser(&text) {
        Ok(parsed) => parsed,
        Err(error) => {
            eprintln!("error: {}: {error}", file.display());
            return Ok(Status::Error);
        }
    };
    match args.output {
        OutputFormat::Text => emit(&parsed.summary),
        OutputFormat::Json => {
            let json = serde_json::json!({
                "format_version": 1,
                "parser": args.parser,
                "file": file.display().to_string(),
                "result": parsed.value,
            });
            emit(&format!("{}\n", serde_json::to_string_pretty(&json)?));
        }
    }
    Ok(Status::Clean)
}
