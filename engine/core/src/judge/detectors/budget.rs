//! `over_budget`: the job has used more time, GPU-hours or money than allowed.
//!
//! Runtime counts from the job's last start (creation or resume). GPU-hours are runtime × GPUs, where the
//! GPU count comes from the TrainJob (`numNodes` × GPUs per node) or the policy's `assumeGpus`; cost is
//! GPU-hours × the policy's `gpuHourCost`. A limit whose inputs are unknown (no GPU count) does not fire.
//!
//! Example: `uses: over_budget`, `with: {maxCost: 1500}` with `gpuHourCost: 6.875` on the policy.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::time::Timestamp;
use crate::time::{add_seconds, fmt_num, fmt_secs};
use crate::units::duration::PolicyDuration;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "over_budget",
    summary: "Runtime, GPU-hours or cost since the job last started is above a limit.",
    params: &[
        ParamDoc {
            name: "maxRuntime",
            ty: "duration",
            default: "none",
            doc: "Longest allowed runtime, e.g. 48h.",
        },
        ParamDoc {
            name: "maxGpuHours",
            ty: "number",
            default: "none",
            doc: "GPU-hours allowed (runtime × GPUs).",
        },
        ParamDoc {
            name: "maxCost",
            ty: "number",
            default: "none",
            doc: "Dollars allowed (GPU-hours × the policy's gpuHourCost).",
        },
    ],
    example: r#"{"maxRuntime": "48h", "maxGpuHours": 320}"#,
    build,
};

#[derive(Debug, Clone)]
pub(super) struct OverBudget {
    pub max_runtime: Option<PolicyDuration>,
    pub max_gpu_hours: Option<f64>,
    pub max_cost: Option<f64>,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let given = ["maxRuntime", "maxGpuHours", "maxCost"].iter().any(|k| p.raw(k).is_some());
    let max_runtime = p.duration("maxRuntime");
    let max_gpu_hours = p.positive("maxGpuHours", false);
    let max_cost = p.positive("maxCost", false);
    if !given {
        p.error("maxRuntime", "give at least one of maxRuntime, maxGpuHours, maxCost");
    }
    Some(Box::new(OverBudget { max_runtime, max_gpu_hours, max_cost }))
}

impl Detector for OverBudget {
    // A budget, once spent, stays spent; the moment it runs out is `wake_at`.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        if !view.is_running() {
            return None;
        }
        let runtime = view.runtime_seconds();
        if let Some(max) = self.max_runtime
            && runtime > max.as_secs_f64()
        {
            return Some(
                Finding::new(format!("ran for {}, over the limit of {max}", fmt_secs(runtime)))
                    .value("runtimeSeconds", runtime),
            );
        }
        let gpu_hours = runtime / 3600.0 * view.gpus?;
        if let Some(max) = self.max_gpu_hours
            && gpu_hours > max
        {
            return Some(
                Finding::new(format!(
                    "used {} GPU-hours, over the limit of {}",
                    fmt_num(gpu_hours),
                    fmt_num(max)
                ))
                .value("gpuHours", gpu_hours),
            );
        }
        let cost = gpu_hours * view.gpu_hour_cost?;
        let max = self.max_cost?;
        (cost > max).then(|| {
            Finding::new(format!("cost ${}, over the limit of ${}", fmt_num(cost), fmt_num(max)))
                .value("cost", cost)
                .value("gpuHours", gpu_hours)
        })
    }

    /// When the first of the budgets runs out at the job's current size, counted from when it started running.
    fn wake_at(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Timestamp> {
        if !view.is_running() {
            return None;
        }
        let mut limits = Vec::new();
        limits.extend(self.max_runtime.map(crate::units::duration::PolicyDuration::as_secs_f64));
        if let Some(gpus) = view.gpus.filter(|g| *g > 0.0) {
            limits.extend(self.max_gpu_hours.map(|h| h * 3600.0 / gpus));
            if let (Some(max), Some(price)) = (self.max_cost, view.gpu_hour_cost.filter(|p| *p > 0.0)) {
                limits.push(max / price * 3600.0 / gpus);
            }
        }
        let earliest = limits.into_iter().filter(|s| s.is_finite()).reduce(f64::min)?;
        let started = add_seconds(view.now, -view.runtime_seconds())?;
        // The budgets are "over the limit", strictly: wake up one second after reaching it.
        add_seconds(started, earliest + 1.0)
    }

    fn needs_gpu_hour_cost(&self) -> bool {
        self.max_cost.is_some()
    }

    fn windows(&self) -> Vec<(&'static str, PolicyDuration)> {
        self.max_runtime.map(|d| vec![("maxRuntime", d)]).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use serde_json::json;

    #[test]
    fn runtime_gpu_hours_and_cost() {
        let d = detector("over_budget", json!({"maxRuntime": "10h"}));
        let job = Job::new();
        assert!(job.check(d.as_ref(), 10 * 3600).is_none());
        assert_eq!(
            job.check(d.as_ref(), 10 * 3600 + 1).unwrap().summary,
            "ran for 10h0m1s, over the limit of 10h"
        );

        let d = detector("over_budget", json!({"maxGpuHours": 80}));
        let mut job = Job::new();
        assert!(job.check(d.as_ref(), 20 * 3600).is_none(), "unknown GPU count: no verdict");
        job.gpus = Some(8.0);
        assert!(job.check(d.as_ref(), 10 * 3600).is_none());
        assert!(job.check(d.as_ref(), 10 * 3600 + 60).is_some());

        let d = detector("over_budget", json!({"maxCost": 550}));
        job.cost = Some(6.875);
        assert!(job.check(d.as_ref(), 10 * 3600).is_none(), "80 GPU-hours × 6.875 = 550");
        assert_eq!(job.check(d.as_ref(), 11 * 3600).unwrap().summary, "cost $605, over the limit of $550");
    }

    #[test]
    fn needs_a_limit() {
        assert_eq!(
            errors("over_budget", json!({})),
            vec!["with.maxRuntime: give at least one of maxRuntime, maxGpuHours, maxCost"]
        );
        assert_eq!(errors("over_budget", json!({"maxCost": 0})), vec!["with.maxCost: must be > 0, got 0"]);
    }
}
