//! An Application turned into plain values, once: what it fetches, which files it reads, its
//! sync policy, options and retry, and where it applies. Everything skewer does not do is
//! refused here, naming the field. Pure: tested without a cluster.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::PropagationPolicy;
use skewer_appliers::directory::Directory;
use skewer_appliers::load::source_path;

use crate::api::Application;
use crate::api::duration;
use crate::api::history;
use crate::api::pin::{Pin, ROLLBACK};
use crate::appsource::Wanted;
use crate::reconcilers::deploy::{Destination, identity};
use crate::runtime::{Failure, Settings};
use crate::targets::ClusterRef;

/// The hub, as Argo CD names it.
pub const IN_CLUSTER: &str = "https://kubernetes.default.svc";
/// Argo CD's `timeout.reconciliation`.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(180);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Sync without being asked: on every change of the source, or of the spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Automated {
    pub prune: bool,
    pub self_heal: bool,
    pub allow_empty: bool,
}

/// `syncPolicy.syncOptions`.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub create_namespace: bool,
    pub prune_last: bool,
    pub propagation: PropagationPolicy,
    pub apply_out_of_sync_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            create_namespace: false,
            prune_last: false,
            propagation: PropagationPolicy::Foreground,
            apply_out_of_sync_only: false,
        }
    }
}

/// `syncPolicy.retry`: attempts after the first (`None`: without end), and the backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub limit: Option<u32>,
    pub duration: Duration,
    pub factor: u32,
    pub max: Duration,
}

