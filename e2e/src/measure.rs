//! What the benchmark binaries share: their command line, medians, and timing a child process
//! (wall time and peak memory, as GNU time reports it).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

/// The number after flag `name` on the command line, or `default`.
pub fn arg(name: &str, default: usize) -> usize {
    std::env::args()
        .skip_while(|a| a != name)
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median of some durations (the upper one of an even count).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The `p` quantile (0 to 1) of some durations, the nearest one by rank; zero for none.
pub fn percentile(v: &[Duration], p: f64) -> Duration {
    let mut sorted = v.to_vec();
    sorted.sort();
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Runs a command under GNU time: (wall time, peak RSS in KiB).
pub fn timed(program: &str, args: &[&str]) -> Result<(Duration, u64)> {
    let report = tempfile::NamedTempFile::new()?;
    let started = Instant::now();
    let status = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(report.path())
        .arg(program)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("{program} {args:?}"))?;
    let elapsed = started.elapsed();
    if !status.success() {
        bail!("{program} {args:?} failed");
    }
    let rss = std::fs::read_to_string(report.path())?
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .context("GNU time printed no RSS")?;
    Ok((elapsed, rss))
}

/// A memory figure of process `pid` from `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn memory_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .trim_end_matches(" kB")
            .trim()
            .parse()
            .ok()
    })
}

/// Requests by user `skewer` in the hub's audit log so far: `(Lease requests, all others)`.
/// Leases are a fixed cost (leader election, or shards: a list and the renewals every quarter
/// of `--lease-duration`, which the test harness shortens), so figures count them apart.
pub fn skewer_requests() -> Result<(usize, usize)> {
    let log = std::fs::read_to_string(crate::hub().with_file_name("audit.log"))?;
    let mine = log.lines().filter(|l| l.contains(r#""username":"skewer""#));
    Ok(mine.fold((0, 0), |(leases, others), l| {
        if l.contains(r#""resource":"leases""#) {
            (leases + 1, others)
        } else {
            (leases, others + 1)
        }
    }))
}
