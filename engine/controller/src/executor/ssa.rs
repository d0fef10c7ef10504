//! Server-side apply with trainwarden's field manager. An apply removes fields the manager applied before
//! and omits now, so each apply re-states everything trainwarden owns on the object (read from
//! `managedFields`): its annotations, and `spec.suspend` / `spec.trainer.numNodes` if it set them. Also the
//! `trainwarden.dev/last-action` record that makes a repeated intent recognisable. Every body names the
//! object it was read as (`metadata.uid`), so a TrainJob replaced since is not written.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use trainwarden_core::ActionIntent;
use trainwarden_kube::FIELD_MANAGER;
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, TRAINJOB_KIND, TRAINJOB_VERSION};

use super::{ActionError, Executor, RECORDED_INTENTS};
use crate::INTENTS_ANNOTATION;
use crate::metrics::ApiOperation;

/// The fields trainwarden's field manager owns on an object, from its `managedFields`.
#[derive(Debug, Default, PartialEq)]
pub struct OwnedFields {
    /// Annotation keys trainwarden has applied.
    pub annotations: Vec<String>,
    /// Whether trainwarden has applied `spec.suspend`.
    pub suspend: bool,
    /// Whether trainwarden has applied `spec.trainer.numNodes` (a scale).
    pub num_nodes: bool,
}

/// What trainwarden's field manager (its `Apply` entries) owns on `obj`, so the next apply re-states it.
pub fn owned_fields(obj: &DynamicObject) -> OwnedFields {
    let mut owned = OwnedFields::default();
    for entry in obj.metadata.managed_fields.iter().flatten() {
        if entry.manager.as_deref() != Some(FIELD_MANAGER) || entry.operation.as_deref() != Some("Apply") {
            continue;
        }
        let Some(fields) = entry.fields_v1.as_ref().map(|f| &f.0) else { continue };
        if let Some(Value::Object(annotations)) = fields.pointer("/f:metadata/f:annotations") {
            owned
                .annotations
                .extend(annotations.keys().filter_map(|k| k.strip_prefix("f:").map(str::to_string)));
        }
        owned.suspend |= fields.pointer("/f:spec/f:suspend").is_some();
        owned.num_nodes |= fields.pointer("/f:spec/f:trainer/f:numNodes").is_some();
    }
    owned
}

pub(super) fn spec_bool(obj: &DynamicObject, pointer: &str) -> Option<bool> {
    obj.data.pointer(pointer).and_then(Value::as_bool)
}

/// The `trainwarden.dev/last-action` annotation: what was done, why, and the intent id (idempotence).
/// With the GPU-hours (and dollars) a suspension frees when they can be estimated, for `kubectl trainwarden
/// get`'s SAVED column.
pub(super) fn last_action(intent: &ActionIntent) -> String {
    let mut record = json!({
        "id": intent.id,
        "action": intent.action.kind(),
        "policy": format!("{} {}", intent.policy.kind, intent.policy),
        "rule": intent.rule,
        "reason": truncate(&intent.reason.summary, 512),
        "at": intent.at.to_string(),
    });
    if let Some(s) = &intent.savings {
        record["gpuHours"] = json!((s.gpu_hours * 100.0).round() / 100.0);
        if let Some(d) = s.dollars {
            record["dollars"] = json!(d.round());
        }
    }
    record.to_string()
}

/// The intent ids in a TrainJob's `trainwarden.dev/intents` record (empty when absent or unreadable).
pub(super) fn performed_intents(job: &DynamicObject) -> Vec<String> {
    job.annotations()
        .get(INTENTS_ANNOTATION)
        .and_then(|v| serde_json::from_str::<Vec<String>>(v).ok())
        .unwrap_or_default()
}

/// The record with `id` added (the oldest dropped beyond [`RECORDED_INTENTS`]).
pub(super) fn intents_with(job: &DynamicObject, id: &str) -> String {
    let mut ids = performed_intents(job);
    ids.retain(|i| i != id);
    ids.push(id.to_string());
    if ids.len() > RECORDED_INTENTS {
        ids.drain(..ids.len() - RECORDED_INTENTS);
    }
    Value::from(ids).to_string()
}

pub(super) fn last_action_id(annotation: &str) -> Option<String> {
    serde_json::from_str::<Value>(annotation).ok()?.get("id")?.as_str().map(str::to_string)
}

pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

impl Executor {
    /// The apply body that re-states what trainwarden owns on the TrainJob plus `annotations`.
    pub(super) fn owned_state(&self, job: &DynamicObject, annotations: &[(&str, &str)]) -> Value {
        self.owned_state_without(job, annotations, &[])
    }

