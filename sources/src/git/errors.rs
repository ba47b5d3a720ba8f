//! What went wrong talking to a Git remote, in words a user can act on. [`classify`] turns
//! the transport's message, whether the server asked for credentials, and `ssh`'s log into
//! one [`GitError`]; it is pure, so every cause is tested without a server.

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

use crate::auth::{Auth, AuthError};

#[derive(Debug, Error)]
pub enum GitError {
    #[error("cannot prepare the local repository {path}: {message}")]
    Local { path: PathBuf, message: String },
    #[error("invalid Git URL '{url}': {message}")]
    Url { url: String, message: String },
    #[error("invalid ref '{specs}': {message}")]
    InvalidRef { specs: String, message: String },
    #[error("{0}")]
    Credentials(#[from] AuthError),
    #[error("{url} requires authentication and no credentials were given (set spec.secretRef)")]
    AuthRequired { url: String },
    #[error("authentication to {url} failed: {message}")]
    AuthFailed { url: String, message: String },
    #[error("host key of {url} is not trusted: {message}")]
    HostKey { url: String, message: String },
    #[error("TLS certificate of {url} is not trusted: {message}")]
    Tls { url: String, message: String },
    #[error("{url} did not answer within {after:?}")]
    Timeout { url: String, after: Duration },
    #[error("cannot list refs of {url}: {message}")]
    ListRefs { url: String, message: String },
    #[error("cannot fetch {what} from {url}: {message}")]
    Fetch {
        url: String,
        what: String,
        message: String,
    },
    #[error("tag '{name}' is a lightweight tag: only annotated tags carry signatures")]
    NotAnnotated { name: String },
    #[error("{commit} cannot be read after fetching: {message}")]
    Read { commit: String, message: String },
}

impl GitError {
    /// Whether the remote refused who we are (or we refused it): credentials missing or
    /// rejected, an untrusted host key or certificate. Fixed by a Secret, not by retrying.
    pub fn is_authentication(&self) -> bool {
        matches!(
            self,
            GitError::Credentials(_)
                | GitError::AuthRequired { .. }
                | GitError::AuthFailed { .. }
                | GitError::HostKey { .. }
                | GitError::Tls { .. }
        )
    }
}

/// What one failed connection left behind, for [`classify`].
pub struct Failed<'a> {
    /// The remote, already [`redact`]ed.
    pub url: String,
    /// Empty when listing refs, else the ref being fetched.
    pub what: &'a str,
    /// The transport's error, with its sources.
    pub message: String,
    /// Whether the server asked for credentials (a rejection always follows a request).
    pub asked: bool,
    pub auth: &'a Auth,
    /// What `ssh` logged (empty for other transports).
    pub ssh_log: &'a str,
    pub timeout: Duration,
}

/// Names the cause of a failed connection.
pub fn classify(f: Failed<'_>) -> GitError {
    let Failed {
        url,
        what,
        message,
        asked,
        auth,
        ssh_log,
        timeout,
    } = f;
    let ssh_lines = || {
        ssh_log
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let lower = message.to_ascii_lowercase();
    let ssh_lower = ssh_log.to_ascii_lowercase();
    if [
        "host key verification failed",
        "remote host identification has changed",
        "host key is known",
    ]
    .iter()
    .any(|m| ssh_lower.contains(m))
    {
        return GitError::HostKey {
            url,
            message: ssh_lines(),
        };
    }
    if ssh_log.contains("Permission denied") {
        return GitError::AuthFailed {
            url,
            message: format!(
                "the server rejected the key in 'identity' ({})",
                ssh_lines()
            ),
        };
    }
    if asked {
        return if auth.basic.is_some() {
            GitError::AuthFailed {
                url,
                message: "the server rejected the username and password".into(),
            }
        } else if auth.bearer_token.is_some() {
            GitError::AuthFailed {
                url,
                message: "the server rejected the bearer token".into(),
            }
        } else {
            GitError::AuthRequired { url }
        };
    }
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        return GitError::Tls { url, message };
    }
    if lower.contains("timed out") || lower.contains("timeout") {
        return GitError::Timeout {
            url,
            after: timeout,
        };
    }
    let message = match ssh_lines() {
        l if l.is_empty() => message,
        l => format!("{message} ({l})"),
    };
    if what.is_empty() {
        GitError::ListRefs { url, message }
    } else {
        GitError::Fetch {
            url,
            what: what.to_string(),
            message,
        }
    }
}

