//! What the reconcilers would say of an object before it exists: the checks of its spec each
//! kind runs first (`Deploy::spec` and `place` for the deploy kinds, the refusals of the source
//! kinds), with nothing read from a cluster. `skewer migrate` asks it of every object it
//! writes, so what it reports is what the daemon would do. Pure.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::deploy::Deploy;
use crate::api::{
    Application, ApplicationSet, GitRepository, Kustomization, OCIRepository, Receiver,
};
use crate::runtime::Settings;

/// Why skewer would refuse `object` (a skewer object, as JSON); `None` when it would take it.
pub fn refusal(object: &Value, settings: &Settings) -> Option<String> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match kind {
        "Kustomization" => typed::<Kustomization>(object).and_then(|k| deploy(&k, settings)),
        "Application" => typed::<Application>(object).and_then(|a| deploy(&a, settings)),
        "ApplicationSet" => typed::<ApplicationSet>(object)
            .and_then(|s| super::applicationset::spec::check(&s).map(drop)),
        "GitRepository" => {
            typed::<GitRepository>(object).and_then(|g| joined(g.spec.refused.refusals()))
        }
        "OCIRepository" => {
            typed::<OCIRepository>(object).and_then(|o| joined(o.spec.refused.refusals()))
        }
        "Receiver" => typed::<Receiver>(object).map(drop),
        other => Err(format!("kind '{other}' is not one of skewer's")),
    }
    .err()
}

fn typed<K: DeserializeOwned>(object: &Value) -> Result<K, String> {
    serde_json::from_value(object.clone()).map_err(|e| format!("not readable as skewer's: {e}"))
}

fn deploy<K: Deploy>(obj: &K, settings: &Settings) -> Result<(), String> {
    obj.spec(settings).map_err(|f| f.message)?;
    obj.place(settings).map_err(|f| f.message)?;
    Ok(())
}

fn joined(refusals: Vec<String>) -> Result<(), String> {
    match refusals.is_empty() {
        true => Ok(()),
        false => Err(refusals.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_kind_is_judged_by_its_own_checks() {
        let settings = Settings::for_tests();
        let ks = |extra: Value| {
            let mut spec = json!({"interval": "1m", "path": "./", "sourceRef": {"kind": "GitRepository", "name": "s"}});
            if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
                s.extend(e.clone());
            }
            json!({"apiVersion": "skewer.dev/v1alpha1", "kind": "Kustomization", "metadata": {"name": "a", "namespace": "n"}, "spec": spec})
        };
        assert_eq!(refusal(&ks(json!({})), &settings), None);
        let exprs = refusal(&ks(json!({"healthCheckExprs": [{"kind": "X"}]})), &settings).unwrap();
        assert!(exprs.contains("spec.healthCheckExprs "), "{exprs}");
        assert_eq!(
            refusal(
                &ks(json!({"images": [{"name": "x", "newTag": "2"}]})),
                &settings
            ),
            None
        );
        let interval = refusal(&ks(json!({"interval": "1fortnight"})), &settings).unwrap();
        assert!(interval.contains("spec.interval"), "{interval}");
        let app = json!({"apiVersion": "skewer.dev/v1alpha1", "kind": "Application", "metadata": {"name": "a", "namespace": "n"},
            "spec": {"project": "default", "source": {"repoURL": "https://git.example/r.git", "chart": "x"}, "destination": {"server": "https://kubernetes.default.svc"}}});
        let chart = refusal(&app, &settings).unwrap();
        assert!(chart.starts_with("spec.source.chart"), "{chart}");
        let git = json!({"apiVersion": "skewer.dev/v1alpha1", "kind": "GitRepository", "metadata": {"name": "a"},
            "spec": {"url": "https://git.example/r.git", "interval": "1m", "recurseSubmodules": true}});
        let sub = refusal(&git, &settings).unwrap();
        assert!(sub.contains("spec.recurseSubmodules"), "{sub}");
        let set = |generator: Value| {
            json!({"apiVersion": "skewer.dev/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "a", "namespace": "n"},
                "spec": {"generators": [generator], "template": {"metadata": {"name": "x"}, "spec": {"destination": {"name": "in-cluster"}}}}})
        };
        assert_eq!(refusal(&set(json!({"clusters": {}})), &settings), None);
        let scm = refusal(&set(json!({"scmProvider": {}})), &settings).unwrap();
        assert!(scm.starts_with("spec.generators[0].scmProvider"), "{scm}");
        let odd = refusal(&json!({"kind": "HelmRelease"}), &settings).unwrap();
        assert!(odd.contains("HelmRelease"), "{odd}");
    }
}
