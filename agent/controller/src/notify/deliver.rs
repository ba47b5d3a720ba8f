//! Delivery that never slows a sync. [`Notifier::publish`] only matches and queues (no I/O,
//! never waits); each Provider has a bounded queue and one task that sends from it, at most
//! [`PER_SECOND`] requests a second, each within the Provider's timeout, retried with backoff
//! on a timeout, a 429 or a 5xx at most [`ATTEMPTS`] times. A Provider that is down fills only
//! its own queue, and all queues together hold at most [`QUEUED_AT_MOST`] events; what does
//! not fit is dropped and counted. The same event for the same
//! Provider within [`DEDUP_WINDOW`] is sent once (a failing Kustomization retried every few
//! seconds makes one message, not one per retry). A commit status still queued when a newer
//! one for the same object and revision is queued is not sent: the host would show the newer
//! one at once anyway.
//!
//! Outcomes go to `skewer_notifications_total{provider,result}`, to the Provider's
//! `status.lastDelivery` (written when the result changes, at most every
//! [`STATUS_EVERY`] otherwise), and a failure to a Warning Event on the Provider once per
//! streak. A request's headers (which hold tokens) are never logged.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Reporter;

use crate::runtime::events::Recorder;
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::alert::Rules;
use super::event::Event;
use super::provider::{Endpoint, Outgoing};
use crate::api::notification::{Delivery, Provider};
use crate::metrics::Metrics;

/// Events waiting for one Provider; more are dropped (and counted). A new revision of a
/// repository many Kustomizations read makes two events each (its start and its end).
pub const QUEUE: usize = 4096;
/// Events waiting for all Providers together, whatever tenants create: about 1 KiB each.
pub const QUEUED_AT_MOST: usize = 16_384;
/// The same event for the same Provider is sent once within this window (Flux's default).
pub const DEDUP_WINDOW: Duration = Duration::from_secs(300);
/// Remembered events for deduplication, at most.
const MAX_REMEMBERED: usize = 65_536;
/// Requests a second to one Provider, at most.
pub const PER_SECOND: u32 = 20;
/// Tries of one request, at most.
pub const ATTEMPTS: u32 = 3;
/// The first retry's wait; each next one doubles.
const FIRST_RETRY: Duration = Duration::from_millis(500);
/// `status.lastDelivery` is written at most this often while its result stays the same.
pub const STATUS_EVERY: Duration = Duration::from_secs(30);
/// What is read of an answer, at most (for the message in status).
const MAX_ANSWER: usize = 512;

/// `namespace/name`.
type Key = (String, String);

/// Where events go: the Alerts and Providers registered by their reconcilers.
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
    /// This replica, as events name it (`reportingInstance`).
    instance: String,
}

struct Inner {
    state: Mutex<State>,
    /// Events queued for any Provider, at most [`QUEUED_AT_MOST`].
    queued: AtomicUsize,
    metrics: Arc<Metrics>,
    report: Report,
}

#[derive(Default)]
struct State {
    alerts: BTreeMap<Key, Registered>,
    providers: HashMap<Key, Destination>,
    /// Dedup key → when it was queued.
    seen: HashMap<u64, Instant>,
    /// Numbers the queued events, for [`Latest`].
    queued_events: u64,
}

/// For a commit status, only the last state of a commit's context counts: the number of the
/// newest event queued for each (object, revision), so that older ones still queued are not
/// sent (a `pending` that its sync's `success` caught up with).
type Latest = Arc<Mutex<HashMap<(String, Option<String>), u64>>>;

fn latest_key(e: &Event) -> (String, Option<String>) {
    (e.subject(), e.revision().map(str::to_string))
}

struct Registered {
    rules: Arc<Rules>,
    provider: String,
    suspended: bool,
}

/// A Provider as deliveries see it: replaced whole when the Provider changes.
pub struct Target {
    pub endpoint: Endpoint,
    pub client: reqwest::Client,
    pub timeout: Duration,
    /// The Provider, for its status and Events.
    pub object: ObjectReference,
}

struct Destination {
    current: Arc<Mutex<Arc<Target>>>,
    suspended: bool,
    queue: mpsc::Sender<(u64, Event)>,
    latest: Latest,
}

