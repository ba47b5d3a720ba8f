//! The Git source against real servers on loopback: git daemon (`git://`), smart HTTP
//! (`git http-backend`), and `file://`.

use anyhow::Result;
use skewer_e2e::{GitServer, HttpOptions, Repo, Signer};
use skewer_sources::{
    Access, Auth, GitFetcher, GitRefSpec, Keyring, Resolved, Signed, Store, Verified, VerifyError,
};

fn sample(server: &GitServer) -> Result<(Repo, String)> {
    let repo = server.repo("sample")?;
    repo.write(
        "apps/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
    )?;
    repo.write("README.md", "# sample\n")?;
    let first = repo.commit("one")?;
    repo.tag("v1.0.0")?;
    repo.write(
        "apps/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
    )?;
    repo.commit("two")?;
    Ok((repo, first))
}

fn fetch(url: &str, spec: &GitRefSpec) -> Result<(String, String, Vec<String>)> {
    fetch_with(url, spec, &Access::default())
}

fn fetch_with(
    url: &str,
    spec: &GitRefSpec,
    access: &Access,
) -> Result<(String, String, Vec<String>)> {
    let work = tempfile::tempdir()?;
    let git = GitFetcher::new(work.path().join("git"));
    let refs = if spec.commit.is_some() && spec.branch.is_none() {
        vec![]
    } else {
        git.list_remote("k", url, access)?
    };
    let resolved = spec.resolve(&refs)?;
    let files = git.fetch("k", url, &resolved, access)?;
    let store = Store::new(work.path().join("artifacts"));
    let artifact = store.put("k", &resolved.revision, &files)?;
    let cm = files
        .iter()
        .find(|f| f.path == "apps/cm.yaml")
        .map(|f| String::from_utf8_lossy(&f.data).into_owned())
        .unwrap_or_default();
    let mut paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    paths.sort();
    paths.push(cm);
    Ok((artifact.revision, artifact.digest, paths))
}

fn every_ref_kind(url: &str, first: &str) -> Result<String> {
    let (rev, digest, files) = fetch(
        url,
        &GitRefSpec {
            branch: Some("main".into()),
            ..Default::default()
        },
    )?;
    assert!(rev.starts_with("main@sha1:"), "{rev}");
    assert_eq!(files[..2], ["README.md", "apps/cm.yaml"]);
    assert!(
        files[2].contains("name: b"),
        "branch gives the newest commit"
    );

    let (rev, _, files) = fetch(
        url,
        &GitRefSpec {
            tag: Some("v1.0.0".into()),
            ..Default::default()
        },
    )?;
    assert_eq!(
        rev,
        format!("v1.0.0@sha1:{first}"),
        "annotated tag peeled to its commit"
    );
    assert!(files[2].contains("name: a"));

    let (rev, _, files) = fetch(
        url,
        &GitRefSpec {
            commit: Some(first.into()),
            ..Default::default()
        },
    )?;
    assert_eq!(rev, format!("sha1:{first}"));
    assert!(files[2].contains("name: a"));

    let (_, default_digest, _) = fetch(url, &GitRefSpec::default())?;
    assert_eq!(
        default_digest, digest,
        "no ref means the remote HEAD (main)"
    );
    Ok(digest)
}

#[test]
fn git_daemon_http_and_file_give_the_same_artifact() -> Result<()> {
    let daemon = GitServer::start()?;
    let (repo, first) = sample(&daemon)?;
    let over_git = every_ref_kind(&repo.url, &first)?;
    let over_file = every_ref_kind(&repo.file_url, &first)?;
    assert_eq!(over_git, over_file, "digest depends only on content");

    let http = GitServer::start_http()?;
    let (repo, first) = sample(&http)?;
    every_ref_kind(&repo.url, &first)?;
    Ok(())
}

