//! Replay: recorded streams through the same evaluator the controller runs, on the stream's own clock.
//!
//! The driver feeds records in time order and calls [`Evaluator::tick`] at every timer deadline between
//! them, so time-driven rules (stalls, `for`, `keepFiringFor`, calendar windows) fire exactly as they would
//! have live. Enforced suspensions are simulated: once a suspend intent in Enforce mode is issued for a job,
//! the job counts as suspended and its later records are ignored (they describe a run that would not have
//! happened). Savings are counted once per job, at its first (would-be) suspension.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::evaluate::{EngineConfig, Evaluator, Event};
use crate::input::sample::{JobKey, JobPhase, JobSnapshot};
use crate::input::stream::StreamRecord;
use crate::policy::compile::CompiledPolicy;
use crate::policy::{ActionSpec, Mode};
use crate::time::Timestamp;

mod render;
#[cfg(test)]
mod tests;

pub use render::{event_json, render_event, render_summary, render_text, summary_json};

pub mod shard;

/// What the replay knows of one job.
#[derive(Default)]
struct ReplayJob {
    /// The job as its records describe it (`None` before its first metadata, and after its deletion).
    snapshot: Option<JobSnapshot>,
    /// An enforced suspension stopped it: its later records are ignored.
    suspended: bool,
    /// Its labels as last known (kept after its deletion), for why a policy did not select it.
    labels: std::collections::BTreeMap<String, String>,
}

/// What the summary needs of a policy to say which jobs it did not select, and why.
struct Selection {
    reference: crate::policy::PolicyRef,
    scope: crate::policy::PolicyScope,
    selector: crate::policy::LabelSelector,
    /// Its calendar, to say when it was never active.
    env: std::sync::Arc<crate::history::job::PolicyEnv>,
}

/// A metric a rule watches that no record of the replay reported: the rule could not fire on it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnreportedMetric {
    /// `ProgressPolicy ml/p`.
    pub policy: String,
    /// The rule.
    pub rule: String,
    /// The metric name it watches.
    pub metric: String,
}

/// The jobs a policy did not select, by reason (`"in another namespace"`, …), judged on each job's last labels.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotSelected {
    /// `ClusterProgressPolicy reclaim-hung`.
    pub policy: String,
    /// How many jobs it selected.
    pub selected: u64,
    /// Jobs it did not select, by reason.
    pub reasons: BTreeMap<String, u64>,
}

/// What [`Replay::run_timers_marked`] calls after each evaluation round: the replay, the round's time, and
/// how many of the new events are the round's own.
type Mark<'a> = dyn FnMut(&mut Replay, Timestamp, usize) + 'a;

/// The replay state machine.
pub struct Replay {
    evaluator: Evaluator,
    /// The index in `jobs` of every job seen.
    job_ids: FxHashMap<JobKey, usize>,
    /// What the replay knows of each job, kept after its deletion (the summary counts distinct jobs).
    jobs: Vec<ReplayJob>,
    /// Jobs whose savings were counted, per mode (an enforced suspension counts even after an audit one).
    saved_for: [FxHashSet<JobKey>; 2],
    clock: Option<Timestamp>,
    scratch: Vec<Event>,
    /// Each policy's scope and selector, for the summary's `selection` lines.
    selections: Vec<Selection>,
    /// Namespaces' labels as given (`--namespace-labels`, the streams' `namespaceLabels`).
    namespace_labels: FxHashMap<String, BTreeMap<String, String>>,
    /// (policy, rule, metric) of every metric a rule watches.
    watched: Vec<(String, String, String)>,
    /// The watched metric names no record has reported yet: checked on each sample only while some remain.
    unseen: Vec<String>,
    /// Everything that happened, in order.
    pub events: Vec<Event>,
    /// Totals so far; [`Replay::finish`] completes them.
    pub summary: Summary,
}

