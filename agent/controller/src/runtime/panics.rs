//! The second line of defence: a reconcile that panics anyway (a bug) is contained to its
//! object. The object is marked Stalled with the panic's message and an Event; every other
//! object keeps reconciling, and the daemon keeps running.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::runtime::controller::Action;

use super::Error;
use super::context::Context;
use super::outcome::{Failure, Reason};
use super::report::Session;
use super::status::Reconciled;

/// Runs `work`; a panic inside it becomes `Err` with the panic's message.
pub async fn contain<T>(work: impl Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(work)
        .catch_unwind()
        .await
        .map_err(|payload| message(payload.as_ref()))
}

/// The text a panic was raised with.
fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Wraps a reconcile function so that its panics stall only its own object.
pub fn guarded<K, F, Fut>(
    reconcile: F,
) -> impl FnMut(Arc<K>, Arc<Context>) -> BoxFuture<'static, Result<Action, Error>>
where
    K: Reconciled,
    F: Fn(Arc<K>, Arc<Context>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    move |obj: Arc<K>, ctx: Arc<Context>| {
        let reconcile = reconcile.clone();
        Box::pin(async move {
            match contain(reconcile(obj.clone(), ctx.clone())).await {
                Ok(result) => result,
                Err(panic) => {
                    let failure = Failure::new(
                        Reason::ReconcilePanicked,
                        format!(
                            "reconcile panicked: {panic} (a bug in skewer: reported, and retried when the spec changes)"
                        ),
                    );
                    Session::begin(&ctx, obj.as_ref())
                        .finish(Err(failure), None)
                        .await
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_its_message() {
        assert_eq!(contain(async { 7 }).await, Ok(7));
        let got = contain(async {
            let v: Vec<u8> = Vec::new();
            v[3]
        })
        .await;
        assert!(
            got.as_ref()
                .is_err_and(|m| m.contains("index out of bounds")),
            "{got:?}"
        );
        let got = contain(async { panic!("tenant {} broke it", "a") }).await;
        assert_eq!(got, Err("tenant a broke it".to_string()));
    }
}
