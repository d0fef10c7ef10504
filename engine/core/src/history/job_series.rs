//! One job's history: a [`MetricSeries`] per metric (at most `MAX_METRICS_PER_JOB`) plus the progress
//! fields. A TrainJob holds only its latest progress snapshot, so the engine keeps the history itself.
//!
//! [`JobSeries::approx_bytes`] reports the memory a job's history holds. With the default `WINDOW = 64` a
//! job with 8 metrics uses about 10 KiB (target ≤ 16 KiB), measured by the `series_memory` test and the
//! benchmark.

use std::borrow::Cow;

use crate::history::metric_series::{MetricParts, MetricSeries};
use crate::input::checkpoint_report::{ReportedCheckpoint, SavedCheckpoint};
use crate::input::sample::{ProgressSample, same_name};
use crate::time::Timestamp;

/// Metrics tracked per job; further metric names are counted in [`JobSeries::dropped_metrics`] and ignored,
/// so a reporter that invents a new name per step cannot grow memory without bound.
pub(crate) const MAX_METRICS_PER_JOB: usize = 32;

/// How far after the instant it is judged at a report's `lastUpdatedTime` may be before it counts as
/// stamped by a clock that jumped ahead: clocks of pods, the API server and the controller differ by seconds.
pub(crate) const MAX_STAMP_AHEAD: crate::units::duration::PolicyDuration =
    crate::units::duration::PolicyDuration::from_secs(300);

/// Everything the engine remembers about one job's progress.
#[derive(Clone, Debug)]
pub struct JobSeries {
    base: Timestamp,
    /// Canonical names stay the samples' shared `&'static str`s, so lookups mostly match by address.
    metrics: Vec<(Cow<'static, str>, MetricSeries)>,
    /// Samples accepted (after deduplication).
    pub samples: u64,
    /// Samples dropped: older than the previous one, or the very same report again (same `lastUpdatedTime`,
    /// same content).
    pub duplicates: u64,
    /// Of `duplicates`, the samples dropped for an older `lastUpdatedTime` than the previous one: out of
    /// order (a watch re-delivering an old object, or a reporter whose clock went back).
    pub out_of_order: u64,
    /// Samples stamped more than `MAX_STAMP_AHEAD` (5 minutes) after the instant they were judged at (a reporter's
    /// clock jumped ahead): recorded as of that instant (see [`JobSeries::record_at`]).
    pub stamped_ahead: u64,
    /// Metric names ignored because the job already had `MAX_METRICS_PER_JOB`.
    pub dropped_metrics: u64,
    /// `lastUpdatedTime` of the first accepted sample.
    pub first_sample_at: Option<Timestamp>,
    /// `lastUpdatedTime` of the latest accepted sample.
    pub last_sample_at: Option<Timestamp>,
    /// When a sample last differed from the one before (a new step, progress or metric value). RHOAI's
    /// controller re-stamps `lastUpdatedTime` on every poll, and a hung pod keeps answering with its last
    /// state, so "a new sample" alone does not mean "progress"; stall detection uses this.
    pub last_progress_at: Option<Timestamp>,
    /// The progress fields of the latest sample.
    pub last: Option<LastProgress>,
    /// A hash of the latest sample's RHOAI summary, and its number of metrics: with `last` and the series'
    /// latest values, what tells a repeated report from a new one (a hash, so a checkpoint can carry it).
    last_summary: Option<u64>,
    last_metric_count: usize,
    /// The [`log_group`]s in which the latest sample changed a value (a bit each).
    groups_changed: u8,
    /// The training group's log clock: when it was last logged, the latest intervals between logs that
    /// changed a value (seconds, newest last, 0 = none yet), and whether the latest sample was a log of it.
    train_log_at: Option<Timestamp>,
    /// When a sample last changed a training value (the intervals are measured between such samples).
    train_changed_at: Option<Timestamp>,
    train_intervals: [f32; 4],
    train_logged: bool,
    /// The latest training log was one of unchanged values (the values are stuck).
    train_stuck: bool,
    /// The longest silences between samples that changed something (see `last_progress_at`): when each
    /// began and how many seconds it lasted, longest first. A job's evaluation pauses and checkpoint saves
    /// are its rhythm, which `stalled` can learn.
    long_gaps: [Option<(Timestamp, f64)>; GAPS_KEPT],
    /// The job's last checkpoint (`since_checkpoint()`, `checkpoint_step()`): a report naming a pair other
    /// than the last one is a new checkpoint at that report's time; a report naming none changes nothing
    /// (a restarted process has not saved yet).
    pub last_checkpoint: Option<SavedCheckpoint>,
}

/// How many of a job's longest silences are kept.
pub(crate) const GAPS_KEPT: usize = 2;

/// A report that moved on without changing a training value counts as a log of its (unchanged) values once
/// this many typical logging intervals have passed since the last log that changed one; while the values
/// stay stuck, once [`RELOG_STUCK`] intervals have passed since the last such log.
const RELOG_INTERVALS: f64 = 1.5;
const RELOG_STUCK: f64 = 0.95;

/// The group a metric is logged with, as a bit: a trainer logs its evaluation metrics (`eval_*`) together at
/// an evaluation, and everything else together at a logging step. A report that changes one value of a group
/// is a new log of that group, so a value of the group that happens to repeat the last one bit for bit (a
/// loss rounded to 4 digits, the same twice on a plateau) was logged again; a report that changes none of a
/// group's values only re-sends them (the HF callback's heartbeat between logging steps, an `eval_loss`
/// repeated beside every training loss). [`JobSeries::logged`] and the backtest's curves read it.
pub(crate) fn log_group(name: &str) -> u8 {
    if name.starts_with("eval_") { 2 } else { 1 }
}

/// The progress fields of the latest sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LastProgress {
    pub progress_percent: Option<f64>,
    pub eta_seconds: Option<f64>,
    pub current_step: Option<f64>,
    pub total_steps: Option<f64>,
    pub current_epoch: Option<f64>,
    pub total_epochs: Option<f64>,
}

