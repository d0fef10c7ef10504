//! Delivery: one worker task per receiver channel with a bounded queue, a rate limit, retries with
//! exponential backoff and full jitter, and counters.
//!
//! A notification handed to a full queue is dropped and counted (`dropped`), never waited for: the caller is
//! the evaluation loop. A retryable failure (see [`crate::send`]) is retried after `initial_backoff × 2^n`
//! (capped at `max_backoff`, uniformly jittered over [½, 1] of that) until it succeeds, the message is older
//! than `give_up_after`, or shutdown's deadline passes; a permanent failure (HTTP 4xx, SMTP 5xx) is counted
//! as `failed` at once. So a receiver that is down for an hour loses nothing that fits its queue.
//!
//! This module does not group or render; it moves [`Notification`]s to [`Sender`]s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant};

use tokio::sync::{mpsc, watch};

use crate::grouping::Notification;
use crate::send::{ChannelKind, SendError, Sender};
use crate::tracking::{ChannelEnd, Tracking};

/// Retry and queue settings.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// The pause before the first retry (default 1 s); each further one doubles it.
    pub initial_backoff: StdDuration,
    /// The longest pause between two attempts (default 5 min).
    pub max_backoff: StdDuration,
    /// A message still failing this long after it was queued is given up (counted `failed`).
    pub give_up_after: StdDuration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff: StdDuration::from_secs(1),
            max_backoff: StdDuration::from_secs(300),
            give_up_after: StdDuration::from_secs(6 * 3600),
        }
    }
}

impl RetryPolicy {
    /// The pause before retry number `retry` (0-based): exponential, capped, jittered over [½, 1].
    pub fn backoff(&self, retry: u32) -> StdDuration {
        let base =
            self.initial_backoff.saturating_mul(2u32.saturating_pow(retry.min(31))).min(self.max_backoff);
        base.mul_f64(0.5 + fastrand::f64() / 2.0)
    }
}

/// Counters of one receiver channel. `sent`, `failed`, `retried` and `dropped` only grow.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages delivered (the receiver answered 2xx or the SMTP server accepted it).
    pub sent: AtomicU64,
    /// Messages given up: a permanent failure, or still failing after `give_up_after`.
    pub failed: AtomicU64,
    /// Failed attempts that were retried (one message may count several times).
    pub retried: AtomicU64,
    /// Messages never attempted: the queue was full, or shutdown's deadline passed first.
    pub dropped: AtomicU64,
    /// Waiting in the queue or being delivered.
    pub queued: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Counters {
    /// Keeps `message` as the channel's last error (for status).
    pub fn record_error(&self, message: String) {
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(message);
        }
    }

    /// The channel's most recent delivery error, if any (redacted: no secret values).
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|l| l.clone())
    }
}

/// One message in a queue.
pub struct Queued {
    /// The grouped, rendered-on-send message.
    pub notification: Arc<Notification>,
    /// When it was queued (for `give_up_after`).
    pub queued_at: Instant,
}

/// A token bucket: up to `per_minute` messages at once, refilled at `per_minute` per minute.
pub(crate) struct RateLimit {
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    /// A full bucket.
    pub(crate) fn new(now: Instant) -> RateLimit {
        RateLimit { tokens: f64::MAX, at: now }
    }

    /// How long to wait before the next message may go.
    pub(crate) fn take(&mut self, per_minute: u32, now: Instant) -> StdDuration {
        let per_minute = f64::from(per_minute.max(1));
        let per_second = per_minute / 60.0;
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * per_second).min(per_minute);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            StdDuration::ZERO
        } else {
            let wait = (1.0 - self.tokens) / per_second;
            self.tokens -= 1.0; // paid for in advance: the caller sleeps `wait`
            StdDuration::from_secs_f64(wait)
        }
    }
}

