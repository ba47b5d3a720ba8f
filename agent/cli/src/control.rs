//! `skewer reconcile`, `sync`, `suspend` and `resume`: asking skewer to act on one object now,
//! or to stop and start acting on it, and, with `--wait`, following it until it is done. What
//! is asked is an annotation or a spec field on the object; the daemon does the rest.

use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use skewer_api::ApplicationSpec;
use skewer_api::history::{self, Deployment};
use skewer_api::kustomization::ResourceInventory;
use skewer_api::pin::{self, Pin};
use skewer_api::{RECONCILE_REQUESTED_AT, SYNC_REQUESTED_AT};
use skewer_view::named::{ControlError, Kind, Named};

/// The exit code a failed request ends the command with.
pub fn exit_of(e: &ControlError) -> super::term::Exit {
    use super::term::Exit;
    match e {
        ControlError::Failed(_) => Exit::Differs,
        ControlError::Timeout(..) => Exit::TimedOut,
        _ => Exit::Failed,
    }
}

fn api(client: &Client, namespace: &str, kind: Kind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &kind.resource())
}

/// Reads `target`, or says it does not exist.
async fn get(client: &Client, namespace: &str, target: &Named) -> Result<Value, ControlError> {
    let obj = api(client, namespace, target.kind)
        .get_opt(&target.name)
        .await?
        .ok_or_else(|| ControlError::Missing(target.clone(), namespace.into()))?;
    Ok(serde_json::to_value(obj).unwrap_or(Value::Null))
}

/// Asks `target` to reconcile now (an Application: to sync, even without automation), and
/// with `wait` follows it until it is Ready or failed. `with_source`: a Kustomization's source
/// is reconciled first, and waited for. Returns the line to print.
pub async fn reconcile(
    client: &Client,
    namespace: &str,
    target: &Named,
    with_source: bool,
    wait: Option<Duration>,
) -> Result<String, ControlError> {
    let obj = get(client, namespace, target).await?;
    if obj["spec"]["suspend"] == true {
        return Err(ControlError::Refused(format!(
            "{target} is suspended: it reconciles again after `skewer resume {target} -n {namespace}`"
        )));
    }
    if with_source {
        let source = obj["spec"]["sourceRef"].clone();
        let kind = source["kind"].as_str().and_then(Kind::of_source);
        let (Some(kind), Some(name)) = (kind, source["name"].as_str()) else {
            return Err(ControlError::Refused(format!(
                "{target} names no GitRepository or OCIRepository in spec.sourceRef"
            )));
        };
        let ns = source["namespace"]
            .as_str()
            .unwrap_or(namespace)
            .to_string();
        let source = Named {
            kind,
            name: name.into(),
        };
        let line = Box::pin(reconcile(
            client,
            &ns,
            &source,
            false,
            Some(wait.unwrap_or(Duration::from_secs(120))),
        ))
        .await?;
        eprintln!("{line}");
    }
    let done = ask(client, namespace, target, serde_json::Map::new(), wait).await?;
    Ok(done.unwrap_or_else(|| format!("{target}: reconcile requested")))
}

/// Sets the annotation that asks `target` to reconcile (an Application: to sync), with
/// `annotations` beside it in the same write, and with `wait` follows it until it is done:
/// the line to print then, `None` without `wait`.
async fn ask(
    client: &Client,
    namespace: &str,
    target: &Named,
    mut annotations: serde_json::Map<String, Value>,
    wait: Option<Duration>,
) -> Result<Option<String>, ControlError> {
    let token = jiff::Timestamp::now().to_string();
    let annotation = match target.kind {
        Kind::Application => SYNC_REQUESTED_AT,
        _ => RECONCILE_REQUESTED_AT,
    };
    annotations.insert(annotation.into(), json!(&token));
    let patch = json!({"metadata": {"annotations": annotations}});
    api(client, namespace, target.kind)
        .patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let Some(wait) = wait else {
        return Ok(None);
    };
    poll(wait, || async {
        let obj = get(client, namespace, target).await?;
        handled(target, &obj, &token)
    })
    .await
    .map(Some)
    .map_err(|e| match e {
        // Never picked up: say what to look at.
        ControlError::Timeout(wait, state) if state == NOT_PICKED_UP => ControlError::Timeout(
            wait,
            format!("{state} (is skewer running, and does it watch namespace {namespace}?)"),
        ),
        e => e,
    })
}

