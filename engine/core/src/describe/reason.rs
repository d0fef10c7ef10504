//! Every reason trainwarden gives a Kubernetes Event it records, with its type (warning or normal) and the
//! action the Event names.

/// Why trainwarden records an Event on a TrainJob: one variant per reason it ever uses (the `event` action's
/// reason is the policy's own, [`Reason::ProgressRuleFiring`] when it names none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A rule started firing.
    RuleFiring,
    /// A firing rule resolved.
    RuleResolved,
    /// A rule could not be evaluated for the job.
    RuleError,
    /// A firing's actions are held by a snooze or a ProgressPolicyException.
    ActionsHeld,
    /// A firing's actions are held by a blast-radius limit.
    ActionsLimited,
    /// A firing's action waits for its grace.
    ActionDeferred,
    /// A ProgressPolicyException no longer holds a rule.
    ExceptionEnded,
    /// The job's owner snoozed its policies.
    Snoozed,
    /// A snooze ended.
    SnoozeEnded,
    /// A policy's snooze limits ended a snooze for it.
    SnoozeCapped,
    /// The snooze annotation does not read.
    InvalidSnooze,
    /// The job is exempt from every policy.
    Exempt,
    /// The job's progress report has fields its format does not define.
    UnknownProgressFields,
    /// A `notify` action names a receiver its policy does not declare.
    NotificationNotConfigured,
    /// Notifications are off: a `notify` action was recorded, not sent.
    NotificationRecorded,
    /// The TrainJob was suspended.
    Suspended,
    /// A Kueue-managed TrainJob's Workload was deactivated.
    WorkloadDeactivated,
    /// The annotation an `annotate` action names was set.
    Annotated,
    /// The TrainJob's `numNodes` was changed.
    Scaled,
    /// The TrainJob's `numNodes` cannot be changed (its CRD makes `spec.trainer` immutable).
    ScaleRefused,
    /// The TrainJob was resized but could not be resumed.
    ScaleResumeFailed,
    /// A checkpoint was requested of the running job (its pods carry the request).
    CheckpointRequested,
    /// The job acknowledged a requested checkpoint.
    CheckpointSaved,
    /// A requested checkpoint was not acknowledged within its timeout.
    CheckpointTimedOut,
    /// Audit mode: the TrainJob would have been suspended.
    WouldSuspend,
    /// Audit mode: an annotation would have been set.
    WouldAnnotate,
    /// Audit mode: the TrainJob would have been resized.
    WouldScale,
    /// Audit mode: another action would have been performed.
    WouldAct,
    /// An action panicked in the executor (it is tried again).
    ActionPanicked,
    /// A stopping action was not performed: at the moment of the write its policy was gone or changed, or
    /// an exception or a snooze held the job (what the rule was judged under no longer stood).
    ActionAbandoned,
    /// The `event` action's reason when its policy names none.
    ProgressRuleFiring,
}

impl Reason {
    /// Every reason, for documentation and tests.
    pub const ALL: [Reason; 31] = [
        Reason::RuleFiring,
        Reason::RuleResolved,
        Reason::RuleError,
        Reason::ActionsHeld,
        Reason::ActionsLimited,
        Reason::ActionDeferred,
        Reason::ExceptionEnded,
        Reason::Snoozed,
        Reason::SnoozeEnded,
        Reason::SnoozeCapped,
        Reason::InvalidSnooze,
        Reason::Exempt,
        Reason::UnknownProgressFields,
        Reason::NotificationNotConfigured,
        Reason::NotificationRecorded,
        Reason::Suspended,
        Reason::WorkloadDeactivated,
        Reason::Annotated,
        Reason::Scaled,
        Reason::ScaleRefused,
        Reason::ScaleResumeFailed,
        Reason::CheckpointRequested,
        Reason::CheckpointSaved,
        Reason::CheckpointTimedOut,
        Reason::WouldSuspend,
        Reason::WouldAnnotate,
        Reason::WouldScale,
        Reason::WouldAct,
        Reason::ActionPanicked,
        Reason::ActionAbandoned,
        Reason::ProgressRuleFiring,
    ];

