//! A kubeconfig held in a Secret (Flux's `spec.kubeConfig.secretRef`): its current context's
//! cluster and user, with everything that would run a program or read a file refused by name:
//! exec and auth-provider plugins, token and certificate files, proxies. Pure.

use kube::config::Kubeconfig;

use super::Invalid;
use super::secret::single;

/// The keys a kubeconfig Secret is read from when no key is named (Flux's order).
pub const DEFAULT_KEYS: &[&str] = &["value", "value.yaml"];

/// Parses `yaml` (from `source`, like `Secret team-a/spoke key value`) into a kubeconfig of
/// its current context alone.
pub fn parse(source: &str, yaml: &str) -> Result<Kubeconfig, Invalid> {
    let invalid = |field: &str, message: String| Invalid {
        origin: source.into(),
        field: field.into(),
        message,
    };
    let config = Kubeconfig::from_yaml(yaml).map_err(|e| invalid("kubeconfig", e.to_string()))?;
    let current = config
        .current_context
        .clone()
        .or_else(|| config.contexts.first().map(|c| c.name.clone()))
        .ok_or_else(|| invalid("current-context", "no context".into()))?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.clone())
        .ok_or_else(|| {
            invalid(
                "current-context",
                format!("context '{current}' is not defined"),
            )
        })?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| {
            invalid(
                "clusters",
                format!("cluster '{}' is not defined", context.cluster),
            )
        })?;
    let user_name = context.user.clone().unwrap_or_default();
    let user = config
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .and_then(|u| u.auth_info.clone())
        .ok_or_else(|| invalid("users", format!("user '{user_name}' is not defined")))?;
    let refused = [
        (
            user.exec.is_some(),
            "users.user.exec",
            "exec plugins are not run by skewer",
        ),
        (
            user.auth_provider.is_some(),
            "users.user.auth-provider",
            "auth-provider plugins are not run by skewer",
        ),
        (
            user.token_file.is_some(),
            "users.user.tokenFile",
            "files are not read: use token",
        ),
        (
            user.client_certificate.is_some(),
            "users.user.client-certificate",
            "files are not read: use client-certificate-data",
        ),
        (
            user.client_key.is_some(),
            "users.user.client-key",
            "files are not read: use client-key-data",
        ),
        (
            user.impersonate.is_some(),
            "users.user.as",
            "impersonation comes from spec.serviceAccountName",
        ),
        (
            cluster.certificate_authority.is_some(),
            "clusters.cluster.certificate-authority",
            "files are not read: use certificate-authority-data",
        ),
        (
            cluster.proxy_url.is_some(),
            "clusters.cluster.proxy-url",
            "proxies are not supported",
        ),
        (
            cluster.server.is_none(),
            "clusters.cluster.server",
            "required",
        ),
    ];
    if let Some((_, field, why)) = refused.iter().find(|(bad, ..)| *bad) {
        return Err(invalid(field, (*why).into()));
    }
    Ok(single(&context.cluster, cluster, user))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:6443', insecure-skip-tls-verify: true}\nusers:\n- name: u\n  user: {token: abc}\ncontexts:\n- name: ctx\n  context: {cluster: c, user: u}\ncurrent-context: ctx\n";

    #[test]
    fn the_current_context_is_kept() {
        let k = parse("Secret ns/kc key value", GOOD).unwrap();
        assert_eq!(k.clusters.len(), 1);
        let user = k.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
    }

    #[test]
    fn plugins_and_files_are_refused_by_name() {
        for (from, to, field) in [
            (
                "user: {token: abc}",
                "user: {exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}",
                "users.user.exec",
            ),
            (
                "user: {token: abc}",
                "user: {auth-provider: {name: gcp}}",
                "users.user.auth-provider",
            ),
            (
                "user: {token: abc}",
                "user: {tokenFile: /var/run/token}",
                "users.user.tokenFile",
            ),
            (
                "insecure-skip-tls-verify: true",
                "certificate-authority: /ca.crt",
                "clusters.cluster.certificate-authority",
            ),
            (
                "current-context: ctx",
                "current-context: other",
                "current-context",
            ),
        ] {
            let e = parse("Secret ns/kc key value", &GOOD.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("Secret ns/kc key value: {field}: ")),
                "{e}"
            );
        }
        assert!(
            parse("s", "{{")
                .unwrap_err()
                .to_string()
                .contains("kubeconfig")
        );
    }
}
