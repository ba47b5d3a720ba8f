//! The dashboard at scale, in a real browser; prints a Markdown table.
//!
//!   SKEWER_BENCH=ui_bench bash e2e/bench.sh [--apps 1000 --repos 10 --objects 10 --loads 5]
//!
//! `--apps` Applications of `--objects` ConfigMaps each (10,000 objects by default) synced by
//! a skewer serving the dashboard; then headless Chromium loads the list page `--loads` times
//! (a fresh browser each time): first contentful paint, the moment the rows are in the page,
//! and the bytes transferred. Then skewer's RSS with the dashboard, against a skewer without it
//! on the same objects; and provenance's cost: the bytes of `skewer.dev/origin` over all
//! objects, and the writes a new revision that moves no object costs.

use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::ListParams;
use skewer_e2e::browser::Browser;
use skewer_e2e::git::free_port;
use skewer_e2e::measure::{arg, median, memory_kib, ms};
use skewer_e2e::objects::{application_fleet, applications_synced};
use skewer_e2e::{GitServer, Skewer, client, hub, namespace};

/// skewer's resident memory once settled, in MiB.
async fn settled_rss(skewer: &Skewer) -> f64 {
    tokio::time::sleep(Duration::from_secs(10)).await;
    memory_kib(skewer.pid(), "VmRSS").unwrap_or_default() as f64 / 1024.0
}

#[tokio::main]
async fn main() -> Result<()> {
    let apps = arg("--apps", 1000);
    let repos = arg("--repos", 10);
    let objects = arg("--objects", 10);
    let loads = arg("--loads", 5).max(1);
    let c = client(hub()).await?;
    let git = GitServer::start_http()?;
    let ns = namespace("bench-ui")?;
    application_fleet(&git, &ns, apps, repos, objects)?;

    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let with_ui = Skewer::start_with(&ns, &["--ui-addr", &addr])?;
    applications_synced(&c, &ns, apps, Duration::from_secs(600)).await?;
    let rss_ui = settled_rss(&with_ui).await;

    // One browser: the first load (a browser just started), then reloads of the page as a
    // person with the browser open would see them.
    let mut b = Browser::open(&format!("http://{addr}/"))?;
    let mut loaded = Vec::new();
    for i in 0..=loads {
        if i > 0 {
            b.eval("window.__before = true; location.reload()")?;
        }
        b.wait_for(
            "rows",
            "!window.__before && document.querySelectorAll('tbody tr[data-name]').length >= 50",
            Duration::from_secs(30),
        )?;
        loaded.push(b.eval(
            "(() => {
                const paint = performance.getEntriesByType('paint').find(p => p.name === 'first-contentful-paint');
                const nav = performance.getEntriesByType('navigation')[0];
                const res = performance.getEntriesByType('resource');
                const list = res.find(r => r.name.includes('/api/list'));
                return {
                    fcp: paint ? paint.startTime : -1,
                    rows: Number(document.body.dataset.rendered) - performance.timeOrigin,
                    bytes: nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0),
                    list: list ? list.duration : -1,
                };
            })()",
        )?);
    }
    let secs = |t: &serde_json::Value, k: &str| {
        Duration::from_secs_f64(t[k].as_f64().unwrap_or(0.0).max(0.0) / 1000.0)
    };
    let first = loaded[0].clone();
    let warm = &loaded[1..];
    let paints: Vec<Duration> = warm.iter().map(|t| secs(t, "fcp")).collect();
    let rows: Vec<Duration> = warm.iter().map(|t| secs(t, "rows")).collect();
    let lists: Vec<Duration> = warm.iter().map(|t| secs(t, "list")).collect();
    let weight = first["bytes"].as_f64().unwrap_or_default() / 1024.0;
    drop(b);

    // Provenance: what `skewer.dev/origin` adds over every object.
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    let listed = cms
        .list(&ListParams::default().labels("skewer.dev/name"))
        .await?;
    let origin_bytes: usize = listed
        .items
        .iter()
        .filter_map(|cm| cm.metadata.annotations.as_ref()?.get("skewer.dev/origin"))
        .map(|v| "skewer.dev/origin".len() + v.len())
        .sum();
    let annotated = listed
        .items
        .iter()
        .filter(|cm| {
            cm.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("skewer.dev/origin"))
        })
        .count();
    drop(with_ui);

    let without = Skewer::start(&ns)?;
    applications_synced(&c, &ns, apps, Duration::from_secs(600)).await?;
    let rss_plain = settled_rss(&without).await;

    println!(
        "| dashboard, {apps} Applications × {objects} objects ({} objects) | figure |",
        apps * objects
    );
    println!("|---|---:|");
    println!(
        "| list page, first load in a browser just started: first contentful paint / first 50 rows in the page | {} / {} |",
        ms(secs(&first, "fcp")),
        ms(secs(&first, "rows"))
    );
    println!(
        "| list page, loaded again (median of {loads}): first contentful paint / first 50 rows in the page | {} / {} |",
        ms(median(paints)),
        ms(median(rows))
    );
    println!(
        "| `/api/list` response time, as the browser measured it (median of {loads}) | {} |",
        ms(median(lists))
    );
    println!("| list page weight (HTML, JS, CSS, the first page of the list) | {weight:.1} KiB |");
    println!("| skewer RSS with the dashboard / without | {rss_ui:.1} / {rss_plain:.1} MiB |");
    println!(
        "| provenance: `skewer.dev/origin` on {annotated} objects | {:.1} KiB in the API server, 0 in skewer |",
        origin_bytes as f64 / 1024.0
    );
    let _ = listed.items.first().context("no objects listed")?;
    Ok(())
}
