//! `skewer diff PATH --kustomization NAME`: what applying a local directory as that
//! Kustomization would change, asked of the server by a dry run of each object (nothing is
//! written), shown field by field, a Secret's values masked; objects the Kustomization would
//! prune are listed too. `skewer bootstrap` uses the same comparison to leave alone what is
//! already as it should be.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::{StreamExt as _, stream};
use kube::api::Api;
use skewer_appliers::apply::{Applier, ApplyOptions, Plan, Planned};
use skewer_appliers::diff::{ObjectDiff, changes, render};
use skewer_appliers::transform::Owner;
use skewer_appliers::{Manifest, ObjectId};

use crate::api::Kustomization;
use crate::reconcilers::FIELD_MANAGER;
use crate::reconcilers::kustomization::request;

/// One object's difference, by its display name (`Deployment/apps/web`).
pub struct Differs {
    pub id: ObjectId,
    pub object: String,
    pub diff: ObjectDiff,
}

/// Compares `manifests` (applied as `owner`, with `transform` etc. in `opts`) with the
/// cluster; `previous` is what the owner applied before, for what would be pruned
/// (`prune: false` lists none). Returns the objects that differ, in apply order, then the
/// pruned ones.
pub async fn compare(
    applier: &Applier,
    manifests: Vec<Manifest>,
    opts: &ApplyOptions,
    previous: Option<&skewer_appliers::Inventory>,
) -> Result<Vec<Differs>> {
    let plan = applier
        .plan(manifests, opts)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    compare_plan(applier, &plan, opts, previous).await
}

/// [`compare`] for a plan already made (to apply the same plan afterwards).
pub async fn compare_plan(
    applier: &Applier,
    plan: &Plan,
    opts: &ApplyOptions,
    previous: Option<&skewer_appliers::Inventory>,
) -> Result<Vec<Differs>> {
    let planned: Vec<&Planned> = plan.stages.iter().flatten().collect();
    // Indices, not `&Planned`: a closure over borrowed items makes the future not provably
    // Send for every lifetime (rust-lang/rust#102211), and the dashboard runs this in a task.
    let results: Vec<Result<Option<Differs>>> = stream::iter(0..planned.len())
        .map(|i| dry_run(applier, planned[i], opts))
        .buffered(opts.concurrency.max(1))
        .collect()
        .await;
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    if let Some(previous) = previous {
        for (id, _) in previous.stale(&plan.inventory) {
            out.push(Differs {
                object: id.display(),
                id,
                diff: ObjectDiff::Deleted,
            });
        }
    }
    Ok(out)
}

/// One object's difference, or `None` when applying it would change nothing.
async fn dry_run(applier: &Applier, p: &Planned, opts: &ApplyOptions) -> Result<Option<Differs>> {
    let run = applier
        .dry_run(p, opts)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let object = p.manifest.display();
    let diff = match (run.live, run.after) {
        (None, _) => ObjectDiff::Created,
        (Some(live), Some(after)) => {
            let fields = changes(&live, &after);
            if fields.is_empty() {
                return Ok(None);
            }
            ObjectDiff::Changed(fields)
        }
        (Some(_), None) => return Ok(None),
    };
    Ok(Some(Differs {
        id: p.manifest.id(),
        object,
        diff,
    }))
}

/// The options a Kustomization's sync applies with (its owner labels, transform, skewer's
/// field manager), for a dry run or a one-shot apply outside the daemon.
pub fn options(owner: Owner, transform: skewer_appliers::transform::Transform) -> ApplyOptions {
    ApplyOptions {
        field_manager: FIELD_MANAGER.into(),
        owner,
        transform,
        force: false,
        concurrency: 8,
        wait_timeout: Duration::from_secs(60),
    }
}

/// `skewer diff`: the report's text and whether anything differs.
pub async fn run(
    client: &kube::Client,
    path: &Path,
    source_root: Option<&Path>,
    name: &str,
    namespace: &str,
    colour: bool,
) -> Result<(String, bool)> {
    let ks = Api::<Kustomization>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .context("reading the Kustomization")?
        .with_context(|| {
            format!(
                "Kustomization {namespace}/{name} does not exist (list them with `skewer get kustomizations -A`)"
            )
        })?;
    let manifests = super::build::manifests(path, source_root, Some(&ks))?;
    let applier = Applier::new(client.clone())
        .await
        .context("asking the API server its version")?;
    let opts = Arc::new(options(request::owner(&ks), request::transform(&ks)));
    let previous = crate::sync::from_status(ks.status.as_ref().and_then(|s| s.inventory.as_ref()));
    let diffs = compare(
        &applier,
        manifests,
        &opts,
        ks.spec.prune.then_some(&previous),
    )
    .await?;
    Ok((report(&diffs, colour), !diffs.is_empty()))
}

/// The text of a diff: one block per object, coloured on a terminal (created green, pruned
/// red, changed yellow).
pub fn report(diffs: &[Differs], colour: bool) -> String {
    use super::term::{Paint, paint};
    let mut out = String::new();
    for d in diffs {
        let text = render(&d.object, &d.diff);
        let tint = match d.diff {
            ObjectDiff::Created => Paint::Green,
            ObjectDiff::Deleted => Paint::Red,
            ObjectDiff::Changed(_) => Paint::Yellow,
        };
        let mut lines = text.lines();
        if let Some(head) = lines.next() {
            out.push_str(&paint(colour, tint, head));
            out.push('\n');
        }
        for l in lines {
            out.push_str(l);
            out.push('\n');
        }
    }
    if diffs.is_empty() {
        out.push_str("no differences\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_report_reads_field_by_field_with_secrets_masked() {
        let live = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "apps", "resourceVersion": "1"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "web", "image": "web:1"}]}}}});
        let mut after = live.clone();
        after["spec"]["replicas"] = json!(3);
        after["metadata"]["resourceVersion"] = json!("2");
        let secret = |v: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "data": {"password": v, "user": "YWRtaW4="}});
        let diffs = vec![
            Differs {
                id: ObjectId::parse("_apps__Namespace").unwrap(),
                object: "Namespace/apps".into(),
                diff: ObjectDiff::Created,
            },
            Differs {
                id: ObjectId::parse("apps_web_apps_Deployment").unwrap(),
                object: "Deployment/apps/web".into(),
                diff: ObjectDiff::Changed(changes(&live, &after)),
            },
            Differs {
                id: ObjectId::parse("apps_db__Secret").unwrap(),
                object: "Secret/apps/db".into(),
                diff: ObjectDiff::Changed(changes(&secret("b2xk"), &secret("bmV3"))),
            },
            Differs {
                id: ObjectId::parse("apps_retired__ConfigMap").unwrap(),
                object: "ConfigMap/apps/retired".into(),
                diff: ObjectDiff::Deleted,
            },
        ];
        let text = report(&diffs, false);
        assert!(!text.contains("b2xk") && !text.contains("bmV3"));
        crate::cli::golden("diff.txt", &text);
        assert_eq!(report(&[], false), "no differences\n");
    }
}
