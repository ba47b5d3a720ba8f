//! What a push payload says: which repository (every URL the host gives for it) and which ref
//! moved. Read from the fields GitHub, GitLab, Gitea, Gogs and Bitbucket Server put them in, so
//! that a push reconciles the sources of that repository tracking that ref, and a push to
//! another branch reconciles nothing. Pure.

use serde_json::Value;

/// A push: the repository's URLs (normalized) and the ref that moved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Push {
    pub urls: Vec<String>,
    /// `refs/heads/<branch>` or `refs/tags/<tag>`, when the payload names one.
    pub git_ref: Option<String>,
}

/// Where the hosts put the repository's URLs.
const URL_POINTERS: &[&str] = &[
    "/repository/clone_url",
    "/repository/ssh_url",
    "/repository/git_url",
    "/repository/html_url",
    "/repository/url",
    "/repository/git_http_url",
    "/repository/git_ssh_url",
    "/repository/homepage",
    "/project/git_http_url",
    "/project/git_ssh_url",
    "/project/web_url",
];

/// Reads a push payload. `Err` when the body is not JSON; an empty [`Push`] when it names no
/// repository (a registry's payload, a generic hook).
pub fn parse(body: &[u8]) -> Result<Push, &'static str> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Push::default());
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| "the body is not JSON")?;
    let mut urls: Vec<String> = URL_POINTERS
        .iter()
        .filter_map(|p| v.pointer(p).and_then(Value::as_str))
        .map(normalize)
        .collect();
    // Bitbucket Server: repository.links.clone[].href.
    if let Some(clones) = v
        .pointer("/repository/links/clone")
        .and_then(Value::as_array)
    {
        urls.extend(
            clones
                .iter()
                .filter_map(|c| c["href"].as_str())
                .map(normalize),
        );
    }
    urls.sort();
    urls.dedup();
    let git_ref = v["ref"]
        .as_str()
        .or_else(|| v.pointer("/changes/0/ref/id").and_then(Value::as_str))
        .map(str::to_string);
    Ok(Push { urls, git_ref })
}

/// A repository URL as pushes and sources are compared: no scheme, user, port, `.git` or
/// trailing `/`; the host lower-case; `git@host:path` read as `host/path`.
pub fn normalize(url: &str) -> String {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.to_string(),
        // scp-like `user@host:path`.
        None => url.replacen(':', "/", 1),
    };
    let rest = rest.rsplit_once('@').map_or(rest.as_str(), |(_, r)| r);
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = host.split(':').next().unwrap_or(host).to_ascii_lowercase();
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    format!("{host}/{path}")
}

impl Push {
    /// Whether the push is of the repository at `url`.
    pub fn is_of(&self, url: &str) -> bool {
        self.urls.contains(&normalize(url))
    }

    /// Whether a source tracking `branch` (`None`: the default branch or a tag/semver/commit
    /// as `tracks_tags` says) may have moved with this push. A push naming no ref may have
    /// moved anything.
    pub fn moves(&self, branch: Option<&str>, tracks_tags: bool) -> bool {
        match self.git_ref.as_deref() {
            None => true,
            Some(r) => match (r.strip_prefix("refs/heads/"), r.strip_prefix("refs/tags/")) {
                (Some(pushed), _) => branch.is_none_or(|b| b == pushed) && !tracks_tags,
                (_, Some(_)) => tracks_tags,
                _ => true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_compare_whatever_the_scheme_user_or_suffix() {
        let n = normalize("https://GitHub.com/Example/Platform.git/");
        assert_eq!(n, "github.com/Example/Platform");
        assert_eq!(normalize("git@github.com:Example/Platform.git"), n);
        assert_eq!(normalize("ssh://git@github.com:22/Example/Platform"), n);
        assert_eq!(normalize("https://user:pw@github.com/Example/Platform"), n);
    }

    #[test]
    fn each_hosts_push_names_its_repository_and_ref() {
        let github = br#"{"ref": "refs/heads/main", "repository": {"clone_url": "https://github.com/example/platform.git", "ssh_url": "git@github.com:example/platform.git"}}"#;
        let p = parse(github).unwrap();
        assert!(p.is_of("ssh://git@github.com/example/platform"));
        assert_eq!(p.git_ref.as_deref(), Some("refs/heads/main"));
        let gitlab = br#"{"object_kind": "push", "ref": "refs/heads/dev", "project": {"git_http_url": "https://gitlab.example.com/team/app.git"}}"#;
        assert!(
            parse(gitlab)
                .unwrap()
                .is_of("https://gitlab.example.com/team/app")
        );
        let bitbucket = br#"{"eventKey": "repo:refs_changed", "changes": [{"ref": {"id": "refs/heads/main"}}], "repository": {"links": {"clone": [{"href": "ssh://git@bb.example.com:7999/team/app.git", "name": "ssh"}]}}}"#;
        let p = parse(bitbucket).unwrap();
        assert!(p.is_of("https://bb.example.com/team/app.git"));
        assert_eq!(p.git_ref.as_deref(), Some("refs/heads/main"));
        assert_eq!(parse(b"{not json"), Err("the body is not JSON"));
        assert_eq!(parse(b""), Ok(Push::default()));
    }

    #[test]
    fn a_push_to_another_branch_moves_nothing() {
        let push = |r: &str| Push {
            urls: Vec::new(),
            git_ref: Some(r.into()),
        };
        assert!(push("refs/heads/main").moves(Some("main"), false));
        assert!(!push("refs/heads/feature").moves(Some("main"), false));
        assert!(
            push("refs/heads/feature").moves(None, false),
            "the default branch may be it"
        );
        assert!(
            !push("refs/heads/main").moves(None, true),
            "a tag-tracking source"
        );
        assert!(push("refs/tags/v1.2.0").moves(None, true));
        assert!(!push("refs/tags/v1.2.0").moves(Some("main"), false));
        assert!(Push::default().moves(Some("main"), false));
    }
}
