//! The executor: the only code that writes to TrainJobs, Kueue Workloads and Events.
//!
//! Work arrives from the evaluation loop as descriptions ([`Work`]); each item is checked against the
//! object's current state first, so repeating it changes nothing (idempotent), bounded by a deadline per API
//! call, retried on transient failures, counted in metrics, and reported back as an [`Outcome`]. Only the
//! leader executes; followers count what they skip.
//!
//! Every write is a server-side apply with trainwarden's field manager. Server-side apply removes fields a
//! manager applied before and omits now, so each apply re-states everything trainwarden owns on the object
//! (read from `managedFields`): its annotations, and `spec.suspend` / `spec.trainer.numNodes` if it set them.
//! `status.trainerStatus` belongs to Kubeflow (manager `trainer-status`) and is never written.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};
use trainwarden_core::{ActionIntent, Event, Savings};
use trainwarden_core::{ActionSpec, Mode, PolicyId};
use trainwarden_core::{JobKey, Timestamp};
use trainwarden_kube::FIELD_MANAGER;
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, TRAINJOB_KIND, TRAINJOB_VERSION, trainjob_api};
use trainwarden_notify::{JobProgress, Notifier};

use crate::config::ControllerConfig;
use crate::inputs::Input;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::{KUEUE_QUEUE_LABEL, LAST_ACTION_ANNOTATION, SUSPENDED_BY_ANNOTATION};

/// Kueue's Workload (`kueue.x-k8s.io/v1beta1`), the object that owns admission of a Kueue-managed job.
pub fn workload_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta1", "Workload"),
        "workloads",
    )
}

/// How many jobs the executor works on at once.
pub const CONCURRENCY: usize = 16;

/// What the evaluation loop asks for.
#[derive(Debug)]
pub enum Work {
    /// Perform (Enforce) or report (Audit) an action intent.
    Act(Box<ActionIntent>),
    /// Record a Kubernetes Event on a TrainJob (a rule fired or resolved, a rule failed, a job is exempt).
    Announce(Box<Announcement>),
    /// Hand an evaluator event to the notifier: every intent of a firing (so a message can say what was done)
    /// and every resolution (resolved messages). Leader only, like every other side effect.
    Notify(Box<Event>, Option<JobProgress>),
}

impl Work {
    pub fn job(&self) -> &JobKey {
        match self {
            Work::Act(i) => &i.job,
            Work::Announce(a) => &a.job,
            Work::Notify(e, _) => match e.as_ref() {
                Event::Transition { job, .. }
                | Event::Suppressed { job, .. }
                | Event::RuleError { job, .. } => job,
                Event::Intent(i) => &i.job,
            },
        }
    }
}

#[derive(Debug)]
pub struct Announcement {
    pub job: JobKey,
    pub warning: bool,
    /// CamelCase, e.g. RuleFiring.
    pub reason: String,
    /// What was done, e.g. Evaluate.
    pub action: String,
    pub note: String,
}

/// How an action ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Result_ {
    /// Performed.
    Done,
    /// Nothing to do: the object already was in that state (or this intent was already executed).
    Unchanged,
    /// Audit mode: reported, not performed.
    Reported,
    /// Not possible on this TrainJob (for example `spec.trainer` is immutable); not retried.
    Refused,
    /// Failed after retries.
    Failed,
    /// This replica is not the leader.
    NotLeader,
}

impl Result_ {
    pub fn as_str(&self) -> &'static str {
        match self {
            Result_::Done => "done",
            Result_::Unchanged => "unchanged",
            Result_::Reported => "reported",
            Result_::Refused => "refused",
            Result_::Failed => "failed",
            Result_::NotLeader => "skipped_not_leader",
        }
    }
}

/// What the executor did with one intent, for status.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub policy: PolicyId,
    pub job: JobKey,
    pub rule: String,
    /// suspend, deactivate (a Kueue Workload), annotate, event, scale, notify.
    pub action: &'static str,
    pub mode: Mode,
    pub result: Result_,
    pub message: String,
    pub at: Timestamp,
    pub savings: Option<Savings>,
}

