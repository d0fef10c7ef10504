//! The evaluation loop: one task owns the [`Evaluator`] and the per-policy books, reads [`Input`]s and the
//! clock, and emits [`Work`] for the executor and [`StatusUpdate`]s for the status writer. No I/O here
//! beyond those channels, so [`Brain`] itself is tested with plain `#[test]`s: a policy's receivers go to the
//! executor as [`Work::Receivers`] (configuring them starts delivery tasks), the per-policy books live in
//! `books` and the status projection in `status`.
//!
//! Restart safety: a policy's status carries its rule memories (`status.ruleStates`). The first time a
//! policy is seen the memories are handed to [`Evaluator::restore`] — before any TrainJob is observed, since
//! the TrainJob watch starts only once the policies are listed — so a pending `for` keeps its original
//! deadline and a firing rule does not fire (and act) again. Memories of jobs that vanished meanwhile are
//! dropped once the TrainJobs are listed.
//!
//! History: the leader keeps each job's history checkpoint on its TrainJob ([`crate::HISTORY_ANNOTATION`],
//! schedule in `history`), and a replica that sees a job for the first time restores it from there before
//! the job's first report of this run is observed, so a plateau's patience runs on across a restart or a
//! hand-over. A graceful stop flushes the checkpoints that changed ([`Input::FlushHistory`]). The
//! annotation is taken out of the snapshot the evaluator keeps, and the watch event a write
//! causes carries the report already recorded, so it is a duplicate: no new sample, no new write.
//!
//! Owed actions: every intent issued stays in the [`ledger`] until an outcome settles it; failures come back
//! as timers (capped exponential backoff), "not leader" parks them until [`Brain::lead`] hands them over.
//!
//! Per-job gauges (`--job-metrics`): after each step the series of the jobs it touched (a report, a rule
//! transition, a deletion; every exported job when a policy changed) are brought in line with the
//! evaluator in `gauges`, which remembers what it exported so that nothing outlives its job, rule or policy.

mod books;
mod clock;
mod counted;
mod gauges;
mod history;
pub mod ledger;
mod status;
mod verdicts;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};
use trainwarden_core::compile;
use trainwarden_core::{ActionSpec, PolicyId, PolicyKind};
use trainwarden_core::{EngineConfig, Evaluator, Event, SnoozeChange, TransitionKind};
use trainwarden_core::{JobKey, JobSnapshot, NormalizeError, QueueDemand, SampleSource, Timestamp};
use trainwarden_kube::ProgressPolicyStatus;

use crate::messages::{
    ActionResult, FoundSuspension, HistorySave, Input, LocalQueueRef, Outcome, PolicyInput, ReceiverChange,
    SourceHealth, StatusUpdate, StoredCheckpoint, TrainJobEvent, VerdictSave, Work,
};
use crate::metrics::{
    DroppedWork, HistoryResult, InvalidInput, LimitLabels, Metrics, ModeLabel, ModeLabels, ProgressSource,
    ProgressSourceLabels,
};
use crate::runtime::config::ControllerConfig;
use books::PolicyBook;
use gauges::JobGauges;
use history::{Due, HistoryBook};
use ledger::Ledger;
use trainwarden_notify::{JobProgress, Notifier};
use verdicts::VerdictBook;

/// The evaluation loop's state: the [`Evaluator`], per-policy books for status, the last step's work. No
/// I/O: it reads inputs and the clock and leaves [`Work`] and status updates for the caller to send.
pub struct Brain {
    evaluator: Evaluator,
    books: HashMap<PolicyId, PolicyBook>,
    policy_kinds_listed: HashSet<PolicyKind>,
    jobs_listed: bool,
    exempt: HashSet<JobKey>,
    unreadable: HashMap<JobKey, NormalizeError>,
    /// Paths of the unknown progress fields already reported per job (see [`Brain::surface_unknown_fields`]).
    unknown_fields: HashMap<JobKey, HashSet<String>>,
    /// The unknown progress fields of each job's latest report, for the policies' `ProgressUnderstood`
    /// condition (a job that fixes its report leaves).
    unknown_now: BTreeMap<JobKey, Vec<String>>,
    events: Vec<Event>,
    /// Output of the last step, for the caller to send.
    pub work: Vec<Work>,
    metrics: Arc<Metrics>,
    last_sent: HashMap<PolicyId, ProgressPolicyStatus>,
    removed: Vec<PolicyId>,
    /// Intents issued and not yet settled (see [`ledger`]). While a firing has an owed intent its memory is
    /// persisted as "pending, due now" rather than "firing", so a controller that dies before performing
    /// it fires again after the restart (same intent ids, so an action that did happen is recognised)
    /// instead of remembering an action that never happened; a live follower holds the same intents and
    /// performs them when it leads.
    ledger: Ledger,
    /// Whether this replica leads now (its executor performs; otherwise the leader's status is the
    /// authority for totals and settles this replica's owed intents).
    leading: bool,
    /// Read for its counters (status, metrics). Receiver changes go to it through the executor (every
    /// replica, so a new leader is ready); delivery happens on the leader only.
    notifier: Option<Notifier>,
    /// When each job's history checkpoint was last stored and is next due.
    history: HistoryBook,
    /// The per-job gauges on `/metrics`; `None` with `--job-metrics=false`.
    gauges: Option<JobGauges>,
    /// Each job's verdict annotation: what it should say and what the TrainJob shows.
    verdicts: VerdictBook,
    /// `--prometheus-url` was given: GPU readings will come.
    gpu_configured: bool,
    /// The GPU poll's latest health, once it reported.
    gpu_health: Option<SourceHealth>,
    /// `--kueue-queues`: Kueue's queues will be read.
    queue_configured: bool,
    /// The Kueue watch's latest health, once it reported.
    queue_health: Option<SourceHealth>,
    /// The demand behind every known LocalQueue, as last sent.
    queues: Arc<crate::messages::QueueDemands>,
    /// The ProgressPolicyExceptions were listed (jobs are judged only after that).
    exceptions_listed: bool,
    /// Exceptions that cannot be read, and why (reported in the status of the policies they name).
    invalid_exceptions: BTreeMap<trainwarden_core::ExceptionRef, (String, Vec<String>)>,
    /// The suspension each TrainJob records (see [`FoundSuspension`]), and whether it went through Kueue.
    found: HashMap<JobKey, (FoundSuspension, bool)>,
    /// `--kueue`: a Kueue-managed job's suspension is its Workload's deactivation.
    kueue_suspends: bool,
    /// The suspensions found on TrainJobs are to be counted once the TrainJobs are listed (this replica
    /// became leader before that).
    count_found_when_listed: bool,
}

impl Brain {
    /// A brain with no policies or jobs yet, re-evaluating on `config.eval_interval` (at least 1 s).
    pub fn new(config: &ControllerConfig, metrics: Arc<Metrics>, notifier: Option<Notifier>) -> Self {
        let engine = EngineConfig {
            eval_interval: trainwarden_core::PolicyDuration::from_secs(config.eval_interval.as_secs().max(1)),
            max_snooze: trainwarden_core::PolicyDuration::from_millis(
                u64::try_from(config.max_snooze.as_millis()).unwrap_or(u64::MAX),
            ),
            max_actions_per_hour: config.max_actions_per_hour,
            ..EngineConfig::default()
        };
        let gauges = metrics.job.clone().map(JobGauges::new);
        Brain {
            gauges,
            evaluator: Evaluator::new(engine),
            books: HashMap::new(),
            policy_kinds_listed: HashSet::new(),
            jobs_listed: false,
            exempt: HashSet::new(),
            unreadable: HashMap::new(),
            unknown_fields: HashMap::new(),
            unknown_now: BTreeMap::new(),
            events: Vec::new(),
            work: Vec::new(),
            metrics,
            last_sent: HashMap::new(),
            removed: Vec::new(),
            ledger: Ledger::default(),
            leading: false,
            notifier,
            history: HistoryBook::new(config.history_interval, config.history_writes_per_second),
            verdicts: VerdictBook::default(),
            gpu_configured: config.gpu_metrics.is_some(),
            gpu_health: None,
            queue_configured: config.kueue_queues,
            queue_health: None,
            queues: Arc::default(),
            exceptions_listed: false,
            invalid_exceptions: BTreeMap::new(),
            found: HashMap::new(),
            kueue_suspends: config.kueue,
            count_found_when_listed: false,
        }
    }

    /// The demand behind a job's LocalQueue (`queue`, in the job's namespace), less the job's own pending
    /// Workload (`uid`: the job's); `None` when the job is not Kueue's or its LocalQueue is not known.
    fn queue_of(&self, queue: Option<&str>, job: &JobKey, uid: Option<&str>) -> Option<QueueDemand> {
        self.queues.for_job(&LocalQueueRef::new(job.namespace.as_str(), queue?), uid)
    }

    /// Every Kueue-managed job is given its LocalQueue's demand, and judged again where it changed.
    fn judge_queues(&mut self, now: Timestamp) {
        let started = Instant::now();
        let queued: Vec<(JobKey, Option<QueueDemand>)> = self
            .evaluator
            .job_keys()
            .filter_map(|key| {
                let q = self.evaluator.job(key)?.snapshot.kueue_queue.as_deref()?;
                let uid = self.history.uid_of(key);
                Some((key.clone(), self.queue_of(Some(q), key, uid.as_deref())))
            })
            .collect();
        for (key, demand) in queued {
            if !self.exempt.contains(&key) {
                self.evaluator.observe_queue(&key, demand, now, &mut self.events);
            }
        }
        self.metrics.evaluation_seconds.observe(started.elapsed().as_secs_f64());
    }

    /// The evaluator, for reading its policies, jobs and timers.
    pub fn evaluator(&self) -> &Evaluator {
        &self.evaluator
    }

    /// Both policy kinds and the exceptions have been listed (the TrainJob watch may start).
    pub fn policies_listed(&self) -> bool {
        self.exceptions_listed && PolicyKind::ALL.iter().all(|kind| self.policy_kinds_listed.contains(kind))
    }

    /// The TrainJobs have been listed once: from then on the controller reports ready (`/readyz`).
    pub fn jobs_listed(&self) -> bool {
        self.jobs_listed
    }

