//! Reaching a remote: credentials answered from the Secret only, the bearer token and private
//! CA on HTTP(S), a throwaway key and known-hosts file for `ssh`, a timeout on every network
//! operation, and a failed connection turned into the error that names its cause.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gix::remote::Direction;

use super::Access;
use super::errors::{Failed, GitError, chain, classify, redact};
use crate::auth::{AuthError, SshAuth, scheme_of};

/// Connects to `url` with `access` applied (credentials, CA, SSH key and host keys,
/// timeouts), runs `op`, and turns a failure into the error that says what went wrong:
/// missing or rejected credentials, an untrusted host key or certificate, a timeout.
/// `what` is empty when listing refs, else the ref being fetched.
pub(super) fn connected<T>(
    work: &Path,
    repo: &mut gix::Repository,
    url: &str,
    specs: &[&str],
    access: &Access,
    what: &str,
    op: impl FnOnce(
        gix::remote::Connection<
            '_,
            '_,
            '_,
            Box<dyn gix::protocol::transport::client::blocking_io::Transport + Send>,
        >,
    ) -> Result<T, String>,
) -> Result<T, GitError> {
    access.auth.check_scheme(url)?;
    let ssh = match &access.auth.ssh {
        Some(ssh) => Some(SshSession::start(work, ssh, access.timeout, repo)?),
        None => None,
    };
    let transport = http_options(repo, url, access)?;
    let remote = remote(repo, url, specs)?;
    let asked = Arc::new(AtomicBool::new(false));
    let result = remote
        .connect(Direction::Fetch)
        .map_err(|e| chain(&e))
        .and_then(|connection| {
            let mut connection =
                connection.with_credentials(credentials(access.auth.basic.clone(), asked.clone()));
            if let Some(options) = transport {
                connection = connection.with_transport_options(options);
            }
            op(connection)
        });
    let message = match result {
        Ok(v) => return Ok(v),
        Err(message) => message,
    };
    let url = redact(url);
    let ssh_log = ssh.as_ref().map(SshSession::log).unwrap_or_default();
    Err(classify(Failed {
        url,
        what,
        message,
        asked: asked.load(Ordering::Relaxed),
        auth: &access.auth,
        ssh_log: &ssh_log,
        timeout: access.timeout,
    }))
}

/// Sets configuration `values` on this open repository only (nothing is written to disk).
pub(super) fn configure(
    repo: &mut gix::Repository,
    values: &[(&'static dyn gix::config::tree::Key, &str)],
) -> Result<(), String> {
    let mut config = repo.config_snapshot_mut();
    for (key, value) in values {
        config.set_value(*key, *value).map_err(|e| e.to_string())?;
    }
    config.commit().map(|_| ()).map_err(|e| e.to_string())
}

/// An anonymous remote at `url` that fetches exactly `specs` (no implied tags).
fn remote<'r>(
    repo: &'r gix::Repository,
    url: &str,
    specs: &[&str],
) -> Result<gix::Remote<'r>, GitError> {
    repo.remote_at(url)
        .map_err(|e| GitError::Url {
            url: redact(url),
            message: e.to_string(),
        })?
        .with_fetch_tags(gix::remote::fetch::Tags::None)
        .with_refspecs(specs.iter().copied(), Direction::Fetch)
        .map_err(|e| GitError::InvalidRef {
            specs: specs.join(" "),
            message: e.to_string(),
        })
}

/// Answers the transport's credential requests from the Secret (never from a prompt or the
/// host's credential helpers), and records in `asked` that the server wanted credentials (a
/// rejection always follows a request), to tell "no credentials" from "wrong ones".
fn credentials(
    basic: Option<(String, String)>,
    asked: Arc<AtomicBool>,
) -> impl FnMut(
    gix::credentials::helper::Action,
) -> gix::Result<Option<gix::credentials::protocol::Outcome>> {
    use gix::credentials::helper::Action;
    move |action| match action {
        Action::Get(context) => {
            asked.store(true, Ordering::Relaxed);
            Ok(basic
                .as_ref()
                .map(|(username, password)| gix::credentials::protocol::Outcome {
                    identity: gix::sec::identity::Account {
                        username: username.clone(),
                        password: password.clone(),
                        oauth_refresh_token: None,
                    },
                    next: context.into(),
                }))
        }
        Action::Erase(_) | Action::Store(_) => Ok(None),
    }
}

