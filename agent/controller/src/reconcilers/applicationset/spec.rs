//! An ApplicationSet's spec checked (every field skewer does not do refused by name), and one
//! parameter set rendered into the Application it generates: the template (with a top-level
//! generator's override merged in), `templatePatch`, the name and namespace checked, the
//! marks skewer adds (the owner reference, RollingSync's hold, `preserveResourcesOnDeletion`).
//! Pure.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::generate::{self, Generator, Kind};
use super::params::Selector;
use super::rollout::{MaxUpdate, Step};
use super::template::{Renderer, missing_key};
use crate::api::application::ApplicationSpec;
use crate::api::{APPSET_LABEL, Application, ApplicationSet, PRESERVE_RESOURCES, ROLLOUT_HOLD};

/// How often generators that read Git look again, unless `requeueAfterSeconds` says (Argo
/// CD's default).
pub const GIT_INTERVAL: Duration = Duration::from_secs(180);
/// The shortest `requeueAfterSeconds` taken.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// Argo CD's resources finalizer (and its `/foreground`, `/background` forms).
pub const ARGO_RESOURCES_FINALIZER: &str = "resources-finalizer.argocd.argoproj.io";
/// Generators one ApplicationSet may list at the top.
pub const MAX_GENERATORS: usize = 64;

/// What the ApplicationSet may do to the Applications it generates
/// (`syncPolicy.applicationsSync`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub update: bool,
    pub delete: bool,
}

/// The spec, checked.
#[derive(Debug, Clone)]
pub struct Checked {
    pub generators: Vec<Generator>,
    pub renderer: Renderer,
    /// `{metadata, spec}` as written.
    pub template: Value,
    pub template_patch: Option<String>,
    pub policy: Policy,
    pub preserve: bool,
    /// RollingSync's steps; `None`: all at once.
    pub steps: Option<Vec<Step>>,
    /// When to generate again without being asked (`None`: only on a change).
    pub interval: Option<Duration>,
}

/// Checks `set`'s spec.
pub fn check(set: &ApplicationSet) -> Result<Checked, String> {
    let spec = &set.spec;
    if spec.strategy_ref.is_some() {
        return Err("spec.strategyRef: not supported: write the strategy in spec.strategy".into());
    }
    if !spec.ignore_application_differences.is_empty() {
        return Err("spec.ignoreApplicationDifferences: not supported: skewer applies only the fields the template names, so fields others set on generated Applications stay; take a field out of the template to leave it to others".into());
    }
    if spec.template_patch.is_some() && !spec.go_template {
        return Err("spec.templatePatch: needs goTemplate: true (as in Argo CD)".into());
    }
    if spec.generators.is_empty() {
        return Err("spec.generators: at least one generator is required".into());
    }
    if spec.generators.len() > MAX_GENERATORS {
        return Err(format!(
            "spec.generators: {} generators, more than {MAX_GENERATORS}",
            spec.generators.len()
        ));
    }
    let renderer = Renderer {
        go: spec.go_template,
        missing: missing_key(&spec.go_template_options)?,
    };
    let generators = spec
        .generators
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let v = serde_json::to_value(g).map_err(|e| e.to_string())?;
            generate::read(&v, &format!("spec.generators[{i}]"), 0)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let policy = match spec
        .sync_policy
        .as_ref()
        .and_then(|p| p.applications_sync.as_deref())
    {
        None | Some("sync") => Policy {
            update: true,
            delete: true,
        },
        Some("create-only") => Policy {
            update: false,
            delete: false,
        },
        Some("create-update") => Policy {
            update: true,
            delete: false,
        },
        Some("create-delete") => Policy {
            update: false,
            delete: true,
        },
        Some(other) => {
            return Err(format!(
                "spec.syncPolicy.applicationsSync: '{other}' is not create-only, create-update, create-delete or sync"
            ));
        }
    };
    let steps = match &spec.strategy {
        None => None,
        Some(s) => {
            if s.deletion_order.is_some() {
                return Err(
                    "spec.strategy.deletionOrder: not supported: Applications are deleted together"
                        .into(),
                );
            }
            match s.type_.as_deref() {
                None | Some("") | Some("AllAtOnce") => None,
                Some("RollingSync") => {
                    let written = s.rolling_sync.as_ref().map(|r| r.steps.as_slice());
                    let written = written.filter(|w| !w.is_empty()).ok_or(
                        "spec.strategy.rollingSync.steps: a RollingSync needs at least one step",
                    )?;
                    Some(
                        written
                            .iter()
                            .enumerate()
                            .map(|(i, step)| self::step(step, i))
                            .collect::<Result<Vec<_>, _>>()?,
                    )
                }
                Some(other) => {
                    return Err(format!(
                        "spec.strategy.type: '{other}' is not AllAtOnce or RollingSync"
                    ));
                }
            }
        }
    };
    let template =
        serde_json::to_value(&spec.template).map_err(|e| format!("spec.template: {e}"))?;
    Ok(Checked {
        interval: interval(&generators),
        generators,
        renderer,
        template,
        template_patch: spec.template_patch.clone(),
        policy,
        preserve: spec
            .sync_policy
            .as_ref()
            .is_some_and(|p| p.preserve_resources_on_deletion),
        steps,
    })
}

