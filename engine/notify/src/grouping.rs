//! Grouping and noise control, Alertmanager's semantics, as a sans-IO state machine: time is an argument
//! and the output is a list of [`Notification`]s to deliver. No runtime, no clock, no I/O: the notifier's
//! tokio driver, `trainwarden replay` (on the stream's clock) and the plain `#[test]`s below run this same code.
//!
//! Per receiver, alerts are grouped by the receiver's `groupBy` labels (default policy + job):
//!
//! * a new group waits `groupWait` for more alerts before its first notification (two rules firing on one
//!   job within it become one message);
//! * a group that was notified waits at least `groupInterval` before notifying about new alerts (or
//!   resolutions), and the message carries every alert of the group;
//! * while nothing changes, alerts still firing are re-notified every `repeatInterval`;
//! * a resolved alert is announced once if the receiver has `sendResolved` (and it had been announced as
//!   firing), then leaves the group; a group without alerts is dropped.
//!
//! An alert stays firing until [`Grouper::resolved`] (the evaluator's `Resolved` transition) or its policy
//! is removed, because the evaluator issues a notify intent once per firing, not continuously.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use trainwarden_core::CompiledReceiver;
use trainwarden_core::PolicyDuration;
use trainwarden_core::{ActionIntent, Savings};
use trainwarden_core::{ActionSpec, GroupLabel, PolicyRef, Resolution};
use trainwarden_core::{JobKey, Timestamp};

use crate::alert::{ActionState, Alert, AlertAction, AlertKey, AlertStatus, JobProgress};
use trainwarden_core::PolicyId;

/// Bounds on what the grouper holds, so a flood of jobs cannot exhaust memory.
#[derive(Clone, Copy, Debug)]
pub struct GroupLimits {
    /// Most groups one receiver holds (default 10 000); an alert that would open another is refused.
    pub max_groups_per_receiver: usize,
    /// Most alerts one group holds (default 500); a further alert is refused.
    pub max_alerts_per_group: usize,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits { max_groups_per_receiver: 10_000, max_alerts_per_group: 500 }
    }
}

/// One message to deliver: a group's alerts at one moment.
#[derive(Clone, Debug)]
pub struct Notification {
    /// The policy whose receiver this is for.
    pub policy: PolicyRef,
    /// The receiver: channels, templates, grouping settings.
    pub receiver: Arc<CompiledReceiver>,
    /// `receiver{label="value",…}`, stable for the group's lifetime.
    pub group_key: String,
    /// The `groupBy` labels and their values for this group, e.g. `job=fraud/ft-llama`.
    pub group_labels: Vec<(GroupLabel, String)>,
    /// Firing if any alert is firing.
    pub status: AlertStatus,
    /// Firing alerts first, then resolved ones; each in (rule, job) order.
    pub alerts: Vec<Alert>,
    /// When the group was flushed into this message (the grouper's `now`).
    pub created_at: Timestamp,
    /// Nothing changed since the last message: a `repeatInterval` reminder.
    pub repeat: bool,
}

/// Why an alert was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The `notify` action names a receiver the policy does not declare.
    #[error("policy {policy} has no receiver named {receiver:?}")]
    UnknownReceiver {
        /// The policy, as printed (kind, namespace, name).
        policy: String,
        /// The receiver name the action gave.
        receiver: String,
    },
    /// The receiver is at a [`GroupLimits`] bound; the alert is dropped.
    #[error("receiver {receiver:?} of policy {policy} holds its maximum of {limit} {what}; alert dropped")]
    Full {
        /// The policy, as printed (kind, namespace, name).
        policy: String,
        /// The receiver's name.
        receiver: String,
        /// Which bound: `groups` or `alerts in one group`.
        what: &'static str,
        /// The bound's value.
        limit: usize,
    },
}

#[derive(Debug)]
struct Entry {
    alert: Alert,
    /// Its current status has been delivered (or handed to delivery).
    notified: bool,
}

