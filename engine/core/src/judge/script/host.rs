//! The host functions themselves, one plain Rust function each. Rhai calls them through the registrations in
//! [`super::BUILTINS`]; compiled conditions ([`super::native`]) call the very same functions, so both paths
//! give the same value, evidence and wake by construction.

use rhai::{Dynamic, EvalAltResult, ImmutableString, Map};

use super::frame::{HostResult, metric_series, view_of, with_frame};
use crate::history::metric_series::{Direction, MetricSeries};
use crate::input::gpu::GpuSummary;
use crate::input::sample::JobPhase;
use crate::judge::detectors::{
    self, Detector, DetectorState, DirectionParam, Diverging, EtaAfter, EtaExceeds, Finding, GpuIdle, Hang,
    NonFinite, Stalled,
};
use crate::time::Timestamp;
use crate::units::duration::PolicyDuration;

pub(super) fn metric(name: &str) -> HostResult<f64> {
    with_frame(|f| metric_series(f, name).and_then(MetricSeries::latest_observation).unwrap_or(f64::NAN))
}

pub(super) fn best(name: &str) -> HostResult<f64> {
    with_frame(|f| {
        metric_series(f, name).and_then(|s| s.best(Direction::infer(name))).map_or(f64::NAN, |b| b.value)
    })
}

pub(super) fn best_in(name: &str, mode: &str) -> HostResult<f64> {
    let d = parse_direction(mode)?;
    with_frame(|f| metric_series(f, name).and_then(|s| s.best(d)).map_or(f64::NAN, |b| b.value))
}

pub(super) fn window_mean(name: &str, n: i64) -> HostResult<f64> {
    // The mean alone, not all five window statistics (the same sum in the same order, so the same value).
    window_of(name, n, MetricSeries::mean_last)
}

pub(super) fn window_min(name: &str, n: i64) -> HostResult<f64> {
    window_stat(name, n, |s| s.min)
}

pub(super) fn window_max(name: &str, n: i64) -> HostResult<f64> {
    window_stat(name, n, |s| s.max)
}

pub(super) fn window_std(name: &str, n: i64) -> HostResult<f64> {
    window_stat(name, n, |s| s.std)
}

pub(super) fn slope(name: &str, n: i64) -> HostResult<f64> {
    window_stat(name, n, |s| s.slope_per_second * 3600.0)
}

pub(super) fn ema(name: &str) -> HostResult<f64> {
    with_frame(|f| metric_series(f, name).and_then(MetricSeries::ema).unwrap_or(f64::NAN))
}

pub(super) fn count(name: &str) -> HostResult<i64> {
    with_frame(|f| metric_series(f, name).map_or(0, |s| s.count() as i64))
}

pub(super) fn since_improvement(name: &str) -> HostResult<f64> {
    with_frame(|f| {
        metric_series(f, name)
            .and_then(|s| s.best(Direction::infer(name)))
            .map_or(f64::NAN, |b| crate::time::seconds(b.at, f.now))
    })
}

pub(super) fn finite(x: f64) -> bool {
    x.is_finite()
}

pub(super) fn finite_int(_: i64) -> bool {
    true
}

pub(super) fn progress() -> HostResult<f64> {
    with_frame(|f| f.job.series.last.and_then(|l| l.progress_percent).unwrap_or(f64::NAN))
}

pub(super) fn eta() -> HostResult<f64> {
    with_frame(|f| f.job.series.last.and_then(|l| l.eta_seconds).unwrap_or(f64::NAN))
}

pub(super) fn step() -> HostResult<f64> {
    with_frame(|f| f.job.series.last.and_then(|l| l.current_step).unwrap_or(f64::NAN))
}

pub(super) fn total_steps() -> HostResult<f64> {
    with_frame(|f| f.job.series.last.and_then(|l| l.total_steps).unwrap_or(f64::NAN))
}

pub(super) fn epoch() -> HostResult<f64> {
    with_frame(|f| f.job.series.last.and_then(|l| l.current_epoch).unwrap_or(f64::NAN))
}

pub(super) fn since_checkpoint() -> HostResult<f64> {
    with_frame(|f| {
        let start = f.job.snapshot.running_since.unwrap_or(f.job.first_seen);
        let from = f.job.series.last_checkpoint.map_or(start, |c| c.at.max(start));
        crate::time::seconds(from, f.now).max(0.0)
    })
}

/// The time [`since_checkpoint`] counts from: the job's last checkpoint, or its last start if later.
pub(super) fn since_checkpoint_origin() -> HostResult<Timestamp> {
    with_frame(|f| {
        let start = f.job.snapshot.running_since.unwrap_or(f.job.first_seen);
        f.job.series.last_checkpoint.map_or(start, |c| c.at.max(start))
    })
}

