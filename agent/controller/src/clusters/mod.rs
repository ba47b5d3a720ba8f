//! The clusters skewer may apply to besides the hub: registered by Secrets labeled
//! `skewer.dev/secret-type: cluster` or `argocd.argoproj.io/secret-type: cluster` in Argo CD's
//! layout ([`secret`]), or named by a Kustomization's `kubeConfig.secretRef` ([`kubeconfig`]).
//! The [`Registry`] watches the labeled Secrets and says which cluster changed, so that its
//! clients are rebuilt (credential rotation without a restart) or dropped.

pub mod allowed;
pub mod kubeconfig;
pub mod list;
pub mod secret;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use thiserror::Error;
use tokio::sync::{broadcast, watch};
use tracing::{info, warn};

pub use secret::Registration;

/// The labels that mark a cluster Secret (skewer's own, and Argo CD's), with the value
/// `cluster`.
pub const LABELS: [&str; 2] = ["skewer.dev/secret-type", "argocd.argoproj.io/secret-type"];

/// A field of a Secret that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{origin}: {field}: {message}")]
pub struct Invalid {
    /// What it came from: `cluster Secret ns/name`, `Secret ns/name key value`.
    pub origin: String,
    pub field: String,
    pub message: String,
}

/// Why a registered cluster cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Unregistered {
    #[error("cluster '{name}' is not registered (no Secret labeled {} or {}: cluster names it in {where_})", LABELS[0], LABELS[1])]
    Missing { name: String, where_: String },
    #[error("cluster '{name}' is registered by more than one Secret: {}", .secrets.join(", "))]
    Ambiguous { name: String, secrets: Vec<String> },
    #[error("cluster '{0}': {1}")]
    Invalid(String, Invalid),
    #[error("the cluster Secrets have not been listed yet: {0}")]
    NotListed(String),
}

/// How long after start lookups wait for the cluster Secrets' first lists.
const LIST_PATIENCE: Duration = Duration::from_secs(30);

const ALL_LISTED: u8 = (1 << LABELS.len()) - 1;

/// How long connecting to a cluster may take before it counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The client configuration of a kubeconfig (its certificates decoded).
pub async fn config(kubeconfig: kube::config::Kubeconfig) -> Result<kube::Config, String> {
    let certificate = kubeconfig
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref()?.client_certificate_data.as_deref());
    for data in certificate {
        if let Some(problem) = unusable_client_certificate(data) {
            return Err(problem);
        }
    }
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())
}

/// What is wrong with a client certificate (base64 of PEM) that the TLS library would refuse
/// with a misleading message. X.509 v1 certificates, which `openssl x509 -req` makes without
/// `-extfile` and which kubectl accepts, are refused by rustls ("invalid private key:
/// UnsupportedCertVersion"); this says so, and how to mend it. Pure.
pub fn unusable_client_certificate(base64_pem: &str) -> Option<String> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(base64_pem.trim())
        .ok()?;
    let chain = x509_cert::Certificate::load_pem_chain(&pem).ok()?;
    let leaf = chain.first()?;
    (leaf.tbs_certificate().version() == x509_cert::certificate::Version::V1).then(|| {
        "the client certificate (certData, client-certificate-data) is X.509 version 1, which skewer's TLS library does not accept; issue it again as version 3: with openssl, sign it with `-extfile` naming extensions such as `extendedKeyUsage = clientAuth`".to_string()
    })
}

/// A client of `config`, impersonating `identity` when given, that gives up connecting after
/// [`CONNECT_TIMEOUT`].
pub fn client(mut config: kube::Config, identity: Option<String>) -> Result<Client, String> {
    config.auth_info.impersonate = identity;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Client::try_from(config).map_err(|e| e.to_string())
}

type Entry = Result<Arc<Registration>, (String, Invalid)>;

/// The cluster Secrets, as last listed and watched.
pub struct Registry {
    /// By (label, `namespace/name` of the Secret).
    secrets: RwLock<BTreeMap<(usize, String), Entry>>,
    /// Namespaces watched, for messages.
    where_: String,
    /// Which of the two watches (bit per label) have listed at least once.
    listed: watch::Sender<u8>,
    /// Names of clusters whose Secret was added, changed or deleted.
    changed: broadcast::Sender<String>,
    /// Lookups wait for the first lists until then, no longer (a watch that cannot list, for
    /// want of RBAC say, must not hold every reconcile).
    patience: tokio::time::Instant,
}