#[derive(Debug)]
struct Group {
    labels: Vec<(GroupLabel, String)>,
    alerts: BTreeMap<AlertKey, Entry>,
    next_flush: Option<Timestamp>,
    last_flush: Option<Timestamp>,
    last_sent: Option<Timestamp>,
}

#[derive(Debug)]
struct ReceiverGroups {
    policy: PolicyRef,
    config: Arc<CompiledReceiver>,
    groups: BTreeMap<String, Group>,
}

/// What the other intents of one firing said: the actions taken and the GPU time at stake.
#[derive(Debug)]
struct FiringContext {
    fired_at: Timestamp,
    actions: Vec<AlertAction>,
    savings: Option<Savings>,
}

/// The grouping state of every receiver of every policy.
#[derive(Debug, Default)]
pub struct Grouper {
    receivers: BTreeMap<(PolicyId, String), ReceiverGroups>,
    context: HashMap<AlertKey, FiringContext>,
    limits: GroupLimits,
}

fn after(t: Timestamp, d: PolicyDuration) -> Timestamp {
    t.checked_add(d.to_signed_duration()).unwrap_or(Timestamp::MAX)
}

impl Grouper {
    /// An empty grouper that holds at most what `limits` allow.
    pub fn new(limits: GroupLimits) -> Self {
        Grouper { receivers: BTreeMap::new(), context: HashMap::new(), limits }
    }

    /// Sets a policy's receivers (on every policy upsert). Groups of receivers that still exist keep their
    /// alerts and schedule under the new settings; groups of receivers that are gone are dropped.
    pub fn configure(&mut self, policy: &PolicyRef, receivers: &[CompiledReceiver]) {
        let id = PolicyId::from(policy);
        self.receivers.retain(|(p, name), _| *p != id || receivers.iter().any(|r| &r.name == name));
        for r in receivers {
            let config = Arc::new(r.clone());
            self.receivers
                .entry((id.clone(), r.name.clone()))
                .and_modify(|g| {
                    g.policy = policy.clone();
                    g.config = config.clone();
                })
                .or_insert_with(|| ReceiverGroups {
                    policy: policy.clone(),
                    config,
                    groups: BTreeMap::new(),
                });
        }
    }

    /// Drops a policy's receivers and everything pending for them.
    pub fn remove_policy(&mut self, policy: &PolicyRef) {
        let id = PolicyId::from(policy);
        self.receivers.retain(|(p, _), _| *p != id);
        self.context.retain(|k, _| k.policy != id);
    }

    /// The receivers configured for a policy.
    pub fn receivers_of(&self, policy: &PolicyRef) -> Vec<Arc<CompiledReceiver>> {
        let id = PolicyId::from(policy);
        self.receivers.iter().filter(|((p, _), _)| *p == id).map(|(_, g)| g.config.clone()).collect()
    }

