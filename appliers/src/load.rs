//! Loading manifests: every `.yaml`, `.yml` and `.json` file under a path, multi-document,
//! YAML 1.1 scalars read as kubectl reads them (`0644` is 420). `List` kinds are flattened.
//! Errors name the file, the line, and what is wrong.

use serde_json::Value;
use thiserror::Error;

use crate::object::Manifest;

/// A file of a source: slash-separated path and contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    pub path: String,
    pub data: Vec<u8>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum LoadError {
    #[error("path '{0}' does not exist in the source")]
    PathNotFound(String),
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: document {document}: {message}")]
    Invalid {
        file: String,
        document: usize,
        message: String,
    },
}

/// YAML documents one file may hold: far more than real repositories need (a 20,000-document
/// file of generated manifests loads), few enough to stop a document-separator storm.
pub const MAX_DOCUMENTS: usize = 100_000;
/// YAML nodes (mappings, sequences, scalars) one file may hold; about 200 MB parsed.
pub const MAX_NODES: usize = 2_000_000;
/// How deep mappings and sequences may nest (protects the stack).
pub const MAX_DEPTH: usize = 64;
/// Aliases (`*ref`) one file may use; expansions are bounded too (alias bombs).
pub const MAX_ALIASES: usize = 50_000;

/// How YAML scalars are read. kubectl reads YAML 1.1 (`yes`, `on`, `y` are booleans);
/// kustomize reads as go-yaml v3 does (only `true` and `false` are booleans, `yes` is a
/// string). Both read `0644` as the octal 420 and `0x1F` as 31.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Kubectl,
    Kustomize,
}

pub(crate) fn yaml_options(dialect: Dialect) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = MAX_DOCUMENTS;
    budget.max_nodes = MAX_NODES;
    // Every node is one event, or two for a mapping or sequence (start and end).
    budget.max_events = MAX_NODES.saturating_mul(2);
    budget.max_depth = MAX_DEPTH;
    budget.max_aliases = MAX_ALIASES;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.legacy_octal_numbers = true;
    options.strict_booleans = dialect == Dialect::Kustomize;
    // Errors never quote the file's text: it may be a Secret's value.
    options.with_snippet = false;
    options
}

/// Parses one YAML document as kustomize reads it (with skewer's limits).
pub fn parse_yaml(text: &str) -> Result<Value, String> {
    let mut v = serde_saphyr::from_str_with_options(text, yaml_options(Dialect::Kustomize))
        .map_err(|e| parse_message(&e))?;
    whole_numbers(&mut v);
    Ok(v)
}

/// Parses a stream of YAML documents as kustomize reads them.
pub fn parse_yaml_documents(text: &str) -> Result<Vec<Value>, String> {
    let mut docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, yaml_options(Dialect::Kustomize))
            .map_err(|e| parse_message(&e))?;
    docs.iter_mut().for_each(whole_numbers);
    Ok(docs)
}

/// Floats with no fraction become integers (`1e3` is 1000), as kubectl and kustomize send
/// them: the API server refuses `1000.0` for an integer field.
fn whole_numbers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64())
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *v = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers),
        Value::Object(m) => m.values_mut().for_each(whole_numbers),
        _ => {}
    }
}

/// What a parse error says. A breached limit is named with skewer's number for it.
pub(crate) fn parse_message(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::budget::BudgetBreach as B;
    let limit = match e {
        serde_saphyr::Error::Budget { breach, .. } => match breach {
            B::Documents { .. } => {
                format!(
                    "more than {MAX_DOCUMENTS} YAML documents in one file (skewer's limit; split the file)"
                )
            }
            B::Nodes { .. } | B::Events { .. } => {
                format!(
                    "more than {MAX_NODES} YAML nodes in one file (skewer's limit; split the file)"
                )
            }
            B::Depth { .. } => format!("nested deeper than {MAX_DEPTH} levels (skewer's limit)"),
            B::Aliases { .. } | B::AliasAnchorRatio { .. } => format!(
                "too many YAML aliases (more than {MAX_ALIASES}, or many more aliases than anchors: an alias bomb?)"
            ),
            other => format!("over a YAML parser limit ({other:?})"),
        },
        other => without_position(first_line(&other.to_string())).to_string(),
    };
    let at = e
        .location()
        .map(|l| format!("line {} column {}: ", l.line(), l.column()))
        .unwrap_or_default();
    format!("{at}{limit}")
}

/// A parser's message without the position it ends with (` at line 6, column 5`, serde_json's
/// ` at line 6 column 5`), which the message is prefixed with instead.
fn without_position(message: &str) -> &str {
    let Some((before, after)) = message.rsplit_once(" at line ") else {
        return message;
    };
    let position = after
        .split([',', ' '])
        .filter(|w| !w.is_empty() && *w != "column")
        .all(|w| w.bytes().all(|b| b.is_ascii_digit()));
    if position { before } else { message }
}

