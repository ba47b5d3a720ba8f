//! The sources Applications own. An Application names a repository and a revision, not a
//! source object; Applications naming the same pair share one entry here, so twenty of them
//! cost one ref listing and one fetch. An entry is re-resolved when it is older than the
//! Application's interval (or a refresh is asked for); it fetches only when the revision
//! moved, and stores the artifact in the same store as GitRepositories.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use skewer_sources::{Access, Auth, GitRefSpec, Resolved};

use crate::artifacts::ArtifactRef;
use crate::runtime::{Context, Failure, Reason};

/// What an Application fetches: a repository and a revision as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Wanted {
    pub url: String,
    pub target_revision: String,
}

impl Wanted {
    /// The store key of this pair's artifacts: `appsource/<hash>`.
    fn key(&self) -> String {
        let digest = Sha256::digest(format!("{}\n{}", self.url, self.target_revision));
        format!("appsource/{}", &hex::encode(digest)[..20])
    }
}

#[derive(Default)]
struct Entry {
    current: Option<(ArtifactRef, Instant)>,
    /// Fetches made for this entry, for the log and tests.
    fetches: u64,
}

/// The shared entries, one lock per repository and revision (held while it fetches, so that
/// the others wait for that fetch instead of starting their own).
#[derive(Default)]
pub struct AppSources {
    entries: Mutex<HashMap<Wanted, Arc<tokio::sync::Mutex<Entry>>>>,
}

impl AppSources {
    fn entry(&self, wanted: &Wanted) -> Arc<tokio::sync::Mutex<Entry>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.entry(wanted.clone()).or_default().clone()
    }

    /// Forgets entries no Application names any more.
    pub fn retain(&self, named: &[Wanted]) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|w, _| named.contains(w));
    }
}

/// The artifact of `wanted`, resolved within `max_age` (unless `refresh`), fetched if its
/// revision moved.
pub async fn artifact(
    ctx: &Context,
    wanted: &Wanted,
    max_age: Duration,
    refresh: bool,
) -> Result<ArtifactRef, Failure> {
    let entry = ctx.app_sources.entry(wanted);
    let mut entry = entry.lock().await;
    if let Some((artifact, at)) = &entry.current
        && !refresh
        && at.elapsed() < max_age
        && ctx.store.path_of(&artifact.key, &artifact.digest).exists()
    {
        return Ok(artifact.clone());
    }
    let settings = &ctx.settings;
    crate::reconcilers::source_url::check(&wanted.url, &settings.data_dir, settings.local_sources)
        .map_err(|m| Failure::invalid(format!("spec.source.repoURL: {m}")))?;
    let key = wanted.key();
    let access = Access {
        auth: Auth::none(),
        timeout: Duration::from_secs(60),
    };
    let failed = |m: String| Failure::new(Reason::GitOperationFailed, m);
    let (git, url, target, k) = (
        ctx.git.clone(),
        wanted.url.clone(),
        wanted.target_revision.clone(),
        key.clone(),
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
    if let Some((artifact, _)) = &entry.current
        && artifact.revision == resolved.revision
        && ctx.store.path_of(&artifact.key, &artifact.digest).exists()
    {
        let artifact = artifact.clone();
        entry.current = Some((artifact.clone(), Instant::now()));
        return Ok(artifact);
    }
    let (git, store, url) = (ctx.git.clone(), ctx.store.clone(), wanted.url.clone());
    let k = key.clone();
    let revision = resolved.revision.clone();
    let stored = tokio::task::spawn_blocking(move || -> Result<_, Failure> {
        let files = git
            .fetch(&k, &url, &resolved, &access)
            .map_err(|e| failed(e.to_string()))?;
        let stored = store
            .put(&k, &resolved.revision, &files)
            .map_err(|e| Failure::new(Reason::StorageOperationFailed, e.to_string()))?;
        store
            .gc(&k, &stored.digest)
            .map_err(|e| Failure::new(Reason::StorageOperationFailed, e.to_string()))?;
        Ok(stored)
    })
    .await
    .map_err(|e| failed(e.to_string()))??;
    entry.fetches += 1;
    tracing::info!(url = %wanted.url, revision = %revision, fetches = entry.fetches, "fetched application source");
    let artifact = ArtifactRef {
        source: format!("{} at {}", wanted.url, wanted.target_revision),
        key,
        revision,
        digest: stored.digest,
    };
    entry.current = Some((artifact.clone(), Instant::now()));
    Ok(artifact)
}