impl LastProgress {
    fn of(sample: &ProgressSample) -> Self {
        LastProgress {
            progress_percent: sample.progress_percent,
            eta_seconds: sample.eta_seconds,
            current_step: sample.current_step,
            total_steps: sample.total_steps,
            current_epoch: sample.current_epoch,
            total_epochs: sample.total_epochs,
        }
    }
}

/// What [`JobSeries::record`] did with a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    New,
    /// Older `lastUpdatedTime` than the previous sample, or the same one with the same content: dropped.
    Duplicate,
}

impl JobSeries {
    /// An empty history whose time offsets are measured from `base`.
    pub fn new(base: Timestamp) -> Self {
        JobSeries {
            base,
            metrics: Vec::new(),
            samples: 0,
            duplicates: 0,
            out_of_order: 0,
            stamped_ahead: 0,
            dropped_metrics: 0,
            first_sample_at: None,
            last_sample_at: None,
            last_progress_at: None,
            last: None,
            last_summary: None,
            last_metric_count: 0,
            groups_changed: 0,
            train_log_at: None,
            train_changed_at: None,
            train_intervals: [0.0; 4],
            train_logged: false,
            train_stuck: false,
            long_gaps: [None; GAPS_KEPT],
            last_checkpoint: None,
        }
    }

    /// [`JobSeries::record`] of a sample judged at `now`. A sample stamped more than `MAX_STAMP_AHEAD`
    /// after `now` carries a clock that jumped (a `lastUpdatedTime` in 2030): kept at its own time, it would
    /// make every later, rightly stamped report look older and be dropped, so a rule like `stalled` or
    /// `progress() > 50` would never fire again. It is re-stamped `now` (so detectors that read its time see
    /// the same), recorded, and counted.
    pub fn record_at(&mut self, sample: &mut ProgressSample, now: Timestamp) -> Recorded {
        if sample.updated_at.duration_since(now) > MAX_STAMP_AHEAD.to_signed_duration() {
            self.stamped_ahead += 1;
            sample.updated_at = now;
        }
        self.record(sample)
    }

