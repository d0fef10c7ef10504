//! `diverging`: the metric went the wrong way, badly.
//!
//! Fires when the latest finite value is worse than `threshold` (Lightning's `divergence_threshold`, Optuna's
//! ThresholdPruner) or worse than `factor` × the best value so far (for a minimized metric: above
//! best × factor; for a maximized one: below best ÷ factor). NaN/Inf is `non_finite`'s job and never
//! counts here.
//!
//! **A divergence that stays** (`worseByPct`, the catalog's way): a single spike, or a skipped fp16 step,
//! that the run recovers from is not a divergence; a level that stays worse is. The level is the rolling
//! median of the last `smoothing` logged values (see `levels.rs`); the rule fires when a watched metric's
//! level has been worse than its best level by more than `worseByPct` percent (and more than `minDelta`)
//! for `sustain` — a share of the planned run (`"10%"`) or a number of logged values — with at least
//! `minPoints` logged values, and no watched metric reached a new best in that time. With `metric: auto` it
//! watches the job's evaluation metrics (or its loss while it has none): an evaluation loss that climbs
//! while the training loss keeps falling is overfitting, and is caught, unless another evaluation metric
//! (accuracy, WER, ...) is still improving. A factor against a best that approaches zero misfires (a loss
//! of 0.004 is "3× its best" of 0.0013 in ordinary noise); a relative margin on a smoothed level does not.
//!
//! Examples: `uses: diverging`, `with: {metric: loss, factor: 3, warmup: 20}`;
//! `with: {metric: auto, worseByPct: 10, sustain: "10%", smoothing: 5, minPoints: 3}`.

use super::levels::{self, Significance, Tracks, Watch};
use super::{Detector, DetectorInfo, DetectorState, DirectionParam, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::history::metric_series::Direction;
use crate::time::fmt_num;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "diverging",
    summary: "The latest value is worse than `threshold` or `factor` times the best value so far, or the level has stayed worse than its best by `worseByPct` for `sustain`.",
    params: &[
        ParamDoc {
            name: "metric",
            ty: "string",
            default: "required",
            doc: "Canonical metric name; auto (with worseByPct): the job's eval metrics, else loss.",
        },
        ParamDoc { name: "mode", ty: "min|max|auto", default: "auto", doc: "Which way is better." },
        ParamDoc {
            name: "threshold",
            ty: "number",
            default: "none",
            doc: "Absolute limit: fire when the value is worse than this.",
        },
        ParamDoc {
            name: "factor",
            ty: "number > 1",
            default: "none",
            doc: "Fire when the value is worse than factor × best (min) or best ÷ factor (max).",
        },
        ParamDoc {
            name: "warmup",
            ty: "samples or percent",
            default: "0",
            doc: "Samples of the metric (20), or a share of the planned run (\"10%\"), before the rule may fire.",
        },
        ParamDoc {
            name: "worseByPct",
            ty: "number",
            default: "none",
            doc: "Fire when the level stays more than this many percent worse than its best level.",
        },
        ParamDoc {
            name: "sustain",
            ty: "percent or values",
            default: "10%",
            doc: "How long the level must stay worse: a share of the planned run (\"10%\") or logged values (5).",
        },
        ParamDoc {
            name: "smoothing",
            ty: "values",
            default: "5",
            doc: "Rolling median of the last N logged values.",
        },
        ParamDoc { name: "minDelta", ty: "number", default: "0", doc: "And worse by more than this much." },
        ParamDoc {
            name: "minPoints",
            ty: "values",
            default: "3",
            doc: "Logged values since it turned worse.",
        },
        ParamDoc {
            name: "minRemaining",
            ty: "percent",
            default: "0%",
            doc: "Never fire in the last share of the planned run.",
        },
    ],
    example: r#"{"metric": "loss", "factor": 3, "warmup": 20}"#,
    build,
};

#[derive(Debug, Clone)]
pub(crate) struct Diverging {
    pub metric: String,
    pub mode: DirectionParam,
    pub threshold: Option<f64>,
    pub factor: Option<f64>,
    pub warmup: u64,
    /// With `worseByPct`: the divergence that stays.
    pub stays: Option<Stays>,
}

