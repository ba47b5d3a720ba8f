//! Issue 23 acceptance, tenants stay in their lane: a cluster Secret says which namespaces may
//! deploy with its credentials, a tenant's refused apply claims nothing, and a Receiver reaches
//! only its own namespace. One skewer per test watches every namespace for objects labeled
//! with the test's shard, so the tenants' namespaces are real and apart.

mod common;

use anyhow::{Context as _, Result};
use common::spokes::*;
use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use skewer_api::{Application, Receiver};
use skewer_e2e::{Skewer, eventually, kc, kc_apply, unique};

/// A Kustomization of `path` of GitRepository `home/src`, labeled for skewer's shard.
fn shard_kustomization(ns: &str, name: &str, home: &str, path: &str, extra: &str) -> Result<()> {
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: {name}, namespace: {ns}, labels: {{shard: {home}}}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: src, namespace: {home}}}\n  path: {path}\n  interval: 1m\n  retryInterval: 2s\n  prune: true\n{extra}"
    ))
}

async fn value_on(c: &kube::Client, ns: &str) -> Result<Option<String>> {
    Ok(Api::<ConfigMap>::namespaced(c.clone(), ns)
        .get_opt("cfg")
        .await?
        .and_then(|cm| cm.data)
        .and_then(|d| d.get("value").cloned()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_takes_deployments_only_from_the_namespaces_it_allows() -> Result<()> {
    let (spoke, _) = spokes();
    let on_spoke = skewer_e2e::client(spoke).await?;
    let c = client().await;
    let home = skewer_e2e::namespace("tenancy")?;
    let (team_a, team_b) = (
        skewer_e2e::namespace("team-a")?,
        skewer_e2e::namespace("team-b")?,
    );
    // What each deployment would create on the spoke: a namespace of its own.
    let [for_a, for_b, for_b_app, for_default_a, for_home] =
        ["mine", "squat", "squat-app", "other", "home"].map(unique);
    let git = skewer_e2e::GitServer::start()?;
    let repo = git.repo("fleet")?;
    for (dir, ns) in [
        ("a", &for_a),
        ("b", &for_b),
        ("b-app", &for_b_app),
        ("default-a", &for_default_a),
        ("home", &for_home),
    ] {
        repo.write(
            &format!("{dir}/all.yaml"),
            &namespace_and_configmap(ns, dir),
        )?;
    }
    let commit = repo.commit("fleet")?;
    let _skewer = Skewer::start_cluster_wide(&format!("shard={home}"), &home, &[])?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {home}, labels: {{shard: {home}}}}}\nspec: {{url: \"{}\", interval: 1h, ref: {{branch: main}}}}\n",
        repo.url
    ))?;

    // One spoke registered twice: allowing team-a, and with no annotation (its own namespace).
    let token = admin_token(spoke, &unique("platform")).await?;
    let (allowing, by_default) = (unique("spoke-team-a"), unique("spoke-default"));
    token_secret_allowing(&home, &allowing, spoke, &token, Some(&team_a))?;
    token_secret(&home, &by_default, spoke, &token)?;

    let cluster = |name: &str| format!("  cluster: {name}\n");
    shard_kustomization(&team_a, "fleet", &home, "./a", &cluster(&allowing))?;
    shard_kustomization(&team_b, "fleet", &home, "./b", &cluster(&allowing))?;
    shard_kustomization(
        &team_a,
        "other",
        &home,
        "./default-a",
        &cluster(&by_default),
    )?;
    shard_kustomization(&home, "fleet", &home, "./home", &cluster(&by_default))?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: fleet, namespace: {team_b}, labels: {{shard: {home}}}}}\nspec:\n  project: default\n  source: {{repoURL: \"{}\", targetRevision: main, path: b-app}}\n  destination: {{name: {allowing}}}\n  syncPolicy: {{automated: {{prune: true}}}}\n",
        repo.url
    ))?;

    // Allowed: applied there.
    wait_applied(&c, &team_a, "fleet", &commit).await?;
    wait_applied(&c, &home, "fleet", &commit).await?;
    assert_eq!(value_on(&on_spoke, &for_a).await?.as_deref(), Some("a"));
    assert_eq!(
        value_on(&on_spoke, &for_home).await?.as_deref(),
        Some("home")
    );

    // Refused before anything is sent, naming the cluster and the namespace.
    let st = wait_failed(&c, &team_b, "fleet", |reason, _| reason == "AccessDenied").await?;
    let (_, _, message) = ready(&st).context("Ready")?;
    assert!(
        message.contains(&format!("cluster '{allowing}'"))
            && message.contains(&format!("namespace '{team_b}'"))
            && message.contains(&format!("allows {team_a}")),
        "{message}"
    );
    let st = wait_failed(&c, &team_a, "other", |reason, _| reason == "AccessDenied").await?;
    let (_, _, message) = ready(&st).context("Ready")?;
    assert!(
        message.contains(&format!("allows {home}")),
        "the default is the Secrets' own namespace: {message}"
    );
    let apps: Api<Application> = Api::namespaced(c.clone(), &team_b);
    let app_message = eventually("team-b's Application refused", WAIT, || async {
        let st = apps.get("fleet").await?.status.unwrap_or_default();
        Ok(st
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "False" && c.reason == "AccessDenied")
            .map(|c| c.message.clone()))
    })
    .await?;
    assert!(
        app_message.contains(&format!("namespace '{team_b}'")),
        "{app_message}"
    );

    // Checked on the spoke itself: nothing of the refused ones, and nothing in their status.
    for ns in [&for_b, &for_b_app, &for_default_a] {
        let found = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(on_spoke.clone())
            .get_opt(ns)
            .await?;
        assert!(found.is_none(), "{ns} was created on the spoke");
    }
    assert!(inventory_ids(&status(&c, &team_b, "fleet").await?).is_empty());

    // The platform widens the Secret: team-b's Kustomization goes through without a change.
    token_secret_allowing(
        &home,
        &allowing,
        spoke,
        &token,
        Some(&format!("{team_a}, team-b-*")),
    )?;
    wait_applied(&c, &team_b, "fleet", &commit).await?;
    assert_eq!(value_on(&on_spoke, &for_b).await?.as_deref(), Some("b"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_without_rights_cannot_squat_a_platform_object() -> Result<()> {
    let c = client().await;
    let home = skewer_e2e::namespace("platform")?;
    let team = skewer_e2e::namespace("squatter")?;
    // A ServiceAccount with no rights at all.
    kc(&["create", "serviceaccount", "nobody", "-n", &team])?;
    let target = unique("platform-config");
    let git = skewer_e2e::GitServer::start()?;
    let repo = git.repo("squat")?;
    let cm = |value: &str, annotations: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {target}\n  namespace: kube-system\n{annotations}data: {{value: {value}}}\n"
        )
    };
    repo.write("platform/cm.yaml", &cm("platform", ""))?;
    repo.write("plain/cm.yaml", &cm("tenant", ""))?;
    repo.write(
        "takeover/cm.yaml",
        &cm("tenant", "  annotations: {skewer.dev/takeover: enabled}\n"),
    )?;
    let commit = repo.commit("squat")?;
    let _skewer = Skewer::start_cluster_wide(&format!("shard={home}"), &home, &[])?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {home}, labels: {{shard: {home}}}}}\nspec: {{url: \"{}\", interval: 1h, ref: {{branch: main}}}}\n",
        repo.url
    ))?;
    let as_nobody = "  serviceAccountName: nobody\n";

    // The tenant names the object first, before the platform has applied it.
    shard_kustomization(&team, "plain", &home, "./plain", as_nobody)?;
    wait_failed(&c, &team, "plain", |_, msg| msg.contains("forbidden")).await?;
    shard_kustomization(&home, "platform", &home, "./platform", "")?;
    wait_applied(&c, &home, "platform", &commit).await?;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "kube-system");
    let value = || async {
        Ok::<_, anyhow::Error>(
            cms.get_opt(&target)
                .await?
                .and_then(|m| m.data)
                .and_then(|d| d.get("value").cloned()),
        )
    };
    assert_eq!(value().await?.as_deref(), Some("platform"));

    // Then with the takeover annotation, while the platform holds it.
    shard_kustomization(&team, "takeover", &home, "./takeover", as_nobody)?;
    wait_failed(&c, &team, "takeover", |_, msg| msg.contains("forbidden")).await?;
    for name in ["plain", "takeover"] {
        let ids = inventory_ids(&status(&c, &team, name).await?);
        assert!(
            ids.is_empty(),
            "{name} holds what it could not write: {ids:?}"
        );
    }

    // The platform's Kustomization stays Ready through a requested reconcile (which checks
    // its claims again) and keeps healing the object.
    for round in ["after-plain", "after-takeover"] {
        kc(&[
            "annotate",
            "--overwrite",
            "kustomization",
            "platform",
            "-n",
            &home,
            &format!("skewer.dev/reconcile-requested-at={round}"),
        ])?;
        eventually("the platform's reconcile handled, Ready", WAIT, || async {
            let st = status(&c, &home, "platform").await?;
            let handled = st.last_handled_reconcile_at.as_deref() == Some(round);
            match ready(&st) {
                Some(("True", _, _)) if handled => Ok(Some(())),
                other => anyhow::bail!("{other:?}"),
            }
        })
        .await?;
        cms.delete(&target, &Default::default()).await?;
        eventually("the platform's object healed", WAIT, || async {
            Ok((value().await?.as_deref() == Some("platform")).then_some(()))
        })
        .await?;
    }
    let (_, reason, message) = ready(&status(&c, &home, "platform").await?)
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .context("Ready")?;
    assert!(!message.contains("is applied by"), "{reason}: {message}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_reaches_only_its_own_namespace() -> Result<()> {
    let c = client().await;
    let home = skewer_e2e::namespace("rcv-platform")?;
    let team = skewer_e2e::namespace("rcv-team")?;
    let _skewer = Skewer::start_cluster_wide(&format!("shard={home}"), &home, &[])?;
    kc(&[
        "create",
        "secret",
        "generic",
        "token",
        "-n",
        &team,
        "--from-literal=token=t0ken",
    ])?;
    let receiver = |name: &str, resources: &str| {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Receiver\nmetadata: {{name: {name}, namespace: {team}, labels: {{shard: {home}}}}}\nspec:\n  type: generic\n  secretRef: {{name: token}}\n  resources: {resources}\n"
        ))
    };
    receiver(
        "reach",
        &format!("[{{kind: Kustomization, name: platform, namespace: {home}}}]"),
    )?;
    receiver("own", "[{kind: Kustomization, name: app}]")?;
    let api: Api<Receiver> = Api::namespaced(c.clone(), &team);
    let own = eventually("the Receiver of its own namespace ready", WAIT, || async {
        Ok(api.get("own").await?.status.and_then(|s| s.webhook_path))
    })
    .await?;
    assert!(own.starts_with("/hook/"));
    let refused = eventually("the reaching Receiver refused", WAIT, || async {
        let st = api.get("reach").await?.status.unwrap_or_default();
        Ok(st
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready" && c.status == "False")
            .map(|c| (c.reason.clone(), c.message.clone(), st.webhook_path.clone())))
    })
    .await?;
    assert_eq!(refused.0, "AccessDenied", "{refused:?}");
    assert!(
        refused.1.starts_with("spec.resources[0].namespace: ")
            && refused.1.contains("--cross-namespace-receivers"),
        "{refused:?}"
    );
    assert!(refused.2.is_none(), "no path is served for it");
    Ok(())
}