fn step(step: &crate::api::applicationset::RollingStep, i: usize) -> Result<Step, String> {
    let at = format!("spec.strategy.rollingSync.steps[{i}]");
    let mut selector = Selector::default();
    for (j, e) in step.match_expressions.iter().enumerate() {
        let field = format!("{at}.matchExpressions[{j}]");
        if !matches!(e.operator.as_str(), "In" | "NotIn") {
            return Err(format!(
                "{field}.operator: '{}' is not In or NotIn",
                e.operator
            ));
        }
        selector = selector.and(Selector::requirement_of(
            &e.key,
            &e.operator,
            &e.values,
            &field,
        )?);
    }
    let max_update = match &step.max_update {
        None => MaxUpdate::All,
        Some(IntOrString::Int(n)) => MaxUpdate::Count(
            usize::try_from(*n).map_err(|_| format!("{at}.maxUpdate: {n} is negative"))?,
        ),
        Some(IntOrString::String(s)) => {
            let pct = s
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<u32>().ok())
                .filter(|p| *p <= 100)
                .ok_or_else(|| {
                    format!("{at}.maxUpdate: '{s}' is not a number or a percentage like \"25%\"")
                })?;
            MaxUpdate::Percent(pct)
        }
    };
    Ok(Step {
        selector,
        max_update,
    })
}

