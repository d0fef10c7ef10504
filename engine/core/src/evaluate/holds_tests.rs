//! What holds a stopping action back. Blast-radius limits ([`super::limits`]): a policy's
//! `maxActionsPerHour` and `maxConcurrentSuspended`, the engine-wide hourly cap (Enforce only), a held firing
//! that resolves, holds and counts across a restart, how a replay prints a hold. An action's `grace`
//! ([`super::lifecycle::issue`]): the warning with the snooze command, the action at the grace's end, a
//! recovery or a snooze meanwhile, a restart.

use std::collections::BTreeMap;

use super::*;
use crate::input::sample::{Metric, ProgressSample, SampleSource};
use crate::policy::compile::{compile, parse_documents};
use crate::testing::{Harness, at_min};

const HUGE: &str = "    - {name: huge, when: 'metric(\"loss\") > 9.0', actions: [{suspend: {}}]}\n";

fn policy(name: &str, mode: &str, limits: &str) -> String {
    policy_with(name, mode, limits, HUGE)
}

fn policy_with(name: &str, mode: &str, limits: &str, rules: &str) -> String {
    let limits: Vec<&str> = limits.lines().map(|l| l.strip_prefix("  ").unwrap_or(l)).collect();
    crate::testing::policy(name).mode(mode).spec(&limits.join("\n")).rules(rules).yaml()
}

/// Several jobs in namespace `ml`, judged on a clock (in minutes) the test moves.
struct Fleet {
    h: Harness,
    /// When each job last started running (a resume moves it, as the TrainJob's Suspended condition does).
    running_since: BTreeMap<String, Timestamp>,
    /// Each job's annotations (a snooze).
    annotations: BTreeMap<String, BTreeMap<String, String>>,
}

impl Fleet {
    fn new(policies: &[String], config: EngineConfig) -> Fleet {
        let h = Harness::with_config(config, policies);
        Fleet { h, running_since: BTreeMap::new(), annotations: BTreeMap::new() }
    }

    fn snapshot(&self, job: &str, phase: JobPhase) -> JobSnapshot {
        let mut s = JobSnapshot::new(JobKey::new("ml", job));
        s.gpus = Some(8.0);
        s.phase = phase;
        s.running_since = Some(self.running_since.get(job).copied().unwrap_or(at_min(0)));
        s.annotations = self.annotations.get(job).cloned().unwrap_or_default();
        s
    }

    fn advance(&mut self, minute: i64) {
        self.h.advance(at_min(minute));
    }

    fn report(&mut self, minute: i64, job: &str, loss: f64) {
        self.advance(minute);
        let mut snap = self.snapshot(job, JobPhase::Running);
        let mut s = ProgressSample::empty(at_min(minute), SampleSource::TrainerStatus);
        s.metrics.push(Metric { name: "loss".into(), value: loss });
        snap.sample = Some(s);
        self.h.ev.observe(snap, at_min(minute), &mut self.h.events);
    }

    fn phase(&mut self, minute: i64, job: &str, phase: JobPhase) {
        self.advance(minute);
        if phase == JobPhase::Running {
            self.running_since.insert(job.to_string(), at_min(minute));
        }
        let snap = self.snapshot(job, phase);
        self.h.ev.observe(snap, at_min(minute), &mut self.h.events);
    }

    /// `(seconds since at_min(0), job, policy)` of every suspend intent, in order.
    fn suspensions(&self) -> Vec<(i64, String, String)> {
        self.h
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Intent(i) if matches!(i.action, crate::policy::ActionSpec::Suspend(_)) => Some((
                    i.at.as_second() - at_min(0).as_second(),
                    i.job.name.clone(),
                    i.policy.name.clone(),
                )),
                _ => None,
            })
            .collect()
    }

    /// `(job, limit, retry)` of every hold, in order.
    fn holds(&self) -> Vec<(String, Limit, Option<Timestamp>)> {
        self.h
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Limited { job, limit, retry, .. } => Some((job.name.clone(), *limit, *retry)),
                _ => None,
            })
            .collect()
    }
}

