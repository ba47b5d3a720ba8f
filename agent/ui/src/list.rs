//! The dashboard's lists, filtered and paginated on the server (pure): rows from the objects
//! skewer already holds in memory, so a page view costs no API request.

use serde::{Deserialize, Serialize};

use skewer_api::{
    Application, ApplicationSet, GitRepository, Kustomization, OCIRepository, Provider,
};
use skewer_view::{apps, appsets, table as get};

/// One Kustomization, Application, source or Provider, as the dashboard lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// `True`, `False`, `Unknown` or `Suspended`.
    pub ready: String,
    /// Applications: `Synced`, `OutOfSync`, `Unknown`; others empty.
    pub sync: String,
    /// Applications: `Healthy`, `Progressing`, `Degraded`, `Missing`, …; others empty.
    pub health: String,
    pub revision: String,
    pub age: String,
    pub message: String,
    /// Where it applies: a registered cluster's name (Applications: its name or server),
    /// `(hub)`; empty for sources.
    pub cluster: String,
}

/// How the hub is named in lists.
pub const HUB: &str = skewer_view::clusters::HUB;

impl From<get::Row> for Item {
    fn from(r: get::Row) -> Self {
        Item {
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
            ready: r.ready,
            sync: String::new(),
            health: String::new(),
            revision: r.revision,
            age: r.age,
            message: r.message,
            cluster: String::new(),
        }
    }
}

pub fn kustomization(k: &Kustomization, now: jiff::Timestamp) -> Item {
    let cluster = match (&k.spec.cluster, &k.spec.kube_config) {
        (Some(c), _) => c.clone(),
        (None, Some(kc)) => format!(
            "kubeconfig {}",
            kc.secret_ref.as_ref().map_or("", |r| r.name.as_str())
        ),
        (None, None) => HUB.into(),
    };
    Item {
        cluster,
        ..get::kustomization_row(k, now).into()
    }
}

pub fn git(g: &GitRepository, now: jiff::Timestamp) -> Item {
    get::git_row(g, now).into()
}

pub fn oci(o: &OCIRepository, now: jiff::Timestamp) -> Item {
    get::oci_row(o, now).into()
}

/// A Provider, its last delivery where others have their revision.
pub fn provider(p: &Provider, now: jiff::Timestamp) -> Item {
    get::provider_row(p, now).into()
}

pub fn application(a: &Application, now: jiff::Timestamp) -> Item {
    let r = apps::row(a);
    let ready = a
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map_or("Unknown".to_string(), |c| c.status.clone());
    let created = a
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| t.0.to_string().parse::<jiff::Timestamp>().ok());
    Item {
        kind: "Application".into(),
        namespace: r.namespace,
        name: r.name,
        ready,
        sync: r.sync,
        health: r.health,
        revision: r.revision,
        age: get::age(created, now),
        message: r.message,
        cluster: destination(a),
    }
}

/// An ApplicationSet: its Applications counted where an Application shows its sync and health.
pub fn application_set(set: &ApplicationSet, now: jiff::Timestamp) -> Item {
    let r = appsets::row(set);
    let created = set
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| t.0.to_string().parse::<jiff::Timestamp>().ok());
    Item {
        kind: "ApplicationSet".into(),
        namespace: r.namespace,
        name: r.name,
        ready: r.ready,
        sync: format!("{}/{} Synced", r.synced, r.applications),
        health: format!("{}/{} Healthy", r.healthy, r.applications),
        revision: r.rollout,
        age: get::age(created, now),
        message: r.message,
        cluster: String::new(),
    }
}

/// An Application's cluster: its destination's name, else its server; the hub as `(hub)`.
fn destination(a: &Application) -> String {
    let d = &a.spec.destination;
    match (d.name.as_deref(), d.server.as_deref()) {
        (Some("in-cluster"), _) | (None, Some("https://kubernetes.default.svc")) | (None, None) => {
            HUB.into()
        }
        (Some(name), _) => name.into(),
        (None, Some(server)) => server.into(),
    }
}

