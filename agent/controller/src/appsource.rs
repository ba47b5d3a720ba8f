//! The sources Applications own. An Application names a repository and a revision, not a
//! source object; Applications naming the same pair share one entry here, so twenty of them
//! cost one ref listing and one fetch. An entry is re-resolved when it is older than the
//! Application's interval (or a refresh is asked for); it fetches only when the revision
//! moved, and stores the artifact in the same store as GitRepositories.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store, reflector};
use skewer_sources::repocreds::{self, CredSecret, Kind};

use crate::artifacts::ArtifactRef;
use crate::runtime::AbortOnDrop;

/// What an Application fetches: a repository and a revision as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Wanted {
    pub url: String,
    pub target_revision: String,
}

/// An entry: what is fetched, and with which credentials (`namespace/name@resourceVersion` of
/// their Secret): Applications share a fetch only when they share both.
pub(crate) type EntryKey = (Wanted, Option<String>);

#[derive(Default)]
pub(crate) struct Entry {
    /// The artifact, and when its revision was resolved (monotonic, and wall-clock to compare
    /// with objects' creation times).
    pub(crate) current: Option<(ArtifactRef, Instant, jiff::Timestamp)>,
    /// Fetches made for this entry, for the log and tests.
    pub(crate) fetches: u64,
}

/// Entries kept at most (beyond those in use): one per repository, revision and Secret.
const MAX_ENTRIES: usize = 4096;

/// Whether entry `new` makes `old` useless: the same repository and revision, read with the
/// same Secret (`namespace/name@resourceVersion`) at another version.
fn supersedes((wanted, creds): &EntryKey, (old_wanted, old_creds): &EntryKey) -> bool {
    let secret = |c: &str| c.rsplit_once('@').map(|(name, _)| name.to_string());
    wanted == old_wanted
        && creds != old_creds
        && creds.as_deref().and_then(secret).is_some()
        && creds.as_deref().and_then(secret) == old_creds.as_deref().and_then(secret)
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
    /// The entry of `key`. A new one replaces the entries it supersedes (the same repository,
    /// revision and Secret at an older resourceVersion); past [`MAX_ENTRIES`], entries nobody
    /// is using go.
    pub(crate) fn entry(&self, key: &EntryKey) -> Arc<tokio::sync::Mutex<Entry>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = entries.get(key) {
            return e.clone();
        }
        entries.retain(|old, _| !supersedes(key, old));
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, e| Arc::strong_count(e) > 1);
        }
        entries.entry(key.clone()).or_default().clone()
    }

    /// How many entries are kept, for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Follows the labeled repository Secrets of `namespace` (all when `None`), Argo CD's
    /// way, in caches that replace those of an earlier call; they stop when the returned
    /// handles are dropped (with the controller, leadership lost).
    pub fn follow_credentials(
        &self,
        client: &kube::Client,
        namespace: Option<&str>,
    ) -> Vec<AbortOnDrop<()>> {
        let mut stores = Vec::new();
        let mut followers = Vec::new();
        for label in repocreds::LABELS {
            let secrets: kube::Api<Secret> = crate::api::scoped(client, namespace);
            let (store, writer) = reflector::store();
            let config =
                crate::api::watch::config().labels(&format!("{label} in (repository,repo-creds)"));
            let follow = reflector(writer, crate::api::watch::stream(secrets, config))
                .applied_objects()
                .for_each(|_| async {});
            followers.push(AbortOnDrop(tokio::spawn(follow)));
            stores.push(store);
        }
        *self.secrets.lock().unwrap_or_else(|e| e.into_inner()) = stores;
        followers
    }

    /// Once the caches [`AppSources::follow_credentials`] started have listed their Secrets.
    pub async fn credentials_listed(&self) {
        let stores = self
            .secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for store in stores {
            let _ = store.wait_until_ready().await;
        }
    }

    /// The repository Secret holding the credentials of `url` for an Application of
    /// `namespace` (only Secrets of its own namespace count); its name is
    /// `namespace/name@resourceVersion`.
    pub(crate) fn credentials(&self, namespace: &str, url: &str) -> Option<CredSecret> {
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
        repocreds::pick(&found, url).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(creds: Option<&str>) -> EntryKey {
        let wanted = Wanted {
            url: "https://git.example/apps.git".into(),
            target_revision: "main".into(),
        };
        (wanted, creds.map(String::from))
    }

    #[test]
    fn a_rotated_secret_replaces_its_entry_and_the_table_is_bounded() {
        let sources = AppSources::default();
        let _public = sources.entry(&key(None));
        drop(sources.entry(&key(Some("argocd/repo@1"))));
        let _other = sources.entry(&key(Some("team/repo@7")));
        assert_eq!(sources.len(), 3);
        drop(sources.entry(&key(Some("argocd/repo@2"))));
        assert_eq!(sources.len(), 3, "argocd/repo@1 is gone, the others stay");
        assert!(supersedes(
            &key(Some("argocd/repo@2")),
            &key(Some("argocd/repo@1"))
        ));
        assert!(!supersedes(
            &key(Some("argocd/repo@2")),
            &key(Some("team/repo@7"))
        ));
        assert!(!supersedes(&key(None), &key(Some("argocd/repo@1"))));

        for i in 0..MAX_ENTRIES + 10 {
            let mut k = key(None);
            k.0.target_revision = format!("v{i}");
            drop(sources.entry(&k));
        }
        assert!(sources.len() <= MAX_ENTRIES, "{}", sources.len());
    }
}
