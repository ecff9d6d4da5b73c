//! The validator catalog: the built-in validators compiled into the binary from
//! `validators/*.yaml`, plus the user's own from a directory.
//!
//! Stage: validate (load). Input: the embedded files and, optionally, a directory
//! (`toolkit validate --validators DIR`). Output: a [`Catalog`] of checked specs in
//! run order, or every problem of every file at once. A user file with the id of a
//! built-in replaces it (to change a command for a site, e.g. where nccl-tests is
//! installed); user validators run after the built-in ones, in file name order.

use std::collections::BTreeMap;
use std::path::Path;

use super::spec::ValidatorSpec;
use crate::diagnostic::{Diagnostic, Diagnostics};
use crate::source::SourceFile;

/// The built-in validators, in the order they run: the physical fabric first, then
/// the nodes, the scheduler and storage, and the long GPU and NCCL tests last.
pub const BUILTIN: &[(&str, &str)] = &[
    ("cabling.yaml", include_str!("../../validators/cabling.yaml")),
    ("fabric-bgp.yaml", include_str!("../../validators/fabric-bgp.yaml")),
    ("rail-links.yaml", include_str!("../../validators/rail-links.yaml")),
    ("mtu.yaml", include_str!("../../validators/mtu.yaml")),
    ("roce-qos.yaml", include_str!("../../validators/roce-qos.yaml")),
    ("mounts.yaml", include_str!("../../validators/mounts.yaml")),
    ("services.yaml", include_str!("../../validators/services.yaml")),
    ("gpu-inventory.yaml", include_str!("../../validators/gpu-inventory.yaml")),
    ("gpu-health.yaml", include_str!("../../validators/gpu-health.yaml")),
    ("nvlink.yaml", include_str!("../../validators/nvlink.yaml")),
    ("scheduler.yaml", include_str!("../../validators/scheduler.yaml")),
    ("monitoring.yaml", include_str!("../../validators/monitoring.yaml")),
    ("storage-throughput.yaml", include_str!("../../validators/storage-throughput.yaml")),
    ("storage-ior.yaml", include_str!("../../validators/storage-ior.yaml")),
    ("storage-mdtest.yaml", include_str!("../../validators/storage-mdtest.yaml")),
    ("dcgm-diag.yaml", include_str!("../../validators/dcgm-diag.yaml")),
    ("nccl-single-node.yaml", include_str!("../../validators/nccl-single-node.yaml")),
    ("rdma-bandwidth.yaml", include_str!("../../validators/rdma-bandwidth.yaml")),
    ("nccl-pairwise.yaml", include_str!("../../validators/nccl-pairwise.yaml")),
    ("nccl-multi-node.yaml", include_str!("../../validators/nccl-multi-node.yaml")),
];

/// Checked validators in run order.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// The validators.
    pub specs: Vec<ValidatorSpec>,
    /// Where each came from (`validators/mtu.yaml` or the user's path), same order.
    pub origins: Vec<String>,
}

impl Catalog {
    /// The built-in validators.
    ///
    /// # Errors
    /// Diagnostics of a built-in file (a bug, caught by the tests).
    pub fn builtin() -> Result<Self, Diagnostics> {
        Self::load(None)
    }

