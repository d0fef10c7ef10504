//! `diverging`: the metric went the wrong way, badly.
//!
//! Fires when the latest finite value is worse than `threshold` (Lightning's `divergence_threshold`, Optuna's
//! ThresholdPruner) or worse than `factor` × the best value so far (for a minimized metric: above
//! best × factor; for a maximized one: below best ÷ factor). NaN/Inf is `non_finite`'s job and never
//! counts here.
//!
//! Example: `uses: diverging`, `with: {metric: loss, factor: 3, warmup: 20}`.

use super::{Detector, DetectorInfo, DetectorState, DirectionParam, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::history::metric_series::Direction;
use crate::time::fmt_num;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "diverging",
    summary: "The latest value is worse than `threshold`, or worse than `factor` times the best value so far.",
    params: &[
        ParamDoc { name: "metric", ty: "string", default: "required", doc: "Canonical metric name." },
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
            ty: "samples",
            default: "0",
            doc: "Samples of the metric before the rule may fire.",
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
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
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
        p.error("threshold", "give threshold, factor, or both");
    }
    Some(Box::new(Diverging { metric: metric?.to_string(), mode, threshold, factor, warmup }))
}

impl Detector for Diverging {
    fn watched_metric(&self) -> Option<(&str, crate::history::metric_series::Direction)> {
        Some((&self.metric, self.mode.resolve(&self.metric)))
    }

    // Judges the samples only.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
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

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use serde_json::json;

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
            vec!["with.threshold: give threshold, factor, or both"]
        );
        assert_eq!(
            errors("diverging", json!({"metric": "loss", "factor": 0.5})),
            vec!["with.factor: must be > 1, got 0.5"]
        );
    }
}
