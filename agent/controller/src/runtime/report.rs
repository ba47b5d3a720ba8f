//! A reconcile's bookkeeping, the same for every kind. [`Session::begin`] notes the status it
//! starts from and handles the reconcile request; [`Session::finish`] turns the outcome into
//! the `Ready`, `Reconciling` and `Stalled` conditions, a log line and an Event when `Ready`
//! changes, the metric, the retry backoff, and one status write when anything changed.

use std::time::Instant;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use skewer_appliers::message::bounded;
use tracing::{info, warn};

use super::context::Context;
use super::outcome::{Done, Failure, Schedule, result_label};
use super::status::{self, Reconciled};
use super::{Error, MAX_CONDITION_MESSAGE};
use crate::api::conditions::{self, READY};
use crate::notify::event::Phase;

/// The key under which an object's consecutive failures are counted.
pub fn failure_key<K: Reconciled>(obj: &K) -> String {
    format!(
        "{}/{}/{}",
        K::KIND,
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}

/// One reconcile of `obj`: the status it started from, the status it is building, and when it
/// started. Begun before any work; [`Session::finish`] reports the outcome.
pub struct Session<'a, K: Reconciled> {
    ctx: &'a Context,
    obj: &'a K,
    old: K::Status,
    /// The status this reconcile will write; reconcilers set their kind's own fields here.
    pub status: K::Status,
    /// A reconcile request (`skewer.dev/reconcile-requested-at`) not handled before: reconcile
    /// in full, even when nothing changed.
    pub requested: bool,
    started: Instant,
    force_write: bool,
}

impl<'a, K: Reconciled> Session<'a, K> {
    pub fn begin(ctx: &'a Context, obj: &'a K) -> Self {
        let old = obj.status().cloned().unwrap_or_default();
        let mut status = old.clone();
        let requested = status::take_request(obj, &mut status);
        Self {
            ctx,
            obj,
            old,
            status,
            requested,
            started: Instant::now(),
            force_write: false,
        }
    }

    /// The status the reconcile started from.
    pub fn old(&self) -> &K::Status {
        &self.old
    }

    /// The reconcile already wrote part of the status: write the whole of it at the end even
    /// if it equals what it started from.
    pub fn wrote_status(&mut self) {
        self.force_write = true;
    }

    /// Reports the outcome and decides when to run again. `schedule` is `None` when the spec's
    /// own durations are unusable (the failure then stalls).
    pub async fn finish(
        self,
        result: Result<Done, Failure>,
        schedule: Option<Schedule>,
    ) -> Result<Action, Error> {
        let Session {
            ctx,
            obj,
            old,
            mut status,
            started,
            force_write,
            ..
        } = self;
        let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
        let key = failure_key(obj);
        let generation = obj.meta().generation;
        ctx.metrics
            .observe_reconcile(K::KIND, result_label(&result), started.elapsed());
        let was = conditions::find(K::conditions(&old), READY)
            .map(|c| (c.status.clone(), c.message.clone()));
        // The log has the whole message; status and Events a bounded one.
        let result = result
            .map(|d| Done {
                message: bounded(&d.message, MAX_CONDITION_MESSAGE),
                ..d
            })
            .map_err(|f| {
                warn!(kind = K::KIND, namespace = %ns, name = %name, reason = %f.reason, error = %f.message, "reconcile failed");
                Failure {
                    message: bounded(&f.message, MAX_CONDITION_MESSAGE),
                    ..f
                }
            });
        // What Alerts would hear, kept only when one listens.
        let said = ctx.notifier.listening().then(|| match &result {
            Ok(d) => (d.event, d.message.clone(), Phase::Succeeded),
            Err(f) => (f.reason, f.message.clone(), Phase::Failed),
        });
        let (action, event) = match result {
            Ok(done) => {
                conditions::mark_ready(
                    K::conditions_mut(&mut status),
                    done.reason.as_str(),
                    &done.message,
                    generation,
                );
                ctx.failures.clear(&key);
                let event = (was != Some(("True".into(), done.message.clone()))).then(|| {
                    info!(kind = K::KIND, namespace = %ns, name = %name, "{}", done.message);
                    (false, done.event, done.message)
                });
                let action = match schedule {
                    Some(s) => Action::requeue(s.interval),
                    None => Action::await_change(),
                };
                (action, event)
            }
            Err(f) => {
                let cs = K::conditions_mut(&mut status);
                let action = match schedule {
                    Some(s) if !f.reason.stalls() => {
                        conditions::mark_failed(cs, f.reason.as_str(), &f.message, generation);
                        let failures = ctx.failures.record(&key);
                        Action::requeue(super::backoff::delay(s.retry, s.interval, failures))
                    }
                    _ => {
                        conditions::mark_stalled(cs, f.reason.as_str(), &f.message, generation);
                        Action::await_change()
                    }
                };
                let event = (was != Some(("False".into(), f.message.clone())))
                    .then_some((true, f.reason, f.message));
                (action, event)
            }
        };
        *K::observed_generation(&mut status) = generation;
        if force_write || status != old {
            status::write(&ctx.client, obj, &status).await?;
        }
        // Alerts hear what Events say, and of every new revision's outcome (a commit status
        // needs one per commit, even when the message is the last one's).
        let revision = K::revision(&status);
        if let Some((reason, message, phase)) = said
            && (event.is_some() || revision != K::revision(&old))
        {
            ctx.notify(obj, revision, reason, &message, phase);
        }
        // After the status write, so that an event's round trip never delays what status says.
        if let Some((warning, reason, note)) = event {
            ctx.event(obj, warning, reason, note).await;
        }
        Ok(action)
    }
}
