//! A whole watched TrainJob: its identity, phase, labels, GPUs and the progress it carries (upstream
//! `status.trainerStatus` first, then the RHOAI annotation).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::input::sample::{JobKey, JobPhase, JobSnapshot, ProgressSample};

use crate::time::Timestamp;

use super::NormalizeError;
use super::TRAINER_STATUS_ANNOTATION;
use super::json::{Snippet, json_kind, missing, opt_number, opt_object, opt_str, opt_time, type_error};
use super::rhoai::from_annotation_collecting;
use super::trainer_status::from_trainer_status_collecting;

/// Error path of the RHOAI annotation ([`TRAINER_STATUS_ANNOTATION`]) inside a TrainJob.
pub(super) const ANNOTATION_PATH: &str = "metadata.annotations[\"trainer.opendatahub.io/trainerStatus\"]";
pub(super) const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
pub(super) const KIND: &str = "TrainJob";
pub(super) const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// Normalizes a whole TrainJob object as a watch delivers it (`trainer.kubeflow.org/v1alpha1`, `TrainJob`).
///
/// - key: `metadata.namespace` (absent or empty: `"default"`) and `metadata.name` (required);
/// - `annotations` leaves out [`TRAINER_STATUS_ANNOTATION`] (it is parsed into `sample` instead);
/// - phase: `Failed`, then `Complete`, if such a condition is `True`; else `Suspended` if `spec.suspend` or
///   condition `Suspended=True`; else `Running`;
/// - gpus: `spec.trainer.numNodes` (default 1) × the sum of `*/gpu` quantities in
///   `spec.trainer.resourcesPerNode.limits` (or `requests` when limits have none); `None` without any;
/// - running_since: `lastTransitionTime` of a `Suspended=False` condition (resumed), else `created_at`;
/// - sample: `status.trainerStatus` when present, else the annotation, else `None`;
/// - unknown_fields: the keys of that progress report its format does not define (a misspelt
///   `trainMetricz`): the job is read without them, and the caller decides what to say (a recorded stream
///   rejects the line, the controller counts them and records a warning Event).
///
/// `apiVersion` and `kind` may be absent (typed clients strip them) but must match when present. A malformed
/// progress report fails the whole snapshot.
pub fn from_trainjob(obj: &Value) -> Result<JobSnapshot, NormalizeError> {
    let root = match obj {
        Value::Object(o) => o,
        other => {
            return Err(type_error("$".to_owned(), "a TrainJob object", json_kind(other)));
        }
    };
    for (field, want) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        match opt_str(root.get(field), || field.to_owned())? {
            Some(got) if got != want => {
                return Err(NormalizeError::new(field, format!("expected {want:?}, found {}", Snippet(got))));
            }
            _ => {}
        }
    }

    let meta =
        opt_object(root.get("metadata"), "metadata")?.ok_or_else(|| missing("metadata.name".to_owned()))?;
    let name = match opt_str(meta.get("name"), || "metadata.name".to_owned())? {
        Some("") => return Err(NormalizeError::new("metadata.name", "empty name")),
        Some(n) => n,
        None => return Err(missing("metadata.name".to_owned())),
    };
    let namespace =
        opt_str(meta.get("namespace"), || "metadata.namespace".to_owned())?.filter(|ns| !ns.is_empty());
    let labels = string_map(meta.get("labels"), "metadata.labels", None)?;
    let annotations =
        string_map(meta.get("annotations"), "metadata.annotations", Some(TRAINER_STATUS_ANNOTATION))?;
    let created_at = opt_time(meta.get("creationTimestamp"), || "metadata.creationTimestamp".to_owned())?;

    let spec = opt_object(root.get("spec"), "spec")?;
    let status = opt_object(root.get("status"), "status")?;

    let suspend = match spec.map(|s| s.get("suspend")) {
        None | Some(None | Some(Value::Null)) => false,
        Some(Some(Value::Bool(b))) => *b,
        Some(Some(other)) => {
            return Err(type_error("spec.suspend".to_owned(), "a boolean", json_kind(other)));
        }
    };
    let conditions = Conditions::read(status)?;
    let gpus = gpus(spec)?;

    let mut unknown_fields = Vec::new();
    let sample = match status.and_then(|s| s.get("trainerStatus")) {
        Some(ts) if !ts.is_null() => {
            Some(from_trainer_status_collecting(ts, "status.trainerStatus", &mut unknown_fields)?)
        }
        _ => match opt_str(meta.get("annotations").and_then(|a| a.get(TRAINER_STATUS_ANNOTATION)), || {
            ANNOTATION_PATH.to_owned()
        })? {
            Some(json) => Some(from_annotation_collecting(json, ANNOTATION_PATH, &mut unknown_fields)?),
            None => None,
        },
    };

    Ok(TrainJobRead {
        namespace,
        name,
        labels,
        annotations,
        created_at,
        suspend,
        conditions,
        gpus,
        sample,
        unknown_fields,
    }
    .into_snapshot())
}

