//! What every source kind's reconciler shares: suspend, interval, the reconcile around a
//! kind's own fetch, the `SourceVerified` condition, the stored artifact in status, and the
//! Secrets a fetch reads. A kind supplies only its fetch.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Instant;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use tracing::{Instrument, info};

use crate::api::conditions::{self, SOURCE_VERIFIED};
use crate::api::duration;
use crate::api::{ArtifactStatus, SourceStatus};
use crate::artifacts::Source;
use crate::runtime::context::Context;
use crate::runtime::report::Session;
use crate::runtime::{Done, Error, Failure, Reason, Schedule};

/// The parts of a source's spec every kind has.
pub struct Common<'a> {
    pub suspend: bool,
    pub interval: &'a str,
    /// `spec.verify` is set: `SourceVerified` is reported (else removed).
    pub verifies: bool,
}

/// A newly stored artifact, and (when verified) the message saying by whom.
pub struct Fetched {
    pub artifact: ArtifactStatus,
    pub verified: Option<String>,
}

/// Reconciles source `obj`: `fetch` gets the status the reconcile started from and returns
/// the new artifact, `None` when the stored one is current, or why it failed.
pub async fn reconcile<S, F, Fut>(
    obj: &S,
    ctx: &Context,
    common: Common<'_>,
    fetch: F,
) -> Result<Action, Error>
where
    S: Source,
    F: FnOnce(SourceStatus) -> Fut,
    Fut: Future<Output = Result<Option<Fetched>, Failure>>,
{
    let ns = obj.namespace().ok_or(Error::NoNamespace)?;
    let name = obj.name_any();
    let generation = obj.meta().generation;
    if common.suspend {
        info!(kind = S::KIND, namespace = %ns, name = %name, "reconciliation is suspended");
        return Ok(Action::await_change());
    }
    let started = Instant::now();
    let mut session = Session::begin(ctx, obj);
    let interval = match duration::interval("interval", common.interval) {
        Ok(d) => d,
        Err(msg) => return session.finish(Err(Failure::invalid(msg)), None).await,
    };
    let span = tracing::info_span!("reconcile", kind = S::KIND, namespace = %ns, object = %name, revision = tracing::field::Empty);
    let fetched = fetch(session.old().clone()).instrument(span.clone()).await;
    if let Ok(Some(a)) = &fetched {
        span.record("revision", a.artifact.revision.as_str());
    }
    ctx.metrics
        .fetch_duration
        .observe(started.elapsed().as_secs_f64());
    let status = &mut session.status;
    if !common.verifies {
        conditions::remove(&mut status.conditions, SOURCE_VERIFIED);
    }
    let result = match fetched {
        Ok(Some(Fetched { artifact, verified })) => {
            if let Some(msg) = verified {
                info!(kind = S::KIND, namespace = %ns, name = %name, "{msg}");
                conditions::set(
                    &mut status.conditions,
                    SOURCE_VERIFIED,
                    true,
                    Reason::Succeeded.as_str(),
                    &msg,
                    generation,
                );
            }
            let previous = status.artifact.as_ref().map(|a| &a.revision);
            let changed = previous != Some(&artifact.revision);
            let done = stored(&artifact.revision, false);
            status.artifact = Some(artifact);
            Ok(Done {
                event: if changed {
                    Reason::NewArtifact
                } else {
                    Reason::Succeeded
                },
                ..done
            })
        }
        Ok(None) => {
            // Stored here already, perhaps fetched by another replica and copied (`--shards`):
            // from now on this replica, the source's, serves it.
            if let Some(a) = status.artifact.as_mut()
                && let Some(base) = ctx.settings.storage_url.as_deref()
            {
                let key = crate::artifacts::store_key::<S>(&ns, &name);
                a.url = Some(crate::storage::url(base, &key, &a.digest));
            }
            Ok(stored(status.revision().unwrap_or_default(), true))
        }
        Err(failure) => {
            if failure.reason == Reason::VerificationError {
                conditions::set(
                    &mut status.conditions,
                    SOURCE_VERIFIED,
                    false,
                    failure.reason.as_str(),
                    &failure.message,
                    generation,
                );
            }
            Err(failure)
        }
    };
    // A source has no retry interval of its own (as in Flux): it retries on its interval.
    let schedule = Schedule {
        interval,
        retry: interval,
    };
    session.finish(result, Some(schedule)).await
}

fn stored(revision: &str, noop: bool) -> Done {
    Done {
        reason: Reason::Succeeded,
        message: format!("stored artifact for revision '{revision}'"),
        event: Reason::Succeeded,
        noop,
    }
}

/// A fetched artifact as a source's status shows it (and where other controllers download it
/// when skewer serves artifacts).
pub fn fetched(ctx: &Context, key: &str, got: super::fetch::Got) -> Fetched {
    let served = ctx.settings.storage_url.as_deref();
    Fetched {
        artifact: artifact_status(got.stored, key, got.metadata, served),
        verified: got.verified,
    }
}

/// The status of an artifact just stored under `key`; with its download URL when skewer
/// serves artifacts from `served` (a base URL).
pub fn artifact_status(
    stored: skewer_sources::Artifact,
    key: &str,
    metadata: BTreeMap<String, String>,
    served: Option<&str>,
) -> ArtifactStatus {
    ArtifactStatus {
        url: served.map(|base| crate::storage::url(base, key, &stored.digest)),
        revision: stored.revision,
        digest: stored.digest,
        size: stored.size,
        path: stored.path.display().to_string(),
        last_update_time: jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
            .to_string(),
        metadata,
    }
}

/// The artifact of `old` if the spec has not changed since it was stored (a changed spec, say
/// new ignore rules, rebuilds the artifact even for the same revision).
pub fn previous(old: &SourceStatus, generation: Option<i64>) -> Option<&ArtifactStatus> {
    old.artifact
        .as_ref()
        .filter(|_| old.observed_generation == generation)
}

/// Secret `name`, named by the spec `field` that refers to it, read by `parse`. Its absence or
/// a bad key is a failure retried on the interval (the Secret may be created or fixed later);
/// the message never holds the Secret's values.
pub async fn read_secret<T, E: std::fmt::Display>(
    ctx: &Context,
    ns: &str,
    name: &str,
    field: &str,
    parse: impl FnOnce(&BTreeMap<String, Vec<u8>>) -> Result<T, E>,
) -> Result<T, String> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| format!("{field}: cannot read secret '{ns}/{name}': {e}"))?
        .ok_or_else(|| format!("{field}: secret '{ns}/{name}' not found"))?;
    let data = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    parse(&data).map_err(|e| format!("{field}: secret '{ns}/{name}': {e}"))
}