    /// Adds a sample unless it predates the previous one or is the very same report again.
    ///
    /// - Older `lastUpdatedTime`: dropped (a watch re-delivers an object with an old `trainerStatus` when
    ///   anything else about it changes).
    /// - Same `lastUpdatedTime`, same content: dropped, the same report delivered twice. With new content it is
    ///   kept, as the newer report: Kubeflow's status server stores whole seconds, and transformers' forced
    ///   final update can share a second with the last step's.
    ///
    /// Which values of a recorded sample are observations (what sample-count windows count):
    /// - in a report that moved on (its step, progress, epochs or ETA differ from the previous sample's),
    ///   every value reported, even one bit-identical to the last: a run that logs the same loss at a new
    ///   step has observed it again, so a flat loss fills a sample-count window;
    /// - otherwise each value that differs from its metric's latest one. A value repeated bit for bit in a
    ///   report that did not move is a cached value re-sent, not an observation (see [`MetricSeries::push`]):
    ///   RHOAI's controller re-polling a pod that has not moved, or a reporter without progress fields
    ///   re-sending the last `eval_loss` beside a new training loss.
    pub fn record(&mut self, sample: &ProgressSample) -> Recorded {
        let progress = LastProgress::of(sample);
        if let Some(prev) = self.last_sample_at
            && (sample.updated_at < prev
                || (sample.updated_at == prev && self.repeats_last(sample, &progress)))
        {
            self.duplicates += 1;
            self.out_of_order += u64::from(sample.updated_at < prev);
            return Recorded::Duplicate;
        }
        let moved = self.last.is_some_and(|l| l != progress);
        self.samples += 1;
        self.first_sample_at.get_or_insert(sample.updated_at);
        self.last_sample_at = Some(sample.updated_at);
        let same_counters = self.last.is_some_and(|l| {
            l.current_step == progress.current_step
                && l.progress_percent == progress.progress_percent
                && l.current_epoch == progress.current_epoch
        });
        self.last = Some(progress);
        self.last_summary = sample.summary.as_deref().map(summary_hash);
        self.last_metric_count = sample.metrics.len();
        let mut same_metrics = true;
        let mut groups_changed = 0;
        for (k, m) in sample.metrics.iter().enumerate() {
            match self.slot(k, &m.name) {
                Some(i) => {
                    let series = &mut self.metrics[i].1;
                    let same = series.latest_observation().is_some_and(|v| v.to_bits() == m.value.to_bits());
                    same_metrics &= same;
                    series.changed = !same;
                    if !same {
                        groups_changed |= log_group(&m.name);
                    }
                    if moved {
                        series.observe(sample.updated_at, m.value);
                    } else {
                        series.push(sample.updated_at, m.value);
                    }
                }
                None if self.metrics.len() < MAX_METRICS_PER_JOB => {
                    same_metrics = false;
                    groups_changed |= log_group(&m.name);
                    let mut series = MetricSeries::new(self.base);
                    series.push(sample.updated_at, m.value);
                    series.changed = true;
                    self.metrics.push((m.name.clone(), series));
                }
                None => self.dropped_metrics += 1,
            }
        }
        self.groups_changed = groups_changed;
        if let Some(reported) = ReportedCheckpoint::of(&sample.metrics)
            && self.last_checkpoint.is_none_or(|c| c.reported != reported)
        {
            self.last_checkpoint = Some(SavedCheckpoint { reported, at: sample.updated_at });
        }
        self.tick_train_log(sample, moved);
        if !(same_counters && same_metrics) || self.last_progress_at.is_none() {
            if let Some(previous) = self.last_progress_at {
                self.note_gap(previous, crate::time::seconds(previous, sample.updated_at));
            }
            self.last_progress_at = Some(sample.updated_at);
        }
        Recorded::New
    }

