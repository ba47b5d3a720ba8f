//! What each Provider type sends: the request (URL, headers, body) for one event, built from
//! the Provider's spec and its Secret. Pure; `deliver` does the I/O.
//!
//! Commit statuses go to the revision's commit with Flux's context naming
//! (`kustomization/<name>/<first part of the Provider's uid>`): `pending` when a sync starts,
//! `success` or `failure` when it ends. The API's address is derived from the repository's
//! as Flux derives it: `api.github.com` for github.com and `<host>/api/v3` for GitHub
//! Enterprise, `<host>/api/v4` for GitLab, `<host>/api/v1` for Gitea, `<host>/rest/api/latest`
//! for Bitbucket Server.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::event::{Event, Phase, Severity, commit_of};
use crate::api::notification::ProviderSpec;

/// GitHub refuses longer descriptions; the others are cut to the same length.
const MAX_DESCRIPTION: usize = 140;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    GitHub,
    GitLab,
    Gitea,
    BitbucketServer,
    Slack,
    MsTeams,
    Discord,
    GoogleChat,
    Generic,
    GenericHmac,
    Alertmanager,
}

impl Kind {
    const ALL: [Self; 11] = [
        Self::GitHub,
        Self::GitLab,
        Self::Gitea,
        Self::BitbucketServer,
        Self::Slack,
        Self::MsTeams,
        Self::Discord,
        Self::GoogleChat,
        Self::Generic,
        Self::GenericHmac,
        Self::Alertmanager,
    ];

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// As Flux names the type.
    pub fn name(self) -> &'static str {
        match self {
            Self::GitHub => "github",
            Self::GitLab => "gitlab",
            Self::Gitea => "gitea",
            Self::BitbucketServer => "bitbucketserver",
            Self::Slack => "slack",
            Self::MsTeams => "msteams",
            Self::Discord => "discord",
            Self::GoogleChat => "googlechat",
            Self::Generic => "generic",
            Self::GenericHmac => "generic-hmac",
            Self::Alertmanager => "alertmanager",
        }
    }

    /// Whether an event of `phase` says anything to this type: a sync's start only moves a
    /// commit status.
    pub fn takes(self, phase: Phase) -> bool {
        phase != Phase::Started || self.is_commit_status()
    }

    /// A commit status on the Git host, rather than a message.
    pub fn is_commit_status(self) -> bool {
        matches!(
            self,
            Self::GitHub | Self::GitLab | Self::Gitea | Self::BitbucketServer
        )
    }
}

/// A Provider, checked, with its credentials.
#[derive(Clone)]
pub struct Endpoint {
    pub kind: Kind,
    address: String,
    channel: Option<String>,
    username: Option<String>,
    token: Option<String>,
    basic: Option<(String, String)>,
    /// The first part of the Provider's uid, in commit status contexts.
    uid_prefix: String,
}