    /// Handles one input at `now`; the resulting work is in [`Brain::work`].
    pub fn handle(&mut self, input: Input, now: Timestamp) {
        match input {
            Input::Policy(p) => self.apply_policy(*p, now),
            Input::PolicyGone(key) => {
                self.abandon(|i| i.policy.id() == key);
                if let Some(g) = &mut self.gauges {
                    g.touch_all();
                }
                self.verdicts.touch_all();
                if let Some(book) = self.books.remove(&key)
                    && let Some(reference) = book.reference
                {
                    self.evaluator.remove_policy(&reference, now, &mut self.events);
                    if self.notifier.is_some() {
                        self.work.push(Work::Receivers(ReceiverChange::Remove(reference)));
                    }
                }
                self.last_sent.remove(&key);
                self.removed.push(key);
            }
            Input::PoliciesListed(kind) => {
                self.policy_kinds_listed.insert(kind);
            }
            Input::Exception(input) => match input.compiled {
                Ok(exception) => {
                    self.invalid_exceptions.remove(&input.key);
                    info!(exception = %input.key, expires = %exception.expires, "exception applied");
                    self.evaluator.upsert_exception(exception, now, &mut self.events);
                    self.verdicts.touch_all();
                }
                Err(message) => {
                    // An edit that broke it withdraws the version before: what cannot be read is not honoured.
                    warn!(exception = %input.key, error = %message, "invalid exception: not honoured");
                    self.metrics.invalid(InvalidInput::Exception);
                    self.evaluator.remove_exception(&input.key, now, &mut self.events);
                    self.invalid_exceptions.insert(input.key, (message, input.policy_names));
                    self.verdicts.touch_all();
                }
            },
            Input::ExceptionGone(key) => {
                info!(exception = %key, "exception deleted");
                self.invalid_exceptions.remove(&key);
                self.evaluator.remove_exception(&key, now, &mut self.events);
                self.verdicts.touch_all();
            }
            Input::ExceptionsListed => self.exceptions_listed = true,
            Input::Namespace { name, labels } => {
                self.evaluator.set_namespace_labels(&name, labels);
                if let Some(g) = &mut self.gauges {
                    g.touch_all();
                }
                self.verdicts.touch_all();
            }
            Input::Job(job) => {
                let job = *job;
                self.metrics.input_lag_seconds.observe(job.received.elapsed().as_secs_f64());
                if let Some(g) = &mut self.gauges {
                    g.touch(&job.key);
                }
                if job.exempt {
                    if job.snapshot.is_ok() {
                        self.verdicts.read(&job.key, &job.verdict, job.uid.as_deref(), self.leading);
                    }
                    self.verdicts.clear(&job.key);
                    self.unknown_now.remove(&job.key);
                    if self.exempt.insert(job.key.clone()) {
                        self.evaluator.forget_job(&job.key, now, &mut self.events);
                        self.abandon(|i| i.job == job.key);
                        self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                            job: job.key.clone(),
                            warning: false,
                            reason: "Exempt".into(),
                            action: "Evaluate".into(),
                            note: format!(
                                "annotated {}=true: no progress policy applies to this TrainJob",
                                crate::EXEMPT_ANNOTATION
                            ),
                            // Its own: the loop keeps no uid of exempt jobs.
                            uid: job.uid.clone(),
                        })));
                    }
                } else {
                    self.exempt.remove(&job.key);
                    match job.snapshot {
                        Ok(snapshot) => {
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
                            self.surface_unknown_fields(&snapshot);
                            self.verdicts.read(&job.key, &job.verdict, job.uid.as_deref(), self.leading);
                            self.restore_history(&job.key, job.history.as_ref(), job.uid.as_deref(), now);
                            let started = Instant::now();
                            let queue =
                                self.queue_of(snapshot.kueue_queue.as_deref(), &job.key, job.uid.as_deref());
                            // The demand first, so a known job is judged once, on its new queue's demand; a
                            // job seen for the first time gets it after (once it exists), judged again then.
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
                        Err(message) => {
                            // Not read at all: what its last readable report had is no longer current.
                            self.unknown_now.remove(&job.key);
                            self.metrics.invalid(InvalidInput::TrainjobProgress);
                            if self.unreadable.get(&job.key) != Some(&message) {
                                warn!(job = %job.key, error = %message, "cannot read the TrainJob's progress");
                                self.unreadable.insert(job.key, message);
                            }
                        }
                    }
                }
            }
            Input::JobGone(key) => {
                self.abandon(|i| i.job == key);
                self.found.remove(&key);
                if let Some(g) = &mut self.gauges {
                    g.touch(&key);
                }
                self.history.forget(&key);
                self.verdicts.forget(&key);
                self.exempt.remove(&key);
                self.unreadable.remove(&key);
                self.unknown_fields.remove(&key);
                self.unknown_now.remove(&key);
                self.evaluator.forget_job(&key, now, &mut self.events);
            }
            Input::JobsListed => {
                if !self.jobs_listed {
                    self.jobs_listed = true;
                    let dropped = self.evaluator.drop_unclaimed_memories();
                    info!(
                        jobs = self.evaluator.job_count(),
                        dropped_memories = dropped,
                        "TrainJobs listed; ready"
                    );
                    if std::mem::take(&mut self.count_found_when_listed) {
                        self.count_found();
                    }
                }
            }
            Input::GpuReadings(readings) => {
                let started = Instant::now();
                for (key, sample) in readings {
                    // Only jobs the TrainJob watch delivered: a reading never creates a job.
                    if self.exempt.contains(&key) || self.evaluator.job(&key).is_none() {
                        continue;
                    }
                    if let Some(g) = &mut self.gauges {
                        g.touch(&key);
                    }
                    self.evaluator.observe_gpu(&key, &sample, now, &mut self.events);
                    self.metrics.evaluations.inc();
                }
                self.metrics.evaluation_seconds.observe(started.elapsed().as_secs_f64());
            }
            Input::GpuHistory(steps) => {
                let mut touched = BTreeSet::new();
                for (key, sample) in steps.into_iter().flatten() {
                    if self.exempt.contains(&key) || self.evaluator.job(&key).is_none() {
                        continue;
                    }
                    self.evaluator.record_gpu(&key, &sample, now);
                    touched.insert(key);
                }
                for key in touched {
                    if let Some(g) = &mut self.gauges {
                        g.touch(&key);
                    }
                    self.evaluator.tick_job(&key, now, &mut self.events);
                    self.metrics.evaluations.inc();
                }
            }
            Input::GpuMetrics(health) => self.gpu_health = Some(health),
            Input::QueueDemand(queues) => {
                self.queues = queues;
                self.judge_queues(now);
            }
            Input::KueueQueues(health) => {
                if !health.healthy && !self.queues.queues.is_empty() {
                    // What was known is no longer current: rules read the queue as unknown, not as the
                    // demand of whenever the watch last worked.
                    self.queues = Arc::default();
                    self.judge_queues(now);
                }
                self.queue_health = Some(health);
            }
            Input::Outcome(o) => self.record_outcome(*o, now),
            Input::FlushHistory(done) => self.flush_history(done, now),
            Input::HistorySaved { job, content, at, stored } => {
                self.history.saved(&job, content, at, stored, now);
            }
        }
        self.metrics.jobs.set(self.evaluator.job_count() as i64);
        self.drain_events();
        self.sync_gauges();
        self.sync_verdicts(now);
        self.metrics.actions_owed.set(self.ledger.len() as i64);
    }

    /// Brings the verdicts of the jobs this step touched in line with the evaluator; on the leader, sends the
    /// ones the TrainJobs do not show yet (or again, when a write went unanswered).
    fn sync_verdicts(&mut self, now: Timestamp) {
        let exempt = &self.exempt;
        self.verdicts.sync(&self.evaluator, |job| !exempt.contains(job));
        if self.leading {
            for (job, text, uid) in self.verdicts.due(now) {
                self.work.push(Work::SaveVerdict(Box::new(VerdictSave { job, text, uid })));
            }
        }
    }

    /// Brings the per-job gauges of the jobs this step touched in line with the evaluator.
    fn sync_gauges(&mut self) {
        let (Some(gauges), exempt) = (&mut self.gauges, &self.exempt) else { return };
        if gauges.all_touched() {
            // After a policy or namespace change, selection is otherwise stale until each job's next
            // evaluation: a finished job would keep (or never get) its series.
            self.evaluator.refresh_selections();
        }
        gauges.sync(&self.evaluator, |job| !exempt.contains(job));
    }

    /// A job seen for the first time in this run gets the history its TrainJob carries (see
    /// [`Evaluator::restore_history`]); what was stored there is noted either way, so the write schedule
    /// goes on from it.
    fn restore_history(
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

    /// On the leader: the job's checkpoint goes to the executor when it is due (see `history`). A rule of
    /// the job that starts firing on this report makes it due at once, so the detector memories stored with
    /// the job agree with the firing the policy status remembers.
    fn save_history(&mut self, key: &JobKey, uid: &str, now: Timestamp) {
        self.history.note_uid(key, uid);
        self.write_history(key, uid, now, false);
    }

    /// [`Brain::save_history`]'s write, or a retry (`again`: built even with no new sample).
    fn write_history(&mut self, key: &JobKey, uid: &str, now: Timestamp, again: bool) {
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
    fn flush_history(&mut self, done: oneshot::Sender<()>, now: Timestamp) {
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

    /// Keys of a job's progress report that its format does not define (a misspelt `trainMetricz`): the job
    /// is evaluated without them, as before, but not silently: each is counted in
    /// `trainwarden_unknown_progress_fields{source}`, logged and named in a warning Event
    /// (`UnknownProgressFields`), once per job and key.
    fn surface_unknown_fields(&mut self, snapshot: &JobSnapshot) {
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
        self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
            job: snapshot.key.clone(),
            warning: true,
            reason: "UnknownProgressFields".into(),
            action: "Evaluate".into(),
            note: format!("progress read without the fields its format does not define: {fields}"),
            uid: None,
        })));
    }

    /// The work of the last step, on its way to the executor: Events without a uid get the one the TrainJob's
    /// latest report carried, so the executor need not read the object to name it.
    fn outgoing(&mut self) -> Vec<Work> {
        let mut work = std::mem::take(&mut self.work);
        for item in &mut work {
            if let Work::RecordEvent(event) = item
                && event.uid.is_none()
            {
                event.uid = self.history.uid_of(&event.job);
            }
        }
        work
    }

    /// Runs due timers at `now`: the evaluator's, and failed actions whose backoff has passed.
    pub fn tick(&mut self, now: Timestamp) {
        let started = Instant::now();
        self.evaluator.tick(now, &mut self.events);
        self.metrics.evaluations.inc();
        self.metrics.evaluation_seconds.observe(started.elapsed().as_secs_f64());
        self.drain_events();
        self.sync_gauges();
        self.sync_verdicts(now);
        let (due, dropped) = {
            let (ledger, wanted) = self.ledger_and_wanted();
            ledger.take_due(now, wanted)
        };
        self.dropped_owed(dropped);
        for intent in due {
            debug!(job = %intent.job, rule = %intent.rule, id = %intent.id, "retrying an action");
            self.work.push(Work::Act(Box::new(intent)));
        }
        self.metrics.actions_owed.set(self.ledger.len() as i64);
        // History checkpoints that were not stored (failed, deferred, sent while not leading): a stalled job
        // sends no sample that would try again.
        if self.leading {
            for job in self.history.retries_due(now) {
                if let Some(uid) = self.history.uid_of(&job) {
                    self.write_history(&job, &uid, now, true);
                }
            }
        }
    }

    /// When the next timer is due (a `for` ending, a stall deadline, a window edge, a failed action's or
    /// history checkpoint's retry); `None`: no timer is set.
    pub fn next_tick(&self) -> Option<Timestamp> {
        let (history, verdicts) =
            if self.leading { (self.history.next_retry(), self.verdicts.next_retry()) } else { (None, None) };
        [self.evaluator.next_tick(), self.ledger.next_due(), history, verdicts].into_iter().flatten().min()
    }

    /// This replica starts or stops leading. On becoming leader every owed intent it inherited (parked
    /// while it followed, or due later) is re-issued first, before anything else this step produces.
    pub fn lead(&mut self, leading: bool) {
        if leading == self.leading {
            return;
        }
        self.leading = leading;
        if !leading {
            info!("not leading: owed actions wait for the next leader");
            return;
        }
        self.metrics.handovers.inc();
        self.verdicts.lead();
        // Before the inherited intents: those found done are then known counted (see `counted`).
        if self.jobs_listed {
            self.count_found();
        } else {
            self.count_found_when_listed = true;
        }
        let (inherited, dropped) = {
            let (ledger, wanted) = self.ledger_and_wanted();
            ledger.take_inherited(wanted)
        };
        self.dropped_owed(dropped);
        info!(inherited = inherited.len(), owed = self.ledger.len(), "leading: taking over the owed actions");
        self.metrics.actions_inherited.inc_by(inherited.len() as u64);
        let mut first: Vec<Work> = inherited.into_iter().map(|i| Work::Act(Box::new(i))).collect();
        first.append(&mut self.work);
        self.work = first;
    }

    /// Counts the suspensions TrainJobs record that the policies' statuses do not (their leader was lost
    /// before its status counted them): on taking over, once the TrainJobs are listed.
    fn count_found(&mut self) {
        let found: Vec<(JobKey, FoundSuspension, bool)> =
            self.found.iter().map(|(k, (f, kueue))| (k.clone(), f.clone(), *kueue)).collect();
        let mut counted = 0;
        for (job, f, kueue) in found {
            let policy = self.books.iter().find_map(|(id, b)| {
                let r = b.reference.as_ref()?;
                (format!("{} {r}", r.kind) == f.policy).then(|| id.clone())
            });
            let Some(policy) = policy else { continue };
            let owed =
                self.books.get(&policy).and_then(|b| b.counted.as_ref()).is_some_and(|c| c.owes(&f.id, f.at));
            if !owed {
                continue;
            }
            info!(job = %job, rule = %f.rule, id = %f.id, "suspension found recorded and not counted by the status (its leader was lost before its status counted it): counting it");
            counted += 1;
            self.tally(books::Tally {
                id: &f.id,
                policy: &policy,
                job: &job,
                rule: &f.rule,
                action: if kueue {
                    crate::messages::ExecutedAction::Deactivate
                } else {
                    crate::messages::ExecutedAction::Suspend
                },
                mode: trainwarden_core::Mode::Enforce,
                result: ActionResult::AlreadyDone,
                at: f.at,
                saved: f.gpu_hours.map(|h| (h, f.dollars)),
            });
        }
        if counted > 0 {
            self.metrics.actions_found_uncounted.inc_by(counted);
        }
    }

    /// Whether this replica leads (as the brain last heard).
    pub fn leading(&self) -> bool {
        self.leading
    }

    /// The ledger and a test of whether an owed intent is still wanted: its policy is loaded, its job is not
    /// exempt nor snoozed (the snooze's end re-issues what still fires, with new ids) and its rule still
    /// fires for the job.
    fn ledger_and_wanted(&mut self) -> (&mut Ledger, impl Fn(&trainwarden_core::ActionIntent) -> bool + '_) {
        let (books, exempt, evaluator) = (&self.books, &self.exempt, &self.evaluator);
        let wanted = move |i: &trainwarden_core::ActionIntent| {
            let Some(reference) = books.get(&i.policy.id()).and_then(|b| b.reference.as_ref()) else {
                return false;
            };
            !exempt.contains(&i.job)
                && evaluator.snooze(&i.job).is_none()
                && evaluator.rule_state(&i.job, reference, &i.rule)
                    == Some(trainwarden_core::RuleState::Firing)
        };
        (&mut self.ledger, wanted)
    }

    fn dropped_owed(&mut self, dropped: Vec<trainwarden_core::ActionIntent>) {
        for i in &dropped {
            info!(job = %i.job, rule = %i.rule, id = %i.id, "owed action dropped: its rule no longer fires (or its job is snoozed)");
        }
        self.metrics.actions_abandoned.inc_by(dropped.len() as u64);
    }

    /// Forgets owed intents whose job or policy is gone (or exempt).
    fn abandon(&mut self, gone: impl Fn(&trainwarden_core::ActionIntent) -> bool) {
        let n = self.ledger.forget(gone);
        if n > 0 {
            info!(forgotten = n, "owed actions forgotten: their job or policy is gone");
            self.metrics.actions_abandoned.inc_by(n as u64);
        }
    }

    fn apply_policy(&mut self, p: PolicyInput, now: Timestamp) {
        let first_sight = !self.books.contains_key(&p.key);
        let book = self.books.entry(p.key.clone()).or_default();
        // Our own status writes come back as watch events; the spec (metadata.generation) did not change, so
        // there is nothing to compile again.
        let judged =
            book.reference.as_ref().is_some_and(|r| r.generation == p.generation) || book.error.is_some();
        if !first_sight
            && !self.leading
            && let Some(status) = &p.status
        {
            // The leader's status: its totals are the truth while it leads (a hand-over continues from
            // them), and the firings it persisted as settled settle this replica's owed intents.
            book.adopt(status, now);
            self.ledger.settle_from_status(&p.key, &status.rule_states);
        }
        if !first_sight && book.generation == p.generation && judged {
            return;
        }
        book.generation = p.generation;
        if first_sight {
            // What its status counts (none of it, for a new policy): see `counted`.
            book.counted = Some(counted::Counted::from_status(
                p.status.as_ref().and_then(|s| s.counted_actions.as_ref()),
                now,
            ));
        }
        if first_sight && let Some(status) = &p.status {
            // Continuity across restarts: savings, counts and the last action come back from status.
            book.adopt(status, now);
            book.conditions = status.conditions.clone();
        }
        let document = match p.document {
            Ok(d) => d,
            Err(e) => {
                book.error = Some(e.to_string());
                self.metrics.invalid(InvalidInput::Policy);
                return;
            }
        };
        match compile(&document, self.evaluator.scripts()) {
            Ok(compiled) => {
                let reference = compiled.reference.clone();
                info!(policy = %reference, generation = reference.generation, "policy loaded");
                if self.notifier.is_some() {
                    self.work.push(Work::Receivers(ReceiverChange::Configure {
                        policy: compiled.reference.clone(),
                        receivers: compiled.receivers.clone(),
                    }));
                }
                self.evaluator.upsert_policy(compiled, now, &mut self.events);
                if let Some(g) = &mut self.gauges {
                    g.touch_all();
                }
                self.verdicts.touch_all();
                if first_sight
                    && let Some(status) = p.status
                    && !status.rule_states.is_empty()
                {
                    info!(policy = %reference, memories = status.rule_states.len(), "restoring rule state");
                    self.evaluator.restore(&reference, status.rule_states);
                }
                book.reference = Some(reference);
                book.error = None;
                book.rule_errors.clear();
            }
            Err(errors) => {
                self.metrics.invalid(InvalidInput::Policy);
                warn!(policy = ?p.key, error = %errors, "invalid policy");
                book.error = Some(errors.to_string());
            }
        }
        self.metrics.policies.set(self.books.values().filter(|b| b.reference.is_some()).count() as i64);
    }

    fn drain_events(&mut self) {
        self.verdicts.transitions(&self.events);
        if let Some(g) = &mut self.gauges {
            for event in &self.events {
                if let Event::Transition { job, .. } = event {
                    g.touch(job);
                }
            }
        }
        self.drain_events_in_order();
        // A firing's actions that stop the job go last: a suspended job's rules are frozen, so if the
        // controller died after stopping the job but before its Events and notifications, those would never
        // be redone; done first, a crash before the suspension is redone whole (see `in_flight`).
        // The checkpoint taken at the firing goes after the stop: it records what was judged and changes
        // nothing, while the job's GPUs burn one API write longer if the suspension waits for it (measured at
        // 10,000 jobs: the suspension's p99 wait behind its job's earlier work was 0.5 s). A crash in between
        // loses that checkpoint only; the job is stopped and its rules frozen.
        let stops = |w: &Work| matches!(w, Work::Act(i) if matches!(i.action, ActionSpec::Suspend(_) | ActionSpec::Scale(_)));
        if self.work.iter().any(stops) {
            let stopped: HashSet<JobKey> =
                self.work.iter().filter(|w| stops(w)).filter_map(Work::job).cloned().collect();
            let (mut first, mut stopping, mut after) = (Vec::new(), Vec::new(), Vec::new());
            for w in self.work.drain(..) {
                if stops(&w) {
                    stopping.push(w);
                } else if matches!(&w, Work::SaveHistory(h) if stopped.contains(&h.job)) {
                    after.push(w);
                } else {
                    first.push(w);
                }
            }
            first.extend(stopping);
            first.extend(after);
            self.work = first;
        }
    }

    fn drain_events_in_order(&mut self) {
        let events = std::mem::take(&mut self.events);
        for event in events {
            // A notify to no receiver of its policy goes nowhere: it is refused below, not handed on.
            let unroutable = match &event {
                Event::Intent(i) => match &i.action {
                    ActionSpec::Notify(n) => {
                        !self.evaluator.policies().any(|p| p.reference == i.policy && p.has_receiver(&n.to))
                    }
                    _ => false,
                },
                _ => false,
            };
            if let Some(_notifier) = &self.notifier
                && !unroutable
                && matches!(
                    event,
                    Event::Intent(_) | Event::Transition { kind: TransitionKind::Resolved, .. }
                )
            {
                let job = match &event {
                    Event::Intent(i) => &i.job,
                    Event::Transition { job, .. } => job,
                    _ => unreachable!("matched above"),
                };
                let progress = self.evaluator.job(job).and_then(JobProgress::of);
                self.work.push(Work::Notify(Box::new(event.clone()), progress));
            }
            match event {
                Event::Intent(intent) => {
                    self.ledger.issue(&intent);
                    if let ActionSpec::Notify(n) = &intent.action
                        && unroutable
                    {
                        // Nothing would be sent: say so where people look instead of "queued".
                        let message = format!(
                            "notify {:?} sends nothing: the policy declares no such receiver (add spec.receivers)",
                            n.to
                        );
                        self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                            job: intent.job.clone(),
                            warning: true,
                            reason: "NotificationNotConfigured".into(),
                            action: "Notify".into(),
                            note: format!(
                                "{} {} rule {}: {message}",
                                intent.policy.kind, intent.policy, intent.rule
                            ),
                            uid: None,
                        })));
                        let at = intent.at;
                        self.record_outcome(Outcome::of(&intent, ActionResult::Refused, message), at);
                        continue;
                    }
                    self.work.push(Work::Act(Box::new(intent)));
                }
                Event::Transition { job, policy, rule, kind, reason, mode, .. } => {
                    let values = reason
                        .values
                        .iter()
                        .map(|(k, v)| format!("{k}={}", trainwarden_core::fmt_num(*v)))
                        .collect::<Vec<_>>()
                        .join(", ");
                    let values = if values.is_empty() { String::new() } else { format!(" [{values}]") };
                    let (warning, name) = match kind {
                        TransitionKind::Firing => {
                            self.metrics
                                .firings
                                .get_or_create(&ModeLabels { mode: ModeLabel(Some(mode)) })
                                .inc();
                            (true, "RuleFiring")
                        }
                        TransitionKind::Resolved => (false, "RuleResolved"),
                        TransitionKind::Pending | TransitionKind::Cleared => {
                            debug!(%job, %policy, rule, kind = kind.as_str(), "transition");
                            continue;
                        }
                    };
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning,
                        reason: name.into(),
                        action: "Evaluate".into(),
                        // A resolution says why first: the condition, the window, the job, the policy.
                        note: format!(
                            "{} {policy} rule {rule} {} [{}]: {}{}{values}",
                            policy.kind,
                            kind.as_str(),
                            mode.as_str(),
                            reason
                                .resolution
                                .map(|r| format!("{} (it fired: ", r.text()))
                                .unwrap_or_default(),
                            if reason.resolution.is_some() {
                                format!("{})", reason.summary)
                            } else {
                                reason.summary.clone()
                            }
                        ),
                        uid: None,
                    })));
                }
                Event::RuleError { at, job, policy, rule, message } => {
                    warn!(%job, %policy, rule, error = %message, "rule evaluation failed");
                    if let Some(book) = self.books.get_mut(&policy.id()) {
                        book.note_rule_error(&rule, &job, &message, at);
                    }
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: true,
                        reason: "RuleError".into(),
                        action: "Evaluate".into(),
                        note: format!("{} {policy} rule {rule}: {message}", policy.kind),
                        uid: None,
                    })));
                }
                Event::Suppressed { job, policy, rule, action, until, .. } => {
                    debug!(%job, %policy, rule, action = action.as_str(), %until, "suppressed by cooldown");
                }
                Event::Held { job, policy, rule, actions, until, mode, exception, .. } => {
                    match &exception {
                        Some(e) => {
                            info!(%job, %policy, rule, %until, exception = %e, "actions held by an exception");
                        }
                        None => info!(%job, %policy, rule, %until, "actions held: the job is snoozed"),
                    }
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: false,
                        reason: "ActionsHeld".into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule} firing [{}]: {}",
                            policy.kind,
                            mode.as_str(),
                            trainwarden_core::replay::held_text(&actions, until, exception.as_ref())
                        ),
                        uid: None,
                    })));
                }
                Event::ExceptionEnded { job, policy, rule, exception, why, released, .. } => {
                    info!(%job, %policy, rule, exception = %exception, ?why, released, "an exception ended");
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: false,
                        reason: "ExceptionEnded".into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule}: {}",
                            policy.kind,
                            trainwarden_core::replay::exception_ended_text(&exception, why, released)
                        ),
                        uid: None,
                    })));
                }
                Event::Limited { job, policy, rule, actions, limit, retry, mode, .. } => {
                    info!(%job, %policy, rule, %limit, "actions held by a limit");
                    self.metrics.actions_limited.get_or_create(&LimitLabels { limit: limit.into() }).inc();
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: true,
                        reason: "ActionsLimited".into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule} firing [{}]: {}",
                            policy.kind,
                            mode.as_str(),
                            trainwarden_core::replay::limited_text(&actions, &limit, retry)
                        ),
                        uid: None,
                    })));
                }
                Event::Deferred { job, policy, rule, action, until, mode, .. } => {
                    info!(%job, %policy, rule, %until, action = action.as_str(), "action deferred by its grace");
                    // A policy that allows no snooze does not offer one.
                    let snoozable =
                        self.evaluator.policies().find(|p| p.reference == policy).is_none_or(|p| {
                            !p.max_snooze.is_some_and(trainwarden_core::PolicyDuration::is_zero)
                                && p.max_snoozes != Some(0)
                        });
                    let command = if snoozable {
                        format!(
                            "; to keep the job running for now: kubectl trainwarden snooze {} -n {} 4h",
                            job.name, job.namespace
                        )
                    } else {
                        "; this policy allows no snooze".to_string()
                    };
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning: true,
                        reason: "ActionDeferred".into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule} firing [{}]: {}{command}",
                            policy.kind,
                            mode.as_str(),
                            trainwarden_core::replay::deferred_text(action, until)
                        ),
                        uid: None,
                    })));
                }
                Event::Snooze { job, change, .. } => {
                    let (warning, reason) = match &change {
                        SnoozeChange::Started(_) => (false, "Snoozed"),
                        SnoozeChange::Ended { .. } => (false, "SnoozeEnded"),
                        SnoozeChange::PolicyCapped { .. } => (false, "SnoozeCapped"),
                        SnoozeChange::Invalid { .. } => (true, "InvalidSnooze"),
                    };
                    let note = trainwarden_core::replay::snooze_text(&change, &jiff::tz::TimeZone::UTC);
                    info!(%job, reason, %note, "snooze");
                    self.work.push(Work::RecordEvent(Box::new(TrainJobEvent {
                        job,
                        warning,
                        reason: reason.into(),
                        action: "Evaluate".into(),
                        note,
                        uid: None,
                    })));
                }
            }
        }
    }
}

