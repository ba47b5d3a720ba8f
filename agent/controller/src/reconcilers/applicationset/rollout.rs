//! A RollingSync, decided: which generated Applications may sync now, given each one's step
//! (the first step whose `matchExpressions` its labels match), its sync and health, and the
//! sync this ApplicationSet already asked of it. Generated Applications under a RollingSync
//! carry [`crate::api::names::ROLLOUT_HOLD`], so they compare but never sync by themselves; a
//! step opens only when every Application of the steps before it is Synced and Healthy at the
//! revision the later ones want, and then at most `maxUpdate` of its Applications are asked to
//! sync at once (`skewer.dev/sync-requested-at: rollout:<revision>`). An Application that
//! failed its sync, or is Degraded, stops the rollout where it is, and the status names it.
//! Pure: the reconciler reads the Applications and carries out the [`Plan`].

use std::collections::{BTreeMap, BTreeSet};

use super::params::Selector;

/// How many of a step's Applications sync at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxUpdate {
    All,
    Count(usize),
    Percent(u32),
}

impl MaxUpdate {
    /// Of a step of `n` Applications; a percentage rounds down, but to no less than one.
    pub fn of(self, n: usize) -> usize {
        match self {
            MaxUpdate::All => n,
            MaxUpdate::Count(c) => c,
            MaxUpdate::Percent(p) => {
                let share = n.saturating_mul(p as usize) / 100;
                if p > 0 { share.max(1) } else { 0 }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub selector: Selector,
    pub max_update: MaxUpdate,
}

/// What the rollout reads of one generated Application.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct App {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `status.sync.status` (empty before its first comparison).
    pub sync: String,
    /// The revision it compared against.
    pub revision: Option<String>,
    pub health: String,
    pub health_message: String,
    /// Its repository and revision as written, to tell which revisions are comparable.
    pub source: (String, String),
    /// `skewer.dev/sync-requested-at` and `status.lastHandledSyncAt`.
    pub sync_requested: Option<String>,
    pub sync_handled: Option<String>,
    /// `skewer.dev/reconcile-requested-at`.
    pub refresh_requested: Option<String>,
    /// `status.operationState.phase` and message.
    pub phase: String,
    pub phase_message: String,
}

impl App {
    fn healthy(&self) -> bool {
        self.sync == "Synced" && self.health == "Healthy"
    }
    fn out_of_sync(&self) -> bool {
        self.sync == "OutOfSync"
    }
    fn pending(&self) -> bool {
        self.sync_requested.is_some() && self.sync_requested != self.sync_handled
    }
}

/// The sync request value for a revision.
pub fn request_for(revision: &str) -> String {
    format!("rollout:{revision}")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ask the Application to sync (the value of `skewer.dev/sync-requested-at`).
    Sync { app: String, value: String },
    /// Ask the Application to read its source now (`skewer.dev/reconcile-requested-at`):
    /// two Applications of one repository disagree on its revision.
    Refresh { app: String, value: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub application: String,
    /// `Waiting`, `Pending`, `Progressing` or `Healthy`.
    pub status: &'static str,
    pub message: String,
    /// From 1; 0 when no step selects it.
    pub step: usize,
    pub revision: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub entries: Vec<Entry>,
    /// The rollout is under way (some Application is not Synced and Healthy), and why.
    pub progressing: Option<String>,
    /// An Application failed, which stops the rollout: the message names it.
    pub failed: Option<String>,
}

/// The plan for `apps` over `steps`.
pub fn plan(steps: &[Step], apps: &[App]) -> Plan {
    let step_of = |a: &App| steps.iter().position(|s| s.selector.matches(&a.labels));
    let mut by_step: Vec<Vec<&App>> = vec![Vec::new(); steps.len()];
    let mut out = Plan::default();
    let mut sorted: Vec<&App> = apps.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    for a in &sorted {
        match step_of(a) {
            Some(i) => by_step[i].push(a),
            None => out.entries.push(Entry {
                application: a.name.clone(),
                status: if a.healthy() { "Healthy" } else { "Waiting" },
                message:
                    "no step of the RollingSync selects it: it syncs only when asked (skewer sync)"
                        .into(),
                step: 0,
                revision: a.revision.clone(),
            }),
        }
    }
    // The revisions wanted of each repository, by the Applications out of sync with it.
    let mut wanted: BTreeMap<&(String, String), BTreeSet<&str>> = BTreeMap::new();
    for a in apps.iter().filter(|a| a.out_of_sync()) {
        if let Some(r) = &a.revision {
            wanted.entry(&a.source).or_default().insert(r);
        }
    }
    let mut blocker: Option<String> = None;
    for (i, members) in by_step.iter().enumerate() {
        let n = i + 1;
        let limit = steps[i].max_update.of(members.len());
        let mut busy = members
            .iter()
            .filter(|a| a.pending() || (a.sync == "Synced" && !a.healthy()))
            .count();
        let mut step_done = true;
        let mut why_not: Option<String> = None;
        for a in members {
            let mut entry = Entry {
                application: a.name.clone(),
                status: "Healthy",
                message: String::new(),
                step: n,
                revision: a.revision.clone(),
            };
            // Healthy, but behind a revision others of its repository want: not done yet.
            let stale = a.healthy()
                && wanted
                    .get(&a.source)
                    .is_some_and(|rs| rs.iter().any(|r| Some(*r) != a.revision.as_deref()));
            if a.healthy() && !stale {
                entry.message = "Synced and Healthy".into();
            } else if stale {
                step_done = false;
                let newer = wanted
                    .get(&a.source)
                    .and_then(|rs| rs.iter().find(|r| Some(**r) != a.revision.as_deref()))
                    .copied()
                    .unwrap_or_default();
                let value = format!("rollout:{newer}");
                if a.refresh_requested.as_deref() != Some(value.as_str()) {
                    out.actions.push(Action::Refresh {
                        app: a.name.clone(),
                        value,
                    });
                }
                entry.status = "Waiting";
                entry.message =
                    format!("reading its source again: others of its repository want {newer}");
                why_not
                    .get_or_insert_with(|| format!("{} has not seen revision {newer} yet", a.name));
            } else if a.pending() {
                step_done = false;
                entry.status = "Pending";
                entry.message = "asked to sync".into();
                why_not.get_or_insert_with(|| format!("{} is syncing", a.name));
            } else if a.out_of_sync() {
                step_done = false;
                let Some(revision) = a.revision.as_deref() else {
                    entry.status = "Waiting";
                    entry.message = "out of sync with a revision not known yet".into();
                    out.entries.push(entry);
                    continue;
                };
                let value = request_for(revision);
                if a.sync_handled.as_deref() == Some(value.as_str()) {
                    // Asked for this revision before, and still out of sync: its sync failed.
                    let why = if a.phase_message.is_empty() {
                        "still OutOfSync after its sync".to_string()
                    } else {
                        format!("its sync {}: {}", a.phase.to_lowercase(), a.phase_message)
                    };
                    let message = format!("Application {} failed at step {n}: {why}", a.name);
                    entry.status = "Progressing";
                    entry.message = why;
                    out.failed.get_or_insert(message);
                } else if blocker.is_some() {
                    entry.status = "Waiting";
                    entry.message = format!("waits for {}", blocker.clone().unwrap_or_default());
                } else if busy < limit {
                    busy += 1;
                    out.actions.push(Action::Sync {
                        app: a.name.clone(),
                        value,
                    });
                    entry.status = "Pending";
                    entry.message = format!("asked to sync {revision}");
                } else {
                    entry.status = "Waiting";
                    entry.message = format!("waits for a turn: maxUpdate is {limit}");
                }
                why_not.get_or_insert_with(|| format!("{} is OutOfSync", a.name));
            } else {
                step_done = false;
                entry.status = "Progressing";
                let failed = a.health == "Degraded" || a.phase == "Failed";
                entry.message = if a.health_message.is_empty() {
                    format!("{} {}", a.sync, a.health).trim().to_string()
                } else {
                    format!("{}: {}", a.health, a.health_message)
                };
                if failed {
                    out.failed.get_or_insert(format!(
                        "Application {} failed at step {n}: {}",
                        a.name, entry.message
                    ));
                }
                why_not.get_or_insert_with(|| format!("{} is {}", a.name, entry.message));
            }
            out.entries.push(entry);
        }
        if !step_done && blocker.is_none() {
            blocker = Some(format!(
                "step {n}: {}",
                why_not.unwrap_or_else(|| "not done".into())
            ));
        }
    }
    out.progressing = blocker;
    // A Sync of a later step never goes out while an earlier one is not done (the loop above
    // asks only while no blocker is set); a failure anywhere stops new syncs everywhere.
    if out.failed.is_some() {
        out.actions.retain(|a| matches!(a, Action::Refresh { .. }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps() -> Vec<Step> {
        ["dev", "staging", "prod"]
            .iter()
            .map(|env| Step {
                selector: Selector::requirement_of("env", "In", &[env.to_string()], "s").unwrap(),
                max_update: MaxUpdate::All,
            })
            .collect()
    }

    fn app(name: &str, env: &str, sync: &str, health: &str, revision: &str) -> App {
        App {
            name: name.into(),
            labels: [("env".to_string(), env.to_string())].into(),
            sync: sync.into(),
            health: health.into(),
            revision: Some(revision.into()),
            source: ("https://git/r".into(), "main".into()),
            ..App::default()
        }
    }

    fn syncs(p: &Plan) -> Vec<&str> {
        p.actions
            .iter()
            .filter_map(|a| match a {
                Action::Sync { app, .. } => Some(app.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_new_revision_reaches_one_step_at_a_time() {
        let mut apps = vec![
            app("a-dev", "dev", "OutOfSync", "Healthy", "r2"),
            app("b-staging", "staging", "OutOfSync", "Healthy", "r2"),
            app("c-prod", "prod", "OutOfSync", "Healthy", "r2"),
        ];
        let p = plan(&steps(), &apps);
        assert_eq!(syncs(&p), ["a-dev"]);
        assert!(
            p.progressing.as_deref().unwrap().starts_with("step 1"),
            "{p:?}"
        );
        // Asked, not yet taken: nothing more.
        apps[0].sync_requested = Some(request_for("r2"));
        assert!(syncs(&plan(&steps(), &apps)).is_empty());
        // Synced but progressing: staging still waits, and says for whom.
        apps[0].sync_handled = apps[0].sync_requested.clone();
        apps[0].sync = "Synced".into();
        apps[0].health = "Progressing".into();
        apps[0].health_message = "Deployment/x: 0 of 1 available".into();
        let p = plan(&steps(), &apps);
        assert!(syncs(&p).is_empty());
        let staging = p
            .entries
            .iter()
            .find(|e| e.application == "b-staging")
            .unwrap();
        assert_eq!(staging.status, "Waiting");
        assert!(
            staging
                .message
                .contains("a-dev is Progressing: Deployment/x"),
            "{staging:?}"
        );
        // Healthy: staging goes, prod still waits.
        apps[0].health = "Healthy".into();
        assert_eq!(syncs(&plan(&steps(), &apps)), ["b-staging"]);
    }

    #[test]
    fn an_earlier_step_behind_the_wanted_revision_is_refreshed_not_passed() {
        let apps = vec![
            app("a-dev", "dev", "Synced", "Healthy", "r1"),
            app("b-staging", "staging", "OutOfSync", "Healthy", "r2"),
        ];
        let p = plan(&steps(), &apps);
        assert!(syncs(&p).is_empty(), "staging may not pass dev: {p:?}");
        assert_eq!(
            p.actions,
            [Action::Refresh {
                app: "a-dev".into(),
                value: "rollout:r2".into()
            }]
        );
    }

    #[test]
    fn a_failed_sync_or_degraded_app_stops_the_rollout_naming_it() {
        let mut dev = app("a-dev", "dev", "OutOfSync", "Healthy", "r2");
        dev.sync_requested = Some(request_for("r2"));
        dev.sync_handled = Some(request_for("r2"));
        dev.phase = "Failed".into();
        dev.phase_message = "ConfigMap/x: forbidden".into();
        let apps = vec![
            dev,
            app("b-staging", "staging", "OutOfSync", "Healthy", "r2"),
        ];
        let p = plan(&steps(), &apps);
        assert!(syncs(&p).is_empty());
        let failed = p.failed.unwrap();
        assert!(
            failed.contains("Application a-dev failed at step 1"),
            "{failed}"
        );
        assert!(failed.contains("forbidden"), "{failed}");
        let degraded = vec![app("a-dev", "dev", "Synced", "Degraded", "r2")];
        assert!(plan(&steps(), &degraded).failed.unwrap().contains("a-dev"));
    }

    #[test]
    fn max_update_limits_a_step() {
        let mut s = steps();
        s[0].max_update = MaxUpdate::Percent(50);
        let apps: Vec<App> = (0..4)
            .map(|i| app(&format!("d{i}"), "dev", "OutOfSync", "Healthy", "r2"))
            .collect();
        assert_eq!(syncs(&plan(&s, &apps)), ["d0", "d1"]);
        assert_eq!(MaxUpdate::Percent(10).of(3), 1, "at least one");
        assert_eq!(MaxUpdate::Count(0).of(3), 0);
    }
}
