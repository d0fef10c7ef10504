//! What a step sends out: the evaluator's events become work for the executor — intents (owed in the
//! ledger until settled), Kubernetes Events on the job (firing, resolved, held, limited, deferred, snooze,
//! a rule error), notifications — in an order that keeps a crash safe: actions that stop the job go last,
//! and the checkpoint taken at a firing after them.

use std::collections::HashSet;

use tracing::{debug, info, warn};
use trainwarden_core::describe::Notice;
use trainwarden_core::{ActionSpec, Event, JobKey, PolicyDuration, PolicyRef, TransitionKind};
use trainwarden_notify::JobProgress;

use super::Brain;
use crate::messages::{Act, ActionResult, Judged, Outcome, TrainJobEvent, Work};
use crate::metrics::{LimitLabels, ModeLabel, ModeLabels};

impl Brain {
    /// The work of the last step, on its way to the executor: Events without a uid get the one the TrainJob's
    /// latest report carried, so the executor need not read the object to name it.
    ///
    /// Intents get the view they were judged under ([`Judged`]): the policy's uid and loaded generation, the
    /// job's uid and snooze, whether the policy honours the job's namespace's exceptions. Filled here, as
    /// they leave, so an intent sent again (a retry, a hand-over, a firing that still stands under a new
    /// generation) carries the view it is sent under, not the one it was first issued under.
    pub(super) fn outgoing(&mut self) -> Vec<Work> {
        let mut work = std::mem::take(&mut self.work);
        for item in &mut work {
            match item {
                Work::RecordEvent(event) if event.uid.is_none() => {
                    event.uid = self.history.uid_of(&event.job);
                }
                Work::Act(act) if act.judged.is_none() => act.judged = self.judged(&act.intent),
                _ => {}
            }
        }
        work
    }

    /// What the brain judges `intent` under now; `None` when its policy is not loaded (not for an intent
    /// sent out: only a loaded policy issues intents, and the ledger drops those of an unloaded one).
    fn judged(&self, intent: &trainwarden_core::ActionIntent) -> Option<Judged> {
        let book = self.books.get(&intent.policy.id())?;
        let reference = book.reference.as_ref()?;
        let policy = self.evaluator.policies().find(|p| p.reference == *reference)?;
        let snooze = self.evaluator.job(&intent.job).and_then(|j| {
            j.snapshot.annotations.get(trainwarden_core::SNOOZE_ANNOTATION).map(|v| v.trim().to_string())
        });
        Some(Judged {
            policy_uid: book.uid.clone(),
            generation: reference.generation,
            job_uid: self.history.uid_of(&intent.job),
            snooze: snooze.filter(|v| !v.is_empty()),
            honours_exceptions: policy.honours_exceptions_from(&intent.job.namespace),
        })
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
            // Logs and metrics first; what people are told on the job is worded by `describe`.
            match &event {
                Event::Intent(intent) => {
                    self.ledger.issue(intent);
                    if let ActionSpec::Notify(n) = &intent.action
                        && unroutable
                    {
                        let (notice, message) = Notice::notification_not_configured(intent, n);
                        self.record_event(&intent.job, notice);
                        let at = intent.at;
                        self.record_outcome(Outcome::of(intent, ActionResult::Refused, message), at);
                        continue;
                    }
                }
                Event::Transition { job, policy, rule, kind, mode, .. } => match kind {
                    TransitionKind::Firing => {
                        self.metrics
                            .firings
                            .get_or_create(&ModeLabels { mode: ModeLabel(Some(*mode)) })
                            .inc();
                    }
                    TransitionKind::Resolved => {}
                    TransitionKind::Pending | TransitionKind::Cleared => {
                        debug!(%job, %policy, rule, kind = kind.as_str(), "transition");
                    }
                },
                Event::RuleError { at, job, policy, rule, message } => {
                    warn!(%job, %policy, rule, error = %message, "rule evaluation failed");
                    if let Some(book) = self.books.get_mut(&policy.id()) {
                        book.note_rule_error(rule, job, message, *at);
                    }
                }
                Event::Suppressed { job, policy, rule, action, until, .. } => {
                    debug!(%job, %policy, rule, action = action.as_str(), %until, "suppressed by cooldown");
                }
                Event::Held { job, policy, rule, until, exception, .. } => match exception {
                    Some(e) => {
                        info!(%job, %policy, rule, %until, exception = %e, "actions held by an exception");
                    }
                    None => info!(%job, %policy, rule, %until, "actions held: the job is snoozed"),
                },
                Event::ExceptionEnded { job, policy, rule, exception, why, released, .. } => {
                    info!(%job, %policy, rule, exception = %exception, ?why, released, "an exception ended");
                }
                Event::Limited { job, policy, rule, limit, .. } => {
                    info!(%job, %policy, rule, %limit, "actions held by a limit");
                    self.metrics.actions_limited.get_or_create(&LimitLabels { limit: (*limit).into() }).inc();
                }
                Event::Deferred { job, policy, rule, action, until, .. } => {
                    info!(%job, %policy, rule, %until, action = action.as_str(), "action deferred by its grace");
                }
                Event::Snooze { .. } => {}
            }
            // A policy that allows no snooze does not offer one.
            let snoozable = |policy: &PolicyRef| {
                self.evaluator.policies().find(|p| p.reference == *policy).is_none_or(|p| {
                    !p.max_snooze.is_some_and(PolicyDuration::is_zero) && p.max_snoozes != Some(0)
                })
            };
            if let Some(notice) = Notice::of(&event, snoozable) {
                if let Event::Snooze { job, .. } = &event {
                    info!(%job, reason = notice.reason.as_str(), note = %notice.note, "snooze");
                }
                self.record_event(event.job(), notice);
            }
            if let Event::Intent(intent) = event {
                self.work.push(Work::Act(Box::new(Act::new(intent))));
            }
        }
    }

    /// An Event about `job`, recorded with the uid its latest report carried (see [`Brain::outgoing`]).
    pub(super) fn record_event(&mut self, job: &JobKey, notice: Notice) {
        self.work.push(Work::RecordEvent(Box::new(TrainJobEvent { job: job.clone(), notice, uid: None })));
    }
}