/// What a reader of a TrainJob found, before the rules that make it a [`JobSnapshot`]: the `Value` reader
/// above and the borrowing one of a stream line (`object_line`) both end here, so those rules are written once.
pub(super) struct TrainJobRead<'a> {
    /// `metadata.namespace`, `None` when absent or empty.
    pub(super) namespace: Option<&'a str>,
    /// `metadata.name`, not empty.
    pub(super) name: &'a str,
    pub(super) labels: BTreeMap<String, String>,
    /// Without [`TRAINER_STATUS_ANNOTATION`].
    pub(super) annotations: BTreeMap<String, String>,
    pub(super) created_at: Option<Timestamp>,
    /// `spec.suspend`.
    pub(super) suspend: bool,
    pub(super) conditions: Conditions,
    pub(super) gpus: Option<f64>,
    pub(super) sample: Option<ProgressSample>,
    pub(super) unknown_fields: Vec<NormalizeError>,
}

impl TrainJobRead<'_> {
    pub(super) fn into_snapshot(self) -> JobSnapshot {
        let conditions = &self.conditions;
        let phase = if conditions.failed {
            JobPhase::Failed
        } else if conditions.complete {
            JobPhase::Complete
        } else if self.suspend || conditions.suspended {
            JobPhase::Suspended
        } else {
            JobPhase::Running
        };
        let kueue_queue = self.labels.get(KUEUE_QUEUE_LABEL).filter(|q| !q.is_empty()).cloned();
        JobSnapshot {
            key: JobKey::new(self.namespace.unwrap_or("default"), self.name),
            running_since: conditions.resumed_at.or(self.created_at),
            labels: self.labels,
            annotations: self.annotations,
            phase,
            gpus: self.gpus,
            kueue_queue,
            created_at: self.created_at,
            sample: self.sample,
            unknown_fields: self.unknown_fields,
        }
    }
}

/// `metadata.labels` / `metadata.annotations`, without `skip`.
pub(super) fn string_map(
    v: Option<&Value>,
    path: &str,
    skip: Option<&str>,
) -> Result<BTreeMap<String, String>, NormalizeError> {
    let mut out = BTreeMap::new();
    let Some(map) = opt_object(v, path)? else {
        return Ok(out);
    };
    for (k, v) in map {
        if Some(k.as_str()) == skip {
            continue;
        }
        match v {
            Value::String(s) => {
                out.insert(k.clone(), s.clone());
            }
            other => {
                return Err(type_error(format!("{path}[{k:?}]"), "a string", json_kind(other)));
            }
        }
    }
    Ok(out)
}

/// What `status.conditions` says.
#[derive(Default)]
pub(super) struct Conditions {
    complete: bool,
    failed: bool,
    suspended: bool,
    /// `lastTransitionTime` of `Suspended=False`.
    resumed_at: Option<Timestamp>,
}

