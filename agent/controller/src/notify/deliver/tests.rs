//! Delivery against a real HTTP server on loopback, whose answers each test chooses.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use super::*;
use crate::api::LocalObjectReference;
use crate::api::notification::{AlertSpec, ProviderSpec};
use crate::api::receiver::ResourceReference as EventSource;
use crate::notify::event::{InvolvedObject, Phase, REVISION_KEY, Severity};

/// What the server was sent, and what it answers.
#[derive(Default)]
struct Server {
    received: Mutex<Vec<(HeaderMap, Bytes)>>,
    status: Mutex<Option<StatusCode>>,
    hang: std::sync::atomic::AtomicBool,
    /// Answer 400 with a body that never ends.
    endless: std::sync::atomic::AtomicBool,
    hits: AtomicUsize,
}

async fn serve() -> (Arc<Server>, String) {
    let server = Arc::new(Server::default());
    let app = Router::new()
        .route("/{*path}", post(hook))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port on loopback");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (server, format!("http://{addr}"))
}

async fn hook(State(s): State<Arc<Server>>, headers: HeaderMap, body: Bytes) -> Response {
    s.hits.fetch_add(1, Ordering::SeqCst);
    if s.hang.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    lock(&s.received).push((headers, body));
    if s.endless.load(Ordering::SeqCst) {
        let chunks = futures::stream::repeat_with(|| {
            Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; 64 * 1024]))
        });
        return (StatusCode::BAD_REQUEST, Body::from_stream(chunks)).into_response();
    }
    lock(&s.status).unwrap_or(StatusCode::OK).into_response()
}

fn event(name: &str, severity: Severity, message: &str) -> Event {
    Event {
        involved_object: InvolvedObject {
            kind: "Kustomization".into(),
            namespace: "apps".into(),
            name: name.into(),
            uid: "u".into(),
            api_version: "skewer.dev/v1alpha1".into(),
        },
        severity,
        timestamp: "2026-11-26T00:00:00Z".into(),
        message: message.into(),
        reason: "ReconciliationFailed".into(),
        metadata: [(REVISION_KEY.to_string(), "main@sha1:1".to_string())].into(),
        reporting_controller: "skewer".into(),
        reporting_instance: String::new(),
        labels: BTreeMap::new(),
        phase: if severity == Severity::Error {
            Phase::Failed
        } else {
            Phase::Succeeded
        },
    }
}

fn notifier(
    kind: &str,
    address: &str,
    timeout: Duration,
    alert: AlertSpec,
) -> (Notifier, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::default());
    let n = Notifier::new(None, None, reporter(), metrics.clone());
    let spec = ProviderSpec {
        kind: kind.into(),
        address: Some(address.into()),
        secret_ref: Some(LocalObjectReference { name: "s".into() }),
        ..Default::default()
    };
    let secret = BTreeMap::from([("token".to_string(), b"key".to_vec())]);
    let endpoint = Endpoint::new(&spec, "uid", Some(&secret)).expect("a valid provider");
    let target = Target {
        endpoint,
        client: reqwest::Client::new(),
        timeout,
        object: ObjectReference::default(),
    };
    n.set_provider(("apps".into(), "hook".into()), target, false);
    let rules = Rules::new("apps", &alert).expect("a valid alert");
    n.set_alert(("apps".into(), "a".into()), rules, "hook".into(), false);
    (n, metrics)
}

/// A `generic` Provider's target at `address`, without a Secret.
fn generic(address: String, timeout: Duration) -> Target {
    let spec = ProviderSpec {
        kind: "generic".into(),
        address: Some(address),
        ..Default::default()
    };
    Target {
        endpoint: Endpoint::new(&spec, "uid", None).expect("a valid provider"),
        client: reqwest::Client::new(),
        timeout,
        object: ObjectReference::default(),
    }
}

fn reporter() -> Reporter {
    Reporter {
        controller: "skewer".into(),
        instance: None,
    }
}