pub(super) fn checkpoint_step() -> HostResult<f64> {
    with_frame(|f| f.job.series.last_checkpoint.map_or(f64::NAN, |c| c.reported.step as f64))
}

pub(super) fn runtime() -> HostResult<f64> {
    with_frame(|f| view_of(f).runtime_seconds())
}

pub(super) fn silence() -> HostResult<f64> {
    with_frame(|f| crate::time::seconds(view_of(f).last_activity(), f.now))
}

pub(super) fn now() -> HostResult<i64> {
    with_frame(|f| f.now.as_second())
}

pub(super) fn duration(s: &str) -> HostResult<f64> {
    Ok(parse_duration(s)?.as_secs_f64())
}

pub(super) fn gpus() -> HostResult<f64> {
    with_frame(|f| view_of(f).gpus.unwrap_or(f64::NAN))
}

/// A duration longer than 0s (a computed `"0s"` is refused as the detector's parameter is).
fn positive(text: &str) -> HostResult<crate::units::duration::PolicyDuration> {
    let d = parse_duration(text)?;
    if d.is_zero() { Err("the duration must be longer than 0s".into()) } else { Ok(d) }
}

/// The job's latest GPU summary, if current; its going stale is the evaluator's wake (the value turns NaN).
fn current_gpus(pick: impl FnOnce(&GpuSummary) -> f64) -> HostResult<f64> {
    with_frame(|f| match f.job.gpu.current(f.now) {
        Some(summary) => {
            if let Some(until) = f.job.gpu.current_until().filter(|t| *t > f.now) {
                f.wake = Some(f.wake.map_or(until, |w| w.min(until)));
            }
            pick(&summary)
        }
        None => f64::NAN,
    })
}

pub(super) fn gpu_util() -> HostResult<f64> {
    current_gpus(|s| s.mean_util)
}

pub(super) fn gpu_util_min() -> HostResult<f64> {
    current_gpus(|s| s.min_util)
}

pub(super) fn gpu_power() -> HostResult<f64> {
    current_gpus(|s| s.mean_power)
}

pub(super) fn queue_pending() -> HostResult<f64> {
    with_frame(|f| f.job.queue.map_or(f64::NAN, |q| f64::from(q.pending)))
}

pub(super) fn queue_pending_gpus() -> HostResult<f64> {
    with_frame(|f| f.job.queue.map_or(f64::NAN, |q| q.pending_gpus))
}

pub(super) fn gpu_idle(threshold: f64, window: &str) -> HostResult<bool> {
    gpu_idle_of(threshold, window, detectors::GpuWhich::Every)
}

pub(super) fn gpu_idle_any(threshold: f64, window: &str) -> HostResult<bool> {
    gpu_idle_of(threshold, window, detectors::GpuWhich::Any)
}

fn gpu_idle_of(threshold: f64, window: &str, which: detectors::GpuWhich) -> HostResult<bool> {
    if !(threshold > 0.0 && threshold <= 100.0) {
        return Err(
            format!("the threshold must be a utilization above 0 and at most 100, got {threshold}").into()
        );
    }
    detect(&GpuIdle { threshold, duration: positive(window)?, which })
}

pub(super) fn hang(duration: &str) -> HostResult<bool> {
    detect(&Hang { after: positive(duration)?, busy_above: 80.0, require_first_sample: true })
}

pub(super) fn gpu_hours() -> HostResult<f64> {
    with_frame(|f| {
        let v = view_of(f);
        v.gpus.map_or(f64::NAN, |g| g * v.runtime_seconds() / 3600.0)
    })
}

pub(super) fn cost() -> HostResult<f64> {
    with_frame(|f| {
        let v = view_of(f);
        match (v.gpus, v.gpu_hour_cost) {
            (Some(g), Some(c)) => g * v.runtime_seconds() / 3600.0 * c,
            _ => f64::NAN,
        }
    })
}

pub(super) fn phase() -> HostResult<ImmutableString> {
    with_frame(|f| {
        match f.job.snapshot.phase {
            JobPhase::Running => "Running",
            JobPhase::Suspended => "Suspended",
            JobPhase::Complete => "Complete",
            JobPhase::Failed => "Failed",
        }
        .into()
    })
}

pub(super) fn label(k: &str) -> HostResult<ImmutableString> {
    with_frame(|f| f.job.snapshot.labels.get(k).map(|v| v.as_str().into()).unwrap_or_default())
}

pub(super) fn annotation(k: &str) -> HostResult<ImmutableString> {
    with_frame(|f| f.job.snapshot.annotations.get(k).map(|v| v.as_str().into()).unwrap_or_default())
}

