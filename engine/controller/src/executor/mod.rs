//! The executor: the only code that writes to TrainJobs, Kueue Workloads and Events.
//!
//! Work arrives from the evaluation loop as descriptions ([`Work`]); each item is checked against the
//! object's current state first, so repeating it changes nothing (idempotent: an intent whose id is in the
//! TrainJob's `trainwarden.dev/intents` record is `already_done`), bounded by a deadline per API call,
//! retried on transient failures, counted in metrics, and reported back as an [`Outcome`]. Only the leader
//! executes, checked before every call; what a follower skips stays owed in its brain's ledger. Each job's
//! work runs supervised: a panic is caught, counted and reported as a failure.
//!
//! `queue` keeps work of one TrainJob in order; `call` makes one API call (deadline, retries, metrics);
//! `history` stores a job's history checkpoint; `ssa` writes by server-side apply, re-stating what trainwarden owns; `actions` has one module per
//! action kind; `events` records Kubernetes Events. `status.trainerStatus` belongs to Kubeflow (manager
//! `trainer-status`) and is never written.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{info, warn};
use trainwarden_core::describe::Notice;
use trainwarden_core::describe::words::{action as describe_action, past};
use trainwarden_core::{ActionIntent, ActionSpec, Mode};
use trainwarden_kube::trainjob::trainjob_api;
use trainwarden_notify::Notifier;
use trainwarden_notify::alert::{ActionState, resume_hint};

use crate::messages::{Act, ActionResult, ExecutedAction, Input, Outcome, ReceiverChange, Work};
use crate::metrics::{ActionLabel, ApiOperation, DroppedWork, Metrics, ModeLabel};
use crate::runtime::config::ControllerConfig;
use crate::runtime::leader::Leadership;
use crate::{INTENTS_ANNOTATION, LAST_ACTION_ANNOTATION};

mod actions;
mod call;
mod events;
mod guard;
mod history;
mod queue;
mod ssa;
mod verdict;

pub use actions::workload_resource;
use call::CallError;
use events::object_reference;
use queue::JobQueues;
pub use ssa::{OwnedFields, owned_fields};
use ssa::{intents_with, last_action, last_action_id, performed_intents};

/// How many jobs the executor works on at once.
pub const CONCURRENCY: usize = 16;

/// How many intent ids a TrainJob's `trainwarden.dev/intents` record keeps (a firing issues at most 16
/// actions, and older firings' intents are settled long before).
pub const RECORDED_INTENTS: usize = 16;

/// What an action's write records on the TrainJob, in the same apply as the change itself: the last action
/// and the intents record with this intent's id.
pub(crate) struct Record {
    last_action: String,
    intents: String,
}

impl Record {
    fn annotations(&self) -> [(&'static str, &str); 2] {
        [(LAST_ACTION_ANNOTATION, &self.last_action), (INTENTS_ANNOTATION, &self.intents)]
    }
}

/// How a performed (or reported) action ended, and what to say about it.
pub(crate) struct Ended {
    result: ActionResult,
    message: String,
    /// The Kueue Workload a suspension went through, so a message can say how to reactivate it.
    workload: Option<String>,
    /// [`ActionResult::Stale`]: the policy's generation found at the write.
    policy_generation: Option<i64>,
    /// [`ActionResult::Waiting`]: the checkpoint request's deadline.
    wait_until: Option<trainwarden_core::Timestamp>,
}

impl Ended {
    fn new(result: ActionResult, message: impl Into<String>) -> Self {
        Ended { result, message: message.into(), workload: None, policy_generation: None, wait_until: None }
    }

