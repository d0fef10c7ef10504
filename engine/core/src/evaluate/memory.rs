//! What a rule remembers about a job in a form that survives a restart ([`RuleMemory`]): written to the
//! policy status by the controller and given back after a restart, keyed to the rule's definition.

use std::collections::HashMap;

use super::limits::{Hold, Remembered, count_restored};
use super::{Alert, Evaluator, JobEntry, RuleState};
use crate::input::sample::JobKey;
use crate::policy::PolicyRef;
use crate::policy::compile::{CompiledPolicy, CompiledRule};
use crate::time::Timestamp;

/// What one rule remembers about one job, in a form that survives a restart (see [`Evaluator::memories`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleMemory {
    /// The TrainJob as "<namespace>/<name>".
    #[schemars(length(min = 3, max = 317))]
    pub job: String,
    /// The rule's name.
    #[schemars(length(min = 1, max = 63))]
    pub rule: String,
    /// Pending (the condition holds, `for` has not elapsed), Firing, or Inactive (only remembered while an
    /// action's cooldown runs).
    pub state: RuleState,
    /// Pending since or firing since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub since: Option<Timestamp>,
    /// While firing: when the condition last turned false (for keepFiringFor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub cleared_at: Option<Timestamp>,
    /// How often the rule has fired for this job.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub firings: u64,
    /// When each of the rule's actions was last issued (by position), for cooldowns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<Option<String>>", length(max = 16))]
    pub last_issued: Vec<Option<Timestamp>>,
    /// A hash of the rule's definition when this was remembered: a rule edited meanwhile starts afresh
    /// instead of inheriting a pending timer, a firing or cooldowns that belonged to its old actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub rule_hash: Option<String>,
    /// Firing with its actions held by this blast-radius limit (spec.limits or the controller's
    /// --max-actions-per-hour): they are issued once the limit allows, if the rule still fires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<super::Limit>,
    /// By action position: when an action its `grace` defers is due (issued then if the rule still fires).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<Option<String>>", length(max = 16))]
    pub deferred: Vec<Option<Timestamp>>,
    /// Firing while the job's snooze held its actions (nothing issued since): what a policy's
    /// spec.snooze cap releases when it ends the snooze for that policy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub snooze_held: bool,
    /// Firing while this ProgressPolicyException (namespace/name) held its actions (nothing issued
    /// since): what the exception's end releases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 317))]
    pub excepted_by: Option<String>,
}

