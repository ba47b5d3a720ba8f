//! A real git daemon on loopback serving bare repositories from a temporary directory, and
//! working copies that tests commit to and push.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result, bail};

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@skewer.dev",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .with_context(|| format!("git {args:?}"))?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Serves bare repositories on loopback over `git://` (git daemon) or smart HTTP
/// (`git http-backend` as a CGI script under Python's http.server).
pub struct GitServer {
    root: tempfile::TempDir,
    base_url: String,
    daemon: Child,
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn wait_listening(port: u16, what: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if std::time::Instant::now() > deadline {
            bail!("{what} did not listen on {port}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

impl GitServer {
    /// Starts `git daemon` on a free loopback port.
    pub fn start() -> Result<Self> {
        let root = tempfile::tempdir()?;
        let port = free_port()?;
        let daemon = Command::new("git")
            .args([
                "daemon",
                "--export-all",
                "--reuseaddr",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", root.path().display()))
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting git daemon")?;
        wait_listening(port, "git daemon")?;
        Ok(Self {
            root,
            base_url: format!("git://127.0.0.1:{port}"),
            daemon,
        })
    }

    /// Starts smart HTTP: `git http-backend` as a CGI script.
    pub fn start_http() -> Result<Self> {
        let root = tempfile::tempdir()?;
        let www = root.path().join("www");
        let cgi = www.join("cgi-bin");
        std::fs::create_dir_all(&cgi)?;
        // The CGI server may run scripts as nobody: trust every directory explicitly.
        let script = format!(
            "#!/bin/sh\nexport GIT_PROJECT_ROOT='{}' GIT_HTTP_EXPORT_ALL=1 GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'\nexec git http-backend\n",
            root.path().display()
        );
        let path = cgi.join("git");
        std::fs::write(&path, script)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))?;
        let port = free_port()?;
        let daemon = Command::new("python3")
            .args(["-m", "http.server", "--cgi", "--bind", "127.0.0.1"])
            .arg(port.to_string())
            .current_dir(&www)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting python3 -m http.server --cgi")?;
        wait_listening(port, "http.server")?;
        Ok(Self {
            root,
            base_url: format!("http://127.0.0.1:{port}/cgi-bin/git"),
            daemon,
        })
    }

    /// Creates an empty repository `name` and a working copy to commit from.
    pub fn repo(&self, name: &str) -> Result<Repo> {
        let bare = self.root.path().join(format!("{name}.git"));
        std::fs::create_dir_all(&bare)?;
        git(&bare, &["init", "-q", "--bare"])?;
        let work = tempfile::tempdir()?;
        git(work.path(), &["init", "-q"])?;
        git(
            work.path(),
            &["remote", "add", "origin", &bare.display().to_string()],
        )?;
        // Readable by the CGI user, and served the way `git clone` expects.
        git(&bare, &["config", "http.receivepack", "false"])?;
        let file_url = format!("file://{}", bare.display());
        Ok(Repo {
            url: format!("{}/{name}.git", self.base_url),
            file_url,
            work,
            bare,
        })
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
    /// The same repository as a `file://` URL.
    pub file_url: String,
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

    /// Creates an annotated tag at HEAD and pushes it.
    pub fn tag(&self, name: &str) -> Result<()> {
        git(self.work.path(), &["tag", "-a", name, "-m", name])?;
        git(
            self.work.path(),
            &["push", "-q", "origin", &format!("refs/tags/{name}")],
        )?;
        Ok(())
    }

    /// Commits everything and pushes `main`; returns the commit id.
    pub fn commit(&self, message: &str) -> Result<String> {
        git(self.work.path(), &["add", "-A"])?;
        git(
            self.work.path(),
            &["commit", "-q", "--allow-empty", "-m", message],
        )?;
        git(
            self.work.path(),
            &["push", "-q", "-f", "origin", "HEAD:refs/heads/main"],
        )?;
        git(self.work.path(), &["rev-parse", "HEAD"])
    }
}
