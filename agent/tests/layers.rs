//! The agent's layers. Between crates: each crate depends only on the crates below it (the
//! compiler keeps that; this test keeps the order from being rearranged). Within a crate: no
//! import circle among its files: every `crate::…` and `super::…` path in a file (tests
//! aside) is resolved to the file that defines it, and the graph of files must have no cycle.
//! A circle is what lets the lowest layer (the runtime) depend on what depends on it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The module path of a file under `src/` (`runtime/context.rs` → `runtime::context`).
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn files(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            // The binary is a crate of its own.
            if path != root.join("bin") {
                files(&path, root, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(
                path.strip_prefix(root)
                    .map(Path::to_path_buf)
                    .unwrap_or(path),
            );
        }
    }
}

/// Every path a file names: `crate::a::b::{c, d::e}` gives `a::b::c` and `a::b::d::e`.
fn named_paths(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `use child::…` in a module resolves from the module itself, as `self::` does.
    let relative = text
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.strip_prefix("pub use ")
                .or_else(|| l.strip_prefix("pub(crate) use "))
                .or_else(|| l.strip_prefix("use "))
        })
        .filter(|rest| !rest.starts_with("crate::") && !rest.starts_with("super::"))
        .map(|rest| format!("self::{}", rest.strip_prefix("self::").unwrap_or(rest)))
        .collect::<Vec<_>>()
        .join("\n");
    let text = format!("{text}\n{relative}");
    let text = text.as_str();
    for (base, rest) in [
        ("crate::", None),
        ("super::", Some(false)),
        ("self::", Some(true)),
    ] {
        let mut from = 0;
        while let Some(i) = text[from..].find(base) {
            let start = from + i + base.len();
            from = start;
            let word = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
            let end = text[start..]
                .find(|c: char| !word(c))
                .map_or(text.len(), |e| start + e);
            let path: Vec<String> = text[start..end]
                .split("::")
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect();
            let prefix: Vec<String> = match rest {
                None => Vec::new(),
                // `self` is the module; `super` of `a/b.rs` (or `a/b/mod.rs`) is `a`.
                Some(true) => me.to_vec(),
                Some(false) => me[..me.len().saturating_sub(1)].to_vec(),
            };
            let full: Vec<String> = prefix.into_iter().chain(path).collect();
            out.push(full.clone());
            if text[end..].starts_with('{') {
                let close = text[end..].find('}').map_or(text.len(), |c| end + c);
                for item in text[end + 1..close].split(',') {
                    let item = item.split(" as ").next().unwrap_or_default().trim();
                    if !item.is_empty() && item != "self" {
                        let mut p = full.clone();
                        p.extend(item.split("::").map(String::from));
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

/// The agent's crates, bottom first, with the skewer crates each may depend on.
const LAYERS: &[(&str, &str, &[&str])] = &[
    ("api", "skewer-api", &["skewer-appliers"]),
    ("view", "skewer-view", &["skewer-api", "skewer-appliers"]),
    (
        "controller",
        "skewer-controller",
        &[
            "skewer-api",
            "skewer-view",
            "skewer-sources",
            "skewer-appliers",
        ],
    ),
    (
        "cli",
        "skewer-cli",
        &[
            "skewer-api",
            "skewer-view",
            "skewer-sources",
            "skewer-appliers",
        ],
    ),
    (
        "ui",
        "skewer-ui",
        &["skewer-api", "skewer-view", "skewer-appliers"],
    ),
    (
        ".",
        "skewer-agent",
        &[
            "skewer-api",
            "skewer-view",
            "skewer-controller",
            "skewer-cli",
            "skewer-ui",
            "skewer-sources",
            "skewer-appliers",
        ],
    ),
];

/// The skewer crates a `Cargo.toml` names, in any dependency table.
fn skewer_dependencies(manifest: &str) -> BTreeSet<String> {
    manifest
        .lines()
        .filter_map(|l| l.split_once(['.', ' ', '=']).map(|(name, _)| name.trim()))
        .filter(|name| name.starts_with("skewer-"))
        .map(String::from)
        .collect()
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, name, allowed) in LAYERS {
        let manifest =
            std::fs::read_to_string(agent.join(dir).join("Cargo.toml")).expect("a Cargo.toml");
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "{dir}: {name}"
        );
        let deps = skewer_dependencies(&manifest);
        let extra: Vec<&String> = deps
            .iter()
            .filter(|d| !allowed.contains(&d.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "{name} depends on {extra:?}, above or beside it"
        );
    }
    // What the acceptance names, said outright: the command line and the dashboard
    // never reach the controllers, and nothing but the binary reaches the command line.
    for (_, name, allowed) in LAYERS {
        if matches!(*name, "skewer-cli" | "skewer-ui") {
            assert!(!allowed.contains(&"skewer-controller"), "{name}");
        }
        if *name != "skewer-agent" {
            assert!(
                !allowed.contains(&"skewer-cli") && !allowed.contains(&"skewer-ui"),
                "{name}"
            );
        }
    }
    // The workspace's own manifest lists every crate of the agent.
    let workspace = std::fs::read_to_string(agent.join("../Cargo.toml")).expect("the workspace");
    for (dir, _, _) in LAYERS.iter().filter(|(d, _, _)| *d != ".") {
        assert!(
            workspace.contains(&format!("\"agent/{dir}\"")),
            "agent/{dir} in the workspace"
        );
    }
}

#[test]
fn no_file_of_the_agent_imports_one_that_imports_it_back() {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut read = 0;
    for (dir, _, _) in LAYERS {
        read += no_circle_in(&agent.join(dir).join("src"));
    }
    assert!(read > 40, "the graph was read ({read} files import others)");
}

/// Asserts that the files under `root` (a crate's `src`) import no circle; the number of files
/// that import another.
fn no_circle_in(root: &Path) -> usize {
    let root = root.to_path_buf();
    let mut all = Vec::new();
    files(&root, &root, &mut all);
    let by_module: BTreeMap<Vec<String>, PathBuf> =
        all.iter().map(|f| (module_of(f), f.clone())).collect();
    let resolve = |path: &[String]| -> Option<(PathBuf, usize)> {
        (1..=path.len())
            .rev()
            .find_map(|n| by_module.get(&path[..n]).map(|f| (f.clone(), n)))
    };
    // Each file's code (tests and comments aside), split into its re-exports (`pub use`: a
    // facade, which the file itself does not depend on) and the rest.
    let mut code: BTreeMap<PathBuf, (String, String)> = BTreeMap::new();
    for file in &all {
        let text = std::fs::read_to_string(root.join(file)).expect("a source file");
        let text = text
            .split("#[cfg(test)]\nmod tests {")
            .next()
            .unwrap_or_default();
        let (mut reexports, mut rest) = (String::new(), String::new());
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            let into = if line.starts_with("pub use ") {
                &mut reexports
            } else {
                &mut rest
            };
            into.push_str(line);
            into.push('\n');
        }
        code.insert(file.clone(), (reexports, rest));
    }
    // (file, name) → the file that defines what `file` re-exports as `name`.
    let mut reexported: BTreeMap<(PathBuf, String), PathBuf> = BTreeMap::new();
    for (file, (reexports, _)) in &code {
        for path in named_paths(reexports, &module_of(file)) {
            if let (Some(name), Some((target, _))) = (path.last(), resolve(&path)) {
                reexported.insert((file.clone(), name.clone()), target);
            }
        }
    }
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (file, (_, rest)) in &code {
        for path in named_paths(rest, &module_of(file)) {
            let Some((mut target, n)) = resolve(&path) else {
                continue;
            };
            // An item reached through a re-export is the defining file's.
            if let Some(name) = path.get(n)
                && let Some(defined) = reexported.get(&(target.clone(), name.clone()))
            {
                target = defined.clone();
            }
            if target != *file {
                graph.entry(file.clone()).or_default().insert(target);
            }
        }
    }
    // A depth-first search for a back edge, naming the circle it closes.
    fn visit(
        f: &PathBuf,
        graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        done: &mut BTreeSet<PathBuf>,
        stack: &mut Vec<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        if let Some(i) = stack.iter().position(|s| s == f) {
            return Some(stack[i..].to_vec());
        }
        if !done.insert(f.clone()) {
            return None;
        }
        stack.push(f.clone());
        for next in graph.get(f).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, done, stack) {
                return Some(circle);
            }
        }
        stack.pop();
        None
    }
    let mut circles: BTreeSet<BTreeSet<PathBuf>> = BTreeSet::new();
    for file in &all {
        if let Some(c) = visit(file, &graph, &mut BTreeSet::new(), &mut Vec::new()) {
            circles.insert(c.into_iter().collect());
        }
    }
    assert!(
        circles.is_empty(),
        "import circles in {}: {circles:#?}",
        root.display()
    );
    graph.len()
}
