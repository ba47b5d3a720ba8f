//! Issue 11 acceptance: Argo CD's Applications, moved over by their apiVersion, against a
//! real API server and real Git servers on loopback.

mod common;

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail};
use common::apps::*;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use skewer_api::ApplicationStatus;
use skewer_e2e::git::GitServer;
use skewer_e2e::{eventually, kc, kc_apply};

/// The resources status lists: `name` → (sync status, requires pruning).
fn listed(st: &ApplicationStatus) -> BTreeMap<String, (String, bool)> {
    st.resources
        .iter()
        .map(|r| (r.name.clone(), (r.status.clone(), r.requires_pruning)))
        .collect()
}

const GUIDE_PATH: &str = "gitops/teams/clusters/do-cluster-dev-cluster";

#[tokio::test(flavor = "multi_thread")]
async fn the_platform_guides_application_moves_over_by_its_api_version() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("platform")?;
    let ns = skewer_e2e::namespace("argo")?;
    let dest = format!("{ns}-operator");
    repo.write(&format!("{GUIDE_PATH}/cluster.yaml"), &cm("cluster", "one"))?;
    repo.write(&format!("{GUIDE_PATH}/stack.yaml"), &cm("stack", "one"))?;
    // The developer portal's descriptor, beside the manifests: never applied.
    repo.write(
        &format!("{GUIDE_PATH}/catalog-info.yaml"),
        "apiVersion: backstage.io/v1alpha1\nkind: Component\nmetadata: {name: do-cluster}\nspec: {type: service}\n",
    )?;
    repo.write(
        &format!("{GUIDE_PATH}/nested/extra.yaml"),
        &cm("extra", "one"),
    )?;
    let first = repo.commit("one")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    kc_apply(&format!(
        r#"apiVersion: skewer.dev/v1alpha1
kind: Application
metadata: {{name: do-cluster-dev-team-a, namespace: {ns}}}
spec:
  destination: {{namespace: {dest}, server: https://kubernetes.default.svc}}
  source:
    path: {GUIDE_PATH}
    directory: {{recurse: false, exclude: '{{catalog-info.yaml}}'}}
    targetRevision: main
    repoURL: {url}
  syncPolicy:
    automated: {{prune: true, selfHeal: true}}
    syncOptions: [ServerSideApply=true, CreateNamespace=true]
  interval: 1s
"#,
        url = repo.url
    ))?;
    let app = "do-cluster-dev-team-a";
    let st = wait_app(&c, &ns, app, "Synced and Healthy", synced_healthy).await?;
    assert_eq!(
        st.sync.as_ref().and_then(|s| s.revision.clone()),
        Some(format!("main@sha1:{first}"))
    );
    let names: Vec<&str> = st.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["cluster", "stack"],
        "everything but catalog-info and nested/"
    );
    assert!(st.resources.iter().all(|r| r.kind == "ConfigMap"
        && r.version == "v1"
        && r.namespace == dest
        && r.health.as_ref().is_some_and(|h| h.status == "Healthy")));
    assert_eq!(st.source_type.as_deref(), Some("Directory"));
    let op = st.operation_state.clone().unwrap_or_default();
    assert_eq!(op.phase, "Succeeded");
    assert_eq!(op.sync_result.map(|r| r.resources.len()), Some(2));
    assert_eq!(
        cm_value(&c, &dest, "cluster").await?.as_deref(),
        Some("one")
    );
    assert_eq!(
        cm_value(&c, &dest, "extra").await?,
        None,
        "subdirectories are not read"
    );
    // kubectl prints Argo CD's columns.
    let row = kc(&["get", "applications", "-n", &ns, "--no-headers"])?;
    assert!(row.contains("Synced") && row.contains("Healthy"), "{row}");

    // Self-heal: a deleted object comes back.
    kc(&["delete", "configmap", "cluster", "-n", &dest])?;
    eventually("the deleted ConfigMap is recreated", WAIT, || async {
        Ok(cm_value(&c, &dest, "cluster").await?.map(|_| ()))
    })
    .await?;

    // Prune: an object removed from Git is deleted.
    repo.remove(&format!("{GUIDE_PATH}/stack.yaml"))?;
    let second = repo.commit("two")?;
    wait_app(&c, &ns, app, "synced at the second commit", |st| {
        synced_healthy(st)?;
        match st.sync.as_ref().and_then(|s| s.revision.as_deref()) {
            Some(r) if r.ends_with(&second) => Ok(()),
            other => bail!("revision {other:?}"),
        }
    })
    .await?;
    // Foreground deletion (Argo CD's default propagation): gone once the collector is done.
    eventually("the removed ConfigMap is pruned", WAIT, || async {
        Ok(cm_value(&c, &dest, "stack").await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_automation_changes_wait_for_a_sync_and_drift_is_shown_not_healed() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("manual")?;
    let ns = skewer_e2e::namespace("manual")?;
    repo.write("apps/a.yaml", &cm("a", "one"))?;
    repo.write("apps/b.yaml", &cm("b", "one"))?;
    repo.commit("one")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: manual, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps, targetRevision: HEAD}}\n  interval: 1s\n",
        repo.url
    ))?;
    let st = wait_app(
        &c,
        &ns,
        "manual",
        "OutOfSync before any sync",
        |st| match sync_health(st).0.as_str() {
            "OutOfSync" if st.resources.len() == 2 => Ok(()),
            other => bail!("{other}: {:?}", st.resources),
        },
    )
    .await?;
    assert!(
        ready_message(&st).contains("skewer sync app/manual"),
        "{}",
        ready_message(&st)
    );
    assert_eq!(
        cm_value(&c, &ns, "a").await?,
        None,
        "nothing applied unasked"
    );

    // `skewer sync --wait`, as a person would type it.
    let cli = skewer_cli;
    let sync =
        |_: &str| -> Result<String> { cli(&["sync", "app/manual", "-n", &ns, "--wait", "30s"]) };
    let line = sync("1")?;
    assert!(line.contains("Synced, Healthy"), "{line}");
    wait_app(&c, &ns, "manual", "Synced after the sync", synced_healthy).await?;
    let table = cli(&["get", "applications", "-n", &ns])?;
    assert!(
        table.lines().nth(1).is_some_and(|l| l.starts_with("manual")
            && l.contains("Synced")
            && l.contains("Healthy")),
        "{table}"
    );
    assert_eq!(cm_value(&c, &ns, "a").await?.as_deref(), Some("one"));

    // A Git change: exactly the changed object is OutOfSync, and the server keeps the old one.
    repo.write("apps/b.yaml", &cm("b", "two"))?;
    repo.commit("two")?;
    let st = wait_app(&c, &ns, "manual", "OutOfSync on b alone", |st| {
        let l = listed(st);
        match (l.get("a"), l.get("b")) {
            (Some((a, _)), Some((b, _))) if a == "Synced" && b == "OutOfSync" => Ok(()),
            _ => bail!("{l:?}"),
        }
    })
    .await?;
    assert!(ready_message(&st).contains("ConfigMap/") && ready_message(&st).contains("/b"));
    assert_eq!(cm_value(&c, &ns, "b").await?.as_deref(), Some("one"));

    // Before syncing: what the sync would change, from the Application alone (its source
    // fetched at its revision, dry-run on its cluster), and what its source renders.
    let run = |args: &[&str]| -> Result<(Option<i32>, String)> {
        let out = std::process::Command::new(skewer_e2e::skewer_bin())
            .env("KUBECONFIG", skewer_e2e::hub())
            .args(args)
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        Ok((out.status.code(), text))
    };
    for args in [
        ["diff", "app/manual", "-n", &ns, ""],
        ["sync", "app/manual", "-n", &ns, "--dry-run"],
    ] {
        let args: Vec<&str> = args.into_iter().filter(|a| !a.is_empty()).collect();
        let (code, said) = run(&args)?;
        assert_eq!(code, Some(1), "{args:?}: {said}");
        assert!(
            said.contains(&format!("ConfigMap/{ns}/b"))
                && said.contains("one")
                && said.contains("two"),
            "{args:?}: {said}"
        );
        assert!(
            !said.contains(&format!("ConfigMap/{ns}/a")),
            "a is as its source says: {said}"
        );
    }
    assert_eq!(
        cm_value(&c, &ns, "b").await?.as_deref(),
        Some("one"),
        "a dry run writes nothing"
    );
    let (code, manifests) = run(&["build", "app/manual", "-n", &ns])?;
    assert_eq!(code, Some(0), "{manifests}");
    assert!(
        manifests.matches("kind: ConfigMap").count() == 2
            && manifests.contains("value: two")
            && manifests.contains(&format!("namespace: {ns}")),
        "{manifests}"
    );

    sync("2")?;
    wait_app(&c, &ns, "manual", "Synced at two", |st| {
        synced_healthy(st)?;
        if st.resources.iter().all(|r| r.status == "Synced") {
            Ok(())
        } else {
            bail!("{:?}", listed(st))
        }
    })
    .await?;
    assert_eq!(cm_value(&c, &ns, "b").await?.as_deref(), Some("two"));
    let (code, said) = run(&["diff", "app/manual", "-n", &ns])?;
    assert_eq!((code, said.as_str()), (Some(0), "no differences\n"));

    // Drift without self-heal: reported, and left.
    kc(&[
        "patch",
        "configmap",
        "a",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"data":{"value":"by hand"}}"#,
    ])?;
    wait_app(
        &c,
        &ns,
        "manual",
        "OutOfSync on the drifted a",
        |st| match listed(st).get("a") {
            Some((s, _)) if s == "OutOfSync" => Ok(()),
            _ => bail!("{:?}", listed(st)),
        },
    )
    .await?;
    assert_eq!(cm_value(&c, &ns, "a").await?.as_deref(), Some("by hand"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn what_skewer_does_not_do_is_refused_naming_the_field() -> Result<()> {
    let ns = skewer_e2e::namespace("refused")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: helm, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: https://charts.example.com, chart: nginx, targetRevision: 15.0.0, helm: {{releaseName: web}}}}\n"
    ))?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: options, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: https://example.com/x.git, path: .}}\n  syncPolicy: {{syncOptions: [CreateNamespace=true, RespectIgnoreDifferences=true]}}\n"
    ))?;
    // A PreSync hook in the source: refused, naming file and object, and nothing applied.
    let git = GitServer::start()?;
    let repo = git.repo("hooks")?;
    repo.write("apps/cm.yaml", &cm("plain", "one"))?;
    repo.write(
        "apps/migrate.yaml",
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations: {argocd.argoproj.io/hook: PreSync}\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: m, image: example.com/migrate:1}]\n",
    )?;
    repo.commit("hooks")?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: hooks, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps}}\n  syncPolicy: {{automated: {{}}}}\n",
        repo.url
    ))?;
    for (name, field) in [
        ("helm", "spec.source.chart"),
        (
            "options",
            "spec.syncPolicy.syncOptions[1]: 'RespectIgnoreDifferences=true' is not supported",
        ),
    ] {
        wait_app(&c, &ns, name, "refused", |st| {
            let m = ready_message(st);
            if m.starts_with("False InvalidSpec") && m.contains(field) {
                Ok(())
            } else {
                bail!("{m}")
            }
        })
        .await?;
    }
    wait_app(&c, &ns, "hooks", "refused for its hook", |st| {
        let m = ready_message(st);
        if m.contains("BuildFailed")
            && m.contains("apps/migrate.yaml")
            && m.contains("resource hooks")
        {
            Ok(())
        } else {
            bail!("{m}")
        }
    })
    .await?;
    assert_eq!(cm_value(&c, &ns, "plain").await?, None, "nothing applied");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_applications_on_one_repository_and_revision_fetch_once() -> Result<()> {
    let git = GitServer::start_http()?;
    let repo = git.repo("shared")?;
    let ns = skewer_e2e::namespace("shared")?;
    for i in 0..20 {
        repo.write(&format!("apps/{i}/cm.yaml"), &cm(&format!("cm-{i}"), "one"))?;
    }
    repo.commit("one")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    let mut yaml = String::new();
    for i in 0..20 {
        yaml.push_str(&format!(
            "---\napiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: app-{i}, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps/{i}, targetRevision: main}}\n  syncPolicy: {{automated: {{}}}}\n",
            repo.url
        ));
    }
    kc_apply(&yaml)?;
    for i in 0..20 {
        wait_app(&c, &ns, &format!("app-{i}"), "Synced", synced_healthy).await?;
    }
    // One fetch (and its ref listing), whatever the number of Applications.
    let (fetches, listings) = (
        git.requests("git-upload-pack fetch"),
        git.requests("git-upload-pack ls-refs"),
    );
    assert_eq!(fetches, 1, "fetches");
    assert!((1..=2).contains(&listings), "ref listings: {listings}");
    Ok(())
}

