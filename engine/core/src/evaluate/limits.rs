//! Blast-radius limits: how many jobs a policy (`spec.limits`) and the whole engine
//! ([`super::EngineConfig::max_actions_per_hour`], the controller's `--max-actions-per-hour`) may stop.
//!
//! - **What counts**: a firing whose actions include a `suspend` or a `scale` (the actions that stop or
//!   shrink a job) counts once, when its intents are issued. Reporting actions (notify, annotate, event) are
//!   not limited on their own, but a held firing holds all of its actions, so a message that says "the job
//!   was suspended" never goes out for a job that was not.
//! - `maxActionsPerHour`: at most N counted firings of this policy in any rolling hour;
//!   `maxConcurrentSuspended`: at most N jobs this policy suspended and that have not run since (a resume
//!   sets a later `running_since`; a finished or deleted job leaves); both apply in Audit too, so an Audit
//!   run shows what Enforce would hold. The engine-wide hourly cap counts and holds Enforce firings only (an
//!   Audit policy must not use up the budget of the ones that act).
//! - **A refused firing** is firing (its transition is reported as ever) with its actions held: one
//!   [`Event::Limited`] names the limit and, for an hourly one, when a slot frees. Every evaluation of the
//!   job while its rule still fires asks again (a held job is woken when its hourly slot frees and at
//!   least every evaluation interval); when the limits allow, the held firing's intents are issued then,
//!   with the ids it was given when it fired. A rule that resolves while held does nothing. Which of
//!   several held jobs gets a freed slot first is whichever is evaluated first.
//! - **Restarts**: the hold is part of the rule's memory ([`super::RuleMemory::held`]); the counts are
//!   rebuilt from the restored memories' last issue times (a job stopped twice by the same rule within the
//!   hour then counts once).

use std::collections::{BTreeMap, VecDeque};

use super::context::RuleContext;
use super::{Event, Limit, LimitKind, RuleState, RuleTrack};
use crate::input::sample::JobKey;
use crate::policy::compile::{CompiledPolicy, CompiledRule};
use crate::policy::{ActionSpec, Mode};
use crate::time::Timestamp;

const HOUR: f64 = 3600.0;

/// A firing held back: by which limit, and when an hourly slot frees (`None`: the concurrency limit, asked
/// again at every evaluation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Hold {
    pub(super) limit: Limit,
    pub(super) retry: Option<Timestamp>,
}

/// Whether a rule's actions count against the limits: it stops or shrinks a job.
pub(super) fn limited(actions: &[ActionSpec]) -> bool {
    actions.iter().any(|a| matches!(a, ActionSpec::Suspend(_) | ActionSpec::Scale(_)))
}

/// The counts of one policy.
#[derive(Clone, Debug, Default)]
pub(super) struct PolicyLimits {
    /// When its counted firings were issued, oldest first, within the last hour.
    recent: VecDeque<Timestamp>,
    /// The jobs it suspended and that have not run since, with when.
    suspended: BTreeMap<JobKey, Timestamp>,
    /// Jobs whose counted firing waits for a grace (its slot taken then, so graces ending together
    /// cannot overshoot), with when it was counted and its mode: given back if the action never happens.
    reserved: BTreeMap<JobKey, (Timestamp, Mode)>,
}

/// The engine's counts: per policy (by index) and over every Enforce policy.
#[derive(Clone, Debug, Default)]
pub(super) struct LimitBook {
    policies: BTreeMap<usize, PolicyLimits>,
    /// Enforce firings counted within the last hour, oldest first.
    enforce_recent: VecDeque<Timestamp>,
}

fn prune(recent: &mut VecDeque<Timestamp>, now: Timestamp) {
    while recent.front().is_some_and(|t| crate::time::seconds(*t, now) >= HOUR) {
        recent.pop_front();
    }
}

fn slot_frees(recent: &VecDeque<Timestamp>) -> Option<Timestamp> {
    recent.front().and_then(|t| crate::time::add_seconds(*t, HOUR))
}

