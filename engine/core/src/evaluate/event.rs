//! What evaluation reports: rule states and their transitions, the reason a rule fired, and the action
//! intents (with the GPU time they would free) that the executor performs or Audit mode only reports.

use std::collections::BTreeMap;

use crate::input::sample::JobKey;
use crate::judge::detectors::{Finding, FindingKind};
use crate::policy::{ActionKind, ActionSpec, Mode, PolicyRef};
use crate::time::Timestamp;

/// Where a rule is for a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "PascalCase")]
pub enum RuleState {
    /// The condition does not hold (or the rule has not been evaluated yet).
    Inactive,
    /// The condition holds; `for` has not elapsed yet.
    Pending,
    /// The condition has held for `for`: the rule's actions were issued.
    Firing,
}

/// The name a transition is reported under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TransitionKind {
    /// Condition became true, waiting for `for`.
    Pending,
    /// Pending → firing (or inactive → firing when `for` is 0): the actions are issued.
    Firing,
    /// Firing → inactive.
    Resolved,
    /// Pending → inactive before firing.
    Cleared,
}

impl TransitionKind {
    /// The name in lowercase: `pending`, `firing`, `resolved` or `cleared`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionKind::Pending => "pending",
            TransitionKind::Firing => "firing",
            TransitionKind::Resolved => "resolved",
            TransitionKind::Cleared => "cleared",
        }
    }
}

/// Why a rule fired: one sentence and the values behind it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Reason {
    /// One sentence per finding, `; `-joined; for a script rule without findings, "`<when>` is true".
    pub summary: String,
    /// The numbers behind the summary, by name (for example a plateau's `delta`).
    pub values: BTreeMap<String, f64>,
    /// What kind of finding it was (a stall wins); not serialized.
    #[serde(skip)]
    pub kind: Option<FindingKind>,
    /// On a resolved (or cleared) transition: why the rule stopped firing. `None` on other transitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
}

/// Why a firing rule resolved (or a pending one cleared).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Resolution {
    /// The rule's condition no longer holds.
    ConditionCleared,
    /// The policy's active window closed (outside it the policy is inactive).
    WindowClosed,
    /// The job is not running any more: it completed or failed.
    JobFinished,
    /// The job was resumed (a pending rule starts afresh).
    JobResumed,
    /// The TrainJob was deleted.
    JobDeleted,
    /// The policy no longer selects the job (its labels or namespace changed).
    NoLongerSelected,
    /// The rule was changed or removed by a new version of the policy.
    RuleChanged,
    /// The policy was deleted.
    PolicyRemoved,
}

impl Resolution {
    /// Why, as a clause for people: `the condition no longer holds`.
    pub fn text(self) -> &'static str {
        match self {
            Resolution::ConditionCleared => "the condition no longer holds",
            Resolution::WindowClosed => "the policy's active window closed",
            Resolution::JobFinished => "the job is no longer running (it completed or failed)",
            Resolution::JobResumed => "the job was resumed",
            Resolution::JobDeleted => "the TrainJob was deleted",
            Resolution::NoLongerSelected => "the policy no longer selects the job",
            Resolution::RuleChanged => "the rule was changed or removed",
            Resolution::PolicyRemoved => "the policy was removed",
        }
    }
}

impl Reason {
    pub(super) fn from_findings(findings: Vec<Finding>, when: Option<&str>) -> Reason {
        let mut reason = Reason::default();
        let mut parts = Vec::new();
        for f in findings {
            parts.push(f.summary);
            if f.kind == FindingKind::Stall || reason.kind.is_none() {
                reason.kind = Some(f.kind);
            }
            reason.values.extend(f.values);
        }
        if parts.is_empty()
            && let Some(w) = when
        {
            let w = w.split_whitespace().collect::<Vec<_>>().join(" ");
            parts.push(format!(
                "`{}` is true",
                if w.chars().count() > 120 {
                    format!("{}…", w.chars().take(120).collect::<String>())
                } else {
                    w
                }
            ));
        }
        reason.summary = parts.join("; ");
        reason
    }
}

