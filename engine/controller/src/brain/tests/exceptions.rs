//! ProgressPolicyExceptions: a hold until expiry, listed in the status; invalid ones; jobs wait for the list.

use super::*;

/// An exception holds a firing rule's suspension (the status lists it, with the job it holds), and on
/// the second it expires the rule acts; an invalid one is listed as such; jobs wait for the exceptions'
/// list.
#[test]
fn an_exception_holds_until_it_expires_and_the_status_says_so() {
    let mut b = brain();
    b.handle(Input::PoliciesListed(PolicyKind::Namespaced), at_sec(0));
    b.handle(Input::PoliciesListed(PolicyKind::Cluster), at_sec(0));
    assert!(!b.policies_listed(), "jobs wait for the exceptions too");
    b.handle(Input::ExceptionsListed, at_sec(0));
    assert!(b.policies_listed());
    b.handle(
        policy_input("    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n", None),
        at_sec(0),
    );
    b.handle(exception_input("eval", "high", at_sec(60)), at_sec(0));
    b.handle(job_reporting(2.0, at_sec(5)), at_sec(5));
    assert_eq!(actions(&mut b), Vec::<String>::new(), "held");
    let status = b.status_of(&key(), at_sec(10));
    let e = &status.exceptions[0];
    assert_eq!(
        (e.name.as_str(), e.state.as_str(), e.rules.clone()),
        ("ml/eval", "Active", vec!["high".to_string()])
    );
    assert_eq!(e.holding, vec!["ml/ft".to_string()]);
    assert_eq!(status.jobs[0].held, vec!["high: held by ProgressPolicyException ml/eval".to_string()]);
    // The rule acts on the second the exception expires, with no new report.
    while let Some(next) = b.next_tick().filter(|n| *n <= at_sec(61)) {
        b.tick(next);
    }
    assert_eq!(actions(&mut b), vec!["suspend ml/ft".to_string()]);
    let status = b.status_of(&key(), at_sec(61));
    assert_eq!(status.exceptions[0].state, "Expired");
    assert!(status.exceptions[0].holding.is_empty());
    // An invalid one is listed under the policy it names, and honoured nowhere.
    let bad = Input::Exception(Box::new(crate::messages::ExceptionInput {
        key: trainwarden_core::ExceptionRef { namespace: "ml".into(), name: "bad".into() },
        policy_names: vec!["ml/p".into()],
        compiled: Err("spec.exceptions[0].policyName: bad".into()),
    }));
    b.handle(bad, at_sec(62));
    let status = b.status_of(&key(), at_sec(62));
    let listed: Vec<(&str, &str)> =
        status.exceptions.iter().map(|e| (e.name.as_str(), e.state.as_str())).collect();
    assert_eq!(listed, [("ml/eval", "Expired"), ("ml/bad", "Invalid")]);
}
