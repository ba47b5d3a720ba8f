//! Issue 3 acceptance: drift is corrected from watches within a second; what skewer does not
//! manage, and status updates by controllers, cause nothing.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::wait::await_condition;
use skewer_e2e::{audited, eventually, kc};

const HEAL_DEADLINE: Duration = Duration::from_secs(1);

fn files(ns: &str) -> Vec<(String, String)> {
    vec![
        (
            "deploy.yaml".into(),
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\n  labels: {{team: a}}\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n"
            ),
        ),
        (
            "cm.yaml".into(),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: {ns}\ndata:\n  mode: \"on\"\n"
            ),
        ),
    ]
}

/// Runs `kubectl args`, then waits on a watch until `healed` holds, and returns how long
/// that took after kubectl returned.
async fn undone<K, F>(api: &Api<K>, name: &str, args: &[&str], healed: F) -> Result<Duration>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: Fn(Option<&K>) -> bool + Send + 'static,
{
    kc(args)?;
    let start = Instant::now();
    tokio::time::timeout(HEAL_DEADLINE, await_condition(api.clone(), name, healed))
        .await
        .with_context(|| {
            format!(
                "`kubectl {}` not undone within {HEAL_DEADLINE:?}",
                args.join(" ")
            )
        })??;
    let took = start.elapsed();
    eprintln!(
        "undid `kubectl {}` in {} ms",
        args.join(" "),
        took.as_millis()
    );
    Ok(took)
}

