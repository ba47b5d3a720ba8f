//! The registered Receivers, by webhook path: what the server looks a request's path up in,
//! each with its host, secret and turns. Held by the context; filled by the Receiver reconciler.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::verify::Host;
use crate::api::receiver::{Receiver, ResourceReference};

/// Requests of one Receiver judged at once: a flood on one path leaves the others their turns.
pub const PER_RECEIVER: usize = 16;

/// What the server needs of a Receiver: the object as last reconciled, its host and secret.
#[derive(Clone)]
pub(super) struct Registered {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) host: Host,
    pub(super) token: Vec<u8>,
    pub(super) receiver: Arc<Receiver>,
    /// Its requests judged at once ([`PER_RECEIVER`]).
    pub(super) turns: Arc<Semaphore>,
}

impl Registered {
    /// `namespace/name`, for logs and metrics.
    pub(super) fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub(super) fn resources(&self) -> &[ResourceReference] {
        &self.receiver.spec.resources
    }
}

/// The registered Receivers, by webhook path.
#[derive(Default)]
pub struct Receivers {
    by_path: RwLock<HashMap<String, Registered>>,
    /// When each Receiver last got a refusal Event: a flood of forgeries makes one Event per
    /// [`EVENT_EVERY`], not one per request.
    evented: std::sync::Mutex<HashMap<(String, String), std::time::Instant>>,
    /// Each Receiver's turns, kept across its re-registrations.
    turns: std::sync::Mutex<HashMap<(String, String), Arc<Semaphore>>>,
}

/// At most one refusal Event per Receiver this often.
const EVENT_EVERY: Duration = Duration::from_secs(10);

impl Receivers {
    /// Whether a refusal Event on `r` is due now (and notes that it is sent).
    pub(super) fn event_due(&self, r: &Registered) -> bool {
        let mut sent = self.evented.lock().unwrap_or_else(|e| e.into_inner());
        let key = (r.namespace.clone(), r.name.clone());
        let due = sent.get(&key).is_none_or(|at| at.elapsed() >= EVENT_EVERY);
        if due {
            sent.insert(key, std::time::Instant::now());
        }
        due
    }

    pub(super) fn set(&self, path: String, r: Registered) {
        let mut map = self.by_path.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, old| !(old.namespace == r.namespace && old.name == r.name));
        map.insert(path, r);
    }

    pub(super) fn remove(&self, namespace: &str, name: &str) {
        let mut map = self.by_path.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, old| !(old.namespace == namespace && old.name == name));
        let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        turns.remove(&(namespace.to_string(), name.to_string()));
    }

    /// The turns of Receiver `namespace/name`.
    pub(super) fn turns_of(&self, namespace: &str, name: &str) -> Arc<Semaphore> {
        let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        turns
            .entry((namespace.to_string(), name.to_string()))
            .or_insert_with(|| Arc::new(Semaphore::new(PER_RECEIVER)))
            .clone()
    }

    pub(super) fn get(&self, path: &str) -> Option<Registered> {
        self.by_path
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .cloned()
    }
}
