//! Whether a webhook request is what its host sends: each host's authentication, as the host
//! signs or carries it, then its event type against the Receiver's `events`. Pure: a request's
//! headers and raw body go in, a verdict comes out; tested without a server.

use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;

/// The hosts whose hooks a Receiver accepts (Flux's `type` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    Github,
    Gitlab,
    Gitea,
    Gogs,
    Bitbucket,
    Generic,
    GenericHmac,
    Harbor,
    Dockerhub,
    Quay,
    Nexus,
}

impl Host {
    pub const NAMES: &'static str = "github, gitlab, gitea, gogs, bitbucket, generic, generic-hmac, harbor, dockerhub, quay, nexus";

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "github" => Host::Github,
            "gitlab" => Host::Gitlab,
            "gitea" => Host::Gitea,
            "gogs" => Host::Gogs,
            "bitbucket" => Host::Bitbucket,
            "generic" => Host::Generic,
            "generic-hmac" => Host::GenericHmac,
            "harbor" => Host::Harbor,
            "dockerhub" => Host::Dockerhub,
            "quay" => Host::Quay,
            "nexus" => Host::Nexus,
            _ => return None,
        })
    }

    /// The header naming the event type.
    fn event_header(self) -> Option<&'static str> {
        match self {
            Host::Github => Some("x-github-event"),
            Host::Gitlab => Some("x-gitlab-event"),
            Host::Gitea => Some("x-gitea-event"),
            Host::Gogs => Some("x-gogs-event"),
            Host::Bitbucket => Some("x-event-key"),
            _ => None,
        }
    }
}

/// What to do with an authentic request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Reconcile the Receiver's resources; the event type, when the host names one.
    Accept(Option<String>),
    /// GitHub's `ping` when a hook is created: answered, nothing reconciled.
    Ping,
    /// An event type the Receiver's `events` leave out: answered, nothing reconciled.
    Ignored(String),
}