impl LimitBook {
    /// The limit that refuses a new counted firing of `policy` (at `index`) now, and when an hourly slot
    /// frees; `None`: it may act.
    pub(super) fn refusal(
        &mut self,
        index: usize,
        policy: &CompiledPolicy,
        mode: Mode,
        engine_per_hour: Option<u32>,
        now: Timestamp,
    ) -> Option<Hold> {
        let limits = &policy.limits;
        let book = self.policies.entry(index).or_default();
        prune(&mut book.recent, now);
        prune(&mut self.enforce_recent, now);
        if let Some(max) = limits.max_actions_per_hour
            && book.recent.len() >= max as usize
        {
            return Some(Hold {
                limit: Limit::new(LimitKind::PolicyPerHour, max),
                retry: slot_frees(&book.recent),
            });
        }
        if let Some(max) = limits.max_concurrent_suspended
            && book.suspended.len() >= max as usize
        {
            return Some(Hold { limit: Limit::new(LimitKind::PolicyConcurrent, max), retry: None });
        }
        if mode == Mode::Enforce
            && let Some(max) = engine_per_hour
            && self.enforce_recent.len() >= max as usize
        {
            return Some(Hold {
                limit: Limit::new(LimitKind::EnginePerHour, max),
                retry: slot_frees(&self.enforce_recent),
            });
        }
        None
    }

    /// A counted firing of the policy at `index` for `job` was issued at `at` (`suspends`: its actions
    /// suspend the job).
    pub(super) fn count(&mut self, index: usize, mode: Mode, job: &JobKey, suspends: bool, at: Timestamp) {
        let book = self.policies.entry(index).or_default();
        insert_sorted(&mut book.recent, at);
        if suspends {
            book.suspended.insert(job.clone(), at);
        }
        if mode == Mode::Enforce {
            insert_sorted(&mut self.enforce_recent, at);
        }
    }

    /// A counted firing of `job` whose limited action waits for its grace, counted at `at`.
    pub(super) fn reserve(&mut self, index: usize, mode: Mode, job: &JobKey, suspends: bool, at: Timestamp) {
        self.count(index, mode, job, suspends, at);
        self.policies.entry(index).or_default().reserved.insert(job.clone(), (at, mode));
    }

    /// The deferred action of `job` happened: its reservation is a count like any other.
    pub(super) fn redeem(&mut self, index: usize, job: &JobKey) {
        if let Some(book) = self.policies.get_mut(&index) {
            book.reserved.remove(job);
        }
    }

    /// The deferred action of `job` will not happen (the rule recovered, a snooze or a limit took over):
    /// its slot is given back.
    pub(super) fn cancel(&mut self, index: usize, job: &JobKey) {
        let Some(book) = self.policies.get_mut(&index) else { return };
        let Some((at, mode)) = book.reserved.remove(job) else { return };
        remove_one(&mut book.recent, at);
        if book.suspended.get(job) == Some(&at) {
            book.suspended.remove(job);
        }
        if mode == Mode::Enforce {
            remove_one(&mut self.enforce_recent, at);
        }
    }

    /// `job` no longer counts as suspended by the policy at `index` (its memory was dropped: it is gone).
    pub(super) fn forget_job_of(&mut self, index: usize, job: &JobKey) {
        if let Some(book) = self.policies.get_mut(&index) {
            book.suspended.remove(job);
        }
    }

    /// The job ran again after `running_since`, finished or is gone: it no longer counts as suspended by
    /// any policy whose suspension came before (`None`: whatever the time).
    pub(super) fn job_left(&mut self, job: &JobKey, running_since: Option<Timestamp>) {
        for book in self.policies.values_mut() {
            if let Some(at) = book.suspended.get(job)
                && running_since.is_none_or(|since| since > *at)
            {
                book.suspended.remove(job);
            }
        }
    }

    /// A policy went away (or was replaced under a new index).
    pub(super) fn forget_policy(&mut self, index: usize) {
        self.policies.remove(&index);
    }
}

fn remove_one(recent: &mut VecDeque<Timestamp>, at: Timestamp) {
    if let Some(i) = recent.iter().position(|t| *t == at) {
        recent.remove(i);
    }
}

/// Restored issue times arrive in any order.
fn insert_sorted(recent: &mut VecDeque<Timestamp>, at: Timestamp) {
    let i = recent.partition_point(|t| *t <= at);
    recent.insert(i, at);
}

