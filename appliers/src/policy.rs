//! What an object's own annotations ask of skewer, read in skewer's names and in the names
//! Flux's kustomize-controller and Argo CD users already wrote on their objects: whether it may
//! be pruned when it leaves the source, whether it may be deleted with its owner, how it is
//! applied, and whether an immutable change may recreate it. Pure: it reads annotations.
//!
//! | asks | skewer | Flux | Argo CD (`argocd.argoproj.io/sync-options`) |
//! |---|---|---|---|
//! | never prune, never delete | `skewer.dev/prune: disabled` | `kustomize.toolkit.fluxcd.io/prune: disabled` | |
//! | not pruned when it leaves the source | | | `Prune=false` (or `Prune=confirm`) |
//! | not deleted with its owner | | | `Delete=false` (or `Delete=confirm`) |
//! | how it is applied | `skewer.dev/ssa` | `kustomize.toolkit.fluxcd.io/ssa` | |
//! | left alone: not applied, not pruned | | `kustomize.toolkit.fluxcd.io/reconcile: disabled` | |
//! | recreated on an immutable change | `skewer.dev/force: enabled` | `kustomize.toolkit.fluxcd.io/force: enabled` | `Force=true,Replace=true` |
//! | pruned after every other object | | | `PruneLast=true` |
//! | not counted when no longer in the source | | | `compare-options: IgnoreExtraneous` |
//!
//! Argo CD's `ServerSideApply=true`, `Validate=false` and `SkipDryRunOnMissingResource=true`
//! ask for what skewer always does (a server-side apply, validated by the server, with a kind
//! whose CRD is in the same sync resolved from that CRD), so nothing reads them.
//!
//! skewer has no confirmation step: `confirm` keeps the object, and the reason says so.

/// Keeps an object from prune and from its owner's deletion (`disabled`).
pub const PRUNE: &str = "skewer.dev/prune";
/// Flux's name for [`PRUNE`].
pub const FLUX_PRUNE: &str = "kustomize.toolkit.fluxcd.io/prune";
/// How an object is applied: `Override` (the default), `Merge`, `IfNotPresent`, `Ignore`.
pub const SSA_POLICY: &str = "skewer.dev/ssa";
/// Flux's name for [`SSA_POLICY`].
pub const FLUX_SSA: &str = "kustomize.toolkit.fluxcd.io/ssa";
/// Allows delete-and-recreate on an immutable-field change (`enabled`).
pub const FORCE: &str = "skewer.dev/force";
/// Flux's name for [`FORCE`].
pub const FLUX_FORCE: &str = "kustomize.toolkit.fluxcd.io/force";
/// Flux: `disabled` leaves the object alone: not applied, not pruned.
pub const FLUX_RECONCILE: &str = "kustomize.toolkit.fluxcd.io/reconcile";
/// Argo CD's comma-separated `Key=value` options on an object.
pub const ARGO_SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";
/// Argo CD's comparison options on an object (`IgnoreExtraneous`).
pub const ARGO_COMPARE_OPTIONS: &str = "argocd.argoproj.io/compare-options";

/// Why an object is about to be deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// It left the source (prune).
    LeftSource,
    /// Its owner is being deleted.
    OwnerDeleted,
}

/// How an object is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ssa {
    /// Applied, taking over fields others changed (the default; `Merge` is the same here).
    Override,
    /// Created when missing, never changed afterwards.
    IfNotPresent,
    /// Never applied.
    Ignore,
}

/// The value of `key` among Argo CD's `Key=value` sync options (`Prune=false, Delete=false`).
pub fn sync_option<'a>(options: &'a str, key: &str) -> Option<&'a str> {
    options
        .split(',')
        .filter_map(|o| o.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim())
}

/// Why the annotations (`get` reads one by name) keep an object from `removal`; `None` lets
/// it go.
pub fn kept<'a>(get: impl Fn(&str) -> Option<&'a str>, removal: Removal) -> Option<String> {
    for name in [PRUNE, FLUX_PRUNE] {
        if get(name) == Some("disabled") {
            return Some(format!("annotated {name}: disabled"));
        }
    }
    if get(FLUX_RECONCILE) == Some("disabled") {
        return Some(format!("annotated {FLUX_RECONCILE}: disabled"));
    }
    let key = match removal {
        Removal::LeftSource => "Prune",
        Removal::OwnerDeleted => "Delete",
    };
    match get(ARGO_SYNC_OPTIONS).and_then(|o| sync_option(o, key)) {
        Some("false") => Some(format!("annotated {ARGO_SYNC_OPTIONS}: {key}=false")),
        Some("confirm") => Some(format!(
            "annotated {ARGO_SYNC_OPTIONS}: {key}=confirm, and skewer has no confirmation step: delete it by hand"
        )),
        _ => None,
    }
}

/// How the annotations (`get` reads one by name) ask the object to be applied; an unknown
/// value is an error naming the annotation.
pub fn ssa<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Result<Ssa, String> {
    if get(FLUX_RECONCILE) == Some("disabled") {
        return Ok(Ssa::Ignore);
    }
    let Some((name, value)) = [SSA_POLICY, FLUX_SSA]
        .into_iter()
        .find_map(|n| get(n).map(|v| (n, v)))
    else {
        return Ok(Ssa::Override);
    };
    match value {
        "Override" | "Merge" => Ok(Ssa::Override),
        "IfNotPresent" => Ok(Ssa::IfNotPresent),
        "Ignore" => Ok(Ssa::Ignore),
        other => Err(format!(
            "annotation {name}: '{other}' is not one of Override, Merge, IfNotPresent, Ignore"
        )),
    }
}

