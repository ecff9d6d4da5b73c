//! Names that flow into native formats, each checked against the rules of the tool
//! that reads it: Slurm partition, account and QOS names; Unix user names (Debian's
//! `NAME_REGEX`, 32 characters); Kubernetes object names (DNS-1123 labels) where the
//! scheduler is Kubernetes. Cluster and host names are checked in `nodes`, mount
//! points in `storage`.
//!
//! Every name is refused with the first character the tool would trip on (a space or
//! `#` ends a slurm.conf word, `=` starts a value, `;`, `$()` and quotes are shell,
//! a Cyrillic `а` only looks like a Latin `a`), the rule, and a name that passes.

use super::simple_name_suggestion;
use crate::blueprint::LoadedBlueprint;
use crate::blueprint::schema::SchedulerKind;
use crate::diagnostic::{Diagnostic, Diagnostics};

/// The rules of one native format.
struct Rule {
    /// Diagnostic id.
    id: &'static str,
    /// The tool and what it reads the name as.
    tool: &'static str,
    /// The rule in words, for the message.
    allowed: &'static str,
    /// Most characters the tool accepts.
    max: usize,
    /// Characters allowed first.
    first: fn(char) -> bool,
    /// Characters allowed after the first.
    rest: fn(char) -> bool,
    /// Characters allowed last (DNS labels cannot end with `-`).
    last: fn(char) -> bool,
}

