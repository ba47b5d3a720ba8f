//! Keyless cosign signatures, checked offline against a trusted root.
//!
//! A keyless signature carries, in annotations of its layer, a short-lived certificate that
//! Fulcio issued to an OIDC identity, and a Rekor bundle: the transparency log's signed
//! promise (SET) that it logged this signature at `integratedTime`. The signature is trusted
//! when all of these hold:
//! - the SET verifies with a Rekor key of the trusted root, and the logged entry is this very
//!   signature, payload hash and certificate;
//! - the certificate chains to a Fulcio CA of the trusted root, for code signing, at the
//!   logged time (the certificate lives minutes; the log proves it was used while valid);
//! - the certificate's key verifies the signature over the payload;
//! - the certificate's OIDC issuer and subject match one of the allowed identities.
//!
//! The trusted root is Sigstore's `trusted_root.json` (what `cosign verify --trusted-root`
//! reads), so a private Sigstore and the public-good instance are configured alike and nothing
//! is fetched.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use regex::Regex;
use rustls_pki_types::{CertificateDer, TrustAnchor, UnixTime};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use sigstore::crypto::{CosignVerificationKey, Signature};
use thiserror::Error;
use x509_cert::Certificate;
use x509_cert::der::asn1::{ObjectIdentifier, Utf8StringRef};
use x509_cert::der::{Decode, DecodePem, Encode};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
pub const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
/// The Secret entry holding the trusted root.
pub const TRUSTED_ROOT_KEY: &str = "trusted_root.json";

/// Fulcio's OIDC issuer extension: raw UTF-8 (v1) and DER UTF8String (v2).
const ISSUER_V1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.1");
const ISSUER_V2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.8");
/// id-kp-codeSigning (1.3.6.1.5.5.7.3.3), DER contents.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

#[derive(Debug, Error)]
pub enum KeylessError {
    #[error("trusted root: {0}")]
    Root(String),
    #[error("matchOIDCIdentity[{index}].{field}: {why}")]
    Identity {
        index: usize,
        field: &'static str,
        why: String,
    },
    #[error("matchOIDCIdentity: at least one identity (issuer and subject) is required")]
    NoIdentities,
}

/// Fulcio CAs and Rekor keys trusted for keyless signatures, each for its `validFor` window.
pub struct TrustedRoot {
    authorities: Vec<Ca>,
    /// By log ID: the hex SHA-256 of the key's DER encoding, as Rekor bundles name it.
    rekor: BTreeMap<String, (CosignVerificationKey, Window)>,
}

struct Ca {
    anchor: TrustAnchor<'static>,
    intermediates: Vec<CertificateDer<'static>>,
    window: Window,
}

/// `validFor`: seconds since the epoch; no end means still valid.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    start: i64,
    end: Option<i64>,
}

impl Window {
    fn parse(v: Option<&ValidFor>, what: &str) -> Result<Self, KeylessError> {
        let time = |s: &str| {
            s.parse::<jiff::Timestamp>()
                .map(|t| t.as_second())
                .map_err(|e| KeylessError::Root(format!("{what}: validFor '{s}': {e}")))
        };
        let Some(v) = v else {
            return Ok(Self::default());
        };
        Ok(Self {
            start: v.start.as_deref().map(time).transpose()?.unwrap_or(0),
            end: v.end.as_deref().map(time).transpose()?,
        })
    }

