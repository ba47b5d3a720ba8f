//! `dependsOn` across deploy kinds: a Kustomization or an Application waits until each object
//! it names, of either kind, is Ready at its current generation (for an Application: synced and
//! healthy).

use kube::api::Api;

use crate::api::conditions::{self, READY};
use crate::api::kustomization::DependencyReference;
use crate::api::{Application, Kustomization};
use crate::runtime::context::Context;
use crate::runtime::{Failure, Reason, Reconciled};

/// One dependency as written: `kind` defaults to the dependant's own kind.
pub struct Dependency<'a> {
    pub kind: &'a str,
    pub name: &'a str,
    pub namespace: Option<&'a str>,
}

impl<'a> Dependency<'a> {
    /// The `dependsOn` entries of an object of kind `own`.
    pub fn all(refs: &'a [DependencyReference], own: &'a str) -> Vec<Self> {
        refs.iter()
            .map(|d| Dependency {
                kind: d.kind.as_deref().unwrap_or(own),
                name: &d.name,
                namespace: d.namespace.as_deref(),
            })
            .collect()
    }
}

/// The deploy kinds a dependency may name.
pub const KINDS: &[&str] = &["Kustomization", "Application"];

/// Whether `K` `namespace/name` is Ready at its current generation.
async fn is_ready<K: Reconciled>(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<bool, kube::Error> {
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    Ok(api.get_opt(name).await?.is_some_and(|obj| {
        let generation = obj.meta().generation;
        obj.status().cloned().is_some_and(|mut st| {
            conditions::is_true(K::conditions(&st), READY)
                && *K::observed_generation(&mut st) == generation
        })
    }))
}

/// Fails with `DependencyNotReady` naming the first dependency that is not Ready.
pub async fn ready(
    ctx: &Context,
    own_namespace: &str,
    deps: &[Dependency<'_>],
) -> Result<(), Failure> {
    let not_ready = |message: String| Failure::new(Reason::DependencyNotReady, message);
    for dep in deps {
        let ns = dep.namespace.unwrap_or(own_namespace);
        let ready = match dep.kind {
            "Kustomization" => is_ready::<Kustomization>(ctx, ns, dep.name).await,
            "Application" => is_ready::<Application>(ctx, ns, dep.name).await,
            other => {
                return Err(Failure::invalid(format!(
                    "spec.dependsOn: kind '{other}' is not supported ({})",
                    KINDS.join(", ")
                )));
            }
        }
        .map_err(|e| not_ready(format!("dependency {} {ns}/{}: {e}", dep.kind, dep.name)))?;
        if !ready {
            return Err(not_ready(format!(
                "dependency {} '{ns}/{}' is not ready",
                dep.kind, dep.name
            )));
        }
    }
    Ok(())
}
