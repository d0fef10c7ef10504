//! ProgressPolicyExceptions: held while in force, released on the second of expiry (mid-firing), on
//! deletion, on no longer matching; only the rules and jobs named; cluster policies honour only the
//! namespaces they allow; a snooze takes the hold over; a restart keeps the hold.

use std::collections::BTreeMap;

use super::*;
use crate::evaluate::{ActionIntent, EngineConfig, Evaluator, RuleState};
use crate::input::sample::{JobSnapshot, Metric, ProgressSample, SampleSource};
use crate::policy::compile::{compile, parse_documents};
use crate::policy::exception::{CompiledException, ExceptionRef, parse_exceptions};

/// 2026-11-27T17:00:00Z plus `minutes`.
fn t(minutes: i64) -> Timestamp {
    Timestamp::from_second(1_795_798_800 + minutes * 60).unwrap()
}

/// Two rules that fire while loss > 1; `high` suspends and notifies, `other` only notifies.
const POLICY: &str = "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p, namespace: ml}\n\
spec:\n  mode: Enforce\n  rules:\n    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}, {notify: {to: team}}]}\n    - {name: other, when: 'metric(\"loss\") > 1.0', actions: [{notify: {to: team}}]}\n";

/// The same rules in a ClusterProgressPolicy that honours the exceptions of `allowed`.
fn cluster_policy(allowed: &str) -> String {
    POLICY.replace("kind: ProgressPolicy", "kind: ClusterProgressPolicy").replace(
        "metadata: {name: p, namespace: ml}\nspec:\n",
        &format!("metadata: {{name: c}}\nspec:\n  exceptions: {{allowedNamespaces: [{allowed}]}}\n"),
    )
}

fn exception(name: &str, policy: &str, rules: &str, until: Timestamp) -> CompiledException {
    let yaml = format!(
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicyException\nmetadata: {{name: {name}, namespace: ml}}\n\
spec:\n  exceptions: [{{policyName: {policy}, ruleNames: [{rules}]}}]\n  match: {{selector: {{matchLabels: {{team: eval}}}}}}\n  expires: \"{until}\"\n"
    );
    parse_exceptions(&yaml, "e.yaml").unwrap_or_else(|e| panic!("{e}")).remove(0)
}

struct World {
    ev: Evaluator,
    events: Vec<Event>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

impl World {
    fn with(policy: &str) -> World {
        let mut ev = Evaluator::new(EngineConfig::default());
        let mut events = Vec::new();
        for d in parse_documents(policy, "test").unwrap() {
            let p = compile(&d, ev.scripts()).unwrap_or_else(|e| panic!("{e}"));
            ev.upsert_policy(p, t(0), &mut events);
        }
        let labels = BTreeMap::from([("team".to_string(), "eval".to_string())]);
        World { ev, events, labels, annotations: BTreeMap::new() }
    }

    fn key() -> JobKey {
        JobKey::new("ml", "ft")
    }

    fn advance(&mut self, at: Timestamp) {
        while let Some(next) = self.ev.next_tick().filter(|n| *n <= at) {
            self.ev.tick(next, &mut self.events);
        }
    }

    fn sample(&mut self, minute: i64, loss: f64) {
        self.advance(t(minute));
        let mut snap = JobSnapshot::new(World::key());
        snap.running_since = Some(t(0));
        snap.labels = self.labels.clone();
        snap.annotations = self.annotations.clone();
        let mut s = ProgressSample::empty(t(minute), SampleSource::TrainerStatus);
        s.metrics.push(Metric { name: "loss".into(), value: loss });
        snap.sample = Some(s);
        self.ev.observe(snap, t(minute), &mut self.events);
    }

    fn except(&mut self, minute: i64, e: CompiledException) {
        self.advance(t(minute));
        self.ev.upsert_exception(e, t(minute), &mut self.events);
    }

    fn intents(&self) -> Vec<(Timestamp, &str, &str)> {
        (self.events.iter())
            .filter_map(|e| if let Event::Intent(i) = e { Some(i) } else { None })
            .map(|i: &ActionIntent| (i.at, i.rule.as_str(), i.action.kind().as_str()))
            .collect()
    }

    fn held(&self) -> Vec<(Timestamp, &str, Option<String>)> {
        (self.events.iter())
            .filter_map(|e| match e {
                Event::Held { at, rule, exception, .. } => {
                    Some((*at, rule.as_str(), exception.as_ref().map(ToString::to_string)))
                }
                _ => None,
            })
            .collect()
    }

