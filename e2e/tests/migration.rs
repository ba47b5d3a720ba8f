//! Moving over from Flux or Argo CD loses nothing (issue 25). Objects keep the annotations
//! their users wrote on them: Flux's `kustomize.toolkit.fluxcd.io/prune: disabled` and Argo
//! CD's `sync-options: Prune=false` keep an object that left Git, Flux's `ssa: IfNotPresent`
//! leaves a hand-made change alone, and Argo CD's `Delete=false` keeps an object when its
//! Application is deleted. A commit that empties a path prunes nothing unless the
//! Kustomization allows it (Argo CD's `allowEmpty`). Against the real API server and a real
//! Git server.

mod common;

use anyhow::Result;
use common::apps::*;
use common::*;
use skewer_e2e::{eventually, kc, kc_apply};

/// The `data` of ConfigMap `name` in `ns`.
async fn configmap_data(c: &kube::Client, ns: &str, name: &str) -> Result<serde_json::Value> {
    Ok(exists(c, "v1", "ConfigMap", ns, name)
        .await?
        .map(|o| o.data["data"].clone())
        .unwrap_or_default())
}

/// A ConfigMap `name` in `ns` with `annotations` (a flow mapping's inside) and `v`.
fn annotated(ns: &str, name: &str, annotations: &str, v: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations: {{{annotations}}}\ndata:\n  v: \"{v}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn flux_and_argo_names_keep_objects_from_prune_and_apply() -> Result<()> {
    let f = Fixture::new("their-names").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let flux_keep = annotated(
        &ns,
        "flux-keep",
        "kustomize.toolkit.fluxcd.io/prune: disabled",
        "1",
    );
    let argo_keep = annotated(
        &ns,
        "argo-keep",
        "argocd.argoproj.io/sync-options: \"Replace=false, Prune=false\"",
        "1",
    );
    let once = |v: &str| {
        annotated(
            &ns,
            "once",
            "kustomize.toolkit.fluxcd.io/ssa: IfNotPresent",
            v,
        )
    };
    let files = vec![
        ("flux-keep.yaml".to_string(), flux_keep),
        ("argo-keep.yaml".to_string(), argo_keep),
        ("gone.yaml".to_string(), annotated(&ns, "gone", "", "1")),
        ("once.yaml".to_string(), once("1")),
    ];
    let _skewer = f.app(&files, &[], "  prune: true\n").await?;
    kc(&[
        "patch",
        "configmap",
        "once",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"data":{"v":"by hand"}}"#,
    ])?;

    for file in ["flux-keep.yaml", "argo-keep.yaml", "gone.yaml"] {
        repo.remove(file)?;
    }
    repo.write("once.yaml", &once("2"))?;
    let second = repo.commit("three leave, one changes")?;
    let st = wait_applied(c, &ns, "app", &second).await?;

    assert!(
        exists(c, "v1", "ConfigMap", &ns, "gone").await?.is_none(),
        "the plain object was not pruned"
    );
    for kept in ["flux-keep", "argo-keep"] {
        assert!(
            exists(c, "v1", "ConfigMap", &ns, kept).await?.is_some(),
            "{kept} was pruned"
        );
        assert!(
            !inventory_ids(&st)
                .iter()
                .any(|id| id.contains(&format!("_{kept}_")))
        );
    }
    let once_live = exists(c, "v1", "ConfigMap", &ns, "once").await?;
    assert_eq!(
        once_live.map(|o| o.data["data"]["v"].clone()),
        Some(serde_json::json!("by hand")),
        "ssa: IfNotPresent was applied over"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn argo_delete_false_survives_its_applications_deletion() -> Result<()> {
    let f = Fixture::new("delete-false").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    repo.write(
        "apps/kept.yaml",
        &annotated(
            &ns,
            "kept",
            "argocd.argoproj.io/sync-options: Delete=false",
            "1",
        ),
    )?;
    repo.write("apps/plain.yaml", &annotated(&ns, "plain", "", "1"))?;
    repo.commit("two")?;
    let _skewer = f.start(&[])?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: \"{}\", path: apps, targetRevision: main}}\n  syncPolicy: {{automated: {{prune: true}}}}\n",
        repo.url
    ))?;
    wait_app(c, &ns, "app", "synced", synced_healthy).await?;

    kc(&["delete", "application", "app", "-n", &ns, "--wait=false"])?;
    eventually(
        "the Application and its plain object gone",
        WAIT,
        || async {
            let app = kc(&[
                "get",
                "application",
                "app",
                "-n",
                &ns,
                "--ignore-not-found",
                "-o",
                "name",
            ])?;
            let plain = exists(c, "v1", "ConfigMap", &ns, "plain").await?;
            Ok((app.trim().is_empty() && plain.is_none()).then_some(()))
        },
    )
    .await?;
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "kept").await?.is_some(),
        "Delete=false was deleted with its Application"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_emptied_path_prunes_nothing_unless_allowed() -> Result<()> {
    let f = Fixture::new("empty-path").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    for name in ["a", "b", "c"] {
        repo.write(&format!("apps/{name}.yaml"), &annotated(&ns, name, "", "1"))?;
    }
    repo.write("apps/README.md", "What runs here.\n")?;
    let first = repo.commit("three")?;
    let _skewer = f.start(&[])?;
    kustomization(&ns, "app", "src", "./apps", "  prune: true\n")?;
    wait_applied(c, &ns, "app", &first).await?;

    for name in ["a", "b", "c"] {
        repo.remove(&format!("apps/{name}.yaml"))?;
    }
    repo.commit("emptied by mistake")?;
    wait_failed(c, &ns, "app", |_, msg| {
        msg.contains("renders no objects") && msg.contains("all 3") && msg.contains("allowEmpty")
    })
    .await?;
    for name in ["a", "b", "c"] {
        assert!(
            exists(c, "v1", "ConfigMap", &ns, name).await?.is_some(),
            "{name} was pruned by an empty path"
        );
    }

    kustomization(
        &ns,
        "app",
        "src",
        "./apps",
        "  prune: true\n  allowEmpty: true\n",
    )?;
    // The objects go first; the inventory that no longer holds them is written after.
    eventually("all three pruned once allowed", WAIT, || async {
        let mut left = Vec::new();
        for name in ["a", "b", "c"] {
            if exists(c, "v1", "ConfigMap", &ns, name).await?.is_some() {
                left.push(name.to_string());
            }
        }
        left.extend(inventory_ids(&status(c, &ns, "app").await?));
        Ok(left.is_empty().then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flux_kustomization_substitutes_its_variables() -> Result<()> {
    let f = Fixture::new("postbuild").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    repo.write(
        "apps/settings.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings-${{cluster_env}}\n  namespace: {ns}\ndata:\n  env: ${{cluster_env}}\n  region: ${{cluster_region}}\n  tier: ${{tier:=standard}}\n  literal: $${{cluster_env}}\n  script: echo $HOME\n"
        ),
    )?;
    repo.write(
        "apps/web.yaml",
        &format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: ${{replicas}}\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx:${{nginx_tag:=1.25}}\n"
        ),
    )?;
    // Kept out of substitution by Flux's annotation.
    repo.write(
        "apps/raw.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: raw\n  namespace: {ns}\n  annotations: {{kustomize.toolkit.fluxcd.io/substitute: disabled}}\ndata:\n  env: ${{cluster_env}}\n"
        ),
    )?;
    let first = repo.commit("apps with variables")?;
    kc_apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cluster-vars, namespace: {ns}}}\ndata: {{cluster_region: eu-central-1, replicas: \"2\"}}\n"
    ))?;
    let _skewer = f.start(&[])?;
    // As in Flux's documentation, with only the apiVersion changed.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata:\n  name: apps\n  namespace: {ns}\nspec:\n  interval: 1s\n  path: ./apps\n  prune: true\n  sourceRef:\n    kind: GitRepository\n    name: src\n  postBuild:\n    substitute:\n      cluster_env: \"prod\"\n    substituteFrom:\n      - kind: ConfigMap\n        name: cluster-vars\n      - kind: Secret\n        name: cluster-secret-vars\n        optional: true\n"
    ))?;
    wait_applied(c, &ns, "apps", &first).await?;

    let data = configmap_data(c, &ns, "settings-prod").await?;
    assert_eq!(data["env"], "prod");
    assert_eq!(data["region"], "eu-central-1", "from the ConfigMap");
    assert_eq!(data["tier"], "standard", "the default");
    assert_eq!(
        data["literal"], "${cluster_env}",
        "$${{x}} is written out as ${{x}}"
    );
    assert_eq!(
        data["script"], "echo $HOME",
        "$var without braces is left alone"
    );
    let web = exists(c, "apps/v1", "Deployment", &ns, "web").await?;
    let web = web.map(|w| w.data["spec"].clone()).unwrap_or_default();
    assert_eq!(web["replicas"], 2, "a number once substituted");
    assert_eq!(
        web["template"]["spec"]["containers"][0]["image"],
        "nginx:1.25"
    );
    assert_eq!(
        configmap_data(c, &ns, "raw").await?["env"],
        "${cluster_env}"
    );

    // A variable's ConfigMap changes without a commit: the next reconcile applies it.
    kc(&[
        "patch",
        "configmap",
        "cluster-vars",
        "-n",
        &ns,
        "--type=merge",
        "-p",
        r#"{"data":{"cluster_region":"eu-west-1"}}"#,
    ])?;
    eventually("the new region applied", WAIT, || async {
        let data = configmap_data(c, &ns, "settings-prod").await?;
        Ok((data["region"] == "eu-west-1").then_some(()))
    })
    .await?;

    // A required Secret that is missing: Ready=False naming it, and nothing else changes.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata:\n  name: apps\n  namespace: {ns}\nspec:\n  interval: 1s\n  path: ./apps\n  prune: true\n  sourceRef:\n    kind: GitRepository\n    name: src\n  postBuild:\n    substituteFrom:\n      - kind: Secret\n        name: cluster-secret-vars\n"
    ))?;
    wait_failed(c, &ns, "apps", |_, msg| {
        msg.contains("spec.postBuild.substituteFrom[0]") && msg.contains("cluster-secret-vars")
    })
    .await?;
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "settings-prod")
            .await?
            .is_some()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn fluxs_fields_it_does_not_do_are_kept_and_refused_by_name() -> Result<()> {
    let f = Fixture::new("flux-fields").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    repo.write("apps/cm.yaml", &annotated(&ns, "cfg", "", "1"))?;
    repo.commit("one")?;
    let _skewer = f.start(&[])?;
    kustomization(
        &ns,
        "app",
        "src",
        "./apps",
        "  buildMetadata: [originAnnotations]\n  healthCheckExprs: [{apiVersion: x.example/v1, kind: X, current: 'true'}]\n",
    )?;
    wait_failed(c, &ns, "app", |reason, msg| {
        reason == "InvalidSpec"
            && msg.contains("spec.buildMetadata ")
            && msg.contains("spec.healthCheckExprs ")
    })
    .await?;
    // The API server kept both: nothing vanished.
    let spec = kc(&[
        "get",
        "kustomization",
        "app",
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.buildMetadata[0]} {.spec.healthCheckExprs[0].current}",
    ])?;
    assert_eq!(spec.trim(), "originAnnotations true");
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "cfg").await?.is_none(),
        "nothing applied"
    );
    Ok(())
}

