//! `skewer check --pre`, before installing: the cluster answers, is new enough, and this user
//! may create what an install creates. `skewer check`, after: skewer's resources are served,
//! its Deployment is ready, and a leader renews its Lease. Every check runs (none stops the
//! others) and says what to do when it fails.

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::version::Info;
use kube::Api;
use kube::api::ListParams;

use skewer_api::manifests::{self, NAMESPACE};

use super::term::{Paint, colour, paint};

/// The oldest Kubernetes minor version skewer is proven on: its end-to-end cluster runs
/// Debian's 1.20 (server-side apply on by default, Leases, CRDs v1).
pub const MIN_MINOR: u32 = 20;

/// One check's answer: passed, failed, or only said (`None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub ok: Option<bool>,
    pub line: String,
}

impl Check {
    fn pass(line: impl Into<String>) -> Self {
        Self {
            ok: Some(true),
            line: line.into(),
        }
    }
    fn fail(line: impl Into<String>) -> Self {
        Self {
            ok: Some(false),
            line: line.into(),
        }
    }
    fn note(line: impl Into<String>) -> Self {
        Self {
            ok: None,
            line: line.into(),
        }
    }
}

/// What an install needs to create, each as (group, resource, namespace).
const RIGHTS: [(&str, &str, Option<&str>); 7] = [
    ("apiextensions.k8s.io", "customresourcedefinitions", None),
    ("", "namespaces", None),
    ("rbac.authorization.k8s.io", "clusterroles", None),
    ("rbac.authorization.k8s.io", "clusterrolebindings", None),
    ("", "serviceaccounts", Some(NAMESPACE)),
    ("apps", "deployments", Some(NAMESPACE)),
    ("", "secrets", Some(NAMESPACE)),
];

/// What of [`RIGHTS`] this user may not create, one SelfSubjectAccessReview each
/// (`deployments in skewer-system`).
pub async fn denied(client: &kube::Client) -> Result<Vec<String>, kube::Error> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut denied = Vec::new();
    for (group, resource, namespace) in RIGHTS {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    namespace: namespace.map(Into::into),
                    verb: Some("create".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews.create(&Default::default(), &review).await?;
        if !answer.status.is_some_and(|s| s.allowed) {
            denied.push(match namespace {
                Some(ns) => format!("{resource} in {ns}"),
                None => resource.to_string(),
            });
        }
    }
    Ok(denied)
}

/// The server's minor version when it is at least 1.[`MIN_MINOR`], or why not.
pub fn new_enough(v: &Info) -> Result<u32, String> {
    let digits = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .ok()
    };
    match (digits(&v.major), digits(&v.minor)) {
        (Some(1), Some(minor)) if minor >= MIN_MINOR => Ok(minor),
        (Some(major), Some(_)) if major > 1 => Ok(u32::MAX),
        _ => Err(format!(
            "Kubernetes {} is older than 1.{MIN_MINOR}, the oldest skewer is tested on",
            v.git_version
        )),
    }
}

/// `check --pre`. Errs only when the cluster cannot be reached (the caller names server and
/// context).
pub async fn pre(client: &kube::Client) -> Result<Vec<Check>> {
    let version = client
        .apiserver_version()
        .await
        .context("asking the API server its version")?;
    let mut checks = vec![match new_enough(&version) {
        Ok(_) => Check::pass(format!(
            "Kubernetes {} (1.{MIN_MINOR} or newer)",
            version.git_version
        )),
        Err(e) => Check::fail(e),
    }];
    checks.push(match denied(client).await {
        Ok(d) if d.is_empty() => Check::pass("this user may create what skewer installs"),
        Ok(d) => Check::fail(format!(
            "this user may not create {}: install as a cluster admin",
            d.join(", ")
        )),
        Err(e) => Check::fail(format!("asking what this user may do: {e}")),
    });
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    checks.push(match deployments.get_opt("skewer").await {
        Ok(Some(d)) => Check::note(format!(
            "skewer is already installed ({}): install or bootstrap again upgrades it in place",
            image(&d)
        )),
        Ok(None) => Check::note("skewer is not installed yet"),
        Err(e) => Check::note(format!("could not read the skewer Deployment: {e}")),
    });
    Ok(checks)
}

