//! Which commit a GitRepository's `ref` means, given the refs a remote advertises.
//!
//! Pure: the remote's ref list goes in, the chosen commit and its Flux-style revision string
//! (`main@sha1:<hex>`, `v1.0@sha1:<hex>`, `sha1:<hex>`) come out. Precedence follows Flux:
//! `commit`, then `name`, then `semver`, then `tag`, then `branch`; no ref at all means the
//! remote's HEAD.

use thiserror::Error;

/// The `ref` of a GitRepository.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitRefSpec {
    pub branch: Option<String>,
    pub tag: Option<String>,
    /// A version constraint: the highest tag that satisfies it, like `>=1.2.0 <2.0.0`.
    pub semver: Option<String>,
    pub name: Option<String>,
    pub commit: Option<String>,
}

/// One ref as a remote advertises it, with annotated tags peeled to the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRef {
    /// Full name, like `refs/heads/main`, or `HEAD`.
    pub name: String,
    /// The commit the ref ends at (after peeling annotated tags).
    pub commit: String,
    /// For `HEAD`: the ref it points to, like `refs/heads/main`.
    pub symref_target: Option<String>,
}

/// The outcome of resolving a ref: what to fetch and how to name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The full ref name to fetch, or `None` when fetching a bare commit id.
    pub fetch_ref: Option<String>,
    /// The commit the artifact is built from (hex).
    pub commit: String,
    /// The revision as Flux writes it.
    pub revision: String,
}

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum RefError {
    #[error("branch '{0}' not found on the remote")]
    BranchNotFound(String),
    #[error("tag '{0}' not found on the remote")]
    TagNotFound(String),
    #[error("ref '{0}' not found on the remote")]
    NameNotFound(String),
    #[error("no tag on the remote satisfies semver '{0}'")]
    NoSemverMatch(String),
    #[error("semver '{constraint}' is not a version constraint: {message}")]
    BadSemver { constraint: String, message: String },
    #[error("the remote has no HEAD: it is empty or its default branch is unborn")]
    NoHead,
    #[error("commit '{0}' is not a hexadecimal object id")]
    BadCommit(String),
    #[error(
        "targetRevision '{0}' is no branch, tag or commit of the repository, nor a version range its tags satisfy"
    )]
    TargetRevisionNotFound(String),
}

impl GitRefSpec {
    /// Resolves this spec against the refs the remote advertises.
    pub fn resolve(&self, remote: &[RemoteRef]) -> Result<Resolved, RefError> {
        let find = |full: &str| remote.iter().find(|r| r.name == full);
        if let Some(commit) = &self.commit {
            if commit.is_empty() || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(RefError::BadCommit(commit.clone()));
            }
            let commit = commit.to_ascii_lowercase();
            return Ok(match &self.branch {
                // With a branch, fetch the branch (the commit must be in its history) and name
                // the revision after it, as Flux does.
                Some(branch) => Resolved {
                    fetch_ref: Some(format!("refs/heads/{branch}")),
                    revision: format!("{branch}@sha1:{commit}"),
                    commit,
                },
                None => Resolved {
                    fetch_ref: None,
                    revision: format!("sha1:{commit}"),
                    commit,
                },
            });
        }
        if let Some(name) = &self.name {
            let r = find(name).ok_or_else(|| RefError::NameNotFound(name.clone()))?;
            return Ok(named(name, name, &r.commit));
        }
        if let Some(constraint) = &self.semver {
            let tags = remote
                .iter()
                .filter_map(|r| r.name.strip_prefix("refs/tags/"));
            let tag = highest_matching(constraint, tags)?
                .ok_or_else(|| RefError::NoSemverMatch(constraint.clone()))?;
            let full = format!("refs/tags/{tag}");
            let r = find(&full).ok_or_else(|| RefError::TagNotFound(tag.to_string()))?;
            return Ok(named(&full, tag, &r.commit));
        }
        if let Some(tag) = &self.tag {
            let full = format!("refs/tags/{tag}");
            let r = find(&full).ok_or_else(|| RefError::TagNotFound(tag.clone()))?;
            return Ok(named(&full, tag, &r.commit));
        }
        if let Some(branch) = &self.branch {
            let full = format!("refs/heads/{branch}");
            let r = find(&full).ok_or_else(|| RefError::BranchNotFound(branch.clone()))?;
            return Ok(named(&full, branch, &r.commit));
        }
        let head = find("HEAD").ok_or(RefError::NoHead)?;
        match &head.symref_target {
            Some(target) => {
                let short = target.strip_prefix("refs/heads/").unwrap_or(target);
                Ok(named(target, short, &head.commit))
            }
            None => Ok(named("HEAD", "HEAD", &head.commit)),
        }
    }
}

