//! `hang`: no step advanced for a duration while every GPU stayed busy.
//!
//! A job hung in a collective (NCCL) keeps every GPU at ~100 % utilization while no step completes: a
//! utilization-only culler sees a busy job, and `stalled` alone cannot tell it from a very slow step. `hang`
//! asks both: the job's progress has not moved for `after` (no report that differs from the one before, the
//! clock starting at the job's last (re)start like `stalled`), and every GPU stayed at or above `busyAbove`
//! in every reading over that time, readings covering it with no gap longer than 5 minutes.
//!
//! With `stalled` and `gpu_idle` a policy tells the three cases apart: *hung* (no progress, GPUs busy),
//! *idle* (no progress, GPUs idle) and *starved* (progress, GPUs mostly idle).
//!
//! Example: `uses: hang`, `with: {after: 20m, busyAbove: 80}`.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;
use crate::time::{Timestamp, add_seconds, fmt_num, fmt_secs, seconds};
use crate::units::duration::PolicyDuration;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "hang",
    summary: "No step advanced for `after` while every GPU stayed busy (a collective hang).",
    params: &[
        ParamDoc { name: "after", ty: "duration", default: "20m", doc: "Time without progress that counts." },
        ParamDoc {
            name: "busyAbove",
            ty: "percent",
            default: "80",
            doc: "Utilization (%) every GPU must keep, in every reading, for the job to count as hung, not idle.",
        },
        ParamDoc {
            name: "requireFirstSample",
            ty: "bool",
            default: "true",
            doc: "Only jobs that reported progress at least once can hang (set false to catch a hang in NCCL initialisation).",
        },
    ],
    example: r#"{"after": "20m", "busyAbove": 80}"#,
    build,
};

#[derive(Debug, Clone)]
pub(crate) struct Hang {
    pub after: PolicyDuration,
    pub busy_above: f64,
    pub require_first_sample: bool,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let after = p.duration("after").unwrap_or(PolicyDuration::from_secs(1200));
    if after == PolicyDuration::from_secs(0) {
        p.error("after", "must be longer than 0s");
    }
    let busy_above = p.f64("busyAbove").unwrap_or(80.0);
    if !(0.0..=100.0).contains(&busy_above) || busy_above == 0.0 {
        p.error(
            "busyAbove",
            format!("must be a utilization above 0 and at most 100 (percent), got {busy_above}"),
        );
    }
    let require_first_sample = p.bool("requireFirstSample").unwrap_or(true);
    Some(Box::new(Hang { after, busy_above, require_first_sample }))
}

impl Hang {
    /// Since when the job has neither progressed nor let a GPU rest, if it is running.
    fn hung_since(&self, view: &JobView<'_>) -> Option<(Timestamp, f64)> {
        if !view.is_running() || (self.require_first_sample && view.series.last_sample_at.is_none()) {
            return None;
        }
        let busy = self.busy_above as f32;
        let run = view.gpu.run_since(view.now, view.last_activity(), |s| s.min_util >= busy)?;
        Some((run.since, run.min_util))
    }
}

impl Detector for Hang {
    // New readings are samples; the latest going stale is announced by `wake_at`.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        let (since, min_util) = self.hung_since(view)?;
        let hung = seconds(since, view.now);
        (hung >= self.after.as_secs_f64()).then(|| {
            Finding::new(format!(
                "no progress for {} while every GPU stayed at or above {}% (lowest {}%; limit {})",
                fmt_secs(seconds(view.last_activity(), view.now)),
                fmt_num(self.busy_above),
                fmt_num(min_util),
                self.after
            ))
            .value("secondsHung", hung)
            .value("minUtil", min_util)
            .stall()
        })
    }

    fn wake_at(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Timestamp> {
        let (since, _) = self.hung_since(view)?;
        let due = add_seconds(since, self.after.as_secs_f64())?;
        let stale = view.gpu.current_until()?;
        Some(if due > view.now { due.min(stale) } else { stale })
    }

    fn reads_gpus(&self) -> bool {
        true
    }

    fn windows(&self) -> Vec<(&'static str, PolicyDuration)> {
        vec![("after", self.after)]
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use serde_json::json;

    #[test]
    fn busy_gpus_and_no_progress_is_a_hang() {
        let d = detector("hang", json!({"after": "20m"}));
        let mut job = Job::new();
        job.sample(d.as_ref(), 0, &[("loss", 1.0)], Some(10.0), None);
        for m in 0..=25 {
            job.gpu(m * 60, &[100.0, 99.0]);
        }
        assert!(job.check(d.as_ref(), 19 * 60).is_none());
        let f = job.check(d.as_ref(), 20 * 60).expect("20 minutes hung");
        assert_eq!(
            f.summary,
            "no progress for 20m while every GPU stayed at or above 80% (lowest 99%; limit 20m)"
        );
        assert_eq!(f.kind, super::super::FindingKind::Stall);
    }

    #[test]
    fn progress_or_an_idle_gpu_is_not_a_hang() {
        let d = detector("hang", json!({"after": "10m"}));
        let mut job = Job::new();
        job.sample(d.as_ref(), 0, &[("loss", 1.0)], Some(10.0), None);
        for m in 0..=15 {
            job.gpu(m * 60, &[100.0, if m == 12 { 5.0 } else { 100.0 }]);
        }
        assert!(job.check(d.as_ref(), 15 * 60).is_none(), "a GPU rested at 12m: idle, not hung");
        for m in 16..=23 {
            job.gpu(m * 60, &[100.0, 100.0]);
        }
        assert!(job.check(d.as_ref(), 23 * 60).is_some(), "busy since 13m");
        job.sample(d.as_ref(), 23 * 60, &[("loss", 0.9)], Some(11.0), None);
        assert!(job.check(d.as_ref(), 23 * 60).is_none(), "a step advanced");
    }

    #[test]
    fn without_gpu_readings_or_a_first_report_it_does_not_fire() {
        let d = detector("hang", json!({"after": "10m"}));
        let mut job = Job::new();
        for m in 0..=15 {
            job.gpu(m * 60, &[100.0]);
        }
        assert!(job.check(d.as_ref(), 15 * 60).is_none(), "never reported: not instrumented");
        let d = detector("hang", json!({"after": "10m", "requireFirstSample": false}));
        assert!(job.check(d.as_ref(), 15 * 60).is_some(), "hung in NCCL initialisation");
        let mut silent = Job::new();
        silent.sample(d.as_ref(), 0, &[("loss", 1.0)], None, None);
        assert!(silent.check(d.as_ref(), 3600).is_none(), "no GPU signal: stalled's business, not hang's");
    }

    #[test]
    fn parameters_are_checked() {
        assert_eq!(
            errors("hang", json!({"busyAbove": 0, "after": "0s"})),
            vec![
                "with.after: must be longer than 0s",
                "with.busyAbove: must be a utilization above 0 and at most 100 (percent), got 0"
            ]
        );
    }
}
