//! `skewer build PATH`: what a Kustomization of PATH would apply, rendered offline (no cluster,
//! no daemon) as multi-document YAML, so that it can be read, diffed against
//! `kubectl kustomize`, or checked in CI. The source is the directory tree around PATH (the Git
//! work tree it is in, or `--source-root`), filtered as a GitRepository artifact would be; with
//! `--kustomization FILE`, that Kustomization's patches, `targetNamespace`, `commonMetadata` and
//! owner labels are applied too.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use skewer_appliers::Manifest;
use skewer_appliers::load::SourceFile;
use skewer_appliers::sync::preview;
use skewer_appliers::transform::Transform;

use skewer_api::Kustomization;
use skewer_api::spec;

/// Renders PATH; returns the YAML.
pub fn render(
    path: &Path,
    source_root: Option<&Path>,
    kustomization: Option<&Path>,
) -> Result<String> {
    let ks = kustomization.map(read_kustomization).transpose()?;
    yaml(&manifests(path, source_root, ks.as_ref())?)
}

/// Manifests as one YAML stream, each document after `---`.
pub fn yaml(manifests: &[Manifest]) -> Result<String> {
    let mut out = String::new();
    for m in manifests {
        out.push_str("---\n");
        out.push_str(
            &serde_saphyr::to_string(&m.object)
                .with_context(|| format!("writing {}", m.display()))?,
        );
    }
    Ok(out)
}

/// A local directory as a source: its root (`source_root`, else the Git work tree PATH is
/// in, else PATH), PATH relative to it, and the root's files as an artifact would hold them.
pub struct Local {
    pub files: Vec<SourceFile>,
    pub relative: String,
}

impl Local {
    pub fn read(path: &Path, source_root: Option<&Path>) -> Result<Self> {
        let root = root_of(path, source_root)?;
        let path = path
            .canonicalize()
            .with_context(|| format!("{} does not exist", path.display()))?;
        let relative = path
            .strip_prefix(&root)
            .with_context(|| {
                format!(
                    "{} is not inside the source root {}",
                    path.display(),
                    root.display()
                )
            })?
            .to_string_lossy()
            .into_owned();
        Ok(Self {
            files: read_source(&root)?,
            relative,
        })
    }
}

/// The root of the source PATH is in: `source_root`, else the Git work tree PATH is in, else
/// PATH itself.
pub fn root_of(path: &Path, source_root: Option<&Path>) -> Result<PathBuf> {
    let dir = source_root.unwrap_or(path);
    let dir = dir
        .canonicalize()
        .with_context(|| format!("{} does not exist", dir.display()))?;
    Ok(match source_root {
        Some(_) => dir,
        None => work_tree_of(&dir).unwrap_or(dir),
    })
}

/// What a Kustomization `ks` of PATH would apply (with none: the path's manifests as built,
/// without owner labels), offline.
pub fn manifests(
    path: &Path,
    source_root: Option<&Path>,
    ks: Option<&Kustomization>,
) -> Result<Vec<Manifest>> {
    let mut local = Local::read(path, source_root)?;
    if let Some(ks) = ks {
        skewer_appliers::kustomize::overlay::apply(
            &mut local.files,
            &local.relative,
            &spec::overlay(ks),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let (patches, transform, owner) = match ks {
        Some(ks) => (
            spec::patches(ks),
            spec::transform(ks),
            Some(spec::owner(ks)),
        ),
        None => (Vec::new(), Transform::default(), None),
    };
    let vars = match ks {
        Some(ks) => spec::inline_vars(ks).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => None,
    };
    if ks.is_some_and(|ks| {
        ks.spec
            .post_build
            .as_ref()
            .is_some_and(|p| !p.substitute_from.is_empty())
    }) {
        eprintln!(
            "note: spec.postBuild.substituteFrom is read from the cluster; this offline build substitutes spec.postBuild.substitute only"
        );
    }
    preview(
        &local.files,
        &local.relative,
        &patches,
        vars.as_ref(),
        &transform,
        owner.as_ref(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The Git work tree `path` is in (the nearest directory above it holding `.git`).
fn work_tree_of(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|d| d.join(".git").exists())
        .map(Path::to_path_buf)
}

/// The files of the source at `root`, filtered as a GitRepository artifact is (`.sourceignore`
/// and the default exclusions). In a Git work tree, the files Git would commit (tracked, or new
/// and not ignored); elsewhere every file but `.git`.
fn read_source(root: &Path) -> Result<Vec<SourceFile>> {
    Ok(source_files(root)?
        .into_iter()
        .map(|f| SourceFile {
            path: f.path,
            data: f.data,
        })
        .collect())
}

/// The files of the source at `root` as an artifact holds them (see [`read_source`]).
pub fn source_files(root: &Path) -> Result<Vec<skewer_sources::File>> {
    let paths = match git_files(root) {
        Some(paths) => paths,
        None => walk(root)?,
    };
    let mut files = Vec::with_capacity(paths.len());
    for relative in paths {
        let full = root.join(&relative);
        if !full.is_file() {
            continue;
        }
        files.push(skewer_sources::File {
            path: relative,
            executable: false,
            data: std::fs::read(&full).with_context(|| format!("reading {}", full.display()))?,
        });
    }
    Ok(skewer_sources::ignore::filter(files, None))
}

/// What Git would commit under `root`, if `root` is in a work tree.
fn git_files(root: &Path) -> Option<Vec<String>> {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some(
        out.stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect(),
    )
}

/// Every file under `root` but `.git`, as slash-separated relative paths.
fn walk(root: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                if entry.file_name() != ".git" {
                    stack.push(path);
                }
            } else {
                out.push(
                    path.strip_prefix(root)?
                        .to_string_lossy()
                        .replace('\\', "/"),
                );
            }
        }
    }
    Ok(out)
}

/// A Kustomization from a YAML file (skewer's or Flux's apiVersion).
pub fn read_kustomization(file: &Path) -> Result<Kustomization> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut value: serde_json::Value = skewer_appliers::load::parse_yaml(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    match value["kind"].as_str() {
        Some("Kustomization") => {}
        other => bail!("{}: kind is {other:?}, not Kustomization", file.display()),
    }
    let api_version = value["apiVersion"].as_str().unwrap_or_default();
    if !api_version.starts_with("skewer.dev/")
        && !api_version.starts_with("kustomize.toolkit.fluxcd.io/")
    {
        bail!(
            "{}: apiVersion '{api_version}' is not skewer.dev/v1alpha1 (or Flux's)",
            file.display()
        );
    }
    value["apiVersion"] = "skewer.dev/v1alpha1".into();
    serde_json::from_value(value)
        .with_context(|| format!("{}: not a Kustomization skewer understands", file.display()))
}
