//! Bounded per-job history.
//!
//! A TrainJob holds only its latest progress snapshot, so the engine keeps the history itself. Per job it
//! keeps one [`MetricSeries`] per metric (at most [`MAX_METRICS_PER_JOB`]) plus the progress fields. Each
//! series is a ring of the last [`WINDOW`] finite points with running sums (mean, variance, least-squares
//! slope) and monotonic queues (min, max), so every update is O(1) amortized and every windowed query over
//! the whole ring is O(1). Sub-window queries (`mean over the last n`) scan at most `WINDOW` points.
//!
//! A report that repeats a metric's latest value bit for bit is a repeat of a cached value, not a new
//! observation (see [`MetricSeries::push`]): sample counts and windows count distinct observations.
//!
//! NaN and ±Inf never enter the ring or any aggregate: they are counted as non-finite events with their
//! time, so one diverged step cannot poison a mean, a slope or a best value (the Ray Tune median bug).
//!
//! Memory: a series is a fixed-size array of `WINDOW` × 16-byte points plus two inline index queues of
//! `WINDOW` one-byte entries and ~150 bytes of scalars; [`JobSeries::approx_bytes`] reports the real
//! figure. With the default `WINDOW = 64` a job with 8 metrics uses about 10 KiB (target ≤ 16 KiB),
//! measured by the `series_memory` test and the benchmark.

use std::borrow::Cow;

use crate::input::sample::{ProgressSample, same_name};

use crate::time::Timestamp;

/// Points kept per metric.
pub(crate) const WINDOW: usize = 64;
/// Metrics tracked per job; further metric names are counted in [`JobSeries::dropped_metrics`] and ignored,
/// so a reporter that invents a new name per step cannot grow memory without bound.
pub(crate) const MAX_METRICS_PER_JOB: usize = 32;
/// Smoothing factor of the exponential moving average (weight of the newest point).
pub(crate) const EMA_ALPHA: f64 = 0.1;

/// Which way is better for a metric.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Lower is better (losses, perplexity).
    Min,
    /// Higher is better (accuracy, F1, throughput).
    Max,
}

impl Direction {
    /// Keras' `mode="auto"`: metrics whose name says accuracy-like are maximized, everything else minimized.
    pub fn infer(metric: &str) -> Direction {
        const HIGHER_IS_BETTER: [&str; 12] = [
            "acc",
            "accuracy",
            "f1",
            "precision",
            "recall",
            "auc",
            "bleu",
            "rouge",
            "score",
            "map",
            "throughput",
            "samples_per_second",
        ];
        let contains = |needle: &str| {
            metric.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
        };
        if HIGHER_IS_BETTER
            .iter()
            .any(|w| metric.split(['_', '.', '-']).any(|part| part.eq_ignore_ascii_case(w)))
            || contains("accuracy")
            || contains("throughput")
        {
            Direction::Max
        } else {
            Direction::Min
        }
    }

    /// True when `candidate` is strictly better than `reference`.
    pub fn better(self, candidate: f64, reference: f64) -> bool {
        match self {
            Direction::Min => candidate < reference,
            Direction::Max => candidate > reference,
        }
    }

    /// The better of two values.
    pub fn pick(self, a: f64, b: f64) -> f64 {
        if self.better(b, a) { b } else { a }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Point {
    /// Seconds since the series' base time (kept small so the running sums stay precise).
    t: f64,
    v: f64,
}

/// The best value seen and when it was first reached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Best {
    pub value: f64,
    pub at: Timestamp,
    /// Index of the sample (1-based count) that reached it.
    pub sample: u64,
}

/// Windowed statistics over the points currently in the ring.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowStats {
    pub count: usize,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    /// Population standard deviation.
    pub std: f64,
    /// Least-squares slope in value units per second; 0 with fewer than two points or no time spread.
    pub slope_per_second: f64,
}

