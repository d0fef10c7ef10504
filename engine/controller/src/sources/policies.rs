//! The policy sources: ProgressPolicies and ClusterProgressPolicies, each read into a [`PolicyInput`] (the
//! spec as a policy document, the status it carries with the rule memories that make a restart safe).

use std::sync::Arc;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tracing::{info, warn};
use trainwarden_core::{PolicyId, PolicyKind};
use trainwarden_kube::ProgressPolicyStatus;
use trainwarden_kube::crd::PolicyResource;

use super::relist::Relist;
use crate::messages::{Input, PolicyInput};
use crate::metrics::{Metrics, WatchedKind, WatchedKindLabels};

/// Watches one policy kind until the loop's channel closes; returns the task's name.
pub(super) async fn watch_policies<K>(
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
                Input::Policy(Box::new(PolicyInput::read(&p, kind, status(&p))))
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
