//! Name references: when an object's name changed during the build (a prefix, a suffix, a
//! generator's hash), the fields of other objects that named it by an earlier name are
//! updated to its final name: a Deployment's `envFrom` of a generated ConfigMap, a
//! RoleBinding's subjects, an HPA's scale target. Where those fields are is kustomize's
//! name-reference table ([`super::fieldspec::name_references`]).

use serde_json::{Value, json};

use super::Res;
use super::fieldspec::{NameReference, name_references, visit};
use super::smp::is_cluster_scoped;

/// Updates every reference in `res` to an object of `res` that was renamed.
pub fn fix(res: &mut [Res]) {
    for nr in &name_references() {
        let candidates: Vec<Candidate> = res
            .iter()
            .filter(|r| referenced_kind(nr, r))
            .map(|r| Candidate {
                names: std::iter::once(r.name().to_string())
                    .chain(r.previous_names.iter().cloned())
                    .collect(),
                name: r.name().to_string(),
                namespace: r.namespace().to_string(),
                namespaces: std::iter::once(r.namespace().to_string())
                    .chain(r.previous_namespaces.iter().cloned())
                    .collect(),
                cluster: is_cluster_scoped(r.api_version(), r.kind()),
            })
            // Only renamed objects need their references changed; ServiceAccounts also carry
            // their namespace to the subjects that name them.
            .filter(|c| c.names.len() > 1 || nr.kind == "ServiceAccount")
            .collect();
        if candidates.is_empty() {
            continue;
        }
        for r in res.iter_mut() {
            let (api_version, kind) = (r.api_version().to_string(), r.kind().to_string());
            let specs: Vec<_> = nr
                .referrers
                .iter()
                .filter(|s| s.selects(&api_version, &kind))
                .collect();
            if specs.is_empty() {
                continue;
            }
            let ns = r.namespace().to_string();
            let from_cluster = is_cluster_scoped(&api_version, &kind);
            for spec in specs {
                visit(&mut r.object, &spec.path, false, &mut |v| {
                    update(v, &candidates, &ns, from_cluster, nr.kind);
                });
            }
        }
    }
}

struct Candidate {
    /// Its current name and every earlier one.
    names: Vec<String>,
    name: String,
    namespace: String,
    /// Its current namespace and every earlier one.
    namespaces: Vec<String>,
    cluster: bool,
}

fn referenced_kind(nr: &NameReference, r: &Res) -> bool {
    let group = crate::object::split_api_version(r.api_version()).0;
    r.kind() == nr.kind && (nr.group.is_empty() || nr.group == group)
}

/// The candidate a reference by `name` from `namespace` means: one of the same namespace
/// first (or cluster-scoped, or any when the referrer is cluster-scoped).
fn resolve<'a>(
    candidates: &'a [Candidate],
    name: &str,
    namespace: &str,
    from_cluster: bool,
) -> Option<&'a Candidate> {
    let named: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.names.iter().any(|n| n == name))
        .collect();
    named
        .iter()
        .find(|c| c.cluster || c.namespaces.iter().any(|n| n == namespace))
        .or_else(|| named.iter().find(|_| from_cluster))
        .copied()
}

/// Updates one referring field: a name, a list of names, or an object with `name` (and
/// `namespace`), like a RoleBinding subject or a webhook's service.
fn update(v: &mut Value, candidates: &[Candidate], ns: &str, from_cluster: bool, kind: &str) {
    match v {
        Value::String(name) => {
            if let Some(c) = resolve(candidates, name, ns, from_cluster) {
                *name = c.name.clone();
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                update(item, candidates, ns, from_cluster, kind);
            }
        }
        Value::Object(m) => {
            if m.contains_key("kind") && m.get("kind").and_then(Value::as_str) != Some(kind) {
                return;
            }
            let Some(name) = m.get("name").and_then(Value::as_str) else {
                return;
            };
            let their_ns = m
                .get("namespace")
                .and_then(Value::as_str)
                .unwrap_or(ns)
                .to_string();
            let anywhere = !m.contains_key("namespace");
            if let Some(c) = resolve(candidates, name, &their_ns, anywhere) {
                let (name, namespace) = (c.name.clone(), c.namespace.clone());
                m.insert("name".into(), json!(name));
                if !namespace.is_empty() {
                    m.insert("namespace".into(), json!(namespace));
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(obj: Value) -> Res {
        Res::new(obj, String::new(), false)
    }

    #[test]
    fn references_follow_renamed_objects() {
        let mut cm = res(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "a"}}),
        );
        cm.rename("p-cfg-hash".into());
        let mut other_ns = res(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "b"}}),
        );
        other_ns.rename("q-cfg".into());
        let deploy = res(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "a"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "cfg"}}, {"configMapRef": {"name": "unrelated"}}]}],
                "volumes": [{"name": "v", "configMap": {"name": "cfg"}}]}}}}),
        );
        let mut sa = res(
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": "a"}}),
        );
        sa.rename("p-sa".into());
        let binding = res(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "a"}, {"kind": "User", "name": "sa"}]}),
        );
        let mut all = vec![cm, other_ns, deploy, sa, binding];
        fix(&mut all);
        let spec = &all[2].object["spec"]["template"]["spec"];
        assert_eq!(
            spec["containers"][0]["envFrom"][0]["configMapRef"]["name"], "p-cfg-hash",
            "the one in its namespace"
        );
        assert_eq!(
            spec["containers"][0]["envFrom"][1]["configMapRef"]["name"],
            "unrelated"
        );
        assert_eq!(spec["volumes"][0]["configMap"]["name"], "p-cfg-hash");
        assert_eq!(all[4].object["subjects"][0]["name"], "p-sa");
        assert_eq!(
            all[4].object["subjects"][1]["name"], "sa",
            "users are not ServiceAccounts"
        );
    }
}
