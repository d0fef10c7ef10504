//! What the controller's tasks say to each other, in one place so no task module imports another:
//!
//! ```text
//!  sources ──Input──▶ brain ──Work──▶ executor ──Outcome (as an Input)──▶ brain
//!                       └──StatusUpdate──▶ status writer
//!  sources ──Observation──▶ recorder (--record-dir; bounded, never waited for)
//! ```
//!
//! A policy is named by one [`PolicyId`] (kind, namespace, name) everywhere.

use std::collections::BTreeMap;
use std::sync::Arc;

use trainwarden_core::describe::Notice;
use trainwarden_core::{
    ActionIntent, ActionKind, CompiledReceiver, Event, GpuSample, JobKey, JobPhase, JobSnapshot, Mode,
    NormalizeError, PolicyDocument, PolicyId, PolicyKind, PolicyRef, QueueDemand, RequestRecord, Savings,
    Timestamp,
};
use trainwarden_kube::ProgressPolicyStatus;
use trainwarden_kube::crd::DocumentError;
use trainwarden_notify::JobProgress;

/// Something the evaluation loop must know about.
#[derive(Debug)]
pub enum Input {
    /// A TrainJob appeared or changed.
    Job(Box<JobInput>),
    /// A TrainJob was deleted.
    JobGone(JobKey),
    /// The initial list of TrainJobs was delivered (again after every re-list).
    JobsListed,
    /// A policy appeared or changed.
    Policy(Box<PolicyInput>),
    /// A policy was deleted.
    PolicyGone(PolicyId),
    /// The initial list of one policy kind was delivered.
    PoliciesListed(PolicyKind),
    /// A ProgressPolicyException appeared or changed.
    Exception(Box<ExceptionInput>),
    /// A ProgressPolicyException was deleted.
    ExceptionGone(trainwarden_core::ExceptionRef),
    /// The exceptions were listed (or cannot be: their CRD is not installed), so jobs may be judged.
    ExceptionsListed,
    /// A namespace's labels (for ClusterProgressPolicy namespace selectors).
    Namespace {
        /// Name of the namespace whose labels these are.
        name: String,
        /// Its labels, now (the selectors of ClusterProgressPolicies match against them).
        labels: BTreeMap<String, String>,
    },
    /// The GPUs' readings of one Prometheus poll ([`crate::sources::gpu_metrics`]): one sample per TrainJob whose pods
    /// hold GPUs that reported, taken at the poll's time.
    GpuReadings(Vec<(JobKey, GpuSample)>),
    /// The GPUs' utilization history read back from Prometheus at start, oldest step first: recorded whole
    /// before any job is judged on it.
    GpuHistory(Vec<Vec<(JobKey, GpuSample)>>),
    /// Whether the GPU metrics can be read: sent at the first poll and whenever it changes.
    GpuMetrics(SourceHealth),
    /// The demand queued behind every known Kueue LocalQueue ([`crate::sources::kueue_queues`]), whole, when it
    /// changed: a Kueue-managed TrainJob's is its LocalQueue's, and unknown when its LocalQueue is not here.
    QueueDemand(Arc<QueueDemands>),
    /// Whether Kueue's queues can be read: sent when it changes.
    KueueQueues(SourceHealth),
    /// What the executor did with an action.
    Outcome(Box<Outcome>),
    /// The controller is stopping: on the leader, every job's checkpoint that changed since its last write
    /// goes out now, whatever the interval; `done` is answered once the executor has written them.
    FlushHistory(tokio::sync::oneshot::Sender<()>),
    /// What the executor did with a history checkpoint: stored, or not (failed, or not the leader).
    HistorySaved {
        /// The TrainJob.
        job: JobKey,
        /// The content hash of the checkpoint.
        content: u64,
        /// The time the checkpoint was taken.
        at: Timestamp,
        /// Whether the API server has it.
        stored: bool,
    },
}

/// Whether a source beside the watches can be read: the latest Prometheus poll for the GPUs' metrics (the
/// `GpuMetrics` condition of the policies with GPU rules), Kueue's queues (`KueueQueues`, of the policies
/// that read the queue).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceHealth {
    /// The source was read.
    pub healthy: bool,
    /// What was found, or why it failed (with the URL queried).
    pub message: String,
}

