//! Alerts: what one rule firing on one job means to a receiver, built from the evaluator's intents.
//!
//! A `notify` [`ActionIntent`] becomes an [`Alert`]; the rule's other intents from the same firing (suspend,
//! annotate, …) add what was done (or, in Audit mode, would be done) and the GPU time at stake, so a message
//! can say what was done ("suspended the TrainJob", once the executor reported it; "suspending the TrainJob"
//! before that), how to undo it, and the GPU time at stake. Pure data, no I/O.

use std::collections::BTreeMap;

use trainwarden_core::JobData;
use trainwarden_core::describe::words;
use trainwarden_core::fmt_local;
use trainwarden_core::{ActionIntent, Resolution, Savings};
use trainwarden_core::{ActionSpec, Mode, PolicyId, PolicyRef};
use trainwarden_core::{Field, FieldValues};
use trainwarden_core::{JobKey, Timestamp};

/// Firing or resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum AlertStatus {
    /// The rule is firing (or, in a reminder, still firing).
    Firing,
    /// The rule stopped firing, or its job was resumed or deleted.
    Resolved,
}

impl AlertStatus {
    /// `firing` or `resolved`, as in templates and the webhook payload.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// The job's progress when the rule fired; the caller knows it (the evaluator's job history), the intent
/// does not.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobProgress {
    /// 0–100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// Seconds the job still needs, as it reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<f64>,
}

impl JobProgress {
    /// The job's latest reported progress (from the evaluator's `job(key)`), if it reported any.
    pub fn of(data: &JobData) -> Option<JobProgress> {
        let last = data.series.last.as_ref()?;
        let p = JobProgress { percent: last.progress_percent, eta_seconds: last.eta_seconds };
        (p.percent.is_some() || p.eta_seconds.is_some()).then_some(p)
    }
}

/// Identity of an alert: one rule on one job under one policy (any generation).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AlertKey {
    /// The policy (kind, namespace, name), whatever its generation.
    pub policy: PolicyId,
    /// The rule's name in the policy.
    pub rule: String,
    /// The TrainJob the rule fires on.
    pub job: JobKey,
}

/// One alert in a notification.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    /// The policy and generation whose rule fired.
    pub policy: PolicyRef,
    /// The rule's name in the policy.
    pub rule: String,
    /// The TrainJob the rule fired on.
    pub job: JobKey,
    /// Firing or resolved.
    pub status: AlertStatus,
    /// The policy's mode when the rule fired (in Audit mode nothing was done).
    pub mode: Mode,
    /// The rule's reason, e.g. `loss has not improved by more than 0.001 for 97 samples`.
    pub summary: String,
    /// The values the rule's condition saw, by name (e.g. `loss`, `best`).
    pub values: BTreeMap<String, f64>,
    /// The rule's other actions of this firing, and what became of them as far as known.
    pub actions: Vec<AlertAction>,
    /// The notify action's `message`.
    pub message: Option<String>,
    /// When the rule started firing.
    pub fired_at: Timestamp,
    /// When it stopped firing; `None` while it fires.
    pub resolved_at: Option<Timestamp>,
    /// Why it stopped firing, when known (the evaluator's resolution).
    pub resolution: Option<Resolution>,
    /// The job's progress and ETA when the rule fired, if it reported any.
    pub progress: Option<JobProgress>,
    /// What the firing's suspension frees (GPU-hours, dollars), when known.
    pub savings: Option<Savings>,
    /// The notify intent's id (stable per firing), for receivers that deduplicate.
    pub intent_id: String,
}