pub(super) fn weekday() -> HostResult<i64> {
    with_frame(|f| f.env.calendar.weekday_hour(f.now).0 as i64)
}

pub(super) fn hour() -> HostResult<i64> {
    with_frame(|f| f.env.calendar.weekday_hour(f.now).1 as i64)
}

pub(super) fn minute() -> HostResult<i64> {
    with_frame(|f| f.env.calendar.weekday_hour(f.now).2 as i64)
}

pub(super) fn non_finite(metric: &str) -> HostResult<bool> {
    detect(&NonFinite { metric: (metric != "*").then(|| metric.to_string()), logs: 1, degenerate: false })
}

pub(super) fn stalled(after: &str) -> HostResult<bool> {
    detect(&Stalled { after: parse_duration(after)?, require_first_sample: true, rhythm: None })
}

pub(super) fn eta_after(deadline: &str) -> HostResult<bool> {
    let deadline = detectors::parse_deadline(deadline).map_err(|m| -> Box<EvalAltResult> { m.into() })?;
    detect(&EtaAfter { deadline })
}

pub(super) fn eta_exceeds(d: &str) -> HostResult<bool> {
    detect(&EtaExceeds { duration: parse_duration(d)? })
}

pub(super) fn diverging(metric: &str, threshold: f64) -> HostResult<bool> {
    detect(&Diverging {
        metric: metric.to_string(),
        mode: DirectionParam::Auto,
        threshold: Some(threshold),
        factor: None,
        warmup: 0,
        stays: None,
    })
}

pub(super) fn diverging_factor(metric: &str, factor: f64) -> HostResult<bool> {
    if factor.is_nan() || factor <= 1.0 {
        return Err(format!("factor must be > 1, got {factor}").into());
    }
    detect(&Diverging {
        metric: metric.to_string(),
        mode: DirectionParam::Auto,
        threshold: None,
        factor: Some(factor),
        warmup: 0,
        stays: None,
    })
}

pub(super) fn plateau_samples(m: &str, n: i64) -> HostResult<bool> {
    plateau_fn(m, PlateauWindow::Samples(n.max(1)), 0.0)
}

pub(super) fn plateau_samples_by(m: &str, n: i64, min_delta: f64) -> HostResult<bool> {
    plateau_fn(m, PlateauWindow::Samples(n.max(1)), min_delta)
}

pub(super) fn plateau_time(m: &str, w: &str) -> HostResult<bool> {
    plateau_fn(m, PlateauWindow::Time(parse_duration(w)?), 0.0)
}

pub(super) fn plateau_time_by(m: &str, w: &str, min_delta: f64) -> HostResult<bool> {
    plateau_fn(m, PlateauWindow::Time(parse_duration(w)?), min_delta)
}

pub(super) fn over_budget(params: Map) -> HostResult<bool> {
    let json = map_to_json(&params)?;
    if json.contains_key("maxCost") && with_frame(|f| f.env.gpu_hour_cost.is_none())? {
        return Err("over_budget(#{maxCost}) needs spec.gpuHourCost".into());
    }
    let detector = detectors::build("over_budget", Some(&json), "over_budget()").map_err(
        |errs| -> Box<EvalAltResult> {
            errs.iter().map(std::string::ToString::to_string).collect::<Vec<_>>().join("; ").into()
        },
    )?;
    detect(detector.as_ref())
}

// What the host functions share: argument parsing, a detector run on the current job, windows, plateaus.

pub(super) fn parse_duration(s: &str) -> HostResult<PolicyDuration> {
    s.parse::<PolicyDuration>().map_err(|e| e.to_string().into())
}

pub(super) fn parse_direction(mode: &str) -> HostResult<Direction> {
    match mode {
        "min" => Ok(Direction::Min),
        "max" => Ok(Direction::Max),
        other => Err(format!("mode must be \"min\" or \"max\", got {other:?}").into()),
    }
}

/// Runs a stateless detector inside the frame, recording its finding as evidence.
pub(super) fn detect(detector: &dyn Detector) -> HostResult<bool> {
    with_frame(|frame| {
        let finding = detector.check(&DetectorState::None, &view_of(frame));
        // When the answer may change with time alone, either way (`stalled` turning true, `eta_exceeds`
        // turning false); a time already past is ignored by the evaluator.
        if let Some(t) = detector.wake_at(&DetectorState::None, &view_of(frame)).filter(|t| *t > frame.now) {
            frame.wake = Some(frame.wake.map_or(t, |w| w.min(t)));
        }
        match finding {
            Some(f) => {
                frame.evidence.push(f);
                true
            }
            None => false,
        }
    })
}

