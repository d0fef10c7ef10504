//! The sources: what the controller reads from the cluster (and Prometheus), each turned into [`Input`]s
//! for the evaluation loop, parsed at the edge so the brain reads typed fields only.
//!
//! ```text
//!  trainjobs     TrainJobs → JobInput (progress normalized; exemption, recorded suspension, history
//!                checkpoint and verdict read from their annotations) ──┐  + copies for the recorder
//!  policies      ProgressPolicies, ClusterProgressPolicies → PolicyInput ├──▶ Input (channel) ──▶ brain
//!  exceptions    ProgressPolicyExceptions → ExceptionInput, compiled     │
//!  namespaces    namespace labels (ClusterProgressPolicy selectors;     │
//!                copies for the recorder)                                │
//!  gpu_metrics   the GPUs' DCGM metrics from Prometheus (--prometheus-url)│
//!  kueue_queues  the demand behind each Kueue LocalQueue (--kueue-queues)┘
//!  relist        deletions a re-list finds (no Delete event for them)
//! ```
//!
//! Nothing is filtered by generation: TrainJob progress lives in `status` (or in an annotation), which a
//! generation predicate would hide. Policies are watched first; the TrainJob watch starts only after the
//! initial policy lists were processed, so the rule memories kept in policy status are restored before any
//! job is judged (see [`crate::brain`]).

pub mod exceptions;
pub mod gpu_metrics;
pub mod kueue_queues;
pub mod namespaces;
pub mod policies;
pub mod relist;
pub mod trainjobs;

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use trainwarden_core::PolicyKind;
use trainwarden_kube::trainjob::trainjob_api;
use trainwarden_kube::{ClusterProgressPolicy, ProgressPolicy, ProgressPolicyException};

use crate::Error;
use crate::messages::{Input, Observation};
use crate::metrics::{Metrics, RecordDrop};
use crate::runtime::config::ControllerConfig;

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

/// Starts the watches. The TrainJob watch waits for `policies_synced`; it and the Namespace watch hand what
/// they see to `recorder` too when recording is on.
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
        tasks.spawn(policies::watch_policies(
            api,
            PolicyKind::Namespaced,
            |p| p.status.clone(),
            tx,
            metrics.clone(),
        ));
    }
    {
        let api: Api<ClusterProgressPolicy> = Api::all(client.clone());
        let tx = inputs.clone();
        tasks.spawn(policies::watch_policies(
            api,
            PolicyKind::Cluster,
            |p| p.status.clone(),
            tx,
            metrics.clone(),
        ));
    }
    {
        let api: Api<ProgressPolicyException> = match &ns {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        tasks.spawn(exceptions::watch_exceptions(api, inputs.clone(), metrics.clone()));
    }
    tasks.spawn(namespaces::watch_namespaces(
        client.clone(),
        ns.clone(),
        inputs.clone(),
        recorder.clone(),
        metrics.clone(),
    ));
    tasks.spawn(trainjobs::watch_trainjobs(
        client,
        ns,
        job_watch,
        inputs,
        policies_synced,
        recorder,
        metrics,
    ));
}