/// Flux's documented GitRepository and OCIRepository and Argo CD's documented Application,
/// with the apiVersion changed and the fields skewer does not do added: every field is kept by
/// the API server, and each one skewer does not do is refused by name. Without them, the same
/// GitRepository fetches.
#[tokio::test(flavor = "multi_thread")]
async fn sources_and_applications_keep_and_refuse_their_anchors_fields() -> Result<()> {
    let f = Fixture::new("anchor-fields").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    repo.write("apps/cm.yaml", &annotated(&ns, "cfg", "", "1"))?;
    let commit = repo.commit("one")?;
    let _skewer = f.start(&[])?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: podinfo, namespace: {ns}}}\nspec:\n  interval: 5m0s\n  url: {}\n  ref: {{branch: main}}\n  recurseSubmodules: true\n  sparseCheckout: [apps]\n  include: [{{repository: {{name: other}}, fromPath: deploy, toPath: other}}]\n  gitImplementation: go-git\n",
        repo.url
    ))?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: OCIRepository\nmetadata: {{name: podinfo, namespace: {ns}}}\nspec:\n  interval: 5m0s\n  url: oci://ghcr.io/stefanprodan/manifests/podinfo\n  ref: {{semver: '>=6.0.0', semverFilter: '.*'}}\n  certSecretRef: {{name: registry-ca}}\n"
    ))?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: guestbook, namespace: {ns}}}\nspec:\n  project: default\n  source:\n    repoURL: {}\n    targetRevision: HEAD\n    path: apps\n    name: guestbook\n  sourceHydrator: {{drySource: {{repoURL: {}, path: apps, targetRevision: HEAD}}, syncSource: {{targetBranch: env/dev, path: dev}}}}\n  destination: {{server: https://kubernetes.default.svc, namespace: {ns}}}\n",
        repo.url, repo.url
    ))?;
    use skewer_api::{GitRepository, OCIRepository};
    let git = invalid::<GitRepository>(c, &ns, "podinfo").await?;
    for field in ["recurseSubmodules", "sparseCheckout", "include"] {
        assert!(
            git.contains(&format!("spec.{field} is not supported")),
            "{field}: {git}"
        );
    }
    assert!(
        !git.contains("gitImplementation"),
        "a field Flux itself ignores is accepted: {git}"
    );
    let oci = invalid::<OCIRepository>(c, &ns, "podinfo").await?;
    assert!(
        oci.starts_with("spec.certSecretRef is not supported"),
        "{oci}"
    );
    wait_app(c, &ns, "guestbook", "refused", |st| {
        let m = ready_message(st);
        if m.starts_with("False InvalidSpec spec.sourceHydrator") {
            Ok(())
        } else {
            anyhow::bail!("{m}")
        }
    })
    .await?;
    // Nothing vanished.
    for (kind, name, path, want) in [
        (
            "gitrepository",
            "podinfo",
            "{.spec.recurseSubmodules} {.spec.sparseCheckout[0]} {.spec.include[0].toPath} {.spec.gitImplementation}",
            "true apps other go-git",
        ),
        (
            "ocirepository",
            "podinfo",
            "{.spec.certSecretRef.name} {.spec.ref.semverFilter}",
            "registry-ca .*",
        ),
        (
            "application",
            "guestbook",
            "{.spec.sourceHydrator.syncSource.targetBranch} {.spec.source.name}",
            "env/dev guestbook",
        ),
    ] {
        let got = kc(&[
            "get",
            kind,
            name,
            "-n",
            &ns,
            "-o",
            &format!("jsonpath={path}"),
        ])?;
        assert_eq!(got.trim(), want, "{kind}");
    }
    // The refused fields removed, the same GitRepository fetches.
    kc(&[
        "patch",
        "gitrepository",
        "podinfo",
        "-n",
        &ns,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/recurseSubmodules"},{"op":"remove","path":"/spec/sparseCheckout"},{"op":"remove","path":"/spec/include"}]"#,
    ])?;
    wait_source_condition_of::<GitRepository>(c, &ns, "podinfo", "Ready", "True", |_, m| {
        m.contains(&commit)
    })
    .await?;
    Ok(())
}

