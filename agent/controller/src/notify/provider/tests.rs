use super::*;
use crate::api::LocalObjectReference;
use crate::notify::event::{InvolvedObject, REVISION_KEY};

const SHA: &str = "0df2d77f9e3c8a1b2c3d4e5f60718293a4b5c6d7";
const UID: &str = "8e1f2a3b-1111-2222-3333-444455556666";

fn event(phase: Phase) -> Event {
    let severity = if phase == Phase::Failed {
        Severity::Error
    } else {
        Severity::Info
    };
    Event {
        involved_object: InvolvedObject {
            kind: "Kustomization".into(),
            namespace: "apps".into(),
            name: "Web".into(),
            uid: "k-1".into(),
            api_version: "skewer.dev/v1alpha1".into(),
        },
        severity,
        timestamp: "2026-11-26T00:00:00Z".into(),
        message: "Applied revision: main@sha1:0df2d77\nsecond line".into(),
        reason: "ReconciliationSucceeded".into(),
        metadata: [(REVISION_KEY.to_string(), format!("main@sha1:{SHA}"))].into(),
        reporting_controller: "skewer".into(),
        reporting_instance: "skewer-0".into(),
        labels: BTreeMap::new(),
        phase,
    }
}

fn provider(kind: &str, address: &str) -> ProviderSpec {
    ProviderSpec {
        kind: kind.into(),
        address: Some(address.into()),
        secret_ref: Some(LocalObjectReference {
            name: "token".into(),
        }),
        ..Default::default()
    }
}

fn secret(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect()
}

fn endpoint(kind: &str, address: &str) -> Endpoint {
    Endpoint::new(
        &provider(kind, address),
        UID,
        Some(&secret(&[("token", "s3cret")])),
    )
    .expect("a valid provider")
}

fn body(o: &Outgoing) -> Value {
    serde_json::from_slice(&o.body).expect("JSON body")
}

fn header<'a>(o: &'a Outgoing, name: &str) -> Option<&'a str> {
    o.headers
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn github_statuses_go_to_the_commit_with_fluxs_context() {
    let ep = endpoint("github", "https://github.com/org/repo.git");
    let o = ep.request(&event(Phase::Started)).expect("a status");
    assert_eq!(
        o.url,
        format!("https://api.github.com/repos/org/repo/statuses/{SHA}")
    );
    assert_eq!(header(&o, "authorization"), Some("Bearer s3cret"));
    let b = body(&o);
    assert_eq!(b["state"], "pending");
    assert_eq!(b["context"], "kustomization/web/8e1f2a3b");
    assert_eq!(b["description"], "Applied revision: main@sha1:0df2d77");
    assert_eq!(
        body(&ep.request(&event(Phase::Succeeded)).unwrap())["state"],
        "success"
    );
    assert_eq!(
        body(&ep.request(&event(Phase::Failed)).unwrap())["state"],
        "failure"
    );
}

#[test]
fn github_enterprise_uses_api_v3() {
    for address in [
        "https://ghe.example.com/org/repo",
        "ssh://git@ghe.example.com:2222/org/repo.git",
        "git@ghe.example.com:org/repo.git",
    ] {
        let o = endpoint("github", address)
            .request(&event(Phase::Succeeded))
            .unwrap();
        assert_eq!(
            o.url,
            format!("https://ghe.example.com/api/v3/repos/org/repo/statuses/{SHA}"),
            "{address}"
        );
    }
    let o = endpoint("github", "https://127.0.0.1:8443/org/repo")
        .request(&event(Phase::Succeeded))
        .unwrap();
    assert!(
        o.url.starts_with("https://127.0.0.1:8443/api/v3/"),
        "{}",
        o.url
    );
}

