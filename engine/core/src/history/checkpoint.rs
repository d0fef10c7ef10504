//! A job's history as compact JSON, the part of a checkpoint that `evaluate::checkpoint` wraps with the
//! job's uid, the version and the detectors' memories.
//!
//! Times are seconds relative to one origin (the newest sample), ring times delta-encoded, whole numbers
//! written without a fraction, so a ring point costs a few bytes of time plus its value. Values are written
//! in the shortest form that reads back bit for bit: a restored history answers exactly as the one saved.
//! [`SeriesWire::keep_newest`] leaves out the oldest ring points (their best values survive in the
//! evicted minimum and maximum) when the caller must fit a byte budget.

use crate::history::job_series::{JobParts, JobSeries, LastProgress};
use crate::history::metric_series::{Best, MetricParts};
use crate::time::{Timestamp, add_seconds, seconds};

/// A number that reads back bit for bit: a whole number as a JSON integer, anything else as a string in
/// Rust's shortest round-trip form (serde_json's own float parsing may be off by an ulp, and a best value
/// one ulp off can turn "no significant improvement" into one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Num(f64);

impl Num {
    pub(crate) fn of(v: f64) -> Num {
        Num(v)
    }

    pub(crate) fn get(self) -> f64 {
        self.0
    }

    fn whole(self) -> Option<i64> {
        let v = self.0;
        (v.fract() == 0.0 && v.abs() < 9.0e15 && !(v == 0.0 && v.is_sign_negative())).then_some(v as i64)
    }
}

/// The shorter of Rust's plain and exponent forms, both exact.
fn shortest(v: f64) -> String {
    let (plain, exp) = (format!("{v}"), format!("{v:e}"));
    if exp.len() < plain.len() { exp } else { plain }
}

impl serde::Serialize for Num {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.whole() {
            Some(i) => s.serialize_i64(i),
            None => s.serialize_str(&shortest(self.0)),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Num {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(i) => Ok(Num(i as f64)),
            Raw::Text(t) => {
                t.parse().map(Num).map_err(|_| serde::de::Error::custom(format!("not a number: {t:?}")))
            }
        }
    }
}

/// A list of numbers as one string, space-separated (ring times and values: two quotes per list instead of
/// two per number).
mod packed {
    use super::{Num, shortest};

    pub(super) fn serialize<S: serde::Serializer>(v: &[Num], s: S) -> Result<S::Ok, S::Error> {
        let text: Vec<String> =
            v.iter().map(|n| n.whole().map_or_else(|| shortest(n.get()), |i| i.to_string())).collect();
        s.serialize_str(&text.join(" "))
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Num>, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(d)?;
        text.split_ascii_whitespace()
            .map(|t| t.parse().map(Num).map_err(|_| serde::de::Error::custom(format!("not a number: {t:?}"))))
            .collect()
    }
}

