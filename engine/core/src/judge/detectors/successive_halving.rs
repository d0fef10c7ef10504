//! `successive_halving`: asynchronous successive halving (ASHA; Li et al., MLSys 2020) in its stopping form —
//! at each rung, a job that is not among the best `1/reductionFactor` of the jobs that reached the rung stops.
//!
//! Rung `k` is at position `minResource · reductionFactor^k` (step, epoch or progress, by
//! `spec.cohort.alignBy`); with `maxResource`, only rungs up to it (Ray's `max_t`: `int(log(max/min) /
//! log(η)) + 1` rungs). Promotion is asynchronous, as in ASHA: a job is judged when it reaches a rung,
//! against the jobs that reached it before (and, for `cutoff: rank`, itself) — nobody waits for a rung to
//! fill, so the first jobs at a rung always continue. Surviving is being promoted: trainwarden does not start
//! trials, it stops (suspends) the ones that would not be promoted.
//!
//! Two cutoffs, one per published implementation:
//! * `rank` (the default; the ASHA paper and Optuna 5.0's `SuccessiveHalvingPruner`): at the first report at
//!   or past the rung, the job's latest value is recorded at the rung; with `n` values there (its own
//!   included) it continues iff it is at least as good as the `max(⌊n/η⌋, 1)`-th best (ties continue). A job
//!   that jumped past several rungs is recorded at each, with the same value.
//! * `percentile` (Ray Tune 2.60's `ASHAScheduler`): at a report at or past a rung it has no value at (the
//!   highest such rung first, one rung per report), the job stops iff its value is strictly worse than numpy's
//!   `(1 − 1/η)` percentile of the values recorded there *before* it; an empty rung stops nothing.
//!
//! NaN: a job whose value is NaN at a rung stops (Optuna's rule; Ray's lets it continue and ignores it in
//! later cutoffs — the one deliberate difference from Ray, docs/src/ml-engineers/sweeps.md). Ray also stops
//! every trial that reaches `max_t` (it is done); trainwarden leaves a job that reached `maxResource` alone.
//!
//! The cost per report is O(log n) for a cohort of n jobs: each rung's values sit in a two-heap order
//! statistic split at the promotion rank, which moves by at most one per job.
//!
//! Example: `uses: successive_halving`, `with: {metric: eval_loss, minResource: 100, reductionFactor: 3}`.

use rustc_hash::FxHashMap;

use super::cohort::{CohortJudge, CohortMemory, MemberId, OrderStats, fmt_position};
use super::{Detector, DetectorInfo, DirectionParam, Finding, ParamDoc, Params};
use crate::history::metric_series::Direction;
use crate::time::fmt_num;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "successive_halving",
    summary: "At each rung (minResource · reductionFactor^k), the job is not among the best 1/reductionFactor of its cohort siblings that reached the rung (ASHA, stopping form).",
    params: &[
        ParamDoc { name: "metric", ty: "string", default: "required", doc: "Canonical metric name." },
        ParamDoc { name: "mode", ty: "min|max|auto", default: "auto", doc: "Which way is better." },
        ParamDoc {
            name: "minResource",
            ty: "number > 0",
            default: "required",
            doc: "Position of the first rung (step, epoch or percent, by spec.cohort.alignBy).",
        },
        ParamDoc {
            name: "reductionFactor",
            ty: "number > 1",
            default: "4",
            doc: "η: rungs are η times apart and keep the best 1/η.",
        },
        ParamDoc {
            name: "maxResource",
            ty: "number",
            default: "none",
            doc: "No rung beyond this position (Ray's max_t); none: rungs go on.",
        },
        ParamDoc {
            name: "cutoff",
            ty: "rank|percentile",
            default: "rank",
            doc: "rank: top ⌊n/η⌋ of the rung, itself included, ties kept (ASHA paper, Optuna); percentile: stop below the (1 − 1/η) percentile of those before it (Ray).",
        },
    ],
    example: r#"{"metric": "eval_loss", "minResource": 100, "reductionFactor": 3}"#,
    build,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cutoff {
    Rank,
    Percentile,
}

