//! Issue 10 acceptance: OCIRepositories against a real registry on loopback (Debian's
//! docker-registry), artifacts pushed by `skewer push artifact` and by skopeo, applied by
//! Kustomizations; semver, digest pins, logins, cosign keys, hostile layers.

mod common;

use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use common::*;
use kube::Api;
use skewer_api::{Kustomization, OCIRepository};
use skewer_e2e::registry::{Blob, Registry, copy_tag, push_with_skopeo};
use skewer_e2e::{eventually, kc_apply};

/// An OCIRepository `src` for `url` polled every second; `extra` is more spec lines.
fn oci_repository(ns: &str, url: &str, extra: &str) -> Result<()> {
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: OCIRepository\nmetadata: {{name: src, namespace: {ns}}}\nspec:\n  url: {url}\n  interval: 1s\n  insecure: true\n{extra}"
    ))
}

/// A Kustomization `app` of the OCIRepository `src`'s root, pruning.
fn oci_kustomization(ns: &str) -> Result<()> {
    kc_apply(&format!(
        "apiVersion: skewer.dev/v1alpha1\nkind: Kustomization\nmetadata: {{name: app, namespace: {ns}}}\nspec:\n  sourceRef: {{kind: OCIRepository, name: src}}\n  path: ./\n  interval: 1m\n  retryInterval: 2s\n  prune: true\n"
    ))
}

/// A directory with one ConfigMap `cfg` whose `value` is `value`.
fn tree(ns: &str, value: &str) -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("cm.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {ns}}}\ndata: {{value: {value}}}\n"
        ),
    )?;
    Ok(dir)
}

/// `skewer push artifact` of `dir` to `<url>:<tag>`; returns the digest.
fn push(registry: &Registry, url: &str, tag: &str, dir: &Path, extra: &[&str]) -> Result<String> {
    registry.push_with_skewer(url, tag, dir, extra)
}

/// `curl` of `url` (the path sent as written, `..` included): the status code and the body.
fn curl(url: &str) -> Result<(u16, Vec<u8>)> {
    let out = std::process::Command::new("curl")
        .args(["-s", "--path-as-is", "-w", "\n%{http_code}", url])
        .output()?;
    let mut body = out.stdout;
    let split = body
        .iter()
        .rposition(|b| *b == b'\n')
        .context("curl printed no status")?;
    let code = String::from_utf8_lossy(&body[split + 1..]).trim().parse()?;
    body.truncate(split);
    Ok((code, body))
}

async fn configmap_value(c: &kube::Client, ns: &str) -> Result<Option<String>> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(c.clone(), ns);
    Ok(api
        .get_opt("cfg")
        .await?
        .and_then(|cm| cm.data)
        .and_then(|d| d.get("value").cloned()))
}

async fn applied_revision(c: &kube::Client, ns: &str) -> Result<Option<String>> {
    let api: Api<Kustomization> = Api::namespaced(c.clone(), ns);
    Ok(api
        .get("app")
        .await?
        .status
        .and_then(|s| s.last_applied_revision))
}

/// Waits until the OCIRepository `src` failed (Ready=False) with a message containing every
/// one of `needles`.
async fn wait_source_failed(
    c: &kube::Client,
    ns: &str,
    reason: &str,
    needles: &[&str],
) -> Result<String> {
    let (_, message) =
        wait_source_condition_of::<OCIRepository>(c, ns, "src", "Ready", "False", |r, m| {
            r == reason && needles.iter().all(|n| m.contains(n))
        })
        .await?;
    Ok(message)
}

