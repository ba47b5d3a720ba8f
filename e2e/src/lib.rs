//! The end-to-end harness: a real API server (started by `e2e/cluster/up.sh`), a real git
//! daemon on loopback, and the real `skewer` binary, one process per test, each test in its
//! own namespace so tests run in parallel without seeing each other.

pub mod browser;
pub mod git;
pub mod hooks;
pub mod hostapi;
pub mod measure;
pub mod objects;
pub mod phases;
pub mod proxy;
pub mod registry;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::time::{Instant, sleep};

pub use git::{GitServer, HttpOptions, Repo, Signer};
pub use proxy::Proxy;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every file under `dir`, paths relative to it, as a source artifact holds them.
pub fn source_files(dir: &Path) -> Result<Vec<skewer_appliers::load::SourceFile>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(skewer_appliers::load::SourceFile {
                    path: path.strip_prefix(dir)?.to_string_lossy().replace('\\', "/"),
                    data: std::fs::read(&path)?,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Starts (or reuses) the local cluster `name` and returns its kubeconfig path.
pub fn cluster(name: &str) -> Result<PathBuf> {
    let out = run(Command::new("bash")
        .arg(root().join("e2e/cluster/up.sh"))
        .arg(name))?;
    Ok(PathBuf::from(out.lines().last().unwrap_or_default().trim()))
}

/// Stops the API server of cluster `name` and starts it again on the same port, with the same
/// credentials and data (its etcd keeps running): an API server outage and recovery.
pub fn restart_cluster(name: &str) -> Result<PathBuf> {
    let kubeconfig = cluster(name)?;
    let state = kubeconfig.parent().context("state directory")?;
    let port = std::fs::read_to_string(state.join("port"))?;
    run(Command::new("bash")
        .arg(root().join("e2e/cluster/down.sh"))
        .arg(name))?;
    let out = run(Command::new("bash")
        .arg(root().join("e2e/cluster/up.sh"))
        .arg(name)
        .arg(port.trim()))?;
    Ok(PathBuf::from(out.lines().last().unwrap_or_default().trim()))
}

/// Stops the API server of cluster `name` for `away`, then starts it again on the same port
/// with the same credentials and data: an outage as long as the test says.
pub fn outage(name: &str, away: std::time::Duration) -> Result<PathBuf> {
    let kubeconfig = cluster(name)?;
    let state = kubeconfig.parent().context("state directory")?;
    let port = std::fs::read_to_string(state.join("port"))?;
    stop_cluster(name)?;
    // The outage itself: how long the API server is away is what the test is about.
    std::thread::sleep(away);
    let out = run(Command::new("bash")
        .arg(root().join("e2e/cluster/up.sh"))
        .arg(name)
        .arg(port.trim()))?;
    Ok(PathBuf::from(out.lines().last().unwrap_or_default().trim()))
}

/// Stops the API server of cluster `name`.
pub fn stop_cluster(name: &str) -> Result<()> {
    run(Command::new("bash")
        .arg(root().join("e2e/cluster/down.sh"))
        .arg(name))
    .map(|_| ())
}

/// The `server` URL of a kubeconfig.
pub fn server_url(kubeconfig: &Path) -> Result<String> {
    Ok(format!("https://{}", server_addr(kubeconfig)?))
}

/// The `certificate-authority-data` (base64 of PEM) of a kubeconfig.
pub fn server_ca(kubeconfig: &Path) -> Result<String> {
    let text = std::fs::read_to_string(kubeconfig)?;
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix("certificate-authority-data: "))
        .map(|s| s.trim().to_string())
        .context("no certificate-authority-data in kubeconfig")
}

/// A client certificate and key (PEM) for user `cn` in group `group` (when given), signed by
/// the client CA of the cluster of `kubeconfig` (see `e2e/cluster/up.sh`).
pub fn client_cert(kubeconfig: &Path, cn: &str, group: Option<&str>) -> Result<(String, String)> {
    let state = kubeconfig.parent().context("state directory")?;
    let dir = tempfile::tempdir()?;
    let (key, csr, crt) = (
        dir.path().join("c.key"),
        dir.path().join("c.csr"),
        dir.path().join("c.crt"),
    );
    let subject = match group {
        Some(g) => format!("/O={g}/CN={cn}"),
        None => format!("/CN={cn}"),
    };
    run(Command::new("openssl")
        .args([
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", &subject, "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&csr))?;
    // Extensions make it X.509 v3: rustls refuses v1 certificates.
    let ext = dir.path().join("ext");
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )?;
    run(Command::new("openssl")
        .args(["x509", "-req", "-days", "2", "-extfile"])
        .arg(&ext)
        .arg("-in")
        .arg(&csr)
        .arg("-CA")
        .arg(state.join("client-ca.crt"))
        .arg("-CAkey")
        .arg(state.join("client-ca.key"))
        .args(["-CAcreateserial", "-CAserial"])
        .arg(dir.path().join("serial"))
        .arg("-out")
        .arg(&crt))?;
    Ok((std::fs::read_to_string(crt)?, std::fs::read_to_string(key)?))
}

/// A kubeconfig for the cluster of `kubeconfig` as user `cn` in `group` (a client
/// certificate), written beside it; so that the audit log tells that user's requests apart.
pub fn kubeconfig_as(kubeconfig: &Path, cn: &str, group: Option<&str>) -> Result<PathBuf> {
    let (cert, key) = client_cert(kubeconfig, cn, group)?;
    let path = kubeconfig.with_file_name(format!("{cn}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: {server}, certificate-authority-data: {ca}}}\nusers:\n- name: u\n  user: {{client-certificate-data: {cert}, client-key-data: {key}}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, namespace: default}}\ncurrent-context: c\n",
            server = server_url(kubeconfig)?,
            ca = server_ca(kubeconfig)?,
            cert = base64(cert.as_bytes()),
            key = base64(key.as_bytes()),
        ),
    )?;
    Ok(path)
}

/// A plain HTTP GET of `path` on a loopback `port`, with extra `headers` (`Name: value`);
/// returns the status code and body.
pub fn http_get(port: u16, path: &str, headers: &[String]) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{extra}\r\n"
    )?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// Base64 (standard, padded) of `data`.
