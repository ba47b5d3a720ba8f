//! Plain values read from skewer's objects, for every layer above the API: whose labels an
//! object's applies carry, and what a Kustomization adds to each object it applies (its
//! transform and its own patches). Pure; what the daemon and `skewer build` / `diff` share.

use kube::{Resource, ResourceExt};
use skewer_appliers::kustomize::overlay::{Image, Overlay};
use skewer_appliers::patch::{PatchSpec, Selector};
use skewer_appliers::substitute::Vars;
use skewer_appliers::transform::{Owner, Transform};

use crate::Kustomization;

/// Whose labels the objects `obj` applies carry: its name and namespace.
pub fn owner<K: Resource>(obj: &K) -> Owner {
    Owner {
        name: obj.name_any(),
        namespace: obj.namespace().unwrap_or_default(),
    }
}

/// What `ks` adds to every object: `targetNamespace` and `commonMetadata`.
pub fn transform(ks: &Kustomization) -> Transform {
    let metadata = ks.spec.common_metadata.clone().unwrap_or_default();
    Transform {
        target_namespace: ks.spec.target_namespace.clone(),
        default_namespace: None,
        labels: metadata.labels,
        annotations: metadata.annotations,
    }
}

/// What `ks` writes into the kustomization at its path: Flux's kustomize fields.
pub fn overlay(ks: &Kustomization) -> Overlay {
    let s = &ks.spec;
    Overlay {
        name_prefix: s.name_prefix.clone(),
        name_suffix: s.name_suffix.clone(),
        components: s.components.clone(),
        ignore_missing_components: s.ignore_missing_components,
        images: s
            .images
            .iter()
            .map(|i| Image {
                name: i.name.clone(),
                new_name: i.new_name.clone(),
                new_tag: i.new_tag.clone(),
                digest: i.digest.clone(),
            })
            .collect(),
    }
}

/// The patches of `ks`, as the pipeline applies them.
pub fn patches(ks: &Kustomization) -> Vec<PatchSpec> {
    ks.spec
        .patches
        .iter()
        .map(|p| PatchSpec {
            patch: p.patch.clone(),
            target: p.target.as_ref().map(|t| Selector {
                group: t.group.clone(),
                version: t.version.clone(),
                kind: t.kind.clone(),
                name: t.name.clone(),
                namespace: t.namespace.clone(),
                label_selector: t.label_selector.clone(),
                annotation_selector: t.annotation_selector.clone(),
            }),
            allow_name_change: false,
        })
        .collect()
}

/// The variables `ks` names itself (`spec.postBuild.substitute`); `None` without a
/// `postBuild`. Those of `substituteFrom` are read from the cluster by the controller, and
/// these override them.
pub fn inline_vars(ks: &Kustomization) -> Result<Option<Vars>, String> {
    let Some(post) = &ks.spec.post_build else {
        return Ok(None);
    };
    let mut vars = Vars::default();
    for (k, v) in &post.substitute {
        vars.insert(k, v, "spec.postBuild.substitute")?;
    }
    Ok(Some(vars))
}