fn every_kustomization() -> AlertSpec {
    AlertSpec {
        event_sources: vec![EventSource {
            kind: "Kustomization".into(),
            name: "*".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A server, and a notifier whose Provider of type `kind` posts to it, for every
/// Kustomization's events.
async fn started(kind: &str, timeout: Duration) -> (Arc<Server>, Notifier, Arc<Metrics>) {
    let (server, url) = serve().await;
    let address = if kind == "github" {
        format!("{url}/org/repo")
    } else {
        format!("{url}/in")
    };
    let (n, metrics) = notifier(kind, &address, timeout, every_kustomization());
    (server, n, metrics)
}

fn count(metrics: &Metrics, provider: &str, result: &'static str) -> u64 {
    metrics
        .notifications
        .get_or_create(&crate::metrics::NotificationLabels {
            provider: provider.into(),
            result,
        })
        .get()
}

/// Polls `check` until it holds, for at most 10 s.
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn one_message_per_failure_not_one_per_retry_and_none_excluded() {
    let (server, url) = serve().await;
    let mut alert = every_kustomization();
    alert.exclusion_list = vec!["ignore me".into()];
    let (n, metrics) = notifier(
        "generic-hmac",
        &format!("{url}/in"),
        Duration::from_secs(5),
        alert,
    );
    for _ in 0..5 {
        n.publish(&event("web", Severity::Error, "apply failed"));
    }
    n.publish(&event("web", Severity::Error, "please ignore me"));
    n.publish(&event("db", Severity::Error, "apply failed"));
    until("two deliveries", || {
        count(&metrics, "generic-hmac", "delivered") == 2
    })
    .await;
    assert_eq!(count(&metrics, "generic-hmac", "deduplicated"), 4);
    let received = lock(&server.received);
    assert_eq!(
        received.len(),
        2,
        "web once, db once, the excluded one never"
    );
    for (headers, body) in received.iter() {
        let sig = headers["x-signature"].to_str().unwrap();
        assert_eq!(
            sig,
            format!("sha256={}", crate::notify::provider::sign("key", body))
        );
        let json: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert_eq!(json["message"], "apply failed");
    }
}

#[tokio::test]
async fn a_failing_provider_is_retried_a_bounded_number_of_times() {
    let (server, n, metrics) = started("generic", Duration::from_secs(5)).await;
    *lock(&server.status) = Some(StatusCode::INTERNAL_SERVER_ERROR);
    n.publish(&event("web", Severity::Error, "apply failed"));
    until("a failure", || count(&metrics, "generic", "failed") == 1).await;
    assert_eq!(server.hits.load(Ordering::SeqCst), ATTEMPTS as usize);

    // A 4xx is not retried: it will not pass later.
    *lock(&server.status) = Some(StatusCode::UNAUTHORIZED);
    n.publish(&event("web", Severity::Error, "another failure"));
    until("a second failure", || {
        count(&metrics, "generic", "failed") == 2
    })
    .await;
    assert_eq!(server.hits.load(Ordering::SeqCst), ATTEMPTS as usize + 1);
}

#[tokio::test]
async fn a_provider_that_never_answers_costs_the_publisher_nothing() {
    let (server, n, metrics) = started("slack", Duration::from_secs(30)).await;
    server.hang.store(true, Ordering::SeqCst);
    // More distinct events than the queue holds: publish never waits, the rest is dropped.
    let total = QUEUE + 50;
    for i in 0..total {
        n.publish(&event("web", Severity::Error, &format!("failure {i}")));
    }
    until("the first request", || {
        server.hits.load(Ordering::SeqCst) == 1
    })
    .await;
    let dropped = count(&metrics, "slack", "dropped");
    assert!(
        (49..=50).contains(&dropped),
        "{dropped} dropped of {total} with a queue of {QUEUE}"
    );
    assert_eq!(count(&metrics, "slack", "delivered"), 0);
}

#[tokio::test]
async fn suspended_alerts_and_providers_send_nothing_and_starts_go_only_to_commit_statuses() {
    let (server, n, metrics) = started("generic", Duration::from_secs(5)).await;
    let rules = Rules::new("apps", &every_kustomization()).unwrap();
    n.set_alert(("apps".into(), "a".into()), rules, "hook".into(), true);
    n.publish(&event("web", Severity::Error, "one"));
    let mut started = event("web", Severity::Info, "starting");
    started.phase = Phase::Started;
    let rules = Rules::new("apps", &every_kustomization()).unwrap();
    n.set_alert(("apps".into(), "a".into()), rules, "hook".into(), false);
    n.publish(&started);
    n.publish(&event("web", Severity::Error, "two"));
    until("one delivery", || {
        count(&metrics, "generic", "delivered") == 1
    })
    .await;
    let received = lock(&server.received);
    let body: serde_json::Value = serde_json::from_slice(&received[0].1).unwrap();
    assert_eq!(body["message"], "two");
}

#[tokio::test]
async fn commit_statuses_reach_the_hosts_api() {
    let (server, n, metrics) = started("github", Duration::from_secs(5)).await;
    let sha = "0df2d77f9e3c8a1b2c3d4e5f60718293a4b5c6d7";
    let mut e = event("web", Severity::Info, "Applied revision");
    e.metadata
        .insert(REVISION_KEY.into(), format!("main@sha1:{sha}"));
    n.publish(&e);
    until("a status", || count(&metrics, "github", "delivered") == 1).await;
    let received = lock(&server.received);
    let body: serde_json::Value = serde_json::from_slice(&received[0].1).unwrap();
    assert_eq!(body["state"], "success");
    assert_eq!(received[0].0["authorization"], "Bearer key");
}

#[tokio::test]
async fn all_queues_together_are_bounded() {
    let (server, url) = serve().await;
    server.hang.store(true, Ordering::SeqCst);
    let metrics = Arc::new(Metrics::default());
    let n = Notifier::new(None, None, reporter(), metrics.clone());
    // Five Providers that never answer, each with an Alert on every Kustomization: one
    // tenant's many Providers cannot hold more than the shared bound.
    for i in 0..5 {
        let target = generic(format!("{url}/in{i}"), Duration::from_secs(30));
        let key = ("apps".to_string(), format!("p{i}"));
        n.set_provider(key.clone(), target, false);
        let rules = Rules::new("apps", &every_kustomization()).unwrap();
        n.set_alert(("apps".into(), format!("a{i}")), rules, key.1, false);
    }
    let per = QUEUE;
    for i in 0..per {
        n.publish(&event("web", Severity::Error, &format!("failure {i}")));
    }
    let dropped = count(&metrics, "generic", "dropped") as usize;
    assert_eq!(dropped, 5 * per - QUEUED_AT_MOST, "the shared bound holds");
}

#[tokio::test]
async fn a_pending_status_its_outcome_caught_up_with_is_not_sent() {
    let (server, n, metrics) = started("github", Duration::from_secs(5)).await;
    let at_commit = |name: &str, phase: Phase| {
        let mut e = event(name, Severity::Info, "a message");
        e.phase = phase;
        e.metadata.insert(
            REVISION_KEY.into(),
            "main@sha1:0df2d77f9e3c8a1b2c3d4e5f60718293a4b5c6d7".into(),
        );
        e
    };
    // Both are queued before the Provider's task runs: only the outcome is sent.
    n.publish(&at_commit("web", Phase::Started));
    n.publish(&at_commit("web", Phase::Succeeded));
    n.publish(&at_commit("db", Phase::Started));
    until("two statuses", || {
        count(&metrics, "github", "delivered") == 2
    })
    .await;
    assert_eq!(count(&metrics, "github", "superseded"), 1);
    let states: Vec<String> = lock(&server.received)
        .iter()
        .map(|(_, body)| {
            let v: serde_json::Value = serde_json::from_slice(body).unwrap();
            format!(
                "{} {}",
                v["context"].as_str().unwrap(),
                v["state"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            "kustomization/web/uid success",
            "kustomization/db/uid pending"
        ]
    );
}

#[tokio::test]
async fn an_endless_answer_is_read_only_as_far_as_its_message_needs() {
    let (server, url) = serve().await;
    server.endless.store(true, Ordering::SeqCst);
    let target = generic(format!("{url}/in"), Duration::from_secs(2));
    let request = target
        .endpoint
        .request(&event("web", Severity::Error, "failed"))
        .expect("a message");
    let failure = send(&target, &request).await.expect_err("a 400");
    let shown = "x".repeat(MAX_ANSWER);
    assert_eq!(
        failure,
        format!("400 Bad Request: {shown}"),
        "the first {MAX_ANSWER} bytes, read before the timeout"
    );
}
