//! A job's GPU history: what `gpu_idle`, `hang` and the `gpu_*()` functions look back on.
//!
//! Each [`GpuSample`] with a utilization becomes a [`GpuSpan`] of one instant; the series keeps at most
//! [`CAPACITY`] spans. When full, the two neighbours whose merged span is shortest relative to its age are
//! merged, so recent readings stay exact and older ones coarsen in proportion to their age: memory is bounded
//! (about 5 KiB per job) and a window of any length is judged to within a small part of itself. A merged span
//! keeps the minimum and maximum of what it covers, so "every GPU below 10 % since T" is never claimed where a
//! merged span hides a busy reading: the answer may come a little later, never wrongly.
//!
//! Readings further apart than [`GPU_STALE_SECONDS`] (Prometheus' default lookback delta, 5 min) are not
//! continuous: an outage of the metrics pipeline or a job without pods for a while starts a new run, so a
//! detector never counts time it did not see.

use std::collections::VecDeque;

use crate::input::gpu::{GpuSample, GpuSummary};
use crate::time::{Timestamp, add_seconds, seconds};

/// Spans kept per job.
pub(crate) const CAPACITY: usize = 128;

/// Readings further apart than this do not make one continuous run; a latest reading older than this is
/// not current (the `gpu_*()` functions return NaN).
pub const GPU_STALE_SECONDS: f64 = 300.0;

/// Readings over an interval, merged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuSpan {
    /// The first reading's time, Unix seconds (whole seconds halve the span's size).
    pub from: i64,
    /// The last reading's time, Unix seconds.
    pub to: i64,
    /// The lowest utilization of any GPU in any reading covered.
    pub min_util: f32,
    /// The highest.
    pub max_util: f32,
    /// The highest of the readings' idlest GPUs: below a threshold exactly when at least one GPU was below it
    /// in every reading covered.
    pub max_idlest: f32,
    /// Readings covered.
    pub readings: u32,
    /// False when two readings inside it are further apart than [`GPU_STALE_SECONDS`].
    pub continuous: bool,
}

/// A job's GPU history and its latest reading.
#[derive(Clone, Debug, Default)]
pub struct GpuSeries {
    spans: VecDeque<GpuSpan>,
    /// The latest reading with a utilization, summarized, and when it was taken.
    pub latest: Option<(Timestamp, GpuSummary)>,
    /// The latest reading's idlest GPU, for messages.
    pub idlest: Option<String>,
    /// Readings recorded.
    pub readings: u64,
}

/// What a run of readings that all satisfy a condition looks like.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Run {
    /// The earliest reading of the run.
    pub since: Timestamp,
    /// The lowest utilization seen in the run.
    pub min_util: f64,
    /// The highest.
    pub max_util: f64,
}

impl GpuSeries {
    /// Records a sample; one older than the latest, or without any utilization, is ignored.
    pub fn record(&mut self, sample: &GpuSample) -> bool {
        let Some(summary) = sample.summary() else { return false };
        if self.latest.is_some_and(|(at, _)| sample.at <= at) {
            return false;
        }
        let span = GpuSpan {
            from: sample.at.as_second(),
            to: sample.at.as_second(),
            min_util: summary.min_util as f32,
            max_util: summary.max_util as f32,
            max_idlest: summary.min_util as f32,
            readings: 1,
            continuous: true,
        };
        if self.spans.len() == CAPACITY {
            self.compact(span.to);
        }
        self.spans.push_back(span);
        self.latest = Some((sample.at, summary));
        self.idlest = sample.idlest().map(|g| g.id.clone());
        self.readings += 1;
        true
    }

    /// Merges the one pair of neighbours whose merged span is shortest relative to its age (how long before
    /// the newest reading it ended): resolution coarsens in proportion to age, as in an exponential
    /// histogram, so a span never grows to swallow the history and a window W is judged to within a small
    /// fraction of W. Pairs across a gap merge only when nothing else can.
    fn compact(&mut self, newest: i64) {
        let mut best: Option<(f64, usize)> = None;
        for i in 0..self.spans.len().saturating_sub(1) {
            let (a, b) = (&self.spans[i], &self.spans[i + 1]);
            let gap = (b.from - a.to) as f64 > GPU_STALE_SECONDS || !a.continuous || !b.continuous;
            let age = (newest - b.to).max(1) as f64;
            let cost = (b.to - a.from) as f64 / age + if gap { 1e12 } else { 0.0 };
            if best.is_none_or(|(c, _)| cost < c) {
                best = Some((cost, i));
            }
        }
        if let Some((_, i)) = best {
            let merged = merge(&self.spans[i], &self.spans[i + 1]);
            self.spans[i] = merged;
            self.spans.remove(i + 1);
        }
    }

