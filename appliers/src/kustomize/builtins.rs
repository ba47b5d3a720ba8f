//! The `transformers` field: files of kustomize's built-in transformer configurations
//! (`apiVersion: builtin`), run after the kustomization's own transformers, in the order
//! listed. Each is one of the transformers a kustomization field drives (labels,
//! annotations, namespace, prefix, suffix, images, replicas, patches), with the field specs
//! the configuration gives. Plugins of any other kind are refused by name.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::fieldspec::{FieldSpec, visit};
use super::file::{FieldSpecArg, Image, Replica};
use super::smp::is_cluster_scoped;
use super::transform;
use super::{Error, Res};
use crate::patch::{PatchSpec, Selector, apply_patch};

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all_fields = "camelCase")]
enum Config {
    #[serde(rename = "LabelTransformer")]
    Label {
        #[serde(default)]
        labels: BTreeMap<String, String>,
        #[serde(default)]
        field_specs: Vec<FieldSpecArg>,
    },
    #[serde(rename = "AnnotationsTransformer")]
    Annotations {
        #[serde(default)]
        annotations: BTreeMap<String, String>,
        #[serde(default)]
        field_specs: Vec<FieldSpecArg>,
    },
    #[serde(rename = "PrefixTransformer")]
    Prefix {
        #[serde(default)]
        prefix: String,
        #[serde(default)]
        field_specs: Vec<FieldSpecArg>,
    },
    #[serde(rename = "SuffixTransformer")]
    Suffix {
        #[serde(default)]
        suffix: String,
        #[serde(default)]
        field_specs: Vec<FieldSpecArg>,
    },
    #[serde(rename = "NamespaceTransformer")]
    Namespace {
        #[serde(default)]
        metadata: Value,
        #[serde(default)]
        field_specs: Vec<FieldSpecArg>,
        #[serde(default)]
        unset_only: bool,
        #[serde(default)]
        set_role_binding_subjects: String,
    },
    #[serde(rename = "ImageTagTransformer")]
    ImageTag {
        image_tag: Image,
        #[serde(default)]
        field_specs: Vec<FieldSpecArg>,
    },
    #[serde(rename = "ReplicaCountTransformer")]
    ReplicaCount {
        replica: Replica,
        #[serde(default)]
        field_specs: Vec<FieldSpecArg>,
    },
    #[serde(rename = "PatchTransformer")]
    Patch {
        #[serde(default)]
        path: Option<String>,
        #[serde(default)]
        patch: Option<String>,
        #[serde(default)]
        target: Option<Selector>,
        #[serde(default)]
        options: BTreeMap<String, bool>,
    },
    #[serde(rename = "PatchStrategicMergeTransformer")]
    PatchStrategicMerge {
        #[serde(default)]
        paths: Vec<String>,
        #[serde(default)]
        patches: Option<String>,
    },
    #[serde(rename = "PatchJson6902Transformer")]
    PatchJson6902 {
        target: Selector,
        #[serde(default)]
        path: Option<String>,
        #[serde(default)]
        json_op: Option<String>,
    },
}

const KINDS: &str = "LabelTransformer, AnnotationsTransformer, PrefixTransformer, SuffixTransformer, NamespaceTransformer, ImageTagTransformer, ReplicaCountTransformer, PatchTransformer, PatchStrategicMergeTransformer, PatchJson6902Transformer";

fn specs(args: &[FieldSpecArg]) -> Vec<FieldSpec> {
    args.iter()
        .map(|f| {
            FieldSpec::new(
                &f.path,
                f.create,
                f.group.as_deref().unwrap_or(""),
                f.version.as_deref().unwrap_or(""),
                f.kind.as_deref().unwrap_or(""),
            )
        })
        .collect()
}

/// Reads a file a configuration names; `None` when there is no such file.
pub type Reader<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// Runs the configurations of one `transformers` entry (`field`, like `transformers[0]`), whose
/// documents are `docs`, on `res`.
pub fn run(
    file: &str,
    field: &str,
    docs: &[Value],
    read: &Reader<'_>,
    res: &mut Vec<Res>,
) -> Result<(), Error> {
    for (n, doc) in docs.iter().enumerate() {
        let at = if docs.len() > 1 {
            format!("{field}#{}", n + 1)
        } else {
            field.to_string()
        };
        let err = |m: String| Error::new(file, &at, m);
        let api_version = doc["apiVersion"].as_str().unwrap_or_default();
        let kind = doc["kind"].as_str().unwrap_or_default();
        if api_version != "builtin" {
            return Err(err(format!(
                "{kind} (apiVersion '{api_version}') is a plugin; only kustomize's built-in transformers (apiVersion: builtin) run"
            )));
        }
        let mut config = doc.clone();
        if let Some(m) = config.as_object_mut() {
            m.remove("apiVersion");
            if !matches!(kind, "NamespaceTransformer") {
                m.remove("metadata");
            }
        }
        let config: Config = serde_json::from_value(config).map_err(|e| {
            let message = e.to_string();
            if message.contains("unknown variant") {
                err(format!(
                    "'{kind}' is not a built-in transformer kustomize has ({KINDS})"
                ))
            } else {
                err(message)
            }
        })?;
        apply(config, res, read).map_err(err)?;
    }
    Ok(())
}

