//! Replay across cores: the jobs sharded by key over several [`Replay`]s, each with its own evaluator (its
//! own Rhai engine and timers), and their events merged back into exactly the order one replay gives.
//!
//! Jobs do not see each other (a policy's `spec.limits` and the engine's hourly cap do: with them there is
//! one shard, [`Sharding::refuses`]). What one replay's order depends on besides each job's own events is
//! *where* a timer runs: before a record if it is due earlier, right after the first record of its time if
//! due then (a job's sample at a stall limit counts, see [`Replay::feed`]). So every shard is told the time
//! of every record ([`ShardInput`] without its record, once per distinct time, to the shards the record is not for),
//! runs its timers where one replay would, and labels each event with its [`Place`] in one replay's order:
//! the record it comes with, the part of that record's processing (timers before it, the record, timers at
//! its time after it), the timer's time, whether it is an evaluation's event or the follow-up of an enforced
//! suspension (one replay prints those after all of an evaluation round's events), and the job (a timer round
//! evaluates its jobs in key order). Each shard's events are in order of their places; [`PlaceMerge`] merges
//! the shards' streams by place, and the places of different shards never tie (a job is on one shard).
//!
//! This module runs nothing in parallel and does no I/O: the caller (the CLI) gives each shard its own
//! thread and moves the inputs and events between them.
//!
//! Cohorts (a policy's `median_stop`, `percentile` or `successive_halving` judges a job against its
//! siblings) couple the jobs of a cohort: [`Sharding::shard_of`] is the one place that picks a job's shard,
//! and when a policy groups jobs the cohort key (the grouping label and its value) takes the place of the
//! job's key there, so a cohort's jobs share a shard. [`Dispatch`] pins a job to its shard at its first
//! record: its cohort must be known then (its labels on its first line, as the recorder writes them); a job
//! whose cohort label appears only later, on another shard than its own, is named by
//! [`Dispatch::misplaced`] and the caller replays on one shard instead.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet, FxHasher};

use super::{Replay, Summary, count_event};
use crate::evaluate::{EngineConfig, Event};
use crate::input::sample::JobKey;
use crate::input::stream::StreamRecord;
use crate::policy::compile::CompiledPolicy;
use crate::time::Timestamp;

/// How jobs are spread over shards.
#[derive(Clone, Debug)]
pub struct Sharding {
    shards: usize,
    /// The labels that group jobs into cohorts, of the policies with cohort rules (empty: none).
    cohort_labels: Arc<[String]>,
}

impl Sharding {
    /// `shards` shards (at least one), jobs spread by their own key.
    pub fn new(shards: usize) -> Self {
        Sharding { shards: shards.max(1), cohort_labels: Arc::from(Vec::new()) }
    }

    /// `shards` shards for these policies: when some group jobs into cohorts, a cohort's jobs share a shard.
    pub fn for_policies<'a>(shards: usize, policies: impl IntoIterator<Item = &'a CompiledPolicy>) -> Self {
        let mut labels: Vec<String> = policies
            .into_iter()
            .filter(|p| p.rules.iter().any(|r| r.detector.as_ref().is_some_and(|d| d.cohort().is_some())))
            .map(|p| p.cohort.label().to_string())
            .collect();
        labels.sort();
        labels.dedup();
        Sharding { shards: shards.max(1), cohort_labels: Arc::from(labels) }
    }

    /// The cohort key of a job with these labels: the first grouping label it carries, with its value.
    fn cohort_of<'a>(&'a self, labels: &'a BTreeMap<String, String>) -> Option<(&'a str, &'a str)> {
        self.cohort_labels.iter().find_map(|l| labels.get(l).map(|v| (l.as_str(), v.as_str())))
    }

    /// The shard of a job with these labels: its cohort's when it is in one, else its own.
    pub fn shard_of_labelled(&self, job: &JobKey, labels: Option<&BTreeMap<String, String>>) -> usize {
        if self.shards == 1 {
            return 0;
        }
        match labels.and_then(|l| self.cohort_of(l)) {
            Some(cohort) => {
                let mut hasher = FxHasher::default();
                cohort.hash(&mut hasher);
                ((hasher.finish() >> 32) % self.shards as u64) as usize
            }
            None => self.shard_of(job),
        }
    }

    /// How many shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The shard of a job: a hash of its key (namespace and name). The one place that decides it (see the
    /// module on cohorts).
    pub fn shard_of(&self, job: &JobKey) -> usize {
        if self.shards == 1 {
            return 0;
        }
        let mut hasher = FxHasher::default();
        job.hash(&mut hasher);
        // The high bits: FxHash's low bits are weak for keys that differ in their last bytes.
        ((hasher.finish() >> 32) % self.shards as u64) as usize
    }

    /// Why these policies must be replayed on one shard, if they must: blast-radius limits count firings
    /// over every job of a policy (or of the engine), so a shard would not see the others' firings.
    pub fn refuses(policies: &[CompiledPolicy], config: &EngineConfig) -> Option<String> {
        if config.max_actions_per_hour.is_some() {
            return Some("the engine's hourly action cap counts every job's firings".into());
        }
        policies
            .iter()
            .find(|p| p.limits.max_actions_per_hour.is_some() || p.limits.max_concurrent_suspended.is_some())
            .map(|p| {
                format!(
                    "{} {} has spec.limits, which count every job's firings",
                    p.reference.kind, p.reference
                )
            })
    }
}