    /// Takes an intent. A `notify` intent raises an alert for its receiver (`Ok(true)`); any other intent
    /// records what the firing did, for the alerts of the same firing (`Ok(false)`).
    pub fn intent(
        &mut self,
        intent: &ActionIntent,
        progress: Option<JobProgress>,
        now: Timestamp,
    ) -> Result<bool, Refused> {
        let Some((mut alert, receiver)) = Alert::from_intent(intent, progress) else {
            self.record_context(intent);
            return Ok(false);
        };
        let key = alert.key();
        if let Some(ctx) = self.context.get(&key).filter(|c| c.fired_at == alert.fired_at) {
            alert.actions = ctx.actions.clone();
            if alert.savings.is_none() {
                alert.savings = ctx.savings.clone();
            }
        }
        let limits = self.limits;
        let id = key.policy.clone();
        let Some(rg) = self.receivers.get_mut(&(id, receiver.clone())) else {
            return Err(Refused::UnknownReceiver { policy: intent.policy.to_string(), receiver });
        };
        let labels = group_labels(&rg.config.group_by, &alert);
        let group_key = format!(
            "{}{{{}}}",
            rg.config.name,
            labels.iter().map(|(l, v)| format!("{}={v:?}", label_name(*l))).collect::<Vec<_>>().join(",")
        );
        let full = |what, limit| Refused::Full {
            policy: intent.policy.to_string(),
            receiver: rg.config.name.clone(),
            what,
            limit,
        };
        if !rg.groups.contains_key(&group_key) && rg.groups.len() >= limits.max_groups_per_receiver {
            return Err(full("groups", limits.max_groups_per_receiver));
        }
        let group_wait = rg.config.group_wait;
        let group_interval = rg.config.group_interval;
        let group = rg.groups.entry(group_key.clone()).or_insert_with(|| Group {
            labels,
            alerts: BTreeMap::new(),
            next_flush: Some(after(now, group_wait)),
            last_flush: None,
            last_sent: None,
        });
        if !group.alerts.contains_key(&key) && group.alerts.len() >= limits.max_alerts_per_group {
            return Err(full("alerts in one group", limits.max_alerts_per_group));
        }
        group.alerts.insert(key, Entry { alert, notified: false });
        schedule(group, now, group_interval);
        Ok(true)
    }

    /// Whether the alert raised by intent `intent_id` waits in a group, not yet handed to delivery.
    pub fn waiting(&self, intent_id: &str) -> bool {
        self.receivers
            .values()
            .flat_map(|rg| rg.groups.values())
            .any(|g| g.alerts.values().any(|e| !e.notified && e.alert.intent_id == intent_id))
    }

    fn record_context(&mut self, intent: &ActionIntent) {
        if matches!(intent.action, ActionSpec::Notify(_)) {
            return;
        }
        let key = AlertKey {
            policy: PolicyId::from(&intent.policy),
            rule: intent.rule.clone(),
            job: intent.job.clone(),
        };
        // Only policies that can notify need to remember what their firings did.
        if !self.receivers.keys().any(|(p, _)| *p == key.policy) {
            return;
        }
        let action = AlertAction::of(intent);
        let ctx = self.context.entry(key.clone()).or_insert_with(|| FiringContext {
            fired_at: intent.at,
            actions: Vec::new(),
            savings: None,
        });
        if ctx.fired_at != intent.at {
            *ctx = FiringContext { fired_at: intent.at, actions: Vec::new(), savings: None };
        }
        ctx.actions.push(action.clone());
        if ctx.savings.is_none() {
            ctx.savings = intent.savings.clone();
        }
        // Alerts of this firing already waiting in a group learn it too (the notify action came first).
        for rg in self.receivers.values_mut().filter(|rg| PolicyId::from(&rg.policy) == key.policy) {
            for group in rg.groups.values_mut() {
                if let Some(entry) = group.alerts.get_mut(&key)
                    && entry.alert.fired_at == intent.at
                    && entry.alert.status == AlertStatus::Firing
                {
                    entry.alert.actions.push(action.clone());
                    if entry.alert.savings.is_none() {
                        entry.alert.savings = intent.savings.clone();
                    }
                }
            }
        }
    }