impl Alert {
    /// The alert a `notify` intent raises; `None` for other actions.
    pub fn from_intent(intent: &ActionIntent, progress: Option<JobProgress>) -> Option<(Alert, String)> {
        let ActionSpec::Notify(notify) = &intent.action else { return None };
        let alert = Alert {
            policy: intent.policy.clone(),
            rule: intent.rule.clone(),
            job: intent.job.clone(),
            status: AlertStatus::Firing,
            mode: intent.mode,
            summary: match intent.snoozed_until {
                // The first message after a snooze says why it comes only now.
                Some(until) => format!(
                    "{} (held while the job was snoozed until {until} by annotation {}; the rule still fires)",
                    intent.reason.summary,
                    trainwarden_core::SNOOZE_ANNOTATION
                ),
                None => intent.reason.summary.clone(),
            },
            values: intent.reason.values.clone(),
            actions: Vec::new(),
            message: notify.message.clone(),
            fired_at: intent.at,
            resolved_at: None,
            resolution: None,
            progress,
            savings: intent.savings.clone(),
            intent_id: intent.id.clone(),
        };
        Some((alert, notify.to.clone()))
    }

    /// This alert's identity, which grouping and deduplication key on.
    pub fn key(&self) -> AlertKey {
        AlertKey { policy: PolicyId::from(&self.policy), rule: self.rule.clone(), job: self.job.clone() }
    }

    /// Why the rule fired; once resolved, why it resolved first: `the condition no longer holds (it fired:
    /// loss has not improved …)`.
    pub fn summary_text(&self) -> String {
        match (self.status, self.resolution) {
            (AlertStatus::Resolved, Some(why)) => format!("{} (it fired: {})", why.text(), self.summary),
            _ => self.summary.clone(),
        }
    }

    /// What the firing's other actions did, as far as known: `suspended the TrainJob` (the executor reported
    /// it), `suspending the TrainJob` (issued, no result yet), `did not suspend the TrainJob: …`, or
    /// `would suspend the TrainJob` in Audit mode; `no other action`.
    pub fn actions_text(&self) -> String {
        if self.actions.is_empty() {
            return "no other action".into();
        }
        self.actions.iter().map(|a| a.text(self.mode)).collect::<Vec<_>>().join(", ")
    }

    /// How to undo what the firing did (resume the job, and keep trainwarden from acting on it again), once
    /// the executor reported that it stopped the job; `None` otherwise.
    pub fn undo(&self) -> Option<String> {
        let hints: Vec<&str> = self
            .actions
            .iter()
            .filter_map(|a| match &a.state {
                ActionState::Done { undo: Some(u), .. } => Some(u.as_str()),
                _ => None,
            })
            .collect();
        (!hints.is_empty()).then(|| hints.join("\n"))
    }
}

/// One of a firing's other actions (suspend, annotate, …), as a message shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertAction {
    /// The action's kind, `suspend`.
    pub kind: String,
    /// What it does, `suspend the TrainJob`.
    pub description: String,
    /// The intent's id, which the executor's report names.
    pub intent_id: String,
    /// What became of it, as far as the notifier was told.
    pub state: ActionState,
}

/// What became of an action, as far as known when a message is rendered.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionState {
    /// Issued; no result yet (Audit mode: reported only).
    Issued,
    /// Performed (or found already done), in words: `suspended the TrainJob`; `undo` says how to reverse it.
    Done {
        /// What was done, past tense.
        what: String,
        /// The commands that reverse it, for a person.
        undo: Option<String>,
    },
    /// Not performed, and why (`could not suspend the TrainJob: …; trainwarden will try again`).
    NotDone(String),
}

impl AlertAction {
    /// The action of `intent` (not yet performed).
    pub fn of(intent: &ActionIntent) -> AlertAction {
        AlertAction {
            kind: intent.action.kind().to_string(),
            description: words::action(&intent.action),
            intent_id: intent.id.clone(),
            state: ActionState::Issued,
        }
    }

    /// The action in a sentence, true at the time it is rendered.
    pub fn text(&self, mode: Mode) -> String {
        match (&self.state, mode) {
            (_, Mode::Audit) => format!("would {}", self.description),
            (ActionState::Issued, Mode::Enforce) => words::progressive(&self.description),
            (ActionState::Done { what, .. }, Mode::Enforce) => what.clone(),
            (ActionState::NotDone(why), Mode::Enforce) => why.clone(),
        }
    }
}