pub fn base64(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Installs skewer's CRDs (from `deploy/`) into a cluster and waits until they are served.
pub fn install_crds(kubeconfig: &Path) -> Result<()> {
    run(kubectl(kubeconfig)
        .args(["apply", "-f"])
        .arg(root().join("deploy/crds.yaml")))?;
    run(kubectl(kubeconfig).args([
        "wait",
        "--for=condition=Established",
        "crd/kustomizations.skewer.dev",
        "crd/gitrepositories.skewer.dev",
        "crd/ocirepositories.skewer.dev",
        "crd/applications.skewer.dev",
        "crd/applicationsets.skewer.dev",
        "crd/receivers.skewer.dev",
        "crd/providers.skewer.dev",
        "crd/alerts.skewer.dev",
        "--timeout=60s",
    ]))?;
    Ok(())
}

static HUB: OnceLock<PathBuf> = OnceLock::new();

/// The hub cluster's kubeconfig, with skewer's CRDs installed from `deploy/`.
pub fn hub() -> &'static Path {
    HUB.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let kc = cluster("hub").expect("starting the local cluster (e2e/cluster/up.sh hub)");
        install_crds(&kc).expect("installing CRDs from deploy/");
        kc
    })
}

/// The `skewer` user's kubeconfig of the cluster whose admin kubeconfig is `kubeconfig`, with
/// its server replaced by `server` (a proxy's address, say) when given.
pub fn skewer_kubeconfig_of(
    kubeconfig: &Path,
    server: Option<std::net::SocketAddr>,
) -> Result<PathBuf> {
    let own = kubeconfig.with_file_name("skewer.kubeconfig");
    let Some(server) = server else {
        return Ok(own);
    };
    let text = std::fs::read_to_string(&own)?;
    let rewritten: String = text
        .lines()
        .map(|l| match l.trim_start().strip_prefix("server: ") {
            Some(_) => format!("    server: https://{server}\n"),
            None => format!("{l}\n"),
        })
        .collect();
    let path = kubeconfig.with_file_name(format!("skewer-via-{}.kubeconfig", server.port()));
    std::fs::write(&path, rewritten)?;
    Ok(path)
}

/// The address of a cluster's API server, from its kubeconfig.
pub fn server_addr(kubeconfig: &Path) -> Result<std::net::SocketAddr> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let server = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server: https://"))
        .context("no server in kubeconfig")?;
    Ok(server.trim().parse()?)
}

/// The hub as the user `skewer` (cluster-admin, but told apart in the audit log).
pub fn skewer_kubeconfig() -> PathBuf {
    hub().with_file_name("skewer.kubeconfig")
}

/// One request in the hub's audit log.
#[derive(Debug, Clone)]
pub struct Audited {
    /// Who sent it: the impersonated user for a request made while impersonating.
    pub user: String,
    pub verb: String,
    pub resource: String,
    /// Like `status`; empty for the resource itself.
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The request's URI (`?dryRun=All` marks a dry run).
    pub uri: String,
    /// When the server received it, and when it answered.
    pub received: Option<jiff::Timestamp>,
    pub answered: Option<jiff::Timestamp>,
}

