//! Issue 4 acceptance through the agent: a private repository over SSH with a deploy key from a
//! Secret, and signed commits, where an unsigned commit stops the Kustomization at the last
//! verified revision.

mod common;

use anyhow::Result;
use common::*;
use skewer_api::GitRepository;
use skewer_e2e::git::run;
use skewer_e2e::{GitServer, Signer, eventually, kc_apply};

#[tokio::test(flavor = "multi_thread")]
async fn private_repository_over_ssh_with_a_deploy_key() -> Result<()> {
    let ns = skewer_e2e::namespace("ssh")?;
    let c = client().await;
    let keys = tempfile::tempdir()?;
    let keygen = |name: &str| -> Result<(String, String)> {
        let path = keys.path().join(name).display().to_string();
        run(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-C", name, "-f", &path],
        )?;
        Ok((
            std::fs::read_to_string(&path)?,
            std::fs::read_to_string(format!("{path}.pub"))?,
        ))
    };
    let (deploy, deploy_pub) = keygen("deploy")?;
    let (stranger, _) = keygen("stranger")?;
    let server = GitServer::start_ssh(&deploy_pub)?;
    let repo = server.repo("private")?;
    repo.write(
        "cm.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: {ns}\n"),
    )?;
    let commit = repo.commit("private app")?;
    let known_hosts = server.known_hosts().unwrap_or_default().to_string();
    let deploy_key = |identity: String| {
        let (c, ns, known_hosts) = (c.clone(), ns.clone(), known_hosts.clone());
        async move {
            put_secret(
                &c,
                &ns,
                "deploy-key",
                &[("identity", &identity), ("known_hosts", &known_hosts)],
            )
            .await
        }
    };
    deploy_key(deploy).await?;

    let _skewer = skewer_e2e::Skewer::start_with(&ns, &[])?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1s\n  ref: {{branch: main}}\n  secretRef: {{name: deploy-key}}\n",
        repo.url
    ))?;
    kustomization(&ns, "app", "src", "./", "")?;
    wait_applied(&c, &ns, "app", &commit).await?;
    assert!(exists(&c, "v1", "ConfigMap", &ns, "cfg").await?.is_some());

    // A key the server does not know: a condition that says so; nothing applied is touched.
    deploy_key(stranger).await?;
    let (reason, message) =
        wait_source_condition_of::<GitRepository>(&c, &ns, "src", "Ready", "False", |_, m| {
            m.contains("rejected the key in 'identity'")
        })
        .await?;
    assert_eq!(reason, "AuthenticationFailed");
    assert!(!message.contains("PRIVATE KEY"), "{message}");
    let st = status(&c, &ns, "app").await?;
    assert!(
        st.last_applied_revision
            .is_some_and(|r| r.ends_with(&commit))
    );
    assert!(exists(&c, "v1", "ConfigMap", &ns, "cfg").await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unsigned_commit_stops_at_the_last_verified_revision() -> Result<()> {
    let f = Fixture::new("signed").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let signer = Signer::ssh()?;
    let gpg = Signer::gpg()?;
    put_secret(
        c,
        &ns,
        "trusted",
        &[
            ("ci.sshpub", &signer.public_key),
            ("team.asc", &gpg.public_key),
        ],
    )
    .await?;
    for (path, content) in f.configmap() {
        repo.write(&path, &content)?;
    }
    let signed = repo.commit_signed("signed", &signer)?;
    let _skewer = skewer_e2e::Skewer::start_with(&ns, &[])?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1s\n  ref: {{branch: main}}\n  verify:\n    mode: HEAD\n    secretRef: {{name: trusted}}\n",
        repo.url
    ))?;
    kustomization(
        &ns,
        "app",
        "src",
        "./",
        "  prune: true\n  allowEmpty: true\n",
    )?;
    wait_applied(c, &ns, "app", &signed).await?;
    let message = wait_source_verified::<GitRepository>(c, &ns, "src").await?;
    assert_eq!(
        message,
        format!(
            "verified signature of commit {} by {} (key 'ci.sshpub')",
            &signed[..12],
            signer.fingerprint
        )
    );

    // Unsigned: never stored, never applied, and the ConfigMap it drops is not pruned.
    repo.remove("cm.yaml")?;
    let unsigned = repo.commit("unsigned")?;
    let (reason, message) = wait_source_condition_of::<GitRepository>(
        c,
        &ns,
        "src",
        "SourceVerified",
        "False",
        |_, _| true,
    )
    .await?;
    assert_eq!(reason, "VerificationError");
    assert_eq!(message, format!("commit {} is not signed", &unsigned[..12]));
    let st = source_status::<GitRepository>(c, &ns, "src").await?;
    assert!(
        st.artifact.is_some_and(|a| a.revision.ends_with(&signed)),
        "the artifact stays at the verified revision"
    );
    let st = status(c, &ns, "app").await?;
    assert!(
        st.last_applied_revision
            .is_some_and(|r| r.ends_with(&signed))
    );
    assert!(exists(c, "v1", "ConfigMap", &ns, "cfg").await?.is_some());

    // The next signed commit (by the OpenPGP key) goes through and prunes.
    let next = repo.commit_signed("signed again", &gpg)?;
    wait_applied(c, &ns, "app", &next).await?;
    wait_source_condition_of::<GitRepository>(c, &ns, "src", "SourceVerified", "True", |_, m| {
        m.contains(&gpg.fingerprint)
    })
    .await?;
    assert!(exists(c, "v1", "ConfigMap", &ns, "cfg").await?.is_none());

    // Tag mode: the annotated tag's own signature; a lightweight tag has none to check.
    let source = |tag: &str| {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1s\n  ref: {{tag: {tag}}}\n  verify:\n    mode: Tag\n    secretRef: {{name: trusted}}\n",
            repo.url
        ))
    };
    repo.tag_signed("v1.0.0", &gpg)?;
    source("v1.0.0")?;
    wait_source_condition_of::<GitRepository>(c, &ns, "src", "SourceVerified", "True", |_, m| {
        m == format!(
            "verified signature of tag 'v1.0.0' by {} (key 'team.asc')",
            gpg.fingerprint
        )
    })
    .await?;
    repo.tag_lightweight("v1.0.1")?;
    source("v1.0.1")?;
    wait_source_condition_of::<GitRepository>(c, &ns, "src", "SourceVerified", "False", |_, m| {
        m == "tag 'v1.0.1' is a lightweight tag: only annotated tags carry signatures"
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_request_fetches_now_and_suspend_holds_the_source() -> Result<()> {
    let f = Fixture::new("gitreq").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    repo.write("a.txt", "one\n")?;
    let first = repo.commit("one")?;
    let skewer = skewer_e2e::Skewer::start_with(&ns, &[])?;
    let source = |suspend: bool| {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 1h\n  suspend: {suspend}\n  ref: {{branch: main}}\n",
            repo.url
        ))
    };
    source(false)?;
    let at = |commit: String| {
        let c = c.clone();
        let ns = ns.clone();
        move || {
            let (c, ns, commit) = (c.clone(), ns.clone(), commit.clone());
            async move {
                let st = source_status::<GitRepository>(&c, &ns, "src").await?;
                match st.artifact {
                    Some(a) if a.revision.ends_with(&commit) => {
                        Ok(Some(st.last_handled_reconcile_at))
                    }
                    other => anyhow::bail!("artifact {other:?}"),
                }
            }
        }
    };
    eventually("first artifact", WAIT, at(first.clone())).await?;
    let request = |value: &str| {
        let annotation = format!("skewer.dev/reconcile-requested-at={value}");
        skewer_e2e::kc(&[
            "annotate",
            "--overwrite",
            "-n",
            &ns,
            "gitrepository",
            "src",
            &annotation,
        ])
    };

    // The interval is an hour: only the annotation can fetch the new commit now.
    let second = repo.commit("two")?;
    request("r1")?;
    let handled = eventually("artifact after the request", WAIT, at(second.clone())).await?;
    assert_eq!(handled.as_deref(), Some("r1"));

    // Suspended: a request reaches the reconciler, which leaves the source alone.
    let suspended = || skewer.logs().matches("reconciliation is suspended").count();
    source(true)?;
    eventually("the suspended reconcile", WAIT, || async {
        Ok((suspended() >= 1).then_some(()))
    })
    .await?;
    let third = repo.commit("three")?;
    request("r2")?;
    eventually(
        "the request to reach the suspended source",
        WAIT,
        || async { Ok((suspended() >= 2).then_some(())) },
    )
    .await?;
    let st = source_status::<GitRepository>(c, &ns, "src").await?;
    assert!(st.artifact.is_some_and(|a| a.revision.ends_with(&second)));
    assert_eq!(st.last_handled_reconcile_at.as_deref(), Some("r1"));
    source(false)?;
    let handled = eventually("artifact after resuming", WAIT, at(third)).await?;
    assert_eq!(handled.as_deref(), Some("r2"));
    Ok(())
}
