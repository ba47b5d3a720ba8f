//! Kustomization (Flux-shaped): a source object's artifact, a path in it, applied with the
//! Kustomization's own patches and options. What is particular to the kind is here, behind
//! [`Deploy`]; the reconcile itself is the one deploy path ([`super::deploy`]).

mod decryption;
pub mod request;
pub mod vars;

use std::time::Duration;

use kube::ResourceExt;
use kube::api::PropagationPolicy;
use tracing::{info, warn};

use super::dependencies::Dependency;
use super::deploy::{self, Deploy, Destination, Outcome, Place, SourceOf, Work};
use crate::api::conditions::{self, HEALTHY};
use crate::api::inventory::{from_status, to_status};
use crate::api::kustomization::ResourceInventory;
use crate::api::{Kustomization, KustomizationStatus};
use crate::runtime::{Done, Failure, Reason, Schedule, Settings};
use crate::targets::ClusterRef;

/// A Kustomization's spec, checked.
pub struct Spec {
    schedule: Schedule,
    timeout: Duration,
    /// `spec.path`, folded.
    path: String,
}

impl Deploy for Kustomization {
    type Spec = Spec;
    const NAMES_SOURCES: bool = true;

    fn spec(&self, settings: &Settings) -> Result<Spec, Failure> {
        let refused = self.spec.refused.refusals();
        if !refused.is_empty() {
            return Err(Failure::invalid(refused.join("; ")));
        }
        let (schedule, timeout) = request::schedule(self)?;
        request::references(self, settings)?;
        decryption::check(self)?;
        Ok(Spec {
            schedule,
            timeout,
            path: request::path(self)?,
        })
    }

    fn place(&self, settings: &Settings) -> Result<Place, Failure> {
        let key = request::target(self, settings)?;
        Ok(Place {
            destination: Destination::Cluster(key.cluster),
            identity: key.identity,
        })
    }

    fn schedule(spec: &Spec) -> (Schedule, Duration) {
        (spec.schedule, spec.timeout)
    }

    fn source<'a>(&'a self, _: &'a Spec) -> SourceOf<'a> {
        let s = &self.spec.source_ref;
        SourceOf::Ref {
            kind: &s.kind,
            namespace: s
                .namespace
                .clone()
                .unwrap_or_else(|| self.namespace().unwrap_or_default()),
            name: &s.name,
        }
    }

    fn reads(&self, kind: &str, ns: &str, name: &str) -> bool {
        let s = &self.spec.source_ref;
        let own = self.namespace().unwrap_or_default();
        s.kind == kind && s.name == name && s.namespace.as_deref().unwrap_or(&own) == ns
    }

    fn reads_outside_path(&self) -> bool {
        // Components are named relative to the path, and may be beside it (`../components`).
        !self.spec.components.is_empty()
    }

    fn path(spec: &Spec) -> &str {
        &spec.path
    }

    fn dependencies(&self) -> Vec<Dependency<'_>> {
        Dependency::all(&self.spec.depends_on, "Kustomization")
    }

    /// `deletionPolicy`: `Delete` prunes, `Orphan` does not, `MirrorPrune` follows `prune`.
    fn on_delete(&self, _: &Settings) -> Option<PropagationPolicy> {
        let delete = match self.spec.deletion_policy.as_deref() {
            Some("Delete") => true,
            Some("Orphan") => false,
            _ => self.spec.prune,
        };
        delete.then_some(PropagationPolicy::Background)
    }

    fn inventory(status: &KustomizationStatus) -> Option<&ResourceInventory> {
        status.inventory.as_ref()
    }

    fn inventory_mut(status: &mut KustomizationStatus) -> &mut Option<ResourceInventory> {
        &mut status.inventory
    }

    fn history_mut(status: &mut KustomizationStatus) -> &mut Vec<crate::api::history::Deployment> {
        &mut status.history
    }

    fn suspended(&self) -> bool {
        self.spec.suspend
    }

    fn fetched(status: &mut KustomizationStatus, revision: Option<&str>) {
        if let Some(r) = revision {
            status.last_attempted_revision = Some(r.into());
        }
    }

    /// `Healthy`: true after a sync whose health checks passed, false naming what failed them.
    fn concluded(&self, status: &mut KustomizationStatus, result: &Result<Done, Failure>) {
        let generation = self.metadata.generation;
        let (healthy, reason, message) = match result {
            Ok(_) => (true, Reason::Succeeded, "health checks passed"),
            Err(f) if f.reason == Reason::HealthCheckFailed => {
                (false, f.reason, f.message.as_str())
            }
            Err(_) => return,
        };
        conditions::set(
            &mut status.conditions,
            HEALTHY,
            healthy,
            reason.as_str(),
            message,
            generation,
        );
    }

    fn reads_objects(&self) -> bool {
        self.spec
            .post_build
            .as_ref()
            .is_some_and(|p| !p.substitute_from.is_empty())
    }

    async fn work(work: Work<'_, Self>, status: &mut KustomizationStatus) -> Outcome {
        sync(work, status).await.into()
    }
}

