//! Benchmarks on the local real API server; prints a Markdown table.
//!
//!   cargo run -p skewer-e2e --release --bin bench [-- --objects 1000 --runs 5 --concurrency 16]
//!   … -- --baseline path/to/an/older/skewer   also measures that build, interleaved, to compare
//!
//! First sync of N ConfigMaps from a Git repo by the `skewer` daemon (Kustomization created →
//! Ready), against `kubectl apply --server-side -f <dir>` of the same files, and against a
//! bare kube-rs loop of concurrent server-side applies (the practical limit), of the objects as
//! written and of the objects exactly as skewer sends them (owner labels and origin annotation,
//! rendered by the appliers); the `appliers`
//! library alone shows the daemon's own overhead, and the API server's audit log splits the
//! daemon's sync into phases at the requests it sent. Every run applies into a fresh namespace, so
//! every request creates an object. The approaches take turns within each round, so that they
//! share the machine's conditions (API server and etcd run on the same two cores).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client};
use serde_json::json;
use skewer_api::{GitRepository, Kustomization};
use skewer_appliers::apply::{Applier, ApplyOptions};
use skewer_appliers::load::SourceFile;
use skewer_appliers::sync::{HealthChecks, SyncRequest, Untracked};
use skewer_appliers::transform::{Owner, Transform};
use skewer_e2e::measure::{arg, median, memory_kib, ms, percentile};
use skewer_e2e::objects::{
    create_kustomization, create_source, delete_kustomization, statuses_to, until_applied,
};
use skewer_e2e::phases::{Phases, phases};
use skewer_e2e::{GitServer, Skewer, client, eventually, hub, kc, kubectl, namespace, skewer_bin};

/// A ConfigMap without a namespace: each run places it with `-n` or `targetNamespace`.
fn configmap(i: usize) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:04}\ndata:\n  index: \"{i}\"\n  payload: \"{}\"\n",
        "x".repeat(64)
    )
}

struct Setup {
    c: Client,
    /// Another skewer build measured beside this one (`--baseline`).
    baseline: Option<std::path::PathBuf>,
    objects: usize,
    concurrency: usize,
    repo_url: String,
    dir: tempfile::TempDir,
    applier: Applier,
    /// Where a Provider that is down points.
    down: Silent,
}

