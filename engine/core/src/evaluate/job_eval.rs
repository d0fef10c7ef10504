//! Evaluating one job: its snooze and exceptions first, then every rule of every policy selecting it (the
//! condition, the lifecycle step with what holds it, the limits, actions waiting for their grace), then
//! what a snooze's or an exception's end releases, and the rules of policies that stopped selecting it.

use super::context::RuleContext;
use super::lifecycle::{Deferral, Pause, condition};
use super::*;

impl Evaluator {
    pub(super) fn evaluate_job(&mut self, id: usize, now: Timestamp, out: &mut Vec<Event>) {
        let Some((key, entry)) = self.jobs.key_and_entry(id) else { return };
        entry.last_evaluated = Some(now);
        self.evaluations += 1;
        let Some(phase) = entry.data.as_ref().map(|d| d.snapshot.phase) else { return };
        let running = phase == JobPhase::Running;
        // Read before `check` clears them when the snooze ends.
        let released_before = entry.snooze.released_policies.clone();
        let snooze = entry.snooze.check(now);
        let hold = snooze.hold;
        // The rules that fire in this very evaluation act (or not) on their own: a release skips them.
        let mut fired_now: Vec<(usize, usize)> = Vec::new();
        for i in 0..entry.selected_by.len() {
            let p_index = entry.selected_by[i];
            let Some(Some(slot)) = self.policies.get(p_index) else { continue };
            let policy = &slot.policy;
            let active = running && slot.is_active(now);
            // The snooze holds this policy's actions until its own cap ends it (spec.snooze.maxDuration).
            let over = policy.max_snoozes.is_some_and(|m| entry.snooze.count > m);
            let hold =
                if over { None } else { hold.and(entry.snooze.holds_policy_until(policy.max_snooze, now)) };
            let capped_now =
                snooze.hold.is_some() && hold.is_none() && !entry.snooze.released_policies.contains(&p_index);
            // The cap releases what the snooze held for this policy; one that never held anything (a 0s
            // cap, maxPerJob used up before any firing) leaves the rules as if there were no snooze.
            let capped_release =
                capped_now && entry.tracks.get(p_index).is_some_and(|ts| ts.iter().any(|t| t.snooze_held));
            // Why the condition does not hold, when it does not.
            let cleared_by = if !running {
                Resolution::JobFinished
            } else if !active {
                Resolution::WindowClosed
            } else {
                Resolution::ConditionCleared
            };
            entry.tracks_mut(p_index, policy.rules.len());
            claim_memories(&mut self.restored, entry, key, p_index, policy);
            // The exception holding each rule now, if any (none allocated while the job's namespace has none).
            let excepted: Vec<Option<Pause>> = match entry.data.as_deref() {
                Some(d) if self.exceptions.contains_key(&key.namespace) => (policy.rules.iter())
                    .map(|r| exceptions::applying(&self.exceptions, policy, r, key, &d.snapshot.labels, now))
                    .collect(),
                _ => Vec::new(),
            };
            // Rules whose firing an exception held that no longer applies: released after the rules ran
            // (`true`: its actions were waiting for their grace, which then acts on its own).
            let mut unexcepted: Vec<(usize, crate::policy::exception::ExceptionRef, bool)> = Vec::new();
            for (r, track) in entry.tracks[p_index].iter_mut().enumerate() {
                let now_by = excepted.get(r).and_then(Option::as_ref).and_then(|p| p.exception.as_ref());
                let graced = track.deferred.iter().any(Option::is_some);
                let Some(held_by) = track.excepted.as_deref() else {
                    // A firing whose actions wait anyway (for the snooze, a limit or its grace) when an
                    // exception comes: from now on the exception holds them too, and its end releases them.
                    if let Some(e) = now_by
                        && track.alert.state() == RuleState::Firing
                        && (track.snooze_held || track.held.is_some() || graced)
                    {
                        track.excepted = Some(Box::new(e.clone()));
                    }
                    continue;
                };
                if now_by == Some(held_by) {
                    continue;
                }
                match now_by {
                    // Another exception holds it now.
                    Some(other) => track.excepted = Some(Box::new(other.clone())),
                    None => unexcepted.extend(track.excepted.take().map(|e| (r, *e, graced))),
                }
            }
            // A suspended job teaches us nothing new: its rules keep their state (restored above after a
            // restart), so a job a person resumed on purpose is not suspended again the moment it restarts, only
            // after its rule resolves and re-fires.
            if phase == JobPhase::Suspended {
                // Nothing is released into a suspended job; its frozen rules stay as they are.
                for (r, held_by, _) in unexcepted {
                    let why = exceptions::why_ended(&self.exceptions, &held_by, now);
                    out.push(exception_ended(key, policy, r, held_by, why, false, now));
                }
                continue;
            }
            // Only policies with limits (or an engine-wide cap) pay for counting.
            let limits_apply = policy.limits != crate::policy::spec::LimitsSpec::default()
                || self.config.max_actions_per_hour.is_some();
            // The `cohort_*` functions read the job's cohort as of now, for this policy's conditions.
            if let Some(data) = entry.data.as_mut() {
                data.cohort = if policy.cohort_functions {
                    self.script_cohorts.facts(p_index, id).map(Box::new)
                } else {
                    None
                };
            }
            for (r_index, rule) in policy.rules.iter().enumerate() {
                let track = &mut entry.tracks[p_index][r_index];
                let verdict = if active {
                    condition(&self.scripts, policy, rule, track, &mut entry.data, now)
                } else {
                    Ok((None, None))
                };
                let track = &mut entry.tracks[p_index][r_index];
                // An exception's hold, else the snooze's (with both, the exception's: its end hands the hold
                // over to the snooze).
                let pause = match (excepted.get(r_index).cloned().flatten(), hold) {
                    (Some(e), _) => Some(e),
                    (None, Some(until)) => Some(Pause { until, exception: None }),
                    (None, None) => None,
                };
                match verdict {
                    Ok((reason, wake)) => {
                        track.last_error = None;
                        track.script_wake = wake;
                        let firings = track.firings;
                        let counted = limits_apply && limits::limited(&rule.actions);
                        // The limit a firing now would meet (a snoozed job's firing is held anyway).
                        let refusal = if counted && pause.is_none() {
                            self.limits.refusal(
                                p_index,
                                policy,
                                rule.mode,
                                self.config.max_actions_per_hour,
                                now,
                            )
                        } else {
                            None
                        };
                        let cx = RuleContext::new(key, policy, rule, now).with_data(entry.data.as_deref());
                        track.advance(&cx, reason, cleared_by, pause.as_ref(), refusal, out);
                        let fired = track.firings != firings;
                        // A rule that fired now acts (or not) on its own: no release below repeats it.
                        if fired {
                            fired_now.push((p_index, r_index));
                        }
                        // A firing the limit held waits while a snooze or an exception holds it too.
                        if counted && (pause.is_none() || fired) {
                            let engine_cap = self.config.max_actions_per_hour;
                            if limits::settle(&mut self.limits, track, p_index, &cx, fired, engine_cap) {
                                let reason = track.last_reason.clone();
                                track.issue(&cx, &reason, None, out);
                                limits::count_if_issued(&mut self.limits, track, p_index, rule, key, now);
                            }
                        }
                        // A grace that ended acts, unless the owner snoozed the job meanwhile (the snooze's
                        // end fires the rule again below, every action at once); a recovery drops it.
                        let may_act = pause.is_none() && snooze.ended.is_none() && !capped_release;
                        if track.alert.state() != RuleState::Firing {
                            track.snooze_held = false;
                            track.excepted = None;
                        }
                        match track.act_on_deferred(&cx, may_act, out) {
                            Deferral::Issued if counted => self.limits.redeem(p_index, key),
                            Deferral::Cancelled if counted => self.limits.cancel(p_index, key),
                            _ => {}
                        }
                    }
                    Err(message) => {
                        if track.last_error.as_deref() != Some(message.as_str()) {
                            out.push(Event::RuleError {
                                at: now,
                                job: key.clone(),
                                policy: policy.reference.clone(),
                                rule: rule.name.clone(),
                                message: message.clone(),
                            });
                            track.last_error = Some(message);
                        }
                    }
                }
            }
            if !unexcepted.is_empty() {
                // Held firings whose exception ended: those still firing act now, unless they fired in this
                // very evaluation, or the owner's snooze still holds the job (it takes the hold over).
                let mut due = Vec::new();
                for (r, held_by, graced) in unexcepted {
                    let why = exceptions::why_ended(&self.exceptions, &held_by, now);
                    let Some(track) = entry.tracks[p_index].get_mut(r) else { continue };
                    let firing = running
                        && track.alert.state() == RuleState::Firing
                        && !fired_now.contains(&(p_index, r))
                        && track.excepted.is_none();
                    if firing && hold.is_some() && !graced {
                        track.snooze_held = true;
                    }
                    // Actions waiting for their grace act when it ends (above, or at its timer): not again.
                    let released = firing && hold.is_none();
                    if released && !graced {
                        due.push((p_index, r));
                        // Released once: the snooze's end or cap below does not release it again.
                        fired_now.push((p_index, r));
                    }
                    out.push(exception_ended(key, policy, r, held_by, why, released, now));
                }
                let engine_cap = self.config.max_actions_per_hour;
                Releaser { policies: &self.policies, limits: &mut self.limits, engine_cap }
                    .release_firing(entry, key, due, None, now, out);
            }
            if capped_now {
                // This policy's cap ended the snooze for it: its rules still firing act now, once.
                entry.snooze.released_policies.push(p_index);
                let (cap, until) = match policy.max_snoozes.filter(|_| over) {
                    Some(max) => (SnoozeCap::MaxPerJob { max }, now),
                    None => {
                        (SnoozeCap::MaxDuration, entry.snooze.policy_end(policy.max_snooze).unwrap_or(now))
                    }
                };
                let due: Vec<(usize, usize)> = if running && capped_release {
                    (entry.tracks.get(p_index).into_iter().flatten().enumerate())
                        .filter(|(r, t)| {
                            t.alert.state() == RuleState::Firing
                                && !fired_now.contains(&(p_index, *r))
                                && t.excepted.is_none()
                        })
                        .map(|(r, _)| (p_index, r))
                        .collect()
                } else {
                    Vec::new()
                };
                out.push(Event::Snooze {
                    at: now,
                    job: key.clone(),
                    change: SnoozeChange::PolicyCapped {
                        policy: policy.reference.clone(),
                        cap,
                        until,
                        released: due.len(),
                    },
                });
                let engine_cap = self.config.max_actions_per_hour;
                Releaser { policies: &self.policies, limits: &mut self.limits, engine_cap }.release_firing(
                    entry,
                    key,
                    due,
                    Some(until),
                    now,
                    out,
                );
            }
        }
        if let Some((until, why)) = snooze.ended {
            // Every rule still firing acts now (a running job's: a suspended job's rules are frozen, a
            // finished job's resolved), except those that fired in this very evaluation.
            let mut due: Vec<(usize, usize)> = Vec::new();
            if running {
                // Policies whose own cap released them already are not released again.
                for &p in entry.selected_by.iter().filter(|p| !released_before.contains(p)) {
                    for (r, track) in entry.tracks.get(p).into_iter().flatten().enumerate() {
                        // One an exception holds stays held: the exception's end releases it.
                        if track.alert.state() == RuleState::Firing
                            && !fired_now.contains(&(p, r))
                            && track.excepted.is_none()
                        {
                            due.push((p, r));
                        }
                    }
                }
            }
            out.push(Event::Snooze {
                at: now,
                job: key.clone(),
                change: SnoozeChange::Ended { until, why, released: due.len() },
            });
            let engine_cap = self.config.max_actions_per_hour;
            Releaser { policies: &self.policies, limits: &mut self.limits, engine_cap }.release_firing(
                entry,
                key,
                due,
                Some(until),
                now,
                out,
            );
        }
        // Policies that no longer select the job (labels changed): their rules resolve.
        for p in 0..entry.tracks.len() {
            if entry.tracks[p].is_empty() || entry.selected_by.contains(&p) {
                continue;
            }
            let tracks = std::mem::take(&mut entry.tracks[p]);
            if let Some(Some(slot)) = self.policies.get(p) {
                for (r, track) in tracks.into_iter().enumerate() {
                    track.resolve(
                        &RuleContext::new(key, &slot.policy, &slot.policy.rules[r], now),
                        Resolution::NoLongerSelected,
                        out,
                    );
                }
            }
        }
        self.rearm(id, now);
    }
}

