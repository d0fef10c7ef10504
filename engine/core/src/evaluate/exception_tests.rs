//! ProgressPolicyExceptions: held while in force, released on the second of expiry (mid-firing), on
//! deletion, on no longer matching; only the rules and jobs named; cluster policies honour only the
//! namespaces they allow; a snooze takes the hold over; a restart keeps the hold.

use std::collections::BTreeMap;

use super::*;
use crate::evaluate::{ActionIntent, RuleState};
use crate::input::sample::{JobSnapshot, Metric, ProgressSample, SampleSource};
use crate::policy::exception::{CompiledException, ExceptionRef, parse_exceptions};
use crate::testing::{Harness, at_min, cluster_policy, policy};

/// `high` fires while loss > 1, suspends and notifies.
const HIGH: &str =
    "{name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}, {notify: {to: team}}]}";
/// `other` fires while loss > 1 and only notifies.
const OTHER: &str = "{name: other, when: 'metric(\"loss\") > 1.0', actions: [{notify: {to: team}}]}";

/// Policy `ml/p` with the two rules.
fn policy_yaml() -> String {
    policy("p").rule(HIGH).rule(OTHER).yaml()
}

/// The same rules in a ClusterProgressPolicy that honours the exceptions of `allowed`.
fn cluster_policy_yaml(allowed: &str) -> String {
    let exceptions = format!("exceptions: {{allowedNamespaces: [{allowed}]}}");
    cluster_policy("c").spec(&exceptions).rule(HIGH).rule(OTHER).yaml()
}

fn exception(name: &str, policy: &str, rules: &str, until: Timestamp) -> CompiledException {
    let yaml = format!(
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicyException\nmetadata: {{name: {name}, namespace: ml}}\n\
spec:\n  exceptions: [{{policyName: {policy}, ruleNames: [{rules}]}}]\n  match: {{selector: {{matchLabels: {{team: eval}}}}}}\n  expires: \"{until}\"\n"
    );
    parse_exceptions(&yaml, "e.yaml").unwrap_or_else(|e| panic!("{e}")).remove(0)
}

/// The evaluator harness with one job, `ml/ft` of team eval, on a clock in minutes.
struct World {
    h: Harness,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

impl World {
    fn with(policy: &str) -> World {
        let labels = BTreeMap::from([("team".to_string(), "eval".to_string())]);
        World { h: Harness::new(&[policy]), labels, annotations: BTreeMap::new() }
    }

    fn key() -> JobKey {
        JobKey::new("ml", "ft")
    }

    fn advance(&mut self, at: Timestamp) {
        self.h.advance(at);
    }

    fn sample(&mut self, minute: i64, loss: f64) {
        self.advance(at_min(minute));
        let mut snap = JobSnapshot::new(World::key());
        snap.running_since = Some(at_min(0));
        snap.labels = self.labels.clone();
        snap.annotations = self.annotations.clone();
        let mut s = ProgressSample::empty(at_min(minute), SampleSource::TrainerStatus);
        s.metrics.push(Metric { name: "loss".into(), value: loss });
        snap.sample = Some(s);
        self.h.ev.observe(snap, at_min(minute), &mut self.h.events);
    }

    fn except(&mut self, minute: i64, e: CompiledException) {
        self.advance(at_min(minute));
        self.h.ev.upsert_exception(e, at_min(minute), &mut self.h.events);
    }

    fn intents(&self) -> Vec<(Timestamp, &str, &str)> {
        (self.h.events.iter())
            .filter_map(|e| if let Event::Intent(i) = e { Some(i) } else { None })
            .map(|i: &ActionIntent| (i.at, i.rule.as_str(), i.action.kind().as_str()))
            .collect()
    }

    fn held(&self) -> Vec<(Timestamp, &str, Option<String>)> {
        (self.h.events.iter())
            .filter_map(|e| match e {
                Event::Held { at, rule, exception, .. } => {
                    Some((*at, rule.as_str(), exception.as_ref().map(ToString::to_string)))
                }
                _ => None,
            })
            .collect()
    }

