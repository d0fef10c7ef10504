//! Job snapshots for tests: `job("ml", "ft").gpus(8.0).reporting(at_min(5), &[("loss", 1.2)])`.

use std::collections::BTreeMap;

use crate::input::sample::{JobKey, JobPhase, JobSnapshot, Metric, ProgressSample, SampleSource};
use crate::time::Timestamp;

/// A job snapshot being written (see [`job`]).
#[derive(Clone, Debug)]
pub struct JobBuilder {
    snapshot: JobSnapshot,
}

/// The TrainJob `namespace/name`: running, nothing known about it yet.
pub fn job(namespace: &str, name: &str) -> JobBuilder {
    JobBuilder { snapshot: JobSnapshot::new(JobKey::new(namespace, name)) }
}

impl JobBuilder {
    /// With the label `key=value`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.snapshot.labels.insert(key.into(), value.into());
        self
    }

    /// With these labels (replacing any before).
    pub fn labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.snapshot.labels = labels;
        self
    }

    /// With the annotation `key=value`.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.snapshot.annotations.insert(key.into(), value.into());
        self
    }

    /// With these annotations (replacing any before).
    pub fn annotations(mut self, annotations: BTreeMap<String, String>) -> Self {
        self.snapshot.annotations = annotations;
        self
    }

    /// Holding `gpus` GPUs while it runs.
    pub fn gpus(mut self, gpus: f64) -> Self {
        self.snapshot.gpus = Some(gpus);
        self
    }

    /// In phase `phase`.
    pub fn phase(mut self, phase: JobPhase) -> Self {
        self.snapshot.phase = phase;
        self
    }

    /// Created at `at`.
    pub fn created_at(mut self, at: Timestamp) -> Self {
        self.snapshot.created_at = Some(at);
        self
    }

    /// Running since `at` (as the TrainJob's Suspended condition says).
    pub fn running_since(mut self, at: Timestamp) -> Self {
        self.snapshot.running_since = Some(at);
        self
    }

    /// Queued in the Kueue LocalQueue `queue`.
    pub fn kueue_queue(mut self, queue: &str) -> Self {
        self.snapshot.kueue_queue = Some(queue.into());
        self
    }

    /// Carrying a progress report updated at `at` (upstream `trainerStatus`) with these metrics.
    pub fn reporting(mut self, at: Timestamp, metrics: &[(&str, f64)]) -> Self {
        let mut sample = ProgressSample::empty(at, SampleSource::TrainerStatus);
        sample.metrics =
            metrics.iter().map(|(n, v)| Metric { name: crate::input::interned(n), value: *v }).collect();
        self.snapshot.sample = Some(sample);
        self
    }

    /// The report's other fields (after [`JobBuilder::reporting`]): `sample.progress_percent = Some(50.0)`.
    pub fn sample(mut self, edit: impl FnOnce(&mut ProgressSample)) -> Self {
        let sample = self.snapshot.sample.as_mut().expect("reporting(…) first");
        edit(sample);
        self
    }

    /// The snapshot.
    pub fn build(self) -> JobSnapshot {
        self.snapshot
    }
}