/// The loop: inputs, timers and the status beat, one at a time.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    mut brain: Brain,
    config: ControllerConfig,
    mut inputs: mpsc::Receiver<Input>,
    work: mpsc::Sender<Work>,
    statuses: mpsc::Sender<StatusUpdate>,
    policies_synced: oneshot::Sender<()>,
    ready: watch::Sender<bool>,
    leadership: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) {
    let mut policies_synced = Some(policies_synced);
    brain.lead(*leadership.borrow());
    // `None` once leadership can no longer change (leader election off).
    let mut leadership = Some(leadership);
    // tokio's interval panics on zero.
    let mut beat = tokio::time::interval(config.status_interval.max(Duration::from_millis(10)));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut clock = clock::LoopClock::new(config.clock);
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
        }
        for item in brain.outgoing() {
            if work.send(item).await.is_err() {
                metrics.dropped(DroppedWork::ExecutorGone);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainwarden_core::parse_documents;
    use trainwarden_core::{ActionIntent, RuleMemory};
    use trainwarden_core::{JobSnapshot, Metric, ProgressSample, SampleSource};
    use trainwarden_core::{Mode, RuleState};
    use trainwarden_kube::status::{CONDITION_PROGRESS_UNDERSTOOD, CONDITION_READY};

    pub(super) fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_795_798_800 + s).unwrap()
    }

    fn brain() -> Brain {
        Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None)
    }

    /// `snapshot` as the TrainJob watch delivers it: the annotations trainwarden keeps on the job (its own,
    /// here) read into their typed fields.
    pub(crate) fn watched(snapshot: JobSnapshot, uid: Option<&str>) -> Input {
        let annotations = snapshot.annotations.clone();
        Input::Job(Box::new(crate::sources::trainjobs::read_job(
            snapshot.key.clone(),
            Ok(snapshot),
            &annotations,
            uid.map(str::to_string),
            std::time::Instant::now(),
        )))
    }

    /// What the executor reports after suspending ml/ft for rule `high` of ml/p at t(5): `gpu_hours` freed
    /// until t(3605), at $10 each.
    pub(super) fn suspend_outcome(intent: &str, mode: Mode, result: ActionResult, gpu_hours: f64) -> Outcome {
        Outcome {
            intent: intent.into(),
            policy: key(),
            job: JobKey::new("ml", "ft"),
            rule: "high".into(),
            action: crate::messages::ExecutedAction::Suspend,
            mode,
            result,
            message: String::new(),
            at: t(5),
            savings: Some(trainwarden_core::Savings {
                until: t(3605),
                basis: trainwarden_core::SavingsBasis::EstimatedEnd,
                gpus: 8.0,
                gpu_hours,
                dollars: Some(gpu_hours * 10.0),
            }),
        }
    }

    pub(super) fn key() -> PolicyId {
        PolicyId { kind: PolicyKind::Namespaced, namespace: Some("ml".into()), name: "p".into() }
    }

    pub(super) fn policy_input(rules: &str, status: Option<ProgressPolicyStatus>) -> Input {
        let yaml = format!(
            "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {{name: p, namespace: ml}}\n\
             spec:\n  mode: Enforce\n  samplingInterval: 1s\n  rules:\n{rules}"
        );
        let doc = parse_documents(&yaml, "test").unwrap().remove(0);
        Input::Policy(Box::new(PolicyInput { key: key(), generation: 1, document: Ok(doc), status }))
    }

    /// A TrainJob `namespace/name` whose `status.trainerStatus` is `status`, updated at `at`, as watched.
    pub(super) fn trainer_status(
        namespace: &str,
        name: &str,
        at: Timestamp,
        mut status: serde_json::Value,
    ) -> Input {
        status["lastUpdatedTime"] = serde_json::json!(at.to_string());
        let obj = serde_json::json!({
            "metadata": {"name": name, "namespace": namespace},
            "status": {"trainerStatus": status},
        });
        let snapshot = trainwarden_core::from_trainjob(&obj).unwrap();
        crate::brain::tests::watched(snapshot, None)
    }

    pub(super) fn job_reporting(loss: f64, at: Timestamp) -> Input {
        let mut snapshot = JobSnapshot::new(JobKey::new("ml", "ft"));
        snapshot.created_at = Some(t(-60));
        let mut sample = ProgressSample::empty(at, SampleSource::TrainerStatus);
        sample.metrics.push(Metric { name: "loss".into(), value: loss });
        snapshot.sample = Some(sample);
        crate::brain::tests::watched(snapshot, None)
    }

    fn actions(brain: &mut Brain) -> Vec<String> {
        brain
            .work
            .drain(..)
            .filter_map(|w| match w {
                Work::Act(i) => Some(format!("{} {}", i.action.kind(), i.job)),
                Work::RecordEvent(_)
                | Work::Notify(..)
                | Work::Receivers(_)
                | Work::SaveHistory(_)
                | Work::SaveVerdict(_)
                | Work::FlushHistory(..) => None,
            })
            .collect()
    }

    fn exception_input(name: &str, rules: &str, expires: Timestamp) -> Input {
        let spec = serde_json::json!({
            "exceptions": [{"policyName": "ml/p", "ruleNames": [rules]}],
            "expires": expires.to_string(),
        });
        let key = trainwarden_core::ExceptionRef { namespace: "ml".into(), name: name.into() };
        let compiled = trainwarden_core::compile_exception("ml", name, spec).map_err(|e| format!("{e:?}"));
        Input::Exception(Box::new(crate::messages::ExceptionInput {
            key,
            policy_names: vec!["ml/p".into()],
            compiled,
        }))
    }

    /// An exception holds a firing rule's suspension (the status lists it, with the job it holds), and on
    /// the second it expires the rule acts; an invalid one is listed as such; jobs wait for the exceptions'
    /// list.
    #[test]
    fn an_exception_holds_until_it_expires_and_the_status_says_so() {
        let mut b = brain();
        b.handle(Input::PoliciesListed(PolicyKind::Namespaced), t(0));
        b.handle(Input::PoliciesListed(PolicyKind::Cluster), t(0));
        assert!(!b.policies_listed(), "jobs wait for the exceptions too");
        b.handle(Input::ExceptionsListed, t(0));
        assert!(b.policies_listed());
        b.handle(
            policy_input(
                "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n",
                None,
            ),
            t(0),
        );
        b.handle(exception_input("eval", "high", t(60)), t(0));
        b.handle(job_reporting(2.0, t(5)), t(5));
        assert_eq!(actions(&mut b), Vec::<String>::new(), "held");
        let status = b.status_of(&key(), t(10));
        let e = &status.exceptions[0];
        assert_eq!(
            (e.name.as_str(), e.state.as_str(), e.rules.clone()),
            ("ml/eval", "Active", vec!["high".to_string()])
        );
        assert_eq!(e.holding, vec!["ml/ft".to_string()]);
        assert_eq!(status.jobs[0].held, vec!["high: held by ProgressPolicyException ml/eval".to_string()]);
        // The rule acts on the second the exception expires, with no new report.
        while let Some(next) = b.next_tick().filter(|n| *n <= t(61)) {
            b.tick(next);
        }
        assert_eq!(actions(&mut b), vec!["suspend ml/ft".to_string()]);
        let status = b.status_of(&key(), t(61));
        assert_eq!(status.exceptions[0].state, "Expired");
        assert!(status.exceptions[0].holding.is_empty());
        // An invalid one is listed under the policy it names, and honoured nowhere.
        let bad = Input::Exception(Box::new(crate::messages::ExceptionInput {
            key: trainwarden_core::ExceptionRef { namespace: "ml".into(), name: "bad".into() },
            policy_names: vec!["ml/p".into()],
            compiled: Err("spec.exceptions[0].policyName: bad".into()),
        }));
        b.handle(bad, t(62));
        let status = b.status_of(&key(), t(62));
        let listed: Vec<(&str, &str)> =
            status.exceptions.iter().map(|e| (e.name.as_str(), e.state.as_str())).collect();
        assert_eq!(listed, [("ml/eval", "Expired"), ("ml/bad", "Invalid")]);
    }

    /// A policy with GPU rules says whether they can see anything: not configured, failing, reading; a
    /// policy without them has no GpuMetrics condition. Readings of a job the TrainJob watch never delivered
    /// create nothing; readings of a known one are judged.
    #[test]
    fn gpu_rules_report_whether_gpu_metrics_are_read() {
        let gpu_condition = |b: &mut Brain| {
            b.status_of(&key(), t(30))
                .conditions
                .into_iter()
                .find(|c| c.type_ == trainwarden_kube::status::CONDITION_GPU_METRICS)
                .map(|c| (c.status, c.reason))
        };
        let rule = "    - {name: idle, uses: gpu_idle, with: {threshold: 10, duration: 10s}, actions: [{suspend: {}}]}\n";
        let mut b = brain();
        b.handle(policy_input(rule, None), t(0));
        assert_eq!(gpu_condition(&mut b), Some(("False".into(), "NotConfigured".into())));
        let mut b = brain();
        b.handle(
            policy_input("    - {name: nan, uses: non_finite, with: {metric: loss}, actions: []}\n", None),
            t(0),
        );
        assert_eq!(gpu_condition(&mut b), None, "no GPU rule, no GpuMetrics condition");

        let config = ControllerConfig {
            gpu_metrics: Some(crate::GpuMetricsConfig::new("http://prometheus:9090")),
            ..ControllerConfig::default()
        };
        let mut b = Brain::new(&config, Arc::new(Metrics::new()), None);
        b.handle(policy_input(rule, None), t(0));
        assert_eq!(gpu_condition(&mut b), Some(("False".into(), "NotReadYet".into())));
        let health = |healthy| crate::messages::SourceHealth { healthy, message: "m".into() };
        b.handle(Input::GpuMetrics(health(false)), t(1));
        assert_eq!(gpu_condition(&mut b), Some(("False".into(), "QueryFailing".into())));
        b.handle(Input::GpuMetrics(health(true)), t(2));
        assert_eq!(gpu_condition(&mut b), Some(("True".into(), "Reading".into())));

        let idle = |at: i64| {
            let gpus = vec![trainwarden_core::GpuReading {
                id: "ft-node-0-0-x/0".into(),
                util: Some(0.0),
                engine_active: None,
                power: Some(60.0),
                fb_used: None,
            }];
            (JobKey::new("ml", "ft"), trainwarden_core::GpuSample { at: t(at), gpus })
        };
        b.handle(Input::GpuReadings(vec![idle(3)]), t(3));
        assert!(b.evaluator().job(&JobKey::new("ml", "ft")).is_none(), "a reading never creates a job");
        b.handle(job_reporting(1.0, t(3)), t(3));
        for at in 4..=14 {
            b.handle(Input::GpuReadings(vec![idle(at)]), t(at));
        }
        assert_eq!(actions(&mut b), ["suspend ml/ft"]);
    }

    /// Issue 17 part 2: a queue-aware rule fires when demand arrives behind the job's LocalQueue, not before;
    /// a job of another LocalQueue, or not Kueue's, reads the queue as unknown; the policy's KueueQueues
    /// condition says whether the queues are read, and a failing watch makes the demand unknown.
    #[test]
    fn queue_rules_fire_when_others_wait_behind_the_job_s_local_queue() {
        use crate::messages::{LocalQueueRef, SourceHealth};
        use trainwarden_core::QueueDemand;
        let condition = |b: &mut Brain| {
            b.status_of(&key(), t(30))
                .conditions
                .into_iter()
                .find(|c| c.type_ == trainwarden_kube::status::CONDITION_KUEUE_QUEUES)
                .map(|c| (c.status, c.reason))
        };
        let rule = "    - {name: waiting, when: 'queue_pending_gpus() >= 8.0', actions: [{suspend: {}}]}\n";
        let mut b = brain();
        b.handle(policy_input(rule, None), t(0));
        assert_eq!(condition(&mut b), Some(("False".into(), "NotReadYet".into())));
        let demand = |lq: &str, pending, pending_gpus| {
            Input::QueueDemand(Arc::new(crate::messages::QueueDemands {
                queues: BTreeMap::from([(
                    LocalQueueRef::new("ml", lq),
                    QueueDemand { pending, pending_gpus },
                )]),
                own: BTreeMap::new(),
            }))
        };
        let queued_job = |queue: Option<&str>, at| {
            let Input::Job(mut job) = job_reporting(1.0, t(at)) else { unreachable!() };
            if let Ok(s) = &mut job.snapshot {
                s.kueue_queue = queue.map(str::to_string);
            }
            Input::Job(job)
        };
        b.handle(Input::KueueQueues(SourceHealth { healthy: true, message: "m".into() }), t(1));
        assert_eq!(condition(&mut b), Some(("True".into(), "Reading".into())));
        b.handle(demand("team", 1, 4.0), t(1));
        b.handle(queued_job(Some("team"), 2), t(2));
        let queue = |b: &Brain| b.evaluator().job(&JobKey::new("ml", "ft")).and_then(|j| j.queue);
        assert_eq!(queue(&b), Some(QueueDemand { pending: 1, pending_gpus: 4.0 }));
        assert!(actions(&mut b).is_empty(), "4 GPUs wait: not enough");
        b.handle(demand("other", 3, 24.0), t(3));
        assert_eq!(queue(&b), None, "its LocalQueue is no longer known");
        assert!(actions(&mut b).is_empty(), "another queue's demand is not this job's");
        b.handle(demand("team", 2, 12.0), t(4));
        assert_eq!(actions(&mut b), ["suspend ml/ft"]);

        // Not Kueue's: the queue is unknown whatever waits.
        let mut b = brain();
        b.handle(policy_input(rule, None), t(0));
        b.handle(demand("team", 2, 12.0), t(1));
        b.handle(queued_job(None, 2), t(2));
        assert_eq!(queue(&b), None);
        assert!(actions(&mut b).is_empty());
        // A failing watch: what was known is dropped.
        b.handle(queued_job(Some("team"), 3), t(3));
        assert_eq!(queue(&b), Some(QueueDemand { pending: 2, pending_gpus: 12.0 }));
        b.handle(Input::KueueQueues(SourceHealth { healthy: false, message: "forbidden".into() }), t(4));
        assert_eq!(condition(&mut b), Some(("False".into(), "Unavailable".into())));
        assert_eq!(queue(&b), None);

        let config = ControllerConfig { kueue_queues: false, ..ControllerConfig::default() };
        let mut b = Brain::new(&config, Arc::new(Metrics::new()), None);
        b.handle(policy_input(rule, None), t(0));
        assert_eq!(condition(&mut b), Some(("False".into(), "NotConfigured".into())));
        let mut b = brain();
        b.handle(
            policy_input("    - {name: nan, uses: non_finite, with: {metric: loss}, actions: []}\n", None),
            t(0),
        );
        assert_eq!(condition(&mut b), None, "no queue rule, no KueueQueues condition");
    }

    /// Issue 14: a misspelt key in a live TrainJob's progress is not a reason to stop judging the job, but
    /// must not go unnoticed either: one warning Event per job and key, a counter by source.
    #[test]
    fn unknown_progress_fields_are_surfaced_once_per_job_and_key() {
        let job = |name: &str, at: i64, status: serde_json::Value| trainer_status("ml", name, t(at), status);
        let events = |brain: &mut Brain| -> Vec<String> {
            brain
                .work
                .drain(..)
                .filter_map(|w| match w {
                    Work::RecordEvent(e) => Some(format!("{} {} {}: {}", e.job, e.warning, e.reason, e.note)),
                    _ => None,
                })
                .collect()
        };
        let counted = |brain: &Brain, source: ProgressSource| {
            brain.metrics.unknown_progress_fields.get_or_create(&ProgressSourceLabels { source }).get()
        };
        let mut b = brain();
        let typo = serde_json::json!({"trainMetricz": [{"name": "loss", "value": "1"}]});
        b.handle(job("ft", 0, typo.clone()), t(0));
        assert_eq!(
            events(&mut b),
            [
                "ml/ft true UnknownProgressFields: progress read without the fields its format does not define: \
              status.trainerStatus.trainMetricz: unknown field; expected one of progressPercentage, \
              estimatedRemainingSeconds, metrics, lastUpdatedTime"
            ]
        );
        assert_eq!(counted(&b, ProgressSource::TrainerStatus), 1);
        assert!(b.evaluator().job(&JobKey::new("ml", "ft")).is_some(), "the job is still judged");
        // The next report with the same typo: nothing new to say.
        b.handle(job("ft", 5, typo.clone()), t(5));
        assert_eq!(events(&mut b), Vec::<String>::new());
        assert_eq!(counted(&b, ProgressSource::TrainerStatus), 1);
        // Another key: said once more; another job: its own Event.
        b.handle(job("ft", 10, serde_json::json!({"trainMetricz": [], "metric": 1})), t(10));
        assert_eq!(events(&mut b).len(), 1);
        b.handle(job("other", 10, typo.clone()), t(10));
        assert_eq!(events(&mut b).len(), 1);
        assert_eq!(counted(&b, ProgressSource::TrainerStatus), 3);
        // Forgotten with the job.
        b.handle(Input::JobGone(JobKey::new("ml", "ft")), t(11));
        b.handle(job("ft", 12, typo), t(12));
        assert_eq!(events(&mut b).len(), 1);
        // A well-formed report says nothing.
        b.handle(job("clean", 12, serde_json::json!({"metrics": [{"name": "loss", "value": "1"}]})), t(12));
        assert_eq!(events(&mut b), Vec::<String>::new());
        assert_eq!(counted(&b, ProgressSource::Annotation), 0);
    }

    #[test]
    fn a_policy_whose_jobs_report_unknown_progress_fields_says_so_in_its_status() {
        let job = |namespace: &str, name: &str, status: serde_json::Value| {
            trainer_status(namespace, name, t(1), status)
        };
        let understood = |b: &mut Brain, at| {
            let status = b.status_of(&key(), at);
            let c =
                status.conditions.iter().find(|c| c.type_ == CONDITION_PROGRESS_UNDERSTOOD).unwrap().clone();
            (c.status, c.reason, c.message)
        };
        let mut b = brain();
        b.handle(
            policy_input(
                "    - {name: nan, uses: non_finite, with: {metric: loss}, actions: [{suspend: {}}]}\n",
                None,
            ),
            t(0),
        );
        assert_eq!(understood(&mut b, t(0)).0, "True");
        b.handle(
            job("ml", "ft", serde_json::json!({"trainMetricz": [{"name": "loss", "value": "1"}]})),
            t(1),
        );
        b.handle(job("ml", "ok", serde_json::json!({"metrics": [{"name": "loss", "value": "1"}]})), t(1));
        let (status, reason, message) = understood(&mut b, t(2));
        assert_eq!((status.as_str(), reason.as_str()), ("False", "UnknownProgressFields"));
        assert_eq!(
            message,
            "1 selected job reports progress fields their format does not define, so rules cannot see them \
             (check the spelling in the training code's report): ml/ft (status.trainerStatus.trainMetricz)"
        );
        // Another namespace's job is not this policy's concern.
        b.handle(job("other", "x", serde_json::json!({"metric": 1})), t(3));
        assert!(understood(&mut b, t(3)).2.starts_with("1 selected job reports"));
        // The training code fixes its report: the condition clears.
        b.handle(job("ml", "ft", serde_json::json!({"metrics": [{"name": "loss", "value": "1"}]})), t(4));
        assert_eq!(understood(&mut b, t(5)).1, "KnownFields");
    }

    #[test]
    fn an_invalid_script_is_reported_with_its_position_and_nothing_is_loaded() {
        let mut b = brain();
        b.handle(
            policy_input("    - {name: bad, when: 'metric(\"loss\") >', actions: [{suspend: {}}]}\n", None),
            t(0),
        );
        let status = b.status_of(&key(), t(0));
        let ready = status.conditions.iter().find(|c| c.type_ == CONDITION_READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "InvalidPolicy"));
        assert!(ready.message.contains("spec.rules[0].when: line 1:"), "{}", ready.message);
        assert_eq!(status.matched_jobs, None);
    }

    #[test]
    fn a_rule_that_fails_at_evaluation_makes_the_policy_not_ready_while_it_fails() {
        let mut b = brain();
        // Valid (the duration is computed), but fails on every evaluation.
        b.handle(
            policy_input(
                "    - {name: odd, when: 'let d = \"5\" + \"x\"; stalled(d)', actions: [{suspend: {}}]}\n",
                None,
            ),
            t(0),
        );
        let ready_of = |b: &mut Brain, at| {
            let status = b.status_of(&key(), at);
            let c = status.conditions.iter().find(|c| c.type_ == CONDITION_READY).unwrap().clone();
            (c.status, c.reason, c.message)
        };
        assert_eq!(ready_of(&mut b, t(0)).0, "True");
        b.handle(job_reporting(1.0, t(1)), t(1));
        b.handle(job_reporting(0.9, t(2)), t(2));
        let (status, reason, message) = ready_of(&mut b, t(3));
        assert_eq!((status.as_str(), reason.as_str()), ("False", "RuleErrors"));
        assert!(
            message.starts_with(
                "rule odd cannot be evaluated (failing since 2026-11-27T17:00:01Z, first on ml/ft): rule \"odd\", line 1:"
            ),
            "{message}"
        );
        assert!(message.contains("invalid duration \"5x\""), "{message}");
        // Forgotten once it has not failed for a while.
        let later = t(2 + books::RULE_ERROR_MEMORY.as_secs() as i64 + 1);
        assert_eq!(ready_of(&mut b, later).1, "Evaluating");
    }

    #[test]
    fn a_notify_to_no_receiver_says_nothing_was_sent_instead_of_queueing() {
        let mut b = brain();
        b.handle(
            policy_input(
                "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{notify: {to: team}}]}\n",
                None,
            ),
            t(0),
        );
        b.handle(job_reporting(9.0, t(1)), t(1));
        let work: Vec<String> = b
            .work
            .drain(..)
            .filter_map(|w| match w {
                Work::Act(i) => Some(format!("act {}", i.action.kind())),
                Work::RecordEvent(e) if e.reason == "NotificationNotConfigured" => Some(e.note),
                _ => None,
            })
            .collect();
        assert_eq!(
            work,
            [
                "ProgressPolicy ml/p rule high: notify \"team\" sends nothing: the policy declares no such receiver (add spec.receivers)"
            ]
        );
        let status = b.status_of(&key(), t(2));
        assert_eq!(status.action_counts.get("notify/refused"), Some(&1));
    }

    #[test]
    fn a_restored_pending_rule_fires_at_its_original_deadline() {
        let rules =
            "    - {name: high, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}]}\n";
        let status = ProgressPolicyStatus {
            rule_states: vec![RuleMemory {
                job: "ml/ft".into(),
                rule: "high".into(),
                state: RuleState::Pending,
                since: Some(t(0)),
                cleared_at: None,
                firings: 0,
                last_issued: vec![],
                rule_hash: None,
                held: None,
                deferred: vec![],
                snooze_held: false,
                excepted_by: None,
            }],
            ..Default::default()
        };
        let mut b = brain();
        b.handle(policy_input(rules, Some(status)), t(4));
        b.handle(job_reporting(9.0, t(5)), t(6));
        assert!(actions(&mut b).is_empty());
        assert_eq!(b.next_tick(), Some(t(10)), "the timer is the original deadline");
        b.tick(t(10));
        assert_eq!(actions(&mut b), vec!["suspend ml/ft"]);
    }

    /// A controller that dies between issuing a suspension and performing it must not remember it as done.
    #[test]
    fn an_action_in_flight_is_persisted_as_due_and_redone_after_a_restart() {
        let rules =
            "    - {name: high, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}]}\n";
        let mut b = brain();
        b.handle(policy_input(rules, None), t(0));
        b.handle(job_reporting(9.0, t(0)), t(0));
        b.tick(t(10));
        let issued: Vec<ActionIntent> =
            b.work.drain(..).filter_map(|w| if let Work::Act(i) = w { Some(*i) } else { None }).collect();
        assert_eq!(issued.len(), 1);
        // No outcome yet: persisted as pending since t(0), due now.
        let status = b.status_of(&key(), t(10));
        let m = &status.rule_states[0];
        assert_eq!((m.state, m.since, m.firings), (RuleState::Pending, Some(t(0)), 0));
        assert_eq!(m.last_issued, vec![None]);

        // The restarted controller fires at once, with the same intent id.
        let mut after = brain();
        after.handle(policy_input(rules, Some(status)), t(12));
        after.handle(job_reporting(9.0, t(11)), t(12));
        let redone: Vec<String> = after
            .work
            .drain(..)
            .filter_map(|w| if let Work::Act(i) = w { Some(i.id) } else { None })
            .collect();
        assert_eq!(redone, vec![issued[0].id.clone()]);

        // Once the executor reports back, the memory is "firing".
        let outcome = Outcome {
            intent: issued[0].id.clone(),
            policy: key(),
            job: JobKey::new("ml", "ft"),
            rule: "high".into(),
            action: crate::messages::ExecutedAction::Suspend,
            mode: Mode::Enforce,
            result: ActionResult::Done,
            message: String::new(),
            at: t(10),
            savings: None,
        };
        b.handle(Input::Outcome(Box::new(outcome)), t(11));
        let m = &b.status_of(&key(), t(11)).rule_states[0];
        assert_eq!((m.state, m.firings), (RuleState::Firing, 1));
    }

    #[test]
    fn actions_that_stop_the_job_are_performed_last() {
        let rules = "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}, {event: {}}, {annotate: {key: k}}]}\n";
        let mut b = brain();
        b.handle(policy_input(rules, None), t(0));
        b.handle(job_reporting(9.0, t(0)), t(0));
        assert_eq!(actions(&mut b), vec!["event ml/ft", "annotate ml/ft", "suspend ml/ft"]);
    }

    #[test]
    fn the_resolved_event_says_why() {
        let mut b = brain();
        b.handle(policy_input("    - {name: high, when: 'metric(\"loss\") > 5.0'}\n", None), t(0));
        b.handle(job_reporting(9.0, t(0)), t(0));
        b.handle(job_reporting(1.0, t(1)), t(1));
        let notes: Vec<String> = b
            .work
            .drain(..)
            .filter_map(|w| match w {
                Work::RecordEvent(e) if e.reason == "RuleResolved" => Some(e.note),
                _ => None,
            })
            .collect();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with(
                "ProgressPolicy ml/p rule high resolved [Enforce]: the condition no longer holds (it fired: "
            ),
            "{}",
            notes[0]
        );
    }

    #[test]
    fn an_exempt_job_is_announced_once_and_never_judged() {
        let mut b = brain();
        b.handle(
            policy_input(
                "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n",
                None,
            ),
            t(0),
        );
        for s in 1..3 {
            let Input::Job(mut job) = job_reporting(9.0, t(s)) else { unreachable!() };
            job.exempt = true;
            b.handle(Input::Job(job), t(s));
        }
        let reasons: Vec<String> = b
            .work
            .drain(..)
            .map(|w| match w {
                Work::RecordEvent(a) => a.reason,
                Work::Act(i) => format!("act {}", i.action.kind()),
                Work::Notify(..) => "notify".into(),
                Work::Receivers(_) => "receivers".into(),
                Work::SaveHistory(_) | Work::FlushHistory(..) => "history".into(),
                Work::SaveVerdict(_) => "verdict".into(),
            })
            .collect();
        assert_eq!(reasons, vec!["Exempt"]);
    }

    #[test]
    fn outcomes_feed_last_action_savings_and_counts() {
        let mut b = brain();
        b.handle(
            policy_input(
                "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n",
                None,
            ),
            t(0),
        );
        let outcome =
            suspend_outcome("ProgressPolicy:ml:p:1:high:ml:ft:0:1:0", Mode::Enforce, ActionResult::Done, 8.0);
        b.handle(Input::Outcome(Box::new(outcome)), t(5));
        let status = b.status_of(&key(), t(6));
        assert_eq!(status.last_action.as_deref(), Some("suspend ml/ft (high)"));
        assert_eq!((status.gpu_hours_saved, status.dollars_saved), (Some(8.0), Some(80.0)));
        assert_eq!(status.action_counts.get("suspend/done"), Some(&1));
        assert_eq!(status.jobs[0].last_action.as_deref(), Some("suspend (high)"));
        // Unchanged statuses are not sent twice.
        assert_eq!(b.changed_statuses(t(6)).len(), 1);
        assert!(b.changed_statuses(t(7)).is_empty());
    }
}

