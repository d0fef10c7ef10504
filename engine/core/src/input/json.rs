//! Reading JSON fields with their paths: the type, range and time checks every format shares.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

use serde_json::{Map, Value};

use crate::time::Timestamp;

use super::NormalizeError;

pub(super) fn join(base: &str, field: &str) -> String {
    if base.is_empty() { field.to_owned() } else { format!("{base}.{field}") }
}

/// A string shown in an error message, cut to a readable length (inputs can be 64 KiB of garbage).
pub(super) struct Snippet<'a>(pub(super) &'a str);

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

pub(super) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn type_error(path: String, expected: &str, found: &str) -> NormalizeError {
    NormalizeError::new(path, format!("expected {expected}, found {found}"))
}

pub(super) fn missing(path: String) -> NormalizeError {
    NormalizeError::new(path, "missing (required)")
}

pub(super) fn parse_time(s: &str) -> Result<Timestamp, String> {
    crate::time::parse_timestamp(s).map_err(|e| format!("invalid RFC 3339 timestamp {}: {e}", Snippet(s)))
}

/// Parses a metric value string. Rust's float grammar already accepts `nan`, `inf`, `infinity` in any
/// case with an optional sign, which covers Python's `str(float)` and the JavaScript spellings.
pub(super) fn parse_metric_value(s: &str) -> Option<f64> {
    if let Some(v) = plain_decimal(s.as_bytes()) {
        return Some(v);
    }
    let t = s.trim();
    if t.is_empty() {
        return None;
    }
    t.parse::<f64>().ok()
}

/// Powers of ten a double holds exactly.
const EXACT_POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18,
    1e19, 1e20, 1e21, 1e22,
];

/// Most metric values (`0.2347`, `-1.5`, `3.1e-05`, `1200`) in a few nanoseconds: `-?digits(.digits)?` with an
/// optional `e[+-]?digits` (at most 4 exponent digits), at most 15 digits in all (leading zeros count), and
/// a power of ten within 10^±22. Then the digits and the power of ten are both exact doubles and one IEEE
/// multiplication or division rounds correctly (Clinger's fast path), so the value is bit for bit what
/// `str::parse::<f64>` returns. `None` hands anything else (signs `+`, `nan`, `inf`, whitespace, more
/// digits) to the general parser.
pub(super) fn plain_decimal(b: &[u8]) -> Option<f64> {
    // x87 arithmetic (32-bit x86 without SSE2) rounds twice; the standard library turns its own fast path
    // off there too.
    if cfg!(all(target_arch = "x86", not(target_feature = "sse2"))) {
        return None;
    }
    let (negative, rest) = match b {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, b),
    };
    const MAX_DIGITS: usize = 15;
    let mut digits: u64 = 0;
    let mut count = 0usize;
    let mut i = 0;
    // Reads a run of digits into `digits`: how many, or `None` past MAX_DIGITS in all.
    let mut run = |i: &mut usize| -> Option<usize> {
        let start = *i;
        while let Some(&c @ b'0'..=b'9') = rest.get(*i) {
            digits = digits * 10 + u64::from(c - b'0');
            count += 1;
            *i += 1;
            if count > MAX_DIGITS {
                return None;
            }
        }
        Some(*i - start)
    };
    if run(&mut i)? == 0 {
        return None;
    }
    let mut scale: i32 = 0;
    if rest.get(i) == Some(&b'.') {
        i += 1;
        match run(&mut i)? {
            0 => return None,
            // At most 15 digits, so this fits.
            fraction => scale = -(fraction as i32),
        }
    }
    if let Some(b'e' | b'E') = rest.get(i) {
        i += 1;
        let exponent_negative = match rest.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        let mut exponent: i32 = 0;
        while let Some(&c @ b'0'..=b'9') = rest.get(i) {
            if i - start >= 4 {
                return None;
            }
            exponent = exponent * 10 + i32::from(c - b'0');
            i += 1;
        }
        if i == start {
            return None;
        }
        scale += if exponent_negative { -exponent } else { exponent };
    }
    // 15 digits stay below 2^53, so `digits` converts exactly.
    if i != rest.len() || !(-22..=22).contains(&scale) {
        return None;
    }
    let magnitude = digits as f64;
    let pow = EXACT_POW10[scale.unsigned_abs() as usize];
    let value = if scale >= 0 { magnitude * pow } else { magnitude / pow };
    Some(if negative { -value } else { value })
}

