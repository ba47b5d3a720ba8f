//! Credentials for reaching a Git remote, read from the keys of a Secret (Flux's key names):
//! `username`/`password` or `bearerToken` for HTTPS, `ca.crt` for a private CA, and
//! `identity` (+ `password` as its passphrase) with `known_hosts` for SSH.
//!
//! Nothing here prints a credential: `Debug` shows which kinds are present, never their values.

use std::collections::BTreeMap;

use thiserror::Error;

#[derive(Debug, Error, PartialEq)]
pub enum AuthError {
    #[error("secret key '{key}' is set but '{needs}' is missing")]
    Incomplete {
        key: &'static str,
        needs: &'static str,
    },
    #[error("secret keys 'username'/'password' and 'bearerToken' cannot be used together")]
    BasicAndBearer,
    #[error("secret key '{key}' is not valid UTF-8")]
    NotUtf8 { key: &'static str },
    #[error("secret key 'identity' cannot be read: {0}")]
    Identity(String),
    #[error("secret key 'ca.crt' holds no PEM certificate")]
    Ca,
    #[error("{scheme} URLs need a secretRef with 'identity' and 'known_hosts'")]
    SshNeedsSecret { scheme: String },
    #[error("credentials are never sent in clear text: use an https:// URL")]
    ClearText,
    #[error("secret keys {keys} do not apply to {scheme} URLs")]
    WrongScheme { keys: String, scheme: String },
}

/// Credentials for one remote. Build it with [`Auth::from_secret_data`].
#[derive(Clone, Default, PartialEq)]
pub struct Auth {
    pub(crate) basic: Option<(String, String)>,
    pub(crate) bearer_token: Option<String>,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) ssh: Option<SshAuth>,
}

/// An SSH key (decrypted, OpenSSH format) and the host keys to trust.
#[derive(Clone, PartialEq)]
pub struct SshAuth {
    pub(crate) identity: Vec<u8>,
    pub(crate) known_hosts: Vec<u8>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("basic", &self.basic.as_ref().map(|(user, _)| user))
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("ca", &self.ca_pem.is_some())
            .field("ssh", &self.ssh.is_some())
            .finish()
    }
}

impl Auth {
    /// No credentials: public repositories.
    pub fn none() -> Self {
        Self::default()
    }

    /// Reads the keys of a Secret's `data`. A key that is present but unusable is an error naming
    /// the key, never silently skipped.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, AuthError> {
        let text = |key: &'static str| -> Result<Option<String>, AuthError> {
            data.get(key)
                .map(|v| String::from_utf8(v.clone()).map_err(|_| AuthError::NotUtf8 { key }))
                .transpose()
        };
        let mut auth = Auth::default();
        let password = text("password")?;
        let identity = data.get("identity");
        match (text("username")?, &password, identity) {
            (Some(user), Some(pass), None) => auth.basic = Some((user, pass.clone())),
            (Some(_), None, None) => {
                return Err(AuthError::Incomplete {
                    key: "username",
                    needs: "password",
                });
            }
            (None, Some(_), None) => {
                return Err(AuthError::Incomplete {
                    key: "password",
                    needs: "username",
                });
            }
            _ => {}
        }
        auth.bearer_token = text("bearerToken")?;
        if auth.basic.is_some() && auth.bearer_token.is_some() {
            return Err(AuthError::BasicAndBearer);
        }
        if let Some(ca) = data.get("ca.crt") {
            if !String::from_utf8_lossy(ca).contains("-----BEGIN CERTIFICATE-----") {
                return Err(AuthError::Ca);
            }
            auth.ca_pem = Some(ca.clone());
        }
        match (identity, data.get("known_hosts")) {
            (Some(identity), Some(known_hosts)) => {
                auth.ssh = Some(SshAuth {
                    identity: decrypt_identity(identity, password.as_deref())?,
                    known_hosts: known_hosts.clone(),
                });
            }
            (Some(_), None) => {
                return Err(AuthError::Incomplete {
                    key: "identity",
                    needs: "known_hosts",
                });
            }
            (None, Some(_)) => {
                return Err(AuthError::Incomplete {
                    key: "known_hosts",
                    needs: "identity",
                });
            }
            (None, None) => {}
        }
        Ok(auth)
    }

    /// Checks that these credentials fit the URL's scheme: SSH needs a key and host keys, and
    /// HTTP credentials are not silently dropped on an SSH URL (or the reverse).
    pub fn check_scheme(&self, url: &str) -> Result<(), AuthError> {
        let scheme = scheme_of(url);
        let http_keys = [
            ("'username'/'password'", self.basic.is_some()),
            ("'bearerToken'", self.bearer_token.is_some()),
            ("'ca.crt'", self.ca_pem.is_some()),
        ];
        let unused = |keys: &[(&str, bool)]| {
            keys.iter()
                .filter(|(_, set)| *set)
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", ")
        };
        match scheme.as_str() {
            "ssh" => {
                if self.ssh.is_none() {
                    return Err(AuthError::SshNeedsSecret { scheme });
                }
                let keys = unused(&http_keys);
                if !keys.is_empty() {
                    return Err(AuthError::WrongScheme { keys, scheme });
                }
            }
            _ if self.ssh.is_some() => {
                return Err(AuthError::WrongScheme {
                    keys: "'identity', 'known_hosts'".into(),
                    scheme,
                });
            }
            "http" if self.basic.is_some() || self.bearer_token.is_some() => {
                return Err(AuthError::ClearText);
            }
            "http" | "https" => {}
            _ => {
                let keys = unused(&http_keys);
                if !keys.is_empty() {
                    return Err(AuthError::WrongScheme { keys, scheme });
                }
            }
        }
        Ok(())
    }
}

