//! Delivery tracking by intent id: whether the message carrying a `notify` intent's alert reached its
//! receiver. The controller settles the intent only then, so a notification still queued when a leader stops
//! stays owed and the next leader sends it (the message carries the intent id, `alerts[].intentId`, so a
//! receiver can tell a re-send after a `kill -9` from a new alert).
//!
//! An intent is *expected* on as many channels as its message was queued to; each channel's end (sent,
//! given up, dropped) is counted against it, and when the last one ends the intent's [`Delivery`] is known:
//! delivered if any channel delivered it (sending again would repeat it there), else undelivered if a
//! channel dropped it (shutdown, full queue), else failed. Known results are kept for the last
//! [`KEEP_RESULTS`] intents, so a question asked after the answer still gets it.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::oneshot;

/// How many settled results are remembered.
pub const KEEP_RESULTS: usize = 4096;

/// How the message carrying an intent's alert ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// A receiver channel accepted it (HTTP 2xx, SMTP accepted).
    Delivered,
    /// Given up: a permanent refusal, or retries exhausted (the error, secret-free).
    Failed(String),
    /// Never sent: the notifier stopped first (its shutdown deadline), or the queue was full. The intent
    /// is still owed.
    Undelivered(String),
}

/// One channel's end of one message.
#[derive(Clone, Debug)]
pub(crate) enum ChannelEnd {
    Sent,
    Failed(String),
    Dropped(String),
}

#[derive(Default)]
struct Open {
    left: usize,
    sent: bool,
    failed: Option<String>,
    dropped: Option<String>,
    waiters: Vec<oneshot::Sender<Delivery>>,
}

impl Open {
    fn result(&self) -> Delivery {
        if self.sent {
            Delivery::Delivered
        } else if let Some(why) = &self.dropped {
            Delivery::Undelivered(why.clone())
        } else {
            Delivery::Failed(self.failed.clone().unwrap_or_else(|| "not delivered".into()))
        }
    }
}

#[derive(Default)]
struct Inner {
    open: HashMap<String, Open>,
    known: HashMap<String, Delivery>,
    order: VecDeque<String>,
    /// Intents settled as [`Delivery::Undelivered`], ever.
    undelivered: usize,
}

impl Inner {
    fn settle(&mut self, id: &str) {
        let Some(open) = self.open.remove(id) else { return };
        let result = open.result();
        if matches!(result, Delivery::Undelivered(_)) {
            self.undelivered += 1;
        }
        for w in open.waiters {
            let _ = w.send(result.clone());
        }
        if self.known.insert(id.to_string(), result).is_none() {
            self.order.push_back(id.to_string());
        }
        while self.order.len() > KEEP_RESULTS {
            if let Some(old) = self.order.pop_front() {
                self.known.remove(&old);
            }
        }
    }
}

/// The tracker the notifier and its workers share.
#[derive(Default)]
pub(crate) struct Tracking {
    inner: Mutex<Inner>,
}

impl Tracking {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A receiver of intent `id`'s result: at once if it is known, later if its message is under way or
    /// `pending` (its alert waits in a group); `None` when this notifier never had it.
    pub(crate) fn watch(&self, id: &str, pending: bool) -> Option<oneshot::Receiver<Delivery>> {
        let mut inner = self.lock();
        let (tx, rx) = oneshot::channel();
        match inner.known.get(id) {
            // Not sent is not an answer to keep: the intent is asked again to be sent again.
            Some(Delivery::Undelivered(_)) => {
                inner.known.remove(id);
            }
            Some(known) => {
                let _ = tx.send(known.clone());
                return Some(rx);
            }
            None => {}
        }
        match inner.open.get_mut(id) {
            Some(open) => open.waiters.push(tx),
            None if pending => {
                inner.open.insert(id.to_string(), Open { waiters: vec![tx], ..Open::default() });
            }
            None => return None,
        }
        Some(rx)
    }

    /// The message carrying `ids` was queued on one more channel.
    pub(crate) fn expect<'a>(&self, ids: impl Iterator<Item = &'a str>) {
        let mut inner = self.lock();
        for id in ids {
            // A repeat of an alert already settled (`repeatInterval`) is not tracked again.
            if inner.known.contains_key(id) {
                continue;
            }
            inner.open.entry(id.to_string()).or_default().left += 1;
        }
    }

    /// One channel's end of the message carrying `ids`.
    pub(crate) fn ended<'a>(&self, ids: impl Iterator<Item = &'a str>, end: &ChannelEnd) {
        let mut inner = self.lock();
        for id in ids {
            let Some(open) = inner.open.get_mut(id) else { continue };
            match end {
                ChannelEnd::Sent => open.sent = true,
                ChannelEnd::Failed(e) => open.failed = Some(e.clone()),
                ChannelEnd::Dropped(why) => open.dropped = Some(why.clone()),
            }
            open.left = open.left.saturating_sub(1);
            if open.left == 0 {
                inner.settle(id);
            }
        }
    }

    /// How many intents were settled as undelivered so far.
    pub(crate) fn undelivered(&self) -> usize {
        self.lock().undelivered
    }

    /// Shutdown is over: every intent still open is undelivered (its worker stopped, or its alert never
    /// left its group).
    pub(crate) fn abandon(&self, why: &str) -> usize {
        let mut inner = self.lock();
        let ids: Vec<String> = inner.open.keys().cloned().collect();
        for id in &ids {
            if let Some(open) = inner.open.get_mut(id)
                && open.dropped.is_none()
            {
                open.dropped = Some(why.to_string());
            }
            inner.settle(id);
        }
        ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intent_is_delivered_once_any_channel_sent_it_and_undelivered_when_every_one_dropped_it() {
        let t = Tracking::default();
        let mut a = t.watch("a", true).expect("pending");
        t.expect(["a", "b"].into_iter());
        t.expect(["a", "b"].into_iter());
        t.ended(["a", "b"].into_iter(), &ChannelEnd::Dropped("shutdown".into()));
        assert!(a.try_recv().is_err(), "one channel of two still under way");
        t.ended(["a", "b"].into_iter(), &ChannelEnd::Sent);
        assert_eq!(a.try_recv().unwrap(), Delivery::Delivered);
        // Asked after the answer: still known.
        assert_eq!(t.watch("b", false).unwrap().try_recv().unwrap(), Delivery::Delivered);
        assert!(t.watch("never", false).is_none());

        let mut c = t.watch("c", true).unwrap();
        t.expect(std::iter::once("c"));
        t.ended(std::iter::once("c"), &ChannelEnd::Failed("HTTP 400".into()));
        assert_eq!(c.try_recv().unwrap(), Delivery::Failed("HTTP 400".into()));

        let mut d = t.watch("d", true).unwrap();
        assert_eq!(t.abandon("the notifier stopped"), 1);
        assert_eq!(d.try_recv().unwrap(), Delivery::Undelivered("the notifier stopped".into()));
        // Undelivered is asked again, not answered from memory: the caller raises it anew.
        assert!(t.watch("d", false).is_none());
    }

    #[test]
    fn known_results_are_bounded() {
        let t = Tracking::default();
        for i in 0..KEEP_RESULTS + 10 {
            let id = i.to_string();
            t.expect(std::iter::once(id.as_str()));
            t.ended(std::iter::once(id.as_str()), &ChannelEnd::Sent);
        }
        assert!(t.watch("0", false).is_none(), "the oldest result is forgotten");
        assert!(t.watch(&(KEEP_RESULTS + 9).to_string(), false).is_some());
    }
}