/// The [`Event::Limited`] of a held firing.
pub(super) fn held_event(cx: &RuleContext<'_>, hold: Hold) -> Event {
    Event::Limited {
        at: cx.now,
        job: cx.key.clone(),
        policy: cx.policy.reference.clone(),
        rule: cx.rule.name.clone(),
        actions: cx.rule.actions.iter().map(ActionSpec::kind).collect(),
        limit: hold.limit,
        retry: hold.retry,
        mode: cx.rule.mode,
    }
}

/// After a limited rule's evaluation: a firing that issued its intents is counted; a held one asks again,
/// or is dropped when its rule no longer fires. `true`: the limits now allow the held firing, whose
/// intents the caller issues (and then counts with [`count_if_issued`]).
pub(super) fn settle(
    book: &mut LimitBook,
    track: &mut RuleTrack,
    index: usize,
    cx: &RuleContext<'_>,
    fired: bool,
    engine_cap: Option<u32>,
) -> bool {
    let RuleContext { key, policy, rule, now, .. } = *cx;
    if fired {
        if track.held.is_none() {
            count_if_issued(book, track, index, rule, key, now);
        }
        return false;
    }
    if track.held.is_none() {
        return false;
    }
    if track.alert.state() != RuleState::Firing {
        track.held = None; // resolved while held: nothing to do
        return false;
    }
    match book.refusal(index, policy, rule.mode, engine_cap, now) {
        Some(hold) => {
            track.held = Some(hold);
            false
        }
        None => {
            track.held = None;
            true
        }
    }
}

/// Counts the rule's firing if it issued a limited action at `now` (a cooldown may have suppressed them).
pub(super) fn count_if_issued(
    book: &mut LimitBook,
    track: &RuleTrack,
    index: usize,
    rule: &CompiledRule,
    key: &JobKey,
    now: Timestamp,
) {
    let is_limited = |i: usize| rule.actions.get(i).is_some_and(|a| limited(std::slice::from_ref(a)));
    let issued =
        (0..rule.actions.len()).any(|i| is_limited(i) && track.last_issued.get(i) == Some(&Some(now)));
    // Deferred by its grace now: the slot is taken when the decision is made (so graces running out
    // together cannot overshoot the limit) and given back if the action never happens.
    let deferred =
        (0..rule.actions.len()).any(|i| is_limited(i) && track.deferred.get(i).is_some_and(Option::is_some));
    let suspends = rule.actions.iter().any(|a| matches!(a, ActionSpec::Suspend(_)));
    if issued {
        book.count(index, rule.mode, key, suspends, now);
    } else if deferred {
        book.reserve(index, rule.mode, key, suspends, now);
    }
}

/// What a restored rule memory says the limits counted (see [`count_restored`]).
pub(super) struct Remembered<'a> {
    pub(super) state: RuleState,
    pub(super) since: Option<Timestamp>,
    pub(super) last_issued: &'a [Option<Timestamp>],
    pub(super) deferred: &'a [Option<Timestamp>],
}

/// A restored memory counts as it did before the restart: its rule's last limited action (the hourly
/// window prunes what is older), a limited action still waiting for its grace (reserved as of the firing),
/// and, for a firing rule that suspended, its job as suspended by the policy (until it runs again).
pub(super) fn count_restored(
    book: &mut LimitBook,
    index: usize,
    rule: &CompiledRule,
    key: &JobKey,
    memory: &Remembered<'_>,
) {
    let is_limited = |a: &ActionSpec| limited(std::slice::from_ref(a));
    let suspends = rule.actions.iter().any(|a| matches!(a, ActionSpec::Suspend(_)));
    let waiting = memory.state == RuleState::Firing
        && rule.actions.iter().zip(memory.deferred).any(|(a, d)| is_limited(a) && d.is_some());
    if waiting {
        book.reserve(index, rule.mode, key, suspends, memory.since.unwrap_or(Timestamp::UNIX_EPOCH));
        return;
    }
    let last = rule
        .actions
        .iter()
        .zip(memory.last_issued)
        .filter(|(a, _)| is_limited(a))
        .filter_map(|(_, t)| *t)
        .max();
    let Some(at) = last else { return };
    let policy_book = book.policies.entry(index).or_default();
    insert_sorted(&mut policy_book.recent, at);
    if rule.mode == Mode::Enforce {
        insert_sorted(&mut book.enforce_recent, at);
    }
    if memory.state == RuleState::Firing && suspends {
        book.policies.entry(index).or_default().suspended.insert(key.clone(), at);
    }
}
