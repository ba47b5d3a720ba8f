//! Issue 14 acceptance: the dashboard in a real browser (headless Chromium through the
//! DevTools protocol) against the real API server, its authorization through the API server's
//! TokenReview and SubjectAccessReview, and no Secret value anywhere in it.

mod common;

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use common::*;
use skewer_e2e::browser::Browser;
use skewer_e2e::git::{GitServer, free_port};
use skewer_e2e::{Skewer, eventually, hub, kc, kc_apply, root};

const SECRET: &str = "hunter2-dashboard-value";

fn settings(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\ndata: {{tier: gold}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: db, namespace: {ns}}}\nstringData: {{password: {SECRET}}}\n"
    )
}

/// A GET of the dashboard, with a bearer token when given: (status, body).
fn get(port: u16, path: &str, token: Option<&str>) -> Result<(u16, String)> {
    let headers: Vec<String> = token
        .map(|t| format!("Authorization: Bearer {t}"))
        .into_iter()
        .collect();
    skewer_e2e::http_get(port, path, &headers)
}

/// Starts skewer with its dashboard on a free port (`start` gets the address), and waits
/// until it listens. Tests in parallel may be handed the same free port: the skewer that loses
/// the bind ends at once, and another port is tried.
fn with_dashboard(start: impl Fn(&str) -> Result<Skewer>) -> Result<(Skewer, u16)> {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let mut skewer = start(&format!("127.0.0.1:{port}"))?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if !skewer.is_running() {
                last = skewer.logs();
                break;
            }
            // Logged once its own listener is bound (a connection could reach another's).
            let log = skewer.logs();
            if log.contains("serving the dashboard") && log.contains(&format!("127.0.0.1:{port}")) {
                return Ok((skewer, port));
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "the dashboard did not listen on {port}: {}",
                skewer.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    anyhow::bail!("skewer did not start with a dashboard: {last}")
}

/// `result`, with skewer's log printed when it is an error.
fn logged<T>(skewer: &Skewer, result: Result<T>) -> Result<T> {
    if result.is_err() {
        eprintln!("---- skewer log ----\n{}", skewer.logs());
    }
    result
}

fn artifacts() -> std::path::PathBuf {
    root().join("target/e2e-artifacts")
}

#[tokio::test]
async fn the_dashboard_shows_live_state_trees_and_provenance_in_a_browser() -> Result<()> {
    let ns = skewer_e2e::namespace("ui")?;
    let (skewer, port) = with_dashboard(|addr| Skewer::start_with(&ns, &["--ui-addr", addr]))?;
    let result = browser_flow(&ns, port).await;
    logged(&skewer, result)
}

async fn browser_flow(ns: &str, port: u16) -> Result<()> {
    let ns = ns.to_string();
    let git = GitServer::start()?;
    let repo = git.repo("platform")?;
    repo.write("README.md", "nothing to apply yet\n")?;
    repo.commit("empty")?;
    let addr = format!("127.0.0.1:{port}");
    git_repository(&ns, "platform", &repo.url)?;
    kustomization(&ns, "web", "platform", "./app", "  prune: true\n")?;
    let c = client().await;
    wait_failed(&c, &ns, "web", |_, m| m.contains("app")).await?;

    // The list, loaded once: the Kustomization is failing.
    let mut browser = Browser::open(&format!("http://{addr}/"))?;
    let row = format!("document.querySelector('tr[data-name=\"{ns}/web\"]')");
    browser.wait_for(
        "the failing row",
        &format!("{row} && {row}.dataset.ready === 'False'"),
        WAIT,
    )?;
    let rendered = browser.eval("document.body.dataset.rendered")?;

    // A commit makes it Ready: the same page shows it, without a reload.
    repo.write("app/settings.yaml", &settings(&ns))?;
    let commit = repo.commit("add the app")?;
    if let Err(e) = browser.wait_for(
        "the row turning Ready",
        &format!("{row} && {row}.dataset.ready === 'True'"),
        WAIT,
    ) {
        let diag = browser.eval("document.getElementById('live').className + ' | ' + document.body.dataset.rendered + ' | ' + document.getElementById('view').textContent.slice(0, 400)")?;
        anyhow::bail!("{e}: {diag}");
    }
    assert_eq!(
        browser.eval("performance.getEntriesByType('navigation').length")?,
        serde_json::json!(1),
        "the page was reloaded"
    );
    ensure!(
        browser.eval("document.body.dataset.rendered")? != rendered,
        "the list was not rendered again"
    );
    let list_png = browser.screenshot(&artifacts().join("dashboard-list.png"))?;

    // The tree: every object with its health and where it came from.
    browser.eval(&format!(
        "location.hash = '#/object/Kustomization/{ns}/web'"
    ))?;
    let node = format!("document.querySelector('li[data-object=\"ConfigMap/{ns}/settings\"]')");
    let text = browser.wait_for(
        "the ConfigMap in the tree",
        &format!("{node} && {node}.textContent"),
        WAIT,
    )?;
    let text = text.as_str().unwrap_or_default().to_string();
    assert!(text.contains("Current"), "{text}");
    assert!(text.contains("app/settings.yaml#1"), "{text}");
    let page = browser.eval("document.getElementById('view').textContent")?;
    let page = page.as_str().unwrap_or_default();
    assert!(page.contains(&format!("main@sha1:{commit}")), "{page}");
    assert!(page.contains(&format!("Secret/{ns}/db")), "{page}");
    assert!(page.contains("e2e <e2e@skewer.dev>: add the app"), "{page}");
    let tree_png = browser.screenshot(&artifacts().join("dashboard-tree.png"))?;

    // The clusters page: the hub, probed live.
    browser.eval("location.hash = '#/clusters'")?;
    let hub_row = "document.querySelector('tr[data-cluster=\"(hub)\"]')";
    let hub_text = browser.wait_for(
        "the hub on the clusters page",
        &format!("{hub_row} && {hub_row}.textContent"),
        WAIT,
    )?;
    assert!(
        hub_text.as_str().unwrap_or_default().contains("Reachable"),
        "{hub_text}"
    );

    // The hub's own page lists what applies to it.
    browser.eval("location.hash = '#/cluster/' + encodeURIComponent('(hub)')")?;
    browser.wait_for(
        "the Kustomization on the hub's page",
        &format!("{row} && document.querySelector('h1').textContent.includes('(hub)')"),
        WAIT,
    )?;

    // Non-blank: far larger than a screenshot of an empty page.
    browser.eval("document.body.replaceChildren(); document.body.style.background = '#fff'")?;
    let blank = browser.screenshot(&artifacts().join("blank.png"))?;
    assert!(
        list_png > 3 * blank && tree_png > 3 * blank,
        "screenshots look blank: {list_png}, {tree_png} vs {blank} bytes"
    );

    // No Secret value in any page or response.
    let encoded = skewer_e2e::base64(SECRET.as_bytes());
    for path in [
        "/",
        "/app.js",
        "/app.css",
        "/api/list",
        &format!("/api/object/Kustomization/{ns}/web"),
    ] {
        let (code, body) = get(port, path, None)?;
        assert_eq!(code, 200, "{path}");
        assert!(
            !body.contains(SECRET) && !body.contains(&encoded),
            "{path} shows the Secret's value"
        );
    }
    // The page's History: what the Kustomization deployed.
    let (_, body) = get(port, &format!("/api/object/Kustomization/{ns}/web"), None)?;
    let detail: serde_json::Value = serde_json::from_str(&body)?;
    let history = detail["history"].as_array().context("history")?;
    assert!(
        history.first().is_some_and(|h| h["id"] == 1
            && h["outcome"] == "Succeeded"
            && h["revision"]
                .as_str()
                .is_some_and(|r| r.starts_with("main@sha1:"))),
        "{body}"
    );
    Ok(())
}

#[tokio::test]
async fn with_kubernetes_auth_a_user_sees_only_what_they_may_get() -> Result<()> {
    let selector = format!("ui-auth={}", skewer_e2e::unique("t"));
    let (key, value) = selector.split_once('=').context("selector")?;
    let home = skewer_e2e::namespace("ui-home")?;
    let team_a = skewer_e2e::namespace("team-a")?;
    let team_b = skewer_e2e::namespace("team-b")?;
    for ns in [&team_a, &team_b] {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: apps, namespace: {ns}, labels: {{{key}: {value}}}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: missing}}\n  interval: 1h\n"
        ))?;
    }
    // `nobody` (a static token of the test cluster) may read team-a's Kustomizations only.
    kc_apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: read-ks, namespace: {team_a}}}\nrules:\n- {{apiGroups: [skewer.dev], resources: [kustomizations], verbs: [get, list]}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: nobody-reads, namespace: {team_a}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-ks}}\nsubjects:\n- {{kind: User, name: nobody, apiGroup: rbac.authorization.k8s.io}}\n"
    ))?;
    let admin = std::fs::read_to_string(hub().with_file_name("admin.token"))?;
    let nobody = format!("{}-nobody", admin.trim());
    let (_skewer, port) = with_dashboard(|addr| {
        Skewer::start_cluster_wide(
            &selector,
            &home,
            &["--ui-addr", addr, "--ui-auth", "kubernetes"],
        )
    })?;
    let list = |token: Option<&str>| get(port, "/api/list?size=500", token);
    // Until the reflectors have listed, the list may be empty: wait for the admin's view.
    skewer_e2e::eventually(
        "both Kustomizations listed for the admin",
        Duration::from_secs(30),
        || async {
            let (code, body) = list(Some(admin.trim()))?;
            Ok((code == 200 && body.contains(&team_a) && body.contains(&team_b)).then_some(()))
        },
    )
    .await?;

    assert_eq!(list(None)?.0, 401, "no token");
    assert_eq!(list(Some("not-a-token"))?.0, 401, "an unknown token");
    let (code, body) = list(Some(&nobody))?;
    assert_eq!(code, 200);
    let page: serde_json::Value = serde_json::from_str(&body)?;
    let names: Vec<String> = page["items"]
        .as_array()
        .context("items")?
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["namespace"].as_str().unwrap_or_default(),
                i["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(names, [format!("{team_a}/apps")]);
    assert_eq!(
        get(
            port,
            &format!("/api/object/Kustomization/{team_b}/apps"),
            Some(&nobody)
        )?
        .0,
        404
    );
    assert_eq!(
        get(
            port,
            &format!("/api/object/Kustomization/{team_a}/apps"),
            Some(&nobody)
        )?
        .0,
        200
    );
    let _ = kc(&["delete", "namespace", &team_a, &team_b, "--wait=false"]);
    Ok(())
}

