//! Checkpoint requests (sdk/python/PROTOCOL.md): the `checkpoint` action and the first phase of a `suspend`
//! with `checkpointFirst`, plus the settling of requests no intent waits on (a manual one, or one whose rule
//! resolved meanwhile).
//!
//! The request is kept in two places, both written here only: the TrainJob's record
//! ([`CHECKPOINT_ANNOTATION`]: the last id, the request and the intents waiting on it, its outcome), which a
//! restarted or new leader reads back, so a request in flight is joined, never written again; and the
//! annotation [`CHECKPOINT_REQUEST_ANNOTATION`] on every unfinished pod of the TrainJob's JobSet, which the pods
//! read through a downward-API volume. Which pods: labelled with the JobSet's name **and** the uid of the
//! JobSet this TrainJob controls, so a pod of another job, or of a deleted TrainJob of the same name, is never
//! touched. A settled request leaves the pods first, then the record says how it ended, so a leader lost in
//! between settles it again (idempotent).

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{info, warn};
use trainwarden_core::describe::Notice;
use trainwarden_core::{
    ActionIntent, CHECKPOINT_ANNOTATION, CHECKPOINT_REQUEST_ANNOTATION, CheckpointRequest, JobPhase,
    PolicyDuration, ReportedCheckpoint, RequestOutcome, RequestRecord, Timestamp,
};
use trainwarden_kube::trainjob::to_snapshot;

use super::super::events::object_reference;
use super::super::{ActionError, Executor, Target};
use crate::metrics::{ApiOperation, CheckpointLabels};
use crate::sources::gpu_metrics::JOBSET_NAME_LABEL;

/// The label JobSet sets on its pods to the JobSet's uid (its name is `JOBSET_NAME_LABEL`, which Trainer
/// sets to the TrainJob's name).
const JOBSET_UID_LABEL: &str = "jobset.sigs.k8s.io/jobset-uid";

fn jobset_resource() -> ApiResource {
    ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    }
}

/// Where an intent's checkpoint stands.
pub(in crate::executor) enum Asked {
    /// Request `.0` made (or joined) and not answered: ask again at its deadline `.1`, or when the job
    /// answers.
    Waiting(u64, Timestamp),
    /// Settled: the request and how it ended.
    Settled(CheckpointRequest, RequestOutcome),
}

/// The TrainJob's request record; an unreadable one is logged and started afresh (ids follow the clock, so
/// the next one is still new to the job).
fn record_of(job: &DynamicObject) -> RequestRecord {
    let Some(text) = job.annotations().get(CHECKPOINT_ANNOTATION) else { return RequestRecord::default() };
    RequestRecord::parse(text).unwrap_or_else(|e| {
        warn!(job = %job.name_any(), error = %e, "the TrainJob's checkpoint record does not read; starting a new one");
        RequestRecord::default()
    })
}

/// How `request` stands on `job` as read at `now`: answered by the checkpoint its report names, timed out,
/// withdrawn (the job no longer runs), or still pending (`None`).
fn judge(request: &CheckpointRequest, job: &DynamicObject, now: Timestamp) -> Option<RequestOutcome> {
    let snapshot = to_snapshot(job).ok();
    let reported =
        snapshot.as_ref().and_then(|s| s.sample.as_ref()).and_then(|s| ReportedCheckpoint::of(&s.metrics));
    let judged = request.judge(reported, now);
    if matches!(judged, Some(RequestOutcome::Acknowledged { .. })) {
        return judged;
    }
    let stopped = match snapshot.map(|s| s.phase) {
        Some(JobPhase::Suspended) => Some("the TrainJob was suspended"),
        Some(JobPhase::Complete) => Some("the TrainJob completed"),
        Some(JobPhase::Failed) => Some("the TrainJob failed"),
        _ => None,
    };
    match stopped {
        Some(why) => Some(RequestOutcome::Withdrawn { at: now, why: why.into() }),
        None => judged,
    }
}

/// What a pod's spec says about the request reaching it: whether it mounts its annotations through a
/// downward-API volume.
fn mounts_annotations(pod: &Pod) -> bool {
    pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()).any(|v| {
        v.downward_api
            .iter()
            .flat_map(|d| d.items.iter().flatten())
            .any(|item| item.field_ref.as_ref().is_some_and(|f| f.field_path == "metadata.annotations"))
    })
}

/// What the pods of a TrainJob were found like at a sync.
#[derive(Debug, Default)]
pub(in crate::executor) struct PodsSynced {
    /// Unfinished pods of the TrainJob's JobSet.
    pub pods: usize,
    /// Of them, those that mount their annotations (the request can reach them).
    pub mounting: usize,
    /// Pods whose annotation was written or removed now.
    pub patched: usize,
}

