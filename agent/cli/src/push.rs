//! `skewer push artifact`, `skewer pull artifact`, `skewer sign` and `skewer
//! generate-key-pair`: a directory built into an artifact in Flux's format and pushed, read
//! back as an OCIRepository reads it, and cosign signatures made and stored beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use skewer_sources::dockerconfig::{self, Login};
use skewer_sources::oci::cosign::{self, Signer, Trust};
use skewer_sources::oci::keyless::{Identities, TRUSTED_ROOT_KEY};
use skewer_sources::oci::registry::{Access, Progress, Registry, Repository};
use skewer_sources::oci::{self, OciRef, Origin};
use skewer_sources::untrusted::Limits;

/// An artifact address on the command line: `oci://<registry>/<repository>` with `:<tag>`
/// or `@sha256:<hex>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub repo: Repository,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

impl std::str::FromStr for Address {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => (r, Some(d.to_string())),
            None => (s, None),
        };
        let last_slash = rest.rfind('/').unwrap_or(0);
        let (base, tag) = match rest[last_slash..].find(':') {
            Some(i) => (
                &rest[..last_slash + i],
                Some(rest[last_slash + i + 1..].to_string()),
            ),
            None => (rest, None),
        };
        let repo = Repository::parse(base)
            .map_err(|e| e.to_string().trim_start_matches("spec.url: ").to_string())?;
        if let Some(d) = digest.as_deref().filter(|d| !oci::is_digest(d)) {
            return Err(format!("'{d}' is not sha256:<64 hex digits>"));
        }
        if tag.as_deref().is_some_and(|t| t.is_empty()) {
            return Err(format!("'{s}': empty tag"));
        }
        Ok(Self { repo, tag, digest })
    }
}

/// The registry login: `--creds user:password`, else the Docker config file's entry.
pub fn login(creds: Option<&str>, registry: &str) -> Result<Option<Login>> {
    if let Some(c) = creds {
        let (username, password) = c
            .split_once(':')
            .context("--creds: expected <user>:<password>")?;
        return Ok(Some(Login {
            username: username.into(),
            password: password.into(),
        }));
    }
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker")));
    let Some(path) = dir.map(|d| d.join("config.json")).filter(|p| p.exists()) else {
        return Ok(None);
    };
    let raw = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let data = BTreeMap::from([(dockerconfig::KEY.to_string(), raw)]);
    dockerconfig::login_for(&data, registry).with_context(|| format!("{}", path.display()))
}

/// What `push artifact` is told.
pub struct Push<'a> {
    pub address: &'a Address,
    pub path: &'a Path,
    pub source: &'a str,
    pub revision: &'a str,
    /// RFC 3339; the same files and origin give the same digest.
    pub created: &'a str,
    pub access: Access,
    pub sign_key: Option<&'a Path>,
}

/// Builds `push.path` into an artifact, pushes it under its tag, and signs it when asked;
/// returns the manifest digest.
pub async fn push(push: Push<'_>) -> Result<String> {
    let a = push.address;
    if a.digest.is_some() {
        bail!("push: name a tag (oci://…:<tag>), not a digest");
    }
    let tag = a.tag.clone().unwrap_or_else(|| "latest".into());
    let signer = push.sign_key.map(read_signer).transpose()?;
    let files = super::build::source_files(push.path)
        .with_context(|| format!("reading {}", push.path.display()))?;
    if files.is_empty() {
        bail!("{}: no files to push", push.path.display());
    }
    let built = oci::build(
        &files,
        &Origin {
            source: push.source.into(),
            revision: push.revision.into(),
            created: push.created.into(),
        },
    );
    let registry = with_bar(Registry::new(&push.access)?, "pushing");
    let digest = registry
        .push(&a.repo, &tag, &built)
        .await
        .with_context(|| format!("pushing {}:{tag}", a.repo))?;
    if let Some(signer) = signer {
        cosign::sign(&registry, &a.repo, &digest, &signer)
            .await
            .with_context(|| format!("signing {}@{digest}", a.repo))?;
    }
    Ok(digest)
}

