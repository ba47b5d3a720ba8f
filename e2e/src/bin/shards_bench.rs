//! Applications at scale on one replica and on several with `--shards auto`; prints a
//! Markdown table.
//!
//!   SKEWER_BENCH=shards_bench bash e2e/bench.sh [--apps 10000 --objects 5 --repos 20 --replicas 3]
//!
//! Each setup gets a fleet of its own (`--apps` Applications of `--objects` ConfigMaps, spread
//! over `--repos` repositories on a smart HTTP Git server), all created before skewer starts:
//! the time from the start until every one is Synced and Healthy, the peak RSS of each replica,
//! and the requests per second once nothing changes (from the API server's audit log; the
//! Leases apart). With shards, one replica is then killed: the time until the others hold all
//! its shards (the Lease lasts `--lease-seconds`).

use std::time::{Duration, Instant};

use anyhow::Result;
use skewer_e2e::measure::{arg, memory_kib, skewer_requests};
use skewer_e2e::objects::{application_fleet, applications_synced};
use skewer_e2e::{GitServer, Skewer, client, hub, namespace};

struct Figures {
    cold: Duration,
    peaks: Vec<f64>,
    rate: f64,
    lease_rate: f64,
    rebalance: Option<Duration>,
}

async fn measure(
    c: &kube::Client,
    git: &GitServer,
    replicas: usize,
    apps: usize,
    objects: usize,
    repos: usize,
    lease: &str,
) -> Result<Figures> {
    let ns = namespace(&format!("bench-shards-{replicas}"))?;
    application_fleet(git, &ns, apps, repos, objects)?;
    let start = Instant::now();
    let mut started = Vec::new();
    for _ in 0..replicas {
        let flags: Vec<String> = if replicas == 1 {
            vec![]
        } else {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            vec![
                "--shards".into(),
                "auto".into(),
                "--lease-duration".into(),
                lease.into(),
                "--storage-addr".into(),
                format!("127.0.0.1:{port}"),
            ]
        };
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        started.push(Skewer::start_with(&ns, &flags)?);
    }
    applications_synced(c, &ns, apps, Duration::from_secs(1800)).await?;
    let cold = start.elapsed();
    let peaks = started
        .iter()
        .map(|s| memory_kib(s.pid(), "VmHWM").unwrap_or_default() as f64 / 1024.0)
        .collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let quiet = Duration::from_secs(20);
    let (leases0, others0) = skewer_requests()?;
    tokio::time::sleep(quiet).await;
    let (leases1, others1) = skewer_requests()?;
    let per_second = |n: usize| n as f64 / quiet.as_secs_f64();
    let mut rebalance = None;
    if replicas > 1 {
        let victim = started.remove(0);
        let pid = format!("-{}", victim.pid());
        drop(victim);
        let killed = Instant::now();
        loop {
            let h = skewer_e2e::shard_holders(c, &ns).await?;
            if h.values().all(|v| !v.is_empty() && !v.ends_with(&pid)) {
                break;
            }
            anyhow::ensure!(
                killed.elapsed() < Duration::from_secs(120),
                "shards not taken over"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        rebalance = Some(killed.elapsed());
    }
    Ok(Figures {
        cold,
        peaks,
        rate: per_second(others1 - others0),
        lease_rate: per_second(leases1 - leases0),
        rebalance,
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let apps = arg("--apps", 10_000);
    let objects = arg("--objects", 5);
    let repos = arg("--repos", 20).max(1);
    let replicas = arg("--replicas", 3).max(2);
    let lease = format!("{}s", arg("--lease-seconds", 15));
    let c = client(hub()).await?;
    let git = GitServer::start_http()?;
    let one = measure(&c, &git, 1, apps, objects, repos, &lease).await?;
    let many = measure(&c, &git, replicas, apps, objects, repos, &lease).await?;
    let peak = |f: &Figures| f.peaks.iter().copied().fold(0.0, f64::max);
    let sum = |f: &Figures| f.peaks.iter().sum::<f64>();
    println!(
        "| {apps} Applications × {objects} ConfigMaps ({repos} repositories) | one replica | {replicas} replicas, `--shards auto` |"
    );
    println!("|---|---:|---:|");
    println!(
        "| start → all Synced and Healthy | {:.1} s | {:.1} s |",
        one.cold.as_secs_f64(),
        many.cold.as_secs_f64()
    );
    println!(
        "| peak RSS (VmHWM) of a replica, largest | {:.1} MiB | {:.1} MiB |",
        peak(&one),
        peak(&many)
    );
    println!(
        "| peak RSS, all replicas together | {:.1} MiB | {:.1} MiB |",
        sum(&one),
        sum(&many)
    );
    println!(
        "| API requests per second once nothing changes, Leases aside | {:.2} | {:.2} |",
        one.rate, many.rate
    );
    println!(
        "| Lease requests per second (lease {lease}) | {:.2} | {:.2} |",
        one.lease_rate, many.lease_rate
    );
    if let Some(r) = many.rebalance {
        println!(
            "| a replica killed → its shards held by the others | | {:.1} s |",
            r.as_secs_f64()
        );
    }
    Ok(())
}
