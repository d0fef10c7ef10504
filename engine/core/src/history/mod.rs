//! What the engine remembers between samples: bounded per-metric and per-job [`series`], and the per-job
//! view ([`job`]) that detectors, scripts and the evaluator read.

pub(crate) mod job;
pub(crate) mod series;
