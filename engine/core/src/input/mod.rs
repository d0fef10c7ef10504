//! Turns the two Kubeflow progress formats, and the TrainJob that carries them, into [`ProgressSample`]s
//! and [`JobSnapshot`]s.
//!
//! - [`from_trainer_status`]: upstream Kubeflow Trainer (>= v2.2) `status.trainerStatus`. Metric values are
//!   strings (`"0.2347"`, `"nan"`, `"-inf"`); non-finite values are kept.
//! - [`from_annotation`]: the RHOAI 3.4 `trainer.opendatahub.io/trainerStatus` annotation (a JSON string).
//!   A `null` metric value is what the RHOAI controller makes of NaN/±Inf, so it becomes `f64::NAN`. Bare
//!   Python tokens (`NaN`, `Infinity`, `-Infinity`) are accepted too, so [`from_metrics_response`] can read
//!   a `GET :28080/metrics` body directly.
//! - [`from_trainjob`]: a whole watched TrainJob; prefers `status.trainerStatus`, then the annotation.
//!
//! Every malformed input gives a [`NormalizeError`] naming the field path; nothing here panics.
//!
//! # Metric names
//!
//! Reporters name the same thing differently. [`canonical_metric_name`] maps them (exact, case-sensitive
//! match); any other name is kept verbatim. The four progress counters are not metrics: they fill the
//! sample's fields wherever they appear (upstream `metrics[]`, RHOAI top level or metric maps).
//!
//! | reported as | canonical | goes to |
//! | --- | --- | --- |
//! | `current_step`, `currentStep`, `step` | `current_step` | [`ProgressSample::current_step`] |
//! | `total_steps`, `totalSteps`, `max_steps` | `total_steps` | [`ProgressSample::total_steps`] |
//! | `current_epoch`, `currentEpoch`, `epoch` | `current_epoch` | [`ProgressSample::current_epoch`] |
//! | `total_epochs`, `totalEpochs`, `num_train_epochs` | `total_epochs` | [`ProgressSample::total_epochs`] |
//! | `lr`, `learning_rate` | `learning_rate` | metrics |
//! | `gradient_norm`, `grad_norm` | `grad_norm` | metrics |
//! | `throughput_samples_sec`, `train_samples_per_second`, `throughput_samples_per_second` | `throughput_samples_per_second` | metrics |
//! | `trainMetrics.X` (RHOAI `trainMetrics` map) | canonical of `X` (`trainMetrics.loss` → `loss`) | as `X` |
//! | `evalMetrics.X` (RHOAI `evalMetrics` map) | canonical of `X` if it starts with `eval_`, else of `eval_X` | as that name |
//! | `train_loss` | `train_loss` (HF's final average loss, not `loss`) | metrics |
//!
//! These canonical names are returned without allocating: the ones above plus `loss`, `eval_loss`,
//! `accuracy`, `eval_accuracy`, `train_runtime`, `train_steps_per_second`, `total_flos`, `eval_runtime`,
//! `eval_samples_per_second`, `eval_steps_per_second`.
//!
//! A name reported twice in one sample keeps the position of its first occurrence and the value of its
//! last.

pub(crate) mod sample;
pub(crate) mod stream;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::input::sample::{JobKey, JobPhase, JobSnapshot, Metric, ProgressSample, SampleSource};

use crate::time::Timestamp;

/// A malformed input: `path` names the offending field (root errors use `$`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct NormalizeError {
    pub path: String,
    pub message: String,
}

impl NormalizeError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        NormalizeError { path: path.into(), message: message.into() }
    }
}

/// The RHOAI annotation holding the progress JSON.
pub const TRAINER_STATUS_ANNOTATION: &str = "trainer.opendatahub.io/trainerStatus";
/// Error path of that annotation inside a TrainJob.
const ANNOTATION_PATH: &str = "metadata.annotations[\"trainer.opendatahub.io/trainerStatus\"]";
const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
const KIND: &str = "TrainJob";
const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

const CURRENT_STEP: &str = "current_step";
const TOTAL_STEPS: &str = "total_steps";
const CURRENT_EPOCH: &str = "current_epoch";
const TOTAL_EPOCHS: &str = "total_epochs";

/// Canonical name of a known reported name (see the module table).
fn known(raw: &str) -> Option<&'static str> {
    Some(match raw {
        "current_step" | "currentStep" | "step" => CURRENT_STEP,
        "total_steps" | "totalSteps" | "max_steps" => TOTAL_STEPS,
        "current_epoch" | "currentEpoch" | "epoch" => CURRENT_EPOCH,
        "total_epochs" | "totalEpochs" | "num_train_epochs" => TOTAL_EPOCHS,
        "lr" | "learning_rate" => "learning_rate",
        "gradient_norm" | "grad_norm" => "grad_norm",
        "throughput_samples_sec" | "train_samples_per_second" | "throughput_samples_per_second" => {
            "throughput_samples_per_second"
        }
        "loss" => "loss",
        "train_loss" => "train_loss",
        "eval_loss" => "eval_loss",
        "accuracy" => "accuracy",
        "eval_accuracy" => "eval_accuracy",
        "train_runtime" => "train_runtime",
        "train_steps_per_second" => "train_steps_per_second",
        "total_flos" => "total_flos",
        "eval_runtime" => "eval_runtime",
        "eval_samples_per_second" => "eval_samples_per_second",
        "eval_steps_per_second" => "eval_steps_per_second",
        _ => return None,
    })
}

/// Canonical name of a plain (unprefixed) name.
fn plain_name(raw: &str) -> Cow<'static, str> {
    match known(raw) {
        Some(c) => Cow::Borrowed(c),
        None => Cow::Owned(raw.to_owned()),
    }
}

/// Canonical name of a key of RHOAI's `evalMetrics` map: `eval_` is added unless already there.
fn eval_name(key: &str) -> Cow<'static, str> {
    if key.starts_with("eval_") {
        return plain_name(key);
    }
    // Look up without building `eval_{key}` first, so known names stay allocation-free.
    let known_eval = match key {
        "loss" => Some("eval_loss"),
        "accuracy" => Some("eval_accuracy"),
        "runtime" => Some("eval_runtime"),
        "samples_per_second" => Some("eval_samples_per_second"),
        "steps_per_second" => Some("eval_steps_per_second"),
        _ => None,
    };
    match known_eval {
        Some(c) => Cow::Borrowed(c),
        None => Cow::Owned(format!("eval_{key}")),
    }
}

/// A canonical metric name as the `&'static str` samples carry (so lookups can match by address before
/// comparing bytes, see [`crate::input::sample::same_name`]); other names are copied. Aliases are not resolved.
pub fn interned(name: &str) -> Cow<'static, str> {
    match known(name) {
        Some(canonical) if canonical == name => Cow::Borrowed(canonical),
        _ => Cow::Owned(name.to_owned()),
    }
}

/// Map a reporter's metric name to the canonical one; unknown names are kept as they are (`Cow::Owned`).
///
/// Also understands the flattened RHOAI forms `trainMetrics.X` and `evalMetrics.X`.
pub fn canonical_metric_name(raw: &str) -> Cow<'static, str> {
    if let Some(rest) = raw.strip_prefix("trainMetrics.").filter(|r| !r.is_empty()) {
        return plain_name(rest);
    }
    if let Some(rest) = raw.strip_prefix("evalMetrics.").filter(|r| !r.is_empty()) {
        return eval_name(rest);
    }
    plain_name(raw)
}

/// Which progress field a canonical name fills, if any.
fn progress_field<'s>(sample: &'s mut ProgressSample, canonical: &str) -> Option<&'s mut Option<f64>> {
    match canonical {
        CURRENT_STEP => Some(&mut sample.current_step),
        TOTAL_STEPS => Some(&mut sample.total_steps),
        CURRENT_EPOCH => Some(&mut sample.current_epoch),
        TOTAL_EPOCHS => Some(&mut sample.total_epochs),
        _ => None,
    }
}

fn is_progress_name(canonical: &str) -> bool {
    matches!(canonical, CURRENT_STEP | TOTAL_STEPS | CURRENT_EPOCH | TOTAL_EPOCHS)
}

/// Collects the metrics of one sample, routing progress counters to their fields and merging duplicates.
struct Collector {
    metrics: Vec<Metric>,
    /// Set once the list got too long for a linear duplicate scan; [`Collector::finish`] then sorts.
    unchecked: bool,
}

/// Up to this many metrics, duplicates are found by a linear scan on insert.
const LINEAR_DEDUP_MAX: usize = 32;

impl Collector {
    fn with_capacity(n: usize) -> Self {
        Collector { metrics: Vec::with_capacity(n.min(LINEAR_DEDUP_MAX)), unchecked: false }
    }

    /// Adds one reported value under its canonical name. `Err` is the message for the value's path.
    fn add(
        &mut self,
        sample: &mut ProgressSample,
        name: Cow<'static, str>,
        value: f64,
    ) -> Result<(), &'static str> {
        if let Some(field) = progress_field(sample, &name) {
            if !(value.is_finite() && value >= 0.0) {
                return Err("a step or epoch count must be a finite number >= 0");
            }
            *field = Some(value);
            return Ok(());
        }
        if !self.unchecked {
            if let Some(m) = self.metrics.iter_mut().find(|m| m.name == name) {
                m.value = value;
                return Ok(());
            }
            self.unchecked = self.metrics.len() >= LINEAR_DEDUP_MAX;
        }
        self.metrics.push(Metric { name, value });
        Ok(())
    }

    fn finish(mut self) -> Vec<Metric> {
        if self.unchecked {
            dedup_sorted(&mut self.metrics);
        }
        self.metrics
    }
}

/// O(n log n) duplicate merge for long metric lists: first position, last value.
fn dedup_sorted(metrics: &mut Vec<Metric>) {
    let mut order: Vec<usize> = (0..metrics.len()).collect();
    // Stable, so equal names stay in report order.
    order.sort_by(|&a, &b| metrics[a].name.cmp(&metrics[b].name));
    let mut keep = vec![true; metrics.len()];
    let mut start = 0;
    while start < order.len() {
        let first = order[start];
        let mut end = start + 1;
        while end < order.len() && metrics[order[end]].name == metrics[first].name {
            keep[order[end]] = false;
            end += 1;
        }
        metrics[first].value = metrics[order[end - 1]].value;
        start = end;
    }
    let mut i = 0;
    metrics.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

// ---------------------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------------------

fn join(base: &str, field: &str) -> String {
    if base.is_empty() { field.to_owned() } else { format!("{base}.{field}") }
}

/// A string shown in an error message, cut to a readable length (inputs can be 64 KiB of garbage).
struct Snippet<'a>(&'a str);

impl fmt::Display for Snippet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 64;
        if self.0.len() <= MAX {
            return write!(f, "{:?}", self.0);
        }
        let mut end = MAX;
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{:?}…", &self.0[..end])
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn type_error(path: String, expected: &str, found: &str) -> NormalizeError {
    NormalizeError::new(path, format!("expected {expected}, found {found}"))
}

