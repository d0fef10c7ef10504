//! Checkpoints: a restored evaluator judges as the one that never stopped; the text is bounded; what it
//! cannot trust it refuses with a reason, and it never panics on input.

use super::*;
use crate::evaluate::{EngineConfig, Event};
use crate::input::sample::{JobSnapshot, Metric, ProgressSample, SampleSource};
use crate::testing::{at_sec, policy};

const UID: &str = "5f0c3a52-0000-4000-8000-000000000001";

/// Plateau on loss, window 2h, for a job reporting every 30 s (the README's typical policy).
fn plateau_policy(window: &str) -> String {
    let rule = format!(
        "{{name: plateau, uses: plateau, with: {{metric: loss, window: {window}, minDelta: 0.001}}, actions: [{{suspend: {{}}}}]}}"
    );
    policy("p").spec("samplingInterval: 30s").rule(&rule).yaml()
}

fn evaluator(yaml: &str) -> Evaluator {
    crate::testing::harness::evaluator(EngineConfig::default(), &[yaml])
}

fn key() -> JobKey {
    JobKey::new("ml", "ft")
}

/// A loss that falls for 40 minutes, then wobbles within minDelta: a plateau from about minute 40.
fn loss(i: i64) -> f64 {
    if i < 80 { 3.0 - 0.02 * i as f64 } else { 1.4 + 0.0004 * ((i * 7) % 3) as f64 }
}

fn report(i: i64, metrics: &[(&str, f64)]) -> JobSnapshot {
    let mut snap = JobSnapshot::new(key());
    snap.running_since = Some(at_sec(0));
    let mut s = ProgressSample::empty(at_sec(30 * i), SampleSource::TrainerStatus);
    s.current_step = Some(i as f64 * 10.0);
    s.progress_percent = Some(i as f64 / 10.0);
    s.metrics = metrics.iter().map(|(n, v)| Metric { name: crate::input::interned(n), value: *v }).collect();
    snap.sample = Some(s);
    snap
}

/// Feeds reports `from..to` (and the timers between them); returns the report at which the rule fired.
fn feed(ev: &mut Evaluator, from: i64, to: i64) -> Option<i64> {
    let mut fired = None;
    for i in from..to {
        let mut events = Vec::new();
        while let Some(next) = ev.next_tick().filter(|n| *n < at_sec(30 * i)) {
            ev.tick(next, &mut events);
        }
        ev.observe(
            report(i, &[("loss", loss(i)), ("learning_rate", 1e-4 / (1 + i) as f64)]),
            at_sec(30 * i),
            &mut events,
        );
        if events.iter().any(|e| matches!(e, Event::Intent(_))) {
            fired.get_or_insert(i);
        }
    }
    fired
}

#[test]
fn a_restarted_evaluator_fires_at_the_same_report_as_one_that_never_stopped() {
    let yaml = plateau_policy("2h");
    let mut never_stopped = evaluator(&yaml);
    let expected = feed(&mut never_stopped, 0, 400).expect("the loss plateaus");
    assert!(expected > 80 + 200, "fires 2h after the last improvement, not before: {expected}");
    for stop in [5, 81, 150, 320] {
        let mut before = evaluator(&yaml);
        assert_eq!(feed(&mut before, 0, stop), None);
        let saved = before.checkpoint(&key(), UID, at_sec(30 * stop)).expect("a job with samples");
        let mut after = evaluator(&yaml);
        let restored = after.restore_history(&key(), &saved.text, UID, at_sec(30 * stop + 600)).unwrap();
        assert_eq!((restored.samples, restored.detectors), (stop as u64, 1), "stopped at {stop}");
        // The first report the new evaluator sees is the one the old one saw last (the TrainJob still shows
        // it), then the ones after.
        assert_eq!(feed(&mut after, stop - 1, 400), Some(expected), "stopped after report {stop}");
    }
    // Without a checkpoint the window starts over: the restart on Friday night.
    let mut forgetful = evaluator(&yaml);
    feed(&mut forgetful, 0, 150);
    let mut fresh = evaluator(&yaml);
    assert!(feed(&mut fresh, 150, 400).is_some_and(|i| i > expected), "a restart without one fires later");
}

