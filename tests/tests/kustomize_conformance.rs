//! skewer's native kustomize against kustomize itself: every case under `tests/kustomize/` is
//! built by skewer and by `kubectl kustomize` (the machine's kubectl, the oracle), and the two
//! must give the same objects, field for field (the order of objects aside; the order inside
//! lists counts).
//!
//! A case is a directory: a source tree whose root holds a kustomization, or whose `case.yaml`
//! lists the paths to build (`paths: [overlays/dev, overlays/prod]`). Cases skewer refuses
//! are listed in `tests/kustomize/REFUSED` with the words skewer's error must contain; such a
//! case must still fail in skewer (the list only shrinks: a refused case that starts to build
//! fails this test until it is taken off the list).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use serde_json::Value;
use skewer_appliers::kustomize;
use skewer_appliers::load::{SourceFile, parse_yaml_documents};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("kustomize")
}

/// Objects by `apiVersion kind namespace/name`.
fn by_id(objects: impl IntoIterator<Item = Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .filter(|o| !o.is_null())
        .map(|o| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
            let id = format!(
                "{} {} {}/{}",
                s(&o["apiVersion"]),
                s(&o["kind"]),
                s(&o["metadata"]["namespace"]),
                s(&o["metadata"]["name"])
            );
            (id, o)
        })
        .collect()
}

fn kubectl_kustomize(dir: &Path) -> Result<BTreeMap<String, Value>> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .context("running kubectl kustomize")?;
    if !out.status.success() {
        bail!(
            "kubectl kustomize {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    Ok(by_id(
        parse_yaml_documents(&text).map_err(anyhow::Error::msg)?,
    ))
}

fn skewer_build(files: &[SourceFile], path: &str) -> Result<BTreeMap<String, Value>, String> {
    let manifests = kustomize::render(files, path).map_err(|e| e.to_string())?;
    Ok(by_id(manifests.into_iter().map(|m| m.object)))
}

/// Where two objects first differ, as a JSON path.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => first_difference(p, q, &format!("{at}.{k}")),
                (p, q) => Some(format!("{at}.{k}: skewer {p:?}, kustomize {q:?}")),
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{at}[{i}]"))),
        (p, q) if p == q => None,
        (p, q) => Some(format!("{at}: skewer {p}, kustomize {q}")),
    }
}

/// The paths a case builds.
fn paths_of(case: &Path) -> Result<Vec<String>> {
    let spec = case.join("case.yaml");
    if !spec.exists() {
        return Ok(vec![String::new()]);
    }
    let v = parse_yaml_documents(&std::fs::read_to_string(spec)?).map_err(anyhow::Error::msg)?;
    Ok(v.first()
        .and_then(|d| d["paths"].as_array())
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

/// `case/path` → the words skewer's refusal must contain.
fn refused() -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(corpus().join("REFUSED")).unwrap_or_default();
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(char::is_whitespace))
        .map(|(case, why)| (case.to_string(), why.trim().to_string()))
        .collect())
}

#[test]
fn skewer_builds_what_kustomize_builds() -> Result<()> {
    let refused = refused()?;
    let mut cases: Vec<PathBuf> = std::fs::read_dir(corpus())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 20,
        "the corpus is missing ({} cases)",
        cases.len()
    );
    let mut failures = Vec::new();
    let (mut equal, mut objects) = (0, 0);
    for case in &cases {
        let name = case
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let files = skewer_e2e::source_files(case)?;
        for path in paths_of(case)? {
            let label = if path.is_empty() {
                name.clone()
            } else {
                format!("{name}/{path}")
            };
            let ours = skewer_build(&files, &path);
            if let Some(why) = refused.get(&label) {
                match ours {
                    Err(e) if e.contains(why.as_str()) => {}
                    Err(e) => failures.push(format!("{label}: refused for another reason: {e}")),
                    Ok(_) => failures.push(format!(
                        "{label}: builds now; take it off tests/kustomize/REFUSED"
                    )),
                }
                continue;
            }
            let theirs = kubectl_kustomize(&case.join(&path))?;
            let ours = match ours {
                Ok(o) => o,
                Err(e) => {
                    failures.push(format!("{label}: skewer failed: {e}"));
                    continue;
                }
            };
            let (a, b): (Vec<&String>, Vec<&String>) =
                (ours.keys().collect(), theirs.keys().collect());
            if a != b {
                failures.push(format!(
                    "{label}: objects differ:\n  skewer    {a:?}\n  kustomize {b:?}"
                ));
                continue;
            }
            let mut same = true;
            for (id, obj) in &ours {
                if let Some(d) = first_difference(obj, &theirs[id], id) {
                    failures.push(format!("{label}: {d}"));
                    same = false;
                    break;
                }
            }
            if same {
                equal += 1;
                objects += ours.len();
            }
        }
    }
    eprintln!(
        "{equal} builds equal to kustomize's ({objects} objects); {} refused",
        refused.len()
    );
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}
