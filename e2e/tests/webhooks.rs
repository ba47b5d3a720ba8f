//! Issue 12 acceptance: Receivers, with real HTTP requests against skewer's webhook server and
//! a real git server and API server behind it.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use common::*;
use hmac::Hmac;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use sha2::Sha256;
use skewer_api::Receiver;
use skewer_api::receiver::ReceiverStatus;
use skewer_e2e::git::{GitServer, free_port};
use skewer_e2e::{eventually, kc, kc_apply};

/// A push in GitHub's documented payload shape (the fields a receiver reads).
fn github_push(url: &str, commit: &str) -> String {
    serde_json::json!({
        "ref": "refs/heads/main",
        "before": "0000000000000000000000000000000000000000",
        "after": commit,
        "repository": {"full_name": "example/platform", "clone_url": url, "html_url": url},
        "pusher": {"name": "dev"},
        "commits": [{"id": commit, "message": "change"}]
    })
    .to_string()
}

fn sign(token: &str, body: &[u8]) -> String {
    skewer_e2e::hooks::github_signature(token, body)
}

/// POSTs `body` with `headers` to `url`; returns the status code.
fn post(url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<u16> {
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), body)?;
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"]);
    for (k, v) in headers {
        cmd.args(["-H", &format!("{k}: {v}")]);
    }
    cmd.arg("--data-binary")
        .arg(format!("@{}", file.path().display()))
        .arg(url);
    let out = cmd.output()?;
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}

async fn receiver_status(c: &kube::Client, ns: &str, name: &str) -> Result<ReceiverStatus> {
    let api: Api<Receiver> = Api::namespaced(c.clone(), ns);
    Ok(api.get(name).await?.status.unwrap_or_default())
}

async fn wait_path(c: &kube::Client, ns: &str, name: &str) -> Result<String> {
    eventually(&format!("Receiver {ns}/{name} ready"), WAIT, || async {
        Ok(receiver_status(c, ns, name).await?.webhook_path)
    })
    .await
}

async fn cm_value(c: &kube::Client, ns: &str) -> Result<Option<String>> {
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), ns);
    Ok(api
        .get_opt("cfg")
        .await?
        .and_then(|m| m.data)
        .and_then(|d| d.get("value").cloned()))
}

fn cm(ns: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {ns}}}\ndata: {{value: '{value}'}}\n"
    )
}

/// A repository with one ConfigMap, skewer serving webhooks, a GitRepository `src` and a
/// Kustomization `app` of it (every interval an hour: polling explains nothing), applied.
struct Hooked {
    /// Kept running for the test's life.
    _git: GitServer,
    repo: skewer_e2e::Repo,
    ns: String,
    c: kube::Client,
    addr: String,
    first: String,
    skewer: skewer_e2e::Skewer,
}

