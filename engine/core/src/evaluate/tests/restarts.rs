//! Restarts: rule memories handed to a new evaluator keep a pending `for` and never repeat an action;
//! memories of unknown rules, vanished jobs and edited rules are dropped.

use super::*;

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
