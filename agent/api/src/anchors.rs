//! The field lists of the objects Flux and Argo CD users bring, checked against skewer's CRD
//! schemas: a field missing from a schema would be dropped by the API server without a word.
//! Each field is then either implemented or refused by name; the refusals are tested next to
//! the types (and, for Applications, in the reconciler's request checks).
//!
//! The lists are read from the anchors' API types: fluxcd/kustomize-controller
//! `api/v1/kustomization_types.go`, fluxcd/source-controller `api/v1/` and `api/v1beta2/`
//! `gitrepository_types.go` and `ocirepository_types.go` (2026-07), argoproj/argo-cd
//! `pkg/apis/application/v1alpha1/types.go` (2026-08) and `applicationset_types.go` (2026-11).

use kube::CustomResourceExt;
use serde_json::Value;

/// `(path below spec, fields)`; a path step into a list looks at its items.
type Fields = &'static [(&'static str, &'static [&'static str])];

const FLUX_KUSTOMIZATION: Fields = &[
    (
        "",
        &[
            "commonMetadata",
            "dependsOn",
            "decryption",
            "interval",
            "retryInterval",
            "kubeConfig",
            "path",
            "postBuild",
            "prune",
            "deletionPolicy",
            "healthChecks",
            "namePrefix",
            "nameSuffix",
            "patches",
            "images",
            "serviceAccountName",
            "sourceRef",
            "suspend",
            "targetNamespace",
            "timeout",
            "force",
            "wait",
            "buildMetadata",
            "components",
            "ignoreMissingComponents",
            "healthCheckExprs",
            "ignore",
        ],
    ),
    (
        "postBuild",
        &["substituteStrategy", "substitute", "substituteFrom"],
    ),
];

/// v1 and v1beta2 together (v1beta2 adds `gitImplementation` and `accessFrom`).
const FLUX_GIT_REPOSITORY: Fields = &[
    (
        "",
        &[
            "url",
            "secretRef",
            "provider",
            "serviceAccountName",
            "interval",
            "timeout",
            "ref",
            "verify",
            "proxySecretRef",
            "ignore",
            "suspend",
            "recurseSubmodules",
            "include",
            "sparseCheckout",
            "gitImplementation",
            "accessFrom",
        ],
    ),
    ("ref", &["branch", "tag", "semver", "name", "commit"]),
    ("verify", &["mode", "secretRef"]),
];

const FLUX_OCI_REPOSITORY: Fields = &[
    (
        "",
        &[
            "url",
            "ref",
            "layerSelector",
            "provider",
            "secretRef",
            "verify",
            "serviceAccountName",
            "certSecretRef",
            "proxySecretRef",
            "interval",
            "timeout",
            "ignore",
            "insecure",
            "suspend",
        ],
    ),
    ("ref", &["digest", "semver", "semverFilter", "tag"]),
    ("layerSelector", &["mediaType", "operation"]),
    ("verify", &["provider", "secretRef", "matchOIDCIdentity"]),
    ("verify.matchOIDCIdentity", &["issuer", "subject"]),
];

const ARGO_APPLICATION: Fields = &[
    (
        "",
        &[
            "source",
            "destination",
            "project",
            "syncPolicy",
            "ignoreDifferences",
            "info",
            "revisionHistoryLimit",
            "sources",
            "sourceHydrator",
        ],
    ),
    (
        "source",
        &[
            "repoURL",
            "path",
            "targetRevision",
            "helm",
            "kustomize",
            "directory",
            "plugin",
            "chart",
            "ref",
            "name",
            "tagPrefix",
        ],
    ),
    (
        "source.directory",
        &[
            "recurse",
            "jsonnet",
            "exclude",
            "include",
            "disableExtensionFilter",
        ],
    ),
    ("destination", &["server", "namespace", "name"]),
    (
        "syncPolicy",
        &[
            "automated",
            "syncOptions",
            "retry",
            "managedNamespaceMetadata",
        ],
    ),
    (
        "syncPolicy.automated",
        &["prune", "selfHeal", "allowEmpty", "enabled"],
    ),
    ("syncPolicy.retry", &["limit", "backoff", "refresh"]),
    (
        "syncPolicy.retry.backoff",
        &["duration", "factor", "maxDuration"],
    ),
    ("info", &["name", "value"]),
];

