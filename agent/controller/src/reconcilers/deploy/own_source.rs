//! An Application's own source, fetched through the entries it shares with every Application
//! naming the same repository and revision ([`crate::appsource::AppSources`]): resolved when the
//! entry is older than the interval, fetched only when the revision moved.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use skewer_sources::oci::registry::{self, Repository};
use skewer_sources::oci::{self, OciRef};
use skewer_sources::repocreds::{self, CredSecret};
use skewer_sources::{Access, Auth};

use crate::api::ocirepository::LayerOperation;
use crate::appsource::{EntryKey, Wanted};
use crate::artifacts::ArtifactRef;
use crate::reconcilers::fetch::git::{GitFetch, Refs, git};
use crate::reconcilers::fetch::oci::{OciFetch, oci};
use crate::runtime::context::Context;
use crate::runtime::{Failure, Reason};

/// Bound on one fetch of an Application's source (Argo CD has no field for it).
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

/// The store key of an entry's artifacts: `appsource/<hash>`.
fn store_key((wanted, creds): &EntryKey) -> String {
    let digest = Sha256::digest(format!(
        "{}\n{}\n{}",
        wanted.url,
        wanted.target_revision,
        creds.as_deref().unwrap_or_default()
    ));
    format!("appsource/{}", &hex::encode(digest)[..20])
}

/// The artifact of `wanted`, resolved within `max_age` and, when given, no earlier than
/// `resolved_after` (a refresh, or a new Application: it must not start from a resolution
/// older than itself); fetched if its revision moved.
pub async fn artifact(
    ctx: &Context,
    namespace: &str,
    wanted: &Wanted,
    max_age: Duration,
    resolved_after: Option<jiff::Timestamp>,
) -> Result<ArtifactRef, Failure> {
    let secret = ctx.app_sources.credentials(namespace, &wanted.url);
    let entry_key = (wanted.clone(), secret.as_ref().map(|s| s.name.clone()));
    let entry = ctx.app_sources.entry(&entry_key);
    let mut entry = entry.lock().await;
    if let Some((artifact, at, wall)) = &entry.current
        && resolved_after.is_none_or(|after| *wall >= after)
        && at.elapsed() < max_age
        && ctx.store.path_of(&artifact.key, &artifact.digest).exists()
    {
        return Ok(artifact.clone());
    }
    // When the remote was asked: what waited on the lock meanwhile may take the answer.
    let asked = (Instant::now(), jiff::Timestamp::now());
    let key = store_key(&entry_key);
    let current = entry
        .current
        .as_ref()
        .map(|(a, _, _)| a)
        .filter(|a| ctx.store.path_of(&a.key, &a.digest).exists());
    let fetching = Fetching {
        ctx,
        namespace,
        key: &key,
        wanted,
        secret: secret.as_ref(),
        current,
    };
    let fetched = if wanted.url.starts_with("oci://") {
        fetch_oci(fetching).await?
    } else {
        fetch_git(fetching).await?
    };
    let artifact = match fetched {
        Some((revision, digest)) => {
            entry.fetches += 1;
            tracing::info!(url = %wanted.url, revision = %revision, fetches = entry.fetches, "fetched application source");
            ArtifactRef {
                source: format!("{} at {}", wanted.url, wanted.target_revision),
                key,
                revision,
                digest,
                served: None,
            }
        }
        // The revision did not move: the stored artifact stands.
        None => match current {
            Some(a) => a.clone(),
            None => {
                let why = "the revision did not move, yet no artifact of it is stored";
                return Err(Failure::new(Reason::ArtifactFailed, why.to_string()));
            }
        },
    };
    entry.current = Some((artifact.clone(), asked.0, asked.1));
    Ok(artifact)
}

/// One fetch of an entry: what is wanted, with which credentials, into which store key, and
/// what is stored now.
struct Fetching<'a> {
    ctx: &'a Context,
    namespace: &'a str,
    key: &'a str,
    wanted: &'a Wanted,
    secret: Option<&'a CredSecret>,
    current: Option<&'a ArtifactRef>,
}