fn acted(list: &[(i64, &str, &str)]) -> Vec<(i64, String, String)> {
    list.iter().map(|(s, j, p)| (*s, j.to_string(), p.to_string())).collect()
}

#[test]
fn max_actions_per_hour_holds_the_next_firing_until_a_slot_frees() {
    let limits = "  limits: {maxActionsPerHour: 2}\n";
    let mut f = Fleet::new(&[policy("p", "Enforce", limits)], EngineConfig::default());
    f.report(0, "a", 10.0);
    f.report(0, "b", 10.0);
    f.report(5, "c", 10.0);
    assert_eq!(f.suspensions(), acted(&[(0, "a", "p"), (0, "b", "p")]));
    assert_eq!(
        f.holds(),
        vec![("c".into(), Limit { kind: LimitKind::PolicyPerHour, max: 2 }, Some(at_min(60)))]
    );
    // c still fires and keeps reporting; nothing more is issued within the hour, and it is held once.
    for m in [15, 30, 45, 59] {
        f.report(m, "c", 10.0);
    }
    assert_eq!(f.suspensions().len(), 2);
    assert_eq!(f.holds().len(), 1);
    // The hour after a's and b's suspensions: c acts on that second, with no report arriving.
    f.advance(61);
    assert_eq!(f.suspensions(), acted(&[(0, "a", "p"), (0, "b", "p"), (3600, "c", "p")]));
    let Some(Event::Intent(i)) = f.h.events.iter().rev().find(|e| matches!(e, Event::Intent(_))) else {
        panic!()
    };
    assert!(i.id.ends_with(":1:0"), "the held firing's own id (firing 1, action 0): {}", i.id);
}

#[test]
fn a_held_firing_whose_rule_resolves_does_nothing() {
    let limits = "  limits: {maxActionsPerHour: 1}\n";
    let mut f = Fleet::new(&[policy("p", "Enforce", limits)], EngineConfig::default());
    f.report(0, "a", 10.0);
    f.report(1, "b", 10.0);
    assert_eq!(f.holds().len(), 1);
    f.report(20, "b", 1.0); // b recovers while held
    f.advance(120);
    assert_eq!(f.suspensions(), acted(&[(0, "a", "p")]));
    let memories = f.h.ev.memories(&f.h.ev.policies().next().unwrap().reference.clone(), at_min(120));
    assert!(memories.iter().all(|m| m.held.is_none()), "{memories:?}");
}

#[test]
fn max_concurrent_suspended_waits_for_a_suspended_job_to_run_again() {
    let limits = "  limits: {maxConcurrentSuspended: 1}\n";
    let mut f = Fleet::new(&[policy("p", "Enforce", limits)], EngineConfig::default());
    f.report(0, "a", 10.0);
    f.report(0, "b", 10.0);
    assert_eq!(f.suspensions(), acted(&[(0, "a", "p")]));
    assert_eq!(f.holds(), vec![("b".into(), Limit { kind: LimitKind::PolicyConcurrent, max: 1 }, None)]);
    // a is suspended (the Trainer reports it so); a report of a's from before it stopped does not free it.
    f.phase(1, "a", JobPhase::Suspended);
    f.advance(20);
    assert_eq!(f.suspensions().len(), 1);
    // Someone resumes a: b's next evaluation (its hold wakes it every interval, 30 s) takes the slot.
    f.phase(30, "a", JobPhase::Running);
    f.advance(31);
    assert_eq!(f.suspensions(), acted(&[(0, "a", "p"), (1830, "b", "p")]));
}

#[test]
fn a_finished_or_deleted_job_frees_its_slot() {
    let limits = "  limits: {maxConcurrentSuspended: 1}\n";
    let mut f = Fleet::new(&[policy("p", "Enforce", limits)], EngineConfig::default());
    f.report(0, "a", 10.0);
    f.report(0, "b", 10.0);
    f.report(0, "c", 10.0);
    f.phase(1, "a", JobPhase::Suspended);
    f.phase(10, "a", JobPhase::Failed);
    f.report(11, "b", 10.0);
    f.phase(12, "b", JobPhase::Suspended);
    let mut out = Vec::new();
    f.h.ev.forget_job(&JobKey::new("ml", "b"), at_min(20), &mut out);
    f.report(21, "c", 10.0);
    let who: Vec<String> = f.suspensions().into_iter().map(|(_, j, _)| j).collect();
    assert_eq!(who, ["a", "b", "c"]);
}

