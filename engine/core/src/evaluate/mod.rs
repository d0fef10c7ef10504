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
//! its pending rules' `for`, its firing rules' `keepFiringFor` and its time-driven detectors' deadlines
//! ([`crate::judge::detectors::Detector::wake_at`], also for `stalled()` inside a script), so such rules fire on the second they are
//! due; the `eval_interval` cadence (every job re-evaluated at least that often) is only a backstop, e.g. for
//! scripts that read the clock through `hour()`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rustc_hash::FxHashMap;

use crate::history::job::JobData;
use crate::history::series::{JobSeries, Recorded};
use crate::input::sample::{JobKey, JobPhase, JobSnapshot, ProgressSample};
use crate::judge::detectors::{DetectorState, Finding, FindingKind};
use crate::judge::script::{Limits, ScriptEngine};
use crate::policy::compile::{CompiledPolicy, CompiledRule};
use crate::policy::{ActionSpec, Mode, PolicyRef};
use crate::time::Timestamp;
use crate::units::duration::Duration;

/// Engine settings shared by every policy.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How often jobs without new samples are re-evaluated (timers' resolution).
    pub eval_interval: Duration,
    pub limits: Limits,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { eval_interval: Duration::from_secs(30), limits: Limits::default() }
    }
}

/// Where a rule is for a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "PascalCase")]
pub enum RuleState {
    Inactive,
    Pending,
    Firing,
}

/// The name a transition is reported under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TransitionKind {
    /// Condition became true, waiting for `for`.
    Pending,
    Firing,
    /// Firing → inactive.
    Resolved,
    /// Pending → inactive before firing.
    Cleared,
}

impl TransitionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionKind::Pending => "pending",
            TransitionKind::Firing => "firing",
            TransitionKind::Resolved => "resolved",
            TransitionKind::Cleared => "cleared",
        }
    }
}

/// Why a rule fired: one sentence and the values behind it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Reason {
    pub summary: String,
    pub values: BTreeMap<String, f64>,
    #[serde(skip)]
    pub kind: Option<FindingKind>,
}

impl Reason {
    fn from_findings(findings: Vec<Finding>, when: Option<&str>) -> Reason {
        let mut reason = Reason::default();
        let mut parts = Vec::new();
        for f in findings {
            parts.push(f.summary);
            if f.kind == FindingKind::Stall || reason.kind.is_none() {
                reason.kind = Some(f.kind);
            }
            reason.values.extend(f.values);
        }
        if parts.is_empty()
            && let Some(w) = when
        {
            let w = w.split_whitespace().collect::<Vec<_>>().join(" ");
            parts.push(format!(
                "`{}` is true",
                if w.chars().count() > 120 {
                    format!("{}…", w.chars().take(120).collect::<String>())
                } else {
                    w
                }
            ));
        }
        reason.summary = parts.join("; ");
        reason
    }
}

/// GPU time an action frees.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Savings {
    /// Until when the job would otherwise have held its GPUs.
    pub until: Timestamp,
    /// `estimatedEnd` (the job's ETA) or `windowEnd` (a stall inside an unattended window).
    pub basis: &'static str,
    pub gpus: f64,
    pub gpu_hours: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars: Option<f64>,
}

/// What the engine wants done. The executor performs it (Enforce) or reports it (Audit).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionIntent {
    /// Stable within one firing: `policy/rule/job/firing#/action#`, for idempotent execution.
    pub id: String,
    pub at: Timestamp,
    pub job: JobKey,
    pub policy: PolicyRef,
    pub rule: String,
    pub action: ActionSpec,
    pub mode: Mode,
    pub reason: Reason,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savings: Option<Savings>,
}

/// Everything evaluation reports.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    Transition {
        at: Timestamp,
        job: JobKey,
        policy: PolicyRef,
        rule: String,
        kind: TransitionKind,
        reason: Reason,
        mode: Mode,
    },
    Intent(ActionIntent),
    /// An action skipped because the same one was issued less than `cooldown` ago.
    Suppressed {
        at: Timestamp,
        job: JobKey,
        policy: PolicyRef,
        rule: String,
        action: &'static str,
        until: Timestamp,
    },
    /// A rule could not be evaluated (script error); its state is left as it was.
    RuleError {
        at: Timestamp,
        job: JobKey,
        policy: PolicyRef,
        rule: String,
        message: String,
    },
}

