//! The sources: watches turn into [`Input`]s for the evaluation loop.
//!
//! TrainJobs are watched with no predicate: their progress lives in `status.trainerStatus` (upstream) or in
//! an annotation (RHOAI), and kube's generation predicate would hide both. Policies are watched first; the
//! TrainJob watch starts only after the initial policy lists were processed, so the rule memories kept in
//! policy status are restored before any job is judged (see [`crate::brain`]).
//!
//! A re-list (after a 410 Gone, an API server restart, a long disconnect) comes from kube's watcher as
//! `Init`, `InitApply`… and `InitDone`, with no `Delete` for objects deleted while the watch was down;
//! [`Relist`] compares the keys and reports those as gone.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};
use trainwarden_core::JobKey;
use trainwarden_core::{PolicyId, PolicyKind};
use trainwarden_kube::crd::PolicyResource;
use trainwarden_kube::trainjob::{to_snapshot, trainjob_api};
use trainwarden_kube::{
    ClusterProgressPolicy, ProgressPolicy, ProgressPolicyException, ProgressPolicyStatus,
};

use crate::config::ControllerConfig;
use crate::messages::{
    ExceptionInput, Input, JobInput, JobObservation, Observation, PolicyInput, RecordedProgress,
};
use crate::metrics::{ApiOperation, Metrics, RecordDrop, WatchedKind, WatchedKindLabels};
use crate::{EXEMPT_ANNOTATION, Error};

/// The keys a watch has delivered, so that a re-list reports the objects deleted while the watch was down.
#[derive(Debug)]
pub struct Relist<K> {
    known: HashSet<K>,
    /// Keys listed so far by the re-list in progress.
    listing: Option<HashSet<K>>,
}

impl<K> Default for Relist<K> {
    fn default() -> Self {
        Relist { known: HashSet::new(), listing: None }
    }
}

impl<K: Eq + Hash + Clone> Relist<K> {
    /// A (re-)list starts (`Init`).
    pub fn started(&mut self) {
        self.listing = Some(HashSet::new());
    }

    /// An object was listed or changed (`InitApply`, `Apply`).
    pub fn seen(&mut self, key: &K) {
        if let Some(listing) = &mut self.listing {
            listing.insert(key.clone());
        }
        self.known.insert(key.clone());
    }

    /// An object's `Delete` event.
    pub fn deleted(&mut self, key: &K) {
        self.known.remove(key);
        if let Some(listing) = &mut self.listing {
            listing.remove(key);
        }
    }

    /// The list is complete (`InitDone`): the keys known before that it did not list, which are gone.
    pub fn done(&mut self) -> Vec<K> {
        let Some(listed) = self.listing.take() else { return Vec::new() };
        let gone = self.known.iter().filter(|k| !listed.contains(*k)).cloned().collect();
        self.known = listed;
        gone
    }
}

/// Fails early, with the fix, when a CRD the controller needs is missing.
pub async fn check_crds(client: &Client, config: &ControllerConfig) -> Result<(), Error> {
    let one = ListParams::default().limit(1);
    let ns = config.namespace.as_deref();
    let pp: Api<ProgressPolicy> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    pp.list_metadata(&one).await.map_err(|e| Error::MissingCrd("progresspolicies.trainwarden.dev", e))?;
    Api::<ClusterProgressPolicy>::all(client.clone())
        .list_metadata(&one)
        .await
        .map_err(|e| Error::MissingCrd("clusterprogresspolicies.trainwarden.dev", e))?;
    trainjob_api(client.clone(), ns)
        .list_metadata(&one)
        .await
        .map_err(|e| Error::MissingCrd("trainjobs.trainer.kubeflow.org", e))?;
    Ok(())
}

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

fn policy_input<K>(obj: &K, kind: PolicyKind, status: Option<ProgressPolicyStatus>) -> PolicyInput
where
    K: PolicyResource + ResourceExt,
{
    PolicyInput {
        key: PolicyId { kind, namespace: obj.namespace(), name: obj.name_any() },
        generation: obj.meta().generation.unwrap_or(0),
        document: obj.to_document(),
        status,
    }
}

