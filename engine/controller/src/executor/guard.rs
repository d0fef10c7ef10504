//! The stale-view guard: a stopping action (`suspend`, a Kueue Workload's deactivation, `scale`) is
//! written only under the policy as it stands at the moment of the write.
//!
//! Watches are independent streams and the API server gives no order between them: after a network cut the
//! TrainJob watch can deliver a NaN before the policy watch delivers the policy's deletion, and the brain
//! then judges the job under a policy that no longer exists. So, just before the write, with the TrainJob
//! already read fresh (as every action does), the executor checks what the brain judged under
//! ([`Judged`]):
//!
//! - the TrainJob has the uid the brain saw (else `job_replaced`); the write itself carries that uid as a
//!   precondition (`metadata.uid` in the apply), so a job replaced after the read is not written either;
//! - the policy, read fresh (one GET), exists (else `policy_deleted`), is the same object (else
//!   `policy_replaced`) and has the generation the brain judged under: a newer one comes back
//!   [`ActionResult::Stale`], after the fresh policy is handed to the brain, which judges the job under it
//!   and sends the intent again if the same firing still stands (`brain::stale`), or abandons it;
//! - no ProgressPolicyException of the job's namespace, read fresh (one LIST, when the policy honours that
//!   namespace's exceptions), holds the rule for the job now (else `excepted`; the exception is handed to
//!   the brain, whose cache may not have it yet);
//! - the TrainJob's snooze annotation, in the fresh read, is what the brain judged under or holds nothing
//!   (else `snoozed`; the TrainJob watch brings the snooze to the brain, which releases the rules still
//!   firing when it ends).
//!
//! Abandoned intents are settled [`ActionResult::Abandoned`], counted in
//! `trainwarden_actions_abandoned{reason}`, and an `ActionAbandoned` Event on the job says so (`not
//! suspended: policy nan-and-stall was deleted`). A read that fails fails the action (retried): nothing
//! stops a job on a view that could not be confirmed. The cost: two reads per stopping action (the policy
//! GET and, where exceptions can apply, the exceptions LIST), none per report and none for other actions.

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use trainwarden_core::describe::Notice;
use trainwarden_core::{ActionIntent, ActionSpec, Mode, PolicyKind, SNOOZE_ANNOTATION, Timestamp};
use trainwarden_kube::{ClusterProgressPolicy, ProgressPolicy, ProgressPolicyException};

use super::{ActionError, Ended, Executor};
use crate::messages::{AbandonReason, ActionResult, Input, Judged};
use crate::metrics::ApiOperation;
use crate::runtime::config::Clock;

/// Whether `intent` is an action the guard checks: one that stops (or resizes) a job, in Enforce mode.
pub(crate) fn guarded(intent: &ActionIntent) -> bool {
    intent.mode == Mode::Enforce && matches!(intent.action, ActionSpec::Suspend(_) | ActionSpec::Scale(_))
}

/// What the guard found.
pub(crate) enum Checked {
    /// The cluster stands as the intent was judged: write.
    Stands,
    /// Do not write; settle with this (abandoned, or stale).
    Stop(Ended),
}

/// The policy as read at the write.
enum FreshPolicy {
    Gone,
    Found { uid: Option<String>, generation: i64, input: Box<crate::messages::PolicyInput> },
}

impl Executor {
    /// Checks `intent` against the cluster as it is now (see the module). `job` is the TrainJob as just
    /// read. Inputs for the brain that must reach it before the outcome go to `before`; those that must
    /// follow it are pushed to `after`.
    pub(super) async fn check_view(
        &self,
        intent: &ActionIntent,
        judged: Option<&Judged>,
        job: &DynamicObject,
        before: &tokio::sync::mpsc::Sender<Input>,
        after: &mut Vec<Input>,
    ) -> Result<Checked, ActionError> {
        let policy_name = &intent.policy.name;
        if let Some(seen) = judged.and_then(|j| j.job_uid.as_deref())
            && job.uid().as_deref() != Some(seen)
        {
            let why = "the TrainJob was deleted and created again since the rule fired";
            return Ok(self.abandon(intent, job, AbandonReason::JobReplaced, why).await);
        }
        match self.read_policy(intent).await? {
            FreshPolicy::Gone => {
                after.push(Input::PolicyGone(intent.policy.id()));
                let why = format!("policy {policy_name} was deleted");
                return Ok(self.abandon(intent, job, AbandonReason::PolicyDeleted, &why).await);
            }
            FreshPolicy::Found { uid, generation, input } => {
                let judged_uid = judged.and_then(|j| j.policy_uid.as_deref());
                if let (Some(known), Some(now)) = (judged_uid, uid.as_deref())
                    && known != now
                {
                    after.push(Input::Policy(input));
                    let why = format!("policy {policy_name} was deleted and created again");
                    return Ok(self.abandon(intent, job, AbandonReason::PolicyReplaced, &why).await);
                }
                let judged_generation = judged.map_or(intent.policy.generation, |j| j.generation);
                if generation != judged_generation {
                    // The brain must have the policy as it stands before it hears of this outcome.
                    let _ = before.send(Input::Policy(input)).await;
                    let mut ended = Ended::new(
                        ActionResult::Stale,
                        format!(
                            "policy {policy_name} changed (generation {judged_generation} → {generation}) since the rule was judged; judged again under generation {generation}"
                        ),
                    );
                    ended.policy_generation = Some(generation);
                    return Ok(Checked::Stop(ended));
                }
            }
        }
        if judged.is_none_or(|j| j.honours_exceptions)
            && let Some((exception, why)) = self.holding_exception(intent, job).await?
        {
            after.push(exception);
            return Ok(self.abandon(intent, job, AbandonReason::Excepted, &why).await);
        }
        let fresh_snooze =
            job.annotations().get(SNOOZE_ANNOTATION).map(|v| v.trim()).filter(|v| !v.is_empty());
        let judged_snooze = judged.and_then(|j| j.snooze.as_deref());
        if fresh_snooze != judged_snooze
            && let Some(until) = fresh_snooze.and_then(|v| v.parse::<Timestamp>().ok())
            && until > self.now(intent)
        {
            let why = format!("the TrainJob was snoozed until {until} since the rule fired");
            return Ok(self.abandon(intent, job, AbandonReason::Snoozed, &why).await);
        }
        Ok(Checked::Stands)
    }

