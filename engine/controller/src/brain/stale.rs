//! A stopping action the executor did not write because its policy had a generation this replica had not
//! judged the job under (an edit during a network cut, its watch not caught up yet; see
//! `executor::guard`). The executor hands the policy as it now stands to the brain first, then this
//! outcome: the job is judged under that generation at once. The same firing still standing — its rule
//! unchanged (the evaluator kept its track), still firing, the job still selected and not snoozed — is
//! sent again now, under the generation loaded; otherwise the intent is abandoned and the job told why. A
//! changed rule starts over under its new definition (the evaluator resolved the old firing), so a rule
//! that still fires fires anew with intents of its own, and one that no longer fires does nothing.

use tracing::info;
use trainwarden_core::describe::Notice;
use trainwarden_core::{RuleState, Timestamp};

use super::Brain;
use super::ledger::firing_of;
use crate::messages::{AbandonReason, Outcome};

impl Brain {
    /// Judges again the intent of a [`crate::messages::ActionResult::Stale`] outcome (see the module).
    pub(super) fn judge_stale(&mut self, o: &Outcome, now: Timestamp) {
        let Some(intent) = self.ledger.owed(&o.intent).cloned() else { return };
        let book = self.books.get(&o.policy);
        let loaded = book.and_then(|b| b.reference.clone());
        let found = o.policy_generation;
        let why = match (&loaded, found) {
            (Some(r), Some(g)) if r.generation == g => {
                let job = format!("{}/{}", intent.job.namespace, intent.job.name);
                let firings = self
                    .evaluator
                    .memories(r, now)
                    .into_iter()
                    .find(|m| m.job == job && m.rule == intent.rule)
                    .map(|m| m.firings);
                let stands = self.evaluator.selects(r, &intent.job)
                    && !self.exempt.contains(&intent.job)
                    && self.evaluator.snooze(&intent.job).is_none()
                    && self.evaluator.rule_state(&intent.job, r, &intent.rule) == Some(RuleState::Firing)
                    && firings.is_some()
                    && firings == firing_of(&intent.id);
                if stands {
                    info!(job = %intent.job, rule = %intent.rule, from = intent.policy.generation, to = g, "policy changed; the firing still stands under its new generation: acting");
                    // Due now: the next tick sends it again, filled in with the generation loaded.
                    self.ledger.settle(&o.intent, false, true, true, now);
                    return;
                }
                format!(
                    "policy {} changed (generation {} → {g}) and under it rule {} no longer fires as it did",
                    intent.policy.name, intent.policy.generation, intent.rule
                )
            }
            (_, Some(g)) => {
                let error = book.and_then(|b| b.error.clone()).unwrap_or_else(|| "it is not loaded".into());
                format!(
                    "policy {} changed to generation {g}, which cannot be used: {error}",
                    intent.policy.name
                )
            }
            (_, None) => format!("policy {} changed", intent.policy.name),
        };
        info!(job = %intent.job, rule = %intent.rule, id = %intent.id, why, "owed action abandoned: its policy changed");
        self.ledger.drop_owed(&o.intent);
        self.metrics.abandoned(AbandonReason::PolicyChanged, 1);
        self.record_event(&intent.job, Notice::action_abandoned(&intent, &why));
    }
}
