//! Issue 26 acceptance: ApplicationSets over clusters discovered from Secrets in the shape
//! policy engines write for virtual clusters, a git directories × clusters matrix, and a
//! RollingSync across three real API servers (the hub and two spokes, registered as dev,
//! staging and prod).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use common::apps::*;
use common::spokes::*;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use skewer_api::{Application, ApplicationSet, ApplicationSetStatus};
use skewer_e2e::{eventually, kc, kc_apply, unique};

async fn set_status(c: &kube::Client, ns: &str, name: &str) -> Result<ApplicationSetStatus> {
    let api: Api<ApplicationSet> = Api::namespaced(c.clone(), ns);
    Ok(api.get(name).await?.status.unwrap_or_default())
}

fn condition(st: &ApplicationSetStatus, type_: &str) -> String {
    st.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| format!("{} {} {}", c.status, c.reason, c.message))
        .unwrap_or_default()
}

/// The Applications of `ns`, by name.
async fn applications(c: &kube::Client, ns: &str) -> Result<BTreeMap<String, Application>> {
    let api: Api<Application> = Api::namespaced(c.clone(), ns);
    Ok(api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|a| (a.metadata.name.clone().unwrap_or_default(), a))
        .collect())
}

async fn value_on(cluster: &Path, ns: &str, name: &str) -> Result<Option<String>> {
    let c = skewer_e2e::client(cluster).await?;
    let api: Api<ConfigMap> = Api::namespaced(c, ns);
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|m| m.data)
        .and_then(|d| d.get("value").cloned()))
}

async fn wait_value(cluster: &Path, ns: &str, name: &str, value: &str) -> Result<()> {
    eventually(
        &format!("ConfigMap {ns}/{name} = {value} on {}", cluster.display()),
        WAIT,
        || async {
            Ok((value_on(cluster, ns, name).await?.as_deref() == Some(value)).then_some(()))
        },
    )
    .await
}

