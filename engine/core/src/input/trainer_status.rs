//! Upstream Kubeflow Trainer (>= v2.2) `status.trainerStatus`: metric values are strings (`"0.2347"`,
//! `"nan"`, `"-inf"`); non-finite values are kept. Two readers: one from a `serde_json::Value`, one borrowing
//! straight from the stream's line ([`TrainerStatusWire`]).
//!
//! The keys are exactly those of Trainer's `TrainerStatus` (`pkg/apis/trainer/v1alpha1/trainjob_types.go`,
//! the CRD's `status.trainerStatus` schema): `TRAINER_STATUS_FIELDS`, and `name`, `value` in a metric. Any
//! other key is an unknown field (see `json::Unknown`).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde_json::Value;

use crate::input::sample::{Metric, ProgressSample, SampleSource};

use crate::time::Timestamp;

use super::NormalizeError;
use super::json::{
    MapOnly, Snippet, Unknown, check_eta, check_percent, join, json_kind, missing, opt_number, opt_time,
    parse_metric_value, parse_time, type_error,
};
use super::names::{Collector, canonical_name};

/// The keys of upstream `trainerStatus`, in the CRD's order of description.
pub(super) const TRAINER_STATUS_FIELDS: [&str; 4] =
    ["progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime"];
/// The keys of one entry of `trainerStatus.metrics`.
pub(super) const METRIC_FIELDS: [&str; 2] = ["name", "value"];

/// The upstream `trainerStatus` as it appears on the wire, borrowed from the input text: the fast path for
/// watch events, and for the stream lines the hand-written `compact_line` reader declines. It accepts a
/// subset of what [`from_trainer_status`] accepts (well-typed input, no unknown keys); callers fall back to
/// the `Value` path when it does not deserialize, which also produces the precise error.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TrainerStatusWire<'a> {
    progress_percentage: Option<f64>,
    estimated_remaining_seconds: Option<f64>,
    metrics: Option<MetricsWire>,
    /// `&str`, not `Option<Cow>`, which serde would always copy; a time with escapes takes the general path.
    #[serde(borrow)]
    last_updated_time: Option<&'a str>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricWire<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    value: Cow<'a, str>,
}

thread_local! {
    /// Where [`MetricsReader`] collects a list before copying it out at its exact size, kept between samples.
    static SCRATCH: std::cell::Cell<Vec<Metric>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Reads a `metrics` list one `{name, value}` entry at a time, normalizing as it goes: canonical names,
/// progress counters routed to their fields, duplicates merged, with no intermediate list and one exactly
/// sized allocation per sample (the list is collected in a per-thread scratch vector). The fast readers of a
/// line (serde's [`MetricsWire`] and the hand-written `compact_line`) share it, so they cannot disagree. A
/// reader dropped without [`MetricsReader::finish`] (a line that fails) drops the scratch vector with it; the
/// next one starts with a fresh one, which costs an allocation, not a result.
pub(super) struct MetricsReader<'s> {
    /// Where the counters go and, at [`MetricsReader::finish`], the metrics.
    sample: &'s mut ProgressSample,
    collector: Collector,
}

impl<'s> MetricsReader<'s> {
    pub(super) fn new(sample: &'s mut ProgressSample) -> Self {
        // Empty: it is put back only after its contents moved out.
        MetricsReader { sample, collector: Collector::reusing(SCRATCH.take()) }
    }

    /// One entry. `Err` says what [`from_trainer_status`] would reject (its general path words the error).
    pub(super) fn add(&mut self, name: &str, value: f64) -> Result<(), &'static str> {
        if name.is_empty() {
            return Err("empty metric name");
        }
        self.collector.add(self.sample, canonical_name(name), value)
    }

    /// Puts the metrics into the sample (exactly sized: a replay may hold a million samples at once).
    pub(super) fn finish(self) {
        let mut scratch = self.collector.finish();
        self.sample.metrics = Vec::with_capacity(scratch.len());
        self.sample.metrics.append(&mut scratch);
        SCRATCH.set(scratch);
    }
}

/// The `metrics` list read through a [`MetricsReader`]. Anything [`from_trainer_status`] would reject fails
/// to deserialize, so the caller's general path words the error.
#[derive(Debug)]
pub(super) struct MetricsWire(ProgressSample);

impl<'de> Deserialize<'de> for MetricsWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MetricsVisitor;
        impl<'de> Visitor<'de> for MetricsVisitor {
            type Value = MetricsWire;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of {name, value} objects")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MetricsWire, A::Error> {
                // The time is set by the caller; this only carries the metrics and the counters.
                let mut sample = ProgressSample::empty(Timestamp::UNIX_EPOCH, SampleSource::TrainerStatus);
                let mut reader = MetricsReader::new(&mut sample);
                while let Some(MapOnly(m)) = seq.next_element::<MapOnly<MetricWire<'de>>>()? {
                    let value =
                        parse_metric_value(&m.value).ok_or_else(|| de::Error::custom("not a number"))?;
                    reader.add(&m.name, value).map_err(de::Error::custom)?;
                }
                reader.finish();
                Ok(MetricsWire(sample))
            }
        }
        d.deserialize_seq(MetricsVisitor)
    }
}

