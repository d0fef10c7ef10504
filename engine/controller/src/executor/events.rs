//! Kubernetes Events on TrainJobs: every firing, resolution and action is recorded on the job it concerns.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::events::{Event as KubeEvent, EventType};
use tracing::warn;
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, TRAINJOB_KIND, TRAINJOB_VERSION, trainjob_api};

use super::Executor;
use super::ssa::truncate;
use crate::messages::{ActionResult, TrainJobEvent};
use crate::metrics::{ActionLabel, ApiOperation, ModeLabel};

impl Executor {
    pub(super) async fn record_event(&self, a: &TrainJobEvent) {
        // The object the evaluation loop saw (one API round trip less before a firing's suspension); read
        // first only when its uid is not known.
        if let Some(uid) = &a.uid {
            let reference = ObjectReference {
                api_version: Some(format!("{TRAINJOB_GROUP}/{TRAINJOB_VERSION}")),
                kind: Some(TRAINJOB_KIND.into()),
                name: Some(a.job.name.clone()),
                namespace: Some(a.job.namespace.clone()),
                uid: Some(uid.clone()),
                ..ObjectReference::default()
            };
            return self.publish(&reference, a.warning, &a.reason, &a.action, &a.note).await;
        }
        let api = trainjob_api(self.client.clone(), Some(&a.job.namespace));
        match self.call(ApiOperation::GetTrainjob, || api.get(&a.job.name)).await {
            Ok(job) => self.publish(&object_reference(&job), a.warning, &a.reason, &a.action, &a.note).await,
            Err(e) if e.is_not_found() => {}
            Err(e) => warn!(job = %a.job, error = %e, "cannot record an Event"),
        }
    }

    pub(super) async fn publish(
        &self,
        reference: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        // Per write, like every API call of the executor.
        if !self.leader.is_leader() {
            return;
        }
        let event = KubeEvent {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.into(),
            // events.k8s.io/v1 limits the note to 1 kB.
            note: Some(truncate(note, 1000)),
            action: action.into(),
            secondary: None,
        };
        self.metrics.api_request(ApiOperation::CreateEvent);
        let started = std::time::Instant::now();
        let result = tokio::time::timeout(self.timeout, self.recorder.publish(&event, reference)).await;
        self.metrics.api_request_took(ApiOperation::CreateEvent, started.elapsed());
        match result {
            Ok(Ok(())) => self.metrics.action(ActionLabel::EventRecord, ModeLabel(None), ActionResult::Done),
            Ok(Err(e)) => {
                self.metrics.api_error(ApiOperation::CreateEvent);
                warn!(error = %e, reason, "recording an Event failed");
            }
            Err(_) => {
                self.metrics.api_error(ApiOperation::CreateEvent);
                warn!(reason, "recording an Event timed out");
            }
        }
    }
}

pub(super) fn object_reference(job: &DynamicObject) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{TRAINJOB_GROUP}/{TRAINJOB_VERSION}")),
        kind: Some(TRAINJOB_KIND.into()),
        name: Some(job.name_any()),
        namespace: job.namespace(),
        uid: job.uid(),
        resource_version: job.resource_version(),
        ..ObjectReference::default()
    }
}
