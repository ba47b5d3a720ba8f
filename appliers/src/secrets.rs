//! Secrets are applied so that their values never reach a message, and so that skewer owns
//! the fields it means.
//!
//! - [`prepare`] refuses a `data` or `stringData` value that is not a string (an unquoted
//!   number, boolean or map would be quoted back by the API server's error), naming the key
//!   only; and moves `stringData` into `data` (base64), as the API server would, so that
//!   skewer owns `data.<key>` and a later edit of `data.<key>` by anyone is drift it heals.
//! - [`redact`] removes a Secret's values from any message about it (an API server error that
//!   quotes what it was sent).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use crate::load::type_name;
use crate::object::Manifest;

/// What replaces a Secret's value in messages.
pub const REDACTED: &str = "<redacted>";

/// Values shorter than this are not searched for in messages: replacing every `1` or `ab`
/// would garble them, and the API server's quoting of values is redacted by shape anyway.
const MIN_SEARCHED_VALUE: usize = 4;

/// Whether `m` is a core `v1` Secret.
pub fn is_secret(m: &Manifest) -> bool {
    m.kind() == "Secret" && m.group_version().0.is_empty()
}

/// Checks that what must be strings is: every object's labels and annotations, a built-in
/// workload's `env[].value`, a Secret's or a ConfigMap's values; and moves a Secret's
/// `stringData` into `data`. A Secret's error names the field and key, never the value; the
/// others show the value quoted, as it should be written.
pub fn prepare(m: &mut Manifest) -> Result<(), String> {
    // Every kind's labels and annotations, and the built-in workloads' environment values,
    // are strings the API server would refuse quoting its internal types.
    for field in ["labels", "annotations"] {
        strings_in(
            &m.object["metadata"][field],
            &format!("metadata.{field}"),
            true,
        )?;
    }
    env_strings(m)?;
    if m.kind() == "ConfigMap" && m.group_version().0.is_empty() {
        return strings_only(m, &["data", "binaryData"], true);
    }
    if !is_secret(m) {
        return Ok(());
    }
    strings_only(m, &["data", "stringData"], false)?;
    let Some(obj) = m.object.as_object_mut() else {
        return Ok(());
    };
    let Some(Value::Object(string_data)) = obj.remove("stringData") else {
        return Ok(());
    };
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(data) = data {
        // As the API server merges them: a key in both takes stringData's value.
        for (key, value) in string_data {
            let text = value.as_str().unwrap_or_default();
            data.insert(key, Value::String(STANDARD.encode(text)));
        }
    }
    Ok(())
}

/// Refuses a value of `fields` that is not a string (an unquoted number, boolean or map, which
/// the API server would refuse quoting its internal types), naming the field and key; `show`:
/// with the value, quoted as it should be written.
fn strings_only(m: &Manifest, fields: &[&str], show: bool) -> Result<(), String> {
    for field in fields {
        strings_in(&m.object[*field], field, show)?;
    }
    Ok(())
}

/// [`strings_only`] of the mapping `values` at `field` (absent: nothing to check).
fn strings_in(values: &Value, field: &str, show: bool) -> Result<(), String> {
    match values {
        Value::Null => Ok(()),
        Value::Object(values) => match values.iter().find(|(_, v)| !v.is_string()) {
            Some((key, value)) => Err(format!(
                "{field}.{key}: expected a string, got {} ({})",
                type_name(value),
                quote_it(key, value, show)
            )),
            None => Ok(()),
        },
        other => Err(format!(
            "{field}: expected a mapping of keys to strings, got {}",
            type_name(other)
        )),
    }
}

/// How to write `key: value` as a string: `quote it: key: "1"`, or without the value.
fn quote_it(key: &str, value: &Value, show: bool) -> String {
    if !show {
        return "quote it; the value is not shown".into();
    }
    let text = match value {
        Value::Array(_) | Value::Object(_) => "…".to_string(),
        v => v.to_string(),
    };
    format!("quote it: {key}: \"{text}\"")
}

