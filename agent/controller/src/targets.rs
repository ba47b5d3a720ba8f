//! Where objects are applied. A [`Target`] is a cluster seen through one identity: its client,
//! its server version (decided once per client, for the old-server work-arounds), its
//! [`Applier`] with its discovery cache, where it may act ([`Scope`]), and the drift watches
//! started on it. [`Targets`] builds each target when first needed and hands out the same one
//! to every reconcile that names it; a target whose cluster Secret changed is rebuilt, and its
//! watches stop.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::config::Kubeconfig;
use kube::{Api, Client, Config};
use skewer_appliers::apply::Applier;
use skewer_appliers::scope::Scope;
use thiserror::Error;
use tokio::task::AbortHandle;

use crate::clusters::{self, Invalid, Registry, Unregistered};

/// Which cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClusterRef {
    /// The cluster skewer runs against.
    Hub,
    /// A cluster registered by a cluster Secret, by its `name`.
    Registered(String),
    /// The cluster of the kubeconfig in a Secret (`key`, or `value` / `value.yaml`).
    KubeConfig {
        namespace: String,
        name: String,
        key: Option<String>,
    },
}

impl fmt::Display for ClusterRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterRef::Hub => f.write_str("the hub"),
            ClusterRef::Registered(name) => write!(f, "cluster '{name}'"),
            ClusterRef::KubeConfig {
                namespace, name, ..
            } => write!(f, "the cluster of kubeConfig Secret {namespace}/{name}"),
        }
    }
}

/// Which cluster, and who skewer is there.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetKey {
    pub cluster: ClusterRef,
    /// The user to impersonate (`system:serviceaccount:<namespace>:<name>`); `None` is
    /// skewer's own identity.
    pub identity: Option<String>,
}

impl TargetKey {
    /// The hub, as skewer itself.
    pub const HUB: TargetKey = TargetKey {
        cluster: ClusterRef::Hub,
        identity: None,
    };
}

impl fmt::Display for TargetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.cluster)?;
        if let Some(who) = &self.identity {
            write!(f, " as {who}")?;
        }
        Ok(())
    }
}

static EPOCHS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A drift watch: (group, version, kind) and the namespace it is limited to.
pub type WatchKey = (String, String, String, Option<String>);

/// One cluster through one identity.
pub struct Target {
    pub key: TargetKey,
    pub client: Client,
    pub applier: Applier,
    /// Where on the cluster skewer may act.
    pub scope: Scope,
    /// Of the registration it was built from: a different one means rebuild.
    fingerprint: u64,
    /// Unique to this client in this process: what was applied through another client (one
    /// replaced since) is applied again in full, and watched through this one.
    pub epoch: u64,
    /// Drift watches running on this target.
    pub(crate) watched: Mutex<HashSet<WatchKey>>,
    tasks: Mutex<Vec<AbortHandle>>,
}

impl Target {
    async fn connect(
        key: TargetKey,
        client: Client,
        scope: Scope,
        fingerprint: u64,
    ) -> Result<Self, kube::Error> {
        Ok(Self {
            key,
            applier: Applier::new(client.clone()).await?,
            client,
            scope,
            fingerprint,
            epoch: EPOCHS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            watched: Mutex::new(HashSet::new()),
            tasks: Mutex::new(Vec::new()),
        })
    }

    /// Whether watches must be limited to the namespaces objects are in: the identity may not
    /// list across the cluster, or the cluster's registration allows only some namespaces.
    pub fn per_namespace(&self) -> bool {
        self.key.identity.is_some() || !self.scope.is_whole_cluster()
    }

