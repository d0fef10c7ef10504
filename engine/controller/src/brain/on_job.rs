//! A TrainJob's report, deletion and the end of the TrainJob list. An exempt job is forgotten and
//! announced once; an unreadable one is counted and logged once per message; a readable one is judged,
//! after its recorded suspension, verdict and history checkpoint (typed by the source) are noted and the
//! history restored on its first sight.

use std::time::Instant;

use tracing::{info, warn};
use trainwarden_core::describe::Notice;
use trainwarden_core::{JobKey, JobSnapshot, SampleSource, Timestamp};

use super::Brain;
use crate::messages::{AbandonReason, JobInput, StoredCheckpoint, TrainJobEvent, Work};
use crate::metrics::{HistoryResult, InvalidInput, ProgressSource, ProgressSourceLabels};

impl Brain {
    /// A TrainJob appeared or changed.
    pub(super) fn on_job(&mut self, job: JobInput, now: Timestamp) {
        self.metrics.input_lag_seconds.observe(job.received.elapsed().as_secs_f64());
        if let Some(g) = &mut self.gauges {
            g.touch(&job.key);
        }
        if job.exempt {
            self.on_exempt_job(job, now);
            return;
        }
        self.exempt.remove(&job.key);
        let snapshot = match job.snapshot {
            Ok(snapshot) => snapshot,
            Err(message) => {
                // Not read at all: what its last readable report had is no longer current.
                self.unknown_now.remove(&job.key);
                self.metrics.invalid(InvalidInput::TrainjobProgress);
                if self.unreadable.get(&job.key) != Some(&message) {
                    warn!(job = %job.key, error = %message, "cannot read the TrainJob's progress");
                    self.unreadable.insert(job.key, message);
                }
                return;
            }
        };
        self.unreadable.remove(&job.key);
        match job.suspension {
            Some(f) => {
                let kueue = self.kueue_suspends && snapshot.kueue_queue.is_some();
                self.found.insert(job.key.clone(), (f, kueue));
            }
            None => {
                self.found.remove(&job.key);
            }
        }
        let reported =
            snapshot.sample.as_ref().and_then(|s| trainwarden_core::ReportedCheckpoint::of(&s.metrics));
        let seen = self.requests.read(
            &job.key,
            job.uid.as_deref(),
            job.checkpoint.as_ref(),
            reported,
            snapshot.phase,
        );
        if seen.wake {
            self.ledger.wake_job(&job.key, now);
        }
        self.surface_unknown_fields(&snapshot);
        self.verdicts.read(&job.key, &job.verdict, job.uid.as_deref(), self.leading);
        self.restore_history(&job.key, job.history.as_ref(), job.uid.as_deref(), now);
        let started = Instant::now();
        let queue = self.queue_of(snapshot.kueue_queue.as_deref(), &job.key, job.uid.as_deref());
        // The demand first, so a known job is judged once, on its new queue's demand; a job seen for the first
        // time gets it after (once it exists), judged again then.
        self.evaluator.record_queue(&job.key, queue, now);
        self.evaluator.observe(snapshot, now, &mut self.events);
        self.evaluator.observe_queue(&job.key, queue, now, &mut self.events);
        self.expect_savings(&job.key);
        self.metrics.evaluations.inc();
        self.metrics.evaluation_seconds.observe(started.elapsed().as_secs_f64());
        if let Some(uid) = &job.uid {
            self.save_history(&job.key, uid, now);
        }
    }