/// One sync of the Kustomization's files; records in `status` what it applied and holds.
async fn sync(
    work: Work<'_, Kustomization>,
    status: &mut KustomizationStatus,
) -> Result<Done, Failure> {
    let (ks, ctx, revision) = (work.obj, work.ctx, work.revision);
    let previous = from_status(status.inventory.as_ref());
    let scope = work.target().scope.clone();
    // Variables and decryption keys are read on the hub, as the Kustomization's own identity.
    let (vars, keys) = if ks.spec.post_build.is_some() || ks.spec.decryption.is_some() {
        let key = crate::targets::TargetKey {
            cluster: ClusterRef::Hub,
            identity: work.target().key.identity.clone(),
        };
        let hub = ctx
            .targets
            .get(&key, &ks.namespace().unwrap_or_default())
            .await
            .map_err(|e| Failure::new(Reason::ClusterUnavailable, e.to_string()))?;
        (
            vars::load(&hub.client, ks).await?,
            decryption::load(&hub.client, ks).await?,
        )
    } else {
        (None, None)
    };
    let mut request = request::build(
        ks,
        work.files,
        previous,
        scope,
        vars,
        &ctx.settings,
        work.deadline,
    );
    request.decrypt = keys;
    let report = work.sync.run(request).await;
    status.inventory = Some(to_status(&report.inventory));
    for id in &report.pruned {
        info!(object = %id.display(), "pruned");
    }
    if let Err(e) = report.result() {
        let details = e.details();
        // Status names the first few; the log has every one.
        if details.len() > skewer_appliers::message::NAMED {
            for line in &details {
                warn!(revision = %revision, "{line}");
            }
        }
        let mut failure = request::failure(ks, e);
        let cluster = &work.sync.target().key.cluster;
        if *cluster != ClusterRef::Hub {
            // Which cluster refused, or could not be reached.
            failure.message = format!("{cluster}: {}", failure.message);
        }
        return Err(failure);
    }
    info!(objects = report.planned, unchanged = report.unchanged, phases = %report.phases, "synced {revision}");
    status.last_applied_revision = Some(revision.into());
    Ok(Kustomization::done(work.spec, revision, false))
}