/// A stable (FNV-1a, 64-bit) hash of a rule's fingerprint, as [`RuleMemory::rule_hash`].
pub(super) fn rule_hash(rule: &CompiledRule) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rule.fingerprint.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Applies the memories restored for (policy, job), if any, to the job's fresh rule tracks of that policy.
pub(super) fn claim_memories(
    restored: &mut HashMap<(usize, JobKey), Vec<RuleMemory>>,
    entry: &mut JobEntry,
    key: &JobKey,
    p_index: usize,
    policy: &CompiledPolicy,
) {
    if restored.is_empty() {
        return;
    }
    let Some(memories) = restored.remove(&(p_index, key.clone())) else { return };
    let tracks = entry.tracks_mut(p_index, policy.rules.len());
    for memory in memories {
        let Some(r) = policy.rules.iter().position(|rule| rule.name == memory.rule) else { continue };
        if memory.rule_hash.as_ref().is_some_and(|h| *h != rule_hash(&policy.rules[r])) {
            continue; // the rule was edited while nobody watched: it starts afresh
        }
        let track = &mut tracks[r];
        track.alert = Alert::restored(memory.state, memory.since, memory.cleared_at);
        track.firings = memory.firings;
        track.held = memory
            .held
            .filter(|_| memory.state == RuleState::Firing)
            .map(|limit| Hold { limit, retry: None });
        track.snooze_held = memory.snooze_held && memory.state == RuleState::Firing;
        track.excepted = (memory.excepted_by.as_deref())
            .filter(|_| memory.state == RuleState::Firing)
            .and_then(|e| e.split_once('/'))
            .map(|(namespace, name)| {
                Box::new(crate::policy::exception::ExceptionRef {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
            });
        track.deferred = memory.deferred.clone();
        track.deferred.resize(policy.rules[r].actions.len(), None);
        track.last_issued = memory.last_issued;
        track.last_issued.resize(policy.rules[r].actions.len(), None);
    }
}

impl Evaluator {
    /// What a policy's rules remember about each job beyond its history: pending since, firing, the
    /// firing count and when each action was last issued (for cooldowns). Persisted by the controller (in the
    /// policy status) and given back to [`Evaluator::restore`] after a restart, so a restart neither loses a
    /// `for` timer nor repeats an action. Only rules that are pending, firing or cooling down are listed.
    pub fn memories(&self, policy: &PolicyRef, now: Timestamp) -> Vec<RuleMemory> {
        let Some(p) = self.find_policy(policy) else { return Vec::new() };
        let Some(slot) = &self.policies[p] else { return Vec::new() };
        let mut out = Vec::new();
        for (key, job) in self.jobs.iter() {
            for (rule, track) in slot.policy.rules.iter().zip(job.tracks.get(p).into_iter().flatten()) {
                let state = track.alert.state();
                let cooling = track.last_issued.iter().flatten().any(|last| {
                    crate::time::add_seconds(*last, rule.cooldown.as_secs_f64())
                        .is_none_or(|until| until > now)
                });
                if state == RuleState::Inactive && !cooling {
                    continue;
                }
                out.push(RuleMemory {
                    job: format!("{}/{}", key.namespace, key.name),
                    rule: rule.name.clone(),
                    state,
                    since: track.alert.since(),
                    cleared_at: track.alert.cleared_at(),
                    firings: track.firings,
                    last_issued: track.last_issued.clone(),
                    rule_hash: Some(rule_hash(rule)),
                    held: track.held.map(|h| h.limit),
                    deferred: if track.deferred.iter().any(Option::is_some) {
                        track.deferred.clone()
                    } else {
                        Vec::new()
                    },
                    snooze_held: track.snooze_held,
                    excepted_by: track.excepted.as_ref().map(ToString::to_string),
                });
            }
        }
        // Also what was restored but not yet claimed (its job not seen yet in this run).
        for ((index, _), memories) in &self.restored {
            if *index == p {
                out.extend(memories.iter().cloned());
            }
        }
        out.sort_by(|a, b| (&a.job, &a.rule).cmp(&(&b.job, &b.rule)));
        out
    }

    /// Gives a policy back what its rules remembered before a restart (see [`Evaluator::memories`]). Call it
    /// right after [`Evaluator::upsert_policy`] and before the jobs are observed: each memory is applied when
    /// its job's rules are first set up, instead of starting that rule inactive. Memories of rules that no
    /// longer exist are ignored; those of jobs never seen again are dropped by
    /// [`Evaluator::drop_unclaimed_memories`].
    pub fn restore(&mut self, policy: &PolicyRef, memories: Vec<RuleMemory>) {
        let Some(p) = self.find_policy(policy) else { return };
        for memory in memories {
            let Some(key) = JobKey::parse(&memory.job) else { continue };
            if let Some(entry) = self.jobs.get(&key)
                && entry.tracks.get(p).is_some_and(|t| !t.is_empty())
            {
                continue; // already judged in this run: what this run knows is newer
            }
            // The blast-radius counts are rebuilt at once, before any job is judged, whatever order the
            // jobs are listed in.
            if let Some(Some(slot)) = self.policies.get(p)
                && let Some(rule) = slot.policy.rules.iter().find(|r| r.name == memory.rule)
                && memory.rule_hash.as_ref().is_none_or(|h| *h == rule_hash(rule))
            {
                let remembered = Remembered {
                    state: memory.state,
                    since: memory.since,
                    last_issued: &memory.last_issued,
                    deferred: &memory.deferred,
                };
                count_restored(&mut self.limits, p, rule, &key, &remembered);
            }
            self.restored.entry((p, key)).or_default().push(memory);
        }
    }

    /// Forgets restored memories whose job has not been seen (it was deleted while nobody watched).
    pub fn drop_unclaimed_memories(&mut self) -> usize {
        let n = self.restored.values().map(Vec::len).sum();
        // Their jobs are gone: they hold no limit's slot any more.
        for (p, key) in self.restored.keys() {
            self.limits.cancel(*p, key);
            self.limits.forget_job_of(*p, key);
        }
        self.restored.clear();
        n
    }
}
