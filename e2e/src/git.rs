//! Real Git servers on loopback serving bare repositories from a temporary directory (git
//! daemon, smart HTTP with optional basic auth/token/TLS, sshd), and working copies that tests
//! commit to and push.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result, bail};

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    git_with(dir, &[], args)
}

/// Runs git in `dir` with extra environment variables (like `GNUPGHOME`).
fn git_with(dir: &Path, envs: &[(&str, &Path)], args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .current_dir(dir)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .args([
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@skewer.dev",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "tag.gpgsign=false",
        ])
        .args(args)
        .output()
        .with_context(|| format!("git {args:?}"))?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A key that signs commits and tags: a fresh gpg keyring, or an SSH key (`gpg.format ssh`).
pub struct Signer {
    dir: tempfile::TempDir,
    gpg: bool,
    /// The armored OpenPGP public key, or the OpenSSH public key line.
    pub public_key: String,
    /// The OpenPGP fingerprint (hex), or the SSH key's `SHA256:` fingerprint.
    pub fingerprint: String,
}

impl Signer {
    /// An ed25519 OpenPGP key in its own `GNUPGHOME`.
    pub fn gpg() -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("gpg").tempdir_in("/tmp")?;
        let home = dir.path().display().to_string();
        let gpg = |args: &[&str]| {
            let mut all = vec!["--homedir", home.as_str(), "--batch", "--quiet"];
            all.extend_from_slice(args);
            run("gpg", &all)
        };
        gpg(&[
            "--passphrase",
            "",
            "--quick-gen-key",
            "e2e <e2e@skewer.dev>",
            "ed25519",
            "sign",
            "never",
        ])?;
        let listing = gpg(&["--with-colons", "--list-keys"])?;
        let fingerprint = listing
            .lines()
            .find_map(|l| l.strip_prefix("fpr:"))
            .map(|l| l.trim_matches(':').to_string())
            .context("gpg listed no fingerprint")?;
        let public_key = gpg(&["--armor", "--export", &fingerprint])?;
        Ok(Self {
            dir,
            gpg: true,
            public_key,
            fingerprint,
        })
    }

    /// An ed25519 SSH key.
    pub fn ssh() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let key = dir.path().join("signer").display().to_string();
        run(
            "ssh-keygen",
            &["-q", "-t", "ed25519", "-N", "", "-C", "signer", "-f", &key],
        )?;
        let public_key = std::fs::read_to_string(format!("{key}.pub"))?;
        let fingerprint = run("ssh-keygen", &["-l", "-E", "sha256", "-f", &key])?
            .split_whitespace()
            .nth(1)
            .context("ssh-keygen -l printed no fingerprint")?
            .to_string();
        Ok(Self {
            dir,
            gpg: false,
            public_key,
            fingerprint,
        })
    }

    fn git(&self, dir: &Path, args: &[&str]) -> Result<String> {
        if self.gpg {
            git_with(dir, &[("GNUPGHOME", self.dir.path())], args)
        } else {
            let key = format!(
                "user.signingkey={}",
                self.dir.path().join("signer").display()
            );
            let mut all = vec!["-c", "gpg.format=ssh", "-c", key.as_str()];
            all.extend_from_slice(args);
            git(dir, &all)
        }
    }
}

impl Drop for Signer {
    fn drop(&mut self) {
        if self.gpg {
            let _ = Command::new("gpgconf")
                .env("GNUPGHOME", self.dir.path())
                .args(["--kill", "gpg-agent"])
                .output();
        }
    }
}

/// Serves bare repositories on loopback over `git://` (git daemon) or smart HTTP
/// (`git http-backend` as a CGI script under Python's http.server).
pub struct GitServer {
    root: tempfile::TempDir,
    base_url: String,
    daemon: Child,
    ca_pem: Option<String>,
    known_hosts: Option<String>,
}

/// How [`GitServer::start_http_with`] guards its repositories.
#[derive(Debug, Default, Clone)]
pub struct HttpOptions {
    /// Username and password checked against an htpasswd file.
    pub basic: Option<(String, String)>,
    pub token: Option<String>,
    pub tls: bool,
}

