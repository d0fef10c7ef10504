//! `non_finite`: NaN or ±Inf in a metric fires at once (Lightning's `check_finite`, Keras' TerminateOnNaN).
//!
//! The upstream reporter sends `"nan"`/`"inf"` strings and RHOAI sanitizes them to `null`; both arrive as
//! non-finite values. The rule fires while the metric's latest observation is non-finite, so it resolves by
//! itself if training recovers (for example after a skipped bad batch).
//!
//! **What recovers is not a NaN run** (`logs: 3`, the catalog's way): the rule then fires only once the
//! metric's last 3 *logged* values were all non-finite (by the job's log clock, `JobSeries::logged`: a
//! heartbeat re-sending the cached NaN between logging steps is not one), so a skipped fp16 step whose next
//! log is finite again never fires it, however long the job waits between logs — where a `for: 3m` fires on
//! a job that logs every 50 minutes. `degenerate: true` (the default with `logs`) also counts a logged value
//! of exactly 0.0 while `grad_norm` is NaN or infinite: a loss that sits at 0.0 with non-finite gradients
//! has stopped computing anything (an overflowed fp16 run whose loss was zeroed), however finite it reads.
//!
//! Examples: `uses: non_finite`, `with: {metric: loss}` — or `metric: "*"` for any metric;
//! `with: {metric: loss, logs: 3}`.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;
use crate::history::job_series::JobSeries;
use crate::input::sample::ProgressSample;

use crate::history::metric_series::MetricSeries;
use crate::time::fmt_num;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "non_finite",
    summary: "The latest observation of the metric is NaN or ±Inf.",
    params: &[
        ParamDoc {
            name: "metric",
            ty: "string",
            default: "required",
            doc: "Canonical metric name, or \"*\" for any metric.",
        },
        ParamDoc {
            name: "logs",
            ty: "values",
            default: "1",
            doc: "Fire once this many consecutive logged values were non-finite (a named metric).",
        },
        ParamDoc {
            name: "degenerate",
            ty: "bool",
            default: "true with logs",
            doc: "Also count a logged 0.0 while grad_norm is NaN/Inf.",
        },
    ],
    example: r#"{"metric": "loss", "logs": 3}"#,
    build,
};

#[derive(Debug, Clone)]
pub(crate) struct NonFinite {
    /// `None` watches every metric.
    pub metric: Option<String>,
    /// Consecutive non-finite logged values needed (1: the latest observation decides, as before).
    pub logs: u64,
    /// A logged 0.0 with a non-finite `grad_norm` counts as non-finite.
    pub degenerate: bool,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let metric = p.required_string("metric");
    let logs = p.count("logs");
    let degenerate = p.bool("degenerate");
    if logs == Some(0) {
        p.error("logs", "must be at least 1");
    }
    let metric = metric?;
    if metric == "*" && (logs.is_some() || degenerate.is_some()) {
        p.error(if logs.is_some() { "logs" } else { "degenerate" }, "needs a named metric, not \"*\"");
    }
    Some(Box::new(NonFinite {
        metric: (metric != "*").then(|| metric.to_string()),
        logs: logs.unwrap_or(1).max(1),
        degenerate: degenerate.unwrap_or(logs.is_some()),
    }))
}

impl NonFinite {
    /// Whether the rule counts logged values (else the latest observation decides).
    fn counts_logs(&self) -> bool {
        self.logs > 1 || self.degenerate
    }
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

    fn observe(&self, state: &mut DetectorState, series: &JobSeries, sample: &ProgressSample) {
        let Some(name) = self.metric.as_deref().filter(|_| self.counts_logs()) else { return };
        let Some(value) = sample.metric(name) else { return };
        if !series.logged(name) {
            return;
        }
        let grad_bad = series
            .metric("grad_norm")
            .and_then(MetricSeries::latest_observation)
            .is_some_and(|g| !g.is_finite());
        let bad = !value.is_finite() || (self.degenerate && value == 0.0 && grad_bad);
        let streak = match state {
            DetectorState::Streak(n) => *n,
            _ => 0,
        };
        *state = DetectorState::Streak(if bad { streak + 1 } else { 0 });
    }

