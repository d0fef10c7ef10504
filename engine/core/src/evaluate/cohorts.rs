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

/// The cohorts of the policies whose conditions call the `cohort_*` script functions: per policy and
/// cohort, every metric's values at each position (a sorted vector per metric and position: the median and
/// the best are read in O(1), a rank in O(log n); an insertion moves up to n values, a memmove), and each
/// member's latest position with what it reported there.
#[derive(Default)]
pub(super) struct ScriptCohorts {
    cohorts: FxHashMap<(usize, String), ScriptCohort>,
    member_of: FxHashMap<(usize, MemberId), String>,
}

#[derive(Default)]
struct ScriptCohort {
    members: FxHashMap<MemberId, ScriptMember>,
    values: FxHashMap<(String, u64), Vec<f64>>,
}

#[derive(Default)]
struct ScriptMember {
    last: Option<f64>,
    /// What it reported at its latest position.
    latest: Vec<(String, f64)>,
    /// Every value it added (metric, position, value), to take them out when it leaves (bounded).
    added: Vec<(String, u64, f64)>,
}

impl ScriptCohorts {
    /// A new report of `member` for `policy`: its metrics' values at its position join its cohort's.
    pub(super) fn report(
        &mut self,
        policy: usize,
        cohort: &str,
        member: MemberId,
        x: f64,
        sample: &ProgressSample,
    ) {
        if self.member_of.get(&(policy, member)).is_some_and(|c| c != cohort) {
            self.leave(policy, member);
        }
        self.member_of.entry((policy, member)).or_insert_with(|| cohort.to_string());
        let c = self.cohorts.entry((policy, cohort.to_string())).or_default();
        let m = c.members.entry(member).or_default();
        if m.last.is_some_and(|last| x <= last) {
            return;
        }
        m.last = Some(x);
        m.latest.clear();
        let key = crate::judge::detectors::cohort::position_key(x);
        for metric in &sample.metrics {
            m.latest.push((metric.name.to_string(), metric.value));
            if metric.value.is_nan() || m.added.len() >= crate::judge::detectors::cohort::MAX_REPORTS * 4 {
                continue;
            }
            let values = c.values.entry((metric.name.to_string(), key)).or_default();
            let at = values.partition_point(|v| v.total_cmp(&metric.value).is_lt());
            values.insert(at, metric.value);
            m.added.push((metric.name.to_string(), key, metric.value));
        }
    }

    fn leave(&mut self, policy: usize, member: MemberId) {
        let Some(cohort) = self.member_of.remove(&(policy, member)) else { return };
        let key = (policy, cohort);
        let Some(c) = self.cohorts.get_mut(&key) else { return };
        if let Some(m) = c.members.remove(&member) {
            for (name, pos, value) in m.added {
                let k = (name, pos);
                if let Some(values) = c.values.get_mut(&k) {
                    if let Some(i) = values.iter().position(|v| v.to_bits() == value.to_bits()) {
                        values.remove(i);
                    }
                    if values.is_empty() {
                        c.values.remove(&k);
                    }
                }
            }
        }
        if c.members.is_empty() {
            self.cohorts.remove(&key);
        }
    }

    /// The member's job was deleted.
    pub(super) fn forget(&mut self, member: MemberId) {
        let policies: Vec<usize> =
            self.member_of.keys().filter(|(_, m)| *m == member).map(|(p, _)| *p).collect();
        for p in policies {
            self.leave(p, member);
        }
    }

    /// The policy was removed or replaced.
    pub(super) fn forget_policy(&mut self, policy: usize) {
        self.cohorts.retain(|(p, _), _| *p != policy);
        self.member_of.retain(|(p, _), _| *p != policy);
    }

    /// What the member's cohort says of it now, if it is in one.
    pub(super) fn facts(&self, policy: usize, member: MemberId) -> Option<crate::history::job::CohortFacts> {
        use crate::history::metric_series::Direction;
        let cohort = self.member_of.get(&(policy, member))?;
        let c = self.cohorts.get(&(policy, cohort.clone()))?;
        let m = c.members.get(&member)?;
        let key = crate::judge::detectors::cohort::position_key(m.last?);
        let metrics = m
            .latest
            .iter()
            .map(|(name, own)| {
                let values = c.values.get(&(name.clone(), key)).map_or(&[][..], Vec::as_slice);
                let n = values.len();
                let median = match n {
                    0 => f64::NAN,
                    _ if n % 2 == 1 => values[n / 2],
                    _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
                };
                let direction = Direction::infer(name);
                let best = match (direction, values.first(), values.last()) {
                    (Direction::Min, Some(v), _) | (Direction::Max, _, Some(v)) => *v,
                    _ => f64::NAN,
                };
                let rank = if own.is_nan() {
                    f64::NAN
                } else {
                    let better = match direction {
                        Direction::Min => values.partition_point(|v| v < own),
                        Direction::Max => n - values.partition_point(|v| v <= own),
                    };
                    better as f64 + 1.0
                };
                crate::history::job::CohortMetric { name: name.clone(), median, best, rank }
            })
            .collect();
        Some(crate::history::job::CohortFacts { size: c.members.len(), metrics })
    }
}
