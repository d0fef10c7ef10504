//! What the detectors that judge a metric's *level* share (`plateau` with `smoothing` or `metric: auto`,
//! `diverging` with `worseByPct`, `no_expected_gain`): which metrics they watch, the level itself, where
//! the job is in its planned run, and what its learning-rate schedule says.
//!
//! * **Logged values only.** A value counts when the report carried a new log of it
//!   ([`JobSeries::logged`]): the status server's heartbeat re-sending a cached loss between logging steps
//!   is time passing, not an observation.
//! * **The level** of a training metric is the median of its last `smoothing` logged finite values (a
//!   rolling median), so one lucky or unlucky batch neither makes nor breaks a best. An evaluation metric
//!   (`eval_*`) is its own level: it is already an average over the evaluation set, and evaluations are
//!   sparse (a median of five evaluations would lag by two of them).
//! * **`metric: auto`** watches the job's *quality* metrics: every `eval_*` metric it reports (evaluation
//!   speed — `eval_runtime`, `eval_*_per_second` — is not quality), or its training `loss` while it reports
//!   none. A job is judged on what its trainer evaluates, as its author would pick the best checkpoint; a
//!   training loss that keeps falling while the evaluation stopped improving is overfitting, not progress.
//! * **The planned run.** Progress is `current_step / total_steps` when the job reports both, else its
//!   `progressPercentage`; windows written as a percentage (`"25%"`) are fractions of the planned run, so
//!   one policy fits a 20-minute run and a 10-day one, a run that logs every 10 seconds and one that logs
//!   every 50 minutes.
//! * **The schedule** (`schedule: true`) is read from the reported `learning_rate` ([`LrWatch`]) and the
//!   epochs ([`epoch_ahead`]): a step drop of the learning rate restarts a judgement, and a drop or (for a
//!   training metric) a new epoch expected within the window ahead holds it. The job's own curve says
//!   whether that wait is worth it: a training loss whose level did not fall significantly once the last
//!   boundary's data repeated ([`Track::may_drop_at_epoch`]) is not held for the next one, and a loss so
//!   close to zero that reaching zero would not be a significant gain ([`Track::at_floor`]) is held by
//!   nothing ahead.

use std::borrow::Cow;

use super::Params;
use crate::history::job_series::JobSeries;
use crate::history::metric_series::Direction;
use crate::input::sample::{ProgressSample, same_name};
use crate::time::Timestamp;

/// The most logged values a level is the median of.
pub(crate) const MAX_SMOOTHING: usize = 15;
/// The most metrics one rule watches (`metric: auto` on a job with many evaluation metrics).
pub(crate) const MAX_TRACKS: usize = 8;

/// Which metrics a rule watches.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Watch {
    /// One metric, by its canonical name.
    Named { metric: Cow<'static, str>, direction: Direction },
    /// The job's quality metrics (see the module docs).
    Auto,
}

impl Watch {
    /// `metric` (required; `auto` allowed when `allow_auto`) and `mode`.
    pub(crate) fn parse(p: &mut Params<'_>, allow_auto: bool) -> Option<Watch> {
        let metric = p.required_string("metric");
        let mode = p.direction("mode");
        let metric = metric?;
        if metric == "auto" {
            if !allow_auto {
                p.error("metric", "auto is not supported by this detector; name the metric");
                return None;
            }
            if mode != super::DirectionParam::Auto {
                p.error("mode", "metric: auto infers each metric's direction from its name; leave mode out");
            }
            return Some(Watch::Auto);
        }
        Some(Watch::Named { metric: crate::input::interned(metric), direction: mode.resolve(metric) })
    }

    /// The metrics watched in this job now, with their directions.
    pub(crate) fn metrics<'a>(&'a self, series: &'a JobSeries) -> Vec<(&'a str, Direction)> {
        match self {
            Watch::Named { metric, direction } => vec![(metric.as_ref(), *direction)],
            Watch::Auto => {
                let evals: Vec<(&str, Direction)> = series
                    .metric_names()
                    .filter(|n| is_quality_eval(n))
                    .take(MAX_TRACKS)
                    .map(|n| (n, Direction::infer(n)))
                    .collect();
                if evals.is_empty() && series.metric("loss").is_some() {
                    vec![("loss", Direction::Min)]
                } else {
                    evals
                }
            }
        }
    }
}