    /// Runs `task` until the target is retired.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task).abort_handle();
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(handle);
    }

    /// Stops its watches: its credentials changed or its cluster left.
    fn retire(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            t.abort();
        }
        self.watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TargetError {
    #[error(transparent)]
    Unregistered(#[from] Unregistered),
    #[error("{0}")]
    Invalid(#[from] Invalid),
    #[error("{cluster}: {error}")]
    Unreachable { cluster: String, error: String },
    #[error(
        "cluster '{cluster}' does not accept deployments from namespace '{namespace}': its Secret {secret} allows {allowed} (annotation {})",
        crate::clusters::allowed::ANNOTATION
    )]
    NotAllowed {
        cluster: String,
        namespace: String,
        secret: String,
        allowed: String,
    },
}

impl From<TargetError> for crate::runtime::Failure {
    fn from(e: TargetError) -> Self {
        use crate::runtime::Reason;
        let reason = match e {
            TargetError::NotAllowed { .. } => Reason::AccessDenied,
            _ => Reason::ClusterUnavailable,
        };
        Self::new(reason, e.to_string())
    }
}

/// The targets, each built once per registration.
pub struct Targets {
    hub_config: Config,
    hub: Arc<Target>,
    hub_client: Client,
    pub registry: Arc<Registry>,
    built: Mutex<HashMap<TargetKey, Arc<Target>>>,
}

impl Targets {
    /// The registry with the hub (`hub_client` made from `hub_config`); asks the hub its
    /// version.
    pub async fn new(
        hub_config: Config,
        hub_client: Client,
        registry: Arc<Registry>,
    ) -> Result<Self, kube::Error> {
        let hub = Target::connect(TargetKey::HUB, hub_client.clone(), Scope::default(), 0).await?;
        Ok(Self {
            hub_config,
            hub: Arc::new(hub),
            hub_client,
            registry,
            built: Mutex::new(HashMap::new()),
        })
    }

