//! Hub and spokes on the local real API servers (three on one etcd); prints Markdown tables.
//!
//!   cargo run -p skewer-e2e --release --bin clusters_bench [-- --runs 3 --objects 1000]
//!
//! 1. Cold start: 60 Kustomizations of 20 ConfigMaps each, spread over the hub and two
//!    spokes, from skewer's start to all applied.
//! 2. Memory per cluster: skewer's RSS once one Kustomization of 20 ConfigMaps per cluster is
//!    applied, with 0, 1 and 2 spokes in use (a registered cluster nobody targets costs nothing:
//!    its client is built on first use).
//! 3. The cost of impersonation: the first sync of 1,000 ConfigMaps as a tenant
//!    (`serviceAccountName`) against the same as skewer itself, taking turns in each round.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::{Api, Client};
use serde_json::json;
use skewer_api::Kustomization;
use skewer_e2e::measure::{arg, median, memory_kib, ms};
use skewer_e2e::objects::{add_source, create_kustomization_with, create_source, until_applied};
use skewer_e2e::{GitServer, Skewer, client, cluster, hub, kc, kc_apply, kc_on, namespace};

/// Registers `spoke` as cluster `name` in `ns` with its admin token.
fn register(ns: &str, name: &str, spoke: &Path) -> Result<()> {
    let token = std::fs::read_to_string(spoke.with_file_name("admin.token"))?;
    let config = json!({
        "bearerToken": token.trim(),
        "tlsClientConfig": {"caData": skewer_e2e::server_ca(spoke)?},
    });
    kc_apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{skewer.dev/secret-type: cluster}}\nstringData:\n  name: {name}\n  server: {}\n  config: '{config}'\n",
        skewer_e2e::server_url(spoke)?
    ))
}

fn configmaps(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {prefix}-{i:04}\ndata:\n  index: \"{i}\"\n  payload: \"{}\"\n",
                "x".repeat(64)
            )
        })
        .collect()
}

/// The cluster field of Kustomization `k` of a spread over the hub and `spokes`.
fn spread(k: usize, spokes: &[&str]) -> serde_json::Value {
    match k % (spokes.len() + 1) {
        0 => json!({}),
        i => json!({"cluster": spokes[i - 1]}),
    }
}

/// Creates namespace `ns` on each spoke (the hub has it already).
fn namespace_on(spokes: &[&Path], ns: &str) -> Result<()> {
    for s in spokes {
        kc_on(s, &["create", "namespace", ns])?;
    }
    Ok(())
}

/// Starts skewer on `ns`, waits until all `names` are applied; returns the time from start and
/// skewer (still running).
async fn run_until_applied(
    c: &Client,
    ns: &str,
    names: &[String],
    extra: &[&str],
) -> Result<(Duration, Skewer)> {
    let ks: Api<Kustomization> = Api::namespaced(c.clone(), ns);
    let start = Instant::now();
    let skewer = Skewer::start_with(ns, extra)?;
    for name in names {
        until_applied(&ks, name).await?;
    }
    Ok((start.elapsed(), skewer))
}

