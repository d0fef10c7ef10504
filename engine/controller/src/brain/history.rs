//! When a job's history checkpoint is written ([`crate::HISTORY_ANNOTATION`]): after a new sample, if
//! `history_interval` has passed since the job's last write (or a rule of the job just started firing) and
//! the content changed, within a global
//! budget of `history_writes_per_second` (a token bucket). What was last written is learnt from the
//! TrainJob itself (the checkpoint carries its time and content hash), so a new leader goes on from the
//! previous leader's schedule, and the echo of a write (the watch event it causes) changes nothing.
//! A write counts as stored only once the executor confirms it; one that failed, went to a replica that no
//! longer leads, or was deferred by the budget is tried again on a timer ([`HistoryBook::retries_due`]),
//! not only with the job's next sample, which a stalled job never sends.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use trainwarden_core::{HistoryCheckpoint, JobKey, Timestamp};

use crate::messages::StoredCheckpoint;

/// What was last stored on one TrainJob.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stored {
    at: Timestamp,
    content: u64,
}

/// How long an unconfirmed write is waited for before the job may be written again (an executor queue
/// that dropped it never answers).
const IN_FLIGHT_FOR: Duration = Duration::from_secs(120);
/// When a write that was not stored is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// When a write the budget deferred is tried again.
const DEFERRED_FOR: Duration = Duration::from_secs(1);

/// Whether a job's checkpoint is written now.
#[derive(Debug, PartialEq)]
pub(super) enum Due {
    /// Not yet (`history_interval` has not passed, a write is in flight) or nothing changed.
    Later,
    /// Due, but the global budget is used up: tried again in a second.
    Deferred,
    /// Write this.
    Write,
}

/// The write schedule of every job's checkpoint.
#[derive(Debug)]
pub(super) struct HistoryBook {
    interval: Duration,
    per_second: f64,
    stored: HashMap<JobKey, Stored>,
    /// The hash of the annotation text last read per job, so an unchanged annotation is not parsed again.
    read: HashMap<JobKey, u64>,
    tokens: f64,
    refilled: Option<Timestamp>,
    /// Each judged job's uid, for the checkpoints a stop flushes.
    uids: HashMap<JobKey, String>,
    /// The job's sample count when its checkpoint was last built.
    built_at_samples: HashMap<JobKey, u64>,
    /// Writes sent to the executor and not yet confirmed: content hash and when sent.
    in_flight: HashMap<JobKey, (u64, Timestamp)>,
    /// Jobs whose checkpoint is to be tried again, and when.
    retry: RetrySchedule,
}

/// Jobs to try again and when, also ordered by time: the brain asks for the earliest after every message,
/// and at 10,000 jobs (the first checkpoints spread at 5/s) a scan of every deferred job for it was 4.4 % of
/// the controller's CPU.
#[derive(Debug, Default)]
struct RetrySchedule {
    at: HashMap<JobKey, Timestamp>,
    by_time: BTreeSet<(Timestamp, JobKey)>,
}

impl RetrySchedule {
    /// Schedules `job` at `at`, or keeps its earlier time.
    fn at_or_before(&mut self, job: &JobKey, at: Timestamp) {
        match self.at.get_mut(job) {
            Some(t) if *t <= at => {}
            Some(t) => {
                self.by_time.remove(&(*t, job.clone()));
                *t = at;
                self.by_time.insert((at, job.clone()));
            }
            None => {
                self.at.insert(job.clone(), at);
                self.by_time.insert((at, job.clone()));
            }
        }
    }

    fn remove(&mut self, job: &JobKey) {
        if let Some(t) = self.at.remove(job) {
            self.by_time.remove(&(t, job.clone()));
        }
    }

    /// Takes out the jobs due by `now`, earliest first.
    fn take_due(&mut self, now: Timestamp) -> Vec<JobKey> {
        let mut due = Vec::new();
        while let Some((t, _)) = self.by_time.first()
            && *t <= now
            && let Some((_, job)) = self.by_time.pop_first()
        {
            self.at.remove(&job);
            due.push(job);
        }
        due
    }

    fn earliest(&self) -> Option<Timestamp> {
        self.by_time.first().map(|(t, _)| *t)
    }
}

impl HistoryBook {
    pub(super) fn new(interval: Duration, per_second: u32) -> Self {
        let per_second = f64::from(per_second.max(1));
        HistoryBook {
            interval,
            per_second,
            stored: HashMap::new(),
            read: HashMap::new(),
            tokens: per_second,
            refilled: None,
            uids: HashMap::new(),
            built_at_samples: HashMap::new(),
            in_flight: HashMap::new(),
            retry: RetrySchedule::default(),
        }
    }

