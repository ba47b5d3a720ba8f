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
