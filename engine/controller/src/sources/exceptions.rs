//! The ProgressPolicyException source: each exception read and compiled into an [`ExceptionInput`] (or
//! why it cannot be), and whether they could be listed at all.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tracing::{info, warn};
use trainwarden_kube::ProgressPolicyException;

use super::relist::Relist;
use crate::messages::{ExceptionInput, Input};
use crate::metrics::{ApiOperation, Metrics, WatchedKind, WatchedKindLabels};

/// Watches the ProgressPolicyExceptions until the loop's channel closes. The TrainJobs are judged only
/// after the exceptions were listed (a rule must not act on a job an exception holds), so when they cannot
/// be listed — their CRD is not installed (a chart upgrade does not install new CRDs), the grant is missing,
/// or any other failure for 30 s — the list is reported done anyway, with a warning, and the watch keeps
/// trying (errors count in `trainwarden_api_errors_total{operation="watch_exceptions"}`).
pub(super) async fn watch_exceptions(
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
