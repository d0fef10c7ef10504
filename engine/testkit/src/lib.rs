//! Test helpers shared by trainwarden's crates (`publish = false`).
//!
//! - [`apiserver`]: the real kube-apiserver + etcd of the integration tests, one per test binary, a namespace
//!   per test; under `CI=true` a test that needs it fails (never skips) when it is missing. Tests use it as
//!   `use trainwarden_testkit::apiserver as support;` and start with `let ctx = setup!("name");`.
//! - [`faultproxy`]: a TCP proxy between the controller and the API server that black-holes, resets or
//!   refuses connections, for the fault-injection tests.
//! - [`http`]: a plain HTTP GET of a local port (the controller's `/metrics`, `/readyz`).
//! - [`receivers`]: what notification tests deliver to and with: a local HTTP receiver that records requests,
//!   an SMTP server (aiosmtpd), policies compiled by the real core, intents, secrets in a directory.
//! - [`fixtures`]: the sans-IO fixtures every crate's tests share, from trainwarden-core's `testing` module:
//!   clocks ([`at_sec`](fixtures::at_sec), [`at_min`](fixtures::at_min)), a policy builder, job snapshots, rule
//!   memories, the evaluator harness, deterministic random numbers ([`fixtures::rng`]);
//! - [`output`]: a command run with its standard output closed early or on a full disk.
//! - [`objects`]: Kubernetes objects as the API server holds them: a TrainJob and its progress report, a Kueue
//!   Workload.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod apiserver;
pub mod faultproxy;
pub mod http;
pub mod objects;
pub mod output;
pub mod receivers;

pub use trainwarden_core::testing as fixtures;

/// Whether this is a CI run (`CI=true` or `CI=1`): there a test that needs a component fails when it is
/// missing, where elsewhere it may skip after saying why.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}