/// A server on loopback that accepts connections and never answers: a Provider that is down.
struct Silent {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Silent {
    async fn start() -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        Ok(Self { port, accepted })
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// With `down`, an Alert sends the sync's commit statuses to a Provider that never answers.
async fn skewer_daemon(s: &Setup, ns: &str, bin: &Path, down: bool) -> Result<(Duration, Phases)> {
    let skewer = Skewer::start_bin(bin, ns, &["--concurrency", &s.concurrency.to_string()])?;
    create_source(&s.c, ns, &s.repo_url).await?;
    if down {
        let address = format!("https://127.0.0.1:{}/org/repo", s.down.port);
        statuses_to(ns, "down", &address, "app").await?;
    }
    let tried = s.down.accepted();
    let ks: Api<Kustomization> = Api::namespaced(s.c.clone(), ns);
    let start = Instant::now();
    let uid = create_kustomization(&ks, ns, "app", "./cms", "1h").await?;
    until_applied(&ks, "app").await?;
    let elapsed = start.elapsed();
    if down {
        // The statuses were really sent (and are still unanswered).
        eventually(
            "a delivery to the silent Provider",
            Duration::from_secs(10),
            || async { Ok((s.down.accepted() > tried).then_some(())) },
        )
        .await?;
        // While skewer runs, which removes their finalizers.
        kc(&[
            "delete",
            "alert/statuses",
            "provider/down",
            "-n",
            ns,
            "--timeout=60s",
        ])?;
    }
    let mut phases = phases(hub(), ns, "app", "skewer", "configmaps")?;
    phases.own = own_phases(&skewer.logs());
    delete_kustomization(&ks, "app", &uid).await?;
    Ok((elapsed, phases))
}

/// The phases skewer's log gives for its sync (`synced … phases=build=…ms plan=…ms …`).
fn own_phases(log: &str) -> String {
    let plain = strip_ansi(log);
    plain
        .lines()
        .find(|l| l.contains("synced"))
        .and_then(|l| l.split("phases=").nth(1))
        .map(|p| p.split(" skewer").next().unwrap_or(p).trim().to_string())
        .unwrap_or_default()
}

/// `text` without terminal colour sequences (`ESC [ … m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The repository's files, as the daemon reads them from its artifact.
fn files(s: &Setup) -> Vec<SourceFile> {
    (0..s.objects)
        .map(|i| SourceFile {
            path: format!("cms/cm-{i:04}.yaml"),
            data: configmap(i).into_bytes(),
        })
        .collect()
}

/// The appliers library alone: the sync pipeline the daemon runs (build + plan + apply), with
/// no controller and no status writes.
async fn library(s: &Setup, ns: &str) -> Result<Duration> {
    let files = files(s);
    let apply = ApplyOptions {
        field_manager: "skewer".into(),
        owner: Owner {
            name: "bench".into(),
            namespace: ns.into(),
        },
        transform: Transform {
            target_namespace: Some(ns.into()),
            ..Default::default()
        },
        force: false,
        concurrency: s.concurrency,
        wait_timeout: Duration::from_secs(60),
    };
    let request = SyncRequest {
        files,
        path: "cms".into(),
        patches: Vec::new(),
        apply: std::sync::Arc::new(apply),
        prune: None,
        health: HealthChecks::None,
        deadline: tokio::time::Instant::now() + Duration::from_secs(60),
        previous: Default::default(),
        scope: Default::default(),
        allow_empty: false,
        substitute: None,
        decrypt: None,
        overlay: Default::default(),
    };
    let start = Instant::now();
    let report = skewer_appliers::sync::run(&s.applier, &Untracked, request).await;
    let elapsed = start.elapsed();
    if let Err(e) = report.result() {
        anyhow::bail!("{e}");
    }
    Ok(elapsed)
}

/// Bare kube-rs through `c`: N concurrent server-side applies of prebuilt objects;
/// `as_skewer_sends`: the objects exactly as skewer renders them for the daemon's Kustomization
/// (owner labels, origin annotation: every field the API server then tracks), taken from the
/// appliers' own rendering, so the comparison is like for like.
async fn bare_loop(s: &Setup, c: &Client, ns: &str, as_skewer_sends: bool) -> Result<Duration> {
    let ar = kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), ns, &ar);
    let docs: Vec<(String, serde_json::Value)> = if as_skewer_sends {
        let owner = Owner {
            name: "app".into(),
            namespace: ns.into(),
        };
        let transform = Transform {
            target_namespace: Some(ns.into()),
            ..Default::default()
        };
        skewer_appliers::sync::preview(&files(s), "cms", &[], None, &transform, Some(&owner))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .into_iter()
            .map(|m| (m.name().to_string(), m.object))
            .collect()
    } else {
        (0..s.objects)
            .map(|i| {
                let name = format!("cm-{i:04}");
                let doc = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"index": i.to_string(), "payload": "x".repeat(64)}});
                (name, doc)
            })
            .collect()
    };
    let pp = PatchParams::apply("bench").force();
    let start = Instant::now();
    let results: Vec<_> = stream::iter(0..docs.len())
        .map(|i| {
            let (api, pp, (name, doc)) = (&api, &pp, &docs[i]);
            async move { api.patch(name, pp, &Patch::Apply(doc)).await }
        })
        .buffer_unordered(s.concurrency)
        .collect()
        .await;
    let elapsed = start.elapsed();
    results.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(elapsed)
}

/// The like-for-like loop while a metadata watch of those objects is open, as a daemon's drift
/// watch is on a cluster it applied the kind to before: the server sends an event for each
/// create while it serves the applies.
async fn bare_loop_watched(s: &Setup, ns: &str) -> Result<Duration> {
    let ar = kube::api::ApiResource::erase::<ConfigMap>(&());
    let api: Api<kube::core::PartialObjectMeta<DynamicObject>> =
        Api::namespaced_with(s.c.clone(), ns, &ar);
    let config = watcher::Config::default().labels(skewer_appliers::transform::OWNER_NAME);
    let (listed, started) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::InitDone) = event
                && let Some(tx) = listed.take()
            {
                let _ = tx.send(());
            }
        }
    });
    started.await.context("the watch ended before its list")?;
    let elapsed = bare_loop(s, &s.c, ns, true).await;
    watch.abort();
    elapsed
}

