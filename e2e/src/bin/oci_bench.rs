//! OCI figures (issue 10): push of a directory of N files (default 5,000, 50 MB in all, as
//! incompressible as real content gets worst), its pull and extraction by `skewer pull
//! artifact` (time, peak RSS) beside `skopeo copy` of the same artifact to a local directory,
//! and the cost of an interval at which the tag did not move (one HEAD request).
//! Run: `SKEWER_BENCH=oci_bench bash e2e/bench.sh --files 5000 --megabytes 50 --runs 3`.

use std::time::{Duration, Instant};

use anyhow::Result;
use skewer_e2e::measure::{arg, median, ms, timed};
use skewer_e2e::registry::Registry;
use skewer_e2e::skewer_bin;
use skewer_sources::oci::registry::{Access, Registry as Client, Repository};
use skewer_sources::oci::{OciRef, resolve};

/// Pseudo-random bytes (xorshift): content gzip cannot shrink, so the artifact is its size.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let files = arg("--files", 5000);
    let megabytes = arg("--megabytes", 50);
    let runs = arg("--runs", 3).max(1);
    let registry = Registry::start()?;
    let dir = tempfile::tempdir()?;
    let each = (megabytes << 20) / files.max(1);
    for i in 0..files {
        let sub = dir.path().join(format!("d{:02}", i % 50));
        std::fs::create_dir_all(&sub)?;
        std::fs::write(sub.join(format!("f{i}.yaml")), noise(i as u64, each))?;
    }
    let skewer = skewer_bin().display().to_string();
    let path = dir.path().display().to_string();
    let address = format!("oci://{}/bench/app:v1", registry.host);

    let mut pushes = Vec::new();
    for run in 0..runs {
        // A new revision each run, so that every push uploads the layer.
        let revision = format!("main@sha1:{run:040}");
        let started = Instant::now();
        let (_, _) = timed(
            &skewer,
            &[
                "push",
                "artifact",
                &address,
                "--insecure",
                "--path",
                &path,
                "--source",
                "bench",
                "--revision",
                &revision,
            ],
        )?;
        pushes.push(started.elapsed());
    }

    let (mut pulls, mut pull_rss, mut copies, mut copy_rss) = (Vec::new(), 0, Vec::new(), 0);
    let (mut reads, mut read_rss) = (Vec::new(), 0);
    for _ in 0..runs {
        let (t, rss) = timed(&skewer, &["pull", "artifact", &address, "--insecure"])?;
        reads.push(t);
        read_rss = read_rss.max(rss);
        let out = tempfile::tempdir()?;
        let target = out.path().join("files").display().to_string();
        let (t, rss) = timed(
            &skewer,
            &[
                "pull",
                "artifact",
                &address,
                "--insecure",
                "--output",
                &target,
            ],
        )?;
        pulls.push(t);
        pull_rss = pull_rss.max(rss);
        let layout = out.path().join("skopeo").display().to_string();
        let (t, rss) = timed(
            "skopeo",
            &[
                "copy",
                "--quiet",
                "--src-tls-verify=false",
                &format!("docker://{}/bench/app:v1", registry.host),
                &format!("dir:{layout}"),
            ],
        )?;
        copies.push(t);
        copy_rss = copy_rss.max(rss);
    }

    let rt = tokio::runtime::Runtime::new()?;
    let unchanged = rt.block_on(async {
        let client = Client::new(&Access {
            login: None,
            insecure: true,
        })?;
        let repo = Repository::parse(&format!("oci://{}/bench/app", registry.host))?;
        let reference = OciRef {
            tag: Some("v1".into()),
            ..Default::default()
        };
        resolve(&client, &repo, &reference).await?;
        let mut times = Vec::new();
        for _ in 0..100 {
            let started = Instant::now();
            resolve(&client, &repo, &reference).await?;
            times.push(started.elapsed());
        }
        Ok::<Duration, anyhow::Error>(median(times))
    })?;

    let size: u64 = walk_size(dir.path())?;
    println!(
        "OCI artifact: {files} files, {:.1} MB, median of {runs} runs, registry on loopback",
        size as f64 / 1e6
    );
    println!("| what | time | peak RSS |");
    println!("|---|---|---|");
    println!(
        "| `skewer push artifact` (build + push) | {} | |",
        ms(median(pushes))
    );
    println!(
        "| `skewer pull artifact` (pull, digest, safe read in memory: an OCIRepository's work) | {} | {} MiB |",
        ms(median(reads)),
        read_rss / 1024
    );
    println!(
        "| `skewer pull artifact -o DIR` (the same, then every file written) | {} | {} MiB |",
        ms(median(pulls)),
        pull_rss / 1024
    );
    println!(
        "| `skopeo copy` to a local dir (no extraction) | {} | {} MiB |",
        ms(median(copies)),
        copy_rss / 1024
    );
    println!(
        "| unchanged tag at an interval (one HEAD) | {} | |",
        ms(unchanged)
    );
    Ok(())
}

fn walk_size(dir: &std::path::Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        total += if entry.file_type()?.is_dir() {
            walk_size(&entry.path())?
        } else {
            entry.metadata()?.len()
        };
    }
    Ok(total)
}
