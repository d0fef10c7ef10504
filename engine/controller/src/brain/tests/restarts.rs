//! Restart safety: restored memories keep their deadlines, an action in flight is redone, actions that stop
//! the job go last.

use super::*;

#[test]
fn a_restored_pending_rule_fires_at_its_original_deadline() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}]}\n";
    let status = ProgressPolicyStatus {
        rule_states: vec![RuleMemory {
            since: Some(at_sec(0)),
            ..memory("ml/ft", "high", RuleState::Pending)
        }],
        ..Default::default()
    };
    let mut b = brain();
    b.handle(policy_input(rules, Some(status)), at_sec(4));
    b.handle(job_reporting(9.0, at_sec(5)), at_sec(6));
    assert!(actions(&mut b).is_empty());
    assert_eq!(b.next_tick(), Some(at_sec(10)), "the timer is the original deadline");
    b.tick(at_sec(10));
    assert_eq!(actions(&mut b), vec!["suspend ml/ft"]);
}

/// A controller that dies between issuing a suspension and performing it must not remember it as done.
#[test]
fn an_action_in_flight_is_persisted_as_due_and_redone_after_a_restart() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}]}\n";
    let mut b = brain();
    b.handle(policy_input(rules, None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(0)), at_sec(0));
    b.tick(at_sec(10));
    let issued: Vec<ActionIntent> =
        b.work.drain(..).filter_map(|w| if let Work::Act(i) = w { Some(i.intent) } else { None }).collect();
    assert_eq!(issued.len(), 1);
    // No outcome yet: persisted as pending since at_sec(0), due now.
    let status = b.status_of(&key(), at_sec(10));
    let m = &status.rule_states[0];
    assert_eq!((m.state, m.since, m.firings), (RuleState::Pending, Some(at_sec(0)), 0));
    assert_eq!(m.last_issued, vec![None]);

    // The restarted controller fires at once, with the same intent id.
    let mut after = brain();
    after.handle(policy_input(rules, Some(status)), at_sec(12));
    after.handle(job_reporting(9.0, at_sec(11)), at_sec(12));
    let redone: Vec<String> = after
        .work
        .drain(..)
        .filter_map(|w| if let Work::Act(i) = w { Some(i.intent.id) } else { None })
        .collect();
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
        at: at_sec(10),
        savings: None,
        policy_generation: None,
        wait_until: None,
    };
    b.handle(Input::Outcome(Box::new(outcome)), at_sec(11));
    let m = &b.status_of(&key(), at_sec(11)).rule_states[0];
    assert_eq!((m.state, m.firings), (RuleState::Firing, 1));
}

#[test]
fn actions_that_stop_the_job_are_performed_last() {
    let rules = "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}, {event: {}}, {annotate: {key: k}}]}\n";
    let mut b = brain();
    b.handle(policy_input(rules, None), at_sec(0));
    b.handle(job_reporting(9.0, at_sec(0)), at_sec(0));
    assert_eq!(actions(&mut b), vec!["event ml/ft", "annotate ml/ft", "suspend ml/ft"]);
}