fn kubectl_apply(kubeconfig: &Path, dir: &Path, ns: &str) -> Result<Duration> {
    let start = Instant::now();
    let out = kubectl(kubeconfig)
        .args(["apply", "--server-side", "-n", ns, "-f"])
        .arg(dir)
        .output()?;
    let elapsed = start.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(elapsed)
}

const NAMES: [&str; 9] = [
    "skewer daemon: Kustomization created → Ready",
    "appliers library: the sync pipeline (load + plan + apply)",
    "bare kube-rs SSA loop",
    "kubectl apply --server-side -f DIR",
    "bare kube-rs SSA loop, the objects exactly as skewer sends them (owner labels, origin)",
    "the same on a new client, its connections opened inside the measurement (as a new daemon's are)",
    "the same while a metadata watch of those objects is open (as a drift watch is once the kind was applied before)",
    "skewer daemon, its commit statuses sent to a Provider that never answers",
    "baseline skewer daemon (--baseline): created → Ready",
];

#[tokio::main]
async fn main() -> Result<()> {
    let objects = arg("--objects", 1000);
    let runs = arg("--runs", 5);
    let concurrency = arg("--concurrency", 16);
    let kubeconfig = hub();
    let c = client(kubeconfig).await?;
    let info = c.apiserver_version().await?;
    eprintln!(
        "API server {}.{}; {objects} ConfigMaps; {runs} rounds; {concurrency} requests in flight",
        info.major, info.minor
    );

    let dir = tempfile::tempdir()?;
    let git = GitServer::start()?;
    let repo = git.repo("bench")?;
    for i in 0..objects {
        std::fs::write(dir.path().join(format!("cm-{i:04}.yaml")), configmap(i))?;
        repo.write(&format!("cms/cm-{i:04}.yaml"), &configmap(i))?;
    }
    repo.commit("configmaps")?;
    let baseline = std::env::args()
        .skip_while(|a| a != "--baseline")
        .nth(1)
        .map(std::path::PathBuf::from);
    let setup = Setup {
        baseline,
        applier: Applier::new(c.clone()).await?,
        c,
        objects,
        concurrency,
        repo_url: repo.url.clone(),
        dir,
        down: Silent::start().await?,
    };

    // `--only first|steady|cold` runs one section.
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    let wants = |section: &str| only.as_deref().is_none_or(|o| o == section);
    if wants("first") {
        first_sync(
            &setup,
            kubeconfig,
            runs,
            &format!("{}.{}", info.major, info.minor),
        )
        .await?;
        println!();
    }
    if wants("steady") {
        steady_state(&setup, objects).await?;
        println!();
    }
    if wants("cold") {
        let (n, per) = (
            arg("--kustomizations", 100),
            arg("--per-kustomization", 100),
        );
        cold_start(&setup, skewer_bin(), "skewer", n, per).await?;
        if let Some(baseline) = &setup.baseline {
            println!();
            cold_start(&setup, baseline, "baseline", n, per).await?;
        }
    }
    Ok(())
}