async fn hooked(prefix: &str, extra: &[&str]) -> Result<Hooked> {
    let git = GitServer::start()?;
    let repo = git.repo(prefix)?;
    let ns = skewer_e2e::namespace(prefix)?;
    repo.write("apps/cm.yaml", &cm(&ns, "one"))?;
    let first = repo.commit("one")?;
    let c = client().await;
    let addr = format!("127.0.0.1:{}", free_port()?);
    let mut flags = vec!["--webhook-addr", addr.as_str()];
    flags.extend(extra);
    let skewer = skewer_e2e::Skewer::start_with(&ns, &flags)?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1h\n  ref: {{branch: main}}\n",
        repo.url
    ))?;
    kustomization(&ns, "app", "src", "./apps", "  interval: 1h\n")?;
    wait_applied(&c, &ns, "app", &first).await?;
    Ok(Hooked {
        _git: git,
        repo,
        ns,
        c,
        addr,
        first,
        skewer,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_push_is_applied_within_a_second_and_forgeries_are_refused() -> Result<()> {
    let h = hooked("hooks", &[]).await?;
    let repo = &h.repo;
    let (ns, c, addr, first) = (h.ns.clone(), h.c.clone(), h.addr.clone(), h.first.clone());
    // Another source of the same repository, named by no Receiver: a push reaches it too.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: same-repo, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1h\n  ref: {{branch: main}}\n",
        repo.url
    ))?;
    wait_applied(&c, &ns, "app", &first).await?;
    let token = "a-webhook-secret-of-some-length";
    put_secret(&c, &ns, "hook-token", &[("token", token)]).await?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Receiver\nmetadata: {{name: github, namespace: {ns}}}\nspec:\n  type: github\n  events: [push]\n  secretRef: {{name: hook-token}}\n  resources: [{{kind: GitRepository, name: src}}]\n"
    ))?;
    let path = wait_path(&c, &ns, "github").await?;
    let url = format!("http://{addr}{path}");

    repo.write("apps/cm.yaml", &cm(&ns, "two"))?;
    let second = repo.commit("two")?;
    let body = github_push(&repo.url, &second);
    let signature = sign(token, body.as_bytes());

    // Forgeries first: each refused with its code, nothing reconciled.
    let other_body = github_push(&repo.url, &first);
    for (what, headers, payload, code) in [
        (
            "no signature",
            vec![("X-GitHub-Event", "push")],
            body.as_bytes(),
            401,
        ),
        (
            "a wrong signature",
            vec![
                ("X-GitHub-Event", "push"),
                ("X-Hub-Signature-256", "sha256=00"),
            ],
            body.as_bytes(),
            401,
        ),
        (
            "a signature over another body",
            vec![
                ("X-GitHub-Event", "push"),
                ("X-Hub-Signature-256", signature.as_str()),
            ],
            other_body.as_bytes(),
            401,
        ),
        (
            "a malformed signature",
            vec![
                ("X-GitHub-Event", "push"),
                ("X-Hub-Signature-256", "sha256=xyz"),
            ],
            body.as_bytes(),
            400,
        ),
    ] {
        assert_eq!(post(&url, &headers, payload)?, code, "{what}");
    }
    let unknown = format!("http://{addr}/hook/{}", "0".repeat(64));
    assert_eq!(post(&unknown, &[], body.as_bytes())?, 404, "unknown path");
    let huge = vec![b'x'; (3 << 20) + 1];
    let huge_sig = sign(token, &huge);
    assert_eq!(
        post(&url, &[("X-Hub-Signature-256", &huge_sig)], &huge)?,
        413,
        "oversized body"
    );
    let ignored = sign(token, b"{}");
    assert_eq!(
        post(
            &url,
            &[
                ("X-GitHub-Event", "release"),
                ("X-Hub-Signature-256", &ignored)
            ],
            b"{}"
        )?,
        200,
        "an event the Receiver leaves out is answered, not acted on"
    );
    let src = source_status::<skewer_api::GitRepository>(&c, &ns, "src").await?;
    assert_eq!(src.last_handled_reconcile_at, None, "nothing reconciled");
    assert_eq!(cm_value(&c, &ns).await?.as_deref(), Some("one"));
    let events = event_reasons(&ns, "involvedObject.kind=Receiver")?;
    assert!(events.contains("AuthenticationFailed"), "{events}");

    // The real push: applied within a second.
    let sent = Instant::now();
    assert_eq!(
        post(
            &url,
            &[
                ("X-GitHub-Event", "push"),
                ("X-Hub-Signature-256", &signature)
            ],
            body.as_bytes()
        )?,
        200
    );
    eventually("the pushed change applied", WAIT, || async {
        Ok((cm_value(&c, &ns).await?.as_deref() == Some("two")).then_some(()))
    })
    .await?;
    let took = sent.elapsed();
    eprintln!("push to applied: {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let handled = |name: &'static str| {
        let c = c.clone();
        let ns = ns.clone();
        async move {
            let st = source_status::<skewer_api::GitRepository>(&c, &ns, name).await?;
            anyhow::Ok(st.last_handled_reconcile_at)
        }
    };
    let asked = eventually(
        "the unlisted source of the same repository asked",
        WAIT,
        || async { handled("same-repo").await },
    )
    .await?;

    // A push to another branch: answered, and nothing tracking main is asked again.
    let feature = body.replace("refs/heads/main", "refs/heads/feature");
    let sig = sign(token, feature.as_bytes());
    assert_eq!(
        post(
            &url,
            &[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &sig)],
            feature.as_bytes()
        )?,
        200
    );
    let malformed = sign(token, b"{not json");
    assert_eq!(
        post(
            &url,
            &[
                ("X-GitHub-Event", "push"),
                ("X-Hub-Signature-256", &malformed)
            ],
            b"{not json"
        )?,
        400,
        "a signed but malformed body"
    );
    // What a person sees.
    let ks = skewer_cli(&["get", "kustomizations", "-n", &ns])?;
    let line = ks.lines().nth(1).unwrap_or_default();
    assert!(
        line.starts_with("app") && line.contains("True") && line.contains(&second),
        "{ks}"
    );
    let sources = skewer_cli(&["get", "sources", "-n", &ns])?;
    assert!(
        sources.starts_with("KIND") && sources.contains("GitRepository  same-repo"),
        "{sources}"
    );
    let receivers = skewer_cli(&["get", "receivers", "-n", &ns])?;
    assert!(receivers.contains("/hook/"), "{receivers}");

    let api: Api<skewer_api::GitRepository> = Api::namespaced(c.clone(), &ns);
    let annotation = |g: skewer_api::GitRepository| {
        g.metadata
            .annotations
            .unwrap_or_default()
            .get("skewer.dev/reconcile-requested-at")
            .cloned()
    };
    assert_eq!(
        annotation(api.get("same-repo").await?),
        Some(asked),
        "not asked again"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn gitlab_tokens_generic_paths_and_suspension() -> Result<()> {
    let ns = skewer_e2e::namespace("hooks-gl")?;
    let c = client().await;
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let _skewer = skewer_e2e::Skewer::start_with(&ns, &["--webhook-addr", &addr])?;
    let token = "gitlab-token-0123456789";
    put_secret(&c, &ns, "gl", &[("token", token)]).await?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}, labels: {{team: a}}}}\nspec:\n  url: https://git.example.com/x.git\n  interval: 1h\n  suspend: true\n"
    ))?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Receiver\nmetadata: {{name: gitlab, namespace: {ns}}}\nspec:\n  type: gitlab\n  secretRef: {{name: gl}}\n  resources: [{{kind: GitRepository, name: '*', matchLabels: {{team: a}}}}]\n"
    ))?;
    let url = format!("http://{addr}{}", wait_path(&c, &ns, "gitlab").await?);
    let wrong = "gitlab-token-0123456788";
    let push = [("X-Gitlab-Event", "Push Hook")];
    assert_eq!(
        post(&url, &[push[0], ("X-Gitlab-Token", wrong)], b"{}")?,
        401
    );
    assert_eq!(
        post(&url, &[push[0], ("X-Gitlab-Token", token)], b"{}")?,
        200
    );
    let api: Api<skewer_api::GitRepository> = Api::namespaced(c.clone(), &ns);
    let annotated = api
        .get("src")
        .await?
        .metadata
        .annotations
        .unwrap_or_default()
        .contains_key("skewer.dev/reconcile-requested-at");
    assert!(annotated, "matched by labels and asked to reconcile");

    kc(&[
        "patch",
        "receiver",
        "gitlab",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ])?;
    eventually("the suspended Receiver to answer 503", WAIT, || async {
        match post(&url, &[push[0], ("X-Gitlab-Token", token)], b"{}")? {
            503 => Ok(Some(())),
            other => bail!("{other}"),
        }
    })
    .await?;
    Ok(())
}

