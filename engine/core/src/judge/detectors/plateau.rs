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
            doc: "Read the schedule: restart at a learning-rate step drop; hold while the next expected drop, or (training metrics) a new epoch, is within the window.",
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
                _ => fraction.map_or(1.0, |f| 1.0 - f),
            };
            if let (Some(next), Some((now, end))) = (tracks.lr.next_drop(), levels::position(view.series))
                && next > now
                && next <= end
                && next - now <= within * end
            {
                return None;
            }
            if watched.iter().any(|t| !levels::is_quality_eval(&t.name))
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
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use serde_json::json;

    /// Deterministic noise in [-1, 1].
    fn noise(x: f64) -> f64 {
        ((x * 12.9898).sin() * 43758.5453).rem_euclid(1.0) * 2.0 - 1.0
    }

    /// Logs `metrics(step)` every 10 steps of a 10000-step run (one report a minute); the first firing.
    fn first_fire(
        d: &dyn super::Detector,
        metrics: impl Fn(f64) -> Vec<(&'static str, f64)>,
    ) -> Option<(u32, String)> {
        let mut job = Job::new();
        for step in (10..=10_000).step_by(10) {
            let x = f64::from(step);
            job.sample_at_step(d, i64::from(step) * 6, &metrics(x), x, 10_000.0);
            if let Some(f) = job.check(d, i64::from(step) * 6) {
                return Some((step, f.summary));
            }
        }
        None
    }

    fn levelled() -> Box<dyn super::Detector> {
        detector(
            "plateau",
            json!({"metric": "auto", "window": "30%", "smoothing": 5, "minDeltaPct": 1, "minDelta": 0.001,
                   "minRemaining": "10%", "schedule": true}),
        )
    }

    #[test]
    fn a_plateau_fires_after_a_share_of_the_run() {
        // Learns to 0.8 by step ~2600, then flat with ±1 % noise per log: fires 30 % of the run after its
        // last significant improvement (a lucky stretch of noise can still move the best a little later).
        let (step, summary) = first_fire(levelled().as_ref(), |x| {
            vec![("loss", 0.8 + 1.5 * (-x / 500.0).exp() + 0.008 * noise(x))]
        })
        .expect("flat for 30 % of the run");
        assert!((5600..=8000).contains(&step), "{step}: {summary}");
        assert!(summary.starts_with("loss (median of 5) has not improved by more than 0.00"), "{summary}");
        assert!(summary.contains("% of the planned run"), "{summary}");
    }

    #[test]
    fn a_slow_improver_under_noise_is_left_alone() {
        // Creeps down 1.5 % of its level per 30 % of the run under noise four times each log's gain.
        let slow = |x: f64| vec![("loss", 1.0 - 0.05 * x / 10_000.0 + 0.003 * noise(x))];
        assert_eq!(first_fire(levelled().as_ref(), slow), None);
    }

    #[test]
    fn a_flat_stretch_before_a_scheduled_drop_is_not_a_plateau() {
        // Step decay every 3500 steps: learning until 3000, then the loss is flat between drops and lower
        // after each.
        let lr = |x: f64| 1e-3 * 0.1f64.powi((x / 3500.0).floor() as i32);
        let staircase = move |x: f64| {
            let learning = 0.5 * (1.0 - x / 3000.0).max(0.0);
            vec![
                ("loss", 1.0 + learning - 0.1 * (x / 3500.0).floor() + 0.002 * noise(x)),
                ("learning_rate", lr(x)),
            ]
        };
        // Blind to the schedule it fires in the stretch before the second drop (at 7000)…
        let blind =
            detector("plateau", json!({"metric": "loss", "window": "30%", "smoothing": 5, "minDeltaPct": 1}));
        let (step, _) = first_fire(blind.as_ref(), staircase).expect("blind");
        assert!(step < 7000, "{step}");
        // …reading it, the first drop (one period after the start) says the next comes at 7000: it holds,
        // and the drop restarts its patience (30 % after 7000 is past the last 10 % it leaves alone).
        assert_eq!(first_fire(levelled().as_ref(), staircase), None);
    }

    #[test]
    fn a_recovered_spike_or_a_lucky_batch_moves_nothing() {
        // Flat at 1.0 with small noise; one log at 0.5 (a lucky batch) and one at 3.0 (a spike).
        let flat = |x: f64| {
            let v = if x == 3000.0 {
                0.5
            } else if x == 3500.0 {
                3.0
            } else {
                1.0 + 0.002 * noise(x)
            };
            vec![("loss", v)]
        };
        let (step, summary) = first_fire(levelled().as_ref(), flat).expect("flat");
        // The median of 5 ignores both: the plateau counts from the start of the run.
        assert!(step <= 3100, "{step}: {summary}");
    }

    #[test]
    fn an_eval_gap_reporter_is_judged_on_its_evaluation() {
        // Evaluates every 500 steps; the training loss is flat, the eval loss keeps improving: no plateau.
        let evaluating = |x: f64| {
            let mut m = vec![("loss", 0.3 + 0.003 * noise(x))];
            if x as u32 % 500 == 0 {
                m.push(("eval_loss", 1.0 - x / 20_000.0));
                m.push(("eval_runtime", 5400.0 + noise(x)));
            }
            m
        };
        assert_eq!(first_fire(levelled().as_ref(), evaluating), None);
        // When the evaluation stops improving too, it fires on the evaluation (a run judged on what its
        // trainer evaluates), after 30 % of the run and enough evaluations.
        let stuck = |x: f64| {
            let mut m = vec![("loss", 0.3 + 0.003 * noise(x))];
            if x as u32 % 500 == 0 {
                m.push(("eval_loss", 0.9 + 0.001 * noise(x)));
            }
            m
        };
        let (step, summary) = first_fire(levelled().as_ref(), stuck).expect("eval flat");
        assert!(summary.starts_with("eval_loss has not improved"), "{summary}");
        assert!(step >= 3000, "{step}");
    }

    #[test]
    fn property_a_strictly_improving_curve_never_fires() {
        // Curves that improve by more than the threshold within every window never fire, whatever their
        // shape and scale, with or without levels.
        let d =
            detector("plateau", json!({"metric": "loss", "window": "30%", "smoothing": 5, "minDeltaPct": 1}));
        let raw = detector("plateau", json!({"metric": "loss", "window": 20, "minDeltaPct": 1}));
        for c in [0.05, 0.2, 0.5, 1.0] {
            for scale in [1e-3, 1.0, 1e4] {
                // A power law that flattens, plus a linear creep of 5 % over the run: more than 1 % in any
                // 30 % of the run, and in any 20 logs of 10.
                let curve =
                    move |x: f64| vec![("loss", scale * (1.0 + x.powf(-c) + 0.05 * (1.0 - x / 10_000.0)))];
                assert_eq!(first_fire(d.as_ref(), curve), None, "c {c} scale {scale}");
                let steep = move |x: f64| vec![("loss", scale * (1.0 + 3.0 * (1.0 - x / 10_000.0)))];
                assert_eq!(first_fire(raw.as_ref(), steep), None, "c {c} scale {scale}");
            }
        }
    }

    #[test]
    fn levelled_parameters_are_checked() {
        let e = errors("plateau", json!({"metric": "auto", "window": "0%", "smoothing": 20, "std": 0.1}));
        assert_eq!(
            e,
            vec![
                "with.window: must be more than 0%",
                "with.smoothing: must be from 1 to 15 logged values, got 20",
                "with.std: std works on raw values of one metric: leave smoothing, metric: auto, a share of the run, minPoints, minRemaining and schedule out",
            ]
        );
    }

    #[test]
    fn fires_after_patience_samples_without_improvement() {
        let d = detector("plateau", json!({"metric": "loss", "window": 5}));
        let mut job = Job::new();
        // Improves for 10 samples, then flat.
        let mut values: Vec<f64> = (0..10).map(|i| 2.0 - 0.1 * i as f64).collect();
        values.extend([1.1003, 1.1001, 1.1004, 1.1002]);
        let last = job.feed(d.as_ref(), "loss", 60, &values);
        assert!(job.check(d.as_ref(), last).is_none(), "4 flat samples < patience 5");
        job.sample(d.as_ref(), last + 60, &[("loss", 1.1005)], None, None);
        let f = job.check(d.as_ref(), last + 60).expect("5 flat samples");
        assert!(f.summary.starts_with("loss has not improved by more than 0 for 5 samples"), "{}", f.summary);
    }

    #[test]
    fn min_delta_ignores_tiny_improvements() {
        let d = detector("plateau", json!({"metric": "loss", "window": 3, "minDelta": 0.01}));
        let mut job = Job::new();
        // Improves by 0.001 per sample: never significant.
        let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 0.999, 0.998, 0.997]);
        assert!(job.check(d.as_ref(), last).is_some());
        // Cumulative improvement beyond min_delta relative to the reference counts (Lightning semantics).
        let d = detector("plateau", json!({"metric": "loss", "window": 3, "minDelta": 0.0025}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 0.999, 0.998, 0.997]);
        assert!(job.check(d.as_ref(), last).is_none(), "0.003 total > 0.0025 resets the reference");
    }

    #[test]
    fn min_delta_pct_is_relative_to_the_best() {
        let d = detector("plateau", json!({"metric": "loss", "window": 2, "minDeltaPct": 1.0}));
        let mut job = Job::new();
        // 100 -> 99.5 is 0.5 %: not significant; -> 98 is 2 % of 100: significant.
        let last = job.feed(d.as_ref(), "loss", 60, &[100.0, 99.5, 98.0]);
        assert!(job.check(d.as_ref(), last).is_none());
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[100.0, 99.5, 98.0, 97.5, 97.3]);
        let f = job.check(d.as_ref(), last).expect("0.5 and 0.7 below 1% of 98");
        assert!(f.summary.contains("best 98 at sample 3"), "{}", f.summary);
    }

    #[test]
    fn wall_clock_window_counts_time_between_samples_not_silence() {
        let d = detector("plateau", json!({"metric": "loss", "window": "2h"}));
        let mut job = Job::new();
        let values = vec![1.0; 100];
        // One sample a minute: 99 minutes of flat values < 2h.
        let last = job.feed(d.as_ref(), "loss", 60, &values);
        assert!(job.check(d.as_ref(), last).is_none());
        // Long silence afterwards is a stall, not a plateau.
        assert!(job.check(d.as_ref(), last + 10 * 3600).is_none());
        job.sample(d.as_ref(), 2 * 3600, &[("loss", 1.0)], None, None);
        assert!(job.check(d.as_ref(), 2 * 3600).is_some());
    }

    #[test]
    fn a_cached_value_re_sent_is_not_a_new_sample() {
        // The HF callback repeats the last logged loss in every report until the next logging step.
        let d = detector("plateau", json!({"metric": "loss", "window": 5}));
        let mut job = Job::new();
        let mut last = 0;
        for (i, v) in [2.0, 1.9, 1.8].iter().enumerate() {
            for r in 0..10 {
                last = (i * 10 + r) as i64 * 5;
                job.sample(d.as_ref(), last, &[("loss", *v)], None, None);
            }
        }
        assert!(
            job.check(d.as_ref(), last).is_none(),
            "3 observations, each re-sent 10 times, all improving"
        );
        assert_eq!(job.series.metric("loss").unwrap().repeats(), 27);
    }

    #[test]
    fn max_mode_and_auto_direction() {
        let d = detector("plateau", json!({"metric": "eval_accuracy", "window": 3}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "eval_accuracy", 60, &[0.5, 0.6, 0.7, 0.8]);
        assert!(job.check(d.as_ref(), last).is_none(), "accuracy rising is improvement");
        let d = detector("plateau", json!({"metric": "eval_accuracy", "window": 3, "mode": "min"}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "eval_accuracy", 60, &[0.5, 0.6, 0.7, 0.8]);
        assert!(job.check(d.as_ref(), last).is_some(), "in min mode rising is no improvement");
    }

    #[test]
    fn warmup_in_samples_and_progress() {
        let d = detector("plateau", json!({"metric": "loss", "window": 2, "warmup": 10}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 1.001, 1.002, 1.003, 1.004]);
        assert!(job.check(d.as_ref(), last).is_none(), "5 samples < warmup 10");
        let d = detector("plateau", json!({"metric": "loss", "window": 2, "warmup": "50%"}));
        let mut job = Job::new();
        for i in 0..5 {
            job.sample(d.as_ref(), i * 60, &[("loss", 1.0 + i as f64 * 1e-3)], Some(10.0 * i as f64), None);
        }
        assert!(job.check(d.as_ref(), 240).is_none(), "progress 40% < 50%");
        job.sample(d.as_ref(), 300, &[("loss", 1.01)], Some(50.0), None);
        assert!(job.check(d.as_ref(), 300).is_some());
    }

    #[test]
    fn std_below_threshold_fires_even_with_tiny_improvements() {
        let d = detector("plateau", json!({"metric": "loss", "window": 4, "std": 0.01}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 0.999, 0.998, 0.997, 0.996]);
        let f = job.check(d.as_ref(), last).expect("std of 0.001 steps is below 0.01");
        assert!(f.summary.contains("std over the last 4 samples"), "{}", f.summary);
    }

    #[test]
    fn std_only_decides_like_rays_trial_plateau_stopper() {
        // Ray: append, count, no stop before grace_period results, then np.std(last num_results) < std.
        fn ray(values: &[f64], std: f64, num_results: usize, grace_period: usize) -> Option<usize> {
            (0..values.len()).find(|&i| {
                let seen = i + 1;
                if seen < grace_period || seen < num_results {
                    return false;
                }
                let window = &values[seen - num_results..seen];
                let mean = window.iter().sum::<f64>() / num_results as f64;
                let var = window.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / num_results as f64;
                var.sqrt() < std
            })
        }
        let params = json!({"metric": "loss", "window": 5, "std": 0.01, "warmup": 8, "stdOnly": true});
        let d = detector("plateau", params);
        // Diverging: never a new best, so the patience test alone would fire; the std test does not.
        let diverging: Vec<f64> = (0..30).map(|i| 1.0 + 0.05 * i as f64).collect();
        // Falling, then flat with small noise: the std test fires once the window is flat.
        let mut flattening: Vec<f64> = (0..12).map(|i| 2.0 - 0.1 * i as f64).collect();
        flattening.extend((0..20).map(|i| 0.9 + 0.001 * ((i * 7 % 5) as f64)));
        for values in [diverging, flattening] {
            let mut job = Job::new();
            let fired = (0..values.len()).find(|&i| {
                job.sample(d.as_ref(), i as i64 * 60, &[("loss", values[i])], None, None);
                job.check(d.as_ref(), i as i64 * 60).is_some()
            });
            assert_eq!(fired, ray(&values, 0.01, 5, 8), "{values:?}");
        }
        let e = errors("plateau", json!({"metric": "loss", "stdOnly": true}));
        assert_eq!(e, vec!["with.stdOnly: needs std"]);
    }

    #[test]
    fn nan_does_not_reset_or_poison_the_reference() {
        let d = detector("plateau", json!({"metric": "loss", "window": 3}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[1.0, f64::NAN, 1.001, f64::NAN, 1.002, 1.003]);
        let f = job.check(d.as_ref(), last).expect("4 finite flat samples");
        assert!(f.summary.contains("best 1 at sample 1"), "{}", f.summary);
    }

    #[test]
    fn parameter_errors_are_reported_together() {
        let e = errors("plateau", json!({"window": 0, "minDelta": -1, "foo": 1}));
        assert_eq!(
            e,
            vec![
                "with.metric: required",
                "with.minDelta: must be >= 0, got -1",
                "with.window: must be at least 1 sample",
                "with.foo: unknown parameter",
            ]
        );
        let e = errors("plateau", json!({"metric": "loss", "window": 3, "patience": 3}));
        assert!(e[0].contains("either window or patience"));
    }
}
