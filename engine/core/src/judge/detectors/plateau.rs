//! `plateau`: the metric stopped improving.
//!
//! Semantics follow PyTorch Lightning / Keras `EarlyStopping`: a reference best value moves only on a
//! *significant* improvement — more than `minDelta` (absolute) and more than `minDeltaPct` percent of the
//! reference (relative, SageMaker's `diff_percent`, W&B's RELATIVE). The rule fires once `window` (alias
//! `patience`) has passed without one, counted in reported samples (`window: 10`) or in wall-clock time
//! between samples (`window: 2h`); wall-clock patience is measured between samples, so a job that simply
//! stops reporting is `stalled`, not a plateau. With `std`, it also fires when the standard deviation over
//! the window drops below `std` (Ray Tune's TrialPlateauStopper; the std uses the newest points of the
//! window that the series keeps, at most 64); `stdOnly: true` drops the patience test, so the rule decides
//! exactly as Ray's stopper does (population std of the last `window` values below `std`, after `warmup`
//! samples). Nothing fires during `warmup` (a sample
//! count, or a progress percentage such as `10%`). Samples are distinct observations: a reporter re-sending
//! its cached value does not count (see `MetricSeries::push`).
//!
//! Example: `uses: plateau`, `with: {metric: loss, window: 2h, minDelta: 0.001, warmup: 10%}`.

use super::levels::{self, Significance, Tracks, Watch};
use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::history::job_series::JobSeries;

use crate::history::metric_series::WINDOW;
use crate::input::sample::ProgressSample;
use crate::time::Timestamp;
use crate::time::{fmt_num, fmt_secs, seconds};
use crate::units::duration::{PolicyDuration, Warmup, Window};

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "plateau",
    summary: "The metric has not improved by more than minDelta / minDeltaPct for `window` (samples, time or a share of the planned run), or its std over the window fell below `std`.",
    params: &[
        ParamDoc {
            name: "metric",
            ty: "string",
            default: "required",
            doc: "Canonical metric name, e.g. loss or eval_loss; auto: the job's eval metrics (all must be flat), else loss.",
        },
        ParamDoc {
            name: "mode",
            ty: "min|max|auto",
            default: "auto",
            doc: "Which way is better; auto infers it from the name (accuracy-like names are max).",
        },
        ParamDoc {
            name: "window",
            ty: "samples or duration",
            default: "10",
            doc: "Patience: logged values (10), wall-clock time between samples (2h), or a share of the planned run (\"25%\"). Alias: patience.",
        },
        ParamDoc {
            name: "minDelta",
            ty: "number",
            default: "0",
            doc: "Absolute improvement that counts (Lightning min_delta).",
        },
        ParamDoc {
            name: "minDeltaPct",
            ty: "number",
            default: "0",
            doc: "Relative improvement in percent of the best value that counts.",
        },
        ParamDoc {
            name: "std",
            ty: "number",
            default: "none",
            doc: "Also fire when the std over the window is below this (Ray Tune).",
        },
        ParamDoc {
            name: "stdOnly",
            ty: "bool",
            default: "false",
            doc: "With std: only the std test decides, as in Ray Tune's TrialPlateauStopper (no patience test).",
        },
        ParamDoc {
            name: "warmup",
            ty: "samples or percent",
            default: "0",
            doc: "Samples (5) or progress (\"10%\") before the rule may fire.",
        },
        ParamDoc {
            name: "smoothing",
            ty: "values",
            default: "1",
            doc: "Judge the rolling median of the last N logged values (1 to 15) instead of raw values.",
        },
        ParamDoc {
            name: "minPoints",
            ty: "values",
            default: "0",
            doc: "Also need this many logged values since the last improvement.",
        },
        ParamDoc {
            name: "minRemaining",
            ty: "percent",
            default: "0%",
            doc: "Never fire in the last share of the planned run (\"15%\").",
        },
        ParamDoc {
            name: "schedule",
            ty: "bool",
            default: "false",
            doc: "Read the schedule: restart at a learning-rate step drop; hold while the next expected drop, or (training metrics) a new epoch, is within the window, unless the last epoch boundary brought no drop or the loss is at its floor.",
        },
    ],
    example: r#"{"metric": "loss", "window": "2h", "minDelta": 0.001, "warmup": "10%"}"#,
    build,
};

