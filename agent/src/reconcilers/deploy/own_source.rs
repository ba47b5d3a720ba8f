//! An Application's own source, fetched through the entries it shares with every Application
//! naming the same repository and revision ([`crate::appsource::AppSources`]): resolved when the
//! entry is older than the interval, fetched only when the revision moved.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use skewer_sources::repocreds::{self, CredSecret};
use skewer_sources::{Access, Auth, GitRefSpec, Resolved};

use crate::appsource::{EntryKey, Wanted};
use crate::artifacts::ArtifactRef;
use crate::runtime::context::Context;
use crate::runtime::{Failure, Reason};

/// The store key of an entry's artifacts: `appsource/<hash>`.
fn store_key((wanted, creds): &EntryKey) -> String {
    let digest = Sha256::digest(format!(
        "{}\n{}\n{}",
        wanted.url,
        wanted.target_revision,
        creds.as_deref().unwrap_or_default()
    ));
    format!("appsource/{}", &hex::encode(digest)[..20])
}

/// The artifact of `wanted`, resolved within `max_age` and, when given, no earlier than
/// `resolved_after` (a refresh, or a new Application: it must not start from a resolution
/// older than itself); fetched if its revision moved.
pub async fn artifact(
    ctx: &Context,
    namespace: &str,
    wanted: &Wanted,
    max_age: Duration,
    resolved_after: Option<jiff::Timestamp>,
) -> Result<ArtifactRef, Failure> {
    let secret = ctx.app_sources.credentials(namespace, &wanted.url);
    let entry_key = (wanted.clone(), secret.as_ref().map(|s| s.name.clone()));
    let entry = ctx.app_sources.entry(&entry_key);
    let mut entry = entry.lock().await;
    if let Some((artifact, at, wall)) = &entry.current
        && resolved_after.is_none_or(|after| *wall >= after)
        && at.elapsed() < max_age
        && ctx.store.path_of(&artifact.key, &artifact.digest).exists()
    {
        return Ok(artifact.clone());
    }
    // When the remote was asked: what waited on the lock meanwhile may take the answer.
    let asked = (Instant::now(), jiff::Timestamp::now());
    let key = store_key(&entry_key);
    let current = entry
        .current
        .as_ref()
        .map(|(a, _, _)| a)
        .filter(|a| ctx.store.path_of(&a.key, &a.digest).exists());
    let fetched = if wanted.url.starts_with("oci://") {
        fetch_oci(ctx, &key, wanted, secret.as_ref(), current).await?
    } else {
        fetch_git(ctx, &key, wanted, secret.as_ref(), current).await?
    };
    let artifact = match fetched {
        Some((revision, digest)) => {
            entry.fetches += 1;
            tracing::info!(url = %wanted.url, revision = %revision, fetches = entry.fetches, "fetched application source");
            ArtifactRef {
                source: format!("{} at {}", wanted.url, wanted.target_revision),
                key,
                revision,
                digest,
            }
        }
        // The revision did not move: the stored artifact stands.
        None => match current {
            Some(a) => a.clone(),
            None => {
                let why = "the revision did not move, yet no artifact of it is stored";
                return Err(Failure::new(Reason::ArtifactFailed, why.to_string()));
            }
        },
    };
    entry.current = Some((artifact.clone(), asked.0, asked.1));
    Ok(artifact)
}

/// Stores `files` as revision `revision` under `key` (old artifacts collected), off the async
/// runtime's threads' way; returns the digest.
fn store(
    store: &skewer_sources::Store,
    key: &str,
    revision: &str,
    files: &[skewer_sources::File],
) -> Result<String, Failure> {
    let failed =
        |e: skewer_sources::StoreError| Failure::new(Reason::StorageOperationFailed, e.to_string());
    let stored = store.put(key, revision, files).map_err(failed)?;
    store.gc(key, &stored.digest).map_err(failed)?;
    Ok(stored.digest)
}

