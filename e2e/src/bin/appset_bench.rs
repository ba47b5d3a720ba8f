//! An ApplicationSet over many registered clusters, on the local real API servers (a hub and
//! two spokes on one etcd); prints a Markdown table.
//!
//!   SKEWER_BENCH=appset_bench bash e2e/bench.sh [--clusters 200 --added 20 --objects 5]
//!
//! `--clusters` cluster Secrets (in the shape policy engines write: Argo CD's label, a label
//! the set selects by) name the three real API servers in turn, each under a name of its own
//! and deploying into a namespace of its own; one ApplicationSet with a clusters generator
//! makes an Application of `--objects` ConfigMaps for each.
//!
//! 1. Cold start: Secrets and ApplicationSet written before skewer starts; from its start until
//!    every Application is Synced and Healthy; skewer's peak RSS.
//! 2. Discovery: `--added` more Secrets, one at a time; from each Secret's creation until its
//!    Application is Synced and Healthy (p50, p99).
//! 3. skewer's RSS, settled, with all the clusters in use.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::Api;
use serde_json::json;
use skewer_api::Application;
use skewer_e2e::measure::{arg, memory_kib, ms};
use skewer_e2e::objects::{applications_synced, configmaps};
use skewer_e2e::{GitServer, Skewer, client, cluster, hub, kc_apply, namespace};

/// A cluster Secret for `kubeconfig`'s API server, named `name`, selected by `bench: <set>`.
fn secret(ns: &str, name: &str, kubeconfig: &Path, set: &str) -> Result<String> {
    let token = std::fs::read_to_string(kubeconfig.with_file_name("admin.token"))?;
    let config = json!({
        "bearerToken": token.trim(),
        "tlsClientConfig": {"caData": skewer_e2e::server_ca(kubeconfig)?},
    });
    Ok(format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{argocd.argoproj.io/secret-type: cluster, bench: {set}, clusterType: vcluster}}\nstringData:\n  name: {name}\n  server: {}\n  config: '{config}'\n",
        skewer_e2e::server_url(kubeconfig)?
    ))
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = (sorted.len() * p).div_ceil(100).saturating_sub(1);
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> Result<()> {
    let clusters = arg("--clusters", 200);
    let added = arg("--added", 20);
    let objects = arg("--objects", 5);
    let servers = [
        hub().to_path_buf(),
        cluster("spoke-a")?,
        cluster("spoke-b")?,
    ];
    let c = client(hub()).await?;
    let git = GitServer::start()?;
    let repo = git.repo("fleet")?;
    repo.write("app/cms.yaml", &configmaps("cm", objects))?;
    repo.commit("fleet")?;
    let ns = namespace("bench-appset")?;
    let set = ns.clone();
    let name = |i: usize| format!("c{i:04}");
    let mut yaml = String::new();
    for i in 0..clusters {
        yaml.push_str(&secret(&ns, &name(i), &servers[i % servers.len()], &set)?);
    }
    kc_apply(&yaml)?;
    kc_apply(&format!(
        r#"apiVersion: skewer.dev/v1alpha1
kind: ApplicationSet
metadata: {{name: fleet, namespace: {ns}}}
spec:
  generators:
  - clusters: {{selector: {{matchLabels: {{bench: {set}}}}}}}
  template:
    metadata: {{name: 'app-{{{{name}}}}'}}
    spec:
      source: {{repoURL: '{url}', targetRevision: main, path: app}}
      destination: {{name: '{{{{name}}}}', namespace: '{ns}-{{{{name}}}}'}}
      syncPolicy:
        automated: {{prune: true, selfHeal: true}}
        syncOptions: [CreateNamespace=true]
"#,
        url = repo.url
    ))?;

    // 1. Cold start.
    let start = Instant::now();
    let skewer = Skewer::start(&ns)?;
    applications_synced(&c, &ns, clusters, Duration::from_secs(900)).await?;
    let cold = start.elapsed();
    let peak = memory_kib(skewer.pid(), "VmHWM").unwrap_or_default();

    // 2. One more cluster at a time.
    let api: Api<Application> = Api::namespaced(c.clone(), &ns);
    let mut latencies = Vec::new();
    for k in 0..added {
        let i = clusters + k;
        let app = format!("app-{}", name(i));
        let began = Instant::now();
        kc_apply(&secret(&ns, &name(i), &servers[i % servers.len()], &set)?)?;
        loop {
            let done = api
                .get_opt(&app)
                .await?
                .and_then(|a| a.status)
                .is_some_and(|s| {
                    s.sync.as_ref().is_some_and(|x| x.status == "Synced")
                        && s.health.as_ref().is_some_and(|h| h.status == "Healthy")
                });
            if done {
                break;
            }
            anyhow::ensure!(
                began.elapsed() < Duration::from_secs(120),
                "{app} not Synced and Healthy after 2 minutes"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        latencies.push(began.elapsed());
    }
    latencies.sort();

    // 3. Settled.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss = memory_kib(skewer.pid(), "VmRSS").unwrap_or_default();
    let total = clusters + added;
    println!(
        "| an ApplicationSet over registered clusters (k8s 1.20, 3 API servers on one etcd) | figure |"
    );
    println!("|---|---:|");
    println!(
        "| cold start → all {clusters} Applications Synced and Healthy ({objects} ConfigMaps each, one per cluster) | {:.1} s |",
        cold.as_secs_f64()
    );
    println!(
        "| skewer peak RSS (VmHWM) in that start | {:.1} MiB |",
        peak as f64 / 1024.0
    );
    println!(
        "| a new cluster Secret → its Application Synced and Healthy, p50 / p99 of {added} | {} / {} |",
        ms(percentile(&latencies, 50)),
        ms(percentile(&latencies, 99))
    );
    println!(
        "| skewer RSS, settled, {total} clusters in use | {:.1} MiB |",
        rss as f64 / 1024.0
    );
    Ok(())
}
