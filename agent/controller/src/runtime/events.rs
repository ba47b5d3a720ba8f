//! Kubernetes Events (events.k8s.io/v1) about skewer's objects. The same Event said again
//! within a few minutes counts up the first one's series rather than making another; unlike
//! kube's `Recorder`, "the same" includes the message, so an Event about a new revision is a
//! new Event saying that revision, never the count of an older one saying the last.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// How long an Event is counted up rather than made anew (as kube's recorder does).
const SERIES_FOR: Duration = Duration::from_secs(6 * 60);

/// What makes two Events the same: type, reason, the object, and the message.
#[derive(Hash, PartialEq, Eq, Clone)]
struct Key {
    warning: bool,
    reason: String,
    object: (String, String, String, String),
    note: String,
}

/// The Event made for a key, and when it was last said.
struct Said {
    name: String,
    namespace: String,
    count: i32,
    last: Instant,
}

/// Publishes Events as one controller (`reporting_controller`) and instance.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    said: Arc<Mutex<HashMap<Key, Said>>>,
}

impl Recorder {
    pub fn new(client: kube::Client, controller: &str, instance: Option<&str>) -> Self {
        Self {
            client,
            controller: controller.into(),
            instance: instance.unwrap_or(controller).into(),
            said: Arc::default(),
        }
    }

    /// Says `note` about `regarding`: a new Event, or the next count of the same Event said
    /// within the last few minutes.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let key = Key {
            warning,
            reason: reason.into(),
            object: (
                regarding.kind.clone().unwrap_or_default(),
                regarding.namespace.clone().unwrap_or_default(),
                regarding.name.clone().unwrap_or_default(),
                regarding.uid.clone().unwrap_or_default(),
            ),
            note,
        };
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let now = jiff::Timestamp::now();
        let again = {
            let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
            said.retain(|_, s| s.last.elapsed() < SERIES_FOR);
            said.get_mut(&key).map(|s| {
                s.count += 1;
                s.last = Instant::now();
                (s.name.clone(), s.namespace.clone(), s.count)
            })
        };
        if let Some((name, namespace, count)) = again {
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(now),
            };
            let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            match events
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "series": series })),
                )
                .await
            {
                Ok(_) => return Ok(()),
                // Gone (Events expire): said anew below.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!(
            "{}.{:x}",
            regarding.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        let event = Event {
            action: Some(action.into()),
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            ..Default::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        events.create(&PostParams::default(), &event).await?;
        self.said.lock().unwrap_or_else(|e| e.into_inner()).insert(
            key,
            Said {
                name,
                namespace,
                count: 1,
                last: Instant::now(),
            },
        );
        Ok(())
    }
}
