//! The per-job gauges (`--job-metrics`): each judged TrainJob's latest progress, ETA, report time,
//! canonical metrics, GPUs and phase, and its pending and firing rules, as series on `/metrics`.
//!
//! The brain owns the evaluator, so it is the one place that knows when these values change: a job's series
//! are brought in line with the evaluator after each of its reports and rule transitions, and after a
//! policy is added, changed or removed. Each job's exported series are remembered here, so whatever the
//! evaluator no longer has (a job deleted, exempt or no longer selected; a rule that resolved or cleared; a
//! metric no longer reported) is removed from its family rather than left behind with a stale value. Rule
//! states follow Prometheus' `ALERTS`: a series with value 1 while pending or firing, none while inactive.

use std::collections::{HashMap, HashSet};

use trainwarden_core::{Evaluator, JobKey, RuleState};

use crate::metrics::{
    JobFamilies, JobLabels, JobMetricLabels, JobMetricName, JobPhaseLabel, JobPhaseLabels, RuleStateLabel,
    RuleStateLabels,
};

/// One series of a job.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Series {
    Progress,
    Eta,
    LastReport,
    Metric(JobMetricName),
    Gpus,
    Phase(JobPhaseLabel),
    Rule { policy: String, rule: String, state: RuleStateLabel },
}

/// The per-job families and what each job has in them now.
pub(super) struct JobGauges {
    families: JobFamilies,
    exported: HashMap<JobKey, HashSet<Series>>,
    /// Jobs whose series may have changed since the last [`JobGauges::sync`].
    touched: HashSet<JobKey>,
    /// A policy changed: every exported job is looked at again (rules renamed or removed, selection).
    all_touched: bool,
}

impl JobGauges {
    pub(super) fn new(families: JobFamilies) -> Self {
        JobGauges { families, exported: HashMap::new(), touched: HashSet::new(), all_touched: false }
    }

    /// The job's series may have changed (a report, a transition, a deletion).
    pub(super) fn touch(&mut self, job: &JobKey) {
        if !self.touched.contains(job) {
            self.touched.insert(job.clone());
        }
    }

    /// A policy or a namespace's labels changed: every job's series may have.
    pub(super) fn touch_all(&mut self) {
        self.all_touched = true;
    }

    /// Whether the next [`JobGauges::sync`] looks at every job (the caller then refreshes selection first).
    pub(super) fn all_touched(&self) -> bool {
        self.all_touched
    }

    /// Brings the touched jobs' series in line with the evaluator. `judged`: the job is neither exempt
    /// nor gone (the evaluator has forgotten those already; this is belt and braces).
    pub(super) fn sync(&mut self, evaluator: &Evaluator, judged: impl Fn(&JobKey) -> bool) {
        let mut jobs = std::mem::take(&mut self.touched);
        if std::mem::take(&mut self.all_touched) {
            // Jobs that have series (they may have lost their policy) and jobs that have none yet (a new
            // policy selects them, finished ones included).
            jobs.extend(self.exported.keys().cloned());
            jobs.extend(evaluator.job_keys().cloned());
        }
        for job in jobs {
            let wanted = if judged(&job) { wanted(evaluator, &job) } else { Vec::new() };
            self.reconcile(&job, wanted);
        }
    }

    /// Jobs with at least one series.
    #[cfg(test)]
    pub(super) fn jobs(&self) -> usize {
        self.exported.len()
    }

    fn reconcile(&mut self, job: &JobKey, wanted: Vec<(Series, f64)>) {
        if wanted.is_empty() && !self.exported.contains_key(job) {
            return; // the common case of a job no policy selects: nothing to set, nothing to remove
        }
        let labels = JobLabels { namespace: job.namespace.clone(), trainjob: job.name.clone() };
        let now: HashSet<Series> = wanted.iter().map(|(s, _)| s.clone()).collect();
        if let Some(before) = self.exported.get(job) {
            for gone in before.difference(&now) {
                self.remove(&labels, gone);
            }
        }
        for (series, value) in wanted {
            self.set(&labels, &series, value);
        }
        if now.is_empty() {
            self.exported.remove(job);
        } else {
            self.exported.insert(job.clone(), now);
        }
    }

