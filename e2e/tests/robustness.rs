//! No input can stop the daemon: specs a tenant could write to hurt everyone are refused on
//! their own object, while every other object keeps reconciling and healing.

mod common;

use anyhow::Result;
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
