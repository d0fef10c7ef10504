//! Durations and sample-or-time thresholds as written in policies.
//!
//! * [`PolicyDuration`] is a non-negative duration in the notation of Prometheus and
//!   Alertmanager: one or more `<integer><unit>` groups with the units `w`
//!   (7 days), `d` (24 hours), `h`, `m`, `s` and `ms`, from the largest unit to
//!   the smallest, each unit at most once: `"30s"`, `"1h30m"`, `"1w2d"`,
//!   `"500ms"`. A day is always 24 hours and a week 7 days: these are absolute
//!   lengths of time, not calendar days, so a `"1d"` window that crosses a
//!   daylight saving change still lasts 24 real hours. Fractions (`"1.5h"`),
//!   signs and spaces are rejected. It serializes as its canonical string
//!   (`"90m"` becomes `"1h30m"`).
//! * [`Warmup`] is either a number of samples (`10` or `"10"`) or a percentage
//!   of training progress (`"10%"`).
//! * [`Window`] is either a number of samples (`10` or `"10"`) or a
//!   [`PolicyDuration`] (`"2h"`).
//!
//! [`Warmup`] and [`Window`] accept a JSON/YAML integer or a string and have
//! a Kubernetes `x-kubernetes-int-or-string` schema.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A regular expression (valid in both RE2 and ECMA-262) that matches exactly
/// the strings [`PolicyDuration::from_str`] accepts, apart from values too large to
/// represent, when it is combined with a minimum length of 1: units appear
/// from the largest to the smallest, each at most once.
pub const DURATION_PATTERN: &str = "^([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$";

/// The units a [`PolicyDuration`] may use, from the largest to the smallest, with
/// their length in milliseconds.
const UNITS: [(&str, u64); 6] = [
    ("w", 7 * 24 * 60 * 60 * 1000),
    ("d", 24 * 60 * 60 * 1000),
    ("h", 60 * 60 * 1000),
    ("m", 60 * 1000),
    ("s", 1000),
    ("ms", 1),
];

/// The unit list quoted in error messages.
const UNIT_LIST: &str = "w, d, h, m, s, ms";

/// A non-negative duration written like Prometheus/Alertmanager: `"30s"`,
/// `"15m"`, `"2h"`, `"1h30m"`, `"1d"`, `"1w"`, `"500ms"`.
///
/// Millisecond precision; at most [`PolicyDuration::MAX`]. Serialized as its
/// canonical string (see [`fmt::Display`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyDuration {
    millis: u64,
}

impl PolicyDuration {
    /// The zero duration, written `"0s"`.
    pub const ZERO: PolicyDuration = PolicyDuration { millis: 0 };

    /// The largest duration: `i64::MAX` milliseconds (about 292 million
    /// years), so that every duration converts to a [`jiff::SignedDuration`].
    pub const MAX: PolicyDuration = PolicyDuration { millis: i64::MAX as u64 };

    /// A duration of `secs` seconds, saturating at [`PolicyDuration::MAX`].
    pub const fn from_secs(secs: u64) -> PolicyDuration {
        PolicyDuration::from_millis(secs.saturating_mul(1000))
    }

    /// A duration of `millis` milliseconds, saturating at [`PolicyDuration::MAX`].
    pub const fn from_millis(millis: u64) -> PolicyDuration {
        if millis > PolicyDuration::MAX.millis { PolicyDuration::MAX } else { PolicyDuration { millis } }
    }

    /// The length in whole milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.millis
    }

    /// The length in seconds, as a float.
    pub fn as_secs_f64(self) -> f64 {
        self.millis as f64 / 1000.0
    }

    /// Whether this is the zero duration.
    pub const fn is_zero(self) -> bool {
        self.millis == 0
    }

    /// The same length as an absolute [`jiff::SignedDuration`], for
    /// arithmetic on [`jiff::Timestamp`]s. Never fails: [`PolicyDuration::MAX`]
    /// fits.
    pub const fn to_signed_duration(self) -> jiff::SignedDuration {
        // Cannot truncate: `millis <= i64::MAX` is an invariant.
        jiff::SignedDuration::from_millis(self.millis as i64)
    }

    /// The same length as a [`std::time::Duration`].
    pub const fn to_std(self) -> std::time::Duration {
        std::time::Duration::from_millis(self.millis)
    }
}

impl From<PolicyDuration> for jiff::SignedDuration {
    fn from(d: PolicyDuration) -> Self {
        d.to_signed_duration()
    }
}

impl From<PolicyDuration> for std::time::Duration {
    fn from(d: PolicyDuration) -> Self {
        d.to_std()
    }
}

