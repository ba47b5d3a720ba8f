//! OCIRepository reconciler: resolve the ref (one HEAD request for a tag, the tag list for a
//! semver range, nothing for a digest), and pull, verify and store only when the resolved
//! manifest differs from the one stored. Signatures are checked before the layer is
//! downloaded: an unverified artifact is never extracted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use skewer_sources::dockerconfig;
use skewer_sources::oci::cosign::{self, Trust};
use skewer_sources::oci::keyless::Identities;
use skewer_sources::oci::registry::{Access, OciError, Registry, Repository};
use skewer_sources::oci::{self, OciRef, PickError, PullError, Pulled};
use skewer_sources::untrusted::Limits;

use super::source::{self, Common, Fetched, read_secret};
use crate::api::duration;
use crate::api::ocirepository::{LayerOperation, OCIRepositoryVerification};
use crate::api::{OCIRepository, SourceStatus};
use crate::artifacts::store_key;
use crate::runtime::context::Context;
use crate::runtime::{self, Error, Failure, Reason};

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<OCIRepository> = runtime::scoped(&ctx.client, namespace.as_deref());
    runtime::controller::run(ctx, runtime::controller::of(api), reconcile).await;
}

async fn reconcile(repo: Arc<OCIRepository>, ctx: Arc<Context>) -> Result<Action, Error> {
    let spec = &repo.spec;
    let common = Common {
        suspend: spec.suspend,
        interval: &spec.interval,
        verifies: spec.verify.is_some(),
    };
    source::reconcile(repo.as_ref(), &ctx, common, |old| fetch(&repo, &ctx, old)).await
}

fn pull_failure(e: OciError) -> Failure {
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

/// What `spec.verify` trusts, checked before anything is fetched: the Secret to read, and for
/// keyless verification the identities allowed to sign.
fn verification(v: &OCIRepositoryVerification) -> Result<(&str, Option<Identities>), Failure> {
    if v.provider != "cosign" {
        return Err(Failure::invalid(format!(
            "spec.verify.provider: '{}' is not supported (cosign)",
            v.provider
        )));
    }
    let identities = if v.match_oidc_identity.is_empty() {
        None
    } else {
        let pairs: Vec<(String, String)> = v
            .match_oidc_identity
            .iter()
            .map(|m| (m.issuer.clone(), m.subject.clone()))
            .collect();
        let ids =
            Identities::new(&pairs).map_err(|e| Failure::invalid(format!("spec.verify.{e}")))?;
        Some(ids)
    };
    let secret = v
        .secret_ref
        .as_ref()
        .map(|r| r.name.as_str())
        .ok_or_else(|| {
            Failure::invalid(if identities.is_some() {
                "spec.verify.secretRef: keyless verification needs a Secret with trusted_root.json \
             (Sigstore's trusted root); skewer fetches no trust material"
            } else {
                "spec.verify.secretRef: the Secret of public keys (*.pub) is required"
            })
        })?;
    Ok((secret, identities))
}

/// Pulls a new artifact if the ref moved; `None` when the stored one is current.
async fn fetch(
    repo: &OCIRepository,
    ctx: &Context,
    old: SourceStatus,
) -> Result<Option<Fetched>, Failure> {
    let spec = &repo.spec;
    let ns = repo.namespace().unwrap_or_default();
    let key = store_key::<OCIRepository>(&ns, &repo.name_any());
    let repository = Repository::parse(&spec.url).map_err(pull_failure)?;
    if let Some(p) = spec.provider.as_deref().filter(|p| *p != "generic") {
        return Err(Failure::invalid(format!(
            "spec.provider: '{p}' is not supported: credentials come from spec.secretRef (generic)"
        )));
    }
    let trust = spec.verify.as_ref().map(verification).transpose()?;
    let timeout = match &spec.timeout {
        Some(t) => duration::field("timeout", t).map_err(Failure::invalid)?,
        None => Duration::from_secs(60),
    };
    let login = match &spec.secret_ref {
        Some(r) => read_secret(ctx, &ns, &r.name, "spec.secretRef", |data| {
            dockerconfig::login_for(data, &repository.registry)
        })
        .await
        .map_err(|m| Failure::new(Reason::AuthenticationFailed, m))?,
        None => None,
    };
    let registry = Registry::new(&Access {
        login,
        insecure: spec.insecure,
    })
    .map_err(pull_failure)?;
    let r = spec.reference.clone().unwrap_or_default();
    let reference = OciRef {
        tag: r.tag,
        semver: r.semver,
        digest: r.digest,
    };
    let work = async {
        let resolved = oci::resolve(&registry, &repository, &reference)
            .await
            .map_err(pull_failure)?;
        let previous = source::previous(&old, repo.metadata.generation);
        if previous.is_some_and(|p| {
            p.revision == resolved.revision && ctx.store.path_of(&key, &p.digest).exists()
        }) {
            return Ok(None);
        }
        let verified = match trust {
            Some((secret, identities)) => {
                let trust = read_secret(ctx, &ns, secret, "spec.verify.secretRef", |data| {
                    Trust::from_secret_data(data, identities)
                })
                .await
                .map_err(|m| Failure::new(Reason::VerificationError, m))?;
                let found = cosign::signatures(&registry, &repository, &resolved.digest)
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
        let selector = spec.layer_selector.clone().unwrap_or_default();
        let pulled = oci::pull(
            &registry,
            &repository,
            &resolved.digest,
            selector.media_type.as_deref(),
            Limits::default(),
        )
        .await
        .map_err(|e| match e {
            PullError::Registry(e) => pull_failure(e),
            refused @ PullError::Refused { .. } => {
                Failure::new(Reason::OCIArtifactLayerOperationFailed, refused.to_string())
            }
        })?;
        let operation = selector.operation;
        let artifact = store(
            ctx,
            key.clone(),
            resolved.revision,
            pulled,
            operation,
            spec.ignore.clone(),
        )
        .await?;
        Ok(Some(Fetched { artifact, verified }))
    };
    tokio::time::timeout(timeout, work).await.map_err(|_| {
        Failure::new(
            Reason::OCIArtifactPullFailed,
            format!("pull of {repository} timed out after {timeout:?} (spec.timeout)"),
        )
    })?
}

/// Stores a pulled artifact: its files (`extract`, with `spec.ignore` applied), or its layer
/// as it is (`copy`), off the async runtime.
async fn store(
    ctx: &Context,
    key: String,
    revision: String,
    pulled: Pulled,
    operation: LayerOperation,
    ignore: Option<String>,
) -> Result<crate::api::ArtifactStatus, Failure> {
    let failed = |m: String| Failure::new(Reason::StorageOperationFailed, m);
    let metadata: BTreeMap<String, String> = pulled.manifest.annotations.clone();
    let store = ctx.store.clone();
    let k = key.clone();
    let stored = tokio::task::spawn_blocking(move || {
        let key = k;
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
    .map_err(|e| failed(e.to_string()))?;
    Ok(source::artifact_status(
        stored,
        &key,
        metadata,
        ctx.settings.storage_url.as_deref(),
    ))
}