impl RetryPolicy {
    /// The delay before retry `n` (1 for the first): `duration × factor^(n-1)`, at most `max`.
    pub fn delay(&self, n: u32) -> Duration {
        let times = self
            .factor
            .checked_pow(n.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.duration.saturating_mul(times).min(self.max)
    }

    /// Whether attempt `retries` + 1 may still be made.
    pub fn allows(&self, retries: u32) -> bool {
        self.limit.is_none_or(|l| retries < l)
    }
}

/// An Application's spec, checked.
#[derive(Debug, Clone)]
pub struct Spec {
    pub wanted: Wanted,
    /// Normalized: `` for the repository's root.
    pub path: String,
    /// `None`: the path is built as Argo CD detects it (a `kustomization.yaml` built natively,
    /// else the path's own manifests).
    pub directory: Option<Directory>,
    pub automated: Option<Automated>,
    pub options: Options,
    pub retry: RetryPolicy,
    pub interval: Duration,
    /// Bound on one sync's waits.
    pub timeout: Duration,
    pub destination: Destination,
    pub namespace: Option<String>,
    /// `system:serviceaccount:<ns>:<name>` to impersonate.
    pub identity: Option<String>,
    /// How many deployments `status.history` keeps.
    pub history: usize,
    /// A rollback's pin, still in force: `wanted` asks for its revision.
    pub pinned: Option<Pin>,
}

const OPTIONS: &str = "CreateNamespace=true, PruneLast=true, PrunePropagationPolicy=foreground|background|orphan, ApplyOutOfSyncOnly=true, ServerSideApply=true, Validate=false, SkipDryRunOnMissingResource=true, Replace=true, FailOnSharedResource=true";

/// Checks `app`'s spec: every field skewer cannot honour is refused by name.
pub fn spec(app: &Application, settings: &Settings) -> Result<Spec, Failure> {
    let s = &app.spec;
    let invalid = |m: String| Err(Failure::invalid(m));
    if let Some(p) = s
        .project
        .as_deref()
        .filter(|p| !p.is_empty() && *p != "default")
    {
        return invalid(format!(
            "spec.project: '{p}': projects are not supported yet; use 'default' (tenancy comes from spec.serviceAccountName)"
        ));
    }
    if !s.sources.is_empty() {
        return invalid(
            "spec.sources: applications with several sources are not supported; use spec.source"
                .into(),
        );
    }
    if !s.ignore_differences.is_empty() {
        return invalid(
            "spec.ignoreDifferences: not supported; skewer compares only the fields it applies (server-side apply), so fields set by others never show as differences"
                .into(),
        );
    }
    let Some(src) = &s.source else {
        return invalid("spec.source: required".into());
    };
    let refused = [
        (
            src.chart.is_some(),
            "spec.source.chart",
            "Helm charts are not supported",
        ),
        (
            src.helm.is_some(),
            "spec.source.helm",
            "Helm sources are not supported",
        ),
        (
            src.kustomize.is_some(),
            "spec.source.kustomize",
            "Kustomize options are not supported (a kustomization.yaml in the path is built natively, without them)",
        ),
        (
            src.plugin.is_some(),
            "spec.source.plugin",
            "config management plugins are not supported",
        ),
        (
            src.reference.is_some(),
            "spec.source.ref",
            "multi-source references are not supported",
        ),
        (
            src.directory.as_ref().is_some_and(|d| d.jsonnet.is_some()),
            "spec.source.directory.jsonnet",
            "Jsonnet is not supported",
        ),
        (
            src.directory
                .as_ref()
                .is_some_and(|d| d.disable_extension_filter),
            "spec.source.directory.disableExtensionFilter",
            "only .yaml, .yml and .json files are read; rename the files that hold objects",
        ),
        (
            src.tag_prefix.is_some(),
            "spec.source.tagPrefix",
            "not supported; write the prefix in targetRevision (a tag, or a version range over tags like v1.*)",
        ),
        (
            s.source_hydrator.is_some(),
            "spec.sourceHydrator",
            "manifest hydration is not supported; point spec.source at the rendered manifests",
        ),
        (
            s.sync_policy
                .as_ref()
                .is_some_and(|p| p.managed_namespace_metadata.is_some()),
            "spec.syncPolicy.managedNamespaceMetadata",
            "not supported",
        ),
    ];
    if let Some((_, field, why)) = refused.iter().find(|(set, ..)| *set) {
        return invalid(format!("{field}: {why}"));
    }
    if src.repo_url.trim().is_empty() {
        return invalid("spec.source.repoURL: required".into());
    }
    let directory = src
        .directory
        .as_ref()
        .map(|d| Directory::parse(d.recurse, d.include.as_deref(), d.exclude.as_deref()))
        .transpose()
        .map_err(|e| Failure::invalid(e.to_string()))?;
    let policy = s.sync_policy.clone().unwrap_or_default();
    let automated = policy
        .automated
        .as_ref()
        .filter(|a| a.enabled != Some(false))
        .map(|a| Automated {
            prune: a.prune,
            self_heal: a.self_heal,
            allow_empty: a.allow_empty,
        });
    let options = options(&policy.sync_options)?;
    let retry = retry(policy.retry.as_ref())?;
    let interval = match &s.interval {
        Some(i) => duration::interval("interval", i).map_err(Failure::invalid)?,
        None => DEFAULT_INTERVAL,
    };
    let timeout = match &s.timeout {
        Some(t) => duration::field("timeout", t).map_err(Failure::invalid)?,
        None => DEFAULT_TIMEOUT,
    };
    let d = &s.destination;
    let destination = destination(app)?;
    let identity = identity(
        &app.namespace().unwrap_or_default(),
        s.service_account_name.as_ref(),
        settings,
    );
    let history = history::limit("spec.revisionHistoryLimit", s.revision_history_limit)
        .map_err(Failure::invalid)?;
    let pinned = Pin::read(app.annotations().get(ROLLBACK).map(String::as_str), s)
        .map_err(Failure::invalid)?;
    let target_revision = match &pinned {
        Some(pin) => pin.target(),
        None => src.target_revision.clone().unwrap_or_else(|| "HEAD".into()),
    };
    Ok(Spec {
        wanted: Wanted {
            url: src.repo_url.trim().to_string(),
            target_revision,
        },
        path: source_path(src.path.as_deref().unwrap_or_default())
            .map_err(|e| Failure::invalid(format!("spec.source.path: {e}")))?,
        directory,
        automated,
        options,
        retry,
        interval,
        timeout,
        destination,
        namespace: d.namespace.clone().filter(|n| !n.is_empty()),
        identity,
        history,
        pinned,
    })
}

/// Where `app` applies: `destination.server` or `destination.name`.
pub fn destination(app: &Application) -> Result<Destination, Failure> {
    let d = &app.spec.destination;
    match (d.server.as_deref(), d.name.as_deref()) {
        (Some(_), Some(_)) => Err(Failure::invalid(
            "spec.destination: give server or name, not both (as Argo CD requires)",
        )),
        (Some(IN_CLUSTER), None) | (None, Some("in-cluster")) => {
            Ok(Destination::Cluster(ClusterRef::Hub))
        }
        (Some(server), None) if !server.trim().is_empty() => Ok(Destination::Server(server.into())),
        (None, Some(name)) if !name.trim().is_empty() => {
            Ok(Destination::Cluster(ClusterRef::Registered(name.into())))
        }
        _ => Err(Failure::invalid(
            "spec.destination: server or name is required",
        )),
    }
}

fn options(written: &[String]) -> Result<Options, Failure> {
    let mut o = Options::default();
    for (i, entry) in written.iter().enumerate() {
        let refuse = |why: &str| {
            Err(Failure::invalid(format!(
                "spec.syncPolicy.syncOptions[{i}]: '{entry}' {why} (supported: {OPTIONS})"
            )))
        };
        let Some((key, value)) = entry.split_once('=') else {
            return refuse("is not KEY=VALUE");
        };
        match (key.trim(), value.trim()) {
            ("CreateNamespace", v) => o.create_namespace = v == "true",
            ("PruneLast", v) => o.prune_last = v == "true",
            ("ApplyOutOfSyncOnly", v) => o.apply_out_of_sync_only = v == "true",
            ("PrunePropagationPolicy", "foreground") => {
                o.propagation = PropagationPolicy::Foreground
            }
            ("PrunePropagationPolicy", "background") => {
                o.propagation = PropagationPolicy::Background
            }
            ("PrunePropagationPolicy", "orphan") => o.propagation = PropagationPolicy::Orphan,
            // What skewer always does: server-side apply (nothing kept in an annotation, so
            // nothing to `Replace` for), validated by the server, a kind whose CRD is in the
            // same sync resolved from it, and an object another owner holds refused.
            ("ServerSideApply", "true")
            | ("Validate", "false" | "true")
            | ("SkipDryRunOnMissingResource", "true" | "false")
            | ("Replace", "true" | "false")
            | ("FailOnSharedResource", "true") => {}
            ("ServerSideApply", _) => {
                return refuse("is not supported: skewer always applies server-side");
            }
            _ => return refuse("is not supported"),
        }
    }
    Ok(o)
}

fn retry(r: Option<&crate::api::application::Retry>) -> Result<RetryPolicy, Failure> {
    let Some(r) = r else {
        return Ok(RetryPolicy {
            limit: Some(0),
            duration: Duration::from_secs(5),
            factor: 2,
            max: Duration::from_secs(180),
        });
    };
    let b = r.backoff.clone().unwrap_or_default();
    let field = |name: &'static str, v: &Option<String>, default: u64| match v {
        Some(v) => duration::field(name, v).map_err(Failure::invalid),
        None => Ok(Duration::from_secs(default)),
    };
    let factor = match b.factor {
        None => 2,
        Some(f) => u32::try_from(f).ok().filter(|f| *f >= 1).ok_or_else(|| {
            Failure::invalid(format!(
                "spec.syncPolicy.retry.backoff.factor: {f} is not a whole number from 1 up"
            ))
        })?,
    };
    Ok(RetryPolicy {
        // Argo CD: a negative limit retries without end; no limit means 5... unless retry is
        // absent altogether (handled above).
        limit: match r.limit {
            None => Some(5),
            Some(l) if l < 0 => None,
            Some(l) => Some(u32::try_from(l).unwrap_or(u32::MAX)),
        },
        duration: field("syncPolicy.retry.backoff.duration", &b.duration, 5)?,
        factor,
        max: field("syncPolicy.retry.backoff.maxDuration", &b.max_duration, 180)?,
    })
}

