//! Rendering an ApplicationSet's template for one parameter set: every string (and every map
//! key, so that `labels: {'{{name}}': x}` works) rendered, with Argo CD's default
//! `{{param}}` placeholders or, with `goTemplate: true`, Go templates ([`super::gotemplate`]).
//! Argo CD's default placeholders name a flat parameter (`{{metadata.labels.env}}`,
//! `{{path[0]}}`); one that names no parameter is left as written, as Argo CD leaves it. Pure.

use serde_json::{Map, Value};

use super::gotemplate::{self, MissingKey};
use super::params::{Params, scalar};

/// The largest rendered Application, in bytes of JSON.
pub const MAX_RENDERED: usize = 1 << 20;

/// How an ApplicationSet's templates read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Renderer {
    pub go: bool,
    pub missing: MissingKey,
}

impl Renderer {
    /// `s` rendered with `params` (the set as a JSON object).
    pub fn string(&self, s: &str, params: &Value) -> Result<String, String> {
        if !s.contains("{{") {
            return Ok(s.to_string());
        }
        if self.go {
            return gotemplate::parse(s)?.render(params, self.missing);
        }
        Ok(placeholders(s, params.as_object()))
    }

    /// Every string and key of `v` rendered; errors name the field (`at`, e.g. `spec.source.path`).
    pub fn value(&self, v: &Value, params: &Value, at: &str) -> Result<Value, String> {
        let rendered = self.walk(v, params, at)?;
        let size = serde_json::to_vec(&rendered).map(|b| b.len()).unwrap_or(0);
        if size > MAX_RENDERED {
            return Err(format!(
                "{at}: renders to {size} bytes, more than the {MAX_RENDERED} one Application may have"
            ));
        }
        Ok(rendered)
    }

    fn walk(&self, v: &Value, params: &Value, at: &str) -> Result<Value, String> {
        Ok(match v {
            Value::String(s) => {
                Value::String(self.string(s, params).map_err(|e| format!("{at}: {e}"))?)
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| self.walk(x, params, &format!("{at}[{i}]")))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(m) => {
                let mut out = Map::with_capacity(m.len());
                for (k, x) in m {
                    let field = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    let key = self
                        .string(k, params)
                        .map_err(|e| format!("{field} (the key): {e}"))?;
                    out.insert(key, self.walk(x, params, &field)?);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }
}

/// Argo CD's default templates: `{{ key }}` replaced by the flat parameter `key`; left as
/// written when there is none.
fn placeholders(s: &str, params: Option<&Params>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let key = after[..end].trim();
        match params.and_then(|p| p.get(key)) {
            Some(v) => out.push_str(&scalar(v)),
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Go's `missingkey` option from `goTemplateOptions`.
pub fn missing_key(options: &[String]) -> Result<MissingKey, String> {
    let mut missing = MissingKey::Default;
    for (i, o) in options.iter().enumerate() {
        missing = match o.trim() {
            "missingkey=error" => MissingKey::Error,
            "missingkey=zero" => MissingKey::Zero,
            "missingkey=default" | "missingkey=invalid" => MissingKey::Default,
            other => {
                return Err(format!(
                    "spec.goTemplateOptions[{i}]: '{other}' is not supported (missingkey=error, missingkey=zero, missingkey=default)"
                ));
            }
        };
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn argo_cd_placeholders_name_flat_parameters() {
        let p = json!({"name": "a", "metadata.labels.env": "dev", "path[0]": "apps"});
        let r = Renderer::default();
        assert_eq!(
            r.string("{{name}}-{{ metadata.labels.env }}-{{path[0]}}", &p)
                .unwrap(),
            "a-dev-apps"
        );
        assert_eq!(r.string("{{unknown}} {{", &p).unwrap(), "{{unknown}} {{");
    }

    #[test]
    fn a_tree_renders_strings_and_keys_and_names_the_field() {
        let p = json!({"name": "a"});
        let r = Renderer::default();
        let v = r
            .value(
                &json!({"labels": {"{{name}}": "x-{{name}}"}, "n": 1}),
                &p,
                "",
            )
            .unwrap();
        assert_eq!(v, json!({"labels": {"a": "x-a"}, "n": 1}));
        let go = Renderer {
            go: true,
            missing: MissingKey::Error,
        };
        let e = go
            .value(
                &json!({"spec": {"source": {"path": "{{ .nope }}"}}}),
                &p,
                "",
            )
            .unwrap_err();
        assert!(e.starts_with("spec.source.path: "), "{e}");
    }

    #[test]
    fn options_are_read_or_refused_by_name() {
        assert_eq!(
            missing_key(&["missingkey=error".into()]),
            Ok(MissingKey::Error)
        );
        let e = missing_key(&["strict".into()]).unwrap_err();
        assert!(e.contains("goTemplateOptions[0]: 'strict'"), "{e}");
    }
}
