//! `skewer tree kustomization/<name>` (or `app/<name>`, `appset/<name>`): what an owner
//! applied, from its recorded inventory, as a tree with each object's health read live; a
//! Kustomization or Application in the inventory is expanded in place. An ApplicationSet's
//! inventory is the Applications it generated. The tree and its text are pure.

use std::collections::BTreeSet;

use futures::StreamExt as _;
use kube::api::DynamicObject;
use kube::{Api, Client};
use serde_json::Value;
use skewer_appliers::ObjectId;
use skewer_appliers::health::{Health, health};
use skewer_appliers::resources::Resources;
use skewer_appliers::transform::ORIGIN;

use super::named::{ControlError, Kind, Named};
use skewer_api::GROUP;

/// One line of the tree and what hangs under it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub object: String,
    pub state: String,
    /// Where it came from in its owner's source (`skewer.dev/origin`: `file#document`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Its API group, resource (plural) and namespace, for authorizing who may see it.
    #[serde(skip)]
    pub group: String,
    #[serde(skip)]
    pub resource: String,
    #[serde(skip)]
    pub namespace: String,
    pub children: Vec<Node>,
}

/// The tree as text, with box-drawing branches.
pub fn render(root: &Node) -> String {
    let mut out = format!("{}  {}\n", root.object, root.state);
    branches(&root.children, "", &mut out);
    out
}

fn branches(nodes: &[Node], prefix: &str, out: &mut String) {
    for (i, n) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        let (branch, more) = if last {
            ("└── ", "    ")
        } else {
            ("├── ", "│   ")
        };
        out.push_str(&format!("{prefix}{branch}{}  {}\n", n.object, n.state));
        branches(&n.children, &format!("{prefix}{more}"), out);
    }
}

/// How an object reads in the tree: Current, InProgress or Failed with why, or NotFound.
pub fn state_of(obj: Option<&Value>) -> String {
    let Some(obj) = obj else {
        return "NotFound".into();
    };
    match health(obj) {
        Health::Current => "Current".into(),
        Health::InProgress(why) => format!("InProgress: {why}"),
        Health::Failed(why) => format!("Failed: {why}"),
    }
}

/// The inventory an owner (Kustomization or Application, as JSON) recorded: each object and
/// the API version it was applied with, sorted by id. An ApplicationSet's is the Applications
/// its status lists.
pub fn inventory(owner: &Value) -> Vec<(ObjectId, String)> {
    if owner["kind"] == "ApplicationSet" {
        let mut apps: Vec<(ObjectId, String)> = owner["status"]["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let text = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                let id = ObjectId {
                    namespace: text("namespace"),
                    name: text("name"),
                    group: text("group"),
                    kind: text("kind"),
                };
                (id, format!("{}/{}", text("group"), text("version")))
            })
            .collect();
        apps.sort();
        return apps;
    }
    let recorded: Option<skewer_api::kustomization::ResourceInventory> =
        serde_json::from_value(owner["status"]["inventory"].clone()).ok();
    skewer_api::inventory::from_status(recorded.as_ref())
        .entries
        .into_iter()
        .collect()
}

/// Nested owners are expanded this deep at most (and never twice).
const MAX_DEPTH: usize = 8;

/// The tree of `target` in `namespace`.
pub async fn tree(client: &Client, namespace: &str, target: &Named) -> Result<Node, ControlError> {
    if !matches!(
        target.kind,
        Kind::Kustomization | Kind::Application | Kind::ApplicationSet
    ) {
        return Err(ControlError::Refused(format!(
            "{target}: only Kustomizations, Applications and ApplicationSets have an inventory to show"
        )));
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &target.kind.resource());
    let obj = api
        .get_opt(&target.name)
        .await?
        .ok_or_else(|| ControlError::Missing(target.clone(), namespace.into()))?;
    let obj = serde_json::to_value(obj).unwrap_or(Value::Null);
    let resources = Resources::new(client.clone());
    let mut seen = BTreeSet::new();
    let kind = match target.kind {
        Kind::Application => "Application",
        Kind::ApplicationSet => "ApplicationSet",
        _ => "Kustomization",
    };
    let id = ObjectId {
        namespace: namespace.into(),
        name: target.name.clone(),
        group: GROUP.into(),
        kind: kind.into(),
    };
    seen.insert(id.clone());
    Ok(Node {
        object: id.display(),
        state: owner_state(&obj),
        group: GROUP.into(),
        resource: target.kind.resource().plural,
        namespace: namespace.into(),
        children: Box::pin(children(&resources, &obj, &mut seen, 1)).await,
        ..Default::default()
    })
}