/// Totals of a replay.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Stream records fed.
    pub records: u64,
    /// Distinct jobs seen.
    pub jobs: usize,
    /// Records ignored because an enforced suspension had already stopped their job.
    pub ignored_after_suspend: u64,
    /// Transitions to firing, over every rule and job.
    pub firings: u64,
    /// Rule evaluations that failed (script errors), each a [`Event::RuleError`].
    pub rule_errors: u64,
    /// Intents by action kind and mode, e.g. `suspend/Enforce`.
    pub intents: BTreeMap<String, u64>,
    /// GPU-hours and dollars freed by enforced suspensions.
    pub saved: SavingsTotal,
    /// What audit-mode suspensions would have freed.
    pub would_save: SavingsTotal,
    /// Time of the first record, where the replay's clock starts.
    pub first_record: Option<Timestamp>,
    /// Where the clock stopped: the last record or timer run, or `until` of [`Replay::finish`].
    pub last_time: Option<Timestamp>,
    /// Metrics rules watch that no record reported (their rules could not fire on them), from
    /// [`Replay::finish`].
    pub unreported_metrics: Vec<UnreportedMetric>,
    /// Policies that did not select every job, and why, from [`Replay::finish`].
    pub not_selected: Vec<NotSelected>,
    /// Jobs with reports out of order or stamped by a clock that jumped ahead, from [`Replay::finish`].
    pub odd_reports: Vec<OddReports>,
    /// Policies whose `activeWindows` never opened between the first record and the end: their rules judged
    /// nothing (`ProgressPolicy ml/p`), from [`Replay::finish`].
    pub never_active: Vec<String>,
}

/// A job's reports that were not judged at their own `lastUpdatedTime`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OddReports {
    /// `namespace/name`.
    pub job: String,
    /// Reports older than the one before them: dropped (as the controller drops them).
    pub out_of_order: u64,
    /// Reports stamped more than 5 minutes after their line's time: judged at that time, as the controller
    /// judges a report at its arrival.
    pub stamped_ahead: u64,
}

/// GPU time freed by suspensions in one mode, each job counted once.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SavingsTotal {
    /// Jobs whose suspension was counted.
    pub jobs: u64,
    /// GPU-hours freed.
    pub gpu_hours: f64,
    /// Dollars freed by the suspensions whose policy sets a GPU-hour price; `None` when none does (the
    /// cost is unknown, not zero).
    pub dollars: Option<f64>,
    /// Jobs counted whose policy sets no `gpuHourCost`: their dollars are unknown and not in `dollars`.
    pub unpriced_jobs: u64,
}

impl Replay {
    /// Policies with the same kind, namespace and name would replace each other silently; that is an error
    /// that names where each is defined (`validate` says the same of the same files).
    pub fn check_unique(policies: &[CompiledPolicy]) -> Result<(), String> {
        let mut seen: std::collections::HashMap<_, &CompiledPolicy> = std::collections::HashMap::new();
        for p in policies {
            let r = &p.reference;
            if let Some(first) = seen.insert((r.kind, r.namespace.clone(), r.name.clone()), p) {
                let at = |p: &CompiledPolicy| p.origin.clone().unwrap_or_else(|| "a document".into());
                return Err(format!(
                    "{} {r} is defined twice: in {} and in {}; give each policy once",
                    r.kind,
                    at(first),
                    at(p)
                ));
            }
        }
        Ok(())
    }

    /// A replay of `policies`, loaded at the Unix epoch; the clock starts with the first record fed.
    pub fn new(policies: Vec<CompiledPolicy>, config: EngineConfig) -> Self {
        let mut evaluator = Evaluator::new(config);
        let mut events = Vec::new();
        let start = Timestamp::UNIX_EPOCH;
        let mut selections = Vec::new();
        let mut watched = Vec::new();
        let mut unseen: Vec<String> = Vec::new();
        for p in policies {
            let policy = format!("{} {}", p.reference.kind, p.reference);
            for rule in &p.rules {
                for metric in &rule.watched_metrics {
                    watched.push((policy.clone(), rule.name.clone(), metric.clone()));
                    if !unseen.contains(metric) {
                        unseen.push(metric.clone());
                    }
                }
            }
            selections.push(Selection {
                reference: p.reference.clone(),
                scope: p.scope.clone(),
                selector: p.selector.clone(),
                env: p.env.clone(),
            });
            evaluator.upsert_policy(p, start, &mut events);
        }
        Replay {
            evaluator,
            job_ids: FxHashMap::default(),
            jobs: Vec::new(),
            saved_for: [FxHashSet::default(), FxHashSet::default()],
            clock: None,
            scratch: Vec::new(),
            selections,
            namespace_labels: FxHashMap::default(),
            watched,
            unseen,
            events,
            summary: Summary::default(),
        }
    }

    /// Adds ProgressPolicyExceptions, in force from the start (before the first record).
    pub fn add_exceptions(&mut self, exceptions: Vec<crate::CompiledException>) {
        let start = self.clock.unwrap_or(Timestamp::UNIX_EPOCH);
        for e in exceptions {
            self.evaluator.upsert_exception(e, start, &mut self.events);
        }
    }

    /// The evaluator being driven, for rule states and job histories.
    pub fn evaluator(&self) -> &Evaluator {
        &self.evaluator
    }