#[test]
fn a_checkpoint_round_trips_to_the_same_checkpoint() {
    let yaml = plateau_policy("2h");
    let mut ev = evaluator(&yaml);
    feed(&mut ev, 0, 200);
    let saved = ev.checkpoint(&key(), UID, at_sec(6000)).unwrap();
    let mut again = evaluator(&yaml);
    again.restore_history(&key(), &saved.text, UID, at_sec(6001)).unwrap();
    // The TrainJob as watched next: the report saved last, a duplicate.
    feed(&mut again, 199, 200);
    let resaved = again.checkpoint(&key(), UID, at_sec(6000)).unwrap();
    assert_eq!(resaved.text, saved.text, "nothing lost, nothing invented");
    assert_eq!(resaved.content, saved.content);
    assert_eq!(HistoryCheckpoint::stamp(&saved.text), Some((at_sec(6000), saved.content)));
    assert_eq!(HistoryCheckpoint::stamp("{\"v\":2}"), None);
    let later = again.checkpoint(&key(), UID, at_sec(9000)).unwrap();
    assert_ne!(later.text, saved.text);
    assert_eq!(later.content, saved.content, "the time it was taken is not content");
    let (a, b) = (ev.job(&key()).unwrap(), again.job(&key()).unwrap());
    let (la, lb) = (a.series.metric("loss").unwrap(), b.series.metric("loss").unwrap());
    let (sa, sb) = (la.stats().unwrap(), lb.stats().unwrap());
    assert_eq!((sa.count, sa.min, sa.max), (sb.count, sb.min, sb.max));
    // The live ring's running sums carry rounding from 200 updates, the restored one's from 64.
    for (x, y) in [(sa.mean, sb.mean), (sa.std, sb.std), (sa.slope_per_second, sb.slope_per_second)] {
        assert!((x - y).abs() <= 1e-9 * x.abs().max(1e-12), "{x} vs {y}");
    }
    assert_eq!(la.window_len(), 64);
    assert_eq!(
        la.best_before_last(10, crate::history::metric_series::Direction::Min),
        lb.best_before_last(10, crate::history::metric_series::Direction::Min)
    );
    assert_eq!((a.series.samples, a.series.last_progress_at), (b.series.samples, b.series.last_progress_at));
    assert_eq!(a.first_seen, b.first_seen);
}

#[test]
fn the_report_that_was_saved_last_is_not_counted_again() {
    let yaml = plateau_policy("20");
    let mut ev = evaluator(&yaml);
    feed(&mut ev, 0, 90);
    let saved = ev.checkpoint(&key(), UID, at_sec(2700)).unwrap();
    let mut after = evaluator(&yaml);
    after.restore_history(&key(), &saved.text, UID, at_sec(2700)).unwrap();
    let mut events = Vec::new();
    for _ in 0..3 {
        // The watch delivers the same TrainJob again (our own annotation write, a resync).
        after.observe(
            report(89, &[("loss", loss(89)), ("learning_rate", 1e-4 / 90.0)]),
            at_sec(2710),
            &mut events,
        );
    }
    let series = &after.job(&key()).unwrap().series;
    assert_eq!((series.samples, series.duplicates), (90, 3));
    assert_eq!(series.metric("loss").unwrap().count(), 90);
    // An older report (a stale cache) is out of order, as it would have been without the restart.
    after.observe(report(50, &[("loss", 9.0)]), at_sec(2720), &mut events);
    assert_eq!(after.job(&key()).unwrap().series.samples, 90);
    assert_eq!(after.checkpoint(&key(), UID, at_sec(2800)).unwrap().content, saved.content);
}

#[test]
fn a_checkpoint_stays_within_its_byte_budget_and_keeps_the_detector_memory() {
    let yaml = plateau_policy("2h");
    let mut ev = evaluator(&yaml);
    // The worst case: 32 metrics (the most a job tracks), long names, values of full precision.
    let names: Vec<String> =
        (0..40).map(|m| format!("eval/{m:02}/{}", "very_long_metric_name_".repeat(6))).collect();
    let mut events = Vec::new();
    for i in 0..300 {
        let mut metrics: Vec<(&str, f64)> = vec![("loss", loss(i))];
        metrics.extend(
            names.iter().enumerate().map(|(m, n)| (n.as_str(), (i * 31 + m as i64) as f64 / 7.0 + 0.1)),
        );
        ev.observe(report(i, &metrics), at_sec(30 * i), &mut events);
    }
    let saved = ev.checkpoint(&key(), UID, at_sec(9000)).unwrap();
    assert!(saved.text.len() <= MAX_CHECKPOINT_BYTES, "{} bytes", saved.text.len());
    assert!(saved.text.len() > MAX_CHECKPOINT_BYTES - 400, "fills the budget: {} bytes", saved.text.len());
    assert!(saved.points_left_out > 0 && saved.metrics_left_out > 0, "{saved:?}");
    let mut after = evaluator(&yaml);
    let restored = after.restore_history(&key(), &saved.text, UID, at_sec(9001)).unwrap();
    assert_eq!(restored.detectors, 1, "the plateau's memory is never left out");
    assert_eq!(restored.samples, 300);
    let series = &after.job(&key()).unwrap().series;
    assert_eq!(series.metric_names().next(), Some("loss"), "the first metric reported is kept first");
    assert_eq!(
        series.metric("loss").unwrap().best(crate::history::metric_series::Direction::Min),
        ev.job(&key())
            .unwrap()
            .series
            .metric("loss")
            .unwrap()
            .best(crate::history::metric_series::Direction::Min)
    );
}

