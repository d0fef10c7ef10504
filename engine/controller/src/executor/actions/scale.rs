//! The `scale` action: `spec.trainer.numNodes` changed by suspend → patch → resume, where the TrainJob CRD
//! allows it (RHOAI 3.4; the upstream CRD makes `spec.trainer` immutable, which is a refusal).

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use trainwarden_core::describe::Notice;
use trainwarden_kube::FIELD_MANAGER;

use super::super::call::CallError;
use super::super::ssa::spec_bool;
use super::super::{ActionError, Ended, Executor, Record, Target};
use crate::SCALE_PENDING_ANNOTATION;
use crate::messages::ActionResult;
use crate::metrics::ApiOperation;

impl Executor {
    /// Changes `spec.trainer.numNodes` by suspend → patch → resume, where the TrainJob CRD allows it. A dry
    /// run asks the API server first: the upstream CRD makes `spec.trainer` immutable (CEL
    /// `self == oldSelf`), which is a refusal, not a failure to retry.
    pub(in crate::executor) async fn scale(
        &self,
        target: &Target<'_>,
        nodes: i32,
        id: &str,
        record: &Record,
    ) -> Result<Ended, ActionError> {
        let (api, job, by, summary, reference) =
            (target.api, target.job, target.by.as_str(), target.summary, &target.reference);
        let name = job.name_any();
        let current = job.data.pointer("/spec/trainer/numNodes").and_then(Value::as_i64);
        let suspended = spec_bool(job, "/spec/suspend") == Some(true);
        if current == Some(nodes as i64) {
            // This intent suspended and resized the job, and the replica doing it was lost before resuming
            // (the pending mark names the intent): finish it.
            if suspended && job.annotations().get(SCALE_PENDING_ANNOTATION).map(String::as_str) == Some(id) {
                self.resume_after_scale(api, job, record, nodes).await?;
                let message =
                    format!("numNodes is {nodes}; resumed (the scale was interrupted before resuming)");
                self.publish(reference, &Notice::scaled(by, &message, summary)).await;
                return Ok(Ended::new(ActionResult::Done, message));
            }
            return Ok(Ended::new(ActionResult::Unchanged, format!("numNodes is already {nodes}")));
        }
        // The intent counts as performed (its record) only with the last write: when resuming fails (or
        // the replica is lost first), a repeat must not find it performed; the pending mark tells it to resume.
        let was_suspended = suspended;
        let body = |suspend: bool| {
            let mut body = if was_suspended {
                self.owned_state(job, &record.annotations())
            } else {
                self.owned_state(job, &[(SCALE_PENDING_ANNOTATION, id)])
            };
            body["spec"]["suspend"] = json!(suspend);
            body["spec"]["trainer"]["numNodes"] = json!(nodes);
            body
        };
        let dry = PatchParams::apply(FIELD_MANAGER).force().dry_run();
        let resized = body(true);
        let patch = Patch::Apply(&resized);
        match self.call(ApiOperation::PatchTrainjob, || api.patch(&name, &dry, &patch)).await {
            Ok(_) => {}
            Err(CallError::Api(kube::Error::Api(s))) if s.code == 422 || s.code == 400 => {
                let message = format!("cannot change spec.trainer.numNodes of this TrainJob: {}", s.message);
                self.publish(reference, &Notice::scale_refused(by, &message)).await;
                return Ok(Ended::new(ActionResult::Refused, message));
            }
            Err(e) => return Err(ActionError::call("checking whether numNodes can change", e)),
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        // Suspend and resize in one apply, then resume unless the job was suspended before.
        self.call(ApiOperation::PatchTrainjob, || api.patch(&name, &params, &patch))
            .await
            .map_err(|e| ActionError::call("suspending and resizing", e))?;
        if !was_suspended {
            let resized =
                self.call(ApiOperation::GetTrainjob, || api.get(&name)).await.map_err(ActionError::Reread)?;
            if let Err(error) = self.resume_after_scale(api, &resized, record, nodes).await {
                if !error.lost_leadership() {
                    self.publish(reference, &Notice::scale_resume_failed(by, &error.to_string())).await;
                }
                return Err(error);
            }
        }
        let from = current.map_or("?".to_string(), |c| c.to_string());
        self.publish(reference, &Notice::scaled(by, &format!("numNodes {from} → {nodes}"), summary)).await;
        Ok(Ended::new(ActionResult::Done, format!("numNodes {from} → {nodes}")))
    }

    /// The scale's last write: resume, record the intent, drop the pending mark.
    async fn resume_after_scale(
        &self,
        api: &Api<DynamicObject>,
        job: &DynamicObject,
        record: &Record,
        nodes: i32,
    ) -> Result<(), ActionError> {
        let mut resume = self.owned_state_without(job, &record.annotations(), &[SCALE_PENDING_ANNOTATION]);
        resume["spec"]["suspend"] = json!(false);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(&resume);
        let name = job.name_any();
        self.call(ApiOperation::PatchTrainjob, || api.patch(&name, &params, &patch))
            .await
            .map(|_| ())
            .map_err(|source| ActionError::ResumeFailed { nodes, source })
    }
}
