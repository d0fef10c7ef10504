//! `stalled`: no new progress sample for `after` while the job runs.
//!
//! Time-driven: it fires with no new sample arriving, because the engine re-evaluates jobs on a timer
//! (replay does the same on the stream's clock). The clock starts at the latest sample or the job's last
//! (re)start, whichever is later, so a resumed job gets a fresh grace period. By default a job must have
//! reported at least once (`requireFirstSample: true`), so jobs without progress instrumentation are not
//! mistaken for hung ones; set it to false to also catch jobs that hang before their first report (for
//! example in NCCL initialisation).
//!
//! **The job's own rhythm** (`factor`, the catalog's way): a job that evaluates for 1.8 hours, saves
//! checkpoints for 20 minutes, or logs every 50 minutes without reports in between is silent that long
//! when nothing is wrong, and a fixed limit either kills it during its pause or waits half a night for a
//! real hang of a job that reports every 5 seconds (the status server's throttle). With `factor`, the limit
//! is `factor` × the longest silence the job has already shown between two reports that changed something
//! (its series keeps its longest silences, leaving out one that spans a suspension), but never below
//! `floor` nor above `ceiling`; a job that has not shown one yet (fewer than two such reports, or one that
//! never reported, with `requireFirstSample: false`) gets the fixed `after`. The first evaluation pause of a
//! job is not in its rhythm yet: `floor` (or `after`) must cover it.
//!
//! `stalled_training` is SageMaker Debugger's StalledTrainingRule with its parameter name and default:
//! `threshold` in seconds (1800).
//!
//! Examples: `uses: stalled`, `with: {after: 30m}`; `with: {after: 2h, factor: 3, floor: 1h, ceiling: 12h}`.

use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};

use crate::history::job::JobView;

use crate::time::Timestamp;
use crate::time::{add_seconds, fmt_secs, seconds};
use crate::units::duration::PolicyDuration;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "stalled",
    summary: "No new progress sample for `after` while the job is running.",
    params: &[
        ParamDoc { name: "after", ty: "duration", default: "30m", doc: "Silence that counts as a stall." },
        ParamDoc {
            name: "requireFirstSample",
            ty: "bool",
            default: "true",
            doc: "Only jobs that reported at least once can stall.",
        },
        ParamDoc {
            name: "factor",
            ty: "number",
            default: "none",
            doc: "Learn the rhythm: the limit is factor × the longest silence the job has shown.",
        },
        ParamDoc {
            name: "floor",
            ty: "duration",
            default: "after",
            doc: "The learned limit is never shorter.",
        },
        ParamDoc {
            name: "ceiling",
            ty: "duration",
            default: "24h",
            doc: "The learned limit is never longer.",
        },
    ],
    example: r#"{"after": "2h", "factor": 3, "floor": "1h", "ceiling": "12h"}"#,
    build,
};

pub(super) const INFO_STALLED_TRAINING: DetectorInfo = DetectorInfo {
    name: "stalled_training",
    summary: "SageMaker Debugger StalledTrainingRule: no new sample for `threshold` seconds.",
    params: &[ParamDoc {
        name: "threshold",
        ty: "seconds",
        default: "1800",
        doc: "Seconds without a new sample (SageMaker default 1800).",
    }],
    example: r#"{"threshold": 1800}"#,
    build: build_stalled_training,
};