/// GitLab's secret in the `argocd-secret` of [`argo_cd_endpoint`].
const GITLAB_SECRET: &str = "gitlab-shared-secret";

/// skewer on `ns` serving Argo CD's `/api/webhook` (its address returned) with GitLab's secret
/// in `ns/argocd-secret`.
async fn argo_cd_endpoint(c: &kube::Client, ns: &str) -> Result<(skewer_e2e::Skewer, String)> {
    put_secret(
        c,
        ns,
        "argocd-secret",
        &[("webhook.gitlab.secret", GITLAB_SECRET)],
    )
    .await?;
    let addr = format!("127.0.0.1:{}", free_port()?);
    let secret = format!("{ns}/argocd-secret");
    let skewer = skewer_e2e::Skewer::start_with(
        ns,
        &["--webhook-addr", &addr, "--argocd-webhook-secret", &secret],
    )?;
    Ok((skewer, addr))
}

#[tokio::test(flavor = "multi_thread")]
async fn argo_cds_endpoint_refreshes_the_applications_of_the_pushed_repository() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("argo")?;
    let ns = skewer_e2e::namespace("hooks-argo")?;
    repo.write("apps/cm.yaml", &cm(&ns, "one"))?;
    repo.commit("one")?;
    let c = client().await;
    let (_skewer, addr) = argo_cd_endpoint(&c, &ns).await?;
    let token = GITLAB_SECRET;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps, targetRevision: main}}\n  syncPolicy: {{automated: {{}}}}\n  interval: 1h\n",
        repo.url
    ))?;
    eventually("the Application synced", WAIT, || async {
        Ok((cm_value(&c, &ns).await?.as_deref() == Some("one")).then_some(()))
    })
    .await?;
    repo.write("apps/cm.yaml", &cm(&ns, "two"))?;
    let second = repo.commit("two")?;
    let url = format!("http://{addr}/api/webhook");
    // GitLab's push hook, as GitLab documents it (the fields read).
    let body = serde_json::json!({
        "object_kind": "push", "ref": "refs/heads/main", "after": second,
        "project": {"git_http_url": repo.url, "path_with_namespace": "team/argo"}
    })
    .to_string();
    let gitlab = [("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", token)];
    // GitHub has no secret in argocd-secret: refused rather than taken unverified.
    assert_eq!(
        post(&url, &[("X-GitHub-Event", "push")], body.as_bytes())?,
        401
    );
    assert_eq!(
        post(
            &url,
            &[("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", "nope")],
            body.as_bytes()
        )?,
        401
    );
    let sent = Instant::now();
    assert_eq!(post(&url, &gitlab, body.as_bytes())?, 200);
    eventually("the pushed change applied", WAIT, || async {
        Ok((cm_value(&c, &ns).await?.as_deref() == Some("two")).then_some(()))
    })
    .await?;
    assert!(
        sent.elapsed() < Duration::from_secs(3),
        "{:?}",
        sent.elapsed()
    );
    Ok(())
}

