//! The brain's tests, by subject, and the fixtures they share: a brain (following or leading), the inputs
//! the sources send (a policy, a TrainJob as watched, an exception, an executor outcome) and what a step
//! leaves for the executor.

mod counting;
mod exceptions;
mod handover;
mod history;
mod policies;
mod reports;
mod restarts;
mod signals;
mod stale;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use trainwarden_core::describe::{Notice, Reason};
use trainwarden_core::{
    ActionIntent, ActionKind, ActionSpec, JobKey, JobSnapshot, Metric, Mode, PolicyId, PolicyKind,
    ProgressSample, RuleMemory, RuleState, SampleSource, Timestamp,
};
use trainwarden_kube::ProgressPolicyStatus;
use trainwarden_kube::status::{CONDITION_PROGRESS_UNDERSTOOD, CONDITION_READY};

use super::Brain;
use super::books;
use crate::messages::{
    ActionResult, ExecutedAction, HistorySave, Input, Outcome, PolicyInput, TrainJobEvent, Work,
};
use crate::metrics::{HistoryResult, Metrics, ProgressSource, ProgressSourceLabels};
use crate::runtime::config::ControllerConfig;
use trainwarden_testkit::fixtures::{at_sec, memory, policy};

/// A brain with the default configuration, following.
fn brain() -> Brain {
    Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None)
}

/// A brain that leads (or follows), with nothing left from taking over.
fn brain_leading(leading: bool) -> Brain {
    let mut b = brain();
    b.lead(leading);
    b.work.clear();
    b
}

/// `snapshot` as the TrainJob watch delivers it: the annotations trainwarden keeps on the job (its own,
/// here) read into their typed fields.
pub(crate) fn watched(snapshot: JobSnapshot, uid: Option<&str>) -> Input {
    let annotations = snapshot.annotations.clone();
    Input::Job(Box::new(crate::sources::trainjobs::read_job(
        snapshot.key.clone(),
        Ok(snapshot),
        &annotations,
        uid.map(str::to_string),
        std::time::Instant::now(),
    )))
}

/// What the executor reports after suspending ml/ft for rule `high` of ml/p at at_sec(5): `gpu_hours` freed
/// until at_sec(3605), at $10 each.
pub(crate) fn suspend_outcome(intent: &str, mode: Mode, result: ActionResult, gpu_hours: f64) -> Outcome {
    Outcome {
        intent: intent.into(),
        policy: key(),
        job: JobKey::new("ml", "ft"),
        rule: "high".into(),
        action: crate::messages::ExecutedAction::Suspend,
        mode,
        result,
        message: String::new(),
        at: at_sec(5),
        savings: Some(trainwarden_core::Savings {
            until: at_sec(3605),
            basis: trainwarden_core::SavingsBasis::EstimatedEnd,
            gpus: 8.0,
            gpu_hours,
            dollars: Some(gpu_hours * 10.0),
        }),
        policy_generation: None,
        wait_until: None,
    }
}

pub(crate) fn key() -> PolicyId {
    PolicyId { kind: PolicyKind::Namespaced, namespace: Some("ml".into()), name: "p".into() }
}

/// Policy `ml/p` (Enforce, a sample a second at most) with `rules` (YAML list items), as watched.
pub(crate) fn policy_input(rules: &str, status: Option<ProgressPolicyStatus>) -> Input {
    let doc = policy("p").spec("samplingInterval: 1s").rules(rules).document();
    Input::Policy(Box::new(PolicyInput { key: key(), uid: None, generation: 1, document: Ok(doc), status }))
}

/// A TrainJob `namespace/name` whose `status.trainerStatus` is `status`, updated at `at`, as watched.
pub(crate) fn trainer_status(
    namespace: &str,
    name: &str,
    at: Timestamp,
    mut status: serde_json::Value,
) -> Input {
    status["lastUpdatedTime"] = serde_json::json!(at.to_string());
    let obj = serde_json::json!({
        "metadata": {"name": name, "namespace": namespace},
        "status": {"trainerStatus": status},
    });
    let snapshot = trainwarden_core::from_trainjob(&obj).unwrap();
    crate::brain::tests::watched(snapshot, None)
}

pub(crate) fn job_reporting(loss: f64, at: Timestamp) -> Input {
    let mut snapshot = JobSnapshot::new(JobKey::new("ml", "ft"));
    snapshot.created_at = Some(at_sec(-60));
    let mut sample = ProgressSample::empty(at, SampleSource::TrainerStatus);
    sample.metrics.push(Metric { name: "loss".into(), value: loss });
    snapshot.sample = Some(sample);
    crate::brain::tests::watched(snapshot, None)
}

fn actions(brain: &mut Brain) -> Vec<String> {
    brain
        .work
        .drain(..)
        .filter_map(|w| match w {
            Work::Act(i) => Some(format!("{} {}", i.action.kind(), i.job)),
            Work::RecordEvent(_)
            | Work::Notify(..)
            | Work::Receivers(_)
            | Work::SaveHistory(_)
            | Work::SaveVerdict(_)
            | Work::Checkpoint(_)
            | Work::FlushHistory(..) => None,
        })
        .collect()
}

fn exception_input(name: &str, rules: &str, expires: Timestamp) -> Input {
    let spec = serde_json::json!({
        "exceptions": [{"policyName": "ml/p", "ruleNames": [rules]}],
        "expires": expires.to_string(),
    });
    let key = trainwarden_core::ExceptionRef { namespace: "ml".into(), name: name.into() };
    let compiled = trainwarden_core::compile_exception("ml", name, spec).map_err(|e| format!("{e:?}"));
    Input::Exception(Box::new(crate::messages::ExceptionInput {
        key,
        policy_names: vec!["ml/p".into()],
        compiled,
    }))
}

/// The intents of the last step, taken.
fn acts(b: &mut Brain) -> Vec<ActionIntent> {
    b.work.drain(..).filter_map(|w| if let Work::Act(i) = w { Some(i.intent) } else { None }).collect()
}

/// What the executor answers for `i` with `result`: a suspension frees 8 GPU-hours until at_sec(3600).
fn outcome(i: &ActionIntent, result: ActionResult) -> Input {
    let suspend = i.action.kind() == ActionKind::Suspend;
    Input::Outcome(Box::new(Outcome {
        intent: i.id.clone(),
        policy: i.policy.id(),
        job: i.job.clone(),
        rule: i.rule.clone(),
        action: if suspend { ExecutedAction::Suspend } else { ExecutedAction::Annotate },
        mode: Mode::Enforce,
        result,
        message: String::new(),
        at: i.at,
        savings: suspend.then(|| trainwarden_core::Savings {
            until: at_sec(3600),
            basis: trainwarden_core::SavingsBasis::EstimatedEnd,
            gpus: 8.0,
            gpu_hours: 8.0,
            dollars: None,
        }),
        policy_generation: None,
        wait_until: None,
    }))
}
