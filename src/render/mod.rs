//! Render: the model laid out as text through minijinja templates, as resources.
//!
//! Stage: render. Input: [`Model`] (+ inventory for switch OS flavours). Output:
//! `Vec<Resource>` with dependencies. Templates live in `templates/` and are
//! embedded in the binary (each submodule lists its own, see [`embedded`]);
//! `--templates DIR` overrides them.
//! Undefined variables are errors (strict), and templates hold no logic beyond
//! loops over lists the model prepared.

pub mod api;
pub mod common;
pub mod gpu_stack;
pub mod health;
pub mod host;
pub mod imex;
pub mod kubeadm;
pub mod kubernetes;
pub mod links;
pub mod lldp;
pub mod monitoring;
pub mod package_cache;
pub mod roce_qos;
pub mod slurm;
pub mod switch;

use std::path::Path;

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::inventory::Inventory;
use crate::model::Model;
use crate::resource::{Content, Resource, SharedDesired};

/// A template that could not be loaded or rendered.
#[derive(Debug, Error)]
pub enum RenderError {
    /// minijinja failed: syntax, undefined variable, type error.
    #[error("template `{template}`: {source}")]
    Template {
        /// Template name.
        template: String,
        /// The minijinja error.
        #[source]
        source: minijinja::Error,
    },
    /// A switch OS whose configuration is not rendered yet: an error, never a silent skip,
    /// so a deploy cannot leave a switch unconfigured without saying so.
    #[error("switch `{switch}` runs `{os}`, whose configuration toolkit does not render yet; {help}")]
    UnsupportedSwitchOs {
        /// Switch name.
        switch: String,
        /// The OS flavour from the inventory.
        os: String,
        /// What to do instead.
        help: &'static str,
    },
    /// The model lacks a value the renderer needs (only a model not built by `expand`).
    #[error("cannot render {what}: {reason}")]
    Model {
        /// What was being rendered.
        what: String,
        /// What is missing or wrong.
        reason: String,
    },
    /// A template file could not be read.
    #[error("cannot read template `{path}`: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
}

impl RenderError {
    /// How to fix it, for the diagnostic that reports it.
    #[must_use]
    pub fn help(&self) -> &'static str {
        match self {
            Self::Template { .. } => "a template refers to a value the model does not have",
            Self::UnsupportedSwitchOs { .. } => "the inventory's switch `os` names a flavour toolkit renders",
            Self::Model { .. } => "the value named above comes from the blueprint or the inventory; correct it there",
            Self::Read { .. } => "check the file under the `--templates` directory",
        }
    }
}

/// The template engine with every template loaded.
pub struct Renderer {
    env: Environment<'static>,
    /// Whether per-target file texts are kept after hashing ([`Renderer::without_texts`]).
    keep_texts: bool,
}

impl Renderer {
    /// The templates compiled into the binary.
    ///
    /// # Errors
    /// A template that does not parse.
    pub fn embedded() -> Result<Self, RenderError> {
        let mut env = new_environment();
        for (name, text) in embedded() {
            env.add_template(name, text)
                .map_err(|source| RenderError::Template { template: (*name).to_owned(), source })?;
        }
        Ok(Self { env, keep_texts: true })
    }

    /// The embedded templates, with any file of the same name under `dir` taking precedence.
    ///
    /// # Errors
    /// A file that cannot be read or does not parse.
    pub fn with_overrides(dir: &Path) -> Result<Self, RenderError> {
        let mut env = new_environment();
        for (name, text) in embedded() {
            let path = dir.join(name);
            let text = if path.exists() {
                std::fs::read_to_string(&path)
                    .map_err(|source| RenderError::Read { path: path.display().to_string(), source })?
            } else {
                (*text).to_owned()
            };
            env.add_template_owned(*name, text)
                .map_err(|source| RenderError::Template { template: (*name).to_owned(), source })?;
        }
        Ok(Self { env, keep_texts: true })
    }

    /// This renderer, hashing the texts rendered per target (each switch's FRR or NVUE
    /// configuration, each node's rail netplan) without keeping them: for a plan that
    /// neither shows their diffs nor writes them out. At 4,096 nodes they are a quarter
    /// of the plan's memory.
    #[must_use]
    pub fn without_texts(mut self) -> Self {
        self.keep_texts = false;
        self
    }