/// Runs a program, failing with its stderr; returns its trimmed stdout.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("{program} {args:?}"))?;
    if !out.status.success() {
        bail!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A CA and a server certificate for 127.0.0.1 signed by it: (cert, key, CA PEM).
pub(crate) fn tls_files(dir: &Path) -> Result<(PathBuf, PathBuf, String)> {
    const SCRIPT: &str = r#"set -e
cd "$1"
key="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
openssl req -x509 $key -keyout ca.key -out ca.crt -days 2 -subj "/CN=skewer test CA" 2>/dev/null
openssl req $key -keyout tls.key -out tls.csr -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days 2 -extfile ext 2>/dev/null
"#;
    run("sh", &["-c", SCRIPT, "sh", &dir.display().to_string()])?;
    Ok((
        dir.join("tls.crt"),
        dir.join("tls.key"),
        std::fs::read_to_string(dir.join("ca.crt"))?,
    ))
}

pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts the server `spawn` starts for a port, on a free loopback port, and returns it once
/// it is the one listening there. A port found free can be taken before the server binds it
/// (by another test's server that was handed the same port): the server then exits, and a
/// check that only connected would be answered by the other server, until that one stops.
/// So the listener must be the spawned process's own; a server that exited is started again
/// on another port (five tries).
pub(crate) fn serve_on_free_port(
    mut spawn: impl FnMut(u16) -> Result<Child>,
) -> Result<(Child, u16)> {
    for _ in 0..5 {
        let port = free_port()?;
        let mut child = spawn(port)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if holds_listener(child.id(), port) {
                return Ok((child, port));
            }
            if child.try_wait()?.is_some() {
                break; // its port was taken: another one
            }
            if std::time::Instant::now() > deadline {
                stop_with_children(&mut child);
                bail!(
                    "a server (pid {}) did not listen on {port} within 10 s",
                    child.id()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    bail!("five servers in a row exited before listening: no free port stayed free")
}

/// The fields of `/proc/<pid>/stat` after the command name (`state ppid …`), if `pid` runs.
/// The name may hold spaces and parentheses, so they are read after its last ')'.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// `pid` and its descendants, from each process's parent in `/proc/<pid>/stat`.
fn family(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| {
                    let child: u32 = e.file_name().to_str()?.parse().ok()?;
                    let ppid = stat_fields(child)?.get(1)?.parse().ok()?;
                    Some((child, ppid))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut family = vec![pid];
    let mut i = 0;
    while let Some(&p) = family.get(i) {
        family.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    family
}

/// Whether process `pid` or one of its descendants (`git daemon` runs `git-daemon` as a
/// child) holds a TCP socket listening on `port`, from `/proc`: their file descriptors'
/// socket inodes against the kernel's tables of TCP sockets.
fn holds_listener(pid: u32, port: u16) -> bool {
    let inodes: std::collections::HashSet<String> = family(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_dir(format!("/proc/{p}/fd")).ok())
        .flat_map(|fds| fds.flatten())
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.path()).ok()?;
            let inode = link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_string())
        })
        .collect();
    // Columns: sl, local address (hex ip:port), remote address, state (0A: LISTEN), …, inode.
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|table| {
        std::fs::read_to_string(table).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                f.len() > 9 && f[1].ends_with(&local) && f[3] == "0A" && inodes.contains(f[9])
            })
        })
    })
}

impl GitServer {
    /// Starts the server `command` makes for a port (its output discarded) on a free one;
    /// `base_url` names its repositories on that port.
    fn spawn(
        root: tempfile::TempDir,
        mut command: impl FnMut(u16) -> Result<Command>,
        base_url: impl Fn(u16) -> String,
    ) -> Result<(Self, u16)> {
        let (daemon, port) = serve_on_free_port(|port| {
            let mut cmd = command(port)?;
            let what = cmd.get_program().to_string_lossy().into_owned();
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {what}"))
        })?;
        let server = Self {
            root,
            base_url: base_url(port),
            daemon,
            ca_pem: None,
            known_hosts: None,
        };
        Ok((server, port))
    }