/// Delivers one notification on one channel, retrying as the policy says. `deadline` (shutdown) stops
/// retries early. Returns the final error, if any; counters are updated.
pub async fn deliver(
    sender: &Sender,
    kind: ChannelKind,
    queued: &Queued,
    retry: &RetryPolicy,
    counters: &Counters,
    deadline: &watch::Receiver<Option<Instant>>,
) -> Result<(), SendError> {
    let n = &queued.notification;
    let mut attempt = 0u32;
    loop {
        match sender.send(kind, n).await {
            Ok(()) => {
                counters.sent.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(receiver = %n.receiver.name, policy = %n.policy, channel = kind.as_str(), group = %n.group_key, "notification sent");
                return Ok(());
            }
            Err(e) => {
                let pause = retry.backoff(attempt);
                let past_deadline = deadline.borrow().is_some_and(|d| Instant::now() + pause > d);
                let too_old = queued.queued_at.elapsed() + pause > retry.give_up_after;
                if !e.is_retryable() || past_deadline || too_old {
                    // Say "given up", not "(will retry)": this error is final.
                    let e = match e {
                        SendError::Retryable(error) => {
                            let attempts =
                                trainwarden_core::plural(u64::from(attempt) + 1, "attempt", "attempts");
                            let end = if past_deadline {
                                "the delivery deadline came first".to_string()
                            } else {
                                format!("the retry limit of {}s passed", retry.give_up_after.as_secs())
                            };
                            SendError::GaveUp { error, why: format!("{attempts}; {end}") }
                        }
                        other => other,
                    };
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                    counters.record_error(e.to_string());
                    tracing::warn!(receiver = %n.receiver.name, policy = %n.policy, channel = kind.as_str(), attempts = attempt + 1, error = %e, "notification not delivered");
                    return Err(e);
                }
                counters.retried.fetch_add(1, Ordering::Relaxed);
                counters.record_error(e.to_string());
                tracing::info!(receiver = %n.receiver.name, policy = %n.policy, channel = kind.as_str(), attempt = attempt + 1, retry_in_ms = pause.as_millis() as u64, error = %e, "notification delivery failed; retrying");
                // Shutdown cuts the pause short: one more attempt, then the deadline decides.
                let mut shutdown = deadline.clone();
                // Only a stop that begins during this pause cuts it: one that began before has had its
                // extra attempt (else every retry after it went out at once, hammering the receiver).
                shutdown.borrow_and_update();
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    changed = shutdown.changed() => {
                        if changed.is_err() {
                            // The notifier is gone without a shutdown: keep the pause, do not spin.
                            tokio::time::sleep(pause).await;
                        }
                    }
                }
                attempt += 1;
            }
        }
    }
}

/// The worker loop of one receiver channel: until its queue is closed and drained, or the shutdown
/// deadline passes (what is left then is counted as dropped).
pub(crate) async fn run_worker(
    mut queue: mpsc::Receiver<Queued>,
    sender: Sender,
    kind: ChannelKind,
    retry: RetryPolicy,
    counters: Arc<Counters>,
    deadline: watch::Receiver<Option<Instant>>,
    tracking: Arc<Tracking>,
) {
    let mut rate = RateLimit { tokens: f64::MAX, at: Instant::now() };
    while let Some(queued) = queue.recv().await {
        let ids = || queued.notification.alerts.iter().map(|a| a.intent_id.as_str());
        let past_deadline = deadline.borrow().is_some_and(|d| Instant::now() >= d);
        if past_deadline {
            counters.dropped.fetch_add(1, Ordering::Relaxed);
            counters.queued.fetch_sub(1, Ordering::Relaxed);
            tracking.ended(ids(), &ChannelEnd::Dropped(STOPPED_FIRST.into()));
            continue;
        }
        let wait = rate.take(queued.notification.receiver.max_per_minute, Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let end = match deliver(&sender, kind, &queued, &retry, &counters, &deadline).await {
            Ok(()) => ChannelEnd::Sent,
            // A retryable failure cut short by the stop is not a receiver's refusal: still owed.
            Err(SendError::GaveUp { .. }) if deadline.borrow().is_some() => {
                ChannelEnd::Dropped(STOPPED_FIRST.into())
            }
            Err(e) => ChannelEnd::Failed(e.to_string()),
        };
        tracking.ended(ids(), &end);
        counters.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a message the stop cut off was not sent.
pub(crate) const STOPPED_FIRST: &str = "the notifier stopped before it was sent";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let p = RetryPolicy {
            initial_backoff: StdDuration::from_secs(1),
            max_backoff: StdDuration::from_secs(10),
            give_up_after: StdDuration::from_secs(60),
        };
        for (retry, base) in [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0), (40, 10.0)] {
            for _ in 0..50 {
                let b = p.backoff(retry).as_secs_f64();
                assert!(b >= base / 2.0 && b <= base, "retry {retry}: {b}");
            }
        }
    }

    #[test]
    fn rate_limit_allows_a_minute_of_burst_then_spaces_messages() {
        let start = Instant::now();
        let mut r = RateLimit { tokens: f64::MAX, at: start };
        for _ in 0..6 {
            assert_eq!(r.take(6, start), StdDuration::ZERO);
        }
        let wait = r.take(6, start);
        assert!((wait.as_secs_f64() - 10.0).abs() < 1e-6, "{wait:?}");
        // After the wait the paid-for token is consumed: the next one waits another 10s.
        let wait = r.take(6, start + StdDuration::from_secs(10));
        assert!((wait.as_secs_f64() - 10.0).abs() < 1e-6, "{wait:?}");
    }
}
