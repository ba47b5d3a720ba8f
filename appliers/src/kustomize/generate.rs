//! `configMapGenerator` and `secretGenerator`: ConfigMaps and Secrets made from literals,
//! files and env files, with kustomize's key rules and options. Their content-hash suffix is
//! added at the end of the build (see [`super::hash`]).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use super::file::{Generator, GeneratorOptions};
use super::tree::{Tree, base_name, resolve};
use super::{Error, Res};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ConfigMap,
    Secret,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }

    /// The kustomization field that makes this kind.
    pub fn field(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configMapGenerator",
            Kind::Secret => "secretGenerator",
        }
    }
}

/// The options a generator ends with: its own, with the kustomization's `generatorOptions`
/// laid over them (as kustomize does: the global labels and annotations win, and either side
/// can turn hashing off or immutability on).
fn effective(
    local: Option<&GeneratorOptions>,
    global: Option<&GeneratorOptions>,
) -> GeneratorOptions {
    let mut opts = local.cloned().unwrap_or_default();
    if let Some(g) = global {
        opts.labels.extend(g.labels.clone());
        opts.annotations.extend(g.annotations.clone());
        opts.disable_name_suffix_hash |= g.disable_name_suffix_hash;
        opts.immutable |= g.immutable;
    }
    opts
}

/// Generates the object of generator `index` of `kind` in the kustomization at `file`.
pub fn generate(
    tree: &Tree<'_>,
    file: &str,
    index: usize,
    g: &Generator,
    kind: Kind,
    global: Option<&GeneratorOptions>,
) -> Result<Res, Error> {
    let field = format!("{}[{index}]", kind.field());
    let err = |message: String| Error::new(file, &field, message);
    if g.name.is_empty() {
        return Err(err("name is required".into()));
    }
    if kind == Kind::ConfigMap && g.type_.is_some() {
        return Err(Error::new(
            file,
            &format!("{field}.type"),
            "unknown field".into(),
        ));
    }
    let dir = super::tree::parent(file);
    let pairs = pairs(tree, dir, g).map_err(|(sub, m)| {
        let at = if sub.is_empty() {
            field.clone()
        } else {
            format!("{field}.{sub}")
        };
        Error::new(file, &at, m)
    })?;
    let opts = effective(g.options.as_ref(), global);

    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(g.name));
    if let Some(ns) = &g.namespace {
        metadata.insert("namespace".into(), json!(ns));
    }
    if !opts.labels.is_empty() {
        metadata.insert("labels".into(), json!(opts.labels));
    }
    if !opts.annotations.is_empty() {
        metadata.insert("annotations".into(), json!(opts.annotations));
    }
    let mut obj = json!({"apiVersion": "v1", "kind": kind.name(), "metadata": metadata});
    let (mut data, mut binary) = (Map::new(), Map::new());
    for (key, value) in pairs {
        match (kind, String::from_utf8(value)) {
            (Kind::ConfigMap, Ok(text)) => {
                data.insert(key, json!(text));
            }
            (Kind::ConfigMap, Err(bytes)) => {
                binary.insert(key, json!(encode_base64(&bytes.into_bytes())));
            }
            (Kind::Secret, Ok(text)) => {
                data.insert(key, json!(encode_base64(text.as_bytes())));
            }
            (Kind::Secret, Err(bytes)) => {
                data.insert(key, json!(encode_base64(&bytes.into_bytes())));
            }
        }
    }
    if !data.is_empty() {
        obj["data"] = Value::Object(data);
    }
    if !binary.is_empty() {
        obj["binaryData"] = Value::Object(binary);
    }
    if kind == Kind::Secret {
        obj["type"] = json!(g.type_.clone().unwrap_or_else(|| "Opaque".into()));
    }
    if opts.immutable {
        obj["immutable"] = json!(true);
    }
    Ok(Res::new(
        obj,
        format!("{file}#{field}"),
        !opts.disable_name_suffix_hash,
    ))
}

/// Base64 as kustomize writes it into generated objects: once longer than one line, in lines
/// of 70 characters, each ending in a newline (decoders skip them).
fn encode_base64(bytes: &[u8]) -> String {
    const LINE: usize = 70;
    let encoded = STANDARD.encode(bytes);
    if encoded.len() < LINE {
        return encoded;
    }
    let mut out = String::with_capacity(encoded.len() + encoded.len() / LINE + 1);
    for chunk in encoded.as_bytes().chunks(LINE) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out
}

/// A generator's keys and values, in order.
type Pairs = Vec<(String, Vec<u8>)>;