    fn ended(&self) -> Vec<(Timestamp, &str, ExceptionEnd, bool)> {
        (self.h.events.iter())
            .filter_map(|e| match e {
                Event::ExceptionEnded { at, rule, why, released, .. } => {
                    Some((*at, rule.as_str(), *why, *released))
                }
                _ => None,
            })
            .collect()
    }
}

#[test]
fn an_excepted_rule_fires_visibly_and_acts_on_the_second_its_exception_expires() {
    let mut w = World::with(&policy_yaml());
    w.except(0, exception("eval", "ml/p", "high", at_min(60)));
    w.sample(10, 2.0);
    let p = w.h.ev.policies().next().unwrap().reference.clone();
    assert_eq!(w.h.ev.rule_state(&World::key(), &p, "high"), Some(RuleState::Firing), "evaluated as ever");
    assert_eq!(w.held(), vec![(at_min(10), "high", Some("ml/eval".to_string()))]);
    assert_eq!(w.intents(), vec![(at_min(10), "other", "notify")], "only the rule it names is held");
    assert_eq!(
        w.h.ev.excepted_by(&World::key(), &p, "high").map(ToString::to_string).as_deref(),
        Some("ml/eval")
    );
    w.sample(30, 2.0);
    assert_eq!(w.held().len(), 1, "one Held per firing");
    // Nothing more is reported: the timer, not a sample, ends it on its second.
    w.advance(at_min(90));
    assert_eq!(w.ended(), vec![(at_min(60), "high", ExceptionEnd::Expired, true)]);
    let at_60: Vec<_> = w.intents().into_iter().filter(|(at, ..)| *at == at_min(60)).collect();
    assert_eq!(at_60, vec![(at_min(60), "high", "suspend"), (at_min(60), "high", "notify")]);
    assert_eq!(w.h.ev.excepted_by(&World::key(), &p, "high"), None);
}

#[test]
fn a_rule_that_recovers_under_its_exception_does_nothing_when_it_ends() {
    let mut w = World::with(&policy_yaml());
    w.except(0, exception("eval", "ml/p", "", at_min(60)));
    w.sample(10, 2.0);
    w.sample(20, 0.5);
    w.advance(at_min(90));
    assert!(w.intents().is_empty(), "{:?}", w.intents());
    assert!(w.ended().is_empty(), "a resolved rule is no longer held: {:?}", w.ended());
}

#[test]
fn deleting_or_narrowing_an_exception_releases_at_once() {
    let mut w = World::with(&policy_yaml());
    w.except(0, exception("eval", "ml/p", "", at_min(600)));
    w.sample(10, 2.0);
    assert_eq!(w.held().len(), 2);
    // Narrowed to the other rule: `high` is released now, `other` stays held.
    w.except(20, exception("eval", "ml/p", "other", at_min(600)));
    assert_eq!(w.ended(), vec![(at_min(20), "high", ExceptionEnd::NoLongerApplies, true)]);
    assert_eq!(w.intents(), vec![(at_min(20), "high", "suspend"), (at_min(20), "high", "notify")]);
    w.h.ev.remove_exception(
        &ExceptionRef { namespace: "ml".into(), name: "eval".into() },
        at_min(30),
        &mut w.h.events,
    );
    assert_eq!(w.ended()[1], (at_min(30), "other", ExceptionEnd::Removed, true));
    assert_eq!(w.intents().last(), Some(&(at_min(30), "other", "notify")));
}

#[test]
fn an_exception_reaches_only_the_jobs_it_matches() {
    let mut w = World::with(&policy_yaml());
    w.labels.clear();
    w.except(0, exception("eval", "ml/p", "high", at_min(60)));
    w.sample(10, 2.0);
    assert!(w.held().is_empty(), "the job lacks team=eval");
    assert_eq!(w.intents().len(), 3);
}

#[test]
fn a_cluster_policy_honours_only_the_namespaces_its_admin_allows() {
    // Allowed: held.
    let mut w = World::with(&cluster_policy_yaml("ml"));
    w.except(0, exception("eval", "c", "high", at_min(60)));
    w.sample(10, 2.0);
    assert_eq!(w.held(), vec![(at_min(10), "high", Some("ml/eval".to_string()))]);
    // Not allowed (another namespace listed): the exception is ignored, the rule acts.
    let mut w = World::with(&cluster_policy_yaml("other-team"));
    w.except(0, exception("eval", "c", "high", at_min(60)));
    w.sample(10, 2.0);
    assert!(w.held().is_empty());
    assert!(w.intents().contains(&(at_min(10), "high", "suspend")));
    // A namespaced policy's name does not reach a cluster policy of the same name.
    let mut w = World::with(&cluster_policy_yaml("ml"));
    w.except(0, exception("eval", "ml/c", "high", at_min(60)));
    w.sample(10, 2.0);
    assert!(w.held().is_empty());
}

#[test]
fn a_snooze_that_outlasts_the_exception_takes_the_hold_over() {
    let mut w = World::with(&policy_yaml());
    w.annotations.insert(SNOOZE_ANNOTATION.into(), at_min(120).to_string());
    w.except(0, exception("eval", "ml/p", "high", at_min(60)));
    w.sample(10, 2.0);
    w.advance(at_min(90));
    assert_eq!(w.ended(), vec![(at_min(60), "high", ExceptionEnd::Expired, false)]);
    assert!(!w.intents().iter().any(|(_, r, _)| *r == "high"), "still snoozed: {:?}", w.intents());
    w.advance(at_min(150));
    let high: Vec<_> = w.intents().into_iter().filter(|(_, r, _)| *r == "high").collect();
    assert_eq!(
        high,
        vec![(at_min(120), "high", "suspend"), (at_min(120), "high", "notify")],
        "the snooze's end"
    );
}

#[test]
fn a_restarted_evaluator_keeps_the_hold_and_releases_at_expiry() {
    let mut w = World::with(&policy_yaml());
    w.except(0, exception("eval", "ml/p", "high", at_min(60)));
    w.sample(10, 2.0);
    let p = w.h.ev.policies().next().unwrap().reference.clone();
    let memories = w.h.ev.memories(&p, at_min(20));
    assert!(memories.iter().any(|m| m.excepted_by.as_deref() == Some("ml/eval")), "{memories:?}");
    // A new evaluator (a restart, a new leader) restores the rules, then learns the exception again.
    let mut after = World::with(&policy_yaml());
    after.h.ev.restore(&p, memories);
    after.except(20, exception("eval", "ml/p", "high", at_min(60)));
    after.sample(30, 2.0);
    assert!(after.intents().iter().all(|(_, r, _)| *r != "high"), "{:?}", after.intents());
    after.advance(at_min(90));
    assert_eq!(after.ended(), vec![(at_min(60), "high", ExceptionEnd::Expired, true)]);
    assert!(after.intents().contains(&(at_min(60), "high", "suspend")));
}

#[test]
fn an_exception_that_comes_after_a_snooze_held_the_firing_holds_it_past_the_snooze() {
    let mut w = World::with(&policy_yaml());
    w.annotations.insert(SNOOZE_ANNOTATION.into(), at_min(60).to_string());
    w.sample(10, 2.0);
    w.except(20, exception("eval", "ml/p", "high", at_min(120)));
    w.advance(at_min(100));
    assert!(!w.intents().iter().any(|(_, r, a)| *r == "high" && *a == "suspend"), "not at the snooze's end");
    w.advance(at_min(150));
    let high: Vec<_> = w.intents().into_iter().filter(|(_, r, _)| *r == "high").collect();
    assert_eq!(
        high,
        vec![(at_min(120), "high", "suspend"), (at_min(120), "high", "notify")],
        "at the exception's end"
    );
}

#[test]
fn a_grace_running_when_an_exception_comes_acts_on_the_second_it_expires() {
    let graced = policy_yaml()
        .replace("[{suspend: {}}, {notify: {to: team}}]", "[{notify: {to: team}}, {suspend: {grace: 30m}}]");
    let mut w = World::with(&graced);
    w.sample(10, 2.0);
    assert_eq!(w.intents().into_iter().filter(|(_, r, _)| *r == "high").count(), 1, "the warning");
    w.except(20, exception("eval", "ml/p", "high", at_min(90)));
    w.advance(at_min(80));
    assert!(!w.intents().iter().any(|(_, _, a)| *a == "suspend"), "not when the grace ends (40m): excepted");
    w.advance(at_min(200));
    let suspends: Vec<_> = w.intents().into_iter().filter(|(_, _, a)| *a == "suspend").collect();
    assert_eq!(suspends, vec![(at_min(90), "high", "suspend")], "once, on the exception's second");
    assert_eq!(w.ended(), vec![(at_min(90), "high", ExceptionEnd::Expired, true)]);
}

#[test]
fn an_exception_and_a_snooze_ending_on_one_second_release_once() {
    let mut w = World::with(&policy_yaml());
    w.annotations.insert(SNOOZE_ANNOTATION.into(), at_min(60).to_string());
    w.except(0, exception("eval", "ml/p", "high", at_min(60)));
    w.sample(10, 2.0);
    w.advance(at_min(120));
    let high: Vec<_> = w.intents().into_iter().filter(|(_, r, _)| *r == "high").collect();
    assert_eq!(high, vec![(at_min(60), "high", "suspend"), (at_min(60), "high", "notify")], "one release");
}

#[test]
fn a_firing_a_limit_holds_waits_for_the_exception_too() {
    let limited =
        policy_yaml().replace("  mode: Enforce\n", "  mode: Enforce\n  limits: {maxActionsPerHour: 1}\n");
    let mut w = World::with(&limited);
    // Another job takes the hour's one slot at 0m.
    let mut other = JobSnapshot::new(JobKey::new("ml", "first"));
    other.running_since = Some(at_min(0));
    let mut s = ProgressSample::empty(at_min(0), SampleSource::TrainerStatus);
    s.metrics.push(Metric { name: "loss".into(), value: 2.0 });
    other.sample = Some(s);
    w.h.ev.observe(other, at_min(0), &mut w.h.events);
    w.sample(10, 2.0);
    assert!(!w.intents().iter().any(|(at, r, _)| *at == at_min(10) && *r == "high"), "limited");
    w.except(20, exception("eval", "ml/p", "high", at_min(120)));
    w.sample(70, 2.0); // the slot frees at 60m
    w.sample(100, 2.0);
    assert!(
        !w.intents().iter().any(|(at, r, a)| *at > at_min(0) && *r == "high" && *a == "suspend"),
        "{:?}",
        w.intents()
    );
    w.advance(at_min(150));
    let after: Vec<_> =
        w.intents().into_iter().filter(|(at, r, _)| *at > at_min(0) && *r == "high").collect();
    assert_eq!(after, vec![(at_min(120), "high", "suspend"), (at_min(120), "high", "notify")]);
}