/// Where outcomes are written: the Provider's status and Events (none in unit tests).
struct Report {
    client: Option<kube::Client>,
    recorder: Option<Recorder>,
    /// Provider → (last result, when status was last written).
    last: Mutex<HashMap<Key, (&'static str, Instant)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Notifier {
    /// A notifier writing outcomes through `client` (`None`: metrics only), its Events
    /// through `recorder` (the one the reconcilers use, so an Event said by either counts up
    /// the same series); `reporter` names the instance in the events it sends.
    pub fn new(
        client: Option<kube::Client>,
        recorder: Option<Recorder>,
        reporter: Reporter,
        metrics: Arc<Metrics>,
    ) -> Self {
        let instance = reporter.instance.clone().unwrap_or_default();
        Self {
            instance,
            inner: Arc::new(Inner {
                state: Mutex::default(),
                queued: AtomicUsize::new(0),
                metrics,
                report: Report {
                    client,
                    recorder,
                    last: Mutex::default(),
                },
            }),
        }
    }

    /// Registers (or replaces) the Alert `key`.
    pub fn set_alert(&self, key: Key, rules: Rules, provider: String, suspended: bool) {
        let entry = Registered {
            rules: Arc::new(rules),
            provider,
            suspended,
        };
        lock(&self.inner.state).alerts.insert(key, entry);
    }

    pub fn remove_alert(&self, key: &Key) {
        lock(&self.inner.state).alerts.remove(key);
    }

    /// Registers (or replaces) the Provider `key`; its queue and task are kept across changes.
    pub fn set_provider(&self, key: Key, target: Target, suspended: bool) {
        let mut state = lock(&self.inner.state);
        if let Some(d) = state.providers.get_mut(&key)
            && !d.queue.is_closed()
        {
            *lock(&d.current) = Arc::new(target);
            d.suspended = suspended;
            return;
        }
        let current = Arc::new(Mutex::new(Arc::new(target)));
        let latest = Latest::default();
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(deliver(
            self.inner.clone(),
            key.clone(),
            current.clone(),
            latest.clone(),
            rx,
        ));
        state.providers.insert(
            key,
            Destination {
                current,
                suspended,
                queue,
                latest,
            },
        );
    }

    /// Forgets the Provider `key`: its task ends once its queue is empty.
    pub fn remove_provider(&self, key: &Key) {
        lock(&self.inner.state).providers.remove(key);
        lock(&self.inner.report.last).remove(key);
    }

    /// Whether a Provider `namespace/name` is registered.
    pub fn has_provider(&self, key: &Key) -> bool {
        lock(&self.inner.state).providers.contains_key(key)
    }

    /// This replica, as the events it sends name it.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether any Alert is registered (when none is, there is nothing to publish).
    pub fn listening(&self) -> bool {
        !lock(&self.inner.state).alerts.is_empty()
    }

    /// Queues `event` for the Provider of every Alert that selects it. Never waits.
    pub fn publish(&self, event: &Event) {
        let now = Instant::now();
        let mut state = lock(&self.inner.state);
        let State {
            alerts,
            providers,
            seen,
            queued_events,
        } = &mut *state;
        for ((ns, _), alert) in alerts.iter() {
            if alert.suspended || !alert.rules.matches(event) {
                continue;
            }
            let key = (ns.clone(), alert.provider.clone());
            let Some(dest) = providers.get(&key).filter(|d| !d.suspended) else {
                continue;
            };
            let provider_kind = lock(&dest.current).endpoint.kind;
            if !provider_kind.takes(event.phase) {
                continue;
            }
            let commit_status = provider_kind.is_commit_status();
            let kind = provider_kind.name();
            let dressed = alert.rules.dress(event);
            let fingerprint = fingerprint(&key, &dressed);
            if seen
                .get(&fingerprint)
                .is_some_and(|t| now.duration_since(*t) < DEDUP_WINDOW)
            {
                self.inner.metrics.notification(kind, "deduplicated");
                continue;
            }
            if seen.len() >= MAX_REMEMBERED {
                seen.retain(|_, t| now.duration_since(*t) < DEDUP_WINDOW);
                if seen.len() >= MAX_REMEMBERED {
                    seen.clear();
                }
            }
            seen.insert(fingerprint, now);
            *queued_events += 1;
            let number = *queued_events;
            let newest = commit_status.then(|| (latest_key(&dressed), number));
            let before = newest
                .as_ref()
                .and_then(|(k, n)| lock(&dest.latest).insert(k.clone(), *n));
            let queued = &self.inner.queued;
            let room = queued.fetch_add(1, Ordering::SeqCst) < QUEUED_AT_MOST;
            if !room || dest.queue.try_send((number, dressed)).is_err() {
                queued.fetch_sub(1, Ordering::SeqCst);
                if let Some((k, _)) = newest {
                    let mut latest = lock(&dest.latest);
                    match before {
                        Some(b) => latest.insert(k, b),
                        None => latest.remove(&k),
                    };
                }
                self.inner.metrics.notification(kind, "dropped");
                warn!(provider = %format!("{}/{}", key.0, key.1), event = %event.subject(), "notification dropped: the Provider's queue is full");
            }
        }
    }
}

/// What makes two events the same for one Provider.
fn fingerprint(provider: &Key, e: &Event) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    provider.hash(&mut h);
    e.subject().hash(&mut h);
    e.reason.hash(&mut h);
    e.message.hash(&mut h);
    e.severity.hash(&mut h);
    e.phase.hash(&mut h);
    e.revision().hash(&mut h);
    h.finish()
}

