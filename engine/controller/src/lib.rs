//! trainwarden's Kubernetes controller. The folders are the data path:
//!
//! ```text
//!  sources/ ──Input──▶ brain/ ──Work──▶ executor/ ──▶ TrainJob / Kueue Workload / Events / notifier
//!  (watches,           (the Evaluator,  (leader only, idempotent, timed out, counted)
//!   parsed at          no I/O)     │          └──Outcome (an Input)──▶ brain/
//!   the edge)                      └──StatusUpdate──▶ status/ ──▶ policy status (≤ 1/s per policy)
//!      └── copies ──▶ recorder ──▶ <record-dir>/<identity>/*.jsonl.gz (every replica)
//!  runtime/: flags (config), Lease election (leader), /healthz /readyz /metrics (http), notification
//!  Secrets (secrets);  metrics/: labels and the registry every task counts into;  [`run`] wires the tasks
//! ```
//!
//! - [`messages`] holds what the tasks send each other ([`messages::Input`], [`messages::Work`],
//!   [`messages::Outcome`], [`messages::StatusUpdate`]), so no task module imports another.
//! - [`sources`] turns watch events (and Prometheus polls, Kueue's queues) into [`messages::Input`]s, with the
//!   annotations trainwarden keeps on TrainJobs already parsed into typed fields.
//! - [`brain`] owns the [`Evaluator`](trainwarden_core::Evaluator) — the same code `replay` runs —
//!   and the per-policy book-keeping for status. It performs no I/O: it reads inputs and the clock, and emits
//!   work for the executor and status for the writer (the linkerd policy-controller's shape: a sans-IO index,
//!   status intents over a channel to one writer).
//! - [`executor`] is the only code that writes to TrainJobs, Workloads and Events. Every replica evaluates
//!   (so a new leader's state is warm and matches), only the leader executes.
//! - [`status`] coalesces and writes policy status, including the rule memories that make a restart safe.
//! - [`recorder`] (`--record-dir`) writes what the TrainJob watch sees as replayable gzip streams, one per
//!   job, bounded and rotated; it gets copies over a bounded channel and never holds up the watch. Every
//!   replica records, into its own subdirectory.
//! - [`run`] starts and connects the tasks; [`runtime`] holds the services they share; [`metrics`] is what
//!   `/metrics` shows.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod brain;
pub mod executor;
pub mod messages;
pub mod metrics;
pub mod recorder;
pub mod runtime;
pub mod sources;
pub mod status;

pub use runtime::config::{self, Clock, ControllerConfig, GpuMetricsConfig};
pub use runtime::secrets;

use std::sync::Arc;

use kube::Client;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{error, info};

use runtime::{http, leader};

pub use trainwarden_kube::annotations::{
    EXEMPT_ANNOTATION, HISTORY_ANNOTATION, HISTORY_FIELD_MANAGER, INTENTS_ANNOTATION, LAST_ACTION_ANNOTATION,
    SCALE_PENDING_ANNOTATION, SUSPENDED_BY_ANNOTATION,
};
pub use trainwarden_kube::kueue::KUEUE_QUEUE_LABEL;
/// Annotation that snoozes a TrainJob's policies until an RFC 3339 time (`2026-12-02T08:00:00Z`): its rules
/// are judged, their actions held until then (at most `--max-snooze` after it was first seen), and the
/// rules still firing then act. Defined in the core ([`trainwarden_core::SNOOZE_ANNOTATION`]), which
/// `replay`, `test` and the kubectl plugin share.
pub const SNOOZE_ANNOTATION: &str = trainwarden_core::SNOOZE_ANNOTATION;

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Leader election on the Lease failed.
    #[error("leader election: {0}")]
    Leader(#[from] kube_lease_manager::LeaseManagerError),
    /// The `/healthz`, `/readyz`, `/metrics` port could not be bound.
    #[error("serving {addr}: {source}")]
    Http {
        /// The address asked for (`config.http_addr`).
        addr: String,
        /// Why binding it failed.
        source: std::io::Error,
    },
    /// The notifier could not be started (for example the extra CA certificates could not be read).
    #[error("starting the notifier: {0}")]
    Notifier(String),
    /// A task (named) ended while the controller was still meant to run.
    #[error("{0} stopped unexpectedly")]
    TaskEnded(&'static str),
    /// A CRD the controller watches (named) is not installed in the cluster.
    #[error("the {0} CRD is not installed: {1} (install it with `kubectl apply -f crds/`)")]
    MissingCrd(&'static str, kube::Error),
}

/// Runs the controller until `shutdown` turns true or a component fails, serving `/healthz`, `/readyz` and
/// `/metrics` on `config.http_addr` when it is set.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let listener = match config.http_addr {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Http { addr: addr.to_string(), source })?,
        ),
        None => None,
    };
    run_with_listener(client, config, listener, shutdown).await
}

