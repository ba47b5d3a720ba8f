//! Git over gix: list a remote's refs without fetching, and shallow-fetch one commit's tree.
//!
//! Each source has its own bare repository under the fetcher's work directory, opened in
//! isolation so the host's git configuration never leaks in. gix's network client is blocking:
//! callers on an async runtime run these in `spawn_blocking`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gix::remote::Direction;
use thiserror::Error;

use crate::artifact::File;
use crate::auth::{Auth, AuthError, SshAuth, scheme_of};
use crate::reference::{RemoteRef, Resolved};

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

/// A fetched object whose signature is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signed {
    /// A commit id (hex).
    Commit(String),
    /// The annotated tag of this name, as last fetched.
    Tag(String),
}

impl std::fmt::Display for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signed::Commit(id) => write!(f, "commit {}", id.get(..12).unwrap_or(id)),
            Signed::Tag(name) => write!(f, "tag '{name}'"),
        }
    }
}

/// A signature (if any) and the exact bytes it signs.
#[derive(Debug, Clone)]
pub struct SignedPayload {
    pub signature: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// How to reach a remote: its credentials, and a bound on each network operation.
#[derive(Debug, Clone)]
pub struct Access {
    pub auth: Auth,
    pub timeout: Duration,
}

impl Default for Access {
    fn default() -> Self {
        Self {
            auth: Auth::none(),
            timeout: Duration::from_secs(60),
        }
    }
}

/// Fetches Git repositories into bare repositories under a work directory.
#[derive(Debug, Clone)]
pub struct GitFetcher {
    work: PathBuf,
}

/// The ref every fetch writes to, so the fetched commit stays reachable in the local repo.
const LOCAL_REF: &str = "refs/skewer/fetched";

impl GitFetcher {
    pub fn new(work: impl Into<PathBuf>) -> Self {
        Self { work: work.into() }
    }

    fn repo(&self, key: &str) -> Result<gix::Repository, GitError> {
        let path = self.work.join(key);
        let local = |e: &dyn std::fmt::Display| GitError::Local {
            path: path.clone(),
            message: e.to_string(),
        };
        let open = gix::open::Options::isolated();
        if path.join("HEAD").exists() {
            gix::open_opts(&path, open).map_err(|e| local(&e))
        } else {
            std::fs::create_dir_all(&path).map_err(|e| local(&e))?;
            gix::ThreadSafeRepository::init_opts(
                &path,
                gix::create::Kind::Bare,
                gix::create::Options::default(),
                open,
            )
            .map(Into::into)
            .map_err(|e| local(&e))
        }
    }

    /// Lists the refs the remote advertises (one round trip, nothing fetched).
    pub fn list_remote(
        &self,
        key: &str,
        url: &str,
        access: &Access,
    ) -> Result<Vec<RemoteRef>, GitError> {
        let specs = [
            "+refs/*:refs/remotes/origin/*",
            "+HEAD:refs/remotes/origin/HEAD",
        ];
        let mut repo = self.repo(key)?;
        // Protocol v1 advertises every ref in its first response: one round trip, where v2
        // needs a second request (ls-refs) and, over git:// and SSH, waits out a delayed ACK.
        configure(&mut repo, &[(&gix::config::tree::Protocol::VERSION, "1")]).map_err(
            |message| GitError::Local {
                path: self.work.join(key),
                message,
            },
        )?;
        self.connected(&mut repo, url, &specs, access, "", |connection| {
            let options = gix::remote::ref_map::Options {
                prefix_from_spec_as_filter_on_remote: false,
                ..Default::default()
            };
            let (map, _handshake) = connection
                .ref_map(gix::progress::Discard, options)
                .map_err(|e| chain(&e))?;
            Ok(map.remote_refs.iter().filter_map(to_remote_ref).collect())
        })
    }

