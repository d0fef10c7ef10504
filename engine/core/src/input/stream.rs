//! Recorded progress streams (JSONL), the input of `trainwarden replay` and stream-based tests.
//!
//! Each line is one of:
//! * a full TrainJob object, as a watch delivers it (`apiVersion: trainer.kubeflow.org/v1alpha1`); its time
//!   is its progress sample's `lastUpdatedTime` (else its creation time), but never earlier than the line
//!   before it, since a watch re-delivers objects with an old `trainerStatus` when anything else changes;
//! * the compact form `{"time": RFC3339, "job": "ns/name", "trainerStatus": {...}}` or
//!   `{"time": ..., "job": ..., "annotation": "<json>"}`, optionally with `"phase"` (Running, Suspended,
//!   Complete, Failed), `"labels"`, `"gpus"`, `"gpu"` (the job's GPU readings, see [`crate::input::gpu`]), `"queue"` (the
//!   demand queued behind it in Kueue, see [`crate::input::queue`]), or
//!   `"deleted": true`. A compact line without progress is a heartbeat: time passes, nothing is reported —
//!   which is exactly what a hung job looks like.
//!
//! Each common shape has a reader that borrows from the line: the progress line by hand
//! ([`compact_line`]), the RHOAI line and the progress line's other spellings through serde, a TrainJob through
//! [`object_line`]. A line they decline goes to [`parse_line_general`], through a `serde_json::Value`: the
//! reference they are tested against, and the reader that words every error.
//!
//! Blank lines and lines starting with `#` are skipped. Errors name the line and, for JSON syntax, the column.
//! A key the progress format does not define (inside `trainerStatus`, one of its metrics or the RHOAI
//! annotation's JSON, in either form of line) is an error with its path, e.g. `stream.jsonl:12:
//! trainerStatus.trainMetricz: unknown field; expected one of progressPercentage, …`: a test or replay that
//! silently ignored it would never see the metric it names.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::input::gpu::{self, GpuSample};
use crate::input::json::MapOnly;
use crate::input::queue::{self, QueueDemand};
use crate::input::sample::{JobKey, JobPhase, JobSnapshot, ProgressSample};
use crate::input::{self, NormalizeError};
use crate::input::{compact_line, object_line};
use crate::time::Timestamp;

/// One line of a stream.
// The size difference is deliberate: see `Update`'s comment (boxing it was measured slower).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum StreamRecord {
    /// A whole TrainJob: everything about the job is replaced.
    Object {
        /// Its sample's `lastUpdatedTime` (else its creation time), never earlier than the line before.
        time: Timestamp,
        /// The job as the object describes it (boxed: rare and large, it would make every record as large).
        snapshot: Box<JobSnapshot>,
    },
    /// A compact update of a job. Not boxed: records are made on a decoding thread and dropped on the
    /// evaluating one, and each heap block more per record is one more such hand-over (with glibc's malloc,
    /// measured: a third more time, most of it in the kernel; the CLI now runs on mimalloc, not re-measured).
    Update(Update),
}

impl StreamRecord {
    /// When the record happened.
    pub fn time(&self) -> Timestamp {
        match self {
            StreamRecord::Object { time, .. } => *time,
            StreamRecord::Update(u) => u.time,
        }
    }

    /// The job the record is about.
    pub fn job(&self) -> &JobKey {
        match self {
            StreamRecord::Object { snapshot, .. } => &snapshot.key,
            StreamRecord::Update(u) => &u.job,
        }
    }
}

/// The compact form.
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    pub time: Timestamp,
    pub job: JobKey,
    pub sample: Option<ProgressSample>,
    pub phase: Option<JobPhase>,
    pub labels: Option<BTreeMap<String, String>>,
    pub gpus: Option<f64>,
    /// GPU readings taken at `time`.
    pub gpu: Option<GpuSample>,
    /// The demand queued behind the job in Kueue from `time` on.
    pub queue: Option<QueueDemand>,
    /// The labels of the job's namespace from `time` on, for cluster policies' `namespaceSelector`
    /// (`"namespaceLabels": {"team": "a"}`; a recorder writes them on a job's first line and when they change).
    pub namespace_labels: Option<BTreeMap<String, String>>,
    pub deleted: bool,
}

