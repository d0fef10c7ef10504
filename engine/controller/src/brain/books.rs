//! What the brain keeps per policy beyond the evaluator, for its status: the loaded generation or why it is
//! invalid, the last actions, savings and action counts (updated from the executor's outcomes).

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use tracing::{info, warn};
use trainwarden_core::{ActionSpec, Mode, PolicyId, PolicyRef};
use trainwarden_core::{JobKey, Timestamp};
use trainwarden_kube::ProgressPolicyStatus;

use crate::messages::{ActionResult, Outcome};
use crate::metrics::{ActionLabel, ExecutedActionLabels, ModeLabel, SavingsLabels};

use super::Brain;
use super::counted::Counted;
use super::ledger::Settled;

/// What the controller keeps per policy beyond the evaluator, for status.
#[derive(Debug, Default)]
pub(super) struct PolicyBook {
    /// The loaded (valid) version, if any.
    pub(super) reference: Option<PolicyRef>,
    /// `metadata.uid` of the object last seen (a policy deleted and created again under its name is
    /// another one).
    pub(super) uid: Option<String>,
    /// metadata.generation last seen.
    pub(super) generation: i64,
    /// Why the last seen generation is invalid.
    pub(super) error: Option<String>,
    pub(super) last_action: Option<(String, Timestamp)>,
    pub(super) job_actions: HashMap<JobKey, (String, Timestamp)>,
    pub(super) gpu_hours_saved: f64,
    pub(super) dollars_saved: Option<f64>,
    pub(super) gpu_hours_would_save: f64,
    pub(super) dollars_would_save: Option<f64>,
    pub(super) action_counts: BTreeMap<String, i64>,
    /// Conditions as last reported, for their lastTransitionTime.
    pub(super) conditions: Vec<Condition>,
    /// Rules of the loaded generation whose evaluation failed, by rule: shown in the Ready condition while
    /// recent, since such a rule never fires.
    pub(super) rule_errors: BTreeMap<String, RuleErrors>,
    /// The job namespaces and modes whose savings series exist (see [`Brain::expect_savings`]).
    pub(super) savings_series: HashSet<(String, Mode)>,
    /// The recent stopping actions the totals include (see [`super::counted`]); `None` until the policy is
    /// first seen.
    pub(super) counted: Option<Counted>,
}

/// A rule's recent evaluation failures.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct RuleErrors {
    /// The first failure of this run of failures, and where: the status shows these, so that it does not
    /// change (and get written) on every failing evaluation.
    pub(super) first_at: Timestamp,
    pub(super) first_job: JobKey,
    pub(super) first_message: String,
    /// The last failure, to forget the rule once it stops failing.
    pub(super) last_at: Timestamp,
}

/// How long a rule's last evaluation failure keeps the policy not Ready. Rules are evaluated on every sample
/// and timer, so a rule that still fails fails again well within this.
pub(super) const RULE_ERROR_MEMORY: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl PolicyBook {
    /// Notes one failed evaluation of `rule` (at most 64 rules are remembered).
    pub(super) fn note_rule_error(&mut self, rule: &str, job: &JobKey, message: &str, at: Timestamp) {
        if !self.rule_errors.contains_key(rule) && self.rule_errors.len() >= 64 {
            return;
        }
        let stale =
            |e: &RuleErrors| at.duration_since(e.last_at).as_secs_f64() > RULE_ERROR_MEMORY.as_secs_f64();
        if self.rule_errors.get(rule).is_some_and(stale) {
            self.rule_errors.remove(rule);
        }
        let entry = self.rule_errors.entry(rule.to_string()).or_insert_with(|| RuleErrors {
            first_at: at,
            first_job: job.clone(),
            first_message: message.to_string(),
            last_at: at,
        });
        entry.last_at = at;
    }

    /// `rule r cannot be evaluated (failing since T, first on ns/job): message` for each rule that failed
    /// within [`RULE_ERROR_MEMORY`].
    pub(super) fn recent_rule_errors(&self, now: Timestamp) -> Option<String> {
        let recent: Vec<String> = self
            .rule_errors
            .iter()
            .filter(|(_, e)| now.duration_since(e.last_at).as_secs_f64() <= RULE_ERROR_MEMORY.as_secs_f64())
            .map(|(rule, e)| {
                format!(
                    "rule {rule} cannot be evaluated (failing since {}, first on {}): {}",
                    e.first_at, e.first_job, e.first_message
                )
            })
            .collect();
        (!recent.is_empty()).then(|| recent.join("; "))
    }
}