#[derive(Debug, Clone)]
pub(super) struct Plateau {
    /// The named metric (for `metric: auto`, `loss`: unused but for `watched_metric`).
    pub metric: std::borrow::Cow<'static, str>,
    /// The `mode` parameter resolved against the metric name once, off the per-sample path.
    pub direction: crate::history::metric_series::Direction,
    pub watch: Watch,
    pub window: Patience,
    pub min_delta: f64,
    pub min_delta_pct: f64,
    pub std: Option<f64>,
    /// Ray Tune's TrialPlateauStopper: the std test alone decides.
    pub std_only: bool,
    pub warmup: Warmup,
    pub smoothing: usize,
    pub min_points: u64,
    pub min_remaining: f64,
    pub schedule: bool,
}

/// How long a plateau must last.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Patience {
    /// Logged values or wall-clock time.
    Window(Window),
    /// A share of the planned run (0 to 1).
    Run(f64),
}

/// The reference best and the metric's own sample clock.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlateauState {
    /// Finite logged values of the metric.
    pub samples: u64,
    pub first_at: Option<Timestamp>,
    pub last_at: Option<Timestamp>,
    /// Reference best: value, time and sample number of the last significant improvement.
    pub reference: Option<(f64, Timestamp, u64)>,
    /// With levels (smoothing, `metric: auto`, a share of the run, ...): the level trackers instead.
    pub levels: Option<Box<Tracks>>,
}

/// `window` (or `patience`): a share of the run when written as a percentage, else samples or time.
fn patience(p: &mut Params<'_>, name: &str) -> Option<Patience> {
    let (_, value) = p.raw(name)?;
    if value.as_str().is_some_and(|s| s.trim().ends_with('%')) {
        return match p.percent(name) {
            Some(f) if f > 0.0 => Some(Patience::Run(f)),
            Some(_) => {
                p.error(name, "must be more than 0%");
                None
            }
            None => None,
        };
    }
    p.window(name).map(Patience::Window)
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let watch = Watch::parse(p, true);
    let window = match (p.raw("window").is_some(), p.raw("patience").is_some()) {
        (true, true) => {
            p.error("patience", "give either window or patience (they are the same), not both");
            None
        }
        (false, true) => patience(p, "patience"),
        _ => patience(p, "window"),
    };
    let window = window.unwrap_or(Patience::Window(Window::Samples(10)));
    let smoothing = p.count("smoothing").unwrap_or(1);
    if !(1..=levels::MAX_SMOOTHING as u64).contains(&smoothing) {
        p.error(
            "smoothing",
            format!("must be from 1 to {} logged values, got {smoothing}", levels::MAX_SMOOTHING),
        );
    }
    let min_points = p.count("minPoints").unwrap_or(0);
    let min_remaining = p.percent("minRemaining").unwrap_or(0.0);
    let schedule = p.bool("schedule").unwrap_or(false);
    let min_delta = p.positive("minDelta", true).unwrap_or(0.0);
    let min_delta_pct = p.positive("minDeltaPct", true).unwrap_or(0.0);
    let std = p.positive("std", false);
    let std_only = p.bool("stdOnly").unwrap_or(false);
    if std_only && std.is_none() {
        p.error("stdOnly", "needs std");
    }
    let warmup = p.warmup("warmup").unwrap_or(Warmup::Samples(0));
    match window {
        Patience::Window(Window::Samples(0)) => p.error("window", "must be at least 1 sample"),
        Patience::Window(Window::Samples(n)) if std.is_some() && (n < 2 || n as usize > WINDOW) => {
            p.error("window", format!("with std, a sample window must be between 2 and {WINDOW} samples"));
        }
        Patience::Run(_) if std.is_some() => {
            p.error("window", "with std, the window is samples or time (the std is of raw values)");
        }
        _ => {}
    }
    let watch = watch?;
    let (metric, direction) = match &watch {
        Watch::Named { metric, direction } => (metric.clone(), *direction),
        Watch::Auto => (std::borrow::Cow::Borrowed("loss"), crate::history::metric_series::Direction::Min),
    };
    let plateau = Plateau {
        metric,
        direction,
        watch,
        window,
        min_delta,
        min_delta_pct,
        std,
        std_only,
        warmup,
        smoothing: smoothing.clamp(1, levels::MAX_SMOOTHING as u64) as usize,
        min_points,
        min_remaining,
        schedule,
    };
    if plateau.levelled() && std.is_some() {
        p.error("std", "std works on raw values of one metric: leave smoothing, metric: auto, a share of the run, minPoints, minRemaining and schedule out");
    }
    Some(Box::new(plateau))
}

impl Plateau {
    /// Whether the rule judges levels (see the module docs) rather than raw values of one metric.
    fn levelled(&self) -> bool {
        self.smoothing > 1
            || self.watch == Watch::Auto
            || matches!(self.window, Patience::Run(_))
            || self.min_points > 0
            || self.min_remaining > 0.0
            || self.schedule
    }

