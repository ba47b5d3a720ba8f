//! What a deploy object deployed, newest last (`status.history`, Argo CD's field and its
//! `revisionHistoryLimit`), and which entry a rollback goes back to. Pure: the reconcilers
//! record deployments, the CLI reads them ([`crate::pin`] is an Application's rollback).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Deployments kept when nothing says otherwise (Argo CD's default).
pub const DEFAULT_LIMIT: usize = 10;
/// The most a `revisionHistoryLimit` may keep: each entry is in the object's status.
pub const MAX_LIMIT: i64 = 100;
/// The longest failure message an entry keeps.
const MESSAGE_BYTES: usize = 256;

/// One deployment: a revision the pipeline applied, and how that ended.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    /// Counts up from 1 over the object's life; `skewer rollback` names an entry by it.
    pub id: i64,
    /// The revision applied (`main@sha1:<commit>`, `<tag>@sha256:<digest>`).
    pub revision: String,
    /// The digest of the artifact the revision was read from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// When the apply began and ended (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub deploy_started_at: String,
    pub deployed_at: String,
    /// `Succeeded` or `Failed`.
    pub outcome: String,
    /// Why it failed, cut to 256 bytes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";

/// How many deployments to keep for a `revisionHistoryLimit` (`None`: the default), or why it
/// cannot be honoured, naming the field.
pub fn limit(field: &str, value: Option<i64>) -> Result<usize, String> {
    match value {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (0..=MAX_LIMIT).contains(&n) => Ok(usize::try_from(n).unwrap_or(DEFAULT_LIMIT)),
        Some(n) => Err(format!(
            "{field}: {n}: keep between 0 and {MAX_LIMIT} deployments (each is kept in status)"
        )),
    }
}

/// Adds a deployment to `history`, keeping the newest `limit`. A deployment of the revision
/// and outcome of the newest entry (a periodic re-apply, a retry failing the same way) is that
/// entry again: it keeps its times (when that revision was deployed), takes the newest failure's
/// message, and so leaves the status as it was, costing no status write. `message` is kept for
/// failures only.
pub fn record(history: &mut Vec<Deployment>, mut new: Deployment, limit: usize) {
    if new.outcome == SUCCEEDED {
        new.message.clear();
    } else {
        new.message = skewer_appliers::message::bounded(&new.message, MESSAGE_BYTES);
    }
    match history.last_mut() {
        Some(last) if last.revision == new.revision && last.outcome == new.outcome => {
            last.message = new.message;
        }
        last => {
            new.id = last.map_or(1, |l| l.id.saturating_add(1));
            history.push(new);
        }
    }
    let excess = history.len().saturating_sub(limit);
    history.drain(..excess);
}

/// The deployment a rollback goes back to: entry `id`, or (none given) the newest that
/// succeeded with another revision than the newest entry's. Only a success may be gone back to.
pub fn rollback_to(history: &[Deployment], id: Option<i64>) -> Result<&Deployment, String> {
    let (Some(first), Some(newest)) = (history.first(), history.last()) else {
        return Err(
            "status.history is empty: nothing was deployed yet (or spec.revisionHistoryLimit is 0)"
                .into(),
        );
    };
    let entry = match id {
        Some(id) => history.iter().find(|d| d.id == id).ok_or_else(|| {
            format!(
                "no deployment {id} in status.history: it holds {} to {}",
                first.id, newest.id
            )
        })?,
        None => history
            .iter()
            .rev()
            .find(|d| d.outcome == SUCCEEDED && d.revision != newest.revision)
            .ok_or_else(|| {
                format!(
                    "no earlier revision succeeded: every deployment in status.history is of {}",
                    newest.revision
                )
            })?,
    };
    if entry.outcome != SUCCEEDED {
        return Err(format!(
            "deployment {} of {} failed; roll back to one that succeeded",
            entry.id, entry.revision
        ));
    }
    Ok(entry)
}

