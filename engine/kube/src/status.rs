//! The `status` of `ProgressPolicy` and `ClusterProgressPolicy`, written by the controller through the
//! status subresource (server-side apply, field manager [`crate::FIELD_MANAGER`]).
//!
//! Like Gatekeeper's constraint status (which keeps at most `--constraint-violations-limit` violations and
//! reports `totalViolations` separately), the per-job list is capped: at most [`MAX_STATUS_JOBS`] entries,
//! while `matchedJobs` always counts every selected job. This keeps the object far below etcd's size limit
//! however many TrainJobs a policy selects.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trainwarden_core::RuleMemory;

/// The most entries `status.jobs` holds. Enforced by the CRD schema (`maxItems`); [`JobStatus::cap`] sorts
/// and truncates a list to it.
pub const MAX_STATUS_JOBS: usize = 50;

/// Condition type: the policy compiled and is being evaluated (`False` with reason `InvalidPolicy` and the
/// field errors in the message when it does not compile).
pub const CONDITION_READY: &str = "Ready";

/// Condition type: at least one rule is firing for at least one job.
pub const CONDITION_FIRING: &str = "Firing";

/// Condition type: every selected job's progress report uses only fields its format defines (`False` with
/// reason `UnknownProgressFields` names the jobs and fields: a misspelt `trainMetricz` is read without it, so
/// rules on those metrics never see them).
pub const CONDITION_PROGRESS_UNDERSTOOD: &str = "ProgressUnderstood";

/// Condition type, only on policies with GPU rules (`uses: gpu_idle`/`hang`, a `when` calling `gpu_util()`, …):
/// the controller reads the GPUs' metrics (`False` with reason `NotConfigured` when it was started without
/// `--prometheus-url`, so those rules can never fire, or `QueryFailing` while Prometheus does not answer).
pub const CONDITION_GPU_METRICS: &str = "GpuMetrics";
/// Condition type of policies whose rules read Kueue's queues (`queue_pending()`, `queue_pending_gpus()`):
/// whether the controller reads them.
pub const CONDITION_KUEUE_QUEUES: &str = "KueueQueues";

/// What the controller last observed and did for a progress policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::crd::kubernetes_friendly)]
pub struct ProgressPolicyStatus {
    /// The metadata.generation of the spec this status describes. When it is lower than metadata.generation
    /// the controller has not yet processed the latest spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Number of TrainJobs the policy currently selects (all of them, also those not listed in jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub matched_jobs: Option<i32>,

    /// Number of (job, rule) pairs that are firing: the condition held for the rule's `for` duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub firing_rules: Option<i32>,

    /// Number of (job, rule) pairs whose condition holds but has not yet held for the rule's `for` duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pending_rules: Option<i32>,

    /// The last action taken (or, in Audit mode, that would have been taken), as
    /// "<action> <namespace>/<job> (<rule>)", for example "suspend fraud/bert-ft (loss-plateau)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,

    /// When the last action was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action_time: Option<Time>,

    /// GPU-hours saved by this policy's suspensions: for each suspended job, its GPUs times the remaining
    /// time the job still expected to run (its ETA) when it was suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub gpu_hours_saved: Option<f64>,

    /// gpuHoursSaved priced with spec.gpuHourCost, in dollars. Absent without gpuHourCost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub dollars_saved: Option<f64>,

    /// Audit mode: the GPU-hours the suspensions this policy would have made would have saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub gpu_hours_would_save: Option<f64>,

    /// gpuHoursWouldSave priced with spec.gpuHourCost, in dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub dollars_would_save: Option<f64>,

    /// Actions by result since the controller started managing this policy, for example
    /// {"suspend/done": 3, "scale/refused": 1}.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub action_counts: BTreeMap<String, i64>,

    /// Standard Kubernetes conditions: Ready (the policy compiled and is evaluated; False with reason
    /// InvalidPolicy and the field errors as message otherwise) and Firing (some rule is firing for some job).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,

    /// Per-job detail, at most 50 entries: jobs with firing rules first, then jobs with pending rules, then
    /// the most recently acted on. matchedJobs counts every selected job, so the list may be shorter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[schemars(length(max = 50))]
    pub jobs: Vec<JobStatus>,

    /// Delivery counters of the policy's notification receivers, one entry per receiver channel.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub notifications: Vec<NotificationStatus>,

    /// What the rules remember per job (pending since, firing, firing count, when each action was last
    /// issued), at most 500 entries: the controller restores it after a restart, so a restart neither loses
    /// a `for` timer nor repeats an action. Written by the controller; not meant to be edited.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500))]
    pub rule_states: Vec<RuleMemory>,

    /// The ProgressPolicyExceptions that name this policy, at most 64: whether each is honoured (Active),
    /// and if not why (Expired, NotAllowed, NoSuchRule, Invalid), and the jobs whose actions it holds now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[schemars(length(max = 64))]
    pub exceptions: Vec<ExceptionStatus>,

    /// The recent suspensions (of the TrainJob, or of its Kueue Workload) whose savings and counts this
    /// status includes, by intent id: a replica that takes over and finds one of them already performed knows
    /// it is counted, and counts one it finds performed and not listed (its leader was lost before its status
    /// did). Written by the controller; not meant to be edited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_actions: Option<CountedActions>,
}

