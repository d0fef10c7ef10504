//! The TrainJob source: each watched TrainJob read into a [`JobInput`], a copy of what was seen for the
//! recorder (`--record-dir`), and the deletions a re-list finds. The watch starts only once the policies
//! are listed (see [`crate::brain`]), and has no predicate: progress lives in `status` or in an annotation,
//! which kube's generation predicate would hide.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};
use trainwarden_core::{
    CHECKPOINT_ANNOTATION, HistoryCheckpoint, JobKey, JobSnapshot, NormalizeError, RequestRecord,
};
use trainwarden_kube::trainjob::{to_snapshot, trainjob_api};
use trainwarden_kube::{VERDICT_ANNOTATION, Verdict};

use super::record;
use super::relist::Relist;
use crate::messages::{
    FoundSuspension, Input, JobInput, JobObservation, Observation, RecordedProgress, ShownVerdict,
    StoredCheckpoint,
};
use crate::metrics::{ApiOperation, Metrics, WatchedKind, WatchedKindLabels};
use crate::{EXEMPT_ANNOTATION, HISTORY_ANNOTATION, LAST_ACTION_ANNOTATION};

/// Reads a watched TrainJob (see [`read_job`]).
pub fn job_input(obj: &DynamicObject) -> Option<JobInput> {
    let received = std::time::Instant::now();
    let key = JobKey::new(obj.namespace()?, obj.name_any());
    Some(read_job(key, to_snapshot(obj), obj.annotations(), obj.uid(), received))
}

/// A TrainJob, its progress normalized (`snapshot`), with the annotations trainwarden keeps on it each read
/// into its typed field: the history checkpoint and the verdict leave the snapshot's annotations (which rules
/// see), the exemption and the last action's record are read from `annotations` (the object's).
pub fn read_job(
    key: JobKey,
    mut snapshot: Result<JobSnapshot, NormalizeError>,
    annotations: &BTreeMap<String, String>,
    uid: Option<String>,
    received: Instant,
) -> JobInput {
    let exempt = annotations.get(EXEMPT_ANNOTATION).is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let suspension = annotations.get(LAST_ACTION_ANNOTATION).and_then(|r| read_suspension(r));
    let checkpoint = annotations.get(CHECKPOINT_ANNOTATION).map(|text| RequestRecord::parse(text));
    let (history, verdict) = match &mut snapshot {
        Ok(s) => {
            // The request record is trainwarden's own bookkeeping, not something a rule reads.
            s.annotations.remove(CHECKPOINT_ANNOTATION);
            (s.annotations.remove(HISTORY_ANNOTATION), s.annotations.remove(VERDICT_ANNOTATION))
        }
        Err(_) => {
            (annotations.get(HISTORY_ANNOTATION).cloned(), annotations.get(VERDICT_ANNOTATION).cloned())
        }
    };
    JobInput {
        key,
        snapshot,
        exempt,
        uid,
        received,
        suspension,
        history: history.map(read_checkpoint),
        verdict: read_verdict(verdict.as_deref()),
        checkpoint,
    }
}

/// The suspension in a last-action record; `None` for another action or a record that does not read.
pub fn read_suspension(record: &str) -> Option<FoundSuspension> {
    let v: Value = serde_json::from_str(record).ok()?;
    if v.get("action")?.as_str()? != "suspend" {
        return None;
    }
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    Some(FoundSuspension {
        id: text("id")?,
        policy: text("policy")?,
        rule: text("rule")?,
        at: v.get("at")?.as_str()?.parse().ok()?,
        gpu_hours: v.get("gpuHours").and_then(Value::as_f64).filter(|h| h.is_finite() && *h >= 0.0),
        dollars: v.get("dollars").and_then(Value::as_f64).filter(|d| d.is_finite()),
    })
}

/// A history checkpoint as stored: its text, hash and stamp.
pub fn read_checkpoint(text: String) -> StoredCheckpoint {
    let hash = fnv(text.as_bytes());
    let stamp = HistoryCheckpoint::stamp(&text);
    StoredCheckpoint { text, hash, stamp }
}

/// A verdict annotation as it shows (absent: `None`).
pub fn read_verdict(text: Option<&str>) -> ShownVerdict {
    ShownVerdict { hash: ShownVerdict::hash_text(text), verdict: text.and_then(|t| Verdict::parse(t).ok()) }
}