#[tokio::main]
async fn main() -> Result<()> {
    let runs = arg("--runs", 3);
    let objects = arg("--objects", 1000);
    let hub_kc = hub();
    let spoke_kcs = [cluster("spoke-a")?, cluster("spoke-b")?];
    let spokes: Vec<&Path> = spoke_kcs.iter().map(|p| p.as_path()).collect();
    let c = client(hub_kc).await?;
    let git = GitServer::start()?;

    // 1. Cold start over three clusters.
    let (n, per) = (60, 20);
    let repo = git.repo("spread")?;
    for k in 0..n {
        repo.write(
            &format!("k{k:03}/cms.yaml"),
            &configmaps(&format!("k{k:03}"), per),
        )?;
    }
    repo.commit("spread")?;
    let mut cold = Vec::new();
    let mut peak = Vec::new();
    for _ in 0..runs {
        let ns = namespace("bench-spread")?;
        namespace_on(&spokes, &ns)?;
        register(&ns, "spoke-a", spokes[0])?;
        register(&ns, "spoke-b", spokes[1])?;
        add_source(&c, &ns, &repo.url).await?;
        let ks: Api<Kustomization> = Api::namespaced(c.clone(), &ns);
        let mut names = Vec::new();
        for k in 0..n {
            let name = format!("k{k:03}");
            let extra = spread(k, &["spoke-a", "spoke-b"]);
            create_kustomization_with(&ks, &ns, &name, &format!("./{name}"), "1h", extra).await?;
            names.push(name);
        }
        let (took, skewer) = run_until_applied(&c, &ns, &names, &[]).await?;
        cold.push(took);
        peak.push(memory_kib(skewer.pid(), "VmHWM").unwrap_or_default());
    }
    let peak_mib = *peak.iter().max().unwrap_or(&0) as f64 / 1024.0;
    println!(
        "| hub and spokes (k8s 1.20, three API servers on one etcd), median of {runs} | figure |"
    );
    println!("|---|---:|");
    println!(
        "| cold start → all Ready, {n} Kustomizations × {per} ConfigMaps over hub + 2 spokes | {:.2} s |",
        median(cold).as_secs_f64()
    );
    println!("| skewer peak RSS (VmHWM) in that start | {peak_mib:.1} MiB |");

    // 2. Memory with 0, 1 and 2 spokes in use.
    let one = git.repo("one")?;
    one.write("cms/cms.yaml", &configmaps("cm", 20))?;
    one.commit("one")?;
    let mut rss = Vec::new();
    for used in 0..=spokes.len() {
        let mut samples = Vec::new();
        for _ in 0..runs {
            let ns = namespace("bench-rss")?;
            namespace_on(&spokes, &ns)?;
            register(&ns, "spoke-a", spokes[0])?;
            register(&ns, "spoke-b", spokes[1])?;
            add_source(&c, &ns, &one.url).await?;
            let ks: Api<Kustomization> = Api::namespaced(c.clone(), &ns);
            let mut names = Vec::new();
            for k in 0..=used {
                let name = format!("k{k}");
                let extra = spread(k, &["spoke-a", "spoke-b"]);
                create_kustomization_with(&ks, &ns, &name, "./cms", "1h", extra).await?;
                names.push(name);
            }
            let (_, skewer) = run_until_applied(&c, &ns, &names, &[]).await?;
            // Settled: clients built, watches running.
            tokio::time::sleep(Duration::from_secs(2)).await;
            samples.push(memory_kib(skewer.pid(), "VmRSS").unwrap_or_default());
        }
        samples.sort();
        rss.push(samples[samples.len() / 2]);
    }
    println!();
    println!(
        "| spokes in use (one Kustomization of 20 objects per cluster) | skewer RSS | more than with none |"
    );
    println!("|---|---:|---:|");
    for (used, kib) in rss.iter().enumerate() {
        println!(
            "| {used} | {:.1} MiB | {:+.1} MiB |",
            *kib as f64 / 1024.0,
            (*kib as f64 - rss[0] as f64) / 1024.0
        );
    }

    // 3. Impersonation: the same first sync as skewer and as a tenant.
    let big = git.repo("big")?;
    big.write("cms/cms.yaml", &configmaps("cm", objects))?;
    big.commit("big")?;
    let (mut as_skewer, mut as_tenant) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        for tenant in [false, true] {
            let ns = namespace("bench-who")?;
            let extra = if tenant {
                kc(&["create", "serviceaccount", "deployer", "-n", &ns])?;
                kc(&[
                    "create",
                    "rolebinding",
                    "deployer",
                    "-n",
                    &ns,
                    "--clusterrole=edit",
                    &format!("--serviceaccount={ns}:deployer"),
                ])?;
                json!({"serviceAccountName": "deployer"})
            } else {
                json!({})
            };
            let _skewer = Skewer::start_with(&ns, &[])?;
            create_source(&c, &ns, &big.url).await?;
            let ks: Api<Kustomization> = Api::namespaced(c.clone(), &ns);
            let start = Instant::now();
            create_kustomization_with(&ks, &ns, "app", "./cms", "1h", extra).await?;
            until_applied(&ks, "app").await?;
            let took = start.elapsed();
            if tenant {
                as_tenant.push(took);
            } else {
                as_skewer.push(took);
            }
        }
    }
    let (s, t) = (median(as_skewer), median(as_tenant));
    println!();
    println!("| first sync of {objects} ConfigMaps, median of {runs} (taking turns) | figure |");
    println!("|---|---:|");
    println!("| as skewer itself | {} |", ms(s));
    println!(
        "| as a tenant (`serviceAccountName`, impersonated) | {} |",
        ms(t)
    );
    println!(
        "| cost of impersonation | {:+.1} % |",
        (t.as_secs_f64() / s.as_secs_f64() - 1.0) * 100.0
    );
    Ok(())
}
