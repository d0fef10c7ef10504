//! Lifecycle tests of the evaluator: pending → firing → resolved, `for`, `keepFiringFor`, `cooldown`,
//! timers that fire with no new sample, calendar windows, modes, selection changes and policy updates.

use std::collections::BTreeMap;

use super::*;
use crate::input::sample::{Metric, ProgressSample, SampleSource};
use crate::policy::compile::{compile, parse_documents};
use crate::testing::{Harness, at_min};

mod cohorts;
mod restarts;
mod timers;

/// The evaluator harness with one job, `ml/ft` (team ml, 8 GPUs), on a clock in minutes.
struct World {
    h: Harness,
    /// When the job last started running (moves on resume, as the TrainJob's Suspended condition does).
    running_since: Timestamp,
}

impl World {
    fn with_policy(yaml: &str) -> World {
        World { h: Harness::new(&[yaml]), running_since: at_min(0) }
    }

    fn job(&self) -> JobSnapshot {
        let mut s = JobSnapshot::new(JobKey::new("ml", "ft"));
        s.labels = BTreeMap::from([("team".to_string(), "ml".to_string())]);
        s.gpus = Some(8.0);
        s.running_since = Some(self.running_since);
        s
    }

    /// Runs timers up to `minute`.
    fn advance(&mut self, minute: i64) {
        self.h.advance(at_min(minute));
    }

    fn sample(&mut self, minute: i64, loss: f64, eta_minutes: Option<f64>) {
        self.advance(minute);
        let mut snap = self.job();
        let mut s = ProgressSample::empty(at_min(minute), SampleSource::TrainerStatus);
        s.metrics.push(Metric { name: "loss".into(), value: loss });
        s.eta_seconds = eta_minutes.map(|m| m * 60.0);
        s.progress_percent = Some(50.0);
        snap.sample = Some(s);
        self.h.ev.observe(snap, at_min(minute), &mut self.h.events);
    }

    fn phase(&mut self, minute: i64, phase: JobPhase) {
        self.advance(minute);
        if phase == JobPhase::Running {
            self.running_since = at_min(minute);
        }
        let mut snap = self.job();
        snap.phase = phase;
        self.h.ev.observe(snap, at_min(minute), &mut self.h.events);
    }

    /// `(minute, "rule kind")` for transitions and `(minute, "rule → action")` for intents, in order.
    fn log(&self) -> Vec<(i64, String)> {
        let m = |at: &Timestamp| (at.as_second() - at_min(0).as_second()) / 60;
        self.h
            .events
            .iter()
            .map(|e| match e {
                Event::Transition { at, rule, kind, .. } => (m(at), format!("{rule} {}", kind.as_str())),
                Event::Intent(i) => {
                    (m(&i.at), format!("{} → {} [{}]", i.rule, i.action.kind(), i.mode.as_str()))
                }
                Event::Suppressed { at, rule, action, .. } => (m(at), format!("{rule} ✗ {action}")),
                Event::RuleError { at, rule, message, .. } => (m(at), format!("{rule} error: {message}")),
                Event::Held { at, rule, actions, .. } => (m(at), format!("{rule} held {actions:?}")),
                Event::Limited { at, rule, limit, .. } => (m(at), format!("{rule} limited: {limit}")),
                Event::Deferred { at, rule, action, .. } => (m(at), format!("{rule} … {action}")),
                Event::Snooze { at, change, .. } => (m(at), format!("snooze {change:?}")),
                Event::ExceptionEnded { at, rule, why, .. } => {
                    (m(at), format!("{rule} exception ended {why:?}"))
                }
            })
            .collect()
    }
}

/// Policy `ml/p` (Enforce, $5 a GPU-hour) with `rules` and the `extra` spec lines (indented under `spec`).
fn policy(rules: &str, extra: &str) -> String {
    let extra: Vec<&str> = extra.lines().map(|l| l.strip_prefix("  ").unwrap_or(l)).collect();
    crate::testing::policy("p").spec("gpuHourCost: 5").spec(&extra.join("\n")).rules(rules).yaml()
}

