//! Kustomization (Flux-shaped): apply a path of a source's artifact to a cluster.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "skewer.dev",
    version = "v1alpha1",
    kind = "Kustomization",
    namespaced,
    status = "KustomizationStatus",
    shortname = "ks",
    category = "skewer",
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".status.lastAppliedRevision"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KustomizationSpec {
    pub source_ref: SourceReference,
    /// Path inside the artifact; default the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default = "super::source::default_interval")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub interval: String,
    /// Interval after a failure; default `interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub retry_interval: Option<String>,
    /// Bound on one reconcile (apply, health checks); default `interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub timeout: Option<String>,
    #[serde(default)]
    pub prune: bool,
    /// Whether a revision whose path renders no objects may prune everything this
    /// Kustomization applied (Argo CD's `allowEmpty`). Without it such a revision is refused
    /// (`Ready=False`, nothing pruned): a commit that empties a path by mistake deletes nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_empty: bool,
    /// Wait for every applied object to be healthy.
    #[serde(default)]
    pub wait: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<NamespacedObjectKindReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<DependencyReference>,
    /// Apply (and prune, watch, read health) as this ServiceAccount of the Kustomization's
    /// namespace, by impersonation: never more than its RBAC allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// A registered cluster (the `name` of a cluster Secret); default the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// A cluster reached with the kubeconfig in a Secret of this namespace (Flux's field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<KubeConfigReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<Patch>,
    /// Decrypt files the `sops` tool encrypted (Flux's field): `provider: sops` and a Secret
    /// of this namespace holding age (`*.agekey`) and OpenPGP (`*.asc`) private keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decryption: Option<Decryption>,
    /// What happens after the build (Flux's field): variable substitution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_build: Option<PostBuild>,
    /// Recreate objects whose immutable fields changed.
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub suspend: bool,
    /// What happens to applied objects when this Kustomization is deleted:
    /// `MirrorPrune` (delete them if `prune`), `Delete`, or `Orphan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_policy: Option<String>,
    /// Kustomize's own fields (Flux's), written into the kustomization at `path` before it
    /// is built (one is made when the path has none), so references follow renamed objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_suffix: Option<String>,
    /// Images to rename, retag or pin, as kustomize's `images`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    /// Directories relative to `path`, each a kustomize Component.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<String>,
    /// Leave out `components` whose directory does not exist.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_missing_components: bool,
    /// Flux's fields skewer does not do yet, kept in the schema so that the reconciler refuses
    /// them by name (`Stalled`) instead of the API server dropping them without a word.
    #[serde(flatten)]
    pub refused: FluxOnly,
}

/// One entry of `images`: the image `name` as written in the objects, and what it becomes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Image {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tag: Option<String>,
    /// `sha256:…`; wins over `newTag`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Flux's Kustomization fields skewer refuses, each with what to do instead
/// ([`FluxOnly::refusals`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxOnly {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub build_metadata: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::any_objects")]
    pub health_check_exprs: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::any_objects")]
    pub ignore: Vec<serde_json::Value>,
}

impl FluxOnly {
    /// Each field set, with what to do instead.
    pub fn refusals(&self) -> Vec<String> {
        let kustomize = |field: &str, instead: &str| {
            format!("spec.{field} is not supported by skewer: {instead}")
        };
        let mut out = Vec::new();
        if !self.build_metadata.is_empty() {
            out.push(kustomize(
                "buildMetadata",
                "every applied object already carries skewer.dev/origin (file and document)",
            ));
        }
        if !self.health_check_exprs.is_empty() {
            out.push(kustomize("healthCheckExprs", "CEL health checks are not evaluated; use healthChecks (kstatus and the Ready condition)"));
        }
        if !self.ignore.is_empty() {
            out.push(kustomize("ignore", "drift-ignore rules are not applied; drop the field from the objects in Git, or annotate them kustomize.toolkit.fluxcd.io/ssa: IfNotPresent"));
        }
        out
    }
}

/// Flux's `decryption`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Decryption {
    /// `sops`, the only provider.
    pub provider: String,
    /// The Secret of keys, read as this Kustomization's ServiceAccount when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<super::LocalObjectReference>,
    /// Flux's identity for cloud key services: refused (skewer decrypts with age and OpenPGP
    /// keys, which need no cloud credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