#[tokio::test]
async fn an_out_of_sync_object_shows_how_it_differs() -> Result<()> {
    let ns = skewer_e2e::namespace("ui-oos")?;
    let git = GitServer::start()?;
    let repo = git.repo("apps")?;
    repo.write(
        "app/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: colors}\ndata: {color: blue, size: large}\n",
    )?;
    repo.commit("blue")?;
    let (_skewer, port) = with_dashboard(|addr| Skewer::start_with(&ns, &["--ui-addr", addr]))?;
    // Automated, without self-heal: drift is shown, not repaired.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: colors, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: app, targetRevision: main}}\n  syncPolicy: {{automated: {{prune: true}}}}\n",
        repo.url
    ))?;
    let path = format!("/api/object/Application/{ns}/colors");
    skewer_e2e::eventually("the Application Synced", WAIT, || async {
        let (_, body) = get(port, &path, None)?;
        Ok(body.contains("\"sync\":\"Synced\"").then_some(()))
    })
    .await?;
    kc(&[
        "-n",
        &ns,
        "patch",
        "configmap",
        "colors",
        "--type=merge",
        "-p",
        r#"{"data":{"color":"red"}}"#,
    ])?;
    let diff = skewer_e2e::eventually("the drifted object's diff", WAIT, || async {
        let (_, body) = get(port, &path, None)?;
        let d: serde_json::Value = serde_json::from_str(&body)?;
        Ok(d["outOfSync"][0]["diff"].as_str().map(String::from))
    })
    .await?;
    assert_eq!(
        diff,
        format!("~ ConfigMap/{ns}/colors\n  data.color: red → blue\n")
    );
    Ok(())
}

