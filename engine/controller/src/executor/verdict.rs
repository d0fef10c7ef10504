//! Storing a job's verdict on its TrainJob ([`trainwarden_kube::VERDICT_ANNOTATION`]): one server-side apply
//! by [`trainwarden_kube::VERDICT_FIELD_MANAGER`] stating that annotation only, or no annotation at all,
//! which removes it (the manager owns nothing else). Leader-gated and timed out like every call; the brain
//! learns from the watch whether it is stored and sends it again otherwise.

use kube::api::{Patch, PatchParams};
use serde_json::json;
use tracing::{debug, warn};
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, TRAINJOB_KIND, TRAINJOB_VERSION, trainjob_api};
use trainwarden_kube::{VERDICT_ANNOTATION, VERDICT_FIELD_MANAGER};

use super::Executor;
use super::call::CallError;
use crate::messages::VerdictSave;
use crate::metrics::ApiOperation;

/// The apply body: the TrainJob by name, with the verdict annotation or none.
pub(super) fn verdict_body(save: &VerdictSave) -> serde_json::Value {
    let annotations = match &save.text {
        Some(text) => json!({ VERDICT_ANNOTATION: text }),
        None => json!({}),
    };
    let mut body = json!({
        "apiVersion": format!("{TRAINJOB_GROUP}/{TRAINJOB_VERSION}"),
        "kind": TRAINJOB_KIND,
        "metadata": {
            "name": save.job.name,
            "namespace": save.job.namespace,
            "annotations": annotations,
        },
    });
    if let Some(uid) = &save.uid {
        body["metadata"]["uid"] = json!(uid);
    }
    body
}

impl Executor {
    pub(super) async fn save_verdict(&self, save: &VerdictSave) {
        let api = trainjob_api(self.client.clone(), Some(&save.job.namespace));
        let body = verdict_body(save);
        let params = PatchParams::apply(VERDICT_FIELD_MANAGER).force();
        let patch = Patch::Apply(&body);
        match self.call(ApiOperation::PatchVerdict, || api.patch(&save.job.name, &params, &patch)).await {
            Ok(_) => debug!(job = %save.job, removed = save.text.is_none(), "verdict stored"),
            Err(CallError::NotLeader) => {}
            // A job deleted (or re-created: the uid is another) meanwhile has no verdict to keep.
            Err(CallError::Api(kube::Error::Api(e))) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                warn!(job = %save.job, annotation = VERDICT_ANNOTATION, error = %e, "could not store the job's verdict; tried again in 30 s");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainwarden_core::JobKey;

    #[test]
    fn an_empty_verdict_applies_no_annotation_so_the_manager_gives_it_up() {
        let save = VerdictSave { job: JobKey::new("ml", "ft"), text: None, uid: None };
        assert_eq!(verdict_body(&save)["metadata"]["annotations"], json!({}));
        let save =
            VerdictSave { job: JobKey::new("ml", "ft"), text: Some("{}".into()), uid: Some("u-1".into()) };
        let body = verdict_body(&save);
        assert_eq!(body["metadata"]["annotations"][VERDICT_ANNOTATION], "{}");
        assert_eq!(body["metadata"]["uid"], "u-1", "a re-created TrainJob of the same name is not written");
    }
}