/// The most jobs a book remembers the last action of (the status lists at most 50).
pub(super) const MAX_JOB_ACTIONS: usize = 200;

impl PolicyBook {
    /// Takes the totals (savings, action counts, last action) from a status this controller's leader wrote:
    /// after a restart, or while another replica leads. What this replica adds when it leads goes on top.
    pub(super) fn adopt(&mut self, status: &ProgressPolicyStatus, now: Timestamp) {
        self.counted = Some(Counted::from_status(status.counted_actions.as_ref(), now));
        self.gpu_hours_saved = status.gpu_hours_saved.unwrap_or(0.0);
        self.dollars_saved = status.dollars_saved;
        self.gpu_hours_would_save = status.gpu_hours_would_save.unwrap_or(0.0);
        self.dollars_would_save = status.dollars_would_save;
        self.action_counts = status.action_counts.clone();
        if let (Some(what), Some(at)) = (&status.last_action, &status.last_action_time) {
            self.last_action = Some((what.clone(), at.0));
        }
    }
}

impl Brain {
    /// Creates at zero the savings series a suspension of `job` would add to: for each policy selecting it,
    /// in the job's namespace, for the mode of each of its rules that suspends (once each). `increase()`
    /// counts a counter's growth from its first sample on, so a series born with its first saving would lose
    /// it; born at zero when the job is first judged, it is scraped at zero long before.
    pub(super) fn expect_savings(&mut self, job: &JobKey) {
        for policy in self.evaluator.policies() {
            if !self.evaluator.selects(&policy.reference, job) {
                continue;
            }
            let Some(book) = self.books.get_mut(&PolicyId::from(&policy.reference)) else { continue };
            let suspending =
                policy.rules.iter().filter(|r| r.actions.iter().any(|a| matches!(a, ActionSpec::Suspend(_))));
            for rule in suspending {
                if book.savings_series.contains(&(job.namespace.clone(), rule.mode)) {
                    continue;
                }
                book.savings_series.insert((job.namespace.clone(), rule.mode));
                let labels = SavingsLabels {
                    policy: format!("{}/{}", policy.reference.kind, policy.reference),
                    namespace: job.namespace.clone(),
                    mode: ModeLabel(Some(rule.mode)),
                };
                self.metrics.gpu_hours_saved.get_or_create(&labels).inc_by(0.0);
                if policy.env.gpu_hour_cost.is_some() {
                    self.metrics.dollars_saved.get_or_create(&labels).inc_by(0.0);
                }
            }
        }
    }

