//! Recurring active windows in a time zone ("only act on weekends", "only
//! at night").
//!
//! An [`ActiveWindow`] starts at every occurrence of a 5-field cron
//! expression (minute, hour, day of month, month, day of week; croner
//! syntax, e.g. `"0 18 * * FRI"`) read in the calendar's time zone, and
//! lasts a fixed [`PolicyDuration`]. Each occurrence
//! covers the half-open interval `[start, start + duration)`. A
//! [`Calendar`] is the union of its windows; a calendar without windows is
//! always active.
//!
//! Daylight saving time:
//!
//! * Start times are wall-clock times in the time zone. A start that falls
//!   in a spring-forward gap (e.g. `"30 2 * * *"` on the last Sunday of
//!   March in Europe/Rome) happens at the first instant after the gap
//!   (03:00). A fixed start time that occurs twice in a fall-back overlap
//!   happens once, at its first (earlier) instant; patterns with a minute or
//!   hour wildcard or step (e.g. `"*/30 * * * *"`) start at both instants.
//! * Durations are absolute: `62h` is 62 real hours. The weekend window
//!   `"0 18 * * FRI"` + `62h` in Europe/Rome runs from Friday 18:00 to Monday
//!   08:00 local time, except across the end-of-October change, when the
//!   Sunday has 25 hours and it ends at Monday 07:00 local time (and across
//!   the end-of-March change, at Monday 09:00).
//!
//! In the day-of-week field `0` and `7` are Sunday and names (`MON`-`SUN`)
//! are accepted. When both day of month and day of week are restricted a
//! day matches if either does (as in Vixie cron: `"0 0 13 * FRI"` is every
//! 13th and every Friday); croner's `+` prefix (`"0 0 13 * +FRI"`) requires
//! both. Seconds and year fields are not accepted; `@daily`, `@weekly` etc.
//! are.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::units::duration::PolicyDuration;

/// How far past the queried instant a chain of overlapping or back-to-back
/// occurrences is followed before giving up: 400 days.
const LOOKAHEAD: SignedDuration = SignedDuration::from_hours(400 * 24);

/// The most occurrences a chain is followed through before giving up.
const MAX_CHAIN: usize = 10_000;

/// Why a window or time zone was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CalendarError {
    /// The cron expression has a seconds (or year) field.
    #[error(
        "cron expression {cron:?} has {fields} fields, expected 5 (minute hour day-of-month \
         month day-of-week): seconds and year fields are not supported"
    )]
    SecondsField {
        /// The rejected expression.
        cron: String,
        /// How many fields it has.
        fields: usize,
    },
    /// The cron expression has fewer than 5 fields.
    #[error(
        "cron expression {cron:?} has {fields} fields, expected 5 (minute hour day-of-month \
         month day-of-week), e.g. \"0 18 * * FRI\""
    )]
    TooFewFields {
        /// The rejected expression.
        cron: String,
        /// How many fields it has.
        fields: usize,
    },
    /// croner rejected the cron expression.
    #[error("invalid cron expression {cron:?}: {reason}")]
    InvalidCron {
        /// The rejected expression.
        cron: String,
        /// croner's explanation.
        reason: String,
    },
    /// The cron expression is valid but matches no date (e.g. 30 February).
    #[error("cron expression {cron:?} never matches any date")]
    NeverMatches {
        /// The rejected expression.
        cron: String,
    },
    /// The window's duration is zero.
    #[error("window {cron:?} has a zero duration, so it would never be active")]
    ZeroDuration {
        /// The window's cron expression.
        cron: String,
    },
    /// The time zone name is empty.
    #[error("time zone name is empty: use an IANA name such as \"Europe/Rome\", or \"UTC\"")]
    EmptyTimeZone,
    /// The time zone is not in the time zone database.
    #[error(
        "unknown time zone {name:?}: use an IANA name such as \"Europe/Rome\" or \
         \"America/New_York\", or \"UTC\" ({reason})"
    )]
    UnknownTimeZone {
        /// The rejected name.
        name: String,
        /// jiff's explanation.
        reason: String,
    },
}

/// A recurring window: starts at each occurrence of a 5-field cron
/// expression (croner syntax, e.g. `"0 18 * * FRI"`) in the policy's time
/// zone and lasts `duration` (absolute time). See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveWindow {
    /// The expression as written (trimmed).
    source: String,
    cron: Cron,
    duration: PolicyDuration,
}

