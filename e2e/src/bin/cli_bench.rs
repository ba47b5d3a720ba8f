//! The command line's figures, on local real API servers; prints a Markdown table.
//!
//!   SKEWER_BENCH=cli_bench bash e2e/bench.sh [--runs 3 --saves 50 --objects 1000]
//!
//! 1. `skewer bootstrap git` into an empty cluster (a fresh API server each run) from an empty
//!    repository over HTTPS with basic auth, until skewer's own Kustomization is Ready (a
//!    `skewer run` stands in for the Pod, started once the CRDs exist); then bootstrap again.
//! 2. `skewer dev`: a file of a 10-ConfigMap directory saved `--saves` times, each time until a
//!    watch sees the change on the API server (p50, p99).
//! 3. `skewer get kustomizations -A` with `--objects` Kustomizations listed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use skewer_e2e::measure::{arg, median, ms, percentile, timed};
use skewer_e2e::objects::configmap_value;
use skewer_e2e::{
    GitServer, HttpOptions, Skewer, client, cluster, hub, kc_apply, namespace, skewer_bin,
    stop_cluster, unique,
};

/// One bootstrap into a fresh cluster: (first, second) wall times.
async fn bootstrap_once() -> Result<(Duration, Duration)> {
    let name = unique("bench-boot");
    let kubeconfig = cluster(&name)?;
    let git = GitServer::start_http_with(&HttpOptions {
        basic: Some(("bot".into(), "secret".into())),
        tls: true,
        ..Default::default()
    })?;
    let (url, _bare) = git.empty_repo("fleet")?;
    let dir = tempfile::tempdir()?;
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, git.ca_pem().context("CA")?)?;
    let boot = || {
        Command::new(skewer_bin())
            .args([
                "bootstrap",
                "git",
                "--url",
                &url,
                "--path",
                "clusters/bench",
            ])
            .args(["--username", "bot", "--ca-file"])
            .arg(&ca)
            .env("KUBECONFIG", &kubeconfig)
            .env("SKEWER_GIT_PASSWORD", "secret")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    };
    let c = client(&kubeconfig).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(c);
    let started = Instant::now();
    let mut first = boot()?;
    while crds.get_opt("kustomizations.skewer.dev").await?.is_none() {
        if first.try_wait()?.is_some() {
            bail!("bootstrap ended before applying the CRDs");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _skewer = Skewer::start_on(
        &kubeconfig.with_file_name("skewer.kubeconfig"),
        "skewer-system",
        &[],
    )?;
    if !first.wait()?.success() {
        bail!("bootstrap failed");
    }
    let cold = started.elapsed();
    let started = Instant::now();
    if !boot()?.wait()?.success() {
        bail!("second bootstrap failed");
    }
    let again = started.elapsed();
    drop(_skewer);
    stop_cluster(&name)?;
    Ok((cold, again))
}

async fn dev_saves(saves: usize) -> Result<Vec<Duration>> {
    let ns = namespace("bench-dev")?;
    let dir = tempfile::tempdir()?;
    let cm = |i: usize, v: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: {ns}}}\ndata: {{v: \"{v}\"}}\n"
        )
    };
    for i in 0..10 {
        std::fs::write(dir.path().join(format!("cm-{i}.yaml")), cm(i, 0))?;
    }
    let mut dev = Command::new(skewer_bin())
        .arg("dev")
        .arg(dir.path())
        .args(["-n", &ns])
        .env("KUBECONFIG", hub())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let cms: Api<ConfigMap> = Api::namespaced(client(hub()).await?, &ns);
    let limit = Duration::from_secs(30);
    let result = async {
        configmap_value(&cms, "cm-9", "v", Some("0"), limit).await?;
        let mut took = Vec::with_capacity(saves);
        for s in 1..=saves {
            let want = s.to_string();
            let seen = configmap_value(&cms, "cm-0", "v", Some(&want), limit);
            tokio::pin!(seen);
            // The watch lists before the save is written.
            let _ = futures::poll!(&mut seen);
            let saved = Instant::now();
            std::fs::write(dir.path().join("cm-0.yaml"), cm(0, s))?;
            took.push(seen.await?.duration_since(saved));
        }
        anyhow::Ok(took)
    }
    .await;
    let _ = dev.kill();
    let _ = dev.wait();
    result
}

fn list_kustomizations(objects: usize) -> Result<Vec<Duration>> {
    let ns = namespace("bench-get")?;
    let mut yaml = String::new();
    for i in 0..objects {
        yaml.push_str(&format!(
            "---\napiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: ks-{i:04}, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: src}}\n  interval: 1h\n  suspend: true\n"
        ));
    }
    kc_apply(&yaml)?;
    let kubeconfig = format!("KUBECONFIG={}", hub().display());
    let bin = skewer_bin().display().to_string();
    let mut times = Vec::new();
    for _ in 0..5 {
        let (t, _) = timed("env", &[&kubeconfig, &bin, "get", "kustomizations", "-A"])?;
        times.push(t);
    }
    Ok(times)
}

#[tokio::main]
async fn main() -> Result<()> {
    let runs = arg("--runs", 3);
    let saves = arg("--saves", 50);
    let objects = arg("--objects", 1000);
    skewer_e2e::install_crds(hub())?;

    let mut cold = Vec::new();
    let mut again = Vec::new();
    for _ in 0..runs {
        let (c, a) = bootstrap_once().await?;
        cold.push(c);
        again.push(a);
    }
    let took = dev_saves(saves).await?;
    let listed = list_kustomizations(objects)?;

    println!("| figure | value |");
    println!("|---|---|");
    println!(
        "| `skewer bootstrap git` into an empty cluster, to its Kustomization Ready (median of {runs}) | {} |",
        ms(median(cold.clone()))
    );
    println!(
        "| `skewer bootstrap git` again, nothing to change (median of {runs}) | {} |",
        ms(median(again))
    );
    println!(
        "| `skewer dev` save → applied, p50 / p99 over {saves} saves | {} / {} |",
        ms(percentile(&took, 0.5)),
        ms(percentile(&took, 0.99))
    );
    println!(
        "| `skewer get kustomizations -A` with {objects} listed (median of 5) | {} |",
        ms(median(listed))
    );
    println!("\nbootstrap runs: {cold:?}");
    Ok(())
}