use skewer_e2e::hooks::raw_post;

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_forgeries_does_not_stop_a_valid_push() -> Result<()> {
    let h = hooked("hooks-flood", &[]).await?;
    let repo = &h.repo;
    let (ns, c, addr) = (h.ns.clone(), h.c.clone(), h.addr.clone());
    let token = "flood-secret-0123456789";
    put_secret(&c, &ns, "t", &[("token", token)]).await?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Receiver\nmetadata: {{name: gh, namespace: {ns}}}\nspec:\n  type: github\n  secretRef: {{name: t}}\n  resources: [{{kind: GitRepository, name: src}}]\n"
    ))?;
    let path = wait_path(&c, &ns, "gh").await?;
    repo.write("apps/cm.yaml", &cm(&ns, "two"))?;
    let second = repo.commit("two")?;
    let body = github_push(&repo.url, &second);
    let good = sign(token, body.as_bytes());

    // A thousand forgeries at once, each with a 64 KiB body, then the real push among them.
    let junk = vec![b'{'; 64 << 10];
    let forged = (0..1000).map(|_| {
        let (addr, path, junk) = (addr.clone(), path.clone(), junk.clone());
        tokio::spawn(async move {
            let h = [
                ("X-GitHub-Event", "push"),
                ("X-Hub-Signature-256", "sha256=00"),
            ];
            raw_post(&addr, &path, &h, &junk).await
        })
    });
    let forged: Vec<_> = forged.collect();
    let sent = Instant::now();
    let h = [
        ("X-GitHub-Event", "push"),
        ("X-Hub-Signature-256", good.as_str()),
    ];
    let status = raw_post(&addr, &path, &h, body.as_bytes()).await;
    let served = sent.elapsed();
    assert_eq!(status, 200, "the valid push was served");
    eventually("the pushed change applied", WAIT, || async {
        Ok((cm_value(&c, &ns).await?.as_deref() == Some("two")).then_some(()))
    })
    .await?;
    let applied = sent.elapsed();
    let mut codes = std::collections::BTreeMap::new();
    for f in forged {
        *codes.entry(f.await?).or_insert(0) += 1;
    }
    eprintln!("valid push served in {served:?}, applied in {applied:?}; forgeries: {codes:?}");
    assert!(applied < Duration::from_secs(10), "{applied:?}");
    // Refused, or turned away as busy; never dropped (0: the connection failed or was reset,
    // as when the kernel's accept queue overflowed).
    assert!(
        codes.keys().all(|c| [401, 503].contains(c)),
        "forgeries were refused: {codes:?}"
    );
    // The flood made at most a couple of Events, not a thousand.
    let events = event_reasons(&ns, "involvedObject.kind=Receiver")?;
    assert!(events.split_whitespace().count() <= 3, "{events}");
    Ok(())
}

