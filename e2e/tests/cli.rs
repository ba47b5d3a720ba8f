//! Issue 13 acceptance: `skewer bootstrap`, `install`/`uninstall`, and the everyday commands,
//! run as a person runs them (the real binary, its exit codes and output), against real API
//! servers and a real Git server over HTTPS with basic auth.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use skewer_e2e::git::{GitServer, HttpOptions, run};
use skewer_e2e::{
    Skewer, audited_on, cluster, eventually, kc_on, skewer_bin, stop_cluster, unique,
};

/// Runs `skewer ARGS` against the cluster of `kubeconfig`, stdin closed (no terminal).
fn skewer(kubeconfig: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Output> {
    Ok(Command::new(skewer_bin())
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()?)
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `skewer bootstrap git` of branch `main` of `url`, for the cluster directory `path`.
fn bootstrap_git<'a>(url: &'a str, path: &'a str) -> [&'a str; 8] {
    [
        "bootstrap",
        "git",
        "--url",
        url,
        "--branch",
        "main",
        "--path",
        path,
    ]
}

/// The commit a bare repository's `main` is at.
fn head(bare: &Path) -> Result<String> {
    run(
        "git",
        &["-C", &bare.display().to_string(), "rev-parse", "main"],
    )
}

#[tokio::test]
async fn bootstrap_installs_skewer_which_then_manages_itself() -> Result<()> {
    let name = unique("boot");
    let kc_path = cluster(&name)?;
    let result = bootstrap_flow(&kc_path).await;
    stop_cluster(&name)?;
    result
}

async fn bootstrap_flow(admin: &Path) -> Result<()> {
    // A person of their own, so that the audit log tells their requests from the controller
    // manager's.
    let kubeconfig =
        &skewer_e2e::kubeconfig_as(admin, "platform-engineer", Some("system:masters"))?;
    let kubeconfig = kubeconfig.as_path();
    let (user, password) = ("fleet-bot", "pa55-w0rd-never-in-git");
    let git = GitServer::start_http_with(&HttpOptions {
        basic: Some((user.into(), password.into())),
        tls: true,
        ..Default::default()
    })?;
    let (url, bare) = git.empty_repo("fleet")?;
    let scratch = tempfile::tempdir()?;
    let ca = scratch.path().join("ca.pem");
    std::fs::write(&ca, git.ca_pem().context("CA")?)?;
    let ca = ca.display().to_string();
    let boot = |version: &str| -> Result<std::process::Child> {
        Ok(Command::new(skewer_bin())
            .args(bootstrap_git(&url, "clusters/boot"))
            .args(["--username", user, "--ca-file", &ca, "--timeout", "2m"])
            .args(["--version", version])
            .env("KUBECONFIG", kubeconfig)
            .env("SKEWER_GIT_PASSWORD", password)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?)
    };
    let c = skewer_e2e::client(kubeconfig).await?;

    // 1. Into an empty cluster, from an empty repository.
    let started = Instant::now();
    let mut first = boot("v0.1.0")?;
    // skewer's Pod cannot run without a kubelet: a `skewer run` stands in for it, started once
    // bootstrap has applied the CRDs (as the Pod would start once its Deployment exists).
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let deadline = Instant::now() + WAIT;
    while crds.get_opt("kustomizations.skewer.dev").await?.is_none() {
        if first.try_wait()?.is_some() || Instant::now() > deadline {
            let _ = first.kill();
            bail!(
                "bootstrap applied no CRDs: {}",
                text(&first.wait_with_output()?)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let daemon = admin.with_file_name("skewer.kubeconfig");
    let _skewer = Skewer::start_on(&daemon, "skewer-system", &[])?;
    let out = first.wait_with_output()?;
    ensure!(out.status.success(), "first bootstrap: {}", text(&out));
    println!("bootstrap into an empty cluster: {:?}", started.elapsed());
    let commit = head(&bare)?;
    let tree = run(
        "git",
        &[
            "-C",
            &bare.display().to_string(),
            "ls-tree",
            "-r",
            "--name-only",
            "main",
        ],
    )?;
    assert_eq!(
        tree.lines().collect::<Vec<_>>(),
        [
            "clusters/boot/skewer-system/components.yaml",
            "clusters/boot/skewer-system/kustomization.yaml",
            "clusters/boot/skewer-system/sync.yaml"
        ]
    );
    let grep = Command::new("git")
        .args([
            "-C",
            &bare.display().to_string(),
            "grep",
            "-q",
            password,
            "main",
        ])
        .status()?;
    assert!(!grep.success(), "the password is in Git");
    let ks = status(&c, "skewer-system", "skewer-system").await?;
    let inventory = inventory_ids(&ks);
    for id in [
        "skewer-system_skewer_apps_Deployment",
        "_skewer-system__Namespace",
        "_kustomizations.skewer.dev_apiextensions.k8s.io_CustomResourceDefinition",
        "skewer-system_skewer-system_skewer.dev_Kustomization",
    ] {
        assert!(
            inventory.iter().any(|i| i == id),
            "{id} not in {inventory:?}"
        );
    }
    assert!(
        ks.last_applied_revision
            .as_deref()
            .is_some_and(|r| r.ends_with(&commit))
    );
    let secret = kc_on(
        kubeconfig,
        &[
            "-n",
            "skewer-system",
            "get",
            "secret",
            "skewer-system",
            "-o",
            "jsonpath={.data.username}",
        ],
    )?;
    assert_eq!(secret, skewer_e2e::base64(user.as_bytes()));

    // 2. Again: no commit, nothing written to the cluster (dry runs only).
    let before = audited_on(kubeconfig, "platform-engineer", None)?.len();
    let out = boot("v0.1.0")?.wait_with_output()?;
    ensure!(out.status.success(), "second bootstrap: {}", text(&out));
    assert_eq!(head(&bare)?, commit, "the second bootstrap made a commit");
    let writes: Vec<_> = audited_on(kubeconfig, "platform-engineer", None)?
        .into_iter()
        .skip(before)
        .filter(|a| matches!(a.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .filter(|a| !a.uri.contains("dryRun"))
        // The preflight's questions (may I create …?) store nothing.
        .filter(|a| a.resource != "selfsubjectaccessreviews")
        .collect();
    assert!(writes.is_empty(), "the second bootstrap wrote: {writes:?}");

    // 3. A commit that changes skewer's own Deployment is applied by skewer itself.
    let work = scratch.path().join("work");
    let auth_url = url.replacen("https://", &format!("https://{user}:{password}@"), 1);
    let git_env = [("GIT_SSL_CAINFO", ca.as_str())];
    let sh = |args: &[&str]| -> Result<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(&work)
            .envs(git_env)
            .output()?;
        ensure!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    std::fs::create_dir_all(&work)?;
    sh(&["clone", "-q", &auth_url, "."])?;
    let components = work.join("clusters/boot/skewer-system/components.yaml");
    let yaml = std::fs::read_to_string(&components)?;
    std::fs::write(
        &components,
        yaml.replace("skewer:v0.1.0", "skewer:v0.1.1-rc"),
    )?;
    std::fs::create_dir_all(work.join("clusters/boot/apps"))?;
    std::fs::write(
        work.join("clusters/boot/apps/settings.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\ndata: {tier: gold}\n",
    )?;
    sh(&["add", "-A"])?;
    sh(&[
        "-c",
        "user.name=dev",
        "-c",
        "user.email=dev@example.com",
        "commit",
        "-qm",
        "skewer v0.1.1-rc",
    ])?;
    sh(&["push", "-q", "origin", "HEAD:main"])?;
    let out = skewer(
        kubeconfig,
        &[
            "reconcile",
            "ks/skewer-system",
            "-n",
            "skewer-system",
            "--with-source",
            "--wait=1m",
        ],
        &[],
    )?;
    ensure!(out.status.success(), "reconcile: {}", text(&out));
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), "skewer-system");
    let image = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        image(&deployments.get("skewer").await?),
        "ghcr.io/skewer-dev/skewer:v0.1.1-rc"
    );

    // 4. `kubectl edit` of skewer's Deployment is healed.
    kc_on(
        kubeconfig,
        &[
            "-n",
            "skewer-system",
            "set",
            "image",
            "deployment/skewer",
            "skewer=evil:latest",
        ],
    )?;
    eventually("skewer's Deployment healed", WAIT, || async {
        let d = deployments.get("skewer").await?;
        Ok((image(&d) == "ghcr.io/skewer-dev/skewer:v0.1.1-rc").then_some(()))
    })
    .await?;

    // 5. `skewer tree` shows skewer's own objects; `get` lists its source.
    let out = skewer(
        kubeconfig,
        &["tree", "ks/skewer-system", "-n", "skewer-system"],
        &[],
    )?;
    ensure!(out.status.success(), "tree: {}", text(&out));
    let tree = stdout(&out);
    assert!(
        tree.starts_with("Kustomization/skewer-system/skewer-system  Ready\n"),
        "{tree}"
    );
    assert!(
        tree.contains("── Deployment/skewer-system/skewer  "),
        "{tree}"
    );
    assert!(
        tree.contains("── ConfigMap/default/settings  Current"),
        "{tree}"
    );
    let out = skewer(kubeconfig, &["get", "sources", "-n", "skewer-system"], &[])?;
    assert!(
        stdout(&out).contains("GitRepository  skewer-system  True"),
        "{}",
        text(&out)
    );

    // 6. Uninstall without --yes and without a terminal refuses, and deletes nothing.
    let out = skewer(kubeconfig, &["uninstall"], &[])?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Pass --yes"),
        "{}",
        text(&out)
    );
    assert!(crds.get_opt("kustomizations.skewer.dev").await?.is_some());

    // 7. With --yes: skewer and its CRDs go, the workloads it applied stay.
    drop(_skewer);
    let out = skewer(kubeconfig, &["uninstall", "--yes"], &[])?;
    ensure!(out.status.success(), "uninstall: {}", text(&out));
    eventually("skewer's CRDs gone", WAIT, || async {
        Ok(crds
            .get_opt("kustomizations.skewer.dev")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    assert!(deployments.get_opt("skewer").await?.is_none());
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    assert!(
        cms.get_opt("settings").await?.is_some(),
        "a managed workload was deleted"
    );
    Ok(())
}

/// A repository with a ConfigMap and a Secret under `app/`, a Kustomization `web` applying it.
async fn synced_app(prefix: &str) -> Result<(String, skewer_e2e::Repo, Skewer, kube::Client)> {
    let ns = skewer_e2e::namespace(prefix)?;
    let git = Box::leak(Box::new(GitServer::start()?));
    let repo = git.repo("app")?;
    repo.write("app/settings.yaml", &settings(&ns, "blue"))?;
    repo.write("app/db.yaml", &db(&ns, "hunter2"))?;
    let commit = repo.commit("one")?;
    let skewer = Skewer::start(&ns)?;
    git_repository(&ns, "app", &repo.url)?;
    kustomization(&ns, "web", "app", "./app", "  prune: true\n")?;
    let c = client().await;
    wait_applied(&c, &ns, "web", &commit).await?;
    Ok((ns, repo, skewer, c))
}

fn settings(ns: &str, color: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\ndata: {{color: {color}, size: large}}\n"
    )
}

fn db(ns: &str, password: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: db, namespace: {ns}}}\nstringData: {{password: {password}, user: admin}}\n"
    )
}

#[tokio::test]
async fn diff_names_the_changed_field_and_exits_1_until_applied() -> Result<()> {
    let (ns, repo, _skewer, c) = synced_app("cli-diff").await?;
    let hub = skewer_e2e::hub();
    let dir = repo.work.path().join("app");
    let dir = dir.display().to_string();
    let diff = || {
        skewer(
            hub,
            &["diff", &dir, "--kustomization", "web", "-n", &ns],
            &[],
        )
    };

    let out = diff()?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(stdout(&out), "no differences\n");

    // A local edit of one field, and of a Secret's value.
    repo.write("app/settings.yaml", &settings(&ns, "green"))?;
    repo.write("app/db.yaml", &db(&ns, "correct-horse"))?;
    let out = diff()?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let got = stdout(&out);
    assert_eq!(
        got,
        format!(
            "~ Secret/{ns}/db\n  data.password: *** (masked, before) → *** (masked, after)\n\
             ~ ConfigMap/{ns}/settings\n  data.color: blue → green\n"
        )
    );
    for secret in [
        "hunter2",
        "correct-horse",
        "aHVudGVyMg",
        "Y29ycmVjdC1ob3JzZQ",
    ] {
        assert!(!got.contains(secret), "{got}");
    }
    // A file removed from the source: its object would be pruned.
    repo.remove("app/db.yaml")?;
    let out = diff()?;
    assert!(
        stdout(&out).contains(&format!("- Secret/{ns}/db (pruned)")),
        "{}",
        text(&out)
    );
    repo.write("app/db.yaml", &db(&ns, "correct-horse"))?;

    // Applied through Git: nothing differs any more.
    let commit = repo.commit("two")?;
    let out = skewer(
        hub,
        &["reconcile", "ks/web", "-n", &ns, "--with-source", "--wait"],
        &[],
    )?;
    ensure!(out.status.success(), "reconcile: {}", text(&out));
    wait_applied(&c, &ns, "web", &commit).await?;
    let out = diff()?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Wrong names say what to do next, with exit code 3.
    let out = skewer(
        hub,
        &["diff", &dir, "--kustomization", "nope", "-n", &ns],
        &[],
    )?;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("skewer get kustomizations -A"),
        "{}",
        text(&out)
    );
    Ok(())
}

#[tokio::test]
async fn everyday_commands_read_and_steer_a_kustomization() -> Result<()> {
    let (ns, repo, daemon, _c) = synced_app("cli-day").await?;
    let hub = skewer_e2e::hub();
    let run_ok = |args: &[&str]| -> Result<String> {
        let out = skewer(hub, args, &[])?;
        ensure!(out.status.success(), "skewer {args:?}: {}", text(&out));
        Ok(stdout(&out))
    };

    let tree = run_ok(&["tree", "ks/web", "-n", &ns])?;
    assert_eq!(
        tree,
        format!(
            "Kustomization/{ns}/web  Ready\n├── Secret/{ns}/db  Current\n└── ConfigMap/{ns}/settings  Current\n"
        )
    );
    // Provenance: the file, document and commit that produced an object.
    let why = run_ok(&["why", "configmap/settings", "-n", &ns])?;
    let commit = repo.head()?;
    assert_eq!(
        why,
        format!(
            "ConfigMap/{ns}/settings\n  owner     Kustomization/{ns}/web  (Ready)\n  source    GitRepository/{ns}/app  {url}\n  revision  main@sha1:{commit}\n  commit    e2e <e2e@skewer.dev>: one\n  file      app/settings.yaml, document 1\n",
            url = repo.url
        )
    );
    let out = skewer(hub, &["why", "cm/nothing-here", "-n", &ns], &[])?;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not exist"),
        "{}",
        text(&out)
    );

    let events = run_ok(&["events", "--for", "ks/web", "-n", &ns])?;
    assert!(events.starts_with("LAST SEEN  TYPE"), "{events}");
    assert!(events.contains("Kustomization/web"), "{events}");
    // Each revision's Event names that revision (not the first one's, counted up).
    let c = client().await;
    let mut commits = vec![commit.clone()];
    for color in ["green", "red"] {
        repo.write("app/settings.yaml", &settings(&ns, color))?;
        let commit = repo.commit(color)?;
        wait_applied(&c, &ns, "web", &commit).await?;
        commits.push(commit);
    }
    let third = repo.head()?;
    let said = eventually("an Event naming the third revision", WAIT, || async {
        let said = run_ok(&["events", "--for", "ks/web", "-n", &ns, "-o", "json"])?;
        Ok(said.contains(&third).then_some(said))
    })
    .await?;
    assert!(
        said.contains(&commit),
        "the first revision's Event stays: {said}"
    );

    // History: the three revisions, oldest first; a Kustomization rolls back in its source.
    let history = run_ok(&["history", "ks/web", "-n", &ns])?;
    let rows: Vec<&str> = history.lines().collect();
    assert!(rows[0].starts_with("ID  REVISION"), "{history}");
    assert_eq!(rows.len(), 4, "{history}");
    for (i, (row, commit)) in rows[1..].iter().zip(&commits).enumerate() {
        let cells: Vec<&str> = row.split_whitespace().collect();
        let (id, revision) = ((i + 1).to_string(), format!("main@{}", &commit[..7]));
        assert_eq!(
            (cells[0], cells[1], cells.get(5).copied()),
            (id.as_str(), revision.as_str(), Some("Succeeded")),
            "{history}"
        );
    }
    let out = skewer(hub, &["rollback", "ks/web", "1", "-n", &ns], &[])?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("\"commit\":\"{commit}\""))
            && text(&out).contains("git revert"),
        "{}",
        text(&out)
    );

    // `export`: what one writes, applied again elsewhere as it is.
    let exported = run_ok(&["export", "ks/web", "gitrepository/app", "-n", &ns])?;
    assert!(
        exported.starts_with("---\napiVersion: skewer.dev/v1alpha1\nkind: Kustomization\n")
            && exported.contains("kind: GitRepository")
            && !exported.contains("status:")
            && !exported.contains("uid:")
            && !exported.contains("resourceVersion"),
        "{exported}"
    );
    let elsewhere = skewer_e2e::namespace("cli-export")?;
    let source = exported
        .split("---\n")
        .find(|d| d.starts_with("apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\n"))
        .context("the GitRepository")?
        .replace(
            &format!("namespace: {ns}"),
            &format!("namespace: {elsewhere}"),
        );
    skewer_e2e::kc_apply(&source)?;
    let url = skewer_e2e::kc(&[
        "get",
        "gitrepository",
        "app",
        "-n",
        &elsewhere,
        "-o",
        "jsonpath={.spec.url}",
    ])?;
    assert_eq!(
        url, repo.url,
        "the exported source, applied in another namespace"
    );

    // `get --watch` prints the table, then each object again when it changes.
    let mut watching = Command::new(skewer_bin())
        .args(["get", "ks", "-n", &ns, "--watch"])
        .env("KUBECONFIG", hub)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout_pipe = watching.stdout.take().context("stdout")?;
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout_pipe)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| -> Result<String> {
        rx.recv_timeout(Duration::from_secs(20))
            .with_context(|| format!("get --watch printed no {what}"))
    };
    assert!(next("header")?.starts_with("NAME  READY"));
    assert!(next("row")?.starts_with("web   True"));
    assert_eq!(
        run_ok(&["suspend", "ks/web", "-n", &ns])?,
        "kustomization/web: suspended\n"
    );
    let changed = next("changed row")?;
    assert!(changed.starts_with("web   Suspended"), "{changed}");
    let _ = watching.kill();
    let _ = watching.wait();
    let table = run_ok(&["get", "ks", "-n", &ns])?;
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("web   Suspended")),
        "{table}"
    );
    // Waiting on a suspended one is refused at once, saying how to resume it.
    let asked = Instant::now();
    let out = skewer(hub, &["reconcile", "ks/web", "-n", &ns, "--wait=30s"], &[])?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is suspended")
            && asked.elapsed() < Duration::from_secs(10),
        "{}",
        text(&out)
    );
    assert_eq!(
        run_ok(&["resume", "ks/web", "-n", &ns])?,
        "kustomization/web: resumed\n"
    );
    let line = run_ok(&["reconcile", "ks/web", "-n", &ns, "--wait=30s"])?;
    assert!(line.starts_with("kustomization/web: "), "{line}");

    // Mistakes: exit 2 for the command line, 3 for a missing object, with what to do.
    let out = skewer(hub, &["reconcile", "deploy/web"], &[])?;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ks/<name>"),
        "{}",
        text(&out)
    );
    let out = skewer(hub, &["suspend", "ks/missing", "-n", &ns], &[])?;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not exist"),
        "{}",
        text(&out)
    );

    let version = run_ok(&["version"])?;
    let lines: Vec<&str> = version.lines().collect();
    assert!(
        lines.len() == 3
            && lines[0].starts_with("client   skewer ")
            && lines[1].starts_with("cluster  Kubernetes v1.")
            && lines[2].starts_with("skewer   "),
        "{version}"
    );

    let bash = run_ok(&["completion", "bash"])?;
    assert!(
        bash.contains("COMPLETE=\"bash\"") && bash.contains("complete -o"),
        "{bash}"
    );
    // At <TAB>, the shell asks skewer; object names come from the cluster, in `-n`'s namespace.
    let completed = |words: &[&str]| -> Result<String> {
        let out = Command::new(skewer_bin())
            .env("KUBECONFIG", hub)
            .env("COMPLETE", "fish")
            .arg("--")
            .args(words)
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    };
    assert_eq!(
        completed(&["skewer", "reconcile", "-n", &ns, "ks/"])?,
        "ks/web\n"
    );
    assert_eq!(
        completed(&["skewer", "get", "ks", "-n", &ns, "w"])?,
        "web\n"
    );
    assert!(completed(&["skewer", "tree", "a"])?.contains("app/\n"));

    // `logs`: the daemon's lines about one object; no pods to read without --file.
    let log = daemon.log_path().display().to_string();
    let about = run_ok(&["logs", "ks/web", "-n", &ns, "--file", &log])?;
    assert!(about.contains("synced main@sha1:"), "{about}");
    assert!(
        about
            .lines()
            .all(|l| l.contains(&format!("namespace={ns}")) && l.contains("Kustomization")),
        "{about}"
    );
    let all_lines = run_ok(&["logs", "--file", &log])?;
    assert!(all_lines.lines().count() > about.lines().count());
    let source = run_ok(&["logs", "gitrepository/app", "-n", &ns, "--file", &log])?;
    assert!(
        !source.is_empty() && !source.contains("Kustomization"),
        "{source}"
    );
    let out = skewer(hub, &["logs", "ks/web", "-n", &ns], &[])?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("no skewer pods in namespace skewer-system"),
        "{}",
        text(&out)
    );

    // `check --pre` before an install, `check` of the skewer running.
    let pre = run_ok(&["check", "--pre"])?;
    assert!(
        pre.starts_with("✓ Kubernetes v1.")
            && pre.contains("✓ this user may create what skewer installs"),
        "{pre}"
    );
    let nobody = skewer_e2e::kubeconfig_as(hub, "nobody-checks", None)?;
    let out = skewer(&nobody, &["check", "--pre"], &[])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains("✗ this user may not create customresourcedefinitions"),
        "{}",
        text(&out)
    );
    let installed = run_ok(&["check"])?;
    assert!(
        installed.contains("✓ skewer's CRDs are installed") && installed.contains("✓ leader "),
        "{installed}"
    );

    // `get` of one object, and of everything.
    let one = run_ok(&["get", "ks", "web", "-n", &ns])?;
    assert_eq!(one.lines().count(), 2, "{one}");
    let out = skewer(hub, &["get", "ks", "nothing", "-n", &ns], &[])?;
    assert_eq!(out.status.code(), Some(3));
    assert!(
        text(&out).contains(&format!("no Kustomization named nothing in namespace {ns}")),
        "{}",
        text(&out)
    );
    let all = run_ok(&["get", "all", "-n", &ns])?;
    let kinds: Vec<&str> = all
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(kinds, ["Kustomization", "GitRepository"], "{all}");

    // `delete` says what goes with it, asks (and without a terminal refuses), then prunes.
    let out = skewer(hub, &["delete", "ks/web", "-n", &ns], &[])?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("as spec.prune is true, the 2 objects it applied")
            && text(&out).contains("Pass --yes"),
        "{}",
        text(&out)
    );
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    assert!(
        cms.get_opt("settings").await?.is_some(),
        "nothing deleted unasked"
    );
    let line = run_ok(&["delete", "ks/web", "-n", &ns, "--yes", "--wait=60s"])?;
    assert_eq!(line, "kustomization/web: deleted\n");
    assert!(cms.get_opt("settings").await?.is_none(), "pruned with it");

    // `create` writes it again from flags, as `flux create` would; skewer applies it.
    let create = |more: &[&str]| {
        let mut args = vec!["create", "ks", "web", "--source", "GitRepository/app"];
        args.extend(["--path", "./app", "--prune", "-n", &ns]);
        args.extend_from_slice(more);
        run_ok(&args)
    };
    let exported = create(&["--export"])?;
    assert!(
        exported.contains("kind: Kustomization\n") && exported.contains("prune: true"),
        "{exported}"
    );
    let out = skewer(hub, &["get", "ks", "web", "-n", &ns], &[])?;
    assert_eq!(
        out.status.code(),
        Some(3),
        "--export writes nothing: {}",
        text(&out)
    );
    let line = create(&[])?;
    assert_eq!(line, "kustomization/web: created\n");
    wait_applied(&c, &ns, "web", &third).await?;
    assert!(cms.get_opt("settings").await?.is_some());
    Ok(())
}

