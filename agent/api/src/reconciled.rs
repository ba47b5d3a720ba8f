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
    /// The revision the status is about (the last one attempted), for notifications.
    fn revision(_status: &Self::Status) -> Option<&str> {
        None
    }
}

/// Implements [`Reconciled`] for a kind whose status has the shared fields (`conditions`,
/// `observed_generation`, `last_handled_reconcile_at`).
macro_rules! reconciled {
    ($kind:ident, $status:ty) => {
        reconciled!($kind, $status, {});
    };
    ($kind:ident, $status:ty, { $($extra:tt)* }) => {
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
            $($extra)*
        }
    };
}

reconciled!(Kustomization, KustomizationStatus, {
    fn revision(s: &KustomizationStatus) -> Option<&str> {
        s.last_attempted_revision.as_deref()
    }
});
reconciled!(Application, ApplicationStatus, {
    fn revision(s: &ApplicationStatus) -> Option<&str> {
        s.sync.as_ref().and_then(|s| s.revision.as_deref())
    }
});
reconciled!(ApplicationSet, ApplicationSetStatus);
reconciled!(GitRepository, SourceStatus, {
    fn revision(s: &SourceStatus) -> Option<&str> {
        s.revision()
    }
});
reconciled!(OCIRepository, SourceStatus, {
    fn revision(s: &SourceStatus) -> Option<&str> {
        s.revision()
    }
});
reconciled!(Receiver, ReceiverStatus);
reconciled!(Provider, ProviderStatus);
reconciled!(Alert, AlertStatus);

use crate::notification::{AlertStatus, ProviderStatus};
use crate::receiver::ReceiverStatus;
use crate::{
    Alert, Application, ApplicationSet, ApplicationSetStatus, ApplicationStatus, GitRepository,
    Kustomization, KustomizationStatus, OCIRepository, Provider, Receiver, SourceStatus,
};
