//! A policy appeared, changed or was deleted. A new generation is compiled and loaded (its receivers go to
//! the notifier through the executor); on first sight its status brings back the totals and the rule
//! memories (restart safety); on a follower, the leader's status is adopted (its totals are the truth, the
//! firings it persisted as settled settle this replica's owed intents). Our own status writes come back as
//! watch events of the same generation and change nothing.

use tracing::{info, warn};
use trainwarden_core::{PolicyId, Timestamp, compile};

use super::{Brain, counted};
use crate::messages::{AbandonReason, PolicyInput, ReceiverChange, Work};
use crate::metrics::InvalidInput;

impl Brain {
    /// A policy appeared or changed.
    pub(super) fn on_policy(&mut self, p: PolicyInput, now: Timestamp) {
        // Deleted and created again under its name (the watch saw no deletion: a re-list in between, or the
        // executor read it at a write): the old one is gone, with its rules, memories and owed actions.
        if let (Some(known), Some(uid)) = (self.books.get(&p.key).and_then(|b| b.uid.as_deref()), &p.uid)
            && known != uid
        {
            info!(policy = ?p.key, "policy replaced by a new object of the same name");
            self.on_policy_gone(p.key.clone(), now);
        }
        let first_sight = !self.books.contains_key(&p.key);
        let book = self.books.entry(p.key.clone()).or_default();
        if p.uid.is_some() {
            book.uid = p.uid.clone();
        }
        // Our own status writes come back as watch events; the spec (metadata.generation) did not change, so
        // there is nothing to compile again.
        let judged =
            book.reference.as_ref().is_some_and(|r| r.generation == p.generation) || book.error.is_some();
        if !first_sight
            && !self.leading
            && let Some(status) = &p.status
        {
            // The leader's status: its totals are the truth while it leads (a hand-over continues from
            // them), and the firings it persisted as settled settle this replica's owed intents.
            book.adopt(status, now);
            self.ledger.settle_from_status(&p.key, &status.rule_states);
        }
        if !first_sight && book.generation == p.generation && judged {
            return;
        }
        book.generation = p.generation;
        if first_sight {
            // What its status counts (none of it, for a new policy): see `counted`.
            book.counted = Some(counted::Counted::from_status(
                p.status.as_ref().and_then(|s| s.counted_actions.as_ref()),
                now,
            ));
        }
        if first_sight && let Some(status) = &p.status {
            // Continuity across restarts: savings, counts and the last action come back from status.
            book.adopt(status, now);
            book.conditions = status.conditions.clone();
        }
        let document = match p.document {
            Ok(d) => d,
            Err(e) => {
                book.error = Some(e.to_string());
                self.metrics.invalid(InvalidInput::Policy);
                return;
            }
        };
        match compile(&document, self.evaluator.scripts()) {
            Ok(compiled) => {
                let reference = compiled.reference.clone();
                info!(policy = %reference, generation = reference.generation, "policy loaded");
                if self.notifier.is_some() {
                    self.work.push(Work::Receivers(ReceiverChange::Configure {
                        policy: compiled.reference.clone(),
                        receivers: compiled.receivers.clone(),
                    }));
                }
                self.evaluator.upsert_policy(compiled, now, &mut self.events);
                if let Some(g) = &mut self.gauges {
                    g.touch_all();
                }
                self.verdicts.touch_all();
                if first_sight
                    && let Some(status) = p.status
                    && !status.rule_states.is_empty()
                {
                    info!(policy = %reference, memories = status.rule_states.len(), "restoring rule state");
                    self.evaluator.restore(&reference, status.rule_states);
                }
                book.reference = Some(reference);
                book.error = None;
                book.rule_errors.clear();
            }
            Err(errors) => {
                self.metrics.invalid(InvalidInput::Policy);
                warn!(policy = ?p.key, error = %errors, "invalid policy");
                book.error = Some(errors.to_string());
            }
        }
        self.metrics.policies.set(self.books.values().filter(|b| b.reference.is_some()).count() as i64);
    }

    /// A policy was deleted: its owed actions, rules, receivers and status go.
    pub(super) fn on_policy_gone(&mut self, key: PolicyId, now: Timestamp) {
        self.abandon(AbandonReason::PolicyDeleted, |i| i.policy.id() == key);
        if let Some(g) = &mut self.gauges {
            g.touch_all();
        }
        self.verdicts.touch_all();
        if let Some(book) = self.books.remove(&key)
            && let Some(reference) = book.reference
        {
            self.evaluator.remove_policy(&reference, now, &mut self.events);
            if self.notifier.is_some() {
                self.work.push(Work::Receivers(ReceiverChange::Remove(reference)));
            }
        }
        self.last_sent.remove(&key);
        self.removed.push(key);
    }
}
