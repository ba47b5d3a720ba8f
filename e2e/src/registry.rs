//! A real OCI registry on loopback: Debian's `docker-registry` (distribution 2.8), plain
//! HTTP, optionally behind htpasswd basic auth, with its access log kept so tests can count
//! the requests skewer made.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

use crate::git::{run, serve_on_free_port};

pub struct Registry {
    _root: tempfile::TempDir,
    child: Child,
    /// `127.0.0.1:<port>`.
    pub host: String,
    /// Its access log (one line per request).
    pub log: PathBuf,
    /// The user name and password it requires, when it requires one.
    pub login: Option<(String, String)>,
}

impl Registry {
    /// A registry anyone may push to and pull from.
    pub fn start() -> Result<Self> {
        Self::launch(None)
    }

    /// A registry that requires `user`:`password` (basic auth against an htpasswd file).
    pub fn start_with_login(user: &str, password: &str) -> Result<Self> {
        Self::launch(Some((user.into(), password.into())))
    }

    fn launch(login: Option<(String, String)>) -> Result<Self> {
        let root = tempfile::tempdir()?;
        let dir = root.path();
        let auth = match &login {
            Some((user, password)) => {
                let file = dir.join("htpasswd");
                let line = run("htpasswd", &["-nbB", user, password])?;
                std::fs::write(&file, format!("{line}\n"))?;
                format!(
                    "auth:\n  htpasswd:\n    realm: skewer-test\n    path: {}\n",
                    file.display()
                )
            }
            None => String::new(),
        };
        let config = dir.join("config.yml");
        let log = dir.join("access.log");
        let (child, port) = serve_on_free_port(|port| {
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
                    dir.join("data").display()
                ),
            )?;
            let out = std::fs::File::create(&log)?;
            Command::new("docker-registry")
                .arg("serve")
                .arg(&config)
                .stdout(out.try_clone()?)
                .stderr(out)
                .stdin(Stdio::null())
                .spawn()
                .context("starting docker-registry (apt install docker-registry)")
        })?;
        Ok(Self {
            _root: root,
            child,
            host: format!("127.0.0.1:{port}"),
            log,
            login,
        })
    }

    /// `oci://<host>/<repository>`.
    pub fn url(&self, repository: &str) -> String {
        format!("oci://{}/{repository}", self.host)
    }

    /// The requests in the access log so far whose line contains `needle`, like
    /// `"GET /v2/app/blobs/`.
    pub fn requests(&self, needle: &str) -> Result<usize> {
        let text = std::fs::read_to_string(&self.log)?;
        Ok(text
            .lines()
            .filter(|l| l.contains("HTTP/1.1\"") && l.contains(needle))
            .count())
    }

    /// The `kubernetes.io/dockerconfigjson` data for this registry's login.
    pub fn docker_config(&self) -> Option<String> {
        let (user, password) = self.login.as_ref()?;
        let auth = crate::base64(format!("{user}:{password}").as_bytes());
        Some(format!(
            "{{\"auths\":{{\"{}\":{{\"auth\":\"{auth}\"}}}}}}",
            self.host
        ))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blob of an image: its media type and bytes.
pub struct Blob {
    pub media_type: String,
    pub data: Vec<u8>,
}

fn descriptor(b: &Blob) -> serde_json::Value {
    serde_json::json!({
        "mediaType": b.media_type,
        "digest": skewer_sources::artifact::digest_of(&b.data),
        "size": b.data.len(),
    })
}

/// Writes an OCI image layout (as the OCI image spec describes it, by this test's own hand,
/// not skewer's) holding one image tagged `tag`, and copies it to `repository:tag` of
/// `registry` with skopeo: an artifact pushed by another tool.
pub fn push_with_skopeo(
    registry: &Registry,
    repository: &str,
    tag: &str,
    config: &Blob,
    layers: &[Blob],
    annotations: serde_json::Value,
) -> Result<String> {
    let dir = tempfile::tempdir()?;
    let blobs = dir.path().join("blobs/sha256");
    std::fs::create_dir_all(&blobs)?;
    let write = |data: &[u8]| -> Result<String> {
        let digest = skewer_sources::artifact::digest_of(data);
        std::fs::write(blobs.join(digest.trim_start_matches("sha256:")), data)?;
        Ok(digest)
    };
    write(&config.data)?;
    for l in layers {
        write(&l.data)?;
    }
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor(config),
        "layers": layers.iter().map(descriptor).collect::<Vec<_>>(),
        "annotations": annotations,
    }))?;
    let digest = write(&manifest)?;
    std::fs::write(
        dir.path().join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    });
    std::fs::write(dir.path().join("index.json"), serde_json::to_vec(&index)?)?;
    let mut args = vec![
        "copy".to_string(),
        "--quiet".into(),
        "--dest-tls-verify=false".into(),
        "--preserve-digests".into(),
    ];
    if let Some((u, p)) = &registry.login {
        args.push(format!("--dest-creds={u}:{p}"));
    }
    args.push(format!("oci:{}:{tag}", dir.path().display()));
    args.push(format!("docker://{}/{repository}:{tag}", registry.host));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run("skopeo", &args)?;
    Ok(digest)
}

/// Copies `from` to `to` (tags of `repository`) inside `registry` with skopeo, manifests and
/// blobs unchanged.
pub fn copy_tag(registry: &Registry, repository: &str, from: &str, to: &str) -> Result<()> {
    let src = format!("docker://{}/{repository}:{from}", registry.host);
    let dst = format!("docker://{}/{repository}:{to}", registry.host);
    run(
        "skopeo",
        &[
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            "--preserve-digests",
            &src,
            &dst,
        ],
    )
    .map(|_| ())
}

impl Registry {
    /// `skewer push artifact` of `dir` to `<url>:<tag>` (with this registry's login, if any),
    /// source `https://git.example.com/app`, revision `<tag>@sha1:0123`; returns the digest.
    pub fn push_with_skewer(
        &self,
        url: &str,
        tag: &str,
        dir: &std::path::Path,
        extra: &[&str],
    ) -> Result<String> {
        let mut cmd = std::process::Command::new(crate::skewer_bin());
        cmd.args(["push", "artifact", &format!("{url}:{tag}"), "--insecure"])
            .arg("--path")
            .arg(dir)
            .args([
                "--source",
                "https://git.example.com/app",
                "--revision",
                &format!("{tag}@sha1:0123"),
            ])
            .args(extra);
        if let Some((u, p)) = &self.login {
            cmd.env("SKEWER_REGISTRY_CREDS", format!("{u}:{p}"));
        }
        let out = cmd.output()?;
        if !out.status.success() {
            anyhow::bail!("push: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    }
}