/// Issue 23: a new Application on a repository another Application already follows (with an
/// hour's interval) starts from the branch as it is now, not as the other last resolved it.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_application_resolves_its_revision_afresh() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("fresh")?;
    let ns = skewer_e2e::namespace("fresh")?;
    repo.write("a/cm.yaml", &cm("a", "one"))?;
    repo.write("b/cm.yaml", &cm("b", "one"))?;
    let first = repo.commit("one")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    let app = |name: &str, path: &str| {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: {path}, targetRevision: main}}\n  syncPolicy: {{automated: {{}}}}\n  interval: 1h\n",
            repo.url
        ))
    };
    let at = |commit: &str| {
        let commit = commit.to_string();
        move |st: &ApplicationStatus| {
            synced_healthy(st)?;
            let revision = st.sync.as_ref().and_then(|s| s.revision.clone());
            match revision {
                Some(r) if r.ends_with(&commit) => Ok(()),
                other => bail!("at {other:?}"),
            }
        }
    };
    app("early", "a")?;
    wait_app(&c, &ns, "early", "Synced at the first commit", at(&first)).await?;
    repo.write("b/cm.yaml", &cm("b", "two"))?;
    let second = repo.commit("two")?;
    // Creation times are whole seconds: "late" is created in a later second than the
    // resolution "early" made, as it would be minutes later in the issue's case.
    let epoch_second = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    };
    let resolved_in = epoch_second();
    eventually("the next second", WAIT, || async {
        Ok((epoch_second() > resolved_in).then_some(()))
    })
    .await?;
    app("late", "b")?;
    wait_app(&c, &ns, "late", "Synced at the second commit", at(&second)).await?;
    assert_eq!(cm_value(&c, &ns, "b").await?.as_deref(), Some("two"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn dependencies_cross_kinds_both_ways() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("deps")?;
    let ns = skewer_e2e::namespace("deps")?;
    repo.write("infra/cm.yaml", &cm("infra", "one"))?;
    repo.write("app/cm.yaml", &cm("app", "one"))?;
    repo.write("after/cm.yaml", &cm("after", "one"))?;
    let commit = repo.commit("one")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    // The Application waits for a Kustomization that does not exist yet.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: app}}\n  syncPolicy: {{automated: {{}}}}\n  dependsOn: [{{kind: Kustomization, name: infra}}]\n",
        repo.url
    ))?;
    // A Kustomization that waits for the Application.
    git_repository(&ns, "src", &repo.url)?;
    let here = format!("  targetNamespace: {ns}\n");
    kustomization(
        &ns,
        "after",
        "src",
        "./after",
        &format!("{here}  dependsOn: [{{kind: Application, name: app}}]\n"),
    )?;
    wait_app(&c, &ns, "app", "waiting for infra", |st| {
        let m = ready_message(st);
        if m.contains("DependencyNotReady") && m.contains("Kustomization") {
            Ok(())
        } else {
            bail!("{m}")
        }
    })
    .await?;
    assert_eq!(cm_value(&c, &ns, "app").await?, None);
    assert_eq!(cm_value(&c, &ns, "after").await?, None);

    kustomization(&ns, "infra", "src", "./infra", &here)?;
    wait_applied(&c, &ns, "infra", &commit).await?;
    wait_app(&c, &ns, "app", "Synced after infra", synced_healthy).await?;
    wait_applied(&c, &ns, "after", &commit).await?;
    assert_eq!(cm_value(&c, &ns, "after").await?.as_deref(), Some("one"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_sync_retries_with_backoff_and_ends_failed_at_the_limit() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("failing")?;
    let ns = skewer_e2e::namespace("failing")?;
    // The API server rejects this name.
    repo.write("apps/bad.yaml", &cm("Not_A_Name", "x"))?;
    repo.commit("one")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: failing, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps}}\n  syncPolicy:\n    automated: {{}}\n    retry: {{limit: 2, backoff: {{duration: 1s, factor: 2, maxDuration: 5s}}}}\n",
        repo.url
    ))?;
    let seen = std::sync::Mutex::new(Vec::new());
    let st = eventually("the sync to fail at its limit", WAIT, || async {
        let st = app_status(&c, &ns, "failing").await?;
        let op = st.operation_state.clone().unwrap_or_default();
        {
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.last() != Some(&op.retry_count) {
                seen.push(op.retry_count);
            }
        }
        if op.phase == "Failed" {
            return Ok(Some(st));
        }
        bail!("{} {}: {}", op.phase, op.retry_count, op.message)
    })
    .await?;
    let seen = seen.into_inner().unwrap_or_default();
    let op = st.operation_state.unwrap_or_default();
    assert_eq!(op.retry_count, 3, "the first attempt and two retries");
    assert!(
        seen.contains(&1) || seen.contains(&2),
        "attempts were visible: {seen:?}"
    );
    assert!(op.message.contains("Not_A_Name"), "{}", op.message);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_waves_wait_for_health_and_prune_in_reverse() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("waves")?;
    let ns = skewer_e2e::namespace("waves")?;
    let wave = |w: &str| format!("  annotations: {{argocd.argoproj.io/sync-wave: '{w}'}}\n");
    let deployment = |replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n{}spec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec: {{containers: [{{name: web, image: example.com/web:1}}]}}\n",
            wave("0")
        )
    };
    let cm_in = |name: &str, w: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{}data: {{v: x}}\n",
            wave(w)
        )
    };
    repo.write("apps/first.yaml", &cm_in("first", "-1"))?;
    // This cluster has no kubelet: a Deployment of one replica never becomes available.
    repo.write("apps/web.yaml", &deployment(1))?;
    repo.write("apps/last.yaml", &cm_in("last", "1"))?;
    repo.commit("one")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: waves, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps}}\n  syncPolicy: {{automated: {{prune: true}}}}\n  interval: 1s\n  timeout: 3s\n",
        repo.url
    ))?;
    let st = wait_app(&c, &ns, "waves", "stopped at wave 0", |st| {
        let op = st.operation_state.clone().unwrap_or_default();
        if op.message.contains("sync wave 0") {
            Ok(())
        } else {
            bail!("{}: {}", op.phase, op.message)
        }
    })
    .await?;
    assert!(
        st.operation_state
            .unwrap_or_default()
            .message
            .contains("Deployment/"),
        "names the unhealthy object"
    );
    assert!(
        cm_value(&c, &ns, "first").await?.is_none(),
        "first has data.v, not value"
    );
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    assert!(api.get_opt("first").await?.is_some(), "wave -1 applied");
    assert!(
        api.get_opt("last").await?.is_none(),
        "wave 1 waits for wave 0"
    );

    // Wave 0 made healthy (no replicas to wait for): wave 1 follows.
    repo.write("apps/web.yaml", &deployment(0))?;
    repo.commit("two")?;
    wait_app(&c, &ns, "waves", "Synced and Healthy", synced_healthy).await?;
    assert!(api.get_opt("last").await?.is_some(), "wave 1 applied");

    // Everything leaves Git: pruned from the last wave back.
    repo.remove("apps/first.yaml")?;
    repo.remove("apps/web.yaml")?;
    repo.remove("apps/last.yaml")?;
    repo.write("apps/keep.yaml", &cm_in("keep", "0"))?;
    repo.commit("three")?;
    let deletes = deletions(&ns, 3).await?;
    assert_eq!(deletes, ["last", "web", "first"], "reverse wave order");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn private_repositories_are_read_with_argo_cds_credential_templates() -> Result<()> {
    let git = GitServer::start_http_with(&skewer_e2e::git::HttpOptions {
        basic: Some(("deploy".into(), "s3cret-pass".into())),
        tls: true,
        ..Default::default()
    })?;
    let repo = git.repo("private")?;
    let ns = skewer_e2e::namespace("creds")?;
    repo.write("apps/cm.yaml", &cm("private", "one"))?;
    repo.commit("one")?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    let app = format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: private, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps}}\n  syncPolicy: {{automated: {{}}}}\n  interval: 1s\n",
        repo.url
    );
    kc_apply(&app)?;
    wait_app(&c, &ns, "private", "refused without credentials", |st| {
        let m = ready_message(st);
        if m.starts_with("False") && !m.contains("s3cret") {
            Ok(())
        } else {
            bail!("{m}")
        }
    })
    .await?;

    // A credential template for every repository of the server, as Argo CD keeps them.
    let prefix = repo
        .url
        .rsplit_once('/')
        .map(|(p, _)| p)
        .unwrap_or_default();
    let ca = git.ca_pem().unwrap_or_default();
    put_secret(
        &c,
        &ns,
        "git-server",
        &[
            ("url", prefix),
            ("username", "deploy"),
            ("password", "s3cret-pass"),
            ("ca.crt", ca),
        ],
    )
    .await?;
    kc(&[
        "label",
        "secret",
        "git-server",
        "-n",
        &ns,
        "argocd.argoproj.io/secret-type=repo-creds",
    ])?;
    wait_app(
        &c,
        &ns,
        "private",
        "Synced with the template's credentials",
        synced_healthy,
    )
    .await?;
    assert_eq!(cm_value(&c, &ns, "private").await?.as_deref(), Some("one"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn oci_sources_follow_a_version_range() -> Result<()> {
    let registry = skewer_e2e::registry::Registry::start()?;
    let ns = skewer_e2e::namespace("oci-app")?;
    let url = registry.url("platform");
    let tree = |value: &str| -> Result<tempfile::TempDir> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("apps"))?;
        std::fs::write(dir.path().join("apps/cm.yaml"), cm("from-oci", value))?;
        Ok(dir)
    };
    let one = registry.push_with_skewer(&url, "1.0.0", tree("one")?.path(), &[])?;
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    plain_http_registry(&c, &ns, &url).await?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: oci, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: '{url}', path: apps, targetRevision: '>=1.0.0'}}\n  syncPolicy: {{automated: {{}}}}\n  interval: 1s\n"
    ))?;
    let st = wait_app(&c, &ns, "oci", "Synced at 1.0.0", synced_healthy).await?;
    assert_eq!(
        st.sync.and_then(|s| s.revision),
        Some(format!("1.0.0@{one}"))
    );
    assert_eq!(cm_value(&c, &ns, "from-oci").await?.as_deref(), Some("one"));

    let two = registry.push_with_skewer(&url, "1.1.0", tree("two")?.path(), &[])?;
    wait_app(&c, &ns, "oci", "Synced at 1.1.0", |st| {
        synced_healthy(st)?;
        match st.sync.as_ref().and_then(|s| s.revision.as_deref()) {
            Some(r) if r == format!("1.1.0@{two}") => Ok(()),
            other => bail!("{other:?}"),
        }
    })
    .await?;
    assert_eq!(cm_value(&c, &ns, "from-oci").await?.as_deref(), Some("two"));
    Ok(())
}

