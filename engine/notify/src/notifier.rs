//! The [`Notifier`]: the handle the controller's executor holds. It owns the [`Grouper`] (on the wall clock),
//! a router task that flushes groups when due, and one delivery worker per receiver channel.
//!
//! Every method except [`Notifier::shutdown`] is synchronous and returns at once: a short lock on the grouping
//! state, never a network wait, so notifications can never slow down evaluation. Must be created inside a
//! tokio runtime (it spawns its tasks there).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration as StdDuration, Instant};

use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use trainwarden_core::CompiledPolicy;
use trainwarden_core::CompiledReceiver;
use trainwarden_core::{ActionIntent, Event, Resolution, TransitionKind};
use trainwarden_core::{JobKey, Timestamp};
use trainwarden_core::{PolicyKind, PolicyRef};

use crate::alert::{ActionState, JobProgress};
use crate::delivery::{Counters, Queued, RetryPolicy, run_worker};
use crate::grouping::{GroupLimits, Grouper, Notification, Refused};
use crate::secret::SecretResolver;
use crate::send::{ChannelKind, SendConfig, Sender};
use crate::tracking::{ChannelEnd, Delivery, Tracking};
use trainwarden_core::PolicyId;

/// Everything configurable about delivery.
#[derive(Clone, Debug)]
pub struct NotifierConfig {
    /// Messages per receiver channel waiting for delivery; more are dropped (and counted).
    pub queue_capacity: usize,
    /// Retries and backoff of each channel's worker.
    pub retry: RetryPolicy,
    /// Bounds on the groups and alerts the grouper holds.
    pub limits: GroupLimits,
    /// Per-attempt settings: timeout, extra CA roots.
    pub send: SendConfig,
}

impl Default for NotifierConfig {
    fn default() -> Self {
        NotifierConfig {
            queue_capacity: 256,
            retry: RetryPolicy::default(),
            limits: GroupLimits::default(),
            send: SendConfig::default(),
        }
    }
}

/// Why [`Notifier::submit`] did not take an intent. Every case is also counted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The grouper refused the alert: an unknown receiver, or one at its limits.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// A channel of the receiver has no room in its queue (see [`NotifierConfig::queue_capacity`]).
    #[error("the queue of receiver {receiver:?} ({channel}) of policy {policy} is full; alert dropped")]
    QueueFull {
        /// The policy, as printed (kind, namespace, name).
        policy: String,
        /// The receiver's name.
        receiver: String,
        /// The full channel: `slack`, `email` or `webhook`.
        channel: &'static str,
    },
    /// [`Notifier::shutdown`] has been called; nothing more is taken.
    #[error("the notifier is shut down")]
    ShutDown,
}

/// Counters of one receiver channel, for /metrics and the policy status.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelStats {
    /// Kind of the policy that declares the receiver.
    pub policy_kind: PolicyKind,
    /// Namespace of that policy; `None` for a ClusterProgressPolicy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_namespace: Option<String>,
    /// Name of that policy.
    pub policy_name: String,
    /// The receiver's name in the policy.
    pub receiver: String,
    /// Slack, email or webhook.
    pub channel: ChannelKind,
    /// Messages delivered, since start.
    pub sent: u64,
    /// Messages given up (permanent failure, or still failing after the retry limit), since start.
    pub failed: u64,
    /// Failed attempts that were retried, since start (one message may count several times).
    pub retried: u64,
    /// Messages never attempted (queue full, shutdown), since start.
    pub dropped: u64,
    /// Messages waiting in the queue or being delivered, now.
    pub queued: u64,
    /// The last delivery error (secret-free), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// What shutdown left undelivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Workers still busy at the deadline (their remaining messages are counted as dropped).
    pub unfinished_workers: usize,
    /// Messages those workers still held, now counted as dropped.
    pub dropped: u64,
    /// Tracked `notify` intents ([`Notifier::delivery`]) whose message was not sent: they are answered
    /// [`Delivery::Undelivered`], so the controller leaves them owed to the next leader.
    pub undelivered_intents: usize,
}

type WorkerKey = (PolicyId, String, ChannelKind);

