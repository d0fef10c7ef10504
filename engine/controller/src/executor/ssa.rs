//! Server-side apply with trainwarden's field manager. An apply removes fields the manager applied before
//! and omits now, so each apply re-states everything trainwarden owns on the object (read from
//! `managedFields`): its annotations, and `spec.suspend` / `spec.trainer.numNodes` if it set them. Also the
//! `trainwarden.dev/last-action` record that makes a repeated intent recognisable.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use trainwarden_core::ActionIntent;
use trainwarden_kube::FIELD_MANAGER;
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, TRAINJOB_KIND, TRAINJOB_VERSION};

use super::{ActionError, Executor};
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
pub(super) fn last_action(intent: &ActionIntent) -> String {
    json!({
        "id": intent.id,
        "action": intent.action.kind(),
        "policy": format!("{} {}", intent.policy.kind, intent.policy),
        "rule": intent.rule,
        "reason": truncate(&intent.reason.summary, 512),
        "at": intent.at.to_string(),
    })
    .to_string()
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
        let owned = owned_fields(job);
        let mut merged: BTreeMap<String, String> = BTreeMap::new();
        for key in &owned.annotations {
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
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("ééééé", 6), "é...");
        assert_eq!(truncate("short", 10), "short");
    }
}
