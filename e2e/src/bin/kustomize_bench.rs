//! skewer's native kustomize against `kubectl kustomize`, on the same trees in one run: a small
//! overlay (from the conformance corpus), and a generated tree of 1,000 objects across 20 bases
//! with overlays, patches of both kinds, images and generators. Prints a Markdown table.
//!
//!     cargo run --release -p skewer-e2e --bin kustomize_bench -- [--runs 10]
//!
//! skewer is measured twice: in process (the build a reconcile does, files already in memory),
//! and as the `skewer build` program (a process, reading the files, like kubectl).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use skewer_appliers::kustomize;
use skewer_e2e::measure::{arg, median, ms, timed};
use skewer_e2e::{root, skewer_bin, source_files};

const BASES: usize = 20;
/// ConfigMaps per base, besides its Deployment, Service and generated ConfigMap: 50 objects.
const CONFIGMAPS: usize = 47;

/// Writes the generated tree under `dir`; returns the number of objects it builds.
fn generate(dir: &Path) -> Result<usize> {
    let write = |path: &str, text: &str| -> Result<()> {
        let full = dir.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(full, text)?;
        Ok(())
    };
    let mut top = String::from(
        "namespace: bench\ncommonLabels: {app.kubernetes.io/part-of: bench}\ncommonAnnotations: {owner: platform}\nresources:\n",
    );
    for b in 0..BASES {
        write(
            &format!("bases/b{b:02}/kustomization.yaml"),
            "resources: [deploy.yaml, svc.yaml, cms.yaml]\nconfigMapGenerator:\n- name: settings\n  files: [app.properties]\n  literals: [mode=fast]\n",
        )?;
        write(
            &format!("bases/b{b:02}/app.properties"),
            &format!("base={b}\nthreads=8\n"),
        )?;
        write(
            &format!("bases/b{b:02}/deploy.yaml"),
            "apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  replicas: 1
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: app
        image: example/app:1.0
        env: [{name: LEVEL, value: info}]
        volumeMounts: [{name: settings, mountPath: /etc/app}]
      - name: proxy
        image: example/proxy:2.0
      volumes:
      - name: settings
        configMap: {name: settings}
",
        )?;
        write(
            &format!("bases/b{b:02}/svc.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: app}\nspec:\n  selector: {app: app}\n  ports: [{port: 80, targetPort: 8080}]\n",
        )?;
        let cms: String = (0..CONFIGMAPS)
            .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i:02}}}\ndata: {{index: \"{i}\", payload: \"{}\"}}\n", "x".repeat(64)))
            .collect();
        write(&format!("bases/b{b:02}/cms.yaml"), &cms)?;
        write(
            &format!("overlays/o{b:02}/kustomization.yaml"),
            &format!(
                "namePrefix: o{b:02}-
resources: [../../bases/b{b:02}]
images:
- {{name: example/app, newTag: \"1.{b}\"}}
patches:
- patch: |
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: app}}
    spec:
      template:
        spec:
          containers:
          - name: app
            env: [{{name: LEVEL, value: debug}}]
- target: {{kind: Deployment, name: app}}
  patch: |
    - {{op: replace, path: /spec/replicas, value: 3}}
"
            ),
        )?;
        top.push_str(&format!("- overlays/o{b:02}\n"));
    }
    write("kustomization.yaml", &top)?;
    Ok(BASES * (CONFIGMAPS + 3))
}

struct Row {
    tree: String,
    objects: usize,
    in_process: Duration,
    skewer: (Duration, u64),
    kubectl: (Duration, u64),
}

fn measure(label: &str, root_dir: &Path, path: &str, runs: usize) -> Result<Row> {
    let files = source_files(root_dir)?;
    let built = kustomize::render(&files, path)?;
    let target = root_dir.join(path);
    let target = target.to_string_lossy();
    let root_arg = root_dir.to_string_lossy();
    let bin = skewer_bin().to_string_lossy().into_owned();
    let (mut inproc, mut ours, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut our_rss, mut their_rss) = (0, 0);
    for _ in 0..runs {
        let started = Instant::now();
        let n = kustomize::render(&files, path)?.len();
        inproc.push(started.elapsed());
        ensure!(n == built.len());
        let (t, rss) = timed(&bin, &["build", &target, "--source-root", &root_arg])?;
        ours.push(t);
        our_rss = our_rss.max(rss);
        let (t, rss) = timed("kubectl", &["kustomize", &target])?;
        theirs.push(t);
        their_rss = their_rss.max(rss);
    }
    Ok(Row {
        tree: label.into(),
        objects: built.len(),
        in_process: median(inproc),
        skewer: (median(ours), our_rss),
        kubectl: (median(theirs), their_rss),
    })
}

fn main() -> Result<()> {
    let runs = arg("--runs", 10);
    let generated = tempfile::tempdir()?;
    let objects = generate(generated.path())?;
    let corpus = root().join("tests/kustomize/overlays");
    let rows = [
        measure(
            "small overlay (base + overlay, generator, patches)",
            &corpus,
            "overlays/dev",
            runs,
        )?,
        measure(
            &format!("generated: {BASES} bases × overlays, patches, generators"),
            generated.path(),
            "",
            runs,
        )?,
    ];
    ensure!(
        rows[1].objects == objects,
        "built {} objects, expected {objects}",
        rows[1].objects
    );
    println!(
        "| tree | objects | skewer in process | `skewer build` | `kubectl kustomize` | kubectl / skewer build | peak RSS skewer build / kubectl |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {:.1}× ({:.0}× in process) | {:.1} MiB / {:.1} MiB |",
            r.tree,
            r.objects,
            ms(r.in_process),
            ms(r.skewer.0),
            ms(r.kubectl.0),
            r.kubectl.0.as_secs_f64() / r.skewer.0.as_secs_f64(),
            r.kubectl.0.as_secs_f64() / r.in_process.as_secs_f64().max(1e-9),
            r.skewer.1 as f64 / 1024.0,
            r.kubectl.1 as f64 / 1024.0,
        );
    }
    eprintln!("medians of {runs} runs, taking turns");
    Ok(())
}