/// Flux's `postBuild`: variables substituted into the built objects (`${var}`,
/// `${var:=default}`), from ConfigMaps and Secrets of the Kustomization's namespace in order
/// (a later one overrides an earlier one), then from `substitute`, which overrides them all.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostBuild {
    /// `WithVariables` (the default): substitute only when there are variables; `Always`:
    /// also when there are none (expressions with defaults, `$$` escapes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^(WithVariables|Always)$"))]
    pub substitute_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub substitute: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub substitute_from: Vec<SubstituteReference>,
}

/// A ConfigMap or Secret whose data are variables.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubstituteReference {
    /// `ConfigMap` or `Secret`.
    #[schemars(pattern(r"^(Secret|ConfigMap)$"))]
    pub kind: String,
    pub name: String,
    /// A missing object is skipped instead of failing the reconcile.
    #[serde(default)]
    pub optional: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceReference {
    /// `GitRepository` or `OCIRepository`.
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
}

/// Where a kubeconfig is kept (Flux's `kubeConfig`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeConfigReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyReference>,
    /// Flux's workload-identity form; refused (skewer runs no cloud plugins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<NameReference>,
}

/// An object of the same namespace, by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NameReference {
    pub name: String,
}

/// A Secret of the object's namespace and, optionally, one key of it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyReference {
    pub name: String,
    /// Default: `value`, else `value.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A Kustomization or an Application that must be Ready first.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DependencyReference {
    /// `Kustomization` or `Application`; by default, the kind of the object that depends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespacedObjectKindReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommonMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Patch {
    /// A JSON patch (RFC 6902) or a strategic merge patch, as YAML or JSON, applied as
    /// kustomize applies it.
    pub patch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Selector>,
}

/// Which objects a patch applies to; `name` and `namespace` are regular expressions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_selector: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<ResourceInventory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempted_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// What it deployed, newest last (the last 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<crate::history::Deployment>,
}

// Written as `objects`, a string per object, not as Flux's `entries` (an `{id, v}` object per
// object): the API server handles a status with a list of strings in a third of the time
// (1,000 objects: 12 against 32 ms per status write), and a sync writes it twice. `entries`
// is still read, and the next write clears it. Read both through `crate::inventory`.
/// What this object applied, and may prune.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInventory {
    /// One applied object each: its id `<namespace>_<name>_<group>_<kind>`, a space, and its
    /// API version (`apps_web_apps_Deployment apps/v1`).
    #[serde(default)]
    pub objects: Vec<String>,
    /// Flux's format, which skewer wrote before `objects`: read, and removed by the next write
    /// (it is serialized as `null`, which a merge patch deletes).
    #[serde(default)]
    pub entries: Option<Vec<InventoryEntry>>,
}

/// One applied object in Flux's format: id `<namespace>_<name>_<group>_<kind>` and API version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct InventoryEntry {
    pub id: String,
    pub v: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields skewer keeps in its schema only to refuse them (see `FluxOnly::refusals`).
    const REFUSED: &[&str] = &["buildMetadata", "healthCheckExprs", "ignore"];

    #[test]
    fn each_flux_field_skewer_does_not_do_is_refused_by_name() {
        // (That every Flux field is in the schema is checked in `anchors`.)
        // Each refused field, set as a Flux user writes it, is refused by name.
        let mut json = serde_json::json!({
            "sourceRef": {"kind": "GitRepository", "name": "src"},
            "interval": "1m",
            "namePrefix": "p-", "nameSuffix": "-s",
            "images": [{"name": "nginx", "newTag": "1.25"}],
            "components": ["../c"], "ignoreMissingComponents": true,
            "buildMetadata": ["originAnnotations"],
            "healthCheckExprs": [{"apiVersion": "x/v1", "kind": "X", "current": "true"}],
            "ignore": [{"paths": ["/spec/replicas"]}],
        });
        let parsed: KustomizationSpec = serde_json::from_value(json.take()).unwrap();
        let refusals = parsed.refused.refusals();
        for field in REFUSED {
            assert!(
                refusals
                    .iter()
                    .any(|r| r.starts_with(&format!("spec.{field} "))),
                "spec.{field} is not refused: {refusals:#?}"
            );
        }
        assert_eq!(refusals.len(), REFUSED.len());
        let plain: KustomizationSpec = serde_json::from_value(serde_json::json!({
            "sourceRef": {"kind": "GitRepository", "name": "src"}, "interval": "1m",
        }))
        .unwrap();
        assert!(plain.refused.refusals().is_empty());
        let typo = serde_json::from_value::<KustomizationSpec>(serde_json::json!({
            "sourceRef": {"kind": "GitRepository", "name": "src"}, "interval": "1m", "prunee": true,
        }));
        assert!(typo.is_err(), "unknown fields are still refused");
    }
}