/// What one rule remembers about one job, in a form that survives a restart (see [`Evaluator::memories`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleMemory {
    /// The TrainJob as "<namespace>/<name>".
    #[schemars(length(min = 3, max = 317))]
    pub job: String,
    /// The rule's name.
    #[schemars(length(min = 1, max = 63))]
    pub rule: String,
    /// Pending (the condition holds, `for` has not elapsed), Firing, or Inactive (only remembered while an
    /// action's cooldown runs).
    pub state: RuleState,
    /// Pending since or firing since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub since: Option<Timestamp>,
    /// While firing: when the condition last turned false (for keepFiringFor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>", extend("format" = "date-time"))]
    pub cleared_at: Option<Timestamp>,
    /// How often the rule has fired for this job.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub firings: u64,
    /// When each of the rule's actions was last issued (by position), for cooldowns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<Option<String>>", length(max = 16))]
    pub last_issued: Vec<Option<Timestamp>>,
    /// A hash of the rule's definition when this was remembered: a rule edited meanwhile starts afresh
    /// instead of inheriting a pending timer, a firing or cooldowns that belonged to its old actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub rule_hash: Option<String>,
}

/// A stable (FNV-1a, 64-bit) hash of a rule's fingerprint, as [`RuleMemory::rule_hash`].
pub fn rule_hash(rule: &CompiledRule) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rule.fingerprint.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Applies the memories restored for (policy, job), if any, to the job's fresh rule tracks of that policy.
fn claim_memories(
    restored: &mut HashMap<(usize, JobKey), Vec<RuleMemory>>,
    entry: &mut JobEntry,
    key: &JobKey,
    p_index: usize,
    policy: &CompiledPolicy,
) {
    if restored.is_empty() {
        return;
    }
    let Some(memories) = restored.remove(&(p_index, key.clone())) else { return };
    let tracks = entry.tracks_mut(p_index, policy.rules.len());
    for memory in memories {
        let Some(r) = policy.rules.iter().position(|rule| rule.name == memory.rule) else { continue };
        if memory.rule_hash.as_ref().is_some_and(|h| *h != rule_hash(&policy.rules[r])) {
            continue; // the rule was edited while nobody watched: it starts afresh
        }
        let track = &mut tracks[r];
        track.state = Some(memory.state);
        track.since = memory.since;
        track.cleared_at = memory.cleared_at;
        track.firings = memory.firings;
        track.last_issued = memory.last_issued;
        track.last_issued.resize(policy.rules[r].actions.len(), None);
    }
}

#[derive(Clone, Debug, Default)]
struct RuleTrack {
    state: Option<RuleState>,
    /// Pending since / firing since.
    since: Option<Timestamp>,
    /// While firing: when the condition last turned false (for keepFiringFor).
    cleared_at: Option<Timestamp>,
    detector_state: DetectorState,
    firings: u64,
    last_issued: Vec<Option<Timestamp>>,
    last_error: Option<String>,
    last_reason: Reason,
    /// From the last evaluation of a script: when a time-driven function in it would turn true.
    script_wake: Option<Timestamp>,
}

struct JobEntry {
    data: Option<Box<JobData>>,
    last_evaluated: Option<Timestamp>,
    /// The job's entry in [`Evaluator::wakes`]: the earliest time its rules may change with no new sample.
    wake: Option<Timestamp>,
    /// The job's index in [`Evaluator::ids`], so timers carry a number instead of a copy of the key (the
    /// timer moves with nearly every sample of a job with a stall rule).
    id: usize,
    /// Rule tracks by policy index, then rule index; empty for policies that never selected the job.
    tracks: Vec<Vec<RuleTrack>>,
    /// Policies selecting the job, recomputed only when its labels or the policy set change (the hot path
    /// — a new sample — never clones labels or re-matches selectors).
    selected_by: Vec<usize>,
    selection_stale: bool,
}

