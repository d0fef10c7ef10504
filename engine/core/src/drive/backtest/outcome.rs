//! What a stop cost and saved, judged from the rest of the recorded run: the GPU time between the stop and
//! the run's real end, and the *regret* — how much the target metric still improved after the stop. A stop
//! after which the run improved by more than the tolerance is a *false stop*: it would have killed good work.
//! A stop of a run that had gone bad (non-finite values, a stall, a plateau or a divergence) has a *lead
//! time*: how long after the trouble began the policy acted.

use crate::history::metric_series::Direction;
use crate::time::{Timestamp, seconds};

/// One metric of one run as recorded, in time order; non-finite values are kept (they mark a NaN onset).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Curve {
    /// `(time, value)` pairs in time order.
    pub points: Vec<(Timestamp, f64)>,
}

/// How a run that was rightly stopped had gone bad before the stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Trouble {
    /// The target metric was NaN or infinite.
    NonFinite,
    /// No progress was reported for a long time before the stop (a hang).
    Stalled,
    /// The metric had become clearly worse than its best (by more than [`DIVERGED_BY`], relative).
    Diverged,
    /// The metric had stopped improving by more than the tolerance.
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

/// How much worse than its best (relative) the latest value must be for a run to count as diverged.
pub const DIVERGED_BY: f64 = 0.25;

/// A silence before the stop counts as a stall when it is this many times the run's median reporting
/// interval (and at least [`MIN_STALL_SECS`]).
pub const STALL_INTERVALS: f64 = 10.0;

/// The shortest silence that counts as a stall.
pub const MIN_STALL_SECS: f64 = 600.0;

/// What is known about a run besides the target curve.
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
    /// When the policy would have stopped the run.
    pub at: Timestamp,
    /// Wall-clock hours between the stop and the run's real end.
    pub hours_saved: f64,
    /// GPU-hours between the stop and the run's real end.
    pub gpu_hours_saved: f64,
    /// Dollars, when the policy prices GPU-hours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars_saved: Option<f64>,
    /// The best finite value of the target up to and including the stop.
    pub best_before: Option<f64>,
    /// The best finite value after the stop (what the run went on to reach).
    pub best_after: Option<f64>,
    /// How much better `best_after` is than `best_before` (0 when it is not better).
    pub improvement: f64,
    /// `improvement` relative to `|best_before|`; `None` when nothing was measured before the stop, or
    /// the best before it was exactly 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_improvement: Option<f64>,
    /// The run improved by more than the tolerance after the stop: good work would have been killed.
    pub false_stop: bool,
    /// The run reported the target at all (finite or not). A stop of a run that never did cannot be
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

/// `a` is better than `b` in this direction.
fn better(direction: Direction, a: f64, b: f64) -> bool {
    match direction {
        Direction::Min => a < b,
        Direction::Max => a > b,
    }
}

/// How much better `a` is than `b` (negative when worse).
fn gain(direction: Direction, a: f64, b: f64) -> f64 {
    match direction {
        Direction::Min => b - a,
        Direction::Max => a - b,
    }
}

fn best(direction: Direction, values: impl Iterator<Item = f64>) -> Option<f64> {
    values.filter(|v| v.is_finite()).fold(None, |best, v| match best {
        Some(b) if !better(direction, v, b) => Some(b),
        _ => Some(v),
    })
}

/// How much later improvement makes a stop false.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative to the best before the stop (0.01 = 1 %).
    pub relative: f64,
    /// And at least this much in the metric's own units (0: any), so that a loss creeping from 0.0002 to
    /// 0.0001 — 50 %, and meaningless — need not count.
    pub absolute: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance { relative: 0.01, absolute: 0.0 }
    }
}

/// Judges a stop at `at` of a run whose target metric is `curve`.
pub fn judge_stop(
    curve: &Curve,
    direction: Direction,
    tolerance: Tolerance,
    facts: &RunFacts<'_>,
    at: Timestamp,
) -> StopOutcome {
    let measured = !curve.points.is_empty();
    let split = curve.points.partition_point(|(t, _)| *t <= at);
    let (before, after) = curve.points.split_at(split);
    let best_before = best(direction, before.iter().map(|p| p.1));
    let best_after = best(direction, after.iter().map(|p| p.1));
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
    if !false_stop && let Some((trouble, onset)) = trouble(before, direction, tolerance, facts, at) {
        outcome.trouble = Some(trouble);
        outcome.onset = Some(onset);
        outcome.lead_seconds = Some(seconds(onset, at).max(0.0));
    }
    outcome
}

