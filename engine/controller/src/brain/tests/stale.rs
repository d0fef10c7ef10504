//! An intent the executor found judged under an older policy generation (`brain::stale`): the policy as it
//! now stands reaches the brain first, then the `stale` outcome; the same firing still standing is sent
//! again under the new generation, one that no longer stands is abandoned with an Event on the job; and
//! intents carry the view they are judged under.

use super::*;

const HIGH: &str = "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n";
const OTHER: &str =
    "    - {name: other, when: 'metric(\"loss\") > 50.0', actions: [{annotate: {key: a, value: b}}]}\n";

/// Policy `ml/p` at `generation`, with uid `u-1`, as the executor hands it on after reading it.
fn policy_at(rules: &str, generation: i64) -> Input {
    let mut doc = policy("p").spec("samplingInterval: 1s").rules(rules).document();
    doc.reference.generation = generation;
    Input::Policy(Box::new(PolicyInput {
        key: key(),
        uid: Some("u-1".into()),
        generation,
        document: Ok(doc),
        status: None,
    }))
}

fn stale(i: &ActionIntent, found: i64) -> Input {
    let Input::Outcome(mut o) = outcome(i, ActionResult::Stale) else { unreachable!() };
    o.policy_generation = Some(found);
    Input::Outcome(o)
}

fn abandoned_notes(work: &[Work]) -> Vec<String> {
    work.iter()
        .filter_map(|w| match w {
            Work::RecordEvent(e) if e.notice.reason == Reason::ActionAbandoned => Some(e.notice.note.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_intent_carries_the_view_it_was_judged_under() {
    let mut b = brain_leading(true);
    b.handle(policy_at(HIGH, 3), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let work = b.outgoing();
    let judged: Vec<_> =
        work.iter().filter_map(|w| if let Work::Act(a) = w { a.judged.clone() } else { None }).collect();
    assert_eq!(judged.len(), 1, "one suspension, its view filled in");
    assert_eq!(judged[0].policy_uid.as_deref(), Some("u-1"));
    assert_eq!(judged[0].generation, 3);
    assert!(judged[0].honours_exceptions, "a namespaced policy honours its own namespace's exceptions");
    assert_eq!(judged[0].snooze, None);
}

#[test]
fn a_firing_that_still_stands_under_the_new_generation_is_sent_again_under_it() {
    let mut b = brain_leading(true);
    b.handle(policy_at(HIGH, 1), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let issued = acts(&mut b);
    assert_eq!(issued.len(), 1);
    // Generation 2 adds a rule; `high` is unchanged, so its firing stands.
    b.handle(policy_at(&format!("{HIGH}{OTHER}"), 2), at_sec(2));
    b.handle(stale(&issued[0], 2), at_sec(2));
    assert!(abandoned_notes(&b.work).is_empty());
    b.work.clear();
    b.tick(at_sec(2));
    let work = b.outgoing();
    let again: Vec<_> =
        work.iter().filter_map(|w| if let Work::Act(a) = w { Some(a) } else { None }).collect();
    assert_eq!(again.len(), 1, "sent again at once");
    assert_eq!(again[0].id, issued[0].id, "the same intent");
    assert_eq!(again[0].judged.as_ref().map(|j| j.generation), Some(2), "under the generation now loaded");
}

#[test]
fn a_firing_whose_rule_changed_is_abandoned_and_the_job_told_why() {
    let mut b = brain_leading(true);
    b.handle(policy_at(HIGH, 1), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let issued = acts(&mut b);
    // Generation 2 raises the threshold: the rule is another, and under it the loss of 9 does not fire.
    b.handle(policy_at(&HIGH.replace("5.0", "100.0"), 2), at_sec(2));
    b.handle(stale(&issued[0], 2), at_sec(2));
    assert_eq!(
        abandoned_notes(&b.work),
        vec![
            "not suspended: policy p changed (generation 1 → 2) and under it rule high no longer fires as it did (rule high)"
        ]
    );
    b.work.clear();
    b.tick(at_sec(3));
    b.handle(job_reporting(9.0, at_sec(4)), at_sec(4));
    assert!(acts(&mut b).is_empty(), "nothing owed, and the rule as it now stands does not fire");
    assert_eq!(b.ledger.len(), 0);
}

#[test]
fn a_generation_that_cannot_be_loaded_abandons_the_intent() {
    let mut b = brain_leading(true);
    b.handle(policy_at(HIGH, 1), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let issued = acts(&mut b);
    // The executor found generation 2 but the brain still has 1 loaded (2 did not compile, say).
    b.handle(stale(&issued[0], 2), at_sec(2));
    let notes = abandoned_notes(&b.work);
    assert_eq!(notes.len(), 1);
    assert!(
        notes[0].starts_with("not suspended: policy p changed to generation 2, which cannot be used"),
        "{notes:?}"
    );
    assert_eq!(b.ledger.len(), 0, "not sent again and again");
}

#[test]
fn a_policy_replaced_under_its_name_starts_over() {
    let mut b = brain_leading(true);
    b.handle(policy_at(HIGH, 1), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    assert_eq!(acts(&mut b).len(), 1);
    // Deleted and created again (generation 1 again, another uid), unseen by the watch: the old one's
    // owed action goes with it, and the new one judges the job afresh.
    let Input::Policy(mut p) = policy_at(HIGH, 1) else { unreachable!() };
    p.uid = Some("u-2".into());
    b.handle(Input::Policy(p), at_sec(2));
    assert_eq!(b.ledger.len(), 0);
    b.handle(job_reporting(9.0, at_sec(3)), at_sec(3));
    assert_eq!(acts(&mut b).len(), 1, "the new policy's own firing");
}