use skewer_e2e::hooks::hmac_hex;

#[tokio::test(flavor = "multi_thread")]
async fn each_hosts_documented_push_is_accepted_as_that_host_signs_it() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("hosts")?;
    let ns = skewer_e2e::namespace("hooks-hosts")?;
    repo.write("apps/cm.yaml", &cm(&ns, "one"))?;
    repo.commit("one")?;
    let c = client().await;
    let addr = format!("127.0.0.1:{}", free_port()?);
    let _skewer = skewer_e2e::Skewer::start_with(&ns, &["--webhook-addr", &addr])?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1h\n  ref: {{branch: main}}\n",
        repo.url
    ))?;
    let token = "per-host-secret-0123456789";
    put_secret(&c, &ns, "t", &[("token", token)]).await?;
    let fixtures = skewer_e2e::root().join("e2e/fixtures/webhooks");
    let api: Api<skewer_api::GitRepository> = Api::namespaced(c.clone(), &ns);
    for host in [
        "github",
        "gitlab",
        "gitea",
        "gogs",
        "bitbucket",
        "harbor",
        "dockerhub",
        "quay",
        "nexus",
    ] {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Receiver\nmetadata: {{name: {host}, namespace: {ns}}}\nspec:\n  type: {host}\n  secretRef: {{name: t}}\n  resources: [{{kind: GitRepository, name: src}}]\n"
        ))?;
        let path = wait_path(&c, &ns, host).await?;
        let body = std::fs::read_to_string(fixtures.join(format!("{host}.json")))?
            .replace("{{URL}}", &repo.url);
        let body = body.as_bytes();
        let signed_with = |secret: &str| -> Vec<(&'static str, String)> {
            let s256 = hmac_hex::<Hmac<Sha256>>(secret, body);
            match host {
                "github" => vec![
                    ("X-GitHub-Event", "push".into()),
                    ("X-Hub-Signature-256", format!("sha256={s256}")),
                ],
                "gitlab" => vec![
                    ("X-Gitlab-Event", "Push Hook".into()),
                    ("X-Gitlab-Token", secret.into()),
                ],
                "gitea" => vec![
                    ("X-Gitea-Event", "push".into()),
                    ("X-Gitea-Signature", s256),
                ],
                "gogs" => vec![("X-Gogs-Event", "push".into()), ("X-Gogs-Signature", s256)],
                "bitbucket" => vec![
                    ("X-Event-Key", "repo:refs_changed".into()),
                    ("X-Hub-Signature", format!("sha256={s256}")),
                ],
                "harbor" => vec![("Authorization", secret.into())],
                "nexus" => vec![(
                    "X-Nexus-Webhook-Signature",
                    hmac_hex::<Hmac<sha1::Sha1>>(secret, body),
                )],
                _ => Vec::new(),
            }
        };
        let good = signed_with(token);
        let good: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let url = format!("http://{addr}{path}");
        let before = api
            .get("src")
            .await?
            .metadata
            .annotations
            .unwrap_or_default();
        let sent = Instant::now();
        assert_eq!(post(&url, &good, body)?, 200, "{host}");
        let after = api
            .get("src")
            .await?
            .metadata
            .annotations
            .unwrap_or_default();
        let key = "skewer.dev/reconcile-requested-at";
        assert_ne!(
            before.get(key),
            after.get(key),
            "{host}: the source was asked to reconcile"
        );
        eprintln!("{host}: answered in {:?}", sent.elapsed());
        // Signed (or carrying a token) of another secret: refused.
        if !matches!(host, "dockerhub" | "quay") {
            let forged = signed_with("another-secret-0123456789");
            let forged: Vec<(&str, &str)> = forged.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert_eq!(post(&url, &forged, body)?, 401, "{host} forged");
        }
    }
    Ok(())
}