impl JobEntry {
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
    jobs: FxHashMap<JobKey, JobEntry>,
    namespace_labels: HashMap<String, BTreeMap<String, String>>,
    /// The last cadence tick (every job re-evaluated at least once per `eval_interval`).
    last_tick: Option<Timestamp>,
    /// Exact timers: `for` and `keepFiringFor` running out, stall deadlines, budgets. Ordered by time, so the
    /// next one is the first entry; each job has at most one (its earliest, [`JobEntry::wake`]).
    wakes: BTreeSet<(Timestamp, usize)>,
    /// Job keys by [`JobEntry::id`]; `None` marks a free id (reused).
    ids: Vec<Option<JobKey>>,
    free_ids: Vec<usize>,
    /// Rule memories restored from a previous run (see [`Evaluator::restore`]), claimed by each job the first
    /// time a policy's rules are set up for it.
    restored: HashMap<(usize, JobKey), Vec<RuleMemory>>,
}

/// Counters for status and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleCounts {
    pub matched_jobs: usize,
    pub firing: usize,
    pub pending: usize,
}

impl Evaluator {
    pub fn new(config: EngineConfig) -> Self {
        let scripts = ScriptEngine::new(config.limits.clone());
        Evaluator {
            config,
            scripts,
            policies: Vec::new(),
            jobs: FxHashMap::default(),
            namespace_labels: HashMap::new(),
            last_tick: None,
            wakes: BTreeSet::new(),
            ids: Vec::new(),
            free_ids: Vec::new(),
            restored: HashMap::new(),
        }
    }