/// An ApplicationSet `name` in `ns` with `generators` and `template` (YAML, indented to sit
/// under `spec:`), and `extra` spec fields.
fn application_set(ns: &str, name: &str, body: &str) -> Result<()> {
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: ApplicationSet\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n{body}"
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clusters_generator_follows_the_cluster_secrets_labels() -> Result<()> {
    let (a, b) = spokes();
    let f = Fixture::new("appset").await?;
    let dest = format!("{}-dest", f.ns);
    f.repo.write("app/cm.yaml", &cm("fleet", "one"))?;
    f.repo.commit("app")?;
    let _skewer = skewer_e2e::Skewer::start(&f.ns)?;
    let (name_a, name_b, name_c) = (unique("dev-a"), unique("dev-b"), unique("other"));
    vcluster_secret(
        &f.ns,
        &name_a,
        a,
        "env: dev, team: team-a, clusterType: vcluster",
        None,
    )?;
    vcluster_secret(
        &f.ns,
        &name_b,
        b,
        "env: test, team: team-a, clusterType: vcluster",
        None,
    )?;
    // Registered for another namespace only: this ApplicationSet may not deploy there.
    vcluster_secret(
        &f.ns,
        &name_c,
        skewer_e2e::hub(),
        "env: dev, team: team-b",
        Some("team-b-*"),
    )?;
    application_set(
        &f.ns,
        "fleet",
        &format!(
            r#"  generators:
  - clusters:
      selector: {{matchLabels: {{env: dev}}}}
      values: {{team: '{{{{metadata.labels.team}}}}'}}
  template:
    metadata:
      name: '{{{{name}}}}-web'
      labels: {{team: '{{{{values.team}}}}'}}
    spec:
      project: default
      source: {{repoURL: '{url}', targetRevision: main, path: app}}
      destination: {{server: '{{{{server}}}}', namespace: {dest}}}
      syncPolicy:
        automated: {{prune: true, selfHeal: true}}
        syncOptions: [CreateNamespace=true]
"#,
            url = f.repo.url
        ),
    )?;
    let app_a = format!("{name_a}-web");
    wait_app(&f.c, &f.ns, &app_a, "Synced and Healthy", synced_healthy).await?;
    wait_value(a, &dest, "fleet", "one").await?;
    let apps = applications(&f.c, &f.ns).await?;
    assert_eq!(
        apps.keys().collect::<Vec<_>>(),
        [&app_a],
        "only the dev cluster"
    );
    assert_eq!(
        apps[&app_a].metadata.labels.as_ref().unwrap()["team"],
        "team-a"
    );
    assert_eq!(
        value_on(b, &dest, "fleet").await?,
        None,
        "nothing on the test spoke"
    );
    let st = set_status(&f.c, &f.ns, "fleet").await?;
    let ready = condition(&st, "Ready");
    assert!(
        ready.contains(&format!("cluster '{name_c}'"))
            && ready.contains("does not allow namespace"),
        "the refused cluster is named: {ready}"
    );
    assert!(
        condition(&st, "ParametersGenerated").starts_with("True"),
        "{st:?}"
    );

    // Relabeled as dev: its Application follows, within seconds.
    let started = std::time::Instant::now();
    kc(&[
        "label",
        "secret",
        &format!("vcluster-{name_b}"),
        "-n",
        &f.ns,
        "env=dev",
        "--overwrite",
    ])?;
    let app_b = format!("{name_b}-web");
    wait_app(&f.c, &f.ns, &app_b, "Synced and Healthy", synced_healthy).await?;
    wait_value(b, &dest, "fleet", "one").await?;
    println!("relabeled cluster synced in {:?}", started.elapsed());

    // A Secret deleted: its Application goes, nothing is left hanging, the other spoke keeps
    // its objects, and what the gone cluster holds is not touched.
    kc(&[
        "delete",
        "secret",
        &format!("vcluster-{name_a}"),
        "-n",
        &f.ns,
    ])?;
    eventually("the deleted cluster's Application to go", WAIT, || async {
        Ok((!applications(&f.c, &f.ns).await?.contains_key(&app_a)).then_some(()))
    })
    .await?;
    assert_eq!(
        value_on(a, &dest, "fleet").await?.as_deref(),
        Some("one"),
        "left as it was"
    );
    let warned = event_reasons(&f.ns, &format!("involvedObject.name={app_a},type=Warning"))?;
    assert!(
        warned.contains("PruneFailed"),
        "a Warning says nothing was pruned: {warned}"
    );
    assert_eq!(value_on(b, &dest, "fleet").await?.as_deref(), Some("one"));
    synced_healthy(&app_status(&f.c, &f.ns, &app_b).await?)?;
    let st = set_status(&f.c, &f.ns, "fleet").await?;
    let listed: Vec<&str> = st.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(listed, [app_b.as_str()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_matrix_of_git_directories_and_clusters_deploys_each_pair() -> Result<()> {
    let (a, b) = spokes();
    let f = Fixture::new("matrix").await?;
    let dest = format!("{}-dest", f.ns);
    for dir in ["web", "api", "legacy"] {
        f.repo
            .write(&format!("apps/{dir}/cm.yaml"), &cm(dir, dir))?;
    }
    f.repo.commit("apps")?;
    let _skewer = skewer_e2e::Skewer::start(&f.ns)?;
    let (name_a, name_b) = (unique("a"), unique("b"));
    let fleet = unique("fleet");
    for (name, spoke) in [(&name_a, a), (&name_b, b)] {
        vcluster_secret(&f.ns, name, spoke, &format!("fleet: {fleet}"), None)?;
    }
    application_set(
        &f.ns,
        "pairs",
        &format!(
            r#"  generators:
  - matrix:
      generators:
      - git:
          repoURL: '{url}'
          revision: main
          directories: [{{path: 'apps/*'}}, {{path: apps/legacy, exclude: true}}]
      - clusters: {{selector: {{matchLabels: {{fleet: {fleet}}}}}}}
  template:
    metadata: {{name: '{{{{path.basename}}}}-{{{{name}}}}'}}
    spec:
      source: {{repoURL: '{url}', targetRevision: main, path: '{{{{path}}}}'}}
      destination: {{name: '{{{{name}}}}', namespace: {dest}}}
      syncPolicy:
        automated: {{prune: true}}
        syncOptions: [CreateNamespace=true]
"#,
            url = f.repo.url
        ),
    )?;
    let mut want = Vec::new();
    for dir in ["api", "web"] {
        for (name, spoke) in [(&name_a, a), (&name_b, b)] {
            let app = format!("{dir}-{name}");
            wait_app(&f.c, &f.ns, &app, "Synced and Healthy", synced_healthy).await?;
            wait_value(spoke, &dest, dir, dir).await?;
            want.push(app);
        }
    }
    want.sort();
    let have: Vec<String> = applications(&f.c, &f.ns).await?.into_keys().collect();
    assert_eq!(
        have, want,
        "one Application per (directory, cluster), legacy excluded"
    );
    for spoke in [a, b] {
        assert_eq!(value_on(spoke, &dest, "legacy").await?, None);
    }

    // The command line: the set's row counts its Applications, its tree holds them and their
    // objects.
    let rows: Vec<serde_json::Value> =
        eventually("get applicationsets to count 4 synced", WAIT, || async {
            let rows: Vec<serde_json::Value> = serde_json::from_str(&skewer_cli(&[
                "get",
                "applicationsets",
                "-n",
                &f.ns,
                "-o",
                "json",
            ])?)?;
            Ok((rows
                .first()
                .is_some_and(|r| r["synced"] == 4 && r["healthy"] == 4))
            .then_some(rows))
        })
        .await?;
    assert_eq!(rows[0]["name"], "pairs");
    assert_eq!(rows[0]["applications"], 4);
    let table = skewer_cli(&["get", "appsets", "-n", &f.ns])?;
    assert!(
        table.starts_with("NAME   READY  APPS  SYNCED  HEALTHY"),
        "{table}"
    );
    let tree = skewer_cli(&["tree", "appset/pairs", "-n", &f.ns])?;
    assert!(
        tree.starts_with(&format!("ApplicationSet/{}/pairs  Ready", f.ns)),
        "{tree}"
    );
    for app in &want {
        assert!(
            tree.contains(&format!("Application/{}/{app}  Ready", f.ns)),
            "{app}: {tree}"
        );
    }
    // The objects are on the spokes, which `tree` does not read yet: listed, not judged.
    assert!(tree.contains(&format!("ConfigMap/{dest}/web  ")), "{tree}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_sync_reaches_each_step_only_after_the_one_before_is_healthy() -> Result<()> {
    let (a, b) = spokes();
    let hub = skewer_e2e::hub();
    let f = Fixture::new("rollout").await?;
    let dest = format!("{}-dest", f.ns);
    f.repo.write("app/cm.yaml", &cm("fleet", "one"))?;
    let first = f.repo.commit("one")?;
    let _skewer = skewer_e2e::Skewer::start(&f.ns)?;
    let rollout = unique("r");
    let names: Vec<(String, &Path)> = [("dev", hub), ("staging", a), ("prod", b)]
        .into_iter()
        .map(|(env, kc)| (format!("{env}-{rollout}"), kc))
        .collect();
    for ((name, kc), env) in names.iter().zip(["dev", "staging", "prod"]) {
        vcluster_secret(
            &f.ns,
            name,
            kc,
            &format!("rollout: {rollout}, env: {env}"),
            None,
        )?;
    }
    application_set(
        &f.ns,
        "waves",
        &format!(
            r#"  generators:
  - clusters: {{selector: {{matchLabels: {{rollout: {rollout}}}}}}}
  strategy:
    type: RollingSync
    rollingSync:
      steps:
      - matchExpressions: [{{key: env, operator: In, values: [dev]}}]
      - matchExpressions: [{{key: env, operator: In, values: [staging]}}]
      - matchExpressions: [{{key: env, operator: In, values: [prod]}}]
        maxUpdate: 100%
  template:
    metadata:
      name: 'web-{{{{name}}}}'
      labels: {{env: '{{{{metadata.labels.env}}}}'}}
    spec:
      source: {{repoURL: '{url}', targetRevision: main, path: app}}
      destination: {{name: '{{{{name}}}}', namespace: {dest}}}
      interval: 1s
      syncPolicy:
        automated: {{prune: true}}
        syncOptions: [CreateNamespace=true]
"#,
            url = f.repo.url
        ),
    )?;
    let apps: Vec<String> = names.iter().map(|(n, _)| format!("web-{n}")).collect();

    // Every snapshot while the first revision rolls out: a step synced only after the one
    // before it is Synced and Healthy at that revision.
    let at = |st: &skewer_api::ApplicationStatus, rev: &str| {
        st.operation_state
            .as_ref()
            .and_then(|o| o.sync_result.as_ref())
            .is_some_and(|r| r.revision.ends_with(rev))
    };
    // Read from the last step back: a step seen synced is read before the one before it, which
    // (ConfigMaps only, healthy once applied) stays synced and healthy once it is.
    let violations = std::sync::Mutex::new(Vec::new());
    eventually("the first revision everywhere, in order", WAIT, || async {
        let mut done = Vec::new();
        for app in apps.iter().rev() {
            let st = app_status(&f.c, &f.ns, app).await?;
            done.push((at(&st, &first), synced_healthy(&st).is_ok()));
        }
        done.reverse();
        for i in 1..done.len() {
            if done[i].0 && !(done[i - 1].0 && done[i - 1].1) {
                let seen = format!(
                    "{} synced before {} was healthy: {done:?}",
                    apps[i],
                    apps[i - 1]
                );
                violations
                    .lock()
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .push(seen);
            }
        }
        Ok(done.iter().all(|(s, h)| *s && *h).then_some(()))
    })
    .await?;
    let violations = violations
        .into_inner()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert!(violations.is_empty(), "{violations:?}");
    for (_, kc) in &names {
        wait_value(kc, &dest, "fleet", "one").await?;
    }

    // A commit whose Deployment never becomes available: dev takes it, and stays Progressing;
    // staging and prod wait, and the ApplicationSet says for whom.
    f.repo.write("app/cm.yaml", &cm("fleet", "two"))?;
    f.repo.write(
        "app/deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: 'registry.invalid/web:1'}]}\n",
    )?;
    let second = f.repo.commit("two")?;
    wait_value(hub, &dest, "fleet", "two").await?;
    let (dev, staging) = (&apps[0], &apps[1]);
    let st = eventually("the rollout to wait on dev", WAIT, || async {
        let st = set_status(&f.c, &f.ns, "waves").await?;
        let waiting = st
            .application_status
            .iter()
            .find(|e| &e.application == staging)
            .is_some_and(|e| e.status == "Waiting" && e.message.contains(dev.as_str()));
        Ok(waiting.then_some(st))
    })
    .await?;
    let progressing = condition(&st, "RolloutProgressing");
    assert!(
        progressing.starts_with("True") && progressing.contains(dev.as_str()),
        "the status names the Application holding the rollout: {progressing}"
    );
    // However long it is left, staging does not move.
    let moved = eventually(
        "staging to take the second revision (it must not)",
        std::time::Duration::from_secs(8),
        || async {
            let st = app_status(&f.c, &f.ns, staging).await?;
            Ok(
                (at(&st, &second) || value_on(a, &dest, "fleet").await?.as_deref() == Some("two"))
                    .then_some(()),
            )
        },
    )
    .await;
    assert!(moved.is_err(), "staging synced while dev was not healthy");
    assert_eq!(value_on(b, &dest, "fleet").await?.as_deref(), Some("one"));

    // The fix: the Deployment scaled to nothing is healthy, and the fix rolls through.
    f.repo.write("app/cm.yaml", &cm("fleet", "three"))?;
    f.repo.write(
        "app/deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 0\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: 'registry.invalid/web:1'}]}\n",
    )?;
    f.repo.commit("three")?;
    for (_, kc) in &names {
        wait_value(kc, &dest, "fleet", "three").await?;
    }
    for app in &apps {
        wait_app(&f.c, &f.ns, app, "Synced and Healthy", synced_healthy).await?;
    }
    let st = eventually("the rollout to complete", WAIT, || async {
        let st = set_status(&f.c, &f.ns, "waves").await?;
        Ok(condition(&st, "RolloutProgressing")
            .starts_with("False ApplicationSetRolloutComplete")
            .then_some(st))
    })
    .await?;
    let steps: Vec<(&str, &str)> = st
        .application_status
        .iter()
        .map(|e| (e.application.as_str(), e.step.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            (apps[0].as_str(), "1"),
            (apps[1].as_str(), "2"),
            (apps[2].as_str(), "3")
        ]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn go_templates_lists_and_refusals() -> Result<()> {
    let f = Fixture::new("gotpl").await?;
    f.repo.write("app/cm.yaml", &cm("one", "x"))?;
    f.repo.commit("app")?;
    let _skewer = skewer_e2e::Skewer::start(&f.ns)?;
    // The set, over the elements of `teams` (name → namespace suffix).
    let listed = |teams: &[&str]| {
        let elements: String = teams
            .iter()
            .map(|t| format!("      - {{name: {t}, ns: {}-{}}}\n", f.ns, t.to_lowercase()))
            .collect();
        application_set(
            &f.ns,
            "listed",
            &format!(
                r#"  goTemplate: true
  goTemplateOptions: [missingkey=error]
  generators:
  - list:
      elements:
{elements}  template:
    metadata:
      name: '{{{{ .name | lower }}}}'
      annotations: {{who: '{{{{ printf "%s/%s" .ns .name }}}}'}}
    spec:
      source: {{repoURL: '{url}', targetRevision: main, path: app}}
      destination: {{name: in-cluster, namespace: '{{{{ .ns }}}}'}}
      syncPolicy:
        automated: {{prune: true}}
        syncOptions: [CreateNamespace=true]
"#,
                url = f.repo.url
            ),
        )
    };
    listed(&["Alpha", "Beta"])?;
    for (app, dest) in [("alpha", "alpha"), ("beta", "beta")] {
        wait_app(&f.c, &f.ns, app, "Synced and Healthy", synced_healthy).await?;
        assert_eq!(
            cm_value(&f.c, &format!("{}-{dest}", f.ns), "one")
                .await?
                .as_deref(),
            Some("x")
        );
    }
    let apps = applications(&f.c, &f.ns).await?;
    assert_eq!(
        apps["alpha"].metadata.annotations.as_ref().unwrap()["who"],
        format!("{}-alpha/Alpha", f.ns)
    );

    // Taking an element out deletes its Application, which prunes what it applied.
    listed(&["Alpha"])?;
    eventually(
        "beta's Application and its ConfigMap to go",
        WAIT,
        || async {
            let gone = !applications(&f.c, &f.ns).await?.contains_key("beta")
                && cm_value(&f.c, &format!("{}-beta", f.ns), "one")
                    .await?
                    .is_none();
            Ok(gone.then_some(()))
        },
    )
    .await?;

    // A hand-made Application of the same name is never taken over; two sets rendering one
    // name and a function skewer does not have are errors naming them.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: mine, namespace: {ns}}}\nspec:\n  source: {{repoURL: '{url}', path: app}}\n  destination: {{name: in-cluster, namespace: {ns}}}\n",
        ns = f.ns,
        url = f.repo.url
    ))?;
    for (name, body, says) in [
        (
            "taker",
            format!("  generators: [{{list: {{elements: [{{app: mine}}]}}}}]\n  template:\n    metadata: {{name: '{{{{app}}}}'}}\n    spec: {{source: {{repoURL: '{}'}}, destination: {{name: in-cluster}}}}\n", f.repo.url),
            "Application 'mine' exists and was not generated by this ApplicationSet",
        ),
        (
            "twice",
            format!("  generators: [{{list: {{elements: [{{app: a}}, {{app: b}}]}}}}]\n  template:\n    metadata: {{name: same}}\n    spec: {{source: {{repoURL: '{}'}}, destination: {{name: in-cluster}}}}\n", f.repo.url),
            "2 parameter sets generate Application 'same'",
        ),
        (
            "func",
            format!("  goTemplate: true\n  generators: [{{list: {{elements: [{{app: a}}]}}}}]\n  template:\n    metadata: {{name: '{{{{ .app | env }}}}'}}\n    spec: {{source: {{repoURL: '{}'}}, destination: {{name: in-cluster}}}}\n", f.repo.url),
            "function 'env' is not supported",
        ),
        (
            "scm",
            "  generators: [{scmProvider: {github: {organization: x}}}]\n  template:\n    metadata: {name: x}\n    spec: {source: {repoURL: r}, destination: {name: in-cluster}}\n".to_string(),
            "spec.generators[0].scmProvider: the scmProvider generator is not supported",
        ),
    ] {
        application_set(&f.ns, name, &body)?;
        let ready = eventually(&format!("ApplicationSet {name} to refuse"), WAIT, || async {
            let r = condition(&set_status(&f.c, &f.ns, name).await?, "Ready");
            Ok(r.starts_with("False").then_some(r))
        })
        .await?;
        assert!(ready.contains(says), "{name}: {ready}");
    }
    let apps = applications(&f.c, &f.ns).await?;
    assert!(
        !apps.contains_key("same"),
        "neither of two clashing sets is applied"
    );
    let mine = &apps["mine"];
    assert!(
        mine.metadata
            .owner_references
            .as_ref()
            .is_none_or(|o| o.is_empty()),
        "the hand-made Application was not taken over: {:?}",
        mine.metadata
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_an_application_set_with_preserve_keeps_what_was_applied() -> Result<()> {
    let f = Fixture::new("preserve").await?;
    let dest = format!("{}-kept", f.ns);
    f.repo.write("app/cm.yaml", &cm("kept", "yes"))?;
    f.repo.commit("app")?;
    let _skewer = skewer_e2e::Skewer::start(&f.ns)?;
    application_set(
        &f.ns,
        "keep",
        &format!(
            r#"  syncPolicy: {{preserveResourcesOnDeletion: true}}
  generators: [{{list: {{elements: [{{app: kept}}]}}}}]
  template:
    metadata: {{name: '{{{{app}}}}'}}
    spec:
      source: {{repoURL: '{url}', targetRevision: main, path: app}}
      destination: {{name: in-cluster, namespace: {dest}}}
      syncPolicy:
        automated: {{prune: true}}
        syncOptions: [CreateNamespace=true]
"#,
            url = f.repo.url
        ),
    )?;
    wait_app(&f.c, &f.ns, "kept", "Synced and Healthy", synced_healthy).await?;
    kc(&["delete", "applicationset", "keep", "-n", &f.ns])?;
    eventually(
        "the garbage collector to delete the Application",
        WAIT,
        || async { Ok((!applications(&f.c, &f.ns).await?.contains_key("kept")).then_some(())) },
    )
    .await?;
    assert_eq!(
        cm_value(&f.c, &dest, "kept").await?.as_deref(),
        Some("yes"),
        "preserveResourcesOnDeletion leaves what the Application applied"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_argo_cd_application_set_moves_over_with_skewer_migrate() -> Result<()> {
    let f = Fixture::new("appset-migrate").await?;
    f.repo.write("app/cm.yaml", &cm("moved", "yes"))?;
    f.repo.commit("app")?;
    let _skewer = skewer_e2e::Skewer::start(&f.ns)?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("appset.yaml");
    std::fs::write(
        &file,
        format!(
            r#"apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {{name: moved, namespace: {ns}}}
spec:
  goTemplate: true
  goTemplateOptions: ["missingkey=error"]
  generators:
  - list:
      elements: [{{team: one}}]
  template:
    metadata: {{name: 'moved-{{{{ .team }}}}'}}
    spec:
      project: default
      source: {{repoURL: '{url}', targetRevision: main, path: app}}
      destination: {{server: https://kubernetes.default.svc, namespace: '{ns}-{{{{ .team }}}}'}}
      syncPolicy:
        automated: {{prune: true, selfHeal: true}}
        syncOptions: [CreateNamespace=true]
"#,
            ns = f.ns,
            url = f.repo.url
        ),
    )?;
    let out = std::process::Command::new(skewer_e2e::skewer_bin())
        .env("KUBECONFIG", skewer_e2e::hub())
        .args(["migrate", "-f"])
        .arg(&file)
        .output()?;
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(report.contains("carried whole"), "{report}");
    let yaml = String::from_utf8(out.stdout)?;
    assert!(yaml.contains("apiVersion: skewer.dev/v1alpha1"), "{yaml}");
    kc_apply(&yaml)?;
    wait_app(
        &f.c,
        &f.ns,
        "moved-one",
        "Synced and Healthy",
        synced_healthy,
    )
    .await?;
    assert_eq!(
        cm_value(&f.c, &format!("{}-one", f.ns), "moved")
            .await?
            .as_deref(),
        Some("yes")
    );
    Ok(())
}
