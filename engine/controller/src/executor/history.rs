//! Storing a job's history checkpoint on its TrainJob ([`crate::HISTORY_ANNOTATION`]): one server-side
//! apply by [`crate::HISTORY_FIELD_MANAGER`] stating that annotation only (no read first: the apply
//! touches nothing else, and the actions' field manager never re-states it). `metadata.uid` in the body is
//! a precondition: a TrainJob deleted and re-created meanwhile is not given another object's history.
//! Leader-gated and timed out like every call; a failure is counted and logged, and the brain, told the
//! result, tries again on a timer.

use kube::api::{Patch, PatchParams};
use serde_json::json;
use tracing::{debug, warn};
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, TRAINJOB_KIND, TRAINJOB_VERSION, trainjob_api};

use super::Executor;
use super::call::CallError;
use crate::messages::HistorySave;
use crate::metrics::{ApiOperation, HistoryResult};
use crate::{HISTORY_ANNOTATION, HISTORY_FIELD_MANAGER};

/// The apply body: the TrainJob named by name and uid, with the one annotation.
pub(super) fn history_body(save: &HistorySave) -> serde_json::Value {
    json!({
        "apiVersion": format!("{TRAINJOB_GROUP}/{TRAINJOB_VERSION}"),
        "kind": TRAINJOB_KIND,
        "metadata": {
            "name": save.job.name,
            "namespace": save.job.namespace,
            "uid": save.uid,
            "annotations": {HISTORY_ANNOTATION: save.text},
        },
    })
}

impl Executor {
    /// Whether the checkpoint was stored.
    pub(super) async fn save_history(&self, save: &HistorySave) -> bool {
        let api = trainjob_api(self.client.clone(), Some(&save.job.namespace));
        let body = history_body(save);
        let params = PatchParams::apply(HISTORY_FIELD_MANAGER).force();
        let patch = Patch::Apply(&body);
        match self.call(ApiOperation::PatchHistory, || api.patch(&save.job.name, &params, &patch)).await {
            Ok(_) => {
                self.metrics.history(HistoryResult::Written);
                debug!(job = %save.job, bytes = save.text.len(), "history checkpoint stored");
                true
            }
            Err(CallError::NotLeader) => false,
            Err(e) => {
                self.metrics.history(HistoryResult::Failed);
                warn!(job = %save.job, annotation = HISTORY_ANNOTATION, error = %e, "could not store the job's history checkpoint; tried again in 30 s");
                false
            }
        }
    }
}
