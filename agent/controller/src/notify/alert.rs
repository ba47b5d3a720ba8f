//! Which events an Alert sends: its sources, severity and message filters, checked once when
//! the Alert changes (every error names its field) and then matched per event. Pure.
//!
//! The filters are a tenant's regular expressions, run on every event: `regex` matches in
//! linear time, and each pattern is compiled within a size limit, so no pattern can cost more
//! than a bounded amount of memory or time per message.

use std::collections::BTreeMap;

use regex::{Regex, RegexBuilder};

use super::event::{Event, Severity};
use crate::api::notification::AlertSpec;
use crate::api::receiver::ResourceReference as EventSource;

/// At most this many patterns in each list, and this long each.
const MAX_PATTERNS: usize = 64;
const MAX_PATTERN_LEN: usize = 1024;
/// A compiled pattern's size limit (bytes of the compiled program).
const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Kinds whose events skewer raises.
const KINDS: &[&str] = &[
    "Kustomization",
    "Application",
    "ApplicationSet",
    "GitRepository",
    "OCIRepository",
];

/// An Alert, checked.
#[derive(Debug)]
pub struct Rules {
    namespace: String,
    errors_only: bool,
    sources: Vec<EventSource>,
    include: Vec<Regex>,
    exclude: Vec<Regex>,
    /// `eventMetadata`, and `summary` under that key.
    metadata: BTreeMap<String, String>,
}

impl Rules {
    /// Checks an Alert of `namespace`; the error names the field.
    pub fn new(namespace: &str, spec: &AlertSpec) -> Result<Self, String> {
        let errors_only = match spec.event_severity.as_deref() {
            None | Some("info") => false,
            Some("error") => true,
            Some(other) => {
                return Err(format!(
                    "spec.eventSeverity: {other:?} is neither \"info\" nor \"error\""
                ));
            }
        };
        if spec.event_sources.is_empty() {
            return Err("spec.eventSources: name at least one source".into());
        }
        for (i, s) in spec.event_sources.iter().enumerate() {
            if !KINDS.contains(&s.kind.as_str()) {
                return Err(format!(
                    "spec.eventSources[{i}].kind: skewer raises no events for {:?} (it does for {})",
                    s.kind,
                    KINDS.join(", ")
                ));
            }
            if !s.match_labels.is_empty() && s.name != "*" {
                return Err(format!(
                    "spec.eventSources[{i}].matchLabels: only with name \"*\""
                ));
            }
        }
        let mut metadata = spec.event_metadata.clone();
        if let Some(summary) = spec.summary.as_ref().filter(|s| !s.is_empty()) {
            metadata
                .entry("summary".into())
                .or_insert_with(|| summary.clone());
        }
        Ok(Self {
            namespace: namespace.to_string(),
            errors_only,
            sources: spec.event_sources.clone(),
            include: patterns("spec.inclusionList", &spec.inclusion_list)?,
            exclude: patterns("spec.exclusionList", &spec.exclusion_list)?,
            metadata,
        })
    }

    /// Whether `event` goes out through this Alert.
    pub fn matches(&self, event: &Event) -> bool {
        if self.errors_only && event.severity != Severity::Error {
            return false;
        }
        if !self.sources.iter().any(|s| self.selects(s, event)) {
            return false;
        }
        if !self.include.is_empty() && !self.include.iter().any(|r| r.is_match(&event.message)) {
            return false;
        }
        !self.exclude.iter().any(|r| r.is_match(&event.message))
    }

    fn selects(&self, s: &EventSource, event: &Event) -> bool {
        let o = &event.involved_object;
        let namespace = s.namespace.as_deref().unwrap_or(&self.namespace);
        s.kind == o.kind
            && (namespace == "*" || namespace == o.namespace)
            && (s.name == "*" || s.name == o.name)
            && s.match_labels
                .iter()
                .all(|(k, v)| event.labels.get(k) == Some(v))
    }

    /// `event` as this Alert sends it: its metadata added where the event has no such key.
    pub fn dress(&self, event: &Event) -> Event {
        let mut out = event.clone();
        for (k, v) in &self.metadata {
            out.metadata.entry(k.clone()).or_insert_with(|| v.clone());
        }
        out
    }
}