    pub(super) fn record_outcome(&mut self, o: Outcome, now: Timestamp) {
        if o.result == ActionResult::Stale {
            self.judge_stale(&o, now);
            return;
        }
        if o.result == ActionResult::Waiting {
            // Not settled, not failed: parked until the job answers or the request's deadline.
            let until = o.wait_until.unwrap_or(now);
            self.ledger.wait(&o.intent, until);
            info!(job = %o.job, rule = %o.rule, action = o.action.as_str(), until = %until, message = %o.message, "waiting for the job's checkpoint");
            return;
        }
        let settled = self.ledger.settle(
            &o.intent,
            o.result.settles(),
            o.result == ActionResult::NotLeader,
            self.leading && !self.stopping,
            now,
        );
        match settled {
            Settled::RetryAt { due, failures } => {
                let action = ActionLabel::Executed(o.action);
                self.metrics.action_retries.get_or_create(&ExecutedActionLabels { action }).inc();
                warn!(job = %o.job, rule = %o.rule, action = o.action.as_str(), failures, retry_at = %due, error = %o.message, "action failed; trying again later");
            }
            Settled::Confirmed { was_owed: false } if o.result == ActionResult::AlreadyDone => {
                // Not owed any more (its job or policy went meanwhile): nothing to count.
                return;
            }
            Settled::Confirmed { .. } | Settled::AwaitingLeadership => {}
        }
        if o.result == ActionResult::AlreadyDone {
            info!(job = %o.job, rule = %o.rule, action = o.action.as_str(), "action found already performed (by an earlier leader or before a restart)");
        }
        if matches!(o.result, ActionResult::NotLeader | ActionResult::Abandoned) {
            // Abandoned: counted and told on the job by the executor; nothing was done to tally.
            return;
        }
        let saved = o.savings.as_ref().map(|s| (s.gpu_hours, s.dollars));
        self.tally(Tally {
            id: &o.intent,
            policy: &o.policy,
            job: &o.job,
            rule: &o.rule,
            action: o.action,
            mode: o.mode,
            result: o.result,
            at: o.at,
            saved,
        });
    }

    /// Counts one action in its policy's totals (action counts, last action, savings). A stopping action
    /// in Enforce mode counts once by its intent id: performed here, or found performed by a leader whose
    /// status did not count it (see [`super::counted`]).
    pub(super) fn tally(&mut self, t: Tally<'_>) {
        let Some(book) = self.books.get_mut(t.policy) else { return };
        let once = t.mode == Mode::Enforce
            && t.action.stops_job()
            && matches!(t.result, ActionResult::Done | ActionResult::AlreadyDone);
        if once {
            let counted = book.counted.get_or_insert_with(|| Counted::starting(Timestamp::MIN));
            let owed = match t.result {
                // Performed by this replica now: counted unless it is listed (another replica that believed
                // it led performed the same apply and counted it).
                ActionResult::Done => !counted.includes(t.id),
                // Found performed: counted unless listed, or issued before the list began (its status may
                // have counted it before it was dropped from the list).
                _ => counted.owes(t.id, t.at),
            };
            if !owed {
                info!(job = %t.job, rule = %t.rule, id = %t.id, "action found performed and already counted");
                return;
            }
            counted.insert(t.id, t.at);
        }
        *book.action_counts.entry(format!("{}/{}", t.action, t.result.as_str())).or_default() += 1;
        let verb = match (t.mode, &t.result) {
            (Mode::Audit, _) | (_, ActionResult::Reported) => format!("would {}", t.action),
            (_, ActionResult::Done | ActionResult::AlreadyDone) => t.action.to_string(),
            (_, other) => format!("{} {}", t.action, other.as_str()),
        };
        let what = format!("{verb} {} ({})", t.job, t.rule);
        book.last_action = Some((what, t.at));
        book.job_actions.insert(t.job.clone(), (format!("{verb} ({})", t.rule), t.at));
        if book.job_actions.len() > MAX_JOB_ACTIONS
            && let Some(oldest) =
                book.job_actions.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone())
        {
            book.job_actions.remove(&oldest);
        }
        if let Some((gpu_hours, dollars)) = t.saved
            && t.action.stops_job()
        {
            let labels = || SavingsLabels {
                policy: format!("{}/{}", t.policy.kind, t.policy),
                namespace: t.job.namespace.clone(),
                mode: ModeLabel(Some(t.mode)),
            };
            match (t.mode, &t.result) {
                (Mode::Enforce, ActionResult::Done | ActionResult::AlreadyDone) => {
                    book.gpu_hours_saved += gpu_hours;
                    if let Some(d) = dollars {
                        *book.dollars_saved.get_or_insert(0.0) += d;
                    }
                    self.metrics.saved(&labels(), gpu_hours, dollars);
                }
                (Mode::Audit, ActionResult::Reported) => {
                    book.gpu_hours_would_save += gpu_hours;
                    if let Some(d) = dollars {
                        *book.dollars_would_save.get_or_insert(0.0) += d;
                    }
                    self.metrics.saved(&labels(), gpu_hours, dollars);
                }
                _ => {}
            }
        }
    }
}

