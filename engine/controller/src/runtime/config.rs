//! Controller settings (the `trainwarden controller` flags).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Where `/healthz`, `/readyz` and `/metrics` are served (`None`: not at all, for tests).
    pub http_addr: Option<SocketAddr>,
    /// Watch only this namespace (TrainJobs and ProgressPolicies); `None` watches the whole cluster.
    pub namespace: Option<String>,
    /// Watch only TrainJobs with these labels (a label selector, e.g. `team=ml`): shards one cluster between
    /// controllers. `None`: every TrainJob in scope.
    pub trainjob_selector: Option<String>,
    /// Leader election on a Lease; without it this replica always acts (run exactly one).
    pub leader_election: bool,
    /// Name of the leader-election Lease.
    pub lease_name: String,
    /// Namespace of the leader-election Lease (the chart passes the release namespace).
    pub lease_namespace: String,
    /// This replica's name in the Lease (the pod name).
    pub identity: String,
    /// How long a lease is valid without renewal; a new leader takes over at most this long after the old
    /// one died.
    pub lease_duration: Duration,
    /// Deliver `notify` actions (Slack, email, webhooks) to the receivers the policies declare. Off: notify
    /// intents are only recorded.
    pub notifications: bool,
    /// Extra CA certificates (PEM) trusted for notification receivers (a mail relay or webhook behind a
    /// private CA), in addition to the public web roots.
    pub notification_ca_pems: Vec<Vec<u8>>,
    /// Deactivate the Kueue Workload of Kueue-managed TrainJobs instead of setting `spec.suspend`.
    pub kueue: bool,
    /// Watch Kueue's Workloads, LocalQueues and ClusterQueues for `queue_pending()` and
    /// `queue_pending_gpus()` ([`crate::sources::kueue_queues`]); off, those read as unknown.
    pub kueue_queues: bool,
    /// Re-evaluation cadence of jobs without news (exact timers fire independently of it).
    pub eval_interval: Duration,
    /// The least time between two status writes of one policy.
    pub status_interval: Duration,
    /// Deadline of each API call the executor and status writer make.
    pub api_timeout: Duration,
    /// Capacity of the channel into the evaluation loop (watch events, executor outcomes); a full one makes
    /// the watches wait.
    pub input_queue: usize,
    /// Capacity of the channels to the executor and to the status writer.
    pub work_queue: usize,
    /// Least time between two writes of one job's history checkpoint ([`crate::HISTORY_ANNOTATION`]); a
    /// job whose history did not change is not written at all.
    pub history_interval: Duration,
    /// Most checkpoint writes per second over all jobs (a burst of this many, then this many per second):
    /// a fleet of 20,000 jobs must not turn into 20,000 patches at once after a hand-over.
    pub history_writes_per_second: u32,
    /// Export the per-job gauges on `/metrics` (`trainwarden_job_*`, `trainwarden_rule_state`): a few series
    /// per judged TrainJob ([`crate::metrics::JobFamilies`]). Off: those families are not registered.
    pub job_metrics: bool,
    /// Record every TrainJob's progress as replayable streams (`--record-dir`); `None`: no recording.
    pub record: Option<RecordConfig>,
    /// The longest an owner's snooze ([`crate::SNOOZE_ANNOTATION`]) holds a TrainJob's actions, counted from
    /// when the controller first saw the annotation's value (kept across restarts in the job's history
    /// checkpoint); zero allows no snooze.
    pub max_snooze: Duration,
    /// At most this many Enforce firings that suspend or scale a job in any rolling hour, over every policy
    /// (`--max-actions-per-hour`); `None`: no cap.
    pub max_actions_per_hour: Option<u32>,
    /// Where the evaluation loop's "now" comes from: the machine's clock, or, to replay a recorded stream
    /// through the whole controller, the stream's own.
    pub clock: Clock,
    /// Read the GPUs' DCGM metrics from Prometheus (`--prometheus-url`); `None`: GPU rules judge nothing and
    /// the policies that have them say so in their `GpuMetrics` condition.
    pub gpu_metrics: Option<GpuMetricsConfig>,
}