#[test]
fn the_engine_wide_cap_counts_and_holds_enforce_policies_only() {
    let config = EngineConfig { max_actions_per_hour: Some(1), ..EngineConfig::default() };
    let audit = policy("watch", "Audit", "");
    let enforce = policy("guard", "Enforce", "");
    let mut f = Fleet::new(&[audit, enforce], config);
    f.report(0, "a", 10.0);
    f.report(1, "b", 10.0);
    // Audit would suspend both (not counted, not held); Enforce suspends a, and b waits for the hour.
    let by = |p: &str| f.suspensions().into_iter().filter(|s| s.2 == p).map(|s| s.1).collect::<Vec<_>>();
    assert_eq!(by("watch"), ["a", "b"]);
    assert_eq!(by("guard"), ["a"]);
    assert_eq!(
        f.holds(),
        vec![("b".into(), Limit { kind: LimitKind::EnginePerHour, max: 1 }, Some(at_min(60)))]
    );
}

#[test]
fn a_hold_and_the_hours_count_survive_a_restart() {
    let yaml = policy("p", "Enforce", "  limits: {maxActionsPerHour: 1}\n");
    let mut before = Fleet::new(std::slice::from_ref(&yaml), EngineConfig::default());
    before.report(0, "a", 10.0);
    before.report(5, "b", 10.0);
    let reference = before.h.ev.policies().next().unwrap().reference.clone();
    let memories = before.h.ev.memories(&reference, at_min(10));
    let b = memories.iter().find(|m| m.job == "ml/b").expect("b's memory");
    assert_eq!(
        (b.state, b.held),
        (RuleState::Firing, Some(Limit { kind: LimitKind::PolicyPerHour, max: 1 }))
    );

    // A new evaluator (a restarted controller) gets the memories back before seeing the jobs.
    let mut after = Fleet::new(&[yaml], EngineConfig::default());
    after.h.ev.restore(&reference, memories);
    // b is listed first: the hour's count was rebuilt when the memories were given back, not when a's
    // memory is claimed.
    after.report(10, "b", 10.0);
    after.phase(10, "a", JobPhase::Suspended);
    assert!(after.suspensions().is_empty(), "a's suspension still counts within the hour");
    after.report(40, "b", 10.0);
    after.advance(61);
    assert_eq!(after.suspensions(), acted(&[(3600, "b", "p")]));
    let Some(Event::Intent(i)) = after.h.events.iter().find(|e| matches!(e, Event::Intent(_))) else {
        panic!()
    };
    assert!(i.id.ends_with(":1:0"), "the id the held firing had before the restart: {}", i.id);
}

#[test]
fn the_replay_says_which_limit_holds_what_and_until_when() {
    let limits = "  limits: {maxActionsPerHour: 1}\n";
    let mut f = Fleet::new(&[policy("p", "Enforce", limits)], EngineConfig::default());
    f.report(0, "a", 10.0);
    f.report(5, "b", 10.0);
    let held = f.h.events.iter().find(|e| matches!(e, Event::Limited { .. })).unwrap();
    let line = crate::replay::render_event(held, &jiff::tz::TimeZone::UTC);
    assert_eq!(
        line,
        "Fri 2026-11-27 17:05:00 +00:00  ml/b  huge                       ✗ suspend held: limit 1/h reached \
         (spec.limits.maxActionsPerHour); a slot frees at Fri 2026-11-27 18:00:00 +00:00; done then if the rule \
         still fires\n"
    );
    let json = crate::replay::event_json(held);
    assert_eq!(json["state"], "held");
    assert_eq!(json["limit"], serde_json::json!({"kind": "policyPerHour", "max": 1}));
}