impl Update {
    /// An update of `job` at `time` that says nothing yet: set what it says.
    pub fn new(time: Timestamp, job: JobKey) -> Self {
        Update {
            time,
            job,
            sample: None,
            phase: None,
            labels: None,
            gpus: None,
            gpu: None,
            queue: None,
            namespace_labels: None,
            deleted: false,
        }
    }
}

/// A bad line: where and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}{}: {message}", column.map(|c| format!(":{c}")).unwrap_or_default())]
pub struct RecordError {
    /// The stream's name.
    pub file: String,
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1, where the JSON syntax or the UTF-8 breaks.
    pub column: Option<usize>,
    /// What is wrong, with the field path.
    pub message: String,
}

/// The compact progress line, borrowed: the fast path of [`parse_line`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CompactProgress<'a> {
    #[serde(borrow)]
    time: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    job: std::borrow::Cow<'a, str>,
    #[serde(borrow, rename = "trainerStatus")]
    trainer_status: MapOnly<input::TrainerStatusWire<'a>>,
}

/// The compact line of a RHOAI job, borrowed: `{"time": …, "job": …, "annotation": "<json>"}`, as the
/// controller's recorder writes it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CompactAnnotation<'a> {
    #[serde(borrow)]
    time: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    job: std::borrow::Cow<'a, str>,
    /// Always escaped (it is JSON in a string), so always copied.
    annotation: String,
}

/// Progress-only compact lines (by far the most common) skip the generic `Value` tree. Anything else, and
/// any line the fast path cannot take, goes through the general path, which also words the errors.
fn parse_compact_fast(line: &str) -> Option<StreamRecord> {
    // Not `read(line).or_else(..)?`: each step copied the reader's result (232 bytes) once more.
    match compact_line::read(line) {
        Some(read) => Some(progress_record(read)),
        None => parse_compact_by_serde(line),
    }
}

/// The compact lines the hand-written reader declines. Kept out of line: inlined, it slowed that reader's
/// path by a percent or two.
#[cold]
#[inline(never)]
fn parse_compact_by_serde(line: &str) -> Option<StreamRecord> {
    match compact_serde(line) {
        Some(read) => Some(progress_record(read)),
        None => compact_annotation(line).map(progress_record),
    }
}

fn progress_record((time, job, sample): (Timestamp, JobKey, ProgressSample)) -> StreamRecord {
    StreamRecord::Update(Update { sample: Some(sample), ..Update::new(time, job) })
}

/// The RHOAI compact line, read as the general path reads it (which reads the annotation the same way).
fn compact_annotation(line: &str) -> Option<(Timestamp, JobKey, ProgressSample)> {
    let MapOnly(wire): MapOnly<CompactAnnotation<'_>> = serde_json::from_str(line).ok()?;
    if crate::input::json::duplicate_key(&wire.annotation).is_some() {
        return None; // the general path words it
    }
    let time = crate::time::parse_timestamp(&wire.time).ok()?;
    let job = JobKey::parse(&wire.job)?;
    let sample = input::from_annotation(&wire.annotation, "annotation").ok()?;
    Some((time, job, sample))
}

/// The progress-only compact line through serde's derived reader: for the spellings the hand-written
/// [`compact_line`] declines (escaped strings, `null`s), and the reference that reader is tested against.
pub(super) fn compact_serde(line: &str) -> Option<(Timestamp, JobKey, ProgressSample)> {
    let MapOnly(wire): MapOnly<CompactProgress<'_>> = serde_json::from_str(line).ok()?;
    let time = crate::time::parse_timestamp(&wire.time).ok()?;
    let job = JobKey::parse(&wire.job)?;
    let sample = input::from_trainer_status_wire(wire.trainer_status.0, "trainerStatus").ok()?;
    Some((time, job, sample))
}

/// Parses one non-empty line. `previous` is the time of the line before (for objects without a time).
pub fn parse_line(
    line: &str,
    source: &str,
    line_no: usize,
    previous: Option<Timestamp>,
) -> Result<StreamRecord, RecordError> {
    // Returned straight from each reader: the progress line is the hot path, and one more `Option` around
    // its 232-byte record was a measurable copy.
    if let Some(record) = parse_compact_fast(line) {
        return Ok(record);
    }
    if let Some(record) = parse_object_fast(line, previous) {
        return Ok(record);
    }
    parse_line_general(line, source, line_no, previous)
}

