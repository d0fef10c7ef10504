//! Units a policy is written in: [`duration`]s (`15m`, `2h`), sample-or-time windows and warmups, and the
//! [`calendar`] of active windows in a time zone; and the units every output prints: [`money`] (dollars,
//! GPU-hours) and [`span`]s of time, each with its one formatter.

pub(crate) mod calendar;
pub(crate) mod duration;
pub(crate) mod money;
pub(crate) mod span;
