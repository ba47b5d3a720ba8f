//! How a reconcile ended, for every kind: [`Done`] or [`Failure`], each with a [`Reason`] that
//! is the same word in the `Ready` condition, the Event and the metric label.

use std::fmt;
use std::time::Duration;

/// Why a reconcile ended as it did. Condition reasons, Event reasons and the `result` label of
/// `skewer_reconcile_duration_seconds` all come from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A deploy kind applied its revision.
    ReconciliationSucceeded,
    /// A source is current.
    Succeeded,
    /// A source stored a new revision.
    NewArtifact,
    /// The spec cannot work as written; only a change to it helps.
    InvalidSpec,
    DependencyNotReady,
    /// The source's artifact cannot be had (missing source, no artifact yet, unreadable).
    ArtifactFailed,
    /// Manifests did not load, build (kustomize) or patch.
    BuildFailed,
    /// Planning, recording the inventory, or applying failed.
    ReconciliationFailed,
    PruneFailed,
    HealthCheckFailed,
    /// Another owner applies some of the same objects.
    OwnershipConflict,
    /// The target cluster is not registered, its registration is invalid, or it cannot be
    /// reached: retried with backoff, and nothing is pruned.
    ClusterUnavailable,
    /// The object's namespace may not use what it names (a cluster whose Secret does not
    /// allow it), Flux's reason for refused cross-namespace references.
    AccessDenied,
    GitOperationFailed,
    /// A registry request failed (Flux's reason).
    OCIArtifactPullFailed,
    /// An OCI layer was refused: too big, hostile entries, not a `.tar.gz`.
    OCIArtifactLayerOperationFailed,
    AuthenticationFailed,
    VerificationError,
    StorageOperationFailed,
    /// The reconcile panicked: a bug, contained to this object.
    ReconcilePanicked,
    /// An Application differs from its source and waits for a sync (no automation, or a
    /// failed sync out of retries).
    OutOfSync,
    /// An Application is synced; some of its objects are not healthy yet.
    Progressing,
    /// An Application is synced; some of its objects failed (Argo CD's Degraded).
    Degraded,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ReconciliationSucceeded => "ReconciliationSucceeded",
            Reason::Succeeded => "Succeeded",
            Reason::NewArtifact => "NewArtifact",
            Reason::InvalidSpec => "InvalidSpec",
            Reason::DependencyNotReady => "DependencyNotReady",
            Reason::ArtifactFailed => "ArtifactFailed",
            Reason::BuildFailed => "BuildFailed",
            Reason::ReconciliationFailed => "ReconciliationFailed",
            Reason::PruneFailed => "PruneFailed",
            Reason::HealthCheckFailed => "HealthCheckFailed",
            Reason::OwnershipConflict => "OwnershipConflict",
            Reason::ClusterUnavailable => "ClusterUnavailable",
            Reason::AccessDenied => "AccessDenied",
            Reason::GitOperationFailed => "GitOperationFailed",
            Reason::OCIArtifactPullFailed => "OCIArtifactPullFailed",
            Reason::OCIArtifactLayerOperationFailed => "OCIArtifactLayerOperationFailed",
            Reason::AuthenticationFailed => "AuthenticationFailed",
            Reason::VerificationError => "VerificationError",
            Reason::StorageOperationFailed => "StorageOperationFailed",
            Reason::ReconcilePanicked => "ReconcilePanicked",
            Reason::OutOfSync => "OutOfSync",
            Reason::Progressing => "Progressing",
            Reason::Degraded => "Degraded",
        }
    }

    /// Whether retrying cannot help (kstatus Stalled): only a new spec (or, for a build, a new
    /// revision of the source, which triggers a reconcile too) can. A build is a pure function
    /// of the two: one that failed fails again.
    pub fn stalls(self) -> bool {
        matches!(
            self,
            Reason::InvalidSpec | Reason::BuildFailed | Reason::ReconcilePanicked
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed reconcile: why, and a message naming what failed (file, object, field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    pub message: String,
}

impl Failure {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }

    /// A spec that cannot work as written (Stalled).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Reason::InvalidSpec, message)
    }
}

/// A successful reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// The `Ready` condition's reason.
    pub reason: Reason,
    pub message: String,
    /// The Event's reason when `Ready` changes.
    pub event: Reason,
    /// Nothing needed doing (counted as `noop`, not `success`).
    pub noop: bool,
}

/// The metric label of a reconcile's result: `success`, `noop` or the failure's reason.
pub fn result_label(result: &Result<Done, Failure>) -> &'static str {
    match result {
        Ok(d) if d.noop => "noop",
        Ok(_) => "success",
        Err(f) => f.reason.as_str(),
    }
}

/// When a kind reconciles again: every `interval`, and after failures from `retry` up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub interval: Duration,
    pub retry: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_spec_errors_and_panics_stall() {
        assert!(Reason::InvalidSpec.stalls());
        assert!(Reason::ReconcilePanicked.stalls());
        assert!(
            Reason::BuildFailed.stalls(),
            "the same source builds the same way"
        );
        assert!(!Reason::HealthCheckFailed.stalls());
        assert!(!Reason::AuthenticationFailed.stalls());
    }

    #[test]
    fn labels() {
        let done = |noop| {
            Ok(Done {
                reason: Reason::Succeeded,
                message: String::new(),
                event: Reason::Succeeded,
                noop,
            })
        };
        assert_eq!(result_label(&done(true)), "noop");
        assert_eq!(result_label(&done(false)), "success");
        assert_eq!(
            result_label(&Err(Failure::new(Reason::BuildFailed, "x"))),
            "BuildFailed"
        );
    }
}