#[cfg(test)]
mod handover_tests {
    use super::tests::{job_reporting as report, key, policy_input, t};
    use super::*;
    use crate::messages::{ActionResult, ExecutedAction, Outcome};
    use trainwarden_core::{ActionIntent, Mode};
    use trainwarden_core::{RuleMemory, RuleState};

    fn policy(status: Option<ProgressPolicyStatus>) -> Input {
        policy_input("    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n", status)
    }

    fn brain(leading: bool) -> Brain {
        let mut b = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
        b.lead(leading);
        b.work.clear();
        b
    }

    fn acts(b: &mut Brain) -> Vec<ActionIntent> {
        b.work.drain(..).filter_map(|w| if let Work::Act(i) = w { Some(*i) } else { None }).collect()
    }

    fn outcome(i: &ActionIntent, result: ActionResult) -> Input {
        Input::Outcome(Box::new(Outcome {
            intent: i.id.clone(),
            policy: i.policy.id(),
            job: i.job.clone(),
            rule: i.rule.clone(),
            action: ExecutedAction::Suspend,
            mode: Mode::Enforce,
            result,
            message: String::new(),
            at: i.at,
            savings: Some(trainwarden_core::Savings {
                until: t(3600),
                basis: trainwarden_core::SavingsBasis::EstimatedEnd,
                gpus: 8.0,
                gpu_hours: 8.0,
                dollars: None,
            }),
        }))
    }