    /// The job's checkpoint as watched now: what is stored on it (written by this or another replica).
    pub(super) fn read(&mut self, job: &JobKey, stored: Option<&StoredCheckpoint>) {
        let Some(stored) = stored else { return };
        if self.read.get(job) == Some(&stored.hash) {
            return;
        }
        self.read.insert(job.clone(), stored.hash);
        if let Some((at, content)) = stored.stamp
            && self.stored.get(job).is_none_or(|s| s.at <= at)
        {
            self.stored.insert(job.clone(), Stored { at, content });
        }
    }

    /// Whether `history_interval` has passed since the job's last write (cheap: checked before the
    /// checkpoint is built).
    pub(super) fn may_write(&self, job: &JobKey, now: Timestamp) -> bool {
        self.stored.get(job).is_none_or(|s| {
            let since = now.duration_since(s.at).as_secs_f64();
            // A negative span: a clock that went back (or another replica's clock ahead); do not wait for it.
            since >= self.interval.as_secs_f64() || since < 0.0
        })
    }

    /// Whether the write budget has a token for the job's checkpoint; when it has none, a retry is booked.
    /// Asked before the checkpoint is built, its costly part: at 10,000 jobs, whose first checkpoints the
    /// budget spreads at 5/s, building checkpoints only to defer them (again at every retry) was a third of
    /// the controller's CPU. A job with a write in flight is left to [`HistoryBook::due`].
    pub(super) fn has_budget(&mut self, job: &JobKey, now: Timestamp) -> bool {
        let in_flight = self
            .in_flight
            .get(job)
            .is_some_and(|(_, sent)| now.duration_since(*sent).as_secs_f64() < IN_FLIGHT_FOR.as_secs_f64());
        if in_flight {
            return true;
        }
        self.refill(now);
        if self.tokens < 1.0 {
            self.retry_at(job, now, DEFERRED_FOR);
            return false;
        }
        true
    }

    /// Whether `checkpoint` is written now; a write is booked as in flight until [`HistoryBook::saved`].
    pub(super) fn due(&mut self, job: &JobKey, checkpoint: &HistoryCheckpoint, now: Timestamp) -> Due {
        let waiting = self
            .in_flight
            .get(job)
            .is_some_and(|(_, sent)| now.duration_since(*sent).as_secs_f64() < IN_FLIGHT_FOR.as_secs_f64());
        if waiting {
            // A change made while the last write is in flight: tried again once that one is answered (a
            // job that goes quiet now sends no sample that would).
            if self.in_flight.get(job).is_some_and(|(c, _)| *c != checkpoint.content) {
                self.retry_at(job, now, DEFERRED_FOR);
            }
            return Due::Later;
        }
        if !self.may_write(job, now) || self.stored.get(job).is_some_and(|s| s.content == checkpoint.content)
        {
            return Due::Later;
        }
        self.refill(now);
        if self.tokens < 1.0 {
            self.retry_at(job, now, DEFERRED_FOR);
            return Due::Deferred;
        }
        self.tokens -= 1.0;
        self.retry.remove(job);
        self.in_flight.insert(job.clone(), (checkpoint.content, now));
        Due::Write
    }

    /// The executor's answer for a write: stored (booked, the interval starts) or not (tried again in
    /// [`RETRY_AFTER`]).
    pub(super) fn saved(&mut self, job: &JobKey, content: u64, at: Timestamp, stored: bool, now: Timestamp) {
        if self.in_flight.get(job).is_some_and(|(c, _)| *c == content) {
            self.in_flight.remove(job);
        }
        if stored {
            if self.stored.get(job).is_none_or(|s| s.at <= at) {
                self.stored.insert(job.clone(), Stored { at, content });
            }
        } else if self.uids.contains_key(job) {
            self.retry_at(job, now, RETRY_AFTER);
        }
    }

    fn retry_at(&mut self, job: &JobKey, now: Timestamp, after: Duration) {
        let at = now.checked_add(after).unwrap_or(now);
        self.retry.at_or_before(job, at);
    }

    /// The jobs whose checkpoint is to be tried again by `now` (taken out of the retry list).
    pub(super) fn retries_due(&mut self, now: Timestamp) -> Vec<JobKey> {
        self.retry.take_due(now)
    }

    /// When the next retry is due.
    pub(super) fn next_retry(&self) -> Option<Timestamp> {
        self.retry.earliest()
    }

    /// The job's uid, if it was judged.
    pub(super) fn uid_of(&self, job: &JobKey) -> Option<String> {
        self.uids.get(job).cloned()
    }