/// Watches one policy kind until the loop's channel closes; returns the task's name.
async fn watch_policies<K>(
    api: Api<K>,
    kind: PolicyKind,
    status: fn(&K) -> Option<ProgressPolicyStatus>,
    tx: mpsc::Sender<Input>,
    metrics: Arc<Metrics>,
) -> &'static str
where
    K: PolicyResource
        + kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + 'static,
{
    let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut relist = Relist::default();
    let id = |p: &K| PolicyId { kind, namespace: p.namespace(), name: p.name_any() };
    let watched = match kind {
        PolicyKind::Namespaced => WatchedKind::Progresspolicy,
        PolicyKind::Cluster => WatchedKind::Clusterprogresspolicy,
    };
    while let Some(event) = stream.next().await {
        let input = match event {
            Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                relist.seen(&id(&p));
                Input::Policy(Box::new(policy_input(&p, kind, status(&p))))
            }
            Ok(watcher::Event::Delete(p)) => {
                relist.deleted(&id(&p));
                Input::PolicyGone(id(&p))
            }
            Ok(watcher::Event::InitDone) => {
                for gone in relist.done() {
                    info!(policy = ?gone, "policy deleted while the watch was down (found by the re-list)");
                    metrics.relist_deletions.get_or_create(&WatchedKindLabels { kind: watched }).inc();
                    if tx.send(Input::PolicyGone(gone)).await.is_err() {
                        return "policy watch";
                    }
                }
                Input::PoliciesListed(kind)
            }
            Ok(watcher::Event::Init) => {
                relist.started();
                continue;
            }
            Err(e) => {
                warn!(error = %e, %kind, "watching policies");
                continue;
            }
        };
        if tx.send(input).await.is_err() {
            break;
        }
    }
    match kind {
        PolicyKind::Namespaced => "ProgressPolicy watch",
        PolicyKind::Cluster => "ClusterProgressPolicy watch",
    }
}

/// Watches the ProgressPolicyExceptions until the loop's channel closes. The TrainJobs are judged only
/// after the exceptions were listed (a rule must not act on a job an exception holds), so when they cannot
/// be listed — their CRD is not installed (a chart upgrade does not install new CRDs), the grant is missing,
/// or any other failure for 30 s — the list is reported done anyway, with a warning, and the watch keeps
/// trying (errors count in `trainwarden_api_errors_total{operation="watch_exceptions"}`).
async fn watch_exceptions(
    api: Api<ProgressPolicyException>,
    tx: mpsc::Sender<Input>,
    metrics: Arc<Metrics>,
) -> &'static str {
    const NAME: &str = "ProgressPolicyException watch";
    let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut relist = Relist::default();
    let mut listed = false;
    let mut failing = false;
    let started = std::time::Instant::now();
    while let Some(event) = stream.next().await {
        let input = match event {
            Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => {
                let key = e.reference();
                relist.seen(&key);
                let policy_names =
                    e.spec.exception.exceptions.iter().map(|p| p.policy_name.clone()).collect();
                Input::Exception(Box::new(ExceptionInput { key, policy_names, compiled: e.compile() }))
            }
            Ok(watcher::Event::Delete(e)) => {
                let key = e.reference();
                relist.deleted(&key);
                Input::ExceptionGone(key)
            }
            Ok(watcher::Event::InitDone) => {
                failing = false;
                let labels = WatchedKindLabels { kind: WatchedKind::Progresspolicyexception };
                for gone in relist.done() {
                    info!(exception = %gone, "exception deleted while the watch was down (found by the re-list)");
                    metrics.relist_deletions.get_or_create(&labels).inc();
                    if tx.send(Input::ExceptionGone(gone)).await.is_err() {
                        return NAME;
                    }
                }
                listed = true;
                Input::ExceptionsListed
            }
            Ok(watcher::Event::Init) => {
                relist.started();
                continue;
            }
            Err(e) => {
                let code = match &e {
                    watcher::Error::InitialListFailed(kube::Error::Api(s)) => Some(s.code),
                    _ => None,
                };
                if !failing {
                    match code {
                        Some(404) => warn!(
                            "the ProgressPolicyException CRD is not installed (kubectl apply -f \
                             crds/progresspolicyexceptions.trainwarden.dev.yaml): no exception is honoured \
                             until it is"
                        ),
                        Some(403) => warn!(
                            error = %e,
                            "not allowed to list ProgressPolicyExceptions (the chart's ClusterRole grants it): \
                             no exception is honoured until it is"
                        ),
                        _ => warn!(error = %e, "watching ProgressPolicyExceptions"),
                    }
                }
                failing = true;
                metrics.api_error(ApiOperation::WatchExceptions);
                // Judging waits for the exceptions, but not forever: a missing CRD or grant at once, any
                // other failure after 30 s (the watch keeps trying, and a later list applies them).
                let give_up = matches!(code, Some(404 | 403)) || started.elapsed() > Duration::from_secs(30);
                if give_up && !listed {
                    warn!("judging TrainJobs without ProgressPolicyExceptions until they can be listed");
                    listed = true;
                    if tx.send(Input::ExceptionsListed).await.is_err() {
                        return NAME;
                    }
                }
                continue;
            }
        };
        if tx.send(input).await.is_err() {
            break;
        }
    }
    NAME
}

