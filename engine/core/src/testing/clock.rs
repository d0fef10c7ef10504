//! One clock for every test: [`EPOCH`] (Friday 2026-11-27 17:00 UTC, the Friday story's start) plus seconds
//! or minutes.

use crate::time::Timestamp;

/// 2026-11-27T17:00:00Z, a Friday: where every test's clock starts.
pub const EPOCH: i64 = 1_795_798_800;

/// [`EPOCH`] plus `seconds` (negative: before it).
pub fn at_sec(seconds: i64) -> Timestamp {
    Timestamp::from_second(EPOCH + seconds).expect("a test instant within jiff's range")
}

/// [`EPOCH`] plus `minutes`.
pub fn at_min(minutes: i64) -> Timestamp {
    at_sec(minutes * 60)
}

/// An RFC 3339 instant (`2026-11-27T17:00:00Z`), for tests that write the time they mean.
pub fn ts(text: &str) -> Timestamp {
    text.parse().unwrap_or_else(|e| panic!("{text:?} is not an RFC 3339 instant: {e}"))
}