impl Registry {
    /// A registry of the Secrets in `namespace` (all namespaces when `None`); its watches start
    /// with [`Registry::watch`].
    pub fn new(namespace: Option<&str>) -> Arc<Self> {
        Arc::new(Self {
            secrets: RwLock::new(BTreeMap::new()),
            where_: namespace
                .map_or_else(|| "any namespace".into(), |ns| format!("namespace {ns}")),
            listed: watch::Sender::new(0),
            changed: broadcast::Sender::new(256),
            patience: tokio::time::Instant::now() + LIST_PATIENCE,
        })
    }

    /// Starts the watches of both labels.
    pub fn watch(self: &Arc<Self>, client: &Client, namespace: Option<&str>) {
        for (i, label) in LABELS.iter().enumerate() {
            let api: Api<Secret> = crate::api::scoped(client, namespace);
            tokio::spawn(self.clone().follow(i, api, format!("{label}=cluster")));
        }
    }

    /// Names of clusters whose registration changed, as they change.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changed.subscribe()
    }

    /// Waits (within the first lists' patience) until both labels were listed.
    async fn listed(&self) -> Result<(), Unregistered> {
        let mut listed = self.listed.subscribe();
        let waited =
            tokio::time::timeout_at(self.patience, listed.wait_for(|bits| *bits == ALL_LISTED))
                .await;
        if waited.is_err() {
            return Err(Unregistered::NotListed(format!(
                "no list of Secrets in {} yet (can skewer list them? see its log)",
                self.where_
            )));
        }
        Ok(())
    }

    /// The name of the registered cluster whose `server` is `server` (Argo CD's
    /// `destination.server`), a trailing `/` aside.
    pub async fn name_of_server(&self, server: &str) -> Result<String, Unregistered> {
        self.listed().await?;
        self.find_server(server)
    }

    /// [`Registry::name_of_server`] from what has been listed so far, without waiting.
    pub fn find_server(&self, server: &str) -> Result<String, Unregistered> {
        let wanted = server.trim_end_matches('/');
        let secrets = self.secrets.read().unwrap_or_else(|e| e.into_inner());
        let names: std::collections::BTreeSet<&str> = secrets
            .values()
            .filter_map(|e| e.as_ref().ok())
            .filter(|r| r.server.trim_end_matches('/') == wanted)
            .map(|r| r.name.as_str())
            .collect();
        match names.len() {
            1 => Ok(names.into_iter().next().unwrap_or_default().to_string()),
            0 => Err(Unregistered::Missing {
                name: format!("with server {server}"),
                where_: self.where_.clone(),
            }),
            _ => Err(Unregistered::Ambiguous {
                name: format!("with server {server}"),
                secrets: names.into_iter().map(String::from).collect(),
            }),
        }
    }

    /// Every registration listed so far, valid or not, one per cluster name (a name registered
    /// twice is an error): what ApplicationSets' `clusters` generators choose from. Waits for
    /// the first lists as [`Registry::lookup`] does.
    pub async fn all(&self) -> Result<Vec<Result<Arc<Registration>, Unregistered>>, Unregistered> {
        self.listed().await?;
        let secrets = self.secrets.read().unwrap_or_else(|e| e.into_inner());
        let mut by_name: BTreeMap<String, Vec<(&str, &Entry)>> = BTreeMap::new();
        for ((_, secret), entry) in secrets.iter() {
            by_name
                .entry(name_of(entry))
                .or_default()
                .push((secret, entry));
        }
        Ok(by_name
            .into_iter()
            .map(|(name, entries)| match entries.as_slice() {
                [(_, Ok(r))] => Ok(r.clone()),
                [(_, Err((_, e)))] => Err(Unregistered::Invalid(name, e.clone())),
                _ => Err(Unregistered::Ambiguous {
                    name,
                    secrets: entries.iter().map(|(s, _)| s.to_string()).collect(),
                }),
            })
            .collect())
    }

    /// The registration of cluster `name`, once the Secrets have been listed.
    pub async fn lookup(&self, name: &str) -> Result<Arc<Registration>, Unregistered> {
        self.listed().await?;
        let secrets = self.secrets.read().unwrap_or_else(|e| e.into_inner());
        let mut found: BTreeMap<&str, &Entry> = BTreeMap::new();
        for ((_, secret), entry) in secrets.iter() {
            let entry_name = match entry {
                Ok(r) => r.name.as_str(),
                Err((n, _)) => n.as_str(),
            };
            if entry_name == name {
                found.insert(secret.as_str(), entry);
            }
        }
        if found.len() > 1 {
            return Err(Unregistered::Ambiguous {
                name: name.into(),
                secrets: found.keys().map(|s| s.to_string()).collect(),
            });
        }
        match found.into_values().next() {
            Some(Ok(r)) => Ok(r.clone()),
            Some(Err((_, e))) => Err(Unregistered::Invalid(name.into(), e.clone())),
            None => Err(Unregistered::Missing {
                name: name.into(),
                where_: self.where_.clone(),
            }),
        }
    }

    async fn follow(self: Arc<Self>, label: usize, api: Api<Secret>, selector: String) {
        let config = crate::api::watch::config().labels(&selector);
        let mut events = crate::api::watch::stream(api, config).boxed();
        let mut relist: Option<BTreeMap<(usize, String), Entry>> = None;
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Init) => relist = Some(BTreeMap::new()),
                Ok(watcher::Event::InitApply(s)) => {
                    if let Some(list) = &mut relist {
                        let (key, entry) = read(label, &s);
                        list.insert(key, entry);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let list = relist.take().unwrap_or_default();
                    let mut changed = Vec::new();
                    {
                        let mut secrets = self.secrets.write().unwrap_or_else(|e| e.into_inner());
                        let old: Vec<(usize, String)> = secrets
                            .keys()
                            .filter(|(l, _)| *l == label)
                            .cloned()
                            .collect();
                        for key in old {
                            if list.contains_key(&key) {
                                continue;
                            }
                            if let Some(e) = secrets.remove(&key) {
                                changed.push(name_of(&e));
                            }
                        }
                        for (key, entry) in list {
                            if differs(secrets.get(&key), &entry) {
                                changed.push(name_of(&entry));
                            }
                            secrets.insert(key, entry);
                        }
                    }
                    self.listed.send_modify(|bits| *bits |= 1 << label);
                    self.announce(changed);
                }
                Ok(watcher::Event::Apply(s)) => {
                    let (key, entry) = read(label, &s);
                    let mut changed = vec![name_of(&entry)];
                    {
                        let mut secrets = self.secrets.write().unwrap_or_else(|e| e.into_inner());
                        if let Some(old) = secrets.insert(key, entry) {
                            changed.push(name_of(&old));
                        }
                    }
                    self.announce(changed);
                }
                Ok(watcher::Event::Delete(s)) => {
                    let key = (label, secret_key(&s));
                    let removed = self
                        .secrets
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&key);
                    self.announce(removed.iter().map(name_of).collect());
                }
                Err(e) => warn!(label = LABELS[label], error = %e, "cluster Secret watch"),
            }
        }
    }

    fn announce(&self, mut names: Vec<String>) {
        names.sort();
        names.dedup();
        for name in names {
            info!(cluster = %name, "cluster registration changed");
            // No receiver yet is fine: nothing was built from it.
            let _ = self.changed.send(name);
        }
    }
}

