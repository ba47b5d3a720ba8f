//! Webhooks against polling, on the local real API server; prints a Markdown table.
//!
//!   SKEWER_BENCH=webhook_bench bash e2e/bench.sh [--pushes 50 --objects 1000 --poll-samples 3 --slow 300]
//!
//! 1. Push to applied: a repository of `--objects` ConfigMaps, one changed per push and
//!    committed, then GitHub's signed push hook sent; the time until the API server has the
//!    change (p50, p99), every interval an hour. Then the same change found by polling at a
//!    1 min interval, no hook.
//! 2. Refusals: forged requests (a wrong signature) as fast as 64 connections send them; how
//!    many skewer refuses per second of its CPU time (one core's worth).
//! 3. A burst of 20 identical pushes: the fetches the Git server sees.
//! 4. Slow clients: `--slow` clients (300) trickle headers or bodies a byte a second on the
//!    Receiver's path; pushes to it and to another Receiver, push to applied (p50, max of 10
//!    each); skewer's open file descriptors and RSS before and with them.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use skewer_e2e::git::free_port;
use skewer_e2e::measure::{arg, ms, percentile};
use skewer_e2e::{GitServer, Skewer, client, hub, kc_apply, namespace};

fn files(ns: &str, objects: usize, changed: usize) -> Vec<(String, String)> {
    let per_file = 100;
    (0..objects.div_ceil(per_file))
        .map(|f| {
            let docs: String = (f * per_file..((f + 1) * per_file).min(objects))
                .map(|i| {
                    let v = if i == 0 { changed } else { 0 };
                    format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i:04}, namespace: {ns}}}\ndata: {{v: \"{v}\"}}\n")
                })
                .collect();
            (format!("apps/f{f:02}.yaml"), docs)
        })
        .collect()
}

use skewer_e2e::hooks::{github_signature as sign, raw_post as post, slow_clients};

/// GitHub's push of `commit` to main of `url`, signed with `token`: the body and its signature.
fn push_of(token: &str, url: &str, commit: &str) -> (String, String) {
    let body = serde_json::json!({"ref": "refs/heads/main", "after": commit,
        "repository": {"clone_url": url}})
    .to_string();
    let sig = sign(token, body.as_bytes());
    (body, sig)
}

async fn value(api: &Api<ConfigMap>) -> Option<String> {
    api.get_opt("cm-0000")
        .await
        .ok()
        .flatten()
        .and_then(|m| m.data)
        .and_then(|d| d.get("v").cloned())
}

