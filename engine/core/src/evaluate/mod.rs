//! The evaluator: per-job history, per-(job, rule) firing lifecycle, and action intents.
//!
//! ```text
//!   JobSnapshot ──observe──▶ JobSeries (history) ──▶ rules of every selecting policy ──▶ Events
//!   time ────────tick─────▶ (timers: stalled, for, keepFiringFor, calendar windows) ──┘
//! ```
//!
//! Lifecycle per job × rule, as Prometheus alerting rules: inactive → pending (while `for` has not elapsed)
//! → firing → resolved after the condition has been false for `keepFiringFor`. Entering firing issues one
//! [`ActionIntent`] per action, unless the same action was issued for the same job and rule less than
//! `cooldown` ago. Intents are descriptions; the executor performs them, or in Audit mode only reports them.
//!
//! A suspended job's rules are frozen (neither evaluated nor resolved); a finished job's rules resolve, and
//! so do all rules of a policy outside its active windows.
//!
//! The evaluator is sans-IO and clock-free: every call takes `now`, so the controller (wall clock), replay
//! and `trainwarden test` (the stream's clock) share this exact code path. Callers drive time with
//! [`Evaluator::tick`] at [`Evaluator::next_tick`]; the replay driver does so between samples, which is how a
//! stall fires with no new sample arriving. `next_tick` is exact: each job carries one timer, the earliest of
//! its pending rules' `for`, its firing rules' `keepFiringFor`, its time-driven detectors' deadlines
//! ([`crate::judge::detectors::Detector::wake_at`], also for `stalled()` inside a script) and the instants
//! its compiled conditions' comparisons may change (`runtime() > 86400.0`), in every rule state, so such
//! rules fire and resolve on the second they are due. The `eval_interval` rounds re-evaluate only jobs of policies that read the clock
//! in a way no wake announces ([`CompiledPolicy::reads_the_clock`]: a product of two clocks, a comparison
//! with `now()`, or a script of a shape that is not compiled and calls `hour()`), so idle time costs nothing
//! for the rest.

//!
//! The parts: `event` (what evaluation reports), `job_eval` (one job: its snooze and exceptions, then every
//! rule of every policy selecting it), `lifecycle` (one rule's step, a method of its track taking a
//! `context::RuleContext`), `timers` (the wake queue), `memory` (rule memories across restarts), `limits`,
//! `snooze`, `exceptions` (what holds an action back), `savings`, `checkpoint` (a job's history, stored),
//! `checkpoint_request` (a training checkpoint asked of a running job: its id, outcome and record), `cohorts`
//! (the sweeps' shared memory).

mod checkpoint;
mod checkpoint_request;
mod cohorts;
mod context;
mod event;
mod exceptions;
mod job_eval;
mod job_table;
mod lifecycle;
mod limits;
mod memory;
mod savings;
mod snooze;
mod timers;

pub use checkpoint::{
    CHECKPOINT_VERSION, HistoryCheckpoint, HistoryRefused, HistoryRestored, MAX_CHECKPOINT_BYTES,
};
pub use checkpoint_request::{
    CHECKPOINT_ANNOTATION, CHECKPOINT_REQUEST_ANNOTATION, CheckpointRequest, MAX_REASON_CHARS, MAX_WAITERS,
    RequestOutcome, RequestRecord,
};
use context::RuleContext;
pub use event::{
    ActionIntent, Event, ExceptionEnd, Limit, LimitKind, Reason, Resolution, RuleState, Savings,
    SavingsBasis, Snooze, SnoozeCap, SnoozeChange, SnoozeEnd, TransitionKind,
};
use job_table::JobTable;
pub use memory::RuleMemory;
use memory::claim_memories;
pub use snooze::SNOOZE_ANNOTATION;
use snooze::SnoozeTrack;

use std::collections::{BTreeMap, HashMap};

use crate::history::job::JobData;
use crate::history::job_series::{JobSeries, Recorded};
use crate::input::gpu::GpuSample;
use crate::input::queue::QueueDemand;
use crate::input::sample::{JobKey, JobPhase, JobSnapshot, ProgressSample};
use crate::judge::detectors::DetectorState;
use crate::judge::script::{Limits, ScriptEngine};
use crate::policy::PolicyRef;
use crate::policy::compile::CompiledPolicy;
use crate::time::Timestamp;
use crate::units::duration::PolicyDuration;