#[test]
fn limits_must_allow_at_least_one_action() {
    let yaml = policy("p", "Enforce", "  limits: {maxActionsPerHour: 0, maxConcurrentSuspended: 3}\n");
    let doc = &parse_documents(&yaml, "limits.yaml").unwrap()[0];
    let err = compile(doc, &crate::judge::script::ScriptEngine::default()).unwrap_err().to_string();
    assert!(err.contains("spec.limits.maxActionsPerHour: must be from 1 to 100000, got 0"), "{err}");
}

const WARNED: &str = "    - {name: huge, when: 'metric(\"loss\") > 9.0', actions: [{notify: {to: team}}, {suspend: {grace: 30m}}]}\n";

/// `(minute, kind)` of every intent, in order.
fn intents(f: &Fleet) -> Vec<(i64, String)> {
    f.h.events
        .iter()
        .filter_map(|e| match e {
            Event::Intent(i) => {
                Some(((i.at.as_second() - at_min(0).as_second()) / 60, i.action.kind().as_str().to_string()))
            }
            _ => None,
        })
        .collect()
}

fn kinds(list: &[(i64, &str)]) -> Vec<(i64, String)> {
    list.iter().map(|(m, k)| (*m, k.to_string())).collect()
}

#[test]
fn a_grace_warns_at_once_with_the_snooze_command_and_suspends_when_it_ends() {
    let mut f = Fleet::new(&[policy_with("p", "Enforce", "", WARNED)], EngineConfig::default());
    f.report(0, "a", 10.0);
    assert_eq!(intents(&f), kinds(&[(0, "notify")]));
    let Some(Event::Intent(notify)) = f.h.events.iter().find(|e| matches!(e, Event::Intent(_))) else {
        panic!()
    };
    assert!(
        notify.reason.summary.ends_with(
            "; suspend at 2026-11-27T17:30:00Z (grace 30m) unless the rule stops firing or the job is snoozed: \
             kubectl trainwarden snooze a -n ml 4h"
        ),
        "{}",
        notify.reason.summary
    );
    assert!(f.h.events.iter().any(|e| matches!(e, Event::Deferred { until, .. } if *until == at_min(30))));
    for m in [10, 20, 29] {
        f.report(m, "a", 10.0);
    }
    assert_eq!(intents(&f).len(), 1, "nothing more during the grace");
    // The grace ends on its second, with no report arriving.
    f.advance(31);
    assert_eq!(intents(&f), kinds(&[(0, "notify"), (30, "suspend")]));
    let Some(Event::Intent(suspend)) = f.h.events.iter().rev().find(|e| matches!(e, Event::Intent(_))) else {
        panic!()
    };
    assert!(suspend.id.ends_with(":1:1"), "the firing's id for action 1: {}", suspend.id);
    assert!(!suspend.reason.summary.contains("kubectl trainwarden snooze"), "{}", suspend.reason.summary);
    let line = crate::replay::render_event(
        f.h.events.iter().find(|e| matches!(e, Event::Deferred { .. })).unwrap(),
        &jiff::tz::TimeZone::UTC,
    );
    assert!(line.contains("… suspend waits for its grace, until Fri 2026-11-27 17:30:00 +00:00"), "{line}");
}

#[test]
fn a_job_that_recovers_during_its_grace_is_not_suspended() {
    let mut f = Fleet::new(&[policy_with("p", "Enforce", "", WARNED)], EngineConfig::default());
    f.report(0, "a", 10.0);
    f.report(10, "a", 1.0);
    f.advance(60);
    f.report(61, "a", 1.0);
    assert_eq!(intents(&f), kinds(&[(0, "notify")]));
}