    /// The Event's `reason` (CamelCase).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::RuleFiring => "RuleFiring",
            Reason::RuleResolved => "RuleResolved",
            Reason::RuleError => "RuleError",
            Reason::ActionsHeld => "ActionsHeld",
            Reason::ActionsLimited => "ActionsLimited",
            Reason::ActionDeferred => "ActionDeferred",
            Reason::ExceptionEnded => "ExceptionEnded",
            Reason::Snoozed => "Snoozed",
            Reason::SnoozeEnded => "SnoozeEnded",
            Reason::SnoozeCapped => "SnoozeCapped",
            Reason::InvalidSnooze => "InvalidSnooze",
            Reason::Exempt => "Exempt",
            Reason::UnknownProgressFields => "UnknownProgressFields",
            Reason::NotificationNotConfigured => "NotificationNotConfigured",
            Reason::NotificationRecorded => "NotificationRecorded",
            Reason::Suspended => "Suspended",
            Reason::WorkloadDeactivated => "WorkloadDeactivated",
            Reason::Annotated => "Annotated",
            Reason::Scaled => "Scaled",
            Reason::ScaleRefused => "ScaleRefused",
            Reason::ScaleResumeFailed => "ScaleResumeFailed",
            Reason::CheckpointRequested => "CheckpointRequested",
            Reason::CheckpointSaved => "CheckpointSaved",
            Reason::CheckpointTimedOut => "CheckpointTimedOut",
            Reason::WouldSuspend => "WouldSuspend",
            Reason::WouldAnnotate => "WouldAnnotate",
            Reason::WouldScale => "WouldScale",
            Reason::WouldAct => "WouldAct",
            Reason::ActionPanicked => "ActionPanicked",
            Reason::ActionAbandoned => "ActionAbandoned",
            Reason::ProgressRuleFiring => "ProgressRuleFiring",
        }
    }

    /// Whether the Event's type is `Warning` (something wants a person's attention) rather than `Normal`.
    pub fn is_warning(self) -> bool {
        match self {
            Reason::RuleFiring
            | Reason::RuleError
            | Reason::ActionsLimited
            | Reason::ActionDeferred
            | Reason::InvalidSnooze
            | Reason::UnknownProgressFields
            | Reason::NotificationNotConfigured
            | Reason::Suspended
            | Reason::WorkloadDeactivated
            | Reason::ScaleRefused
            | Reason::ScaleResumeFailed
            | Reason::CheckpointTimedOut
            | Reason::ActionPanicked
            | Reason::ActionAbandoned
            | Reason::ProgressRuleFiring => true,
            Reason::RuleResolved
            | Reason::ActionsHeld
            | Reason::ExceptionEnded
            | Reason::Snoozed
            | Reason::SnoozeEnded
            | Reason::SnoozeCapped
            | Reason::Exempt
            | Reason::NotificationRecorded
            | Reason::Annotated
            | Reason::Scaled
            | Reason::CheckpointRequested
            | Reason::CheckpointSaved
            | Reason::WouldSuspend
            | Reason::WouldAnnotate
            | Reason::WouldScale
            | Reason::WouldAct => false,
        }
    }

    /// The Event's `action`: what trainwarden was doing (`Evaluate` for what judging found).
    pub fn action(self) -> &'static str {
        match self {
            Reason::RuleFiring
            | Reason::RuleResolved
            | Reason::RuleError
            | Reason::ActionsHeld
            | Reason::ActionsLimited
            | Reason::ActionDeferred
            | Reason::ExceptionEnded
            | Reason::Snoozed
            | Reason::SnoozeEnded
            | Reason::SnoozeCapped
            | Reason::InvalidSnooze
            | Reason::Exempt
            | Reason::UnknownProgressFields
            | Reason::ProgressRuleFiring => "Evaluate",
            Reason::NotificationNotConfigured | Reason::NotificationRecorded => "Notify",
            Reason::Suspended | Reason::WorkloadDeactivated => "Suspend",
            Reason::Annotated => "Annotate",
            Reason::Scaled | Reason::ScaleRefused | Reason::ScaleResumeFailed => "Scale",
            Reason::CheckpointRequested | Reason::CheckpointSaved | Reason::CheckpointTimedOut => {
                "Checkpoint"
            }
            Reason::WouldSuspend | Reason::WouldAnnotate | Reason::WouldScale | Reason::WouldAct => "Audit",
            Reason::ActionPanicked | Reason::ActionAbandoned => "Execute",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_own_camel_case_name() {
        let names: std::collections::BTreeSet<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Reason::ALL.len(), "two reasons share a name");
        for name in names {
            assert!(name.starts_with(|c: char| c.is_ascii_uppercase()), "{name}");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric()), "{name}");
        }
    }
}