/// The parameters of a divergence that stays.
#[derive(Debug, Clone)]
pub(crate) struct Stays {
    watch: Watch,
    worse_pct: f64,
    sustain: Sustain,
    smoothing: usize,
    min_delta: f64,
    min_points: u64,
    warmup_share: f64,
    min_remaining: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sustain {
    Run(f64),
    Values(u64),
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let worse_pct = p.positive("worseByPct", false);
    if worse_pct.is_some() {
        return build_stays(p, worse_pct);
    }
    let metric = p.required_string("metric");
    let mode = p.direction("mode");
    let threshold = p.f64("threshold");
    let factor = p.f64("factor");
    let warmup = p.count("warmup").unwrap_or(0);
    if let Some(f) = factor
        && f <= 1.0
    {
        p.error("factor", format!("must be > 1, got {f}"));
    }
    if threshold.is_none() && factor.is_none() && p.raw("threshold").is_none() && p.raw("factor").is_none() {
        p.error("threshold", "give threshold, factor, worseByPct, or several");
    }
    for levelled in ["sustain", "smoothing", "minDelta", "minPoints", "minRemaining"] {
        if p.raw(levelled).is_some() {
            p.error(levelled, "needs worseByPct");
        }
    }
    if metric == Some("auto") {
        p.error("metric", "auto needs worseByPct (threshold and factor are for one named metric)");
    }
    Some(Box::new(Diverging { metric: metric?.to_string(), mode, threshold, factor, warmup, stays: None }))
}

fn build_stays(p: &mut Params<'_>, worse_pct: Option<f64>) -> Option<Box<dyn Detector>> {
    let watch = Watch::parse(p, true);
    let threshold = p.f64("threshold");
    let factor = p.f64("factor");
    if let Some(f) = factor
        && f <= 1.0
    {
        p.error("factor", format!("must be > 1, got {f}"));
    }
    if watch == Some(Watch::Auto) && (threshold.is_some() || factor.is_some()) {
        p.error("metric", "auto cannot take threshold or factor (they are for one named metric)");
    }
    let sustain = match p.raw("sustain") {
        None => Sustain::Run(0.1),
        Some((_, serde_json::Value::String(s))) if s.trim().ends_with('%') => {
            Sustain::Run(p.percent("sustain").unwrap_or(0.1))
        }
        Some(_) => Sustain::Values(p.count("sustain").unwrap_or(1)),
    };
    let smoothing = p.count("smoothing").unwrap_or(5);
    if !(1..=levels::MAX_SMOOTHING as u64).contains(&smoothing) {
        p.error(
            "smoothing",
            format!("must be from 1 to {} logged values, got {smoothing}", levels::MAX_SMOOTHING),
        );
    }
    let min_delta = p.positive("minDelta", true).unwrap_or(0.0);
    let min_points = p.count("minPoints").unwrap_or(3);
    let (warmup, warmup_share) = match p.warmup("warmup") {
        Some(crate::units::duration::Warmup::Samples(n)) => (n, 0.0),
        Some(crate::units::duration::Warmup::ProgressPercent(pct)) => (0, pct / 100.0),
        None => (0, 0.0),
    };
    let min_remaining = p.percent("minRemaining").unwrap_or(0.0);
    let watch = watch?;
    let (metric, mode) = match &watch {
        Watch::Named { metric, direction } => (metric.to_string(), DirectionParam::Fixed(*direction)),
        Watch::Auto => ("loss".to_string(), DirectionParam::Auto),
    };
    Some(Box::new(Diverging {
        metric,
        mode,
        threshold,
        factor,
        warmup,
        stays: Some(Stays {
            watch,
            worse_pct: worse_pct?,
            sustain,
            smoothing: smoothing.clamp(1, levels::MAX_SMOOTHING as u64) as usize,
            min_delta,
            min_points,
            warmup_share,
            min_remaining,
        }),
    }))
}

impl Detector for Diverging {
    fn watched_metric(&self) -> Option<(&str, crate::history::metric_series::Direction)> {
        match &self.stays {
            Some(Stays { watch: Watch::Auto, .. }) => None,
            _ => Some((&self.metric, self.mode.resolve(&self.metric))),
        }
    }

