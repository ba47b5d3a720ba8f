//! Issue 27: replicas with `--shards` split the work on Leases. Three replicas share 300
//! Kustomizations, each applies its own share and a commit exactly once per object (the audit
//! log counts the patches); one killed, its shards are taken over within the lease duration and
//! what it managed is healed; a fourth joining takes shards over without a double apply.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use common::*;
use kube::Api;
use kube::api::ListParams;
use skewer_api::Kustomization;
use skewer_e2e::{Skewer, audited, eventually, kc_apply};

const N: usize = 300;
const LEASE: &str = "4s";

fn commit_files(repo: &skewer_e2e::Repo, value: &str) -> Result<String> {
    for i in 0..N {
        repo.write(
            &format!("k{i:03}/cm.yaml"),
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:03}\ndata:\n  value: \"{value}\"\n"
            ),
        )?;
    }
    repo.commit(value)
}

fn replica(ns: &str) -> Result<Skewer> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    Skewer::start_with(
        ns,
        &[
            "--shards",
            "auto",
            "--lease-duration",
            LEASE,
            "--storage-addr",
            &addr,
        ],
    )
}

/// The Kustomizations Ready at `commit`, of `N`.
async fn ready_at(c: &kube::Client, ns: &str, commit: &str) -> Result<usize> {
    let api: Api<Kustomization> = Api::namespaced(c.clone(), ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|k| {
            k.status.as_ref().is_some_and(|s| {
                ready(s).is_some_and(|(st, ..)| st == "True")
                    && s.last_applied_revision
                        .as_deref()
                        .is_some_and(|r| r.ends_with(commit))
            })
        })
        .count())
}

async fn all_ready_at(c: &kube::Client, ns: &str, commit: &str, within: Duration) -> Result<()> {
    eventually(
        &format!("all {N} Kustomizations Ready at {commit}"),
        within,
        || async {
            let n = ready_at(c, ns, commit).await?;
            Ok((n == N).then_some(()))
        },
    )
    .await
}

fn held_by(holders: &BTreeMap<String, String>, r: &Skewer) -> usize {
    let me = format!("-{}", r.pid());
    holders.values().filter(|h| h.ends_with(&me)).count()
}