    fn set(&self, labels: &JobLabels, series: &Series, value: f64) {
        let f = &self.families;
        match series {
            Series::Progress => {
                f.progress_percent.get_or_create(labels).set(value);
            }
            Series::Eta => {
                f.eta_seconds.get_or_create(labels).set(value);
            }
            Series::LastReport => {
                f.last_report_timestamp_seconds.get_or_create(labels).set(value);
            }
            Series::Metric(metric) => {
                f.metric.get_or_create(&metric_labels(labels, *metric)).set(value);
            }
            Series::Gpus => {
                f.gpus.get_or_create(labels).set(value);
            }
            Series::Phase(phase) => {
                f.phase.get_or_create(&phase_labels(labels, *phase)).set(1);
            }
            Series::Rule { policy, rule, state } => {
                f.rule_state.get_or_create(&rule_labels(labels, policy, rule, *state)).set(1);
            }
        }
    }

    fn remove(&self, labels: &JobLabels, series: &Series) {
        let f = &self.families;
        match series {
            Series::Progress => f.progress_percent.remove(labels),
            Series::Eta => f.eta_seconds.remove(labels),
            Series::LastReport => f.last_report_timestamp_seconds.remove(labels),
            Series::Metric(metric) => f.metric.remove(&metric_labels(labels, *metric)),
            Series::Gpus => f.gpus.remove(labels),
            Series::Phase(phase) => f.phase.remove(&phase_labels(labels, *phase)),
            Series::Rule { policy, rule, state } => {
                f.rule_state.remove(&rule_labels(labels, policy, rule, *state))
            }
        };
    }
}

fn metric_labels(job: &JobLabels, metric: JobMetricName) -> JobMetricLabels {
    JobMetricLabels { namespace: job.namespace.clone(), trainjob: job.trainjob.clone(), metric }
}

fn phase_labels(job: &JobLabels, phase: JobPhaseLabel) -> JobPhaseLabels {
    JobPhaseLabels { namespace: job.namespace.clone(), trainjob: job.trainjob.clone(), phase }
}

fn rule_labels(job: &JobLabels, policy: &str, rule: &str, state: RuleStateLabel) -> RuleStateLabels {
    RuleStateLabels {
        namespace: job.namespace.clone(),
        trainjob: job.trainjob.clone(),
        policy: policy.to_string(),
        rule: rule.to_string(),
        state,
    }
}

