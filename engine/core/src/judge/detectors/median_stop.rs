//! `median_stop`: the median stopping rule (Google Vizier; Ray Tune's `MedianStoppingRule`; Katib's
//! `medianstop`) — stop a job whose best value so far is worse than the median of its siblings' running
//! averages at the same position.
//!
//! At each report of a job at position `t` (its step, epoch or progress, by the policy's
//! `spec.cohort.alignBy`) with `t >= startStep`: every *other* job of the cohort that reported at `t` — running,
//! finished or already stopped, as Ray counts them — contributes its running average of the metric over its
//! reports from `startStep` to `t`; averages that are NaN or infinite are left out. With at least `minJobs`
//! of them, the job stops when its best value so far (over all its reports, NaN ignored) is strictly worse
//! than their median (numpy's median: the mean of the two middle values for an even count). A job whose every
//! value so far is NaN is worse than any sibling and stops.
//!
//! This is Ray Tune 2.60's `MedianStoppingRule` with `hard_stop=True` fed the same reports: `startStep` is its
//! `grace_period`, `minJobs` its `min_samples_required`. Deliberate differences (docs/src/ml-engineers/
//! sweeps.md): siblings meet at positions both reported (Ray also counts a sibling that jumped past `t`, with
//! its average up to `t`); a NaN after a finite value never makes the best NaN (Python's `min` keeps a
//! *first* NaN, so Ray stops a job whose first report is NaN whatever follows); with too few siblings the job
//! continues (Ray may instead pause it when other trials wait, which a TrainJob cannot do).
//!
//! The cost per report is O(log n) for a cohort of n jobs: per position, the siblings' averages sit in a
//! two-heap order statistic whose split follows the median.
//!
//! Example: `uses: median_stop`, `with: {metric: eval_loss, startStep: 200, minJobs: 3}`.

use rustc_hash::FxHashMap;

use super::cohort::{
    CohortJudge, CohortMemory, MAX_REPORTS, MemberId, OrderStats, best_of, better, fmt_position, position_key,
};
use super::{Detector, DetectorInfo, DirectionParam, Finding, ParamDoc, Params};
use crate::history::metric_series::Direction;
use crate::time::fmt_num;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "median_stop",
    summary: "The job's best value so far is worse than the median of its cohort siblings' running averages at the same step (Vizier, Ray MedianStoppingRule).",
    params: &[
        ParamDoc { name: "metric", ty: "string", default: "required", doc: "Canonical metric name." },
        ParamDoc { name: "mode", ty: "min|max|auto", default: "auto", doc: "Which way is better." },
        ParamDoc {
            name: "startStep",
            ty: "number",
            default: "0",
            doc: "Position (step, epoch or percent, by spec.cohort.alignBy) before which nothing stops; the running averages start here (Ray's grace_period).",
        },
        ParamDoc {
            name: "minJobs",
            ty: "count",
            default: "3",
            doc: "Siblings with a finite running average at the position needed to judge (Ray's min_samples_required).",
        },
    ],
    example: r#"{"metric": "eval_loss", "startStep": 200, "minJobs": 3}"#,
    build,
};

#[derive(Debug, Clone)]
pub(crate) struct MedianStop {
    metric: String,
    mode: DirectionParam,
    start: f64,
    min_jobs: usize,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let metric = p.required_string("metric");
    let mode = p.direction("mode");
    let start = p.positive("startStep", true).unwrap_or(0.0);
    let min_jobs = p.count("minJobs").unwrap_or(3);
    if min_jobs == 0 {
        p.error("minJobs", "must be at least 1");
    }
    Some(Box::new(MedianStop {
        metric: metric?.to_string(),
        mode,
        start,
        min_jobs: usize::try_from(min_jobs).unwrap_or(usize::MAX),
    }))
}

super::cohort::cohort_detector!(MedianStop);

impl CohortJudge for MedianStop {
    fn metric(&self) -> &str {
        &self.metric
    }

    fn direction(&self) -> Direction {
        self.mode.resolve(&self.metric)
    }

    fn new_memory(&self) -> Box<dyn CohortMemory> {
        Box::new(MedianMemory {
            metric: self.metric.clone(),
            direction: self.direction(),
            start: self.start,
            min_jobs: self.min_jobs,
            members: FxHashMap::default(),
            positions: FxHashMap::default(),
        })
    }
}

