//! A cluster Secret in Argo CD's layout turned into a connection: `name`, `server`,
//! `namespaces`, `clusterResources` and `config` (a JSON object: `bearerToken`, or `username` +
//! `password`, and `tlsClientConfig`). What skewer cannot honour (exec plugins, AWS IAM,
//! proxies, unknown fields) is refused by name, never ignored. Pure: tested without a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use base64::Engine as _;
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use serde_json::{Map, Value};
use skewer_appliers::scope::Scope;

use super::Invalid;
use super::allowed::{self, Allowed};

/// A registered cluster: how to reach it and where skewer may act on it.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The `name` field (or, without one, the Secret's name): what `spec.cluster` names.
    pub name: String,
    pub server: String,
    pub scope: Scope,
    /// One cluster, one user, one context; credentials redacted from `Debug`.
    pub kubeconfig: Kubeconfig,
    /// Changes whenever the Secret's data does: a client built from older data is rebuilt.
    pub fingerprint: u64,
    /// `namespace/name` of the Secret it came from.
    pub secret: String,
    /// Which namespaces' Kustomizations and Applications may deploy to it.
    pub allowed: Allowed,
    /// The Secret's labels and annotations, which ApplicationSets' `clusters` generators select
    /// by and pass on as parameters.
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The `project` field (Argo CD's), passed on as a parameter.
    pub project: String,
}

/// The fingerprint of a Secret's data.
pub fn fingerprint(data: &BTreeMap<String, Vec<u8>>) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

/// The cluster name a Secret registers, even when the rest of it is invalid (so the
/// Kustomizations naming it can be told what is wrong).
pub fn registered_name(secret_name: &str, data: &BTreeMap<String, Vec<u8>>) -> String {
    data.get("name")
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(secret_name)
        .to_string()
}

const DATA_KEYS: &[&str] = &[
    "name",
    "server",
    "config",
    "namespaces",
    "clusterResources",
    // Argo CD's own bookkeeping: accepted, meaningless to skewer.
    "project",
    "shard",
];

/// Parses the data of Secret `secret` (`namespace/name`) and its [`allowed::ANNOTATION`], if
/// it has one.
pub fn parse(
    secret: &str,
    data: &BTreeMap<String, Vec<u8>>,
    allowed_namespaces: Option<&str>,
) -> Result<Registration, Invalid> {
    let invalid = |field: &str, message: String| Invalid {
        origin: format!("cluster Secret {secret}"),
        field: field.into(),
        message,
    };
    if let Some(key) = data.keys().find(|k| !DATA_KEYS.contains(&k.as_str())) {
        return Err(invalid(
            key,
            format!("unknown key (expected {})", DATA_KEYS.join(", ")),
        ));
    }
    let text = |key: &str| -> Result<Option<String>, Invalid> {
        data.get(key)
            .map(|v| {
                String::from_utf8(v.clone())
                    .map(|s| s.trim().to_string())
                    .map_err(|_| invalid(key, "not UTF-8 text".into()))
            })
            .transpose()
    };
    let (namespace, secret_name) = secret.split_once('/').unwrap_or(("", secret));
    let allowed = match allowed_namespaces {
        None => Allowed::only(namespace),
        Some(value) => Allowed::parse(value).map_err(|message| Invalid {
            origin: format!("cluster Secret {secret}"),
            field: format!("metadata.annotations[{}]", allowed::ANNOTATION),
            message,
        })?,
    };
    let name = registered_name(secret_name, data);
    let project = text("project")?.unwrap_or_default();
    let server = text("server")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| invalid("server", "required (the API server's URL)".into()))?;
    let host = server
        .strip_prefix("https://")
        .or_else(|| server.strip_prefix("http://"))
        .unwrap_or_default();
    if host.is_empty() || host.starts_with('/') || host.contains(char::is_whitespace) {
        return Err(invalid(
            "server",
            format!("'{server}' is not an http(s) URL"),
        ));
    }
    let namespaces: BTreeSet<String> = text("namespaces")?
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    let cluster_resources = match text("clusterResources")?.as_deref() {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(invalid(
                "clusterResources",
                format!("'{other}' is not \"true\" or \"false\""),
            ));
        }
    };
    let config = text("config")?.ok_or_else(|| {
        invalid(
            "config",
            "required (a JSON object with the credentials)".into(),
        )
    })?;
    let config: Value =
        serde_json::from_str(&config).map_err(|e| invalid("config", format!("not JSON: {e}")))?;
    let Value::Object(config) = config else {
        return Err(invalid("config", "not a JSON object".into()));
    };
    let (cluster, user) = connection(&server, &config)
        .map_err(|(field, message)| invalid(&format!("config.{field}"), message))?;
    Ok(Registration {
        kubeconfig: single(&name, cluster, user),
        name,
        server,
        scope: Scope::new(namespaces, cluster_resources),
        fingerprint: fingerprint(data),
        secret: secret.into(),
        allowed,
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        project,
    })
}

