//! One TrainJob as the plugin reads it: its progress, its loss's recent trend, what trainwarden published on
//! it (verdict, last action, suspension, snooze), and which policies select it — judged here by the same
//! evaluation core the controller runs, fed the policies, the namespaces' labels and the job's own history
//! checkpoint.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::DynamicObject;
use trainwarden_core::{
    CHECKPOINT_ANNOTATION, CompiledPolicy, EngineConfig, Evaluator, JobKey, JobPhase, JobSnapshot,
    PolicyDocument, PolicyRef, RequestRecord, RuleState, SavedCheckpoint, Timestamp, compile,
};
use trainwarden_kube::annotations::{
    EXEMPT_ANNOTATION, HISTORY_ANNOTATION, LAST_ACTION_ANNOTATION, SUSPENDED_BY_ANNOTATION,
};
use trainwarden_kube::kueue::KUEUE_QUEUE_LABEL;
use trainwarden_kube::trainjob::to_snapshot;
use trainwarden_kube::{VERDICT_ANNOTATION, Verdict};

/// The annotation that snoozes a job's policies until an RFC 3339 instant.
pub(crate) use trainwarden_core::SNOOZE_ANNOTATION;

/// How many recent loss values the trend is drawn from.
pub(crate) const TREND_POINTS: usize = 8;

/// The local judge: the cluster's policies compiled by the core, the namespaces' labels, and every job read
/// so far with its history restored from its checkpoint.
pub(crate) struct Judge {
    pub(crate) evaluator: Evaluator,
    /// Policies that did not compile, with the core's message (the controller refuses them too).
    pub(crate) invalid: Vec<(PolicyRef, String)>,
}

impl Judge {
    pub(crate) fn new(
        documents: &[PolicyDocument],
        namespaces: &BTreeMap<String, BTreeMap<String, String>>,
        now: Timestamp,
    ) -> Judge {
        let mut evaluator = Evaluator::new(EngineConfig::default());
        let mut invalid = Vec::new();
        let mut events = Vec::new();
        for document in documents {
            match compile(document, evaluator.scripts()) {
                Ok(policy) => evaluator.upsert_policy(policy, now, &mut events),
                Err(e) => invalid.push((document.reference.clone(), e.to_string())),
            }
        }
        for (name, labels) in namespaces {
            evaluator.set_namespace_labels(name, labels.clone());
        }
        Judge { evaluator, invalid }
    }

    /// Reads a job into the judge: its history from the checkpoint, then its current report.
    pub(crate) fn observe(
        &mut self,
        job: &DynamicObject,
        snapshot: &JobSnapshot,
        now: Timestamp,
    ) -> Option<String> {
        let mut problem = None;
        if let (Some(text), Some(uid)) = (job.annotations().get(HISTORY_ANNOTATION), job.uid())
            && let Err(e) = self.evaluator.restore_history(&snapshot.key, text, &uid, now)
        {
            problem = Some(format!("history checkpoint not read: {e}"));
        }
        let mut events = Vec::new();
        self.evaluator.observe(snapshot.clone(), now, &mut events);
        problem
    }

    /// The policies that select the job.
    pub(crate) fn selecting(&self, job: &JobKey) -> Vec<&CompiledPolicy> {
        self.evaluator.policies().filter(|p| self.evaluator.selects(&p.reference, job)).collect()
    }

    /// The last values of a metric, oldest first.
    pub(crate) fn recent(&self, job: &JobKey, metric: &str, n: usize) -> Vec<f64> {
        let Some(series) = self.evaluator.job(job).and_then(|d| d.series.metric(metric)) else {
            return Vec::new();
        };
        let mut values: Vec<f64> = (0..n).filter_map(|i| series.value_back(i)).collect();
        values.reverse();
        values
    }

    /// The rule's state as judged here and now.
    pub(crate) fn local_state(&self, job: &JobKey, policy: &PolicyRef, rule: &str) -> RuleState {
        self.evaluator.rule_state(job, policy, rule).unwrap_or(RuleState::Inactive)
    }
}

/// What the last action trainwarden performed on the job says (`trainwarden.dev/last-action`).
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LastAction {
    pub(crate) action: String,
    /// "ProgressPolicy ns/name" or "ClusterProgressPolicy name".
    pub(crate) policy: String,
    pub(crate) rule: String,
    #[serde(default)]
    pub(crate) reason: String,
    pub(crate) at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) gpu_hours: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) dollars: Option<f64>,
}

impl LastAction {
    /// The policy as people name it, without its kind.
    pub(crate) fn policy_name(&self) -> &str {
        self.policy.split_once(' ').map_or(self.policy.as_str(), |(_, name)| name)
    }
}

