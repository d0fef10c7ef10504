//! Replay: recorded streams through the same evaluator the controller runs, on the stream's own clock.
//!
//! The driver feeds records in time order and calls [`Evaluator::tick`] at every timer deadline between
//! them, so time-driven rules (stalls, `for`, `keepFiringFor`, calendar windows) fire exactly as they would
//! have live. Enforced suspensions are simulated: once a suspend intent in Enforce mode is issued for a job,
//! the job counts as suspended and its later records are ignored (they describe a run that would not have
//! happened). Savings are counted once per job, at its first (would-be) suspension.

use std::collections::{BTreeMap, HashSet};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::describe::words;
use crate::evaluate::{EngineConfig, Evaluator, Event};
use crate::input::sample::{JobKey, JobPhase, JobSnapshot};
use crate::input::stream::StreamRecord;
use crate::policy::compile::CompiledPolicy;
use crate::policy::{ActionSpec, Mode};
use crate::time::Timestamp;
use crate::time::{fmt_num, fmt_secs, plural};

pub mod shard;

/// What the replay knows of one job.
#[derive(Default)]
struct ReplayJob {
    /// The job as its records describe it (`None` before its first metadata, and after its deletion).
    snapshot: Option<JobSnapshot>,
    /// An enforced suspension stopped it: its later records are ignored.
    suspended: bool,
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
}

/// GPU time freed by suspensions in one mode, each job counted once.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SavingsTotal {
    /// Jobs whose suspension was counted.
    pub jobs: u64,
    /// GPU-hours freed.
    pub gpu_hours: f64,
    /// Dollars freed, for policies that set a GPU-hour price (0 otherwise).
    pub dollars: f64,
}

impl Replay {
    /// Policies with the same kind, namespace and name would replace each other silently; that is an error.
    pub fn check_unique(policies: &[CompiledPolicy]) -> Result<(), String> {
        let mut seen = HashSet::new();
        for p in policies {
            let r = &p.reference;
            if !seen.insert((r.kind, r.namespace.clone(), r.name.clone())) {
                return Err(format!("{} {r} is defined twice", r.kind));
            }
        }
        Ok(())
    }

    /// A replay of `policies`, loaded at the Unix epoch; the clock starts with the first record fed.
    pub fn new(policies: Vec<CompiledPolicy>, config: EngineConfig) -> Self {
        let mut evaluator = Evaluator::new(config);
        let mut events = Vec::new();
        let start = Timestamp::UNIX_EPOCH;
        for p in policies {
            evaluator.upsert_policy(p, start, &mut events);
        }
        Replay {
            evaluator,
            job_ids: FxHashMap::default(),
            jobs: Vec::new(),
            saved_for: [FxHashSet::default(), FxHashSet::default()],
            clock: None,
            scratch: Vec::new(),
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
        self.evaluator.set_namespace_labels(namespace, labels);
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
                let job = self.job_entry(&snapshot.key);
                if job.suspended {
                    self.summary.ignored_after_suspend += 1;
                    return 0;
                }
                job.snapshot = Some(snapshot.clone());
                self.evaluator.observe(snapshot, time, &mut self.scratch);
                self.summary.jobs = self.jobs.len();
                return self.drain(time);
            }
            StreamRecord::Update(u) => u,
        };
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
        &self.summary
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
                    total.dollars += s.dollars.unwrap_or(0.0);
                }
            }
        }
        _ => {}
    }
}