impl Executor {
    /// Asks for the checkpoint `intent` waits on, or goes on asking: a new request (or the one in flight,
    /// joined) written to the TrainJob's record and its pods; on a later call, the request judged against
    /// the TrainJob as read now and settled once answered, timed out or withdrawn. `reason` is what the
    /// pods' annotation says.
    pub(in crate::executor) async fn ask_checkpoint(
        &self,
        target: &Target<'_>,
        intent: &ActionIntent,
        timeout: PolicyDuration,
        now: Timestamp,
    ) -> Result<Asked, ActionError> {
        let job = target.job;
        let mut record = record_of(job);
        if let Some(request) = record.request_of(&intent.id).cloned() {
            if let Some(outcome) = record.outcome.clone() {
                return Ok(Asked::Settled(request, outcome));
            }
            if let Some(outcome) = judge(&request, job, now) {
                self.settle_request(target.api, job, record, &request, outcome.clone()).await?;
                return Ok(Asked::Settled(request, outcome));
            }
            // New pods since the request (a JobSet restart) get it too.
            self.sync_pods(job, Some(&request)).await?;
            return Ok(Asked::Waiting(request.id, request.deadline()));
        }
        let reason = format!("{}: {}", target.by, target.summary);
        let new = record.ask(&intent.id, reason, timeout, now);
        let Some(request) = record.pending().cloned() else { unreachable!("ask leaves a request pending") };
        let text = record.text();
        self.apply_to_job(target.api, job, &[(CHECKPOINT_ANNOTATION, &text)], None).await?;
        let synced = self.sync_pods(job, Some(&request)).await?;
        if new {
            self.metrics.checkpoint_requests.get_or_create(&CheckpointLabels { outcome: "requested" }).inc();
            let what = format!(
                "checkpoint request {} on {} of its pods, acknowledgement awaited for {}",
                request.id,
                synced.pods,
                trainwarden_core::fmt_span(request.timeout_seconds as f64)
            );
            self.publish(&target.reference, &Notice::checkpoint_requested(&target.by, &what, target.summary))
                .await;
            info!(job = %intent.job, id = request.id, pods = synced.pods, "checkpoint requested");
        } else {
            info!(job = %intent.job, id = request.id, intent = %intent.id, "joined the checkpoint request in flight");
        }
        Ok(Asked::Waiting(request.id, request.deadline()))
    }

    /// Settles `request` with `outcome`: the pods' annotation removed, then the record written, an Event (and
    /// the metrics) saying how it ended.
    pub(in crate::executor) async fn settle_request(
        &self,
        api: &Api<DynamicObject>,
        job: &DynamicObject,
        mut record: RequestRecord,
        request: &CheckpointRequest,
        outcome: RequestOutcome,
    ) -> Result<(), ActionError> {
        let synced = self.sync_pods(job, None).await?;
        if !record.settle(request.id, outcome.clone()) {
            return Ok(());
        }
        let text = record.text();
        self.apply_to_job(api, job, &[(CHECKPOINT_ANNOTATION, &text)], None).await?;
        self.metrics.checkpoint_requests.get_or_create(&CheckpointLabels { outcome: outcome.as_str() }).inc();
        let by = request_by(request);
        let reference = object_reference(job);
        match &outcome {
            RequestOutcome::Acknowledged { step, at } => {
                let after = ack_seconds(request, *at);
                self.metrics.checkpoint_ack_seconds.observe(after);
                info!(job = %job.name_any(), id = request.id, step, after_seconds = after, "checkpoint acknowledged");
                self.publish(&reference, &Notice::checkpoint_saved(&by, request.id, *step, after)).await;
            }
            RequestOutcome::TimedOut { .. } => {
                let hint = self.timeout_hint(job, &synced);
                warn!(job = %job.name_any(), id = request.id, hint, "checkpoint request timed out");
                let timeout = request.timeout_seconds as f64;
                self.publish(&reference, &Notice::checkpoint_timed_out(&by, request.id, timeout, &hint))
                    .await;
            }
            RequestOutcome::Withdrawn { why, .. } => {
                info!(job = %job.name_any(), id = request.id, why, "checkpoint request withdrawn");
            }
        }
        Ok(())
    }

    /// Why a request may not have been answered, for its timeout Event (PROTOCOL.md §5): the pods do not
    /// mount their annotations, or the job never reported progress.
    fn timeout_hint(&self, job: &DynamicObject, synced: &PodsSynced) -> String {
        let reported = to_snapshot(job).ok().is_some_and(|s| s.sample.is_some());
        let mut hints = Vec::new();
        if synced.pods == 0 {
            hints.push("no running pod of the TrainJob was found".to_string());
        } else if synced.mounting == 0 {
            hints.push(format!(
                "none of its {} pods mounts metadata.annotations through a downward-API volume, so the request could not reach the job (see examples/checkpoint/)",
                synced.pods
            ));
        }
        if !reported {
            hints.push(
                "the job has never reported status.trainerStatus, so no acknowledgement could come back"
                    .into(),
            );
        }
        if hints.is_empty() { String::new() } else { format!(" ({})", hints.join("; ")) }
    }

