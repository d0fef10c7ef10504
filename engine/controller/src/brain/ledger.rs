//! The ledger of owed actions: what the rules want done and no replica has confirmed yet.
//!
//! Every intent a firing issues is owed from the moment it is issued until an outcome settles it (done,
//! unchanged, already done, reported, refused). A failure makes it due again after a capped exponential
//! backoff, for as long as the rule still fires; "not leader" parks it until this replica leads, when the
//! hand-over re-issues it before anything else. Every replica keeps its own ledger (every replica
//! evaluates), and a follower settles its entries from the leader's policy status: a firing the leader
//! persisted as `Firing` (not "pending, due now", see `status`) had all its intents settled.
//!
//! Re-issuing is safe because the executor recognises an intent it performed by its id (the
//! `trainwarden.dev/intents` record on the TrainJob): done once, never twice.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use trainwarden_core::{ActionIntent, JobKey, PolicyId, RuleMemory, RuleState, Timestamp};

/// The first retry of a failed action waits this long; each further failure doubles it.
pub const RETRY_BASE: Duration = Duration::from_secs(2);
/// The longest wait between two attempts of a failed action.
pub const RETRY_CAP: Duration = Duration::from_secs(300);

/// One owed intent.
#[derive(Debug)]
struct Owed {
    intent: ActionIntent,
    /// Failed attempts so far (sets the backoff).
    failures: u32,
    /// With the executor now (an outcome will come back): not re-issued meanwhile.
    sent: bool,
    /// When to re-issue it (after a failure); `None` while sent or while waiting for leadership. Changed only
    /// through [`Ledger::set_due`], which keeps the due index in step.
    due: Option<Timestamp>,
    /// Parked until its checkpoint request is answered or times out ([`Ledger::wait`]).
    waiting: bool,
}

/// The firing number an intent id carries (`…:{firing}:{action}`, see the core's `intent_id`): the same on
/// every replica, unlike the time each replica fired at.
pub fn firing_of(id: &str) -> Option<u64> {
    id.rsplit(':').nth(1)?.parse().ok()
}

/// How an outcome settled an owed intent.
#[derive(Debug, PartialEq)]
pub enum Settled {
    /// Settled for good; `was_owed` is false when the ledger no longer held it (forgotten meanwhile).
    Confirmed {
        /// Whether the ledger held the intent.
        was_owed: bool,
    },
    /// Failed: due again at this time (attempt number `failures + 1`).
    RetryAt {
        /// When it is re-issued.
        due: Timestamp,
        /// Failed attempts so far.
        failures: u32,
    },
    /// This replica is not the leader: parked until it leads.
    AwaitingLeadership,
}

/// The owed intents of one replica, by intent id.
#[derive(Debug, Default)]
pub struct Ledger {
    owed: BTreeMap<String, Owed>,
    /// Owed intents per (policy, job, rule): a firing with any of them owed is persisted as due.
    per_rule: HashMap<(PolicyId, JobKey, String), usize>,
    /// `(due, id)` of every owed intent with a due time: the brain asks for the next due time after every
    /// message, and at 10,000 jobs a scan of `owed` for it was 15 % of the controller's CPU.
    due_index: BTreeSet<(Timestamp, String)>,
}

fn rule_key(intent: &ActionIntent) -> (PolicyId, JobKey, String) {
    (intent.policy.id(), intent.job.clone(), intent.rule.clone())
}

/// The wait before attempt `failures + 1`: [`RETRY_BASE`] doubled per failure, at most [`RETRY_CAP`].
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_BASE.saturating_mul(1 << doublings).min(RETRY_CAP)
}

impl Ledger {
    /// Records a newly issued intent as owed and sent.
    pub fn issue(&mut self, intent: &ActionIntent) {
        let owed = Owed { intent: intent.clone(), failures: 0, sent: true, due: None, waiting: false };
        match self.owed.insert(intent.id.clone(), owed) {
            None => *self.per_rule.entry(rule_key(intent)).or_default() += 1,
            Some(replaced) => {
                if let Some(due) = replaced.due {
                    self.due_index.remove(&(due, intent.id.clone()));
                }
            }
        }
    }