/// A Kueue LocalQueue: its namespace and name (a TrainJob's `kueue.x-k8s.io/queue-name` names one in the
/// job's namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalQueueRef {
    /// The namespace.
    pub namespace: String,
    /// The LocalQueue's name.
    pub name: String,
}

impl LocalQueueRef {
    /// The LocalQueue `name` in `namespace`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        LocalQueueRef { namespace: namespace.into(), name: name.into() }
    }
}

/// What waits in Kueue, as [`crate::sources::kueue_queues`] sends it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueDemands {
    /// The demand behind every known LocalQueue: pending in its ClusterQueue, or its cohort.
    pub queues: BTreeMap<LocalQueueRef, QueueDemand>,
    /// The pending Workloads counted there that belong to a job (by the job's uid), with their LocalQueue:
    /// a job requeued or preempted waits too, but not behind itself.
    pub own: BTreeMap<String, (LocalQueueRef, QueueDemand)>,
}

impl QueueDemands {
    /// The demand behind a job in LocalQueue `queue`, less its own pending Workload (`uid`: the job's).
    pub fn for_job(&self, queue: &LocalQueueRef, uid: Option<&str>) -> Option<QueueDemand> {
        let mut d = *self.queues.get(queue)?;
        if let Some((own_queue, own)) = uid.and_then(|u| self.own.get(u))
            && own_queue == queue
        {
            d.pending = d.pending.saturating_sub(own.pending);
            d.pending_gpus = (d.pending_gpus - own.pending_gpus).max(0.0);
        }
        Some(d)
    }
}

/// A watched TrainJob, read: its progress normalized, and what trainwarden keeps in its annotations parsed
/// into typed fields (the snapshot's annotations no longer hold the history checkpoint nor the verdict).
#[derive(Debug)]
pub struct JobInput {
    /// The TrainJob's namespace and name.
    pub key: JobKey,
    /// The normalized job, or why its progress could not be read.
    pub snapshot: Result<JobSnapshot, NormalizeError>,
    /// Annotated `trainwarden.dev/exempt: "true"`.
    pub exempt: bool,
    /// `metadata.uid`: a history checkpoint is restored only onto the object it was saved from.
    pub uid: Option<String>,
    /// When its watch event arrived (`trainwarden_input_lag_seconds`).
    pub received: std::time::Instant,
    /// The suspension its last-action record names ([`crate::LAST_ACTION_ANNOTATION`]), if that record is a
    /// suspension that reads.
    pub suspension: Option<FoundSuspension>,
    /// Its history checkpoint ([`crate::HISTORY_ANNOTATION`]), as stored.
    pub history: Option<StoredCheckpoint>,
    /// Its verdict annotation ([`trainwarden_kube::VERDICT_ANNOTATION`]), as it shows now.
    pub verdict: ShownVerdict,
    /// Its checkpoint-request record ([`trainwarden_core::CHECKPOINT_ANNOTATION`]): `None` when absent,
    /// the error when it does not read.
    pub checkpoint: Option<Result<RequestRecord, String>>,
}

/// A suspension found recorded on a TrainJob (`trainwarden.dev/last-action`), for the hand-over count.
///
/// A leader lost within its status interval after suspending a job leaves an action no status counts. A
/// live follower holds the same intent and finds it `already_done` when it leads; a replica that started
/// after the action (the lost one, restarted, winning the Lease) does not: the job is suspended, so its rule
/// does not fire again. Every replica therefore keeps the suspension each TrainJob records, and the one that
/// takes over counts those its inherited status does not (see `brain::counted`).
#[derive(Debug, Clone, PartialEq)]
pub struct FoundSuspension {
    /// The intent id.
    pub id: String,
    /// The policy as the record names it: `ProgressPolicy ns/name` or `ClusterProgressPolicy name`.
    pub policy: String,
    /// The rule that fired.
    pub rule: String,
    /// When the intent was issued.
    pub at: Timestamp,
    /// The GPU-hours the record says it frees.
    pub gpu_hours: Option<f64>,
    /// The dollars the record says it frees.
    pub dollars: Option<f64>,
}