async fn seen(cms: &Api<ConfigMap>, name: &str, want: Option<&str>) -> Result<Instant> {
    skewer_e2e::objects::configmap_value(cms, name, "color", want, Duration::from_secs(30)).await
}

#[tokio::test]
async fn dev_applies_each_save_and_prunes_deleted_files() -> Result<()> {
    let ns = skewer_e2e::namespace("cli-dev")?;
    let dir = tempfile::tempdir()?;
    let cm = |name: &str, color: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{color: {color}}}\n"
        )
    };
    std::fs::write(dir.path().join("a.yaml"), cm("a", "c0"))?;
    std::fs::write(dir.path().join("b.yaml"), cm("b", "keep"))?;
    // Naming no namespace: placed in -n's, as `kubectl apply -n` places it.
    std::fs::write(
        dir.path().join("c.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {color: placed}\n",
    )?;
    let mut dev = Command::new(skewer_bin())
        .args(["dev", &dir.path().display().to_string(), "-n", &ns])
        .env("KUBECONFIG", skewer_e2e::hub())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let c = client().await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    let result = async {
        seen(&cms, "a", Some("c0")).await?;
        seen(&cms, "b", Some("keep")).await?;
        seen(&cms, "c", Some("placed")).await?;
        let mut took = Vec::new();
        for i in 1..=10 {
            let color = format!("c{i}");
            let watching = seen(&cms, "a", Some(&color));
            tokio::pin!(watching);
            // The watch is established before the save (its first poll lists).
            let _ = futures::poll!(&mut watching);
            let saved = Instant::now();
            std::fs::write(dir.path().join("a.yaml"), cm("a", &color))?;
            let at = watching.await?;
            took.push(at.duration_since(saved));
        }
        took.sort();
        println!(
            "skewer dev save → applied over {} saves: p50 {:?}, max {:?}",
            took.len(),
            took[took.len() / 2],
            took[took.len() - 1]
        );
        assert!(
            took[took.len() / 2] < Duration::from_millis(1000),
            "{took:?}"
        );
        std::fs::remove_file(dir.path().join("b.yaml"))?;
        seen(&cms, "b", None).await?;
        let owner = cms.get("a").await?.metadata.labels.unwrap_or_default();
        assert_eq!(
            owner.get("skewer.dev/name").map(String::as_str),
            Some(dir_name(dir.path()).as_str())
        );
        anyhow::Ok(())
    }
    .await;
    let _ = dev.kill();
    let _ = dev.wait();
    result
}

