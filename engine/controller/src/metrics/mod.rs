//! Prometheus metrics (`/metrics`): [`labels`] holds the label sets and how their values are written,
//! [`registry`] the [`Metrics`] every task counts into (and the per-job families of `--job-metrics`).

pub mod labels;
pub mod registry;

pub use crate::messages::WorkKind;
pub use labels::*;
pub use registry::*;
