//! Applications at scale on the local real API server; prints a Markdown table.
//!
//!   SKEWER_BENCH=apps_bench bash e2e/bench.sh [--apps 1000 --repos 10 --objects 10]
//!
//! Cold start: `--apps` Applications of `--objects` ConfigMaps each, spread over `--repos`
//! repositories (each Application its own directory) on a smart HTTP Git server, created
//! before skewer starts; the time from skewer's start until every one is Synced and Healthy,
//! skewer's peak RSS, the fetches the Git server saw, then the requests skewer makes per
//! second once nothing changes (from the API server's audit log).

use std::time::{Duration, Instant};

use anyhow::Result;
use skewer_e2e::measure::{arg, memory_kib, skewer_requests};
use skewer_e2e::{GitServer, Skewer, client, hub, namespace};

#[tokio::main]
async fn main() -> Result<()> {
    let apps = arg("--apps", 1000);
    let repos = arg("--repos", 10).max(1);
    let objects = arg("--objects", 10);
    let quiet = Duration::from_secs(arg("--quiet-seconds", 30) as u64);
    let c = client(hub()).await?;
    let git = GitServer::start_http()?;
    let ns = namespace("bench-apps")?;
    skewer_e2e::objects::application_fleet(&git, &ns, apps, repos, objects)?;

    let start = Instant::now();
    let skewer = Skewer::start(&ns)?;
    skewer_e2e::objects::applications_synced(&c, &ns, apps, Duration::from_secs(600)).await?;
    let cold = start.elapsed();
    let peak = memory_kib(skewer.pid(), "VmHWM").unwrap_or_default() as f64 / 1024.0;
    let fetches = git.requests("git-upload-pack fetch");
    // Steady state: nothing changes; what does skewer still ask of the API server?
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = skewer_requests()?.1;
    tokio::time::sleep(quiet).await;
    let rate = (skewer_requests()?.1 - before) as f64 / quiet.as_secs_f64();
    println!("| {apps} Applications × {objects} ConfigMaps over {repos} repositories | figure |");
    println!("|---|---:|");
    println!(
        "| cold start → all Synced and Healthy | {:.1} s |",
        cold.as_secs_f64()
    );
    println!("| skewer peak RSS (VmHWM) | {peak:.1} MiB |");
    println!("| fetches seen by the Git server | {fetches} |");
    println!(
        "| API requests per second once nothing changes ({} s, leader election aside) | {rate:.2} |",
        quiet.as_secs()
    );
    Ok(())
}
