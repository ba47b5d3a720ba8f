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
    /// Flux's fields skewer does not do, kept in the schema so that the reconciler refuses them
    /// by name instead of the API server dropping them without a word.
    #[serde(flatten)]
    pub refused: GitOnlyInFlux,
}

/// Flux's GitRepository fields (v1 and v1beta2) beyond what skewer does, each either accepted
/// as Flux itself treats it or refused with what to do instead ([`GitOnlyInFlux::refusals`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOnlyInFlux {
    /// `generic` (credentials from `secretRef`) is accepted; cloud providers are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_secret_ref: Option<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recurse_submodules: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::any_objects")]
    pub include: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sparse_checkout: Vec<String>,
    /// v1beta2's, which Flux itself ignores (one Git implementation since v0.36): ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_implementation: Option<String>,
    /// v1beta2's cross-namespace access list, which Flux never implemented: ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::any_object")]
    pub access_from: Option<serde_json::Value>,
}

impl GitOnlyInFlux {
    /// Each field set that skewer does not do, with what to do instead.
    pub fn refusals(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut refuse = |field: &str, instead: &str| {
            out.push(format!(
                "spec.{field} is not supported by skewer: {instead}"
            ))
        };
        if let Some(p) = self.provider.as_deref().filter(|p| *p != "generic") {
            refuse(
                "provider",
                &format!(
                    "'{p}' needs cloud credentials skewer does not hold; use 'generic' with spec.secretRef (a token or an SSH key)"
                ),
            );
        }
        if self.service_account_name.is_some() {
            refuse(
                "serviceAccountName",
                "workload identity is not used; put the credentials in the Secret of spec.secretRef",
            );
        }
        if self.proxy_secret_ref.is_some() {
            refuse(
                "proxySecretRef",
                "fetching through a proxy is not done; reach the Git host directly",
            );
        }
        if self.recurse_submodules {
            refuse(
                "recurseSubmodules",
                "submodules are not fetched; add the submodule's repository as its own GitRepository",
            );
        }
        if !self.include.is_empty() {
            refuse(
                "include",
                "other repositories are not merged into the artifact; give each its own GitRepository and Kustomization",
            );
        }
        if !self.sparse_checkout.is_empty() {
            refuse(
                "sparseCheckout",
                "leave other directories out with spec.ignore instead (for example '/*' then '!/clusters/')",
            );
        }
        out
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anchors::parse;

    #[test]
    fn fluxs_fields_skewer_does_not_do_are_refused_by_name() {
        let spec: GitRepositorySpec = parse(
            r#"
url: https://github.com/org/repo
interval: 5m
provider: azure
serviceAccountName: flux-git
proxySecretRef: {name: proxy}
recurseSubmodules: true
include: [{repository: {name: other}, fromPath: deploy, toPath: other}]
sparseCheckout: [clusters/prod]
"#,
        );
        let refused = spec.refused.refusals();
        for field in [
            "provider",
            "serviceAccountName",
            "proxySecretRef",
            "recurseSubmodules",
            "include",
            "sparseCheckout",
        ] {
            assert!(
                refused
                    .iter()
                    .any(|r| r.starts_with(&format!("spec.{field} is not supported"))),
                "spec.{field} not refused: {refused:#?}"
            );
        }
        assert_eq!(refused.len(), 6);
        // What Flux itself accepts as a no-op (v1beta2) or as the default is accepted.
        let accepted: GitRepositorySpec = parse(
            r#"
url: https://github.com/org/repo
interval: 5m
provider: generic
recurseSubmodules: false
gitImplementation: go-git
accessFrom: {namespaceSelectors: [{matchLabels: {team: a}}]}
"#,
        );
        assert_eq!(accepted.refused.refusals(), Vec::<String>::new());
    }
}