/// Why a duration string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string was empty.
    #[error("duration is empty: expected a duration such as \"30s\", \"15m\" or \"1h30m\"")]
    Empty,
    /// The string started with a minus sign.
    #[error("invalid duration {input:?}: durations cannot be negative")]
    Negative {
        /// The rejected string.
        input: String,
    },
    /// A number was followed by something that is not a unit.
    #[error("invalid duration {input:?}: unknown unit {unit:?} (valid units: {UNIT_LIST})")]
    UnknownUnit {
        /// The rejected string.
        input: String,
        /// The unrecognised unit.
        unit: String,
    },
    /// A number was not followed by a unit.
    #[error("invalid duration {input:?}: the number {number:?} has no unit (valid units: {UNIT_LIST})")]
    MissingUnit {
        /// The rejected string.
        input: String,
        /// The number without a unit.
        number: String,
    },
    /// A unit was not preceded by a number.
    #[error("invalid duration {input:?}: expected a number before {unit:?}")]
    MissingNumber {
        /// The rejected string.
        input: String,
        /// The unit (or letters) without a number.
        unit: String,
    },
    /// A character that is neither a digit nor a unit letter.
    #[error(
        "invalid duration {input:?}: unexpected character {ch:?}{hint}",
        hint = if *ch == '.' {
            "; fractions are not supported, use a smaller unit (e.g. \"1h30m\" instead of \"1.5h\")"
        } else {
            ""
        }
    )]
    InvalidCharacter {
        /// The rejected string.
        input: String,
        /// The unexpected character.
        ch: char,
    },
    /// Units were not written from the largest to the smallest, or a unit was
    /// repeated.
    #[error(
        "invalid duration {input:?}: unit {unit:?} cannot follow {previous:?}; \
         write units from the largest to the smallest, each at most once ({UNIT_LIST})"
    )]
    UnitsOutOfOrder {
        /// The rejected string.
        input: String,
        /// The unit in the wrong place.
        unit: String,
        /// The unit before it.
        previous: String,
    },
    /// The value exceeds [`PolicyDuration::MAX`].
    #[error("invalid duration {input:?}: too large")]
    Overflow {
        /// The rejected string.
        input: String,
    },
}

impl FromStr for PolicyDuration {
    type Err = DurationError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        if input.is_empty() {
            return Err(DurationError::Empty);
        }
        if input.starts_with('-') {
            return Err(DurationError::Negative { input: input.to_owned() });
        }
        let overflow = || DurationError::Overflow { input: input.to_owned() };
        let bytes = input.as_bytes();
        let mut pos = 0;
        let mut total: u64 = 0;
        // Index into UNITS of the previous group's unit.
        let mut previous: Option<usize> = None;
        while pos < bytes.len() {
            let digits_start = pos;
            while pos < bytes.len() && bytes[pos].is_ascii_digit() {
                pos += 1;
            }
            let number = &input[digits_start..pos];
            let unit_start = pos;
            while pos < bytes.len() && bytes[pos].is_ascii_alphabetic() {
                pos += 1;
            }
            let unit = &input[unit_start..pos];
            if number.is_empty() && unit.is_empty() {
                // Neither a digit nor a letter: report the character itself.
                let ch = input[pos..].chars().next().unwrap_or_default();
                return Err(DurationError::InvalidCharacter { input: input.to_owned(), ch });
            }
            if number.is_empty() {
                return Err(DurationError::MissingNumber { input: input.to_owned(), unit: unit.to_owned() });
            }
            if unit.is_empty() {
                if pos < bytes.len() {
                    let ch = input[pos..].chars().next().unwrap_or_default();
                    return Err(DurationError::InvalidCharacter { input: input.to_owned(), ch });
                }
                return Err(DurationError::MissingUnit {
                    input: input.to_owned(),
                    number: number.to_owned(),
                });
            }
            let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
                return Err(DurationError::UnknownUnit { input: input.to_owned(), unit: unit.to_owned() });
            };
            if let Some(prev) = previous
                && index <= prev
            {
                return Err(DurationError::UnitsOutOfOrder {
                    input: input.to_owned(),
                    unit: unit.to_owned(),
                    previous: UNITS[prev].0.to_owned(),
                });
            }
            previous = Some(index);
            // Only ASCII digits, so the only possible failure is overflow.
            let value: u64 = number.parse().map_err(|_| overflow())?;
            total = value
                .checked_mul(UNITS[index].1)
                .and_then(|ms| total.checked_add(ms))
                .filter(|ms| *ms <= PolicyDuration::MAX.millis)
                .ok_or_else(overflow)?;
        }
        Ok(PolicyDuration { millis: total })
    }
}