impl Alert {
    /// Progress and ETA, actions, GPU time at stake: whichever is known, `; `-joined. Empty once resolved
    /// (the actions are history then).
    pub fn details(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.progress {
            let mut progress = Vec::new();
            if let Some(percent) = p.percent {
                progress.push(format!("progress {}%", fmt_number(percent)));
            }
            if let Some(eta) = p.eta_seconds {
                progress.push(format!("ETA {}", fmt_seconds(eta)));
            }
            if !progress.is_empty() {
                parts.push(progress.join(", "));
            }
        }
        if self.status == AlertStatus::Resolved {
            return parts.join("; ");
        }
        if !self.actions.is_empty() {
            parts.push(self.actions_text());
        }
        if let Some(s) = &self.savings {
            let mut stake = format!("{} GPU-hours", trainwarden_core::fmt_gpu_hours(s.gpu_hours));
            if let Some(d) = s.dollars {
                stake +=
                    &format!(" ({})", trainwarden_core::fmt_money(Some(d), trainwarden_core::Cents::Shown));
            }
            parts.push(format!("{stake} at stake"));
        }
        let mut details = parts.join("; ");
        if let Some(undo) = self.undo() {
            details += "\n";
            details += &undo;
        }
        details
    }
}

/// What to tell a person whose job a firing stopped: the `kubectl` command that resumes it (for a Kueue-managed
/// job, the one that reactivates its Workload `workload`), and the annotation that exempts it from every policy
/// (`trainwarden.dev/exempt`, which the controller honours).
pub fn resume_hint(job: &JobKey, workload: Option<&str>) -> String {
    let ns = &job.namespace;
    let resume = match workload {
        Some(w) => format!(
            "To resume it, reactivate its Kueue Workload: kubectl -n {ns} patch workload {w} --type=merge -p '{{\"spec\":{{\"active\":true}}}}'"
        ),
        None => format!(
            "To resume it: kubectl -n {ns} patch trainjob {} --type=merge -p '{{\"spec\":{{\"suspend\":false}}}}'",
            job.name
        ),
    };
    format!(
        "{resume}\nTo exempt it from every policy: kubectl -n {ns} annotate trainjob {} trainwarden.dev/exempt=true",
        job.name
    )
}

/// A number for people: at most 2 decimals, no trailing zeros.
pub fn fmt_number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.to_string() }
}

/// `1d8h47m42s`, `5m30s`, `2h0m46s`: the core's one duration formatter ([`trainwarden_core::fmt_span`]).
pub fn fmt_seconds(seconds: f64) -> String {
    trainwarden_core::fmt_span(seconds)
}

/// Template values of one alert inside its group.
pub struct AlertFields<'a> {
    /// The group the alert belongs to (receiver, status, the other alerts).
    pub group: &'a GroupFields<'a>,
    /// The alert itself: rule, mode, summary, values, actions, progress, savings.
    pub alert: &'a Alert,
}

/// Template values of a whole group.
pub struct GroupFields<'a> {
    /// The receiver's name in the policy.
    pub receiver: &'a str,
    /// The policy's time zone: instants print in it, with the offset.
    pub time_zone: &'a jiff::tz::TimeZone,
    /// Firing if any alert in the group fires, else resolved.
    pub status: AlertStatus,
    /// The group's alerts, firing ones first.
    pub alerts: &'a [Alert],
}

fn distinct(values: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen.join(", ")
}