#[test]
fn gitlab_gitea_and_bitbucket_server_speak_their_own_apis() {
    let o = endpoint("gitlab", "https://gitlab.example.com/group/sub/project")
        .request(&event(Phase::Failed))
        .unwrap();
    assert_eq!(
        o.url,
        format!("https://gitlab.example.com/api/v4/projects/group%2Fsub%2Fproject/statuses/{SHA}")
    );
    assert_eq!(header(&o, "private-token"), Some("s3cret"));
    assert_eq!(body(&o)["state"], "failed");
    assert_eq!(body(&o)["name"], "kustomization/web/8e1f2a3b");

    let o = endpoint("gitea", "https://gitea.example.com/org/repo")
        .request(&event(Phase::Succeeded))
        .unwrap();
    assert_eq!(
        o.url,
        format!("https://gitea.example.com/api/v1/repos/org/repo/statuses/{SHA}")
    );
    assert_eq!(header(&o, "authorization"), Some("token s3cret"));

    let o = endpoint("bitbucketserver", "https://bb.example.com/scm/PRJ/repo.git")
        .request(&event(Phase::Started))
        .unwrap();
    assert_eq!(
        o.url,
        format!(
            "https://bb.example.com/rest/api/latest/projects/PRJ/repos/repo/commits/{SHA}/builds"
        )
    );
    assert_eq!(body(&o)["state"], "INPROGRESS");
    assert_eq!(body(&o)["key"], "kustomization/web/8e1f2a3b");
}

#[test]
fn no_commit_status_without_a_git_commit() {
    let ep = endpoint("github", "https://github.com/org/repo");
    let mut e = event(Phase::Succeeded);
    e.metadata
        .insert(REVISION_KEY.into(), "v1@sha256:abcdef".into());
    assert_eq!(ep.request(&e), None, "an OCI digest is no commit");
    e.metadata.clear();
    assert_eq!(ep.request(&e), None);
}

