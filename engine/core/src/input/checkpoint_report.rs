//! A training checkpoint as a job reports it (sdk/python/PROTOCOL.md §3–4): the pair of metrics
//! `checkpoint_step` (the step the checkpoint holds) and `checkpoint_request_id` (the request it answered,
//! 0 for one nobody requested), read from the same progress report.

use crate::input::sample::Metric;

/// The metric that carries the step of the job's last checkpoint.
pub const CHECKPOINT_STEP_METRIC: &str = "checkpoint_step";
/// The metric that carries the id of the request the job's last checkpoint answered (0: none).
pub const CHECKPOINT_REQUEST_ID_METRIC: &str = "checkpoint_request_id";

/// The largest integer a float64 holds exactly (2^53 − 1): the largest request id and step.
pub const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// The checkpoint one progress report names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReportedCheckpoint {
    /// The training step the checkpoint holds.
    pub step: u64,
    /// The request it answered; 0 for the job's own checkpoint.
    pub request_id: u64,
}

impl ReportedCheckpoint {
    /// The pair in `metrics`, when both are present and each is a finite, integral number in
    /// `0..=2^53−1` (the job sends decimal strings; `"7.0"` reads as 7). Anything else: `None`, as if the
    /// report named no checkpoint.
    pub fn of(metrics: &[Metric]) -> Option<ReportedCheckpoint> {
        let find = |name: &str| metrics.iter().find(|m| m.name == name).map(|m| m.value);
        let step = exact_integer(find(CHECKPOINT_STEP_METRIC)?)?;
        let request_id = exact_integer(find(CHECKPOINT_REQUEST_ID_METRIC)?)?;
        Some(ReportedCheckpoint { step, request_id })
    }
}

/// The job's last checkpoint as trainwarden saw it: the pair, and the time of the first report that named it
/// (a report repeats it until the next checkpoint: the metrics are sticky).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedCheckpoint {
    /// The step and the request it answered.
    pub reported: ReportedCheckpoint,
    /// When it was first reported.
    pub at: crate::time::Timestamp,
}

/// `v` as an integer when it is one a float64 holds exactly (finite, ≥ 0, integral, ≤ 2^53−1).
pub fn exact_integer(v: f64) -> Option<u64> {
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= MAX_EXACT_INTEGER as f64).then_some(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(pairs: &[(&'static str, f64)]) -> Vec<Metric> {
        pairs.iter().map(|(n, v)| Metric { name: (*n).into(), value: *v }).collect()
    }

    #[test]
    fn both_metrics_make_the_pair() {
        let m = metrics(&[
            ("loss", 1.2),
            ("checkpoint_step", 4200.0),
            ("checkpoint_request_id", 1_767_225_600_123.0),
        ]);
        assert_eq!(
            ReportedCheckpoint::of(&m),
            Some(ReportedCheckpoint { step: 4200, request_id: 1_767_225_600_123 })
        );
        let own = metrics(&[("checkpoint_step", 10.0), ("checkpoint_request_id", 0.0)]);
        assert_eq!(ReportedCheckpoint::of(&own), Some(ReportedCheckpoint { step: 10, request_id: 0 }));
    }

    #[test]
    fn one_metric_alone_or_a_value_that_is_no_exact_integer_names_no_checkpoint() {
        assert_eq!(ReportedCheckpoint::of(&metrics(&[("checkpoint_step", 10.0)])), None);
        assert_eq!(ReportedCheckpoint::of(&metrics(&[("checkpoint_request_id", 3.0)])), None);
        for bad in [-1.0, 1.5, f64::NAN, f64::INFINITY, 9_007_199_254_740_992.0] {
            let m = metrics(&[("checkpoint_step", bad), ("checkpoint_request_id", 3.0)]);
            assert_eq!(ReportedCheckpoint::of(&m), None, "step {bad}");
            let m = metrics(&[("checkpoint_step", 3.0), ("checkpoint_request_id", bad)]);
            assert_eq!(ReportedCheckpoint::of(&m), None, "id {bad}");
        }
        assert_eq!(exact_integer(MAX_EXACT_INTEGER as f64), Some(MAX_EXACT_INTEGER));
    }
}