/// Where a saving is counted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SavingsBasis {
    /// The job's estimated end (its last report's time + ETA).
    EstimatedEnd,
    /// The end of the unattended window a stall happened in, when someone would have noticed.
    WindowEnd,
}

/// GPU time an action frees.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Savings {
    /// Until when the job would otherwise have held its GPUs.
    pub until: Timestamp,
    /// What `until` is.
    pub basis: SavingsBasis,
    /// Accelerators the job holds (its own count or the policy's `assumeGpus`).
    pub gpus: f64,
    /// `gpus` × the hours from the action to `until`.
    pub gpu_hours: f64,
    /// `gpu_hours` × the policy's GPU-hour price, when it sets one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
}

/// What the engine wants done. The executor performs it (Enforce) or reports it (Audit).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionIntent {
    /// Stable within one firing: `policy/rule/job/firing#/action#`, for idempotent execution.
    pub id: String,
    /// When the intent was issued.
    pub at: Timestamp,
    /// The job to act on.
    pub job: JobKey,
    /// The policy the rule belongs to.
    pub policy: PolicyRef,
    /// The rule's name.
    pub rule: String,
    /// The action to perform, with its parameters.
    pub action: ActionSpec,
    /// Enforce: perform it; Audit: only report it.
    pub mode: Mode,
    /// Why the rule fired.
    pub reason: Reason,
    /// GPU time a suspension frees, when it can be estimated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings: Option<Savings>,
    /// On the intents of a firing released when a snooze ended: when that snooze ended (the actions were
    /// held until then, see [`super::SNOOZE_ANNOTATION`]), so messages can say so. `None` otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<Timestamp>,
}

/// Everything evaluation reports.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A rule changed state for a job.
    Transition {
        /// When.
        at: Timestamp,
        /// The job.
        job: JobKey,
        /// The policy the rule belongs to.
        policy: PolicyRef,
        /// The rule's name.
        rule: String,
        /// Which change.
        kind: TransitionKind,
        /// Why the condition held; for resolved and cleared, the last reason it held for.
        reason: Reason,
        /// The rule's mode (its own or its policy's).
        mode: Mode,
    },
    /// An action to perform (Enforce) or report (Audit).
    Intent(ActionIntent),
    /// An action skipped because the same one was issued less than `cooldown` ago.
    Suppressed {
        /// When the action would have been issued.
        at: Timestamp,
        /// The job.
        job: JobKey,
        /// The policy the rule belongs to.
        policy: PolicyRef,
        /// The rule's name.
        rule: String,
        /// The kind of action skipped.
        action: ActionKind,
        /// When the cooldown ends.
        until: Timestamp,
    },
    /// A rule fired while its job is snoozed ([`super::SNOOZE_ANNOTATION`]) or excepted (a
    /// ProgressPolicyException, `exception`): its actions are held, no intent is issued. If the rule still
    /// fires when the snooze or the exception ends, it fires again then and acts.
    Held {
        /// When the rule fired.
        at: Timestamp,
        /// The job.
        job: JobKey,
        /// The policy the rule belongs to.
        policy: PolicyRef,
        /// The rule's name.
        rule: String,
        /// The actions held, in the rule's order.
        actions: Vec<ActionKind>,
        /// When the snooze (or the exception) ends.
        until: Timestamp,
        /// The rule's mode.
        mode: Mode,
        /// The exception that holds the actions (`None`: the owner's snooze).
        exception: Option<crate::policy::exception::ExceptionRef>,
    },
    /// An exception that held a rule's firing no longer does: it expired, was deleted, or no longer
    /// matches the job. If the rule still fires (and no snooze holds the job), it fires again now and acts.
    ExceptionEnded {
        /// When.
        at: Timestamp,
        /// The job.
        job: JobKey,
        /// The policy the rule belongs to.
        policy: PolicyRef,
        /// The rule's name.
        rule: String,
        /// The exception.
        exception: crate::policy::exception::ExceptionRef,
        /// Why it ended.
        why: ExceptionEnd,
        /// Whether the rule fired again now (its actions are issued).
        released: bool,
    },
    /// A rule fired and a blast-radius limit ([`super::Limit`]) holds its actions back: no intent is
    /// issued now. Each evaluation of the job while the rule still fires asks again; when the limit allows,
    /// the held firing's intents are issued then.
    Limited {
        /// When the rule fired (or was asked again after a snooze).
        at: Timestamp,
        /// The job.
        job: JobKey,
        /// The policy the rule belongs to.
        policy: PolicyRef,
        /// The rule's name.
        rule: String,
        /// The actions held, in the rule's order.
        actions: Vec<ActionKind>,
        /// Which limit.
        limit: Limit,
        /// For an hourly limit: when a slot frees.
        retry: Option<Timestamp>,
        /// The rule's mode.
        mode: Mode,
    },
    /// A firing's suspend or scale waits for its `grace`: the firing's other actions went out at once and
    /// say so; it is issued at `until` if the rule still fires and the job is not snoozed then.
    Deferred {
        /// When the rule fired.
        at: Timestamp,
        /// The job.
        job: JobKey,
        /// The policy the rule belongs to.
        policy: PolicyRef,
        /// The rule's name.
        rule: String,
        /// The action deferred.
        action: ActionKind,
        /// When it is due.
        until: Timestamp,
        /// The rule's mode.
        mode: Mode,
    },
    /// A job's snooze started, ended or could not be honoured.
    Snooze {
        /// When the evaluator saw it.
        at: Timestamp,
        /// The job.
        job: JobKey,
        /// What happened.
        change: SnoozeChange,
    },
    /// A rule could not be evaluated (script error); its state is left as it was.
    RuleError {
        /// When the evaluation failed.
        at: Timestamp,
        /// The job.
        job: JobKey,
        /// The policy the rule belongs to.
        policy: PolicyRef,
        /// The rule's name.
        rule: String,
        /// The error, located in the rule's `when`.
        message: String,
    },
}