#[tokio::test(flavor = "multi_thread")]
async fn pushed_artifacts_are_applied_semver_moves_digests_pin_and_an_unchanged_tag_downloads_nothing()
-> Result<()> {
    let registry = Registry::start()?;
    let ns = skewer_e2e::namespace("oci")?;
    let c = client().await;
    let url = registry.url("team/app");
    let v1 = push(&registry, &url, "v1.0.0", tree(&ns, "one")?.path(), &[])?;
    // The same directory, source and revision give the same digest.
    assert_eq!(
        push(&registry, &url, "v1.0.0", tree(&ns, "one")?.path(), &[])?,
        v1
    );

    let port = skewer_e2e::git::free_port()?;
    let storage = format!("127.0.0.1:{port}");
    let _skewer = skewer_e2e::Skewer::start_with(&ns, &["--storage-addr", &storage])?;
    oci_repository(&ns, &url, "  ref: {semver: '>=1.0.0'}\n")?;
    oci_kustomization(&ns)?;
    wait_applied(&c, &ns, "app", &format!("v1.0.0@{v1}")).await?;
    assert_eq!(configmap_value(&c, &ns).await?.as_deref(), Some("one"));
    let st = source_status::<OCIRepository>(&c, &ns, "src").await?;
    let artifact = st.artifact.context("artifact")?;
    assert_eq!(
        artifact.metadata["org.opencontainers.image.source"],
        "https://git.example.com/app"
    );
    assert_eq!(
        artifact.metadata["org.opencontainers.image.revision"],
        "v1.0.0@sha1:0123"
    );

    // Served as Flux's source-controller serves artifacts: exactly the bytes of the digest.
    let served = artifact.url.clone().context("status.artifact.url")?;
    assert!(
        served.starts_with(&format!("http://{storage}/ocirepository/{ns}/src/")),
        "{served}"
    );
    let (code, body) = curl(&served)?;
    assert_eq!(code, 200);
    assert_eq!(skewer_sources::artifact::digest_of(&body), artifact.digest);
    let escape = format!("http://{storage}/ocirepository/{ns}/../../etc/passwd");
    assert_eq!(curl(&escape)?.0, 404, "{escape}");

    // Unchanged: tags are listed and nothing else is downloaded, reconcile after reconcile.
    let blobs = registry.requests("\"GET /v2/team/app/blobs/")?;
    let lists = registry.requests("\"GET /v2/team/app/tags/list")?;
    eventually("three more polls of the tag list", WAIT, || async {
        Ok((registry.requests("\"GET /v2/team/app/tags/list")? >= lists + 3).then_some(()))
    })
    .await?;
    assert_eq!(
        registry.requests("\"GET /v2/team/app/blobs/")?,
        blobs,
        "an unchanged ref downloaded blobs"
    );
    assert_eq!(
        registry.requests("\"GET /v2/team/app/manifests/")?,
        1,
        "one manifest GET, for the first pull"
    );

    // A higher version is picked up; a lower one is not.
    let v2 = push(&registry, &url, "v1.1.0", tree(&ns, "two")?.path(), &[])?;
    push(&registry, &url, "v0.9.0", tree(&ns, "old")?.path(), &[])?;
    wait_applied(&c, &ns, "app", &format!("v1.1.0@{v2}")).await?;
    assert_eq!(configmap_value(&c, &ns).await?.as_deref(), Some("two"));
    // Only current artifacts are served.
    assert_eq!(
        curl(&served)?.0,
        404,
        "the replaced artifact is still served"
    );

    // A digest pins, whatever the tags say.
    oci_repository(
        &ns,
        &url,
        &format!("  ref: {{digest: '{v1}', semver: '>=1.0.0'}}\n"),
    )?;
    wait_applied(&c, &ns, "app", &v1).await?;
    assert_eq!(
        applied_revision(&c, &ns).await?.as_deref(),
        Some(v1.as_str())
    );
    assert_eq!(configmap_value(&c, &ns).await?.as_deref(), Some("one"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_behind_a_login_is_read_with_a_dockerconfigjson_secret() -> Result<()> {
    let registry = Registry::start_with_login("ci", "s3cret-pass")?;
    let ns = skewer_e2e::namespace("ocilogin")?;
    let c = client().await;
    let url = registry.url("app");
    let digest = push(&registry, &url, "latest", tree(&ns, "one")?.path(), &[])?;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    oci_repository(&ns, &url, "")?;
    oci_kustomization(&ns)?;
    let message = wait_source_failed(&c, &ns, "AuthenticationFailed", &[&url]).await?;
    assert!(!message.contains("s3cret"), "{message}");

    let config = registry.docker_config().context("login")?;
    put_secret(&c, &ns, "regcred", &[(".dockerconfigjson", &config)]).await?;
    oci_repository(&ns, &url, "  secretRef: {name: regcred}\n")?;
    wait_applied(&c, &ns, "app", &format!("latest@{digest}")).await?;
    assert_eq!(configmap_value(&c, &ns).await?.as_deref(), Some("one"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn only_artifacts_signed_by_a_trusted_key_are_applied_and_each_refusal_says_why() -> Result<()>
{
    let registry = Registry::start()?;
    let ns = skewer_e2e::namespace("cosign")?;
    let c = client().await;
    let keys = tempfile::tempdir()?;
    let keygen = |name: &str| -> Result<std::path::PathBuf> {
        let prefix = keys.path().join(name);
        let out = std::process::Command::new(skewer_e2e::skewer_bin())
            .args(["generate-key-pair", "--output-key-prefix"])
            .arg(&prefix)
            .output()?;
        if !out.status.success() {
            bail!(
                "generate-key-pair: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(prefix)
    };
    let (trusted, stranger) = (keygen("release")?, keygen("stranger")?);
    let url = registry.url("signed");
    let key_arg = |p: &Path| p.with_extension("key").display().to_string();
    let signed = push(
        &registry,
        &url,
        "v1",
        tree(&ns, "one")?.path(),
        &["--sign-key", &key_arg(&trusted)],
    )?;

    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    let public = std::fs::read_to_string(trusted.with_extension("pub"))?;
    put_secret(&c, &ns, "cosign-keys", &[("release.pub", &public)]).await?;
    oci_repository(
        &ns,
        &url,
        "  ref: {tag: v1}\n  verify: {provider: cosign, secretRef: {name: cosign-keys}}\n",
    )?;
    oci_kustomization(&ns)?;
    wait_applied(&c, &ns, "app", &format!("v1@{signed}")).await?;
    let message = wait_source_verified::<OCIRepository>(&c, &ns, "src").await?;
    assert!(message.contains("release.pub"), "{message}");

    // The tag moves to an unsigned artifact: refused, nothing extracted, v1 stays applied.
    let unsigned = push(&registry, &url, "v1", tree(&ns, "unsigned")?.path(), &[])?;
    let message = wait_source_failed(&c, &ns, "VerificationError", &[&unsigned]).await?;
    assert!(message.contains("not signed"), "{message}");
    wait_source_condition_of::<OCIRepository>(&c, &ns, "src", "SourceVerified", "False", |_, m| {
        m.contains("not signed")
    })
    .await?;

    // Signed by a key nobody trusts.
    let strangers = push(
        &registry,
        &url,
        "v1",
        tree(&ns, "stranger")?.path(),
        &["--sign-key", &key_arg(&stranger)],
    )?;
    let message = wait_source_failed(
        &c,
        &ns,
        "VerificationError",
        &[&strangers, "keys 'release.pub'"],
    )
    .await?;
    assert!(
        message.contains("no signature") && message.contains("keys 'release.pub'"),
        "{message}"
    );

    // A trusted signature copied from another artifact: its payload names that artifact.
    let replayed = push(&registry, &url, "v1", tree(&ns, "replayed")?.path(), &[])?;
    let sig = |d: &str| format!("{}.sig", d.replacen(':', "-", 1));
    copy_tag(&registry, "signed", &sig(&signed), &sig(&replayed))?;
    let message =
        wait_source_failed(&c, &ns, "VerificationError", &[&replayed, "names another"]).await?;
    assert!(
        message.contains("names another artifact") && message.contains(&signed),
        "{message}"
    );

    assert_eq!(
        applied_revision(&c, &ns).await?,
        Some(format!("v1@{signed}"))
    );
    assert_eq!(configmap_value(&c, &ns).await?.as_deref(), Some("one"));
    let st = source_status::<OCIRepository>(&c, &ns, "src").await?;
    assert_eq!(
        st.artifact.map(|a| a.revision),
        Some(format!("v1@{signed}"))
    );
    Ok(())
}

/// `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The base64 body of a PEM block (the DER, base64-encoded).
fn pem_body(pem: &str) -> String {
    pem.lines().filter(|l| !l.starts_with("-----")).collect()
}

/// A private Sigstore made with openssl and skewer's own key generation: a Fulcio-like CA,
/// a Rekor-like log key, and the trusted_root.json naming both.
struct Sigstore {
    dir: tempfile::TempDir,
    log: skewer_sources::oci::cosign::Signer,
    log_id: String,
    trusted_root: String,
}

impl Sigstore {
    fn new() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        Self::new_ca(dir.path())?;
        let (log, log_pub) = skewer_sources::oci::cosign::Signer::generate()?;
        let log_der = base64::engine::general_purpose::STANDARD.decode(pem_body(&log_pub))?;
        let log_id = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&log_der));
        let ca = std::fs::read_to_string(dir.path().join("ca.crt"))?;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let trusted_root = serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{
                "baseUrl": "https://rekor.skewer.test",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": pem_body(&log_pub),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": "2020-01-01T00:00:00Z"}
                },
                "logId": {"keyId": b64(&hex::decode(&log_id)?)}
            }],
            "certificateAuthorities": [{
                "subject": {"organization": "skewer-e2e", "commonName": "fulcio"},
                "uri": "https://fulcio.skewer.test",
                "certChain": {"certificates": [{"rawBytes": pem_body(&ca)}]},
                "validFor": {"start": "2020-01-01T00:00:00Z"}
            }]
        })
        .to_string();
        Ok(Self {
            dir,
            log,
            log_id,
            trusted_root,
        })
    }

    /// A new CA key and certificate in `dir`, replacing any there.
    fn new_ca(dir: &Path) -> Result<()> {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-384",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "30",
                "-subj",
                "/O=skewer-e2e/CN=fulcio",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        )
    }

    /// Signs `digest` of `url` keylessly as (`issuer`, `subject`): a fresh key, a
    /// certificate for it from the CA, a signature, and the log's signed entry for it; stored
    /// beside the artifact as cosign stores keyless signatures.
    async fn sign(&self, url: &str, digest: &str, issuer: &str, subject: &str) -> Result<()> {
        use skewer_sources::oci::cosign::{self, SIGNATURE_ANNOTATION, Signer};
        use skewer_sources::oci::keyless::{BUNDLE_ANNOTATION, CERTIFICATE_ANNOTATION};
        use skewer_sources::oci::registry::{Access, Registry as Client, Repository};
        let d = self.dir.path();
        let (key, _) = Signer::generate()?;
        std::fs::write(d.join("leaf.key"), key.private_pem()?)?;
        std::fs::write(
            d.join("leaf.ext"),
            format!(
                "keyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n\
                 basicConstraints=critical,CA:FALSE\nsubjectAltName=critical,URI:{subject}\n\
                 1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:{issuer}\n"
            ),
        )?;
        openssl(
            d,
            &[
                "req",
                "-new",
                "-key",
                "leaf.key",
                "-subj",
                "/O=skewer-e2e",
                "-out",
                "leaf.csr",
            ],
        )?;
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "leaf.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                "leaf.ext",
                "-out",
                "leaf.crt",
            ],
        )?;
        let cert = std::fs::read_to_string(d.join("leaf.crt"))?;
        let repo = Repository::parse(url)?;
        let payload = cosign::payload(&repo, digest);
        let signature = key.sign(&payload)?;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let body = serde_json::json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {
                    "algorithm": "sha256",
                    "value": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&payload))
                }},
                "signature": {"content": signature, "publicKey": {"content": b64(cert.as_bytes())}}
            }
        });
        let body = b64(body.to_string().as_bytes());
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        // The signed entry timestamp signs the canonical JSON of the entry's summary.
        let canonical = format!(
            r#"{{"body":"{body}","integratedTime":{time},"logID":"{}","logIndex":7}}"#,
            self.log_id
        );
        let bundle = serde_json::json!({
            "SignedEntryTimestamp": self.log.sign(canonical.as_bytes())?,
            "Payload": {"body": body, "integratedTime": time, "logIndex": 7, "logID": self.log_id}
        });
        let annotations = [
            (SIGNATURE_ANNOTATION, signature),
            (CERTIFICATE_ANNOTATION, cert),
            (BUNDLE_ANNOTATION, bundle.to_string()),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .into();
        let client = Client::new(&Access {
            login: None,
            insecure: true,
        })?;
        cosign::attach(&client, &repo, digest, payload, annotations).await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn keyless_signatures_are_checked_offline_against_a_trusted_root_and_identities() -> Result<()>
{
    let registry = Registry::start()?;
    let ns = skewer_e2e::namespace("keyless")?;
    let c = client().await;
    let sigstore = Sigstore::new()?;
    let url = registry.url("keyless");
    let actions = "https://token.actions.githubusercontent.com";
    let release =
        "https://github.com/example/platform/.github/workflows/release.yml@refs/heads/main";
    let signed = push(&registry, &url, "v1", tree(&ns, "one")?.path(), &[])?;
    sigstore.sign(&url, &signed, actions, release).await?;

    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    put_secret(
        &c,
        &ns,
        "sigstore",
        &[("trusted_root.json", &sigstore.trusted_root)],
    )
    .await?;
    let verify = |subject: &str| {
        format!(
            "  ref: {{tag: v1}}\n  verify:\n    provider: cosign\n    secretRef: {{name: sigstore}}\n    matchOIDCIdentity:\n    - {{issuer: '^https://token\\.actions\\.githubusercontent\\.com$', subject: '{subject}'}}\n"
        )
    };
    oci_repository(
        &ns,
        &url,
        &verify("^https://github\\.com/example/platform/\\.github/workflows/release\\.yml@"),
    )?;
    oci_kustomization(&ns)?;
    let message = wait_source_verified::<OCIRepository>(&c, &ns, "src").await?;
    assert!(
        message.contains(release) && message.contains(actions),
        "{message}"
    );
    wait_applied(&c, &ns, "app", &format!("v1@{signed}")).await?;

    // The tag moves to an artifact signed by another workflow: refused, naming who signed.
    let pr = "https://github.com/example/platform/.github/workflows/pr.yml@refs/pull/1/merge";
    let other = push(&registry, &url, "v1", tree(&ns, "two")?.path(), &[])?;
    sigstore.sign(&url, &other, actions, pr).await?;
    let signer = format!("subject '{pr}'");
    let message = wait_source_failed(&c, &ns, "VerificationError", &[&other, &signer]).await?;
    assert!(message.contains("matchOIDCIdentity"), "{message}");

    // The allowed identity, logged by the trusted log, but certified by a CA the trusted
    // root does not name.
    let forged = push(&registry, &url, "v1", tree(&ns, "three")?.path(), &[])?;
    Sigstore::new_ca(sigstore.dir.path())?;
    sigstore.sign(&url, &forged, actions, release).await?;
    let message = wait_source_failed(
        &c,
        &ns,
        "VerificationError",
        &[&forged, "trusted root issued"],
    )
    .await?;
    assert!(
        message.contains("not one the trusted root issued"),
        "{message}"
    );

    assert_eq!(
        applied_revision(&c, &ns).await?,
        Some(format!("v1@{signed}"))
    );
    assert_eq!(configmap_value(&c, &ns).await?.as_deref(), Some("one"));

    // The command line checks the same signature against the same root.
    let root = sigstore.dir.path().join("trusted_root.json");
    std::fs::write(&root, &sigstore.trusted_root)?;
    let pull = |identity: &str| {
        std::process::Command::new(skewer_e2e::skewer_bin())
            .args([
                "pull",
                "artifact",
                &format!("{url}@{signed}"),
                "--insecure",
                "--trusted-root",
            ])
            .arg(&root)
            .args([
                "--certificate-oidc-issuer-regexp",
                actions,
                "--certificate-identity-regexp",
                identity,
            ])
            .output()
    };
    let out = pull("release\\.yml")?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = pull("pr\\.yml")?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no signature"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A `.tar.gz` of `entries` (path, contents), paths written as given: a test's own hostile
/// layers, which no well-behaved tool would make.
fn raw_layer(entries: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    let entries: Vec<Entry> = entries.iter().map(|(p, d)| Entry::File(p, d)).collect();
    raw_layer_of(&entries)
}

/// An entry of a hand-made layer.
enum Entry<'a> {
    File(&'a str, &'a [u8]),
    Link(&'a str, &'a str, tar::EntryType),
}

fn raw_layer_of(entries: &[Entry]) -> Result<Vec<u8>> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for entry in entries {
        let mut header = tar::Header::new_old();
        let (path, data, kind, link) = match entry {
            Entry::File(p, d) => (*p, *d, tar::EntryType::Regular, None),
            Entry::Link(p, to, kind) => (*p, &[][..], *kind, Some(*to)),
        };
        let old = header.as_old_mut();
        old.name[..path.len()].copy_from_slice(path.as_bytes());
        if let Some(to) = link {
            old.linkname[..to.len()].copy_from_slice(to.as_bytes());
        }
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(kind);
        header.set_cksum();
        tar.append(&header, data)?;
    }
    Ok(tar.into_inner()?.finish()?)
}

