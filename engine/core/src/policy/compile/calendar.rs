//! Step 1 of [`compile`](super::compile): the time zone and the active windows, as the policy's
//! [`Calendar`].

use crate::error::FieldError;
use crate::policy::PolicySpec;
use crate::units::calendar::{ActiveWindow, Calendar};
use crate::units::duration::PolicyDuration;

/// The policy's calendar; a bad time zone falls back to UTC and a bad window is left out, each reported.
pub(super) fn calendar(spec: &PolicySpec, errors: &mut Vec<FieldError>) -> Calendar {
    let tz = match spec.timezone.as_deref() {
        None => jiff::tz::TimeZone::UTC,
        Some(name) => Calendar::parse_time_zone(name).unwrap_or_else(|e| {
            errors.push(FieldError::new("spec.timezone", e.to_string()));
            jiff::tz::TimeZone::UTC
        }),
    };
    let mut windows = Vec::new();
    for (i, w) in spec.active_windows.iter().enumerate() {
        let path = format!("spec.activeWindows[{i}]");
        let duration = match w.duration.parse() {
            Ok(d) => Some(d),
            Err(e) => {
                errors.push(FieldError::new(format!("{path}.duration"), e));
                None
            }
        };
        match (ActiveWindow::parse(&w.start, duration.unwrap_or(PolicyDuration::from_secs(1))), duration) {
            (Ok(window), Some(_)) => windows.push(window),
            (Ok(_), None) => {}
            (Err(e), _) => errors.push(FieldError::new(format!("{path}.start"), e.to_string())),
        }
    }
    Calendar::new(tz, windows)
}
