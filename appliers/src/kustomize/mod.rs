//! `kustomization.yaml`, built natively: no kustomize binary, no Go. A directory holding a
//! kustomization file is built as kustomize builds it; a directory without one as Flux does
//! (every manifest under it, except that a subdirectory with its own kustomization file is
//! built as one resource).
//!
//! Each kustomization is built in kustomize's order: resources (files, and directories built
//! in turn), generators, components, then the transformers (strategic merge patches,
//! `patches`, namespace, prefix and suffix, labels, annotations, JSON 6902 patches, replicas,
//! images). Once, at the top: generated objects get their content-hash suffix, and references
//! to every renamed object are updated ([`names`]). Nothing is read from outside the source.
//! YAML is read as kustomize reads it (see [`crate::load::Dialect`]).

pub mod builtins;
pub mod fieldspec;
pub mod file;
pub mod generate;
pub mod hash;
pub mod names;
pub mod overlay;
pub mod res;
pub mod smp;
pub mod transform;
pub mod tree;

use std::fmt;

use serde_json::Value;

use self::file::Kustomization;
use self::generate::Kind;
use self::tree::{Tree, parent, resolve};
use crate::load::{Dialect, LoadError, SourceFile, normalize_path, parse_file_in};
use crate::object::Manifest;
use crate::patch::{PatchSpec, apply_patch};

pub use self::res::Res;
pub use self::tree::KUSTOMIZATION_FILES;

/// What went wrong, and where: the kustomization (or manifest) file and its field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub file: String,
    pub field: String,
    pub message: String,
}