/// What a shard is given, in the order of the merged stream: a record of one of its jobs, or (no record)
/// the time of another shard's record, the first of its time, where it runs the timers one replay would
/// run there. (A struct, not an enum of the two: a record is large and not boxed, see [`StreamRecord`].)
#[derive(Debug)]
pub struct ShardInput {
    /// The record's number in the merged stream (from 0).
    step: u64,
    /// Its time.
    time: Timestamp,
    /// The record, if it is this shard's.
    record: Option<StreamRecord>,
}

/// Routes the merged stream's records to shards (see the module).
pub struct Dispatch {
    sharding: Sharding,
    step: u64,
    last_time: Option<Timestamp>,
    /// With cohorts: each job's shard, pinned at its first record.
    pinned: FxHashMap<JobKey, usize>,
    /// Jobs whose cohort, known only after their first record, is on another shard.
    misplaced: Vec<JobKey>,
}

impl Dispatch {
    /// A dispatch over `sharding`'s shards.
    pub fn new(sharding: Sharding) -> Self {
        Dispatch { sharding, step: 0, last_time: None, pinned: FxHashMap::default(), misplaced: Vec::new() }
    }

    /// Jobs whose cohort label came after their first record and names a cohort on another shard: their
    /// cohort was judged apart (the caller says so and replays on one shard).
    pub fn misplaced(&self) -> &[JobKey] {
        &self.misplaced
    }

    fn shard_for(&mut self, record: &StreamRecord) -> usize {
        if self.sharding.shards == 1 || self.sharding.cohort_labels.is_empty() {
            return self.sharding.shard_of(record.job());
        }
        let labels = match record {
            StreamRecord::Object { snapshot, .. } => Some(&snapshot.labels),
            StreamRecord::Update(u) => u.labels.as_ref(),
        };
        let wanted = labels
            .filter(|l| self.sharding.cohort_of(l).is_some())
            .map(|l| self.sharding.shard_of_labelled(record.job(), Some(l)));
        match self.pinned.get(record.job()) {
            Some(&shard) => {
                if wanted.is_some_and(|w| w != shard) && !self.misplaced.contains(record.job()) {
                    self.misplaced.push(record.job().clone());
                }
                shard
            }
            None => {
                let shard = wanted.unwrap_or_else(|| self.sharding.shard_of(record.job()));
                self.pinned.insert(record.job().clone(), shard);
                shard
            }
        }
    }

    /// Puts `record` into its shard's batch, and its time alone into the others' when its time is
    /// new. `batches` has one vector per shard.
    pub fn route(&mut self, record: StreamRecord, batches: &mut [Vec<ShardInput>]) {
        let step = self.step;
        self.step += 1;
        let time = record.time();
        let shard = self.shard_for(&record);
        if self.last_time != Some(time) {
            self.last_time = Some(time);
            for (i, batch) in batches.iter_mut().enumerate() {
                if i != shard {
                    batch.push(ShardInput { step, time, record: None });
                }
            }
        }
        batches[shard].push(ShardInput { step, time, record: Some(record) });
    }