#[derive(Debug, Clone)]
pub(crate) struct SuccessiveHalving {
    metric: String,
    mode: DirectionParam,
    min_resource: f64,
    eta: f64,
    /// Rungs there are (from `maxResource`); `None`: unbounded.
    rungs: Option<usize>,
    cutoff: Cutoff,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let metric = p.required_string("metric");
    let mode = p.direction("mode");
    let had = p.raw("minResource").is_some();
    let min_resource = p.positive("minResource", false);
    if min_resource.is_none() && !had {
        p.error("minResource", "required: the position of the first rung");
    }
    let eta = p.f64("reductionFactor").unwrap_or(4.0);
    if eta <= 1.0 {
        p.error("reductionFactor", format!("must be > 1, got {eta}"));
    }
    let max_resource = p.positive("maxResource", false);
    if let (Some(min), Some(max)) = (min_resource, max_resource)
        && max < min
    {
        p.error("maxResource", format!("must be at least minResource ({min}), got {max}"));
    }
    let cutoff = match p.string("cutoff") {
        None | Some("rank") => Cutoff::Rank,
        Some("percentile") => Cutoff::Percentile,
        Some(other) => {
            p.error("cutoff", format!("expected rank or percentile, got {other:?}"));
            Cutoff::Rank
        }
    };
    let min_resource = min_resource?;
    // Ray: `int(np.log(max_t / min_t) / np.log(rf) - s + 1)` with s = 0.
    let rungs = max_resource.map(|max| ((max / min_resource).ln() / eta.ln() + 1.0) as usize);
    if eta <= 1.0 {
        return None;
    }
    Some(Box::new(SuccessiveHalving { metric: metric?.to_string(), mode, min_resource, eta, rungs, cutoff }))
}

impl SuccessiveHalving {
    /// Position of rung `k`.
    fn rung_at(&self, k: usize) -> f64 {
        self.min_resource * self.eta.powi(i32::try_from(k).unwrap_or(i32::MAX))
    }

    fn has_rung(&self, k: usize) -> bool {
        self.rungs.is_none_or(|n| k < n)
    }
}

super::cohort::cohort_detector!(SuccessiveHalving);

impl CohortJudge for SuccessiveHalving {
    fn metric(&self) -> &str {
        &self.metric
    }

    fn direction(&self) -> Direction {
        self.mode.resolve(&self.metric)
    }

    fn new_memory(&self) -> Box<dyn CohortMemory> {
        Box::new(HalvingMemory {
            direction: self.direction(),
            // Ray: `np.nanpercentile(rewards, (1 - 1/rf) * 100)`; numpy divides by 100 again.
            q: (1.0 - 1.0 / self.eta) * 100.0 / 100.0,
            rule: self.clone(),
            members: FxHashMap::default(),
            rungs: Vec::new(),
        })
    }
}

#[derive(Debug, Default)]
struct Member {
    last: Option<f64>,
    /// Its value at each rung it was recorded at (`None`: not recorded there; NaN: recorded as NaN).
    recorded: Vec<Option<f64>>,
    stopped: bool,
}

impl Member {
    fn at(&self, k: usize) -> Option<f64> {
        self.recorded.get(k).copied().flatten()
    }

    fn record(&mut self, k: usize, value: f64) {
        if self.recorded.len() <= k {
            self.recorded.resize(k + 1, None);
        }
        self.recorded[k] = Some(value);
    }
}

#[derive(Debug, Default)]
struct Rung {
    /// Jobs recorded here, NaN included (Ray's "empty rung" test counts them).
    count: usize,
    /// Their values in the rule's comparison space, NaN left out.
    values: OrderStats,
}

#[derive(Debug)]
struct HalvingMemory {
    rule: SuccessiveHalving,
    direction: Direction,
    q: f64,
    members: FxHashMap<MemberId, Member>,
    rungs: Vec<Rung>,
}

impl HalvingMemory {
    /// The value as the rung stores it: Ray's reward (`-value` when minimizing) for `percentile`, the value
    /// itself for `rank`.
    fn stored(&self, value: f64) -> f64 {
        match (self.rule.cutoff, self.direction) {
            (Cutoff::Percentile, Direction::Min) => -value,
            _ => value,
        }
    }

    fn rung(&mut self, k: usize) -> &mut Rung {
        if self.rungs.len() <= k {
            self.rungs.resize_with(k + 1, Rung::default);
        }
        &mut self.rungs[k]
    }

    fn add(&mut self, k: usize, value: f64) {
        let stored = self.stored(value);
        let rung = self.rung(k);
        rung.count += 1;
        if !stored.is_nan() {
            rung.values.insert(stored);
        }
    }

    /// `rank`: Optuna's `prune()` loop from the job's next rung.
    fn rank(&mut self, member: MemberId, x: f64, value: f64) -> Option<(usize, f64, usize)> {
        loop {
            let k = self.members.get(&member).map_or(0, |m| m.recorded.len());
            if !self.rule.has_rung(k) || x < self.rule.rung_at(k) {
                return None;
            }
            if value.is_nan() {
                return Some((k, f64::NAN, self.rungs.get(k).map_or(0, |r| r.count)));
            }
            self.add(k, value);
            if let Some(m) = self.members.get_mut(&member) {
                m.record(k, value);
            }
            let eta = self.rule.eta;
            let direction = self.direction;
            let rung = self.rung(k);
            let n = rung.values.len();
            let index = ((n as f64 / eta).floor() as usize).saturating_sub(1);
            let promotable = match direction {
                Direction::Min => value <= rung.values.nth(index),
                Direction::Max => value >= rung.values.nth(n - 1 - index),
            };
            if !promotable {
                let keep = index + 1;
                return Some((k, keep as f64, n));
            }
        }
    }

