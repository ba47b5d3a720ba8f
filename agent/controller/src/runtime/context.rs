//! The [`Context`] every reconciler is handed: the hub's client, the Event recorder, the
//! metrics and settings, and typed handles to what reconcilers share (targets, drift,
//! ownership, Applications' sources, Receivers, the artifact store).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::Resource;
use kube::runtime::events::Reporter;
use skewer_appliers::message::bounded;
use skewer_sources::{GitFetcher, Store};
use tracing::warn;

use super::events::Recorder;
use super::{MAX_EVENT_NOTE, Reason, Settings, backoff};
use crate::drift::Drift;
use crate::metrics::Metrics;
use crate::ownership::Ownership;
use crate::targets::Targets;

/// What every reconciler shares.
pub struct Context {
    /// The hub, as skewer itself: reads and writes skewer's own objects.
    pub client: Client,
    /// Where objects are applied: (cluster, identity) → client, applier, drift watches.
    pub targets: Targets,
    pub store: Store,
    pub git: GitFetcher,
    recorder: Recorder,
    pub failures: backoff::Failures,
    pub drift: Drift,
    /// The sources Applications own, shared by those naming the same repository and revision.
    pub app_sources: crate::appsource::AppSources,
    /// Receivers by webhook path, for the webhook server.
    pub receivers: crate::webhook::receivers::Receivers,
    /// Which owner holds which object.
    pub ownership: Ownership,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    /// The shards this replica holds: the gate of every reconcile.
    pub shards: Arc<crate::shards::Shards>,
    /// Alerts and Providers: where events about skewer's objects are told.
    pub notifier: crate::notify::deliver::Notifier,
}

impl Context {
    /// A context on the hub: `client` is made from `hub` (skewer's own configuration, from
    /// which impersonating clients are derived); other clusters come from `registry`.
    pub async fn new(
        hub: kube::Config,
        client: Client,
        registry: Arc<crate::clusters::Registry>,
        data_dir: &std::path::Path,
        settings: Settings,
        metrics: Arc<Metrics>,
        shards: Arc<crate::shards::Shards>,
    ) -> Result<Arc<Self>, kube::Error> {
        let reporter = Reporter {
            controller: "skewer".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        let recorder = Recorder::new(
            client.clone(),
            &reporter.controller,
            reporter.instance.as_deref(),
        );
        Ok(Arc::new(Self {
            notifier: crate::notify::deliver::Notifier::new(
                Some(client.clone()),
                Some(recorder.clone()),
                reporter,
                metrics.clone(),
            ),
            recorder,
            targets: Targets::new(hub, client.clone(), registry).await?,
            client,
            store: Store::new(data_dir.join("artifacts")),
            git: GitFetcher::new(data_dir.join("git")),
            failures: backoff::Failures::default(),
            drift: Drift::default(),
            app_sources: Default::default(),
            receivers: Default::default(),
            ownership: Ownership::default(),
            metrics,
            settings,
            shards,
        }))
    }

    /// A context for one question a command asks outside the daemon (what a sync of an
    /// Application would change): the user's configuration as the hub, clusters registered
    /// by the Secrets of `cluster_secrets`, artifacts under `data_dir`, the daemon's default
    /// settings, nothing shared with a running skewer.
    pub async fn one_off(
        hub: kube::Config,
        client: Client,
        cluster_secrets: &str,
        data_dir: &std::path::Path,
    ) -> Result<Arc<Self>, kube::Error> {
        let registry = crate::clusters::Registry::new(Some(cluster_secrets));
        registry.watch(&client, Some(cluster_secrets));
        let mut settings = Settings::judging(None, true);
        settings.data_dir = data_dir.to_path_buf();
        settings.local_sources = false;
        Self::new(
            hub,
            client,
            registry,
            data_dir,
            settings,
            Arc::new(Metrics::default()),
            crate::shards::Shards::unsharded(),
        )
        .await
    }

    /// Forgets what this replica knew of `owners` (`Kind/namespace/name`) for self-heal: their
    /// shard went to another replica, which heals them from now on.
    pub fn forget_owners(&self, owners: &[String]) {
        let mut drift = self.drift.lock();
        for owner in owners {
            drift.forget_owner(owner);
        }
    }

    /// Tells the Alerts selecting `obj` what happened to it (at `revision`): queued, never
    /// waited for.
    pub fn notify<K: crate::api::Reconciled>(
        &self,
        obj: &K,
        revision: Option<&str>,
        reason: Reason,
        message: &str,
        phase: crate::notify::event::Phase,
    ) {
        use crate::notify::event::{Event as Note, InvolvedObject, Phase, REVISION_KEY, Severity};
        use kube::ResourceExt;
        if !self.notifier.listening() {
            return;
        }
        let meta = obj.meta();
        let mut metadata = std::collections::BTreeMap::new();
        if let Some(r) = revision {
            metadata.insert(REVISION_KEY.to_string(), r.to_string());
        }
        let note = Note {
            involved_object: InvolvedObject {
                kind: K::KIND.into(),
                namespace: obj.namespace().unwrap_or_default(),
                name: obj.name_any(),
                uid: meta.uid.clone().unwrap_or_default(),
                api_version: K::api_version(&()).into_owned(),
            },
            severity: if phase == Phase::Failed {
                Severity::Error
            } else {
                Severity::Info
            },
            timestamp: jiff::Timestamp::now().to_string(),
            message: bounded(message, MAX_EVENT_NOTE),
            reason: reason.as_str().into(),
            metadata,
            reporting_controller: "skewer".into(),
            reporting_instance: self.notifier.instance().to_string(),
            labels: meta.labels.clone().unwrap_or_default(),
            phase,
        };
        self.notifier.publish(&note);
    }

    /// Publishes a Kubernetes Event about `obj`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: Reason,
        note: String,
    ) {
        self.event_about(&obj.object_ref(&()), warning, reason, note)
            .await;
    }

    /// Publishes a Kubernetes Event about the object `regarding` refers to.
    pub async fn event_about(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: Reason,
        note: String,
    ) {
        let note = bounded(&note, MAX_EVENT_NOTE);
        if let Err(e) = self
            .recorder
            .publish(regarding, warning, reason.as_str(), "Reconcile", note)
            .await
        {
            warn!(error = %e, "cannot publish event");
        }
    }
}
