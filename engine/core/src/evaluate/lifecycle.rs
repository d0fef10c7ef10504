//! One rule for one job, Prometheus style: the condition (detector and/or script), the state machine
//! inactive → pending → firing → resolved, firing's action intents with cooldowns, and resolution.

use super::context::RuleContext;
use super::limits::{Hold, held_event};
use super::{ActionIntent, Alert, Event, Reason, Resolution, RuleTrack, TransitionKind, savings};
use crate::history::job::JobData;
use crate::input::sample::JobKey;
use crate::judge::script::ScriptEngine;
use crate::policy::ActionSpec;
use crate::policy::compile::{CompiledPolicy, CompiledRule};
use crate::time::Timestamp;

/// Evaluates the rule's condition: `Some(reason)` when it holds, and when a time-driven function of its
/// script would turn true (see [`crate::judge::script::Frame::wake`]).
pub(super) fn condition(
    scripts: &ScriptEngine,
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    track: &RuleTrack,
    data: &mut Option<Box<JobData>>,
    now: Timestamp,
) -> Result<(Option<Reason>, Option<Timestamp>), String> {
    let mut findings = Vec::new();
    if let Some(detector) = &rule.detector {
        let Some(job) = data.as_deref() else { return Ok((None, None)) };
        match detector.check(&track.detector_state, &job.view(&policy.env, now)) {
            Some(f) => findings.push(f),
            None => return Ok((None, None)),
        }
    }
    let mut wake = None;
    if let Some(script) = &rule.script {
        let outcome = scripts.eval_condition(script, data, &policy.env, now).map_err(|e| e.to_string())?;
        if !outcome.value {
            return Ok((None, outcome.wake));
        }
        wake = outcome.wake;
        findings.extend(outcome.evidence);
    }
    Ok((Some(Reason::from_findings(findings, rule.when.as_deref())), wake))
}

/// What holds a firing's actions: the owner's snooze, or an exception (`exception`), until `until`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Pause {
    pub(super) until: Timestamp,
    pub(super) exception: Option<crate::policy::exception::ExceptionRef>,
}

/// What became of a rule's deferred actions at one evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deferral {
    /// Nothing was waiting, or it still waits.
    Waiting,
    /// A grace ended: its action was issued now.
    Issued,
    /// The rule no longer fires: the waiting actions are dropped.
    Cancelled,
}

impl RuleTrack {
    /// One evaluation's verdict on the rule's state. `hold`: the job is snoozed until then, so a firing holds
    /// its actions (see [`super::snooze`]); `limit`: a blast-radius limit would hold a firing's actions (see
    /// [`super::limits`]).
    pub(super) fn advance(
        &mut self,
        cx: &RuleContext<'_>,
        reason: Option<Reason>,
        cleared_by: Resolution,
        hold: Option<&Pause>,
        limit: Option<Hold>,
        out: &mut Vec<Event>,
    ) {
        let RuleContext { rule, .. } = *cx;
        // `reason` is `None` because of `cleared_by`: the condition, the window or the job's phase.
        let ended = |track: &mut RuleTrack| Reason {
            resolution: Some(cleared_by),
            ..std::mem::take(&mut track.last_reason)
        };
        match (self.alert, reason) {
            (Alert::Inactive, Some(reason)) => {
                if rule.for_.is_zero() {
                    self.fire(cx, reason, hold, limit, out);
                } else {
                    self.alert = Alert::Pending { since: Some(cx.now) };
                    self.last_reason = reason.clone();
                    out.push(cx.transition(TransitionKind::Pending, reason));
                }
            }
            (Alert::Pending { since }, Some(reason)) => {
                let since = since.unwrap_or(cx.now);
                self.last_reason = reason.clone();
                if crate::time::seconds(since, cx.now) >= rule.for_.as_secs_f64() {
                    self.fire(cx, reason, hold, limit, out);
                }
            }
            (Alert::Pending { .. }, None) => {
                self.alert = Alert::Inactive;
                out.push(cx.transition(TransitionKind::Cleared, ended(self)));
            }
            (Alert::Firing { since, .. }, Some(reason)) => {
                self.alert = Alert::Firing { since, cleared_at: None };
                self.last_reason = reason;
            }
            (Alert::Firing { since, cleared_at }, None) => {
                let cleared = cleared_at.unwrap_or(cx.now);
                self.alert = Alert::Firing { since, cleared_at: Some(cleared) };
                if crate::time::seconds(cleared, cx.now) >= rule.keep_firing_for.as_secs_f64() {
                    self.alert = Alert::Inactive;
                    out.push(cx.transition(TransitionKind::Resolved, ended(self)));
                }
            }
            (Alert::Inactive, None) => {}
        }
    }