/// Where a request stands before skewer has seen it.
const NOT_PICKED_UP: &str = "not picked up yet";

/// Where `obj` stands after the request `token`: done (`Ok(Ok(line))`), still going
/// (`Ok(Err(state))`), or failed.
fn handled(
    target: &Named,
    obj: &Value,
    token: &str,
) -> Result<Result<String, String>, ControlError> {
    let st = &obj["status"];
    let field = match target.kind {
        Kind::Application => "lastHandledSyncAt",
        _ => "lastHandledReconcileAt",
    };
    if st[field].as_str() != Some(token) {
        return Ok(Err(NOT_PICKED_UP.into()));
    }
    if target.kind == Kind::Application {
        let (sync, health) = (
            st["sync"]["status"].as_str().unwrap_or("Unknown"),
            st["health"]["status"].as_str().unwrap_or("Unknown"),
        );
        let op = &st["operationState"];
        let message = op["message"].as_str().unwrap_or_default();
        return match op["phase"].as_str().unwrap_or_default() {
            "Failed" | "Error" => Err(ControlError::Failed(format!("{target}: {message}"))),
            "Running" => Ok(Err(message.into())),
            _ if sync == "Synced" && health == "Healthy" => Ok(Ok(format!(
                "{target}: Synced, Healthy at {}",
                st["sync"]["revision"].as_str().unwrap_or_default()
            ))),
            _ => Ok(Err(format!("{sync}, {health}: {message}"))),
        };
    }
    let ready = st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    let Some(c) = ready else {
        return Ok(Err("no Ready condition yet".into()));
    };
    let (status, reason, message) = (
        c["status"].as_str().unwrap_or_default(),
        c["reason"].as_str().unwrap_or_default(),
        c["message"].as_str().unwrap_or_default(),
    );
    match status {
        "True" => Ok(Ok(format!("{target}: {message}"))),
        _ if reason == "Progressing" || status == "Unknown" => Ok(Err(message.into())),
        _ => Err(ControlError::Failed(format!(
            "{target}: {reason}: {message}"
        ))),
    }
}

/// Sets `spec.suspend` of `target`. Applications have no suspend (Argo CD's way is to turn
/// automation off), so they are refused, saying so.
pub async fn suspend(
    client: &Client,
    namespace: &str,
    target: &Named,
    suspend: bool,
) -> Result<String, ControlError> {
    if target.kind == Kind::Application {
        return Err(ControlError::Refused(format!(
            "{target}: Applications have no suspend; remove spec.syncPolicy.automated to stop automatic syncs"
        )));
    }
    get(client, namespace, target).await?;
    let patch = json!({"spec": {"suspend": suspend}});
    api(client, namespace, target.kind)
        .patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(format!(
        "{target}: {}",
        if suspend { "suspended" } else { "resumed" }
    ))
}

