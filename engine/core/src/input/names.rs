//! Metric names: reporters' aliases mapped to canonical names (the table in the module doc of `input`),
//! returned as shared `&'static str`s without allocating, and the per-sample collector that keeps one value
//! per name.

use std::borrow::Cow;

use crate::input::sample::{Metric, ProgressSample};

/// A metric name the engine knows, under its canonical spelling ([`Known::text`]). The progress counters
/// come first: a sample carries them in its own fields, not as metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Known {
    CurrentStep,
    TotalSteps,
    CurrentEpoch,
    TotalEpochs,
    LearningRate,
    GradNorm,
    Throughput,
    Loss,
    TrainLoss,
    EvalLoss,
    Accuracy,
    EvalAccuracy,
    TrainRuntime,
    TrainStepsPerSecond,
    TotalFlos,
    EvalRuntime,
    EvalSamplesPerSecond,
    EvalStepsPerSecond,
}

impl Known {
    /// Every known name, in id order.
    pub(super) const ALL: [Known; 18] = [
        Known::CurrentStep,
        Known::TotalSteps,
        Known::CurrentEpoch,
        Known::TotalEpochs,
        Known::LearningRate,
        Known::GradNorm,
        Known::Throughput,
        Known::Loss,
        Known::TrainLoss,
        Known::EvalLoss,
        Known::Accuracy,
        Known::EvalAccuracy,
        Known::TrainRuntime,
        Known::TrainStepsPerSecond,
        Known::TotalFlos,
        Known::EvalRuntime,
        Known::EvalSamplesPerSecond,
        Known::EvalStepsPerSecond,
    ];

    /// The known name a reporter's name stands for (see the module table), by its exact spelling.
    pub(super) fn of(raw: &str) -> Option<Known> {
        Some(match raw {
            "current_step" | "currentStep" | "step" => Known::CurrentStep,
            "total_steps" | "totalSteps" | "max_steps" => Known::TotalSteps,
            "current_epoch" | "currentEpoch" | "epoch" => Known::CurrentEpoch,
            "total_epochs" | "totalEpochs" | "num_train_epochs" => Known::TotalEpochs,
            "lr" | "learning_rate" => Known::LearningRate,
            "gradient_norm" | "grad_norm" => Known::GradNorm,
            "throughput_samples_sec" | "train_samples_per_second" | "throughput_samples_per_second" => {
                Known::Throughput
            }
            "loss" => Known::Loss,
            "train_loss" => Known::TrainLoss,
            "eval_loss" => Known::EvalLoss,
            "accuracy" => Known::Accuracy,
            "eval_accuracy" => Known::EvalAccuracy,
            "train_runtime" => Known::TrainRuntime,
            "train_steps_per_second" => Known::TrainStepsPerSecond,
            "total_flos" => Known::TotalFlos,
            "eval_runtime" => Known::EvalRuntime,
            "eval_samples_per_second" => Known::EvalSamplesPerSecond,
            "eval_steps_per_second" => Known::EvalStepsPerSecond,
            _ => return None,
        })
    }

    /// The canonical spelling: one shared `&'static str` per name, which is what samples carry.
    pub(super) fn text(self) -> &'static str {
        match self {
            Known::CurrentStep => "current_step",
            Known::TotalSteps => "total_steps",
            Known::CurrentEpoch => "current_epoch",
            Known::TotalEpochs => "total_epochs",
            Known::LearningRate => "learning_rate",
            Known::GradNorm => "grad_norm",
            Known::Throughput => "throughput_samples_per_second",
            Known::Loss => "loss",
            Known::TrainLoss => "train_loss",
            Known::EvalLoss => "eval_loss",
            Known::Accuracy => "accuracy",
            Known::EvalAccuracy => "eval_accuracy",
            Known::TrainRuntime => "train_runtime",
            Known::TrainStepsPerSecond => "train_steps_per_second",
            Known::TotalFlos => "total_flos",
            Known::EvalRuntime => "eval_runtime",
            Known::EvalSamplesPerSecond => "eval_samples_per_second",
            Known::EvalStepsPerSecond => "eval_steps_per_second",
        }
    }

    /// The sample's field for a progress counter; `None` for a metric.
    pub(super) fn progress_field(self, sample: &mut ProgressSample) -> Option<&mut Option<f64>> {
        match self {
            Known::CurrentStep => Some(&mut sample.current_step),
            Known::TotalSteps => Some(&mut sample.total_steps),
            Known::CurrentEpoch => Some(&mut sample.current_epoch),
            Known::TotalEpochs => Some(&mut sample.total_epochs),
            _ => None,
        }
    }

    pub(super) fn is_progress(self) -> bool {
        matches!(self, Known::CurrentStep | Known::TotalSteps | Known::CurrentEpoch | Known::TotalEpochs)
    }
}

// `ALL` lists every name, and each has a bit in [`Collector`]'s `known_seen`.
const _: () = assert!(Known::ALL.len() == Known::EvalStepsPerSecond as usize + 1 && Known::ALL.len() <= 32);

/// A canonical metric name: a known one, or any other, kept as reported. An `Other` is never the text of a
/// `Known` (every canonical spelling is its own alias), so the two never need comparing.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Name {
    Known(Known),
    Other(String),
}

impl Name {
    /// `raw`, known or not.
    fn of(raw: String) -> Name {
        match Known::of(&raw) {
            Some(known) => Name::Known(known),
            None => Name::Other(raw),
        }
    }

    pub(super) fn is_progress(&self) -> bool {
        matches!(self, Name::Known(k) if k.is_progress())
    }

    pub(super) fn into_cow(self) -> Cow<'static, str> {
        match self {
            Name::Known(known) => Cow::Borrowed(known.text()),
            Name::Other(text) => Cow::Owned(text),
        }
    }
}