fn patterns(field: &str, list: &[String]) -> Result<Vec<Regex>, String> {
    if list.len() > MAX_PATTERNS {
        return Err(format!(
            "{field}: {} patterns, at most {MAX_PATTERNS}",
            list.len()
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, p)| {
            if p.len() > MAX_PATTERN_LEN {
                return Err(format!(
                    "{field}[{i}]: {} bytes, at most {MAX_PATTERN_LEN}",
                    p.len()
                ));
            }
            RegexBuilder::new(p)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| format!("{field}[{i}]: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notify::event::{InvolvedObject, Phase};

    fn event(kind: &str, ns: &str, name: &str, severity: Severity, message: &str) -> Event {
        Event {
            involved_object: InvolvedObject {
                kind: kind.into(),
                namespace: ns.into(),
                name: name.into(),
                uid: "u".into(),
                api_version: "skewer.dev/v1alpha1".into(),
            },
            severity,
            timestamp: String::new(),
            message: message.into(),
            reason: "R".into(),
            metadata: BTreeMap::new(),
            reporting_controller: "skewer".into(),
            reporting_instance: String::new(),
            labels: [("team".to_string(), "a".to_string())].into(),
            phase: Phase::Succeeded,
        }
    }

    fn source(kind: &str, name: &str) -> EventSource {
        EventSource {
            kind: kind.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    fn spec(sources: Vec<EventSource>) -> AlertSpec {
        AlertSpec {
            event_sources: sources,
            ..Default::default()
        }
    }

    #[test]
    fn sources_select_by_kind_name_namespace_and_labels() {
        let rules = Rules::new("apps", &spec(vec![source("Kustomization", "web")])).unwrap();
        assert!(rules.matches(&event("Kustomization", "apps", "web", Severity::Info, "ok")));
        assert!(!rules.matches(&event("Kustomization", "apps", "db", Severity::Info, "ok")));
        assert!(!rules.matches(&event(
            "Kustomization",
            "other",
            "web",
            Severity::Info,
            "ok"
        )));
        assert!(!rules.matches(&event("Application", "apps", "web", Severity::Info, "ok")));

        let mut any = source("Application", "*");
        any.match_labels = [("team".to_string(), "a".to_string())].into();
        any.namespace = Some("other".into());
        let rules = Rules::new("apps", &spec(vec![any.clone()])).unwrap();
        assert!(rules.matches(&event("Application", "other", "x", Severity::Info, "ok")));
        any.match_labels = [("team".to_string(), "b".to_string())].into();
        let rules = Rules::new("apps", &spec(vec![any])).unwrap();
        assert!(!rules.matches(&event("Application", "other", "x", Severity::Info, "ok")));
    }

    #[test]
    fn severity_and_message_filters() {
        let mut s = spec(vec![source("Kustomization", "*")]);
        s.event_severity = Some("error".into());
        s.inclusion_list = vec!["^apply".into()];
        s.exclusion_list = vec!["timeout".into()];
        let rules = Rules::new("apps", &s).unwrap();
        let e = |sev, msg| event("Kustomization", "apps", "web", sev, msg);
        assert!(rules.matches(&e(Severity::Error, "apply failed")));
        assert!(
            !rules.matches(&e(Severity::Info, "apply done")),
            "info is filtered"
        );
        assert!(
            !rules.matches(&e(Severity::Error, "build failed")),
            "not included"
        );
        assert!(
            !rules.matches(&e(Severity::Error, "apply timeout")),
            "excluded"
        );
    }

    #[test]
    fn bad_alerts_are_refused_naming_the_field() {
        let mut s = spec(vec![source("Kustomization", "*")]);
        s.event_severity = Some("warning".into());
        assert!(
            Rules::new("a", &s)
                .unwrap_err()
                .starts_with("spec.eventSeverity")
        );

        let s = spec(vec![source("HelmRelease", "*")]);
        assert!(
            Rules::new("a", &s)
                .unwrap_err()
                .starts_with("spec.eventSources[0].kind")
        );

        let mut labelled = source("Kustomization", "web");
        labelled.match_labels = [("a".to_string(), "b".to_string())].into();
        assert!(
            Rules::new("a", &spec(vec![labelled]))
                .unwrap_err()
                .starts_with("spec.eventSources[0].matchLabels")
        );

        let mut s = spec(vec![source("Kustomization", "*")]);
        s.inclusion_list = vec!["ok".into(), "(".into()];
        assert!(
            Rules::new("a", &s)
                .unwrap_err()
                .starts_with("spec.inclusionList[1]")
        );
        assert!(Rules::new("a", &spec(vec![])).is_err());
    }

    #[test]
    fn hostile_patterns_are_bounded() {
        let mut s = spec(vec![source("Kustomization", "*")]);
        // Compiles to far more than the size limit.
        s.exclusion_list = vec!["(?:a{1,1000}){1,1000}".into()];
        let err = Rules::new("a", &s).unwrap_err();
        assert!(err.starts_with("spec.exclusionList[0]"), "{err}");
        s.exclusion_list = vec!["a".repeat(MAX_PATTERN_LEN + 1)];
        assert!(Rules::new("a", &s).is_err());
        s.exclusion_list = vec!["a".into(); MAX_PATTERNS + 1];
        assert!(Rules::new("a", &s).is_err());
    }

    #[test]
    fn alert_metadata_never_overrides_the_events() {
        let mut s = spec(vec![source("Kustomization", "*")]);
        s.event_metadata = [
            ("cluster".to_string(), "prod".to_string()),
            ("revision".to_string(), "x".to_string()),
        ]
        .into();
        s.summary = Some("web is down".into());
        let rules = Rules::new("apps", &s).unwrap();
        let mut e = event("Kustomization", "apps", "web", Severity::Info, "ok");
        e.metadata.insert("revision".into(), "main@sha1:1".into());
        let out = rules.dress(&e);
        assert_eq!(out.metadata["cluster"], "prod");
        assert_eq!(out.metadata["revision"], "main@sha1:1");
        assert_eq!(out.metadata["summary"], "web is down");
    }
}