impl ActiveWindow {
    /// Parses a window. Rejects expressions with other than 5 fields (in
    /// particular a seconds field), invalid or never-matching expressions and
    /// a zero `duration`.
    pub fn parse(cron: &str, duration: PolicyDuration) -> Result<Self, CalendarError> {
        let source = cron.trim();
        let fields = source.split_whitespace().count();
        let nickname = fields == 1 && source.starts_with('@');
        if fields > 5 {
            return Err(CalendarError::SecondsField { cron: source.to_owned(), fields });
        }
        if fields < 5 && !nickname {
            return Err(CalendarError::TooFewFields { cron: source.to_owned(), fields });
        }
        let parsed = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(source)
            .map_err(|e| CalendarError::InvalidCron { cron: source.to_owned(), reason: e.to_string() })?;
        // croner accepts e.g. "0 0 30 2 *"; searching for it fails (after a
        // few milliseconds) instead. Every 5-field expression that matches at
        // all matches within a few years of any date.
        let probe = Timestamp::from_second(946_684_800) // 2000-01-01T00:00:00Z
            .expect("a valid timestamp")
            .to_zoned(TimeZone::UTC);
        if parsed.find_next_occurrence(&probe, true).is_err() {
            return Err(CalendarError::NeverMatches { cron: source.to_owned() });
        }
        if duration.is_zero() {
            return Err(CalendarError::ZeroDuration { cron: source.to_owned() });
        }
        Ok(ActiveWindow { source: source.to_owned(), cron: parsed, duration })
    }

    /// The cron expression as written (trimmed).
    pub fn cron(&self) -> &str {
        &self.source
    }

    /// How long each occurrence lasts.
    pub fn duration(&self) -> PolicyDuration {
        self.duration
    }

    /// If `at` lies inside an occurrence of this window, that occurrence's
    /// `[start, end)`. When several occurrences contain `at` (a duration
    /// longer than the gap between starts), the one that started last, which
    /// also ends last.
    pub fn occurrence_containing(&self, at: Timestamp, tz: &TimeZone) -> Option<(Timestamp, Timestamp)> {
        let start = self.latest_start_at_or_before(at, tz)?;
        let end = start.checked_add(self.duration.to_signed_duration()).unwrap_or(Timestamp::MAX);
        (at < end).then_some((start, end))
    }

    /// The next instant strictly after `at` at which being inside this window
    /// changes (a start or an end). Overlapping or back-to-back occurrences
    /// count as one stretch. `None` if there is no such change within about
    /// 400 days (e.g. `"0 * * * *"` lasting `2h` is always active).
    pub fn next_change_after(&self, at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        next_change(std::slice::from_ref(self), at, tz)
    }

    /// The latest start at or before `at`.
    fn latest_start_at_or_before(&self, at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        // croner works on whole wall-clock seconds and drops the fraction of
        // its origin, so an inclusive search from 18:00:00.5 could return
        // 18:00:00 forwards too. Starts are whole minutes: flooring `at` finds
        // the same latest start.
        let origin = floor_to_second(at).to_zoned(tz.clone());
        self.cron.find_previous_occurrence(&origin, true).ok().map(|z| z.timestamp())
    }

    /// The first start strictly after `at`.
    fn first_start_after(&self, at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        // An exclusive search starts at the next whole second after the
        // floored origin, which for whole-second starts is the same as
        // strictly after `at`.
        let origin = floor_to_second(at).to_zoned(tz.clone());
        self.cron.find_next_occurrence(&origin, false).ok().map(|z| z.timestamp())
    }
}

/// `at` rounded down to a whole second (towards the past, also before 1970).
fn floor_to_second(at: Timestamp) -> Timestamp {
    let second = at.as_second() - i64::from(at.subsec_nanosecond() < 0);
    Timestamp::from_second(second).unwrap_or(at)
}

/// The latest end among the occurrences of `windows` that contain `at`.
fn latest_end_containing(windows: &[ActiveWindow], at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
    windows.iter().filter_map(|w| w.occurrence_containing(at, tz)).map(|(_, end)| end).max()
}

/// The end of the stretch of (possibly overlapping or back-to-back)
/// occurrences containing `at`. `None` if `at` is in none, or the stretch
/// goes on past the lookahead.
fn stretch_end(windows: &[ActiveWindow], at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
    let mut end = latest_end_containing(windows, at, tz)?;
    if end == Timestamp::MAX {
        // The duration ran past the largest representable instant.
        return None;
    }
    let horizon = at.checked_add(LOOKAHEAD).unwrap_or(Timestamp::MAX);
    for _ in 0..MAX_CHAIN {
        match latest_end_containing(windows, end, tz) {
            None => return Some(end),
            Some(later) if later <= horizon => end = later,
            Some(_) => return None,
        }
    }
    None
}

/// The next instant strictly after `at` at which being inside the union of
/// `windows` changes.
fn next_change(windows: &[ActiveWindow], at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
    if windows.iter().any(|w| w.occurrence_containing(at, tz).is_some()) {
        stretch_end(windows, at, tz)
    } else {
        windows.iter().filter_map(|w| w.first_start_after(at, tz)).min()
    }
}

