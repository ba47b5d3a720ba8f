//! Repository credentials in Argo CD's layout: Secrets labeled
//! `argocd.argoproj.io/secret-type: repository` (one repository, by `url`) or `repo-creds` (a
//! template for every repository whose URL starts with `url`), or the same values of
//! `skewer.dev/secret-type`. The repository Secret of the exact URL wins, else the template with
//! the longest matching prefix. Their keys become [`Auth`]; the ones skewer cannot honour are
//! refused by name. Pure.

use std::collections::BTreeMap;

use thiserror::Error;

use crate::auth::{Auth, AuthError};
use crate::dockerconfig::Login;

/// The label keys whose value says what a Secret is.
pub const LABELS: [&str; 2] = ["argocd.argoproj.io/secret-type", "skewer.dev/secret-type"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Repository,
    Template,
}

impl Kind {
    /// The kind a label value names.
    pub fn of_label(value: &str) -> Option<Self> {
        match value {
            "repository" => Some(Kind::Repository),
            "repo-creds" => Some(Kind::Template),
            _ => None,
        }
    }
}

/// One labeled Secret: its `namespace/name`, kind and data.
#[derive(Debug, Clone)]
pub struct CredSecret {
    pub name: String,
    pub kind: Kind,
    pub data: BTreeMap<String, Vec<u8>>,
}

#[derive(Debug, Error, PartialEq)]
pub enum CredsError {
    #[error("repository Secret {secret}: key '{key}' is not supported: {why}")]
    Unsupported {
        secret: String,
        key: String,
        why: &'static str,
    },
    #[error("repository Secret {secret}: {error}")]
    Auth { secret: String, error: AuthError },
}

/// A URL as repositories are compared: no trailing `/` or `.git`, scheme and host lower-case.
fn normalize(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    let url = url.strip_suffix(".git").unwrap_or(url);
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
            format!(
                "{}://{}/{path}",
                scheme.to_ascii_lowercase(),
                host.to_ascii_lowercase()
            )
        }
        None => url.to_string(),
    }
}

/// The Secret that holds the credentials of `url`, if any.
pub fn pick<'a>(secrets: &'a [CredSecret], url: &str) -> Option<&'a CredSecret> {
    let wanted = normalize(url);
    let url_of = |s: &CredSecret| {
        s.data
            .get("url")
            .map(|u| normalize(&String::from_utf8_lossy(u)))
    };
    let exact = secrets
        .iter()
        .filter(|s| s.kind == Kind::Repository)
        .find(|s| url_of(s).as_deref() == Some(wanted.as_str()));
    exact.or_else(|| {
        secrets
            .iter()
            .filter(|s| s.kind == Kind::Template)
            .filter_map(|s| {
                let prefix = url_of(s)?;
                wanted
                    .starts_with(prefix.trim_end_matches('/'))
                    .then_some((prefix.len(), s))
            })
            .max_by_key(|(len, _)| *len)
            .map(|(_, s)| s)
    })
}

/// The credentials of an Argo CD repository Secret: `username`/`password`, `bearerToken`,
/// `sshPrivateKey` (with a `known_hosts` key, which Argo CD keeps in a ConfigMap instead).
pub fn auth(secret: &CredSecret) -> Result<Auth, CredsError> {
    let unsupported = |key: &str, why| CredsError::Unsupported {
        secret: secret.name.clone(),
        key: key.into(),
        why,
    };
    let mut data = BTreeMap::new();
    for (key, value) in &secret.data {
        let true_ = String::from_utf8_lossy(value).trim() == "true";
        match key.as_str() {
            "url" | "name" | "project" | "type" | "enableLFS" | "forceHttpBasicAuth" => {}
            "username" | "password" | "bearerToken" | "known_hosts" => {
                data.insert(key.clone(), value.clone());
            }
            "sshPrivateKey" => {
                data.insert("identity".into(), value.clone());
            }
            "insecure" | "insecureIgnoreHostKey" if !true_ => {}
            "insecure" | "insecureIgnoreHostKey" => {
                return Err(unsupported(
                    key,
                    "skewer always verifies the server (give a known_hosts key, or the CA in ca.crt)",
                ));
            }
            "ca.crt" => {
                data.insert(key.clone(), value.clone());
            }
            "tlsClientCertData" | "tlsClientCertKey" => {
                return Err(unsupported(key, "client certificates are not supported"));
            }
            "githubAppID"
            | "githubAppInstallationID"
            | "githubAppPrivateKey"
            | "githubAppEnterpriseBaseUrl" => {
                return Err(unsupported(key, "GitHub App credentials are not supported"));
            }
            "gcpServiceAccountKey" => {
                return Err(unsupported(key, "cloud credentials are not supported"));
            }
            "proxy" | "noProxy" => {
                return Err(unsupported(key, "per-repository proxies are not supported"));
            }
            _ => return Err(unsupported(key, "unknown key")),
        }
    }
    if data.contains_key("identity") && !data.contains_key("known_hosts") {
        return Err(unsupported(
            "sshPrivateKey",
            "needs a 'known_hosts' key beside it: skewer verifies SSH host keys",
        ));
    }
    Auth::from_secret_data(&data).map_err(|error| CredsError::Auth {
        secret: secret.name.clone(),
        error,
    })
}

