//! The policy document: the `spec` of `ProgressPolicy` and `ClusterProgressPolicy`.
//!
//! These types are the CRD types (the kube crate wraps them with `CustomResource`), so every field carries a
//! doc comment that becomes its `kubectl explain` text, and the schema attributes are what the API server
//! enforces. Everything the schema cannot express (cron syntax, time zones, Rhai, detector parameters) is
//! checked by [`crate::policy::compile`], which reports all problems at once with their field paths.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::units::duration::PolicyDuration;

mod actions;
mod receivers;

pub use actions::*;
pub use receivers::*;

/// What a rule or receiver name may be (the CRD's pattern; `validate` applies the same).
pub const NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$";

/// What an Event reason may be (the CRD's pattern).
pub const REASON_PATTERN: &str = r"^[A-Za-z][A-Za-z0-9]*$";

/// What a policy does when a rule fires.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Mode {
    /// Report what would be done (Events, status, notifications marked as audit) and never act on jobs.
    #[default]
    Audit,
    /// Perform the rule's actions.
    Enforce,
}

impl Mode {
    /// `Audit` or `Enforce`, as written in a spec.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Audit => "Audit",
            Mode::Enforce => "Enforce",
        }
    }
}

/// A progress policy: which TrainJobs it watches, when it is active, and its rules.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicySpec {
    /// Label selector for the TrainJobs this policy applies to. An empty selector selects every TrainJob in
    /// scope (the policy's namespace for a ProgressPolicy).
    #[serde(default, skip_serializing_if = "LabelSelector::is_empty")]
    pub selector: LabelSelector,

    /// Audit (the default) only reports what the rules would do; Enforce performs the actions.
    #[serde(default)]
    pub mode: Mode,

    /// IANA time zone (for example Europe/Rome) for activeWindows and the calendar functions weekday() and
    /// hour(). Defaults to UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub timezone: Option<String>,

    /// Calendar windows during which the policy is active. Outside every window the policy is inactive and its
    /// rules resolve. Empty means always active.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub active_windows: Vec<ActiveWindowSpec>,

    /// Price of one GPU-hour in dollars, used for cost budgets and savings figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub gpu_hour_cost: Option<f64>,

    /// GPUs to assume for a TrainJob whose spec does not say (no GPU resource in resourcesPerNode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub assume_gpus: Option<f64>,

    /// How often the selected jobs are expected to report progress (RHOAI polls every 30s by default, the
    /// upstream callback at most every 5s). Windows and durations shorter than this are rejected. Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_interval: Option<DurationText>,

    /// Blast-radius limits: how many jobs this policy may stop (suspend or scale). A firing a limit holds
    /// back stays firing with all its actions held (an Event and a status entry name the limit) and acts
    /// when the limit allows, if its rule still fires. They apply in Audit mode too, so Audit shows what
    /// Enforce would hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSpec>,

    /// What an owner's snooze (the TrainJob annotation trainwarden.dev/snooze-until) may do to this policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snooze: Option<SnoozeSpec>,

    /// Custom metric names the training code reports, beyond the canonical ones (loss, eval_loss,
    /// learning_rate, grad_norm, accuracy, …; a reporter's other spellings arrive as these). A rule may watch
    /// a canonical name or one declared here: any other name is refused when it is a near miss of one (a typo
    /// that would never fire) and warned about otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub metrics: Vec<String>,

    /// How the selected jobs group into cohorts — a sweep's trials — for the detectors that judge a job
    /// against its siblings (median_stop, percentile, successive_halving). Default: by Katib's experiment
    /// label, aligned by training step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<CohortSpec>,

    /// The rules, evaluated independently for every selected TrainJob. Rule names are unique (the API server
    /// merges rules by name).
    #[schemars(length(min = 1, max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<RuleSpec>,

    /// Where `notify` actions deliver: named receivers (Slack, email, webhook) with Alertmanager-style grouping
    /// and repeat control. A rule's `notify: {to: NAME}` names one of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub receivers: Vec<ReceiverSpec>,
}

/// `spec.cohort`: which jobs are siblings, and where they are compared.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CohortSpec {
    /// The label whose value names a job's cohort: jobs with the same value are siblings; a job without the
    /// label is in no cohort and no cohort detector judges it. Default katib.kubeflow.org/experiment (the
    /// label Katib puts on every trial's job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 317))]
    pub by: Option<String>,

    /// What positions jobs are compared at: step (the reported current step, the default), epoch (the
    /// reported current epoch) or progress (the progress percentage: jobs of different lengths meet at
    /// whole percents). A report without it does not count for the cohort.
    #[serde(default)]
    pub align_by: AlignBy,
}

/// The default `spec.cohort.by`.
pub(crate) const KATIB_EXPERIMENT_LABEL: &str = "katib.kubeflow.org/experiment";

/// `spec.cohort.alignBy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AlignBy {
    #[default]
    Step,
    Epoch,
    Progress,
}

