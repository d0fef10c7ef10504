//! Prometheus metrics (`/metrics`). Counter names are registered without `_total`; the OpenMetrics encoder
//! appends it (and prometheus-client panics in debug builds when a name already ends in `_total`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// suspend, deactivate, annotate, event, scale, notify.
    pub action: String,
    /// Audit or Enforce.
    pub mode: String,
    /// done, unchanged (already in that state), refused, failed, timeout, reported (Audit),
    /// skipped_not_leader.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    pub mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    pub policy: String,
    pub receiver: String,
    pub channel: String,
    /// sent, failed, retried, dropped.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

/// Every metric the controller exports.
pub struct Metrics {
    registry: Registry,
    pub samples: Counter,
    pub evaluations: Counter,
    pub evaluation_seconds: Histogram,
    pub firings: Family<ModeLabels, Counter>,
    pub actions: Family<ActionLabels, Counter>,
    pub api_errors: Family<OperationLabels, Counter>,
    pub api_requests: Family<OperationLabels, Counter>,
    pub status_writes: Family<ResultLabels, Counter>,
    pub invalid_inputs: Family<OperationLabels, Counter>,
    pub notifications: Family<NotificationLabels, Gauge>,
    pub jobs: Gauge,
    pub policies: Gauge,
    pub leader: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("trainwarden");
        let samples = Counter::default();
        registry.register("samples", "Progress samples received from TrainJob watch events", samples.clone());
        let evaluations = Counter::default();
        registry.register(
            "evaluations",
            "Evaluator runs (a watch event or a timer), each evaluating the affected jobs' rules",
            evaluations.clone(),
        );
        // 10 µs … ~5 s.
        let evaluation_seconds = Histogram::new(exponential_buckets(1e-5, 3.0, 12));
        registry.register(
            "evaluation_seconds",
            "Time one evaluator run took (decode excluded)",
            evaluation_seconds.clone(),
        );
        let firings = Family::<ModeLabels, Counter>::default();
        registry.register("firings", "Rules that started firing, by mode", firings.clone());
        let actions = Family::<ActionLabels, Counter>::default();
        registry.register("actions", "Actions by kind, mode and result", actions.clone());
        let api_errors = Family::<OperationLabels, Counter>::default();
        registry.register("api_errors", "Kubernetes API calls that failed or timed out", api_errors.clone());
        let api_requests = Family::<OperationLabels, Counter>::default();
        registry.register(
            "api_requests",
            "Kubernetes API requests the executor and status writer made (watches not included), by operation",
            api_requests.clone(),
        );
        let status_writes = Family::<ResultLabels, Counter>::default();
        registry.register("status_writes", "Policy status writes by result", status_writes.clone());
        let invalid_inputs = Family::<OperationLabels, Counter>::default();
        registry.register(
            "invalid_inputs",
            "Watched objects that could not be read (malformed progress, invalid policies)",
            invalid_inputs.clone(),
        );
        let notifications = Family::<NotificationLabels, Gauge>::default();
        registry.register(
            "notifications",
            "Notification deliveries per policy, receiver and channel by result, since start (monotonic; refreshed every status beat)",
            notifications.clone(),
        );
        let jobs = Gauge::default();
        registry.register("jobs", "TrainJobs tracked", jobs.clone());
        let policies = Gauge::default();
        registry.register("policies", "Policies loaded (valid ones)", policies.clone());
        let leader = Gauge::default();
        registry.register("leader", "1 while this replica holds the leader Lease", leader.clone());
        Metrics {
            registry,
            samples,
            evaluations,
            evaluation_seconds,
            firings,
            actions,
            api_errors,
            api_requests,
            status_writes,
            invalid_inputs,
            notifications,
            jobs,
            policies,
            leader,
        }
    }

    pub fn action(&self, action: &str, mode: &str, result: &str) {
        self.actions
            .get_or_create(&ActionLabels { action: action.into(), mode: mode.into(), result: result.into() })
            .inc();
    }

    pub fn api_error(&self, operation: &str) {
        self.api_errors.get_or_create(&OperationLabels { operation: operation.into() }).inc();
    }

    pub fn api_request(&self, operation: &str) {
        self.api_requests.get_or_create(&OperationLabels { operation: operation.into() }).inc();
    }

    pub fn invalid(&self, what: &str) {
        self.invalid_inputs.get_or_create(&OperationLabels { operation: what.into() }).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
