//! The label sets of the controller's metrics and how their values are written (snake case, by
//! `as_str` where the type has one).

use std::fmt::Write;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use trainwarden_core::Mode;

use crate::messages::{AbandonReason, ActionResult, ExecutedAction, WorkKind};

/// Labels of `trainwarden_actions`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// What was done: the executed action, or `event_record`.
    pub action: ActionLabel,
    /// Audit or Enforce; `-` for Event records.
    pub mode: ModeLabel,
    /// done, unchanged (already in that state), refused, failed, reported (Audit), skipped_not_leader.
    pub result: ActionResult,
}

/// The `action` label: what the executor did, or `event_record` for a Kubernetes Event it recorded.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ActionLabel {
    /// An action the executor performed or reported.
    Executed(ExecutedAction),
    /// A Kubernetes Event the executor recorded on a TrainJob (firing, resolution, rule error, exemption).
    EventRecord,
}

/// The `mode` label: a policy mode, or `-` where none applies.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct ModeLabel(pub Option<Mode>);

/// The Kubernetes API calls the executor and the status writer make, and the TrainJob watch (its errors).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ApiOperation {
    /// `get_trainjob`: reading a TrainJob before acting on it.
    GetTrainjob,
    /// `patch_trainjob`: a patch of a TrainJob (suspend, annotate, scale and its dry run).
    PatchTrainjob,
    /// `patch_verdict`: a TrainJob's verdict annotation written (one per change of its pending/firing rules).
    PatchVerdict,
    /// `patch_history`: a TrainJob's history checkpoint written (at most one per `--history-interval`, and
    /// at a firing), apart from `patch_trainjob` so that "patches per action" counts actions.
    PatchHistory,
    /// `list_workloads`: finding a Kueue-managed TrainJob's Workload.
    ListWorkloads,
    /// `patch_workload`: deactivating a Workload.
    PatchWorkload,
    /// `create_event`: recording a Kubernetes Event.
    CreateEvent,
    /// `patch_policy_status`: a policy status write.
    PatchPolicyStatus,
    /// `watch_trainjobs`: the TrainJob watch (only its errors are counted).
    WatchTrainjobs,
    /// `watch_kueue`: discovering and watching Kueue's Workloads, LocalQueues and ClusterQueues (only its
    /// errors are counted).
    WatchKueue,
    /// `watch_exceptions`: the ProgressPolicyException watch (only its errors are counted).
    WatchExceptions,
    /// `get_policy`: reading a stopping action's policy at the moment of the write (is it still there, the
    /// same object, the same generation?).
    GetPolicy,
    /// `list_exceptions`: reading the ProgressPolicyExceptions of a job's namespace at the moment of a
    /// stopping write (does one hold the rule now?).
    ListExceptions,
    /// `get_jobset`: reading a TrainJob's JobSet to find its pods (a checkpoint request).
    GetJobset,
    /// `list_pods`: listing a TrainJob's pods (a checkpoint request).
    ListPods,
    /// `patch_pod`: a pod's checkpoint-request annotation written or removed.
    PatchPod,
}

impl ApiOperation {
    /// The `operation` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiOperation::GetTrainjob => "get_trainjob",
            ApiOperation::PatchTrainjob => "patch_trainjob",
            ApiOperation::PatchVerdict => "patch_verdict",
            ApiOperation::PatchHistory => "patch_history",
            ApiOperation::ListWorkloads => "list_workloads",
            ApiOperation::PatchWorkload => "patch_workload",
            ApiOperation::CreateEvent => "create_event",
            ApiOperation::PatchPolicyStatus => "patch_policy_status",
            ApiOperation::WatchTrainjobs => "watch_trainjobs",
            ApiOperation::WatchKueue => "watch_kueue",
            ApiOperation::WatchExceptions => "watch_exceptions",
            ApiOperation::GetPolicy => "get_policy",
            ApiOperation::ListExceptions => "list_exceptions",
            ApiOperation::GetJobset => "get_jobset",
            ApiOperation::ListPods => "list_pods",
            ApiOperation::PatchPod => "patch_pod",
        }
    }
}

/// Labels of `trainwarden_api_requests` and `trainwarden_api_errors`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// Which API call.
    pub operation: ApiOperation,
}

/// Labels of `trainwarden_executor_queue_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkLabels {
    /// Which kind of work.
    pub work: WorkKind,
}