/// A set of [`ActiveWindow`]s in one time zone, active whenever any of them
/// is. A calendar without windows is always active.
#[derive(Clone, Debug)]
pub struct Calendar {
    tz: TimeZone,
    windows: Vec<ActiveWindow>,
}

impl Calendar {
    /// A calendar of `windows` read in time zone `tz`.
    pub fn new(tz: TimeZone, windows: Vec<ActiveWindow>) -> Self {
        Calendar { tz, windows }
    }

    /// Looks up an IANA time zone name (`"Europe/Rome"`, `"UTC"`) in the
    /// time zone database compiled into the binary. The core reads no files,
    /// and a replay gives the same answer on every host, whatever tzdata the
    /// host has (or lacks, in a distroless image).
    pub fn parse_time_zone(name: &str) -> Result<TimeZone, CalendarError> {
        static BUNDLED: std::sync::OnceLock<jiff::tz::TimeZoneDatabase> = std::sync::OnceLock::new();
        if name.trim().is_empty() {
            return Err(CalendarError::EmptyTimeZone);
        }
        BUNDLED
            .get_or_init(jiff::tz::TimeZoneDatabase::bundled)
            .get(name)
            .map_err(|e| CalendarError::UnknownTimeZone { name: name.to_owned(), reason: e.to_string() })
    }

    /// The time zone the windows are read in.
    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// The windows (empty: always active).
    pub fn windows(&self) -> &[ActiveWindow] {
        &self.windows
    }

    /// Whether `at` is inside any window (always true without windows).
    pub fn is_active(&self, at: Timestamp) -> bool {
        self.windows.is_empty()
            || self.windows.iter().any(|w| w.occurrence_containing(at, &self.tz).is_some())
    }

    /// When the active stretch containing `at` ends: the latest end of the
    /// occurrences containing `at`, followed through overlapping and
    /// back-to-back occurrences of all windows to the first instant that is
    /// not active.
    ///
    /// `None` if `at` is not active, if the calendar has no windows (always
    /// active, no end), or if the stretch does not end within about 400 days.
    pub fn active_until(&self, at: Timestamp) -> Option<Timestamp> {
        stretch_end(&self.windows, at, &self.tz)
    }

    /// The next instant strictly after `at` at which [`Calendar::is_active`]
    /// changes: the end of the active stretch if `at` is active, otherwise
    /// the next start. `None` without windows, or if there is no change
    /// within about 400 days.
    pub fn next_change_after(&self, at: Timestamp) -> Option<Timestamp> {
        next_change(&self.windows, at, &self.tz)
    }