    /// Waiting for checkpoint request `id`, answered or timed out by `until`.
    fn waiting(id: u64, until: trainwarden_core::Timestamp) -> Self {
        let mut ended = Ended::new(
            ActionResult::Waiting,
            format!(
                "checkpoint request {id} is on the job's pods; waiting for its acknowledgement until {until}"
            ),
        );
        ended.wait_until = Some(until);
        ended
    }
}

/// What a message about the firing should say of an Enforce action the executor just ended: what was done
/// (past tense) and how to undo it, or why it was not done. `None` when nothing new is known (Audit mode,
/// `notify` itself, or another replica now owes the action).
fn notified_state(intent: &ActionIntent, action: ExecutedAction, ended: &Ended) -> Option<ActionState> {
    if intent.mode != Mode::Enforce || matches!(intent.action, ActionSpec::Notify(_)) {
        return None;
    }
    if action == ExecutedAction::Checkpoint {
        // Its message says how the request ended (saved at a step, or not acknowledged in time).
        return match ended.result {
            ActionResult::Done => Some(ActionState::Done { what: ended.message.clone(), undo: None }),
            ActionResult::Refused | ActionResult::Abandoned => {
                Some(ActionState::NotDone(ended.message.clone()))
            }
            _ => None,
        };
    }
    let description = describe_action(&intent.action);
    let workload = ended.workload.as_deref();
    let undo = || action.stops_job().then(|| resume_hint(&intent.job, workload));
    Some(match ended.result {
        ActionResult::Done => {
            let what = match (action, workload) {
                (ExecutedAction::Deactivate, Some(w)) => {
                    format!("suspended the TrainJob (deactivated its Kueue Workload {w})")
                }
                _ => past(&description),
            };
            ActionState::Done { what, undo: undo() }
        }
        ActionResult::Unchanged => {
            let what = match (action, workload) {
                (ExecutedAction::Deactivate, Some(w)) => {
                    format!("found its Kueue Workload {w} already inactive")
                }
                (ExecutedAction::Suspend, _) => "found the TrainJob already suspended".to_string(),
                _ => format!("{} (nothing to change)", past(&description)),
            };
            ActionState::Done { what, undo: undo() }
        }
        // Performed before a restart or a hand-over: found so on the Workload it deactivated (which says
        // how to undo it), or on the TrainJob's record (which does not say how).
        ActionResult::AlreadyDone => match (action, workload) {
            (ExecutedAction::Deactivate, Some(w)) => ActionState::Done {
                what: format!("suspended the TrainJob (deactivated its Kueue Workload {w})"),
                undo: undo(),
            },
            _ => ActionState::Done { what: past(&description), undo: None },
        },
        ActionResult::Failed => ActionState::NotDone(format!(
            "could not {description} ({}); it is tried again while the rule fires",
            ended.message
        )),
        ActionResult::Refused => ActionState::NotDone(format!("could not {description}: {}", ended.message)),
        ActionResult::Abandoned => ActionState::NotDone(format!("did not {description}: {}", ended.message)),
        ActionResult::Reported | ActionResult::NotLeader | ActionResult::Stale | ActionResult::Waiting => {
            return None;
        }
    })
}

/// Why an action failed. Each cause is a variant, so the kind of a failure survives to the outcome (its
/// message is the variant's text).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActionError {
    #[error("the TrainJob no longer exists")]
    JobGone,
    #[error("the TrainJob is managed by Kueue (queue {queue}) but no Workload owned by it exists yet")]
    NoWorkload { queue: String },
    #[error(
        "the API server serves no Kueue Workload version trainwarden knows (kueue.x-k8s.io v1beta2, v1beta1)"
    )]
    NoWorkloadApi,
    #[error("{context}: {source}")]
    Call { context: String, source: CallError },
    /// Reading the TrainJob again between two writes failed.
    #[error("{0}")]
    Reread(CallError),
    #[error("resized to {nodes} nodes but resuming failed, the job stays suspended: {source}")]
    ResumeFailed { nodes: i32, source: CallError },
}

impl ActionError {
    fn call(context: impl Into<String>, source: CallError) -> Self {
        ActionError::Call { context: context.into(), source }
    }

    /// The replica stopped leading before one of the action's calls: the intent is owed, not failed.
    fn lost_leadership(&self) -> bool {
        matches!(
            self,
            ActionError::Call { source: CallError::NotLeader, .. }
                | ActionError::Reread(CallError::NotLeader)
                | ActionError::ResumeFailed { source: CallError::NotLeader, .. }
        )
    }
}

