//! Where a sync's time goes, read from the API server's audit log rather than skewer's own
//! word: every request skewer sent for one Kustomization, from the user's create to the status
//! write that made it Ready, split into phases.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};
use jiff::Timestamp;

use crate::{Audited, audit_log};

/// An audited request with both of its times.
#[derive(Debug, Clone)]
struct Request {
    req: Audited,
    received: Timestamp,
    answered: Timestamp,
}

/// One sync of a Kustomization, split at the requests skewer sent.
#[derive(Debug, Clone, Default)]
pub struct Phases {
    /// The user's create → skewer's first request about it (the watch event, the queue).
    pub to_first_request: Duration,
    /// skewer's first request → its first apply (finalizer, source, status and inventory
    /// writes), and what those requests were.
    pub before_applies: Duration,
    pub before: Vec<String>,
    /// First apply received → last apply answered.
    pub applies: Duration,
    /// Last apply answered → the last request of the sync answered (the status write).
    pub after_applies: Duration,
    pub after: Vec<String>,
    /// The phases skewer's own log gives, filled in by the caller.
    pub own: String,
}

impl Phases {
    pub const NAMES: [&str; 4] = [
        "create → skewer's first request (watch, queue)",
        "first request → first apply",
        "applies (first received → last answered)",
        "last apply → status written",
    ];

    pub fn durations(&self) -> [Duration; 4] {
        [
            self.to_first_request,
            self.before_applies,
            self.applies,
            self.after_applies,
        ]
    }
}

/// The phases of the first sync of Kustomization `name` in `namespace`, from the audit log
/// of the cluster of `kubeconfig`. `user` is skewer's user; `applied` names the resource of
/// the objects it applies (`configmaps`).
pub fn phases(
    kubeconfig: &Path,
    namespace: &str,
    name: &str,
    user: &str,
    applied: &str,
) -> Result<Phases> {
    let mut requests: Vec<Request> = audit_log(kubeconfig, Some(namespace))?
        .into_iter()
        .filter_map(|req| {
            Some(Request {
                received: req.received?,
                answered: req.answered?,
                req,
            })
        })
        .collect();
    requests.sort_by_key(|r| r.received);
    let between =
        |a: Timestamp, b: Timestamp| a.duration_until(b).try_into().unwrap_or(Duration::ZERO);
    let created = requests
        .iter()
        .find(|r| {
            r.req.verb == "create" && r.req.resource == "kustomizations" && r.req.name == name
        })
        .context("the Kustomization's create is not in the audit log")?
        .answered;
    let ours: Vec<&Request> = requests
        .iter()
        .filter(|r| r.req.user == user && r.received >= created && r.req.verb != "watch")
        .collect();
    let is_apply = |r: &Request| r.req.resource == applied && r.req.verb == "patch";
    let first = ours.first().context("skewer sent no request")?;
    let first_apply = ours
        .iter()
        .find(|r| is_apply(r))
        .context("skewer applied nothing")?;
    let last_apply = ours
        .iter()
        .filter(|r| is_apply(r))
        .map(|r| r.answered)
        .max()
        .unwrap_or(first_apply.answered);
    // The sync ends with the status write that follows the applies.
    let end = ours
        .iter()
        .filter(|r| r.req.resource == "kustomizations" && r.req.subresource == "status")
        .map(|r| r.answered)
        .filter(|t| *t >= last_apply)
        .min()
        .unwrap_or(last_apply);
    let describe = |r: &&Request| {
        let what = match r.req.subresource.as_str() {
            "" => r.req.resource.clone(),
            sub => format!("{}/{sub}", r.req.resource),
        };
        let (at, to) = (
            between(first.received, r.received),
            between(first.received, r.answered),
        );
        format!(
            "{} {what} (+{:.1}..{:.1} ms)",
            r.req.verb,
            at.as_secs_f64() * 1000.0,
            to.as_secs_f64() * 1000.0
        )
    };
    let before = ours
        .iter()
        .take_while(|r| r.received < first_apply.received)
        .map(describe)
        .collect();
    let after = ours
        .iter()
        .filter(|r| r.received >= last_apply && r.answered <= end)
        .map(describe)
        .collect();
    Ok(Phases {
        to_first_request: between(created, first.received),
        before_applies: between(first.received, first_apply.received),
        before,
        after,
        own: String::new(),
        applies: between(first_apply.received, last_apply),
        after_applies: between(last_apply, end),
    })
}