    /// Where the series of the `k`-th metric of a sample named `name` is. Reporters send their metrics in the
    /// same order every time: the same position is tried first.
    fn slot(&self, k: usize, name: &str) -> Option<usize> {
        match self.metrics.get(k) {
            Some((n, _)) if same_name(n, name) => Some(k),
            _ => self.metrics.iter().position(|(n, _)| same_name(n, name)),
        }
    }

    /// Whether `sample` says exactly what the latest sample said: the same progress fields and summary, and
    /// the same metrics, each bit for bit its series' latest value.
    fn repeats_last(&self, sample: &ProgressSample, progress: &LastProgress) -> bool {
        let Some(last) = &self.last else { return false };
        if last != progress
            || self.last_summary != sample.summary.as_deref().map(summary_hash)
            || self.last_metric_count != sample.metrics.len()
        {
            return false;
        }
        sample.metrics.iter().enumerate().all(|(k, m)| match self.slot(k, &m.name) {
            Some(i) => {
                let series = &self.metrics[i].1;
                series.last_seen_at() == self.last_sample_at
                    && series.latest_observation().is_some_and(|v| v.to_bits() == m.value.to_bits())
            }
            // Not tracked (the job has too many metrics): nothing to compare, so it does not make news.
            None => self.metrics.len() >= MAX_METRICS_PER_JOB,
        })
    }

    /// The series of a canonical metric name, if the job reported it.
    pub fn metric(&self, name: &str) -> Option<&MetricSeries> {
        self.metrics.iter().find(|(n, _)| same_name(n, name)).map(|(_, s)| s)
    }

    /// Keeps a silence if it is among the longest seen.
    fn note_gap(&mut self, began: Timestamp, secs: f64) {
        // NaN is no silence either.
        if secs.is_nan() || secs <= 0.0 {
            return;
        }
        let Some(i) = self.long_gaps.iter().position(|g| g.is_none_or(|(_, s)| secs > s)) else { return };
        self.long_gaps[i..].rotate_right(1);
        self.long_gaps[i] = Some((began, secs));
    }

    /// The longest silence between samples that changed something, leaving out one that spans `restart`
    /// (the time the job was suspended in between is not part of its rhythm). `None` before two such
    /// samples.
    pub fn longest_gap(&self, restart: Option<Timestamp>) -> Option<f64> {
        self.long_gaps.iter().flatten().find_map(|&(began, secs)| {
            let spans = restart.is_some_and(|r| began < r && crate::time::seconds(began, r) < secs);
            (!spans).then_some(secs)
        })
    }

    /// Advances the training group's log clock with the latest sample. A training log is a sample that
    /// changed a training value; a sample that moved on (a new step) without changing one counts too once
    /// [`RELOG_INTERVALS`] typical logging intervals have passed since the last log (a loss stuck at exactly
    /// 0.0 or NaN under a constant learning rate is logged again and again with the same bits), then one
    /// every interval while they stay stuck; every such sample counts while no interval is known yet. A
    /// heartbeat between logs is not a log.
    fn tick_train_log(&mut self, sample: &ProgressSample, moved: bool) {
        let at = sample.updated_at;
        let changed = self.groups_changed & 1 != 0;
        let carries = sample.metrics.iter().any(|m| log_group(&m.name) == 1);
        let due = || {
            let mut known = self.train_intervals;
            let n = known.iter().filter(|i| **i > 0.0).count();
            if n == 0 {
                return true;
            }
            known.sort_by(f32::total_cmp); // the zeros (none yet) first
            let typical = f64::from(known[known.len() - n + n / 2]);
            let factor = if self.train_stuck { RELOG_STUCK } else { RELOG_INTERVALS };
            self.train_log_at.is_none_or(|last| crate::time::seconds(last, at) >= factor * typical)
        };
        self.train_logged = carries && (changed || (moved && due()));
        if !self.train_logged {
            return;
        }
        self.train_stuck = !changed;
        if changed {
            if let Some(last) = self.train_changed_at {
                let gap = crate::time::seconds(last, at) as f32;
                if gap > 0.0 {
                    self.train_intervals.rotate_left(1);
                    self.train_intervals[3] = gap;
                }
            }
            self.train_changed_at = Some(at);
        }
        self.train_log_at = Some(at);
    }