    /// Shallow-fetches the resolved commit and returns the files of its tree.
    pub fn fetch(
        &self,
        key: &str,
        url: &str,
        resolved: &Resolved,
        access: &Access,
    ) -> Result<Vec<File>, GitError> {
        let what = resolved
            .fetch_ref
            .clone()
            .unwrap_or_else(|| resolved.commit.clone());
        let spec = format!("+{what}:{LOCAL_REF}");
        let mut repo = self.repo(key)?;
        self.connected(
            &mut repo,
            url,
            &[spec.as_str()],
            access,
            &what,
            |connection| {
                let depth = std::num::NonZeroU32::MIN;
                connection
                    .prepare_fetch(gix::progress::Discard, Default::default())
                    .map_err(|e| chain(&e))?
                    .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth))
                    .receive(gix::progress::Discard, &AtomicBool::new(false))
                    .map_err(|e| chain(&e))?;
                Ok(())
            },
        )?;
        read_tree(&repo, &resolved.commit)
    }

    /// The signature and signed bytes of a fetched commit, or of the annotated tag the last
    /// fetch wrote (its ref pointed at a tag object).
    pub fn signed(&self, key: &str, object: &Signed) -> Result<SignedPayload, GitError> {
        let repo = self.repo(key)?;
        let read = |e: &dyn std::fmt::Display| GitError::Read {
            commit: object.to_string(),
            message: e.to_string(),
        };
        match object {
            Signed::Commit(hex) => {
                let id = gix::ObjectId::from_hex(hex.as_bytes()).map_err(|e| read(&e))?;
                let commit = repo.find_commit(id).map_err(|e| read(&e))?;
                match commit.signature().map_err(|e| read(&e))? {
                    Some((sig, data)) => Ok(SignedPayload {
                        signature: Some(sig.to_vec()),
                        payload: data.to_bstring().to_vec(),
                    }),
                    None => Ok(SignedPayload {
                        signature: None,
                        payload: commit.data.clone(),
                    }),
                }
            }
            Signed::Tag(name) => {
                let id = repo
                    .find_reference(LOCAL_REF)
                    .map_err(|e| read(&e))?
                    .target()
                    .try_id()
                    .map(ToOwned::to_owned)
                    .ok_or_else(|| read(&"the fetched ref is symbolic"))?;
                let found = repo.find_object(id).map_err(|e| read(&e))?;
                if found.kind != gix::object::Kind::Tag {
                    return Err(GitError::NotAnnotated { name: name.clone() });
                }
                let (payload, signature) = crate::verify::split_tag_signature(&found.data);
                Ok(SignedPayload { signature, payload })
            }
        }
    }

    /// Connects to `url` with `access` applied (credentials, CA, SSH key and host keys,
    /// timeouts), runs `op`, and turns a failure into the error that says what went wrong:
    /// missing or rejected credentials, an untrusted host key or certificate, a timeout.
    /// `what` is empty when listing refs, else the ref being fetched.
    fn connected<T>(
        &self,
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
            Some(ssh) => Some(SshSession::start(&self.work, ssh, access.timeout, repo)?),
            None => None,
        };
        let transport = http_options(repo, url, access)?;
        let remote = remote(repo, url, specs)?;
        let asked = Arc::new(AtomicBool::new(false));
        let result = remote
            .connect(Direction::Fetch)
            .map_err(|e| chain(&e))
            .and_then(|connection| {
                let mut connection = connection
                    .with_credentials(credentials(access.auth.basic.clone(), asked.clone()));
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
        Err(classify(
            url,
            what,
            message,
            asked.load(Ordering::Relaxed),
            &access.auth,
            &ssh_log,
            access.timeout,
        ))
    }
}

/// Sets configuration `values` on this open repository only (nothing is written to disk).
fn configure(
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
fn chain(error: &dyn std::error::Error) -> String {
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

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

/// Names the cause of a failed connection, from the transport's message, whether the server
/// asked for credentials, and `ssh`'s log.
fn classify(
    url: String,
    what: &str,
    message: String,
    asked: bool,
    auth: &Auth,
    ssh_log: &str,
    timeout: Duration,
) -> GitError {
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

fn to_remote_ref(r: &gix::protocol::handshake::Ref) -> Option<RemoteRef> {
    use gix::protocol::handshake::Ref;
    // Annotated tags arrive peeled: `object` is the commit either way.
    let (name, object, symref_target) = match r {
        Ref::Direct {
            full_ref_name,
            object,
        }
        | Ref::Peeled {
            full_ref_name,
            object,
            ..
        } => (full_ref_name, object, None),
        Ref::Symbolic {
            full_ref_name,
            target,
            object,
            ..
        } => (full_ref_name, object, Some(target.to_string())),
        Ref::Unborn { .. } => return None,
    };
    Some(RemoteRef {
        name: name.to_string(),
        commit: object.to_string(),
        symref_target,
    })
}

/// Reads every blob of a commit's tree, with slash-separated paths.
fn read_tree(repo: &gix::Repository, commit: &str) -> Result<Vec<File>, GitError> {
    let read = |e: &dyn std::fmt::Display| GitError::Read {
        commit: commit.to_string(),
        message: e.to_string(),
    };
    let id = gix::ObjectId::from_hex(commit.as_bytes()).map_err(|e| read(&e))?;
    let tree = repo
        .find_commit(id)
        .map_err(|e| read(&e))?
        .tree()
        .map_err(|e| read(&e))?;
    let mut recorder = gix::traverse::tree::Recorder::default();
    tree.traverse()
        .breadthfirst(&mut recorder)
        .map_err(|e| read(&e))?;
    let mut files = Vec::new();
    for entry in recorder.records {
        if !entry.mode.is_blob() {
            continue;
        }
        let blob = repo.find_blob(entry.oid).map_err(|e| read(&e))?;
        files.push(File {
            path: entry.filepath.to_string(),
            executable: entry.mode.is_executable(),
            data: blob.detach().data,
        });
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
