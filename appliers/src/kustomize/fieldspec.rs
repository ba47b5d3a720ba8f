//! Where kustomize's transformers write: field specs (a kind filter and a path like
//! `spec/template/metadata/labels`), the walk that finds (or creates) those fields, and the
//! default tables kustomize ships for labels, annotations, namespaces, replicas and name
//! references.

use serde_json::{Map, Value};

/// A place in objects of some kinds. Empty filter parts match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSpec {
    pub group: Option<String>,
    pub version: Option<String>,
    pub kind: Option<String>,
    /// Path segments; a segment ending in `[]` is a list whose every element is walked
    /// (lists are walked implicitly anyway). `\/` escapes a slash in a key.
    pub path: Vec<String>,
    /// Create the field (and the maps above it) when missing.
    pub create: bool,
}

impl FieldSpec {
    pub fn new(path: &str, create: bool, group: &str, version: &str, kind: &str) -> Self {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Self {
            group: opt(group),
            version: opt(version),
            kind: opt(kind),
            path: split_path(path),
            create,
        }
    }

    /// Whether the spec applies to an object of this apiVersion and kind.
    pub fn selects(&self, api_version: &str, kind: &str) -> bool {
        let (group, version) = crate::object::split_api_version(api_version);
        self.group.as_deref().is_none_or(|g| g == group)
            && self.version.as_deref().is_none_or(|v| v == version)
            && self.kind.as_deref().is_none_or(|k| k == kind)
    }
}

/// Splits a field spec path on `/`, honouring `\/` inside keys.
pub fn split_path(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'/') => {
                current.push('/');
                chars.next();
            }
            '/' => out.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    out.push(current);
    out.retain(|s| !s.is_empty());
    out
}

/// Calls `f` with every field at `path` in `node` (through lists, element by element). With
/// `create`, missing maps along the way are made and a missing last field is handed to `f` as
/// `Null` (to be set); without, missing fields are skipped.
pub fn visit(node: &mut Value, path: &[String], create: bool, f: &mut dyn FnMut(&mut Value)) {
    if let Value::Array(items) = node {
        for item in items {
            visit(item, path, create, f);
        }
        return;
    }
    let Some((first, rest)) = path.split_first() else {
        f(node);
        return;
    };
    let key = first.trim_end_matches("[]");
    let Value::Object(map) = node else {
        return;
    };
    if !map.contains_key(key) {
        if !create {
            return;
        }
        let fresh = if rest.is_empty() {
            Value::Null
        } else {
            Value::Object(Map::new())
        };
        map.insert(key.to_string(), fresh);
    }
    if let Some(child) = map.get_mut(key) {
        if rest.is_empty() {
            f(child);
            // A field `f` left unset was not wanted after all.
            if child.is_null() && create {
                map.remove(key);
            }
        } else {
            visit(child, rest, create, f);
        }
    }
}

/// Specs from a table of `(path, create, group, version, kind)`.
fn table(rows: &[(&str, bool, &str, &str, &str)]) -> Vec<FieldSpec> {
    rows.iter()
        .map(|(p, c, g, v, k)| FieldSpec::new(p, *c, g, v, k))
        .collect()
}

/// Where `labels` without `includeSelectors` go: metadata, and with `includeTemplates` pod
/// templates too.
pub fn metadata_labels(templates: bool) -> Vec<FieldSpec> {
    let mut specs = table(&[("metadata/labels", true, "", "", "")]);
    if templates {
        specs.extend(pod_templates("labels", "apps"));
        // kustomize 5.5 counts volume claim templates among the templates.
        specs.push(FieldSpec::new(
            "spec/volumeClaimTemplates[]/metadata/labels",
            true,
            "apps",
            "",
            "StatefulSet",
        ));
    }
    specs
}

/// `field` (`labels` or `annotations`) of the pod templates of workloads. kustomize's tables
/// select StatefulSets by `statefulset_group` (`apps` for labels, any group for annotations).
fn pod_templates(field: &str, statefulset_group: &str) -> Vec<FieldSpec> {
    let owners = [
        ("", "v1", "ReplicationController"),
        ("", "", "Deployment"),
        ("", "", "ReplicaSet"),
        ("", "", "DaemonSet"),
        (statefulset_group, "", "StatefulSet"),
        ("batch", "", "Job"),
    ];
    let mut specs: Vec<FieldSpec> = owners
        .iter()
        .map(|(g, v, k)| FieldSpec::new(&format!("spec/template/metadata/{field}"), true, g, v, k))
        .collect();
    for path in [
        "spec/jobTemplate/metadata",
        "spec/jobTemplate/spec/template/metadata",
    ] {
        specs.push(FieldSpec::new(
            &format!("{path}/{field}"),
            true,
            "batch",
            "",
            "CronJob",
        ));
    }
    specs
}

