//! An Application's sync operation as a state machine: what its last operation says about the
//! revision and generation at hand, and whether this reconcile syncs, leaves it, or refuses an
//! automated sync that would prune everything. Pure: the table test below is the whole of it.

use super::request::Automated;
use crate::api::application::OperationState;

/// `status.operationState.phase`, as skewer writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Failed, with a retry due (`syncPolicy.retry`).
    Running,
    /// Failed, out of retries.
    Failed,
    Succeeded,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Running => "Running",
            Phase::Failed => "Failed",
            Phase::Succeeded => "Succeeded",
        }
    }

    /// The phase written; anything else (a hand edit, Argo CD's `Error`) is none of these.
    pub fn parse(written: &str) -> Option<Phase> {
        [Phase::Running, Phase::Failed, Phase::Succeeded]
            .into_iter()
            .find(|p| p.as_str() == written)
    }
}

/// What the last operation says about syncing `revision` at `generation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Last {
    /// None was made for this revision and generation.
    Other,
    /// One failed, and retry number `retries` + 1 is due.
    Retrying {
        retries: i64,
    },
    /// One failed and is out of retries.
    Exhausted,
    Succeeded,
}

impl Last {
    pub fn of(op: Option<&OperationState>, revision: &str, generation: Option<i64>) -> Last {
        let Some(op) = op else {
            return Last::Other;
        };
        let same = op.sync_result.as_ref().map(|r| r.revision.as_str()) == Some(revision)
            && op.synced_generation == generation;
        match Phase::parse(&op.phase) {
            _ if !same => Last::Other,
            Some(Phase::Running) => Last::Retrying {
                retries: op.retry_count,
            },
            Some(Phase::Failed) => Last::Exhausted,
            Some(Phase::Succeeded) => Last::Succeeded,
            None => Last::Other,
        }
    }
}

/// What one reconcile does about syncing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Compare only: report what differs.
    Leave,
    /// Sync, this being retry number `retries` (0: a first attempt).
    Sync { retries: i64 },
    /// An automated sync would apply nothing and prune everything; `allowEmpty` is off.
    RefuseEmpty,
}

/// The facts a decision is made from.
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    /// A sync request not handled before (`skewer sync`).
    pub asked: bool,
    pub automated: Option<Automated>,
    /// The source renders something else than the last sync applied (drift aside).
    pub changed: bool,
    pub last: Last,
    /// The source renders no objects.
    pub renders_nothing: bool,
    /// The Application has resources now (that an empty sync would prune).
    pub has_resources: bool,
    /// An ApplicationSet's RollingSync holds it (`skewer.dev/rollout-hold`): a changed source
    /// waits for a sync request; retries of a requested sync still run.
    pub held: bool,
}

