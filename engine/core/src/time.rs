//! Instants, spans between them, and how reasons print numbers and spans: the one place for these helpers.
//!
//! Every instant is a [`Timestamp`] passed in by the caller; nothing here reads a clock.

pub use jiff::Timestamp;

/// Seconds from `from` to `to` (negative when `to` is earlier), at nanosecond precision.
pub(crate) fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    (to.as_nanosecond() - from.as_nanosecond()) as f64 / 1e9
}

/// `at` plus `secs` seconds; `None` for a non-finite amount or a result outside the timestamp range.
pub(crate) fn add_seconds(at: Timestamp, secs: f64) -> Option<Timestamp> {
    if !secs.is_finite() {
        return None;
    }
    let nanos = at.as_nanosecond().checked_add((secs * 1e9) as i128)?;
    Timestamp::from_nanosecond(nanos).ok()
}

/// An instant as people read it in a policy's time zone, with the offset: `Sat 2026-11-28 00:11:26 +01:00`
/// (the replay timeline, notifications and local mode all print instants this way).
pub fn fmt_local(t: Timestamp, tz: &jiff::tz::TimeZone) -> String {
    t.to_zoned(tz.clone()).strftime("%a %Y-%m-%d %H:%M:%S %:z").to_string()
}

/// A count and its noun for people, singular or plural: `1 job`, `3 jobs`, `0 jobs`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// [`plural`] for an amount that need not be whole (GPUs from `assumeGpus`): `1 GPU`, `8 GPUs`, `0.5 GPUs`.
pub fn plural_num(v: f64, one: &str, many: &str) -> String {
    format!("{} {}", fmt_num(v), if v == 1.0 { one } else { many })
}

/// Formats a number for reasons: compact, no float noise.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v != 0.0 && (v.abs() < 1e-3 || v.abs() >= 1e7) {
        return format!("{v:.3e}");
    }
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".to_string() } else { s.to_string() }
}

/// Formats seconds as a short human duration (`2h15m`, `45s`).
pub(crate) fn fmt_secs(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return format!("{secs}s");
    }
    let total = secs.round() as u64;
    let (d, h, m, s) = (total / 86400, total / 3600 % 24, total / 60 % 60, total % 60);
    let mut out = String::new();
    if d > 0 {
        out += &format!("{d}d");
    }
    if h > 0 {
        out += &format!("{h}h");
    }
    if m > 0 {
        out += &format!("{m}m");
    }
    if s > 0 || out.is_empty() {
        out += &format!("{s}s");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_format_compactly() {
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(2.0), "2");
        assert_eq!(fmt_num(1e-5), "1.000e-5");
        assert_eq!(fmt_num(f64::NAN), "NaN");
        assert_eq!(fmt_secs(8100.0), "2h15m");
        assert_eq!(fmt_secs(0.0), "0s");
        assert_eq!(fmt_secs(90061.0), "1d1h1m1s");
    }
}
