//! Ports of SageMaker Debugger's built-in rules, with their parameter names and defaults
//! (awslabs/sagemaker-debugger-rulesconfig). SageMaker counts saved steps; here a step is a reported sample
//! that brought a new value (re-sent cached values do not count).
//!
//! * `loss_not_decreasing` (LossNotDecreasing): every sample, compare the loss with its value `num_steps`
//!   samples earlier; fire when it decreased by less than `diff_percent` percent, or when it rose more than
//!   `increase_threshold_percent` percent above its best. `mode` picks the loss: GLOBAL or TRAIN → `loss`,
//!   EVAL → `eval_loss` (or name it with `metric`).
//! * `overtraining` (Overtraining): fire when the training loss has not improved by more than `delta` for
//!   `patience_train` samples, or the validation loss for `patience_validation` samples.
//!
//! Examples: `uses: loss_not_decreasing`, `with: {num_steps: 10, diff_percent: 0.1}`;
//! `uses: overtraining`, `with: {patience_validation: 10, delta: 0.01}`.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::history::job_series::JobSeries;

use crate::history::metric_series::{Direction, WINDOW};
use crate::input::sample::ProgressSample;
use crate::time::fmt_num;

pub(super) const INFO_LOSS_NOT_DECREASING: DetectorInfo = DetectorInfo {
    name: "loss_not_decreasing",
    summary: "SageMaker LossNotDecreasing: the loss fell by less than diff_percent over num_steps samples.",
    params: &[
        ParamDoc {
            name: "num_steps",
            ty: "samples",
            default: "10",
            doc: "Distance of the comparison, in samples (at most 63).",
        },
        ParamDoc {
            name: "diff_percent",
            ty: "number",
            default: "0.1",
            doc: "Minimum decrease in percent over num_steps.",
        },
        ParamDoc {
            name: "increase_threshold_percent",
            ty: "number",
            default: "5",
            doc: "Maximum rise in percent above the best loss.",
        },
        ParamDoc {
            name: "mode",
            ty: "GLOBAL|TRAIN|EVAL",
            default: "GLOBAL",
            doc: "Which loss: GLOBAL/TRAIN = loss, EVAL = eval_loss.",
        },
        ParamDoc {
            name: "metric",
            ty: "string",
            default: "by mode",
            doc: "Explicit metric name instead of mode.",
        },
    ],
    example: r#"{"num_steps": 10, "diff_percent": 0.1, "increase_threshold_percent": 5, "mode": "TRAIN"}"#,
    build: build_loss_not_decreasing,
};

pub(super) const INFO_OVERTRAINING: DetectorInfo = DetectorInfo {
    name: "overtraining",
    summary: "SageMaker Overtraining: training or validation loss stopped improving by more than delta.",
    params: &[
        ParamDoc {
            name: "patience_train",
            ty: "samples",
            default: "5",
            doc: "Samples without training-loss improvement.",
        },
        ParamDoc {
            name: "patience_validation",
            ty: "samples",
            default: "10",
            doc: "Samples without validation-loss improvement.",
        },
        ParamDoc {
            name: "delta",
            ty: "number",
            default: "0.01",
            doc: "Improvement that counts as a new optimum.",
        },
        ParamDoc { name: "train_metric", ty: "string", default: "loss", doc: "Training loss metric." },
        ParamDoc {
            name: "validation_metric",
            ty: "string",
            default: "eval_loss",
            doc: "Validation loss metric.",
        },
    ],
    example: r#"{"patience_train": 5, "patience_validation": 10, "delta": 0.01}"#,
    build: build_overtraining,
};

#[derive(Debug, Clone)]
pub(super) struct LossNotDecreasing {
    pub metric: String,
    pub num_steps: usize,
    pub diff_percent: f64,
    pub increase_threshold_percent: f64,
}

fn build_loss_not_decreasing(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let num_steps = p.count("num_steps").unwrap_or(10);
    let diff_percent = p.positive("diff_percent", true).unwrap_or(0.1);
    let increase_threshold_percent = p.positive("increase_threshold_percent", true).unwrap_or(5.0);
    let mode = p.string("mode").map(str::to_ascii_uppercase);
    let metric = p.string("metric").map(str::to_string);
    let metric = match (metric, mode.as_deref()) {
        (Some(m), _) => m,
        (None, None | Some("GLOBAL" | "TRAIN")) => "loss".to_string(),
        (None, Some("EVAL")) => "eval_loss".to_string(),
        (None, Some(other)) => {
            p.error("mode", format!("expected GLOBAL, TRAIN or EVAL, got {other}"));
            "loss".to_string()
        }
    };
    if num_steps == 0 || num_steps >= WINDOW as u64 {
        p.error("num_steps", format!("must be between 1 and {}", WINDOW - 1));
    }
    Some(Box::new(LossNotDecreasing {
        metric,
        num_steps: num_steps as usize,
        diff_percent,
        increase_threshold_percent,
    }))
}

