//! Kueue's Workload: the object that owns admission, and so suspension, of a job Kueue manages.

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

/// Kueue's queue label: Kueue owns `spec.suspend` of TrainJobs that carry it.
pub const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// The Workload versions to use, newest first. Kueue 0.15+ stores and serves `v1beta2`; there, `v1beta1` is
/// deprecated and converted, and every write through it to a Workload with reserved quota fails its CEL rule
/// (Kueue 0.17: `no such key: priorityClassSource evaluating rule: priorityClassSource is immutable while
/// workload quota reserved`, 422; seen on the cluster tier). Older Kueue serves only `v1beta1`.
pub const WORKLOAD_VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];

/// Kueue's Workload at one API version.
pub fn workload_resource_version(version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", version, "Workload"),
        "workloads",
    )
}

/// Whether `workload` is the one Kueue made for the job with this uid (its owner reference, or the
/// `kueue.x-k8s.io/job-uid` label Kueue also sets).
pub fn workload_of(workload: &DynamicObject, job_uid: &str) -> bool {
    workload.owner_references().iter().any(|o| o.uid == job_uid)
        || workload.labels().get("kueue.x-k8s.io/job-uid").is_some_and(|u| u == job_uid)
}