    fn contains(&self, t: i64) -> bool {
        self.start <= t && self.end.is_none_or(|end| t <= end)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RootJson {
    #[serde(default)]
    tlogs: Vec<Tlog>,
    #[serde(default)]
    certificate_authorities: Vec<Authority>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Tlog {
    #[serde(default)]
    base_url: String,
    public_key: Option<RawBytes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBytes {
    raw_bytes: Option<String>,
    valid_for: Option<ValidFor>,
}

#[derive(Deserialize)]
struct ValidFor {
    start: Option<String>,
    end: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Authority {
    #[serde(default)]
    uri: String,
    cert_chain: Chain,
    valid_for: Option<ValidFor>,
}

#[derive(Deserialize)]
struct Chain {
    #[serde(default)]
    certificates: Vec<RawBytes>,
}

fn base64_field(value: Option<&str>, what: &str) -> Result<Vec<u8>, KeylessError> {
    let value = value.ok_or_else(|| KeylessError::Root(format!("{what}: rawBytes is missing")))?;
    base64::engine::general_purpose::STANDARD
        .decode(value)
        .map_err(|e| KeylessError::Root(format!("{what}: rawBytes is not base64: {e}")))
}

impl TrustedRoot {
    /// Reads Sigstore's `trusted_root.json`. Every CA chain's last certificate is a trust
    /// anchor, the ones before it intermediates; every log's key verifies bundles.
    pub fn from_json(json: &[u8]) -> Result<Self, KeylessError> {
        let root: RootJson = serde_json::from_slice(json)
            .map_err(|e| KeylessError::Root(format!("not a Sigstore trusted root: {e}")))?;
        let mut authorities = Vec::new();
        for (i, ca) in root.certificate_authorities.iter().enumerate() {
            let what = format!("certificateAuthorities[{i}] ({})", ca.uri);
            let mut chain = ca
                .cert_chain
                .certificates
                .iter()
                .enumerate()
                .map(|(j, c)| {
                    base64_field(c.raw_bytes.as_deref(), &format!("{what} certificate {j}"))
                        .map(CertificateDer::from)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let root = chain
                .pop()
                .ok_or_else(|| KeylessError::Root(format!("{what}: certChain is empty")))?;
            let anchor = webpki::anchor_from_trusted_cert(&root)
                .map_err(|e| KeylessError::Root(format!("{what}: its root certificate: {e}")))?
                .to_owned();
            authorities.push(Ca {
                anchor,
                intermediates: chain,
                window: Window::parse(ca.valid_for.as_ref(), &what)?,
            });
        }
        let mut rekor = BTreeMap::new();
        for (i, log) in root.tlogs.iter().enumerate() {
            let what = format!("tlogs[{i}] ({}) publicKey", log.base_url);
            let key = log.public_key.as_ref();
            let der = base64_field(key.and_then(|k| k.raw_bytes.as_deref()), &what)?;
            let window = Window::parse(key.and_then(|k| k.valid_for.as_ref()), &what)?;
            let key = CosignVerificationKey::try_from_der(&der)
                .map_err(|e| KeylessError::Root(format!("{what}: {e}")))?;
            rekor.insert(hex::encode(Sha256::digest(&der)), (key, window));
        }
        if authorities.is_empty() {
            return Err(KeylessError::Root(
                "no certificateAuthorities: no certificate can be trusted".into(),
            ));
        }
        if rekor.is_empty() {
            return Err(KeylessError::Root(
                "no tlogs: the signing time of a certificate cannot be proven".into(),
            ));
        }
        Ok(Self { authorities, rekor })
    }
}

/// An allowed signer: regular expressions over the certificate's OIDC issuer and subject
/// (the SAN email or URI), each matching anywhere unless anchored, as cosign's
/// `--certificate-oidc-issuer-regexp` and `--certificate-identity-regexp` do.
struct Identity {
    issuer: Regex,
    subject: Regex,
}

/// The identities allowed to sign; any one suffices.
pub struct Identities(Vec<Identity>);

/// A trusted root and the identities allowed to sign.
pub struct Keyless {
    root: TrustedRoot,
    identities: Identities,
}

/// Who a certificate was issued to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    pub issuer: String,
    pub subject: String,
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "issuer '{}', subject '{}'", self.issuer, self.subject)
    }
}

/// Everything a keyless signature layer carries.
pub struct Evidence<'a> {
    pub payload: &'a [u8],
    pub signature: &'a str,
    pub annotations: &'a BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RekorBundle {
    #[serde(rename = "SignedEntryTimestamp")]
    set: String,
    #[serde(rename = "Payload")]
    payload: BundlePayload,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BundlePayload {
    body: String,
    integrated_time: i64,
    log_index: i64,
    #[serde(rename = "logID")]
    log_id: String,
}

impl BundlePayload {
    /// RFC 8785 canonical JSON, which the SET signs: keys sorted, no whitespace.
    fn canonical(&self) -> Vec<u8> {
        let s = |v: &str| serde_json::Value::from(v).to_string();
        format!(
            r#"{{"body":{},"integratedTime":{},"logID":{},"logIndex":{}}}"#,
            s(&self.body),
            self.integrated_time,
            s(&self.log_id),
            self.log_index
        )
        .into_bytes()
    }
}

/// A `hashedrekord` (or older `rekord`) entry: what Rekor logged.
#[derive(Deserialize)]
struct Entry {
    kind: String,
    spec: EntrySpec,
}

#[derive(Deserialize)]
struct EntrySpec {
    data: EntryData,
    signature: EntrySignature,
}

#[derive(Deserialize)]
struct EntryData {
    hash: EntryHash,
}

#[derive(Deserialize)]
struct EntryHash {
    algorithm: String,
    value: String,
}

#[derive(Deserialize)]
struct EntrySignature {
    content: String,
    #[serde(rename = "publicKey")]
    public_key: EntryKey,
}

#[derive(Deserialize)]
struct EntryKey {
    content: String,
}

fn b64(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| e.to_string())
}

fn pem_to_der(pem: &[u8]) -> Result<Vec<u8>, String> {
    Certificate::from_pem(pem)
        .and_then(|c| c.to_der())
        .map_err(|e| e.to_string())
}

impl Identities {
    /// `identities` are (issuer, subject) regular expressions.
    pub fn new(identities: &[(String, String)]) -> Result<Self, KeylessError> {
        if identities.is_empty() {
            return Err(KeylessError::NoIdentities);
        }
        let compile = |index: usize, field: &'static str, re: &str| {
            if re.is_empty() {
                return Err(KeylessError::Identity {
                    index,
                    field,
                    why: "must not be empty (use '.*' to accept any)".into(),
                });
            }
            Regex::new(re).map_err(|e| KeylessError::Identity {
                index,
                field,
                why: format!("not a regular expression: {e}"),
            })
        };
        identities
            .iter()
            .enumerate()
            .map(|(i, (issuer, subject))| {
                Ok(Identity {
                    issuer: compile(i, "issuer", issuer)?,
                    subject: compile(i, "subject", subject)?,
                })
            })
            .collect::<Result<_, KeylessError>>()
            .map(Self)
    }

    fn allow(&self, signer: &Signer) -> bool {
        self.0
            .iter()
            .any(|i| i.issuer.is_match(&signer.issuer) && i.subject.is_match(&signer.subject))
    }
}

impl Keyless {
    pub fn new(root: TrustedRoot, identities: Identities) -> Self {
        Self { root, identities }
    }

    pub fn describe(&self) -> String {
        let ids = self
            .identities
            .0
            .iter()
            .map(|i| format!("issuer ~ '{}', subject ~ '{}'", i.issuer, i.subject))
            .collect::<Vec<_>>()
            .join("; ");
        format!("keyless identities [{ids}]")
    }

    /// The identity that made this signature, or why it is not trusted.
    pub fn signer(&self, e: &Evidence<'_>) -> Result<Signer, String> {
        let annotation = |name: &str, missing: &str| {
            e.annotations
                .get(name)
                .ok_or_else(|| format!("no {name} annotation: {missing}"))
        };
        let cert_pem = annotation(CERTIFICATE_ANNOTATION, "made with a key, not keyless")?;
        let bundle = annotation(BUNDLE_ANNOTATION, "its signing time is not proven by Rekor")?;
        let cert_der = pem_to_der(cert_pem.as_bytes())
            .map_err(|why| format!("the certificate cannot be read: {why}"))?;
        let time = self.logged(bundle, e, &cert_der)?;
        let chain = match e.annotations.get(CHAIN_ANNOTATION) {
            Some(pem) => Certificate::load_pem_chain(pem.as_bytes())
                .and_then(|certs| certs.iter().map(|c| c.to_der()).collect())
                .map_err(|why| format!("the certificate chain cannot be read: {why}"))?,
            None => Vec::new(),
        };
        // Only CAs trusted at the time the signature was logged.
        let current = || {
            self.root
                .authorities
                .iter()
                .filter(|ca| ca.window.contains(time))
        };
        let anchors: Vec<TrustAnchor<'_>> = current().map(|ca| ca.anchor.clone()).collect();
        let intermediates: Vec<CertificateDer<'_>> = chain
            .into_iter()
            .map(CertificateDer::from)
            .chain(current().flat_map(|ca| ca.intermediates.iter().cloned()))
            .collect();
        let leaf = CertificateDer::from(cert_der.as_slice());
        webpki::EndEntityCert::try_from(&leaf)
            .and_then(|ee| {
                ee.verify_for_usage(
                    webpki::ALL_VERIFICATION_ALGS,
                    &anchors,
                    &intermediates,
                    unix_time(time),
                    webpki::KeyUsage::required(CODE_SIGNING),
                    None,
                    None,
                )
                .map(|_| ())
            })
            .map_err(|why| {
                format!(
                    "the certificate is not one the trusted root issued for code signing \
                     and valid when Rekor logged it: {why}"
                )
            })?;
        let cert = Certificate::from_der(&cert_der).map_err(|why| why.to_string())?;
        CosignVerificationKey::try_from(cert.tbs_certificate().subject_public_key_info())
            .map_err(|why| format!("the certificate's key cannot be used: {why}"))?
            .verify_signature(Signature::Base64Encoded(e.signature.as_bytes()), e.payload)
            .map_err(|_| "the signature does not verify with the certificate's key".to_string())?;
        let signer = identity_of(&cert)?;
        if self.identities.allow(&signer) {
            Ok(signer)
        } else {
            Err(format!(
                "signed by {signer}, which no spec.verify.matchOIDCIdentity entry matches"
            ))
        }
    }

    /// The time Rekor logged this very signature, once the bundle's SET verifies and its entry
    /// names this payload, signature and certificate.
    fn logged(&self, bundle: &str, e: &Evidence<'_>, cert_der: &[u8]) -> Result<i64, String> {
        let fail = |why: String| format!("the Rekor bundle: {why}");
        let bundle: RekorBundle =
            serde_json::from_str(bundle).map_err(|why| fail(why.to_string()))?;
        let p = &bundle.payload;
        let key = match self.root.rekor.get(&p.log_id) {
            Some((key, window)) if window.contains(p.integrated_time) => key,
            Some(_) => {
                return Err(fail(format!(
                    "log {} was not trusted at integratedTime {}",
                    p.log_id, p.integrated_time
                )));
            }
            None => {
                return Err(fail(format!(
                    "log {} is not a transparency log of the trusted root",
                    p.log_id
                )));
            }
        };
        key.verify_signature(
            Signature::Base64Encoded(bundle.set.as_bytes()),
            &p.canonical(),
        )
        .map_err(|_| fail("its signed entry timestamp does not verify".into()))?;
        let body = b64(&p.body).map_err(|why| fail(format!("body: {why}")))?;
        let entry: Entry = serde_json::from_slice(&body)
            .map_err(|why| fail(format!("body is not a Rekor entry: {why}")))?;
        if entry.kind != "hashedrekord" && entry.kind != "rekord" {
            return Err(fail(format!(
                "entries of kind '{}' are not read",
                entry.kind
            )));
        }
        let hash = &entry.spec.data.hash;
        if hash.algorithm != "sha256" || hash.value != hex::encode(Sha256::digest(e.payload)) {
            return Err(fail("the logged entry is for another payload".into()));
        }
        if b64(&entry.spec.signature.content) != b64(e.signature) {
            return Err(fail("the logged entry is for another signature".into()));
        }
        let logged_cert = b64(&entry.spec.signature.public_key.content)
            .and_then(|pem| pem_to_der(&pem))
            .map_err(|why| fail(format!("the logged certificate: {why}")))?;
        if logged_cert != cert_der {
            return Err(fail("the logged entry is for another certificate".into()));
        }
        Ok(p.integrated_time)
    }
}

/// Seconds since the epoch for webpki; a negative time (before 1970) is the epoch, at which
/// no Fulcio certificate is valid.
fn unix_time(secs: i64) -> UnixTime {
    UnixTime::since_unix_epoch(Duration::from_secs(u64::try_from(secs).unwrap_or(0)))
}

/// The OIDC issuer (Fulcio's extension) and subject (first SAN email or URI) of `cert`.
fn identity_of(cert: &Certificate) -> Result<Signer, String> {
    let tbs = cert.tbs_certificate();
    let extension = |oid: ObjectIdentifier| {
        tbs.extensions()
            .into_iter()
            .flatten()
            .find(|x| x.extn_id == oid)
            .map(|x| x.extn_value.as_bytes())
    };
    let issuer = match (extension(ISSUER_V2), extension(ISSUER_V1)) {
        (Some(der), _) => Utf8StringRef::from_der(der)
            .map(|s| s.as_str().to_string())
            .map_err(|why| format!("the certificate's OIDC issuer cannot be read: {why}"))?,
        (None, Some(raw)) => String::from_utf8(raw.to_vec())
            .map_err(|_| "the certificate's OIDC issuer is not UTF-8".to_string())?,
        // Fulcio's first certificates named no issuer.
        (None, None) => String::new(),
    };
    let san = tbs
        .get_extension::<SubjectAltName>()
        .map_err(|why| format!("the certificate's subject alternative name: {why}"))?
        .ok_or_else(|| "the certificate names no subject (no SAN)".to_string())?
        .1;
    let subject = san
        .0
        .iter()
        .find_map(|name| match name {
            GeneralName::Rfc822Name(s) | GeneralName::UniformResourceIdentifier(s) => {
                Some(s.to_string())
            }
            _ => None,
        })
        .ok_or_else(|| "the certificate names no email or URI subject".to_string())?;
    Ok(Signer { issuer, subject })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A keyless signature made by cosign against Sigstore's public-good instance in 2021,
    /// and the public-good trusted root (provenance in `fixtures/README.md`).
    const ROOT: &[u8] = include_bytes!("fixtures/keyless/trusted_root.json");
    const PAYLOAD: &[u8] = include_bytes!("fixtures/keyless/payload.json");
    const SIGNATURE: &str = include_str!("fixtures/keyless/signature");
    const CERT: &str = include_str!("fixtures/keyless/certificate.pem");
    const BUNDLE: &str = include_str!("fixtures/keyless/bundle.json");

    fn annotations() -> BTreeMap<String, String> {
        [
            (CERTIFICATE_ANNOTATION.to_string(), CERT.to_string()),
            (BUNDLE_ANNOTATION.to_string(), BUNDLE.to_string()),
        ]
        .into()
    }

    fn keyless(subject: &str) -> Keyless {
        let root = TrustedRoot::from_json(ROOT).unwrap();
        Keyless::new(
            root,
            Identities::new(&[(".*".into(), subject.into())]).unwrap(),
        )
    }

    fn check(
        k: &Keyless,
        payload: &[u8],
        annotations: &BTreeMap<String, String>,
    ) -> Result<Signer, String> {
        k.signer(&Evidence {
            payload,
            signature: SIGNATURE.trim(),
            annotations,
        })
    }

    #[test]
    fn a_public_good_keyless_signature_verifies_offline() {
        let signer = check(&keyless(r"^flavio@castelli\.me$"), PAYLOAD, &annotations()).unwrap();
        assert_eq!(signer.subject, "flavio@castelli.me");
        assert_eq!(signer.issuer, "");
    }

    #[test]
    fn another_identity_is_refused_and_named() {
        let e = check(&keyless(r"^release@example\.com$"), PAYLOAD, &annotations()).unwrap_err();
        assert!(
            e.contains("flavio@castelli.me") && e.contains("matchOIDCIdentity"),
            "{e}"
        );
    }

    #[test]
    fn each_broken_link_is_refused() {
        let k = keyless(".*");
        // A payload other than the one logged and signed.
        let e = check(&k, b"{}", &annotations()).unwrap_err();
        assert!(e.contains("another payload"), "{e}");

        // A bundle whose entry timestamp was changed.
        let mut a = annotations();
        a.insert(
            BUNDLE_ANNOTATION.into(),
            BUNDLE.replace("1634714717", "1634714718"),
        );
        let e = check(&k, PAYLOAD, &a).unwrap_err();
        assert!(e.contains("signed entry timestamp does not verify"), "{e}");

        // No bundle, no certificate.
        let mut a = annotations();
        a.remove(BUNDLE_ANNOTATION);
        assert!(
            check(&k, PAYLOAD, &a)
                .unwrap_err()
                .contains(BUNDLE_ANNOTATION)
        );
        a.remove(CERTIFICATE_ANNOTATION);
        assert!(check(&k, PAYLOAD, &a).unwrap_err().contains("not keyless"));

        // A root without the CA that issued the certificate.
        let mut json: serde_json::Value = serde_json::from_slice(ROOT).unwrap();
        let cas = json["certificateAuthorities"].as_array_mut().unwrap();
        cas.retain(|ca| ca["validFor"]["start"] != "2021-03-07T03:20:29Z");
        assert!(!cas.is_empty());
        let root = TrustedRoot::from_json(json.to_string().as_bytes()).unwrap();
        let k = Keyless::new(
            root,
            Identities::new(&[(".*".into(), ".*".into())]).unwrap(),
        );
        let e = check(&k, PAYLOAD, &annotations()).unwrap_err();
        assert!(e.contains("not one the trusted root issued"), "{e}");
    }

    #[test]
    fn bad_roots_and_identities_are_named() {
        let e = TrustedRoot::from_json(b"[]").err().unwrap().to_string();
        assert!(e.starts_with("trusted root:"), "{e}");
        let e = TrustedRoot::from_json(br#"{"tlogs":[],"certificateAuthorities":[]}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no certificateAuthorities"), "{e}");
        let e = Identities::new(&[(".*".into(), "(".into())])
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("matchOIDCIdentity[0].subject:"), "{e}");
        assert!(matches!(
            Identities::new(&[]),
            Err(KeylessError::NoIdentities)
        ));
    }
}
