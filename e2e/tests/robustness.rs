//! No input can stop the daemon: specs a tenant could write to hurt everyone are refused on
//! their own object, while every other object keeps reconciling and healing.

mod common;

use anyhow::{Context as _, Result};
use common::*;
use skewer_e2e::{eventually, kc, kc_apply};

/// Waits until `kind/name` is Stalled with a message naming `spec.<field>`.
async fn stalled_naming(ns: &str, kind: &str, name: &str, field: &str) -> Result<String> {
    let path = "jsonpath={.status.conditions[?(@.type==\"Stalled\")].message}";
    eventually(
        &format!("{kind}/{name} Stalled naming spec.{field}"),
        WAIT,
        || async {
            let message = kc(&["get", kind, name, "-n", ns, "-o", path])?;
            Ok(message
                .starts_with(&format!("spec.{field}: "))
                .then_some(message))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn absurd_durations_are_refused_and_never_stop_the_daemon() -> Result<()> {
    let f = Fixture::new("durations").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let mut skewer = f.app(&f.configmap(), &[], "").await?;

    let cases = [
        ("interval", "99999999999999999999h"),
        ("interval", "1e308h"),
        ("timeout", "-1s"),
        ("retryInterval", "1fortnight"),
        ("interval", "2562047h47m16.854775808s"),
    ];
    let mut by_server = 0;
    for (i, (field, value)) in cases.iter().enumerate() {
        let mut spec = format!(
            "  sourceRef: {{kind: GitRepository, name: src}}\n  path: ./\n  interval: 1m\n  {field}: \"{value}\"\n"
        );
        if *field == "interval" {
            spec = spec.replacen("  interval: 1m\n", "", 1);
        }
        let yaml = format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: bad-{i}, namespace: {ns}}}\nspec:\n{spec}"
        );
        match kc_apply(&yaml) {
            // The CRD's schema refuses the value, naming the field.
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains(&format!("spec.{field}")), "{value}: {e}");
                by_server += 1;
            }
            // Or skewer does, on that object alone.
            Ok(()) => {
                let message =
                    stalled_naming(&ns, "kustomization", &format!("bad-{i}"), field).await?;
                assert!(message.contains(value), "{message}");
            }
        }
    }
    assert!(
        (1..cases.len()).contains(&by_server),
        "both lines of defence were exercised ({by_server} refused by the schema)"
    );
    // A source's durations are checked the same way.
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: GitRepository\nmetadata: {{name: bad-src, namespace: {ns}}}\nspec:\n  url: {}\n  interval: 2562047h47m16.854775808s\n",
        f.repo.url
    ))?;
    stalled_naming(&ns, "gitrepository", "bad-src", "interval").await?;

    // The healthy Kustomization beside them still heals and still follows its source.
    kc(&["delete", "configmap", "cfg", "-n", &ns])?;
    eventually("cfg to be recreated", WAIT, || async {
        Ok(exists(&c, "v1", "ConfigMap", &ns, "cfg").await?.map(|_| ()))
    })
    .await?;
    f.repo.write(
        "more.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: more\n  namespace: {ns}\n"),
    )?;
    let commit = f.repo.commit("more")?;
    wait_applied(&c, &ns, "app", &commit).await?;
    assert!(exists(&c, "v1", "ConfigMap", &ns, "more").await?.is_some());

    assert!(skewer.is_running(), "the daemon exited:\n{}", skewer.logs());
    assert!(!skewer.logs().contains("panicked"), "{}", skewer.logs());
    Ok(())
}

/// A `.tar.gz` of one file of `size` zeros, built as it streams (the test holds no more than
/// the compressed bytes): about a megabyte for a gibibyte.
fn gzip_bomb(size: u64) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_path("zeros.yaml")?;
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append(&header, std::io::repeat(0).take(size))?;
    Ok(tar.into_inner()?.finish()?)
}