fn missing(path: String) -> NormalizeError {
    NormalizeError::new(path, "missing (required)")
}

fn parse_time(s: &str) -> Result<Timestamp, String> {
    s.parse::<Timestamp>().map_err(|e| format!("invalid RFC 3339 timestamp {}: {e}", Snippet(s)))
}

/// Parses a metric value string. Rust's float grammar already accepts `nan`, `inf`, `infinity` in any
/// case with an optional sign, which covers Python's `str(float)` and the JavaScript spellings.
fn parse_metric_value(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() {
        return None;
    }
    t.parse::<f64>().ok()
}

fn check_percent(v: f64) -> Result<f64, &'static str> {
    if (0.0..=100.0).contains(&v) { Ok(v) } else { Err("progress must be within 0..=100") }
}

fn check_eta(v: f64) -> Result<f64, &'static str> {
    if v >= 0.0 { Ok(v) } else { Err("estimated remaining seconds must be >= 0") }
}

/// An optional JSON number (`null` counts as absent).
fn opt_number(
    v: Option<&Value>,
    path: impl FnOnce() -> String,
    check: fn(f64) -> Result<f64, &'static str>,
) -> Result<Option<f64>, NormalizeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            // serde_json numbers are always finite; as_f64 only fails with arbitrary_precision.
            let x = n.as_f64().unwrap_or(f64::NAN);
            check(x).map(Some).map_err(|m| NormalizeError::new(path(), format!("{m}, found {n}")))
        }
        Some(other) => Err(type_error(path(), "a number", json_kind(other))),
    }
}

fn opt_object<'v>(
    v: Option<&'v Value>,
    path: &str,
) -> Result<Option<&'v Map<String, Value>>, NormalizeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(type_error(path.to_owned(), "an object", json_kind(other))),
    }
}

fn opt_str(v: Option<&Value>, path: impl FnOnce() -> String) -> Result<Option<&str>, NormalizeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(type_error(path(), "a string", json_kind(other))),
    }
}

fn opt_time(v: Option<&Value>, path: impl Fn() -> String) -> Result<Option<Timestamp>, NormalizeError> {
    match opt_str(v, &path)? {
        None => Ok(None),
        Some(s) => parse_time(s).map(Some).map_err(|m| NormalizeError::new(path(), m)),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Upstream: status.trainerStatus
// ---------------------------------------------------------------------------------------------------------

/// The upstream `trainerStatus` as it appears on the wire, borrowed from the input text: the fast path for
/// streams and watch events. It accepts a subset of what [`from_trainer_status`] accepts (well-typed input);
/// callers fall back to the `Value` path when it does not deserialize, which also produces the precise error.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainerStatusWire<'a> {
    progress_percentage: Option<f64>,
    estimated_remaining_seconds: Option<f64>,
    metrics: Option<MetricsWire>,
    /// `&str`, not `Option<Cow>`, which serde would always copy; a time with escapes takes the general path.
    #[serde(borrow)]
    last_updated_time: Option<&'a str>,
}

#[derive(serde::Deserialize)]
struct MetricWire<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    value: Cow<'a, str>,
}

thread_local! {
    /// Where [`MetricsWire`] collects a list before copying it out at its exact size, kept between samples.
    static SCRATCH: std::cell::Cell<Vec<Metric>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The `metrics` list, normalized while it is read: canonical names, progress counters routed to their
/// fields, duplicates merged, with no intermediate list and one exactly sized allocation per sample (the
/// list is collected in a per-thread scratch vector). Anything [`from_trainer_status`] would reject fails to deserialize, so the caller's general path
/// words the error.
#[derive(Debug)]
struct MetricsWire(ProgressSample);

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
                // Empty: it is put back only after its contents moved out.
                let mut collector = Collector { metrics: SCRATCH.take(), unchecked: false };
                while let Some(m) = seq.next_element::<MetricWire<'de>>()? {
                    if m.name.is_empty() {
                        return Err(de::Error::custom("empty metric name"));
                    }
                    let value =
                        parse_metric_value(&m.value).ok_or_else(|| de::Error::custom("not a number"))?;
                    collector
                        .add(&mut sample, canonical_metric_name(&m.name), value)
                        .map_err(de::Error::custom)?;
                }
                let mut scratch = collector.finish();
                // Exactly sized: a replay may hold a million samples at once.
                sample.metrics = Vec::with_capacity(scratch.len());
                sample.metrics.append(&mut scratch);
                SCRATCH.set(scratch);
                Ok(MetricsWire(sample))
            }
        }
        d.deserialize_seq(MetricsVisitor)
    }
}

/// Same result as [`from_trainer_status`] for input that deserialized into [`TrainerStatusWire`].
pub fn from_trainer_status_wire(
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
/// `path` prefixes error paths, e.g. `"status.trainerStatus"`.
pub fn from_trainer_status(v: &Value, path: &str) -> Result<ProgressSample, NormalizeError> {
    let obj = match v {
        Value::Object(o) => o,
        other => return Err(type_error(path.to_owned(), "an object", json_kind(other))),
    };
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
            .add(&mut sample, canonical_metric_name(name), value)
            .map_err(|msg| NormalizeError::new(at(".value"), format!("{msg}, found {value}")))?;
    }
    sample.metrics = collector.finish();
    Ok(sample)
}

// ---------------------------------------------------------------------------------------------------------
// RHOAI: annotation / metrics endpoint JSON
// ---------------------------------------------------------------------------------------------------------

/// Normalizes the RHOAI `trainer.opendatahub.io/trainerStatus` annotation value. `path` prefixes error
/// paths. `lastUpdatedTime` is required (the RHOAI controller always sets it).
pub fn from_annotation(json: &str, path: &str) -> Result<ProgressSample, NormalizeError> {
    parse_rhoai(json, path, None)
}

/// Normalizes a RHOAI training pod's `GET :28080/metrics` body (same shape as the annotation, possibly with
/// bare `NaN`/`Infinity`, and without `lastUpdatedTime`). `received_at` is used when the body has no
/// `lastUpdatedTime`. The sample's source is [`SampleSource::Annotation`] (the RHOAI format).
pub fn from_metrics_response(
    json: &str,
    path: &str,
    received_at: Timestamp,
) -> Result<ProgressSample, NormalizeError> {
    parse_rhoai(json, path, Some(received_at))
}

fn parse_rhoai(
    json: &str,
    path: &str,
    fallback_time: Option<Timestamp>,
) -> Result<ProgressSample, NormalizeError> {
    // Plain JSON first: the annotation is already sanitized by the RHOAI controller, so the fast path never
    // scans or copies the text.
    let first_err = match serde_json::from_str::<Node>(json) {
        Ok(root) => return build_rhoai(root, path, fallback_time),
        Err(e) => e,
    };
    let Some(quoted) = quote_bare_nonfinite(json) else {
        return Err(json_error(path, &first_err, None));
    };
    match serde_json::from_str::<Node>(&quoted.text) {
        Ok(root) => build_rhoai(root, path, fallback_time),
        Err(e) => Err(json_error(path, &e, Some((json, &quoted)))),
    }
}

/// An invalid-JSON error at `path`, with serde_json's line and column (mapped back to the caller's text when
/// the error came from the re-quoted copy).
fn json_error(path: &str, e: &serde_json::Error, requoted: Option<(&str, &Requoted)>) -> NormalizeError {
    let (line, col) = (e.line(), e.column());
    let full = e.to_string();
    let what = full.strip_suffix(&format!(" at line {line} column {col}")).unwrap_or(&full);
    let col = match requoted {
        Some((original, q)) if line > 0 => q.original_column(original, line, col),
        _ => col,
    };
    NormalizeError::new(path, format!("invalid JSON at line {line} column {col}: {what}"))
}

/// The caller's text with bare `NaN`/`Infinity`/`-Infinity` quoted, plus where (original byte offsets and
/// token lengths) that happened.
struct Requoted {
    text: String,
    tokens: Vec<(usize, usize)>,
}

impl Requoted {
    /// Maps a 1-based serde_json (line, byte column) in `self.text` to the column in `original`. Quoting never
    /// adds a newline, so lines agree; each quoted token before the position shifted it by 2 bytes.
    fn original_column(&self, original: &str, line: usize, col: usize) -> usize {
        let line_start = |text: &str| -> usize {
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .nth(line.wrapping_sub(2))
                .map_or(0, |(i, _)| i + 1)
        };
        let (orig_start, new_start) =
            if line <= 1 { (0, 0) } else { (line_start(original), line_start(&self.text)) };
        let new_pos = new_start + col.saturating_sub(1);
        let mut shift = 0;
        let mut orig_pos = None;
        for &(start, len) in &self.tokens {
            let quoted_start = start + shift;
            if new_pos <= quoted_start {
                break;
            }
            if new_pos < quoted_start + len + 2 {
                // Inside the quoted token: the corresponding byte of the bare token (the closing quote,
                // only reported at end of input, maps to its last byte).
                orig_pos = Some(start + (new_pos - quoted_start - 1).min(len - 1));
                break;
            }
            shift += 2;
        }
        let orig_pos = orig_pos.unwrap_or(new_pos.saturating_sub(shift));
        orig_pos.saturating_sub(orig_start) + 1
    }
}

/// Quotes Python's bare `NaN`, `Infinity` and `-Infinity` outside string literals (Python `json.dumps` emits
/// them, JSON has no such tokens). `None` when there is nothing to quote.
fn quote_bare_nonfinite(text: &str) -> Option<Requoted> {
    const TOKENS: [&str; 3] = ["NaN", "Infinity", "-Infinity"];
    let bytes = text.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'.';
    let mut out: Option<Requoted> = None;
    let mut copied = 0;
    let mut in_string = false;
    let mut escaped = false;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        let boundary_before = i == 0 || !is_word(bytes[i - 1]);
        let token = TOKENS.iter().find(|t| {
            bytes[i..].starts_with(t.as_bytes()) && bytes.get(i + t.len()).is_none_or(|&next| !is_word(next))
        });
        match token {
            Some(t) if boundary_before => {
                let q = out.get_or_insert_with(|| Requoted {
                    text: String::with_capacity(text.len() + 16),
                    tokens: Vec::new(),
                });
                // Token bytes are ASCII, so `copied` and `i` are char boundaries.
                q.text.push_str(&text[copied..i]);
                q.text.push('"');
                q.text.push_str(t);
                q.text.push('"');
                q.tokens.push((i, t.len()));
                i += t.len();
                copied = i;
            }
            _ => i += 1,
        }
    }
    let mut q = out?;
    q.text.push_str(&text[copied..]);
    Some(q)
}