/// The shortest `requeueAfterSeconds` of the git generators (at least 1 s), else Argo CD's
/// three minutes when any generator reads Git; `None` when none does.
fn interval(generators: &[Generator]) -> Option<Duration> {
    fn gits<'a>(g: &'a Generator, out: &mut Vec<&'a generate::Git>) {
        match &g.kind {
            Kind::Git(git) => out.push(git),
            Kind::Matrix(children) => children.iter().for_each(|(c, _)| gits(c, out)),
            Kind::Merge { generators, .. } => generators.iter().for_each(|c| gits(c, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    generators.iter().for_each(|g| gits(g, &mut all));
    // A matrix's second generator may be a templated git one not seen until rendered: any
    // matrix counts as reading Git.
    let matrix = generators
        .iter()
        .any(|g| matches!(g.kind, Kind::Matrix(_) | Kind::Merge { .. }));
    if all.is_empty() && !matrix {
        return None;
    }
    Some(
        all.iter()
            .filter_map(|g| g.requeue_after)
            .min()
            .unwrap_or(GIT_INTERVAL)
            .max(MIN_INTERVAL),
    )
}

/// The Application `params` generate, from the template `base` (the ApplicationSet's, with a
/// generator's override merged in). Errors name the field.
pub fn application(
    set: &ApplicationSet,
    checked: &Checked,
    base: &Value,
    params: &serde_json::Map<String, Value>,
) -> Result<Application, String> {
    let data = Value::Object(params.clone());
    let mut rendered = checked.renderer.value(base, &data, "spec.template")?;
    if let Some(patch) = &checked.template_patch {
        let text = checked
            .renderer
            .string(patch, &data)
            .map_err(|e| format!("spec.templatePatch: {e}"))?;
        let patch = skewer_appliers::load::parse_yaml(&text)
            .map_err(|e| format!("spec.templatePatch: the rendered patch is not YAML: {e}"))?;
        if !patch.is_object() {
            return Err("spec.templatePatch: the rendered patch is not a YAML mapping".into());
        }
        json_patch::merge(&mut rendered, &patch);
    }
    let meta = rendered.get("metadata").cloned().unwrap_or(Value::Null);
    let meta: crate::api::applicationset::TemplateMeta =
        serde_json::from_value(meta).map_err(|e| format!("spec.template.metadata: {e}"))?;
    let spec: ApplicationSpec =
        serde_json::from_value(rendered.get("spec").cloned().unwrap_or(Value::Null))
            .map_err(|e| format!("spec.template.spec: {e}"))?;
    let name = meta.name.clone().unwrap_or_default();
    if let Some(problem) = name_problem(&name) {
        return Err(format!("spec.template.metadata.name: '{name}' {problem}"));
    }
    let ns = set.namespace().unwrap_or_default();
    if let Some(other) = meta
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty() && *n != ns)
    {
        return Err(format!(
            "spec.template.metadata.namespace: '{other}': an ApplicationSet generates Applications in its own namespace ({ns}) only"
        ));
    }
    let mut labels = meta.labels;
    labels.insert(APPSET_LABEL.into(), label_value(&set.name_any()));
    let mut annotations = meta.annotations;
    if checked.steps.is_some() {
        annotations.insert(ROLLOUT_HOLD.into(), "true".into());
    }
    if checked.preserve {
        annotations.insert(PRESERVE_RESOURCES.into(), "true".into());
    }
    // Argo CD's resources finalizer means "prune on deletion", which skewer's own finalizer
    // does as the Application's policy says; nothing would ever remove Argo CD's.
    let finalizers: Vec<String> = meta
        .finalizers
        .into_iter()
        .filter(|f| !f.starts_with(ARGO_RESOURCES_FINALIZER))
        .collect();
    Ok(Application {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(ns),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: (!finalizers.is_empty()).then_some(finalizers),
            owner_references: Some(vec![owner(set)]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    })
}

/// The set's name as a label value: itself when it fits (63 characters), else empty (the label
/// only marks the Application as generated; its owner reference says by whom).
fn label_value(name: &str) -> String {
    if name.len() <= 63 {
        name.to_string()
    } else {
        String::new()
    }
}

/// The owner reference generated Applications carry, so that deleting the ApplicationSet
/// deletes them.
pub fn owner(set: &ApplicationSet) -> OwnerReference {
    OwnerReference {
        api_version: ApplicationSet::api_version(&()).into(),
        kind: ApplicationSet::kind(&()).into(),
        name: set.name_any(),
        uid: set.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `app` was generated by `set` (its controller owner reference is `set`'s).
pub fn owned_by(app: &Application, set: &ApplicationSet) -> bool {
    let uid = set.uid();
    app.owner_references()
        .iter()
        .any(|o| o.kind == "ApplicationSet" && Some(&o.uid) == uid.as_ref())
}

/// What is wrong with `name` as an Application's name (a DNS subdomain), if anything.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty (the template must name each Application)");
    }
    if name.len() > 253 {
        return Some("is longer than 253 characters");
    }
    let ok = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    (!ok).then_some("is not a valid name: lower case letters, digits, '-' and '.', starting and ending with a letter or digit")
}

/// `over` merged into `base` (objects merged key by key, anything else replaced): a
/// generator's template override on the ApplicationSet's template.
pub fn overridden(base: &Value, over: Option<&Value>) -> Value {
    let mut out = base.clone();
    if let Some(over) = over {
        merge(&mut out, over);
    }
    out
}

fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

/// Two parameter sets rendering the same name: the names and how many sets gave each.
pub fn duplicates(names: &[String]) -> BTreeMap<&str, usize> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for n in names {
        *counts.entry(n.as_str()).or_default() += 1;
    }
    counts.retain(|_, c| *c > 1);
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(spec: Value) -> ApplicationSet {
        let mut s: ApplicationSet = serde_json::from_value(json!({
            "apiVersion": "skewer.dev/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": "fleet", "namespace": "team-a", "uid": "u-1"},
            "spec": spec,
        }))
        .unwrap();
        s.metadata.uid = Some("u-1".into());
        s
    }

    const TEMPLATE: &str = r#"{"metadata": {"name": "{{name}}-app", "labels": {"env": "{{metadata.labels.env}}"}},
        "spec": {"project": "default", "source": {"repoURL": "https://git/r", "path": "apps"},
                 "destination": {"server": "{{server}}", "namespace": "x"}}}"#;

    #[test]
    fn a_parameter_set_renders_an_owned_application() {
        let mut template: Value = serde_json::from_str(TEMPLATE).unwrap();
        template["metadata"]["finalizers"] = json!([
            "resources-finalizer.argocd.argoproj.io/background",
            "example.com/keep"
        ]);
        let s = set(
            json!({"generators": [{"clusters": {}}], "template": template,
            "strategy": {"type": "RollingSync", "rollingSync": {"steps": [{"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}], "maxUpdate": "50%"}]}},
            "syncPolicy": {"preserveResourcesOnDeletion": true}}),
        );
        let c = check(&s).unwrap();
        let params =
            json!({"name": "spoke", "server": "https://spoke:6443", "metadata.labels.env": "dev"});
        let app = application(&s, &c, &c.template, params.as_object().unwrap()).unwrap();
        assert_eq!(app.name_any(), "spoke-app");
        assert_eq!(app.namespace().as_deref(), Some("team-a"));
        assert_eq!(app.labels()["env"], "dev");
        assert_eq!(app.labels()[APPSET_LABEL], "fleet");
        assert_eq!(
            app.spec.destination.server.as_deref(),
            Some("https://spoke:6443")
        );
        assert_eq!(app.annotations()[ROLLOUT_HOLD], "true");
        assert_eq!(app.annotations()[PRESERVE_RESOURCES], "true");
        assert!(owned_by(&app, &s));
        assert_eq!(
            app.finalizers(),
            ["example.com/keep"],
            "Argo CD's resources finalizer would never be removed"
        );
        assert_eq!(c.steps.unwrap()[0].max_update, MaxUpdate::Percent(50));
        assert_eq!(
            c.interval, None,
            "no git generator: only changes reconcile it"
        );
    }

    #[test]
    fn go_templates_and_template_patch() {
        let s = set(
            json!({"goTemplate": true, "goTemplateOptions": ["missingkey=error"],
            "generators": [{"list": {"elements": [{"name": "a", "auto": true}]}}],
            "template": {"metadata": {"name": "{{ .name | upper | lower }}"}, "spec": {"source": {"repoURL": "r"}, "destination": {"name": "in-cluster"}}},
            "templatePatch": "{{ if .auto }}spec:\n  syncPolicy:\n    automated: {prune: true}\n{{ end }}"}),
        );
        let c = check(&s).unwrap();
        let p = json!({"name": "a", "auto": true});
        let app = application(&s, &c, &c.template, p.as_object().unwrap()).unwrap();
        assert_eq!(app.name_any(), "a");
        assert!(app.spec.sync_policy.unwrap().automated.unwrap().prune);
        let missing = json!({"auto": false});
        let e = application(&s, &c, &c.template, missing.as_object().unwrap()).unwrap_err();
        assert!(
            e.contains("spec.template.metadata.name: map has no entry for key \"name\""),
            "{e}"
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let tpl: Value = serde_json::from_str(TEMPLATE).unwrap();
        for (extra, says) in [
            (json!({"strategyRef": {"name": "x"}}), "spec.strategyRef"),
            (
                json!({"ignoreApplicationDifferences": [{"jsonPointers": ["/spec"]}]}),
                "spec.ignoreApplicationDifferences",
            ),
            (
                json!({"templatePatch": "x"}),
                "spec.templatePatch: needs goTemplate",
            ),
            (
                json!({"syncPolicy": {"applicationsSync": "never"}}),
                "applicationsSync: 'never'",
            ),
            (
                json!({"strategy": {"type": "RollingSync"}}),
                "at least one step",
            ),
            (
                json!({"strategy": {"type": "RollingSync", "rollingSync": {"steps": [{"matchExpressions": [{"key": "env", "operator": "Exists"}]}]}}}),
                "steps[0].matchExpressions[0].operator: 'Exists'",
            ),
            (
                json!({"strategy": {"type": "RollingSync", "rollingSync": {"steps": [{"maxUpdate": "lots"}]}}}),
                "steps[0].maxUpdate: 'lots'",
            ),
            (
                json!({"goTemplateOptions": ["x"]}),
                "spec.goTemplateOptions[0]",
            ),
            (
                json!({"generators": [{"pullRequest": {}}]}),
                "spec.generators[0].pullRequest",
            ),
        ] {
            let mut spec = json!({"generators": [{"clusters": {}}], "template": tpl.clone()});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            let e = check(&set(spec)).map(|_| ()).unwrap_err();
            assert!(e.contains(says), "{extra}: {e}");
        }
        let s = set(json!({"generators": [{"clusters": {}}], "template": tpl}));
        let c = check(&s).unwrap();
        for (params, says) in [
            (
                json!({"name": "Bad_Name"}),
                "'Bad_Name-app' is not a valid name",
            ),
            (json!({}), "'{{name}}-app' is not a valid name"),
        ] {
            let e = application(&s, &c, &c.template, params.as_object().unwrap()).unwrap_err();
            assert!(e.contains(says), "{e}");
        }
        let mut other_ns: Value = serde_json::from_str(TEMPLATE).unwrap();
        other_ns["metadata"]["namespace"] = json!("kube-system");
        let e =
            application(&s, &c, &other_ns, json!({"name": "a"}).as_object().unwrap()).unwrap_err();
        assert!(e.contains("in its own namespace (team-a) only"), "{e}");
        assert_eq!(
            duplicates(&["a".into(), "b".into(), "a".into()]),
            [("a", 2)].into()
        );
    }

    #[test]
    fn applications_sync_says_what_may_change() {
        let tpl: Value = serde_json::from_str(TEMPLATE).unwrap();
        for (written, update, delete) in [
            (None, true, true),
            (Some("sync"), true, true),
            (Some("create-only"), false, false),
            (Some("create-update"), true, false),
            (Some("create-delete"), false, true),
        ] {
            let s = set(
                json!({"generators": [{"clusters": {}}], "template": tpl.clone(),
                "syncPolicy": {"applicationsSync": written}}),
            );
            assert_eq!(
                check(&s).unwrap().policy,
                Policy { update, delete },
                "{written:?}"
            );
        }
    }

    #[test]
    fn a_generator_template_overrides_parts_of_the_template() {
        let base = json!({"metadata": {"name": "x", "labels": {"a": "1"}}, "spec": {"project": "default"}});
        let v = overridden(&base, Some(&json!({"metadata": {"labels": {"b": "2"}}})));
        assert_eq!(v["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        assert_eq!(v["metadata"]["name"], "x");
    }
}