/// Whether an `eval_*` metric measures the model, not the evaluation's speed or size.
pub(crate) fn is_quality_eval(name: &str) -> bool {
    name.starts_with("eval_")
        && !name.ends_with("_runtime")
        && !name.ends_with("per_second")
        && !matches!(name, "eval_samples" | "eval_steps" | "eval_epoch" | "eval_total_flos")
}

/// A rolling median of the last `k` logged finite values.
///
/// The last [`MAX_SMOOTHING`] values in arrival order (a ring) and, beside them, the last `k` (the `k` of
/// the latest [`Level::push`]) kept sorted: a push removes the value that leaves the window and inserts
/// the new one, each found by binary search (O(log k) comparisons and a shift of at most `k` values), and
/// the median is read off the middle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Level {
    values: [f64; MAX_SMOOTHING],
    len: u8,
    next: u8,
    /// The last `window` values, ascending (by `total_cmp`).
    sorted: [f64; MAX_SMOOTHING],
    window: u8,
}

impl Default for Level {
    fn default() -> Self {
        Level { values: [0.0; MAX_SMOOTHING], len: 0, next: 0, sorted: [0.0; MAX_SMOOTHING], window: 0 }
    }
}

impl Level {
    /// Adds a value and returns the median of the last `k` (at most [`MAX_SMOOTHING`]).
    pub(crate) fn push(&mut self, value: f64, k: usize) -> f64 {
        let k = k.clamp(1, MAX_SMOOTHING);
        if usize::from(self.window) != k {
            // First push, or another window than before: sort the window once.
            let n = usize::from(self.len).min(k);
            for i in 0..n {
                self.sorted[i] =
                    self.values[(usize::from(self.next) + MAX_SMOOTHING - 1 - i) % MAX_SMOOTHING];
            }
            self.sorted[..n].sort_by(f64::total_cmp);
            self.window = k as u8;
        }
        let held = usize::from(self.len).min(k);
        let mut n = held;
        if held == k {
            // The value `k` pushes ago leaves the window.
            let leaving = self.values[(usize::from(self.next) + MAX_SMOOTHING - k) % MAX_SMOOTHING];
            let i = self.sorted[..n].partition_point(|v| v.total_cmp(&leaving).is_lt());
            self.sorted.copy_within(i + 1..n, i);
            n -= 1;
        }
        let i = self.sorted[..n].partition_point(|v| v.total_cmp(&value).is_lt());
        self.sorted.copy_within(i..n, i + 1);
        self.sorted[i] = value;
        self.values[usize::from(self.next)] = value;
        self.next = ((usize::from(self.next) + 1) % MAX_SMOOTHING) as u8;
        self.len = (self.len + 1).min(MAX_SMOOTHING as u8);
        middle(&self.sorted[..n + 1])
    }

    /// The median of the last `k` values pushed (NaN before the first); the detectors take the one
    /// [`Level::push`] returns.
    #[cfg(test)]
    pub(crate) fn median(&self, k: usize) -> f64 {
        let k = k.clamp(1, MAX_SMOOTHING);
        let n = usize::from(self.len).min(k);
        if k == usize::from(self.window) {
            return middle(&self.sorted[..n]);
        }
        let mut last = [0.0; MAX_SMOOTHING];
        for (i, slot) in last.iter_mut().take(n).enumerate() {
            *slot = self.values[(usize::from(self.next) + MAX_SMOOTHING - 1 - i) % MAX_SMOOTHING];
        }
        let last = &mut last[..n];
        last.sort_by(f64::total_cmp);
        middle(last)
    }
}