    /// The latest summary if it is current at `now` (taken less than [`GPU_STALE_SECONDS`] before).
    pub fn current(&self, now: Timestamp) -> Option<GpuSummary> {
        let (at, summary) = self.latest?;
        (seconds(at, now) < GPU_STALE_SECONDS).then_some(summary)
    }

    /// The longest run of continuous readings, ending with a current one at `now`, whose spans all satisfy
    /// `keep`.
    pub fn run(&self, now: Timestamp, keep: impl Fn(&GpuSpan) -> bool) -> Option<Run> {
        self.run_since(now, Timestamp::MIN, keep)
    }

    /// [`GpuSeries::run`] over the readings from `from` on only (a job's last start, its last progress): the
    /// run starts no earlier, and what came before neither breaks it nor counts in its bounds.
    pub fn run_since(&self, now: Timestamp, from: Timestamp, keep: impl Fn(&GpuSpan) -> bool) -> Option<Run> {
        self.current(now)?;
        let from_secs = from.as_second();
        let mut run: Option<Run> = None;
        let mut next_from: Option<i64> = None;
        let at = |secs: i64| Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH);
        for span in self.spans.iter().rev() {
            if span.to < from_secs {
                break;
            }
            let (lo, hi) = (f64::from(span.min_util), f64::from(span.max_util));
            let joined = next_from.is_none_or(|n| (n - span.to) as f64 <= GPU_STALE_SECONDS);
            if !joined || !keep(span) {
                break;
            }
            run = Some(match run {
                None => Run { since: at(span.from), min_util: lo, max_util: hi },
                Some(r) => {
                    Run { since: at(span.from), min_util: r.min_util.min(lo), max_util: r.max_util.max(hi) }
                }
            });
            if !span.continuous {
                // The gap is inside this span: the run can reach no further back than its last reading.
                if let Some(r) = run.as_mut() {
                    r.since = at(span.to);
                }
                break;
            }
            next_from = Some(span.from);
        }
        run.map(|r| Run { since: r.since.max(from), ..r })
    }

    /// The first instant the latest reading is no longer current.
    pub fn current_until(&self) -> Option<Timestamp> {
        self.latest.and_then(|(at, _)| add_seconds(at, GPU_STALE_SECONDS))
    }

    /// Spans held (tests and memory figures).
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether no reading was recorded.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Bytes held beyond the struct itself.
    pub fn heap_bytes(&self) -> usize {
        self.spans.capacity() * std::mem::size_of::<GpuSpan>()
            + self.idlest.as_ref().map_or(0, String::capacity)
    }
}

