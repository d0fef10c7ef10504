//! What evaluation reports: rule states and their transitions, the reason a rule fired, and the action
//! intents (with the GPU time they would free) that the executor performs or Audit mode only reports.

use std::collections::BTreeMap;

use crate::input::sample::JobKey;
use crate::judge::detectors::{Finding, FindingKind};
use crate::policy::{ActionKind, ActionSpec, Mode, PolicyRef};
use crate::time::Timestamp;

/// Where a rule is for a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "PascalCase")]
pub enum RuleState {
    Inactive,
    Pending,
    Firing,
}

/// The name a transition is reported under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TransitionKind {
    /// Condition became true, waiting for `for`.
    Pending,
    Firing,
    /// Firing → inactive.
    Resolved,
    /// Pending → inactive before firing.
    Cleared,
}

impl TransitionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionKind::Pending => "pending",
            TransitionKind::Firing => "firing",
            TransitionKind::Resolved => "resolved",
            TransitionKind::Cleared => "cleared",
        }
    }
}

/// Why a rule fired: one sentence and the values behind it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Reason {
    pub summary: String,
    pub values: BTreeMap<String, f64>,
    #[serde(skip)]
    pub kind: Option<FindingKind>,
}

impl Reason {
    pub(super) fn from_findings(findings: Vec<Finding>, when: Option<&str>) -> Reason {
        let mut reason = Reason::default();
        let mut parts = Vec::new();
        for f in findings {
            parts.push(f.summary);
            if f.kind == FindingKind::Stall || reason.kind.is_none() {
                reason.kind = Some(f.kind);
            }
            reason.values.extend(f.values);
        }
        if parts.is_empty()
            && let Some(w) = when
        {
            let w = w.split_whitespace().collect::<Vec<_>>().join(" ");
            parts.push(format!(
                "`{}` is true",
                if w.chars().count() > 120 {
                    format!("{}…", w.chars().take(120).collect::<String>())
                } else {
                    w
                }
            ));
        }
        reason.summary = parts.join("; ");
        reason
    }
}

/// Where a saving is counted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SavingsBasis {
    /// The job's estimated end (its last report's time + ETA).
    EstimatedEnd,
    /// The end of the unattended window a stall happened in, when someone would have noticed.
    WindowEnd,
}

/// GPU time an action frees.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Savings {
    /// Until when the job would otherwise have held its GPUs.
    pub until: Timestamp,
    /// What `until` is.
    pub basis: SavingsBasis,
    pub gpus: f64,
    pub gpu_hours: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
}

/// What the engine wants done. The executor performs it (Enforce) or reports it (Audit).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionIntent {
    /// Stable within one firing: `policy/rule/job/firing#/action#`, for idempotent execution.
    pub id: String,
    pub at: Timestamp,
    pub job: JobKey,
    pub policy: PolicyRef,
    pub rule: String,
    pub action: ActionSpec,
    pub mode: Mode,
    pub reason: Reason,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings: Option<Savings>,
}

/// Everything evaluation reports.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Transition {
        at: Timestamp,
        job: JobKey,
        policy: PolicyRef,
        rule: String,
        kind: TransitionKind,
        reason: Reason,
        mode: Mode,
    },
    Intent(ActionIntent),
    /// An action skipped because the same one was issued less than `cooldown` ago.
    Suppressed {
        at: Timestamp,
        job: JobKey,
        policy: PolicyRef,
        rule: String,
        action: ActionKind,
        until: Timestamp,
    },
    /// A rule could not be evaluated (script error); its state is left as it was.
    RuleError {
        at: Timestamp,
        job: JobKey,
        policy: PolicyRef,
        rule: String,
        message: String,
    },
}
