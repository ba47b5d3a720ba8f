//! Flux's OCI artifact format, written and read: an image manifest whose config has the media
//! type `application/vnd.cncf.flux.config.v1+json` and whose one layer is the files as a
//! `.tar.gz` (`application/vnd.cncf.flux.content.v1.tar+gzip`), annotated with where the files
//! came from. This module is the format (pure); [`registry`] is the I/O, [`cosign`] the
//! signatures, and [`pull`] the whole of reading one artifact.

pub mod cosign;
pub mod keyless;
pub mod registry;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::artifact::{File, digest_of, pack};
use crate::reference::{RefError, highest_matching};
use crate::untrusted::{self, Limits, Refused};
use registry::{OciError, Registry, Repository};

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_MANIFEST_MEDIA_TYPE: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const FLUX_CONFIG_MEDIA_TYPE: &str = "application/vnd.cncf.flux.config.v1+json";
pub const FLUX_CONTENT_MEDIA_TYPE: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
pub const SOURCE_ANNOTATION: &str = "org.opencontainers.image.source";
pub const REVISION_ANNOTATION: &str = "org.opencontainers.image.revision";
pub const CREATED_ANNOTATION: &str = "org.opencontainers.image.created";

/// A content descriptor (OCI image spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The descriptor of blob `data`, of type `media_type`, without annotations.
    pub fn of(media_type: &str, data: &[u8]) -> Self {
        Self {
            media_type: media_type.into(),
            digest: digest_of(data),
            size: data.len() as u64,
            annotations: BTreeMap::new(),
        }
    }
}

/// An image manifest (OCI image spec), as much of it as artifacts use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An artifact ready to push: its blobs and its manifest, each with its digest.
#[derive(Debug, Clone)]
pub struct Built {
    pub config: Vec<u8>,
    pub layer: Vec<u8>,
    pub manifest: Vec<u8>,
    /// `sha256:<hex>` of `manifest`: what a tag will point at.
    pub digest: String,
}

/// Where the files came from, for the manifest's annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `org.opencontainers.image.source`: the repository URL.
    pub source: String,
    /// `org.opencontainers.image.revision`: like `main@sha1:<hex>`.
    pub revision: String,
    /// `org.opencontainers.image.created`, RFC 3339. The same files and origin give the same
    /// digest: pass the revision's time, not the clock's, for reproducible artifacts.
    pub created: String,
}

/// `files` as an artifact in Flux's format.
pub fn build(files: &[File], origin: &Origin) -> Built {
    let (layer, _) = pack(files);
    let config = b"{}".to_vec();
    let annotations: BTreeMap<String, String> = [
        (CREATED_ANNOTATION, &origin.created),
        (REVISION_ANNOTATION, &origin.revision),
        (SOURCE_ANNOTATION, &origin.source),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.clone()))
    .collect();
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.into()),
        config: Descriptor::of(FLUX_CONFIG_MEDIA_TYPE, &config),
        layers: vec![Descriptor::of(FLUX_CONTENT_MEDIA_TYPE, &layer)],
        annotations,
    };
    // Serializing these plain structs cannot fail; an empty manifest would be refused by any
    // registry rather than pushed wrong.
    let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
    Built {
        digest: digest_of(&manifest),
        config,
        layer,
        manifest,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    #[error("the manifest is not an OCI image manifest: {0}")]
    Manifest(String),
    #[error("the artifact has no layers")]
    NoLayers,
    #[error("no layer has media type '{wanted}' (spec.layerSelector.mediaType); the layers are: {}", .present.join(", "))]
    NoSuchLayer {
        wanted: String,
        present: Vec<String>,
    },
}

/// Parses an image manifest.
pub fn parse_manifest(bytes: &[u8]) -> Result<Manifest, FormatError> {
    let m: Manifest =
        serde_json::from_slice(bytes).map_err(|e| FormatError::Manifest(e.to_string()))?;
    match m.media_type.as_deref() {
        None | Some(MANIFEST_MEDIA_TYPE) | Some(DOCKER_MANIFEST_MEDIA_TYPE) => Ok(m),
        Some(other) => Err(FormatError::Manifest(format!(
            "media type '{other}' (an index or another kind of manifest)"
        ))),
    }
}