/// A job's [`JobSeries`] on the wire.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct SeriesWire {
    #[serde(rename = "n")]
    samples: u64,
    #[serde(rename = "dm", default, skip_serializing_if = "is_zero")]
    dropped_metrics: u64,
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    first_sample: Option<Num>,
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    last_sample: Option<Num>,
    #[serde(rename = "pr", default, skip_serializing_if = "Option::is_none")]
    last_progress: Option<Num>,
    /// progress %, ETA, step, total steps, epoch, total epochs.
    #[serde(rename = "lp", default, skip_serializing_if = "Option::is_none")]
    last: Option<[Option<Num>; 6]>,
    #[serde(rename = "sh", default, skip_serializing_if = "Option::is_none")]
    summary_hash: Option<String>,
    #[serde(rename = "mc", default, skip_serializing_if = "is_zero_usize")]
    metric_count: usize,
    #[serde(rename = "m", default, skip_serializing_if = "Vec::is_empty")]
    metrics: Vec<MetricWire>,
    /// The longest silences: when each began (relative to the origin) and how long, in seconds.
    #[serde(rename = "g", default, skip_serializing_if = "Vec::is_empty")]
    gaps: Vec<(Num, Num)>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct MetricWire {
    #[serde(rename = "k")]
    name: String,
    #[serde(rename = "c")]
    count: u64,
    #[serde(rename = "r", default, skip_serializing_if = "is_zero")]
    repeats: u64,
    #[serde(rename = "s", default, skip_serializing_if = "Option::is_none")]
    last_seen: Option<Num>,
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    last: Option<(Num, Num)>,
    /// Best minimum: value, time, sample number.
    #[serde(rename = "bn", default, skip_serializing_if = "Option::is_none")]
    best_min: Option<(Num, Num, u64)>,
    #[serde(rename = "bx", default, skip_serializing_if = "Option::is_none")]
    best_max: Option<(Num, Num, u64)>,
    #[serde(rename = "en", default, skip_serializing_if = "Option::is_none")]
    evicted_min: Option<Num>,
    #[serde(rename = "ex", default, skip_serializing_if = "Option::is_none")]
    evicted_max: Option<Num>,
    #[serde(rename = "e", default, skip_serializing_if = "Option::is_none")]
    ema: Option<Num>,
    #[serde(rename = "nf", default, skip_serializing_if = "is_zero")]
    non_finite_count: u64,
    /// The latest non-finite value: time and `NaN`, `inf` or `-inf` (JSON has no such numbers).
    #[serde(rename = "x", default, skip_serializing_if = "Option::is_none")]
    last_non_finite: Option<(Num, String)>,
    #[serde(rename = "fr", default, skip_serializing_if = "is_false")]
    fresh: bool,
    /// Ring times: the oldest relative to the origin, then each the gap to the one before.
    #[serde(rename = "t", default, skip_serializing_if = "Vec::is_empty", with = "packed")]
    times: Vec<Num>,
    #[serde(rename = "v", default, skip_serializing_if = "Vec::is_empty", with = "packed")]
    values: Vec<Num>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn offset(origin: Timestamp, t: Timestamp) -> Num {
    Num::of(seconds(origin, t))
}

fn instant(origin: Timestamp, off: Num) -> Option<Timestamp> {
    add_seconds(origin, off.get())
}

fn finite(v: f64) -> Option<Num> {
    v.is_finite().then(|| Num::of(v))
}

impl SeriesWire {
    /// `series` on the wire, times relative to `origin`.
    pub(crate) fn of(series: &JobSeries, origin: Timestamp) -> SeriesWire {
        let parts = series.export(origin);
        let at = |t: Option<Timestamp>| t.map(|t| offset(origin, t));
        SeriesWire {
            samples: parts.samples,
            dropped_metrics: parts.dropped_metrics,
            first_sample: at(parts.first_sample_at),
            last_sample: at(parts.last_sample_at),
            last_progress: at(parts.last_progress_at),
            last: parts.last.map(|l| {
                [
                    l.progress_percent,
                    l.eta_seconds,
                    l.current_step,
                    l.total_steps,
                    l.current_epoch,
                    l.total_epochs,
                ]
                .map(|v| v.and_then(finite))
            }),
            summary_hash: parts.last_summary.map(|h| format!("{h:016x}")),
            metric_count: parts.last_metric_count,
            metrics: parts.metrics.iter().map(|(name, m)| MetricWire::of(name, m, origin)).collect(),
            gaps: parts.long_gaps.iter().map(|&(t, secs)| (offset(origin, t), Num::of(secs))).collect(),
        }
    }

    /// The history this describes; `None` when a time in it is out of range.
    pub(crate) fn to_series(&self, origin: Timestamp) -> Option<JobSeries> {
        let at = |t: Option<Num>| t.map(|t| instant(origin, t)).map_or(Some(None), |t| t.map(Some));
        let parts = JobParts {
            metrics: self
                .metrics
                .iter()
                .map(|m| Some((m.name.clone(), m.to_parts(origin)?)))
                .collect::<Option<Vec<_>>>()?,
            samples: self.samples,
            dropped_metrics: self.dropped_metrics,
            first_sample_at: at(self.first_sample)?,
            last_sample_at: at(self.last_sample)?,
            last_progress_at: at(self.last_progress)?,
            last: self.last.map(|l| {
                let [progress_percent, eta_seconds, current_step, total_steps, current_epoch, total_epochs] =
                    l.map(|v| v.map(Num::get));
                LastProgress {
                    progress_percent,
                    eta_seconds,
                    current_step,
                    total_steps,
                    current_epoch,
                    total_epochs,
                }
            }),
            last_summary: match &self.summary_hash {
                Some(h) => Some(u64::from_str_radix(h, 16).ok()?),
                None => None,
            },
            last_metric_count: self.metric_count,
            long_gaps: self
                .gaps
                .iter()
                .filter(|(_, secs)| secs.get().is_finite() && secs.get() > 0.0)
                .map(|&(t, secs)| Some((instant(origin, t)?, secs.get())))
                .collect::<Option<Vec<_>>>()?,
        };
        Some(JobSeries::import(origin, &parts))
    }

    /// Ring points kept, over all metrics.
    pub(crate) fn points(&self) -> usize {
        self.metrics.iter().map(|m| m.values.len()).sum()
    }

    /// The most ring points any one metric keeps.
    pub(crate) fn max_points(&self) -> usize {
        self.metrics.iter().map(|m| m.values.len()).max().unwrap_or(0)
    }

    /// Metrics kept.
    pub(crate) fn metric_count(&self) -> usize {
        self.metrics.len()
    }

    /// Keeps at most the newest `n` ring points of each metric; the values left out count toward the
    /// evicted minimum and maximum, so "best before the window" answers stay right.
    pub(crate) fn keep_newest(&mut self, n: usize) {
        for m in &mut self.metrics {
            let cut = m.values.len().saturating_sub(n);
            if cut == 0 {
                continue;
            }
            if n == 0 {
                m.times.clear();
            }
            let first = m.times.get(..=cut).map(|t| t.iter().fold(0.0, |acc, d| acc + d.get()));
            for v in m.values.drain(..cut) {
                let v = v.get();
                m.evicted_min = Some(Num::of(m.evicted_min.map_or(v, |e| e.get().min(v))));
                m.evicted_max = Some(Num::of(m.evicted_max.map_or(v, |e| e.get().max(v))));
            }
            if let Some(first) = first {
                m.times.drain(..cut);
                m.times[0] = Num::of(first);
            }
        }
    }

    /// Drops the metrics after the first `n` (in the order the job first reported them).
    pub(crate) fn keep_metrics(&mut self, n: usize) {
        self.metrics.truncate(n);
    }
}

impl MetricWire {
    fn of(name: &str, m: &MetricParts, origin: Timestamp) -> MetricWire {
        let best = |b: Option<Best>| b.map(|b| (Num::of(b.value), offset(origin, b.at), b.sample));
        let mut previous = 0.0;
        let times = m
            .points
            .iter()
            .enumerate()
            .map(|(i, (t, _))| {
                let d = if i == 0 { *t } else { t - previous };
                previous = *t;
                Num::of(d)
            })
            .collect();
        MetricWire {
            name: name.to_string(),
            count: m.count,
            repeats: m.repeats,
            last_seen: m.last_seen_at.map(|t| offset(origin, t)),
            last: m.last.map(|(t, v)| (offset(origin, t), Num::of(v))),
            best_min: best(m.best_min),
            best_max: best(m.best_max),
            evicted_min: finite(m.evicted_min),
            evicted_max: finite(m.evicted_max),
            ema: m.ema.and_then(finite),
            non_finite_count: m.non_finite_count,
            last_non_finite: m.last_non_finite.map(|(t, v)| (offset(origin, t), v.to_string())),
            fresh: m.fresh,
            times,
            values: m.points.iter().map(|(_, v)| Num::of(*v)).collect(),
        }
    }

    fn to_parts(&self, origin: Timestamp) -> Option<MetricParts> {
        let at = |t: Option<Num>| t.map(|t| instant(origin, t)).map_or(Some(None), |t| t.map(Some));
        let best = |b: Option<(Num, Num, u64)>| {
            b.map(|(v, t, sample)| Some(Best { value: v.get(), at: instant(origin, t)?, sample }))
                .map_or(Some(None), |b| b.map(Some))
        };
        let mut t = 0.0;
        let times = self.times.iter().map(|d| {
            t += d.get();
            t
        });
        Some(MetricParts {
            points: times.zip(self.values.iter().map(|v| v.get())).collect(),
            count: self.count,
            last: match self.last {
                Some((t, v)) => Some((instant(origin, t)?, v.get())),
                None => None,
            },
            best_min: best(self.best_min)?,
            best_max: best(self.best_max)?,
            evicted_min: self.evicted_min.map_or(f64::INFINITY, Num::get),
            evicted_max: self.evicted_max.map_or(f64::NEG_INFINITY, Num::get),
            ema: self.ema.map(Num::get),
            non_finite_count: self.non_finite_count,
            last_non_finite: match &self.last_non_finite {
                Some((t, v)) => {
                    Some((instant(origin, *t)?, v.parse::<f64>().ok().filter(|v| !v.is_finite())?))
                }
                None => None,
            },
            repeats: self.repeats,
            last_seen_at: at(self.last_seen)?,
            fresh: self.fresh,
        })
    }
}
