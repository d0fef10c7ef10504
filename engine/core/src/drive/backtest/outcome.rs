//! What a stop cost and saved, judged from the rest of the recorded run: the GPU time between the stop and
//! the run's real end, and the *regret* — how much the judged metric still improved after the stop. A stop
//! after which the run improved by more than the tolerance is a *false stop*: it would have killed good work.
//! A stop of a run that had gone bad (non-finite values, a stall, a plateau or a divergence) has a *lead
//! time*: how long after the trouble began it came.
//!
//! The judgement is made on a smoothed *level*, not on raw values, so that noise is not counted as
//! improvement: the level at a logged value is the median of the last [`Judge::smoothing`] logged finite
//! values up to it (a rolling median). A metric logged fewer than [`SPARSE`] times in the whole run (an
//! evaluation metric, typically: already an average over the evaluation set, and a median of five sparse
//! evaluations would lag by two) is judged on its raw values. A curve holds only logged values ([`Curve`]): a report that repeats
//! the previous value bit for bit (a status server's heartbeat re-sending a cached loss) is not a point.
//! The *best level before* a stop is the best rolling median up to and including the stop (for a plateau
//! that is the level at the stop; for a run whose level had already risen, its earlier best, so that noise
//! at a diverged level does not count as a recovery); the *best level after* is the best rolling median at
//! the logged values after the stop. The stop is false when the best level after beats the best level
//! before by more than the relative tolerance *and* by more than the absolute one.

use crate::history::metric_series::Direction;
use crate::time::{Timestamp, seconds};

/// One metric of one run as logged, in time order: one point per report that carried a new value of it
/// (see [`super::runs_of`]). Non-finite values are kept (they mark a NaN onset).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Curve {
    /// `(time, value)` pairs in time order.
    pub points: Vec<(Timestamp, f64)>,
}

/// How a run that was rightly stopped had gone bad before the stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Trouble {
    /// The judged metric's latest logged value before the stop was NaN or infinite.
    NonFinite,
    /// No progress was reported for a long time before the stop (a hang).
    Stalled,
    /// The level had become clearly worse than its best (by more than [`DIVERGED_BY`], relative, and
    /// more than the absolute tolerance).
    Diverged,
    /// The level had stopped improving by more than the tolerance.
    Plateau,
}

impl Trouble {
    /// The name used in reports: `nonFinite`, `stalled`, `diverged`, `plateau`.
    pub fn as_str(self) -> &'static str {
        match self {
            Trouble::NonFinite => "nonFinite",
            Trouble::Stalled => "stalled",
            Trouble::Diverged => "diverged",
            Trouble::Plateau => "plateau",
        }
    }
}

/// How much worse than its best level (relative) the level at the stop must be for a run to count as
/// diverged.
pub const DIVERGED_BY: f64 = 0.25;

/// A silence before the stop counts as a stall when it is this many times the run's median reporting
/// interval (and at least [`MIN_STALL_SECS`]).
pub const STALL_INTERVALS: f64 = 10.0;

/// The shortest silence that counts as a stall.
pub const MIN_STALL_SECS: f64 = 600.0;

/// The default number of logged values the level is the median of.
pub const DEFAULT_SMOOTHING: usize = 5;

/// A curve with fewer logged finite values than this is judged raw (no smoothing).
pub const SPARSE: usize = 30;

/// What is known about a run besides the judged curve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunFacts<'a> {
    /// When the run really ended (its last record: completion, failure, deletion).
    pub end: Timestamp,
    /// GPUs it held (0 when unknown: the GPU-hours are then 0, the hours are still reported).
    pub gpus: f64,
    /// The policy's price of a GPU-hour, if it has one.
    pub gpu_hour_cost: Option<f64>,
    /// Times of every progress report of the run, in order (for stall onsets).
    pub reports: &'a [Timestamp],
}

