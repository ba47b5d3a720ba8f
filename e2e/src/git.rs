//! A real git daemon on loopback serving bare repositories from a temporary directory, and
//! working copies that tests commit to and push.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result, bail};

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=e2e", "-c", "user.email=e2e@skewer.dev", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .output()
        .with_context(|| format!("git {args:?}"))?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

pub struct GitServer {
    root: tempfile::TempDir,
    port: u16,
    daemon: Child,
}

impl GitServer {
    /// Starts `git daemon` on a free loopback port.
    pub fn start() -> Result<Self> {
        let root = tempfile::tempdir()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let daemon = Command::new("git")
            .args(["daemon", "--export-all", "--reuseaddr", "--listen=127.0.0.1"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", root.path().display()))
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting git daemon")?;
        // Ready when it accepts connections.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if std::time::Instant::now() > deadline {
                bail!("git daemon did not listen on {port}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(Self { root, port, daemon })
    }

    /// Creates an empty repository `name` and a working copy to commit from.
    pub fn repo(&self, name: &str) -> Result<Repo> {
        let bare = self.root.path().join(format!("{name}.git"));
        std::fs::create_dir_all(&bare)?;
        git(&bare, &["init", "-q", "--bare"])?;
        let work = tempfile::tempdir()?;
        git(work.path(), &["init", "-q"])?;
        git(work.path(), &["remote", "add", "origin", &bare.display().to_string()])?;
        Ok(Repo { url: format!("git://127.0.0.1:{}/{name}.git", self.port), work, bare })
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

pub struct Repo {
    pub url: String,
    pub work: tempfile::TempDir,
    pub bare: PathBuf,
}

impl Repo {
    pub fn write(&self, path: &str, content: &str) -> Result<()> {
        let p = self.work.path().join(path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(p, content)?;
        Ok(())
    }

    pub fn remove(&self, path: &str) -> Result<()> {
        std::fs::remove_file(self.work.path().join(path))?;
        Ok(())
    }

    /// Commits everything and pushes `main`; returns the commit id.
    pub fn commit(&self, message: &str) -> Result<String> {
        git(self.work.path(), &["add", "-A"])?;
        git(self.work.path(), &["commit", "-q", "--allow-empty", "-m", message])?;
        git(self.work.path(), &["push", "-q", "-f", "origin", "HEAD:refs/heads/main"])?;
        git(self.work.path(), &["rev-parse", "HEAD"])
    }
}
