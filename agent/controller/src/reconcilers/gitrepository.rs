//! GitRepository reconciler: list the remote's refs, and fetch and store an artifact only
//! when the resolved commit differs from the one already stored.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use skewer_sources::{Access, Auth, GitRefSpec, VerifyMode};

use super::fetch::git::{FetchError, GitFetch, Refs, git};
use super::source::{self, Common, Fetched, read_secret};
use crate::api::duration;
use crate::api::gitrepository::VerificationMode;
use crate::api::{GitRepository, SourceStatus};
use crate::artifacts::store_key;
use crate::runtime::context::Context;
use crate::runtime::{self, Error, Failure};

fn verify_mode(mode: VerificationMode) -> VerifyMode {
    match mode {
        VerificationMode::Head => VerifyMode::Head,
        VerificationMode::Tag => VerifyMode::Tag,
        VerificationMode::TagAndHead => VerifyMode::TagAndHead,
    }
}

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<GitRepository> = crate::api::scoped(&ctx.client, namespace.as_deref());
    runtime::controller::run(ctx, runtime::controller::of(api), reconcile).await;
}

async fn reconcile(repo: Arc<GitRepository>, ctx: Arc<Context>) -> Result<Action, Error> {
    let spec = &repo.spec;
    let common = Common {
        suspend: spec.suspend,
        interval: &spec.interval,
        verifies: spec.verify.is_some(),
    };
    let (repo, ctx) = (repo.as_ref(), ctx.as_ref());
    source::reconcile(repo, ctx, common, |old| async move {
        fetch(repo, ctx, &old).await.map_err(Failure::from)
    })
    .await
}

/// Fetches a new artifact if the remote moved; `None` when the stored one is current. With
/// `spec.verify`, a revision whose signature does not verify is never stored.
async fn fetch(
    repo: &GitRepository,
    ctx: &Context,
    old: &SourceStatus,
) -> Result<Option<Fetched>, FetchError> {
    let spec = &repo.spec;
    let ns = repo.namespace().unwrap_or_default();
    let key = store_key::<GitRepository>(&ns, &repo.name_any());
    let refused = spec.refused.refusals();
    if !refused.is_empty() {
        return Err(FetchError::Invalid(refused.join("; ")));
    }
    let timeout = match &spec.timeout {
        Some(t) => duration::field("timeout", t).map_err(FetchError::Invalid)?,
        None => Duration::from_secs(60),
    };
    let auth = match &spec.secret_ref {
        Some(r) => read_secret(ctx, &ns, &r.name, "spec.secretRef", Auth::from_secret_data)
            .await
            .map_err(FetchError::Secret)?,
        None => Auth::none(),
    };
    let r = spec.reference.clone().unwrap_or_default();
    let previous = source::previous(old, repo.metadata.generation);
    let got = git(
        ctx,
        GitFetch {
            namespace: &ns,
            key: key.clone(),
            url: spec.url.clone(),
            url_field: "spec.url",
            refs: Refs::Spec(GitRefSpec {
                branch: r.branch,
                tag: r.tag,
                semver: r.semver,
                name: r.name,
                commit: r.commit,
            }),
            access: Access { auth, timeout },
            timeout,
            ignore: spec.ignore.clone(),
            verify: spec
                .verify
                .as_ref()
                .map(|v| (verify_mode(v.mode), v.secret_ref.name.clone())),
            current: previous.map(|p| (p.revision.as_str(), p.digest.as_str())),
        },
    )
    .await?;
    Ok(got.map(|g| source::fetched(ctx, &key, g)))
}