/// `ssh` for `ssh://…` and scp-like `user@host:path`, else the URL's scheme.
pub fn scheme_of(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, _)) => scheme.to_ascii_lowercase(),
        None if url.contains(':') && !url.starts_with('/') => "ssh".into(),
        None => "file".into(),
    }
}

/// The identity in OpenSSH format, decrypted with the passphrase when it has one, so that
/// `ssh` never prompts.
fn decrypt_identity(identity: &[u8], passphrase: Option<&str>) -> Result<Vec<u8>, AuthError> {
    let key = ssh_key::PrivateKey::from_openssh(identity)
        .map_err(|e| AuthError::Identity(format!("not an OpenSSH private key ({e})")))?;
    if !key.is_encrypted() {
        return Ok(identity.to_vec());
    }
    let passphrase = passphrase.ok_or(AuthError::Incomplete {
        key: "identity",
        needs: "password",
    })?;
    let key = key.decrypt(passphrase).map_err(|_| {
        AuthError::Identity("the passphrase in 'password' does not decrypt it".into())
    })?;
    let pem = key
        .to_openssh(ssh_key::LineEnding::LF)
        .map_err(|e| AuthError::Identity(e.to_string()))?;
    Ok(pem.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    // An unencrypted ed25519 key made for this test only.
    const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACAqgCq+4ynMIRdDwdU9jE12xYKs6P7lOKjcT2L9yRZ0cQAAAJDpa87v6WvO
7wAAAAtzc2gtZWQyNTUxOQAAACAqgCq+4ynMIRdDwdU9jE12xYKs6P7lOKjcT2L9yRZ0cQ
AAAEANUQQwlayrpJSCvvks4v8ei+m16MVGKweg0/TU9kf3kSqAKr7jKcwhF0PB1T2MTXbF
gqzo/uU4qNxPYv3JFnRxAAAACnVuaXQtdGVzdHMBAgM=
-----END OPENSSH PRIVATE KEY-----
";

    #[test]
    fn basic_bearer_and_ca() {
        let a = Auth::from_secret_data(&data(&[("username", "u"), ("password", "p")])).unwrap();
        assert_eq!(a.basic, Some(("u".into(), "p".into())));
        let a = Auth::from_secret_data(&data(&[("bearerToken", "t")])).unwrap();
        assert_eq!(a.bearer_token.as_deref(), Some("t"));
        assert!(format!("{a:?}").contains("<redacted>"));
        assert!(!format!("{a:?}").contains("\"t\""));
        assert_eq!(
            Auth::from_secret_data(&data(&[("username", "u")])),
            Err(AuthError::Incomplete {
                key: "username",
                needs: "password"
            })
        );
        assert_eq!(
            Auth::from_secret_data(&data(&[
                ("username", "u"),
                ("password", "p"),
                ("bearerToken", "t")
            ])),
            Err(AuthError::BasicAndBearer)
        );
        assert_eq!(
            Auth::from_secret_data(&data(&[("ca.crt", "nope")])),
            Err(AuthError::Ca)
        );
    }

    #[test]
    fn ssh_needs_a_readable_key_and_known_hosts() {
        let a = Auth::from_secret_data(&data(&[("identity", KEY), ("known_hosts", "h")])).unwrap();
        assert!(a.ssh.is_some());
        assert!(a.check_scheme("ssh://git@127.0.0.1:2222/r.git").is_ok());
        assert!(a.check_scheme("git@github.com:org/repo.git").is_ok());
        assert!(matches!(
            a.check_scheme("https://example.com/r.git"),
            Err(AuthError::WrongScheme { .. })
        ));
        assert_eq!(
            Auth::from_secret_data(&data(&[("identity", KEY)])),
            Err(AuthError::Incomplete {
                key: "identity",
                needs: "known_hosts"
            })
        );
        assert!(matches!(
            Auth::from_secret_data(&data(&[("identity", "junk"), ("known_hosts", "h")])),
            Err(AuthError::Identity(_))
        ));
        assert_eq!(
            Auth::none().check_scheme("ssh://h/r"),
            Err(AuthError::SshNeedsSecret {
                scheme: "ssh".into()
            })
        );
        let basic = Auth::from_secret_data(&data(&[("username", "u"), ("password", "p")])).unwrap();
        assert!(matches!(
            basic.check_scheme("git://h/r"),
            Err(AuthError::WrongScheme { .. })
        ));
        assert!(basic.check_scheme("https://h/r").is_ok());
        assert_eq!(basic.check_scheme("http://h/r"), Err(AuthError::ClearText));
    }
}