/// A file of the SOPS fixtures (encrypted by the real `sops`; see their PROVENANCE.md).
fn sops_fixture(name: &str) -> String {
    let path = format!(
        "{}/../appliers/src/sops/testdata/flux/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Entry `key` of Secret `name`, decoded.
async fn secret_value(c: &kube::Client, ns: &str, name: &str, key: &str) -> Result<Option<String>> {
    use base64::Engine;
    let Some(secret) = exists(c, "v1", "Secret", ns, name).await? else {
        return Ok(None);
    };
    let encoded = secret.data["data"][key].as_str().unwrap_or_default();
    let bytes = base64::engine::general_purpose::STANDARD.decode(encoded)?;
    Ok(Some(String::from_utf8(bytes)?))
}

/// Flux's own SOPS test files, encrypted by the real `sops` 3.9.0 with age and OpenPGP: a
/// Secret each, and a `secretGenerator` of a dotenv file and of a binary file, all applied
/// decrypted. A file changed after encryption, a Secret without the right key, and a
/// Kustomization without `decryption` are each refused naming the file, and no key, ciphertext
/// or plaintext reaches a condition, an Event or the log.
#[tokio::test(flavor = "multi_thread")]
async fn sops_files_from_flux_are_applied_decrypted() -> Result<()> {
    let f = Fixture::new("sops").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    for name in ["age.yaml", "pgp.yaml", "env.env", "file.txt"] {
        repo.write(&format!("apps/{name}"), &sops_fixture(name))?;
    }
    repo.write(
        "apps/kustomization.yaml",
        "resources: [age.yaml, pgp.yaml]\ngeneratorOptions: {disableNameSuffixHash: true}\nsecretGenerator:\n- name: envs\n  envs: [env.env]\n- name: files\n  files: [key=file.txt]\n",
    )?;
    let first = repo.commit("encrypted secrets")?;
    let age_key = sops_fixture("age.txt");
    let pgp_key = sops_fixture("pgp.asc");
    put_secret(
        c,
        &ns,
        "sops-keys",
        &[("identity.agekey", &age_key), ("flux.asc", &pgp_key)],
    )
    .await?;
    put_secret(c, &ns, "pgp-only", &[("flux.asc", &pgp_key)]).await?;
    let skewer = f.start(&[])?;
    let ks = |name: &str, decryption: &str| {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  interval: 1s\n  path: ./apps\n  prune: true\n  targetNamespace: {ns}\n  sourceRef: {{kind: GitRepository, name: src}}\n{decryption}"
        ))
    };
    ks(
        "secrets",
        "  decryption:\n    provider: sops\n    secretRef:\n      name: sops-keys\n",
    )?;
    wait_applied(c, &ns, "secrets", &first).await?;
    for secret in ["age", "pgp", "envs", "files"] {
        assert_eq!(
            secret_value(c, &ns, secret, "key").await?.as_deref(),
            Some("value"),
            "Secret {secret}"
        );
    }

    // Without the age key, and without decryption at all: refused, naming the file.
    ks(
        "pgp-only",
        "  decryption: {provider: sops, secretRef: {name: pgp-only}}\n",
    )?;
    ks("plain", "")?;
    wait_failed(c, &ns, "pgp-only", |_, m| {
        m.contains("apps/age.yaml") && m.contains("no key of the decryption Secret opens it")
    })
    .await?;
    wait_failed(c, &ns, "plain", |_, m| {
        m.contains("age.yaml") && m.contains("encrypted with SOPS")
    })
    .await?;

    // A clear value changed after encryption: the MAC refuses it, and nothing is pruned.
    repo.write(
        "apps/age.yaml",
        &sops_fixture("age.yaml").replacen("name: age", "name: age-renamed", 1),
    )?;
    repo.commit("tampered")?;
    wait_failed(c, &ns, "secrets", |_, m| {
        m.contains("apps/age.yaml") && m.contains("MAC mismatch")
    })
    .await?;
    assert!(exists(c, "v1", "Secret", &ns, "age").await?.is_some());

    // What was said: no key, no ciphertext, no plaintext.
    let mut said = String::new();
    for name in ["secrets", "pgp-only", "plain"] {
        let st = status(c, &ns, name).await?;
        said.push_str(&serde_json::to_string(&st.conditions)?);
    }
    said.push_str(&kc(&["get", "events", "-n", &ns, "-o", "yaml"])?);
    said.push_str(&skewer.logs());
    for secret in [
        "AGE-SECRET-KEY",
        "PGP PRIVATE KEY",
        "ENC[AES256_GCM",
        "BEGIN AGE ENCRYPTED",
        "key=value",
        "\"key\":\"value\"",
    ] {
        assert!(!said.contains(secret), "'{secret}' was said");
    }
    Ok(())
}

