//! Git over gix: list a remote's refs without fetching, and shallow-fetch one commit's tree.
//!
//! Each source has its own bare repository under the fetcher's work directory, opened in
//! isolation so the host's git configuration never leaks in. gix's network client is blocking:
//! callers on an async runtime run these in `spawn_blocking`.

mod errors;
mod transport;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::artifact::File;
use crate::auth::Auth;
use crate::reference::{RemoteRef, Resolved};

use errors::chain;
pub use errors::{GitError, redact};
use transport::{configure, connected};

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

/// Who made a commit and why: its author (`Name <email>`) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    pub author: String,
    pub message: String,
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
        connected(
            &self.work,
            &mut repo,
            url,
            &specs,
            access,
            "",
            |connection| {
                let options = gix::remote::ref_map::Options {
                    prefix_from_spec_as_filter_on_remote: false,
                    ..Default::default()
                };
                let (map, _handshake) = connection
                    .ref_map(gix::progress::Discard, options)
                    .map_err(|e| chain(&e))?;
                Ok(map.remote_refs.iter().filter_map(to_remote_ref).collect())
            },
        )
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
        connected(
            &self.work,
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

    /// The author and message of a fetched commit (`hex`), for provenance.
    pub fn commit_info(&self, key: &str, hex: &str) -> Result<CommitInfo, GitError> {
        let repo = self.repo(key)?;
        let read = |e: &dyn std::fmt::Display| GitError::Read {
            commit: hex.to_string(),
            message: e.to_string(),
        };
        let id = gix::ObjectId::from_hex(hex.as_bytes()).map_err(|e| read(&e))?;
        let commit = repo.find_commit(id).map_err(|e| read(&e))?;
        let author = commit.author().map_err(|e| read(&e))?;
        let message = commit.message_raw().map_err(|e| read(&e))?;
        Ok(CommitInfo {
            author: format!("{} <{}>", author.name, author.email),
            message: String::from_utf8_lossy(message).trim().to_string(),
        })
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