#[test]
fn missing_refs_and_servers_are_reported() -> Result<()> {
    let daemon = GitServer::start()?;
    let (repo, _) = sample(&daemon)?;
    let err = fetch(
        &repo.url,
        &GitRefSpec {
            branch: Some("nope".into()),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "branch 'nope' not found on the remote");
    let err = fetch("git://127.0.0.1:1/none.git", &GitRefSpec::default()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot list refs of git://127.0.0.1:1/none.git"),
        "{err}"
    );
    Ok(())
}

#[test]
fn semver_follows_a_newly_pushed_higher_tag() -> Result<()> {
    let daemon = GitServer::start()?;
    let (repo, first) = sample(&daemon)?; // tags v1.0.0 at `first`
    let spec = GitRefSpec {
        semver: Some(">=1.0.0 <2.0.0".into()),
        ..Default::default()
    };
    let (rev, _, _) = fetch(&repo.url, &spec)?;
    assert_eq!(rev, format!("v1.0.0@sha1:{first}"));

    repo.write(
        "apps/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
    )?;
    let newer = repo.commit("three")?;
    repo.tag("v1.1.0")?;
    repo.tag("v2.0.0")?; // outside the range
    let (rev, _, files) = fetch(&repo.url, &spec)?;
    assert_eq!(rev, format!("v1.1.0@sha1:{newer}"));
    assert!(files[2].contains("name: c"));
    Ok(())
}

#[test]
fn sourceignore_shapes_the_artifact_and_its_digest() -> Result<()> {
    let daemon = GitServer::start()?;
    let repo = daemon.repo("ignoring")?;
    repo.write(
        "apps/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
    )?;
    repo.write("apps/tests/fixture.yaml", "kind: Fixture\n")?;
    repo.write("apps/.sourceignore", "tests/\n")?;
    repo.write(".github/workflows/ci.yml", "on: push\n")?;
    repo.commit("one")?;
    let build = || -> Result<(String, Vec<String>)> {
        let work = tempfile::tempdir()?;
        let git = GitFetcher::new(work.path());
        let access = Access::default();
        let resolved = GitRefSpec::default().resolve(&git.list_remote("k", &repo.url, &access)?)?;
        let files =
            skewer_sources::ignore::filter(git.fetch("k", &repo.url, &resolved, &access)?, None);
        let artifact = Store::new(work.path().join("a")).put("k", &resolved.revision, &files)?;
        let mut paths: Vec<String> = files.into_iter().map(|f| f.path).collect();
        paths.sort();
        Ok((artifact.digest, paths))
    };
    let (digest, paths) = build()?;
    assert_eq!(
        paths,
        ["apps/.sourceignore", "apps/cm.yaml"],
        "ignored and CI files are left out"
    );

    // A new commit that touches only ignored files gives the same artifact.
    repo.write("apps/tests/fixture.yaml", "kind: Fixture\nchanged: true\n")?;
    repo.write(".github/workflows/ci.yml", "on: pull_request\n")?;
    repo.commit("only ignored files")?;
    assert_eq!(build()?.0, digest);
    Ok(())
}

fn secret(pairs: &[(&str, &str)]) -> Result<Access> {
    let data = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
    Ok(Access {
        auth: Auth::from_secret_data(&data)?,
        ..Access::default()
    })
}

fn branch() -> GitRefSpec {
    GitRefSpec {
        branch: Some("main".into()),
        ..Default::default()
    }
}

#[test]
fn https_with_a_private_ca_basic_auth_and_bearer_token() -> Result<()> {
    let server = GitServer::start_http_with(&HttpOptions {
        basic: Some(("deploy".into(), "s3cret".into())),
        token: Some("tok-123".into()),
        tls: true,
    })?;
    let (repo, _) = sample(&server)?;
    assert!(repo.url.starts_with("https://"));
    let ca = server.ca_pem().unwrap_or_default();
    let with_ca = |pairs: &[(&str, &str)]| {
        let mut pairs = pairs.to_vec();
        pairs.push(("ca.crt", ca));
        secret(&pairs)
    };

    let good = with_ca(&[("username", "deploy"), ("password", "s3cret")])?;
    let (rev, digest, _) = fetch_with(&repo.url, &branch(), &good)?;
    assert!(rev.starts_with("main@sha1:"), "{rev}");
    let token = with_ca(&[("bearerToken", "tok-123")])?;
    assert_eq!(fetch_with(&repo.url, &branch(), &token)?.1, digest);

    let untrusted = secret(&[("username", "deploy"), ("password", "s3cret")])?;
    let err = fetch_with(&repo.url, &branch(), &untrusted).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("TLS certificate of {} is not trusted", repo.url)),
        "{err}"
    );
    let err = fetch_with(&repo.url, &branch(), &with_ca(&[])?).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} requires authentication and no credentials were given (set spec.secretRef)",
            repo.url
        )
    );
    let wrong = with_ca(&[("username", "deploy"), ("password", "nope")])?;
    let err = fetch_with(&repo.url, &branch(), &wrong).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "authentication to {} failed: the server rejected the username and password",
            repo.url
        )
    );
    assert!(!format!("{err:?}").contains("nope"), "{err:?}");
    let wrong = with_ca(&[("bearerToken", "tok-999")])?;
    let err = fetch_with(&repo.url, &branch(), &wrong).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("the server rejected the bearer token"),
        "{err}"
    );

    // Plain HTTP never carries credentials.
    let plain = GitServer::start_http()?;
    let (repo, _) = sample(&plain)?;
    let err = fetch_with(&repo.url, &branch(), &secret(&[("bearerToken", "t")])?).unwrap_err();
    assert_eq!(
        err.to_string(),
        "credentials are never sent in clear text: use an https:// URL"
    );
    Ok(())
}

