//! Counting stopping actions once across restarts and hand-overs.

use super::*;

const RULES: &str =
    "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{annotate: {key: k}}, {suspend: {}}]}\n";

/// ml/ft reporting a high loss, suspended, its last-action record naming `id` (issued at `at`).
fn suspended_job_recording(id: &str, at: Timestamp) -> Input {
    let Input::Job(job) = job_reporting(9.0, at) else { unreachable!() };
    let mut snapshot = job.snapshot.unwrap();
    snapshot.phase = trainwarden_core::JobPhase::Suspended;
    snapshot.annotations.insert(
        crate::LAST_ACTION_ANNOTATION.into(),
        serde_json::json!({
            "id": id, "action": "suspend", "policy": "ProgressPolicy ml/p", "rule": "high",
            "reason": "loss high", "at": at.to_string(), "gpuHours": 8.0,
        })
        .to_string(),
    );
    watched(snapshot, job.uid.as_deref())
}

fn suspensions(status: &ProgressPolicyStatus) -> i64 {
    status.action_counts.iter().filter(|(k, _)| k.starts_with("suspend/")).map(|(_, n)| n).sum()
}

/// The double count of the reliability notes: a firing whose suspension was done while a sibling action
/// was still owed is persisted as due; the replica that redoes it finds the suspension done, and the
/// status it restored already counts it.
#[test]
fn a_firing_redone_after_a_restart_does_not_count_its_suspension_again() {
    let mut b = brain_leading(true);
    b.handle(policy_input(RULES, None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let fired = acts(&mut b);
    assert_eq!(
        fired.iter().map(|i| i.action.kind()).collect::<Vec<_>>(),
        [ActionKind::Annotate, ActionKind::Suspend]
    );
    b.handle(outcome(&fired[1], ActionResult::Done), at_sec(2));
    b.handle(outcome(&fired[0], ActionResult::Failed), at_sec(2));
    let status = b.status_of(&key(), at_sec(2));
    assert_eq!(status.rule_states[0].state, RuleState::Pending, "the annotation is owed: persisted as due");
    assert_eq!((status.gpu_hours_saved, suspensions(&status)), (Some(8.0), 1));
    let listed = status.counted_actions.clone().expect("the status lists what it counts");
    assert_eq!(listed.actions.iter().map(|a| &a.id).collect::<Vec<_>>(), [&fired[1].id]);

    let mut after = brain_leading(true);
    after.handle(policy_input(RULES, Some(status)), at_sec(5));
    after.handle(Input::JobsListed, at_sec(5));
    after.handle(job_reporting(9.0, at_sec(6)), at_sec(6));
    let redone = acts(&mut after);
    assert_eq!(
        redone.iter().map(|i| &i.id).collect::<Vec<_>>(),
        fired.iter().map(|i| &i.id).collect::<Vec<_>>()
    );
    after.handle(outcome(&redone[1], ActionResult::AlreadyDone), at_sec(7));
    after.handle(outcome(&redone[0], ActionResult::Done), at_sec(7));
    let status = after.status_of(&key(), at_sec(7));
    assert_eq!(status.gpu_hours_saved, Some(8.0), "counted once");
    assert_eq!(suspensions(&status), 1, "{:?}", status.action_counts);
    assert_eq!(status.action_counts.get("annotate/done"), Some(&1));
}

/// The undercount of the reliability notes: the leader suspended the job and was lost before its status
/// counted it; the replica that takes over started after, so the job's rule does not fire again for it.
#[test]
fn a_suspension_no_status_counted_is_counted_once_by_the_replica_that_takes_over() {
    // The old leader's last status: nothing counted since at_sec(0).
    let mut old = brain_leading(true);
    old.handle(policy_input(RULES, None), at_sec(0));
    let inherited = old.status_of(&key(), at_sec(0));
    assert!(inherited.gpu_hours_saved.is_none());

    for leads_before_the_list in [false, true] {
        let mut b = brain_leading(leads_before_the_list);
        b.handle(policy_input(RULES, Some(inherited.clone())), at_sec(10));
        b.handle(suspended_job_recording("lost-leaders-intent", at_sec(3)), at_sec(10));
        b.handle(Input::JobsListed, at_sec(10));
        b.lead(true);
        let status = b.status_of(&key(), at_sec(11));
        assert_eq!(status.gpu_hours_saved, Some(8.0), "leads before the list: {leads_before_the_list}");
        assert_eq!(status.action_counts.get("suspend/already_done"), Some(&1));
        assert_eq!(b.metrics.actions_found_uncounted.get(), 1);
        // Leading again, or a replica that inherits this status: counted, not again.
        b.lead(false);
        b.lead(true);
        let mut next = brain_leading(false);
        next.handle(policy_input(RULES, Some(b.status_of(&key(), at_sec(12)))), at_sec(12));
        next.handle(suspended_job_recording("lost-leaders-intent", at_sec(3)), at_sec(12));
        next.handle(Input::JobsListed, at_sec(12));
        next.lead(true);
        for s in [b.status_of(&key(), at_sec(13)), next.status_of(&key(), at_sec(13))] {
            assert_eq!((s.gpu_hours_saved, suspensions(&s)), (Some(8.0), 1));
        }
    }
}

#[test]
fn a_suspension_recorded_before_the_status_listed_counted_actions_is_not_counted() {
    // A status from before the list (an upgrade): its totals may include anything performed before.
    let old = ProgressPolicyStatus { gpu_hours_saved: Some(8.0), ..Default::default() };
    let mut b = brain_leading(false);
    b.handle(policy_input(RULES, Some(old)), at_sec(10));
    b.handle(suspended_job_recording("counted-by-the-old-version", at_sec(3)), at_sec(10));
    b.handle(Input::JobsListed, at_sec(10));
    b.lead(true);
    let status = b.status_of(&key(), at_sec(11));
    assert_eq!((status.gpu_hours_saved, suspensions(&status)), (Some(8.0), 0));
}

/// Two replicas that both believe they lead (at a Lease's expiry) perform the same apply: the second
/// "done" of one intent id is not counted again.
#[test]
fn the_same_intent_done_twice_counts_once() {
    let mut b = brain_leading(true);
    b.handle(policy_input(RULES, None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let fired = acts(&mut b);
    b.handle(outcome(&fired[1], ActionResult::Done), at_sec(2));
    b.handle(outcome(&fired[1], ActionResult::Done), at_sec(2));
    let status = b.status_of(&key(), at_sec(2));
    assert_eq!((status.gpu_hours_saved, suspensions(&status)), (Some(8.0), 1));
}