/// A deque of at most [`WINDOW`] sequence numbers, stored inline: the monotonic min/max queues are touched on
/// every push, and a heap buffer per queue would be two more cache lines to fetch per sample.
#[derive(Clone, Debug)]
struct SeqQueue {
    items: [u8; WINDOW],
    head: u8,
    len: u8,
}

impl SeqQueue {
    const fn new() -> Self {
        SeqQueue { items: [0; WINDOW], head: 0, len: 0 }
    }

    fn front(&self) -> Option<u8> {
        (self.len > 0).then(|| self.items[self.head as usize])
    }

    fn back(&self) -> Option<u8> {
        (self.len > 0).then(|| self.items[(self.head as usize + self.len as usize - 1) % WINDOW])
    }

    fn pop_front(&mut self) {
        self.head = ((self.head as usize + 1) % WINDOW) as u8;
        self.len -= 1;
    }

    fn pop_back(&mut self) {
        self.len -= 1;
    }

    /// Never more than [`WINDOW`] entries: each names a point in the ring, and the ring evicts first.
    fn push_back(&mut self, seq: u8) {
        self.items[(self.head as usize + self.len as usize) % WINDOW] = seq;
        self.len += 1;
    }
}

/// History of one metric.
#[derive(Clone, Debug)]
pub struct MetricSeries {
    base: Timestamp,
    ring: [Point; WINDOW],
    /// Index of the oldest point in `ring`.
    head: u8,
    len: u8,
    /// Ring offsets (0..len, oldest = 0 at head) are unstable, so the queues hold absolute sequence numbers
    /// modulo 256; WINDOW < 256 keeps them unambiguous.
    min_queue: SeqQueue,
    max_queue: SeqQueue,
    /// Sequence number (mod 256) of the point at `head`.
    head_seq: u8,
    sum_t: f64,
    sum_v: f64,
    sum_tt: f64,
    sum_tv: f64,
    sum_vv: f64,
    /// Number of finite points ever pushed.
    count: u64,
    last: Option<(Timestamp, f64)>,
    best_min: Option<Best>,
    best_max: Option<Best>,
    /// Best values among points that already left the ring, for "best before the window" questions.
    evicted_min: f64,
    evicted_max: f64,
    ema: Option<f64>,
    non_finite_count: u64,
    last_non_finite: Option<(Timestamp, f64)>,
    /// Evictions since the sums were last recomputed exactly from the ring.
    evictions_since_resum: u32,
    /// Reports that repeated the latest observation bit for bit (see [`MetricSeries::push`]).
    repeats: u64,
    last_seen_at: Option<Timestamp>,
    /// Whether the latest push was a new observation rather than a repeat.
    fresh: bool,
}

impl MetricSeries {
    /// An empty series whose time offsets are measured from `base`.
    pub fn new(base: Timestamp) -> Self {
        MetricSeries {
            base,
            ring: [Point::default(); WINDOW],
            head: 0,
            len: 0,
            min_queue: SeqQueue::new(),
            max_queue: SeqQueue::new(),
            head_seq: 0,
            sum_t: 0.0,
            sum_v: 0.0,
            sum_tt: 0.0,
            sum_tv: 0.0,
            sum_vv: 0.0,
            count: 0,
            last: None,
            best_min: None,
            best_max: None,
            evicted_min: f64::INFINITY,
            evicted_max: f64::NEG_INFINITY,
            ema: None,
            non_finite_count: 0,
            last_non_finite: None,
            evictions_since_resum: 0,
            repeats: 0,
            last_seen_at: None,
            fresh: false,
        }
    }