/// A borrowed JSON tree of just what the RHOAI format needs: objects keep their entries in order, arrays are
/// skipped (no RHOAI field is an array). Cheaper than `serde_json::Value` (no key copies, no BTreeMap).
enum Node<'a> {
    Null,
    Bool,
    Num(f64),
    Str(Cow<'a, str>),
    Array,
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl Node<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool => "a boolean",
            Node::Num(_) => "a number",
            Node::Str(_) => "a string",
            Node::Array => "an array",
            Node::Object(_) => "an object",
        }
    }
}

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node<'de>, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node<'de>, E> {
        Ok(Node::Bool)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node<'de>, E> {
        Ok(Node::Num(v as f64))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node<'de>, E> {
        Ok(Node::Num(v as f64))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node<'de>, E> {
        Ok(Node::Num(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Owned(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Node::Array)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(8).min(16));
        while let Some(Key(k)) = map.next_key()? {
            let v = map.next_value::<Node>()?;
            entries.push((k, v));
        }
        Ok(Node::Object(entries))
    }
}

/// An object key, borrowed from the input when it has no escapes (serde's own `Cow<str>` always copies).
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

fn node_number(
    node: &Node<'_>,
    path: impl FnOnce() -> String,
    check: fn(f64) -> Result<f64, &'static str>,
) -> Result<Option<f64>, NormalizeError> {
    match node {
        Node::Null => Ok(None),
        Node::Num(x) => {
            check(*x).map(Some).map_err(|m| NormalizeError::new(path(), format!("{m}, found {x}")))
        }
        other => Err(type_error(path(), "a number", other.kind())),
    }
}

fn build_rhoai(
    root: Node<'_>,
    path: &str,
    fallback_time: Option<Timestamp>,
) -> Result<ProgressSample, NormalizeError> {
    let fields = match root {
        Node::Object(f) => f,
        other => return Err(type_error(path.to_owned(), "an object", other.kind())),
    };
    // Placeholder time: replaced below, or the function fails.
    let mut sample = ProgressSample::empty(Timestamp::UNIX_EPOCH, SampleSource::Annotation);
    let mut updated_at = None;
    let mut collector = Collector::with_capacity(8);
    for (key, value) in fields {
        match key.as_ref() {
            "lastUpdatedTime" => {
                updated_at = match value {
                    Node::Null => None,
                    Node::Str(s) => Some(
                        parse_time(&s).map_err(|m| NormalizeError::new(join(path, "lastUpdatedTime"), m))?,
                    ),
                    other => {
                        return Err(type_error(join(path, "lastUpdatedTime"), "a string", other.kind()));
                    }
                }
            }
            "progressPercentage" => {
                sample.progress_percent = node_number(&value, || join(path, &key), check_percent)?;
            }
            "estimatedRemainingSeconds" => {
                sample.eta_seconds = node_number(&value, || join(path, &key), check_eta)?;
            }
            "estimatedRemainingTimeSummary" => {
                sample.summary = match value {
                    Node::Null => None,
                    Node::Str(s) => Some(s.into_owned()),
                    other => return Err(type_error(join(path, &key), "a string", other.kind())),
                }
            }
            map @ ("trainMetrics" | "evalMetrics") => {
                let entries = match value {
                    Node::Null => continue,
                    Node::Object(entries) => entries,
                    other => return Err(type_error(join(path, map), "an object", other.kind())),
                };
                let eval = map == "evalMetrics";
                for (name, v) in entries {
                    let at = || format!("{}.{name}", join(path, map));
                    if name.is_empty() {
                        return Err(NormalizeError::new(at(), "empty metric name"));
                    }
                    let canonical = if eval { eval_name(&name) } else { plain_name(&name) };
                    let value = match v {
                        // The RHOAI controller writes NaN/±Inf as null; which one is lost.
                        Node::Null if is_progress_name(&canonical) => continue,
                        Node::Null => f64::NAN,
                        Node::Num(x) => x,
                        // Only what `quote_bare_nonfinite` produces (or an equivalent spelling).
                        Node::Str(s) => match parse_metric_value(&s) {
                            Some(x) if !x.is_finite() => x,
                            _ => return Err(type_error(at(), "a number or null", "a string")),
                        },
                        other => return Err(type_error(at(), "a number or null", other.kind())),
                    };
                    collector
                        .add(&mut sample, canonical, value)
                        .map_err(|m| NormalizeError::new(at(), format!("{m}, found {value}")))?;
                }
            }
            // Top-level counters (`currentStep`, `totalSteps`, `currentEpoch`, `totalEpochs`); other keys are
            // ignored so that new RHOAI fields do not break parsing.
            other => {
                let Some(canonical) = known(other) else {
                    continue;
                };
                let Some(field) = progress_field(&mut sample, canonical) else {
                    continue;
                };
                *field = node_number(
                    &value,
                    || join(path, other),
                    |x| {
                        if x >= 0.0 { Ok(x) } else { Err("a step or epoch count must be >= 0") }
                    },
                )?;
            }
        }
    }
    sample.updated_at = updated_at.or(fallback_time).ok_or_else(|| missing(join(path, "lastUpdatedTime")))?;
    sample.metrics = collector.finish();
    Ok(sample)
}

// ---------------------------------------------------------------------------------------------------------
// TrainJob
// ---------------------------------------------------------------------------------------------------------

/// Normalizes a whole TrainJob object as a watch delivers it (`trainer.kubeflow.org/v1alpha1`, `TrainJob`).
///
/// - key: `metadata.namespace` (absent or empty: `"default"`) and `metadata.name` (required);
/// - `annotations` leaves out [`TRAINER_STATUS_ANNOTATION`] (it is parsed into `sample` instead);
/// - phase: `Failed`, then `Complete`, if such a condition is `True`; else `Suspended` if `spec.suspend` or
///   condition `Suspended=True`; else `Running`;
/// - gpus: `spec.trainer.numNodes` (default 1) × the sum of `*/gpu` quantities in
///   `spec.trainer.resourcesPerNode.limits` (or `requests` when limits have none); `None` without any;
/// - running_since: `lastTransitionTime` of a `Suspended=False` condition (resumed), else `created_at`;
/// - sample: `status.trainerStatus` when present, else the annotation, else `None`.
///
/// `apiVersion` and `kind` may be absent (typed clients strip them) but must match when present. A malformed
/// progress report fails the whole snapshot.
pub fn from_trainjob(obj: &Value) -> Result<JobSnapshot, NormalizeError> {
    let root = match obj {
        Value::Object(o) => o,
        other => {
            return Err(type_error("$".to_owned(), "a TrainJob object", json_kind(other)));
        }
    };
    for (field, want) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        match opt_str(root.get(field), || field.to_owned())? {
            Some(got) if got != want => {
                return Err(NormalizeError::new(field, format!("expected {want:?}, found {}", Snippet(got))));
            }
            _ => {}
        }
    }

    let meta =
        opt_object(root.get("metadata"), "metadata")?.ok_or_else(|| missing("metadata.name".to_owned()))?;
    let name = match opt_str(meta.get("name"), || "metadata.name".to_owned())? {
        Some("") => return Err(NormalizeError::new("metadata.name", "empty name")),
        Some(n) => n,
        None => return Err(missing("metadata.name".to_owned())),
    };
    let namespace = match opt_str(meta.get("namespace"), || "metadata.namespace".to_owned())? {
        None | Some("") => "default",
        Some(ns) => ns,
    };
    let labels = string_map(meta.get("labels"), "metadata.labels", None)?;
    let annotations =
        string_map(meta.get("annotations"), "metadata.annotations", Some(TRAINER_STATUS_ANNOTATION))?;
    let created_at = opt_time(meta.get("creationTimestamp"), || "metadata.creationTimestamp".to_owned())?;

    let spec = opt_object(root.get("spec"), "spec")?;
    let status = opt_object(root.get("status"), "status")?;

    let suspend = match spec.map(|s| s.get("suspend")) {
        None | Some(None) | Some(Some(Value::Null)) => false,
        Some(Some(Value::Bool(b))) => *b,
        Some(Some(other)) => {
            return Err(type_error("spec.suspend".to_owned(), "a boolean", json_kind(other)));
        }
    };
    let conditions = Conditions::read(status)?;
    let phase = if conditions.failed {
        JobPhase::Failed
    } else if conditions.complete {
        JobPhase::Complete
    } else if suspend || conditions.suspended {
        JobPhase::Suspended
    } else {
        JobPhase::Running
    };
    let running_since = conditions.resumed_at.or(created_at);

    let gpus = gpus(spec)?;
    let kueue_queue = labels.get(KUEUE_QUEUE_LABEL).filter(|q| !q.is_empty()).cloned();

    let sample = match status.and_then(|s| s.get("trainerStatus")) {
        Some(ts) if !ts.is_null() => Some(from_trainer_status(ts, "status.trainerStatus")?),
        _ => match opt_str(meta.get("annotations").and_then(|a| a.get(TRAINER_STATUS_ANNOTATION)), || {
            ANNOTATION_PATH.to_owned()
        })? {
            Some(json) => Some(from_annotation(json, ANNOTATION_PATH)?),
            None => None,
        },
    };

    Ok(JobSnapshot {
        key: JobKey::new(namespace, name),
        labels,
        annotations,
        phase,
        gpus,
        kueue_queue,
        created_at,
        running_since,
        sample,
    })
}

/// `metadata.labels` / `metadata.annotations`, without `skip`.
fn string_map(
    v: Option<&Value>,
    path: &str,
    skip: Option<&str>,
) -> Result<BTreeMap<String, String>, NormalizeError> {
    let mut out = BTreeMap::new();
    let Some(map) = opt_object(v, path)? else {
        return Ok(out);
    };
    for (k, v) in map {
        if Some(k.as_str()) == skip {
            continue;
        }
        match v {
            Value::String(s) => {
                out.insert(k.clone(), s.clone());
            }
            other => {
                return Err(type_error(format!("{path}[{k:?}]"), "a string", json_kind(other)));
            }
        }
    }
    Ok(out)
}

/// What `status.conditions` says.
#[derive(Default)]
struct Conditions {
    complete: bool,
    failed: bool,
    suspended: bool,
    /// `lastTransitionTime` of `Suspended=False`.
    resumed_at: Option<Timestamp>,
}