/// One action to count (see [`Brain::tally`]).
pub(super) struct Tally<'a> {
    pub(super) id: &'a str,
    pub(super) policy: &'a PolicyId,
    pub(super) job: &'a JobKey,
    pub(super) rule: &'a str,
    pub(super) action: crate::messages::ExecutedAction,
    pub(super) mode: Mode,
    pub(super) result: ActionResult,
    /// When the intent was issued.
    pub(super) at: Timestamp,
    /// GPU-hours and dollars its suspension frees, when known.
    pub(super) saved: Option<(f64, Option<f64>)>,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use trainwarden_testkit::fixtures::at_sec;

    use trainwarden_core::Mode;

    use crate::brain::Brain;
    use crate::brain::tests::{job_reporting, policy_input, suspend_outcome};
    use crate::messages::{ActionResult, Input};
    use crate::metrics::Metrics;
    use crate::runtime::config::ControllerConfig;

    fn outcome(mode: Mode, result: ActionResult, gpu_hours: f64) -> Input {
        Input::Outcome(Box::new(suspend_outcome(&format!("i-{gpu_hours}"), mode, result, gpu_hours)))
    }

    fn saved_lines(metrics: &Metrics) -> Vec<String> {
        metrics
            .encode()
            .lines()
            .filter(|l| {
                l.starts_with("trainwarden_gpu_hours_saved") || l.starts_with("trainwarden_dollars_saved")
            })
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn savings_are_counted_by_policy_namespace_and_mode_from_zero() {
        let metrics = Arc::new(Metrics::new());
        let mut b = Brain::new(&ControllerConfig::default(), metrics.clone(), None);
        b.handle(
            policy_input(
                "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n  gpuHourCost: 10\n",
                None,
            ),
            at_sec(0),
        );
        let labels = r#"{policy="ProgressPolicy/ml/p",namespace="ml",mode="Enforce"}"#;
        assert_eq!(saved_lines(&metrics), Vec::<String>::new(), "no job judged yet");
        // Judged: the series exist at zero, so that Prometheus' increase() counts the first saving.
        b.handle(job_reporting(1.0, at_sec(1)), at_sec(1));
        assert_eq!(
            saved_lines(&metrics),
            vec![
                format!("trainwarden_gpu_hours_saved_total{labels} 0.0"),
                format!("trainwarden_dollars_saved_total{labels} 0.0")
            ]
        );
        b.handle(outcome(Mode::Enforce, ActionResult::Done, 8.0), at_sec(5));
        // Neither a failure nor an unchanged job saves anything.
        b.handle(outcome(Mode::Enforce, ActionResult::Failed, 100.0), at_sec(7));
        b.handle(outcome(Mode::Enforce, ActionResult::Unchanged, 100.0), at_sec(7));
        b.handle(outcome(Mode::Audit, ActionResult::Reported, 4.0), at_sec(8));
        let audit = r#"{policy="ProgressPolicy/ml/p",namespace="ml",mode="Audit"}"#;
        let lines = saved_lines(&metrics);
        for want in [
            format!("trainwarden_gpu_hours_saved_total{labels} 8.0"),
            format!("trainwarden_dollars_saved_total{labels} 80.0"),
            format!("trainwarden_gpu_hours_saved_total{audit} 4.0"),
            format!("trainwarden_dollars_saved_total{audit} 40.0"),
        ] {
            assert!(lines.contains(&want), "{want} missing in {lines:#?}");
        }
        assert_eq!(lines.len(), 4, "{lines:#?}");
    }
}