/// Where `commonLabels` (and `labels` with `includeSelectors`) go: metadata, templates, and
/// the selectors that must keep matching them.
pub fn common_labels() -> Vec<FieldSpec> {
    let mut specs = table(&[
        ("spec/selector", true, "", "v1", "Service"),
        ("spec/selector", true, "", "v1", "ReplicationController"),
        ("spec/selector/matchLabels", true, "", "", "Deployment"),
        ("spec/selector/matchLabels", true, "", "", "ReplicaSet"),
        ("spec/selector/matchLabels", true, "", "", "DaemonSet"),
        ("spec/selector/matchLabels", true, "apps", "", "StatefulSet"),
        ("spec/selector/matchLabels", false, "batch", "", "Job"),
        (
            "spec/jobTemplate/spec/selector/matchLabels",
            false,
            "batch",
            "",
            "CronJob",
        ),
        (
            "spec/selector/matchLabels",
            false,
            "policy",
            "",
            "PodDisruptionBudget",
        ),
        (
            "spec/podSelector/matchLabels",
            false,
            "networking.k8s.io",
            "",
            "NetworkPolicy",
        ),
        (
            "spec/ingress/from/podSelector/matchLabels",
            false,
            "networking.k8s.io",
            "",
            "NetworkPolicy",
        ),
        (
            "spec/egress/to/podSelector/matchLabels",
            false,
            "networking.k8s.io",
            "",
            "NetworkPolicy",
        ),
    ]);
    for kind in ["Deployment", "StatefulSet"] {
        for path in [
            "spec/template/spec/affinity/podAffinity/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm/labelSelector/matchLabels",
            "spec/template/spec/affinity/podAffinity/requiredDuringSchedulingIgnoredDuringExecution/labelSelector/matchLabels",
            "spec/template/spec/affinity/podAntiAffinity/preferredDuringSchedulingIgnoredDuringExecution/podAffinityTerm/labelSelector/matchLabels",
            "spec/template/spec/affinity/podAntiAffinity/requiredDuringSchedulingIgnoredDuringExecution/labelSelector/matchLabels",
            "spec/template/spec/topologySpreadConstraints/labelSelector/matchLabels",
        ] {
            specs.push(FieldSpec::new(path, false, "apps", "", kind));
        }
    }
    specs.extend(metadata_labels(true));
    specs
}

/// Where `commonAnnotations` go: metadata and pod templates.
pub fn common_annotations() -> Vec<FieldSpec> {
    let mut specs = table(&[("metadata/annotations", true, "", "", "")]);
    specs.extend(pod_templates("annotations", ""));
    specs
}

/// Fields besides `metadata.namespace` that the namespace transformer sets.
pub fn namespace_fields() -> Vec<FieldSpec> {
    table(&[
        (
            "spec/service/namespace",
            true,
            "apiregistration.k8s.io",
            "",
            "APIService",
        ),
        (
            "spec/conversion/webhook/clientConfig/service/namespace",
            false,
            "apiextensions.k8s.io",
            "",
            "CustomResourceDefinition",
        ),
    ])
}

/// Where `replicas` go.
pub fn replicas() -> Vec<FieldSpec> {
    [
        "Deployment",
        "ReplicationController",
        "ReplicaSet",
        "StatefulSet",
    ]
    .iter()
    .map(|k| FieldSpec::new("spec/replicas", true, "", "", k))
    .collect()
}

/// A kind that other objects refer to by name, and where they do.
pub struct NameReference {
    pub group: &'static str,
    pub kind: &'static str,
    pub referrers: Vec<FieldSpec>,
}

/// Pod spec fields naming an object, under a workload's pod spec at `prefix`.
fn pod_spec_refs(kind: &str) -> Vec<&'static str> {
    match kind {
        "ConfigMap" => vec![
            "volumes/configMap/name",
            "containers/env/valueFrom/configMapKeyRef/name",
            "initContainers/env/valueFrom/configMapKeyRef/name",
            "containers/envFrom/configMapRef/name",
            "initContainers/envFrom/configMapRef/name",
            "volumes/projected/sources/configMap/name",
        ],
        "Secret" => vec![
            "volumes/secret/secretName",
            "containers/env/valueFrom/secretKeyRef/name",
            "initContainers/env/valueFrom/secretKeyRef/name",
            "containers/envFrom/secretRef/name",
            "initContainers/envFrom/secretRef/name",
            "imagePullSecrets/name",
            "volumes/projected/sources/secret/name",
        ],
        "ServiceAccount" => vec!["serviceAccountName"],
        "PersistentVolumeClaim" => vec!["volumes/persistentVolumeClaim/claimName"],
        "PriorityClass" => vec!["priorityClassName"],
        _ => Vec::new(),
    }
}

