//! Cosign signatures of OCI artifacts, as cosign stores them: an image tagged
//! `sha256-<hex>.sig` beside the artifact, one layer per signature, each layer a
//! simple-signing payload (JSON naming the signed manifest digest) with the base64 signature
//! in the layer's `dev.cosignproject.cosign/signature` annotation. Keys and signatures are
//! sigstore's; which signature is trusted, and why one is not, is decided here.
//!
//! A signature is checked before its payload is believed: a payload naming another digest
//! counts only when a trusted key signed it (then it is a replayed signature, and says so).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{CosignVerificationKey, SigStoreSigner, Signature, SigningScheme};
use thiserror::Error;

use super::keyless::{Evidence, Identities, Keyless, KeylessError, TRUSTED_ROOT_KEY, TrustedRoot};
use super::registry::{OciError, Registry, Repository};
use super::{Descriptor, MANIFEST_MEDIA_TYPE, Manifest};

pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const PAYLOAD_TYPE: &str = "cosign container image signature";
const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// A payload is a few hundred bytes.
const PAYLOAD_LIMIT: u64 = 1 << 20;

/// The tag cosign stores the signatures of manifest `digest` under.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

/// The simple-signing payload cosign signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payload {
    pub critical: Critical,
    #[serde(default)]
    pub optional: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Critical {
    pub identity: Identity,
    pub image: Image,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    #[serde(rename = "docker-reference")]
    pub docker_reference: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    #[serde(rename = "docker-manifest-digest")]
    pub docker_manifest_digest: String,
}

/// The payload that signs manifest `digest` of `repo`.
pub fn payload(repo: &Repository, digest: &str) -> Vec<u8> {
    let p = Payload {
        critical: Critical {
            identity: Identity {
                docker_reference: repo.name(),
            },
            image: Image {
                docker_manifest_digest: digest.into(),
            },
            kind: PAYLOAD_TYPE.into(),
        },
        optional: None,
    };
    // Plain strings serialize without fail.
    serde_json::to_vec(&p).unwrap_or_default()
}

/// One signature found beside an artifact: its payload and its layer's annotations (the
/// signature, and for keyless signatures the certificate, chain and Rekor bundle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub payload: Vec<u8>,
    pub annotations: BTreeMap<String, String>,
}

impl Found {
    /// The base64 signature, as in the annotation.
    pub fn signature(&self) -> Option<&str> {
        self.annotations
            .get(SIGNATURE_ANNOTATION)
            .map(String::as_str)
    }
}

#[derive(Debug, Error)]
pub enum CosignError {
    #[error("key '{name}': {why}")]
    Key { name: String, why: String },
    #[error("the Secret has no public keys (entries named *.pub)")]
    NoKeys,
    #[error(
        "the Secret has no {TRUSTED_ROOT_KEY} entry (Sigstore's trusted root, which keyless verification checks certificates and Rekor bundles against)"
    )]
    NoTrustedRoot,
    #[error(transparent)]
    Keyless(#[from] KeylessError),
    #[error("signing: {0}")]
    Sign(String),
}

/// Why an artifact was not verified.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Unverified {
    #[error("the artifact is not signed: no cosign signature for {digest} (tag {tag})")]
    Unsigned { digest: String, tag: String },
    #[error(
        "no signature of {digest} is by a trusted signer ({count} signature(s) found, checked against {trusted}){why}"
    )]
    Untrusted {
        digest: String,
        count: usize,
        trusted: String,
        /// Why each signature was refused, where there is more to say than "another key".
        why: String,
    },
    #[error(
        "a signature by trusted {by} names another artifact: its payload is for {named}, not {digest} (a signature copied from another artifact?)"
    )]
    OtherDigest {
        digest: String,
        named: String,
        by: String,
    },
}

/// The public keys an artifact may be signed with: every `*.pub` entry of a Secret.
pub struct Keys {
    keys: Vec<(String, CosignVerificationKey)>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|(n, _)| n))
            .finish()
    }
}