/// What `pull` verifies against: public key files, or a trusted root file and one
/// (issuer, subject) identity for keyless signatures; `None` when neither is given.
pub fn trust(
    keys: &[PathBuf],
    keyless: Option<(PathBuf, (String, String))>,
) -> Result<Option<Trust>> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    if let Some((root, identity)) = keyless {
        let ids = Identities::new(&[identity])?;
        let data = [(TRUSTED_ROOT_KEY.to_string(), read(&root)?)].into();
        let trust = Trust::from_secret_data(&data, Some(ids))
            .with_context(|| format!("--trusted-root {}", root.display()))?;
        return Ok(Some(trust));
    }
    if keys.is_empty() {
        return Ok(None);
    }
    let mut data = BTreeMap::new();
    for k in keys {
        let name = k
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        data.insert(format!("{}.pub", name.trim_end_matches(".pub")), read(k)?);
    }
    Ok(Some(Trust::from_secret_data(&data, None)?))
}

/// Pulls the artifact at `address` (verified against `trust` when given) and writes its
/// files under `out`, which must be absent or empty (nothing is written without it: the
/// artifact is only checked); returns the revision.
pub async fn pull(
    address: &Address,
    out: Option<&Path>,
    trust: Option<&Trust>,
    access: Access,
) -> Result<String> {
    if let Some(out) = out
        && std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some())
    {
        bail!("{} is not empty", out.display());
    }
    let reference = OciRef {
        tag: address.tag.clone(),
        digest: address.digest.clone(),
        ..OciRef::default()
    };
    let registry = with_bar(Registry::new(&access)?, "pulling");
    let resolved = oci::resolve(&registry, &address.repo, &reference).await?;
    if let Some(trusted) = trust {
        let found = cosign::signatures(&registry, &address.repo, &resolved.digest).await?;
        let by = trusted.verify(&found, &resolved.digest)?;
        eprintln!("verified: signed by {by}");
    }
    let pulled = oci::pull(
        &registry,
        &address.repo,
        &resolved.digest,
        None,
        Limits::default(),
    )
    .await?;
    let Some(out) = out else {
        let bytes: usize = pulled.files.iter().map(|f| f.data.len()).sum();
        eprintln!("{} files, {bytes} bytes: accepted", pulled.files.len());
        return Ok(resolved.revision);
    };
    for f in &pulled.files {
        // Paths were checked by the untrusted read: relative, no `..`.
        let path = out.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &f.data).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(resolved.revision)
}

/// `registry` drawing a progress bar on stderr when stderr is a terminal (never in logs or
/// pipes).
fn with_bar(registry: Registry, verb: &'static str) -> Registry {
    use std::io::{IsTerminal as _, Write as _};
    if !std::io::stderr().is_terminal() {
        return registry;
    }
    // Redrawn only when the line changes (a chunk can be a few bytes).
    let last = std::sync::Mutex::new(String::new());
    let bar: Progress = std::sync::Arc::new(move |done: u64, total: u64| {
        let line = bar_line(verb, done, total);
        let Ok(mut last) = last.lock() else { return };
        if *last == line {
            return;
        }
        last.clone_from(&line);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}");
        if done >= total {
            let _ = writeln!(err);
        }
    });
    registry.with_progress(bar)
}

/// One line of a progress bar: `pushing [#####     ] 12.5/25.0 MB`.
fn bar_line(verb: &str, done: u64, total: u64) -> String {
    const WIDTH: u64 = 30;
    let filled = (done.min(total) * WIDTH)
        .checked_div(total)
        .unwrap_or(WIDTH);
    let filled = usize::try_from(filled).unwrap_or(0);
    format!(
        "{verb} [{}{}] {:.1}/{:.1} MB",
        "#".repeat(filled),
        " ".repeat(WIDTH as usize - filled),
        done as f64 / 1e6,
        total as f64 / 1e6
    )
}