#[test]
fn generic_hmac_signs_the_body_as_flux_does() {
    let ep = endpoint("generic-hmac", "https://hooks.example.com/in");
    let o = ep.request(&event(Phase::Failed)).unwrap();
    let expected = {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(&o.body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    };
    assert_eq!(header(&o, "x-signature"), Some(expected.as_str()));
    assert_eq!(header(&o, "gotk-component"), Some("skewer"));
    assert_eq!(header(&o, "authorization"), None, "the key is not sent");
    let b = body(&o);
    assert_eq!(b["involvedObject"]["name"], "Web");
    assert_eq!(b["severity"], "error");
}

#[test]
fn chats_get_messages_but_not_a_syncs_start() {
    let slack = endpoint("slack", "https://hooks.slack.com/services/T/B/X");
    assert_eq!(slack.request(&event(Phase::Started)), None);
    let o = slack.request(&event(Phase::Failed)).unwrap();
    let b = body(&o);
    assert_eq!(b["attachments"][0]["color"], "danger");
    assert_eq!(b["attachments"][0]["author_name"], "kustomization/Web.apps");
    assert_eq!(b["username"], "skewer");

    let discord = endpoint("discord", "https://discord.com/api/webhooks/1/abc");
    let o = discord.request(&event(Phase::Succeeded)).unwrap();
    assert_eq!(o.url, "https://discord.com/api/webhooks/1/abc/slack");
    assert_eq!(header(&o, "authorization"), None);

    let teams = endpoint("msteams", "https://example.webhook.office.com/x");
    let b = body(&teams.request(&event(Phase::Succeeded)).unwrap());
    assert_eq!(
        b["attachments"][0]["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );

    let chat = endpoint("googlechat", "https://chat.googleapis.com/v1/spaces/x");
    let b = body(&chat.request(&event(Phase::Succeeded)).unwrap());
    assert!(b["text"].as_str().unwrap().contains("Applied revision"));

    let am = endpoint("alertmanager", "https://am.example.com/api/v2/alerts");
    let b = body(&am.request(&event(Phase::Failed)).unwrap());
    assert_eq!(
        b[0]["labels"]["alertname"],
        "SkewerKustomizationReconciliationSucceeded"
    );
    assert_eq!(b[0]["labels"]["severity"], "error");
    assert_eq!(b[0]["status"], "firing");
}

#[test]
fn bad_providers_are_refused_naming_the_field_and_never_a_secret() {
    let err = |spec: ProviderSpec, s: &[(&str, &str)]| {
        Endpoint::new(&spec, UID, Some(&secret(s))).unwrap_err()
    };
    let e = err(provider("pagerduty", "https://x"), &[]);
    assert!(e.starts_with("spec.type"), "{e}");
    let e = err(
        provider("github", "https://github.com/org"),
        &[("token", "t")],
    );
    assert!(e.starts_with("spec.address"), "{e}");
    let e = err(provider("github", "https://github.com/org/repo"), &[]);
    assert!(e.starts_with("spec.secretRef"), "{e}");
    // GitHub, GitLab and Gitea take a token only: a username and password would send an empty
    // one. Bitbucket Server takes either.
    let basic = [("username", "u"), ("password", "p")];
    for kind in ["github", "gitlab", "gitea"] {
        let e = err(provider(kind, "https://git.example.com/org/repo"), &basic);
        assert!(e.contains(&format!("a {kind} commit status needs")), "{e}");
        assert!(!e.contains("username"), "{e}");
    }
    let spec = provider(
        "bitbucketserver",
        "https://git.example.com/scm/org/repo.git",
    );
    Endpoint::new(&spec, UID, Some(&secret(&basic))).expect("Bitbucket Server with a password");
    let e = err(provider("generic-hmac", "https://x.example"), &[]);
    assert!(e.starts_with("spec.secretRef"), "{e}");
    let e = err(provider("slack", "ftp://x"), &[("token", "t")]);
    assert!(e.starts_with("spec.address"), "{e}");
    let mut p = provider("github", "https://github.com/org/repo");
    p.commit_status_expr = Some("'x'".into());
    let e = err(p, &[("token", "t")]);
    assert!(e.starts_with("spec.commitStatusExpr"), "{e}");
    let e = err(provider("slack", ""), &[("token", "hidden-value")]);
    assert!(!e.contains("hidden-value"));
    let ep = endpoint("slack", "https://hooks.slack.com/x");
    assert!(
        !format!("{ep:?}").contains("s3cret"),
        "Debug hides the token"
    );
}

#[test]
fn the_secrets_address_wins() {
    let ep = Endpoint::new(
        &provider("slack", "https://public.example/ignored"),
        UID,
        Some(&secret(&[(
            "address",
            "https://hooks.slack.com/services/T/B/X\n",
        )])),
    )
    .unwrap();
    let o = ep.request(&event(Phase::Failed)).unwrap();
    assert_eq!(o.url, "https://hooks.slack.com/services/T/B/X");
}

#[test]
fn long_messages_make_short_descriptions() {
    let mut e = event(Phase::Failed);
    e.message = "é".repeat(500);
    let d = description(&e);
    assert_eq!(d.chars().count(), MAX_DESCRIPTION);
    assert!(d.ends_with('…'));
}

#[test]
fn git_addresses_parse_as_flux_parses_them() {
    let ok = |a: &str| git_address(a).unwrap();
    assert_eq!(
        ok("https://github.com/org/repo.git"),
        ("https://github.com".into(), "org/repo".into())
    );
    assert_eq!(
        ok("ssh://git@gitlab.com/group/sub/project.git"),
        ("https://gitlab.com".into(), "group/sub/project".into())
    );
    assert_eq!(
        ok("http://127.0.0.1:3000/org/repo"),
        ("http://127.0.0.1:3000".into(), "org/repo".into())
    );
    for bad in [
        "",
        "github.com/org/repo",
        "https://github.com/",
        "https://github.com/org",
        "https://github.com/org/../x",
        "https://host/org/repo?x=1",
    ] {
        assert!(git_address(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn what_is_shown_hides_webhook_paths_and_credentials() {
    let slack = endpoint(
        "slack",
        "https://user:pw@hooks.slack.com/services/T/B/SECRET",
    );
    assert_eq!(slack.shown(), "https://hooks.slack.com");
    let gh = endpoint("github", "ssh://git@github.com/org/repo.git");
    assert_eq!(gh.shown(), "https://github.com/org/repo");
}