    /// The executor reports what became of one of a firing's actions (the intent `intent_id` of `rule` on
    /// `job`): alerts of that firing that are still to be sent say so ("suspended the TrainJob", and how to
    /// resume it) instead of "suspending the TrainJob". Returns whether an alert learnt it.
    pub fn performed(
        &mut self,
        policy: &PolicyRef,
        rule: &str,
        job: &JobKey,
        intent_id: &str,
        state: ActionState,
    ) -> bool {
        let key = AlertKey { policy: PolicyId::from(policy), rule: rule.to_string(), job: job.clone() };
        let update = |actions: &mut Vec<AlertAction>| {
            let mut found = false;
            for a in actions.iter_mut().filter(|a| a.intent_id == intent_id) {
                a.state = state.clone();
                found = true;
            }
            found
        };
        let mut learnt = false;
        if let Some(ctx) = self.context.get_mut(&key) {
            update(&mut ctx.actions);
        }
        for rg in self.receivers.values_mut().filter(|rg| PolicyId::from(&rg.policy) == key.policy) {
            let repeat_interval = rg.config.repeat_interval;
            for group in rg.groups.values_mut() {
                let Some(entry) = group.alerts.get_mut(&key) else { continue };
                if !update(&mut entry.alert.actions) {
                    continue;
                }
                learnt = true;
                // A suspension that did not happen stopped nothing: the alert is worth reminders again.
                if group.next_flush.is_none()
                    && let Some(last) = group.last_sent
                    && group.alerts.values().any(|e| needs_reminder(&e.alert))
                {
                    group.next_flush = Some(after(last, repeat_interval));
                }
            }
        }
        learnt
    }

    /// A rule stopped firing on a job (the evaluator's `Resolved` transition).
    /// `why` is the evaluator's resolution, shown in the resolved message.
    pub fn resolved(
        &mut self,
        policy: &PolicyRef,
        rule: &str,
        job: &JobKey,
        why: Option<Resolution>,
        now: Timestamp,
    ) {
        let key = AlertKey { policy: PolicyId::from(policy), rule: rule.to_string(), job: job.clone() };
        self.context.remove(&key);
        for rg in self.receivers.values_mut().filter(|rg| PolicyId::from(&rg.policy) == key.policy) {
            let send_resolved = rg.config.send_resolved;
            let group_interval = rg.config.group_interval;
            rg.groups.retain(|_, group| {
                let Some(entry) = group.alerts.get_mut(&key) else { return true };
                if entry.alert.status == AlertStatus::Resolved {
                    return true;
                }
                if send_resolved && entry.notified {
                    entry.alert.status = AlertStatus::Resolved;
                    entry.alert.resolved_at = Some(now);
                    entry.alert.resolution = why;
                    entry.notified = false;
                    schedule(group, now, group_interval);
                } else {
                    // Never announced, or the receiver does not want resolutions: it just leaves.
                    group.alerts.remove(&key);
                }
                !group.alerts.is_empty()
            });
        }
    }

    /// When [`Grouper::poll`] next has something to do.
    pub fn next_due(&self) -> Option<Timestamp> {
        self.receivers.values().flat_map(|rg| rg.groups.values()).filter_map(|g| g.next_flush).min()
    }

    /// The notifications due at `now`.
    pub fn poll(&mut self, now: Timestamp) -> Vec<Notification> {
        self.flush(now, false)
    }

    /// Every notification with news, due or not (shutdown: deliver what is pending instead of waiting).
    pub fn flush_pending(&mut self, now: Timestamp) -> Vec<Notification> {
        self.flush(now, true)
    }

    fn flush(&mut self, now: Timestamp, pending_only: bool) -> Vec<Notification> {
        // (Reminders: see `needs_reminder`.)
        let mut out = Vec::new();
        for rg in self.receivers.values_mut() {
            let config = &rg.config;
            rg.groups.retain(|group_key, group| {
                let news = group.alerts.values().any(|e| !e.notified);
                let due = if pending_only { news } else { group.next_flush.is_some_and(|t| t <= now) };
                if !due {
                    return true;
                }
                let firing = group.alerts.values().any(|e| e.alert.status == AlertStatus::Firing);
                let reminder_wanted = group.alerts.values().any(|e| needs_reminder(&e.alert));
                let repeat_due = group.last_sent.is_none_or(|t| after(t, config.repeat_interval) <= now);
                if news || (reminder_wanted && repeat_due) {
                    let mut alerts: Vec<Alert> = group.alerts.values().map(|e| e.alert.clone()).collect();
                    alerts.sort_by_key(|a| a.status == AlertStatus::Resolved);
                    out.push(Notification {
                        policy: rg.policy.clone(),
                        receiver: config.clone(),
                        group_key: group_key.clone(),
                        group_labels: group.labels.clone(),
                        status: if firing { AlertStatus::Firing } else { AlertStatus::Resolved },
                        alerts,
                        created_at: now,
                        repeat: !news,
                    });
                    group.last_sent = Some(now);
                    group.alerts.retain(|_, e| e.alert.status == AlertStatus::Firing);
                    for e in group.alerts.values_mut() {
                        e.notified = true;
                    }
                }
                group.last_flush = Some(now);
                group.next_flush = group
                    .last_sent
                    .filter(|_| group.alerts.values().any(|e| needs_reminder(&e.alert)))
                    .map(|t| after(t, config.repeat_interval));
                !group.alerts.is_empty()
            });
        }
        out
    }