/// Where a built-in workload keeps its pod spec.
fn pod_spec_path(m: &Manifest) -> Option<&'static [&'static str]> {
    let (group, _) = m.group_version();
    Some(match (group, m.kind()) {
        ("", "Pod") => &["spec"],
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job")
        | ("", "ReplicationController") => &["spec", "template", "spec"],
        ("batch", "CronJob") => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => return None,
    })
}

/// Refuses a built-in workload's `env[].value` that is not a string (`value: 8080`).
fn env_strings(m: &Manifest) -> Result<(), String> {
    let Some(path) = pod_spec_path(m) else {
        return Ok(());
    };
    let spec = path.iter().fold(&m.object, |v, k| &v[*k]);
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        let Some(containers) = spec[list].as_array() else {
            continue;
        };
        for (i, c) in containers.iter().enumerate() {
            let Some(env) = c["env"].as_array() else {
                continue;
            };
            for (j, e) in env.iter().enumerate() {
                let value = &e["value"];
                if value.is_null() || value.is_string() {
                    continue;
                }
                let name = e["name"].as_str().unwrap_or_default();
                return Err(format!(
                    "{}.{list}[{i}].env[{j}].value ({name}): expected a string, got {} ({})",
                    path.join("."),
                    type_name(value),
                    quote_it("value", value, true)
                ));
            }
        }
    }
    Ok(())
}

/// `message` with `m`'s values removed when `m` is a Secret: every value the API server
/// quotes as `Value:…` and every value of `data` (encoded or decoded) or `stringData`.
pub fn redact(m: &Manifest, message: &str) -> String {
    if !is_secret(m) {
        return message.to_string();
    }
    let mut out = redact_quoted_values(message);
    for value in values(m) {
        if value.len() >= MIN_SEARCHED_VALUE {
            out = out.replace(&value, REDACTED);
        }
    }
    out
}

/// Every value of a Secret in the forms a message could show: as written, and `data`'s
/// decoded.
fn values(m: &Manifest) -> Vec<String> {
    let mut out = Vec::new();
    for field in ["data", "stringData"] {
        let Some(values) = m.object[field].as_object() else {
            continue;
        };
        for value in values.values() {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            if field == "data"
                && let Ok(decoded) = STANDARD.decode(compact.as_bytes())
                && let Ok(decoded) = String::from_utf8(decoded)
            {
                out.push(decoded);
            }
            out.push(text);
        }
    }
    // Longest first, so that a value containing another is replaced whole.
    out.sort_by_key(|v| std::cmp::Reverse(v.len()));
    out
}