/// The report that the exception `held_by` no longer holds rule `r` of `policy` for `key`.
fn exception_ended(
    key: &JobKey,
    policy: &CompiledPolicy,
    r: usize,
    held_by: crate::policy::exception::ExceptionRef,
    why: ExceptionEnd,
    released: bool,
    now: Timestamp,
) -> Event {
    Event::ExceptionEnded {
        at: now,
        job: key.clone(),
        policy: policy.reference.clone(),
        rule: policy.rules.get(r).map(|x| x.name.clone()).unwrap_or_default(),
        exception: held_by,
        why,
        released,
    }
}

/// What releasing firings reads and changes beside the job: the policies, the limits' book, the engine's
/// hourly cap (borrowed apart from the jobs, which hold the job being evaluated).
struct Releaser<'a> {
    policies: &'a [Option<PolicySlot>],
    limits: &'a mut limits::LimitBook,
    engine_cap: Option<u32>,
}

impl Releaser<'_> {
    /// Fires again, now, the rules `due` (policy, rule) that were still firing when a snooze stopped holding
    /// them (`until`): each acts as a new firing, subject to the blast-radius limits.
    fn release_firing(
        &mut self,
        entry: &mut JobEntry,
        key: &JobKey,
        due: Vec<(usize, usize)>,
        snoozed_until: Option<Timestamp>,
        now: Timestamp,
        out: &mut Vec<Event>,
    ) {
        let Releaser { policies, limits: limit_book, engine_cap } = self;
        let engine_cap = *engine_cap;
        for (p, r) in due {
            let Some(Some(slot)) = policies.get(p) else { continue };
            let (Some(rule), Some(track)) =
                (slot.policy.rules.get(r), entry.tracks.get_mut(p).and_then(|t| t.get_mut(r)))
            else {
                continue;
            };
            let cx = RuleContext::new(key, &slot.policy, rule, now).with_data(entry.data.as_deref());
            let limits_apply =
                slot.policy.limits != crate::policy::spec::LimitsSpec::default() || engine_cap.is_some();
            if limits_apply && limits::limited(&rule.actions) {
                // A grace still running is overtaken by the release: its slot is given back first.
                limit_book.cancel(p, key);
                if let Some(h) = limit_book.refusal(p, &slot.policy, rule.mode, engine_cap, now) {
                    // A new firing (as a release is), held until the limit allows.
                    track.firings += 1;
                    track.held = Some(h);
                    track.deferred.clear();
                    out.push(limits::held_event(&cx, h));
                    continue;
                }
                track.release(&cx, snoozed_until, out);
                limits::count_if_issued(limit_book, track, p, rule, key, now);
                continue;
            }
            track.release(&cx, snoozed_until, out);
        }
    }
}
