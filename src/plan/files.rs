//! `plan --out DIR`: every rendered file as it would land on each target, under
//! `DIR/<target>/<absolute path>`, and every Kubernetes object as the YAML deploy
//! applies, under `DIR/kubernetes/` (for `kubectl apply -f` or a GitOps tool). Secret
//! files are not written; `DIR/SECRETS.txt` lists them so the tree is complete in
//! what it names.
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
    let mut objects = 0;
    for resource in resources {
        if let Desired::Api(item) = &*resource.desired
            && let Some(object) = item.kubernetes()
        {
            objects += 1;
            let destination = dir.join(KUBERNETES_DIR).join(object_file(objects, object));
            if let Some(parent) = destination.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let yaml = serde_norway::to_string(&object.body).map_err(std::io::Error::other)?;
            std::fs::write(&destination, yaml)?;
            written += 1;
            continue;
        }
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

/// Where the Kubernetes objects go under the output directory, beside the targets'
/// directories (the files of a host named `kubernetes`, were there one, would share it).
pub const KUBERNETES_DIR: &str = "kubernetes";

/// `0007-clusterqueue-team-a.yaml`: numbered in the order deploy applies them (a
/// Namespace before what lives in it), since `kubectl apply -f DIR` takes the files
/// in name order; kind, namespace and name make it findable.
fn object_file(position: usize, object: &crate::resource::kube::KubeObject) -> PathBuf {
    let kind = object.kind.to_ascii_lowercase();
    let name = match &object.namespace {
        Some(namespace) => format!("{namespace}-{}", object.name),
        None => object.name.clone(),
    };
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    PathBuf::from(format!("{position:04}-{kind}-{safe}.yaml"))
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