impl Fetching<'_> {
    /// The stored artifact's revision and digest.
    fn stored(&self) -> Option<(&str, &str)> {
        self.current
            .map(|a| (a.revision.as_str(), a.digest.as_str()))
    }
}

/// Git: the remote's refs listed, and when `targetRevision` resolves to another revision
/// than `current`'s, fetched and stored: `(revision, digest)`, or `None` when nothing moved.
async fn fetch_git(f: Fetching<'_>) -> Result<Option<(String, String)>, Failure> {
    let (secret, wanted) = (f.secret, f.wanted);
    let auth = match secret {
        Some(s) => repocreds::auth(s)
            .map_err(|e| Failure::new(Reason::AuthenticationFailed, e.to_string()))?,
        None => Auth::none(),
    };
    auth.check_scheme(&wanted.url).map_err(|e| {
        let from = secret.map_or(String::new(), |s| format!(" (Secret {})", s.name));
        Failure::new(
            Reason::AuthenticationFailed,
            format!("spec.source.repoURL: {e}{from}"),
        )
    })?;
    let got = git(
        f.ctx,
        GitFetch {
            namespace: f.namespace,
            key: f.key.into(),
            url: wanted.url.clone(),
            url_field: "spec.source.repoURL",
            refs: Refs::TargetRevision(wanted.target_revision.clone()),
            access: Access {
                auth,
                timeout: FETCH_TIMEOUT,
            },
            timeout: FETCH_TIMEOUT,
            ignore: None,
            verify: None,
            current: f.stored(),
        },
    )
    .await?;
    Ok(got.map(|g| (g.revision, g.stored.digest)))
}

/// OCI: `targetRevision` resolved in the repository (a tag, a `sha256:` digest, or a version
/// range over the tags) and, when it names another manifest than `current`'s, its first layer
/// pulled as untrusted input and stored.
async fn fetch_oci(f: Fetching<'_>) -> Result<Option<(String, String)>, Failure> {
    let repository = Repository::parse(&f.wanted.url)
        .map_err(|e| Failure::invalid(format!("spec.source.repoURL: {e}")))?;
    let (login, insecure) = match f.secret {
        Some(s) => repocreds::oci_access(s)
            .map_err(|e| Failure::new(Reason::AuthenticationFailed, e.to_string()))?,
        None => (None, false),
    };
    let target = f.wanted.target_revision.trim();
    let got = oci(
        f.ctx,
        OciFetch {
            namespace: f.namespace,
            key: f.key.into(),
            repository,
            reference: reference(target),
            reference_field: Some("spec.source.targetRevision"),
            access: registry::Access { login, insecure },
            timeout: FETCH_TIMEOUT,
            ignore: None,
            verify: None,
            media_type: None,
            operation: LayerOperation::Extract,
            current: f.stored(),
        },
    )
    .await?;
    Ok(got.map(|g| (g.revision, g.stored.digest)))
}

/// An OCI `targetRevision`: a digest, a version range, or a tag (`HEAD` and none: `latest`).
fn reference(target: &str) -> OciRef {
    if oci::is_digest(target) {
        OciRef {
            digest: Some(target.into()),
            ..Default::default()
        }
    } else if target.bytes().any(|b| b"*^~<>=xX ".contains(&b)) {
        OciRef {
            semver: Some(target.into()),
            ..Default::default()
        }
    } else {
        let tag = match target {
            "HEAD" | "" => "latest",
            tag => tag,
        };
        OciRef {
            tag: Some(tag.into()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_target_revisions_read_as_digests_ranges_or_tags() {
        let digest = format!("sha256:{}", "a".repeat(64));
        assert_eq!(reference(&digest).digest.as_deref(), Some(digest.as_str()));
        assert_eq!(reference(">=1.0.0").semver.as_deref(), Some(">=1.0.0"));
        assert_eq!(reference("1.x").semver.as_deref(), Some("1.x"));
        assert_eq!(reference("v1.2.3").tag.as_deref(), Some("v1.2.3"));
        assert_eq!(reference("HEAD").tag.as_deref(), Some("latest"));
        assert_eq!(reference("").tag.as_deref(), Some("latest"));
    }
}
