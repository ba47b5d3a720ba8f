//! Health as kstatus judges it: a pure function from an object (as the cluster returns it) to
//! Current, InProgress or Failed, with a message saying why.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Current,
    InProgress(String),
    Failed(String),
}

impl Health {
    pub fn is_current(&self) -> bool {
        matches!(self, Health::Current)
    }
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn condition_is(obj: &Value, type_: &str, status: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == status)
}

fn message_of(obj: &Value, type_: &str) -> String {
    condition(obj, type_)
        .and_then(|c| c["message"].as_str().or(c["reason"].as_str()))
        .unwrap_or_default()
        .to_string()
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Judges an object's health.
pub fn health(obj: &Value) -> Health {
    use Health::*;
    if obj["metadata"]["deletionTimestamp"].is_string() {
        return InProgress("being deleted".into());
    }
    let generation = int(&obj["metadata"]["generation"]);
    let observed = &obj["status"]["observedGeneration"];
    if observed.is_i64() && int(observed) < generation {
        return InProgress(format!(
            "the controller has not observed generation {generation} yet"
        ));
    }
    // Generic kstatus conditions take precedence over kind rules.
    if condition_is(obj, "Stalled", "True") {
        return Failed(message_of(obj, "Stalled"));
    }
    if condition_is(obj, "Reconciling", "True") {
        return InProgress(message_of(obj, "Reconciling"));
    }
    let (group, _) =
        crate::object::split_api_version(obj["apiVersion"].as_str().unwrap_or_default());
    let kind = obj["kind"].as_str().unwrap_or_default();
    let status = &obj["status"];
    match (group, kind) {
        ("apps", "Deployment") => {
            let want = obj["spec"]["replicas"].as_i64().unwrap_or(1);
            if condition(obj, "Progressing")
                .is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded")
            {
                return Failed(message_of(obj, "Progressing"));
            }
            let (updated, ready, available, total) = (
                int(&status["updatedReplicas"]),
                int(&status["readyReplicas"]),
                int(&status["availableReplicas"]),
                int(&status["replicas"]),
            );
            if updated < want {
                InProgress(format!("updated replicas: {updated}/{want}"))
            } else if total > updated {
                InProgress(format!("pending termination: {}", total - updated))
            } else if available < want || ready < want {
                InProgress(format!("available replicas: {available}/{want}"))
            } else {
                Current
            }
        }
        ("apps", "StatefulSet") => {
            let want = obj["spec"]["replicas"].as_i64().unwrap_or(1);
            let ready = int(&status["readyReplicas"]);
            let updated = int(&status["updatedReplicas"]);
            if ready < want {
                InProgress(format!("ready replicas: {ready}/{want}"))
            } else if obj["spec"]["updateStrategy"]["type"] != "OnDelete" && updated < want {
                InProgress(format!("updated replicas: {updated}/{want}"))
            } else if status["updateRevision"] != status["currentRevision"]
                && updated == want
                && ready == want
                && status["currentRevision"].is_string()
            {
                InProgress("rolling update in progress".into())
            } else {
                Current
            }
        }
        ("apps", "DaemonSet") => {
            let want = int(&status["desiredNumberScheduled"]);
            let available = int(&status["numberAvailable"]);
            let updated = int(&status["updatedNumberScheduled"]);
            if status.is_null() || status["desiredNumberScheduled"].is_null() {
                InProgress("not scheduled yet".into())
            } else if updated < want {
                InProgress(format!("updated: {updated}/{want}"))
            } else if available < want {
                InProgress(format!("available: {available}/{want}"))
            } else {
                Current
            }
        }
        ("batch", "Job") => {
            if condition_is(obj, "Failed", "True") {
                Failed(message_of(obj, "Failed"))
            } else if condition_is(obj, "Complete", "True") {
                Current
            } else {
                let completions = obj["spec"]["completions"].as_i64().unwrap_or(1);
                InProgress(format!(
                    "succeeded: {}/{completions}",
                    int(&status["succeeded"])
                ))
            }
        }
        ("", "PersistentVolumeClaim") => match status["phase"].as_str() {
            Some("Bound") => Current,
            phase => InProgress(format!("phase: {}", phase.unwrap_or("Pending"))),
        },
        ("", "Service") => {
            if obj["spec"]["type"] == "LoadBalancer"
                && status["loadBalancer"]["ingress"]
                    .as_array()
                    .is_none_or(|i| i.is_empty())
            {
                InProgress("waiting for a load balancer address".into())
            } else {
                Current
            }
        }
        ("", "Pod") => match status["phase"].as_str() {
            Some("Succeeded") => Current,
            Some("Failed") => Failed("pod failed".into()),
            Some("Running") if condition_is(obj, "Ready", "True") => Current,
            phase => InProgress(format!("phase: {}", phase.unwrap_or("Pending"))),
        },
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            if condition_is(obj, "NamesAccepted", "False") {
                Failed(message_of(obj, "NamesAccepted"))
            } else if condition_is(obj, "Established", "True") {
                Current
            } else {
                InProgress("not established yet".into())
            }
        }
        _ => match condition(obj, "Ready").map(|c| c["status"].as_str()) {
            Some(Some("True")) => Current,
            Some(_) => InProgress(message_of(obj, "Ready")),
            None => Current,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deployment_needs_available_replicas() {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"generation": 2},
            "spec": {"replicas": 2}, "status": {"observedGeneration": 1}});
        assert!(matches!(health(&d), Health::InProgress(m) if m.contains("generation 2")));
        d["status"] = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1});
        assert_eq!(
            health(&d),
            Health::InProgress("available replicas: 1/2".into())
        );
        d["status"]["readyReplicas"] = json!(2);
        d["status"]["availableReplicas"] = json!(2);
        assert_eq!(health(&d), Health::Current);
        d["status"]["conditions"] = json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded", "message": "deadline"}]);
        assert_eq!(health(&d), Health::Failed("deadline".into()));
    }

    #[test]
    fn job_crd_pvc_and_ready_condition() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "status": {"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]}});
        assert_eq!(health(&job), Health::Failed("BackoffLimitExceeded".into()));
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "status": {"conditions": [{"type": "Established", "status": "True"}]}});
        assert_eq!(health(&crd), Health::Current);
        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": "Pending"}});
        assert!(!health(&pvc).is_current());
        let custom = json!({"apiVersion": "x.dev/v1", "kind": "Thing", "status": {"conditions": [{"type": "Ready", "status": "False", "message": "waiting"}]}});
        assert_eq!(health(&custom), Health::InProgress("waiting".into()));
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert_eq!(health(&cm), Health::Current);
    }
}
