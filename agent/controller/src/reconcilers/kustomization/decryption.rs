//! The keys of a Kustomization's `decryption` (Flux's field): the Secret of `secretRef`, read
//! on the hub as the Kustomization's own identity (its ServiceAccount, impersonated), so a
//! Kustomization never decrypts with keys its ServiceAccount may not read. Keys never reach a
//! message.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};
use skewer_appliers::sops::Keys;

use crate::api::Kustomization;
use crate::runtime::{Failure, Reason};

/// Checks `spec.decryption` without reading anything: the provider, and what skewer refuses.
pub fn check(ks: &Kustomization) -> Result<(), Failure> {
    let Some(d) = &ks.spec.decryption else {
        return Ok(());
    };
    if d.provider != "sops" {
        return Err(Failure::invalid(format!(
            "spec.decryption.provider: '{}' is not supported (sops)",
            d.provider
        )));
    }
    if d.service_account_name.is_some() {
        return Err(Failure::invalid(
            "spec.decryption.serviceAccountName is not supported by skewer: cloud key services are not used; put age (*.agekey) or OpenPGP (*.asc) keys in the Secret of spec.decryption.secretRef"
                .to_string(),
        ));
    }
    if d.secret_ref.is_none() {
        return Err(Failure::invalid(
            "spec.decryption.secretRef: required: skewer holds no keys of its own; name a Secret of age (*.agekey) or OpenPGP (*.asc) keys"
                .to_string(),
        ));
    }
    Ok(())
}

/// The keys of `ks`'s `decryption` (`None` without one), or why they could not be read.
pub async fn load(client: &Client, ks: &Kustomization) -> Result<Option<Arc<Keys>>, Failure> {
    let Some(name) = ks
        .spec
        .decryption
        .as_ref()
        .and_then(|d| d.secret_ref.as_ref())
        .map(|r| r.name.as_str())
    else {
        return Ok(None);
    };
    let namespace = ks.namespace().unwrap_or_default();
    let field = "spec.decryption.secretRef";
    let failed = |m: String| Failure::new(Reason::BuildFailed, format!("{field}: {m}"));
    let secret = Api::<Secret>::namespaced(client.clone(), &namespace)
        .get_opt(name)
        .await
        .map_err(|e| {
            failed(format!(
                "reading Secret {namespace}/{name}: {}",
                skewer_appliers::apply::api_message(&e)
            ))
        })?
        .ok_or_else(|| failed(format!("Secret {namespace}/{name} not found")))?;
    let data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    let keys =
        Keys::from_secret(&data).map_err(|e| failed(format!("Secret {namespace}/{name}: {e}")))?;
    if keys.is_empty() {
        return Err(failed(format!(
            "Secret {namespace}/{name} holds no age (*.agekey) or OpenPGP (*.asc) keys"
        )));
    }
    Ok(Some(Arc::new(keys)))
}