    /// The script engine policies must be compiled with.
    pub fn scripts(&self) -> &ScriptEngine {
        &self.scripts
    }

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
        let slot = PolicySlot { policy, next_calendar_change: None, active: None };
        match self.find_policy(&slot.policy.reference) {
            Some(index) => {
                self.carry_over(index, &slot.policy, now, out);
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
        let mut keys: Vec<JobKey> = self.jobs.keys().cloned().collect();
        keys.sort();
        for key in keys {
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
                        resolve_track(track, &key, old, old_rule, now, out);
                        let fresh = &mut new_tracks[n];
                        (fresh.last_issued, fresh.firings) = history;
                        fresh.last_issued.resize(new.rules[n].actions.len(), None);
                    }
                    None => resolve_track(track, &key, old, old_rule, now, out),
                }
            }
            job.tracks[index] = new_tracks;
        }
    }

    /// Removes a policy, resolving its firing rules.
    pub fn remove_policy(&mut self, reference: &PolicyRef, now: Timestamp, out: &mut Vec<Event>) {
        if let Some(index) = self.find_policy(reference) {
            self.retire_policy(index, now, out);
            self.policies[index] = None;
            self.restored.retain(|(p, _), _| *p != index);
            self.mark_selection_stale();
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
        let mut keys: Vec<&JobKey> = self.jobs.keys().collect();
        keys.sort();
        let keys: Vec<JobKey> = keys.into_iter().cloned().collect();
        for key in keys {
            let Some(job) = self.jobs.get_mut(&key) else { continue };
            job.selected_by.retain(|&p| p != index);
            if let Some(tracks) = job.tracks.get_mut(index) {
                for (r, track) in std::mem::take(tracks).into_iter().enumerate() {
                    resolve_track(track, &key, &slot.policy, &slot.policy.rules[r], now, out);
                }
            }
        }
    }

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
        let entry = self.entry(&key, now);
        let mut resumed = false;
        if let Some(data) = entry.data.as_mut() {
            if data.snapshot.labels != snapshot.labels {
                entry.selection_stale = true;
            }
            resumed = data.snapshot.phase != JobPhase::Running && snapshot.phase == JobPhase::Running;
            data.snapshot = snapshot;
        }
        if resumed {
            self.restart_after_resume(&key, now, out);
        }
        self.record_and_evaluate(&key, sample, now, out);
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
        self.entry(key, now);
        self.record_and_evaluate(key, Some(sample), now, out);
    }

    fn entry(&mut self, key: &JobKey, now: Timestamp) -> &mut JobEntry {
        if !self.jobs.contains_key(key) {
            self.insert_job(key, now);
        }
        self.jobs.get_mut(key).expect("inserted above")
    }

    fn insert_job(&mut self, key: &JobKey, now: Timestamp) {
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.ids[id] = Some(key.clone());
                id
            }
            None => {
                self.ids.push(Some(key.clone()));
                self.ids.len() - 1
            }
        };
        self.jobs.insert(
            key.clone(),
            JobEntry {
                data: Some(Box::new(JobData {
                    series: JobSeries::new(now),
                    snapshot: JobSnapshot::new(key.clone()),
                    first_seen: now,
                })),
                last_evaluated: None,
                wake: None,
                id,
                tracks: Vec::new(),
                selected_by: Vec::new(),
                selection_stale: true,
            },
        );
    }

    fn record_and_evaluate(
        &mut self,
        key: &JobKey,
        sample: Option<ProgressSample>,
        now: Timestamp,
        out: &mut Vec<Event>,
    ) {
        self.refresh_selection(key);
        let Some(entry) = self.jobs.get_mut(key) else { return };
        if let (Some(sample), Some(data)) = (&sample, entry.data.as_mut())
            && data.series.record(sample) == Recorded::New
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
                for (r_index, rule) in rules.iter().enumerate() {
                    if let Some(d) = &rule.detector {
                        d.observe(&mut tracks[r_index].detector_state, series, sample);
                    }
                }
            }
        }
        self.evaluate_job(key, now, out);
    }

    /// A job that runs again starts its judgement afresh: time spent suspended must not count toward `for`
    /// or a detector's patience, or a job resumed on purpose would be suspended again the moment it restarts.
    /// Pending rules clear and detector state resets; firing rules stay firing until they resolve.
    fn restart_after_resume(&mut self, key: &JobKey, now: Timestamp, out: &mut Vec<Event>) {
        let Some(entry) = self.jobs.get_mut(key) else { return };
        for (p, tracks) in entry.tracks.iter_mut().enumerate() {
            let Some(Some(slot)) = self.policies.get(p) else { continue };
            for (r, track) in tracks.iter_mut().enumerate() {
                track.detector_state = DetectorState::default();
                if track.state == Some(RuleState::Pending) {
                    track.state = Some(RuleState::Inactive);
                    track.since = None;
                    out.push(Event::Transition {
                        at: now,
                        job: key.clone(),
                        policy: slot.policy.reference.clone(),
                        rule: slot.policy.rules[r].name.clone(),
                        kind: TransitionKind::Cleared,
                        reason: Reason { summary: "the job was resumed".into(), ..Reason::default() },
                        mode: slot.policy.rules[r].mode,
                    });
                }
            }
        }
    }

    /// Evaluates one job now without new information (a heartbeat: time passes).
    pub fn tick_job(&mut self, key: &JobKey, now: Timestamp, out: &mut Vec<Event>) {
        self.refresh_selection(key);
        self.evaluate_job(key, now, out);
    }

    /// Recomputes which policies select a job, if its labels or the policy set changed.
    fn refresh_selection(&mut self, key: &JobKey) {
        let Some(entry) = self.jobs.get_mut(key) else { return };
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
        if let Some(job) = self.jobs.remove(key) {
            if let Some(wake) = job.wake {
                self.wakes.remove(&(wake, job.id));
            }
            if let Some(slot) = self.ids.get_mut(job.id) {
                *slot = None;
                self.free_ids.push(job.id);
            }
            for (p, tracks) in job.tracks.into_iter().enumerate() {
                if let Some(Some(slot)) = self.policies.get(p) {
                    for (r, track) in tracks.into_iter().enumerate() {
                        resolve_track(track, key, &slot.policy, &slot.policy.rules[r], now, out);
                    }
                }
            }
        }
    }

    /// When the next timer evaluation is due.
    pub fn next_tick(&self) -> Option<Timestamp> {
        let interval = self.config.eval_interval.as_secs_f64();
        let cadence = self.last_tick.and_then(|t| crate::time::add_seconds(t, interval));
        let calendar = self.policies.iter().flatten().filter_map(|s| s.next_calendar_change).min();
        let timer = self.wakes.first().map(|(t, _)| *t);
        [cadence, calendar, timer].into_iter().flatten().min()
    }

    /// Evaluates jobs not evaluated within the last interval (and every job when a calendar window opens
    /// or closes). Call it at [`Evaluator::next_tick`].
    pub fn tick(&mut self, now: Timestamp, out: &mut Vec<Event>) {
        let calendar_changed =
            self.policies.iter().flatten().any(|s| s.next_calendar_change.is_some_and(|c| c <= now));
        let interval = self.config.eval_interval.as_secs_f64();
        let cadence = self.last_tick.is_none_or(|t| crate::time::seconds(t, now) >= interval);
        let mut due: Vec<JobKey> = if calendar_changed || cadence {
            self.jobs
                .iter()
                .filter(|(_, j)| {
                    calendar_changed
                        || j.last_evaluated.is_none_or(|t| crate::time::seconds(t, now) >= interval)
                        || j.wake.is_some_and(|w| w <= now)
                })
                .map(|(k, _)| k.clone())
                .collect()
        } else {
            Vec::new()
        };
        // Timers that ran out (the cheap path: only those jobs).
        let ids = &self.ids;
        due.extend(
            self.wakes.iter().take_while(|(t, _)| *t <= now).filter_map(|(_, id)| ids.get(*id)?.clone()),
        );
        due.sort();
        due.dedup();
        for key in due {
            self.refresh_selection(&key);
            self.evaluate_job(&key, now, out);
        }
        if cadence {
            self.last_tick = Some(now);
        }
        if calendar_changed {
            self.refresh_calendar(now);
        }
    }

    fn refresh_calendar(&mut self, now: Timestamp) {
        for slot in self.policies.iter_mut().flatten() {
            slot.next_calendar_change = slot.policy.env.calendar.next_change_after(now);
            slot.active = Some(slot.policy.env.calendar.is_active(now));
        }
        if self.last_tick.is_none() {
            self.last_tick = Some(now);
        }
    }

    fn evaluate_job(&mut self, key: &JobKey, now: Timestamp, out: &mut Vec<Event>) {
        let Some(entry) = self.jobs.get_mut(key) else { return };
        entry.last_evaluated = Some(now);
        let Some(phase) = entry.data.as_ref().map(|d| d.snapshot.phase) else { return };
        let running = phase == JobPhase::Running;
        for i in 0..entry.selected_by.len() {
            let p_index = entry.selected_by[i];
            let Some(Some(slot)) = self.policies.get(p_index) else { continue };
            let policy = &slot.policy;
            // A suspended job teaches us nothing new: its rules keep their state, so a job a person resumed on
            // purpose is not suspended again the moment it restarts, only after its rule resolves and re-fires.
            if phase == JobPhase::Suspended {
                continue;
            }
            let active = running && slot.is_active(now);
            entry.tracks_mut(p_index, policy.rules.len());
            claim_memories(&mut self.restored, entry, key, p_index, policy);
            for (r_index, rule) in policy.rules.iter().enumerate() {
                let track = &mut entry.tracks[p_index][r_index];
                let verdict = if active {
                    condition(&self.scripts, policy, rule, track, &mut entry.data, now)
                } else {
                    Ok((None, None))
                };
                let track = &mut entry.tracks[p_index][r_index];
                match verdict {
                    Ok((reason, wake)) => {
                        track.last_error = None;
                        track.script_wake = wake;
                        advance(track, key, policy, rule, reason, now, entry.data.as_deref(), out);
                    }
                    Err(message) => {
                        if track.last_error.as_deref() != Some(message.as_str()) {
                            out.push(Event::RuleError {
                                at: now,
                                job: key.clone(),
                                policy: policy.reference.clone(),
                                rule: rule.name.clone(),
                                message: message.clone(),
                            });
                            track.last_error = Some(message);
                        }
                    }
                }
            }
        }
        // Policies that no longer select the job (labels changed): their rules resolve.
        for p in 0..entry.tracks.len() {
            if entry.tracks[p].is_empty() || entry.selected_by.contains(&p) {
                continue;
            }
            let tracks = std::mem::take(&mut entry.tracks[p]);
            if let Some(Some(slot)) = self.policies.get(p) {
                for (r, track) in tracks.into_iter().enumerate() {
                    resolve_track(track, key, &slot.policy, &slot.policy.rules[r], now, out);
                }
            }
        }
        self.rearm(key, now);
    }

    /// Recomputes a job's timer after an evaluation: the earliest of its pending rules' `for`, its firing
    /// rules' `keepFiringFor`, and its time-driven detectors' deadlines.
    fn rearm(&mut self, key: &JobKey, now: Timestamp) {
        let Some(entry) = self.jobs.get_mut(key) else { return };
        let mut wake: Option<Timestamp> = None;
        let mut consider = |t: Option<Timestamp>| {
            if let Some(t) = t.filter(|t| *t > now) {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        if let Some(data) = entry.data.as_deref()
            && data.snapshot.phase == JobPhase::Running
        {
            for &p in &entry.selected_by {
                let Some(Some(slot)) = self.policies.get(p) else { continue };
                let Some(tracks) = entry.tracks.get(p) else { continue };
                for (rule, track) in slot.policy.rules.iter().zip(tracks) {
                    match track.state.unwrap_or(RuleState::Inactive) {
                        RuleState::Pending => consider(
                            track.since.and_then(|s| crate::time::add_seconds(s, rule.for_.as_secs_f64())),
                        ),
                        RuleState::Firing => {
                            consider(track.cleared_at.and_then(|c| {
                                crate::time::add_seconds(c, rule.keep_firing_for.as_secs_f64())
                            }))
                        }
                        RuleState::Inactive => {
                            if let Some(d) = &rule.detector {
                                consider(d.wake_at(&track.detector_state, &data.view(&slot.policy.env, now)));
                            }
                            consider(track.script_wake);
                        }
                    }
                }
            }
        }
        if entry.wake != wake {
            if let Some(old) = entry.wake {
                self.wakes.remove(&(old, entry.id));
            }
            if let Some(new) = wake {
                self.wakes.insert((new, entry.id));
            }
            entry.wake = wake;
        }
    }

    /// What a policy's rules remember about each job beyond its history: pending since, firing, the
    /// firing count and when each action was last issued (for cooldowns). Persisted by the controller (in the
    /// policy status) and given back to [`Evaluator::restore`] after a restart, so a restart neither loses a
    /// `for` timer nor repeats an action. Only rules that are pending, firing or cooling down are listed.
    pub fn memories(&self, policy: &PolicyRef, now: Timestamp) -> Vec<RuleMemory> {
        let Some(p) = self.find_policy(policy) else { return Vec::new() };
        let Some(slot) = &self.policies[p] else { return Vec::new() };
        let mut out = Vec::new();
        for (key, job) in &self.jobs {
            for (rule, track) in slot.policy.rules.iter().zip(job.tracks.get(p).into_iter().flatten()) {
                let state = track.state.unwrap_or(RuleState::Inactive);
                let cooling = track.last_issued.iter().flatten().any(|last| {
                    crate::time::add_seconds(*last, rule.cooldown.as_secs_f64())
                        .is_none_or(|until| until > now)
                });
                if state == RuleState::Inactive && !cooling {
                    continue;
                }
                out.push(RuleMemory {
                    job: format!("{}/{}", key.namespace, key.name),
                    rule: rule.name.clone(),
                    state,
                    since: track.since,
                    cleared_at: track.cleared_at,
                    firings: track.firings,
                    last_issued: track.last_issued.clone(),
                    rule_hash: Some(rule_hash(rule)),
                });
            }
        }
        // Also what was restored but not yet claimed (its job not seen yet in this run).
        for ((index, _), memories) in &self.restored {
            if *index == p {
                out.extend(memories.iter().cloned());
            }
        }
        out.sort_by(|a, b| (&a.job, &a.rule).cmp(&(&b.job, &b.rule)));
        out
    }

    /// Gives a policy back what its rules remembered before a restart (see [`Evaluator::memories`]). Call it
    /// right after [`Evaluator::upsert_policy`] and before the jobs are observed: each memory is applied when
    /// its job's rules are first set up, instead of starting that rule inactive. Memories of rules that no
    /// longer exist are ignored; those of jobs never seen again are dropped by
    /// [`Evaluator::drop_unclaimed_memories`].
    pub fn restore(&mut self, policy: &PolicyRef, memories: Vec<RuleMemory>) {
        let Some(p) = self.find_policy(policy) else { return };
        for memory in memories {
            let Some(key) = JobKey::parse(&memory.job) else { continue };
            if let Some(entry) = self.jobs.get(&key)
                && entry.tracks.get(p).is_some_and(|t| !t.is_empty())
            {
                continue; // already judged in this run: what this run knows is newer
            }
            self.restored.entry((p, key)).or_default().push(memory);
        }
    }

    /// Forgets restored memories whose job has not been seen (it was deleted while nobody watched).
    pub fn drop_unclaimed_memories(&mut self) -> usize {
        let n = self.restored.values().map(Vec::len).sum();
        self.restored.clear();
        n
    }

    /// Rule state of one job, for status and tests.
    pub fn rule_state(&self, job: &JobKey, policy: &PolicyRef, rule: &str) -> Option<RuleState> {
        let p = self.find_policy(policy)?;
        let slot = self.policies[p].as_ref()?;
        let r = slot.policy.rules.iter().position(|x| x.name == rule)?;
        let track = self.jobs.get(job)?.tracks.get(p)?.get(r)?;
        Some(track.state.unwrap_or(RuleState::Inactive))
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
                match t.state {
                    Some(RuleState::Firing) => counts.firing += 1,
                    Some(RuleState::Pending) => counts.pending += 1,
                    _ => {}
                }
            }
        }
        counts
    }

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
                + strings(&data.snapshot.labels)
                + strings(&data.snapshot.annotations)
                + j.tracks.iter().map(|t| t.capacity() * std::mem::size_of::<RuleTrack>()).sum::<usize>()
                + j.tracks.iter().flatten().map(|t| t.last_issued.capacity() * 16).sum::<usize>(),
        )
    }
}

