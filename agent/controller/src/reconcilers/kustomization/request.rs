//! A Kustomization turned into plain values, once: its schedule and timeout, its target, and
//! the [`SyncRequest`] the pipeline runs; and the pipeline's errors turned back into the
//! reasons and messages its status shows. Pure: tested without a cluster.

use skewer_appliers::substitute::Vars;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::PropagationPolicy;
use skewer_appliers::load::SourceFile;
use skewer_appliers::scope::Scope;
use skewer_appliers::sync::{HealthChecks, SyncError, SyncRequest};
use skewer_appliers::{Inventory, ObjectId};
use tokio::time::Instant;

use crate::api::Kustomization;
use crate::api::duration;
pub use crate::api::spec::{owner, patches, transform};
use crate::reconcilers::deploy::{apply_options, identity};
use crate::runtime::{Failure, Reason, Schedule, Settings};
use crate::targets::{ClusterRef, TargetKey};

/// When to reconcile again, and the bound on one reconcile; each duration's error names
/// its field.
pub fn schedule(ks: &Kustomization) -> Result<(Schedule, Duration), Failure> {
    let spec = &ks.spec;
    let optional =
        |parse: fn(&str, &str) -> Result<Duration, String>, field, value: &Option<String>| {
            value.as_deref().map(|v| parse(field, v)).transpose()
        };
    let durations = || -> Result<_, String> {
        let interval = duration::interval("interval", &spec.interval)?;
        let retry = optional(duration::interval, "retryInterval", &spec.retry_interval)?
            .unwrap_or(interval);
        let timeout = optional(duration::field, "timeout", &spec.timeout)?.unwrap_or(interval);
        Ok((Schedule { interval, retry }, timeout))
    };
    durations().map_err(Failure::invalid)
}

/// The cluster the Kustomization applies to: `spec.cluster`, `spec.kubeConfig`, or the hub.
pub fn cluster(ks: &Kustomization) -> Result<ClusterRef, String> {
    let spec = &ks.spec;
    match (&spec.cluster, &spec.kube_config) {
        (Some(_), Some(_)) => {
            Err("spec.cluster, spec.kubeConfig: give one or the other, not both".into())
        }
        (Some(name), None) if name.trim().is_empty() => {
            Err("spec.cluster: empty (name a registered cluster, or leave it out for the hub)".into())
        }
        (Some(name), None) => Ok(ClusterRef::Registered(name.clone())),
        (None, Some(kc)) => match (&kc.secret_ref, &kc.config_map_ref) {
            (_, Some(_)) => Err(
                "spec.kubeConfig.configMapRef: cloud workload identity is not supported; use secretRef"
                    .into(),
            ),
            (Some(r), None) => Ok(ClusterRef::KubeConfig {
                namespace: ks.namespace().unwrap_or_default(),
                name: r.name.clone(),
                key: r.key.clone(),
            }),
            (None, None) => Err("spec.kubeConfig: secretRef is required".into()),
        },
        (None, None) => Ok(ClusterRef::Hub),
    }
}

/// The cluster and identity the Kustomization applies to: its `serviceAccountName`, else
/// the `--default-service-account`, impersonated; else skewer itself.
pub fn target(ks: &Kustomization, settings: &Settings) -> Result<TargetKey, Failure> {
    let cluster = cluster(ks).map_err(Failure::invalid)?;
    Ok(TargetKey {
        cluster,
        identity: identity(
            &ks.namespace().unwrap_or_default(),
            ks.spec.service_account_name.as_ref(),
            settings,
        ),
    })
}

/// With `--no-cross-namespace-refs`, the source and dependencies must be in the
/// Kustomization's own namespace.
pub fn references(ks: &Kustomization, settings: &Settings) -> Result<(), Failure> {
    if settings.cross_namespace_refs {
        return Ok(());
    }
    let own = ks.namespace().unwrap_or_default();
    let named = std::iter::once(("spec.sourceRef.namespace", &ks.spec.source_ref.namespace)).chain(
        ks.spec
            .depends_on
            .iter()
            .map(|d| ("spec.dependsOn.namespace", &d.namespace)),
    );
    for (field, namespace) in named {
        if let Some(other) = namespace.as_deref().filter(|n| *n != own) {
            return Err(Failure::invalid(format!(
                "{field}: '{other}' is another namespace than this Kustomization's ('{own}'), and cross-namespace references are not allowed (--no-cross-namespace-refs)"
            )));
        }
    }
    Ok(())
}

