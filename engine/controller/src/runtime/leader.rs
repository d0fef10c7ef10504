//! Leader election on a `coordination.k8s.io` Lease (kube-lease-manager). Every replica watches and
//! evaluates; only the holder of the Lease executes actions and writes status.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::{Mutex, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::runtime::config::ControllerConfig;

/// Whether this replica leads now; cheap to clone and check.
#[derive(Clone)]
pub struct Leadership {
    is_leader: watch::Receiver<bool>,
    /// Set when a graceful stop begins: no new action is started from then on (the Lease is still held, so
    /// the stop can store checkpoints and statuses), and what is owed stays owed to the next leader.
    stopping: Arc<AtomicBool>,
    /// Asks the election task to stop acting, give the Lease up and finish.
    stop: Arc<Mutex<Option<oneshot::Sender<()>>>>,
    done: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl Leadership {
    /// Always the leader (leader election off: exactly one replica must run).
    pub fn always() -> Self {
        // A closed channel still reports its last value, which is all `is_leader` reads.
        let (_tx, rx) = watch::channel(true);
        Leadership { is_leader: rx, stopping: Arc::default(), stop: Arc::default(), done: Arc::default() }
    }

    /// Whether this replica holds the Lease now.
    pub fn is_leader(&self) -> bool {
        *self.is_leader.borrow()
    }

    /// Whether a new action may start: this replica leads and is not stopping. Every other write (history
    /// checkpoints, policy status) only needs [`Leadership::is_leader`].
    pub fn may_act(&self) -> bool {
        !self.stopping.load(Ordering::Relaxed) && self.is_leader()
    }

    /// The first step of a graceful stop: from now on [`Leadership::may_act`] is false, so an action that is
    /// due is answered "not leader" and stays owed (the next leader performs it); actions already under way
    /// finish. The Lease is kept until [`Leadership::release`].
    pub fn stop_acting(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// A receiver that sees every change of leadership (`true` while leading).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.is_leader.clone()
    }

    /// Stops acting and gives the Lease up (on shutdown), so another replica takes over at once instead of
    /// after the lease duration. Waits at most `within` for the API server to take the release; `false`: it
    /// did not (the Lease then expires after its duration, and the next leader takes over then).
    pub async fn release(&self, within: std::time::Duration) -> bool {
        self.stop_acting();
        if let Some(stop) = self.stop.lock().await.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.lock().await.take()
            && tokio::time::timeout(within, done).await.is_err()
        {
            warn!(within = ?within, "giving up the leader lease took too long; it expires by itself");
            return false;
        }
        true
    }
}

/// Starts leader election (or returns [`Leadership::always`] when it is off).
pub async fn elect(
    client: &Client,
    config: &ControllerConfig,
    metrics: Arc<Metrics>,
) -> Result<Leadership, kube_lease_manager::LeaseManagerError> {
    if !config.leader_election {
        metrics.leader.set(1);
        return Ok(Leadership::always());
    }
    let duration = config.lease_duration.as_secs().max(2);
    let manager = LeaseManagerBuilder::new(client.clone(), &config.lease_name)
        .with_namespace(&config.lease_namespace)
        .with_identity(&config.identity)
        .with_duration(duration)
        .with_grace((duration / 3).max(1))
        // One field manager per replica, as kube-lease-manager requires: taking an orphaned Lease is a
        // server-side apply of holderIdentity, and only a *different* manager's apply conflicts. With one shared
        // manager two replicas starting together both "took" it and both led (seen in CI: two RuleFiring
        // Events from the two replicas of `of_two_replicas_only_the_leader_acts`).
        .with_field_manager(format!("{}-lease-{}", trainwarden_kube::FIELD_MANAGER, config.identity))
        .build()
        .await?;
    // The manager's task runs while its channel has a receiver: this task holds the only one and mirrors it
    // into ours, so dropping it (on stop) ends the manager, which hands the LeaseManager back for release().
    let (mut lease_state, lease_task) = manager.watch().await;
    let (tx, rx) = watch::channel(false);
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let identity = config.identity.clone();
    let done = tokio::spawn(async move {
        loop {
            let leading = *lease_state.borrow_and_update();
            metrics.leader.set(leading as i64);
            let _ = tx.send(leading);
            info!(identity = %identity, leading, "leadership");
            tokio::select! {
                changed = lease_state.changed() => if changed.is_err() { break },
                _ = &mut stop_rx => break,
            }
        }
        let _ = tx.send(false);
        metrics.leader.set(0);
        drop(lease_state);
        match lease_task.await {
            Ok(Ok(manager)) => {
                if let Err(e) = manager.release().await {
                    warn!(error = %e, "releasing the leader lease");
                }
            }
            Ok(Err(e)) => warn!(error = %e, "leader election ended with an error"),
            Err(e) => warn!(error = %e, "leader election task failed"),
        }
    });
    Ok(Leadership {
        is_leader: rx,
        stopping: Arc::default(),
        stop: Arc::new(Mutex::new(Some(stop_tx))),
        done: Arc::new(Mutex::new(Some(done))),
    })
}
