//! Owner snooze: the [`SNOOZE_ANNOTATION`] on a TrainJob holds its rules' actions until a time.
//!
//! `kubectl trainwarden snooze JOB 8h` (or `kubectl annotate trainjob JOB trainwarden.dev/snooze-until=…`)
//! writes an RFC 3339 time. While it lies ahead:
//!
//! - the job's rules are evaluated as ever: history, detectors, pending and firing all go on and are
//!   reported, so `explain`, the status and the replay timeline show what the rules think;
//! - a firing issues no intent: each held firing is one [`Event::Held`] naming its actions and the end;
//! - the snooze ends at `min(annotation, first seen + max_snooze)`, on that exact second (it is one of the
//!   job's timers, see [`super::timers`]), or at once when the annotation is removed or replaced by a value
//!   that does not hold (invalid, in the past). Then every rule of the job **still firing** fires again: a
//!   new firing (its count goes up, so its intents have new ids and the executor's idempotence by intent
//!   id does not take a re-suspension after `resume --snooze` for one already done; the same release seen
//!   again — a restart, another replica — has the same ids and is done once), with its cooldowns applied
//!   as at any firing. A rule that resolved during the snooze does nothing;
//! - the cap: `max_snooze` ([`super::EngineConfig::max_snooze`], the controller's `--max-snooze`) runs from
//!   the first time the evaluator saw this value on this job. A new value starts a new window (the owner
//!   asked again); the same value seen again does not. The first-seen time is kept in the job's history
//!   checkpoint ([`super::Evaluator::checkpoint`]), so it survives a restart or a hand-over wherever the
//!   checkpoint does (the job has reported and an Enforce rule judges it); without one, a restarted
//!   evaluator counts the cap from when it first sees the value, which can lengthen a snooze by at most
//!   the time it was down;
//! - a value that does not parse is reported once per value ([`SnoozeChange::Invalid`], naming the
//!   annotation, the value and what is expected) and the job is not snoozed; an empty value is no snooze; a
//!   time already past is no snooze (that is also what the annotation says once a snooze is over, so it is
//!   not reported);
//! - a job that is not running when its snooze ends (suspended, finished) has nothing to release: its rules
//!   are frozen or resolved.

use super::{Event, Snooze, SnoozeChange, SnoozeEnd};
use crate::input::sample::JobKey;
use crate::time::Timestamp;
use crate::units::duration::PolicyDuration;

/// The TrainJob annotation that snoozes a job's policies: an RFC 3339 time (`2026-12-02T08:00:00Z`) until
/// which the actions of its rules are held (the evaluator's snooze module, `evaluate/snooze.rs`, says how).
pub const SNOOZE_ANNOTATION: &str = "trainwarden.dev/snooze-until";

/// What the evaluator knows of one job's snooze.
#[derive(Clone, Debug, Default)]
pub(super) struct SnoozeTrack {
    /// The annotation's value at the last evaluation (`None`: absent or empty).
    value: Option<String>,
    /// The snooze that value makes, when it parses.
    pub(super) snooze: Option<Snooze>,
    /// Whether the job's actions were held at the last evaluation: a change to `false` releases them.
    pub(super) holding: bool,
    /// The value changed since the last evaluation.
    replaced: bool,
    /// The end of the snooze a new value replaced, for the report of its end.
    previous_until: Option<Timestamp>,
    /// Policies (by index) whose `spec.snooze.maxDuration` ended this snooze for them: their rules were
    /// released then, so the snooze's own end does not release them again.
    pub(super) released_policies: Vec<usize>,
    /// Snoozes (distinct valid values) this job has had, for `spec.snooze.maxPerJob`; kept in its history
    /// checkpoint.
    pub(super) count: u32,
}

/// The outcome of [`SnoozeTrack::observe`].
pub(super) struct Observed {
    /// Hold the job's actions until then (`None`: not snoozed now).
    pub(super) hold: Option<Timestamp>,
    /// Actions were held and no longer are: the snooze that ended and why.
    pub(super) ended: Option<(Timestamp, SnoozeEnd)>,
}

fn parse(value: &str) -> Result<Timestamp, String> {
    value.parse::<Timestamp>().map_err(|e| {
        format!(
            "annotation {SNOOZE_ANNOTATION}={value:?} is not an RFC 3339 time ({e}); expected for example \
             2026-12-02T08:00:00Z (`kubectl trainwarden snooze JOB 8h` writes it): the job is not snoozed"
        )
    })
}

impl SnoozeTrack {
    /// A snooze restored from a checkpoint: `value` first seen at `since`, holding as it was then.
    pub(super) fn restored(value: String, since: Timestamp, max: PolicyDuration) -> Option<SnoozeTrack> {
        let snooze = make(&value, since, max).ok()?;
        Some(SnoozeTrack {
            value: Some(value),
            snooze: Some(snooze),
            holding: true,
            ..SnoozeTrack::default()
        })
    }

