//! GitRepository reconciler: list the remote's refs, and fetch and store an artifact only
//! when the resolved commit differs from the one already stored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use skewer_appliers::wait::deadline_after;
use skewer_sources::reference::revision_commit;
use skewer_sources::{
    Access, Auth, GitError, GitRefSpec, Keyring, RefError, Resolved, Signed, Verified, VerifyMode,
};
use tracing::{Instrument, info};

use crate::api::conditions::{self, SOURCE_VERIFIED};
use crate::api::duration;
use crate::api::gitrepository::{ArtifactStatus, VerificationMode};
use crate::api::{GitRepository, GitRepositoryStatus};
use crate::artifacts::store_key;
use crate::runtime::{self, Context, Done, Error, Failure, Reason, Schedule, Session};

crate::reconciled!(GitRepository, GitRepositoryStatus);

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
    runtime::run(ctx, runtime::controller(api), reconcile).await;
}

async fn reconcile(repo: Arc<GitRepository>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = repo.namespace().ok_or(Error::NoNamespace)?;
    let name = repo.name_any();
    let generation = repo.metadata.generation;
    if repo.spec.suspend {
        info!(namespace = %ns, name = %name, "reconciliation is suspended");
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    let mut session = Session::begin(&ctx, repo.as_ref());
    let interval = match duration::interval("interval", &repo.spec.interval) {
        Ok(d) => d,
        Err(msg) => return session.finish(Err(Failure::invalid(msg)), None).await,
    };
    let key = store_key::<GitRepository>(&ns, &name);
    let span = tracing::info_span!("reconcile", kind = "GitRepository", namespace = %ns, object = %name, revision = tracing::field::Empty);
    let fetched = fetch(&repo, &ctx, &key, session.old())
        .instrument(span.clone())
        .await;
    if let Ok(Some(a)) = &fetched {
        span.record("revision", a.artifact.revision.as_str());
    }
    ctx.metrics
        .fetch_duration
        .observe(started.elapsed().as_secs_f64());
    let status = &mut session.status;
    if repo.spec.verify.is_none() {
        conditions::remove(&mut status.conditions, SOURCE_VERIFIED);
    }
    let result = match fetched {
        Ok(Some(Fetched { artifact, verified })) => {
            if !verified.is_empty() {
                let msg = verified
                    .iter()
                    .map(|v| {
                        format!(
                            "verified signature of {} by {} (key '{}')",
                            v.object, v.fingerprint, v.key
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                info!(namespace = %ns, name = %name, "{msg}");
                conditions::set(
                    &mut status.conditions,
                    SOURCE_VERIFIED,
                    true,
                    Reason::Succeeded.as_str(),
                    &msg,
                    generation,
                );
            }
            let previous = status.artifact.as_ref().map(|a| &a.revision);
            let changed = previous != Some(&artifact.revision);
            let done = stored(&artifact.revision, false);
            status.artifact = Some(artifact);
            Ok(Done {
                event: if changed {
                    Reason::NewArtifact
                } else {
                    Reason::Succeeded
                },
                ..done
            })
        }
        Ok(None) => {
            let revision = status.artifact.as_ref().map(|a| a.revision.as_str());
            Ok(stored(revision.unwrap_or_default(), true))
        }
        Err(e) => {
            if e.reason() == Reason::VerificationError {
                conditions::set(
                    &mut status.conditions,
                    SOURCE_VERIFIED,
                    false,
                    e.reason().as_str(),
                    &e.to_string(),
                    generation,
                );
            }
            Err(Failure::from(e))
        }
    };
    // A source has no retry interval of its own (as in Flux): it retries on its interval.
    let schedule = Schedule {
        interval,
        retry: interval,
    };
    session.finish(result, Some(schedule)).await
}

fn stored(revision: &str, noop: bool) -> Done {
    Done {
        reason: Reason::Succeeded,
        message: format!("stored artifact for revision '{revision}'"),
        event: Reason::Succeeded,
        noop,
    }
}

/// A newly stored artifact, and whose signatures it passed.
struct Fetched {
    artifact: ArtifactStatus,
    verified: Vec<Verified>,
}

/// Fetches a new artifact if the remote moved; `None` when the stored one is current. With
/// `spec.verify`, a revision whose signature does not verify is never stored. The verification
/// keys are read only when there is a new revision to check.
async fn fetch(
    repo: &GitRepository,
    ctx: &Context,
    key: &str,
    old: &GitRepositoryStatus,
) -> Result<Option<Fetched>, FetchError> {
    let spec = &repo.spec;
    let settings = &ctx.settings;
    super::source_url::check(&spec.url, &settings.data_dir, settings.local_sources)
        .map_err(FetchError::Invalid)?;
    let timeout = match &spec.timeout {
        Some(t) => duration::field("timeout", t).map_err(FetchError::Invalid)?,
        None => Duration::from_secs(60),
    };
    let deadline = deadline_after(timeout);
    let ns = repo.namespace().unwrap_or_default();
    let auth = match &spec.secret_ref {
        Some(r) => read_secret(ctx, &ns, &r.name, "spec.secretRef", Auth::from_secret_data).await?,
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
    // A changed spec (say, new ignore rules) rebuilds the artifact even if the commit is the same.
    let previous = old
        .artifact
        .as_ref()
        .filter(|_| old.observed_generation == repo.metadata.generation);
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
            .await?;
            Some((objects, keys))
        }
        None => None,
    };
    let store = ctx.store.clone();
    let ignore = spec.ignore.clone();
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
            let artifact = ArtifactStatus {
                revision: stored.revision,
                digest: stored.digest,
                size: stored.size,
                path: stored.path.display().to_string(),
                last_update_time: jiff::Timestamp::now()
                    .round(jiff::Unit::Second)
                    .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
                    .to_string(),
            };
            Ok(Some(Fetched { artifact, verified }))
        },
    )
    .await
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

/// Secret `name`, named by the spec `field` that refers to it, read by `parse`. Its absence or
/// a bad key is a failure retried on the interval (the Secret may be created or fixed later).
async fn read_secret<T, E: std::fmt::Display>(
    ctx: &Context,
    ns: &str,
    name: &str,
    field: &str,
    parse: impl FnOnce(&BTreeMap<String, Vec<u8>>) -> Result<T, E>,
) -> Result<T, FetchError> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| FetchError::Secret(format!("{field}: cannot read secret '{ns}/{name}': {e}")))?
        .ok_or_else(|| FetchError::Secret(format!("{field}: secret '{ns}/{name}' not found")))?;
    let data = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    parse(&data).map_err(|e| FetchError::Secret(format!("secret '{ns}/{name}': {e}")))
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
