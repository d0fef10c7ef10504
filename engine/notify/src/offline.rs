//! Notifications on a recorded stream's clock, for `trainwarden replay`: the evaluator's events go through
//! the same [`Grouper`] the controller uses, with the stream's time instead of the wall clock, so the
//! output shows the messages exactly as they would have been grouped, repeated and resolved. Optionally
//! they are then sent for real ([`send_all`]): channels concurrently, each at its receiver's rate limit, with
//! retries up to a deadline.
//!
//! The grouping is pure; only [`send_all`] does I/O.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::watch;
use trainwarden_core::CompiledPolicy;
use trainwarden_core::CompiledReceiver;
use trainwarden_core::Template;
use trainwarden_core::Timestamp;
use trainwarden_core::{Event, TransitionKind};

use crate::alert::{ActionState, JobProgress, resume_hint};
use crate::delivery::{Counters, Queued, RateLimit, RetryPolicy, deliver};
use crate::grouping::{GroupLimits, Grouper, Notification};
use crate::render::{self, Rendered};
use crate::send::{ChannelKind, SendError, Sender};
use trainwarden_core::describe::words;
use trainwarden_core::{ActionSpec, Mode, PolicyId};

/// The grouper driven by a replay.
pub struct OfflineNotifications {
    grouper: Grouper,
    receivers: usize,
    /// Every notification, in the order (and at the time) it would have been sent.
    pub notifications: Vec<Notification>,
    /// Intents that had nowhere to go (unknown receiver, full group), with when.
    pub refused: Vec<(Timestamp, String)>,
}

fn event_time(event: &Event) -> Timestamp {
    event.at()
}