/// Resource hooks (Argo CD's and Helm's annotations) are refused: skewer would otherwise apply a
/// PreSync Job as an ordinary object. The first one found, named with its file.
pub fn hook(manifests: &[skewer_appliers::Manifest]) -> Option<String> {
    const HOOKS: [&str; 2] = ["argocd.argoproj.io/hook", "helm.sh/hook"];
    manifests.iter().find_map(|m| {
        HOOKS.iter().find_map(|key| {
            m.annotation(key).map(|phase| {
                format!(
                    "{} ({}): annotation {key}: {phase}: resource hooks are not supported (apply it as an ordinary object, ordered by sync waves, or run it outside skewer)",
                    m.display(),
                    m.origin
                )
            })
        })
    })
}

/// The propagation of prune when enabled, as the pipeline takes it.
pub fn prune(spec: &Spec) -> Option<PropagationPolicy> {
    spec.automated
        .filter(|a| a.prune)
        .map(|_| spec.options.propagation.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application::ApplicationSpec;

    fn app(yaml: &str) -> Application {
        let spec: ApplicationSpec = serde_saphyr::from_str(yaml).unwrap();
        let mut app = Application::new("do-cluster-dev-team-a", spec);
        app.metadata.namespace = Some("argocd".into());
        app
    }

    fn settings() -> Settings {
        Settings::for_tests()
    }

    const GUIDE: &str = r#"
destination: {namespace: pulumi-operator, server: https://kubernetes.default.svc}
source:
  path: gitops/teams/clusters/do-cluster-dev-cluster
  directory: {recurse: false, exclude: '{catalog-info.yaml}'}
  targetRevision: main
  repoURL: https://github.com/example/platform.git
syncPolicy:
  automated: {prune: true, selfHeal: true}
  syncOptions: [ServerSideApply=true, CreateNamespace=true]
"#;

    #[test]
    fn the_platform_guides_application_reads_as_written() {
        let s = spec(&app(GUIDE), &settings()).unwrap();
        assert_eq!(s.wanted.url, "https://github.com/example/platform.git");
        assert_eq!(s.wanted.target_revision, "main");
        assert_eq!(s.path, "gitops/teams/clusters/do-cluster-dev-cluster");
        assert_eq!(s.destination, Destination::Cluster(ClusterRef::Hub));
        assert_eq!(s.namespace.as_deref(), Some("pulumi-operator"));
        assert!(s.options.create_namespace);
        assert_eq!(
            s.automated,
            Some(Automated {
                prune: true,
                self_heal: true,
                allow_empty: false
            })
        );
        let d = s.directory.unwrap();
        assert!(d.keeps("cluster.yaml") && !d.keeps("catalog-info.yaml"));
        assert!(!d.keeps("sub/cluster.yaml"));
        assert_eq!(s.interval, DEFAULT_INTERVAL);
        assert_eq!(s.retry.limit, Some(0), "no retry section: no retries");
    }

    #[test]
    fn a_rollback_pins_the_revision_until_the_sync_policy_changes() {
        let commit = "c".repeat(40);
        let mut a = app(GUIDE);
        let entry = history::Deployment {
            id: 2,
            revision: format!("main@sha1:{commit}"),
            ..Default::default()
        };
        let pin = Pin::to(&entry, &a.spec).unwrap();
        a.metadata.annotations =
            Some([(ROLLBACK.to_string(), serde_json::to_string(&pin).unwrap())].into());
        let s = spec(&a, &settings()).unwrap();
        assert_eq!(s.wanted.target_revision, commit);
        assert_eq!(s.pinned, Some(pin));
        assert_eq!(s.history, history::DEFAULT_LIMIT);

        // Automation turned off: the pin ends, the branch is read again.
        a.spec.sync_policy = None;
        let s = spec(&a, &settings()).unwrap();
        assert_eq!(
            (s.wanted.target_revision.as_str(), s.pinned),
            ("main", None)
        );

        a.metadata.annotations = Some([(ROLLBACK.to_string(), "2".to_string())].into());
        let refused = spec_err(&a).message;
        assert!(
            refused.contains("metadata.annotations[skewer.dev/rollback]"),
            "{refused}"
        );

        let mut a = app(GUIDE);
        a.spec.revision_history_limit = Some(-1);
        let refused = spec_err(&a).message;
        assert!(
            refused.starts_with("spec.revisionHistoryLimit: -1"),
            "{refused}"
        );
        a.spec.revision_history_limit = Some(3);
        assert_eq!(spec(&a, &settings()).unwrap().history, 3);
    }

    #[test]
    fn options_for_what_skewer_always_does_are_taken() {
        let always = GUIDE.replace(
            "[ServerSideApply=true, CreateNamespace=true]",
            "[SkipDryRunOnMissingResource=true, Replace=true, FailOnSharedResource=true, Validate=false]",
        );
        assert!(spec(&app(&always), &settings()).is_ok());
    }

    #[test]
    fn what_skewer_does_not_do_is_refused_by_field() {
        for (change, field) in [
            (
                "source: {repoURL: https://charts.example.com, chart: nginx, targetRevision: 1.0.0}",
                "spec.source.chart",
            ),
            (
                "source: {repoURL: https://g/x.git, path: ., helm: {valueFiles: [v.yaml]}}",
                "spec.source.helm",
            ),
            (
                "source: {repoURL: https://g/x.git, kustomize: {namePrefix: x-}}",
                "spec.source.kustomize",
            ),
            ("project: platform", "spec.project"),
            (
                "syncPolicy: {syncOptions: [RespectIgnoreDifferences=true]}",
                "spec.syncPolicy.syncOptions[0]",
            ),
            (
                "syncPolicy: {syncOptions: [CreateNamespace=true, Nope]}",
                "spec.syncPolicy.syncOptions[1]",
            ),
            (
                "ignoreDifferences: [{group: apps, kind: Deployment}]",
                "spec.ignoreDifferences",
            ),
            (
                "sourceHydrator: {drySource: {repoURL: https://g/x.git, path: ., targetRevision: HEAD}}",
                "spec.sourceHydrator",
            ),
            (
                "source: {repoURL: https://g/x.git, tagPrefix: app/}",
                "spec.source.tagPrefix",
            ),
            (
                "source: {repoURL: https://g/x.git, directory: {disableExtensionFilter: true}}",
                "spec.source.directory.disableExtensionFilter",
            ),
            (
                "source: {repoURL: https://g/x.git, directory: {exclude: '{a'}}",
                "spec.source.directory.exclude",
            ),
            (
                "destination: {server: https://a, name: b}",
                "spec.destination",
            ),
            (
                "syncPolicy: {retry: {limit: 2, backoff: {duration: 1fortnight}}}",
                "spec.syncPolicy.retry.backoff.duration",
            ),
            (
                "syncPolicy: {retry: {limit: 2, backoff: {factor: 0}}}",
                "spec.syncPolicy.retry.backoff.factor",
            ),
        ] {
            // The guide's spec with one top-level field replaced.
            let mut spec: serde_json::Value = serde_saphyr::from_str(GUIDE).unwrap();
            let patch: serde_json::Value = serde_saphyr::from_str(change).unwrap();
            for (k, v) in patch.as_object().unwrap() {
                spec[k] = v.clone();
            }
            let app = app(&serde_json::to_string(&spec).unwrap());
            let f = spec_err(&app);
            assert!(f.message.starts_with(field), "{change}: {}", f.message);
        }
    }

    fn spec_err(app: &Application) -> Failure {
        spec(app, &settings()).unwrap_err()
    }

    #[test]
    fn resource_hooks_are_refused_naming_file_and_object() {
        let m = |annotations: serde_json::Value| skewer_appliers::Manifest {
            origin: "apps/migrate.yaml#1".into(),
            object: serde_json::json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "migrate", "namespace": "team", "annotations": annotations}}),
        };
        assert_eq!(hook(&[m(serde_json::json!({"team": "a"}))]), None);
        let refused =
            hook(&[m(serde_json::json!({"argocd.argoproj.io/hook": "PreSync"}))]).unwrap();
        assert!(
            refused.starts_with("Job/team/migrate (apps/migrate.yaml#1): annotation argocd.argoproj.io/hook: PreSync"),
            "{refused}"
        );
    }

    #[test]
    fn retries_back_off_as_argo_cd_does_and_saturate() {
        let r = RetryPolicy {
            limit: Some(3),
            duration: Duration::from_secs(5),
            factor: 2,
            max: Duration::from_secs(60),
        };
        assert_eq!(r.delay(1), Duration::from_secs(5));
        assert_eq!(r.delay(3), Duration::from_secs(20));
        assert_eq!(r.delay(10), Duration::from_secs(60));
        assert_eq!(r.delay(u32::MAX), Duration::from_secs(60));
        assert!(r.allows(2) && !r.allows(3));
    }
}