/// HTTP transport options: the bearer token header, the Secret's CA added to the trusted
/// roots, and the timeout on every request (connecting included).
fn http_options(
    repo: &gix::Repository,
    url: &str,
    access: &Access,
) -> Result<Option<Box<dyn std::any::Any>>, GitError> {
    use gix::protocol::transport::client::blocking_io::http;
    if !matches!(scheme_of(url).as_str(), "http" | "https") {
        return Ok(None);
    }
    let configured = repo
        .transport_options(url, None)
        .map_err(|e| GitError::Url {
            url: redact(url),
            message: e.to_string(),
        })?;
    let mut options = configured
        .and_then(|o| o.downcast::<http::Options>().ok())
        .map(|o| *o)
        .unwrap_or_default();
    if let Some(token) = &access.auth.bearer_token {
        options
            .extra_headers
            .push(format!("Authorization: Bearer {token}"));
    }
    let certs = match &access.auth.ca_pem {
        Some(pem) => reqwest::Certificate::from_pem_bundle(pem).map_err(|_| AuthError::Ca)?,
        None => Vec::new(),
    };
    let timeout = access.timeout;
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder| {
            Ok(builder.timeout(timeout).tls_certs_merge(certs.clone()))
        })),
        configure_request: None,
    };
    options.backend = Some(Arc::new(Mutex::new(backend)));
    Ok(Some(Box::new(options)))
}

/// The key and known hosts written for one SSH connection (removed on drop), and the `ssh`
/// command that uses only them: no agent, no user or system configuration, strict host key
/// checking, no prompts, and bounded by the timeout.
struct SshSession {
    dir: tempfile::TempDir,
}

impl SshSession {
    fn start(
        work: &Path,
        ssh: &SshAuth,
        timeout: Duration,
        repo: &mut gix::Repository,
    ) -> Result<Self, GitError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let local = |e: &dyn std::fmt::Display| GitError::Local {
            path: work.to_path_buf(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(work).map_err(|e| local(&e))?;
        let dir = tempfile::Builder::new()
            .prefix("ssh-")
            .tempdir_in(work)
            .map_err(|e| local(&e))?;
        let identity = dir.path().join("identity");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&identity)
            .and_then(|mut f| f.write_all(&ssh.identity))
            .map_err(|e| local(&e))?;
        let known_hosts = dir.path().join("known_hosts");
        std::fs::write(&known_hosts, &ssh.known_hosts).map_err(|e| local(&e))?;
        let log = dir.path().join("log");
        let secs = timeout.as_secs().max(1);
        let command = format!(
            "timeout --kill-after=2 {secs} ssh -F /dev/null -o IdentitiesOnly=yes -o IdentityAgent=none \
             -o IdentityFile={} -o UserKnownHostsFile={} -o GlobalKnownHostsFile=/dev/null \
             -o StrictHostKeyChecking=yes -o UpdateHostKeys=no -o BatchMode=yes -o ConnectTimeout={secs} -E {}",
            shell_quote(&identity),
            shell_quote(&known_hosts),
            shell_quote(&log),
        );
        configure(
            repo,
            &[
                (&gix::config::tree::Core::SSH_COMMAND, command.as_str()),
                (&gix::config::tree::Ssh::VARIANT, "ssh"),
            ],
        )
        .map_err(|e| local(&e))?;
        Ok(Self { dir })
    }

    /// What `ssh` logged: why a connection was refused.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}