#[test]
fn a_job_snoozed_during_its_grace_acts_when_the_snooze_ends_if_its_rule_still_fires() {
    let mut f = Fleet::new(&[policy_with("p", "Enforce", "", WARNED)], EngineConfig::default());
    f.report(0, "a", 10.0);
    f.annotations
        .insert("a".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(60).to_string())]));
    f.report(10, "a", 10.0);
    f.advance(59);
    assert_eq!(intents(&f), kinds(&[(0, "notify")]), "nothing while snoozed, the grace's end included");
    f.advance(61);
    // The snooze's end fires the rule again: every action at once (the owner had the warning).
    assert_eq!(intents(&f), kinds(&[(0, "notify"), (60, "notify"), (60, "suspend")]));
}

#[test]
fn a_grace_survives_a_restart() {
    let yaml = policy_with("p", "Enforce", "", WARNED);
    let mut before = Fleet::new(std::slice::from_ref(&yaml), EngineConfig::default());
    before.report(0, "a", 10.0);
    let reference = before.h.ev.policies().next().unwrap().reference.clone();
    let memories = before.h.ev.memories(&reference, at_min(5));
    assert_eq!(memories[0].deferred, vec![None, Some(at_min(30))]);
    let mut after = Fleet::new(&[yaml], EngineConfig::default());
    after.h.ev.restore(&reference, memories);
    after.report(10, "a", 10.0);
    after.advance(31);
    assert_eq!(intents(&after), kinds(&[(30, "suspend")]), "no second warning, the suspension on time");
}

#[test]
fn a_grace_is_a_positive_duration_of_at_most_a_week() {
    for (grace, want) in [
        ("0s", "spec.rules[0].actions[0].suspend.grace: must be longer than 0s"),
        ("8d", "spec.rules[0].actions[0].suspend.grace: must be at most 7d, got 8d"),
        ("soon", "spec.rules[0].actions[0].suspend.grace: invalid duration"),
    ] {
        let rules = format!("    - {{name: r, when: 'true', actions: [{{suspend: {{grace: {grace}}}}}]}}\n");
        let yaml = policy_with("p", "Enforce", "", &rules);
        let doc = &parse_documents(&yaml, "grace.yaml").unwrap()[0];
        let err = compile(doc, &crate::judge::script::ScriptEngine::default()).unwrap_err().to_string();
        assert!(err.contains(want), "{grace}: {err}");
    }
}

/// Two policies on one snoozed job: `capped` lets a snooze hold it for 1h (`spec.snooze.maxDuration`),
/// `open` takes the engine's cap. At 1h `capped`'s rule acts although the job stays snoozed for `open`,
/// which acts when the snooze ends; neither acts twice.
#[test]
fn a_policys_snooze_cap_releases_its_rules_while_the_job_stays_snoozed_for_others() {
    let capped = policy("capped", "Enforce", "  snooze: {maxDuration: 1h}\n");
    let open = policy("open", "Enforce", "");
    let mut f = Fleet::new(&[capped, open], EngineConfig::default());
    f.annotations
        .insert("a".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(240).to_string())]));
    f.report(0, "a", 1.0);
    f.report(5, "a", 10.0);
    let held: Vec<(String, Timestamp)> =
        f.h.events
            .iter()
            .filter_map(|e| match e {
                Event::Held { policy, until, .. } => Some((policy.name.clone(), *until)),
                _ => None,
            })
            .collect();
    assert_eq!(held, vec![("capped".to_string(), at_min(60)), ("open".to_string(), at_min(240))]);
    let job = JobKey::new("ml", "a");
    let reference = |f: &Fleet, name: &str| {
        f.h.ev.policies().find(|p| p.reference.name == name).unwrap().reference.clone()
    };
    let (capped, open) = (reference(&f, "capped"), reference(&f, "open"));
    assert_eq!(f.h.ev.snoozed_until(&job, &capped), Some(at_min(60)));
    assert_eq!(f.h.ev.snoozed_until(&job, &open), Some(at_min(240)));
    assert!(f.suspensions().is_empty());
    // At 1h, on the second, with no report: capped acts, open still waits.
    f.advance(61);
    assert_eq!(f.suspensions(), acted(&[(3600, "a", "capped")]));
    assert!(f.h.events.iter().any(|e| matches!(e,
        Event::Snooze { change: SnoozeChange::PolicyCapped { policy, until, released: 1, cap: SnoozeCap::MaxDuration }, .. }
            if policy.name == "capped" && *until == at_min(60))));
    assert_eq!(f.h.ev.snoozed_until(&job, &capped), None);
    assert_eq!(f.h.ev.snoozed_until(&job, &open), Some(at_min(240)));
    f.report(120, "a", 10.0);
    f.advance(241);
    assert_eq!(f.suspensions(), acted(&[(3600, "a", "capped"), (14400, "a", "open")]));
}

