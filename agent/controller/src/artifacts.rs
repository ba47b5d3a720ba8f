//! Sources behind one reference. A deploy kind asks for "the artifact of source `kind/name`"
//! and gets an [`ArtifactRef`] (revision, digest, where it is stored) whatever the source's
//! kind; it reads the files through [`files_under`]. A new source kind is a [`Source`]
//! implementation plus one arm in [`lookup`] and one watch in [`watch_sources`]; no deploy
//! kind's reconciler changes.

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use skewer_appliers::kustomize::KUSTOMIZATION_FILES;
use skewer_appliers::load::SourceFile;

use crate::api::{ArtifactStatus, GitRepository, OCIRepository, SourceStatus};
use crate::api::{scoped, watch};
use crate::runtime::{Failure, Reason, Reconciled};

/// The source kinds a deploy kind may name.
pub const KINDS: &[&str] = &["GitRepository", "OCIRepository"];

/// A kind of source: reconciled, and reporting the artifact it stored in its status.
pub trait Source: Reconciled<Status = SourceStatus> {
    fn artifact(&self) -> Option<&ArtifactStatus> {
        self.status().and_then(|s| s.artifact.as_ref())
    }
}

impl Source for GitRepository {}
impl Source for OCIRepository {}

/// Where a source's artifacts are kept in the store: `<kind>/<namespace>/<name>`.
pub fn store_key<S: Source>(namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", S::KIND.to_ascii_lowercase())
}

/// A source's current artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactRef {
    /// `Kind/namespace/name` of the source, for messages.
    pub source: String,
    /// Its directory in the store.
    pub key: String,
    pub revision: String,
    pub digest: String,
    /// Where the replica that fetched it serves it, and its size: read from there when this
    /// replica's store lacks it (`--shards`: another replica holds the source's shard).
    pub served: Option<(String, u64)>,
}

/// The current artifact of source `kind` `namespace/name`.
pub async fn lookup(
    client: &Client,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<ArtifactRef, Failure> {
    match kind {
        "GitRepository" => get::<GitRepository>(client, namespace, name).await,
        "OCIRepository" => get::<OCIRepository>(client, namespace, name).await,
        other => Err(Failure::invalid(format!(
            "spec.sourceRef.kind: '{other}' is not supported ({})",
            KINDS.join(", ")
        ))),
    }
}

async fn get<S: Source>(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<ArtifactRef, Failure> {
    let source = format!("{}/{namespace}/{name}", S::KIND);
    let failed = |message: String| Failure::new(Reason::ArtifactFailed, message);
    let api: Api<S> = Api::namespaced(client.clone(), namespace);
    let obj = api
        .get_opt(name)
        .await
        .map_err(|e| failed(format!("source {source}: {e}")))?
        .ok_or_else(|| failed(format!("source {source} not found")))?;
    let artifact = obj
        .artifact()
        .ok_or_else(|| failed(format!("source {source} has no artifact yet")))?;
    Ok(ArtifactRef {
        key: store_key::<S>(namespace, name),
        revision: artifact.revision.clone(),
        digest: artifact.digest.clone(),
        served: artifact.url.clone().map(|url| (url, artifact.size)),
        source,
    })
}

/// The files a deploy object of directory `dir` needs: those under it, read and digest-checked
/// off the async runtime. Only that directory is unpacked, so an object of one directory of a
/// big repository holds no more than that in memory; unless a kustomization under it may name
/// bases elsewhere (`../base`), or the object says so (`whole`), and then the whole artifact
/// is read.
pub async fn files_under(
    store: &skewer_sources::Store,
    artifact: &ArtifactRef,
    dir: &str,
    whole: bool,
) -> Result<Vec<SourceFile>, Failure> {
    let (store, key, digest, dir) = (
        store.clone(),
        artifact.key.clone(),
        artifact.digest.clone(),
        dir.to_string(),
    );
    let failed = |e: String| Failure::new(Reason::ArtifactFailed, e);
    if let Some((url, size)) = &artifact.served
        && !store.path_of(&key, &digest).exists()
    {
        copy(&store, artifact, url, *size).await?;
    }
    let files = tokio::task::spawn_blocking(move || {
        if whole {
            return store.get_under(&key, &digest, "");
        }
        let files = store.get_under(&key, &digest, &dir)?;
        let kustomized = files.iter().any(|f| {
            let name = f.path.rsplit('/').next().unwrap_or_default();
            KUSTOMIZATION_FILES.contains(&name)
        });
        if kustomized && !dir.is_empty() {
            return store.get_under(&key, &digest, "");
        }
        Ok(files)
    })
    .await
    .map_err(|e| failed(e.to_string()))?
    .map_err(|e: skewer_sources::StoreError| failed(e.to_string()))?;
    Ok(files
        .into_iter()
        .map(|f| SourceFile {
            path: f.path,
            data: f.data,
        })
        .collect())
}

/// The most an artifact read from another replica may weigh.
const MAX_COPY: u64 = 1 << 30;

/// Reads `artifact` from the replica that serves it at `url` into `store`: at most its
/// recorded `size` (and never more than 1 GiB), stored only if its digest is the one the
/// source's status names. Older copies of that source go.
async fn copy(
    store: &skewer_sources::Store,
    artifact: &ArtifactRef,
    url: &str,
    size: u64,
) -> Result<(), Failure> {
    let failed = |e: String| {
        Failure::new(
            Reason::ArtifactFailed,
            format!("reading {} from {url}: {e}", artifact.source),
        )
    };
    if size > MAX_COPY {
        return Err(failed(format!("{size} bytes is more than {MAX_COPY}")));
    }
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let mut response = client
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| failed(e.to_string()))?;
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        if bytes.len() as u64 + chunk.len() as u64 > size {
            return Err(failed(format!(
                "more than the {size} bytes its status records"
            )));
        }
        bytes.extend_from_slice(&chunk);
    }
    let actual = skewer_sources::artifact::digest_of(&bytes);
    if actual != artifact.digest {
        return Err(failed(format!(
            "its digest is {actual}, the source's status says {}",
            artifact.digest
        )));
    }
    let (store, key, revision, digest) = (
        store.clone(),
        artifact.key.clone(),
        artifact.revision.clone(),
        artifact.digest.clone(),
    );
    tokio::task::spawn_blocking(move || {
        store.put_packed(&key, &revision, &bytes, digest.clone())?;
        store.gc(&key, &digest)
    })
    .await
    .map_err(|e| failed(e.to_string()))?
    .map_err(|e| failed(e.to_string()))?;
    tracing::info!(source = %artifact.source, %url, "read the artifact from the replica that fetched it");
    Ok(())
}