fn merge(a: &GpuSpan, b: &GpuSpan) -> GpuSpan {
    GpuSpan {
        from: a.from,
        to: b.to,
        min_util: a.min_util.min(b.min_util),
        max_util: a.max_util.max(b.max_util),
        max_idlest: a.max_idlest.max(b.max_idlest),
        readings: a.readings.saturating_add(b.readings),
        continuous: a.continuous && b.continuous && (b.from - a.to) as f64 <= GPU_STALE_SECONDS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::gpu::GpuReading;
    use crate::testing::at_sec;

    fn sample(secs: i64, utils: &[f64]) -> GpuSample {
        GpuSample {
            at: at_sec(secs),
            gpus: utils
                .iter()
                .enumerate()
                .map(|(i, u)| GpuReading {
                    id: format!("pod/{i}"),
                    util: Some(*u),
                    engine_active: None,
                    power: Some(100.0 + u),
                    fb_used: None,
                })
                .collect(),
        }
    }

    fn idle(span: &GpuSpan) -> bool {
        span.max_util < 10.0
    }

    #[test]
    fn a_run_reaches_back_to_the_first_reading_that_satisfies() {
        let mut s = GpuSeries::default();
        s.record(&sample(0, &[90.0, 95.0]));
        for i in 1..=10 {
            s.record(&sample(i * 60, &[0.0, 2.0]));
        }
        let run = s.run(at_sec(600), idle).unwrap();
        assert_eq!(run.since, at_sec(60));
        assert_eq!(run.max_util, 2.0);
        assert!(s.run(at_sec(600 + 300), idle).is_none(), "the latest reading is no longer current");
        assert_eq!(s.current(at_sec(600)).unwrap().mean_util, 1.0);
        assert_eq!(s.idlest.as_deref(), Some("pod/0"));
    }

    #[test]
    fn a_gap_breaks_the_run() {
        let mut s = GpuSeries::default();
        s.record(&sample(0, &[0.0]));
        s.record(&sample(60, &[0.0]));
        s.record(&sample(60 + 301, &[0.0]));
        assert_eq!(s.run(at_sec(400), idle).unwrap().since, at_sec(361));
    }

    #[test]
    fn compaction_bounds_memory_and_never_claims_a_busy_reading_idle() {
        let mut s = GpuSeries::default();
        // A busy reading early, then 999 idle ones: compaction merges the busy one with its neighbours.
        s.record(&sample(0, &[0.0]));
        s.record(&sample(30, &[100.0]));
        for i in 2..1000 {
            s.record(&sample(i * 30, &[1.0]));
        }
        assert!(s.len() <= CAPACITY);
        let run = s.run(at_sec(999 * 30), idle).unwrap();
        assert!(run.since > at_sec(30), "never reaches over the busy reading: {:?}", run.since);
        // The run reaches back close to the busy reading, not only over the recent readings.
        assert!(run.since <= at_sec(60 + 50 * 30), "{:?}", run.since);
        assert!(s.heap_bytes() <= 5 * 1024 + 64, "{} bytes", s.heap_bytes());
    }

    #[test]
    fn compaction_marks_a_merged_gap() {
        let mut s = GpuSeries::default();
        s.record(&sample(0, &[0.0]));
        s.record(&sample(1000, &[0.0]));
        for i in 0..200 {
            s.record(&sample(1060 + i * 30, &[0.0]));
        }
        let run = s.run(at_sec(1060 + 199 * 30), idle).unwrap();
        assert!(run.since >= at_sec(1000), "never reaches across the gap: {:?}", run.since);
    }

    #[test]
    fn a_long_window_after_a_long_busy_spell_is_judged_to_within_a_small_part_of_it() {
        // Busy for 200 readings, then idle for 600 (30 s apart): the idle run must reach back to reading 200
        // within a few percent of its 5 hours, however many compactions came between.
        let mut s = GpuSeries::default();
        for i in 0..200 {
            s.record(&sample(i * 30, &[95.0, 97.0]));
        }
        for i in 200..800 {
            s.record(&sample(i * 30, &[1.0, 2.0]));
        }
        assert_eq!(s.len(), CAPACITY);
        let run = s.run(at_sec(799 * 30), idle).unwrap();
        let idle_for = (799 - 200) * 30;
        let found = (at_sec(799 * 30).as_second() - run.since.as_second()) as f64;
        assert!(run.since >= at_sec(200 * 30), "never over a busy reading: {:?}", run.since);
        assert!(found >= 0.95 * idle_for as f64, "found {found} s of {idle_for} s");
        // And a busy spell inside a long idle one is never hidden.
        let mut s = GpuSeries::default();
        for i in 0..800 {
            s.record(&sample(i * 30, &[if i == 300 { 90.0 } else { 1.0 }]));
        }
        assert!(s.run(at_sec(799 * 30), idle).unwrap().since > at_sec(300 * 30));
    }

    #[test]
    fn a_run_since_ignores_what_came_before() {
        let mut s = GpuSeries::default();
        s.record(&sample(0, &[100.0]));
        s.record(&sample(60, &[5.0]));
        for i in 2..=10 {
            s.record(&sample(i * 60, &[90.0]));
        }
        let busy = |span: &GpuSpan| span.min_util >= 80.0;
        assert_eq!(
            s.run(at_sec(600), busy).unwrap().since,
            at_sec(120),
            "the idle reading at 60 breaks the run"
        );
        let r = s.run_since(at_sec(600), at_sec(90), busy).unwrap();
        assert_eq!((r.since, r.min_util), (at_sec(120), 90.0));
        let r = s.run_since(at_sec(600), at_sec(150), busy).unwrap();
        assert_eq!(r.since, at_sec(180), "from the first reading at or after the start");
    }

    #[test]
    fn older_and_empty_samples_are_ignored() {
        let mut s = GpuSeries::default();
        assert!(s.record(&sample(60, &[5.0])));
        assert!(!s.record(&sample(30, &[5.0])));
        assert!(!s.record(&GpuSample { at: at_sec(90), gpus: vec![] }));
        assert_eq!(s.readings, 1);
    }
}
