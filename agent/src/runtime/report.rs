//! The end of every reconcile, for every kind: the outcome becomes the `Ready`, `Reconciling`
//! and `Stalled` conditions, a log line and an Event when `Ready` changes, the metric, the
//! retry backoff, and one status write when anything changed.

use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::{info, warn};

use super::outcome::{Done, Failure, result_label};
use super::status::{self, Reconciled};
use super::{Context, Error};
use crate::api::conditions::{self, READY};

/// When a kind reconciles again: every `interval`, and after failures from `retry` up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub interval: Duration,
    pub retry: Duration,
}

/// Reports a reconcile's outcome and decides when to run again. `schedule` is `None` when
/// the spec's own durations are unusable (the failure then stalls). `force_write` writes the
/// status even if it equals `old` (the reconcile already wrote part of it).
#[allow(clippy::too_many_arguments)]
pub async fn finish<K: Reconciled>(
    ctx: &Context,
    obj: &K,
    old: &K::Status,
    mut status: K::Status,
    result: Result<Done, Failure>,
    schedule: Option<Schedule>,
    started: Instant,
    force_write: bool,
) -> Result<Action, Error> {
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    let key = format!("{}/{ns}/{name}", K::KIND);
    let generation = obj.meta().generation;
    ctx.metrics
        .observe_reconcile(K::KIND, result_label(&result), started.elapsed());
    let was =
        conditions::find(K::conditions(old), READY).map(|c| (c.status.clone(), c.message.clone()));
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
            warn!(kind = K::KIND, namespace = %ns, name = %name, reason = %f.reason, error = %f.message, "reconcile failed");
            let cs = K::conditions_mut(&mut status);
            let action = match schedule {
                _ if f.reason.stalls() => {
                    conditions::mark_stalled(cs, f.reason.as_str(), &f.message, generation);
                    Action::await_change()
                }
                Some(s) => {
                    conditions::mark_failed(cs, f.reason.as_str(), &f.message, generation);
                    Action::requeue(super::backoff::delay(
                        s.retry,
                        s.interval,
                        ctx.failures.record(&key),
                    ))
                }
                None => {
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
    if force_write || status != *old {
        status::write(&ctx.client, obj, &status).await?;
    }
    // After the status write, so that an event's round trip never delays what status says.
    if let Some((warning, reason, note)) = event {
        ctx.event(obj, warning, reason, note).await;
    }
    Ok(action)
}