    /// The labels of `namespace`, for cluster policies' namespaceSelector (a recorded stream has none).
    pub fn set_namespace_labels(
        &mut self,
        namespace: &str,
        labels: std::collections::BTreeMap<String, String>,
    ) {
        if self.namespace_labels.get(namespace) == Some(&labels) {
            return;
        }
        self.namespace_labels.insert(namespace.to_string(), labels.clone());
        self.evaluator.set_namespace_labels(namespace, labels);
    }

    /// Notes the watched metrics `sample` reports (only while some have not been seen: a cheap no-op after).
    fn saw(&mut self, sample: Option<&crate::input::sample::ProgressSample>) {
        if self.unseen.is_empty() {
            return;
        }
        if let Some(sample) = sample {
            self.unseen.retain(|name| sample.metric(name).is_none());
        }
    }

    /// Runs timers up to and including `until`.
    pub fn advance_to(&mut self, until: Timestamp) {
        self.run_timers(until, true);
    }

    /// Timers due before (or, with `inclusive`, at) `until`. A record at time T is applied after the
    /// timers before T and before those at T, so a sample arriving exactly at a stall limit counts.
    fn run_timers(&mut self, until: Timestamp, inclusive: bool) {
        self.run_timers_marked(until, inclusive, &mut |_, _, _| {});
    }

    /// [`Replay::run_timers`], calling `mark` after each timer round's events: with the round's time and how
    /// many of the new events are the round's own (the rest follow up enforced suspensions).
    fn run_timers_marked(&mut self, until: Timestamp, inclusive: bool, mark: &mut Mark<'_>) {
        if self.clock.is_none() {
            return; // Time starts with the first record.
        }
        while let Some(t) = self.evaluator.next_tick() {
            if t > until || (!inclusive && t == until) {
                break;
            }
            self.evaluator.tick(t, &mut self.scratch);
            self.clock = Some(t);
            let counted = self.drain(t);
            mark(self, t, counted);
        }
        if self.clock.is_some_and(|c| c < until) {
            self.clock = Some(until);
        }
        self.summary.last_time = self.clock;
    }

    /// Feeds one record (records must come in time order; earlier ones are applied at the current time).
    /// The timers due at its time run after it, whether it is applied or ignored (its job was suspended),
    /// so where they run depends only on the records' times: the sharded replay ([`shard`]) relies on it.
    pub fn feed(&mut self, record: StreamRecord) {
        let time = self.begin_record(record.time());
        self.apply_record(record, time);
        self.run_timers(time, true);
    }

    /// Before a record at `time`: starts the clock at the first record, runs the timers due before it, and
    /// returns the time the record is applied at.
    fn begin_record(&mut self, time: Timestamp) -> Timestamp {
        self.begin_record_marked(time, &mut |_, _, _| {})
    }

    /// [`Replay::begin_record`], calling `mark` as [`Replay::run_timers_marked`] does.
    fn begin_record_marked(&mut self, time: Timestamp, mark: &mut Mark<'_>) -> Timestamp {
        let time = time.max(self.clock.unwrap_or(time));
        if self.clock.is_none() {
            self.clock = Some(time);
            self.summary.first_record = Some(time);
            // The calendar and the timer cadence start with the stream.
            self.evaluator.tick(time, &mut self.scratch);
            let counted = self.drain(time);
            mark(self, time, counted);
        }
        self.run_timers_marked(time, false, mark);
        time
    }