/// Lists the Git remote's refs and, when `targetRevision` resolves to another revision than
/// `current`'s, fetches and stores it: `(revision, digest)`, or `None` when nothing moved.
async fn fetch_git(
    ctx: &Context,
    key: &str,
    wanted: &Wanted,
    secret: Option<&CredSecret>,
    current: Option<&ArtifactRef>,
) -> Result<Option<(String, String)>, Failure> {
    let auth = match secret {
        Some(s) => repocreds::auth(s)
            .map_err(|e| Failure::new(Reason::AuthenticationFailed, e.to_string()))?,
        None => Auth::none(),
    };
    auth.check_scheme(&wanted.url).map_err(|e| {
        let from = secret.map_or(String::new(), |s| format!(" (Secret {})", s.name));
        Failure::new(
            Reason::AuthenticationFailed,
            format!("spec.source.repoURL: {e}{from}"),
        )
    })?;
    let settings = &ctx.settings;
    crate::reconcilers::source_url::check(&wanted.url, &settings.data_dir, settings.local_sources)
        .map_err(|m| Failure::invalid(format!("spec.source.repoURL: {m}")))?;
    let access = Access {
        auth,
        timeout: Duration::from_secs(60),
    };
    let failed = |m: String| Failure::new(Reason::GitOperationFailed, m);
    let (git, url, target, k) = (
        ctx.git.clone(),
        wanted.url.clone(),
        wanted.target_revision.clone(),
        key.to_string(),
    );
    let acc = access.clone();
    let resolved = tokio::task::spawn_blocking(move || -> Result<Resolved, Failure> {
        let remote = git
            .list_remote(&k, &url, &acc)
            .map_err(|e| failed(e.to_string()))?;
        GitRefSpec::from_target_revision(&target, &remote)
            .and_then(|spec| spec.resolve(&remote))
            .map_err(|e| Failure::invalid(format!("spec.source.targetRevision: {e}")))
    })
    .await
    .map_err(|e| failed(e.to_string()))??;
    if current.is_some_and(|a| a.revision == resolved.revision) {
        return Ok(None);
    }
    let (git, st, url, k) = (
        ctx.git.clone(),
        ctx.store.clone(),
        wanted.url.clone(),
        key.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        let files = git
            .fetch(&k, &url, &resolved, &access)
            .map_err(|e| failed(e.to_string()))?;
        let digest = store(&st, &k, &resolved.revision, &files)?;
        Ok(Some((resolved.revision, digest)))
    })
    .await
    .map_err(|e| failed(e.to_string()))?
}

/// Resolves `targetRevision` in the OCI repository (a tag, a `sha256:` digest, or a version
/// range over the tags; one HEAD request for a tag) and, when it names another manifest than
/// `current`'s, pulls its first layer as untrusted input and stores its files.
async fn fetch_oci(
    ctx: &Context,
    key: &str,
    wanted: &Wanted,
    secret: Option<&CredSecret>,
    current: Option<&ArtifactRef>,
) -> Result<Option<(String, String)>, Failure> {
    use skewer_sources::oci::{self, OciRef, registry};
    let failed = |m: String| Failure::new(Reason::OCIArtifactPullFailed, m);
    let repo = registry::Repository::parse(&wanted.url)
        .map_err(|e| Failure::invalid(format!("spec.source.repoURL: {e}")))?;
    let (login, insecure) = match secret {
        Some(s) => repocreds::oci_access(s)
            .map_err(|e| Failure::new(Reason::AuthenticationFailed, e.to_string()))?,
        None => (None, false),
    };
    let client = registry::Registry::new(&registry::Access { login, insecure })
        .map_err(|e| failed(e.to_string()))?;
    let target = wanted.target_revision.trim();
    let reference = if oci::is_digest(target) {
        OciRef {
            digest: Some(target.into()),
            ..Default::default()
        }
    } else if target.bytes().any(|b| b"*^~<>=xX ".contains(&b)) {
        OciRef {
            semver: Some(target.into()),
            ..Default::default()
        }
    } else {
        OciRef {
            tag: Some(if target == "HEAD" || target.is_empty() {
                "latest".into()
            } else {
                target.into()
            }),
            ..Default::default()
        }
    };
    let resolved = oci::resolve(&client, &repo, &reference)
        .await
        .map_err(|e| failed(format!("spec.source.targetRevision '{target}': {e}")))?;
    if current.is_some_and(|a| a.revision == resolved.revision) {
        return Ok(None);
    }
    let pulled = oci::pull(
        &client,
        &repo,
        &resolved.digest,
        None,
        skewer_sources::untrusted::Limits::default(),
    )
    .await
    .map_err(|e| Failure::new(Reason::OCIArtifactLayerOperationFailed, e.to_string()))?;
    let (st, k, revision) = (ctx.store.clone(), key.to_string(), resolved.revision);
    tokio::task::spawn_blocking(move || {
        let digest = store(&st, &k, &revision, &pulled.files)?;
        Ok(Some((revision, digest)))
    })
    .await
    .map_err(|e| Failure::new(Reason::StorageOperationFailed, e.to_string()))?
}
