//! An Application's rollback: a pin to a revision it deployed, written as an annotation by
//! `skewer rollback` and honoured until its source or sync policy changes. Pure.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::application::ApplicationSpec;
use crate::history::{Deployment, target_of};

/// The annotation `skewer rollback` writes on an Application: a [`Pin`] as JSON.
pub const ROLLBACK: &str = "skewer.dev/rollback";

/// An Application pinned to a revision it deployed before, until its source or sync policy
/// changes (`policy` is their fingerprint when the pin was made).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Pin {
    /// The history entry rolled back to.
    pub id: i64,
    pub revision: String,
    pub policy: String,
}

impl Pin {
    /// A pin to `entry` of an Application with `spec`, or why that revision cannot be pinned.
    pub fn to(entry: &Deployment, spec: &ApplicationSpec) -> Result<Self, String> {
        if target_of(&entry.revision).is_none() {
            return Err(format!(
                "revision {} names no commit or digest to go back to",
                entry.revision
            ));
        }
        Ok(Self {
            id: entry.id,
            revision: entry.revision.clone(),
            policy: policy(spec),
        })
    }

    /// The pin `annotation` holds, if it still holds for `spec`: `Ok(None)` once the source or
    /// sync policy changed; an error naming the annotation when it is not a pin.
    pub fn read(annotation: Option<&str>, spec: &ApplicationSpec) -> Result<Option<Self>, String> {
        let Some(text) = annotation else {
            return Ok(None);
        };
        let bad = |why: String| format!("metadata.annotations[{ROLLBACK}]: {why}");
        let pin: Pin = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if target_of(&pin.revision).is_none() {
            return Err(bad(format!(
                "revision {} names no commit or digest",
                pin.revision
            )));
        }
        Ok((pin.policy == policy(spec)).then_some(pin))
    }

    /// What the source is asked for instead of its `targetRevision`: the commit or digest.
    pub fn target(&self) -> String {
        target_of(&self.revision).unwrap_or_default()
    }
}

/// A fingerprint of what ends a pin: the Application's source and sync policy.
pub fn policy(spec: &ApplicationSpec) -> String {
    let text = serde_json::to_string(&(&spec.source, &spec.sync_policy)).unwrap_or_default();
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::SUCCEEDED;

    fn deployed(revision: &str) -> Deployment {
        Deployment {
            revision: revision.into(),
            outcome: SUCCEEDED.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_pin_names_a_commit_or_digest_and_ends_with_a_policy_change() {
        let commit = "a".repeat(40);
        let mut spec: ApplicationSpec = serde_json::from_value(serde_json::json!({
            "source": {"repoURL": "https://git.example/a.git", "targetRevision": "main"},
            "destination": {"name": "in-cluster"},
            "syncPolicy": {"automated": {"prune": true}},
        }))
        .unwrap();
        let entry = deployed(&format!("main@sha1:{commit}"));
        let pin = Pin::to(&entry, &spec).unwrap();
        let text = serde_json::to_string(&pin).unwrap();
        assert_eq!(Pin::read(Some(&text), &spec), Ok(Some(pin.clone())));
        assert_eq!(pin.target(), commit);
        assert_eq!(Pin::read(None, &spec), Ok(None));
        let err = Pin::read(Some("{"), &spec).unwrap_err();
        assert!(
            err.starts_with("metadata.annotations[skewer.dev/rollback]: "),
            "{err}"
        );

        // What does not end it: other fields.
        spec.interval = Some("5m".into());
        assert!(Pin::read(Some(&text), &spec).unwrap().is_some());
        // What does: the sync policy, the source.
        let mut manual = spec.clone();
        manual.sync_policy = None;
        assert_eq!(Pin::read(Some(&text), &manual), Ok(None));
        let mut moved = spec.clone();
        if let Some(s) = moved.source.as_mut() {
            s.target_revision = Some("v2".into());
        }
        assert_eq!(Pin::read(Some(&text), &moved), Ok(None));

        assert!(Pin::to(&deployed("main@sha1:abc"), &spec).is_err());
    }
}
