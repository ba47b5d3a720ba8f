//! Signature verification of Git commits and tags, in process: OpenPGP signatures (`gpg`) with
//! rPGP and SSH signatures (`gpg.format ssh`, the `sshsig` format, namespace `git`) with
//! ssh-key. Trusted keys come from a Secret: `*.asc` armored OpenPGP public keys and
//! `*.sshpub` OpenSSH public key lines.

use std::collections::BTreeMap;

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails;
use thiserror::Error;

use crate::git::Signed;
use crate::reference::Resolved;

/// What must be signed, as Flux's `spec.verify.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// The commit the artifact is built from.
    Head,
    /// The annotated tag the ref names.
    Tag,
    /// Both.
    TagAndHead,
}

impl VerifyMode {
    /// The objects whose signatures this mode checks on `resolved`; `None` when it asks for a
    /// tag but the ref is not a tag (only the spec can fix that, so check before fetching).
    pub fn objects(self, resolved: &Resolved) -> Option<Vec<Signed>> {
        let mut objects = Vec::new();
        if matches!(self, Self::Tag | Self::TagAndHead) {
            let tag = resolved.fetch_ref.as_deref()?.strip_prefix("refs/tags/")?;
            objects.push(Signed::Tag(tag.to_string()));
        }
        if matches!(self, Self::Head | Self::TagAndHead) {
            objects.push(Signed::Commit(resolved.commit.clone()));
        }
        Some(objects)
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("the verification secret holds no '*.asc' (OpenPGP) or '*.sshpub' (SSH) public keys")]
    NoKeys,
    #[error("verification key '{key}' cannot be read: {message}")]
    BadKey { key: String, message: String },
    #[error("{object} is not signed")]
    Unsigned { object: String },
    #[error("{object} is signed by {signer}, which is not among the trusted keys")]
    UnknownKey { object: String, signer: String },
    #[error("{object} has a bad signature by {signer}: {message}")]
    BadSignature {
        object: String,
        signer: String,
        message: String,
    },
    #[error("{object} has a signature that cannot be read: {message}")]
    Malformed { object: String, message: String },
}

/// The keys a signature may be made with.
#[derive(Debug, Default)]
pub struct Keyring {
    pgp: Vec<(String, SignedPublicKey)>,
    ssh: Vec<(String, ssh_key::PublicKey)>,
}

/// Who signed: the trusted key's name in the Secret and its fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub object: String,
    pub key: String,
    pub fingerprint: String,
}

impl Keyring {
    /// Reads `*.asc` and `*.sshpub` keys of a Secret's data; other keys are ignored.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>) -> Result<Self, VerifyError> {
        let mut ring = Keyring::default();
        for (name, value) in data {
            let bad = |message: String| VerifyError::BadKey {
                key: name.clone(),
                message,
            };
            let text = std::str::from_utf8(value).map_err(|_| bad("not UTF-8".into()))?;
            if name.ends_with(".asc") {
                let keys = SignedPublicKey::from_string_many(text)
                    .map_err(|e| bad(e.to_string()))?
                    .0
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad(e.to_string()))?;
                if keys.is_empty() {
                    return Err(bad("no public key block".into()));
                }
                ring.pgp.extend(keys.into_iter().map(|k| (name.clone(), k)));
            } else if name.ends_with(".sshpub") {
                let before = ring.ssh.len();
                for line in text.lines().map(str::trim) {
                    if line.is_empty() || line.starts_with('#') {
                        continue;
                    }
                    let key =
                        ssh_key::PublicKey::from_openssh(line).map_err(|e| bad(e.to_string()))?;
                    ring.ssh.push((name.clone(), key));
                }
                if ring.ssh.len() == before {
                    return Err(bad("no public key line".into()));
                }
            }
        }
        if ring.pgp.is_empty() && ring.ssh.is_empty() {
            return Err(VerifyError::NoKeys);
        }
        Ok(ring)
    }

    /// Verifies `signature` over `payload`; `object` names what was signed in messages
    /// (like `commit 1a2b3c4`).
    pub fn verify(
        &self,
        object: &str,
        signature: Option<&[u8]>,
        payload: &[u8],
    ) -> Result<Verified, VerifyError> {
        let object = object.to_string();
        let signature = signature.ok_or_else(|| VerifyError::Unsigned {
            object: object.clone(),
        })?;
        let text = String::from_utf8_lossy(signature);
        if text.contains("-----BEGIN SSH SIGNATURE-----") {
            self.verify_ssh(object, &text, payload)
        } else if text.contains("-----BEGIN PGP SIGNATURE-----") {
            self.verify_pgp(object, &text, payload)
        } else {
            Err(VerifyError::Malformed {
                object,
                message: "neither an OpenPGP nor an SSH signature (X.509 is not supported)".into(),
            })
        }
    }

    fn verify_ssh(
        &self,
        object: String,
        pem: &str,
        payload: &[u8],
    ) -> Result<Verified, VerifyError> {
        let sig = ssh_key::SshSig::from_pem(pem.trim()).map_err(|e| VerifyError::Malformed {
            object: object.clone(),
            message: e.to_string(),
        })?;
        let signer = ssh_key::PublicKey::from(sig.public_key().clone())
            .fingerprint(ssh_key::HashAlg::Sha256)
            .to_string();
        let Some((name, key)) = self
            .ssh
            .iter()
            .find(|(_, k)| k.key_data() == sig.public_key())
        else {
            return Err(VerifyError::UnknownKey {
                object,
                signer: format!("SSH key {signer}"),
            });
        };
        key.verify("git", payload, &sig)
            .map_err(|e| VerifyError::BadSignature {
                object: object.clone(),
                signer: format!("SSH key {signer}"),
                message: e.to_string(),
            })?;
        Ok(Verified {
            object,
            key: name.clone(),
            fingerprint: signer,
        })
    }

    fn verify_pgp(
        &self,
        object: String,
        armored: &str,
        payload: &[u8],
    ) -> Result<Verified, VerifyError> {
        let malformed = |e: &dyn std::fmt::Display| VerifyError::Malformed {
            object: object.clone(),
            message: e.to_string(),
        };
        let (sig, _) = DetachedSignature::from_string(armored).map_err(|e| malformed(&e))?;
        let sig = sig.signature;
        let fingerprints = sig.issuer_fingerprint();
        let key_ids = sig.issuer_key_id();
        let signer = fingerprints
            .first()
            .map(|f| format!("{f:X}"))
            .or_else(|| key_ids.first().map(|id| hex::encode_upper(id.as_ref())))
            .unwrap_or_else(|| "an unnamed key".into());
        let issued = |fp: pgp::types::Fingerprint, id: pgp::types::KeyId| {
            fingerprints.iter().any(|f| **f == fp) || key_ids.iter().any(|k| **k == id)
        };
        for (name, key) in &self.pgp {
            let primary = &key.primary_key;
            let result = if issued(primary.fingerprint(), primary.legacy_key_id()) {
                Some(sig.verify(primary, payload))
            } else {
                key.public_subkeys
                    .iter()
                    .find(|sub| issued(sub.key.fingerprint(), sub.key.legacy_key_id()))
                    .map(|sub| sig.verify(&sub.key, payload))
            };
            match result {
                None => continue,
                Some(Ok(())) => {
                    return Ok(Verified {
                        object,
                        key: name.clone(),
                        fingerprint: format!("{:X}", primary.fingerprint()),
                    });
                }
                Some(Err(e)) => {
                    return Err(VerifyError::BadSignature {
                        object,
                        signer: format!("OpenPGP key {signer}"),
                        message: e.to_string(),
                    });
                }
            }
        }
        Err(VerifyError::UnknownKey {
            object,
            signer: format!("OpenPGP key {signer}"),
        })
    }
}

