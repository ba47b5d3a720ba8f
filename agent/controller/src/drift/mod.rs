//! Self-heal. Every applied object is recorded in an [`Index`] with what skewer's apply left;
//! one metadata-only watch per kind and target, selecting skewer's owner label, compares each
//! event with the index and re-applies just the object that drifted. No timers, no full
//! re-applies, no per-object reads. [`index`] is the pure half, [`watch`] the I/O.

pub mod index;
pub mod watch;

use std::sync::{Mutex, MutexGuard};

pub use index::{Heal, Index};

/// The index, shared by reconcilers (which record applies) and watches (which judge events),
/// and the announcement of owners whose drift was left alone (to report it).
pub struct Drift {
    index: Mutex<Index>,
    left: tokio::sync::broadcast::Sender<String>,
}

impl Default for Drift {
    fn default() -> Self {
        Self {
            index: Mutex::new(Index::default()),
            left: tokio::sync::broadcast::channel(1024).0,
        }
    }
}

impl Drift {
    pub fn lock(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Owner keys, as their objects drift and the drift is left alone.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.left.subscribe()
    }

    /// Announces the owners that saw drift left alone.
    pub fn announce(&self) {
        let fresh = self.lock().take_fresh();
        for owner in fresh {
            // No subscriber: nobody reports drift; nothing to do.
            let _ = self.left.send(owner);
        }
    }
}
