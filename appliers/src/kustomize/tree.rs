//! The files of a source artifact as kustomize sees them: a tree of slash-separated paths
//! relative to the artifact's root. Every path a kustomization names is resolved against its
//! own directory and must stay inside the artifact: `..` that climbs out of it is refused
//! (the artifact holds no symlinks, so nothing else can lead out).

use std::collections::{BTreeMap, BTreeSet};

use crate::load::SourceFile;

/// The names kustomize looks for in a directory, in its order of preference.
pub const KUSTOMIZATION_FILES: [&str; 3] =
    ["kustomization.yaml", "kustomization.yml", "Kustomization"];

pub struct Tree<'a> {
    files: BTreeMap<&'a str, &'a [u8]>,
    dirs: BTreeSet<String>,
}

impl<'a> Tree<'a> {
    pub fn new(files: &'a [SourceFile]) -> Self {
        let mut dirs = BTreeSet::from([String::new()]);
        for f in files {
            let mut path = f.path.as_str();
            while let Some((parent, _)) = path.rsplit_once('/') {
                dirs.insert(parent.to_string());
                path = parent;
            }
        }
        Self {
            files: files
                .iter()
                .map(|f| (f.path.as_str(), f.data.as_slice()))
                .collect(),
            dirs,
        }
    }

    pub fn file(&self, path: &str) -> Option<&'a [u8]> {
        self.files.get(path).copied()
    }

    pub fn is_dir(&self, path: &str) -> bool {
        self.dirs.contains(path)
    }

    /// The kustomization file of directory `dir`, if it has one.
    pub fn kustomization_in(&self, dir: &str) -> Option<String> {
        KUSTOMIZATION_FILES
            .iter()
            .map(|name| join_raw(dir, name))
            .find(|p| self.files.contains_key(p.as_str()))
    }

    /// Files directly in `dir` (not in its subdirectories), sorted.
    pub fn files_in(&self, dir: &str) -> Vec<&'a str> {
        self.files
            .keys()
            .filter(|p| parent(p) == dir)
            .copied()
            .collect()
    }

    /// Subdirectories directly in `dir`, sorted.
    pub fn dirs_in(&self, dir: &str) -> Vec<&str> {
        self.dirs
            .iter()
            .filter(|d| !d.is_empty() && parent(d) == dir)
            .map(String::as_str)
            .collect()
    }
}

/// The directory a path is in (`""` for the root).
pub fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// The last component of a path.
pub fn base_name(path: &str) -> &str {
    path.rsplit_once('/').map_or(path, |(_, b)| b)
}

/// `dir/name`, or `name` at the root; nothing folded.
pub(crate) fn join_raw(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `relative` resolved against directory `dir`: `.` and `..` folded, never above the root.
pub fn resolve(dir: &str, relative: &str) -> Result<String, String> {
    if relative.starts_with('/') {
        return Err(format!(
            "'{relative}' is an absolute path; paths are relative to the kustomization"
        ));
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("'{relative}' leads outside the source"));
                }
            }
            other => parts.push(other),
        }
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(path: &str) -> SourceFile {
        SourceFile {
            path: path.into(),
            data: Vec::new(),
        }
    }

    #[test]
    fn paths_resolve_inside_the_source_only() {
        assert_eq!(resolve("overlays/dev", "../../base"), Ok("base".into()));
        assert_eq!(
            resolve("overlays/dev", "./patch.yaml"),
            Ok("overlays/dev/patch.yaml".into())
        );
        assert_eq!(resolve("", "a/./b/../c"), Ok("a/c".into()));
        assert!(
            resolve("overlays/dev", "../../../etc")
                .unwrap_err()
                .contains("outside the source")
        );
        assert!(resolve("", "/etc/passwd").unwrap_err().contains("absolute"));
    }

    #[test]
    fn directories_and_kustomization_files() {
        let files = [
            f("base/kustomization.yaml"),
            f("base/deploy.yaml"),
            f("overlays/dev/Kustomization"),
            f("top.yaml"),
        ];
        let tree = Tree::new(&files);
        assert!(tree.is_dir("overlays") && tree.is_dir("overlays/dev") && tree.is_dir(""));
        assert!(!tree.is_dir("top.yaml"));
        assert_eq!(
            tree.kustomization_in("base").as_deref(),
            Some("base/kustomization.yaml")
        );
        assert_eq!(
            tree.kustomization_in("overlays/dev").as_deref(),
            Some("overlays/dev/Kustomization")
        );
        assert_eq!(tree.kustomization_in(""), None);
        assert_eq!(tree.files_in(""), ["top.yaml"]);
        assert_eq!(tree.dirs_in(""), ["base", "overlays"]);
    }
}
