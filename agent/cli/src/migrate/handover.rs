//! `skewer migrate --apply`: the originals stopped and what they applied handed to skewer, in
//! place: nothing is deleted or created again.
//!
//! 1. Every skewer object is dry-run first (skewer's CRDs installed, each object valid): a
//!    refusal here changes nothing.
//! 2. The originals stop: Flux's objects are suspended (a suspended Kustomization neither
//!    applies nor prunes, even when deleted); an Argo CD Application loses `automated` and the
//!    finalizers that would delete its objects with it.
//! 3. Each object the original applied (its inventory, or `status.resources`) loses the old
//!    manager's field ownership (`kustomize-controller`; `argocd-controller` and the managers
//!    older Argo CD versions applied as) and the old owner's marks (Flux's owner labels, Argo
//!    CD's tracking annotation), and gains skewer's owner labels, in one JSON patch guarded by
//!    its resourceVersion. The fields it held are then nobody's, so skewer's first apply takes
//!    them without a conflict.
//! 4. The skewer objects are applied, sources first.

use anyhow::{Context as _, Result, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use skewer_appliers::ObjectId;
use skewer_appliers::resources::Resources;
use skewer_appliers::transform::{OWNER_NAME, OWNER_NAMESPACE};

use super::convert::{
    ARGO_FINALIZERS, Converted, MIGRATED_TO, Origin, Plan, SKEWER_API, STOPPED_WAS, Tool,
};

/// The field manager of what `migrate --apply` writes.
pub const MANAGER: &str = "skewer-migrate";

/// The managers whose field ownership a handover removes.
fn old_managers(tool: Tool) -> &'static [&'static str] {
    match tool {
        Tool::Flux => &["kustomize-controller"],
        Tool::ArgoCd => &[
            "argocd-controller",
            "argocd-application-controller",
            "kubectl-client-side-apply",
        ],
    }
}

/// The labels and annotations that mark an object as the old tool's.
const OLD_LABELS: [&str; 2] = [
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
];
const OLD_ANNOTATIONS: [&str; 1] = ["argocd.argoproj.io/tracking-id"];
/// Argo CD's tracking label (its default before annotation tracking): removed only when it
/// holds what Argo CD writes, the Application's name (or `<namespace>_<name>`), so a label
/// the objects' own manifests set is left to them (skewer applies it again from Git).
const ARGO_INSTANCE: &str = "app.kubernetes.io/instance";

/// Hands `plan` over; returns what was done, a line each. Refuses, changing nothing, when an
/// object would not come along whole.
pub async fn apply(client: &Client, plan: &Plan) -> Result<Vec<String>> {
    if let Some(why) = blocked(plan) {
        bail!(why);
    }
    let mut order: Vec<&Converted> = plan.converted.iter().collect();
    order.sort_by_key(|c| c.deploys());
    let resources = Resources::new(client.clone());
    for c in &order {
        send(&resources, &c.object, true)
            .await
            .with_context(|| format!("nothing was changed: {} as skewer's", c.from))?;
    }
    let mut done = Vec::new();
    for c in &order {
        stop(&resources, c).await?;
        done.push(format!("stopped {}", c.from));
    }
    for c in order.iter().filter(|c| c.deploys()) {
        let mut moved = 0;
        for (id, api_version) in &c.live.entries {
            match take(&resources, c, id, api_version).await? {
                Taken::Yes => moved += 1,
                Taken::Gone => done.push(format!("  {id}: no longer exists")),
            }
        }
        done.push(format!(
            "handed over {moved} objects of {} to skewer",
            c.from
        ));
    }
    for c in &order {
        send(&resources, &c.object, false).await?;
        done.push(format!(
            "applied {} {} ({SKEWER_API})",
            c.from.kind,
            name_of(&c.from)
        ));
    }
    Ok(done)
}

/// Why `plan` may not be handed over: an object that would not come along whole (a
/// Kustomization handed over without its source would leave its objects unmanaged).
pub fn blocked(plan: &Plan) -> Option<String> {
    let sets: Vec<String> = plan
        .converted
        .iter()
        .filter(|c| c.from.kind == "ApplicationSet")
        .map(|c| c.from.to_string())
        .collect();
    if !sets.is_empty() {
        return Some(format!(
            "nothing was changed: ApplicationSets are written, not handed over in place ({}): Argo CD would go on generating its own Applications; migrate without --apply, delete each Argo CD ApplicationSet with syncPolicy.preserveResourcesOnDeletion (its objects stay), then apply skewer's",
            sets.join(", ")
        ));
    }
    let partial: Vec<String> = plan
        .converted
        .iter()
        .filter(|c| !c.lost.is_empty())
        .map(|c| c.from.to_string())
        .collect();
    (!partial.is_empty()).then(|| {
        format!(
            "nothing was changed: {} would not come along whole ({}); change them (or leave them out with -n or -f) and run again",
            partial.len(),
            partial.join(", ")
        )
    })
}