    /// Hole 1 of the reliability issue: a follower's skipped intents were dropped, so a leader lost between
    /// firing and acting left the job running.
    #[test]
    fn a_follower_keeps_what_it_could_not_do_and_does_it_first_when_it_leads() {
        let mut b = brain(false);
        b.handle(policy(None), t(0));
        b.handle(report(9.0, t(1)), t(1));
        let fired = acts(&mut b);
        assert_eq!(fired.len(), 1);
        b.handle(outcome(&fired[0], ActionResult::NotLeader), t(1));
        b.tick(t(100));
        assert!(acts(&mut b).is_empty(), "nothing is retried while following");
        b.handle(report(9.5, t(2)), t(2));
        b.work.clear();
        b.lead(true);
        let inherited = acts(&mut b);
        assert_eq!(inherited.iter().map(|i| &i.id).collect::<Vec<_>>(), vec![&fired[0].id]);
        b.handle(outcome(&fired[0], ActionResult::AlreadyDone), t(3));
        let status = b.status_of(&key(), t(3));
        assert_eq!(status.gpu_hours_saved, Some(8.0), "found done by its id: counted once");
        assert_eq!(status.rule_states[0].state, RuleState::Firing);
        b.lead(false);
        b.lead(true);
        assert!(acts(&mut b).is_empty(), "settled: nothing left to inherit");
    }