/// The one-word state of a job, most telling first.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub(crate) enum Verdicts {
    /// Annotated `trainwarden.dev/exempt: "true"`.
    Exempt,
    /// Completed or failed.
    Finished { phase: String },
    /// Suspended by a trainwarden action.
    SuspendedBy { policy: String, rule: String },
    /// Suspended by Kueue (waiting for admission, or evicted) with no trainwarden action behind it.
    Queued { queue: String },
    /// Suspended by someone else.
    Suspended,
    /// The owner snoozed the policies.
    Snoozed { until: Timestamp },
    /// A rule is firing (its actions were issued; Audit mode only reports them).
    Firing { policy: String, rule: String, audit: bool },
    /// A rule's condition holds and its `for` runs.
    Pending { policy: String, rule: String },
    /// Selected by a policy, no rule pending or firing.
    Healthy,
    /// No policy selects it.
    NotJudged,
}

impl std::fmt::Display for Verdicts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdicts::Exempt => write!(f, "exempt"),
            Verdicts::Finished { phase } => write!(f, "{phase}"),
            Verdicts::SuspendedBy { policy, rule } => write!(f, "suspended by {policy}/{rule}"),
            Verdicts::Queued { queue } => write!(f, "queued (Kueue {queue})"),
            Verdicts::Suspended => write!(f, "suspended"),
            Verdicts::Snoozed { until } => write!(f, "snoozed until {}", short_time(*until)),
            Verdicts::Firing { policy, rule, audit } => {
                write!(f, "firing {policy}/{rule}{}", if *audit { " (audit)" } else { "" })
            }
            Verdicts::Pending { policy, rule } => write!(f, "pending {policy}/{rule}"),
            Verdicts::Healthy => write!(f, "healthy"),
            Verdicts::NotJudged => write!(f, "not judged"),
        }
    }
}

/// One TrainJob, read.
pub(crate) struct JobRow {
    pub(crate) key: JobKey,
    pub(crate) snapshot: Option<JobSnapshot>,
    /// Why the progress could not be read.
    pub(crate) unreadable: Option<String>,
    pub(crate) verdict: Verdict,
    /// Why the verdict annotation could not be read.
    pub(crate) verdict_problem: Option<String>,
    /// Why the history checkpoint was not restored (the trend and the local judgement start from the
    /// current report only).
    pub(crate) history_problem: Option<String>,
    pub(crate) last_action: Option<LastAction>,
    pub(crate) suspended: bool,
    pub(crate) suspended_by: Option<String>,
    pub(crate) exempt: bool,
    pub(crate) kueue_queue: Option<String>,
    /// Whether its Kueue Workload is active (`None`: no Workload found).
    pub(crate) workload_active: Option<bool>,
    pub(crate) snooze_until: Option<Timestamp>,
    /// The snooze annotation's text when it is not an instant.
    pub(crate) snooze_problem: Option<String>,
    pub(crate) loss: Vec<f64>,
    pub(crate) selected_by: Vec<String>,
    pub(crate) state: Verdicts,
    /// The job's last checkpoint (its `checkpoint_step` / `checkpoint_request_id` report, kept across
    /// restarts by the history checkpoint), when it reported one.
    pub(crate) checkpoint: Option<SavedCheckpoint>,
    /// Its checkpoint requests as the controller records them (the last one and its outcome).
    pub(crate) checkpoint_request: Option<RequestRecord>,
    /// Why that record could not be read.
    pub(crate) checkpoint_problem: Option<String>,
}