impl Error {
    pub fn new(file: &str, field: &str, message: String) -> Self {
        Self {
            file: file.to_string(),
            field: field.to_string(),
            message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.file.is_empty(), self.field.is_empty()) {
            (false, false) => write!(f, "{}: {}: {}", self.file, self.field, self.message),
            (false, true) => write!(f, "{}: {}", self.file, self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {}

impl From<LoadError> for Error {
    fn from(e: LoadError) -> Self {
        Self::new("", "", e.to_string())
    }
}

/// The manifests of `path` in `files`: built from its kustomization file if it has one, else
/// every manifest under it (subdirectories with a kustomization file built as one resource).
pub fn render(files: &[SourceFile], path: &str) -> Result<Vec<Manifest>, Error> {
    let dir = normalize_path(path);
    let tree = Tree::new(files);
    let under = |p: &str| dir.is_empty() || p == dir || p.starts_with(&format!("{dir}/"));
    let any_kustomization = files
        .iter()
        .any(|f| under(&f.path) && KUSTOMIZATION_FILES.contains(&tree::base_name(&f.path)));
    if !any_kustomization {
        // Plain manifests: nothing to build.
        return Ok(crate::load::load(files, path)?);
    }
    if !tree.is_dir(&dir) {
        return Err(LoadError::PathNotFound(path.to_string()).into());
    }
    let mut b = Builder {
        tree,
        stack: Vec::new(),
    };
    let built = match b.tree.kustomization_in(&dir) {
        Some(file) => b.kustomization(&file)?,
        None => b.plain_dir(&dir)?,
    };
    Ok(finish(built))
}

/// The end of a build: content hashes on generated names, then references to every renamed
/// object updated.
fn finish(mut res: Vec<Res>) -> Vec<Manifest> {
    for r in res.iter_mut().filter(|r| r.hash) {
        let name = format!("{}-{}", r.name(), hash::suffix(&r.object));
        r.rename(name);
    }
    names::fix(&mut res);
    res.into_iter()
        .map(|r| Manifest {
            origin: r.origin,
            object: r.object,
        })
        .collect()
}

struct Builder<'a> {
    tree: Tree<'a>,
    /// The kustomizations being built, outermost first (to name a cycle).
    stack: Vec<String>,
}

impl Builder<'_> {
    /// A directory without a kustomization file, as Flux builds it.
    fn plain_dir(&mut self, dir: &str) -> Result<Vec<Res>, Error> {
        let mut out = Vec::new();
        for path in self.tree.files_in(dir) {
            if is_manifest(path) {
                out.extend(self.manifests(path)?);
            }
        }
        let subdirs: Vec<String> = self
            .tree
            .dirs_in(dir)
            .into_iter()
            .map(str::to_string)
            .collect();
        for sub in subdirs {
            match self.tree.kustomization_in(&sub) {
                Some(file) => out.extend(self.kustomization(&file)?),
                None => out.extend(self.plain_dir(&sub)?),
            }
        }
        Ok(out)
    }

    fn manifests(&self, path: &str) -> Result<Vec<Res>, Error> {
        let data = self.tree.file(path).unwrap_or_default();
        Ok(parse_file_in(path, data, Dialect::Kustomize)?
            .into_iter()
            .map(|m| Res::new(m.object, m.origin, false))
            .collect())
    }

    /// Builds the kustomization in file `file`.
    fn kustomization(&mut self, file: &str) -> Result<Vec<Res>, Error> {
        let k = self.parse(file)?;
        if k.kind.as_deref() == Some("Component") {
            return Err(Error::new(
                file,
                "kind",
                "a Component is listed under `components`, not built on its own".into(),
            ));
        }
        self.accumulate(file, &k, Vec::new())
    }

    fn parse(&self, file: &str) -> Result<Kustomization, Error> {
        let data = self.tree.file(file).unwrap_or_default();
        let text =
            std::str::from_utf8(data).map_err(|_| Error::new(file, "", "not UTF-8".into()))?;
        file::parse(text).map_err(|(field, message)| Error::new(file, &field, message))
    }

    /// Adds the kustomization at `file` (a Kustomization or a Component) to `res`.
    fn accumulate(
        &mut self,
        file: &str,
        k: &Kustomization,
        mut res: Vec<Res>,
    ) -> Result<Vec<Res>, Error> {
        let dir = parent(file).to_string();
        if let Some(at) = self.stack.iter().position(|d| *d == dir) {
            let mut cycle: Vec<&str> = self.stack[at..].iter().map(String::as_str).collect();
            cycle.push(&dir);
            return Err(Error::new(
                file,
                "resources",
                format!("'{dir}' includes itself: {}", cycle.join(" -> ")),
            ));
        }
        self.stack.push(dir.clone());
        let result = self.accumulate_in(file, &dir, k, &mut res);
        self.stack.pop();
        result.map(|()| res)
    }

    fn accumulate_in(
        &mut self,
        file: &str,
        dir: &str,
        k: &Kustomization,
        res: &mut Vec<Res>,
    ) -> Result<(), Error> {
        for (field, entries) in [("bases", &k.bases), ("resources", &k.resources)] {
            for (i, entry) in entries.iter().enumerate() {
                let more = self.resource(file, &format!("{field}[{i}]"), dir, entry)?;
                res.extend(more);
            }
        }
        if !k.crds.is_empty() {
            return Err(Error::new(
                file,
                "crds",
                "CRD OpenAPI definitions are not supported yet".into(),
            ));
        }
        let global = k.generator_options.as_ref();
        for (kind, generators) in [
            (Kind::ConfigMap, &k.config_map_generator),
            (Kind::Secret, &k.secret_generator),
        ] {
            for (i, g) in generators.iter().enumerate() {
                let made = generate::generate(&self.tree, file, i, g, kind, global)?;
                add_generated(
                    res,
                    made,
                    g.behavior.as_deref(),
                    file,
                    &format!("{}[{i}]", kind.field()),
                )?;
            }
        }
        for (i, entry) in k.components.iter().enumerate() {
            let field = format!("components[{i}]");
            let path = resolve(dir, entry).map_err(|m| Error::new(file, &field, m))?;
            let comp_file = self.tree.kustomization_in(&path).ok_or_else(|| {
                Error::new(
                    file,
                    &field,
                    format!("'{entry}' is not a directory with a kustomization file"),
                )
            })?;
            let comp = self.parse(&comp_file)?;
            if comp.kind.as_deref() != Some("Component") {
                return Err(Error::new(
                    file,
                    &field,
                    format!("'{entry}' is not a Component (kind: Component)"),
                ));
            }
            *res = self.accumulate(&comp_file, &comp, std::mem::take(res))?;
        }
        self.transform(file, dir, k, res)
    }

    /// One entry of `resources`: a manifest file, or a directory with a kustomization file.
    fn resource(
        &mut self,
        file: &str,
        field: &str,
        dir: &str,
        entry: &str,
    ) -> Result<Vec<Res>, Error> {
        if is_remote(entry) {
            return Err(Error::new(
                file,
                field,
                format!(
                    "'{entry}' is a remote resource; skewer builds only what is in the source (vendor it into the repository)"
                ),
            ));
        }
        let path = resolve(dir, entry).map_err(|m| Error::new(file, field, m))?;
        if self.tree.file(&path).is_some() {
            return self.manifests(&path);
        }
        if !self.tree.is_dir(&path) {
            return Err(Error::new(
                file,
                field,
                format!("'{entry}' does not exist in the source"),
            ));
        }
        let Some(sub) = self.tree.kustomization_in(&path) else {
            return Err(Error::new(
                file,
                field,
                format!("'{entry}' is a directory without a kustomization file"),
            ));
        };
        self.kustomization(&sub)
    }

    /// The transformers of one kustomization, in kustomize's order.
    fn transform(
        &self,
        file: &str,
        dir: &str,
        k: &Kustomization,
        res: &mut Vec<Res>,
    ) -> Result<(), Error> {
        let patch_err = |e: crate::patch::PatchError| {
            let (field, message) = match e {
                crate::patch::PatchError::Invalid { field, message } => (field, message),
                crate::patch::PatchError::Apply {
                    field,
                    object,
                    message,
                } => (field, format!("{object}: {message}")),
            };
            Error::new(file, &field, message)
        };
        for (i, entry) in k.patches_strategic_merge.iter().enumerate() {
            let field = format!("patchesStrategicMerge[{i}]");
            let patch = self.patch_content(file, &field, dir, Some(entry), None, true)?;
            let spec = PatchSpec {
                patch,
                target: None,
                allow_name_change: false,
            };
            apply_patch(res, &field, &spec).map_err(patch_err)?;
        }
        for (i, p) in k.patches.iter().enumerate() {
            let field = format!("patches[{i}]");
            let spec = self.patch_spec(file, &field, dir, p)?;
            apply_patch(res, &field, &spec).map_err(patch_err)?;
        }
        if let Some(ns) = k.namespace.as_deref().filter(|n| !n.is_empty()) {
            transform::namespace(res, ns);
        }
        let (prefix, suffix) = (
            k.name_prefix.as_deref().unwrap_or(""),
            k.name_suffix.as_deref().unwrap_or(""),
        );
        if !prefix.is_empty() || !suffix.is_empty() {
            transform::prefix_suffix(res, prefix, suffix);
        }
        transform::add_pairs(res, &k.common_labels, &fieldspec::common_labels());
        for (i, label) in k.labels.iter().enumerate() {
            let mut specs = if label.include_selectors {
                fieldspec::common_labels()
            } else {
                fieldspec::metadata_labels(label.include_templates)
            };
            if !label.fields.is_empty() {
                let custom: Vec<_> = label
                    .fields
                    .iter()
                    .map(|f| {
                        fieldspec::FieldSpec::new(
                            &f.path,
                            f.create,
                            f.group.as_deref().unwrap_or(""),
                            f.version.as_deref().unwrap_or(""),
                            f.kind.as_deref().unwrap_or(""),
                        )
                    })
                    .collect();
                if custom.iter().any(|s| s.path.is_empty()) {
                    return Err(Error::new(
                        file,
                        &format!("labels[{i}].fields"),
                        "a field spec needs a path".into(),
                    ));
                }
                specs.extend(custom);
            }
            transform::add_pairs(res, &label.pairs, &specs);
        }
        transform::add_pairs(res, &k.common_annotations, &fieldspec::common_annotations());
        for (i, p) in k.patches_json6902.iter().enumerate() {
            let field = format!("patchesJson6902[{i}]");
            if p.target.is_none() {
                return Err(Error::new(
                    file,
                    &field,
                    "a JSON 6902 patch needs a target".into(),
                ));
            }
            let spec = self.patch_spec(file, &field, dir, p)?;
            apply_patch(res, &field, &spec).map_err(patch_err)?;
        }
        for r in &k.replicas {
            transform::replicas(res, r);
        }
        for image in k.images.iter().chain(&k.image_tags) {
            transform::images(res, image, &[]);
        }
        for (i, entry) in k.transformers.iter().enumerate() {
            let field = format!("transformers[{i}]");
            let path = resolve(dir, entry).map_err(|m| Error::new(file, &field, m))?;
            let Some(data) = self.tree.file(&path) else {
                let what = if self.tree.is_dir(&path) {
                    "a directory (only files of configurations are supported)"
                } else {
                    "not in the source"
                };
                return Err(Error::new(file, &field, format!("'{entry}' is {what}")));
            };
            let text = String::from_utf8_lossy(data);
            let docs =
                crate::load::parse_yaml_documents(&text).map_err(|m| Error::new(&path, "", m))?;
            let read = |p: &str| {
                let full = resolve(dir, p).ok()?;
                self.tree
                    .file(&full)
                    .map(|d| String::from_utf8_lossy(d).into_owned())
            };
            builtins::run(file, &field, &docs, &read, res)?;
        }
        Ok(())
    }

    fn patch_spec(
        &self,
        file: &str,
        field: &str,
        dir: &str,
        p: &file::Patch,
    ) -> Result<PatchSpec, Error> {
        let patch =
            self.patch_content(file, field, dir, p.path.as_ref(), p.patch.as_ref(), false)?;
        let target = p.target.clone();
        let allow_name_change = p.options.as_ref().is_some_and(|o| o.allow_name_change);
        Ok(PatchSpec {
            patch,
            target,
            allow_name_change,
        })
    }

    /// A patch's text: from the file `path` names, or given inline. A `patchesStrategicMerge`
    /// entry is a path when such a file exists, else an inline patch (`inline_fallback`).
    fn patch_content(
        &self,
        file: &str,
        field: &str,
        dir: &str,
        path: Option<&String>,
        inline: Option<&String>,
        inline_fallback: bool,
    ) -> Result<String, Error> {
        match (path, inline) {
            (Some(_), Some(_)) => Err(Error::new(
                file,
                field,
                "give `path` or `patch`, not both".into(),
            )),
            (None, Some(text)) => Ok(text.clone()),
            (None, None) => Err(Error::new(
                file,
                field,
                "a patch needs `path` or `patch`".into(),
            )),
            (Some(p), None) => {
                let found = resolve(dir, p).ok().and_then(|full| self.tree.file(&full));
                match found {
                    Some(data) => String::from_utf8(data.to_vec())
                        .map_err(|_| Error::new(file, field, format!("'{p}' is not UTF-8"))),
                    None if inline_fallback && p.contains('\n') => Ok(p.clone()),
                    None => Err(Error::new(
                        file,
                        field,
                        format!("patch file '{p}' does not exist in the source"),
                    )),
                }
            }
        }
    }
}

/// Adds a generated object, as its `behavior` says: `create` a new one, or `merge` into or
/// `replace` one of the same kind and name.
fn add_generated(
    res: &mut Vec<Res>,
    made: Res,
    behavior: Option<&str>,
    file: &str,
    field: &str,
) -> Result<(), Error> {
    let existing = res.iter().position(|r| {
        r.kind() == made.kind()
            && r.is_named(made.name())
            && (made.namespace().is_empty() || r.namespace() == made.namespace())
    });
    match (behavior.unwrap_or("create"), existing) {
        ("create", None) => res.push(made),
        ("create", Some(_)) => {
            return Err(Error::new(
                file,
                field,
                format!(
                    "{} '{}' already exists; say behavior: merge or replace",
                    made.kind(),
                    made.name()
                ),
            ));
        }
        ("merge", Some(at)) => {
            let target = &mut res[at];
            for key in ["data", "binaryData"] {
                if let Some(Value::Object(new)) = made.object.get(key) {
                    let entry = target.object.as_object_mut().map(|o| {
                        o.entry(key.to_string())
                            .or_insert_with(|| Value::Object(Default::default()))
                    });
                    if let Some(Value::Object(old)) = entry {
                        old.extend(new.clone());
                    }
                }
            }
            for key in ["labels", "annotations"] {
                if let Some(Value::Object(new)) = made.object["metadata"].get(key) {
                    let meta = &mut target.object["metadata"];
                    if !meta[key].is_object() {
                        meta[key] = Value::Object(Default::default());
                    }
                    if let Value::Object(old) = &mut meta[key] {
                        old.extend(new.clone());
                    }
                }
            }
            target.hash = made.hash;
        }
        ("replace", Some(at)) => {
            let target = &mut res[at];
            let (name, namespace) = (
                target.object["metadata"]["name"].clone(),
                target.object["metadata"]["namespace"].clone(),
            );
            target.object = made.object;
            target.object["metadata"]["name"] = name;
            if !namespace.is_null() {
                target.object["metadata"]["namespace"] = namespace;
            }
            target.hash = made.hash;
        }
        ("merge" | "replace", None) => {
            return Err(Error::new(
                file,
                &format!("{field}.behavior"),
                format!(
                    "there is no {} '{}' to {}",
                    made.kind(),
                    made.name(),
                    behavior.unwrap_or_default()
                ),
            ));
        }
        (other, _) => {
            return Err(Error::new(
                file,
                &format!("{field}.behavior"),
                format!("'{other}' is not create, merge or replace"),
            ));
        }
    }
    Ok(())
}

fn is_manifest(path: &str) -> bool {
    [".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| path.ends_with(ext))
}

/// Whether a resource entry names something outside the source: a URL, or a Git location.
fn is_remote(entry: &str) -> bool {
    entry.contains("://")
        || entry.starts_with("git@")
        || entry.starts_with("github.com/")
        || entry.starts_with("gitlab.com/")
        || entry.starts_with("bitbucket.org/")
        || entry.contains("?ref=")
        || entry.contains(".git//")
}

#[cfg(test)]
mod tests;