impl OfflineNotifications {
    /// A grouper configured with every receiver of `policies` (default limits), holding no notifications yet.
    pub fn new(policies: &[CompiledPolicy]) -> Self {
        let mut grouper = Grouper::new(GroupLimits::default());
        for p in policies {
            grouper.configure(&p.reference, &p.receivers);
        }
        OfflineNotifications {
            grouper,
            receivers: policies.iter().map(|p| p.receivers.len()).sum(),
            notifications: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// Whether any policy declares receivers (without, there is nothing to show).
    pub fn has_receivers(&self) -> bool {
        self.receivers > 0
    }

    /// Flushes every group that falls due up to and including `now`, each at its own due time.
    pub fn advance_to(&mut self, now: Timestamp) {
        while let Some(due) = self.grouper.next_due().filter(|t| *t <= now) {
            let sent = self.grouper.poll(due);
            self.notifications.extend(sent);
        }
    }

    /// One event of the replay, in order; `progress` is the job's progress at that moment.
    pub fn observe(&mut self, event: &Event, progress: Option<JobProgress>) {
        let at = event_time(event);
        self.advance_to(at);
        match event {
            Event::Intent(intent) => {
                if let Err(e) = self.grouper.intent(intent, progress, at) {
                    self.refused.push((at, e.to_string()));
                }
                // A replay simulates Enforce suspensions as done (the job's later records are ignored), so
                // its messages say what the controller's would once the suspension succeeded.
                if intent.mode == Mode::Enforce && matches!(intent.action, ActionSpec::Suspend(_)) {
                    let state = ActionState::Done {
                        what: words::past(&words::action(&intent.action)),
                        undo: Some(resume_hint(&intent.job, None)),
                    };
                    self.grouper.performed(&intent.policy, &intent.rule, &intent.job, &intent.id, state);
                }
            }
            Event::Transition { kind: TransitionKind::Resolved, policy, rule, job, reason, .. } => {
                self.grouper.resolved(policy, rule, job, reason.resolution, at);
            }
            _ => {}
        }
    }

    /// The stream ended at `end`: what is due by then goes at its time, news still waiting in a group goes at
    /// `end` (a replay has no later moment to show it at).
    pub fn finish(&mut self, end: Timestamp) {
        self.advance_to(end);
        let pending = self.grouper.flush_pending(end);
        self.notifications.extend(pending);
    }
}

/// The channels a receiver has.
pub fn channel_kinds(r: &CompiledReceiver) -> Vec<ChannelKind> {
    let mut kinds = Vec::new();
    if r.slack.is_some() {
        kinds.push(ChannelKind::Slack);
    }
    if r.email.is_some() {
        kinds.push(ChannelKind::Email);
    }
    if r.webhook.is_some() {
        kinds.push(ChannelKind::Webhook);
    }
    kinds
}

/// The templates shown in the timeline: the first channel's.
fn templates(r: &CompiledReceiver) -> Option<(&Template, &Template)> {
    if let Some(s) = &r.slack {
        return Some((&s.title, &s.text));
    }
    if let Some(e) = &r.email {
        return Some((&e.subject, &e.text));
    }
    r.webhook.as_ref().map(|w| (&w.title, &w.text))
}

/// The `Notifications` section of replay's text output.
pub fn render_text(offline: &OfflineNotifications, tz: &jiff::tz::TimeZone) -> String {
    let mut out = format!(
        "\nNotifications ({}, grouped as they would be sent)\n",
        trainwarden_core::plural(offline.notifications.len() as u64, "message", "messages")
    );
    for n in &offline.notifications {
        let Some((title, text)) = templates(&n.receiver) else { continue };
        let r = Rendered::new(n, title, text);
        let channels: Vec<&str> = channel_kinds(&n.receiver).into_iter().map(ChannelKind::as_str).collect();
        out += &format!(
            "{}  → {} of {} [{}]{}  {}\n",
            n.created_at.to_zoned(tz.clone()).strftime("%a %Y-%m-%d %H:%M:%S %:z"),
            n.receiver.name,
            n.policy,
            channels.join(", "),
            if n.repeat { " (reminder)" } else { "" },
            r.title
        );
        for t in &r.alert_texts {
            for line in t.lines() {
                out += &format!("      {line}\n");
            }
        }
    }
    for (at, why) in &offline.refused {
        out += &format!("{}  ✗ {why}\n", at.to_zoned(tz.clone()).strftime("%a %Y-%m-%d %H:%M:%S %:z"));
    }
    out
}

/// One line of replay's JSON output per notification: `{"notification": <the webhook document>}`.
pub fn notification_json(n: &Notification) -> Value {
    // A receiver always has a channel (validation); an empty template keeps this total anyway.
    let empty = Template::empty();
    let (title, text) = templates(&n.receiver).unwrap_or((&empty, &empty));
    let r = Rendered::new(n, title, text);
    let mut doc = render::webhook_payload(n, &r);
    doc["channels"] = json!(channel_kinds(&n.receiver).iter().map(|c| c.as_str()).collect::<Vec<_>>());
    json!({ "notification": doc })
}

/// The outcome of sending one notification on one channel.
pub struct SendOutcome {
    /// Position of the notification in the slice given to [`send_all`].
    pub index: usize,
    /// Its receiver's name.
    pub receiver: String,
    /// The channel it was sent on.
    pub channel: ChannelKind,
    /// `Ok` once delivered, or the last attempt's error.
    pub result: Result<(), SendError>,
}

/// One channel's messages, in order, with their positions in the slice given to [`send_all`].
type Stream = Vec<(usize, Arc<Notification>)>;

/// Sends every notification on every channel of its receiver, with retries. Channels are delivered
/// concurrently; one channel's messages go in order and respect its receiver's `maxPerMinute`. Retries stop
/// at `wait` after the start (a message still failing then is reported as given up), so this returns within
/// about `wait` plus one attempt's timeout, plus what the rate limits impose on first attempts. Outcomes are
/// in (notification, channel) order.
pub async fn send_all(
    notifications: &[Notification],
    sender: &Sender,
    retry: &RetryPolicy,
    wait: std::time::Duration,
) -> Vec<SendOutcome> {
    let start = std::time::Instant::now();
    let (deadline_tx, deadline) = watch::channel(Some(start + wait));
    // One stream per (policy, receiver, channel), as the controller's workers.
    let mut streams: BTreeMap<(PolicyId, String, ChannelKind), Stream> = BTreeMap::new();
    for (index, n) in notifications.iter().enumerate() {
        let n = Arc::new(n.clone());
        for channel in channel_kinds(&n.receiver) {
            let key = (PolicyId::from(&n.policy), n.receiver.name.clone(), channel);
            streams.entry(key).or_default().push((index, n.clone()));
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for ((_, receiver, channel), items) in streams {
        let (sender, retry, deadline) = (sender.clone(), retry.clone(), deadline.clone());
        tasks.spawn(async move {
            let mut rate = RateLimit::new(std::time::Instant::now());
            let counters = Counters::default();
            let mut outcomes = Vec::new();
            for (index, n) in items {
                let pause = rate.take(n.receiver.max_per_minute, std::time::Instant::now());
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                let queued = Queued { notification: n, queued_at: std::time::Instant::now() };
                let result = deliver(&sender, channel, &queued, &retry, &counters, &deadline).await;
                outcomes.push(SendOutcome { index, receiver: receiver.clone(), channel, result });
            }
            outcomes
        });
    }
    let mut outcomes = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(mut o) => outcomes.append(&mut o),
            Err(e) => tracing::error!(error = %e, "a notification channel's delivery task failed"),
        }
    }
    drop(deadline_tx);
    outcomes.sort_by_key(|o| (o.index, o.channel));
    outcomes
}
