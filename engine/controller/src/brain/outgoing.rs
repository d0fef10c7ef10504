//! What a step sends out: the evaluator's events become work for the executor — intents (owed in the
//! ledger until settled), Kubernetes Events on the job (firing, resolved, held, limited, deferred, snooze,
//! a rule error), notifications — in an order that keeps a crash safe: actions that stop the job go last,
//! and the checkpoint taken at a firing after them.

use std::collections::HashSet;

use tracing::{debug, info, warn};
use trainwarden_core::{ActionSpec, Event, JobKey, SnoozeChange, TransitionKind};
use trainwarden_notify::JobProgress;

use super::Brain;
use crate::messages::{ActionResult, Outcome, TrainJobEvent, Work};
use crate::metrics::{LimitLabels, ModeLabel, ModeLabels};

impl Brain {
    /// The work of the last step, on its way to the executor: Events without a uid get the one the TrainJob's
    /// latest report carried, so the executor need not read the object to name it.
    pub(super) fn outgoing(&mut self) -> Vec<Work> {
        let mut work = std::mem::take(&mut self.work);
        for item in &mut work {
            if let Work::RecordEvent(event) = item
                && event.uid.is_none()
            {
                event.uid = self.history.uid_of(&event.job);
            }
        }
        work
    }

    pub(super) fn drain_events(&mut self) {
        self.verdicts.transitions(&self.events);
        if let Some(g) = &mut self.gauges {
            for event in &self.events {
                if let Event::Transition { job, .. } = event {
                    g.touch(job);
                }
            }
        }
        self.drain_events_in_order();
        // A firing's actions that stop the job go last: a suspended job's rules are frozen, so if the
        // controller died after stopping the job but before its Events and notifications, those would never
        // be redone; done first, a crash before the suspension is redone whole (see `in_flight`).
        // The checkpoint taken at the firing goes after the stop: it records what was judged and changes
        // nothing, while the job's GPUs burn one API write longer if the suspension waits for it (measured at
        // 10,000 jobs: the suspension's p99 wait behind its job's earlier work was 0.5 s). A crash in between
        // loses that checkpoint only; the job is stopped and its rules frozen.
        let stops = |w: &Work| matches!(w, Work::Act(i) if matches!(i.action, ActionSpec::Suspend(_) | ActionSpec::Scale(_)));
        if self.work.iter().any(stops) {
            let stopped: HashSet<JobKey> =
                self.work.iter().filter(|w| stops(w)).filter_map(Work::job).cloned().collect();
            let (mut first, mut stopping, mut after) = (Vec::new(), Vec::new(), Vec::new());
            for w in self.work.drain(..) {
                if stops(&w) {
                    stopping.push(w);
                } else if matches!(&w, Work::SaveHistory(h) if stopped.contains(&h.job)) {
                    after.push(w);
                } else {
                    first.push(w);
                }
            }
            first.extend(stopping);
            first.extend(after);
            self.work = first;
        }
    }

