//! The status writer: one task writes every policy's status, only while this replica leads.
//!
//! The evaluation loop sends a policy's status at most once per `status_interval`; the writer skips a status
//! equal to the last one written and, on becoming leader, writes whatever changed while it followed. Writes
//! are server-side applies of `status` alone (field manager `trainwarden`), each with a deadline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::mpsc;
use tracing::{debug, warn};
use trainwarden_core::{PolicyId, PolicyKind};
use trainwarden_kube::{ClusterProgressPolicy, FIELD_MANAGER, ProgressPolicy, ProgressPolicyStatus};

use crate::messages::StatusUpdate;
use crate::metrics::{ApiOperation, Metrics, ResultLabels, StatusWrite};
use crate::runtime::config::ControllerConfig;
use crate::runtime::leader::Leadership;

/// Writes policy status (server-side apply of the status subresource), on the leader only: the latest status
/// of each policy, skipping writes that would change nothing, retrying failed ones every 5 s.
pub struct StatusWriter {
    client: Client,
    metrics: Arc<Metrics>,
    leader: Leadership,
    timeout: Duration,
    latest: HashMap<PolicyId, ProgressPolicyStatus>,
    written: HashMap<PolicyId, ProgressPolicyStatus>,
}

impl StatusWriter {
    /// A writer whose API calls time out after `config.api_timeout`.
    pub fn new(client: Client, config: &ControllerConfig, metrics: Arc<Metrics>, leader: Leadership) -> Self {
        StatusWriter {
            client,
            metrics,
            leader,
            timeout: config.api_timeout,
            latest: HashMap::new(),
            written: HashMap::new(),
        }
    }

    /// Writes the statuses received on `updates` until the channel closes; rewrites all on becoming leader.
    pub async fn run(mut self, mut updates: mpsc::Receiver<StatusUpdate>) {
        // `None` once leadership can no longer change (leader election off): nothing to wait for then.
        let mut leadership = Some(self.leader.subscribe());
        // Failed writes are retried on this beat (only statuses that differ from what was written).
        let mut retry = tokio::time::interval(Duration::from_secs(5));
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = retry.tick() => self.flush(None).await,
                update = updates.recv() => {
                    let Some(update) = update else { break };
                    if update.status == ProgressPolicyStatus::default() {
                        // The policy is gone: forget it.
                        self.latest.remove(&update.key);
                        self.written.remove(&update.key);
                        continue;
                    }
                    self.latest.insert(update.key.clone(), update.status);
                    self.flush(Some(&update.key)).await;
                }
                changed = async { leadership.as_mut()?.changed().await.ok() }, if leadership.is_some() => {
                    match changed {
                        None => leadership = None,
                        Some(()) => {
                            if leadership.as_mut().is_some_and(|l| *l.borrow_and_update()) {
                                // Another leader may have written since: what we wrote proves nothing now.
                                self.written.clear();
                                self.flush(None).await;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Writes one policy's status (or every changed one) if this replica leads.
    async fn flush(&mut self, only: Option<&PolicyId>) {
        if !self.leader.is_leader() {
            return;
        }
        let keys: Vec<PolicyId> = match only {
            Some(k) => vec![k.clone()],
            None => self.latest.keys().cloned().collect(),
        };
        for key in keys {
            let Some(status) = self.latest.get(&key) else { continue };
            if self.written.get(&key) == Some(status) {
                continue;
            }
            let result = self.write(&key, status).await;
            self.metrics.status_writes.get_or_create(&ResultLabels { result }).inc();
            match result {
                StatusWrite::Done => {
                    self.written.insert(key.clone(), status.clone());
                }
                StatusWrite::Gone => {
                    self.latest.remove(&key);
                    self.written.remove(&key);
                }
                _ => {}
            }
        }
    }

    async fn write(&self, key: &PolicyId, status: &ProgressPolicyStatus) -> StatusWrite {
        let PolicyId { kind, namespace, name } = key;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let body = json!({
            "apiVersion": "trainwarden.dev/v1alpha1",
            "kind": kind,
            "status": status,
        });
        let call = async {
            if *kind == PolicyKind::Cluster {
                let api: Api<ClusterProgressPolicy> = Api::all(self.client.clone());
                api.patch_status(name, &params, &Patch::Apply(&body)).await.map(|_| ())
            } else {
                let api: Api<ProgressPolicy> =
                    Api::namespaced(self.client.clone(), namespace.as_deref().unwrap_or_default());
                api.patch_status(name, &params, &Patch::Apply(&body)).await.map(|_| ())
            }
        };
        self.metrics.api_request(ApiOperation::PatchPolicyStatus);
        let started = std::time::Instant::now();
        let answer = tokio::time::timeout(self.timeout, call).await;
        self.metrics.api_request_took(ApiOperation::PatchPolicyStatus, started.elapsed());
        match answer {
            Ok(Ok(())) => {
                debug!(policy = %name, "status written");
                StatusWrite::Done
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => StatusWrite::Gone,
            Ok(Err(e)) => {
                self.metrics.api_error(ApiOperation::PatchPolicyStatus);
                warn!(policy = %name, error = %e, "writing policy status");
                StatusWrite::Failed
            }
            Err(_) => {
                self.metrics.api_error(ApiOperation::PatchPolicyStatus);
                warn!(policy = %name, "writing policy status timed out");
                StatusWrite::Timeout
            }
        }
    }
}