/// Engine settings shared by every policy.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How often jobs without new samples are re-evaluated (timers' resolution).
    pub eval_interval: PolicyDuration,
    /// Resource limits of rule scripts.
    pub limits: Limits,
    /// Run conditions of the common shapes natively (the default; see `judge::script::native`). `false`
    /// runs every condition in Rhai, as benchmarks' baseline does.
    pub native_conditions: bool,
    /// The longest an owner's snooze ([`SNOOZE_ANNOTATION`]) holds a job's actions, counted from when the
    /// evaluator first saw the annotation's value on the job (default 24h; zero allows no snooze).
    pub max_snooze: PolicyDuration,
    /// At most this many Enforce firings that suspend or scale a job in any rolling hour, over every
    /// policy (the controller's `--max-actions-per-hour`; see the `limits` module). `None`: no cap.
    pub max_actions_per_hour: Option<u32>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            eval_interval: PolicyDuration::from_secs(30),
            limits: Limits::default(),
            native_conditions: true,
            max_snooze: PolicyDuration::from_secs(24 * 3600),
            max_actions_per_hour: None,
        }
    }
}

/// Where one rule is for one job, with the instants each state needs (Prometheus' `ActiveAt`, `FiredAt`,
/// `KeepFiringSince`). Memories restored from a status may lack an instant, hence the options.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Alert {
    #[default]
    Inactive,
    /// The condition holds; the rule fires once `for` has elapsed since `since`.
    Pending { since: Option<Timestamp> },
    /// Fired at `since`. `cleared_at`: when the condition last turned false (`keepFiringFor` runs from there).
    Firing { since: Option<Timestamp>, cleared_at: Option<Timestamp> },
}

impl Alert {
    /// From what a restored memory says.
    fn restored(state: RuleState, since: Option<Timestamp>, cleared_at: Option<Timestamp>) -> Alert {
        match state {
            RuleState::Inactive => Alert::Inactive,
            RuleState::Pending => Alert::Pending { since },
            RuleState::Firing => Alert::Firing { since, cleared_at },
        }
    }

    fn state(self) -> RuleState {
        match self {
            Alert::Inactive => RuleState::Inactive,
            Alert::Pending { .. } => RuleState::Pending,
            Alert::Firing { .. } => RuleState::Firing,
        }
    }

    /// Pending since or firing since.
    fn since(self) -> Option<Timestamp> {
        match self {
            Alert::Inactive => None,
            Alert::Pending { since } | Alert::Firing { since, .. } => since,
        }
    }

