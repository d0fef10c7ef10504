//! The rule-evaluation context: one rule of one policy, for one job, at one instant — what each step of a
//! rule's lifecycle reads, while the rule's [`RuleTrack`](super::RuleTrack) holds what it changes (as a
//! Prometheus alerting rule holds its state and is evaluated with a context).

use crate::history::job::JobData;
use crate::input::sample::JobKey;
use crate::policy::compile::{CompiledPolicy, CompiledRule};
use crate::time::Timestamp;

/// One rule of one policy for one job at `now`.
#[derive(Clone, Copy)]
pub(super) struct RuleContext<'a> {
    /// The job.
    pub(super) key: &'a JobKey,
    /// The policy the rule belongs to.
    pub(super) policy: &'a CompiledPolicy,
    /// The rule.
    pub(super) rule: &'a CompiledRule,
    /// The instant of the evaluation.
    pub(super) now: Timestamp,
    /// What the evaluator knows of the job (`None` before its first report).
    pub(super) data: Option<&'a JobData>,
}

impl<'a> RuleContext<'a> {
    /// `rule` of `policy` for the job `key` at `now`, knowing nothing of the job's data (enough to resolve).
    pub(super) fn new(
        key: &'a JobKey,
        policy: &'a CompiledPolicy,
        rule: &'a CompiledRule,
        now: Timestamp,
    ) -> Self {
        RuleContext { key, policy, rule, now, data: None }
    }

    /// The same, with what the evaluator knows of the job.
    pub(super) fn with_data(self, data: Option<&'a JobData>) -> Self {
        RuleContext { data, ..self }
    }
}
