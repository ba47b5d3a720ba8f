//! Notification delivery under load: a new revision of a repository that N Kustomizations
//! read, each sending its commit status (`pending` at its sync's start, `success` at its end),
//! through one `github` Provider to a status API on loopback that answers at once. Prints the
//! delivery latency (publish → the API's receipt), how long until every Kustomization's last
//! status arrived, how many requests that took, and the process's memory with the queue full.
//!
//!     cargo run --release -p skewer-e2e --bin notify_bench -- [--kustomizations 1000]
//!
//! With `--daemon` (on a cluster: `SKEWER_BENCH=notify_bench bash e2e/bench.sh --daemon`), the
//! same through the `skewer` daemon: N Kustomizations of one repository, each applying one
//! ConfigMap, an Alert on all of them to a `github` Provider at that API; then a new commit.
//! Prints the latency from the source's reconcile request to each status's receipt, and the
//! daemon's RSS before the commit and at its largest while the statuses are queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kube::Api;
use skewer_api::LocalObjectReference;
use skewer_api::notification::{AlertSpec, ProviderSpec};
use skewer_api::receiver::ResourceReference;
use skewer_api::{Kustomization, RECONCILE_REQUESTED_AT};
use skewer_controller::metrics::Metrics;
use skewer_controller::notify::alert::Rules;
use skewer_controller::notify::deliver::{Notifier, PER_SECOND, Target};
use skewer_controller::notify::event::{Event, InvolvedObject, Phase, REVISION_KEY, Severity};
use skewer_controller::notify::provider::Endpoint;
use skewer_e2e::measure::{arg, memory_kib, percentile};
use skewer_e2e::objects::{create_kustomization, create_source, statuses_to};
use skewer_e2e::{GitServer, Skewer, client, eventually, hub, kc, namespace, skewer_bin};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const SHA: &str = "0df2d77f9e3c8a1b2c3d4e5f60718293a4b5c6d7";

/// (context, state) → when the API received it.
type Received = Arc<Mutex<HashMap<(String, String), Instant>>>;

/// A status API that records each request's context and state and answers 201 at once, on
/// keep-alive connections.
async fn serve(received: Received) -> Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let received = received.clone();
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        match stream.read_line(&mut line).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line == "\r\n" {
                            break;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let at = Instant::now();
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) {
                        let key = (
                            v["context"].as_str().unwrap_or_default().to_string(),
                            v["state"].as_str().unwrap_or_default().to_string(),
                        );
                        received
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(key, at);
                    }
                    let answer = "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}";
                    if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Ok(format!("http://{addr}"))
}

fn event(name: &str, phase: Phase) -> Event {
    Event {
        involved_object: InvolvedObject {
            kind: "Kustomization".into(),
            namespace: "apps".into(),
            name: name.into(),
            uid: String::new(),
            api_version: "skewer.dev/v1alpha1".into(),
        },
        severity: Severity::Info,
        timestamp: String::new(),
        message: format!("Applied revision: main@sha1:{SHA}"),
        reason: "ReconciliationSucceeded".into(),
        metadata: [(REVISION_KEY.to_string(), format!("main@sha1:{SHA}"))].into(),
        reporting_controller: "skewer".into(),
        reporting_instance: String::new(),
        labels: Default::default(),
        phase,
    }
}

/// `(context, state)` of every success received.
fn successes(received: &Received) -> usize {
    let r = received.lock().unwrap_or_else(|e| e.into_inner());
    r.keys().filter(|(_, state)| state == "success").count()
}