#[tokio::test(flavor = "multi_thread")]
async fn drift_is_undone_within_a_second() -> Result<()> {
    let f = Fixture::new("drift").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let _skewer = f.app(&files(&ns), &[], "").await?;

    let deploys: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    let replicas = |want: i32| {
        move |d: Option<&Deployment>| d.and_then(|d| d.spec.as_ref()?.replicas) == Some(want)
    };
    // The watch must first see the drifted state: wait for it, then for the repair.
    kc(&["scale", "deployment", "web", "-n", &ns, "--replicas=3"])?;
    let start = Instant::now();
    tokio::time::timeout(
        HEAL_DEADLINE,
        await_condition(deploys.clone(), "web", replicas(1)),
    )
    .await
    .context("kubectl scale not undone within 1 s")??;
    eprintln!(
        "undid `kubectl scale` in {} ms",
        start.elapsed().as_millis()
    );

    undone(
        &deploys,
        "web",
        &[
            "patch",
            "deployment",
            "web",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"nginx:1.0"}]}}}}"#,
        ],
        |d: Option<&Deployment>| {
            d.and_then(|d| {
                d.spec
                    .as_ref()?
                    .template
                    .spec
                    .as_ref()?
                    .containers
                    .first()?
                    .image
                    .clone()
            })
            .as_deref()
                == Some("nginx:1.25")
        },
    )
    .await?;
    undone(
        &deploys,
        "web",
        &relabel_web(&ns),
        |d: Option<&Deployment>| {
            d.and_then(|d| d.metadata.labels.as_ref()?.get("team").cloned())
                .as_deref()
                == Some("a")
        },
    )
    .await?;
    undone(
        &cms,
        "cfg",
        &[
            "patch",
            "configmap",
            "cfg",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"data":{"mode":"off"}}"#,
        ],
        |m: Option<&ConfigMap>| {
            m.and_then(|m| m.data.as_ref()?.get("mode").cloned())
                .as_deref()
                == Some("on")
        },
    )
    .await?;
    undone(
        &cms,
        "cfg",
        &["delete", "configmap", "cfg", "-n", &ns, "--wait=false"],
        |m: Option<&ConfigMap>| m.is_some_and(|m| m.metadata.deletion_timestamp.is_none()),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn unmanaged_changes_and_status_updates_cause_no_writes() -> Result<()> {
    let f = Fixture::new("quiet").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let _skewer = f.app(&files(&ns), &[], "  interval: 1s\n").await?;
    let writes = || -> Result<usize> {
        Ok(audited("skewer", &ns)?
            .iter()
            .filter(|a| {
                a.resource == "deployments"
                    && a.verb != "get"
                    && a.verb != "list"
                    && a.verb != "watch"
            })
            .count())
    };
    let after_apply = writes()?;
    assert_eq!(after_apply, 1, "one apply of the Deployment");

    // kube-controller-manager writes the Deployment's status (ReplicaSet created, replicas
    // counted): not skewer's, so nothing is written, while skewer's 1 s interval keeps
    // reconciling.
    let deploys: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    eventually(
        "the controller to write the Deployment's status",
        WAIT,
        || async {
            let d = deploys.get("web").await?;
            Ok(d.status.and_then(|s| s.observed_generation).map(|_| ()))
        },
    )
    .await?;
    let wrote = eventually(
        "a skewer write to the Deployment (there must be none)",
        Duration::from_secs(3),
        || async { Ok((writes()? > after_apply).then_some(())) },
    )
    .await;
    assert!(
        wrote.is_err(),
        "skewer wrote to the Deployment: {:?}",
        audited("skewer", &ns)?
    );
    let reads = audited("skewer", &ns)?
        .iter()
        .filter(|a| a.resource == "deployments" && a.verb == "get")
        .count();
    assert_eq!(reads, 0, "no per-object reads on a no-op reconcile");

    // An annotation another tool adds is left alone, even when skewer re-applies the object.
    kc(&[
        "annotate",
        "deployment",
        "web",
        "-n",
        &ns,
        "example.com/note=kept",
    ])?;
    kc(&relabel_web(&ns))?;
    let team = |want: &'static str| {
        move |d: Option<&Deployment>| {
            d.and_then(|d| d.metadata.labels.as_ref()?.get("team").cloned())
                .as_deref()
                == Some(want)
        }
    };
    tokio::time::timeout(
        Duration::from_secs(5),
        await_condition(deploys.clone(), "web", team("a")),
    )
    .await??;
    let d = deploys.get("web").await?;
    assert_eq!(
        d.metadata
            .annotations
            .unwrap_or_default()
            .get("example.com/note")
            .map(String::as_str),
        Some("kept")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_health_and_json_logs() -> Result<()> {
    let f = Fixture::new("metrics").await?;
    let ns = f.ns.clone();
    let skewer = f.app(&f.configmap(), &["--log-format", "json"], "").await?;
    assert_eq!(skewer.http_get("/healthz")?, (200, "ok".to_string()));
    assert_eq!(skewer.http_get("/readyz")?.0, 200);

    kc(&["delete", "configmap", "cfg", "-n", &ns])?;
    let text = eventually("the heal to be counted", WAIT, || async {
        let (_, text) = skewer.http_get("/metrics")?;
        Ok(text
            .contains(r#"skewer_drift_corrected_total{kind="ConfigMap",change="deleted"} 1"#)
            .then_some(text))
    })
    .await?;
    for want in [
        r#"skewer_reconcile_duration_seconds_count{kind="Kustomization",result="success"} 1"#,
        r#"skewer_reconcile_duration_seconds_count{kind="GitRepository",result="success"} 1"#,
        "skewer_objects_applied_total 1",
        "skewer_source_fetch_duration_seconds_count",
        "skewer_reconciles_in_flight 0",
    ] {
        assert!(text.contains(want), "/metrics lacks {want}:\n{text}");
    }

    // Every log line is a JSON object; the reconcile's span carries the object's name.
    let logs = skewer.logs();
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert!(lines.iter().any(|l| {
        l["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("synced"))
            && l["span"]["object"] == "app"
    }));
    Ok(())
}

/// `kubectl label --overwrite` of a label skewer applied to Deployment `web`.
fn relabel_web(ns: &str) -> [&str; 7] {
    [
        "label",
        "deployment",
        "web",
        "-n",
        ns,
        "team=b",
        "--overwrite",
    ]
}
