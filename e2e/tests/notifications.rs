//! Issue 28 acceptance: commit statuses on a Git host and signed alerts, from the daemon to a
//! real HTTPS server on loopback that answers as GitHub's and GitLab's REST APIs do.

mod common;

use anyhow::Result;
use common::*;
use skewer_e2e::hostapi::{HostApi, Received};
use skewer_e2e::{eventually, kc, kc_apply};

/// The states posted for `commit` at `path_prefix` (a host's status endpoint), oldest first,
/// each with the context (GitHub) or name (GitLab) it carried.
fn states(received: &[Received], path_prefix: &str, commit: &str) -> Vec<(String, String)> {
    received
        .iter()
        .filter(|r| r.path.starts_with(path_prefix) && r.path.ends_with(commit))
        .map(|r| {
            let context = r.body["context"]
                .as_str()
                .or(r.body["name"].as_str())
                .unwrap_or_default();
            let state = r.body["state"].as_str().unwrap_or_default();
            (state.to_string(), context.to_string())
        })
        .collect()
}

fn provider(ns: &str, name: &str, kind: &str, address: &str, secret: &str) -> String {
    format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Provider\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  type: {kind}\n  address: {address}\n  secretRef: {{name: {secret}}}\n  certSecretRef: {{name: ca}}\n"
    )
}

fn alert(ns: &str, name: &str, provider: &str, extra: &str) -> String {
    format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Alert\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  providerRef: {{name: {provider}}}\n  eventSources:\n  - {{kind: Kustomization, name: app}}\n{extra}"
    )
}

/// The host API, and the Secrets of `ns` its Providers use: `token` (the API's token) and `ca`
/// (the CA of its certificate).
async fn host(c: &kube::Client, ns: &str) -> Result<HostApi> {
    let api = HostApi::start("api-token", "hook-key")?;
    put_secret(c, ns, "token", &[("token", "api-token")]).await?;
    put_secret(c, ns, "ca", &[("ca.crt", &api.ca_pem)]).await?;
    Ok(api)
}