/// The first-sync table: the approaches, interleaved round by round.
async fn first_sync(setup: &Setup, kubeconfig: &Path, runs: usize, server: &str) -> Result<()> {
    let (objects, concurrency) = (setup.objects, setup.concurrency);
    let approaches = if setup.baseline.is_some() { 9 } else { 8 };
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); approaches];
    // The daemons' phases, this build's and the baseline's.
    let mut phased: [Vec<Phases>; 2] = Default::default();
    for round in 0..runs {
        // Each round starts with the next approach, so that none always runs right after the
        // same one (and its namespace's deletion).
        for turn in 0..approaches {
            let which = (round + turn) % approaches;
            let slot = &mut times[which];
            let ns = namespace("bench")?;
            let mut daemon = |(t, p): (Duration, Phases), i: usize| {
                phased[i].push(p);
                t
            };
            let t = match (which, &setup.baseline) {
                (0, _) => daemon(skewer_daemon(setup, &ns, skewer_bin(), false).await?, 0),
                (1, _) => library(setup, &ns).await?,
                (2, _) => bare_loop(setup, &setup.c, &ns, false).await?,
                (3, _) => kubectl_apply(kubeconfig, setup.dir.path(), &ns)?,
                (4, _) => bare_loop(setup, &setup.c, &ns, true).await?,
                (5, _) => bare_loop(setup, &client(hub()).await?, &ns, true).await?,
                (6, _) => bare_loop_watched(setup, &ns).await?,
                (7, _) => skewer_daemon(setup, &ns, skewer_bin(), true).await?.0,
                (_, Some(bin)) => daemon(skewer_daemon(setup, &ns, bin, false).await?, 1),
                (_, None) => unreachable!("eight approaches without a baseline"),
            };
            eprintln!("round {round}: {}: {:.2} s", NAMES[which], t.as_secs_f64());
            slot.push(t);
            // Wait for the deletion, so the next measurement starts on a quiet cluster.
            kc(&["delete", "namespace", &ns, "--timeout=120s"])?;
        }
    }

    println!(
        "| first sync of {objects} ConfigMaps (k8s {server}, {concurrency} requests in flight) | median | runs |"
    );
    println!("|---|---:|---|");
    let medians: Vec<f64> = times
        .iter()
        .map(|t| median(t.clone()).as_secs_f64())
        .collect();
    for (i, t) in times.iter().enumerate() {
        let all: Vec<String> = t
            .iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect();
        println!(
            "| {} | {:.2} s | {} |",
            NAMES[i],
            medians[i],
            all.join(", ")
        );
    }
    println!();
    println!(
        "skewer / bare loop: {:.2}x; skewer / bare loop of the objects skewer sends: {:.2}x (target ≤ 1.1x); kubectl / skewer: {:.1}x",
        medians[0] / medians[2],
        medians[0] / medians[4],
        medians[3] / medians[0]
    );
    println!(
        "skewer / the same loop on a new client: {:.2}x",
        medians[0] / medians[5]
    );
    println!(
        "the same loop with a watch open / without: {:.2}x",
        medians[6] / medians[4]
    );
    println!(
        "skewer with a Provider that never answers / without: {:.2}x",
        medians[7] / medians[0]
    );
    if let Some(baseline) = medians.get(8) {
        println!("skewer / baseline: {:.2}x", medians[0] / baseline);
    }
    println!();
    print_phases(&phased, medians[4]);
    Ok(())
}

/// The daemons' first syncs split at the requests they sent (medians; the audit log's
/// timestamps), beside the bare loop's applies.
fn print_phases(phased: &[Vec<Phases>; 2], bare: f64) {
    let has_baseline = !phased[1].is_empty();
    println!(
        "| phases of skewer's first sync (API server's audit log) | skewer |{}",
        if has_baseline { " baseline |" } else { "" }
    );
    println!("|---|---:|{}", if has_baseline { "---:|" } else { "" });
    for (i, name) in Phases::NAMES.iter().enumerate() {
        let cells: Vec<String> = phased
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| ms(median(p.iter().map(|p| p.durations()[i]).collect())))
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    println!(
        "| (bare kube-rs SSA loop, all applies) | {:.1} ms |",
        bare * 1000.0
    );
    if let Some(p) = phased[0].last() {
        println!();
        println!("requests before the first apply: {}", p.before.join(", "));
        println!("requests after the last apply: {}", p.after.join(", "));
        println!("skewer's own log of that sync: {}", p.own);
    }
}

