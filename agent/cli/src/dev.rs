//! `skewer dev DIR`: the inner loop of writing manifests. DIR is applied through the same
//! pipeline as a Kustomization (build, plan, server-side apply, prune, health), then applied
//! again as soon as a file under its source root is saved: file events from notify, gathered
//! until the writes settle ([`SETTLE`]), then one sync. Only objects whose rendered manifest
//! changed since the last apply are sent; what left DIR is pruned. Objects another owner
//! applies are refused in the pipeline's claim, before anything is sent, unless `--take-over`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use kube::api::PropagationPolicy;
use notify::{RecursiveMode, Watcher as _};
use skewer_appliers::apply::{Applier, ApplyOptions, Outcome, Plan};
use skewer_appliers::scope::Scope;
use skewer_appliers::sync::{SyncError, SyncHooks, SyncReport, run};
use skewer_appliers::transform::{OWNER_NAME, OWNER_NAMESPACE, Owner, Transform};
use skewer_appliers::{HealthChecks, Inventory, ObjectId, SyncRequest};

use super::build::Local;
use skewer_api::FIELD_MANAGER;

/// How long file events must pause before a sync starts: an editor's save is several
/// events (write, rename, chmod) within a few milliseconds.
pub const SETTLE: Duration = Duration::from_millis(15);

/// What `skewer dev` was asked.
pub struct Dev {
    pub dir: PathBuf,
    pub source_root: Option<PathBuf>,
    pub owner: Owner,
    pub prune: bool,
    /// Wait for health after each apply, at most this long.
    pub wait: Option<Duration>,
    /// Apply objects another owner (a Kustomization, an Application, another `dev`) applies.
    pub take_over: bool,
}

/// What a sync of `dev` hands the pipeline: the ownership check of what it plans, and the
/// memo of what it applied.
struct Memo<'a> {
    applier: &'a Applier,
    owner: &'a Owner,
    take_over: bool,
    /// Objects read and found free, each read once per session.
    checked: Mutex<BTreeSet<ObjectId>>,
    /// The manifest each object was last applied with, so that a save sends only what it
    /// changed (the daemon's drift index does this for Kustomizations).
    applied: Mutex<BTreeMap<ObjectId, String>>,
    pending: Mutex<BTreeMap<ObjectId, String>>,
}

impl<'a> Memo<'a> {
    fn new(applier: &'a Applier, dev: &'a Dev) -> Self {
        Self {
            applier,
            owner: &dev.owner,
            take_over: dev.take_over,
            checked: Mutex::default(),
            applied: Mutex::default(),
            pending: Mutex::default(),
        }
    }

    /// The planned objects not checked before whose owner labels name another owner, each
    /// with who. One read per object, once per session (a directory one works on is small);
    /// a kind the cluster does not know yet (its CRD is in the same directory) has nothing
    /// to hold.
    async fn held_by_others(
        &self,
        planned: &Inventory,
    ) -> Result<Vec<(ObjectId, String)>, Vec<(ObjectId, String)>> {
        let fresh: Vec<(&ObjectId, &String)> = {
            let checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
            planned
                .entries
                .iter()
                .filter(|(id, _)| !checked.contains(*id))
                .collect()
        };
        let resources = self.applier.resources();
        let mut held = Vec::new();
        for (id, api_version) in &fresh {
            let Ok(kind) = resources.resolve(api_version, &id.kind, &[]).await else {
                continue;
            };
            let live = kind
                .api(resources.client().clone(), &id.namespace)
                .get_metadata_opt(&id.name)
                .await
                .map_err(|e| vec![((*id).clone(), format!("reading it: {e}"))])?;
            let labels = live.and_then(|l| l.metadata.labels).unwrap_or_default();
            if let (Some(ns), Some(name)) = (labels.get(OWNER_NAMESPACE), labels.get(OWNER_NAME))
                && !self.owner.owns(Some(&labels))
            {
                held.push(((*id).clone(), format!("{ns}/{name}")));
            }
        }
        if held.is_empty() {
            let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
            checked.extend(fresh.into_iter().map(|(id, _)| id.clone()));
        }
        Ok(held)
    }
}

