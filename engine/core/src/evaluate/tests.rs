//! Lifecycle tests of the evaluator: pending → firing → resolved, `for`, `keepFiringFor`, `cooldown`,
//! timers that fire with no new sample, calendar windows, modes, selection changes and policy updates.

use std::collections::BTreeMap;

use super::*;
use crate::input::sample::{Metric, ProgressSample, SampleSource};
use crate::policy::compile::{compile, parse_documents};
use crate::testing::{Harness, at_min};

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

/// Ticks exactly at every timer up to `until` and returns the times ticked (seconds after at_min(0)).
fn tick_times(w: &mut World, until: Timestamp) -> Vec<i64> {
    let mut times = Vec::new();
    while let Some(next) = w.h.ev.next_tick() {
        if next > until {
            break;
        }
        w.h.ev.tick(next, &mut w.h.events);
        times.push(next.as_second() - at_min(0).as_second());
    }
    times
}

#[test]
fn time_driven_rules_fire_at_their_deadline_not_at_the_next_interval() {
    // A stall detector, a stall script and a `for`: all three must fire on the second they are due, with
    // the 30s evaluation interval only as a backstop.
    let rules = "    - {name: stall-detector, uses: stalled, with: {after: 10m}, actions: [{suspend: {}}]}\n\
                 \x20   - {name: stall-script, when: 'stalled(\"10m\")', actions: [{event: {}}]}\n\
                 \x20   - {name: high-for, when: 'metric(\"loss\") > 1.0', for: 7m, actions: [{annotate: {key: x, value: \"v1\"}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    let at = |s: i64| Timestamp::from_second(at_min(0).as_second() + s).unwrap();
    let mut snap = w.job();
    let mut sample = ProgressSample::empty(at(17), SampleSource::TrainerStatus);
    sample.metrics.push(Metric { name: "loss".into(), value: 2.0 });
    snap.sample = Some(sample);
    w.h.ev.observe(snap, at(17), &mut w.h.events);
    tick_times(&mut w, at(17 + 600 + 5));
    let fired: Vec<(i64, String)> =
        w.h.events
            .iter()
            .filter_map(|e| match e {
                Event::Transition { at, rule, kind: TransitionKind::Firing, .. } => {
                    Some((at.as_second() - at_min(0).as_second(), rule.clone()))
                }
                _ => None,
            })
            .collect();
    assert_eq!(
        fired,
        vec![
            (17 + 420, "high-for".to_string()),
            (17 + 600, "stall-detector".to_string()),
            (17 + 600, "stall-script".to_string())
        ]
    );
}

#[test]
fn the_next_tick_is_the_earliest_timer() {
    let rules = "    - {name: stall, uses: stalled, with: {after: 10m}, actions: [{suspend: {}}]}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    w.sample(0, 2.0, None);
    w.h.ev.tick(at_min(0), &mut w.h.events);
    // Cadence: at_min(0) + 30s; stall: at_min(10). The cadence comes first...
    assert_eq!(w.h.ev.next_tick(), Some(Timestamp::from_second(at_min(0).as_second() + 30).unwrap()));
    // ...and a new sample moves the stall deadline with it.
    w.sample(3, 1.9, None);
    let ticks = tick_times(&mut w, at_min(14));
    assert!(ticks.contains(&(13 * 60)), "{ticks:?}");
    assert_eq!(w.log(), log(&[(13, "stall firing"), (13, "stall → suspend [Enforce]")]));
}

/// A 30-minute stall limit and a 7-minute `for` on a loss above 1: the timers the timer tests move (later
/// with each report, earlier when the `for` starts).
const STALL_AND_HIGH_LOSS: &str = "    - {name: stall, uses: stalled, with: {after: 30m}}\n\
                                   \x20   - {name: high, when: 'metric(\"loss\") > 1.0', for: 7m}\n";

/// Job `name` in namespace `ml` reports `loss` at `second` seconds past at_min(0), at step `second`.
fn report_loss(w: &mut World, name: &str, second: i64, loss: f64) {
    let at = Timestamp::from_second(at_min(0).as_second() + second).unwrap();
    let mut snap = w.job();
    snap.key = JobKey::new("ml", name);
    let mut sample = ProgressSample::empty(at, SampleSource::TrainerStatus);
    sample.metrics.push(Metric { name: "loss".into(), value: loss });
    sample.current_step = Some(second as f64);
    snap.sample = Some(sample);
    w.h.ev.observe(snap, at, &mut w.h.events);
}