    fn ended(&self) -> Vec<(Timestamp, &str, ExceptionEnd, bool)> {
        (self.events.iter())
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
    let mut w = World::with(POLICY);
    w.except(0, exception("eval", "ml/p", "high", t(60)));
    w.sample(10, 2.0);
    let p = w.ev.policies().next().unwrap().reference.clone();
    assert_eq!(w.ev.rule_state(&World::key(), &p, "high"), Some(RuleState::Firing), "evaluated as ever");
    assert_eq!(w.held(), vec![(t(10), "high", Some("ml/eval".to_string()))]);
    assert_eq!(w.intents(), vec![(t(10), "other", "notify")], "only the rule it names is held");
    assert_eq!(
        w.ev.excepted_by(&World::key(), &p, "high").map(ToString::to_string).as_deref(),
        Some("ml/eval")
    );
    w.sample(30, 2.0);
    assert_eq!(w.held().len(), 1, "one Held per firing");
    // Nothing more is reported: the timer, not a sample, ends it on its second.
    w.advance(t(90));
    assert_eq!(w.ended(), vec![(t(60), "high", ExceptionEnd::Expired, true)]);
    let at_60: Vec<_> = w.intents().into_iter().filter(|(at, ..)| *at == t(60)).collect();
    assert_eq!(at_60, vec![(t(60), "high", "suspend"), (t(60), "high", "notify")]);
    assert_eq!(w.ev.excepted_by(&World::key(), &p, "high"), None);
}

#[test]
fn a_rule_that_recovers_under_its_exception_does_nothing_when_it_ends() {
    let mut w = World::with(POLICY);
    w.except(0, exception("eval", "ml/p", "", t(60)));
    w.sample(10, 2.0);
    w.sample(20, 0.5);
    w.advance(t(90));
    assert!(w.intents().is_empty(), "{:?}", w.intents());
    assert!(w.ended().is_empty(), "a resolved rule is no longer held: {:?}", w.ended());
}

#[test]
fn deleting_or_narrowing_an_exception_releases_at_once() {
    let mut w = World::with(POLICY);
    w.except(0, exception("eval", "ml/p", "", t(600)));
    w.sample(10, 2.0);
    assert_eq!(w.held().len(), 2);
    // Narrowed to the other rule: `high` is released now, `other` stays held.
    w.except(20, exception("eval", "ml/p", "other", t(600)));
    assert_eq!(w.ended(), vec![(t(20), "high", ExceptionEnd::NoLongerApplies, true)]);
    assert_eq!(w.intents(), vec![(t(20), "high", "suspend"), (t(20), "high", "notify")]);
    w.ev.remove_exception(
        &ExceptionRef { namespace: "ml".into(), name: "eval".into() },
        t(30),
        &mut w.events,
    );
    assert_eq!(w.ended()[1], (t(30), "other", ExceptionEnd::Removed, true));
    assert_eq!(w.intents().last(), Some(&(t(30), "other", "notify")));
}

#[test]
fn an_exception_reaches_only_the_jobs_it_matches() {
    let mut w = World::with(POLICY);
    w.labels.clear();
    w.except(0, exception("eval", "ml/p", "high", t(60)));
    w.sample(10, 2.0);
    assert!(w.held().is_empty(), "the job lacks team=eval");
    assert_eq!(w.intents().len(), 3);
}

#[test]
fn a_cluster_policy_honours_only_the_namespaces_its_admin_allows() {
    // Allowed: held.
    let mut w = World::with(&cluster_policy("ml"));
    w.except(0, exception("eval", "c", "high", t(60)));
    w.sample(10, 2.0);
    assert_eq!(w.held(), vec![(t(10), "high", Some("ml/eval".to_string()))]);
    // Not allowed (another namespace listed): the exception is ignored, the rule acts.
    let mut w = World::with(&cluster_policy("other-team"));
    w.except(0, exception("eval", "c", "high", t(60)));
    w.sample(10, 2.0);
    assert!(w.held().is_empty());
    assert!(w.intents().contains(&(t(10), "high", "suspend")));
    // A namespaced policy's name does not reach a cluster policy of the same name.
    let mut w = World::with(&cluster_policy("ml"));
    w.except(0, exception("eval", "ml/c", "high", t(60)));
    w.sample(10, 2.0);
    assert!(w.held().is_empty());
}

#[test]
fn a_snooze_that_outlasts_the_exception_takes_the_hold_over() {
    let mut w = World::with(POLICY);
    w.annotations.insert(SNOOZE_ANNOTATION.into(), t(120).to_string());
    w.except(0, exception("eval", "ml/p", "high", t(60)));
    w.sample(10, 2.0);
    w.advance(t(90));
    assert_eq!(w.ended(), vec![(t(60), "high", ExceptionEnd::Expired, false)]);
    assert!(!w.intents().iter().any(|(_, r, _)| *r == "high"), "still snoozed: {:?}", w.intents());
    w.advance(t(150));
    let high: Vec<_> = w.intents().into_iter().filter(|(_, r, _)| *r == "high").collect();
    assert_eq!(high, vec![(t(120), "high", "suspend"), (t(120), "high", "notify")], "the snooze's end");
}

#[test]
fn a_restarted_evaluator_keeps_the_hold_and_releases_at_expiry() {
    let mut w = World::with(POLICY);
    w.except(0, exception("eval", "ml/p", "high", t(60)));
    w.sample(10, 2.0);
    let p = w.ev.policies().next().unwrap().reference.clone();
    let memories = w.ev.memories(&p, t(20));
    assert!(memories.iter().any(|m| m.excepted_by.as_deref() == Some("ml/eval")), "{memories:?}");
    // A new evaluator (a restart, a new leader) restores the rules, then learns the exception again.
    let mut after = World::with(POLICY);
    after.ev.restore(&p, memories);
    after.except(20, exception("eval", "ml/p", "high", t(60)));
    after.sample(30, 2.0);
    assert!(after.intents().iter().all(|(_, r, _)| *r != "high"), "{:?}", after.intents());
    after.advance(t(90));
    assert_eq!(after.ended(), vec![(t(60), "high", ExceptionEnd::Expired, true)]);
    assert!(after.intents().contains(&(t(60), "high", "suspend")));
}

#[test]
fn an_exception_that_comes_after_a_snooze_held_the_firing_holds_it_past_the_snooze() {
    let mut w = World::with(POLICY);
    w.annotations.insert(SNOOZE_ANNOTATION.into(), t(60).to_string());
    w.sample(10, 2.0);
    w.except(20, exception("eval", "ml/p", "high", t(120)));
    w.advance(t(100));
    assert!(!w.intents().iter().any(|(_, r, a)| *r == "high" && *a == "suspend"), "not at the snooze's end");
    w.advance(t(150));
    let high: Vec<_> = w.intents().into_iter().filter(|(_, r, _)| *r == "high").collect();
    assert_eq!(high, vec![(t(120), "high", "suspend"), (t(120), "high", "notify")], "at the exception's end");
}

#[test]
fn a_grace_running_when_an_exception_comes_acts_on_the_second_it_expires() {
    let graced = POLICY
        .replace("[{suspend: {}}, {notify: {to: team}}]", "[{notify: {to: team}}, {suspend: {grace: 30m}}]");
    let mut w = World::with(&graced);
    w.sample(10, 2.0);
    assert_eq!(w.intents().into_iter().filter(|(_, r, _)| *r == "high").count(), 1, "the warning");
    w.except(20, exception("eval", "ml/p", "high", t(90)));
    w.advance(t(80));
    assert!(!w.intents().iter().any(|(_, _, a)| *a == "suspend"), "not when the grace ends (40m): excepted");
    w.advance(t(200));
    let suspends: Vec<_> = w.intents().into_iter().filter(|(_, _, a)| *a == "suspend").collect();
    assert_eq!(suspends, vec![(t(90), "high", "suspend")], "once, on the exception's second");
    assert_eq!(w.ended(), vec![(t(90), "high", ExceptionEnd::Expired, true)]);
}

#[test]
fn an_exception_and_a_snooze_ending_on_one_second_release_once() {
    let mut w = World::with(POLICY);
    w.annotations.insert(SNOOZE_ANNOTATION.into(), t(60).to_string());
    w.except(0, exception("eval", "ml/p", "high", t(60)));
    w.sample(10, 2.0);
    w.advance(t(120));
    let high: Vec<_> = w.intents().into_iter().filter(|(_, r, _)| *r == "high").collect();
    assert_eq!(high, vec![(t(60), "high", "suspend"), (t(60), "high", "notify")], "one release");
}

#[test]
fn a_firing_a_limit_holds_waits_for_the_exception_too() {
    let limited = POLICY.replace("  mode: Enforce\n", "  mode: Enforce\n  limits: {maxActionsPerHour: 1}\n");
    let mut w = World::with(&limited);
    // Another job takes the hour's one slot at 0m.
    let mut other = JobSnapshot::new(JobKey::new("ml", "first"));
    other.running_since = Some(t(0));
    let mut s = ProgressSample::empty(t(0), SampleSource::TrainerStatus);
    s.metrics.push(Metric { name: "loss".into(), value: 2.0 });
    other.sample = Some(s);
    w.ev.observe(other, t(0), &mut w.events);
    w.sample(10, 2.0);
    assert!(!w.intents().iter().any(|(at, r, _)| *at == t(10) && *r == "high"), "limited");
    w.except(20, exception("eval", "ml/p", "high", t(120)));
    w.sample(70, 2.0); // the slot frees at 60m
    w.sample(100, 2.0);
    assert!(
        !w.intents().iter().any(|(at, r, a)| *at > t(0) && *r == "high" && *a == "suspend"),
        "{:?}",
        w.intents()
    );
    w.advance(t(150));
    let after: Vec<_> = w.intents().into_iter().filter(|(at, r, _)| *at > t(0) && *r == "high").collect();
    assert_eq!(after, vec![(t(120), "high", "suspend"), (t(120), "high", "notify")]);
}