/// The directory of the source `spec.path` names, folded (`./apps/` is `apps`); one that
/// leads outside the source is refused.
pub fn path(ks: &Kustomization) -> Result<String, Failure> {
    skewer_appliers::load::source_path(ks.spec.path.as_deref().unwrap_or_default())
        .map_err(|e| Failure::invalid(format!("spec.path: {e}")))
}

/// What one sync of `ks` does with `files`, given what it applied before (`previous`), where
/// its target allows it to act (`scope`) and its `postBuild` variables (`vars`).
pub fn build(
    ks: &Kustomization,
    files: Vec<SourceFile>,
    previous: Inventory,
    scope: Scope,
    vars: Option<Vars>,
    settings: &Settings,
    deadline: Instant,
) -> SyncRequest {
    let spec = &ks.spec;
    let apply = apply_options(owner(ks), transform(ks), spec.force, settings, deadline);
    SyncRequest {
        files,
        path: spec.path.clone().unwrap_or_default(),
        patches: patches(ks),
        apply: Arc::new(apply),
        prune: spec.prune.then_some(PropagationPolicy::Background),
        health: health_checks(ks),
        deadline,
        previous,
        scope,
        allow_empty: spec.allow_empty,
        // As Flux: no variables, no substitution (and `$$` stays as written), unless
        // `substituteStrategy: Always`.
        substitute: vars.filter(|v| {
            let always = spec
                .post_build
                .as_ref()
                .and_then(|p| p.substitute_strategy.as_deref())
                == Some("Always");
            always || !v.is_empty()
        }),
        // Read from the cluster by the caller (`decryption::load`).
        decrypt: None,
        overlay: skewer_api::spec::overlay(ks),
    }
}

/// Every applied object with `wait`, else the `healthChecks` (namespace defaulting to the
/// Kustomization's, API version to `v1`).
fn health_checks(ks: &Kustomization) -> HealthChecks {
    if ks.spec.wait {
        return HealthChecks::Applied;
    }
    if ks.spec.health_checks.is_empty() {
        return HealthChecks::None;
    }
    let objects = ks
        .spec
        .health_checks
        .iter()
        .map(|h| {
            let version = h.api_version.clone().unwrap_or_else(|| "v1".into());
            let (group, _) = skewer_appliers::object::split_api_version(&version);
            let id = ObjectId {
                namespace: h
                    .namespace
                    .clone()
                    .or_else(|| ks.namespace())
                    .unwrap_or_default(),
                name: h.name.clone(),
                group: group.to_string(),
                kind: h.kind.clone(),
            };
            (id, version)
        })
        .collect();
    HealthChecks::Objects(objects)
}

