//! The Namespace source: each namespace's labels, which ClusterProgressPolicies' namespace selectors match.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;
use tracing::warn;

use crate::messages::Input;

/// Watches the namespaces (only `namespace` with a namespace scope: only it matters, and the service
/// account may not be allowed to list the others) until the loop's channel closes; returns the task's name.
pub(super) async fn watch_namespaces(
    client: Client,
    namespace: Option<String>,
    tx: mpsc::Sender<Input>,
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
}
