//! Git source figures against the git program, over `git daemon` on loopback:
//! the cost of checking an unchanged ref, and a shallow clone of a large repository
//! (time and peak RSS).
//!
//!     cargo run --release -p skewer-e2e --bin git_bench -- [--files 10000] [--commits 1000] [--runs 10]
//!
//! `git_bench --clone-once <url> <dir>` is the measured child: a fresh shallow fetch of `main`,
//! its tree read into memory, as the GitRepository reconciler does.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use skewer_e2e::GitServer;
use skewer_e2e::measure::{arg, median, ms, timed};
use skewer_sources::{Access, GitFetcher, GitRefSpec, Store};

/// Writes `commits` commits with git fast-import: the first adds `files` manifests, each later
/// one changes ten of them.
fn generate(bare: &std::path::Path, files: usize, commits: usize) -> Result<()> {
    let mut child = Command::new("git")
        .current_dir(bare)
        .args(["fast-import", "--quiet"])
        .stdin(Stdio::piped())
        .spawn()
        .context("git fast-import")?;
    let mut input = std::io::BufWriter::new(child.stdin.take().context("stdin")?);
    let file = |i: usize, rev: usize| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:05}\n  namespace: bench\ndata:\n  index: \"{i}\"\n  revision: \"{rev}\"\n  payload: \"{}\"\n",
            "x".repeat(64)
        )
    };
    for c in 0..commits {
        let message = format!("commit {c}");
        writeln!(
            input,
            "commit refs/heads/main\ncommitter bench <bench@skewer.dev> {} +0000\ndata {}\n{message}",
            1_700_000_000 + c,
            message.len()
        )?;
        let changed: Vec<usize> = if c == 0 {
            (0..files).collect()
        } else {
            (0..10).map(|k| (c * 10 + k) % files).collect()
        };
        for i in changed {
            let body = file(i, c);
            writeln!(
                input,
                "M 100644 inline apps/group-{:03}/cm-{i:05}.yaml\ndata {}\n{body}",
                i / 100,
                body.len()
            )?;
        }
        writeln!(input)?;
    }
    drop(input);
    if !child.wait()?.success() {
        bail!("git fast-import failed");
    }
    let ok = Command::new("git")
        .current_dir(bare)
        .args(["symbolic-ref", "HEAD", "refs/heads/main"])
        .status()?;
    if !ok.success() {
        bail!("git symbolic-ref failed");
    }
    Ok(())
}

fn clone_once(url: &str, dir: &str) -> Result<()> {
    let git = GitFetcher::new(dir);
    let access = Access::default();
    let resolved = GitRefSpec::default().resolve(&git.list_remote("k", url, &access)?)?;
    let files = git.fetch("k", url, &resolved, &access)?;
    println!("{} files", files.len());
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--clone-once") {
        let (url, dir) = (
            args.get(i + 1).context("url")?,
            args.get(i + 2).context("dir")?,
        );
        return clone_once(url, dir);
    }
    let files = arg("--files", 10_000);
    let commits = arg("--commits", 1_000);
    let runs = arg("--runs", 10);
    let server = GitServer::start()?;
    let repo = server.repo("large")?;
    let started = Instant::now();
    generate(&repo.bare, files, commits)?;
    eprintln!(
        "generated {files} files, {commits} commits in {:.1?}",
        started.elapsed()
    );
    let url = repo.url.clone();
    let work = tempfile::tempdir()?;
    let path = |name: &str| work.path().join(name).display().to_string();
    let me = std::env::current_exe()?.display().to_string();

    // Shallow clones, alternating programs, each into a fresh directory.
    let (mut ours, mut ours_rss, mut git_full, mut git_rss, mut git_bare) =
        (vec![], vec![], vec![], vec![], vec![]);
    for r in 0..runs {
        let (t, rss) = timed(&me, &["--clone-once", &url, &path(&format!("ours-{r}"))])?;
        ours.push(t);
        ours_rss.push(rss);
        let (t, rss) = timed(
            "git",
            &[
                "clone",
                "-q",
                "--depth",
                "1",
                &url,
                &path(&format!("git-{r}")),
            ],
        )?;
        git_full.push(t);
        git_rss.push(rss);
        let (t, _) = timed(
            "git",
            &[
                "clone",
                "-q",
                "--bare",
                "--depth",
                "1",
                &url,
                &path(&format!("bare-{r}")),
            ],
        )?;
        git_bare.push(t);
    }

    // The artifact of that tree: reproducible tar.gz and its sha256.
    let git = GitFetcher::new(path("warm"));
    let access = Access::default();
    let resolved = GitRefSpec::default().resolve(&git.list_remote("k", &url, &access)?)?;
    let tree = git.fetch("k", &url, &resolved, &access)?;
    let store = Store::new(path("artifacts"));
    let mut artifact = vec![];
    for _ in 0..runs {
        let t = Instant::now();
        store.put("k", &resolved.revision, &tree)?;
        artifact.push(t.elapsed());
    }

    // An unchanged ref: skewer lists refs (one round trip) and stops; git fetches.
    let mut list = vec![];
    for _ in 0..runs {
        let t = Instant::now();
        let refs = git.list_remote("k", &url, &access)?;
        let now = GitRefSpec::default().resolve(&refs)?;
        list.push(t.elapsed());
        if now.commit != resolved.commit {
            bail!("the ref moved");
        }
    }
    let mut fetch = vec![];
    for _ in 0..runs {
        let (t, _) = timed("git", &["-C", &path("git-0"), "fetch", "-q", "origin"])?;
        fetch.push(t);
    }

    let kib = |v: Vec<u64>| format!("{:.1} MiB", *v.iter().max().unwrap_or(&0) as f64 / 1024.0);
    println!("\n{files} files, {commits} commits, git daemon on loopback, medians of {runs}\n");
    println!("| operation | skewer | git program | ratio |");
    println!("|---|---|---|---|");
    let (o, g) = (median(ours), median(git_full));
    println!(
        "| shallow clone (depth 1) | {} | {} (`git clone --depth 1`) | {:.2}x |",
        ms(o),
        ms(g),
        o.as_secs_f64() / g.as_secs_f64()
    );
    let b = median(git_bare);
    println!(
        "| shallow clone, no checkout | {} | {} (`git clone --bare --depth 1`) | {:.2}x |",
        ms(o),
        ms(b),
        o.as_secs_f64() / b.as_secs_f64()
    );
    println!(
        "| peak RSS of that clone | {} | {} | |",
        kib(ours_rss),
        kib(git_rss)
    );
    println!(
        "| artifact (tar.gz + sha256) | {} | | |",
        ms(median(artifact))
    );
    let (l, f) = (median(list), median(fetch));
    println!(
        "| unchanged ref | {} (ref listing) | {} (`git fetch`) | {:.2}x |",
        ms(l),
        ms(f),
        l.as_secs_f64() / f.as_secs_f64()
    );
    Ok(())
}
