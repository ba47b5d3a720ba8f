//! Where a GitRepository may fetch from. Remote URLs go anywhere the network lets them; a
//! local path (`file://` or a bare path) must not reach into skewer's own data directory,
//! where every namespace's fetched sources and artifacts live (a tenant could otherwise read
//! another's), and is refused altogether when skewer runs in a cluster, unless allowed
//! (`--allow-file-urls`): there, local paths are the pod's own files.

use std::path::{Component, Path, PathBuf};

/// Checks `url` (the `spec.url` of a GitRepository); the error names the field.
pub fn check(url: &str, data_dir: &Path, local_allowed: bool) -> Result<(), String> {
    let Some(path) = local_path(url) else {
        return Ok(());
    };
    if !local_allowed {
        return Err(format!(
            "spec.url: '{url}' is a local path, refused when skewer runs in a cluster (--allow-file-urls allows it)"
        ));
    }
    let data = resolved(data_dir);
    let candidates = [
        resolved(&path),
        resolved(Path::new(&percent_decoded(&path))),
    ];
    if candidates.iter().any(|p| p.starts_with(&data)) {
        return Err(format!(
            "spec.url: '{url}' is inside skewer's data directory, which holds every namespace's sources; refused"
        ));
    }
    Ok(())
}

/// The local path a URL names, or `None` for a remote URL.
fn local_path(url: &str) -> Option<PathBuf> {
    if let Some(rest) = url.strip_prefix("file://") {
        // `file://host/path` names a host git ignores; the path starts at the first slash.
        let path = rest.find('/').map_or("/", |i| &rest[i..]);
        return Some(PathBuf::from(path));
    }
    if url.contains("://") {
        return None;
    }
    // scp-like `user@host:path` and `host:path` are SSH; anything else is a path.
    let scp_like = url
        .split_once(':')
        .is_some_and(|(host, _)| !host.is_empty() && !host.contains('/'));
    (!scp_like).then(|| PathBuf::from(url))
}

/// `path` made absolute, with symlinks resolved as far as it exists and `.`/`..` folded.
fn resolved(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    // Resolve the longest prefix that exists (symlinks included), then fold the rest.
    let mut existing = absolute.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut out = std::fs::canonicalize(&existing).unwrap_or(existing);
    for name in rest.into_iter().rev() {
        out.push(name);
    }
    folded(&out)
}

/// `.` and `..` folded lexically.
fn folded(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `%2e`-style escapes decoded (a URL's path may carry them).
fn percent_decoded(path: &Path) -> String {
    let s = path.to_string_lossy();
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_pass() {
        let data = Path::new("/var/lib/skewer");
        for url in [
            "https://git.example.com/org/repo.git",
            "ssh://git@host:22/repo",
            "git@github.com:org/repo",
            "git://127.0.0.1:9418/repo",
        ] {
            assert_eq!(check(url, data, false), Ok(()), "{url}");
        }
    }

    #[test]
    fn the_data_directory_is_refused_however_it_is_spelled() {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        std::fs::create_dir_all(data.join("git/gitrepository/other/src")).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&data, &link).unwrap();
        let d = data.display();
        for url in [
            format!("file://{d}/git/gitrepository/other/src"),
            format!("file://{d}/../data/git"),
            format!("file://{}/git", link.display()),
            format!("file://{d}/%2e%2e/data/git"),
            format!("file://localhost{d}/git"),
            format!("{d}/git/gitrepository/other/src"),
            format!("file://{d}/not/there/yet"),
        ] {
            let err = check(&url, &data, true).unwrap_err();
            assert!(
                err.contains("inside skewer's data directory"),
                "{url}: {err}"
            );
        }
        let elsewhere = tmp.path().join("repos/app");
        assert_eq!(
            check(&format!("file://{}", elsewhere.display()), &data, true),
            Ok(())
        );
    }

    #[test]
    fn local_paths_in_a_cluster_need_permission() {
        let err = check("file:///srv/repo", Path::new("/data"), false).unwrap_err();
        assert!(err.contains("--allow-file-urls"), "{err}");
        assert!(check("./relative/repo", Path::new("/data"), false).is_err());
    }
}