/// One job of the cohort.
#[derive(Debug, Default)]
struct Member {
    /// Its last position (reports must advance).
    last: Option<f64>,
    /// Best value so far, NaN ignored (NaN while every value was NaN).
    best: f64,
    /// Sum and count of its values from `startStep` on.
    sum: f64,
    count: u64,
    /// The running averages it left at each position (to remove them when it is deleted).
    averages: Vec<(u64, f64)>,
    /// It was told to stop: it is not judged again (its later reports, if it keeps running, still count).
    stopped: bool,
}

/// Per position, the finite running averages the cohort's jobs had there.
#[derive(Debug)]
struct MedianMemory {
    metric: String,
    direction: Direction,
    start: f64,
    min_jobs: usize,
    members: FxHashMap<MemberId, Member>,
    positions: FxHashMap<u64, OrderStats>,
}

impl CohortMemory for MedianMemory {
    fn report(&mut self, member: MemberId, x: f64, value: f64) -> Option<Finding> {
        let m = self.members.entry(member).or_insert_with(|| Member { best: f64::NAN, ..Member::default() });
        if m.last.is_some_and(|last| x <= last) {
            return None;
        }
        m.last = Some(x);
        m.best = best_of(self.direction, m.best, value);
        if x < self.start {
            return None;
        }
        m.sum += value;
        m.count += 1;
        let average = m.sum / m.count as f64;
        let key = position_key(x);
        let siblings = self.positions.entry(key).or_default();
        let mut finding = None;
        if !m.stopped
            && siblings.len() >= self.min_jobs
            && let Some(median) = siblings.median()
            && (m.best.is_nan() || better(self.direction, median, m.best))
        {
            let n = siblings.len();
            let summary = if m.best.is_nan() {
                format!(
                    "every {} value so far is NaN, at {} where {n} sibling jobs average {}",
                    self.metric,
                    fmt_position(x),
                    fmt_num(median)
                )
            } else {
                format!(
                    "best {} so far {} is worse than the median {} of {n} sibling jobs' running averages at {}",
                    self.metric,
                    fmt_num(m.best),
                    fmt_num(median),
                    fmt_position(x)
                )
            };
            finding = Some(
                Finding::new(summary)
                    .value(&format!("level:{}", self.metric), m.best)
                    .value("cohort_median", median)
                    .value("cohort_size", n as f64 + 1.0)
                    .value("position", x),
            );
            m.stopped = true;
        }
        if average.is_finite() && m.averages.len() < MAX_REPORTS {
            siblings.insert(average);
            m.averages.push((key, average));
        }
        finding
    }

    fn forget(&mut self, member: MemberId) {
        let Some(m) = self.members.remove(&member) else { return };
        for (key, average) in m.averages {
            if let Some(s) = self.positions.get_mut(&key) {
                s.remove(average);
                if s.is_empty() {
                    self.positions.remove(&key);
                }
            }
        }
    }

    fn members(&self) -> usize {
        self.members.len()
    }

