//! Issue 3 acceptance: with two replicas only the leader acts; when it dies the follower
//! takes over within the lease duration and heals what drifted meanwhile.

mod common;

use std::time::Duration;

use anyhow::Result;
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use skewer_e2e::{Skewer, eventually, kc};

async fn holder(c: &kube::Client, ns: &str) -> Result<String> {
    let api: Api<Lease> = Api::namespaced(c.clone(), ns);
    Ok(api
        .get("skewer-leader")
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn follower_takes_over_and_heals_the_gap() -> Result<()> {
    let f = Fixture::new("leader").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let flags = ["--lease-duration", "2s"];
    let mut leader = f.app(&f.configmap(), &flags, "").await?;
    assert!(
        holder(&c, &ns)
            .await?
            .ends_with(&format!("-{}", leader.pid()))
    );

    let follower = Skewer::start_with(&ns, &flags)?;
    eventually("the follower to wait for the lease", WAIT, || async {
        Ok(follower
            .logs()
            .contains("waiting to become the leader")
            .then_some(()))
    })
    .await?;
    assert!(
        !follower.logs().contains("skewer running"),
        "the follower started its controllers"
    );

    // The leader dies; drift made in the gap is healed once the follower holds the lease.
    leader.kill()?;
    kc(&["delete", "configmap", "cfg", "-n", &ns])?;
    eventually(
        "the follower to take over and recreate the ConfigMap",
        Duration::from_secs(15),
        || async { Ok(exists(&c, "v1", "ConfigMap", &ns, "cfg").await?.map(|_| ())) },
    )
    .await?;
    assert!(
        holder(&c, &ns)
            .await?
            .ends_with(&format!("-{}", follower.pid()))
    );
    assert!(follower.logs().contains("became the leader"));
    Ok(())
}

/// Issue 23: with leader election on, the API server stops for 30 s. skewer loses its lease,
/// stops writing, keeps running, takes the lease again when the server is back, applies the
/// next commit and heals a deletion.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_server_outage_is_survived_and_the_lease_taken_again() -> Result<()> {
    let cluster = "leader-outage";
    let admin = skewer_e2e::cluster(cluster)?;
    skewer_e2e::install_crds(&admin)?;
    let ns = skewer_e2e::unique("outage");
    skewer_e2e::kc_on(&admin, &["create", "namespace", &ns])?;
    let git = skewer_e2e::GitServer::start()?;
    let repo = git.repo("app")?;
    let cm = |value: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {ns}}}\ndata: {{value: {value}}}\n"
        )
    };
    repo.write("cm.yaml", &cm("one"))?;
    let first = repo.commit("one")?;
    let mut skewer = Skewer::start_on(
        &skewer_e2e::skewer_kubeconfig_of(&admin, None)?,
        &ns,
        &["--lease-duration", "3s"],
    )?;
    skewer_e2e::apply_to(
        &admin,
        &format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1s\n  ref: {{branch: main}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: GitRepository, name: src}}\n  path: ./\n  interval: 1h\n  retryInterval: 2s\n",
            repo.url
        ),
    )?;
    let c = skewer_e2e::client(&admin).await?;
    wait_applied(&c, &ns, "app", &first).await?;

    skewer_e2e::outage(cluster, Duration::from_secs(30))?;
    assert!(skewer.is_running(), "skewer exited:\n{}", skewer.logs());
    let c = skewer_e2e::client(&admin).await?;
    eventually("the lease taken again", WAIT, || async {
        let logs = skewer.logs();
        let stepped_down = logs.contains("no longer the leader: stopped writing");
        let led_again = logs.matches("became the leader").count() >= 2;
        Ok((stepped_down && led_again).then_some(()))
    })
    .await?;
    assert!(
        holder(&c, &ns)
            .await?
            .ends_with(&format!("-{}", skewer.pid()))
    );

    repo.write("cm.yaml", &cm("two"))?;
    let second = repo.commit("two")?;
    wait_applied(&c, &ns, "app", &second).await?;
    skewer_e2e::kc_on(&admin, &["delete", "configmap", "cfg", "-n", &ns])?;
    eventually("the deletion healed", WAIT, || async {
        Ok(exists(&c, "v1", "ConfigMap", &ns, "cfg").await?.map(|_| ()))
    })
    .await?;
    assert!(skewer.is_running(), "skewer exited:\n{}", skewer.logs());
    drop(skewer);
    skewer_e2e::stop_cluster(cluster)?;
    Ok(())
}

/// Issue 29: SIGTERM ends `skewer run` promptly in every state: waiting for its CRDs (which
/// it says once, with what to do), waiting for the lease as a follower, and idle. Before, it
/// was still running 20 s later without CRDs. The bound here is generous, as other tests load
/// the machine; the time each stop took is printed (well under a second on a quiet machine).
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_skewer_promptly_in_every_state() -> Result<()> {
    let admin = skewer_e2e::cluster("no-crds")?;
    // A cluster of its own: without CRDs, even when a run before this one installed them.
    skewer_e2e::kc_on(&admin, &["delete", "crd", "--all"])?;
    let ns = skewer_e2e::unique("stop");
    // SIGTERM, and how long the process took to end.
    fn stop(skewer: &mut Skewer, what: &str) -> Result<()> {
        let asked = std::time::Instant::now();
        skewer.terminate(Duration::from_secs(5))?;
        println!("{what}: ended {:?} after SIGTERM", asked.elapsed());
        Ok(())
    }

    // Until `skewer`'s log says `line`.
    async fn says(skewer: &Skewer, line: &str) -> Result<()> {
        eventually(&format!("skewer to log {line:?}"), WAIT, || async {
            Ok(skewer.logs().contains(line).then_some(()))
        })
        .await
    }
    let mut waiting = Skewer::start_on(&admin, &ns, &[])?;
    says(&waiting, "skewer's CRDs are not installed").await?;
    stop(&mut waiting, "waiting for its CRDs")?;
    let log = waiting.logs();
    assert!(log.contains("run `skewer install`"), "{log}");
    assert!(
        log.contains("missing=gitrepositories, "),
        "names them: {log}"
    );
    assert!(!log.contains('\u{1b}'), "no colour in a log file: {log}");

    // The command line says the same.
    let out = std::process::Command::new(skewer_e2e::skewer_bin())
        .args(["get", "ks", "--kubeconfig"])
        .arg(&admin)
        .env("NO_COLOR", "1")
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("skewer's CRDs are not installed on https://")
            && err.contains("run `skewer install`"),
        "{err}"
    );

    skewer_e2e::install_crds(&admin)?;
    skewer_e2e::kc_on(&admin, &["create", "namespace", &ns])?;
    let flags = ["--leader-elect", "true", "--lease-duration", "15s"];
    let mut leader = Skewer::start_on(&admin, &ns, &flags)?;
    says(&leader, "skewer running").await?;
    let mut follower = Skewer::start_on(&admin, &ns, &flags)?;
    says(&follower, "waiting to become the leader").await?;
    stop(&mut follower, "a follower")?;
    stop(&mut leader, "an idle leader")?;
    assert!(leader.logs().contains("stopped"), "{}", leader.logs());
    Ok(())
}