/// What `jsonpath` (kubectl's) reads of Provider `name` in `ns`.
fn provider_field(ns: &str, name: &str, jsonpath: &str) -> Result<String> {
    kc(&[
        "get",
        "provider",
        name,
        "-n",
        ns,
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
}

/// Starts skewer, then (once the source has its artifact, so that the Kustomization's first
/// outcome is the sync's) Kustomization `app` of the repository, applied at `commit`.
async fn synced(f: &Fixture, commit: &str) -> Result<skewer_e2e::Skewer> {
    let skewer = f.start(&[])?;
    eventually("the source's artifact", WAIT, || async {
        git_revision(&f.c, &f.ns, "src").await
    })
    .await?;
    kustomization(&f.ns, "app", "src", "./", "  prune: true\n")?;
    wait_applied(&f.c, &f.ns, "app", commit).await?;
    Ok(skewer)
}

#[tokio::test(flavor = "multi_thread")]
async fn commit_statuses_follow_each_revision_and_alerts_are_signed() -> Result<()> {
    let f = Fixture::new("notify").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let api = host(c, &ns).await?;
    put_secret(c, &ns, "hmac", &[("token", "hook-key")]).await?;
    let url = &api.url;
    // Not github.com: GitHub Enterprise's API, under /api/v3.
    kc_apply(&provider(
        &ns,
        "github",
        "github",
        &format!("{url}/org/repo.git"),
        "token",
    ))?;
    kc_apply(&provider(
        &ns,
        "gitlab",
        "gitlab",
        &format!("{url}/group/project"),
        "token",
    ))?;
    kc_apply(&provider(
        &ns,
        "hook",
        "generic-hmac",
        &format!("{url}/hook/in"),
        "hmac",
    ))?;
    kc_apply(&alert(&ns, "github", "github", ""))?;
    kc_apply(&alert(&ns, "gitlab", "gitlab", ""))?;
    kc_apply(&alert(&ns, "hook", "hook", "  eventSeverity: error\n"))?;

    let cm = |name: &str, data: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n{data}"
        )
    };
    repo.write("cm.yaml", &cm("settings", "  mode: \"on\"\n"))?;
    let good = repo.commit("good")?;
    let skewer = synced(&f, &good).await?;

    // Flux's context: the kind, the name, and the first part of the Provider's uid.
    let context = |provider: &str| -> Result<String> {
        let uid = provider_field(&ns, provider, "{.metadata.uid}")?;
        let prefix = uid.split('-').next().unwrap_or_default();
        Ok(format!("kustomization/app/{prefix}"))
    };
    let (gh_context, gl_context) = (context("github")?, context("gitlab")?);
    let github = "/api/v3/repos/org/repo/statuses/";
    let gitlab = "/api/v4/projects/group%2Fproject/statuses/";
    let both = |commit: &str, last: &str| {
        let received = api.received();
        let gh = states(&received, github, commit);
        let gl = states(&received, gitlab, commit);
        let done = gh.last().is_some_and(|(s, _)| s == last)
            && gl.last().is_some_and(|(s, _)| s != "pending");
        done.then_some((gh, gl))
    };
    let (gh, gl) = eventually("success statuses for the good commit", WAIT, || async {
        Ok(both(&good, "success"))
    })
    .await
    .map_err(|e| {
        let objects = kc(&["get", "providers,alerts", "-n", &ns, "-o", "yaml"]).unwrap_or_default();
        anyhow::anyhow!("{e}\n{objects}\nreceived: {:?}", api.received())
    })?;
    // `pending` first, then the outcome, all in the Provider's context. (A `pending` that its
    // outcome caught up with in the queue is not sent, so it may be missing on a slow host.)
    let ends = |states: &[(String, String)], context: &str, outcome: &str| {
        let names: Vec<&str> = states.iter().map(|(s, _)| s.as_str()).collect();
        assert!(
            names == ["pending", outcome] || names == [outcome],
            "{states:?}"
        );
        assert!(states.iter().all(|(_, c)| c == context), "{states:?}");
    };
    ends(&gh, &gh_context, "success");
    ends(&gl, &gl_context, "success");
    assert!(
        gh.len() + gl.len() > 2,
        "a sync's start reached a host as pending: {gh:?} {gl:?}"
    );
    assert!(
        api.received().iter().all(|r| r.authorized),
        "every request carried the right credentials: {:?}",
        api.received()
    );

    // A commit whose ConfigMap the API server refuses: `failure`, with the reason.
    repo.write("bad.yaml", &cm("bad", "  count: 1\n"))?;
    let bad = repo.commit("bad")?;
    wait_failed(c, &ns, "app", |_, msg| msg.contains("bad")).await?;
    let (gh, gl) = eventually("failure statuses for the bad commit", WAIT, || async {
        Ok(both(&bad, "failure"))
    })
    .await?;
    ends(&gh, &gh_context, "failure");
    ends(&gl, &gl_context, "failed");
    let received = api.received();
    let failure = received
        .iter()
        .rev()
        .find(|r| r.path.starts_with(github) && r.path.ends_with(&bad))
        .expect("a GitHub status for the bad commit");
    let description = failure.body["description"].as_str().unwrap_or_default();
    assert!(
        description.contains("ConfigMap") && description.contains("bad"),
        "the description names what failed: {description}"
    );
    assert!(description.chars().count() <= 140);

    // The webhook: one signed message for the failure, however often it is retried, and none
    // for the successes (eventSeverity: error).
    eventually("the failure retried twice", WAIT, || async {
        let failed = skewer.logs().matches("reconcile failed").count();
        Ok((failed >= 3).then_some(()))
    })
    .await?;
    let all_hooks: Vec<Received> = api
        .received()
        .into_iter()
        .filter(|r| r.path.starts_with("/hook/"))
        .collect();
    assert!(
        all_hooks.iter().all(|r| r.body["severity"] == "error"),
        "no successes: {all_hooks:?}"
    );
    let revision = format!("main@sha1:{bad}");
    let hooks: Vec<&Received> = all_hooks
        .iter()
        .filter(|r| r.body["metadata"]["skewer.dev/revision"] == revision.as_str())
        .collect();
    assert_eq!(hooks.len(), 1, "one message per failure: {all_hooks:?}");
    assert!(hooks[0].authorized, "the HMAC signature checks out");
    assert_eq!(hooks[0].body["severity"], "error");
    assert_eq!(hooks[0].body["involvedObject"]["name"], "app");

    // The Provider says how its last delivery went.
    let last = provider_field(&ns, "github", "{.status.lastDelivery.result}")?;
    assert_eq!(last, "Delivered");
    Ok(())
}