/// The commit (Git) or manifest digest (OCI) a revision names, as a `targetRevision`.
pub fn target_of(revision: &str) -> Option<String> {
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if let Some((_, commit)) = revision.rsplit_once("sha1:") {
        return hex(commit, 40).then(|| commit.to_string());
    }
    let (_, digest) = revision.rsplit_once("sha256:")?;
    hex(digest, 64).then(|| format!("sha256:{digest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployed(revision: &str, outcome: &str, at: &str) -> Deployment {
        Deployment {
            revision: revision.into(),
            outcome: outcome.into(),
            deployed_at: at.into(),
            message: "why".into(),
            ..Default::default()
        }
    }

    #[test]
    fn history_keeps_the_newest_and_counts_ids_on() {
        let mut h = Vec::new();
        record(&mut h, deployed("r1", SUCCEEDED, "t1"), 3);
        record(&mut h, deployed("r1", SUCCEEDED, "t2"), 3);
        assert_eq!(h.len(), 1, "the same revision again is the same entry");
        assert_eq!(
            (h[0].id, h[0].deployed_at.as_str()),
            (1, "t1"),
            "deployed at t1"
        );
        assert_eq!(h[0].message, "", "a success keeps no message");
        record(&mut h, deployed("r2", FAILED, "t3"), 3);
        record(&mut h, deployed("r2", SUCCEEDED, "t4"), 3);
        record(&mut h, deployed("r1", SUCCEEDED, "t5"), 3);
        let ids: Vec<_> = h.iter().map(|d| (d.id, d.revision.as_str())).collect();
        assert_eq!(ids, [(2, "r2"), (3, "r2"), (4, "r1")]);
        assert_eq!(h[0].message, "why");
        record(&mut h, deployed("r3", SUCCEEDED, "t6"), 0);
        assert!(h.is_empty(), "a limit of 0 keeps nothing");
        let mut long = deployed("r4", FAILED, "t7");
        long.message = "é".repeat(300);
        record(&mut h, long, 1);
        assert!(h[0].message.len() <= MESSAGE_BYTES + '…'.len_utf8());
        assert!(h[0].message.ends_with('…'));
    }

    #[test]
    fn a_rollback_goes_back_to_an_earlier_success() {
        let mut h = Vec::new();
        assert!(rollback_to(&h, None).unwrap_err().contains("empty"));
        for (r, o) in [
            ("r1", SUCCEEDED),
            ("r2", SUCCEEDED),
            ("r3", FAILED),
            ("r3", SUCCEEDED),
        ] {
            record(&mut h, deployed(r, o, "t"), 10);
        }
        assert_eq!(
            rollback_to(&h, None).map(|d| d.id),
            Ok(2),
            "the newest other revision"
        );
        assert_eq!(rollback_to(&h, Some(1)).map(|d| d.id), Ok(1));
        let failed = rollback_to(&h, Some(3)).unwrap_err();
        assert!(failed.starts_with("deployment 3 of r3 failed"), "{failed}");
        let missing = rollback_to(&h, Some(9)).unwrap_err();
        assert_eq!(
            missing,
            "no deployment 9 in status.history: it holds 1 to 4"
        );
        let only = vec![h[3].clone()];
        assert!(
            rollback_to(&only, None)
                .unwrap_err()
                .starts_with("no earlier revision")
        );
    }

    #[test]
    fn limits_are_argo_cds_within_a_bound() {
        assert_eq!(limit("f", None), Ok(10));
        assert_eq!(limit("f", Some(0)), Ok(0));
        assert_eq!(limit("f", Some(100)), Ok(100));
        assert!(
            limit("spec.revisionHistoryLimit", Some(-1))
                .unwrap_err()
                .starts_with("spec.revisionHistoryLimit: -1")
        );
        assert!(limit("f", Some(101)).is_err());
    }

    #[test]
    fn revisions_name_the_commit_or_digest_to_go_back_to() {
        let commit = "a".repeat(40);
        let digest = "b".repeat(64);
        assert_eq!(
            target_of(&format!("main@sha1:{commit}")),
            Some(commit.clone())
        );
        assert_eq!(target_of(&format!("sha1:{commit}")), Some(commit.clone()));
        assert_eq!(
            target_of(&format!("v1@sha256:{digest}")),
            Some(format!("sha256:{digest}"))
        );
        assert_eq!(target_of("main@sha1:abc"), None);
        assert_eq!(target_of("latest"), None);
    }
}