impl fmt::Display for PolicyDuration {
    /// The canonical form: each non-zero unit from the largest to the
    /// smallest (`"1h30m"`, `"1w1d"`, `"1s500ms"`), or `"0s"` for zero.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.millis == 0 {
            return f.write_str("0s");
        }
        let mut rest = self.millis;
        for (name, len) in UNITS {
            let n = rest / len;
            if n > 0 {
                write!(f, "{n}{name}")?;
                rest %= len;
            }
        }
        Ok(())
    }
}

impl Serialize for PolicyDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PolicyDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = PolicyDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"30s\", \"15m\" or \"1h30m\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PolicyDuration, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(DurationVisitor)
    }
}

impl JsonSchema for PolicyDuration {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn schema_id() -> Cow<'static, str> {
        concat!(module_path!(), "::Duration").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "minLength": 1,
            "pattern": DURATION_PATTERN,
            "description": "A duration such as \"30s\", \"15m\", \"2h\", \"1h30m\", \"1d\", \"1w\" or \
                \"500ms\": whole numbers with the units w, d, h, m, s, ms, from the largest unit \
                to the smallest, each at most once. A day is 24 hours."
        })
    }
}

/// The schema shared by [`Warmup`] and [`Window`]: a Kubernetes
/// int-or-string (no `type`, no `pattern`, as structural schemas require).
fn int_or_string_schema(description: &str) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "description": description,
    })
}

/// Whether `s` is a non-empty run of ASCII digits.
fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The integer value of a float holding a non-negative whole number that an
/// `f64` represents exactly, as YAML/JSON readers may hand `10.0` as a float.
fn whole_f64(v: f64) -> Option<u64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    (v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= EXACT).then_some(v as u64)
}

/// How long to wait before a policy starts judging a run: a number of
/// samples or a percentage of training progress.
///
/// Written `10` or `"10"` (samples) or `"10%"` / `"12.5%"` (percent of
/// progress, 0 to 100). Serialized back as `10` or `"10%"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Warmup {
    /// A number of samples.
    Samples(u64),
    /// A percentage of training progress, from 0.0 to 100.0 (`10.0` means
    /// 10%).
    ProgressPercent(f64),
}

/// Why a warmup value was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WarmupError {
    /// The value was empty.
    #[error(
        "warmup is empty: expected a number of samples (e.g. 10) or a percent of progress (e.g. \"10%\")"
    )]
    Empty,
    /// The value was negative.
    #[error("invalid warmup {input:?}: cannot be negative")]
    Negative {
        /// The rejected value.
        input: String,
    },
    /// A percentage above 100.
    #[error("invalid warmup {input:?}: a percent of progress cannot exceed 100%")]
    OverHundredPercent {
        /// The rejected value.
        input: String,
    },
    /// A sample count that is not a whole number.
    #[error(
        "invalid warmup {input:?}: a number of samples must be a whole number; \
         for a percent of progress add \"%\" (e.g. \"10%\")"
    )]
    FractionalSamples {
        /// The rejected value.
        input: String,
    },
    /// Anything else.
    #[error(
        "invalid warmup {input:?}: expected a number of samples (e.g. 10) or a percent of progress (e.g. \"10%\")"
    )]
    Invalid {
        /// The rejected value.
        input: String,
    },
}

impl FromStr for Warmup {
    type Err = WarmupError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let owned = || input.to_owned();
        if input.is_empty() {
            return Err(WarmupError::Empty);
        }
        if input.starts_with('-') {
            return Err(WarmupError::Negative { input: owned() });
        }
        if let Some(number) = input.strip_suffix('%') {
            // Digits with at most one decimal point: no signs, exponents,
            // `inf` or `nan`, which `f64::from_str` would accept.
            let (int, frac) = number.split_once('.').unwrap_or((number, ""));
            let valid = (is_digits(int) || (int.is_empty() && is_digits(frac)))
                && (frac.is_empty() || is_digits(frac))
                && !number.ends_with('.');
            if !valid {
                return Err(WarmupError::Invalid { input: owned() });
            }
            let percent: f64 = number.parse().map_err(|_| WarmupError::Invalid { input: owned() })?;
            if percent > 100.0 {
                return Err(WarmupError::OverHundredPercent { input: owned() });
            }
            return Ok(Warmup::ProgressPercent(percent));
        }
        if is_digits(input) {
            return input.parse().map(Warmup::Samples).map_err(|_| WarmupError::Invalid { input: owned() });
        }
        if let Some((int, frac)) = input.split_once('.')
            && is_digits(int)
            && is_digits(frac)
        {
            return Err(WarmupError::FractionalSamples { input: owned() });
        }
        Err(WarmupError::Invalid { input: owned() })
    }
}

