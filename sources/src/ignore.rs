//! Which files of a revision go into its artifact: gitignore-syntax rules, as Flux applies
//! them. Without `spec.ignore`, a default list leaves out VCS files, CI folders and common
//! non-manifest files; `spec.ignore` replaces that list. `.sourceignore` files in the
//! repository apply to their own directory and below; `spec.ignore` comes last, so it can
//! re-include what they exclude.

use std::path::Path;

use gix::bstr::BStr;
use gix_ignore::Search;
use gix_ignore::glob::pattern::Case;
use gix_ignore::search::Ignore;

use crate::artifact::File;

/// The exclusions that apply when `spec.ignore` is not set.
pub const DEFAULT_EXCLUDES: &str = "\
# VCS
.git/
.gitignore
.gitmodules
.gitattributes
# Non-manifest files
*.jpg
*.jpeg
*.gif
*.png
*.wmv
*.flv
*.tar.gz
*.zip
# CI
.github/
.circleci/
.travis.yml
.gitlab-ci.yml
appveyor.yml
.drone.yml
cloudbuild.yaml
codeship-services.yml
codeship-steps.yml
# Tool configuration
**/.goreleaser.yml
**/.sops.yaml
**/.flux.yaml
";

pub const SOURCEIGNORE: &str = ".sourceignore";

/// Keeps the files that no rule excludes.
pub fn filter(files: Vec<File>, spec_ignore: Option<&str>) -> Vec<File> {
    let mut search = Search::default();
    let mut add = |bytes: &[u8], source: &str, root: Option<&Path>| {
        // Reading from memory cannot fail.
        let _ = search.add_patterns_buffer(bytes, source, root, Ignore::default());
    };
    if spec_ignore.is_none() {
        add(DEFAULT_EXCLUDES.as_bytes(), "<default exclusions>", None);
    }
    let mut sourceignores: Vec<&File> = files
        .iter()
        .filter(|f| f.path.rsplit('/').next() == Some(SOURCEIGNORE))
        .collect();
    // Parents first, so that deeper files can override them.
    sourceignores.sort_by_key(|f| f.path.matches('/').count());
    for f in sourceignores {
        add(&f.data, &f.path, Some(Path::new("")));
    }
    if let Some(rules) = spec_ignore {
        add(rules.as_bytes(), "<spec.ignore>", None);
    }
    files
        .into_iter()
        .filter(|f| !ignored(&search, &f.path))
        .collect()
}

fn excluded(search: &Search, path: &str, is_dir: bool) -> bool {
    search
        .pattern_matching_relative_path(BStr::new(path), Some(is_dir), Case::Sensitive)
        .is_some_and(|m| !m.pattern.is_negative())
}

/// A file is ignored when it, or any directory above it, is excluded (as in git, a file
/// cannot be re-included from an excluded directory).
fn ignored(search: &Search, path: &str) -> bool {
    let mut dirs = path.match_indices('/').map(|(i, _)| &path[..i]);
    dirs.any(|d| excluded(search, d, true)) || excluded(search, path, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> Vec<File> {
        paths
            .iter()
            .map(|p| File {
                path: p.to_string(),
                executable: false,
                data: Vec::new(),
            })
            .collect()
    }

    fn kept(files: Vec<File>, spec: Option<&str>) -> Vec<String> {
        filter(files, spec).into_iter().map(|f| f.path).collect()
    }

    #[test]
    fn defaults_drop_vcs_ci_and_binaries() {
        let got = kept(
            files(&[
                "apps/a.yaml",
                ".github/workflows/ci.yml",
                "logo.png",
                ".gitignore",
                "deep/.sops.yaml",
                "README.md",
            ]),
            None,
        );
        assert_eq!(got, ["apps/a.yaml", "README.md"]);
    }

    #[test]
    fn spec_ignore_replaces_the_defaults() {
        let got = kept(
            files(&["apps/a.yaml", "logo.png", "docs/x.yaml"]),
            Some("/docs/\n"),
        );
        assert_eq!(got, ["apps/a.yaml", "logo.png"]);
    }

    #[test]
    fn sourceignore_applies_below_its_directory_and_spec_can_reinclude() {
        let mut fs = files(&[
            "apps/a.yaml",
            "apps/tests/t.yaml",
            "other/tests/t.yaml",
            "apps/secret.yaml",
        ]);
        fs.push(File {
            path: "apps/.sourceignore".into(),
            executable: false,
            data: b"tests/\nsecret.yaml\n".to_vec(),
        });
        let got = kept(fs.clone(), None);
        assert_eq!(
            got,
            ["apps/a.yaml", "other/tests/t.yaml", "apps/.sourceignore"]
        );
        let got = kept(fs, Some("!secret.yaml\n"));
        assert!(got.contains(&"apps/secret.yaml".to_string()), "{got:?}");
    }

    #[test]
    fn negation_inside_one_list() {
        let got = kept(
            files(&["a.yaml", "b.yaml", "c.txt"]),
            Some("*.yaml\n!b.yaml\n"),
        );
        assert_eq!(got, ["b.yaml", "c.txt"]);
    }
}
