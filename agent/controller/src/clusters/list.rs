//! `skewer get clusters`: every registered cluster (and the hub), probed live: its server
//! version, whether it answers, how many Kustomizations target it, and the last error (the
//! probe's, or the newest `Ready=False` message of a Kustomization targeting it). The rows and
//! their table are `skewer_view::clusters`, tested without a cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::{Api, Client};

use super::{LABELS, secret};
use crate::api::Kustomization;
use crate::api::conditions::READY;
use crate::targets::ClusterRef;

pub use skewer_view::clusters::{ClusterRow, HUB, table};

/// Lists the cluster Secrets of `namespace` (every namespace when `None`) and probes each.
pub async fn list(
    hub: &Client,
    hub_server: &str,
    namespace: Option<&str>,
) -> Result<Vec<ClusterRow>, kube::Error> {
    let secrets: Api<Secret> = crate::api::scoped(hub, namespace);
    let mut found: BTreeMap<String, Secret> = BTreeMap::new();
    for label in LABELS {
        let lp = ListParams::default().labels(&format!("{label}=cluster"));
        for s in secrets.list(&lp).await?.items {
            found.insert(super::secret_key(&s), s);
        }
    }
    let kustomizations = Api::<Kustomization>::all(hub.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();

    let mut rows = vec![ClusterRow {
        name: HUB.into(),
        server: hub_server.into(),
        secret: String::new(),
        version: None,
        reachable: false,
        kustomizations: 0,
        last_error: None,
    }];
    let probe_hub = probe(hub).await;
    fill(&mut rows[0], probe_hub, &kustomizations, &ClusterRef::Hub);
    for (key, s) in found {
        let data = super::data_of(&s);
        let name = secret::registered_name(&s.metadata.name.clone().unwrap_or_default(), &data);
        let mut row = ClusterRow {
            name: name.clone(),
            server: String::from_utf8_lossy(data.get("server").map_or(&[][..], |v| v)).into(),
            secret: key.clone(),
            version: None,
            reachable: false,
            kustomizations: 0,
            last_error: None,
        };
        let probed = match secret::parse(&key, &data, super::allowed_of(&s)) {
            Ok(r) => match super::config(r.kubeconfig).await {
                Ok(config) => match super::client(config, None) {
                    Ok(client) => probe(&client).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
            Err(e) => Err(e.to_string()),
        };
        fill(
            &mut row,
            probed,
            &kustomizations,
            &ClusterRef::Registered(name),
        );
        rows.push(row);
    }
    Ok(rows)
}

async fn probe(client: &Client) -> Result<String, String> {
    match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
        Ok(Ok(info)) => Ok(info.git_version),
        Ok(Err(e)) => Err(skewer_appliers::apply::api_message(&e)),
        Err(_) => Err("no answer within 10s".into()),
    }
}

fn fill(
    row: &mut ClusterRow,
    probed: Result<String, String>,
    all: &[Kustomization],
    cluster: &ClusterRef,
) {
    let targeting: Vec<&Kustomization> = all
        .iter()
        .filter(|ks| {
            crate::reconcilers::kustomization::request::cluster(ks).as_ref() == Ok(cluster)
        })
        .collect();
    row.kustomizations = targeting.len();
    match probed {
        Ok(version) => {
            row.version = Some(version);
            row.reachable = true;
        }
        Err(e) => row.last_error = Some(e),
    }
    if row.last_error.is_none() {
        // The newest failure among the Kustomizations that target it.
        row.last_error = targeting
            .iter()
            .flat_map(|ks| ks.status.iter().flat_map(|s| &s.conditions))
            .filter(|c| c.type_ == READY && c.status == "False")
            .max_by(|a, b| a.last_transition_time.cmp(&b.last_transition_time))
            .map(|c| c.message.clone());
    }
}