    fn check(&self, state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        if self.counts_logs() {
            let DetectorState::Streak(n) = state else { return None };
            let name = self.metric.as_deref()?;
            let value = view.series.metric(name)?.latest_observation()?;
            if *n < self.logs {
                return None;
            }
            let what = if value.is_finite() {
                format!("{name} is {} with grad_norm non-finite", fmt_num(value))
            } else {
                format!("{name} is {}", fmt_num(value))
            };
            return Some(
                Finding::new(format!(
                    "{what} at the last {}",
                    crate::time::plural(*n, "logged value", "logged values")
                ))
                .value(name, value)
                .value("logs", *n as f64),
            );
        }
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
    use super::super::testkit::{Job, detector, errors};
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
    fn a_skipped_step_that_recovers_never_fires_and_a_nan_that_stays_does() {
        let d = detector("non_finite", json!({"metric": "loss", "logs": 3}));
        let mut job = Job::new();
        // One NaN log (an fp16 skipped step), re-sent by heartbeats for 50 minutes, then finite again.
        job.sample_at_step(d.as_ref(), 0, &[("loss", 2.0), ("grad_norm", 1.0)], 10.0, 1000.0);
        job.sample_at_step(d.as_ref(), 3000, &[("loss", 1.9), ("grad_norm", 0.9)], 20.0, 1000.0);
        job.sample_at_step(
            d.as_ref(),
            6000,
            &[("loss", f64::NAN), ("grad_norm", f64::INFINITY)],
            30.0,
            1000.0,
        );
        for beat in 1..=10 {
            job.sample_at_step(
                d.as_ref(),
                6000 + beat * 5,
                &[("loss", f64::NAN), ("grad_norm", f64::INFINITY)],
                30.0 + f64::from(beat as u8) * 0.01,
                1000.0,
            );
            assert!(job.check(d.as_ref(), 6000 + beat * 5).is_none(), "heartbeats are not logs");
        }
        job.sample_at_step(d.as_ref(), 9000, &[("loss", 1.8), ("grad_norm", 0.8)], 40.0, 1000.0);
        assert!(job.check(d.as_ref(), 9000).is_none());
        // NaN from then on, logged every 50 minutes with the same bits each time: the log clock counts the
        // first, then the stuck value once 1.5 intervals passed (18000), then every interval (21000).
        let mut fired = None;
        for (i, t) in [12000, 15000, 18000, 21000, 24000].into_iter().enumerate() {
            job.sample_at_step(
                d.as_ref(),
                t,
                &[("loss", f64::NAN), ("grad_norm", f64::NAN)],
                50.0 + 10.0 * i as f64,
                1000.0,
            );
            if fired.is_none() {
                fired = job.check(d.as_ref(), t).map(|f| (t, f.summary));
            }
        }
        assert_eq!(fired, Some((21000, "loss is NaN at the last 3 logged values".to_string())));
    }

    #[test]
    fn a_loss_at_exactly_zero_with_nan_gradients_is_degenerate() {
        let d = detector("non_finite", json!({"metric": "loss", "logs": 3}));
        let mut job = Job::new();
        job.sample_at_step(d.as_ref(), 0, &[("loss", 0.5), ("grad_norm", 1.0)], 10.0, 1000.0);
        job.sample_at_step(d.as_ref(), 60, &[("loss", 0.4), ("grad_norm", 0.9)], 20.0, 1000.0);
        let mut fired = None;
        for i in 2..=8 {
            job.sample_at_step(
                d.as_ref(),
                i * 60,
                &[("loss", 0.0), ("grad_norm", f64::NAN)],
                10.0 + 10.0 * i as f64,
                1000.0,
            );
            if fired.is_none() {
                fired = job.check(d.as_ref(), i * 60).map(|f| (i * 60, f.summary));
            }
        }
        // Logged every minute: 0.0 at 2m (a change), again at 4m (1.5 minutes on), 5m: the third.
        let expected = "loss is 0 with grad_norm non-finite at the last 3 logged values".to_string();
        assert_eq!(fired, Some((300, expected)));
        // A loss at exactly 0.0 with finite gradients is a converged (or leaking) run, not a non-finite one.
        let mut job = Job::new();
        for i in 0..6 {
            job.sample_at_step(
                d.as_ref(),
                i * 60,
                &[("loss", 0.0), ("grad_norm", 0.001 * (i + 1) as f64)],
                10.0 * (i + 1) as f64,
                1000.0,
            );
        }
        assert!(job.check(d.as_ref(), 300).is_none());
    }

    #[test]
    fn property_a_strictly_improving_finite_curve_never_fires() {
        for with in [json!({"metric": "loss"}), json!({"metric": "loss", "logs": 3}), json!({"metric": "*"})]
        {
            let d = detector("non_finite", with.clone());
            let mut job = Job::new();
            for i in 1..=500i64 {
                // Down to 1e-300 (never 0): tiny values are finite, and so is a grad_norm that spikes.
                let loss = 10f64.powf(-(i as f64) * 0.6);
                job.sample(d.as_ref(), i * 60, &[("loss", loss), ("grad_norm", 1e300)], None, None);
                assert!(job.check(d.as_ref(), i * 60).is_none(), "{with} at {i}");
            }
        }
    }

    #[test]
    fn logs_need_a_named_metric() {
        assert_eq!(
            errors("non_finite", json!({"metric": "*", "logs": 3})),
            vec!["with.logs: needs a named metric, not \"*\""]
        );
        assert_eq!(
            errors("non_finite", json!({"metric": "loss", "logs": 0})),
            vec!["with.logs: must be at least 1"]
        );
    }

    #[test]
    fn a_metric_that_was_only_ever_nan_fires() {
        let d = detector("non_finite", json!({"metric": "loss"}));
        let mut job = Job::new();
        job.sample(d.as_ref(), 0, &[("loss", f64::NEG_INFINITY)], None, None);
        assert!(job.check(d.as_ref(), 0).is_some());
    }
}