#[test]
fn a_typical_checkpoint_keeps_the_whole_ring() {
    let mut ev = evaluator(&plateau_policy("2h"));
    feed(&mut ev, 0, 400);
    let saved = ev.checkpoint(&key(), UID, at_sec(12_000)).unwrap();
    assert_eq!((saved.points_left_out, saved.metrics_left_out), (0, 0));
    assert!(saved.text.len() <= MAX_CHECKPOINT_BYTES, "{} bytes: {}", saved.text.len(), saved.text);
}

#[test]
fn what_cannot_be_trusted_is_refused_with_a_reason() {
    let yaml = plateau_policy("2h");
    let mut ev = evaluator(&yaml);
    feed(&mut ev, 0, 100);
    let text = ev.checkpoint(&key(), UID, at_sec(3000)).unwrap().text;
    let mut after = evaluator(&yaml);
    let other = after.restore_history(&key(), &text, "another-uid", at_sec(3000)).unwrap_err();
    assert_eq!(other, HistoryRefused::OtherJob { expected: "another-uid".into(), found: UID.into() });
    let newer = text.replacen("{\"v\":1,", "{\"v\":7,", 1);
    let refused = after.restore_history(&key(), &newer, UID, at_sec(3000)).unwrap_err();
    assert_eq!(refused, HistoryRefused::UnknownVersion { found: 7 });
    assert!(refused.to_string().contains("format version 7, this controller reads version 1"), "{refused}");
    for garbage in ["", "not json", "{}", "[1,2]", "{\"v\":1}", "{\"v\":\"1\"}"] {
        assert!(
            matches!(
                after.restore_history(&key(), garbage, UID, at_sec(3000)),
                Err(HistoryRefused::Unreadable(_))
            ),
            "{garbage:?}"
        );
    }
    // Every prefix and a time far out of range: refused or restored, never a panic.
    for end in (0..text.len()).step_by(7) {
        let mut fresh = evaluator(&yaml);
        let _ = fresh.restore_history(&key(), &text[..end], UID, at_sec(3000));
    }
    let far = text.replacen("\"fs\":", "\"fs\":1e300,\"_\":", 1);
    assert!(matches!(
        evaluator(&yaml).restore_history(&key(), &far, UID, at_sec(3000)),
        Err(HistoryRefused::Unreadable(_))
    ));
    assert!(after.job(&key()).is_none() || after.job(&key()).unwrap().series.samples == 0);
    // A planted NaN best (anyone who may patch the TrainJob can edit the annotation) would keep the plateau
    // from ever firing: refused.
    let at = text.find("\"b\":[\"").expect("the plateau's reference best in the checkpoint") + 6;
    let end = at + text[at..].find('"').expect("its end");
    let nan = format!("{}NaN{}", &text[..at], &text[end..]);
    assert!(matches!(
        evaluator(&yaml).restore_history(&key(), &nan, UID, at_sec(3000)),
        Err(HistoryRefused::Unreadable(m)) if m.contains("detector memory")
    ));
    let huge = format!("{text}{}", " ".repeat(3 * crate::evaluate::MAX_CHECKPOINT_BYTES));
    assert!(matches!(
        evaluator(&yaml).restore_history(&key(), &huge, UID, at_sec(3000)),
        Err(HistoryRefused::Unreadable(_))
    ));
    // A job with history of its own in this run keeps it.
    assert_eq!(ev.restore_history(&key(), &text, UID, at_sec(3000)), Err(HistoryRefused::AlreadyHasHistory));
}

