//! The `toolkit` binary: parse arguments, run, exit with the command's code.

use std::process::ExitCode;

fn main() -> ExitCode {
    toolkit::run()
}