/// Splits a raw tag object into the signed payload and the signature appended to its
/// message, as git does; `None` for an unsigned tag.
pub fn split_tag_signature(raw: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    const MARKERS: [&[u8]; 2] = [
        b"-----BEGIN PGP SIGNATURE-----",
        b"-----BEGIN SSH SIGNATURE-----",
    ];
    let start = (0..raw.len()).rev().find(|&i| {
        (i == 0 || raw[i - 1] == b'\n') && MARKERS.iter().any(|m| raw[i..].starts_with(m))
    });
    match start {
        Some(i) => (raw[..i].to_vec(), Some(raw[i..].to_vec())),
        None => (raw.to_vec(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_name_the_objects_to_check() {
        let at = |fetch_ref: &str| Resolved {
            fetch_ref: Some(fetch_ref.into()),
            commit: "abc".into(),
            revision: String::new(),
        };
        let commit = Signed::Commit("abc".into());
        let tag = Signed::Tag("v1".into());
        let on_tag = at("refs/tags/v1");
        assert_eq!(
            VerifyMode::Head.objects(&on_tag),
            Some(vec![commit.clone()])
        );
        assert_eq!(VerifyMode::Tag.objects(&on_tag), Some(vec![tag.clone()]));
        assert_eq!(
            VerifyMode::TagAndHead.objects(&on_tag),
            Some(vec![tag, commit.clone()])
        );
        let on_branch = at("refs/heads/main");
        assert_eq!(VerifyMode::Head.objects(&on_branch), Some(vec![commit]));
        assert_eq!(VerifyMode::Tag.objects(&on_branch), None);
        assert_eq!(VerifyMode::TagAndHead.objects(&on_branch), None);
    }

    #[test]
    fn tag_signature_is_split_at_the_last_marker_line() {
        let raw = b"object 1\ntype commit\ntag v1\n\nmsg mentions -----BEGIN PGP SIGNATURE----- inline\n-----BEGIN PGP SIGNATURE-----\nabc\n-----END PGP SIGNATURE-----\n";
        let (payload, sig) = split_tag_signature(raw);
        assert!(payload.ends_with(b"inline\n"));
        assert!(sig.is_some_and(|s| s.starts_with(b"-----BEGIN PGP SIGNATURE-----\nabc")));
        let (payload, sig) = split_tag_signature(b"object 1\n\nplain\n");
        assert_eq!(payload, b"object 1\n\nplain\n");
        assert!(sig.is_none());
    }

    #[test]
    fn keyring_needs_keys_and_names_a_bad_one() {
        let data = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.as_bytes().to_vec())]);
        assert_eq!(
            Keyring::from_secret_data(&data("README", "x")).unwrap_err(),
            VerifyError::NoKeys
        );
        assert!(matches!(
            Keyring::from_secret_data(&data("team.sshpub", "ssh-ed25519 nonsense")),
            Err(VerifyError::BadKey { key, .. }) if key == "team.sshpub"
        ));
        assert!(matches!(
            Keyring::from_secret_data(&data("team.asc", "not armored")),
            Err(VerifyError::BadKey { key, .. }) if key == "team.asc"
        ));
        let ring = Keyring::from_secret_data(&data(
            "dev.sshpub",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICqAKr7jKcwhF0PB1T2MTXbFgqzo/uU4qNxPYv3JFnRx unit\n",
        ))
        .unwrap();
        assert_eq!(
            ring.verify("commit 1234567", None, b"payload")
                .unwrap_err()
                .to_string(),
            "commit 1234567 is not signed"
        );
    }
}