    /// Records one observation. Non-finite values are counted, not aggregated.
    ///
    /// A value bit-identical to the latest observation is a repeat, not an observation: reporters re-send
    /// their cached values (the HF callback repeats the last logged loss in every 5-second report until the
    /// next logging step; RHOAI re-polls every 30 s). Counting repeats would make "10 samples without
    /// improvement" fire on a loss that was simply not logged again, and would pull a window's std to zero.
    /// Repeats only move [`MetricSeries::last_seen_at`].
    pub fn push(&mut self, at: Timestamp, value: f64) {
        self.last_seen_at = Some(at);
        if self.latest_observation().is_some_and(|prev| prev.to_bits() == value.to_bits()) {
            self.repeats += 1;
            self.fresh = false;
            return;
        }
        self.fresh = true;
        if !value.is_finite() {
            self.non_finite_count += 1;
            self.last_non_finite = Some((at, value));
            return;
        }
        self.count += 1;
        self.last = Some((at, value));
        let sample = self.count;
        match self.best_min {
            Some(b) if b.value <= value => {}
            _ => self.best_min = Some(Best { value, at, sample }),
        }
        match self.best_max {
            Some(b) if b.value >= value => {}
            _ => self.best_max = Some(Best { value, at, sample }),
        }
        self.ema = Some(match self.ema {
            None => value,
            Some(prev) => prev + EMA_ALPHA * (value - prev),
        });

        if self.len as usize == WINDOW {
            self.evict_oldest();
        }
        let t = crate::time::seconds(self.base, at);
        let slot = (self.head as usize + self.len as usize) % WINDOW;
        self.ring[slot] = Point { t, v: value };
        let seq = self.head_seq.wrapping_add(self.len);
        self.len += 1;
        self.sum_t += t;
        self.sum_v += value;
        self.sum_tt += t * t;
        self.sum_tv += t * value;
        self.sum_vv += value * value;
        while let Some(back) = self.min_queue.back() {
            if self.value_at_seq(back) >= value {
                self.min_queue.pop_back();
            } else {
                break;
            }
        }
        self.min_queue.push_back(seq);
        while let Some(back) = self.max_queue.back() {
            if self.value_at_seq(back) <= value {
                self.max_queue.pop_back();
            } else {
                break;
            }
        }
        self.max_queue.push_back(seq);
    }

    fn value_at_seq(&self, seq: u8) -> f64 {
        let offset = seq.wrapping_sub(self.head_seq) as usize;
        self.ring[(self.head as usize + offset) % WINDOW].v
    }

    fn evict_oldest(&mut self) {
        let p = self.ring[self.head as usize];
        self.evicted_min = self.evicted_min.min(p.v);
        self.evicted_max = self.evicted_max.max(p.v);
        if self.min_queue.front() == Some(self.head_seq) {
            self.min_queue.pop_front();
        }
        if self.max_queue.front() == Some(self.head_seq) {
            self.max_queue.pop_front();
        }
        self.head = ((self.head as usize + 1) % WINDOW) as u8;
        self.head_seq = self.head_seq.wrapping_add(1);
        self.len -= 1;
        self.sum_t -= p.t;
        self.sum_v -= p.v;
        self.sum_tt -= p.t * p.t;
        self.sum_tv -= p.t * p.v;
        self.sum_vv -= p.v * p.v;
        // Subtracting from running sums accumulates rounding error; recompute exactly now and then.
        self.evictions_since_resum += 1;
        if self.evictions_since_resum >= WINDOW as u32 {
            self.resum();
        }
    }

    fn resum(&mut self) {
        self.evictions_since_resum = 0;
        // Rebase times onto the oldest point so sums of t² stay small however long the job runs.
        let shift = self.ring[self.head as usize].t;
        if shift != 0.0 && self.len > 0 {
            for i in 0..self.len as usize {
                self.ring[(self.head as usize + i) % WINDOW].t -= shift;
            }
            if let Some(base) = crate::time::add_seconds(self.base, shift) {
                self.base = base;
            }
        }
        let (mut st, mut sv, mut stt, mut stv, mut svv) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for p in self.points() {
            st += p.t;
            sv += p.v;
            stt += p.t * p.t;
            stv += p.t * p.v;
            svv += p.v * p.v;
        }
        (self.sum_t, self.sum_v, self.sum_tt, self.sum_tv, self.sum_vv) = (st, sv, stt, stv, svv);
    }

