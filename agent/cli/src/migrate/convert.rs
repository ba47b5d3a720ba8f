//! Flux's and Argo CD's objects written as skewer's, and every field that does not come along,
//! with why. Pure: objects in, objects and reasons out.
//!
//! An object comes along when it reads as skewer's type of that kind, survives a round trip
//! through it (a field skewer's schema lacks would be dropped by the API server: it is named),
//! and the daemon's own checks of its spec ([`Judge`]) take it.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use skewer_api::kustomization::ResourceInventory;
use skewer_api::{Application, GitRepository, Kustomization, OCIRepository, Receiver};
use skewer_appliers::{Inventory, ObjectId};

/// The apiVersion of every skewer kind.
pub const SKEWER_API: &str = "skewer.dev/v1alpha1";

/// What the daemon would say of a skewer object: `Some(why)` when it would refuse it.
pub type Judge<'a> = &'a dyn Fn(&Value) -> Option<String>;

/// Which tool an object came from, and so which marks its live objects carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Flux,
    ArgoCd,
}

/// An object as it was found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Origin {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl Origin {
    fn of(object: &Value) -> Origin {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
        let meta = object.get("metadata");
        Origin {
            api_version: text(object.get("apiVersion")),
            kind: text(object.get("kind")),
            namespace: text(meta.and_then(|m| m.get("namespace"))),
            name: text(meta.and_then(|m| m.get("name"))),
        }
    }

    fn group(&self) -> &str {
        skewer_appliers::object::split_api_version(&self.api_version).0
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace.is_empty() {
            true => write!(f, "{} {}", self.kind, self.name)?,
            false => write!(f, "{} {}/{}", self.kind, self.namespace, self.name)?,
        }
        write!(f, " ({})", self.api_version)
    }
}

/// One object written as skewer's.
#[derive(Debug, Clone)]
pub struct Converted {
    pub from: Origin,
    pub tool: Tool,
    /// The skewer object.
    pub object: Value,
    /// Each field that does not come along, or the daemon's refusal, with why. Empty: the
    /// object comes along whole.
    pub lost: Vec<String>,
    /// What to know that is not a lost field (a webhook URL that changes, say).
    pub notes: Vec<String>,
    /// The objects the original applied, as its status records them: what a handover takes.
    pub live: Inventory,
}

impl Converted {
    /// Whether it deploys objects (a Kustomization or an Application), so it has live objects
    /// to hand over.
    pub fn deploys(&self) -> bool {
        matches!(self.from.kind.as_str(), "Kustomization" | "Application")
    }
}

/// Everything read, sorted: what was written as skewer's, and what was not, with why.
#[derive(Debug, Default)]
pub struct Plan {
    pub converted: Vec<Converted>,
    /// Objects of Flux or Argo CD that are not written, each with why (a kind skewer does not
    /// have, or one it reads as it is).
    pub skipped: Vec<(Origin, String)>,
}

impl Plan {
    /// Whether every object and field came along (Argo CD's Secrets need not: skewer reads
    /// them as they are).
    pub fn whole(&self) -> bool {
        self.converted.iter().all(|c| c.lost.is_empty())
            && self.skipped.iter().all(|(o, _)| o.kind == "Secret")
    }
}

const FLUX_KUSTOMIZE: &str = "kustomize.toolkit.fluxcd.io";
const FLUX_SOURCE: &str = "source.toolkit.fluxcd.io";
const FLUX_NOTIFICATION: &str = "notification.toolkit.fluxcd.io";
const ARGO: &str = "argoproj.io";
/// The annotation `migrate --apply` leaves on an original it stopped: the skewer object that
/// took over.
pub const MIGRATED_TO: &str = "skewer.dev/migrated-to";
/// The annotation holding what stopping an original changed (`{"suspend": false}`,
/// `{"automated": {...}}`, as JSON), so that reading it again writes what it was.
pub const STOPPED_WAS: &str = "skewer.dev/stopped-was";
/// The label Argo CD's Secrets carry.
const ARGO_SECRET_TYPE: &str = "argocd.argoproj.io/secret-type";
/// Argo CD's finalizers that delete an Application's objects with it.
pub const ARGO_FINALIZERS: [&str; 3] = [
    "resources-finalizer.argocd.argoproj.io",
    "resources-finalizer.argocd.argoproj.io/foreground",
    "resources-finalizer.argocd.argoproj.io/background",
];