#[test]
fn a_job_only_audit_rules_judge_has_no_checkpoint() {
    let mut ev = evaluator(&plateau_policy("2h").replace("mode: Enforce", "mode: Audit"));
    feed(&mut ev, 0, 10);
    assert_eq!(ev.checkpoint(&key(), UID, at_sec(300)), None, "Audit mode writes nothing to the TrainJob");
}

#[test]
fn an_edited_rule_does_not_inherit_the_old_rules_patience() {
    let mut ev = evaluator(&plateau_policy("2h"));
    feed(&mut ev, 0, 150);
    let text = ev.checkpoint(&key(), UID, at_sec(4500)).unwrap().text;
    let mut edited = evaluator(&plateau_policy("3h"));
    let restored = edited.restore_history(&key(), &text, UID, at_sec(4500)).unwrap();
    assert_eq!((restored.detectors, restored.detectors_ignored), (0, 1));
    assert_eq!(restored.samples, 150, "the history itself is the job's, whatever the rules");
}

/// The README's figures (`cargo test -p trainwarden-core figures -- --nocapture` prints them): a plateau on
/// loss with a 2 h window at 30 s sampling, the loss alone and with the learning rate a Hugging Face
/// reporter sends beside it; the worst case is the cap.
#[test]
fn figures_for_the_readme() {
    let mut sizes = Vec::new();
    for with_lr in [false, true] {
        let mut ev = evaluator(&plateau_policy("2h"));
        let mut events = Vec::new();
        for i in 0..400 {
            let mut metrics = vec![("loss", 2.0 / (1.0 + i as f64 / 37.0) + 0.0137)];
            if with_lr {
                metrics.push(("learning_rate", 5e-5 * (1.0 - i as f64 / 1000.0)));
            }
            ev.observe(report(i, &metrics), at_sec(30 * i), &mut events);
        }
        let saved = ev.checkpoint(&key(), UID, at_sec(12_000)).unwrap();
        assert_eq!(saved.points_left_out, 0);
        sizes.push(saved.text.len());
    }
    println!("typical checkpoint: loss {} bytes, loss + learning_rate {} bytes", sizes[0], sizes[1]);
    assert!(sizes[0] < 2048 && sizes[1] < 4096, "{sizes:?}");
}

/// The job's last training checkpoint travels with its history: a restarted evaluator does not take the pair
/// the job still reports (its metrics are sticky) for a new checkpoint, so `since_checkpoint()` goes on
/// counting from the first report that named it.
#[test]
fn the_last_training_checkpoint_survives_a_restart_and_is_not_new_again() {
    let yaml = plateau_policy("2h");
    let mut ev = evaluator(&yaml);
    let pair = [("loss", 2.0), ("checkpoint_step", 400.0), ("checkpoint_request_id", 1_767_225_600_123.0)];
    let mut events = Vec::new();
    ev.observe(report(1, &[("loss", 2.0)]), at_sec(30), &mut events);
    ev.observe(report(2, &pair), at_sec(60), &mut events);
    ev.observe(report(3, &pair), at_sec(90), &mut events);
    let last = |ev: &Evaluator| ev.job(&key()).and_then(|d| d.series.last_checkpoint);
    let expected = crate::SavedCheckpoint {
        reported: crate::ReportedCheckpoint { step: 400, request_id: 1_767_225_600_123 },
        at: at_sec(60),
    };
    assert_eq!(last(&ev), Some(expected), "the first report that named it");
    let saved = ev.checkpoint(&key(), UID, at_sec(90)).unwrap();
    let mut after = evaluator(&yaml);
    after.restore_history(&key(), &saved.text, UID, at_sec(600)).unwrap();
    assert_eq!(last(&after), Some(expected));
    after.observe(report(4, &pair), at_sec(120), &mut events);
    assert_eq!(last(&after), Some(expected), "the same pair again is not a new checkpoint");
    // A restarted process reports no pair until it saves: nothing changes.
    after.observe(report(5, &[("loss", 1.9)]), at_sec(150), &mut events);
    assert_eq!(last(&after), Some(expected));
    let own = [("loss", 1.8), ("checkpoint_step", 500.0), ("checkpoint_request_id", 0.0)];
    after.observe(report(6, &own), at_sec(180), &mut events);
    assert_eq!(
        last(&after).map(|c| (c.reported.step, c.reported.request_id, c.at)),
        Some((500, 0, at_sec(180)))
    );
}