/// The daemon's figures (see the module's text).
async fn daemon(n: usize, received: Received, url: &str) -> Result<()> {
    let c = client(hub()).await?;
    let ns = namespace("bench-notify")?;
    let git = GitServer::start()?;
    let repo = git.repo("many")?;
    for k in 0..n {
        repo.write(
            &format!("k{k:04}/cm.yaml"),
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: k{k:04}\ndata:\n  index: \"{k}\"\n"),
        )?;
    }
    repo.commit("many")?;
    let skewer = Skewer::start_bin(skewer_bin(), &ns, &[])?;
    create_source(&c, &ns, &repo.url).await?;
    let ks: Api<Kustomization> = Api::namespaced(c.clone(), &ns);
    for k in 0..n {
        let name = format!("k{k:04}");
        create_kustomization(&ks, &ns, &name, &format!("./{name}"), "1h").await?;
    }
    let at = |rev: String| {
        let ks = ks.clone();
        async move {
            let list = ks.list(&Default::default()).await?;
            let done = list
                .items
                .iter()
                .filter(|k| {
                    k.status.as_ref().is_some_and(|s| {
                        s.last_applied_revision
                            .as_deref()
                            .is_some_and(|r| r.ends_with(&rev))
                    })
                })
                .count();
            Ok((done == n).then_some(()))
        }
    };
    let first = repo.head()?;
    eventually(
        "every Kustomization applied",
        Duration::from_secs(600),
        || at(first.clone()),
    )
    .await?;
    // The Alert only now, so that the first revision's statuses are not in the figures.
    statuses_to(&ns, "github", &format!("{url}/acme/platform"), "*").await?;
    anyhow::ensure!(
        received.lock().map(|r| r.is_empty()).unwrap_or(false),
        "statuses before the new revision"
    );

    // A new revision: a file none of them applies, so that the figures are the notifier's.
    repo.write("README.md", "a new revision\n")?;
    let second = repo.commit("a new revision")?;
    let pid = skewer.pid();
    let before = memory_kib(pid, "VmRSS").unwrap_or_default();
    let requested = Instant::now();
    kc(&[
        "annotate",
        "--overwrite",
        "gitrepository/src",
        "-n",
        &ns,
        &format!("{RECONCILE_REQUESTED_AT}=notify-bench"),
    ])?;
    let mut largest = before;
    let deadline = requested + Duration::from_secs(120 + (2 * n as u64) / u64::from(PER_SECOND));
    while successes(&received) < n {
        anyhow::ensure!(Instant::now() < deadline, "not all statuses arrived");
        largest = largest.max(memory_kib(pid, "VmRSS").unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let drained = requested.elapsed();
    eventually(
        "every Kustomization at the new revision",
        Duration::from_secs(60),
        || at(second.clone()),
    )
    .await?;
    let received = received.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let latencies: Vec<Duration> = received
        .iter()
        .filter(|((_, state), _)| state == "success")
        .map(|(_, at)| at.duration_since(requested))
        .collect();
    println!(
        "| skewer, {n} Kustomizations, a new revision: their commit statuses through one Provider ({PER_SECOND} a second) | figure |"
    );
    println!("|---|---:|");
    println!(
        "| reconcile requested → success received, p50 / p99 | {:.1} s / {:.1} s |",
        percentile(&latencies, 0.5).as_secs_f64(),
        percentile(&latencies, 0.99).as_secs_f64()
    );
    println!(
        "| last status received after | {:.1} s |",
        drained.as_secs_f64()
    );
    println!(
        "| requests received (pending statuses among them) | {} ({}) |",
        received.len(),
        received.len() - n
    );
    println!(
        "| skewer's RSS before the commit → largest while the statuses are queued | {:.1} → {:.1} MiB |",
        before as f64 / 1024.0,
        largest as f64 / 1024.0
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let n = arg("--kustomizations", 1000);
    let received: Received = Arc::default();
    let url = serve(received.clone()).await?;
    if std::env::args().any(|a| a == "--daemon") {
        return daemon(n, received, &url).await;
    }
    let reporter = kube::runtime::events::Reporter {
        controller: "skewer".into(),
        instance: None,
    };
    let notifier = Notifier::new(None, None, reporter, Arc::new(Metrics::default()));
    let spec = ProviderSpec {
        kind: "github".into(),
        address: Some(format!("{url}/acme/platform")),
        secret_ref: Some(LocalObjectReference {
            name: "token".into(),
        }),
        ..Default::default()
    };
    let secret = [("token".to_string(), b"bench".to_vec())].into();
    let endpoint = Endpoint::new(&spec, "8e1f2a3b-0000", Some(&secret))
        .map_err(anyhow::Error::msg)
        .context("the Provider")?;
    let target = Target {
        endpoint,
        client: reqwest::Client::new(),
        timeout: Duration::from_secs(15),
        object: Default::default(),
    };
    let key = ("apps".to_string(), "github".to_string());
    notifier.set_provider(key.clone(), target, false);
    let alert = AlertSpec {
        event_sources: vec![ResourceReference {
            kind: "Kustomization".into(),
            name: "*".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let rules = Rules::new("apps", &alert).map_err(anyhow::Error::msg)?;
    notifier.set_alert(("apps".into(), "status".into()), rules, key.1, false);

    let pid = std::process::id();
    let before = memory_kib(pid, "VmRSS").unwrap_or_default();
    // Every Kustomization starts its sync, then every one ends it: the order a new revision of
    // a shared repository brings them in.
    let mut published = HashMap::new();
    for phase in [Phase::Started, Phase::Succeeded] {
        for i in 0..n {
            let name = format!("ks-{i:04}");
            let state = if phase == Phase::Started {
                "pending"
            } else {
                "success"
            };
            published.insert(
                (format!("kustomization/{name}/8e1f2a3b"), state.to_string()),
                Instant::now(),
            );
            notifier.publish(&event(&name, phase));
        }
    }
    let full = memory_kib(pid, "VmRSS").unwrap_or_default();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60 + (2 * n as u64) / u64::from(PER_SECOND) * 2);
    // Every Kustomization's last status is its success; a pending still queued when its
    // success was is not sent.
    while successes(&received) < n {
        anyhow::ensure!(Instant::now() < deadline, "not all statuses arrived");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let drained = started.elapsed();
    let received = received.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let latencies: Vec<Duration> = published
        .iter()
        .filter_map(|(k, at)| Some(received.get(k)?.duration_since(*at)))
        .collect();
    let peak = memory_kib(pid, "VmHWM").unwrap_or_default();
    println!(
        "| {n} Kustomizations, a new revision: {} commit statuses through one Provider ({PER_SECOND} a second) | figure |",
        2 * n
    );
    println!("|---|---:|");
    println!(
        "| delivery latency p50 | {:.1} s |",
        percentile(&latencies, 0.5).as_secs_f64()
    );
    println!(
        "| delivery latency p99 | {:.1} s |",
        percentile(&latencies, 0.99).as_secs_f64()
    );
    println!(
        "| last status delivered after | {:.1} s |",
        drained.as_secs_f64()
    );
    println!(
        "| requests sent (pending statuses sent before their success was queued) | {} ({}) |",
        received.len(),
        received.len() - n
    );
    println!(
        "| RSS before publishing → with all {} queued | {:.1} → {:.1} MiB |",
        2 * n,
        before as f64 / 1024.0,
        full as f64 / 1024.0
    );
    println!("| peak RSS (VmHWM) | {:.1} MiB |", peak as f64 / 1024.0);
    Ok(())
}