/// Reads `objects` (any mix; what is neither Flux's nor Argo CD's is left out without a word)
/// and writes each of Flux's and Argo CD's as skewer's.
pub fn convert(objects: Vec<Value>, judge: Judge) -> Plan {
    let mut plan = Plan::default();
    for object in objects {
        let from = Origin::of(&object);
        match kind_of(&from, &object) {
            Kind::Convert(tool) => plan.converted.push(one(object, from, tool, judge)),
            Kind::Skip(why) => plan.skipped.push((from, why)),
            Kind::Other => {}
        }
    }
    let key = |o: &Origin| (o.kind.clone(), o.namespace.clone(), o.name.clone());
    plan.converted.sort_by_key(|c| key(&c.from));
    plan.skipped.sort();
    plan
}

enum Kind {
    Convert(Tool),
    Skip(String),
    Other,
}

fn kind_of(from: &Origin, object: &Value) -> Kind {
    match (from.group(), from.kind.as_str()) {
        (FLUX_KUSTOMIZE, "Kustomization")
        | (FLUX_SOURCE, "GitRepository" | "OCIRepository")
        | (FLUX_NOTIFICATION, "Receiver") => Kind::Convert(Tool::Flux),
        (ARGO, "Application") => Kind::Convert(Tool::ArgoCd),
        (ARGO, "AppProject") => Kind::Skip(
            "projects are not carried: skewer's tenancy is each Application's serviceAccountName (its RBAC), and only project 'default' is taken".into(),
        ),
        (ARGO, "ApplicationSet") => Kind::Skip("ApplicationSets are not carried yet".into()),
        (FLUX_NOTIFICATION, "Alert" | "Provider") => {
            Kind::Skip("alerts are not carried yet: skewer reports through Events and conditions".into())
        }
        (g, k) if [FLUX_KUSTOMIZE, FLUX_SOURCE, FLUX_NOTIFICATION, ARGO].contains(&g)
            || g.ends_with(".toolkit.fluxcd.io") =>
        {
            Kind::Skip(format!("skewer has no {k}"))
        }
        ("", "Secret") => match object
            .pointer("/metadata/labels")
            .and_then(|l| l.get(ARGO_SECRET_TYPE))
            .and_then(Value::as_str)
        {
            Some("cluster") => Kind::Skip(
                "read by skewer as it is, from the namespace `skewer run --cluster-secret-namespace` names; nothing to write"
                    .into(),
            ),
            Some("repository" | "repo-creds") => Kind::Skip(
                "read by skewer as it is, in the namespace of the Applications that use it; nothing to write"
                    .into(),
            ),
            _ => Kind::Other,
        },
        _ => Kind::Other,
    }
}