/// A kubeconfig of one cluster and one user, as its current context.
pub fn single(name: &str, cluster: Cluster, user: AuthInfo) -> Kubeconfig {
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: name.into(),
            cluster: Some(cluster),
            other: Default::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: name.into(),
            auth_info: Some(user),
            other: Default::default(),
        }],
        contexts: vec![NamedContext {
            name: name.into(),
            context: Some(Context {
                cluster: name.into(),
                user: Some(name.into()),
                ..Default::default()
            }),
            other: Default::default(),
        }],
        current_context: Some(name.into()),
        ..Default::default()
    }
}

type FieldError = (String, String);

fn connection(
    server: &str,
    config: &Map<String, Value>,
) -> Result<(Cluster, AuthInfo), FieldError> {
    let err = |field: &str, message: &str| (field.to_string(), message.to_string());
    let mut cluster = Cluster {
        server: Some(server.into()),
        ..Default::default()
    };
    let mut user = AuthInfo::default();
    for (key, value) in config {
        match key.as_str() {
            "bearerToken" => user.token = Some(string(key, value)?.into()),
            "username" => user.username = Some(string(key, value)?),
            "password" => user.password = Some(string(key, value)?.into()),
            "tlsClientConfig" => tls(value, &mut cluster, &mut user)?,
            "disableCompression" => cluster.disable_compression = Some(boolean(key, value)?),
            "execProviderConfig" => {
                return Err(err(
                    key,
                    "exec plugins are not run by skewer: use bearerToken, username and password, or a client certificate",
                ));
            }
            "awsAuthConfig" => {
                return Err(err(
                    key,
                    "AWS IAM authentication is not supported: use bearerToken or a client certificate",
                ));
            }
            "proxyUrl" => return Err(err(key, "proxies are not supported")),
            other => return Err(err(other, "unknown field")),
        }
    }
    if user.username.is_some() != user.password.is_some() {
        return Err(err("password", "username and password go together"));
    }
    if user.client_certificate_data.is_some() != user.client_key_data.is_some() {
        return Err(err(
            "tlsClientConfig.keyData",
            "certData and keyData go together",
        ));
    }
    if user.token.is_none() && user.username.is_none() && user.client_certificate_data.is_none() {
        return Err(err(
            "bearerToken",
            "no credentials: give bearerToken, username and password, or tlsClientConfig.certData and keyData",
        ));
    }
    Ok((cluster, user))
}

fn tls(value: &Value, cluster: &mut Cluster, user: &mut AuthInfo) -> Result<(), FieldError> {
    let Value::Object(tls) = value else {
        return Err(("tlsClientConfig".into(), "not a JSON object".into()));
    };
    for (key, value) in tls {
        let field = format!("tlsClientConfig.{key}");
        match key.as_str() {
            "insecure" => cluster.insecure_skip_tls_verify = Some(boolean(&field, value)?),
            "serverName" => cluster.tls_server_name = Some(string(&field, value)?),
            "caData" => cluster.certificate_authority_data = Some(pem(&field, value)?),
            "certData" => user.client_certificate_data = Some(pem(&field, value)?),
            "keyData" => user.client_key_data = Some(pem(&field, value)?.into()),
            _ => return Err((field, "unknown field".into())),
        }
    }
    Ok(())
}

fn string(field: &str, value: &Value) -> Result<String, FieldError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        _ => Err((field.into(), "not a string".into())),
    }
}

fn boolean(field: &str, value: &Value) -> Result<bool, FieldError> {
    value
        .as_bool()
        .ok_or_else(|| (field.into(), "not true or false".into()))
}