impl JobRow {
    /// Reads the job; `judge` has it observed afterwards.
    pub(crate) fn read(
        job: &DynamicObject,
        judge: &mut Judge,
        policies: &crate::cluster::Policies,
        workloads: &std::collections::HashMap<String, bool>,
        now: Timestamp,
    ) -> JobRow {
        let key = JobKey::new(job.namespace().unwrap_or_default(), job.name_any());
        let annotations = job.annotations();
        let (snapshot, unreadable) = match to_snapshot(job) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        let history_problem = snapshot.as_ref().and_then(|s| judge.observe(job, s, now));
        let (mut verdict, verdict_problem) =
            match annotations.get(VERDICT_ANNOTATION).map(|t| Verdict::parse(t)) {
                None => (Verdict::default(), None),
                Some(Ok(v)) => (v, None),
                Some(Err(e)) => (Verdict::default(), Some(e.to_string())),
            };
        // Rules of a policy that no longer exists are not current (the controller removes them with its next
        // write, or is not running): only when every policy could be listed is that known.
        if policies.problems.is_empty() {
            verdict.rules.retain(|r| {
                policies.documents.iter().any(|d| {
                    d.reference.kind == r.kind
                        && d.reference.namespace == r.namespace
                        && d.reference.name == r.policy
                })
            });
        }
        for rule in policies.audit_rules(&key) {
            if !verdict.rules.iter().any(|r| r.policy_name() == rule.policy_name() && r.rule == rule.rule) {
                verdict.rules.push(rule);
            }
        }
        let last_action =
            annotations.get(LAST_ACTION_ANNOTATION).and_then(|t| serde_json::from_str::<LastAction>(t).ok());
        // The end the controller holds (its cap applied) is in the policy status; else as the local judge
        // computes it from the job's checkpoint with the default cap; else the annotation as written.
        let held = policies.snoozed_until(&key).or_else(|| judge.evaluator.snooze(&key).map(|z| z.until));
        let (snooze_until, snooze_problem) = match annotations.get(SNOOZE_ANNOTATION) {
            None => (None, None),
            Some(t) => match t.trim().parse::<Timestamp>() {
                Ok(at) => (Some(held.map_or(at, |h| h.min(at))), None),
                Err(_) => (
                    None,
                    Some(format!(
                        "{SNOOZE_ANNOTATION}={t:?} is not an RFC 3339 instant; the controller ignores it"
                    )),
                ),
            },
        };
        let suspended = job.data.pointer("/spec/suspend").and_then(serde_json::Value::as_bool) == Some(true)
            || snapshot.as_ref().is_some_and(|s| s.phase == JobPhase::Suspended);
        let selected_by = judge.selecting(&key).iter().map(|p| p.reference.to_string()).collect();
        let checkpoint = judge.evaluator.job(&key).and_then(|d| d.series.last_checkpoint);
        let (checkpoint_request, checkpoint_problem) = match annotations.get(CHECKPOINT_ANNOTATION) {
            None => (None, None),
            Some(t) => match RequestRecord::parse(t) {
                Ok(r) => (Some(r), None),
                Err(e) => (None, Some(format!("{CHECKPOINT_ANNOTATION} does not read: {e}"))),
            },
        };
        let mut row = JobRow {
            loss: judge.recent(&key, "loss", TREND_POINTS),
            key,
            snapshot,
            unreadable,
            verdict,
            verdict_problem,
            history_problem,
            last_action,
            suspended,
            suspended_by: annotations.get(SUSPENDED_BY_ANNOTATION).cloned(),
            exempt: annotations.get(EXEMPT_ANNOTATION).is_some_and(|v| v.eq_ignore_ascii_case("true")),
            kueue_queue: job.labels().get(KUEUE_QUEUE_LABEL).cloned(),
            workload_active: job.uid().and_then(|uid| workloads.get(&uid).copied()),
            snooze_until,
            snooze_problem,
            selected_by,
            state: Verdicts::NotJudged,
            checkpoint,
            checkpoint_request,
            checkpoint_problem,
        };
        row.state = row.judge(now);
        row
    }

    fn judge(&self, now: Timestamp) -> Verdicts {
        if self.exempt {
            return Verdicts::Exempt;
        }
        if let Some(s) = &self.snapshot
            && s.phase.is_finished()
        {
            let phase = if s.phase == JobPhase::Complete { "complete" } else { "failed" };
            return Verdicts::Finished { phase: phase.into() };
        }
        if self.suspended {
            // The last action says who (a Kueue job trainwarden stopped carries no suspended-by mark: Kueue owns
            // its spec.suspend); the mark alone is "<kind> <policy> (rule <rule>)".
            // Who stopped it: for a job trainwarden suspended through spec.suspend, its mark (which `resume`
            // removes, so a later suspension by someone else is not blamed on the last action); for a job
            // Kueue owns, the last action while the Workload is still inactive (an active one waits for
            // admission, whatever stopped it; an unreadable one is taken at the last action's word).
            if self.kueue_queue.is_some()
                && self.suspended_by.is_none()
                && self.workload_active != Some(true)
                && let Some(a) = self.last_action.as_ref().filter(|a| a.action == "suspend")
            {
                return Verdicts::SuspendedBy { policy: self.short(a.policy_name()), rule: a.rule.clone() };
            }
            if let Some(by) = &self.suspended_by {
                let (policy, rule) = by
                    .strip_suffix(')')
                    .and_then(|b| b.rsplit_once(" (rule "))
                    .map_or((by.as_str(), "?"), |(p, r)| (p.split_once(' ').map_or(p, |(_, name)| name), r));
                return Verdicts::SuspendedBy { policy: self.short(policy), rule: rule.into() };
            }
            if let Some(queue) = self.kueue_queue.as_ref().filter(|_| self.suspended_by.is_none()) {
                return Verdicts::Queued { queue: queue.clone() };
            }
            return Verdicts::Suspended;
        }
        if let Some(until) = self.snooze_until.filter(|u| *u > now) {
            return Verdicts::Snoozed { until };
        }
        if let Some(r) = self.verdict.firing().next() {
            return Verdicts::Firing {
                policy: self.short(&r.policy_name()),
                rule: r.rule.clone(),
                audit: r.mode == trainwarden_core::Mode::Audit,
            };
        }
        if let Some(r) = self.verdict.pending().next() {
            return Verdicts::Pending { policy: self.short(&r.policy_name()), rule: r.rule.clone() };
        }
        if self.selected_by.is_empty() { Verdicts::NotJudged } else { Verdicts::Healthy }
    }