    /// `percentile`: Ray's `_Bracket.on_result`, highest unrecorded rung at or below `x` first.
    fn percentile(&mut self, member: MemberId, x: f64, value: f64) -> Option<(usize, f64, usize)> {
        let mut top = None;
        let mut k = 0;
        while self.rule.has_rung(k) && self.rule.rung_at(k) <= x {
            top = Some(k);
            k += 1;
        }
        let top = top?;
        let k = (0..=top).rev().find(|&k| self.members.get(&member).is_none_or(|m| m.at(k).is_none()))?;
        let reward = self.stored(value);
        let q = self.q;
        let rung = self.rung(k);
        let before = rung.count;
        let cutoff = if before == 0 { None } else { rung.values.percentile(q) };
        let stop = value.is_nan() || cutoff.is_some_and(|c| reward < c);
        self.add(k, value);
        if let Some(m) = self.members.get_mut(&member) {
            m.record(k, value);
        }
        let shown = cutoff.map(|c| if self.direction == Direction::Min { -c } else { c });
        stop.then_some((k, shown.unwrap_or(f64::NAN), before))
    }
}

impl CohortMemory for HalvingMemory {
    fn report(&mut self, member: MemberId, x: f64, value: f64) -> Option<Finding> {
        let m = self.members.entry(member).or_default();
        if m.stopped || m.last.is_some_and(|last| x <= last) {
            return None;
        }
        m.last = Some(x);
        let (k, reference, n) = match self.rule.cutoff {
            Cutoff::Rank => self.rank(member, x, value)?,
            Cutoff::Percentile => self.percentile(member, x, value)?,
        };
        if let Some(m) = self.members.get_mut(&member) {
            m.stopped = true;
        }
        let metric = &self.rule.metric;
        let at = fmt_position(self.rule.rung_at(k));
        let eta = fmt_num(self.rule.eta);
        let summary = if value.is_nan() {
            format!("{metric} is NaN at rung {k} ({at})")
        } else {
            match self.rule.cutoff {
                Cutoff::Rank => format!(
                    "{metric} {} at rung {k} ({at}) is not among the best {} of the {n} jobs that reached it (1/{eta})",
                    fmt_num(value),
                    fmt_num(reference)
                ),
                Cutoff::Percentile => format!(
                    "{metric} {} at rung {k} ({at}) is worse than the cutoff {} of the {n} jobs that reached it before (1/{eta} continue)",
                    fmt_num(value),
                    fmt_num(reference)
                ),
            }
        };
        Some(
            Finding::new(summary)
                .value(&format!("level:{metric}"), value)
                .value("rung", k as f64)
                .value("rung_position", self.rule.rung_at(k))
                .value("rung_size", n as f64),
        )
    }

    fn forget(&mut self, member: MemberId) {
        let Some(m) = self.members.remove(&member) else { return };
        for (k, value) in m.recorded.iter().enumerate() {
            let Some(value) = *value else { continue };
            let stored = self.stored(value);
            if let Some(rung) = self.rungs.get_mut(k) {
                rung.count -= 1;
                if !stored.is_nan() {
                    rung.values.remove(stored);
                }
            }
        }
    }

    fn members(&self) -> usize {
        self.members.len()
    }

