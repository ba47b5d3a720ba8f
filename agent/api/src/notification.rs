//! Provider and Alert (Flux-shaped, notification.toolkit.fluxcd.io/v1beta3): where skewer tells
//! people what happened (a commit status on the Git host, a message in a chat, a JSON body to
//! a webhook), and which events go there. A Flux manifest moves over by changing its
//! `apiVersion` to `skewer.dev/v1alpha1`.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::receiver::ResourceReference;
use super::{Condition, LocalObjectReference};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "skewer.dev",
    version = "v1alpha1",
    kind = "Provider",
    namespaced,
    status = "ProviderStatus",
    category = "skewer",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Type","type":"string","jsonPath":".spec.type"}"#,
    printcolumn = r#"{"name":"Last delivery","type":"string","jsonPath":".status.lastDelivery.result"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ProviderSpec {
    /// `github`, `gitlab`, `gitea`, `bitbucketserver` (a commit status on the applied
    /// revision), `slack`, `msteams`, `discord`, `googlechat`, `generic`, `generic-hmac`,
    /// `alertmanager`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Where to send: the repository's URL for commit statuses (`https://github.com/org/repo`,
    /// a GitHub Enterprise or self-hosted GitLab address too); the webhook URL otherwise.
    /// The Secret's `address` key, when present, is used instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The chat channel (Slack with a bot token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The name messages are posted under (Slack, Discord).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// How long one delivery may take (default `15s`, at most `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// The Secret holding `token` (an API token, a Slack bot token, or the HMAC key of
    /// `generic-hmac`), or `username` and `password`, or `address`. Its values are never
    /// logged, nor written to Events or status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// The Secret whose `ca.crt` is the CA the endpoint's certificate is checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<LocalObjectReference>,
    /// Deliver nothing while set.
    #[serde(default)]
    pub suspend: bool,
    /// Flux's fields skewer does not honour; kept so that they are refused by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_secret_ref: Option<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_status_expr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Flux's field, deprecated there and without effect here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProviderStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The last delivery this Provider made or gave up on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery: Option<Delivery>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

/// One delivery's outcome.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// RFC 3339.
    pub time: String,
    /// `Delivered`, `Failed` (after its retries) or `Dropped` (the queue was full).
    pub result: String,
    /// The object the event was about, `Kind/namespace/name`, and its reason.
    pub event: String,
    /// What the endpoint answered, or why nothing was sent (never a credential).
    pub message: String,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "skewer.dev",
    version = "v1alpha1",
    kind = "Alert",
    namespaced,
    status = "AlertStatus",
    category = "skewer",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Provider","type":"string","jsonPath":".spec.providerRef.name"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AlertSpec {
    /// The Provider (in the Alert's namespace) the events go to.
    pub provider_ref: LocalObjectReference,
    /// `info` (every event) or `error` (failures only). Default `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_severity: Option<String>,
    /// The objects whose events go out: a kind and a name (or `*`, with `matchLabels`), in
    /// the Alert's namespace unless another is named.
    pub event_sources: Vec<ResourceReference>,
    /// Regular expressions: when any is given, only messages matching one go out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inclusion_list: Vec<String>,
    /// Regular expressions: messages matching any do not go out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclusion_list: Vec<String>,
    /// Added to every event's metadata (an event's own keys win).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub event_metadata: BTreeMap<String, String>,
    /// A short description of the impact (Flux's deprecated field; sent as the `summary`
    /// metadata key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Send nothing while set.
    #[serde(default)]
    pub suspend: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}
