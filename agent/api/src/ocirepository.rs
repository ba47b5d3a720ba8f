//! OCIRepository: an OCI artifact to pull desired state from (Flux's format, or any artifact
//! whose layer is a `.tar.gz`), optionally only when cosign-signed, and the artifact last pulled.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::LocalObjectReference;
use super::source::SourceStatus;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "skewer.dev",
    version = "v1alpha1",
    kind = "OCIRepository",
    namespaced,
    status = "SourceStatus",
    shortname = "ocirepo",
    category = "skewer",
    printcolumn = r#"{"name":"URL","type":"string","jsonPath":".spec.url"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OCIRepositorySpec {
    /// `oci://<registry>/<repository>`, with no tag (that is `ref`'s).
    pub url: String,
    /// Which artifact: `digest`, else the highest tag in `semver`, else `tag`, else `latest`.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<OCIRepositoryRef>,
    /// Which layer holds the files, and whether to extract it or keep it as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_selector: Option<LayerSelector>,
    /// A `kubernetes.io/dockerconfigjson` Secret with the registry's login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Only pull artifacts signed by a trusted key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<OCIRepositoryVerification>,
    /// Where credentials come from: `generic` (the Secret) is the only provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Plain HTTP, for registries without TLS.
    #[serde(default)]
    pub insecure: bool,
    /// How often to check the registry for a new artifact, like `5m`.
    #[serde(default = "super::source::default_interval")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub interval: String,
    /// Bound on one pull, like `60s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(super::duration::PATTERN))]
    pub timeout: Option<String>,
    /// gitignore-style patterns of files to leave out of the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<String>,
    #[serde(default)]
    pub suspend: bool,
    /// Flux's fields skewer does not do, kept in the schema so that the reconciler refuses them
    /// by name instead of the API server dropping them without a word.
    #[serde(flatten)]
    pub refused: OciOnlyInFlux,
}

/// Flux's OCIRepository fields (v1 and v1beta2) skewer refuses, each with what to do instead
/// ([`OciOnlyInFlux::refusals`]).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciOnlyInFlux {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_secret_ref: Option<LocalObjectReference>,
}

impl OciOnlyInFlux {
    /// Each field set, with what to do instead.
    pub fn refusals(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (field, set, instead) in [
            (
                "serviceAccountName",
                self.service_account_name.is_some(),
                "image pull secrets are not read from ServiceAccounts; name the dockerconfigjson Secret in spec.secretRef",
            ),
            (
                "certSecretRef",
                self.cert_secret_ref.is_some(),
                "custom registry CAs and client certificates are not used; serve the registry with a certificate the system trusts",
            ),
            (
                "proxySecretRef",
                self.proxy_secret_ref.is_some(),
                "pulling through a proxy is not done; reach the registry directly",
            ),
        ] {
            if set {
                out.push(format!(
                    "spec.{field} is not supported by skewer: {instead}"
                ));
            }
        }
        out
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OCIRepositoryRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The highest tag satisfying a version constraint, like `>=1.2.0 <2.0.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// A regular expression tags must match before `semver` picks among them (like `.*-rc.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver_filter: Option<String>,
    /// A manifest digest, `sha256:<hex>`: pins the artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LayerSelector {
    /// The media type of the layer (default: the first layer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// `extract` (default) its files into the artifact, or `copy` the layer as the artifact.
    #[serde(default)]
    pub operation: LayerOperation,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LayerOperation {
    #[default]
    Extract,
    Copy,
}

/// Cosign verification: trusted public keys (`*.pub` entries of `secretRef`), or keyless
/// identities under a trusted root.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OCIRepositoryVerification {
    /// `cosign`.
    pub provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Keyless signatures: the identities trusted (any one of them suffices); `secretRef` then
    /// holds Sigstore's `trusted_root.json`.
    #[serde(
        default,
        rename = "matchOIDCIdentity",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub match_oidc_identity: Vec<OIDCIdentityMatch>,
}

/// A keyless signer: regular expressions over the certificate's OIDC issuer and subject.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OIDCIdentityMatch {
    pub issuer: String,
    pub subject: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::anchors::parse;

    #[test]
    fn fluxs_fields_skewer_does_not_do_are_refused_by_name() {
        let spec: OCIRepositorySpec = parse(
            r#"
url: oci://ghcr.io/org/manifests
interval: 5m
ref: {semver: ">=1.0.0-0", semverFilter: ".*-rc.*"}
serviceAccountName: puller
certSecretRef: {name: registry-ca}
proxySecretRef: {name: proxy}
"#,
        );
        let refused = spec.refused.refusals();
        for field in ["serviceAccountName", "certSecretRef", "proxySecretRef"] {
            assert!(
                refused
                    .iter()
                    .any(|r| r.starts_with(&format!("spec.{field} is not supported"))),
                "spec.{field} not refused: {refused:#?}"
            );
        }
        assert_eq!(refused.len(), 3);
        assert_eq!(
            spec.reference.and_then(|r| r.semver_filter).as_deref(),
            Some(".*-rc.*"),
            "semverFilter is implemented, not refused"
        );
    }

    /// An OCIRepository as Flux's documentation writes one reads unchanged.
    #[test]
    fn fluxs_oci_repository_reads_with_its_field_names() {
        let spec: OCIRepositorySpec = serde_saphyr::from_str(
            r#"
interval: 5m
url: oci://ghcr.io/stefanprodan/manifests/podinfo
ref: {semver: ">=6.0.0"}
layerSelector: {mediaType: "application/vnd.cncf.flux.content.v1.tar+gzip", operation: copy}
verify:
  provider: cosign
  secretRef: {name: sigstore-root}
  matchOIDCIdentity:
  - issuer: "^https://token.actions.githubusercontent.com$"
    subject: "^https://github.com/stefanprodan/podinfo.*$"
"#,
        )
        .unwrap();
        let verify = spec.verify.unwrap();
        assert_eq!(verify.match_oidc_identity.len(), 1);
        assert_eq!(
            verify.match_oidc_identity[0].subject,
            "^https://github.com/stefanprodan/podinfo.*$"
        );
        let layer = spec.layer_selector.unwrap();
        assert_eq!(layer.operation, LayerOperation::Copy);
    }
}