    /// The rule fires: one transition, then its actions' intents, or, while the job is snoozed (`hold`), one
    /// [`Event::Held`] instead (cooldowns are not touched: nothing was issued), or, when a limit refuses
    /// (`limit`), one [`Event::Limited`] and the track holds the firing.
    fn fire(
        &mut self,
        cx: &RuleContext<'_>,
        reason: Reason,
        hold: Option<&Pause>,
        limit: Option<Hold>,
        out: &mut Vec<Event>,
    ) {
        let RuleContext { key, policy, rule, now, .. } = *cx;
        self.alert = Alert::Firing { since: Some(now), cleared_at: None };
        self.firings += 1;
        self.last_reason = reason.clone();
        out.push(cx.transition(TransitionKind::Firing, reason.clone()));
        if let Some(pause) = hold {
            // What holds it is what releases it: the snooze's end (or cap), or the exception's.
            match &pause.exception {
                Some(e) => self.excepted = (!rule.actions.is_empty()).then(|| Box::new(e.clone())),
                None => self.snooze_held = !rule.actions.is_empty(),
            }
            if !rule.actions.is_empty() {
                out.push(Event::Held {
                    at: now,
                    job: key.clone(),
                    policy: policy.reference.clone(),
                    rule: rule.name.clone(),
                    actions: rule.actions.iter().map(ActionSpec::kind).collect(),
                    until: pause.until,
                    mode: rule.mode,
                    exception: pause.exception.clone(),
                });
            }
            return;
        }
        if let Some(h) = limit {
            self.held = Some(h);
            self.deferred.clear();
            out.push(held_event(cx, h));
            return;
        }
        self.issue(cx, &reason, None, out);
    }

    /// A rule still firing when its job's snooze ended (at `snoozed_until`) fires again now: a new firing (new
    /// intent ids, so the executor does not take it for the one before the snooze), without a new transition
    /// (it never stopped firing), its `keepFiringFor` clock left as it was.
    pub(super) fn release(
        &mut self,
        cx: &RuleContext<'_>,
        snoozed_until: Option<Timestamp>,
        out: &mut Vec<Event>,
    ) {
        let Alert::Firing { cleared_at, .. } = self.alert else { return };
        self.alert = Alert::Firing { since: Some(cx.now), cleared_at };
        self.firings += 1;
        let reason = self.last_reason.clone();
        self.issue(cx, &reason, snoozed_until, out);
    }

    /// The intents of one firing, each action subject to its cooldown. A suspend or scale with a `grace` waits
    /// (one [`Event::Deferred`], its due time on the track) unless the firing follows a snooze (`snoozed_until`:
    /// the owner had their warning); the firing's other intents then carry, in their reason, when it will
    /// happen and how to snooze the job.
    pub(super) fn issue(
        &mut self,
        cx: &RuleContext<'_>,
        reason: &Reason,
        snoozed_until: Option<Timestamp>,
        out: &mut Vec<Event>,
    ) {
        let RuleContext { key, policy, rule, now, .. } = *cx;
        let track = self;
        track.last_issued.resize(rule.actions.len(), None);
        track.deferred = vec![None; rule.actions.len()];
        track.snooze_held = false;
        track.excepted = None;
        let cooling = |track: &RuleTrack, i: usize| {
            // A cooldown past the representable range means "never again".
            track.last_issued[i]
                .map(|last| {
                    crate::time::add_seconds(last, rule.cooldown.as_secs_f64()).unwrap_or(Timestamp::MAX)
                })
                .filter(|until| *until > now)
        };
        let graced: Vec<(usize, Timestamp)> = if snoozed_until.is_some() {
            Vec::new()
        } else {
            (rule.actions.iter().enumerate())
                .filter(|(i, _)| cooling(track, *i).is_none())
                .filter_map(|(i, a)| Some((i, crate::time::add_seconds(now, a.grace()?.as_secs_f64())?)))
                .collect()
        };
        let warned = if graced.is_empty() {
            reason.clone()
        } else {
            let mut r = reason.clone();
            r.summary += &grace_notice(key, policy, rule, &graced);
            r
        };
        for (i, action) in rule.actions.iter().enumerate() {
            if let Some(until) = cooling(track, i) {
                out.push(Event::Suppressed {
                    at: now,
                    job: key.clone(),
                    policy: policy.reference.clone(),
                    rule: rule.name.clone(),
                    action: action.kind(),
                    until,
                });
                continue;
            }
            if let Some(&(_, until)) = graced.iter().find(|(j, _)| *j == i) {
                track.deferred[i] = Some(until);
                out.push(Event::Deferred {
                    at: now,
                    job: key.clone(),
                    policy: policy.reference.clone(),
                    rule: rule.name.clone(),
                    action: action.kind(),
                    until,
                    mode: rule.mode,
                });
                continue;
            }
            track.emit(cx, i, &warned, snoozed_until, out);
        }
    }