    fn refill(&mut self, now: Timestamp) {
        let elapsed = self.refilled.map_or(0.0, |t| now.duration_since(t).as_secs_f64().max(0.0));
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.per_second);
        self.refilled = Some(now);
    }

    /// The job's next checkpoint does not wait for `history_interval` (the global budget still applies).
    pub(super) fn due_now(&mut self, job: &JobKey) {
        if let Some(s) = self.stored.get_mut(job) {
            s.at = Timestamp::MIN;
        }
    }

    /// Whether the job counted samples since its checkpoint was last built (and notes `samples`).
    pub(super) fn new_samples(&mut self, job: &JobKey, samples: u64) -> bool {
        self.built_at_samples.insert(job.clone(), samples) != Some(samples)
    }

    pub(super) fn note_uid(&mut self, job: &JobKey, uid: &str) {
        if self.uids.get(job).is_none_or(|u| u != uid) {
            self.uids.insert(job.clone(), uid.to_string());
        }
    }

    /// Every judged job and its uid.
    pub(super) fn uids(&self) -> Vec<(JobKey, String)> {
        self.uids.iter().map(|(k, u)| (k.clone(), u.clone())).collect()
    }

    /// At a stop: whether `checkpoint` differs from what is stored (interval and budget do not apply); a
    /// write is booked as stored.
    pub(super) fn flush(&mut self, job: &JobKey, checkpoint: &HistoryCheckpoint, now: Timestamp) -> bool {
        if self.stored.get(job).is_some_and(|s| s.content == checkpoint.content) {
            return false;
        }
        self.stored.insert(job.clone(), Stored { at: now, content: checkpoint.content });
        true
    }

    pub(super) fn forget(&mut self, job: &JobKey) {
        self.stored.remove(job);
        self.read.remove(job);
        self.uids.remove(job);
        self.built_at_samples.remove(job);
        self.in_flight.remove(job);
        self.retry.remove(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainwarden_testkit::fixtures::at_sec;

    fn checkpoint(content: u64) -> HistoryCheckpoint {
        HistoryCheckpoint { text: String::new(), content, points_left_out: 0, metrics_left_out: 0 }
    }

    /// `due`, and for a write the executor's confirmation that it was stored.
    fn write(book: &mut HistoryBook, job: &JobKey, content: u64, at: Timestamp) -> Due {
        let due = book.due(job, &checkpoint(content), at);
        if due == Due::Write {
            book.saved(job, content, at, true, at);
        }
        due
    }

    #[test]
    fn one_write_per_interval_and_only_when_the_history_changed() {
        let mut book = HistoryBook::new(Duration::from_secs(300), 5);
        let job = JobKey::new("ml", "ft");
        assert_eq!(write(&mut book, &job, 1, at_sec(0)), Due::Write);
        assert_eq!(write(&mut book, &job, 2, at_sec(299)), Due::Later, "within the interval");
        assert_eq!(write(&mut book, &job, 1, at_sec(400)), Due::Later, "unchanged");
        assert_eq!(write(&mut book, &job, 2, at_sec(400)), Due::Write);
        // A sample every 30 s for an hour: 12 writes, not 120.
        let writes = (0..120)
            .filter(|i| write(&mut book, &job, 10 + i, at_sec(400 + 30 * (i + 1) as i64)) == Due::Write);
        assert_eq!(writes.count(), 12);
    }

    #[test]
    fn a_write_that_was_not_stored_is_tried_again_on_a_timer() {
        let mut book = HistoryBook::new(Duration::from_secs(300), 5);
        let job = JobKey::new("ml", "ft");
        book.note_uid(&job, "u1");
        assert_eq!(book.due(&job, &checkpoint(1), at_sec(0)), Due::Write);
        assert_eq!(book.due(&job, &checkpoint(2), at_sec(10)), Due::Later, "one write in flight at a time");
        assert_eq!(
            book.next_retry(),
            Some(at_sec(11)),
            "the newer content is tried again once that one is answered"
        );
        book.retries_due(at_sec(11));
        book.saved(&job, 1, at_sec(0), false, at_sec(1));
        assert_eq!(book.next_retry(), Some(at_sec(31)));
        assert!(book.retries_due(at_sec(30)).is_empty());
        assert_eq!(book.retries_due(at_sec(31)), vec![job.clone()]);
        assert!(book.may_write(&job, at_sec(31)), "nothing is booked as stored");
        assert_eq!(write(&mut book, &job, 1, at_sec(31)), Due::Write, "the same content is written again");
        assert_eq!(book.next_retry(), None);
        assert!(!book.may_write(&job, at_sec(40)), "stored now: the interval starts");
    }

    #[test]
    fn the_global_budget_defers_a_burst() {
        let mut book = HistoryBook::new(Duration::from_secs(300), 5);
        let due: Vec<Due> = (0..8)
            .map(|i| book.due(&JobKey::new("ml", format!("j{i}")), &checkpoint(1), at_sec(0)))
            .collect();
        assert_eq!(due.iter().filter(|d| **d == Due::Write).count(), 5);
        assert_eq!(due.iter().filter(|d| **d == Due::Deferred).count(), 3);
        assert_eq!(book.next_retry(), Some(at_sec(1)), "the deferred ones are tried again in a second");
        assert_eq!(
            book.due(&JobKey::new("ml", "j7"), &checkpoint(1), at_sec(1)),
            Due::Write,
            "refilled a second later"
        );
    }

    /// The schedule against the plain map it replaced (keep the earliest time per job, take every job due),
    /// over a long pseudo-random sequence; the time index must match the map after every step.
    #[test]
    fn the_retry_schedule_behaves_as_a_map_of_earliest_times() {
        let mut schedule = RetrySchedule::default();
        let mut model: HashMap<JobKey, Timestamp> = HashMap::new();
        let mut rng = trainwarden_testkit::fixtures::rng::Rng(0x2545_f491_4f6c_dd1d_u64);
        let mut next = move |n: u64| rng.below(n as usize) as u64;
        let (mut now, mut taken) = (0, 0);
        for step in 0..20_000 {
            now += next(2) as i64;
            let job = JobKey::new("ml", format!("j{}", next(16)));
            match next(4) {
                0 | 1 => {
                    let at = at_sec(now + next(40) as i64);
                    schedule.at_or_before(&job, at);
                    model.entry(job).and_modify(|m| *m = (*m).min(at)).or_insert(at);
                }
                2 => {
                    schedule.remove(&job);
                    model.remove(&job);
                }
                _ => {
                    let got = schedule.take_due(at_sec(now));
                    let mut expected: Vec<(Timestamp, JobKey)> = model
                        .iter()
                        .filter(|(_, at)| **at <= at_sec(now))
                        .map(|(j, at)| (*at, j.clone()))
                        .collect();
                    expected.sort();
                    model.retain(|_, at| *at > at_sec(now));
                    assert_eq!(got, expected.into_iter().map(|(_, j)| j).collect::<Vec<_>>(), "step {step}");
                    taken += got.len();
                }
            }
            assert_eq!(schedule.at, model, "step {step}");
            let by_time: BTreeSet<(Timestamp, JobKey)> =
                model.iter().map(|(j, at)| (*at, j.clone())).collect();
            assert_eq!(schedule.by_time, by_time, "step {step}");
            assert_eq!(schedule.earliest(), model.values().min().copied(), "step {step}");
        }
        assert!(taken > 1_000, "the sequence took jobs out ({taken})");
    }

    #[test]
    fn a_spent_budget_defers_a_job_before_its_checkpoint_is_built() {
        let mut book = HistoryBook::new(Duration::from_secs(300), 2);
        let (a, b, c) = (JobKey::new("ml", "a"), JobKey::new("ml", "b"), JobKey::new("ml", "c"));
        assert!(book.has_budget(&a, at_sec(0)));
        assert_eq!(book.due(&a, &checkpoint(1), at_sec(0)), Due::Write);
        assert!(book.has_budget(&b, at_sec(0)));
        assert_eq!(book.due(&b, &checkpoint(1), at_sec(0)), Due::Write);
        assert!(!book.has_budget(&c, at_sec(0)), "two writes per second, both spent");
        assert_eq!(book.next_retry(), Some(at_sec(1)), "tried again when a token is back");
        assert!(book.has_budget(&a, at_sec(0)), "a job with a write in flight is left to `due`");
        assert_eq!(book.retries_due(at_sec(1)), vec![c.clone()]);
        assert!(book.has_budget(&c, at_sec(1)));
        assert_eq!(book.due(&c, &checkpoint(1), at_sec(1)), Due::Write);
    }

    #[test]
    fn what_another_leader_stored_counts_as_stored() {
        let mut book = HistoryBook::new(Duration::from_secs(300), 5);
        let job = JobKey::new("ml", "ft");
        book.stored.insert(job.clone(), Stored { at: at_sec(100), content: 7 });
        assert!(!book.may_write(&job, at_sec(200)));
        assert!(book.may_write(&job, at_sec(400)));
        book.read(&job, Some(&crate::sources::trainjobs::read_checkpoint("not a checkpoint".into())));
        assert!(book.may_write(&job, at_sec(400)), "an unreadable annotation changes nothing");
        book.due_now(&job);
        assert!(book.may_write(&job, at_sec(101)), "a firing does not wait for the interval");
    }
}