/// `namespace/name` of a Secret.
pub fn secret_key(s: &Secret) -> String {
    format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any())
}

/// A Secret's data as bytes by key.
pub fn data_of(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    s.data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// The Secret's [`allowed::ANNOTATION`], if it has one.
pub fn allowed_of(s: &Secret) -> Option<&str> {
    s.annotations().get(allowed::ANNOTATION).map(String::as_str)
}

fn read(label: usize, s: &Secret) -> ((usize, String), Entry) {
    let key = secret_key(s);
    let data = data_of(s);
    let entry = secret::parse(&key, &data, allowed_of(s))
        .map(|mut r| {
            r.labels = s.labels().clone();
            r.annotations = s.annotations().clone();
            Arc::new(r)
        })
        .map_err(|e| (secret::registered_name(&s.name_any(), &data), e));
    if let Err((_, e)) = &entry {
        warn!(error = %e, "invalid cluster Secret");
    }
    ((label, key), entry)
}

fn name_of(e: &Entry) -> String {
    match e {
        Ok(r) => r.name.clone(),
        Err((n, _)) => n.clone(),
    }
}

fn differs(old: Option<&Entry>, new: &Entry) -> bool {
    match (old, new) {
        (Some(Ok(a)), Ok(b)) => {
            a.fingerprint != b.fingerprint
                || a.name != b.name
                || a.labels != b.labels
                || a.annotations != b.annotations
        }
        (Some(Err(a)), Err(b)) => a != b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(name: &str, data: &[(&str, &str)]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some(name.into());
        s.metadata.namespace = Some("skewer-system".into());
        s.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        s
    }

    fn registry(secrets: &[(usize, Secret)]) -> Arc<Registry> {
        let r = Registry::new(Some("skewer-system"));
        {
            let mut map = r.secrets.write().unwrap();
            for (label, s) in secrets {
                let (key, entry) = read(*label, s);
                map.insert(key, entry);
            }
        }
        r.listed.send_modify(|bits| *bits = ALL_LISTED);
        r
    }

    const TOKEN: (&str, &str) = ("config", r#"{"bearerToken": "t"}"#);
    const SERVER: (&str, &str) = ("server", "https://10.0.0.1:6443");

    #[tokio::test]
    async fn clusters_are_found_by_name_and_problems_named() {
        let r = registry(&[
            (0, secret("a", &[("name", "spoke-a"), SERVER, TOKEN])),
            (1, secret("b", &[SERVER, TOKEN])),
            (1, secret("c1", &[("name", "twice"), SERVER, TOKEN])),
            (0, secret("c2", &[("name", "twice"), SERVER, TOKEN])),
            (
                0,
                secret(
                    "bad",
                    &[
                        ("name", "broken"),
                        SERVER,
                        ("config", r#"{"execProviderConfig": {}}"#),
                    ],
                ),
            ),
        ]);
        assert_eq!(r.lookup("spoke-a").await.unwrap().secret, "skewer-system/a");
        assert_eq!(
            r.lookup("b").await.unwrap().name,
            "b",
            "the Secret's name without `name`"
        );
        let missing = r.lookup("nope").await.unwrap_err().to_string();
        assert!(
            missing.starts_with("cluster 'nope' is not registered"),
            "{missing}"
        );
        assert!(missing.contains("namespace skewer-system"), "{missing}");
        let twice = r.lookup("twice").await.unwrap_err().to_string();
        assert!(
            twice.contains("skewer-system/c1, skewer-system/c2"),
            "{twice}"
        );
        let broken = r.lookup("broken").await.unwrap_err().to_string();
        assert!(
            broken.contains(
                "cluster Secret skewer-system/bad: config.execProviderConfig: exec plugins"
            ),
            "{broken}"
        );
    }

    #[test]
    fn version_1_client_certificates_are_named() {
        use base64::Engine as _;
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        // Self-signed, made with `openssl x509 -req` without and with `-extfile`.
        let v1 = b64(include_str!("testdata/client-v1.pem"));
        let v3 = b64(include_str!("testdata/client-v3.pem"));
        let problem = unusable_client_certificate(&v1).expect("refused");
        assert!(problem.contains("X.509 version 1"), "{problem}");
        assert_eq!(unusable_client_certificate(&v3), None);
        assert_eq!(
            unusable_client_certificate("not base64"),
            None,
            "left to kube"
        );
    }

    #[test]
    fn a_change_is_a_new_fingerprint_or_a_new_problem() {
        let (_, one) = read(0, &secret("a", &[SERVER, TOKEN]));
        let (_, same) = read(0, &secret("a", &[SERVER, TOKEN]));
        let (_, rotated) = read(
            0,
            &secret("a", &[SERVER, ("config", r#"{"bearerToken": "u"}"#)]),
        );
        assert!(!differs(Some(&one), &same));
        assert!(differs(Some(&one), &rotated));
        assert!(differs(None, &one));
    }
}
