//! Owner snooze ([`SNOOZE_ANNOTATION`]): held while snoozed, performed at the exact end if still firing,
//! nothing if resolved, the cap, invalid values, early removal and a restart mid-snooze.

use std::collections::BTreeMap;

use super::*;
use crate::evaluate::{ActionIntent, EngineConfig, RuleState};
use crate::input::sample::{JobSnapshot, Metric, ProgressSample, SampleSource};
use crate::testing::{Harness, at_min, policy};

const UID: &str = "5f0c3a52-0000-4000-8000-000000000002";

/// Policy `ml/p`: `high` fires while loss > 1 (no `for`), suspends and notifies.
fn policy_yaml() -> String {
    policy("p")
        .rule("{name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}, {notify: {to: team}}]}")
        .yaml()
}

/// The evaluator harness with one job, `ml/ft`, on a clock in minutes.
struct World {
    h: Harness,
    annotations: BTreeMap<String, String>,
}

impl World {
    fn new() -> World {
        World::with_config(EngineConfig::default())
    }

    fn with_config(config: EngineConfig) -> World {
        World { h: Harness::with_config(config, &[policy_yaml()]), annotations: BTreeMap::new() }
    }

    fn key() -> JobKey {
        JobKey::new("ml", "ft")
    }

    fn snapshot(&self) -> JobSnapshot {
        let mut s = JobSnapshot::new(World::key());
        s.running_since = Some(at_min(0));
        s.annotations = self.annotations.clone();
        s
    }

    /// Runs the timers due up to and including `at`.
    fn advance(&mut self, at: Timestamp) {
        self.h.advance(at);
    }

    fn sample(&mut self, minute: i64, loss: f64) {
        self.advance(at_min(minute));
        let mut snap = self.snapshot();
        let mut s = ProgressSample::empty(at_min(minute), SampleSource::TrainerStatus);
        s.metrics.push(Metric { name: "loss".into(), value: loss });
        snap.sample = Some(s);
        self.h.ev.observe(snap, at_min(minute), &mut self.h.events);
    }

    /// Sets (or with `None` removes) the annotation at `minute`, as a watch event with no new sample.
    fn annotate(&mut self, minute: i64, value: Option<&str>) {
        self.advance(at_min(minute));
        match value {
            Some(v) => self.annotations.insert(SNOOZE_ANNOTATION.into(), v.into()),
            None => self.annotations.remove(SNOOZE_ANNOTATION),
        };
        let snap = self.snapshot();
        self.h.ev.observe(snap, at_min(minute), &mut self.h.events);
    }

    fn intents(&self) -> Vec<&ActionIntent> {
        self.h.intents()
    }

    fn held(&self) -> Vec<(Timestamp, Timestamp)> {
        self.h
            .events
            .iter()
            .filter_map(|e| if let Event::Held { at, until, .. } = e { Some((*at, *until)) } else { None })
            .collect()
    }

    fn changes(&self) -> Vec<&SnoozeChange> {
        self.h
            .events
            .iter()
            .filter_map(|e| if let Event::Snooze { change, .. } = e { Some(change) } else { None })
            .collect()
    }

    fn state(&self) -> Option<RuleState> {
        let p = self.h.ev.policies().next().unwrap().reference.clone();
        self.h.ev.rule_state(&World::key(), &p, "high")
    }
}

fn rfc(t: Timestamp) -> String {
    t.to_string()
}

#[test]
fn a_snoozed_jobs_rules_fire_but_their_actions_are_held() {
    let mut w = World::new();
    w.annotate(0, Some(&rfc(at_min(120))));
    w.sample(10, 2.0);
    assert_eq!(w.state(), Some(RuleState::Firing), "evaluated and firing, visibly");
    assert!(w.intents().is_empty(), "no intent while snoozed: {:?}", w.h.events);
    assert_eq!(w.held(), vec![(at_min(10), at_min(120))]);
    let Some(Event::Held { actions, .. }) = w.h.events.iter().find(|e| matches!(e, Event::Held { .. }))
    else {
        unreachable!()
    };
    assert_eq!(actions, &[crate::policy::ActionKind::Suspend, crate::policy::ActionKind::Notify]);
    assert!(
        matches!(w.changes()[..], [SnoozeChange::Started(Snooze { until, .. })] if *until == at_min(120))
    );
    assert_eq!(w.h.ev.snooze(&World::key()).map(|s| s.until), Some(at_min(120)));
    // More reports while firing: still nothing issued, no second Held (one per firing).
    w.sample(20, 2.0);
    assert_eq!(w.held().len(), 1);
    assert!(w.intents().is_empty());
}

