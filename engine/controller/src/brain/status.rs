//! The status projection: a policy's `status` from its book and the evaluator (counts, jobs, rule memories
//! — with in-flight firings persisted as due, so a crash redoes them — conditions, notification counters).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use trainwarden_core::PolicyId;
use trainwarden_core::RuleState;
use trainwarden_core::{JobKey, Timestamp};
use trainwarden_kube::status::{
    CONDITION_FIRING, CONDITION_GPU_METRICS, CONDITION_KUEUE_QUEUES, CONDITION_PROGRESS_UNDERSTOOD,
    CONDITION_READY, MAX_RULE_STATES,
};
use trainwarden_kube::{
    ExceptionStatus, JobStatus, MAX_STATUS_EXCEPTIONS, MAX_STATUS_JOBS, ProgressPolicyStatus,
};

use crate::messages::StatusUpdate;

use super::Brain;

impl Brain {
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
        if let Some(counted) = self.books.get_mut(key).and_then(|b| b.counted.as_mut()) {
            counted.prune(now);
        }
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
            counted_actions: book.counted.as_ref().map(super::counted::Counted::to_status),
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
                if let Some(limit) = m.held {
                    entry.held.push(format!("{}: held: {limit}", m.rule));
                }
                if let Some(e) = &m.excepted_by {
                    entry.held.push(format!("{}: held by ProgressPolicyException {e}", m.rule));
                }
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
            // Snoozed jobs are listed even with nothing pending: the owner looks for the snooze here.
            for key in self.evaluator.job_keys() {
                if self.evaluator.snoozed_until(key, reference).is_some()
                    && self.evaluator.selects(reference, key)
                {
                    let name = key.to_string();
                    jobs.entry(name.clone()).or_insert_with(|| JobStatus { name, ..Default::default() });
                }
            }
            for entry in jobs.values_mut() {
                if let Some(key) = JobKey::parse(&entry.name) {
                    entry.snoozed_until = self.evaluator.snoozed_until(&key, reference).map(Time);
                    // Whole percents: the status changes when progress does, not on every report.
                    entry.progress_percent = self
                        .evaluator
                        .job(&key)
                        .and_then(|d| d.series.last.and_then(|l| l.progress_percent))
                        .map(|p| p.clamp(0.0, 100.0).floor());
                }
            }
            status.jobs = JobStatus::cap(jobs.into_values().collect());
            status.exceptions = self.exception_statuses(reference, &memories, now);
            // Pending and firing first: they matter most after a restart.
            memories.sort_by_key(|m| match m.state {
                RuleState::Pending => 0,
                RuleState::Firing => 1,
                RuleState::Inactive => 2,
            });
            memories.truncate(MAX_RULE_STATES);
            for m in memories.iter_mut().filter(|m| m.state == RuleState::Firing) {
                let Some(job) = JobKey::parse(&m.job) else { continue };
                if !self.ledger.owes(key, &job, &m.rule) {
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
            // A rule that fails at evaluation never fires: the policy is not doing what it says.
            if let Some(errors) = book.recent_rule_errors(now) {
                ready = (false, "RuleErrors", errors);
            }
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
        let understood = self.unknown_progress_fields(book.reference.as_ref());
        let compiled =
            book.reference.as_ref().and_then(|r| self.evaluator.policies().find(|p| &p.reference == r));
        let reads_gpus = compiled.is_some_and(trainwarden_core::CompiledPolicy::reads_gpus);
        let reads_queue = compiled.is_some_and(trainwarden_core::CompiledPolicy::reads_queue);
        let mut conditions = vec![
            condition(&book.conditions, CONDITION_READY, ready.0, ready.1, &ready.2, book.generation, now),
            condition(
                &book.conditions,
                CONDITION_FIRING,
                firing,
                if firing { "RulesFiring" } else { "NoneFiring" },
                &format!(
                    "{} firing",
                    trainwarden_core::plural(
                        u64::try_from(status.firing_rules.unwrap_or(0)).unwrap_or(0),
                        "(job, rule) pair",
                        "(job, rule) pairs"
                    )
                ),
                book.generation,
                now,
            ),
            condition(
                &book.conditions,
                CONDITION_PROGRESS_UNDERSTOOD,
                understood.is_none(),
                if understood.is_none() { "KnownFields" } else { "UnknownProgressFields" },
                understood
                    .as_deref()
                    .unwrap_or("selected jobs report progress in the fields their format defines"),
                book.generation,
                now,
            ),
        ];
        let sources = [
            (
                reads_gpus,
                CONDITION_GPU_METRICS,
                self.gpu_health.as_ref(),
                self.gpu_configured,
                "QueryFailing",
                "the controller was started without --prometheus-url: its GPU rules judge no GPU reading and never fire",
                "the GPU metrics have not been queried yet",
            ),
            (
                reads_queue,
                CONDITION_KUEUE_QUEUES,
                self.queue_health.as_ref(),
                self.queue_configured,
                "Unavailable",
                "the controller was started with --kueue-queues=false: queue_pending() and queue_pending_gpus() are unknown, and rules that compare them never fire",
                "Kueue's queues have not been listed yet",
            ),
        ];
        // A source beside the watches, only on the policies that read it: not configured, not read yet,
        // failing (with its error) or reading.
        for (reads, kind, health, configured, failing, not_configured, not_yet) in sources {
            if !reads {
                continue;
            }
            let (ok, reason, message) = match (health, configured) {
                (_, false) => (false, "NotConfigured", not_configured),
                (None, true) => (false, "NotReadYet", not_yet),
                (Some(h), true) => {
                    (h.healthy, if h.healthy { "Reading" } else { failing }, h.message.as_str())
                }
            };
            conditions.push(condition(&book.conditions, kind, ok, reason, message, book.generation, now));
        }
        if let Some(book) = self.books.get_mut(key) {
            book.conditions = conditions.clone();
        }
        status.conditions = conditions;
        status
    }
}

impl Brain {
    /// Which of the policy's selected jobs report progress fields their format does not define (at most
    /// [`SHOWN_JOBS`] named), for the `ProgressUnderstood` condition; `None` when there are none.
    fn unknown_progress_fields(&self, reference: Option<&trainwarden_core::PolicyRef>) -> Option<String> {
        let reference = reference?;
        let jobs: Vec<(&JobKey, &Vec<String>)> =
            self.unknown_now.iter().filter(|(job, _)| self.evaluator.selects(reference, job)).collect();
        if jobs.is_empty() {
            return None;
        }
        let mut shown: Vec<String> = jobs
            .iter()
            .take(SHOWN_JOBS)
            .map(|(job, paths)| format!("{job} ({})", paths.join(", ")))
            .collect();
        if jobs.len() > SHOWN_JOBS {
            shown.push(format!("and {} more", jobs.len() - SHOWN_JOBS));
        }
        Some(format!(
            "{} progress fields their format does not define, so rules cannot see them (check the \
             spelling in the training code's report): {}",
            trainwarden_core::plural(jobs.len() as u64, "selected job reports", "selected jobs report"),
            shown.join("; ")
        ))
    }
}

/// The most jobs the `ProgressUnderstood` condition names.
const SHOWN_JOBS: usize = 5;

impl Brain {
    /// The exceptions that name `reference`, as its status lists them: honoured or why not, and the jobs
    /// whose rules each holds now (from the rule memories).
    fn exception_statuses(
        &self,
        reference: &trainwarden_core::PolicyRef,
        memories: &[trainwarden_core::RuleMemory],
        now: Timestamp,
    ) -> Vec<ExceptionStatus> {
        let policy = self.evaluator.policies().find(|p| p.reference == *reference);
        let mut out = Vec::new();
        for e in self.evaluator.exceptions().filter(|e| e.names_policy(reference)) {
            let name = e.reference.to_string();
            let refused = policy.map(|p| e.check_against(std::slice::from_ref(p))).unwrap_or_default();
            let (state, message) = if !e.in_force(now) {
                ("Expired", None)
            } else if policy.is_some_and(|p| !p.honours_exceptions_from(&e.reference.namespace)) {
                let why = format!(
                    "this policy does not honour exceptions from namespace {:?}: its \
                     spec.exceptions.allowedNamespaces does not list it",
                    e.reference.namespace
                );
                ("NotAllowed", Some(why))
            } else if let Some(error) = refused.first() {
                ("NoSuchRule", Some(error.message.clone()))
            } else {
                ("Active", None)
            };
            let mut holding: Vec<String> = (memories.iter())
                .filter(|m| m.excepted_by.as_deref() == Some(name.as_str()))
                .map(|m| m.job.clone())
                .collect();
            holding.sort();
            holding.dedup();
            holding.truncate(MAX_STATUS_JOBS);
            out.push(ExceptionStatus {
                name,
                rules: e.rules_of(reference).unwrap_or_default(),
                expires: Some(Time(e.expires)),
                state: state.into(),
                message,
                holding,
            });
        }
        // An invalid one is listed where it could apply: a cluster policy, or a policy of its own namespace.
        let shown = reference.to_string();
        let could_apply = |key: &trainwarden_core::ExceptionRef| {
            reference.namespace.as_deref().is_none_or(|ns| ns == key.namespace)
        };
        let invalid = self
            .invalid_exceptions
            .iter()
            .filter(|(key, (_, names))| names.contains(&shown) && could_apply(key));
        for (key, (message, _)) in invalid {
            out.push(ExceptionStatus {
                name: key.to_string(),
                state: "Invalid".into(),
                message: Some(trainwarden_core::clip_tokens(message).chars().take(1024).collect()),
                ..ExceptionStatus::default()
            });
        }
        // Those in force first: a namespace cannot push them out with many refused ones.
        out.sort_by_key(|e| e.state != "Active");
        out.truncate(MAX_STATUS_EXCEPTIONS);
        out
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