    /// The record itself, at `time` (from [`Replay::begin_record`]); the timers at `time` are the caller's.
    /// Returns how many of the new events are the record's own (the rest follow up a suspension).
    fn apply_record(&mut self, record: StreamRecord, time: Timestamp) -> usize {
        self.summary.records += 1;
        // One map per record: the hot path (a progress line of a known job) does not clone the key.
        let u = match record {
            StreamRecord::Object { snapshot, .. } => {
                let snapshot = *snapshot;
                self.saw(snapshot.sample.as_ref());
                let job = self.job_entry(&snapshot.key);
                if job.suspended {
                    self.summary.ignored_after_suspend += 1;
                    return 0;
                }
                job.labels.clone_from(&snapshot.labels);
                job.snapshot = Some(snapshot.clone());
                self.evaluator.observe(snapshot, time, &mut self.scratch);
                self.summary.jobs = self.jobs.len();
                return self.drain(time);
            }
            StreamRecord::Update(u) => u,
        };
        self.saw(u.sample.as_ref());
        if let Some(labels) = &u.namespace_labels {
            let namespace = u.job.namespace.clone();
            self.set_namespace_labels(&namespace, labels.clone());
        }
        let job = self.job_entry(&u.job);
        if job.suspended {
            self.summary.ignored_after_suspend += 1;
            return 0;
        }
        let key = &u.job;
        if u.deleted {
            job.snapshot = None;
            self.evaluator.forget_job(key, time, &mut self.scratch);
        } else if u.phase.is_none() && u.labels.is_none() && u.gpus.is_none() && job.snapshot.is_some() {
            // GPU readings and queue demand are recorded first: a progress sample on the same line is
            // judged with them.
            if let Some(gpu) = &u.gpu {
                self.evaluator.record_gpu(key, gpu, time);
            }
            if u.queue.is_some() {
                self.evaluator.record_queue(key, u.queue, time);
            }
            // Only progress: the hot path, no metadata copy.
            match u.sample {
                Some(sample) => self.evaluator.observe_sample(key, sample, time, &mut self.scratch),
                None => self.evaluator.tick_job(key, time, &mut self.scratch),
            }
        } else {
            let snapshot = job.snapshot.get_or_insert_with(|| JobSnapshot::new(key.clone()));
            if let Some(phase) = u.phase {
                if phase == JobPhase::Running && snapshot.phase != JobPhase::Running {
                    snapshot.running_since = Some(time);
                }
                snapshot.phase = phase;
            }
            if let Some(labels) = u.labels {
                job.labels.clone_from(&labels);
                snapshot.labels = labels;
            }
            if let Some(g) = u.gpus {
                snapshot.gpus = Some(g);
            }
            if snapshot.running_since.is_none() {
                snapshot.running_since = Some(time);
            }
            let mut update = snapshot.clone();
            update.sample = u.sample;
            if let Some(gpu) = &u.gpu {
                self.evaluator.record_gpu(key, gpu, time);
            }
            if u.queue.is_some() {
                self.evaluator.record_queue(key, u.queue, time);
            }
            self.evaluator.observe(update, time, &mut self.scratch);
        }
        self.summary.jobs = self.jobs.len();
        self.drain(time)
    }

    /// Runs timers to `until` (if given) and returns the summary.
    pub fn finish(&mut self, until: Option<Timestamp>) -> &Summary {
        if let Some(u) = until {
            self.advance_to(u);
        }
        self.summary.jobs = self.jobs.len();
        self.summary.unreported_metrics = self
            .watched
            .iter()
            .filter(|(_, _, metric)| self.unseen.contains(metric))
            .map(|(policy, rule, metric)| UnreportedMetric {
                policy: policy.clone(),
                rule: rule.clone(),
                metric: metric.clone(),
            })
            .collect();
        self.summary.not_selected = self.not_selected(false);
        if let (Some(first), Some(last)) = (self.summary.first_record, self.summary.last_time) {
            self.summary.never_active = self
                .selections
                .iter()
                .filter(|s| {
                    let calendar = &s.env.calendar;
                    !calendar.is_active(first) && calendar.next_change_after(first).is_none_or(|t| t > last)
                })
                .map(|s| format!("{} {}", s.reference.kind, s.reference))
                .collect();
        }
        let mut odd: Vec<OddReports> = self
            .job_ids
            .keys()
            .filter_map(|key| {
                let series = &self.evaluator.job(key)?.series;
                (series.out_of_order + series.stamped_ahead > 0).then(|| OddReports {
                    job: key.to_string(),
                    out_of_order: series.out_of_order,
                    stamped_ahead: series.stamped_ahead,
                })
            })
            .collect();
        odd.sort_by(|a, b| a.job.cmp(&b.job));
        self.summary.odd_reports = odd;
        &self.summary
    }

    /// Why the `policy`-th policy given does not select `job` (judged on the job's last labels and its
    /// namespace's labels as given), `None` when it does or the job is unknown.
    pub fn why_not_selected(&self, policy: usize, job: &JobKey) -> Option<String> {
        let s = self.selections.get(policy)?;
        let id = *self.job_ids.get(job)?;
        self.reason_not_selected(s, job, &self.jobs[id].labels)
    }

