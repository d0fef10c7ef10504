//! The `notify` action. With notifications on, the intent's outcome is its message's delivery: the
//! notifier groups it (it got the intent as `Work::Notify` too, with the firing's other intents) and the
//! outcome comes when the message's last receiver channel ended — `done` once delivered, `refused` when the
//! receiver refused it for good, and, when the message was not sent because this replica stopped, "not
//! leader": the intent stays owed and the next leader sends it (same intent id in the message). Until then
//! the firing is persisted as due, as for any action under way. Without a notifier the intent is recorded
//! (status, Event, metrics).

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use trainwarden_core::describe::Notice;
use trainwarden_core::{ActionIntent, ActionSpec, NotifyAction};
use trainwarden_notify::{Delivery, SubmitError};

use super::super::{Ended, Executor, Target};
use crate::messages::{ActionResult, Input, Outcome};
use crate::metrics::{ActionLabel, ModeLabel};

impl Executor {
    pub(in crate::executor) async fn notify_action(&self, target: &Target<'_>, n: &NotifyAction) -> Ended {
        if self.notifier.is_some() {
            // Reached only when leadership changed between `await_delivery` and here.
            return Ended::new(ActionResult::NotLeader, format!("receiver {:?}: not sent here", n.to));
        }
        let notice = Notice::notification_recorded(&target.by, &n.to, target.summary);
        self.publish(&target.reference, &notice).await;
        Ended::new(ActionResult::Reported, format!("receiver {:?}: notifications are off", n.to))
    }

    /// Takes a `notify` intent when this replica may act and delivers notifications: the outcome is sent to
    /// `feedback` once the message ended. `false`: not such an intent (act on it as on any other).
    pub(in crate::executor) fn await_delivery(
        &self,
        intent: &ActionIntent,
        feedback: &mpsc::Sender<Input>,
    ) -> bool {
        let (ActionSpec::Notify(n), Some(notifier)) = (&intent.action, &self.notifier) else { return false };
        if !self.leader.may_act() {
            return false;
        }
        let answer = notifier.delivery(intent, None);
        let (metrics, leader, feedback) = (self.metrics.clone(), self.leader.clone(), feedback.clone());
        let (intent, to, awaiting) = (intent.clone(), n.to.clone(), self.awaiting_delivery.clone());
        awaiting.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let left_over = |why: &str| {
                if leader.may_act() {
                    // Still leading and not stopping (a full queue): tried again after the backoff.
                    (ActionResult::Failed, format!("receiver {to:?}: {why}"))
                } else {
                    (ActionResult::NotLeader, format!("receiver {to:?}: {why}; owed to the next leader"))
                }
            };
            let (result, message) = match answer {
                Ok(delivery) => match delivery.await {
                    Ok(Delivery::Delivered) => (ActionResult::Done, format!("delivered to receiver {to:?}")),
                    Ok(Delivery::Failed(e)) => (ActionResult::Refused, format!("receiver {to:?}: {e}")),
                    Ok(Delivery::Undelivered(why)) => left_over(&why),
                    Err(_) => left_over("the notifier is gone"),
                },
                Err(SubmitError::ShutDown) => left_over("the notifier is stopping"),
                Err(e @ SubmitError::QueueFull { .. }) => left_over(&e.to_string()),
                Err(e @ SubmitError::Refused(_)) => (ActionResult::Refused, e.to_string()),
            };
            let outcome = Outcome::of(&intent, result, message);
            metrics.action(ActionLabel::Executed(outcome.action), ModeLabel(Some(intent.mode)), result);
            match result {
                ActionResult::Done => {
                    tracing::info!(job = %intent.job, rule = %intent.rule, action = "notify", result = result.as_str(), message = %outcome.message, "action");
                }
                _ => {
                    tracing::warn!(job = %intent.job, rule = %intent.rule, action = "notify", result = result.as_str(), message = %outcome.message, "notification not delivered");
                }
            }
            let _ = feedback.send(Input::Outcome(Box::new(outcome))).await;
            awaiting.fetch_sub(1, Ordering::SeqCst);
        });
        true
    }
}