    /// [`Executor::owned_state`] without the annotations in `drop` (an apply that omits a field trainwarden
    /// applied before removes it).
    pub(super) fn owned_state_without(
        &self,
        job: &DynamicObject,
        annotations: &[(&str, &str)],
        drop: &[&str],
    ) -> Value {
        let owned = owned_fields(job);
        let mut merged: BTreeMap<String, String> = BTreeMap::new();
        for key in owned.annotations.iter().filter(|k| !drop.contains(&k.as_str())) {
            if let Some(v) = job.annotations().get(key) {
                merged.insert(key.clone(), v.clone());
            }
        }
        for (k, v) in annotations {
            merged.insert(k.to_string(), v.to_string());
        }
        let mut body = json!({
            "apiVersion": format!("{TRAINJOB_GROUP}/{TRAINJOB_VERSION}"),
            "kind": TRAINJOB_KIND,
            "metadata": {"name": job.name_any(), "namespace": job.namespace(), "annotations": merged},
        });
        // A precondition, not a change: the API server refuses the apply (409) if the object by that name is
        // another one by now (deleted and created again since it was read), at no extra read.
        if let Some(uid) = job.uid() {
            body["metadata"]["uid"] = json!(uid);
        }
        if owned.suspend
            && let Some(s) = spec_bool(job, "/spec/suspend")
        {
            body["spec"]["suspend"] = json!(s);
        }
        if owned.num_nodes
            && let Some(n) = job.data.pointer("/spec/trainer/numNodes")
        {
            body["spec"]["trainer"]["numNodes"] = n.clone();
        }
        body
    }

    pub(super) async fn apply_to_job(
        &self,
        api: &Api<DynamicObject>,
        job: &DynamicObject,
        annotations: &[(&str, &str)],
        spec: Option<Value>,
    ) -> Result<(), ActionError> {
        let mut body = self.owned_state(job, annotations);
        if let Some(Value::Object(spec)) = spec {
            for (k, v) in spec {
                body["spec"][k] = v;
            }
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let name = job.name_any();
        let patch = Patch::Apply(&body);
        self.call(ApiOperation::PatchTrainjob, || api.patch(&name, &params, &patch))
            .await
            .map(|_| ())
            .map_err(|e| ActionError::call("writing the TrainJob", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_with_managed_fields(fields: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "j", "namespace": "ns",
                "annotations": {"trainwarden.dev/last-action": "{}", "team": "ml"},
                "managedFields": [
                    {"manager": "trainwarden", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields},
                    {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:annotations": {"f:team": {}}}}}
                ]
            },
            "spec": {"suspend": true, "trainer": {"numNodes": 2}}
        }))
        .unwrap()
    }

    #[test]
    fn owned_fields_come_from_our_apply_entry_only() {
        let job = job_with_managed_fields(json!({
            "f:metadata": {"f:annotations": {"f:trainwarden.dev/last-action": {}}},
            "f:spec": {"f:suspend": {}}
        }));
        let owned = owned_fields(&job);
        assert_eq!(
            owned,
            OwnedFields {
                annotations: vec!["trainwarden.dev/last-action".into()],
                suspend: true,
                num_nodes: false
            }
        );
    }

    #[test]
    fn last_action_ids_round_trip_and_garbage_is_no_id() {
        let v = json!({"id": "a:b:c", "action": "suspend"}).to_string();
        assert_eq!(last_action_id(&v).as_deref(), Some("a:b:c"));
        assert_eq!(last_action_id("not json"), None);
        assert_eq!(last_action_id("{\"id\": 3}"), None);
    }

    #[test]
    fn the_intents_record_keeps_the_latest_ids_once_each() {
        let mut job = job_with_managed_fields(json!({}));
        assert!(performed_intents(&job).is_empty());
        for i in 0..20 {
            let record = intents_with(&job, &format!("id{}", i % 18));
            job.annotations_mut().insert(INTENTS_ANNOTATION.into(), record);
        }
        let ids = performed_intents(&job);
        assert_eq!(ids.len(), RECORDED_INTENTS);
        assert_eq!(ids.last().map(String::as_str), Some("id1"));
        assert_eq!(ids.iter().filter(|i| *i == "id1").count(), 1, "a repeated id moves to the end");
        job.annotations_mut().insert(INTENTS_ANNOTATION.into(), "not json".into());
        assert!(performed_intents(&job).is_empty());
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("ééééé", 6), "é...");
        assert_eq!(truncate("short", 10), "short");
    }
}