impl Conditions {
    pub(super) fn read(status: Option<&Map<String, Value>>) -> Result<Self, NormalizeError> {
        let mut out = Conditions::default();
        let list = match status.and_then(|s| s.get("conditions")) {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Array(list)) => list,
            Some(other) => {
                return Err(type_error("status.conditions".to_owned(), "an array", json_kind(other)));
            }
        };
        for (i, c) in list.iter().enumerate() {
            let at = |field: &str| format!("status.conditions[{i}]{field}");
            let c = match c {
                Value::Object(c) => c,
                other => return Err(type_error(at(""), "an object", json_kind(other))),
            };
            let ty = opt_str(c.get("type"), || at(".type"))?;
            let st = opt_str(c.get("status"), || at(".status"))?;
            out.see(ty, st, || opt_time(c.get("lastTransitionTime"), || at(".lastTransitionTime")))?;
        }
        Ok(out)
    }

    /// One condition, in list order: `transition_time` is read only for `Suspended=False`.
    pub(super) fn see<E>(
        &mut self,
        ty: Option<&str>,
        status: Option<&str>,
        transition_time: impl FnOnce() -> Result<Option<Timestamp>, E>,
    ) -> Result<(), E> {
        match (ty, status) {
            (Some("Complete"), Some("True")) => self.complete = true,
            (Some("Failed"), Some("True")) => self.failed = true,
            (Some("Suspended"), Some("True")) => {
                self.suspended = true;
                self.resumed_at = None;
            }
            (Some("Suspended"), Some("False")) => {
                self.suspended = false;
                self.resumed_at = transition_time()?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// `numNodes` × accelerators per node, `None` when the spec names no `*/gpu` resource.
pub(super) fn gpus(spec: Option<&Map<String, Value>>) -> Result<Option<f64>, NormalizeError> {
    let Some(trainer) = opt_object(spec.and_then(|s| s.get("trainer")), "spec.trainer")? else {
        return Ok(None);
    };
    let path = "spec.trainer.resourcesPerNode";
    let Some(resources) = opt_object(trainer.get("resourcesPerNode"), path)? else {
        return Ok(None);
    };
    let per_node = match gpu_sum(resources.get("limits"), "spec.trainer.resourcesPerNode.limits")? {
        Some(n) => n,
        None => match gpu_sum(resources.get("requests"), "spec.trainer.resourcesPerNode.requests")? {
            Some(n) => n,
            None => return Ok(None),
        },
    };
    let nodes = opt_number(
        trainer.get("numNodes"),
        || "spec.trainer.numNodes".to_owned(),
        |x| {
            if x >= 0.0 { Ok(x) } else { Err("numNodes must be >= 0") }
        },
    )?
    // The runtime may set numNodes; without it here one node is the best guess.
    .unwrap_or(1.0);
    Ok(Some(nodes * per_node))
}

/// Sum of the `*/gpu` quantities of a resource list; `None` when it has none.
pub(super) fn gpu_sum(v: Option<&Value>, path: &str) -> Result<Option<f64>, NormalizeError> {
    let Some(list) = opt_object(v, path)? else {
        return Ok(None);
    };
    let mut sum = None;
    for (k, q) in list {
        if !k.ends_with("/gpu") {
            continue;
        }
        let at = || format!("{path}[{k:?}]");
        // Accelerator quantities are whole numbers; plain decimal strings ("1") and JSON numbers suffice.
        let n = match q {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => quantity_text(s),
            other => return Err(type_error(at(), "a quantity", json_kind(other))),
        };
        match n.filter(|&n| accepted_quantity(n)) {
            Some(n) => *sum.get_or_insert(0.0) += n,
            None => {
                let shown = match q {
                    Value::String(s) => Snippet(s).to_string(),
                    other => other.to_string(),
                };
                return Err(NormalizeError::new(at(), format!("unsupported quantity {shown}")));
            }
        }
    }
    Ok(sum)
}

/// An accelerator quantity written as a string (`"8"`); `None` when it is not a plain number.
pub(super) fn quantity_text(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok()
}

/// Whether an accelerator quantity is one a job can hold.
pub(super) fn accepted_quantity(n: f64) -> bool {
    n.is_finite() && n >= 0.0
}
