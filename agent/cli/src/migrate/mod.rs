//! `skewer migrate`: Flux's and Argo CD's objects, read from a cluster (or from files), written
//! as skewer's with every field that does not come along named ([`convert`]); with `--apply`,
//! the originals are stopped and the objects they applied handed to skewer, in place
//! ([`handover`]).

pub mod convert;
pub mod handover;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;
use skewer_appliers::resources::{ResourceError, Resources};

pub use convert::{Converted, Judge, Plan, Tool, convert};

/// The kinds of Flux and Argo CD read from a cluster: group, versions (newest first), kind.
const KINDS: &[(&str, &[&str], &str)] = &[
    (
        "kustomize.toolkit.fluxcd.io",
        &["v1", "v1beta2"],
        "Kustomization",
    ),
    (
        "source.toolkit.fluxcd.io",
        &["v1", "v1beta2"],
        "GitRepository",
    ),
    (
        "source.toolkit.fluxcd.io",
        &["v1", "v1beta2"],
        "OCIRepository",
    ),
    (
        "source.toolkit.fluxcd.io",
        &["v1", "v1beta2"],
        "HelmRepository",
    ),
    ("source.toolkit.fluxcd.io", &["v1", "v1beta2"], "Bucket"),
    ("helm.toolkit.fluxcd.io", &["v2", "v2beta2"], "HelmRelease"),
    (
        "notification.toolkit.fluxcd.io",
        &["v1", "v1beta3", "v1beta2"],
        "Receiver",
    ),
    (
        "notification.toolkit.fluxcd.io",
        &["v1beta3", "v1beta2"],
        "Alert",
    ),
    (
        "notification.toolkit.fluxcd.io",
        &["v1beta3", "v1beta2"],
        "Provider",
    ),
    ("argoproj.io", &["v1alpha1"], "Application"),
    ("argoproj.io", &["v1alpha1"], "ApplicationSet"),
    ("argoproj.io", &["v1alpha1"], "AppProject"),
];

/// Every object of Flux's and Argo CD's kinds in `namespace` (all namespaces: `None`), and
/// Argo CD's labeled Secrets by their metadata alone (their data is never read). A kind whose
/// CRD is not installed is passed over.
pub async fn read_cluster(client: &Client, namespace: Option<&str>) -> Result<Vec<Value>> {
    let resources = Resources::new(client.clone());
    let mut out = Vec::new();
    for (group, versions, kind) in KINDS {
        for version in *versions {
            let api_version = format!("{group}/{version}");
            let resolved = match resources.resolve(&api_version, kind, &[]).await {
                Ok(r) => r,
                Err(ResourceError::Unknown { .. }) => continue,
                Err(e) => return Err(e).context(format!("finding {kind} ({api_version})")),
            };
            let api = match namespace {
                Some(ns) => resolved.api(client.clone(), ns),
                None => Api::all_with(client.clone(), &resolved.resource),
            };
            let list = api
                .list(&ListParams::default())
                .await
                .with_context(|| format!("listing {kind} ({api_version})"))?;
            for item in list.items {
                let mut v = serde_json::to_value(&item)?;
                v["apiVersion"] = api_version.clone().into();
                v["kind"] = (*kind).into();
                out.push(v);
            }
            break;
        }
    }
    let secrets: Api<Secret> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let labeled = ListParams::default().labels("argocd.argoproj.io/secret-type");
    for s in secrets.list_metadata(&labeled).await?.items {
        let mut v = serde_json::json!({"apiVersion": "v1", "kind": "Secret"});
        v["metadata"] = serde_json::to_value(&s.metadata)?;
        out.push(v);
    }
    Ok(out)
}

/// Every object in the YAML or JSON files at `paths` (a directory: its `.yaml`, `.yml` and
/// `.json` files, recursively, in name order).
pub fn read_files(paths: &[PathBuf]) -> Result<Vec<Value>> {
    let mut files = Vec::new();
    for p in paths {
        collect(p, &mut files)?;
    }
    let mut out = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        let docs = skewer_appliers::load::parse_yaml_documents(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        for doc in docs {
            match doc {
                Value::Object(_) => out.push(doc),
                Value::Null => {}
                _ => anyhow::bail!("{}: a document that is not an object", f.display()),
            }
        }
    }
    Ok(out)
}

fn collect(path: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    if !path.is_dir() {
        files.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for e in entries {
        let manifest = e
            .extension()
            .is_some_and(|x| x == "yaml" || x == "yml" || x == "json");
        if e.is_dir() {
            collect(&e, files)?;
        } else if manifest {
            files.push(e);
        }
    }
    Ok(())
}

/// The skewer objects of `plan`, as one YAML stream; each says where it came from, and what
/// did not come along, in comments.
pub fn yaml(plan: &Plan) -> Result<String> {
    let mut out = String::new();
    for c in &plan.converted {
        out.push_str("---\n");
        out.push_str(&comments(c));
        out.push_str(&serde_saphyr::to_string(&c.object)?);
    }
    Ok(out)
}

/// Writes each skewer object of `plan` to `dir/<namespace>/<kind>-<name>.yaml`; returns the
/// files written.
pub fn write(plan: &Plan, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for c in &plan.converted {
        let folder = dir.join(match c.from.namespace.as_str() {
            "" => "cluster",
            ns => ns,
        });
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("creating {}", folder.display()))?;
        let file = folder.join(format!(
            "{}-{}.yaml",
            c.from.kind.to_lowercase(),
            c.from.name
        ));
        let text = comments(c) + &serde_saphyr::to_string(&c.object)?;
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
        written.push(file);
    }
    Ok(written)
}

fn comments(c: &Converted) -> String {
    let mut out = format!("# from {}\n", c.from);
    for l in &c.lost {
        out.push_str(&format!("# NOT CARRIED: {l}\n"));
    }
    for n in &c.notes {
        out.push_str(&format!("# note: {n}\n"));
    }
    out
}

/// What `plan` carried, one object a line, and under each what did not come along and what
/// to know; then what was left out, with why.
pub fn report(plan: &Plan) -> String {
    let mut out = String::new();
    for c in &plan.converted {
        let verdict = match c.lost.len() {
            0 => "carried whole".to_string(),
            n => format!("{n} not carried"),
        };
        out.push_str(&format!(
            "{} → {}: {verdict}\n",
            c.from,
            convert::SKEWER_API
        ));
        for l in &c.lost {
            out.push_str(&format!("  not carried: {l}\n"));
        }
        for n in &c.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
    }
    for (from, why) in &plan.skipped {
        out.push_str(&format!("{from}: left out: {why}\n"));
    }
    if plan.converted.is_empty() && plan.skipped.is_empty() {
        out.push_str("no objects of Flux or Argo CD found\n");
    }
    out
}
