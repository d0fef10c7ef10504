//! Each judged TrainJob's verdict annotation ([`trainwarden_kube::VERDICT_ANNOTATION`]): its pending and
//! firing rules, written by the leader when that set changes, so the kubectl plugin reads every job's state
//! from the job itself.
//!
//! The states come from the evaluator (the authority, restored memories included); when each rule entered
//! its state and why come from the transition that put it there, or, for a rule already pending or firing
//! when this replica started, from the annotation the previous leader wrote. What is stored on the object
//! is learnt from the watch (a hash of the annotation's text), so a new leader writes only what differs,
//! the echo of a write changes nothing, and a write that failed or went nowhere is sent again after
//! [`RETRY_AFTER`] until the object shows it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use trainwarden_core::{Evaluator, Event, JobKey, Mode, PolicyKind, RuleState, Timestamp, TransitionKind};
use trainwarden_kube::{RuleVerdict, Verdict};

use crate::messages::ShownVerdict;

/// When a verdict the object does not show yet is sent again.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// The most verdict writes per second (a token bucket): a hand-over or a policy change that alters thousands
/// of verdicts at once spreads them out instead of queueing them all before the next action.
pub(super) const VERDICT_WRITES_PER_SECOND: f64 = 50.0;

/// A rule of one policy: kind, namespace, policy name, rule name.
type RuleKey = (PolicyKind, Option<String>, String, String);

/// Why a rule entered its state (and when, for a rule whose restored memory does not say).
#[derive(Clone, Debug)]
struct Entered {
    state: RuleState,
    since: Option<Timestamp>,
    why: String,
}

/// The verdicts of every judged job and what their TrainJobs show.
#[derive(Debug)]
pub(super) struct VerdictBook {
    /// Per job and rule, what the transition that put the rule in its state said.
    entered: HashMap<JobKey, HashMap<RuleKey, Entered>>,
    /// Hash of the annotation's text on each TrainJob as last watched (absent: no annotation).
    stored: HashMap<JobKey, u64>,
    /// Each TrainJob's uid: a write names it, so it never lands on a re-created object of the same name.
    uids: HashMap<JobKey, String>,
    /// Each job's verdict as it should be, when it differs from what is stored: its text (`None`: remove)
    /// and when it was last sent (`None`: not yet).
    owed: HashMap<JobKey, (Option<String>, Option<Timestamp>)>,
    /// Jobs whose verdict may have changed since the last [`VerdictBook::sync`].
    touched: HashSet<JobKey>,
    tokens: f64,
    refilled: Option<Timestamp>,
}

impl Default for VerdictBook {
    fn default() -> Self {
        VerdictBook {
            entered: HashMap::new(),
            stored: HashMap::new(),
            uids: HashMap::new(),
            owed: HashMap::new(),
            touched: HashSet::new(),
            tokens: VERDICT_WRITES_PER_SECOND,
            refilled: None,
        }
    }
}

fn hash(text: Option<&str>) -> u64 {
    ShownVerdict::hash_text(text)
}

/// To the second: what the annotation shows, so two replicas that saw the same transition a few
/// milliseconds apart publish the same text.
fn to_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

impl VerdictBook {
    /// The job's annotation as watched now. The rules it lists seed why (and, where a restored memory does
    /// not say, since when) they entered their state: the first time a job is seen, and on a follower
    /// always, so the replicas agree with the leader's text and a hand-over rewrites nothing. The leader
    /// keeps its own: an older echo arriving after a newer transition must not undo it.
    pub(super) fn read(&mut self, job: &JobKey, shown: &ShownVerdict, uid: Option<&str>, leading: bool) {
        if let Some(uid) = uid {
            self.uids.insert(job.clone(), uid.to_string());
        }
        if self.stored.insert(job.clone(), shown.hash) == Some(shown.hash) {
            return;
        }
        let first = !self.entered.contains_key(job);
        if first || !leading {
            let seeded: HashMap<RuleKey, Entered> = shown
                .verdict
                .iter()
                .flat_map(|v| v.rules.iter().cloned())
                .map(|r| {
                    let key = (r.kind, r.namespace, r.policy, r.rule);
                    (key, Entered { state: r.state, since: r.since, why: r.why })
                })
                .collect();
            let entered = self.entered.entry(job.clone()).or_default();
            entered.extend(seeded);
        }
        self.touched.insert(job.clone());
    }