    fn points(&self) -> impl DoubleEndedIterator<Item = Point> + '_ {
        (0..self.len as usize).map(move |i| self.ring[(self.head as usize + i) % WINDOW])
    }

    /// Whether the latest report brought a new value (false for a repeat).
    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// Reports that repeated the latest value.
    pub fn repeats(&self) -> u64 {
        self.repeats
    }

    /// When the metric was last reported, repeats included.
    pub fn last_seen_at(&self) -> Option<Timestamp> {
        self.last_seen_at
    }

    /// The latest observation, finite or not.
    pub fn latest_observation(&self) -> Option<f64> {
        match (self.last, self.last_non_finite) {
            (Some((good_at, _)), Some((bad_at, bad))) if bad_at > good_at => Some(bad),
            (Some((_, good)), _) => Some(good),
            (None, Some((_, bad))) => Some(bad),
            (None, None) => None,
        }
    }

    /// Finite points ever observed.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The latest finite value and its time.
    pub fn last(&self) -> Option<(Timestamp, f64)> {
        self.last
    }

    /// Best finite value in the given direction over the whole history.
    pub fn best(&self, direction: Direction) -> Option<Best> {
        match direction {
            Direction::Min => self.best_min,
            Direction::Max => self.best_max,
        }
    }

    /// Exponential moving average of finite values (α = `EMA_ALPHA`).
    pub fn ema(&self) -> Option<f64> {
        self.ema
    }

    /// NaN/Inf observations so far.
    pub fn non_finite_count(&self) -> u64 {
        self.non_finite_count
    }

    /// The latest non-finite observation.
    pub fn last_non_finite(&self) -> Option<(Timestamp, f64)> {
        self.last_non_finite
    }

    /// Points currently in the ring.
    pub fn window_len(&self) -> usize {
        self.len as usize
    }

    /// Statistics over the whole ring in O(1).
    pub fn stats(&self) -> Option<WindowStats> {
        let n = self.len as usize;
        if n == 0 {
            return None;
        }
        let nf = n as f64;
        let mean = self.sum_v / nf;
        let variance = (self.sum_vv / nf - mean * mean).max(0.0);
        let denom = nf * self.sum_tt - self.sum_t * self.sum_t;
        let slope = if n >= 2 && denom.abs() > f64::EPSILON * nf * self.sum_tt.abs().max(1.0) {
            (nf * self.sum_tv - self.sum_t * self.sum_v) / denom
        } else {
            0.0
        };
        let min = self.min_queue.front().map(|s| self.value_at_seq(s)).unwrap_or(f64::NAN);
        let max = self.max_queue.front().map(|s| self.value_at_seq(s)).unwrap_or(f64::NAN);
        Some(WindowStats { count: n, min, max, mean, std: variance.sqrt(), slope_per_second: slope })
    }

    /// Statistics over the newest `n` points (all of them if fewer), scanning at most `WINDOW` points.
    pub fn stats_last(&self, n: usize) -> Option<WindowStats> {
        if n >= self.len as usize {
            return self.stats();
        }
        stats_of(self.points().rev().take(n))
    }

    /// Statistics over the points observed at or after `since`.
    pub fn stats_since(&self, since: Timestamp) -> Option<WindowStats> {
        let from = crate::time::seconds(self.base, since);
        stats_of(self.points().rev().take_while(|p| p.t >= from))
    }

    /// The best value among all points older than the newest `n` (including evicted ones), in `direction`.
    /// `None` when there is no such point.
    pub fn best_before_last(&self, n: usize, direction: Direction) -> Option<f64> {
        let older = (self.len as usize).saturating_sub(n);
        let in_ring = self.points().take(older).map(|p| p.v);
        let evicted = match direction {
            Direction::Min => self.evicted_min,
            Direction::Max => self.evicted_max,
        };
        let start = if evicted.is_finite() { Some(evicted) } else { None };
        in_ring.fold(start, |acc, v| Some(acc.map_or(v, |a| direction.pick(a, v))))
    }

    /// The best value among the newest `n` points.
    pub fn best_of_last(&self, n: usize, direction: Direction) -> Option<f64> {
        self.points().rev().take(n).map(|p| p.v).reduce(|a, v| direction.pick(a, v))
    }

    /// The finite value observed `n` points before the latest (0 = latest), if still in the ring.
    pub fn value_back(&self, n: usize) -> Option<f64> {
        self.points().rev().nth(n).map(|p| p.v)
    }

    /// Bytes this series occupies, heap included.
    pub fn approx_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

