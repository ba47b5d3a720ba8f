//! Flux's OCI artifact format, written and read: an image manifest whose config has the media
//! type `application/vnd.cncf.flux.config.v1+json` and whose one layer is the files as a
//! `.tar.gz` (`application/vnd.cncf.flux.content.v1.tar+gzip`), annotated with where the files
//! came from. Pure: the registry I/O is elsewhere (issue 10).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::artifact::{File, digest_of, pack};

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
    let (layer, layer_digest) = pack(files);
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
        config: Descriptor {
            media_type: FLUX_CONFIG_MEDIA_TYPE.into(),
            digest: digest_of(&config),
            size: config.len() as u64,
            annotations: BTreeMap::new(),
        },
        layers: vec![Descriptor {
            media_type: FLUX_CONTENT_MEDIA_TYPE.into(),
            digest: layer_digest,
            size: layer.len() as u64,
            annotations: BTreeMap::new(),
        }],
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