/// Requests by `user` in `namespace` that the hub's audit log has recorded so far (the API
/// server writes the log before it responds). A request made while impersonating `user`
/// counts as `user`'s.
pub fn audited(user: &str, namespace: &str) -> Result<Vec<Audited>> {
    audited_on(hub(), user, Some(namespace))
}

/// Requests by `user` recorded by the audit log of the cluster of `kubeconfig`, in
/// `namespace` (or anywhere when `None`), in the order the server logged them.
pub fn audited_on(kubeconfig: &Path, user: &str, namespace: Option<&str>) -> Result<Vec<Audited>> {
    let mut all = audit_log(kubeconfig, namespace)?;
    all.retain(|a| a.user == user);
    Ok(all)
}

/// Every request the audit log of the cluster of `kubeconfig` recorded in `namespace` (or
/// anywhere when `None`), by anyone, in the order the server logged them.
pub fn audit_log(kubeconfig: &Path, namespace: Option<&str>) -> Result<Vec<Audited>> {
    let log = std::fs::read_to_string(kubeconfig.with_file_name("audit.log"))?;
    Ok(log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| namespace.is_none_or(|ns| e["objectRef"]["namespace"] == ns))
        .map(|e| {
            let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            let t = |v: &serde_json::Value| v.as_str()?.parse::<jiff::Timestamp>().ok();
            let who = if e["impersonatedUser"].is_object() {
                &e["impersonatedUser"]["username"]
            } else {
                &e["user"]["username"]
            };
            Audited {
                user: s(who),
                verb: s(&e["verb"]),
                resource: s(&e["objectRef"]["resource"]),
                subresource: s(&e["objectRef"]["subresource"]),
                namespace: s(&e["objectRef"]["namespace"]),
                name: s(&e["objectRef"]["name"]),
                uri: s(&e["requestURI"]),
                received: t(&e["requestReceivedTimestamp"]),
                answered: t(&e["stageTimestamp"]),
            }
        })
        .collect())
}

pub fn kubectl(kubeconfig: &Path) -> Command {
    let mut c = Command::new("kubectl");
    c.env("KUBECONFIG", kubeconfig);
    c
}

/// Runs kubectl against the hub and returns stdout, failing on a non-zero exit.
pub fn kc(args: &[&str]) -> Result<String> {
    run(kubectl(hub()).args(args))
}

/// Runs kubectl against the cluster of `kubeconfig` and returns stdout.
pub fn kc_on(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    run(kubectl(kubeconfig).args(args))
}

/// Applies a YAML document to the hub.
pub fn kc_apply(yaml: &str) -> Result<()> {
    apply_to(hub(), yaml)
}

/// Applies a YAML document to the cluster of `kubeconfig`.
pub fn apply_to(kubeconfig: &Path, yaml: &str) -> Result<()> {
    use std::io::Write;
    let mut child = kubectl(kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(yaml.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "kubectl apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

pub async fn client(kubeconfig: &Path) -> Result<Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = Kubeconfig::read_from(kubeconfig)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A unique, DNS-safe name for this test run.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{:x}{:x}",
        std::process::id() % 0xfff,
        (nanos ^ N.fetch_add(1, Ordering::Relaxed).wrapping_mul(7919)) % 0xfffff
    )
}

/// Creates a namespace for one test.
pub fn namespace(prefix: &str) -> Result<String> {
    let ns = unique(prefix);
    kc(&["create", "namespace", &ns])?;
    Ok(ns)
}

/// Polls `check` until it returns `Some`, or fails after `timeout` with the last state seen.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => last = "not yet".into(),
            Err(e) => last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}: {last}");
        }
        sleep(Duration::from_millis(100)).await;
    }
}

/// Path of the skewer binary, built on first use.
pub fn skewer_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(p) = std::env::var("SKEWER_BIN") {
            return PathBuf::from(p);
        }
        let profile = if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        };
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(root())
            .args(["build", "-q", "-p", "skewer-agent", "--bin", "skewer"]);
        if profile == "release" {
            cmd.arg("--release");
        }
        run(&mut cmd).expect("building skewer");
        root().join("target").join(profile).join("skewer")
    })
}

/// A running `skewer run`, killed on drop.
pub struct Skewer {
    child: Child,
    bin: PathBuf,
    kubeconfig: PathBuf,
    pub data_dir: tempfile::TempDir,
    pub log: PathBuf,
    namespace: String,
    extra: Vec<String>,
    pub metrics_port: u16,
}

impl Skewer {
    /// Starts skewer watching only `namespace` (every namespace when empty).
    pub fn start(namespace: &str) -> Result<Self> {
        Self::start_with(namespace, &[])
    }

