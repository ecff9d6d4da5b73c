//! What the unit tests share: the rule for a tool they need that is missing.

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
