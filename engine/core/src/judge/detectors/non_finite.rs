//! `non_finite`: NaN or ±Inf in a metric fires at once (Lightning's `check_finite`, Keras' TerminateOnNaN).
//!
//! The upstream reporter sends `"nan"`/`"inf"` strings and RHOAI sanitizes them to `null`; both arrive as
//! non-finite values. The rule fires while the metric's latest observation is non-finite, so it resolves by
//! itself if training recovers (for example after a skipped bad batch).
//!
//! Example: `uses: non_finite`, `with: {metric: loss}` — or `metric: "*"` for any metric.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::history::metric_series::MetricSeries;
use crate::time::fmt_num;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "non_finite",
    summary: "The latest observation of the metric is NaN or ±Inf.",
    params: &[ParamDoc {
        name: "metric",
        ty: "string",
        default: "required",
        doc: "Canonical metric name, or \"*\" for any metric.",
    }],
    example: r#"{"metric": "loss"}"#,
    build,
};

#[derive(Debug, Clone)]
pub(crate) struct NonFinite {
    /// `None` watches every metric.
    pub metric: Option<String>,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let metric = p.required_string("metric")?;
    Some(Box::new(NonFinite { metric: (metric != "*").then(|| metric.to_string()) }))
}

fn latest_non_finite(series: &MetricSeries) -> Option<f64> {
    let (bad_at, bad) = series.last_non_finite()?;
    match series.last() {
        Some((good_at, _)) if good_at > bad_at => None,
        _ => Some(bad),
    }
}

impl Detector for NonFinite {
    // Judges the samples only.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        let hit = match &self.metric {
            Some(name) => view.series.metric(name).and_then(latest_non_finite).map(|v| (name.as_str(), v)),
            None => view
                .series
                .metric_names()
                .find_map(|n| view.series.metric(n).and_then(latest_non_finite).map(|v| (n, v))),
        };
        let (name, value) = hit?;
        Some(Finding::new(format!("{name} is {}", fmt_num(value))).value(name, value))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector};
    use serde_json::json;

    #[test]
    fn fires_at_once_and_resolves_when_values_are_finite_again() {
        let d = detector("non_finite", json!({"metric": "loss"}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[2.0, 1.9]);
        assert!(job.check(d.as_ref(), 60).is_none());
        job.sample(d.as_ref(), 120, &[("loss", f64::NAN)], None, None);
        assert_eq!(job.check(d.as_ref(), 120).unwrap().summary, "loss is NaN");
        job.sample(d.as_ref(), 180, &[("loss", 1.8)], None, None);
        assert!(job.check(d.as_ref(), 180).is_none());
    }

    #[test]
    fn star_watches_every_metric() {
        let d = detector("non_finite", json!({"metric": "*"}));
        let mut job = Job::new();
        job.sample(d.as_ref(), 0, &[("loss", 1.0), ("grad_norm", f64::INFINITY)], None, None);
        assert_eq!(job.check(d.as_ref(), 0).unwrap().summary, "grad_norm is inf");
    }

    #[test]
    fn a_metric_that_was_only_ever_nan_fires() {
        let d = detector("non_finite", json!({"metric": "loss"}));
        let mut job = Job::new();
        job.sample(d.as_ref(), 0, &[("loss", f64::NEG_INFINITY)], None, None);
        assert!(job.check(d.as_ref(), 0).is_some());
    }
}