/// Issue 23: one object's field or artifact cannot eat the machine. An Application whose
/// `directory.include` is 60 KB, and a 1 GiB gzip bomb read both by an OCIRepository and by an
/// Application at once, are refused naming the limit; skewer's peak RSS stays within 64 MiB
/// of what it was idle, and the healthy Kustomization beside them keeps healing.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_globs_and_archives_are_refused_within_a_memory_bound() -> Result<()> {
    use skewer_e2e::registry::{Blob, Registry, push_with_skopeo};
    let f = Fixture::new("memory").await?;
    let (ns, c) = (f.ns.clone(), f.c.clone());
    let mut skewer = f.app(&f.configmap(), &[], "").await?;
    let pid = skewer.pid();
    let registry = Registry::start()?;
    let bomb = push_with_skopeo(
        &registry,
        "bomb",
        "v1",
        &Blob {
            media_type: "application/vnd.cncf.flux.config.v1+json".into(),
            data: b"{}".to_vec(),
        },
        &[Blob {
            media_type: "application/vnd.cncf.flux.content.v1.tar+gzip".into(),
            data: gzip_bomb(1 << 30)?,
        }],
        serde_json::json!({}),
    )?;
    let idle = skewer_e2e::measure::memory_kib(pid, "VmRSS").context("RSS")?;

    let include = format!("{}{}", "{a,b}".repeat(10), "x".repeat(60 << 10));
    let app = |name: &str, source: &str| {
        kc_apply(&format!(
            "apiVersion: skewer.dev/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  project: default\n  source: {source}\n  destination: {{server: https://kubernetes.default.svc, namespace: {ns}}}\n  syncPolicy: {{automated: {{}}}}\n"
        ))
    };
    app(
        "glob",
        &format!(
            "{{repoURL: \"{}\", targetRevision: main, path: ., directory: {{include: \"{include}\"}}}}",
            f.repo.url
        ),
    )?;
    plain_http_registry(&c, &ns, &format!("oci://{}/bomb", registry.host)).await?;
    app(
        "bomb",
        &format!(
            "{{repoURL: \"oci://{}/bomb\", targetRevision: v1, path: .}}",
            registry.host
        ),
    )?;
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: OCIRepository\nmetadata: {{name: bomb, namespace: {ns}}}\nspec:\n  url: oci://{}/bomb\n  ref: {{tag: v1}}\n  interval: 1m\n  insecure: true\n",
        registry.host
    ))?;

    let refused = |kind: &'static str, name: &'static str, needle: &'static str| {
        let ns = ns.clone();
        async move {
            let path = "jsonpath={.status.conditions[?(@.type==\"Ready\")].message}";
            eventually(&format!("{kind}/{name} refused"), WAIT, || async {
                let message = kc(&["get", kind, name, "-n", &ns, "-o", path])?;
                Ok(message.contains(needle).then_some(message))
            })
            .await
        }
    };
    let glob = refused("application", "glob", "spec.source.directory.include").await?;
    assert!(
        glob.contains("more than the 1024 a pattern may have"),
        "{glob}"
    );
    assert!(
        glob.len() < 1024,
        "the pattern is not quoted whole: {}",
        glob.len()
    );
    let oci = refused("ocirepository", "bomb", "inflates").await?;
    assert!(oci.contains(&format!("layer {}", "sha256:")), "{oci}");
    refused("application", "bomb", "inflates").await?;
    let peak = skewer_e2e::measure::memory_kib(pid, "VmHWM").context("RSS")?;
    eprintln!(
        "idle RSS {} MiB, peak after a 60 KB glob and a 1 GiB gzip bomb twice: {} MiB (bomb {bomb})",
        idle / 1024,
        peak / 1024
    );
    assert!(
        peak < idle + (64 << 10),
        "peak RSS {} KiB over idle",
        peak.saturating_sub(idle)
    );

    // The healthy Kustomization beside them still heals.
    kc(&["delete", "configmap", "cfg", "-n", &ns])?;
    eventually("cfg to be recreated", WAIT, || async {
        Ok(exists(&c, "v1", "ConfigMap", &ns, "cfg").await?.map(|_| ()))
    })
    .await?;
    assert!(skewer.is_running(), "the daemon exited:\n{}", skewer.logs());
    Ok(())
}