    /// An exempt job: no policy applies. Forgotten (and its owed actions with it) and announced once.
    pub(super) fn on_exempt_job(&mut self, job: JobInput, now: Timestamp) {
        if job.snapshot.is_ok() {
            self.verdicts.read(&job.key, &job.verdict, job.uid.as_deref(), self.leading);
        }
        self.verdicts.clear(&job.key);
        self.unknown_now.remove(&job.key);
        if self.exempt.insert(job.key.clone()) {
            self.evaluator.forget_job(&job.key, now, &mut self.events);
            self.abandon(AbandonReason::JobExempt, |i| i.job == job.key);
            self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                job: job.key.clone(),
                notice: Notice::exempt(crate::EXEMPT_ANNOTATION),
                // Its own: the loop keeps no uid of exempt jobs.
                uid: job.uid.clone(),
            })));
        }
    }

    /// A TrainJob was deleted: everything kept for it goes.
    pub(super) fn on_job_gone(&mut self, key: JobKey, now: Timestamp) {
        self.abandon(AbandonReason::JobDeleted, |i| i.job == key);
        self.found.remove(&key);
        if let Some(g) = &mut self.gauges {
            g.touch(&key);
        }
        self.history.forget(&key);
        self.verdicts.forget(&key);
        self.requests.forget(&key);
        self.exempt.remove(&key);
        self.unreadable.remove(&key);
        self.unknown_fields.remove(&key);
        self.unknown_now.remove(&key);
        self.evaluator.forget_job(&key, now, &mut self.events);
    }

    /// The TrainJobs were listed: from now on the controller is ready, the rule memories of jobs that no
    /// longer exist are dropped, and a suspension found uncounted is counted if this replica leads.
    pub(super) fn on_jobs_listed(&mut self) {
        if !self.jobs_listed {
            self.jobs_listed = true;
            let dropped = self.evaluator.drop_unclaimed_memories();
            info!(jobs = self.evaluator.job_count(), dropped_memories = dropped, "TrainJobs listed; ready");
            if std::mem::take(&mut self.count_found_when_listed) {
                self.count_found();
            }
        }
    }

    /// A job seen for the first time in this run gets the history its TrainJob carries (see
    /// [`Evaluator::restore_history`](trainwarden_core::Evaluator::restore_history)); what was stored there is noted either way, so the write schedule
    /// goes on from it.
    pub(super) fn restore_history(
        &mut self,
        key: &JobKey,
        checkpoint: Option<&StoredCheckpoint>,
        uid: Option<&str>,
        now: Timestamp,
    ) {
        self.history.read(key, checkpoint);
        let (Some(StoredCheckpoint { text, .. }), Some(uid)) = (checkpoint, uid) else { return };
        if self.evaluator.job(key).is_some() {
            return; // judged in this run already: what this run recorded is newer
        }
        match self.evaluator.restore_history(key, text, uid, now) {
            Ok(r) => {
                self.metrics.history(HistoryResult::Restored);
                info!(job = %key, samples = r.samples, metrics = r.metrics, detectors = r.detectors, detectors_ignored = r.detectors_ignored, "history restored from the TrainJob");
            }
            Err(refused) => {
                self.metrics.history(HistoryResult::Refused);
                warn!(job = %key, annotation = crate::HISTORY_ANNOTATION, reason = %refused, "history checkpoint not restored");
            }
        }
    }

    /// Keys of a job's progress report that its format does not define (a misspelt `trainMetricz`): the job
    /// is evaluated without them, as before, but not silently: each is counted in
    /// `trainwarden_unknown_progress_fields{source}`, logged and named in a warning Event
    /// (`UnknownProgressFields`), once per job and key.
    pub(super) fn surface_unknown_fields(&mut self, snapshot: &JobSnapshot) {
        if snapshot.unknown_fields.is_empty() {
            self.unknown_now.remove(&snapshot.key);
            return;
        }
        // A few paths say what is wrong; a report made of nothing but unknown keys need not fill the status.
        let paths = snapshot.unknown_fields.iter().take(10).map(|e| e.path.clone()).collect();
        self.unknown_now.insert(snapshot.key.clone(), paths);
        let seen = self.unknown_fields.entry(snapshot.key.clone()).or_default();
        let new: Vec<String> = snapshot
            .unknown_fields
            .iter()
            .filter(|e| seen.insert(e.path.clone()))
            .map(ToString::to_string)
            .collect();
        if new.is_empty() {
            return;
        }
        let source = match snapshot.sample.as_ref().map(|s| s.source) {
            Some(SampleSource::Annotation) => ProgressSource::Annotation,
            _ => ProgressSource::TrainerStatus,
        };
        self.metrics
            .unknown_progress_fields
            .get_or_create(&ProgressSourceLabels { source })
            .inc_by(new.len() as u64);
        let fields = new.join("; ");
        warn!(job = %snapshot.key, %fields, "the TrainJob's progress report has fields its format does not define");
        self.record_event(&snapshot.key, Notice::unknown_progress_fields(&fields));
    }
}
