//! Policies: the CRD [`spec`] types, their validation and [`compile`]ation into what the evaluator runs,
//! and the notification side of a policy ([`receiver`]s and message [`template`]s); [`exception`]: the
//! ProgressPolicyException objects; [`object`]: what every object of this API is checked for.

pub(crate) mod compile;
pub(crate) mod exception;
pub(crate) mod object;
pub(crate) mod positions;
pub(crate) mod receiver;
pub(crate) mod schema;
pub(crate) mod spec;
pub(crate) mod template;

pub use spec::*;