/// A failure of one API call.
#[derive(Debug)]
enum CallError {
    Timeout,
    Api(kube::Error),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Timeout => write!(f, "the API server did not answer in time"),
            CallError::Api(kube::Error::Api(s)) => write!(f, "{} ({})", s.message, s.code),
            CallError::Api(e) => write!(f, "{e}"),
        }
    }
}

impl CallError {
    fn is_transient(&self) -> bool {
        match self {
            CallError::Timeout => true,
            CallError::Api(kube::Error::Api(s)) => s.code == 409 || s.code == 429 || s.code >= 500,
            CallError::Api(_) => true,
        }
    }

    fn is_not_found(&self) -> bool {
        matches!(self, CallError::Api(kube::Error::Api(s)) if s.code == 404)
    }
}

pub struct Executor {
    client: Client,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    leader: Leadership,
    notifier: Option<Notifier>,
    kueue: bool,
    timeout: Duration,
}

impl Executor {
    pub fn new(
        client: Client,
        config: &ControllerConfig,
        metrics: Arc<Metrics>,
        leader: Leadership,
        notifier: Option<Notifier>,
    ) -> Self {
        let reporter = Reporter { controller: "trainwarden".into(), instance: Some(config.identity.clone()) };
        Executor {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            leader,
            notifier,
            kueue: config.kueue,
            timeout: config.api_timeout,
        }
    }

    /// Performs work items in order until the channel closes, reporting outcomes to `feedback`.
    /// Performs work items until the channel closes, reporting outcomes to `feedback`. Items of one job run
    /// in order, one at a time; different jobs run concurrently (up to [`CONCURRENCY`]), so a burst of
    /// firings (a node failure stalls 40 jobs at once) is not served one API round trip after the other.
    pub async fn run(self, mut work: mpsc::Receiver<Work>, feedback: mpsc::Sender<Input>) {
        let this = Arc::new(self);
        let mut queues: HashMap<JobKey, VecDeque<Work>> = HashMap::new();
        // Jobs with queued work and nothing running, in arrival order.
        let mut ready: VecDeque<JobKey> = VecDeque::new();
        // Jobs that are ready or running: a new item of theirs just queues.
        let mut scheduled: HashSet<JobKey> = HashSet::new();
        let mut running: JoinSet<JobKey> = JoinSet::new();
        let mut open = true;
        loop {
            while running.len() < CONCURRENCY
                && let Some(job) = ready.pop_front()
            {
                let Some(item) = queues.get_mut(&job).and_then(VecDeque::pop_front) else { continue };
                let (this, feedback) = (this.clone(), feedback.clone());
                running.spawn(async move {
                    this.process(item, &feedback).await;
                    job
                });
            }
            if !open && running.is_empty() {
                break;
            }
            tokio::select! {
                item = work.recv(), if open => match item {
                    Some(item) => {
                        let job = item.job().clone();
                        queues.entry(job.clone()).or_default().push_back(item);
                        if scheduled.insert(job.clone()) {
                            ready.push_back(job);
                        }
                    }
                    None => open = false,
                },
                Some(done) = running.join_next(), if !running.is_empty() => {
                    let Ok(job) = done else { continue };
                    match queues.get(&job) {
                        Some(q) if !q.is_empty() => ready.push_back(job),
                        _ => {
                            queues.remove(&job);
                            scheduled.remove(&job);
                        }
                    }
                }
            }
        }
    }