/// The timer queues keep stale entries when timers move; whatever the moves (later with each sample, earlier
/// when a `for` starts, back when it clears, gone with the job), the earlier of their fronts is the earliest
/// live timer and they stay within twice the jobs plus 64 entries.
#[test]
fn the_timers_stay_exact_and_bounded() {
    let mut w = World::with_policy(&policy(STALL_AND_HIGH_LOSS, ""));
    let mut rng = crate::testing::rng::Rng(0x7133_4EA9);
    let mut now = at_min(0);
    let (mut moved_earlier, mut forgotten, mut steps_with_heap) = (0, 0, 0);
    for step in 0..20_000 {
        now = Timestamp::from_second(now.as_second() + rng.below(20) as i64).unwrap();
        while let Some(next) = w.h.ev.next_tick().filter(|next| *next <= now) {
            w.h.ev.tick(next, &mut w.h.events);
        }
        let key = JobKey::new("ml", format!("job-{}", rng.below(40)));
        if rng.below(50) == 0 {
            w.h.ev.forget_job(&key, now, &mut w.h.events);
            forgotten += 1;
        } else {
            let before = w.h.ev.jobs.get(&key).and_then(|j| j.wake);
            let mut snap = w.job();
            snap.key = key.clone();
            let mut sample = ProgressSample::empty(now, SampleSource::TrainerStatus);
            sample.metrics.push(Metric { name: "loss".into(), value: rng.below(3) as f64 * 0.6 });
            sample.current_step = Some(step as f64);
            snap.sample = Some(sample);
            w.h.ev.observe(snap, now, &mut w.h.events);
            let after = w.h.ev.jobs.get(&key).and_then(|j| j.wake);
            moved_earlier += usize::from(matches!((before, after), (Some(b), Some(a)) if a < b));
        }
        let earliest = w.h.ev.jobs.values().filter_map(|j| j.wake).min();
        assert_eq!(w.h.ev.wakes.first(), earliest, "step {step}");
        steps_with_heap += usize::from(w.h.ev.wakes.heap_len() > 0);
        if step % 100 == 0 {
            for (key, job) in w.h.ev.jobs.iter() {
                let id = w.h.ev.jobs.id(key).expect("listed");
                assert!(
                    job.wake.is_none_or(|at| w.h.ev.wakes.contains(at, id)),
                    "step {step}: {key}'s timer"
                );
            }
        }
        assert!(w.h.ev.wakes.len() <= 2 * w.h.ev.job_count() + 64, "step {step}: {}", w.h.ev.wakes.len());
    }
    assert!(
        moved_earlier > 1_000 && forgotten > 100 && steps_with_heap > 1_000,
        "{moved_earlier} moves earlier, {forgotten} jobs forgotten, {steps_with_heap} steps with the heap in use"
    );
}

/// Stale entries behind a live timer that does not come due (a `for` of one job while the others' stall
/// deadlines move on with every report) never reach the front; they are dropped all at once instead.
#[test]
fn stale_timers_behind_a_live_one_are_dropped() {
    let mut w = World::with_policy(&policy(STALL_AND_HIGH_LOSS, ""));
    // The anchor's `for` runs out at 7m; the others report every second for six minutes.
    report_loss(&mut w, "anchor", 0, 2.0);
    let mut most = 0;
    for second in 1..360 {
        for j in 0..20 {
            report_loss(&mut w, &format!("job-{j}"), second, 0.5);
        }
        most = most.max(w.h.ev.wakes.len());
    }
    assert_eq!(
        w.h.ev.next_tick().map(|n| n.as_second() - at_min(0).as_second()),
        Some(30),
        "the cadence first"
    );
    assert_eq!(w.h.ev.wakes.first(), Some(at_min(7)), "then the anchor's `for`");
    assert!(most <= 2 * 21 + 64, "{most} entries for 21 jobs");
}