/// The status a pipeline error shows: its reason, and a message naming what failed.
pub fn failure(ks: &Kustomization, error: &SyncError) -> Failure {
    let reason = match error {
        SyncError::Apply(errs) if !errs.is_empty() && errs.iter().all(|e| e.unreachable) => {
            Reason::ClusterUnavailable
        }
        SyncError::Build(_) | SyncError::Empty { .. } => Reason::BuildFailed,
        SyncError::Plan(_) | SyncError::Record(_) | SyncError::Apply(_) | SyncError::Scope(_) => {
            Reason::ReconciliationFailed
        }
        SyncError::Prune(_) => Reason::PruneFailed,
        SyncError::Unhealthy(_) => Reason::HealthCheckFailed,
        SyncError::Conflict(_) => Reason::OwnershipConflict,
    };
    let message = match error {
        SyncError::Unhealthy(_) => {
            let timeout = ks.spec.timeout.as_deref().unwrap_or(&ks.spec.interval);
            format!("health check failed after {timeout} (spec.timeout): {error}")
        }
        SyncError::Empty { .. } => {
            format!("{error} (set spec.allowEmpty: true to let an empty path prune everything)")
        }
        _ => error.to_string(),
    };
    Failure::new(reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::KustomizationSpec;
    use serde_json::json;
    use skewer_appliers::health::{Health, HealthReport, Observed};

    fn ks(spec: serde_json::Value) -> Kustomization {
        let mut spec = spec;
        spec["sourceRef"] = json!({"kind": "GitRepository", "name": "src"});
        let spec: KustomizationSpec = serde_json::from_value(spec).unwrap();
        let mut ks = Kustomization::new("apps", spec);
        ks.metadata.namespace = Some("team".into());
        ks
    }

    fn settings() -> Settings {
        Settings::for_tests()
    }

    #[test]
    fn durations_default_to_the_interval_and_errors_name_their_field() {
        let (s, timeout) = schedule(&ks(json!({"interval": "10m"}))).unwrap();
        assert_eq!(s.interval, Duration::from_secs(600));
        assert_eq!((s.retry, timeout), (s.interval, s.interval));
        let (s, timeout) = schedule(&ks(
            json!({"interval": "10m", "retryInterval": "30s", "timeout": "2m"}),
        ))
        .unwrap();
        assert_eq!(
            (s.retry, timeout),
            (Duration::from_secs(30), Duration::from_secs(120))
        );
        for (spec, field) in [
            (
                json!({"interval": "99999999999999999999h"}),
                "spec.interval",
            ),
            (json!({"interval": "1e308h"}), "spec.interval"),
            (json!({"timeout": "-1s"}), "spec.timeout"),
            (json!({"retryInterval": "1fortnight"}), "spec.retryInterval"),
            (
                json!({"interval": "2562047h47m16.854775808s"}),
                "spec.interval",
            ),
        ] {
            let f = schedule(&ks(spec.clone())).unwrap_err();
            assert_eq!(f.reason, Reason::InvalidSpec, "{spec}");
            assert!(
                f.message.starts_with(&format!("{field}: ")),
                "{}",
                f.message
            );
        }
    }

    #[test]
    fn the_request_carries_the_spec() {
        let ks = ks(json!({
            "path": "./apps", "prune": true, "targetNamespace": "prod", "force": true,
            "commonMetadata": {"labels": {"team": "a"}},
            "patches": [{"patch": "[]", "target": {"kind": "Deployment", "labelSelector": "tier=web"}}],
        }));
        let previous = Inventory::default();
        let deadline = Instant::now() + Duration::from_secs(60);
        let scope = Scope::new(["team".to_string()].into(), false);
        let req = build(
            &ks,
            Vec::new(),
            previous,
            scope.clone(),
            Some(Vars::default()),
            &settings(),
            deadline,
        );
        assert_eq!(req.scope, scope);
        assert_eq!(
            req.substitute, None,
            "no variables, no substitution (as Flux)"
        );
        let mut always = ks.clone();
        always.spec.post_build = Some(crate::api::kustomization::PostBuild {
            substitute_strategy: Some("Always".into()),
            ..Default::default()
        });
        let req = build(
            &always,
            Vec::new(),
            Inventory::default(),
            scope.clone(),
            Some(Vars::default()),
            &settings(),
            deadline,
        );
        assert_eq!(
            req.substitute,
            Some(Vars::default()),
            "Always substitutes without variables"
        );
        assert_eq!(req.path, "./apps");
        assert_eq!(req.prune, Some(PropagationPolicy::Background));
        assert_eq!(req.apply.owner, owner(&ks));
        assert_eq!(req.apply.owner.namespace, "team");
        assert_eq!(
            req.apply.transform.target_namespace.as_deref(),
            Some("prod")
        );
        assert_eq!(req.apply.transform.labels["team"], "a");
        assert!(req.apply.force);
        assert_eq!(req.apply.field_manager, "skewer");
        assert_eq!(
            req.patches[0]
                .target
                .as_ref()
                .and_then(|t| t.label_selector.as_deref()),
            Some("tier=web")
        );
        assert_eq!(req.health, HealthChecks::None);
        assert!(req.apply.wait_timeout <= Duration::from_secs(60));
    }

    #[test]
    fn health_checks_default_their_namespace_and_version() {
        let wait = ks(json!({"wait": true}));
        assert_eq!(health_checks(&wait), HealthChecks::Applied);
        let named = ks(json!({"healthChecks": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            {"kind": "Service", "name": "db", "namespace": "data"},
        ]}));
        let HealthChecks::Objects(objects) = health_checks(&named) else {
            panic!("named checks");
        };
        assert_eq!(objects[0].0.to_string(), "team_web_apps_Deployment");
        assert_eq!(objects[0].1, "apps/v1");
        assert_eq!(objects[1].0.to_string(), "data_db__Service");
        assert_eq!(objects[1].1, "v1");
    }

    #[test]
    fn tenants_are_their_service_account_or_the_default_one() {
        let s = settings();
        assert_eq!(target(&ks(json!({})), &s).unwrap(), TargetKey::HUB);
        let tenant = ks(json!({"serviceAccountName": "deployer"}));
        let who = |ks: &Kustomization, s: &Settings| target(ks, s).unwrap().identity;
        assert_eq!(
            who(&tenant, &s).as_deref(),
            Some("system:serviceaccount:team:deployer")
        );
        let locked = Settings {
            default_service_account: Some("default".into()),
            ..settings()
        };
        assert_eq!(
            who(&ks(json!({})), &locked).as_deref(),
            Some("system:serviceaccount:team:default")
        );
        assert_eq!(
            who(&tenant, &locked).as_deref(),
            Some("system:serviceaccount:team:deployer"),
            "its own account wins"
        );
    }

    #[test]
    fn clusters_are_registered_names_or_kubeconfig_secrets() {
        assert_eq!(cluster(&ks(json!({}))), Ok(ClusterRef::Hub));
        assert_eq!(
            cluster(&ks(json!({"cluster": "spoke-a"}))),
            Ok(ClusterRef::Registered("spoke-a".into()))
        );
        assert_eq!(
            cluster(&ks(json!({"kubeConfig": {"secretRef": {"name": "kc"}}}))),
            Ok(ClusterRef::KubeConfig {
                namespace: "team".into(),
                name: "kc".into(),
                key: None
            })
        );
        for (spec, field) in [
            (
                json!({"cluster": "a", "kubeConfig": {"secretRef": {"name": "kc"}}}),
                "spec.cluster, spec.kubeConfig",
            ),
            (json!({"cluster": " "}), "spec.cluster"),
            (
                json!({"kubeConfig": {"configMapRef": {"name": "x"}}}),
                "spec.kubeConfig.configMapRef",
            ),
            (json!({"kubeConfig": {}}), "spec.kubeConfig"),
        ] {
            let e = cluster(&ks(spec.clone())).unwrap_err();
            assert!(e.starts_with(&format!("{field}: ")), "{spec}: {e}");
        }
    }

    #[test]
    fn cross_namespace_references_are_refused_when_asked() {
        let mut spec = ks(json!({"dependsOn": [{"name": "base", "namespace": "platform"}]}));
        assert!(references(&spec, &settings()).is_ok());
        let strict = Settings {
            cross_namespace_refs: false,
            ..settings()
        };
        let e = references(&spec, &strict).unwrap_err();
        assert_eq!(e.reason, Reason::InvalidSpec);
        assert!(
            e.message
                .starts_with("spec.dependsOn.namespace: 'platform'"),
            "{}",
            e.message
        );
        spec.spec.depends_on.clear();
        spec.spec.source_ref.namespace = Some("flux-system".into());
        let e = references(&spec, &strict).unwrap_err();
        assert!(
            e.message.contains("'flux-system'") && e.message.contains("'team'"),
            "{}",
            e.message
        );
        spec.spec.source_ref.namespace = Some("team".into());
        assert!(
            references(&spec, &strict).is_ok(),
            "its own namespace, named"
        );
    }

    #[test]
    fn pipeline_errors_become_reasons_and_messages() {
        let ks = ks(json!({"timeout": "2m"}));
        let build = failure(&ks, &SyncError::Build("apps/a.yaml: line 3".into()));
        assert_eq!(build.reason, Reason::BuildFailed);
        let report = HealthReport {
            objects: vec![(
                ObjectId::parse("team_web_apps_Deployment").unwrap(),
                Observed::Judged(Health::InProgress("available replicas: 0/1".into())),
            )],
        };
        let unhealthy = failure(&ks, &SyncError::Unhealthy(report));
        assert_eq!(unhealthy.reason, Reason::HealthCheckFailed);
        assert_eq!(
            unhealthy.message,
            "health check failed after 2m (spec.timeout): Deployment/team/web: in progress: available replicas: 0/1"
        );
        let pruned = failure(&ks, &SyncError::Prune(Vec::new()));
        assert_eq!(pruned.reason, Reason::PruneFailed);
        let unreachable = skewer_appliers::apply::ApplyError {
            id: None,
            object: "ConfigMap/ns/a".into(),
            origin: "a.yaml".into(),
            message: "client error (Connect)".into(),
            forbidden: false,
            unreachable: true,
            refused: false,
        };
        let down = failure(&ks, &SyncError::Apply(vec![unreachable.clone()]));
        assert_eq!(down.reason, Reason::ClusterUnavailable);
        let refused = skewer_appliers::apply::ApplyError {
            unreachable: false,
            ..unreachable.clone()
        };
        let mixed = failure(&ks, &SyncError::Apply(vec![unreachable, refused]));
        assert_eq!(mixed.reason, Reason::ReconciliationFailed);
        let record = failure(&ks, &SyncError::Record("conflict".into()));
        assert_eq!(record.reason, Reason::ReconciliationFailed);
        assert_eq!(record.message, "recording inventory: conflict");
    }
}
