//! Work-arounds for server-side apply bugs of API servers before 1.22, applied to manifests
//! before they are sent: ports without `protocol` (kubernetes PR 98576) get `protocol: TCP`,
//! and integer resource quantities become strings.

use serde_json::Value;

/// Whether a server of this minor version needs [`normalize`].
pub fn needed(major: u32, minor: u32) -> bool {
    (major, minor) < (1, 22)
}

/// Rewrites an object in place for old servers.
pub fn normalize(obj: &mut Value) {
    if obj["kind"] == "Service" {
        add_protocols(&mut obj["spec"]["ports"]);
    }
    walk_pod_specs(obj);
}

fn add_protocols(ports: &mut Value) {
    for port in ports.as_array_mut().into_iter().flatten() {
        if let Some(p) = port.as_object_mut() {
            p.entry("protocol")
                .or_insert_with(|| Value::String("TCP".into()));
        }
    }
}

const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// Finds container lists anywhere (Pod, templates, CronJob job templates, custom resources
/// embedding pod specs) and fixes their ports and quantities.
fn walk_pod_specs(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if CONTAINER_LISTS.contains(&key.as_str()) && child.is_array() {
                    for c in child.as_array_mut().into_iter().flatten() {
                        add_protocols(&mut c["ports"]);
                        for section in ["requests", "limits"] {
                            stringify_quantities(&mut c["resources"][section]);
                        }
                        // Indexing a missing key with `[]` inserted nulls; drop them again.
                        prune_nulls(c);
                    }
                } else {
                    walk_pod_specs(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(walk_pod_specs),
        _ => {}
    }
}

fn stringify_quantities(section: &mut Value) {
    for q in section
        .as_object_mut()
        .into_iter()
        .flat_map(|m| m.values_mut())
    {
        if let Value::Number(n) = q {
            *q = Value::String(n.to_string());
        }
    }
}

fn prune_nulls(container: &mut Value) {
    let Some(c) = container.as_object_mut() else {
        return;
    };
    if c.get("ports").is_some_and(Value::is_null) {
        c.remove("ports");
    }
    if let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) {
        res.retain(|_, v| !v.is_null());
    }
    if c.get("resources")
        .is_some_and(|r| r.is_null() || r.as_object().is_some_and(|o| o.is_empty()))
    {
        c.remove("resources");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_and_container_ports_get_tcp() {
        let mut svc = json!({"kind": "Service", "spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}});
        normalize(&mut svc);
        assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(svc["spec"]["ports"][1]["protocol"], "UDP");
    }

    #[test]
    fn quantities_in_templates_become_strings() {
        let mut d = json!({"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
            {"name": "c", "ports": [{"containerPort": 8080}], "resources": {"requests": {"cpu": 1, "memory": "1Gi"}}}
        ]}}}});
        normalize(&mut d);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["resources"]["requests"]["cpu"], "1");
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert!(c["resources"].get("limits").is_none());
    }

    #[test]
    fn containers_without_ports_stay_without() {
        let mut p = json!({"kind": "Pod", "spec": {"containers": [{"name": "c"}]}});
        normalize(&mut p);
        assert_eq!(
            p,
            json!({"kind": "Pod", "spec": {"containers": [{"name": "c"}]}})
        );
    }

    #[test]
    fn only_old_servers_need_it() {
        assert!(needed(1, 20));
        assert!(!needed(1, 22));
    }
}