#[tokio::test]
async fn application_sets_are_listed_with_their_applications() -> Result<()> {
    let ns = skewer_e2e::namespace("ui-appset")?;
    let git = GitServer::start()?;
    let repo = git.repo("apps")?;
    repo.write(
        "app/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: b}\n",
    )?;
    repo.commit("one")?;
    let (_skewer, port) = with_dashboard(|addr| Skewer::start_with(&ns, &["--ui-addr", addr]))?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: ApplicationSet\nmetadata: {{name: teams, namespace: {ns}}}\nspec:\n  generators: [{{list: {{elements: [{{team: red}}, {{team: blue}}]}}}}]\n  template:\n    metadata: {{name: '{{{{team}}}}'}}\n    spec:\n      source: {{repoURL: {url}, path: app, targetRevision: main}}\n      destination: {{name: in-cluster, namespace: '{ns}-{{{{team}}}}'}}\n      syncPolicy: {{automated: {{prune: true}}, syncOptions: [CreateNamespace=true]}}\n",
        url = repo.url
    ))?;
    let listed =
        skewer_e2e::eventually("the ApplicationSet listed with 2 synced", WAIT, || async {
            let (_, body) = get(port, "/api/list?kind=ApplicationSet", None)?;
            let page: serde_json::Value = serde_json::from_str(&body)?;
            let item = page["items"][0].clone();
            Ok((item["sync"] == "2/2 Synced").then_some(page))
        })
        .await?;
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    assert_eq!(listed["items"][0]["name"], "teams");
    let (status, body) = get(
        port,
        &format!("/api/object/ApplicationSet/{ns}/teams"),
        None,
    )?;
    ensure!(status == 200, "{status}: {body}");
    let page: serde_json::Value = serde_json::from_str(&body)?;
    let children: Vec<&str> = page["tree"]["children"]
        .as_array()
        .context("a tree")?
        .iter()
        .filter_map(|c| c["object"].as_str())
        .collect();
    assert_eq!(
        children,
        [
            format!("Application/{ns}/blue"),
            format!("Application/{ns}/red")
        ]
    );
    Ok(())
}