/// Adds a watch of every source kind to `controller`: a change of a source (a new artifact)
/// reconciles the objects for which `uses(object, kind, namespace, name)` holds.
pub fn watch_sources<K>(
    controller: Controller<K>,
    client: &Client,
    namespace: Option<&str>,
    uses: impl Fn(&K, &str, &str, &str) -> bool + Clone + Send + Sync + 'static,
) -> Controller<K>
where
    K: Reconciled,
{
    let controller = watch_kind::<K, GitRepository>(controller, client, namespace, uses.clone());
    watch_kind::<K, OCIRepository>(controller, client, namespace, uses)
}

/// Adds a watch of source kind `S` to `controller`.
fn watch_kind<K, S>(
    controller: Controller<K>,
    client: &Client,
    namespace: Option<&str>,
    uses: impl Fn(&K, &str, &str, &str) -> bool + Send + Sync + 'static,
) -> Controller<K>
where
    K: Reconciled,
    S: Source + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let store = controller.store();
    let sources = watcher(scoped::<S>(client, namespace), watch::own_kinds());
    controller.watches_stream(sources.touched_objects(), move |source: S| {
        referring(&store, &source, |k, ns, name| uses(k, S::KIND, ns, name))
    })
}

/// The objects in `store` for which `refers(object, namespace, name)` of `target` holds.
pub fn referring<K, T>(
    store: &Store<K>,
    target: &T,
    refers: impl Fn(&K, &str, &str) -> bool,
) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone,
    T: kube::Resource,
{
    let (ns, name) = (target.namespace().unwrap_or_default(), target.name_any());
    store
        .state()
        .iter()
        .filter(|obj| refers(obj, &ns, &name))
        .map(|obj: &Arc<K>| ObjectRef::from_obj(obj.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_keys_are_per_kind_and_object() {
        assert_eq!(
            store_key::<GitRepository>("flux-system", "platform"),
            "gitrepository/flux-system/platform"
        );
    }
}