    fn significance(&self) -> Significance {
        Significance { min_delta: self.min_delta, min_delta_pct: self.min_delta_pct }
    }

    fn significant(&self, reference: f64, candidate: f64) -> bool {
        let direction = self.direction;
        let improvement = match direction {
            crate::history::metric_series::Direction::Min => reference - candidate,
            crate::history::metric_series::Direction::Max => candidate - reference,
        };
        let needed = self.min_delta.max(reference.abs() * self.min_delta_pct / 100.0);
        improvement > needed
    }
}

impl Detector for Plateau {
    fn watched_metric(&self) -> Option<(&str, crate::history::metric_series::Direction)> {
        (self.watch != Watch::Auto).then_some((&self.metric, self.direction))
    }

    fn judged_metrics(
        &self,
        finding: &std::collections::BTreeMap<String, f64>,
    ) -> Vec<(String, crate::history::metric_series::Direction)> {
        super::judged_from_finding(self.watched_metric(), finding)
    }

    // Judges the samples (and their times) only.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn observe(&self, state: &mut DetectorState, series: &JobSeries, sample: &ProgressSample) {
        if self.levelled() {
            if !matches!(state, DetectorState::Plateau(PlateauState { levels: Some(_), .. })) {
                *state = DetectorState::Plateau(PlateauState {
                    levels: Some(Box::default()),
                    ..PlateauState::default()
                });
            }
            let DetectorState::Plateau(s) = state else { return };
            let Some(tracks) = s.levels.as_mut() else { return };
            if tracks.observe(&self.watch, self.smoothing, self.significance(), 0.0, series, sample) {
                s.first_at.get_or_insert(sample.updated_at);
                s.last_at = Some(sample.updated_at);
            }
            return;
        }
        let Some(v) = sample.metric(&self.metric).filter(|v| v.is_finite()) else { return };
        if !matches!(state, DetectorState::Plateau(_)) {
            *state = DetectorState::Plateau(PlateauState::default());
        }
        let DetectorState::Plateau(s) = state else { return };
        s.first_at.get_or_insert(sample.updated_at);
        s.last_at = Some(sample.updated_at);
        // A cached value re-sent is time passing, not a new observation (see `JobSeries::logged`); only a
        // fresh start (no reference yet, e.g. after a resume) takes it as its first observation.
        if s.reference.is_some() && !series.logged(&self.metric) {
            return;
        }
        s.samples += 1;
        match s.reference {
            Some((best, _, _)) if !self.significant(best, v) => {}
            _ => s.reference = Some((v, sample.updated_at, s.samples)),
        }
    }

    fn check(&self, state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        let DetectorState::Plateau(s) = state else { return None };
        if let Some(tracks) = &s.levels {
            return self.check_levels(tracks, view);
        }
        let window = match self.window {
            Patience::Window(w) => w,
            Patience::Run(_) => return None,
        };
        match self.warmup {
            Warmup::Samples(n) if s.samples < n => return None,
            Warmup::ProgressPercent(p) if view.progress_percent().is_none_or(|x| x < p) => return None,
            _ => {}
        }
        let (best, best_at, best_sample) = s.reference?;
        let last_at = s.last_at?;
        let last = view
            .series
            .metric(&self.metric)
            .and_then(crate::history::metric_series::MetricSeries::last)
            .map(|(_, v)| v)
            .unwrap_or(best);
        let since_samples = s.samples - best_sample;
        let since_secs = seconds(best_at, last_at);
        let stalled_improvement = match window {
            Window::Samples(n) => since_samples >= n,
            Window::Time(d) => since_secs >= d.as_secs_f64(),
        };
        if stalled_improvement && !self.std_only {
            let threshold = if self.min_delta_pct > 0.0 {
                format!(
                    "{} ({}%)",
                    fmt_num(self.min_delta.max(best.abs() * self.min_delta_pct / 100.0)),
                    fmt_num(self.min_delta_pct)
                )
            } else {
                fmt_num(self.min_delta)
            };

            return Some(
                Finding::new(format!(
                    "{} has not improved by more than {} for {} / {} (best {} at sample {}, last {})",
                    self.metric,
                    threshold,
                    crate::time::plural(since_samples, "sample", "samples"),
                    fmt_secs(since_secs),
                    fmt_num(best),
                    best_sample,
                    fmt_num(last)
                ))
                .value("best", best)
                .value("last", last)
                .value("samplesSinceImprovement", since_samples as f64)
                .value("secondsSinceImprovement", since_secs),
            );
        }
        let std_limit = self.std?;
        let series = view.series.metric(&self.metric)?;
        let stats = match window {
            Window::Samples(n) if series.window_len() >= n as usize => series.stats_last(n as usize)?,
            Window::Time(d) if s.first_at.is_some_and(|f| seconds(f, last_at) >= d.as_secs_f64()) => {
                series.stats_since(add(last_at, -d.as_secs_f64()))?
            }
            _ => return None,
        };
        (stats.count >= 2 && stats.std < std_limit).then(|| {
            Finding::new(format!(
                "{} std over the last {} samples is {} < {} (mean {})",
                self.metric,
                stats.count,
                fmt_num(stats.std),
                fmt_num(std_limit),
                fmt_num(stats.mean)
            ))
            .value("std", stats.std)
            .value("mean", stats.mean)
        })
    }

    fn windows(&self) -> Vec<(&'static str, PolicyDuration)> {
        match self.window {
            Patience::Window(Window::Time(d)) => vec![("window", d)],
            _ => Vec::new(),
        }
    }
}