/// A Provider is listed with its last delivery where others show a revision, and its page says
/// how that delivery went, without its address (a webhook's path is often its secret).
#[tokio::test(flavor = "multi_thread")]
async fn a_providers_last_delivery_is_on_the_dashboard() -> Result<()> {
    let f = Fixture::new("uiprovider").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let api = skewer_e2e::hostapi::HostApi::start("unused", "hook-key")?;
    put_secret(c, &ns, "hmac", &[("token", "hook-key")]).await?;
    put_secret(c, &ns, "ca", &[("ca.crt", &api.ca_pem)]).await?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Provider\nmetadata: {{name: hook, namespace: {ns}}}\nspec:\n  type: generic-hmac\n  address: {}/hook/secret-path\n  secretRef: {{name: hmac}}\n  certSecretRef: {{name: ca}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Alert\nmetadata: {{name: all, namespace: {ns}}}\nspec:\n  providerRef: {{name: hook}}\n  eventSources:\n  - {{kind: Kustomization, name: '*'}}\n",
        api.url
    ))?;
    repo.write(
        "cm.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\n"
        ),
    )?;
    let commit = repo.commit("one")?;
    let (skewer, port) = with_dashboard(|addr| {
        let skewer = Skewer::start_with(&ns, &["--ui-addr", addr])?;
        git_repository(&ns, "src", &repo.url)?;
        Ok(skewer)
    })?;
    let result = async {
        eventually("the source's artifact", WAIT, || async {
            git_revision(c, &ns, "src").await
        })
        .await?;
        kustomization(&ns, "app", "src", "./", "")?;
        wait_applied(c, &ns, "app", &commit).await?;
        let row = eventually("the Provider's delivery in the list", WAIT, || async {
            let (code, body) = get(port, "/api/list?kind=Provider", None)?;
            ensure!(code == 200, "{code}: {body}");
            let list: serde_json::Value = serde_json::from_str(&body)?;
            let item = list["items"][0].clone();
            Ok(item["revision"]
                .as_str()
                .is_some_and(|r| r.starts_with("Delivered"))
                .then_some(item))
        })
        .await?;
        assert_eq!(row["name"], "hook");
        assert_eq!(
            row["revision"],
            format!("Delivered Kustomization/{ns}/app ReconciliationSucceeded")
        );
        let (code, body) = get(port, &format!("/api/object/Provider/{ns}/hook"), None)?;
        ensure!(code == 200, "{code}: {body}");
        let page: serde_json::Value = serde_json::from_str(&body)?;
        let last = page["lastDelivery"].as_str().unwrap_or_default();
        assert!(last.starts_with("Delivered at "), "{page}");
        assert!(last.contains("201 Created"), "the host's answer: {last}");
        assert!(
            !body.contains("secret-path"),
            "the address stays out: {body}"
        );
        assert!(api.received().iter().all(|r| r.authorized));
        Ok(())
    }
    .await;
    logged(&skewer, result)
}