/// The message of a source once it is refused as `InvalidSpec`.
async fn invalid<S: skewer_controller::artifacts::Source>(
    c: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<String> {
    let invalid = |reason: &str, _: &str| reason == "InvalidSpec";
    let (_, message) =
        wait_source_condition_of::<S>(c, ns, name, "Ready", "False", invalid).await?;
    Ok(message)
}

/// Flux's and Argo CD's kinds in their groups, under resource names of their own: with Flux's
/// (`kustomizations`), kubectl would read every other test's `kubectl get kustomization` as
/// Flux's. skewer finds a kind by its group, version and kind, whatever its resource name.
const FOREIGN: [(&str, &str, &str, &str, &str); 3] = [
    (
        "kustomize.toolkit.fluxcd.io",
        "fluxkustomizations",
        "fluxkustomization",
        "Kustomization",
        "v1",
    ),
    (
        "source.toolkit.fluxcd.io",
        "fluxgitrepositories",
        "fluxgitrepository",
        "GitRepository",
        "v1",
    ),
    (
        "argoproj.io",
        "argoapplications",
        "argoapplication",
        "Application",
        "v1alpha1",
    ),
];

/// CRDs standing in for Flux's and Argo CD's on the test server: their groups, kinds and
/// versions, every field kept, and no controller behind them (the objects below play the part
/// of what those controllers leave in a cluster).
fn foreign_crds() -> Result<()> {
    for (group, plural, singular, kind, version) in FOREIGN {
        kc_apply(&format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {plural}.{group}}}\nspec:\n  group: {group}\n  scope: Namespaced\n  names: {{plural: {plural}, singular: {singular}, kind: {kind}}}\n  versions:\n  - name: {version}\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}\n"
        ))?;
        kc(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{plural}.{group}"),
        ])?;
    }
    Ok(())
}