fn one(object: Value, from: Origin, tool: Tool, judge: Judge) -> Converted {
    let mut notes = Vec::new();
    let live = match from.kind.as_str() {
        "Kustomization" => flux_inventory(&object),
        "Application" => argo_resources(&object),
        _ => Inventory::default(),
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), SKEWER_API.into());
    out.insert("kind".into(), from.kind.clone().into());
    out.insert("metadata".into(), metadata(&object, &mut notes));
    if let Some(spec) = object.get("spec") {
        out.insert("spec".into(), spec.clone());
    }
    let mut skewer = Value::Object(out);
    restore(&mut skewer, tool);
    match from.kind.as_str() {
        "Kustomization" => source_api_version(&mut skewer, "/spec/sourceRef"),
        "Receiver" => {
            if let Some(items) = skewer
                .pointer_mut("/spec/resources")
                .and_then(Value::as_array_mut)
            {
                for i in 0..items.len() {
                    source_api_version(&mut skewer, &format!("/spec/resources/{i}"));
                }
            }
            notes.push("its webhook URL changes: point the Git host at the path in the skewer Receiver's status.webhookPath".into());
        }
        "Application" if object.get("operation").is_some() => {
            notes.push("operation (an Argo CD sync in progress) is not carried: skewer syncs by itself, or on `skewer sync`".into());
        }
        _ => {}
    }
    let mut lost = match from.kind.as_str() {
        "Kustomization" => dropped::<Kustomization>(&skewer),
        "GitRepository" => dropped::<GitRepository>(&skewer),
        "OCIRepository" => dropped::<OCIRepository>(&skewer),
        "Receiver" => dropped::<Receiver>(&skewer),
        _ => dropped::<Application>(&skewer),
    };
    if lost.is_empty() {
        lost.extend(
            refusals(&skewer, judge)
                .into_iter()
                .map(|why| format!("refused by skewer: {why}")),
        );
    }
    Converted {
        from,
        tool,
        object: skewer,
        lost,
        notes,
        live,
    }
}

/// Every refusal of `object`: the daemon stops at the first field it refuses, so each one
/// named (`spec.source.helm: …`) is taken out of a copy and the copy judged again, until it is
/// taken or a refusal names no field that can be taken out (a bounded number of times).
fn refusals(object: &Value, judge: Judge) -> Vec<String> {
    let mut object = object.clone();
    let mut out: Vec<String> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for _ in 0..32 {
        let Some(why) = judge(&object) else {
            break;
        };
        // One message may name several fields, `; `-separated (a part not naming a field
        // belongs to the one before it).
        let mut parts: Vec<String> = Vec::new();
        for part in why.split("; ") {
            match parts.last_mut() {
                Some(last) if field_of(part).is_none() => {
                    last.push_str("; ");
                    last.push_str(part);
                }
                _ => parts.push(part.to_string()),
            }
        }
        let fields: Vec<String> = parts.iter().filter_map(|p| field_of(p)).collect();
        let fresh = fields.iter().all(|f| !seen.contains(f));
        if fresh {
            out.extend(parts.iter().cloned());
        }
        if !fresh || fields.is_empty() || !fields.iter().all(|f| remove(&mut object, f)) {
            break;
        }
        seen.extend(fields);
    }
    out.dedup();
    out
}

/// The field a refusal starts with: `spec.a.b[2]` of `spec.a.b[2]: …` or `spec.a is …`.
fn field_of(message: &str) -> Option<String> {
    let end = message.find([':', ' ']).unwrap_or(message.len());
    let field = &message[..end];
    field.starts_with("spec.").then(|| field.to_string())
}