#[derive(Debug, Clone)]
pub(crate) struct Stalled {
    pub after: PolicyDuration,
    pub require_first_sample: bool,
    /// The learned rhythm: factor, floor and ceiling.
    pub rhythm: Option<(f64, PolicyDuration, PolicyDuration)>,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let after = p.duration("after").unwrap_or(PolicyDuration::from_secs(1800));
    let require_first_sample = match p.raw("requireFirstSample") {
        None => true,
        Some((_, serde_json::Value::Bool(b))) => *b,
        Some((key, v)) => {
            p.error(key, format!("expected true or false, got {v}"));
            true
        }
    };
    if after == PolicyDuration::from_secs(0) {
        p.error("after", "must be longer than 0s");
    }
    let factor = p.f64("factor");
    let floor = p.duration("floor");
    let ceiling = p.duration("ceiling");
    let rhythm = match factor {
        Some(f) if f < 1.0 => {
            p.error(
                "factor",
                format!("must be at least 1 (a silence the job has shown is no stall), got {f}"),
            );
            None
        }
        Some(f) => {
            let floor = floor.unwrap_or(after);
            let ceiling = ceiling.unwrap_or(PolicyDuration::from_secs(24 * 3600));
            if floor == PolicyDuration::from_secs(0) {
                p.error("floor", "must be longer than 0s");
            }
            if ceiling < floor {
                p.error("ceiling", format!("must not be shorter than floor ({floor})"));
            }
            Some((f, floor, ceiling))
        }
        None => {
            for key in ["floor", "ceiling"] {
                if p.raw(key).is_some() {
                    p.error(key, "needs factor (the learned rhythm)");
                }
            }
            None
        }
    };
    Some(Box::new(Stalled { after, require_first_sample, rhythm }))
}

fn build_stalled_training(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let after = p.seconds_or_duration("threshold").unwrap_or(PolicyDuration::from_secs(1800));
    for unsupported in ["stop_training_on_fire", "training_job_name_prefix"] {
        if p.raw(unsupported).is_some() {
            p.error(unsupported, "not supported here: attach a suspend action to the rule instead");
        }
    }
    Some(Box::new(Stalled { after, require_first_sample: true, rhythm: None }))
}

impl Stalled {
    /// The silence limit for this job now, in seconds, and how it was set (for the reason).
    fn limit(&self, view: &JobView<'_>) -> (f64, Option<f64>) {
        let fixed = self.after.as_secs_f64();
        let Some((factor, floor, ceiling)) = self.rhythm else { return (fixed, None) };
        match view.series.longest_gap(view.snapshot.running_since) {
            Some(gap) => ((factor * gap).clamp(floor.as_secs_f64(), ceiling.as_secs_f64()), Some(gap)),
            None => (fixed, None),
        }
    }
}

impl Detector for Stalled {
    // Once silent, silent until a sample comes; the moment it turns silent is `wake_at`.
    fn reads_the_clock(&self) -> bool {
        false
    }

    fn check(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        if !view.is_running() || (self.require_first_sample && view.series.last_sample_at.is_none()) {
            return None;
        }
        let silent = seconds(view.last_activity(), view.now);
        let (limit, learned) = self.limit(view);
        (silent >= limit).then(|| {
            let what = if view.series.last_sample_at.is_some() {
                "no progress sample"
            } else {
                "no progress sample yet"
            };
            let how = match (learned, self.rhythm) {
                (Some(gap), Some((factor, _, _))) => format!(
                    "limit {}: {} × the longest silence this job has shown, {}, within {} to {}",
                    fmt_secs(limit.round()),
                    crate::time::fmt_num(factor),
                    fmt_secs(gap.round()),
                    self.rhythm.map(|r| r.1.to_string()).unwrap_or_default(),
                    self.rhythm.map(|r| r.2.to_string()).unwrap_or_default()
                ),
                _ => format!("limit {}", self.after),
            };
            Finding::new(format!("{what} for {} ({how})", fmt_secs(silent)))
                .value("secondsSilent", silent)
                .value("limitSeconds", limit)
                .stall()
        })
    }

    fn wake_at(&self, _state: &DetectorState, view: &JobView<'_>) -> Option<Timestamp> {
        if !view.is_running() || (self.require_first_sample && view.series.last_sample_at.is_none()) {
            return None;
        }
        add_seconds(view.last_activity(), self.limit(view).0)
    }