/// One output line of `replay --output json`.
pub fn event_json(event: &Event) -> serde_json::Value {
    use serde_json::json;
    match event {
        Event::Transition { at, job, policy, rule, kind, reason, mode } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": kind.as_str(), "action": null, "mode": mode.as_str(), "reason": reason,
        }),
        Event::Intent(i) => {
            let mut v = json!({
                "time": i.at.to_string(), "job": i.job.to_string(), "policy": i.policy.to_string(), "rule": i.rule,
                "state": "firing", "action": i.action.kind(), "actionSpec": i.action, "mode": i.mode.as_str(),
                "reason": i.reason, "intentId": i.id,
            });
            if let Some(s) = &i.savings {
                v["savings"] = json!(s);
            }
            v
        }
        Event::Suppressed { at, job, policy, rule, action, until } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "suppressed", "action": action, "mode": null,
            "reason": {"summary": format!("cooldown until {until}")},
        }),
        Event::RuleError { at, job, policy, rule, message } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "error", "action": null, "mode": null, "reason": {"summary": message},
        }),
        Event::Held { at, job, policy, rule, actions, until, mode, exception: None } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "held", "action": null, "actions": actions, "mode": mode.as_str(), "snoozedUntil": until.to_string(),
            "reason": {"summary": words::held(actions, *until, None)},
        }),
        Event::Held { at, job, policy, rule, actions, until, mode, exception: Some(e) } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "held", "action": null, "actions": actions, "mode": mode.as_str(), "exceptedUntil": until.to_string(),
            "exception": e.to_string(),
            "reason": {"summary": words::held(actions, *until, Some(e))},
        }),
        Event::ExceptionEnded { at, job, policy, rule, exception, why, released } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "exceptionEnded", "action": null, "mode": null, "exception": exception.to_string(),
            "why": why, "released": released,
            "reason": {"summary": words::exception_ended(exception, *why, *released)},
        }),
        Event::Limited { at, job, policy, rule, actions, limit, retry, mode } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "held", "action": null, "actions": actions, "mode": mode.as_str(), "limit": limit,
            "retry": retry.map(|t| t.to_string()),
            "reason": {"summary": words::limited(actions, limit, *retry)},
        }),
        Event::Deferred { at, job, policy, rule, action, until, mode } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "deferred", "action": action, "mode": mode.as_str(), "until": until.to_string(),
            "reason": {"summary": words::deferred(*action, *until)},
        }),
        Event::Snooze { at, job, change } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": null, "rule": null,
            "state": "snooze", "action": null, "mode": null, "snooze": change,
            "reason": {"summary": words::snooze(change, &jiff::tz::TimeZone::UTC)},
        }),
    }
}

/// The `summary` object of `replay --output json`.
pub fn summary_json(summary: &Summary) -> serde_json::Value {
    serde_json::json!({ "summary": summary })
}

fn local(t: Timestamp, tz: &jiff::tz::TimeZone) -> String {
    crate::time::fmt_local(t, tz)
}

/// One event as a timeline line (with its newline), as [`render_text`] prints it. Times are shown in `tz`.
pub fn render_event(e: &Event, tz: &jiff::tz::TimeZone) -> String {
    let mut out = String::new();
    match e {
        Event::Transition { at, job, rule, kind, reason, mode, .. } => {
            out += &format!(
                "{}  {job}  {rule:<16} {:<9} [{}] {}\n",
                local(*at, tz),
                kind.as_str().to_uppercase(),
                mode.as_str(),
                reason.summary
            );
        }
        Event::Intent(i) => {
            out += &format!(
                "{}  {}  {:<16}           {}\n",
                local(i.at, tz),
                i.job,
                i.rule,
                words::intent_line(i)
            );
        }
        Event::Suppressed { at, job, rule, action, until, .. } => {
            out += &format!(
                "{}  {job}  {rule:<16}           ✗ {action} suppressed by cooldown until {}\n",
                local(*at, tz),
                local(*until, tz)
            );
        }
        Event::RuleError { at, job, rule, message, .. } => {
            out += &format!("{}  {job}  {rule:<16} ERROR     {message}\n", local(*at, tz));
        }
        Event::Held { at, job, rule, actions, until, exception, .. } => {
            out += &format!(
                "{}  {job}  {rule:<16}           ✗ {}\n",
                local(*at, tz),
                words::held(actions, *until, exception.as_ref())
                    .replace(&until.to_string(), &local(*until, tz))
            );
        }
        Event::ExceptionEnded { at, job, rule, exception, why, released, .. } => {
            out += &format!(
                "{}  {job}  {rule:<16} EXCEPTION {}\n",
                local(*at, tz),
                words::exception_ended(exception, *why, *released)
            );
        }
        Event::Limited { at, job, rule, actions, limit, retry, .. } => {
            let mut text = words::limited(actions, limit, *retry);
            if let Some(t) = retry {
                text = text.replace(&t.to_string(), &local(*t, tz));
            }
            out += &format!("{}  {job}  {rule:<16}           ✗ {text}\n", local(*at, tz));
        }
        Event::Deferred { at, job, rule, action, until, .. } => {
            let text = words::deferred(*action, *until).replace(&until.to_string(), &local(*until, tz));
            out += &format!("{}  {job}  {rule:<16}           … {text}\n", local(*at, tz));
        }
        Event::Snooze { at, job, change } => {
            out +=
                &format!("{}  {job}  {:<16} SNOOZE    {}\n", local(*at, tz), "", words::snooze(change, tz));
        }
    }
    out
}