// Never print a credential, even in a debug log.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("kind", &self.kind)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// One request to send. Its headers may hold a credential: never log them.
#[derive(Debug, PartialEq)]
pub struct Outgoing {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Endpoint {
    /// The Provider `spec` (of uid `uid`) with the data of its `secretRef`, if it has one.
    /// The error names the field or Secret key, never a value of the Secret.
    pub fn new(
        spec: &ProviderSpec,
        uid: &str,
        secret: Option<&BTreeMap<String, Vec<u8>>>,
    ) -> Result<Self, String> {
        for (field, set) in [
            ("spec.proxy", spec.proxy.is_some()),
            ("spec.proxySecretRef", spec.proxy_secret_ref.is_some()),
            ("spec.commitStatusExpr", spec.commit_status_expr.is_some()),
            (
                "spec.serviceAccountName",
                spec.service_account_name.is_some(),
            ),
        ] {
            if set {
                return Err(format!("{field} is not supported by skewer"));
            }
        }
        let kind = Kind::parse(&spec.kind).ok_or_else(|| {
            format!(
                "spec.type: {:?} is not one of {}",
                spec.kind,
                Kind::ALL.map(Kind::name).join(", ")
            )
        })?;
        let text = |key: &str| -> Result<Option<String>, String> {
            match secret.and_then(|s| s.get(key)) {
                None => Ok(None),
                Some(v) => String::from_utf8(v.clone())
                    .map(|s| Some(s.trim().to_string()))
                    .map_err(|_| format!("the Secret's {key:?} is not UTF-8")),
            }
        };
        let address = match text("address")? {
            Some(a) => a,
            None => spec.address.clone().unwrap_or_default(),
        };
        if address.is_empty() {
            return Err("spec.address (or the Secret's \"address\") is empty".into());
        }
        if address.len() > 2048 {
            return Err("spec.address: longer than 2048 bytes".into());
        }
        let token = text("token")?.filter(|t| !t.is_empty());
        let basic = match (text("username")?, text("password")?) {
            (Some(u), Some(p)) => Some((u, p)),
            _ => None,
        };
        let ep = Self {
            kind,
            address,
            channel: spec.channel.clone().filter(|c| !c.is_empty()),
            username: spec.username.clone().filter(|u| !u.is_empty()),
            token,
            basic,
            uid_prefix: uid.split('-').next().unwrap_or(uid).to_string(),
        };
        if kind.is_commit_status() {
            git_address(&ep.address)?;
            // Only Bitbucket Server takes a username and password; the others a token.
            let signed_in =
                ep.token.is_some() || (kind == Kind::BitbucketServer && ep.basic.is_some());
            if !signed_in {
                return Err(format!(
                    "spec.secretRef: a {} commit status needs a Secret with \"token\"{}",
                    kind.name(),
                    if kind == Kind::BitbucketServer {
                        " (or \"username\" and \"password\")"
                    } else {
                        ""
                    }
                ));
            }
        } else if !(ep.address.starts_with("https://") || ep.address.starts_with("http://")) {
            return Err("spec.address: not an http:// or https:// URL".into());
        }
        if kind == Kind::GenericHmac && ep.token.is_none() {
            return Err(
                "spec.secretRef: generic-hmac needs a Secret with \"token\" (the HMAC key)".into(),
            );
        }
        Ok(ep)
    }

    /// What to send for `event`; `None` when this Provider has nothing to say about it (a
    /// commit status for a revision that is no Git commit; a sync's start in a chat).
    pub fn request(&self, event: &Event) -> Option<Outgoing> {
        if !self.kind.takes(event.phase) {
            return None;
        }
        if self.kind.is_commit_status() {
            return self.commit_status(event);
        }
        let body = match self.kind {
            Kind::Slack | Kind::Discord => self.slack(event),
            Kind::MsTeams => teams(event),
            Kind::GoogleChat => json!({"text": plain_text(event)}),
            Kind::Alertmanager => alertmanager(event),
            _ => serde_json::to_value(event).unwrap_or(Value::Null),
        };
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let mut headers = vec![("content-type", "application/json".to_string())];
        let mut url = self.address.clone();
        match self.kind {
            Kind::Generic => headers.push(("gotk-component", event.reporting_controller.clone())),
            Kind::GenericHmac => {
                headers.push(("gotk-component", event.reporting_controller.clone()));
                let key = self.token.as_deref().unwrap_or_default();
                headers.push(("x-signature", format!("sha256={}", sign(key, &body))));
            }
            // Discord takes Slack's payload at its webhook's `/slack` address.
            Kind::Discord if !url.trim_end_matches('/').ends_with("/slack") => {
                url = format!("{}/slack", url.trim_end_matches('/'));
            }
            _ => {}
        }
        headers.extend(self.authorization());
        Some(Outgoing { url, headers, body })
    }

    fn authorization(&self) -> Option<(&'static str, String)> {
        if let Some(t) = &self.token
            && !matches!(self.kind, Kind::GenericHmac | Kind::Discord)
        {
            return Some(("authorization", format!("Bearer {t}")));
        }
        let (u, p) = self.basic.as_ref()?;
        use base64::Engine;
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        Some(("authorization", format!("Basic {pair}")))
    }

    /// Where it sends, as status and logs may show it: the repository for a commit status,
    /// only the scheme and host of a webhook (whose path often is its secret).
    pub fn shown(&self) -> String {
        if self.kind.is_commit_status() {
            return git_address(&self.address)
                .map(|(base, path)| format!("{base}/{path}"))
                .unwrap_or_default();
        }
        let rest = self.address.split_once("://").map_or("", |(_, r)| r);
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = host.rsplit('@').next().unwrap_or(host);
        let scheme = self.address.split("://").next().unwrap_or_default();
        format!("{scheme}://{host}")
    }