/// The median of sorted values (NaN for none).
fn middle(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Where the job is in its planned run: `current_step / total_steps` when it reports both, else its
/// progress percentage / 100. `None` when it reports neither (a run of unknown length).
pub(crate) fn run_fraction(series: &JobSeries) -> Option<f64> {
    let last = series.last?;
    match (last.current_step, last.total_steps) {
        (Some(step), Some(total)) if total > 0.0 => Some((step / total).clamp(0.0, 1.0)),
        _ => last.progress_percent.map(|p| (p / 100.0).clamp(0.0, 1.0)),
    }
}

/// The job's position on the x-axis the fits use: its step when it reports steps and a planned total,
/// else its progress (0 to 1); with the planned end in the same unit.
pub(crate) fn position(series: &JobSeries) -> Option<(f64, f64)> {
    let last = series.last?;
    match (last.current_step, last.total_steps) {
        (Some(step), Some(total)) if total > 0.0 => Some((step, total)),
        _ => last.progress_percent.map(|p| (p / 100.0, 1.0)),
    }
}

/// Epochs shorter than this share of the planned run are too short for their boundaries to show as steps
/// in a judgement over a share of the run (a tiny data set seen 100 times).
pub(crate) const MIN_EPOCH_SHARE: f64 = 0.1;

/// Whether a new epoch begins before the planned end and within `within` (a share of the planned run) from
/// now, epochs being at least [`MIN_EPOCH_SHARE`] of the run. The planned epochs are the current epoch over
/// the share of the planned run done (a run that reports no epoch, or no steps, has none ahead as far as we
/// know). A training loss drops when the data repeat: a flat stretch before a new epoch says little.
pub(crate) fn epoch_ahead(series: &JobSeries, within: f64) -> bool {
    let Some(last) = series.last else { return false };
    let (Some(epoch), Some(fraction)) = (last.current_epoch, run_fraction(series)) else { return false };
    if fraction <= 0.0 || epoch <= 0.0 {
        return false;
    }
    let planned = epoch / fraction;
    // The next boundary, counting one the (rounded) epoch has just reached as still ahead: a reporter
    // rounds the epoch to two decimals.
    let next = (epoch - 0.01).floor() + 1.0;
    next < planned - 0.05 && 1.0 / planned >= MIN_EPOCH_SHARE && next / planned - fraction <= within
}

/// One watched metric as the level detectors follow it.
#[derive(Clone, Debug, PartialEq)]
pub struct Track {
    /// The metric's canonical name.
    pub name: Cow<'static, str>,
    /// Which way is better.
    pub direction: Direction,
    /// Whether it is an evaluation metric ([`is_quality_eval`]): its own level, no epochs.
    pub eval: bool,
    /// Its rolling median.
    pub level: Level,
    /// Finite logged values so far.
    pub count: u64,
    /// The level at the latest logged value.
    pub current: f64,
    /// The reference best level: moved only by a significant improvement.
    pub best: f64,
    /// When the reference was set: the logged-value count, the time and the run fraction (if known).
    pub best_count: u64,
    pub best_at: Timestamp,
    pub best_fraction: Option<f64>,
    /// The best level ever (moved by any improvement), for divergence.
    pub best_ever: f64,
    /// Since when the level has been worse than `best_ever` by the divergence margin: count, time, fraction.
    pub worse_since: Option<(u64, Timestamp, Option<f64>)>,
    /// When the level last beat `best_ever` significantly: the logged-value count and the run fraction.
    /// Unlike the reference, a learning-rate drop does not move it (ReduceLROnPlateau cutting the rate of a
    /// run that went bad is no sign that it got better).
    pub record_count: u64,
    pub record_fraction: Option<f64>,
    /// Whether a level was ever below zero (a loss that is not, cannot fall below 0).
    pub ever_negative: bool,
    /// The epoch (its whole number) of the latest logged value, when the job reports epochs.
    pub epoch: Option<f64>,
    /// The last epoch boundary crossed and not judged yet: the logged-value count and the level there.
    pub epoch_mark: Option<(u64, f64)>,
    /// Whether the level fell significantly once the last judged boundary's data repeated (`None`: no
    /// boundary judged yet).
    pub epoch_dropped: Option<bool>,
}

impl Track {
    fn new(name: &str, direction: Direction) -> Self {
        Track {
            name: crate::input::interned(name),
            direction,
            eval: is_quality_eval(name),
            level: Level::default(),
            count: 0,
            current: f64::NAN,
            best: f64::NAN,
            best_count: 0,
            best_at: Timestamp::UNIX_EPOCH,
            best_fraction: None,
            best_ever: f64::NAN,
            worse_since: None,
            record_count: 0,
            record_fraction: None,
            ever_negative: false,
            epoch: None,
            epoch_mark: None,
            epoch_dropped: None,
        }
    }

    /// Whether a training metric's level may still fall at the next epoch boundary: it is a loss-like
    /// metric (not an evaluation), it is not at its floor, and the last boundary it crossed, if any, did
    /// show a significant drop once the data repeated. A job that has shown a boundary pass without a
    /// drop does not get its next boundary as a reason to wait.
    pub(crate) fn may_drop_at_epoch(&self, significance: Significance) -> bool {
        !self.eval && !self.at_floor(significance) && self.epoch_dropped != Some(false)
    }

    /// Whether the level is so close to zero that even reaching zero would not be a significant
    /// improvement, for a lower-is-better metric that was never negative (a loss at its floor): no
    /// schedule ahead can make it better.
    pub(crate) fn at_floor(&self, significance: Significance) -> bool {
        self.direction == Direction::Min
            && !self.ever_negative
            && self.current >= 0.0
            && self.current <= significance.needed(self.best)
    }

    /// How much better `a` is than `b` (negative when worse).
    pub(crate) fn gain(&self, a: f64, b: f64) -> f64 {
        match self.direction {
            Direction::Min => b - a,
            Direction::Max => a - b,
        }
    }

    /// Follows the epoch boundaries of a training metric: at a boundary it marks the level before it, and
    /// once `k` logged values of the new epoch make the level (so the median holds none from before),
    /// judges whether the level fell significantly when the data repeated.
    fn judge_epoch(&mut self, series: &JobSeries, k: usize, significance: Significance, previous: f64) {
        if self.eval {
            return;
        }
        let Some(epoch) = series.last.and_then(|l| l.current_epoch).filter(|e| e.is_finite()) else {
            return;
        };
        // A reporter rounds the epoch to two decimals: 0.999 reads as 1.0 one log early at worst.
        let whole = (epoch + 1e-9).floor();
        if self.epoch.is_some_and(|e| whole > e) && previous.is_finite() {
            self.epoch_mark = Some((self.count, previous));
        }
        self.epoch = Some(whole);
        if let Some((count, before)) = self.epoch_mark
            && self.count >= count + k as u64
        {
            self.epoch_dropped = Some(self.gain(self.current, before) > significance.needed(before));
            self.epoch_mark = None;
        }
    }

    /// Restarts the reference at the current level (after a learning-rate drop).
    pub(crate) fn restart(&mut self, at: Timestamp, fraction: Option<f64>) {
        if self.count > 0 {
            self.best = self.current;
            self.best_count = self.count;
            self.best_at = at;
            self.best_fraction = fraction;
        }
    }
}

/// How much improvement counts: more than `min_delta` (absolute) and more than `min_delta_pct` percent of
/// the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Significance {
    pub min_delta: f64,
    pub min_delta_pct: f64,
}