fn stats_of(points: impl Iterator<Item = Point>) -> Option<WindowStats> {
    let (mut n, mut st, mut sv, mut stt, mut stv, mut svv) = (0usize, 0.0, 0.0, 0.0, 0.0, 0.0);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    for p in points {
        n += 1;
        st += p.t;
        sv += p.v;
        stt += p.t * p.t;
        stv += p.t * p.v;
        svv += p.v * p.v;
        min = min.min(p.v);
        max = max.max(p.v);
    }
    if n == 0 {
        return None;
    }
    let nf = n as f64;
    let mean = sv / nf;
    let denom = nf * stt - st * st;
    let slope = if n >= 2 && denom.abs() > f64::EPSILON * nf * stt.abs().max(1.0) {
        (nf * stv - st * sv) / denom
    } else {
        0.0
    };
    Some(WindowStats {
        count: n,
        min,
        max,
        mean,
        std: (svv / nf - mean * mean).max(0.0).sqrt(),
        slope_per_second: slope,
    })
}

/// Everything the engine remembers about one job's progress.
#[derive(Clone, Debug)]
pub struct JobSeries {
    base: Timestamp,
    /// Canonical names stay the samples' shared `&'static str`s, so lookups mostly match by address.
    metrics: Vec<(Cow<'static, str>, MetricSeries)>,
    /// Samples accepted (after deduplication).
    pub samples: u64,
    /// Samples dropped because their `lastUpdatedTime` was not newer than the previous one.
    pub duplicates: u64,
    /// Metric names ignored because the job already had `MAX_METRICS_PER_JOB`.
    pub dropped_metrics: u64,
    pub first_sample_at: Option<Timestamp>,
    pub last_sample_at: Option<Timestamp>,
    /// When a sample last differed from the one before (a new step, progress or metric value). RHOAI's
    /// controller re-stamps `lastUpdatedTime` on every poll, and a hung pod keeps answering with its last
    /// state, so "a new sample" alone does not mean "progress"; stall detection uses this.
    pub last_progress_at: Option<Timestamp>,
    pub last: Option<LastProgress>,
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

/// What [`JobSeries::record`] did with a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    New,
    /// Same or older `lastUpdatedTime` than the previous sample: dropped.
    Duplicate,
}

impl JobSeries {
    pub fn new(base: Timestamp) -> Self {
        JobSeries {
            base,
            metrics: Vec::new(),
            samples: 0,
            duplicates: 0,
            dropped_metrics: 0,
            first_sample_at: None,
            last_sample_at: None,
            last_progress_at: None,
            last: None,
        }
    }

