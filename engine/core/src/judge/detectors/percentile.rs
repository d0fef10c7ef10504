//! `percentile`: Optuna's `PercentilePruner` (and, at `percentile: 50`, its `MedianPruner`) — stop a job whose
//! best value so far is in the bottom of the values its *finished* siblings had at the same position.
//!
//! At each report of a job at position `t` (step, epoch or progress, by `spec.cohort.alignBy`): nothing is
//! judged until `minJobs` jobs of the cohort finished (their TrainJob completed; Optuna's COMPLETE trials,
//! `n_startup_trials`), before `startStep` (`n_warmup_steps`), or at any report but the first in each window
//! `[startStep + k·interval, startStep + (k+1)·interval)` (`interval_steps`: a missed boundary is checked at
//! the next report). Then the reference is numpy's linear `nanpercentile` of the values the finished siblings
//! reported at exactly `t` (`100 − percentile` for a maximized metric); with fewer than `minPeers` of them
//! (`n_min_trials`), or only NaN, nothing stops. The job stops when its best value so far (NaN ignored) is
//! strictly worse; a job whose every value is NaN stops.
//!
//! This is Optuna 5.0's rule, fed the same reports with the same trials completing in the same order; the
//! one deliberate difference is where a cohort comes from (a label, not a study). Jobs meet at positions they
//! both reported (Optuna's steps), so siblings should report at the same steps; `alignBy: progress` makes
//! jobs of different lengths meet at whole percents.
//!
//! The cost per report is O(log n) for a cohort of n jobs: per position, the finished siblings' values sit in
//! a two-heap order statistic split at the percentile; a job finishing adds its values once.
//!
//! Example: `uses: percentile`, `with: {metric: eval_loss, percentile: 25, minJobs: 5, startStep: 30}`.

use rustc_hash::FxHashMap;

use super::cohort::{
    CohortJudge, CohortMemory, MAX_REPORTS, MemberId, OrderStats, best_of, better, fmt_position, position_key,
};
use super::{Detector, DetectorInfo, DirectionParam, Finding, ParamDoc, Params};
use crate::history::metric_series::Direction;
use crate::time::fmt_num;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "percentile",
    summary: "The job's best value so far is worse than a percentile of its finished cohort siblings' values at the same step (Optuna PercentilePruner; 50 is its MedianPruner).",
    params: &[
        ParamDoc { name: "metric", ty: "string", default: "required", doc: "Canonical metric name." },
        ParamDoc { name: "mode", ty: "min|max|auto", default: "auto", doc: "Which way is better." },
        ParamDoc {
            name: "percentile",
            ty: "number 0-100",
            default: "required",
            doc: "Keep the jobs in the top this-many percent: 25 stops a job worse than the best quarter of its finished siblings.",
        },
        ParamDoc {
            name: "minJobs",
            ty: "count",
            default: "5",
            doc: "Finished jobs of the cohort before anything stops (Optuna's n_startup_trials).",
        },
        ParamDoc {
            name: "startStep",
            ty: "number",
            default: "0",
            doc: "Position before which nothing stops (n_warmup_steps).",
        },
        ParamDoc {
            name: "interval",
            ty: "number > 0",
            default: "1",
            doc: "Judge only the first report in each window of this many steps after startStep (interval_steps).",
        },
        ParamDoc {
            name: "minPeers",
            ty: "count",
            default: "1",
            doc: "Finished siblings that reported at the position needed to judge (n_min_trials).",
        },
    ],
    example: r#"{"metric": "eval_loss", "percentile": 25, "minJobs": 5, "startStep": 30, "interval": 10}"#,
    build,
};

#[derive(Debug, Clone)]
pub(crate) struct Percentile {
    metric: String,
    mode: DirectionParam,
    percentile: f64,
    min_jobs: usize,
    start: f64,
    interval: f64,
    min_peers: usize,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let metric = p.required_string("metric");
    let mode = p.direction("mode");
    let had = p.raw("percentile").is_some();
    let percentile = p.f64("percentile");
    match percentile {
        None if !had => p.error("percentile", "required: the share of jobs to keep, 0 to 100"),
        Some(x) if !(0.0..=100.0).contains(&x) => {
            p.error("percentile", format!("must be between 0 and 100, got {x}"));
        }
        _ => {}
    }
    let min_jobs = p.count("minJobs").unwrap_or(5);
    let start = p.positive("startStep", true).unwrap_or(0.0);
    let interval = p.positive("interval", false).unwrap_or(1.0);
    let min_peers = p.count("minPeers").unwrap_or(1);
    if min_peers == 0 {
        p.error("minPeers", "must be at least 1");
    }
    Some(Box::new(Percentile {
        metric: metric?.to_string(),
        mode,
        percentile: percentile.filter(|x| (0.0..=100.0).contains(x))?,
        min_jobs: usize::try_from(min_jobs).unwrap_or(usize::MAX),
        start,
        interval,
        min_peers: usize::try_from(min_peers).unwrap_or(usize::MAX),
    }))
}

super::cohort::cohort_detector!(Percentile);