impl Significance {
    pub(crate) fn needed(self, reference: f64) -> f64 {
        self.min_delta.max(reference.abs() * self.min_delta_pct / 100.0)
    }
}

/// The level trackers of one (rule, job): one [`Track`] per watched metric, and the learning rate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tracks {
    pub tracks: Vec<Track>,
    pub lr: LrWatch,
    /// The metrics watched, with their directions, as [`Watch::metrics`] found them when the job had
    /// `watching_of` metrics and the last of them was `watching_last`: a job's metrics are only ever
    /// added to, so the list is derived again (names parsed, directions inferred) only when it reports a
    /// metric it had not before, not at every sample.
    watching: Vec<(Cow<'static, str>, Direction)>,
    watching_of: usize,
    watching_last: Option<Cow<'static, str>>,
}

impl Tracks {
    /// Whether `watching` was derived from the job's metrics as they are now.
    fn watching_is_current(&self, series: &JobSeries) -> bool {
        let mut count = 0;
        let mut last = None;
        for name in series.metric_names() {
            count += 1;
            last = Some(name);
        }
        count == self.watching_of
            && match (last, self.watching_last.as_deref()) {
                (Some(a), Some(b)) => same_name(a, b),
                (None, None) => true,
                _ => false,
            }
    }

    /// Derives the watched metrics again if the job reported a new metric.
    fn refresh_watching(&mut self, watch: &Watch, series: &JobSeries) {
        if self.watching_is_current(series) && !(self.watching_of == 0 && self.watching.is_empty()) {
            return;
        }
        self.watching =
            watch.metrics(series).into_iter().map(|(n, d)| (crate::input::interned(n), d)).collect();
        self.watching_of = series.metric_names().count();
        self.watching_last = series.metric_names().last().map(crate::input::interned);
    }