/// A history checkpoint as a TrainJob stores it: the text (restored by the evaluator on a job's first
/// sight), a hash of it (an unchanged annotation is not read again) and its stamp (when it was taken, and
/// the content hash it records), when the header reads.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCheckpoint {
    /// The annotation's text.
    pub text: String,
    /// FNV-1a of the text.
    pub hash: u64,
    /// When the checkpoint was taken and its content hash, from its header.
    pub stamp: Option<(Timestamp, u64)>,
}

/// A TrainJob's verdict annotation as it shows: a hash of its text (what is stored, compared with what
/// should be; absent is a value too) and the rules it lists, when it reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ShownVerdict {
    /// Hash of the annotation's text (`None` hashed when there is no annotation).
    pub hash: u64,
    /// The annotation, parsed; `None` when absent or unreadable.
    pub verdict: Option<trainwarden_kube::Verdict>,
}

impl ShownVerdict {
    /// The hash a verdict's text (or its absence) is compared by: what the TrainJob shows against what the
    /// brain wants it to show.
    pub fn hash_text(text: Option<&str>) -> u64 {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        h.finish()
    }
}

/// A job's history checkpoint to store on the TrainJob ([`crate::HISTORY_ANNOTATION`]).
#[derive(Debug)]
pub struct HistorySave {
    /// The TrainJob.
    pub job: JobKey,
    /// Its uid: the write is refused by the API server if the object is another one by now.
    pub uid: String,
    /// The checkpoint text.
    pub text: String,
    /// Its content hash (see `HistoryCheckpoint`), booked as stored once the write is confirmed.
    pub content: u64,
    /// When it was taken.
    pub at: Timestamp,
}

/// A job's verdict to store on the TrainJob ([`trainwarden_kube::VERDICT_ANNOTATION`]).
#[derive(Debug)]
pub struct VerdictSave {
    /// The TrainJob.
    pub job: JobKey,
    /// The verdict's text; `None`: no rule is pending or firing, the annotation is removed.
    pub text: Option<String>,
    /// The TrainJob's uid, when known: the API server refuses the write if the object is another one by now.
    pub uid: Option<String>,
}

/// A watched ProgressPolicyException, read.
#[derive(Debug)]
pub struct ExceptionInput {
    /// Its namespace and name.
    pub key: trainwarden_core::ExceptionRef,
    /// Its `spec.exceptions[].policyName`s as written (where an invalid one is reported).
    pub policy_names: Vec<String>,
    /// Compiled, or why it cannot be.
    pub compiled: Result<trainwarden_core::CompiledException, String>,
}

/// A watched policy, read.
#[derive(Debug)]
pub struct PolicyInput {
    /// The policy's kind, namespace and name.
    pub key: PolicyId,
    /// `metadata.uid`: a policy deleted and created again under the same name is another policy (its rule
    /// memories and owed actions are not the new one's).
    pub uid: Option<String>,
    /// `metadata.generation`, reported back as the status's observed generation.
    pub generation: i64,
    /// The parsed spec, or why the object is not a valid policy document.
    pub document: Result<PolicyDocument, DocumentError>,
    /// The status as last written (by this controller, before a restart): holds the rule memories.
    pub status: Option<ProgressPolicyStatus>,
}

impl PolicyInput {
    /// A policy object read for the brain: by its watch, or by the executor at a stopping write (which
    /// hands the policy as it now stands to the brain).
    pub fn read<K>(obj: &K, kind: PolicyKind, status: Option<ProgressPolicyStatus>) -> PolicyInput
    where
        K: trainwarden_kube::crd::PolicyResource + kube::ResourceExt,
    {
        PolicyInput {
            key: PolicyId { kind, namespace: obj.namespace(), name: obj.name_any() },
            uid: obj.uid(),
            generation: obj.meta().generation.unwrap_or(0),
            document: obj.to_document(),
            status,
        }
    }
}