/// Evaluates the rule's condition: `Some(reason)` when it holds, and when a time-driven function of its
/// script would turn true (see [`crate::judge::script::Frame::wake`]).
fn condition(
    scripts: &ScriptEngine,
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    track: &RuleTrack,
    data: &mut Option<Box<JobData>>,
    now: Timestamp,
) -> Result<(Option<Reason>, Option<Timestamp>), String> {
    let mut findings = Vec::new();
    if let Some(detector) = &rule.detector {
        let Some(job) = data.as_deref() else { return Ok((None, None)) };
        match detector.check(&track.detector_state, &job.view(&policy.env, now)) {
            Some(f) => findings.push(f),
            None => return Ok((None, None)),
        }
    }
    let mut wake = None;
    if let Some(script) = &rule.script {
        let outcome = scripts.eval_condition(script, data, &policy.env, now).map_err(|e| e.to_string())?;
        if !outcome.value {
            return Ok((None, outcome.wake));
        }
        wake = outcome.wake;
        findings.extend(outcome.evidence);
    }
    Ok((Some(Reason::from_findings(findings, rule.when.as_deref())), wake))
}

#[allow(clippy::too_many_arguments)]
fn advance(
    track: &mut RuleTrack,
    key: &JobKey,
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    reason: Option<Reason>,
    now: Timestamp,
    data: Option<&JobData>,
    out: &mut Vec<Event>,
) {
    let state = track.state.unwrap_or(RuleState::Inactive);
    let transition = |kind: TransitionKind, reason: Reason, out: &mut Vec<Event>| {
        out.push(Event::Transition {
            at: now,
            job: key.clone(),
            policy: policy.reference.clone(),
            rule: rule.name.clone(),
            kind,
            reason,
            mode: rule.mode,
        });
    };
    match (state, reason) {
        (RuleState::Inactive, Some(reason)) => {
            if rule.for_.is_zero() {
                fire(track, key, policy, rule, reason, now, data, out);
            } else {
                track.state = Some(RuleState::Pending);
                track.since = Some(now);
                track.last_reason = reason.clone();
                transition(TransitionKind::Pending, reason, out);
            }
        }
        (RuleState::Pending, Some(reason)) => {
            let since = track.since.unwrap_or(now);
            track.last_reason = reason.clone();
            if crate::time::seconds(since, now) >= rule.for_.as_secs_f64() {
                fire(track, key, policy, rule, reason, now, data, out);
            }
        }
        (RuleState::Pending, None) => {
            track.state = Some(RuleState::Inactive);
            track.since = None;
            transition(TransitionKind::Cleared, std::mem::take(&mut track.last_reason), out);
        }
        (RuleState::Firing, Some(reason)) => {
            track.cleared_at = None;
            track.last_reason = reason;
        }
        (RuleState::Firing, None) => {
            let cleared = *track.cleared_at.get_or_insert(now);
            if crate::time::seconds(cleared, now) >= rule.keep_firing_for.as_secs_f64() {
                track.state = Some(RuleState::Inactive);
                track.since = None;
                track.cleared_at = None;
                transition(TransitionKind::Resolved, std::mem::take(&mut track.last_reason), out);
            }
        }
        (RuleState::Inactive, None) => {}
    }
}