impl Keys {
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, CosignError> {
        let keys = data
            .iter()
            .filter(|(name, _)| name.ends_with(".pub"))
            .map(|(name, pem)| {
                CosignVerificationKey::try_from_pem(pem)
                    .map(|k| (name.clone(), k))
                    .map_err(|e| CosignError::Key {
                        name: name.clone(),
                        why: format!("not a PEM public key: {e}"),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(CosignError::NoKeys);
        }
        Ok(Self { keys })
    }

    fn names(&self) -> String {
        let names = self
            .keys
            .iter()
            .map(|(n, _)| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ");
        format!("keys {names}")
    }

    fn signer(&self, signature: &str, payload: &[u8]) -> Option<String> {
        self.keys.iter().find_map(|(name, key)| {
            key.verify_signature(Signature::Base64Encoded(signature.as_bytes()), payload)
                .is_ok()
                .then(|| format!("key '{name}'"))
        })
    }
}

/// Who may sign an artifact: public keys, or keyless identities under a trusted root.
pub enum Trust {
    Keys(Keys),
    Keyless(Keyless),
}

impl Trust {
    /// The trust a Secret gives: its `*.pub` keys, or, when `identities` are given, its
    /// `trusted_root.json` for keyless signatures by those identities.
    pub fn from_secret_data(
        data: &BTreeMap<String, Vec<u8>>,
        identities: Option<Identities>,
    ) -> Result<Self, CosignError> {
        let Some(identities) = identities else {
            return Keys::from_secret_data(data).map(Trust::Keys);
        };
        let root = data
            .get(TRUSTED_ROOT_KEY)
            .ok_or(CosignError::NoTrustedRoot)?;
        let root = TrustedRoot::from_json(root)?;
        Ok(Trust::Keyless(Keyless::new(root, identities)))
    }

    fn describe(&self) -> String {
        match self {
            Trust::Keys(k) => k.names(),
            Trust::Keyless(k) => k.describe(),
        }
    }

    /// The trusted signer of `f`, or why it is not one (`None`: nothing more to say than
    /// that no trusted key made it).
    fn signer(&self, f: &Found) -> Result<String, Option<String>> {
        let signature = f
            .signature()
            .ok_or_else(|| Some(format!("a layer has no {SIGNATURE_ANNOTATION} annotation")))?;
        match self {
            Trust::Keys(k) => k.signer(signature, &f.payload).ok_or(None),
            Trust::Keyless(k) => k
                .signer(&Evidence {
                    payload: &f.payload,
                    signature,
                    annotations: &f.annotations,
                })
                .map(|s| s.to_string())
                .map_err(Some),
        }
    }

    /// The trusted signer of `digest` among `found`, or why there is none. A signature is
    /// checked before its payload is believed.
    pub fn verify(&self, found: &[Found], digest: &str) -> Result<String, Unverified> {
        if found.is_empty() {
            return Err(Unverified::Unsigned {
                digest: digest.into(),
                tag: signature_tag(digest),
            });
        }
        let mut replayed = None;
        let mut why = Vec::new();
        for f in found {
            let by = match self.signer(f) {
                Ok(by) => by,
                Err(reason) => {
                    why.extend(reason);
                    continue;
                }
            };
            let named = serde_json::from_slice::<Payload>(&f.payload)
                .map(|p| p.critical.image.docker_manifest_digest)
                .unwrap_or_else(|e| format!("nothing readable ({e})"));
            if named == digest {
                return Ok(by);
            }
            replayed.get_or_insert(Unverified::OtherDigest {
                digest: digest.into(),
                named,
                by,
            });
        }
        Err(replayed.unwrap_or_else(|| Unverified::Untrusted {
            digest: digest.into(),
            count: found.len(),
            trusted: self.describe(),
            why: why.iter().map(|w| format!("; {w}")).collect(),
        }))
    }
}

/// The signatures stored beside manifest `digest` of `repo` (none when it has no `.sig` tag).
pub async fn signatures(
    registry: &Registry,
    repo: &Repository,
    digest: &str,
) -> Result<Vec<Found>, OciError> {
    let Some((manifest, _)) = registry.manifest_at(repo, &signature_tag(digest)).await? else {
        return Ok(Vec::new());
    };
    let mut found = Vec::new();
    for layer in manifest
        .layers
        .iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE)
    {
        let payload = registry.blob(repo, layer, PAYLOAD_LIMIT).await?;
        found.push(Found {
            payload,
            annotations: layer.annotations.clone(),
        });
    }
    Ok(found)
}

/// A private key to sign with: PKCS#8 PEM, or cosign's encrypted PEM with its password.
pub struct Signer {
    signer: SigStoreSigner,
}

impl Signer {
    pub fn from_pem(pem: &[u8], password: Option<&[u8]>) -> Result<Self, CosignError> {
        let pair = match password {
            Some(p) => SigStoreKeyPair::from_encrypted_pem(pem, p),
            None => SigStoreKeyPair::from_pem(pem),
        }
        .map_err(|e| CosignError::Sign(format!("the key cannot be read: {e}")))?;
        let signer = [
            SigningScheme::ECDSA_P256_SHA256_ASN1,
            SigningScheme::ECDSA_P384_SHA384_ASN1,
            SigningScheme::ED25519,
        ]
        .iter()
        .find_map(|scheme| pair.to_sigstore_signer(scheme).ok())
        .ok_or_else(|| CosignError::Sign("only ECDSA P-256, P-384 and Ed25519 keys sign".into()))?;
        Ok(Self { signer })
    }

    /// A new ECDSA P-256 key (cosign's default), and its public key as PEM.
    pub fn generate() -> Result<(Self, String), CosignError> {
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .map_err(|e| CosignError::Sign(e.to_string()))?;
        let public = signer
            .to_sigstore_keypair()
            .and_then(|p| p.public_key_to_pem())
            .map_err(|e| CosignError::Sign(e.to_string()))?;
        Ok((Self { signer }, public))
    }

    /// The private key as unencrypted PKCS#8 PEM.
    pub fn private_pem(&self) -> Result<String, CosignError> {
        self.signer
            .to_sigstore_keypair()
            .and_then(|p| p.private_key_to_pem())
            .map(|pem| pem.to_string())
            .map_err(|e| CosignError::Sign(e.to_string()))
    }

    /// The base64 signature of `payload`.
    pub fn sign(&self, payload: &[u8]) -> Result<String, CosignError> {
        let raw = self
            .signer
            .sign(payload)
            .map_err(|e| CosignError::Sign(e.to_string()))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(raw))
    }
}

/// Signs manifest `digest` of `repo` with `signer` and stores the signature as cosign does,
/// beside any signatures already there.
pub async fn sign(
    registry: &Registry,
    repo: &Repository,
    digest: &str,
    signer: &Signer,
) -> Result<(), SignError> {
    let payload = payload(repo, digest);
    let signature = signer.sign(&payload)?;
    let annotations = [(SIGNATURE_ANNOTATION.to_string(), signature)].into();
    attach(registry, repo, digest, payload, annotations).await
}

/// Stores one signature layer (`payload`, with `annotations` carrying the signature and, for
/// keyless signatures, certificate and bundle) under manifest `digest`'s signature tag,
/// keeping the layers already there.
pub async fn attach(
    registry: &Registry,
    repo: &Repository,
    digest: &str,
    payload: Vec<u8>,
    annotations: BTreeMap<String, String>,
) -> Result<(), SignError> {
    let tag = signature_tag(digest);
    let mut layers: Vec<(Descriptor, Vec<u8>)> = Vec::new();
    if let Some((old, _)) = registry.manifest_at(repo, &tag).await? {
        for layer in old.layers {
            let data = registry.blob(repo, &layer, PAYLOAD_LIMIT).await?;
            layers.push((layer, data));
        }
    }
    let layer = Descriptor {
        annotations,
        ..Descriptor::of(SIMPLE_SIGNING_MEDIA_TYPE, &payload)
    };
    if !layers.iter().any(|(l, _)| l == &layer) {
        layers.push((layer, payload));
    }
    let config = b"{}".to_vec();
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.into()),
        config: Descriptor::of(CONFIG_MEDIA_TYPE, &config),
        layers: layers.iter().map(|(l, _)| l.clone()).collect(),
        annotations: BTreeMap::new(),
    };
    let bytes = serde_json::to_vec(&manifest).map_err(|e| CosignError::Sign(e.to_string()))?;
    let blobs =
        std::iter::once((&manifest.config, &config)).chain(layers.iter().map(|(l, d)| (l, d)));
    registry.push_parts(repo, &tag, blobs, &bytes).await?;
    Ok(())
}

