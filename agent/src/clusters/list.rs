//! `skewer get clusters`: every registered cluster (and the hub), probed live: its server
//! version, whether it answers, how many Kustomizations target it, and the last error (the
//! probe's, or the newest `Ready=False` message of a Kustomization targeting it). The probe
//! and the table are apart: the table is tested without a cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::ListParams;
use kube::{Api, Client};
use serde::Serialize;

use super::{LABELS, secret};
use crate::api::Kustomization;
use crate::api::conditions::READY;
use crate::targets::ClusterRef;

/// One row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    pub name: String,
    pub server: String,
    /// `namespace/name` of its Secret; empty for the hub.
    pub secret: String,
    pub version: Option<String>,
    pub reachable: bool,
    pub kustomizations: usize,
    pub last_error: Option<String>,
}

/// The name the hub goes by in the listing.
pub const HUB: &str = "(hub)";

/// Lists the cluster Secrets of `namespace` (every namespace when `None`) and probes each.
pub async fn list(
    hub: &Client,
    hub_server: &str,
    namespace: Option<&str>,
) -> Result<Vec<ClusterRow>, kube::Error> {
    let secrets: Api<Secret> = crate::runtime::scoped(hub, namespace);
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

/// The rows as a table, kubectl-style.
pub fn table(rows: &[ClusterRow]) -> String {
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                r.server.clone(),
                r.version.clone().unwrap_or_else(|| "-".into()),
                if r.reachable { "yes" } else { "no" }.into(),
                r.kustomizations.to_string(),
                r.last_error
                    .as_deref()
                    .map(one_line)
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "SERVER",
        "VERSION",
        "REACHABLE",
        "KUSTOMIZATIONS",
        "LAST ERROR",
    ];
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: Vec<&str>| {
        let mut out = String::new();
        for (i, c) in cols.iter().enumerate() {
            if i + 1 == cols.len() {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}   ", w = widths[i]));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &cells {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A message on one line, at most 120 characters.
fn one_line(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= 120 {
        return flat;
    }
    flat.chars().take(119).collect::<String>() + "…"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lines_up_and_keeps_errors_on_one_line() {
        let rows = vec![
            ClusterRow {
                name: HUB.into(),
                server: "https://127.0.0.1:6443".into(),
                secret: String::new(),
                version: Some("v1.20.15".into()),
                reachable: true,
                kustomizations: 3,
                last_error: None,
            },
            ClusterRow {
                name: "spoke-b".into(),
                server: "https://10.0.0.2:443".into(),
                secret: "skewer-system/vcluster-b".into(),
                version: None,
                reachable: false,
                kustomizations: 12,
                last_error: Some("error trying to connect:\n  connection refused".into()),
            },
        ];
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("NAME      SERVER"));
        assert!(lines[1].contains("v1.20.15") && lines[1].contains("yes"));
        assert!(lines[2].ends_with("error trying to connect: connection refused"));
        let col = lines[0].find("REACHABLE").unwrap();
        assert_eq!(&lines[2][col..col + 2], "no");
        assert_eq!(one_line(&"x".repeat(300)).chars().count(), 120);
    }
}
