//! Kubeflow Trainer `TrainJob`s (`trainer.kubeflow.org/v1alpha1`), untyped.
//!
//! trainwarden does not own the TrainJob CRD and reads only a handful of its fields, all through
//! [`trainwarden_core::from_trainjob`]; so TrainJobs are [`DynamicObject`]s here rather than
//! generated structs that would have to track every Trainer release.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use trainwarden_core::JobSnapshot;
use trainwarden_core::NormalizeError;

/// API group of TrainJob.
pub const TRAINJOB_GROUP: &str = "trainer.kubeflow.org";
/// API version of TrainJob.
pub const TRAINJOB_VERSION: &str = "v1alpha1";
/// Kind of TrainJob.
pub const TRAINJOB_KIND: &str = "TrainJob";
/// Resource (plural) name of TrainJob.
pub const TRAINJOB_PLURAL: &str = "trainjobs";
/// The field manager Kubeflow Trainer's status server uses for `status.trainerStatus`.
pub const TRAINER_STATUS_FIELD_MANAGER: &str = "trainer-status";

/// The `ApiResource` of `trainer.kubeflow.org/v1alpha1` `TrainJob` (plural `trainjobs`).
pub fn trainjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(TRAINJOB_GROUP, TRAINJOB_VERSION, TRAINJOB_KIND),
        TRAINJOB_PLURAL,
    )
}

/// TrainJobs in one namespace, or in all namespaces with `None`.
pub fn trainjob_api(client: Client, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = trainjob_resource();
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    }
}

/// Normalizes a fetched or watched TrainJob into the core's [`JobSnapshot`] (progress from
/// `status.trainerStatus`, or from the RHOAI annotation).
pub fn to_snapshot(job: &DynamicObject) -> Result<JobSnapshot, NormalizeError> {
    let value = serde_json::to_value(job)
        .map_err(|e| NormalizeError { path: "$".into(), message: format!("cannot serialize: {e}") })?;
    trainwarden_core::from_trainjob(&value)
}
