//! kustomize's built-in transformers: namespace, name prefix and suffix, labels, annotations,
//! replicas and images, each writing where kustomize's field specs say.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::Res;
use super::fieldspec::{self, FieldSpec, visit};
use super::file::{Image, Replica};
use super::smp::is_cluster_scoped;

/// Sets `namespace` on every namespaced object, renames Namespace objects to it, points
/// service references of APIServices and CRD conversion webhooks at it, and sets it on
/// (Cluster)RoleBinding subjects named `default`.
pub fn namespace(res: &mut [Res], namespace: &str) {
    let extra = fieldspec::namespace_fields();
    for r in res.iter_mut() {
        let (api_version, kind) = (r.api_version().to_string(), r.kind().to_string());
        if kind == "Namespace" && is_cluster_scoped(&api_version, &kind) {
            r.rename(namespace.to_string());
            continue;
        }
        if !is_cluster_scoped(&api_version, &kind) {
            r.set_namespace(namespace);
        }
        for spec in extra.iter().filter(|s| s.selects(&api_version, &kind)) {
            visit(&mut r.object, &spec.path, spec.create, &mut |v| {
                *v = json!(namespace)
            });
        }
        if (kind == "RoleBinding" || kind == "ClusterRoleBinding")
            && let Some(subjects) = r.object["subjects"].as_array_mut()
        {
            for s in subjects.iter_mut().filter(|s| s["name"] == "default") {
                s["namespace"] = json!(namespace);
            }
        }
    }
}

/// Adds `prefix` and `suffix` to every name, except those of CRDs, APIServices and
/// Namespaces (their names are not the object's own to choose).
pub fn prefix_suffix(res: &mut [Res], prefix: &str, suffix: &str) {
    for r in res.iter_mut() {
        let group = crate::object::split_api_version(r.api_version()).0;
        let skip = matches!(r.kind(), "CustomResourceDefinition" | "Namespace")
            || (r.kind() == "APIService" && group == "apiregistration.k8s.io");
        if !skip {
            let name = format!("{prefix}{}{suffix}", r.name());
            r.rename(name);
        }
    }
}

/// Adds `pairs` to the maps at `specs` (labels or annotations).
pub fn add_pairs(res: &mut [Res], pairs: &BTreeMap<String, String>, specs: &[FieldSpec]) {
    if pairs.is_empty() {
        return;
    }
    for r in res.iter_mut() {
        let (api_version, kind) = (r.api_version().to_string(), r.kind().to_string());
        for spec in specs.iter().filter(|s| s.selects(&api_version, &kind)) {
            visit(&mut r.object, &spec.path, spec.create, &mut |v| {
                if v.is_null() {
                    *v = Value::Object(Map::new());
                }
                if let Value::Object(m) = v {
                    for (k, val) in pairs {
                        m.insert(k.clone(), json!(val));
                    }
                }
            });
        }
    }
}

/// Sets the replica count of the workloads named `r.name`.
pub fn replicas(res: &mut [Res], r: &Replica) {
    let specs = fieldspec::replicas();
    for obj in res.iter_mut().filter(|o| o.is_named(&r.name)) {
        let (api_version, kind) = (obj.api_version().to_string(), obj.kind().to_string());
        for spec in specs.iter().filter(|s| s.selects(&api_version, &kind)) {
            visit(&mut obj.object, &spec.path, spec.create, &mut |v| {
                *v = json!(r.count)
            });
        }
    }
}

/// Rewrites the images named `image.name` in every container list (`containers`,
/// `initContainers`, anywhere in an object but a CRD), every image volume, and the fields of
/// `extra`.
pub fn images(res: &mut [Res], image: &Image, extra: &[FieldSpec]) {
    // As kustomize, the name is a pattern: an image matches when it is the name, then an
    // optional tag and digest.
    let Ok(pattern) = Regex::new(&format!(
        "^{}(:[a-zA-Z0-9_.{{}}-]*)?(@[a-zA-Z0-9]+([.+_-][a-zA-Z0-9]+)*:[a-zA-Z0-9_.{{}}-]*)?$",
        image.name
    )) else {
        return;
    };
    let update = |v: &mut Value| {
        if let Some(current) = v.as_str()
            && pattern.is_match(current)
        {
            *v = json!(retagged(current, image));
        }
    };
    for r in res
        .iter_mut()
        .filter(|r| r.kind() != "CustomResourceDefinition")
    {
        walk_containers(&mut r.object, &update);
        for path in [
            "spec/volumes[]/image/reference",
            "spec/template/spec/volumes[]/image/reference",
        ] {
            visit(
                &mut r.object,
                &fieldspec::split_path(path),
                false,
                &mut |v| update(v),
            );
        }
        let (api_version, kind) = (r.api_version().to_string(), r.kind().to_string());
        for spec in extra.iter().filter(|s| s.selects(&api_version, &kind)) {
            visit(&mut r.object, &spec.path, false, &mut |v| update(v));
        }
    }
}