/// Runs `work` and turns a panic in it into `Err` with the panic's message: one job's broken action must
/// not take the executor (or that job's queue) down with it.
pub async fn supervise<T>(work: impl std::future::Future<Output = T>) -> Result<T, String> {
    use futures::FutureExt;
    std::panic::AssertUnwindSafe(work).catch_unwind().await.map_err(|panic| {
        panic
            .downcast_ref::<&str>()
            .map(ToString::to_string)
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// The TrainJob an action is performed on, as read just before, and how Events name the policy.
pub(crate) struct Target<'a> {
    api: &'a Api<DynamicObject>,
    job: &'a DynamicObject,
    reference: ObjectReference,
    /// `ProgressPolicy ns/name (rule r)`.
    by: String,
    /// The rule's reason.
    summary: &'a str,
}

/// Performs the brain's [`Work`]: actions, Kubernetes Events, notifications. Only the
/// leader writes; each API call has a deadline and is counted.
pub struct Executor {
    client: Client,
    recorder: Recorder,
    /// Who records Events, for the recorders of Events that name a TrainJob by uid alone (see `events`).
    reporter: Reporter,
    metrics: Arc<Metrics>,
    leader: Leadership,
    notifier: Option<Notifier>,
    kueue: bool,
    timeout: Duration,
    /// Where "now" comes from, for an exception's or snooze's end at the write (see `guard`).
    clock: crate::runtime::config::Clock,
    /// `notify` intents whose delivery is awaited and whose outcome the brain has not been sent yet (see
    /// `actions/notify.rs`); a graceful stop waits for it to reach zero after draining the notifier.
    awaiting_delivery: Arc<std::sync::atomic::AtomicUsize>,
}

impl Executor {
    /// An executor whose calls time out after `config.api_timeout`; `notifier` is `None` with notifications
    /// off.
    pub fn new(
        client: Client,
        config: &ControllerConfig,
        metrics: Arc<Metrics>,
        leader: Leadership,
        notifier: Option<Notifier>,
    ) -> Self {
        let reporter = Reporter { controller: "trainwarden".into(), instance: Some(config.identity.clone()) };
        Executor {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            reporter,
            client,
            metrics,
            leader,
            notifier,
            kueue: config.kueue,
            timeout: config.api_timeout,
            clock: config.clock,
            awaiting_delivery: Arc::default(),
        }
    }

    /// How many `notify` outcomes wait for their message's delivery (shared; read by the graceful stop).
    pub fn awaiting_delivery(&self) -> Arc<std::sync::atomic::AtomicUsize> {
        self.awaiting_delivery.clone()
    }

    /// Performs work items until the channel closes, reporting outcomes to `feedback`. Items of one job run
    /// in order, one at a time; different jobs run concurrently (up to [`CONCURRENCY`]), so a burst of
    /// firings (a node failure stalls 40 jobs at once) is not served one API round trip after the other.
    /// Receiver changes are applied on arrival, on every replica.
    pub async fn run(self, mut work: mpsc::Receiver<Work>, feedback: mpsc::Sender<Input>) {
        let this = Arc::new(self);
        let mut queues = JobQueues::default();
        let mut running: JoinSet<trainwarden_core::JobKey> = JoinSet::new();
        let mut open = true;
        loop {
            while running.len() < CONCURRENCY
                && let Some((job, item, waited)) = queues.next_ready()
            {
                if let Some(kind) = item.kind() {
                    this.metrics.queued(kind, waited.queued);
                }
                this.metrics.slot_wait_seconds.observe(waited.for_slot.as_secs_f64());
                let (this, feedback) = (this.clone(), feedback.clone());
                running.spawn(async move {
                    // Whatever happens inside, the job comes back, so its queue moves on.
                    if let Err(panic) = supervise(this.process(item, &feedback)).await {
                        this.metrics.executor_panics.inc();
                        tracing::error!(%job, panic, "the executor panicked on this job's work; it goes on");
                    }
                    job
                });
            }
            if !open && running.is_empty() {
                break;
            }
            tokio::select! {
                item = work.recv(), if open => match item {
                    Some(item) => match item.job().cloned() {
                        Some(job) => queues.push(job, item),
                        None => this.process(item, &feedback).await,
                    },
                    None => open = false,
                },
                Some(done) = running.join_next(), if !running.is_empty() => {
                    // A join error here can only be a cancellation (panics are caught inside the task).
                    let Ok(job) = done else { continue };
                    queues.finished(job);
                }
            }
        }
    }

    async fn process(&self, item: Work, feedback: &mpsc::Sender<Input>) {
        match item {
            Work::RecordEvent(a) => {
                if self.leader.is_leader() {
                    self.record_event(&a).await;
                }
            }
            Work::Notify(event, progress) => {
                if let (true, Some(notifier)) = (self.leader.is_leader(), &self.notifier)
                    && let Err(e) = notifier.observe(&event, progress)
                {
                    self.metrics.dropped(DroppedWork::NotifierRefused);
                    warn!(error = %e, "notification not queued");
                }
            }
            Work::Receivers(change) => self.reconfigure(change),
            Work::SaveHistory(save) => {
                let stored = self.leader.is_leader() && self.save_history(&save).await;
                let (job, content, at) = (save.job, save.content, save.at);
                let _ = feedback.send(Input::HistorySaved { job, content, at, stored }).await;
            }
            Work::SaveVerdict(save) => {
                if self.leader.is_leader() {
                    self.save_verdict(&save).await;
                }
            }
            Work::Checkpoint(work) => {
                if self.leader.is_leader() {
                    self.checkpoint_work(&work).await;
                }
            }
            Work::FlushHistory(saves, done) => {
                for save in &saves {
                    if self.leader.is_leader() {
                        self.save_history(save).await;
                    }
                }
                let _ = done.send(());
            }
            Work::Act(act) => {
                // A notify with delivery on reports when its message ends, from a task of its own.
                if self.await_delivery(&act.intent, feedback) {
                    return;
                }
                let intent = &act.intent;
                let mut after = Vec::new();
                let outcome = match supervise(self.act(&act, feedback, &mut after)).await {
                    Ok(outcome) => outcome,
                    Err(panic) => self.panicked(intent, panic).await,
                };
                self.metrics.action(
                    ActionLabel::Executed(outcome.action),
                    ModeLabel(Some(intent.mode)),
                    outcome.result,
                );
                // Also when not the leader: the brain counts every intent until its outcome (see
                // `Brain::in_flight`).
                let _ = feedback.send(Input::Outcome(Box::new(outcome))).await;
                // What the guard learnt of the cluster, after the outcome (which settles the intent, so the
                // brain does not count it again when it forgets the policy's owed actions).
                for input in after {
                    let _ = feedback.send(input).await;
                }
            }
        }
    }

    /// Applies a policy's receiver change to the notifier (which starts or stops channel tasks).
    fn reconfigure(&self, change: ReceiverChange) {
        let Some(notifier) = &self.notifier else { return };
        match change {
            ReceiverChange::Configure { policy, receivers } => {
                notifier.configure_receivers(&policy, &receivers);
            }
            ReceiverChange::Remove(policy) => notifier.remove(&policy),
        }
    }

    /// An action panicked: counted, recorded as an Event on the job, and reported as failed (so the brain
    /// tries it again after a backoff, like any failure).
    async fn panicked(&self, intent: &ActionIntent, panic: String) -> Outcome {
        self.metrics.executor_panics.inc();
        tracing::error!(job = %intent.job, rule = %intent.rule, panic, "an action panicked");
        let api = trainjob_api(self.client.clone(), Some(&intent.job.namespace));
        if self.leader.is_leader()
            && let Ok(job) = self.call(ApiOperation::GetTrainjob, || api.get(&intent.job.name)).await
        {
            self.publish(&object_reference(&job), &Notice::action_panicked(intent, &panic)).await;
        }
        Outcome::of(intent, ActionResult::Failed, format!("the executor panicked: {panic}"))
    }

    /// Performs or reports one intent. A stopping action is first checked against the cluster as it is now
    /// (see `guard`): inputs for the brain that must precede the outcome go to `feedback`, those that must
    /// follow it to `after`.
    pub async fn act(&self, act: &Act, feedback: &mpsc::Sender<Input>, after: &mut Vec<Input>) -> Outcome {
        let intent = &act.intent;
        let mut outcome = Outcome::of(intent, ActionResult::NotLeader, String::new());
        // Not `is_leader`: a stopping leader starts no new action; the intent stays owed to the next one.
        if !self.leader.may_act() {
            return outcome;
        }
        let judged = act.judged.as_ref();
        let ended = match self.perform(intent, judged, &mut outcome.action, feedback, after).await {
            Ok(ended) => ended,
            Err(e) if e.lost_leadership() => Ended::new(ActionResult::NotLeader, e.to_string()),
            Err(e) => Ended::new(ActionResult::Failed, e.to_string()),
        };
        if let Some(notifier) = &self.notifier
            && let Some(state) = notified_state(intent, outcome.action, &ended)
        {
            notifier.performed(intent, state);
        }
        outcome.result = ended.result;
        outcome.message = ended.message;
        outcome.policy_generation = ended.policy_generation;
        outcome.wait_until = ended.wait_until;
        match outcome.result {
            ActionResult::NotLeader => {
                info!(job = %intent.job, rule = %intent.rule, action = outcome.action.as_str(), "leadership lost before the action's next write; owed to the next leader");
            }
            ActionResult::Failed | ActionResult::Refused => {
                warn!(job = %intent.job, rule = %intent.rule, action = outcome.action.as_str(), result = outcome.result.as_str(), message = %outcome.message, "action not performed");
            }
            _ => {
                info!(job = %intent.job, rule = %intent.rule, action = outcome.action.as_str(), mode = intent.mode.as_str(), result = outcome.result.as_str(), "action");
            }
        }
        outcome
    }

    /// Performs (or in Audit mode reports) one intent on the TrainJob as it is now. `action` becomes
    /// [`ExecutedAction::Deactivate`] when a suspension goes through Kueue.
    async fn perform(
        &self,
        intent: &ActionIntent,
        judged: Option<&crate::messages::Judged>,
        action: &mut ExecutedAction,
        feedback: &mpsc::Sender<Input>,
        after: &mut Vec<Input>,
    ) -> Result<Ended, ActionError> {
        let api = trainjob_api(self.client.clone(), Some(&intent.job.namespace));
        let name = intent.job.name.as_str();
        let job = match self.call(ApiOperation::GetTrainjob, || api.get(name)).await {
            Ok(job) => job,
            Err(e) if e.is_not_found() => return Err(ActionError::JobGone),
            Err(e) => return Err(ActionError::call("reading the TrainJob", e)),
        };
        let target = Target {
            api: &api,
            job: &job,
            reference: object_reference(&job),
            by: format!("{} {} (rule {})", intent.policy.kind, intent.policy, intent.rule),
            summary: &intent.reason.summary,
        };
        if let ActionSpec::Notify(n) = &intent.action {
            return Ok(self.notify_action(&target, n).await);
        }
        if intent.mode == Mode::Audit {
            // Audit writes nothing to the TrainJob, so it keeps no record either: its Events are
            // at-least-once (a new leader may report an intent again).
            return Ok(match &intent.action {
                ActionSpec::Event(e) => self.event_action_unrecorded(&target, e).await,
                other => self.audit(&target, other).await,
            });
        }
        let performed = performed_intents(&job).contains(&intent.id)
            || job.annotations().get(LAST_ACTION_ANNOTATION).and_then(|v| last_action_id(v)).as_deref()
                == Some(&intent.id);
        if performed {
            return Ok(Ended::new(ActionResult::AlreadyDone, "this intent was already performed"));
        }
        // Checked after the record: an intent performed before (by a leader lost before its outcome) is
        // done, whatever happened to its policy since; so is a scale this intent began (suspended and
        // resized, its leader lost before resuming): finishing it resumes the job.
        let finishing_scale = job.annotations().get(crate::SCALE_PENDING_ANNOTATION) == Some(&intent.id);
        if guard::guarded(intent)
            && !finishing_scale
            && let guard::Checked::Stop(ended) =
                self.check_view(intent, judged, &job, feedback, after).await?
        {
            return Ok(ended);
        }
        // A checkpoint first: asked for (or joined), waited for, settled; then the TrainJob is read again,
        // since the settling wrote to it and every apply re-states what trainwarden owns.
        let checkpoint_timeout = intent.action.checkpoint_timeout();
        let mut note = None;
        let reread;
        let (job, target) = match checkpoint_timeout {
            Some(timeout) => {
                *action = ExecutedAction::from(intent.action.kind());
                let now = self.now(intent);
                let (request, outcome) = match self.ask_checkpoint(&target, intent, timeout, now).await? {
                    actions::checkpoint::Asked::Waiting(id, until) => return Ok(Ended::waiting(id, until)),
                    actions::checkpoint::Asked::Settled(request, outcome) => (request, outcome),
                };
                if let ActionSpec::Checkpoint(_) = &intent.action {
                    return Ok(checkpoint_ended(&request, &outcome));
                }
                note = Some(suspend_note(&request, &outcome));
                reread = match self.call(ApiOperation::GetTrainjob, || api.get(name)).await {
                    Ok(job) => job,
                    Err(e) if e.is_not_found() => return Err(ActionError::JobGone),
                    Err(e) => return Err(ActionError::Reread(e)),
                };
                let target = Target { job: &reread, reference: object_reference(&reread), ..target };
                (&reread, target)
            }
            None => (&job, target),
        };
        let record = Record { last_action: last_action(intent), intents: intents_with(job, &intent.id) };
        match &intent.action {
            ActionSpec::Event(e) => self.event_action(&target, e, &record).await,
            ActionSpec::Suspend(s) => {
                let mut s = s.clone();
                if let Some(note) = note {
                    s.message = Some(match s.message.take() {
                        Some(m) => format!("{m} ({note})"),
                        None => note,
                    });
                }
                self.suspend(&target, &s, &intent.id, &record, action).await
            }
            ActionSpec::Checkpoint(_) => unreachable!("settled above"),
            ActionSpec::Annotate(a) => self.annotate(&target, a, &record).await,
            ActionSpec::Scale(s) => self.scale(&target, s.num_nodes, &intent.id, &record).await,
            ActionSpec::Notify(_) => unreachable!("handled above"),
        }
    }

    /// Audit mode: an Event says what would have been done; nothing is written to the TrainJob.
    async fn audit(&self, target: &Target<'_>, action: &ActionSpec) -> Ended {
        let (notice, what) = Notice::audit(&target.by, action, target.summary);
        self.publish(&target.reference, &notice).await;
        Ended::new(ActionResult::Reported, format!("Audit mode: would {what}"))
    }
}

/// How a `checkpoint` intent ends once its request is settled: done (acknowledged, with the step and the
/// time it took), refused (timed out: not tried again, a notification says so) or abandoned (the job
/// stopped running meanwhile).
fn checkpoint_ended(
    request: &trainwarden_core::CheckpointRequest,
    outcome: &trainwarden_core::RequestOutcome,
) -> Ended {
    use trainwarden_core::RequestOutcome;
    match outcome {
        RequestOutcome::Acknowledged { step, at } => Ended::new(
            ActionResult::Done,
            format!(
                "saved a checkpoint at step {step} ({} after request {})",
                trainwarden_core::fmt_span(actions::checkpoint::ack_seconds(request, *at)),
                request.id
            ),
        ),
        RequestOutcome::TimedOut { .. } => Ended::new(
            ActionResult::Refused,
            format!(
                "checkpoint request {} was not acknowledged within {}",
                request.id,
                trainwarden_core::fmt_span(request.timeout_seconds as f64)
            ),
        ),
        RequestOutcome::Withdrawn { why, .. } => {
            Ended::new(ActionResult::Abandoned, format!("checkpoint request {} withdrawn: {why}", request.id))
        }
    }
}

/// What a suspension after `checkpointFirst` says about the checkpoint.
fn suspend_note(
    request: &trainwarden_core::CheckpointRequest,
    outcome: &trainwarden_core::RequestOutcome,
) -> String {
    use trainwarden_core::RequestOutcome;
    match outcome {
        RequestOutcome::Acknowledged { step, at } => format!(
            "after its checkpoint at step {step}, acknowledged {} after request {}",
            trainwarden_core::fmt_span(actions::checkpoint::ack_seconds(request, *at)),
            request.id
        ),
        RequestOutcome::TimedOut { .. } => format!(
            "WITHOUT a new checkpoint: request {} was not acknowledged within {}; it resumes from its last checkpoint",
            request.id,
            trainwarden_core::fmt_span(request.timeout_seconds as f64)
        ),
        RequestOutcome::Withdrawn { why, .. } => {
            format!("checkpoint request {} withdrawn before an answer: {why}", request.id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_in_supervised_work_comes_back_as_its_message_and_work_goes_on() {
        let caught = supervise(async { panic!("broken action on ml/ft") }).await;
        assert_eq!(caught.err().as_deref(), Some("broken action on ml/ft"));
        let formatted = supervise(async {
            let n = 3;
            panic!("attempt {n}")
        })
        .await;
        assert_eq!(formatted.err().as_deref(), Some("attempt 3"));
        assert_eq!(supervise(async { 7 }).await, Ok(7), "the next job's work runs as usual");
    }

    fn suspend_intent(mode: Mode) -> ActionIntent {
        ActionIntent {
            id: "i-1".into(),
            at: "2026-11-27T23:11:26Z".parse().unwrap(),
            job: trainwarden_core::JobKey::new("fraud", "ft"),
            policy: trainwarden_core::PolicyRef {
                kind: trainwarden_core::PolicyKind::Namespaced,
                namespace: Some("fraud".into()),
                name: "weekend-safe".into(),
                generation: 1,
            },
            rule: "loss-plateau".into(),
            action: ActionSpec::Suspend(Default::default()),
            mode,
            reason: Default::default(),
            savings: None,
            snoozed_until: None,
        }
    }

    /// What a message says of a suspension, from the executor's result: past tense once done, with the
    /// command that resumes this very job (its Kueue Workload when it went through Kueue).
    #[test]
    fn messages_learn_what_the_executor_did() {
        let intent = suspend_intent(Mode::Enforce);
        let done = Ended::new(ActionResult::Done, "spec.suspend set to true");
        let Some(ActionState::Done { what, undo }) = notified_state(&intent, ExecutedAction::Suspend, &done)
        else {
            panic!("done")
        };
        assert_eq!(what, "suspended the TrainJob");
        assert_eq!(
            undo.as_deref(),
            Some(
                "To resume it: kubectl -n fraud patch trainjob ft --type=merge -p '{\"spec\":{\"suspend\":false}}'\n\
                 To exempt it from every policy: kubectl -n fraud annotate trainjob ft trainwarden.dev/exempt=true"
            )
        );
        let mut kueue = Ended::new(ActionResult::Done, "managed by Kueue");
        kueue.workload = Some("trainjob-ft-7c1d".into());
        let Some(ActionState::Done { what, undo }) =
            notified_state(&intent, ExecutedAction::Deactivate, &kueue)
        else {
            panic!("done")
        };
        assert_eq!(what, "suspended the TrainJob (deactivated its Kueue Workload trainjob-ft-7c1d)");
        assert!(
            undo.unwrap().starts_with(
                "To resume it, reactivate its Kueue Workload: kubectl -n fraud patch workload trainjob-ft-7c1d --type=merge -p '{\"spec\":{\"active\":true}}'\n"
            )
        );
        let failed = Ended::new(ActionResult::Failed, "the API server timed out");
        assert_eq!(
            notified_state(&intent, ExecutedAction::Suspend, &failed),
            Some(ActionState::NotDone(
                "could not suspend the TrainJob (the API server timed out); it is tried again while the rule fires"
                    .into()
            ))
        );
        let not_leader = Ended::new(ActionResult::NotLeader, "");
        assert_eq!(notified_state(&intent, ExecutedAction::Suspend, &not_leader), None);
        assert_eq!(notified_state(&suspend_intent(Mode::Audit), ExecutedAction::Suspend, &done), None);
    }
}