/// The layer a source reads: the first one with `media_type` when given (Flux's
/// `layerSelector`), else the first.
pub fn select_layer<'a>(
    manifest: &'a Manifest,
    media_type: Option<&str>,
) -> Result<&'a Descriptor, FormatError> {
    let first = manifest.layers.first().ok_or(FormatError::NoLayers)?;
    let Some(wanted) = media_type else {
        return Ok(first);
    };
    manifest
        .layers
        .iter()
        .find(|l| l.media_type == wanted)
        .ok_or_else(|| FormatError::NoSuchLayer {
            wanted: wanted.into(),
            present: manifest
                .layers
                .iter()
                .map(|l| l.media_type.clone())
                .collect(),
        })
}

/// Whether `s` is a manifest digest as refs and addresses write it: `sha256:` and 64 hex
/// digits (either case).
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Which artifact an OCIRepository follows (`spec.ref`): Flux's precedence is digest, then
/// semver, then tag, then `latest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OciRef {
    pub tag: Option<String>,
    pub semver: Option<String>,
    /// A regular expression tags must match before `semver` picks among them.
    pub semver_filter: Option<String>,
    pub digest: Option<String>,
}

/// What to pull.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    Tag(String),
    Digest(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PickError {
    #[error("spec.ref.digest: '{0}' is not sha256:<64 hex digits>")]
    BadDigest(String),
    #[error("spec.ref.semver: {0}")]
    Semver(RefError),
    #[error("no tag in the repository satisfies semver '{0}'")]
    NoSemverMatch(String),
    #[error("spec.ref.semverFilter: {0}")]
    BadFilter(String),
}

impl OciRef {
    /// Whether [`OciRef::pick`] needs the repository's tag list (one more request).
    pub fn needs_tags(&self) -> bool {
        self.digest.is_none() && self.semver.is_some()
    }

    /// The reference to pull, given the repository's tags when [`OciRef::needs_tags`].
    pub fn pick(&self, tags: &[String]) -> Result<Pick, PickError> {
        if let Some(digest) = &self.digest {
            if !is_digest(digest) {
                return Err(PickError::BadDigest(digest.clone()));
            }
            return Ok(Pick::Digest(digest.to_ascii_lowercase()));
        }
        if let Some(constraint) = &self.semver {
            let filter = self
                .semver_filter
                .as_deref()
                .map(crate::reference::bounded_regex)
                .transpose()
                .map_err(PickError::BadFilter)?;
            let candidates = tags
                .iter()
                .map(String::as_str)
                .filter(|t| filter.as_ref().is_none_or(|f| f.is_match(t)));
            let best = highest_matching(constraint, candidates)
                .map_err(PickError::Semver)?
                .ok_or_else(|| PickError::NoSemverMatch(constraint.clone()))?;
            return Ok(Pick::Tag(best.to_string()));
        }
        Ok(Pick::Tag(
            self.tag.clone().unwrap_or_else(|| "latest".into()),
        ))
    }
}

/// The revision an artifact is reported at: `<tag>@sha256:<hex>`, or the digest alone when
/// it was pinned by digest (Flux's forms).
pub fn revision(pick: &Pick, manifest_digest: &str) -> String {
    match pick {
        Pick::Tag(tag) => format!("{tag}@{manifest_digest}"),
        Pick::Digest(_) => manifest_digest.to_string(),
    }
}

/// What a ref resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub pick: Pick,
    /// `sha256:<hex>` of the manifest.
    pub digest: String,
    /// Like `v1.2.0@sha256:<hex>`.
    pub revision: String,
}

/// Resolves `reference` in `repo`: the tag list when a semver range needs it, then one HEAD
/// request for a tag's digest (none for a pinned digest).
pub async fn resolve(
    registry: &Registry,
    repo: &Repository,
    reference: &OciRef,
) -> Result<Resolved, OciError> {
    let tags = if reference.needs_tags() {
        registry.tags(repo).await?
    } else {
        Vec::new()
    };
    let pick = reference.pick(&tags)?;
    let digest = match &pick {
        Pick::Digest(d) => d.clone(),
        Pick::Tag(t) => registry.digest_of(repo, t).await?,
    };
    Ok(Resolved {
        revision: revision(&pick, &digest),
        pick,
        digest,
    })
}