    fn judged_metrics(
        &self,
        finding: &std::collections::BTreeMap<String, f64>,
    ) -> Vec<(String, crate::history::metric_series::Direction)> {
        super::judged_from_finding(self.watched_metric(), finding)
    }

    fn observe(
        &self,
        state: &mut DetectorState,
        series: &crate::history::job_series::JobSeries,
        sample: &crate::input::sample::ProgressSample,
    ) {
        let Some(stays) = &self.stays else { return };
        if !matches!(state, DetectorState::Levels(_)) {
            *state = DetectorState::Levels(Box::default());
        }
        let DetectorState::Levels(tracks) = state else { return };
        let significance = Significance { min_delta: stays.min_delta, min_delta_pct: 0.0 };
        tracks.observe(&stays.watch, stays.smoothing, significance, stays.worse_pct, series, sample);
    }

    // Judges the samples only.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        if let (Some(stays), DetectorState::Levels(tracks)) = (&self.stays, state)
            && let Some(f) = stays.check(tracks, view)
        {
            return Some(f);
        }
        if self.threshold.is_none() && self.factor.is_none() {
            return None;
        }
        let series = view.series.metric(&self.metric)?;
        if series.count() < self.warmup.max(1) {
            return None;
        }
        let (_, last) = series.last()?;
        let direction = self.mode.resolve(&self.metric);
        if let Some(limit) = self.threshold
            && direction.better(limit, last)
        {
            return Some(
                Finding::new(format!(
                    "{} is {}, worse than the threshold {}",
                    self.metric,
                    fmt_num(last),
                    fmt_num(limit)
                ))
                .value("last", last)
                .value("threshold", limit),
            );
        }
        let factor = self.factor?;
        let best = series.best(direction)?.value;
        let worse = match direction {
            Direction::Min => last - best > (factor - 1.0) * best.abs(),
            Direction::Max => best - last > (1.0 - 1.0 / factor) * best.abs(),
        };
        worse.then(|| {
            Finding::new(format!(
                "{} is {}, more than {}× worse than its best {}",
                self.metric,
                fmt_num(last),
                fmt_num(factor),
                fmt_num(best)
            ))
            .value("last", last)
            .value("best", best)
            .value("factor", factor)
        })
    }
}

/// Whether a metric is a loss (what the run optimises) rather than a task metric.
fn is_loss(name: &str) -> bool {
    name.contains("loss") || name.contains("perplexity")
}