/// Canonical text of a known reported name (see the module table).
pub(super) fn known(raw: &str) -> Option<&'static str> {
    Known::of(raw).map(Known::text)
}

/// Canonical name of a plain (unprefixed) name.
pub(super) fn plain_name(raw: &str) -> Name {
    match Known::of(raw) {
        Some(known) => Name::Known(known),
        None => Name::Other(raw.to_owned()),
    }
}

/// Canonical name of a key of RHOAI's `evalMetrics` map: `eval_` is added unless already there.
pub(super) fn eval_name(key: &str) -> Name {
    if key.starts_with("eval_") {
        return plain_name(key);
    }
    // Known names without building `eval_{key}` first, so they stay allocation-free (the lookup of the built
    // name below would find them too).
    let known_eval = match key {
        "loss" => Some(Known::EvalLoss),
        "accuracy" => Some(Known::EvalAccuracy),
        "runtime" => Some(Known::EvalRuntime),
        "samples_per_second" => Some(Known::EvalSamplesPerSecond),
        "steps_per_second" => Some(Known::EvalStepsPerSecond),
        _ => None,
    };
    match known_eval {
        Some(known) => Name::Known(known),
        // Looked up again: what is built might be known after all.
        None => Name::of(format!("eval_{key}")),
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

/// A reporter's metric name under its canonical name (see [`canonical_metric_name`]).
pub(super) fn canonical_name(raw: &str) -> Name {
    if let Some(rest) = raw.strip_prefix("trainMetrics.").filter(|r| !r.is_empty()) {
        return plain_name(rest);
    }
    if let Some(rest) = raw.strip_prefix("evalMetrics.").filter(|r| !r.is_empty()) {
        return eval_name(rest);
    }
    plain_name(raw)
}

/// Map a reporter's metric name to the canonical one; unknown names are kept as they are (`Cow::Owned`).
///
/// Also understands the flattened RHOAI forms `trainMetrics.X` and `evalMetrics.X`.
pub(crate) fn canonical_metric_name(raw: &str) -> Cow<'static, str> {
    canonical_name(raw).into_cow()
}

/// What a metric name a rule watches is to the reports, which carry canonical names only (see the module
/// table of `input`): a rule naming anything but a canonical metric name or a custom one never matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetricName {
    /// A canonical metric name (`loss`, `eval_loss`, `learning_rate`).
    Canonical,
    /// Another spelling of a known name: reports carry it as the canonical one given (`lr` → `learning_rate`).
    Alias(&'static str),
    /// A progress counter, which fills the sample's fields and is never a metric series (`epoch`: read it
    /// with `epoch()`, `step()`).
    Counter(&'static str),
    /// Not a known name: a custom metric of the training code, or a typo.
    Custom,
}

/// What `name` is to the reports.
pub(crate) fn classify_metric_name(name: &str) -> MetricName {
    match canonical_name(name) {
        Name::Known(k) if k.is_progress() => MetricName::Counter(k.text()),
        Name::Known(k) if k.text() == name => MetricName::Canonical,
        Name::Known(k) => MetricName::Alias(k.text()),
        Name::Other(_) => MetricName::Custom,
    }
}

/// The canonical metric names (the progress counters, which are no metric, left out).
pub(crate) fn canonical_metric_names() -> impl Iterator<Item = &'static str> {
    Known::ALL.into_iter().filter(|k| !k.is_progress()).map(Known::text)
}

/// Collects the metrics of one sample, routing progress counters to their fields and merging duplicates.
pub(super) struct Collector {
    metrics: Vec<Metric>,
    /// The known names collected so far, one bit each: a known name is looked for in `metrics` only when it
    /// is there.
    known_seen: u32,
    /// Set once the list got too long for a linear duplicate scan of other names; [`Collector::finish`]
    /// then sorts.
    unchecked: bool,
}

/// Up to this many metrics, a name that is not known is looked for among them by a linear scan on insert
/// (known names never need one: a bit each says whether they are there).
pub(super) const LINEAR_DEDUP_MAX: usize = 32;

impl Collector {
    pub(super) fn with_capacity(n: usize) -> Self {
        Collector::reusing(Vec::with_capacity(n.min(LINEAR_DEDUP_MAX)))
    }

    /// A collector filling `metrics`, which must be empty.
    pub(super) fn reusing(metrics: Vec<Metric>) -> Self {
        debug_assert!(metrics.is_empty());
        Collector { metrics, known_seen: 0, unchecked: false }
    }

    /// Adds one reported value under its canonical name. `Err` is the message for the value's path.
    pub(super) fn add(
        &mut self,
        sample: &mut ProgressSample,
        name: Name,
        value: f64,
    ) -> Result<(), &'static str> {
        match name {
            Name::Known(known) => {
                if let Some(field) = known.progress_field(sample) {
                    if !(value.is_finite() && value >= 0.0) {
                        return Err("a step or epoch count must be a finite number >= 0");
                    }
                    *field = Some(value);
                    return Ok(());
                }
                let text = known.text();
                let bit = 1u32 << known as u8;
                if self.known_seen & bit != 0
                    && let Some(m) = self.metrics.iter_mut().find(|m| m.name == text)
                {
                    m.value = value;
                    return Ok(());
                }
                self.known_seen |= bit;
                self.metrics.push(Metric { name: Cow::Borrowed(text), value });
            }
            Name::Other(text) => {
                if !self.unchecked {
                    if let Some(m) = self.metrics.iter_mut().find(|m| m.name == text) {
                        m.value = value;
                        return Ok(());
                    }
                    self.unchecked = self.metrics.len() >= LINEAR_DEDUP_MAX;
                }
                self.metrics.push(Metric { name: Cow::Owned(text), value });
            }
        }
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