#[tokio::test(flavor = "multi_thread")]
async fn artifacts_from_other_tools_are_read_by_media_type_and_hostile_layers_are_refused()
-> Result<()> {
    let registry = Registry::start()?;
    let ns = skewer_e2e::namespace("ocilayout")?;
    let c = client().await;
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {ns}}}\ndata: {{value: skopeo}}\n"
    );
    let flux_config = Blob {
        media_type: "application/vnd.cncf.flux.config.v1+json".into(),
        data: b"{}".to_vec(),
    };
    let annotations =
        serde_json::json!({"org.opencontainers.image.source": "https://elsewhere.example.com/app"});
    // Flux's format, written by hand and pushed by skopeo.
    let flux = push_with_skopeo(
        &registry,
        "app",
        "flux",
        &flux_config,
        &[Blob {
            media_type: "application/vnd.cncf.flux.content.v1.tar+gzip".into(),
            data: raw_layer(&[("cm.yaml", cm.as_bytes())])?,
        }],
        annotations.clone(),
    )?;
    let _skewer = skewer_e2e::Skewer::start(&ns)?;
    oci_repository(&ns, &registry.url("app"), "  ref: {tag: flux}\n")?;
    oci_kustomization(&ns)?;
    wait_applied(&c, &ns, "app", &format!("flux@{flux}")).await?;
    assert_eq!(configmap_value(&c, &ns).await?.as_deref(), Some("skopeo"));

    // Another tool's layer type: refused by a selector naming Flux's, read when it names its own.
    let other_type = "application/vnd.example.manifests.v1.tar+gzip";
    let other = push_with_skopeo(
        &registry,
        "app",
        "other",
        &flux_config,
        &[Blob {
            media_type: other_type.into(),
            data: raw_layer(&[("cm.yaml", cm.replace("skopeo", "other").as_bytes())])?,
        }],
        annotations.clone(),
    )?;
    oci_repository(
        &ns,
        &registry.url("app"),
        "  ref: {tag: other}\n  layerSelector: {mediaType: application/vnd.cncf.flux.content.v1.tar+gzip}\n",
    )?;
    let message =
        wait_source_failed(&c, &ns, "OCIArtifactLayerOperationFailed", &[other_type]).await?;
    assert!(message.contains("no layer has media type"), "{message}");
    oci_repository(
        &ns,
        &registry.url("app"),
        &format!("  ref: {{tag: other}}\n  layerSelector: {{mediaType: {other_type}}}\n"),
    )?;
    wait_applied(&c, &ns, "app", &format!("other@{other}")).await?;
    assert_eq!(configmap_value(&c, &ns).await?.as_deref(), Some("other"));

    // Hostile layers: each refused naming its entry; nothing applied, nothing written.
    let many: Vec<(String, Vec<u8>)> = (0..100_001)
        .map(|i| (format!("f{i}"), Vec::new()))
        .collect();
    let many: Vec<(&str, &[u8])> = many
        .iter()
        .map(|(p, d)| (p.as_str(), d.as_slice()))
        .collect();
    let bomb = vec![0u8; 300 << 20];
    for (tag, layer, needle) in [
        (
            "dotdot",
            raw_layer(&[("../escape.yaml", b"x: 1\n")])?,
            "'../escape.yaml'",
        ),
        (
            "absolute",
            raw_layer(&[("/etc/escape.yaml", b"x: 1\n")])?,
            "'/etc/escape.yaml'",
        ),
        (
            "symlink",
            raw_layer_of(&[Entry::Link(
                "cm.yaml",
                "../../../etc/passwd",
                tar::EntryType::Symlink,
            )])?,
            "'cm.yaml': links to '../../../etc/passwd'",
        ),
        (
            "hardlink",
            raw_layer_of(&[Entry::Link("cm.yaml", "/etc/passwd", tar::EntryType::Link)])?,
            "'cm.yaml': links to '/etc/passwd'",
        ),
        ("bomb", raw_layer(&[("bomb.bin", &bomb)])?, "inflates"),
        ("many", raw_layer(&many)?, "entries"),
    ] {
        push_with_skopeo(
            &registry,
            "app",
            tag,
            &flux_config,
            &[Blob {
                media_type: "application/vnd.cncf.flux.content.v1.tar+gzip".into(),
                data: layer,
            }],
            annotations.clone(),
        )?;
        oci_repository(
            &ns,
            &registry.url("app"),
            &format!("  ref: {{tag: {tag}}}\n"),
        )?;
        let message =
            wait_source_failed(&c, &ns, "OCIArtifactLayerOperationFailed", &[needle]).await?;
        assert!(message.contains("layer sha256:"), "{tag}: {message}");
        assert_eq!(
            applied_revision(&c, &ns).await?,
            Some(format!("other@{other}")),
            "{tag}"
        );
    }
    Ok(())
}