/// The record `parse_line` takes from a fast reader; `None` when it leaves the line to the general path.
#[cfg(test)]
pub(super) fn read_fast(line: &str, previous: Option<Timestamp>) -> Option<StreamRecord> {
    parse_compact_fast(line).or_else(|| parse_object_fast(line, previous))
}

/// A TrainJob line through [`object_line`].
fn parse_object_fast(line: &str, previous: Option<Timestamp>) -> Option<StreamRecord> {
    // The general path reads a line as a TrainJob when it has one of these keys, so a TrainJob line has one;
    // any other line with one costs a second read.
    if memchr::memmem::find(line.as_bytes(), b"\"apiVersion\"").is_none()
        && memchr::memmem::find(line.as_bytes(), b"\"kind\"").is_none()
    {
        return None;
    }
    object_line::read(line).and_then(|snapshot| object_record(snapshot, previous).ok())
}

/// Any line through a `serde_json::Value`: the reference the fast readers are tested against, and the
/// reader that words every error.
pub(super) fn parse_line_general(
    line: &str,
    source: &str,
    line_no: usize,
    previous: Option<Timestamp>,
) -> Result<StreamRecord, RecordError> {
    let err = |column: Option<usize>, message: String| RecordError {
        file: source.to_string(),
        line: line_no,
        column,
        message,
    };
    let value: Value =
        serde_json::from_str(line).map_err(|e| err(Some(e.column()), format!("invalid JSON: {e}")))?;
    let Value::Object(obj) = &value else {
        return Err(err(None, "expected a JSON object".into()));
    };
    // The `Value` kept the last of two values of one key; the line must say one thing.
    if let Some(duplicate) = crate::input::json::duplicate_key(line) {
        return Err(err(None, duplicate.message()));
    }
    let annotation_text = match obj.get("annotation") {
        Some(Value::String(a)) => Some(("annotation".to_string(), a.as_str())),
        _ => value
            .pointer("/metadata/annotations/trainer.opendatahub.io~1trainerStatus")
            .and_then(Value::as_str)
            .map(|a| (format!("metadata.annotations[{:?}]", input::TRAINER_STATUS_ANNOTATION), a)),
    };
    if let Some((path, text)) = annotation_text
        && let Some(duplicate) = crate::input::json::duplicate_key(text)
    {
        return Err(err(None, format!("{path}.{}", duplicate.message())));
    }
    if obj.contains_key("apiVersion") || obj.contains_key("kind") {
        if value.pointer("/metadata/namespace").and_then(Value::as_str).is_none_or(str::is_empty)
            && value.get("metadata").is_some_and(Value::is_object)
        {
            return Err(err(
                None,
                "metadata.namespace: required (a TrainJob is namespaced, and a watch always delivers it; a line \
                 without one would be judged as namespace default's)"
                    .into(),
            ));
        }
        let snapshot = input::from_trainjob(&value).map_err(|e: NormalizeError| err(None, e.to_string()))?;
        if let Some(unknown) = snapshot.unknown_fields.first() {
            return Err(err(None, unknown.to_string()));
        }
        return object_record(snapshot, previous).map_err(|message| err(None, message.into()));
    }
    for key in obj.keys() {
        if !matches!(
            key.as_str(),
            "time"
                | "job"
                | "trainerStatus"
                | "annotation"
                | "phase"
                | "labels"
                | "gpus"
                | "gpu"
                | "queue"
                | "namespaceLabels"
                | "deleted"
        ) {
            return Err(err(
                None,
                format!(
                    "unknown field {key:?} (expected time, job, trainerStatus, annotation, phase, labels, gpus, gpu, queue, namespaceLabels, deleted)"
                ),
            ));
        }
    }
    let time = match obj.get("time") {
        Some(Value::String(s)) => {
            crate::time::parse_timestamp(s).map_err(|e| err(None, format!("time: {e}")))?
        }
        Some(other) => return Err(err(None, format!("time: expected an RFC 3339 string, got {other}"))),
        None => return Err(err(None, "time: required".into())),
    };
    let job = match obj.get("job") {
        Some(Value::String(s)) => JobKey::parse(s)
            .ok_or_else(|| err(None, format!("job: expected \"namespace/name\", got {s:?}")))?,
        _ => return Err(err(None, "job: required (\"namespace/name\")".into())),
    };
    let sample = match (obj.get("trainerStatus"), obj.get("annotation")) {
        (Some(_), Some(_)) => return Err(err(None, "give trainerStatus or annotation, not both".into())),
        (Some(ts), None) => {
            Some(input::from_trainer_status(ts, "trainerStatus").map_err(|e| err(None, e.to_string()))?)
        }
        (None, Some(Value::String(a))) => {
            Some(input::from_annotation(a, "annotation").map_err(|e| err(None, e.to_string()))?)
        }
        (None, Some(other)) => {
            return Err(err(None, format!("annotation: expected the annotation's JSON string, got {other}")));
        }
        (None, None) => None,
    };
    let phase = match obj.get("phase") {
        None => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "Running" => JobPhase::Running,
            "Suspended" => JobPhase::Suspended,
            "Complete" => JobPhase::Complete,
            "Failed" => JobPhase::Failed,
            other => {
                return Err(err(
                    None,
                    format!("phase: expected Running, Suspended, Complete or Failed, got {other:?}"),
                ));
            }
        }),
        Some(other) => return Err(err(None, format!("phase: expected a string, got {other}"))),
    };
    let string_map = |field: &str| -> Result<Option<BTreeMap<String, String>>, RecordError> {
        match obj.get(field) {
            None => Ok(None),
            Some(Value::Object(m)) => {
                let mut labels = BTreeMap::new();
                for (k, v) in m {
                    let v = v.as_str().ok_or_else(|| err(None, format!("{field}.{k}: expected a string")))?;
                    labels.insert(k.clone(), v.to_string());
                }
                Ok(Some(labels))
            }
            Some(other) => Err(err(None, format!("{field}: expected an object, got {other}"))),
        }
    };
    let labels = string_map("labels")?;
    let namespace_labels = string_map("namespaceLabels")?;
    let gpus = match obj.get("gpus") {
        None => None,
        Some(v) => match v.as_f64() {
            Some(g) if g >= 0.0 => Some(g),
            _ => return Err(err(None, format!("gpus: expected a number >= 0, got {v}"))),
        },
    };
    let gpu = match obj.get("gpu") {
        None => None,
        Some(v) => Some(gpu::from_stream_value(v, time, "gpu").map_err(|e| err(None, e.to_string()))?),
    };
    let queue = match obj.get("queue") {
        None => None,
        Some(v) => Some(queue::from_stream_value(v, "queue").map_err(|e| err(None, e.to_string()))?),
    };
    let deleted = match obj.get("deleted") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(err(None, format!("deleted: expected true or false, got {other}"))),
    };
    Ok(StreamRecord::Update(Update {
        time,
        job,
        sample,
        phase,
        labels,
        gpus,
        gpu,
        queue,
        namespace_labels,
        deleted,
    }))
}

