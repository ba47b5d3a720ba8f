//! The sources Applications own. An Application names a repository and a revision, not a
//! source object; Applications naming the same pair share one entry here, so twenty of them
//! cost one ref listing and one fetch. An entry is re-resolved when it is older than the
//! Application's interval (or a refresh is asked for); it fetches only when the revision
//! moved, and stores the artifact in the same store as GitRepositories.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use sha2::{Digest, Sha256};
use skewer_sources::repocreds::{self, CredSecret, Kind};
use skewer_sources::{Access, Auth, GitRefSpec, Resolved};

use crate::artifacts::ArtifactRef;
use crate::runtime::{Context, Failure, Reason};

/// What an Application fetches: a repository and a revision as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Wanted {
    pub url: String,
    pub target_revision: String,
}

/// An entry: what is fetched, and with which credentials (`namespace/name@resourceVersion` of
/// their Secret): Applications share a fetch only when they share both.
type EntryKey = (Wanted, Option<String>);

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
    entries: Mutex<HashMap<EntryKey, Arc<tokio::sync::Mutex<Entry>>>>,
    /// Repository credential Secrets, one cache per label (see [`repocreds::LABELS`]).
    secrets: Mutex<Vec<Store<Secret>>>,
}

impl AppSources {
    fn entry(&self, key: &EntryKey) -> Arc<tokio::sync::Mutex<Entry>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.entry(key.clone()).or_default().clone()
    }

    /// Adds a cache of labeled repository Secrets to look credentials up in.
    pub fn credentials_from(&self, store: Store<Secret>) {
        self.secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(store);
    }

    /// The credentials of `url` for an Application of `namespace` (only Secrets of its own
    /// namespace count): the Secret's key, and its credentials.
    fn credentials(&self, namespace: &str, url: &str) -> Result<Option<(String, Auth)>, Failure> {
        let stores = self
            .secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let found: Vec<CredSecret> = stores
            .iter()
            .flat_map(|s| s.state())
            .filter(|s| s.namespace().as_deref() == Some(namespace))
            .filter_map(|s| {
                let labels = s.labels();
                let kind = repocreds::LABELS
                    .iter()
                    .find_map(|l| labels.get(*l).and_then(|v| Kind::of_label(v)))?;
                Some(CredSecret {
                    name: format!(
                        "{namespace}/{}@{}",
                        s.name_any(),
                        s.resource_version().unwrap_or_default()
                    ),
                    kind,
                    data: crate::clusters::data_of(&s),
                })
            })
            .collect();
        let Some(secret) = repocreds::pick(&found, url) else {
            return Ok(None);
        };
        let auth = repocreds::auth(secret)
            .map_err(|e| Failure::new(Reason::AuthenticationFailed, e.to_string()))?;
        Ok(Some((secret.name.clone(), auth)))
    }
}

/// The artifact of `wanted`, resolved within `max_age` (unless `refresh`), fetched if its
/// revision moved.
pub async fn artifact(
    ctx: &Context,
    namespace: &str,
    wanted: &Wanted,
    max_age: Duration,
    refresh: bool,
) -> Result<ArtifactRef, Failure> {
    let (creds, auth) = match ctx.app_sources.credentials(namespace, &wanted.url)? {
        Some((name, auth)) => (Some(name), auth),
        None => (None, Auth::none()),
    };
    auth.check_scheme(&wanted.url).map_err(|e| {
        let from = creds
            .as_deref()
            .map_or(String::new(), |c| format!(" (Secret {c})"));
        Failure::new(
            Reason::AuthenticationFailed,
            format!("spec.source.repoURL: {e}{from}"),
        )
    })?;
    let entry_key = (wanted.clone(), creds);
    let entry = ctx.app_sources.entry(&entry_key);
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
    let key = store_key(&entry_key);
    let access = Access {
        auth,
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
