//! Notices: an Event's reason and note, for what the evaluator found ([`Notice::of`]) and for what the
//! controller itself says about a job or an action.

use super::Reason;
use super::words;
use crate::evaluate::{ActionIntent, Event, SnoozeChange, TransitionKind};
use crate::policy::{NotifyAction, PolicyRef};
use crate::time::fmt_num;

/// What trainwarden tells people about a TrainJob: a Kubernetes Event's reason (which also says its type and
/// action) and its note.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// Why.
    pub reason: Reason,
    /// The Event's note: the policy, the rule, its state and mode, why, and the numbers behind it.
    pub note: String,
}

impl Notice {
    fn new(reason: Reason, note: String) -> Notice {
        Notice { reason, note }
    }

    /// The notice of an evaluator event, or `None` for those people are not told about on the job (a rule
    /// that turns pending or clears, an action a cooldown suppresses, an intent: the executor's Events say
    /// what was done). `snoozable(policy)`: the policy allows a snooze, so a deferred action's notice offers
    /// the command.
    pub fn of(event: &Event, snoozable: impl Fn(&PolicyRef) -> bool) -> Option<Notice> {
        Some(match event {
            Event::Transition { policy, rule, kind, reason, mode, .. } => {
                let name = match kind {
                    TransitionKind::Firing => Reason::RuleFiring,
                    TransitionKind::Resolved => Reason::RuleResolved,
                    TransitionKind::Pending | TransitionKind::Cleared => return None,
                };
                let values = reason
                    .values
                    .iter()
                    .map(|(k, v)| format!("{k}={}", fmt_num(*v)))
                    .collect::<Vec<_>>()
                    .join(", ");
                let values = if values.is_empty() { String::new() } else { format!(" [{values}]") };
                // A resolution says why first: the condition, the window, the job, the policy.
                let why = match reason.resolution {
                    Some(r) => format!("{} (it fired: {})", r.text(), reason.summary),
                    None => reason.summary.clone(),
                };
                Notice::new(
                    name,
                    format!(
                        "{} {policy} rule {rule} {} [{}]: {why}{values}",
                        policy.kind,
                        kind.as_str(),
                        mode.as_str()
                    ),
                )
            }
            Event::RuleError { policy, rule, message, .. } => {
                Notice::new(Reason::RuleError, format!("{} {policy} rule {rule}: {message}", policy.kind))
            }
            Event::Held { policy, rule, actions, until, mode, exception, .. } => Notice::new(
                Reason::ActionsHeld,
                format!(
                    "{} {policy} rule {rule} firing [{}]: {}",
                    policy.kind,
                    mode.as_str(),
                    words::held(actions, *until, exception.as_ref())
                ),
            ),
            Event::ExceptionEnded { policy, rule, exception, why, released, .. } => Notice::new(
                Reason::ExceptionEnded,
                format!(
                    "{} {policy} rule {rule}: {}",
                    policy.kind,
                    words::exception_ended(exception, *why, *released)
                ),
            ),
            Event::Limited { policy, rule, actions, limit, retry, mode, .. } => Notice::new(
                Reason::ActionsLimited,
                format!(
                    "{} {policy} rule {rule} firing [{}]: {}",
                    policy.kind,
                    mode.as_str(),
                    words::limited(actions, limit, *retry)
                ),
            ),
            Event::Deferred { job, policy, rule, action, until, mode, .. } => {
                let command = if snoozable(policy) {
                    format!(
                        "; to keep the job running for now: kubectl trainwarden snooze {} -n {} 4h",
                        job.name, job.namespace
                    )
                } else {
                    "; this policy allows no snooze".to_string()
                };
                Notice::new(
                    Reason::ActionDeferred,
                    format!(
                        "{} {policy} rule {rule} firing [{}]: {}{command}",
                        policy.kind,
                        mode.as_str(),
                        words::deferred(*action, *until)
                    ),
                )
            }
            Event::Snooze { change, .. } => {
                let reason = match change {
                    SnoozeChange::Started(_) => Reason::Snoozed,
                    SnoozeChange::Ended { .. } => Reason::SnoozeEnded,
                    SnoozeChange::PolicyCapped { .. } => Reason::SnoozeCapped,
                    SnoozeChange::Invalid { .. } => Reason::InvalidSnooze,
                };
                Notice::new(reason, words::snooze(change, &jiff::tz::TimeZone::UTC))
            }
            Event::Intent(_) | Event::Suppressed { .. } => return None,
        })
    }

    /// The job is exempt (annotated `annotation=true`): no policy applies.
    pub fn exempt(annotation: &str) -> Notice {
        Notice::new(
            Reason::Exempt,
            format!("annotated {annotation}=true: no progress policy applies to this TrainJob"),
        )
    }

    /// The job's progress was read without these fields (`; `-joined), which its format does not define.
    pub fn unknown_progress_fields(fields: &str) -> Notice {
        Notice::new(
            Reason::UnknownProgressFields,
            format!("progress read without the fields its format does not define: {fields}"),
        )
    }

    /// An intent's `notify` names a receiver its policy does not declare: the notice, and the message its
    /// refused outcome carries.
    pub fn notification_not_configured(intent: &ActionIntent, notify: &NotifyAction) -> (Notice, String) {
        // Nothing would be sent: say so where people look instead of "queued".
        let message = format!(
            "notify {:?} sends nothing: the policy declares no such receiver (add spec.receivers)",
            notify.to
        );
        let note = format!("{} {} rule {}: {message}", intent.policy.kind, intent.policy, intent.rule);
        (Notice::new(Reason::NotificationNotConfigured, note), message)
    }