/// The series a job should have now: none unless some policy selects it (selection as of the job's last
/// evaluation, or of [`Evaluator::refresh_selections`] after a policy or namespace change).
fn wanted(evaluator: &Evaluator, job: &JobKey) -> Vec<(Series, f64)> {
    let selecting: Vec<_> = evaluator.policies().filter(|p| evaluator.selects(&p.reference, job)).collect();
    if selecting.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    if let Some(data) = evaluator.job(job) {
        let series = &data.series;
        if let Some(last) = series.last {
            out.extend(last.progress_percent.map(|p| (Series::Progress, p)));
            out.extend(last.eta_seconds.map(|e| (Series::Eta, e)));
        }
        if let Some(at) = series.last_sample_at {
            out.push((Series::LastReport, at.as_millisecond() as f64 / 1000.0));
        }
        for metric in JobMetricName::ALL {
            if let Some(value) =
                series.metric(metric.as_str()).and_then(trainwarden_core::MetricSeries::latest_observation)
            {
                out.push((Series::Metric(metric), value));
            }
        }
        out.push((Series::Phase(data.snapshot.phase.into()), 1.0));
        // What the policies' savings count: the job's own figure, else the policies' assumption.
        let assumed = selecting.iter().filter_map(|p| p.env.assume_gpus).reduce(f64::max);
        out.extend(data.snapshot.gpus.or(assumed).map(|g| (Series::Gpus, g)));
    }
    for policy in selecting {
        let name = format!("{}/{}", policy.reference.kind, policy.reference);
        for rule in &policy.rules {
            let state = match evaluator.rule_state(job, &policy.reference, &rule.name) {
                Some(RuleState::Pending) => RuleStateLabel::Pending,
                Some(RuleState::Firing) => RuleStateLabel::Firing,
                Some(RuleState::Inactive) | None => continue,
            };
            out.push((Series::Rule { policy: name.clone(), rule: rule.name.clone(), state }, 1.0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use trainwarden_testkit::fixtures::at_sec;

    use trainwarden_core::{JobKey, Timestamp};

    use crate::brain::Brain;
    use crate::brain::tests::{key, policy_input, trainer_status};
    use crate::messages::Input;
    use crate::metrics::Metrics;
    use crate::runtime::config::ControllerConfig;

    const HIGH_LOSS: &str =
        "    - {name: high, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}]}\n";

    fn brain(metrics: &Arc<Metrics>) -> Brain {
        Brain::new(&ControllerConfig::default(), metrics.clone(), None)
    }

    fn report(name: &str, at: Timestamp, loss: &str) -> Input {
        trainer_status(
            "ml",
            name,
            at,
            serde_json::json!({
                "progressPercentage": 45,
                "estimatedRemainingSeconds": 3600,
                "metrics": [
                    {"name": "loss", "value": loss},
                    {"name": "learning_rate", "value": "0.0002"},
                    {"name": "accuracy", "value": "0.5"},
                ],
            }),
        )
    }

    /// The per-job lines of the exposition (`trainwarden_job_*`, `trainwarden_rule_state`), without HELP
    /// and TYPE.
    fn job_lines(metrics: &Metrics) -> Vec<String> {
        metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("trainwarden_job_") || l.starts_with("trainwarden_rule_state"))
            .map(str::to_string)
            .collect()
    }

    fn has(lines: &[String], line: &str) -> bool {
        lines.iter().any(|l| l == line)
    }

    #[test]
    fn a_judged_job_has_its_gauges_and_loses_them_when_deleted() {
        let metrics = Arc::new(Metrics::new());
        let mut b = brain(&metrics);
        b.handle(policy_input(HIGH_LOSS, None), at_sec(0));
        b.handle(report("ft", at_sec(0), "1.5"), at_sec(0));
        let lines = job_lines(&metrics);
        let job = r#"{namespace="ml",trainjob="ft"}"#;
        for want in [
            format!("trainwarden_job_progress_percent{job} 45.0"),
            format!("trainwarden_job_eta_seconds{job} 3600.0"),
            format!("trainwarden_job_last_report_timestamp_seconds{job} {}.0", at_sec(0).as_second()),
            r#"trainwarden_job_metric{namespace="ml",trainjob="ft",metric="loss"} 1.5"#.to_string(),
            r#"trainwarden_job_metric{namespace="ml",trainjob="ft",metric="learning_rate"} 0.0002"#
                .to_string(),
            r#"trainwarden_job_phase{namespace="ml",trainjob="ft",phase="running"} 1"#.to_string(),
        ] {
            assert!(has(&lines, &want), "{want} missing in {lines:#?}");
        }
        // Only the four canonical metrics; no rule is pending; no GPU count is known.
        assert_eq!(lines.len(), 6, "{lines:#?}");

        b.handle(Input::JobGone(JobKey::new("ml", "ft")), at_sec(1));
        assert_eq!(job_lines(&metrics), Vec::<String>::new());
        assert_eq!(b.gauges.as_ref().map(super::JobGauges::jobs), Some(0));
    }

    #[test]
    fn a_rule_has_a_series_while_pending_or_firing_and_none_once_resolved() {
        let metrics = Arc::new(Metrics::new());
        let mut b = brain(&metrics);
        b.handle(policy_input(HIGH_LOSS, None), at_sec(0));
        let rule = |state: &str| {
            format!(
                r#"trainwarden_rule_state{{namespace="ml",trainjob="ft",policy="ProgressPolicy/ml/p",rule="high",state="{state}"}} 1"#
            )
        };
        b.handle(report("ft", at_sec(0), "6"), at_sec(0));
        let lines = job_lines(&metrics);
        assert!(has(&lines, &rule("pending")), "{lines:#?}");
        assert!(!has(&lines, &rule("firing")), "{lines:#?}");

        // `for` runs out on a timer: firing replaces pending.
        b.tick(at_sec(10));
        let lines = job_lines(&metrics);
        assert!(has(&lines, &rule("firing")), "{lines:#?}");
        assert!(!has(&lines, &rule("pending")), "{lines:#?}");

        b.handle(report("ft", at_sec(11), "1"), at_sec(11));
        let lines = job_lines(&metrics);
        assert!(!lines.iter().any(|l| l.starts_with("trainwarden_rule_state")), "{lines:#?}");
        assert!(has(&lines, r#"trainwarden_job_metric{namespace="ml",trainjob="ft",metric="loss"} 1.0"#));
    }

    #[test]
    fn unselected_exempt_and_unpoliced_jobs_have_no_series() {
        let metrics = Arc::new(Metrics::new());
        let mut b = brain(&metrics);
        b.handle(policy_input(HIGH_LOSS, None), at_sec(0));
        // The namespaced policy of `ml` does not select a job of `other`.
        b.handle(
            trainer_status("other", "x", at_sec(0), serde_json::json!({"progressPercentage": 10})),
            at_sec(0),
        );
        assert_eq!(job_lines(&metrics), Vec::<String>::new());

        b.handle(report("ft", at_sec(0), "6"), at_sec(0));
        assert_eq!(job_lines(&metrics).len(), 7, "{:#?}", job_lines(&metrics));
        let Input::Job(mut exempt) = report("ft", at_sec(1), "6") else { unreachable!("a job input") };
        exempt.exempt = true;
        b.handle(Input::Job(exempt), at_sec(1));
        assert_eq!(job_lines(&metrics), Vec::<String>::new());

        b.handle(report("ft", at_sec(2), "6"), at_sec(2));
        assert_eq!(job_lines(&metrics).len(), 7, "{:#?}", job_lines(&metrics));
        // The policy goes: no policy judges the job, so none of its series stay.
        b.handle(Input::PolicyGone(key()), at_sec(3));
        assert_eq!(job_lines(&metrics), Vec::<String>::new());
    }

    /// The test policy at `generation`, with `selector` (YAML flow mapping) if given.
    fn policy_at(generation: i64, selector: Option<&str>) -> Input {
        let mut rules = HIGH_LOSS.to_string();
        if let Some(sel) = selector {
            rules.push_str(&format!("  selector: {sel}\n"));
        }
        let Input::Policy(mut p) = policy_input(&rules, None) else { unreachable!("a policy input") };
        p.generation = generation;
        Input::Policy(p)
    }

    #[test]
    fn a_quiet_job_follows_a_selector_change_at_once() {
        let metrics = Arc::new(Metrics::new());
        let mut b = brain(&metrics);
        b.handle(policy_at(1, None), at_sec(0));
        b.handle(report("ft", at_sec(0), "1.5"), at_sec(0));
        assert_eq!(job_lines(&metrics).len(), 6, "{:#?}", job_lines(&metrics));
        // The selector narrows; the job reports nothing more (it finished): its series go now, not at a
        // next report that never comes.
        b.handle(policy_at(2, Some("{matchLabels: {team: a}}")), at_sec(1));
        assert_eq!(job_lines(&metrics), Vec::<String>::new());
        // And a policy that selects it again brings them back without a report.
        b.handle(policy_at(3, None), at_sec(2));
        assert_eq!(job_lines(&metrics).len(), 6, "{:#?}", job_lines(&metrics));
    }

    #[test]
    fn a_rule_edited_out_of_its_policy_loses_its_series() {
        let metrics = Arc::new(Metrics::new());
        let mut b = brain(&metrics);
        b.handle(policy_input(HIGH_LOSS, None), at_sec(0));
        b.handle(report("ft", at_sec(0), "6"), at_sec(0));
        let rules = |m: &Metrics| job_lines(m).into_iter().filter(|l| l.contains("rule_state")).count();
        assert_eq!(rules(&metrics), 1);
        let Input::Policy(mut edited) = policy_input(
            "    - {name: other, when: 'metric(\"loss\") > 50.0', actions: [{suspend: {}}]}\n",
            None,
        ) else {
            unreachable!("a policy input")
        };
        edited.generation = 2;
        b.handle(Input::Policy(edited), at_sec(1));
        assert_eq!(rules(&metrics), 0, "{:#?}", job_lines(&metrics));
        // The job is still judged: its other series stay.
        assert_eq!(job_lines(&metrics).len(), 6, "{:#?}", job_lines(&metrics));
    }

    #[test]
    fn a_field_no_longer_reported_loses_its_series() {
        let metrics = Arc::new(Metrics::new());
        let mut b = brain(&metrics);
        b.handle(policy_input(HIGH_LOSS, None), at_sec(0));
        b.handle(report("ft", at_sec(0), "1.5"), at_sec(0));
        b.handle(
            trainer_status("ml", "ft", at_sec(1), serde_json::json!({"progressPercentage": 50})),
            at_sec(1),
        );
        let lines = job_lines(&metrics);
        assert!(has(&lines, r#"trainwarden_job_progress_percent{namespace="ml",trainjob="ft"} 50.0"#));
        assert!(!lines.iter().any(|l| l.starts_with("trainwarden_job_eta_seconds")), "{lines:#?}");
    }

    #[test]
    fn gpus_are_the_jobs_own_else_the_policies_assumption_and_the_phase_follows_the_job() {
        let metrics = Arc::new(Metrics::new());
        let mut b = brain(&metrics);
        b.handle(policy_input(&format!("{HIGH_LOSS}  assumeGpus: 4\n"), None), at_sec(0));
        let gpus = r#"trainwarden_job_gpus{namespace="ml",trainjob="ft"}"#;
        b.handle(report("ft", at_sec(0), "1.5"), at_sec(0));
        assert!(has(&job_lines(&metrics), &format!("{gpus} 4.0")), "{:#?}", job_lines(&metrics));

        // The job's own count (8 GPUs: 2 nodes of 4) wins; suspended, its phase series is replaced.
        let obj = serde_json::json!({
            "metadata": {"name": "ft", "namespace": "ml"},
            "spec": {"suspend": true, "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}}}},
            "status": {"trainerStatus": {"progressPercentage": 50, "lastUpdatedTime": at_sec(1).to_string()}},
        });
        let snapshot = trainwarden_core::from_trainjob(&obj).unwrap();
        assert_eq!(snapshot.gpus, Some(8.0), "the fixture's GPU count");
        b.handle(crate::brain::tests::watched(snapshot, None), at_sec(1));
        let lines = job_lines(&metrics);
        assert!(has(&lines, &format!("{gpus} 8.0")), "{lines:#?}");
        let phase =
            |p: &str| format!(r#"trainwarden_job_phase{{namespace="ml",trainjob="ft",phase="{p}"}} 1"#);
        assert!(has(&lines, &phase("suspended")), "{lines:#?}");
        assert!(!has(&lines, &phase("running")), "{lines:#?}");

        b.handle(Input::JobGone(JobKey::new("ml", "ft")), at_sec(2));
        assert_eq!(job_lines(&metrics), Vec::<String>::new());
    }

    #[test]
    fn switched_off_no_per_job_family_is_registered() {
        let metrics = Arc::new(Metrics::with_job_metrics(false));
        let mut b = brain(&metrics);
        b.handle(policy_input(HIGH_LOSS, None), at_sec(0));
        b.handle(report("ft", at_sec(0), "6"), at_sec(0));
        let text = metrics.encode();
        assert!(!text.contains("trainwarden_job_") && !text.contains("trainwarden_rule_state"), "{text}");
        assert!(text.contains("trainwarden_jobs 1"), "{text}");
        assert!(b.gauges.is_none());
    }
}

/// The figures in the README's per-job gauges section: 10,000 jobs with realistic names, every job with its
/// nine job series and each of a four-rule policy's rules firing (the worst case). `cargo test -p
/// trainwarden-controller --lib -- --ignored --nocapture cardinality`.
#[cfg(test)]
mod cardinality {
    use super::{JobGauges, Series};
    use crate::metrics::{JobMetricName, JobPhaseLabel, Metrics, RuleStateLabel};
    use trainwarden_core::JobKey;

    #[test]
    #[ignore = "a measurement, not a check"]
    fn cardinality_and_scrape_bytes_of_ten_thousand_jobs() {
        let metrics = Metrics::new();
        let Some(families) = metrics.job.clone() else { unreachable!("switched on") };
        let mut gauges = JobGauges::new(families);
        let base = metrics.encode().len();
        let job_series = |job: u32| {
            let mut out = vec![
                (Series::Progress, f64::from(job % 100)),
                (Series::Eta, 3600.0 + f64::from(job)),
                (Series::LastReport, 1_795_798_800.532 + f64::from(job)),
            ];
            for (i, m) in JobMetricName::ALL.into_iter().enumerate() {
                out.push((Series::Metric(m), 0.123_456_789 / f64::from(job + 1 + i as u32)));
            }
            out.push((Series::Gpus, 8.0));
            out.push((Series::Phase(JobPhaseLabel::Running), 1.0));
            out
        };
        let key =
            |job: u32| JobKey::new(format!("team-{:02}", job % 40), format!("llama-ft-20261201-{job:06x}"));
        for job in 0..10_000 {
            gauges.reconcile(&key(job), job_series(job));
        }
        let typical = metrics.encode().len() - base;
        for job in 0..10_000 {
            let mut series = job_series(job);
            for rule in ["nan-loss", "loss-plateau", "stalled", "late"] {
                let policy = "ProgressPolicy/default/weekend-safe".to_string();
                series.push((Series::Rule { policy, rule: rule.into(), state: RuleStateLabel::Firing }, 1.0));
            }
            gauges.reconcile(&key(job), series);
        }
        let text = metrics.encode();
        let lines = text.lines().filter(|l| !l.starts_with('#')).count();
        let worst = text.len() - base;
        println!("10,000 jobs: typical 90,000 series, {typical} bytes; worst {lines} series, {worst} bytes");
    }
}