/// A TrainJob line's record. A watch delivers the object on any change (phase, suspend, labels), often with
/// an old trainerStatus, so its sample time is only a lower bound: the line is never placed before the line
/// above it.
fn object_record(snapshot: JobSnapshot, previous: Option<Timestamp>) -> Result<StreamRecord, &'static str> {
    let own = snapshot.sample.as_ref().map(|s| s.updated_at).or(snapshot.created_at);
    let time = match (own, previous) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => a
            .or(b)
            .ok_or("a TrainJob line needs a progress sample or a creationTimestamp to place it in time")?,
    };
    Ok(StreamRecord::Object { time, snapshot: Box::new(snapshot) })
}

/// Parses a whole stream. Every bad line is reported (up to 20), not just the first.
pub fn parse_stream(text: &str, source: &str) -> Result<Vec<StreamRecord>, Vec<RecordError>> {
    let mut records = Vec::new();
    let mut errors = Vec::new();
    let mut previous = None;
    // A byte-order mark opens the text, not the first line (as `StreamLines` reads it).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match parse_line(trimmed, source, i + 1, previous) {
            Ok(r) => {
                previous = Some(r.time());
                records.push(r);
            }
            Err(e) => {
                if errors.len() < 20 {
                    errors.push(e);
                }
            }
        }
    }
    if errors.is_empty() { Ok(records) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_lines_of_both_flavours() {
        let r = parse_line(
            r#"{"time":"2026-11-27T17:00:00Z","job":"fraud/ft","trainerStatus":{"progressPercentage":5,"metrics":[{"name":"loss","value":"2.5"}],"lastUpdatedTime":"2026-11-27T17:00:00Z"},"gpus":8,"labels":{"team":"fraud"}}"#,
            "s.jsonl",
            1,
            None,
        )
        .unwrap();
        let StreamRecord::Update(u) = r else { panic!() };
        assert_eq!(u.job.to_string(), "fraud/ft");
        assert_eq!(u.sample.unwrap().metric("loss"), Some(2.5));
        assert_eq!(u.gpus, Some(8.0));
        let r = parse_line(
            r#"{"time":"2026-11-27T17:00:30Z","job":"fraud/ft","annotation":"{\"progressPercentage\":5,\"trainMetrics\":{\"loss\":null},\"lastUpdatedTime\":\"2026-11-27T17:00:30Z\"}"}"#,
            "s.jsonl",
            2,
            None,
        )
        .unwrap();
        let StreamRecord::Update(u) = r else { panic!() };
        assert!(u.sample.unwrap().metric("loss").unwrap().is_nan());
    }

    #[test]
    fn the_fast_path_agrees_with_the_general_path() {
        let lines = [
            r#"{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{"progressPercentage":45,"estimatedRemainingSeconds":795649,"metrics":[{"name":"loss","value":"0.2347"},{"name":"eval_loss","value":"nan"},{"name":"current_step","value":"10"},{"name":"loss","value":"-inf"}],"lastUpdatedTime":"2026-03-20T14:02:11.532918+00:00"}}"#,
            r#"{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#,
            r#"{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{"progressPercentage":null,"metrics":null,"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#,
        ];
        for line in lines {
            let fast = parse_compact_fast(line).expect("fast path takes it");
            let v: Value = serde_json::from_str(line).unwrap();
            let general = input::from_trainer_status(&v["trainerStatus"], "trainerStatus").unwrap();
            let StreamRecord::Update(u) = fast else { panic!() };
            // Debug text, because NaN != NaN.
            assert_eq!(format!("{:?}", u.sample.unwrap()), format!("{general:?}"), "{line}");
        }
        // Lines the fast path refuses still parse (or fail with a precise message) on the general path.
        for (line, expect) in [
            (
                r#"{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{"progressPercentage":150,"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#,
                "trainerStatus.progressPercentage",
            ),
            (
                r#"{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{"metrics":[{"name":"loss","value":1}],"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#,
                "trainerStatus.metrics[0].value",
            ),
            (
                r#"{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{"progressPercentage":null,"metrics":null,"lastUpdatedTime":"2026-03-20T14:02:11Z","extra":1}}"#,
                "trainerStatus.extra: unknown field",
            ),
        ] {
            assert!(parse_compact_fast(line).is_none());
            let e = parse_line(line, "s", 1, None).unwrap_err();
            assert!(e.message.starts_with(expect), "{e}");
        }
    }

    /// The RHOAI compact line reads alike through its typed reader and through a `Value`, and only the lines
    /// the general path would read are taken (the others decline, and that path words the error).
    #[test]
    fn the_annotation_line_reads_as_the_general_path_reads_it() {
        macro_rules! payload {
            ($file:literal) => {
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../../../shared/fixtures/kubeflow/payloads/",
                    $file
                ))
            };
        }
        let annotations = [
            payload!("rhoai-trainerStatus-annotation.running.json"),
            payload!("rhoai-trainerStatus-annotation.completed.json"),
            payload!("rhoai-trainerStatus-annotation.failed.json"),
            payload!("rhoai-trainerStatus-annotation.nan-loss.json"),
            // Bare NaN tokens (what a training pod's endpoint may print), an unknown key, not JSON, no time.
            payload!("rhoai-metrics-endpoint.response.nan-loss.pyjson.txt"),
            r#"{"progressPercentage":5,"trainMetricz":{},"lastUpdatedTime":"2026-11-27T17:00:30Z"}"#,
            r#"{"progressPercentage":5,"#,
            r#"{"progressPercentage":5}"#,
        ];
        let tops = [
            r#""time":"2026-11-27T17:00:30Z","job":"team-a/sft""#,
            r#""job":"team-a/sft","time":"2026-11-27T17:00:30Z""#,
            r#""time":"2026-11-27T17:00:30Z","job":"team-a/sft","phase":"Running""#,
            r#""time":"2026-11-27T17:00:30Z","job":"sft""#,
            r#""time":"yesterday","job":"team-a/sft""#,
            r#""time":"2026-11-27T17:00:30Z","job":"team-a/sft","annotation":null"#,
        ];
        // An array is not an object, whatever its elements (serde_json fills a derived struct from either).
        for array in [
            r#"["2026-11-27T17:00:30Z","team-a/sft","{\"lastUpdatedTime\":\"2026-11-27T17:00:30Z\"}"]"#,
            r#"["2026-11-27T17:00:30Z","team-a/sft",{"lastUpdatedTime":"2026-11-27T17:00:30Z"}]"#,
            r#"{"time":"2026-11-27T17:00:30Z","job":"a/b","trainerStatus":[null,null,null,"2026-11-27T17:00:30Z"]}"#,
            r#"{"time":"2026-11-27T17:00:30Z","job":"a/b","trainerStatus":{"metrics":[["loss","1"]],"lastUpdatedTime":"2026-11-27T17:00:30Z"}}"#,
        ] {
            assert!(read_fast(array, None).is_none(), "{array}");
            assert!(parse_line(array, "s", 1, None).is_err(), "{array}");
        }
        let mut taken = 0;
        for annotation in annotations {
            for top in tops {
                let text = serde_json::to_string(annotation.trim()).unwrap();
                let line = format!("{{{top},\"annotation\":{text}}}");
                let fast = parse_line(&line, "s", 3, None);
                let general = parse_line_general(&line, "s", 3, None);
                assert_eq!(format!("{fast:?}"), format!("{general:?}"), "{line}");
                if let Some((time, job, sample)) = compact_annotation(&line) {
                    let Ok(StreamRecord::Update(u)) = general else { panic!("taken, but refused: {line}") };
                    assert_eq!((time, job), (u.time, u.job));
                    assert_eq!(format!("{:?}", Some(sample)), format!("{:?}", u.sample));
                    assert!(read_fast(&line, None).is_some(), "parse_line leaves it to the general path");
                    taken += 1;
                }
            }
        }
        // The four fixtures, under the two top-level spellings that are nothing but time and job.
        assert_eq!(taken, 8);
    }

    /// Issue 14: a key the progress format does not define used to be ignored, so a rule on the metric it
    /// was meant to carry never fired. In a recorded stream it is an error with the line and the path.
    #[test]
    fn unknown_progress_fields_are_rejected_with_line_and_path() {
        const TS: &str =
            "expected one of progressPercentage, estimatedRemainingSeconds, metrics, lastUpdatedTime";
        const RHOAI: &str = "expected one of progressPercentage, estimatedRemainingSeconds, \
            estimatedRemainingTimeSummary, currentStep, totalSteps, currentEpoch, totalEpochs, trainMetrics, \
            evalMetrics, lastUpdatedTime";
        let head = r#""time":"2026-11-27T17:00:00Z","job":"a/b""#;
        let t = r#""lastUpdatedTime":"2026-11-27T17:00:00Z""#;
        let ann = |json: &str| format!("{{{head},\"annotation\":{}}}", serde_json::to_string(json).unwrap());
        let object = |status: &str, annotation: Option<&str>| {
            let annotations = annotation.map_or(String::new(), |a| {
                format!(
                    r#","annotations":{{"trainer.opendatahub.io/trainerStatus":{}}}"#,
                    serde_json::to_string(a).unwrap()
                )
            });
            format!(
                r#"{{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{{"name":"b","namespace":"a"{annotations}}},"status":{{{status}}}}}"#
            )
        };
        let cases: Vec<(String, String)> = vec![
            (
                format!(
                    r#"{{{head},"trainerStatus":{{{t},"trainMetricz":[{{"name":"loss","value":"1"}}]}}}}"#
                ),
                format!("stream.jsonl:12: trainerStatus.trainMetricz: unknown field; {TS}"),
            ),
            (
                format!(r#"{{{head},"trainerStatus":{{{t},"metric":[{{"name":"loss","value":"1"}}]}}}}"#),
                format!("stream.jsonl:12: trainerStatus.metric: unknown field; {TS}"),
            ),
            (
                format!(
                    r#"{{{head},"trainerStatus":{{{t},"metrics":[{{"name":"loss","value":"1","unit":"nats"}}]}}}}"#
                ),
                "stream.jsonl:12: trainerStatus.metrics[0].unit: unknown field; expected one of name, value"
                    .into(),
            ),
            (
                ann(&format!(r#"{{{t},"trainMetricz":{{"loss":1.5}}}}"#)),
                format!("stream.jsonl:12: annotation.trainMetricz: unknown field; {RHOAI}"),
            ),
            (
                ann(&format!(r#"{{{t},"metric":[{{"name":"loss","value":"1"}}]}}"#)),
                format!("stream.jsonl:12: annotation.metric: unknown field; {RHOAI}"),
            ),
            (
                ann(&format!(r#"{{{t},"loss":1.5}}"#)),
                format!("stream.jsonl:12: annotation.loss: unknown field; {RHOAI}"),
            ),
            (
                object(&format!(r#""trainerStatus":{{{t},"trainMetricz":[]}}"#), None),
                format!("stream.jsonl:12: status.trainerStatus.trainMetricz: unknown field; {TS}"),
            ),
            (
                object("", Some(&format!(r#"{{{t},"evalMetricz":{{"eval_loss":1.5}}}}"#))),
                format!(
                    "stream.jsonl:12: metadata.annotations[\"trainer.opendatahub.io/trainerStatus\"].evalMetricz: \
                     unknown field; {RHOAI}"
                ),
            ),
        ];
        for (line, want) in cases {
            let e = parse_line(&line, "stream.jsonl", 12, None).unwrap_err();
            assert_eq!(e.to_string(), want, "{line}");
        }
    }

    /// Issue 43: a key given twice kept its last value in silence; now every reader refuses the line, with
    /// the key's path (the fast readers decline it, the general path words it).
    #[test]
    fn a_key_given_twice_is_refused_with_its_path() {
        let t = r#""lastUpdatedTime":"2026-11-27T17:00:00Z""#;
        let object = |meta: &str| {
            format!(
                r#"{{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{{{meta}}},"status":{{"trainerStatus":{{{t},"progressPercentage":5}}}}}}"#
            )
        };
        let annotation =
            serde_json::to_string(&format!(r#"{{{t},"trainMetrics":{{"loss":1.5,"loss":2.5}}}}"#)).unwrap();
        let cases = [
            (
                format!(
                    r#"{{"time":"2026-11-27T17:00:00Z","time":"2026-11-27T18:00:00Z","job":"a/b","trainerStatus":{{{t}}}}}"#
                ),
                "time: the key is given twice",
            ),
            (
                format!(
                    r#"{{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{{{t},"progressPercentage":5,"progressPercentage":50}}}}"#
                ),
                "trainerStatus.progressPercentage: the key is given twice",
            ),
            (
                format!(
                    r#"{{"time":"2026-11-27T17:00:00Z","job":"a/b","trainerStatus":{{{t},"metrics":[{{"name":"loss","value":"1","value":"2"}}]}}}}"#
                ),
                "trainerStatus.metrics[0].value: the key is given twice",
            ),
            (
                r#"{"time":"2026-11-27T17:00:00Z","job":"a/b","labels":{"team":"a","team":"b"}}"#.to_string(),
                "labels.team: the key is given twice",
            ),
            (
                format!(r#"{{"time":"2026-11-27T17:00:00Z","job":"a/b","annotation":{annotation}}}"#),
                "annotation.trainMetrics.loss: the key is given twice",
            ),
            (
                object(r#""name":"b","namespace":"a","labels":{"team":"a","team":"b"}"#),
                "metadata.labels.team: the key is given twice",
            ),
            (object(r#""name":"b","namespace":"a","name":"c""#), "metadata.name: the key is given twice"),
        ];
        for (line, want) in cases {
            assert!(read_fast(&line, None).is_none(), "a fast reader took {line}");
            let e = parse_line(&line, "s.jsonl", 3, None).unwrap_err();
            assert!(e.to_string().starts_with(&format!("s.jsonl:3: {want}")), "{e}\n{line}");
        }
        // The same line without the repeat is read (by a fast reader).
        let good = object(r#""name":"b","namespace":"a","labels":{"team":"a"}"#);
        assert!(read_fast(&good, None).is_some());
    }

    /// Issue 43: a TrainJob line without `metadata.namespace` was judged as namespace `default`'s.
    #[test]
    fn a_trainjob_line_needs_its_namespace() {
        let line = r#"{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"b","creationTimestamp":"2026-11-27T17:00:00Z"}}"#;
        assert!(read_fast(line, None).is_none());
        let e = parse_line(line, "s.jsonl", 2, None).unwrap_err();
        assert!(e.to_string().starts_with("s.jsonl:2: metadata.namespace: required"), "{e}");
        let empty = line.replace(r#""name":"b""#, r#""name":"b","namespace":"""#);
        assert!(parse_line(&empty, "s.jsonl", 2, None).unwrap_err().message.contains("metadata.namespace"));
    }

    /// Issue 43: a stream that opens with a byte-order mark failed at 1:1, a policy with one was read.
    #[test]
    fn a_byte_order_mark_opens_a_stream() {
        let text = "\u{feff}{\"time\":\"2026-11-30T07:00:00Z\",\"job\":\"a/b\",\"phase\":\"Running\"}\n";
        assert_eq!(parse_stream(text, "s").unwrap().len(), 1);
        let mut lines =
            crate::input::merge::StreamLines::new(std::io::Cursor::new(text.as_bytes().to_vec()), "s");
        assert!(lines.next_record().unwrap().is_ok());
    }

    #[test]
    fn heartbeats_and_phase_changes() {
        let r = parse_line(r#"{"time":"2026-11-30T07:00:00Z","job":"a/b","phase":"Complete"}"#, "s", 3, None)
            .unwrap();
        let StreamRecord::Update(u) = r else { panic!() };
        assert_eq!((u.sample, u.phase), (None, Some(JobPhase::Complete)));
    }

    #[test]
    fn gpu_readings_ride_on_compact_lines() {
        let line = r#"{"time":"2026-11-30T07:00:00Z","job":"a/b","gpu":[{"id":"b-node-0-0-x/0","util":97,"power":300.5},{"util":3}]}"#;
        let StreamRecord::Update(u) = parse_line(line, "s", 4, None).unwrap() else { panic!() };
        let gpu = u.gpu.expect("readings");
        assert_eq!(gpu.at, "2026-11-30T07:00:00Z".parse::<Timestamp>().unwrap());
        assert_eq!(gpu.gpus.len(), 2);
        assert_eq!(
            (gpu.gpus[0].id.as_str(), gpu.gpus[0].util, gpu.gpus[0].power),
            ("b-node-0-0-x/0", Some(97.0), Some(300.5))
        );
        assert_eq!(gpu.gpus[1].id, "1", "a reading without an id is named by its position");
        assert!(u.sample.is_none(), "GPU readings alone are no progress report");
        let e = parse_line(
            r#"{"time":"2026-11-30T07:00:00Z","job":"a/b","gpu":[{"util":"97"}]}"#,
            "s.jsonl",
            5,
            None,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "s.jsonl:5: gpu[0].util: expected a number from 0 to 100, got \"97\"");
    }

    #[test]
    fn queue_demand_rides_on_compact_lines() {
        let line = r#"{"time":"2026-11-30T07:00:00Z","job":"a/b","queue":{"pending":2,"pendingGpus":16}}"#;
        let StreamRecord::Update(u) = parse_line(line, "s", 4, None).unwrap() else { panic!() };
        assert_eq!(u.queue, Some(QueueDemand { pending: 2, pending_gpus: 16.0 }));
        assert!(u.sample.is_none(), "queue demand alone is no progress report");
        let e = parse_line(
            r#"{"time":"2026-11-30T07:00:00Z","job":"a/b","queue":{"pending":-2}}"#,
            "s.jsonl",
            5,
            None,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "s.jsonl:5: queue.pending: expected a whole number >= 0, got -2");
    }

    #[test]
    fn errors_say_where() {
        let e = parse_line(r#"{"time":"2026-11-30T07:00:00Z","job":"ab"}"#, "s.jsonl", 7, None).unwrap_err();
        assert_eq!(e.to_string(), "s.jsonl:7: job: expected \"namespace/name\", got \"ab\"");
        let e = parse_line(r#"{"time": 5,"#, "s.jsonl", 8, None).unwrap_err();
        assert!(e.to_string().starts_with("s.jsonl:8:11: invalid JSON"), "{e}");
        let e = parse_line(r#"{"time":"2026-11-30T07:00:00Z","job":"a/b","colour":1}"#, "s", 9, None)
            .unwrap_err();
        assert!(e.message.contains("unknown field \"colour\""));
        let errors = parse_stream("# comment\n\n{}\n[1]\n", "s").unwrap_err();
        assert_eq!(errors.iter().map(|e| e.line).collect::<Vec<_>>(), vec![3, 4]);
    }
}