    /// Adds a sample unless it repeats or predates the previous one.
    pub fn record(&mut self, sample: &ProgressSample) -> Recorded {
        if let Some(prev) = self.last_sample_at
            && sample.updated_at <= prev
        {
            self.duplicates += 1;
            return Recorded::Duplicate;
        }
        self.samples += 1;
        self.first_sample_at.get_or_insert(sample.updated_at);
        self.last_sample_at = Some(sample.updated_at);
        let progress = LastProgress {
            progress_percent: sample.progress_percent,
            eta_seconds: sample.eta_seconds,
            current_step: sample.current_step,
            total_steps: sample.total_steps,
            current_epoch: sample.current_epoch,
            total_epochs: sample.total_epochs,
        };
        let same_counters = self.last.is_some_and(|l| {
            l.current_step == progress.current_step
                && l.progress_percent == progress.progress_percent
                && l.current_epoch == progress.current_epoch
        });
        self.last = Some(progress);
        let mut same_metrics = true;
        for (k, m) in sample.metrics.iter().enumerate() {
            // Reporters send their metrics in the same order every time: the same position is tried first.
            let slot = match self.metrics.get(k) {
                Some((name, _)) if same_name(name, &m.name) => Some(k),
                _ => self.metrics.iter().position(|(name, _)| same_name(name, &m.name)),
            };
            match slot {
                Some(i) => {
                    let series = &mut self.metrics[i].1;
                    same_metrics &=
                        series.latest_observation().is_some_and(|v| v.to_bits() == m.value.to_bits());
                    series.push(sample.updated_at, m.value);
                }
                None if self.metrics.len() < MAX_METRICS_PER_JOB => {
                    same_metrics = false;
                    let mut series = MetricSeries::new(self.base);
                    series.push(sample.updated_at, m.value);
                    self.metrics.push((m.name.clone(), series));
                }
                None => self.dropped_metrics += 1,
            }
        }
        if !(same_counters && same_metrics) || self.last_progress_at.is_none() {
            self.last_progress_at = Some(sample.updated_at);
        }
        Recorded::New
    }

    pub fn metric(&self, name: &str) -> Option<&MetricSeries> {
        self.metrics.iter().find(|(n, _)| same_name(n, name)).map(|(_, s)| s)
    }

    pub fn metric_names(&self) -> impl Iterator<Item = &str> {
        self.metrics.iter().map(|(n, _)| n.as_ref())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::sample::{Metric, SampleSource};

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn series_of(values: &[f64]) -> MetricSeries {
        let mut s = MetricSeries::new(t(0));
        for (i, v) in values.iter().enumerate() {
            s.push(t(i as i64 * 10), *v);
        }
        s
    }

    fn naive_stats(values: &[f64]) -> (f64, f64, f64, f64) {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (mean, var.sqrt(), min, max)
    }

    #[test]
    fn window_stats_match_a_naive_computation_after_many_evictions() {
        // A wavy series long enough to wrap the ring many times and the u8 sequence numbers too.
        let values: Vec<f64> =
            (0..1000).map(|i| 2.0 + ((i * 37 % 101) as f64 / 50.0) - i as f64 * 1e-3).collect();
        let s = series_of(&values);
        let window = &values[values.len() - WINDOW..];
        let (mean, std, min, max) = naive_stats(window);
        let got = s.stats().unwrap();
        assert_eq!(got.count, WINDOW);
        assert!((got.mean - mean).abs() < 1e-9, "{} vs {}", got.mean, mean);
        assert!((got.std - std).abs() < 1e-9);
        assert_eq!(got.min, min);
        assert_eq!(got.max, max);
        assert_eq!(s.count(), 1000);
        assert_eq!(
            s.best(Direction::Min).unwrap().value,
            values.iter().copied().fold(f64::INFINITY, f64::min)
        );
    }

    #[test]
    fn min_and_max_match_the_window_after_every_push() {
        let mut s = MetricSeries::new(t(0));
        let mut values = Vec::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for i in 0..600 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Runs up and down, so the monotonic queues both fill up and drain.
            let v = (x % 1000) as f64 + if (i / 80) % 2 == 0 { i as f64 } else { -(i as f64) };
            s.push(t(i), v);
            values.push(v);
            let window = &values[values.len().saturating_sub(WINDOW)..];
            let st = s.stats().unwrap();
            assert_eq!(st.min, window.iter().copied().fold(f64::INFINITY, f64::min), "after {i}");
            assert_eq!(st.max, window.iter().copied().fold(f64::NEG_INFINITY, f64::max), "after {i}");
        }
    }

