//! Owner snooze ([`SNOOZE_ANNOTATION`]): held while snoozed, performed at the exact end if still firing,
//! nothing if resolved, the cap, invalid values, early removal and a restart mid-snooze.

use std::collections::BTreeMap;

use super::*;
use crate::evaluate::{ActionIntent, EngineConfig, Evaluator, RuleState};
use crate::input::sample::{JobSnapshot, Metric, ProgressSample, SampleSource};
use crate::policy::compile::{compile, parse_documents};

/// 2026-11-27T17:00:00Z plus `minutes`.
fn t(minutes: i64) -> Timestamp {
    Timestamp::from_second(1_795_798_800 + minutes * 60).unwrap()
}

const UID: &str = "5f0c3a52-0000-4000-8000-000000000002";

/// Fires while loss > 1 (no `for`), suspends and notifies; a stall rule to make the job judged by time too.
const POLICY: &str = "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p, namespace: ml}\n\
spec:\n  mode: Enforce\n  rules:\n    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}, {notify: {to: team}}]}\n";

struct World {
    ev: Evaluator,
    events: Vec<Event>,
    annotations: BTreeMap<String, String>,
}

impl World {
    fn new() -> World {
        World::with_config(EngineConfig::default())
    }

    fn with_config(config: EngineConfig) -> World {
        let mut ev = Evaluator::new(config);
        let mut events = Vec::new();
        for d in parse_documents(POLICY, "test").unwrap() {
            let p = compile(&d, ev.scripts()).unwrap_or_else(|e| panic!("{e}"));
            ev.upsert_policy(p, t(0), &mut events);
        }
        World { ev, events, annotations: BTreeMap::new() }
    }

    fn key() -> JobKey {
        JobKey::new("ml", "ft")
    }

    fn snapshot(&self) -> JobSnapshot {
        let mut s = JobSnapshot::new(World::key());
        s.running_since = Some(t(0));
        s.annotations = self.annotations.clone();
        s
    }

    /// Runs the timers due up to and including `at`.
    fn advance(&mut self, at: Timestamp) {
        while let Some(next) = self.ev.next_tick().filter(|n| *n <= at) {
            self.ev.tick(next, &mut self.events);
        }
    }

    fn sample(&mut self, minute: i64, loss: f64) {
        self.advance(t(minute));
        let mut snap = self.snapshot();
        let mut s = ProgressSample::empty(t(minute), SampleSource::TrainerStatus);
        s.metrics.push(Metric { name: "loss".into(), value: loss });
        snap.sample = Some(s);
        self.ev.observe(snap, t(minute), &mut self.events);
    }

    /// Sets (or with `None` removes) the annotation at `minute`, as a watch event with no new sample.
    fn annotate(&mut self, minute: i64, value: Option<&str>) {
        self.advance(t(minute));
        match value {
            Some(v) => self.annotations.insert(SNOOZE_ANNOTATION.into(), v.into()),
            None => self.annotations.remove(SNOOZE_ANNOTATION),
        };
        let snap = self.snapshot();
        self.ev.observe(snap, t(minute), &mut self.events);
    }

    fn intents(&self) -> Vec<&ActionIntent> {
        self.events.iter().filter_map(|e| if let Event::Intent(i) = e { Some(i) } else { None }).collect()
    }

    fn held(&self) -> Vec<(Timestamp, Timestamp)> {
        self.events
            .iter()
            .filter_map(|e| if let Event::Held { at, until, .. } = e { Some((*at, *until)) } else { None })
            .collect()
    }

    fn changes(&self) -> Vec<&SnoozeChange> {
        self.events
            .iter()
            .filter_map(|e| if let Event::Snooze { change, .. } = e { Some(change) } else { None })
            .collect()
    }

    fn state(&self) -> Option<RuleState> {
        let p = self.ev.policies().next().unwrap().reference.clone();
        self.ev.rule_state(&World::key(), &p, "high")
    }
}

fn rfc(t: Timestamp) -> String {
    t.to_string()
}