    /// The status context: `<kind>/<name>/<uid prefix>`, lower case, as Flux names it.
    pub fn context(&self, event: &Event) -> String {
        let o = &event.involved_object;
        format!("{}/{}/{}", o.kind, o.name, self.uid_prefix).to_lowercase()
    }

    fn commit_status(&self, event: &Event) -> Option<Outgoing> {
        let sha = commit_of(event.revision()?)?;
        let (base, path) = git_address(&self.address).ok()?;
        let context = self.context(event);
        let description = description(event);
        let (state_ok, state_failed, state_pending) = match self.kind {
            Kind::GitLab => ("success", "failed", "pending"),
            Kind::BitbucketServer => ("SUCCESSFUL", "FAILED", "INPROGRESS"),
            _ => ("success", "failure", "pending"),
        };
        let state = match event.phase {
            Phase::Started => state_pending,
            Phase::Succeeded => state_ok,
            Phase::Failed => state_failed,
        };
        let mut headers = vec![("content-type", "application/json".to_string())];
        let token = self.token.clone().unwrap_or_default();
        let (url, body) = match self.kind {
            Kind::GitHub => {
                let api = if base.ends_with("://github.com") {
                    "https://api.github.com".to_string()
                } else {
                    format!("{base}/api/v3")
                };
                headers.push(("accept", "application/vnd.github+json".into()));
                headers.push(("authorization", format!("Bearer {token}")));
                (
                    format!("{api}/repos/{path}/statuses/{sha}"),
                    json!({"state": state, "context": context, "description": description}),
                )
            }
            Kind::GitLab => {
                headers.push(("private-token", token));
                let project = path.replace('/', "%2F");
                (
                    format!("{base}/api/v4/projects/{project}/statuses/{sha}"),
                    json!({"state": state, "name": context, "description": description}),
                )
            }
            Kind::Gitea => {
                headers.push(("authorization", format!("token {token}")));
                (
                    format!("{base}/api/v1/repos/{path}/statuses/{sha}"),
                    json!({"state": state, "context": context, "description": description}),
                )
            }
            _ => {
                headers.extend(self.authorization());
                let (project, repo) = bitbucket_repo(&path)?;
                (
                    format!(
                        "{base}/rest/api/latest/projects/{project}/repos/{repo}/commits/{sha}/builds"
                    ),
                    json!({
                        "key": context, "name": context, "state": state,
                        "description": description, "url": self.address
                    }),
                )
            }
        };
        let body = serde_json::to_vec(&body).unwrap_or_default();
        Some(Outgoing { url, headers, body })
    }

    fn slack(&self, event: &Event) -> Value {
        let author = heading(event);
        let first = event.message.lines().next().unwrap_or_default();
        let fields: Vec<Value> = event
            .metadata
            .iter()
            .map(|(k, v)| json!({"title": k, "value": v, "short": false}))
            .collect();
        let mut payload = json!({
            "username": self.username.clone().unwrap_or_else(|| event.reporting_controller.clone()),
            "attachments": [{
                "fallback": format!("{author}: {first}"),
                "color": if event.severity == Severity::Error { "danger" } else { "good" },
                "author_name": author,
                "text": event.message,
                "mrkdwn_in": ["text"],
                "fields": fields,
            }],
        });
        if let Some(c) = &self.channel {
            payload["channel"] = json!(c);
        }
        payload
    }
}

/// Whom an event is about, as Flux's messages head it: `<kind>/<name>.<namespace>`.
fn heading(event: &Event) -> String {
    let o = &event.involved_object;
    format!("{}/{}.{}", o.kind.to_lowercase(), o.name, o.namespace)
}

/// [`heading`], the message and the metadata, one per line.
fn plain_text(event: &Event) -> String {
    let mut text = format!("*{}*\n{}", heading(event), event.message);
    for (k, v) in &event.metadata {
        text.push_str(&format!("\n{k}: {v}"));
    }
    text
}

/// A Microsoft Teams workflow message: one Adaptive Card.
fn teams(event: &Event) -> Value {
    let facts: Vec<Value> = event
        .metadata
        .iter()
        .map(|(k, v)| json!({"title": k, "value": v}))
        .collect();
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": [
                    {"type": "TextBlock", "weight": "bolder", "wrap": true,
                     "text": heading(event),
                     "color": if event.severity == Severity::Error { "attention" } else { "good" }},
                    {"type": "TextBlock", "text": event.message, "wrap": true},
                    {"type": "FactSet", "facts": facts},
                ],
            },
        }],
    })
}

