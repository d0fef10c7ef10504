//! Kubernetes Events on TrainJobs: every firing, resolution and action is recorded on the job it concerns.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder};
use tracing::warn;
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, TRAINJOB_KIND, TRAINJOB_VERSION, trainjob_api};

use super::Executor;
use super::ssa::truncate;
use crate::messages::{ActionResult, TrainJobEvent};
use crate::metrics::{ActionLabel, ApiOperation, ModeLabel};
use trainwarden_core::describe::Notice;

impl Executor {
    pub(super) async fn record_event(&self, a: &TrainJobEvent) {
        // The object the evaluation loop saw (one API round trip less before a firing's suspension); read
        // first only when its uid is not known.
        if let Some(uid) = &a.uid {
            let reference = trainjob_reference(
                a.job.name.clone(),
                Some(a.job.namespace.clone()),
                Some(uid.clone()),
                None,
            );
            // A recorder of its own, so this Event is created, not merged: kube's Recorder turns an Event with
            // the same reason and object as one of the last 6 minutes into a count on that one, keeping its
            // note, and without a resourceVersion every Event of the job would match (two rules firing on one
            // report would leave one note). With a GET, the object's resourceVersion kept them apart.
            let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
            return self.publish_with(&recorder, &reference, &EventText::from(&a.notice)).await;
        }
        let api = trainjob_api(self.client.clone(), Some(&a.job.namespace));
        match self.call(ApiOperation::GetTrainjob, || api.get(&a.job.name)).await {
            Ok(job) => self.publish(&object_reference(&job), &a.notice).await,
            Err(e) if e.is_not_found() => {}
            Err(e) => warn!(job = %a.job, error = %e, "cannot record an Event"),
        }
    }

    /// Records `notice` on the object `reference` names.
    pub(super) async fn publish(&self, reference: &ObjectReference, notice: &Notice) {
        self.publish_with(&self.recorder, reference, &EventText::from(notice)).await;
    }

    /// Records an Event whose reason is not trainwarden's own: the `event` action's, which its policy names.
    pub(super) async fn publish_text(&self, reference: &ObjectReference, text: &EventText<'_>) {
        self.publish_with(&self.recorder, reference, text).await;
    }

    async fn publish_with(&self, recorder: &Recorder, reference: &ObjectReference, text: &EventText<'_>) {
        let EventText { warning, reason, action, note } = *text;
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
        let result = tokio::time::timeout(self.timeout, recorder.publish(&event, reference)).await;
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

/// An Event's type, reason, action and note as recorded.
#[derive(Clone, Copy)]
pub(super) struct EventText<'a> {
    pub(super) warning: bool,
    pub(super) reason: &'a str,
    pub(super) action: &'a str,
    pub(super) note: &'a str,
}

impl<'a> From<&'a Notice> for EventText<'a> {
    fn from(n: &'a Notice) -> Self {
        EventText {
            warning: n.reason.is_warning(),
            reason: n.reason.as_str(),
            action: n.reason.action(),
            note: &n.note,
        }
    }
}

pub(super) fn object_reference(job: &DynamicObject) -> ObjectReference {
    trainjob_reference(job.name_any(), job.namespace(), job.uid(), job.resource_version())
}

/// A TrainJob as an Event's `regarding` object.
fn trainjob_reference(
    name: String,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{TRAINJOB_GROUP}/{TRAINJOB_VERSION}")),
        kind: Some(TRAINJOB_KIND.into()),
        name: Some(name),
        namespace,
        uid,
        resource_version,
        ..ObjectReference::default()
    }
}