/// Watched objects that could not be read.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum InvalidInput {
    /// A TrainJob whose progress is malformed.
    TrainjobProgress,
    /// A policy that is not a valid document or does not compile.
    Policy,
    /// A ProgressPolicyException that cannot be read.
    Exception,
}

/// Labels of `trainwarden_invalid_inputs`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvalidInputLabels {
    /// Which kind of object.
    pub input: InvalidInput,
}

/// Which progress format carried an unknown field.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ProgressSource {
    /// Upstream `status.trainerStatus`.
    TrainerStatus,
    /// The RHOAI `trainer.opendatahub.io/trainerStatus` annotation.
    Annotation,
}

/// Labels of `trainwarden_unknown_progress_fields`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProgressSourceLabels {
    /// Which progress format.
    pub source: ProgressSource,
}

/// Work the evaluation loop produced that never reached its destination.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DroppedWork {
    /// The executor's channel was closed (the controller is stopping).
    ExecutorGone,
    /// The notifier refused an event (shut down, or its queue is full).
    NotifierRefused,
}

/// Labels of `trainwarden_work_dropped`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedWorkLabels {
    /// Why it was dropped.
    pub reason: DroppedWork,
}

/// Labels of `trainwarden_firings`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModeLabels {
    /// Policy mode of the rule that started firing.
    pub mode: ModeLabel,
}

/// Labels of `trainwarden_notifications`: deliveries of one policy's receiver channel, by result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    /// The policy, as `kind/namespace/name` (`kind/name` for a ClusterProgressPolicy).
    pub policy: String,
    /// The receiver's name in the policy.
    pub receiver: String,
    /// `slack`, `email` or `webhook`.
    pub channel: String,
    /// sent, failed, retried, dropped.
    pub result: String,
}

/// How a policy status write ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum StatusWrite {
    /// Applied.
    Done,
    /// The policy no longer exists.
    Gone,
    /// The API call failed (retried on the next 5 s beat).
    Failed,
    /// The API call did not return within the API timeout (retried on the next 5 s beat).
    Timeout,
}

/// What became of a history checkpoint (`trainwarden_history_checkpoints`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum HistoryResult {
    /// Written to the TrainJob.
    Written,
    /// The write failed (tried again 30 s later).
    Failed,
    /// Due, but the global write rate was used up (tried again a second later).
    Deferred,
    /// Restored from the TrainJob after a start or a hand-over.
    Restored,
    /// Found on the TrainJob but not restored (unreadable, another version or uid); the reason is logged.
    Refused,
}

/// Labels of `trainwarden_history_checkpoints`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HistoryLabels {
    /// What became of the checkpoint.
    pub result: HistoryResult,
}

/// Labels of `trainwarden_status_writes`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// How the write ended.
    pub result: StatusWrite,
}

/// Why the recorder dropped an observation or lines (`trainwarden_record_dropped`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RecordDrop {
    /// The channel from the TrainJob watch was full (the recorder was busy writing).
    QueueFull,
    /// Too many lines wait in memory (writes keep failing).
    Backlog,
    /// A file's pending lines whose file was removed (or taken) before they were written; the job starts a
    /// file again.
    FileGone,
}

/// Labels of `trainwarden_record_dropped`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RecordDropLabels {
    /// Why.
    pub reason: RecordDrop,
}

/// Labels of the per-job gauges (`trainwarden_job_*`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    /// The TrainJob's namespace.
    pub namespace: String,
    /// The TrainJob's name.
    pub trainjob: String,
}

/// The canonical metrics the per-job gauge `trainwarden_job_metric` exports: the ones the catalog's policies
/// read. A fixed list, so a job reporting a hundred metrics still costs four series.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum JobMetricName {
    /// `loss`.
    Loss,
    /// `eval_loss`.
    EvalLoss,
    /// `grad_norm`.
    GradNorm,
    /// `learning_rate`.
    LearningRate,
}

impl JobMetricName {
    /// Every exported metric.
    pub const ALL: [JobMetricName; 4] =
        [JobMetricName::Loss, JobMetricName::EvalLoss, JobMetricName::GradNorm, JobMetricName::LearningRate];

    /// The canonical name (the `metric` label).
    pub fn as_str(self) -> &'static str {
        match self {
            JobMetricName::Loss => "loss",
            JobMetricName::EvalLoss => "eval_loss",
            JobMetricName::GradNorm => "grad_norm",
            JobMetricName::LearningRate => "learning_rate",
        }
    }
}

