//! Git over gix: list a remote's refs without fetching, and shallow-fetch one commit's tree.
//!
//! Each source has its own bare repository under the fetcher's work directory, opened in
//! isolation so the host's git configuration never leaks in. gix's network client is blocking:
//! callers on an async runtime run these in `spawn_blocking`.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use gix::remote::Direction;
use thiserror::Error;

use crate::artifact::File;
use crate::reference::{RemoteRef, Resolved};

#[derive(Debug, Error)]
pub enum GitError {
    #[error("cannot prepare the local repository {path}: {message}")]
    Local { path: PathBuf, message: String },
    #[error("invalid Git URL '{url}': {message}")]
    Url { url: String, message: String },
    #[error("invalid ref '{specs}': {message}")]
    InvalidRef { specs: String, message: String },
    #[error("cannot list refs of {url}: {message}")]
    ListRefs { url: String, message: String },
    #[error("cannot fetch {what} from {url}: {message}")]
    Fetch {
        url: String,
        what: String,
        message: String,
    },
    #[error("commit {commit} cannot be read after fetching: {message}")]
    Read { commit: String, message: String },
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
    pub fn list_remote(&self, key: &str, url: &str) -> Result<Vec<RemoteRef>, GitError> {
        let repo = self.repo(key)?;
        let list = |e: &dyn std::fmt::Display| GitError::ListRefs {
            url: url.to_string(),
            message: e.to_string(),
        };
        let remote = remote(
            &repo,
            url,
            &[
                "+refs/*:refs/remotes/origin/*",
                "+HEAD:refs/remotes/origin/HEAD",
            ],
        )?;
        let connection = remote.connect(Direction::Fetch).map_err(|e| list(&e))?;
        let options = gix::remote::ref_map::Options {
            prefix_from_spec_as_filter_on_remote: false,
            ..Default::default()
        };
        let (map, _handshake) = connection
            .ref_map(gix::progress::Discard, options)
            .map_err(|e| list(&e))?;
        Ok(map.remote_refs.iter().filter_map(to_remote_ref).collect())
    }

    /// Shallow-fetches the resolved commit and returns the files of its tree.
    pub fn fetch(&self, key: &str, url: &str, resolved: &Resolved) -> Result<Vec<File>, GitError> {
        let repo = self.repo(key)?;
        let what = resolved
            .fetch_ref
            .clone()
            .unwrap_or_else(|| resolved.commit.clone());
        let fetch_err = |e: &dyn std::fmt::Display| GitError::Fetch {
            url: url.to_string(),
            what: what.clone(),
            message: e.to_string(),
        };
        let spec = format!("+{what}:{LOCAL_REF}");
        let remote = remote(&repo, url, &[spec.as_str()])?;
        let depth = std::num::NonZeroU32::MIN;
        remote
            .connect(Direction::Fetch)
            .map_err(|e| fetch_err(&e))?
            .prepare_fetch(gix::progress::Discard, Default::default())
            .map_err(|e| fetch_err(&e))?
            .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth))
            .receive(gix::progress::Discard, &AtomicBool::new(false))
            .map_err(|e| fetch_err(&e))?;
        read_tree(&repo, &resolved.commit)
    }
}

/// An anonymous remote at `url` that fetches exactly `specs` (no implied tags).
fn remote<'r>(
    repo: &'r gix::Repository,
    url: &str,
    specs: &[&str],
) -> Result<gix::Remote<'r>, GitError> {
    repo.remote_at(url)
        .map_err(|e| GitError::Url {
            url: url.into(),
            message: e.to_string(),
        })?
        .with_fetch_tags(gix::remote::fetch::Tags::None)
        .with_refspecs(specs.iter().copied(), Direction::Fetch)
        .map_err(|e| GitError::InvalidRef {
            specs: specs.join(" "),
            message: e.to_string(),
        })
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
