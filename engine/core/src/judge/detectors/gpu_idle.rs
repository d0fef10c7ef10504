//! `gpu_idle`: the job's GPUs stayed below a utilization for a duration.
//!
//! Judged on the job's GPU readings (DCGM through Prometheus in the controller, the `gpu` field of a
//! recorded stream offline). `gpus: every` (the default) fires when every GPU stayed below `threshold` in
//! every reading of the last `duration`: the whole job computes nothing. `gpus: any` fires when in every
//! reading at least one GPU was below it (not necessarily the same one: an idle rank, or ranks taking turns
//! waiting on each other). Readings must
//! cover the whole duration with no gap longer than 5 minutes and the latest must be current; a job without
//! GPU readings, or a metrics outage, never fires it (a missing signal is not an idle GPU). Time suspended
//! does not count: the run starts no earlier than the job's last (re)start.
//!
//! Tell *idle* from *starved* with the progress signals: idle GPUs with no step advancing is a job doing
//! nothing; idle GPUs while steps advance is a job starved by its input pipeline.
//!
//! Example: `uses: gpu_idle`, `with: {threshold: 10, duration: 30m}`.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::gpu_series::Run;
use crate::history::job::JobView;
use crate::time::{Timestamp, add_seconds, fmt_num, fmt_secs, seconds};
use crate::units::duration::PolicyDuration;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "gpu_idle",
    summary: "Every GPU (or any one) stayed below a utilization for a duration, by the GPUs' own metrics.",
    params: &[
        ParamDoc {
            name: "threshold",
            ty: "percent",
            default: "10",
            doc: "Utilization (DCGM_FI_DEV_GPU_UTIL, %) below which a GPU counts as idle.",
        },
        ParamDoc {
            name: "duration",
            ty: "duration",
            default: "30m",
            doc: "How long the GPUs must stay idle.",
        },
        ParamDoc {
            name: "gpus",
            ty: "every | any",
            default: "every",
            doc: "every: all GPUs idle (the job computes nothing); any: some GPU idle in each reading (not necessarily the same).",
        },
    ],
    example: r#"{"threshold": 10, "duration": "30m", "gpus": "every"}"#,
    build,
};

/// Which GPUs must be idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Every,
    Any,
}

#[derive(Debug, Clone)]
pub(crate) struct GpuIdle {
    pub threshold: f64,
    pub duration: PolicyDuration,
    pub which: Which,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let threshold = p.f64("threshold").unwrap_or(10.0);
    if !(0.0..=100.0).contains(&threshold) || threshold == 0.0 {
        p.error(
            "threshold",
            format!("must be a utilization above 0 and at most 100 (percent), got {threshold}"),
        );
    }
    let duration = p.duration("duration").unwrap_or(PolicyDuration::from_secs(1800));
    if duration == PolicyDuration::from_secs(0) {
        p.error("duration", "must be longer than 0s");
    }
    let which = match p.string("gpus") {
        None | Some("every") => Which::Every,
        Some("any") => Which::Any,
        Some(other) => {
            p.error("gpus", format!("expected \"every\" or \"any\", got {other:?}"));
            Which::Every
        }
    };
    Some(Box::new(GpuIdle { threshold, duration, which }))
}

impl GpuIdle {
    fn idle_run(&self, view: &JobView<'_>) -> Option<Run> {
        if !view.is_running() {
            return None;
        }
        let threshold = self.threshold as f32;
        let started = view.snapshot.running_since.unwrap_or(view.first_seen);
        match self.which {
            // Every GPU below: the busiest one is.
            Which::Every => view.gpu.run_since(view.now, started, |s| s.max_util < threshold),
            // At least one GPU below in each reading: each reading's idlest one is.
            Which::Any => view.gpu.run_since(view.now, started, |s| s.max_idlest < threshold),
        }
    }
}

