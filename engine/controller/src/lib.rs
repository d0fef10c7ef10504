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
use std::time::{Duration, Instant};

use kube::Client;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{error, info, warn};

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
/// `/metrics` on `config.http_addr` when it is set. `Ok` after a graceful stop ([`runtime::shutdown`]),
/// even one whose steps ran past their deadlines (logged); `Err` only when the controller could not start
/// or a task ended while it was meant to run.
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

/// Resolves once `shutdown` is true (at once if it already is); never if its sender is gone without it.
async fn stop_requested(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Waits for a task to end, at most `within`; aborts it then. `true`: it ended by itself in time.
async fn end_within<T>(task: &mut JoinHandle<T>, within: Duration) -> bool {
    match tokio::time::timeout(within, &mut *task).await {
        Ok(_) => true,
        Err(_) => {
            task.abort();
            false
        }
    }
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
    // A signal while starting (the CRD check, the first Lease round trip) is a stop before anything ran.
    let started = tokio::select! {
        biased;
        _ = stop_requested(&mut shutdown) => None,
        started = async {
            sources::check_crds(&client, &config).await?;
            Ok::<_, Error>(leader::elect(&client, &config, metrics.clone()).await?)
        } => Some(started?),
    };
    let Some(leader) = started else {
        info!("stopped while starting: nothing ran, nothing to flush");
        return Ok(());
    };
    let (ready_tx, ready_rx) = watch::channel(false);
    let (stopping_tx, stopping_rx) = watch::channel(false);

    let (input_tx, input_rx) = mpsc::channel(config.input_queue);
    let (work_tx, work_rx) = mpsc::channel(config.work_queue);
    let (status_tx, status_rx) = mpsc::channel(config.work_queue);
    let (policies_synced_tx, policies_synced_rx) = tokio::sync::oneshot::channel();

    // The recorder is not one of the tasks: it is not needed to run, and it ends late, after writing what
    // it holds.
    let (record_tx, recorder) = match &config.record {
        Some(record) => {
            let (tx, rx) = mpsc::channel(record.queue.max(1));
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
            let r = recorder::Recorder::new(record.clone(), &config.identity, metrics.clone());
            (Some(tx), Some((stop_tx, tokio::spawn(recorder::run(r, rx, stop_rx)))))
        }
        None => (None, None),
    };

    // The HTTP server stops last, on its own signal (not on `shutdown`): it must not end by itself when the
    // stop begins, or a probe would see the port closed before it saw the replica not ready.
    let http = match listener {
        Some(listener) => {
            let addr = listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string());
            info!(%addr, "serving /healthz, /readyz and /metrics");
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
            let (m, r, s) = (metrics.clone(), ready_rx.clone(), stopping_rx.clone());
            Some((stop_tx, tokio::spawn(http::serve(listener, m, r, s, stop_rx))))
        }
        None => None,
    };

    // The sources: they only feed the evaluation loop, and end at the stop's fourth step.
    let mut sources = JoinSet::new();
    sources::spawn_watchers(
        &mut sources,
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
        sources.spawn(sources::gpu_metrics::run(client, gpu, ns, tx, ready_rx.clone(), m));
    }
    if config.kueue_queues {
        let (client, ns, tx, m) =
            (client.clone(), config.namespace.clone(), input_tx.clone(), metrics.clone());
        sources.spawn(sources::kueue_queues::run(client, ns, tx, m));
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
    // The pipeline: evaluation loop → executor, status writer. It ends from its head (the loop's `stop`).
    let (brain_stop, brain_stop_rx) = tokio::sync::oneshot::channel();
    let mut brain_task = {
        let brain = brain::Brain::new(&config, metrics.clone(), notifier.clone());
        let (cfg, m, leading) = (config.clone(), metrics.clone(), leader.subscribe());
        let channels = brain::Channels {
            inputs: input_rx,
            work: work_tx,
            statuses: status_tx,
            policies_synced: policies_synced_tx,
            ready: ready_tx,
            leadership: leading,
            stopping: stopping_rx.clone(),
            stop: brain_stop_rx,
        };
        tokio::spawn(brain::run(brain, cfg, channels, m))
    };
    let awaiting_delivery;
    let mut executor_task = {
        let exec = executor::Executor::new(
            client.clone(),
            &config,
            metrics.clone(),
            leader.clone(),
            notifier.clone(),
        );
        awaiting_delivery = exec.awaiting_delivery();
        let feedback = input_tx.clone();
        tokio::spawn(exec.run(work_rx, feedback))
    };
    let mut status_task = {
        let writer = status::StatusWriter::new(client.clone(), &config, metrics.clone(), leader.clone());
        tokio::spawn(writer.run(status_rx))
    };
    let (http_stop, mut http_task) = match http {
        Some((stop, task)) => (Some(stop), Some(task)),
        None => (None, None),
    };
    // Kept for the stop's history flush; the sources hold their own.
    let flush_tx = input_tx;

    // Running. The signal is looked at first, so a task that ends because the stop began is never taken for
    // a failure; any task ending before it is one.
    let failed: Option<&'static str> = tokio::select! {
        biased;
        _ = stop_requested(&mut shutdown) => None,
        _ = &mut brain_task => Some("evaluation loop"),
        _ = &mut executor_task => Some("executor"),
        _ = &mut status_task => Some("status writer"),
        served = async { match http_task.as_mut() { Some(t) => t.await, None => std::future::pending().await } } => {
            match served {
                Ok(Err(e)) => error!(error = %e, "the http server failed"),
                Err(e) => error!(error = %e, "the http server panicked"),
                Ok(Ok(())) => {}
            }
            Some("http server")
        }
        ended = sources.join_next() => Some(match ended {
            Some(Ok(name)) => name,
            Some(Err(e)) => { error!(error = %e, "a watch task panicked"); "a watch task" }
            None => "every watch task",
        }),
    };
    if let Some(name) = failed {
        // A real failure: say which task ended, stop what is left (no graceful steps: the pipeline is
        // broken), exit non-zero.
        error!(task = name, "controller task ended while the controller was meant to run");
        let _ = stopping_tx.send(true);
        leader.release(runtime::shutdown::LEASE_RELEASE).await;
        sources.abort_all();
        for task in [&brain_task, &executor_task, &status_task] {
            task.abort();
        }
        if let Some((stop, task)) = recorder {
            let _ = stop.send(());
            let _ = tokio::time::timeout(runtime::shutdown::RECORDER_STOP, task).await;
        }
        if let Some(task) = http_task {
            task.abort();
        }
        return Err(Error::TaskEnded(name));
    }

    use runtime::shutdown::{self, Step, log_step};
    let stop_began = Instant::now();
    info!("shutting down: a graceful stop began (SIGTERM or SIGINT)");

    // 1. Not ready; no new action.
    let t = Instant::now();
    let _ = stopping_tx.send(true);
    leader.stop_acting();
    log_step(Step::StopActing, t, true, "/readyz answers 503; due actions stay owed to the next leader");

    // 2. The history checkpoints not yet written go out, while this replica still leads.
    let t = Instant::now();
    let flushed = tokio::time::timeout(shutdown::HISTORY_FLUSH, async {
        let (done, written) = tokio::sync::oneshot::channel();
        flush_tx.send(messages::Input::FlushHistory(done)).await.is_ok() && written.await.is_ok()
    })
    .await;
    let (ok, detail) = match flushed {
        Ok(true) => (true, "every changed checkpoint stored"),
        Ok(false) => (false, "the evaluation loop had ended: nothing flushed"),
        Err(_) => (false, "deadline passed: jobs not reached keep their previous checkpoint"),
    };
    log_step(Step::FlushHistory, t, ok, detail);

    // 3. Pending notifications go out, before leadership is given up.
    let t = Instant::now();
    match &notifier {
        Some(n) => {
            let bound = shutdown::NOTIFIER_DRAIN + shutdown::NOTIFIER_GRACE;
            let drained = tokio::time::timeout(bound, async {
                let report = n.shutdown(shutdown::NOTIFIER_DRAIN).await;
                // Every notify intent's outcome (delivered, or owed to the next leader) reaches the
                // evaluation loop before its last statuses are taken.
                while awaiting_delivery.load(std::sync::atomic::Ordering::SeqCst) > 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                report
            })
            .await;
            match drained {
                Ok(report) if report.dropped == 0 && report.undelivered_intents == 0 => {
                    log_step(Step::DrainNotifier, t, true, "every queued notification sent");
                }
                Ok(report) => {
                    warn!(
                        dropped = report.dropped,
                        owed = report.undelivered_intents,
                        "notifications not sent at shutdown: their intents stay owed, the next leader sends them"
                    );
                    log_step(
                        Step::DrainNotifier,
                        t,
                        false,
                        "deadline passed: the rest is owed to the next leader",
                    );
                }
                Err(_) => {
                    log_step(Step::DrainNotifier, t, false, "deadline passed during a delivery attempt");
                }
            }
        }
        None => log_step(Step::DrainNotifier, t, true, "notifications are off"),
    }

    // 4. The last statuses, then the pipeline and the watches end.
    let t = Instant::now();
    drop(flush_tx);
    let _ = brain_stop.send(());
    let deadline = tokio::time::Instant::now() + shutdown::PIPELINE_END;
    let left = || deadline.saturating_duration_since(tokio::time::Instant::now());
    let mut ok = end_within(&mut brain_task, left()).await;
    ok &= end_within(&mut executor_task, left()).await;
    ok &= end_within(&mut status_task, left()).await;
    sources.abort_all();
    while sources.join_next().await.is_some() {}
    log_step(
        Step::EndPipeline,
        t,
        ok,
        if ok { "last statuses written" } else { "deadline passed: the rest was cut off" },
    );

    // 5. Another replica may lead now.
    let t = Instant::now();
    let ok = leader.release(shutdown::LEASE_RELEASE).await;
    log_step(
        Step::ReleaseLease,
        t,
        ok,
        if ok { "released" } else { "deadline passed: it expires by itself" },
    );

    // 6. The recorder writes what it holds.
    let t = Instant::now();
    let ok = match recorder {
        Some((stop, mut task)) => {
            let _ = stop.send(());
            end_within(&mut task, shutdown::RECORDER_STOP).await
        }
        None => true,
    };
    log_step(
        Step::StopRecorder,
        t,
        ok,
        if ok { "written" } else { "deadline passed: its buffers were lost" },
    );

    // 7. Last: the endpoints.
    let t = Instant::now();
    let ok = match (http_stop, http_task.as_mut()) {
        (Some(stop), Some(task)) => {
            let _ = stop.send(());
            end_within(task, Duration::from_secs(2)).await
        }
        _ => true,
    };
    log_step(Step::StopServing, t, ok, "");
    info!(took_ms = stop_began.elapsed().as_millis() as u64, "controller stopped cleanly");
    Ok(())
}
