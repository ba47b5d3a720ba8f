//! The content hash kustomize appends to generated ConfigMaps and Secrets (`cfg-h29d89cmmt`),
//! computed exactly as kustomize computes it, so that names match those kustomize gives: the
//! sha256 of Go's JSON encoding of the object's kind and data (map keys sorted, `<`, `>` and
//! `&` escaped), of which the first ten hex digits are kept with `0 1 3 a e` changed to
//! `g h k m t` (so no word is spelled). The encoding has a `name` too, always empty: kustomize
//! looks it up as a single key called `metadata/name`, which no object has.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The hash suffix of a generated ConfigMap or Secret.
pub fn suffix(obj: &Value) -> String {
    let field = |name: &str| {
        obj.get(name)
            .cloned()
            .unwrap_or(Value::String(String::new()))
    };
    let mut m = Map::new();
    m.insert("name".into(), Value::String(String::new()));
    m.insert("data".into(), field("data"));
    if obj["kind"] == "Secret" {
        m.insert("kind".into(), "Secret".into());
        m.insert("type".into(), field("type"));
        if obj["stringData"].is_object() {
            m.insert("stringData".into(), obj["stringData"].clone());
        }
    } else {
        m.insert("kind".into(), "ConfigMap".into());
        if obj["binaryData"].is_object() {
            m.insert("binaryData".into(), obj["binaryData"].clone());
        }
    }
    let digest = hex::encode(Sha256::digest(go_json(&Value::Object(m)).as_bytes()));
    digest[..10]
        .chars()
        .map(|c| match c {
            '0' => 'g',
            '1' => 'h',
            '3' => 'k',
            'a' => 'm',
            'e' => 't',
            c => c,
        })
        .collect()
}

/// Go's `json.Marshal` of a value: object keys sorted, strings escaped as Go escapes them.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write(v, &mut out);
    out
}

fn write(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_escapes_and_sorts() {
        assert_eq!(
            go_json(&json!({"b": "<a&b>", "a": "line\nnext\u{1}", "c": null})),
            r#"{"a":"line\nnext\u0001","b":"\u003ca\u0026b\u003e","c":null}"#
        );
    }

    #[test]
    fn suffixes_are_kustomizes() {
        // As `kubectl kustomize` (kustomize v5.5) names them.
        let cfg = json!({"kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}});
        assert_eq!(suffix(&cfg), "h29d89cmmt");
        let escaped = json!({"kind": "ConfigMap", "metadata": {"name": "p-cfg"}, "data": {"a": "1", "b": "<x&y>"}});
        assert_eq!(suffix(&escaped), "cchh4fmt2g");
        let empty = json!({"kind": "ConfigMap"});
        assert_eq!(suffix(&empty), "6ct58987ht");
    }

    #[test]
    fn suffixes_use_only_the_hashed_fields_and_no_vowels() {
        let a = json!({"kind": "ConfigMap", "metadata": {"name": "cfg", "labels": {"x": "y"}}, "data": {"k": "v"}});
        let b = json!({"kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "v"}});
        assert_eq!(suffix(&a), suffix(&b), "labels are not hashed");
        let c = json!({"kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"k": "w"}});
        assert_ne!(suffix(&b), suffix(&c));
        let s = suffix(&b);
        assert_eq!(s.len(), 10);
        assert!(!s.contains(['0', '1', '3', 'a', 'e']), "{s}");
    }
}