fn dir_name(p: &Path) -> String {
    let base = p
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let base: String = base
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!("dev-{}", base.trim_matches('-'))
}

#[tokio::test]
async fn why_names_the_artifact_revision_and_file_of_an_oci_source() -> Result<()> {
    let ns = skewer_e2e::namespace("cli-why-oci")?;
    let registry = skewer_e2e::registry::Registry::start()?;
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("apps"))?;
    std::fs::write(
        dir.path().join("apps/all.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: first, namespace: {ns}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: second, namespace: {ns}}}\ndata: {{k: v}}\n"
        ),
    )?;
    let url = registry.url("platform");
    registry.push_with_skewer(&url, "v1.0.0", dir.path(), &[])?;
    let _skewer = Skewer::start(&ns)?;
    skewer_e2e::kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: OCIRepository\nmetadata: {{name: platform, namespace: {ns}}}\nspec:\n  url: {url}\n  insecure: true\n  interval: 1h\n  ref: {{tag: v1.0.0}}\n---\napiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: platform, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: OCIRepository, name: platform}}\n  path: ./apps\n  interval: 1h\n"
    ))?;
    let c = client().await;
    let st = eventually("the OCI Kustomization Ready", WAIT, || async {
        let st = status(&c, &ns, "platform").await?;
        Ok((ready(&st).map(|r| r.0) == Some("True")).then_some(st))
    })
    .await?;
    let revision = st.last_applied_revision.context("a revision")?;
    assert!(revision.starts_with("v1.0.0@sha256:"), "{revision}");
    let out = skewer(
        skewer_e2e::hub(),
        &["why", "configmap/second", "-n", &ns, "-o", "json"],
        &[],
    )?;
    ensure!(out.status.success(), "{}", text(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(answer["owner"], format!("Kustomization/{ns}/platform"));
    assert_eq!(answer["source"], format!("OCIRepository/{ns}/platform"));
    assert_eq!(answer["revision"], revision);
    assert_eq!(answer["file"], "apps/all.yaml");
    assert_eq!(answer["document"], 2);
    assert_eq!(answer["author"], serde_json::Value::Null);
    Ok(())
}

/// Issue 29: `--kubeconfig` and `--context` choose the cluster, `-n` defaults to the context's
/// namespace, and a cluster out of reach is named with its context and what to do.
#[tokio::test]
async fn context_flags_choose_the_cluster_and_its_namespace() -> Result<()> {
    let hub = skewer_e2e::hub();
    let ns = skewer_e2e::namespace("ctx")?;
    kustomization(&ns, "in-context", "src", "./", "")?;
    // Two contexts: the current one on a server nobody listens on, the second on the hub in
    // the test's namespace.
    let dir = tempfile::tempdir()?;
    let two = dir.path().join("two.kubeconfig");
    std::fs::copy(hub, &two)?;
    let config = |args: &[&str]| -> Result<String> {
        let mut all = vec!["config"];
        all.extend_from_slice(args);
        kc_on(&two, &all)
    };
    let cluster = config(&["view", "-o", "jsonpath={.contexts[0].context.cluster}"])?;
    let user = config(&["view", "-o", "jsonpath={.contexts[0].context.user}"])?;
    config(&["set-cluster", "nowhere", "--server=https://127.0.0.1:9"])?;
    config(&[
        "set-context",
        "first",
        "--cluster=nowhere",
        &format!("--user={user}"),
    ])?;
    config(&[
        "set-context",
        "second",
        &format!("--cluster={cluster}"),
        &format!("--user={user}"),
        &format!("--namespace={ns}"),
    ])?;
    config(&["use-context", "first"])?;
    let elsewhere = Path::new("/nonexistent");
    let path = two.display().to_string();

    let out = skewer(
        elsewhere,
        &["get", "ks", "--kubeconfig", &path, "--context", "second"],
        &[],
    )?;
    ensure!(out.status.success(), "{}", text(&out));
    ensure!(
        stdout(&out).contains("in-context"),
        "the context's namespace: {}",
        text(&out)
    );

    // Exit 3 with one line (no log line beside it) holding each of `says`.
    let refused = |args: &[&str], says: &[&str]| -> Result<()> {
        let out = skewer(elsewhere, args, &[])?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(3)
                && err.lines().count() == 1
                && says.iter().all(|s| err.contains(s)),
            "{}",
            text(&out)
        );
        Ok(())
    };
    refused(
        &["get", "ks", "--kubeconfig", &path],
        &[
            "cannot reach the API server at https://127.0.0.1:9 (context first)",
            "--context",
        ],
    )?;
    refused(
        &["get", "ks", "--kubeconfig", &path, "--context", "third"],
        &[
            "--context third: the kubeconfig has no such context (it has: first, ",
            "second",
        ],
    )
}