/// One Provider's task: sends what its queue holds, spaced, until it is removed.
async fn deliver(
    inner: Arc<Inner>,
    key: Key,
    current: Arc<Mutex<Arc<Target>>>,
    latest: Latest,
    mut rx: mpsc::Receiver<(u64, Event)>,
) {
    let gap = Duration::from_secs(1) / PER_SECOND;
    let mut last: Option<tokio::time::Instant> = None;
    while let Some((number, event)) = rx.recv().await {
        inner.queued.fetch_sub(1, Ordering::SeqCst);
        let target = lock(&current).clone();
        if target.endpoint.kind.is_commit_status() {
            let mut latest = lock(&latest);
            let key = latest_key(&event);
            match latest.get(&key) {
                Some(&newest) if newest > number => {
                    inner
                        .metrics
                        .notification(target.endpoint.kind.name(), "superseded");
                    continue;
                }
                Some(_) => {
                    latest.remove(&key);
                }
                None => {}
            }
        }
        let Some(request) = target.endpoint.request(&event) else {
            continue;
        };
        if let Some(l) = last {
            tokio::time::sleep_until(l + gap).await;
        }
        let result = send(&target, &request).await;
        last = Some(tokio::time::Instant::now());
        let kind = target.endpoint.kind.name();
        match &result {
            Ok(_) => inner.metrics.notification(kind, "delivered"),
            Err(e) => {
                inner.metrics.notification(kind, "failed");
                warn!(provider = %format!("{}/{}", key.0, key.1), event = %event.subject(), error = %e, "notification failed");
            }
        }
        inner.report.record(&key, &target, &event, result).await;
    }
    debug!(provider = %format!("{}/{}", key.0, key.1), "notification queue closed");
}

/// Sends `request`, retrying what may pass later. `Ok`: the endpoint's status line.
pub async fn send(target: &Target, request: &Outgoing) -> Result<String, String> {
    let mut wait = FIRST_RETRY;
    let mut attempt = 1;
    loop {
        let outcome = send_once(target, request).await;
        match outcome {
            Ok(status) => return Ok(status),
            Err((retry, e)) if !retry || attempt >= ATTEMPTS => {
                return Err(if attempt > 1 {
                    format!("{e} (after {attempt} tries)")
                } else {
                    e
                });
            }
            Err(_) => {
                tokio::time::sleep(wait).await;
                wait = wait.saturating_mul(2);
                attempt += 1;
            }
        }
    }
}

/// One try: `Err((whether a retry may help, why))`.
async fn send_once(target: &Target, request: &Outgoing) -> Result<String, (bool, String)> {
    let mut builder = target
        .client
        .post(&request.url)
        .timeout(target.timeout)
        .body(request.body.clone());
    for (name, value) in &request.headers {
        builder = builder.header(*name, value);
    }
    let response = builder.send().await.map_err(|e| {
        let what = if e.is_timeout() {
            format!("no answer within {:?}", target.timeout)
        } else if e.is_connect() {
            "cannot connect".to_string()
        } else {
            "the request failed".to_string()
        };
        // reqwest's own message names the URL, which may hold a token (Slack, Discord): not
        // repeated.
        (true, what)
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(status.to_string());
    }
    let retry = status.is_server_error() || status.as_u16() == 429;
    let answer = String::from_utf8_lossy(&head(response).await).into_owned();
    Err((retry, format!("{status}: {}", answer.trim())))
}

/// The first [`MAX_ANSWER`] bytes of an answer's body: what is read of it, however much the
/// endpoint sends.
async fn head(mut response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < MAX_ANSWER {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = MAX_ANSWER - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}

impl Report {
    async fn record(
        &self,
        key: &Key,
        target: &Target,
        event: &Event,
        result: Result<String, String>,
    ) {
        let (label, message) = match &result {
            Ok(status) => ("Delivered", status.clone()),
            Err(e) => ("Failed", e.clone()),
        };
        let (changed, due) = {
            let mut last = lock(&self.last);
            let now = Instant::now();
            let (changed, due) = match last.get(key) {
                Some((was, at)) => (*was != label, now.duration_since(*at) >= STATUS_EVERY),
                None => (true, true),
            };
            if changed || due {
                last.insert(key.clone(), (label, now));
            }
            (changed, due)
        };
        if let (Err(e), true, Some(recorder)) = (&result, changed, &self.recorder) {
            let note = format!("{} ({}): {e}", event.subject(), event.reason);
            if let Err(err) = recorder
                .publish(&target.object, true, "DeliveryFailed", "Notify", note)
                .await
            {
                warn!(error = %err, "cannot publish event");
            }
        }
        if !(changed || due) {
            return;
        }
        let Some(client) = &self.client else { return };
        let delivery = Delivery {
            time: jiff::Timestamp::now().to_string(),
            result: label.into(),
            event: format!("{} {}", event.subject(), event.reason),
            message,
        };
        let api: kube::Api<Provider> = kube::Api::namespaced(client.clone(), &key.0);
        let patch = json!({"status": {"lastDelivery": delivery}});
        if let Err(e) = api
            .patch_status(
                &key.1,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(patch),
            )
            .await
        {
            debug!(error = %e, "cannot write the Provider's lastDelivery");
        }
    }
}

#[cfg(test)]
mod tests;
