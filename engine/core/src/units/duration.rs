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
mod tests;