    async fn process(&self, item: Work, feedback: &mpsc::Sender<Input>) {
        match item {
            Work::Announce(a) => {
                if self.leader.is_leader() {
                    self.announce(&a).await;
                }
            }
            Work::Notify(event, progress) => {
                if let (true, Some(notifier)) = (self.leader.is_leader(), &self.notifier)
                    && let Err(e) = notifier.observe(&event, progress)
                {
                    self.metrics.api_error("notify_submit");
                    warn!(error = %e, "notification not queued");
                }
            }
            Work::Act(intent) => {
                let outcome = self.act(&intent).await;
                self.metrics.action(outcome.action, intent.mode.as_str(), outcome.result.as_str());
                // Also when not the leader: the brain counts every intent until its outcome (see
                // `Brain::in_flight`).
                let _ = feedback.send(Input::Outcome(Box::new(outcome))).await;
            }
        }
    }

    async fn call<T, F>(&self, operation: &str, f: impl Fn() -> F) -> Result<T, CallError>
    where
        F: Future<Output = Result<T, kube::Error>>,
    {
        let mut delay = Duration::from_millis(200);
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.metrics.api_request(operation);
            let result = match tokio::time::timeout(self.timeout, f()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => CallError::Api(e),
                Err(_) => CallError::Timeout,
            };
            if !result.is_not_found() {
                self.metrics.api_error(operation);
            }
            if !result.is_transient() || attempt >= 4 {
                return Err(result);
            }
            debug!(operation, attempt, error = %result, "retrying");
            tokio::time::sleep(delay).await;
            delay *= 2;
        }
    }

    /// Performs or reports one intent.
    pub async fn act(&self, intent: &ActionIntent) -> Outcome {
        let mut outcome = Outcome {
            policy: intent.policy.id(),
            job: intent.job.clone(),
            rule: intent.rule.clone(),
            action: intent.action.kind(),
            mode: intent.mode,
            result: Result_::NotLeader,
            message: String::new(),
            at: intent.at,
            savings: intent.savings.clone(),
        };
        if !self.leader.is_leader() {
            return outcome;
        }
        let (result, message) = match self.perform(intent, &mut outcome).await {
            Ok(done) => done,
            Err(e) => (Result_::Failed, e),
        };
        outcome.result = result;
        outcome.message = message;
        match outcome.result {
            Result_::Failed | Result_::Refused => {
                warn!(job = %intent.job, rule = %intent.rule, action = outcome.action, result = outcome.result.as_str(), message = %outcome.message, "action not performed")
            }
            _ => {
                info!(job = %intent.job, rule = %intent.rule, action = outcome.action, mode = intent.mode.as_str(), result = outcome.result.as_str(), "action")
            }
        }
        outcome
    }

    async fn perform(
        &self,
        intent: &ActionIntent,
        outcome: &mut Outcome,
    ) -> Result<(Result_, String), String> {
        let api = trainjob_api(self.client.clone(), Some(&intent.job.namespace));
        let name = intent.job.name.as_str();
        let job = match self.call("get_trainjob", || api.get(name)).await {
            Ok(job) => job,
            Err(e) if e.is_not_found() => {
                return Ok((Result_::Failed, "the TrainJob no longer exists".into()));
            }
            Err(e) => return Err(format!("reading the TrainJob: {e}")),
        };
        let reference = object_reference(&job);
        let summary = &intent.reason.summary;
        let by = format!("{} {} (rule {})", intent.policy.kind, intent.policy, intent.rule);
        let audit = intent.mode == Mode::Audit;

        if let ActionSpec::Event(e) = &intent.action {
            let warning = !matches!(e.type_, Some(trainwarden_core::EventType::Normal));
            let reason = e.reason.clone().unwrap_or_else(|| "ProgressRuleFiring".into());
            self.publish(&reference, warning, &reason, "Evaluate", &format!("{by}: {summary}")).await;
            return Ok((Result_::Done, String::new()));
        }
        if let ActionSpec::Notify(n) = &intent.action {
            // Delivery is the notifier's (it got this intent as Work::Notify, grouped with the firing's other
            // intents); its counters are in /metrics and the policy status. Without a notifier the intent is
            // recorded (status, Event, metrics).
            if self.notifier.is_some() {
                return Ok((Result_::Done, format!("queued for receiver {:?}", n.to)));
            }
            let note = format!("{by} would notify {:?}: {summary}", n.to);
            self.publish(&reference, false, "NotificationRecorded", "Notify", &note).await;
            return Ok((Result_::Reported, format!("receiver {:?}: notifications are off", n.to)));
        }
        if audit {
            let (reason, what) = match &intent.action {
                ActionSpec::Suspend(_) => ("WouldSuspend", "suspend the TrainJob".to_string()),
                ActionSpec::Annotate(a) => ("WouldAnnotate", format!("set annotation {}", a.key)),
                ActionSpec::Scale(s) => ("WouldScale", format!("scale to {} nodes", s.num_nodes)),
                _ => ("WouldAct", intent.action.kind().to_string()),
            };
            self.publish(
                &reference,
                false,
                reason,
                "Audit",
                &format!("[Audit] {by} would {what}: {summary}"),
            )
            .await;
            return Ok((Result_::Reported, format!("Audit mode: would {what}")));
        }
        if job.annotations().get(LAST_ACTION_ANNOTATION).and_then(|v| last_action_id(v)).as_deref()
            == Some(&intent.id)
        {
            return Ok((Result_::Unchanged, "this action was already performed".into()));
        }
        let record = last_action(intent);
        match &intent.action {
            ActionSpec::Suspend(s) => {
                let note = match &s.message {
                    Some(m) => format!("{by}: {summary}. {m}"),
                    None => format!("{by}: {summary}"),
                };
                let queue = job.labels().get(KUEUE_QUEUE_LABEL).cloned();
                if let (true, Some(queue)) = (self.kueue, queue) {
                    outcome.action = "deactivate";
                    let result = self.deactivate_workload(&job, &queue).await?;
                    if result.0 == Result_::Done {
                        self.apply_to_job(&api, &job, &[(LAST_ACTION_ANNOTATION, &record)], None).await?;
                        self.publish(
                            &reference,
                            true,
                            "WorkloadDeactivated",
                            "Suspend",
                            &format!("{note} ({})", result.1),
                        )
                        .await;
                    }
                    return Ok(result);
                }
                if spec_bool(&job, "/spec/suspend") == Some(true) {
                    return Ok((Result_::Unchanged, "the TrainJob is already suspended".into()));
                }
                self.apply_to_job(
                    &api,
                    &job,
                    &[(LAST_ACTION_ANNOTATION, &record), (SUSPENDED_BY_ANNOTATION, &by)],
                    Some(json!({"suspend": true})),
                )
                .await?;
                self.publish(&reference, true, "Suspended", "Suspend", &note).await;
                Ok((Result_::Done, "spec.suspend set to true".into()))
            }
            ActionSpec::Annotate(a) => {
                let value = a.value.clone().unwrap_or_else(|| summary.clone());
                if job.annotations().get(&a.key) == Some(&value) {
                    return Ok((Result_::Unchanged, format!("annotation {} already set", a.key)));
                }
                self.apply_to_job(&api, &job, &[(&a.key, &value), (LAST_ACTION_ANNOTATION, &record)], None)
                    .await?;
                self.publish(
                    &reference,
                    false,
                    "Annotated",
                    "Annotate",
                    &format!("{by} set {}: {summary}", a.key),
                )
                .await;
                Ok((Result_::Done, format!("annotation {} set", a.key)))
            }
            ActionSpec::Scale(s) => {
                self.scale(&api, &job, s.num_nodes, &record, &by, summary, &reference).await
            }
            ActionSpec::Event(_) | ActionSpec::Notify(_) => unreachable!("handled above"),
        }
    }

    /// Deactivates the Kueue Workload owned by the TrainJob (`spec.active: false`): Kueue owns
    /// `spec.suspend` of the jobs it manages and would undo a direct suspension; a deactivated Workload makes
    /// Kueue evict and suspend the job itself.
    async fn deactivate_workload(
        &self,
        job: &DynamicObject,
        queue: &str,
    ) -> Result<(Result_, String), String> {
        let ns = job.namespace().unwrap_or_default();
        let uid = job.uid().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &workload_resource());
        let list_params = kube::api::ListParams::default();
        let list = self
            .call("list_workloads", || api.list(&list_params))
            .await
            .map_err(|e| format!("listing Kueue Workloads in {ns} (queue {queue}): {e}"))?;
        let owned = list.items.into_iter().find(|w| {
            w.owner_references().iter().any(|o| o.uid == uid)
                || w.labels().get("kueue.x-k8s.io/job-uid").is_some_and(|u| *u == uid)
        });
        let Some(workload) = owned else {
            return Ok((
                Result_::Failed,
                format!(
                    "the TrainJob is managed by Kueue (queue {queue}) but no Workload owned by it exists yet"
                ),
            ));
        };
        let wname = workload.name_any();
        if spec_bool(&workload, "/spec/active") == Some(false) {
            return Ok((Result_::Unchanged, format!("Kueue Workload {wname} is already inactive")));
        }
        let body = json!({
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": wname, "namespace": ns},
            "spec": {"active": false},
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(&body);
        self.call("patch_workload", || api.patch(&wname, &params, &patch))
            .await
            .map_err(|e| format!("deactivating Kueue Workload {wname}: {e}"))?;
        Ok((
            Result_::Done,
            format!(
                "managed by Kueue (queue {queue}): deactivated Workload {wname} instead of setting spec.suspend"
            ),
        ))
    }

    /// Changes `spec.trainer.numNodes` by suspend → patch → resume, where the TrainJob CRD allows it. A dry
    /// run asks the API server first: the upstream CRD makes `spec.trainer` immutable (CEL
    /// `self == oldSelf`), which is a refusal, not a failure to retry.
    #[allow(clippy::too_many_arguments)]
    async fn scale(
        &self,
        api: &Api<DynamicObject>,
        job: &DynamicObject,
        nodes: i32,
        record: &str,
        by: &str,
        summary: &str,
        reference: &ObjectReference,
    ) -> Result<(Result_, String), String> {
        let name = job.name_any();
        let current = job.data.pointer("/spec/trainer/numNodes").and_then(Value::as_i64);
        if current == Some(nodes as i64) {
            return Ok((Result_::Unchanged, format!("numNodes is already {nodes}")));
        }
        let was_suspended = spec_bool(job, "/spec/suspend") == Some(true);
        // The intent counts as performed (last-action record) only with the last write: when resuming fails,
        // a repeat of the intent must not find it "already performed" and leave the job suspended.
        let resize_record: &[(&str, &str)] =
            if was_suspended { &[(LAST_ACTION_ANNOTATION, record)] } else { &[] };
        let body = |suspend: bool| {
            let mut body = self.owned_state(job, resize_record);
            body["spec"]["suspend"] = json!(suspend);
            body["spec"]["trainer"]["numNodes"] = json!(nodes);
            body
        };
        let dry = PatchParams::apply(FIELD_MANAGER).force().dry_run();
        let resized = body(true);
        let patch = Patch::Apply(&resized);
        match self.call("patch_trainjob", || api.patch(&name, &dry, &patch)).await {
            Ok(_) => {}
            Err(CallError::Api(kube::Error::Api(s))) if s.code == 422 || s.code == 400 => {
                let message = format!("cannot change spec.trainer.numNodes of this TrainJob: {}", s.message);
                self.publish(reference, true, "ScaleRefused", "Scale", &format!("{by}: {message}")).await;
                return Ok((Result_::Refused, message));
            }
            Err(e) => return Err(format!("checking whether numNodes can change: {e}")),
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        // Suspend and resize in one apply, then resume unless the job was suspended before.
        self.call("patch_trainjob", || api.patch(&name, &params, &patch))
            .await
            .map_err(|e| format!("suspending and resizing: {e}"))?;
        if !was_suspended {
            let resumed = self.call("get_trainjob", || api.get(&name)).await.map_err(|e| e.to_string())?;
            let mut resume = self.owned_state(&resumed, &[(LAST_ACTION_ANNOTATION, record)]);
            resume["spec"]["suspend"] = json!(false);
            let patch = Patch::Apply(&resume);
            if let Err(e) = self.call("patch_trainjob", || api.patch(&name, &params, &patch)).await {
                let message =
                    format!("resized to {nodes} nodes but resuming failed, the job stays suspended: {e}");
                self.publish(reference, true, "ScaleResumeFailed", "Scale", &format!("{by}: {message}"))
                    .await;
                return Err(message);
            }
        }
        let from = current.map_or("?".to_string(), |c| c.to_string());
        self.publish(
            reference,
            false,
            "Scaled",
            "Scale",
            &format!("{by}: numNodes {from} → {nodes}: {summary}"),
        )
        .await;
        Ok((Result_::Done, format!("numNodes {from} → {nodes}")))
    }

    /// The apply body that re-states what trainwarden owns on the TrainJob plus `annotations`.
    fn owned_state(&self, job: &DynamicObject, annotations: &[(&str, &str)]) -> Value {
        let owned = owned_fields(job);
        let mut merged: BTreeMap<String, String> = BTreeMap::new();
        for key in &owned.annotations {
            if let Some(v) = job.annotations().get(key) {
                merged.insert(key.clone(), v.clone());
            }
        }
        for (k, v) in annotations {
            merged.insert(k.to_string(), v.to_string());
        }
        let mut body = json!({
            "apiVersion": format!("{TRAINJOB_GROUP}/{TRAINJOB_VERSION}"),
            "kind": TRAINJOB_KIND,
            "metadata": {"name": job.name_any(), "namespace": job.namespace(), "annotations": merged},
        });
        if owned.suspend
            && let Some(s) = spec_bool(job, "/spec/suspend")
        {
            body["spec"]["suspend"] = json!(s);
        }
        if owned.num_nodes
            && let Some(n) = job.data.pointer("/spec/trainer/numNodes")
        {
            body["spec"]["trainer"]["numNodes"] = n.clone();
        }
        body
    }

    async fn apply_to_job(
        &self,
        api: &Api<DynamicObject>,
        job: &DynamicObject,
        annotations: &[(&str, &str)],
        spec: Option<Value>,
    ) -> Result<(), String> {
        let mut body = self.owned_state(job, annotations);
        if let Some(Value::Object(spec)) = spec {
            for (k, v) in spec {
                body["spec"][k] = v;
            }
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let name = job.name_any();
        let patch = Patch::Apply(&body);
        self.call("patch_trainjob", || api.patch(&name, &params, &patch))
            .await
            .map(|_| ())
            .map_err(|e| format!("writing the TrainJob: {e}"))
    }

    async fn announce(&self, a: &Announcement) {
        let api = trainjob_api(self.client.clone(), Some(&a.job.namespace));
        match self.call("get_trainjob", || api.get(&a.job.name)).await {
            Ok(job) => self.publish(&object_reference(&job), a.warning, &a.reason, &a.action, &a.note).await,
            Err(e) if e.is_not_found() => {}
            Err(e) => warn!(job = %a.job, error = %e, "cannot record an Event"),
        }
    }

    async fn publish(
        &self,
        reference: &ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let event = KubeEvent {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.into(),
            // events.k8s.io/v1 limits the note to 1 kB.
            note: Some(truncate(note, 1000)),
            action: action.into(),
            secondary: None,
        };
        self.metrics.api_request("create_event");
        let result = tokio::time::timeout(self.timeout, self.recorder.publish(&event, reference)).await;
        match result {
            Ok(Ok(())) => self.metrics.action("event_record", "-", "done"),
            Ok(Err(e)) => {
                self.metrics.api_error("create_event");
                warn!(error = %e, reason, "recording an Event failed");
            }
            Err(_) => {
                self.metrics.api_error("create_event");
                warn!(reason, "recording an Event timed out");
            }
        }
    }
}

/// The fields trainwarden's field manager owns on an object, from its `managedFields`.
#[derive(Debug, Default, PartialEq)]
pub struct OwnedFields {
    pub annotations: Vec<String>,
    pub suspend: bool,
    pub num_nodes: bool,
}

pub fn owned_fields(obj: &DynamicObject) -> OwnedFields {
    let mut owned = OwnedFields::default();
    for entry in obj.metadata.managed_fields.iter().flatten() {
        if entry.manager.as_deref() != Some(FIELD_MANAGER) || entry.operation.as_deref() != Some("Apply") {
            continue;
        }
        let Some(fields) = entry.fields_v1.as_ref().map(|f| &f.0) else { continue };
        if let Some(Value::Object(annotations)) = fields.pointer("/f:metadata/f:annotations") {
            owned
                .annotations
                .extend(annotations.keys().filter_map(|k| k.strip_prefix("f:").map(str::to_string)));
        }
        owned.suspend |= fields.pointer("/f:spec/f:suspend").is_some();
        owned.num_nodes |= fields.pointer("/f:spec/f:trainer/f:numNodes").is_some();
    }
    owned
}

fn spec_bool(obj: &DynamicObject, pointer: &str) -> Option<bool> {
    obj.data.pointer(pointer).and_then(Value::as_bool)
}

fn object_reference(job: &DynamicObject) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{TRAINJOB_GROUP}/{TRAINJOB_VERSION}")),
        kind: Some(TRAINJOB_KIND.into()),
        name: Some(job.name_any()),
        namespace: job.namespace(),
        uid: job.uid(),
        resource_version: job.resource_version(),
        ..ObjectReference::default()
    }
}