    pub fn start_with(namespace: &str, extra: &[&str]) -> Result<Self> {
        Self::start_bin(skewer_bin(), namespace, extra)
    }

    /// Starts the skewer binary at `bin` (another build, to compare with) watching `namespace`.
    pub fn start_bin(bin: &Path, namespace: &str, extra: &[&str]) -> Result<Self> {
        Self::launch(bin, &skewer_kubeconfig(), namespace, extra)
    }

    /// Starts skewer against the cluster of `kubeconfig`, watching `namespace`.
    pub fn start_on(kubeconfig: &Path, namespace: &str, extra: &[&str]) -> Result<Self> {
        Self::launch(skewer_bin(), kubeconfig, namespace, extra)
    }

    /// Starts skewer watching every namespace for objects labeled `selector`, with its lease
    /// and cluster Secrets in `home` (so tests in parallel do not see each other).
    pub fn start_cluster_wide(selector: &str, home: &str, extra: &[&str]) -> Result<Self> {
        let mut args = vec![
            "--watch-label-selector",
            selector,
            "--leader-election-namespace",
            home,
            "--cluster-secret-namespace",
            home,
        ];
        args.extend_from_slice(extra);
        Self::launch(skewer_bin(), &skewer_kubeconfig(), "", &args)
    }

    fn launch(bin: &Path, kubeconfig: &Path, namespace: &str, extra: &[&str]) -> Result<Self> {
        let data_dir = tempfile::tempdir()?;
        let log = data_dir.path().join("skewer.log");
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        // A restarted skewer is a new candidate: a short lease keeps takeovers quick in tests.
        if !extra.iter().any(|a| a == "--lease-duration") {
            extra.extend(["--lease-duration".to_string(), "3s".to_string()]);
        }
        // Each skewer serves /metrics on a port of its own.
        let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        extra.extend([
            "--metrics-addr".to_string(),
            format!("127.0.0.1:{metrics_port}"),
        ]);
        let child = Self::spawn(bin, kubeconfig, namespace, data_dir.path(), &log, &extra)?;
        Ok(Self {
            child,
            bin: bin.to_path_buf(),
            kubeconfig: kubeconfig.to_path_buf(),
            data_dir,
            log,
            namespace: namespace.into(),
            extra,
            metrics_port,
        })
    }

    fn spawn(
        bin: &Path,
        kubeconfig: &Path,
        namespace: &str,
        data: &Path,
        log: &Path,
        extra: &[String],
    ) -> Result<Child> {
        let logf = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let watched: &[&str] = if namespace.is_empty() {
            &[]
        } else {
            &["--namespace", namespace]
        };
        Ok(Command::new(bin)
            .arg("run")
            .args(watched)
            .arg("--data-dir")
            .arg(data)
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,kube=warn")
            .stdout(logf.try_clone()?)
            .stderr(logf)
            .spawn()?)
    }

    /// SIGKILL: no chance to clean up, as in a node failure.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// SIGTERM, as Kubernetes stops a Pod; waits for the process to exit, at most `within`.
    pub fn terminate(&mut self, within: std::time::Duration) -> Result<()> {
        run(Command::new("kill").args(["-TERM", &self.child.id().to_string()]))?;
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        anyhow::bail!("skewer still running {within:?} after SIGTERM")
    }

    /// Starts again with the same data directory and flags.
    pub fn restart(&mut self) -> Result<()> {
        self.child = Self::spawn(
            &self.bin,
            &self.kubeconfig,
            &self.namespace,
            self.data_dir.path(),
            &self.log,
            &self.extra,
        )?;
        Ok(())
    }

    /// GETs a path of skewer's HTTP endpoint; returns the status code and body.
    pub fn http_get(&self, path: &str) -> Result<(u16, String)> {
        http_get(self.metrics_port, path, &[])
    }

    /// Whether the process is still running (it has not exited or crashed).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file skewer logs to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Skewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() || std::env::var_os("SKEWER_E2E_LOGS").is_some() {
            eprintln!("---- skewer log ----\n{}", self.logs());
        }
    }
}

/// The holders of the shard Leases of `skewer run --shards` in `namespace`: Lease name →
/// `holderIdentity` (empty when released).
pub async fn shard_holders(
    c: &kube::Client,
    namespace: &str,
) -> Result<std::collections::BTreeMap<String, String>> {
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(c.clone(), namespace);
    let leases = api
        .list(&kube::api::ListParams::default().labels("skewer.dev/shard-role=shard"))
        .await?;
    Ok(leases
        .items
        .into_iter()
        .map(|l| {
            let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            (l.metadata.name.unwrap_or_default(), holder)
        })
        .collect())
}
