//! How every skewer watch runs: quorum lists, and reconnects that notice the end of an outage
//! within seconds.
//!
//! Lists are read from etcd, never from the API server's watch cache (`resourceVersion=0`):
//! after an API server restart that cache answers lists with versions it already calls too
//! old to watch from, so a cache-served re-list loops on `410 Expired` (watches stay broken;
//! changes and reconcile requests go unseen) until the cache catches up. Reconnects back off
//! from half a second to at most five (kube's default grows to thirty, and the `410` that a
//! restarted server answers first counts as one more failure).

use std::time::Duration;

use futures::Stream;
use kube::Api;
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

const FIRST_RETRY: Duration = Duration::from_millis(500);
const LONGEST_RETRY: Duration = Duration::from_secs(5);

/// The watch configuration: quorum lists.
pub fn config() -> watcher::Config {
    watcher::Config::default().list_semantic(watcher::ListSemantic::MostRecent)
}

static SELECTOR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Limits the watches of skewer's own kinds to objects matching `selector`
/// (`--watch-label-selector`: one skewer per shard). Set once, before the controllers start.
pub fn select(selector: String) {
    let _ = SELECTOR.set(selector);
}

/// The watch configuration of skewer's own kinds: quorum lists, and the
/// `--watch-label-selector` when one was given.
pub fn own_kinds() -> watcher::Config {
    match SELECTOR.get() {
        Some(selector) => config().labels(selector),
        None => config(),
    }
}

/// [`own_kinds`], narrowed further by label selector `also`.
pub fn own_kinds_with(also: &str) -> watcher::Config {
    match SELECTOR.get() {
        Some(selector) => config().labels(&format!("{selector},{also}")),
        None => config().labels(also),
    }
}

/// A watch of `api` with `config`, reconnecting with [`Retry`]. (A controller's trigger
/// streams are raw watchers: the controller backs them off, with [`Retry`] too.)
pub fn stream<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config).backoff(Retry::default())
}

/// Delays between reconnects: doubling from [`FIRST_RETRY`] to [`LONGEST_RETRY`]; back to the
/// first after anything succeeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    next: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self { next: FIRST_RETRY }
    }
}

impl Iterator for Retry {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = now.saturating_mul(2).min(LONGEST_RETRY);
        Some(now)
    }
}

impl Backoff for Retry {
    fn reset(&mut self) {
        self.next = FIRST_RETRY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_to_five_seconds_and_reset() {
        let mut r = Retry::default();
        let got: Vec<u128> = r.by_ref().take(6).map(|d| d.as_millis()).collect();
        assert_eq!(got, [500, 1000, 2000, 4000, 5000, 5000]);
        r.reset();
        assert_eq!(r.next(), Some(FIRST_RETRY));
    }
}
