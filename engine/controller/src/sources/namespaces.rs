//! The Namespace source: each namespace's labels, which ClusterProgressPolicies' namespace selectors match;
//! a copy goes to the recorder, so a recorded stream carries them and `replay`/`backtest` select as the
//! controller did.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::warn;

use super::record;
use crate::messages::{Input, Observation};
use crate::metrics::Metrics;

/// Watches the namespaces (only `namespace` with a namespace scope: only it matters, and the service
/// account may not be allowed to list the others) until the loop's channel closes; returns the task's name.
/// What it sees goes to `recorder` too when recording is on.
pub(super) async fn watch_namespaces(
    client: Client,
    namespace: Option<String>,
    tx: mpsc::Sender<Input>,
    recorder: Option<mpsc::Sender<Observation>>,
    metrics: Arc<Metrics>,
) -> &'static str {
    let api: Api<Namespace> = Api::all(client);
    let config = match &namespace {
        Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
        None => watcher::Config::default(),
    };
    let mut stream = watcher(api, config).default_backoff().boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => {
                let (name, labels) = (n.name_any(), n.labels().clone());
                record(recorder.as_ref(), &metrics, || Observation::Namespace {
                    name: name.clone(),
                    labels: labels.clone(),
                    at: trainwarden_core::Timestamp::now(),
                });
                let input = Input::Namespace { name, labels };
                if tx.send(input).await.is_err() {
                    break;
                }
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "watching namespaces"),
        }
    }
    "Namespace watch"
}