#[test]
fn a_zero_snooze_cap_means_the_policy_is_never_snoozed() {
    let mut f =
        Fleet::new(&[policy("strict", "Enforce", "  snooze: {maxDuration: 0s}\n")], EngineConfig::default());
    f.annotations
        .insert("a".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(240).to_string())]));
    f.report(0, "a", 1.0);
    f.report(5, "a", 10.0);
    assert_eq!(f.suspensions(), acted(&[(300, "a", "strict")]));
    assert!(!f.h.events.iter().any(|e| matches!(e, Event::Held { .. })));
}

#[test]
fn a_snooze_cap_is_a_duration() {
    let yaml = policy("p", "Enforce", "  snooze: {maxDuration: forever}\n");
    let doc = &parse_documents(&yaml, "snooze.yaml").unwrap()[0];
    let err = compile(doc, &crate::judge::script::ScriptEngine::default()).unwrap_err().to_string();
    assert!(err.contains("spec.snooze.maxDuration: invalid duration"), "{err}");
}

/// `maxPerJob: 1`: the first snooze holds the policy; a second value (the owner snoozes again) does not, and
/// the rule still firing acts at once.
#[test]
fn a_job_snoozed_more_often_than_max_per_job_is_not_held_by_that_policy() {
    let yaml = policy("p", "Enforce", "  snooze: {maxPerJob: 1}\n");
    let mut f = Fleet::new(std::slice::from_ref(&yaml), EngineConfig::default());
    f.annotations
        .insert("a".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(60).to_string())]));
    f.report(0, "a", 10.0);
    assert!(f.suspensions().is_empty(), "the first snooze holds");
    f.annotations
        .insert("a".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(240).to_string())]));
    f.report(10, "a", 10.0);
    assert_eq!(f.suspensions(), acted(&[(600, "a", "p")]), "the second does not");
    assert!(f.h.events.iter().any(|e| matches!(
        e,
        Event::Snooze {
            change: SnoozeChange::PolicyCapped { cap: SnoozeCap::MaxPerJob { max: 1 }, released: 1, .. },
            ..
        }
    )));
}

/// A grace and an hourly limit together: the waiting suspension holds its slot; a firing released by a
/// snooze's end while the hour is full is held (its grace dropped) and nothing goes out before the limit
/// allows.
#[test]
fn a_snooze_release_that_meets_a_full_hour_is_held_and_its_grace_does_not_fire() {
    let yaml = policy_with("p", "Enforce", "  limits: {maxActionsPerHour: 1}\n", WARNED);
    let mut f = Fleet::new(&[yaml], EngineConfig::default());
    f.report(0, "x", 10.0); // warned, suspension due at 30, the hour's slot reserved
    f.annotations
        .insert("x".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(20).to_string())]));
    f.report(5, "x", 10.0);
    f.report(6, "y", 10.0); // the slot is x's: y is held
    assert_eq!(f.holds().len(), 1);
    f.report(10, "x", 10.0);
    f.advance(21); // x's snooze ends: its reservation is given back, y's hold and x's release compete
    f.advance(200);
    let all = f.suspensions();
    assert_eq!(all.len(), 2, "each job suspended once: {all:?}");
    // Whoever goes first, the second comes at least an hour after the first.
    assert!(all[1].0 - all[0].0 >= 3600, "{all:?}");
}

