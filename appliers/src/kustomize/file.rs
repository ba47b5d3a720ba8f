//! The kustomization file (`kustomization.yaml`): the fields skewer builds, and a clear refusal,
//! naming the field, for everything else: fields it does not implement (Helm charts, plugins,
//! `replacements`, `vars`) and fields that do not exist.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::patch::Selector;

/// Fields kustomize has and skewer refuses, with why.
const REFUSED: &[(&str, &str)] = &[
    (
        "helmCharts",
        "Helm charts are not rendered by skewer: render the chart into the repository",
    ),
    (
        "helmGlobals",
        "Helm charts are not rendered by skewer: render the chart into the repository",
    ),
    (
        "helmChartInflationGenerator",
        "Helm charts are not rendered by skewer: render the chart into the repository",
    ),
    ("generators", "generator plugins are not supported"),
    ("validators", "validator plugins are not supported"),
    ("replacements", "replacements are not supported yet"),
    ("vars", "vars are not supported yet"),
    (
        "configurations",
        "custom transformer configurations are not supported yet",
    ),
    ("openapi", "custom OpenAPI schemas are not supported"),
    ("buildMetadata", "buildMetadata is not supported"),
];

/// A kustomization file's fields.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Kustomization {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub metadata: Option<Value>,
    pub resources: Vec<String>,
    /// The older name of `resources`.
    pub bases: Vec<String>,
    pub components: Vec<String>,
    pub crds: Vec<String>,
    pub namespace: Option<String>,
    pub name_prefix: Option<String>,
    pub name_suffix: Option<String>,
    pub common_labels: BTreeMap<String, String>,
    pub labels: Vec<Label>,
    pub common_annotations: BTreeMap<String, String>,
    pub images: Vec<Image>,
    /// The older name of `images`.
    pub image_tags: Vec<Image>,
    pub replicas: Vec<Replica>,
    pub patches: Vec<Patch>,
    pub patches_strategic_merge: Vec<String>,
    pub patches_json6902: Vec<Patch>,
    pub config_map_generator: Vec<Generator>,
    pub secret_generator: Vec<Generator>,
    pub generator_options: Option<GeneratorOptions>,
    /// Files of built-in transformer configurations, run after the fields above.
    pub transformers: Vec<String>,
    /// Output order: skewer applies in its own order, so this changes nothing it does.
    pub sort_options: Option<Value>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Label {
    pub pairs: BTreeMap<String, String>,
    pub include_selectors: bool,
    pub include_templates: bool,
    pub fields: Vec<FieldSpecArg>,
}

/// A field spec as written in a kustomization file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldSpecArg {
    pub path: String,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub create: bool,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Image {
    pub name: String,
    #[serde(default)]
    pub new_name: Option<String>,
    #[serde(default)]
    pub new_tag: Option<String>,
    #[serde(default)]
    pub digest: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Replica {
    pub name: String,
    pub count: i64,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Patch {
    pub path: Option<String>,
    pub patch: Option<String>,
    pub target: Option<Selector>,
    pub options: Option<PatchOptions>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct PatchOptions {
    pub allow_name_change: bool,
    pub allow_kind_change: bool,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Generator {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    /// `create` (default), `merge` or `replace`.
    #[serde(default)]
    pub behavior: Option<String>,
    #[serde(default)]
    pub literals: Vec<String>,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub envs: Vec<String>,
    /// The older, single-file form of `envs`.
    #[serde(default)]
    pub env: Option<String>,
    #[serde(default)]
    pub options: Option<GeneratorOptions>,
    /// Secrets only: the Secret's `type`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct GeneratorOptions {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub disable_name_suffix_hash: bool,
    pub immutable: bool,
}

/// Parses a kustomization file's YAML; the error names the field at fault.
pub fn parse(text: &str) -> Result<Kustomization, (String, String)> {
    let value: Value = crate::load::parse_yaml(text).map_err(|e| (String::new(), e))?;
    let Value::Object(fields) = &value else {
        return Err((
            String::new(),
            "expected a mapping of kustomization fields".into(),
        ));
    };
    for key in fields.keys() {
        if let Some((_, why)) = REFUSED.iter().find(|(k, _)| k == key) {
            return Err((key.clone(), why.to_string()));
        }
    }
    let k: Kustomization =
        serde_json::from_value(value).map_err(|e| field_error(&e.to_string()))?;
    match k.kind.as_deref() {
        None | Some("Kustomization") | Some("Component") => Ok(k),
        Some(other) => Err((
            "kind".into(),
            format!("'{other}' is not Kustomization or Component"),
        )),
    }
}

/// serde's message, with the field it names pulled out.
fn field_error(message: &str) -> (String, String) {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default();
        return (field.to_string(), "unknown field".into());
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or_default();
        return (field.to_string(), "is required".into());
    }
    (String::new(), message.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_real_repositories_use_parse() {
        let k = parse(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: dev\nresources: [../base, cm.yaml]\nimages:\n- {name: nginx, newTag: '1.25'}\nconfigMapGenerator:\n- name: cfg\n  files: [app.properties]\n  literals: [a=b]\ngeneratorOptions: {disableNameSuffixHash: true}\npatches:\n- path: patch.yaml\n  target: {kind: Deployment, labelSelector: 'app=web'}\n",
        )
        .unwrap();
        assert_eq!(k.namespace.as_deref(), Some("dev"));
        assert_eq!(k.resources, ["../base", "cm.yaml"]);
        assert_eq!(k.images[0].new_tag.as_deref(), Some("1.25"));
        assert_eq!(k.config_map_generator[0].literals, ["a=b"]);
        assert!(k.generator_options.unwrap().disable_name_suffix_hash);
        assert_eq!(
            k.patches[0]
                .target
                .as_ref()
                .and_then(|t| t.label_selector.as_deref()),
            Some("app=web")
        );
    }

    #[test]
    fn refused_and_unknown_fields_are_named() {
        let (field, why) = parse("helmCharts:\n- name: x\n").unwrap_err();
        assert_eq!(field, "helmCharts");
        assert!(why.contains("Helm"), "{why}");
        assert_eq!(
            parse("resourses: [a.yaml]\n").unwrap_err(),
            ("resourses".into(), "unknown field".into())
        );
        assert_eq!(
            parse("images:\n- {name: x, newTage: y}\n").unwrap_err().0,
            "newTage"
        );
        assert_eq!(parse("kind: Deployment\n").unwrap_err().0, "kind");
        assert_eq!(
            parse("replicas:\n- {name: web}\n").unwrap_err(),
            ("count".into(), "is required".into())
        );
    }
}