/// One artifact read: its manifest, the layer chosen, and that layer's bytes and files.
#[derive(Debug, Clone)]
pub struct Pulled {
    pub manifest: Manifest,
    pub layer: Descriptor,
    pub bytes: Vec<u8>,
    pub files: Vec<File>,
}

#[derive(Debug, Error)]
pub enum PullError {
    #[error(transparent)]
    Registry(#[from] OciError),
    #[error("layer {digest}: {refused}")]
    Refused { digest: String, refused: Refused },
}

/// Layers read into files at once, in this process.
static INFLATING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Pulls manifest `digest` of `repo` and its layer of `media_type` (the first when `None`),
/// and reads the layer as an untrusted archive within `limits`, off the async runtime.
pub async fn pull(
    registry: &Registry,
    repo: &Repository,
    digest: &str,
    media_type: Option<&str>,
    limits: Limits,
) -> Result<Pulled, PullError> {
    let (manifest, _) = registry.manifest(repo, digest).await?;
    let layer = select_layer(&manifest, media_type)
        .map_err(OciError::from)?
        .clone();
    let bytes = registry.blob(repo, &layer, limits.compressed).await?;
    // Layers inflate one or two at a time in this process, however many sources reconcile:
    // the memory of hostile layers adds up only that far.
    let _turn = INFLATING.acquire().await.map_err(|e| PullError::Refused {
        digest: layer.digest.clone(),
        refused: Refused::Corrupt(e.to_string()),
    })?;
    let (bytes, files) = tokio::task::spawn_blocking(move || {
        let files = untrusted::read(&bytes, limits);
        (bytes, files)
    })
    .await
    .map_err(|e| PullError::Refused {
        digest: layer.digest.clone(),
        refused: Refused::Corrupt(e.to_string()),
    })?;
    let files = files.map_err(|refused| PullError::Refused {
        digest: layer.digest.clone(),
        refused,
    })?;
    Ok(Pulled {
        manifest,
        layer,
        bytes,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<File> {
        vec![
            File {
                path: "apps/b.yaml".into(),
                executable: false,
                data: b"b: 2\n".to_vec(),
            },
            File {
                path: "apps/a.yaml".into(),
                executable: false,
                data: b"a: 1\n".to_vec(),
            },
        ]
    }

    fn origin() -> Origin {
        Origin {
            source: "https://git.example.com/platform".into(),
            revision: "main@sha1:0123456789abcdef0123456789abcdef01234567".into(),
            created: "2026-11-22T00:00:00Z".into(),
        }
    }

    #[test]
    fn the_same_files_and_origin_give_the_same_digest() {
        let a = build(&files(), &origin());
        let mut reversed = files();
        reversed.reverse();
        let b = build(&reversed, &origin());
        assert_eq!(a.digest, b.digest);
        let later = Origin {
            created: "2026-11-23T00:00:00Z".into(),
            ..origin()
        };
        assert_ne!(a.digest, build(&files(), &later).digest);
    }

    #[test]
    fn it_is_in_fluxs_format() {
        let built = build(&files(), &origin());
        let m = parse_manifest(&built.manifest).unwrap();
        assert_eq!(m.schema_version, 2);
        assert_eq!(m.config.media_type, FLUX_CONFIG_MEDIA_TYPE);
        assert_eq!(m.config.digest, digest_of(b"{}"));
        assert_eq!(m.layers.len(), 1);
        assert_eq!(m.layers[0].media_type, FLUX_CONTENT_MEDIA_TYPE);
        assert_eq!(m.layers[0].digest, digest_of(&built.layer));
        assert_eq!(m.layers[0].size, built.layer.len() as u64);
        assert_eq!(m.annotations[REVISION_ANNOTATION], origin().revision);
        assert_eq!(m.annotations[SOURCE_ANNOTATION], origin().source);
        assert_eq!(m.annotations[CREATED_ANNOTATION], origin().created);
        let back = crate::artifact::unpack(&built.layer).unwrap();
        assert_eq!(back.len(), 2);
    }

    #[test]
    fn refs_follow_fluxs_precedence() {
        let tags: Vec<String> = ["1.0.0", "v1.2.0", "1.10.1", "2.0.0", "latest", "nightly"]
            .map(String::from)
            .into();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let all = OciRef {
            tag: Some("nightly".into()),
            semver: Some(">=1.0.0 <2.0.0".into()),
            semver_filter: None,
            digest: Some(digest.clone()),
        };
        assert!(!all.needs_tags());
        assert_eq!(all.pick(&[]), Ok(Pick::Digest(digest.clone())));
        let semver = OciRef {
            digest: None,
            ..all.clone()
        };
        assert!(semver.needs_tags());
        assert_eq!(semver.pick(&tags), Ok(Pick::Tag("1.10.1".into())));
        let tag = OciRef {
            semver: None,
            ..semver.clone()
        };
        assert_eq!(tag.pick(&[]), Ok(Pick::Tag("nightly".into())));
        assert_eq!(OciRef::default().pick(&[]), Ok(Pick::Tag("latest".into())));
        let none = OciRef {
            semver: Some(">=3".into()),
            ..OciRef::default()
        };
        assert_eq!(
            none.pick(&tags),
            Err(PickError::NoSemverMatch(">=3".into()))
        );
        // semverFilter narrows the tags semver picks among (Flux's field).
        let filtered = OciRef {
            semver_filter: Some(r"^v".into()),
            ..semver.clone()
        };
        assert_eq!(filtered.pick(&tags), Ok(Pick::Tag("v1.2.0".into())));
        let nothing = OciRef {
            semver_filter: Some("^rc-".into()),
            ..semver.clone()
        };
        assert!(matches!(
            nothing.pick(&tags),
            Err(PickError::NoSemverMatch(_))
        ));
        let broken = OciRef {
            semver_filter: Some("(".into()),
            ..semver.clone()
        };
        assert!(matches!(broken.pick(&tags), Err(PickError::BadFilter(_))));
        let huge = OciRef {
            semver_filter: Some("(a{1000}){1000}".into()),
            ..semver.clone()
        };
        assert!(
            matches!(huge.pick(&tags), Err(PickError::BadFilter(_))),
            "a pattern that would compile to gigabytes is refused"
        );
        let bad = OciRef {
            digest: Some("sha256:xyz".into()),
            ..OciRef::default()
        };
        assert!(
            bad.pick(&[])
                .unwrap_err()
                .to_string()
                .starts_with("spec.ref.digest")
        );
        let m = format!("sha256:{}", "cd".repeat(32));
        assert_eq!(
            revision(&Pick::Tag("1.10.1".into()), &m),
            format!("1.10.1@{m}")
        );
        assert_eq!(revision(&Pick::Digest(digest), &m), m);
    }

    #[test]
    fn layers_are_selected_by_media_type() {
        let mut m = parse_manifest(&build(&files(), &origin()).manifest).unwrap();
        assert_eq!(
            select_layer(&m, None).unwrap().media_type,
            FLUX_CONTENT_MEDIA_TYPE
        );
        let other = Descriptor {
            media_type: "application/vnd.acme.manifests.tar+gzip".into(),
            ..m.layers[0].clone()
        };
        m.layers.insert(0, other);
        assert_eq!(
            select_layer(&m, Some(FLUX_CONTENT_MEDIA_TYPE))
                .unwrap()
                .media_type,
            FLUX_CONTENT_MEDIA_TYPE
        );
        let e = select_layer(&m, Some("application/x-tar")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no layer has media type 'application/x-tar' (spec.layerSelector.mediaType); the layers are: application/vnd.acme.manifests.tar+gzip, application/vnd.cncf.flux.content.v1.tar+gzip"
        );
        m.layers.clear();
        assert_eq!(select_layer(&m, None), Err(FormatError::NoLayers));
        let index = br#"{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "config": {"mediaType": "x", "digest": "sha256:0", "size": 0}, "layers": []}"#;
        assert!(
            parse_manifest(index)
                .unwrap_err()
                .to_string()
                .contains("an index")
        );
        assert!(parse_manifest(b"{").is_err());
    }
}
