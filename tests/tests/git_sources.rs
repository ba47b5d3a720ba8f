//! The Git source against real servers on loopback: git daemon (`git://`), smart HTTP
//! (`git http-backend`), and `file://`.

use anyhow::Result;
use skewer_e2e::{GitServer, Repo};
use skewer_sources::{GitFetcher, GitRefSpec, Store};

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
    let work = tempfile::tempdir()?;
    let git = GitFetcher::new(work.path().join("git"));
    let refs = if spec.commit.is_some() && spec.branch.is_none() {
        vec![]
    } else {
        git.list_remote("k", url)?
    };
    let resolved = spec.resolve(&refs)?;
    let files = git.fetch("k", url, &resolved)?;
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
        let resolved = GitRefSpec::default().resolve(&git.list_remote("k", &repo.url)?)?;
        let files = skewer_sources::ignore::filter(git.fetch("k", &repo.url, &resolved)?, None);
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
