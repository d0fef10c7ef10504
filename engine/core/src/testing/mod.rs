//! Test fixtures, one set for every crate: the core's own unit tests use them directly, the other crates
//! through `trainwarden-testkit` (which turns on this crate's `testing` feature). Built only for tests: no
//! production code may use them.
//!
//! - [`clock`](mod@clock): instants on one fixed clock, [`at_sec`] and [`at_min`] (never a bare `t(5)` that means seconds
//!   in one file and minutes in the next);
//! - [`policy`](mod@policy): a policy document written by a builder instead of its header inline;
//! - [`job`](mod@job): a job snapshot, reporting or not; [`memory`](mod@memory): a rule memory;
//! - [`harness`](mod@harness): an evaluator with policies, a clock the test moves and the events it produced;
//! - [`rng`](mod@rng): deterministic pseudo-random numbers for property tests.

pub mod clock;
pub mod harness;
pub mod job;
pub mod memory;
pub mod policy;
pub mod rng;

pub use clock::{EPOCH, at_min, at_sec, ts};
pub use harness::Harness;
pub use job::{JobBuilder, job};
pub use memory::memory;
pub use policy::{PolicyBuilder, cluster_policy, policy};
