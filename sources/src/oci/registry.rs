//! An OCI registry, reached over the distribution API (oci-client): a repository's tags, a
//! tag's manifest digest (one HEAD request), a manifest and one blob pulled within a size
//! limit and checked against their digests, an artifact pushed. Basic auth and the bearer-token
//! flow are oci-client's; the login comes from a dockerconfigjson Secret
//! ([`crate::dockerconfig`]).

use bytes::Bytes;
use futures::StreamExt;
use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use thiserror::Error;

use super::{Built, Descriptor, FormatError, MANIFEST_MEDIA_TYPE, Manifest, PickError};
use crate::dockerconfig::Login;

/// The manifest media types a source accepts (an image index is refused when parsed, naming
/// its type).
const ACCEPTED: &[&str] = &[
    MANIFEST_MEDIA_TYPE,
    super::DOCKER_MANIFEST_MEDIA_TYPE,
    "application/vnd.oci.image.index.v1+json",
];

/// A manifest is a few kilobytes; anything past this is not one.
const MANIFEST_LIMIT: usize = 4 << 20;

/// At most this many pages of tags are read (1,000 each).
const TAG_PAGES: usize = 100;
const TAG_PAGE: usize = 1000;

#[derive(Debug, Error)]
pub enum OciError {
    #[error("spec.url: {0}")]
    Url(String),
    #[error(transparent)]
    Pick(#[from] PickError),
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("{what}: authentication failed: {message}")]
    Auth { what: String, message: String },
    #[error("{what}: not found")]
    NotFound { what: String },
    #[error("{what}: {size} bytes, more than the limit of {limit}")]
    TooLarge { what: String, size: u64, limit: u64 },
    #[error("{what}: {message}")]
    Registry { what: String, message: String },
}

impl OciError {
    pub fn is_authentication(&self) -> bool {
        matches!(self, OciError::Auth { .. })
    }

    fn from_client(what: impl Into<String>, e: OciDistributionError) -> Self {
        let what = what.into();
        let message = e.to_string();
        match &e {
            OciDistributionError::AuthenticationFailure(_)
            | OciDistributionError::UnauthorizedError { .. } => OciError::Auth { what, message },
            OciDistributionError::ServerError {
                code: 401 | 403, ..
            } => OciError::Auth { what, message },
            OciDistributionError::ImageManifestNotFoundError(_)
            | OciDistributionError::ServerError { code: 404, .. } => OciError::NotFound { what },
            OciDistributionError::RegistryError { envelope, .. } => {
                let codes: Vec<String> = envelope
                    .errors
                    .iter()
                    .map(|e| format!("{:?}", e.code))
                    .collect();
                let denied = codes
                    .iter()
                    .any(|c| c.contains("Unauthorized") || c.contains("Denied"));
                let unknown = codes.iter().any(|c| c.contains("Unknown"));
                if denied {
                    OciError::Auth { what, message }
                } else if unknown {
                    OciError::NotFound { what }
                } else {
                    OciError::Registry { what, message }
                }
            }
            _ => OciError::Registry { what, message },
        }
    }
}

/// `oci://<registry>/<repository>`, with no tag or digest (those are `spec.ref`'s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    pub registry: String,
    pub repository: String,
}

impl Repository {
    pub fn parse(url: &str) -> Result<Self, OciError> {
        let bad = |why: &str| OciError::Url(format!("'{url}': {why}"));
        let rest = url
            .strip_prefix("oci://")
            .ok_or_else(|| bad("must start with oci://"))?;
        let (registry, repository) = rest
            .split_once('/')
            .ok_or_else(|| bad("no repository after the registry"))?;
        if registry.is_empty() || repository.is_empty() {
            return Err(bad("no repository after the registry"));
        }
        if repository.contains('@')
            || repository
                .rsplit('/')
                .next()
                .is_some_and(|last| last.contains(':'))
        {
            return Err(bad("a tag or digest belongs in spec.ref, not the URL"));
        }
        let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/".contains(c);
        if !repository.chars().all(valid) || repository.ends_with('/') || repository.contains("//")
        {
            return Err(bad(
                "a repository is lowercase letters, digits, '.', '_', '-' and '/'",
            ));
        }
        let host = |c: char| c.is_ascii_alphanumeric() || ".-:[]".contains(c);
        if !registry.chars().all(host) {
            return Err(bad("the registry is not a host name with an optional port"));
        }
        Ok(Self {
            registry: registry.to_string(),
            repository: repository.to_string(),
        })
    }