/// Whether the annotations ask the object to be pruned after every other (Argo CD's
/// `PruneLast=true`).
pub fn prune_last<'a>(get: impl Fn(&str) -> Option<&'a str>) -> bool {
    get(ARGO_SYNC_OPTIONS).is_some_and(|o| sync_option(o, "PruneLast") == Some("true"))
}

/// Whether the annotations say the object does not count when it is extraneous (applied once,
/// no longer in the source): Argo CD's `compare-options: IgnoreExtraneous`.
pub fn ignore_extraneous<'a>(get: impl Fn(&str) -> Option<&'a str>) -> bool {
    get(ARGO_COMPARE_OPTIONS).is_some_and(|o| o.split(',').any(|t| t.trim() == "IgnoreExtraneous"))
}

/// Whether the annotations allow recreating the object when an immutable field changes.
pub fn forced<'a>(get: impl Fn(&str) -> Option<&'a str>) -> bool {
    get(FORCE) == Some("enabled")
        || get(FLUX_FORCE) == Some("enabled")
        || get(ARGO_SYNC_OPTIONS).is_some_and(|o| {
            sync_option(o, "Force") == Some("true") && sync_option(o, "Replace") == Some("true")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
    }

    #[test]
    fn argo_options_are_read_with_spaces_and_in_any_order() {
        assert_eq!(
            sync_option("Replace=true, Prune=false", "Prune"),
            Some("false")
        );
        assert_eq!(sync_option("Prune=false", "Delete"), None);
        assert_eq!(sync_option("PruneLast=true", "Prune"), None);
        assert_eq!(sync_option("garbage,,=", "Prune"), None);
    }

    #[test]
    fn each_name_keeps_what_it_says_and_nothing_more() {
        use Removal::*;
        type Annotations<'a> = &'a [(&'a str, &'a str)];
        let cases: &[(Annotations, Removal, bool)] = &[
            (&[], LeftSource, false),
            (&[(PRUNE, "disabled")], LeftSource, true),
            (&[(PRUNE, "disabled")], OwnerDeleted, true),
            (&[(FLUX_PRUNE, "disabled")], LeftSource, true),
            (&[(FLUX_PRUNE, "disabled")], OwnerDeleted, true),
            (&[(FLUX_PRUNE, "enabled")], LeftSource, false),
            (&[(FLUX_RECONCILE, "disabled")], LeftSource, true),
            (&[(ARGO_SYNC_OPTIONS, "Prune=false")], LeftSource, true),
            (&[(ARGO_SYNC_OPTIONS, "Prune=false")], OwnerDeleted, false),
            (&[(ARGO_SYNC_OPTIONS, "Prune=confirm")], LeftSource, true),
            (&[(ARGO_SYNC_OPTIONS, "Delete=false")], OwnerDeleted, true),
            (&[(ARGO_SYNC_OPTIONS, "Delete=false")], LeftSource, false),
            (&[(ARGO_SYNC_OPTIONS, "Delete=true")], OwnerDeleted, false),
        ];
        for (annotations, removal, keep) in cases {
            let got = kept(with(annotations), *removal);
            assert_eq!(got.is_some(), *keep, "{annotations:?} {removal:?}: {got:?}");
        }
        let why = kept(with(&[(ARGO_SYNC_OPTIONS, "Delete=confirm")]), OwnerDeleted);
        assert!(why.is_some_and(|w| w.contains("Delete=confirm") && w.contains("by hand")));
    }

    #[test]
    fn apply_policies_in_either_name() {
        assert_eq!(ssa(with(&[])), Ok(Ssa::Override));
        assert_eq!(
            ssa(with(&[(FLUX_SSA, "IfNotPresent")])),
            Ok(Ssa::IfNotPresent)
        );
        assert_eq!(ssa(with(&[(SSA_POLICY, "Ignore")])), Ok(Ssa::Ignore));
        assert_eq!(ssa(with(&[(FLUX_SSA, "Merge")])), Ok(Ssa::Override));
        assert_eq!(ssa(with(&[(FLUX_RECONCILE, "disabled")])), Ok(Ssa::Ignore));
        let bad = ssa(with(&[(FLUX_SSA, "Sometimes")])).unwrap_err();
        assert!(
            bad.contains(FLUX_SSA) && bad.contains("'Sometimes'"),
            "{bad}"
        );
        assert!(forced(with(&[(FLUX_FORCE, "enabled")])));
        assert!(forced(with(&[(
            ARGO_SYNC_OPTIONS,
            "Force=true,Replace=true"
        )])));
        assert!(!forced(with(&[(ARGO_SYNC_OPTIONS, "Force=true")])));
        assert!(!forced(with(&[])));
    }

    #[test]
    fn prune_last_and_ignore_extraneous_are_read_among_other_options() {
        assert!(prune_last(with(&[(
            ARGO_SYNC_OPTIONS,
            "Validate=false, PruneLast=true"
        )])));
        assert!(!prune_last(with(&[(ARGO_SYNC_OPTIONS, "PruneLast=false")])));
        assert!(!prune_last(with(&[(
            ARGO_COMPARE_OPTIONS,
            "PruneLast=true"
        )])));
        assert!(ignore_extraneous(with(&[(
            ARGO_COMPARE_OPTIONS,
            "ServerSideDiff=true, IgnoreExtraneous"
        )])));
        assert!(!ignore_extraneous(with(&[(
            ARGO_SYNC_OPTIONS,
            "IgnoreExtraneous"
        )])));
        assert!(!ignore_extraneous(with(&[])));
    }
}
