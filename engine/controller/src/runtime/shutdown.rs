//! The graceful stop: its steps, their order and their deadlines. [`crate::run`] performs them on SIGTERM or
//! SIGINT (whatever turns its `shutdown` watch true); this module names them, so the log, the README and the
//! tests say the same thing.
//!
//! Order (each step logged as `shutdown step` with its number and name when it ends):
//!
//! 1. [`Step::StopActing`]: `/readyz` answers 503, so a rollout stops counting this replica and the new one
//!    is not held back; no new action starts (a due one stays owed to the next leader); actions under way
//!    finish. The watches go on, so a report that reached the API server before the signal is still seen.
//! 2. [`Step::FlushHistory`]: every history checkpoint whose content changed since its last write is stored
//!    (still leading), at most [`HISTORY_FLUSH`].
//! 3. [`Step::DrainNotifier`]: the notifications pending are sent, at most [`NOTIFIER_DRAIN`] (plus
//!    [`NOTIFIER_GRACE`] for an attempt under way); what is not sent then is counted as dropped.
//! 4. [`Step::EndPipeline`]: the evaluation loop sends its last policy statuses (the intents still owed
//!    among them, so the next leader performs them) and ends; the executor finishes what it holds and the
//!    status writer writes what it got; at most [`PIPELINE_END`]. The watches stop.
//! 5. [`Step::ReleaseLease`]: the Lease is given up, at most [`LEASE_RELEASE`], so another replica leads at
//!    once instead of after the lease duration.
//! 6. [`Step::StopRecorder`]: the recorder writes what it holds, at most [`RECORDER_STOP`].
//! 7. [`Step::StopServing`]: `/healthz`, `/readyz` and `/metrics` stop last.
//!
//! A step past its deadline is logged as a warning and the stop goes on: the stop is still clean (exit 0),
//! what the step did not finish is what a `kill -9` would lose there. The worst case is the sum,
//! [`WORST_CASE`] (30 s, the chart's `terminationGracePeriodSeconds` leaves room above it); a stop with
//! nothing slow takes well under a second.

use std::time::{Duration, Instant};

/// The longest the history flush may take.
pub const HISTORY_FLUSH: Duration = Duration::from_secs(5);
/// The longest the notifier's queues are drained.
pub const NOTIFIER_DRAIN: Duration = Duration::from_secs(5);
/// Beyond [`NOTIFIER_DRAIN`], for a delivery attempt under way at the deadline.
pub const NOTIFIER_GRACE: Duration = Duration::from_secs(5);
/// The longest the evaluation loop, executor and status writer get to end.
pub const PIPELINE_END: Duration = Duration::from_secs(5);
/// The longest the Lease's release may take.
pub const LEASE_RELEASE: Duration = Duration::from_secs(5);
/// The longest the recorder gets to write what it holds.
pub const RECORDER_STOP: Duration = Duration::from_secs(5);
/// The sum of the deadlines: the longest a graceful stop takes.
pub const WORST_CASE: Duration = Duration::from_secs(
    HISTORY_FLUSH.as_secs()
        + NOTIFIER_DRAIN.as_secs()
        + NOTIFIER_GRACE.as_secs()
        + PIPELINE_END.as_secs()
        + LEASE_RELEASE.as_secs()
        + RECORDER_STOP.as_secs(),
);

/// One step of the graceful stop, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// Not ready; no new action.
    StopActing,
    /// The changed history checkpoints stored.
    FlushHistory,
    /// The notifications pending sent.
    DrainNotifier,
    /// Last statuses written; the evaluation loop, executor, status writer and watches ended.
    EndPipeline,
    /// The Lease given up.
    ReleaseLease,
    /// The recorder's buffers written.
    StopRecorder,
    /// The HTTP endpoints closed.
    StopServing,
}

impl Step {
    /// Every step, in the order they run.
    pub const ALL: [Step; 7] = [
        Step::StopActing,
        Step::FlushHistory,
        Step::DrainNotifier,
        Step::EndPipeline,
        Step::ReleaseLease,
        Step::StopRecorder,
        Step::StopServing,
    ];

    /// The step's name in the log (`step` field).
    pub fn as_str(self) -> &'static str {
        match self {
            Step::StopActing => "stop acting",
            Step::FlushHistory => "flush history checkpoints",
            Step::DrainNotifier => "drain the notifier",
            Step::EndPipeline => "end the pipeline",
            Step::ReleaseLease => "give up the lease",
            Step::StopRecorder => "stop the recorder",
            Step::StopServing => "stop serving /readyz and /metrics",
        }
    }

    /// 1-based position in [`Step::ALL`].
    pub fn number(self) -> usize {
        Step::ALL.iter().position(|s| *s == self).map_or(0, |i| i + 1)
    }
}

/// Logs a step's end: `shutdown step` with `number`, `step`, `ok` (within its deadline), the step's own
/// `took_ms` and `detail`.
pub fn log_step(step: Step, started: Instant, ok: bool, detail: &str) {
    let took_ms = started.elapsed().as_millis() as u64;
    if ok {
        tracing::info!(number = step.number(), step = step.as_str(), ok, took_ms, detail, "shutdown step");
    } else {
        tracing::warn!(number = step.number(), step = step.as_str(), ok, took_ms, detail, "shutdown step");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steps_are_numbered_in_order_and_the_worst_case_is_their_sum() {
        let numbers: Vec<usize> = Step::ALL.iter().map(|s| s.number()).collect();
        assert_eq!(numbers, (1..=7).collect::<Vec<_>>());
        assert!(Step::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(WORST_CASE, Duration::from_secs(30));
    }
}