    /// Renders template `name` with `context` as the content of a per-target file:
    /// its text kept, or only its hash under [`Renderer::without_texts`].
    ///
    /// # Errors
    /// [`RenderError::Template`] naming the template.
    pub fn render_content(&self, name: &str, context: impl Serialize) -> Result<Content, RenderError> {
        if self.keep_texts {
            return Ok(Content::new(self.render(name, context)?));
        }
        // Streamed into the hash: at 4,096 nodes ~50 MB of switch and rail configs
        // are never held, grown or copied.
        let mut hashing = HashingWriter::default();
        self.template(name)?
            .render_captured_to(minijinja::value::Serde(context), &mut hashing)
            .map_err(|source| RenderError::Template { template: name.to_owned(), source })?;
        Ok(Content::of_digest(&hashing.0.finalize()))
    }

    /// `value` as pretty-printed JSON ending in a newline, the content of a per-target
    /// data file: kept, or streamed into its hash under [`Renderer::without_texts`]
    /// (at 32,768 nodes, ~75 MB of switches' cabling plans never held or grown).
    /// For plain data (strings, numbers, maps with string keys), whose serialization
    /// cannot fail; were it to, the content is the newline alone, both ways.
    #[must_use]
    pub fn json_content(&self, value: &impl Serialize) -> Content {
        if self.keep_texts {
            let mut text = serde_json::to_string_pretty(value).unwrap_or_default();
            text.push('\n');
            return Content::new(text);
        }
        // Buffered: the serializer writes a few bytes at a time.
        let mut hashing = std::io::BufWriter::with_capacity(8192, HashingWriter::default());
        let written = serde_json::to_writer_pretty(&mut hashing, value)
            .map_err(std::io::Error::from)
            .and_then(|()| std::io::Write::write_all(&mut hashing, b"\n"))
            .and_then(|()| hashing.into_inner().map_err(std::io::IntoInnerError::into_error));
        match written {
            Ok(hashing) => Content::of_digest(&hashing.0.finalize()),
            Err(_) => Content::of_digest(&Sha256::digest(b"\n")),
        }
    }

    /// Renders template `name` with `context`.
    ///
    /// # Errors
    /// [`RenderError::Template`] naming the template.
    pub fn render(&self, name: &str, context: impl Serialize) -> Result<String, RenderError> {
        self.template(name)?
            .render(minijinja::value::Serde(context))
            .map_err(|source| RenderError::Template { template: name.to_owned(), source })
    }

    fn template(&self, name: &str) -> Result<minijinja::Template<'_, '_>, RenderError> {
        self.env.get_template(name).map_err(|source| RenderError::Template { template: name.to_owned(), source })
    }
}

/// SHA-256 of what a template writes (sha2's hashes are not `io::Write`).
#[derive(Default)]
struct HashingWriter(Sha256);

impl std::io::Write for HashingWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A strict environment with Jinja's usual config-file whitespace settings; the
/// validators' expressions use the same one.
pub(crate) fn new_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // Jinja's usual config-file settings: block tags do not leave blank lines.
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    env
}

