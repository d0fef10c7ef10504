//! The `suspend` action: `spec.suspend: true` on the TrainJob, or, for a job Kueue manages, its Workload
//! deactivated (Kueue owns `spec.suspend` of such jobs and would undo a direct suspension).

use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::json;
use trainwarden_core::SuspendAction;
use trainwarden_core::describe::Notice;
use trainwarden_kube::FIELD_MANAGER;
use trainwarden_kube::kueue::{WORKLOAD_VERSIONS, workload_of, workload_resource_version};

use super::super::ssa::{intents_with, performed_intents, spec_bool};
use super::super::{ActionError, Ended, Executor, Record, Target};
use crate::messages::{ActionResult, ExecutedAction};
use crate::metrics::ApiOperation;
use crate::{INTENTS_ANNOTATION, KUEUE_QUEUE_LABEL, SUSPENDED_BY_ANNOTATION};

/// Kueue's Workload at `v1beta1`, the version every Kueue serves (the executor itself prefers `v1beta2`, see
/// [`WORKLOAD_VERSIONS`]); the object that owns admission of a Kueue-managed job.
pub fn workload_resource() -> ApiResource {
    workload_resource_version("v1beta1")
}

impl Executor {
    pub(in crate::executor) async fn suspend(
        &self,
        target: &Target<'_>,
        s: &SuspendAction,
        id: &str,
        record: &Record,
        action: &mut ExecutedAction,
    ) -> Result<Ended, ActionError> {
        let (by, summary, job) = (&target.by, target.summary, target.job);
        let suspended = Notice::suspended(by, summary, s.message.as_deref());
        let queue = job.labels().get(KUEUE_QUEUE_LABEL).cloned();
        if let (true, Some(queue)) = (self.kueue, queue) {
            *action = ExecutedAction::Deactivate;
            let ended = self.deactivate_workload(job, &queue, id).await?;
            // Recorded also when the Workload was found inactive already, so the intent is complete on the
            // TrainJob. Its Event follows the record, so a Workload this intent deactivated (a leader lost
            // before the record) has none yet.
            self.apply_to_job(target.api, job, &record.annotations(), None).await?;
            if matches!(ended.result, ActionResult::Done | ActionResult::AlreadyDone) {
                let notice = Notice::workload_deactivated(&suspended, &ended.message);
                self.publish(&target.reference, &notice).await;
            }
            return Ok(ended);
        }
        if spec_bool(job, "/spec/suspend") == Some(true) {
            return Ok(Ended::new(ActionResult::Unchanged, "the TrainJob is already suspended"));
        }
        let [last, intents] = record.annotations();
        self.apply_to_job(
            target.api,
            job,
            &[last, intents, (SUSPENDED_BY_ANNOTATION, by)],
            Some(json!({"suspend": true})),
        )
        .await?;
        self.publish(&target.reference, &suspended).await;
        Ok(Ended::new(ActionResult::Done, "spec.suspend set to true"))
    }

    /// Deactivates the Kueue Workload owned by the TrainJob (`spec.active: false`): Kueue owns
    /// `spec.suspend` of the jobs it manages and would undo a direct suspension; a deactivated Workload makes
    /// Kueue evict and suspend the job itself. The same apply records intent `id` on the Workload
    /// (`trainwarden.dev/intents`), so an inactive Workload tells whether this intent deactivated it (done,
    /// its leader lost before recording it on the TrainJob) or someone else did (unchanged).
    async fn deactivate_workload(
        &self,
        job: &DynamicObject,
        queue: &str,
        id: &str,
    ) -> Result<Ended, ActionError> {
        let ns = job.namespace().unwrap_or_default();
        let uid = job.uid().unwrap_or_default();
        let list_params = kube::api::ListParams::default();
        let context = || format!("listing Kueue Workloads in {ns} (queue {queue})");
        // The newest served version: a 404 on the list means this Kueue does not serve that version (an
        // older one serves only v1beta1), so the next one is tried; none served is an error of its own.
        let mut versions = WORKLOAD_VERSIONS.iter();
        let (version, api, list) = loop {
            let Some(version) = versions.next() else { return Err(ActionError::NoWorkloadApi) };
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &ns, &workload_resource_version(version));
            match self.call(ApiOperation::ListWorkloads, || api.list(&list_params)).await {
                Ok(list) => break (*version, api, list),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(ActionError::call(context(), e)),
            }
        };
        let owned = list.items.into_iter().find(|w| workload_of(w, &uid));
        let Some(workload) = owned else {
            return Err(ActionError::NoWorkload { queue: queue.to_string() });
        };
        let wname = workload.name_any();
        if spec_bool(&workload, "/spec/active") == Some(false) {
            let mut ended = if performed_intents(&workload).iter().any(|i| i == id) {
                Ended::new(
                    ActionResult::AlreadyDone,
                    format!(
                        "Kueue Workload {wname} was deactivated by this intent earlier (its record on the TrainJob had not been written)"
                    ),
                )
            } else {
                Ended::new(ActionResult::Unchanged, format!("Kueue Workload {wname} is already inactive"))
            };
            ended.workload = Some(wname);
            return Ok(ended);
        }
        let body = json!({
            "apiVersion": format!("kueue.x-k8s.io/{version}"),
            "kind": "Workload",
            "metadata": {
                "name": wname,
                "namespace": ns,
                "annotations": {INTENTS_ANNOTATION: intents_with(&workload, id)},
            },
            "spec": {"active": false},
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(&body);
        self.call(ApiOperation::PatchWorkload, || api.patch(&wname, &params, &patch))
            .await
            .map_err(|e| ActionError::call(format!("deactivating Kueue Workload {wname}"), e))?;
        let mut ended = Ended::new(
            ActionResult::Done,
            format!(
                "managed by Kueue (queue {queue}): deactivated Workload {wname} instead of setting spec.suspend"
            ),
        );
        ended.workload = Some(wname);
        Ok(ended)
    }
}