/// `pkg/apis/application/v1alpha1/applicationset_types.go` (the generators' own fields are
/// kept whole, as objects, and read by the reconciler).
const ARGO_APPLICATION_SET: Fields = &[
    (
        "",
        &[
            "goTemplate",
            "generators",
            "template",
            "syncPolicy",
            "strategy",
            "strategyRef",
            "preservedFields",
            "goTemplateOptions",
            "applyNestedSelectors",
            "ignoreApplicationDifferences",
            "templatePatch",
        ],
    ),
    (
        "generators",
        &[
            "list",
            "clusters",
            "git",
            "scmProvider",
            "clusterDecisionResource",
            "pullRequest",
            "matrix",
            "merge",
            "selector",
            "plugin",
        ],
    ),
    (
        "template.metadata",
        &["name", "namespace", "labels", "annotations", "finalizers"],
    ),
    (
        "syncPolicy",
        &["preserveResourcesOnDeletion", "applicationsSync"],
    ),
    ("strategy", &["type", "rollingSync", "deletionOrder"]),
    ("strategy.rollingSync", &["steps"]),
    (
        "strategy.rollingSync.steps",
        &["matchExpressions", "maxUpdate"],
    ),
    (
        "strategy.rollingSync.steps.matchExpressions",
        &["key", "operator", "values"],
    ),
];

/// The names of `fields` missing from `crd`'s schema, as `spec.<path>.<field>`.
fn missing<K: CustomResourceExt>(fields: Fields) -> Vec<String> {
    let crd = serde_json::to_value(K::crd()).expect("a CRD serialises");
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut out = Vec::new();
    for (path, names) in fields {
        let mut node = spec;
        for step in path.split('.').filter(|s| !s.is_empty()) {
            node = &node["properties"][step];
            if node["type"] == "array" {
                node = &node["items"];
            }
        }
        for name in *names {
            if !node["properties"][name].is_object() {
                let at = [path, *name].into_iter().filter(|s| !s.is_empty());
                out.push(format!("spec.{}", at.collect::<Vec<_>>().join(".")));
            }
        }
    }
    out
}

#[test]
fn every_anchor_field_is_kept_by_skewers_schemas() {
    use crate::{
        application::Application, gitrepository::GitRepository, kustomization::Kustomization,
        ocirepository::OCIRepository,
    };
    for (kind, gone) in [
        (
            "Kustomization",
            missing::<Kustomization>(FLUX_KUSTOMIZATION),
        ),
        (
            "GitRepository",
            missing::<GitRepository>(FLUX_GIT_REPOSITORY),
        ),
        (
            "OCIRepository",
            missing::<OCIRepository>(FLUX_OCI_REPOSITORY),
        ),
        ("Application", missing::<Application>(ARGO_APPLICATION)),
        (
            "ApplicationSet",
            missing::<crate::ApplicationSet>(ARGO_APPLICATION_SET),
        ),
    ] {
        assert!(
            gone.is_empty(),
            "{kind}: the API server would drop {gone:?} (not in the schema)"
        );
    }
}

#[test]
fn the_check_sees_a_missing_field() {
    const MADE_UP: Fields = &[("", &["url", "noSuchField"]), ("ref", &["branch", "nope"])];
    assert_eq!(
        missing::<crate::gitrepository::GitRepository>(MADE_UP),
        ["spec.noSuchField", "spec.ref.nope"]
    );
}

/// A spec as a Flux user writes it, read as skewer's type.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    let v: Value = serde_saphyr::from_str(yaml).expect("test YAML parses");
    serde_json::from_value(v).expect("the spec reads")
}