    /// "Now" for an exception's or a snooze's end and a checkpoint request: the wall clock, or the recorded
    /// stream's time when the controller replays one (the intent's time, the stream's "now" when it was
    /// issued).
    pub(super) fn now(&self, intent: &ActionIntent) -> Timestamp {
        match self.clock {
            Clock::Wall => Timestamp::now(),
            Clock::Reports { .. } => intent.at,
        }
    }

    /// The intent's policy, read now.
    async fn read_policy(&self, intent: &ActionIntent) -> Result<FreshPolicy, ActionError> {
        let name = intent.policy.name.as_str();
        let context = || format!("reading {} {} before the write", intent.policy.kind, intent.policy);
        let found = match intent.policy.kind {
            PolicyKind::Namespaced => {
                let ns = intent.policy.namespace.as_deref().unwrap_or_default();
                let api: Api<ProgressPolicy> = Api::namespaced(self.client.clone(), ns);
                self.call(ApiOperation::GetPolicy, || api.get_opt(name))
                    .await
                    .map_err(|e| ActionError::call(context(), e))?
                    .map(|p| {
                        (
                            p.uid(),
                            p.metadata.generation,
                            crate::messages::PolicyInput::read(&p, PolicyKind::Namespaced, p.status.clone()),
                        )
                    })
            }
            PolicyKind::Cluster => {
                let api: Api<ClusterProgressPolicy> = Api::all(self.client.clone());
                self.call(ApiOperation::GetPolicy, || api.get_opt(name))
                    .await
                    .map_err(|e| ActionError::call(context(), e))?
                    .map(|p| {
                        (
                            p.uid(),
                            p.metadata.generation,
                            crate::messages::PolicyInput::read(&p, PolicyKind::Cluster, p.status.clone()),
                        )
                    })
            }
        };
        Ok(match found {
            None => FreshPolicy::Gone,
            Some((uid, generation, input)) => {
                FreshPolicy::Found { uid, generation: generation.unwrap_or(0), input: Box::new(input) }
            }
        })
    }

    /// The ProgressPolicyException of the job's namespace that holds the intent's rule for the job now, as
    /// an input for the brain and the reason to give; `None` when none does (or their CRD is not installed).
    async fn holding_exception(
        &self,
        intent: &ActionIntent,
        job: &DynamicObject,
    ) -> Result<Option<(Input, String)>, ActionError> {
        let api: Api<ProgressPolicyException> = Api::namespaced(self.client.clone(), &intent.job.namespace);
        let params = ListParams::default();
        let list = match self.call(ApiOperation::ListExceptions, || api.list(&params)).await {
            Ok(list) => list,
            // Not installed: no exception can hold anything (the source says so once).
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => {
                return Err(ActionError::call("reading the ProgressPolicyExceptions before the write", e));
            }
        };
        let now = self.now(intent);
        let labels = job.labels();
        for object in list.items {
            let Ok(exception) = object.compile() else { continue };
            if exception.in_force(now)
                && exception.names_rule(&intent.policy, &intent.rule)
                && exception.matches_job(&intent.job, labels)
            {
                let why = format!(
                    "exception {} holds rule {} of policy {} until {}",
                    exception.reference.name, intent.rule, intent.policy.name, exception.expires
                );
                let policy_names =
                    object.spec.exception.exceptions.iter().map(|p| p.policy_name.clone()).collect();
                let input = crate::messages::ExceptionInput {
                    key: object.reference(),
                    policy_names,
                    compiled: Ok(exception),
                };
                return Ok(Some((Input::Exception(Box::new(input)), why)));
            }
        }
        Ok(None)
    }

    /// Settles the intent as abandoned for `reason`: counted, and an Event on the job says why.
    async fn abandon(
        &self,
        intent: &ActionIntent,
        job: &DynamicObject,
        reason: AbandonReason,
        why: &str,
    ) -> Checked {
        tracing::info!(job = %intent.job, rule = %intent.rule, id = %intent.id, reason = reason.as_str(), why, "action abandoned at the write: what it was judged under no longer stands");
        self.metrics.abandoned(reason, 1);
        self.publish(&super::events::object_reference(job), &Notice::action_abandoned(intent, why)).await;
        Checked::Stop(Ended::new(ActionResult::Abandoned, why))
    }
}
