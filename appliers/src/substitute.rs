//! Flux's post-build variable substitution, in the objects a build rendered: `${var}`,
//! `${var:=default}`, `${var:-default}`, `${var=default}`, `${var-default}` (a default may hold
//! `${other}`), `$$` written out as `$` (so `$${var}` stays `${var}`), and `$var` without
//! braces left alone. As in Flux, a variable that is missing or empty takes its default, and
//! without one becomes empty; a string that reads as another YAML type once substituted
//! (`replicas: ${replicas}` with `replicas: "3"`) becomes that type, as Flux's text round trip
//! makes it. Objects labeled or annotated `kustomize.toolkit.fluxcd.io/substitute: disabled`
//! are left as they are.
//!
//! Bash's string functions (`${#var}`, `${var:1:2}`, `${var/a/b}`, case changes) are refused
//! with the expression named. Messages name variables and expressions, never a value: values
//! may come from Secrets. Work is bounded: defaults nest at most [`MAX_NESTING`] deep and one
//! object grows by at most [`MAX_GROWTH`] bytes.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::object::Manifest;

/// Flux's label and annotation that leaves an object unsubstituted (`disabled`).
pub const DISABLE: &str = "kustomize.toolkit.fluxcd.io/substitute";
/// How deep `${a:=${b:=${c}}}` may nest.
pub const MAX_NESTING: usize = 16;
/// How many bytes substitution may add to one object (a value of 1 MiB used a thousand times
/// would otherwise make a gigabyte).
pub const MAX_GROWTH: usize = 4 << 20;

/// Variables by name; names are checked when they are added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vars(BTreeMap<String, String>);

impl Vars {
    /// Adds (or replaces) `name`. Newlines are dropped from the value, as Flux drops them.
    /// `from` says where the variable came from, for the error.
    pub fn insert(&mut self, name: &str, value: &str, from: &str) -> Result<(), String> {
        if !valid_name(name) {
            return Err(format!(
                "{from}: '{name}' is not a variable name (it must match ^[_a-zA-Z][_a-zA-Z0-9]*$)"
            ));
        }
        self.0.insert(name.to_string(), value.replace('\n', ""));
        Ok(())
    }

