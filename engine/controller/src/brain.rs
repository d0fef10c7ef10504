//! The evaluation loop: one task owns the [`Evaluator`] and the per-policy books, reads [`Input`]s and the
//! clock, and emits [`Work`] for the executor and [`StatusUpdate`]s for the status writer. No I/O here
//! beyond those channels, so [`Brain`] itself is tested with plain `#[test]`s.
//!
//! Restart safety: a policy's status carries its rule memories (`status.ruleStates`). The first time a
//! policy is seen the memories are handed to [`Evaluator::restore`] — before any TrainJob is observed, since
//! the TrainJob watch starts only once the policies are listed — so a pending `for` keeps its original
//! deadline and a firing rule does not fire (and act) again. Memories of jobs that vanished meanwhile are
//! dropped once the TrainJobs are listed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, info, warn};
use trainwarden_core::compile;
use trainwarden_core::{ActionSpec, Mode, PolicyId, PolicyKind, PolicyRef};
use trainwarden_core::{EngineConfig, Evaluator, Event, RuleState, TransitionKind};
use trainwarden_core::{JobKey, Timestamp};
use trainwarden_kube::status::{CONDITION_FIRING, CONDITION_READY, MAX_RULE_STATES};
use trainwarden_kube::{JobStatus, ProgressPolicyStatus};

use crate::config::ControllerConfig;
use crate::executor::{Announcement, Outcome, Result_, Work};
use crate::inputs::{Input, PolicyInput};
use crate::metrics::{Metrics, ModeLabels};
use crate::status::StatusUpdate;
use trainwarden_notify::{JobProgress, Notifier};

/// What the controller keeps per policy beyond the evaluator, for status.
#[derive(Debug, Default)]
struct PolicyBook {
    /// The loaded (valid) version, if any.
    reference: Option<PolicyRef>,
    /// metadata.generation last seen.
    generation: i64,
    /// Why the last seen generation is invalid.
    error: Option<String>,
    last_action: Option<(String, Timestamp)>,
    job_actions: HashMap<JobKey, (String, Timestamp)>,
    gpu_hours_saved: f64,
    dollars_saved: Option<f64>,
    gpu_hours_would_save: f64,
    dollars_would_save: Option<f64>,
    action_counts: BTreeMap<String, i64>,
    /// Conditions as last reported, for their lastTransitionTime.
    conditions: Vec<Condition>,
}

/// The most jobs a book remembers the last action of (the status lists at most 50).
const MAX_JOB_ACTIONS: usize = 200;

pub struct Brain {
    evaluator: Evaluator,
    books: HashMap<PolicyId, PolicyBook>,
    policy_kinds_listed: HashSet<PolicyKind>,
    jobs_listed: bool,
    exempt: HashSet<JobKey>,
    unreadable: HashMap<JobKey, String>,
    events: Vec<Event>,
    /// Output of the last step, for the caller to send.
    pub work: Vec<Work>,
    metrics: Arc<Metrics>,
    last_sent: HashMap<PolicyId, ProgressPolicyStatus>,
    removed: Vec<PolicyId>,
    /// Intents handed to the executor and not yet reported back, per (policy, job, rule). While a firing's
    /// actions are in flight its memory is persisted as "pending, due now" rather than "firing", so a
    /// controller that dies before performing them fires again after the restart (same intent ids, so a
    /// suspension that did happen is recognised) instead of remembering an action that never happened.
    in_flight: HashMap<(PolicyId, JobKey, String), usize>,
    /// Receivers are configured here (every replica, so a new leader is ready); delivery happens through
    /// the executor, on the leader only.
    notifier: Option<Notifier>,
}

impl Brain {
    pub fn new(config: &ControllerConfig, metrics: Arc<Metrics>, notifier: Option<Notifier>) -> Self {
        let engine = EngineConfig {
            eval_interval: trainwarden_core::Duration::from_secs(config.eval_interval.as_secs().max(1)),
            ..EngineConfig::default()
        };
        Brain {
            evaluator: Evaluator::new(engine),
            books: HashMap::new(),
            policy_kinds_listed: HashSet::new(),
            jobs_listed: false,
            exempt: HashSet::new(),
            unreadable: HashMap::new(),
            events: Vec::new(),
            work: Vec::new(),
            metrics,
            last_sent: HashMap::new(),
            removed: Vec::new(),
            in_flight: HashMap::new(),
            notifier,
        }
    }