    /// The job was observed (its TrainJob object, with its annotations) at `now`: a new value of the
    /// annotation replaces the snooze (a new value starts a new cap window; the same value seen again
    /// changes nothing). Only whole observations carry annotations, so only they come here: a job known
    /// from its checkpoint alone keeps the snooze restored with it.
    pub(super) fn note(
        &mut self,
        key: &JobKey,
        value: Option<&str>,
        now: Timestamp,
        max: PolicyDuration,
        out: &mut Vec<Event>,
    ) {
        let value = value.map(str::trim).filter(|v| !v.is_empty());
        if self.value.as_deref() == value {
            return;
        }
        self.value = value.map(String::from);
        self.replaced = true;
        if let Some(s) = &self.snooze {
            self.previous_until = Some(s.until);
        }
        self.snooze = None;
        if let Some(v) = value {
            match make(v, now, max) {
                Ok(s) => self.snooze = Some(s),
                Err(message) => out.push(Event::Snooze {
                    at: now,
                    job: key.clone(),
                    change: SnoozeChange::Invalid { value: v.chars().take(64).collect(), message },
                }),
            }
        }
        if let Some(s) = self.snooze.as_ref().filter(|s| s.until > now) {
            // A new window for every policy; a removed or invalid value keeps the list until the end of
            // the snooze it replaced is processed (`check`), so no capped policy is released twice.
            self.released_policies.clear();
            self.count = self.count.saturating_add(1);
            out.push(Event::Snooze { at: now, job: key.clone(), change: SnoozeChange::Started(s.clone()) });
        }
    }

    /// At one evaluation of the job: whether to hold its actions now, and whether a snooze that held them
    /// ended (its time came, or the annotation changed since the last evaluation).
    pub(super) fn check(&mut self, now: Timestamp) -> Observed {
        let hold = self.snooze.as_ref().map(|s| s.until).filter(|u| *u > now);
        let ended = match (self.holding, hold) {
            (true, None) => {
                let why = if self.value.is_none() {
                    SnoozeEnd::Removed
                } else if self.replaced && self.snooze.as_ref().is_none_or(|s| s.since == now) {
                    SnoozeEnd::Replaced
                } else {
                    SnoozeEnd::Expired
                };
                let until = self.snooze.as_ref().map(|s| s.until).filter(|_| why == SnoozeEnd::Expired);
                Some((until.or(self.previous_until).unwrap_or(now), why))
            }
            _ => None,
        };
        self.holding = hold.is_some();
        self.replaced = false;
        if ended.is_some() {
            self.released_policies.clear();
        }
        if hold.is_some() {
            self.previous_until = None;
        }
        Observed { hold, ended }
    }

    /// Whether a value was seen (or restored) for the job.
    pub(super) fn seen(&self) -> bool {
        self.value.is_some()
    }

    /// The snooze holding the job's actions as of its last evaluation.
    pub(super) fn holding(&self) -> Option<&Snooze> {
        self.snooze.as_ref().filter(|_| self.holding)
    }

    /// Until when the snooze holds the actions of a policy whose own cap is `cap` (`None` at `now`: it does
    /// not, or no longer, hold them).
    pub(super) fn holds_policy_until(
        &self,
        cap: Option<PolicyDuration>,
        now: Timestamp,
    ) -> Option<Timestamp> {
        self.policy_end(cap).filter(|until| *until > now)
    }

    /// When the snooze stops holding a policy whose own cap is `cap`, whatever `now` is.
    pub(super) fn policy_end(&self, cap: Option<PolicyDuration>) -> Option<Timestamp> {
        let s = self.snooze.as_ref()?;
        Some(match cap {
            Some(c) => {
                s.until.min(crate::time::add_seconds(s.since, c.as_secs_f64()).unwrap_or(Timestamp::MAX))
            }
            None => s.until,
        })
    }

    /// The snooze in force at `now`, if any.
    pub(super) fn current(&self, now: Timestamp) -> Option<&Snooze> {
        self.snooze.as_ref().filter(|s| s.until > now)
    }
}

/// The snooze `value` makes when first seen at `since` under a cap of `max`.
fn make(value: &str, since: Timestamp, max: PolicyDuration) -> Result<Snooze, String> {
    let requested = parse(value)?;
    if max.as_millis() == 0 {
        return Err(format!(
            "annotation {SNOOZE_ANNOTATION}={value:?} is ignored: the administrator allows no snooze \
             (max snooze 0s)"
        ));
    }
    let cap = crate::time::add_seconds(since, max.as_secs_f64()).unwrap_or(Timestamp::MAX);
    Ok(Snooze { value: value.to_string(), requested, since, until: requested.min(cap) })
}

#[cfg(test)]
mod tests;
