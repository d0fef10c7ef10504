//! Writing history checkpoints: on the leader, a job's checkpoint goes to the executor when `history`
//! says it is due (a new sample past the interval, a firing or a snooze change at once, within the write
//! budget), again on a timer when a write was not stored, and all of them at a stop.

use tokio::sync::oneshot;
use tracing::{debug, info};
use trainwarden_core::{Event, JobKey, SnoozeChange, Timestamp, TransitionKind};

use super::Brain;
use super::history::Due;
use crate::messages::{HistorySave, Work};
use crate::metrics::HistoryResult;

impl Brain {
    /// On the leader: the job's checkpoint goes to the executor when it is due (see `history`). A rule of
    /// the job that starts firing on this report makes it due at once, so the detector memories stored with
    /// the job agree with the firing the policy status remembers.
    pub(super) fn save_history(&mut self, key: &JobKey, uid: &str, now: Timestamp) {
        self.history.note_uid(key, uid);
        self.write_history(key, uid, now, false);
    }

    /// [`Brain::save_history`]'s write, or a retry (`again`: built even with no new sample).
    pub(super) fn write_history(&mut self, key: &JobKey, uid: &str, now: Timestamp, again: bool) {
        if !self.leading {
            return;
        }
        // A snooze that starts or ends is stored at once too: its first-seen time is what the cap runs from.
        let fired = self.events.iter().any(|e| match e {
            Event::Transition { job, kind: TransitionKind::Firing, .. } => job == key,
            Event::Snooze { job, change: SnoozeChange::Started(_) | SnoozeChange::Ended { .. }, .. } => {
                job == key
            }
            _ => false,
        });
        if fired {
            self.history.due_now(key);
        }
        // A report that added no sample (a re-poll, the echo of a write) cannot have changed the history:
        // skip building the checkpoint, which is the costly part.
        let samples = self.evaluator.job(key).map_or(0, |j| j.series.samples);
        let new_samples = self.history.new_samples(key, samples);
        if !self.history.may_write(key, now) || (!fired && !again && !new_samples) {
            return;
        }
        if !self.history.has_budget(key, now) {
            self.metrics.history(HistoryResult::Deferred);
            return;
        }
        let Some(checkpoint) = self.evaluator.checkpoint(key, uid, now) else { return };
        match self.history.due(key, &checkpoint, now) {
            Due::Later => {}
            Due::Deferred => self.metrics.history(HistoryResult::Deferred),
            Due::Write => {
                if checkpoint.points_left_out > 0 || checkpoint.metrics_left_out > 0 {
                    debug!(job = %key, points = checkpoint.points_left_out, metrics = checkpoint.metrics_left_out, "history checkpoint shortened to fit its byte budget");
                }
                self.work.push(Work::SaveHistory(Box::new(HistorySave {
                    job: key.clone(),
                    uid: uid.to_string(),
                    text: checkpoint.text,
                    content: checkpoint.content,
                    at: now,
                })));
            }
        }
    }

    /// A stop: the checkpoints that changed since their last write, all of them, for the executor to store
    /// before leadership is given up (a rolling update then loses no history).
    pub(super) fn flush_history(&mut self, done: oneshot::Sender<()>, now: Timestamp) {
        let mut saves = Vec::new();
        if self.leading {
            for (job, uid) in self.history.uids() {
                let Some(checkpoint) = self.evaluator.checkpoint(&job, &uid, now) else { continue };
                if self.history.flush(&job, &checkpoint, now) {
                    saves.push(HistorySave {
                        job,
                        uid,
                        text: checkpoint.text,
                        content: checkpoint.content,
                        at: now,
                    });
                }
            }
            info!(checkpoints = saves.len(), "stopping: storing the history checkpoints not yet written");
        }
        self.work.push(Work::FlushHistory(saves, done));
    }
}
