//! `skewer logs`: which of skewer's log lines are about one object, at which level, and how a
//! JSON line reads to a person. skewer writes each reconcile's lines inside a span naming the
//! kind, namespace and object (`reconcile{kind="Kustomization" namespace=apps object=web}` in
//! text, `"span":{"kind":…}` in JSON); a report's line names them as fields (`name=web`).
//! Pure.

use std::collections::BTreeMap;

use serde_json::Value;

/// What a line must be about, and how severe it must be.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// The kind as skewer names it (`Kustomization`), the namespace, the name.
    pub object: Option<(String, String, String)>,
    /// Only lines at least this severe.
    pub level: Option<Level>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.trim().to_ascii_uppercase().as_str() {
            "TRACE" => Level::Trace,
            "DEBUG" => Level::Debug,
            "INFO" => Level::Info,
            "WARN" | "WARNING" => Level::Warn,
            "ERROR" => Level::Error,
            _ => return None,
        })
    }
}

/// A line read: its level and the `key=value` fields of its spans and event.
struct Read {
    level: Option<Level>,
    fields: BTreeMap<String, String>,
}

/// What a text line says: `2026-…Z  INFO reconcile{kind="Kustomization" namespace=a object=web}: target: message name=web`.
fn read_text(line: &str) -> Read {
    let mut fields = BTreeMap::new();
    let level = line.split_whitespace().take(2).find_map(Level::parse);
    for token in line.split(|c: char| c.is_whitespace() || c == '{' || c == '}' || c == ',') {
        if let Some((k, v)) = token.split_once('=')
            && !k.is_empty()
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            let v = v.trim_end_matches(':').trim_matches('"');
            fields.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
    }
    Read { level, fields }
}

/// What a JSON line says: its level, and the fields of its event and every span.
fn read_json(v: &Value) -> Read {
    let mut fields = BTreeMap::new();
    let mut take = |o: &Value| {
        if let Some(m) = o.as_object() {
            for (k, v) in m {
                if let Some(s) = v.as_str() {
                    fields.entry(k.clone()).or_insert_with(|| s.to_string());
                }
            }
        }
    };
    take(&v["fields"]);
    take(&v["span"]);
    if let Some(spans) = v["spans"].as_array() {
        spans.iter().for_each(&mut take);
    }
    Read {
        level: v["level"].as_str().and_then(Level::parse),
        fields,
    }
}

/// The line as a person reads it, when the filter takes it: a text line as it is, a JSON line
/// as `time LEVEL message key=value…`. `None`: not about the object, or not severe enough.
pub fn pick(line: &str, filter: &Filter) -> Option<String> {
    let json: Option<Value> = line
        .trim_start()
        .starts_with('{')
        .then(|| serde_json::from_str(line).ok())
        .flatten();
    let read = match &json {
        Some(v) => read_json(v),
        None => read_text(line),
    };
    if let Some(min) = filter.level
        && read.level.is_none_or(|l| l < min)
    {
        return None;
    }
    if let Some((kind, namespace, name)) = &filter.object {
        let f = &read.fields;
        let named = f.get("object").or_else(|| f.get("name")) == Some(name);
        let same_kind = f.get("kind").is_some_and(|k| k.eq_ignore_ascii_case(kind));
        if !(named && same_kind && f.get("namespace") == Some(namespace)) {
            return None;
        }
    }
    Some(match json {
        Some(v) => readable(&v),
        None => line.to_string(),
    })
}

/// A JSON line as text: time, level, message, then the event's other fields.
fn readable(v: &Value) -> String {
    let mut out = format!(
        "{} {:>5} {}",
        v["timestamp"].as_str().unwrap_or_default(),
        v["level"].as_str().unwrap_or_default(),
        v["fields"]["message"].as_str().unwrap_or_default()
    );
    if let Some(m) = v["fields"].as_object() {
        for (k, val) in m.iter().filter(|(k, _)| *k != "message") {
            let val = val.as_str().map_or_else(|| val.to_string(), str::to_string);
            out.push_str(&format!(" {k}={val}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "2026-11-26T06:47:25.765063Z  INFO reconcile{kind=\"Application\" namespace=history object=web revision=\"main@sha1:303f\"}: skewer_controller::reconcilers::application::operation: synced main@sha1:303f objects=1 pruned=0";
    const REPORT: &str = "2026-11-26T06:47:25.808140Z  WARN skewer_controller::runtime::report: OutOfSync kind=\"Application\" namespace=history name=web";
    const OTHER: &str = "2026-11-26T06:47:25.765190Z  INFO skewer_controller::drift::watch: watching for drift kind=ConfigMap group= namespace=\"<all>\" target=the hub";

    fn web(kind: &str) -> Filter {
        Filter {
            object: Some((kind.into(), "history".into(), "web".into())),
            level: None,
        }
    }

    #[test]
    fn lines_about_one_object_are_picked_in_text_and_json() {
        assert_eq!(pick(TEXT, &web("Application")).as_deref(), Some(TEXT));
        assert!(pick(REPORT, &web("application")).is_some(), "kind as typed");
        assert_eq!(pick(TEXT, &web("Kustomization")), None, "another kind");
        assert_eq!(pick(OTHER, &web("Application")), None);
        let mut elsewhere = web("Application");
        elsewhere.object = Some(("Application".into(), "other".into(), "web".into()));
        assert_eq!(pick(TEXT, &elsewhere), None, "another namespace");

        let json = r#"{"timestamp":"2026-11-26T06:47:25Z","level":"INFO","fields":{"message":"synced main@sha1:303f","objects":1},"target":"op","span":{"kind":"Application","namespace":"history","object":"web","name":"reconcile"},"spans":[{"kind":"Application","namespace":"history","object":"web","name":"reconcile"}]}"#;
        assert_eq!(
            pick(json, &web("Application")).as_deref(),
            Some("2026-11-26T06:47:25Z  INFO synced main@sha1:303f objects=1")
        );
        assert_eq!(pick(json, &web("Kustomization")), None);
        assert_eq!(
            pick("not a log line {", &Filter::default()).as_deref(),
            Some("not a log line {")
        );
    }

    #[test]
    fn levels_keep_what_is_at_least_as_severe() {
        let warn = Filter {
            object: None,
            level: Level::parse("warn"),
        };
        assert_eq!(pick(TEXT, &warn), None);
        assert!(pick(REPORT, &warn).is_some());
        assert!(Level::parse("loud").is_none());
    }
}