    /// The metrics watched in this job now (see `watching`).
    pub(crate) fn watching(&self) -> &[(Cow<'static, str>, Direction)] {
        &self.watching
    }

    /// Takes the metrics of a new sample that carried logged values; returns whether a watched metric
    /// got a new logged value. A learning-rate drop restarts every reference at its current level.
    pub(crate) fn observe(
        &mut self,
        watch: &Watch,
        smoothing: usize,
        significance: Significance,
        worse_pct: f64,
        series: &JobSeries,
        sample: &ProgressSample,
    ) -> bool {
        let at = sample.updated_at;
        let fraction = run_fraction(series);
        if let Some(lr) = sample.metric("learning_rate").filter(|v| v.is_finite())
            && series.logged("learning_rate")
            && self.lr.observe(lr, position(series).map(|p| p.0))
        {
            for t in &mut self.tracks {
                t.restart(at, fraction);
            }
        }
        self.refresh_watching(watch, series);
        let mut any = false;
        for w in 0..self.watching.len() {
            let (name, direction) = (self.watching[w].0.as_ref(), self.watching[w].1);
            let Some(value) = sample.metric(name) else { continue };
            if !value.is_finite() || !series.logged(name) {
                continue;
            }
            let i = match self.tracks.iter().position(|t| same_name(&t.name, name)) {
                Some(i) => i,
                None if self.tracks.len() < MAX_TRACKS => {
                    self.tracks.push(Track::new(name, direction));
                    self.tracks.len() - 1
                }
                None => continue,
            };
            let t = &mut self.tracks[i];
            any = true;
            t.count += 1;
            let k = if t.eval { 1 } else { smoothing };
            let previous = t.current;
            t.current = t.level.push(value, k);
            let level = t.current;
            t.ever_negative |= level < 0.0;
            if t.count == 1 || t.gain(level, t.best) > significance.needed(t.best) {
                t.best = level;
                t.best_count = t.count;
                t.best_at = at;
                t.best_fraction = fraction;
            }
            if t.count == 1 || t.gain(level, t.best_ever) > significance.needed(t.best_ever) {
                t.record_count = t.count;
                t.record_fraction = fraction;
            }
            if t.count == 1 || t.gain(level, t.best_ever) > 0.0 {
                t.best_ever = level;
            }
            t.judge_epoch(series, k, significance, previous);
            let margin = significance.min_delta.max(t.best_ever.abs() * worse_pct / 100.0);
            if worse_pct > 0.0 && -t.gain(level, t.best_ever) > margin {
                t.worse_since.get_or_insert((t.count, at, fraction));
            } else {
                t.worse_since = None;
            }
        }
        any
    }

    /// The tracks of the metrics watched in this job now.
    pub(crate) fn watched<'a>(&'a self, watch: &Watch, series: &JobSeries) -> Vec<&'a Track> {
        if self.watching_is_current(series) {
            return self
                .tracks
                .iter()
                .filter(|t| self.watching.iter().any(|(n, _)| same_name(n, &t.name)))
                .collect();
        }
        let names = watch.metrics(series);
        self.tracks.iter().filter(|t| names.iter().any(|(n, _)| *n == t.name)).collect()
    }
}

/// The learning-rate schedule as read from the reported `learning_rate`, at logged values.
///
/// * A **drop** is a logged learning rate at most [`DROP_RATIO`] of the one before it, after a stretch
///   where it held steady (within [`STEADY`] of its previous value): a step schedule's decay, or
///   ReduceLROnPlateau's cut. A smooth decay (linear, cosine) changes a little at every log and has no
///   drops, and neither has its tail, where the values shrink fast but were not steady before.
/// * The **next drop** is expected one period after the last, the period being the distance (in steps, or
///   progress) between the last two drops, or from the start of the run to the first: step schedules
///   repeat.
/// * Detectors restart their references at a drop (what came before is a different regime: a flat
///   stretch before a drop is not a plateau of the run after it) and hold off while the next expected
///   drop is within their window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LrWatch {
    /// The latest logged learning rate.
    pub last: Option<f64>,
    /// Whether the value before the latest one was steady.
    steady: bool,
    /// Positions (step or progress) of the last two drops.
    pub drops: [Option<f64>; 2],
}

/// A learning rate at most this fraction of the one before it is a drop (a cut by 40 % or more).
pub(crate) const DROP_RATIO: f64 = 0.6;
/// Two consecutive learning rates within this relative difference are steady.
pub(crate) const STEADY: f64 = 0.02;