const fn lower_or_digit(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

const fn lower(c: char) -> bool {
    c.is_ascii_lowercase()
}

const fn any(_: char) -> bool {
    true
}

/// Slurm: partition names are words of slurm.conf (`PartitionName=gpu Nodes=…`), where
/// a space ends the word, `#` starts a comment and `=` a value; sacctmgr lowercases
/// account and QOS names, so `Team-A` would not match itself in the accounting.
const SLURM: Rule = Rule {
    id: "invalid-slurm-name",
    tool: "Slurm (slurm.conf and sacctmgr)",
    allowed: "lowercase letters, digits, `-` and `_`, starting with a letter",
    max: 64,
    first: lower,
    rest: |c| lower_or_digit(c) || c == '-' || c == '_',
    last: any,
};

/// Debian's default `NAME_REGEX` (adduser.conf(5): `^[a-z][-a-z0-9_]*\$?$`) and the
/// 32-character limit of useradd(8): Slurm users are Unix login names.
const UNIX_USER: Rule = Rule {
    id: "invalid-user-name",
    tool: "useradd/adduser (Debian NAME_REGEX `^[a-z][-a-z0-9_]*\\$?$`)",
    allowed: "lowercase letters, digits, `-` and `_`, starting with a letter (a final `$` is allowed)",
    max: 32,
    first: lower,
    rest: |c| lower_or_digit(c) || c == '-' || c == '_' || c == '$',
    last: any,
};

/// Kubernetes namespaces and most object names are DNS-1123 labels: at most 63
/// lowercase letters, digits and `-`, starting and ending with a letter or digit.
const KUBERNETES: Rule = Rule {
    id: "invalid-kubernetes-name",
    tool: "Kubernetes (namespace and object names, DNS-1123 label)",
    allowed: "lowercase letters, digits and `-`, starting and ending with a letter or digit",
    max: 63,
    first: lower_or_digit,
    rest: |c| lower_or_digit(c) || c == '-',
    last: lower_or_digit,
};

/// Runs every name check.
pub(super) fn check(loaded: &LoadedBlueprint, out: &mut Diagnostics) {
    let blueprint = &loaded.blueprint;
    if let Some(slurm) = &blueprint.scheduler.slurm {
        for (index, partition) in slurm.partitions.iter().enumerate() {
            name(
                loaded,
                &SLURM,
                "partition",
                &partition.name,
                &format!("scheduler.slurm.partitions[{index}].name"),
                out,
            );
        }
    }
    let kubernetes = blueprint.scheduler.kind == SchedulerKind::Kubernetes;
    for (index, tenant) in blueprint.tenants.iter().enumerate() {
        let path = format!("tenants[{index}].name");
        if kubernetes {
            name(loaded, &KUBERNETES, "tenant (namespace)", &tenant.name, &path, out);
        } else {
            name(loaded, &SLURM, "tenant (account and QOS)", &tenant.name, &path, out);
        }
        for (user_index, user) in tenant.users.iter().enumerate() {
            name(loaded, &UNIX_USER, "user", user, &format!("tenants[{index}].users[{user_index}]"), out);
        }
    }
}

fn name(loaded: &LoadedBlueprint, rule: &Rule, what: &str, value: &str, path: &str, out: &mut Diagnostics) {
    let Some(problem) = problem(rule, value) else { return };
    out.push(
        Diagnostic::error(
            rule.id,
            format!("{what} name `{}` is not valid for {}: {problem}", value.escape_debug(), rule.tool),
        )
        .at(&loaded.source, path)
        .help(format!(
            "use {}, at most {} characters, e.g. `{}`",
            rule.allowed,
            rule.max,
            suggestion(rule, value)
        )),
    );
}

/// Why `name` breaks `rule`, naming the first offending character.
fn problem(rule: &Rule, name: &str) -> Option<String> {
    let Some(first) = name.chars().next() else {
        return Some("it is empty".to_owned());
    };
    if let Some(c) = name.chars().find(|c| !c.is_ascii()) {
        return Some(format!(
            "it contains `{c}` (U+{:04X}), which is not ASCII (a look-alike of a Latin letter?)",
            u32::from(c)
        ));
    }
    let length = name.chars().count();
    if length > rule.max {
        return Some(format!("it is {length} characters long, more than {}", rule.max));
    }
    if !(rule.first)(first) {
        return Some(format!("it starts with {}", describe(first)));
    }
    if let Some(c) = name.chars().skip(1).find(|c| !(rule.rest)(*c)) {
        return Some(format!("it contains {}", describe(c)));
    }
    if let Some(last) = name.chars().last().filter(|c| !(rule.last)(*c)) {
        return Some(format!("it ends with {}", describe(last)));
    }
    if rule.id == UNIX_USER.id && name.find('$').is_some_and(|at| at + 1 != name.len()) {
        return Some("`$` is allowed only at the end".to_owned());
    }
    None
}

/// A character and why tools trip on it.
fn describe(c: char) -> String {
    let why = match c {
        ' ' | '\t' => "whitespace, which ends a word in configuration files",
        '#' => "`#`, which starts a comment",
        '=' => "`=`, which separates a key from its value",
        ';' | '$' | '(' | ')' | '`' | '|' | '&' | '<' | '>' => "a shell metacharacter",
        '"' | '\'' => "a quote",
        'A'..='Z' => "an uppercase letter",
        '0'..='9' => "a digit",
        '-' | '_' | '.' => "punctuation",
        c if c.is_control() => "a control character",
        _ => "a character outside the rule",
    };
    format!("`{}` ({why})", c.escape_debug())
}

/// A name that passes `rule`, for the fix hint.
fn suggestion(rule: &Rule, name: &str) -> String {
    let simple = simple_name_suggestion(name, rule.max);
    if rule.id == KUBERNETES.id { simple.replace('_', "-") } else { simple }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_accept_ordinary_names_and_refuse_hostile_ones() {
        for good in ["gpu", "team-a", "a_b", "x1"] {
            assert_eq!(problem(&SLURM, good), None, "{good}");
        }
        assert_eq!(problem(&UNIX_USER, "alice"), None);
        assert_eq!(problem(&UNIX_USER, "host$"), None, "Debian's NAME_REGEX allows a final `$`");
        assert_eq!(problem(&KUBERNETES, "0team"), None, "DNS-1123 labels may start with a digit");
        for (rule, bad, because) in [
            (&SLURM, "gpu x;y", "whitespace"),
            (&SLURM, "Gpu", "uppercase"),
            (&SLURM, "1gpu", "starts with `1`"),
            (&SLURM, "-gpu", "starts with `-`"),
            (&SLURM, "a=b", "`=`"),
            (&SLURM, "a#b", "comment"),
            (&SLURM, "gpu\u{430}", "U+0430"),
            (&SLURM, "", "empty"),
            (&UNIX_USER, "a$b", "only at the end"),
            (&UNIX_USER, &"a".repeat(33), "33 characters"),
            (&UNIX_USER, "bob$(reboot)", "shell metacharacter"),
            (&UNIX_USER, "o'brien", "quote"),
            (&KUBERNETES, "team-", "ends with `-`"),
            (&KUBERNETES, "team_a", "punctuation"),
        ] {
            let found = problem(rule, bad).unwrap_or_else(|| panic!("`{bad}` passes {}", rule.id));
            assert!(found.contains(because), "`{bad}`: {found}");
            let suggested = suggestion(rule, bad);
            assert_eq!(problem(rule, &suggested), None, "suggestion `{suggested}` for `{bad}` must pass {}", rule.id);
        }
    }

    /// Whether Debian's useradd creates `name`, in a scratch `--prefix` root (the
    /// machine's own user database is not touched); `None` without useradd.
    fn useradd_accepts(name: &str) -> Option<bool> {
        let root = tempfile::tempdir().expect("temp dir");
        let etc = root.path().join("etc");
        std::fs::create_dir_all(&etc).expect("etc");
        for file in ["passwd", "group", "shadow", "gshadow", "login.defs"] {
            let _ = std::fs::copy(std::path::Path::new("/etc").join(file), etc.join(file));
        }
        let status = std::process::Command::new("useradd")
            .arg("--prefix")
            .arg(root.path())
            .arg(name)
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?;
        Some(status.success())
    }

    /// The real useradd (CI runs on Debian) takes every user name the lint accepts,
    /// and refuses with the lint names too long for it.
    #[test]
    fn useradd_takes_what_the_lint_accepts() {
        if std::process::Command::new("useradd").arg("--help").output().is_err() {
            crate::testing::cannot_run("useradd is not installed: apt-get install passwd");
            return;
        }
        let longest = format!("a{}", "b".repeat(UNIX_USER.max - 1));
        for name in ["alice", "bob-2", "carol_x", "dave$", longest.as_str()] {
            assert_eq!(problem(&UNIX_USER, name), None, "{name}");
            assert_eq!(useradd_accepts(name), Some(true), "useradd refuses `{name}`, which the lint accepts");
        }
        let too_long = format!("{longest}c");
        assert!(problem(&UNIX_USER, &too_long).is_some());
        assert_eq!(useradd_accepts(&too_long), Some(false), "useradd takes a name of {} characters", too_long.len());
    }
}