/// Applies ConfigMap `name` (data `v: 1`) as `manager` would, with `metadata` (a flow
/// mapping's inside) beside its name and namespace.
async fn applied_by(
    c: &kube::Client,
    ns: &str,
    name: &str,
    manager: &str,
    metadata: &str,
) -> Result<String> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    let object = skewer_appliers::load::parse_yaml(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}, {metadata}}}\ndata: {{v: \"1\"}}\n"
    ))
    .map_err(anyhow::Error::msg)?;
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(c.clone(), ns);
    let cm = api
        .patch(name, &PatchParams::apply(manager), &Patch::Apply(&object))
        .await?;
    Ok(cm.metadata.uid.unwrap_or_default())
}

/// Who manages ConfigMap `name`'s fields, and its labels and annotations.
async fn managers_and_marks(
    c: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<(Vec<String>, String)> {
    let o = exists(c, "v1", "ConfigMap", ns, name)
        .await?
        .ok_or_else(|| anyhow::anyhow!("ConfigMap {name} is gone"))?;
    let managers = o
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|f| f.manager)
        .collect();
    let marks = format!("{:?} {:?}", o.metadata.labels, o.metadata.annotations);
    Ok((managers, marks))
}

/// The handover (issue 25): objects Flux's kustomize-controller and Argo CD applied, with
/// their managers' field ownership and their owners' marks, a Flux Kustomization and
/// GitRepository and an Argo CD Application (finalizer, automated sync) recording them.
/// `skewer migrate --apply` stops the originals, and skewer takes the very same objects over
/// (same UIDs) with no field left to the old managers; skewer then owns them: a file removed
/// from Git is pruned.
#[tokio::test(flavor = "multi_thread")]
async fn migrate_hands_live_objects_over_in_place() -> Result<()> {
    foreign_crds()?;
    let f = Fixture::new("migrate").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let cm = |name: &str, dir: &str| {
        (
            format!("{dir}/{name}.yaml"),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{v: \"1\"}}\n"
            ),
        )
    };
    for (path, text) in [
        cm("flux-a", "flux"),
        cm("flux-b", "flux"),
        cm("argo-a", "argo"),
    ] {
        repo.write(&path, &text)?;
    }
    let first = repo.commit("what Flux and Argo CD applied")?;
    let flux_marks = format!(
        "labels: {{kustomize.toolkit.fluxcd.io/name: apps, kustomize.toolkit.fluxcd.io/namespace: {ns}}}"
    );
    let mut uids = std::collections::BTreeMap::new();
    for name in ["flux-a", "flux-b"] {
        let uid = applied_by(c, &ns, name, "kustomize-controller", &flux_marks).await?;
        uids.insert(name, uid);
    }
    let argo_marks = format!(
        "labels: {{app.kubernetes.io/instance: guestbook}}, annotations: {{argocd.argoproj.io/tracking-id: 'guestbook:/ConfigMap:{ns}/argo-a'}}"
    );
    uids.insert(
        "argo-a",
        applied_by(c, &ns, "argo-a", "argocd-controller", &argo_marks).await?,
    );
    kc_apply(&format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {url}\n  interval: 1s\n  ref: {{branch: main}}\n---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: apps, namespace: {ns}}}\nspec:\n  interval: 1m\n  path: ./flux\n  prune: true\n  sourceRef: {{kind: GitRepository, name: src}}\nstatus:\n  inventory:\n    entries:\n    - {{id: {ns}_flux-a__ConfigMap, v: v1}}\n    - {{id: {ns}_flux-b__ConfigMap, v: v1}}\n---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: guestbook\n  namespace: {ns}\n  finalizers: [resources-finalizer.argocd.argoproj.io]\nspec:\n  project: default\n  source: {{repoURL: {url}, targetRevision: HEAD, path: argo}}\n  destination: {{server: https://kubernetes.default.svc, namespace: {ns}}}\n  syncPolicy: {{automated: {{prune: true, selfHeal: true}}}}\nstatus:\n  resources:\n  - {{version: v1, kind: ConfigMap, namespace: {ns}, name: argo-a, status: Synced}}\n",
        url = repo.url
    ))?;
    let _skewer = skewer_e2e::Skewer::start_with(&ns, &[])?;

    let out = std::process::Command::new(skewer_e2e::skewer_bin())
        .env("KUBECONFIG", skewer_e2e::hub())
        .args(["migrate", "-n", &ns, "--apply"])
        .output()?;
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains(&format!("handed over 2 objects of Kustomization {ns}/apps"))
            && report.contains(&format!(
                "handed over 1 objects of Application {ns}/guestbook"
            )),
        "{report}"
    );

    // The originals are stopped: Flux's suspended, Argo CD's neither automated nor deleting
    // its objects with it.
    let get =
        |what: &str, path: &str| kc(&["get", what, "-n", &ns, "-o", &format!("jsonpath={path}")]);
    assert_eq!(
        get(
            "fluxkustomizations.kustomize.toolkit.fluxcd.io/apps",
            "{.spec.suspend}"
        )?,
        "true"
    );
    assert_eq!(
        get(
            "fluxgitrepositories.source.toolkit.fluxcd.io/src",
            "{.spec.suspend}"
        )?,
        "true"
    );
    assert_eq!(
        get(
            "argoapplications.argoproj.io/guestbook",
            "{.metadata.finalizers}|{.spec.syncPolicy.automated}"
        )?,
        "|"
    );

    // skewer applies the same objects, and nobody else holds a field of them.
    wait_applied(c, &ns, "apps", &first).await?;
    wait_app(c, &ns, "guestbook", "synced and healthy", synced_healthy).await?;
    for (name, uid) in &uids {
        let now = exists(c, "v1", "ConfigMap", &ns, name).await?;
        assert_eq!(
            now.and_then(|o| o.metadata.uid).as_deref(),
            Some(uid.as_str()),
            "{name} is the same object"
        );
        let (managers, marks) = managers_and_marks(c, &ns, name).await?;
        assert!(
            !managers
                .iter()
                .any(|m| m == "kustomize-controller" || m == "argocd-controller"),
            "{name}: {managers:?}"
        );
        assert!(
            managers.iter().any(|m| m == "skewer"),
            "{name}: {managers:?}"
        );
        assert!(
            !marks.contains("kustomize.toolkit.fluxcd.io/")
                && !marks.contains("tracking-id")
                && !marks.contains("app.kubernetes.io/instance"),
            "{name}: {marks}"
        );
        let owner = if name.starts_with("flux") {
            "apps"
        } else {
            "guestbook"
        };
        assert!(
            marks.contains(&format!("\"skewer.dev/name\": \"{owner}\"")),
            "{name}: {marks}"
        );
    }

    // Read again, the stopped originals are written as they were, not suspended.
    let again = std::process::Command::new(skewer_e2e::skewer_bin())
        .env("KUBECONFIG", skewer_e2e::hub())
        .args(["migrate", "-n", &ns])
        .output()?;
    let yaml = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert!(
        !yaml.contains("suspend: true")
            && yaml.contains("selfHeal: true")
            && !yaml.contains("skewer.dev/migrated-to")
            && !yaml.contains("skewer.dev/stopped-was"),
        "{yaml}"
    );

    // skewer owns them now: a file removed from Git is pruned.
    repo.remove("flux/flux-b.yaml")?;
    let second = repo.commit("flux-b leaves")?;
    wait_applied(c, &ns, "apps", &second).await?;
    assert!(exists(c, "v1", "ConfigMap", &ns, "flux-b").await?.is_none());
    assert!(exists(c, "v1", "ConfigMap", &ns, "flux-a").await?.is_some());
    Ok(())
}

