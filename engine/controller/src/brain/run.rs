//! The evaluation loop: one task reads inputs, runs timers and sends the status beat, one at a time, and
//! hands each step's work to the executor. Time comes from [`clock`](super::clock): the wall clock, or a
//! recorded stream's own.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::Brain;
use super::clock::LoopClock;
use crate::messages::{Input, StatusUpdate, Work};
use crate::metrics::{DroppedWork, Metrics};
use crate::runtime::config::ControllerConfig;

/// The loop's connections to the other tasks.
pub struct Channels {
    /// Inputs: the sources' and the executor's outcomes.
    pub inputs: mpsc::Receiver<Input>,
    /// Work for the executor.
    pub work: mpsc::Sender<Work>,
    /// Policy statuses for the status writer.
    pub statuses: mpsc::Sender<StatusUpdate>,
    /// Answered once both policy kinds and the exceptions are listed (the TrainJob watch waits for it).
    pub policies_synced: oneshot::Sender<()>,
    /// Set once the TrainJobs are listed (`/readyz`).
    pub ready: watch::Sender<bool>,
    /// Whether this replica leads.
    pub leadership: watch::Receiver<bool>,
    /// True from a graceful stop's first step: no new action starts ([`Brain::stop_acting`]).
    pub stopping: watch::Receiver<bool>,
    /// A graceful stop's "end the pipeline" step: the loop sends the statuses that changed and the work it
    /// holds, then ends (dropping its senders, so the executor and the status writer finish and end too).
    pub stop: oneshot::Receiver<()>,
}

/// The loop: inputs, timers and the status beat, one at a time.
pub async fn run(mut brain: Brain, config: ControllerConfig, channels: Channels, metrics: Arc<Metrics>) {
    let Channels { mut inputs, work, statuses, policies_synced, ready, leadership, mut stopping, mut stop } =
        channels;
    let mut acting = true;
    let mut policies_synced = Some(policies_synced);
    brain.lead(*leadership.borrow());
    // `None` once leadership can no longer change (leader election off).
    let mut leadership = Some(leadership);
    // tokio's interval panics on zero.
    let mut beat = tokio::time::interval(config.status_interval.max(Duration::from_millis(10)));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut clock = LoopClock::new(config.clock);
    loop {
        let next = brain.next_tick();
        let wait = clock.sleep_before(next);
        tokio::select! {
            input = inputs.recv() => {
                let Some(input) = input else { break };
                let now = clock.before(&mut brain, &input);
                brain.handle(input, now);
                clock.after(&mut brain);
                if brain.policies_listed() && let Some(tx) = policies_synced.take() {
                    let _ = tx.send(());
                }
                if brain.jobs_listed() && !*ready.borrow() {
                    let _ = ready.send(true);
                }
            }
            _ = tokio::time::sleep(wait) => {
                if let Some(now) = clock.timer_time(next) {
                    brain.tick(now);
                }
            }
            changed = async { leadership.as_mut()?.changed().await.ok() }, if leadership.is_some() => {
                match changed {
                    None => leadership = None,
                    Some(()) => {
                        let leading = leadership.as_mut().is_some_and(|l| *l.borrow_and_update());
                        brain.lead(leading);
                    }
                }
            }
            _ = beat.tick() => {
                brain.refresh_notification_metrics();
                for update in brain.changed_statuses(clock.now()) {
                    if statuses.send(update).await.is_err() {
                        return;
                    }
                }
            }
            changed = stopping.changed(), if acting => {
                if changed.is_err() || *stopping.borrow_and_update() {
                    acting = false;
                    brain.stop_acting();
                }
            }
            _ = &mut stop => {
                // What is already queued (the outcomes of the notifications the stop drained) counts
                // first; then the last beat: what the statuses say now (intents owed included) is what the
                // next leader reads.
                while let Ok(input) = inputs.try_recv() {
                    let now = clock.before(&mut brain, &input);
                    brain.handle(input, now);
                    clock.after(&mut brain);
                }
                for update in brain.changed_statuses(clock.now()) {
                    if statuses.send(update).await.is_err() {
                        break;
                    }
                }
                for item in brain.outgoing() {
                    if work.send(item).await.is_err() {
                        break;
                    }
                }
                return;
            }
        }
        for item in brain.outgoing() {
            if work.send(item).await.is_err() {
                metrics.dropped(DroppedWork::ExecutorGone);
                return;
            }
        }
    }
}
