//! Label (and annotation) selectors as Kubernetes writes them: `a=b`, `a==b`, `a!=b`, `a`,
//! `!a`, `a in (x,y)`, `a notin (x,y)`, comma-separated, all of which must hold.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            reqs.push(requirement(part).map_err(|e| format!("selector '{s}': {e}"))?);
        }
        Ok(Self(reqs))
    }

    /// Whether a map of labels (or annotations), like `metadata.labels`, satisfies it.
    pub fn matches(&self, labels: &Value) -> bool {
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::NotEquals(k, v) => get(k) != Some(v),
            Requirement::In(k, vs) => get(k).is_some_and(|h| vs.iter().any(|v| v == h)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|h| vs.iter().all(|v| v != h)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn requirement(part: &str) -> Result<Requirement, String> {
    let set = |rest: &str| -> Result<Vec<String>, String> {
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| format!("'{part}': expected a parenthesised list of values"))?;
        Ok(inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect())
    };
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(k.trim().into(), v.trim().into()));
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Requirement::Equals(k.trim().into(), v.trim().into()));
    }
    if let Some((k, rest)) = part.split_once(" notin ") {
        return Ok(Requirement::NotIn(k.trim().into(), set(rest)?));
    }
    if let Some((k, rest)) = part.split_once(" in ") {
        return Ok(Requirement::In(k.trim().into(), set(rest)?));
    }
    if let Some(k) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(k.trim().into()));
    }
    if part.contains([' ', '(', ')']) {
        return Err(format!("'{part}' is not a requirement"));
    }
    Ok(Requirement::Exists(part.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_form_parses_and_matches() {
        let s =
            LabelSelector::parse("a=b, c!=d,e,!f, tier in (web, api), env notin (prod)").unwrap();
        let labels = json!({"a": "b", "c": "x", "e": "", "tier": "api", "env": "dev"});
        assert!(s.matches(&labels));
        assert!(!s.matches(&json!({"a": "b", "e": "", "tier": "db"})));
        assert!(!s.matches(&json!({"a": "b", "e": "", "tier": "web", "f": "1"})));
        assert!(LabelSelector::parse("").unwrap().matches(&Value::Null));
        assert!(LabelSelector::parse("a in b").is_err());
    }
}
