//! Instants, spans between them, and how reasons print numbers and spans: the one place for these helpers.
//!
//! Every instant is a [`Timestamp`] passed in by the caller; nothing here reads a clock.

pub use jiff::Timestamp;

/// Parses an RFC 3339 instant, as `str::parse::<Timestamp>` does. The shape every recorder and the API
/// server write (`2026-11-27T17:00:00Z`, optionally with a fraction of a second) is read directly, a few
/// times faster than the general parser, which takes everything else (offsets, leap seconds, odd years).
pub(crate) fn parse_timestamp(s: &str) -> Result<Timestamp, jiff::Error> {
    match utc_fast(s.as_bytes()) {
        Some(t) => Ok(t),
        None => s.parse(),
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z` with a year in 1000..=9000 (well inside jiff's range); `None` for
/// anything else, including an impossible date, which the general parser then refuses with its message.
fn utc_fast(b: &[u8]) -> Option<Timestamp> {
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        b[range].iter().try_fold(0i64, |n, &d| d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0')))
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let nanos = match &b[19..] {
        b"Z" => 0,
        [b'.', fraction @ .., b'Z'] if (1..=9).contains(&fraction.len()) => {
            let digits = num(20..20 + fraction.len())?;
            digits * 10i64.pow(9 - fraction.len() as u32)
        }
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(1000..=9000).contains(&year)
        || day == 0
        || day > month_days
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Timestamp::new(seconds, i32::try_from(nanos).ok()?).ok()
}

/// Seconds from `from` to `to` (negative when `to` is earlier), at nanosecond precision.
pub(crate) fn seconds(from: Timestamp, to: Timestamp) -> f64 {
    // In i64 nanoseconds whenever they fit (292 years), converted by one instruction; i128's conversion is
    // a library call on every sample's series update. Both round the same integer to the nearest double.
    let whole = to.as_second() - from.as_second();
    let part = i64::from(to.subsec_nanosecond() - from.subsec_nanosecond());
    match whole.checked_mul(1_000_000_000).and_then(|n| n.checked_add(part)) {
        Some(nanos) => nanos as f64 / 1e9,
        None => seconds_far_apart(from, to),
    }
}

#[cold]
#[inline(never)]
fn seconds_far_apart(from: Timestamp, to: Timestamp) -> f64 {
    (to.as_nanosecond() - from.as_nanosecond()) as f64 / 1e9
}

/// `at` plus `secs` seconds; `None` for a non-finite amount or a result outside the timestamp range.
pub(crate) fn add_seconds(at: Timestamp, secs: f64) -> Option<Timestamp> {
    if !secs.is_finite() {
        return None;
    }
    let delta = secs * 1e9;
    // Every timer deadline goes through here, several per sample. Within the limit the amount truncates
    // to i64 as it does to i128 and the sum cannot overflow, so the i128 multiply and divide (library
    // calls) are needed only for amounts further out.
    if delta.abs() >= ADD_SECONDS_FAST_LIMIT_NANOS {
        return add_seconds_far(at, delta);
    }
    let nanos = i64::from(at.subsec_nanosecond()) + delta as i64;
    let second = at.as_second().checked_add(nanos.div_euclid(1_000_000_000))?;
    Timestamp::new(second, nanos.rem_euclid(1_000_000_000) as i32).ok()
}

/// Below 2^62 ns (146 years), as an `f64`: an i64 holds the amount plus a sub-second part with room.
const ADD_SECONDS_FAST_LIMIT_NANOS: f64 = 4.6e18;

#[cold]
#[inline(never)]
fn add_seconds_far(at: Timestamp, delta_nanos: f64) -> Option<Timestamp> {
    Timestamp::from_nanosecond(at.as_nanosecond().checked_add(delta_nanos as i128)?).ok()
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

/// Formats seconds as a human duration (`2h15m`, `2h0m46s`, `45s`): [`crate::units::span::fmt_span`].
pub(crate) fn fmt_secs(secs: f64) -> String {
    crate::units::span::fmt_span(secs)
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

    /// The i64 path of `seconds` gives the i128 formula's value, bit for bit, near and far apart, before
    /// and after the epoch.
    #[test]
    fn seconds_between_instants_is_the_exact_formula() {
        let mut rng = crate::testing::rng::Rng(0x05EC_04D5);
        let (min, max) = (Timestamp::MIN.as_nanosecond(), Timestamp::MAX.as_nanosecond());
        // Each instant anywhere in jiff's range (pairs far apart take the i128 fallback), around the
        // epoch (negative sub-second parts before it), or around today, nanoseconds included.
        let pick = |rng: &mut crate::testing::rng::Rng| {
            let n = match rng.below(3) {
                0 => {
                    min + ((i128::from(rng.next_u64()) << 40) | i128::from(rng.next_u64()))
                        .rem_euclid(max - min)
                }
                1 => i128::from(rng.next_u64() as i64 >> 8),
                _ => 1_795_798_800_000_000_000 + i128::from(rng.next_u64() as i64 >> 8),
            };
            Timestamp::from_nanosecond(n).expect("in range")
        };
        for _ in 0..100_000 {
            let (a, b) = (pick(&mut rng), pick(&mut rng));
            let exact = (b.as_nanosecond() - a.as_nanosecond()) as f64 / 1e9;
            assert_eq!(seconds(a, b).to_bits(), exact.to_bits(), "{a} {b}");
        }
    }

    /// The i64 path of `add_seconds` gives the i128 formula's instant, or refuses as it does, for instants
    /// anywhere in range (the ends included) and amounts from nanoseconds to beyond the range.
    #[test]
    fn adding_seconds_is_the_exact_formula() {
        let exact = |at: Timestamp, secs: f64| {
            if !secs.is_finite() {
                return None;
            }
            Timestamp::from_nanosecond(at.as_nanosecond().checked_add((secs * 1e9) as i128)?).ok()
        };
        let mut rng = crate::testing::rng::Rng(0xADD5_EC05);
        let (min, max) = (Timestamp::MIN.as_nanosecond(), Timestamp::MAX.as_nanosecond());
        let ends = [Timestamp::MIN, Timestamp::MAX, Timestamp::UNIX_EPOCH];
        let mut far = 0;
        for i in 0..200_000 {
            let at = match rng.below(4) {
                0 => ends[rng.below(3)],
                1 => Timestamp::from_nanosecond(
                    min + ((i128::from(rng.next_u64()) << 40) | i128::from(rng.next_u64()))
                        .rem_euclid(max - min),
                )
                .expect("in range"),
                2 => Timestamp::from_nanosecond(i128::from(rng.next_u64() as i64 >> 8)).expect("in range"),
                _ => Timestamp::from_nanosecond(
                    1_795_798_800_000_000_000 + i128::from(rng.next_u64() as i64 >> 8),
                )
                .expect("in range"),
            };
            // Magnitudes from 1 ns to 10^13 s (past the fast path's limit and the range), both signs, and
            // the odd non-finite amount.
            let magnitude = 10f64.powf(rng.below(2_200) as f64 / 100.0 - 9.0);
            let fraction = rng.below(1 << 20) as f64 / f64::from(1 << 20);
            let mut secs = magnitude * (1.0 + fraction);
            if rng.below(2) == 0 {
                secs = -secs;
            }
            if i % 5_000 == 0 {
                secs = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0][(i / 5_000) % 5];
            }
            if (secs * 1e9).abs() >= ADD_SECONDS_FAST_LIMIT_NANOS {
                far += 1;
            }
            assert_eq!(add_seconds(at, secs), exact(at, secs), "{at} + {secs}");
        }
        assert!(far > 10_000, "the far path was tried {far} times");
        // Amounts under a nanosecond truncate toward zero, on either side of the epoch and of a second.
        let before_epoch = Timestamp::new(-1, -300_000_000).expect("in range");
        for at in [before_epoch, Timestamp::new(12, 999_999_999).expect("in range"), Timestamp::UNIX_EPOCH] {
            for secs in [3e-10, -3e-10, 1.5e-9, -1.5e-9, 0.9999999999, -0.9999999999] {
                assert_eq!(add_seconds(at, secs), exact(at, secs), "{at} + {secs}");
            }
        }
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    /// The fast path gives what jiff gives, on every shape it takes and on near misses it must leave to jiff.
    #[test]
    fn the_fast_path_agrees_with_jiff() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut fast_taken = 0;
        for _ in 0..200_000 {
            // Mostly valid fields, sometimes out of range (month 13, day 31 in April, Feb 29, hour 24, second 60).
            let year = if next(10) == 0 { next(10_000) } else { 1900 + next(300) };
            let fraction = match next(4) {
                0 => String::new(),
                _ => format!(".{}", &format!("{:09}", next(1_000_000_000))[..1 + next(9) as usize]),
            };
            let s = format!(
                "{year:04}-{:02}-{:02}T{:02}:{:02}:{:02}{fraction}Z",
                next(14),
                next(33),
                next(25),
                next(61),
                next(61)
            );
            let jiff = s.parse::<Timestamp>().ok();
            let fast = utc_fast(s.as_bytes());
            if fast.is_some() {
                fast_taken += 1;
                assert_eq!(fast, jiff, "{s}");
            } else if (1000..=9000).contains(&year) {
                assert!(jiff.is_none() || s[17..19] == *"60", "the fast path left a valid {s} to jiff");
            }
            assert_eq!(parse_timestamp(&s).ok(), jiff, "{s}");
        }
        assert!(fast_taken > 50_000, "the generator must mostly produce valid instants: {fast_taken}");
        for odd in [
            "2026-11-27T17:00:00+01:00",
            "2026-11-27t17:00:00z",
            "2026-11-27T17:00:00.Z",
            "2026-11-27T17:00Z",
            "",
        ] {
            assert_eq!(utc_fast(odd.as_bytes()), None, "{odd}");
            assert_eq!(parse_timestamp(odd).ok(), odd.parse::<Timestamp>().ok(), "{odd}");
        }
    }
}
