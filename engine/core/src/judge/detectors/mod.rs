//! Built-in detectors.
//!
//! A detector answers one question about one job ("has the loss stopped improving?"). Each is a pure
//! function of its parameters, the job's bounded history ([`JobSeries`]), the job's snapshot and the
//! evaluation time, plus — for the few that follow the Lightning/Keras "wait counter" semantics — a small
//! per-(rule, job) [`DetectorState`] that [`Detector::observe`] advances on every new sample. No detector does
//! I/O or reads a clock: `now` is an input, so replay and tests are exact.
//!
//! Each detector lives in its own module with its documentation, an example and its tests, VRL style.
//! [`DETECTORS`] is the catalog; [`build`] turns a rule's `uses` + `with` into a [`Detector`], reporting every
//! parameter problem with its field path.

use std::fmt;

use crate::error::FieldError;
use crate::history::job::JobView;
use crate::history::job_series::JobSeries;
use crate::input::sample::ProgressSample;
use crate::time::Timestamp;

mod budget;
pub(crate) mod cohort;
mod diverging;
mod eta;
mod gpu_idle;
mod hang;
pub(crate) mod levels;
mod median_stop;
mod no_gain;
mod non_finite;
mod params;
mod percentile;
mod plateau;
mod sagemaker;
mod stalled;
mod successive_halving;

pub(crate) use diverging::Diverging;
pub(crate) use eta::{EtaAfter, EtaExceeds, parse_deadline};
pub(crate) use gpu_idle::{GpuIdle, Which as GpuWhich};
pub(crate) use hang::Hang;
pub(crate) use non_finite::NonFinite;
pub(crate) use params::{DirectionParam, Params};
pub(crate) use plateau::PlateauState;
pub(crate) use sagemaker::OvertrainingState;
pub(crate) use stalled::Stalled;

/// Why a detector fired: a sentence for humans and the values behind it for machines.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Finding {
    pub summary: String,
    pub values: Vec<(String, f64)>,
    /// What kind of waste this finding signals; savings accounting uses it.
    pub kind: FindingKind,
}

/// Savings are counted to the job's estimated end, except for a stall: a hung job never reaches its ETA, so
/// the time saved runs to the end of the unattended window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum FindingKind {
    Progress,
    Stall,
}

impl Finding {
    pub fn new(summary: impl Into<String>) -> Self {
        Finding { summary: summary.into(), values: Vec::new(), kind: FindingKind::Progress }
    }

    pub fn value(mut self, name: &str, v: f64) -> Self {
        self.values.push((name.to_string(), v));
        self
    }

    pub fn stall(mut self) -> Self {
        self.kind = FindingKind::Stall;
        self
    }
}

/// Per-(rule, job) memory of the stateful detectors.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum DetectorState {
    #[default]
    None,
    Plateau(PlateauState),
    Overtraining(OvertrainingState),
    /// The level trackers of `diverging` with `worseByPct`.
    Levels(Box<levels::Tracks>),
    /// `no_expected_gain`: level trackers and the log-spaced history of each watched metric.
    NoGain(Box<no_gain::NoGainState>),
    /// `non_finite` with `logs`: consecutive logged values that were non-finite.
    Streak(u64),
    /// A cohort detector stopped the job at a report (see [`cohort`]); it stays stopped.
    CohortStop(Box<Finding>),
}

impl DetectorState {
    /// The finding of a cohort detector's stop, if it stopped the job.
    pub(crate) fn cohort_stop(&self) -> Option<Finding> {
        match self {
            DetectorState::CohortStop(f) => Some((**f).clone()),
            _ => None,
        }
    }
}

/// The metrics a finding of a levelled rule was about: its `level:<metric>` values, else `fallback`.
pub(crate) fn judged_from_finding(
    fallback: Option<(&str, crate::history::metric_series::Direction)>,
    finding: &std::collections::BTreeMap<String, f64>,
) -> Vec<(String, crate::history::metric_series::Direction)> {
    let named: Vec<(String, crate::history::metric_series::Direction)> = finding
        .keys()
        .filter_map(|k| k.strip_prefix("level:"))
        .map(|m| (m.to_string(), crate::history::metric_series::Direction::infer(m)))
        .collect();
    if named.is_empty() { fallback.map(|(m, d)| (m.to_string(), d)).into_iter().collect() } else { named }
}