    /// Issues the intent of action `i` now.
    fn emit(
        &mut self,
        cx: &RuleContext<'_>,
        i: usize,
        reason: &Reason,
        snoozed_until: Option<Timestamp>,
        out: &mut Vec<Event>,
    ) {
        let RuleContext { key, policy, rule, now, data } = *cx;
        let track = self;
        let action = &rule.actions[i];
        track.last_issued[i] = Some(now);
        let savings = match action {
            ActionSpec::Suspend(_) => data.and_then(|d| savings::estimate(d, policy, reason, now)),
            _ => None,
        };
        out.push(Event::Intent(ActionIntent {
            id: intent_id(policy, rule, key, data, track.firings, i),
            at: now,
            job: key.clone(),
            policy: policy.reference.clone(),
            rule: rule.name.clone(),
            action: action.clone(),
            mode: rule.mode,
            reason: reason.clone(),
            savings,
            snoozed_until,
        }));
    }

    /// A rule's deferred actions: dropped once the rule no longer fires (it recovered); with `may_act` (the
    /// job is not snoozed for this policy, the firing not held by a limit), those whose grace is over are
    /// issued now with the firing's ids, unless the condition stopped holding within `keepFiringFor`.
    pub(super) fn act_on_deferred(
        &mut self,
        cx: &RuleContext<'_>,
        may_act: bool,
        out: &mut Vec<Event>,
    ) -> Deferral {
        let RuleContext { rule, now, .. } = *cx;
        let track = self;
        if track.deferred.iter().all(Option::is_none) {
            return Deferral::Waiting;
        }
        let cleared_at = match track.alert {
            Alert::Firing { cleared_at, .. } => cleared_at,
            _ => {
                track.deferred.clear();
                return Deferral::Cancelled;
            }
        };
        if !may_act || track.held.is_some() || cleared_at.is_some() {
            return Deferral::Waiting;
        }
        track.last_issued.resize(rule.actions.len(), None);
        let reason = track.last_reason.clone();
        let mut issued = Deferral::Waiting;
        for i in 0..track.deferred.len().min(rule.actions.len()) {
            if track.deferred[i].is_some_and(|due| due <= now) {
                track.deferred[i] = None;
                track.emit(cx, i, &reason, None, out);
                issued = Deferral::Issued;
            }
        }
        issued
    }

    /// The rule is gone for the job (its policy or rule changed, the job was deleted or is no longer selected):
    /// a firing resolves, a pending one clears, `why` says why.
    pub(super) fn resolve(self, cx: &RuleContext<'_>, why: Resolution, out: &mut Vec<Event>) {
        let track = self;
        let kind = match track.alert {
            Alert::Firing { .. } => TransitionKind::Resolved,
            Alert::Pending { .. } => TransitionKind::Cleared,
            Alert::Inactive => return,
        };
        out.push(cx.transition(kind, Reason { resolution: Some(why), ..track.last_reason }));
    }
}

impl RuleContext<'_> {
    /// The rule's transition to `kind` now.
    fn transition(&self, kind: TransitionKind, reason: Reason) -> Event {
        Event::Transition {
            at: self.now,
            job: self.key.clone(),
            policy: self.policy.reference.clone(),
            rule: self.rule.name.clone(),
            kind,
            reason,
            mode: self.rule.mode,
        }
    }
}

/// What the firing's other actions say of its deferred ones: `; suspend at 2026-11-27T23:41:26Z (grace
/// 30m) unless the rule stops firing or the job is snoozed: kubectl trainwarden snooze ft -n ml 4h`.
fn grace_notice(
    key: &JobKey,
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    graced: &[(usize, Timestamp)],
) -> String {
    let what: Vec<String> = graced
        .iter()
        .map(|(i, until)| {
            let a = &rule.actions[*i];
            let grace = a.grace().map(|g| g.to_string()).unwrap_or_default();
            format!("{} at {until} (grace {grace})", a.kind().as_str())
        })
        .collect();
    // A policy that allows no snooze says so instead of offering one.
    let never_snoozed = policy.max_snooze.is_some_and(crate::units::duration::PolicyDuration::is_zero)
        || policy.max_snoozes == Some(0);
    if never_snoozed {
        return format!("; {} unless the rule stops firing (this policy allows no snooze)", what.join(", "));
    }
    format!(
        "; {} unless the rule stops firing or the job is snoozed: kubectl trainwarden snooze {} -n {} 4h",
        what.join(", "),
        key.name,
        key.namespace
    )
}

/// Unique per policy version, rule, job incarnation (its first-seen time: a re-created job is a new one),
/// firing and action, so an executor can deduplicate on it across retries and restarts.
pub(super) fn intent_id(
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    key: &JobKey,
    data: Option<&JobData>,
    firing: u64,
    action: usize,
) -> String {
    let p = &policy.reference;
    // The job's creation time where known, so ids stay the same across controller restarts.
    let since = data.map_or(0, |d| d.snapshot.created_at.unwrap_or(d.first_seen).as_second());
    format!(
        "{}:{}:{}:{}:{}:{}:{}:{since}:{firing}:{action}",
        p.kind,
        p.namespace.as_deref().unwrap_or(""),
        p.name,
        p.generation,
        rule.name,
        key.namespace,
        key.name
    )
}