#[test]
fn a_policy_that_allows_no_snooze_keeps_its_grace_when_the_job_is_snoozed() {
    let yaml = policy_with("p", "Enforce", "  snooze: {maxDuration: 0s}\n", WARNED);
    let mut f = Fleet::new(&[yaml], EngineConfig::default());
    f.report(0, "a", 10.0);
    let Some(Event::Intent(notify)) = f.h.events.iter().find(|e| matches!(e, Event::Intent(_))) else {
        panic!()
    };
    assert!(notify.reason.summary.ends_with("unless the rule stops firing (this policy allows no snooze)"));
    f.annotations
        .insert("a".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(240).to_string())]));
    f.report(5, "a", 10.0);
    f.advance(31);
    assert_eq!(intents(&f), kinds(&[(0, "notify"), (30, "suspend")]), "the grace ends as announced, once");
}

#[test]
fn a_job_that_recovers_during_its_grace_gives_its_slot_back() {
    let yaml = policy_with("p", "Enforce", "  limits: {maxConcurrentSuspended: 1}\n", WARNED);
    let mut f = Fleet::new(&[yaml], EngineConfig::default());
    f.report(0, "a", 10.0);
    f.report(10, "a", 1.0); // recovers: no suspension, the slot is free again
    f.report(20, "b", 10.0);
    f.advance(60);
    assert_eq!(f.suspensions(), acted(&[(3000, "b", "p")]));
    assert!(f.holds().is_empty());
}

#[test]
fn the_snooze_count_survives_a_restart_in_the_history_checkpoint() {
    let yaml = policy("p", "Enforce", "  snooze: {maxPerJob: 1}\n");
    let mut before = Fleet::new(std::slice::from_ref(&yaml), EngineConfig::default());
    before
        .annotations
        .insert("a".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(30).to_string())]));
    before.report(0, "a", 1.0);
    let key = JobKey::new("ml", "a");
    let checkpoint = before.h.ev.checkpoint(&key, "uid-a", at_min(1)).expect("a checkpoint");
    let mut after = Fleet::new(&[yaml], EngineConfig::default());
    after.h.ev.restore_history(&key, &checkpoint.text, "uid-a", at_min(40)).expect("restored");
    // A second snooze after the restart is over maxPerJob: the policy acts at once.
    after
        .annotations
        .insert("a".into(), BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(240).to_string())]));
    after.report(40, "a", 10.0);
    assert_eq!(after.suspensions(), acted(&[(2400, "a", "p")]));
}

/// A firing a snooze held is still released by its policy's cap after a restart: the memory keeps that the
/// snooze held it.
#[test]
fn a_policys_snooze_cap_releases_a_held_firing_after_a_restart() {
    let yaml = policy("capped", "Enforce", "  snooze: {maxDuration: 1h}\n");
    let mut before = Fleet::new(std::slice::from_ref(&yaml), EngineConfig::default());
    let snooze = BTreeMap::from([(SNOOZE_ANNOTATION.to_string(), at_min(240).to_string())]);
    before.annotations.insert("a".into(), snooze.clone());
    before.report(0, "a", 1.0);
    before.report(5, "a", 10.0);
    assert!(before.suspensions().is_empty(), "held by the snooze");
    let key = JobKey::new("ml", "a");
    let reference = before.h.ev.policies().next().unwrap().reference.clone();
    let memories = before.h.ev.memories(&reference, at_min(10));
    assert!(memories.iter().any(|m| m.snooze_held), "{memories:?}");
    let checkpoint = before
        .h
        .ev
        .checkpoint(&key, "uid-a", at_min(10))
        .expect("a checkpoint (the snooze's first-seen time)");

    let mut after = Fleet::new(&[yaml], EngineConfig::default());
    after.h.ev.restore(&reference, memories);
    after.h.ev.restore_history(&key, &checkpoint.text, "uid-a", at_min(20)).expect("restored");
    after.annotations.insert("a".into(), snooze);
    after.report(20, "a", 10.0);
    after.advance(61);
    assert_eq!(
        after.suspensions(),
        acted(&[(3600, "a", "capped")]),
        "released at the cap, not at the snooze's end"
    );
}
