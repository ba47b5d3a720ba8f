//! What every kind of skewer object shares, as the layers above see it: its kind's name, its
//! status, and the status fields every kind has (conditions, observed generation, the handled
//! reconcile request).

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Condition;

/// A kind of skewer object, as the shared runtime sees it.
pub trait Reconciled:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    type Status: Clone + Default + PartialEq + Debug + Serialize + Send + Sync;
    /// The kind, as in metrics and logs.
    const KIND: &'static str;

    fn status(&self) -> Option<&Self::Status>;
    fn conditions(status: &Self::Status) -> &[Condition];
    fn conditions_mut(status: &mut Self::Status) -> &mut Vec<Condition>;
    fn observed_generation(status: &mut Self::Status) -> &mut Option<i64>;
    fn last_handled_reconcile_at(status: &mut Self::Status) -> &mut Option<String>;
}

/// Implements [`Reconciled`] for a kind whose status has the shared fields (`conditions`,
/// `observed_generation`, `last_handled_reconcile_at`).
macro_rules! reconciled {
    ($kind:ident, $status:ty) => {
        impl $crate::Reconciled for $kind {
            type Status = $status;
            const KIND: &'static str = stringify!($kind);

            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn conditions(status: &$status) -> &[$crate::Condition] {
                &status.conditions
            }
            fn conditions_mut(status: &mut $status) -> &mut Vec<$crate::Condition> {
                &mut status.conditions
            }
            fn observed_generation(status: &mut $status) -> &mut Option<i64> {
                &mut status.observed_generation
            }
            fn last_handled_reconcile_at(status: &mut $status) -> &mut Option<String> {
                &mut status.last_handled_reconcile_at
            }
        }
    };
}

reconciled!(Kustomization, KustomizationStatus);
reconciled!(Application, ApplicationStatus);
reconciled!(ApplicationSet, ApplicationSetStatus);
reconciled!(GitRepository, SourceStatus);
reconciled!(OCIRepository, SourceStatus);
reconciled!(Receiver, ReceiverStatus);

use crate::receiver::ReceiverStatus;
use crate::{
    Application, ApplicationSet, ApplicationSetStatus, ApplicationStatus, GitRepository,
    Kustomization, KustomizationStatus, OCIRepository, Receiver, SourceStatus,
};