    /// Records routed so far: the step of [`ShardReplay::finish`].
    pub fn steps(&self) -> u64 {
        self.step
    }
}

/// Where an event comes in one replay's output (see the module); ordered as that output is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    step: u64,
    part: Part,
    time: Timestamp,
    follow_up: bool,
    job: JobKey,
}

impl Place {
    /// The record (or, after the last, the end) the event comes with.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Whether one replay counts this event in its summary (a suspension's follow-ups are not counted).
    pub fn counted(&self) -> bool {
        !self.follow_up
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// Loading the policies and exceptions, before any record.
    Start,
    /// Timers due before the record's time (and the first round, at the first record).
    Before,
    /// The record itself.
    Record,
    /// Timers due at the record's time, after it.
    After,
}

/// One shard: a [`Replay`] of its jobs whose events carry their [`Place`].
pub struct ShardReplay {
    replay: Replay,
    /// The place of each event in `replay.events`.
    places: Vec<Place>,
}

impl ShardReplay {
    /// Shard `index` of a replay. Loading the policies and exceptions happens before any job exists, so
    /// every shard has the same start events: shard 0 keeps them, the others drop them.
    pub fn new(mut replay: Replay, index: usize) -> Self {
        if index != 0 {
            replay.events.clear();
        }
        let start = Timestamp::UNIX_EPOCH;
        let places = replay
            .events
            .iter()
            .map(|e| Place {
                step: 0,
                part: Part::Start,
                time: start,
                follow_up: false,
                job: e.job().clone(),
            })
            .collect();
        ShardReplay { replay, places }
    }

    /// The shard's replay (its evaluator's jobs, for what the output shows beside an event).
    pub fn replay(&self) -> &Replay {
        &self.replay
    }

    /// Runs one input as one replay would (see the module).
    pub fn step(&mut self, input: ShardInput) {
        let places = &mut self.places;
        let ShardInput { step, time, record } = input;
        let mut before =
            |r: &mut Replay, at: Timestamp, counted: usize| label(r, places, step, Part::Before, at, counted);
        let time = self.replay.begin_record_marked(time, &mut before);
        if let Some(record) = record {
            let counted = self.replay.apply_record(record, time);
            label(&self.replay, &mut self.places, step, Part::Record, time, counted);
        }
        let places = &mut self.places;
        let mut after =
            |r: &mut Replay, at: Timestamp, counted: usize| label(r, places, step, Part::After, at, counted);
        self.replay.run_timers_marked(time, true, &mut after);
    }

    /// After the last record (`steps` of them): runs the timers to `until`, as [`Replay::finish`] does.
    pub fn finish(&mut self, steps: u64, until: Option<Timestamp>) {
        if let Some(until) = until {
            let places = &mut self.places;
            let mut end = |r: &mut Replay, at: Timestamp, counted: usize| {
                label(r, places, steps, Part::Before, at, counted);
            };
            self.replay.run_timers_marked(until, true, &mut end);
        }
        self.replay.finish(None);
        // Every policy's counts, also those that selected every job of this shard (not of every shard).
        self.replay.summary.not_selected = self.replay.not_selected(true);
    }

    /// The events so far, with their places, in order; they are taken.
    pub fn take_events(&mut self) -> impl Iterator<Item = (Place, Event)> + '_ {
        debug_assert_eq!(self.places.len(), self.replay.events.len());
        debug_assert!(self.places.is_sorted(), "a shard's events come in order of their places");
        self.places.drain(..).zip(self.replay.events.drain(..))
    }

    /// The shard's summary, for [`PlaceMerge::summary`] (after [`ShardReplay::finish`], its `not_selected`
    /// lists every policy, to be added up).
    pub fn summary(&self) -> &Summary {
        &self.replay.summary
    }
}

