//! ApplicationSet (Argo CD-shaped): generators that turn registered clusters, lists and a Git
//! repository's directories or files into parameter sets, and a template that turns each set
//! into an [`Application`](crate::Application). An Argo CD ApplicationSet moves over by
//! changing its `apiVersion`; the generators and fields skewer does not do are kept in the
//! schema so that the reconciler refuses them by name instead of the server dropping them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Condition;
use super::application::{ApplicationSpec, HealthStatus};
use super::{any_object, any_objects};

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "skewer.dev",
    version = "v1alpha1",
    kind = "ApplicationSet",
    namespaced,
    status = "ApplicationSetStatus",
    shortname = "appset",
    shortname = "appsets",
    category = "skewer",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetSpec {
    /// Go templates (`{{ .name }}`) instead of Argo CD's default `{{name}}` placeholders.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub go_template: bool,
    /// `missingkey=error` (a missing parameter fails), `missingkey=default`/`zero`/`invalid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub go_template_options: Vec<String>,
    pub generators: Vec<Generator>,
    pub template: ApplicationSetTemplate,
    /// A Go template rendered per parameter set into YAML, merged into the rendered
    /// Application (as a JSON merge patch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_patch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_policy: Option<ApplicationSetSyncPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// Accepted: annotations others set on generated Applications are always kept (skewer
    /// applies only the fields the template names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub preserved_fields: Option<Value>,
    /// Refused: a strategy in another object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub strategy_ref: Option<Value>,
    /// Refused: skewer applies only the fields the template names, so others' changes to
    /// other fields stay; changes to those fields are set back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_objects")]
    pub ignore_application_differences: Vec<Value>,
    /// Accepted: selectors inside `matrix` and `merge` always apply.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub apply_nested_selectors: bool,
}

/// One generator: exactly one of its kinds, and an optional post-filter `selector` over the
/// parameters it generates. `matrix` and `merge` hold generators of their own, kept as JSON in
/// the schema (a CRD schema cannot be recursive) and read by the reconciler.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Generator {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub list: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub clusters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub git: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub matrix: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub merge: Option<Value>,
    /// Refused: skewer reaches no Git host's API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub scm_provider: Option<Value>,
    /// Refused: skewer reaches no Git host's API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub pull_request: Option<Value>,
    /// Refused: placement decisions of other controllers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub cluster_decision_resource: Option<Value>,
    /// Refused: plugin generators call out to other services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub plugin: Option<Value>,
    /// Keeps only the parameter sets whose parameters match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub selector: Option<LabelSelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetTemplate {
    #[serde(default)]
    pub metadata: TemplateMeta,
    pub spec: ApplicationSpec,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The ApplicationSet's own namespace; any other is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Argo CD's resources finalizer is left out (skewer's own finalizer prunes as the
    /// Application's policy says, and nothing would remove Argo CD's); others are written as
    /// given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetSyncPolicy {
    /// Deleting a generated Application (or the ApplicationSet) leaves what it applied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preserve_resources_on_deletion: bool,
    /// `create-only`, `create-update`, `create-delete` or `sync` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^(create-only|create-update|create-delete|sync)$"))]
    pub applications_sync: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Strategy {
    /// `AllAtOnce` (the default) or `RollingSync`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_sync: Option<RollingSync>,
    /// Refused: deletion order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_order: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingSync {
    #[serde(default)]
    pub steps: Vec<RollingStep>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingStep {
    /// Over the generated Applications' labels; all must match.
    #[serde(default)]
    pub match_expressions: Vec<MatchExpression>,
    /// How many of the step's Applications sync at once: a number, or a percentage of the
    /// step (`"25%"`, at least one); default all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub max_update: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchExpression {
    pub key: String,
    /// `In` or `NotIn`.
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetStatus {
    /// Argo CD's `ErrorOccurred`, `ParametersGenerated`, `ResourcesUpToDate` and
    /// `RolloutProgressing`, beside skewer's `Ready`, `Reconciling` and `Stalled`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The generated Applications, with their sync and health.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceStatus>,
    /// Each generated Application's place in a RollingSync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub application_status: Vec<ApplicationStatusEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The Application's sync status: `Synced`, `OutOfSync` or `Unknown`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatusEntry {
    pub application: String,
    /// `Waiting` (out of sync, its step not open yet), `Pending` (asked to sync), `Progressing`
    /// (synced, not healthy yet) or `Healthy`.
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The step it belongs to, from 1; empty when no step selects it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub step: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_revisions: Vec<String>,
}

/// A number or a string (`3`, `"25%"`).
fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"x-kubernetes-int-or-string": true})
}