/// Same result as [`from_trainer_status`] for input that deserialized into [`TrainerStatusWire`].
pub(crate) fn from_trainer_status_wire(
    w: TrainerStatusWire<'_>,
    path: &str,
) -> Result<ProgressSample, NormalizeError> {
    let time_path = || join(path, "lastUpdatedTime");
    let raw_time = w.last_updated_time.ok_or_else(|| missing(time_path()))?;
    let updated_at = parse_time(raw_time).map_err(|m| NormalizeError::new(time_path(), m))?;
    let mut sample = match w.metrics {
        Some(MetricsWire(sample)) => sample,
        None => ProgressSample::empty(updated_at, SampleSource::TrainerStatus),
    };
    sample.updated_at = updated_at;
    let checked = |v: Option<f64>, field: &str, check: fn(f64) -> Result<f64, &'static str>| {
        v.map(|x| check(x).map_err(|m| NormalizeError::new(join(path, field), format!("{m}, found {x}"))))
            .transpose()
    };
    sample.progress_percent = checked(w.progress_percentage, "progressPercentage", check_percent)?;
    sample.eta_seconds = checked(w.estimated_remaining_seconds, "estimatedRemainingSeconds", check_eta)?;
    Ok(sample)
}

/// Normalizes an upstream `status.trainerStatus` object (the value of that field, not the request body).
/// `path` prefixes error paths, e.g. `"status.trainerStatus"`. A key `TrainerStatus` does not define (in the
/// object or in a metric) is an error: `trainerStatus.trainMetricz: unknown field; expected one of
/// progressPercentage, estimatedRemainingSeconds, metrics, lastUpdatedTime`.
pub fn from_trainer_status(v: &Value, path: &str) -> Result<ProgressSample, NormalizeError> {
    read_trainer_status(v, path, &mut Unknown::Reject)
}

/// [`from_trainer_status`], reading on without unknown keys; they are added to `unknown`.
pub(super) fn from_trainer_status_collecting(
    v: &Value,
    path: &str,
    unknown: &mut Vec<NormalizeError>,
) -> Result<ProgressSample, NormalizeError> {
    read_trainer_status(v, path, &mut Unknown::Collect(unknown))
}

fn read_trainer_status(
    v: &Value,
    path: &str,
    unknown: &mut Unknown<'_>,
) -> Result<ProgressSample, NormalizeError> {
    let obj = match v {
        Value::Object(o) => o,
        other => return Err(type_error(path.to_owned(), "an object", json_kind(other))),
    };
    for key in obj.keys() {
        if !TRAINER_STATUS_FIELDS.contains(&key.as_str()) {
            unknown.field(join(path, key), &TRAINER_STATUS_FIELDS)?;
        }
    }
    let time_path = || join(path, "lastUpdatedTime");
    // The CRD requires lastUpdatedTime (CEL `has(self.lastUpdatedTime)`); dedup and staleness need it.
    let updated_at = opt_time(obj.get("lastUpdatedTime"), time_path)?.ok_or_else(|| missing(time_path()))?;

    let mut sample = ProgressSample::empty(updated_at, SampleSource::TrainerStatus);
    sample.progress_percent =
        opt_number(obj.get("progressPercentage"), || join(path, "progressPercentage"), check_percent)?;
    sample.eta_seconds = opt_number(
        obj.get("estimatedRemainingSeconds"),
        || join(path, "estimatedRemainingSeconds"),
        check_eta,
    )?;

    let items = match obj.get("metrics") {
        None | Some(Value::Null) => return Ok(sample),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(type_error(join(path, "metrics"), "an array", json_kind(other)));
        }
    };
    let mut collector = Collector::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = |field: &str| format!("{}[{i}]{field}", join(path, "metrics"));
        let m = match item {
            Value::Object(m) => m,
            other => return Err(type_error(at(""), "an object", json_kind(other))),
        };
        for key in m.keys() {
            if !METRIC_FIELDS.contains(&key.as_str()) {
                unknown.field(at(&format!(".{key}")), &METRIC_FIELDS)?;
            }
        }
        let name = match m.get("name") {
            Some(Value::String(s)) if !s.is_empty() => s,
            Some(Value::String(_)) => {
                return Err(NormalizeError::new(at(".name"), "empty metric name"));
            }
            None | Some(Value::Null) => return Err(missing(at(".name"))),
            Some(other) => return Err(type_error(at(".name"), "a string", json_kind(other))),
        };
        let value = match m.get("value") {
            Some(Value::String(s)) => parse_metric_value(s)
                .ok_or_else(|| NormalizeError::new(at(".value"), format!("not a number: {}", Snippet(s))))?,
            None | Some(Value::Null) => return Err(missing(at(".value"))),
            // The CRD types value as a string; a bare number would be rejected by the API server.
            Some(other) => return Err(type_error(at(".value"), "a string", json_kind(other))),
        };
        collector
            .add(&mut sample, canonical_name(name), value)
            .map_err(|msg| NormalizeError::new(at(".value"), format!("{msg}, found {value}")))?;
    }
    sample.metrics = collector.finish();
    Ok(sample)
}
