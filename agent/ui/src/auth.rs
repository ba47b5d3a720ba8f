//! Who is asking, and what they may see. With `--ui-auth kubernetes` every request carries a
//! bearer token; a TokenReview says whose it is, and SubjectAccessReviews say whether that
//! user may `get` a kind in a namespace. Both answers are cached briefly (a token for a
//! minute, known or not; a right for 30 s), so a busy page costs the API server almost
//! nothing. Tokens not seen before are reviewed at most [`REVIEWS_PER_CLIENT`] a minute per
//! client address and [`REVIEWS`] a minute in all: a flood of made-up tokens is answered 429
//! without reaching the API server.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

/// Who a request is from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Viewer {
    /// `--ui-auth none`: everyone sees everything skewer sees.
    Anyone,
    User {
        name: String,
        uid: String,
        groups: Vec<String>,
    },
}

const TOKEN_TTL: Duration = Duration::from_secs(60);
const RIGHT_TTL: Duration = Duration::from_secs(30);
/// Entries kept at most, per cache (a flood of distinct tokens must not grow memory).
const MAX_ENTRIES: usize = 10_000;
/// TokenReviews of tokens not in the cache, per client address, per [`WINDOW`].
pub const REVIEWS_PER_CLIENT: u32 = 20;
/// TokenReviews of tokens not in the cache, in all, per [`WINDOW`].
pub const REVIEWS: u32 = 300;
const WINDOW: Duration = Duration::from_secs(60);

/// Why a token got no answer.
#[derive(Debug, thiserror::Error)]
pub enum Unanswered {
    #[error("too many new tokens reviewed from this address or in all; try again in a minute")]
    TooMany,
    #[error(transparent)]
    Api(#[from] kube::Error),
}

/// Reviews counted in the current window: in all, and per client address.
struct Reviews {
    since: Instant,
    all: u32,
    by_client: HashMap<IpAddr, u32>,
}

impl Reviews {
    /// Counts one review for `client`, unless a budget is spent. Pure but for the clock.
    fn take(&mut self, client: IpAddr, now: Instant) -> bool {
        if now.saturating_duration_since(self.since) >= WINDOW {
            self.since = now;
            self.all = 0;
            self.by_client.clear();
        }
        // At most one entry per client that got a review this window: bounded by REVIEWS.
        let mine = self.by_client.get(&client).copied().unwrap_or(0);
        if self.all >= REVIEWS || mine >= REVIEWS_PER_CLIENT {
            return false;
        }
        self.all += 1;
        self.by_client.insert(client, mine + 1);
        true
    }
}

/// A value and when it was learnt.
type Dated<V> = (V, Instant);
/// Who may get (group, resource) in a namespace.
type Right = (Viewer, String, String, String);

pub struct Authorizer {
    client: kube::Client,
    /// By the SHA-256 of the token (the token itself is not kept).
    tokens: Mutex<HashMap<[u8; 32], Dated<Option<Viewer>>>>,
    rights: Mutex<HashMap<Right, Dated<bool>>>,
    reviews: Mutex<Reviews>,
}

fn fresh<V: Clone>(entry: Option<&(V, Instant)>, ttl: Duration) -> Option<V> {
    entry
        .filter(|(_, at)| at.elapsed() < ttl)
        .map(|(v, _)| v.clone())
}

fn remember<K: std::hash::Hash + Eq, V>(
    map: &mut HashMap<K, (V, Instant)>,
    k: K,
    v: V,
    ttl: Duration,
) {
    if map.len() >= MAX_ENTRIES {
        map.retain(|_, (_, at)| at.elapsed() < ttl);
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
    }
    map.insert(k, (v, Instant::now()));
}

impl Authorizer {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            tokens: Mutex::new(HashMap::new()),
            rights: Mutex::new(HashMap::new()),
            reviews: Mutex::new(Reviews {
                since: Instant::now(),
                all: 0,
                by_client: HashMap::new(),
            }),
        }
    }

    /// The user a bearer token (sent from `client`) belongs to; `None` when the API server
    /// does not know it.
    pub async fn who(&self, token: &str, client: IpAddr) -> Result<Option<Viewer>, Unanswered> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(v) = fresh(
            self.tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key),
            TOKEN_TTL,
        ) {
            return Ok(v);
        }
        let allowed = self
            .reviews
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(client, Instant::now());
        if !allowed {
            return Err(Unanswered::TooMany);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        let viewer = answer
            .status
            .filter(|s| s.authenticated == Some(true))
            .and_then(|s| s.user)
            .map(|u| Viewer::User {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
            });
        remember(
            &mut self.tokens.lock().unwrap_or_else(|e| e.into_inner()),
            key,
            viewer.clone(),
            TOKEN_TTL,
        );
        Ok(viewer)
    }

    /// Whether `viewer` may `get` `resource` of `group` in `namespace` (empty: cluster-wide).
    pub async fn may_get(
        &self,
        viewer: &Viewer,
        group: &str,
        resource: &str,
        namespace: &str,
    ) -> Result<bool, kube::Error> {
        let Viewer::User { name, uid, groups } = viewer else {
            return Ok(true);
        };
        let key = (
            viewer.clone(),
            group.to_string(),
            resource.to_string(),
            namespace.to_string(),
        );
        if let Some(ok) = fresh(
            self.rights
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key),
            RIGHT_TTL,
        ) {
            return Ok(ok);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(name.clone()),
                uid: Some(uid.clone()),
                groups: Some(groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some("get".into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api.create(&PostParams::default(), &review).await?;
        let ok = answer.status.is_some_and(|s| s.allowed);
        remember(
            &mut self.rights.lock().unwrap_or_else(|e| e.into_inner()),
            key,
            ok,
            RIGHT_TTL,
        );
        Ok(ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_forget_after_their_time_and_stay_bounded() {
        let mut m: HashMap<u32, (bool, Instant)> = HashMap::new();
        remember(&mut m, 1, true, RIGHT_TTL);
        assert_eq!(fresh(m.get(&1), RIGHT_TTL), Some(true));
        assert_eq!(fresh(m.get(&1), Duration::ZERO), None);
        for i in 0..(MAX_ENTRIES as u32 + 5) {
            remember(&mut m, i, true, RIGHT_TTL);
        }
        assert!(m.len() <= MAX_ENTRIES);
    }

    #[test]
    fn new_tokens_are_reviewed_within_budgets() {
        let start = Instant::now();
        let mut r = Reviews {
            since: start,
            all: 0,
            by_client: HashMap::new(),
        };
        let ip = |n: u8| IpAddr::from([10, 0, 0, n]);
        let granted = (0..100).filter(|_| r.take(ip(1), start)).count();
        assert_eq!(granted, REVIEWS_PER_CLIENT as usize, "one client's share");
        assert!(r.take(ip(2), start), "another client still has its own");
        let more: usize = (3..=40)
            .map(|n| (0..100).filter(|_| r.take(ip(n), start)).count())
            .sum();
        assert_eq!(
            REVIEWS_PER_CLIENT as usize + 1 + more,
            REVIEWS as usize,
            "in all"
        );
        assert!(!r.take(ip(41), start));
        assert!(r.take(ip(1), start + WINDOW), "a new window");
    }
}