    #[test]
    fn a_failed_action_is_tried_again_with_a_growing_wait_until_its_rule_stops_wanting_it() {
        let mut b = brain(true);
        b.handle(policy(None), t(0));
        b.handle(report(9.0, t(0)), t(0));
        let fired = acts(&mut b);
        b.handle(outcome(&fired[0], ActionResult::Failed), t(0));
        assert_eq!(b.next_tick(), Some(t(2)));
        b.tick(t(2));
        assert_eq!(acts(&mut b)[0].id, fired[0].id);
        b.handle(outcome(&fired[0], ActionResult::Failed), t(3));
        assert_eq!(b.next_tick(), Some(t(7)), "then 4 s");
        let status = b.status_of(&key(), t(3));
        assert_eq!(status.rule_states[0].state, RuleState::Pending, "persisted as due while owed");
        // The rule resolves: the owed suspension is no longer wanted.
        b.handle(report(1.0, t(5)), t(5));
        b.work.clear();
        b.tick(t(7));
        assert!(acts(&mut b).is_empty());
        assert!(b.ledger.is_empty());
        assert_eq!(b.ledger.next_due(), None);
    }

    #[test]
    fn the_leaders_status_settles_a_followers_intents_and_its_totals_carry_over() {
        let mut b = brain(false);
        b.handle(policy(None), t(0));
        b.handle(report(9.0, t(1)), t(1));
        let fired = acts(&mut b);
        b.handle(outcome(&fired[0], ActionResult::NotLeader), t(1));
        // The leader performed it and wrote status: the firing as settled, its totals.
        let leaders = ProgressPolicyStatus {
            gpu_hours_saved: Some(20.0),
            action_counts: [("suspend/done".to_string(), 3)].into(),
            rule_states: vec![RuleMemory {
                job: "ml/ft".into(),
                rule: "high".into(),
                state: RuleState::Firing,
                // The leader's own time (it fired a moment before this replica): settled by the firing count.
                since: Some(t(0)),
                cleared_at: None,
                firings: 1,
                last_issued: vec![Some(t(0))],
                rule_hash: None,
                held: None,
                deferred: vec![],
                snooze_held: false,
                excepted_by: None,
            }],
            ..Default::default()
        };
        b.handle(policy(Some(leaders)), t(2));
        b.lead(true);
        assert!(acts(&mut b).is_empty(), "the leader did it: nothing inherited");
        let status = b.status_of(&key(), t(3));
        assert_eq!(status.gpu_hours_saved, Some(20.0));
        assert_eq!(status.action_counts.get("suspend/done"), Some(&3));
    }