/// Labels the events `replay` added since the last label: the first `counted` are an evaluation's, the rest
/// follow-ups of its enforced suspensions.
fn label(replay: &Replay, places: &mut Vec<Place>, step: u64, part: Part, time: Timestamp, counted: usize) {
    let start = places.len();
    for (i, event) in replay.events[start..].iter().enumerate() {
        places.push(Place { step, part, time, follow_up: i >= counted, job: event.job().clone() });
    }
}

/// The shards' events merged into one replay's order (see the module), with what the caller keeps beside
/// each (`A`); and the summary's counts made from them in that order.
pub struct PlaceMerge<A> {
    queues: Vec<VecDeque<(Place, Event, A)>>,
    /// Per shard: the steps it has run (every later event of it has a later step); `u64::MAX` once it
    /// has finished.
    through: Vec<Option<u64>>,
    summary: Summary,
    saved_for: [FxHashSet<JobKey>; 2],
}

impl<A> PlaceMerge<A> {
    /// A merge of `shards` streams.
    pub fn new(shards: usize) -> Self {
        PlaceMerge {
            queues: (0..shards).map(|_| VecDeque::new()).collect(),
            through: vec![None; shards],
            summary: Summary::default(),
            saved_for: [FxHashSet::default(), FxHashSet::default()],
        }
    }

    /// Events of shard `shard`, in order, after which it has run every input up to step `through` (all
    /// inputs, `u64::MAX`, when it has finished).
    pub fn push(&mut self, shard: usize, events: impl IntoIterator<Item = (Place, Event, A)>, through: u64) {
        self.queues[shard].extend(events);
        self.through[shard] = Some(through);
    }

    /// The next event in one replay's order, once no shard can still have an earlier one.
    pub fn pop(&mut self) -> Option<(Event, A)> {
        let done = self.through.iter().map(|t| t.map_or(0, |t| t.saturating_add(1))).min().unwrap_or(0);
        let (shard, _) = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.front().map(|(place, ..)| (i, place)))
            .filter(|(_, place)| place.step < done)
            .min_by(|a, b| a.1.cmp(b.1))?;
        let (place, event, extra) = self.queues[shard].pop_front().expect("a front");
        if place.counted() {
            count_event(&mut self.summary, &mut self.saved_for, &event);
        }
        Some((event, extra))
    }

    /// The whole replay's summary, from the shards' own (after every event was popped): records, jobs and
    /// ignored records add up; the first record and the clock's end are every shard's alike.
    pub fn summary<'a>(&self, shards: impl IntoIterator<Item = &'a Summary>) -> Summary {
        debug_assert!(self.queues.iter().all(VecDeque::is_empty), "every event merged");
        let mut total = self.summary.clone();
        let shards: Vec<&Summary> = shards.into_iter().collect();
        for s in &shards {
            total.records += s.records;
            total.jobs += s.jobs;
            total.ignored_after_suspend += s.ignored_after_suspend;
            total.first_record = total.first_record.or(s.first_record);
            total.last_time = total.last_time.max(s.last_time);
            total.odd_reports.extend(s.odd_reports.iter().cloned());
        }
        total.odd_reports.sort_by(|a, b| a.job.cmp(&b.job));
        if let Some(first) = shards.first() {
            // The same policies in the same order on every shard: a metric no job reported is one no
            // shard's jobs reported; the calendars are judged on the stream's first and last time, alike.
            total.unreported_metrics = first
                .unreported_metrics
                .iter()
                .filter(|m| shards.iter().all(|s| s.unreported_metrics.contains(m)))
                .cloned()
                .collect();
            total.never_active.clone_from(&first.never_active);
            total.not_selected = first
                .not_selected
                .iter()
                .enumerate()
                .map(|(i, policy)| {
                    let mut sum = policy.clone();
                    for s in &shards[1..] {
                        let other = &s.not_selected[i];
                        sum.selected += other.selected;
                        for (reason, n) in &other.reasons {
                            *sum.reasons.entry(reason.clone()).or_default() += n;
                        }
                    }
                    sum
                })
                .filter(|p| !p.reasons.is_empty())
                .collect();
        }
        total
    }
}

#[cfg(test)]
mod tests;