    pub(super) fn drain_events_in_order(&mut self) {
        let events = std::mem::take(&mut self.events);
        for event in events {
            // A notify to no receiver of its policy goes nowhere: it is refused below, not handed on.
            let unroutable = match &event {
                Event::Intent(i) => match &i.action {
                    ActionSpec::Notify(n) => {
                        !self.evaluator.policies().any(|p| p.reference == i.policy && p.has_receiver(&n.to))
                    }
                    _ => false,
                },
                _ => false,
            };
            if let Some(_notifier) = &self.notifier
                && !unroutable
                && matches!(
                    event,
                    Event::Intent(_) | Event::Transition { kind: TransitionKind::Resolved, .. }
                )
            {
                let job = match &event {
                    Event::Intent(i) => &i.job,
                    Event::Transition { job, .. } => job,
                    _ => unreachable!("matched above"),
                };
                let progress = self.evaluator.job(job).and_then(JobProgress::of);
                self.work.push(Work::Notify(Box::new(event.clone()), progress));
            }
            match event {
                Event::Intent(intent) => {
                    self.ledger.issue(&intent);
                    if let ActionSpec::Notify(n) = &intent.action
                        && unroutable
                    {
                        // Nothing would be sent: say so where people look instead of "queued".
                        let message = format!(
                            "notify {:?} sends nothing: the policy declares no such receiver (add spec.receivers)",
                            n.to
                        );
                        self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                            job: intent.job.clone(),
                            warning: true,
                            reason: "NotificationNotConfigured".into(),
                            action: "Notify".into(),
                            note: format!(
                                "{} {} rule {}: {message}",
                                intent.policy.kind, intent.policy, intent.rule
                            ),
                            uid: None,
                        })));
                        let at = intent.at;
                        self.record_outcome(Outcome::of(&intent, ActionResult::Refused, message), at);
                        continue;
                    }
                    self.work.push(Work::Act(Box::new(intent)));
                }
                Event::Transition { job, policy, rule, kind, reason, mode, .. } => {
                    let values = reason
                        .values
                        .iter()
                        .map(|(k, v)| format!("{k}={}", trainwarden_core::fmt_num(*v)))
                        .collect::<Vec<_>>()
                        .join(", ");
                    let values = if values.is_empty() { String::new() } else { format!(" [{values}]") };
                    let (warning, name) = match kind {
                        TransitionKind::Firing => {
                            self.metrics
                                .firings
                                .get_or_create(&ModeLabels { mode: ModeLabel(Some(mode)) })
                                .inc();
                            (true, "RuleFiring")
                        }
                        TransitionKind::Resolved => (false, "RuleResolved"),
                        TransitionKind::Pending | TransitionKind::Cleared => {
                            debug!(%job, %policy, rule, kind = kind.as_str(), "transition");
                            continue;
                        }
                    };
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning,
                        reason: name.into(),
                        action: "Evaluate".into(),
                        // A resolution says why first: the condition, the window, the job, the policy.
                        note: format!(
                            "{} {policy} rule {rule} {} [{}]: {}{}{values}",
                            policy.kind,
                            kind.as_str(),
                            mode.as_str(),
                            reason
                                .resolution
                                .map(|r| format!("{} (it fired: ", r.text()))
                                .unwrap_or_default(),
                            if reason.resolution.is_some() {
                                format!("{})", reason.summary)
                            } else {
                                reason.summary.clone()
                            }
                        ),
                        uid: None,
                    })));
                }
                Event::RuleError { at, job, policy, rule, message } => {
                    warn!(%job, %policy, rule, error = %message, "rule evaluation failed");
                    if let Some(book) = self.books.get_mut(&policy.id()) {
                        book.note_rule_error(&rule, &job, &message, at);
                    }
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: true,
                        reason: "RuleError".into(),
                        action: "Evaluate".into(),
                        note: format!("{} {policy} rule {rule}: {message}", policy.kind),
                        uid: None,
                    })));
                }
                Event::Suppressed { job, policy, rule, action, until, .. } => {
                    debug!(%job, %policy, rule, action = action.as_str(), %until, "suppressed by cooldown");
                }
                Event::Held { job, policy, rule, actions, until, mode, exception, .. } => {
                    match &exception {
                        Some(e) => {
                            info!(%job, %policy, rule, %until, exception = %e, "actions held by an exception");
                        }
                        None => info!(%job, %policy, rule, %until, "actions held: the job is snoozed"),
                    }
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: false,
                        reason: "ActionsHeld".into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule} firing [{}]: {}",
                            policy.kind,
                            mode.as_str(),
                            trainwarden_core::replay::held_text(&actions, until, exception.as_ref())
                        ),
                        uid: None,
                    })));
                }
                Event::ExceptionEnded { job, policy, rule, exception, why, released, .. } => {
                    info!(%job, %policy, rule, exception = %exception, ?why, released, "an exception ended");
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: false,
                        reason: "ExceptionEnded".into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule}: {}",
                            policy.kind,
                            trainwarden_core::replay::exception_ended_text(&exception, why, released)
                        ),
                        uid: None,
                    })));
                }
                Event::Limited { job, policy, rule, actions, limit, retry, mode, .. } => {
                    info!(%job, %policy, rule, %limit, "actions held by a limit");
                    self.metrics.actions_limited.get_or_create(&LimitLabels { limit: limit.into() }).inc();
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: true,
                        reason: "ActionsLimited".into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule} firing [{}]: {}",
                            policy.kind,
                            mode.as_str(),
                            trainwarden_core::replay::limited_text(&actions, &limit, retry)
                        ),
                        uid: None,
                    })));
                }
                Event::Deferred { job, policy, rule, action, until, mode, .. } => {
                    info!(%job, %policy, rule, %until, action = action.as_str(), "action deferred by its grace");
                    // A policy that allows no snooze does not offer one.
                    let snoozable =
                        self.evaluator.policies().find(|p| p.reference == policy).is_none_or(|p| {
                            !p.max_snooze.is_some_and(trainwarden_core::PolicyDuration::is_zero)
                                && p.max_snoozes != Some(0)
                        });
                    let command = if snoozable {
                        format!(
                            "; to keep the job running for now: kubectl trainwarden snooze {} -n {} 4h",
                            job.name, job.namespace
                        )
                    } else {
                        "; this policy allows no snooze".to_string()
                    };
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: true,
                        reason: "ActionDeferred".into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule} firing [{}]: {}{command}",
                            policy.kind,
                            mode.as_str(),
                            trainwarden_core::replay::deferred_text(action, until)
                        ),
                        uid: None,
                    })));
                }
                Event::Snooze { job, change, .. } => {
                    let (warning, reason) = match &change {
                        SnoozeChange::Started(_) => (false, "Snoozed"),
                        SnoozeChange::Ended { .. } => (false, "SnoozeEnded"),
                        SnoozeChange::PolicyCapped { .. } => (false, "SnoozeCapped"),
                        SnoozeChange::Invalid { .. } => (true, "InvalidSnooze"),
                    };
                    let note = trainwarden_core::replay::snooze_text(&change, &jiff::tz::TimeZone::UTC);
                    info!(%job, reason, %note, "snooze");
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning,
                        reason: reason.into(),
                        action: "Evaluate".into(),
                        note,
                        uid: None,
                    })));
                }
            }
        }
    }
}