/// Signs the artifact at `address` (its tag resolved to a digest first); returns the digest.
pub async fn sign(address: &Address, key: &Path, access: Access) -> Result<String> {
    let signer = read_signer(key)?;
    let registry = Registry::new(&access)?;
    let digest = match (&address.digest, &address.tag) {
        (Some(d), _) => d.clone(),
        (None, tag) => {
            let tag = tag.as_deref().unwrap_or("latest");
            registry
                .digest_of(&address.repo, tag)
                .await
                .with_context(|| format!("resolving {}:{tag}", address.repo))?
        }
    };
    cosign::sign(&registry, &address.repo, &digest, &signer)
        .await
        .with_context(|| format!("signing {}@{digest}", address.repo))?;
    Ok(digest)
}

/// A signing key: PKCS#8 PEM, or cosign's encrypted key with `COSIGN_PASSWORD`.
fn read_signer(path: &Path) -> Result<Signer> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let password = std::env::var("COSIGN_PASSWORD").ok();
    let encrypted = String::from_utf8_lossy(&pem).contains("ENCRYPTED");
    let password = encrypted.then(|| password.unwrap_or_default());
    Signer::from_pem(&pem, password.as_deref().map(str::as_bytes))
        .with_context(|| format!("{}", path.display()))
}

/// Writes `<prefix>.key` (PKCS#8 PEM, mode 0600) and `<prefix>.pub`.
pub fn generate_key_pair(prefix: &Path) -> Result<()> {
    let (signer, public) = Signer::generate()?;
    let key = prefix.with_extension("key");
    let public_path = prefix.with_extension("pub");
    for p in [&key, &public_path] {
        if p.exists() {
            bail!("{} exists; not overwriting it", p.display());
        }
    }
    write_private(&key, signer.private_pem()?.as_bytes())?;
    std::fs::write(&public_path, public)
        .with_context(|| format!("writing {}", public_path.display()))?;
    Ok(())
}

fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(data)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_bars_fill_and_never_overflow() {
        assert_eq!(
            bar_line("pulling", 0, 10),
            format!("pulling [{}] 0.0/0.0 MB", " ".repeat(30))
        );
        assert!(
            bar_line("pushing", 5_000_000, 10_000_000).starts_with(&format!(
                "pushing [{}{}]",
                "#".repeat(15),
                " ".repeat(15)
            ))
        );
        // A registry that sends more than it announced, or nothing at all.
        assert!(bar_line("pulling", 20, 10).starts_with(&format!("pulling [{}]", "#".repeat(30))));
        assert!(bar_line("pulling", 0, 0).starts_with(&format!("pulling [{}]", "#".repeat(30))));
    }

    #[test]
    fn addresses_take_a_tag_or_a_digest() {
        let a: Address = "oci://127.0.0.1:5000/team/app:v1.2.0".parse().unwrap();
        assert_eq!(a.repo.registry, "127.0.0.1:5000");
        assert_eq!(a.repo.repository, "team/app");
        assert_eq!(a.tag.as_deref(), Some("v1.2.0"));
        let d = format!("sha256:{}", "a".repeat(64));
        let a: Address = format!("oci://ghcr.io/team/app@{d}").parse().unwrap();
        assert_eq!(a.digest.as_deref(), Some(d.as_str()));
        assert_eq!(a.tag, None);
        let a: Address = "oci://localhost:5000/app".parse().unwrap();
        assert_eq!((a.tag, a.digest), (None, None));
        assert!("oci://ghcr.io/app@sha256:12".parse::<Address>().is_err());
        assert!("oci://ghcr.io/app:".parse::<Address>().is_err());
        assert!("ghcr.io/app:v1".parse::<Address>().is_err());
    }
}
