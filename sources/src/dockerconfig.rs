//! Registry credentials from a `kubernetes.io/dockerconfigjson` Secret (key
//! `.dockerconfigjson`), as `docker login` and `kubectl create secret docker-registry` write
//! them: `auths.<registry>.auth` (base64 of `user:password`) or `username` and `password`.
//! Pure; `Debug` never shows a password.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;
use thiserror::Error;

/// The key of a `kubernetes.io/dockerconfigjson` Secret.
pub const KEY: &str = ".dockerconfigjson";

/// A user name and password for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DockerConfigError {
    #[error("the Secret has no key '{KEY}' (a kubernetes.io/dockerconfigjson Secret)")]
    Missing,
    #[error("{KEY}: not JSON: {0}")]
    NotJson(String),
    #[error("{KEY}: auths.{registry}.{field}: {why}")]
    Entry {
        registry: String,
        field: &'static str,
        why: &'static str,
    },
}

/// The login for registry `host` (like `ghcr.io` or `127.0.0.1:5000`), if the Secret has one.
pub fn login_for(
    data: &BTreeMap<String, Vec<u8>>,
    host: &str,
) -> Result<Option<Login>, DockerConfigError> {
    let raw = data.get(KEY).ok_or(DockerConfigError::Missing)?;
    let config: Value =
        serde_json::from_slice(raw).map_err(|e| DockerConfigError::NotJson(e.to_string()))?;
    let Some(auths) = config.get("auths").and_then(Value::as_object) else {
        return Ok(None);
    };
    let wanted = canonical(host);
    let Some((registry, entry)) = auths.iter().find(|(k, _)| canonical(k) == wanted) else {
        return Ok(None);
    };
    let bad = |field, why| DockerConfigError::Entry {
        registry: registry.clone(),
        field,
        why,
    };
    if entry.get("identitytoken").is_some() {
        return Err(bad(
            "identitytoken",
            "OAuth2 refresh tokens are not supported; use a user name and password or token",
        ));
    }
    let text = |field: &'static str| match entry.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(bad(field, "not a string")),
    };
    if let Some(auth) = text("auth")? {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| bad("auth", "not base64"))?;
        let decoded = String::from_utf8(decoded).map_err(|_| bad("auth", "not UTF-8"))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| bad("auth", "not base64 of user:password"))?;
        return Ok(Some(Login {
            username: username.into(),
            password: password.into(),
        }));
    }
    match (text("username")?, text("password")?) {
        (Some(username), Some(password)) => Ok(Some(Login { username, password })),
        (None, None) => Err(bad("auth", "no credentials in the entry")),
        _ => Err(bad("password", "username and password go together")),
    }
}

/// A registry as written in a Docker config, reduced to its host: the scheme and any path go,
/// and Docker Hub's aliases are one.
fn canonical(registry: &str) -> String {
    let host = registry
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = host
        .split('/')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".into()
        }
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(json: &str) -> BTreeMap<String, Vec<u8>> {
        [(KEY.to_string(), json.as_bytes().to_vec())].into()
    }

    #[test]
    fn logins_are_found_however_the_registry_is_written() {
        let auth = base64::engine::general_purpose::STANDARD.encode("ci:s3cret");
        let data = secret(&format!(
            r#"{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{auth}"}}, "127.0.0.1:5000": {{"username": "u", "password": "p"}}}}}}"#
        ));
        let hub = login_for(&data, "docker.io").unwrap().unwrap();
        assert_eq!(
            (hub.username.as_str(), hub.password.as_str()),
            ("ci", "s3cret")
        );
        assert!(!format!("{hub:?}").contains("s3cret"));
        let local = login_for(&data, "127.0.0.1:5000").unwrap().unwrap();
        assert_eq!(local.username, "u");
        assert_eq!(login_for(&data, "ghcr.io"), Ok(None));
    }

    #[test]
    fn what_cannot_be_used_is_named() {
        let e = |json: &str| login_for(&secret(json), "r.io").unwrap_err().to_string();
        assert_eq!(
            e(r#"{"auths": {"r.io": {"auth": "!!"}}}"#),
            ".dockerconfigjson: auths.r.io.auth: not base64"
        );
        assert_eq!(
            e(r#"{"auths": {"r.io": {"username": "u"}}}"#),
            ".dockerconfigjson: auths.r.io.password: username and password go together"
        );
        assert!(e(r#"{"auths": {"r.io": {"identitytoken": "t"}}}"#).contains("identitytoken"));
        assert!(e("{").starts_with(".dockerconfigjson: not JSON"));
        assert_eq!(
            login_for(&BTreeMap::new(), "r.io"),
            Err(DockerConfigError::Missing)
        );
    }
}