    fn reason_not_selected(
        &self,
        s: &Selection,
        key: &JobKey,
        labels: &BTreeMap<String, String>,
    ) -> Option<String> {
        match &s.scope {
            crate::policy::PolicyScope::Namespace(ns) if *ns != key.namespace => {
                Some("in another namespace".to_string())
            }
            crate::policy::PolicyScope::Cluster { namespace_selector, .. } if !namespace_selector.is_empty() => {
                match self.namespace_labels.get(&key.namespace) {
                    None => Some(
                        "in a namespace whose labels are unknown (give them with --namespace-labels FILE, or \
                         record them)"
                            .to_string(),
                    ),
                    Some(ns_labels) if !namespace_selector.matches(ns_labels) => {
                        Some("in a namespace its namespaceSelector does not match".to_string())
                    }
                    Some(_) => None,
                }
            }
            _ => None,
        }
        .or_else(|| (!s.selector.matches(labels)).then(|| "whose labels its selector does not match".into()))
    }

    /// Per policy that did not select every job: how many it did select, and why not the others (judged on
    /// each job's last labels and its namespace's labels as given).
    /// With `every_policy`, the policies that selected every job too (a shard's, for the sum over shards).
    fn not_selected(&self, every_policy: bool) -> Vec<NotSelected> {
        let mut out = Vec::new();
        for s in &self.selections {
            let mut selected = 0;
            let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
            for (key, &id) in &self.job_ids {
                let labels = &self.jobs[id].labels;
                let reason = self.reason_not_selected(s, key, labels);
                match reason {
                    None => selected += 1,
                    Some(r) => *reasons.entry(r).or_default() += 1,
                }
            }
            if every_policy || !reasons.is_empty() {
                out.push(NotSelected {
                    policy: format!("{} {}", s.reference.kind, s.reference),
                    selected,
                    reasons,
                });
            }
        }
        out
    }

    /// The job's entry, made on its first record (the key is cloned only then).
    fn job_entry(&mut self, key: &JobKey) -> &mut ReplayJob {
        // One lookup for a known job (a map of indices: a map of entries would need two, `get_mut` then
        // `insert`, as the borrow of a found entry cannot be returned conditionally).
        let id = match self.job_ids.get(key) {
            Some(&id) => id,
            None => {
                self.job_ids.insert(key.clone(), self.jobs.len());
                self.jobs.push(ReplayJob::default());
                self.jobs.len() - 1
            }
        };
        &mut self.jobs[id]
    }

    /// Moves the evaluation's new events to `events`, counting them, then simulates its enforced
    /// suspensions (their follow-up events go after). Returns how many events were the evaluation's.
    fn drain(&mut self, now: Timestamp) -> usize {
        let counted = self.scratch.len();
        let mut suspend_now = Vec::new();
        for event in self.scratch.drain(..) {
            count_event(&mut self.summary, &mut self.saved_for, &event);
            if let Event::Intent(intent) = &event
                && let ActionSpec::Suspend(_) = intent.action
                && intent.mode == Mode::Enforce
            {
                suspend_now.push(intent.job.clone());
            }
            self.events.push(event);
        }
        for key in suspend_now {
            let job = self.job_entry(&key);
            let newly = !std::mem::replace(&mut job.suspended, true);
            if newly && let Some(snapshot) = job.snapshot.as_mut() {
                snapshot.phase = JobPhase::Suspended;
                let mut update = snapshot.clone();
                update.sample = None;
                self.evaluator.observe(update, now, &mut self.scratch);
                let more: Vec<Event> = self.scratch.drain(..).collect();
                self.events.extend(more);
            }
        }
        counted
    }
}

/// Counts an event of an evaluation in the summary: firings, rule errors, intents, and each job's savings
/// at its first suspension per mode (`saved_for`). The follow-ups of a suspension are not counted.
fn count_event(summary: &mut Summary, saved_for: &mut [FxHashSet<JobKey>; 2], event: &Event) {
    match event {
        Event::Transition { kind, .. } if *kind == crate::evaluate::TransitionKind::Firing => {
            summary.firings += 1;
        }
        Event::RuleError { .. } => summary.rule_errors += 1,
        Event::Intent(intent) => {
            *summary
                .intents
                .entry(format!("{}/{}", intent.action.kind(), intent.mode.as_str()))
                .or_default() += 1;
            if let ActionSpec::Suspend(_) = intent.action {
                let bucket = usize::from(intent.mode == Mode::Enforce);
                if let Some(s) = &intent.savings
                    && saved_for[bucket].insert(intent.job.clone())
                {
                    let total = match intent.mode {
                        Mode::Enforce => &mut summary.saved,
                        Mode::Audit => &mut summary.would_save,
                    };
                    total.jobs += 1;
                    total.gpu_hours += s.gpu_hours;
                    match s.dollars {
                        Some(d) => *total.dollars.get_or_insert(0.0) += d,
                        None => total.unpriced_jobs += 1,
                    }
                }
            }
        }
        _ => {}
    }
}