impl Plateau {
    /// The levelled judgement: every watched metric's level has gone `window` without a significant
    /// improvement (and `minPoints` logged values), outside the warmup and the last `minRemaining` of the run,
    /// and no scheduled learning-rate drop is expected within the window ahead.
    fn check_levels(&self, tracks: &Tracks, view: &JobView<'_>) -> Option<Finding> {
        let fraction = levels::run_fraction(view.series);
        let watched = tracks.watched(&self.watch, view.series);
        let first = watched.first()?;
        match self.warmup {
            Warmup::Samples(n) if first.count < n => return None,
            Warmup::ProgressPercent(p) if fraction.is_none_or(|f| f * 100.0 < p) => return None,
            _ => {}
        }
        if self.min_remaining > 0.0 && fraction.is_some_and(|f| 1.0 - f < self.min_remaining) {
            return None;
        }
        let last_at = view.series.last_sample_at?;
        let mut parts = Vec::with_capacity(watched.len());
        let mut finding = Finding::new("");
        for t in &watched {
            let since = t.count - t.best_count;
            let since_secs = seconds(t.best_at, last_at);
            let since_run = fraction.zip(t.best_fraction).map(|(f, b)| f - b);
            let flat = match self.window {
                Patience::Window(Window::Samples(n)) => since >= n,
                Patience::Window(Window::Time(d)) => since_secs >= d.as_secs_f64(),
                Patience::Run(share) => since_run.is_some_and(|r| r >= share),
            };
            if !flat || since < self.min_points {
                return None;
            }
            let needed = self.significance().needed(t.best);
            let span = match since_run {
                Some(r) if matches!(self.window, Patience::Run(_)) => {
                    format!("{} % of the planned run", fmt_num((r * 1000.0).round() / 10.0))
                }
                _ => fmt_secs(since_secs),
            };
            parts.push(format!(
                "{}{} has not improved by more than {} for {} / {} (best {}{}, now {})",
                t.name,
                if self.smoothing > 1 && !levels::is_quality_eval(&t.name) {
                    format!(" (median of {})", self.smoothing)
                } else {
                    String::new()
                },
                fmt_num(needed),
                span,
                crate::time::plural(since, "logged value", "logged values"),
                fmt_num(t.best),
                t.best_fraction
                    .map(|b| format!(" at {} %", fmt_num((b * 1000.0).round() / 10.0)))
                    .unwrap_or_default(),
                fmt_num(t.current)
            ));
            finding = finding.value(&format!("level:{}", t.name), t.current);
        }
        if self.schedule {
            let within = match self.window {
                Patience::Run(share) => share,
                Patience::Window(_) => fraction.map_or(1.0, |f| 1.0 - f),
            };
            // A loss at its floor gains nothing from a drop or an epoch ahead.
            let significance = self.significance();
            let may_gain = watched.iter().any(|t| !t.at_floor(significance));
            if may_gain
                && let (Some(next), Some((now, end))) = (tracks.lr.next_drop(), levels::position(view.series))
                && next > now
                && next <= end
                && next - now <= within * end
            {
                return None;
            }
            if watched.iter().any(|t| t.may_drop_at_epoch(significance))
                && levels::epoch_ahead(view.series, within)
            {
                return None;
            }
        }
        let first = watched.first()?;
        finding.summary = parts.join("; ");
        Some(
            finding
                .value("best", first.best)
                .value("last", first.current)
                .value("samplesSinceImprovement", (first.count - first.best_count) as f64)
                .value("secondsSinceImprovement", seconds(first.best_at, last_at)),
        )
    }
}

fn add(t: Timestamp, secs: f64) -> Timestamp {
    crate::time::add_seconds(t, secs).unwrap_or(t)
}

#[cfg(test)]
mod tests;
