//! The annotations trainwarden reads and writes on TrainJobs: written by the controller, read by it after a
//! restart and by `kubectl trainwarden`. (The verdict's is in [`crate::verdict`].)

/// Annotation that exempts a TrainJob from every policy (`"true"`).
pub const EXEMPT_ANNOTATION: &str = "trainwarden.dev/exempt";
/// Annotation the executor writes on a TrainJob it acted on: the last action as JSON (intent id, action,
/// policy, rule, reason, time). Also how a repeated intent is recognised (idempotence).
pub const LAST_ACTION_ANNOTATION: &str = "trainwarden.dev/last-action";
/// Annotation the executor keeps on a TrainJob it acted on: the ids of the last
/// `RECORDED_INTENTS` (the controller's executor) intents performed on it, as a JSON array, written in the same apply as
/// the action's own change. An intent found there is not performed again (`already_done`), whichever
/// replica or restart tries it: exactly-once effect by intent id.
pub const INTENTS_ANNOTATION: &str = "trainwarden.dev/intents";
/// Annotation a scale's first write (suspend and resize) sets when a resume must follow: the intent id. A
/// leader that takes over a scale interrupted between the two writes finds it and resumes the job.
pub const SCALE_PENDING_ANNOTATION: &str = "trainwarden.dev/scale-pending";
/// Annotation the leader keeps on every judged TrainJob: the checkpoint of its history and detector
/// memories ([`trainwarden_core::Evaluator::checkpoint`], at most
/// [`trainwarden_core::MAX_CHECKPOINT_BYTES`]), so a restarted or newly elected controller judges a plateau
/// on the schedule it had. Written by its own field manager ([`HISTORY_FIELD_MANAGER`]) at most once per
/// `history_interval` per job and only when the history changed (see the controller's `brain`).
pub const HISTORY_ANNOTATION: &str = "trainwarden.dev/history";
/// The field manager of [`HISTORY_ANNOTATION`]: apart from the actions' manager, so a checkpoint write
/// states one field and never re-states (or races) what an action applied.
pub const HISTORY_FIELD_MANAGER: &str = "trainwarden-history";
/// Annotation naming the policy and rule that suspended a TrainJob.
pub const SUSPENDED_BY_ANNOTATION: &str = "trainwarden.dev/suspended-by";

#[cfg(test)]
mod tests {
    use super::*;

    /// `annotate` actions may not set what the controller keeps: the core's list names every one.
    #[test]
    fn the_core_refuses_every_annotation_the_controller_keeps() {
        for key in [
            EXEMPT_ANNOTATION,
            LAST_ACTION_ANNOTATION,
            INTENTS_ANNOTATION,
            SCALE_PENDING_ANNOTATION,
            HISTORY_ANNOTATION,
            SUSPENDED_BY_ANNOTATION,
            crate::VERDICT_ANNOTATION,
            trainwarden_core::SNOOZE_ANNOTATION,
        ] {
            assert!(
                trainwarden_core::RESERVED_ANNOTATIONS.contains(&key),
                "{key} is not reserved in the core"
            );
        }
    }
}
