//! Leadership and what is owed. Every replica evaluates and issues the same intents; only the leader
//! performs them. On taking over, the intents this replica owes (parked while it followed, or due later)
//! are re-issued first, and the suspensions TrainJobs record that no status counted (their leader was lost
//! before its status did) are counted once. Owed intents whose rule no longer wants them, or whose job or
//! policy is gone, are dropped.

use tracing::info;
use trainwarden_core::{ActionIntent, JobKey, Mode, RuleState};

use super::Brain;
use super::books::Tally;
use super::ledger::Ledger;
use crate::messages::{AbandonReason, Act, ActionResult, ExecutedAction, FoundSuspension, Work};

impl Brain {
    /// A graceful stop began: this replica still holds the Lease (it stores checkpoints and statuses) but
    /// starts no new action; what the executor answers "not leader" from now on waits for the next leader.
    pub fn stop_acting(&mut self) {
        self.stopping = true;
    }

    /// This replica starts or stops leading. On becoming leader every owed intent it inherited (parked
    /// while it followed, or due later) is re-issued first, before anything else this step produces.
    pub fn lead(&mut self, leading: bool) {
        if leading == self.leading {
            return;
        }
        self.leading = leading;
        if !leading {
            info!("not leading: owed actions wait for the next leader");
            return;
        }
        self.metrics.handovers.inc();
        self.verdicts.lead();
        // Before the inherited intents: those found done are then known counted (see `counted`).
        if self.jobs_listed {
            self.count_found();
        } else {
            self.count_found_when_listed = true;
        }
        let (inherited, dropped) = {
            let (ledger, wanted) = self.ledger_and_wanted();
            ledger.take_inherited(wanted)
        };
        self.dropped_owed(dropped);
        info!(inherited = inherited.len(), owed = self.ledger.len(), "leading: taking over the owed actions");
        self.metrics.actions_inherited.inc_by(inherited.len() as u64);
        let mut first: Vec<Work> = inherited.into_iter().map(|i| Work::Act(Box::new(Act::new(i)))).collect();
        first.append(&mut self.work);
        self.work = first;
    }

    /// Counts the suspensions TrainJobs record that the policies' statuses do not (their leader was lost
    /// before its status counted them): on taking over, once the TrainJobs are listed.
    pub(super) fn count_found(&mut self) {
        let found: Vec<(JobKey, FoundSuspension, bool)> =
            self.found.iter().map(|(k, (f, kueue))| (k.clone(), f.clone(), *kueue)).collect();
        let mut counted = 0;
        for (job, f, kueue) in found {
            let policy = self.books.iter().find_map(|(id, b)| {
                let r = b.reference.as_ref()?;
                (format!("{} {r}", r.kind) == f.policy).then(|| id.clone())
            });
            let Some(policy) = policy else { continue };
            let owed =
                self.books.get(&policy).and_then(|b| b.counted.as_ref()).is_some_and(|c| c.owes(&f.id, f.at));
            if !owed {
                continue;
            }
            info!(job = %job, rule = %f.rule, id = %f.id, "suspension found recorded and not counted by the status (its leader was lost before its status counted it): counting it");
            counted += 1;
            self.tally(Tally {
                id: &f.id,
                policy: &policy,
                job: &job,
                rule: &f.rule,
                action: if kueue { ExecutedAction::Deactivate } else { ExecutedAction::Suspend },
                mode: Mode::Enforce,
                result: ActionResult::AlreadyDone,
                at: f.at,
                saved: f.gpu_hours.map(|h| (h, f.dollars)),
            });
        }
        if counted > 0 {
            self.metrics.actions_found_uncounted.inc_by(counted);
        }
    }

    /// The ledger and a test of whether an owed intent is still wanted: its policy is loaded, its job is not
    /// exempt nor snoozed (the snooze's end re-issues what still fires, with new ids) and its rule still
    /// fires for the job.
    pub(super) fn ledger_and_wanted(&mut self) -> (&mut Ledger, impl Fn(&ActionIntent) -> bool + '_) {
        let (books, exempt, evaluator) = (&self.books, &self.exempt, &self.evaluator);
        let wanted = move |i: &ActionIntent| {
            let Some(reference) = books.get(&i.policy.id()).and_then(|b| b.reference.as_ref()) else {
                return false;
            };
            !exempt.contains(&i.job)
                && evaluator.snooze(&i.job).is_none()
                && evaluator.rule_state(&i.job, reference, &i.rule) == Some(RuleState::Firing)
        };
        (&mut self.ledger, wanted)
    }

    pub(super) fn dropped_owed(&mut self, dropped: Vec<ActionIntent>) {
        for i in &dropped {
            info!(job = %i.job, rule = %i.rule, id = %i.id, "owed action dropped: its rule no longer fires (or its job is snoozed)");
        }
        self.metrics.abandoned(AbandonReason::RuleResolved, dropped.len() as u64);
    }

    /// Forgets owed intents whose job or policy is gone (or exempt), counted for `reason`.
    pub(super) fn abandon(&mut self, reason: AbandonReason, gone: impl Fn(&ActionIntent) -> bool) {
        let n = self.ledger.forget(gone);
        if n > 0 {
            info!(
                forgotten = n,
                reason = reason.as_str(),
                "owed actions forgotten: their job or policy is gone"
            );
            self.metrics.abandoned(reason, n as u64);
        }
    }
}