impl LrWatch {
    /// Takes a logged learning rate at `position`; returns whether it is a drop.
    pub(crate) fn observe(&mut self, lr: f64, position: Option<f64>) -> bool {
        let Some(last) = self.last else {
            self.last = Some(lr);
            return false;
        };
        if lr == last {
            self.steady = true;
            return false;
        }
        let drop = self.steady && last > 0.0 && lr <= DROP_RATIO * last;
        self.steady = last > 0.0 && ((lr - last) / last).abs() <= STEADY;
        self.last = Some(lr);
        if drop && let Some(p) = position {
            self.drops = [self.drops[1], Some(p)];
        }
        drop
    }

    /// Where the next drop is expected, if the schedule has shown drops (the run starts at 0).
    pub(crate) fn next_drop(&self) -> Option<f64> {
        let last = self.drops[1]?;
        let previous = self.drops[0].unwrap_or(0.0);
        let period = last - previous;
        (period > 0.0).then_some(last + period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_is_the_median_of_the_last_k_values() {
        let mut l = Level::default();
        assert_eq!(l.push(5.0, 3), 5.0);
        assert_eq!(l.push(1.0, 3), 3.0);
        assert_eq!(l.push(3.0, 3), 3.0);
        assert_eq!(l.push(100.0, 3), 3.0, "one spike does not move it");
        assert_eq!(l.push(2.0, 3), 3.0);
        assert_eq!(l.median(1), 2.0);
        for i in 0..40 {
            l.push(f64::from(i), MAX_SMOOTHING);
        }
        assert_eq!(l.median(MAX_SMOOTHING), 32.0, "the last 15: 25 … 39");
    }

    #[test]
    fn the_sorted_window_gives_the_median_a_sort_would() {
        // Against sorting the last k values, for every k, with repeats, negatives and a change of k.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state % 41) as f64 - 20.0) / 4.0
        };
        for k in 1..=MAX_SMOOTHING {
            let mut level = Level::default();
            let mut all: Vec<f64> = Vec::new();
            for i in 0..200 {
                let kk = if i == 120 { (k % MAX_SMOOTHING) + 1 } else { k }; // one push with another k
                let v = next();
                all.push(v);
                let got = level.push(v, kk);
                let mut last: Vec<f64> = all.iter().rev().take(kk).copied().collect();
                last.sort_by(f64::total_cmp);
                let n = last.len();
                let want = if n % 2 == 1 { last[n / 2] } else { (last[n / 2 - 1] + last[n / 2]) / 2.0 };
                assert_eq!(got, want, "k {kk}, push {i}");
                assert_eq!(level.median(1), v);
            }
        }
    }

    #[test]
    fn quality_evals_leave_out_speed() {
        assert!(
            is_quality_eval("eval_loss") && is_quality_eval("eval_wer") && is_quality_eval("eval_rouge1")
        );
        assert!(!is_quality_eval("eval_runtime") && !is_quality_eval("eval_samples_per_second"));
        assert!(!is_quality_eval("loss") && !is_quality_eval("train_loss"));
    }

    #[test]
    fn a_step_schedule_has_drops_and_a_smooth_decay_has_none() {
        // Step decay every 1000 steps: 1e-3 → 1e-4 → 1e-5, logged every 100.
        let mut w = LrWatch::default();
        let mut drops = Vec::new();
        for step in (0..3000).step_by(100) {
            let lr = 1e-3 * 0.1f64.powi(step / 1000);
            if w.observe(lr, Some(f64::from(step))) {
                drops.push(step);
            }
        }
        assert_eq!(drops, [1000, 2000]);
        assert_eq!(w.next_drop(), Some(3000.0));
        // Linear decay to 0 over 3000 steps, logged every 100: the tail halves at every log, no drop.
        let mut w = LrWatch::default();
        let drops = (0..3000)
            .step_by(100)
            .filter(|s| w.observe(1e-3 * (1.0 - f64::from(*s) / 3000.0), Some(f64::from(*s))))
            .count();
        assert_eq!(drops, 0);
        assert_eq!(w.next_drop(), None);
        // Warm-up then constant: no drop either.
        let mut w = LrWatch::default();
        let drops = (0..30)
            .filter(|i| w.observe(1e-4 * f64::from((*i).min(5) + 1) / 6.0, Some(f64::from(*i))))
            .count();
        assert_eq!(drops, 0);
    }
}