    fn approx_bytes(&self) -> usize {
        self.members.values().map(|m| 64 + m.recorded.capacity() * 16).sum::<usize>()
            + self.rungs.iter().map(|r| 56 + r.values.approx_bytes()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{detector, errors};
    use super::*;

    fn memory(with: serde_json::Value) -> Box<dyn CohortMemory> {
        detector("successive_halving", with).cohort().expect("a cohort detector").new_memory()
    }

    /// η = 2, rungs at 1, 2, 4. Jobs arrive at rung 1 in order with losses 0.5, 0.4, 0.6, 0.3, 0.7: with n
    /// values recorded the job must be at least as good as the max(⌊n/2⌋, 1)-th best.
    #[test]
    fn rank_keeps_the_top_of_each_rung_as_jobs_arrive() {
        let mut m = memory(serde_json::json!({"metric": "loss", "minResource": 1, "reductionFactor": 2}));
        let arrivals = [0.5, 0.4, 0.6, 0.3, 0.7];
        let stopped: Vec<bool> =
            arrivals.iter().enumerate().map(|(j, v)| m.report(j, 1.0, *v).is_some()).collect();
        // n=1: best of itself. n=2: 0.4 <= 1st best (0.4). n=3 (0.4 0.5 0.6): 0.6 > 1st best. n=4: 0.3 best.
        // n=5 (0.3 0.4 0.5 0.6 0.7): 0.7 > 2nd best 0.4.
        assert_eq!(stopped, [false, false, true, false, true]);
    }

    /// A job that jumps past two rungs is recorded at both, with the same value, in one report.
    #[test]
    fn rank_records_every_rung_passed() {
        let mut m = memory(serde_json::json!({"metric": "loss", "minResource": 1, "reductionFactor": 2}));
        assert!(m.report(0, 4.0, 0.5).is_none(), "first at rungs 1, 2 and 4");
        assert!(m.report(1, 2.0, 0.6).is_some(), "0.6 is worse than the best at rung 1 (n = 2 keeps 1)");
        assert!(m.report(2, 1.0, 0.4).is_none());
        // Rung 2 holds 0.5 (job 0; job 1 stopped at rung 1): job 2 at 0.45 is the better of two, kept.
        assert!(m.report(2, 2.0, 0.45).is_none());
    }

    /// Ray's cutoff: the (1 − 1/η) percentile of the rewards recorded before; strictly worse stops; the first
    /// job at a rung continues; one rung per report, the highest unrecorded first.
    #[test]
    fn percentile_is_rays_cutoff() {
        let mut m = memory(serde_json::json!({
            "metric": "loss", "minResource": 1, "reductionFactor": 4, "maxResource": 16, "cutoff": "percentile"
        }));
        assert!(m.report(0, 1.0, 0.5).is_none(), "empty rung");
        // Rewards before: [-0.5]; cutoff -0.5; reward -0.6 < -0.5 stops.
        assert!(m.report(1, 1.0, 0.6).is_some());
        // Rewards [-0.5, -0.6]: 75th percentile = -0.525; -0.52 continues.
        assert!(m.report(2, 1.0, 0.52).is_none());
        // Job 3 jumps to 16: recorded at rung 16 only (empty: continues), then rung 4 at its next report.
        assert!(m.report(3, 16.0, 0.9).is_none());
        assert!(m.report(3, 17.0, 0.9).is_none(), "rung 4 is empty");
        assert!(m.report(3, 18.0, 0.9).is_some(), "rung 1: 0.9 is worse than the cutoff 0.51");
    }

    #[test]
    fn max_resource_bounds_the_rungs() {
        // Ray: int(log(10/1)/log(3) + 1) = 3 rungs: 1, 3, 9.
        let mut m = memory(
            serde_json::json!({"metric": "loss", "minResource": 1, "reductionFactor": 3, "maxResource": 10}),
        );
        for (j, v) in [0.1, 0.2, 0.3].iter().enumerate() {
            m.report(j, 1.0, *v);
            m.report(j, 3.0, *v);
            m.report(j, 9.0, *v);
        }
        assert!(m.report(0, 27.0, 5.0).is_none(), "no rung at 27");
    }

    #[test]
    fn a_nan_at_a_rung_stops() {
        for cutoff in ["rank", "percentile"] {
            let mut m = memory(serde_json::json!({"metric": "loss", "minResource": 2, "cutoff": cutoff}));
            assert!(m.report(0, 1.0, f64::NAN).is_none(), "before the first rung");
            let f = m.report(0, 2.0, f64::NAN).expect("NaN at rung 0");
            assert!(f.summary.contains("NaN at rung 0"), "{}", f.summary);
        }
    }

    #[test]
    fn maximized_metric_and_forgetting() {
        let mut m = memory(serde_json::json!({"metric": "accuracy", "minResource": 1, "reductionFactor": 2}));
        m.report(0, 1.0, 0.9);
        assert!(m.report(1, 1.0, 0.8).is_some(), "0.8 < the best 0.9");
        m.forget(0);
        m.forget(1);
        assert!(m.report(2, 1.0, 0.1).is_none(), "alone at the rung");
    }

    #[test]
    fn parameters_are_checked() {
        let e = errors("successive_halving", serde_json::json!({"metric": "loss"}));
        assert!(e.iter().any(|e| e.contains("with.minResource") && e.contains("required")), "{e:?}");
        let e = errors(
            "successive_halving",
            serde_json::json!({"metric": "loss", "minResource": 10, "maxResource": 5, "reductionFactor": 1, "cutoff": "top"}),
        );
        assert!(e.iter().any(|e| e.contains("with.maxResource")), "{e:?}");
        assert!(e.iter().any(|e| e.contains("with.reductionFactor")), "{e:?}");
        assert!(e.iter().any(|e| e.contains("with.cutoff")), "{e:?}");
    }
}
