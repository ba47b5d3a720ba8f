//! `skewer diff PATH --kustomization NAME`: what applying a local directory as that
//! Kustomization would change, asked of the server by a dry run of each object (nothing is
//! written), shown field by field, a Secret's values masked; objects the Kustomization would
//! prune are listed too. `skewer bootstrap` uses the same comparison to leave alone what is
//! already as it should be.

use std::path::Path;

use anyhow::{Context as _, Result};
use kube::api::Api;
use skewer_appliers::apply::{Applier, ApplyOptions};
use skewer_appliers::compare::{Differs, compare};
use skewer_appliers::diff::{ObjectDiff, render};

use skewer_api::FIELD_MANAGER;
use skewer_api::Kustomization;
use skewer_api::spec;

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
    let opts = ApplyOptions::new(FIELD_MANAGER, spec::owner(&ks), spec::transform(&ks));
    let previous =
        skewer_api::inventory::from_status(ks.status.as_ref().and_then(|s| s.inventory.as_ref()));
    let diffs = compare(
        &applier,
        manifests,
        &opts,
        ks.spec.prune.then_some(&previous),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
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
    use skewer_appliers::ObjectId;
    use skewer_appliers::diff::changes;

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
        skewer_view::golden!("diff.txt", &text);
        assert_eq!(report(&[], false), "no differences\n");
    }
}