/// What the evaluation loop asks the executor for.
#[derive(Debug)]
pub enum Work {
    /// Perform (Enforce) or report (Audit) an action intent.
    Act(Box<Act>),
    /// Record a Kubernetes Event on a TrainJob (a rule fired or resolved, a rule failed, a job is exempt).
    RecordEvent(Box<TrainJobEvent>),
    /// Hand an evaluator event to the notifier: every intent of a firing (so a message can say what was done)
    /// and every resolution (resolved messages). Leader only, like every other side effect.
    Notify(Box<Event>, Option<JobProgress>),
    /// A policy's receivers changed: the notifier (re)configures its channels, which starts or stops their
    /// delivery tasks. On every replica, so a new leader is ready to deliver.
    Receivers(ReceiverChange),
    /// Store a job's history checkpoint on its TrainJob. Leader only, like every other write.
    SaveHistory(Box<HistorySave>),
    /// Store (or remove) a job's verdict annotation. Leader only.
    SaveVerdict(Box<VerdictSave>),
    /// Store these checkpoints one after the other (a stop's flush), then answer.
    FlushHistory(Vec<HistorySave>, tokio::sync::oneshot::Sender<()>),
    /// Bring a TrainJob's pods in line with its pending checkpoint request, or settle a request no action
    /// intent waits on (a manual one, or one whose rule resolved meanwhile). Leader only.
    Checkpoint(Box<CheckpointWork>),
}

/// Work on a TrainJob's checkpoint request that no action intent carries (see [`Work::Checkpoint`]).
#[derive(Debug)]
pub struct CheckpointWork {
    /// The TrainJob.
    pub job: JobKey,
    /// Its uid as the brain saw it: another object of the same name is not touched.
    pub uid: Option<String>,
    /// The pending request's id as the brain saw it.
    pub id: u64,
    /// What to do.
    pub kind: CheckpointWorkKind,
}

/// What [`CheckpointWork`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointWorkKind {
    /// Annotate the pods that lack the request (pods created since it was written).
    SyncPods,
    /// Judge the request against the TrainJob as it is now and settle it if it is answered, timed out or
    /// withdrawn: the record on the TrainJob, the pods' annotation removed, an Event.
    Settle,
}

/// An action intent on its way to the executor, with the view of the cluster the brain judged it under: a
/// stopping action is written only if, at the moment of the write, the cluster still stands that way
/// (`executor::guard`). Reads as the intent itself.
#[derive(Debug)]
pub struct Act {
    /// What to do.
    pub intent: ActionIntent,
    /// What the brain judged with; filled in on the way out of the brain ([`None`] until then: the executor
    /// then checks what it can without it).
    pub judged: Option<Judged>,
}

impl Act {
    /// An intent whose view is filled in on its way out of the brain.
    pub fn new(intent: ActionIntent) -> Self {
        Act { intent, judged: None }
    }
}

impl std::ops::Deref for Act {
    type Target = ActionIntent;

    fn deref(&self) -> &ActionIntent {
        &self.intent
    }
}

/// The brain's view an intent was judged under, as far as the executor can check it against the cluster
/// with O(1) reads at the moment of a stopping write.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judged {
    /// The policy's `metadata.uid` (`None`: not known, only its generation is checked).
    pub policy_uid: Option<String>,
    /// The policy generation the brain has loaded: the rule as it judged it. The intent's own
    /// `policy.generation` is the one it was issued under; a firing that still stands under a later
    /// generation (the rule unchanged) is sent again with that one.
    pub generation: i64,
    /// The TrainJob's `metadata.uid` as the brain last saw it.
    pub job_uid: Option<String>,
    /// The TrainJob's snooze annotation as the brain judged it (trimmed; `None`: absent or empty).
    pub snooze: Option<String>,
    /// Whether the policy honours ProgressPolicyExceptions of the job's namespace (a ClusterProgressPolicy
    /// only those of the namespaces it lists).
    pub honours_exceptions: bool,
}

