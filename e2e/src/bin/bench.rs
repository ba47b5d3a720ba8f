//! Benchmarks on the local real API server; prints a Markdown table.
//!
//!   cargo run -p skewer-e2e --release --bin bench [-- --objects 1000 --runs 3]
//!
//! First sync of N ConfigMaps from a Git repo by the `skewer` daemon (Kustomization created →
//! Ready), against `kubectl apply --server-side -f <dir>` of the same files, and against a
//! bare kube-rs loop of concurrent server-side applies (the practical limit). Every run
//! applies into a fresh namespace, so every request creates an object.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::{StreamExt, stream};
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::json;
use skewer_appliers::apply::{Applier, ApplyOptions};
use skewer_appliers::load::{SourceFile, load};
use skewer_appliers::transform::{Owner, Transform};
use skewer_e2e::{GitServer, Skewer, client, eventually, hub, kc, kc_apply, kubectl, namespace};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn configmap(ns: &str, i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:04}\n  namespace: {ns}\ndata:\n  index: \"{i}\"\n  payload: \"{}\"\n",
        "x".repeat(64)
    )
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() -> Result<()> {
    let objects = arg("--objects", 1000);
    let runs = arg("--runs", 3);
    let kubeconfig = hub();
    let c = client(kubeconfig).await?;
    let info = c.apiserver_version().await?;
    eprintln!(
        "API server {}.{}; {objects} ConfigMaps; {runs} runs each",
        info.major, info.minor
    );

    // The files, once in a directory for kubectl, once in a Git repo for skewer. The
    // namespace is rewritten per run (kubectl: `-n`; skewer: targetNamespace).
    let dir = tempfile::tempdir()?;
    let git = GitServer::start()?;
    let repo = git.repo("bench")?;
    for i in 0..objects {
        let doc = configmap("placeholder", i).replace("  namespace: placeholder\n", "");
        std::fs::write(dir.path().join(format!("cm-{i:04}.yaml")), &doc)?;
        repo.write(&format!("cms/cm-{i:04}.yaml"), &doc)?;
    }
    repo.commit("configmaps")?;

    let mut rows: Vec<(&str, Vec<Duration>)> = Vec::new();

    // skewer, the daemon, end to end.
    let mut times = Vec::new();
    for _ in 0..runs {
        let ns = namespace("bench-skewer")?;
        let _skewer = Skewer::start(&ns)?;
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec: {{url: \"{}\", interval: 1h}}\n",
            repo.url
        ))?;
        let api: Api<skewer_agent::api::GitRepository> = Api::namespaced(c.clone(), &ns);
        eventually("artifact", Duration::from_secs(60), || async {
            Ok(api
                .get("src")
                .await?
                .status
                .and_then(|s| s.artifact)
                .map(|_| ()))
        })
        .await?;
        let start = Instant::now();
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: src}}\n  path: ./cms\n  interval: 1h\n  targetNamespace: {ns}\n"
        ))?;
        let ks: Api<skewer_agent::api::Kustomization> = Api::namespaced(c.clone(), &ns);
        eventually("Ready", Duration::from_secs(120), || async {
            let st = ks.get("app").await?.status.unwrap_or_default();
            Ok(st.last_applied_revision.is_some().then_some(()))
        })
        .await?;
        times.push(start.elapsed());
        kc(&["delete", "namespace", &ns, "--wait=false"])?;
    }
    rows.push(("skewer daemon: Kustomization created → Ready", times));

    // The appliers library alone: load + plan + apply (no controller, no status writes).
    let files: Vec<(String, Vec<u8>)> = (0..objects)
        .map(|i| {
            (
                format!("cms/cm-{i:04}.yaml"),
                configmap("x", i).into_bytes(),
            )
        })
        .collect();
    let applier = Applier::new(c.clone()).await?;
    let mut times = Vec::new();
    for _ in 0..runs {
        let ns = namespace("bench-lib")?;
        let opts = ApplyOptions {
            field_manager: "skewer".into(),
            owner: Owner {
                name: "bench".into(),
                namespace: ns.clone(),
            },
            transform: Transform {
                target_namespace: Some(ns.clone()),
                ..Default::default()
            },
            force: false,
            concurrency: 16,
            wait_timeout: Duration::from_secs(60),
        };
        let start = Instant::now();
        let sources: Vec<SourceFile<'_>> = files
            .iter()
            .map(|(p, d)| SourceFile { path: p, data: d })
            .collect();
        let manifests = load(&sources, "cms")?;
        let plan = applier
            .plan(manifests, &opts)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        applier
            .apply(&plan, &opts)
            .await
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        times.push(start.elapsed());
        kc(&["delete", "namespace", &ns, "--wait=false"])?;
    }
    rows.push(("appliers library: load + plan + apply", times));

    // Bare kube-rs: N concurrent server-side applies, 16 in flight.
    let ar = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let mut times = Vec::new();
    for _ in 0..runs {
        let ns = namespace("bench-bare")?;
        let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), &ns, &ar);
        let docs: Vec<serde_json::Value> = (0..objects)
            .map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i:04}"), "namespace": ns}, "data": {"index": i.to_string(), "payload": "x".repeat(64)}}))
            .collect();
        let pp = PatchParams::apply("bench").force();
        let start = Instant::now();
        let results: Vec<_> = stream::iter(0..docs.len())
            .map(|i| {
                let (api, pp, doc) = (&api, &pp, &docs[i]);
                async move {
                    api.patch(&format!("cm-{i:04}"), pp, &Patch::Apply(doc))
                        .await
                }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        times.push(start.elapsed());
        results.into_iter().collect::<Result<Vec<_>, _>>()?;
        kc(&["delete", "namespace", &ns, "--wait=false"])?;
    }
    rows.push(("bare kube-rs SSA loop, 16 in flight", times));

    // kubectl apply --server-side -f <dir>.
    let mut times = Vec::new();
    for _ in 0..runs {
        let ns = namespace("bench-kubectl")?;
        let start = Instant::now();
        let out = kubectl(kubeconfig)
            .args(["apply", "--server-side", "-n", &ns, "-f"])
            .arg(dir.path())
            .output()?;
        times.push(start.elapsed());
        anyhow::ensure!(
            out.status.success(),
            "kubectl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        kc(&["delete", "namespace", &ns, "--wait=false"])?;
    }
    rows.push(("kubectl apply --server-side -f DIR", times));

    let med: Vec<(&str, Duration, Vec<Duration>)> = rows
        .into_iter()
        .map(|(n, t)| (n, median(t.clone()), t))
        .collect();
    let get = |prefix: &str| {
        med.iter()
            .find(|r| r.0.starts_with(prefix))
            .map(|r| r.1.as_secs_f64())
            .context("row")
    };
    println!(
        "| first sync of {objects} ConfigMaps (k8s {}.{}) | median | runs |",
        info.major, info.minor
    );
    println!("|---|---:|---|");
    for (name, m, all) in &med {
        let all: Vec<String> = all
            .iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect();
        println!("| {name} | {:.2} s | {} |", m.as_secs_f64(), all.join(", "));
    }
    let (sk, bare, kubectl) = (get("skewer")?, get("bare")?, get("kubectl")?);
    println!();
    println!(
        "skewer / bare loop: {:.2}x (target ≤ 1.5x); kubectl / skewer: {:.1}x (target ≥ 5x)",
        sk / bare,
        kubectl / sk
    );
    Ok(())
}