impl CohortJudge for Percentile {
    fn metric(&self) -> &str {
        &self.metric
    }

    fn direction(&self) -> Direction {
        self.mode.resolve(&self.metric)
    }

    fn new_memory(&self) -> Box<dyn CohortMemory> {
        let direction = self.direction();
        // Optuna: `100 - percentile` for a maximized metric, then numpy divides by 100.
        let p = if direction == Direction::Max { 100.0 - self.percentile } else { self.percentile };
        Box::new(PercentileMemory {
            rule: self.clone(),
            direction,
            q: p / 100.0,
            finished: 0,
            members: FxHashMap::default(),
            positions: FxHashMap::default(),
        })
    }
}

#[derive(Debug, Default)]
struct Member {
    last: Option<f64>,
    best: f64,
    /// Its values by position, in report order (bounded by [`MAX_REPORTS`]).
    values: Vec<(u64, f64)>,
    finished: bool,
    stopped: bool,
}

/// Per position, what finished jobs reported there.
#[derive(Debug, Default)]
struct Reported {
    /// Finished jobs that reported at the position, NaN included (what `minPeers` counts, as Optuna does).
    count: usize,
    /// Their values other than NaN.
    values: OrderStats,
}

#[derive(Debug)]
struct PercentileMemory {
    rule: Percentile,
    direction: Direction,
    /// The fraction numpy is asked for.
    q: f64,
    /// Jobs of the cohort that finished.
    finished: usize,
    members: FxHashMap<MemberId, Member>,
    positions: FxHashMap<u64, Reported>,
}

impl PercentileMemory {
    /// Optuna's `_is_first_in_interval_step`: no earlier report in the interval window `x` falls in.
    fn first_in_interval(&self, x: f64, previous: Option<f64>) -> bool {
        let start = self.rule.start;
        let nearest_lower = ((x - start) / self.rule.interval).floor() * self.rule.interval + start;
        previous.unwrap_or(-1.0) < nearest_lower
    }
}

impl CohortMemory for PercentileMemory {
    fn report(&mut self, member: MemberId, x: f64, value: f64) -> Option<Finding> {
        let m = self.members.entry(member).or_insert_with(|| Member { best: f64::NAN, ..Member::default() });
        let previous = m.last;
        if previous.is_some_and(|last| x <= last) {
            return None;
        }
        m.last = Some(x);
        m.best = best_of(self.direction, m.best, value);
        let key = position_key(x);
        if m.values.len() < MAX_REPORTS {
            m.values.push((key, value));
        }
        let (best, stopped) = (m.best, m.stopped);
        if stopped
            || self.finished == 0
            || self.finished < self.rule.min_jobs
            || x < self.rule.start
            || !self.first_in_interval(x, previous)
        {
            return None;
        }
        let metric = &self.rule.metric;
        let finding = if best.is_nan() {
            Finding::new(format!("every {metric} value so far is NaN, at {}", fmt_position(x)))
        } else {
            let reported = self.positions.get_mut(&key)?;
            if reported.count < self.rule.min_peers {
                return None;
            }
            let peers = reported.count;
            let reference = reported.values.percentile(self.q)?;
            if !better(self.direction, reference, best) {
                return None;
            }
            Finding::new(format!(
                "best {metric} so far {} is worse than {} — the {} percentile of {peers} finished sibling jobs at {}",
                fmt_num(best),
                fmt_num(reference),
                fmt_num(self.rule.percentile),
                fmt_position(x)
            ))
            .value(&format!("level:{metric}"), best)
            .value("cohort_percentile", reference)
            .value("cohort_finished", peers as f64)
            .value("position", x)
        };
        if let Some(m) = self.members.get_mut(&member) {
            m.stopped = true;
        }
        Some(finding)
    }

    fn finished(&mut self, member: MemberId) {
        let Some(m) = self.members.get_mut(&member) else { return };
        if m.finished {
            return;
        }
        m.finished = true;
        self.finished += 1;
        for &(key, value) in &m.values {
            let reported = self.positions.entry(key).or_default();
            reported.count += 1;
            if !value.is_nan() {
                reported.values.insert(value);
            }
        }
    }

    fn forget(&mut self, member: MemberId) {
        let Some(m) = self.members.remove(&member) else { return };
        if !m.finished {
            return;
        }
        self.finished -= 1;
        for (key, value) in m.values {
            if let Some(reported) = self.positions.get_mut(&key) {
                reported.count -= 1;
                if !value.is_nan() {
                    reported.values.remove(value);
                }
                if reported.count == 0 {
                    self.positions.remove(&key);
                }
            }
        }
    }

    fn members(&self) -> usize {
        self.members.len()
    }