/// A metric's value from skewer's /metrics text (`name{labels} value`).
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// No-op reconciles of `objects` applied objects, and self-heal latency.
async fn steady_state(s: &Setup, objects: usize) -> Result<()> {
    let ns = namespace("bench-steady")?;
    let skewer = Skewer::start_with(&ns, &["--concurrency", &s.concurrency.to_string()])?;
    create_source(&s.c, &ns, &s.repo_url).await?;
    // A 1 s interval: every second a reconcile finds nothing changed.
    let ks: Api<Kustomization> = Api::namespaced(s.c.clone(), &ns);
    let uid = create_kustomization(&ks, &ns, "app", "./cms", "1s").await?;
    until_applied(&ks, "app").await?;

    // Requests skewer sends in a window of no-op reconciles, counted by the API server.
    let noop = |text: &str, what: &str| {
        metric(
            text,
            &format!(
                "skewer_reconcile_duration_seconds_{what}{{kind=\"Kustomization\",result=\"noop\"}}"
            ),
        )
    };
    // The window opens once a no-op reconcile has happened, so the first apply's
    // stragglers (its Event) stay out of it.
    skewer_e2e::eventually(
        "a first no-op reconcile",
        Duration::from_secs(30),
        || async {
            let (_, text) = skewer.http_get("/metrics")?;
            Ok((noop(&text, "count") >= 1.0).then_some(()))
        },
    )
    .await?;
    let before = skewer_e2e::audited("skewer", &ns)?;
    let (_, m0) = skewer.http_get("/metrics")?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, m1) = skewer.http_get("/metrics")?;
    let after = skewer_e2e::audited("skewer", &ns)?;
    let sent = &after[before.len().min(after.len())..];
    // Lease renewals are leader election, not reconciles: counted apart.
    let is_write = |a: &&skewer_e2e::Audited| !matches!(a.verb.as_str(), "get" | "list" | "watch");
    let lease_writes = sent
        .iter()
        .filter(is_write)
        .filter(|a| a.resource == "leases")
        .count();
    let lease_requests = sent.iter().filter(|a| a.resource == "leases").count();
    let writes = sent
        .iter()
        .filter(is_write)
        .filter(|a| a.resource != "leases")
        .count();
    let mut by_resource: std::collections::BTreeMap<String, usize> = Default::default();
    for a in sent {
        *by_resource
            .entry(format!("{} {}", a.verb, a.resource))
            .or_default() += 1;
    }
    eprintln!("requests in the no-op window: {by_resource:?}");
    let object_reads = sent
        .iter()
        .filter(|a| a.verb == "get" && a.resource == "configmaps")
        .count();
    let count = noop(&m1, "count") - noop(&m0, "count");
    let mean_ms = 1000.0 * (noop(&m1, "sum") - noop(&m0, "sum")) / count.max(1.0);

    // Self-heal: 50 edits of a managed field, each timed until a watch sees it undone.
    let cms: Api<ConfigMap> = Api::namespaced(s.c.clone(), &ns);
    let mut events = kube::runtime::watcher(
        cms.clone(),
        kube::runtime::watcher::Config::default().fields("metadata.name=cm-0000"),
    )
    .boxed();
    // Prime the watch (it starts lazily) so that every repair arrives as an event.
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(10), events.next()).await? {
        if matches!(ev, Ok(kube::runtime::watcher::Event::InitDone)) {
            break;
        }
    }
    let mut heal = Vec::new();
    for i in 0..50 {
        let patch = json!({"data": {"index": format!("edited-{i}")}});
        cms.patch("cm-0000", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let start = Instant::now();
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .context("no heal within 10 s")?;
            if let Some(Ok(kube::runtime::watcher::Event::Apply(cm))) = ev
                && cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("index"))
                    .map(String::as_str)
                    == Some("0")
            {
                break;
            }
        }
        heal.push(start.elapsed());
    }
    println!("| steady state, {objects} ConfigMaps (k8s 1.20) | figure | target |");
    println!("|---|---:|---|");
    println!("| no-op reconciles in 10 s | {count:.0} | |");
    println!(
        "| requests per no-op reconcile, writes (audit log) | {:.1} | 0 |",
        writes as f64 / count.max(1.0)
    );
    println!(
        "| requests per no-op reconcile, object reads (audit log) | {:.1} | 0 |",
        object_reads as f64 / count.max(1.0)
    );
    println!(
        "| requests per no-op reconcile, all (audit log; leader election apart) | {:.1} | |",
        (sent.len() - lease_requests) as f64 / count.max(1.0)
    );
    println!("| lease renewals in the window (leader election) | {lease_writes} | |");
    println!("| no-op reconcile time, mean (skewer's histogram) | {mean_ms:.1} ms | < 50 ms |");
    println!(
        "| self-heal latency p50, 50 edits | {} ms | < 300 ms |",
        percentile(&heal, 0.5).as_millis()
    );
    println!(
        "| self-heal latency p99, 50 edits | {} ms | < 1 s |",
        percentile(&heal, 0.99).as_millis()
    );
    delete_kustomization(&ks, "app", &uid).await?;
    Ok(())
}