    /// `<registry>/<repository>`, as a signature's payload names it.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    fn tagged(&self, tag: &str) -> Reference {
        Reference::with_tag(self.registry.clone(), self.repository.clone(), tag.into())
    }

    fn pinned(&self, digest: &str) -> Reference {
        Reference::with_digest(
            self.registry.clone(),
            self.repository.clone(),
            digest.into(),
        )
    }
}

impl std::fmt::Display for Repository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)
    }
}

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub login: Option<Login>,
    /// Plain HTTP (`spec.insecure`).
    pub insecure: bool,
}

/// Told how far a transfer is: bytes done, bytes in all.
pub type Progress = std::sync::Arc<dyn Fn(u64, u64) + Send + Sync>;

/// Pushes with progress go in chunks of this size.
const PUSH_CHUNK: usize = 1 << 20;

/// One registry session: its own token cache, so two sources with different logins for the
/// same registry never share credentials.
pub struct Registry {
    client: oci_client::Client,
    auth: RegistryAuth,
    progress: Option<Progress>,
}

impl Registry {
    /// A session with `access`; fails only when no HTTP client can be built (TLS roots).
    pub fn new(access: &Access) -> Result<Self, OciError> {
        let config = ClientConfig {
            protocol: if access.insecure {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            platform_resolver: None,
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            user_agent: concat!("skewer/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let auth = match &access.login {
            Some(l) => RegistryAuth::Basic(l.username.clone(), l.password.clone()),
            None => RegistryAuth::Anonymous,
        };
        // Not `Client::new`, which falls back to a default client (HTTPS, whatever
        // `insecure` said) when its configuration cannot be built.
        let client = oci_client::Client::try_from(config).map_err(|e| OciError::Registry {
            what: "the registry client".into(),
            message: e.to_string(),
        })?;
        Ok(Self {
            client,
            auth,
            progress: None,
        })
    }

    /// Reports the progress of blob transfers (for a terminal's progress bar).
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Every tag of `repo`, page by page.
    pub async fn tags(&self, repo: &Repository) -> Result<Vec<String>, OciError> {
        let reference = repo.tagged("latest");
        let mut all: Vec<String> = Vec::new();
        for _ in 0..TAG_PAGES {
            let page = self
                .client
                .list_tags(
                    &reference,
                    &self.auth,
                    Some(TAG_PAGE),
                    all.last().map(String::as_str),
                )
                .await
                .map_err(|e| OciError::from_client(format!("tags of {repo}"), e))?;
            let n = page.tags.len();
            all.extend(page.tags);
            if n < TAG_PAGE {
                break;
            }
        }
        Ok(all)
    }

    /// The manifest digest tag `tag` points at: one HEAD request.
    pub async fn digest_of(&self, repo: &Repository, tag: &str) -> Result<String, OciError> {
        self.client
            .fetch_manifest_digest(&repo.tagged(tag), &self.auth)
            .await
            .map_err(|e| OciError::from_client(format!("{repo}:{tag}"), e))
    }

    /// The manifest with digest `digest` (checked), and its bytes.
    pub async fn manifest(
        &self,
        repo: &Repository,
        digest: &str,
    ) -> Result<(Manifest, Bytes), OciError> {
        let what = format!("{repo}@{digest}");
        let (bytes, _) = self
            .client
            .pull_manifest_raw(&repo.pinned(digest), &self.auth, ACCEPTED)
            .await
            .map_err(|e| OciError::from_client(&what, e))?;
        if bytes.len() > MANIFEST_LIMIT {
            return Err(OciError::TooLarge {
                what: format!("manifest {what}"),
                size: bytes.len() as u64,
                limit: MANIFEST_LIMIT as u64,
            });
        }
        let actual = crate::artifact::digest_of(&bytes);
        if actual != digest {
            return Err(OciError::Registry {
                what,
                message: format!("the registry sent a manifest with digest {actual}"),
            });
        }
        Ok((super::parse_manifest(&bytes)?, bytes))
    }

    /// The manifest tag `tag` points at, if the tag exists.
    pub async fn manifest_at(
        &self,
        repo: &Repository,
        tag: &str,
    ) -> Result<Option<(Manifest, String)>, OciError> {
        let digest = match self.digest_of(repo, tag).await {
            Ok(d) => d,
            Err(OciError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let (manifest, _) = self.manifest(repo, &digest).await?;
        Ok(Some((manifest, digest)))
    }

    /// Blob `layer` of `repo`, refused past `limit` bytes whatever its descriptor says, and
    /// checked against its digest.
    pub async fn blob(
        &self,
        repo: &Repository,
        layer: &Descriptor,
        limit: u64,
    ) -> Result<Vec<u8>, OciError> {
        let what = format!("blob {}", layer.digest);
        if layer.size > limit {
            return Err(OciError::TooLarge {
                what,
                size: layer.size,
                limit,
            });
        }
        let descriptor = oci_client::manifest::OciDescriptor {
            media_type: layer.media_type.clone(),
            digest: layer.digest.clone(),
            size: i64::try_from(layer.size).unwrap_or(i64::MAX),
            ..Default::default()
        };
        let mut stream = self
            .client
            .pull_blob_stream(&repo.pinned(&layer.digest), &descriptor)
            .await
            .map_err(|e| OciError::from_client(&what, e))?;
        let mut bytes = Vec::with_capacity(usize::try_from(layer.size).unwrap_or(0));
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| OciError::Registry {
                what: what.clone(),
                message: e.to_string(),
            })?;
            let total = (bytes.len() + chunk.len()) as u64;
            if total > limit {
                return Err(OciError::TooLarge {
                    what,
                    size: total,
                    limit,
                });
            }
            bytes.extend_from_slice(&chunk);
            if let Some(p) = &self.progress {
                p(total, layer.size);
            }
        }
        Ok(bytes)
    }

    /// Pushes `built` and points `tag` at it; returns the manifest's digest.
    pub async fn push(
        &self,
        repo: &Repository,
        tag: &str,
        built: &Built,
    ) -> Result<String, OciError> {
        let manifest = super::parse_manifest(&built.manifest)?;
        let blobs = std::iter::once((&manifest.config, &built.config))
            .chain(manifest.layers.iter().zip(std::iter::once(&built.layer)));
        self.push_parts(repo, tag, blobs, &built.manifest).await?;
        Ok(built.digest.clone())
    }

    /// Pushes blobs (each skipped when the registry has it) and a manifest tagged `tag`.
    pub(crate) async fn push_parts<'a>(
        &self,
        repo: &Repository,
        tag: &str,
        blobs: impl Iterator<Item = (&'a Descriptor, &'a Vec<u8>)>,
        manifest: &[u8],
    ) -> Result<(), OciError> {
        let reference = repo.tagged(tag);
        self.client
            .auth(&reference, &self.auth, oci_client::RegistryOperation::Push)
            .await
            .map_err(|e| OciError::from_client(format!("push to {repo}"), e))?;
        for (descriptor, data) in blobs {
            let what = format!("blob {}", descriptor.digest);
            let present = self
                .client
                .blob_exists(&reference, &descriptor.digest)
                .await
                .map_err(|e| OciError::from_client(&what, e))?;
            if present {
                continue;
            }
            match &self.progress {
                None => self
                    .client
                    .push_blob(&reference, data.clone(), &descriptor.digest)
                    .await
                    .map(drop),
                Some(p) => {
                    let (p, total) = (p.clone(), data.len() as u64);
                    let mut done = 0u64;
                    let chunks: Vec<Bytes> = data
                        .chunks(PUSH_CHUNK)
                        .map(Bytes::copy_from_slice)
                        .collect();
                    let stream = futures::stream::iter(chunks).map(move |c| {
                        done += c.len() as u64;
                        p(done, total);
                        Ok(c)
                    });
                    self.client
                        .push_blob_stream(&reference, stream, &descriptor.digest, Some(total))
                        .await
                        .map(drop)
                }
            }
            .map_err(|e| OciError::from_client(&what, e))?;
        }
        let content_type = http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE);
        self.client
            .push_manifest_raw(&reference, manifest.to_vec(), content_type)
            .await
            .map_err(|e| OciError::from_client(format!("{repo}:{tag}"), e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_registry_and_a_repository_and_nothing_else() {
        let r = Repository::parse("oci://127.0.0.1:5000/team/app").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "team/app");
        assert_eq!(r.name(), "127.0.0.1:5000/team/app");
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/team/app");
        for (url, why) in [
            ("https://ghcr.io/a/b", "oci://"),
            ("oci://ghcr.io", "no repository"),
            ("oci://ghcr.io/", "no repository"),
            ("oci://ghcr.io/a/b:v1", "spec.ref"),
            ("oci://ghcr.io/a/b@sha256:00", "spec.ref"),
            ("oci://ghcr.io/A/b", "lowercase"),
            ("oci://ghcr.io/a//b", "lowercase"),
            ("oci://user@ghcr.io/a", "host name"),
        ] {
            let e = Repository::parse(url).unwrap_err().to_string();
            assert!(e.starts_with("spec.url: "), "{e}");
            assert!(e.contains(why), "{url}: {e}");
        }
    }
}
