//! OCIRepository reconciler: resolve the ref (one HEAD request for a tag, the tag list for a
//! semver range, nothing for a digest), and pull, verify and store only when the resolved
//! manifest differs from the one stored. Signatures are checked before the layer is
//! downloaded: an unverified artifact is never extracted.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use skewer_sources::dockerconfig;
use skewer_sources::oci::OciRef;
use skewer_sources::oci::keyless::Identities;
use skewer_sources::oci::registry::{Access, Repository};

use super::fetch::oci::{OciFetch, oci, pull_failure};
use super::source::{self, Common, Fetched, read_secret};
use crate::api::duration;
use crate::api::ocirepository::OCIRepositoryVerification;
use crate::api::{OCIRepository, SourceStatus};
use crate::artifacts::store_key;
use crate::runtime::context::Context;
use crate::runtime::{self, Error, Failure, Reason};

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<OCIRepository> = crate::api::scoped(&ctx.client, namespace.as_deref());
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
    let refused = spec.refused.refusals();
    if !refused.is_empty() {
        return Err(Failure::invalid(refused.join("; ")));
    }
    if let Some(p) = spec.provider.as_deref().filter(|p| *p != "generic") {
        return Err(Failure::invalid(format!(
            "spec.provider: '{p}' is not supported: credentials come from spec.secretRef (generic)"
        )));
    }
    let verify = spec
        .verify
        .as_ref()
        .map(verification)
        .transpose()?
        .map(|(secret, identities)| (secret.to_string(), identities));
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
    let r = spec.reference.clone().unwrap_or_default();
    let selector = spec.layer_selector.clone().unwrap_or_default();
    let previous = source::previous(&old, repo.metadata.generation);
    let got = oci(
        ctx,
        OciFetch {
            namespace: &ns,
            key: key.clone(),
            repository,
            reference: OciRef {
                tag: r.tag,
                semver: r.semver,
                semver_filter: r.semver_filter,
                digest: r.digest,
            },
            reference_field: None,
            access: Access {
                login,
                insecure: spec.insecure,
            },
            timeout,
            ignore: spec.ignore.clone(),
            verify,
            media_type: selector.media_type,
            operation: selector.operation,
            current: previous.map(|p| (p.revision.as_str(), p.digest.as_str())),
        },
    )
    .await?;
    Ok(got.map(|g| source::fetched(ctx, &key, g)))
}