pub(super) fn window_stat(
    name: &str,
    n: i64,
    pick: fn(&crate::history::metric_series::WindowStats) -> f64,
) -> HostResult<f64> {
    window_of(name, n, |series, n| series.stats_last(n).map(|st| pick(&st)))
}

/// `of` over the newest `n` points of the metric's series: NaN when it has none, an error when `n` < 1.
pub(super) fn window_of(
    name: &str,
    n: i64,
    of: impl FnOnce(&MetricSeries, usize) -> Option<f64>,
) -> HostResult<f64> {
    if n < 1 {
        return Err(format!("the sample count must be at least 1, got {n}").into());
    }
    with_frame(|frame| metric_series(frame, name).and_then(|s| of(s, n as usize)).unwrap_or(f64::NAN))
}

/// Stateless plateau over the recorded history: the best value of the last `n` samples (or of the samples
/// in the last `duration` before the latest) did not beat the best before them by more than `min_delta`.
pub(super) fn plateau_fn(name: &str, window: PlateauWindow, min_delta: f64) -> HostResult<bool> {
    if !min_delta.is_finite() || min_delta < 0.0 {
        return Err(format!("min_delta must be >= 0, got {min_delta}").into());
    }
    let verdict = with_frame(|frame| -> HostResult<Option<Finding>> {
        let Some(series) = metric_series(frame, name) else { return Ok(None) };
        let direction = Direction::infer(name);
        let Some((last_at, last)) = series.last() else { return Ok(None) };
        let n = match window {
            PlateauWindow::Samples(n) => {
                if n as usize >= crate::history::metric_series::WINDOW {
                    return Err(format!(
                        "plateau() keeps {} samples; use `uses: plateau` for longer windows",
                        crate::history::metric_series::WINDOW - 1
                    )
                    .into());
                }
                n as usize
            }
            PlateauWindow::Time(d) => {
                let since = crate::time::add_seconds(last_at, -d.as_secs_f64()).unwrap_or(Timestamp::MIN);
                let Some(stats) = series.stats_since(since) else { return Ok(None) };
                if stats.count >= series.window_len() && series.count() > series.window_len() as u64 {
                    return Err(format!(
                        "plateau() window {d} spans more than the {} samples kept; use `uses: plateau`",
                        crate::history::metric_series::WINDOW
                    )
                    .into());
                }
                stats.count
            }
        };
        let (Some(before), Some(recent)) =
            (series.best_before_last(n, direction), series.best_of_last(n, direction))
        else {
            return Ok(None);
        };
        let improvement = match direction {
            Direction::Min => before - recent,
            Direction::Max => recent - before,
        };
        Ok((improvement <= min_delta).then(|| {
            Finding::new(format!(
                "{name} improved by {} over the last {n} samples (best before {}, last {})",
                crate::time::fmt_num(improvement.max(0.0)),
                crate::time::fmt_num(before),
                crate::time::fmt_num(last)
            ))
            .value("improvement", improvement)
        }))
    })??;
    with_frame(|frame| match verdict {
        Some(f) => {
            frame.evidence.push(f);
            true
        }
        None => false,
    })
}

#[derive(Clone, Copy)]
pub(super) enum PlateauWindow {
    Samples(i64),
    Time(PolicyDuration),
}

pub(super) fn map_to_json(map: &Map) -> HostResult<serde_json::Map<String, serde_json::Value>> {
    let value: serde_json::Value = rhai::serde::from_dynamic(&Dynamic::from_map(map.clone()))?;
    match value {
        serde_json::Value::Object(m) => Ok(m),
        _ => Err("expected an object map".into()),
    }
}

/// The job's cohort figure `pick` for `metric` at its latest position; NaN when it has none.
fn cohort_metric(metric: &str, pick: fn(&crate::history::job::CohortMetric) -> f64) -> HostResult<f64> {
    let name = crate::input::names::canonical_metric_name(metric);
    with_frame(|f| {
        f.job.cohort.as_ref().and_then(|c| c.metrics.iter().find(|m| m.name == name)).map_or(f64::NAN, pick)
    })
}

pub(super) fn cohort_size() -> HostResult<i64> {
    with_frame(|f| f.job.cohort.as_ref().map_or(0, |c| i64::try_from(c.size).unwrap_or(i64::MAX)))
}

pub(super) fn cohort_median(metric: &str) -> HostResult<f64> {
    cohort_metric(metric, |m| m.median)
}

pub(super) fn cohort_best(metric: &str) -> HostResult<f64> {
    cohort_metric(metric, |m| m.best)
}

pub(super) fn cohort_rank(metric: &str) -> HostResult<f64> {
    cohort_metric(metric, |m| m.rank)
}

pub(super) fn cohort_rank_loss() -> HostResult<f64> {
    cohort_metric("loss", |m| m.rank)
}