/// One firing alert, labelled as Flux labels it.
fn alertmanager(event: &Event) -> Value {
    let o = &event.involved_object;
    let mut labels = event.metadata.clone();
    let summary = labels.remove("summary");
    let mut reason = event.reason.clone();
    if let Some(first) = reason.get(..1) {
        reason = first.to_uppercase() + reason.get(1..).unwrap_or_default();
    }
    labels.insert("alertname".into(), format!("Skewer{}{reason}", o.kind));
    labels.insert("severity".into(), event.severity.as_str().into());
    labels.insert("reason".into(), event.reason.clone());
    labels.insert("kind".into(), o.kind.clone());
    labels.insert("name".into(), o.name.clone());
    labels.insert("namespace".into(), o.namespace.clone());
    labels.insert(
        "reportingcontroller".into(),
        event.reporting_controller.clone(),
    );
    let mut annotations = BTreeMap::from([("message".to_string(), event.message.clone())]);
    if let Some(s) = summary {
        annotations.insert("summary".into(), s);
    }
    json!([{
        "status": "firing",
        "labels": labels,
        "annotations": annotations,
        "startsAt": event.timestamp,
    }])
}

/// The first line of the message, cut at [`MAX_DESCRIPTION`] characters.
fn description(event: &Event) -> String {
    let first = event.message.lines().next().unwrap_or_default();
    if first.chars().count() <= MAX_DESCRIPTION {
        return first.to_string();
    }
    let mut cut: String = first.chars().take(MAX_DESCRIPTION - 1).collect();
    cut.push('…');
    cut
}

/// The HMAC-SHA256 of `body` under `key`, in hex (Flux's `X-Signature: sha256=<hex>`).
pub fn sign(key: &str, body: &[u8]) -> String {
    // An HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    match Hmac::<Sha256>::new_from_slice(key.as_bytes()) {
        Ok(mut mac) => {
            mac.update(body);
            hex::encode(mac.finalize().into_bytes())
        }
        Err(_) => String::new(),
    }
}

/// A repository's address as the host's API base (`https://host[:port]`, SSH made HTTPS)
/// and its path (`org/repo`, `.git` dropped). Accepts `https://`, `http://`, `ssh://` and
/// `git@host:path`.
pub fn git_address(address: &str) -> Result<(String, String), String> {
    let bad = || format!("spec.address: {address:?} is not a repository URL");
    let (scheme, rest) = if let Some(rest) = address.strip_prefix("https://") {
        ("https", rest)
    } else if let Some(rest) = address.strip_prefix("http://") {
        ("http", rest)
    } else if let Some(rest) = address.strip_prefix("ssh://") {
        ("https", rest)
    } else if let Some((user_host, path)) = address.split_once(':')
        && user_host.contains('@')
        && !user_host.contains('/')
    {
        let host = user_host.rsplit('@').next().unwrap_or(user_host);
        return finish("https", host, path).ok_or_else(bad);
    } else {
        return Err(bad());
    };
    let (authority, path) = rest.split_once('/').ok_or_else(bad)?;
    let host = authority.rsplit('@').next().unwrap_or(authority);
    // An SSH port is no API port.
    let host = if address.starts_with("ssh://") {
        host.split(':').next().unwrap_or(host)
    } else {
        host
    };
    finish(scheme, host, path).ok_or_else(bad)
}

fn finish(scheme: &str, host: &str, path: &str) -> Option<(String, String)> {
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    let ok = |s: &str| {
        !matches!(s, "" | "." | "..")
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    };
    let segments: Vec<&str> = path.split('/').collect();
    if host.is_empty() || segments.len() < 2 || !segments.iter().all(|s| ok(s)) {
        return None;
    }
    let host_ok = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    host_ok.then(|| (format!("{scheme}://{host}"), path.to_string()))
}

/// Bitbucket Server's project key and repository slug: `scm/PROJECT/repo` or
/// `projects/PROJECT/repos/repo`.
fn bitbucket_repo(path: &str) -> Option<(&str, &str)> {
    let segments: Vec<&str> = path.split('/').collect();
    match segments.as_slice() {
        ["scm", project, repo] | [project, repo] | ["projects", project, "repos", repo] => {
            Some((project, repo))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