async fn until_value(api: &Api<ConfigMap>, want: &str, limit: Duration) -> Result<Duration> {
    let start = Instant::now();
    loop {
        if value(api).await.as_deref() == Some(want) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            bail!("cm-0000 not {want} after {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// CPU time (user + system) of process `pid` so far.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<u64> = after
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // utime and stime are fields 14 and 15; after the `)` they are the 12th and 13th numbers.
    let ticks = fields.get(10).copied().unwrap_or(0) + fields.get(11).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

#[tokio::main]
async fn main() -> Result<()> {
    let pushes = arg("--pushes", 50);
    let objects = arg("--objects", 1000);
    let poll_samples = arg("--poll-samples", 3);
    let slow = arg("--slow", 300);
    let c = client(hub()).await?;
    let git = GitServer::start_http()?;
    let repo = git.repo("bench")?;
    let ns = namespace("bench-hooks")?;
    for (path, text) in files(&ns, objects, 0) {
        repo.write(&path, &text)?;
    }
    repo.commit("start")?;
    let addr = format!("127.0.0.1:{}", free_port()?);
    let skewer = Skewer::start_with(&ns, &["--webhook-addr", &addr])?;
    let source = |name: &str, interval: &str| {
        format!(
            "---\napiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  url: {}\n  interval: {interval}\n  ref: {{branch: main}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: {name}}}\n  path: ./apps\n  interval: 1h\n  prune: true\n",
            repo.url
        )
    };
    kc_apply(&source("hooked", "1h"))?;
    let token = "bench-webhook-secret";
    kc_apply(&format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata: {{name: t, namespace: {ns}}}\nstringData: {{token: {token}}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Receiver\nmetadata: {{name: gh, namespace: {ns}}}\nspec:\n  type: github\n  secretRef: {{name: t}}\n  resources: [{{kind: GitRepository, name: hooked}}]\n"
    ))?;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    until_value(&cms, "0", Duration::from_secs(120)).await?;
    let receivers: Api<skewer_api::Receiver> = Api::namespaced(c.clone(), &ns);
    let path = loop {
        if let Some(p) = receivers
            .get("gh")
            .await?
            .status
            .and_then(|s| s.webhook_path)
        {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // 1. Push to applied.
    let mut hooked = Vec::new();
    for i in 1..=pushes {
        for (p, text) in files(&ns, objects, i).into_iter().take(1) {
            repo.write(&p, &text)?;
        }
        let commit = repo.commit(&format!("push {i}"))?;
        let (body, sig) = push_of(token, &repo.url, &commit);
        let h = [
            ("X-GitHub-Event", "push"),
            ("X-Hub-Signature-256", sig.as_str()),
        ];
        let start = Instant::now();
        let code = post(&addr, &path, &h, body.as_bytes()).await;
        if code != 200 {
            bail!("push {i}: {code}");
        }
        until_value(&cms, &i.to_string(), Duration::from_secs(60)).await?;
        hooked.push(start.elapsed());
    }

    // 3. A burst of 20 pushes of one commit.
    for (p, text) in files(&ns, objects, pushes + 1).into_iter().take(1) {
        repo.write(&p, &text)?;
    }
    let commit = repo.commit("burst")?;
    let (body, sig) = push_of(token, &repo.url, &commit);
    let before = git.requests("git-upload-pack fetch");
    let burst: Vec<_> = (0..20)
        .map(|_| {
            let (addr, path, body, sig) = (addr.clone(), path.clone(), body.clone(), sig.clone());
            tokio::spawn(async move {
                let h = [
                    ("X-GitHub-Event", "push"),
                    ("X-Hub-Signature-256", sig.as_str()),
                ];
                post(&addr, &path, &h, body.as_bytes()).await
            })
        })
        .collect();
    for b in burst {
        b.await?;
    }
    until_value(&cms, &(pushes + 1).to_string(), Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let burst_fetches = git.requests("git-upload-pack fetch") - before;

    // 4. Slow clients on the Receiver's path; pushes to it and to another Receiver.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Receiver\nmetadata: {{name: other, namespace: {ns}}}\nspec:\n  type: github\n  secretRef: {{name: t}}\n  resources: [{{kind: GitRepository, name: hooked}}]\n"
    ))?;
    let other = loop {
        if let Some(p) = receivers
            .get("other")
            .await?
            .status
            .and_then(|s| s.webhook_path)
        {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let pid = skewer.pid();
    let fds = || std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let rss = || skewer_e2e::measure::memory_kib(pid, "VmRSS").unwrap_or(0);
    let (idle_fds, idle_rss) = (fds(), rss());
    let slow_start = Instant::now();
    let slow_clients = slow_clients(&addr, &path, slow, 60);
    while fds() < idle_fds + slow * 9 / 10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (slow_fds, mut slow_rss) = (fds(), rss());
    let (mut to_flooded, mut to_other) = (Vec::new(), Vec::new());
    for i in 0..20 {
        let v = pushes + 2 + i;
        for (p, text) in files(&ns, objects, v).into_iter().take(1) {
            repo.write(&p, &text)?;
        }
        let commit = repo.commit(&format!("slow {i}"))?;
        let (body, sig) = push_of(token, &repo.url, &commit);
        let h = [
            ("X-GitHub-Event", "push"),
            ("X-Hub-Signature-256", sig.as_str()),
        ];
        let target = if i % 2 == 0 { &path } else { &other };
        let start = Instant::now();
        let code = post(&addr, target, &h, body.as_bytes()).await;
        if code != 200 {
            bail!("push {i} among slow clients: {code}");
        }
        until_value(&cms, &v.to_string(), Duration::from_secs(60)).await?;
        let took = start.elapsed();
        if i % 2 == 0 {
            to_flooded.push(took);
        } else {
            to_other.push(took);
        }
        slow_rss = slow_rss.max(rss());
    }
    let mut cut_off = 0;
    for s in slow_clients {
        cut_off += usize::from(s.await?);
    }
    let slow_cut = slow_start.elapsed();
    let after_pushes = pushes + 21;

    // 2. Refusals per CPU-second.
    let n = 20_000;
    let cpu_before = cpu(skewer.pid());
    let start = Instant::now();
    let mut sent = 0;
    while sent < n {
        let wave: Vec<_> = (0..64.min(n - sent))
            .map(|_| {
                let (addr, path) = (addr.clone(), path.clone());
                tokio::spawn(async move {
                    let h = [
                        ("X-GitHub-Event", "push"),
                        ("X-Hub-Signature-256", "sha256=00"),
                    ];
                    post(&addr, &path, &h, b"{}").await
                })
            })
            .collect();
        sent += wave.len();
        for w in wave {
            w.await?;
        }
    }
    let wall = start.elapsed();
    let used = cpu(skewer.pid()).saturating_sub(cpu_before);

    // Polling at 1 min, no hook: the same change, found by the same source polling.
    skewer_e2e::kc(&[
        "patch",
        "gitrepository",
        "hooked",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"interval":"1m"}}"#,
    ])?;
    let mut polled = Vec::new();
    let base = after_pushes + 1;
    until_value(&cms, &after_pushes.to_string(), Duration::from_secs(120)).await?;
    for i in 0..poll_samples {
        let v = base + i;
        for (p, text) in files(&ns, objects, v).into_iter().take(1) {
            repo.write(&p, &text)?;
        }
        repo.commit(&format!("polled {i}"))?;
        let start = Instant::now();
        until_value(&cms, &v.to_string(), Duration::from_secs(120)).await?;
        polled.push(start.elapsed());
    }

    println!("| webhooks ({objects} ConfigMaps, one changed per push) | figure |");
    println!("|---|---:|");
    println!(
        "| push → applied with GitHub's hook, p50 / p99 of {pushes} | {} / {} |",
        ms(percentile(&hooked, 0.5)),
        ms(percentile(&hooked, 0.99))
    );
    println!(
        "| the same change found by polling at `interval: 1m`, mean of {poll_samples} | {:.1} s |",
        polled.iter().map(Duration::as_secs_f64).sum::<f64>() / poll_samples.max(1) as f64
    );
    println!(
        "| forged requests refused per second of skewer's CPU ({n} sent, 64 at a time, {:.1} s) | {:.0} |",
        wall.as_secs_f64(),
        n as f64 / used.as_secs_f64().max(0.001)
    );
    println!("| fetches for a burst of 20 pushes of one commit | {burst_fetches} |");
    let p50_max = |v: Vec<Duration>| {
        let max = v.iter().max().copied().unwrap_or_default();
        format!("{} / {}", ms(percentile(&v, 0.5)), ms(max))
    };
    println!(
        "| with {slow} slow clients on the Receiver's path: push → applied to it, p50 / max of 10 | {} |",
        p50_max(to_flooded)
    );
    println!(
        "| … to another Receiver, p50 / max of 10 | {} |",
        p50_max(to_other)
    );
    println!("| … skewer's open files: idle / with the clients | {idle_fds} / {slow_fds} |");
    println!(
        "| … skewer's RSS: idle / highest with the clients | {:.1} MiB / {:.1} MiB |",
        idle_rss as f64 / 1024.0,
        slow_rss as f64 / 1024.0
    );
    println!(
        "| … slow clients cut off by the server (header deadline 5 s, body 10 s), and when the last was | {cut_off} of {slow}, {:.1} s |",
        slow_cut.as_secs_f64()
    );
    Ok(())
}