/// A Kustomization's or Application's Ready condition, as `Ready: message`.
pub fn owner_state(obj: &Value) -> String {
    let ready = obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    match ready {
        Some(c) if c["status"] == "True" => "Ready".into(),
        Some(c) => format!(
            "NotReady: {}: {}",
            c["reason"].as_str().unwrap_or_default(),
            c["message"].as_str().unwrap_or_default()
        ),
        None => "Unknown".into(),
    }
}

async fn children(
    resources: &Resources,
    owner: &Value,
    seen: &mut BTreeSet<ObjectId>,
    depth: usize,
) -> Vec<Node> {
    let entries = inventory(owner);
    // Read concurrently; nested owners are expanded one after the other (they share `seen`).
    // Owned items: a closure over borrowed ones makes the future not provably Send for every
    // lifetime (rust-lang/rust#102211), and the dashboard serves trees from a spawned task.
    let read_all: Vec<Result<Read, String>> = futures::stream::iter(entries.clone())
        .map(|(id, api_version)| async move { read(resources, &api_version, &id).await })
        .buffered(16)
        .collect()
        .await;
    let mut out = Vec::with_capacity(entries.len());
    for ((id, _), live) in entries.iter().zip(read_all) {
        let nested =
            id.group == GROUP && matches!(id.kind.as_str(), "Kustomization" | "Application");
        let object = live.as_ref().ok().and_then(|r| r.object.as_ref());
        let (state, kids) = match (&live, object, nested) {
            (Ok(_), Some(obj), true) if depth < MAX_DEPTH && seen.insert(id.clone()) => (
                owner_state(obj),
                Box::pin(children(resources, obj, seen, depth + 1)).await,
            ),
            (Ok(_), Some(obj), true) => (owner_state(obj), Vec::new()),
            (Ok(_), obj, false) => (state_of(obj), Vec::new()),
            (Ok(_), None, true) => ("NotFound".into(), Vec::new()),
            (Err(e), _, _) => (format!("Unknown: {e}"), Vec::new()),
        };
        let origin = object
            .and_then(|o| o["metadata"]["annotations"][ORIGIN].as_str())
            .map(String::from);
        out.push(Node {
            object: id.display(),
            state,
            origin,
            group: id.group.clone(),
            resource: live.map(|r| r.resource).unwrap_or_default(),
            namespace: id.namespace.clone(),
            children: kids,
        });
    }
    out
}

/// An object read live, and its resource's plural name.
struct Read {
    object: Option<Value>,
    resource: String,
}

async fn read(resources: &Resources, api_version: &str, id: &ObjectId) -> Result<Read, String> {
    let resolved = resources
        .resolve(api_version, &id.kind, &[])
        .await
        .map_err(|e| e.to_string())?;
    let obj = resolved
        .api(resources.client().clone(), &id.namespace)
        .get_opt(&id.name)
        .await
        .map_err(|e| skewer_appliers::apply::api_message(&e))?;
    Ok(Read {
        object: obj.map(|o| serde_json::to_value(o).unwrap_or(Value::Null)),
        resource: resolved.resource.plural.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(o: &str, s: &str) -> Node {
        Node {
            object: o.into(),
            state: s.into(),
            ..Default::default()
        }
    }

    #[test]
    fn nested_owners_hang_under_their_line() {
        let root = Node {
            object: "Kustomization/skewer-system/platform".into(),
            state: "Ready".into(),
            children: vec![
                leaf("Namespace/team-a", "Current"),
                Node {
                    object: "Kustomization/team-a/apps".into(),
                    state: "Ready".into(),
                    children: vec![leaf("Deployment/team-a/web", "InProgress: 0 of 1 ready")],
                    ..Default::default()
                },
                leaf("ConfigMap/team-a/gone", "NotFound"),
            ],
            ..Default::default()
        };
        crate::golden!("tree.txt", &render(&root));
    }

    #[test]
    fn objects_read_as_their_health() {
        assert_eq!(state_of(None), "NotFound");
        let cm =
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        assert_eq!(state_of(Some(&cm)), "Current");
    }
}