impl FieldValues for GroupFields<'_> {
    fn value(&self, field: Field) -> Option<String> {
        let a = self.alerts;
        Some(match field {
            Field::Status => self.status.as_str().into(),
            Field::Receiver => self.receiver.into(),
            Field::Policy => distinct(a.iter().map(|x| x.policy.to_string())),
            Field::Job => distinct(a.iter().map(|x| x.job.to_string())),
            Field::Namespace => distinct(a.iter().map(|x| x.job.namespace.clone())),
            Field::JobName => distinct(a.iter().map(|x| x.job.name.clone())),
            Field::Rules => distinct(a.iter().map(|x| x.rule.clone())),
            Field::Count => a.len().to_string(),
            _ => return None,
        })
    }
}

impl FieldValues for AlertFields<'_> {
    fn value(&self, field: Field) -> Option<String> {
        let a = self.alert;
        match field {
            Field::Status => Some(a.status.as_str().into()),
            Field::Policy => Some(a.policy.to_string()),
            Field::Job => Some(a.job.to_string()),
            Field::Namespace => Some(a.job.namespace.clone()),
            Field::JobName => Some(a.job.name.clone()),
            Field::Rule => Some(a.rule.clone()),
            Field::Mode => Some(a.mode.as_str().into()),
            Field::Summary => Some(a.summary_text()),
            Field::Values => Some(
                a.values
                    .iter()
                    .map(|(k, v)| format!("{k}={}", fmt_number(*v)))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
            .filter(|s| !s.is_empty()),
            Field::Actions => Some(a.actions_text()),
            // Optional free text: absent is empty, not `-`.
            Field::Message => Some(a.message.clone().unwrap_or_default()),
            Field::At => Some(fmt_local(a.resolved_at.unwrap_or(a.fired_at), self.group.time_zone)),
            // Optional: absent is empty, not `-`.
            Field::Undo => Some(a.undo().unwrap_or_default()),
            Field::Progress => a.progress.and_then(|p| p.percent).map(|p| format!("{}%", fmt_number(p))),
            Field::Eta => a.progress.and_then(|p| p.eta_seconds).map(fmt_seconds),
            Field::GpuHours => a.savings.as_ref().map(|s| trainwarden_core::fmt_gpu_hours(s.gpu_hours)),
            Field::Dollars => a.savings.as_ref().and_then(|s| s.dollars).map(fmt_number),
            Field::Details => Some(a.details()),
            Field::Receiver | Field::Rules | Field::Count => self.group.value(field),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_for_people() {
        assert_eq!(fmt_number(262.3612), "262.36");
        assert_eq!(fmt_number(3.0), "3");
        assert_eq!(fmt_number(-0.001), "0");
        assert_eq!(fmt_seconds(118_062.0), "1d8h47m42s");
        assert_eq!(fmt_seconds(0.0), "0s");
        assert_eq!(fmt_seconds(f64::NAN), "-");
    }

    #[test]
    fn the_first_message_after_a_snooze_says_it_was_held() {
        let mut intent = ActionIntent {
            id: "i".into(),
            at: Timestamp::from_second(1_795_798_800).unwrap(),
            job: JobKey::new("fraud", "ft"),
            policy: PolicyRef {
                kind: trainwarden_core::PolicyKind::Namespaced,
                namespace: Some("fraud".into()),
                name: "p".into(),
                generation: 1,
            },
            rule: "plateau".into(),
            action: ActionSpec::Notify(trainwarden_core::NotifyAction { to: "team".into(), message: None }),
            mode: Mode::Enforce,
            reason: trainwarden_core::Reason { summary: "loss is flat".into(), ..Default::default() },
            savings: None,
            snoozed_until: None,
        };
        assert_eq!(Alert::from_intent(&intent, None).unwrap().0.summary, "loss is flat");
        intent.snoozed_until = Some(Timestamp::from_second(1_795_798_800).unwrap());
        assert_eq!(
            Alert::from_intent(&intent, None).unwrap().0.summary,
            "loss is flat (held while the job was snoozed until 2026-11-27T17:00:00Z by annotation \
             trainwarden.dev/snooze-until; the rule still fires)"
        );
    }
}
