//! The cohorts of the cohort detectors (`median_stop`, `percentile`, `successive_halving`; see
//! `judge::detectors::cohort`): one memory per (policy, rule, cohort), fed every new report of every job the
//! policy selects, told when a job completes, and emptied of a job when the job is deleted.
//!
//! A job's cohort is the value of the policy's `spec.cohort.by` label on it; its position is the report's
//! step, epoch or progress (`spec.cohort.alignBy`). A job without the label, or a report without the position
//! or the metric, does not count — as Ray ignores a result that lacks its time attribute or metric.

use rustc_hash::FxHashMap;

use crate::input::sample::ProgressSample;
use crate::judge::detectors::Finding;
use crate::judge::detectors::cohort::{CohortJudge, CohortMemory, MemberId};
use crate::policy::spec::{AlignBy, CohortSpec};

/// Every cohort of every cohort rule.
#[derive(Default)]
pub(super) struct CohortBook {
    rules: FxHashMap<(usize, usize), RuleCohorts>,
}

/// One rule's cohorts.
#[derive(Default)]
struct RuleCohorts {
    cohorts: FxHashMap<String, Box<dyn CohortMemory>>,
    /// The cohort each member is in.
    member_of: FxHashMap<MemberId, String>,
}

impl RuleCohorts {
    fn leave(&mut self, member: MemberId) {
        let Some(cohort) = self.member_of.remove(&member) else { return };
        if let Some(memory) = self.cohorts.get_mut(&cohort) {
            memory.forget(member);
            if memory.members() == 0 {
                self.cohorts.remove(&cohort);
            }
        }
    }
}

/// The position a report is at, by `alignBy`.
pub(super) fn position(align: AlignBy, sample: &ProgressSample) -> Option<f64> {
    let x = match align {
        AlignBy::Step => sample.current_step,
        AlignBy::Epoch => sample.current_epoch,
        AlignBy::Progress => sample.progress_percent,
    }?;
    x.is_finite().then_some(x)
}

/// What a report says for a cohort rule: (cohort, position, value), if it counts.
pub(super) fn report_of<'a>(
    spec: &CohortSpec,
    judge: &dyn CohortJudge,
    labels: &'a std::collections::BTreeMap<String, String>,
    sample: &ProgressSample,
) -> Option<(&'a str, f64, f64)> {
    let cohort = labels.get(spec.label())?;
    let x = position(spec.align_by, sample)?;
    let value = sample.metric(judge.metric())?;
    Some((cohort, x, value))
}

impl CohortBook {
    /// A report of `member` for rule `rule` of policy `policy`: judged against its cohort, then remembered.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn report(
        &mut self,
        policy: usize,
        rule: usize,
        judge: &dyn CohortJudge,
        cohort: &str,
        member: MemberId,
        x: f64,
        value: f64,
    ) -> Option<Finding> {
        let rc = self.rules.entry((policy, rule)).or_default();
        if rc.member_of.get(&member).is_some_and(|c| c != cohort) {
            // Its label changed: it leaves its old cohort.
            rc.leave(member);
        }
        rc.member_of.entry(member).or_insert_with(|| cohort.to_string());
        if !rc.cohorts.contains_key(cohort) {
            rc.cohorts.insert(cohort.to_string(), judge.new_memory());
        }
        rc.cohorts.get_mut(cohort)?.report(member, x, value)
    }

    /// The member's job completed.
    pub(super) fn finished(&mut self, member: MemberId) {
        for rc in self.rules.values_mut() {
            if let Some(cohort) = rc.member_of.get(&member)
                && let Some(memory) = rc.cohorts.get_mut(cohort)
            {
                memory.finished(member);
            }
        }
    }

    /// The member's job was deleted.
    pub(super) fn forget(&mut self, member: MemberId) {
        for rc in self.rules.values_mut() {
            rc.leave(member);
        }
    }

    /// The policy was removed.
    pub(super) fn forget_policy(&mut self, policy: usize) {
        self.rules.retain(|(p, _), _| *p != policy);
    }

    /// The policy was replaced: the cohorts of rule `from` move to rule `to` (an unchanged rule that moved),
    /// those of rules not in `moves` are dropped (changed or gone).
    pub(super) fn carry_over(&mut self, policy: usize, moves: &[(usize, usize)]) {
        let mut kept = Vec::new();
        for &(from, to) in moves {
            if let Some(rc) = self.rules.remove(&(policy, from)) {
                kept.push((to, rc));
            }
        }
        self.forget_policy(policy);
        for (to, rc) in kept {
            self.rules.insert((policy, to), rc);
        }
    }

    /// Jobs in the member's cohort for the rule (itself included), if it is in one.
    pub(super) fn cohort_size(&self, policy: usize, rule: usize, member: MemberId) -> Option<usize> {
        let rc = self.rules.get(&(policy, rule))?;
        Some(rc.cohorts.get(rc.member_of.get(&member)?)?.members())
    }

    /// Approximate bytes held.
    pub(super) fn approx_bytes(&self) -> usize {
        self.rules
            .values()
            .map(|rc| {
                rc.member_of.len() * 48 + rc.cohorts.values().map(|m| 64 + m.approx_bytes()).sum::<usize>()
            })
            .sum()
    }
}
