//! The per-job view the judges look at: what the evaluator keeps about a job ([`JobData`]), the policy's
//! job-independent context ([`PolicyEnv`]), and both seen at one instant ([`JobView`]).

use crate::history::gpu_series::GpuSeries;
use crate::history::job_series::JobSeries;
use crate::input::queue::QueueDemand;
use crate::input::sample::{JobPhase, JobSnapshot};
use crate::time::{Timestamp, add_seconds, seconds};
use crate::units::calendar::Calendar;

/// The job-independent context of an evaluation: the policy's calendar, GPU price and default size.
#[derive(Debug)]
pub struct PolicyEnv {
    pub calendar: Calendar,
    pub gpu_hour_cost: Option<f64>,
    pub assume_gpus: Option<f64>,
}

/// What the evaluator knows about a job, moved into the thread-local frame during an evaluation.
#[derive(Clone, Debug)]
pub struct JobData {
    /// The job's latest snapshot.
    pub snapshot: JobSnapshot,
    /// Its progress history.
    pub series: JobSeries,
    /// Its GPUs' history.
    pub gpu: GpuSeries,
    /// The demand queued behind it in Kueue; `None` when unknown (not a Kueue job, or no Kueue read).
    pub queue: Option<QueueDemand>,
    /// When the evaluator first saw the job; stands in for `running_since` when the job does not say.
    pub first_seen: Timestamp,
    /// What the job's cohort says of it, for the `cohort_*` script functions: set by the evaluator around
    /// the evaluation of a policy whose conditions call them, `None` otherwise.
    pub cohort: Option<Box<CohortFacts>>,
}

/// The job among its cohort (`spec.cohort`) at its latest position, for the `cohort_*` script functions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CohortFacts {
    /// Jobs in the cohort, the job included.
    pub size: usize,
    /// Per metric the job reported at its latest position: the cohort's values there.
    pub metrics: Vec<CohortMetric>,
}

/// One metric at the job's latest position, over the cohort's jobs that reported it there (the job included).
#[derive(Clone, Debug, PartialEq)]
pub struct CohortMetric {
    /// Canonical name.
    pub name: String,
    /// numpy's median of the values (NaN left out; NaN when none).
    pub median: f64,
    /// The best of them (the direction inferred from the name).
    pub best: f64,
    /// The job's rank among them, 1 the best (ties share the better rank); NaN when its value is NaN.
    pub rank: f64,
}

impl JobData {
    /// The job as seen by one policy at `now`: its GPU count falls back to the policy's `assumeGpus`.
    pub fn view<'a>(&'a self, env: &'a PolicyEnv, now: Timestamp) -> JobView<'a> {
        JobView {
            snapshot: &self.snapshot,
            series: &self.series,
            gpu: &self.gpu,
            now,
            first_seen: self.first_seen,
            gpus: self.snapshot.gpus.or(env.assume_gpus),
            gpu_hour_cost: env.gpu_hour_cost,
            calendar: &env.calendar,
        }
    }
}

/// Everything a detector may look at for one job at one instant.
#[derive(Clone, Copy)]
pub struct JobView<'a> {
    pub snapshot: &'a JobSnapshot,
    pub series: &'a JobSeries,
    /// The job's GPU readings.
    pub gpu: &'a GpuSeries,
    pub now: Timestamp,
    /// When the engine first saw the job (fallback for runtime and stall clocks).
    pub first_seen: Timestamp,
    /// GPUs held: the job's own figure, else the policy's `assumeGpus`.
    pub gpus: Option<f64>,
    /// The policy's `gpuHourCost`.
    pub gpu_hour_cost: Option<f64>,
    pub calendar: &'a Calendar,
}

impl JobView<'_> {
    /// The job's runtime since it last started running, in seconds.
    pub fn runtime_seconds(&self) -> f64 {
        let since = self.snapshot.running_since.unwrap_or(self.first_seen);
        seconds(since, self.now).max(0.0)
    }

    /// The last sign of progress: the latest sample that changed something (see
    /// [`JobSeries::last_progress_at`]), or the (re)start of the job if that is later.
    pub fn last_activity(&self) -> Timestamp {
        let started = self.snapshot.running_since.unwrap_or(self.first_seen);
        match self.series.last_progress_at {
            Some(t) if t > started => t,
            _ => started,
        }
    }

    /// Estimated end as reported by the latest sample: its time plus its ETA.
    pub fn estimated_end(&self) -> Option<Timestamp> {
        let at = self.series.last_sample_at?;
        let eta = self.series.last?.eta_seconds?;
        add_seconds(at, eta)
    }

    pub fn progress_percent(&self) -> Option<f64> {
        self.series.last.and_then(|l| l.progress_percent)
    }

    pub fn is_running(&self) -> bool {
        self.snapshot.phase == JobPhase::Running
    }
}
