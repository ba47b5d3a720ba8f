//! Flux repositories as they are: `kustomization.yaml` bases and overlays built natively and
//! applied on the real API server.

mod common;

use anyhow::{Context as _, Result};
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::ListParams;
use skewer_e2e::{eventually, kc};

/// The generated ConfigMaps (`app-config-<hash>`) in `ns`.
async fn generated(c: &kube::Client, ns: &str) -> Result<Vec<String>> {
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), ns);
    Ok(api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .filter(|n| n.starts_with("app-config-"))
        .collect())
}

/// The ConfigMap the Deployment `web` in `ns` mounts.
async fn mounted(c: &kube::Client, ns: &str) -> Result<(Deployment, String)> {
    let d = Api::<Deployment>::namespaced(c.clone(), ns)
        .get("web")
        .await?;
    let name = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.volumes.as_ref())
        .and_then(|v| v.first())
        .and_then(|v| v.config_map.as_ref())
        .map(|c| c.name.clone())
        .context("web mounts no ConfigMap")?;
    Ok((d, name))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_base_and_two_overlays_roll_a_new_generated_config() -> Result<()> {
    let f = Fixture::new("kz").await?;
    let (ns, c, repo) = (f.ns.clone(), f.c.clone(), &f.repo);
    repo.write(
        "base/kustomization.yaml",
        "resources: [deployment.yaml]\nconfigMapGenerator:\n- name: app-config\n  files: [app.properties]\n",
    )?;
    repo.write("base/app.properties", "greeting=hello\n")?;
    repo.write(
        "base/deployment.yaml",
        "apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.24
        env: [{name: LEVEL, value: info}]
      - name: proxy
        image: envoy:1.0
      volumes:
      - name: config
        configMap: {name: app-config}
",
    )?;
    for (overlay, tag, replicas) in [("dev", "1.25", 2), ("prod", "1.26", 3)] {
        let target = format!("{ns}-{overlay}");
        repo.write(
            &format!("overlays/{overlay}/kustomization.yaml"),
            &format!(
                "namespace: {target}
resources: [namespace.yaml, ../../base]
images:
- {{name: nginx, newTag: \"{tag}\"}}
patches:
- patch: |
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: web}}
    spec:
      template:
        spec:
          containers:
          - name: web
            env: [{{name: LEVEL, value: {overlay}}}]
patchesJson6902:
- target: {{group: apps, version: v1, kind: Deployment, name: web}}
  patch: |
    - {{op: replace, path: /spec/replicas, value: {replicas}}}
"
            ),
        )?;
        repo.write(
            &format!("overlays/{overlay}/namespace.yaml"),
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: placeholder}\n",
        )?;
    }
    let first = repo.commit("base and overlays")?;
    let _skewer = f.start(&[])?;
    for overlay in ["dev", "prod"] {
        kustomization(
            &ns,
            overlay,
            "src",
            &format!("./overlays/{overlay}"),
            "  prune: true\n",
        )?;
    }
    for overlay in ["dev", "prod"] {
        wait_applied(&c, &ns, overlay, &first).await?;
    }

    for (overlay, tag, replicas) in [("dev", "1.25", 2), ("prod", "1.26", 3)] {
        let target = format!("{ns}-{overlay}");
        let (d, config) = mounted(&c, &target).await?;
        let spec = d.spec.context("spec")?;
        assert_eq!(spec.replicas, Some(replicas), "the JSON 6902 patch");
        let pod = spec.template.spec.context("pod spec")?;
        assert_eq!(
            pod.containers.len(),
            2,
            "the strategic merge kept the proxy"
        );
        let web = &pod.containers[0];
        assert_eq!(web.image.as_deref(), Some(format!("nginx:{tag}").as_str()));
        let env = web.env.as_ref().context("env")?;
        assert_eq!(
            env[0].value.as_deref(),
            Some(overlay),
            "the strategic merge patch"
        );
        assert_eq!(
            generated(&c, &target).await?,
            std::slice::from_ref(&config),
            "the generated name is referenced"
        );
        assert_ne!(config, "app-config", "with its content hash");
    }
    let (_, before) = mounted(&c, &format!("{ns}-dev")).await?;

    // A new generator file is a new name, rolled into the Deployment; the old one is pruned.
    repo.write("base/app.properties", "greeting=hi\n")?;
    let second = repo.commit("new greeting")?;
    for overlay in ["dev", "prod"] {
        wait_applied(&c, &ns, overlay, &second).await?;
    }
    let (_, after) = mounted(&c, &format!("{ns}-dev")).await?;
    assert_ne!(before, after);
    eventually("the old ConfigMap to be pruned", WAIT, || async {
        let names = generated(&c, &format!("{ns}-dev")).await?;
        Ok((names == [after.clone()]).then_some(()))
    })
    .await?;
    let cm: ConfigMap = Api::namespaced(c.clone(), &format!("{ns}-dev"))
        .get(&after)
        .await?;
    assert_eq!(
        cm.data
            .unwrap_or_default()
            .get("app.properties")
            .map(String::as_str),
        Some("greeting=hi\n")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_kustomizations_stall_naming_file_and_field_and_apply_nothing() -> Result<()> {
    let f = Fixture::new("kzno").await?;
    let (ns, repo) = (f.ns.clone(), &f.repo);
    let cm = |name: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\n")
    };
    repo.write("vars/kustomization.yaml", "resources: [cm.yaml]\nvars:\n- name: X\n  objref: {apiVersion: v1, kind: ConfigMap, name: from-vars}\n")?;
    repo.write("vars/cm.yaml", &cm("from-vars"))?;
    repo.write(
        "remote/kustomization.yaml",
        "resources:\n- cm.yaml\n- https://github.com/example/app//deploy?ref=v1\n",
    )?;
    repo.write("remote/cm.yaml", &cm("from-remote"))?;
    repo.write(
        "escape/deep/kustomization.yaml",
        "resources: [cm.yaml, ../../../..]\n",
    )?;
    repo.write("escape/deep/cm.yaml", &cm("from-escape"))?;
    repo.commit("refused")?;
    let _skewer = f.start(&[])?;
    let cases = [
        ("vars", "./vars", "vars/kustomization.yaml: vars: "),
        (
            "remote",
            "./remote",
            "remote/kustomization.yaml: resources[1]: ",
        ),
        (
            "escape",
            "./escape/deep",
            "escape/deep/kustomization.yaml: resources[1]: '../../../..' leads outside the source",
        ),
    ];
    for (name, path, _) in cases {
        kustomization(&ns, name, "src", path, "  prune: true\n")?;
    }
    let stalled = "jsonpath={.status.conditions[?(@.type==\"Stalled\")].message}";
    for (name, _, want) in cases {
        eventually(&format!("{name} to stall"), WAIT, || async {
            let message = kc(&["get", "kustomization", name, "-n", &ns, "-o", stalled])?;
            Ok(message.starts_with(want).then_some(()))
        })
        .await?;
    }
    for name in ["from-vars", "from-remote", "from-escape"] {
        assert!(
            exists(&f.c, "v1", "ConfigMap", &ns, name).await?.is_none(),
            "{name} was applied"
        );
    }
    Ok(())
}