/// Runs the Kustomization controller until shutdown.
pub async fn run(ctx: std::sync::Arc<crate::runtime::context::Context>, namespace: Option<String>) {
    deploy::run::<Kustomization>(ctx, namespace).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::KustomizationSpec;
    use crate::reconcilers::deploy::triggers::depends_on;
    use serde_json::json;

    fn ks(spec: serde_json::Value) -> Kustomization {
        let mut spec = spec;
        spec["sourceRef"] = json!({"kind": "GitRepository", "name": "src"});
        spec["interval"] = json!("1m");
        let spec: KustomizationSpec = serde_json::from_value(spec).unwrap();
        let mut ks = Kustomization::new("apps", spec);
        ks.metadata.namespace = Some("team".into());
        ks.metadata.generation = Some(4);
        ks
    }

    #[test]
    fn fluxs_fields_it_does_not_do_stall_it_by_name() {
        let settings = Settings::for_tests();
        let e = ks(
            json!({"buildMetadata": ["originAnnotations"], "healthCheckExprs": [{"kind": "X"}]}),
        )
        .spec(&settings)
        .err()
        .unwrap();
        assert_eq!(e.reason, Reason::InvalidSpec);
        assert!(
            e.message.contains("spec.buildMetadata ")
                && e.message.contains("spec.healthCheckExprs "),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("skewer.dev/origin"),
            "says what to do instead: {}",
            e.message
        );
        let kustomize = json!({"namePrefix": "p-", "images": [{"name": "nginx", "newTag": "1"}], "components": ["../c"]});
        assert!(
            ks(kustomize).spec(&settings).is_ok(),
            "kustomize's own fields are done"
        );
    }

    #[test]
    fn decryption_is_sops_with_keys_from_a_secret() {
        let settings = Settings::for_tests();
        let message = |d: serde_json::Value| {
            ks(json!({ "decryption": d }))
                .spec(&settings)
                .err()
                .map(|e| e.message)
        };
        assert_eq!(
            message(json!({"provider": "sops", "secretRef": {"name": "keys"}})),
            None
        );
        let m = message(json!({"provider": "sops"})).unwrap();
        assert!(m.contains("spec.decryption.secretRef: required"), "{m}");
        let m = message(json!({"provider": "vault", "secretRef": {"name": "k"}})).unwrap();
        assert!(m.contains("spec.decryption.provider: 'vault'"), "{m}");
        let kms =
            json!({"provider": "sops", "secretRef": {"name": "k"}, "serviceAccountName": "kms"});
        let m = message(kms).unwrap();
        assert!(m.contains("spec.decryption.serviceAccountName"), "{m}");
    }

    #[test]
    fn only_variables_from_objects_keep_it_off_the_fast_path() {
        assert!(!ks(json!({})).reads_objects());
        assert!(!ks(json!({"postBuild": {"substitute": {"a": "b"}}})).reads_objects());
        let from =
            json!({"postBuild": {"substituteFrom": [{"kind": "ConfigMap", "name": "vars"}]}});
        assert!(ks(from).reads_objects());
    }

    #[test]
    fn the_spec_reads_into_a_schedule_a_path_and_a_place() {
        let settings = Settings::for_tests();
        let k = ks(json!({"path": "./apps/", "timeout": "30s", "serviceAccountName": "deployer"}));
        let spec = k.spec(&settings).unwrap();
        assert_eq!(Kustomization::path(&spec), "apps");
        let (schedule, timeout) = Kustomization::schedule(&spec);
        assert_eq!(
            (schedule.interval, timeout),
            (Duration::from_secs(60), Duration::from_secs(30))
        );
        assert_eq!(
            k.place(&settings).unwrap(),
            Place {
                destination: Destination::Cluster(ClusterRef::Hub),
                identity: Some("system:serviceaccount:team:deployer".into()),
            }
        );
        let broken = ks(json!({"path": "../out"}));
        assert!(
            broken
                .spec(&settings)
                .is_err_and(|f| f.message.starts_with("spec.path: "))
        );
        assert!(
            broken.place(&settings).is_ok(),
            "deletion still finds its cluster"
        );
    }

    #[test]
    fn it_reads_its_source_and_depends_on_either_kind() {
        let k = ks(
            json!({"dependsOn": [{"name": "infra"}, {"name": "db", "kind": "Application", "namespace": "data"}]}),
        );
        assert!(k.reads("GitRepository", "team", "src"));
        assert!(!k.reads("OCIRepository", "team", "src"));
        assert!(!k.reads("GitRepository", "other", "src"));
        assert!(depends_on(&k, "Kustomization", "team", "infra"));
        assert!(depends_on(&k, "Application", "data", "db"));
        assert!(!depends_on(&k, "Application", "team", "infra"));
    }

    #[test]
    fn deletion_prunes_as_the_deletion_policy_says() {
        let settings = Settings::for_tests();
        let table = [
            (json!({"prune": true}), true),
            (json!({"prune": false}), false),
            (json!({"prune": false, "deletionPolicy": "Delete"}), true),
            (json!({"prune": true, "deletionPolicy": "Orphan"}), false),
            (
                json!({"prune": true, "deletionPolicy": "MirrorPrune"}),
                true,
            ),
        ];
        for (spec, prunes) in table {
            let k = ks(spec.clone());
            assert_eq!(k.on_delete(&settings).is_some(), prunes, "{spec}");
        }
    }

    #[test]
    fn healthy_follows_the_health_checks_only() {
        let k = ks(json!({}));
        let mut status = KustomizationStatus::default();
        let healthy = |st: &KustomizationStatus| {
            st.conditions
                .iter()
                .find(|c| c.type_ == HEALTHY)
                .map(|c| (c.status.clone(), c.reason.clone()))
        };
        k.concluded(
            &mut status,
            &Err(Failure::new(Reason::ArtifactFailed, "no")),
        );
        assert_eq!(healthy(&status), None, "nothing said about health");
        let spec = k.spec(&Settings::for_tests()).unwrap();
        let done = Kustomization::done(&spec, "main@sha1:1", false);
        k.concluded(&mut status, &Ok(done));
        assert_eq!(healthy(&status), Some(("True".into(), "Succeeded".into())));
        let unhealthy = Failure::new(Reason::HealthCheckFailed, "Deployment/team/web");
        k.concluded(&mut status, &Err(unhealthy));
        assert_eq!(
            healthy(&status),
            Some(("False".into(), "HealthCheckFailed".into()))
        );
        Kustomization::fetched(&mut status, None);
        assert_eq!(status.last_attempted_revision, None);
        Kustomization::fetched(&mut status, Some("main@sha1:2"));
        assert_eq!(
            status.last_attempted_revision.as_deref(),
            Some("main@sha1:2")
        );
    }
}