/// Where and how often the GPUs' metrics are read ([`crate::sources::gpu_metrics`]).
#[derive(Clone, Debug)]
pub struct GpuMetricsConfig {
    /// Prometheus' base URL (`http://prometheus-operated.monitoring:9090`, or OpenShift's Thanos querier
    /// `https://thanos-querier.openshift-monitoring.svc:9091`); `/api/v1/query` is appended.
    pub prometheus_url: String,
    /// Time between two polls (one query each, for every job at once).
    pub interval: std::time::Duration,
    /// Deadline of one query.
    pub timeout: std::time::Duration,
    /// A file holding the bearer token sent with each query, read again at every poll (a projected
    /// service-account token or a mounted Secret rotates).
    pub bearer_token_file: Option<PathBuf>,
    /// Extra CA certificates (PEM) trusted for Prometheus (the service CA of a cluster-internal querier).
    pub ca_pems: Vec<Vec<u8>>,
    /// At start, read this much of the GPUs' utilization history back (one range query), so GPU rules judge
    /// after a restart or a hand-over as if the controller had never stopped; zero: not at all.
    pub backfill: std::time::Duration,
}

impl GpuMetricsConfig {
    /// Polling `prometheus_url` every 30 s with a 10 s deadline, without a token or extra CA, an hour of
    /// history read back at start.
    pub fn new(prometheus_url: impl Into<String>) -> Self {
        GpuMetricsConfig {
            prometheus_url: prometheus_url.into(),
            interval: std::time::Duration::from_secs(30),
            timeout: std::time::Duration::from_secs(10),
            bearer_token_file: None,
            ca_pems: Vec::new(),
            backfill: std::time::Duration::from_secs(3600),
        }
    }
}

/// Where the evaluation loop's "now" comes from ([`crate::brain::run`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Clock {
    /// The machine's clock: the controller in a cluster.
    #[default]
    Wall,
    /// A recorded stream's own clock, to replay it through the whole controller on a test cluster (the
    /// Friday story in the README is recorded so): time starts at `from` and moves to each progress
    /// report's `lastUpdatedTime` when the report arrives; the timers a report passes run first, each at its
    /// own instant, in order, as `trainwarden replay` runs them. Between reports time stands still, so this
    /// is never for a live cluster (a hung job would never be found stalled); retries of failed actions and
    /// checkpoint writes also wait for the next report. No flag sets it.
    Reports {
        /// The time before the first report: policies are applied then.
        from: trainwarden_core::Timestamp,
    },
}

/// Where and how much the recorder writes ([`crate::recorder`]).
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// The directory shared by every replica; each writes into `<dir>/<identity>/`.
    pub dir: PathBuf,
    /// The longest a line waits in memory before it is compressed and written (as its own gzip member).
    pub flush_interval: Duration,
    /// A stream file that reaches this many (compressed) bytes is closed; the job goes on in a new file.
    pub max_file_bytes: u64,
    /// The most bytes of stream files under `dir` (every replica's); the oldest files are deleted first.
    pub max_bytes: u64,
    /// The most stream files under `dir` (every replica's); the oldest files are deleted first.
    pub max_files: usize,
    /// Capacity of the channel from the TrainJob watch to the recorder; a full one drops the observation
    /// (counted), it never makes the watch wait.
    pub queue: usize,
}

impl RecordConfig {
    /// Recording into `dir` with the default bounds: 10 s flushes, 16 MiB files, 1 GiB and 10,000 files in
    /// all.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        RecordConfig {
            dir: dir.into(),
            flush_interval: Duration::from_secs(10),
            max_file_bytes: 16 << 20,
            max_bytes: 1 << 30,
            max_files: 10_000,
            queue: 4096,
        }
    }
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            http_addr: Some(SocketAddr::from(([0, 0, 0, 0], 8080))),
            namespace: None,
            trainjob_selector: None,
            leader_election: true,
            lease_name: "trainwarden-leader".into(),
            lease_namespace: "default".into(),
            identity: "trainwarden".into(),
            lease_duration: Duration::from_secs(15),
            notifications: true,
            notification_ca_pems: Vec::new(),
            kueue: true,
            kueue_queues: true,
            eval_interval: Duration::from_secs(30),
            status_interval: Duration::from_secs(1),
            api_timeout: Duration::from_secs(10),
            input_queue: 4096,
            work_queue: 4096,
            history_interval: Duration::from_secs(300),
            history_writes_per_second: 5,
            job_metrics: true,
            record: None,
            max_snooze: Duration::from_secs(24 * 3600),
            max_actions_per_hour: None,
            clock: Clock::Wall,
            gpu_metrics: None,
        }
    }
}