/// The most entries `status.countedActions.actions` holds (the newest kept).
pub const MAX_COUNTED_ACTIONS: usize = 256;

/// How long a counted action stays listed in `status.countedActions` (a hand-over comes within seconds).
pub const COUNTED_ACTIONS_KEPT: std::time::Duration = std::time::Duration::from_secs(3600);

/// `status.countedActions`: which recent actions the totals include.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::crd::kubernetes_friendly)]
pub struct CountedActions {
    /// Actions issued at or before this time are not listed: counted or not, they are never counted again.
    pub since: Time,
    /// The actions counted that were issued after `since`, at most 256.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub actions: Vec<CountedAction>,
}

/// One counted action: its intent id and when it was issued.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::crd::kubernetes_friendly)]
pub struct CountedAction {
    /// The intent id (as in the TrainJob's `trainwarden.dev/intents` record).
    pub id: String,
    /// When the intent was issued (its firing).
    pub at: Time,
}

/// The most entries `status.exceptions` holds.
pub const MAX_STATUS_EXCEPTIONS: usize = 64;

/// One ProgressPolicyException naming a policy, as that policy's status lists it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionStatus {
    /// The exception as "<namespace>/<name>".
    #[schemars(length(min = 3, max = 317))]
    pub name: String,
    /// The rules of this policy it names; empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub rules: Vec<String>,
    /// When it stops applying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Time>,
    /// Active (honoured until expires), Expired, NotAllowed (a ClusterProgressPolicy whose
    /// spec.exceptions.allowedNamespaces does not list its namespace), NoSuchRule (it names a rule this
    /// policy lacks) or Invalid (it cannot be read; see message).
    pub state: String,
    /// Why, when it is not Active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The TrainJobs ("<namespace>/<name>") whose firing rules of this policy it holds now, at most 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub holding: Vec<String>,
}

/// Delivery counters of one receiver channel (secret-free).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationStatus {
    /// The receiver's name (spec.receivers[].name).
    #[schemars(length(min = 1, max = 253))]
    pub receiver: String,
    /// slack, email or webhook.
    pub channel: String,
    /// Messages delivered.
    pub sent: i64,
    /// Messages given up on (a 4xx answer, a bad secret, retries exhausted).
    pub failed: i64,
    /// Delivery attempts repeated after a transient failure.
    pub retried: i64,
    /// Messages dropped because the receiver's queue was full.
    pub dropped: i64,
    /// The last delivery error, without secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The most entries `status.ruleStates` holds.
pub const MAX_RULE_STATES: usize = 500;

/// The state of one selected TrainJob under this policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// The TrainJob as "<namespace>/<name>".
    #[schemars(length(min = 3, max = 317))]
    pub name: String,

    /// Names of the rules firing for this job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub firing: Vec<String>,

    /// Rules firing for this job whose actions a blast-radius limit holds back, as "<rule>: held: <limit>"
    /// (for example "idle: held: limit 5/h reached (spec.limits.maxActionsPerHour)"): they act when the
    /// limit allows, if the rule still fires.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub held: Vec<String>,

    /// Names of the rules pending for this job (condition holds, `for` not yet elapsed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub pending: Vec<String>,

    /// Training progress in percent (0-100) from the job's last progress report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 100.0))]
    pub progress_percent: Option<f64>,

    /// The last action taken on this job (or that would have been, in Audit mode), as "<action> (<rule>)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action: Option<String>,

    /// When the last action on this job was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_action_time: Option<Time>,

    /// The owner snoozed the job (annotation trainwarden.dev/snooze-until) until this time, at most the
    /// controller's --max-snooze after the annotation was first seen: its rules are judged, their actions
    /// held; the rules still firing then act.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snoozed_until: Option<Time>,
}

impl JobStatus {
    /// Orders jobs for the status (firing first, then pending, then most recent action, then name) and keeps
    /// the first [`MAX_STATUS_JOBS`].
    pub fn cap(mut jobs: Vec<JobStatus>) -> Vec<JobStatus> {
        jobs.sort_by(|a, b| {
            (b.firing.len(), b.pending.len())
                .cmp(&(a.firing.len(), a.pending.len()))
                .then_with(|| {
                    b.last_action_time.as_ref().map(|t| t.0).cmp(&a.last_action_time.as_ref().map(|t| t.0))
                })
                .then_with(|| a.name.cmp(&b.name))
        });
        jobs.truncate(MAX_STATUS_JOBS);
        jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, firing: usize) -> JobStatus {
        JobStatus { name: name.into(), firing: vec!["r".into(); firing], ..JobStatus::default() }
    }

    #[test]
    fn cap_keeps_firing_jobs_first_and_at_most_the_limit() {
        let mut jobs: Vec<JobStatus> = (0..120).map(|i| job(&format!("ns/j{i:03}"), 0)).collect();
        jobs.push(job("ns/zz-firing", 2));
        let capped = JobStatus::cap(jobs);
        assert_eq!(capped.len(), MAX_STATUS_JOBS);
        assert_eq!(capped[0].name, "ns/zz-firing");
        assert_eq!(capped[1].name, "ns/j000");
    }
}
