//! `skewer logs`: skewer's own log lines, from the pods of its Deployment (through the API
//! server) or from a file or standard input (a `skewer run` beside the cluster), kept to one
//! object and a level by `skewer_view::logs`.

use std::time::Duration;

use futures::AsyncBufReadExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, LogParams};
use tokio::sync::mpsc;

use skewer_view::logs::{Filter, pick};

use super::term::{Ended, Exit};

/// Where the lines come from, and how many.
pub struct Reading {
    /// Keep reading as lines come (pods only; a file or standard input is read to its end).
    pub follow: bool,
    /// The last this many lines of each pod.
    pub tail: Option<i64>,
    /// Lines newer than this, of each pod.
    pub since: Option<Duration>,
}

/// Prints the lines of the pods labeled `app.kubernetes.io/name=skewer` in `namespace` that
/// `filter` takes, as they come; returns how many were printed.
pub async fn from_pods(
    client: &kube::Client,
    namespace: &str,
    filter: &Filter,
    reading: &Reading,
) -> anyhow::Result<usize> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=skewer"))
        .await?;
    if listed.items.is_empty() {
        return Err(Ended::new(
            Exit::Failed,
            format!(
                "no skewer pods in namespace {namespace}: for a `skewer run` beside the cluster, read its log: `skewer logs … --file skewer.log`, or pipe it: `skewer run 2>&1 | skewer logs … --file -`"
            ),
        )
        .into());
    }
    let params = LogParams {
        follow: reading.follow,
        tail_lines: reading.tail,
        since_seconds: reading
            .since
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        ..Default::default()
    };
    let (tx, mut rx) = mpsc::channel::<String>(1024);
    for pod in listed.items {
        let name = pod.metadata.name.unwrap_or_default();
        let stream = pods.log_stream(&name, &params).await?;
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = stream.lines();
            while let Some(Ok(line)) = futures::StreamExt::next(&mut lines).await {
                if tx.send(line).await.is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let mut printed = 0usize;
    while let Some(line) = rx.recv().await {
        print_picked(&line, filter, &mut printed);
    }
    Ok(printed)
}

/// Prints the lines of `path` (`-`: standard input, read as they come) that `filter` takes;
/// returns how many. Blocking: the command does nothing else meanwhile.
pub fn from_file(path: &std::path::Path, filter: &Filter) -> anyhow::Result<usize> {
    use std::io::BufRead as _;
    let reader: Box<dyn std::io::BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file =
            std::fs::File::open(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut printed = 0usize;
    for line in reader.lines() {
        print_picked(&line?, filter, &mut printed);
    }
    Ok(printed)
}

/// Prints `line` as a person reads it when `filter` takes it, counting it in `printed`.
fn print_picked(line: &str, filter: &Filter, printed: &mut usize) {
    if let Some(text) = pick(line, filter) {
        println!("{text}");
        *printed = printed.saturating_add(1);
    }
}
