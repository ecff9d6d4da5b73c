//! What the unit tests share: the rule for a tool they need that is missing; a
//! writer whose text they read back (a test's own `tracing` subscriber writes there).

/// A test cannot run because `reason` is missing: it fails naming it, so "passed"
/// always means "ran"; with `TOOLKIT_SKIP_MISSING_TOOLS=1` it says "skipped" and the
/// caller returns (as `tests/it/support.rs` does for the integration tests).
pub fn cannot_run(reason: &str) {
    if std::env::var_os("TOOLKIT_SKIP_MISSING_TOOLS").is_some() {
        eprintln!("skipped: {reason}");
        return;
    }
    panic!(
        "{reason}\n(`.ci/setup` installs what the tests need; TOOLKIT_SKIP_MISSING_TOOLS=1 skips such tests instead)"
    );
}

/// Bytes written, read back as text; clones share them.
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("captured").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("captured")).into_owned()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[should_panic(expected = "frobnicate is not installed")]
    fn a_missing_tool_fails_the_test_unless_skipping_is_asked_for() {
        super::cannot_run("frobnicate is not installed");
        // Reached only under TOOLKIT_SKIP_MISSING_TOOLS=1, which asked for the skip.
        panic!("frobnicate is not installed (skipped as asked)");
    }
}
