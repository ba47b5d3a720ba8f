//! Artifacts: a revision's files as a reproducible `.tar.gz`, named by its sha256 digest,
//! kept in a [`Store`] on disk with old revisions garbage-collected.
//!
//! Reproducible means the same files give the same bytes: entries sorted by path, owner and
//! times zeroed, modes reduced to 0644/0755, and a gzip header without a timestamp.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};
use thiserror::Error;

/// A file of a revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Slash-separated path relative to the repository root.
    pub path: String,
    pub executable: bool,
    pub data: Vec<u8>,
}

/// A stored artifact, as reported in a source's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub revision: String,
    /// `sha256:<hex>` of the tarball.
    pub digest: String,
    pub size: u64,
    pub path: PathBuf,
}

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("artifact store {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("artifact {path} is corrupt: digest is {actual}, expected {expected}")]
    Digest {
        path: PathBuf,
        expected: String,
        actual: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Packs files into a reproducible tar.gz. Returns the bytes and their `sha256:` digest.
pub fn pack(files: &[File]) -> (Vec<u8>, String) {
    let mut sorted: Vec<&File> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), Compression::new(6));
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    for file in sorted {
        let mut header = tar::Header::new_gnu();
        header.set_size(file.data.len() as u64);
        header.set_mode(if file.executable { 0o755 } else { 0o644 });
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        header.set_entry_type(tar::EntryType::Regular);
        // Writing into a Vec cannot fail; a path tar cannot encode (absurdly long) is skipped
        // by append_data's error, which we surface as a panic-free skip.
        if tar
            .append_data(&mut header, &file.path, file.data.as_slice())
            .is_err()
        {
            tracing::warn!(path = %file.path, "path cannot be stored in a tar archive; skipped");
        }
    }
    let bytes = tar
        .into_inner()
        .and_then(|gz| gz.finish())
        .unwrap_or_default();
    let digest = digest_of(&bytes);
    (bytes, digest)
}

/// `sha256:<hex>` of some bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Unpacks a tarball made by [`pack`] into files.
pub fn unpack(bytes: &[u8]) -> io::Result<Vec<File>> {
    unpack_where(bytes, |_| true)
}

/// Unpacks only the files whose path `keep` accepts (the others are skipped unread).
pub fn unpack_where(bytes: &[u8], keep: impl Fn(&str) -> bool) -> io::Result<Vec<File>> {
    let mut archive = tar::Archive::new(GzDecoder::new(bytes));
    let mut files = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path()?.to_string_lossy().into_owned();
        if !keep(&path) {
            continue;
        }
        let executable = entry.header().mode()? & 0o111 != 0;
        let mut data = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut data)?;
        files.push(File {
            path,
            executable,
            data,
        });
    }
    Ok(files)
}