impl Detector for GpuIdle {
    // New readings arrive as samples; the one change with time alone (the latest reading going stale) is
    // announced by `wake_at`.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        let run = self.idle_run(view)?;
        let idle = seconds(run.since, view.now);
        if idle < self.duration.as_secs_f64() {
            return None;
        }
        let summary = match self.which {
            Which::Every => format!(
                "every GPU below {}% for {} (at most {}%; limit {})",
                fmt_num(self.threshold),
                fmt_secs(idle),
                fmt_num(run.max_util),
                self.duration
            ),
            Which::Any => format!(
                "some GPU below {}% in every reading for {} (idlest now {} at {}%; limit {})",
                fmt_num(self.threshold),
                fmt_secs(idle),
                view.gpu.idlest.as_deref().unwrap_or("?"),
                fmt_num(view.gpu.current(view.now).map_or(run.min_util, |s| s.min_util)),
                self.duration
            ),
        };
        Some(Finding::new(summary).value("secondsIdle", idle).value("maxUtil", run.max_util).stall())
    }

    fn wake_at(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Timestamp> {
        // Firing turns false when the latest reading stops being current; pending, the next reading decides.
        let run = self.idle_run(view)?;
        let due = add_seconds(run.since, self.duration.as_secs_f64())?;
        let stale = view.gpu.current_until()?;
        Some(if due > view.now { due.min(stale) } else { stale })
    }

    fn reads_gpus(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors, t};
    use crate::input::sample::JobPhase;
    use serde_json::json;

    #[test]
    fn every_gpu_idle_for_the_duration() {
        let d = detector("gpu_idle", json!({"threshold": 10, "duration": "30m"}));
        let mut job = Job::new();
        job.gpu(0, &[95.0, 97.0]);
        for m in 1..=31 {
            job.gpu(m * 60, &[2.0, 4.0]);
        }
        assert!(job.check(d.as_ref(), 30 * 60).is_none(), "idle since 1m: 29m so far");
        let f = job.check(d.as_ref(), 31 * 60).expect("30 minutes idle");
        assert_eq!(f.summary, "every GPU below 10% for 30m (at most 4%; limit 30m)");
        assert!(job.check(d.as_ref(), 31 * 60 + 301).is_none(), "no current reading: not idle, unknown");
        assert_eq!(job.wake_at(d.as_ref(), 31 * 60), Some(t(31 * 60 + 300)));
    }

    #[test]
    fn one_busy_gpu_keeps_every_from_firing_but_not_any() {
        let every = detector("gpu_idle", json!({"duration": "10m"}));
        let any = detector("gpu_idle", json!({"duration": "10m", "gpus": "any"}));
        let mut job = Job::new();
        for m in 0..=10 {
            job.gpu(m * 60, &[99.0, 0.0, 98.0]);
        }
        assert!(job.check(every.as_ref(), 600).is_none());
        let f = job.check(any.as_ref(), 600).expect("one idle rank for 10m");
        assert_eq!(
            f.summary,
            "some GPU below 10% in every reading for 10m (idlest now ft-node-0-0/1 at 0%; limit 10m)"
        );
    }

    #[test]
    fn no_readings_or_a_gap_never_fire() {
        let d = detector("gpu_idle", json!({"duration": "10m"}));
        let mut job = Job::new();
        assert!(job.check(d.as_ref(), 3600).is_none(), "no GPU signal at all");
        job.gpu(0, &[0.0]);
        job.gpu(400, &[0.0]); // a 6m40s gap: the run starts again at 400
        job.gpu(700, &[0.0]);
        job.gpu(960, &[0.0]);
        assert!(job.check(d.as_ref(), 960).is_none());
        job.gpu(1000, &[0.0]);
        assert!(job.check(d.as_ref(), 1000).is_some());
    }

    #[test]
    fn only_running_time_counts() {
        let d = detector("gpu_idle", json!({"duration": "10m"}));
        let mut job = Job::new();
        for m in 0..=20 {
            job.gpu(m * 60, &[0.0]);
        }
        job.snapshot.running_since = Some(t(900));
        assert!(job.check(d.as_ref(), 1200).is_none(), "resumed 5m ago");
        job.snapshot.phase = JobPhase::Suspended;
        assert!(job.check(d.as_ref(), 1200).is_none());
    }

    #[test]
    fn parameters_are_checked() {
        assert_eq!(
            errors("gpu_idle", json!({"threshold": 120, "gpus": "all"})),
            vec![
                "with.threshold: must be a utilization above 0 and at most 100 (percent), got 120",
                "with.gpus: expected \"every\" or \"any\", got \"all\""
            ]
        );
        assert_eq!(
            errors("gpu_idle", json!({"duration": "0s"})),
            vec!["with.duration: must be longer than 0s"]
        );
    }
}