/// [`run`] with the HTTP endpoints on a listener the caller bound (an embedder, or a test that binds port
/// 0 and so never races another process for a port); `config.http_addr` is not used.
pub async fn run_with_listener(
    client: Client,
    config: ControllerConfig,
    listener: Option<tokio::net::TcpListener>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let metrics = Arc::new(metrics::Metrics::with_job_metrics(config.job_metrics));
    sources::check_crds(&client, &config).await?;
    let (ready_tx, ready_rx) = watch::channel(false);
    let leader = leader::elect(&client, &config, metrics.clone()).await?;

    let (input_tx, input_rx) = mpsc::channel(config.input_queue);
    let (work_tx, work_rx) = mpsc::channel(config.work_queue);
    let (status_tx, status_rx) = mpsc::channel(config.work_queue);
    let (policies_synced_tx, policies_synced_rx) = tokio::sync::oneshot::channel();

    // The recorder is not one of the tasks: it is not needed to run, and it ends last, after writing what it
    // holds.
    let (record_tx, recorder) = match &config.record {
        Some(record) => {
            let (tx, rx) = mpsc::channel(record.queue.max(1));
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
            let r = recorder::Recorder::new(record.clone(), &config.identity, metrics.clone());
            (Some(tx), Some((stop_tx, tokio::spawn(recorder::run(r, rx, stop_rx)))))
        }
        None => (None, None),
    };
    let stop_recorder = || async move {
        if let Some((stop, task)) = recorder {
            let _ = stop.send(());
            if tokio::time::timeout(std::time::Duration::from_secs(10), task).await.is_err() {
                tracing::warn!("stopping: the recorder did not write what it held within 10 s");
            }
        }
    };

    let mut tasks = JoinSet::new();
    if let Some(listener) = listener {
        let addr = listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string());
        info!(%addr, "serving /healthz, /readyz and /metrics");
        let (m, r, s) = (metrics.clone(), ready_rx.clone(), shutdown.clone());
        tasks.spawn(async move {
            http::serve(listener, m, r, s).await;
            "http server"
        });
    }
    sources::spawn_watchers(
        &mut tasks,
        client.clone(),
        &config,
        input_tx.clone(),
        policies_synced_rx,
        record_tx,
        metrics.clone(),
    );
    if let Some(gpu) = config.gpu_metrics.clone() {
        let (client, ns, tx, m) =
            (client.clone(), config.namespace.clone(), input_tx.clone(), metrics.clone());
        tasks.spawn(sources::gpu_metrics::run(client, gpu, ns, tx, ready_rx.clone(), m));
    }
    if config.kueue_queues {
        let (client, ns, tx, m) =
            (client.clone(), config.namespace.clone(), input_tx.clone(), metrics.clone());
        tasks.spawn(sources::kueue_queues::run(client, ns, tx, m));
    }
    let notifier = if config.notifications {
        let secrets = Arc::new(secrets::KubeSecrets::new(client.clone()));
        Some(
            trainwarden_notify::Notifier::new(secrets, {
                let mut c = trainwarden_notify::NotifierConfig::default();
                c.send.extra_roots_pem = config.notification_ca_pems.clone();
                c
            })
            .map_err(Error::Notifier)?,
        )
    } else {
        None
    };
    let brain = brain::Brain::new(&config, metrics.clone(), notifier.clone());
    {
        let (cfg, m, leading) = (config.clone(), metrics.clone(), leader.subscribe());
        tasks.spawn(async move {
            brain::run(
                brain,
                cfg,
                brain::Channels {
                    inputs: input_rx,
                    work: work_tx,
                    statuses: status_tx,
                    policies_synced: policies_synced_tx,
                    ready: ready_tx,
                    leadership: leading,
                },
                m,
            )
            .await;
            "evaluation loop"
        });
    }
    {
        let exec = executor::Executor::new(
            client.clone(),
            &config,
            metrics.clone(),
            leader.clone(),
            notifier.clone(),
        );
        let feedback = input_tx.clone();
        tasks.spawn(async move {
            exec.run(work_rx, feedback).await;
            "executor"
        });
    }
    {
        let writer = status::StatusWriter::new(client.clone(), &config, metrics.clone(), leader.clone());
        tasks.spawn(async move {
            writer.run(status_rx).await;
            "status writer"
        });
    }
    // Kept for the stop's history flush; the watchers hold their own.
    let flush_tx = input_tx;

    tokio::select! {
        _ = async { while shutdown.changed().await.is_ok() { if *shutdown.borrow() { break; } } } => {
            info!("shutting down");
            // The history checkpoints not yet written go out first (bounded), while this replica still leads.
            let flushed = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                let (done, written) = tokio::sync::oneshot::channel();
                if flush_tx.send(messages::Input::FlushHistory(done)).await.is_ok() {
                    let _ = written.await;
                }
            })
            .await;
            if flushed.is_err() {
                tracing::warn!("stopping: not every history checkpoint was stored within 5 s");
            }
            if let Some(n) = &notifier {
                // Pending notifications go out now (bounded), before leadership is given up.
                let report = n.shutdown(std::time::Duration::from_secs(5)).await;
                if report.dropped > 0 {
                    tracing::warn!(dropped = report.dropped, "notifications undelivered at shutdown");
                }
            }
            leader.release().await;
            tasks.abort_all();
            stop_recorder().await;
            Ok(())
        }
        ended = tasks.join_next() => {
            let name = match ended {
                Some(Ok(name)) => name,
                Some(Err(e)) => { error!(error = %e, "a controller task panicked"); "a task" }
                None => "every task",
            };
            error!(task = name, "controller task ended");
            leader.release().await;
            tasks.abort_all();
            stop_recorder().await;
            Err(Error::TaskEnded(name))
        }
    }
}
