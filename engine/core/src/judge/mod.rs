//! Judging one job at one instant: the built-in [`detectors`] and Rhai [`script`] conditions. Both read the
//! job through [`crate::history::job::JobView`] and answer with findings; neither keeps the firing state.

pub(crate) mod detectors;
pub(crate) mod script;
