//! GitRepository: where to fetch desired state from, and the artifact last fetched.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::LocalObjectReference;
pub use super::source::ArtifactStatus;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "skewer.dev",
    version = "v1alpha1",
    kind = "GitRepository",
    namespaced,
    status = "GitRepositoryStatus",
    shortname = "gitrepo",
    category = "skewer",
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".spec.url"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitRepositorySpec {
    /// `https://`, `http://`, `ssh://`, `git://`, or `file://` for local development.
    pub url: String,
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<GitRepositoryRef>,
    /// How often to check the remote for a new revision, like `1m` or `30s`.
    #[serde(default = "super::source::default_interval")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub interval: String,
    /// Bound on one fetch, like `60s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Only fetch revisions signed by one of the keys in a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<GitRepositoryVerification>,
    /// gitignore-style patterns of files to leave out of the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<String>,
    #[serde(default)]
    pub suspend: bool,
}

/// Signature verification: what must be signed, and the trusted keys (`*.asc` OpenPGP public
/// keys, `*.sshpub` OpenSSH public keys) in a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitRepositoryVerification {
    #[serde(default)]
    pub mode: VerificationMode,
    pub secret_ref: LocalObjectReference,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum VerificationMode {
    /// The commit the artifact is built from.
    #[default]
    #[serde(rename = "HEAD")]
    Head,
    /// The annotated tag named by `ref.tag` or `ref.semver`.
    Tag,
    /// Both the tag and the commit.
    #[serde(rename = "TagAndHEAD")]
    TagAndHead,
}

/// Which revision to fetch. Precedence (as Flux): commit, name, semver, tag, branch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitRepositoryRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The highest tag satisfying a version constraint, like `>=1.2.0 <2.0.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// Any ref, like `refs/pull/42/head`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// A GitRepository's status: a source's.
pub type GitRepositoryStatus = super::source::SourceStatus;
