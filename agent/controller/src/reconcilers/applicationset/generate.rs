//! Argo CD's generators as pure functions: `list`, `clusters`, `git` (directories and files),
//! `matrix` and `merge`, each with an optional `selector` over what it generates. A generator is
//! read from its JSON ([`read`]: every field it does not know refused by name, and the
//! generators skewer does not have refused with why), then [`generate`]d from [`Inputs`]: the
//! registered clusters and the files of the repositories already fetched. A `git` generator
//! whose repository is not among them answers [`GenError::Need`], and the reconciler fetches it
//! and asks again, so that no I/O happens here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use serde_json::{Map, Value};
use skewer_appliers::load::SourceFile;

use super::params::{Params, Selector, flat, normalized};
use super::template::Renderer;

/// Parameter sets one generator (matrix and merge included) may make.
pub const MAX_SETS: usize = 10_000;
/// Files a `git` files generator may read, and the size of each.
pub const MAX_FILES: usize = 1_000;
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// A glob's length.
pub const MAX_PATTERN: usize = 1_024;
/// `elementsYaml`'s length.
pub const MAX_ELEMENTS_YAML: usize = 1 << 20;
/// Bytes of parameter files one generation may parse, all generators together (a matrix may
/// read the same files once per set of its first generator).
pub const MAX_PARSED: usize = 64 << 20;
/// Bytes of a matrix's second generator rendered once per set of its first, in all.
pub const MAX_MATRIX_RENDER: usize = 16 << 20;

/// The hub, as Argo CD names it.
pub const IN_CLUSTER_NAME: &str = "in-cluster";
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";

/// A generator, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Generator {
    pub kind: Kind,
    /// Keeps only the sets whose flat parameters match.
    pub selector: Option<Selector>,
    /// A template overriding parts of the ApplicationSet's (top-level generators only).
    pub template: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    List(Vec<Map<String, Value>>),
    Clusters {
        selector: Selector,
        values: BTreeMap<String, String>,
    },
    Git(Git),
    /// Exactly two; the second's fields may name the first's parameters.
    Matrix(Vec<(Generator, Value)>),
    Merge {
        generators: Vec<Generator>,
        keys: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Git {
    pub repo_url: String,
    pub revision: String,
    /// `(glob, exclude)`.
    pub directories: Vec<(String, bool)>,
    pub files: Vec<String>,
    pub values: BTreeMap<String, String>,
    pub prefix: String,
    pub requeue_after: Option<Duration>,
}

/// A registered cluster, as the `clusters` generator sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Cluster {
    pub name: String,
    pub server: String,
    pub project: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The hub (`in-cluster`): generated only by an empty selector, as in Argo CD.
    pub hub: bool,
    /// Why this ApplicationSet's namespace may not deploy to it, if it may not.
    pub refused: Option<String>,
}

/// A repository's files at a revision, or why they cannot be had.
pub type Files = Result<Arc<Vec<SourceFile>>, String>;

/// What generators read.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    pub clusters: Vec<Cluster>,
    /// `(repoURL, revision)` → the repository's files at that revision.
    pub repos: BTreeMap<(String, String), Files>,
    /// Bytes of parameter files parsed so far (bounded by [`MAX_PARSED`]).
    pub parsed: std::cell::Cell<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum GenError {
    /// The files of `(repoURL, revision)` are needed.
    Need(String, String),
    Invalid(String),
}

