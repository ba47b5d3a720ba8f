//! What applying would change, asked of the server: each planned object dry-run against the
//! live one (nothing written) and compared field by field ([`crate::diff`]); with the previous
//! inventory, what would be pruned too. `skewer diff`, `skewer bootstrap` and the dashboard's
//! Out of Sync view all read this.

use futures::{StreamExt as _, stream};

use crate::apply::{Applier, ApplyError, ApplyOptions, Plan, Planned};
use crate::diff::{ObjectDiff, changes};
use crate::{Inventory, Manifest, ObjectId};

/// One object's difference, by its display name (`Deployment/apps/web`).
pub struct Differs {
    pub id: ObjectId,
    pub object: String,
    pub diff: ObjectDiff,
}

/// Compares `manifests` (applied as `owner`, with `transform` etc. in `opts`) with the
/// cluster; `previous` is what the owner applied before, for what would be pruned
/// (`prune: false` lists none). Returns the objects that differ, in apply order, then the
/// pruned ones.
pub async fn compare(
    applier: &Applier,
    manifests: Vec<Manifest>,
    opts: &ApplyOptions,
    previous: Option<&Inventory>,
) -> Result<Vec<Differs>, ApplyError> {
    let plan = applier.plan(manifests, opts).await?;
    compare_plan(applier, &plan, opts, previous).await
}

/// [`compare`] for a plan already made (to apply the same plan afterwards).
pub async fn compare_plan(
    applier: &Applier,
    plan: &Plan,
    opts: &ApplyOptions,
    previous: Option<&Inventory>,
) -> Result<Vec<Differs>, ApplyError> {
    let planned: Vec<&Planned> = plan.stages.iter().flatten().collect();
    // Indices, not `&Planned`: a closure over borrowed items makes the future not provably
    // Send for every lifetime (rust-lang/rust#102211), and the dashboard runs this in a task.
    let results: Vec<Result<Option<Differs>, ApplyError>> = stream::iter(0..planned.len())
        .map(|i| dry_run(applier, planned[i], opts))
        .buffered(opts.concurrency.max(1))
        .collect()
        .await;
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    if let Some(previous) = previous {
        for (id, _) in previous.stale(&plan.inventory) {
            out.push(Differs {
                object: id.display(),
                id,
                diff: ObjectDiff::Deleted,
            });
        }
    }
    Ok(out)
}

/// One object's difference, or `None` when applying it would change nothing.
async fn dry_run(
    applier: &Applier,
    p: &Planned,
    opts: &ApplyOptions,
) -> Result<Option<Differs>, ApplyError> {
    let run = applier.dry_run(p, opts).await?;
    let object = p.manifest.display();
    let diff = match (run.live, run.after) {
        (None, _) => ObjectDiff::Created,
        (Some(live), Some(after)) => {
            let fields = changes(&live, &after);
            if fields.is_empty() {
                return Ok(None);
            }
            ObjectDiff::Changed(fields)
        }
        (Some(_), None) => return Ok(None),
    };
    Ok(Some(Differs {
        id: p.manifest.id(),
        object,
        diff,
    }))
}
