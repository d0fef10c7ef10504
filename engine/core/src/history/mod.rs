//! What the engine remembers between samples: each metric's bounded history ([`metric_series`]), a job's
//! history over all its metrics ([`job_series`]), and the per-job view ([`job`]) that detectors, scripts
//! and the evaluator read.

pub(crate) mod job;
pub(crate) mod job_series;
pub(crate) mod metric_series;

#[cfg(test)]
mod tests;