impl GitRefSpec {
    /// What an Argo CD `targetRevision` means, given the refs the remote advertises: `HEAD`
    /// (or nothing) the remote's HEAD, a full commit id that commit, else a branch of that
    /// name, else a tag, else a version range over the tags (as Argo CD reads `1.2.*` or
    /// `>=1.0.0`).
    pub fn from_target_revision(target: &str, remote: &[RemoteRef]) -> Result<Self, RefError> {
        let target = target.trim();
        let has = |full: String| remote.iter().any(|r| r.name == full);
        let spec = if target.is_empty() || target == "HEAD" {
            GitRefSpec::default()
        } else if target.len() == 40 && target.bytes().all(|b| b.is_ascii_hexdigit()) {
            GitRefSpec {
                commit: Some(target.into()),
                ..Default::default()
            }
        } else if let Some(full) = target.strip_prefix("refs/") {
            GitRefSpec {
                name: Some(format!("refs/{full}")),
                ..Default::default()
            }
        } else if has(format!("refs/heads/{target}")) {
            GitRefSpec {
                branch: Some(target.into()),
                ..Default::default()
            }
        } else if has(format!("refs/tags/{target}")) {
            GitRefSpec {
                tag: Some(target.into()),
                ..Default::default()
            }
        } else if semver::VersionReq::parse(target.trim_start_matches('v')).is_ok()
            && target.bytes().any(|b| b"*^~<>=xX".contains(&b))
        {
            GitRefSpec {
                semver: Some(target.into()),
                ..Default::default()
            }
        } else {
            return Err(RefError::TargetRevisionNotFound(target.into()));
        };
        Ok(spec)
    }
}

/// The highest version among `tags` (a leading `v` allowed; tags that are not versions are
/// skipped) that satisfies `constraint`, Flux's way of following a semver range.
pub fn highest_matching<'a>(
    constraint: &str,
    tags: impl IntoIterator<Item = &'a str>,
) -> Result<Option<&'a str>, RefError> {
    let req = parse_constraint(constraint)?;
    Ok(tags
        .into_iter()
        .filter_map(|tag| {
            let version = semver::Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()?;
            req.matches(&version).then_some((version, tag))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, tag)| tag))
}

/// Compiles a regular expression from a user's spec with a bound on the memory it may take
/// (1 MiB compiled): a hostile pattern is an error, not a gigabyte.
pub fn bounded_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| format!("'{pattern}' is not a valid regular expression: {e}"))
}

/// Parses a constraint as Flux users write it: comparators separated by spaces or commas
/// (`>=1.2.0 <2.0.0`, `~1.2`, `1.x`).
fn parse_constraint(constraint: &str) -> Result<semver::VersionReq, RefError> {
    let mut parts: Vec<String> = Vec::new();
    for token in constraint.split([',', ' ']).filter(|t| !t.is_empty()) {
        // A bare operator followed by a space (`>= 1.2.0`) belongs to the next token.
        match parts.last_mut() {
            Some(last) if last.chars().all(|c| "<>=~^".contains(c)) => last.push_str(token),
            _ => parts.push(token.to_string()),
        }
    }
    semver::VersionReq::parse(&parts.join(", ")).map_err(|e| RefError::BadSemver {
        constraint: constraint.to_string(),
        message: e.to_string(),
    })
}

fn named(full: &str, short: &str, commit: &str) -> Resolved {
    Resolved {
        fetch_ref: Some(full.to_string()),
        commit: commit.to_string(),
        revision: format!("{short}@sha1:{commit}"),
    }
}