/// Issue 29: `status.history` keeps the last `revisionHistoryLimit` deployments, and
/// `skewer rollback` pins an automated Application to an earlier one until its sync policy
/// changes.
#[tokio::test(flavor = "multi_thread")]
async fn history_keeps_the_last_deployments_and_rollback_pins_an_earlier_one() -> Result<()> {
    let git = GitServer::start()?;
    let repo = git.repo("history")?;
    let ns = skewer_e2e::namespace("history")?;
    let mut commits = Vec::new();
    repo.write("apps/a.yaml", &cm("a", "one"))?;
    commits.push(repo.commit("one")?);
    let c = client().await;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, name: in-cluster}}\n  source: {{repoURL: {}, path: apps, targetRevision: main}}\n  syncPolicy: {{automated: {{prune: true, selfHeal: true}}}}\n  revisionHistoryLimit: 2\n  interval: 1s\n",
        repo.url
    ))?;
    let at = |commit: String| {
        move |st: &ApplicationStatus| {
            synced_healthy(st)?;
            match st.sync.as_ref().and_then(|s| s.revision.as_deref()) {
                Some(r) if r.ends_with(&commit) => Ok(()),
                other => bail!("revision {other:?}"),
            }
        }
    };
    wait_app(&c, &ns, "web", "synced at one", at(commits[0].clone())).await?;
    for value in ["two", "three"] {
        repo.write("apps/a.yaml", &cm("a", value))?;
        if value == "three" {
            repo.write("apps/b.yaml", &cm("b", value))?;
        }
        commits.push(repo.commit(value)?);
        let commit = commits.last().cloned().unwrap_or_default();
        wait_app(&c, &ns, "web", value, at(commit)).await?;
    }
    // Three deployments, the last two kept.
    let st = app_status(&c, &ns, "web").await?;
    let kept: Vec<(i64, String, &str)> = st
        .history
        .iter()
        .map(|d| (d.id, d.revision.clone(), d.outcome.as_str()))
        .collect();
    assert_eq!(
        kept,
        [
            (2, format!("main@sha1:{}", commits[1]), "Succeeded"),
            (3, format!("main@sha1:{}", commits[2]), "Succeeded"),
        ]
    );
    assert!(st.history.iter().all(|d| d.digest.starts_with("sha256:")));
    // `-o wide`: revisions (and messages) whole.
    let wide = skewer_cli(&["get", "apps", "-n", &ns, "-o", "wide"])?;
    assert!(
        wide.contains(&format!("main@sha1:{}", commits[2])),
        "{wide}"
    );
    let narrow = skewer_cli(&["get", "apps", "-n", &ns])?;
    assert!(!narrow.contains(&commits[2]), "{narrow}");
    let table = skewer_cli(&["history", "app/web", "-n", &ns])?;
    assert!(table.starts_with("ID  REVISION"), "{table}");
    assert!(
        table.contains(&format!("main@{}", &commits[1][..7])),
        "{table}"
    );

    // Back to two: applied at once, what three added pruned, automation kept.
    let line = skewer_cli(&["rollback", "app/web", "2", "-n", &ns, "--wait", "60s"])?;
    assert!(
        line.contains("rolled back to deployment 2") && line.contains("Synced, Healthy"),
        "{line}"
    );
    assert_eq!(cm_value(&c, &ns, "a").await?.as_deref(), Some("two"));
    eventually("b, which two lacks, is pruned", WAIT, || async {
        Ok(cm_value(&c, &ns, "b").await?.is_none().then_some(()))
    })
    .await?;
    // A new commit does not move it: a sync asked after it stays at two.
    repo.write("apps/a.yaml", &cm("a", "four"))?;
    commits.push(repo.commit("four")?);
    skewer_cli(&["sync", "app/web", "-n", &ns, "--wait", "60s"])?;
    let st = app_status(&c, &ns, "web").await?;
    assert_eq!(
        st.sync.as_ref().and_then(|s| s.revision.clone()),
        Some(format!("sha1:{}", commits[1])),
        "pinned to two's commit"
    );
    assert!(
        ready_message(&st).contains("rolled back to deployment 2"),
        "{}",
        ready_message(&st)
    );
    assert_eq!(cm_value(&c, &ns, "a").await?.as_deref(), Some("two"));
    assert_eq!(
        st.history.last().map(|d| (d.id, d.revision.as_str())),
        Some((4, format!("sha1:{}", commits[1]).as_str()))
    );
    // A change of the sync policy ends the pin: four is applied.
    kc(&[
        "patch",
        "application",
        "web",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"spec":{"syncPolicy":{"automated":{"prune":true,"selfHeal":false}}}}"#,
    ])?;
    wait_app(&c, &ns, "web", "synced at four", at(commits[3].clone())).await?;
    assert_eq!(cm_value(&c, &ns, "a").await?.as_deref(), Some("four"));
    // Pinned again with no ID (the newest success of another revision than the newest's),
    // then `--undo`: back to the source's four.
    let st = app_status(&c, &ns, "web").await?;
    let newest = st
        .history
        .last()
        .map(|d| d.revision.clone())
        .unwrap_or_default();
    let earlier = st
        .history
        .iter()
        .rev()
        .find(|d| d.outcome == "Succeeded" && d.revision != newest)
        .with_context(|| format!("an earlier success: {:#?}", st.history))?;
    let values = ["one", "two", "three", "four"];
    let value = commits
        .iter()
        .position(|c| earlier.revision.ends_with(c.as_str()))
        .map(|i| values[i])
        .context("the earlier revision is one of the commits")?;
    let line = skewer_cli(&["rollback", "app/web", "-n", &ns, "--wait", "60s"])?;
    assert!(
        line.contains(&format!("rolled back to deployment {} ", earlier.id)),
        "{line}"
    );
    assert_eq!(cm_value(&c, &ns, "a").await?.as_deref(), Some(value));
    let line = skewer_cli(&["rollback", "app/web", "--undo", "-n", &ns, "--wait", "60s"])?;
    assert!(line.contains("follows its source again"), "{line}");
    wait_app(
        &c,
        &ns,
        "web",
        "synced at four again",
        at(commits[3].clone()),
    )
    .await?;
    assert_eq!(cm_value(&c, &ns, "a").await?.as_deref(), Some("four"));
    let refused = skewer_cli(&["rollback", "app/web", "1", "-n", &ns]).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("no deployment 1 in status.history"),
        "{refused}"
    );
    Ok(())
}
