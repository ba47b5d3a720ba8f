//! Health as kstatus judges it: a pure function from an object (as the cluster returns it) to
//! Current, InProgress or Failed, with a message saying why; and the aggregation of many
//! objects' health into one verdict and the lines that say what is not healthy.

use serde_json::Value;

use crate::object::ObjectId;

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

/// What a health check found of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    Judged(Health),
    /// The object does not exist.
    Missing,
    /// The object could not be read (its kind is unknown, the request failed).
    Unreadable(String),
}

/// Many objects' health, aggregated worst first: Unknown > Degraded > Missing > Progressing >
/// Healthy (Argo CD's order), so one failed object makes the whole set Degraded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Overall {
    Healthy,
    Progressing,
    Missing,
    Degraded,
    Unknown,
}

impl Observed {
    fn overall(&self) -> Overall {
        match self {
            Observed::Judged(Health::Current) => Overall::Healthy,
            Observed::Judged(Health::InProgress(_)) => Overall::Progressing,
            Observed::Judged(Health::Failed(_)) => Overall::Degraded,
            Observed::Missing => Overall::Missing,
            Observed::Unreadable(_) => Overall::Unknown,
        }
    }

    /// Why the object is not healthy; `None` when it is.
    fn problem(&self) -> Option<String> {
        match self {
            Observed::Judged(Health::Current) => None,
            Observed::Judged(Health::InProgress(m)) => Some(format!("in progress: {m}")),
            Observed::Judged(Health::Failed(m)) => Some(format!("failed: {m}")),
            Observed::Missing => Some("not found".into()),
            Observed::Unreadable(e) => Some(e.clone()),
        }
    }
}

/// The health of a set of objects, as last observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthReport {
    pub objects: Vec<(ObjectId, Observed)>,
}

impl HealthReport {
    /// The worst of the objects' health; an empty set is healthy.
    pub fn overall(&self) -> Overall {
        self.objects
            .iter()
            .map(|(_, o)| o.overall())
            .max()
            .unwrap_or(Overall::Healthy)
    }

    pub fn is_healthy(&self) -> bool {
        self.overall() == Overall::Healthy
    }

    /// One line per object that is not healthy, like
    /// `Deployment/web/app: in progress: available replicas: 0/1`.
    pub fn problems(&self) -> Vec<String> {
        self.objects
            .iter()
            .filter_map(|(id, o)| o.problem().map(|p| format!("{}: {p}", id.display())))
            .collect()
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

    fn id(name: &str) -> ObjectId {
        ObjectId::parse(&format!("ns_{name}_apps_Deployment")).expect("an id")
    }

    #[test]
    fn the_worst_object_decides_and_each_problem_is_named() {
        let mut report = HealthReport::default();
        assert_eq!(report.overall(), Overall::Healthy, "nothing to check");
        report
            .objects
            .push((id("a"), Observed::Judged(Health::Current)));
        assert!(report.is_healthy());
        report.objects.push((
            id("b"),
            Observed::Judged(Health::InProgress("available replicas: 0/1".into())),
        ));
        assert_eq!(report.overall(), Overall::Progressing);
        report.objects.push((id("c"), Observed::Missing));
        assert_eq!(report.overall(), Overall::Missing);
        report.objects.push((
            id("d"),
            Observed::Judged(Health::Failed("deadline exceeded".into())),
        ));
        assert_eq!(report.overall(), Overall::Degraded);
        assert_eq!(
            report.problems(),
            [
                "Deployment/ns/b: in progress: available replicas: 0/1",
                "Deployment/ns/c: not found",
                "Deployment/ns/d: failed: deadline exceeded",
            ]
        );
        report
            .objects
            .push((id("e"), Observed::Unreadable("forbidden".into())));
        assert_eq!(report.overall(), Overall::Unknown);
        assert!(!report.is_healthy());
    }

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
