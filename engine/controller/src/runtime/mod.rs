//! The runtime services the tasks share: [`config`] holds the flags, [`leader`] the Lease-based election
//! that gates every write, [`http`] serves `/healthz`, `/readyz` and `/metrics`, [`shutdown`] names the
//! graceful stop's steps and deadlines, and [`secrets`] reads the
//! notification Secrets from the API. (The crate root's `run` wires the tasks together.)

pub mod config;
pub mod http;
pub mod leader;
pub mod secrets;
pub mod shutdown;