impl Detector for LossNotDecreasing {
    fn watched_metric(&self) -> Option<(&str, crate::history::metric_series::Direction)> {
        Some((&self.metric, crate::history::metric_series::Direction::Min))
    }

    // Judges the samples only.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        let series = view.series.metric(&self.metric)?;
        let (_, last) = series.last()?;
        let best = series.best(Direction::Min)?.value;
        if best != 0.0 {
            let rise = (last - best) / best.abs() * 100.0;
            if rise > self.increase_threshold_percent {
                return Some(
                    Finding::new(format!(
                        "{} is {}, {}% above its best {} (limit {}%)",
                        self.metric,
                        fmt_num(last),
                        fmt_num(rise),
                        fmt_num(best),
                        fmt_num(self.increase_threshold_percent)
                    ))
                    .value("last", last)
                    .value("best", best)
                    .value("risePercent", rise),
                );
            }
        }
        let before = series.value_back(self.num_steps)?;
        if before == 0.0 {
            return None;
        }
        let decrease = (before - last) / before.abs() * 100.0;
        (decrease < self.diff_percent).then(|| {
            Finding::new(format!(
                "{} decreased by {}% over the last {} samples ({} → {}), less than {}%",
                self.metric,
                fmt_num(decrease),
                self.num_steps,
                fmt_num(before),
                fmt_num(last),
                fmt_num(self.diff_percent)
            ))
            .value("decreasePercent", decrease)
            .value("last", last)
        })
    }
}

#[derive(Debug, Clone)]
pub(super) struct Overtraining {
    pub train_metric: String,
    pub validation_metric: String,
    pub patience_train: u64,
    pub patience_validation: u64,
    pub delta: f64,
}

/// Best values and wait counters, as in smdebug's Overtraining rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OvertrainingState {
    pub best_train: Option<f64>,
    pub train_wait: u64,
    pub best_validation: Option<f64>,
    pub validation_wait: u64,
}

fn build_overtraining(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let patience_train = p.count("patience_train").unwrap_or(5);
    let patience_validation = p.count("patience_validation").unwrap_or(10);
    let delta = p.positive("delta", true).unwrap_or(0.01);
    let train_metric = p.string("train_metric").unwrap_or("loss").to_string();
    let validation_metric = p.string("validation_metric").unwrap_or("eval_loss").to_string();
    if patience_train == 0 {
        p.error("patience_train", "must be at least 1");
    }
    if patience_validation == 0 {
        p.error("patience_validation", "must be at least 1");
    }
    Some(Box::new(Overtraining {
        train_metric,
        validation_metric,
        patience_train,
        patience_validation,
        delta,
    }))
}

fn advance(best: &mut Option<f64>, wait: &mut u64, value: Option<f64>, delta: f64) {
    let Some(v) = value.filter(|v| v.is_finite()) else { return };
    match best {
        Some(b) if *b - v <= delta => *wait += 1,
        _ => {
            *best = Some(v);
            *wait = 0;
        }
    }
}

impl Detector for Overtraining {
    /// Overtraining is about the validation loss no longer improving.
    fn watched_metric(&self) -> Option<(&str, crate::history::metric_series::Direction)> {
        Some((&self.validation_metric, crate::history::metric_series::Direction::Min))
    }

    /// A finding of the training half (it carries `trainWait`) is about the training loss.
    fn judged_metrics(
        &self,
        finding: &std::collections::BTreeMap<String, f64>,
    ) -> Vec<(String, crate::history::metric_series::Direction)> {
        let metric =
            if finding.contains_key("trainWait") { &self.train_metric } else { &self.validation_metric };
        vec![(metric.clone(), crate::history::metric_series::Direction::Min)]
    }