    /// Alerts currently held, for status and tests.
    pub fn alert_count(&self) -> usize {
        self.receivers.values().flat_map(|rg| rg.groups.values()).map(|g| g.alerts.len()).sum()
    }
}

/// A change in a group that was already flushed is announced `groupInterval` after that flush, at the
/// earliest; a group not yet flushed keeps its `groupWait` deadline.
fn schedule(group: &mut Group, now: Timestamp, group_interval: PolicyDuration) {
    if let Some(last) = group.last_flush {
        let candidate = after(last, group_interval).max(now);
        group.next_flush = Some(group.next_flush.map_or(candidate, |t| t.min(candidate)));
    }
}

fn label_name(label: GroupLabel) -> &'static str {
    match label {
        GroupLabel::Policy => "policy",
        GroupLabel::Job => "job",
        GroupLabel::Namespace => "namespace",
        GroupLabel::Rule => "rule",
    }
}

fn group_labels(by: &[GroupLabel], alert: &Alert) -> Vec<(GroupLabel, String)> {
    by.iter()
        .map(|l| {
            let v = match l {
                GroupLabel::Policy => alert.policy.to_string(),
                GroupLabel::Job => alert.job.to_string(),
                GroupLabel::Namespace => alert.job.namespace.clone(),
                GroupLabel::Rule => alert.rule.clone(),
            };
            (*l, v)
        })
        .collect()
}

/// The label's name in group keys and webhook payloads.
pub fn group_label_name(label: GroupLabel) -> &'static str {
    label_name(label)
}