/// `n` Kustomizations of `per` ConfigMaps each, all defined before skewer starts: time from
/// process start to all Ready, and skewer's peak RSS.
async fn cold_start(s: &Setup, bin: &Path, label: &str, n: usize, per: usize) -> Result<()> {
    let ns = namespace("bench-cold")?;
    let git = GitServer::start()?;
    let repo = git.repo("many")?;
    for k in 0..n {
        let docs: String = (0..per)
            .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: k{k:03}-cm-{i:04}\ndata:\n  index: \"{i}\"\n"))
            .collect();
        repo.write(&format!("k{k:03}/cms.yaml"), &docs)?;
    }
    repo.commit("many")?;
    // The source is fetched by the skewer under test; only the Kustomizations wait.
    let repos: Api<GitRepository> = Api::namespaced(s.c.clone(), &ns);
    let source: GitRepository = serde_json::from_value(json!({
        "apiVersion": "skewer.dev/v1alpha1", "kind": "GitRepository",
        "metadata": {"name": "src", "namespace": ns}, "spec": {"url": repo.url, "interval": "1h"}
    }))?;
    repos.create(&Default::default(), &source).await?;
    let ks: Api<Kustomization> = Api::namespaced(s.c.clone(), &ns);
    for k in 0..n {
        create_kustomization(&ks, &ns, &format!("k{k:03}"), &format!("./k{k:03}"), "1h").await?;
    }
    let start = Instant::now();
    let skewer = Skewer::start_bin(bin, &ns, &["--concurrency", &s.concurrency.to_string()])?;
    let mut peak_kib = 0u64;
    // The largest anonymous (heap, stacks) and file-backed (the binary's code and read-only
    // data) resident sets seen among the samples: what the peak is made of.
    let (mut anon_kib, mut file_kib) = (0u64, 0u64);
    let mut first_ready = None;
    // SKEWER_BENCH_SMAPS=DIR keeps skewer's memory map at its largest sample, per mapping
    // (`DIR/<label>.smaps`), to see what the peak is made of.
    let smaps_dir = std::env::var_os("SKEWER_BENCH_SMAPS").map(std::path::PathBuf::from);
    let mut rss_kib = 0u64;
    loop {
        peak_kib = memory_kib(skewer.pid(), "VmHWM").unwrap_or(peak_kib);
        let rss = memory_kib(skewer.pid(), "VmRSS").unwrap_or(0);
        if let Some(dir) = smaps_dir.as_ref().filter(|_| rss > rss_kib) {
            rss_kib = rss;
            let map = std::fs::read(format!("/proc/{}/smaps", skewer.pid()))?;
            std::fs::write(dir.join(format!("{label}.smaps")), map)?;
        }
        anon_kib = anon_kib.max(memory_kib(skewer.pid(), "RssAnon").unwrap_or(0));
        file_kib = file_kib.max(memory_kib(skewer.pid(), "RssFile").unwrap_or(0));
        let ready = ks
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|k| {
                k.status
                    .as_ref()
                    .is_some_and(|s| s.last_applied_revision.is_some())
            })
            .count();
        if ready > 0 && first_ready.is_none() {
            first_ready = Some(start.elapsed());
        }
        if ready == n {
            break;
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(300),
            "only {ready}/{n} Ready after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_ready = start.elapsed();
    println!(
        "| cold start ({label}), {n} Kustomizations × {per} ConfigMaps (k8s 1.20) | figure | target |"
    );
    println!("|---|---:|---|");
    println!(
        "| process start → first Ready | {:.1} s | |",
        first_ready.unwrap_or(all_ready).as_secs_f64()
    );
    println!(
        "| process start → all Ready | {:.1} s | < 30 s |",
        all_ready.as_secs_f64()
    );
    println!(
        "| skewer peak RSS (VmHWM) with {} managed objects | {:.1} MiB | < 80 MiB |",
        n * per,
        peak_kib as f64 / 1024.0
    );
    println!(
        "| … largest anonymous part (heap, stacks), sampled every 50 ms | {:.1} MiB | |",
        anon_kib as f64 / 1024.0
    );
    println!(
        "| … largest file-backed part (skewer's code, mapped from its binary), sampled | {:.1} MiB | |",
        file_kib as f64 / 1024.0
    );
    // The next start must not find these objects: they carry skewer's owner labels, and its
    // drift watches would list them too.
    // skewer is stopped first (so it prunes nothing), so their finalizers go by hand.
    drop(skewer);
    let release = serde_json::json!({"metadata": {"finalizers": null}});
    for k in 0..n {
        ks.patch(
            &format!("k{k:03}"),
            &Default::default(),
            &kube::api::Patch::Merge(&release),
        )
        .await?;
    }
    // One request deletes them all; the namespace may go at its own pace after that.
    let cms: Api<ConfigMap> = Api::namespaced(s.c.clone(), &ns);
    cms.delete_collection(&Default::default(), &Default::default())
        .await?;
    kc(&["delete", "namespace", &ns, "--wait=false"])?;
    Ok(())
}