    /// The built-in validators and, when `dir` is given, every `*.yaml` / `*.yml` in it.
    ///
    /// # Errors
    /// Every problem of every file (located), a duplicate id among the user's files,
    /// or an unreadable directory.
    pub fn load(dir: Option<&Path>) -> Result<Self, Diagnostics> {
        let mut problems = Diagnostics::default();
        let mut specs = Vec::new();
        let mut origins = Vec::new();
        for (file, text) in BUILTIN {
            let source = SourceFile::new(format!("validators/{file}"), (*text).to_owned());
            match ValidatorSpec::from_source(&source) {
                Ok(spec) => {
                    specs.push(spec);
                    origins.push(source.path.display().to_string());
                }
                Err(found) => problems.extend(found),
            }
        }
        if let Some(dir) = dir {
            let mut user: BTreeMap<String, String> = BTreeMap::new();
            for path in user_files(dir, &mut problems) {
                let source = match crate::yaml::read_text(&path) {
                    Ok(text) => SourceFile::new(&path, text),
                    Err(found) => {
                        problems.extend(found);
                        continue;
                    }
                };
                let spec = match ValidatorSpec::from_source(&source) {
                    Ok(spec) => spec,
                    Err(found) => {
                        problems.extend(found);
                        continue;
                    }
                };
                let origin = path.display().to_string();
                if let Some(first) = user.insert(spec.id.clone(), origin.clone()) {
                    problems.push(
                        Diagnostic::error("duplicate-validator", format!("validator `{}` is defined twice", spec.id))
                            .at(&source, "id")
                            .help(format!("`{first}` defines it too; keep one")),
                    );
                    continue;
                }
                if let Some(index) = specs.iter().position(|known| known.id == spec.id) {
                    tracing::info!(id = %spec.id, file = %origin, "user validator replaces the built-in one");
                    specs[index] = spec;
                    origins[index] = origin;
                } else {
                    specs.push(spec);
                    origins.push(origin);
                }
            }
        }
        if problems.has_errors() { Err(problems) } else { Ok(Self { specs, origins }) }
    }

    /// The validator called `id`.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<&ValidatorSpec> {
        self.specs.iter().find(|spec| spec.id == id)
    }

    /// Every id, in run order.
    pub fn ids(&self) -> impl Iterator<Item = &str> + Clone {
        self.specs.iter().map(|spec| spec.id.as_str())
    }
}

fn user_files(dir: &Path, problems: &mut Diagnostics) -> Vec<std::path::PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            problems.push(
                Diagnostic::error(
                    "unreadable-file",
                    format!("cannot read the validators directory `{}`: {error}", dir.display()),
                )
                .help("give a directory of validator YAML files with `--validators DIR`"),
            );
            return Vec::new();
        }
    };
    let mut files: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file() && path.extension().is_some_and(|ext| ext == "yaml" || ext == "yml"))
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_loads_and_ids_match_file_names() {
        let catalog = Catalog::builtin().unwrap_or_else(|problems| panic!("{}", problems.render()));
        assert_eq!(catalog.specs.len(), BUILTIN.len());
        for ((file, _), spec) in BUILTIN.iter().zip(&catalog.specs) {
            assert_eq!(file.strip_suffix(".yaml"), Some(spec.id.as_str()));
        }
    }

    #[test]
    fn every_file_in_validators_is_built_in() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("validators");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("validators/")
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| Path::new(name).extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = BUILTIN.iter().map(|(name, _)| (*name).to_owned()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded, "add new files to BUILTIN in src/validate/catalog.rs");
    }

    #[test]
    fn user_files_replace_builtins_and_duplicates_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mtu = BUILTIN.iter().find(|(name, _)| *name == "mtu.yaml").expect("mtu").1;
        std::fs::write(dir.path().join("mtu.yaml"), mtu.replace("title: ", "title: Site ")).expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not a validator").expect("write");
        let catalog = Catalog::load(Some(dir.path())).unwrap_or_else(|problems| panic!("{}", problems.render()));
        assert_eq!(catalog.specs.len(), BUILTIN.len());
        let index = catalog.ids().position(|id| id == "mtu").expect("mtu");
        assert!(catalog.specs[index].title.starts_with("Site "));
        assert!(catalog.origins[index].ends_with("mtu.yaml") && !catalog.origins[index].starts_with("validators/"));
        std::fs::write(dir.path().join("mtu-again.yml"), mtu).expect("write");
        let problems = Catalog::load(Some(dir.path())).expect_err("duplicate").render();
        assert!(problems.contains("validator `mtu` is defined twice"), "{problems}");
        let problems = Catalog::load(Some(&dir.path().join("missing"))).expect_err("no dir").render();
        assert!(problems.contains("cannot read the validators directory"), "{problems}");
    }
}