impl SyncHooks for Memo<'_> {
    /// Another owner's objects are refused (nothing applied) unless `--take-over`.
    async fn claim(
        &self,
        planned: &Inventory,
        _: &BTreeSet<ObjectId>,
    ) -> Result<(), Vec<(ObjectId, String)>> {
        if self.take_over {
            return Ok(());
        }
        match self.held_by_others(planned).await? {
            held if held.is_empty() => Ok(()),
            held => Err(held),
        }
    }

    async fn record(&self, _: &Inventory) -> Result<(), String> {
        Ok(())
    }

    fn applying(&self, plan: &Plan, _: &Arc<ApplyOptions>) -> BTreeSet<ObjectId> {
        let planned: BTreeMap<ObjectId, String> = plan
            .stages
            .iter()
            .flatten()
            .map(|p| (p.manifest.id(), p.manifest.object.to_string()))
            .collect();
        let applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        let same = planned
            .iter()
            .filter(|(id, text)| applied.get(*id) == Some(*text))
            .map(|(id, _)| id.clone())
            .collect();
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = planned;
        same
    }

    fn applied(&self, outcomes: &[Outcome]) {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        for o in outcomes {
            if let Some(text) = pending.get(&o.id) {
                applied.insert(o.id.clone(), text.clone());
            }
        }
    }
}

/// One line about a sync: what it did and how long it took, or why it failed.
pub fn summary(report: &SyncReport, took: Duration) -> String {
    let sent = report.applied.len();
    let mut line = format!(
        "{} objects: {sent} applied, {} unchanged, {} pruned in {} ms",
        report.planned,
        report.unchanged,
        report.pruned.len(),
        took.as_millis()
    );
    match &report.error {
        Some(SyncError::Conflict(held)) => {
            let held: Vec<String> = held
                .iter()
                .map(|(id, holder)| format!("{} is applied by {holder}", id.display()))
                .collect();
            line = format!(
                "refused, nothing applied (OwnershipConflict): {}; --take-over applies them anyway (their owner puts them back at its next sync)",
                skewer_appliers::message::summarize(&held)
            );
        }
        Some(e) => {
            line = format!("failed after {} ms: {e}", took.as_millis());
            for d in e.details() {
                line.push_str(&format!("\n  {d}"));
            }
        }
        None => {}
    }
    line
}

/// Applies DIR, then again after every save, until interrupted; prints a line per sync.
pub async fn run_dev(client: kube::Client, dev: Dev) -> Result<()> {
    let applier = Applier::new(client)
        .await
        .context("asking the API server its version")?;
    let root = super::build::root_of(&dev.dir, dev.source_root.as_deref())?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(e) = event
            && !matches!(e.kind, notify::EventKind::Access(_))
            && !e
                .paths
                .iter()
                .all(|p| p.components().any(|c| c.as_os_str() == ".git"))
        {
            let _ = tx.send(());
        }
    })
    .context("watching files")?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .with_context(|| format!("watching {}", root.display()))?;
    // Objects that name no namespace go to the owner's, as `kubectl apply -n` places them.
    let transform = Transform {
        default_namespace: Some(dev.owner.namespace.clone()),
        ..Transform::default()
    };
    let opts = Arc::new(ApplyOptions::new(
        FIELD_MANAGER,
        dev.owner.clone(),
        transform,
    ));
    let memo = Memo::new(&applier, &dev);
    let mut previous = Inventory::default();
    eprintln!(
        "applying {} as {}/{}; saving a file applies it again (Ctrl-C stops)",
        dev.dir.display(),
        dev.owner.namespace,
        dev.owner.name
    );
    loop {
        let started = Instant::now();
        match Local::read(&dev.dir, Some(&root)) {
            Ok(local) => {
                let request = SyncRequest {
                    files: local.files,
                    path: local.relative,
                    patches: Vec::new(),
                    apply: opts.clone(),
                    prune: dev.prune.then_some(PropagationPolicy::Background),
                    health: if dev.wait.is_some() {
                        HealthChecks::Applied
                    } else {
                        HealthChecks::None
                    },
                    deadline: skewer_appliers::wait::deadline_after(dev.wait.unwrap_or_default()),
                    previous: previous.clone(),
                    scope: Scope::default(),
                    // Deleting every file of the directory one works on is meant.
                    allow_empty: true,
                    substitute: None,
                    decrypt: None,
                    overlay: Default::default(),
                };
                let report = run(&applier, &memo, request).await;
                previous = report.inventory.clone();
                println!("{}", summary(&report, started.elapsed()));
            }
            Err(e) => println!("failed: {e:#}"),
        }
        // Wait for a save, then for the writes to settle.
        if rx.recv().await.is_none() {
            return Ok(());
        }
        while let Ok(Some(())) = tokio::time::timeout(SETTLE, rx.recv()).await {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_what_was_sent() {
        let report = SyncReport {
            planned: 3,
            unchanged: 2,
            ..Default::default()
        };
        assert_eq!(
            summary(&report, Duration::from_millis(12)),
            "3 objects: 0 applied, 2 unchanged, 0 pruned in 12 ms"
        );
    }
}