/// The verdict on one stop.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StopOutcome {
    /// When the stop happened.
    pub at: Timestamp,
    /// Wall-clock hours between the stop and the run's real end.
    pub hours_saved: f64,
    /// GPU-hours between the stop and the run's real end.
    pub gpu_hours_saved: f64,
    /// Dollars, when the policy prices GPU-hours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars_saved: Option<f64>,
    /// The level (rolling median) at the last logged value up to the stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level_at_stop: Option<f64>,
    /// The best level up to and including the stop.
    pub best_before: Option<f64>,
    /// The best level after the stop (what the run went on to reach).
    pub best_after: Option<f64>,
    /// How much better `best_after` is than `best_before` (0 when it is not better).
    pub improvement: f64,
    /// `improvement` relative to `|best_before|`; `None` when nothing was measured before the stop, or
    /// the best before it was exactly 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_improvement: Option<f64>,
    /// The run improved by more than the tolerance after the stop: good work would have been killed.
    pub false_stop: bool,
    /// The run logged the judged metric at all (finite or not). A stop of a run that never did cannot be
    /// judged: it is neither false nor rightful.
    pub measured: bool,
    /// For a rightful stop: how the run had gone bad, and when that began.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trouble: Option<Trouble>,
    /// When the trouble began.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub onset: Option<Timestamp>,
    /// Seconds from the onset to the stop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lead_seconds: Option<f64>,
}

/// How much better `a` is than `b` (negative when worse).
fn gain(direction: Direction, a: f64, b: f64) -> f64 {
    match direction {
        Direction::Min => b - a,
        Direction::Max => a - b,
    }
}

fn best(direction: Direction, values: impl Iterator<Item = f64>) -> Option<f64> {
    values.filter(|v| v.is_finite()).reduce(|b, v| direction.pick(b, v))
}

/// How much later improvement makes a stop false.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative to the best level before the stop (0.01 = 1 %).
    pub relative: f64,
    /// And more than this in the metric's own units (0: any), so that a loss creeping from 0.0002 to
    /// 0.0001 — 50 %, and meaningless — need not count.
    pub absolute: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance { relative: 0.01, absolute: 0.001 }
    }
}

/// How stops are judged: the tolerance, and how many logged values a level is the median of.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Judge {
    /// Improvement after a stop beyond which it is false.
    pub tolerance: Tolerance,
    /// Logged values per rolling median (1: raw values).
    pub smoothing: usize,
}

impl Default for Judge {
    fn default() -> Self {
        Judge { tolerance: Tolerance::default(), smoothing: DEFAULT_SMOOTHING }
    }
}

/// The level at each finite logged value: the median of the last `k` finite values up to it.
pub fn levels(points: &[(Timestamp, f64)], k: usize) -> Vec<(Timestamp, f64)> {
    let k = k.max(1);
    let mut window: std::collections::VecDeque<f64> = std::collections::VecDeque::with_capacity(k);
    let mut scratch = Vec::with_capacity(k);
    let mut out = Vec::with_capacity(points.len());
    for &(t, v) in points.iter().filter(|(_, v)| v.is_finite()) {
        if window.len() == k {
            window.pop_front();
        }
        window.push_back(v);
        scratch.clear();
        scratch.extend(window.iter().copied());
        if let Some(m) = median(&mut scratch) {
            out.push((t, m));
        }
    }
    out
}

/// Judges a stop at `at` of a run whose judged metric is `curve`.
pub fn judge_stop(
    curve: &Curve,
    direction: Direction,
    judge: Judge,
    facts: &RunFacts<'_>,
    at: Timestamp,
) -> StopOutcome {
    let tolerance = judge.tolerance;
    let measured = !curve.points.is_empty();
    let split = curve.points.partition_point(|(t, _)| *t <= at);
    let before = &curve.points[..split];
    let finite = curve.points.iter().filter(|p| p.1.is_finite()).count();
    let levels = levels(&curve.points, if finite < SPARSE { 1 } else { judge.smoothing });
    let level_split = levels.partition_point(|(t, _)| *t <= at);
    let (levels_before, levels_after) = levels.split_at(level_split);
    let level_at_stop = levels_before.last().map(|l| l.1);
    let best_before = best(direction, levels_before.iter().map(|p| p.1));
    let best_after = best(direction, levels_after.iter().map(|p| p.1));
    let (improvement, relative, false_stop) = match (best_before, best_after) {
        (Some(b), Some(a)) => {
            let improvement = gain(direction, a, b).max(0.0);
            // From a best of exactly 0 any gain is infinitely large relatively: only the absolute floor counts.
            let relative = (b != 0.0).then(|| improvement / b.abs());
            let beyond = relative.is_none_or(|r| r > tolerance.relative) && improvement > tolerance.absolute;
            (improvement, relative, beyond)
        }
        // Stopped before anything was measured, and the run went on to measure: it was cut short blind.
        (None, Some(_)) => (0.0, None, true),
        (_, None) => (0.0, best_before.map(|_| 0.0), false),
    };
    let hours = (seconds(at, facts.end) / 3600.0).max(0.0);
    let gpu_hours = hours * facts.gpus.max(0.0);
    let mut outcome = StopOutcome {
        at,
        hours_saved: hours,
        gpu_hours_saved: gpu_hours,
        dollars_saved: facts.gpu_hour_cost.map(|c| c * gpu_hours),
        level_at_stop,
        best_before,
        best_after,
        improvement,
        relative_improvement: relative,
        false_stop,
        measured,
        trouble: None,
        onset: None,
        lead_seconds: None,
    };
    if !false_stop
        && let Some((trouble, onset)) = trouble(before, levels_before, direction, tolerance, facts, at)
    {
        outcome.trouble = Some(trouble);
        outcome.onset = Some(onset);
        outcome.lead_seconds = Some(seconds(onset, at).max(0.0));
    }
    outcome
}