/// Why a request is refused. The texts name what was wrong with the request, never the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 401: the signature or token is missing or wrong.
    Unauthorized(&'static str),
    /// 400: a header is malformed.
    BadRequest(&'static str),
}

fn hmac_hex<M: Mac + hmac::digest::KeyInit>(key: &[u8], body: &[u8]) -> Vec<u8> {
    let Ok(mut mac) = <M as hmac::digest::KeyInit>::new_from_slice(key) else {
        return Vec::new();
    };
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// Checks a hex signature of `body` under `key` with the digest `algo` names, in constant time.
fn signed(algo: &str, hex_sig: &str, key: &[u8], body: &[u8]) -> Result<(), Refusal> {
    let given =
        hex::decode(hex_sig.trim()).map_err(|_| Refusal::BadRequest("signature is not hex"))?;
    let want = match algo {
        "sha1" => hmac_hex::<Hmac<sha1::Sha1>>(key, body),
        "sha256" => hmac_hex::<Hmac<Sha256>>(key, body),
        "sha512" => hmac_hex::<Hmac<Sha512>>(key, body),
        _ => return Err(Refusal::BadRequest("unknown signature algorithm")),
    };
    if !want.is_empty() && bool::from(want.ct_eq(&given)) {
        Ok(())
    } else {
        Err(Refusal::Unauthorized("signature does not match the body"))
    }
}

/// `algo=hex` as GitHub, Bitbucket Server and generic-hmac write it.
fn prefixed<'a>(value: &'a str, allowed: &[&str]) -> Result<(&'a str, &'a str), Refusal> {
    let (algo, hex_sig) = value
        .split_once('=')
        .ok_or(Refusal::BadRequest("signature is not <algorithm>=<hex>"))?;
    if !allowed.contains(&algo) {
        return Err(Refusal::BadRequest("signature algorithm not accepted"));
    }
    Ok((algo, hex_sig))
}

/// Judges a request to a Receiver of `host` whose secret is `token`. `header` looks a header
/// up by its lower-case name.
pub fn verify(
    host: Host,
    token: &[u8],
    header: impl Fn(&str) -> Option<String>,
    body: &[u8],
    events: &[String],
) -> Result<Verdict, Refusal> {
    let missing = Refusal::Unauthorized("no signature");
    match host {
        Host::Github => {
            if let Some(v) = header("x-hub-signature-256") {
                let (algo, sig) = prefixed(&v, &["sha256"])?;
                signed(algo, sig, token, body)?;
            } else if let Some(v) = header("x-hub-signature") {
                // The legacy SHA-1 header, only when the SHA-256 one is absent.
                let (algo, sig) = prefixed(&v, &["sha1"])?;
                signed(algo, sig, token, body)?;
            } else {
                return Err(missing);
            }
        }
        Host::Gitlab => {
            let given = header("x-gitlab-token").ok_or(missing)?;
            if !bool::from(given.as_bytes().ct_eq(token)) {
                return Err(Refusal::Unauthorized("token does not match"));
            }
        }
        Host::Gitea | Host::Gogs => {
            let name = if host == Host::Gitea {
                "x-gitea-signature"
            } else {
                "x-gogs-signature"
            };
            let sig = header(name).ok_or(missing)?;
            signed("sha256", &sig, token, body)?;
        }
        Host::Bitbucket => {
            let v = header("x-hub-signature").ok_or(missing)?;
            let (algo, sig) = prefixed(&v, &["sha256"])?;
            signed(algo, sig, token, body)?;
        }
        Host::GenericHmac => {
            let v = header("x-signature").ok_or(missing)?;
            let (algo, sig) = prefixed(&v, &["sha1", "sha256", "sha512"])?;
            signed(algo, sig, token, body)?;
        }
        Host::Harbor => {
            let given = header("authorization").ok_or(missing)?;
            if !bool::from(given.as_bytes().ct_eq(token)) {
                return Err(Refusal::Unauthorized("token does not match"));
            }
        }
        Host::Nexus => {
            let sig = header("x-nexus-webhook-signature").ok_or(missing)?;
            signed("sha1", &sig, token, body)?;
        }
        // The secret path is the authentication; the payload must still be the host's.
        Host::Dockerhub | Host::Quay => {
            if serde_json::from_slice::<serde_json::Value>(body).map_or(true, |v| !v.is_object()) {
                return Err(Refusal::BadRequest("the body is not a JSON object"));
            }
        }
        Host::Generic => {}
    }
    let event = host.event_header().and_then(&header);
    if host == Host::Github && event.as_deref() == Some("ping") {
        return Ok(Verdict::Ping);
    }
    match &event {
        Some(e) if !events.is_empty() && !events.iter().any(|w| w.eq_ignore_ascii_case(e)) => {
            Ok(Verdict::Ignored(e.clone()))
        }
        _ => Ok(Verdict::Accept(event)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const TOKEN: &[u8] = b"It's a Secret to Everybody";
    const BODY: &[u8] = b"Hello, World!";

    fn headers(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        move |name: &str| map.get(name).cloned()
    }

    /// GitHub's documented example: this secret and body give this signature.
    #[test]
    fn githubs_documented_signature_verifies() {
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let h = headers(&[("X-Hub-Signature-256", sig), ("X-GitHub-Event", "push")]);
        assert_eq!(
            verify(Host::Github, TOKEN, h, BODY, &[]),
            Ok(Verdict::Accept(Some("push".into())))
        );
    }

    fn sign(algo: &str, key: &[u8], body: &[u8]) -> String {
        let raw = match algo {
            "sha1" => hmac_hex::<Hmac<sha1::Sha1>>(key, body),
            "sha256" => hmac_hex::<Hmac<Sha256>>(key, body),
            _ => hmac_hex::<Hmac<Sha512>>(key, body),
        };
        hex::encode(raw)
    }

    #[test]
    fn each_host_is_checked_as_it_signs() {
        let s256 = sign("sha256", TOKEN, BODY);
        let cases: Vec<(Host, Vec<(&str, String)>)> = vec![
            (Host::Gitea, vec![("X-Gitea-Signature", s256.clone())]),
            (Host::Gogs, vec![("X-Gogs-Signature", s256.clone())]),
            (
                Host::Bitbucket,
                vec![("X-Hub-Signature", format!("sha256={s256}"))],
            ),
            (
                Host::GenericHmac,
                vec![(
                    "X-Signature",
                    format!("sha512={}", sign("sha512", TOKEN, BODY)),
                )],
            ),
            (
                Host::Github,
                vec![(
                    "X-Hub-Signature",
                    format!("sha1={}", sign("sha1", TOKEN, BODY)),
                )],
            ),
            (
                Host::Gitlab,
                vec![(
                    "X-Gitlab-Token",
                    String::from_utf8_lossy(TOKEN).into_owned(),
                )],
            ),
        ];
        for (host, pairs) in cases {
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert!(
                matches!(
                    verify(host, TOKEN, headers(&pairs), BODY, &[]),
                    Ok(Verdict::Accept(_))
                ),
                "{host:?}"
            );
            // The same headers over another body, or under another key, are refused.
            let other = verify(host, TOKEN, headers(&pairs), b"Hello, World?", &[]);
            let stranger = verify(
                host,
                b"another secret!!!!!!!!!!!",
                headers(&pairs),
                BODY,
                &[],
            );
            if host != Host::Gitlab {
                assert!(matches!(other, Err(Refusal::Unauthorized(_))), "{host:?}");
            }
            assert!(
                matches!(stranger, Err(Refusal::Unauthorized(_))),
                "{host:?}"
            );
            assert_eq!(
                verify(host, TOKEN, headers(&[]), BODY, &[]),
                Err(Refusal::Unauthorized("no signature")),
                "{host:?}"
            );
        }
        assert_eq!(
            verify(Host::Generic, TOKEN, headers(&[]), BODY, &[]),
            Ok(Verdict::Accept(None))
        );
    }

    #[test]
    fn registries_are_checked_as_they_call() {
        let h = headers(&[("Authorization", "It's a Secret to Everybody")]);
        assert!(matches!(
            verify(Host::Harbor, TOKEN, h, BODY, &[]),
            Ok(Verdict::Accept(_))
        ));
        let h = headers(&[("Authorization", "Basic nope")]);
        assert!(matches!(
            verify(Host::Harbor, TOKEN, h, BODY, &[]),
            Err(Refusal::Unauthorized(_))
        ));
        let sig = sign("sha1", TOKEN, BODY);
        let h = headers(&[("X-Nexus-Webhook-Signature", &sig)]);
        assert!(matches!(
            verify(Host::Nexus, TOKEN, h, BODY, &[]),
            Ok(Verdict::Accept(_))
        ));
        let h = headers(&[("X-Nexus-Webhook-Signature", &sig)]);
        assert!(matches!(
            verify(Host::Nexus, TOKEN, h, b"other", &[]),
            Err(Refusal::Unauthorized(_))
        ));
        let push = br#"{"push_data": {"tag": "v1"}, "repository": {"repo_name": "acme/app"}}"#;
        assert!(matches!(
            verify(Host::Dockerhub, TOKEN, headers(&[]), push, &[]),
            Ok(Verdict::Accept(_))
        ));
        assert_eq!(
            verify(Host::Quay, TOKEN, headers(&[]), b"not json", &[]),
            Err(Refusal::BadRequest("the body is not a JSON object"))
        );
    }

    #[test]
    fn the_sha256_header_wins_over_the_legacy_one() {
        // A valid SHA-1 signature does not rescue a wrong SHA-256 one.
        let sha1 = format!("sha1={}", sign("sha1", TOKEN, BODY));
        let bad = format!("sha256={}", "0".repeat(64));
        let h = headers(&[("X-Hub-Signature", &sha1), ("X-Hub-Signature-256", &bad)]);
        assert!(matches!(
            verify(Host::Github, TOKEN, h, BODY, &[]),
            Err(Refusal::Unauthorized(_))
        ));
    }

    #[test]
    fn malformed_signatures_are_bad_requests_and_gitlab_tokens_compare_whole() {
        let h = headers(&[("X-Hub-Signature-256", "sha256=zz")]);
        assert_eq!(
            verify(Host::Github, TOKEN, h, BODY, &[]),
            Err(Refusal::BadRequest("signature is not hex"))
        );
        let h = headers(&[("X-Hub-Signature-256", "md5=00")]);
        assert!(matches!(
            verify(Host::Github, TOKEN, h, BODY, &[]),
            Err(Refusal::BadRequest(_))
        ));
        let same_length = "It's a Secret to Everybodz";
        let h = headers(&[("X-Gitlab-Token", same_length)]);
        assert_eq!(
            verify(Host::Gitlab, TOKEN, h, BODY, &[]),
            Err(Refusal::Unauthorized("token does not match"))
        );
    }

    #[test]
    fn events_filter_and_pings_answer() {
        let s = format!("sha256={}", sign("sha256", TOKEN, BODY));
        let h = || headers(&[("X-Hub-Signature-256", &s), ("X-GitHub-Event", "release")]);
        assert_eq!(
            verify(Host::Github, TOKEN, h(), BODY, &["push".into()]),
            Ok(Verdict::Ignored("release".into()))
        );
        assert!(matches!(
            verify(Host::Github, TOKEN, h(), BODY, &["Release".into()]),
            Ok(Verdict::Accept(_))
        ));
        let ping = headers(&[("X-Hub-Signature-256", &s), ("X-GitHub-Event", "ping")]);
        assert_eq!(
            verify(Host::Github, TOKEN, ping, BODY, &["push".into()]),
            Ok(Verdict::Ping)
        );
    }
}