/// Whether and how to sync. Asked: always, from attempt 0. Automated: when the source changed
/// (unless held by a rollout) or a retry is due, never again once out of retries for this
/// revision and generation, and never to prune everything unless `allowEmpty`.
pub fn decide(f: Facts) -> Decision {
    let retrying = matches!(f.last, Last::Retrying { .. });
    let automated =
        f.automated.is_some() && ((f.changed && !f.held) || retrying) && f.last != Last::Exhausted;
    if !f.asked && !automated {
        return Decision::Leave;
    }
    if let Some(a) = f.automated
        && !f.asked
        && f.renders_nothing
        && !a.allow_empty
        && f.has_resources
    {
        return Decision::RefuseEmpty;
    }
    let retries = match f.last {
        Last::Retrying { retries } if !f.asked => retries,
        _ => 0,
    };
    Decision::Sync { retries }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application::SyncResult;

    const AUTO: Option<Automated> = Some(Automated {
        prune: true,
        self_heal: false,
        allow_empty: false,
    });
    const AUTO_EMPTY: Option<Automated> = Some(Automated {
        prune: true,
        self_heal: false,
        allow_empty: true,
    });

    #[test]
    fn the_decision_table() {
        use Decision::*;
        use Last::*;
        let r = |retries| Retrying { retries };
        // (asked, automated, changed, last, renders nothing, has resources) → decision
        let table = [
            (false, None, true, Other, false, true, Leave),
            (false, None, false, r(2), false, true, Leave),
            (true, None, false, Other, false, true, Sync { retries: 0 }),
            (
                true,
                None,
                false,
                Exhausted,
                false,
                true,
                Sync { retries: 0 },
            ),
            (false, AUTO, false, Other, false, true, Leave),
            (false, AUTO, false, Succeeded, false, true, Leave),
            (false, AUTO, true, Other, false, true, Sync { retries: 0 }),
            (
                false,
                AUTO,
                true,
                Succeeded,
                false,
                true,
                Sync { retries: 0 },
            ),
            (false, AUTO, false, r(3), false, true, Sync { retries: 3 }),
            (false, AUTO, true, r(3), false, true, Sync { retries: 3 }),
            (true, AUTO, true, r(3), false, true, Sync { retries: 0 }),
            (false, AUTO, true, Exhausted, false, true, Leave),
            (
                true,
                AUTO,
                true,
                Exhausted,
                false,
                true,
                Sync { retries: 0 },
            ),
            (false, AUTO, true, Other, true, true, RefuseEmpty),
            (false, AUTO, true, Other, true, false, Sync { retries: 0 }),
            (
                false,
                AUTO_EMPTY,
                true,
                Other,
                true,
                true,
                Sync { retries: 0 },
            ),
            (true, AUTO, true, Other, true, true, Sync { retries: 0 }),
        ];
        for (i, (asked, automated, changed, last, renders_nothing, has_resources, want)) in
            table.into_iter().enumerate()
        {
            let facts = Facts {
                asked,
                automated,
                changed,
                last,
                renders_nothing,
                has_resources,
                held: false,
            };
            assert_eq!(decide(facts), want, "row {i}: {facts:?}");
        }
    }

    #[test]
    fn a_rollout_hold_waits_for_a_request_but_lets_retries_run() {
        let facts = |asked, last| Facts {
            asked,
            automated: AUTO,
            changed: true,
            last,
            renders_nothing: false,
            has_resources: true,
            held: true,
        };
        assert_eq!(decide(facts(false, Last::Other)), Decision::Leave);
        assert_eq!(
            decide(facts(true, Last::Other)),
            Decision::Sync { retries: 0 }
        );
        assert_eq!(
            decide(facts(false, Last::Retrying { retries: 1 })),
            Decision::Sync { retries: 1 }
        );
    }

    #[test]
    fn the_last_operation_counts_only_for_its_revision_and_generation() {
        let op = |phase: &str, revision: &str, generation| OperationState {
            phase: phase.into(),
            retry_count: 2,
            sync_result: Some(SyncResult {
                revision: revision.into(),
                resources: Vec::new(),
            }),
            synced_generation: Some(generation),
            ..Default::default()
        };
        let at = |o: &OperationState| Last::of(Some(o), "main@sha1:a", Some(3));
        assert_eq!(Last::of(None, "main@sha1:a", Some(3)), Last::Other);
        assert_eq!(
            at(&op("Running", "main@sha1:a", 3)),
            Last::Retrying { retries: 2 }
        );
        assert_eq!(at(&op("Failed", "main@sha1:a", 3)), Last::Exhausted);
        assert_eq!(at(&op("Succeeded", "main@sha1:a", 3)), Last::Succeeded);
        assert_eq!(
            at(&op("Failed", "main@sha1:b", 3)),
            Last::Other,
            "another revision"
        );
        assert_eq!(
            at(&op("Failed", "main@sha1:a", 4)),
            Last::Other,
            "another generation"
        );
        assert_eq!(
            at(&op("Error", "main@sha1:a", 3)),
            Last::Other,
            "not skewer's"
        );
        for p in [Phase::Running, Phase::Failed, Phase::Succeeded] {
            assert_eq!(Phase::parse(p.as_str()), Some(p));
        }
    }
}
