//! The host functions themselves, one plain Rust function each. Rhai calls them through the registrations in
//! [`super::BUILTINS`]; compiled conditions ([`super::native`]) call the very same functions, so both paths
//! give the same value, evidence and wake by construction.

use rhai::{EvalAltResult, ImmutableString, Map};

use super::builtins::{
    PlateauWindow, detect, map_to_json, parse_direction, parse_duration, plateau_fn, window_of, window_stat,
};
use super::frame::{HostResult, metric_series, view_of, with_frame};
use crate::history::metric_series::{Direction, MetricSeries};
use crate::input::gpu::GpuSummary;
use crate::input::sample::JobPhase;
use crate::judge::detectors::{
    self, DirectionParam, Diverging, EtaAfter, EtaExceeds, GpuIdle, Hang, NonFinite, Stalled,
};

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
