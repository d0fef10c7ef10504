//! One progress sample, whatever Kubeflow flavour reported it.
//!
//! Both sources (upstream `status.trainerStatus` and the RHOAI `trainer.opendatahub.io/trainerStatus`
//! annotation) are turned into a [`ProgressSample`] by [`crate::input`]; everything downstream sees only
//! this type. Metric names are canonical (see [`crate::input::canonical_metric_name`]); values may be
//! NaN or ±Inf, because a diverged loss is information, not an error.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use crate::time::Timestamp;

/// Where a sample came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SampleSource {
    /// Upstream Kubeflow Trainer (>= v2.2): `status.trainerStatus`, pushed by the training pod.
    TrainerStatus,
    /// RHOAI 3.4: the `trainer.opendatahub.io/trainerStatus` annotation, polled by the RHOAI controller.
    Annotation,
}

/// A metric value under its canonical name. `value` may be non-finite.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// Canonical name (aliases resolved), shared `&'static str` for known names.
    pub name: Cow<'static, str>,
    /// The reported value.
    pub value: f64,
}

/// A normalized progress snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgressSample {
    /// `lastUpdatedTime` of the report. Deduplication and staleness use it.
    pub updated_at: Timestamp,
    /// Which status field the sample came from.
    pub source: SampleSource,
    /// 0–100.
    pub progress_percent: Option<f64>,
    /// Seconds the reporter expects the job still needs.
    pub eta_seconds: Option<f64>,
    /// Training step reached.
    pub current_step: Option<f64>,
    /// Steps the run will take.
    pub total_steps: Option<f64>,
    /// Epoch reached.
    pub current_epoch: Option<f64>,
    /// Epochs the run will take.
    pub total_epochs: Option<f64>,
    /// RHOAI's human summary (`"complete"`, `"failed at 62%"`, ...), kept for reasons and reports.
    pub summary: Option<String>,
    /// Every other metric, canonical names, in report order, no duplicates.
    pub metrics: Vec<Metric>,
}

impl ProgressSample {
    /// An empty sample at `updated_at` (used by builders and tests).
    pub fn empty(updated_at: Timestamp, source: SampleSource) -> Self {
        ProgressSample {
            updated_at,
            source,
            progress_percent: None,
            eta_seconds: None,
            current_step: None,
            total_steps: None,
            current_epoch: None,
            total_epochs: None,
            summary: None,
            metrics: Vec::new(),
        }
    }

    /// The value of a canonical metric, if reported.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.iter().find(|m| same_name(&m.name, name)).map(|m| m.value)
    }
}

/// Name equality that first compares addresses: canonical names are shared `&'static str`s (see
/// [`crate::input::interned`]), so the per-sample lookups of detectors and series rarely compare bytes.
#[inline]
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    (a.as_ptr() == b.as_ptr() && a.len() == b.len()) || a == b
}

/// `namespace/name` of a TrainJob.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct JobKey {
    /// The TrainJob's namespace.
    pub namespace: String,
    /// The TrainJob's name.
    pub name: String,
}

impl JobKey {
    /// The key `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        JobKey { namespace: namespace.into(), name: name.into() }
    }

    /// Parses `ns/name`.
    pub fn parse(s: &str) -> Option<Self> {
        let (ns, name) = s.split_once('/')?;
        if ns.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        Some(JobKey::new(ns, name))
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Where a TrainJob is in its life, from `spec.suspend` and `status.conditions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum JobPhase {
    /// Neither suspended nor finished.
    Running,
    /// `spec.suspend` is true (by trainwarden, Kueue or a user).
    Suspended,
    /// The `Complete` condition is true.
    Complete,
    /// The `Failed` condition is true.
    Failed,
}

impl JobPhase {
    /// Complete or Failed: the job will not run again.
    pub fn is_finished(self) -> bool {
        matches!(self, JobPhase::Complete | JobPhase::Failed)
    }
}

/// What the source knows about one TrainJob at one moment: identity, size, phase and, when the job reports
/// progress, the latest sample.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSnapshot {
    /// The job's `namespace/name`.
    pub key: JobKey,
    /// `metadata.labels`, for policy selectors.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// Where the job is in its life.
    pub phase: JobPhase,
    /// Accelerators held while running: `numNodes` × accelerators per node. `None` when the job does not say.
    pub gpus: Option<f64>,
    /// Kueue owns `spec.suspend` for jobs with a `kueue.x-k8s.io/queue-name` label.
    pub kueue_queue: Option<String>,
    /// `metadata.creationTimestamp`.
    pub created_at: Option<Timestamp>,
    /// When the job last started running (creation or last resume), for runtime budgets.
    pub running_since: Option<Timestamp>,
    /// The latest progress report, `None` when the job reports none.
    pub sample: Option<ProgressSample>,
    /// Keys of that report its format does not define (`status.trainerStatus.trainMetricz: unknown field;
    /// expected one of …`), left out of `sample`. Empty for a well-formed report.
    pub unknown_fields: Vec<crate::input::NormalizeError>,
}

impl JobSnapshot {
    /// A running job with no labels, no size and no sample.
    pub fn new(key: JobKey) -> Self {
        JobSnapshot {
            key,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            phase: JobPhase::Running,
            gpus: None,
            kueue_queue: None,
            created_at: None,
            running_since: None,
            sample: None,
            unknown_fields: Vec::new(),
        }
    }
}