impl Stays {
    fn check(&self, tracks: &Tracks, view: &JobView<'_>) -> Option<Finding> {
        let fraction = levels::run_fraction(view.series);
        if self.warmup_share > 0.0 && fraction.is_none_or(|f| f < self.warmup_share) {
            return None;
        }
        if self.min_remaining > 0.0 && fraction.is_some_and(|f| 1.0 - f < self.min_remaining) {
            return None;
        }
        let watched = tracks.watched(&self.watch, view.series);
        let held = |count: u64, since: Option<f64>| match self.sustain {
            Sustain::Run(share) => fraction.zip(since).is_some_and(|(f, s)| f - s >= share),
            Sustain::Values(n) => count >= n,
        };
        // No watched metric reached a new best within the sustain span. A learning-rate drop does not
        // count as one (a run that went bad gets its rate cut by ReduceLROnPlateau).
        if watched.iter().any(|t| !held(t.count - t.record_count, t.record_fraction)) {
            return None;
        }
        // A task metric (accuracy, F1, WER, BLEU ...) evaluated every few hundred steps dips and comes back
        // with the evaluation set's luck; a loss is what the run optimises. When the job reports an
        // evaluation loss, only a loss diverging fires and the task metrics hold it back while they
        // improve; a job judged on task metrics alone fires on them.
        let any_loss = watched.iter().any(|t| is_loss(&t.name));
        let diverged = watched.iter().find(|t| {
            (!any_loss || is_loss(&t.name))
                && t.worse_since.is_some_and(|(count, _, since)| {
                    t.count - count + 1 >= self.min_points && held(t.count - count + 1, since)
                })
        })?;
        let (count, at, since) = diverged.worse_since?;
        let worse = -diverged.gain(diverged.current, diverged.best_ever);
        let span = match (self.sustain, fraction.zip(since)) {
            (Sustain::Run(_), Some((f, s))) => {
                format!("{} % of the planned run", fmt_num(((f - s) * 1000.0).round() / 10.0))
            }
            _ => crate::time::fmt_secs(crate::time::seconds(at, view.series.last_sample_at.unwrap_or(at))),
        };
        let pct =
            if diverged.best_ever != 0.0 { worse / diverged.best_ever.abs() * 100.0 } else { f64::INFINITY };
        // Judged on every metric it watched: a stop is wrong if any of them went on to improve.
        let mut finding = Finding::new("");
        for t in &watched {
            finding = finding.value(&format!("level:{}", t.name), t.current);
        }
        finding.summary = format!(
            "{}{} is {}, {} % worse than its best {}, and has stayed more than {} % worse for {} / {}",
            diverged.name,
            if self.smoothing > 1 && !levels::is_quality_eval(&diverged.name) {
                format!(" (median of {})", self.smoothing)
            } else {
                String::new()
            },
            fmt_num(diverged.current),
            fmt_num((pct * 10.0).round() / 10.0),
            fmt_num(diverged.best_ever),
            fmt_num(self.worse_pct),
            span,
            crate::time::plural(diverged.count - count + 1, "logged value", "logged values")
        );
        Some(finding.value("last", diverged.current).value("best", diverged.best_ever))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use serde_json::json;

    /// Feeds `value(step)` logged every 10 steps of 1000, with an eval every 100; the first fire.
    fn first_fire(
        d: &dyn super::Detector,
        value: impl Fn(f64) -> (f64, Option<f64>),
    ) -> Option<(u32, String)> {
        let mut job = Job::new();
        for step in (10..1000).step_by(10) {
            let x = f64::from(step);
            let (loss, eval) = value(x);
            let mut metrics = vec![("loss", loss)];
            if let Some(e) = eval {
                metrics.push(("eval_loss", e));
            }
            job.sample_at_step(d, i64::from(step) * 6, &metrics, x, 1000.0);
            if let Some(f) = job.check(d, i64::from(step) * 6) {
                return Some((step, f.summary));
            }
        }
        None
    }

    fn noise(x: f64) -> f64 {
        ((x * 12.9898).sin() * 43758.5453).rem_euclid(1.0) * 2.0 - 1.0
    }

    #[test]
    fn a_recovered_spike_is_not_a_divergence_and_a_loss_that_stays_worse_is() {
        let d = detector(
            "diverging",
            json!({"metric": "loss", "worseByPct": 10, "sustain": "10%", "smoothing": 5}),
        );
        // A healthy fall with one 5× spike at step 400 and an fp16-ish 20× one at 600: both recover at once.
        let spiky = |x: f64| {
            let base = 0.5 + 2.0 * (-x / 200.0).exp() + 0.005 * noise(x);
            (
                if x == 400.0 {
                    5.0 * base
                } else if x == 600.0 {
                    20.0 * base
                } else {
                    base
                },
                None,
            )
        };
        assert_eq!(first_fire(d.as_ref(), spiky), None);
        // The same run whose loss climbs back from step 500 and stays up: fires once it has stayed 10 %
        // worse than its best for 10 % of the run.
        let rising = |x: f64| {
            (0.5 + 2.0 * (-x / 200.0).exp() + if x > 500.0 { (x - 500.0) / 500.0 } else { 0.0 }, None)
        };
        let (step, summary) = first_fire(d.as_ref(), rising).expect("a loss that stays worse");
        assert!((600..=700).contains(&step), "{step}: {summary}");
        assert!(summary.starts_with("loss (median of 5) is "), "{summary}");
        assert!(
            summary.contains("worse than its best") && summary.contains("% of the planned run"),
            "{summary}"
        );
    }

    #[test]
    fn overfitting_is_caught_on_the_eval_loss_while_the_train_loss_falls() {
        let d = detector(
            "diverging",
            json!({"metric": "auto", "worseByPct": 10, "sustain": "20%", "smoothing": 3}),
        );
        let overfit = |x: f64| {
            let eval = (x as u32).is_multiple_of(100).then(|| 0.8 + ((x - 300.0) / 700.0).powi(2));
            (1.0 - x / 1500.0, eval)
        };
        let (step, summary) = first_fire(d.as_ref(), overfit).expect("eval_loss up for good");
        assert!(summary.starts_with("eval_loss is "), "{summary}");
        assert!(step >= 700, "{step}");
        // An eval loss that keeps improving is left alone even when the training loss wobbles up.
        let fine = |x: f64| (1.0 + 0.2 * noise(x), (x as u32).is_multiple_of(100).then(|| 1.0 - x / 2000.0));
        assert_eq!(first_fire(d.as_ref(), fine), None);
    }

    /// Feeds `metrics(step)` every 10 steps of 1000; the first fire.
    fn first_fire_of(
        d: &dyn super::Detector,
        metrics: impl Fn(f64) -> Vec<(&'static str, f64)>,
    ) -> Option<(u32, String)> {
        let mut job = Job::new();
        for step in (10..1000).step_by(10) {
            let x = f64::from(step);
            job.sample_at_step(d, i64::from(step) * 6, &metrics(x), x, 1000.0);
            if let Some(f) = job.check(d, i64::from(step) * 6) {
                return Some((step, f.summary));
            }
        }
        None
    }

    fn catalog() -> Box<dyn super::Detector> {
        detector(
            "diverging",
            json!({"metric": "auto", "worseByPct": 10, "sustain": "20%", "minPoints": 3, "smoothing": 5,
                   "minDelta": 0.001, "warmup": "10%", "minRemaining": "10%"}),
        )
    }

    #[test]
    fn a_learning_rate_cut_does_not_hide_a_divergence() {
        // ReduceLROnPlateau on a run that blew up: the evaluation loss (every 100 steps) jumps 18 % above
        // its best at step 400 and stays there, and the rate is quartered at every evaluation from then on.
        // The cuts are the trainer reacting to the damage, not the run getting better: it fires once the
        // level has stayed worse for 20 % of the run.
        let blown = |x: f64| {
            let evals = (x / 100.0).floor();
            let mut m = vec![("loss", 5.0 + 0.01 * noise(x))];
            m.push(("learning_rate", 20.0 * 0.25f64.powf((evals - 3.0).max(0.0))));
            if (x as u32).is_multiple_of(100) {
                m.push(("eval_loss", if x < 400.0 { 5.6 - 0.1 * evals } else { 6.3 - 0.02 * (evals - 4.0) }));
            }
            m
        };
        let (step, summary) = first_fire_of(catalog().as_ref(), blown).expect("stays worse despite the cuts");
        assert!((600..=700).contains(&step), "{step}: {summary}");
        assert!(summary.starts_with("eval_loss is "), "{summary}");
    }

    #[test]
    fn a_task_metric_that_dips_and_recovers_is_no_divergence_while_the_loss_is_fine() {
        // An evaluation every 50 steps: eval_loss holds its level (within 1 %); eval_accuracy dips 20 %
        // below its best from step 300 to 650 (the evaluation set's luck, a noisy metric) and comes back.
        // The loss is what the run optimises, and it did not diverge: no divergence.
        let dip = |x: f64| {
            let mut m = vec![("loss", 1.0 - x / 2000.0)];
            if (x as u32).is_multiple_of(50) {
                m.push(("eval_loss", 0.9 + 0.005 * noise(x)));
                let acc = 0.5 + x / 5000.0;
                m.push(("eval_accuracy", if (300.0..650.0).contains(&x) { 0.8 * acc } else { acc }));
            }
            m
        };
        assert_eq!(first_fire_of(catalog().as_ref(), dip), None);
        // A job that reports its accuracy alone, and whose accuracy falls for good, is judged on it.
        let fallen = |x: f64| {
            let mut m = vec![("loss", 1.0 - x / 2000.0)];
            if (x as u32).is_multiple_of(50) {
                m.push(("eval_accuracy", if x < 300.0 { 0.5 + x / 1000.0 } else { 0.6 }));
                m.push(("eval_runtime", 30.0 + noise(x))); // a new evaluation, though its accuracy repeats
            }
            m
        };
        let (step, summary) = first_fire_of(catalog().as_ref(), fallen).expect("accuracy fell for good");
        assert!((500..=600).contains(&step), "{step}: {summary}");
        assert!(summary.starts_with("eval_accuracy is "), "{summary}");
    }

    #[test]
    fn property_a_strictly_improving_curve_never_diverges() {
        let d =
            detector("diverging", json!({"metric": "loss", "worseByPct": 5, "sustain": 3, "smoothing": 1}));
        for c in [0.1, 0.5, 1.0, 2.0] {
            for scale in [1e-3, 1.0, 1e3] {
                let curve = move |x: f64| (scale * (0.1 + x.powf(-c)), None);
                assert_eq!(first_fire(d.as_ref(), curve), None, "c {c} scale {scale}");
            }
        }
    }

    #[test]
    fn a_slow_improver_under_noise_and_a_learning_rate_drop_are_not_divergences() {
        let d = detector(
            "diverging",
            json!({"metric": "auto", "worseByPct": 10, "sustain": "10%", "smoothing": 5, "minDelta": 0.001}),
        );
        // A loss creeping down 3 % over the run under ±5 % noise: never 10 % worse than its best level.
        assert_eq!(first_fire(d.as_ref(), |x| (1.0 - 0.03 * x / 1000.0 + 0.05 * noise(x), None)), None);
        // A step drop of the learning rate at step 500: the loss falls to a new, lower level and stays.
        assert_eq!(
            first_fire(d.as_ref(), |x| (if x < 500.0 { 1.0 } else { 0.8 } + 0.01 * noise(x), None)),
            None
        );
        // An eval-gap reporter (an evaluation every 100 steps) still improving: judged on eval_loss, never
        // worse for long, while the training loss is noisy.
        let eval = |x: f64| (x >= 100.0).then(|| 1.0 - 0.02 * (x / 100.0).floor());
        assert_eq!(first_fire(d.as_ref(), |x| (0.9 + 0.1 * noise(x), eval(x))), None);
    }

    #[test]
    fn threshold_fires_on_the_latest_value() {
        let d = detector("diverging", json!({"metric": "loss", "threshold": 10}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[2.0, 5.0, 9.9]);
        assert!(job.check(d.as_ref(), last).is_none());
        job.sample(d.as_ref(), last + 60, &[("loss", 10.5)], None, None);
        let f = job.check(d.as_ref(), last + 60).unwrap();
        assert_eq!(f.summary, "loss is 10.5, worse than the threshold 10");
    }

    #[test]
    fn factor_compares_with_the_best_so_far() {
        let d = detector("diverging", json!({"metric": "loss", "factor": 3}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[2.0, 1.0, 2.9]);
        assert!(job.check(d.as_ref(), last).is_none());
        job.sample(d.as_ref(), last + 60, &[("loss", 3.1)], None, None);
        assert!(
            job.check(d.as_ref(), last + 60).unwrap().summary.contains("more than 3× worse than its best 1")
        );
    }

    #[test]
    fn max_metrics_diverge_downwards() {
        let d = detector("diverging", json!({"metric": "eval_accuracy", "factor": 2}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "eval_accuracy", 60, &[0.8, 0.5]);
        assert!(job.check(d.as_ref(), last).is_none());
        job.sample(d.as_ref(), last + 60, &[("eval_accuracy", 0.39)], None, None);
        assert!(job.check(d.as_ref(), last + 60).is_some());
    }

    #[test]
    fn nan_is_not_divergence_and_does_not_hide_it() {
        let d = detector("diverging", json!({"metric": "loss", "threshold": 10}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[2.0, f64::NAN, f64::INFINITY]);
        assert!(job.check(d.as_ref(), last).is_none());
    }

    #[test]
    fn warmup_delays_firing() {
        let d = detector("diverging", json!({"metric": "loss", "threshold": 1, "warmup": 3}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[5.0, 5.0]);
        assert!(job.check(d.as_ref(), last).is_none());
    }

    #[test]
    fn needs_a_threshold_or_a_factor() {
        assert_eq!(
            errors("diverging", json!({"metric": "loss"})),
            vec!["with.threshold: give threshold, factor, worseByPct, or several"]
        );
        assert_eq!(
            errors("diverging", json!({"metric": "loss", "factor": 0.5})),
            vec!["with.factor: must be > 1, got 0.5"]
        );
    }
}