impl Conditions {
    fn read(status: Option<&Map<String, Value>>) -> Result<Self, NormalizeError> {
        let mut out = Conditions::default();
        let list = match status.and_then(|s| s.get("conditions")) {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Array(list)) => list,
            Some(other) => {
                return Err(type_error("status.conditions".to_owned(), "an array", json_kind(other)));
            }
        };
        for (i, c) in list.iter().enumerate() {
            let at = |field: &str| format!("status.conditions[{i}]{field}");
            let c = match c {
                Value::Object(c) => c,
                other => return Err(type_error(at(""), "an object", json_kind(other))),
            };
            let ty = opt_str(c.get("type"), || at(".type"))?;
            let st = opt_str(c.get("status"), || at(".status"))?;
            match (ty, st) {
                (Some("Complete"), Some("True")) => out.complete = true,
                (Some("Failed"), Some("True")) => out.failed = true,
                (Some("Suspended"), Some("True")) => {
                    out.suspended = true;
                    out.resumed_at = None;
                }
                (Some("Suspended"), Some("False")) => {
                    out.suspended = false;
                    out.resumed_at = opt_time(c.get("lastTransitionTime"), || at(".lastTransitionTime"))?;
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// `numNodes` × accelerators per node, `None` when the spec names no `*/gpu` resource.
fn gpus(spec: Option<&Map<String, Value>>) -> Result<Option<f64>, NormalizeError> {
    let Some(trainer) = opt_object(spec.and_then(|s| s.get("trainer")), "spec.trainer")? else {
        return Ok(None);
    };
    let path = "spec.trainer.resourcesPerNode";
    let Some(resources) = opt_object(trainer.get("resourcesPerNode"), path)? else {
        return Ok(None);
    };
    let per_node = match gpu_sum(resources.get("limits"), "spec.trainer.resourcesPerNode.limits")? {
        Some(n) => n,
        None => match gpu_sum(resources.get("requests"), "spec.trainer.resourcesPerNode.requests")? {
            Some(n) => n,
            None => return Ok(None),
        },
    };
    let nodes = opt_number(
        trainer.get("numNodes"),
        || "spec.trainer.numNodes".to_owned(),
        |x| {
            if x >= 0.0 { Ok(x) } else { Err("numNodes must be >= 0") }
        },
    )?
    // The runtime may set numNodes; without it here one node is the best guess.
    .unwrap_or(1.0);
    Ok(Some(nodes * per_node))
}

/// Sum of the `*/gpu` quantities of a resource list; `None` when it has none.
fn gpu_sum(v: Option<&Value>, path: &str) -> Result<Option<f64>, NormalizeError> {
    let Some(list) = opt_object(v, path)? else {
        return Ok(None);
    };
    let mut sum = None;
    for (k, q) in list {
        if !k.ends_with("/gpu") {
            continue;
        }
        let at = || format!("{path}[{k:?}]");
        // Accelerator quantities are whole numbers; plain decimal strings ("1") and JSON numbers suffice.
        let n = match q {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            other => return Err(type_error(at(), "a quantity", json_kind(other))),
        };
        match n {
            Some(n) if n.is_finite() && n >= 0.0 => *sum.get_or_insert(0.0) += n,
            _ => {
                let shown = match q {
                    Value::String(s) => Snippet(s).to_string(),
                    other => other.to_string(),
                };
                return Err(NormalizeError::new(at(), format!("unsupported quantity {shown}")));
            }
        }
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    macro_rules! fixture {
        ($file:literal) => {
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/fixtures/kubeflow/payloads/",
                $file
            ))
        };
    }

    const KEP: &str = fixture!("upstream-status-request.kep-example.json");
    const HF_BEGIN: &str = fixture!("upstream-status-request.hf-callback-train-begin.json");
    const HF_STEP: &str = fixture!("upstream-status-request.hf-callback-step.json");
    const HF_END: &str = fixture!("upstream-status-request.hf-callback-train-end.json");
    const INVALID_PROGRESS: &str = fixture!("upstream-status-request.invalid-progress.json");
    const EMPTY: &str = fixture!("upstream-status-request.empty.json");
    const ANN_RUNNING: &str = fixture!("rhoai-trainerStatus-annotation.running.json");
    const ANN_COMPLETED: &str = fixture!("rhoai-trainerStatus-annotation.completed.json");
    const ANN_FAILED: &str = fixture!("rhoai-trainerStatus-annotation.failed.json");
    const ANN_NAN: &str = fixture!("rhoai-trainerStatus-annotation.nan-loss.json");
    const ENDPOINT: &str = fixture!("rhoai-metrics-endpoint.response.json");
    const ENDPOINT_PYNAN: &str = fixture!("rhoai-metrics-endpoint.response.nan-loss.pyjson.txt");
    const UPSTREAM_JOB_YAML: &str = fixture!("upstream-trainjob-with-trainerStatus.yaml");
    const RHOAI_JOB_YAML: &str = fixture!("rhoai-trainjob-annotated.yaml");

    const TS: &str = "status.trainerStatus";

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn upstream(request_body: &str) -> ProgressSample {
        let body: Value = serde_json::from_str(request_body).unwrap();
        from_trainer_status(&body["trainerStatus"], TS).unwrap()
    }

    fn upstream_err(trainer_status: Value) -> NormalizeError {
        from_trainer_status(&trainer_status, TS).unwrap_err()
    }

    fn metrics(s: &ProgressSample) -> Vec<(&str, f64)> {
        s.metrics.iter().map(|m| (m.name.as_ref(), m.value)).collect()
    }

    /// Sample invariants that every successful parse must satisfy.
    fn assert_sane(s: &ProgressSample) {
        if let Some(p) = s.progress_percent {
            assert!((0.0..=100.0).contains(&p), "{s:?}");
        }
        if let Some(e) = s.eta_seconds {
            assert!(e >= 0.0, "{s:?}");
        }
        for c in [s.current_step, s.total_steps, s.current_epoch, s.total_epochs].into_iter().flatten() {
            assert!(c.is_finite() && c >= 0.0, "{s:?}");
        }
        for (i, m) in s.metrics.iter().enumerate() {
            assert!(!m.name.is_empty(), "{s:?}");
            assert!(!is_progress_name(&m.name), "{s:?}");
            assert!(s.metrics[..i].iter().all(|o| o.name != m.name), "duplicate in {s:?}");
        }
    }

    // ----- upstream fixtures -------------------------------------------------------------------------

    #[test]
    fn interned_names_are_the_samples_own_and_aliases_stay_as_written() {
        let sample = upstream(
            r#"{"trainerStatus":{"metrics":[{"name":"loss","value":"1"}],"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#,
        );
        let (Cow::Borrowed(ours), Cow::Borrowed(theirs)) = (interned("loss"), &sample.metrics[0].name) else {
            panic!("canonical names are shared statics")
        };
        assert!(std::ptr::eq(ours, *theirs));
        assert!(
            crate::input::sample::same_name(ours, "loss") && !crate::input::sample::same_name(ours, "lost")
        );
        assert!(matches!(interned("lr"), Cow::Owned(n) if n == "lr"), "aliases are not resolved");
        assert!(matches!(interned("my_metric"), Cow::Owned(n) if n == "my_metric"));
    }

    #[test]
    fn kep_example() {
        let s = upstream(KEP);
        assert_eq!(s.source, SampleSource::TrainerStatus);
        assert_eq!(s.updated_at, ts("2025-01-23T10:30:45Z"));
        assert_eq!(s.progress_percent, Some(45.0));
        assert_eq!(s.eta_seconds, Some(795649.0));
        assert_eq!(metrics(&s), [("loss", 0.2347), ("eval_loss", 0.2451), ("accuracy", 0.9876)]);
        assert_eq!((s.current_epoch, s.total_epochs), (Some(2.0), Some(5.0)));
        assert_eq!((s.current_step, s.total_steps), (None, None));
        assert_eq!(s.summary, None);
        assert!(s.metrics.iter().all(|m| matches!(m.name, Cow::Borrowed(_))));
        assert_sane(&s);
    }

    #[test]
    fn hf_callback_train_begin() {
        let s = upstream(HF_BEGIN);
        assert_eq!(s.updated_at, ts("2026-03-20T13:40:02.004411Z"));
        assert_eq!(s.progress_percent, Some(0.0));
        assert_eq!(s.eta_seconds, None);
        assert_eq!(s.total_steps, Some(3000.0));
        assert!(s.metrics.is_empty());
    }

    #[test]
    fn hf_callback_step() {
        let s = upstream(HF_STEP);
        // Python isoformat: microseconds and "+00:00".
        assert_eq!(s.updated_at, ts("2026-03-20T14:02:11.532918Z"));
        assert_eq!(s.progress_percent, Some(37.0));
        assert_eq!(s.eta_seconds, Some(1284.0));
        assert_eq!(s.current_step, Some(1110.0));
        assert_eq!(s.total_steps, Some(3000.0));
        assert_eq!(s.current_epoch, Some(1.11));
        assert_eq!(s.total_epochs, None);
        assert_eq!(metrics(&s), [("loss", 1.8412), ("grad_norm", 2.7731), ("learning_rate", 3.1e-5)]);
        assert_sane(&s);
    }

    #[test]
    fn hf_callback_train_end() {
        let s = upstream(HF_END);
        assert_eq!(s.progress_percent, Some(100.0));
        assert_eq!(s.eta_seconds, Some(0.0));
        assert_eq!(s.current_epoch, Some(3.0));
        assert_eq!(
            metrics(&s),
            [
                ("loss", 1.2207),
                ("grad_norm", 1.9015),
                ("learning_rate", 1e-7),
                ("eval_loss", 1.3391),
                ("eval_accuracy", 0.6512),
                ("train_runtime", 3338.1),
                ("throughput_samples_per_second", 28.76),
                ("train_loss", 1.5123),
            ]
        );
        assert!(s.metrics.iter().all(|m| matches!(m.name, Cow::Borrowed(_))));
        assert_sane(&s);
    }

    #[test]
    fn invalid_progress_fixture_is_rejected_with_path() {
        let body: Value = serde_json::from_str(INVALID_PROGRESS).unwrap();
        let e = from_trainer_status(&body["trainerStatus"], TS).unwrap_err();
        assert_eq!(e.path, "status.trainerStatus.progressPercentage");
        assert!(e.message.contains("0..=100") && e.message.contains("150"), "{e}");
        assert_eq!(e.to_string(), format!("status.trainerStatus.progressPercentage: {}", e.message));
    }

    #[test]
    fn empty_request() {
        let body: Value = serde_json::from_str(EMPTY).unwrap();
        // The status server leaves the status alone: there is no trainerStatus to normalize.
        assert!(body.get("trainerStatus").is_none());
        // Fed as a trainerStatus anyway, the missing required timestamp is reported.
        let e = from_trainer_status(&body, "trainerStatus").unwrap_err();
        assert_eq!(e.path, "trainerStatus.lastUpdatedTime");
        assert_eq!(e.message, "missing (required)");
        // An empty path prefix gives bare field paths.
        assert_eq!(from_trainer_status(&body, "").unwrap_err().path, "lastUpdatedTime");
    }

    #[test]
    fn non_finite_value_strings_are_kept() {
        let cases = [
            ("nan", f64::NAN),
            ("NaN", f64::NAN),
            ("NAN", f64::NAN),
            ("inf", f64::INFINITY),
            ("+inf", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("INF", f64::INFINITY),
            ("Infinity", f64::INFINITY),
            ("-Infinity", f64::NEG_INFINITY),
            ("infinity", f64::INFINITY),
            ("+Infinity", f64::INFINITY),
            (" 0.5 ", 0.5),
            ("1e-07", 1e-7),
            ("42", 42.0),
        ];
        for (text, want) in cases {
            let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": [{"name": "loss", "value": text}]});
            let got = from_trainer_status(&v, TS).unwrap().metric("loss").unwrap();
            if want.is_nan() {
                assert!(got.is_nan(), "{text}");
            } else {
                assert_eq!(got, want, "{text}");
            }
        }
    }

    #[test]
    fn upstream_error_paths() {
        let t = "2026-01-01T00:00:00Z";
        let cases: Vec<(Value, &str, &str)> = vec![
            (json!([]), "status.trainerStatus", "expected an object, found an array"),
            (json!(null), "status.trainerStatus", "expected an object, found null"),
            (json!({}), "status.trainerStatus.lastUpdatedTime", "missing"),
            (json!({"lastUpdatedTime": 5}), "status.trainerStatus.lastUpdatedTime", "expected a string"),
            (
                json!({"lastUpdatedTime": "yesterday"}),
                "status.trainerStatus.lastUpdatedTime",
                "invalid RFC 3339",
            ),
            (
                json!({"lastUpdatedTime": "2026-01-01T00:00:00"}),
                "status.trainerStatus.lastUpdatedTime",
                "invalid RFC 3339",
            ),
            (
                json!({"lastUpdatedTime": t, "progressPercentage": "45"}),
                "status.trainerStatus.progressPercentage",
                "expected a number, found a string",
            ),
            (
                json!({"lastUpdatedTime": t, "progressPercentage": -1}),
                "status.trainerStatus.progressPercentage",
                "0..=100",
            ),
            (
                json!({"lastUpdatedTime": t, "progressPercentage": 100.5}),
                "status.trainerStatus.progressPercentage",
                "0..=100",
            ),
            (
                json!({"lastUpdatedTime": t, "estimatedRemainingSeconds": -5}),
                "status.trainerStatus.estimatedRemainingSeconds",
                ">= 0",
            ),
            (
                json!({"lastUpdatedTime": t, "estimatedRemainingSeconds": [1]}),
                "status.trainerStatus.estimatedRemainingSeconds",
                "found an array",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": {"loss": "1"}}),
                "status.trainerStatus.metrics",
                "expected an array",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "a", "value": "1"}, 7]}),
                "status.trainerStatus.metrics[1]",
                "expected an object",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"value": "1"}]}),
                "status.trainerStatus.metrics[0].name",
                "missing",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "", "value": "1"}]}),
                "status.trainerStatus.metrics[0].name",
                "empty metric name",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": 3, "value": "1"}]}),
                "status.trainerStatus.metrics[0].name",
                "expected a string, found a number",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "a", "value": "1"}, {"name": "b", "value": "1"}, {"name": "loss", "value": 0.5}]}),
                "status.trainerStatus.metrics[2].value",
                "expected a string, found a number",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "loss", "value": "abc"}]}),
                "status.trainerStatus.metrics[0].value",
                "not a number: \"abc\"",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "loss", "value": ""}]}),
                "status.trainerStatus.metrics[0].value",
                "not a number",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "loss", "value": "0x10"}]}),
                "status.trainerStatus.metrics[0].value",
                "not a number",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "loss"}]}),
                "status.trainerStatus.metrics[0].value",
                "missing",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "current_step", "value": "nan"}]}),
                "status.trainerStatus.metrics[0].value",
                "finite number >= 0",
            ),
            (
                json!({"lastUpdatedTime": t, "metrics": [{"name": "totalSteps", "value": "-3"}]}),
                "status.trainerStatus.metrics[0].value",
                "finite number >= 0",
            ),
        ];
        for (input, path, msg) in cases {
            let e = upstream_err(input.clone());
            assert_eq!(e.path, path, "{input}: {e}");
            assert!(e.message.contains(msg), "{input}: {e}");
        }
    }

    #[test]
    fn long_garbage_values_are_cut_in_messages() {
        let long = "x".repeat(10_000);
        let e = upstream_err(
            json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": [{"name": "loss", "value": long}]}),
        );
        assert!(e.message.len() < 120, "{e}");
        let multibyte = "é".repeat(100);
        let e = upstream_err(json!({"lastUpdatedTime": multibyte}));
        assert!(e.message.contains('…'), "{e}");
    }

    #[test]
    fn null_optional_fields_are_absent() {
        let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "progressPercentage": null,
                       "estimatedRemainingSeconds": null, "metrics": null, "unknownField": [1, 2]});
        let s = from_trainer_status(&v, TS).unwrap();
        assert_eq!(s, ProgressSample::empty(ts("2026-01-01T00:00:00Z"), SampleSource::TrainerStatus));
    }

    // ----- names --------------------------------------------------------------------------------------

    #[test]
    fn alias_table() {
        let cases = [
            ("current_step", "current_step"),
            ("currentStep", "current_step"),
            ("step", "current_step"),
            ("total_steps", "total_steps"),
            ("totalSteps", "total_steps"),
            ("max_steps", "total_steps"),
            ("current_epoch", "current_epoch"),
            ("currentEpoch", "current_epoch"),
            ("epoch", "current_epoch"),
            ("total_epochs", "total_epochs"),
            ("totalEpochs", "total_epochs"),
            ("num_train_epochs", "total_epochs"),
            ("lr", "learning_rate"),
            ("learning_rate", "learning_rate"),
            ("gradient_norm", "grad_norm"),
            ("grad_norm", "grad_norm"),
            ("throughput_samples_sec", "throughput_samples_per_second"),
            ("train_samples_per_second", "throughput_samples_per_second"),
            ("throughput_samples_per_second", "throughput_samples_per_second"),
            ("loss", "loss"),
            ("train_loss", "train_loss"),
            ("eval_loss", "eval_loss"),
            ("accuracy", "accuracy"),
            ("eval_accuracy", "eval_accuracy"),
            ("train_runtime", "train_runtime"),
            ("train_steps_per_second", "train_steps_per_second"),
            ("total_flos", "total_flos"),
            ("eval_runtime", "eval_runtime"),
            ("eval_samples_per_second", "eval_samples_per_second"),
            ("eval_steps_per_second", "eval_steps_per_second"),
            ("trainMetrics.loss", "loss"),
            ("trainMetrics.lr", "learning_rate"),
            ("trainMetrics.throughput_samples_sec", "throughput_samples_per_second"),
            ("trainMetrics.train_loss", "train_loss"),
            ("evalMetrics.eval_loss", "eval_loss"),
            ("evalMetrics.loss", "eval_loss"),
            ("evalMetrics.accuracy", "eval_accuracy"),
        ];
        for (raw, want) in cases {
            let got = canonical_metric_name(raw);
            assert_eq!(got, want, "{raw}");
            assert!(matches!(got, Cow::Borrowed(_)), "{raw} allocated");
        }
        let owned = [
            ("perplexity", "perplexity"),
            ("Loss", "Loss"),
            ("eval_f1", "eval_f1"),
            ("trainMetrics.perplexity", "perplexity"),
            ("evalMetrics.f1", "eval_f1"),
            ("evalMetrics.eval_f1", "eval_f1"),
            // A bare prefix is not a prefix.
            ("trainMetrics.", "trainMetrics."),
            ("evalMetrics.", "evalMetrics."),
            ("", ""),
        ];
        for (raw, want) in owned {
            let got = canonical_metric_name(raw);
            assert_eq!(got, want, "{raw}");
            assert!(matches!(got, Cow::Owned(_)), "{raw}");
        }
    }

    #[test]
    fn aliases_apply_inside_samples() {
        let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": [
            {"name": "lr", "value": "0.1"},
            {"name": "gradient_norm", "value": "2"},
            {"name": "throughput_samples_sec", "value": "9"},
            {"name": "step", "value": "10"},
            {"name": "max_steps", "value": "100"},
            {"name": "epoch", "value": "0.5"},
            {"name": "num_train_epochs", "value": "3"},
            {"name": "my_custom", "value": "-1"},
        ]});
        let s = from_trainer_status(&v, TS).unwrap();
        assert_eq!(
            metrics(&s),
            [
                ("learning_rate", 0.1),
                ("grad_norm", 2.0),
                ("throughput_samples_per_second", 9.0),
                ("my_custom", -1.0)
            ]
        );
        assert_eq!((s.current_step, s.total_steps), (Some(10.0), Some(100.0)));
        assert_eq!((s.current_epoch, s.total_epochs), (Some(0.5), Some(3.0)));
    }

    #[test]
    fn duplicates_last_value_wins_first_position_kept() {
        let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": [
            {"name": "loss", "value": "1"},
            {"name": "grad_norm", "value": "2"},
            {"name": "lr", "value": "3"},
            {"name": "learning_rate", "value": "4"},
            {"name": "loss", "value": "5"},
            {"name": "current_step", "value": "1"},
            {"name": "step", "value": "2"},
        ]});
        let s = from_trainer_status(&v, TS).unwrap();
        assert_eq!(metrics(&s), [("loss", 5.0), ("grad_norm", 2.0), ("learning_rate", 4.0)]);
        assert_eq!(s.current_step, Some(2.0));
    }

    #[test]
    fn duplicates_in_long_lists() {
        // Past LINEAR_DEDUP_MAX distinct names the collector switches to the sort-based merge.
        let mut items: Vec<Value> =
            (0..200).map(|i| json!({"name": format!("m{}", i % 70), "value": i.to_string()})).collect();
        items.insert(5, json!({"name": "loss", "value": "1"}));
        items.push(json!({"name": "loss", "value": "2"}));
        let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": items});
        let s = from_trainer_status(&v, TS).unwrap();
        assert_sane(&s);
        assert_eq!(s.metrics.len(), 71);
        assert_eq!(s.metrics[5].name, "loss");
        assert_eq!(s.metric("loss"), Some(2.0));
        // m0..m69 in first-seen order, each with its last value (i = k + 140 for k < 60, else k + 70).
        let m: Vec<_> = s.metrics.iter().filter(|m| m.name != "loss").collect();
        for (k, metric) in m.iter().enumerate() {
            assert_eq!(metric.name, format!("m{k}"));
            let last = if k < 60 { k + 140 } else { k + 70 };
            assert_eq!(metric.value, last as f64, "m{k}");
        }
    }

    // ----- RHOAI ----------------------------------------------------------------------------------------

    const AP: &str = ANNOTATION_PATH;

    #[test]
    fn annotation_running() {
        let s = from_annotation(ANN_RUNNING, AP).unwrap();
        assert_eq!(s.source, SampleSource::Annotation);
        assert_eq!(s.updated_at, ts("2026-04-10T12:00:30Z"));
        assert_eq!(s.progress_percent, Some(45.0));
        assert_eq!(s.eta_seconds, Some(795649.0));
        assert_eq!(s.summary.as_deref(), Some("9 days 5 hours"));
        assert_eq!((s.current_step, s.total_steps), (Some(340.0), Some(750.0)));
        assert_eq!((s.current_epoch, s.total_epochs), (Some(1.36), Some(3.0)));
        assert_eq!(
            metrics(&s),
            [
                ("grad_norm", 1.734),
                ("learning_rate", 0.000052),
                ("loss", 0.4523),
                ("eval_accuracy", 0.8123),
                ("eval_loss", 0.5011),
            ]
        );
        assert!(s.metrics.iter().all(|m| matches!(m.name, Cow::Borrowed(_))));
        assert_sane(&s);
    }

    #[test]
    fn annotation_completed() {
        let s = from_annotation(ANN_COMPLETED, AP).unwrap();
        assert_eq!(s.updated_at, ts("2026-04-10T15:12:03Z"));
        assert_eq!(s.summary.as_deref(), Some("complete"));
        assert_eq!((s.progress_percent, s.eta_seconds), (Some(100.0), Some(0.0)));
        assert_eq!((s.current_step, s.total_steps), (Some(750.0), Some(750.0)));
        assert_eq!((s.current_epoch, s.total_epochs), (Some(3.0), Some(3.0)));
        assert_eq!(
            metrics(&s),
            [
                ("grad_norm", 1.201),
                ("learning_rate", 1e-7),
                ("loss", 0.3011),
                ("train_loss", 0.3822),
                ("eval_accuracy", 0.8607),
                ("eval_loss", 0.4102),
            ]
        );
    }

    #[test]
    fn annotation_failed() {
        let s = from_annotation(ANN_FAILED, AP).unwrap();
        assert_eq!(s.updated_at, ts("2026-04-10T13:40:00Z"));
        assert_eq!(s.summary.as_deref(), Some("failed at 62%"));
        assert_eq!((s.progress_percent, s.eta_seconds), (Some(62.0), Some(3120.0)));
        assert_eq!((s.current_step, s.current_epoch), (Some(465.0), Some(1.86)));
        assert_eq!(metrics(&s), [("loss", 0.4311)]);
    }

    #[test]
    fn annotation_nan_loss_is_nan() {
        let s = from_annotation(ANN_NAN, AP).unwrap();
        assert_eq!(s.summary.as_deref(), Some("5 hours 41 minutes"));
        assert_eq!(s.progress_percent, Some(12.0));
        assert_eq!(s.current_step, Some(90.0));
        assert!(s.metric("loss").unwrap().is_nan());
        assert!(s.metric("grad_norm").unwrap().is_nan());
        assert_eq!(s.metric("learning_rate"), Some(0.000059));
        assert_eq!(s.metrics.len(), 3);
        assert_sane(&s);
    }

    #[test]
    fn metrics_endpoint_response() {
        let at = ts("2026-04-10T12:00:00Z");
        let s = from_metrics_response(ENDPOINT, "pod", at).unwrap();
        assert_eq!(s.updated_at, at);
        assert_eq!(s.source, SampleSource::Annotation);
        assert_eq!(s.summary, None);
        assert_eq!((s.progress_percent, s.eta_seconds), (Some(45.0), Some(9840.0)));
        assert_eq!(
            metrics(&s),
            [
                ("loss", 0.4523),
                ("learning_rate", 5.2e-5),
                ("grad_norm", 1.734),
                ("eval_loss", 0.5011),
                ("eval_accuracy", 0.8123),
            ]
        );
        // The annotation needs the controller's timestamp.
        let e = from_annotation(ENDPOINT, "pod").unwrap_err();
        assert_eq!((e.path.as_str(), e.message.as_str()), ("pod.lastUpdatedTime", "missing (required)"));
        // A body timestamp wins over the receive time.
        let s = from_metrics_response(ANN_RUNNING, "pod", at).unwrap();
        assert_eq!(s.updated_at, ts("2026-04-10T12:00:30Z"));
    }

    #[test]
    fn python_nan_tokens_are_accepted() {
        assert!(serde_json::from_str::<Value>(ENDPOINT_PYNAN).is_err(), "fixture is not JSON");
        let at = ts("2026-04-10T09:47:30Z");
        let s = from_metrics_response(ENDPOINT_PYNAN, "pod", at).unwrap();
        assert_eq!(s.updated_at, at);
        assert_eq!(s.progress_percent, Some(12.0));
        assert_eq!(s.eta_seconds, Some(20511.0));
        assert_eq!((s.current_step, s.total_steps), (Some(90.0), Some(750.0)));
        assert_eq!((s.current_epoch, s.total_epochs), (Some(0.36), Some(3.0)));
        assert_eq!(s.metrics.len(), 3);
        assert_eq!(s.metrics[0].name, "loss");
        assert!(s.metrics[0].value.is_nan());
        assert_eq!(metrics(&s)[1..], [("learning_rate", 5.9e-5), ("grad_norm", f64::INFINITY)]);
        // Through from_annotation the tokens parse too; only the timestamp is missing.
        let e = from_annotation(ENDPOINT_PYNAN, AP).unwrap_err();
        assert_eq!(e.path, format!("{AP}.lastUpdatedTime"));
        let with_time = ENDPOINT_PYNAN.replacen('{', "{\"lastUpdatedTime\": \"2026-04-10T09:47:30Z\", ", 1);
        let s2 = from_annotation(&with_time, AP).unwrap();
        assert_eq!(s2.metric("grad_norm"), Some(f64::INFINITY));
        let neg = with_time.replace("Infinity", "-Infinity");
        assert_eq!(from_annotation(&neg, AP).unwrap().metric("grad_norm"), Some(f64::NEG_INFINITY));
    }

    #[test]
    fn bare_tokens_inside_strings_are_left_alone() {
        let json = r#"{"lastUpdatedTime":"2026-04-10T09:47:30Z","estimatedRemainingTimeSummary":"NaN \"Infinity\" -Infinity\\","trainMetrics":{"loss":NaN,"NaN":Infinity}}"#;
        let s = from_annotation(json, AP).unwrap();
        assert_eq!(s.summary.as_deref(), Some(r#"NaN "Infinity" -Infinity\"#));
        assert!(s.metric("loss").unwrap().is_nan());
        assert_eq!(s.metric("NaN"), Some(f64::INFINITY));
        // Not a token: part of a longer word.
        let e = from_annotation(r#"{"trainMetrics":{"loss":NaNx}}"#, AP).unwrap_err();
        assert!(e.message.starts_with("invalid JSON at line 1 column 25"), "{e}");
    }

    #[test]
    fn invalid_json_positions_refer_to_the_callers_text() {
        // Same-length stand-ins for each token: the error must be reported at the same place.
        let bodies = [
            "{\"trainMetrics\": {\"loss\": NaN, \"x\": Infinity, \"y\": -Infinity,}}",
            "{\n  \"trainMetrics\": {\n    \"loss\": NaN,\n    \"g\": -Infinity\n  },\n  \"evalMetrics\": {\"e\": Infinity} oops\n}",
            "{\"trainMetrics\": {\"loss\": NaN \"x\": 1}}",
            "{\"trainMetrics\": {\"loss\": Infinity",
        ];
        for body in bodies {
            let plain =
                body.replace("-Infinity", "-12345678").replace("Infinity", "12345678").replace("NaN", "0.0");
            let want = from_annotation(&plain, AP).unwrap_err();
            let got = from_annotation(body, AP).unwrap_err();
            assert_eq!(got, want, "{body}");
            assert!(got.message.starts_with("invalid JSON at line "), "{got}");
        }
        // Errors on a quoted token itself map into the bare token.
        let e = from_annotation("{\"a\" NaN}", AP).unwrap_err();
        assert_eq!(e.message, from_annotation("{\"a\" 0.0}", AP).unwrap_err().message);
    }

    #[test]
    fn annotation_errors() {
        let t = r#""lastUpdatedTime":"2026-04-10T09:47:30Z""#;
        let cases: Vec<(String, String, &str)> = vec![
            ("".into(), AP.into(), "invalid JSON at line 1 column 0: EOF while parsing a value"),
            ("{\"progressPercentage\":45,}".into(), AP.into(), "invalid JSON at line 1 column 26"),
            ("{} trailing".into(), AP.into(), "invalid JSON at line 1 column 4: trailing characters"),
            ("[1,2]".into(), AP.into(), "expected an object, found an array"),
            ("\"str\"".into(), AP.into(), "expected an object, found a string"),
            (format!("{{{t},\"progressPercentage\":101}}"), format!("{AP}.progressPercentage"), "0..=100"),
            (
                format!("{{{t},\"progressPercentage\":\"45\"}}"),
                format!("{AP}.progressPercentage"),
                "expected a number",
            ),
            (
                format!("{{{t},\"progressPercentage\":NaN}}"),
                format!("{AP}.progressPercentage"),
                "expected a number, found a string",
            ),
            (
                format!("{{{t},\"estimatedRemainingSeconds\":-1}}"),
                format!("{AP}.estimatedRemainingSeconds"),
                ">= 0",
            ),
            (
                format!("{{{t},\"estimatedRemainingTimeSummary\":5}}"),
                format!("{AP}.estimatedRemainingTimeSummary"),
                "expected a string",
            ),
            (format!("{{{t},\"currentStep\":-2}}"), format!("{AP}.currentStep"), ">= 0"),
            (format!("{{{t},\"totalEpochs\":true}}"), format!("{AP}.totalEpochs"), "found a boolean"),
            (
                format!("{{{t},\"trainMetrics\":[1]}}"),
                format!("{AP}.trainMetrics"),
                "expected an object, found an array",
            ),
            (
                format!("{{{t},\"trainMetrics\":{{\"loss\":\"abc\"}}}}"),
                format!("{AP}.trainMetrics.loss"),
                "expected a number or null, found a string",
            ),
            (
                format!("{{{t},\"trainMetrics\":{{\"loss\":\"0.5\"}}}}"),
                format!("{AP}.trainMetrics.loss"),
                "found a string",
            ),
            (
                format!("{{{t},\"evalMetrics\":{{\"eval_loss\":{{}}}}}}"),
                format!("{AP}.evalMetrics.eval_loss"),
                "found an object",
            ),
            (
                format!("{{{t},\"trainMetrics\":{{\"\":1}}}}"),
                format!("{AP}.trainMetrics."),
                "empty metric name",
            ),
            (
                format!("{{{t},\"trainMetrics\":{{\"epoch\":-1}}}}"),
                format!("{AP}.trainMetrics.epoch"),
                "finite number >= 0",
            ),
            (
                "{\"lastUpdatedTime\":\"2026-13-01T00:00:00Z\"}".into(),
                format!("{AP}.lastUpdatedTime"),
                "invalid RFC 3339",
            ),
            ("{\"lastUpdatedTime\":1}".into(), format!("{AP}.lastUpdatedTime"), "expected a string"),
            ("{\"lastUpdatedTime\":null}".into(), format!("{AP}.lastUpdatedTime"), "missing"),
        ];
        for (input, path, msg) in cases {
            let e = from_annotation(&input, AP).unwrap_err();
            assert_eq!(e.path, path, "{input}: {e}");
            assert!(e.message.contains(msg), "{input}: {e}");
        }
    }

    #[test]
    fn annotation_leniency() {
        let json = r#"{"lastUpdatedTime":"2026-04-10T09:47:30Z","estimatedRemainingSeconds":null,
            "estimatedRemainingTimeSummary":null,"newField":{"x":[1,{"y":2}]},"trainMetrics":{"current_step":null,
            "lr":0.1,"throughput_samples_sec":12.5,"l\u006fss":2},"evalMetrics":{"loss":1,"eval_f1":0.5,"f1":0.25},"evalMetrics2":5}"#;
        let s = from_annotation(json, AP).unwrap();
        assert_eq!((s.eta_seconds, s.summary.clone(), s.current_step), (None, None, None));
        assert_eq!(
            metrics(&s),
            [
                ("learning_rate", 0.1),
                ("throughput_samples_per_second", 12.5),
                ("loss", 2.0),
                ("eval_loss", 1.0),
                ("eval_f1", 0.25)
            ]
        );
        assert_sane(&s);
    }

    // ----- TrainJob ---------------------------------------------------------------------------------------

    /// `upstream-trainjob-with-trainerStatus.yaml` as JSON.
    fn upstream_job() -> Value {
        assert!(
            UPSTREAM_JOB_YAML.contains("name: multi-node-example")
                && UPSTREAM_JOB_YAML.contains("numNodes: 3")
        );
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "multi-node-example",
                "namespace": "team-a",
                "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}
            },
            "spec": {
                "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
                "suspend": false,
                "managedBy": "trainer.kubeflow.org/trainjob-controller",
                "trainer": {
                    "numNodes": 3,
                    "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}},
                    "command": ["torchrun", "train.py"]
                }
            },
            "status": {
                "conditions": [{
                    "type": "Suspended", "status": "False", "reason": "Resumed",
                    "message": "TrainJob is resumed", "lastTransitionTime": "2025-01-23T09:00:00Z"
                }],
                "jobsStatus": [{"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}],
                "trainerStatus": {
                    "progressPercentage": 45,
                    "estimatedRemainingSeconds": 795649,
                    "metrics": [
                        {"name": "loss", "value": "0.2347"},
                        {"name": "eval_loss", "value": "0.2451"},
                        {"name": "accuracy", "value": "0.9876"},
                        {"name": "currentEpoch", "value": "2"},
                        {"name": "totalEpochs", "value": "5"}
                    ],
                    "lastUpdatedTime": "2025-01-23T10:30:45Z"
                }
            }
        })
    }

    /// The annotation value of `rhoai-trainjob-annotated.yaml`, taken from the fixture itself.
    fn rhoai_yaml_annotation() -> String {
        let line = RHOAI_JOB_YAML
            .lines()
            .find_map(|l| l.trim().strip_prefix("trainer.opendatahub.io/trainerStatus: '"))
            .unwrap();
        line.strip_suffix('\'').unwrap().replace("''", "'")
    }

    /// `rhoai-trainjob-annotated.yaml` as JSON.
    fn rhoai_job() -> Value {
        assert!(RHOAI_JOB_YAML.contains("name: sft-llama") && RHOAI_JOB_YAML.contains("numNodes: 2"));
        json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "sft-llama",
                "namespace": "team-a",
                "annotations": {
                    "trainer.opendatahub.io/progression-tracking": "true",
                    "trainer.opendatahub.io/metrics-port": "28080",
                    "trainer.opendatahub.io/metrics-poll-interval": "30",
                    "trainer.opendatahub.io/trainerStatus": rhoai_yaml_annotation()
                }
            },
            "spec": {
                "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
                "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}}
            },
            "status": {
                "conditions": [{
                    "type": "Suspended", "status": "False", "reason": "Resumed",
                    "message": "TrainJob is resumed", "lastTransitionTime": "2026-04-10T09:00:00Z"
                }]
            }
        })
    }

    #[test]
    fn upstream_trainjob_fixture() {
        let snap = from_trainjob(&upstream_job()).unwrap();
        assert_eq!(snap.key, JobKey::new("team-a", "multi-node-example"));
        assert_eq!(snap.labels.len(), 1);
        assert!(snap.annotations.is_empty());
        assert_eq!(snap.phase, JobPhase::Running);
        assert_eq!(snap.gpus, Some(3.0));
        assert_eq!(snap.kueue_queue.as_deref(), Some("user-queue"));
        assert_eq!(snap.created_at, None);
        assert_eq!(snap.running_since, Some(ts("2025-01-23T09:00:00Z")));
        // The status copy of the KEP sample normalizes exactly like the KEP request.
        assert_eq!(snap.sample, Some(upstream(KEP)));
    }

    #[test]
    fn rhoai_trainjob_fixture() {
        let snap = from_trainjob(&rhoai_job()).unwrap();
        assert_eq!(snap.key, JobKey::new("team-a", "sft-llama"));
        assert!(snap.labels.is_empty());
        assert_eq!(
            snap.annotations.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "trainer.opendatahub.io/metrics-poll-interval",
                "trainer.opendatahub.io/metrics-port",
                "trainer.opendatahub.io/progression-tracking",
            ]
        );
        assert_eq!(snap.phase, JobPhase::Running);
        assert_eq!(snap.gpus, Some(2.0));
        assert_eq!(snap.kueue_queue, None);
        assert_eq!(snap.running_since, Some(ts("2026-04-10T09:00:00Z")));
        let sample = snap.sample.unwrap();
        assert_eq!(sample.source, SampleSource::Annotation);
        assert_eq!(sample, from_annotation(ANN_RUNNING, AP).unwrap());
    }

    #[test]
    fn trainer_status_is_preferred_over_the_annotation() {
        let mut job = upstream_job();
        job["metadata"]["annotations"] = json!({TRAINER_STATUS_ANNOTATION: rhoai_yaml_annotation()});
        let snap = from_trainjob(&job).unwrap();
        assert_eq!(snap.sample.unwrap().source, SampleSource::TrainerStatus);
        assert!(snap.annotations.is_empty());
        // A null trainerStatus falls back to the annotation; neither gives no sample.
        job["status"]["trainerStatus"] = Value::Null;
        assert_eq!(from_trainjob(&job).unwrap().sample.unwrap().source, SampleSource::Annotation);
        job["metadata"]["annotations"] = json!({});
        assert_eq!(from_trainjob(&job).unwrap().sample, None);
    }

    #[test]
    fn phases() {
        let cond = |ty: &str, st: &str| json!({"type": ty, "status": st, "lastTransitionTime": "2026-01-02T00:00:00Z"});
        let cases = [
            (false, vec![], JobPhase::Running),
            (true, vec![], JobPhase::Suspended),
            (false, vec![cond("Suspended", "True")], JobPhase::Suspended),
            (false, vec![cond("Suspended", "False")], JobPhase::Running),
            (false, vec![cond("Suspended", "False"), cond("Complete", "True")], JobPhase::Complete),
            (true, vec![cond("Complete", "True")], JobPhase::Complete),
            (false, vec![cond("Failed", "True")], JobPhase::Failed),
            (false, vec![cond("Complete", "True"), cond("Failed", "True")], JobPhase::Failed),
            (false, vec![cond("Complete", "False"), cond("Failed", "Unknown")], JobPhase::Running),
        ];
        for (suspend, conditions, want) in cases {
            let job = json!({"metadata": {"name": "j"}, "spec": {"suspend": suspend}, "status": {"conditions": conditions}});
            assert_eq!(from_trainjob(&job).unwrap().phase, want, "{job}");
        }
    }

    #[test]
    fn running_since() {
        let created = "2026-01-01T00:00:00Z";
        let job = |conds: Value| json!({"metadata": {"name": "j", "creationTimestamp": created}, "status": {"conditions": conds}});
        let snap = from_trainjob(&job(json!([]))).unwrap();
        assert_eq!((snap.created_at, snap.running_since), (Some(ts(created)), Some(ts(created))));
        let resumed =
            json!([{"type": "Suspended", "status": "False", "lastTransitionTime": "2026-01-03T00:00:00Z"}]);
        assert_eq!(from_trainjob(&job(resumed)).unwrap().running_since, Some(ts("2026-01-03T00:00:00Z")));
        let suspended =
            json!([{"type": "Suspended", "status": "True", "lastTransitionTime": "2026-01-03T00:00:00Z"}]);
        assert_eq!(from_trainjob(&job(suspended)).unwrap().running_since, Some(ts(created)));
        let no_time = json!([{"type": "Suspended", "status": "False"}]);
        assert_eq!(from_trainjob(&job(no_time)).unwrap().running_since, Some(ts(created)));
        let no_created = json!({"metadata": {"name": "j"}});
        assert_eq!(from_trainjob(&no_created).unwrap().running_since, None);
    }

    #[test]
    fn gpus() {
        let job = |trainer: Value| json!({"metadata": {"name": "j"}, "spec": {"trainer": trainer}});
        let gpus = |trainer: Value| from_trainjob(&job(trainer)).unwrap().gpus;
        assert_eq!(
            gpus(json!({"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})),
            Some(8.0)
        );
        assert_eq!(gpus(json!({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}})), Some(8.0));
        assert_eq!(
            gpus(
                json!({"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1", "amd.com/gpu": "2", "cpu": "4"}}})
            ),
            Some(6.0)
        );
        assert_eq!(
            gpus(json!({"numNodes": 2, "resourcesPerNode": {"requests": {"amd.com/gpu": "4"}}})),
            Some(8.0)
        );
        assert_eq!(
            gpus(
                json!({"numNodes": 2, "resourcesPerNode": {"limits": {"cpu": "4"}, "requests": {"nvidia.com/gpu": "1"}}})
            ),
            Some(2.0)
        );
        assert_eq!(
            gpus(json!({"numNodes": 2, "resourcesPerNode": {"limits": {"cpu": "4", "memory": "8Gi"}}})),
            None
        );
        assert_eq!(gpus(json!({"numNodes": 2})), None);
        assert_eq!(
            gpus(json!({"numNodes": 0, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}})),
            Some(0.0)
        );
        assert_eq!(from_trainjob(&json!({"metadata": {"name": "j"}})).unwrap().gpus, None);
    }

    #[test]
    fn trainjob_defaults_and_kueue() {
        let job =
            json!({"metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "q", "team": "a"}}});
        let snap = from_trainjob(&job).unwrap();
        assert_eq!(snap.key, JobKey::new("default", "j"));
        assert_eq!(snap.kueue_queue.as_deref(), Some("q"));
        assert_eq!(snap.labels.get("team").map(String::as_str), Some("a"));
        let mut expected = JobSnapshot::new(JobKey::new("default", "j"));
        expected.labels = snap.labels.clone();
        expected.kueue_queue = Some("q".into());
        assert_eq!(snap, expected);
        let empty_ns = json!({"metadata": {"name": "j", "namespace": ""}});
        assert_eq!(from_trainjob(&empty_ns).unwrap().key.namespace, "default");
    }

    #[test]
    fn trainjob_error_paths() {
        let ann =
            |v: Value| json!({"metadata": {"name": "j", "annotations": {TRAINER_STATUS_ANNOTATION: v}}});
        let cases: Vec<(Value, String, &str)> = vec![
            (json!([]), "$".into(), "expected a TrainJob object"),
            (json!({"kind": "JobSet", "metadata": {"name": "j"}}), "kind".into(), "expected \"TrainJob\""),
            (json!({"kind": 1, "metadata": {"name": "j"}}), "kind".into(), "expected a string"),
            (
                json!({"apiVersion": "trainer.kubeflow.org/v2", "metadata": {"name": "j"}}),
                "apiVersion".into(),
                "trainer.kubeflow.org/v1alpha1",
            ),
            (json!({}), "metadata.name".into(), "missing"),
            (json!({"metadata": {}}), "metadata.name".into(), "missing"),
            (json!({"metadata": {"name": ""}}), "metadata.name".into(), "empty"),
            (json!({"metadata": {"name": 7}}), "metadata.name".into(), "expected a string"),
            (json!({"metadata": []}), "metadata".into(), "expected an object"),
            (
                json!({"metadata": {"name": "j", "namespace": 1}}),
                "metadata.namespace".into(),
                "expected a string",
            ),
            (
                json!({"metadata": {"name": "j", "labels": {"a": 1}}}),
                "metadata.labels[\"a\"]".into(),
                "expected a string",
            ),
            (
                json!({"metadata": {"name": "j", "labels": "a=b"}}),
                "metadata.labels".into(),
                "expected an object",
            ),
            (
                json!({"metadata": {"name": "j", "creationTimestamp": "today"}}),
                "metadata.creationTimestamp".into(),
                "invalid RFC 3339",
            ),
            (
                json!({"metadata": {"name": "j"}, "spec": {"suspend": "yes"}}),
                "spec.suspend".into(),
                "expected a boolean",
            ),
            (json!({"metadata": {"name": "j"}, "spec": 3}), "spec".into(), "expected an object"),
            (
                json!({"metadata": {"name": "j"}, "status": {"conditions": {}}}),
                "status.conditions".into(),
                "expected an array",
            ),
            (
                json!({"metadata": {"name": "j"}, "status": {"conditions": [null]}}),
                "status.conditions[0]".into(),
                "expected an object",
            ),
            (
                json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": 1}]}}),
                "status.conditions[0].type".into(),
                "expected a string",
            ),
            (
                json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Suspended", "status": "False", "lastTransitionTime": "x"}]}}),
                "status.conditions[0].lastTransitionTime".into(),
                "invalid RFC 3339",
            ),
            (
                json!({"metadata": {"name": "j"}, "spec": {"trainer": []}}),
                "spec.trainer".into(),
                "expected an object",
            ),
            (
                json!({"metadata": {"name": "j"}, "spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "1k8"}}}}}),
                "spec.trainer.resourcesPerNode.limits[\"nvidia.com/gpu\"]".into(),
                "unsupported quantity \"1k8\"",
            ),
            (
                json!({"metadata": {"name": "j"}, "spec": {"trainer": {"resourcesPerNode": {"requests": {"amd.com/gpu": true}}}}}),
                "spec.trainer.resourcesPerNode.requests[\"amd.com/gpu\"]".into(),
                "expected a quantity",
            ),
            (
                json!({"metadata": {"name": "j"}, "spec": {"trainer": {"numNodes": -1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}}),
                "spec.trainer.numNodes".into(),
                ">= 0",
            ),
            (
                json!({"metadata": {"name": "j"}, "status": {"trainerStatus": {"progressPercentage": 1}}}),
                "status.trainerStatus.lastUpdatedTime".into(),
                "missing",
            ),
            (
                json!({"metadata": {"name": "j"}, "status": {"trainerStatus": "x"}}),
                "status.trainerStatus".into(),
                "expected an object",
            ),
            (
                ann(json!(5)),
                format!("metadata.annotations[{:?}]", TRAINER_STATUS_ANNOTATION),
                "expected a string",
            ),
            (ann(json!("{not json")), ANNOTATION_PATH.into(), "invalid JSON at line 1 column 2"),
            (
                ann(json!(r#"{"lastUpdatedTime":"2026-04-10T09:47:30Z","trainMetrics":{"loss":"x"}}"#)),
                r#"metadata.annotations["trainer.opendatahub.io/trainerStatus"].trainMetrics.loss"#.into(),
                "expected a number or null",
            ),
        ];
        for (input, path, msg) in cases {
            let e = from_trainjob(&input).unwrap_err();
            assert_eq!(e.path, path, "{input}: {e}");
            assert!(e.message.contains(msg), "{input}: {e}");
        }
    }

    // ----- garbage ------------------------------------------------------------------------------------------

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn pick<T: Copy>(&mut self, items: &[T]) -> T {
            items[self.below(items.len())]
        }
    }

    const KEYS: &[&str] = &[
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "namespace",
        "labels",
        "annotations",
        "creationTimestamp",
        "spec",
        "suspend",
        "trainer",
        "numNodes",
        "resourcesPerNode",
        "limits",
        "requests",
        "nvidia.com/gpu",
        "amd.com/gpu",
        "status",
        "conditions",
        "type",
        "lastTransitionTime",
        "trainerStatus",
        "metrics",
        "value",
        "progressPercentage",
        "estimatedRemainingSeconds",
        "lastUpdatedTime",
        "trainMetrics",
        "evalMetrics",
        "currentStep",
        "totalSteps",
        "currentEpoch",
        "epoch",
        "loss",
        "lr",
        "",
        "kueue.x-k8s.io/queue-name",
        TRAINER_STATUS_ANNOTATION,
        "estimatedRemainingTimeSummary",
    ];
    const STRINGS: &[&str] = &[
        "",
        "nan",
        "-inf",
        "Infinity",
        "1e309",
        "-0",
        "0.5",
        "abc",
        "True",
        "2026-03-20T14:02:11Z",
        "2026-03-20T14:02:11.532918+00:00",
        "9999-99-99T99:99:99Z",
        "not a time",
        "TrainJob",
        "Suspended",
        "False",
        "Complete",
        "Failed",
        "trainer.kubeflow.org/v1alpha1",
        "{",
        "{\"lastUpdatedTime\":\"2026-03-20T14:02:11Z\"}",
        "{\"trainMetrics\":{\"loss\":NaN}}",
        "💥é",
        "1k",
        "100",
        "-1",
    ];

    fn garbage(rng: &mut Rng, depth: usize) -> Value {
        match rng.below(if depth >= 4 { 6 } else { 9 }) {
            0 => Value::Null,
            1 => Value::Bool(rng.below(2) == 1),
            2 => json!(rng.pick(&[0i64, 1, -1, 100, 101, i64::MIN, i64::MAX])),
            3 => json!(rng.pick(&[0.5f64, -0.0, 1e308, -1e-300, 99.999, f64::MAX])),
            4 => json!(u64::MAX - rng.below(3) as u64),
            5 => Value::String(rng.pick(STRINGS).to_owned()),
            6 => (0..rng.below(5)).map(|_| garbage(rng, depth + 1)).collect(),
            7 => Value::Object(
                (0..rng.below(6)).map(|_| (rng.pick(KEYS).to_owned(), garbage(rng, depth + 1))).collect(),
            ),
            _ => json!({"name": rng.pick(KEYS), "value": rng.pick(STRINGS)}),
        }
    }

    /// Replaces one random subtree of `v` with garbage.
    fn mutate(v: &mut Value, rng: &mut Rng) {
        if rng.below(5) == 0 {
            *v = garbage(rng, 0);
            return;
        }
        match v {
            Value::Object(m) if !m.is_empty() => {
                let key = m.keys().nth(rng.below(m.len())).cloned().unwrap_or_default();
                if let Some(child) = m.get_mut(&key) {
                    mutate(child, rng);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                let i = rng.below(a.len());
                mutate(&mut a[i], rng);
            }
            _ => *v = garbage(rng, 0),
        }
    }

    /// Mangles JSON text: inserted tokens, deleted chars, truncation.
    fn mangle(text: &str, rng: &mut Rng) -> String {
        const BITS: &[&str] = &[
            "NaN",
            "-Infinity",
            "Infinity",
            "\"",
            "\\",
            "{",
            "}",
            "[",
            ",",
            ":",
            "null",
            "1e999",
            "\n",
            "-",
            "é",
        ];
        let mut s = text.to_owned();
        for _ in 0..1 + rng.below(3) {
            let mut at = rng.below(s.len() + 1);
            while !s.is_char_boundary(at) {
                at -= 1;
            }
            match rng.below(3) {
                0 => {
                    let bit: &str = rng.pick(BITS);
                    s.insert_str(at, bit)
                }
                1 if at < s.len() => {
                    s.remove(at);
                }
                _ => s.truncate(at),
            }
        }
        s
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let bases = [upstream_job(), rhoai_job()];
        let status_bases: Vec<Value> = [KEP, HF_STEP, HF_END]
            .iter()
            .map(|t| serde_json::from_str::<Value>(t).unwrap()["trainerStatus"].clone())
            .collect();
        let text_bases = [ANN_RUNNING, ANN_COMPLETED, ANN_NAN, ENDPOINT_PYNAN, ENDPOINT];
        let (mut ok, mut err) = (0, 0);
        let mut tally = |r: Result<ProgressSample, NormalizeError>, prefix: &str| match r {
            Ok(s) => {
                assert_sane(&s);
                ok += 1;
            }
            Err(e) => {
                assert!(e.path.starts_with(prefix), "{e}");
                err += 1;
            }
        };
        for _ in 0..3000 {
            let g = garbage(&mut rng, 0);
            tally(from_trainer_status(&g, "p"), "p");
            let _ = from_trainjob(&g);

            let mut status = status_bases[rng.below(status_bases.len())].clone();
            for _ in 0..1 + rng.below(3) {
                mutate(&mut status, &mut rng);
            }
            tally(from_trainer_status(&status, "p"), "p");

            let mut job = bases[rng.below(bases.len())].clone();
            for _ in 0..1 + rng.below(3) {
                mutate(&mut job, &mut rng);
            }
            match from_trainjob(&job) {
                Ok(snap) => {
                    if let Some(s) = &snap.sample {
                        assert_sane(s);
                    }
                    assert!(!snap.annotations.contains_key(TRAINER_STATUS_ANNOTATION));
                }
                Err(e) => assert!(!e.path.is_empty(), "{e}"),
            }

            let text = if rng.below(2) == 0 {
                {
                    let base: &str = rng.pick(&text_bases);
                    mangle(base, &mut rng)
                }
            } else {
                mangle(&garbage(&mut rng, 0).to_string(), &mut rng)
            };
            tally(from_annotation(&text, "a"), "a");
            tally(from_metrics_response(&text, "a", Timestamp::UNIX_EPOCH), "a");
            let _ = canonical_metric_name(&text);
        }
        // Deep nesting is refused by serde_json's recursion limit, not by a stack overflow.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(from_annotation(&deep, "a").is_err());
        let deep_obj = format!("{{\"trainMetrics\":{}1{}}}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
        assert!(from_annotation(&deep_obj, "a").is_err());
        assert!(ok > 100 && err > 100, "ok {ok}, err {err}");
    }
}