/// Parameters of the patches that are not applies: written as [`MANAGER`].
fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.into()),
        ..PatchParams::default()
    }
}

fn name_of(o: &Origin) -> String {
    match o.namespace.is_empty() {
        true => o.name.clone(),
        false => format!("{}/{}", o.namespace, o.name),
    }
}

async fn api(
    resources: &Resources,
    api_version: &str,
    kind: &str,
    ns: &str,
) -> Result<Api<DynamicObject>> {
    let resolved = resources
        .resolve(api_version, kind, &[])
        .await
        .with_context(|| format!("finding {kind} ({api_version})"))?;
    Ok(resolved.api(resources.client().clone(), ns))
}

/// Server-side applies a skewer object (`dry_run`: checked, not written).
async fn send(resources: &Resources, object: &Value, dry_run: bool) -> Result<()> {
    let text = |k: &str| object.get(k).and_then(Value::as_str).unwrap_or_default();
    let meta = |k: &str| {
        object
            .pointer(&format!("/metadata/{k}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let api = api(
        resources,
        text("apiVersion"),
        text("kind"),
        meta("namespace"),
    )
    .await?;
    let mut params = PatchParams::apply(MANAGER).force();
    params.dry_run = dry_run;
    api.patch(meta("name"), &params, &Patch::Apply(object))
        .await
        .map_err(|e| anyhow::anyhow!(skewer_appliers::apply::api_message(&e)))?;
    Ok(())
}

/// Stops the original: suspended (Flux), or no longer automated nor deleting its objects
/// with it (Argo CD); annotated with the skewer object that took over.
async fn stop(resources: &Resources, c: &Converted) -> Result<()> {
    let o = &c.from;
    let api = api(resources, &o.api_version, &o.kind, &o.namespace).await?;
    let to = format!("{SKEWER_API} {} {}", o.kind, name_of(o));
    let patch = match c.tool {
        Tool::Flux => json!({
            "metadata": {"annotations": {
                MIGRATED_TO: to,
                STOPPED_WAS: json!({"suspend": c.object.pointer("/spec/suspend").cloned().unwrap_or(json!(false))}).to_string(),
            }},
            "spec": {"suspend": true},
        }),
        Tool::ArgoCd => {
            let live = api
                .get(&o.name)
                .await
                .with_context(|| format!("reading {o}"))?;
            let finalizers: Vec<String> = live
                .finalizers()
                .iter()
                .filter(|f| !ARGO_FINALIZERS.contains(&f.as_str()))
                .cloned()
                .collect();
            json!({
                "metadata": {
                    "annotations": {
                        MIGRATED_TO: to,
                        STOPPED_WAS: json!({"automated": c.object.pointer("/spec/syncPolicy/automated")}).to_string(),
                    },
                    "finalizers": finalizers,
                },
                "spec": {"syncPolicy": {"automated": null}},
            })
        }
    };
    api.patch(&o.name, &params(), &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            anyhow::anyhow!("stopping {o}: {}", skewer_appliers::apply::api_message(&e))
        })?;
    Ok(())
}

enum Taken {
    Yes,
    Gone,
}

/// Hands one live object to skewer: the old managers' ownership and marks removed, skewer's
/// owner labels set, guarded by its resourceVersion (read again and retried when it moved).
async fn take(
    resources: &Resources,
    c: &Converted,
    id: &ObjectId,
    api_version: &str,
) -> Result<Taken> {
    let api = api(resources, api_version, &id.kind, &id.namespace).await?;
    for _ in 0..5 {
        let Some(live) = api
            .get_opt(&id.name)
            .await
            .with_context(|| format!("reading {id}"))?
        else {
            return Ok(Taken::Gone);
        };
        let read_at = live.resource_version();
        let live = serde_json::to_value(&live)?;
        let patch = handover_patch(&live, c.tool, &c.from);
        match api
            .patch(&id.name, &params(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => return Ok(Taken::Yes),
            // A failed `test` (the object moved between the read and the patch): read it
            // again. Any other refusal, or the same one with nothing moved, is the answer.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                let now = api.get_opt(&id.name).await.ok().flatten();
                if now.is_some_and(|o| o.resource_version() == read_at) {
                    bail!("handing {id} over: {}", s.message);
                }
            }
            Err(e) => bail!(
                "handing {id} over: {}",
                skewer_appliers::apply::api_message(&e)
            ),
        }
    }
    bail!("handing {id} over: it kept changing; run migrate again")
}

/// The JSON patch that hands `live` (an object applied by `tool`) to skewer's `owner`. Pure.
pub fn handover_patch(live: &Value, tool: Tool, owner: &Origin) -> json_patch::Patch {
    let mut ops = vec![json!({
        "op": "test",
        "path": "/metadata/resourceVersion",
        "value": live.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null),
    })];
    let fields = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let old = old_managers(tool);
    let kept: Vec<Value> = fields
        .iter()
        .filter(|f| {
            !f.get("manager")
                .and_then(Value::as_str)
                .is_some_and(|m| old.contains(&m))
        })
        .cloned()
        .collect();
    if kept.len() != fields.len() {
        // An empty list leaves managedFields as they are; one empty entry clears them.
        let kept = if kept.is_empty() {
            vec![json!({})]
        } else {
            kept
        };
        ops.push(json!({"op": "replace", "path": "/metadata/managedFields", "value": kept}));
    }
    let mut labels = map_at(live, "/metadata/labels");
    OLD_LABELS.iter().for_each(|l| {
        labels.remove(*l);
    });
    let tracked = [
        owner.name.clone(),
        format!("{}_{}", owner.namespace, owner.name),
    ];
    if tool == Tool::ArgoCd
        && labels
            .get(ARGO_INSTANCE)
            .and_then(Value::as_str)
            .is_some_and(|v| tracked.iter().any(|t| t == v))
    {
        labels.remove(ARGO_INSTANCE);
    }
    labels.insert(OWNER_NAME.into(), owner.name.clone().into());
    labels.insert(OWNER_NAMESPACE.into(), owner.namespace.clone().into());
    ops.push(json!({"op": "add", "path": "/metadata/labels", "value": labels}));
    let mut annotations = map_at(live, "/metadata/annotations");
    let before = annotations.len();
    OLD_ANNOTATIONS.iter().for_each(|a| {
        annotations.remove(*a);
    });
    if annotations.len() != before {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": annotations}));
    }
    // Every op above is well formed; a failure here would be a bug, and yields no change.
    serde_json::from_value(Value::Array(ops)).unwrap_or_default()
}

