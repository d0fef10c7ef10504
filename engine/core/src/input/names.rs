//! Metric names: reporters' aliases mapped to canonical names (the table in the module doc of `input`),
//! returned as shared `&'static str`s without allocating, and the per-sample collector that keeps one value
//! per name.

use std::borrow::Cow;

use crate::input::sample::{Metric, ProgressSample};

pub(super) const CURRENT_STEP: &str = "current_step";
pub(super) const TOTAL_STEPS: &str = "total_steps";
pub(super) const CURRENT_EPOCH: &str = "current_epoch";
pub(super) const TOTAL_EPOCHS: &str = "total_epochs";

/// Canonical name of a known reported name (see the module table).
pub(super) fn known(raw: &str) -> Option<&'static str> {
    Some(match raw {
        "current_step" | "currentStep" | "step" => CURRENT_STEP,
        "total_steps" | "totalSteps" | "max_steps" => TOTAL_STEPS,
        "current_epoch" | "currentEpoch" | "epoch" => CURRENT_EPOCH,
        "total_epochs" | "totalEpochs" | "num_train_epochs" => TOTAL_EPOCHS,
        "lr" | "learning_rate" => "learning_rate",
        "gradient_norm" | "grad_norm" => "grad_norm",
        "throughput_samples_sec" | "train_samples_per_second" | "throughput_samples_per_second" => {
            "throughput_samples_per_second"
        }
        "loss" => "loss",
        "train_loss" => "train_loss",
        "eval_loss" => "eval_loss",
        "accuracy" => "accuracy",
        "eval_accuracy" => "eval_accuracy",
        "train_runtime" => "train_runtime",
        "train_steps_per_second" => "train_steps_per_second",
        "total_flos" => "total_flos",
        "eval_runtime" => "eval_runtime",
        "eval_samples_per_second" => "eval_samples_per_second",
        "eval_steps_per_second" => "eval_steps_per_second",
        _ => return None,
    })
}

/// Canonical name of a plain (unprefixed) name.
pub(super) fn plain_name(raw: &str) -> Cow<'static, str> {
    match known(raw) {
        Some(c) => Cow::Borrowed(c),
        None => Cow::Owned(raw.to_owned()),
    }
}

/// Canonical name of a key of RHOAI's `evalMetrics` map: `eval_` is added unless already there.
pub(super) fn eval_name(key: &str) -> Cow<'static, str> {
    if key.starts_with("eval_") {
        return plain_name(key);
    }
    // Look up without building `eval_{key}` first, so known names stay allocation-free.
    let known_eval = match key {
        "loss" => Some("eval_loss"),
        "accuracy" => Some("eval_accuracy"),
        "runtime" => Some("eval_runtime"),
        "samples_per_second" => Some("eval_samples_per_second"),
        "steps_per_second" => Some("eval_steps_per_second"),
        _ => None,
    };
    match known_eval {
        Some(c) => Cow::Borrowed(c),
        None => Cow::Owned(format!("eval_{key}")),
    }
}

/// A canonical metric name as the `&'static str` samples carry (so lookups can match by address before
/// comparing bytes, see [`crate::input::sample::same_name`]); other names are copied. Aliases are not resolved.
pub(crate) fn interned(name: &str) -> Cow<'static, str> {
    match known(name) {
        Some(canonical) if canonical == name => Cow::Borrowed(canonical),
        _ => Cow::Owned(name.to_owned()),
    }
}

/// Map a reporter's metric name to the canonical one; unknown names are kept as they are (`Cow::Owned`).
///
/// Also understands the flattened RHOAI forms `trainMetrics.X` and `evalMetrics.X`.
pub(crate) fn canonical_metric_name(raw: &str) -> Cow<'static, str> {
    if let Some(rest) = raw.strip_prefix("trainMetrics.").filter(|r| !r.is_empty()) {
        return plain_name(rest);
    }
    if let Some(rest) = raw.strip_prefix("evalMetrics.").filter(|r| !r.is_empty()) {
        return eval_name(rest);
    }
    plain_name(raw)
}

/// Which progress field a canonical name fills, if any.
pub(super) fn progress_field<'s>(
    sample: &'s mut ProgressSample,
    canonical: &str,
) -> Option<&'s mut Option<f64>> {
    match canonical {
        CURRENT_STEP => Some(&mut sample.current_step),
        TOTAL_STEPS => Some(&mut sample.total_steps),
        CURRENT_EPOCH => Some(&mut sample.current_epoch),
        TOTAL_EPOCHS => Some(&mut sample.total_epochs),
        _ => None,
    }
}

pub(super) fn is_progress_name(canonical: &str) -> bool {
    matches!(canonical, CURRENT_STEP | TOTAL_STEPS | CURRENT_EPOCH | TOTAL_EPOCHS)
}

/// Collects the metrics of one sample, routing progress counters to their fields and merging duplicates.
pub(super) struct Collector {
    pub(super) metrics: Vec<Metric>,
    /// Set once the list got too long for a linear duplicate scan; [`Collector::finish`] then sorts.
    pub(super) unchecked: bool,
}

/// Up to this many metrics, duplicates are found by a linear scan on insert.
pub(super) const LINEAR_DEDUP_MAX: usize = 32;

impl Collector {
    pub(super) fn with_capacity(n: usize) -> Self {
        Collector { metrics: Vec::with_capacity(n.min(LINEAR_DEDUP_MAX)), unchecked: false }
    }

    /// Adds one reported value under its canonical name. `Err` is the message for the value's path.
    pub(super) fn add(
        &mut self,
        sample: &mut ProgressSample,
        name: Cow<'static, str>,
        value: f64,
    ) -> Result<(), &'static str> {
        if let Some(field) = progress_field(sample, &name) {
            if !(value.is_finite() && value >= 0.0) {
                return Err("a step or epoch count must be a finite number >= 0");
            }
            *field = Some(value);
            return Ok(());
        }
        if !self.unchecked {
            if let Some(m) = self.metrics.iter_mut().find(|m| m.name == name) {
                m.value = value;
                return Ok(());
            }
            self.unchecked = self.metrics.len() >= LINEAR_DEDUP_MAX;
        }
        self.metrics.push(Metric { name, value });
        Ok(())
    }

    pub(super) fn finish(mut self) -> Vec<Metric> {
        if self.unchecked {
            dedup_sorted(&mut self.metrics);
        }
        self.metrics
    }
}

/// O(n log n) duplicate merge for long metric lists: first position, last value.
pub(super) fn dedup_sorted(metrics: &mut Vec<Metric>) {
    let mut order: Vec<usize> = (0..metrics.len()).collect();
    // Stable, so equal names stay in report order.
    order.sort_by(|&a, &b| metrics[a].name.cmp(&metrics[b].name));
    let mut keep = vec![true; metrics.len()];
    let mut start = 0;
    while start < order.len() {
        let first = order[start];
        let mut end = start + 1;
        while end < order.len() && metrics[order[end]].name == metrics[first].name {
            keep[order[end]] = false;
            end += 1;
        }
        metrics[first].value = metrics[order[end - 1]].value;
        start = end;
    }
    let mut i = 0;
    metrics.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}
