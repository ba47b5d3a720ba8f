//! Apply order: sync waves first (`skewer.dev/sync-wave`, or Argo CD's
//! `argocd.argoproj.io/sync-wave`), then within a wave the definitions other objects depend on
//! (Namespaces, CRDs, cluster-wide RBAC and classes), then everything else. Each wave is split
//! into those two stages; the applier waits for new CRDs between them. Prune runs in reverse.

use crate::object::Manifest;

pub const SYNC_WAVE: &str = "skewer.dev/sync-wave";
pub const ARGO_SYNC_WAVE: &str = "argocd.argoproj.io/sync-wave";

/// Rank of a kind: lower goes first. Definitions (rank < [`FIRST_STAGE_END`]) form stage one.
pub fn kind_rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "ResourceQuota" | "LimitRange" | "StorageClass" | "PriorityClass" | "RuntimeClass"
        | "IngressClass" | "PodSecurityPolicy" => 2,
        "ClusterRole" | "ClusterRoleBinding" | "APIService" => 3,
        "ServiceAccount" => 10,
        "Role" => 11,
        "RoleBinding" => 12,
        "Secret" | "ConfigMap" => 13,
        "PersistentVolume" => 14,
        "PersistentVolumeClaim" => 15,
        "Service" => 16,
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" => 17,
        "Job" | "CronJob" => 18,
        "Ingress" => 19,
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => 30,
        _ => 20,
    }
}

/// Kinds ranked below this are applied in a wave's first stage.
pub const FIRST_STAGE_END: u8 = 10;

/// The sync wave of a manifest (0 when unset or unparsable).
pub fn wave(m: &Manifest) -> i64 {
    m.annotation(SYNC_WAVE)
        .or_else(|| m.annotation(ARGO_SYNC_WAVE))
        .and_then(|w| w.trim().parse().ok())
        .unwrap_or(0)
}

/// A group of manifests applied together; the next stage starts when this one is done.
#[derive(Debug)]
pub struct Stage {
    pub wave: i64,
    /// True for the definitions stage of a wave (Namespaces, CRDs, …).
    pub definitions: bool,
    pub manifests: Vec<Manifest>,
}

/// Sorts manifests into stages, in apply order. Stable for equal keys; within a stage objects
/// are sorted by kind rank, namespace and name so output is deterministic.
pub fn stages(mut manifests: Vec<Manifest>) -> Vec<Stage> {
    manifests.sort_by(|a, b| {
        (
            wave(a),
            kind_rank(a.kind()),
            a.namespace(),
            a.name(),
            a.kind(),
        )
            .cmp(&(
                wave(b),
                kind_rank(b.kind()),
                b.namespace(),
                b.name(),
                b.kind(),
            ))
    });
    let mut out: Vec<Stage> = Vec::new();
    for m in manifests {
        let (w, def) = (wave(&m), kind_rank(m.kind()) < FIRST_STAGE_END);
        match out.last_mut() {
            Some(s) if s.wave == w && s.definitions == def => s.manifests.push(m),
            _ => out.push(Stage {
                wave: w,
                definitions: def,
                manifests: vec![m],
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(kind: &str, name: &str, wave: Option<&str>) -> Manifest {
        let mut obj = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}});
        if let Some(w) = wave {
            obj["metadata"]["annotations"] = json!({ARGO_SYNC_WAVE: w});
        }
        Manifest {
            origin: String::new(),
            object: obj,
        }
    }

    fn names(stages: &[Stage]) -> Vec<Vec<String>> {
        stages
            .iter()
            .map(|s| {
                s.manifests
                    .iter()
                    .map(|m| format!("{}/{}", m.kind(), m.name()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn definitions_first_then_the_rest() {
        let got = stages(vec![
            m("Deployment", "web", None),
            m("Widget", "w", None),
            m("CustomResourceDefinition", "widgets.example.com", None),
            m("ConfigMap", "cfg", None),
            m("Namespace", "app", None),
        ]);
        assert_eq!(
            names(&got),
            vec![
                vec![
                    "Namespace/app",
                    "CustomResourceDefinition/widgets.example.com"
                ],
                vec!["ConfigMap/cfg", "Deployment/web", "Widget/w"],
            ]
        );
        assert!(got[0].definitions && !got[1].definitions);
    }

    #[test]
    fn waves_come_before_kinds() {
        let got = stages(vec![
            m("Namespace", "late", Some("1")),
            m("ConfigMap", "early", Some("-1")),
            m("ConfigMap", "mid", None),
        ]);
        assert_eq!(
            names(&got),
            vec![
                vec!["ConfigMap/early"],
                vec!["ConfigMap/mid"],
                vec!["Namespace/late"]
            ]
        );
    }
}