    #[test]
    fn slope_is_least_squares_in_units_per_second() {
        // v = 5 - 0.01 * t (t in seconds, one point every 10 s)
        let values: Vec<f64> = (0..20).map(|i| 5.0 - 0.1 * i as f64).collect();
        let s = series_of(&values);
        assert!((s.stats().unwrap().slope_per_second + 0.01).abs() < 1e-12);
        let last5 = s.stats_last(5).unwrap();
        assert_eq!(last5.count, 5);
        assert!((last5.slope_per_second + 0.01).abs() < 1e-12);
        assert_eq!(series_of(&[1.0]).stats().unwrap().slope_per_second, 0.0);
    }

    #[test]
    fn non_finite_values_never_enter_aggregates() {
        let mut s = series_of(&[1.0, 2.0, 3.0]);
        s.push(t(100), f64::NAN);
        s.push(t(110), f64::INFINITY);
        s.push(t(120), f64::NEG_INFINITY);
        let st = s.stats().unwrap();
        assert_eq!(st.count, 3);
        assert_eq!(st.mean, 2.0);
        assert_eq!(st.max, 3.0);
        assert_eq!(s.best(Direction::Min).unwrap().value, 1.0);
        assert_eq!(s.best(Direction::Max).unwrap().value, 3.0);
        assert_eq!(s.ema().map(f64::is_finite), Some(true));
        assert_eq!(s.last(), Some((t(20), 3.0)));
        assert_eq!(s.non_finite_count(), 3);
        assert_eq!(s.last_non_finite().unwrap().0, t(120));
        assert_eq!(s.count(), 3);
    }

    #[test]
    fn best_remembers_when_it_was_reached() {
        let s = series_of(&[3.0, 2.0, 2.5, 2.0, 1.5, 1.7]);
        let best = s.best(Direction::Min).unwrap();
        assert_eq!((best.value, best.at, best.sample), (1.5, t(40), 5));
        // Ties do not count as improvement: the first time 2.0 was reached stays.
        let s = series_of(&[3.0, 2.0, 2.0]);
        assert_eq!(s.best(Direction::Min).unwrap().sample, 2);
    }

    #[test]
    fn best_before_the_window_includes_evicted_points() {
        let mut values = vec![0.5];
        values.extend((0..WINDOW + 10).map(|i| 2.0 + i as f64 * 0.001));
        let s = series_of(&values);
        assert_eq!(s.best_before_last(5, Direction::Min), Some(0.5));
        assert_eq!(s.best_of_last(2, Direction::Max), Some(*values.last().unwrap()));
        assert_eq!(series_of(&[1.0, 2.0]).best_before_last(2, Direction::Min), None);
    }

    #[test]
    fn stats_since_selects_by_time() {
        let s = series_of(&[1.0, 2.0, 3.0, 4.0]);
        let st = s.stats_since(t(15)).unwrap();
        assert_eq!((st.count, st.mean), (2, 3.5));
        assert!(s.stats_since(t(31)).is_none());
    }

    #[test]
    fn ema_weights_the_newest_point_by_alpha() {
        let s = series_of(&[1.0, 2.0]);
        assert!((s.ema().unwrap() - (1.0 + EMA_ALPHA)).abs() < 1e-12);
    }