/// Issue 29: `skewer dev` on objects another owner applies refuses them, naming the owner,
/// and applies nothing; `--take-over` applies them.
#[tokio::test]
async fn dev_refuses_objects_another_owner_applies_unless_taking_over() -> Result<()> {
    let ns = skewer_e2e::namespace("cli-dev-own")?;
    kc_on(
        skewer_e2e::hub(),
        &[
            "create",
            "configmap",
            "shared",
            "-n",
            &ns,
            "--from-literal=color=theirs",
        ],
    )?;
    kc_on(
        skewer_e2e::hub(),
        &[
            "label",
            "configmap",
            "shared",
            "-n",
            &ns,
            "skewer.dev/name=web",
            &format!("skewer.dev/namespace={ns}"),
        ],
    )?;
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("shared.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: shared}\ndata: {color: mine}\n",
    )?;
    let dev = |extra: &[&str]| -> Result<std::process::Child> {
        Ok(Command::new(skewer_bin())
            .args(["dev", &dir.path().display().to_string(), "-n", &ns])
            .args(extra)
            .env("KUBECONFIG", skewer_e2e::hub())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?)
    };
    let mut refused = dev(&[])?;
    let first = {
        use std::io::BufRead as _;
        let out = refused.stdout.take().context("stdout")?;
        std::io::BufReader::new(out)
            .lines()
            .next()
            .context("a line")??
    };
    let _ = refused.kill();
    let _ = refused.wait();
    ensure!(
        first.contains(&format!("ConfigMap/{ns}/shared is applied by {ns}/web"))
            && first.contains("--take-over"),
        "{first}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client().await, &ns);
    let data = cms.get("shared").await?.data.unwrap_or_default();
    ensure!(
        data.get("color").map(String::as_str) == Some("theirs"),
        "nothing applied: {data:?}"
    );

    let mut taking = dev(&["--take-over"])?;
    let result = seen(&cms, "shared", Some("mine")).await;
    let _ = taking.kill();
    let _ = taking.wait();
    result.map(|_| ())
}

/// Issue 29: bootstrap checks the cluster before touching Git: with a cluster out of reach it
/// fails saying nothing was pushed, and the repository's refs are as they were.
#[tokio::test]
async fn bootstrap_with_a_cluster_out_of_reach_pushes_nothing() -> Result<()> {
    let git = GitServer::start_http()?;
    let (url, bare) = git.empty_repo("fleet")?;
    let refs = || run("git", &["-C", &bare.display().to_string(), "for-each-ref"]);
    let before = refs()?;
    let bootstrap =
        |kubeconfig: &Path| skewer(kubeconfig, &bootstrap_git(&url, "clusters/away"), &[]);
    let dir = tempfile::tempdir()?;
    let away = dir.path().join("away.kubeconfig");
    std::fs::copy(skewer_e2e::hub(), &away)?;
    let cluster = kc_on(
        &away,
        &[
            "config",
            "view",
            "-o",
            "jsonpath={.contexts[0].context.cluster}",
        ],
    )?;
    kc_on(
        &away,
        &[
            "config",
            "set-cluster",
            &cluster,
            "--server=https://127.0.0.1:9",
        ],
    )?;
    // Refused (exit 3) saying `why` and that nothing was pushed, before any clone; the
    // repository's refs as they were.
    let refused = |kubeconfig: &Path, why: &str| -> Result<()> {
        let out = bootstrap(kubeconfig)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(3)
                && err.contains(why)
                && err.contains("nothing was pushed")
                && !err.contains("cloning"),
            "{}",
            text(&out)
        );
        ensure!(refs()? == before, "the repository's refs changed");
        Ok(())
    };
    refused(&away, "cannot reach the API server at https://127.0.0.1:9")?;
    // A user who may not install: refused, naming what it may not create.
    let nobody = skewer_e2e::kubeconfig_as(skewer_e2e::hub(), "nobody-in-particular", None)?;
    refused(
        &nobody,
        "may not create customresourcedefinitions, namespaces",
    )
}