/// Labels of `trainwarden_job_metric`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobMetricLabels {
    /// The TrainJob's namespace.
    pub namespace: String,
    /// The TrainJob's name.
    pub trainjob: String,
    /// Which canonical metric.
    pub metric: JobMetricName,
}

/// The `state` label of `trainwarden_rule_state`: the two states that have a series.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RuleStateLabel {
    /// The condition holds, `for` has not elapsed.
    Pending,
    /// The rule fires.
    Firing,
}

/// Labels of `trainwarden_rule_state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleStateLabels {
    /// The TrainJob's namespace.
    pub namespace: String,
    /// The TrainJob's name.
    pub trainjob: String,
    /// The policy, as `kind/namespace/name` (`kind/name` for a ClusterProgressPolicy).
    pub policy: String,
    /// The rule's name in the policy.
    pub rule: String,
    /// pending or firing.
    pub state: RuleStateLabel,
}

/// The `phase` label of `trainwarden_job_phase`: the job's phase as the policies see it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum JobPhaseLabel {
    /// Neither suspended nor finished.
    Running,
    /// `spec.suspend` is true (by trainwarden, Kueue or a user), or its Kueue Workload is not admitted.
    Suspended,
    /// The `Complete` condition is true.
    Complete,
    /// The `Failed` condition is true.
    Failed,
}

impl From<trainwarden_core::JobPhase> for JobPhaseLabel {
    fn from(phase: trainwarden_core::JobPhase) -> Self {
        use trainwarden_core::JobPhase;
        match phase {
            JobPhase::Running => JobPhaseLabel::Running,
            JobPhase::Suspended => JobPhaseLabel::Suspended,
            JobPhase::Complete => JobPhaseLabel::Complete,
            JobPhase::Failed => JobPhaseLabel::Failed,
        }
    }
}

/// Labels of `trainwarden_job_phase`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobPhaseLabels {
    /// The TrainJob's namespace.
    pub namespace: String,
    /// The TrainJob's name.
    pub trainjob: String,
    /// running, suspended, complete or failed.
    pub phase: JobPhaseLabel,
}

/// Labels of `trainwarden_gpu_hours_saved` and `trainwarden_dollars_saved`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SavingsLabels {
    /// The policy whose rule stopped the job, as `kind/namespace/name` (`kind/name` for a
    /// ClusterProgressPolicy).
    pub policy: String,
    /// The stopped TrainJob's namespace (the team).
    pub namespace: String,
    /// `Enforce` (saved: the job was suspended) or `Audit` (would have been saved: reported only).
    pub mode: ModeLabel,
}

/// Label values are the enums' names in snake case, written by their `as_str`.
macro_rules! label_value {
    ($($ty:ty => |$v:ident| $name:expr;)*) => {$(
        impl EncodeLabelValue for $ty {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                let $v = *self;
                encoder.write_str($name)
            }
        }
    )*};
}

