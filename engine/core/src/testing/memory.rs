//! Rule memories for tests: `RuleMemory { since: Some(at_sec(0)), ..memory("ml/ft", "high", Pending) }`.

use crate::evaluate::{RuleMemory, RuleState};

/// What rule `rule` remembers about the job `job` (`namespace/name`): `state`, and nothing else yet.
pub fn memory(job: &str, rule: &str, state: RuleState) -> RuleMemory {
    RuleMemory {
        job: job.into(),
        rule: rule.into(),
        state,
        since: None,
        cleared_at: None,
        firings: 0,
        last_issued: Vec::new(),
        rule_hash: None,
        held: None,
        deferred: Vec::new(),
        snooze_held: false,
        excepted_by: None,
    }
}