/// Source files from `(path, content)` pairs, for tests.
#[cfg(test)]
pub(crate) fn files(pairs: &[(&str, &str)]) -> Vec<SourceFile> {
    pairs
        .iter()
        .map(|(p, d)| SourceFile {
            path: p.to_string(),
            data: d.as_bytes().to_vec(),
        })
        .collect()
}

/// A user-given path within a source, exactly as written but folded: `./apps/` → `apps`,
/// `.` or `` → the root, `a/./b` → `a/b`, `a/../b` → `b`. A name that starts with a dot
/// (`.apps`) is that name. A path that leads above the root is refused.
pub fn source_path(path: &str) -> Result<String, String> {
    // A leading `/` is the source's root, as Flux joins it.
    crate::kustomize::tree::resolve("", path.trim_start_matches('/'))
}

/// [`source_path`], for paths checked already: one that leads outside the source stays as
/// written, and so names no file.
pub fn normalize_path(path: &str) -> String {
    source_path(path).unwrap_or_else(|_| path.to_string())
}

fn is_manifest(path: &str) -> bool {
    [".yaml", ".yml", ".json"]
        .iter()
        .any(|ext| path.ends_with(ext))
}

/// Loads the manifests of every file under `path`, sorted by file path so the result is
/// stable whatever order the files came in.
pub fn load(files: &[SourceFile], path: &str) -> Result<Vec<Manifest>, LoadError> {
    let root = normalize_path(path);
    let under = |p: &str| root.is_empty() || p == root || p.starts_with(&format!("{root}/"));
    let mut chosen: Vec<&SourceFile> = files
        .iter()
        .filter(|f| under(&f.path) && is_manifest(&f.path))
        .collect();
    if !root.is_empty() && !files.iter().any(|f| under(&f.path)) {
        return Err(LoadError::PathNotFound(path.to_string()));
    }
    chosen.sort_by(|a, b| a.path.cmp(&b.path));
    parse_each(&chosen, |f| parse_file(&f.path, &f.data))
}

/// Files one thread parses at least: for fewer, starting a thread costs more than it saves.
const FILES_PER_THREAD: usize = 64;

