//! Units a policy is written in: [`duration`]s (`15m`, `2h`), sample-or-time windows and warmups, and the
//! [`calendar`] of active windows in a time zone.

pub(crate) mod calendar;
pub(crate) mod duration;