impl CohortSpec {
    /// The cohort label.
    pub fn label(&self) -> &str {
        self.by.as_deref().unwrap_or(KATIB_EXPERIMENT_LABEL)
    }
}

/// `spec.snooze`: the administrator's cap on owners' snoozes of this policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SnoozeSpec {
    /// The longest a snooze holds this policy's actions, from when the controller first saw it (within the
    /// controller's --max-snooze, which caps every policy); when it is over, the policy's rules still firing
    /// act even though the job stays snoozed for other policies. 0s: this policy's actions are never
    /// snoozed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_duration: Option<DurationText>,

    /// How many snoozes (distinct values of the annotation) a job may have for this policy over its life;
    /// from the next one on, the policy's rules act as if the job were not snoozed. 0: never snoozed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub max_per_job: Option<u32>,
}

/// `spec.limits`: at most so many stopping firings per hour, at most so many jobs suspended at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// At most this many firings that suspend or scale a job in any rolling hour; the next waits for a slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_actions_per_hour: Option<u32>,

    /// At most this many jobs suspended by this policy at a time (a job counts until it runs again,
    /// finishes or is deleted); the next waits until one of them leaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_concurrent_suspended: Option<u32>,
}

impl PolicySpec {
    /// The sampling interval, defaulted.
    pub fn sampling_interval(&self) -> PolicyDuration {
        self.sampling_interval.as_ref().and_then(|d| d.parse().ok()).unwrap_or(PolicyDuration::from_secs(30))
    }
}

/// A duration as written in the document (`15m`, `1h30m`). Kept as text so that validation can report every
/// malformed duration at once with its path; the CRD schema enforces the same pattern server-side.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DurationText(pub String);

impl DurationText {
    pub fn parse(&self) -> Result<PolicyDuration, String> {
        self.0.parse::<PolicyDuration>().map_err(|e| e.to_string())
    }
}

impl From<&str> for DurationText {
    fn from(s: &str) -> Self {
        DurationText(s.to_string())
    }
}

impl JsonSchema for DurationText {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <PolicyDuration as JsonSchema>::json_schema(generator)
    }
}

/// A recurring calendar window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActiveWindowSpec {
    /// Five-field cron expression for the window's start, in the policy's time zone (for example
    /// "0 18 * * FRI" for Friday 18:00).
    #[schemars(length(min = 9, max = 128))]
    pub start: String,
    /// How long each window lasts, for example 62h (Friday 18:00 to Monday 08:00).
    pub duration: DurationText,
}

/// A Kubernetes-style label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must all be present with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    /// Whether the selector has no requirements (it then selects everything).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Whether a set of labels satisfies the selector (Kubernetes semantics).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| e.matches(labels))
    }
}

/// One set-based label requirement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// In, NotIn, Exists or DoesNotExist.
    pub operator: SelectorOperator,
    /// Values for In and NotIn; must be empty for Exists and DoesNotExist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelSelectorRequirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// Label selector operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// The detectors a rule can use. Kept in sync with [`crate::judge::detectors::DETECTORS`] by a test.
pub(crate) const DETECTOR_NAMES: [&str; 16] = [
    "plateau",
    "diverging",
    "no_expected_gain",
    "non_finite",
    "stalled",
    "eta_after",
    "eta_exceeds",
    "over_budget",
    "loss_not_decreasing",
    "overtraining",
    "stalled_training",
    "gpu_idle",
    "hang",
    "median_stop",
    "percentile",
    "successive_halving",
];

fn detector_name_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = <String as JsonSchema>::json_schema(generator);
    schema.insert("enum".into(), serde_json::json!(DETECTOR_NAMES));
    schema
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// One rule: a condition (a built-in detector, a Rhai expression, or both) and what to do when it fires.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.uses) || has(self.when)", "message": "a rule needs uses (a detector), when (a Rhai condition), or both"},
    {"rule": "!has(self.with) || has(self.uses)", "message": "with needs uses (a detector)"},
]))]
pub struct RuleSpec {
    /// Rule name, unique within the policy; it appears in Events, reasons and status.
    #[schemars(length(min = 1, max = 63), regex(pattern = NAME_PATTERN))]
    pub name: String,

    /// A built-in detector: plateau, diverging, non_finite, stalled, eta_after, eta_exceeds, over_budget, the
    /// SageMaker Debugger ports loss_not_decreasing, overtraining, stalled_training, or the GPU detectors
    /// gpu_idle and hang (the GPUs' DCGM metrics, read with --prometheus-url), or the cohort detectors
    /// median_stop, percentile and successive_halving (a job against its sweep siblings, see spec.cohort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "detector_name_schema_opt")]
    pub uses: Option<String>,

    /// Parameters of the detector named in `uses` (see the detector catalog).
    #[serde(default, rename = "with", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object_opt")]
    pub with: Option<serde_json::Map<String, serde_json::Value>>,