/// FNV-1a: a checkpoint's text is hashed on every report of its job, and it can be long.
fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What the recorder gets of a watched TrainJob: the progress as the object carries it (the
/// `status.trainerStatus` JSON, else the RHOAI annotation's text, as [`trainwarden_core::from_trainjob`]
/// prefers them) and what its reading found.
pub fn job_observation(
    obj: &DynamicObject,
    input: &JobInput,
    at: trainwarden_core::Timestamp,
) -> JobObservation {
    let progress = match obj.data.get("status").and_then(|s| s.get("trainerStatus")) {
        Some(ts) if !ts.is_null() => Some(RecordedProgress::TrainerStatus(ts.clone())),
        _ => obj
            .annotations()
            .get(trainwarden_core::TRAINER_STATUS_ANNOTATION)
            .map(|a| RecordedProgress::Annotation(a.clone())),
    };
    let snapshot = input.snapshot.as_ref().ok();
    JobObservation {
        job: input.key.clone(),
        uid: input.uid.clone(),
        labels: obj.labels().clone(),
        gpus: snapshot.and_then(|s| s.gpus),
        phase: snapshot.map(|s| s.phase),
        progress,
        sample_time: snapshot.and_then(|s| s.sample.as_ref()).map(|s| s.updated_at),
        at,
    }
}

/// Watches the TrainJobs once `policies_synced` fires, until the loop's channel closes; returns the task's
/// name. What it sees goes to `recorder` too when recording is on.
pub(super) async fn watch_trainjobs(
    client: Client,
    namespace: Option<String>,
    config: watcher::Config,
    tx: mpsc::Sender<Input>,
    policies_synced: oneshot::Receiver<()>,
    recorder: Option<mpsc::Sender<Observation>>,
    metrics: Arc<Metrics>,
) -> &'static str {
    if policies_synced.await.is_err() {
        return "TrainJob watch";
    }
    info!("policies listed; watching TrainJobs");
    let api = trainjob_api(client, namespace.as_deref());
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut relist = Relist::default();
    while let Some(event) = stream.next().await {
        let input = match event {
            Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                metrics.samples.inc();
                match job_input(&obj) {
                    Some(job) => {
                        relist.seen(&job.key);
                        record(recorder.as_ref(), &metrics, || {
                            let at = trainwarden_core::Timestamp::now();
                            Observation::Seen(Box::new(job_observation(&obj, &job, at)))
                        });
                        Input::Job(Box::new(job))
                    }
                    None => continue,
                }
            }
            Ok(watcher::Event::Delete(obj)) => match obj.namespace() {
                Some(ns) => {
                    let key = JobKey::new(ns, obj.name_any());
                    relist.deleted(&key);
                    record(recorder.as_ref(), &metrics, || Observation::Gone {
                        job: key.clone(),
                        at: trainwarden_core::Timestamp::now(),
                    });
                    Input::JobGone(key)
                }
                None => continue,
            },
            Ok(watcher::Event::InitDone) => {
                let labels = WatchedKindLabels { kind: WatchedKind::Trainjob };
                for gone in relist.done() {
                    info!(job = %gone, "TrainJob deleted while the watch was down (found by the re-list)");
                    metrics.relist_deletions.get_or_create(&labels).inc();
                    record(recorder.as_ref(), &metrics, || Observation::Gone {
                        job: gone.clone(),
                        at: trainwarden_core::Timestamp::now(),
                    });
                    if tx.send(Input::JobGone(gone)).await.is_err() {
                        return "TrainJob watch";
                    }
                }
                Input::JobsListed
            }
            Ok(watcher::Event::Init) => {
                relist.started();
                continue;
            }
            Err(e) => {
                metrics.api_error(ApiOperation::WatchTrainjobs);
                warn!(error = %e, "watching TrainJobs");
                continue;
            }
        };
        if tx.send(input).await.is_err() {
            break;
        }
    }
    debug!("TrainJob watch ended");
    "TrainJob watch"
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainwarden_core::Timestamp;

    #[test]
    fn a_suspension_record_reads_and_other_records_do_not() {
        let record = r#"{"id":"i-1","action":"suspend","policy":"ProgressPolicy ml/stall","rule":"silent","reason":"r","at":"2026-10-02T22:03:00Z","gpuHours":38.25,"dollars":421.0}"#;
        let f = read_suspension(record).expect("reads");
        assert_eq!(
            (f.id.as_str(), f.policy.as_str(), f.rule.as_str()),
            ("i-1", "ProgressPolicy ml/stall", "silent")
        );
        assert_eq!((f.gpu_hours, f.dollars), (Some(38.25), Some(421.0)));
        assert_eq!(f.at, "2026-10-02T22:03:00Z".parse::<Timestamp>().unwrap());
        assert_eq!(read_suspension(&record.replace("\"suspend\"", "\"annotate\"")), None);
        assert_eq!(read_suspension(&record.replace("2026-10-02T22:03:00Z", "yesterday")), None);
        assert_eq!(read_suspension("not json"), None);
        let without_savings = read_suspension(&record.replace(",\"gpuHours\":38.25,\"dollars\":421.0", ""));
        assert_eq!(without_savings.map(|f| f.gpu_hours), Some(None));
    }
}