#[test]
fn a_rule_still_firing_at_the_end_acts_on_that_second_with_new_intent_ids() {
    let mut w = World::new();
    // Fired and acted before the snooze (the owner then resumes it with `resume --snooze`).
    w.sample(0, 2.0);
    let before: Vec<String> = w.intents().iter().map(|i| i.id.clone()).collect();
    assert_eq!(before.len(), 2);
    let end = Timestamp::from_second(at_min(90).as_second() + 30).unwrap(); // between two reports
    w.annotate(5, Some(&rfc(end)));
    w.sample(10, 2.0);
    w.sample(80, 2.0);
    assert_eq!(w.intents().len(), 2, "nothing more while snoozed");
    assert!(w.h.ev.jobs.values().any(|j| j.wake == Some(end)), "an exact timer at the snooze's end");
    assert!(w.h.ev.next_tick().is_some_and(|next| next <= end), "and the timers reach it");
    w.advance(end);
    let after: Vec<&ActionIntent> = w.intents().into_iter().skip(2).collect();
    assert_eq!(after.len(), 2, "{:?}", w.h.events);
    for i in &after {
        assert_eq!((i.at, i.snoozed_until), (end, Some(end)));
        assert!(!before.contains(&i.id), "a new firing: {} is not taken for one already done", i.id);
    }
    assert!(
        w.changes()
            .iter()
            .any(|c| matches!(c, SnoozeChange::Ended { why: SnoozeEnd::Expired, released: 1, .. }))
    );
    assert_eq!(w.h.ev.snooze(&World::key()), None);

    // The same history on another evaluator (another replica, or a replay) releases with the same ids.
    let mut twin = World::new();
    twin.sample(0, 2.0);
    twin.annotate(5, Some(&rfc(end)));
    twin.sample(10, 2.0);
    twin.sample(80, 2.0);
    twin.advance(end);
    let ids = |w: &World| w.intents().iter().map(|i| i.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&twin), ids(&w));
}

#[test]
fn a_rule_that_resolved_during_the_snooze_does_nothing_at_the_end() {
    let mut w = World::new();
    w.annotate(0, Some(&rfc(at_min(60))));
    w.sample(10, 2.0);
    w.sample(20, 0.5); // resolves
    w.advance(at_min(120));
    assert_eq!(w.state(), Some(RuleState::Inactive));
    assert!(w.intents().is_empty(), "{:?}", w.h.events);
    assert!(w.changes().iter().any(|c| matches!(c, SnoozeChange::Ended { released: 0, .. })));
}

#[test]
fn the_cap_ends_a_long_snooze_a_max_snooze_after_it_was_first_seen() {
    let config = EngineConfig { max_snooze: PolicyDuration::from_secs(3600), ..EngineConfig::default() };
    let mut w = World::with_config(config);
    w.annotate(30, Some(&rfc(at_min(3 * 24 * 60)))); // three days
    let [SnoozeChange::Started(s)] = w.changes()[..] else { panic!("{:?}", w.h.events) };
    assert_eq!((s.since, s.until, s.requested), (at_min(30), at_min(90), at_min(3 * 24 * 60)));
    assert!(s.capped());
    w.sample(40, 2.0);
    // The same value seen again does not move the cap.
    w.annotate(60, Some(&rfc(at_min(3 * 24 * 60))));
    w.sample(89, 2.0);
    assert!(w.intents().is_empty());
    w.advance(at_min(90));
    assert_eq!(w.intents().len(), 2);
    assert!(w.intents().iter().all(|i| i.at == at_min(90)));
}

#[test]
fn an_invalid_value_is_reported_once_and_does_not_snooze() {
    let mut w = World::new();
    w.annotate(0, Some("tomorrow 8am"));
    w.sample(10, 2.0);
    w.annotate(11, Some("tomorrow 8am"));
    let [SnoozeChange::Invalid { value, message }] = w.changes()[..] else { panic!("{:?}", w.h.events) };
    assert_eq!(value, "tomorrow 8am");
    assert!(message.contains(SNOOZE_ANNOTATION) && message.contains("\"tomorrow 8am\""), "{message}");
    assert!(message.contains("RFC 3339") && message.contains("2026-12-02T08:00:00Z"), "{message}");
    assert_eq!(w.intents().len(), 2, "not snoozed: the firing acts");
    assert!(w.held().is_empty());
    // A time in the past is no snooze either, and not worth a warning (a finished snooze looks like it).
    let mut past = World::new();
    past.annotate(30, Some(&rfc(at_min(10))));
    past.sample(31, 2.0);
    assert!(past.changes().is_empty(), "{:?}", past.h.events);
    assert_eq!(past.intents().len(), 2);
    // Nothing the annotation holds makes the evaluator panic.
    let mut odd = World::new();
    for v in ["", " ", "9999-12-31T23:59:59Z", "-009999-01-01T00:00:00Z", "2026-13-01T00:00:00Z", "\u{0}"] {
        odd.annotate(1, Some(v));
        odd.sample(2, 2.0);
    }
}

