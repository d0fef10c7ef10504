//! Policies and what a firing sends out: invalid scripts, rule errors, a notify to no receiver, the Events
//! of a resolution, outcomes in the status.

use super::*;

#[test]
fn an_invalid_script_is_reported_with_its_position_and_nothing_is_loaded() {
    let mut b = brain();
    b.handle(
        policy_input("    - {name: bad, when: 'metric(\"loss\") >', actions: [{suspend: {}}]}\n", None),
        at_sec(0),
    );
    let status = b.status_of(&key(), at_sec(0));
    let ready = status.conditions.iter().find(|c| c.type_ == CONDITION_READY).unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InvalidPolicy"));
    assert!(ready.message.contains("spec.rules[0].when: line 1:"), "{}", ready.message);
    assert_eq!(status.matched_jobs, None);
}

#[test]
fn a_rule_that_fails_at_evaluation_makes_the_policy_not_ready_while_it_fails() {
    let mut b = brain();
    // Valid (the duration is computed), but fails on every evaluation.
    b.handle(
        policy_input(
            "    - {name: odd, when: 'let d = \"5\" + \"x\"; stalled(d)', actions: [{suspend: {}}]}\n",
            None,
        ),
        at_sec(0),
    );
    let ready_of = |b: &mut Brain, at| {
        let status = b.status_of(&key(), at);
        let c = status.conditions.iter().find(|c| c.type_ == CONDITION_READY).unwrap().clone();
        (c.status, c.reason, c.message)
    };
    assert_eq!(ready_of(&mut b, at_sec(0)).0, "True");
    b.handle(job_reporting(1.0, at_sec(1)), at_sec(1));
    b.handle(job_reporting(0.9, at_sec(2)), at_sec(2));
    let (status, reason, message) = ready_of(&mut b, at_sec(3));
    assert_eq!((status.as_str(), reason.as_str()), ("False", "RuleErrors"));
    assert!(
        message.starts_with(
            "rule odd cannot be evaluated (failing since 2026-11-27T17:00:01Z, first on ml/ft): rule \"odd\", line 1:"
        ),
        "{message}"
    );
    assert!(message.contains("invalid duration \"5x\""), "{message}");
    // Forgotten once it has not failed for a while.
    let later = at_sec(2 + books::RULE_ERROR_MEMORY.as_secs() as i64 + 1);
    assert_eq!(ready_of(&mut b, later).1, "Evaluating");
}

#[test]
fn a_notify_to_no_receiver_says_nothing_was_sent_instead_of_queueing() {
    let mut b = brain();
    b.handle(
        policy_input(
            "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{notify: {to: team}}]}\n",
            None,
        ),
        at_sec(0),
    );
    b.handle(job_reporting(9.0, at_sec(1)), at_sec(1));
    let work: Vec<String> = b
        .work
        .drain(..)
        .filter_map(|w| match w {
            Work::Act(i) => Some(format!("act {}", i.action.kind())),
            Work::RecordEvent(e) if e.notice.reason == Reason::NotificationNotConfigured => {
                Some(e.notice.note)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        work,
        [
            "ProgressPolicy ml/p rule high: notify \"team\" sends nothing: the policy declares no such receiver (add spec.receivers)"
        ]
    );
    let status = b.status_of(&key(), at_sec(2));
    assert_eq!(status.action_counts.get("notify/refused"), Some(&1));
}

#[test]
fn the_resolved_event_says_why() {
    let mut b = brain();
    b.handle(policy_input("    - {name: high, when: 'metric(\"loss\") > 5.0'}\n", None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(0)), at_sec(0));
    b.handle(job_reporting(1.0, at_sec(1)), at_sec(1));
    let notes: Vec<String> = b
        .work
        .drain(..)
        .filter_map(|w| match w {
            Work::RecordEvent(e) if e.notice.reason == Reason::RuleResolved => Some(e.notice.note),
            _ => None,
        })
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(
            "ProgressPolicy ml/p rule high resolved [Enforce]: the condition no longer holds (it fired: "
        ),
        "{}",
        notes[0]
    );
}

#[test]
fn outcomes_feed_last_action_savings_and_counts() {
    let mut b = brain();
    b.handle(
        policy_input("    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n", None),
        at_sec(0),
    );
    let outcome =
        suspend_outcome("ProgressPolicy:ml:p:1:high:ml:ft:0:1:0", Mode::Enforce, ActionResult::Done, 8.0);
    b.handle(Input::Outcome(Box::new(outcome)), at_sec(5));
    let status = b.status_of(&key(), at_sec(6));
    assert_eq!(status.last_action.as_deref(), Some("suspend ml/ft (high)"));
    assert_eq!((status.gpu_hours_saved, status.dollars_saved), (Some(8.0), Some(80.0)));
    assert_eq!(status.action_counts.get("suspend/done"), Some(&1));
    assert_eq!(status.jobs[0].last_action.as_deref(), Some("suspend (high)"));
    // Unchanged statuses are not sent twice.
    assert_eq!(b.changed_statuses(at_sec(6)).len(), 1);
    assert!(b.changed_statuses(at_sec(7)).is_empty());
}
