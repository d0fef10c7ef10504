//! The `event` action: a Kubernetes Event on the TrainJob, in Audit mode too (it changes nothing).

use trainwarden_core::EventAction;
use trainwarden_core::describe::Reason;

use super::super::events::EventText;
use super::super::{ActionError, Ended, Executor, Record, Target};
use crate::messages::ActionResult;

impl Executor {
    /// Records the Event, then the intent (Enforce): a repeat after that finds it performed. A replica lost
    /// between the two records the Event again (at-least-once).
    pub(in crate::executor) async fn event_action(
        &self,
        target: &Target<'_>,
        e: &EventAction,
        record: &Record,
    ) -> Result<Ended, ActionError> {
        let ended = self.event_action_unrecorded(target, e).await;
        self.apply_to_job(target.api, target.job, &record.annotations(), None).await?;
        Ok(ended)
    }

    /// Records the Event only (Audit mode writes nothing to the TrainJob).
    pub(in crate::executor) async fn event_action_unrecorded(
        &self,
        target: &Target<'_>,
        e: &EventAction,
    ) -> Ended {
        // The policy's own reason and type; the default reason is trainwarden's.
        let warning = !matches!(e.type_, Some(trainwarden_core::EventType::Normal));
        let reason = e.reason.as_deref().unwrap_or(Reason::ProgressRuleFiring.as_str());
        let note = format!("{}: {}", target.by, target.summary);
        let text = EventText { warning, reason, action: Reason::ProgressRuleFiring.action(), note: &note };
        self.publish_text(&target.reference, &text).await;
        Ended::new(ActionResult::Done, String::new())
    }
}
