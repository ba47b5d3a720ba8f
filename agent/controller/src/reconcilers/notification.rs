//! Providers and Alerts: each reconcile checks the object (every error names its field),
//! reads a Provider's Secrets, and registers it with [`crate::notify::deliver::Notifier`],
//! which matches events and delivers them. Every replica registers every one (an event may
//! happen in any shard). A Provider's `status.lastDelivery` is the deliveries' to write: its
//! reconcile never writes that field.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use crate::api::notification::{Alert, Provider};
use crate::notify::alert::Rules;
use crate::notify::deliver::Target;
use crate::notify::provider::Endpoint;
use crate::runtime::context::Context;
use crate::runtime::report::Session;
use crate::runtime::{self, Done, Error, Failure, Reason, Schedule};

/// A Provider's default timeout for one delivery (Flux's), and the longest it may ask for.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// Checked again every so often (a Secret's change is seen then, or at the next change of the
/// object); sooner after a failure.
const SCHEDULE: Schedule = Schedule {
    interval: Duration::from_secs(600),
    retry: Duration::from_secs(10),
};

pub async fn run_providers(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<Provider> = crate::api::scoped(&ctx.client, namespace.as_deref());
    runtime::controller::run(ctx, runtime::controller::of(api), reconcile_provider).await;
}

fn reconcile_provider(
    p: Arc<Provider>,
    ctx: Arc<Context>,
) -> BoxFuture<'static, Result<Action, Error>> {
    runtime::controller::finalized(p, ctx, apply_provider, cleanup_provider)
}

pub async fn run_alerts(ctx: Arc<Context>, namespace: Option<String>) {
    let api: Api<Alert> = crate::api::scoped(&ctx.client, namespace.as_deref());
    runtime::controller::run(ctx, runtime::controller::of(api), reconcile_alert).await;
}

fn reconcile_alert(a: Arc<Alert>, ctx: Arc<Context>) -> BoxFuture<'static, Result<Action, Error>> {
    runtime::controller::finalized(a, ctx, apply_alert, cleanup_alert)
}

fn key_of<K: ResourceExt>(obj: &K) -> (String, String) {
    (obj.namespace().unwrap_or_default(), obj.name_any())
}

async fn apply_provider(p: Arc<Provider>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut session = Session::begin(&ctx, p.as_ref());
    // Left out of this reconcile's write, so that a delivery's newer one is never undone.
    session.status.last_delivery = None;
    let result = register_provider(&p, &ctx).await;
    if result.is_err() {
        ctx.notifier.remove_provider(&key_of(p.as_ref()));
    }
    session.finish(result, Some(SCHEDULE)).await
}

async fn register_provider(p: &Provider, ctx: &Context) -> Result<Done, Failure> {
    let (ns, _) = key_of(p);
    let spec = &p.spec;
    let timeout = match &spec.timeout {
        None => DEFAULT_TIMEOUT,
        Some(t) => crate::api::duration::field("timeout", t).map_err(Failure::invalid)?,
    };
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(Failure::invalid(format!(
            "spec.timeout: {timeout:?} is not between 0 and {MAX_TIMEOUT:?}"
        )));
    }
    let secret = match &spec.secret_ref {
        None => None,
        Some(r) => Some(
            super::source::read_secret(ctx, &ns, &r.name, "spec.secretRef", |d| {
                Ok::<_, String>(d.clone())
            })
            .await
            .map_err(|m| Failure::new(Reason::AuthenticationFailed, m))?,
        ),
    };
    let endpoint = Endpoint::new(spec, &p.uid().unwrap_or_default(), secret.as_ref())
        .map_err(Failure::invalid)?;
    let mut client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(timeout);
    if let Some(r) = &spec.cert_secret_ref {
        let ca = super::source::read_secret(ctx, &ns, &r.name, "spec.certSecretRef", |d| {
            let pem = d.get("ca.crt").ok_or("no 'ca.crt' key")?;
            reqwest::Certificate::from_pem(pem).map_err(|_| "'ca.crt' is not a PEM certificate")
        })
        .await
        .map_err(|m| Failure::new(Reason::AuthenticationFailed, m))?;
        client = client.add_root_certificate(ca);
    }
    let client = client
        .build()
        .map_err(|e| Failure::invalid(format!("spec: cannot make an HTTP client: {e}")))?;
    let what = format!("{} at {}", endpoint.kind.name(), endpoint.shown());
    let target = Target {
        endpoint,
        client,
        timeout,
        object: p.object_ref(&()),
    };
    ctx.notifier.set_provider(key_of(p), target, spec.suspend);
    Ok(Done {
        reason: Reason::Succeeded,
        message: format!("Provider ready: {what}"),
        event: Reason::Succeeded,
        noop: false,
    })
}

async fn cleanup_provider(p: Arc<Provider>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.notifier.remove_provider(&key_of(p.as_ref()));
    Ok(Action::await_change())
}

async fn apply_alert(a: Arc<Alert>, ctx: Arc<Context>) -> Result<Action, Error> {
    let session = Session::begin(&ctx, a.as_ref());
    let result = register_alert(&a, &ctx);
    // An Alert whose Provider is not registered yet stays registered: its events go out as
    // soon as the Provider is.
    if result
        .as_ref()
        .is_err_and(|f| f.reason != Reason::DependencyNotReady)
    {
        ctx.notifier.remove_alert(&key_of(a.as_ref()));
    }
    session.finish(result, Some(SCHEDULE)).await
}

fn register_alert(a: &Alert, ctx: &Context) -> Result<Done, Failure> {
    let (ns, name) = key_of(a);
    let spec = &a.spec;
    for (i, s) in spec.event_sources.iter().enumerate() {
        if let Some(other) = s.namespace.as_deref().filter(|n| *n != ns)
            && !ctx.settings.cross_namespace_refs
        {
            return Err(Failure::new(
                Reason::AccessDenied,
                format!(
                    "spec.eventSources[{i}].namespace: '{other}' is another namespace than this Alert's ('{ns}'), and skewer runs with --no-cross-namespace-refs"
                ),
            ));
        }
    }
    let rules = Rules::new(&ns, spec).map_err(Failure::invalid)?;
    let provider = spec.provider_ref.name.clone();
    ctx.notifier
        .set_alert((ns.clone(), name), rules, provider.clone(), spec.suspend);
    if !ctx.notifier.has_provider(&(ns, provider.clone())) {
        return Err(Failure::new(
            Reason::DependencyNotReady,
            format!("spec.providerRef: Provider '{provider}' is missing or not ready"),
        ));
    }
    Ok(Done {
        reason: Reason::Succeeded,
        message: format!("Alert ready: events go to Provider '{provider}'"),
        event: Reason::Succeeded,
        noop: false,
    })
}

async fn cleanup_alert(a: Arc<Alert>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.notifier.remove_alert(&key_of(a.as_ref()));
    Ok(Action::await_change())
}
