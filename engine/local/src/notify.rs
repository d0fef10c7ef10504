//! `trainwarden watch --notify`: the watch's [`Notifier`] on top of the
//! notifications crate — the same grouping, delivery, retries and counters as the controller, on the wall
//! clock, with secrets resolved at each delivery (from the environment or files, as `replay --notify` does).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use trainwarden_core::ActionSpec;
use trainwarden_core::CompiledPolicy;
use trainwarden_core::Event;
use trainwarden_core::JobData;
use trainwarden_notify::{ChannelStats, JobProgress, NotifierConfig, SecretResolver};

use crate::watch::Notifier;

/// Delivers `notify` actions through [`trainwarden_notify::Notifier`].
pub struct Delivering {
    notifier: trainwarden_notify::Notifier,
    /// How long [`Notifier::finish`] waits for the queues to drain.
    flush_timeout: StdDuration,
}

impl Delivering {
    /// Starts the notifier's tasks: call inside a tokio runtime (or with one entered).
    pub fn new(
        secrets: Arc<dyn SecretResolver>,
        config: NotifierConfig,
        flush_timeout: StdDuration,
    ) -> Result<Delivering, String> {
        Ok(Delivering { notifier: trainwarden_notify::Notifier::new(secrets, config)?, flush_timeout })
    }
}

impl Notifier for Delivering {
    fn configure(&mut self, policies: &[CompiledPolicy]) {
        for p in policies {
            self.notifier.configure(p);
        }
    }

    fn observe(&mut self, event: &Event, job: Option<&JobData>) -> Option<String> {
        let result = self.notifier.observe(event, job.and_then(JobProgress::of));
        let Event::Intent(intent) = event else { return None };
        let ActionSpec::Notify(n) = &intent.action else { return None };
        // Errors name policies and receivers, never a secret.
        Some(match result {
            Ok(()) => format!(
                "notify {}: queued for delivery (sent after its groupWait or when the watch ends)",
                n.to
            ),
            Err(e) => format!("notify {}: NOT queued: {e}", n.to),
        })
    }

    fn finish(&mut self) -> Pin<Box<dyn Future<Output = Vec<String>> + Send + '_>> {
        Box::pin(async move {
            let report = self.notifier.shutdown(self.flush_timeout).await;
            let mut lines: Vec<String> = self.notifier.stats().iter().map(describe).collect();
            if lines.is_empty() {
                lines.push("no policy declares spec.receivers: nothing to deliver".into());
            }
            let refused = self.notifier.refused();
            if refused > 0 {
                lines.push(format!(
                    "{} refused (unknown receiver or full groups)",
                    trainwarden_core::plural(refused, "alert", "alerts")
                ));
            }
            if report.unfinished_workers > 0 {
                lines.push(format!(
                    "{} still delivering after {:?}: {} dropped",
                    trainwarden_core::plural(
                        report.unfinished_workers as u64,
                        "receiver channel",
                        "receiver channels"
                    ),
                    self.flush_timeout,
                    trainwarden_core::plural(report.dropped as u64, "message", "messages")
                ));
            }
            lines
        })
    }
}

/// `ml-team (slack) of ProgressPolicy local/local-fast: 1 sent, 0 failed, 0 retried, 0 dropped`; the last
/// error (secret-free, as every error of the notifications crate) when something failed.
fn describe(s: &ChannelStats) -> String {
    let policy = match &s.policy_namespace {
        Some(ns) => format!("{} {ns}/{}", s.policy_kind, s.policy_name),
        None => format!("{} {}", s.policy_kind, s.policy_name),
    };
    let mut line = format!(
        "{} ({}) of {policy}: {} sent, {} failed, {} retried, {} dropped",
        s.receiver,
        s.channel.as_str(),
        s.sent,
        s.failed,
        s.retried,
        s.dropped
    );
    if s.queued > 0 {
        line += &format!(", {} still queued", s.queued);
    }
    if let (Some(e), true) = (&s.last_error, s.failed + s.dropped > 0) {
        line += &format!("; last error: {e}");
    }
    line
}