/// Argo CD's `PruneLast=true` on an object: pruned after every other object, whatever its sync
/// wave (without it, the highest wave goes first). Read from the API server's audit log.
#[tokio::test(flavor = "multi_thread")]
async fn argo_prune_last_goes_after_every_other_object() -> Result<()> {
    let f = Fixture::new("prune-last").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let cm = |name: &str, options: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations: {{{options}}}\n"
        )
    };
    let files = [
        (
            "last.yaml",
            cm(
                "last",
                "argocd.argoproj.io/sync-wave: '5', argocd.argoproj.io/sync-options: 'Validate=false,PruneLast=true'",
            ),
        ),
        ("a.yaml", cm("a", "argocd.argoproj.io/sync-wave: '1'")),
        ("b.yaml", cm("b", "")),
        ("keep.yaml", cm("keep", "")),
    ];
    for (path, text) in &files {
        repo.write(&format!("apps/{path}"), text)?;
    }
    repo.commit("four")?;
    let _skewer = f.start(&[])?;
    kustomization(&ns, "app", "src", "./apps", "  prune: true\n")?;
    wait_applied(c, &ns, "app", &repo.head()?).await?;
    for (path, _) in &files[..3] {
        repo.remove(&format!("apps/{path}"))?;
    }
    let second = repo.commit("three leave")?;
    wait_applied(c, &ns, "app", &second).await?;
    let deletes = deletions(&ns, 3).await?;
    assert_eq!(
        deletes,
        ["a", "b", "last"],
        "wave 1, wave 0, then PruneLast"
    );
    Ok(())
}