/// Base64 of PEM, checked: kube decodes it again when it connects.
fn pem(field: &str, value: &Value) -> Result<String, FieldError> {
    let s = string(field, value)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|_| (field.to_string(), "not base64".to_string()))?;
    if !decoded.trim_ascii_start().starts_with(b"-----BEGIN") {
        return Err((field.into(), "not base64 of a PEM block".into()));
    }
    Ok(s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    fn err(pairs: &[(&str, &str)]) -> String {
        parse("skewer-system/c", &data(pairs), None)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_vcluster_layout_policy_engines_generate_is_read() {
        let config = format!(
            r#"{{"tlsClientConfig": {{"insecure": false, "caData": "{}", "certData": "{}", "keyData": "{}"}}}}"#,
            b64(PEM),
            b64(PEM),
            b64(PEM)
        );
        let r = parse(
            "argocd/vcluster-team-a",
            &data(&[
                ("name", "vcluster-team-a"),
                ("server", "https://vcluster-team-a.team-a.svc:443"),
                ("config", &config),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(r.name, "vcluster-team-a");
        assert!(r.scope.is_whole_cluster());
        let cluster = r.kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some(b64(PEM).as_str())
        );
        assert_eq!(cluster.insecure_skip_tls_verify, Some(false));
        let user = r.kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.client_certificate_data.is_some() && user.client_key_data.is_some());
        assert!(
            !format!("{r:?}").contains(&b64(PEM)[..8]) || user.client_key_data.is_some(),
            "Debug may show certificates, never the key"
        );
    }

    #[test]
    fn tokens_namespaces_and_names() {
        let r = parse(
            "skewer-system/spoke-a-secret",
            &data(&[
                ("server", "https://127.0.0.1:6443"),
                ("config", r#"{"bearerToken": "s3cret"}"#),
                ("namespaces", "a, b,,"),
                ("clusterResources", "true"),
                ("project", "default"),
            ]),
            Some("team-a, platform-*"),
        )
        .unwrap();
        assert!(r.allowed.allows("platform-x") && !r.allowed.allows("skewer-system"));
        assert_eq!(r.name, "spoke-a-secret", "no name field: the Secret's name");
        assert_eq!(
            r.scope.to_string(),
            "namespaces: a, b; cluster-scoped objects allowed"
        );
        assert!(
            !format!("{r:?}").contains("s3cret"),
            "the token is not in Debug output"
        );
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let server = ("server", "https://x:443");
        for (config, field) in [
            (
                r#"{"execProviderConfig": {"command": "aws"}}"#,
                "config.execProviderConfig",
            ),
            (
                r#"{"awsAuthConfig": {"clusterName": "x"}}"#,
                "config.awsAuthConfig",
            ),
            (r#"{"proxyUrl": "http://p"}"#, "config.proxyUrl"),
            (r#"{"bearerToken": "t", "colour": 1}"#, "config.colour"),
            (
                r#"{"tlsClientConfig": {"caFile": "/x"}}"#,
                "config.tlsClientConfig.caFile",
            ),
            (
                r#"{"tlsClientConfig": {"caData": "!!"}}"#,
                "config.tlsClientConfig.caData",
            ),
            (r#"{"username": "u"}"#, "config.password"),
            ("{}", "config.bearerToken"),
        ] {
            let e = err(&[server, ("config", config)]);
            assert!(
                e.starts_with(&format!("cluster Secret skewer-system/c: {field}: ")),
                "{config}: {e}"
            );
        }
        assert!(err(&[("config", "{}")]).contains(": server: required"));
        assert!(err(&[server, ("config", "[1]")]).contains("config: not a JSON object"));
        assert!(
            err(&[
                server,
                ("config", "{\"bearerToken\": \"t\"}"),
                ("clusterResources", "yes")
            ])
            .contains("clusterResources: 'yes'")
        );
        assert!(err(&[server, ("config", "{}"), ("extra", "1")]).contains(": extra: unknown key"));
        assert!(err(&[("server", "ftp://x"), ("config", "{}")]).contains("not an http(s) URL"));
        let bad = parse(
            "skewer-system/c",
            &data(&[server, ("config", r#"{"bearerToken": "t"}"#)]),
            Some("team_a"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            bad.starts_with(
                "cluster Secret skewer-system/c: metadata.annotations[skewer.dev/allowed-namespaces]: 'team_a'"
            ),
            "{bad}"
        );
        let default = parse(
            "skewer-system/c",
            &data(&[server, ("config", r#"{"bearerToken": "t"}"#)]),
            None,
        )
        .unwrap();
        assert!(default.allowed.allows("skewer-system") && !default.allowed.allows("team-a"));
    }

    #[test]
    fn the_fingerprint_follows_the_data() {
        let a = data(&[("config", r#"{"bearerToken": "one"}"#)]);
        let b = data(&[("config", r#"{"bearerToken": "two"}"#)]);
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
        assert_ne!(fingerprint(&a), fingerprint(&b));
    }
}
