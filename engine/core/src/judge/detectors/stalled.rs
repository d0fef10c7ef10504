//! `stalled`: no new progress sample for `after` while the job runs.
//!
//! Time-driven: it fires with no new sample arriving, because the engine re-evaluates jobs on a timer
//! (replay does the same on the stream's clock). The clock starts at the latest sample or the job's last
//! (re)start, whichever is later, so a resumed job gets a fresh grace period. By default a job must have
//! reported at least once (`requireFirstSample: true`), so jobs without progress instrumentation are not
//! mistaken for hung ones; set it to false to also catch jobs that hang before their first report (for
//! example in NCCL initialisation).
//!
//! `stalled_training` is SageMaker Debugger's StalledTrainingRule with its parameter name and default:
//! `threshold` in seconds (1800).
//!
//! Example: `uses: stalled`, `with: {after: 30m}`.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::time::Timestamp;
use crate::time::{add_seconds, fmt_secs, seconds};
use crate::units::duration::PolicyDuration;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "stalled",
    summary: "No new progress sample for `after` while the job is running.",
    params: &[
        ParamDoc { name: "after", ty: "duration", default: "30m", doc: "Silence that counts as a stall." },
        ParamDoc {
            name: "requireFirstSample",
            ty: "bool",
            default: "true",
            doc: "Only jobs that reported at least once can stall.",
        },
    ],
    example: r#"{"after": "30m"}"#,
    build,
};

pub(super) const INFO_STALLED_TRAINING: DetectorInfo = DetectorInfo {
    name: "stalled_training",
    summary: "SageMaker Debugger StalledTrainingRule: no new sample for `threshold` seconds.",
    params: &[ParamDoc {
        name: "threshold",
        ty: "seconds",
        default: "1800",
        doc: "Seconds without a new sample (SageMaker default 1800).",
    }],
    example: r#"{"threshold": 1800}"#,
    build: build_stalled_training,
};

#[derive(Debug, Clone)]
pub(crate) struct Stalled {
    pub after: PolicyDuration,
    pub require_first_sample: bool,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let after = p.duration("after").unwrap_or(PolicyDuration::from_secs(1800));
    let require_first_sample = match p.raw("requireFirstSample") {
        None => true,
        Some((_, serde_json::Value::Bool(b))) => *b,
        Some((key, v)) => {
            p.error(key, format!("expected true or false, got {v}"));
            true
        }
    };
    if after == PolicyDuration::from_secs(0) {
        p.error("after", "must be longer than 0s");
    }
    Some(Box::new(Stalled { after, require_first_sample }))
}

fn build_stalled_training(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let after = p.seconds_or_duration("threshold").unwrap_or(PolicyDuration::from_secs(1800));
    for unsupported in ["stop_training_on_fire", "training_job_name_prefix"] {
        if p.raw(unsupported).is_some() {
            p.error(unsupported, "not supported here: attach a suspend action to the rule instead");
        }
    }
    Some(Box::new(Stalled { after, require_first_sample: true }))
}

impl Detector for Stalled {
    // Once silent, silent until a sample comes; the moment it turns silent is `wake_at`.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        if !view.is_running() || (self.require_first_sample && view.series.last_sample_at.is_none()) {
            return None;
        }
        let silent = seconds(view.last_activity(), view.now);
        (silent >= self.after.as_secs_f64()).then(|| {
            let what = if view.series.last_sample_at.is_some() {
                "no progress sample"
            } else {
                "no progress sample yet"
            };
            Finding::new(format!("{what} for {} (limit {})", fmt_secs(silent), self.after))
                .value("secondsSilent", silent)
                .stall()
        })
    }

    fn wake_at(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Timestamp> {
        if !view.is_running() || (self.require_first_sample && view.series.last_sample_at.is_none()) {
            return None;
        }
        add_seconds(view.last_activity(), self.after.as_secs_f64())
    }

    fn windows(&self) -> Vec<(&'static str, PolicyDuration)> {
        vec![("after", self.after)]
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors, t};
    use crate::input::sample::JobPhase;
    use serde_json::json;

    #[test]
    fn fires_with_no_new_sample_arriving() {
        let d = detector("stalled", json!({"after": "30m"}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[1.0, 0.9]);
        // Last sample at 60 s; nothing arrives afterwards, only time passes.
        assert!(job.check(d.as_ref(), 60 + 29 * 60).is_none());
        let f = job.check(d.as_ref(), 60 + 30 * 60).expect("30 minutes of silence");
        assert_eq!(f.summary, "no progress sample for 30m (limit 30m)");
        assert_eq!(f.kind, super::super::FindingKind::Stall);
    }

    #[test]
    fn only_while_running() {
        let d = detector("stalled", json!({"after": "10m"}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[1.0]);
        job.snapshot.phase = JobPhase::Suspended;
        assert!(job.check(d.as_ref(), 3600).is_none());
        job.snapshot.phase = JobPhase::Complete;
        assert!(job.check(d.as_ref(), 3600).is_none());
    }

    #[test]
    fn a_resume_restarts_the_clock() {
        let d = detector("stalled", json!({"after": "10m"}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[1.0]);
        job.snapshot.running_since = Some(t(3000));
        assert!(job.check(d.as_ref(), 3000 + 9 * 60).is_none());
        assert!(job.check(d.as_ref(), 3000 + 10 * 60).is_some());
    }

    #[test]
    fn first_sample_requirement() {
        let job = Job::new();
        let d = detector("stalled", json!({"after": "10m"}));
        assert!(job.check(d.as_ref(), 3600).is_none(), "never reported: not ours by default");
        let d = detector("stalled", json!({"after": "10m", "requireFirstSample": false}));
        assert_eq!(job.check(d.as_ref(), 3600).unwrap().summary, "no progress sample yet for 1h (limit 10m)");
    }

    #[test]
    fn stalled_training_takes_seconds_like_sagemaker() {
        let d = detector("stalled_training", json!({}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[1.0]);
        assert!(job.check(d.as_ref(), 1799).is_none());
        assert!(job.check(d.as_ref(), 1800).is_some());
        let d = detector("stalled_training", json!({"threshold": 600}));
        assert!(job.check(d.as_ref(), 600).is_some());
        assert_eq!(
            errors("stalled_training", json!({"stop_training_on_fire": true})),
            vec![
                "with.stop_training_on_fire: not supported here: attach a suspend action to the rule instead"
            ]
        );
    }
}