/// Why an owed intent was dropped without being performed (`trainwarden_actions_abandoned{reason}`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum AbandonReason {
    /// `rule_resolved`: the rule no longer fires (or the job is snoozed) when a retry was due.
    RuleResolved,
    /// `job_deleted`: the TrainJob was deleted.
    JobDeleted,
    /// `job_exempt`: the TrainJob was made exempt.
    JobExempt,
    /// `job_replaced`: at the write, the TrainJob was another object (deleted and created again).
    JobReplaced,
    /// `policy_deleted`: the policy was deleted (seen by the watch, or found gone at the write).
    PolicyDeleted,
    /// `policy_replaced`: at the write, the policy was another object of the same name.
    PolicyReplaced,
    /// `policy_changed`: the policy changed and, judged again under it, the firing no longer stands.
    PolicyChanged,
    /// `excepted`: at the write, a ProgressPolicyException holds the rule for the job.
    Excepted,
    /// `snoozed`: at the write, the TrainJob is snoozed (a snooze its judgement did not know).
    Snoozed,
}

impl AbandonReason {
    /// The `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            AbandonReason::RuleResolved => "rule_resolved",
            AbandonReason::JobDeleted => "job_deleted",
            AbandonReason::JobExempt => "job_exempt",
            AbandonReason::JobReplaced => "job_replaced",
            AbandonReason::PolicyDeleted => "policy_deleted",
            AbandonReason::PolicyReplaced => "policy_replaced",
            AbandonReason::PolicyChanged => "policy_changed",
            AbandonReason::Excepted => "excepted",
            AbandonReason::Snoozed => "snoozed",
        }
    }
}

/// The kinds of executor work, as they wait in its per-job queue (`trainwarden_executor_queue_seconds`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum WorkKind {
    /// `act`: an action intent performed or reported.
    Act,
    /// `event`: a Kubernetes Event recorded on a TrainJob.
    Event,
    /// `notify`: an evaluator event handed to the notifier.
    Notify,
    /// `history`: a history checkpoint stored.
    History,
    /// `verdict`: a verdict annotation stored.
    Verdict,
    /// `checkpoint`: a checkpoint request's pods synced or the request settled.
    Checkpoint,
}

/// A change of one policy's notification receivers.
#[derive(Debug)]
pub enum ReceiverChange {
    /// The policy (a new generation of it) declares these receivers.
    Configure {
        /// The policy that declares them.
        policy: PolicyRef,
        /// Its receivers, compiled; they replace the policy's previous ones.
        receivers: Vec<CompiledReceiver>,
    },
    /// The policy is gone.
    Remove(PolicyRef),
}

impl Work {
    /// The kind of queued work, as `trainwarden_executor_queue_seconds` labels it; `None` for work that is
    /// not queued (about a policy, or a stop's flush).
    pub fn kind(&self) -> Option<WorkKind> {
        Some(match self {
            Work::Act(_) => WorkKind::Act,
            Work::RecordEvent(_) => WorkKind::Event,
            Work::Notify(..) => WorkKind::Notify,
            Work::SaveHistory(_) => WorkKind::History,
            Work::SaveVerdict(_) => WorkKind::Verdict,
            Work::Checkpoint(_) => WorkKind::Checkpoint,
            Work::Receivers(_) | Work::FlushHistory(..) => return None,
        })
    }

    /// The TrainJob the work is about (work of one job runs in order); `None` for work about a policy.
    pub fn job(&self) -> Option<&JobKey> {
        Some(match self {
            Work::Act(a) => &a.intent.job,
            Work::RecordEvent(a) => &a.job,
            Work::SaveHistory(h) => &h.job,
            Work::SaveVerdict(v) => &v.job,
            Work::Checkpoint(c) => &c.job,
            Work::Notify(e, _) => e.job(),
            Work::Receivers(_) | Work::FlushHistory(..) => return None,
        })
    }
}

/// A Kubernetes Event to record on a TrainJob.
#[derive(Debug)]
pub struct TrainJobEvent {
    /// The TrainJob the Event is recorded on.
    pub job: JobKey,
    /// What it says: its reason (which fixes its type and action) and note, worded by
    /// [`trainwarden_core::describe`].
    pub notice: Notice,
    /// The TrainJob's uid as the evaluation loop last saw it, filled in on the way to the executor: the Event
    /// names that object without reading it first. `None` (not known, or the job is gone): read first.
    pub uid: Option<String>,
}