/// What deleting `obj` (a `target`) does, in a sentence: whether what it applied goes with it.
pub fn deletion(obj: &Value, target: &Named, namespace: &str) -> String {
    // Either format of inventory, read as the daemon reads it.
    let inventory: Option<ResourceInventory> =
        serde_json::from_value(obj["status"]["inventory"].clone()).ok();
    let applied = skewer_api::inventory::from_status(inventory.as_ref())
        .entries
        .len();
    let objects = match applied {
        1 => "the object it applied".to_string(),
        n => format!("the {n} objects it applied"),
    };
    let this = format!("This deletes {target} in namespace {namespace}");
    match target.kind {
        Kind::Kustomization if obj["spec"]["suspend"] == true => {
            format!("{this}; {objects} stay, as it is suspended.")
        }
        Kind::Kustomization if obj["spec"]["prune"] == true => {
            format!("{this} and, as spec.prune is true, {objects}.")
        }
        Kind::Kustomization => format!("{this}; {objects} stay (spec.prune is false)."),
        Kind::Application if obj["spec"]["syncPolicy"]["automated"]["prune"] == true => {
            format!("{this} and, as syncPolicy.automated.prune is true, {objects}.")
        }
        Kind::Application => {
            format!("{this}; {objects} stay (syncPolicy.automated.prune is not set).")
        }
        Kind::ApplicationSet => format!(
            "{this} and the Applications it generated (unless preserveResourcesOnDeletion)."
        ),
        Kind::GitRepository | Kind::OCIRepository => format!(
            "{this}; what read it keeps what it applied, and fails until the source is back."
        ),
        _ => format!("{this}."),
    }
}

/// Deletes `target` (its finalizer prunes as [`deletion`] says), and with `wait` follows
/// it until it is gone. `confirm` is shown what will be done first and may stop it.
pub async fn delete(
    client: &Client,
    namespace: &str,
    target: &Named,
    wait: Option<Duration>,
    confirm: impl FnOnce(&str) -> Result<(), String>,
) -> Result<String, ControlError> {
    let obj = get(client, namespace, target).await?;
    confirm(&deletion(&obj, target, namespace)).map_err(ControlError::Refused)?;
    api(client, namespace, target.kind)
        .delete(&target.name, &Default::default())
        .await?;
    let Some(wait) = wait else {
        return Ok(format!("{target}: deletion requested"));
    };
    poll(wait, || async {
        let gone = api(client, namespace, target.kind)
            .get_opt(&target.name)
            .await?
            .is_none();
        Ok(if gone {
            Ok(format!("{target}: deleted"))
        } else {
            Err("pruning what it applied".into())
        })
    })
    .await
}

/// What `target` deployed, newest last, and the entry a rollback pinned (if still in force).
pub async fn history(
    client: &Client,
    namespace: &str,
    target: &Named,
) -> Result<(Vec<Deployment>, Option<i64>), ControlError> {
    deploys(target)?;
    let obj = get(client, namespace, target).await?;
    let pinned = skewer_view::history::pin(&obj).map(|p| p.id);
    Ok((skewer_view::history::of(&obj), pinned))
}

/// Refuses a kind that deploys nothing, so keeps no history.
fn deploys(target: &Named) -> Result<(), ControlError> {
    match target.kind {
        Kind::Kustomization | Kind::Application => Ok(()),
        _ => Err(ControlError::Refused(format!(
            "{target}: only Kustomizations and Applications deploy, and keep a history"
        ))),
    }
}

/// Rolls Application `target` back to deployment `id` of its history (none: the newest
/// success of another revision): pins it to that revision until its source or sync policy
/// changes, and asks it to sync now; with `wait`, follows the sync. A Kustomization is
/// refused with what does the same for it, for that entry.
pub async fn rollback(
    client: &Client,
    namespace: &str,
    target: &Named,
    id: Option<i64>,
    wait: Option<Duration>,
) -> Result<String, ControlError> {
    deploys(target)?;
    let obj = get(client, namespace, target).await?;
    let history = skewer_view::history::of(&obj);
    let entry = history::rollback_to(&history, id)
        .map_err(|e| ControlError::Refused(format!("{target}: {e}")))?;
    if target.kind == Kind::Kustomization {
        return Err(ControlError::Refused(kustomization_rollback(
            &obj, target, namespace, entry,
        )));
    }
    let spec: ApplicationSpec = serde_json::from_value(obj["spec"].clone())
        .map_err(|e| ControlError::Refused(format!("{target}: spec: {e}")))?;
    let pin = Pin::to(entry, &spec).map_err(|e| ControlError::Refused(format!("{target}: {e}")))?;
    let text = serde_json::to_string(&pin).unwrap_or_default();
    let annotations = serde_json::Map::from_iter([(pin::ROLLBACK.to_string(), json!(text))]);
    let done = ask(client, namespace, target, annotations, wait).await?;
    let pinned = format!(
        "{target}: rolled back to deployment {} ({}); pinned until spec.source or spec.syncPolicy changes",
        entry.id, entry.revision
    );
    Ok(then(pinned, done))
}