impl Event {
    /// When it happened.
    pub fn at(&self) -> Timestamp {
        match self {
            Event::Transition { at, .. }
            | Event::Suppressed { at, .. }
            | Event::Held { at, .. }
            | Event::Limited { at, .. }
            | Event::Deferred { at, .. }
            | Event::Snooze { at, .. }
            | Event::ExceptionEnded { at, .. }
            | Event::RuleError { at, .. } => *at,
            Event::Intent(i) => i.at,
        }
    }

    /// The job it is about.
    pub fn job(&self) -> &JobKey {
        match self {
            Event::Transition { job, .. }
            | Event::Suppressed { job, .. }
            | Event::Held { job, .. }
            | Event::Limited { job, .. }
            | Event::Deferred { job, .. }
            | Event::Snooze { job, .. }
            | Event::ExceptionEnded { job, .. }
            | Event::RuleError { job, .. } => job,
            Event::Intent(i) => &i.job,
        }
    }
}

/// Why an exception stopped holding a rule's actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ExceptionEnd {
    /// Its `expires` came.
    Expired,
    /// It was deleted, or can no longer be read (an edit made it invalid: what cannot be read is not
    /// honoured).
    Removed,
    /// It was changed, or the job's labels were, and it no longer applies to this rule of this job.
    NoLongerApplies,
}

impl ExceptionEnd {
    /// Why, as a clause for people.
    pub fn text(self) -> &'static str {
        match self {
            ExceptionEnd::Expired => "it expired",
            ExceptionEnd::Removed => "it was deleted or can no longer be read",
            ExceptionEnd::NoLongerApplies => "it no longer applies to this rule of this job",
        }
    }
}

/// A limit that held a firing back: which, and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limit {
    /// Which limit.
    pub kind: LimitKind,
    /// Its value: firings per hour, or jobs suspended at once.
    pub max: u32,
}