/// Whether a firing alert is worth a `repeatInterval` reminder. Not when its firing suspended the job in
/// Enforce mode: the job is stopped and its rules are frozen until someone resumes it, so the alert stays
/// "firing" all weekend, and a reminder every few hours would only repeat the first message. It is still
/// kept, so its resolution is announced when the job resumes or is deleted. A suspension the executor reported
/// as not done stopped nothing: that alert is repeated.
fn needs_reminder(alert: &Alert) -> bool {
    alert.status == AlertStatus::Firing
        && !(alert.mode == trainwarden_core::Mode::Enforce
            && alert
                .actions
                .iter()
                .any(|a| a.kind == "suspend" && !matches!(a.state, ActionState::NotDone(_))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainwarden_core::Reason;
    use trainwarden_core::{Mode, NotifyAction, SuspendAction};
    use trainwarden_testkit::fixtures::at_sec;

    fn policy() -> PolicyRef {
        PolicyRef {
            kind: trainwarden_core::PolicyKind::Namespaced,
            namespace: Some("fraud".into()),
            name: "weekend-safe".into(),
            generation: 1,
        }
    }

    fn receiver(name: &str, wait: u64, interval: u64, repeat: u64, send_resolved: bool) -> CompiledReceiver {
        CompiledReceiver {
            name: name.into(),
            group_by: vec![GroupLabel::Policy, GroupLabel::Job],
            group_wait: PolicyDuration::from_secs(wait),
            group_interval: PolicyDuration::from_secs(interval),
            repeat_interval: PolicyDuration::from_secs(repeat),
            send_resolved,
            max_per_minute: 30,
            slack: None,
            email: None,
            webhook: None,
            time_zone: jiff::tz::TimeZone::UTC,
        }
    }

    fn intent(rule: &str, job: &str, at: i64, action: ActionSpec) -> ActionIntent {
        ActionIntent {
            id: format!("{rule}:{job}:{at}"),
            at: at_sec(at),
            job: JobKey::new("fraud", job),
            policy: policy(),
            rule: rule.into(),
            action,
            mode: Mode::Enforce,
            reason: Reason { summary: format!("{rule} fired"), ..Reason::default() },
            savings: None,
            snoozed_until: None,
        }
    }

    fn notify(to: &str) -> ActionSpec {
        ActionSpec::Notify(NotifyAction { to: to.into(), message: None })
    }

    fn rules(n: &Notification) -> Vec<(String, AlertStatus)> {
        n.alerts.iter().map(|a| (format!("{}@{}", a.rule, a.job.name), a.status)).collect()
    }

    fn grouper(r: CompiledReceiver) -> Grouper {
        let mut g = Grouper::new(GroupLimits::default());
        g.configure(&policy(), &[r]);
        g
    }

    #[test]
    fn two_rules_on_one_job_within_group_wait_make_one_message() {
        let mut g = grouper(receiver("team", 30, 300, 3600, false));
        assert_eq!(g.intent(&intent("plateau", "a", 0, notify("team")), None, at_sec(0)), Ok(true));
        assert_eq!(g.intent(&intent("late", "a", 10, notify("team")), None, at_sec(10)), Ok(true));
        assert_eq!(g.intent(&intent("late", "b", 10, notify("team")), None, at_sec(10)), Ok(true));
        assert_eq!(g.next_due(), Some(at_sec(30)));
        assert!(g.poll(at_sec(29)).is_empty());
        let sent = g.poll(at_sec(30));
        assert_eq!(sent.len(), 1, "one message for job a");
        assert_eq!(
            rules(&sent[0]),
            vec![("late@a".into(), AlertStatus::Firing), ("plateau@a".into(), AlertStatus::Firing)]
        );
        assert_eq!(sent[0].group_key, "team{policy=\"fraud/weekend-safe\",job=\"fraud/a\"}");
        assert!(!sent[0].repeat);
        // Job b's group started at 10s: its own groupWait.
        assert_eq!(g.next_due(), Some(at_sec(40)));
        let sent = g.poll(at_sec(40));
        assert_eq!(rules(&sent[0]), vec![("late@b".into(), AlertStatus::Firing)]);
    }

    #[test]
    fn repeat_interval_reminds_and_group_interval_batches_news() {
        let mut g = grouper(receiver("team", 30, 300, 3600, false));
        g.intent(&intent("plateau", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        assert_eq!(g.poll(at_sec(30)).len(), 1);
        assert_eq!(g.next_due(), Some(at_sec(3630)));
        // A new alert 60s after the first message waits for groupInterval (300s after that flush).
        g.intent(&intent("late", "a", 90, notify("team")), None, at_sec(90)).unwrap();
        assert_eq!(g.next_due(), Some(at_sec(330)));
        assert!(g.poll(at_sec(329)).is_empty());
        let sent = g.poll(at_sec(330));
        assert_eq!(rules(&sent[0]).len(), 2, "the message carries every alert of the group");
        // Nothing new: silence until repeatInterval after the last message, then a reminder.
        assert!(g.poll(at_sec(3929)).is_empty());
        let sent = g.poll(at_sec(3930));
        assert_eq!(sent.len(), 1);
        assert!(sent[0].repeat);
        assert_eq!(g.next_due(), Some(at_sec(7530)));
    }

    #[test]
    fn a_firing_that_suspended_the_job_is_not_repeated() {
        let mut g = grouper(receiver("team", 30, 300, 3600, true));
        g.intent(&intent("plateau", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        g.intent(&intent("plateau", "a", 0, ActionSpec::Suspend(Default::default())), None, at_sec(0))
            .unwrap();
        let sent = g.poll(at_sec(30));
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].alerts[0].actions.len(), 1, "{:?}", sent[0].alerts[0].actions);
        // No reminders while the job stays suspended...
        assert_eq!(g.next_due(), None);
        assert!(g.poll(at_sec(3 * 86_400)).is_empty());
        // ...but its resolution (the job resumed or was deleted) is still announced.
        g.resolved(&policy(), "plateau", &JobKey::new("fraud", "a"), None, at_sec(3 * 86_400));
        let sent = g.poll(at_sec(3 * 86_400 + 30));
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].status, AlertStatus::Resolved);
    }

    #[test]
    fn resolved_messages_are_opt_in_and_only_for_announced_alerts() {
        let mut g = grouper(receiver("team", 30, 300, 3600, true));
        g.intent(&intent("plateau", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        g.poll(at_sec(30));
        g.resolved(&policy(), "plateau", &JobKey::new("fraud", "a"), None, at_sec(100));
        assert_eq!(g.next_due(), Some(at_sec(330)));
        let sent = g.poll(at_sec(330));
        assert_eq!(sent[0].status, AlertStatus::Resolved);
        assert_eq!(rules(&sent[0]), vec![("plateau@a".into(), AlertStatus::Resolved)]);
        assert_eq!(sent[0].alerts[0].resolved_at, Some(at_sec(100)));
        assert_eq!(g.alert_count(), 0);
        assert_eq!(g.next_due(), None);
        // Resolved before it was ever announced: nothing to say.
        g.intent(&intent("plateau", "b", 400, notify("team")), None, at_sec(400)).unwrap();
        g.resolved(&policy(), "plateau", &JobKey::new("fraud", "b"), None, at_sec(410));
        assert_eq!(g.alert_count(), 0);
        assert!(g.poll(at_sec(1000)).is_empty());

        let mut quiet = grouper(receiver("team", 30, 300, 3600, false));
        quiet.intent(&intent("plateau", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        quiet.poll(at_sec(30));
        quiet.resolved(&policy(), "plateau", &JobKey::new("fraud", "a"), None, at_sec(100));
        assert_eq!(quiet.alert_count(), 0);
        assert!(quiet.poll(at_sec(10_000)).is_empty(), "no resolved message, no reminder");
    }

    #[test]
    fn sibling_intents_say_what_the_firing_did() {
        let mut g = grouper(receiver("team", 30, 300, 3600, false));
        g.intent(&intent("plateau", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        let mut suspend = intent("plateau", "a", 0, ActionSpec::Suspend(SuspendAction::default()));
        suspend.savings = Some(Savings {
            until: at_sec(3600),
            basis: trainwarden_core::SavingsBasis::EstimatedEnd,
            gpus: 8.0,
            gpu_hours: 8.0,
            dollars: Some(55.0),
        });
        assert_eq!(g.intent(&suspend, None, at_sec(0)), Ok(false));
        // Context recorded before the notify intent arrives works too (actions in the other order).
        g.intent(&intent("stalled", "a", 5, ActionSpec::Suspend(SuspendAction::default())), None, at_sec(5))
            .unwrap();
        g.intent(&intent("stalled", "a", 5, notify("team")), None, at_sec(5)).unwrap();
        let sent = g.poll(at_sec(30));
        let plateau = sent[0].alerts.iter().find(|a| a.rule == "plateau").unwrap();
        assert_eq!(plateau.actions_text(), "suspending the TrainJob", "no result yet: under way");
        assert_eq!(plateau.savings.as_ref().unwrap().gpu_hours, 8.0);
        let stalled = sent[0].alerts.iter().find(|a| a.rule == "stalled").unwrap();
        assert_eq!(stalled.actions_text(), "suspending the TrainJob");
    }

    #[test]
    fn the_executors_result_turns_under_way_into_done() {
        let mut g = grouper(receiver("team", 30, 300, 3600, false));
        let suspend = intent("plateau", "a", 0, ActionSpec::Suspend(SuspendAction::default()));
        g.intent(&intent("plateau", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        g.intent(&suspend, None, at_sec(0)).unwrap();
        let done = ActionState::Done {
            what: "suspended the TrainJob".into(),
            undo: Some("To resume it: …".into()),
        };
        assert!(g.performed(&policy(), "plateau", &JobKey::new("fraud", "a"), &suspend.id, done));
        let failed = ActionState::NotDone("could not annotate".into());
        assert!(!g.performed(&policy(), "plateau", &JobKey::new("fraud", "a"), "another-intent", failed));
        let sent = g.poll(at_sec(30));
        assert_eq!(sent[0].alerts[0].actions_text(), "suspended the TrainJob");
        assert_eq!(sent[0].alerts[0].undo().as_deref(), Some("To resume it: …"));
        assert_eq!(
            sent[0].alerts[0].details(),
            "suspended the TrainJob\nTo resume it: …",
            "details carry the way back"
        );
    }

    #[test]
    fn a_suspension_that_failed_is_repeated() {
        let mut g = grouper(receiver("team", 30, 300, 3600, false));
        let suspend = intent("plateau", "a", 0, ActionSpec::Suspend(SuspendAction::default()));
        g.intent(&intent("plateau", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        g.intent(&suspend, None, at_sec(0)).unwrap();
        assert_eq!(g.poll(at_sec(30)).len(), 1);
        assert_eq!(g.next_due(), None, "a suspended job is not repeated");
        let failed = ActionState::NotDone("could not suspend the TrainJob (forbidden)".into());
        g.performed(&policy(), "plateau", &JobKey::new("fraud", "a"), &suspend.id, failed);
        assert_eq!(g.next_due(), Some(at_sec(3630)));
        let sent = g.poll(at_sec(3630));
        assert!(sent[0].repeat);
        assert_eq!(sent[0].alerts[0].actions_text(), "could not suspend the TrainJob (forbidden)");
    }

    #[test]
    fn unknown_receivers_limits_and_reconfiguration() {
        let mut g = Grouper::new(GroupLimits { max_groups_per_receiver: 1, max_alerts_per_group: 1 });
        g.configure(&policy(), &[receiver("team", 30, 300, 3600, false)]);
        let e = g.intent(&intent("r", "a", 0, notify("oncall")), None, at_sec(0)).unwrap_err();
        assert_eq!(e.to_string(), "policy fraud/weekend-safe has no receiver named \"oncall\"");
        g.intent(&intent("r", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        assert!(matches!(
            g.intent(&intent("s", "a", 0, notify("team")), None, at_sec(0)),
            Err(Refused::Full { .. })
        ));
        assert!(matches!(
            g.intent(&intent("r", "b", 0, notify("team")), None, at_sec(0)),
            Err(Refused::Full { .. })
        ));
        // Re-applying the policy keeps pending alerts; removing the receiver drops them.
        g.configure(&PolicyRef { generation: 2, ..policy() }, &[receiver("team", 60, 300, 3600, false)]);
        assert_eq!(g.alert_count(), 1);
        g.configure(&policy(), &[receiver("other", 60, 300, 3600, false)]);
        assert_eq!(g.alert_count(), 0);
        g.remove_policy(&policy());
        assert!(g.receivers_of(&policy()).is_empty());
    }

    #[test]
    fn flush_pending_delivers_news_without_waiting() {
        let mut g = grouper(receiver("team", 30, 300, 3600, false));
        g.intent(&intent("r", "a", 0, notify("team")), None, at_sec(0)).unwrap();
        assert_eq!(g.flush_pending(at_sec(1)).len(), 1);
        assert!(g.flush_pending(at_sec(2)).is_empty(), "reminders are not news");
    }
}
