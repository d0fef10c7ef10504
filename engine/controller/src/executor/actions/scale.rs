//! The `scale` action: `spec.trainer.numNodes` changed by suspend → patch → resume, where the TrainJob CRD
//! allows it (RHOAI 3.4; the upstream CRD makes `spec.trainer` immutable, which is a refusal).

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use trainwarden_kube::FIELD_MANAGER;

use super::super::call::CallError;
use super::super::ssa::spec_bool;
use super::super::{ActionError, Ended, Executor, Target};
use crate::LAST_ACTION_ANNOTATION;
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
        record: &str,
    ) -> Result<Ended, ActionError> {
        let (api, job, by, summary, reference) =
            (target.api, target.job, target.by.as_str(), target.summary, &target.reference);
        let name = job.name_any();
        let current = job.data.pointer("/spec/trainer/numNodes").and_then(Value::as_i64);
        if current == Some(nodes as i64) {
            return Ok(Ended::new(ActionResult::Unchanged, format!("numNodes is already {nodes}")));
        }
        let was_suspended = spec_bool(job, "/spec/suspend") == Some(true);
        // The intent counts as performed (last-action record) only with the last write: when resuming fails,
        // a repeat of the intent must not find it "already performed" and leave the job suspended.
        let resize_record: &[(&str, &str)] =
            if was_suspended { &[(LAST_ACTION_ANNOTATION, record)] } else { &[] };
        let body = |suspend: bool| {
            let mut body = self.owned_state(job, resize_record);
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
                self.publish(reference, true, "ScaleRefused", "Scale", &format!("{by}: {message}")).await;
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
            let resumed =
                self.call(ApiOperation::GetTrainjob, || api.get(&name)).await.map_err(ActionError::Reread)?;
            let mut resume = self.owned_state(&resumed, &[(LAST_ACTION_ANNOTATION, record)]);
            resume["spec"]["suspend"] = json!(false);
            let patch = Patch::Apply(&resume);
            if let Err(e) = self.call(ApiOperation::PatchTrainjob, || api.patch(&name, &params, &patch)).await
            {
                let error = ActionError::ResumeFailed { nodes, source: e };
                self.publish(reference, true, "ScaleResumeFailed", "Scale", &format!("{by}: {error}")).await;
                return Err(error);
            }
        }
        let from = current.map_or("?".to_string(), |c| c.to_string());
        self.publish(
            reference,
            false,
            "Scaled",
            "Scale",
            &format!("{by}: numNodes {from} → {nodes}: {summary}"),
        )
        .await;
        Ok(Ended::new(ActionResult::Done, format!("numNodes {from} → {nodes}")))
    }
}