#[test]
fn removing_the_annotation_ends_the_snooze_at_once() {
    let mut w = World::new();
    w.annotate(0, Some(&rfc(at_min(600))));
    w.sample(10, 2.0);
    w.annotate(25, None);
    let intents = w.intents();
    assert_eq!(intents.len(), 2, "{:?}", w.h.events);
    assert!(intents.iter().all(|i| i.at == at_min(25) && i.snoozed_until == Some(at_min(600))));
    assert!(w.changes().iter().any(|c| matches!(c, SnoozeChange::Ended { why: SnoozeEnd::Removed, .. })));
    // The end timer is gone: nothing happens at minute 600.
    w.advance(at_min(700));
    assert_eq!(w.intents().len(), 2);
}

#[test]
fn a_restart_mid_snooze_keeps_the_cap_and_the_end() {
    let config = EngineConfig { max_snooze: PolicyDuration::from_secs(2 * 3600), ..EngineConfig::default() };
    let value = rfc(at_min(24 * 60));
    let mut w = World::with_config(config.clone());
    w.annotate(0, Some(&value));
    w.sample(10, 2.0);
    let checkpoint = w.h.ev.checkpoint(&World::key(), UID, at_min(30)).expect("a checkpoint").text;
    assert!(checkpoint.contains(&value), "{checkpoint}");

    // A new evaluator (a restarted controller) at minute 60, with the firing the policy status remembers.
    let memories = w.h.ev.memories(&w.h.ev.policies().next().unwrap().reference.clone(), at_min(30));
    let mut r = World::with_config(config.clone());
    r.annotations = w.annotations.clone();
    let reference = r.h.ev.policies().next().unwrap().reference.clone();
    r.h.ev.restore(&reference, memories.clone());
    r.h.ev.restore_history(&World::key(), &checkpoint, UID, at_min(60)).unwrap();
    r.sample(61, 2.0);
    assert!(r.intents().is_empty(), "still snoozed after the restart: {:?}", r.h.events);
    assert!(r.changes().is_empty(), "the same snooze, not a new one: {:?}", r.h.events);
    assert_eq!(r.h.ev.snooze(&World::key()).map(|s| (s.since, s.until)), Some((at_min(0), at_min(120))));
    r.advance(at_min(120));
    assert_eq!(r.intents().len(), 2, "released at the original cap: {:?}", r.h.events);
    assert!(r.intents().iter().all(|i| i.at == at_min(120)));

    // A restart after the end passed (no controller ran then): released at the first evaluation.
    let mut late = World::with_config(config);
    late.annotations = w.annotations.clone();
    let reference = late.h.ev.policies().next().unwrap().reference.clone();
    late.h.ev.restore(&reference, memories);
    late.h.ev.restore_history(&World::key(), &checkpoint, UID, at_min(200)).unwrap();
    let mut snap = late.snapshot();
    let mut s = ProgressSample::empty(at_min(200), SampleSource::TrainerStatus);
    s.metrics.push(Metric { name: "loss".into(), value: 2.0 });
    snap.sample = Some(s);
    late.h.ev.observe(snap, at_min(200), &mut late.h.events); // the first thing the restarted controller does
    assert_eq!(late.intents().len(), 2, "{:?}", late.h.events);
    assert!(late.intents().iter().all(|i| i.at == at_min(200) && i.snoozed_until == Some(at_min(120))));
}

#[test]
fn a_checkpoint_without_a_snooze_reads_as_before() {
    let mut w = World::new();
    w.sample(0, 0.5);
    let text = w.h.ev.checkpoint(&World::key(), UID, at_min(1)).unwrap().text;
    assert!(!text.contains("\"z\""), "{text}");
    let mut r = World::new();
    r.h.ev.restore_history(&World::key(), &text, UID, at_min(2)).unwrap();
    r.sample(3, 2.0);
    assert_eq!(r.intents().len(), 2);
}