    /// A policy as the job's own listing names it: a ProgressPolicy (always in the job's namespace) by its
    /// name, a ClusterProgressPolicy by its.
    pub(crate) fn short(&self, policy: &str) -> String {
        policy.strip_prefix(&format!("{}/", self.key.namespace)).unwrap_or(policy).to_string()
    }

    /// The latest report's progress fields.
    pub(crate) fn sample(&self) -> Option<&trainwarden_core::ProgressSample> {
        self.snapshot.as_ref().and_then(|s| s.sample.as_ref())
    }

    /// The latest value of a metric in the last report.
    pub(crate) fn metric(&self, name: &str) -> Option<f64> {
        self.sample()?.metrics.iter().find(|m| m.name == name).map(|m| m.value)
    }
}

/// `↓`, `→` or `↑`: how the values moved over the window (more than 1 % of the first counts).
pub(crate) fn trend(values: &[f64]) -> &'static str {
    let (Some(first), Some(last)) = (values.first(), values.last()) else { return "" };
    if values.len() < 2 || !first.is_finite() || !last.is_finite() {
        return "";
    }
    let change = (last - first) / first.abs().max(f64::MIN_POSITIVE);
    if change < -0.01 {
        "↓"
    } else if change > 0.01 {
        "↑"
    } else {
        "→"
    }
}

/// A sparkline of the values (`▁` lowest to `█` highest); non-finite values are `!`.
pub(crate) fn sparkline(values: &[f64]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    values
        .iter()
        .map(|v| {
            if !v.is_finite() {
                '!'
            } else if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
                BARS[3]
            } else {
                BARS[(((v - lo) / (hi - lo)) * 7.0).round() as usize]
            }
        })
        .collect()
}

/// A span as a table shows it, two units (`45s`, `12m5s`, `3h12m`, `2d4h`: the one formatter,
/// [`trainwarden_core::fmt_span_short`]); `-` for a negative or unknown one.
pub(crate) fn span(seconds: f64) -> String {
    if seconds < 0.0 { "-".into() } else { trainwarden_core::fmt_span_short(seconds) }
}

/// A time in UTC to the minute: `2026-10-02 22:03Z`.
pub(crate) fn short_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%d %H:%MZ").to_string()
}

/// A number in at most 4 significant digits, as a table shows it.
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{v:.3e}")
    } else {
        let digits = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
        let s = format!("{v:.digits$}");
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trends_and_sparklines() {
        assert_eq!(trend(&[2.0, 1.5, 1.0]), "↓");
        assert_eq!(trend(&[1.0, 1.001, 1.002]), "→");
        assert_eq!(trend(&[1.0, 2.0]), "↑");
        assert_eq!(trend(&[1.0]), "");
        assert_eq!(sparkline(&[1.0, 2.0, 3.0, f64::NAN]), "▁▅█!");
        assert_eq!(sparkline(&[0.5, 0.5]), "▄▄");
    }

    #[test]
    fn spans_and_numbers_read_like_a_person_wrote_them() {
        assert_eq!(span(45.0), "45s");
        assert_eq!(span(12.0 * 60.0 + 5.0), "12m5s");
        assert_eq!(span(3.0 * 3600.0 + 5.0), "3h");
        assert_eq!(span(3.0 * 3600.0 + 12.0 * 60.0), "3h12m");
        assert_eq!(span(2.0 * 86_400.0 + 4.0 * 3600.0), "2d4h");
        assert_eq!(span(-1.0), "-");
        assert_eq!(num(0.611_734), "0.6117");
        assert_eq!(num(12.5), "12.5");
        assert_eq!(num(1234.0), "1234");
        assert_eq!(num(0.000_12), "1.200e-4");
    }

    #[test]
    fn a_kueue_job_trainwarden_stopped_is_suspended_by_its_last_action() {
        let a: LastAction = serde_json::from_str(
            r#"{"id":"x","action":"suspend","policy":"ProgressPolicy ml/stall","rule":"silent","reason":"r","at":"2026-10-02T22:03:00Z","gpuHours":38.25}"#,
        )
        .unwrap();
        assert_eq!(a.policy_name(), "ml/stall");
        assert_eq!(a.gpu_hours, Some(38.25));
    }
}