fn log(entries: &[(i64, &str)]) -> Vec<(i64, String)> {
    entries.iter().map(|(m, s)| (*m, s.to_string())).collect()
}

#[test]
fn a_stall_fires_with_no_new_sample_arriving() {
    let mut w = World::with_policy(&policy(
        "    - {name: stalled, uses: stalled, with: {after: 30m}, actions: [{suspend: {}}]}\n",
        "",
    ));
    w.sample(0, 2.0, Some(600.0));
    w.sample(1, 1.9, Some(599.0));
    // Nothing arrives after minute 1: only timers run.
    w.advance(30);
    assert!(w.log().is_empty(), "{:?}", w.log());
    w.advance(32);
    assert_eq!(w.log(), log(&[(31, "stalled firing"), (31, "stalled → suspend [Enforce]")]));
    let Event::Intent(i) = &w.h.events[1] else { panic!() };
    assert_eq!(i.reason.summary, "no progress sample for 30m (limit 30m)");
    let s = i.savings.as_ref().expect("savings from the ETA: no active window");
    assert_eq!((s.basis, s.gpus), (SavingsBasis::EstimatedEnd, 8.0));
    // Estimated end: minute 1 + 599 minutes = minute 600; suspended at 31 → 569 min × 8 GPUs.
    assert!((s.gpu_hours - 569.0 / 60.0 * 8.0).abs() < 1e-9, "{}", s.gpu_hours);
    assert!((s.dollars.unwrap() - s.gpu_hours * 5.0).abs() < 1e-9);
}

#[test]
fn for_keeps_a_rule_pending_and_clearing_resets_it() {
    let rules =
        "    - {name: high, when: 'metric(\"loss\") > 1.0', for: 10m, actions: [{notify: {to: team}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.sample(5, 2.0, None);
    w.sample(8, 0.5, None); // clears before `for` elapses
    w.sample(9, 2.0, None);
    w.sample(15, 2.0, None);
    w.sample(19, 2.0, None);
    w.advance(25);
    assert_eq!(
        w.log(),
        log(&[
            (0, "high pending"),
            (8, "high cleared"),
            (9, "high pending"),
            (19, "high firing"),
            (19, "high → notify [Enforce]"),
        ])
    );
}

#[test]
fn keep_firing_for_bridges_a_flapping_condition() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0', keepFiringFor: 10m, actions: [{notify: {to: team}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.sample(2, 0.5, None); // false for 8 minutes: still firing, no new intent
    w.sample(10, 2.0, None);
    w.sample(12, 0.5, None); // false from 12 → resolves once 10 minutes have passed
    w.advance(30);
    assert_eq!(w.log(), log(&[(0, "high firing"), (0, "high → notify [Enforce]"), (22, "high resolved")]));
}

#[test]
fn cooldown_suppresses_a_repeat_of_the_same_action() {
    let rules =
        "    - {name: high, when: 'metric(\"loss\") > 1.0', cooldown: 1h, actions: [{notify: {to: team}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.sample(1, 0.5, None);
    w.sample(20, 2.0, None); // re-fires inside the cooldown
    w.sample(21, 0.5, None);
    w.sample(70, 2.0, None); // after the cooldown
    let log_ = w.log();
    assert_eq!(
        log_,
        log(&[
            (0, "high firing"),
            (0, "high → notify [Enforce]"),
            (1, "high resolved"),
            (20, "high firing"),
            (20, "high ✗ notify"),
            (21, "high resolved"),
            (70, "high firing"),
            (70, "high → notify [Enforce]"),
        ])
    );
}

#[test]
fn each_intent_is_issued_once_per_firing() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{notify: {to: team}}, {suspend: {}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    for m in 0..30 {
        w.sample(m, 2.0, None);
    }
    w.advance(120);
    let intents = w.h.events.iter().filter(|e| matches!(e, Event::Intent(_))).count();
    assert_eq!(intents, 2, "{:?}", w.log());
    let ids: Vec<&str> =
        w.h.events
            .iter()
            .filter_map(|e| if let Event::Intent(i) = e { Some(i.id.as_str()) } else { None })
            .collect();
    let first_seen = at_min(0).as_second();
    assert_eq!(
        ids,
        vec![
            format!("ProgressPolicy:ml:p:0:high:ml:ft:{first_seen}:1:0"),
            format!("ProgressPolicy:ml:p:0:high:ml:ft:{first_seen}:1:1"),
        ]
    );
}

