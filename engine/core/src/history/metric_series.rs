//! One metric's bounded history: a ring of the last [`WINDOW`] finite points with running sums (mean,
//! variance, least-squares slope) and monotonic queues (min, max), so every update is O(1) amortized and
//! every windowed query over the whole ring is O(1). Sub-window queries (`mean over the last n`) scan at most
//! `WINDOW` points.
//!
//! A value can come as an observation ([`MetricSeries::observe`]) or as a report that may repeat a cached
//! value ([`MetricSeries::push`], where a value bit-identical to the latest is a repeat, not an
//! observation): sample counts and windows count observations. [`crate::history::job_series::JobSeries`]
//! decides which: a report that moved on (a new step, progress, epoch or ETA) is an observation of every
//! value it carries.
//!
//! NaN and ±Inf never enter the ring or any aggregate: they are counted as non-finite events with their
//! time, so one diverged step cannot poison a mean, a slope or a best value (the Ray Tune median bug).
//!
//! Memory: a series is a fixed-size array of `WINDOW` × 16-byte points plus two inline index queues of
//! `WINDOW` one-byte entries and ~150 bytes of scalars.

use crate::time::Timestamp;

/// Points kept per metric.
pub(crate) const WINDOW: usize = 64;
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
    /// A name part counts when it is one of the quality words, or one followed by digits or `l`/`lsum`
    /// (`eval_rouge1`, `rougeL`, `bleu4`, `top5`).
    pub fn infer(metric: &str) -> Direction {
        const HIGHER_IS_BETTER: [&str; 35] = [
            "acc",
            "accuracy",
            "f1",
            "precision",
            "recall",
            "auc",
            "bleu",
            "sacrebleu",
            "rouge",
            "meteor",
            "chrf",
            "bertscore",
            "score",
            "map",
            "mrr",
            "ndcg",
            "iou",
            "miou",
            "dice",
            "psnr",
            "ssim",
            "mcc",
            "matthews",
            "correlation",
            "pearson",
            "pearsonr",
            "spearman",
            "spearmanr",
            "r2",
            "exact",
            "em",
            "top",
            "throughput",
            "samples_per_second",
            "reward",
        ];
        let contains = |needle: &str| {
            metric.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
        };
        let is_quality_word = |part: &str| {
            HIGHER_IS_BETTER.iter().any(|w| {
                let (Some(head), Some(rest)) = (part.get(..w.len()), part.get(w.len()..)) else {
                    return false;
                };
                head.eq_ignore_ascii_case(w)
                    && (rest.eq_ignore_ascii_case("l")
                        || rest.eq_ignore_ascii_case("lsum")
                        || rest.bytes().all(|b| b.is_ascii_digit()))
            })
        };
        if metric.split(['_', '.', '-', '/']).any(is_quality_word)
            || contains("accuracy")
            || contains("throughput")
            || contains("samples_per_second")
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
    /// Reported values that were repeats of the latest observation (see [`MetricSeries::push`]).
    repeats: u64,
    last_seen_at: Option<Timestamp>,
    /// Whether the latest push was a new observation rather than a repeat.
    fresh: bool,
    /// Whether the latest report's value differed from the one before (set by `JobSeries::record`; not
    /// part of a checkpoint: it describes one report).
    pub(crate) changed: bool,
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
            changed: false,
        }
    }

    /// Records one reported value, which may be a repeat: a value bit-identical to the latest observation is
    /// a cached value re-sent, not an observation (RHOAI re-polls a pod that has not moved every 30 s; a
    /// reporter sends the last `eval_loss` again beside each new training loss). Counting repeats would make
    /// "10 samples without improvement" fire on a job that is not running, and would pull a window's std to
    /// zero. Repeats only move [`MetricSeries::last_seen_at`]. A value in a report that moved on (a new step)
    /// is [`MetricSeries::observe`]d instead (see [`crate::history::job_series::JobSeries::record`]).
    pub fn push(&mut self, at: Timestamp, value: f64) {
        if self.latest_observation().is_some_and(|prev| prev.to_bits() == value.to_bits()) {
            self.last_seen_at = Some(at);
            self.repeats += 1;
            self.fresh = false;
            return;
        }
        self.observe(at, value);
    }

    /// Records one observation, even if bit-identical to the latest (a run that logs the same loss at a new
    /// step). Non-finite values are counted, not aggregated.
    pub fn observe(&mut self, at: Timestamp, value: f64) {
        self.last_seen_at = Some(at);
        self.fresh = true;
        if !value.is_finite() {
            self.non_finite_count += 1;
            self.last_non_finite = Some((at, value));
            return;
        }
        // Two reports can share a second (see `JobSeries::record`). A finite value after a non-finite one in
        // the same second supersedes it: readers order the two by time, and equal times cannot say which
        // came last.
        if self.last_non_finite.is_some_and(|(bad_at, _)| bad_at == at) {
            self.last_non_finite = None;
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
        // After evicting: an eviction may rebase the ring's times.
        self.push_point(crate::time::seconds(self.base, at), value);
    }

    /// Adds a finite point to a ring that has room, with its sums and queues.
    fn push_point(&mut self, t: f64, value: f64) {
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
            // Equal times: the non-finite value came last (a later finite one in its second clears it).
            (Some((good_at, _)), Some((bad_at, bad))) if bad_at >= good_at => Some(bad),
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

    /// The latest non-finite observation, unless a finite one followed it within the same second.
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

    /// The mean of the newest `n` points (all of them if fewer): [`MetricSeries::stats_last`]'s mean, bit for
    /// bit (the same sum in the same order), without the other statistics.
    pub fn mean_last(&self, n: usize) -> Option<f64> {
        if n == 0 {
            return None;
        }
        if n >= self.len as usize {
            return self.stats().map(|s| s.mean);
        }
        let sum = self.points().rev().take(n).fold(0.0, |sum, p| sum + p.v);
        Some(sum / n as f64)
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

    /// The series in plain values, times as seconds relative to `origin` (see `history::checkpoint`).
    pub(crate) fn export(&self, origin: Timestamp) -> MetricParts {
        let shift = crate::time::seconds(origin, self.base);
        MetricParts {
            points: self.points().map(|p| (p.t + shift, p.v)).collect(),
            count: self.count,
            last: self.last,
            best_min: self.best_min,
            best_max: self.best_max,
            evicted_min: self.evicted_min,
            evicted_max: self.evicted_max,
            ema: self.ema,
            non_finite_count: self.non_finite_count,
            last_non_finite: self.last_non_finite,
            repeats: self.repeats,
            last_seen_at: self.last_seen_at,
            fresh: self.fresh,
        }
    }

    /// A series holding what `parts` says; point times are seconds relative to `origin`. Points that are not
    /// finite or go back in time are skipped and only the newest [`WINDOW`] are kept, so no input can break
    /// the ring's invariants.
    pub(crate) fn import(origin: Timestamp, parts: &MetricParts) -> Self {
        let mut s = MetricSeries::new(origin);
        let mut previous = f64::NEG_INFINITY;
        let valid: Vec<(f64, f64)> = parts
            .points
            .iter()
            .copied()
            .filter(|&(t, v)| {
                let ok = t.is_finite() && v.is_finite() && t >= previous;
                if ok {
                    previous = t;
                }
                ok
            })
            .collect();
        for &(t, v) in &valid[valid.len().saturating_sub(WINDOW)..] {
            s.push_point(t, v);
        }
        // Pushing fills `evicted_*` only with the points beyond the window; the exported ones come on top.
        s.evicted_min = s.evicted_min.min(parts.evicted_min);
        s.evicted_max = s.evicted_max.max(parts.evicted_max);
        s.count = parts.count.max(s.len as u64);
        s.last = parts.last.filter(|(_, v)| v.is_finite());
        s.best_min = parts.best_min.filter(|b| b.value.is_finite());
        s.best_max = parts.best_max.filter(|b| b.value.is_finite());
        s.ema = parts.ema.filter(|v| v.is_finite());
        s.non_finite_count = parts.non_finite_count;
        s.last_non_finite = parts.last_non_finite.filter(|(_, v)| !v.is_finite());
        s.repeats = parts.repeats;
        s.last_seen_at = parts.last_seen_at;
        s.fresh = parts.fresh;
        s
    }
}

/// What a [`MetricSeries`] holds, as plain values: ring points (seconds relative to an origin, value;
/// oldest first) and the scalars. The monotonic queues and running sums are not part of it: they follow
/// from the points.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct MetricParts {
    pub points: Vec<(f64, f64)>,
    pub count: u64,
    pub last: Option<(Timestamp, f64)>,
    pub best_min: Option<Best>,
    pub best_max: Option<Best>,
    /// Best values among points no longer in `points` (`±inf` when none).
    pub evicted_min: f64,
    pub evicted_max: f64,
    pub ema: Option<f64>,
    pub non_finite_count: u64,
    pub last_non_finite: Option<(Timestamp, f64)>,
    pub repeats: u64,
    pub last_seen_at: Option<Timestamp>,
    pub fresh: bool,
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
