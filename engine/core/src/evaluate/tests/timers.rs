//! Timers: time-driven rules fire on their second, the wake queue stays exact and bounded, and rules that
//! read the clock in ways no wake follows are judged every interval.

use super::*;

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