    /// Starts `git daemon` on a free loopback port.
    pub fn start() -> Result<Self> {
        let root = tempfile::tempdir()?;
        let dir = root.path().to_path_buf();
        let command = |port: u16| {
            let mut cmd = Command::new("git");
            cmd.args([
                "daemon",
                "--export-all",
                "--reuseaddr",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", dir.display()))
            .arg(&dir);
            Ok(cmd)
        };
        let (server, _) = Self::spawn(root, command, |port| format!("git://127.0.0.1:{port}"))?;
        Ok(server)
    }

    /// Starts smart HTTP: `git http-backend` behind `e2e/git-http.py`, without auth.
    pub fn start_http() -> Result<Self> {
        Self::start_http_with(&HttpOptions::default())
    }

    /// Starts smart HTTP with basic auth (an htpasswd file), a bearer token and/or TLS from a
    /// throwaway CA (its PEM in [`GitServer::ca_pem`]).
    pub fn start_http_with(options: &HttpOptions) -> Result<Self> {
        let root = tempfile::tempdir()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("git-http.py");
        // The same on every port tried; only `--port` is added.
        let mut args = vec![
            script.display().to_string(),
            format!("--root={}", root.path().display()),
        ];
        if let Some((user, password)) = &options.basic {
            // The `{SHA}` scheme of `htpasswd -s`: base64 of the password's SHA-1.
            let digest = run(
                "python3",
                &[
                    "-c",
                    "import base64,hashlib,sys;print(base64.b64encode(hashlib.sha1(sys.argv[1].encode()).digest()).decode())",
                    password,
                ],
            )?;
            let htpasswd = root.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{user}:{{SHA}}{digest}\n"))?;
            args.push(format!("--htpasswd={}", htpasswd.display()));
        }
        if let Some(token) = &options.token {
            let file = root.path().join("token");
            std::fs::write(&file, token)?;
            args.push(format!("--token-file={}", file.display()));
        }
        let mut ca_pem = None;
        let scheme = if options.tls {
            let (cert, key, ca) = tls_files(root.path())?;
            args.push(format!("--cert={}", cert.display()));
            args.push(format!("--key={}", key.display()));
            ca_pem = Some(ca);
            "https"
        } else {
            "http"
        };
        let command = |port: u16| {
            let mut cmd = Command::new("python3");
            cmd.args(&args).arg(format!("--port={port}"));
            Ok(cmd)
        };
        let (mut server, _) =
            Self::spawn(root, command, |port| format!("{scheme}://127.0.0.1:{port}"))?;
        server.ca_pem = ca_pem;
        Ok(server)
    }

    /// Starts `sshd` on loopback, letting in only `authorized_key` (an OpenSSH public key
    /// line); repositories are reached as `ssh://<user>@127.0.0.1:<port>/<absolute path>`.
    pub fn start_ssh(authorized_key: &str) -> Result<Self> {
        let root = tempfile::tempdir()?;
        let dir = root.path().join("sshd");
        std::fs::create_dir_all(&dir)?;
        let host_key = dir.join("host_ed25519");
        run(
            "ssh-keygen",
            &[
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-f",
                &host_key.display().to_string(),
            ],
        )?;
        std::fs::write(dir.join("authorized_keys"), authorized_key)?;
        // sshd refuses to start without its privilege separation directory.
        std::fs::create_dir_all("/run/sshd")?;
        let config = dir.join("sshd_config");
        let command = |port: u16| {
            std::fs::write(
                &config,
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
                     PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
                     PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile none\n",
                    host_key.display(),
                    dir.join("authorized_keys").display()
                ),
            )?;
            let mut cmd = Command::new("/usr/sbin/sshd");
            cmd.arg("-D").arg("-f").arg(&config);
            Ok(cmd)
        };
        let public = std::fs::read_to_string(dir.join("host_ed25519.pub"))?;
        let key = public
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        let user = run("id", &["-un"])?;
        let path = root.path().display().to_string();
        let (mut server, port) = Self::spawn(root, command, |port| {
            format!("ssh://{user}@127.0.0.1:{port}{path}")
        })?;
        server.known_hosts = Some(format!("[127.0.0.1]:{port} {key}\n"));
        Ok(server)
    }

    /// The PEM of the CA that signed an HTTPS server's certificate.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// A `known_hosts` line for an SSH server's host key.
    pub fn known_hosts(&self) -> Option<&str> {
        self.known_hosts.as_deref()
    }

    /// Creates an empty repository `name` and a working copy to commit from.
    /// The requests the smart HTTP server logged whose line contains `needle` (`METHOD PATH
    /// COMMAND`, COMMAND a protocol v2 command such as `fetch`, else `-`).
    pub fn requests(&self, needle: &str) -> usize {
        std::fs::read_to_string(self.root.path().join("access.log"))
            .map(|log| log.lines().filter(|l| l.contains(needle)).count())
            .unwrap_or(0)
    }

    /// An empty bare repository that accepts pushes over HTTP; returns its URL and its path.
    pub fn empty_repo(&self, name: &str) -> Result<(String, PathBuf)> {
        let bare = self.root.path().join(format!("{name}.git"));
        std::fs::create_dir_all(&bare)?;
        git(&bare, &["init", "-q", "--bare", "--initial-branch=main"])?;
        git(&bare, &["config", "http.receivepack", "true"])?;
        Ok((format!("{}/{name}.git", self.base_url), bare))
    }

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
        stop_with_children(&mut self.daemon);
    }
}