/// What a list request asks: `?q=&kind=&status=&page=&size=`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Query {
    /// Words that must each appear in the namespace, name, revision or message.
    #[serde(default)]
    pub q: String,
    /// `Kustomization`, `Application`, `GitRepository`, `OCIRepository`; empty: all.
    #[serde(default)]
    pub kind: String,
    /// `ready`, `failing` (not Ready, not suspended), `suspended`, `outofsync`; empty: all.
    #[serde(default)]
    pub status: String,
    /// Only what applies to this cluster (its name, or `server`).
    #[serde(default)]
    pub cluster: String,
    #[serde(default)]
    pub server: String,
    /// 1-based.
    #[serde(default)]
    pub page: usize,
    #[serde(default)]
    pub size: usize,
}

/// One page of a filtered list, with counts for the filter buttons.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    pub items: Vec<Item>,
    /// Items matching the filter, over every page.
    pub total: usize,
    pub page: usize,
    pub pages: usize,
    /// Over everything listed, before the filter: ready, failing, suspended.
    pub ready: usize,
    pub failing: usize,
    pub suspended: usize,
}

pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = 500;

fn matches(i: &Item, q: &Query) -> bool {
    if !q.kind.is_empty() && !i.kind.eq_ignore_ascii_case(&q.kind) {
        return false;
    }
    if !q.cluster.is_empty()
        && i.cluster != q.cluster
        && (q.server.is_empty() || i.cluster != q.server)
    {
        return false;
    }
    let ok = match q.status.as_str() {
        "ready" => i.ready == "True",
        "failing" => i.ready == "False",
        "suspended" => i.ready == "Suspended",
        "outofsync" => i.sync == "OutOfSync",
        _ => true,
    };
    if !ok {
        return false;
    }
    let hay = format!(
        "{}/{} {} {} {}",
        i.namespace, i.name, i.kind, i.revision, i.message
    )
    .to_lowercase();
    q.q.split_whitespace()
        .all(|w| hay.contains(&w.to_lowercase()))
}

/// Filters `items` (sorted by namespace, kind, name) and cuts the page asked for.
pub fn page(mut items: Vec<Item>, q: &Query) -> Page {
    items.sort_by(|a, b| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)));
    let count = |f: &dyn Fn(&Item) -> bool| items.iter().filter(|i| f(i)).count();
    let (ready, failing, suspended) = (
        count(&|i| i.ready == "True"),
        count(&|i| i.ready == "False"),
        count(&|i| i.ready == "Suspended"),
    );
    let matching: Vec<Item> = items.into_iter().filter(|i| matches(i, q)).collect();
    let size = match q.size {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    };
    let total = matching.len();
    let pages = total.div_ceil(size).max(1);
    let page = q.page.clamp(1, pages);
    let items = matching
        .into_iter()
        .skip((page - 1).saturating_mul(size))
        .take(size)
        .collect();
    Page {
        items,
        total,
        page,
        pages,
        ready,
        failing,
        suspended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(ns: &str, name: &str, ready: &str, message: &str) -> Item {
        Item {
            kind: "Kustomization".into(),
            namespace: ns.into(),
            name: name.into(),
            ready: ready.into(),
            sync: String::new(),
            health: String::new(),
            revision: "main@sha1:abc".into(),
            age: "1m".into(),
            message: message.into(),
            cluster: HUB.into(),
        }
    }

    #[test]
    fn filters_search_and_pages_on_the_server() {
        let mut items: Vec<Item> = (0..120)
            .map(|i| item("team-a", &format!("app-{i:03}"), "True", ""))
            .collect();
        items.push(item(
            "team-b",
            "web",
            "False",
            "Deployment/team-b/web: 0 of 1 ready",
        ));
        items.push(item("team-b", "old", "Suspended", ""));
        let all = page(items.clone(), &Query::default());
        assert_eq!((all.total, all.pages, all.items.len()), (122, 3, 50));
        assert_eq!((all.ready, all.failing, all.suspended), (120, 1, 1));
        let last = page(
            items.clone(),
            &Query {
                page: 9,
                ..Default::default()
            },
        );
        assert_eq!((last.page, last.items.len()), (3, 22));
        let failing = page(
            items.clone(),
            &Query {
                status: "failing".into(),
                ..Default::default()
            },
        );
        assert_eq!(
            failing
                .items
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>(),
            ["web"]
        );
        let search = page(
            items.clone(),
            &Query {
                q: "TEAM-B 0 of 1".into(),
                ..Default::default()
            },
        );
        assert_eq!(search.total, 1);
        let none = page(
            items,
            &Query {
                kind: "Application".into(),
                ..Default::default()
            },
        );
        assert_eq!((none.total, none.pages, none.page), (0, 1, 1));
    }
}