/// A Provider that answers 500 and one that never answers: syncs go on as before, the failing
/// one is tried a bounded number of times and says so (its `lastDelivery`, a Warning Event),
/// and the others still deliver.
#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_is_down_never_holds_a_sync_back() -> Result<()> {
    let f = Fixture::new("notifydown").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let api = host(c, &ns).await?;
    let url = &api.url;
    kc_apply(&provider(
        &ns,
        "down",
        "generic",
        &format!("{url}/fail/in"),
        "token",
    ))?;
    // The longest timeout a Provider may have: its first request is outstanding for the whole
    // test.
    kc_apply(&format!(
        "{}  timeout: 5m\n",
        provider(&ns, "stuck", "generic", &format!("{url}/hang/in"), "token")
    ))?;
    kc_apply(&provider(
        &ns,
        "github",
        "github",
        &format!("{url}/org/repo"),
        "token",
    ))?;
    for name in ["down", "stuck", "github"] {
        kc_apply(&alert(&ns, name, name, ""))?;
    }
    let cm = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  mode: \"{value}\"\n"
        )
    };
    repo.write("cm.yaml", &cm("one"))?;
    let first = repo.commit("one")?;
    let _skewer = synced(&f, &first).await?;

    let last_delivery = |provider: &str| {
        provider_field(
            &ns,
            provider,
            "{.status.lastDelivery.result} {.status.lastDelivery.message}",
        )
    };
    let failed = eventually("the failing Provider to give up", WAIT, || async {
        let last = last_delivery("down")?;
        Ok(last.starts_with("Failed").then_some(last))
    })
    .await?;
    assert!(failed.contains("500"), "{failed}");
    assert!(failed.contains("after 3 tries"), "{failed}");
    let to_down = |api: &HostApi| {
        api.received()
            .iter()
            .filter(|r| r.path.starts_with("/fail/"))
            .count()
    };
    assert_eq!(to_down(&api), 3, "one event, tried three times");
    eventually(
        "a DeliveryFailed Warning Event on the Provider",
        WAIT,
        || async {
            let reasons = event_reasons(
                &ns,
                "involvedObject.kind=Provider,involvedObject.name=down,type=Warning",
            )?;
            Ok(reasons.contains("DeliveryFailed").then_some(()))
        },
    )
    .await?;

    // A second commit syncs as the first did, while the stuck Provider's first request is still
    // unanswered, and the healthy Provider hears of both.
    repo.write("cm.yaml", &cm("two"))?;
    let second = repo.commit("two")?;
    wait_applied(c, &ns, "app", &second).await?;
    eventually("GitHub's success for the second commit", WAIT, || async {
        let done = api
            .received()
            .iter()
            .any(|r| r.path.ends_with(&second) && r.body["state"] == "success" && r.authorized);
        Ok(done.then_some(()))
    })
    .await?;
    assert_eq!(
        last_delivery("stuck")?.trim(),
        "",
        "the stuck Provider's first delivery is still in flight"
    );
    let to_stuck = api
        .received()
        .iter()
        .filter(|r| r.path.starts_with("/hang/"))
        .count();
    assert_eq!(to_stuck, 1, "one request in flight, the rest queued");
    Ok(())
}
