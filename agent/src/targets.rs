//! Where objects are applied. A [`Target`] is a cluster seen through one identity: its client,
//! its server version (decided once, for the old-server work-arounds), its [`Applier`] with its
//! discovery cache, and the drift watches started on it. The registry builds each target
//! once and hands out the same one to every reconcile that names it.
//!
//! Today it holds one target: the hub, as skewer itself. Spoke clusters (from cluster
//! Secrets) and impersonated tenants are further keys, added here without touching the
//! reconcilers.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use kube::Client;
use skewer_appliers::apply::Applier;
use thiserror::Error;

/// Which cluster, and who skewer is there.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetKey {
    /// A registered cluster's name; `None` is the hub skewer runs against.
    pub cluster: Option<String>,
    /// The user to impersonate (`system:serviceaccount:<namespace>:<name>`); `None` is
    /// skewer's own identity.
    pub identity: Option<String>,
}

impl TargetKey {
    /// The hub, as skewer itself.
    pub const HUB: TargetKey = TargetKey {
        cluster: None,
        identity: None,
    };
}

impl fmt::Display for TargetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.cluster.as_deref().unwrap_or("the hub"))?;
        if let Some(who) = &self.identity {
            write!(f, " as {who}")?;
        }
        Ok(())
    }
}

/// One cluster through one identity.
pub struct Target {
    pub key: TargetKey,
    pub client: Client,
    pub applier: Applier,
    /// Kinds (group, version, kind) with a drift watch running on this target.
    pub(crate) watched: Mutex<HashSet<(String, String, String)>>,
}

impl Target {
    async fn connect(key: TargetKey, client: Client) -> Result<Self, kube::Error> {
        Ok(Self {
            key,
            applier: Applier::new(client.clone()).await?,
            client,
            watched: Mutex::new(HashSet::new()),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TargetError {
    #[error("spec.serviceAccountName: impersonation is not supported yet")]
    Impersonation,
    #[error("cluster '{0}' is not registered")]
    UnknownCluster(String),
}

/// The targets, built once each.
pub struct Targets {
    hub: Arc<Target>,
}

impl Targets {
    /// The registry with the hub; asks the hub its version.
    pub async fn new(hub: Client) -> Result<Self, kube::Error> {
        Ok(Self {
            hub: Arc::new(Target::connect(TargetKey::HUB, hub).await?),
        })
    }

    /// The target for `key`.
    pub fn get(&self, key: &TargetKey) -> Result<Arc<Target>, TargetError> {
        match key {
            TargetKey {
                cluster: Some(name),
                ..
            } => Err(TargetError::UnknownCluster(name.clone())),
            TargetKey {
                identity: Some(_), ..
            } => Err(TargetError::Impersonation),
            _ => Ok(self.hub.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_as_where_and_who() {
        assert_eq!(TargetKey::HUB.to_string(), "the hub");
        let tenant = TargetKey {
            cluster: Some("spoke-a".into()),
            identity: Some("system:serviceaccount:team-a:deployer".into()),
        };
        assert_eq!(
            tenant.to_string(),
            "spoke-a as system:serviceaccount:team-a:deployer"
        );
        assert_ne!(
            tenant,
            TargetKey::HUB,
            "the same object there is another object"
        );
    }
}