/// Where each kind of workload keeps its pod spec.
const POD_SPECS: [(&str, &str); 8] = [
    ("Pod", "spec"),
    ("PodTemplate", "template/spec"),
    ("Deployment", "spec/template/spec"),
    ("ReplicaSet", "spec/template/spec"),
    ("DaemonSet", "spec/template/spec"),
    ("StatefulSet", "spec/template/spec"),
    ("Job", "spec/template/spec"),
    ("CronJob", "spec/jobTemplate/spec/template/spec"),
];

fn in_pod_specs(kind: &str, also_rc: bool) -> Vec<FieldSpec> {
    let mut specs = Vec::new();
    let mut owners: Vec<(&str, &str)> = POD_SPECS.to_vec();
    if also_rc {
        owners.push(("ReplicationController", "spec/template/spec"));
    }
    for (owner, prefix) in owners {
        for path in pod_spec_refs(kind) {
            specs.push(FieldSpec::new(
                &format!("{prefix}/{path}"),
                false,
                "",
                "",
                owner,
            ));
        }
    }
    specs
}

/// The name references kustomize keeps up to date when a referenced object's name changes.
pub fn name_references() -> Vec<NameReference> {
    let scale_target = |kind: &'static str| NameReference {
        group: "",
        kind,
        referrers: table(&[(
            "spec/scaleTargetRef/name",
            false,
            "",
            "",
            "HorizontalPodAutoscaler",
        )]),
    };
    let rbac = |path: &str| {
        vec![
            FieldSpec::new(path, false, "rbac.authorization.k8s.io", "", "RoleBinding"),
            FieldSpec::new(
                path,
                false,
                "rbac.authorization.k8s.io",
                "",
                "ClusterRoleBinding",
            ),
        ]
    };
    let mut config_maps = in_pod_specs("ConfigMap", false);
    config_maps.extend(table(&[
        ("spec/configSource/configMap", false, "", "", "Node"),
        ("rules/resourceNames", false, "", "", "Role"),
        ("rules/resourceNames", false, "", "", "ClusterRole"),
        (
            "metadata/annotations/nginx.ingress.kubernetes.io\\/fastcgi-params-configmap",
            false,
            "",
            "",
            "Ingress",
        ),
    ]));
    let mut secrets = in_pod_specs("Secret", false);
    secrets.extend(table(&[
        ("spec/tls/secretName", false, "", "", "Ingress"),
        (
            "metadata/annotations/ingress.kubernetes.io\\/auth-secret",
            false,
            "",
            "",
            "Ingress",
        ),
        (
            "metadata/annotations/nginx.ingress.kubernetes.io\\/auth-secret",
            false,
            "",
            "",
            "Ingress",
        ),
        (
            "metadata/annotations/nginx.ingress.kubernetes.io\\/auth-tls-secret",
            false,
            "",
            "",
            "Ingress",
        ),
        ("imagePullSecrets/name", false, "", "", "ServiceAccount"),
        ("parameters/secretName", false, "", "", "StorageClass"),
        ("parameters/adminSecretName", false, "", "", "StorageClass"),
        ("parameters/userSecretName", false, "", "", "StorageClass"),
        ("parameters/secretRef", false, "", "", "StorageClass"),
        ("rules/resourceNames", false, "", "", "Role"),
        ("rules/resourceNames", false, "", "", "ClusterRole"),
        (
            "spec/template/spec/containers/env/valueFrom/secretKeyRef/name",
            false,
            "serving.knative.dev",
            "v1",
            "Service",
        ),
        (
            "spec/azureFile/secretName",
            false,
            "",
            "",
            "PersistentVolume",
        ),
    ]));
    let mut service_accounts = rbac("subjects");
    service_accounts.extend(in_pod_specs("ServiceAccount", true));
    let pvcs = in_pod_specs("PersistentVolumeClaim", true);
    let priority = in_pod_specs("PriorityClass", true);
    vec![
        scale_target("Deployment"),
        scale_target("ReplicationController"),
        scale_target("ReplicaSet"),
        scale_target("StatefulSet"),
        NameReference {
            group: "",
            kind: "ConfigMap",
            referrers: config_maps,
        },
        NameReference {
            group: "",
            kind: "Secret",
            referrers: secrets,
        },
        NameReference {
            group: "",
            kind: "Service",
            referrers: table(&[
                ("spec/serviceName", false, "apps", "", "StatefulSet"),
                (
                    "spec/rules/http/paths/backend/serviceName",
                    false,
                    "",
                    "",
                    "Ingress",
                ),
                ("spec/backend/serviceName", false, "", "", "Ingress"),
                (
                    "spec/rules/http/paths/backend/service/name",
                    false,
                    "",
                    "",
                    "Ingress",
                ),
                ("spec/defaultBackend/service/name", false, "", "", "Ingress"),
                (
                    "spec/service/name",
                    false,
                    "apiregistration.k8s.io",
                    "",
                    "APIService",
                ),
                (
                    "webhooks/clientConfig/service",
                    false,
                    "admissionregistration.k8s.io",
                    "",
                    "ValidatingWebhookConfiguration",
                ),
                (
                    "webhooks/clientConfig/service",
                    false,
                    "admissionregistration.k8s.io",
                    "",
                    "MutatingWebhookConfiguration",
                ),
            ]),
        },
        NameReference {
            group: "rbac.authorization.k8s.io",
            kind: "Role",
            referrers: table(&[(
                "roleRef/name",
                false,
                "rbac.authorization.k8s.io",
                "",
                "RoleBinding",
            )]),
        },
        NameReference {
            group: "rbac.authorization.k8s.io",
            kind: "ClusterRole",
            referrers: rbac("roleRef/name"),
        },
        NameReference {
            group: "",
            kind: "ServiceAccount",
            referrers: service_accounts,
        },
        NameReference {
            group: "",
            kind: "PersistentVolumeClaim",
            referrers: pvcs,
        },
        NameReference {
            group: "",
            kind: "PersistentVolume",
            referrers: table(&[
                ("spec/volumeName", false, "", "", "PersistentVolumeClaim"),
                ("rules/resourceNames", false, "", "", "ClusterRole"),
            ]),
        },
        NameReference {
            group: "storage.k8s.io",
            kind: "StorageClass",
            referrers: table(&[
                ("spec/storageClassName", false, "", "", "PersistentVolume"),
                (
                    "spec/storageClassName",
                    false,
                    "",
                    "",
                    "PersistentVolumeClaim",
                ),
                (
                    "spec/volumeClaimTemplates/spec/storageClassName",
                    false,
                    "",
                    "",
                    "StatefulSet",
                ),
            ]),
        },
        NameReference {
            group: "scheduling.k8s.io",
            kind: "PriorityClass",
            referrers: priority,
        },
        NameReference {
            group: "networking.k8s.io",
            kind: "IngressClass",
            referrers: table(&[("spec/ingressClassName", false, "", "", "Ingress")]),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_split_on_unescaped_slashes() {
        assert_eq!(
            split_path("spec/template/metadata/labels"),
            ["spec", "template", "metadata", "labels"]
        );
        assert_eq!(
            split_path("metadata/annotations/nginx.ingress.kubernetes.io\\/auth-secret"),
            [
                "metadata",
                "annotations",
                "nginx.ingress.kubernetes.io/auth-secret"
            ]
        );
    }

    #[test]
    fn visits_walk_lists_and_create_only_when_asked() {
        let mut obj = json!({"spec": {"volumes": [{"configMap": {"name": "a"}}, {"secret": {}}, {"configMap": {"name": "b"}}]}});
        let mut seen = Vec::new();
        visit(
            &mut obj,
            &split_path("spec/volumes/configMap/name"),
            false,
            &mut |v| {
                seen.push(v.clone());
                *v = json!("x");
            },
        );
        assert_eq!(seen, [json!("a"), json!("b")]);
        assert_eq!(obj["spec"]["volumes"][2]["configMap"]["name"], "x");
        assert!(obj["spec"]["volumes"][1]["secret"].get("name").is_none());

        let mut svc = json!({"spec": {}});
        visit(&mut svc, &split_path("spec/selector"), true, &mut |v| {
            if v.is_null() {
                *v = json!({});
            }
            v["app"] = json!("web");
        });
        assert_eq!(svc["spec"]["selector"], json!({"app": "web"}));
        let mut job = json!({"spec": {}});
        visit(
            &mut job,
            &split_path("spec/selector/matchLabels"),
            false,
            &mut |_| panic!("not created"),
        );
        assert_eq!(job, json!({"spec": {}}));
    }

    #[test]
    fn specs_select_by_group_version_kind() {
        let s = FieldSpec::new("spec/selector", true, "", "v1", "Service");
        assert!(s.selects("v1", "Service"));
        assert!(
            s.selects("serving.knative.dev/v1", "Service"),
            "as in kustomize, an empty group matches any group"
        );
        assert!(!s.selects("v2", "Service"));
        let any = FieldSpec::new("metadata/labels", true, "", "", "");
        assert!(any.selects("example.com/v1", "Widget"));
    }
}