/// Calls `update` on the `image` of every element of every `containers` and `initContainers`
/// list in `node`.
fn walk_containers(node: &mut Value, update: &dyn Fn(&mut Value)) {
    match node {
        Value::Object(m) => {
            for (key, value) in m.iter_mut() {
                walk_containers(value, update);
                if (key == "containers" || key == "initContainers")
                    && let Value::Array(items) = value
                {
                    for item in items.iter_mut() {
                        if let Some(image) = item.get_mut("image") {
                            update(image);
                        }
                    }
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| walk_containers(i, update)),
        _ => {}
    }
}

/// `current` with the name, tag and digest `image` gives.
fn retagged(current: &str, image: &Image) -> String {
    let (mut name, mut tag, mut digest) = split_image(current);
    if let Some(n) = image.new_name.as_deref().filter(|n| !n.is_empty()) {
        name = n.to_string();
    }
    let new_tag = image.new_tag.as_deref().filter(|t| !t.is_empty());
    let new_digest = image.digest.as_deref().filter(|d| !d.is_empty());
    match (new_tag, new_digest) {
        (Some(t), Some(d)) => (tag, digest) = (t.to_string(), d.to_string()),
        (Some(t), None) => (tag, digest) = (t.to_string(), String::new()),
        (None, Some(d)) => (tag, digest) = (String::new(), d.to_string()),
        (None, None) => {}
    }
    if !tag.is_empty() {
        name = format!("{name}:{tag}");
    }
    if !digest.is_empty() {
        name = format!("{name}@{digest}");
    }
    name
}

/// `(name, tag, digest)` of an image reference; a registry's port is part of the name.
fn split_image(image: &str) -> (String, String, String) {
    // The tag and digest are searched for after the first slash, so `host:5000/app` keeps
    // its port.
    let offset = image.find('/').filter(|&i| i > 0).unwrap_or(0);
    let search = &image[offset..];
    let at = search.find('@').map(|i| i + offset);
    let colon = search.find(':').map(|i| i + offset);
    match (colon, at) {
        (None, None) => (image.to_string(), String::new(), String::new()),
        (c, Some(a)) if c.is_none_or(|c| a < c) => (
            image[..a].to_string(),
            String::new(),
            image[a + 1..].to_string(),
        ),
        (Some(c), Some(a)) => (
            image[..c].to_string(),
            image[c + 1..a].to_string(),
            image[a + 1..].to_string(),
        ),
        (Some(c), None) => (
            image[..c].to_string(),
            image[c + 1..].to_string(),
            String::new(),
        ),
        (None, Some(_)) => (image.to_string(), String::new(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(obj: Value) -> Res {
        Res::new(obj, String::new(), false)
    }

    fn image(name: &str, new_name: Option<&str>, tag: Option<&str>, digest: Option<&str>) -> Image {
        Image {
            name: name.into(),
            new_name: new_name.map(Into::into),
            new_tag: tag.map(Into::into),
            digest: digest.map(Into::into),
        }
    }

    #[test]
    fn images_split_and_retag_as_kustomize_does() {
        assert_eq!(split_image("nginx"), ("nginx".into(), "".into(), "".into()));
        assert_eq!(
            split_image("host:5000/app:1.2"),
            ("host:5000/app".into(), "1.2".into(), "".into())
        );
        assert_eq!(
            split_image("app@sha256:ab"),
            ("app".into(), "".into(), "sha256:ab".into())
        );
        assert_eq!(
            split_image("app:1@sha256:ab"),
            ("app".into(), "1".into(), "sha256:ab".into())
        );
        assert_eq!(
            retagged("nginx:1.0", &image("nginx", None, Some("1.25"), None)),
            "nginx:1.25"
        );
        assert_eq!(
            retagged("nginx:1.0", &image("nginx", Some("reg/nginx"), None, None)),
            "reg/nginx:1.0"
        );
        assert_eq!(
            retagged("nginx:1.0", &image("nginx", None, None, Some("sha256:cd"))),
            "nginx@sha256:cd"
        );
    }

    #[test]
    fn images_are_found_in_any_container_list_but_not_by_prefix() {
        let mut r = [res(
            json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "app:1"}, {"name": "b", "image": "application:1"}],
            "initContainers": [{"name": "i", "image": "app"}]}}}}}}),
        )];
        images(&mut r, &image("app", None, Some("2"), None), &[]);
        let spec = &r[0].object["spec"]["jobTemplate"]["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["image"], "app:2");
        assert_eq!(spec["containers"][1]["image"], "application:1");
        assert_eq!(spec["initContainers"][0]["image"], "app:2");
    }

    #[test]
    fn namespace_prefix_and_labels() {
        let mut r = vec![
            res(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old"}})),
            res(
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "w.example.com"}}),
            ),
            res(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"template": {"metadata": {}}}}),
            ),
            res(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
                "subjects": [{"name": "default"}, {"name": "other", "namespace": "x"}]}),
            ),
        ];
        namespace(&mut r, "prod");
        prefix_suffix(&mut r, "p-", "-s");
        add_pairs(
            &mut r,
            &[("app".to_string(), "web".to_string())].into(),
            &fieldspec::common_labels(),
        );
        assert_eq!(
            r[0].name(),
            "prod",
            "a Namespace takes the namespace's name, without prefix"
        );
        assert_eq!(r[1].name(), "w.example.com");
        assert!(
            r[1].object["metadata"].get("namespace").is_none(),
            "cluster-scoped"
        );
        assert_eq!(r[2].name(), "p-web-s");
        assert_eq!(r[2].previous_names, ["web"]);
        assert_eq!(r[2].object["metadata"]["namespace"], "prod");
        assert_eq!(r[2].object["spec"]["selector"]["matchLabels"]["app"], "web");
        assert_eq!(
            r[2].object["spec"]["template"]["metadata"]["labels"]["app"],
            "web"
        );
        assert_eq!(r[3].object["subjects"][0]["namespace"], "prod");
        assert_eq!(r[3].object["subjects"][1]["namespace"], "x");
        assert!(r[3].object["metadata"].get("namespace").is_none());
    }
}