#[test]
fn a_recreated_job_gets_new_intent_ids() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.h.ev.forget_job(&JobKey::new("ml", "ft"), at_min(1), &mut w.h.events);
    w.sample(2, 2.0, None);
    let ids: Vec<String> =
        w.h.events
            .iter()
            .filter_map(|e| if let Event::Intent(i) = e { Some(i.id.clone()) } else { None })
            .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn re_applying_an_unchanged_policy_changes_nothing() {
    let rules =
        "    - {name: high, when: 'metric(\"loss\") > 1.0', cooldown: 6h, actions: [{notify: {to: team}}]}\n";
    let yaml = policy(rules, "");
    let mut w = World::with_policy(&yaml);
    w.sample(0, 2.0, None);
    for minute in 1..5 {
        w.advance(minute);
        let docs = parse_documents(&yaml, "again").unwrap();
        let p = compile(&docs[0], w.h.ev.scripts()).unwrap();
        w.h.ev.upsert_policy(p, at_min(minute), &mut w.h.events);
        w.sample(minute, 2.0, None);
    }
    assert_eq!(w.log(), log(&[(0, "high firing"), (0, "high → notify [Enforce]")]));
}

#[test]
fn editing_a_rule_restarts_it_but_keeps_its_cooldown() {
    let v1 =
        "    - {name: high, when: 'metric(\"loss\") > 1.0', cooldown: 6h, actions: [{notify: {to: team}}]}\n";
    let v2 =
        "    - {name: high, when: 'metric(\"loss\") > 1.5', cooldown: 6h, actions: [{notify: {to: team}}]}\n";
    let mut w = World::with_policy(&policy(v1, ""));
    w.sample(0, 2.0, None);
    w.advance(10);
    let docs = parse_documents(&policy(v2, ""), "v2").unwrap();
    let p = compile(&docs[0], w.h.ev.scripts()).unwrap();
    w.h.ev.upsert_policy(p, at_min(10), &mut w.h.events);
    w.sample(11, 2.0, None);
    assert_eq!(
        w.log(),
        log(&[
            (0, "high firing"),
            (0, "high → notify [Enforce]"),
            (10, "high resolved"),
            (10, "high firing"),
            (10, "high ✗ notify")
        ])
    );
}

#[test]
fn time_suspended_counts_toward_neither_for_nor_patience() {
    let rules = "    - {name: flat, uses: plateau, with: {metric: loss, window: 20m}, for: 15m, actions: [{suspend: {}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    for m in 0..=25 {
        w.sample(m, 1.0, None);
    }
    assert_eq!(w.log(), log(&[(20, "flat pending")]));
    w.phase(26, JobPhase::Suspended); // preempted while pending
    w.phase(600, JobPhase::Running); // re-admitted ten hours later
    w.sample(601, 1.0, None);
    // A fresh window after the resume: nothing fires at once.
    assert_eq!(w.log(), log(&[(20, "flat pending"), (600, "flat cleared")]));
    for m in 602..=636 {
        w.sample(m, 1.0, None);
    }
    let l = w.log();
    assert_eq!(l[2], (621, "flat pending".to_string()), "{l:?}");
    assert_eq!(l[3], (636, "flat firing".to_string()), "{l:?}");
}

#[test]
fn a_hung_job_that_keeps_answering_polls_still_stalls() {
    // RHOAI polls the rank-0 pod every 30 s and stamps each answer; a hung pod repeats its last state.
    let rules = "    - {name: stalled, uses: stalled, with: {after: 30m}, actions: [{suspend: {}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 1.0, None);
    for half_minutes in 1..=70 {
        w.advance(half_minutes / 2);
        let mut snap = w.job();
        let mut s = ProgressSample::empty(
            Timestamp::from_second(at_min(0).as_second() + half_minutes * 30).unwrap(),
            SampleSource::Annotation,
        );
        s.metrics.push(Metric { name: "loss".into(), value: 1.0 });
        s.progress_percent = Some(50.0);
        snap.sample = Some(s);
        let now = Timestamp::from_second(at_min(0).as_second() + half_minutes * 30).unwrap();
        w.h.ev.observe(snap, now, &mut w.h.events);
    }
    assert_eq!(w.log(), log(&[(30, "stalled firing"), (30, "stalled → suspend [Enforce]")]));
}

