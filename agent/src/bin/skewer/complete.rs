//! Object names completed from the cluster: `skewer reconcile ks/<TAB>` offers the
//! Kustomizations of the namespace the command line names with `-n` (else the context's),
//! `skewer get ks <TAB>` the same. Through clap's completion engine: the shell calls
//! `COMPLETE=<shell> skewer -- <words>` (`skewer completion bash` writes the hook). Listing is
//! bounded by a short deadline; a cluster out of reach completes nothing.

use std::ffi::OsStr;
use std::time::Duration;

use clap_complete::engine::CompletionCandidate;
use kube::api::{DynamicObject, ListParams};

use skewer_view::named::Kind;

use crate::connect;

/// How long a completion may wait for the cluster.
const DEADLINE: Duration = Duration::from_secs(3);

/// The `<kind>/` prefixes offered before a `/` is typed.
const PREFIXES: [&str; 8] = [
    "ks",
    "app",
    "appset",
    "gitrepository",
    "ocirepository",
    "receiver",
    "provider",
    "alert",
];

/// `<kind>/<name>`: the kinds while no `/` is typed, then the names of that kind.
pub fn named(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let Some((prefix, partial)) = current.split_once('/') else {
        return PREFIXES
            .iter()
            .filter(|p| p.starts_with(current.as_ref()))
            .map(|p| CompletionCandidate::new(format!("{p}/")))
            .collect();
    };
    let Ok(kind) = Kind::parse(prefix) else {
        return Vec::new();
    };
    names(kind)
        .into_iter()
        .filter(|n| n.starts_with(partial))
        .map(|n| CompletionCandidate::new(format!("{prefix}/{n}")))
        .collect()
}

/// `get KIND <name>`: the names of the kind the command line lists.
pub fn listed(current: &OsStr) -> Vec<CompletionCandidate> {
    let current = current.to_string_lossy();
    let args: Vec<String> = std::env::args().collect();
    let kind = args
        .iter()
        .position(|a| a == "get")
        .and_then(|i| args.get(i + 1))
        .and_then(|k| Kind::parse(k).ok());
    let Some(kind) = kind else {
        return Vec::new();
    };
    names(kind)
        .into_iter()
        .filter(|n| n.starts_with(current.as_ref()))
        .map(CompletionCandidate::new)
        .collect()
}

/// The names of `kind` in the namespace the command line names, read within [`DEADLINE`];
/// none when the cluster cannot say.
fn names(kind: Kind) -> Vec<String> {
    connect::choose(connect::Choice {
        kubeconfig: connect::flag_in_args(&["--kubeconfig"]).map(Into::into),
        context: connect::flag_in_args(&["--context"]),
    });
    let namespace =
        connect::flag_in_args(&["--namespace", "-n"]).unwrap_or_else(connect::default_namespace);
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    runtime.block_on(async {
        let list = async {
            let client = connect::client().await.ok()?;
            let api: kube::Api<DynamicObject> =
                kube::Api::namespaced_with(client, &namespace, &kind.resource());
            let listed = api.list_metadata(&ListParams::default()).await.ok()?;
            Some(
                listed
                    .items
                    .into_iter()
                    .filter_map(|o| o.metadata.name)
                    .collect::<Vec<_>>(),
            )
        };
        tokio::time::timeout(DEADLINE, list)
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    })
}
