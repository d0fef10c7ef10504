//! Hand-over: a follower keeps what it owes and does it first when it leads; failures are retried while
//! the rule wants them; the leader's status settles a follower's intents.

use super::*;

fn policy(status: Option<ProgressPolicyStatus>) -> Input {
    policy_input("    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n", status)
}

/// Hole 1 of the reliability issue: a follower's skipped intents were dropped, so a leader lost between
/// firing and acting left the job running.
#[test]
fn a_follower_keeps_what_it_could_not_do_and_does_it_first_when_it_leads() {
    let mut b = brain_leading(false);
    b.handle(policy(None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let fired = acts(&mut b);
    assert_eq!(fired.len(), 1);
    b.handle(outcome(&fired[0], ActionResult::NotLeader), at_sec(1));
    b.tick(at_sec(100));
    assert!(acts(&mut b).is_empty(), "nothing is retried while following");
    b.handle(job_reporting(9.5, at_sec(2)), at_sec(2));
    b.work.clear();
    b.lead(true);
    let inherited = acts(&mut b);
    assert_eq!(inherited.iter().map(|i| &i.id).collect::<Vec<_>>(), vec![&fired[0].id]);
    b.handle(outcome(&fired[0], ActionResult::AlreadyDone), at_sec(3));
    let status = b.status_of(&key(), at_sec(3));
    assert_eq!(status.gpu_hours_saved, Some(8.0), "found done by its id: counted once");
    assert_eq!(status.rule_states[0].state, RuleState::Firing);
    b.lead(false);
    b.lead(true);
    assert!(acts(&mut b).is_empty(), "settled: nothing left to inherit");
}

#[test]
fn a_failed_action_is_tried_again_with_a_growing_wait_until_its_rule_stops_wanting_it() {
    let mut b = brain_leading(true);
    b.handle(policy(None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(0)), at_sec(0));
    let fired = acts(&mut b);
    b.handle(outcome(&fired[0], ActionResult::Failed), at_sec(0));
    assert_eq!(b.next_tick(), Some(at_sec(2)));
    b.tick(at_sec(2));
    assert_eq!(acts(&mut b)[0].id, fired[0].id);
    b.handle(outcome(&fired[0], ActionResult::Failed), at_sec(3));
    assert_eq!(b.next_tick(), Some(at_sec(7)), "then 4 s");
    let status = b.status_of(&key(), at_sec(3));
    assert_eq!(status.rule_states[0].state, RuleState::Pending, "persisted as due while owed");
    // The rule resolves: the owed suspension is no longer wanted.
    b.handle(job_reporting(1.0, at_sec(5)), at_sec(5));
    b.work.clear();
    b.tick(at_sec(7));
    assert!(acts(&mut b).is_empty());
    assert!(b.ledger.is_empty());
    assert_eq!(b.ledger.next_due(), None);
}

#[test]
fn the_leaders_status_settles_a_followers_intents_and_its_totals_carry_over() {
    let mut b = brain_leading(false);
    b.handle(policy(None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let fired = acts(&mut b);
    b.handle(outcome(&fired[0], ActionResult::NotLeader), at_sec(1));
    // The leader performed it and wrote status: the firing as settled, its totals.
    let leaders = ProgressPolicyStatus {
        gpu_hours_saved: Some(20.0),
        action_counts: [("suspend/done".to_string(), 3)].into(),
        rule_states: vec![RuleMemory {
            // The leader's own time (it fired a moment before this replica): settled by the firing count.
            since: Some(at_sec(0)),
            firings: 1,
            last_issued: vec![Some(at_sec(0))],
            ..memory("ml/ft", "high", RuleState::Firing)
        }],
        ..Default::default()
    };
    b.handle(policy(Some(leaders)), at_sec(2));
    b.lead(true);
    assert!(acts(&mut b).is_empty(), "the leader did it: nothing inherited");
    let status = b.status_of(&key(), at_sec(3));
    assert_eq!(status.gpu_hours_saved, Some(20.0));
    assert_eq!(status.action_counts.get("suspend/done"), Some(&3));
}

#[test]
fn a_deleted_job_takes_its_owed_actions_with_it() {
    let mut b = brain_leading(false);
    b.handle(policy(None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let fired = acts(&mut b);
    b.handle(outcome(&fired[0], ActionResult::NotLeader), at_sec(1));
    b.handle(Input::JobGone(JobKey::new("ml", "ft")), at_sec(2));
    b.lead(true);
    assert!(acts(&mut b).is_empty());
    assert!(b.ledger.is_empty());
}