/// The login (and whether the registry speaks plain HTTP) of an Argo CD repository Secret for
/// an OCI repository: `username`/`password`, `insecureOCIForceHttp`.
pub fn oci_access(secret: &CredSecret) -> Result<(Option<Login>, bool), CredsError> {
    let text = |key: &str| {
        secret
            .data
            .get(key)
            .map(|v| String::from_utf8_lossy(v).trim().to_string())
    };
    for key in secret.data.keys() {
        match key.as_str() {
            "url"
            | "name"
            | "project"
            | "type"
            | "enableOCI"
            | "username"
            | "password"
            | "insecureOCIForceHttp" => {}
            other => {
                return Err(CredsError::Unsupported {
                    secret: secret.name.clone(),
                    key: other.into(),
                    why: "not read for OCI repositories (username, password, insecureOCIForceHttp)",
                });
            }
        }
    }
    let login = match (text("username"), text("password")) {
        (Some(username), Some(password)) => Some(Login { username, password }),
        (None, None) => None,
        _ => {
            return Err(CredsError::Auth {
                secret: secret.name.clone(),
                error: AuthError::Incomplete {
                    key: "username",
                    needs: "password",
                },
            });
        }
    };
    Ok((
        login,
        text("insecureOCIForceHttp").as_deref() == Some("true"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, kind: Kind, pairs: &[(&str, &str)]) -> CredSecret {
        CredSecret {
            name: name.into(),
            kind,
            data: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        }
    }

    #[test]
    fn the_exact_repository_wins_then_the_longest_template() {
        let secrets = [
            secret(
                "argocd/org",
                Kind::Template,
                &[("url", "https://git.example.com/org")],
            ),
            secret(
                "argocd/team",
                Kind::Template,
                &[("url", "https://git.example.com/org/team")],
            ),
            secret(
                "argocd/platform",
                Kind::Repository,
                &[("url", "https://git.example.com/org/team/platform.git")],
            ),
        ];
        let name = |url: &str| pick(&secrets, url).map(|s| s.name.as_str());
        assert_eq!(
            name("https://GIT.example.com/org/team/platform"),
            Some("argocd/platform")
        );
        assert_eq!(
            name("https://git.example.com/org/team/other.git"),
            Some("argocd/team")
        );
        assert_eq!(name("https://git.example.com/org/x"), Some("argocd/org"));
        assert_eq!(name("https://elsewhere.example.com/org/x"), None);
    }

    #[test]
    fn argo_cd_keys_become_credentials_and_the_rest_is_refused_by_name() {
        let ok = secret(
            "argocd/r",
            Kind::Repository,
            &[
                ("url", "https://g/x"),
                ("type", "git"),
                ("username", "u"),
                ("password", "p"),
            ],
        );
        assert!(auth(&ok).is_ok());
        for (key, value) in [
            ("tlsClientCertData", "x"),
            ("githubAppID", "1"),
            ("insecure", "true"),
            ("sshPrivateKey", "x"),
            ("surprise", "x"),
        ] {
            let s = secret(
                "argocd/r",
                Kind::Repository,
                &[("url", "https://g/x"), (key, value)],
            );
            let e = auth(&s).unwrap_err().to_string();
            assert!(
                e.contains(&format!("'{key}'")) && e.contains("argocd/r"),
                "{e}"
            );
        }
        let half = secret("argocd/r", Kind::Repository, &[("username", "u")]);
        assert!(matches!(auth(&half), Err(CredsError::Auth { .. })));
    }

    #[test]
    fn oci_repositories_take_a_login_and_plain_http_by_argo_cds_keys() {
        let s = secret(
            "argocd/oci",
            Kind::Template,
            &[
                ("url", "oci://registry.example.com/team"),
                ("type", "oci"),
                ("username", "u"),
                ("password", "p"),
                ("insecureOCIForceHttp", "true"),
            ],
        );
        let (login, insecure) = oci_access(&s).unwrap();
        assert_eq!(login.map(|l| l.username), Some("u".into()));
        assert!(insecure);
        let s = secret("argocd/oci", Kind::Template, &[("sshPrivateKey", "x")]);
        let e = oci_access(&s).unwrap_err().to_string();
        assert!(e.contains("'sshPrivateKey'"), "{e}");
    }
}
