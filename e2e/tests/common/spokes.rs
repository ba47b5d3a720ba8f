//! Spoke clusters for the tests that deploy to them: the two shared spokes, admin tokens
//! minted on a spoke, and cluster Secrets registering them.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Result;
use skewer_e2e::{
    apply_to, base64, client_cert, eventually, kc_apply, kc_on, server_ca, server_url, unique,
};

use super::WAIT;

/// The two spokes' kubeconfigs (admin), started once for all tests of a file.
pub fn spokes() -> (&'static Path, &'static Path) {
    static SPOKES: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let (a, b) = SPOKES.get_or_init(|| {
        let _ = skewer_e2e::hub();
        let a = skewer_e2e::cluster("spoke-a").expect("starting spoke-a");
        let b = skewer_e2e::cluster("spoke-b").expect("starting spoke-b");
        (a, b)
    });
    (a, b)
}

/// A namespace with a ConfigMap `cfg` in it (`value`), as one manifest file.
pub fn namespace_and_configmap(ns: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cfg, namespace: {ns}}}\ndata: {{value: \"{value}\"}}\n"
    )
}

/// A ServiceAccount `name` in kube-system of `spoke`, bound to cluster-admin, and its token.
pub async fn admin_token(spoke: &Path, name: &str) -> Result<String> {
    kc_on(
        spoke,
        &["create", "serviceaccount", name, "-n", "kube-system"],
    )?;
    kc_on(
        spoke,
        &[
            "create",
            "clusterrolebinding",
            name,
            "--clusterrole=cluster-admin",
            &format!("--serviceaccount=kube-system:{name}"),
        ],
    )?;
    let secret = eventually("the ServiceAccount's token Secret", WAIT, || async {
        let s = kc_on(
            spoke,
            &[
                "get",
                "sa",
                name,
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.secrets[0].name}",
            ],
        )?;
        Ok((!s.is_empty()).then_some(s))
    })
    .await?;
    token_of(spoke, &secret).await
}

/// A new token for `account` (made by [`admin_token`]), with `old_token` revoked: its Secret
/// deleted, and the spoke refusing it.
pub async fn rotate(spoke: &Path, account: &str, old_token: &str) -> Result<String> {
    let old_secret = kc_on(
        spoke,
        &[
            "get",
            "sa",
            account,
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.secrets[0].name}",
        ],
    )?;
    let new_secret = format!("{account}-rotated");
    apply_to(
        spoke,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {new_secret}\n  namespace: kube-system\n  annotations: {{kubernetes.io/service-account.name: {account}}}\ntype: kubernetes.io/service-account-token\n"
        ),
    )?;
    let new_token = token_of(spoke, &new_secret).await?;
    kc_on(
        spoke,
        &["delete", "secret", &old_secret, "-n", "kube-system"],
    )?;
    let refused = eventually("the old token to be refused", WAIT, || async {
        let out = std::process::Command::new("kubectl")
            .env("KUBECONFIG", spoke)
            .args(["--token", old_token, "get", "namespaces", "-o", "name"])
            .output()?;
        Ok((!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned()))
    })
    .await?;
    anyhow::ensure!(refused.contains("Unauthorized"), "{refused}");
    Ok(new_token)
}

/// The token in token Secret `secret` of kube-system, once the token controller filled it.
pub async fn token_of(spoke: &Path, secret: &str) -> Result<String> {
    use base64::Engine as _;
    let encoded = eventually("a token in the Secret", WAIT, || async {
        let t = kc_on(
            spoke,
            &[
                "get",
                "secret",
                secret,
                "-n",
                "kube-system",
                "-o",
                "jsonpath={.data.token}",
            ],
        )?;
        Ok((!t.is_empty()).then_some(t))
    })
    .await?;
    let token = base64::engine::general_purpose::STANDARD.decode(encoded.trim())?;
    Ok(String::from_utf8(token)?)
}

/// A cluster Secret in skewer's label, registering `spoke` as `name` with a bearer token.
pub fn token_secret(ns: &str, name: &str, spoke: &Path, token: &str) -> Result<()> {
    token_secret_allowing(ns, name, spoke, token, None)
}

/// [`token_secret`], with `skewer.dev/allowed-namespaces: <allowed>` when given.
pub fn token_secret_allowing(
    ns: &str,
    name: &str,
    spoke: &Path,
    token: &str,
    allowed: Option<&str>,
) -> Result<()> {
    let config = serde_json::json!({
        "bearerToken": token,
        "tlsClientConfig": {"caData": server_ca(spoke)?},
    });
    let annotations = allowed
        .map(|a| format!("  annotations: {{skewer.dev/allowed-namespaces: \"{a}\"}}\n"))
        .unwrap_or_default();
    kc_apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{skewer.dev/secret-type: cluster}}\n{annotations}stringData:\n  name: {name}\n  server: {}\n  config: '{config}'\n",
        server_url(spoke)?
    ))
}

/// A cluster Secret exactly as policy engines generate them for virtual clusters (Kyverno's
/// `generate` rules): Argo CD's label beside `labels` (YAML flow entries, `env: dev, team: a`),
/// `stringData` with `name`, `server` and a client certificate in `config`, registering the
/// cluster of `kubeconfig` as `name`; Secret `vcluster-<name>`.
pub fn vcluster_secret(
    ns: &str,
    name: &str,
    kubeconfig: &Path,
    labels: &str,
    allowed: Option<&str>,
) -> Result<()> {
    let (cert, key) = client_cert(kubeconfig, &unique("skewer"), Some("system:masters"))?;
    let annotations = allowed
        .map(|a| format!("  annotations: {{skewer.dev/allowed-namespaces: \"{a}\"}}\n"))
        .unwrap_or_default();
    kc_apply(&format!(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: vcluster-{name}
  namespace: {ns}
  labels: {{argocd.argoproj.io/secret-type: cluster, {labels}}}
{annotations}stringData:
  name: {name}
  server: {server}
  config: |
    {{"tlsClientConfig": {{"insecure": false, "caData": "{ca}", "certData": "{cert}", "keyData": "{key}"}}}}
"#,
        server = server_url(kubeconfig)?,
        ca = server_ca(kubeconfig)?,
        cert = base64(cert.as_bytes()),
        key = base64(key.as_bytes()),
    ))
}