/// How and when a run that did not improve after `at` had gone bad, from what was logged up to `at`.
fn trouble(
    before: &[(Timestamp, f64)],
    levels_before: &[(Timestamp, f64)],
    direction: Direction,
    tolerance: Tolerance,
    facts: &RunFacts<'_>,
    at: Timestamp,
) -> Option<(Trouble, Timestamp)> {
    // Non-finite at the stop: the trailing run of non-finite values began at its first.
    if before.last().is_some_and(|(_, v)| !v.is_finite()) {
        let first = before.iter().rposition(|(_, v)| v.is_finite()).map_or(0, |i| i + 1);
        return Some((Trouble::NonFinite, before[first].0));
    }
    let reported = facts.reports.partition_point(|t| *t <= at);
    let stall_after = MIN_STALL_SECS.max(STALL_INTERVALS * median_interval(&facts.reports[..reported]));
    let stall = facts.reports[..reported]
        .last()
        .filter(|last| seconds(**last, at) >= stall_after)
        .map(|last| (Trouble::Stalled, *last));
    let learning_ended = best(direction, levels_before.iter().map(|p| p.1)).and_then(|best_before| {
        // The level last got within the tolerance of the best it would reach before the stop: its last
        // significant improvement (one larger than both tolerances).
        let slack = (tolerance.relative * best_before.abs()).max(tolerance.absolute);
        let close_enough = |v: f64| gain(direction, best_before, v) <= slack;
        let onset = levels_before.iter().find(|(_, v)| close_enough(*v))?.0;
        let latest = levels_before.last()?.1;
        let worse_by = -gain(direction, latest, best_before);
        let kind = if best_before != 0.0
            && worse_by / best_before.abs() > DIVERGED_BY
            && worse_by > tolerance.absolute
        {
            Trouble::Diverged
        } else {
            Trouble::Plateau
        };
        Some((kind, onset))
    });
    // A run that had stopped learning long before it also went silent: the trouble is the plateau.
    match (stall, learning_ended) {
        (Some(s), Some(l)) if seconds(l.1, s.1) >= stall_after => Some(l),
        (Some(s), _) => Some(s),
        (None, l) => l,
    }
}

/// The median gap between consecutive reports, in seconds (0 with fewer than two reports).
fn median_interval(reports: &[Timestamp]) -> f64 {
    let mut gaps: Vec<f64> = reports.windows(2).map(|w| seconds(w[0], w[1])).collect();
    median(&mut gaps).unwrap_or(0.0)
}

/// The median of some numbers (`None` for none); the mean of the middle two for an even count.
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

#[cfg(test)]
mod tests {

    use super::*;

    const TOL: Tolerance = Tolerance { relative: 0.01, absolute: 0.0 };
    /// Raw values, 1 % relative: the judgement before smoothing, which these tests pin down.
    const RAW: Judge = Judge { tolerance: TOL, smoothing: 1 };