pub(super) fn check_percent(v: f64) -> Result<f64, &'static str> {
    if (0.0..=100.0).contains(&v) { Ok(v) } else { Err("progress must be within 0..=100") }
}

pub(super) fn check_eta(v: f64) -> Result<f64, &'static str> {
    if v >= 0.0 { Ok(v) } else { Err("estimated remaining seconds must be >= 0") }
}

/// An optional JSON number (`null` counts as absent).
pub(super) fn opt_number(
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

pub(super) fn opt_object<'v>(
    v: Option<&'v Value>,
    path: &str,
) -> Result<Option<&'v Map<String, Value>>, NormalizeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(other) => Err(type_error(path.to_owned(), "an object", json_kind(other))),
    }
}

pub(super) fn opt_str(
    v: Option<&Value>,
    path: impl FnOnce() -> String,
) -> Result<Option<&str>, NormalizeError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(type_error(path(), "a string", json_kind(other))),
    }
}

pub(super) fn opt_time(
    v: Option<&Value>,
    path: impl Fn() -> String,
) -> Result<Option<Timestamp>, NormalizeError> {
    match opt_str(v, &path)? {
        None => Ok(None),
        Some(s) => parse_time(s).map(Some).map_err(|m| NormalizeError::new(path(), m)),
    }
}

/// What a reader does with a key its format does not define: a recorded stream rejects it ([`Unknown::Reject`]),
/// a live TrainJob is read without it and the key is reported ([`Unknown::Collect`]). Either way it is never
/// silently dropped: a misspelt key (`trainMetricz`) would otherwise make a rule that watches it never fire.
pub(super) enum Unknown<'a> {
    /// The first unknown key fails the read.
    Reject,
    /// Unknown keys are collected (path and message) and the read goes on without them.
    Collect(&'a mut Vec<NormalizeError>),
}

impl Unknown<'_> {
    /// Handles the unknown key at `path` of an object whose keys are `expected`.
    pub(super) fn field(&mut self, path: String, expected: &[&str]) -> Result<(), NormalizeError> {
        let e = NormalizeError::new(path, format!("unknown field; expected one of {}", expected.join(", ")));
        match self {
            Unknown::Reject => Err(e),
            Unknown::Collect(found) => {
                found.push(e);
                Ok(())
            }
        }
    }
}

/// A struct with a derived reader, read only from a JSON object. serde_json also fills a derived struct from
/// an array, one element per field, which none of these formats allows: the `Value` readers refuse it, so
/// the fast readers must too.
pub(super) struct MapOnly<T>(pub(super) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = MapOnly<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<MapOnly<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(MapOnly)
            }
        }
        d.deserialize_map(ObjectVisitor(PhantomData))
    }
}

/// A key given twice in one JSON object, and where: JSON readers keep the last value and drop the first in
/// silence, so a stream line that says two things is refused rather than guessed at. Not looked for inside
/// `managedFields` (the API server's bookkeeping, which nothing reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DuplicateKey {
    /// The key's path, e.g. `trainerStatus.metrics[0].value` or `labels.team`.
    pub path: String,
}

impl DuplicateKey {
    /// The message for a stream line: the path, what is wrong, why it is refused.
    pub(crate) fn message(&self) -> String {
        format!(
            "{}: the key is given twice in one object (JSON keeps only the last; which one was meant?)",
            self.path
        )
    }
}

/// The first key given twice in one object of `text` (any depth), or `None` when every object's keys are
/// distinct or `text` is not JSON at all (the caller's parse then says what is wrong).
pub(crate) fn duplicate_key(text: &str) -> Option<DuplicateKey> {
    let mut d = serde_json::Deserializer::from_str(text);
    match distinct_keys(&mut d) {
        Ok(Some(path)) => Some(DuplicateKey { path }),
        Ok(None) | Err(_) => None,
    }
}

/// Reads one JSON value from `d` as a `Value` parse checks it (numbers' range, strings, nesting), keeping
/// nothing: `Ok(Some(path))` names the first key given twice in one object.
pub(crate) fn distinct_keys<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    de::DeserializeSeed::deserialize(Distinct, d)
}