#[test]
fn ssh_with_a_deploy_key_and_known_hosts() -> Result<()> {
    let keys = tempfile::tempdir()?;
    let key = |name: &str, passphrase: &str| -> Result<(String, String)> {
        let path = keys.path().join(name).display().to_string();
        skewer_e2e::git::run(
            "ssh-keygen",
            &[
                "-q", "-t", "ed25519", "-N", passphrase, "-C", name, "-f", &path,
            ],
        )?;
        Ok((
            std::fs::read_to_string(&path)?,
            std::fs::read_to_string(format!("{path}.pub"))?,
        ))
    };
    let (deploy, deploy_pub) = key("deploy", "")?;
    let (locked, locked_pub) = key("locked", "open sesame")?;
    let (stranger, _) = key("stranger", "")?;
    let server = GitServer::start_ssh(&format!("{deploy_pub}{locked_pub}"))?;
    let (repo, _) = sample(&server)?;
    let known_hosts = server.known_hosts().unwrap_or_default().to_string();

    let access = secret(&[("identity", &deploy), ("known_hosts", &known_hosts)])?;
    let (rev, digest, _) = fetch_with(&repo.url, &branch(), &access)?;
    assert!(rev.starts_with("main@sha1:"), "{rev}");
    let access = secret(&[
        ("identity", &locked),
        ("password", "open sesame"),
        ("known_hosts", &known_hosts),
    ])?;
    assert_eq!(fetch_with(&repo.url, &branch(), &access)?.1, digest);

    let access = secret(&[("identity", &stranger), ("known_hosts", &known_hosts)])?;
    let err = fetch_with(&repo.url, &branch(), &access).unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "authentication to {} failed: the server rejected the key in 'identity'",
            repo.url
        )),
        "{err}"
    );
    // Another host's key under this address: refused, never trusted on first use.
    let (_, other_pub) = key("other-host", "")?;
    let port = known_hosts.split_whitespace().next().unwrap_or_default();
    let other = other_pub
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let access = secret(&[
        ("identity", &deploy),
        ("known_hosts", &format!("{port} {other}\n")),
    ])?;
    let err = fetch_with(&repo.url, &branch(), &access).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("host key of {} is not trusted", repo.url)),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_hung_server_fails_the_fetch_at_the_timeout() -> Result<()> {
    // Accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let access = Access {
        timeout: std::time::Duration::from_secs(1),
        ..Access::default()
    };
    let url = format!("http://127.0.0.1:{port}/hung.git");
    let started = std::time::Instant::now();
    let err = fetch_with(&url, &branch(), &access).unwrap_err();
    assert_eq!(err.to_string(), format!("{url} did not answer within 1s"));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "gave up after {:?}",
        started.elapsed()
    );
    Ok(())
}

/// Fetches `main` (or the tag) and checks the fetched object's signature against `keys`.
fn verify(
    url: &str,
    spec: &GitRefSpec,
    object: impl Fn(&Resolved) -> Signed,
    keys: &Keyring,
) -> Result<Result<Verified, VerifyError>> {
    let work = tempfile::tempdir()?;
    let git = GitFetcher::new(work.path());
    let access = Access::default();
    let resolved = spec.resolve(&git.list_remote("k", url, &access)?)?;
    git.fetch("k", url, &resolved, &access)?;
    let object = object(&resolved);
    let signed = git.signed("k", &object)?;
    Ok(keys.verify(
        &object.to_string(),
        signed.signature.as_deref(),
        &signed.payload,
    ))
}

fn keyring(pairs: &[(&str, &str)]) -> Result<Keyring> {
    let data = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
    Ok(Keyring::from_secret_data(&data)?)
}