#[test]
fn audit_mode_reports_what_it_would_do() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n    - {name: enforced, mode: Enforce, when: 'metric(\"loss\") > 1.5', actions: [{suspend: {}}]}\n";
    let yaml = policy(rules, "").replace("mode: Enforce\n  gpuHourCost", "mode: Audit\n  gpuHourCost");
    let mut w = World::with_policy(&yaml);
    w.sample(0, 2.0, None);
    assert_eq!(
        w.log(),
        log(&[
            (0, "high firing"),
            (0, "high → suspend [Audit]"),
            (0, "enforced firing"),
            (0, "enforced → suspend [Enforce]")
        ])
    );
}

#[test]
fn rules_resolve_when_the_active_window_closes_and_wake_up_when_it_opens() {
    // Fridays 18:00–20:00 UTC; at_min(0) is Friday 17:00 UTC.
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{notify: {to: team}}]}\n";
    let extra = "  activeWindows: [{start: \"0 18 * * FRI\", duration: 2h}]\n";
    let mut w = World::with_policy(&policy(rules, extra));
    w.sample(0, 2.0, None);
    assert!(w.log().is_empty(), "inactive before 18:00");
    // No sample at 18:00: the window opening alone evaluates the job.
    w.advance(60);
    assert_eq!(w.log(), log(&[(60, "high firing"), (60, "high → notify [Enforce]")]));
    w.advance(180);
    assert_eq!(w.log().last().unwrap(), &(180, "high resolved".to_string()));
}

#[test]
fn a_stall_inside_an_unattended_window_saves_until_the_window_ends() {
    let rules = "    - {name: stalled, when: 'stalled(\"30m\")', actions: [{suspend: {}}]}\n";
    let extra = "  activeWindows: [{start: \"0 17 * * FRI\", duration: 63h}]\n";
    let mut w = World::with_policy(&policy(rules, extra));
    w.sample(0, 2.0, Some(600.0));
    w.advance(120);
    let Some(Event::Intent(i)) = w.h.events.iter().find(|e| matches!(e, Event::Intent(_))) else {
        panic!("{:?}", w.log())
    };
    let s = i.savings.as_ref().unwrap();
    assert_eq!(s.basis, SavingsBasis::WindowEnd);
    assert_eq!(s.until, at_min(63 * 60));
    assert!((s.gpu_hours - (63.0 * 60.0 - 30.0) / 60.0 * 8.0).abs() < 1e-9);
}

#[test]
fn suspended_jobs_freeze_and_finished_jobs_resolve() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{notify: {to: team}}]}\n    - {name: stalled, uses: stalled, with: {after: 30m}}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.phase(5, JobPhase::Suspended);
    w.advance(300); // no stall while suspended, `high` stays firing
    w.phase(300, JobPhase::Running); // resumed by a person: not re-notified
    w.sample(301, 2.0, None);
    w.phase(310, JobPhase::Complete);
    assert_eq!(w.log(), log(&[(0, "high firing"), (0, "high → notify [Enforce]"), (310, "high resolved")]));
}

#[test]
fn a_label_change_that_deselects_a_job_resolves_its_rules() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0'}\n";
    let extra = "  selector: {matchLabels: {team: ml}}\n";
    let mut w = World::with_policy(&policy(rules, extra));
    w.sample(0, 2.0, None);
    let mut snap = w.job();
    snap.labels.insert("team".into(), "other".into());
    w.h.ev.observe(snap, at_min(1), &mut w.h.events);
    assert_eq!(w.log(), log(&[(0, "high firing"), (1, "high resolved")]));
    assert_eq!(w.h.ev.counts(&w.h.ev.policies().next().unwrap().reference.clone()).matched_jobs, 0);
}