/// Visits any JSON value; its value is the path of the first key seen twice in one object (built on the way
/// out, so a line without one allocates nothing for paths), the rest of the value being read all the same.
struct Distinct;

impl<'de> de::DeserializeSeed<'de> for Distinct {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Distinct {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Option<String>, E> {
        Ok(None)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Option<String>, A::Error> {
        let mut found = None;
        let mut i = 0;
        while let Some(inner) = seq.next_element_seed(Distinct)? {
            if found.is_none() {
                found =
                    inner.map(|p| format!("[{i}]{}", if p.starts_with('[') { p } else { format!(".{p}") }));
            }
            i += 1;
        }
        Ok(found)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
        // Most objects have a few keys without escapes: those are compared where they lie in the line, without
        // allocating (serde's own `Cow<str>` would copy every key).
        let mut inline: [&'de str; DISTINCT_INLINE] = [""; DISTINCT_INLINE];
        let mut n = 0;
        let mut spilled: Vec<String> = Vec::new();
        let mut found: Option<String> = None;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let text: &str = &key;
            let seen = inline[..n].contains(&text) || spilled.iter().any(|k| k == text);
            if seen && found.is_none() {
                found = Some(text.to_string());
            }
            // The API server's field bookkeeping is most of a TrainJob and nothing reads it: checked as JSON,
            // its keys are not compared (the general path leaves them alike).
            if text == "managedFields" {
                map.next_value::<AnyJson>()?;
                push_key(key, &mut inline, &mut n, &mut spilled);
                continue;
            }
            let inner = map.next_value_seed(Distinct)?;
            if found.is_none() {
                found = inner
                    .map(|p| if p.starts_with('[') { format!("{text}{p}") } else { format!("{text}.{p}") });
            }
            push_key(key, &mut inline, &mut n, &mut spilled);
        }
        Ok(found)
    }
}

/// Keeps a key of an object for the comparisons with the keys after it (in place while there is room).
fn push_key<'de>(
    key: std::borrow::Cow<'de, str>,
    inline: &mut [&'de str; DISTINCT_INLINE],
    n: &mut usize,
    spilled: &mut Vec<String>,
) {
    match key {
        std::borrow::Cow::Borrowed(k) if *n < DISTINCT_INLINE => {
            inline[*n] = k;
            *n += 1;
        }
        other => spilled.push(other.into_owned()),
    }
}

/// Keys of one object compared where they lie before any is copied.
const DISTINCT_INLINE: usize = 16;

/// Any JSON value, read with every check a `Value` parse makes (numbers' range, strings, nesting) and dropped;
/// serde's `IgnoredAny` skips more leniently.
struct AnyJson;

impl<'de> Deserialize<'de> for AnyJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyJsonVisitor)
    }
}

struct AnyJsonVisitor;

impl<'de> Visitor<'de> for AnyJsonVisitor {
    type Value = AnyJson;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }
    fn visit_i64<E>(self, _: i64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }
    fn visit_u64<E>(self, _: u64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }
    fn visit_f64<E>(self, _: f64) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }
    fn visit_str<E>(self, _: &str) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }
    fn visit_unit<E>(self) -> Result<AnyJson, E> {
        Ok(AnyJson)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<AnyJson, A::Error> {
        while seq.next_element::<AnyJson>()?.is_some() {}
        Ok(AnyJson)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyJson, A::Error> {
        while map.next_entry::<AnyJson, AnyJson>()?.is_some() {}
        Ok(AnyJson)
    }
}

/// An object key, borrowed from the input when it has no escapes (serde's own `Cow<str>` always copies).
pub(super) struct Key<'a>(pub(super) std::borrow::Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod duplicate_key_tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_found_at_any_depth_with_its_path() {
        assert_eq!(duplicate_key(r#"{"a":1,"b":{"c":[{"d":1}]}}"#), None);
        assert_eq!(duplicate_key(r#"{"a":1,"a":2}"#).unwrap().path, "a");
        assert_eq!(duplicate_key(r#"{"b":{"c":[{},{"d":1,"d":1}]}}"#).unwrap().path, "b.c[1].d");
        assert_eq!(duplicate_key(r#"{"l":{"team":"a","te\u0061m":"b"}}"#).unwrap().path, "l.team", "escapes");
        assert_eq!(duplicate_key("{not json"), None, "the caller's parse says what is wrong");
    }
}