    /// Notes the transitions of a step.
    pub(super) fn transitions(&mut self, events: &[Event]) {
        for event in events {
            let Event::Transition { at, job, policy, rule, kind, reason, .. } = event else { continue };
            let key = (policy.kind, policy.namespace.clone(), policy.name.clone(), rule.clone());
            match kind {
                TransitionKind::Pending | TransitionKind::Firing => {
                    let state =
                        if *kind == TransitionKind::Firing { RuleState::Firing } else { RuleState::Pending };
                    let entered = Entered { state, since: Some(to_second(*at)), why: reason.summary.clone() };
                    self.entered.entry(job.clone()).or_default().insert(key, entered);
                }
                // A deleted job's rules resolve after it was forgotten: nothing is re-created for it.
                TransitionKind::Resolved | TransitionKind::Cleared => {
                    if let Some(rules) = self.entered.get_mut(job) {
                        rules.remove(&key);
                    }
                }
            }
            if self.entered.contains_key(job) {
                self.touched.insert(job.clone());
            }
        }
    }

    /// Every job's verdict may have changed (a policy was added, changed or removed; a namespace's labels).
    pub(super) fn touch_all(&mut self) {
        self.touched.extend(self.entered.keys().cloned());
    }

    /// The TrainJob is gone: nothing is owed to it.
    pub(super) fn forget(&mut self, job: &JobKey) {
        self.entered.remove(job);
        self.stored.remove(job);
        self.uids.remove(job);
        self.owed.remove(job);
        self.touched.remove(job);
    }

    /// The job is not judged (exempt): its verdict is empty, so an annotation it carries is removed.
    pub(super) fn clear(&mut self, job: &JobKey) {
        self.entered.insert(job.clone(), HashMap::new());
        self.touched.insert(job.clone());
    }

    /// Brings the touched jobs' verdicts in line with the evaluator's rule states. The text depends only on
    /// the evaluator's states and since-times and on the reasons noted, never on the clock, so rendering it
    /// again (an echo, a policy change) gives the same text.
    pub(super) fn sync(&mut self, evaluator: &Evaluator, judged: impl Fn(&JobKey) -> bool) {
        for job in std::mem::take(&mut self.touched) {
            let mut verdict = Verdict::default();
            if judged(&job) {
                let entered = self.entered.get(&job);
                for policy in evaluator.policies() {
                    let r = &policy.reference;
                    for rule in &policy.rules {
                        let state = evaluator.rule_state(&job, r, &rule.name).unwrap_or(RuleState::Inactive);
                        // Audit promises that nothing is written to the job: its rules are in the policy status.
                        if state == RuleState::Inactive || rule.mode == Mode::Audit {
                            continue;
                        }
                        let key = (r.kind, r.namespace.clone(), r.name.clone(), rule.name.clone());
                        let known = entered.and_then(|e| e.get(&key)).filter(|e| e.state == state);
                        let since = evaluator.rule_since(&job, r, &rule.name).map(to_second);
                        verdict.set(RuleVerdict {
                            kind: r.kind,
                            namespace: r.namespace.clone(),
                            policy: r.name.clone(),
                            rule: rule.name.clone(),
                            state,
                            since: since.or_else(|| known.and_then(|e| e.since)),
                            mode: rule.mode,
                            why: known.map(|e| e.why.clone()).unwrap_or_default(),
                        });
                    }
                }
            }
            let text = verdict.render();
            let stored = self.stored.get(&job).copied().unwrap_or_else(|| hash(None));
            if hash(text.as_deref()) == stored {
                self.owed.remove(&job);
            } else if self.owed.get(&job).is_none_or(|(owed, _)| *owed != text) {
                self.owed.insert(job, (text, None));
            }
        }
    }