/// Stops `child` and every process below it: `git daemon` runs `git-daemon` as its child
/// (and it one per connection), which a kill of the parent alone leaves running.
pub(crate) fn stop_with_children(child: &mut Child) {
    for pid in family(child.id()).into_iter().skip(1).rev() {
        let _ = Command::new("kill")
            .arg(pid.to_string())
            .stderr(Stdio::null())
            .status();
    }
    let _ = child.kill();
    let _ = child.wait();
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

    /// Commits everything signed by `signer` and pushes `main`; returns the commit id.
    pub fn commit_signed(&self, message: &str, signer: &Signer) -> Result<String> {
        git(self.work.path(), &["add", "-A"])?;
        signer.git(
            self.work.path(),
            &["commit", "-q", "-S", "--allow-empty", "-m", message],
        )?;
        self.push_main()
    }

    /// Creates a tag signed by `signer` at HEAD and pushes it.
    pub fn tag_signed(&self, name: &str, signer: &Signer) -> Result<()> {
        signer.git(self.work.path(), &["tag", "-s", name, "-m", name])?;
        git(
            self.work.path(),
            &["push", "-q", "origin", &format!("refs/tags/{name}")],
        )?;
        Ok(())
    }

    /// Creates a lightweight tag at HEAD and pushes it.
    pub fn tag_lightweight(&self, name: &str) -> Result<()> {
        git(self.work.path(), &["tag", name])?;
        git(
            self.work.path(),
            &["push", "-q", "origin", &format!("refs/tags/{name}")],
        )?;
        Ok(())
    }

    fn push_main(&self) -> Result<String> {
        git(
            self.work.path(),
            &["push", "-q", "-f", "origin", "HEAD:refs/heads/main"],
        )?;
        git(self.work.path(), &["rev-parse", "HEAD"])
    }

    /// The commit the work tree's HEAD is at.
    pub fn head(&self) -> Result<String> {
        git(self.work.path(), &["rev-parse", "HEAD"])
    }

    /// Commits everything and pushes `main`; returns the commit id.
    pub fn commit(&self, message: &str) -> Result<String> {
        git(self.work.path(), &["add", "-A"])?;
        git(
            self.work.path(),
            &["commit", "-q", "--allow-empty", "-m", message],
        )?;
        self.push_main()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race the harness lost once in CI: the free port is taken (here by the test itself)
    /// before the server binds it. The server exits; a check that only connected would have
    /// been answered by the other listener. The helper must start the server on another port.
    #[test]
    fn a_server_whose_port_was_taken_is_started_on_another() -> Result<()> {
        let mut taken = None;
        let (mut child, port) = serve_on_free_port(|port| {
            if taken.is_none() {
                taken = Some((port, std::net::TcpListener::bind(("127.0.0.1", port))?));
            }
            Command::new("python3")
                .args([
                    "-m",
                    "http.server",
                    "--bind",
                    "127.0.0.1",
                    &port.to_string(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("python3")
        })?;
        let (stolen, _listener) = taken.context("the first port was taken")?;
        let served = holds_listener(child.id(), port);
        let _ = child.kill();
        let _ = child.wait();
        assert_ne!(port, stolen, "started on the stolen port");
        assert!(served, "the server itself listens on {port}");
        Ok(())
    }

    /// `git daemon` serves from a child process, `git-daemon`; dropping the server must end
    /// that one too, not leave it listening for the rest of the machine's life.
    #[test]
    fn a_dropped_git_daemon_leaves_no_process_behind() -> Result<()> {
        let server = GitServer::start()?;
        let family = family(server.daemon.id());
        assert!(
            family.len() > 1,
            "git daemon serves from a child: {family:?}"
        );
        drop(server);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let alive: Vec<&u32> = family
                .iter()
                // A zombie (state Z) has ended; only its parent's wait is missing.
                .filter(|p| stat_fields(**p).is_some_and(|f| f.first().is_some_and(|s| s != "Z")))
                .collect();
            if alive.is_empty() {
                return Ok(());
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still running 10 s after the drop: {alive:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