/// Jobs reporting in turn move their stall deadlines to the latest timer of all: those entries queue in
/// time order, each report's stale one is the queue's front, and nothing goes into the heap. A `for` that
/// starts is earlier than the queue's last entry: it goes into the heap, and the earliest timer is still
/// the first of both.
#[test]
fn reports_in_turn_queue_their_timers_in_order() {
    let mut w = World::with_policy(&policy(STALL_AND_HIGH_LOSS, ""));
    for round in 0..100 {
        for j in 0..10 {
            report_loss(&mut w, &format!("job-{j}"), round * 30 + j, 0.5);
        }
        assert_eq!(w.h.ev.wakes.heap_len(), 0, "round {round}");
        assert_eq!(w.h.ev.wakes.len(), 10, "one entry per job, round {round}");
    }
    let earliest = |w: &World| w.h.ev.jobs.values().filter_map(|j| j.wake).min();
    // job-0's stall deadline, from its last report.
    assert_eq!(
        w.h.ev.wakes.first(),
        Some(Timestamp::from_second(at_min(0).as_second() + 99 * 30 + 1800).unwrap())
    );
    report_loss(&mut w, "job-5", 100 * 30, 2.0);
    assert_eq!(w.h.ev.wakes.heap_len(), 1, "the `for` is earlier than the queue's last entry");
    assert_eq!(w.h.ev.wakes.first(), earliest(&w));
    assert_eq!(
        w.h.ev.wakes.first(),
        Some(Timestamp::from_second(at_min(0).as_second() + 100 * 30 + 420).unwrap())
    );
}

/// A second evaluator with the same policy, given the first one's memories, as the controller does after a
/// restart.
fn restarted(w: &World, now: Timestamp) -> World {
    let yaml = policy_yaml_of(w);
    let mut fresh = World::with_policy(&yaml);
    let reference = w.h.ev.policies().next().unwrap().reference.clone();
    fresh.h.ev.restore(&reference, w.h.ev.memories(&reference, now));
    fresh
}

thread_local! {
    static LAST_POLICY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn policy_yaml_of(_w: &World) -> String {
    LAST_POLICY.with(|p| p.borrow().clone())
}

fn world(yaml: String) -> World {
    LAST_POLICY.with(|p| *p.borrow_mut() = yaml.clone());
    World::with_policy(&yaml)
}

#[test]
fn a_restart_keeps_a_pending_for_timer_and_never_repeats_an_action() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0', for: 10m, actions: [{suspend: {}}]}\n\
                 \x20   - {name: nan, when: 'metric(\"loss\") > 1.5', cooldown: 1h, actions: [{event: {}}]}\n";
    let mut w = world(policy(rules, ""));
    w.sample(0, 2.0, None);
    w.sample(4, 2.0, None);
    assert_eq!(w.log(), log(&[(0, "high pending"), (0, "nan firing"), (0, "nan → event [Enforce]")]));
    let memories = w.h.ev.memories(&w.h.ev.policies().next().unwrap().reference.clone(), at_min(4));
    assert_eq!(memories.len(), 2, "{memories:?}");
    assert_eq!((memories[0].rule.as_str(), memories[0].state), ("high", RuleState::Pending));
    assert_eq!(memories[0].since, Some(at_min(0)));

    // The controller dies at minute 4 and comes back at minute 6, seeing the same loss again.
    let mut after = restarted(&w, at_min(6));
    after.sample(6, 2.0, None);
    after.advance(11);
    // `high` fires at the original deadline (minute 10), and `nan`, still firing, issues nothing again.
    assert_eq!(after.log(), log(&[(10, "high firing"), (10, "high → suspend [Enforce]")]));
    let Event::Intent(restarted_intent) = &after.h.events[1] else { panic!() };

    // The intent id is what it would have been without the restart (the executor deduplicates on it).
    w.advance(11);
    let original =
        w.h.events.iter().rev().find_map(|e| if let Event::Intent(i) = e { Some(i) } else { None });
    assert_eq!(original.unwrap().id.split(':').next_back(), restarted_intent.id.split(':').next_back());
}

#[test]
fn memories_of_unknown_rules_and_vanished_jobs_are_dropped() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 1.0', for: 10m, actions: [{suspend: {}}]}\n";
    let mut w = world(policy(rules, ""));
    let reference = w.h.ev.policies().next().unwrap().reference.clone();
    let memory = |job: &str, rule: &str| RuleMemory {
        since: Some(at_min(0)),
        ..crate::testing::memory(job, rule, RuleState::Pending)
    };
    w.h.ev.restore(
        &reference,
        vec![memory("ml/ft", "gone"), memory("ml/deleted", "high"), memory("bad", "high")],
    );
    w.sample(1, 0.5, None);
    assert!(w.log().is_empty(), "{:?}", w.log());
    // The deleted job's memory is still held (and persisted) until the controller says the initial sync is
    // over.
    assert_eq!(w.h.ev.memories(&reference, at_min(1)).len(), 1);
    assert_eq!(w.h.ev.drop_unclaimed_memories(), 1);
    assert!(w.h.ev.memories(&reference, at_min(1)).is_empty());
}