use skewer_e2e::hooks::slow_clients;

/// Open file descriptors of process `pid`.
fn open_fds(pid: u32) -> Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_clients_on_one_receiver_starve_no_one() -> Result<()> {
    let h = hooked("hooks-slow", &[]).await?;
    let (ns, c, addr, repo) = (h.ns.clone(), h.c.clone(), h.addr.clone(), &h.repo);
    let pid = h.skewer.pid();
    let token = "slow-clients-secret-0123";
    put_secret(&c, &ns, "t", &[("token", token)]).await?;
    for name in ["flooded", "other"] {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Receiver\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  type: github\n  secretRef: {{name: t}}\n  resources: [{{kind: GitRepository, name: src}}]\n"
        ))?;
    }
    let flooded = wait_path(&c, &ns, "flooded").await?;
    let other = wait_path(&c, &ns, "other").await?;
    let idle_rss = skewer_e2e::measure::memory_kib(pid, "VmRSS").context("RSS")?;
    let idle_fds = open_fds(pid)?;

    // 300 slow clients on one Receiver's path: half trickle their headers, half their bodies,
    // a byte a second for up to a minute.
    let slow = slow_clients(&addr, &flooded, 300, 60);
    // Every one of them connected (and is trickling) before the valid pushes.
    eventually("the slow clients connected", WAIT, || async {
        Ok((open_fds(pid)? >= idle_fds + 290).then_some(()))
    })
    .await?;
    let busy_fds = open_fds(pid)?;

    let push = |path: &str, value: &str| {
        let (path, value) = (path.to_string(), value.to_string());
        let (addr, url, ns) = (addr.clone(), repo.url.clone(), ns.clone());
        async move {
            repo.write("apps/cm.yaml", &cm(&ns, &value))?;
            let commit = repo.commit(&value)?;
            let body = github_push(&url, &commit);
            let sig = sign(token, body.as_bytes());
            let headers = [
                ("X-GitHub-Event", "push"),
                ("X-Hub-Signature-256", sig.as_str()),
            ];
            let sent = Instant::now();
            let code = raw_post(&addr, &path, &headers, body.as_bytes()).await;
            anyhow::ensure!(code == 200, "push to {path}: {code}");
            Ok::<_, anyhow::Error>(sent)
        }
    };
    let applied = |value: &'static str, within: Duration, sent: Instant| {
        let c = c.clone();
        let ns = ns.clone();
        async move {
            eventually(&format!("{value} applied"), within, || async {
                Ok((cm_value(&c, &ns).await?.as_deref() == Some(value)).then_some(()))
            })
            .await?;
            Ok::<_, anyhow::Error>(sent.elapsed())
        }
    };
    let sent = push(&other, "two").await?;
    let to_other = applied("two", Duration::from_secs(2), sent).await?;
    let sent = push(&flooded, "three").await?;
    let to_flooded = applied("three", Duration::from_secs(5), sent).await?;
    let peak_rss = skewer_e2e::measure::memory_kib(pid, "VmHWM").context("RSS")?;
    eprintln!(
        "300 slow clients: push to another Receiver applied in {to_other:?}, to the flooded one in {to_flooded:?}; fds {idle_fds} idle, {busy_fds} with the clients; RSS {} MiB idle, peak {} MiB",
        idle_rss / 1024,
        peak_rss / 1024
    );
    assert!(
        peak_rss < idle_rss + (64 << 10),
        "RSS grew {} KiB",
        peak_rss - idle_rss
    );

    // Header tricklers are cut off after the header deadline, body tricklers after the body
    // deadline: no client holds a connection for its whole minute.
    let cut = std::time::Instant::now();
    let mut closed = 0;
    for s in slow {
        closed += usize::from(s.await?);
    }
    assert_eq!(closed, 300, "every slow client was cut off");
    assert!(
        cut.elapsed() < Duration::from_secs(50),
        "{:?}",
        cut.elapsed()
    );
    eventually("the file descriptors given back", WAIT, || async {
        Ok((open_fds(pid)? <= idle_fds + 10).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_push_generates_an_application_set_of_the_pushed_repository_again() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("fleet")?;
    let ns = skewer_e2e::namespace("hooks-appset")?;
    let one = format!("{ns}-one");
    repo.write("apps/one/cm.yaml", &cm(&one, "one"))?;
    repo.write(
        "apps/one/ns.yaml",
        &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {one}}}\n"),
    )?;
    repo.commit("one")?;
    let c = client().await;
    let (_skewer, addr) = argo_cd_endpoint(&c, &ns).await?;
    let token = GITLAB_SECRET;
    // An hour between looks, and another revision than the Applications' own (`main`), so
    // that their refresh cannot refresh the set's reading of it: only the push explains a new
    // Application.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: ApplicationSet\nmetadata: {{name: dirs, namespace: {ns}}}\nspec:\n  generators:\n  - git: {{repoURL: '{url}', revision: HEAD, directories: [{{path: 'apps/*'}}], requeueAfterSeconds: 3600}}\n  template:\n    metadata: {{name: '{{{{path.basename}}}}'}}\n    spec:\n      source: {{repoURL: '{url}', targetRevision: main, path: '{{{{path}}}}'}}\n      destination: {{name: in-cluster}}\n      syncPolicy: {{automated: {{}}}}\n",
        url = repo.url
    ))?;
    eventually("the first directory's objects applied", WAIT, || async {
        Ok((cm_value(&c, &one).await?.as_deref() == Some("one")).then_some(()))
    })
    .await?;
    let two = format!("{ns}-two");
    repo.write("apps/two/cm.yaml", &cm(&two, "two"))?;
    repo.write(
        "apps/two/ns.yaml",
        &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {two}}}\n"),
    )?;
    let second = repo.commit("two")?;
    let body = serde_json::json!({
        "object_kind": "push", "ref": "refs/heads/main", "after": second,
        "project": {"git_http_url": repo.url, "path_with_namespace": "team/fleet"}
    })
    .to_string();
    let gitlab = [("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", token)];
    let sent = Instant::now();
    assert_eq!(
        post(
            &format!("http://{addr}/api/webhook"),
            &gitlab,
            body.as_bytes()
        )?,
        200
    );
    eventually("the new directory's objects applied", WAIT, || async {
        Ok((cm_value(&c, &two).await?.as_deref() == Some("two")).then_some(()))
    })
    .await?;
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    Ok(())
}
