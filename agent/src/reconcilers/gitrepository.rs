//! GitRepository reconciler: list the remote's refs, and fetch and store an artifact only
//! when the resolved commit differs from the one already stored.

use crate::api::{COMMIT_AUTHOR, COMMIT_MESSAGE};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use skewer_appliers::wait::deadline_after;
use skewer_sources::reference::revision_commit;
use skewer_sources::{
    Access, Auth, GitError, GitRefSpec, Keyring, RefError, Resolved, Signed, Verified, VerifyMode,
};

use super::source::{self, Common, Fetched, read_secret};
use crate::api::duration;
use crate::api::gitrepository::VerificationMode;
use crate::api::{ArtifactStatus, GitRepository, SourceStatus};
use crate::artifacts::store_key;
use crate::runtime::context::Context;
use crate::runtime::{self, Error, Failure, Reason};

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{0}")]
    Git(#[from] GitError),
    #[error("{0}")]
    Ref(#[from] RefError),
    #[error("{0}")]
    Store(#[from] skewer_sources::StoreError),
    #[error("fetch timed out after {0:?}")]
    Timeout(Duration),
    /// Only a spec change can fix it.
    #[error("{0}")]
    Invalid(String),
    #[error("fetch task failed: {0}")]
    Task(String),
    #[error("{0}")]
    Secret(String),
    #[error("{0}")]
    Verify(String),
}

impl FetchError {
    fn reason(&self) -> Reason {
        match self {
            FetchError::Invalid(_) => Reason::InvalidSpec,
            FetchError::Store(_) => Reason::StorageOperationFailed,
            FetchError::Verify(_) | FetchError::Git(GitError::NotAnnotated { .. }) => {
                Reason::VerificationError
            }
            FetchError::Secret(_) => Reason::AuthenticationFailed,
            FetchError::Git(e) if e.is_authentication() => Reason::AuthenticationFailed,
            _ => Reason::GitOperationFailed,
        }
    }
}

impl From<FetchError> for Failure {
    fn from(e: FetchError) -> Self {
        Failure::new(e.reason(), e.to_string())
    }
}

fn verify_mode(mode: VerificationMode) -> VerifyMode {
    match mode {
        VerificationMode::Head => VerifyMode::Head,
        VerificationMode::Tag => VerifyMode::Tag,
        VerificationMode::TagAndHead => VerifyMode::TagAndHead,
    }
}

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<GitRepository> = runtime::scoped(&ctx.client, namespace.as_deref());
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
/// `spec.verify`, a revision whose signature does not verify is never stored. The verification
/// keys are read only when there is a new revision to check.
async fn fetch(
    repo: &GitRepository,
    ctx: &Context,
    old: &SourceStatus,
) -> Result<Option<Fetched>, FetchError> {
    let spec = &repo.spec;
    let ns = repo.namespace().unwrap_or_default();
    let key = &store_key::<GitRepository>(&ns, &repo.name_any());
    let settings = &ctx.settings;
    super::source_url::check(&spec.url, &settings.data_dir, settings.local_sources)
        .map_err(FetchError::Invalid)?;
    let timeout = match &spec.timeout {
        Some(t) => duration::field("timeout", t).map_err(FetchError::Invalid)?,
        None => Duration::from_secs(60),
    };
    let deadline = deadline_after(timeout);
    let auth = match &spec.secret_ref {
        Some(r) => read_secret(ctx, &ns, &r.name, "spec.secretRef", Auth::from_secret_data)
            .await
            .map_err(FetchError::Secret)?,
        None => Auth::none(),
    };
    let access = Access { auth, timeout };
    let r = spec.reference.clone().unwrap_or_default();
    let refspec = GitRefSpec {
        branch: r.branch,
        tag: r.tag,
        semver: r.semver,
        name: r.name,
        commit: r.commit,
    };
    let (git, url, k) = (ctx.git.clone(), spec.url.clone(), key.to_string());
    let resolved = blocking(deadline, timeout, {
        let (git, url, k, access) = (git.clone(), url.clone(), k.clone(), access.clone());
        move || -> Result<Resolved, FetchError> {
            if refspec.commit.is_some() && refspec.branch.is_none() {
                Ok(refspec.resolve(&[])?)
            } else {
                Ok(refspec.resolve(&git.list_remote(&k, &url, &access)?)?)
            }
        }
    })
    .await?;
    let previous = source::previous(old, repo.metadata.generation);
    if is_current(previous, &resolved, |digest| {
        ctx.store.path_of(key, digest).exists()
    }) {
        return Ok(None);
    }
    let verify = match &spec.verify {
        Some(v) => {
            let objects = verify_mode(v.mode).objects(&resolved).ok_or_else(|| {
                FetchError::Invalid(
                    "spec.verify.mode: Tag verification needs spec.ref.tag or spec.ref.semver"
                        .into(),
                )
            })?;
            let keys = read_secret(
                ctx,
                &ns,
                &v.secret_ref.name,
                "spec.verify.secretRef",
                Keyring::from_secret_data,
            )
            .await
            .map_err(FetchError::Secret)?;
            Some((objects, keys))
        }
        None => None,
    };
    let store = ctx.store.clone();
    let ignore = spec.ignore.clone();
    let served = ctx.settings.storage_url.clone();
    blocking(
        deadline,
        timeout,
        move || -> Result<Option<Fetched>, FetchError> {
            let files = git.fetch(&k, &url, &resolved, &access)?;
            let verified = match &verify {
                Some((objects, keys)) => check_signatures(&git, &k, objects, keys)?,
                None => Vec::new(),
            };
            let files = skewer_sources::ignore::filter(files, ignore.as_deref());
            let stored = store.put(&k, &resolved.revision, &files)?;
            store.gc(&k, &stored.digest)?;
            // Provenance: who made the commit and why, for `skewer why` (one read of an object
            // just fetched; a failure only leaves it out).
            let metadata = git
                .commit_info(&k, &resolved.commit)
                .map(|c| commit_metadata(&c))
                .unwrap_or_default();
            Ok(Some(Fetched {
                artifact: source::artifact_status(stored, &k, metadata, served.as_deref()),
                verified: verified_message(&verified),
            }))
        },
    )
    .await
}

/// The artifact metadata recording a commit's author and message (cut to 1 KiB).
pub fn commit_metadata(c: &skewer_sources::git::CommitInfo) -> BTreeMap<String, String> {
    let mut message = c.message.clone();
    if message.len() > 1024 {
        let mut end = 1024;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    BTreeMap::from([
        (COMMIT_AUTHOR.to_string(), c.author.clone()),
        (COMMIT_MESSAGE.to_string(), message),
    ])
}

/// Runs blocking Git work on the blocking pool, failing at `deadline` (the end of the fetch's
/// `timeout`, shared by every step of one fetch).
async fn blocking<T: Send + 'static>(
    deadline: tokio::time::Instant,
    timeout: Duration,
    work: impl FnOnce() -> Result<T, FetchError> + Send + 'static,
) -> Result<T, FetchError> {
    match tokio::time::timeout_at(deadline, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(r)) => r,
        Ok(Err(join)) => Err(FetchError::Task(join.to_string())),
        Err(_) => Err(FetchError::Timeout(timeout)),
    }
}

/// Checks the signatures of the fetched `objects`.
fn check_signatures(
    git: &skewer_sources::GitFetcher,
    key: &str,
    objects: &[Signed],
    keys: &Keyring,
) -> Result<Vec<Verified>, FetchError> {
    objects
        .iter()
        .map(|object| {
            let signed = git.signed(key, object)?;
            keys.verify(
                &object.to_string(),
                signed.signature.as_deref(),
                &signed.payload,
            )
            .map_err(|e| FetchError::Verify(e.to_string()))
        })
        .collect()
}

/// What passed verification, for `SourceVerified` (`None` when nothing was checked).
fn verified_message(verified: &[Verified]) -> Option<String> {
    if verified.is_empty() {
        return None;
    }
    let each = verified.iter().map(|v| {
        format!(
            "verified signature of {} by {} (key '{}')",
            v.object, v.fingerprint, v.key
        )
    });
    Some(each.collect::<Vec<_>>().join("; "))
}

/// Whether the stored artifact already is the resolved revision (so nothing is fetched).
fn is_current(
    previous: Option<&ArtifactStatus>,
    resolved: &Resolved,
    stored: impl Fn(&str) -> bool,
) -> bool {
    previous.is_some_and(|prev| {
        prev.revision == resolved.revision
            && revision_commit(&prev.revision) == Some(resolved.commit.as_str())
            && stored(&prev.digest)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(revision: &str, commit: &str) -> Resolved {
        Resolved {
            fetch_ref: Some("refs/heads/main".into()),
            commit: commit.into(),
            revision: revision.into(),
        }
    }

    #[test]
    fn fetch_only_when_the_ref_moved_or_the_artifact_is_gone() {
        let prev = ArtifactStatus {
            revision: "main@sha1:aa".into(),
            digest: "sha256:d".into(),
            ..Default::default()
        };
        assert!(is_current(
            Some(&prev),
            &resolved("main@sha1:aa", "aa"),
            |_| true
        ));
        assert!(
            !is_current(Some(&prev), &resolved("main@sha1:bb", "bb"), |_| true),
            "ref moved"
        );
        assert!(
            !is_current(Some(&prev), &resolved("main@sha1:aa", "aa"), |_| false),
            "artifact lost"
        );
        assert!(
            !is_current(Some(&prev), &resolved("dev@sha1:aa", "aa"), |_| true),
            "other ref, same commit"
        );
        assert!(!is_current(None, &resolved("main@sha1:aa", "aa"), |_| true));
    }
}