impl fmt::Display for Warmup {
    /// `10` for samples, `10%` for a percentage.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warmup::Samples(n) => write!(f, "{n}"),
            Warmup::ProgressPercent(p) => write!(f, "{p}%"),
        }
    }
}

impl Serialize for Warmup {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Warmup::Samples(n) => serializer.serialize_u64(*n),
            Warmup::ProgressPercent(_) => serializer.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Warmup {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WarmupVisitor;
        impl Visitor<'_> for WarmupVisitor {
            type Value = Warmup;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of samples (e.g. 10) or a percent of progress (e.g. \"10%\")")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Warmup, E> {
                Ok(Warmup::Samples(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Warmup, E> {
                u64::try_from(v)
                    .map(Warmup::Samples)
                    .map_err(|_| E::custom(WarmupError::Negative { input: v.to_string() }))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Warmup, E> {
                if let Some(n) = whole_f64(v) {
                    return Ok(Warmup::Samples(n));
                }
                let input = v.to_string();
                Err(E::custom(if v < 0.0 {
                    WarmupError::Negative { input }
                } else if v.is_finite() {
                    WarmupError::FractionalSamples { input }
                } else {
                    WarmupError::Invalid { input }
                }))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Warmup, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(WarmupVisitor)
    }
}

impl JsonSchema for Warmup {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Warmup".into()
    }

    fn schema_id() -> Cow<'static, str> {
        concat!(module_path!(), "::Warmup").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        int_or_string_schema(
            "Either a number of samples (an integer such as 10, or the string \"10\") or a \
             percent of training progress from 0% to 100% (a string such as \"10%\" or \"12.5%\").",
        )
    }
}

/// A span of recent history: a number of samples or a length of time (used
/// e.g. for patience).
///
/// Written `10` or `"10"` (samples) or a [`PolicyDuration`] string such as `"2h"`.
/// Serialized back as `10` or `"2h"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Window {
    /// A number of samples.
    Samples(u64),
    /// A length of time.
    Time(PolicyDuration),
}

/// Why a sample-count-or-duration value was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WindowError {
    /// The value was negative.
    #[error("invalid window {input:?}: cannot be negative")]
    Negative {
        /// The rejected value.
        input: String,
    },
    /// A sample count too large for a `u64`.
    #[error("invalid window {input:?}: number of samples is too large")]
    TooManySamples {
        /// The rejected value.
        input: String,
    },
    /// Neither a whole number nor a valid duration.
    #[error("expected a number of samples (e.g. 10) or a duration (e.g. \"2h\"), but {source}")]
    Invalid {
        /// Why it is not a duration.
        #[source]
        source: DurationError,
    },
}

impl FromStr for Window {
    type Err = WindowError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        if input.starts_with('-') {
            return Err(WindowError::Negative { input: input.to_owned() });
        }
        if is_digits(input) {
            return input
                .parse()
                .map(Window::Samples)
                .map_err(|_| WindowError::TooManySamples { input: input.to_owned() });
        }
        input.parse().map(Window::Time).map_err(|source| WindowError::Invalid { source })
    }
}

impl fmt::Display for Window {
    /// `10` for samples, the duration string (e.g. `2h`) for time.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Window::Samples(n) => write!(f, "{n}"),
            Window::Time(d) => write!(f, "{d}"),
        }
    }
}