    /// Brings the annotation of every unfinished pod of `job`'s JobSet in line with `request` (`None`:
    /// removed). A pod gone meanwhile is not an error.
    pub(in crate::executor) async fn sync_pods(
        &self,
        job: &DynamicObject,
        request: Option<&CheckpointRequest>,
    ) -> Result<PodsSynced, ActionError> {
        let mut synced = PodsSynced::default();
        let (Some(ns), Some(uid)) = (job.namespace(), job.uid()) else { return Ok(synced) };
        let name = job.name_any();
        let jobsets: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &jobset_resource());
        let jobset = match self.call(ApiOperation::GetJobset, || jobsets.get_opt(&name)).await {
            Ok(found) => found,
            // No JobSet API (JobSet not installed): no pods to reach.
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(ActionError::call(format!("reading JobSet {ns}/{name}"), e)),
        };
        let controlled = jobset
            .filter(|js| js.owner_references().iter().any(|o| o.controller == Some(true) && o.uid == uid));
        let Some(jobset_uid) = controlled.and_then(|js| js.uid()) else { return Ok(synced) };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let params = ListParams::default()
            .labels(&format!("{JOBSET_NAME_LABEL}={name},{JOBSET_UID_LABEL}={jobset_uid}"));
        let list = self
            .call(ApiOperation::ListPods, || pods.list(&params))
            .await
            .map_err(|e| ActionError::call(format!("listing the pods of JobSet {ns}/{name}"), e))?;
        let want = request.map(CheckpointRequest::pod_annotation);
        for pod in &list.items {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            synced.pods += 1;
            synced.mounting += usize::from(mounts_annotations(pod));
            let have = pod.annotations().get(CHECKPOINT_REQUEST_ANNOTATION);
            if have == want.as_ref() {
                continue;
            }
            let value = want.as_ref().map_or(Value::Null, |w| Value::String(w.clone()));
            let patch = json!({"metadata": {"annotations": {CHECKPOINT_REQUEST_ANNOTATION: value}}});
            let pod_name = pod.name_any();
            let (merge, params) = (Patch::Merge(&patch), PatchParams::default());
            match self.call(ApiOperation::PatchPod, || pods.patch(&pod_name, &params, &merge)).await {
                Ok(_) => synced.patched += 1,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(ActionError::call(format!("annotating pod {ns}/{pod_name}"), e)),
            }
        }
        Ok(synced)
    }

    /// Brain-initiated work on a TrainJob's pending request (see [`crate::messages::Work::Checkpoint`]).
    pub(in crate::executor) async fn checkpoint_work(&self, work: &crate::messages::CheckpointWork) {
        use crate::messages::CheckpointWorkKind;
        let api = trainwarden_kube::trainjob::trainjob_api(self.client.clone(), Some(&work.job.namespace));
        let job = match self.call(ApiOperation::GetTrainjob, || api.get_opt(&work.job.name)).await {
            Ok(Some(job)) => job,
            Ok(None) => return,
            Err(e) => {
                warn!(job = %work.job, error = %e, "cannot read the TrainJob for its checkpoint request");
                return;
            }
        };
        if work.uid.is_some() && job.uid() != work.uid {
            return;
        }
        let record = record_of(&job);
        let Some(request) = record.pending().filter(|r| r.id == work.id).cloned() else { return };
        let result = match work.kind {
            CheckpointWorkKind::SyncPods => self.sync_pods(&job, Some(&request)).await.map(|_| ()),
            CheckpointWorkKind::Settle => match judge(&request, &job, Timestamp::now()) {
                Some(outcome) => self.settle_request(&api, &job, record, &request, outcome).await,
                None => Ok(()),
            },
        };
        if let Err(e) = result
            && !e.lost_leadership()
        {
            warn!(job = %work.job, id = work.id, error = %e, "checkpoint request work failed; the brain tries again");
        }
    }
}

/// Seconds from `request`'s write to its acknowledgement observed at `at`.
pub(in crate::executor) fn ack_seconds(request: &CheckpointRequest, at: Timestamp) -> f64 {
    (at.as_millisecond() - request.requested_at.as_millisecond()).max(0) as f64 / 1000.0
}

/// Who a request's Events name: its reason's `policy (rule)` part, or the whole reason (`kubectl trainwarden
/// checkpoint by …`).
fn request_by(request: &CheckpointRequest) -> String {
    request.reason.split_once(": ").map_or(request.reason.clone(), |(by, _)| by.to_string())
}