/// The manifests of `files` parsed by `parse`, in file order; the first error in that order.
/// Many files are parsed on as many threads as the machine has cores (at most four): a first
/// sync's build runs while the API server has nothing to do.
pub(crate) fn parse_each<F>(files: &[&SourceFile], parse: F) -> Result<Vec<Manifest>, LoadError>
where
    F: Fn(&SourceFile) -> Result<Vec<Manifest>, LoadError> + Sync,
{
    let sequential = |files: &[&SourceFile]| -> Result<Vec<Manifest>, LoadError> {
        let mut out = Vec::new();
        for file in files {
            out.extend(parse(file)?);
        }
        Ok(out)
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = cores.min(4).min(files.len() / FILES_PER_THREAD);
    if threads < 2 {
        return sequential(files);
    }
    let chunk = files.len().div_ceil(threads);
    let parts: Vec<Result<Vec<Manifest>, LoadError>> = std::thread::scope(|scope| {
        let running: Vec<_> = files
            .chunks(chunk)
            .map(|part| scope.spawn(|| sequential(part)))
            .collect();
        running
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut out = Vec::new();
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

/// Parses one file into manifests, reading YAML as kubectl does.
pub fn parse_file(path: &str, data: &[u8]) -> Result<Vec<Manifest>, LoadError> {
    parse_file_in(path, data, Dialect::Kubectl)
}

/// Parses one file into manifests, reading YAML in `dialect`.
pub fn parse_file_in(
    path: &str,
    data: &[u8],
    dialect: Dialect,
) -> Result<Vec<Manifest>, LoadError> {
    let text = std::str::from_utf8(data).map_err(|e| LoadError::Parse {
        file: path.to_string(),
        message: format!("not UTF-8: {e}"),
    })?;
    let mut docs: Vec<Value> = if path.ends_with(".json") {
        let value: Value = serde_json::from_str(text).map_err(|e| LoadError::Parse {
            file: path.to_string(),
            message: format!(
                "line {} column {}: {}",
                e.line(),
                e.column(),
                without_position(&e.to_string())
            ),
        })?;
        vec![value]
    } else {
        serde_saphyr::from_multiple_with_options(text, yaml_options(dialect)).map_err(|e| {
            LoadError::Parse {
                file: path.to_string(),
                message: parse_message(&e),
            }
        })?
    };
    docs.iter_mut().for_each(whole_numbers);
    let mut out = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        let document = index + 1;
        match doc {
            Value::Null => continue,
            Value::Object(_) => {}
            other => {
                return Err(LoadError::Invalid {
                    file: path.to_string(),
                    document,
                    message: format!("expected a Kubernetes object, found {}", type_name(&other)),
                });
            }
        }
        let invalid = |message: String| LoadError::Invalid {
            file: path.to_string(),
            document,
            message,
        };
        let kind = doc["kind"].as_str().unwrap_or_default();
        if kind.ends_with("List") && doc["items"].is_array() {
            for (i, item) in doc["items"].as_array().into_iter().flatten().enumerate() {
                let origin = format!("{path}#{document}.items[{i}]");
                validate(item).map_err(|m| invalid(format!("items[{i}]: {m}")))?;
                out.push(Manifest {
                    origin,
                    object: item.clone(),
                });
            }
            continue;
        }
        validate(&doc).map_err(invalid)?;
        out.push(Manifest {
            origin: format!("{path}#{document}"),
            object: doc,
        });
    }
    Ok(out)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or(s)
}

/// How a value is named in messages: "a number", "a mapping", …
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn validate(obj: &Value) -> Result<(), String> {
    for field in ["apiVersion", "kind"] {
        match &obj[field] {
            Value::String(s) if !s.is_empty() => {}
            Value::Null => return Err(format!("field '{field}' is missing")),
            _ => return Err(format!("field '{field}' must be a non-empty string")),
        }
    }
    match &obj["metadata"]["name"] {
        Value::String(s) if !s.is_empty() => Ok(()),
        Value::Null => Err(format!(
            "{} has no 'metadata.name' (generateName is not supported for applied objects)",
            obj["kind"].as_str().unwrap_or_default()
        )),
        _ => Err("field 'metadata.name' must be a non-empty string".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_exactly() {
        for (given, want) in [
            ("./apps/", "apps"),
            ("", ""),
            (".", ""),
            ("./", ""),
            ("/apps", "apps"),
            (".apps/x", ".apps/x"),
            ("apps/./x/../y", "apps/y"),
            ("..apps", "..apps"),
        ] {
            assert_eq!(source_path(given).as_deref(), Ok(want), "{given}");
        }
        for outside in ["..", "../apps", "apps/../.."] {
            assert!(
                source_path(outside)
                    .unwrap_err()
                    .contains("leads outside the source"),
                "{outside}"
            );
        }
    }

    #[test]
    fn a_parse_error_says_its_position_once() {
        let yaml =
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  bad: [1, 2\ndata: {}\n";
        let json = "{\"apiVersion\": \"v1\",\n  \"kind\": }";
        for (path, data, at) in [
            ("x.yaml", yaml, "line 6 column "),
            ("x.json", json, "line 2 column 11: "),
        ] {
            let e = parse_file(path, data.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(at), "{e}");
            assert_eq!(e.matches("line").count(), 1, "{e}");
        }
        assert_eq!(without_position("bad at line 3, column 4"), "bad");
        assert_eq!(without_position("bad at line 3 column 4"), "bad");
        assert_eq!(without_position("at line of sight"), "at line of sight");
    }

    fn f(path: &str, data: &str) -> SourceFile {
        SourceFile {
            path: path.into(),
            data: data.into(),
        }
    }

    #[test]
    fn many_files_load_in_file_order_and_fail_on_the_first_bad_one() {
        let cm =
            |i: usize| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i:04}}}\n");
        // Given out of order: loaded sorted by path, however many threads parse them.
        let mut files: Vec<SourceFile> = (0..1000)
            .rev()
            .map(|i| f(&format!("cms/c{i:04}.yaml"), &cm(i)))
            .collect();
        let got = load(&files, "cms").expect("loads");
        let names: Vec<String> = got.iter().map(|m| m.name().to_string()).collect();
        let want: Vec<String> = (0..1000).map(|i| format!("c{i:04}")).collect();
        assert_eq!(names, want);
        // Two bad files, in different threads' shares: the first in path order is named.
        files[10].data = b"kind: [".to_vec(); // cms/c0989.yaml
        files[900].data = b"kind: [".to_vec(); // cms/c0099.yaml
        let err = load(&files, "cms").expect_err("bad YAML").to_string();
        assert!(err.starts_with("cms/c0099.yaml: "), "{err}");
    }

    #[test]
    fn loads_multi_document_yaml_and_json_under_path() {
        let files = [
            f(
                "apps/a.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
            ),
            f(
                "apps/sub/c.json",
                r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"c"}}"#,
            ),
            f("apps/README.md", "# not a manifest"),
            f(
                "other/d.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: d}\n",
            ),
        ];
        let got = load(&files, "./apps").unwrap();
        let names: Vec<_> = got.iter().map(|m| m.name()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        // Empty documents are not counted.
        assert_eq!(got[1].origin, "apps/a.yaml#2");
    }

    #[test]
    fn yaml_1_1_octal_as_kubectl_reads_it() {
        let files = [f(
            "s.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {mode: 0644}\n",
        )];
        let got = load(&files, "").unwrap();
        assert_eq!(got[0].object["spec"]["mode"], 420);
    }

    #[test]
    fn lists_are_flattened() {
        let files = [f(
            "l.yaml",
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
        )];
        assert_eq!(load(&files, "").unwrap()[0].name(), "x");
    }

    #[test]
    fn broken_yaml_names_file_and_line() {
        let files = [f(
            "apps/bad.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n",
        )];
        let err = load(&files, "apps").unwrap_err().to_string();
        assert!(err.starts_with("apps/bad.yaml: line "), "{err}");
    }

    #[test]
    fn missing_fields_are_named() {
        let files = [f("x.yaml", "kind: ConfigMap\nmetadata: {name: a}\n")];
        let err = load(&files, "").unwrap_err().to_string();
        assert_eq!(err, "x.yaml: document 1: field 'apiVersion' is missing");
        let files = [f("x.yaml", "apiVersion: v1\nkind: ConfigMap\n")];
        assert!(
            load(&files, "")
                .unwrap_err()
                .to_string()
                .contains("metadata.name")
        );
    }

    #[test]
    fn missing_path_is_an_error() {
        let files = [f("a.yaml", "")];
        assert_eq!(
            load(&files, "nope"),
            Err(LoadError::PathNotFound("nope".into()))
        );
        assert!(load(&files, "./").unwrap().is_empty());
    }
}

#[cfg(test)]
mod limits {
    use super::*;

    fn configmaps(n: usize) -> String {
        (0..n)
            .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\ndata: {{i: \"{i}\"}}\n"))
            .collect()
    }

    #[test]
    fn a_file_of_twenty_thousand_documents_loads() {
        let got = parse_file("many.yaml", configmaps(20_000).as_bytes()).unwrap();
        assert_eq!(got.len(), 20_000);
        assert_eq!(got[19_999].origin, "many.yaml#20000");
    }

    #[test]
    fn breached_limits_are_named() {
        let storm = "---\n".repeat(MAX_DOCUMENTS + 1);
        let err = parse_file("storm.yaml", storm.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than 100000 YAML documents"), "{err}");
        let deep = format!(
            "a: {}1{}",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        let err = parse_file("deep.yaml", deep.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("deep.yaml: "), "{err}");
        assert!(err.contains("levels") || err.contains("nest"), "{err}");
        // A billion laughs: each level doubles the aliases.
        let mut bomb = String::from("a0: &a0 [x, x]\n");
        for i in 1..40 {
            bomb.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
        }
        assert!(parse_file("bomb.yaml", bomb.as_bytes()).is_err());
    }

    #[test]
    fn parse_errors_do_not_quote_the_file() {
        let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n  password: hunter22-value: [\n";
        let err = parse_file("s.yaml", secret.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter22"), "{err}");
    }
}

#[cfg(test)]
mod yaml_1_1 {
    use super::*;

    /// kubectl reads YAML 1.1: `yes`/`on` are booleans, `0x1F` is hex, `0644` octal.
    #[test]
    fn kustomize_reads_only_true_and_false_as_booleans() {
        let doc = "apiVersion: v1\nkind: X\nmetadata: {name: x}\nspec: {a: yes, b: y, c: on, d: 0644, e: 0x1F, g: True}\n";
        let got = parse_file_in("x.yaml", doc.as_bytes(), Dialect::Kustomize).unwrap();
        let spec = &got[0].object["spec"];
        assert_eq!(spec["a"], "yes");
        assert_eq!(spec["b"], "y");
        assert_eq!(spec["c"], "on");
        assert_eq!(spec["d"], 420);
        assert_eq!(spec["e"], 31);
        assert_eq!(spec["g"], true);
    }

    #[test]
    fn scalars_follow_yaml_1_1() {
        let doc = "apiVersion: v1\nkind: X\nmetadata: {name: x}\nspec: {a: yes, b: off, c: 0x1F, d: 0644, e: '0644', f: 1e3}\n";
        let got = parse_file("x.yaml", doc.as_bytes()).unwrap();
        let spec = &got[0].object["spec"];
        assert_eq!(spec["a"], true);
        assert_eq!(spec["b"], false);
        assert_eq!(spec["c"], 31);
        assert_eq!(spec["d"], 420);
        assert_eq!(spec["e"], "0644");
        assert_eq!(
            spec["f"], 1000,
            "a whole float is sent as an integer, as kubectl sends it"
        );
    }
}