fn map_at(v: &Value, at: &str) -> Map<String, Value> {
    v.pointer(at)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Origin {
        Origin {
            api_version: "kustomize.toolkit.fluxcd.io/v1".into(),
            kind: "Kustomization".into(),
            namespace: "flux-system".into(),
            name: "apps".into(),
        }
    }

    fn patched(live: &Value, tool: Tool) -> Value {
        let mut out = live.clone();
        json_patch::patch(&mut out, &handover_patch(live, tool, &owner())).unwrap();
        out
    }

    #[test]
    fn flux_s_ownership_and_labels_go_and_skewer_s_come() {
        let live = json!({"metadata": {
        "name": "web", "resourceVersion": "7",
        "labels": {"app": "web", "kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
        "managedFields": [
            {"manager": "kustomize-controller", "operation": "Apply"},
            {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"}
        ]}});
        let out = patched(&live, Tool::Flux);
        assert_eq!(
            out["metadata"]["labels"],
            json!({"app": "web", "skewer.dev/name": "apps", "skewer.dev/namespace": "flux-system"})
        );
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{"manager": "kube-controller-manager", "operation": "Update", "subresource": "status"}]),
            "only the old manager's entries go"
        );
        let ops = serde_json::to_value(handover_patch(&live, Tool::Flux, &owner())).unwrap();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}),
            "guarded by the resourceVersion read"
        );
    }

    #[test]
    fn argo_cd_s_tracking_goes_and_an_emptied_list_clears() {
        let live = json!({"metadata": {
            "name": "web", "resourceVersion": "9",
            "annotations": {"argocd.argoproj.io/tracking-id": "guestbook:apps/Deployment:guestbook/web", "keep": "me"},
            "managedFields": [{"manager": "argocd-controller", "operation": "Apply"}]}});
        let out = patched(&live, Tool::ArgoCd);
        assert_eq!(out["metadata"]["annotations"], json!({"keep": "me"}));
        let labeled = |value: &str| {
            let mut l = live.clone();
            l["metadata"]["labels"] = json!({"app.kubernetes.io/instance": value});
            patched(&l, Tool::ArgoCd)["metadata"]["labels"]["app.kubernetes.io/instance"].clone()
        };
        assert_eq!(
            labeled("apps"),
            Value::Null,
            "Argo CD's tracking label goes"
        );
        assert_eq!(labeled("flux-system_apps"), Value::Null);
        assert_eq!(labeled("web"), "web", "a label of the object's own stays");
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{}]),
            "an empty list would leave them; one empty entry clears them"
        );
        assert_eq!(out["metadata"]["labels"]["skewer.dev/name"], "apps");
        let untouched = json!({"metadata": {"name": "web", "resourceVersion": "1",
            "managedFields": [{"manager": "kubectl-edit", "operation": "Update"}]}});
        let ops = serde_json::to_value(handover_patch(&untouched, Tool::Flux, &owner())).unwrap();
        assert_eq!(
            ops.as_array().map(Vec::len),
            Some(2),
            "test and labels only: {ops}"
        );
    }
}