fn apply(config: Config, res: &mut Vec<Res>, read: &Reader<'_>) -> Result<(), String> {
    let patch = |res: &mut Vec<Res>, field: &str, spec: PatchSpec| {
        apply_patch(res, field, &spec).map_err(|e| e.to_string())
    };
    let content = |path: Option<String>, inline: Option<String>| -> Result<String, String> {
        match (path, inline) {
            (Some(p), None) => {
                read(&p).ok_or_else(|| format!("patch file '{p}' does not exist in the source"))
            }
            (None, Some(text)) => Ok(text),
            _ => Err("give `path` or the patch itself, one of them".into()),
        }
    };
    match config {
        Config::Label {
            labels,
            field_specs,
        } => transform::add_pairs(res, &labels, &specs(&field_specs)),
        Config::Annotations {
            annotations,
            field_specs,
        } => {
            transform::add_pairs(res, &annotations, &specs(&field_specs));
        }
        Config::Prefix {
            prefix,
            field_specs,
        } => affix(res, &prefix, "", &field_specs),
        Config::Suffix {
            suffix,
            field_specs,
        } => affix(res, "", &suffix, &field_specs),
        Config::Namespace {
            metadata,
            field_specs,
            unset_only,
            set_role_binding_subjects,
        } => {
            let namespace = metadata["namespace"].as_str().unwrap_or_default();
            namespace_with(
                res,
                namespace,
                &specs(&field_specs),
                unset_only,
                &set_role_binding_subjects,
            )?;
        }
        Config::ImageTag {
            image_tag,
            field_specs,
        } => {
            transform::images(res, &image_tag, &specs(&field_specs));
        }
        Config::ReplicaCount {
            replica,
            field_specs,
        } => {
            let fields = specs(&field_specs);
            for r in res.iter_mut().filter(|r| r.is_named(&replica.name)) {
                let (av, kind) = (r.api_version().to_string(), r.kind().to_string());
                for spec in fields.iter().filter(|s| s.selects(&av, &kind)) {
                    visit(&mut r.object, &spec.path, spec.create, &mut |v| {
                        *v = json!(replica.count)
                    });
                }
            }
        }
        Config::Patch {
            path,
            patch: inline,
            target,
            options,
        } => {
            let spec = PatchSpec {
                patch: content(path, inline)?,
                target,
                allow_name_change: options.get("allowNameChange").copied().unwrap_or(false),
            };
            patch(res, "PatchTransformer", spec)?;
        }
        Config::PatchStrategicMerge { paths, patches } => {
            // Each file's patch (a path that is no file is the patch itself), then the inline one.
            let texts = paths
                .into_iter()
                .map(|p| read(&p).unwrap_or(p))
                .chain(patches);
            for text in texts {
                let spec = PatchSpec {
                    patch: text,
                    ..Default::default()
                };
                patch(res, "PatchStrategicMergeTransformer", spec)?;
            }
        }
        Config::PatchJson6902 {
            target,
            path,
            json_op,
        } => {
            let spec = PatchSpec {
                patch: content(path, json_op)?,
                target: Some(target),
                allow_name_change: false,
            };
            patch(res, "PatchJson6902Transformer", spec)?;
        }
    }
    Ok(())
}

/// A prefix or suffix at each field spec's path; at `metadata/name` (the default) it renames.
fn affix(res: &mut [Res], prefix: &str, suffix: &str, args: &[FieldSpecArg]) {
    let mut fields = specs(args);
    if fields.is_empty() {
        fields.push(FieldSpec::new("metadata/name", false, "", "", ""));
    }
    for spec in &fields {
        let selected = res
            .iter_mut()
            .filter(|r| spec.selects(r.api_version(), r.kind()));
        if spec.path == ["metadata", "name"] {
            for r in selected {
                transform::prefix_suffix(std::slice::from_mut(r), prefix, suffix);
            }
            continue;
        }
        for r in selected {
            visit(&mut r.object, &spec.path, spec.create, &mut |v| {
                if let Some(s) = v.as_str() {
                    *v = json!(format!("{prefix}{s}{suffix}"));
                }
            });
        }
    }
}

/// The namespace transformer as configured: the namespace at each field spec (the default is
/// the kustomization's own namespace transformer), and (Cluster)RoleBinding subjects as
/// `setRoleBindingSubjects` says (`defaultOnly`, `allServiceAccounts` or `none`).
fn namespace_with(
    res: &mut [Res],
    namespace: &str,
    fields: &[FieldSpec],
    unset_only: bool,
    subjects: &str,
) -> Result<(), String> {
    if !matches!(subjects, "" | "defaultOnly" | "allServiceAccounts" | "none") {
        return Err(format!(
            "setRoleBindingSubjects: '{subjects}' is not defaultOnly, allServiceAccounts or none"
        ));
    }
    if fields.is_empty() && !unset_only && matches!(subjects, "" | "defaultOnly") {
        transform::namespace(res, namespace);
        return Ok(());
    }
    for r in res.iter_mut() {
        let (av, kind) = (r.api_version().to_string(), r.kind().to_string());
        for spec in fields.iter().filter(|s| s.selects(&av, &kind)) {
            if spec.path == ["metadata", "namespace"] {
                if !is_cluster_scoped(&av, &kind) && (!unset_only || r.namespace().is_empty()) {
                    r.set_namespace(namespace);
                }
                continue;
            }
            visit(&mut r.object, &spec.path, spec.create, &mut |v| {
                if !unset_only || v.as_str().is_none_or(str::is_empty) {
                    *v = json!(namespace);
                }
            });
        }
        if kind == "RoleBinding" || kind == "ClusterRoleBinding" {
            for s in r.object["subjects"].as_array_mut().into_iter().flatten() {
                let chosen = match subjects {
                    "none" => false,
                    "allServiceAccounts" => s["kind"] == "ServiceAccount",
                    _ => s["name"] == "default",
                };
                if chosen && (!unset_only || s["namespace"].as_str().is_none_or(str::is_empty)) {
                    s["namespace"] = json!(namespace);
                }
            }
        }
    }
    Ok(())
}
