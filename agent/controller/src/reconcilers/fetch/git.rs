//! Git, for a GitRepository and for an Application's own repository alike: list the remote's
//! refs, resolve the wanted revision, and only when it is not the stored one fetch it, check
//! its signatures, drop ignored files, store it and read its commit's author and message, all
//! within one deadline.

use std::collections::BTreeMap;
use std::time::Duration;

use skewer_appliers::wait::deadline_after;
use skewer_sources::reference::revision_commit;
use skewer_sources::{
    Access, GitError, GitRefSpec, Keyring, RefError, Resolved, Signed, Verified, VerifyMode,
};

use super::Got;
use crate::api::{COMMIT_AUTHOR, COMMIT_MESSAGE};
use crate::reconcilers::source::read_secret;
use crate::reconcilers::source_url;
use crate::runtime::context::Context;
use crate::runtime::{Failure, Reason};

/// Which revision is wanted.
pub enum Refs {
    /// Flux's `spec.ref`.
    Spec(GitRefSpec),
    /// Argo CD's `targetRevision` (a branch, tag, commit or version range), read against the
    /// remote's refs.
    TargetRevision(String),
}

/// One Git fetch.
pub struct GitFetch<'a> {
    /// Where the Secrets it reads are.
    pub namespace: &'a str,
    /// Its place in the store (and in the Git cache).
    pub key: String,
    pub url: String,
    /// The field that gave `url`, for messages.
    pub url_field: &'static str,
    pub refs: Refs,
    pub access: Access,
    /// Bound on the whole fetch: listing, fetching, verifying, storing.
    pub timeout: Duration,
    /// `.sourceignore`-style patterns to leave out of the artifact.
    pub ignore: Option<String>,
    /// Signatures to check, and the Secret of the keys to check them with (read only when a
    /// new revision is to be fetched).
    pub verify: Option<(VerifyMode, String)>,
    /// The stored artifact: revision and digest.
    pub current: Option<(&'a str, &'a str)>,
}

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
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
    pub fn reason(&self) -> Reason {
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

/// Fetches `f` if the remote moved; `None` when the stored artifact is current. A revision
/// whose signatures do not verify is never stored.
pub async fn git(ctx: &Context, f: GitFetch<'_>) -> Result<Option<Got>, FetchError> {
    let settings = &ctx.settings;
    source_url::check(&f.url, &settings.data_dir, settings.local_sources)
        .map_err(|m| FetchError::Invalid(format!("{}: {m}", f.url_field)))?;
    let (timeout, deadline) = (f.timeout, deadline_after(f.timeout));
    let (git, url, k) = (ctx.git.clone(), f.url.clone(), f.key.clone());
    let resolved = blocking(deadline, timeout, {
        let (git, url, k, access) = (git.clone(), url.clone(), k.clone(), f.access.clone());
        let refs = f.refs;
        move || -> Result<Resolved, FetchError> {
            match refs {
                Refs::Spec(spec) if spec.commit.is_some() && spec.branch.is_none() => {
                    Ok(spec.resolve(&[])?)
                }
                Refs::Spec(spec) => Ok(spec.resolve(&git.list_remote(&k, &url, &access)?)?),
                Refs::TargetRevision(target) => {
                    let remote = git.list_remote(&k, &url, &access)?;
                    GitRefSpec::from_target_revision(&target, &remote)
                        .and_then(|spec| spec.resolve(&remote))
                        .map_err(|e| {
                            FetchError::Invalid(format!("spec.source.targetRevision: {e}"))
                        })
                }
            }
        }
    })
    .await?;
    if is_current(f.current, &resolved, |digest| {
        ctx.store.path_of(&f.key, digest).exists()
    }) {
        return Ok(None);
    }
    let verify = match f.verify {
        Some((mode, secret)) => {
            let objects = mode.objects(&resolved).ok_or_else(|| {
                FetchError::Invalid(
                    "spec.verify.mode: Tag verification needs spec.ref.tag or spec.ref.semver"
                        .into(),
                )
            })?;
            let keys = read_secret(
                ctx,
                f.namespace,
                &secret,
                "spec.verify.secretRef",
                Keyring::from_secret_data,
            )
            .await
            .map_err(FetchError::Secret)?;
            Some((objects, keys))
        }
        None => None,
    };
    let (store, ignore, access) = (ctx.store.clone(), f.ignore, f.access);
    blocking(
        deadline,
        timeout,
        move || -> Result<Option<Got>, FetchError> {
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
            Ok(Some(Got {
                revision: resolved.revision,
                stored,
                metadata,
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

/// Whether the stored artifact (`current`: revision, digest) already is the resolved commit,
/// and is still in the store (`stored`), so that nothing is fetched.
fn is_current(
    current: Option<(&str, &str)>,
    resolved: &Resolved,
    stored: impl Fn(&str) -> bool,
) -> bool {
    current.is_some_and(|(revision, digest)| {
        revision == resolved.revision
            && revision_commit(revision) == Some(resolved.commit.as_str())
            && stored(digest)
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
        let prev = ("main@sha1:aa", "sha256:d");
        assert!(is_current(
            Some(prev),
            &resolved("main@sha1:aa", "aa"),
            |_| true
        ));
        assert!(
            !is_current(Some(prev), &resolved("main@sha1:bb", "bb"), |_| true),
            "ref moved"
        );
        assert!(
            !is_current(Some(prev), &resolved("main@sha1:aa", "aa"), |_| false),
            "artifact lost"
        );
        assert!(
            !is_current(Some(prev), &resolved("dev@sha1:aa", "aa"), |_| true),
            "other ref, same commit"
        );
        assert!(!is_current(None, &resolved("main@sha1:aa", "aa"), |_| true));
    }
}
