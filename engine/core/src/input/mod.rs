//! Turns the two Kubeflow progress formats, and the TrainJob that carries them, into [`ProgressSample`]s
//! and [`JobSnapshot`]s.
//!
//! - [`from_trainer_status`]: upstream Kubeflow Trainer (>= v2.2) `status.trainerStatus`. Metric values are
//!   strings (`"0.2347"`, `"nan"`, `"-inf"`); non-finite values are kept.
//! - [`from_annotation`]: the RHOAI 3.4 `trainer.opendatahub.io/trainerStatus` annotation (a JSON string).
//!   A `null` metric value is what the RHOAI controller makes of NaN/±Inf, so it becomes `f64::NAN`. Bare
//!   Python tokens (`NaN`, `Infinity`, `-Infinity`) are accepted too, so [`from_metrics_response`] can read
//!   a `GET :28080/metrics` body directly.
//! - [`from_trainjob`]: a whole watched TrainJob; prefers `status.trainerStatus`, then the annotation.
//!
//! Every malformed input gives a [`NormalizeError`] naming the field path; nothing here panics. A key the
//! format does not define (Trainer 2.2's `TrainerStatus` and its metrics, RHOAI 3.4's `AnnotationStatus`) is
//! malformed too, so a misspelt `trainMetricz` cannot make a rule silently never fire: the `from_*` readers
//! reject it (`trainerStatus.trainMetricz: unknown field; expected one of …`), while [`from_trainjob`] reads a
//! live job without it and lists it in [`JobSnapshot::unknown_fields`](sample::JobSnapshot::unknown_fields).
//!
//! # Metric names
//!
//! Reporters name the same thing differently. [`canonical_metric_name`] maps them (exact, case-sensitive
//! match); any other name is kept verbatim. The four progress counters are not metrics: they fill the
//! sample's fields wherever they appear (upstream `metrics[]`, RHOAI top level or metric maps).
//!
//! | reported as | canonical | goes to |
//! | --- | --- | --- |
//! | `current_step`, `currentStep`, `step` | `current_step` | [`ProgressSample::current_step`] |
//! | `total_steps`, `totalSteps`, `max_steps` | `total_steps` | [`ProgressSample::total_steps`] |
//! | `current_epoch`, `currentEpoch`, `epoch` | `current_epoch` | [`ProgressSample::current_epoch`] |
//! | `total_epochs`, `totalEpochs`, `num_train_epochs` | `total_epochs` | [`ProgressSample::total_epochs`] |
//! | `lr`, `learning_rate` | `learning_rate` | metrics |
//! | `gradient_norm`, `grad_norm` | `grad_norm` | metrics |
//! | `throughput_samples_sec`, `train_samples_per_second`, `throughput_samples_per_second` | `throughput_samples_per_second` | metrics |
//! | `trainMetrics.X` (RHOAI `trainMetrics` map) | canonical of `X` (`trainMetrics.loss` → `loss`) | as `X` |
//! | `evalMetrics.X` (RHOAI `evalMetrics` map) | canonical of `X` if it starts with `eval_`, else of `eval_X` | as that name |
//! | `train_loss` | `train_loss` (HF's final average loss, not `loss`) | metrics |
//!
//! These canonical names are returned without allocating: the ones above plus `loss`, `eval_loss`,
//! `accuracy`, `eval_accuracy`, `train_runtime`, `train_steps_per_second`, `total_flos`, `eval_runtime`,
//! `eval_samples_per_second`, `eval_steps_per_second`.
//!
//! A name reported twice in one sample keeps the position of its first occurrence and the value of its
//! last.

pub(crate) mod checkpoint_report;
mod compact_line;
pub(crate) mod gpu;
mod json;
pub(crate) mod merge;
pub(crate) mod names;
pub(crate) mod namespaces;
mod object_line;
pub(crate) mod queue;
pub(crate) mod reorder;
mod rhoai;
pub(crate) mod sample;
pub(crate) mod stream;
mod trainer_status;
mod trainjob;

pub(crate) use names::{canonical_metric_name, interned};
pub use rhoai::{TRAINER_STATUS_ANNOTATION, from_annotation, from_metrics_response};
pub use trainer_status::from_trainer_status;
pub(crate) use trainer_status::{TrainerStatusWire, from_trainer_status_wire};
pub use trainjob::from_trainjob;

/// A malformed input: `path` names the offending field (root errors use `$`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct NormalizeError {
    /// The offending field, for example `status.trainerStatus.progressPercentage` (`$` for the root).
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

impl NormalizeError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        NormalizeError { path: path.into(), message: message.into() }
    }
}

#[cfg(test)]
mod tests;