    /// The ISO weekday (1 = Monday … 7 = Sunday), hour (0–23) and minute of
    /// `at` in the calendar's time zone.
    pub fn weekday_hour(&self, at: Timestamp) -> (i8, i8, i8) {
        let local = at.to_zoned(self.tz.clone());
        (local.weekday().to_monday_one_offset(), local.hour(), local.minute())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ts;

    fn dur(s: &str) -> PolicyDuration {
        s.parse().unwrap()
    }

    fn tz(name: &str) -> TimeZone {
        Calendar::parse_time_zone(name).unwrap()
    }

    fn window(cron: &str, d: &str) -> ActiveWindow {
        ActiveWindow::parse(cron, dur(d)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn calendar(zone: &str, windows: &[(&str, &str)]) -> Calendar {
        Calendar::new(tz(zone), windows.iter().map(|(c, d)| window(c, d)).collect())
    }

    /// A local wall-clock time ("2025-01-10T18:00") in `zone`; in a
    /// fall-back overlap the earlier instant.
    fn local(zone: &str, civil: &str) -> Timestamp {
        civil.parse::<jiff::civil::DateTime>().unwrap().to_zoned(tz(zone)).unwrap().timestamp()
    }

    /// `t` as local wall-clock time with offset, for readable assertions.
    fn show(t: Timestamp, zone: &str) -> String {
        t.to_zoned(tz(zone)).strftime("%a %Y-%m-%d %H:%M %:z").to_string()
    }

    const ROME: &str = "Europe/Rome";
    const NY: &str = "America/New_York";
    const NS: SignedDuration = SignedDuration::from_nanos(1);

    #[test]
    fn weekend_window_without_dst_change() {
        let cal = calendar(ROME, &[("0 18 * * FRI", "62h")]);
        let l = |s| local(ROME, s);
        assert!(!cal.is_active(l("2025-01-10T17:59")));
        assert!(!cal.is_active(l("2025-01-10T17:59:59.999999999")));
        assert!(cal.is_active(l("2025-01-10T18:00")));
        assert!(cal.is_active(l("2025-01-11T03:00")));
        assert!(cal.is_active(l("2025-01-12T12:00")));
        assert!(cal.is_active(l("2025-01-13T07:59")));
        assert!(cal.is_active(l("2025-01-13T07:59:59.999999999")));
        assert!(!cal.is_active(l("2025-01-13T08:00")));
        assert!(!cal.is_active(l("2025-01-15T12:00")));

        let w = &cal.windows()[0];
        assert_eq!(
            w.occurrence_containing(l("2025-01-12T12:00"), cal.time_zone()),
            Some((l("2025-01-10T18:00"), l("2025-01-13T08:00")))
        );
        assert_eq!(w.occurrence_containing(l("2025-01-13T08:00"), cal.time_zone()), None);
        assert_eq!(cal.active_until(l("2025-01-12T12:00")), Some(l("2025-01-13T08:00")));
        assert_eq!(cal.active_until(l("2025-01-14T12:00")), None);
        assert_eq!(cal.next_change_after(l("2025-01-10T17:59")), Some(l("2025-01-10T18:00")));
        assert_eq!(cal.next_change_after(l("2025-01-10T18:00")), Some(l("2025-01-13T08:00")));
        assert_eq!(cal.next_change_after(l("2025-01-13T08:00")), Some(l("2025-01-17T18:00")));
    }

    #[test]
    fn weekend_window_across_end_of_october_dst_change() {
        // Europe/Rome leaves summer time on Sunday 2025-10-26 at 03:00
        // (back to 02:00): the weekend has 63 wall-clock hours, and 62 real
        // hours from Friday 18:00 CEST end on Monday at 07:00 CET.
        let cal = calendar(ROME, &[("0 18 * * FRI", "62h")]);
        let l = |s| local(ROME, s);
        assert!(!cal.is_active(l("2025-10-24T17:59")));
        assert!(cal.is_active(l("2025-10-24T18:00")));
        assert!(cal.is_active(l("2025-10-26T12:00")));
        assert!(cal.is_active(l("2025-10-27T06:59")));
        assert!(!cal.is_active(l("2025-10-27T07:00")));
        assert!(!cal.is_active(l("2025-10-27T07:59")));
        let end = cal.active_until(l("2025-10-26T12:00")).unwrap();
        assert_eq!(show(end, ROME), "Mon 2025-10-27 07:00 +01:00");
        assert_eq!(l("2025-10-24T18:00").duration_until(end), SignedDuration::from_hours(62));
    }

    #[test]
    fn weekend_window_across_end_of_march_dst_change() {
        // Summer time starts on Sunday 2025-03-30 at 02:00 (to 03:00): 62
        // real hours from Friday 18:00 CET end on Monday at 09:00 CEST.
        let cal = calendar(ROME, &[("0 18 * * FRI", "62h")]);
        let l = |s| local(ROME, s);
        assert!(cal.is_active(l("2025-03-31T08:59")));
        assert!(!cal.is_active(l("2025-03-31T09:00")));
        let end = cal.next_change_after(l("2025-03-29T00:00")).unwrap();
        assert_eq!(show(end, ROME), "Mon 2025-03-31 09:00 +02:00");
    }

    #[test]
    fn weekday_night_windows() {
        let cal = calendar(NY, &[("0 20 * * MON-THU", "12h")]);
        let l = |s| local(NY, s);
        // Monday 2025-01-06 .. Sunday 2025-01-12.
        assert!(!cal.is_active(l("2025-01-06T19:59")));
        assert!(cal.is_active(l("2025-01-06T20:00")));
        assert!(cal.is_active(l("2025-01-07T07:59")));
        assert!(!cal.is_active(l("2025-01-07T08:00")));
        assert!(!cal.is_active(l("2025-01-07T12:00")));
        assert!(cal.is_active(l("2025-01-09T23:00"))); // Thursday night
        assert!(cal.is_active(l("2025-01-10T07:59"))); // into Friday morning
        assert!(!cal.is_active(l("2025-01-10T08:00")));
        assert!(!cal.is_active(l("2025-01-10T21:00"))); // no Friday night
        assert!(!cal.is_active(l("2025-01-11T21:00")));
        assert!(!cal.is_active(l("2025-01-12T21:00"))); // nor Sunday night
        assert_eq!(cal.next_change_after(l("2025-01-10T08:00")), Some(l("2025-01-13T20:00")));
        // Across the fall-back change (Sunday 2025-11-02 02:00 EDT -> 01:00
        // EST) a nightly window ends an hour earlier in local time.
        let nightly = calendar(NY, &[("0 20 * * *", "12h")]);
        let end = nightly.active_until(l("2025-11-01T23:00")).unwrap();
        assert_eq!(show(end, NY), "Sun 2025-11-02 07:00 -05:00");
        let end = nightly.active_until(l("2025-03-08T23:00")).unwrap();
        assert_eq!(show(end, NY), "Sun 2025-03-09 09:00 -04:00");
    }

    #[test]
    fn overlapping_windows() {
        let cal = calendar("UTC", &[("0 8 * * *", "4h"), ("0 10 * * *", "4h")]);
        assert!(!cal.is_active(ts("2025-05-05T07:59:59Z")));
        assert!(cal.is_active(ts("2025-05-05T08:00:00Z")));
        assert!(cal.is_active(ts("2025-05-05T11:00:00Z")));
        assert!(cal.is_active(ts("2025-05-05T13:59:59Z")));
        assert!(!cal.is_active(ts("2025-05-05T14:00:00Z")));
        assert_eq!(cal.active_until(ts("2025-05-05T09:00:00Z")), Some(ts("2025-05-05T14:00:00Z")));
        assert_eq!(cal.active_until(ts("2025-05-05T12:30:00Z")), Some(ts("2025-05-05T14:00:00Z")));
        assert_eq!(cal.next_change_after(ts("2025-05-05T07:00:00Z")), Some(ts("2025-05-05T08:00:00Z")));
        // No change at 10:00 or 12:00, only at 14:00.
        assert_eq!(cal.next_change_after(ts("2025-05-05T09:00:00Z")), Some(ts("2025-05-05T14:00:00Z")));
        assert_eq!(cal.next_change_after(ts("2025-05-05T14:00:00Z")), Some(ts("2025-05-06T08:00:00Z")));
        // Each window alone reports its own occurrence.
        let utc = cal.time_zone();
        assert_eq!(
            cal.windows()[0].occurrence_containing(ts("2025-05-05T11:00:00Z"), utc),
            Some((ts("2025-05-05T08:00:00Z"), ts("2025-05-05T12:00:00Z")))
        );
        assert_eq!(
            cal.windows()[0].next_change_after(ts("2025-05-05T11:00:00Z"), utc),
            Some(ts("2025-05-05T12:00:00Z"))
        );
    }

    #[test]
    fn chained_windows_active_until_follows_the_chain() {
        // Weekend (Fri 18:00 -> Mon 08:00), then Monday daytime (08:00 ->
        // 18:00) back to back, plus a window nested inside the weekend.
        let cal = calendar(ROME, &[("0 18 * * FRI", "62h"), ("0 8 * * MON", "10h"), ("0 0 * * SAT", "1h")]);
        let l = |s| local(ROME, s);
        let end = l("2025-01-13T18:00");
        assert_eq!(cal.active_until(l("2025-01-11T12:00")), Some(end));
        assert_eq!(cal.active_until(l("2025-01-11T00:30")), Some(end));
        assert_eq!(cal.active_until(l("2025-01-13T08:00")), Some(end));
        assert_eq!(cal.next_change_after(l("2025-01-11T12:00")), Some(end));
        assert!(cal.is_active(l("2025-01-13T08:00")));
        assert!(!cal.is_active(end));
        // The weekend window alone ends at Monday 08:00.
        assert_eq!(
            cal.windows()[0].next_change_after(l("2025-01-11T12:00"), cal.time_zone()),
            Some(l("2025-01-13T08:00"))
        );
        // A chain through a different window and back: 08-12, 12-16 via the
        // other window, 16-20 via the first again.
        let cal = calendar("UTC", &[("0 8,16 * * *", "4h"), ("0 12 * * *", "4h")]);
        assert_eq!(cal.active_until(ts("2025-05-05T09:00:00Z")), Some(ts("2025-05-05T20:00:00Z")));
    }

    #[test]
    fn self_overlapping_window() {
        // Starts every 2 hours, lasts 3: 00:00-05:00 would be one stretch if
        // it stopped, but it never does.
        let cal = calendar("UTC", &[("0 */2 * * *", "3h")]);
        let t = ts("2025-05-05T09:30:00Z");
        assert!(cal.is_active(t));
        assert_eq!(cal.active_until(t), None);
        assert_eq!(cal.next_change_after(t), None);
        // The occurrence containing `t` that started last.
        assert_eq!(
            cal.windows()[0].occurrence_containing(t, cal.time_zone()),
            Some((ts("2025-05-05T08:00:00Z"), ts("2025-05-05T11:00:00Z")))
        );
        // Back to back: also always active...
        let cal = calendar("UTC", &[("0 0 * * *", "1d")]);
        assert!(cal.is_active(t));
        assert_eq!(cal.active_until(t), None);
        // ...except where a local day is longer than 24 hours: the 25-hour
        // Sunday of the fall-back change leaves a one-hour gap.
        let cal = calendar(ROME, &[("0 0 * * *", "1d")]);
        assert!(cal.is_active(t));
        let end = cal.active_until(t).unwrap();
        assert_eq!(show(end, ROME), "Sun 2025-10-26 23:00 +01:00");
        assert_eq!(show(cal.next_change_after(end).unwrap(), ROME), "Mon 2025-10-27 00:00 +01:00");
        // Starts every 2 hours, lasts 90 minutes: regular gaps.
        let cal = calendar("UTC", &[("0 */2 * * *", "90m")]);
        assert_eq!(cal.active_until(t), None); // 09:30 is in a gap
        assert_eq!(cal.next_change_after(t), Some(ts("2025-05-05T10:00:00Z")));
        assert_eq!(cal.active_until(ts("2025-05-05T10:00:00Z")), Some(ts("2025-05-05T11:30:00Z")));
    }

    #[test]
    fn next_change_after_sequences() {
        let cal = calendar(ROME, &[("0 18 * * FRI", "62h"), ("0 20 * * MON-THU", "12h")]);
        let mut at = local(ROME, "2025-10-20T12:00"); // Monday
        let mut changes = Vec::new();
        for _ in 0..12 {
            at = cal.next_change_after(at).unwrap();
            changes.push(show(at, ROME));
        }
        assert_eq!(
            changes,
            [
                "Mon 2025-10-20 20:00 +02:00",
                "Tue 2025-10-21 08:00 +02:00",
                "Tue 2025-10-21 20:00 +02:00",
                "Wed 2025-10-22 08:00 +02:00",
                "Wed 2025-10-22 20:00 +02:00",
                "Thu 2025-10-23 08:00 +02:00",
                "Thu 2025-10-23 20:00 +02:00",
                "Fri 2025-10-24 08:00 +02:00",
                "Fri 2025-10-24 18:00 +02:00",
                // 62 real hours over the 25-hour Sunday; then Monday night.
                "Mon 2025-10-27 07:00 +01:00",
                "Mon 2025-10-27 20:00 +01:00",
                "Tue 2025-10-28 08:00 +01:00",
            ]
        );
        // Between two changes the state is constant, and it flips at each.
        let mut at = local(ROME, "2025-10-20T12:00");
        for _ in 0..12 {
            let next = cal.next_change_after(at).unwrap();
            let before = cal.is_active(next - NS);
            assert_eq!(cal.is_active(at), before);
            assert_ne!(cal.is_active(next), before, "no flip at {}", show(next, ROME));
            at = next;
        }
    }

    #[test]
    fn sub_second_instants() {
        let cal = calendar("UTC", &[("0 18 * * *", "1h")]);
        let start = ts("2025-05-05T18:00:00Z");
        assert!(!cal.is_active(start - NS));
        assert!(cal.is_active(start));
        assert!(cal.is_active(start + NS));
        assert_eq!(cal.next_change_after(start - NS), Some(start));
        assert_eq!(cal.next_change_after(ts("2025-05-05T17:59:59.5Z")), Some(start));
        assert_eq!(
            cal.next_change_after(start + SignedDuration::from_millis(500)),
            Some(ts("2025-05-05T19:00:00Z"))
        );
        assert_eq!(cal.next_change_after(ts("2025-05-05T19:00:00.5Z")), Some(ts("2025-05-06T18:00:00Z")));
        // Before 1970, where the fraction of a second is negative.
        let old = ts("1969-12-31T18:00:00Z");
        assert!(!cal.is_active(old - NS));
        assert!(cal.is_active(old));
        assert_eq!(cal.next_change_after(old - SignedDuration::from_millis(500)), Some(old));
    }

    #[test]
    fn start_times_in_dst_gap_and_overlap() {
        let cal = calendar(ROME, &[("30 2 * * *", "1h")]);
        let l = |s| local(ROME, s);
        // 02:30 does not exist on 2025-03-30: the window starts at 03:00.
        let start = cal.next_change_after(l("2025-03-30T00:00")).unwrap();
        assert_eq!(show(start, ROME), "Sun 2025-03-30 03:00 +02:00");
        assert_eq!(show(cal.active_until(start).unwrap(), ROME), "Sun 2025-03-30 04:00 +02:00");
        // 02:30 happens twice on 2025-10-26: the window starts once, at the
        // first, and lasts one real hour (to the second 02:30).
        let first = ts("2025-10-26T02:30:00+02:00");
        let second = ts("2025-10-26T02:30:00+01:00");
        assert_eq!(cal.next_change_after(l("2025-10-26T00:00")), Some(first));
        assert_eq!(cal.active_until(first), Some(second));
        assert!(!cal.is_active(second));
        assert_eq!(show(cal.next_change_after(second).unwrap(), ROME), "Mon 2025-10-27 02:30 +01:00");
        // A stepped pattern starts at both 02:00s.
        let cal = calendar(ROME, &[("0 * * * *", "10m")]);
        assert!(cal.is_active(ts("2025-10-26T02:05:00+02:00")));
        assert!(cal.is_active(ts("2025-10-26T02:05:00+01:00")));
    }

    /// Brute-force check of `is_active` and `next_change_after` against the
    /// list of starts found by forward iteration, around each 2025 DST change
    /// of several zones (Lord Howe shifts by only 30 minutes).
    #[test]
    fn agrees_with_forward_iteration_across_dst() {
        let patterns = [
            ("30 2 * * *", "1h"),
            ("*/30 * * * *", "10m"),
            ("0 18 * * FRI", "62h"),
            ("0 20 * * MON-THU", "12h"),
            ("15 1-3 * * *", "20m"),
            ("0 0 * * *", "3h"),
        ];
        // Each zone with the Sundays of its changes.
        let zones = [
            (ROME, ["2025-03-30", "2025-10-26"]),
            (NY, ["2025-03-09", "2025-11-02"]),
            ("Australia/Lord_Howe", ["2025-04-06", "2025-10-05"]),
            ("UTC", ["2025-03-30", "2025-10-26"]),
        ];
        let days = |n: i64| SignedDuration::from_hours(24 * n);
        for (zone, sundays) in zones {
            let tz = tz(zone);
            for (cron, d) in patterns {
                let w = window(cron, d);
                let len = w.duration().to_signed_duration();
                let cal = Calendar::new(tz.clone(), vec![w.clone()]);
                for sunday in sundays {
                    // From Thursday to Tuesday around the change.
                    let sunday = local(zone, &format!("{sunday}T00:00"));
                    let (from, to) = (sunday - days(3), sunday + days(2));
                    // Every start from a week before, by forward iteration.
                    let starts: Vec<Timestamp> = w
                        .cron
                        .iter_after((from - days(7)).to_zoned(tz.clone()))
                        .map(|z| z.timestamp())
                        .take_while(|s| *s <= to + days(7))
                        .collect();
                    let naive = |t: Timestamp| starts.iter().any(|s| *s <= t && t < *s + len);
                    // 7 minutes: every phase of the 30-minute patterns.
                    let mut t = from;
                    while t < to {
                        assert_eq!(cal.is_active(t), naive(t), "{zone} {cron} {d} at {t}");
                        t += SignedDuration::from_mins(7);
                    }
                    let mut t = from;
                    while t < to {
                        let next = cal.next_change_after(t).unwrap();
                        assert!(next > t);
                        assert_eq!(naive(next - NS), naive(t), "{zone} {cron} {d}: {t} -> {next}");
                        assert_ne!(naive(next), naive(t), "{zone} {cron} {d}: {t} -> {next}");
                        t = next;
                    }
                }
            }
        }
    }

    #[test]
    fn empty_calendar_is_always_active() {
        let cal = Calendar::new(TimeZone::UTC, vec![]);
        let t = ts("2025-05-05T09:30:00Z");
        assert!(cal.is_active(t));
        assert_eq!(cal.active_until(t), None);
        assert_eq!(cal.next_change_after(t), None);
    }

    #[test]
    fn weekday_hour_in_zone() {
        let cal = calendar(ROME, &[]);
        assert_eq!(cal.weekday_hour(local(ROME, "2025-01-12T12:34")), (7, 12, 34));
        assert_eq!(cal.weekday_hour(local(ROME, "2025-01-13T00:00")), (1, 0, 0));
        // 23:30 UTC on a Sunday is already Monday in Rome.
        assert_eq!(cal.weekday_hour(ts("2025-01-12T23:30:00Z")), (1, 0, 30));
        assert_eq!(cal.weekday_hour(ts("2025-07-13T23:30:00Z")), (1, 1, 30));
        // Both 02:15s of the fall-back night.
        assert_eq!(cal.weekday_hour(ts("2025-10-26T02:15:00+02:00")), (7, 2, 15));
        assert_eq!(cal.weekday_hour(ts("2025-10-26T02:15:00+01:00")), (7, 2, 15));
        let utc = Calendar::new(TimeZone::UTC, vec![]);
        assert_eq!(utc.weekday_hour(ts("2025-01-12T23:30:00Z")), (7, 23, 30));
    }

    #[test]
    fn time_zone_parsing() {
        assert_eq!(Calendar::parse_time_zone("UTC").unwrap(), TimeZone::UTC);
        assert_eq!(Calendar::parse_time_zone("utc").unwrap(), TimeZone::UTC);
        assert_eq!(Calendar::parse_time_zone(ROME).unwrap().iana_name(), Some(ROME));
        assert!(Calendar::parse_time_zone(NY).is_ok());
        assert_eq!(
            Calendar::parse_time_zone("").unwrap_err().to_string(),
            "time zone name is empty: use an IANA name such as \"Europe/Rome\", or \"UTC\""
        );
        let e = Calendar::parse_time_zone("Europe/Atlantis").unwrap_err();
        assert!(matches!(&e, CalendarError::UnknownTimeZone { name, .. } if name == "Europe/Atlantis"));
        assert!(
            e.to_string().starts_with(
                "unknown time zone \"Europe/Atlantis\": use an IANA name such as \"Europe/Rome\" \
                 or \"America/New_York\", or \"UTC\" ("
            ),
            "{e}"
        );
    }

    #[test]
    fn window_parse_errors() {
        let e = |cron: &str, d: &str| ActiveWindow::parse(cron, dur(d)).unwrap_err().to_string();
        assert_eq!(
            e("0 0 18 * * FRI", "1h"),
            "cron expression \"0 0 18 * * FRI\" has 6 fields, expected 5 (minute hour \
             day-of-month month day-of-week): seconds and year fields are not supported"
        );
        assert_eq!(
            e("0 0 18 * * FRI 2025", "1h"),
            "cron expression \"0 0 18 * * FRI 2025\" has 7 fields, expected 5 (minute hour \
             day-of-month month day-of-week): seconds and year fields are not supported"
        );
        assert_eq!(
            e("0 18 * FRI", "1h"),
            "cron expression \"0 18 * FRI\" has 4 fields, expected 5 (minute hour day-of-month \
             month day-of-week), e.g. \"0 18 * * FRI\""
        );
        assert_eq!(
            e("  ", "1h"),
            "cron expression \"\" has 0 fields, expected 5 (minute hour day-of-month month \
             day-of-week), e.g. \"0 18 * * FRI\""
        );
        assert!(
            e("0 25 * * *", "1h").starts_with("invalid cron expression \"0 25 * * *\": "),
            "{}",
            e("0 25 * * *", "1h")
        );
        assert!(e("a b c d e", "1h").starts_with("invalid cron expression \"a b c d e\": "));
        assert!(e("0 18 * * FUNDAY", "1h").starts_with("invalid cron expression"));
        assert!(e("@reboot", "1h").starts_with("invalid cron expression \"@reboot\": "));
        assert_eq!(e("0 0 30 2 *", "1h"), "cron expression \"0 0 30 2 *\" never matches any date");
        assert_eq!(
            e("0 18 * * FRI", "0s"),
            "window \"0 18 * * FRI\" has a zero duration, so it would never be active"
        );
        assert_eq!(
            ActiveWindow::parse("0 18 * * FRI", PolicyDuration::ZERO),
            Err(CalendarError::ZeroDuration { cron: "0 18 * * FRI".into() })
        );
    }

    #[test]
    fn window_syntax_accepted() {
        let w = window(" 0 18 * * fri ", "62h");
        assert_eq!(w.cron(), "0 18 * * fri");
        assert_eq!(w.duration(), dur("62h"));
        for cron in
            ["@daily", "@weekly", "0 0 * * 7", "0 0 * * SUN", "0 0 L * *", "0 9-17/2 * * 1-5", "0 0 29 2 *"]
        {
            window(cron, "1h");
        }
        // Sunday as 0 and 7 and SUN.
        let sunday = local(ROME, "2025-01-12T00:30");
        for cron in ["0 0 * * 0", "0 0 * * 7", "0 0 * * SUN", "@weekly"] {
            let cal = Calendar::new(tz(ROME), vec![window(cron, "1h")]);
            assert!(cal.is_active(sunday), "{cron}");
        }
        // Day of month OR day of week, unless "+".
        let utc = TimeZone::UTC;
        let friday_12th = ts("2025-12-12T00:30:00Z");
        let or = window("0 0 13 * FRI", "1h");
        let and = window("0 0 13 * +FRI", "1h");
        assert!(or.occurrence_containing(friday_12th, &utc).is_some());
        assert!(and.occurrence_containing(friday_12th, &utc).is_none());
        let friday_13th = ts("2025-06-13T00:30:00Z");
        assert!(and.occurrence_containing(friday_13th, &utc).is_some());
    }

    #[test]
    fn long_durations_saturate() {
        let w = window("0 0 1 1 *", "1000000w");
        let t = ts("2025-05-05T00:00:00Z");
        let (start, end) = w.occurrence_containing(t, &TimeZone::UTC).unwrap();
        assert_eq!(start, ts("2025-01-01T00:00:00Z"));
        assert_eq!(end, Timestamp::MAX);
        let cal = Calendar::new(TimeZone::UTC, vec![w]);
        assert!(cal.is_active(t));
        assert_eq!(cal.next_change_after(t), None);
    }
}