/// Starts the watches. The TrainJob watch waits for `policies_synced`, and hands what it sees to `recorder`
/// too when recording is on.
pub fn spawn_watchers(
    tasks: &mut JoinSet<&'static str>,
    client: Client,
    config: &ControllerConfig,
    inputs: mpsc::Sender<Input>,
    policies_synced: oneshot::Receiver<()>,
    recorder: Option<mpsc::Sender<Observation>>,
    metrics: Arc<Metrics>,
) {
    let ns = config.namespace.clone();
    let job_watch = match &config.trainjob_selector {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    {
        let api: Api<ProgressPolicy> = match &ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let tx = inputs.clone();
        tasks.spawn(watch_policies(api, PolicyKind::Namespaced, |p| p.status.clone(), tx, metrics.clone()));
    }
    {
        let api: Api<ClusterProgressPolicy> = Api::all(client.clone());
        let tx = inputs.clone();
        tasks.spawn(watch_policies(api, PolicyKind::Cluster, |p| p.status.clone(), tx, metrics.clone()));
    }
    {
        let api: Api<ProgressPolicyException> = match &ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        tasks.spawn(watch_exceptions(api, inputs.clone(), metrics.clone()));
    }
    {
        let tx = inputs.clone();
        let client = client.clone();
        let ns = ns.clone();
        tasks.spawn(async move {
            // With a namespace scope only that namespace matters (and the service account may not be allowed
            // to list the others).
            let api: Api<Namespace> = Api::all(client);
            let config = match &ns {
                Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
                None => watcher::Config::default(),
            };
            let mut stream = watcher(api, config).default_backoff().boxed();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                        let input = Input::Namespace { name: n.name_any(), labels: n.labels().clone() };
                        if tx.send(input).await.is_err() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "watching namespaces"),
                }
            }
            "Namespace watch"
        });
    }
    {
        let tx = inputs;
        tasks.spawn(async move {
            if policies_synced.await.is_err() {
                return "TrainJob watch";
            }
            info!("policies listed; watching TrainJobs");
            let api = trainjob_api(client, ns.as_deref());
            let mut stream = watcher(api, job_watch).default_backoff().boxed();
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
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Relist;

    #[test]
    fn a_relist_reports_the_keys_it_no_longer_lists() {
        let mut r = Relist::default();
        r.started();
        for k in ["a", "b", "c"] {
            r.seen(&k);
        }
        assert!(r.done().is_empty(), "the first list finds nothing gone");
        r.seen(&"d");
        r.deleted(&"c");
        // Re-list: b and d were deleted while the watch was down; e is new.
        r.started();
        r.seen(&"a");
        r.seen(&"e");
        let mut gone = r.done();
        gone.sort();
        assert_eq!(gone, vec!["b", "d"]);
        r.started();
        r.seen(&"a");
        r.seen(&"e");
        assert!(r.done().is_empty());
    }

    #[test]
    fn a_delete_during_the_relist_is_not_reported_twice() {
        let mut r = Relist::default();
        r.started();
        r.seen(&"a");
        r.seen(&"b");
        r.done();
        r.started();
        r.seen(&"a");
        r.deleted(&"a");
        assert_eq!(r.done(), vec!["b"]);
        assert!(r.done().is_empty(), "no list in progress: nothing");
    }
}