#[test]
fn signed_commits_and_tags_verify_in_process() -> Result<()> {
    let gpg = Signer::gpg()?;
    let ssh = Signer::ssh()?;
    let stranger = Signer::ssh()?;
    let keys = keyring(&[
        ("team.asc", &gpg.public_key),
        ("ci.sshpub", &ssh.public_key),
    ])?;
    let daemon = GitServer::start()?;
    let repo = daemon.repo("signed")?;
    let head = |r: &Resolved| Signed::Commit(r.commit.clone());
    let main = branch();

    repo.write("cm.yaml", "kind: ConfigMap\n")?;
    let c = repo.commit_signed("by gpg", &gpg)?;
    let v = verify(&repo.url, &main, head, &keys)?.map_err(anyhow::Error::from)?;
    assert_eq!(v.fingerprint, gpg.fingerprint);
    assert_eq!(v.key, "team.asc");
    assert_eq!(v.object, format!("commit {}", &c[..12]));

    repo.write("cm.yaml", "kind: ConfigMap\ndata: {}\n")?;
    repo.commit_signed("by ssh", &ssh)?;
    let v = verify(&repo.url, &main, head, &keys)?.map_err(anyhow::Error::from)?;
    assert_eq!(v.fingerprint, ssh.fingerprint);
    assert_eq!(v.key, "ci.sshpub");

    repo.commit_signed("by a stranger", &stranger)?;
    let err = verify(&repo.url, &main, head, &keys)?.unwrap_err();
    assert!(
        matches!(&err, VerifyError::UnknownKey { signer, .. } if signer.contains(&stranger.fingerprint)),
        "{err}"
    );
    let c = repo.commit("unsigned")?;
    assert_eq!(
        verify(&repo.url, &main, head, &keys)?
            .unwrap_err()
            .to_string(),
        format!("commit {} is not signed", &c[..12])
    );

    // A signed tag in Tag mode; the commit it points at is unsigned.
    repo.tag_signed("v1.0.0", &gpg)?;
    let tag = GitRefSpec {
        tag: Some("v1.0.0".into()),
        ..Default::default()
    };
    let v = verify(&repo.url, &tag, |_| Signed::Tag("v1.0.0".into()), &keys)?
        .map_err(anyhow::Error::from)?;
    assert_eq!(v.object, "tag 'v1.0.0'");
    assert_eq!(v.fingerprint, gpg.fingerprint);

    repo.tag_lightweight("v1.0.1")?;
    let light = GitRefSpec {
        tag: Some("v1.0.1".into()),
        ..Default::default()
    };
    let err = verify(&repo.url, &light, |_| Signed::Tag("v1.0.1".into()), &keys).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tag 'v1.0.1' is a lightweight tag: only annotated tags carry signatures"
    );
    Ok(())
}

#[test]
fn a_tampered_payload_is_a_bad_signature() -> Result<()> {
    for signer in [Signer::gpg()?, Signer::ssh()?] {
        let daemon = GitServer::start()?;
        let repo = daemon.repo("tampered")?;
        repo.write("cm.yaml", "kind: ConfigMap\n")?;
        let commit = repo.commit_signed("signed", &signer)?;
        let work = tempfile::tempdir()?;
        let git = GitFetcher::new(work.path());
        let access = Access::default();
        let resolved = branch().resolve(&git.list_remote("k", &repo.url, &access)?)?;
        git.fetch("k", &repo.url, &resolved, &access)?;
        let object = Signed::Commit(commit);
        let signed = git.signed("k", &object)?;
        let keys = keyring(&[("k.asc", &signer.public_key)])
            .or_else(|_| keyring(&[("k.sshpub", &signer.public_key)]))?;
        let mut payload = signed.payload.clone();
        let at = payload.len() - 2;
        payload[at] ^= 1;
        let err = keys
            .verify(&object.to_string(), signed.signature.as_deref(), &payload)
            .unwrap_err();
        assert!(matches!(err, VerifyError::BadSignature { .. }), "{err}");
    }
    Ok(())
}

#[test]
fn any_ref_by_name_like_a_pull_request_head() -> Result<()> {
    let daemon = GitServer::start()?;
    let (repo, _) = sample(&daemon)?;
    repo.write(
        "apps/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pr}\n",
    )?;
    skewer_e2e::git::run(
        "git",
        &[
            "-C",
            &repo.work.path().display().to_string(),
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@skewer.dev",
            "commit",
            "-q",
            "-am",
            "proposed change",
        ],
    )?;
    let head = repo.head()?;
    skewer_e2e::git::run(
        "git",
        &[
            "-C",
            &repo.work.path().display().to_string(),
            "push",
            "-q",
            "origin",
            "HEAD:refs/pull/42/head",
        ],
    )?;
    let (rev, _, files) = fetch(
        &repo.url,
        &GitRefSpec {
            name: Some("refs/pull/42/head".into()),
            ..Default::default()
        },
    )?;
    assert_eq!(rev, format!("refs/pull/42/head@sha1:{head}"));
    assert!(files[2].contains("name: pr"), "{files:?}");
    Ok(())
}
