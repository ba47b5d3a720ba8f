//! Application (Argo CD-shaped): a source, a destination and a sync policy. An Argo CD
//! Application moves over by changing its `apiVersion`; the parts of Argo CD skewer does not do
//! (Helm, Kustomize options, plugins, several sources, projects) are kept in the schema so that
//! the reconciler can refuse them by name instead of the server dropping them silently.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Condition;
use super::kustomization::ResourceInventory;

use super::{any_object, any_objects};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "skewer.dev",
    version = "v1alpha1",
    kind = "Application",
    namespaced,
    status = "ApplicationStatus",
    shortname = "app",
    shortname = "apps",
    category = "skewer",
    printcolumn = r#"{"name":"Sync Status","type":"string","jsonPath":".status.sync.status"}"#,
    printcolumn = r#"{"name":"Health Status","type":"string","jsonPath":".status.health.status"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","priority":10,"jsonPath":".status.sync.revision"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    /// `default`; other projects are refused until skewer has projects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ApplicationSource>,
    /// Several sources: refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub sources: Vec<Value>,
    pub destination: ApplicationDestination,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_policy: Option<SyncPolicy>,
    /// Refused: skewer compares what it applied, with server-side apply's field ownership.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub ignore_differences: Vec<Value>,
    /// Accepted, shown as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub info: Vec<Info>,
    /// Rendered-manifest hydration: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub source_hydrator: Option<Value>,
    /// How many deployments `status.history` keeps (0 to 100); default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i64>,
    /// Apply as this ServiceAccount of the Application's namespace, by impersonation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Applications or Kustomizations that must be Ready first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<crate::kustomization::DependencyReference>,
    /// How often the source is checked and the Application compared; default 3m (Argo CD's
    /// `timeout.reconciliation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub interval: Option<String>,
    /// Bound on one sync's waits (a sync wave becoming healthy before the next); default 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub timeout: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSource {
    /// A Git URL, or `oci://host/repository`.
    #[serde(rename = "repoURL")]
    pub repo_url: String,
    /// A branch, tag, commit, or `HEAD` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<Directory>,
    /// Helm charts: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub helm: Option<Value>,
    /// Kustomize options: refused (a `kustomization.yaml` in the path is built natively).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub kustomize: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub plugin: Option<Value>,
    /// Multi-source references: refused.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// A source's display name (Argo CD uses it among several sources): accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A prefix stripped from tags before semver matching: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_prefix: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Directory {
    /// Read subdirectories too; default only the path's own files.
    #[serde(default)]
    pub recurse: bool,
    /// Globs (`{a,b}` lists, `*` crossing `/`) over paths relative to `source.path`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<String>,
    /// Jsonnet: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub jsonnet: Option<Value>,
    /// Read files of every extension: refused (only `.yaml`, `.yml` and `.json` hold objects).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_extension_filter: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationDestination {
    /// The API server URL of a registered cluster; `https://kubernetes.default.svc` is the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// A registered cluster's name (`in-cluster` is the hub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The namespace of namespaced objects that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicy {
    /// Sync on every change; without it, skewer compares and waits for a sync request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automated: Option<Automated>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_options: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    /// Refused: namespaces made with `CreateNamespace=true` carry no extra metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub managed_namespace_metadata: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Automated {
    #[serde(default)]
    pub prune: bool,
    #[serde(default)]
    pub self_heal: bool,
    /// Sync even when the source renders no objects (which would prune everything).
    #[serde(default)]
    pub allow_empty: bool,
    /// Argo CD 2.14's switch; `false` turns automation off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Retry {
    /// Attempts after the first; negative: without end. Default 0 when `retry` is absent,
    /// 5 when it is given without a limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// Retry with the newest revision rather than the failed one: accepted, and always so
    /// (each retry reads the source again).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refresh: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// Default 5s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// Default 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub factor: Option<i64>,
    /// Default 3m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Info {
    pub name: String,
    pub value: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_state: Option<OperationState>,
    /// When the Application was last compared with its source (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled_at: Option<String>,
    /// `Git`, `Directory`, or `Kustomize` as Argo CD names the source's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// What may carry this Application's labels on its cluster (as a Kustomization records it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<ResourceInventory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// The value of `skewer.dev/sync-requested-at` last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_sync_at: Option<String>,
    /// What it deployed, newest last (`spec.revisionHistoryLimit` entries).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<crate::history::Deployment>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// `Synced`, `OutOfSync` or `Unknown`.
    pub status: String,
    /// The revision compared against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthStatus {
    /// `Healthy`, `Progressing`, `Degraded`, `Suspended`, `Missing` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// `Synced` or `OutOfSync`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
    /// In the cluster but no longer in the source: a sync with prune deletes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_pruning: bool,
    /// The SHA-256 of the object as last synced, to tell which objects the source changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_digest: Option<String>,
    /// Annotated with Argo CD's `compare-options: IgnoreExtraneous` when the source last held
    /// it: requiring pruning, it leaves the Application Synced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_extraneous: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationState {
    /// `Running`, `Succeeded`, `Failed` or `Error`.
    pub phase: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub retry_count: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_result: Option<SyncResult>,
    /// The Application's generation the sync was for: a failed sync is retried automatically
    /// only while revision and generation stay the same, and not again once out of retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncResult {
    pub revision: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceResult>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceResult {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    pub version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// `Synced`, `SyncFailed` or `Pruned`.
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