    fn approx_bytes(&self) -> usize {
        self.members.values().map(|m| 64 + m.values.capacity() * 16).sum::<usize>()
            + self.positions.values().map(|r| 56 + r.values.approx_bytes()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{detector, errors};
    use super::*;

    fn memory(with: serde_json::Value) -> Box<dyn CohortMemory> {
        detector("percentile", with).cohort().expect("a cohort detector").new_memory()
    }

    /// Runs a job to completion: reports at steps 0.. and finishes it.
    fn complete(m: &mut dyn CohortMemory, job: MemberId, values: &[f64]) {
        for (step, v) in values.iter().enumerate() {
            assert!(m.report(job, step as f64, *v).is_none(), "a finishing job is never stopped here");
        }
        m.finished(job);
    }

    /// Three finished jobs; at `percentile: 50` (Optuna's MedianPruner) a running job stops at the first
    /// step its best is worse than their median there.
    #[test]
    fn median_of_finished_jobs_at_the_same_step() {
        let mut m = memory(serde_json::json!({"metric": "loss", "percentile": 50, "minJobs": 3}));
        complete(&mut *m, 0, &[1.0, 0.8, 0.6]);
        complete(&mut *m, 1, &[1.0, 0.7, 0.5]);
        complete(&mut *m, 2, &[1.2, 0.9, 0.8]);
        assert!(m.report(3, 0.0, 1.0).is_none(), "1.0 ties the median 1.0");
        let f = m.report(3, 1.0, 0.85).expect("0.85 > median 0.8 at step 1");
        assert!(f.summary.contains("worse than 0.8"), "{}", f.summary);
        assert!(m.report(3, 2.0, 0.1).is_none(), "stopped once");
    }

    /// Nothing stops before `minJobs` finished, before `startStep`, or off the interval's first report.
    #[test]
    fn startup_warmup_and_interval() {
        let mut m = memory(serde_json::json!({
            "metric": "loss", "percentile": 50, "minJobs": 2, "startStep": 2, "interval": 2
        }));
        complete(&mut *m, 0, &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
        assert!(m.report(9, 0.0, 5.0).is_none(), "one finished job of two");
        complete(&mut *m, 1, &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
        assert!(m.report(9, 1.0, 5.0).is_none(), "before startStep");
        let f = m.report(9, 2.0, 5.0);
        assert!(f.is_some(), "step 2 opens the first window");
        // Another job reporting every step: judged at 2 and 4, not at 3.
        let mut m = memory(serde_json::json!({
            "metric": "loss", "percentile": 50, "minJobs": 1, "startStep": 2, "interval": 2
        }));
        complete(&mut *m, 0, &[1.0, 1.0, 1.0, 9.0, 1.0]);
        assert!(m.report(7, 2.0, 1.0).is_none());
        assert!(m.report(7, 3.0, 2.0).is_none(), "3 is not the first report of window [2, 4)");
        assert!(m.report(7, 4.0, 2.0).is_none(), "best 1.0 ties");
        // A job that skips step 2 and reports at 3 first is judged at 3 (a missed boundary).
        assert!(m.report(8, 3.0, 10.0).is_some(), "10 > 9");
    }

    /// A maximized metric uses `100 − percentile`; fewer finished siblings at the step than `minPeers`
    /// judges nothing.
    #[test]
    fn maximized_metric_and_min_peers() {
        let mut m =
            memory(serde_json::json!({"metric": "accuracy", "percentile": 25, "minJobs": 1, "minPeers": 2}));
        complete(&mut *m, 0, &[0.5, 0.6]);
        assert!(m.report(5, 0.0, 0.1).is_none(), "one peer at step 0 of two needed");
        complete(&mut *m, 1, &[0.7, 0.8]);
        // Keep the top 25 %: reference is the 75th percentile of 0.5 and 0.7 = 0.65.
        assert!(m.report(6, 0.0, 0.66).is_none());
        assert!(m.report(7, 0.0, 0.64).is_some());
    }

    /// NaN: a finished sibling's NaN counts toward minPeers but not the percentile; an all-NaN job stops.
    #[test]
    fn nan_values() {
        let mut m = memory(serde_json::json!({"metric": "loss", "percentile": 50, "minJobs": 1}));
        complete(&mut *m, 0, &[f64::NAN, 1.0]);
        assert!(m.report(1, 0.0, 3.0).is_none(), "only a NaN at step 0: no reference");
        let f = m.report(2, 0.0, f64::NAN).expect("every value NaN");
        assert!(f.summary.contains("NaN"));
        assert!(m.report(1, 1.0, f64::NAN).is_some(), "best 3.0 (NaN ignored) is worse than 1.0");
    }

    #[test]
    fn a_forgotten_finished_job_no_longer_counts() {
        let mut m = memory(serde_json::json!({"metric": "loss", "percentile": 50, "minJobs": 1}));
        complete(&mut *m, 0, &[0.1]);
        m.forget(0);
        assert!(m.report(1, 0.0, 9.0).is_none());
    }

    #[test]
    fn parameters_are_checked() {
        let e = errors("percentile", serde_json::json!({"metric": "loss"}));
        assert!(e.iter().any(|e| e.contains("with.percentile") && e.contains("required")), "{e:?}");
        let e = errors("percentile", serde_json::json!({"metric": "loss", "percentile": 120, "interval": 0}));
        assert!(e.iter().any(|e| e.contains("with.percentile") && e.contains("between 0 and 100")), "{e:?}");
        assert!(e.iter().any(|e| e.contains("with.interval")), "{e:?}");
    }
}