    /// A Rhai expression that must be true for the rule to fire, for example
    /// `metric("loss") > 2 * best("loss") && progress() > 20`. With `uses`, both must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 16384))]
    pub when: Option<String>,

    /// How long the condition must hold before the rule fires (the rule is pending meanwhile). Default 0s.
    #[serde(default, rename = "for", skip_serializing_if = "Option::is_none")]
    pub for_: Option<DurationText>,

    /// How long the rule keeps firing after its condition stops holding, so a flapping signal does not
    /// resolve and re-fire. Default 0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_firing_for: Option<DurationText>,

    /// Minimum time before the same action is issued again for the same job, across firings. Default 0s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<DurationText>,

    /// Overrides the policy's mode for this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,

    /// What to do, in order, once per firing. A rule without actions only reports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub actions: Vec<ActionSpec>,
}

fn detector_name_schema_opt(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    detector_name_schema(generator)
}

fn free_form_object_opt(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    free_form_object(generator)
}

/// The spec of a ClusterProgressPolicy: a policy plus the namespaces it reaches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPolicySpec {
    /// Namespaces whose TrainJobs this policy applies to, by namespace labels. Empty selects every namespace.
    #[serde(default, skip_serializing_if = "LabelSelector::is_empty")]
    pub namespace_selector: LabelSelector,
    /// Which namespaces' ProgressPolicyExceptions this policy honours. None by default: an exception is
    /// written by a namespace's own people, so a cluster policy trusts only the namespaces listed here.
    #[serde(default, skip_serializing_if = "ExceptionsSpec::is_empty")]
    pub exceptions: ExceptionsSpec,
    /// The policy itself, its fields inlined.
    #[serde(flatten)]
    pub policy: PolicySpec,
}

/// `spec.exceptions` of a ClusterProgressPolicy: whose ProgressPolicyExceptions it honours.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExceptionsSpec {
    /// Namespaces whose ProgressPolicyExceptions may hold this policy's actions for their own TrainJobs.
    /// Empty (the default): none may.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub allowed_namespaces: Vec<String>,
}

impl ExceptionsSpec {
    fn is_empty(&self) -> bool {
        self.allowed_namespaces.is_empty()
    }
}

/// Where a policy applies.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyScope {
    /// A ProgressPolicy: jobs in its own namespace.
    Namespace(String),
    /// A ClusterProgressPolicy: jobs in namespaces whose labels match.
    Cluster {
        /// `spec.namespaceSelector`; empty selects every namespace.
        namespace_selector: LabelSelector,
        /// `spec.exceptions.allowedNamespaces`: namespaces whose exceptions it honours.
        exception_namespaces: Vec<String>,
    },
}

/// The two kinds of policy object. Ordered by their Kubernetes names, as the `&str` kinds were.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PolicyKind {
    /// `ProgressPolicy`: judges TrainJobs in its own namespace.
    #[serde(rename = "ProgressPolicy")]
    Namespaced,
    /// `ClusterProgressPolicy`: judges TrainJobs in the namespaces its `namespaceSelector` matches.
    #[serde(rename = "ClusterProgressPolicy")]
    Cluster,
}

impl PolicyKind {
    /// Both kinds, namespaced first.
    pub const ALL: [PolicyKind; 2] = [PolicyKind::Namespaced, PolicyKind::Cluster];

    /// The Kubernetes `kind`: `ProgressPolicy` or `ClusterProgressPolicy`.
    pub const fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Namespaced => "ProgressPolicy",
            PolicyKind::Cluster => "ClusterProgressPolicy",
        }
    }

    /// The kind named by a Kubernetes `kind` string.
    pub fn parse(kind: &str) -> Option<PolicyKind> {
        PolicyKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

impl Ord for PolicyKind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for PolicyKind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Identifies a policy in reasons, intents and status.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    /// ProgressPolicy or ClusterProgressPolicy.
    pub kind: PolicyKind,
    /// Set for a ProgressPolicy, `None` for a ClusterProgressPolicy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// metadata.generation the rules were compiled from (0 for files).
    pub generation: i64,
}

impl std::fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}", ns, self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

/// A policy regardless of its generation: the one key of a policy in the notifier and the controller.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PolicyId {
    /// ProgressPolicy or ClusterProgressPolicy.
    pub kind: PolicyKind,
    /// The namespace of a ProgressPolicy; `None` for a ClusterProgressPolicy.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl From<&PolicyRef> for PolicyId {
    fn from(p: &PolicyRef) -> Self {
        PolicyId { kind: p.kind, namespace: p.namespace.clone(), name: p.name.clone() }
    }
}

impl std::fmt::Display for PolicyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

impl PolicyRef {
    /// The policy regardless of its generation.
    pub fn id(&self) -> PolicyId {
        PolicyId::from(self)
    }
}

pub(crate) const API_VERSION: &str = "trainwarden.dev/v1alpha1";
