//! `skewer events`: the Events skewer recorded (why a reconcile failed, what self-heal
//! repaired), newest last, like `flux events`. The rows and the table are pure.

use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::ListParams;
use serde::Serialize;

use super::named::Named;

/// One Event, as `skewer events` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    pub namespace: String,
    /// When it last happened, RFC 3339.
    pub time: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    /// `Kind/name` of the object it is about.
    pub object: String,
    pub message: String,
}

/// skewer's Events (reported by controller `skewer`), about `only` when given, oldest first.
pub fn rows(events: &[Event], only: Option<&Named>) -> Vec<EventRow> {
    let mut rows: Vec<(Option<jiff::Timestamp>, EventRow)> = events
        .iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("skewer"))
        .filter(|e| {
            only.is_none_or(|n| {
                let r = e.regarding.as_ref();
                r.and_then(|r| r.name.as_deref()) == Some(n.name.as_str())
                    && r.and_then(|r| r.kind.as_deref())
                        .is_some_and(|k| k.eq_ignore_ascii_case(n.kind.word()))
            })
        })
        .map(|e| {
            let when = e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0)
                .or(e.event_time.as_ref().map(|t| t.0))
                .or(e.deprecated_last_timestamp.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0));
            let regarding = e.regarding.clone().unwrap_or_default();
            let row = EventRow {
                namespace: e.metadata.namespace.clone().unwrap_or_default(),
                time: when.map(|t| t.to_string()).unwrap_or_default(),
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                object: format!(
                    "{}/{}",
                    regarding.kind.unwrap_or_default(),
                    regarding.name.unwrap_or_default()
                ),
                message: e.note.clone().unwrap_or_default(),
            };
            (when, row)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.object.cmp(&b.1.object)));
    rows.into_iter().map(|(_, r)| r).collect()
}

/// The rows as a table: LAST SEEN (an age at `now`), TYPE, REASON, OBJECT, MESSAGE.
pub fn table(rows: &[EventRow], namespaces: bool, now: jiff::Timestamp) -> String {
    let header = [
        "NAMESPACE",
        "LAST SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "MESSAGE",
    ];
    let lines: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.namespace.clone(),
                super::table::age(r.time.parse().ok(), now),
                r.type_.clone(),
                r.reason.clone(),
                r.object.clone(),
                super::table::short(&r.message),
            ]
        })
        .collect();
    super::table::aligned_keeping(&header, lines, &[(0, namespaces)])
}

/// Lists skewer's Events in `namespace` (every namespace when `None`).
pub async fn list(
    client: &Client,
    namespace: Option<&str>,
    only: Option<&Named>,
) -> Result<Vec<EventRow>, kube::Error> {
    let api: kube::Api<Event> = skewer_api::scoped(client, namespace);
    let events = api.list(&ListParams::default()).await?;
    Ok(rows(&events.items, only))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn event(controller: &str, kind: &str, name: &str, at: &str, note: &str) -> Event {
        Event {
            metadata: kube::api::ObjectMeta {
                namespace: Some("apps".into()),
                ..Default::default()
            },
            reporting_controller: Some(controller.into()),
            regarding: Some(ObjectReference {
                kind: Some(kind.into()),
                name: Some(name.into()),
                ..Default::default()
            }),
            event_time: Some(MicroTime(at.parse().unwrap())),
            type_: Some("Warning".into()),
            reason: Some("ReconciliationFailed".into()),
            note: Some(note.into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_skewers_events_oldest_first() {
        let events = [
            event(
                "skewer",
                "Kustomization",
                "web",
                "2026-11-23T10:00:05Z",
                "second",
            ),
            event(
                "kubelet",
                "Pod",
                "web-1",
                "2026-11-23T10:00:00Z",
                "not ours",
            ),
            event(
                "skewer",
                "GitRepository",
                "repo",
                "2026-11-23T10:00:01Z",
                "first",
            ),
        ];
        let got = rows(&events, None);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].message, "first");
        let only: Named = "ks/web".parse().unwrap();
        let got = rows(&events, Some(&only));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].object, "Kustomization/web");
        let t = table(&got, false, "2026-11-23T10:01:05Z".parse().unwrap());
        assert_eq!(
            t,
            "LAST SEEN  TYPE     REASON                OBJECT             MESSAGE\n\
             60s        Warning  ReconciliationFailed  Kustomization/web  second\n"
        );
    }
}
