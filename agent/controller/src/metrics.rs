//! Prometheus metrics: the registry and what reconcilers count. [`crate::http`] serves it.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub kind: &'static str,
    /// `success`, `noop` or a failure reason like `BuildFailed`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DriftLabels {
    pub kind: String,
    /// `changed` or `deleted`.
    pub change: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// `namespace/name` of the Receiver, or `argocd` for Argo CD's endpoint.
    pub receiver: String,
    /// `accepted`, `ignored`, or why it was refused: `unauthorized`, `bad_request`,
    /// `too_large`, `suspended`, `busy`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    /// The Provider's type (`github`, `slack`, …): bounded, whatever tenants create.
    pub provider: String,
    /// `delivered`, `failed` (after its retries), `dropped` (its queue was full),
    /// `deduplicated` (the same event within the window) or `superseded` (a commit status a
    /// newer one for the same commit overtook in the queue).
    pub result: &'static str,
}

pub struct Metrics {
    registry: Registry,
    pub notifications: Family<NotificationLabels, Counter>,
    pub webhook_requests: Family<WebhookLabels, Counter>,
    pub reconcile_duration: Family<ReconcileLabels, Histogram>,
    pub objects_applied: Counter,
    pub objects_pruned: Counter,
    pub drift_corrected: Family<DriftLabels, Counter>,
    pub fetch_duration: Histogram,
    pub reconciles_in_flight: Gauge,
    /// Shards this replica holds (`--shards`).
    pub shards_held: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("skewer");
        let reconcile_duration = Family::<ReconcileLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.005, 2.0, 14))
        });
        let fetch_duration = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let m = Self {
            webhook_requests: Family::default(),
            reconcile_duration: reconcile_duration.clone(),
            objects_applied: Counter::default(),
            objects_pruned: Counter::default(),
            drift_corrected: Family::default(),
            notifications: Family::default(),
            fetch_duration: fetch_duration.clone(),
            reconciles_in_flight: Gauge::default(),
            shards_held: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "reconcile_duration_seconds",
            "Time of one reconcile, by kind and result",
            reconcile_duration,
        );
        registry.register(
            "webhook_requests",
            "Webhook requests to a known path, by receiver and result",
            m.webhook_requests.clone(),
        );
        registry.register(
            "objects_applied",
            "Objects sent with server-side apply by full reconciles",
            m.objects_applied.clone(),
        );
        registry.register(
            "objects_pruned",
            "Objects deleted because they left their source",
            m.objects_pruned.clone(),
        );
        registry.register(
            "drift_corrected",
            "Objects re-applied because someone else changed or deleted them",
            m.drift_corrected.clone(),
        );
        registry.register(
            "source_fetch_duration_seconds",
            "Time to list refs and, when they moved, fetch and store an artifact",
            fetch_duration,
        );
        registry.register(
            "reconciles_in_flight",
            "Reconciles running now (the work queue's depth)",
            m.reconciles_in_flight.clone(),
        );
        registry.register(
            "notifications",
            "Events for Providers, by the Provider's type and what became of them",
            m.notifications.clone(),
        );
        registry.register(
            "shards_held",
            "Shards whose Lease this replica holds (--shards)",
            m.shards_held.clone(),
        );
        Self { registry, ..m }
    }
}

impl Metrics {
    pub fn observe_reconcile(&self, kind: &'static str, result: impl Into<String>, took: Duration) {
        self.reconcile_duration
            .get_or_create(&ReconcileLabels {
                kind,
                result: result.into(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn notification(&self, provider: &str, result: &'static str) {
        self.notifications
            .get_or_create(&NotificationLabels {
                provider: provider.to_string(),
                result,
            })
            .inc();
    }

    /// The registry in Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Counts a reconcile as in flight for as long as it lives.
pub struct InFlight<'a>(&'a Gauge);

impl<'a> InFlight<'a> {
    pub fn start(g: &'a Gauge) -> Self {
        g.inc();
        Self(g)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_format_names_and_labels() {
        let m = Metrics::default();
        m.observe_reconcile("Kustomization", "success", Duration::from_millis(20));
        m.objects_applied.inc_by(3);
        m.drift_corrected
            .get_or_create(&DriftLabels {
                kind: "Deployment".into(),
                change: "deleted",
            })
            .inc();
        let text = m.encode();
        assert!(text.contains(r#"skewer_reconcile_duration_seconds_count{kind="Kustomization",result="success"} 1"#), "{text}");
        assert!(text.contains("skewer_objects_applied_total 3"), "{text}");
        assert!(
            text.contains(r#"skewer_drift_corrected_total{kind="Deployment",change="deleted"} 1"#),
            "{text}"
        );
        {
            let _a = InFlight::start(&m.reconciles_in_flight);
            assert_eq!(m.reconciles_in_flight.get(), 1);
        }
        assert_eq!(m.reconciles_in_flight.get(), 0);
    }
}
