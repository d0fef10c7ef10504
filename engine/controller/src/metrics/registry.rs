//! The registry: every metric the controller exports ([`Metrics`]), registered under the `trainwarden_`
//! prefix, and the per-job families ([`JobFamilies`]) registered only with `--job-metrics`. Counter names are
//! registered without `_total`; the OpenMetrics encoder appends it (and prometheus-client panics in debug
//! builds when a name already ends in `_total`).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::labels::*;
use crate::messages::{ActionResult, WorkKind};

/// A float gauge.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// A float counter.
pub type FloatCounter = Counter<f64, AtomicU64>;

/// The per-job families (`--job-metrics`), registered only when switched on. Handles: the brain sets and
/// removes their series ([`crate::brain`]), `/metrics` encodes them.
#[derive(Clone, Default)]
pub struct JobFamilies {
    /// `trainwarden_job_progress_percent`: the latest report's progress, 0-100.
    pub progress_percent: Family<JobLabels, FloatGauge>,
    /// `trainwarden_job_eta_seconds`: the latest report's estimated remaining time.
    pub eta_seconds: Family<JobLabels, FloatGauge>,
    /// `trainwarden_job_metric{metric}`: the latest value of each canonical metric the policies read.
    pub metric: Family<JobMetricLabels, FloatGauge>,
    /// `trainwarden_job_last_report_timestamp_seconds`: the latest report's `lastUpdatedTime`, Unix seconds.
    pub last_report_timestamp_seconds: Family<JobLabels, FloatGauge>,
    /// `trainwarden_rule_state{policy,rule,state}`: 1 while the rule is pending or firing for the job.
    pub rule_state: Family<RuleStateLabels, Gauge>,
    /// `trainwarden_job_gpus`: the GPUs the job holds when running (its own count, else the largest
    /// `assumeGpus` of the policies selecting it); no series when neither is known.
    pub gpus: Family<JobLabels, FloatGauge>,
    /// `trainwarden_job_phase{phase}`: 1 for the job's current phase (one series a job).
    pub phase: Family<JobPhaseLabels, Gauge>,
}

impl JobFamilies {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "job_progress_percent",
            "Progress of each judged TrainJob's latest report, 0-100",
            self.progress_percent.clone(),
        );
        registry.register(
            "job_eta_seconds",
            "Remaining time each judged TrainJob's latest report estimates, in seconds",
            self.eta_seconds.clone(),
        );
        registry.register(
            "job_metric",
            "Latest value of the canonical metrics the policies read (loss, eval_loss, grad_norm, learning_rate) per judged TrainJob",
            self.metric.clone(),
        );
        registry.register(
            "job_last_report_timestamp_seconds",
            "lastUpdatedTime of each judged TrainJob's latest report, Unix seconds (time() - this: seconds since the report)",
            self.last_report_timestamp_seconds.clone(),
        );
        registry.register(
            "rule_state",
            "1 while a rule is pending or firing for a TrainJob (no series while inactive), like Prometheus' ALERTS",
            self.rule_state.clone(),
        );
        registry.register(
            "job_gpus",
            "GPUs each judged TrainJob holds when running: its own count, else the largest assumeGpus of the policies selecting it",
            self.gpus.clone(),
        );
        registry.register(
            "job_phase",
            "1 for each judged TrainJob's current phase (running, suspended, complete, failed); one series a job",
            self.phase.clone(),
        );
    }
}

/// Buckets for latencies of API calls and queues: 1 ms … ~33 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-3, 2.0, 16))
}