    fn sample(at: Timestamp, metrics: &[(&'static str, f64)]) -> ProgressSample {
        let mut s = ProgressSample::empty(at, SampleSource::TrainerStatus);
        s.metrics = metrics.iter().map(|(n, v)| Metric { name: (*n).into(), value: *v }).collect();
        s
    }

    #[test]
    fn job_series_drops_duplicates_and_out_of_order_samples() {
        let mut j = JobSeries::new(t(0));
        assert_eq!(j.record(&sample(t(10), &[("loss", 1.0)])), Recorded::New);
        assert_eq!(j.record(&sample(t(10), &[("loss", 0.5)])), Recorded::Duplicate);
        assert_eq!(j.record(&sample(t(5), &[("loss", 0.5)])), Recorded::Duplicate);
        assert_eq!(j.samples, 1);
        assert_eq!(j.duplicates, 2);
        assert_eq!(j.metric("loss").unwrap().last(), Some((t(10), 1.0)));
    }

    #[test]
    fn a_repeated_report_is_a_sample_but_not_progress() {
        let mut j = JobSeries::new(t(0));
        let mut s = sample(t(0), &[("loss", 1.0)]);
        s.current_step = Some(90.0);
        j.record(&s);
        // The RHOAI controller polls a hung pod: same step, same values, a new lastUpdatedTime.
        for i in 1..5 {
            s.updated_at = t(i * 30);
            assert_eq!(j.record(&s), Recorded::New);
        }
        assert_eq!((j.samples, j.last_progress_at), (5, Some(t(0))));
        s.updated_at = t(200);
        s.current_step = Some(91.0);
        j.record(&s);
        assert_eq!(j.last_progress_at, Some(t(200)));
        s.updated_at = t(230);
        s.metrics[0].value = f64::NAN;
        j.record(&s);
        assert_eq!(j.last_progress_at, Some(t(230)), "a new NaN is news too");
    }

    #[test]
    fn sums_stay_precise_years_after_the_series_began() {
        // First point at the base, then three years later a linear stretch: without rebasing, t² ≈ 1e16
        // and the running sums lose the slope.
        let mut s = MetricSeries::new(t(0));
        s.push(t(0), 9.0);
        let start = 100_000_000;
        for i in 0..1_000i64 {
            s.push(t(start + i * 10), 5.0 - 0.001 * i as f64);
        }
        let st = s.stats().unwrap();
        assert!((st.slope_per_second + 0.0001).abs() < 1e-12, "{}", st.slope_per_second);
        assert!((st.mean - (5.0 - 0.001 * (936.0 + 999.0) / 2.0)).abs() < 1e-9, "{}", st.mean);
    }

    #[test]
    fn job_series_caps_the_number_of_metrics() {
        let mut j = JobSeries::new(t(0));
        let names: Vec<&'static str> =
            (0..MAX_METRICS_PER_JOB + 5).map(|i| &*Box::leak(format!("m{i}").into_boxed_str())).collect();
        let metrics: Vec<(&'static str, f64)> = names.iter().map(|n| (*n, 1.0)).collect();
        j.record(&sample(t(1), &metrics));
        assert_eq!(j.metric_names().count(), MAX_METRICS_PER_JOB);
        assert_eq!(j.dropped_metrics, 5);
    }

    #[test]
    fn series_memory_for_eight_metrics_is_within_16_kib() {
        let mut j = JobSeries::new(t(0));
        let names = [
            "loss",
            "eval_loss",
            "grad_norm",
            "learning_rate",
            "eval_accuracy",
            "epoch",
            "train_loss",
            "throughput_samples_per_second",
        ];
        for i in 0..500 {
            let metrics: Vec<(&'static str, f64)> =
                names.iter().map(|n| (*n, ((i * 7919) % 113) as f64)).collect();
            j.record(&sample(t(i), &metrics));
        }
        let bytes = j.approx_bytes();
        assert!(bytes <= 16 * 1024, "{bytes} bytes");
    }

    #[test]
    fn direction_is_inferred_from_the_name() {
        assert_eq!(Direction::infer("loss"), Direction::Min);
        assert_eq!(Direction::infer("eval_loss"), Direction::Min);
        assert_eq!(Direction::infer("eval_accuracy"), Direction::Max);
        assert_eq!(Direction::infer("eval_f1"), Direction::Max);
        assert_eq!(Direction::infer("throughput_samples_per_second"), Direction::Max);
        assert_eq!(Direction::infer("grad_norm"), Direction::Min);
    }
}
