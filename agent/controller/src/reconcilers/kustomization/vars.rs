//! The variables of a Kustomization's `postBuild`, read as Flux reads them: each
//! `substituteFrom` ConfigMap's `data` and Secret's `data`, in order (a later one overrides an
//! earlier one), then `substitute` over them all. They are read on the hub with the
//! Kustomization's own identity (its ServiceAccount, impersonated), so a Kustomization can
//! never substitute a Secret its ServiceAccount may not read. Values never reach a message.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client, ResourceExt};
use skewer_appliers::substitute::Vars;

use crate::api::Kustomization;
use crate::api::kustomization::PostBuild;
use crate::runtime::{Failure, Reason};

/// The variables of `ks`'s `postBuild` (`None` without one), or why they could not be read.
pub async fn load(client: &Client, ks: &Kustomization) -> Result<Option<Vars>, Failure> {
    let Some(inline) = crate::api::spec::inline_vars(ks).map_err(Failure::invalid)? else {
        return Ok(None);
    };
    let Some(post) = &ks.spec.post_build else {
        return Ok(None);
    };
    let namespace = ks.namespace().unwrap_or_default();
    let mut vars = from_objects(client, &namespace, post).await?;
    vars.extend(inline);
    Ok(Some(vars))
}

/// The variables of `substituteFrom`, in order.
async fn from_objects(client: &Client, namespace: &str, post: &PostBuild) -> Result<Vars, Failure> {
    let mut vars = Vars::default();
    for (i, from) in post.substitute_from.iter().enumerate() {
        let field = format!("spec.postBuild.substituteFrom[{i}]");
        let what = format!("{} {namespace}/{}", from.kind, from.name);
        let data: Option<Vec<(String, String)>> = match from.kind.as_str() {
            "ConfigMap" => Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get_opt(&from.name)
                .await
                .map(|cm| cm.map(|cm| cm.data.unwrap_or_default().into_iter().collect())),
            "Secret" => Api::<Secret>::namespaced(client.clone(), namespace)
                .get_opt(&from.name)
                .await
                .map(|s| {
                    s.map(|s| {
                        s.data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                            .collect()
                    })
                }),
            other => {
                return Err(Failure::new(
                    Reason::InvalidSpec,
                    format!("{field}.kind: '{other}' is neither ConfigMap nor Secret"),
                ));
            }
        }
        .map_err(|e| {
            Failure::new(
                Reason::BuildFailed,
                format!(
                    "{field}: reading {what}: {}",
                    skewer_appliers::apply::api_message(&e)
                ),
            )
        })?;
        match data {
            Some(pairs) => {
                for (k, v) in pairs {
                    vars.insert(&k, &v, &what)
                        .map_err(|e| Failure::new(Reason::BuildFailed, format!("{field}: {e}")))?;
                }
            }
            None if from.optional => {}
            None => {
                return Err(Failure::new(
                    Reason::BuildFailed,
                    format!(
                        "{field}: {what} not found (mark it optional: true if it may be missing)"
                    ),
                ));
            }
        }
    }
    Ok(vars)
}
