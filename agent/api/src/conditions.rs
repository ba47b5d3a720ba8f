//! kstatus-compatible conditions: `Ready`, `Reconciling`, `Stalled` and friends, with the
//! bookkeeping of `lastTransitionTime` (only moves when the status changes).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";
pub const HEALTHY: &str = "Healthy";
pub const SOURCE_VERIFIED: &str = "SourceVerified";

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// RFC 3339 time of the last change of `status`.
    pub last_transition_time: String,
    pub reason: String,
    pub message: String,
}

/// Now, to the second, as status times are written (RFC 3339).
pub fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Sets a condition, keeping `lastTransitionTime` when the status did not change.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now();
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: status.into(),
            observed_generation: generation,
            last_transition_time: now(),
            reason: reason.into(),
            message: message.into(),
        }),
    }
}

pub fn remove(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Ready=True; no Reconciling or Stalled (kstatus: Current).
pub fn mark_ready(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    set(conditions, READY, true, reason, message, generation);
    remove(conditions, RECONCILING);
    remove(conditions, STALLED);
}

/// Ready=False and Reconciling=True: a failure that a retry may fix (kstatus: InProgress).
pub fn mark_failed(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    set(conditions, READY, false, reason, message, generation);
    remove(conditions, STALLED);
    set(
        conditions,
        RECONCILING,
        true,
        "ProgressingWithRetry",
        message,
        generation,
    );
}

/// Ready=False and Stalled=True: a failure only a spec change fixes (kstatus: Failed).
pub fn mark_stalled(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    set(conditions, READY, false, reason, message, generation);
    remove(conditions, RECONCILING);
    set(conditions, STALLED, true, reason, message, generation);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let mut cs = Vec::new();
        set(&mut cs, READY, false, "A", "a", Some(1));
        cs[0].last_transition_time = "then".into();
        set(&mut cs, READY, false, "B", "b", Some(2));
        assert_eq!(cs[0].last_transition_time, "then");
        assert_eq!(cs[0].reason, "B");
        set(&mut cs, READY, true, "C", "c", Some(2));
        assert_ne!(cs[0].last_transition_time, "then");
    }

    #[test]
    fn kstatus_shapes() {
        let mut cs = Vec::new();
        mark_failed(&mut cs, "BuildFailed", "bad", None);
        assert!(is_true(&cs, RECONCILING) && !is_true(&cs, READY));
        mark_stalled(&mut cs, "Invalid", "bad", None);
        assert!(is_true(&cs, STALLED) && find(&cs, RECONCILING).is_none());
        mark_ready(&mut cs, "Succeeded", "ok", None);
        assert_eq!(cs.len(), 1);
        assert!(is_true(&cs, READY));
    }
}
