//! What skewer tells Providers: an event in Flux's shape (`event.toolkit.fluxcd.io/v1beta1`),
//! so that a receiver written for Flux's `generic` provider reads skewer's too. Pure.

use std::collections::BTreeMap;

use serde::Serialize;

/// Metadata keys carry the involved object's group, as Flux's controllers write them.
pub const REVISION_KEY: &str = "skewer.dev/revision";

/// `info` or `error`, as Flux writes them.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Error => "error",
        }
    }
}

/// Where a sync stands, for a commit status: a sync began, or ended well or badly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Started,
    Succeeded,
    Failed,
}

#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InvolvedObject {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub api_version: String,
}

/// One event, serialized exactly as the `generic` providers send it.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub involved_object: InvolvedObject,
    pub severity: Severity,
    /// RFC 3339.
    pub timestamp: String,
    pub message: String,
    pub reason: String,
    pub metadata: BTreeMap<String, String>,
    pub reporting_controller: String,
    pub reporting_instance: String,
    /// The object's labels, which an Alert's `matchLabels` select on; never sent.
    #[serde(skip)]
    pub labels: BTreeMap<String, String>,
    #[serde(skip)]
    pub phase: Phase,
}

impl Event {
    /// The revision the event is about (`main@sha1:<hex>`, `v1@sha256:<hex>`), if any.
    pub fn revision(&self) -> Option<&str> {
        self.metadata.get(REVISION_KEY).map(String::as_str)
    }

    /// `Kind/namespace/name`, for logs, status and Events about deliveries.
    pub fn subject(&self) -> String {
        let o = &self.involved_object;
        format!("{}/{}/{}", o.kind, o.namespace, o.name)
    }
}

/// The commit a Git revision names: the hex after `sha1:` (or a bare 40-hex revision, as
/// Flux's older `main/<hex>` form ends in). `None` for an OCI digest or anything else.
pub fn commit_of(revision: &str) -> Option<&str> {
    let hex = match revision.rsplit_once("sha1:") {
        Some((_, hex)) => hex,
        None => revision.rsplit('/').next().unwrap_or(revision),
    };
    (hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "0df2d77f9e3c8a1b2c3d4e5f60718293a4b5c6d7";

    #[test]
    fn commits_are_read_from_every_git_revision_form() {
        assert_eq!(commit_of(&format!("main@sha1:{SHA}")), Some(SHA));
        assert_eq!(commit_of(&format!("refs/tags/v1@sha1:{SHA}")), Some(SHA));
        assert_eq!(commit_of(&format!("sha1:{SHA}")), Some(SHA));
        assert_eq!(commit_of(&format!("main/{SHA}")), Some(SHA));
        assert_eq!(commit_of(SHA), Some(SHA));
        assert_eq!(
            commit_of("v1@sha256:abcd"),
            None,
            "an OCI digest is no commit"
        );
        assert_eq!(commit_of("main@sha1:xyz"), None);
        assert_eq!(commit_of(""), None);
    }

    #[test]
    fn serializes_as_fluxs_generic_body() {
        let e = Event {
            involved_object: InvolvedObject {
                kind: "Kustomization".into(),
                namespace: "apps".into(),
                name: "web".into(),
                uid: "u-1".into(),
                api_version: "skewer.dev/v1alpha1".into(),
            },
            severity: Severity::Error,
            timestamp: "2026-11-26T00:00:00Z".into(),
            message: "boom".into(),
            reason: "ApplyFailed".into(),
            metadata: [(REVISION_KEY.to_string(), format!("main@sha1:{SHA}"))].into(),
            reporting_controller: "skewer".into(),
            reporting_instance: "skewer-0".into(),
            labels: [("team".to_string(), "a".to_string())].into(),
            phase: Phase::Failed,
        };
        let json = serde_json::to_value(&e).expect("serializes");
        assert_eq!(json["involvedObject"]["apiVersion"], "skewer.dev/v1alpha1");
        assert_eq!(json["severity"], "error");
        assert_eq!(json["reportingController"], "skewer");
        assert_eq!(json["metadata"][REVISION_KEY], format!("main@sha1:{SHA}"));
        assert!(
            json.get("labels").is_none(),
            "labels select, they are not sent"
        );
        assert_eq!(e.subject(), "Kustomization/apps/web");
    }
}