/// What the executor did: the intent's action kind, except that suspending a Kueue-managed TrainJob
/// deactivates its Workload instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExecutedAction {
    /// Set `spec.suspend: true` on the TrainJob.
    Suspend,
    /// Suspension of a Kueue-managed job: its Workload's `spec.active` set to false.
    Deactivate,
    /// Deliver a `notify` action to the policy's receivers (or only record it, with notifications off).
    Notify,
    /// Set the annotation the action names.
    Annotate,
    /// Record a Kubernetes Event named by the action.
    Event,
    /// Change `spec.trainer.numNodes` (refused where the CRD makes `spec.trainer` immutable).
    Scale,
    /// Ask the running job for a checkpoint (its pods' request annotation) and record the outcome.
    Checkpoint,
}

impl ExecutedAction {
    /// The name in status, logs and the `action` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutedAction::Suspend => "suspend",
            ExecutedAction::Deactivate => "deactivate",
            ExecutedAction::Notify => "notify",
            ExecutedAction::Annotate => "annotate",
            ExecutedAction::Event => "event",
            ExecutedAction::Scale => "scale",
            ExecutedAction::Checkpoint => "checkpoint",
        }
    }

    /// Whether the action stopped the job (its savings count).
    pub fn stops_job(self) -> bool {
        matches!(self, ExecutedAction::Suspend | ExecutedAction::Deactivate)
    }
}

impl From<ActionKind> for ExecutedAction {
    fn from(kind: ActionKind) -> Self {
        match kind {
            ActionKind::Suspend => ExecutedAction::Suspend,
            ActionKind::Notify => ExecutedAction::Notify,
            ActionKind::Annotate => ExecutedAction::Annotate,
            ActionKind::Event => ExecutedAction::Event,
            ActionKind::Scale => ExecutedAction::Scale,
            ActionKind::Checkpoint => ExecutedAction::Checkpoint,
        }
    }
}

impl std::fmt::Display for ExecutedAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How an action ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActionResult {
    /// Performed.
    Done,
    /// Nothing to do: the object already was in that state.
    Unchanged,
    /// This very intent was performed before (its id is in the TrainJob's `trainwarden.dev/intents` record):
    /// by an earlier leader, or by this replica before a restart. Counts as done, once.
    AlreadyDone,
    /// Audit mode (or notifications off): reported, not performed.
    Reported,
    /// Not possible on this TrainJob (for example `spec.trainer` is immutable); not retried.
    Refused,
    /// Failed; the brain tries again after a backoff while the rule still wants it.
    Failed,
    /// This replica is not the leader (or stopped leading before its next write): skipped, owed until a
    /// leader performs it.
    NotLeader,
    /// Not performed: at the moment of the write the cluster no longer stood as the rule was judged (its
    /// policy deleted or replaced, the job replaced, an exception or a snooze holding it). Settled.
    Abandoned,
    /// Waiting for a checkpoint (a `checkpoint`, or a `suspend` with `checkpointFirst`): the request is on
    /// the job's pods and not yet answered. Not settled: the brain sends the intent again when the job's
    /// report answers it, or at the request's deadline ([`Outcome::wait_until`]).
    Waiting,
    /// Not performed yet: the policy has a generation the brain has not judged the job under. The fresh
    /// policy goes to the brain first; it sends the intent again if the same firing still stands under the
    /// policy as it now is, or abandons it.
    Stale,
}

impl ActionResult {
    /// The name in status, logs and the `result` metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionResult::Done => "done",
            ActionResult::Unchanged => "unchanged",
            ActionResult::AlreadyDone => "already_done",
            ActionResult::Reported => "reported",
            ActionResult::Refused => "refused",
            ActionResult::Failed => "failed",
            ActionResult::NotLeader => "skipped_not_leader",
            ActionResult::Abandoned => "abandoned",
            ActionResult::Stale => "stale",
            ActionResult::Waiting => "waiting",
        }
    }

    /// Whether the intent is settled for good (nothing more to try).
    pub fn settles(self) -> bool {
        !matches!(
            self,
            ActionResult::Failed | ActionResult::NotLeader | ActionResult::Stale | ActionResult::Waiting
        )
    }
}