/// Artifacts on disk: `<root>/<key>/<digest-hex>.tar.gz`, where key names the source
/// (like `gitrepository/<namespace>/<name>`).
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn dir(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// Packs and stores files as the artifact of `revision`; returns its description.
    pub fn put(&self, key: &str, revision: &str, files: &[File]) -> Result<Artifact, StoreError> {
        let (bytes, digest) = pack(files);
        self.put_packed(key, revision, &bytes, digest)
    }

    /// Stores `bytes`, a `.tar.gz` already packed (and checked) elsewhere, with their `digest`.
    pub fn put_packed(
        &self,
        key: &str,
        revision: &str,
        bytes: &[u8],
        digest: String,
    ) -> Result<Artifact, StoreError> {
        let dir = self.dir(key);
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let path = dir.join(format!("{}.tar.gz", digest.trim_start_matches("sha256:")));
        if !path.exists() {
            // Write then rename, so a crash never leaves a half-written artifact under its digest.
            let tmp = dir.join(format!(".tmp-{}", std::process::id()));
            let mut f = fs::File::create(&tmp).map_err(io_err(&tmp))?;
            f.write_all(bytes).map_err(io_err(&tmp))?;
            f.sync_all().map_err(io_err(&tmp))?;
            fs::rename(&tmp, &path).map_err(io_err(&path))?;
        }
        Ok(Artifact {
            revision: revision.to_string(),
            digest,
            size: bytes.len() as u64,
            path,
        })
    }

    /// The path an artifact with this digest has, whether or not it exists.
    pub fn path_of(&self, key: &str, digest: &str) -> PathBuf {
        self.dir(key)
            .join(format!("{}.tar.gz", digest.trim_start_matches("sha256:")))
    }

    /// Reads an artifact and checks its digest; returns its files.
    pub fn get(&self, key: &str, digest: &str) -> Result<Vec<File>, StoreError> {
        self.get_under(key, digest, "")
    }

    /// Like [`Store::get`], but returns only the files under directory `dir` (all for "").
    pub fn get_under(&self, key: &str, digest: &str, dir: &str) -> Result<Vec<File>, StoreError> {
        let path = self.path_of(key, digest);
        let bytes = fs::read(&path).map_err(io_err(&path))?;
        let actual = digest_of(&bytes);
        if actual != digest {
            return Err(StoreError::Digest {
                path,
                expected: digest.into(),
                actual,
            });
        }
        let dir = dir.trim_matches('/');
        let prefix = format!("{dir}/");
        unpack_where(&bytes, |p| dir.is_empty() || p.starts_with(&prefix)).map_err(io_err(&path))
    }

    /// Deletes every artifact of `key` but the one with digest `keep`.
    pub fn gc(&self, key: &str, keep: &str) -> Result<usize, StoreError> {
        let dir = self.dir(key);
        let keep = self.path_of(key, keep);
        let mut removed = 0;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        for entry in entries {
            let path = entry.map_err(io_err(&dir))?.path();
            if path != keep && path.extension().is_some_and(|e| e == "gz") {
                fs::remove_file(&path).map_err(io_err(&path))?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<File> {
        vec![
            File {
                path: "b/x.yaml".into(),
                executable: false,
                data: b"kind: X\n".to_vec(),
            },
            File {
                path: "a.yaml".into(),
                executable: true,
                data: b"kind: A\n".to_vec(),
            },
        ]
    }

    #[test]
    fn pack_is_reproducible_and_order_independent() {
        let (a, da) = pack(&files());
        let mut rev = files();
        rev.reverse();
        let (b, db) = pack(&rev);
        assert_eq!(a, b);
        assert_eq!(da, db);
        assert!(da.starts_with("sha256:") && da.len() == 7 + 64);
    }

    #[test]
    fn content_changes_the_digest() {
        let mut changed = files();
        changed[0].data.push(b'#');
        assert_ne!(pack(&files()).1, pack(&changed).1);
    }

    #[test]
    fn store_roundtrip_and_gc() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let one = store.put("git/ns/a", "main@sha1:1", &files()).unwrap();
        let two = store.put("git/ns/a", "main@sha1:2", &files()[..1]).unwrap();
        let mut got = store.get("git/ns/a", &one.digest).unwrap();
        got.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(got[0].path, "a.yaml");
        assert!(got[0].executable);
        let under_b = store.get_under("git/ns/a", &one.digest, "b").unwrap();
        assert_eq!(under_b.len(), 1);
        assert_eq!(under_b[0].path, "b/x.yaml");
        assert_eq!(store.gc("git/ns/a", &two.digest).unwrap(), 1);
        assert!(store.get("git/ns/a", &one.digest).is_err());
        assert!(store.get("git/ns/a", &two.digest).is_ok());
    }

    #[test]
    fn tampered_artifact_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let a = store.put("k", "r", &files()).unwrap();
        fs::write(&a.path, b"not a tarball").unwrap();
        assert!(matches!(
            store.get("k", &a.digest),
            Err(StoreError::Digest { .. })
        ));
    }
}
