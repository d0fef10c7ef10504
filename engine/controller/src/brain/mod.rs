//! The brain: one task owns the [`Evaluator`] and the per-policy books, reads [`Input`]s and the clock, and
//! emits [`Work`] for the executor and [`StatusUpdate`](crate::messages::StatusUpdate)s for the status writer. No I/O here beyond those
//! channels, so [`Brain`] itself is tested with plain `#[test]`s.
//!
//! ```text
//!  Input ──handle──▶ on_job        a TrainJob's report, deletion, the end of the list
//!                    on_policy     a policy loaded, changed, deleted (restores rule memories)
//!                    on_exception  a ProgressPolicyException honoured, invalid, deleted
//!                    on_signals    namespace labels, GPU readings, Kueue queue demand, their health
//!                    books         an executor outcome: last actions, savings, counts
//!                    stale         an intent the executor found judged under an older policy generation
//!                    checkpoints   a history checkpoint stored; a stop's flush
//!                    requests      a TrainJob's checkpoint request followed: waiting intents woken,
//!                                  its pods synced, a request nobody waits on settled
//!        ──tick────▶ the evaluator's timers, owed actions' retries
//!  lead: hand-over (owed intents first, uncounted suspensions counted)
//!  each step ──▶ outgoing (events → intents, Events, notifications; stops last), gauges, verdicts
//!  status: each policy's status projected for the writer; run: the async loop; clock: its "now"
//! ```
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
//! hand-over. A graceful stop flushes the checkpoints that changed ([`Input::FlushHistory`]). The source
//! takes the annotation out of the snapshot the evaluator keeps, and the watch event a write causes carries
//! the report already recorded, so it is a duplicate: no new sample, no new write.
//!
//! Owed actions: every intent issued stays in the [`ledger`] until an outcome settles it; failures come back
//! as timers (capped exponential backoff), "not leader" parks them until [`Brain::lead`] hands them over.
//!
//! Per-job gauges (`--job-metrics`): after each step the series of the jobs it touched (a report, a rule
//! transition, a deletion; every exported job when a policy changed) are brought in line with the
//! evaluator in `gauges`, which remembers what it exported so that nothing outlives its job, rule or policy.

mod books;
mod checkpoints;
mod clock;
mod counted;
mod gauges;
mod history;
mod lead;
pub mod ledger;
mod on_exception;
mod on_job;
mod on_policy;
mod on_signals;
mod outgoing;
mod requests;
mod run;
mod stale;
mod status;
mod verdicts;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use tracing::debug;
use trainwarden_core::{
    EngineConfig, Evaluator, Event, JobKey, NormalizeError, PolicyId, PolicyKind, Timestamp,
};
use trainwarden_kube::ProgressPolicyStatus;
use trainwarden_notify::Notifier;

use crate::messages::{FoundSuspension, Input, SourceHealth, VerdictSave, Work};
use crate::metrics::Metrics;
use crate::runtime::config::ControllerConfig;
use books::PolicyBook;
use gauges::JobGauges;
use history::HistoryBook;
use ledger::Ledger;
pub use run::{Channels, run};
use verdicts::VerdictBook;

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
    /// A graceful stop has begun ([`Brain::stop_acting`]): the executor starts no new action, so an intent
    /// it answers "not leader" is parked for the next leader, not due again at once.
    stopping: bool,
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
    /// Each TrainJob's checkpoint request and the checkpoint its report names (see `requests`).
    requests: requests::RequestBook,
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
            stopping: false,
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
            requests: requests::RequestBook::default(),
        }
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

    /// Handles one input at `now`: one handler per input (see the module's map); the resulting work is in
    /// [`Brain::work`].
    pub fn handle(&mut self, input: Input, now: Timestamp) {
        match input {
            Input::Job(job) => self.on_job(*job, now),
            Input::JobGone(key) => self.on_job_gone(key, now),
            Input::JobsListed => self.on_jobs_listed(),
            Input::Policy(p) => self.on_policy(*p, now),
            Input::PolicyGone(key) => self.on_policy_gone(key, now),
            Input::PoliciesListed(kind) => {
                self.policy_kinds_listed.insert(kind);
            }
            Input::Exception(e) => self.on_exception(*e, now),
            Input::ExceptionGone(key) => self.on_exception_gone(key, now),
            Input::ExceptionsListed => self.exceptions_listed = true,
            Input::Namespace { name, labels } => self.on_namespace(&name, labels),
            Input::GpuReadings(readings) => self.on_gpu_readings(readings, now),
            Input::GpuHistory(steps) => self.on_gpu_history(steps, now),
            Input::GpuMetrics(health) => self.gpu_health = Some(health),
            Input::QueueDemand(queues) => self.on_queue_demand(queues, now),
            Input::KueueQueues(health) => self.on_kueue_health(health, now),
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
        self.sync_requests(now);
        self.metrics.actions_owed.set(self.ledger.len() as i64);
    }

    /// On the leader, the checkpoint-request work due now (see `requests`).
    fn sync_requests(&mut self, now: Timestamp) {
        if self.leading {
            let ledger = &self.ledger;
            let waited_on = |_: &JobKey, intents: &[String]| intents.iter().any(|i| ledger.owed(i).is_some());
            let work = self.requests.due(now, waited_on);
            self.work.extend(work);
        }
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
            self.work.push(Work::Act(Box::new(crate::messages::Act::new(intent))));
        }
        self.metrics.actions_owed.set(self.ledger.len() as i64);
        self.sync_requests(now);
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
        let (history, verdicts, requests) = if self.leading {
            (self.history.next_retry(), self.verdicts.next_retry(), self.requests.next_due())
        } else {
            (None, None, None)
        };
        [self.evaluator.next_tick(), self.ledger.next_due(), history, verdicts, requests]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether this replica leads (as the brain last heard).
    pub fn leading(&self) -> bool {
        self.leading
    }
}

#[cfg(test)]
mod tests;
