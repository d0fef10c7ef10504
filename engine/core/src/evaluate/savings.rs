//! GPU time an action frees: from the action to the job's estimated end, or for a stall inside an unattended
//! window to that window's end, times the job's GPUs (and the policy's `gpuHourCost`).

use super::{Reason, Savings, SavingsBasis};
use crate::history::job::JobData;
use crate::judge::detectors::FindingKind;
use crate::policy::compile::CompiledPolicy;
use crate::time::Timestamp;

/// GPU time freed by stopping the job now: until its estimated end, or — for a stall inside an unattended
/// window — until the window ends, when someone would have noticed.
pub(super) fn estimate(
    data: &JobData,
    policy: &CompiledPolicy,
    reason: &Reason,
    now: Timestamp,
) -> Option<Savings> {
    let view = data.view(&policy.env, now);
    let gpus = view.gpus.filter(|g| *g > 0.0)?;
    let (until, basis) = match (reason.kind, policy.env.calendar.active_until(now)) {
        (Some(FindingKind::Stall), Some(end)) => (end, SavingsBasis::WindowEnd),
        _ => (view.estimated_end()?, SavingsBasis::EstimatedEnd),
    };
    let hours = crate::time::seconds(now, until) / 3600.0;
    if hours <= 0.0 {
        return None;
    }
    let gpu_hours = hours * gpus;
    Some(Savings { until, basis, gpus, gpu_hours, dollars: policy.env.gpu_hour_cost.map(|c| c * gpu_hours) })
}