/// Renders the human timeline and summary. Times are shown in `tz` (the policy's zone).
pub fn render_text(events: &[Event], summary: &Summary, tz: &jiff::tz::TimeZone) -> String {
    let mut out = String::new();
    for e in events {
        out += &render_event(e, tz);
    }
    out.push_str(&render_summary(summary, tz));
    out
}

/// The summary that ends [`render_text`] (from its blank line on), for a timeline printed as it happens.
pub fn render_summary(summary: &Summary, tz: &jiff::tz::TimeZone) -> String {
    let mut out = String::from("\nSummary\n");
    if let (Some(a), Some(b)) = (summary.first_record, summary.last_time) {
        out += &format!(
            "  stream       {} → {} ({})\n",
            local(a, tz),
            local(b, tz),
            fmt_secs(crate::time::seconds(a, b))
        );
    }
    out += &format!(
        "  input        {}, {}, {} ignored after an enforced suspension\n",
        plural(summary.records, "record", "records"),
        plural(summary.jobs as u64, "job", "jobs"),
        summary.ignored_after_suspend
    );
    out += &format!(
        "  rules        {}, {}\n",
        plural(summary.firings, "firing", "firings"),
        plural(summary.rule_errors, "evaluation error", "evaluation errors")
    );
    let intents: Vec<String> = summary.intents.iter().map(|(k, v)| format!("{v} {k}")).collect();
    out += &format!(
        "  actions      {}\n",
        if intents.is_empty() { "none".to_string() } else { intents.join(", ") }
    );
    for (label, total) in [("saved", &summary.saved), ("would save", &summary.would_save)] {
        if total.jobs > 0 {
            out += &format!(
                "  {label:<12} {} GPU-hours, ${} across {}\n",
                fmt_num((total.gpu_hours * 10.0).round() / 10.0),
                words::money(total.dollars),
                plural(total.jobs, "job", "jobs")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_in_the_singular_and_the_plural() {
        let one = SavingsTotal { jobs: 1, gpu_hours: 8.0, dollars: 0.0 };
        let summary =
            Summary { records: 1, jobs: 1, firings: 1, rule_errors: 0, saved: one, ..Summary::default() };
        let text = render_text(&[], &summary, &jiff::tz::TimeZone::UTC);
        assert!(
            text.contains("  input        1 record, 1 job, 0 ignored after an enforced suspension\n"),
            "{text}"
        );
        assert!(text.contains("  rules        1 firing, 0 evaluation errors\n"), "{text}");
        assert!(text.contains("  saved        8 GPU-hours, $0.00 across 1 job\n"), "{text}");
        let s = crate::evaluate::Savings {
            until: Timestamp::UNIX_EPOCH,
            basis: crate::evaluate::SavingsBasis::EstimatedEnd,
            gpus: 1.0,
            gpu_hours: 2.0,
            dollars: None,
        };
        assert_eq!(words::savings(&s), "frees 1 GPU × 2h until its estimated end = 2 GPU-hours");
    }
}
