//! The generic reconcile against a mocked API server: a real `kube::Client` over
//! `tower_test`'s mock, every request it makes seen and answered here. What the deploy path
//! decides before it reaches a cluster is proven without one.

use std::sync::Arc;

use axum::http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

use super::reconcile;
use crate::api::{Kustomization, KustomizationSpec};
use crate::clusters::Registry;
use crate::metrics::Metrics;
use crate::runtime::Settings;
use crate::runtime::context::Context;

/// One request the reconcile made: method, path and JSON body.
type Seen = (Method, String, Value);

/// A context whose client is answered by `answer`, and the requests it saw.
async fn mocked(
    answer: impl Fn(&Method, &str) -> Value + Send + 'static,
) -> (
    Arc<Context>,
    tokio::task::JoinHandle<Vec<Seen>>,
    tempfile::TempDir,
) {
    let (service, mut api) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some((request, reply)) = api.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let path = parts.uri.path().to_string();
            let answer = answer(&parts.method, &path);
            seen.push((parts.method, path, body));
            let response = Response::builder()
                .header("content-type", "application/json")
                .body(Body::from(answer.to_string().into_bytes()));
            reply.send_response(response.expect("a response"));
        }
        seen
    });
    let client = Client::new(service, "default");
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URL"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let ctx = Context::new(
        config,
        client,
        Registry::new(None),
        dir.path(),
        Settings::for_tests(),
        Arc::new(Metrics::default()),
        crate::shards::Shards::unsharded(),
    )
    .await
    .expect("a context");
    (ctx, server, dir)
}

/// What the API server says to everything: its version, or the object sent back.
fn plain(method: &Method, path: &str) -> Value {
    match (method, path) {
        (&Method::GET, "/version") => json!({
            "major": "1", "minor": "20", "gitVersion": "v1.20.2", "gitCommit": "",
            "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "", "platform": ""
        }),
        _ => json!({"apiVersion": "skewer.dev/v1alpha1", "kind": "Kustomization",
            "metadata": {"name": "apps", "namespace": "team"},
            "spec": {"sourceRef": {"kind": "GitRepository", "name": "src"}, "interval": "1m"}}),
    }
}

fn kustomization(spec: Value) -> Arc<Kustomization> {
    let spec: KustomizationSpec = serde_json::from_value(spec).expect("a spec");
    let mut ks = Kustomization::new("apps", spec);
    ks.metadata.namespace = Some("team".into());
    ks.metadata.generation = Some(2);
    ks.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
    Arc::new(ks)
}

#[tokio::test]
async fn an_unreadable_spec_stalls_naming_its_field_and_reads_nothing() {
    let (ctx, server, _dir) = mocked(plain).await;
    let ks = kustomization(json!({
        "sourceRef": {"kind": "GitRepository", "name": "src"},
        "interval": "0s",
        "path": "./apps",
    }));
    let action = reconcile(ks, ctx.clone()).await.expect("a status written");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    drop(ctx);
    let seen = server.await.expect("the mock server");
    let paths: Vec<(String, &str)> = seen
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.as_str()))
        .collect();
    // The version (the hub's applier), the status, the Event: no source, no cluster object.
    assert_eq!(
        paths,
        [
            ("GET".to_string(), "/version"),
            (
                "PATCH".to_string(),
                "/apis/skewer.dev/v1alpha1/namespaces/team/kustomizations/apps/status"
            ),
            (
                "POST".to_string(),
                "/apis/events.k8s.io/v1/namespaces/team/events"
            ),
        ]
    );
    let status = &seen[1].2["status"];
    let stalled = status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Stalled"))
        .expect("a Stalled condition");
    assert_eq!(stalled["reason"], "InvalidSpec");
    assert!(
        stalled["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("spec.interval: '0s'")),
        "{stalled}"
    );
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(seen[2].2["reason"], "InvalidSpec");
}

#[tokio::test]
async fn a_suspended_object_is_left_alone_without_a_request() {
    let (ctx, server, _dir) = mocked(plain).await;
    let ks = kustomization(json!({
        "sourceRef": {"kind": "GitRepository", "name": "src"},
        "interval": "1m",
        "suspend": true,
    }));
    reconcile(ks, ctx.clone()).await.expect("nothing to write");
    drop(ctx);
    let seen = server.await.expect("the mock server");
    assert_eq!(seen.len(), 1, "only the version, for the context: {seen:?}");
}