/// The generator's key/value pairs, in kustomize's order: env files, literals, files. A key
/// given twice is an error. Errors are `(sub-field, message)`.
fn pairs(tree: &Tree<'_>, dir: &str, g: &Generator) -> Result<Pairs, (String, String)> {
    let mut out: Pairs = Vec::new();
    let read = |field: &str, path: &str| -> Result<Vec<u8>, (String, String)> {
        let full = resolve(dir, path).map_err(|m| (field.to_string(), m))?;
        tree.file(&full).map(<[u8]>::to_vec).ok_or_else(|| {
            (
                field.to_string(),
                format!("file '{path}' does not exist in the source"),
            )
        })
    };
    let envs: Vec<&String> = g.envs.iter().chain(g.env.as_ref()).collect();
    for (i, path) in envs.into_iter().enumerate() {
        let field = format!("envs[{i}]");
        let content = read(&field, path)?;
        let text = String::from_utf8(content)
            .map_err(|_| (field.clone(), format!("'{path}' is not UTF-8")))?;
        for (n, line) in text.lines().enumerate() {
            let line = if n == 0 {
                line.trim_start_matches('\u{feff}')
            } else {
                line
            };
            let line = line.trim_start();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, value) = line.split_once('=').unwrap_or((line, ""));
            if !is_env_name(key) {
                return Err((
                    field,
                    format!(
                        "'{path}' line {}: '{key}' is not a valid environment variable name",
                        n + 1
                    ),
                ));
            }
            out.push((key.to_string(), value.as_bytes().to_vec()));
        }
    }
    for (i, literal) in g.literals.iter().enumerate() {
        let field = format!("literals[{i}]");
        match literal.split_once('=') {
            Some((key, value)) if !key.is_empty() => {
                out.push((key.to_string(), unquote(value).as_bytes().to_vec()));
            }
            _ => return Err((field, format!("'{literal}' is not key=value"))),
        }
    }
    for (i, source) in g.files.iter().enumerate() {
        let field = format!("files[{i}]");
        let (key, path) = match source.matches('=').count() {
            0 => (base_name(source).to_string(), source.as_str()),
            1 => match source.split_once('=') {
                Some((k, p)) if !k.is_empty() && !p.is_empty() => (k.to_string(), p),
                _ => return Err((field, format!("'{source}' is not key=path or path"))),
            },
            _ => return Err((field, format!("'{source}': the key or path contains '='"))),
        };
        out.push((key, read(&field, path)?));
    }
    let mut seen = BTreeMap::new();
    for (key, _) in &out {
        if !is_config_key(key) {
            return Err((
                "".into(),
                format!("'{key}' is not a valid key (letters, digits, '-', '_', '.')"),
            ));
        }
        if seen.insert(key.clone(), ()).is_some() {
            return Err((
                "".into(),
                format!("{} illegally repeats the key '{key}'", g.name),
            ));
        }
    }
    Ok(out)
}

/// A literal's value without one pair of surrounding quotes, as kustomize reads it.
fn unquote(s: &str) -> &str {
    let b = s.as_bytes();
    if b.len() >= 2 && b[0] == b[b.len() - 1] && (b[0] == b'"' || b[0] == b'\'') {
        &s[1..s.len() - 1]
    } else {
        s
    }
}

fn is_config_key(key: &str) -> bool {
    !key.is_empty()
        && key != "."
        && key != ".."
        && key.len() <= 253
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn is_env_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '-' | '_' | '.'))
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::load::files as tree_of;

    fn generator(yaml: &str) -> Generator {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn literals_files_and_envs_in_kustomizes_order() {
        let files = tree_of(&[
            ("app/app.properties", "a=1\n"),
            ("app/.env", "# comment\nB=2\nC\n"),
        ]);
        let tree = Tree::new(&files);
        let g = generator(
            "name: cfg\nliterals: [\"x='quoted'\", 'y=\"two\"']\nfiles: [app.properties, other=app.properties]\nenvs: [.env]\n",
        );
        let res = generate(
            &tree,
            "app/kustomization.yaml",
            0,
            &g,
            Kind::ConfigMap,
            None,
        )
        .unwrap();
        let keys: Vec<&String> = res.object["data"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["B", "C", "app.properties", "other", "x", "y"]);
        assert_eq!(res.object["data"]["x"], "quoted");
        assert_eq!(res.object["data"]["C"], "");
        assert!(res.hash);
    }

    #[test]
    fn secrets_are_encoded_and_options_merge() {
        let files = tree_of(&[]);
        let tree = Tree::new(&files);
        let g = generator(
            "name: creds\nliterals: [password=hunter2]\noptions: {labels: {a: local, b: local}}\n",
        );
        let global = GeneratorOptions {
            labels: [("a".to_string(), "global".to_string())].into(),
            disable_name_suffix_hash: true,
            ..Default::default()
        };
        let res = generate(
            &tree,
            "kustomization.yaml",
            0,
            &g,
            Kind::Secret,
            Some(&global),
        )
        .unwrap();
        assert_eq!(res.object["data"]["password"], "aHVudGVyMg==");
        assert_eq!(res.object["type"], "Opaque");
        assert_eq!(
            res.object["metadata"]["labels"],
            json!({"a": "global", "b": "local"})
        );
        assert!(!res.hash);
    }

    #[test]
    fn long_values_are_wrapped_as_kustomize_wraps_them() {
        assert_eq!(encode_base64(b"short"), "c2hvcnQ=");
        let long = encode_base64(&[b'x'; 60]);
        let lines: Vec<&str> = long.split_terminator('\n').collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), 70);
        assert!(long.ends_with('\n'));
    }

    #[test]
    fn mistakes_are_named() {
        let files = tree_of(&[]);
        let tree = Tree::new(&files);
        let missing = generate(
            &tree,
            "k/kustomization.yaml",
            2,
            &generator("name: c\nfiles: [nope.txt]\n"),
            Kind::ConfigMap,
            None,
        );
        assert_eq!(
            missing.unwrap_err().to_string(),
            "k/kustomization.yaml: configMapGenerator[2].files[0]: file 'nope.txt' does not exist in the source"
        );
        let twice = generate(
            &tree,
            "kustomization.yaml",
            0,
            &generator("name: c\nliterals: [a=1, a=2]\n"),
            Kind::ConfigMap,
            None,
        );
        assert!(
            twice
                .unwrap_err()
                .to_string()
                .contains("illegally repeats the key 'a'")
        );
        let bad = generate(
            &tree,
            "kustomization.yaml",
            0,
            &generator("name: c\nliterals: [novalue]\n"),
            Kind::ConfigMap,
            None,
        );
        assert!(
            bad.unwrap_err()
                .to_string()
                .contains("literals[0]: 'novalue' is not key=value")
        );
    }
}