label_value! {
    ActionLabel => |v| match v {
        ActionLabel::Executed(a) => a.as_str(),
        ActionLabel::EventRecord => "event_record",
    };
    ModeLabel => |v| v.0.map_or("-", Mode::as_str);
    ActionResult => |v| v.as_str();
    AbandonReason => |v| v.as_str();
    ApiOperation => |v| v.as_str();
    WorkKind => |v| match v {
        WorkKind::Act => "act",
        WorkKind::Event => "event",
        WorkKind::Notify => "notify",
        WorkKind::History => "history",
        WorkKind::Verdict => "verdict",
            WorkKind::Checkpoint => "checkpoint",
    };
    InvalidInput => |v| match v {
        InvalidInput::TrainjobProgress => "trainjob_progress",
        InvalidInput::Policy => "policy",
        InvalidInput::Exception => "exception",
    };
    ProgressSource => |v| match v {
        ProgressSource::TrainerStatus => "trainer_status",
        ProgressSource::Annotation => "annotation",
    };
    DroppedWork => |v| match v {
        DroppedWork::ExecutorGone => "executor_gone",
        DroppedWork::NotifierRefused => "notifier_refused",
    };
    GpuQueryResult => |v| match v {
        GpuQueryResult::Ok => "ok",
        GpuQueryResult::Failed => "failed",
    };
    LimitLabel => |v| match v {
        LimitLabel::PolicyPerHour => "policy_per_hour",
        LimitLabel::PolicyConcurrent => "policy_concurrent",
        LimitLabel::EnginePerHour => "engine_per_hour",
    };
    WatchedKind => |v| match v {
        WatchedKind::Trainjob => "trainjob",
        WatchedKind::Progresspolicy => "progresspolicy",
        WatchedKind::Clusterprogresspolicy => "clusterprogresspolicy",
        WatchedKind::Progresspolicyexception => "progresspolicyexception",
    };
    HistoryResult => |v| match v {
        HistoryResult::Written => "written",
        HistoryResult::Failed => "failed",
        HistoryResult::Deferred => "deferred",
        HistoryResult::Restored => "restored",
        HistoryResult::Refused => "refused",
    };
    RecordDrop => |v| match v {
        RecordDrop::QueueFull => "queue_full",
        RecordDrop::Backlog => "backlog",
        RecordDrop::FileGone => "file_gone",
    };
    JobMetricName => |v| v.as_str();
    JobPhaseLabel => |v| match v {
        JobPhaseLabel::Running => "running",
        JobPhaseLabel::Suspended => "suspended",
        JobPhaseLabel::Complete => "complete",
        JobPhaseLabel::Failed => "failed",
    };
    RuleStateLabel => |v| match v {
        RuleStateLabel::Pending => "pending",
        RuleStateLabel::Firing => "firing",
    };
    StatusWrite => |v| match v {
        StatusWrite::Done => "done",
        StatusWrite::Gone => "gone",
        StatusWrite::Failed => "failed",
        StatusWrite::Timeout => "timeout",
    };
}

/// How a GPU metrics query ended (`trainwarden_gpu_queries`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum GpuQueryResult {
    /// Prometheus answered with a vector.
    Ok,
    /// No answer within the timeout, a connection error, an HTTP error or an error answer.
    Failed,
}

/// Labels of `trainwarden_gpu_metrics_up`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PrometheusLabels {
    /// The Prometheus queried (`--prometheus-url`).
    pub prometheus: String,
}

/// Labels of `trainwarden_gpu_queries`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuQueryLabels {
    /// How the query ended.
    pub result: GpuQueryResult,
}

/// Labels of `trainwarden_action_retries`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExecutedActionLabels {
    /// The action.
    pub action: ActionLabel,
}

/// Labels of `trainwarden_actions_abandoned`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AbandonReasonLabels {
    /// Why the intent was dropped.
    pub reason: AbandonReason,
}

/// The watched kinds, for `trainwarden_relist_deletions`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum WatchedKind {
    /// `trainjob`.
    Trainjob,
    /// `progresspolicy`.
    Progresspolicy,
    /// `clusterprogresspolicy`.
    Clusterprogresspolicy,
    /// `progresspolicyexception`.
    Progresspolicyexception,
}

/// Which limit held a firing back, for `trainwarden_actions_limited`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum LimitLabel {
    /// `policy_per_hour`: the policy's `spec.limits.maxActionsPerHour`.
    PolicyPerHour,
    /// `policy_concurrent`: the policy's `spec.limits.maxConcurrentSuspended`.
    PolicyConcurrent,
    /// `engine_per_hour`: the controller's `--max-actions-per-hour`.
    EnginePerHour,
}

impl From<trainwarden_core::Limit> for LimitLabel {
    fn from(limit: trainwarden_core::Limit) -> Self {
        use trainwarden_core::LimitKind;
        match limit.kind {
            LimitKind::PolicyPerHour => LimitLabel::PolicyPerHour,
            LimitKind::PolicyConcurrent => LimitLabel::PolicyConcurrent,
            LimitKind::EnginePerHour => LimitLabel::EnginePerHour,
        }
    }
}

/// Labels of `trainwarden_actions_limited`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// Which limit.
    pub limit: LimitLabel,
}

/// Labels of `trainwarden_relist_deletions`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchedKindLabels {
    /// Which kind of object.
    pub kind: WatchedKind,
}

/// Labels of `trainwarden_checkpoint_requests`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckpointLabels {
    /// `requested` (a new request written), `acknowledged`, `timed_out` or `withdrawn` (the job stopped
    /// running while it was pending).
    pub outcome: &'static str,
}
