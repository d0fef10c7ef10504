//! Restart safety: restored memories keep their deadlines, an action in flight is redone, actions that stop
//! the job go last.

use super::*;

#[test]
fn a_restored_pending_rule_fires_at_its_original_deadline() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}]}\n";
    let status = ProgressPolicyStatus {
        rule_states: vec![RuleMemory {
            job: "ml/ft".into(),
            rule: "high".into(),
            state: RuleState::Pending,
            since: Some(t(0)),
            cleared_at: None,
            firings: 0,
            last_issued: vec![],
            rule_hash: None,
            held: None,
            deferred: vec![],
            snooze_held: false,
            excepted_by: None,
        }],
        ..Default::default()
    };
    let mut b = brain();
    b.handle(policy_input(rules, Some(status)), t(4));
    b.handle(job_reporting(9.0, t(5)), t(6));
    assert!(actions(&mut b).is_empty());
    assert_eq!(b.next_tick(), Some(t(10)), "the timer is the original deadline");
    b.tick(t(10));
    assert_eq!(actions(&mut b), vec!["suspend ml/ft"]);
}

/// A controller that dies between issuing a suspension and performing it must not remember it as done.
#[test]
fn an_action_in_flight_is_persisted_as_due_and_redone_after_a_restart() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}]}\n";
    let mut b = brain();
    b.handle(policy_input(rules, None), t(0));
    b.handle(job_reporting(9.0, t(0)), t(0));
    b.tick(t(10));
    let issued: Vec<ActionIntent> =
        b.work.drain(..).filter_map(|w| if let Work::Act(i) = w { Some(*i) } else { None }).collect();
    assert_eq!(issued.len(), 1);
    // No outcome yet: persisted as pending since t(0), due now.
    let status = b.status_of(&key(), t(10));
    let m = &status.rule_states[0];
    assert_eq!((m.state, m.since, m.firings), (RuleState::Pending, Some(t(0)), 0));
    assert_eq!(m.last_issued, vec![None]);

    // The restarted controller fires at once, with the same intent id.
    let mut after = brain();
    after.handle(policy_input(rules, Some(status)), t(12));
    after.handle(job_reporting(9.0, t(11)), t(12));
    let redone: Vec<String> =
        after.work.drain(..).filter_map(|w| if let Work::Act(i) = w { Some(i.id) } else { None }).collect();
    assert_eq!(redone, vec![issued[0].id.clone()]);

    // Once the executor reports back, the memory is "firing".
    let outcome = Outcome {
        intent: issued[0].id.clone(),
        policy: key(),
        job: JobKey::new("ml", "ft"),
        rule: "high".into(),
        action: crate::messages::ExecutedAction::Suspend,
        mode: Mode::Enforce,
        result: ActionResult::Done,
        message: String::new(),
        at: t(10),
        savings: None,
    };
    b.handle(Input::Outcome(Box::new(outcome)), t(11));
    let m = &b.status_of(&key(), t(11)).rule_states[0];
    assert_eq!((m.state, m.firings), (RuleState::Firing, 1));
}

#[test]
fn actions_that_stop_the_job_are_performed_last() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}, {event: {}}, {annotate: {key: k}}]}\n";
    let mut b = brain();
    b.handle(policy_input(rules, None), t(0));
    b.handle(job_reporting(9.0, t(0)), t(0));
    assert_eq!(actions(&mut b), vec!["event ml/ft", "annotate ml/ft", "suspend ml/ft"]);
}