/// How and when a run that did not improve after `at` had gone bad, from what was recorded up to `at`.
fn trouble(
    before: &[(Timestamp, f64)],
    direction: Direction,
    tolerance: Tolerance,
    facts: &RunFacts<'_>,
    at: Timestamp,
) -> Option<(Trouble, Timestamp)> {
    if let Some((t, _)) = before.iter().find(|(_, v)| !v.is_finite()) {
        return Some((Trouble::NonFinite, *t));
    }
    let reported = facts.reports.partition_point(|t| *t <= at);
    let stall_after = MIN_STALL_SECS.max(STALL_INTERVALS * median_interval(&facts.reports[..reported]));
    let stall = facts.reports[..reported]
        .last()
        .filter(|last| seconds(**last, at) >= stall_after)
        .map(|last| (Trouble::Stalled, *last));
    let learning_ended = best(direction, before.iter().map(|p| p.1)).and_then(|best_before| {
        // The run last got within the tolerance of the best it would reach before the stop: its last
        // significant improvement (one larger than both tolerances).
        let slack = (tolerance.relative * best_before.abs()).max(tolerance.absolute);
        let close_enough = |v: f64| gain(direction, best_before, v) <= slack;
        let onset = before.iter().find(|(_, v)| v.is_finite() && close_enough(*v))?.0;
        let latest = before.last()?.1;
        let worse_by = -gain(direction, latest, best_before);
        let kind = if best_before != 0.0 && worse_by / best_before.abs() > DIVERGED_BY {
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
    if gaps.is_empty() {
        return 0.0;
    }
    gaps.sort_by(f64::total_cmp);
    gaps[gaps.len() / 2]
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
        let o = judge_stop(&c, Direction::Min, TOL, &facts(120, 8.0, &r), t(9));
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
        let o = judge_stop(&c, Direction::Min, TOL, &facts(10, 1.0, &r), t(8));
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
        let o = judge_stop(&c, Direction::Min, TOL, &facts(60, 4.0, &r), t(5));
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
        assert!(!judge_stop(&c, Direction::Min, TOL, &f, t(1)).false_stop, "0.5 % < 1 %");
        assert!(
            judge_stop(&c, Direction::Min, Tolerance { relative: 0.001, absolute: 0.0 }, &f, t(1)).false_stop,
            "0.5 % > 0.1 %"
        );
    }

    #[test]
    fn higher_is_better_metrics_count_gains_upwards() {
        let c = curve(&[0.5, 0.7, 0.7, 0.7, 0.9]);
        let r = reports(5);
        let o = judge_stop(&c, Direction::Max, TOL, &facts(5, 1.0, &r), t(3));
        assert!(o.false_stop);
        assert!((o.improvement - 0.2).abs() < 1e-12);
        let worse = curve(&[0.5, 0.7, 0.7, 0.6, 0.5]);
        assert!(!judge_stop(&worse, Direction::Max, TOL, &facts(5, 1.0, &r), t(3)).false_stop);
    }

    #[test]
    fn a_silence_before_the_stop_is_a_stall_that_began_at_the_last_report() {
        // Reports every minute up to minute 9, then nothing; stopped at minute 45, the run failed at 100.
        let c = curve(&[2.0, 1.8, 1.6, 1.5, 1.4, 1.3, 1.2, 1.1, 1.0, 0.9]);
        let r = reports(10);
        let o = judge_stop(&c, Direction::Min, TOL, &facts(100, 2.0, &r), t(45));
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
        let o = judge_stop(&c, Direction::Min, TOL, &facts(200, 1.0, &r), t(80));
        assert_eq!(o.trouble, Some(Trouble::Plateau));
        assert_eq!(o.onset, Some(t(3)));
    }

    #[test]
    fn a_clearly_worse_latest_value_is_a_divergence() {
        let c = curve(&[2.0, 1.0, 1.2, 1.6, 2.5, 3.0]);
        let r = reports(6);
        let o = judge_stop(&c, Direction::Min, TOL, &facts(6, 1.0, &r), t(5));
        assert_eq!(o.trouble, Some(Trouble::Diverged));
        assert_eq!(o.onset, Some(t(1)));
    }

    #[test]
    fn a_stop_before_anything_was_measured_is_false_when_the_run_went_on_to_measure() {
        let c = Curve { points: vec![(t(10), 1.0), (t(20), 0.5)] };
        let r = vec![t(10), t(20)];
        let o = judge_stop(&c, Direction::Min, TOL, &facts(30, 1.0, &r), t(5));
        assert!(o.false_stop);
        assert_eq!(o.best_before, None);
        assert_eq!(o.relative_improvement, None);
    }

    #[test]
    fn a_stop_after_the_end_saves_nothing() {
        let c = curve(&[1.0, 0.9]);
        let r = reports(2);
        let o = judge_stop(&c, Direction::Min, TOL, &facts(1, 8.0, &r), t(3));
        assert_eq!(o.hours_saved, 0.0);
        assert_eq!(o.gpu_hours_saved, 0.0);
    }

    #[test]
    fn an_absolute_floor_ignores_tiny_relative_gains() {
        // 0.0003 -> 0.0001 is a 67 % gain, of 0.0002.
        let c = curve(&[0.001, 0.0003, 0.0003, 0.0001]);
        let r = reports(4);
        let f = facts(4, 1.0, &r);
        assert!(judge_stop(&c, Direction::Min, TOL, &f, t(2)).false_stop);
        let floor = Tolerance { relative: 0.01, absolute: 0.001 };
        assert!(!judge_stop(&c, Direction::Min, floor, &f, t(2)).false_stop);
    }

    #[test]
    fn a_stop_of_a_run_that_never_reported_the_target_is_unmeasured() {
        let r = reports(3);
        let o = judge_stop(&Curve::default(), Direction::Min, TOL, &facts(3, 1.0, &r), t(1));
        assert!(!o.measured);
        assert!(!o.false_stop);
        assert_eq!(o.trouble, None);
    }

    #[test]
    fn a_gain_from_a_best_of_zero_has_no_relative_size() {
        let c = curve(&[0.0, 0.0, 0.8]);
        let r = reports(3);
        let o = judge_stop(&c, Direction::Max, TOL, &facts(3, 1.0, &r), t(1));
        assert!(o.false_stop);
        assert_eq!((o.best_before, o.relative_improvement), (Some(0.0), None));
        let floor = Tolerance { relative: 0.01, absolute: 1.0 };
        assert!(!judge_stop(&c, Direction::Max, floor, &facts(3, 1.0, &r), t(1)).false_stop);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }
}