/// A configured detector.
pub trait Detector: fmt::Debug + Send + Sync {
    /// Advances per-job state with a new (deduplicated) sample, after it was recorded in `series`.
    fn observe(&self, _state: &mut DetectorState, _series: &JobSeries, _sample: &ProgressSample) {}

    /// Whether the detector fires now, and why.
    fn check(&self, state: &DetectorState, view: &JobView<'_>) -> Option<Finding>;

    /// For time-driven detectors: the earliest time at which the answer of [`Detector::check`] may change
    /// with no new sample arriving (a stall deadline, a runtime budget running out, an ETA that stops
    /// exceeding its limit). The evaluator sets a timer for it, whatever the rule's state, so such rules fire
    /// and resolve on time instead of at the next evaluation interval; a time already past is ignored.
    /// `None`: only new samples can change the answer.
    fn wake_at(&self, _state: &DetectorState, _view: &JobView<'_>) -> Option<Timestamp> {
        None
    }

    /// Whether the answer of [`Detector::check`] can change as time passes with no new sample in a way
    /// [`Detector::wake_at`] does not announce (it can turn false again, or true at no computable time). The
    /// evaluator re-checks rules with such detectors every `eval_interval`; all others only on samples and
    /// timers, so idle time costs nothing for them. `true` unless a detector shows otherwise.
    fn reads_the_clock(&self) -> bool {
        true
    }

    /// Durations the detector waits on, checked against the policy's sampling interval.
    fn windows(&self) -> Vec<(&'static str, crate::units::duration::PolicyDuration)> {
        Vec::new()
    }

    /// The metric whose progress the detector judges, and which way it improves: what a backtest measures
    /// a stop's regret on. `None` for detectors about time, cost or every metric at once.
    fn watched_metric(&self) -> Option<(&str, crate::history::metric_series::Direction)> {
        None
    }

    /// The metrics one of its findings is about, given the finding's values: a backtest judges the stop on
    /// them (a stop is false when any of them improved afterwards). The watched metric, unless the detector
    /// watches several (`overtraining`'s training half, `metric: auto`).
    fn judged_metrics(
        &self,
        _finding: &std::collections::BTreeMap<String, f64>,
    ) -> Vec<(String, crate::history::metric_series::Direction)> {
        self.watched_metric().map(|(m, d)| (m.to_string(), d)).into_iter().collect()
    }

    /// For a detector that judges a job against its cohort (`median_stop`, `percentile`,
    /// `successive_halving`): how. The evaluator feeds it every report of every job of the cohort and keeps
    /// its stop as the job's [`DetectorState::CohortStop`], which [`Detector::check`] returns.
    fn cohort(&self) -> Option<&dyn cohort::CohortJudge> {
        None
    }

    /// Whether the detector judges the job's GPU readings.
    fn reads_gpus(&self) -> bool {
        false
    }

    /// Whether the detector needs the policy's gpuHourCost (validation checks that it is set).
    fn needs_gpu_hour_cost(&self) -> bool {
        false
    }
}

/// One documented parameter of a detector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamDoc {
    /// The key in `with`.
    pub name: &'static str,
    /// What it takes (`duration`, `number`, ...).
    pub ty: &'static str,
    /// Its default, or `required`.
    pub default: &'static str,
    /// What it means.
    pub doc: &'static str,
}

/// One catalog entry: name, what it does, its parameters, an example `with`.
pub struct DetectorInfo {
    /// The name rules use in `detector:`.
    pub name: &'static str,
    /// What it detects, one sentence.
    pub summary: &'static str,
    /// The keys it takes in `with`.
    pub params: &'static [ParamDoc],
    /// An example `with`, as inline JSON.
    pub example: &'static str,
    build: fn(&mut Params<'_>) -> Option<Box<dyn Detector>>,
}

/// The detector catalog, in documentation order.
pub const DETECTORS: &[DetectorInfo] = &[
    plateau::INFO,
    diverging::INFO,
    no_gain::INFO,
    non_finite::INFO,
    stalled::INFO,
    eta::INFO_AFTER,
    eta::INFO_EXCEEDS,
    budget::INFO,
    sagemaker::INFO_LOSS_NOT_DECREASING,
    sagemaker::INFO_OVERTRAINING,
    stalled::INFO_STALLED_TRAINING,
    gpu_idle::INFO,
    hang::INFO,
    median_stop::INFO,
    percentile::INFO,
    successive_halving::INFO,
];

/// Whether the detector `name` judges a job against its cohort (`spec.cohort`).
pub fn is_cohort_detector(name: &str) -> bool {
    matches!(name, "median_stop" | "percentile" | "successive_halving")
}

/// Looks up a detector by name.
pub(crate) fn info(name: &str) -> Option<&'static DetectorInfo> {
    DETECTORS.iter().find(|d| d.name == name)
}