    /// The verdicts to write now (leader only): owed ones not sent yet or sent [`RETRY_AFTER`] ago, within
    /// [`VERDICT_WRITES_PER_SECOND`]; each with the job's uid when known.
    pub(super) fn due(&mut self, now: Timestamp) -> Vec<(JobKey, Option<String>, Option<String>)> {
        let elapsed = self.refilled.map_or(0.0, |r| now.duration_since(r).as_secs_f64().max(0.0));
        self.tokens = (self.tokens + elapsed * VERDICT_WRITES_PER_SECOND).min(VERDICT_WRITES_PER_SECOND);
        self.refilled = Some(now);
        let retry = jiff::SignedDuration::try_from(RETRY_AFTER).unwrap_or_default();
        let mut out = Vec::new();
        for (job, (text, sent)) in &mut self.owed {
            if self.tokens < 1.0 {
                break;
            }
            if sent.is_none_or(|s| s.checked_add(retry).is_ok_and(|t| t <= now)) {
                self.tokens -= 1.0;
                *sent = Some(now);
                out.push((job.clone(), text.clone(), self.uids.get(job).cloned()));
            }
        }
        out
    }

    /// When the next write is due: one not sent yet (a new leader's, or one the budget held back) as soon
    /// as the budget has a token, else the next retry.
    pub(super) fn next_retry(&self) -> Option<Timestamp> {
        let retry = jiff::SignedDuration::try_from(RETRY_AFTER).unwrap_or_default();
        let token = match (self.tokens >= 1.0, self.refilled) {
            (false, Some(r)) => {
                let wait = (1.0 - self.tokens) / VERDICT_WRITES_PER_SECOND;
                jiff::SignedDuration::try_from_secs_f64(wait)
                    .ok()
                    .and_then(|w| r.checked_add(w).ok())
                    .unwrap_or(r)
            }
            _ => Timestamp::UNIX_EPOCH,
        };
        self.owed
            .values()
            .filter_map(|(_, sent)| match sent {
                None => Some(token),
                Some(s) => s.checked_add(retry).ok(),
            })
            .min()
    }

    /// This replica starts leading: whatever is owed is sent at once (within the budget).
    pub(super) fn lead(&mut self) {
        for (_, sent) in self.owed.values_mut() {
            *sent = None;
        }
    }

    /// Verdicts owed now (for tests).
    #[cfg(test)]
    pub(super) fn owed(&self) -> usize {
        self.owed.len()
    }