    #[test]
    fn a_deleted_job_takes_its_owed_actions_with_it() {
        let mut b = brain(false);
        b.handle(policy(None), t(0));
        b.handle(report(9.0, t(1)), t(1));
        let fired = acts(&mut b);
        b.handle(outcome(&fired[0], ActionResult::NotLeader), t(1));
        b.handle(Input::JobGone(JobKey::new("ml", "ft")), t(2));
        b.lead(true);
        assert!(acts(&mut b).is_empty());
        assert!(b.ledger.is_empty());
    }
}

#[cfg(test)]
mod watch_path_tests {
    use super::*;
    use trainwarden_core::parse_documents;

    /// The controller's path end to end without a cluster: watched TrainJob objects (as JSON, the way the
    /// API server sends them) through `inputs::job_input` into the brain, with a plateau rule.
    #[test]
    fn a_plateau_fires_from_watched_trainjob_objects() {
        let mut b = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
        let yaml = "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p, namespace: ns}\n\
                    spec:\n  mode: Enforce\n  samplingInterval: 1s\n  rules:\n    - {name: plateau, uses: plateau, with: {metric: loss, window: 4, minDelta: 0.01}, actions: [{suspend: {}}]}\n";
        let doc = parse_documents(yaml, "test").unwrap().remove(0);
        let key = PolicyId {
            kind: PolicyKind::Namespaced,
            namespace: Some("ns".to_string()),
            name: "p".to_string(),
        };
        b.handle(
            Input::Policy(Box::new(PolicyInput { key, generation: 1, document: Ok(doc), status: None })),
            t(0),
        );
        let losses = ["2.0", "1.5", "1.0", "0.80", "0.801", "0.799", "0.802", "0.800", "0.803"];
        let mut fired = None;
        for (i, loss) in losses.iter().enumerate() {
            let obj: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": "2026-11-30T09:59:00Z"},
                "spec": {"trainer": {"numNodes": 1}},
                "status": {"trainerStatus": {"progressPercentage": 10 + i, "metrics": [{"name": "loss", "value": loss}],
                           "lastUpdatedTime": format!("2026-11-30T10:00:{i:02}Z")}}
            }))
            .unwrap();
            if i == 5 {
                // A status write comes back as a watch event of the unchanged policy: nothing may reset.
                let doc = parse_documents(yaml, "test").unwrap().remove(0);
                let key = PolicyId {
                    kind: PolicyKind::Namespaced,
                    namespace: Some("ns".to_string()),
                    name: "p".to_string(),
                };
                let input = PolicyInput { key, generation: 1, document: Ok(doc), status: None };
                b.handle(Input::Policy(Box::new(input)), t(i as i64));
            }
            let input = crate::sources::trainjobs::job_input(&obj).expect("a namespaced TrainJob");
            b.handle(Input::Job(Box::new(input)), t(i as i64));
            if b.work.drain(..).any(|w| matches!(w, Work::Act(_))) {
                fired.get_or_insert(i);
            }
        }
        assert_eq!(fired, Some(7), "fires on the 4th report without improvement after the best (0.80)");
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_795_798_800 + s).unwrap()
    }
}

#[cfg(test)]
mod history_tests {
    use super::tests::{policy_input, t};
    use super::*;
    use trainwarden_core::{Metric, ProgressSample};

    const RULE: &str = "    - {name: plateau, uses: plateau, with: {metric: loss, window: 5, minDelta: 0.01}, actions: [{suspend: {}}]}\n";
    const UID: &str = "uid-1";

    fn leader() -> Brain {
        let config =
            ControllerConfig { history_interval: Duration::from_secs(0), ..ControllerConfig::default() };
        let mut b = Brain::new(&config, Arc::new(Metrics::new()), None);
        b.lead(true);
        b.handle(policy_input(RULE, None), t(0));
        b.work.clear();
        b
    }

    /// Report `i` (one a second) as the watch delivers it, carrying `annotation` as the TrainJob does.
    fn report(i: i64, annotation: Option<&str>) -> Input {
        let loss = if i < 4 { 2.0 - 0.3 * i as f64 } else { 1.1 + 0.001 * (i % 2) as f64 };
        let mut snapshot = JobSnapshot::new(JobKey::new("ml", "ft"));
        let mut sample = ProgressSample::empty(t(i), SampleSource::TrainerStatus);
        sample.metrics.push(Metric { name: "loss".into(), value: loss });
        sample.current_step = Some(i as f64);
        snapshot.sample = Some(sample);
        if let Some(a) = annotation {
            snapshot.annotations.insert(crate::HISTORY_ANNOTATION.into(), a.into());
        }
        crate::brain::tests::watched(snapshot, Some(UID))
    }

    /// The executor's answer to a checkpoint write: stored.
    fn stored(b: &mut Brain, s: &HistorySave, at: Timestamp) {
        b.handle(Input::HistorySaved { job: s.job.clone(), content: s.content, at: s.at, stored: true }, at);
    }

    /// Feeds reports `from..to` (each checkpoint write confirmed); the report at which a suspension was
    /// issued and the last checkpoint saved.
    fn run(b: &mut Brain, from: i64, to: i64, mut saved: Option<String>) -> (Option<i64>, Option<String>) {
        let mut fired = None;
        for i in from..to {
            b.handle(report(i, saved.as_deref()), t(i));
            for w in b.work.drain(..).collect::<Vec<_>>() {
                match w {
                    Work::Act(_) => {
                        fired.get_or_insert(i);
                    }
                    Work::SaveHistory(s) => {
                        stored(b, &s, t(i));
                        saved = Some(s.text);
                    }
                    _ => {}
                }
            }
        }
        (fired, saved)
    }

    #[test]
    fn a_new_leader_restores_the_history_from_the_trainjob_and_fires_on_the_same_report() {
        let (expected, _) = run(&mut leader(), 0, 20, None);
        assert_eq!(expected, Some(8), "5 reports without improvement after the best at report 3");
        let (fired, stored) = run(&mut leader(), 0, 6, None);
        assert_eq!(fired, None);
        let mut next = leader();
        // The TrainJob still shows report 5 and the checkpoint written after it.
        assert_eq!(run(&mut next, 5, 20, stored).0, expected);
        assert_eq!(
            next.metrics
                .history_checkpoints
                .get_or_create(&crate::metrics::HistoryLabels { result: HistoryResult::Restored })
                .get(),
            1
        );
    }

    /// The report that fires a suspending rule sends the firing's Event first, then the suspension, then the
    /// checkpoint taken at the firing: the suspension waits for no write that changes nothing.
    #[test]
    fn a_firings_checkpoint_is_stored_after_its_suspension() {
        let mut b = leader();
        let mut firing = None;
        for i in 0..20 {
            b.handle(report(i, None), t(i));
            let work = b.outgoing();
            if work.iter().any(|w| matches!(w, Work::Act(_))) {
                firing = Some(work);
                break;
            }
            for w in work {
                if let Work::SaveHistory(s) = w {
                    stored(&mut b, &s, t(i));
                }
            }
        }
        let order: Vec<&str> = firing
            .expect("the plateau fires")
            .iter()
            .filter_map(|w| match w {
                Work::RecordEvent(e) if e.reason == "RuleFiring" => Some("event"),
                Work::Act(i) if matches!(i.action, ActionSpec::Suspend(_)) => Some("suspend"),
                Work::SaveHistory(_) => Some("checkpoint"),
                _ => None,
            })
            .collect();
        assert_eq!(order, ["event", "suspend", "checkpoint"]);
    }

    /// A firing's Event names the TrainJob by the uid its report carried, so the executor records it without
    /// reading the object first; a job the loop no longer knows is read first (no uid).
    #[test]
    fn a_firings_event_carries_the_uid_the_job_was_seen_with() {
        let mut b = leader();
        let mut events = Vec::new();
        for i in 0..20 {
            b.handle(report(i, None), t(i));
            events.extend(b.outgoing().into_iter().filter_map(|w| match w {
                Work::RecordEvent(e) => Some((e.reason, e.uid)),
                _ => None,
            }));
        }
        assert!(events.iter().any(|(reason, _)| reason == "RuleFiring"), "{events:?}");
        assert!(events.iter().all(|(_, uid)| uid.as_deref() == Some(UID)), "{events:?}");
        b.handle(Input::JobGone(JobKey::new("ml", "ft")), t(21));
        let mut gone = b.outgoing();
        gone.push(Work::RecordEvent(Box::new(TrainJobEvent {
            job: JobKey::new("ml", "ft"),
            warning: false,
            reason: "Test".into(),
            action: "Evaluate".into(),
            note: String::new(),
            uid: None,
        })));
        b.work = gone;
        for w in b.outgoing() {
            if let Work::RecordEvent(e) = w {
                assert_eq!(e.uid, None, "{} for a job no longer known", e.reason);
            }
        }
    }