/// The commit id at the end of a revision string (`main@sha1:abc` → `abc`).
pub fn revision_commit(revision: &str) -> Option<&str> {
    revision.rsplit_once("sha1:").map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argo_cd_target_revisions_resolve_as_argo_cd_reads_them() {
        let remote = [
            RemoteRef {
                name: "HEAD".into(),
                commit: "a".repeat(40),
                symref_target: Some("refs/heads/main".into()),
            },
            RemoteRef {
                name: "refs/heads/main".into(),
                commit: "a".repeat(40),
                symref_target: None,
            },
            RemoteRef {
                name: "refs/tags/v1.2.3".into(),
                commit: "b".repeat(40),
                symref_target: None,
            },
        ];
        let resolve = |t: &str| {
            GitRefSpec::from_target_revision(t, &remote)
                .and_then(|s| s.resolve(&remote))
                .map(|r| r.revision)
        };
        let a = "a".repeat(40);
        assert_eq!(resolve("HEAD").unwrap(), format!("main@sha1:{a}"));
        assert_eq!(resolve("").unwrap(), format!("main@sha1:{a}"));
        assert_eq!(resolve("main").unwrap(), format!("main@sha1:{a}"));
        assert_eq!(
            resolve("v1.2.3").unwrap(),
            format!("v1.2.3@sha1:{}", "b".repeat(40))
        );
        assert_eq!(
            resolve("1.2.*").unwrap(),
            format!("v1.2.3@sha1:{}", "b".repeat(40))
        );
        let c = "c".repeat(40);
        assert_eq!(resolve(&c).unwrap(), format!("sha1:{c}"));
        assert_eq!(
            resolve("refs/heads/main").unwrap(),
            format!("refs/heads/main@sha1:{a}")
        );
        assert_eq!(
            resolve("nope"),
            Err(RefError::TargetRevisionNotFound("nope".into()))
        );
    }

    fn remote() -> Vec<RemoteRef> {
        let r = |name: &str, commit: &str| RemoteRef {
            name: name.into(),
            commit: commit.into(),
            symref_target: None,
        };
        vec![
            RemoteRef {
                name: "HEAD".into(),
                commit: "aaa1".into(),
                symref_target: Some("refs/heads/main".into()),
            },
            r("refs/heads/main", "aaa1"),
            r("refs/heads/dev", "bbb2"),
            r("refs/tags/v1.0.0", "ccc3"),
            r("refs/pull/42/head", "ddd4"),
        ]
    }

    #[test]
    fn default_is_remote_head_named_after_its_branch() {
        let got = GitRefSpec::default().resolve(&remote()).unwrap();
        assert_eq!(got.revision, "main@sha1:aaa1");
        assert_eq!(got.fetch_ref.as_deref(), Some("refs/heads/main"));
    }

    #[test]
    fn precedence_commit_then_name_then_tag_then_branch() {
        let all = GitRefSpec {
            branch: Some("dev".into()),
            tag: Some("v1.0.0".into()),
            semver: None,
            name: Some("refs/pull/42/head".into()),
            commit: Some("ABC".into()),
        };
        let got = all.resolve(&remote()).unwrap();
        assert_eq!(got.revision, "dev@sha1:abc");
        let no_commit = GitRefSpec {
            commit: None,
            ..all.clone()
        };
        assert_eq!(
            no_commit.resolve(&remote()).unwrap().revision,
            "refs/pull/42/head@sha1:ddd4"
        );
        let tag_branch = GitRefSpec {
            name: None,
            ..no_commit
        };
        assert_eq!(
            tag_branch.resolve(&remote()).unwrap().revision,
            "v1.0.0@sha1:ccc3"
        );
    }

    #[test]
    fn bare_commit_has_no_ref_to_fetch() {
        let spec = GitRefSpec {
            commit: Some("abc123".into()),
            ..Default::default()
        };
        let got = spec.resolve(&remote()).unwrap();
        assert_eq!(got.fetch_ref, None);
        assert_eq!(got.revision, "sha1:abc123");
    }

    #[test]
    fn missing_refs_are_named_in_the_error() {
        let spec = GitRefSpec {
            branch: Some("nope".into()),
            ..Default::default()
        };
        assert_eq!(
            spec.resolve(&remote()),
            Err(RefError::BranchNotFound("nope".into()))
        );
        let spec = GitRefSpec {
            commit: Some("xyz".into()),
            ..Default::default()
        };
        assert_eq!(
            spec.resolve(&remote()),
            Err(RefError::BadCommit("xyz".into()))
        );
        assert_eq!(GitRefSpec::default().resolve(&[]), Err(RefError::NoHead));
    }

    #[test]
    fn revision_commit_takes_the_id() {
        assert_eq!(revision_commit("main@sha1:abc"), Some("abc"));
        assert_eq!(revision_commit("sha1:abc"), Some("abc"));
        assert_eq!(revision_commit("garbage"), None);
    }

    #[test]
    fn semver_picks_the_highest_matching_tag() {
        let r = |name: &str, commit: &str| RemoteRef {
            name: name.into(),
            commit: commit.into(),
            symref_target: None,
        };
        let remote = vec![
            r("refs/tags/v1.2.0", "a"),
            r("refs/tags/v1.10.1", "b"),
            r("refs/tags/2.0.0", "c"),
            r("refs/tags/not-a-version", "d"),
            r("refs/tags/v1.11.0-rc.1", "e"),
            r("refs/heads/main", "f"),
        ];
        let spec = |c: &str| GitRefSpec {
            semver: Some(c.into()),
            tag: Some("v1.2.0".into()),
            ..Default::default()
        };
        assert_eq!(
            spec(">=1.2.0 <2.0.0").resolve(&remote).unwrap().revision,
            "v1.10.1@sha1:b",
            "semver wins over tag"
        );
        assert_eq!(
            spec(">= 1.0, < 2").resolve(&remote).unwrap().revision,
            "v1.10.1@sha1:b"
        );
        assert_eq!(spec("*").resolve(&remote).unwrap().revision, "2.0.0@sha1:c");
        assert_eq!(
            spec("~1.2").resolve(&remote).unwrap().revision,
            "v1.2.0@sha1:a"
        );
        assert_eq!(
            spec(">=3").resolve(&remote),
            Err(RefError::NoSemverMatch(">=3".into()))
        );
        assert!(matches!(
            spec("not a range").resolve(&remote),
            Err(RefError::BadSemver { .. })
        ));
    }
}