impl Serialize for Window {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Window::Samples(n) => serializer.serialize_u64(*n),
            Window::Time(d) => d.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Window {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WindowVisitor;
        impl Visitor<'_> for WindowVisitor {
            type Value = Window;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of samples (e.g. 10) or a duration (e.g. \"2h\")")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Window, E> {
                Ok(Window::Samples(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Window, E> {
                u64::try_from(v)
                    .map(Window::Samples)
                    .map_err(|_| E::custom(WindowError::Negative { input: v.to_string() }))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Window, E> {
                if let Some(n) = whole_f64(v) {
                    return Ok(Window::Samples(n));
                }
                if v < 0.0 {
                    return Err(E::custom(WindowError::Negative { input: v.to_string() }));
                }
                Err(E::custom(format_args!(
                    "invalid window {v}: a number of samples must be a whole number; \
                     for a length of time write a duration such as \"90s\""
                )))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Window, E> {
                v.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(WindowVisitor)
    }
}

impl JsonSchema for Window {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Window".into()
    }

    fn schema_id() -> Cow<'static, str> {
        concat!(module_path!(), "::Window").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        int_or_string_schema(
            "Either a number of samples (an integer such as 10, or the string \"10\") or a \
             duration such as \"30m\", \"2h\" or \"1h30m\" (units w, d, h, m, s, ms).",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d(s: &str) -> PolicyDuration {
        s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn err(s: &str) -> String {
        s.parse::<PolicyDuration>().unwrap_err().to_string()
    }

    #[test]
    fn parses_single_units() {
        assert_eq!(d("500ms").as_millis(), 500);
        assert_eq!(d("30s").as_millis(), 30_000);
        assert_eq!(d("15m").as_millis(), 900_000);
        assert_eq!(d("2h").as_millis(), 7_200_000);
        assert_eq!(d("1d").as_millis(), 86_400_000);
        assert_eq!(d("1w").as_millis(), 604_800_000);
        assert_eq!(d("0s"), PolicyDuration::ZERO);
        assert_eq!(d("0ms"), PolicyDuration::ZERO);
        assert_eq!(d("007s").as_millis(), 7_000);
    }

    #[test]
    fn parses_compound_durations() {
        assert_eq!(d("1h30m"), PolicyDuration::from_secs(5400));
        assert_eq!(d("1w2d3h4m5s6ms").as_millis(), ((((9 * 24 + 3) * 60 + 4) * 60 + 5) * 1000) + 6);
        assert_eq!(d("1m500ms").as_millis(), 60_500);
        assert_eq!(d("62h"), PolicyDuration::from_secs(62 * 3600));
        // Non-normalised groups are fine as long as the units are ordered.
        assert_eq!(d("90m"), d("1h30m"));
        assert_eq!(d("1h90m"), d("2h30m"));
    }

    #[test]
    fn display_is_canonical_and_round_trips() {
        for (input, canonical) in [
            ("0s", "0s"),
            ("0ms", "0s"),
            ("0h0m", "0s"),
            ("90m", "1h30m"),
            ("1h30m", "1h30m"),
            ("36h", "1d12h"),
            ("8d", "1w1d"),
            ("1500ms", "1s500ms"),
            ("62h", "2d14h"),
            ("120s", "2m"),
        ] {
            let parsed = d(input);
            assert_eq!(parsed.to_string(), canonical, "{input}");
            assert_eq!(d(canonical), parsed, "{input}");
        }
        assert_eq!(PolicyDuration::MAX.to_string().parse::<PolicyDuration>(), Ok(PolicyDuration::MAX));
    }

    #[test]
    fn conversions() {
        let x = d("1m30s500ms");
        assert_eq!(x.as_secs_f64(), 90.5);
        assert_eq!(x.to_signed_duration(), jiff::SignedDuration::from_millis(90_500));
        assert_eq!(jiff::SignedDuration::from(x), jiff::SignedDuration::from_millis(90_500));
        assert_eq!(x.to_std(), std::time::Duration::from_millis(90_500));
        assert_eq!(PolicyDuration::from_secs(90), d("90s"));
        assert_eq!(PolicyDuration::from_millis(u64::MAX), PolicyDuration::MAX);
        assert_eq!(PolicyDuration::from_secs(u64::MAX), PolicyDuration::MAX);
        assert_eq!(PolicyDuration::MAX.to_signed_duration(), jiff::SignedDuration::from_millis(i64::MAX));
        assert!(PolicyDuration::ZERO.is_zero());
        assert!(!x.is_zero());
        assert!(d("59m") < d("1h"));
        let ts: jiff::Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(ts.checked_add(d("1d").to_signed_duration()).unwrap().to_string(), "2025-01-02T00:00:00Z");
    }

    #[test]
    fn error_messages() {
        assert_eq!(err(""), "duration is empty: expected a duration such as \"30s\", \"15m\" or \"1h30m\"");
        assert_eq!(err("-5m"), "invalid duration \"-5m\": durations cannot be negative");
        assert_eq!(err("5y"), "invalid duration \"5y\": unknown unit \"y\" (valid units: w, d, h, m, s, ms)");
        assert_eq!(
            err("5mins"),
            "invalid duration \"5mins\": unknown unit \"mins\" (valid units: w, d, h, m, s, ms)"
        );
        assert_eq!(err("5M"), "invalid duration \"5M\": unknown unit \"M\" (valid units: w, d, h, m, s, ms)");
        assert_eq!(
            err("30"),
            "invalid duration \"30\": the number \"30\" has no unit (valid units: w, d, h, m, s, ms)"
        );
        assert_eq!(
            err("1h30"),
            "invalid duration \"1h30\": the number \"30\" has no unit (valid units: w, d, h, m, s, ms)"
        );
        assert_eq!(err("h"), "invalid duration \"h\": expected a number before \"h\"");
        assert_eq!(
            err("30m1h"),
            "invalid duration \"30m1h\": unit \"h\" cannot follow \"m\"; write units from the \
             largest to the smallest, each at most once (w, d, h, m, s, ms)"
        );
        assert_eq!(
            err("1h1h"),
            "invalid duration \"1h1h\": unit \"h\" cannot follow \"h\"; write units from the \
             largest to the smallest, each at most once (w, d, h, m, s, ms)"
        );
        assert_eq!(
            err("1.5h"),
            "invalid duration \"1.5h\": unexpected character '.'; fractions are not supported, \
             use a smaller unit (e.g. \"1h30m\" instead of \"1.5h\")"
        );
        assert_eq!(err(" 5m"), "invalid duration \" 5m\": unexpected character ' '");
        assert_eq!(err("5m "), "invalid duration \"5m \": unexpected character ' '");
        assert_eq!(err("5 m"), "invalid duration \"5 m\": unexpected character ' '");
        assert_eq!(err("+5m"), "invalid duration \"+5m\": unexpected character '+'");
        assert_eq!(err("5µs"), "invalid duration \"5µs\": unexpected character 'µ'");
        assert_eq!(err("99999999999999999999s"), "invalid duration \"99999999999999999999s\": too large");
        assert_eq!(err("9223372036854776w"), "invalid duration \"9223372036854776w\": too large");
        assert_eq!("-5m".parse::<PolicyDuration>(), Err(DurationError::Negative { input: "-5m".into() }));
    }

    #[test]
    fn pattern_agrees_with_parser() {
        // A tiny matcher for exactly DURATION_PATTERN's shape, to check the
        // constant against the parser without a regex dependency.
        fn matches_pattern(s: &str) -> bool {
            let mut rest = s;
            for unit in ["w", "d", "h", "m", "s", "ms"] {
                let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
                if digits > 0 && rest[digits..].starts_with(unit) {
                    let after = &rest[digits + unit.len()..];
                    // "m" must not swallow the "m" of "ms".
                    if unit == "m" && after.starts_with('s') {
                        continue;
                    }
                    rest = after;
                }
            }
            rest.is_empty() && !s.is_empty()
        }
        assert_eq!(DURATION_PATTERN, "^([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?$");
        for s in [
            "30s",
            "15m",
            "2h",
            "1h30m",
            "1d",
            "1w",
            "500ms",
            "1m500ms",
            "1w2d3h4m5s6ms",
            "",
            "5",
            "-5m",
            "30m1h",
            "1h1h",
            "1.5h",
            "5y",
            "ms",
            " 5m",
            "1s1m",
        ] {
            assert_eq!(
                matches_pattern(s),
                s.parse::<PolicyDuration>().is_ok(),
                "pattern and parser disagree on {s:?}"
            );
        }
    }

    #[test]
    fn duration_serde() {
        assert_eq!(serde_json::to_value(d("90m")).unwrap(), json!("1h30m"));
        assert_eq!(serde_json::from_value::<PolicyDuration>(json!("2h")).unwrap(), d("2h"));
        let e = serde_json::from_value::<PolicyDuration>(json!("-5m")).unwrap_err();
        assert_eq!(e.to_string(), "invalid duration \"-5m\": durations cannot be negative");
        let e = serde_json::from_value::<PolicyDuration>(json!(30)).unwrap_err();
        assert!(e.to_string().contains("expected a duration string such as \"30s\""), "{e}");
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Spec {
            timeout: PolicyDuration,
        }
        let e = serde_json::from_str::<Spec>(r#"{"timeout": "30m1h"}"#).unwrap_err();
        assert!(e.to_string().starts_with("invalid duration \"30m1h\": unit \"h\" cannot follow"), "{e}");
    }

    #[test]
    fn duration_schema() {
        let schema = serde_json::to_value(schemars::schema_for!(PolicyDuration)).unwrap();
        assert_eq!(schema["type"], "string");
        assert_eq!(schema["pattern"], DURATION_PATTERN);
        assert_eq!(schema["minLength"], 1);
        assert!(schema["description"].as_str().unwrap().contains("\"1h30m\""));
    }

    #[test]
    fn warmup_parse() {
        assert_eq!("10".parse(), Ok(Warmup::Samples(10)));
        assert_eq!("0".parse(), Ok(Warmup::Samples(0)));
        assert_eq!("10%".parse(), Ok(Warmup::ProgressPercent(10.0)));
        assert_eq!("12.5%".parse(), Ok(Warmup::ProgressPercent(12.5)));
        assert_eq!(".5%".parse(), Ok(Warmup::ProgressPercent(0.5)));
        assert_eq!("0%".parse(), Ok(Warmup::ProgressPercent(0.0)));
        assert_eq!("100%".parse(), Ok(Warmup::ProgressPercent(100.0)));
        assert_eq!("100.0%".parse(), Ok(Warmup::ProgressPercent(100.0)));
    }

    #[test]
    fn warmup_errors() {
        let e = |s: &str| s.parse::<Warmup>().unwrap_err().to_string();
        assert_eq!(
            e(""),
            "warmup is empty: expected a number of samples (e.g. 10) or a percent of progress (e.g. \"10%\")"
        );
        assert_eq!(e("-5"), "invalid warmup \"-5\": cannot be negative");
        assert_eq!(e("-5%"), "invalid warmup \"-5%\": cannot be negative");
        assert_eq!(e("100.5%"), "invalid warmup \"100.5%\": a percent of progress cannot exceed 100%");
        assert_eq!(e("150%"), "invalid warmup \"150%\": a percent of progress cannot exceed 100%");
        assert_eq!(
            e("10.5"),
            "invalid warmup \"10.5\": a number of samples must be a whole number; for a percent \
             of progress add \"%\" (e.g. \"10%\")"
        );
        let garbage = "invalid warmup \"abc\": expected a number of samples (e.g. 10) or a percent of progress (e.g. \"10%\")";
        assert_eq!(e("abc"), garbage);
        for bad in [
            "1e3",
            "inf",
            "%",
            "abc%",
            "nan%",
            "inf%",
            "1e1%",
            "+5%",
            "5.%",
            "1.2.3%",
            "10 %",
            " 10",
            "10%%",
            "99999999999999999999999",
        ] {
            assert!(
                matches!(bad.parse::<Warmup>(), Err(WarmupError::Invalid { .. })),
                "{bad:?}: {:?}",
                bad.parse::<Warmup>()
            );
        }
    }

    #[test]
    fn warmup_serde() {
        let from = |v: serde_json::Value| serde_json::from_value::<Warmup>(v);
        assert_eq!(from(json!(10)).unwrap(), Warmup::Samples(10));
        assert_eq!(from(json!("10")).unwrap(), Warmup::Samples(10));
        assert_eq!(from(json!(10.0)).unwrap(), Warmup::Samples(10));
        assert_eq!(from(json!("10%")).unwrap(), Warmup::ProgressPercent(10.0));
        assert_eq!(from(json!(-3)).unwrap_err().to_string(), "invalid warmup \"-3\": cannot be negative");
        assert_eq!(
            from(json!(2.5)).unwrap_err().to_string(),
            "invalid warmup \"2.5\": a number of samples must be a whole number; for a percent \
             of progress add \"%\" (e.g. \"10%\")"
        );
        assert_eq!(
            from(json!("200%")).unwrap_err().to_string(),
            "invalid warmup \"200%\": a percent of progress cannot exceed 100%"
        );
        assert!(
            from(json!(true))
                .unwrap_err()
                .to_string()
                .contains("expected a number of samples (e.g. 10) or a percent of progress")
        );
        assert_eq!(serde_json::to_value(Warmup::Samples(10)).unwrap(), json!(10));
        assert_eq!(serde_json::to_value(Warmup::ProgressPercent(10.0)).unwrap(), json!("10%"));
        assert_eq!(serde_json::to_value(Warmup::ProgressPercent(12.5)).unwrap(), json!("12.5%"));
        for w in [Warmup::Samples(7), Warmup::ProgressPercent(33.25)] {
            let v = serde_json::to_value(w).unwrap();
            assert_eq!(from(v).unwrap(), w);
            assert_eq!(w.to_string().parse::<Warmup>().unwrap(), w);
        }
    }

    #[test]
    fn window_parse_and_errors() {
        assert_eq!("10".parse(), Ok(Window::Samples(10)));
        assert_eq!("2h".parse(), Ok(Window::Time(d("2h"))));
        assert_eq!("1h30m".parse(), Ok(Window::Time(d("90m"))));
        let e = |s: &str| s.parse::<Window>().unwrap_err().to_string();
        assert_eq!(e("-5"), "invalid window \"-5\": cannot be negative");
        assert_eq!(e("-2h"), "invalid window \"-2h\": cannot be negative");
        assert_eq!(
            e("2x"),
            "expected a number of samples (e.g. 10) or a duration (e.g. \"2h\"), but invalid \
             duration \"2x\": unknown unit \"x\" (valid units: w, d, h, m, s, ms)"
        );
        assert_eq!(
            e(""),
            "expected a number of samples (e.g. 10) or a duration (e.g. \"2h\"), but duration \
             is empty: expected a duration such as \"30s\", \"15m\" or \"1h30m\""
        );
        assert_eq!(
            e("99999999999999999999999"),
            "invalid window \"99999999999999999999999\": number of samples is too large"
        );
    }

    #[test]
    fn window_serde() {
        let from = |v: serde_json::Value| serde_json::from_value::<Window>(v);
        assert_eq!(from(json!(10)).unwrap(), Window::Samples(10));
        assert_eq!(from(json!("10")).unwrap(), Window::Samples(10));
        assert_eq!(from(json!("2h")).unwrap(), Window::Time(d("2h")));
        assert_eq!(from(json!(-1)).unwrap_err().to_string(), "invalid window \"-1\": cannot be negative");
        assert!(
            from(json!(1.5))
                .unwrap_err()
                .to_string()
                .starts_with("invalid window 1.5: a number of samples must be a whole number")
        );
        assert!(from(json!("30m1h")).unwrap_err().to_string().contains("cannot follow"));
        assert_eq!(serde_json::to_value(Window::Samples(10)).unwrap(), json!(10));
        assert_eq!(serde_json::to_value(Window::Time(d("120m"))).unwrap(), json!("2h"));
        assert_eq!(Window::Time(d("90m")).to_string(), "1h30m");
        assert_eq!(Window::Samples(3).to_string(), "3");
    }

    #[test]
    fn yaml_policy_fields() {
        #[derive(Debug, Deserialize, PartialEq)]
        struct Spec {
            timeout: PolicyDuration,
            warmup: Warmup,
            patience: Window,
        }
        let spec: Spec = serde_saphyr::from_str("timeout: 1h30m\nwarmup: 10%\npatience: 10\n").unwrap();
        assert_eq!(
            spec,
            Spec { timeout: d("90m"), warmup: Warmup::ProgressPercent(10.0), patience: Window::Samples(10) }
        );
        let spec: Spec = serde_saphyr::from_str("timeout: \"30s\"\nwarmup: 25\npatience: 2h\n").unwrap();
        assert_eq!(spec.warmup, Warmup::Samples(25));
        assert_eq!(spec.patience, Window::Time(d("2h")));
        let e =
            serde_saphyr::from_str::<Spec>("timeout: -5m\nwarmup: 1\npatience: 1\n").unwrap_err().to_string();
        assert!(e.contains("durations cannot be negative"), "{e}");
        let e =
            serde_saphyr::from_str::<Spec>("timeout: 30\nwarmup: 1\npatience: 1\n").unwrap_err().to_string();
        // serde-saphyr hands the plain scalar 30 to `visit_str`.
        assert!(e.contains("invalid duration \"30\": the number \"30\" has no unit"), "{e}");
        let e = serde_saphyr::from_str::<Spec>("timeout: 5m\nwarmup: 150%\npatience: 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot exceed 100%"), "{e}");
    }

    #[test]
    fn int_or_string_schemas() {
        for schema in [
            serde_json::to_value(schemars::schema_for!(Warmup)).unwrap(),
            serde_json::to_value(schemars::schema_for!(Window)).unwrap(),
        ] {
            assert_eq!(schema["x-kubernetes-int-or-string"], true);
            assert!(schema.get("type").is_none(), "{schema}");
            assert!(schema.get("pattern").is_none(), "{schema}");
            assert!(schema["description"].as_str().unwrap().starts_with("Either a number of samples"));
        }
        // Inlined where used, so Kubernetes sees no $ref.
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Spec {
            warmup: Warmup,
            patience: Window,
            timeout: PolicyDuration,
        }
        let schema = serde_json::to_value(schemars::schema_for!(Spec)).unwrap();
        assert_eq!(schema["properties"]["warmup"]["x-kubernetes-int-or-string"], true);
        assert_eq!(schema["properties"]["patience"]["x-kubernetes-int-or-string"], true);
        assert_eq!(schema["properties"]["timeout"]["pattern"], DURATION_PATTERN);
        assert!(schema.get("$defs").is_none(), "{schema}");
    }
}
