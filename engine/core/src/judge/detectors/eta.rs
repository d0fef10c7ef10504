//! `eta_after` and `eta_exceeds`: the job will not finish in time.
//!
//! The estimated end is the latest sample's `lastUpdatedTime` plus its `estimatedRemainingSeconds` (what
//! both Kubeflow reporters compute from the step rate). `eta_after` fires when that end is later than a
//! fixed deadline; `eta_exceeds` when it is more than `duration` away from now. No anchor offers this: it
//! is what lets a team learn on Friday evening that the run will not be ready for Monday's review.
//!
//! Examples: `uses: eta_after`, `with: {deadline: "2026-12-01T09:00:00+01:00"}`;
//! `uses: eta_exceeds`, `with: {duration: 12h}`.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::time::Timestamp;
use crate::time::{fmt_secs, seconds};
use crate::units::duration::PolicyDuration;

pub(super) const INFO_AFTER: DetectorInfo = DetectorInfo {
    name: "eta_after",
    summary: "The estimated end (last sample time + ETA) is later than `deadline`.",
    params: &[ParamDoc {
        name: "deadline",
        ty: "RFC 3339 time",
        default: "required",
        doc: "For example 2026-12-01T09:00:00+01:00.",
    }],
    example: r#"{"deadline": "2026-12-01T09:00:00+01:00"}"#,
    build: build_after,
};

pub(super) const INFO_EXCEEDS: DetectorInfo = DetectorInfo {
    name: "eta_exceeds",
    summary: "The estimated end is more than `duration` from now.",
    params: &[ParamDoc {
        name: "duration",
        ty: "duration",
        default: "required",
        doc: "Longest acceptable remaining time, e.g. 12h.",
    }],
    example: r#"{"duration": "12h"}"#,
    build: build_exceeds,
};

#[derive(Debug, Clone)]
pub(crate) struct EtaAfter {
    pub deadline: Timestamp,
}

#[derive(Debug, Clone)]
pub(crate) struct EtaExceeds {
    pub duration: PolicyDuration,
}

/// Parses an RFC 3339 deadline, with a message that says what is expected.
pub(crate) fn parse_deadline(s: &str) -> Result<Timestamp, String> {
    // jiff's parse errors describe its parser ("failed to parse four digit integer as year"); the user needs
    // the expected form.
    s.parse::<Timestamp>().map_err(|_| {
        format!("{s:?} is not a time: expected RFC 3339 with an offset, such as 2026-12-01T09:00:00+01:00")
    })
}

fn build_after(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let raw = p.required_string("deadline")?;
    match parse_deadline(raw) {
        Ok(deadline) => Some(Box::new(EtaAfter { deadline })),
        Err(e) => {
            p.error("deadline", e);
            None
        }
    }
}

fn build_exceeds(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let had = p.raw("duration").is_some();
    let duration = p.duration("duration");
    if !had {
        p.error("duration", "required");
    }
    Some(Box::new(EtaExceeds { duration: duration? }))
}

impl Detector for EtaAfter {
    // Compares the samples' estimated end with a fixed deadline.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        if !view.is_running() {
            return None;
        }
        let end = view.estimated_end()?;
        (end > self.deadline).then(|| {
            let late = seconds(self.deadline, end);
            Finding::new(format!(
                "estimated end {end} is {} after the deadline {}",
                fmt_secs(late),
                self.deadline
            ))
            .value("estimatedEnd", end.as_second() as f64)
            .value("lateSeconds", late)
        })
    }
}

impl Detector for EtaExceeds {
    // The estimated end is fixed between samples, so the remaining time shrinks one second per second: once
    // within the limit it stays within; over it, it gets within at `end - duration` (`wake_at`).
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn wake_at(&self, state: &DetectorState, view: &JobView<'_>) -> Option<Timestamp> {
        self.check(state, view)?;
        crate::time::add_seconds(view.estimated_end()?, -self.duration.as_secs_f64())
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        if !view.is_running() {
            return None;
        }
        let remaining = seconds(view.now, view.estimated_end()?);
        (remaining > self.duration.as_secs_f64()).then(|| {
            Finding::new(format!(
                "estimated to need {} more, over the limit of {}",
                fmt_secs(remaining),
                self.duration
            ))
            .value("remainingSeconds", remaining)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use serde_json::json;

    #[test]
    fn eta_after_compares_last_sample_time_plus_eta_with_the_deadline() {
        // Deadline: 2026-01-01T10:00:00Z = t(36000).
        let d = detector("eta_after", json!({"deadline": "2026-01-01T11:00:00+01:00"}));
        let mut job = Job::new();
        job.sample(d.as_ref(), 0, &[], Some(10.0), Some(36000.0));
        assert!(job.check(d.as_ref(), 0).is_none(), "ends exactly at the deadline");
        job.sample(d.as_ref(), 600, &[], Some(11.0), Some(36000.0));
        let f = job.check(d.as_ref(), 600).unwrap();
        assert!(f.summary.contains("is 10m after the deadline"), "{}", f.summary);
    }

    #[test]
    fn eta_exceeds_measures_from_now() {
        let d = detector("eta_exceeds", json!({"duration": "2h"}));
        let mut job = Job::new();
        job.sample(d.as_ref(), 0, &[], Some(10.0), Some(3.0 * 3600.0));
        assert!(job.check(d.as_ref(), 0).is_some());
        // Same report, an hour later: 2h remain, not more than 2h; the timer is set for that instant.
        assert!(job.check(d.as_ref(), 3599).is_some());
        assert!(job.check(d.as_ref(), 3600).is_none());
        assert_eq!(job.wake_at(d.as_ref(), 0), Some(super::super::testkit::t(3600)));
        assert_eq!(job.wake_at(d.as_ref(), 3600), None, "within the limit, it stays within");
    }

    #[test]
    fn no_eta_no_verdict() {
        let d = detector("eta_exceeds", json!({"duration": "1h"}));
        let mut job = Job::new();
        job.sample(d.as_ref(), 0, &[("loss", 1.0)], Some(10.0), None);
        assert!(job.check(d.as_ref(), 0).is_none());
    }

    #[test]
    fn bad_deadlines_say_what_is_expected() {
        let e = errors("eta_after", json!({"deadline": "monday 9am"}));
        assert_eq!(
            e,
            vec![
                "with.deadline: \"monday 9am\" is not a time: expected RFC 3339 with an offset, such as 2026-12-01T09:00:00+01:00"
            ]
        );
        assert_eq!(errors("eta_exceeds", json!({})), vec!["with.duration: required"]);
    }
}