/// Every metric the controller exports.
pub struct Metrics {
    registry: Registry,
    /// `trainwarden_samples`: progress samples received from TrainJob watch events.
    pub samples: Counter,
    /// `trainwarden_evaluations`: evaluator runs (a watch event or a timer).
    pub evaluations: Counter,
    /// `trainwarden_evaluation_seconds`: how long one evaluator run took, in seconds (decoding excluded).
    pub evaluation_seconds: Histogram,
    /// `trainwarden_firings`: rules that started firing, by mode.
    pub firings: Family<ModeLabels, Counter>,
    /// `trainwarden_actions`: actions and Event records by kind, mode and result.
    pub actions: Family<ActionLabels, Counter>,
    /// `trainwarden_api_errors`: Kubernetes API calls that failed or timed out, by operation.
    pub api_errors: Family<OperationLabels, Counter>,
    /// `trainwarden_api_requests`: Kubernetes API requests of the executor and status writer (not watches).
    pub api_requests: Family<OperationLabels, Counter>,
    /// `trainwarden_api_request_duration_seconds`: how long one API request of the executor or the status
    /// writer took, answer included, by operation (each attempt; a timed-out one counts at its deadline).
    pub api_request_seconds: Family<OperationLabels, Histogram, fn() -> Histogram>,
    /// `trainwarden_executor_queue_seconds`: how long work waited in the executor's queue before it started
    /// (behind its own job's earlier work, or for one of the executor's slots), by kind.
    pub executor_queue_seconds: Family<WorkLabels, Histogram, fn() -> Histogram>,
    /// `trainwarden_executor_slot_wait_seconds`: how long work whose job had nothing else to do first waited
    /// for one of the executor's slots (all slots busy: the rest of `executor_queue_seconds` is its job's own
    /// earlier work).
    pub slot_wait_seconds: Histogram,
    /// `trainwarden_input_lag_seconds`: from a TrainJob watch event's arrival to the evaluation loop taking
    /// it (how far the loop runs behind its watch).
    pub input_lag_seconds: Histogram,
    /// `trainwarden_status_writes`: policy status writes by result.
    pub status_writes: Family<ResultLabels, Counter>,
    /// `trainwarden_history_checkpoints`: history checkpoints written, deferred, restored or refused.
    pub history_checkpoints: Family<HistoryLabels, Counter>,
    /// `trainwarden_invalid_inputs`: watched objects that could not be read, by kind.
    pub invalid_inputs: Family<InvalidInputLabels, Counter>,
    /// `trainwarden_unknown_progress_fields`: keys of TrainJobs' progress reports that their format does not
    /// define (read without them), once per job and key, by source.
    pub unknown_progress_fields: Family<ProgressSourceLabels, Counter>,
    /// `trainwarden_work_dropped`: work the evaluation loop produced that never reached its destination.
    pub work_dropped: Family<DroppedWorkLabels, Counter>,
    /// `trainwarden_notifications`: deliveries since start (a gauge set from the notifier's counters).
    pub notifications: Family<NotificationLabels, Gauge>,
    /// `trainwarden_jobs`: TrainJobs tracked now.
    pub jobs: Gauge,
    /// `trainwarden_policies`: valid policies loaded now.
    pub policies: Gauge,
    /// `trainwarden_leader`: 1 while this replica holds the leader Lease, else 0.
    pub leader: Gauge,
    /// `trainwarden_action_retries`: failed actions scheduled again (capped exponential backoff), by action.
    pub action_retries: Family<ExecutedActionLabels, Counter>,
    /// `trainwarden_actions_owed`: intents issued and not yet settled (performed, found done, refused).
    pub actions_owed: Gauge,
    /// `trainwarden_actions_abandoned{reason}`: owed intents dropped without being performed because their
    /// rule, job or policy no longer wants them, as the brain saw it (the rule resolved, the job or policy was
    /// deleted) or as the executor found the cluster at the moment of the write (policy deleted, replaced or
    /// changed, job replaced, an exception or a snooze holding it).
    pub actions_abandoned: Family<AbandonReasonLabels, Counter>,
    /// `trainwarden_handovers`: times this replica became leader and took over the owed intents.
    pub handovers: Counter,
    /// `trainwarden_actions_inherited`: owed intents a new leader re-issued at its hand-over.
    pub actions_inherited: Counter,
    /// `trainwarden_actions_found_uncounted`: suspensions a new leader found recorded on TrainJobs and not
    /// counted by the status it inherited (their leader was lost before its status counted them), and counted.
    pub actions_found_uncounted: Counter,
    /// `trainwarden_executor_panics`: panics caught in the executor (the work is reported failed, retried).
    pub executor_panics: Counter,
    /// `trainwarden_relist_deletions`: objects found deleted by a watch re-list (no Delete event came), by
    /// kind.
    pub relist_deletions: Family<WatchedKindLabels, Counter>,
    /// `trainwarden_actions_limited`: firings whose actions a blast-radius limit held back, by limit.
    pub actions_limited: Family<LimitLabels, Counter>,
    /// `trainwarden_record_lines`: stream lines the recorder produced (`--record-dir`).
    pub record_lines: Counter,
    /// `trainwarden_record_bytes_written`: compressed bytes the recorder wrote.
    pub record_bytes_written: Counter,
    /// `trainwarden_record_files_created`: stream files the recorder started.
    pub record_files_created: Counter,
    /// `trainwarden_record_files_deleted`: stream files deleted to stay within the bounds.
    pub record_files_deleted: Counter,
    /// `trainwarden_record_write_errors`: failed writes, directory creations and deletions (retried).
    pub record_write_errors: Counter,
    /// `trainwarden_record_dropped`: observations or lines not recorded, by reason.
    pub record_dropped: Family<RecordDropLabels, Counter>,
    /// `trainwarden_record_files`: stream files under the record directory (every replica's), at the last
    /// flush.
    pub record_files: Gauge,
    /// `trainwarden_record_bytes`: bytes of those files.
    pub record_bytes: Gauge,
    /// `trainwarden_gpu_hours_saved`: GPU-hours freed by suspending jobs (`Enforce`), or that would have
    /// been (`Audit`), by policy and the job's namespace, as this replica booked them while it led.
    pub gpu_hours_saved: Family<SavingsLabels, FloatCounter>,
    /// `trainwarden_dollars_saved`: the same in dollars, for policies that set `gpuHourCost`.
    pub dollars_saved: Family<SavingsLabels, FloatCounter>,
    /// `trainwarden_gpu_queries`: Prometheus queries for the GPUs' DCGM metrics (`--prometheus-url`), by
    /// result.
    pub gpu_queries: Family<GpuQueryLabels, Counter>,
    /// `trainwarden_gpu_query_seconds`: how long one such query took, answer decoded.
    pub gpu_query_seconds: Histogram,
    /// `trainwarden_gpu_metrics_up`: 1 while the latest GPU query to a Prometheus succeeded, 0 while they
    /// fail; no series at all without `--prometheus-url` (so an alert on 0 never fires where GPU metrics are
    /// off).
    pub gpu_metrics_up: Family<PrometheusLabels, Gauge>,
    /// `trainwarden_gpu_jobs`: TrainJobs the latest GPU query found GPU readings for.
    pub gpu_jobs: Gauge,
    /// `trainwarden_gpu_series_unmatched`: GPU series of the latest query (one per GPU, told apart by its
    /// UUID across nodes, and gauge: up to four per GPU) whose pod is no TrainJob's (other workloads, free
    /// GPUs, or pods the controller cannot list: check its RBAC when every series is).
    pub gpu_series_unmatched: Gauge,
    /// `trainwarden_checkpoint_requests{outcome}`: checkpoint requests written (`requested`) and settled
    /// (`acknowledged`, `timed_out`, `withdrawn`).
    pub checkpoint_requests: Family<CheckpointLabels, Counter>,
    /// `trainwarden_checkpoint_ack_seconds`: from a checkpoint request's write to trainwarden observing its
    /// acknowledgement (kubelet refresh, the job's wait for its step, the save and its report included).
    pub checkpoint_ack_seconds: Histogram,
    /// The per-job gauges; `None` when `--job-metrics=false` (not registered at all).
    pub job: Option<JobFamilies>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered under the `trainwarden_` prefix, the per-job gauges included.
    pub fn new() -> Self {
        Self::with_job_metrics(true)
    }