/// The URL with any password in it masked, for messages: `https://user:***@host/repo`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                user.to_string()
            };
            format!("{scheme}://{masked}@{host}{}", &rest[authority_end..])
        }
        None => url.to_string(),
    }
}

/// An error and its sources, `: `-separated, skipping a source already spelled out by its parent.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !out.contains(&text) {
            out = format!("{out}: {text}");
        }
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://git.example.com/org/repo.git";

    fn failed<'a>(message: &str, asked: bool, auth: &'a Auth, ssh_log: &'a str) -> Failed<'a> {
        Failed {
            url: URL.into(),
            what: "",
            message: message.into(),
            asked,
            auth,
            ssh_log,
            timeout: Duration::from_secs(7),
        }
    }

    fn with_basic() -> Auth {
        Auth {
            basic: Some(("bot".into(), "s3cret".into())),
            ..Auth::none()
        }
    }

    fn with_token() -> Auth {
        Auth {
            bearer_token: Some("t0ken".into()),
            ..Auth::none()
        }
    }

    #[test]
    fn a_request_for_credentials_is_missing_or_rejected_credentials() {
        let none = Auth::none();
        let e = classify(failed("HTTP status 401", true, &none, ""));
        assert!(matches!(e, GitError::AuthRequired { .. }), "{e}");
        assert!(e.to_string().contains("spec.secretRef"), "{e}");
        let basic = with_basic();
        let e = classify(failed("HTTP status 401", true, &basic, ""));
        assert!(
            e.to_string().contains("rejected the username and password"),
            "{e}"
        );
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let token = with_token();
        let e = classify(failed("anything", true, &token, ""));
        assert!(e.to_string().contains("rejected the bearer token"), "{e}");
        assert!(e.is_authentication());
    }

    #[test]
    fn a_401_in_the_message_alone_is_not_an_authentication_failure() {
        // A port or a path may contain "401"; only the credential callback says the server asked.
        let none = Auth::none();
        let e = classify(failed(
            "connection refused to 127.0.0.1:4010",
            false,
            &none,
            "",
        ));
        assert!(matches!(e, GitError::ListRefs { .. }), "{e}");
        assert!(!e.is_authentication());
    }

    #[test]
    fn ssh_log_names_host_key_and_key_rejections() {
        let none = Auth::none();
        let log = "Host key verification failed.\n";
        let e = classify(failed("io error", false, &none, log));
        assert!(matches!(e, GitError::HostKey { .. }), "{e}");
        assert!(
            e.to_string().contains("Host key verification failed"),
            "{e}"
        );
        let log = "git@127.0.0.1: Permission denied (publickey).\n";
        let e = classify(failed("io error", false, &none, log));
        assert!(
            e.to_string()
                .contains("rejected the key in 'identity' (git@127.0.0.1: Permission denied"),
            "{e}"
        );
    }

    #[test]
    fn certificates_and_timeouts() {
        let none = Auth::none();
        let e = classify(failed(
            "invalid peer certificate: UnknownIssuer",
            false,
            &none,
            "",
        ));
        assert!(matches!(e, GitError::Tls { .. }), "{e}");
        let e = classify(failed("operation timed out", false, &none, ""));
        assert_eq!(e.to_string(), format!("{URL} did not answer within 7s"));
    }

    #[test]
    fn other_failures_keep_the_transport_message_and_ssh_log() {
        let none = Auth::none();
        let mut f = failed(
            "early EOF",
            false,
            &none,
            "kex_exchange_identification: closed\n",
        );
        f.what = "refs/heads/main";
        let e = classify(f);
        assert_eq!(
            e.to_string(),
            format!(
                "cannot fetch refs/heads/main from {URL}: early EOF (kex_exchange_identification: closed)"
            )
        );
    }

    #[test]
    fn passwords_in_urls_are_masked() {
        assert_eq!(
            redact("https://bot:s3cret@git.example.com/org/repo.git"),
            "https://bot:***@git.example.com/org/repo.git"
        );
        assert_eq!(redact("ssh://git@host:22/repo"), "ssh://git@host:22/repo");
        assert_eq!(redact("https://host/a@b"), "https://host/a@b");
        assert_eq!(redact("git@github.com:org/repo"), "git@github.com:org/repo");
    }

    #[test]
    fn chains_skip_repeated_sources() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "fetch failed: io",
            Some(Box::new(E("io", Some(Box::new(E("reset", None)))))),
        );
        assert_eq!(chain(&e), "fetch failed: io: reset");
    }
}
