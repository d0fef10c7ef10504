//! The RHOAI 3.4 format: the `trainer.opendatahub.io/trainerStatus` annotation and a training pod's
//! `GET :28080/metrics` body (a `null` metric is NaN; bare `NaN`/`Infinity` tokens are accepted).
//!
//! The top-level keys are those of the RHOAI controller's `AnnotationStatus` (`pkg/rhai/progression/
//! progression.go`, rhoai-3.4): `RHOAI_FIELDS`. The counters are also accepted under their aliases
//! (`current_step`, `step`, ...). Any other top-level key is an unknown field (see `json::Unknown`); the keys
//! inside `trainMetrics` and `evalMetrics` are metric names, so none of them is unknown.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::input::sample::{ProgressSample, SampleSource};

use crate::time::Timestamp;

use super::NormalizeError;
use super::json::{
    Key, Unknown, check_eta, check_percent, join, missing, parse_metric_value, parse_time, type_error,
};
use super::names::{Collector, Known, eval_name, plain_name};

/// The RHOAI annotation holding the progress JSON.
pub const TRAINER_STATUS_ANNOTATION: &str = "trainer.opendatahub.io/trainerStatus";

/// The top-level keys of RHOAI's `AnnotationStatus`, in its order.
pub(super) const RHOAI_FIELDS: [&str; 10] = [
    "progressPercentage",
    "estimatedRemainingSeconds",
    "estimatedRemainingTimeSummary",
    "currentStep",
    "totalSteps",
    "currentEpoch",
    "totalEpochs",
    "trainMetrics",
    "evalMetrics",
    "lastUpdatedTime",
];

/// Normalizes the RHOAI `trainer.opendatahub.io/trainerStatus` annotation value. `path` prefixes error
/// paths. `lastUpdatedTime` is required (the RHOAI controller always sets it). A top-level key
/// `AnnotationStatus` does not define is an error (`annotation.metric: unknown field; expected one of …`).
pub fn from_annotation(json: &str, path: &str) -> Result<ProgressSample, NormalizeError> {
    parse_rhoai(json, path, None, &mut Unknown::Reject)
}

/// [`from_annotation`], reading on without unknown keys; they are added to `unknown`.
pub(super) fn from_annotation_collecting(
    json: &str,
    path: &str,
    unknown: &mut Vec<NormalizeError>,
) -> Result<ProgressSample, NormalizeError> {
    parse_rhoai(json, path, None, &mut Unknown::Collect(unknown))
}

/// Normalizes a RHOAI training pod's `GET :28080/metrics` body (same shape as the annotation, possibly with
/// bare `NaN`/`Infinity`, and without `lastUpdatedTime`). `received_at` is used when the body has no
/// `lastUpdatedTime`. The sample's source is [`SampleSource::Annotation`] (the RHOAI format). Unknown
/// top-level keys are errors, as in [`from_annotation`].
pub fn from_metrics_response(
    json: &str,
    path: &str,
    received_at: Timestamp,
) -> Result<ProgressSample, NormalizeError> {
    parse_rhoai(json, path, Some(received_at), &mut Unknown::Reject)
}

pub(super) fn parse_rhoai(
    json: &str,
    path: &str,
    fallback_time: Option<Timestamp>,
    unknown: &mut Unknown<'_>,
) -> Result<ProgressSample, NormalizeError> {
    // Plain JSON first: the annotation is already sanitized by the RHOAI controller, so the fast path never
    // scans or copies the text.
    let first_err = match serde_json::from_str::<Node>(json) {
        Ok(root) => return build_rhoai(root, path, fallback_time, unknown),
        Err(e) => e,
    };
    let Some(quoted) = quote_bare_nonfinite(json) else {
        return Err(json_error(path, &first_err, None));
    };
    match serde_json::from_str::<Node>(&quoted.text) {
        Ok(root) => build_rhoai(root, path, fallback_time, unknown),
        Err(e) => Err(json_error(path, &e, Some((json, &quoted)))),
    }
}

/// An invalid-JSON error at `path`, with serde_json's line and column (mapped back to the caller's text when
/// the error came from the re-quoted copy).
pub(super) fn json_error(
    path: &str,
    e: &serde_json::Error,
    requoted: Option<(&str, &Requoted)>,
) -> NormalizeError {
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
pub(super) struct Requoted {
    text: String,
    tokens: Vec<(usize, usize)>,
}

impl Requoted {
    /// Maps a 1-based serde_json (line, byte column) in `self.text` to the column in `original`. Quoting never
    /// adds a newline, so lines agree; each quoted token before the position shifted it by 2 bytes.
    pub(super) fn original_column(&self, original: &str, line: usize, col: usize) -> usize {
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
pub(super) fn quote_bare_nonfinite(text: &str) -> Option<Requoted> {
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
pub(super) enum Node<'a> {
    Null,
    Bool,
    Num(f64),
    Str(Cow<'a, str>),
    Array,
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl Node<'_> {
    pub(super) fn kind(&self) -> &'static str {
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

pub(super) struct NodeVisitor;

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

pub(super) fn node_number(
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

pub(super) fn build_rhoai(
    root: Node<'_>,
    path: &str,
    fallback_time: Option<Timestamp>,
    unknown: &mut Unknown<'_>,
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
                        Node::Null if canonical.is_progress() => continue,
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
            // Top-level counters (`currentStep`, `totalSteps`, `currentEpoch`, `totalEpochs`, or an alias);
            // any other key is unknown: ignoring it silently would hide a misspelt key.
            other => {
                let Some(field) = Known::of(other).and_then(|known| known.progress_field(&mut sample)) else {
                    unknown.field(join(path, other), &RHOAI_FIELDS)?;
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