    /// [`Metrics::new`], with the per-job families registered only when `job_metrics` is set.
    pub fn with_job_metrics(job_metrics: bool) -> Self {
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
        let api_request_seconds =
            Family::<OperationLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        registry.register(
            "api_request_duration_seconds",
            "Time one Kubernetes API request of the executor or status writer took, answer included, by operation (each attempt; a timeout counts at its deadline)",
            api_request_seconds.clone(),
        );
        let executor_queue_seconds =
            Family::<WorkLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        registry.register(
            "executor_queue_seconds",
            "Time work waited in the executor's queue before it started (behind its job's earlier work or for a free slot), by kind",
            executor_queue_seconds.clone(),
        );
        let slot_wait_seconds = latency_histogram();
        registry.register(
            "executor_slot_wait_seconds",
            "Time work waited for a free executor slot once its job's earlier work was done",
            slot_wait_seconds.clone(),
        );
        let input_lag_seconds = latency_histogram();
        registry.register(
            "input_lag_seconds",
            "Time from a TrainJob watch event's arrival to the evaluation loop taking it",
            input_lag_seconds.clone(),
        );
        let status_writes = Family::<ResultLabels, Counter>::default();
        registry.register("status_writes", "Policy status writes by result", status_writes.clone());
        let history_checkpoints = Family::<HistoryLabels, Counter>::default();
        registry.register(
            "history_checkpoints",
            "TrainJob history checkpoints written, failed, deferred (rate cap), restored or refused",
            history_checkpoints.clone(),
        );
        let invalid_inputs = Family::<InvalidInputLabels, Counter>::default();
        registry.register(
            "invalid_inputs",
            "Watched objects that could not be read (malformed progress, invalid policies)",
            invalid_inputs.clone(),
        );
        let unknown_progress_fields = Family::<ProgressSourceLabels, Counter>::default();
        registry.register(
            "unknown_progress_fields",
            "Keys of TrainJob progress reports that their format does not define (read without them), once per job and key, by source",
            unknown_progress_fields.clone(),
        );
        let work_dropped = Family::<DroppedWorkLabels, Counter>::default();
        registry.register(
            "work_dropped",
            "Work the evaluation loop produced that never reached its destination, by reason",
            work_dropped.clone(),
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
        let action_retries = Family::<ExecutedActionLabels, Counter>::default();
        registry.register(
            "action_retries",
            "Failed actions scheduled again after a capped exponential backoff, by action",
            action_retries.clone(),
        );
        let actions_owed = Gauge::default();
        registry.register("actions_owed", "Action intents issued and not yet settled", actions_owed.clone());
        let actions_abandoned = Family::<AbandonReasonLabels, Counter>::default();
        registry.register(
            "actions_abandoned",
            "Owed action intents dropped without being performed, by why (the rule resolved, the job or policy \
             was deleted or changed, an exception or snooze holds the job)",
            actions_abandoned.clone(),
        );
        let handovers = Counter::default();
        registry.register(
            "handovers",
            "Times this replica became leader and took over the owed action intents",
            handovers.clone(),
        );
        let actions_inherited = Counter::default();
        registry.register(
            "actions_inherited",
            "Owed action intents re-issued by a new leader at its hand-over",
            actions_inherited.clone(),
        );
        let actions_found_uncounted = Counter::default();
        registry.register(
            "actions_found_uncounted",
            "Suspensions a new leader found recorded on TrainJobs, not counted by the status it inherited, and counted",
            actions_found_uncounted.clone(),
        );
        let executor_panics = Counter::default();
        registry.register(
            "executor_panics",
            "Panics caught in the executor (the work is reported failed and retried)",
            executor_panics.clone(),
        );
        let relist_deletions = Family::<WatchedKindLabels, Counter>::default();
        registry.register(
            "relist_deletions",
            "Objects found deleted by a watch re-list, without a Delete event, by kind",
            relist_deletions.clone(),
        );
        let actions_limited = Family::<LimitLabels, Counter>::default();
        registry.register(
            "actions_limited",
            "Firings whose actions a blast-radius limit held back (spec.limits, --max-actions-per-hour), by limit",
            actions_limited.clone(),
        );
        let record_lines = Counter::default();
        registry.register(
            "record_lines",
            "Stream lines the recorder produced (--record-dir)",
            record_lines.clone(),
        );
        let record_bytes_written = Counter::default();
        registry.register(
            "record_bytes_written",
            "Compressed bytes the recorder wrote",
            record_bytes_written.clone(),
        );
        let record_files_created = Counter::default();
        registry.register(
            "record_files_created",
            "Stream files the recorder started",
            record_files_created.clone(),
        );
        let record_files_deleted = Counter::default();
        registry.register(
            "record_files_deleted",
            "Stream files deleted, oldest first, to stay within --record-max-bytes and --record-max-files",
            record_files_deleted.clone(),
        );
        let record_write_errors = Counter::default();
        registry.register(
            "record_write_errors",
            "Recorder writes, directory creations and deletions that failed (tried again later)",
            record_write_errors.clone(),
        );
        let record_dropped = Family::<RecordDropLabels, Counter>::default();
        registry.register(
            "record_dropped",
            "TrainJob observations or stream lines the recorder dropped, by reason",
            record_dropped.clone(),
        );
        let record_files = Gauge::default();
        registry.register(
            "record_files",
            "Stream files under the record directory, every replica's, at the last flush",
            record_files.clone(),
        );
        let record_bytes = Gauge::default();
        registry.register("record_bytes", "Bytes of those stream files", record_bytes.clone());
        let gpu_hours_saved = Family::<SavingsLabels, FloatCounter>::default();
        registry.register(
            "gpu_hours_saved",
            "GPU-hours freed by suspending TrainJobs (mode Enforce) or that would have been (mode Audit), by policy and the job's namespace; booked by the leader when the action is done or reported",
            gpu_hours_saved.clone(),
        );
        let dollars_saved = Family::<SavingsLabels, FloatCounter>::default();
        registry.register(
            "dollars_saved",
            "Dollars of those GPU-hours, for policies that set gpuHourCost",
            dollars_saved.clone(),
        );
        let gpu_queries = Family::<GpuQueryLabels, Counter>::default();
        registry.register(
            "gpu_queries",
            "Prometheus queries for the GPUs' DCGM metrics (--prometheus-url), by result",
            gpu_queries.clone(),
        );
        // 1 ms … ~60 s.
        let gpu_query_seconds = Histogram::new(exponential_buckets(1e-3, 3.0, 11));
        registry.register(
            "gpu_query_seconds",
            "Time one GPU metrics query took, answer decoded",
            gpu_query_seconds.clone(),
        );
        let gpu_metrics_up = Family::<PrometheusLabels, Gauge>::default();
        registry.register(
            "gpu_metrics_up",
            "1 while the latest GPU metrics query succeeded, 0 while they fail (GPU rules then judge nothing new)",
            gpu_metrics_up.clone(),
        );
        let gpu_jobs = Gauge::default();
        registry.register(
            "gpu_jobs",
            "TrainJobs the latest GPU metrics query found readings for",
            gpu_jobs.clone(),
        );
        let gpu_series_unmatched = Gauge::default();
        registry.register(
            "gpu_series_unmatched",
            "GPU series of the latest query (one per GPU, by UUID, and gauge) whose pod is no TrainJob's (other workloads, free GPUs, or pods the controller cannot list)",
            gpu_series_unmatched.clone(),
        );
        let checkpoint_requests = Family::<CheckpointLabels, Counter>::default();
        registry.register(
            "checkpoint_requests",
            "Checkpoint requests written (requested) and settled (acknowledged, timed_out, withdrawn)",
            checkpoint_requests.clone(),
        );
        // 1 s … ~4.5 h.
        let checkpoint_ack_seconds = Histogram::new(exponential_buckets(1.0, 2.0, 15));
        registry.register(
            "checkpoint_ack_seconds",
            "Time from a checkpoint request's write to trainwarden observing the job's acknowledgement",
            checkpoint_ack_seconds.clone(),
        );
        let job = job_metrics.then(JobFamilies::default);
        if let Some(families) = &job {
            families.register(&mut registry);
        }
        Metrics {
            registry,
            samples,
            evaluations,
            evaluation_seconds,
            firings,
            actions,
            api_errors,
            api_requests,
            api_request_seconds,
            executor_queue_seconds,
            slot_wait_seconds,
            input_lag_seconds,
            status_writes,
            history_checkpoints,
            invalid_inputs,
            unknown_progress_fields,
            work_dropped,
            notifications,
            jobs,
            policies,
            leader,
            action_retries,
            actions_owed,
            actions_abandoned,
            handovers,
            actions_inherited,
            actions_found_uncounted,
            executor_panics,
            relist_deletions,
            actions_limited,
            record_lines,
            record_bytes_written,
            record_files_created,
            record_files_deleted,
            record_write_errors,
            record_dropped,
            record_files,
            record_bytes,
            gpu_hours_saved,
            dollars_saved,
            gpu_queries,
            gpu_query_seconds,
            gpu_metrics_up,
            gpu_jobs,
            gpu_series_unmatched,
            checkpoint_requests,
            checkpoint_ack_seconds,
            job,
        }
    }

    /// Counts `n` owed intents dropped for `reason` in `trainwarden_actions_abandoned`.
    pub fn abandoned(&self, reason: crate::messages::AbandonReason, n: u64) {
        if n > 0 {
            self.actions_abandoned.get_or_create(&AbandonReasonLabels { reason }).inc_by(n);
        }
    }

    /// Counts one action (or Event record) in `trainwarden_actions`.
    pub fn action(&self, action: ActionLabel, mode: ModeLabel, result: ActionResult) {
        self.actions.get_or_create(&ActionLabels { action, mode, result }).inc();
    }

    /// Counts a failed or timed-out API call in `trainwarden_api_errors`.
    pub fn api_error(&self, operation: ApiOperation) {
        self.api_errors.get_or_create(&OperationLabels { operation }).inc();
    }

    /// Counts an API request in `trainwarden_api_requests`.
    pub fn api_request(&self, operation: ApiOperation) {
        self.api_requests.get_or_create(&OperationLabels { operation }).inc();
    }

    /// Observes one API request's duration in `trainwarden_api_request_duration_seconds`.
    pub fn api_request_took(&self, operation: ApiOperation, took: std::time::Duration) {
        self.api_request_seconds.get_or_create(&OperationLabels { operation }).observe(took.as_secs_f64());
    }

    /// Observes how long work of `work`'s kind waited in `trainwarden_executor_queue_seconds`.
    pub fn queued(&self, work: WorkKind, waited: std::time::Duration) {
        self.executor_queue_seconds.get_or_create(&WorkLabels { work }).observe(waited.as_secs_f64());
    }

    /// Counts an unreadable watched object in `trainwarden_invalid_inputs`.
    pub fn invalid(&self, input: InvalidInput) {
        self.invalid_inputs.get_or_create(&InvalidInputLabels { input }).inc();
    }

    /// Counts a history checkpoint in `trainwarden_history_checkpoints`.
    pub fn history(&self, result: HistoryResult) {
        self.history_checkpoints.get_or_create(&HistoryLabels { result }).inc();
    }

    /// Counts dropped work in `trainwarden_work_dropped`.
    pub fn dropped(&self, reason: DroppedWork) {
        self.work_dropped.get_or_create(&DroppedWorkLabels { reason }).inc();
    }

    /// Counts a dropped observation or lines in `trainwarden_record_dropped`.
    pub fn record_drop(&self, reason: RecordDrop) {
        self.record_dropped.get_or_create(&RecordDropLabels { reason }).inc();
    }

    /// Books what a job's suspension saved (`Enforce`) or would have saved (`Audit`) in
    /// `trainwarden_gpu_hours_saved` and, when priced, `trainwarden_dollars_saved`.
    pub fn saved(&self, labels: &SavingsLabels, gpu_hours: f64, dollars: Option<f64>) {
        self.gpu_hours_saved.get_or_create(labels).inc_by(gpu_hours);
        if let Some(d) = dollars {
            self.dollars_saved.get_or_create(labels).inc_by(d);
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The latency families on `/metrics`: each observation lands in the first bucket that holds it, labelled
    /// by its operation or kind of work.
    #[test]
    fn api_request_and_queue_latencies_are_exported_by_label() {
        let metrics = Metrics::with_job_metrics(false);
        metrics.api_request_took(ApiOperation::GetTrainjob, Duration::from_micros(3_500));
        metrics.api_request_took(ApiOperation::PatchTrainjob, Duration::from_millis(300));
        metrics.queued(WorkKind::Act, Duration::from_millis(40));
        metrics.input_lag_seconds.observe(0.0005);
        let text = metrics.encode();
        for line in [
            r#"trainwarden_api_request_duration_seconds_bucket{le="0.002",operation="get_trainjob"} 0"#,
            r#"trainwarden_api_request_duration_seconds_bucket{le="0.004",operation="get_trainjob"} 1"#,
            r#"trainwarden_api_request_duration_seconds_bucket{le="0.256",operation="patch_trainjob"} 0"#,
            r#"trainwarden_api_request_duration_seconds_bucket{le="0.512",operation="patch_trainjob"} 1"#,
            r#"trainwarden_executor_queue_seconds_bucket{le="0.032",work="act"} 0"#,
            r#"trainwarden_executor_queue_seconds_bucket{le="0.064",work="act"} 1"#,
            r#"trainwarden_input_lag_seconds_bucket{le="0.001"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in:\n{text}");
        }
        assert!(!text.contains(r#"work="history""#), "no series for work never queued");
    }
}