    /// Notifications are off: `by` (`<kind> <policy> (rule <rule>)`) would have notified `to`.
    pub fn notification_recorded(by: &str, to: &str, summary: &str) -> Notice {
        Notice::new(Reason::NotificationRecorded, format!("{by} would notify {to:?}: {summary}"))
    }

    /// The TrainJob was suspended by `by`, with the policy's own `message` when it has one.
    pub fn suspended(by: &str, summary: &str, message: Option<&str>) -> Notice {
        let note = match message {
            Some(m) => format!("{by}: {summary}. {m}"),
            None => format!("{by}: {summary}"),
        };
        Notice::new(Reason::Suspended, note)
    }

    /// A Kueue-managed TrainJob's suspension: its Workload was deactivated (`how`: what the executor found).
    pub fn workload_deactivated(suspended: &Notice, how: &str) -> Notice {
        Notice::new(Reason::WorkloadDeactivated, format!("{} ({how})", suspended.note))
    }

    /// The annotation `key` was set by `by`.
    pub fn annotated(by: &str, key: &str, summary: &str) -> Notice {
        Notice::new(Reason::Annotated, format!("{by} set {key}: {summary}"))
    }

    /// The TrainJob was resized: `what` says how (`numNodes 2 → 4`).
    pub fn scaled(by: &str, what: &str, summary: &str) -> Notice {
        Notice::new(Reason::Scaled, format!("{by}: {what}: {summary}"))
    }

    /// The TrainJob cannot be resized, and why.
    pub fn scale_refused(by: &str, why: &str) -> Notice {
        Notice::new(Reason::ScaleRefused, format!("{by}: {why}"))
    }

    /// The TrainJob was resized but not resumed, and why.
    pub fn scale_resume_failed(by: &str, error: &str) -> Notice {
        Notice::new(Reason::ScaleResumeFailed, format!("{by}: {error}"))
    }

    /// A checkpoint was requested of the running job: `what` names the request (id, timeout) and what waits.
    pub fn checkpoint_requested(by: &str, what: &str, summary: &str) -> Notice {
        Notice::new(Reason::CheckpointRequested, format!("{by}: {what}: {summary}"))
    }

    /// The job acknowledged checkpoint request `id`: saved at `step`, `after` seconds after the request.
    pub fn checkpoint_saved(by: &str, id: u64, step: u64, after: f64) -> Notice {
        Notice::new(
            Reason::CheckpointSaved,
            format!(
                "{by}: checkpoint request {id} acknowledged: saved at step {step}, {} after the request",
                crate::units::span::fmt_span(after)
            ),
        )
    }

    /// Checkpoint request `id` was not acknowledged within `timeout` seconds; `hint` says why it may not
    /// have reached the job or come back.
    pub fn checkpoint_timed_out(by: &str, id: u64, timeout: f64, hint: &str) -> Notice {
        Notice::new(
            Reason::CheckpointTimedOut,
            format!(
                "{by}: checkpoint request {id} not acknowledged within {}{hint}",
                crate::units::span::fmt_span(timeout)
            ),
        )
    }

    /// Audit mode: what `action` would have done. The second value is the phrase (`suspend the TrainJob`),
    /// for the outcome's message.
    pub fn audit(by: &str, action: &crate::policy::ActionSpec, summary: &str) -> (Notice, String) {
        use crate::policy::ActionSpec;
        let (reason, what) = match action {
            ActionSpec::Suspend(_) => (Reason::WouldSuspend, "suspend the TrainJob".to_string()),
            ActionSpec::Annotate(a) => (Reason::WouldAnnotate, format!("set annotation {}", a.key)),
            ActionSpec::Scale(s) => (
                Reason::WouldScale,
                format!(
                    "scale to {}",
                    crate::time::plural(u64::try_from(s.num_nodes).unwrap_or(0), "node", "nodes")
                ),
            ),
            ActionSpec::Checkpoint(_) => {
                (Reason::WouldAct, "request a checkpoint of the running job".to_string())
            }
            _ => (Reason::WouldAct, action.kind().to_string()),
        };
        (Notice::new(reason, format!("[Audit] {by} would {what}: {summary}")), what)
    }

    /// An action panicked (it is tried again).
    pub fn action_panicked(intent: &ActionIntent, panic: &str) -> Notice {
        Notice::new(
            Reason::ActionPanicked,
            format!(
                "trainwarden failed on action {} of rule {} (it will try again): {panic}",
                intent.action.kind(),
                intent.rule
            ),
        )
    }

    /// A stopping action was not performed because what its rule was judged under no longer stood at the
    /// moment of the write: `not suspended: policy nan-and-stall was deleted`.
    pub fn action_abandoned(intent: &ActionIntent, why: &str) -> Notice {
        let not = match intent.action.kind() {
            crate::policy::ActionKind::Suspend => "not suspended".to_string(),
            crate::policy::ActionKind::Scale => "not scaled".to_string(),
            other => format!("{other} not performed"),
        };
        Notice::new(Reason::ActionAbandoned, format!("{not}: {why} (rule {})", intent.rule))
    }
}
