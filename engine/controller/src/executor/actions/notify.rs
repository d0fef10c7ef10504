//! The `notify` action. Delivery is the notifier's (it got this intent as `Work::Notify`, grouped with the
//! firing's other intents); its counters are in /metrics and the policy status. Without a notifier the
//! intent is recorded (status, Event, metrics).

use trainwarden_core::NotifyAction;
use trainwarden_core::describe::Notice;

use super::super::{Ended, Executor, Target};
use crate::messages::ActionResult;

impl Executor {
    pub(in crate::executor) async fn notify_action(&self, target: &Target<'_>, n: &NotifyAction) -> Ended {
        if self.notifier.is_some() {
            return Ended::new(ActionResult::Done, format!("queued for receiver {:?}", n.to));
        }
        let notice = Notice::notification_recorded(&target.by, &n.to, target.summary);
        self.publish(&target.reference, &notice).await;
        Ended::new(ActionResult::Reported, format!("receiver {:?}: notifications are off", n.to))
    }
}