/// What the executor did with one intent, for status.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The intent's id.
    pub intent: String,
    /// The policy whose rule issued the intent.
    pub policy: PolicyId,
    /// The TrainJob it was for.
    pub job: JobKey,
    /// The rule that fired.
    pub rule: String,
    /// What was done (a Kueue job's suspension is [`ExecutedAction::Deactivate`]).
    pub action: ExecutedAction,
    /// The policy's mode when the intent was issued.
    pub mode: Mode,
    /// How it ended.
    pub result: ActionResult,
    /// Why, for status and logs (e.g. `this action was already performed`); empty when nothing needs saying.
    pub message: String,
    /// When the intent was issued (the firing's time, not when the executor finished).
    pub at: Timestamp,
    /// What the job's suspension frees (GPU-hours, dollars), copied from the intent; `None` when not known.
    pub savings: Option<Savings>,
    /// [`ActionResult::Stale`]: the policy's generation the executor found at the write.
    pub policy_generation: Option<i64>,
    /// [`ActionResult::Waiting`]: the request's deadline, when the intent is sent again at the latest.
    pub wait_until: Option<Timestamp>,
}

impl Outcome {
    /// The outcome of `intent` with this result and message (the action as the intent names it).
    pub fn of(intent: &ActionIntent, result: ActionResult, message: impl Into<String>) -> Self {
        Outcome {
            intent: intent.id.clone(),
            policy: intent.policy.id(),
            job: intent.job.clone(),
            rule: intent.rule.clone(),
            action: intent.action.kind().into(),
            mode: intent.mode,
            result,
            message: message.into(),
            at: intent.at,
            savings: intent.savings.clone(),
            policy_generation: None,
            wait_until: None,
        }
    }
}

/// A policy's new status, for the status writer.
#[derive(Debug)]
pub struct StatusUpdate {
    /// The policy the status belongs to.
    pub key: PolicyId,
    /// The full status to apply; the default (empty) status means the policy is gone.
    pub status: ProgressPolicyStatus,
}

/// What the TrainJob and Namespace watches saw, for the recorder (`--record-dir`): the progress exactly as
/// the job carried it, and its namespace's labels, so a recorded stream replays what the controller saw
/// (cluster policies' `namespaceSelector` included).
#[derive(Debug)]
pub enum Observation {
    /// A TrainJob appeared or changed (or was re-delivered unchanged).
    Seen(Box<JobObservation>),
    /// A TrainJob was deleted (a Delete event, or found gone by a re-list).
    Gone {
        /// The TrainJob.
        job: JobKey,
        /// When the controller saw it go.
        at: Timestamp,
    },
    /// A namespace's labels, as listed or changed.
    Namespace {
        /// The namespace.
        name: String,
        /// Its `metadata.labels`.
        labels: BTreeMap<String, String>,
        /// When the controller saw them.
        at: Timestamp,
    },
}

/// One TrainJob as a watch event delivered it.
#[derive(Debug)]
pub struct JobObservation {
    /// The TrainJob's namespace and name.
    pub job: JobKey,
    /// `metadata.uid`: a job deleted and created again under the same name is recorded in a new file.
    pub uid: Option<String>,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// Accelerators held while running, when the job says (and could be read).
    pub gpus: Option<f64>,
    /// Where the job is in its life; `None` when the object could not be read.
    pub phase: Option<JobPhase>,
    /// The progress report as the object carries it, unparsed.
    pub progress: Option<RecordedProgress>,
    /// The report's `lastUpdatedTime`, when it could be read.
    pub sample_time: Option<Timestamp>,
    /// When the controller saw the event.
    pub at: Timestamp,
}

/// A progress report as a TrainJob carries it, in the form a stream line takes.
#[derive(Clone, Debug, PartialEq)]
pub enum RecordedProgress {
    /// Upstream `status.trainerStatus`, the JSON as is.
    TrainerStatus(serde_json::Value),
    /// The RHOAI `trainer.opendatahub.io/trainerStatus` annotation's text.
    Annotation(String),
}