/// Ends the pin a rollback left on Application `target`, and asks it to sync now (to its
/// source's revision again); with `wait`, follows the sync.
pub async fn unpin(
    client: &Client,
    namespace: &str,
    target: &Named,
    wait: Option<Duration>,
) -> Result<String, ControlError> {
    if target.kind != Kind::Application {
        return Err(ControlError::Refused(format!(
            "{target}: only an Application is pinned by a rollback"
        )));
    }
    let obj = get(client, namespace, target).await?;
    if obj["metadata"]["annotations"][pin::ROLLBACK].is_null() {
        return Err(ControlError::Refused(format!(
            "{target} is not pinned by a rollback"
        )));
    }
    // `null` removes the annotation in a merge patch.
    let annotations = serde_json::Map::from_iter([(pin::ROLLBACK.to_string(), Value::Null)]);
    let done = ask(client, namespace, target, annotations, wait).await?;
    let unpinned = format!("{target}: the rollback's pin is ended; it follows its source again");
    Ok(then(unpinned, done))
}

/// `said`, and on the next line how the sync waited for ended, if it was waited for.
fn then(said: String, done: Option<String>) -> String {
    match done {
        Some(line) => format!("{said}\n{line}"),
        None => said,
    }
}

/// What rolls Kustomization `target` back to `entry`: its source follows a branch or tag that
/// other Kustomizations may read too, so skewer does not pin it behind Git's back.
fn kustomization_rollback(
    obj: &Value,
    target: &Named,
    namespace: &str,
    entry: &Deployment,
) -> String {
    let source = &obj["spec"]["sourceRef"];
    let kind = source["kind"].as_str().unwrap_or("GitRepository");
    let name = source["name"].as_str().unwrap_or("<source>");
    let ns = source["namespace"].as_str().unwrap_or(namespace);
    let (field, value, undo) = match history::target_of(&entry.revision) {
        Some(digest) if digest.starts_with("sha256:") => (
            "digest",
            digest,
            "point the tag it follows back at that digest (or push that revision again)",
        ),
        Some(commit) => (
            "commit",
            commit,
            "`git revert` the commits after it and push (every Kustomization reading it follows)",
        ),
        None => (
            "commit",
            "<commit>".into(),
            "revert what came after it in Git",
        ),
    };
    format!(
        "{target}: a Kustomization applies what its source holds, so roll back in the source to {rev}: \
         {undo}; or, for a source not itself kept in Git, pin it: \
         `kubectl patch {kind_lower} {name} -n {ns} --type merge -p '{{\"spec\":{{\"ref\":{{\"{field}\":\"{value}\"}}}}}}'` \
         (undo by removing spec.ref.{field}); see the README, \"History and rolling back\"",
        rev = entry.revision,
        kind_lower = kind.to_ascii_lowercase(),
    )
}

