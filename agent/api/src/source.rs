//! What every source kind reports: its conditions and the artifact it stored.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// How often a source checks for a new revision when its spec does not say.
pub fn default_interval() -> String {
    "1m".into()
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<ArtifactStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

impl SourceStatus {
    /// The revision of the stored artifact, if any.
    pub fn revision(&self) -> Option<&str> {
        self.artifact.as_ref().map(|a| a.revision.as_str())
    }
}

/// The artifact of the last fetched revision.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactStatus {
    /// Like `main@sha1:<hex>`.
    pub revision: String,
    /// `sha256:<hex>` of the reproducible tarball.
    pub digest: String,
    pub size: u64,
    /// Where the agent stores it (a path in its artifact store).
    pub path: String,
    pub last_update_time: String,
    /// Where other controllers download it (`--storage-addr`), when skewer serves artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The OCI artifact's annotations (`org.opencontainers.image.*`), as Flux reports them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}