/// Builds the detector `name` from its `with` parameters. All problems are returned, each with its path
/// under `path` (for example `spec.rules[0].with`).
pub(crate) fn build(
    name: &str,
    with: Option<&serde_json::Map<String, serde_json::Value>>,
    path: &str,
) -> Result<Box<dyn Detector>, Vec<FieldError>> {
    let Some(info) = info(name) else {
        return Err(vec![FieldError::new(
            path.trim_end_matches(".with").to_string() + ".uses",
            format!(
                "unknown detector {name:?}; known detectors: {}",
                DETECTORS.iter().map(|d| d.name).collect::<Vec<_>>().join(", ")
            ),
        )]);
    };
    let empty = serde_json::Map::new();
    let mut params = Params::new(with.unwrap_or(&empty), path);
    let detector = (info.build)(&mut params);
    let errors = params.finish();
    match detector {
        Some(d) if errors.is_empty() => Ok(d),
        _ => Err(errors),
    }
}

#[cfg(test)]
pub(crate) mod testkit {
    //! Builders for detector tests: a job, a series fed from plain values, a view at a time.
    use super::*;
    use crate::input::sample::{JobKey, JobSnapshot, Metric, SampleSource};
    use crate::units::calendar::Calendar;

    pub(crate) fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + secs).unwrap() // 2026-01-01T00:00:00Z
    }

    pub(crate) struct Job {
        pub snapshot: JobSnapshot,
        pub series: JobSeries,
        pub gpu: crate::history::gpu_series::GpuSeries,
        pub state: DetectorState,
        pub calendar: Calendar,
        pub gpus: Option<f64>,
        pub cost: Option<f64>,
    }

    impl Job {
        pub(crate) fn new() -> Self {
            Job {
                snapshot: JobSnapshot::new(JobKey::new("ns", "job")),
                series: JobSeries::new(t(0)),
                gpu: Default::default(),
                state: DetectorState::None,
                calendar: Calendar::new(jiff::tz::TimeZone::UTC, Vec::new()),
                gpus: None,
                cost: None,
            }
        }

        /// Records a sample at `secs` with the given metrics and progress fields, running `detector.observe`.
        pub(crate) fn sample(
            &mut self,
            detector: &dyn Detector,
            secs: i64,
            metrics: &[(&'static str, f64)],
            progress: Option<f64>,
            eta: Option<f64>,
        ) {
            let mut s = ProgressSample::empty(t(secs), SampleSource::TrainerStatus);
            s.metrics = metrics.iter().map(|(n, v)| Metric { name: (*n).into(), value: *v }).collect();
            s.progress_percent = progress;
            s.eta_seconds = eta;
            if self.series.record(&s) == crate::history::job_series::Recorded::New {
                detector.observe(&mut self.state, &self.series, &s);
            }
        }

        /// Records a sample at `secs` at `step` of a run of `total` steps, running `detector.observe`.
        pub(crate) fn sample_at_step(
            &mut self,
            detector: &dyn Detector,
            secs: i64,
            metrics: &[(&'static str, f64)],
            step: f64,
            total: f64,
        ) {
            let mut s = ProgressSample::empty(t(secs), SampleSource::TrainerStatus);
            s.metrics = metrics.iter().map(|(n, v)| Metric { name: (*n).into(), value: *v }).collect();
            s.current_step = Some(step);
            s.total_steps = Some(total);
            s.progress_percent = Some((100.0 * step / total).floor().min(99.0));
            if self.series.record(&s) == crate::history::job_series::Recorded::New {
                detector.observe(&mut self.state, &self.series, &s);
            }
        }

        /// Records a sample at `secs` at `step` of `total` steps and in `epoch`, running `detector.observe`.
        pub(crate) fn sample_at_epoch(
            &mut self,
            detector: &dyn Detector,
            secs: i64,
            metrics: &[(&'static str, f64)],
            (step, total): (f64, f64),
            epoch: f64,
        ) {
            let mut s = ProgressSample::empty(t(secs), SampleSource::TrainerStatus);
            s.metrics = metrics.iter().map(|(n, v)| Metric { name: (*n).into(), value: *v }).collect();
            s.current_step = Some(step);
            s.total_steps = Some(total);
            s.current_epoch = Some(epoch);
            s.progress_percent = Some((100.0 * step / total).floor().min(99.0));
            if self.series.record(&s) == crate::history::job_series::Recorded::New {
                detector.observe(&mut self.state, &self.series, &s);
            }
        }

        /// Records GPU readings (one utilization per GPU) at `secs`.
        pub(crate) fn gpu(&mut self, secs: i64, utils: &[f64]) {
            let gpus = utils
                .iter()
                .enumerate()
                .map(|(i, u)| crate::input::gpu::GpuReading {
                    id: format!("ft-node-0-0/{i}"),
                    util: Some(*u),
                    engine_active: None,
                    power: Some(60.0 + 2.5 * u),
                    fb_used: None,
                })
                .collect();
            self.gpu.record(&crate::input::gpu::GpuSample { at: t(secs), gpus });
        }

        /// Feeds `values` of `metric` one every `every` seconds starting at 0; returns the last time.
        pub(crate) fn feed(
            &mut self,
            detector: &dyn Detector,
            metric: &'static str,
            every: i64,
            values: &[f64],
        ) -> i64 {
            let mut last = 0;
            for (i, v) in values.iter().enumerate() {
                last = i as i64 * every;
                self.sample(detector, last, &[(metric, *v)], None, None);
            }
            last
        }

        fn view(&self, now_secs: i64) -> JobView<'_> {
            JobView {
                snapshot: &self.snapshot,
                series: &self.series,
                gpu: &self.gpu,
                now: t(now_secs),
                first_seen: t(0),
                gpus: self.gpus.or(self.snapshot.gpus),
                gpu_hour_cost: self.cost,
                calendar: &self.calendar,
            }
        }

        pub(crate) fn check(&self, detector: &dyn Detector, now_secs: i64) -> Option<Finding> {
            detector.check(&self.state, &self.view(now_secs))
        }

        pub(crate) fn wake_at(&self, detector: &dyn Detector, now_secs: i64) -> Option<Timestamp> {
            detector.wake_at(&self.state, &self.view(now_secs))
        }
    }

    /// Builds a detector from a JSON `with` object, panicking with the errors (tests only).
    pub(crate) fn detector(name: &str, with: serde_json::Value) -> Box<dyn Detector> {
        let map = with.as_object().cloned().unwrap_or_default();
        match build(name, Some(&map), "with") {
            Ok(d) => d,
            Err(e) => panic!("{name}: {e:?}"),
        }
    }

    /// The errors building a detector produces.
    pub(crate) fn errors(name: &str, with: serde_json::Value) -> Vec<String> {
        let map = with.as_object().cloned().unwrap_or_default();
        match build(name, Some(&map), "with") {
            Ok(d) => panic!("expected errors, got {d:?}"),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_matches_the_names_the_crd_schema_accepts() {
        let names: Vec<&str> = DETECTORS.iter().map(|d| d.name).collect();
        assert_eq!(names, crate::policy::DETECTOR_NAMES.to_vec());
    }

    #[test]
    fn every_catalog_example_builds() {
        for d in DETECTORS {
            let with: serde_json::Value =
                serde_json::from_str(d.example).unwrap_or_else(|e| panic!("{}: {e}", d.name));
            let map = with.as_object().cloned().unwrap();
            if let Err(e) = build(d.name, Some(&map), "with") {
                panic!("example of {} does not build: {e:?}", d.name);
            }
        }
    }

    #[test]
    fn the_cohort_detectors_are_the_ones_with_a_cohort_judge() {
        for d in DETECTORS {
            let with: serde_json::Value = serde_json::from_str(d.example).unwrap();
            let built = build(d.name, with.as_object(), "with").unwrap();
            assert_eq!(built.cohort().is_some(), is_cohort_detector(d.name), "{}", d.name);
        }
    }

    #[test]
    fn unknown_detector_lists_the_known_ones() {
        let e = build("plato", None, "spec.rules[2].with").unwrap_err();
        assert_eq!(e[0].path, "spec.rules[2].uses");
        assert!(e[0].message.contains("unknown detector \"plato\""));
        assert!(e[0].message.contains("plateau"));
    }
}
