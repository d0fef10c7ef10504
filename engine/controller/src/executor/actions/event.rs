//! The `event` action: a Kubernetes Event on the TrainJob, in Audit mode too (it changes nothing).

use trainwarden_core::EventAction;

use super::super::{Ended, Executor, Target};
use crate::messages::ActionResult;

impl Executor {
    pub(in crate::executor) async fn event_action(&self, target: &Target<'_>, e: &EventAction) -> Ended {
        let warning = !matches!(e.type_, Some(trainwarden_core::EventType::Normal));
        let reason = e.reason.clone().unwrap_or_else(|| "ProgressRuleFiring".into());
        let note = format!("{}: {}", target.by, target.summary);
        self.publish(&target.reference, warning, &reason, "Evaluate", &note).await;
        Ended::new(ActionResult::Done, String::new())
    }
}
