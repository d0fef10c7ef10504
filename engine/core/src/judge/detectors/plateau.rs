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
    summary: "The metric has not improved by more than minDelta / minDeltaPct for `window` (samples or time), or its std over the window fell below `std`.",
    params: &[
        ParamDoc {
            name: "metric",
            ty: "string",
            default: "required",
            doc: "Canonical metric name, e.g. loss or eval_loss.",
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
            doc: "Patience: samples (10) or wall-clock time between samples (2h). Alias: patience.",
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
    ],
    example: r#"{"metric": "loss", "window": "2h", "minDelta": 0.001, "warmup": "10%"}"#,
    build,
};

#[derive(Debug, Clone)]
pub(super) struct Plateau {
    pub metric: std::borrow::Cow<'static, str>,
    /// The `mode` parameter resolved against the metric name once, off the per-sample path.
    pub direction: crate::history::metric_series::Direction,
    pub window: Window,
    pub min_delta: f64,
    pub min_delta_pct: f64,
    pub std: Option<f64>,
    /// Ray Tune's TrialPlateauStopper: the std test alone decides.
    pub std_only: bool,
    pub warmup: Warmup,
}

/// The reference best and the metric's own sample clock.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlateauState {
    /// Finite observations of the metric.
    pub samples: u64,
    pub first_at: Option<Timestamp>,
    pub last_at: Option<Timestamp>,
    /// Reference best: value, time and sample number of the last significant improvement.
    pub reference: Option<(f64, Timestamp, u64)>,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let metric = p.required_string("metric");
    let mode = p.direction("mode");
    let window = match (p.raw("window").is_some(), p.raw("patience").is_some()) {
        (true, true) => {
            p.error("patience", "give either window or patience (they are the same), not both");
            None
        }
        (false, true) => p.window("patience"),
        _ => p.window("window"),
    };
    let window = window.unwrap_or(Window::Samples(10));
    let min_delta = p.positive("minDelta", true).unwrap_or(0.0);
    let min_delta_pct = p.positive("minDeltaPct", true).unwrap_or(0.0);
    let std = p.positive("std", false);
    let std_only = p.bool("stdOnly").unwrap_or(false);
    if std_only && std.is_none() {
        p.error("stdOnly", "needs std");
    }
    let warmup = p.warmup("warmup").unwrap_or(Warmup::Samples(0));
    match window {
        Window::Samples(0) => p.error("window", "must be at least 1 sample"),
        Window::Samples(n) if std.is_some() && (n < 2 || n as usize > WINDOW) => {
            p.error("window", format!("with std, a sample window must be between 2 and {WINDOW} samples"));
        }
        _ => {}
    }
    let metric = metric?;
    Some(Box::new(Plateau {
        metric: crate::input::interned(metric),
        direction: mode.resolve(metric),
        window,
        min_delta,
        min_delta_pct,
        std,
        std_only,
        warmup,
    }))
}

impl Plateau {
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
        Some((&self.metric, self.direction))
    }

    // Judges the samples (and their times) only.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn observe(&self, state: &mut DetectorState, series: &JobSeries, sample: &ProgressSample) {
        let Some(v) = sample.metric(&self.metric).filter(|v| v.is_finite()) else { return };
        if !matches!(state, DetectorState::Plateau(_)) {
            *state = DetectorState::Plateau(PlateauState::default());
        }
        let DetectorState::Plateau(s) = state else { return };
        s.first_at.get_or_insert(sample.updated_at);
        s.last_at = Some(sample.updated_at);
        // A cached value re-sent is time passing, not a new observation (see `MetricSeries::push`); only a
        // fresh start (no reference yet, e.g. after a resume) takes it as its first observation.
        if s.reference.is_some()
            && !series.metric(&self.metric).is_none_or(crate::history::metric_series::MetricSeries::is_fresh)
        {
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
        let stalled_improvement = match self.window {
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
        let stats = match self.window {
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
            Window::Time(d) => vec![("window", d)],
            Window::Samples(_) => Vec::new(),
        }
    }
}

fn add(t: Timestamp, secs: f64) -> Timestamp {
    crate::time::add_seconds(t, secs).unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use serde_json::json;

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
