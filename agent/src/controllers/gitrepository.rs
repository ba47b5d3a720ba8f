//! GitRepository reconciler: list the remote's refs, and fetch and store an artifact only
//! when the resolved commit differs from the one already stored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::json;
use skewer_sources::reference::revision_commit;
use skewer_sources::{
    Access, Auth, GitError, GitRefSpec, Keyring, RefError, Resolved, Signed, Verified, VerifyMode,
};
use tracing::{info, warn};

use super::{Context, Error, duration};
use crate::api::conditions::{self, READY, SOURCE_VERIFIED};
use crate::api::gitrepository::ArtifactStatus;
use crate::api::{GitRepository, GitRepositoryStatus, RECONCILE_REQUESTED_AT};

pub fn artifact_key(namespace: &str, name: &str) -> String {
    format!("gitrepository/{namespace}/{name}")
}

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
    fn reason(&self) -> &'static str {
        match self {
            FetchError::Invalid(_) => "InvalidSpec",
            FetchError::Store(_) => "StorageOperationFailed",
            FetchError::Verify(_) | FetchError::Git(GitError::NotAnnotated { .. }) => {
                "VerificationError"
            }
            FetchError::Secret(_)
            | FetchError::Git(
                GitError::Credentials(_)
                | GitError::AuthRequired { .. }
                | GitError::AuthFailed { .. }
                | GitError::HostKey { .. }
                | GitError::Tls { .. },
            ) => "AuthenticationFailed",
            _ => "GitOperationFailed",
        }
    }
}

pub async fn run(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<GitRepository> = super::scoped(&ctx.client, namespace.as_deref());
    super::controller(api)
        .shutdown_on_signal()
        .with_config(super::controller_config(&ctx))
        .run(reconcile, error_policy, ctx)
        .for_each(|r| super::log_outcome("GitRepository", r))
        .await;
}

fn error_policy(_: Arc<GitRepository>, _: &Error, _: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(repo: Arc<GitRepository>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = repo.namespace().ok_or(Error::NoNamespace)?;
    let name = repo.name_any();
    let generation = repo.metadata.generation;
    let old = repo.status.clone().unwrap_or_default();
    let mut status = old.clone();
    if repo.spec.suspend {
        info!(namespace = %ns, name = %name, "reconciliation is suspended");
        return Ok(Action::await_change());
    }
    status.last_handled_reconcile_at = repo.annotations().get(RECONCILE_REQUESTED_AT).cloned();
    let interval = match duration("interval", &repo.spec.interval) {
        Ok(d) => d,
        Err(msg) => {
            conditions::mark_stalled(&mut status.conditions, "InvalidSpec", &msg, generation);
            status.observed_generation = generation;
            write_status(&ctx.client, &ns, &name, &status).await?;
            return Ok(Action::await_change());
        }
    };
    let key = artifact_key(&ns, &name);
    let mut event: Option<(bool, &'static str, String)> = None;
    let started = std::time::Instant::now();
    let span = tracing::info_span!("reconcile", kind = "GitRepository", namespace = %ns, object = %name, revision = tracing::field::Empty);
    let fetched =
        tracing::Instrument::instrument(fetch(&repo, &ctx, &key, &old), span.clone()).await;
    if let Ok(Some(a)) = &fetched {
        span.record("revision", a.artifact.revision.as_str());
    }
    ctx.metrics
        .fetch_duration
        .observe(started.elapsed().as_secs_f64());
    let label = match &fetched {
        Ok(Some(_)) => "success".to_string(),
        Ok(None) => "noop".to_string(),
        Err(e) => e.reason().to_string(),
    };
    ctx.metrics
        .observe_reconcile("GitRepository", label, started.elapsed());
    if repo.spec.verify.is_none() {
        conditions::remove(&mut status.conditions, SOURCE_VERIFIED);
    }
    match fetched {
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
                    "Succeeded",
                    &msg,
                    generation,
                );
            }
            let msg = format!("stored artifact for revision '{}'", artifact.revision);
            info!(namespace = %ns, name = %name, revision = %artifact.revision, "{msg}");
            conditions::mark_ready(&mut status.conditions, "Succeeded", &msg, generation);
            let changed = old.artifact.as_ref().map(|a| &a.revision) != Some(&artifact.revision);
            status.artifact = Some(artifact);
            if changed {
                event = Some((false, "NewArtifact", msg));
            }
        }
        Ok(None) => {
            let revision = old
                .artifact
                .as_ref()
                .map(|a| a.revision.clone())
                .unwrap_or_default();
            let msg = format!("stored artifact for revision '{revision}'");
            conditions::mark_ready(&mut status.conditions, "Succeeded", &msg, generation);
        }
        Err(e) => {
            let msg = e.to_string();
            warn!(namespace = %ns, name = %name, error = %msg, "fetch failed");
            let was = conditions::find(&old.conditions, READY).map(|c| c.message.clone());
            if e.reason() == "VerificationError" {
                conditions::set(
                    &mut status.conditions,
                    SOURCE_VERIFIED,
                    false,
                    e.reason(),
                    &msg,
                    generation,
                );
            }
            if matches!(e, FetchError::Invalid(_)) {
                conditions::mark_stalled(&mut status.conditions, e.reason(), &msg, generation);
            } else {
                conditions::mark_failed(&mut status.conditions, e.reason(), &msg, generation);
            }
            if was.as_deref() != Some(msg.as_str()) {
                event = Some((true, e.reason(), msg));
            }
        }
    }
    status.observed_generation = generation;
    if status != old {
        write_status(&ctx.client, &ns, &name, &status).await?;
    }
    // After the status write, so that an event's round trip never delays the artifact.
    if let Some((warning, reason, note)) = event {
        ctx.event(repo.as_ref(), warning, reason, note).await;
    }
    Ok(Action::requeue(interval))
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
    let timeout = match &spec.timeout {
        Some(t) => duration("timeout", t).map_err(FetchError::Invalid)?,
        None => Duration::from_secs(60),
    };
    let deadline = tokio::time::Instant::now() + timeout;
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
            let objects = VerifyMode::from(v.mode).objects(&resolved).ok_or_else(|| {
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

async fn write_status(
    client: &Client,
    ns: &str,
    name: &str,
    status: &GitRepositoryStatus,
) -> Result<(), Error> {
    let api: Api<GitRepository> = Api::namespaced(client.clone(), ns);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await?;
    Ok(())
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
