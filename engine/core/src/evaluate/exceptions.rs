//! ProgressPolicyExceptions as the evaluator applies them (the object itself: `policy/exception.rs`).
//!
//! - A rule of a job is **excepted** at an evaluation when some exception in force names that rule of that
//!   policy, matches the job, and the policy honours exceptions of the job's namespace
//!   ([`CompiledPolicy::honours_exceptions_from`]). Of several, the one that lasts longest is reported.
//! - An excepted rule is evaluated as ever; a firing holds its actions (one [`Event::Held`] naming the
//!   exception) and the track remembers the exception ([`super::RuleTrack::excepted`]).
//! - When that exception no longer applies — its `expires` came (one of the job's exact timers), it was
//!   deleted, or it or the job's labels changed — one [`Event::ExceptionEnded`] says why, and a rule still
//!   firing fires again now (new intent ids), as at the end of a snooze. A snooze still holding the job
//!   takes the hold over instead.
//! - Adding, changing or deleting an exception evaluates the jobs of its namespace at once, so a deletion
//!   releases on that second, not at the job's next sample.

use super::lifecycle::Pause;
use super::{Evaluator, Event};
use crate::input::sample::JobKey;
use crate::policy::compile::{CompiledPolicy, CompiledRule};
use crate::policy::exception::{CompiledException, ExceptionRef};
use crate::time::Timestamp;
use std::collections::BTreeMap;

/// The exceptions an evaluator holds: by namespace, then name (a job's lookup borrows its namespace).
pub(super) type ExceptionBook = BTreeMap<String, BTreeMap<String, CompiledException>>;

/// The exception `r`, if the book has it.
pub(super) fn get<'a>(book: &'a ExceptionBook, r: &ExceptionRef) -> Option<&'a CompiledException> {
    book.get(&r.namespace)?.get(&r.name)
}

/// The exception in force that holds `rule` of `policy` for `job` at `now`, as a [`Pause`] until its end.
pub(super) fn applying(
    book: &ExceptionBook,
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    job: &JobKey,
    labels: &BTreeMap<String, String>,
    now: Timestamp,
) -> Option<Pause> {
    let here = book.get(&job.namespace)?;
    if !policy.honours_exceptions_from(&job.namespace) {
        return None;
    }
    here.values()
        .filter(|e| {
            e.in_force(now) && e.names_rule(&policy.reference, &rule.name) && e.matches_job(job, labels)
        })
        .max_by_key(|e| e.expires)
        .map(|e| Pause { until: e.expires, exception: Some(e.reference.clone()) })
}

impl Evaluator {
    /// Adds or replaces (same namespace and name) an exception, and evaluates the jobs of its namespace.
    pub fn upsert_exception(&mut self, exception: CompiledException, now: Timestamp, out: &mut Vec<Event>) {
        let ExceptionRef { namespace, name } = exception.reference.clone();
        self.exceptions.entry(namespace.clone()).or_default().insert(name, exception);
        self.evaluate_namespace(&namespace, now, out);
    }

    /// Removes an exception (a no-op when unknown); rules it held that still fire act now.
    pub fn remove_exception(&mut self, reference: &ExceptionRef, now: Timestamp, out: &mut Vec<Event>) {
        let Some(here) = self.exceptions.get_mut(&reference.namespace) else { return };
        if here.remove(&reference.name).is_some() {
            if here.is_empty() {
                self.exceptions.remove(&reference.namespace);
            }
            self.evaluate_namespace(&reference.namespace, now, out);
        }
    }

    /// The exceptions known, by namespace and name.
    pub fn exceptions(&self) -> impl Iterator<Item = &CompiledException> {
        self.exceptions.values().flat_map(BTreeMap::values)
    }

    /// The exception holding `rule` of `policy` for `job` as of the job's last evaluation.
    pub fn excepted_by(
        &self,
        job: &JobKey,
        policy: &crate::policy::PolicyRef,
        rule: &str,
    ) -> Option<&ExceptionRef> {
        let p = self.find_policy(policy)?;
        let slot = self.policies[p].as_ref()?;
        let r = slot.policy.rules.iter().position(|x| x.name == rule)?;
        self.jobs.get(job)?.tracks.get(p)?.get(r)?.excepted.as_deref()
    }

    fn evaluate_namespace(&mut self, namespace: &str, now: Timestamp, out: &mut Vec<Event>) {
        for key in self.jobs.sorted_keys(|k, _| k.namespace == namespace) {
            self.tick_job(&key, now, out);
        }
    }
}

/// Why the exception that held a rule no longer applies at `now`.
pub(super) fn why_ended(book: &ExceptionBook, held_by: &ExceptionRef, now: Timestamp) -> super::ExceptionEnd {
    match get(book, held_by) {
        None => super::ExceptionEnd::Removed,
        Some(e) if !e.in_force(now) => super::ExceptionEnd::Expired,
        Some(_) => super::ExceptionEnd::NoLongerApplies,
    }
}