    /// Sets the due time of owed intent `id`, keeping the due index in step.
    fn set_due(&mut self, id: &str, due: Option<Timestamp>) {
        let Some(owed) = self.owed.get_mut(id) else { return };
        if owed.due == due {
            return;
        }
        if let Some(old) = owed.due {
            self.due_index.remove(&(old, id.to_string()));
        }
        if let Some(new) = due {
            self.due_index.insert((new, id.to_string()));
        }
        owed.due = due;
    }

    /// How many intents are owed.
    pub fn len(&self) -> usize {
        self.owed.len()
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }

    /// The owed intent `id`, if it is owed.
    pub fn owed(&self, id: &str) -> Option<&ActionIntent> {
        self.owed.get(id).map(|o| &o.intent)
    }

    /// Forgets owed intent `id`; whether it was owed.
    pub fn drop_owed(&mut self, id: &str) -> bool {
        self.remove(id)
    }

    /// Whether an intent of this (policy, job, rule) is owed.
    pub fn owes(&self, policy: &PolicyId, job: &JobKey, rule: &str) -> bool {
        self.per_rule.contains_key(&(policy.clone(), job.clone(), rule.to_string()))
    }

    /// Applies the executor's outcome of intent `id` at `now`. `confirmed` is true for a result that
    /// settles it; `not_leader` for a skip by a follower; otherwise it failed. `leading` is whether this
    /// replica leads now: a "not leader" that comes back after the hand-over (the executor looked before the
    /// brain heard) is due at once instead of parked, or nothing would ever re-issue it.
    pub fn settle(
        &mut self,
        id: &str,
        confirmed: bool,
        not_leader: bool,
        leading: bool,
        now: Timestamp,
    ) -> Settled {
        if confirmed {
            return Settled::Confirmed { was_owed: self.remove(id) };
        }
        let Some(owed) = self.owed.get_mut(id) else { return Settled::Confirmed { was_owed: false } };
        owed.sent = false;
        owed.waiting = false;
        if not_leader {
            self.set_due(id, leading.then_some(now));
            return Settled::AwaitingLeadership;
        }
        owed.failures += 1;
        let failures = owed.failures;
        let wait = jiff::SignedDuration::from_secs(backoff(failures).as_secs() as i64);
        let due = now.checked_add(wait).unwrap_or(Timestamp::MAX);
        self.set_due(id, Some(due));
        Settled::RetryAt { due, failures }
    }

    /// Intent `id` waits for its checkpoint request: parked until `until` (its deadline), or until
    /// [`Ledger::wake_job`] finds the job answered. Not a failure: no backoff grows.
    pub fn wait(&mut self, id: &str, until: Timestamp) {
        let Some(owed) = self.owed.get_mut(id) else { return };
        owed.sent = false;
        owed.waiting = true;
        self.set_due(id, Some(until));
    }