/// The `trainwarden.dev/last-action` annotation: what was done, why, and the intent id (idempotence).
fn last_action(intent: &ActionIntent) -> String {
    json!({
        "id": intent.id,
        "action": intent.action.kind(),
        "policy": format!("{} {}", intent.policy.kind, intent.policy),
        "rule": intent.rule,
        "reason": truncate(&intent.reason.summary, 512),
        "at": intent.at.to_string(),
    })
    .to_string()
}

fn last_action_id(annotation: &str) -> Option<String> {
    serde_json::from_str::<Value>(annotation).ok()?.get("id")?.as_str().map(str::to_string)
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_with_managed_fields(fields: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {
                "name": "j", "namespace": "ns",
                "annotations": {"trainwarden.dev/last-action": "{}", "team": "ml"},
                "managedFields": [
                    {"manager": "trainwarden", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields},
                    {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:annotations": {"f:team": {}}}}}
                ]
            },
            "spec": {"suspend": true, "trainer": {"numNodes": 2}}
        }))
        .unwrap()
    }

    #[test]
    fn owned_fields_come_from_our_apply_entry_only() {
        let job = job_with_managed_fields(json!({
            "f:metadata": {"f:annotations": {"f:trainwarden.dev/last-action": {}}},
            "f:spec": {"f:suspend": {}}
        }));
        let owned = owned_fields(&job);
        assert_eq!(
            owned,
            OwnedFields {
                annotations: vec!["trainwarden.dev/last-action".into()],
                suspend: true,
                num_nodes: false
            }
        );
    }

    #[test]
    fn last_action_ids_round_trip_and_garbage_is_no_id() {
        let v = json!({"id": "a:b:c", "action": "suspend"}).to_string();
        assert_eq!(last_action_id(&v).as_deref(), Some("a:b:c"));
        assert_eq!(last_action_id("not json"), None);
        assert_eq!(last_action_id("{\"id\": 3}"), None);
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("ééééé", 6), "é...");
        assert_eq!(truncate("short", 10), "short");
    }
}
