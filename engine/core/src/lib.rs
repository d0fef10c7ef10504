//! trainwarden's evaluation core.
//!
//! The data path, one module each: [`normalize`] (both Kubeflow progress formats into one [`sample`]) →
//! [`series`] (bounded per-job history) → [`evaluate`] ([`detectors`], Rhai [`script`]s, the firing
//! lifecycle; produces action intents). [`compile`] validates and compiles policies ([`policy`] holds the
//! CRD spec types), [`replay`] and [`testing`] drive the evaluator on recorded or synthetic streams.
//!
//! Nothing here talks to Kubernetes, starts a runtime, reads a file or a clock: time is an argument.
#![forbid(unsafe_code)]

pub mod calendar;
pub mod compile;
pub mod detectors;
pub mod duration;
pub mod error;
pub mod evaluate;
pub mod normalize;
pub mod notation;
pub mod policy;
pub mod receiver;
pub mod replay;
pub mod sample;
pub mod script;
pub mod series;
pub mod stream;
pub mod template;
pub mod testing;

#[cfg(test)]
mod robustness_tests;
