//! The actions of a rule (`spec.rules[].actions`): what a firing asks the executor to do, one key each.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::*;

/// One action. Exactly one key is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ActionSpec {
    /// Suspend the TrainJob (`spec.suspend: true`). Pods get SIGTERM, which makes RHOAI's just-in-time
    /// checkpointing save a checkpoint; a later resume continues from it. For Kueue-managed jobs the executor
    /// deactivates the Kueue Workload instead of fighting Kueue over `spec.suspend`.
    Suspend(SuspendAction),
    /// Send a notification to a receiver configured in the controller (Slack, email or webhook).
    Notify(NotifyAction),
    /// Set an annotation on the TrainJob.
    Annotate(AnnotateAction),
    /// Emit a Kubernetes Event on the TrainJob.
    Event(EventAction),
    /// Change the number of training nodes (suspend, patch `spec.trainer.numNodes`, resume) where the
    /// TrainJob API allows it (RHOAI 3.4; upstream Trainer makes `spec.trainer` immutable).
    Scale(ScaleAction),
    /// Ask the running job to save a checkpoint and keep training: a request annotation on its pods, read
    /// through a downward-API volume; the job answers with the `checkpoint_step` and
    /// `checkpoint_request_id` metrics of its progress report (sdk/python/PROTOCOL.md). The outcome
    /// (acknowledged at a step, or timed out) is recorded, with an Event and a notification.
    Checkpoint(CheckpointAction),
}

/// What kind of action an [`ActionSpec`] is, without its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// [`ActionSpec::Suspend`].
    Suspend,
    /// [`ActionSpec::Notify`].
    Notify,
    /// [`ActionSpec::Annotate`].
    Annotate,
    /// [`ActionSpec::Event`].
    Event,
    /// [`ActionSpec::Scale`].
    Scale,
    /// [`ActionSpec::Checkpoint`].
    Checkpoint,
}

impl ActionKind {
    /// The kind's name in policies, reports and metrics (`suspend`, `notify`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            ActionKind::Suspend => "suspend",
            ActionKind::Notify => "notify",
            ActionKind::Annotate => "annotate",
            ActionKind::Event => "event",
            ActionKind::Scale => "scale",
            ActionKind::Checkpoint => "checkpoint",
        }
    }
}

impl std::fmt::Display for ActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ActionSpec {
    /// The action's kind.
    pub fn kind(&self) -> ActionKind {
        match self {
            ActionSpec::Suspend(_) => ActionKind::Suspend,
            ActionSpec::Notify(_) => ActionKind::Notify,
            ActionSpec::Annotate(_) => ActionKind::Annotate,
            ActionSpec::Event(_) => ActionKind::Event,
            ActionSpec::Scale(_) => ActionKind::Scale,
            ActionSpec::Checkpoint(_) => ActionKind::Checkpoint,
        }
    }

    /// A suspend's or scale's `grace`, parsed (`None`: none, or one `validate` refuses).
    pub fn grace(&self) -> Option<PolicyDuration> {
        let text = match self {
            ActionSpec::Suspend(s) => s.grace.as_ref(),
            ActionSpec::Scale(s) => s.grace.as_ref(),
            _ => None,
        }?;
        text.parse().ok().filter(|d| !d.is_zero())
    }

    /// Whether the action changes the TrainJob or its pods (Audit mode never performs these).
    pub fn mutates_job(&self) -> bool {
        matches!(
            self,
            ActionSpec::Suspend(_)
                | ActionSpec::Annotate(_)
                | ActionSpec::Scale(_)
                | ActionSpec::Checkpoint(_)
        )
    }

    /// How long a checkpoint this action requests may take before it counts as timed out: a `checkpoint`'s
    /// `timeout`, a `suspend`'s `checkpointFirst.timeout` (default [`DEFAULT_CHECKPOINT_TIMEOUT`]); `None`
    /// for an action that requests none (or a timeout `validate` refuses).
    pub fn checkpoint_timeout(&self) -> Option<PolicyDuration> {
        let text = match self {
            ActionSpec::Checkpoint(c) => c.timeout.as_ref(),
            ActionSpec::Suspend(SuspendAction { checkpoint_first: Some(c), .. }) => c.timeout.as_ref(),
            _ => return None,
        };
        match text {
            None => Some(DEFAULT_CHECKPOINT_TIMEOUT),
            Some(t) => t.parse().ok().filter(|d: &PolicyDuration| !d.is_zero()),
        }
    }
}

/// Parameters of the suspend action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuspendAction {
    /// Extra text for the Event and annotation that record the suspension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
    /// Warn first: the rule's other actions (its notify) go out at once and say when this will happen and
    /// how to snooze the job; it happens when this much time has passed, if the rule still fires and the job
    /// was not snoozed meanwhile (a rule that recovers cancels it). At most 7d.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace: Option<DurationText>,
    /// Ask the job for a checkpoint first (as the `checkpoint` action does) and suspend once it is
    /// acknowledged, or when `timeout` passes without one (the Event and the notification say so). For
    /// jobs whose checkpoint takes longer than their `terminationGracePeriodSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_first: Option<CheckpointFirst>,
}

/// How long an unanswered checkpoint request is waited for, unless the action says: 10 minutes.
pub const DEFAULT_CHECKPOINT_TIMEOUT: PolicyDuration = PolicyDuration::from_secs(600);

/// The longest `timeout` a checkpoint request may have: 24 hours.
pub const MAX_CHECKPOINT_TIMEOUT: PolicyDuration = PolicyDuration::from_secs(24 * 3600);

/// `suspend.checkpointFirst`: the checkpoint requested before the suspension.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointFirst {
    /// How long to wait for the job's acknowledgement before suspending anyway. Default 10m, at most 24h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationText>,
}

/// Parameters of the checkpoint action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointAction {
    /// How long to wait for the job's acknowledgement before the request counts as timed out (an Event and
    /// a notification say so). Default 10m, at most 24h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationText>,
}

/// Parameters of the notify action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotifyAction {
    /// Receiver name: one of the policy's spec.receivers (for example `team` or `oncall`).
    #[schemars(length(min = 1, max = 253))]
    pub to: String,
    /// Extra text added to the generated message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub message: Option<String>,
}

/// Parameters of the annotate action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnnotateAction {
    /// Annotation key, for example trainwarden.dev/plateau-verdict (not one the controller keeps itself,
    /// such as trainwarden.dev/verdict or trainwarden.dev/last-action).
    #[schemars(length(min = 1, max = 317))]
    pub key: String,
    /// Annotation value. Defaults to the rule's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Parameters of the event action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventAction {
    /// Event type. Default Warning.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<EventType>,
    /// Event reason (CamelCase). Defaults to ProgressRuleFiring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = REASON_PATTERN))]
    pub reason: Option<String>,
}

/// Kubernetes Event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum EventType {
    /// Routine: nothing needs attention.
    Normal,
    /// Something may need attention.
    Warning,
}

/// Parameters of the scale action.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleAction {
    /// The new `spec.trainer.numNodes`.
    #[schemars(range(min = 1, max = 10000))]
    pub num_nodes: i32,
    /// Warn first: the rule's other actions (its notify) go out at once and say when this will happen and
    /// how to snooze the job; it happens when this much time has passed, if the rule still fires and the job
    /// was not snoozed meanwhile (a rule that recovers cancels it). At most 7d.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace: Option<DurationText>,
}