/// Replaces what follows each `Value:` up to its closing brace, the way the API server quotes
/// a value it could not use (`&value.valueUnstructured{Value:987654321}`).
fn redact_quoted_values(message: &str) -> String {
    const MARK: &str = "Value:";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(MARK) {
        let (before, after) = rest.split_at(at + MARK.len());
        out.push_str(before);
        out.push_str(REDACTED);
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' => depth -= 1,
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(data: Value, string_data: Value) -> Manifest {
        let mut object = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}});
        if !data.is_null() {
            object["data"] = data;
        }
        if !string_data.is_null() {
            object["stringData"] = string_data;
        }
        Manifest {
            origin: "s.yaml#1".into(),
            object,
        }
    }

    #[test]
    fn a_configmap_value_that_is_not_a_string_is_refused_showing_it_quoted() {
        let cm = |data: Value| Manifest {
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}),
            origin: String::new(),
        };
        let err = prepare(&mut cm(json!({"replicas": 1, "name": "web"}))).unwrap_err();
        assert_eq!(
            err,
            "data.replicas: expected a string, got a number (quote it: replicas: \"1\")"
        );
        let err = prepare(&mut cm(json!({"debug": true}))).unwrap_err();
        assert!(err.contains("quote it: debug: \"true\""), "{err}");
        assert!(prepare(&mut cm(json!({"a": "1"}))).is_ok());
        // Other kinds' data is theirs.
        let mut other = cm(json!({"replicas": 1}));
        other.object["apiVersion"] = json!("example.com/v1");
        assert!(prepare(&mut other).is_ok());
    }

    #[test]
    fn labels_annotations_and_env_values_must_be_strings_in_every_kind() {
        let mut widget = Manifest {
            object: json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "labels": {"version": 2}}}),
            origin: String::new(),
        };
        assert_eq!(
            prepare(&mut widget).unwrap_err(),
            "metadata.labels.version: expected a string, got a number (quote it: version: \"2\")"
        );
        widget.object["metadata"] = json!({"name": "w", "annotations": {"on": true}});
        assert!(
            prepare(&mut widget)
                .unwrap_err()
                .starts_with("metadata.annotations.on: ")
        );
        let deployment = |value: Value| Manifest {
            object: json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "web", "env": [{"name": "MODE", "value": "x"}, {"name": "PORT", "value": value}]}
            ]}}}}),
            origin: String::new(),
        };
        assert_eq!(
            prepare(&mut deployment(json!(8080))).unwrap_err(),
            "spec.template.spec.containers[0].env[1].value (PORT): expected a string, got a number (quote it: value: \"8080\")"
        );
        assert!(prepare(&mut deployment(json!("8080"))).is_ok());
        // A custom kind's fields are its schema's to judge.
        let mut custom = deployment(json!(8080));
        custom.object["apiVersion"] = json!("example.com/v1");
        assert!(prepare(&mut custom).is_ok());
    }

    #[test]
    fn non_string_values_are_refused_naming_the_key_only() {
        for (value, got) in [
            (json!(987654321), "a number"),
            (json!(true), "a boolean"),
            (json!({"nested": "s3cret-value"}), "a mapping"),
        ] {
            let mut m = secret(Value::Null, json!({"pin": value}));
            let err = prepare(&mut m).unwrap_err();
            assert_eq!(
                err,
                format!(
                    "stringData.pin: expected a string, got {got} (quote it; the value is not shown)"
                )
            );
            assert!(
                !err.contains("987654321") && !err.contains("s3cret"),
                "{err}"
            );
        }
        let mut m = secret(json!(["x"]), Value::Null);
        assert!(
            prepare(&mut m)
                .unwrap_err()
                .starts_with("data: expected a mapping")
        );
    }

    #[test]
    fn string_data_becomes_data_and_wins_over_it() {
        let mut m = secret(
            json!({"user": "YWRtaW4=", "password": "b2xk"}),
            json!({"password": "hunter22"}),
        );
        prepare(&mut m).unwrap();
        assert!(m.object.get("stringData").is_none());
        assert_eq!(
            m.object["data"],
            json!({"user": "YWRtaW4=", "password": "aHVudGVyMjI="})
        );
        let mut cm = Manifest {
            origin: String::new(),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"n": "1"}}),
        };
        prepare(&mut cm).unwrap();
        assert_eq!(cm.object["data"]["n"], "1", "a ConfigMap keeps its data");
    }

    #[test]
    fn api_errors_about_secrets_lose_their_values() {
        let m = secret(
            json!({"token": "c2VjcmV0LXRva2Vu"}),
            json!({"pin": "987654321"}),
        );
        let message = ".stringData.pin: expected string, got &value.valueUnstructured{Value:987654321}; \
            data.token: secret-token and c2VjcmV0LXRva2Vu; map: &value.valueUnstructured{Value:map[string]interface {}{\"a\":\"b\"}} end";
        let got = redact(&m, message);
        assert_eq!(
            got,
            ".stringData.pin: expected string, got &value.valueUnstructured{Value:<redacted>}; \
            data.token: <redacted> and <redacted>; map: &value.valueUnstructured{Value:<redacted>} end"
        );
        let cm = Manifest {
            origin: String::new(),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "visible-value"}}),
        };
        assert_eq!(
            redact(&cm, "Value:visible-value}"),
            "Value:visible-value}",
            "only Secrets are redacted"
        );
    }
}