/// Polls `check` every quarter second until it is done (`Ok(Ok(line))`), fails, or `wait`
/// passes (then the last `Ok(Err(state))` says where it stood). A spinner shows the state on
/// a terminal.
async fn poll<F, Fut>(wait: Duration, mut check: F) -> Result<String, ControlError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Result<String, String>, ControlError>>,
{
    let deadline = skewer_appliers::wait::deadline_after(wait);
    let progress = super::term::Progress::start("waiting");
    loop {
        let state = match check().await {
            Ok(Ok(done)) => {
                progress.done(true, "done");
                return Ok(done);
            }
            Ok(Err(state)) => state,
            Err(e) => {
                progress.done(false, "failed");
                return Err(e);
            }
        };
        progress.set(&format!("waiting: {state}"));
        if tokio::time::Instant::now() >= deadline {
            progress.done(false, "timed out");
            return Err(ControlError::Timeout(wait, state));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_kind() {
        let named = |k, n: &str| Named {
            kind: k,
            name: n.into(),
        };
        assert_eq!("app/web".parse(), Ok(named(Kind::Application, "web")));
        assert_eq!(
            "Kustomization/infra".parse(),
            Ok(named(Kind::Kustomization, "infra"))
        );
        assert_eq!("git/repo".parse(), Ok(named(Kind::GitRepository, "repo")));
        assert!("web".parse::<Named>().is_err());
        assert!(
            "deploy/web"
                .parse::<Named>()
                .unwrap_err()
                .contains("ks/<name>")
        );
        assert!("app/".parse::<Named>().is_err());
        assert_eq!(
            named(Kind::Kustomization, "x").to_string(),
            "kustomization/x"
        );
    }

    #[test]
    fn a_deletion_says_what_goes_with_it() {
        let ks: Named = "ks/web".parse().unwrap();
        let applied = json!({"objects": ["a_x__ConfigMap v1", "a_y__ConfigMap v1"]});
        let said = |spec: Value| {
            deletion(
                &json!({"spec": spec, "status": {"inventory": applied}}),
                &ks,
                "apps",
            )
        };
        assert_eq!(
            said(json!({"prune": true})),
            "This deletes kustomization/web in namespace apps and, as spec.prune is true, the 2 objects it applied."
        );
        assert!(
            said(json!({"prune": false}))
                .ends_with("the 2 objects it applied stay (spec.prune is false).")
        );
        assert!(
            said(json!({"prune": true, "suspend": true})).ends_with("stay, as it is suspended.")
        );
        let app: Named = "app/web".parse().unwrap();
        let pruning = json!({"spec": {"syncPolicy": {"automated": {"prune": true}}}, "status": {"inventory": {"objects": ["a_x__ConfigMap v1"]}}});
        assert!(
            deletion(&pruning, &app, "argocd")
                .ends_with("syncPolicy.automated.prune is true, the object it applied.")
        );
    }

    #[test]
    fn a_kustomization_is_rolled_back_in_its_source() {
        let ks: Named = "ks/apps".parse().unwrap();
        let entry = Deployment {
            id: 3,
            revision: format!("main@sha1:{}", "a".repeat(40)),
            outcome: history::SUCCEEDED.into(),
            ..Default::default()
        };
        let git = json!({"spec": {"sourceRef": {"kind": "GitRepository", "name": "fleet"}}});
        let mut text = kustomization_rollback(&git, &ks, "flux-system", &entry);
        let oci = json!({"spec": {"sourceRef": {"kind": "OCIRepository", "name": "platform", "namespace": "sources"}}});
        let pushed = Deployment {
            revision: format!("v1.4.0@sha256:{}", "b".repeat(64)),
            ..entry
        };
        text.push('\n');
        text.push_str(&kustomization_rollback(&oci, &ks, "flux-system", &pushed));
        text.push('\n');
        skewer_view::golden!("rollback-kustomization.txt", &text);
    }

    fn ks(handled: &str, status: &str, reason: &str) -> Value {
        json!({"status": {"lastHandledReconcileAt": handled,
            "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": "m"}]}})
    }

    #[test]
    fn a_request_is_done_only_once_handled_and_ready() {
        let t: Named = "ks/web".parse().unwrap();
        assert!(
            handled(&t, &ks("old", "True", "Succeeded"), "new")
                .unwrap()
                .is_err()
        );
        assert!(
            handled(&t, &ks("new", "Unknown", "Progressing"), "new")
                .unwrap()
                .is_err()
        );
        assert_eq!(
            handled(&t, &ks("new", "True", "Succeeded"), "new").unwrap(),
            Ok("kustomization/web: m".into())
        );
        let failed = handled(&t, &ks("new", "False", "BuildFailed"), "new").unwrap_err();
        assert_eq!(failed.to_string(), "kustomization/web: BuildFailed: m");
        assert_eq!(exit_of(&failed), crate::term::Exit::Differs);
    }
}