impl From<String> for GenError {
    fn from(s: String) -> Self {
        GenError::Invalid(s)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListSpec {
    #[serde(default)]
    elements: Vec<Value>,
    #[serde(default)]
    elements_yaml: Option<String>,
    #[serde(default)]
    template: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClustersSpec {
    #[serde(default)]
    selector: LabelSelector,
    #[serde(default)]
    values: BTreeMap<String, String>,
    #[serde(default)]
    template: Option<Value>,
    #[serde(default)]
    flat_list: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GitSpec {
    #[serde(rename = "repoURL")]
    repo_url: String,
    #[serde(default)]
    revision: Option<String>,
    #[serde(default)]
    directories: Vec<DirectorySpec>,
    #[serde(default)]
    files: Vec<FileSpec>,
    #[serde(default)]
    values: BTreeMap<String, String>,
    #[serde(default)]
    path_param_prefix: Option<String>,
    #[serde(default)]
    requeue_after_seconds: Option<u64>,
    #[serde(default)]
    template: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirectorySpec {
    path: String,
    #[serde(default)]
    exclude: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CombineSpec {
    generators: Vec<Value>,
    #[serde(default)]
    merge_keys: Option<Vec<String>>,
    #[serde(default)]
    template: Option<Value>,
}

/// The generators skewer does not have, and why.
const REFUSED: &[(&str, &str)] = &[
    (
        "scmProvider",
        "skewer calls no Git host's API; list the repositories with a list or git generator",
    ),
    (
        "pullRequest",
        "skewer calls no Git host's API; pull requests are not generated",
    ),
    (
        "clusterDecisionResource",
        "use the clusters generator over labeled cluster Secrets",
    ),
    (
        "plugin",
        "skewer calls no plugin services; use a list or git files generator",
    ),
];

fn parse<T: serde::de::DeserializeOwned>(v: &Value, at: &str) -> Result<T, String> {
    T::deserialize(v).map_err(|e| format!("{at}: {e}"))
}

/// Reads generator `v` at field `at` (`spec.generators[0]`); `depth` is 0 at the top, 1 inside
/// a matrix or merge, 2 inside one nested in another (which may not nest again).
pub fn read(v: &Value, at: &str, depth: usize) -> Result<Generator, String> {
    let Some(fields) = v.as_object() else {
        return Err(format!("{at}: a generator is an object"));
    };
    let mut kind = None;
    let mut selector = None;
    let mut template = None;
    for (key, value) in fields {
        let field = format!("{at}.{key}");
        if value.is_null() {
            continue;
        }
        if let Some((_, why)) = REFUSED.iter().find(|(k, _)| k == key) {
            return Err(format!(
                "{field}: the {key} generator is not supported: {why}"
            ));
        }
        let read_kind = match key.as_str() {
            "selector" => {
                selector = Some(Selector::new(&parse(value, &field)?, &field)?);
                continue;
            }
            "list" => {
                let spec: ListSpec = parse(value, &field)?;
                template = spec.template;
                Kind::List(elements(spec.elements, spec.elements_yaml, &field)?)
            }
            "clusters" => {
                let spec: ClustersSpec = parse(value, &field)?;
                if spec.flat_list {
                    return Err(format!(
                        "{field}.flatList: not supported: each cluster is a parameter set of its own"
                    ));
                }
                template = spec.template;
                Kind::Clusters {
                    selector: Selector::new(&spec.selector, &format!("{field}.selector"))?,
                    values: spec.values,
                }
            }
            "git" => {
                let spec: GitSpec = parse(value, &field)?;
                template = spec.template.clone();
                Kind::Git(git(spec, &field)?)
            }
            "matrix" | "merge" => {
                if depth >= 2 {
                    return Err(format!(
                        "{field}: a {key} generator nested two levels deep may not hold another matrix or merge (Argo CD's limit)"
                    ));
                }
                let spec: CombineSpec = parse(value, &field)?;
                template = spec.template;
                let children: Vec<(Generator, Value)> = spec
                    .generators
                    .iter()
                    .enumerate()
                    .map(|(i, g)| {
                        let at = format!("{field}.generators[{i}]");
                        read(g, &at, depth + 1).map(|mut r| {
                            if r.template.take().is_some() {
                                tracing::debug!("{at}: a nested generator's template is ignored, as Argo CD ignores it");
                            }
                            (r, g.clone())
                        })
                    })
                    .collect::<Result<_, _>>()?;
                if key == "matrix" {
                    if children.len() != 2 {
                        return Err(format!(
                            "{field}.generators: a matrix combines exactly 2 generators, not {}",
                            children.len()
                        ));
                    }
                    Kind::Matrix(children)
                } else {
                    let keys = spec.merge_keys.unwrap_or_default();
                    if keys.is_empty() {
                        return Err(format!("{field}.mergeKeys: at least one key is required"));
                    }
                    if children.len() < 2 {
                        return Err(format!(
                            "{field}.generators: a merge needs at least 2 generators"
                        ));
                    }
                    Kind::Merge {
                        generators: children.into_iter().map(|(g, _)| g).collect(),
                        keys,
                    }
                }
            }
            "template" => continue,
            other => {
                return Err(format!(
                    "{at}.{other}: unknown generator (list, clusters, git, matrix, merge)"
                ));
            }
        };
        if kind.is_some() {
            return Err(format!(
                "{at}: give one generator per entry, found also {key}"
            ));
        }
        kind = Some(read_kind);
    }
    let kind =
        kind.ok_or_else(|| format!("{at}: no generator (list, clusters, git, matrix or merge)"))?;
    Ok(Generator {
        kind,
        selector,
        template: template.filter(|t| t.as_object().is_some_and(|m| !m.is_empty())),
    })
}

fn elements(
    elements: Vec<Value>,
    yaml: Option<String>,
    at: &str,
) -> Result<Vec<Map<String, Value>>, String> {
    let mut all = elements;
    if let Some(yaml) = yaml.filter(|y| !y.trim().is_empty()) {
        if yaml.len() > MAX_ELEMENTS_YAML {
            return Err(format!(
                "{at}.elementsYaml: {} bytes, more than {MAX_ELEMENTS_YAML}",
                yaml.len()
            ));
        }
        match skewer_appliers::load::parse_yaml(&yaml)
            .map_err(|e| format!("{at}.elementsYaml: {e}"))?
        {
            Value::Array(items) => all.extend(items),
            _ => return Err(format!("{at}.elementsYaml: not a YAML list")),
        }
    }
    if all.len() > MAX_SETS {
        return Err(format!("{at}.elements: more than {MAX_SETS} elements"));
    }
    all.into_iter()
        .enumerate()
        .map(|(i, e)| match e {
            Value::Object(m) => Ok(m),
            _ => Err(format!(
                "{at}.elements[{i}]: an element is an object of parameters"
            )),
        })
        .collect()
}

fn git(spec: GitSpec, at: &str) -> Result<Git, String> {
    if spec.repo_url.trim().is_empty() {
        return Err(format!("{at}.repoURL: required"));
    }
    if spec.directories.is_empty() == spec.files.is_empty() {
        return Err(format!("{at}: give directories or files (one of them)"));
    }
    let check = |p: &str, field: String| -> Result<String, String> {
        if p.len() > MAX_PATTERN {
            return Err(format!(
                "{field}: {} bytes, more than the {MAX_PATTERN} a pattern may have",
                p.len()
            ));
        }
        Ok(p.trim_start_matches("./").to_string())
    };
    let directories = spec
        .directories
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Ok((
                check(&d.path, format!("{at}.directories[{i}].path"))?,
                d.exclude,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let files = spec
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| check(&f.path, format!("{at}.files[{i}].path")))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Git {
        repo_url: spec.repo_url.trim().to_string(),
        revision: spec
            .revision
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| "HEAD".into()),
        directories,
        files,
        values: spec.values,
        prefix: spec.path_param_prefix.unwrap_or_default(),
        requeue_after: spec.requeue_after_seconds.map(Duration::from_secs),
    })
}

/// The parameter sets of `g`. Clusters this namespace may not use are passed over, and each is
/// said once in `notes`.
pub fn generate(
    g: &Generator,
    inputs: &Inputs,
    renderer: &Renderer,
    notes: &mut BTreeSet<String>,
) -> Result<Vec<Params>, GenError> {
    let go = renderer.go;
    let mut sets = match &g.kind {
        Kind::List(elements) => elements
            .iter()
            .map(|e| {
                if go {
                    e.clone()
                } else {
                    super::params::flattened(e)
                }
            })
            .collect(),
        Kind::Clusters { selector, values } => {
            let mut sets = Vec::new();
            for c in &inputs.clusters {
                let chosen = if c.hub {
                    selector.is_empty()
                } else {
                    selector.matches(&c.labels)
                };
                if !chosen {
                    continue;
                }
                if let Some(why) = &c.refused {
                    notes.insert(why.clone());
                    continue;
                }
                sets.push(with_values(cluster_params(c), values, renderer, go)?);
            }
            sets
        }
        Kind::Git(git) => git_sets(git, inputs, renderer)?,
        Kind::Matrix(children) => matrix(children, inputs, renderer, notes)?,
        Kind::Merge { generators, keys } => {
            let mut all = Vec::with_capacity(generators.len());
            for child in generators {
                all.push(generate(child, inputs, renderer, notes)?);
            }
            merge(all, keys)
        }
    };
    if let Some(selector) = &g.selector {
        sets.retain(|p| selector.matches(&flat(p)));
    }
    if sets.len() > MAX_SETS {
        return Err(GenError::Invalid(format!(
            "more than {MAX_SETS} parameter sets"
        )));
    }
    Ok(sets)
}

fn strings(m: &BTreeMap<String, String>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// A cluster's parameters, nested (`metadata.labels.env`).
fn cluster_params(c: &Cluster) -> Params {
    let mut p = Params::new();
    p.insert("name".into(), Value::String(c.name.clone()));
    p.insert("nameNormalized".into(), Value::String(normalized(&c.name)));
    p.insert("server".into(), Value::String(c.server.clone()));
    p.insert("project".into(), Value::String(c.project.clone()));
    let mut meta = Map::new();
    meta.insert("labels".into(), strings(&c.labels));
    meta.insert("annotations".into(), strings(&c.annotations));
    p.insert("metadata".into(), Value::Object(meta));
    p
}

/// `values`, each rendered with the set's own parameters, added as `values`; the set made
/// flat for Argo CD's default templates.
fn with_values(
    mut p: Params,
    values: &BTreeMap<String, String>,
    renderer: &Renderer,
    go: bool,
) -> Result<Params, GenError> {
    let view = Value::Object(if go {
        p.clone()
    } else {
        super::params::flattened(&p)
    });
    let mut rendered = Map::new();
    for (k, v) in values {
        rendered.insert(
            k.clone(),
            Value::String(
                renderer
                    .string(v, &view)
                    .map_err(|e| format!("values.{k}: {e}"))?,
            ),
        );
    }
    if !values.is_empty() {
        p.insert("values".into(), Value::Object(rendered));
    }
    Ok(if go { p } else { super::params::flattened(&p) })
}

fn git_sets(git: &Git, inputs: &Inputs, renderer: &Renderer) -> Result<Vec<Params>, GenError> {
    let key = (git.repo_url.clone(), git.revision.clone());
    let files = match inputs.repos.get(&key) {
        None => return Err(GenError::Need(key.0, key.1)),
        Some(Err(e)) => return Err(GenError::Invalid(format!("{}: {e}", git.repo_url))),
        Some(Ok(files)) => files,
    };
    let go = renderer.go;
    let mut sets = Vec::new();
    if !git.directories.is_empty() {
        let dirs: BTreeSet<&str> = files.iter().flat_map(|f| parents(&f.path)).collect();
        for dir in dirs {
            let segs: Vec<&str> = dir.split('/').collect();
            let hit = |exclude: bool| {
                git.directories
                    .iter()
                    .any(|(p, e)| *e == exclude && glob(p, &segs))
            };
            if hit(false) && !hit(true) {
                let p = path_params(dir, None, &git.prefix, go);
                sets.push(with_values(p, &git.values, renderer, go)?);
            }
        }
        return Ok(sets);
    }
    let matched: Vec<&SourceFile> = files
        .iter()
        .filter(|f| {
            let segs: Vec<&str> = f.path.split('/').collect();
            git.files.iter().any(|p| glob(p, &segs))
        })
        .collect();
    if matched.len() > MAX_FILES {
        return Err(GenError::Invalid(format!(
            "{}: more than {MAX_FILES} files match",
            git.repo_url
        )));
    }
    for f in matched {
        if f.data.len() > MAX_FILE_BYTES {
            return Err(GenError::Invalid(format!(
                "{}: {}: {} bytes, more than the {MAX_FILE_BYTES} a parameter file may have",
                git.repo_url,
                f.path,
                f.data.len()
            )));
        }
        let parsed = inputs.parsed.get().saturating_add(f.data.len());
        if parsed > MAX_PARSED {
            return Err(GenError::Invalid(format!(
                "the generators read more than {MAX_PARSED} bytes of parameter files"
            )));
        }
        inputs.parsed.set(parsed);
        let text = std::str::from_utf8(&f.data)
            .map_err(|_| format!("{}: {}: not UTF-8 text", git.repo_url, f.path))?;
        let doc = if f.path.ends_with(".json") {
            serde_json::from_str(text).map_err(|e| e.to_string())
        } else {
            skewer_appliers::load::parse_yaml(text)
        }
        .map_err(|e| format!("{}: {}: {e}", git.repo_url, f.path))?;
        let items = match doc {
            Value::Array(items) => items,
            Value::Null => Vec::new(),
            other => vec![other],
        };
        let (dir, name) = f.path.rsplit_once('/').unwrap_or(("", f.path.as_str()));
        for (i, item) in items.into_iter().enumerate() {
            let Value::Object(mut p) = item else {
                return Err(GenError::Invalid(format!(
                    "{}: {} (item {i}): parameters are an object",
                    git.repo_url, f.path
                )));
            };
            let path = path_params(dir, Some(name), &git.prefix, go);
            for (k, v) in path {
                p.insert(k, v);
            }
            let p = if go { p } else { super::params::flattened(&p) };
            sets.push(with_values(p, &git.values, renderer, go)?);
        }
    }
    Ok(sets)
}

/// The `(repoURL, revision)` of every `git` generator in `g` (inside matrix and merge too)
/// whose URL is written out (not templated): what a push to a repository may change.
pub fn repositories(g: &Generator) -> Vec<(String, String)> {
    match &g.kind {
        Kind::Git(git) if !git.repo_url.contains("{{") => {
            vec![(git.repo_url.clone(), git.revision.clone())]
        }
        Kind::Matrix(children) => children.iter().flat_map(|(c, _)| repositories(c)).collect(),
        Kind::Merge { generators, .. } => generators.iter().flat_map(repositories).collect(),
        _ => Vec::new(),
    }
}

/// Every directory above `file` (`a/b/c.yaml` → `a`, `a/b`).
fn parents(file: &str) -> impl Iterator<Item = &str> {
    file.match_indices('/').map(move |(i, _)| &file[..i])
}

/// The `path` parameters of directory `dir` (and a file `name` in it): Argo CD's flat `path`,
/// `path.basename`, `path[N]`…, or the Go templates' `path.path`, `path.segments`….
fn path_params(dir: &str, name: Option<&str>, prefix: &str, go: bool) -> Params {
    let basename = dir.rsplit('/').next().unwrap_or_default();
    let segments: Vec<&str> = if dir.is_empty() {
        Vec::new()
    } else {
        dir.split('/').collect()
    };
    let mut out = Params::new();
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    if go {
        let mut path = Map::new();
        path.insert("path".into(), Value::String(dir.into()));
        path.insert("basename".into(), Value::String(basename.into()));
        path.insert(
            "basenameNormalized".into(),
            Value::String(normalized(basename)),
        );
        path.insert(
            "segments".into(),
            Value::Array(
                segments
                    .iter()
                    .map(|s| Value::String((*s).into()))
                    .collect(),
            ),
        );
        if let Some(name) = name {
            path.insert("filename".into(), Value::String(name.into()));
            path.insert("filenameNormalized".into(), Value::String(normalized(name)));
        }
        let path = Value::Object(path);
        if prefix.is_empty() {
            out.insert("path".into(), path);
        } else {
            let mut wrap = Map::new();
            wrap.insert("path".into(), path);
            out.insert(prefix.into(), Value::Object(wrap));
        }
        return out;
    }
    let mut put = |k: &str, v: &str| {
        out.insert(key(k), Value::String(v.into()));
    };
    put("path", dir);
    put("path.basename", basename);
    put("path.basenameNormalized", &normalized(basename));
    if let Some(name) = name {
        put("path.filename", name);
        put("path.filenameNormalized", &normalized(name));
    }
    for (i, s) in segments.iter().enumerate() {
        put(&format!("path[{i}]"), s);
    }
    out
}

/// Whether path segments `path` match glob `pattern`: `*`, `?` and `[…]` within a segment,
/// `**` across any number of them. Linear in the product of the two lengths, never worse.
pub fn glob(pattern: &str, path: &[&str]) -> bool {
    let pat: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    // reach[j]: the first i pattern segments can match the first j path segments.
    let mut reach = vec![false; path.len() + 1];
    reach[0] = true;
    for p in &pat {
        let mut next = vec![false; path.len() + 1];
        if *p == "**" {
            let mut any = false;
            for j in 0..=path.len() {
                any |= reach[j];
                next[j] = any;
            }
        } else {
            for j in 1..=path.len() {
                next[j] = reach[j - 1] && segment(p.as_bytes(), path[j - 1].as_bytes());
            }
        }
        reach = next;
    }
    reach[path.len()]
}

/// One segment against one glob segment: iterative, remembering the last `*` only.
fn segment(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    if let Some((hit, len)) = class(&p[pi..], s[si])
                        && hit
                    {
                        pi += len;
                        si += 1;
                        continue;
                    }
                }
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// A `[…]` class at the start of `p`: whether `c` is in it, and the class's length.
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let end = p.iter().skip(1).position(|&x| x == b']')? + 1;
    let body = &p[1..end];
    let (negated, body) = match body.first() {
        Some(b'!' | b'^') => (true, &body[1..]),
        _ => (false, body),
    };
    let mut hit = false;
    let mut i = 0;
    while i < body.len() {
        if i + 2 < body.len() && body[i + 1] == b'-' {
            hit |= body[i] <= c && c <= body[i + 2];
            i += 3;
        } else {
            hit |= body[i] == c;
            i += 1;
        }
    }
    Some((hit != negated, end + 1))
}

fn matrix(
    children: &[(Generator, Value)],
    inputs: &Inputs,
    renderer: &Renderer,
    notes: &mut BTreeSet<String>,
) -> Result<Vec<Params>, GenError> {
    let [(first, _), (second, raw)] = children else {
        return Err(GenError::Invalid(
            "a matrix combines exactly 2 generators".into(),
        ));
    };
    let left = generate(first, inputs, renderer, notes)?;
    // The second generator may name the first's parameters (a git files path per cluster):
    // it is read again for each of the first's sets when it does.
    let raw_text = raw.to_string();
    let templated = raw_text.contains("{{");
    if templated && left.len().saturating_mul(raw_text.len()) > MAX_MATRIX_RENDER {
        return Err(GenError::Invalid(format!(
            "the matrix's second generator ({} bytes) names the first's parameters and would be rendered for each of its {} sets: more than {MAX_MATRIX_RENDER} bytes",
            raw_text.len(),
            left.len()
        )));
    }
    let fixed = if templated {
        None
    } else {
        Some(generate(second, inputs, renderer, notes)?)
    };
    let mut out = Vec::new();
    for l in &left {
        let right = match &fixed {
            Some(r) => r.clone(),
            None => {
                let rendered = renderer
                    .value(raw, &Value::Object(l.clone()), "")
                    .map_err(GenError::Invalid)?;
                let g = read(&rendered, "matrix.generators[1]", 2)?;
                generate(&g, inputs, renderer, notes)?
            }
        };
        for r in right {
            if out.len() >= MAX_SETS {
                return Err(GenError::Invalid(format!(
                    "the matrix makes more than {MAX_SETS} parameter sets"
                )));
            }
            let mut p = l.clone();
            combine(&mut p, &r, "")?;
            out.push(p);
        }
    }
    Ok(out)
}

/// `over` added into `base`; a key both give with different values is an error.
fn combine(base: &mut Params, over: &Params, at: &str) -> Result<(), GenError> {
    for (k, v) in over {
        let field = if at.is_empty() {
            k.clone()
        } else {
            format!("{at}.{k}")
        };
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => combine(b, o, &field)?,
            (Some(b), v) if b != v => {
                return Err(GenError::Invalid(format!(
                    "the matrix's generators both give parameter '{field}', with different values ('{}' and '{}')",
                    super::params::scalar(b),
                    super::params::scalar(v)
                )));
            }
            (Some(_), _) => {}
            (None, v) => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

/// Later generators' sets override the first's where every merge key agrees.
fn merge(mut all: Vec<Vec<Params>>, keys: &[String]) -> Vec<Params> {
    if all.is_empty() {
        return Vec::new();
    }
    let mut base = all.remove(0);
    let key_of = |p: &Params| -> Option<Vec<String>> {
        let f = flat(p);
        keys.iter().map(|k| f.get(k).cloned()).collect()
    };
    for later in all {
        let by_key: BTreeMap<Vec<String>, &Params> = later
            .iter()
            .filter_map(|p| key_of(p).map(|k| (k, p)))
            .collect();
        for b in &mut base {
            if let Some(over) = key_of(b).and_then(|k| by_key.get(&k).copied()) {
                overlay(b, over);
            }
        }
    }
    base
}

fn overlay(base: &mut Params, over: &Params) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(Value::Object(b)), Value::Object(o)) => overlay(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster(name: &str, env: &str) -> Cluster {
        Cluster {
            name: name.into(),
            server: format!("https://{name}:6443"),
            labels: [("env".to_string(), env.to_string())].into(),
            ..Cluster::default()
        }
    }

    fn inputs() -> Inputs {
        let files = vec![
            SourceFile {
                path: "apps/web/cm.yaml".into(),
                data: b"kind: ConfigMap".to_vec(),
            },
            SourceFile {
                path: "apps/api/cm.yaml".into(),
                data: vec![],
            },
            SourceFile {
                path: "apps/legacy/cm.yaml".into(),
                data: vec![],
            },
            SourceFile {
                path: "config/dev/config.json".into(),
                data: br#"{"cluster": {"name": "dev"}, "replicas": 2}"#.to_vec(),
            },
            SourceFile {
                path: "config/prod/config.yaml".into(),
                data: b"- cluster: {name: prod-1}\n- cluster: {name: prod-2}\n".to_vec(),
            },
        ];
        Inputs {
            clusters: vec![
                Cluster {
                    name: IN_CLUSTER_NAME.into(),
                    server: IN_CLUSTER_SERVER.into(),
                    hub: true,
                    ..Cluster::default()
                },
                cluster("dev-1", "dev"),
                cluster("prod-1", "prod"),
                Cluster {
                    refused: Some("cluster 'dev-2' does not allow this namespace".into()),
                    ..cluster("dev-2", "dev")
                },
            ],
            repos: [(
                ("https://git.example/r".to_string(), "HEAD".to_string()),
                Ok(Arc::new(files)),
            )]
            .into(),
            ..Inputs::default()
        }
    }

    fn gen_with(v: Value, go: bool) -> Result<Vec<Params>, GenError> {
        let g = read(&v, "spec.generators[0]", 0).map_err(GenError::Invalid)?;
        let r = Renderer {
            go,
            ..Renderer::default()
        };
        generate(&g, &inputs(), &r, &mut BTreeSet::new())
    }

    fn names(sets: &[Params], key: &str) -> Vec<String> {
        sets.iter().map(|p| flat(p)[key].clone()).collect()
    }

    #[test]
    fn clusters_by_selector_with_values_and_the_hub_only_unselected() {
        let sets = gen_with(
            json!({"clusters": {"selector": {"matchLabels": {"env": "dev"}}, "values": {"ns": "team-{{name}}"}}}),
            false,
        )
        .unwrap();
        assert_eq!(names(&sets, "name"), ["dev-1"], "dev-2 is not allowed here");
        assert_eq!(flat(&sets[0])["values.ns"], "team-dev-1");
        assert_eq!(flat(&sets[0])["metadata.labels.env"], "dev");
        let all = gen_with(json!({"clusters": {}}), false).unwrap();
        assert_eq!(names(&all, "name"), ["in-cluster", "dev-1", "prod-1"]);
        let mut notes = BTreeSet::new();
        let g = read(&json!({"clusters": {}}), "g", 0).unwrap();
        generate(&g, &inputs(), &Renderer::default(), &mut notes).unwrap();
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    #[test]
    fn git_directories_with_exclude_in_both_template_styles() {
        let spec = json!({"git": {"repoURL": "https://git.example/r", "revision": "HEAD",
            "directories": [{"path": "apps/*"}, {"path": "apps/legacy", "exclude": true}]}});
        let flat_sets = gen_with(spec.clone(), false).unwrap();
        assert_eq!(names(&flat_sets, "path"), ["apps/api", "apps/web"]);
        assert_eq!(flat(&flat_sets[1])["path.basename"], "web");
        assert_eq!(flat(&flat_sets[1])["path[0]"], "apps");
        let go_sets = gen_with(spec, true).unwrap();
        assert_eq!(go_sets[1]["path"]["basename"], "web");
        assert_eq!(go_sets[1]["path"]["segments"], json!(["apps", "web"]));
    }

    #[test]
    fn git_files_become_parameters() {
        let sets = gen_with(
            json!({"git": {"repoURL": "https://git.example/r", "revision": "HEAD", "files": [{"path": "config/**/config.*"}]}}),
            false,
        )
        .unwrap();
        assert_eq!(names(&sets, "cluster.name"), ["dev", "prod-1", "prod-2"]);
        assert_eq!(flat(&sets[0])["replicas"], "2");
        assert_eq!(flat(&sets[0])["path.basename"], "dev");
        assert_eq!(flat(&sets[0])["path.filename"], "config.json");
    }

    #[test]
    fn a_repository_not_fetched_is_asked_for() {
        let e = gen_with(
            json!({"git": {"repoURL": "https://other/r", "directories": [{"path": "*"}]}}),
            false,
        )
        .unwrap_err();
        assert_eq!(e, GenError::Need("https://other/r".into(), "HEAD".into()));
    }

    #[test]
    fn matrix_of_git_directories_and_clusters_and_merge() {
        let sets = gen_with(
            json!({"matrix": {"generators": [
                {"git": {"repoURL": "https://git.example/r", "directories": [{"path": "apps/*"}, {"path": "apps/legacy", "exclude": true}]}},
                {"clusters": {"selector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "prod"]}]}}}
            ]}}),
            false,
        )
        .unwrap();
        let pairs: Vec<String> = sets
            .iter()
            .map(|p| {
                let f = flat(p);
                format!("{}-{}", f["path.basename"], f["name"])
            })
            .collect();
        assert_eq!(
            pairs,
            ["api-dev-1", "api-prod-1", "web-dev-1", "web-prod-1"]
        );
        let merged = gen_with(
            json!({"merge": {"mergeKeys": ["name"], "generators": [
                {"clusters": {"values": {"size": "small"}}},
                {"list": {"elements": [{"name": "prod-1", "values": {"size": "large"}}]}}
            ]}}),
            false,
        )
        .unwrap();
        let sizes: Vec<String> = merged
            .iter()
            .map(|p| format!("{}={}", flat(p)["name"], flat(p)["values.size"]))
            .collect();
        assert_eq!(sizes, ["in-cluster=small", "dev-1=small", "prod-1=large"]);
    }

    #[test]
    fn a_matrix_second_generator_reads_the_first() {
        let sets = gen_with(
            json!({"matrix": {"generators": [
                {"list": {"elements": [{"env": "dev"}]}},
                {"git": {"repoURL": "https://git.example/r", "files": [{"path": "config/{{env}}/*.json"}]}}
            ]}}),
            false,
        )
        .unwrap();
        assert_eq!(names(&sets, "replicas"), ["2"]);
    }

    #[test]
    fn refusals_name_the_field() {
        for (spec, says) in [
            (
                json!({"scmProvider": {"github": {}}}),
                "spec.generators[0].scmProvider: the scmProvider generator is not supported",
            ),
            (
                json!({"pullRequest": {}}),
                "pullRequest generator is not supported",
            ),
            (
                json!({"clusters": {"flatList": true}}),
                "spec.generators[0].clusters.flatList",
            ),
            (
                json!({"list": {"elements": [1]}}),
                "spec.generators[0].list.elements[0]",
            ),
            (
                json!({"list": {"elements": []}, "clusters": {}}),
                "one generator per entry",
            ),
            (
                json!({"git": {"repoURL": "r", "directories": [{"path": "*"}], "files": [{"path": "x"}]}}),
                "directories or files",
            ),
            (
                json!({"matrix": {"generators": [{"list": {"elements": []}}]}}),
                "exactly 2",
            ),
            (
                json!({"list": {"elementz": []}}),
                "unknown field `elementz`",
            ),
            (
                json!({"matrix": {"generators": [{"matrix": {"generators": [{"matrix": {"generators": []}}, {"list": {"elements": []}}]}}, {"list": {"elements": []}}]}}),
                "two levels deep",
            ),
        ] {
            let e = read(&spec, "spec.generators[0]", 0).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }

    #[test]
    fn a_hostile_matrix_is_refused_before_it_is_expanded() {
        let many: Vec<Value> = (0..5_000).map(|i| json!({"i": i})).collect();
        let big: Vec<Value> = (0..2_000)
            .map(|i| json!({"j": format!("{{{{i}}}}-{i}")}))
            .collect();
        let e = gen_with(
            json!({"matrix": {"generators": [{"list": {"elements": many}}, {"list": {"elements": big}}]}}),
            false,
        )
        .unwrap_err();
        assert!(
            matches!(&e, GenError::Invalid(m) if m.contains("would be rendered for each")),
            "{e:?}"
        );
        // Parameter files read again and again run out of budget.
        let inputs = inputs();
        inputs.parsed.set(MAX_PARSED);
        let g = read(
            &json!({"git": {"repoURL": "https://git.example/r", "files": [{"path": "config/**"}]}}),
            "g",
            0,
        )
        .unwrap();
        let e = generate(&g, &inputs, &Renderer::default(), &mut BTreeSet::new()).unwrap_err();
        assert!(
            matches!(&e, GenError::Invalid(m) if m.contains("bytes of parameter files")),
            "{e:?}"
        );
    }

    #[test]
    fn globs() {
        let m = |p: &str, s: &str| glob(p, &s.split('/').collect::<Vec<_>>());
        assert!(m("apps/*", "apps/web"));
        assert!(!m("apps/*", "apps/web/x"));
        assert!(m("apps/**", "apps/web/x"));
        assert!(m("**/config.json", "a/b/config.json"));
        assert!(m("a/[a-c]?", "a/bz"));
        assert!(!m("a/[!a-c]?", "a/bz"));
        // A pathological pattern stays fast.
        let long = "a".repeat(1000);
        assert!(!m(&"*a".repeat(500), &format!("{long}b")));
    }
}
