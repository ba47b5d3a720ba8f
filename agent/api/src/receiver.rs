//! Receiver (Flux-shaped): a webhook endpoint that makes the objects it names reconcile now.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, LocalObjectReference};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "skewer.dev",
    version = "v1alpha1",
    kind = "Receiver",
    namespaced,
    status = "ReceiverStatus",
    category = "skewer",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Path","type":"string","jsonPath":".status.webhookPath"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ReceiverSpec {
    /// `github`, `gitlab`, `gitea`, `gogs`, `bitbucket`, `generic`, `generic-hmac`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Event types to act on (as the host names them, like `push`); empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// What a valid request reconciles.
    #[serde(default)]
    pub resources: Vec<ResourceReference>,
    /// The Secret whose `token` key is the webhook's secret.
    pub secret_ref: LocalObjectReference,
    /// Flux's field; accepted (the Secret is re-read on every change of the Receiver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Refuse requests (503) while set.
    #[serde(default)]
    pub suspend: bool,
}

/// Objects of one kind: by name, or every one (`name: "*"`) with these labels (Flux's
/// `CrossNamespaceObjectReference`, which Receivers and Alerts share).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// A kind of skewer's: `GitRepository`, `OCIRepository`, `Kustomization`, `Application`
    /// (and, for an Alert, `ApplicationSet`).
    pub kind: String,
    /// A name, or `*` for every object of the kind.
    pub name: String,
    /// Default: the namespace of the object naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// With `name: "*"`: only objects carrying these labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReceiverStatus {
    /// `/hook/<hex sha256(token + name + namespace)>`, as Flux computes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}