#[test]
fn a_rule_edited_while_nobody_watched_does_not_inherit_its_old_memory() {
    let old = "    - {name: high, when: 'metric(\"loss\") > 1.0', for: 10m, actions: [{suspend: {}}]}\n";
    let mut w = world(policy(old, ""));
    w.sample(0, 2.0, None);
    let reference = w.h.ev.policies().next().unwrap().reference.clone();
    let memories = w.h.ev.memories(&reference, at_min(4));
    assert!(memories[0].rule_hash.is_some());

    // The same rule name, now with `for: 20m`: pending starts again at the first evaluation after the
    // restart (minute 6), so nothing fires at the old deadline (minute 10) or at 20.
    let edited = "    - {name: high, when: 'metric(\"loss\") > 1.0', for: 20m, actions: [{suspend: {}}]}\n";
    let mut after = World::with_policy(&policy(edited, ""));
    after.h.ev.restore(&reference, memories);
    after.sample(6, 2.0, None);
    after.advance(25);
    assert_eq!(after.log(), log(&[(6, "high pending")]));
    after.advance(27);
    assert_eq!(
        after.log(),
        log(&[(6, "high pending"), (26, "high firing"), (26, "high → suspend [Enforce]")])
    );
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

#[test]
fn idle_time_costs_nothing_for_rules_that_only_samples_and_timers_change() {
    // Detectors and scripts that judge samples (and announce their deadlines): a day without samples is a
    // handful of evaluations, the timers', not one every eval_interval.
    let mut w = World::with_policy(&policy(
        "    - {name: plateau, uses: plateau, with: {metric: loss, window: 20}, actions: [{suspend: {}}]}\n\
         \x20   - {name: stalled, uses: stalled, with: {after: 30m}, actions: [{notify: {to: team}}]}\n\
         \x20   - {name: spike, when: 'metric(\"loss\") > 100.0 || stalled(\"2h\")', actions: [{notify: {to: team}}]}\n",
        "",
    ));
    w.sample(0, 2.0, Some(6000.0));
    w.sample(1, 1.9, Some(5999.0));
    let before = w.h.ev.evaluations();
    w.advance(24 * 60);
    assert!(
        w.h.ev.evaluations() - before <= 3,
        "{} evaluations in a quiet day",
        w.h.ev.evaluations() - before
    );
    // The stall still fires on the second it is due.
    assert_eq!(
        w.log().iter().filter(|(_, e)| e == "stalled firing").map(|(m, _)| *m).collect::<Vec<_>>(),
        vec![31]
    );
    assert_eq!(
        w.log().iter().filter(|(_, e)| e == "spike firing").map(|(m, _)| *m).collect::<Vec<_>>(),
        vec![121],
        "the script's stall is due 2h after the last sample"
    );
}

#[test]
fn a_rule_added_while_its_job_is_silent_judges_it_at_the_next_round() {
    // No policy reads the clock and the job sends nothing more: the new rule must still see it.
    let mut w = World::with_policy(&policy(
        "    - {name: plateau, uses: plateau, with: {metric: loss, window: 20}, actions: [{suspend: {}}]}\n",
        "",
    ));
    w.sample(0, 2.0, Some(6000.0));
    w.advance(60);
    let stalled = policy(
        "    - {name: plateau, uses: plateau, with: {metric: loss, window: 20}, actions: [{suspend: {}}]}\n\
         \x20   - {name: stalled, uses: stalled, with: {after: 30m}, actions: [{suspend: {}}]}\n",
        "",
    );
    let p = compile(&parse_documents(&stalled, "v2").unwrap()[0], w.h.ev.scripts()).unwrap();
    w.h.ev.upsert_policy(p, at_min(60), &mut w.h.events);
    w.advance(61);
    assert_eq!(w.log(), log(&[(60, "stalled firing"), (60, "stalled → suspend [Enforce]")]));
}

#[test]
fn a_condition_on_the_clock_changes_when_its_comparison_crosses_with_no_rounds() {
    // `runtime() < 600.0` turns false ten minutes after the start: the compiled condition says so, and that
    // instant is the job's timer (no eval_interval rounds, no sample needed).
    let mut w = World::with_policy(&policy(
        "    - {name: early, when: 'runtime() < 600.0', actions: [{notify: {to: team}}]}\n\
         \x20   - {name: evening, when: 'hour() >= 18 && metric(\"loss\") > 1.0', actions: [{notify: {to: team}}]}\n",
        "",
    ));
    w.sample(0, 2.0, Some(6000.0));
    let before = w.h.ev.evaluations();
    w.advance(120);
    let evaluations = w.h.ev.evaluations() - before;
    // The crossing at 10 min, then hour() on each quarter hour.
    assert!(evaluations <= 10, "{evaluations} evaluations in two hours");
    assert_eq!(
        w.log(),
        log(&[
            (0, "early firing"),
            (0, "early → notify [Enforce]"),
            (10, "early resolved"),
            (60, "evening firing"),
            (60, "evening → notify [Enforce]"),
        ])
    );
}

#[test]
fn an_eta_over_its_limit_resolves_when_the_remaining_time_gets_within_it() {
    // ETA 100 min at minute 0, limit 1 h: within it at minute 40, on a timer (the end is fixed between
    // samples).
    let mut w = World::with_policy(&policy(
        "    - {name: long, uses: eta_exceeds, with: {duration: 1h}, actions: [{notify: {to: team}}]}\n",
        "",
    ));
    w.sample(0, 2.0, Some(100.0));
    let before = w.h.ev.evaluations();
    w.advance(120);
    assert!(w.h.ev.evaluations() - before <= 3, "{} evaluations in two hours", w.h.ev.evaluations() - before);
    assert_eq!(w.log(), log(&[(0, "long firing"), (0, "long → notify [Enforce]"), (40, "long resolved")]));
}

#[test]
fn rules_that_read_the_clock_in_ways_no_wake_follows_are_judged_every_interval() {
    // A product of two clocks: its jobs keep the rounds, and a condition that time alone turns false
    // resolves without a sample.
    let mut w = World::with_policy(&policy(
        "    - {name: early, when: 'runtime() * runtime() < 360000.0', actions: [{notify: {to: team}}]}\n",
        "",
    ));
    w.sample(0, 2.0, Some(6000.0));
    let before = w.h.ev.evaluations();
    w.advance(60);
    assert!(
        w.h.ev.evaluations() - before >= 100,
        "{} evaluations in an hour at 30s",
        w.h.ev.evaluations() - before
    );
    let log = w.log();
    assert!(log.contains(&(0, "early firing".to_string())), "{log:?}");
    assert!(log.iter().any(|(m, e)| e == "early resolved" && *m == 10), "{log:?}");
}

#[test]
fn a_comparison_with_now_is_judged_every_interval() {
    // `now()` is whole seconds: no wake follows it, so its jobs keep the rounds, and the rule fires with no
    // sample after the instant passes (it stayed unjudged until the next sample before).
    let deadline = at_min(10).as_second();
    let mut w = World::with_policy(&policy(
        &format!("    - {{name: past, when: 'now() >= {deadline}', actions: [{{notify: {{to: team}}}}]}}\n"),
        "",
    ));
    w.sample(0, 2.0, None);
    w.advance(11);
    assert_eq!(w.log(), log(&[(10, "past firing"), (10, "past → notify [Enforce]")]));
}

/// A round judges its jobs in key order, whatever ids they were given, so a replay prints the same events in
/// the same order on every run.
#[test]
fn a_round_judges_jobs_in_key_order() {
    let rules = "    - {name: stall, uses: stalled, with: {after: 10m}}\n";
    let mut w = World::with_policy(&policy(rules, ""));
    let report = |w: &mut World, name: &str| {
        let mut snap = w.job();
        snap.key = JobKey::new("ml", name);
        let mut sample = ProgressSample::empty(at_min(0), SampleSource::TrainerStatus);
        sample.current_step = Some(1.0);
        snap.sample = Some(sample);
        w.h.ev.observe(snap, at_min(0), &mut w.h.events);
    };
    // Ids in the order c, b, a; then b leaves and d takes its id.
    for name in ["c", "b", "a"] {
        report(&mut w, name);
    }
    w.h.ev.forget_job(&JobKey::new("ml", "b"), at_min(0), &mut w.h.events);
    report(&mut w, "d");
    w.h.events.clear();
    w.advance(10);
    let stalled: Vec<&str> =
        w.h.events
            .iter()
            .filter_map(|e| match e {
                Event::Transition { job, kind: TransitionKind::Firing, .. } => Some(job.name.as_str()),
                _ => None,
            })
            .collect();
    assert_eq!(stalled, ["a", "c", "d"]);
}