    /// Whether the latest sample carried a newly logged value of `name` (see [`log_group`]): the value
    /// changed, or another value of its group did, or — for training metrics — the sample is a training
    /// log by the group's clock ([`JobSeries::tick_train_log`]). `false` for a metric the latest sample did
    /// not carry.
    pub fn logged(&self, name: &str) -> bool {
        let group = log_group(name);
        self.metric(name).is_some_and(|s| {
            s.last_seen_at() == self.last_sample_at
                && (s.changed || self.groups_changed & group != 0 || (group == 1 && self.train_logged))
        })
    }

    /// The canonical names of the metrics tracked, in the order first seen.
    pub fn metric_names(&self) -> impl Iterator<Item = &str> {
        self.metrics.iter().map(|(n, _)| n.as_ref())
    }

    /// The history in plain values, for a checkpoint (see `history::checkpoint`): times of points are
    /// seconds relative to `origin`.
    pub(crate) fn export(&self, origin: Timestamp) -> JobParts {
        JobParts {
            metrics: self.metrics.iter().map(|(n, s)| (n.to_string(), s.export(origin))).collect(),
            samples: self.samples,
            dropped_metrics: self.dropped_metrics,
            first_sample_at: self.first_sample_at,
            last_sample_at: self.last_sample_at,
            last_progress_at: self.last_progress_at,
            last: self.last,
            last_summary: self.last_summary,
            last_metric_count: self.last_metric_count,
            long_gaps: self.long_gaps.iter().flatten().copied().collect(),
        }
    }

    /// A history holding what `parts` says (metrics beyond `MAX_METRICS_PER_JOB` and repeated names are
    /// left out, so no input can break the job's bounds).
    pub(crate) fn import(origin: Timestamp, parts: &JobParts) -> Self {
        let mut j = JobSeries::new(origin);
        for (name, metric) in &parts.metrics {
            if j.metrics.len() >= MAX_METRICS_PER_JOB || j.metric(name).is_some() {
                continue;
            }
            j.metrics.push((crate::input::interned(name), MetricSeries::import(origin, metric)));
        }
        j.samples = parts.samples;
        j.dropped_metrics = parts.dropped_metrics;
        j.first_sample_at = parts.first_sample_at;
        j.last_sample_at = parts.last_sample_at;
        j.last_progress_at = parts.last_progress_at;
        j.last = parts.last;
        j.last_summary = parts.last_summary;
        j.last_metric_count = parts.last_metric_count;
        for &(began, secs) in &parts.long_gaps {
            j.note_gap(began, secs);
        }
        j
    }

    /// Bytes used by this job's history, heap included.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.metrics.capacity() * std::mem::size_of::<(Cow<'static, str>, MetricSeries)>()
            + self
                .metrics
                .iter()
                .map(|(n, s)| {
                    let name = if matches!(n, Cow::Owned(_)) { n.len() } else { 0 };
                    name + s.approx_bytes() - std::mem::size_of::<MetricSeries>()
                })
                .sum::<usize>()
    }
}

/// What a [`JobSeries`] holds, as plain values (the duplicate counter, a statistic, is left out: it moves
/// with every re-delivered report, and a checkpoint must change only when the history does).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct JobParts {
    pub metrics: Vec<(String, MetricParts)>,
    pub samples: u64,
    pub dropped_metrics: u64,
    pub first_sample_at: Option<Timestamp>,
    pub last_sample_at: Option<Timestamp>,
    pub last_progress_at: Option<Timestamp>,
    pub last: Option<LastProgress>,
    pub last_summary: Option<u64>,
    pub last_metric_count: usize,
    /// The longest silences: when each began, how long (seconds).
    pub long_gaps: Vec<(Timestamp, f64)>,
}

/// FNV-1a (64-bit) of a summary: stable across processes and builds, unlike `std`'s hasher.
pub(crate) fn summary_hash(summary: &str) -> u64 {
    crate::history::fnv1a(summary.as_bytes())
}