    pub fn evaluator(&self) -> &Evaluator {
        &self.evaluator
    }

    /// Both policy kinds have been listed (the TrainJob watch may start).
    pub fn policies_listed(&self) -> bool {
        PolicyKind::ALL.iter().all(|kind| self.policy_kinds_listed.contains(kind))
    }

    pub fn jobs_listed(&self) -> bool {
        self.jobs_listed
    }

    /// Handles one input at `now`; the resulting work is in [`Brain::work`].
    pub fn handle(&mut self, input: Input, now: Timestamp) {
        match input {
            Input::Policy(p) => self.apply_policy(*p, now),
            Input::PolicyGone(key) => {
                if let Some(book) = self.books.remove(&key)
                    && let Some(reference) = book.reference
                {
                    self.evaluator.remove_policy(&reference, now, &mut self.events);
                    if let Some(n) = &self.notifier {
                        n.remove(&reference);
                    }
                }
                self.last_sent.remove(&key);
                self.removed.push(key);
            }
            Input::PoliciesListed(kind) => {
                self.policy_kinds_listed.insert(kind);
            }
            Input::Namespace { name, labels } => self.evaluator.set_namespace_labels(&name, labels),
            Input::Job(job) => {
                let job = *job;
                if job.exempt {
                    if self.exempt.insert(job.key.clone()) {
                        self.evaluator.forget_job(&job.key, now, &mut self.events);
                        self.work.push(Work::Announce(Box::new(Announcement {
                            job: job.key.clone(),
                            warning: false,
                            reason: "Exempt".into(),
                            action: "Evaluate".into(),
                            note: format!(
                                "annotated {}=true: no progress policy applies to this TrainJob",
                                crate::EXEMPT_ANNOTATION
                            ),
                        })));
                    }
                } else {
                    self.exempt.remove(&job.key);
                    match job.snapshot {
                        Ok(snapshot) => {
                            self.unreadable.remove(&job.key);
                            let started = Instant::now();
                            self.evaluator.observe(snapshot, now, &mut self.events);
                            self.metrics.evaluations.inc();
                            self.metrics.evaluation_seconds.observe(started.elapsed().as_secs_f64());
                        }
                        Err(message) => {
                            self.metrics.invalid("trainjob_progress");
                            if self.unreadable.get(&job.key) != Some(&message) {
                                warn!(job = %job.key, error = %message, "cannot read the TrainJob's progress");
                                self.unreadable.insert(job.key, message);
                            }
                        }
                    }
                }
            }
            Input::JobGone(key) => {
                self.exempt.remove(&key);
                self.unreadable.remove(&key);
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
                }
            }
            Input::Outcome(o) => self.record_outcome(*o),
        }
        self.metrics.jobs.set(self.evaluator.job_count() as i64);
        self.drain_events();
    }

    /// Runs due timers at `now`.
    pub fn tick(&mut self, now: Timestamp) {
        let started = Instant::now();
        self.evaluator.tick(now, &mut self.events);
        self.metrics.evaluations.inc();
        self.metrics.evaluation_seconds.observe(started.elapsed().as_secs_f64());
        self.drain_events();
    }

    pub fn next_tick(&self) -> Option<Timestamp> {
        self.evaluator.next_tick()
    }

    fn apply_policy(&mut self, p: PolicyInput, now: Timestamp) {
        let first_sight = !self.books.contains_key(&p.key);
        let book = self.books.entry(p.key.clone()).or_default();
        // Our own status writes come back as watch events; the spec (metadata.generation) did not change, so
        // there is nothing to compile again.
        let judged =
            book.reference.as_ref().is_some_and(|r| r.generation == p.generation) || book.error.is_some();
        if !first_sight && book.generation == p.generation && judged {
            return;
        }
        book.generation = p.generation;
        if first_sight && let Some(status) = &p.status {
            // Continuity across restarts: savings, counts and the last action come back from status.
            book.gpu_hours_saved = status.gpu_hours_saved.unwrap_or(0.0);
            book.dollars_saved = status.dollars_saved;
            book.gpu_hours_would_save = status.gpu_hours_would_save.unwrap_or(0.0);
            book.dollars_would_save = status.dollars_would_save;
            book.action_counts = status.action_counts.clone();
            book.conditions = status.conditions.clone();
            if let (Some(what), Some(at)) = (&status.last_action, &status.last_action_time) {
                book.last_action = Some((what.clone(), at.0));
            }
        }
        let document = match p.document {
            Ok(d) => d,
            Err(e) => {
                book.error = Some(e.to_string());
                self.metrics.invalid("policy");
                return;
            }
        };
        match compile(&document, self.evaluator.scripts()) {
            Ok(compiled) => {
                let reference = compiled.reference.clone();
                info!(policy = %reference, generation = reference.generation, "policy loaded");
                if let Some(n) = &self.notifier {
                    n.configure(&compiled);
                }
                self.evaluator.upsert_policy(compiled, now, &mut self.events);
                if first_sight
                    && let Some(status) = p.status
                    && !status.rule_states.is_empty()
                {
                    info!(policy = %reference, memories = status.rule_states.len(), "restoring rule state");
                    self.evaluator.restore(&reference, status.rule_states);
                }
                book.reference = Some(reference);
                book.error = None;
            }
            Err(errors) => {
                self.metrics.invalid("policy");
                warn!(policy = ?p.key, error = %errors, "invalid policy");
                book.error = Some(errors.to_string());
            }
        }
        self.metrics.policies.set(self.books.values().filter(|b| b.reference.is_some()).count() as i64);
    }

    fn record_outcome(&mut self, o: Outcome) {
        let flight = (o.policy.clone(), o.job.clone(), o.rule.clone());
        if let Some(n) = self.in_flight.get_mut(&flight) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(&flight);
            }
        }
        if o.result == Result_::NotLeader {
            return;
        }
        let Some(book) = self.books.get_mut(&o.policy) else { return };
        *book.action_counts.entry(format!("{}/{}", o.action, o.result.as_str())).or_default() += 1;
        let verb = match (o.mode, &o.result) {
            (Mode::Audit, _) | (_, Result_::Reported) => format!("would {}", o.action),
            (_, Result_::Done) => o.action.to_string(),
            (_, other) => format!("{} {}", o.action, other.as_str()),
        };
        let what = format!("{verb} {} ({})", o.job, o.rule);
        book.last_action = Some((what, o.at));
        book.job_actions.insert(o.job.clone(), (format!("{verb} ({})", o.rule), o.at));
        if book.job_actions.len() > MAX_JOB_ACTIONS
            && let Some(oldest) =
                book.job_actions.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone())
        {
            book.job_actions.remove(&oldest);
        }
        if let Some(s) = &o.savings
            && matches!(o.action, "suspend" | "deactivate")
        {
            match (o.mode, &o.result) {
                (Mode::Enforce, Result_::Done) => {
                    book.gpu_hours_saved += s.gpu_hours;
                    if let Some(d) = s.dollars {
                        *book.dollars_saved.get_or_insert(0.0) += d;
                    }
                }
                (Mode::Audit, Result_::Reported) => {
                    book.gpu_hours_would_save += s.gpu_hours;
                    if let Some(d) = s.dollars {
                        *book.dollars_would_save.get_or_insert(0.0) += d;
                    }
                }
                _ => {}
            }
        }
    }

    fn drain_events(&mut self) {
        self.drain_events_in_order();
        // A firing's actions that stop the job go last: a suspended job's rules are frozen, so if the
        // controller died after stopping the job but before its Events and notifications, those would never
        // be redone; done first, a crash before the suspension is redone whole (see `in_flight`).
        let stops = |w: &Work| matches!(w, Work::Act(i) if matches!(i.action, ActionSpec::Suspend(_) | ActionSpec::Scale(_)));
        if self.work.iter().any(stops) {
            let (last, mut first): (Vec<Work>, Vec<Work>) = self.work.drain(..).partition(stops);
            first.extend(last);
            self.work = first;
        }
    }

    fn drain_events_in_order(&mut self) {
        for event in self.events.drain(..) {
            if let Some(_notifier) = &self.notifier
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
                    let p = &intent.policy;
                    let flight = (p.id(), intent.job.clone(), intent.rule.clone());
                    *self.in_flight.entry(flight).or_default() += 1;
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
                                .get_or_create(&ModeLabels { mode: mode.as_str().into() })
                                .inc();
                            (true, "RuleFiring")
                        }
                        TransitionKind::Resolved => (false, "RuleResolved"),
                        TransitionKind::Pending | TransitionKind::Cleared => {
                            debug!(%job, %policy, rule, kind = kind.as_str(), "transition");
                            continue;
                        }
                    };
                    self.work.push(Work::Announce(Box::new(Announcement {
                        job,
                        warning,
                        reason: name.into(),
                        action: "Evaluate".into(),
                        note: format!(
                            "{} {policy} rule {rule} {} [{}]: {}{values}",
                            policy.kind,
                            kind.as_str(),
                            mode.as_str(),
                            reason.summary
                        ),
                    })));
                }
                Event::RuleError { job, policy, rule, message, .. } => {
                    warn!(%job, %policy, rule, error = %message, "rule evaluation failed");
                    self.work.push(Work::Announce(Box::new(Announcement {
                        job,
                        warning: true,
                        reason: "RuleError".into(),
                        action: "Evaluate".into(),
                        note: format!("{} {policy} rule {rule}: {message}", policy.kind),
                    })));
                }
                Event::Suppressed { job, policy, rule, action, until, .. } => {
                    debug!(%job, %policy, rule, action, %until, "suppressed by cooldown");
                }
            }
        }
    }

    /// Copies the notifier's delivery counters into /metrics.
    pub fn refresh_notification_metrics(&self) {
        let Some(n) = &self.notifier else { return };
        for s in n.stats() {
            let policy = match &s.policy_namespace {
                Some(ns) => format!("{}/{ns}/{}", s.policy_kind, s.policy_name),
                None => format!("{}/{}", s.policy_kind, s.policy_name),
            };
            for (result, value) in
                [("sent", s.sent), ("failed", s.failed), ("retried", s.retried), ("dropped", s.dropped)]
            {
                self.metrics
                    .notifications
                    .get_or_create(&crate::metrics::NotificationLabels {
                        policy: policy.clone(),
                        receiver: s.receiver.clone(),
                        channel: s.channel.as_str().into(),
                        result: result.into(),
                    })
                    .set(value as i64);
            }
        }
    }

    /// The statuses that changed since they were last returned (a removed policy comes back with a default
    /// status, which tells the writer to forget it).
    pub fn changed_statuses(&mut self, now: Timestamp) -> Vec<StatusUpdate> {
        let mut out: Vec<StatusUpdate> = self
            .removed
            .drain(..)
            .map(|key| StatusUpdate { key, status: ProgressPolicyStatus::default() })
            .collect();
        let keys: Vec<PolicyId> = self.books.keys().cloned().collect();
        for key in keys {
            let status = self.status_of(&key, now);
            if self.last_sent.get(&key) != Some(&status) {
                self.last_sent.insert(key.clone(), status.clone());
                out.push(StatusUpdate { key, status });
            }
        }
        out
    }

    /// The status of one policy now.
    pub fn status_of(&mut self, key: &PolicyId, now: Timestamp) -> ProgressPolicyStatus {
        let Some(book) = self.books.get(key) else { return ProgressPolicyStatus::default() };
        let mut status = ProgressPolicyStatus {
            observed_generation: Some(book.generation),
            last_action: book.last_action.as_ref().map(|(w, _)| w.clone()),
            last_action_time: book.last_action.as_ref().map(|(_, at)| Time(*at)),
            gpu_hours_saved: (book.gpu_hours_saved > 0.0).then_some(round(book.gpu_hours_saved)),
            dollars_saved: book.dollars_saved.map(round),
            gpu_hours_would_save: (book.gpu_hours_would_save > 0.0)
                .then_some(round(book.gpu_hours_would_save)),
            dollars_would_save: book.dollars_would_save.map(round),
            action_counts: book.action_counts.clone(),
            ..ProgressPolicyStatus::default()
        };
        let mut ready = (true, "Evaluating", String::new());
        if let Some(reference) = &book.reference {
            let counts = self.evaluator.counts(reference);
            status.matched_jobs = Some(counts.matched_jobs as i32);
            status.firing_rules = Some(counts.firing as i32);
            status.pending_rules = Some(counts.pending as i32);
            let mut memories = self.evaluator.memories(reference, now);
            let mut jobs: BTreeMap<String, JobStatus> = BTreeMap::new();
            for m in &memories {
                let entry = jobs
                    .entry(m.job.clone())
                    .or_insert_with(|| JobStatus { name: m.job.clone(), ..Default::default() });
                match m.state {
                    RuleState::Firing => entry.firing.push(m.rule.clone()),
                    RuleState::Pending => entry.pending.push(m.rule.clone()),
                    RuleState::Inactive => {}
                }
            }
            for (job, (what, at)) in &book.job_actions {
                let name = job.to_string();
                let entry =
                    jobs.entry(name.clone()).or_insert_with(|| JobStatus { name, ..Default::default() });
                entry.last_action = Some(what.clone());
                entry.last_action_time = Some(Time(*at));
            }
            for entry in jobs.values_mut() {
                if let Some(key) = JobKey::parse(&entry.name) {
                    // Whole percents: the status changes when progress does, not on every report.
                    entry.progress_percent = self
                        .evaluator
                        .job(&key)
                        .and_then(|d| d.series.last.and_then(|l| l.progress_percent))
                        .map(|p| p.clamp(0.0, 100.0).floor());
                }
            }
            status.jobs = JobStatus::cap(jobs.into_values().collect());
            // Pending and firing first: they matter most after a restart.
            memories.sort_by_key(|m| match m.state {
                RuleState::Pending => 0,
                RuleState::Firing => 1,
                RuleState::Inactive => 2,
            });
            memories.truncate(MAX_RULE_STATES);
            for m in memories.iter_mut().filter(|m| m.state == RuleState::Firing) {
                let Some(job) = JobKey::parse(&m.job) else { continue };
                if !self.in_flight.contains_key(&(key.clone(), job, m.rule.clone())) {
                    continue;
                }
                let for_ = self
                    .evaluator
                    .policies()
                    .find(|p| p.reference == *reference)
                    .and_then(|p| p.rules.iter().find(|r| r.name == m.rule))
                    .map_or(0.0, |r| r.for_.as_secs_f64());
                let fired_at = m.since;
                m.state = RuleState::Pending;
                m.since =
                    fired_at.and_then(|t| t.checked_sub(jiff::SignedDuration::from_secs_f64(for_)).ok());
                m.firings = m.firings.saturating_sub(1);
                for issued in &mut m.last_issued {
                    if *issued == fired_at {
                        *issued = None;
                    }
                }
                m.cleared_at = None;
            }
            status.rule_states = memories;
            ready.2 = format!("evaluating generation {}", reference.generation);
            if let Some(error) = &book.error {
                ready = (
                    false,
                    "InvalidPolicy",
                    format!(
                        "generation {} is invalid; still evaluating generation {}: {error}",
                        book.generation, reference.generation
                    ),
                );
            }
        } else {
            let error = book.error.clone().unwrap_or_else(|| "not loaded".into());
            ready = (false, "InvalidPolicy", error);
        }
        if let Some(n) = &self.notifier {
            let PolicyId { kind, namespace, name } = key;
            status.notifications = n
                .stats()
                .into_iter()
                .filter(|s| {
                    s.policy_kind == *kind && s.policy_namespace == *namespace && s.policy_name == *name
                })
                .take(64)
                .map(|s| trainwarden_kube::status::NotificationStatus {
                    receiver: s.receiver,
                    channel: s.channel.as_str().into(),
                    sent: s.sent as i64,
                    failed: s.failed as i64,
                    retried: s.retried as i64,
                    dropped: s.dropped as i64,
                    last_error: s.last_error,
                })
                .collect();
        }
        let firing = status.firing_rules.unwrap_or(0) > 0;
        let conditions = vec![
            condition(&book.conditions, CONDITION_READY, ready.0, ready.1, &ready.2, book.generation, now),
            condition(
                &book.conditions,
                CONDITION_FIRING,
                firing,
                if firing { "RulesFiring" } else { "NoneFiring" },
                &format!("{} (job, rule) pair(s) firing", status.firing_rules.unwrap_or(0)),
                book.generation,
                now,
            ),
        ];
        if let Some(book) = self.books.get_mut(key) {
            book.conditions = conditions.clone();
        }
        status.conditions = conditions;
        status
    }
}

fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A condition, keeping its lastTransitionTime while its status does not change.
fn condition(
    previous: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: i64,
    now: Timestamp,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    let mut message = message.to_string();
    if message.len() > 8000 {
        let mut end = 8000;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: Some(generation),
        last_transition_time: since,
    }
}

fn until(t: Timestamp, now: Timestamp) -> Duration {
    let secs = t.duration_since(now).as_secs_f64();
    Duration::from_secs_f64(secs.clamp(0.0, 3600.0))
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
    metrics: Arc<Metrics>,
) {
    let mut policies_synced = Some(policies_synced);
    // tokio's interval panics on zero.
    let mut beat = tokio::time::interval(config.status_interval.max(Duration::from_millis(10)));
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = brain.next_tick();
        let wait = next.map_or(Duration::from_secs(3600), |t| until(t, Timestamp::now()));
        tokio::select! {
            input = inputs.recv() => {
                let Some(input) = input else { break };
                brain.handle(input, Timestamp::now());
                if brain.policies_listed() && let Some(tx) = policies_synced.take() {
                    let _ = tx.send(());
                }
                if brain.jobs_listed() && !*ready.borrow() {
                    let _ = ready.send(true);
                }
            }
            _ = tokio::time::sleep(wait) => {
                // Never evaluate a timer before its time (a sleep can end a hair early on some clocks).
                let now = next.map_or_else(Timestamp::now, |n| Timestamp::now().max(n));
                brain.tick(now);
            }
            _ = beat.tick() => {
                brain.refresh_notification_metrics();
                for update in brain.changed_statuses(Timestamp::now()) {
                    if statuses.send(update).await.is_err() {
                        return;
                    }
                }
            }
        }
        for item in brain.work.drain(..) {
            if work.send(item).await.is_err() {
                metrics.api_error("executor_gone");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::JobInput;
    use trainwarden_core::parse_documents;
    use trainwarden_core::{ActionIntent, RuleMemory};
    use trainwarden_core::{JobSnapshot, Metric, ProgressSample, SampleSource};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_795_798_800 + s).unwrap()
    }

    fn brain() -> Brain {
        Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None)
    }

    fn key() -> PolicyId {
        PolicyId { kind: PolicyKind::Namespaced, namespace: Some("ml".into()), name: "p".into() }
    }

    fn policy_input(rules: &str, status: Option<ProgressPolicyStatus>) -> Input {
        let yaml = format!(
            "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {{name: p, namespace: ml}}\n\
             spec:\n  mode: Enforce\n  samplingInterval: 1s\n  rules:\n{rules}"
        );
        let doc = parse_documents(&yaml, "test").unwrap().remove(0);
        Input::Policy(Box::new(PolicyInput { key: key(), generation: 1, document: Ok(doc), status }))
    }

    fn job_reporting(loss: f64, at: Timestamp) -> Input {
        let mut snapshot = JobSnapshot::new(JobKey::new("ml", "ft"));
        snapshot.created_at = Some(t(-60));
        let mut sample = ProgressSample::empty(at, SampleSource::TrainerStatus);
        sample.metrics.push(Metric { name: "loss".into(), value: loss });
        snapshot.sample = Some(sample);
        Input::Job(Box::new(JobInput { key: snapshot.key.clone(), snapshot: Ok(snapshot), exempt: false }))
    }

    fn actions(brain: &mut Brain) -> Vec<String> {
        brain
            .work
            .drain(..)
            .filter_map(|w| match w {
                Work::Act(i) => Some(format!("{} {}", i.action.kind(), i.job)),
                Work::Announce(_) | Work::Notify(..) => None,
            })
            .collect()
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
            policy: key(),
            job: JobKey::new("ml", "ft"),
            rule: "high".into(),
            action: "suspend",
            mode: Mode::Enforce,
            result: Result_::Done,
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
                Work::Announce(a) => a.reason,
                Work::Act(i) => format!("act {}", i.action.kind()),
                Work::Notify(..) => "notify".into(),
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
        let outcome = Outcome {
            policy: key(),
            job: JobKey::new("ml", "ft"),
            rule: "high".into(),
            action: "suspend",
            mode: Mode::Enforce,
            result: Result_::Done,
            message: String::new(),
            at: t(5),
            savings: Some(trainwarden_core::Savings {
                until: t(3605),
                basis: "estimatedEnd",
                gpus: 8.0,
                gpu_hours: 8.0,
                dollars: Some(80.0),
            }),
        };
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
            let input = crate::inputs::job_input(&obj).expect("a namespaced TrainJob");
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