    fn cleared_at(self) -> Option<Timestamp> {
        match self {
            Alert::Firing { cleared_at, .. } => cleared_at,
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct RuleTrack {
    alert: Alert,
    detector_state: DetectorState,
    firings: u64,
    last_issued: Vec<Option<Timestamp>>,
    last_error: Option<String>,
    last_reason: Reason,
    /// From the last evaluation of a script: when a time-driven function in it would turn true.
    script_wake: Option<Timestamp>,
    /// Firing with its actions held by a blast-radius limit (see the `limits` module).
    held: Option<limits::Hold>,
    /// By action position: when an action deferred by its `grace` is due (see [`lifecycle::issue`]).
    deferred: Vec<Option<Timestamp>>,
    /// It fired while a snooze held its policy and has issued nothing since: what a policy's snooze cap
    /// releases (kept across a restart in the rule's memory).
    snooze_held: bool,
    /// It fired while this exception held its actions and has issued nothing since: the exception's end
    /// releases it (see the `exceptions` module; kept across a restart in the rule's memory).
    /// (Boxed: most tracks never have one.)
    excepted: Option<Box<crate::policy::exception::ExceptionRef>>,
}

struct JobEntry {
    data: Option<Box<JobData>>,
    last_evaluated: Option<Timestamp>,
    /// The job's timer: the earliest time its rules may change with no new sample. The entry
    /// `(wake, id)` in [`Evaluator::wakes`] is live; any other entry of the job's id there is stale.
    wake: Option<Timestamp>,
    /// Rule tracks by policy index, then rule index; empty for policies that never selected the job.
    tracks: Vec<Vec<RuleTrack>>,
    /// Policies selecting the job, recomputed only when its labels or the policy set change (the hot path
    /// — a new sample — never clones labels or re-matches selectors).
    selected_by: Vec<usize>,
    selection_stale: bool,
    /// The owner's snooze ([`SNOOZE_ANNOTATION`]), read at each evaluation.
    snooze: SnoozeTrack,
}

impl JobEntry {
    /// A job first seen at `now`, with default metadata until a snapshot says more.
    fn new(key: &JobKey, now: Timestamp) -> JobEntry {
        JobEntry {
            data: Some(Box::new(JobData {
                series: JobSeries::new(now),
                gpu: Default::default(),
                queue: None,
                snapshot: JobSnapshot::new(key.clone()),
                first_seen: now,
                cohort: None,
            })),
            last_evaluated: None,
            wake: None,
            tracks: Vec::new(),
            selected_by: Vec::new(),
            selection_stale: true,
            snooze: SnoozeTrack::default(),
        }
    }

    fn tracks_mut(&mut self, policy: usize, rules: usize) -> &mut Vec<RuleTrack> {
        if self.tracks.len() <= policy {
            self.tracks.resize_with(policy + 1, Vec::new);
        }
        let tracks = &mut self.tracks[policy];
        if tracks.len() < rules {
            tracks.resize_with(rules, RuleTrack::default);
        }
        tracks
    }
}

struct PolicySlot {
    policy: CompiledPolicy,
    /// Cached next calendar change after the last tick, so `next_tick` is cheap.
    next_calendar_change: Option<Timestamp>,
    /// Whether the calendar is active, valid until `next_calendar_change` (a cron search per evaluation
    /// would dominate the hot path).
    active: Option<bool>,
    /// [`CompiledPolicy::reads_the_clock`], cached: only its jobs get the `eval_interval` rounds.
    reads_the_clock: bool,
}

impl PolicySlot {
    fn is_active(&self, now: Timestamp) -> bool {
        match (self.active, self.next_calendar_change) {
            (Some(active), Some(change)) if now < change => active,
            (Some(active), None) => active,
            _ => self.policy.env.calendar.is_active(now),
        }
    }
}

/// The evaluation engine.
pub struct Evaluator {
    config: EngineConfig,
    scripts: ScriptEngine,
    /// `None` marks a removed policy (indices stay stable for the job tracks).
    policies: Vec<Option<PolicySlot>>,
    jobs: JobTable,
    namespace_labels: HashMap<String, BTreeMap<String, String>>,
    /// The last cadence tick (jobs of clock-reading policies re-evaluated at least once per `eval_interval`).
    last_tick: Option<Timestamp>,
    /// The next round or calendar change ([`Evaluator::next_tick`] without the jobs' timers).
    next_round: Option<Timestamp>,
    /// Exact timers: `for` and `keepFiringFor` running out, stall deadlines, budgets. Each job has one, its
    /// earliest ([`JobEntry::wake`]); see [`timers::Wakes`] for how they are kept.
    wakes: timers::Wakes,
    /// Job evaluations so far (each evaluates every rule of every policy selecting the job).
    evaluations: u64,
    /// Rule memories restored from a previous run (see [`Evaluator::restore`]), claimed by each job the first
    /// time a policy's rules are set up for it.
    restored: HashMap<(usize, JobKey), Vec<RuleMemory>>,
    /// What the blast-radius limits have counted (see the `limits` module).
    limits: limits::LimitBook,
    /// ProgressPolicyExceptions (see the `exceptions` module).
    exceptions: exceptions::ExceptionBook,
    /// The cohort detectors' memories of every cohort (see the `cohorts` module).
    cohorts: cohorts::CohortBook,
    /// The cohorts' values the `cohort_*` script functions read.
    script_cohorts: cohorts::ScriptCohorts,
}

/// Counters for status and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleCounts {
    /// Jobs the policy's selector matches.
    pub matched_jobs: usize,
    /// (job, rule) pairs firing.
    pub firing: usize,
    /// (job, rule) pairs pending.
    pub pending: usize,
}

impl Evaluator {
    /// An evaluator with no policies and no jobs.
    pub fn new(config: EngineConfig) -> Self {
        let mut scripts = ScriptEngine::new(config.limits.clone());
        scripts.set_native_conditions(config.native_conditions);
        Evaluator {
            config,
            scripts,
            policies: Vec::new(),
            jobs: JobTable::default(),
            namespace_labels: HashMap::new(),
            last_tick: None,
            next_round: None,
            wakes: timers::Wakes::default(),
            evaluations: 0,
            restored: HashMap::new(),
            limits: limits::LimitBook::default(),
            exceptions: exceptions::ExceptionBook::new(),
            cohorts: cohorts::CohortBook::default(),
            script_cohorts: cohorts::ScriptCohorts::default(),
        }
    }

    /// The script engine policies must be compiled with.
    pub fn scripts(&self) -> &ScriptEngine {
        &self.scripts
    }

    /// The settings it was created with.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Adds or replaces (same kind, namespace and name) a policy. Rules of a replaced policy start over: their
    /// firing rules are resolved first, so nothing is left firing under a definition that no longer exists.
    ///
    /// Rules are matched by name: a rule whose definition is unchanged keeps its state (a re-applied or
    /// resynced policy changes nothing); a changed rule resolves and starts over, but keeps its cooldown
    /// history so a policy edit does not re-issue actions the cooldown would suppress. Rules that no longer
    /// exist resolve.
    pub fn upsert_policy(&mut self, policy: CompiledPolicy, now: Timestamp, out: &mut Vec<Event>) {
        let reads_the_clock = policy.reads_the_clock_when(self.scripts.native_conditions());
        let slot = PolicySlot { policy, next_calendar_change: None, active: None, reads_the_clock };
        match self.find_policy(&slot.policy.reference) {
            Some(index) => {
                self.carry_over(index, &slot.policy, now, out);
                self.carry_cohorts_over(index, &slot.policy);
                self.policies[index] = Some(slot);
            }
            None => match self.policies.iter().position(Option::is_none) {
                // Removed policies' slots are reused; retiring emptied their tracks in every job.
                Some(free) => self.policies[free] = Some(slot),
                None => self.policies.push(Some(slot)),
            },
        }
        self.mark_selection_stale();
        self.refresh_calendar(now);
    }

    /// Maps a replaced policy's rule tracks onto the new rules by name (see [`Evaluator::upsert_policy`]).
    fn carry_over(&mut self, index: usize, new: &CompiledPolicy, now: Timestamp, out: &mut Vec<Event>) {
        let Some(old) = self.policies[index].as_ref().map(|s| &s.policy) else { return };
        for key in self.jobs.sorted_keys(|_, _| true) {
            let Some(job) = self.jobs.get_mut(&key) else { continue };
            let Some(old_tracks) = job.tracks.get_mut(index).map(std::mem::take) else { continue };
            if old_tracks.is_empty() {
                continue;
            }
            let mut new_tracks: Vec<RuleTrack> = (0..new.rules.len()).map(|_| RuleTrack::default()).collect();
            for (r, mut track) in old_tracks.into_iter().enumerate() {
                let Some(old_rule) = old.rules.get(r) else { continue };
                match new.rules.iter().position(|n| n.name == old_rule.name) {
                    Some(n) if new.rules[n].fingerprint == old_rule.fingerprint => new_tracks[n] = track,
                    Some(n) => {
                        let history = (std::mem::take(&mut track.last_issued), track.firings);
                        track.resolve(
                            &RuleContext::new(&key, old, old_rule, now),
                            Resolution::RuleChanged,
                            out,
                        );
                        let fresh = &mut new_tracks[n];
                        (fresh.last_issued, fresh.firings) = history;
                        fresh.last_issued.resize(new.rules[n].actions.len(), None);
                    }
                    None => track.resolve(
                        &RuleContext::new(&key, old, old_rule, now),
                        Resolution::RuleChanged,
                        out,
                    ),
                }
            }
            job.tracks[index] = new_tracks;
        }
    }

    /// Maps a replaced policy's cohort memories onto the new rules: an unchanged rule (same name and
    /// definition, same `spec.cohort`) keeps its cohorts, a changed one starts them over.
    fn carry_cohorts_over(&mut self, index: usize, new: &CompiledPolicy) {
        let Some(old) = self.policies[index].as_ref().map(|s| &s.policy) else { return };
        let moves: Vec<(usize, usize)> = if old.cohort == new.cohort {
            (old.rules.iter().enumerate())
                .filter_map(|(r, o)| {
                    let n =
                        new.rules.iter().position(|n| n.name == o.name && n.fingerprint == o.fingerprint)?;
                    Some((r, n))
                })
                .collect()
        } else {
            Vec::new()
        };
        self.cohorts.carry_over(index, &moves);
        if old.cohort != new.cohort || !new.cohort_functions {
            self.script_cohorts.forget_policy(index);
        }
    }

    /// Removes a policy, resolving its firing rules.
    pub fn remove_policy(&mut self, reference: &PolicyRef, now: Timestamp, out: &mut Vec<Event>) {
        if let Some(index) = self.find_policy(reference) {
            self.retire_policy(index, now, out);
            self.policies[index] = None;
            self.limits.forget_policy(index);
            self.cohorts.forget_policy(index);
            self.script_cohorts.forget_policy(index);
            self.restored.retain(|(p, _), _| *p != index);
            self.mark_selection_stale();
            self.update_next_round();
        }
    }

    fn mark_selection_stale(&mut self) {
        for job in self.jobs.values_mut() {
            job.selection_stale = true;
        }
    }

    fn find_policy(&self, r: &PolicyRef) -> Option<usize> {
        self.policies.iter().position(|p| {
            p.as_ref().is_some_and(|p| {
                let q = &p.policy.reference;
                q.kind == r.kind && q.namespace == r.namespace && q.name == r.name
            })
        })
    }

    fn retire_policy(&mut self, index: usize, now: Timestamp, out: &mut Vec<Event>) {
        let Some(slot) = &self.policies[index] else { return };
        for key in self.jobs.sorted_keys(|_, _| true) {
            let Some(job) = self.jobs.get_mut(&key) else { continue };
            job.selected_by.retain(|&p| p != index);
            if let Some(tracks) = job.tracks.get_mut(index) {
                for (r, track) in std::mem::take(tracks).into_iter().enumerate() {
                    track.resolve(
                        &RuleContext::new(&key, &slot.policy, &slot.policy.rules[r], now),
                        Resolution::PolicyRemoved,
                        out,
                    );
                }
            }
        }
    }

    /// The loaded policies.
    pub fn policies(&self) -> impl Iterator<Item = &CompiledPolicy> {
        self.policies.iter().flatten().map(|s| &s.policy)
    }

    /// Namespace labels, for ClusterProgressPolicy namespace selectors.
    pub fn set_namespace_labels(&mut self, namespace: &str, labels: BTreeMap<String, String>) {
        self.namespace_labels.insert(namespace.to_string(), labels);
        for (key, job) in self.jobs.iter_mut() {
            if key.namespace == namespace {
                job.selection_stale = true;
            }
        }
    }

    /// A job appeared or changed (phase, labels, size, and possibly a new sample). Replaces what is known about
    /// the job, records its sample (duplicates are dropped) and evaluates the rules of every selecting policy.
    pub fn observe(&mut self, mut snapshot: JobSnapshot, now: Timestamp, out: &mut Vec<Event>) {
        let sample = snapshot.sample.take();
        let key = snapshot.key.clone();
        // A job that ran again since a policy suspended it, or finished, no longer counts against that
        // policy's maxConcurrentSuspended.
        match snapshot.phase {
            JobPhase::Running => self.limits.job_left(&key, snapshot.running_since),
            JobPhase::Complete | JobPhase::Failed => self.limits.job_left(&key, None),
            JobPhase::Suspended => {}
        }
        let max_snooze = self.config.max_snooze;
        let id = self.job_id(&key, now);
        let Some((_, entry)) = self.jobs.key_and_entry(id) else { return };
        let mut resumed = false;
        if let Some(data) = entry.data.as_mut() {
            if data.snapshot.labels != snapshot.labels {
                entry.selection_stale = true;
            }
            resumed = data.snapshot.phase != JobPhase::Running && snapshot.phase == JobPhase::Running;
            let value = snapshot.annotations.get(SNOOZE_ANNOTATION).map(String::as_str);
            entry.snooze.note(&key, value, now, max_snooze, out);
            data.snapshot = snapshot;
        }
        if resumed {
            self.restart_after_resume(id, now, out);
        }
        let completed = self.jobs.by_id(id).and_then(|e| e.data.as_ref()).map(|d| d.snapshot.phase)
            == Some(JobPhase::Complete);
        self.record_and_evaluate(id, sample, now, out);
        // After its last report: a completed job's values are what `percentile` compares with.
        if completed {
            self.cohorts.finished(id);
        }
    }

    /// A new progress sample of a job whose metadata did not change (the hot path of a watch or a stream).
    /// An unknown job is created with default metadata.
    pub fn observe_sample(
        &mut self,
        key: &JobKey,
        sample: ProgressSample,
        now: Timestamp,
        out: &mut Vec<Event>,
    ) {
        let id = self.job_id(key, now);
        self.record_and_evaluate(id, Some(sample), now, out);
    }

    /// Records a job's GPU readings without evaluating (replay records them before the line's progress
    /// sample). An unknown job is created with default metadata; readings not newer than the latest, or with
    /// no utilization, are ignored.
    pub fn record_gpu(&mut self, key: &JobKey, sample: &GpuSample, now: Timestamp) {
        if let Some(data) = self.entry_or_insert(key, now).data.as_mut() {
            data.gpu.record(sample);
        }
    }

    /// New GPU readings of a job (the controller's Prometheus poll): recorded, then the job is evaluated.
    pub fn observe_gpu(&mut self, key: &JobKey, sample: &GpuSample, now: Timestamp, out: &mut Vec<Event>) {
        self.record_gpu(key, sample, now);
        self.tick_job(key, now, out);
    }

    /// Records the demand queued behind a job in Kueue (the controller's Kueue watch, a stream's `queue`
    /// field; `None` when no longer known) without evaluating. Whether it differs from what was known.
    pub fn record_queue(&mut self, key: &JobKey, demand: Option<QueueDemand>, now: Timestamp) -> bool {
        match self.entry_or_insert(key, now).data.as_mut() {
            Some(data) if data.queue != demand => {
                data.queue = demand;
                true
            }
            _ => false,
        }
    }

    /// [`Evaluator::record_queue`], then the job is evaluated if the demand changed.
    pub fn observe_queue(
        &mut self,
        key: &JobKey,
        demand: Option<QueueDemand>,
        now: Timestamp,
        out: &mut Vec<Event>,
    ) {
        if self.record_queue(key, demand, now) {
            self.tick_job(key, now, out);
        }
    }

    /// The job's id, its entry made on its first sight (the key is cloned only then).
    fn job_id(&mut self, key: &JobKey, now: Timestamp) -> usize {
        match self.jobs.id(key) {
            Some(id) => id,
            None => self.jobs.insert(key.clone(), JobEntry::new(key, now)),
        }
    }

    fn entry_or_insert(&mut self, key: &JobKey, now: Timestamp) -> &mut JobEntry {
        let id = self.job_id(key, now);
        self.jobs.key_and_entry(id).expect("made above").1
    }

    fn record_and_evaluate(
        &mut self,
        id: usize,
        mut sample: Option<ProgressSample>,
        now: Timestamp,
        out: &mut Vec<Event>,
    ) {
        self.refresh_selection(id);
        let Some((key, entry)) = self.jobs.key_and_entry(id) else { return };
        // A report stamped far after `now` (a clock that jumped) is judged as of `now` (`record_at`).
        if let (Some(sample), Some(data)) = (&mut sample, entry.data.as_mut())
            && data.series.record_at(sample, now) == Recorded::New
        {
            // Stateful detectors advance on every new sample, whether or not their policy is active now.
            for i in 0..entry.selected_by.len() {
                let p_index = entry.selected_by[i];
                let Some(Some(slot)) = self.policies.get(p_index) else { continue };
                let rules = &slot.policy.rules;
                entry.tracks_mut(p_index, rules.len());
                claim_memories(&mut self.restored, entry, key, p_index, &slot.policy);
                let Some(data) = entry.data.as_ref() else { continue };
                let series = &data.series;
                let tracks = &mut entry.tracks[p_index];
                if slot.policy.cohort_functions
                    && let Some(cohort) = data.snapshot.labels.get(slot.policy.cohort.label())
                    && let Some(x) = cohorts::position(slot.policy.cohort.align_by, sample)
                {
                    self.script_cohorts.report(p_index, cohort, id, x, sample);
                }
                for (r_index, rule) in rules.iter().enumerate() {
                    if let Some(d) = &rule.detector {
                        d.observe(&mut tracks[r_index].detector_state, series, sample);
                        // A cohort detector judges the report against the job's siblings now, as the
                        // peers do at each report; its stop stays.
                        if let Some(judge) = d.cohort()
                            && let Some((cohort, x, value)) =
                                cohorts::report_of(&slot.policy.cohort, judge, &data.snapshot.labels, sample)
                            && let Some(finding) =
                                self.cohorts.report(p_index, r_index, judge, cohort, id, x, value)
                            && !matches!(tracks[r_index].detector_state, DetectorState::CohortStop(_))
                        {
                            tracks[r_index].detector_state = DetectorState::CohortStop(Box::new(finding));
                        }
                    }
                }
            }
        }
        self.evaluate_job(id, now, out);
    }

    /// A job that runs again starts its judgement afresh: time spent suspended must not count toward `for`
    /// or a detector's patience, or a job resumed on purpose would be suspended again the moment it restarts.
    /// Pending rules clear and detector state resets; firing rules stay firing until they resolve.
    fn restart_after_resume(&mut self, id: usize, now: Timestamp, out: &mut Vec<Event>) {
        let Some((key, entry)) = self.jobs.key_and_entry(id) else { return };
        for (p, tracks) in entry.tracks.iter_mut().enumerate() {
            let Some(Some(slot)) = self.policies.get(p) else { continue };
            for (r, track) in tracks.iter_mut().enumerate() {
                track.detector_state = DetectorState::default();
                if matches!(track.alert, Alert::Pending { .. }) {
                    track.alert = Alert::Inactive;
                    out.push(Event::Transition {
                        at: now,
                        job: key.clone(),
                        policy: slot.policy.reference.clone(),
                        rule: slot.policy.rules[r].name.clone(),
                        kind: TransitionKind::Cleared,
                        reason: Reason {
                            summary: "the job was resumed".into(),
                            resolution: Some(Resolution::JobResumed),
                            ..Reason::default()
                        },
                        mode: slot.policy.rules[r].mode,
                    });
                }
            }
        }
    }

    /// Evaluates one job now without new information (a heartbeat: time passes).
    pub fn tick_job(&mut self, key: &JobKey, now: Timestamp, out: &mut Vec<Event>) {
        if let Some(id) = self.jobs.id(key) {
            self.tick_id(id, now, out);
        }
    }

    /// [`Evaluator::tick_job`] by id.
    fn tick_id(&mut self, id: usize, now: Timestamp, out: &mut Vec<Event>) {
        self.refresh_selection(id);
        self.evaluate_job(id, now, out);
    }

    /// Recomputes which policies select a job, if its labels or the policy set changed.
    fn refresh_selection(&mut self, id: usize) {
        let Some((key, entry)) = self.jobs.key_and_entry(id) else { return };
        if !entry.selection_stale {
            return;
        }
        entry.selection_stale = false;
        let Some(data) = entry.data.as_ref() else { return };
        let ns_labels = self.namespace_labels.get(&key.namespace);
        entry.selected_by = self
            .policies
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| {
                let slot = slot.as_ref()?;
                slot.policy.selects(&key.namespace, &data.snapshot.labels, ns_labels).then_some(i)
            })
            .collect();
    }

    /// A job was deleted: its firing rules resolve and its history is dropped.
    pub fn forget_job(&mut self, key: &JobKey, now: Timestamp, out: &mut Vec<Event>) {
        self.limits.job_left(key, None);
        if let Some(id) = self.jobs.id(key) {
            self.cohorts.forget(id);
            self.script_cohorts.forget(id);
        }
        if let Some((_, job)) = self.jobs.remove(key) {
            self.wakes.settle(&self.jobs);
            for (p, tracks) in job.tracks.into_iter().enumerate() {
                if let Some(Some(slot)) = self.policies.get(p) {
                    for (r, track) in tracks.into_iter().enumerate() {
                        track.resolve(
                            &RuleContext::new(key, &slot.policy, &slot.policy.rules[r], now),
                            Resolution::JobDeleted,
                            out,
                        );
                    }
                }
            }
        }
    }

    /// Rule state of one job, for status and tests.
    pub fn rule_state(&self, job: &JobKey, policy: &PolicyRef, rule: &str) -> Option<RuleState> {
        let p = self.find_policy(policy)?;
        let slot = self.policies[p].as_ref()?;
        let r = slot.policy.rules.iter().position(|x| x.name == rule)?;
        let track = self.jobs.get(job)?.tracks.get(p)?.get(r)?;
        Some(track.alert.state())
    }

    /// The owner's snooze ([`SNOOZE_ANNOTATION`]) holding the job's actions, as of the job's last
    /// evaluation (a snooze ends at the evaluation its timer makes on the second it is due).
    pub fn snooze(&self, job: &JobKey) -> Option<&Snooze> {
        self.jobs.get(job)?.snooze.holding()
    }

    /// Until when the job's snooze holds `policy`'s actions, as of the job's last evaluation: the snooze's
    /// end, or earlier where the policy's `spec.snooze.maxDuration` ends it (`None`: not held).
    pub fn snoozed_until(&self, job: &JobKey, policy: &PolicyRef) -> Option<Timestamp> {
        let entry = self.jobs.get(job)?;
        entry.snooze.holding()?;
        let p = self.find_policy(policy)?;
        let policy = &self.policies[p].as_ref()?.policy;
        if policy.max_snoozes.is_some_and(|m| entry.snooze.count > m) {
            return None;
        }
        let until = entry.snooze.policy_end(policy.max_snooze)?;
        (!entry.snooze.released_policies.contains(&p)).then_some(until)
    }

    /// When the rule entered its pending or firing state for the job (as restored memories keep it too);
    /// `None` while inactive, or when a restored memory did not say.
    pub fn rule_since(&self, job: &JobKey, policy: &PolicyRef, rule: &str) -> Option<Timestamp> {
        let p = self.find_policy(policy)?;
        let slot = self.policies[p].as_ref()?;
        let r = slot.policy.rules.iter().position(|x| x.name == rule)?;
        self.jobs.get(job)?.tracks.get(p)?.get(r)?.alert.since()
    }

    /// Jobs in the job's cohort for a cohort rule (`median_stop`, `percentile`, `successive_halving`), the
    /// job included, as of its last report; `None` when the rule judges no cohort or the job is in none.
    pub fn cohort_size(&self, job: &JobKey, policy: &PolicyRef, rule: &str) -> Option<usize> {
        let p = self.find_policy(policy)?;
        let r = self.policies[p].as_ref()?.policy.rules.iter().position(|x| x.name == rule)?;
        self.cohorts.cohort_size(p, r, self.jobs.id(job)?)
    }

    /// Approximate bytes the cohort detectors' memories hold, over every cohort.
    pub fn cohort_bytes(&self) -> usize {
        self.cohorts.approx_bytes()
    }

    /// Job evaluations so far: what time and samples cost.
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    /// Jobs selected and rules firing/pending per policy.
    pub fn counts(&self, policy: &PolicyRef) -> RuleCounts {
        let Some(p) = self.find_policy(policy) else { return RuleCounts::default() };
        let mut counts = RuleCounts::default();
        for job in self.jobs.values() {
            if job.selected_by.contains(&p) {
                counts.matched_jobs += 1;
            }
            for t in job.tracks.get(p).into_iter().flatten() {
                match t.alert {
                    Alert::Firing { .. } => counts.firing += 1,
                    Alert::Pending { .. } => counts.pending += 1,
                    Alert::Inactive => {}
                }
            }
        }
        counts
    }

    /// Whether `policy` selects the job (as of the job's last evaluation).
    pub fn selects(&self, policy: &PolicyRef, job: &JobKey) -> bool {
        let Some(p) = self.find_policy(policy) else { return false };
        self.jobs.get(job).is_some_and(|j| j.selected_by.contains(&p))
    }

    /// Brings every job's policy selection up to date now; it is otherwise recomputed at the job's next
    /// evaluation, which a finished or quiet job may never have. For views of selection outside evaluation
    /// (the controller's per-job gauges); evaluation itself refreshes a job before judging it either way.
    pub fn refresh_selections(&mut self) {
        let stale = self.jobs.ids_where(|j| j.selection_stale);
        for id in stale {
            self.refresh_selection(id);
        }
    }

    /// Every job the evaluator tracks, in no particular order.
    pub fn job_keys(&self) -> impl Iterator<Item = &JobKey> {
        self.jobs.keys()
    }

    /// Jobs the evaluator tracks.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// The job's history, for status and reports.
    pub fn job(&self, key: &JobKey) -> Option<&JobData> {
        self.jobs.get(key).and_then(|j| j.data.as_deref())
    }

    /// Approximate bytes held per job: history, metadata and rule tracks.
    pub fn job_bytes(&self, key: &JobKey) -> Option<usize> {
        let j = self.jobs.get(key)?;
        let data = j.data.as_ref()?;
        let strings =
            |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| k.len() + v.len() + 48).sum::<usize>();
        Some(
            std::mem::size_of::<JobEntry>()
                + std::mem::size_of::<JobData>()
                + data.series.approx_bytes()
                + data.gpu.heap_bytes()
                + strings(&data.snapshot.labels)
                + strings(&data.snapshot.annotations)
                + j.tracks.iter().map(|t| t.capacity() * std::mem::size_of::<RuleTrack>()).sum::<usize>()
                + j.tracks.iter().flatten().map(|t| t.last_issued.capacity() * 16).sum::<usize>(),
        )
    }
}

#[cfg(test)]
mod exception_tests;
#[cfg(test)]
mod holds_tests;
#[cfg(test)]
mod tests;