    #[test]
    fn a_firing_is_checkpointed_without_waiting_for_the_interval() {
        let config =
            ControllerConfig { history_interval: Duration::from_secs(3600), ..ControllerConfig::default() };
        let mut b = Brain::new(&config, Arc::new(Metrics::new()), None);
        b.lead(true);
        b.handle(policy_input(RULE, None), t(0));
        let mut writes = Vec::new();
        for i in 0..10 {
            b.handle(report(i, None), t(i));
            for w in b.work.drain(..).collect::<Vec<_>>() {
                if let Work::SaveHistory(s) = w {
                    stored(&mut b, &s, t(i));
                    writes.push(i);
                }
            }
        }
        assert_eq!(writes, vec![0, 8], "the first sample, then the report the plateau fired at");
    }

    #[test]
    fn a_checkpoint_that_was_not_stored_is_written_again_on_a_timer_without_a_sample() {
        let mut b = leader();
        b.handle(report(0, None), t(0));
        let save = b
            .work
            .drain(..)
            .find_map(|w| match w {
                Work::SaveHistory(s) => Some(s),
                _ => None,
            })
            .expect("a first checkpoint");
        // The write failed (or went to a replica that lost the Lease): the job then goes silent.
        b.handle(
            Input::HistorySaved { job: save.job.clone(), content: save.content, at: save.at, stored: false },
            t(1),
        );
        let mut again: Vec<HistorySave> = Vec::new();
        for _ in 0..100 {
            let Some(next) = b.next_tick().filter(|n| *n <= t(31)) else { break };
            b.tick(next);
            again.extend(b.work.drain(..).filter_map(|w| match w {
                Work::SaveHistory(s) => Some(*s),
                _ => None,
            }));
        }
        assert_eq!(again.len(), 1, "written again with no new sample");
        assert_eq!(again[0].content, save.content);
    }

    #[test]
    fn the_echo_of_a_checkpoint_write_is_no_new_sample_and_no_new_write() {
        let mut b = leader();
        let (_, stored) = run(&mut b, 0, 3, None);
        let stored = stored.expect("written after a new sample");
        for _ in 0..3 {
            // The watch event our own write caused: the same report, now with the annotation.
            b.handle(report(2, Some(&stored)), t(3));
            assert!(!b.work.iter().any(|w| matches!(w, Work::SaveHistory(_))), "no feedback loop");
        }
        assert_eq!(b.evaluator().job(&JobKey::new("ml", "ft")).unwrap().series.samples, 3);
        assert!(
            !b.evaluator()
                .job(&JobKey::new("ml", "ft"))
                .unwrap()
                .snapshot
                .annotations
                .contains_key(crate::HISTORY_ANNOTATION),
            "the evaluator does not keep the checkpoint text"
        );
    }

    #[test]
    fn a_follower_writes_nothing_and_an_unusable_checkpoint_is_refused_not_fatal() {
        let mut b = leader();
        b.lead(false);
        let (_, stored) = run(&mut b, 0, 5, None);
        assert_eq!(stored, None, "only the leader writes");
        let mut fresh = leader();
        fresh.handle(report(0, Some("{\"v\":99}")), t(0));
        assert_eq!(fresh.evaluator().job(&JobKey::new("ml", "ft")).unwrap().series.samples, 1);
        assert_eq!(
            fresh
                .metrics
                .history_checkpoints
                .get_or_create(&crate::metrics::HistoryLabels { result: HistoryResult::Refused })
                .get(),
            1
        );
    }
}

/// Each stopping action counts once in the policy's totals, whoever performed it and whichever status
/// survived (see [`counted`] and [`found`]).
#[cfg(test)]
mod counting_tests {
    use super::tests::{job_reporting as report, key, policy_input, t};
    use super::*;
    use crate::messages::{ActionResult, ExecutedAction, Outcome};
    use trainwarden_core::{ActionIntent, ActionKind, Mode, RuleState};

    const RULES: &str = "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{annotate: {key: k}}, {suspend: {}}]}\n";

    fn brain(leading: bool) -> Brain {
        let mut b = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
        b.lead(leading);
        b.work.clear();
        b
    }

    fn acts(b: &mut Brain) -> Vec<ActionIntent> {
        b.work.drain(..).filter_map(|w| if let Work::Act(i) = w { Some(*i) } else { None }).collect()
    }

    fn outcome(i: &ActionIntent, result: ActionResult) -> Input {
        let suspend = i.action.kind() == ActionKind::Suspend;
        Input::Outcome(Box::new(Outcome {
            intent: i.id.clone(),
            policy: i.policy.id(),
            job: i.job.clone(),
            rule: i.rule.clone(),
            action: if suspend { ExecutedAction::Suspend } else { ExecutedAction::Annotate },
            mode: Mode::Enforce,
            result,
            message: String::new(),
            at: i.at,
            savings: suspend.then(|| trainwarden_core::Savings {
                until: t(3600),
                basis: trainwarden_core::SavingsBasis::EstimatedEnd,
                gpus: 8.0,
                gpu_hours: 8.0,
                dollars: None,
            }),
        }))
    }

    /// ml/ft reporting a high loss, suspended, its last-action record naming `id` (issued at `at`).
    fn suspended_job_recording(id: &str, at: Timestamp) -> Input {
        let Input::Job(job) = report(9.0, at) else { unreachable!() };
        let mut snapshot = job.snapshot.unwrap();
        snapshot.phase = trainwarden_core::JobPhase::Suspended;
        snapshot.annotations.insert(
            crate::LAST_ACTION_ANNOTATION.into(),
            serde_json::json!({
                "id": id, "action": "suspend", "policy": "ProgressPolicy ml/p", "rule": "high",
                "reason": "loss high", "at": at.to_string(), "gpuHours": 8.0,
            })
            .to_string(),
        );
        super::tests::watched(snapshot, job.uid.as_deref())
    }

    fn suspensions(status: &ProgressPolicyStatus) -> i64 {
        status.action_counts.iter().filter(|(k, _)| k.starts_with("suspend/")).map(|(_, n)| n).sum()
    }

    /// The double count of the reliability notes: a firing whose suspension was done while a sibling action
    /// was still owed is persisted as due; the replica that redoes it finds the suspension done, and the
    /// status it restored already counts it.
    #[test]
    fn a_firing_redone_after_a_restart_does_not_count_its_suspension_again() {
        let mut b = brain(true);
        b.handle(policy_input(RULES, None), t(0));
        b.handle(report(9.0, t(1)), t(1));
        let fired = acts(&mut b);
        assert_eq!(
            fired.iter().map(|i| i.action.kind()).collect::<Vec<_>>(),
            [ActionKind::Annotate, ActionKind::Suspend]
        );
        b.handle(outcome(&fired[1], ActionResult::Done), t(2));
        b.handle(outcome(&fired[0], ActionResult::Failed), t(2));
        let status = b.status_of(&key(), t(2));
        assert_eq!(
            status.rule_states[0].state,
            RuleState::Pending,
            "the annotation is owed: persisted as due"
        );
        assert_eq!((status.gpu_hours_saved, suspensions(&status)), (Some(8.0), 1));
        let listed = status.counted_actions.clone().expect("the status lists what it counts");
        assert_eq!(listed.actions.iter().map(|a| &a.id).collect::<Vec<_>>(), [&fired[1].id]);

        let mut after = brain(true);
        after.handle(policy_input(RULES, Some(status)), t(5));
        after.handle(Input::JobsListed, t(5));
        after.handle(report(9.0, t(6)), t(6));
        let redone = acts(&mut after);
        assert_eq!(
            redone.iter().map(|i| &i.id).collect::<Vec<_>>(),
            fired.iter().map(|i| &i.id).collect::<Vec<_>>()
        );
        after.handle(outcome(&redone[1], ActionResult::AlreadyDone), t(7));
        after.handle(outcome(&redone[0], ActionResult::Done), t(7));
        let status = after.status_of(&key(), t(7));
        assert_eq!(status.gpu_hours_saved, Some(8.0), "counted once");
        assert_eq!(suspensions(&status), 1, "{:?}", status.action_counts);
        assert_eq!(status.action_counts.get("annotate/done"), Some(&1));
    }

    /// The undercount of the reliability notes: the leader suspended the job and was lost before its status
    /// counted it; the replica that takes over started after, so the job's rule does not fire again for it.
    #[test]
    fn a_suspension_no_status_counted_is_counted_once_by_the_replica_that_takes_over() {
        // The old leader's last status: nothing counted since t(0).
        let mut old = brain(true);
        old.handle(policy_input(RULES, None), t(0));
        let inherited = old.status_of(&key(), t(0));
        assert!(inherited.gpu_hours_saved.is_none());

        for leads_before_the_list in [false, true] {
            let mut b = brain(leads_before_the_list);
            b.handle(policy_input(RULES, Some(inherited.clone())), t(10));
            b.handle(suspended_job_recording("lost-leaders-intent", t(3)), t(10));
            b.handle(Input::JobsListed, t(10));
            b.lead(true);
            let status = b.status_of(&key(), t(11));
            assert_eq!(status.gpu_hours_saved, Some(8.0), "leads before the list: {leads_before_the_list}");
            assert_eq!(status.action_counts.get("suspend/already_done"), Some(&1));
            assert_eq!(b.metrics.actions_found_uncounted.get(), 1);
            // Leading again, or a replica that inherits this status: counted, not again.
            b.lead(false);
            b.lead(true);
            let mut next = brain(false);
            next.handle(policy_input(RULES, Some(b.status_of(&key(), t(12)))), t(12));
            next.handle(suspended_job_recording("lost-leaders-intent", t(3)), t(12));
            next.handle(Input::JobsListed, t(12));
            next.lead(true);
            for s in [b.status_of(&key(), t(13)), next.status_of(&key(), t(13))] {
                assert_eq!((s.gpu_hours_saved, suspensions(&s)), (Some(8.0), 1));
            }
        }
    }

    #[test]
    fn a_suspension_recorded_before_the_status_listed_counted_actions_is_not_counted() {
        // A status from before the list (an upgrade): its totals may include anything performed before.
        let old = ProgressPolicyStatus { gpu_hours_saved: Some(8.0), ..Default::default() };
        let mut b = brain(false);
        b.handle(policy_input(RULES, Some(old)), t(10));
        b.handle(suspended_job_recording("counted-by-the-old-version", t(3)), t(10));
        b.handle(Input::JobsListed, t(10));
        b.lead(true);
        let status = b.status_of(&key(), t(11));
        assert_eq!((status.gpu_hours_saved, suspensions(&status)), (Some(8.0), 0));
    }

    /// Two replicas that both believe they lead (at a Lease's expiry) perform the same apply: the second
    /// "done" of one intent id is not counted again.
    #[test]
    fn the_same_intent_done_twice_counts_once() {
        let mut b = brain(true);
        b.handle(policy_input(RULES, None), t(0));
        b.handle(report(9.0, t(1)), t(1));
        let fired = acts(&mut b);
        b.handle(outcome(&fired[1], ActionResult::Done), t(2));
        b.handle(outcome(&fired[1], ActionResult::Done), t(2));
        let status = b.status_of(&key(), t(2));
        assert_eq!((status.gpu_hours_saved, suspensions(&status)), (Some(8.0), 1));
    }
}