/// Renders every resource of the cluster.
///
/// # Errors
/// The first template that fails.
pub fn render(
    model: &Model,
    inventory: Option<&Inventory>,
    secrets: &slurm::Secrets,
    renderer: &Renderer,
) -> Result<Vec<Resource>, RenderError> {
    // The stages read the model and write only their own resources: they render on
    // every core at once, and their outputs join in stage order, so the resources
    // (and every plan made of them) come out as a sequential render makes them.
    // The GPU stage's plugstacks change the slurm stage's slurmd: applied after both.
    let plugstacks = std::sync::Mutex::new(gpu_stack::SlurmdPlugstacks::default());
    let proxies = package_cache::ProxySettings::of(model);
    let stages: [&Stage<'_>; 10] = [
        &|out| host::render(model, inventory, renderer, out),
        &|out| slurm::render(model, inventory, renderer, secrets, out),
        &|out| {
            let found = gpu_stack::render(model, inventory, renderer, out)?;
            *plugstacks.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = found;
            Ok(())
        },
        &|out| roce_qos::render(model, inventory, renderer, out),
        &|out| switch::render(model, inventory, renderer, out),
        &|out| lldp::render(model, inventory, renderer, out),
        &|out| monitoring::render(model, inventory, secrets, renderer, out),
        &|out| package_cache::render(model, renderer, out),
        &|out| {
            out.extend(kubeadm::render(model, inventory, &secrets.kubeadm, renderer)?);
            Ok(())
        },
        &|out| imex::render(model, inventory, renderer, out),
    ];
    // The host and switch stages (first and fifth) render per node and per switch: at
    // 4,096 nodes they are ~80% of the render. Started first, they run side by side and the small
    // stages fill in around them.
    let mut outputs = crate::parallel::ordered_longest_first(&stages, &[0, 4], |stage| {
        let mut out = Vec::new();
        // Each stage's per-node copies of the same thing become one as they are made,
        // and those changed after (`Arc::make_mut`) before the stage hands them over.
        let (outcome, mut shared) = SharedDesired::during(|| stage(&mut out));
        outcome?;
        shared.share(&mut out);
        proxies.order(&mut out);
        Ok::<_, RenderError>(out)
    });
    // slurmd is the slurm stage's: only its output is searched.
    if let Some(Ok(slurm)) = outputs.get_mut(SLURM_STAGE) {
        plugstacks.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner).apply(slurm);
    }
    let mut resources = Vec::with_capacity(outputs.iter().map(|output| output.as_ref().map_or(0, Vec::len)).sum());
    // The first failing stage in stage order: the error a sequential render reports.
    for output in outputs {
        resources.extend(output?);
    }
    Ok(resources)
}

/// The slurm stage's place in [`render`]'s stages.
const SLURM_STAGE: usize = 1;

/// One render stage: appends its resources to the vector it is given.
type Stage<'a> = dyn Fn(&mut Vec<Resource>) -> Result<(), RenderError> + Sync + 'a;

/// Every embedded template as `(name, text)`: name is its path under `templates/`.
pub fn embedded() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    host::TEMPLATES
        .iter()
        .chain(gpu_stack::TEMPLATES)
        .chain(links::TEMPLATES)
        .chain(slurm::TEMPLATES)
        .chain(switch::TEMPLATES)
        .chain(lldp::TEMPLATES)
        .chain(package_cache::TEMPLATES)
        .chain(roce_qos::TEMPLATES)
        .chain(monitoring::TEMPLATES)
        .chain(health::TEMPLATES)
        .chain(kubeadm::TEMPLATES)
        .chain(imex::TEMPLATES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::Desired;

    #[test]
    fn a_render_without_texts_fingerprints_as_one_with_them() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("blueprints").join("h200-roce-64.yaml");
        let text = std::fs::read_to_string(&path).expect("example blueprint");
        let loaded = crate::blueprint::load::load_text(&path, text).expect("loads");
        let model = crate::model::expand(&loaded.blueprint).expect("expands");
        let secrets = slurm::Secrets::default();
        let renderer = || Renderer::embedded().expect("templates");
        let with = render(&model, None, &secrets, &renderer()).expect("renders");
        let without = render(&model, None, &secrets, &renderer().without_texts()).expect("renders");
        let fingerprints = |resources: &[Resource]| {
            resources.iter().map(|resource| (resource.id.clone(), resource.desired.fingerprint())).collect::<Vec<_>>()
        };
        assert_eq!(fingerprints(&with), fingerprints(&without));
        let hashed = |resources: &[Resource]| {
            resources
                .iter()
                .filter(|resource| matches!(&*resource.desired, Desired::File { content, .. } if !content.has_text()))
                .count()
        };
        assert_eq!(hashed(&with), 0);
        assert!(hashed(&without) > 0, "the switches' FRR and the nodes' netplan are hashed only");
    }

    #[test]
    fn json_streamed_into_its_hash_fingerprints_as_the_text() {
        // Past the hashing buffer's 8 KB, with text that JSON escapes.
        let ports: std::collections::BTreeMap<String, String> =
            (0..400).map(|port| (format!("swp{port}"), format!("node{port:05} \"rail{}\"", port % 8))).collect();
        let renderer = Renderer::embedded().expect("templates");
        let kept = renderer.json_content(&ports);
        let text = serde_json::to_string_pretty(&ports).expect("plain data") + "\n";
        assert!(text.len() > 8192);
        assert_eq!(kept.text(), text);
        let hashed = renderer.without_texts().json_content(&ports);
        assert!(!hashed.has_text());
        assert_eq!(hashed.sha256(), kept.sha256());
    }
}
