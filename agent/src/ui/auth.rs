//! Who is asking, and what they may see. With `--ui-auth kubernetes` every request carries a
//! bearer token; a TokenReview says whose it is, and SubjectAccessReviews say whether that
//! user may `get` a kind in a namespace. Both answers are cached briefly (a token for a
//! minute, a right for 30 s), so a busy page costs the API server almost nothing.

use std::collections::HashMap;
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

/// A value and when it was learnt.
type Dated<V> = (V, Instant);
/// Who may get (group, resource) in a namespace.
type Right = (Viewer, String, String, String);

pub struct Authorizer {
    client: kube::Client,
    /// By the SHA-256 of the token (the token itself is not kept).
    tokens: Mutex<HashMap<[u8; 32], Dated<Option<Viewer>>>>,
    rights: Mutex<HashMap<Right, Dated<bool>>>,
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
        }
    }

    /// The user a bearer token belongs to; `None` when the API server does not know it.
    pub async fn who(&self, token: &str) -> Result<Option<Viewer>, kube::Error> {
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
}