/// Argo CD's `compare-options: IgnoreExtraneous`: an object the source no longer holds, that
/// carried it when applied, leaves its Application Synced (it is still listed, requiring
/// pruning); one without it makes the Application OutOfSync.
#[tokio::test(flavor = "multi_thread")]
async fn argo_ignore_extraneous_keeps_an_application_synced() -> Result<()> {
    let f = Fixture::new("extraneous").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    let cm = |name: &str, annotations: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\n"
        )
    };
    repo.write("apps/app.yaml", &cm("app", ""))?;
    repo.write(
        "apps/generated.yaml",
        &cm(
            "generated",
            "argocd.argoproj.io/compare-options: IgnoreExtraneous",
        ),
    )?;
    repo.write("apps/plain.yaml", &cm("plain", ""))?;
    repo.commit("three")?;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  destination: {{namespace: {ns}, server: https://kubernetes.default.svc}}\n  source: {{repoURL: {}, path: apps}}\n  syncPolicy: {{automated: {{}}}}\n  interval: 1s\n",
        repo.url
    ))?;
    wait_app(c, &ns, "app", "Synced and Healthy", synced_healthy).await?;

    repo.remove("apps/generated.yaml")?;
    let second = repo.commit("generated leaves")?;
    let st = wait_app(c, &ns, "app", "compared at the second commit", |st| {
        let at = st
            .sync
            .as_ref()
            .and_then(|s| s.revision.clone())
            .unwrap_or_default();
        anyhow::ensure!(at.contains(&second), "at {at}");
        Ok(())
    })
    .await?;
    let sync = st.sync.map(|s| s.status).unwrap_or_default();
    assert_eq!(sync, "Synced", "{:?}", st.resources);
    assert!(
        st.resources
            .iter()
            .any(|r| r.name == "generated" && r.requires_pruning),
        "still listed: {:?}",
        st.resources
    );

    repo.remove("apps/plain.yaml")?;
    let third = repo.commit("plain leaves")?;
    wait_app(c, &ns, "app", "OutOfSync for plain", |st| {
        let s = st.sync.clone().unwrap_or_default();
        anyhow::ensure!(
            s.revision.unwrap_or_default().contains(&third) && s.status == "OutOfSync",
            "{}",
            s.status
        );
        Ok(())
    })
    .await?;
    Ok(())
}