    fn t(minutes: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + minutes * 60).unwrap()
    }

    /// A curve of one value per minute from minute 0.
    fn curve(values: &[f64]) -> Curve {
        Curve { points: values.iter().enumerate().map(|(i, v)| (t(i as i64), *v)).collect() }
    }

    fn reports(n: usize) -> Vec<Timestamp> {
        (0..n as i64).map(t).collect()
    }

    fn facts(end_minute: i64, gpus: f64, reports: &[Timestamp]) -> RunFacts<'_> {
        RunFacts { end: t(end_minute), gpus, gpu_hour_cost: Some(2.0), reports }
    }

    #[test]
    fn a_run_that_improves_after_a_plateau_is_a_false_stop() {
        // Flat at 1.0 from minute 3 to 9, then it learns again: 0.8 at minute 12.
        let c = curve(&[2.0, 1.5, 1.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.95, 0.9, 0.8]);
        let r = reports(13);
        let o = judge_stop(&c, Direction::Min, RAW, &facts(120, 8.0, &r), t(9));
        assert!(o.false_stop);
        assert_eq!(o.best_before, Some(1.0));
        assert_eq!(o.best_after, Some(0.8));
        assert!((o.improvement - 0.2).abs() < 1e-12);
        assert!((o.relative_improvement.unwrap() - 0.2).abs() < 1e-12);
        // 111 minutes to the end on 8 GPUs at $2.
        assert!((o.hours_saved - 111.0 / 60.0).abs() < 1e-12);
        assert!((o.gpu_hours_saved - 8.0 * 111.0 / 60.0).abs() < 1e-12);
        assert!((o.dollars_saved.unwrap() - 16.0 * 111.0 / 60.0).abs() < 1e-9);
        assert_eq!(o.trouble, None, "a false stop has no trouble");
        assert_eq!(o.lead_seconds, None);
    }

    #[test]
    fn a_plateau_that_never_recovers_is_a_rightful_stop_with_its_lead_time() {
        // Reaches 1.0 at minute 3; afterwards only noise within 0.5 %.
        let c = curve(&[2.0, 1.5, 1.2, 1.0, 1.004, 0.999, 1.003, 0.998, 1.001, 0.997, 1.002]);
        let r = reports(11);
        let o = judge_stop(&c, Direction::Min, RAW, &facts(10, 1.0, &r), t(8));
        assert!(!o.false_stop);
        assert_eq!(o.best_before, Some(0.998));
        assert_eq!(o.best_after, Some(0.997));
        assert!(o.relative_improvement.unwrap() < 0.01);
        assert_eq!(o.trouble, Some(Trouble::Plateau));
        assert_eq!(o.onset, Some(t(3)), "the last improvement larger than the tolerance");
        assert_eq!(o.lead_seconds, Some(5.0 * 60.0));
        assert!((o.gpu_hours_saved - 2.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn a_nan_runs_stop_has_zero_regret() {
        let c = curve(&[2.0, 1.5, 1.2, f64::NAN, f64::NAN, f64::NAN, f64::NAN]);
        let r = reports(7);
        let o = judge_stop(&c, Direction::Min, RAW, &facts(60, 4.0, &r), t(5));
        assert!(!o.false_stop);
        assert_eq!(o.improvement, 0.0);
        assert_eq!(o.relative_improvement, Some(0.0));
        assert_eq!(o.best_after, None, "NaN is not a value to improve to");
        assert_eq!(o.trouble, Some(Trouble::NonFinite));
        assert_eq!(o.onset, Some(t(3)));
        assert_eq!(o.lead_seconds, Some(120.0));
        assert!((o.gpu_hours_saved - 4.0 * 55.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn improvement_within_the_tolerance_is_not_a_false_stop_and_beyond_it_is() {
        let c = curve(&[1.0, 1.0, 0.995]);
        let r = reports(3);
        let f = facts(3, 1.0, &r);
        assert!(!judge_stop(&c, Direction::Min, RAW, &f, t(1)).false_stop, "0.5 % < 1 %");
        assert!(
            judge_stop(
                &c,
                Direction::Min,
                Judge { tolerance: Tolerance { relative: 0.001, absolute: 0.0 }, smoothing: 1 },
                &f,
                t(1)
            )
            .false_stop,
            "0.5 % > 0.1 %"
        );
    }

    #[test]
    fn higher_is_better_metrics_count_gains_upwards() {
        let c = curve(&[0.5, 0.7, 0.7, 0.7, 0.9]);
        let r = reports(5);
        let o = judge_stop(&c, Direction::Max, RAW, &facts(5, 1.0, &r), t(3));
        assert!(o.false_stop);
        assert!((o.improvement - 0.2).abs() < 1e-12);
        let worse = curve(&[0.5, 0.7, 0.7, 0.6, 0.5]);
        assert!(!judge_stop(&worse, Direction::Max, RAW, &facts(5, 1.0, &r), t(3)).false_stop);
    }

    #[test]
    fn a_silence_before_the_stop_is_a_stall_that_began_at_the_last_report() {
        // Reports every minute up to minute 9, then nothing; stopped at minute 45, the run failed at 100.
        let c = curve(&[2.0, 1.8, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1, 1.0, 0.9]);
        let r = reports(10);
        let o = judge_stop(&c, Direction::Min, RAW, &facts(100, 2.0, &r), t(45));
        assert!(!o.false_stop);
        assert_eq!(o.trouble, Some(Trouble::Stalled));
        assert_eq!(o.onset, Some(t(9)));
        assert_eq!(o.lead_seconds, Some(36.0 * 60.0));
    }

    #[test]
    fn a_run_that_plateaued_long_before_it_went_silent_counts_from_the_plateau() {
        // Flat from minute 3, silent after minute 60, stopped at minute 80.
        let mut values = vec![2.0, 1.5, 1.2];
        values.extend(std::iter::repeat_n(1.0, 58));
        let c = curve(&values);
        let r = reports(61);
        let o = judge_stop(&c, Direction::Min, RAW, &facts(200, 1.0, &r), t(80));
        assert_eq!(o.trouble, Some(Trouble::Plateau));
        assert_eq!(o.onset, Some(t(3)));
    }

    #[test]
    fn a_clearly_worse_latest_value_is_a_divergence() {
        let c = curve(&[2.0, 1.0, 1.2, 1.6, 2.5, 3.0]);
        let r = reports(6);
        let o = judge_stop(&c, Direction::Min, RAW, &facts(6, 1.0, &r), t(5));
        assert_eq!(o.trouble, Some(Trouble::Diverged));
        assert_eq!(o.onset, Some(t(1)));
    }

    #[test]
    fn a_stop_before_anything_was_measured_is_false_when_the_run_went_on_to_measure() {
        let c = Curve { points: vec![(t(10), 1.0), (t(20), 0.5)] };
        let r = vec![t(10), t(20)];
        let o = judge_stop(&c, Direction::Min, RAW, &facts(30, 1.0, &r), t(5));
        assert!(o.false_stop);
        assert_eq!(o.best_before, None);
        assert_eq!(o.relative_improvement, None);
    }

    #[test]
    fn a_stop_after_the_end_saves_nothing() {
        let c = curve(&[1.0, 0.9]);
        let r = reports(2);
        let o = judge_stop(&c, Direction::Min, RAW, &facts(1, 8.0, &r), t(3));
        assert_eq!(o.hours_saved, 0.0);
        assert_eq!(o.gpu_hours_saved, 0.0);
    }

    #[test]
    fn an_absolute_floor_ignores_tiny_relative_gains() {
        // 0.0003 -> 0.0001 is a 67 % gain, of 0.0002.
        let c = curve(&[0.001, 0.0003, 0.0003, 0.0001]);
        let r = reports(4);
        let f = facts(4, 1.0, &r);
        assert!(judge_stop(&c, Direction::Min, RAW, &f, t(2)).false_stop);
        let floor = Tolerance { relative: 0.01, absolute: 0.001 };
        assert!(
            !judge_stop(&c, Direction::Min, Judge { tolerance: floor, smoothing: 1 }, &f, t(2)).false_stop
        );
    }

    #[test]
    fn a_stop_of_a_run_that_never_reported_the_target_is_unmeasured() {
        let r = reports(3);
        let o = judge_stop(&Curve::default(), Direction::Min, RAW, &facts(3, 1.0, &r), t(1));
        assert!(!o.measured);
        assert!(!o.false_stop);
        assert_eq!(o.trouble, None);
    }

    #[test]
    fn a_gain_from_a_best_of_zero_has_no_relative_size() {
        let c = curve(&[0.0, 0.0, 0.8]);
        let r = reports(3);
        let o = judge_stop(&c, Direction::Max, RAW, &facts(3, 1.0, &r), t(1));
        assert!(o.false_stop);
        assert_eq!((o.best_before, o.relative_improvement), (Some(0.0), None));
        let floor = Tolerance { relative: 0.01, absolute: 1.0 };
        assert!(
            !judge_stop(
                &c,
                Direction::Max,
                Judge { tolerance: floor, smoothing: 1 },
                &facts(3, 1.0, &r),
                t(1)
            )
            .false_stop
        );
    }

    #[test]
    fn a_lucky_low_batch_after_the_stop_does_not_make_it_false() {
        // Flat at 1.0 with noise of ±0.3 % for 30 logs, stopped at minute 20; one lucky batch at 0.9 after
        // the stop: raw values call the stop false (10 % better), the rolling median of 5 does not.
        let wobble = [1.0, 1.003, 0.998, 1.002, 0.999, 1.001, 0.997, 1.003];
        let mut values = vec![2.0, 1.5, 1.2];
        values.extend((0..30).map(|i| wobble[i % wobble.len()]));
        values[25] = 0.9;
        let c = curve(&values);
        let r = reports(values.len());
        let f = facts(values.len() as i64, 1.0, &r);
        assert!(judge_stop(&c, Direction::Min, RAW, &f, t(20)).false_stop, "raw: 0.9 after 0.997");
        let smoothed = Judge { tolerance: TOL, smoothing: 5 };
        let o = judge_stop(&c, Direction::Min, smoothed, &f, t(20));
        assert!(!o.false_stop, "{o:?}");
        assert_eq!(o.trouble, Some(Trouble::Plateau));
        // But a run that really goes on learning is a false stop at any smoothing.
        let mut learning = values[..21].to_vec();
        learning.extend((1..=12).map(|i| 1.0 - 0.02 * f64::from(i)));
        let c = curve(&learning);
        let o = judge_stop(&c, Direction::Min, smoothed, &f, t(20));
        assert!(o.false_stop, "{o:?}");
        assert_eq!(o.best_after, Some(0.8), "the median of 0.80 … 0.76");
        // A curve logged fewer than 30 times (an evaluation metric) is judged on its raw values.
        let sparse = curve(&[2.0, 1.0, 1.01, 0.99, 1.0, 0.9]);
        let r = reports(6);
        let o = judge_stop(&sparse, Direction::Min, smoothed, &facts(6, 1.0, &r), t(4));
        assert_eq!((o.best_before, o.best_after), (Some(0.99), Some(0.9)));
    }

    #[test]
    fn noise_at_a_diverged_level_is_no_recovery() {
        // Best 1.0, then the loss climbs to about 3 and wanders there: the stop at 3.0 is right even though
        // a later value is lower than the one at the stop.
        let values = [2.0, 1.0, 1.0, 1.0, 2.0, 3.0, 3.1, 3.0, 2.9, 3.0, 2.8, 2.9, 3.0];
        let c = curve(&values);
        let r = reports(values.len());
        let o =
            judge_stop(&c, Direction::Min, Judge { tolerance: TOL, smoothing: 3 }, &facts(13, 1.0, &r), t(7));
        assert!(!o.false_stop);
        assert_eq!(o.best_before, Some(1.0));
        assert_eq!(o.level_at_stop, Some(3.0));
        assert_eq!(o.trouble, Some(Trouble::Diverged));
    }

    #[test]
    fn a_nan_that_recovered_long_before_the_stop_is_not_the_trouble() {
        // One skipped fp16 step at minute 2, then a plateau: the stop is for the plateau.
        let values = [2.0, 1.5, f64::NAN, 1.0, 1.0, 1.0, 1.0, 1.0];
        let c = curve(&values);
        let r = reports(values.len());
        let o = judge_stop(&c, Direction::Min, RAW, &facts(8, 1.0, &r), t(7));
        assert_eq!(o.trouble, Some(Trouble::Plateau));
        assert_eq!(o.onset, Some(t(3)));
    }

    #[test]
    fn levels_are_rolling_medians_of_finite_values() {
        let c = curve(&[5.0, 1.0, f64::NAN, 3.0, 2.0, 4.0]);
        let l: Vec<f64> = levels(&c.points, 3).into_iter().map(|p| p.1).collect();
        assert_eq!(l, [5.0, 3.0, 3.0, 2.0, 3.0]);
        assert_eq!(levels(&c.points, 1).len(), 5, "NaN is no level");
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