    // Judges the samples only.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn observe(&self, state: &mut DetectorState, series: &JobSeries, sample: &ProgressSample) {
        if !matches!(state, DetectorState::Overtraining(_)) {
            *state = DetectorState::Overtraining(OvertrainingState::default());
        }
        let DetectorState::Overtraining(s) = state else { return };
        // Only logged values count: the validation loss is re-sent unchanged between evaluations.
        let fresh = |name: &str| sample.metric(name).filter(|_| series.logged(name));
        advance(&mut s.best_train, &mut s.train_wait, fresh(&self.train_metric), self.delta);
        advance(&mut s.best_validation, &mut s.validation_wait, fresh(&self.validation_metric), self.delta);
    }

    fn check(&self, state: &DetectorState, _view: &JobView<'_>) -> Option<Finding> {
        let DetectorState::Overtraining(s) = state else { return None };
        if s.validation_wait >= self.patience_validation {
            return Some(
                Finding::new(format!(
                    "{} has not improved by more than {} for {} (best {})",
                    self.validation_metric,
                    fmt_num(self.delta),
                    crate::time::plural(s.validation_wait, "sample", "samples"),
                    fmt_num(s.best_validation.unwrap_or(f64::NAN))
                ))
                .value("validationWait", s.validation_wait as f64),
            );
        }
        (s.train_wait >= self.patience_train).then(|| {
            Finding::new(format!(
                "{} has not improved by more than {} for {} (best {})",
                self.train_metric,
                fmt_num(self.delta),
                crate::time::plural(s.train_wait, "sample", "samples"),
                fmt_num(s.best_train.unwrap_or(f64::NAN))
            ))
            .value("trainWait", s.train_wait as f64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use serde_json::json;

    #[test]
    fn loss_not_decreasing_compares_num_steps_back() {
        let d = detector("loss_not_decreasing", json!({"num_steps": 3, "diff_percent": 1.0}));
        let mut job = Job::new();
        // 2.0 → 1.9 → 1.8 → 1.7: 15% over 3 samples.
        let last = job.feed(d.as_ref(), "loss", 60, &[2.0, 1.9, 1.8, 1.7]);
        assert!(job.check(d.as_ref(), last).is_none());
        // Then 1.7, 1.7, 1.69: 0.59% over 3 samples.
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[2.0, 1.9, 1.8, 1.7, 1.701, 1.699, 1.69]);
        let f = job.check(d.as_ref(), last).unwrap();
        assert!(f.summary.contains("over the last 3 samples (1.7 → 1.69), less than 1%"), "{}", f.summary);
    }

    #[test]
    fn loss_not_decreasing_fires_on_a_rise_above_the_best() {
        let d = detector("loss_not_decreasing", json!({}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 1.06]);
        assert!(job.check(d.as_ref(), last).unwrap().summary.contains("6% above its best 1"));
    }

    #[test]
    fn loss_not_decreasing_eval_mode_uses_eval_loss() {
        let d = detector("loss_not_decreasing", json!({"mode": "EVAL", "num_steps": 1}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "eval_loss", 60, &[1.0, 1.0005]);
        let summary = job.check(d.as_ref(), last).unwrap().summary;
        assert!(summary.starts_with("eval_loss decreased by -0.05%"), "{summary}");
        assert_eq!(
            errors("loss_not_decreasing", json!({"mode": "BOTH", "num_steps": 64})),
            vec![
                "with.mode: expected GLOBAL, TRAIN or EVAL, got BOTH",
                "with.num_steps: must be between 1 and 63"
            ]
        );
    }

    #[test]
    fn overtraining_counts_samples_without_validation_improvement() {
        let d = detector("overtraining", json!({"patience_validation": 3, "patience_train": 100}));
        let mut job = Job::new();
        for (i, (train, val)) in
            [(2.0, 2.1), (1.8, 2.0), (1.6, 2.001), (1.4, 1.995), (1.2, 2.05)].iter().enumerate()
        {
            job.sample(d.as_ref(), i as i64 * 60, &[("loss", *train), ("eval_loss", *val)], None, None);
        }
        let f = job.check(d.as_ref(), 240).unwrap();
        assert_eq!(f.summary, "eval_loss has not improved by more than 0.01 for 3 samples (best 2)");
    }

    #[test]
    fn overtraining_counts_evaluations_not_reports() {
        // eval_loss is re-sent unchanged between evaluations; only a new value is a new evaluation.
        let d = detector("overtraining", json!({"patience_validation": 2, "patience_train": 1000}));
        let mut job = Job::new();
        let mut minute = 0;
        for (train, val) in [(2.0, 2.1), (1.9, 2.0), (1.8, 2.0), (1.7, 2.0), (1.6, 2.0), (1.5, 2.005)] {
            job.sample(d.as_ref(), minute * 60, &[("loss", train), ("eval_loss", val)], None, None);
            minute += 1;
        }
        assert!(job.check(d.as_ref(), minute * 60).is_none(), "one evaluation without improvement so far");
        job.sample(d.as_ref(), minute * 60, &[("loss", 1.4), ("eval_loss", 2.01)], None, None);
        assert!(job.check(d.as_ref(), minute * 60).is_some());
    }

    #[test]
    fn overtraining_train_patience() {
        let d = detector("overtraining", json!({"patience_train": 2}));
        let mut job = Job::new();
        let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 0.995, 0.999]);
        assert!(job.check(d.as_ref(), last).unwrap().summary.starts_with("loss has not improved"));
    }
}