#[test]
fn a_snoozed_jobs_rules_fire_but_their_actions_are_held() {
    let mut w = World::new();
    w.annotate(0, Some(&rfc(t(120))));
    w.sample(10, 2.0);
    assert_eq!(w.state(), Some(RuleState::Firing), "evaluated and firing, visibly");
    assert!(w.intents().is_empty(), "no intent while snoozed: {:?}", w.events);
    assert_eq!(w.held(), vec![(t(10), t(120))]);
    let Some(Event::Held { actions, .. }) = w.events.iter().find(|e| matches!(e, Event::Held { .. })) else {
        unreachable!()
    };
    assert_eq!(actions, &[crate::policy::ActionKind::Suspend, crate::policy::ActionKind::Notify]);
    assert!(matches!(w.changes()[..], [SnoozeChange::Started(Snooze { until, .. })] if *until == t(120)));
    assert_eq!(w.ev.snooze(&World::key()).map(|s| s.until), Some(t(120)));
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
    let end = Timestamp::from_second(t(90).as_second() + 30).unwrap(); // between two reports
    w.annotate(5, Some(&rfc(end)));
    w.sample(10, 2.0);
    w.sample(80, 2.0);
    assert_eq!(w.intents().len(), 2, "nothing more while snoozed");
    assert!(w.ev.jobs.values().any(|j| j.wake == Some(end)), "an exact timer at the snooze's end");
    assert!(w.ev.next_tick().is_some_and(|next| next <= end), "and the timers reach it");
    w.advance(end);
    let after: Vec<&ActionIntent> = w.intents().into_iter().skip(2).collect();
    assert_eq!(after.len(), 2, "{:?}", w.events);
    for i in &after {
        assert_eq!((i.at, i.snoozed_until), (end, Some(end)));
        assert!(!before.contains(&i.id), "a new firing: {} is not taken for one already done", i.id);
    }
    assert!(
        w.changes()
            .iter()
            .any(|c| matches!(c, SnoozeChange::Ended { why: SnoozeEnd::Expired, released: 1, .. }))
    );
    assert_eq!(w.ev.snooze(&World::key()), None);

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
    w.annotate(0, Some(&rfc(t(60))));
    w.sample(10, 2.0);
    w.sample(20, 0.5); // resolves
    w.advance(t(120));
    assert_eq!(w.state(), Some(RuleState::Inactive));
    assert!(w.intents().is_empty(), "{:?}", w.events);
    assert!(w.changes().iter().any(|c| matches!(c, SnoozeChange::Ended { released: 0, .. })));
}

#[test]
fn the_cap_ends_a_long_snooze_a_max_snooze_after_it_was_first_seen() {
    let config = EngineConfig { max_snooze: PolicyDuration::from_secs(3600), ..EngineConfig::default() };
    let mut w = World::with_config(config);
    w.annotate(30, Some(&rfc(t(3 * 24 * 60)))); // three days
    let [SnoozeChange::Started(s)] = w.changes()[..] else { panic!("{:?}", w.events) };
    assert_eq!((s.since, s.until, s.requested), (t(30), t(90), t(3 * 24 * 60)));
    assert!(s.capped());
    w.sample(40, 2.0);
    // The same value seen again does not move the cap.
    w.annotate(60, Some(&rfc(t(3 * 24 * 60))));
    w.sample(89, 2.0);
    assert!(w.intents().is_empty());
    w.advance(t(90));
    assert_eq!(w.intents().len(), 2);
    assert!(w.intents().iter().all(|i| i.at == t(90)));
}