    /// `other`'s variables over these.
    pub fn extend(&mut self, other: Vars) {
        self.0.extend(other.0);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Substitutes `vars` into every object not opted out; an error names the object and the
/// expression.
pub fn apply(manifests: &mut [Manifest], vars: &Vars) -> Result<(), String> {
    for m in manifests.iter_mut() {
        let meta = &m.object["metadata"];
        if meta["labels"][DISABLE] == "disabled" || meta["annotations"][DISABLE] == "disabled" {
            continue;
        }
        let mut budget = MAX_GROWTH;
        substitute(&mut m.object, vars, &mut budget)
            .map_err(|e| format!("{} ({}): substitution: {e}", m.display(), m.origin))?;
    }
    Ok(())
}

/// Substitutes into every string and key of `value`.
fn substitute(value: &mut Value, vars: &Vars, budget: &mut usize) -> Result<(), String> {
    match value {
        Value::String(s) if s.contains('$') => {
            let out = expand(s, vars, budget, 0)?;
            if out != *s {
                *value = retyped(out);
            }
        }
        Value::Array(items) => {
            for item in items {
                substitute(item, vars, budget)?;
            }
        }
        Value::Object(map) => {
            let old = std::mem::take(map);
            for (k, mut v) in old {
                let k = if k.contains('$') {
                    expand(&k, vars, budget, 0)?
                } else {
                    k
                };
                substitute(&mut v, vars, budget)?;
                map.insert(k, v);
            }
        }
        _ => {}
    }
    Ok(())
}

/// A substituted string as Flux's YAML round trip reads it: `3`, `true`, `null` and the empty
/// string change type; anything else stays a string.
fn retyped(s: String) -> Value {
    if s.len() > 64 || s.contains(['\n', ':', '#', '[', '{', ',', '"', '\'']) {
        return Value::String(s);
    }
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    match serde_saphyr::from_str_with_options::<Value>(&s, options) {
        Ok(v @ (Value::Number(_) | Value::Bool(_) | Value::Null)) => {
            let mut v = v;
            if let Some(f) = v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                && v.is_f64()
            {
                v = Value::from(f as i64);
            }
            v
        }
        _ if s.is_empty() => Value::Null,
        _ => Value::String(s),
    }
}

/// `text` with its expressions expanded.
fn expand(text: &str, vars: &Vars, budget: &mut usize, depth: usize) -> Result<String, String> {
    if depth > MAX_NESTING {
        return Err(format!("defaults nested deeper than {MAX_NESTING} levels"));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('{') {
            let close = closing(inner)
                .ok_or_else(|| format!("'${{{}' has no closing brace", clip(inner)))?;
            let expr = &inner[..close];
            let value = evaluate(expr, vars, budget, depth)?;
            *budget = budget
                .checked_sub(value.len().saturating_sub(expr.len() + 3))
                .ok_or_else(|| format!("the object would grow by more than {MAX_GROWTH} bytes"))?;
            out.push_str(&value);
            rest = &inner[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Where the `}` closing an expression is, nested `${…}` skipped.
fn closing(inner: &str) -> Option<usize> {
    let bytes = inner.as_bytes();
    let mut open = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                open += 1;
                i += 1;
            }
            b'}' if open == 0 => return Some(i),
            b'}' => open -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// One expression's value (what is between `${` and `}`).
fn evaluate(expr: &str, vars: &Vars, budget: &mut usize, depth: usize) -> Result<String, String> {
    let end = expr
        .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
        .unwrap_or(expr.len());
    let (name, op) = expr.split_at(end);
    if !valid_name(name) {
        return Err(format!(
            "'${{{}}}' does not start with a variable name",
            clip(expr)
        ));
    }
    let default = [":=", ":-", "=", "-"]
        .into_iter()
        .find_map(|p| op.strip_prefix(p));
    match (op, default) {
        ("", _) => Ok(vars.get(name).unwrap_or_default().to_string()),
        (_, Some(default)) => match vars.get(name) {
            Some(v) => Ok(v.to_string()),
            None => expand(default, vars, budget, depth + 1),
        },
        _ => Err(format!(
            "'${{{}}}' uses a bash string function, which skewer does not support (only ${{var}}, ${{var:=default}} and ${{var:-default}})",
            clip(expr)
        )),
    }
}

/// At most 60 characters of an expression, for a message.
fn clip(s: &str) -> String {
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        let mut v = Vars::default();
        for (k, val) in pairs {
            v.insert(k, val, "test").unwrap();
        }
        v
    }

    fn run(text: &str, v: &Vars) -> Result<String, String> {
        expand(text, v, &mut MAX_GROWTH.clone(), 0)
    }

    #[test]
    fn fluxs_forms() {
        let v = vars(&[("cluster", "prod"), ("empty", ""), ("default_var", "foo")]);
        for (input, want) in [
            ("${cluster}", "prod"),
            ("name-${cluster}-x", "name-prod-x"),
            ("${missing}", ""),
            ("${missing:=dev}", "dev"),
            ("${missing:-dev}", "dev"),
            ("${missing=dev}", "dev"),
            ("${empty:=dev}", "dev"),
            ("${cluster:=dev}", "prod"),
            ("$${cluster}", "${cluster}"),
            ("$cluster stays", "$cluster stays"),
            ("a $ b", "a $ b"),
            ("price: $$5", "price: $5"),
            ("something ${var=${default_var}}", "something foo"),
            ("something $${var=${default_var}}", "something ${var=foo}"),
            ("${var=prefix${default_var}-suffix}", "prefixfoo-suffix"),
            (
                "some text ${cluster}$${var$${cluster}$cluster${cluster}",
                "some text prod${var${cluster}$clusterprod",
            ),
        ] {
            assert_eq!(run(input, &v).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn refusals_name_the_expression_never_a_value() {
        let v = vars(&[("secret", "hunter2")]);
        for (input, says) in [
            ("${secret", "no closing brace"),
            ("${#secret}", "does not start with a variable name"),
            ("${secret:1:2}", "bash string function"),
            ("${secret//a/b}", "bash string function"),
            ("${secret^^}", "bash string function"),
        ] {
            let e = run(input, &v).unwrap_err();
            assert!(e.contains(says), "{input}: {e}");
            assert!(!e.contains("hunter2"), "{input}: {e}");
        }
        let mut bad = Vars::default();
        let e = bad.insert("1st", "x", "ConfigMap/vars").unwrap_err();
        assert!(e.contains("ConfigMap/vars") && e.contains("'1st'"), "{e}");
        assert!(bad.insert("cluster-name", "x", "spec").is_err());
        assert!(bad.insert("_ok9", "x", "spec").is_ok());
    }

    #[test]
    fn work_is_bounded() {
        let deep = format!("{}x{}", "${a:=".repeat(40), "}".repeat(40));
        assert!(
            run(&deep, &Vars::default())
                .unwrap_err()
                .contains("nested deeper")
        );
        let big = vars(&[("big", &"x".repeat(1 << 20))]);
        let text = "${big}".repeat(10);
        assert!(run(&text, &big).unwrap_err().contains("grow by more than"));
    }

    #[test]
    fn objects_are_substituted_with_types_as_flux_reads_them() {
        let doc = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web-${cluster}\n  namespace: apps\nspec:\n  replicas: ${replicas}\n  paused: ${paused:=false}\n  template:\n    metadata:\n      annotations:\n        note: '$${keep}'\n        ${cluster}-key: v\n        missing: ${nothing}\n";
        let mut ms = crate::load::parse_file("web.yaml", doc.as_bytes()).unwrap();
        let v = vars(&[("cluster", "prod"), ("replicas", "3")]);
        apply(&mut ms, &v).unwrap();
        let o = &ms[0].object;
        assert_eq!(o["metadata"]["name"], "web-prod");
        assert_eq!(o["spec"]["replicas"], 3);
        assert_eq!(o["spec"]["paused"], false);
        let ann = &o["spec"]["template"]["metadata"]["annotations"];
        assert_eq!(ann["note"], "${keep}");
        assert_eq!(ann["prod-key"], "v");
        assert_eq!(ann["missing"], Value::Null);

        let off = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: script\n  annotations: {kustomize.toolkit.fluxcd.io/substitute: disabled}\ndata:\n  run: echo ${cluster} $$\n";
        let mut ms = crate::load::parse_file("script.yaml", off.as_bytes()).unwrap();
        apply(&mut ms, &v).unwrap();
        assert_eq!(ms[0].object["data"]["run"], "echo ${cluster} $$");
    }
}