/// Removes the field at `spec.a.b[2]` from `object`; whether it was there.
fn remove(object: &mut Value, field: &str) -> bool {
    let mut steps: Vec<String> = Vec::new();
    for part in field.split('.') {
        match part.split_once('[') {
            Some((name, index)) => {
                steps.push(name.to_string());
                steps.push(index.trim_end_matches(']').to_string());
            }
            None => steps.push(part.to_string()),
        }
    }
    let Some((last, parents)) = steps.split_last() else {
        return false;
    };
    let pointer: String = parents.iter().map(|s| format!("/{s}")).collect();
    match object.pointer_mut(&pointer) {
        Some(Value::Object(map)) => map.remove(last).is_some(),
        Some(Value::Array(items)) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => {
                items.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// The metadata skewer's object keeps: name, namespace, labels, and annotations but kubectl's
/// record of its last apply; what the server sets is left behind.
fn metadata(object: &Value, notes: &mut Vec<String>) -> Value {
    let mut out = Map::new();
    let meta = object.get("metadata").and_then(Value::as_object);
    for key in ["name", "namespace", "labels"] {
        if let Some(v) = meta.and_then(|m| m.get(key)) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(Value::Object(a)) = meta.and_then(|m| m.get("annotations")) {
        let mut a = a.clone();
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
        if !a.is_empty() {
            out.insert("annotations".into(), Value::Object(a));
        }
    }
    let finalizers = meta
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    for f in finalizers {
        if ARGO_FINALIZERS.contains(&f) {
            notes.push(format!(
                "finalizer {f} is not carried: deleting a skewer Application whose syncPolicy.automated.prune is true prunes what it applied; otherwise its objects stay"
            ));
        }
    }
    Value::Object(out)
}

/// An original `migrate --apply` stopped is written as it was before: its suspension or
/// automation put back, and the annotations that recorded them left behind.
fn restore(object: &mut Value, tool: Tool) {
    let Some(Value::Object(annotations)) = object.pointer_mut("/metadata/annotations") else {
        return;
    };
    annotations.remove(MIGRATED_TO);
    let was = annotations.remove(STOPPED_WAS).and_then(|v| {
        v.as_str()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
    });
    if annotations.is_empty()
        && let Some(Value::Object(meta)) = object.get_mut("metadata")
    {
        meta.remove("annotations");
    }
    let Some(was) = was else {
        return;
    };
    let (field, at) = match tool {
        Tool::Flux => ("suspend", "/spec"),
        Tool::ArgoCd => ("automated", "/spec/syncPolicy"),
    };
    let value = was.get(field).cloned().unwrap_or(Value::Null);
    if let Some(Value::Object(parent)) = object.pointer_mut(at) {
        match value {
            Value::Null | Value::Bool(false) => parent.remove(field),
            v => parent.insert(field.into(), v),
        };
    }
}

/// A reference to a Flux kind names skewer's API instead.
fn source_api_version(object: &mut Value, at: &str) {
    let Some(Value::Object(reference)) = object.pointer_mut(at) else {
        return;
    };
    let flux = reference
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| v.contains(".toolkit.fluxcd.io/"));
    if flux {
        reference.insert("apiVersion".into(), SKEWER_API.into());
    }
}

/// Each field of `object` that skewer's type `K` does not keep, or why it does not read.
fn dropped<K: Serialize + DeserializeOwned>(object: &Value) -> Vec<String> {
    let mut object = object.clone();
    let mut out = Vec::new();
    // A type that refuses unknown fields names one at a time: each is found, taken out, and
    // the object read again (a bounded number of times).
    for _ in 0..64 {
        match serde_json::from_value::<K>(object.clone()) {
            Ok(typed) => {
                let back = serde_json::to_value(&typed).unwrap_or(Value::Null);
                missing(&object, &back, "", &mut out);
                break;
            }
            Err(e) => {
                let message = e.to_string();
                let found = unknown_field(&message)
                    .map(|(field, expected)| take_out(&mut object, field, &expected, "", &mut out))
                    .unwrap_or(false);
                if !found {
                    out.clear();
                    return vec![format!(
                        "not readable as skewer's {}: {message}",
                        kind(&object)
                    )];
                }
            }
        }
    }
    out.sort();
    out.into_iter()
        .map(|path| {
            format!("{path}: skewer's schema has no such field (the API server would drop it)")
        })
        .collect()
}

/// The field serde's "unknown field `x`, expected one of `a`, `b`" names, and those expected.
fn unknown_field(message: &str) -> Option<(&str, Vec<&str>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    let expected = rest.split('`').skip(1).step_by(2).collect();
    Some((field, expected))
}

/// Removes `field` from every map under `at` that holds it beside only `expected` keys (the
/// map serde was reading; with none named, as for a flattened type, the shallowest maps
/// holding it), recording each path; whether any was found.
fn take_out(
    v: &mut Value,
    field: &str,
    expected: &[&str],
    at: &str,
    out: &mut Vec<String>,
) -> bool {
    if expected.is_empty() {
        return shallowest(v, field, at, out);
    }
    let join = |k: &str| match at.is_empty() {
        true => k.to_string(),
        false => format!("{at}.{k}"),
    };
    let mut found = false;
    match v {
        Value::Object(map) => {
            let this = map.contains_key(field)
                && map
                    .keys()
                    .all(|k| k == field || expected.contains(&k.as_str()));
            if this {
                map.remove(field);
                out.push(join(field));
                found = true;
            }
            for (k, child) in map.iter_mut() {
                found |= take_out(child, field, expected, &join(k), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter_mut().enumerate() {
                found |= take_out(child, field, expected, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
    found
}

/// Removes `field` from the shallowest maps holding it, recording each path.
fn shallowest(v: &mut Value, field: &str, at: &str, out: &mut Vec<String>) -> bool {
    let mut level = vec![(at.to_string(), v)];
    while !level.is_empty() {
        let mut next = Vec::new();
        let mut found = false;
        for (path, value) in level {
            let join = |k: &str| match path.is_empty() {
                true => k.to_string(),
                false => format!("{path}.{k}"),
            };
            match value {
                Value::Object(map) => {
                    if map.remove(field).is_some() {
                        out.push(join(field));
                        found = true;
                    }
                    next.extend(map.iter_mut().map(|(k, c)| (join(k), c)));
                }
                Value::Array(items) => next.extend(
                    items
                        .iter_mut()
                        .enumerate()
                        .map(|(i, c)| (format!("{path}[{i}]"), c)),
                ),
                _ => {}
            }
        }
        if found {
            return true;
        }
        level = next;
    }
    false
}

fn kind(object: &Value) -> &str {
    object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object")
}

/// The paths under `at` that `original` sets to something and `back` does not have.
fn missing(original: &Value, back: &Value, at: &str, out: &mut Vec<String>) {
    match (original, back) {
        (Value::Object(o), Value::Object(b)) => {
            for (k, v) in o {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match b.get(k) {
                    Some(bv) => missing(v, bv, &path, out),
                    None if meaningful(v) => out.push(path),
                    None => {}
                }
            }
        }
        (Value::Array(o), Value::Array(b)) => {
            for (i, (v, bv)) in o.iter().zip(b).enumerate() {
                missing(v, bv, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// Whether a value says anything (a `false`, `null`, `""`, `[]` or `{}` that is dropped is the
/// default it would have anyway).
fn meaningful(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

/// A Flux Kustomization's `status.inventory`, with each entry's version made an apiVersion.
fn flux_inventory(object: &Value) -> Inventory {
    let Some(inv) = object
        .pointer("/status/inventory")
        .and_then(|i| serde_json::from_value::<ResourceInventory>(i.clone()).ok())
    else {
        return Inventory::default();
    };
    let mut live = skewer_api::inventory::from_status(Some(&inv));
    for (id, v) in live.entries.iter_mut() {
        if !v.contains('/') && !id.group.is_empty() {
            *v = format!("{}/{v}", id.group);
        }
    }
    live
}

/// An Argo CD Application's `status.resources`.
fn argo_resources(object: &Value) -> Inventory {
    let mut live = Inventory::default();
    let items = object
        .pointer("/status/resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    for r in items {
        let text = |k: &str| {
            r.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let (group, version) = (text("group"), text("version"));
        let id = ObjectId {
            namespace: text("namespace"),
            name: text("name"),
            group: group.clone(),
            kind: text("kind"),
        };
        if id.name.is_empty() || id.kind.is_empty() || version.is_empty() {
            continue;
        }
        let api_version = match group.is_empty() {
            true => version,
            false => format!("{group}/{version}"),
        };
        live.entries.insert(id, api_version);
    }
    live
}

#[cfg(test)]
mod tests;