#[allow(clippy::too_many_arguments)]
fn fire(
    track: &mut RuleTrack,
    key: &JobKey,
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    reason: Reason,
    now: Timestamp,
    data: Option<&JobData>,
    out: &mut Vec<Event>,
) {
    track.state = Some(RuleState::Firing);
    track.since = Some(now);
    track.cleared_at = None;
    track.firings += 1;
    track.last_reason = reason.clone();
    out.push(Event::Transition {
        at: now,
        job: key.clone(),
        policy: policy.reference.clone(),
        rule: rule.name.clone(),
        kind: TransitionKind::Firing,
        reason: reason.clone(),
        mode: rule.mode,
    });
    track.last_issued.resize(rule.actions.len(), None);
    for (i, action) in rule.actions.iter().enumerate() {
        if let Some(last) = track.last_issued[i] {
            // A cooldown past the representable range means "never again".
            let until = crate::time::add_seconds(last, rule.cooldown.as_secs_f64()).unwrap_or(Timestamp::MAX);
            if until > now {
                out.push(Event::Suppressed {
                    at: now,
                    job: key.clone(),
                    policy: policy.reference.clone(),
                    rule: rule.name.clone(),
                    action: action.kind(),
                    until,
                });
                continue;
            }
        }
        track.last_issued[i] = Some(now);
        let savings = match action {
            ActionSpec::Suspend(_) => data.and_then(|d| savings(d, policy, &reason, now)),
            _ => None,
        };
        out.push(Event::Intent(ActionIntent {
            id: intent_id(policy, rule, key, data, track.firings, i),
            at: now,
            job: key.clone(),
            policy: policy.reference.clone(),
            rule: rule.name.clone(),
            action: action.clone(),
            mode: rule.mode,
            reason: reason.clone(),
            savings,
        }));
    }
}