    fn windows(&self) -> Vec<(&'static str, PolicyDuration)> {
        let mut w = vec![("after", self.after)];
        if let Some((_, floor, _)) = self.rhythm {
            w.push(("floor", floor));
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors, t};
    use crate::input::sample::JobPhase;
    use serde_json::json;

    #[test]
    fn fires_with_no_new_sample_arriving() {
        let d = detector("stalled", json!({"after": "30m"}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[1.0, 0.9]);
        // Last sample at 60 s; nothing arrives afterwards, only time passes.
        assert!(job.check(d.as_ref(), 60 + 29 * 60).is_none());
        let f = job.check(d.as_ref(), 60 + 30 * 60).expect("30 minutes of silence");
        assert_eq!(f.summary, "no progress sample for 30m (limit 30m)");
        assert_eq!(f.kind, super::super::FindingKind::Stall);
    }

    #[test]
    fn only_while_running() {
        let d = detector("stalled", json!({"after": "10m"}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[1.0]);
        job.snapshot.phase = JobPhase::Suspended;
        assert!(job.check(d.as_ref(), 3600).is_none());
        job.snapshot.phase = JobPhase::Complete;
        assert!(job.check(d.as_ref(), 3600).is_none());
    }

    #[test]
    fn a_resume_restarts_the_clock() {
        let d = detector("stalled", json!({"after": "10m"}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[1.0]);
        job.snapshot.running_since = Some(t(3000));
        assert!(job.check(d.as_ref(), 3000 + 9 * 60).is_none());
        assert!(job.check(d.as_ref(), 3000 + 10 * 60).is_some());
    }

    #[test]
    fn first_sample_requirement() {
        let job = Job::new();
        let d = detector("stalled", json!({"after": "10m"}));
        assert!(job.check(d.as_ref(), 3600).is_none(), "never reported: not ours by default");
        let d = detector("stalled", json!({"after": "10m", "requireFirstSample": false}));
        assert_eq!(job.check(d.as_ref(), 3600).unwrap().summary, "no progress sample yet for 1h (limit 10m)");
    }

    #[test]
    fn an_eval_gap_reporter_is_judged_by_its_own_rhythm() {
        // Reports every 5 s (the status server's throttle) and evaluates for 90 minutes every 6 hours.
        let d = detector("stalled", json!({"after": "2h", "factor": 2, "floor": "30m", "ceiling": "12h"}));
        let mut job = Job::new();
        let mut now = 0;
        let mut step = 0.0;
        let mut report = |job: &mut Job, now: i64| {
            step += 1.0;
            job.sample(d.as_ref(), now, &[("loss", 2.0 - step * 1e-5)], Some(step / 1e4), None);
        };
        for _ in 0..(6 * 720) {
            report(&mut job, now);
            now += 5;
        }
        // Before any pause the job has only shown 5-second gaps: the floor, 30 minutes, is its limit.
        let f = job.check(d.as_ref(), now + 30 * 60).expect("a hang now is caught after 30 minutes");
        assert!(
            f.summary.contains("limit 30m: 2 × the longest silence this job has shown, 5s"),
            "{}",
            f.summary
        );
        // Its first evaluation (90 minutes) would be killed by that floor: the floor must cover the first
        // pause, as the docs say. Here it is reported, then learned.
        now += 90 * 60 - 5; // the pause began at the last report, 5 s ago
        report(&mut job, now);
        for _ in 0..(6 * 720) {
            now += 5;
            report(&mut job, now);
        }
        // The second evaluation: 90 minutes of silence is part of its rhythm now (limit 3 h).
        assert!(job.check(d.as_ref(), now + 90 * 60).is_none(), "an evaluation pause it has shown before");
        let f = job.check(d.as_ref(), now + 3 * 3600).expect("twice its longest pause");
        assert!(
            f.summary.contains("(limit 3h: 2 × the longest silence this job has shown, 1h30m"),
            "{}",
            f.summary
        );
        assert_eq!(job.wake_at(d.as_ref(), now).unwrap(), t(now + 3 * 3600));
    }

    #[test]
    fn a_job_that_logs_every_53_minutes_is_not_stalled_between_logs() {
        // No reports between logging steps (a reporter without heartbeats), one every 53 minutes.
        let d = detector("stalled", json!({"after": "2h", "factor": 3, "floor": "1h", "ceiling": "12h"}));
        let mut job = Job::new();
        for i in 0..10 {
            job.sample(d.as_ref(), i * 53 * 60, &[("loss", 1.0 - i as f64 * 0.01)], Some(i as f64), None);
        }
        let last = 9 * 53 * 60;
        assert!(job.check(d.as_ref(), last + 2 * 3600).is_none(), "2 hours: less than 3 × 53 minutes");
        assert!(job.check(d.as_ref(), last + 159 * 60).is_some());
        // A job that never reported gets the fixed limit.
        let d = detector("stalled", json!({"after": "2h", "factor": 3, "requireFirstSample": false}));
        let job = Job::new();
        assert!(job.check(d.as_ref(), 2 * 3600 - 1).is_none());
        assert!(job.check(d.as_ref(), 2 * 3600).unwrap().summary.ends_with("(limit 2h)"));
    }

    #[test]
    fn property_a_job_that_keeps_its_rhythm_never_stalls() {
        // Jobs that report at irregular gaps, none longer than the floor (which covers a job's first pause),
        // with a strictly improving loss: never stalled, checked right after, midway and right before each
        // report.
        let d = detector("stalled", json!({"after": "1h", "factor": 2, "floor": "1h", "ceiling": "12h"}));
        for longest in [60i64, 600, 3600] {
            let mut job = Job::new();
            let mut now = 0;
            for i in 0..200i64 {
                // The first gap is the job's longest; the rest are shorter, pseudo-randomly.
                let gap = if i == 1 { longest } else { 5 + (i * 7919) % longest };
                for probe in [now + 1, now + gap / 2, now + gap - 1] {
                    assert!(
                        job.check(d.as_ref(), probe).is_none(),
                        "longest {longest}, report {i}, at {probe}"
                    );
                }
                now += gap;
                job.sample(d.as_ref(), now, &[("loss", 2.0 / (1.0 + i as f64))], Some(i as f64 / 2.0), None);
            }
        }
    }

    #[test]
    fn a_suspension_is_not_part_of_the_rhythm() {
        let d = detector("stalled", json!({"after": "1h", "factor": 2, "floor": "10m"}));
        let mut job = Job::new();
        for i in 0..10 {
            job.sample(d.as_ref(), i * 60, &[("loss", 1.0 - i as f64 * 0.01)], Some(i as f64), None);
        }
        // Suspended for a day, resumed at 86400: the day-long gap spans the restart and is left out.
        job.snapshot.running_since = Some(t(86_400));
        job.sample(d.as_ref(), 86_400 + 60, &[("loss", 0.5)], Some(20.0), None);
        let f = job.check(d.as_ref(), 86_400 + 60 + 600).expect("limit: the floor, 10 minutes");
        assert!(f.summary.contains("the longest silence this job has shown, 1m"), "{}", f.summary);
    }

    #[test]
    fn rhythm_parameters_are_checked() {
        assert_eq!(
            errors("stalled", json!({"factor": 0.5, "floor": "1h"})),
            vec!["with.factor: must be at least 1 (a silence the job has shown is no stall), got 0.5"]
        );
        assert_eq!(
            errors("stalled", json!({"factor": 2, "floor": "2h", "ceiling": "1h"})),
            vec!["with.ceiling: must not be shorter than floor (2h)"]
        );
        assert_eq!(
            errors("stalled", json!({"floor": "2h"})),
            vec!["with.floor: needs factor (the learned rhythm)"]
        );
    }

    #[test]
    fn stalled_training_takes_seconds_like_sagemaker() {
        let d = detector("stalled_training", json!({}));
        let mut job = Job::new();
        job.feed(d.as_ref(), "loss", 60, &[1.0]);
        assert!(job.check(d.as_ref(), 1799).is_none());
        assert!(job.check(d.as_ref(), 1800).is_some());
        let d = detector("stalled_training", json!({"threshold": 600}));
        assert!(job.check(d.as_ref(), 600).is_some());
        assert_eq!(
            errors("stalled_training", json!({"stop_training_on_fire": true})),
            vec![
                "with.stop_training_on_fire: not supported here: attach a suspend action to the rule instead"
            ]
        );
    }
}
