//! The TrainJob source: each watched TrainJob read into a [`JobInput`], a copy of what was seen for the
//! recorder (`--record-dir`), and the deletions a re-list finds. The watch starts only once the policies
//! are listed (see [`crate::brain`]), and has no predicate: progress lives in `status` or in an annotation,
//! which kube's generation predicate would hide.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};
use trainwarden_core::JobKey;
use trainwarden_kube::trainjob::{to_snapshot, trainjob_api};

use super::relist::Relist;
use crate::EXEMPT_ANNOTATION;
use crate::messages::{Input, JobInput, JobObservation, Observation, RecordedProgress};
use crate::metrics::{ApiOperation, Metrics, RecordDrop, WatchedKind, WatchedKindLabels};

/// Reads a watched TrainJob.
pub fn job_input(obj: &DynamicObject) -> Option<JobInput> {
    let received = std::time::Instant::now();
    let key = JobKey::new(obj.namespace()?, obj.name_any());
    let exempt = obj.annotations().get(EXEMPT_ANNOTATION).is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let snapshot = to_snapshot(obj);
    Some(JobInput { key, snapshot, exempt, uid: obj.uid(), received })
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

/// Hands an observation to the recorder without waiting: a full channel drops it (counted).
fn record(
    recorder: Option<&mpsc::Sender<Observation>>,
    metrics: &Metrics,
    make: impl FnOnce() -> Observation,
) {
    if let Some(tx) = recorder
        && let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(make())
    {
        metrics.record_drop(RecordDrop::QueueFull);
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
