//! `checkpoint`: asks a running TrainJob for a checkpoint by hand, through the channel the controller's
//! `checkpoint` action uses (sdk/python/PROTOCOL.md). The plugin records the request on the TrainJob (the
//! controller's record, [`CHECKPOINT_ANNOTATION`], with the next id); the controller puts it on the job's
//! pods, recognises the acknowledgement, records the outcome and says so in an Event, as for a policy's
//! request. A request already in flight is not replaced: the answer to it serves this one too.

use kube::ResourceExt;
use serde_json::json;
use trainwarden_core::{CHECKPOINT_ANNOTATION, JobPhase, PolicyDuration, RequestRecord, Timestamp};
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, to_snapshot, trainjob_api};

use crate::cluster::{self, Cluster, api_error};
use crate::job::{short_time, span};

/// The field manager of the plugin's writes (shown in managedFields).
const FIELD_MANAGER: &str = "kubectl-trainwarden";

pub(crate) async fn request(
    cluster: &Cluster,
    name: &str,
    timeout: PolicyDuration,
    now: Timestamp,
) -> Result<(), String> {
    let ns = cluster.namespace.clone();
    cluster::may(cluster, "patch", TRAINJOB_GROUP, "trainjobs", &ns, Some(name)).await?;
    let job = cluster::trainjob(cluster, name).await?;
    let phase = to_snapshot(&job).map(|s| s.phase).unwrap_or(JobPhase::Running);
    if phase != JobPhase::Running {
        return Err(format!(
            "TrainJob {ns}/{name} is not running ({phase:?}): only a running job can save a checkpoint"
        ));
    }
    let mut record = match job.annotations().get(CHECKPOINT_ANNOTATION) {
        None => RequestRecord::default(),
        Some(text) => RequestRecord::parse(text).map_err(|e| {
            format!("TrainJob {ns}/{name}: {CHECKPOINT_ANNOTATION} does not read ({e}); not touched")
        })?,
    };
    if let Some(pending) = record.pending() {
        crate::output::write(
            format!(
                "TrainJob {ns}/{name}: checkpoint request {} (made {} by {}) is still pending until {}; its acknowledgement answers this one too\n",
                pending.id,
                short_time(pending.requested_at),
                pending.reason,
                short_time(pending.deadline())
            )
            .as_bytes(),
        );
        return Ok(());
    }
    record.ask("", "kubectl trainwarden checkpoint".into(), timeout, now);
    let Some(request) = record.pending().cloned() else { unreachable!("ask leaves a request pending") };
    // The resourceVersion makes the write conditional: a request the controller wrote meanwhile is not
    // overwritten (the API server answers 409 and nothing changes).
    let patch = json!({"metadata": {
        "resourceVersion": job.resource_version(),
        "annotations": {CHECKPOINT_ANNOTATION: record.text()},
    }});
    let params = kube::api::PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    trainjob_api(cluster.client.clone(), Some(&ns))
        .patch(name, &params, &kube::api::Patch::Merge(&patch))
        .await
        .map_err(|e| api_error(&format!("recording the checkpoint request on TrainJob {ns}/{name}"), &e))?;
    crate::output::write(
        format!(
            "TrainJob {ns}/{name}: checkpoint request {} recorded; the controller puts it on the job's pods and waits {} for the acknowledgement (`kubectl trainwarden explain {name} -n {ns}` shows the outcome)\n",
            request.id,
            span(timeout.as_secs_f64())
        )
        .as_bytes(),
    );
    Ok(())
}