    /// Jobs with an entry (for tests).
    #[cfg(test)]
    pub(super) fn jobs(&self) -> usize {
        self.entered.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use trainwarden_testkit::fixtures::at_sec;

    use trainwarden_core::{JobSnapshot, Metric, ProgressSample, SampleSource};
    use trainwarden_kube::VERDICT_ANNOTATION;

    use super::super::tests::policy_input;
    use super::*;
    use crate::brain::Brain;
    use crate::messages::{Input, Work};
    use crate::metrics::Metrics;
    use crate::runtime::config::ControllerConfig;

    const RULE: &str =
        "    - {name: high, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}]}\n";

    fn brain(leading: bool) -> Brain {
        let mut b = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
        b.lead(leading);
        b.handle(policy_input(RULE, None), at_sec(0));
        b.work.clear();
        b
    }

    /// ml/ft reporting `loss` at `at`, carrying `verdict` as its annotation.
    fn report(loss: f64, at: Timestamp, verdict: Option<&str>) -> Input {
        let mut snapshot = JobSnapshot::new(JobKey::new("ml", "ft"));
        snapshot.created_at = Some(at_sec(-60));
        let mut sample = ProgressSample::empty(at, SampleSource::TrainerStatus);
        sample.metrics.push(Metric { name: "loss".into(), value: loss });
        snapshot.sample = Some(sample);
        if let Some(v) = verdict {
            snapshot.annotations.insert(VERDICT_ANNOTATION.into(), v.into());
        }
        crate::brain::tests::watched(snapshot, None)
    }

    /// The verdict writes of the last step: `None` for a removal.
    fn writes(b: &mut Brain) -> Vec<Option<Verdict>> {
        b.work
            .drain(..)
            .filter_map(|w| match w {
                Work::SaveVerdict(v) => Some(v.text.map(|t| Verdict::parse(&t).unwrap())),
                _ => None,
            })
            .collect()
    }

    fn states(v: &Verdict) -> Vec<(String, RuleState, Timestamp)> {
        v.rules.iter().map(|r| (r.rule.clone(), r.state, r.since.unwrap())).collect()
    }

    #[test]
    fn the_leader_writes_a_verdict_on_each_transition_and_removes_it_when_nothing_holds() {
        let mut b = brain(true);
        b.handle(report(1.0, at_sec(0), None), at_sec(0));
        assert_eq!(writes(&mut b), Vec::<Option<Verdict>>::new(), "a healthy job gets no annotation");

        b.handle(report(6.0, at_sec(1), None), at_sec(1));
        let w = writes(&mut b);
        let pending = w[0].clone().unwrap();
        assert_eq!(states(&pending), [("high".into(), RuleState::Pending, at_sec(1))]);
        assert!(pending.rules[0].why.contains("loss"), "{}", pending.rules[0].why);
        let text = pending.render().unwrap();

        // The watch shows it: nothing more is owed, and the next identical report writes nothing.
        b.handle(report(6.0, at_sec(2), Some(&text)), at_sec(2));
        assert_eq!(writes(&mut b), Vec::<Option<Verdict>>::new());
        assert_eq!(b.verdicts.owed(), 0);

        b.tick(at_sec(11));
        let firing = writes(&mut b).remove(0).unwrap();
        assert_eq!(states(&firing), [("high".into(), RuleState::Firing, at_sec(11))]);
        let text = firing.render().unwrap();
        b.handle(report(6.0, at_sec(12), Some(&text)), at_sec(12));
        assert_eq!(b.verdicts.owed(), 0);

        b.handle(report(1.0, at_sec(13), Some(&text)), at_sec(13));
        assert_eq!(writes(&mut b), vec![None], "resolved: the annotation is removed");
    }

    /// A rule restored as pending from the policy status, on a job whose annotation does not show it yet (an
    /// upgrade, a crash between the transition and its write): written once with the memory's since, and the
    /// echo writes nothing more (it used to write a new `since` on every echo).
    #[test]
    fn a_restored_rule_is_written_once_and_its_echo_is_quiet() {
        let mut old = brain(true);
        old.handle(report(6.0, at_sec(1), None), at_sec(1));
        let reference = old.evaluator().policies().next().unwrap().reference.clone();
        let status = trainwarden_kube::ProgressPolicyStatus {
            rule_states: old.evaluator.memories(&reference, at_sec(5)),
            ..Default::default()
        };
        let mut new = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
        new.lead(true);
        new.handle(policy_input(RULE, Some(status)), at_sec(5));
        new.work.clear();
        new.handle(report(6.0, at_sec(6), None), at_sec(6));
        let w = writes(&mut new);
        assert_eq!(w.len(), 1);
        let text = w[0].as_ref().unwrap().render().unwrap();
        assert_eq!(
            states(w[0].as_ref().unwrap()),
            [("high".into(), RuleState::Pending, at_sec(1))],
            "the memory's since"
        );
        for i in 7..10 {
            new.handle(report(6.0, at_sec(i), Some(&text)), at_sec(i));
            assert!(writes(&mut new).is_empty(), "echo {i} wrote again");
        }
    }

    /// A follower takes the leader's reasons from the annotation, so its own text is the leader's and a
    /// hand-over rewrites nothing.
    #[test]
    fn a_follower_agrees_with_the_leaders_text() {
        let mut leader = brain(true);
        let mut follower = brain(false);
        leader.handle(report(6.0, at_sec(1), None), at_sec(1));
        follower.handle(
            report(6.0, at_sec(1), None),
            Timestamp::from_millisecond(at_sec(1).as_millisecond() + 400).unwrap(),
        );
        let text = writes(&mut leader).remove(0).unwrap().render().unwrap();
        follower.handle(report(6.0, at_sec(2), Some(&text)), at_sec(2));
        assert_eq!(follower.verdicts.owed(), 0, "the follower holds the leader's text");
        follower.lead(true);
        follower.tick(at_sec(3));
        assert!(writes(&mut follower).is_empty(), "the hand-over rewrites nothing");
    }

    #[test]
    fn a_deleted_job_leaves_nothing_behind() {
        let mut b = brain(true);
        b.handle(report(6.0, at_sec(1), None), at_sec(1));
        assert_eq!(writes(&mut b).len(), 1, "pending");
        b.handle(Input::JobGone(JobKey::new("ml", "ft")), at_sec(2));
        assert_eq!(
            (b.verdicts.jobs(), b.verdicts.owed()),
            (0, 0),
            "its rules' Cleared events re-created no entry"
        );
        assert!(writes(&mut b).is_empty());
    }

    #[test]
    fn writes_stay_within_the_budget_and_the_rest_follow() {
        let mut b = brain(false);
        let n = 2 * VERDICT_WRITES_PER_SECOND as usize;
        for i in 0..n {
            let mut input = report(6.0, at_sec(1), None);
            if let Input::Job(j) = &mut input {
                j.key = JobKey::new("ml", format!("j{i}"));
                if let Ok(s) = &mut j.snapshot {
                    s.key = j.key.clone();
                }
            }
            b.handle(input, at_sec(1));
        }
        assert_eq!(b.verdicts.owed(), n);
        b.lead(true);
        b.tick(at_sec(2));
        assert_eq!(writes(&mut b).len(), VERDICT_WRITES_PER_SECOND as usize, "one second's budget");
        let next = b.next_tick().unwrap();
        assert!(next > at_sec(2) && next <= at_sec(3), "the rest when tokens are back: {next}");
        b.tick(at_sec(3));
        assert_eq!(writes(&mut b).len(), VERDICT_WRITES_PER_SECOND as usize);
    }

    #[test]
    fn audit_rules_are_not_written_to_the_job() {
        let mut b = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
        b.lead(true);
        b.handle(policy_input(&RULE.replace("for: 10s", "for: 10s, mode: Audit"), None), at_sec(0));
        b.work.clear();
        b.handle(report(6.0, at_sec(1), None), at_sec(1));
        b.tick(at_sec(11));
        let reference = b.evaluator().policies().next().expect("the policy compiled").reference.clone();
        let state = b.evaluator().rule_state(&JobKey::new("ml", "ft"), &reference, "high");
        assert_eq!(state, Some(RuleState::Firing));
        assert!(writes(&mut b).is_empty(), "Audit writes nothing on the TrainJob");
    }

    #[test]
    fn an_unanswered_write_is_sent_again_and_a_follower_writes_only_once_it_leads() {
        let mut b = brain(false);
        b.handle(report(6.0, at_sec(1), None), at_sec(1));
        assert!(writes(&mut b).is_empty(), "a follower never writes");
        assert_eq!(b.next_tick(), Some(at_sec(11)), "only the rule's `for`: no retry timer on a follower");
        b.lead(true);
        assert_eq!(
            b.next_tick(),
            Some(Timestamp::UNIX_EPOCH),
            "the new leader's owed verdict is due at once"
        );
        b.tick(at_sec(2));
        assert_eq!(writes(&mut b).len(), 1, "the new leader writes what the job does not show");
        b.tick(at_sec(20));
        let w = writes(&mut b);
        assert_eq!(w.len(), 1, "fired: the changed verdict goes at once");
        assert_eq!(w[0].as_ref().map(|v| v.firing().count()), Some(1));
        // Never echoed: sent again 30 s later.
        b.tick(at_sec(49));
        assert!(writes(&mut b).is_empty());
        b.tick(at_sec(50));
        assert_eq!(writes(&mut b).len(), 1);
    }

    #[test]
    fn a_new_leader_keeps_when_a_rule_entered_its_state_from_the_annotation() {
        let mut old = brain(true);
        old.handle(report(6.0, at_sec(1), None), at_sec(1));
        let text = writes(&mut old).remove(0).unwrap().render().unwrap();
        // The successor restores the policy's rule memories (status.ruleStates) as a restart does.
        let mut new = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
        new.lead(true);
        let reference = old.evaluator().policies().next().unwrap().reference.clone();
        let status = trainwarden_kube::ProgressPolicyStatus {
            rule_states: old.evaluator.memories(&reference, at_sec(5)),
            ..Default::default()
        };
        new.handle(policy_input(RULE, Some(status)), at_sec(5));
        new.work.clear();
        new.handle(report(6.0, at_sec(5), Some(&text)), at_sec(5));
        assert!(writes(&mut new).is_empty(), "the job shows the verdict the successor holds too");
        new.tick(at_sec(11));
        let firing = writes(&mut new).remove(0).unwrap();
        assert_eq!(
            states(&firing),
            [("high".into(), RuleState::Firing, at_sec(11))],
            "its `for` ran from at_sec(1)"
        );
    }
}