/// Flux's kustomize fields on a Kustomization, over a path with no kustomization.yaml (one is
/// made, as Flux makes it): `namePrefix` and `nameSuffix` rename every object and the
/// references to them, `images` retags, and a `components` directory adds its labels; one
/// that is missing is left out with `ignoreMissingComponents`.
#[tokio::test(flavor = "multi_thread")]
async fn fluxs_kustomize_fields_rename_retag_and_add_components() -> Result<()> {
    let f = Fixture::new("flux-kustomize").await?;
    let (ns, repo, c) = (f.ns.clone(), &f.repo, &f.c);
    repo.write(
        "apps/cm.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\ndata: {{v: '1'}}\n"),
    )?;
    repo.write(
        "apps/web/deploy.yaml",
        &format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {ns}}}\nspec:\n  replicas: 0\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers:\n      - {{name: web, image: nginx:1.0, envFrom: [{{configMapRef: {{name: settings}}}}]}}\n"),
    )?;
    repo.write(
        "components/tier/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\ncommonLabels: {tier: web}\n",
    )?;
    let commit = repo.commit("plain manifests and a component")?;
    let _skewer = f.start(&[])?;
    kustomization(
        &ns,
        "app",
        "src",
        "./apps",
        "  prune: true\n  namePrefix: prod-\n  nameSuffix: -eu\n  images: [{name: nginx, newTag: '1.25'}]\n  components: [../components/tier, ../components/missing]\n  ignoreMissingComponents: true\n",
    )?;
    wait_applied(c, &ns, "app", &commit).await?;
    let deploy = exists(c, "apps/v1", "Deployment", &ns, "prod-web-eu")
        .await?
        .ok_or_else(|| anyhow::anyhow!("no Deployment prod-web-eu"))?;
    let container = &deploy.data["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.25");
    assert_eq!(
        container["envFrom"][0]["configMapRef"]["name"], "prod-settings-eu",
        "the reference follows the renamed ConfigMap"
    );
    assert_eq!(
        deploy
            .metadata
            .labels
            .unwrap_or_default()
            .get("tier")
            .map(String::as_str),
        Some("web"),
        "the component's label"
    );
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "prod-settings-eu")
            .await?
            .is_some()
    );
    assert!(
        exists(c, "v1", "ConfigMap", &ns, "settings")
            .await?
            .is_none()
    );
    Ok(())
}