/// Unique per policy version, rule, job incarnation (its first-seen time: a re-created job is a new one),
/// firing and action, so an executor can deduplicate on it across retries and restarts.
fn intent_id(
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    key: &JobKey,
    data: Option<&JobData>,
    firing: u64,
    action: usize,
) -> String {
    let p = &policy.reference;
    // The job's creation time where known, so ids stay the same across controller restarts.
    let since = data.map_or(0, |d| d.snapshot.created_at.unwrap_or(d.first_seen).as_second());
    format!(
        "{}:{}:{}:{}:{}:{}:{}:{since}:{firing}:{action}",
        p.kind,
        p.namespace.as_deref().unwrap_or(""),
        p.name,
        p.generation,
        rule.name,
        key.namespace,
        key.name
    )
}

/// GPU time freed by stopping the job now: until its estimated end, or — for a stall inside an unattended
/// window — until the window ends, when someone would have noticed.
fn savings(data: &JobData, policy: &CompiledPolicy, reason: &Reason, now: Timestamp) -> Option<Savings> {
    let view = data.view(&policy.env, now);
    let gpus = view.gpus.filter(|g| *g > 0.0)?;
    let (until, basis) = match (reason.kind, policy.env.calendar.active_until(now)) {
        (Some(FindingKind::Stall), Some(end)) => (end, "windowEnd"),
        _ => (view.estimated_end()?, "estimatedEnd"),
    };
    let hours = crate::time::seconds(now, until) / 3600.0;
    if hours <= 0.0 {
        return None;
    }
    let gpu_hours = hours * gpus;
    Some(Savings { until, basis, gpus, gpu_hours, dollars: policy.env.gpu_hour_cost.map(|c| c * gpu_hours) })
}

fn resolve_track(
    track: RuleTrack,
    key: &JobKey,
    policy: &CompiledPolicy,
    rule: &CompiledRule,
    now: Timestamp,
    out: &mut Vec<Event>,
) {
    let kind = match track.state {
        Some(RuleState::Firing) => TransitionKind::Resolved,
        Some(RuleState::Pending) => TransitionKind::Cleared,
        _ => return,
    };
    out.push(Event::Transition {
        at: now,
        job: key.clone(),
        policy: policy.reference.clone(),
        rule: rule.name.clone(),
        kind,
        reason: track.last_reason,
        mode: rule.mode,
    });
}

#[cfg(test)]
mod tests;