struct Worker {
    queue: mpsc::Sender<Queued>,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl Worker {
    fn stats(key: &WorkerKey, c: &Counters) -> ChannelStats {
        let (policy, receiver, channel) = key;
        ChannelStats {
            policy_kind: policy.kind,
            policy_namespace: policy.namespace.clone(),
            policy_name: policy.name.clone(),
            receiver: receiver.clone(),
            channel: *channel,
            sent: c.sent.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            retried: c.retried.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            queued: c.queued.load(Ordering::Relaxed),
            last_error: c.last_error(),
        }
    }
}

struct State {
    grouper: Grouper,
    workers: BTreeMap<WorkerKey, Worker>,
    /// Workers of removed receivers, still draining their queues.
    retired: Vec<(Arc<Counters>, JoinHandle<()>)>,
    /// Counters of the workers that were running at shutdown, so the final figures stay readable.
    final_counters: BTreeMap<WorkerKey, Arc<Counters>>,
    shut_down: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Shared with the router apart from `Shared`, so the router holds no strong reference while asleep.
    wake: Arc<Notify>,
    sender: Sender,
    config: NotifierConfig,
    deadline: watch::Sender<Option<Instant>>,
    /// Intents refused for an unknown receiver or a full group (no receiver channel to count them on).
    refused: AtomicU64,
    router: Mutex<Option<JoinHandle<()>>>,
    /// Where the router and the workers run (configure may be called from outside the runtime).
    runtime: tokio::runtime::Handle,
    /// Whether the message carrying each `notify` intent was delivered.
    tracking: Arc<Tracking>,
}

/// A cheap-to-clone handle on the notification machinery.
#[derive(Clone)]
pub struct Notifier {
    shared: Arc<Shared>,
}

fn channels(r: &CompiledReceiver) -> impl Iterator<Item = ChannelKind> {
    [
        r.slack.as_ref().map(|_| ChannelKind::Slack),
        r.email.as_ref().map(|_| ChannelKind::Email),
        r.webhook.as_ref().map(|_| ChannelKind::Webhook),
    ]
    .into_iter()
    .flatten()
}

impl Notifier {
    /// Starts the router task; delivery workers start as policies are configured. Needs a tokio runtime.
    pub fn new(secrets: Arc<dyn SecretResolver>, config: NotifierConfig) -> Result<Notifier, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "the notifier needs a tokio runtime (create it inside one)".to_string())?;
        let sender = Sender::new(config.send.clone(), secrets)?;
        let (deadline, _) = watch::channel(None);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                grouper: Grouper::new(config.limits),
                workers: BTreeMap::new(),
                retired: Vec::new(),
                final_counters: BTreeMap::new(),
                shut_down: false,
            }),
            wake: Arc::new(Notify::new()),
            sender,
            config,
            deadline,
            refused: AtomicU64::new(0),
            router: Mutex::new(None),
            runtime,
            tracking: Arc::default(),
        });
        let router = shared.runtime.spawn(route(Arc::downgrade(&shared), shared.wake.clone()));
        *lock(&shared.router) = Some(router);
        Ok(Notifier { shared })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Sets a policy's receivers (call on every policy upsert; an empty list removes them).
    pub fn configure(&self, policy: &CompiledPolicy) {
        self.configure_receivers(&policy.reference, &policy.receivers);
    }

    /// [`Notifier::configure`] from the parts.
    pub fn configure_receivers(&self, policy: &PolicyRef, receivers: &[CompiledReceiver]) {
        let mut state = self.state();
        if state.shut_down {
            return;
        }
        state.grouper.configure(policy, receivers);
        let id = PolicyId::from(policy);
        let wanted: Vec<WorkerKey> =
            receivers.iter().flat_map(|r| channels(r).map(|c| (id.clone(), r.name.clone(), c))).collect();
        let stale: Vec<WorkerKey> =
            state.workers.keys().filter(|k| k.0 == id && !wanted.contains(k)).cloned().collect();
        for key in stale {
            if let Some(w) = state.workers.remove(&key) {
                // Dropping the queue's sender lets the worker drain what it has and stop.
                state.retired.push((w.counters, w.task));
            }
        }
        state.retired.retain(|(_, task)| !task.is_finished());
        for key in wanted {
            if state.workers.contains_key(&key) {
                continue;
            }
            let (queue, rx) = mpsc::channel(self.shared.config.queue_capacity.max(1));
            let counters = Arc::new(Counters::default());
            let task = self.shared.runtime.spawn(run_worker(
                rx,
                self.shared.sender.clone(),
                key.2,
                self.shared.config.retry.clone(),
                counters.clone(),
                self.shared.deadline.subscribe(),
                self.shared.tracking.clone(),
            ));
            state.workers.insert(key, Worker { queue, counters, task });
        }
        drop(state);
        self.shared.wake.notify_one();
    }

    /// Forgets a policy: its pending alerts and its receivers (queued messages are still delivered).
    pub fn remove(&self, policy: &PolicyRef) {
        self.configure_receivers(policy, &[]);
        self.state().grouper.remove_policy(policy);
    }

    /// Takes an intent of the evaluator. A `notify` intent raises an alert for its receiver (`Ok(true)`);
    /// the rule's other intents of the same firing are recorded so the message can say what was done
    /// (`Ok(false)`); submit them too, in order. `progress` is the job's latest progress, if known.
    pub fn submit(&self, intent: &ActionIntent, progress: Option<JobProgress>) -> Result<bool, SubmitError> {
        let mut state = self.state();
        if state.shut_down {
            return Err(SubmitError::ShutDown);
        }
        if let trainwarden_core::ActionSpec::Notify(n) = &intent.action {
            let id = PolicyId::from(&intent.policy);
            // A receiver that cannot take more now would only drop the message later: say so at once.
            let full = state
                .workers
                .range(
                    (id.clone(), n.to.clone(), ChannelKind::Slack)..=(id, n.to.clone(), ChannelKind::Webhook),
                )
                .find(|(_, w)| w.queue.capacity() == 0)
                .map(|(k, w)| (k.2, w.counters.clone()));
            if let Some((channel, counters)) = full {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(SubmitError::QueueFull {
                    policy: intent.policy.to_string(),
                    receiver: n.to.clone(),
                    channel: channel.as_str(),
                });
            }
        }
        let result = state.grouper.intent(intent, progress, Timestamp::now());
        drop(state);
        match result {
            Ok(raised) => {
                if raised {
                    self.shared.wake.notify_one();
                }
                Ok(raised)
            }
            Err(e) => {
                self.shared.refused.fetch_add(1, Ordering::Relaxed);
                Err(e.into())
            }
        }
    }

    /// Whether the message carrying `intent`'s alert (a `notify` intent) was delivered: the answer comes when
    /// its last receiver channel ended. An intent this notifier never had (a new leader's inherited intent,
    /// or one whose earlier message was not sent) is raised first, like [`Notifier::submit`]; one it holds
    /// is only watched, so a message is never queued twice for one intent.
    pub fn delivery(
        &self,
        intent: &ActionIntent,
        progress: Option<JobProgress>,
    ) -> Result<tokio::sync::oneshot::Receiver<Delivery>, SubmitError> {
        {
            let state = self.state();
            if state.shut_down {
                return Err(SubmitError::ShutDown);
            }
            let waiting = state.grouper.waiting(&intent.id);
            if let Some(rx) = self.shared.tracking.watch(&intent.id, waiting) {
                return Ok(rx);
            }
        }
        self.submit(intent, progress)?;
        let state = self.state();
        let waiting = state.grouper.waiting(&intent.id);
        // Raised and at once flushed (a groupWait of 0 s) is tracked by dispatch; still waiting is watched
        // here.
        self.shared.tracking.watch(&intent.id, waiting).ok_or(SubmitError::ShutDown)
    }

    /// The executor ended one of a firing's other actions (Enforce): messages of that firing not yet sent say
    /// what was done ("suspended the TrainJob", and how to resume it) instead of "suspending the TrainJob".
    pub fn performed(&self, intent: &ActionIntent, state: ActionState) {
        self.state().grouper.performed(&intent.policy, &intent.rule, &intent.job, &intent.id, state);
    }

    /// A rule stopped firing on a job (the evaluator's `Resolved` transition).
    /// `why` is the evaluator's resolution (the transition's `reason.resolution`), shown in the message.
    pub fn resolved(&self, policy: &PolicyRef, rule: &str, job: &JobKey, why: Option<Resolution>) {
        self.state().grouper.resolved(policy, rule, job, why, Timestamp::now());
        self.shared.wake.notify_one();
    }

    /// Feeds one evaluator event: intents go to [`Notifier::submit`], `Resolved` transitions to
    /// [`Notifier::resolved`]; everything else is ignored.
    pub fn observe(&self, event: &Event, progress: Option<JobProgress>) -> Result<(), SubmitError> {
        match event {
            Event::Intent(intent) => self.submit(intent, progress).map(|_| ()),
            Event::Transition { kind: TransitionKind::Resolved, policy, rule, job, reason, .. } => {
                self.resolved(policy, rule, job, reason.resolution);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Counters of every receiver channel, in (policy, receiver, channel) order.
    pub fn stats(&self) -> Vec<ChannelStats> {
        let state = self.state();
        if state.shut_down {
            return state.final_counters.iter().map(|(k, c)| Worker::stats(k, c)).collect();
        }
        state.workers.iter().map(|(k, w)| Worker::stats(k, &w.counters)).collect()
    }

    /// Intents refused because their receiver does not exist or its groups are full.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// Delivers what is pending now (without waiting for groupWait), stops taking intents, and waits up to
    /// `timeout` for the queues to drain; retries stop at the deadline. Idempotent.
    pub async fn shutdown(&self, timeout: StdDuration) -> ShutdownReport {
        let deadline = Instant::now() + timeout;
        let undelivered_before = self.shared.tracking.undelivered();
        let workers = {
            let mut state = self.state();
            if state.shut_down {
                return ShutdownReport::default();
            }
            let pending = state.grouper.flush_pending(Timestamp::now());
            dispatch(&state, &self.shared.tracking, pending);
            state.shut_down = true;
            let running = std::mem::take(&mut state.workers);
            state.final_counters = running.iter().map(|(k, w)| (k.clone(), w.counters.clone())).collect();
            let mut workers: Vec<(Arc<Counters>, JoinHandle<()>)> =
                running.into_values().map(|w| (w.counters, w.task)).collect();
            workers.append(&mut state.retired);
            workers
        };
        self.shared.deadline.send_replace(Some(deadline));
        if let Some(router) = lock(&self.shared.router).take() {
            router.abort();
        }
        let mut report = ShutdownReport::default();
        for (counters, mut task) in workers {
            let left = deadline.saturating_duration_since(Instant::now());
            // Workers drop stale messages once the deadline has passed; the grace covers the last attempt.
            if tokio::time::timeout(left + self.shared.config.send.timeout, &mut task).await.is_err() {
                task.abort();
                report.unfinished_workers += 1;
                let left = counters.queued.swap(0, Ordering::Relaxed);
                counters.dropped.fetch_add(left, Ordering::Relaxed);
                report.dropped += left;
            }
        }
        self.shared.tracking.abandon(crate::delivery::STOPPED_FIRST);
        report.undelivered_intents = self.shared.tracking.undelivered() - undelivered_before;
        report
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the grouping state half-updated in a way that matters more
    // than losing notifications would: keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Hands notifications to their channels' queues; a full queue drops (and counts) the message.
fn dispatch(state: &State, tracking: &Tracking, notifications: Vec<Notification>) {
    for n in notifications {
        let id = PolicyId::from(&n.policy);
        let n = Arc::new(n);
        let ids = || n.alerts.iter().map(|a| a.intent_id.as_str());
        for channel in channels(&n.receiver) {
            let Some(w) = state.workers.get(&(id.clone(), n.receiver.name.clone(), channel)) else {
                continue;
            };
            w.counters.queued.fetch_add(1, Ordering::Relaxed);
            tracking.expect(ids());
            if let Err(e) = w.queue.try_send(Queued { notification: n.clone(), queued_at: Instant::now() }) {
                w.counters.queued.fetch_sub(1, Ordering::Relaxed);
                w.counters.dropped.fetch_add(1, Ordering::Relaxed);
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => "queue full",
                    mpsc::error::TrySendError::Closed(_) => "worker stopped",
                };
                tracking.ended(ids(), &ChannelEnd::Dropped(format!("notification dropped: {why}")));
                w.counters.record_error(format!("notification for group {} dropped: {why}", n.group_key));
                tracing::warn!(receiver = %n.receiver.name, policy = %n.policy, channel = channel.as_str(), "notification dropped: {why}");
            }
        }
    }
}

/// The router: flushes due groups, sleeps until the next is due or something changes.
async fn route(shared: std::sync::Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let Some(strong) = shared.upgrade() else { return };
        let next = {
            let mut state = lock(&strong.state);
            if state.shut_down {
                return;
            }
            let due = state.grouper.poll(Timestamp::now());
            dispatch(&state, &strong.tracking, due);
            state.grouper.next_due()
        };
        let pause = next.map(|t| {
            let ms = Timestamp::now().duration_until(t).as_millis().clamp(0, i64::MAX as i128) as u64;
            StdDuration::from_millis(ms)
        });
        // Hold no strong reference while asleep, so dropping the last handle ends the router (at its next
        // wake-up) and the workers (their queues close).
        drop(strong);
        match pause {
            Some(p) => {
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(p) => {}
                }
            }
            None => {
                tokio::select! {
                    _ = wake.notified() => {}
                    // Wakes now and then to notice that every handle is gone.
                    _ = tokio::time::sleep(StdDuration::from_secs(60)) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::EnvSecrets;

    #[test]
    fn outside_a_runtime_new_is_an_error_not_a_panic() {
        let e = Notifier::new(Arc::new(EnvSecrets), NotifierConfig::default()).err().expect("an error");
        assert!(e.contains("tokio runtime"), "{e}");
    }
}