    fn approx_bytes(&self) -> usize {
        self.members.values().map(|m| 64 + m.averages.capacity() * 16).sum::<usize>()
            + self.positions.values().map(|s| 48 + s.approx_bytes()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::detector;
    use super::*;

    fn memory(with: serde_json::Value) -> Box<dyn CohortMemory> {
        let d = detector("median_stop", with);
        d.cohort().expect("a cohort detector").new_memory()
    }

    /// Four jobs report losses at steps 1..=4 in lockstep; job 3 is clearly the worst. With `minJobs: 3` and
    /// `startStep: 2` it is judged first at step 2, against the running averages (from step 2) of jobs 0-2.
    #[test]
    fn the_worst_job_stops_at_the_first_step_it_is_judged() {
        let mut m = memory(serde_json::json!({"metric": "loss", "startStep": 2, "minJobs": 3}));
        let curves =
            [[1.0, 0.8, 0.6, 0.5], [1.0, 0.7, 0.5, 0.4], [1.1, 0.9, 0.7, 0.6], [1.2, 1.1, 1.05, 1.0]];
        let mut stops = Vec::new();
        for step in 0..4 {
            for (job, curve) in curves.iter().enumerate() {
                if let Some(f) = m.report(job, step as f64 + 1.0, curve[step]) {
                    stops.push((job, step + 1, f));
                }
            }
        }
        assert_eq!(stops.len(), 1, "{stops:?}");
        let (job, step, f) = &stops[0];
        assert_eq!((*job, *step), (3, 2));
        // Siblings' averages at step 2 are their step-2 values 0.8, 0.7, 0.9: median 0.8 < best 1.1.
        assert_eq!(f.values[1], ("cohort_median".to_string(), 0.8));
        assert!(f.summary.contains("best loss so far 1.1"), "{}", f.summary);
    }

    /// Ray counts a sibling only when it reached the position; the first three jobs have nobody to compare
    /// with, and ties continue (strictly worse stops).
    #[test]
    fn too_few_siblings_and_ties_continue() {
        let mut m = memory(serde_json::json!({"metric": "loss", "minJobs": 2}));
        assert!(m.report(0, 1.0, 1.0).is_none());
        assert!(m.report(1, 1.0, 2.0).is_none(), "one sibling is fewer than minJobs");
        // Siblings 1.0 and 2.0: median 1.5; a best of exactly 1.5 ties and continues.
        assert!(m.report(2, 1.0, 1.5).is_none());
        // Now 1.0, 2.0, 1.5: median 1.5; 1.6 is worse.
        assert!(m.report(3, 1.0, 1.6).is_some());
    }

    /// A maximized metric stops the job below the median; the best so far counts, not the latest value.
    #[test]
    fn best_so_far_of_a_maximized_metric() {
        let mut m = memory(serde_json::json!({"metric": "accuracy", "minJobs": 1}));
        m.report(0, 1.0, 0.5);
        m.report(0, 2.0, 0.6);
        assert!(m.report(1, 1.0, 0.9).is_none());
        // Job 1 drops to 0.1 at step 2, but its best (0.9) beats job 0's running average (0.55).
        assert!(m.report(1, 2.0, 0.1).is_none());
        assert!(m.report(2, 1.0, 0.2).is_some(), "0.2 is below the median of 0.5 and 0.9");
    }

    /// A NaN poisons a sibling's running average, which then no longer counts; a job whose every value is
    /// NaN stops; a NaN after finite values leaves the best alone.
    #[test]
    fn nan_values() {
        let mut m = memory(serde_json::json!({"metric": "loss", "minJobs": 1}));
        m.report(0, 1.0, f64::NAN);
        assert!(m.report(1, 1.0, 5.0).is_none(), "job 0's average is NaN: no sibling counts");
        let f = m.report(2, 1.0, f64::NAN).expect("all-NaN job stops");
        assert!(f.summary.contains("NaN"), "{}", f.summary);
        assert!(m.report(1, 2.0, f64::NAN).is_none(), "no sibling at step 2");
        m.report(3, 1.0, 4.0);
        m.report(3, 2.0, 4.0);
        // Job 1 reported NaN at step 2 after 5.0: its best stays 5.0, worse than job 3's average 4.0.
        assert!(m.report(1, 3.0, 1.0).is_none(), "nobody at step 3 yet");
    }

    /// A deleted job's averages leave the cohort.
    #[test]
    fn a_forgotten_job_no_longer_counts() {
        let mut m = memory(serde_json::json!({"metric": "loss", "minJobs": 1}));
        m.report(0, 1.0, 0.1);
        m.forget(0);
        assert_eq!(m.members(), 0);
        assert!(m.report(1, 1.0, 9.0).is_none(), "nobody left to compare with");
    }

    /// Repeated or backward positions are ignored.
    #[test]
    fn reports_must_advance() {
        let mut m = memory(serde_json::json!({"metric": "loss", "minJobs": 1}));
        m.report(0, 2.0, 0.1);
        assert!(m.report(1, 2.0, 1.0).is_some());
        assert!(m.report(1, 2.0, 1.0).is_none());
        assert!(m.report(1, 1.0, 1.0).is_none());
    }

    #[test]
    fn parameters_are_checked() {
        let e =
            super::super::testkit::errors("median_stop", serde_json::json!({"metric": "loss", "minJobs": 0}));
        assert!(e.iter().any(|e| e.contains("with.minJobs") && e.contains("at least 1")), "{e:?}");
        let e = super::super::testkit::errors("median_stop", serde_json::json!({"startStep": 3}));
        assert!(e.iter().any(|e| e.contains("with.metric")), "{e:?}");
    }
}
