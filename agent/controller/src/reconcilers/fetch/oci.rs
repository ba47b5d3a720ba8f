//! OCI, for an OCIRepository and for an Application's own `oci://` repository alike: resolve
//! the reference (one HEAD request for a tag, the tag list for a version range, nothing for a
//! digest) and only when it names another manifest than the stored one, verify its
//! signatures, pull one layer within limits as untrusted input, drop ignored files and store
//! it, all within one deadline.

use std::time::Duration;

use skewer_sources::oci::cosign::{self, Trust};
use skewer_sources::oci::keyless::Identities;
use skewer_sources::oci::registry::{Access, OciError, Registry, Repository};
use skewer_sources::oci::{self, OciRef, PickError, PullError, Pulled};
use skewer_sources::untrusted::Limits;

use super::Got;
use crate::api::ocirepository::LayerOperation;
use crate::reconcilers::source::read_secret;
use crate::runtime::context::Context;
use crate::runtime::{Failure, Reason};

/// One OCI fetch.
pub struct OciFetch<'a> {
    /// Where the Secrets it reads are.
    pub namespace: &'a str,
    /// Its place in the store.
    pub key: String,
    pub repository: Repository,
    pub reference: OciRef,
    /// The field that gave `reference`, named in resolution errors (when not the ref's own).
    pub reference_field: Option<&'static str>,
    pub access: Access,
    /// Bound on the whole fetch: resolving, verifying, pulling, storing.
    pub timeout: Duration,
    pub ignore: Option<String>,
    /// The Secret of trusted keys (or Sigstore's trusted root), and the identities allowed to
    /// sign keylessly; checked before the layer is downloaded.
    pub verify: Option<(String, Option<Identities>)>,
    /// The layer to take (`None`: Flux's content layer, else the first).
    pub media_type: Option<String>,
    pub operation: LayerOperation,
    /// The stored artifact: revision and digest.
    pub current: Option<(&'a str, &'a str)>,
}

pub fn pull_failure(e: OciError) -> Failure {
    let reason = match &e {
        OciError::Url(_) | OciError::Pick(PickError::BadDigest(_) | PickError::Semver(_)) => {
            Reason::InvalidSpec
        }
        OciError::Auth { .. } => Reason::AuthenticationFailed,
        OciError::Format(_) | OciError::TooLarge { .. } => Reason::OCIArtifactLayerOperationFailed,
        _ => Reason::OCIArtifactPullFailed,
    };
    Failure::new(reason, e.to_string())
}

/// Pulls `f` if the reference moved; `None` when the stored artifact is current.
pub async fn oci(ctx: &Context, f: OciFetch<'_>) -> Result<Option<Got>, Failure> {
    let registry = Registry::new(&f.access).map_err(pull_failure)?;
    let (timeout, repository) = (f.timeout, f.repository.to_string());
    tokio::time::timeout(timeout, pull(ctx, &registry, f))
        .await
        .map_err(|_| {
            Failure::new(
                Reason::OCIArtifactPullFailed,
                format!("pull of {repository} timed out after {timeout:?} (spec.timeout)"),
            )
        })?
}

async fn pull(ctx: &Context, registry: &Registry, f: OciFetch<'_>) -> Result<Option<Got>, Failure> {
    let repository = &f.repository;
    let resolved = oci::resolve(registry, repository, &f.reference)
        .await
        .map_err(|e| match f.reference_field {
            Some(field) => Failure::new(Reason::OCIArtifactPullFailed, format!("{field}: {e}")),
            None => pull_failure(e),
        })?;
    if f.current.is_some_and(|(revision, digest)| {
        revision == resolved.revision && ctx.store.path_of(&f.key, digest).exists()
    }) {
        return Ok(None);
    }
    let verified = match f.verify {
        Some((secret, identities)) => {
            let trust = read_secret(ctx, f.namespace, &secret, "spec.verify.secretRef", |data| {
                Trust::from_secret_data(data, identities)
            })
            .await
            .map_err(|m| Failure::new(Reason::VerificationError, m))?;
            let found = cosign::signatures(registry, repository, &resolved.digest)
                .await
                .map_err(pull_failure)?;
            let by = trust
                .verify(&found, &resolved.digest)
                .map_err(|e| Failure::new(Reason::VerificationError, e.to_string()))?;
            Some(format!(
                "verified cosign signature of {} by {by}",
                resolved.digest
            ))
        }
        None => None,
    };
    let pulled = oci::pull(
        registry,
        repository,
        &resolved.digest,
        f.media_type.as_deref(),
        Limits::default(),
    )
    .await
    .map_err(|e| match e {
        PullError::Registry(e) => pull_failure(e),
        refused @ PullError::Refused { .. } => {
            Failure::new(Reason::OCIArtifactLayerOperationFailed, refused.to_string())
        }
    })?;
    let metadata = pulled.manifest.annotations.clone();
    let stored = store(
        ctx,
        &f.key,
        &resolved.revision,
        pulled,
        f.operation,
        f.ignore,
    )
    .await?;
    Ok(Some(Got {
        revision: resolved.revision,
        stored,
        metadata,
        verified,
    }))
}

/// Stores a pulled artifact: its files (`extract`, ignore rules applied), or its layer as it is
/// (`copy`), off the async runtime.
async fn store(
    ctx: &Context,
    key: &str,
    revision: &str,
    pulled: Pulled,
    operation: LayerOperation,
    ignore: Option<String>,
) -> Result<skewer_sources::Artifact, Failure> {
    let failed = |m: String| Failure::new(Reason::StorageOperationFailed, m);
    let (store, key, revision) = (ctx.store.clone(), key.to_string(), revision.to_string());
    tokio::task::spawn_blocking(move || {
        let stored = match operation {
            LayerOperation::Extract => {
                let files = skewer_sources::ignore::filter(pulled.files, ignore.as_deref());
                store.put(&key, &revision, &files)
            }
            LayerOperation::Copy => {
                store.put_packed(&key, &revision, &pulled.bytes, pulled.layer.digest)
            }
        }?;
        store.gc(&key, &stored.digest)?;
        Ok::<_, skewer_sources::StoreError>(stored)
    })
    .await
    .map_err(|e| failed(e.to_string()))?
    .map_err(|e| failed(e.to_string()))
}
