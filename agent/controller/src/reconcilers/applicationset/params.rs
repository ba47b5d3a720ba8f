//! Parameter sets, as generators make them and templates read them: Argo CD's normalized
//! names, the flat `a.b.c` view Argo CD's default templates and selectors read, and label
//! selectors (`matchLabels`, `matchExpressions`) over any string map. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};

/// One parameter set: nested for Go templates, flat (`metadata.labels.env`) for Argo CD's
/// default templates.
pub type Params = Map<String, Value>;

pub use super::gotemplate::normalized;

/// A value as a template prints it (Go's `%v` for scalars).
pub fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => super::gotemplate::printed(other),
    }
}

/// The flat view of `params`: nested objects and lists as dotted keys (`values.team`,
/// `list.0`), every value a string.
pub fn flat(params: &Params) -> BTreeMap<String, String> {
    fn walk(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, x) in m {
                    walk(&join(prefix, k), x, out);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                for (i, x) in a.iter().enumerate() {
                    walk(&join(prefix, &i.to_string()), x, out);
                }
            }
            other => {
                out.insert(prefix.to_string(), scalar(other));
            }
        }
    }
    fn join(prefix: &str, k: &str) -> String {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    }
    let mut out = BTreeMap::new();
    for (k, v) in params {
        walk(k, v, &mut out);
    }
    out
}

/// `params` with every value made flat, as Argo CD's default templates read them.
pub fn flattened(params: &Params) -> Params {
    flat(params)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect()
}

/// A label selector, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Selector {
    /// Reads a Kubernetes label selector; `field` names it in errors.
    pub fn new(s: &LabelSelector, field: &str) -> Result<Self, String> {
        let mut reqs: Vec<Requirement> = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
            .collect();
        for (i, e) in s.match_expressions.iter().flatten().enumerate() {
            reqs.push(Self::requirement(
                &e.key,
                &e.operator,
                e.values.clone().unwrap_or_default(),
                &format!("{field}.matchExpressions[{i}]"),
            )?);
        }
        Ok(Self(reqs))
    }

    /// One `{key, operator, values}` requirement.
    pub fn requirement_of(
        key: &str,
        operator: &str,
        values: &[String],
        field: &str,
    ) -> Result<Self, String> {
        Ok(Self(vec![Self::requirement(
            key,
            operator,
            values.to_vec(),
            field,
        )?]))
    }

    fn requirement(
        key: &str,
        op: &str,
        values: Vec<String>,
        field: &str,
    ) -> Result<Requirement, String> {
        let needs_values = |r: Requirement| {
            if values.is_empty() {
                Err(format!("{field}: operator {op} needs values"))
            } else {
                Ok(r)
            }
        };
        match op {
            "In" => needs_values(Requirement::In(key.into(), values.clone())),
            "NotIn" => needs_values(Requirement::NotIn(key.into(), values.clone())),
            "Exists" => Ok(Requirement::Exists(key.into())),
            "DoesNotExist" => Ok(Requirement::DoesNotExist(key.into())),
            other => Err(format!(
                "{field}.operator: '{other}' is not In, NotIn, Exists or DoesNotExist"
            )),
        }
    }

    /// All of another selector's requirements added.
    pub fn and(mut self, other: Selector) -> Self {
        self.0.extend(other.0);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `labels` match every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    #[test]
    fn names_normalize_as_argo_cd_does() {
        assert_eq!(normalized("My_Cluster.Prod"), "my-cluster.prod");
        assert_eq!(normalized("-x-"), "x");
        assert_eq!(normalized(&"a".repeat(300)).len(), 253);
    }

    #[test]
    fn params_flatten_to_dotted_keys() {
        let p = json!({"name": "a", "metadata": {"labels": {"env": "dev"}}, "n": 2, "l": ["x"]});
        let f = flat(p.as_object().unwrap());
        assert_eq!(f["metadata.labels.env"], "dev");
        assert_eq!(f["n"], "2");
        assert_eq!(f["l.0"], "x");
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let s = Selector::new(
            &LabelSelector {
                match_labels: Some([("env".to_string(), "dev".to_string())].into()),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "team".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["b".into()]),
                }]),
            },
            "selector",
        )
        .unwrap();
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(s.matches(&labels(&[("env", "dev")])));
        assert!(s.matches(&labels(&[("env", "dev"), ("team", "a")])));
        assert!(!s.matches(&labels(&[("env", "dev"), ("team", "b")])));
        assert!(!s.matches(&labels(&[("env", "prod")])));
        let bad = Selector::requirement_of("k", "Gt", &[], "steps[0]").unwrap_err();
        assert!(bad.contains("steps[0].operator: 'Gt'"), "{bad}");
    }
}