    /// The target for `key`, asked for by an object in namespace `from`: built on first use,
    /// rebuilt when its registration changed. A registered cluster is handed only to the
    /// namespaces its Secret allows: its credentials are the platform's.
    pub async fn get(&self, key: &TargetKey, from: &str) -> Result<Arc<Target>, TargetError> {
        if *key == TargetKey::HUB {
            return Ok(self.hub.clone());
        }
        let unreachable = |error: String| TargetError::Unreachable {
            cluster: key.cluster.to_string(),
            error,
        };
        // What to connect with, and its fingerprint: a target built from the same is reused,
        // and nothing is parsed or decoded for it.
        let (connection, scope, fingerprint) = match &key.cluster {
            ClusterRef::Hub => (Connection::Hub, Scope::default(), 0),
            ClusterRef::Registered(name) => {
                let r = self.registry.lookup(name).await?;
                if !r.allowed.allows(from) {
                    return Err(TargetError::NotAllowed {
                        cluster: name.clone(),
                        namespace: from.into(),
                        secret: r.secret.clone(),
                        allowed: r.allowed.to_string(),
                    });
                }
                let parsed = Connection::Parsed(r.kubeconfig.clone());
                (parsed, r.scope.clone(), r.fingerprint)
            }
            ClusterRef::KubeConfig {
                namespace,
                name,
                key: data_key,
            } => {
                let (unparsed, fingerprint) = self
                    .read_kubeconfig(namespace, name, data_key.as_deref())
                    .await?;
                (unparsed, Scope::default(), fingerprint)
            }
        };
        if let Some(t) = self.cached(key).filter(|t| t.fingerprint == fingerprint) {
            return Ok(t);
        }
        let kubeconfig = match connection {
            Connection::Hub => None,
            Connection::Parsed(k) => Some(k),
            Connection::Unparsed { source, text } => {
                Some(clusters::kubeconfig::parse(&source, &text)?)
            }
        };
        let config = match kubeconfig {
            None => self.hub_config.clone(),
            Some(k) => clusters::config(k).await.map_err(unreachable)?,
        };
        let client = clusters::client(config, key.identity.clone()).map_err(unreachable)?;
        let target = Target::connect(key.clone(), client, scope, fingerprint)
            .await
            .map_err(|e| unreachable(skewer_appliers::apply::api_message(&e)))?;
        let target = Arc::new(target);
        let replaced = self
            .built
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), target.clone());
        if let Some(old) = replaced {
            old.retire();
        }
        Ok(target)
    }

    fn cached(&self, key: &TargetKey) -> Option<Arc<Target>> {
        let built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        built.get(key).cloned()
    }

    /// Stops every target's watches and drops the built ones: this process no longer leads,
    /// and nothing may repair drift behind the new leader's back.
    pub fn retire_all(&self) {
        self.hub.retire();
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        for target in built.values() {
            target.retire();
        }
        built.clear();
    }

    /// Drops every target on registered cluster `name` built from another registration than
    /// its current one (all of them when it is gone), and stops their watches. A target built
    /// from the current registration stays: it may have been built since the change.
    pub async fn retire_changed(&self, name: &str) {
        let current = self.registry.lookup(name).await.ok().map(|r| r.fingerprint);
        let cluster = ClusterRef::Registered(name.into());
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        built.retain(|key, target| {
            let keep = key.cluster != cluster || Some(target.fingerprint) == current;
            if !keep {
                target.retire();
            }
            keep
        });
    }

    /// Retires what [`Targets::retire_changed`] says as cluster Secrets change, until the
    /// registry ends.
    pub async fn follow_registry(&self) {
        let mut changes = self.registry.subscribe();
        loop {
            match changes.recv().await {
                Ok(name) => self.retire_changed(&name).await,
                // Missed changes are caught by `get`, which compares fingerprints.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// The kubeconfig text of a Secret (its `key`, else `value`, else `value.yaml`), and the
    /// fingerprint of the Secret's data.
    async fn read_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        key: Option<&str>,
    ) -> Result<(Connection, u64), TargetError> {
        let invalid = |field: &str, message: String| Invalid {
            origin: format!("kubeConfig Secret {namespace}/{name}"),
            field: field.into(),
            message,
        };
        let api: Api<Secret> = Api::namespaced(self.hub_client.clone(), namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|e| invalid("secretRef", skewer_appliers::apply::api_message(&e)))?
            .ok_or_else(|| invalid("secretRef.name", "no such Secret".into()))?;
        let data = clusters::data_of(&secret);
        let candidates: Vec<&str> = match key {
            Some(k) => vec![k],
            None => clusters::kubeconfig::DEFAULT_KEYS.to_vec(),
        };
        let (found, bytes) = candidates
            .iter()
            .find_map(|k| Some((*k, data.get(*k)?)))
            .ok_or_else(|| {
                invalid(
                    "secretRef.key",
                    format!("no key {} in the Secret", candidates.join(" or ")),
                )
            })?;
        let text = String::from_utf8(bytes.clone())
            .map_err(|_| invalid(found, "not UTF-8 text".into()))?;
        let source = format!("kubeConfig Secret {namespace}/{name} key {found}");
        let fingerprint = clusters::secret::fingerprint(&data);
        Ok((Connection::Unparsed { source, text }, fingerprint))
    }
}

/// How a target's cluster is reached, before a client is built.
enum Connection {
    /// With skewer's own configuration.
    Hub,
    Parsed(Kubeconfig),
    /// A kubeconfig's text, parsed only when no client built from it is at hand.
    Unparsed {
        source: String,
        text: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_as_where_and_who() {
        assert_eq!(TargetKey::HUB.to_string(), "the hub");
        let tenant = TargetKey {
            cluster: ClusterRef::Registered("spoke-a".into()),
            identity: Some("system:serviceaccount:team-a:deployer".into()),
        };
        assert_eq!(
            tenant.to_string(),
            "cluster 'spoke-a' as system:serviceaccount:team-a:deployer"
        );
        assert_ne!(
            tenant,
            TargetKey::HUB,
            "the same object there is another object"
        );
        let kc = ClusterRef::KubeConfig {
            namespace: "ns".into(),
            name: "kc".into(),
            key: None,
        };
        assert_eq!(kc.to_string(), "the cluster of kubeConfig Secret ns/kc");
    }
}