/// The blast-radius limits.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum LimitKind {
    /// The policy's `spec.limits.maxActionsPerHour`.
    PolicyPerHour,
    /// The policy's `spec.limits.maxConcurrentSuspended`.
    PolicyConcurrent,
    /// The engine's (the controller's `--max-actions-per-hour`), over every Enforce policy.
    EnginePerHour,
}

impl Limit {
    pub(super) fn new(kind: LimitKind, max: u32) -> Self {
        Limit { kind, max }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let max = self.max;
        match self.kind {
            LimitKind::PolicyPerHour => write!(f, "limit {max}/h reached (spec.limits.maxActionsPerHour)"),
            LimitKind::PolicyConcurrent => {
                let jobs = if max == 1 { "job" } else { "jobs" };
                write!(f, "limit of {max} suspended {jobs} reached (spec.limits.maxConcurrentSuspended)")
            }
            LimitKind::EnginePerHour => {
                write!(f, "the controller's limit {max}/h reached (--max-actions-per-hour)")
            }
        }
    }
}

/// A job's snooze as the evaluator applies it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snooze {
    /// The annotation's value, as written.
    pub value: String,
    /// The time the annotation asks for.
    pub requested: Timestamp,
    /// When the evaluator first saw this value on this job: the cap runs from here.
    pub since: Timestamp,
    /// When the snooze ends: the earlier of `requested` and `since` + the cap.
    pub until: Timestamp,
}

impl Snooze {
    /// Whether the administrator's cap shortened it.
    pub fn capped(&self) -> bool {
        self.until < self.requested
    }
}

/// Why a snooze ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SnoozeEnd {
    /// Its time came (the annotation's or the cap's).
    Expired,
    /// The annotation was removed (or emptied).
    Removed,
    /// The annotation was replaced by a value that does not snooze (invalid, or in the past).
    Replaced,
}

impl SnoozeEnd {
    /// Why, as a clause for people.
    pub fn text(self) -> &'static str {
        match self {
            SnoozeEnd::Expired => "its time came",
            SnoozeEnd::Removed => "the annotation was removed",
            SnoozeEnd::Replaced => "the annotation was replaced by a value that does not snooze",
        }
    }
}

/// Which of a policy's snooze caps (`spec.snooze`) ended a snooze for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "cap")]
pub enum SnoozeCap {
    /// `maxDuration` ran out.
    MaxDuration,
    /// The job's snoozes are more than `maxPerJob`.
    MaxPerJob {
        /// The limit.
        max: u32,
    },
}

impl SnoozeCap {
    /// Why, as a clause for people.
    pub fn text(self) -> String {
        match self {
            SnoozeCap::MaxDuration => "its spec.snooze.maxDuration ended".to_string(),
            SnoozeCap::MaxPerJob { max } => {
                format!("the job has had its spec.snooze.maxPerJob of {max} snoozes")
            }
        }
    }
}

/// A change of a job's snooze, as [`Event::Snooze`] reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "change")]
pub enum SnoozeChange {
    /// A value seen for the first time snoozes the job (until [`Snooze::until`]).
    Started(Snooze),
    /// The snooze that held the job's actions ended; `released` rules still firing fire again now.
    Ended {
        /// When it was due to end.
        until: Timestamp,
        /// Why it ended now.
        why: SnoozeEnd,
        /// Rules that fired again (their actions are issued now).
        released: usize,
    },
    /// The snooze no longer holds one policy's actions (the job stays snoozed for the others): its
    /// `spec.snooze.maxDuration` is over, or the job had more snoozes than its `maxPerJob`; `released` rules
    /// of it still firing fire again now.
    PolicyCapped {
        /// The policy.
        policy: crate::policy::PolicyRef,
        /// Which of its caps.
        cap: SnoozeCap,
        /// When its cap ended the snooze for it.
        until: Timestamp,
        /// Its rules that fired again.
        released: usize,
    },
    /// The annotation's value cannot be honoured (it is not an RFC 3339 time, or the administrator allows
    /// no snooze); the job is not snoozed. Reported once per value.
    Invalid {
        /// The value, as written (at most 64 characters of it).
        value: String,
        /// What is wrong and what is expected.
        message: String,
    },
}