/// `check`: skewer's resources, its Deployment, its leader.
pub async fn installed(
    client: &kube::Client,
    lease_duration: std::time::Duration,
) -> Result<Vec<Check>> {
    let version = client
        .apiserver_version()
        .await
        .context("asking the API server its version")?;
    let mut checks = vec![Check::pass(format!("Kubernetes {}", version.git_version))];
    checks.push(match manifests::missing_resources(client).await {
        Ok(m) if m.is_empty() => Check::pass("skewer's CRDs are installed"),
        Ok(m) => Check::fail(format!(
            "skewer's CRDs are not installed ({} missing): run `skewer install`",
            m.join(", ")
        )),
        Err(e) => Check::fail(format!(
            "asking which of skewer's resources are served: {e}"
        )),
    });
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let deployment = deployments.get_opt("skewer").await.ok().flatten();
    let in_cluster = deployment.is_some();
    if let Some(d) = deployment {
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let ready = d
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        let line = format!(
            "Deployment {NAMESPACE}/skewer: {ready}/{want} ready ({})",
            image(&d)
        );
        checks.push(if ready >= want && want > 0 {
            Check::pass(line)
        } else {
            Check::fail(format!(
                "{line}: see `kubectl -n {NAMESPACE} describe deployment skewer` and `skewer logs`"
            ))
        });
    }
    let now = jiff::Timestamp::now();
    let leases: Api<Lease> = Api::all(client.clone());
    let named = ListParams::default().fields("metadata.name=skewer-leader");
    // The one renewed last, should Leases of skewers gone long ago be left elsewhere.
    let leader = leases.list(&named).await.ok().and_then(|l| {
        l.items.into_iter().max_by_key(|l| {
            l.spec
                .as_ref()
                .and_then(|s| s.renew_time.clone())
                .map(|t| t.0)
        })
    });
    let shards =
        ListParams::default().labels(&format!("{}=skewer", skewer_view::shards::GROUP_LABEL));
    let sharded = leases
        .list(&shards)
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    checks.push(match leader {
        Some(lease) => {
            let spec = lease.spec.unwrap_or_default();
            let holder = spec.holder_identity.unwrap_or_default();
            let renewed = spec.renew_time.map(|t| now.as_second().saturating_sub(t.0.as_second()));
            let ns = lease.metadata.namespace.unwrap_or_default();
            let fresh = u64::try_from(renewed.unwrap_or(i64::MAX)).unwrap_or(0);
            let bound = lease_duration.as_secs().saturating_mul(2);
            match renewed {
                Some(ago) if fresh <= bound => {
                    Check::pass(format!("leader {holder} (Lease {ns}/skewer-leader, renewed {ago}s ago)"))
                }
                _ => Check::fail(format!(
                    "Lease {ns}/skewer-leader was last renewed by {holder} {}: no skewer is leading; is it running?",
                    renewed.map_or("never".into(), |s| format!("{s}s ago"))
                )),
            }
        }
        None if sharded > 0 => Check::pass(format!("{sharded} shard Leases (skewer get shards)")),
        None if in_cluster => Check::fail("no leader Lease yet: skewer has not started leading (skewer logs)"),
        None => Check::fail(
            "skewer is not running: no Deployment in skewer-system and no leader Lease (skewer install, or skewer run)",
        ),
    });
    Ok(checks)
}

fn image(d: &Deployment) -> String {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_else(|| "no image".into())
}

/// The checks, a line each: `✓`, `✗` or `•`.
pub fn render(checks: &[Check]) -> String {
    let on = colour();
    checks
        .iter()
        .map(|c| {
            let mark = match c.ok {
                Some(true) => paint(on, Paint::Green, "✓"),
                Some(false) => paint(on, Paint::Red, "✗"),
                None => paint(on, Paint::Dim, "•"),
            };
            format!("{mark} {}\n", c.line)
        })
        .collect()
}

/// Whether no check failed.
pub fn passed(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.ok != Some(false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            git_version: format!("v{major}.{minor}.0"),
            ..Default::default()
        }
    }

    #[test]
    fn versions_from_1_20_are_new_enough() {
        assert_eq!(new_enough(&info("1", "20")), Ok(20));
        assert_eq!(new_enough(&info("1", "31+")), Ok(31), "providers add a +");
        let old = new_enough(&info("1", "19")).unwrap_err();
        assert!(
            old.starts_with("Kubernetes v1.19.0 is older than 1.20"),
            "{old}"
        );
        assert!(new_enough(&info("", "")).is_err());
    }

    #[test]
    fn checks_read_as_marked_lines() {
        let checks = [Check::pass("a"), Check::note("b"), Check::fail("c")];
        assert_eq!(render(&checks), "✓ a\n• b\n✗ c\n");
        assert!(!passed(&checks));
        assert!(passed(&checks[..2]));
    }
}