    /// The intents of `job` waiting for a checkpoint are due at `now` (the job answered, or stopped).
    pub fn wake_job(&mut self, job: &JobKey, now: Timestamp) {
        let ids: Vec<String> = self
            .owed
            .iter()
            .filter(|(_, o)| o.waiting && !o.sent && o.intent.job == *job)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.set_due(&id, Some(now));
        }
    }

    /// The earliest time a failed intent is due again.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.due_index.first().map(|(due, _)| *due)
    }

    /// Intents due at `now`, earliest first, marked sent; those `wanted` rejects are forgotten and returned
    /// second.
    pub fn take_due(
        &mut self,
        now: Timestamp,
        wanted: impl Fn(&ActionIntent) -> bool,
    ) -> (Vec<ActionIntent>, Vec<ActionIntent>) {
        let ids: Vec<String> =
            self.due_index.iter().take_while(|(due, _)| *due <= now).map(|(_, id)| id.clone()).collect();
        self.take(ids, wanted)
    }

    /// Every intent not with the executor (due later, or parked for leadership), marked sent: a new
    /// leader's inheritance. Those `wanted` rejects are forgotten and returned second.
    pub fn take_inherited(
        &mut self,
        wanted: impl Fn(&ActionIntent) -> bool,
    ) -> (Vec<ActionIntent>, Vec<ActionIntent>) {
        let ids: Vec<String> = self.owed.iter().filter(|(_, o)| !o.sent).map(|(id, _)| id.clone()).collect();
        self.take(ids, wanted)
    }

    /// Marks the intents `ids` sent and returns them, but forgets and returns second those `wanted` rejects.
    fn take(
        &mut self,
        ids: Vec<String>,
        wanted: impl Fn(&ActionIntent) -> bool,
    ) -> (Vec<ActionIntent>, Vec<ActionIntent>) {
        let (mut send, mut dropped) = (Vec::new(), Vec::new());
        for id in ids {
            let Some(owed) = self.owed.get_mut(&id) else { continue };
            if wanted(&owed.intent) {
                owed.sent = true;
                send.push(owed.intent.clone());
                self.set_due(&id, None);
            } else if let Some(o) = self.take_out(&id) {
                dropped.push(o.intent);
            }
        }
        (send, dropped)
    }

    /// Forgets every owed intent `gone` selects (its policy or job is gone); returns how many.
    pub fn forget(&mut self, gone: impl Fn(&ActionIntent) -> bool) -> usize {
        let ids: Vec<String> =
            self.owed.iter().filter(|(_, o)| gone(&o.intent)).map(|(id, _)| id.clone()).collect();
        ids.iter().filter(|id| self.remove(id)).count()
    }

    /// Settles, from the leader's status of `policy`, the owed intents of firings the leader persisted as
    /// settled: the rule's memory for the job is `Firing` and counts the intent's firing (a firing with an
    /// intent still owed is persisted as pending with its count one lower). Returns how many were settled.
    pub fn settle_from_status(&mut self, policy: &PolicyId, memories: &[RuleMemory]) -> usize {
        let settled: HashMap<(&str, &str), u64> = memories
            .iter()
            .filter(|m| m.state == RuleState::Firing)
            .map(|m| ((m.job.as_str(), m.rule.as_str()), m.firings))
            .collect();
        let ids: Vec<String> = self
            .owed
            .iter()
            .filter(|(id, o)| {
                let i = &o.intent;
                i.policy.id() == *policy
                    && firing_of(id).is_some_and(|firing| {
                        settled
                            .get(&(i.job.to_string().as_str(), i.rule.as_str()))
                            .is_some_and(|n| *n >= firing)
                    })
            })
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter().filter(|id| self.remove(id)).count()
    }

    fn remove(&mut self, id: &str) -> bool {
        self.take_out(id).is_some()
    }

    fn take_out(&mut self, id: &str) -> Option<Owed> {
        let owed = self.owed.remove(id)?;
        if let Some(due) = owed.due {
            self.due_index.remove(&(due, id.to_string()));
        }
        let key = rule_key(&owed.intent);
        if let Some(n) = self.per_rule.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.per_rule.remove(&key);
            }
        }
        Some(owed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainwarden_core::{ActionSpec, Mode, PolicyKind, PolicyRef, Reason, SuspendAction};
    use trainwarden_testkit::fixtures::{self, at_sec};

    fn intent(id: &str, job: &str, at: Timestamp) -> ActionIntent {
        ActionIntent {
            id: id.into(),
            at,
            job: JobKey::new("ml", job),
            policy: PolicyRef {
                kind: PolicyKind::Namespaced,
                namespace: Some("ml".into()),
                name: "p".into(),
                generation: 1,
            },
            rule: "stall".into(),
            action: ActionSpec::Suspend(SuspendAction::default()),
            mode: Mode::Enforce,
            reason: Reason::default(),
            savings: None,
            snoozed_until: None,
        }
    }

    fn memory(job: &str, state: RuleState, firings: u64) -> RuleMemory {
        RuleMemory {
            since: Some(at_sec(0)),
            firings,
            ..fixtures::memory(&format!("ml/{job}"), "stall", state)
        }
    }

    /// An intent waiting for its checkpoint is parked until the request's deadline, not retried with a
    /// backoff; the job's answer makes it (and only its job's waiting intents) due at once.
    #[test]
    fn a_waiting_intent_is_parked_until_its_deadline_or_its_jobs_answer() {
        let mut ledger = Ledger::default();
        for (id, job) in [("a", "ft"), ("b", "ft"), ("c", "other")] {
            ledger.issue(&intent(id, job, at_sec(0)));
        }
        ledger.wait("a", at_sec(600));
        ledger.wait("c", at_sec(600));
        assert_eq!(ledger.next_due(), Some(at_sec(600)));
        assert!(ledger.take_due(at_sec(599), |_| true).0.is_empty());
        ledger.wake_job(&JobKey::new("ml", "ft"), at_sec(42));
        assert_eq!(ledger.next_due(), Some(at_sec(42)));
        let (due, _) = ledger.take_due(at_sec(42), |_| true);
        assert_eq!(
            due.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["a"],
            "b was not waiting, c is another job's"
        );
        // Sent again and waiting again: still no failures counted, its deadline stands.
        ledger.wait("a", at_sec(600));
        let (due, _) = ledger.take_due(at_sec(600), |_| true);
        assert_eq!(due.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(ledger.settle("a", true, false, true, at_sec(601)), Settled::Confirmed { was_owed: true });
    }

    #[test]
    fn backoff_doubles_from_two_seconds_and_stops_at_five_minutes() {
        let waits: Vec<u64> = (1..=10).map(|f| backoff(f).as_secs()).collect();
        assert_eq!(waits, vec![2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff(u32::MAX), RETRY_CAP);
    }

    #[test]
    fn a_failed_intent_is_due_again_after_the_backoff_and_only_then() {
        let mut l = Ledger::default();
        l.issue(&intent("a", "j", at_sec(0)));
        assert_eq!(
            l.settle("a", false, false, true, at_sec(10)),
            Settled::RetryAt { due: at_sec(12), failures: 1 }
        );
        assert_eq!(l.next_due(), Some(at_sec(12)));
        assert!(l.take_due(at_sec(11), |_| true).0.is_empty());
        let (due, dropped) = l.take_due(at_sec(12), |_| true);
        assert_eq!((due.len(), dropped.len()), (1, 0));
        assert_eq!(l.next_due(), None, "sent again: no timer until its outcome");
        assert_eq!(
            l.settle("a", false, false, true, at_sec(13)),
            Settled::RetryAt { due: at_sec(17), failures: 2 }
        );
        assert_eq!(l.settle("a", true, false, true, at_sec(17)), Settled::Confirmed { was_owed: true });
        assert!(l.is_empty());
    }

    #[test]
    fn a_due_intent_the_rule_no_longer_wants_is_forgotten() {
        let mut l = Ledger::default();
        l.issue(&intent("a", "j", at_sec(0)));
        l.settle("a", false, false, true, at_sec(0));
        let (due, dropped) = l.take_due(at_sec(100), |_| false);
        assert_eq!((due.len(), dropped.len()), (0, 1));
        assert!(l.is_empty() && !l.owes(&dropped[0].policy.id(), &dropped[0].job, "stall"));
    }

    #[test]
    fn skipped_intents_wait_for_leadership_and_are_inherited_whole() {
        let mut l = Ledger::default();
        l.issue(&intent("a", "j1", at_sec(0)));
        l.issue(&intent("b", "j2", at_sec(0)));
        l.issue(&intent("c", "j3", at_sec(0)));
        assert_eq!(l.settle("a", false, true, false, at_sec(1)), Settled::AwaitingLeadership);
        l.settle("b", false, false, false, at_sec(1));
        assert_eq!(l.next_due(), Some(at_sec(3)), "only the failure has a timer");
        let (inherited, _) = l.take_inherited(|_| true);
        let ids: Vec<&str> = inherited.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b"], "c is still with the executor");
        assert_eq!(l.len(), 3);
    }

    #[test]
    fn the_leaders_status_settles_a_followers_intents_of_firings_it_persisted_as_firing() {
        let mut l = Ledger::default();
        // Ids end in firing:action, as the core makes them; the times differ from the leader's.
        l.issue(&intent("p:stall:ml:j1:0:1:0", "j1", at_sec(10)));
        l.issue(&intent("p:stall:ml:j2:0:1:0", "j2", at_sec(10)));
        l.issue(&intent("p:stall:ml:j3:0:2:0", "j3", at_sec(10)));
        let policy = intent("x", "j1", at_sec(0)).policy.id();
        let memories = vec![
            memory("j1", RuleState::Firing, 1),
            // In flight on the leader: persisted as pending.
            memory("j2", RuleState::Pending, 0),
            // The leader settled only j3's first firing; this is its second.
            memory("j3", RuleState::Firing, 1),
        ];
        assert_eq!(l.settle_from_status(&policy, &memories), 1);
        let job = |n: &str| JobKey::new("ml", n);
        assert!(!l.owes(&policy, &job("j1"), "stall"));
        assert!(l.owes(&policy, &job("j2"), "stall") && l.owes(&policy, &job("j3"), "stall"));
    }

    #[test]
    fn forgetting_a_job_drops_its_intents_only() {
        let mut l = Ledger::default();
        l.issue(&intent("a", "j1", at_sec(0)));
        l.issue(&intent("b", "j2", at_sec(0)));
        assert_eq!(l.forget(|i| i.job.name == "j1"), 1);
        assert_eq!(l.len(), 1);
        assert_eq!(l.settle("a", true, false, true, at_sec(1)), Settled::Confirmed { was_owed: false });
    }

    #[test]
    fn a_not_leader_that_comes_back_after_the_hand_over_is_due_at_once() {
        let mut l = Ledger::default();
        l.issue(&intent("a", "j", at_sec(0)));
        // The brain already leads (its hand-over skipped "a", which was with the executor).
        assert_eq!(l.settle("a", false, true, true, at_sec(5)), Settled::AwaitingLeadership);
        assert_eq!(l.next_due(), Some(at_sec(5)));
        assert_eq!(l.take_due(at_sec(5), |_| true).0.len(), 1);
    }

    /// The due index must hold exactly the owed intents' due times, whatever happens to them: checked after
    /// every step of a long pseudo-random sequence of every operation, against a scan of the ledger.
    #[test]
    fn the_due_index_matches_the_owed_intents_through_any_sequence() {
        let mut l = Ledger::default();
        let mut rng = trainwarden_testkit::fixtures::rng::Rng(0x9e37_79b9_7f4a_7c15_u64);
        let mut next = move |n: u64| rng.below(n as usize) as u64;
        let mut now = 0;
        let (mut retried, mut taken) = (0, 0);
        for step in 0..20_000 {
            now += next(3) as i64;
            let id = format!("i{}", next(12));
            let job = format!("j{}", next(4));
            match next(7) {
                0 | 1 => l.issue(&intent(&id, &job, at_sec(now))),
                2 | 3 => {
                    let (confirmed, not_leader, leading) = (next(4) == 0, next(3) == 0, next(2) == 0);
                    if let Settled::RetryAt { .. } =
                        l.settle(&id, confirmed, not_leader, leading, at_sec(now))
                    {
                        retried += 1;
                    }
                }
                4 => {
                    let expected: BTreeSet<String> = l
                        .owed
                        .iter()
                        .filter(|(_, o)| !o.sent && o.due.is_some_and(|d| d <= at_sec(now)))
                        .map(|(id, _)| id.clone())
                        .collect();
                    let drop_job = format!("j{}", next(6));
                    let (sent, dropped) = l.take_due(at_sec(now), |i| i.job.name != drop_job);
                    let got: BTreeSet<String> = sent.iter().chain(&dropped).map(|i| i.id.clone()).collect();
                    assert_eq!(got, expected, "step {step}: take_due took what a scan finds due");
                    assert!(dropped.iter().all(|i| i.job.name == drop_job));
                    taken += sent.len();
                }
                5 => {
                    if next(8) == 0 {
                        l.take_inherited(|_| true);
                    }
                }
                _ => {
                    l.forget(|i| i.job.name == job && i.id == id);
                }
            }
            let scanned: BTreeSet<(Timestamp, String)> =
                l.owed.iter().filter_map(|(id, o)| o.due.map(|d| (d, id.clone()))).collect();
            assert_eq!(l.due_index, scanned, "step {step}");
            assert_eq!(l.next_due(), scanned.first().map(|(d, _)| *d), "step {step}");
        }
        assert!(
            retried > 100 && taken > 100,
            "the sequence exercised retries ({retried}) and takes ({taken})"
        );
    }

    #[test]
    fn the_firing_number_is_read_from_the_intent_id() {
        assert_eq!(firing_of("ProgressPolicy:ml:p:3:stall:ml:job:1795798740:2:1"), Some(2));
        assert_eq!(firing_of("no-colons"), None);
    }
}