#[test]
fn an_invalid_value_is_reported_once_and_does_not_snooze() {
    let mut w = World::new();
    w.annotate(0, Some("tomorrow 8am"));
    w.sample(10, 2.0);
    w.annotate(11, Some("tomorrow 8am"));
    let [SnoozeChange::Invalid { value, message }] = w.changes()[..] else { panic!("{:?}", w.events) };
    assert_eq!(value, "tomorrow 8am");
    assert!(message.contains(SNOOZE_ANNOTATION) && message.contains("\"tomorrow 8am\""), "{message}");
    assert!(message.contains("RFC 3339") && message.contains("2026-12-02T08:00:00Z"), "{message}");
    assert_eq!(w.intents().len(), 2, "not snoozed: the firing acts");
    assert!(w.held().is_empty());
    // A time in the past is no snooze either, and not worth a warning (a finished snooze looks like it).
    let mut past = World::new();
    past.annotate(30, Some(&rfc(t(10))));
    past.sample(31, 2.0);
    assert!(past.changes().is_empty(), "{:?}", past.events);
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
    w.annotate(0, Some(&rfc(t(600))));
    w.sample(10, 2.0);
    w.annotate(25, None);
    let intents = w.intents();
    assert_eq!(intents.len(), 2, "{:?}", w.events);
    assert!(intents.iter().all(|i| i.at == t(25) && i.snoozed_until == Some(t(600))));
    assert!(w.changes().iter().any(|c| matches!(c, SnoozeChange::Ended { why: SnoozeEnd::Removed, .. })));
    // The end timer is gone: nothing happens at minute 600.
    w.advance(t(700));
    assert_eq!(w.intents().len(), 2);
}

#[test]
fn a_restart_mid_snooze_keeps_the_cap_and_the_end() {
    let config = EngineConfig { max_snooze: PolicyDuration::from_secs(2 * 3600), ..EngineConfig::default() };
    let value = rfc(t(24 * 60));
    let mut w = World::with_config(config.clone());
    w.annotate(0, Some(&value));
    w.sample(10, 2.0);
    let checkpoint = w.ev.checkpoint(&World::key(), UID, t(30)).expect("a checkpoint").text;
    assert!(checkpoint.contains(&value), "{checkpoint}");

    // A new evaluator (a restarted controller) at minute 60, with the firing the policy status remembers.
    let memories = w.ev.memories(&w.ev.policies().next().unwrap().reference.clone(), t(30));
    let mut r = World::with_config(config.clone());
    r.annotations = w.annotations.clone();
    let reference = r.ev.policies().next().unwrap().reference.clone();
    r.ev.restore(&reference, memories.clone());
    r.ev.restore_history(&World::key(), &checkpoint, UID, t(60)).unwrap();
    r.sample(61, 2.0);
    assert!(r.intents().is_empty(), "still snoozed after the restart: {:?}", r.events);
    assert!(r.changes().is_empty(), "the same snooze, not a new one: {:?}", r.events);
    assert_eq!(r.ev.snooze(&World::key()).map(|s| (s.since, s.until)), Some((t(0), t(120))));
    r.advance(t(120));
    assert_eq!(r.intents().len(), 2, "released at the original cap: {:?}", r.events);
    assert!(r.intents().iter().all(|i| i.at == t(120)));

    // A restart after the end passed (no controller ran then): released at the first evaluation.
    let mut late = World::with_config(config);
    late.annotations = w.annotations.clone();
    let reference = late.ev.policies().next().unwrap().reference.clone();
    late.ev.restore(&reference, memories);
    late.ev.restore_history(&World::key(), &checkpoint, UID, t(200)).unwrap();
    let mut snap = late.snapshot();
    let mut s = ProgressSample::empty(t(200), SampleSource::TrainerStatus);
    s.metrics.push(Metric { name: "loss".into(), value: 2.0 });
    snap.sample = Some(s);
    late.ev.observe(snap, t(200), &mut late.events); // the first thing the restarted controller does
    assert_eq!(late.intents().len(), 2, "{:?}", late.events);
    assert!(late.intents().iter().all(|i| i.at == t(200) && i.snoozed_until == Some(t(120))));
}

#[test]
fn a_checkpoint_without_a_snooze_reads_as_before() {
    let mut w = World::new();
    w.sample(0, 0.5);
    let text = w.ev.checkpoint(&World::key(), UID, t(1)).unwrap().text;
    assert!(!text.contains("\"z\""), "{text}");
    let mut r = World::new();
    r.ev.restore_history(&World::key(), &text, UID, t(2)).unwrap();
    r.sample(3, 2.0);
    assert_eq!(r.intents().len(), 2);
}
