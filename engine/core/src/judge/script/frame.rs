//! The thread-local frame host functions read during one evaluation: the job (moved in, then back out, so
//! nothing is copied), the policy context, the evaluation time and deadline, and what the functions found.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use rhai::EvalAltResult;

use crate::history::job::{JobData, JobView, PolicyEnv};
use crate::history::metric_series::MetricSeries;
use crate::judge::detectors::Finding;
use crate::time::Timestamp;

/// The state host functions see during one evaluation.
pub(super) struct Frame {
    pub job: Box<JobData>,
    pub env: Arc<PolicyEnv>,
    pub now: Timestamp,
    /// When Rhai stops the script; set only before Rhai runs (a compiled condition is bounded by its shape,
    /// and reading the clock for it cost more than evaluating it).
    pub(super) deadline: Option<Instant>,
    /// Findings of detector functions that returned true, reported as the rule's reason.
    pub evidence: Vec<Finding>,
    /// The earliest time a time-driven detector function that returned false (`stalled`, ...) would turn
    /// true with no new sample: the evaluator's timer for the rule.
    pub wake: Option<Timestamp>,
}

thread_local! {
    pub(super) static FRAME: RefCell<Option<Frame>> = const { RefCell::new(None) };
    /// The policy context of the thread's last evaluation, kept after it ends: the next one is nearly
    /// always of the same policy, and taking this one back costs no reference-count update (a clone and a
    /// drop of the `Arc`, two atomic operations, were 1.5 % of a replayed sample with two conditions). It
    /// keeps one context alive per thread until an evaluation of another policy replaces it.
    static LAST_ENV: RefCell<Option<Arc<PolicyEnv>>> = const { RefCell::new(None) };
}

/// `env` for a new frame: the kept one when it is the same context, else a new reference.
pub(super) fn frame_env(env: &Arc<PolicyEnv>) -> Arc<PolicyEnv> {
    LAST_ENV
        .with(|cell| cell.try_borrow_mut().ok().and_then(|mut last| last.take()))
        .filter(|last| Arc::ptr_eq(last, env))
        .unwrap_or_else(|| env.clone())
}

/// Keeps an ended frame's context for the next [`frame_env`].
pub(super) fn keep_env(env: Arc<PolicyEnv>) {
    LAST_ENV.with(|cell| {
        if let Ok(mut last) = cell.try_borrow_mut() {
            *last = Some(env);
        }
    });
}

pub(super) fn with_frame<R>(f: impl FnOnce(&mut Frame) -> R) -> Result<R, Box<EvalAltResult>> {
    FRAME.with(|cell| match cell.try_borrow_mut() {
        Ok(mut guard) => match guard.as_mut() {
            Some(frame) => Ok(f(frame)),
            None => Err("trainwarden functions can only be used inside a rule evaluation".into()),
        },
        Err(_) => Err("re-entrant evaluation".into()),
    })
}

pub(super) type HostResult<T> = Result<T, Box<EvalAltResult>>;

pub(super) fn view_of(frame: &Frame) -> JobView<'_> {
    frame.job.view(&frame.env, frame.now)
}

pub(super) fn metric_series<'a>(frame: &'a Frame, name: &str) -> Option<&'a MetricSeries> {
    frame.job.series.metric(name)
}