#[test]
fn replacing_a_policy_resolves_the_old_rules_first() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0'}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    let docs =
        parse_documents(&policy("    - {name: higher, when: 'metric(\"loss\") > 5.0'}\n", ""), "v2").unwrap();
    let p = compile(&docs[0], w.h.ev.scripts()).unwrap();
    w.h.ev.upsert_policy(p, at_min(1), &mut w.h.events);
    w.sample(2, 2.0, None);
    assert_eq!(w.log(), log(&[(0, "high firing"), (1, "high resolved")]));
    assert_eq!(w.h.ev.policies().count(), 1);
}

#[test]
fn a_script_error_is_reported_once_and_leaves_other_rules_alone() {
    let rules = "    - {name: broken, when: 'stalled(label(\"bad\"))'}\n    - {name: high, when: 'metric(\"loss\") > 1.0'}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.sample(1, 2.0, None);
    let l = w.log();
    assert_eq!(l.len(), 2, "{l:?}");
    assert!(l[0].1.starts_with("broken error: rule \"broken\", line 1:"), "{l:?}");
    assert_eq!(l[1], (0, "high firing".to_string()));
}

#[test]
fn stateful_detectors_see_every_sample_and_duplicates_are_dropped() {
    let rules = "    - {name: flat, uses: plateau, with: {metric: loss, window: 3}}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.sample(1, 2.01, None);
    // The same report again (same lastUpdatedTime): not a new sample.
    w.sample(1, 2.01, None);
    w.sample(2, 2.02, None);
    assert!(w.log().is_empty(), "{:?}", w.log());
    w.sample(3, 2.03, None);
    assert_eq!(w.log(), log(&[(3, "flat firing")]));
    assert_eq!(w.h.ev.job(&JobKey::new("ml", "ft")).unwrap().series.duplicates, 1);
}

#[test]
fn forgetting_a_job_resolves_and_frees_it() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0'}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.h.ev.forget_job(&JobKey::new("ml", "ft"), at_min(1), &mut w.h.events);
    assert_eq!(w.log(), log(&[(0, "high firing"), (1, "high resolved")]));
    assert_eq!(w.h.ev.job_count(), 0);
}

/// Every resolution says why: the condition, the window, the job's end, its deletion, the selector.
#[test]
fn resolutions_carry_their_reason() {
    let why = |w: &World| -> Vec<Option<Resolution>> {
        w.h.events
            .iter()
            .filter_map(|e| match e {
                Event::Transition { kind: TransitionKind::Resolved, reason, .. } => Some(reason.resolution),
                _ => None,
            })
            .collect()
    };
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0'}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.sample(1, 0.5, None);
    assert_eq!(why(&w), [Some(Resolution::ConditionCleared)]);

    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.phase(1, JobPhase::Complete);
    assert_eq!(why(&w), [Some(Resolution::JobFinished)]);

    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.h.ev.forget_job(&JobKey::new("ml", "ft"), at_min(1), &mut w.h.events);
    assert_eq!(why(&w), [Some(Resolution::JobDeleted)]);

    let mut w = World::with_policy(&policy(rules, "  selector: {matchLabels: {team: ml}}\n"));
    w.sample(0, 2.0, None);
    let mut snap = w.job();
    snap.labels.insert("team".into(), "other".into());
    w.h.ev.observe(snap, at_min(1), &mut w.h.events);
    assert_eq!(why(&w), [Some(Resolution::NoLongerSelected)]);

    // Friday 17:00–19:00 UTC: at 19:00 the window closes while the loss is still high.
    let extra = "  activeWindows: [{start: \"0 17 * * FRI\", duration: 2h}]\n";
    let mut w = World::with_policy(&policy(rules, extra));
    w.sample(0, 2.0, None);
    w.sample(121, 2.0, None);
    assert_eq!(why(&w), [Some(Resolution::WindowClosed)]);
    assert_eq!(Resolution::WindowClosed.text(), "the policy's active window closed");
}