/// `skewer_shards_held` on one replica's /metrics.
fn shards_metric(r: &Skewer) -> Result<u64> {
    let (_, body) = r.http_get("/metrics")?;
    Ok(body
        .lines()
        .find_map(|l| l.strip_prefix("skewer_shards_held "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

/// Patches of each ConfigMap in `ns` after the first `skip` requests of the audit log.
fn patches(ns: &str, skip: usize) -> Result<BTreeMap<String, usize>> {
    let mut counts = BTreeMap::new();
    for a in audited("skewer", ns)?.into_iter().skip(skip) {
        if a.resource == "configmaps" && a.verb == "patch" && !a.uri.contains("dryRun") {
            *counts.entry(a.name).or_default() += 1;
        }
    }
    Ok(counts)
}

#[tokio::test(flavor = "multi_thread")]
async fn replicas_split_the_work_and_take_over_on_leases() -> Result<()> {
    let f = Fixture::new("shards").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let first = commit_files(&f.repo, "one")?;
    let mut replicas = vec![replica(&ns)?, replica(&ns)?, replica(&ns)?];
    git_repository(&ns, "src", &f.repo.url)?;
    let docs: String = (0..N)
        .map(|i| {
            format!(
                "---\napiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: k{i:03}, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: src}}\n  path: ./k{i:03}\n  interval: 1h\n  retryInterval: 2s\n  targetNamespace: {ns}\n"
            )
        })
        .collect();
    kc_apply(&docs)?;
    all_ready_at(&c, &ns, &first, Duration::from_secs(120)).await?;

    // Every shard held, by all three, each with its share (Leases, metrics and logs agree).
    let shares = eventually("16 shards held by 3 replicas", WAIT, || async {
        let h = skewer_e2e::shard_holders(&c, &ns).await?;
        let shares: Vec<usize> = replicas.iter().map(|r| held_by(&h, r)).collect();
        Ok(
            (h.len() == 16 && shares.iter().sum::<usize>() == 16 && shares.iter().all(|n| *n > 0))
                .then_some(shares),
        )
    })
    .await?;
    for (r, share) in replicas.iter().zip(&shares) {
        assert_eq!(
            shards_metric(r)? as usize,
            *share,
            "metrics disagree with the Leases"
        );
        assert!(r.logs().contains("shards: this replica's share"));
    }
    eprintln!("shares of 16 shards: {shares:?}");
    // `skewer get shards` says the same.
    let table = skewer_cli(&["get", "shards", "-n", &ns])?;
    for (r, share) in replicas.iter().zip(&shares) {
        let pid = format!("-{}", r.pid());
        let row = table
            .lines()
            .find(|l| {
                l.contains("replica")
                    && l.split_whitespace()
                        .nth(2)
                        .is_some_and(|h| h.ends_with(&pid))
            })
            .unwrap_or_else(|| panic!("no row of replica {pid} in:\n{table}"));
        assert!(
            row.contains("held") && row.trim_end().ends_with(&format!(" {share}")),
            "{row}"
        );
    }

    // A commit: every ConfigMap patched exactly once by the replica set.
    let mark = audited("skewer", &ns)?.len();
    let second = commit_files(&f.repo, "two")?;
    all_ready_at(&c, &ns, &second, Duration::from_secs(120)).await?;
    let counts = patches(&ns, mark)?;
    assert_eq!(counts.len(), N, "every ConfigMap patched: {}", counts.len());
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "patched more than once: {twice:?}");

    // One replica dies: the others take its shards within the lease duration and re-apply
    // its objects; a ConfigMap deleted meanwhile comes back.
    let mut victim = replicas.remove(0);
    let victim_pid = victim.pid();
    victim.kill()?;
    let killed = Instant::now();
    skewer_e2e::kc(&["delete", "configmap", "--all", "-n", &ns, "--wait=false"])?;
    eventually("the dead replica's shards taken over", WAIT, || async {
        let h = skewer_e2e::shard_holders(&c, &ns).await?;
        let dead = h
            .values()
            .filter(|v| v.is_empty() || v.ends_with(&format!("-{victim_pid}")))
            .count();
        Ok((dead == 0).then_some(()))
    })
    .await?;
    let taken_over = killed.elapsed();
    eventually("every ConfigMap back", WAIT, || async {
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(c.clone(), &ns);
        let n = api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|cm| {
                cm.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("cm-"))
            })
            .count();
        Ok((n == N).then_some(()))
    })
    .await?;
    let healed = killed.elapsed();
    eprintln!(
        "killed a replica: shards taken over in {:.1} s, every ConfigMap back in {:.1} s (lease {LEASE})",
        taken_over.as_secs_f64(),
        healed.as_secs_f64()
    );
    // The Lease expires 4 s after its last renewal; the survivors look every second.
    assert!(
        taken_over < Duration::from_secs(8),
        "takeover took {taken_over:?}"
    );

    // A replica joins: shards move to it, and nothing is applied twice.
    let mark = audited("skewer", &ns)?.len();
    replicas.push(replica(&ns)?);
    let newcomer = replicas.last().expect("just pushed");
    eventually("the newcomer to hold its share", WAIT, || async {
        let h = skewer_e2e::shard_holders(&c, &ns).await?;
        let shares: Vec<usize> = replicas.iter().map(|r| held_by(&h, r)).collect();
        Ok((held_by(&h, newcomer) >= 4 && shares.iter().sum::<usize>() == 16).then_some(()))
    })
    .await?;
    all_ready_at(&c, &ns, &second, WAIT).await?;
    let counts = patches(&ns, mark)?;
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "applied twice while shards moved: {twice:?}"
    );
    assert!(
        !counts.is_empty(),
        "the newcomer re-applied nothing of the shards it took"
    );
    eprintln!(
        "a replica joined: {} ConfigMaps re-applied once by their new owner",
        counts.len()
    );

    // A clean stop (a rolling update) hands its shards over at once, not after the lease.
    let mut leaving = replicas.remove(0);
    let leaving_pid = format!("-{}", leaving.pid());
    leaving.terminate(Duration::from_secs(10))?;
    let stopped = Instant::now();
    let h = skewer_e2e::shard_holders(&c, &ns).await?;
    assert!(
        !h.values().any(|v| v.ends_with(&leaving_pid)),
        "a replica stopped by SIGTERM still holds shards: {h:?}"
    );
    eventually("the stopped replica's shards taken", WAIT, || async {
        let h = skewer_e2e::shard_holders(&c, &ns).await?;
        let shares: Vec<usize> = replicas.iter().map(|r| held_by(&h, r)).collect();
        Ok((shares.iter().sum::<usize>() == 16).then_some(()))
    })
    .await?;
    let handed = stopped.elapsed();
    eprintln!(
        "a replica stopped by SIGTERM: its shards taken in {:.1} s",
        handed.as_secs_f64()
    );
    assert!(
        handed < Duration::from_secs(4),
        "no faster than the lease: {handed:?}"
    );
    Ok(())
}
