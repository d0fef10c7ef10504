//! What the brain keeps per policy beyond the evaluator, for its status: the loaded generation or why it is
//! invalid, the last actions, savings and action counts (updated from the executor's outcomes).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use trainwarden_core::{JobKey, Timestamp};
use trainwarden_core::{Mode, PolicyRef};

use crate::messages::{ActionResult, Outcome};

use super::Brain;

/// What the controller keeps per policy beyond the evaluator, for status.
#[derive(Debug, Default)]
pub(super) struct PolicyBook {
    /// The loaded (valid) version, if any.
    pub(super) reference: Option<PolicyRef>,
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
}

/// The most jobs a book remembers the last action of (the status lists at most 50).
pub(super) const MAX_JOB_ACTIONS: usize = 200;

impl Brain {
    pub(super) fn record_outcome(&mut self, o: Outcome) {
        let flight = (o.policy.clone(), o.job.clone(), o.rule.clone());
        if let Some(n) = self.in_flight.get_mut(&flight) {
            *n -= 1;
            if *n == 0 {
                self.in_flight.remove(&flight);
            }
        }
        if o.result == ActionResult::NotLeader {
            return;
        }
        let Some(book) = self.books.get_mut(&o.policy) else { return };
        *book.action_counts.entry(format!("{}/{}", o.action, o.result.as_str())).or_default() += 1;
        let verb = match (o.mode, &o.result) {
            (Mode::Audit, _) | (_, ActionResult::Reported) => format!("would {}", o.action),
            (_, ActionResult::Done) => o.action.to_string(),
            (_, other) => format!("{} {}", o.action, other.as_str()),
        };
        let what = format!("{verb} {} ({})", o.job, o.rule);
        book.last_action = Some((what, o.at));
        book.job_actions.insert(o.job.clone(), (format!("{verb} ({})", o.rule), o.at));
        if book.job_actions.len() > MAX_JOB_ACTIONS
            && let Some(oldest) =
                book.job_actions.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone())
        {
            book.job_actions.remove(&oldest);
        }
        if let Some(s) = &o.savings
            && o.action.stops_job()
        {
            match (o.mode, &o.result) {
                (Mode::Enforce, ActionResult::Done) => {
                    book.gpu_hours_saved += s.gpu_hours;
                    if let Some(d) = s.dollars {
                        *book.dollars_saved.get_or_insert(0.0) += d;
                    }
                }
                (Mode::Audit, ActionResult::Reported) => {
                    book.gpu_hours_would_save += s.gpu_hours;
                    if let Some(d) = s.dollars {
                        *book.dollars_would_save.get_or_insert(0.0) += d;
                    }
                }
                _ => {}
            }
        }
    }
}
