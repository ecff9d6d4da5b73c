//! The `toolkit` binary: parse arguments, run, exit with the command's code.

use std::process::ExitCode;

/// jemalloc, not glibc's malloc: a large plan makes millions of small allocations on
/// several threads at once, and glibc grows each thread's arena a page at a time with
/// an `mprotect` call each, keeping freed chunks where the next stage cannot reuse
/// them. At 4,096 nodes jemalloc plans ~9% faster in ~6% less memory (benches/plan_scale.py).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    toolkit::run()
}
