//! `plan --out DIR`: every rendered file as it would land on each target, under
//! `DIR/<target>/<absolute path>`. Secret files are not written; `DIR/SECRETS.txt`
//! lists them so the tree is complete in what it names.
//!
//! Stage: plan (output). Input: resources. Output: files on the local disk.

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use crate::resource::{Desired, Resource};

/// Writes the files; returns how many were written.
///
/// # Errors
/// Any IO error.
pub fn write_tree(dir: &Path, resources: &[Resource]) -> std::io::Result<usize> {
    let mut written = 0;
    let mut secrets = String::new();
    for resource in resources {
        let Desired::File { path, content, secret, .. } = &*resource.desired else { continue };
        if *secret {
            let _ = writeln!(secrets, "{} {path}", resource.target());
            continue;
        }
        let destination = dir.join(resource.target()).join(relative(path));
        if let Some(parent) = destination.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&destination, content.text())?;
        written += 1;
    }
    if !secrets.is_empty() {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("SECRETS.txt"), format!("# secret files, not written here:\n{secrets}"))?;
    }
    Ok(written)
}

/// `/etc/hosts` → `etc/hosts`, dropping `..` so a path cannot leave `dir`.
fn relative(path: &str) -> PathBuf {
    Path::new(path).components().filter(|c| matches!(c, Component::Normal(_))).collect()
}

#[cfg(test)]
mod tests {
    use super::relative;
    use std::path::PathBuf;

    #[test]
    fn paths_stay_inside_the_output_directory() {
        assert_eq!(relative("/etc/hosts"), PathBuf::from("etc/hosts"));
        assert_eq!(relative("/etc/../../x"), PathBuf::from("etc/x"));
    }
}