#[derive(Debug, Error)]
pub enum SignError {
    #[error(transparent)]
    Cosign(#[from] CosignError),
    #[error(transparent)]
    Registry(#[from] OciError),
}

#[cfg(test)]
mod tests {
    use super::super::keyless::{
        BUNDLE_ANNOTATION, CERTIFICATE_ANNOTATION, Identities, TrustedRoot,
    };
    use super::*;

    fn repo() -> Repository {
        Repository::parse("oci://127.0.0.1:5000/team/app").unwrap()
    }

    const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn keys_of(pems: &[(&str, &str)]) -> Trust {
        let data = pems
            .iter()
            .map(|(n, p)| (n.to_string(), p.as_bytes().to_vec()))
            .collect();
        Trust::Keys(Keys::from_secret_data(&data).unwrap())
    }

    fn found(payload: Vec<u8>, signature: String) -> Found {
        Found {
            payload,
            annotations: [(SIGNATURE_ANNOTATION.to_string(), signature)].into(),
        }
    }

    fn signed(signer: &Signer, digest: &str) -> Found {
        let payload = payload(&repo(), digest);
        found(payload.clone(), signer.sign(&payload).unwrap())
    }

    #[test]
    fn signature_tags_are_cosigns() {
        assert_eq!(
            signature_tag(DIGEST),
            "sha256-1111111111111111111111111111111111111111111111111111111111111111.sig"
        );
    }

    #[test]
    fn payloads_are_simple_signing() {
        let p: serde_json::Value = serde_json::from_slice(&payload(&repo(), DIGEST)).unwrap();
        assert_eq!(p["critical"]["image"]["docker-manifest-digest"], DIGEST);
        assert_eq!(
            p["critical"]["identity"]["docker-reference"],
            "127.0.0.1:5000/team/app"
        );
        assert_eq!(p["critical"]["type"], PAYLOAD_TYPE);
    }

    #[test]
    fn each_way_of_failing_says_which_it_was() {
        let (trusted, trusted_pub) = Signer::generate().unwrap();
        let (stranger, _) = Signer::generate().unwrap();
        let keys = keys_of(&[("release.pub", &trusted_pub)]);

        assert_eq!(
            keys.verify(&[signed(&trusted, DIGEST)], DIGEST).unwrap(),
            "key 'release.pub'"
        );
        // The trusted signature is found among others.
        assert!(
            keys.verify(
                &[signed(&stranger, DIGEST), signed(&trusted, DIGEST)],
                DIGEST
            )
            .is_ok()
        );

        let e = keys.verify(&[], DIGEST).unwrap_err();
        assert!(matches!(e, Unverified::Unsigned { .. }), "{e}");
        assert!(e.to_string().contains(".sig"), "{e}");

        let e = keys
            .verify(&[signed(&stranger, DIGEST)], DIGEST)
            .unwrap_err();
        assert!(matches!(e, Unverified::Untrusted { count: 1, .. }), "{e}");
        assert!(e.to_string().contains("'release.pub'"), "{e}");

        let e = keys.verify(&[signed(&trusted, OTHER)], DIGEST).unwrap_err();
        assert!(matches!(e, Unverified::OtherDigest { .. }), "{e}");
        assert!(e.to_string().contains(OTHER), "{e}");

        // A stranger's payload naming another digest is untrusted, not a replay: its payload
        // is not believed.
        let e = keys
            .verify(&[signed(&stranger, OTHER)], DIGEST)
            .unwrap_err();
        assert!(matches!(e, Unverified::Untrusted { .. }), "{e}");

        // A payload changed after signing does not verify.
        let mut tampered = signed(&trusted, OTHER);
        tampered.payload = payload(&repo(), DIGEST);
        let e = keys.verify(&[tampered], DIGEST).unwrap_err();
        assert!(matches!(e, Unverified::Untrusted { .. }), "{e}");
    }

    /// A signature made by the real cosign tool (provenance in `fixtures/README.md`).
    #[test]
    fn a_signature_made_by_cosign_verifies() {
        let public = include_str!("fixtures/busybox.pub");
        let found = found(
            include_bytes!("fixtures/busybox.payload.json").to_vec(),
            include_str!("fixtures/busybox.sig").trim().to_string(),
        );
        let digest = "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b";
        let keys = keys_of(&[("cosign.pub", public)]);
        assert_eq!(
            keys.verify(std::slice::from_ref(&found), digest).unwrap(),
            "key 'cosign.pub'"
        );
        // The payload is what skewer writes for the same image and digest.
        let repo = Repository {
            registry: "registry-testing.svc.lan".into(),
            repository: "busybox".into(),
        };
        assert_eq!(payload(&repo, digest), found.payload);
        let e = keys.verify(&[found], DIGEST).unwrap_err();
        assert!(matches!(e, Unverified::OtherDigest { .. }), "{e}");
    }

    /// A keyless signature by cosign and Sigstore's public-good instance (provenance in
    /// `fixtures/README.md`), judged through the same three outcomes as keys.
    #[test]
    fn a_keyless_signature_made_by_cosign_verifies_offline() {
        let digest = "sha256:5f481572d088dc4023afb35fced9530ced3d9b03bf7299c6f492163cb9f0452e";
        let layer = Found {
            payload: include_bytes!("fixtures/keyless/payload.json").to_vec(),
            annotations: [
                (
                    SIGNATURE_ANNOTATION,
                    include_str!("fixtures/keyless/signature").trim(),
                ),
                (
                    CERTIFICATE_ANNOTATION,
                    include_str!("fixtures/keyless/certificate.pem"),
                ),
                (
                    BUNDLE_ANNOTATION,
                    include_str!("fixtures/keyless/bundle.json"),
                ),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
        };
        let trust = |subject: &str| {
            let root = TrustedRoot::from_json(include_bytes!("fixtures/keyless/trusted_root.json"))
                .unwrap();
            let ids = Identities::new(&[(".*".into(), subject.into())]).unwrap();
            Trust::Keyless(Keyless::new(root, ids))
        };
        let found = std::slice::from_ref(&layer);
        assert_eq!(
            trust("@castelli.me$").verify(found, digest).unwrap(),
            "issuer '', subject 'flavio@castelli.me'"
        );
        let e = trust("@castelli.me$").verify(found, DIGEST).unwrap_err();
        assert!(matches!(e, Unverified::OtherDigest { .. }), "{e}");
        let e = trust("^ci@example.com$").verify(found, digest).unwrap_err();
        assert!(matches!(e, Unverified::Untrusted { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("signed by issuer '', subject 'flavio@castelli.me'"),
            "{e}"
        );
        // The same signature checked against keys: no key made it.
        let (_, public) = Signer::generate().unwrap();
        let e = keys_of(&[("k.pub", &public)])
            .verify(found, digest)
            .unwrap_err();
        assert!(matches!(e, Unverified::Untrusted { .. }), "{e}");
    }

    #[test]
    fn keys_come_from_pub_entries_and_bad_ones_are_named() {
        let data: BTreeMap<String, Vec<u8>> = [("notes.txt".to_string(), b"hello".to_vec())].into();
        assert!(matches!(
            Keys::from_secret_data(&data),
            Err(CosignError::NoKeys)
        ));
        let data: BTreeMap<String, Vec<u8>> =
            [("ci.pub".to_string(), b"not a key".to_vec())].into();
        let e = Keys::from_secret_data(&data).unwrap_err().to_string();
        assert!(e.starts_with("key 'ci.pub'"), "{e}");
    }

    #[test]
    fn private_keys_round_trip_through_pem() {
        let (signer, public) = Signer::generate().unwrap();
        let again = Signer::from_pem(signer.private_pem().unwrap().as_bytes(), None).unwrap();
        let keys = keys_of(&[("k.pub", &public)]);
        assert!(keys.verify(&[signed(&again, DIGEST)], DIGEST).is_ok());
        assert!(Signer::from_pem(b"nope", None).is_err());
    }
}
