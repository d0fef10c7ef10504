//! trainwarden's Kubernetes controller. The folders are the data path:
//!
//! ```text
//!  sources/ ──Input──▶ brain/ ──Work──▶ executor/ ──▶ TrainJob / Kueue Workload / Events / notifier
//!  (watches,           (the Evaluator,  (leader only, idempotent, timed out, counted)
//!   parsed at          no I/O)     │          └──Outcome (an Input)──▶ brain/
//!   the edge)                      └──StatusUpdate──▶ status/ ──▶ policy status (≤ 1/s per policy)
//!      └── copies ──▶ recorder ──▶ <record-dir>/<identity>/*.jsonl.gz (every replica)
//!  runtime/: wires the tasks (run), flags (config), Lease election (leader), /healthz /readyz /metrics
//!  (http), notification Secrets (secrets);  metrics/: labels and the registry every task counts into
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
//! - [`runtime`] starts and connects the tasks; [`metrics`] is what `/metrics` shows.
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
pub use runtime::{run, run_with_listener, secrets};

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
