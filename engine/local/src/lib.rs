//! trainwarden local mode: `trainwarden watch -- CMD`.
//!
//! Training code that already reports to Kubeflow Trainer (the Kubeflow SDK's `update_trainjob_status`,
//! transformers' `KubeflowCallback`) reports to trainwarden unchanged: the command is started with the
//! variables a Kubeflow training pod gets, pointing at a loopback HTTPS endpoint that behaves like the
//! Trainer's status server. The policy is evaluated by the same core as `replay` and the controller, on the
//! wall clock, and its decisions are carried out on the process.
//!
//! * [`status_api`]: the endpoint's decisions, request by request (no I/O), matching upstream;
//! * [`server`]: TLS and HTTP around it; [`credentials`]: the run's CA, certificate and token;
//! * [`supervisor`]: the command in its own process group; signals;
//! * [`recorder`]: the run as a replayable stream; [`watch`](mod@watch): the driver that ties them together;
//! * [`notify`]: `notify` actions delivered through the notifications crate (`--notify`).
// Unsafe only where the standard library requires it: the pre-exec hook of the supervised command.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod credentials;
pub mod notify;
pub mod recorder;
pub mod server;
pub mod status_api;
pub mod supervisor;
pub mod watch;

pub use notify::Delivering;
pub use watch::{Ending, Notifier, Outcome, ReportOnly, WatchError, WatchOptions, watch};
