//! validate → build: from a policy document to a [`CompiledPolicy`] the evaluator runs.
//!
//! Everything is checked in one pass and every problem is reported with its field path: unknown fields,
//! durations, cron windows, the time zone, rule names, detectors and their parameters, windows shorter
//! than the sampling interval, Rhai compile errors (with line:column), notification receivers
//! ([`crate::policy::receiver`]: durations, message templates, Secret namespaces, `notify.to` names), and
//! cross-field requirements such as a cost budget without `gpuHourCost`. A policy that has any error is not compiled at all, so nothing
//! is half-applied. Scripts are compiled here, once per policy version.

mod actions;
pub use actions::RESERVED_ANNOTATIONS;
mod calendar;
mod metrics;
mod rules;

use std::sync::Arc;

use serde_json::Value;

use crate::error::{FieldError, FieldErrors};
use crate::history::job::PolicyEnv;
use crate::judge::detectors::Detector;
use crate::judge::script::{CompiledScript, ScriptEngine};
use crate::policy::object::{
    check_api_version, check_top_level_fields, dns_label, dns_subdomain, validate_selector,
};
use crate::policy::positions::{self, DocumentPositions};
use crate::policy::receiver::{self, CompiledReceiver};
use crate::policy::schema;
use crate::policy::{
    ActionSpec, ClusterPolicySpec, LabelSelector, Mode, PolicyKind, PolicyRef, PolicyScope, PolicySpec,
};
use crate::units::duration::PolicyDuration;

/// A policy document as read from a file or the API: identity, scope and spec.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyDocument {
    /// Kind, namespace, name and generation.
    pub reference: PolicyRef,
    /// Which jobs it may reach: its namespace, or namespaces by label.
    pub scope: PolicyScope,
    /// The policy as written.
    pub spec: PolicySpec,
    /// Where its fields are in the file it was read from (none for objects from the API).
    pub positions: Option<Arc<DocumentPositions>>,
    /// What reading the file refused (the CRD schema, metadata, kind) in a document whose spec could still
    /// be read: [`compile`] reports these with its own checks, so every problem shows at once, and never
    /// compiles such a document.
    pub reading_errors: Vec<FieldError>,
}

/// One rule, ready to evaluate.
#[derive(Debug)]
pub struct CompiledRule {
    pub name: String,
    pub detector_name: Option<String>,
    pub detector: Option<Box<dyn Detector>>,
    pub script: Option<CompiledScript>,
    /// The `when` text, for reasons.
    pub when: Option<String>,
    pub for_: PolicyDuration,
    pub keep_firing_for: PolicyDuration,
    pub cooldown: PolicyDuration,
    pub mode: Mode,
    pub actions: Vec<ActionSpec>,
    /// The rule's spec as JSON: a rule whose definition did not change keeps its state when its policy is
    /// replaced.
    pub fingerprint: String,
    /// The metric names the rule reads (its detector's and its script's constant ones), for `replay` and
    /// `backtest` to name those no run reported: such a rule could not fire there.
    pub watched_metrics: Vec<String>,
}

/// A validated policy with compiled rules.
#[derive(Debug)]
pub struct CompiledPolicy {
    /// Kind, namespace, name and generation.
    pub reference: PolicyRef,
    /// Which namespaces it reaches.
    pub scope: PolicyScope,
    /// `spec.selector`: which TrainJobs in them it judges.
    pub selector: LabelSelector,
    /// The policy's mode; a rule may override it.
    pub mode: Mode,
    /// Calendar, GPU price and default GPU count, shared by every job's view.
    pub env: Arc<PolicyEnv>,
    /// How often jobs are expected to report progress.
    pub sampling_interval: PolicyDuration,
    /// The rules, in spec order.
    pub rules: Vec<CompiledRule>,
    /// `spec.receivers`, for the notifier.
    pub receivers: Vec<CompiledReceiver>,
    /// `spec.limits`: how many jobs it may stop (the evaluator's `limits` module applies them).
    pub limits: crate::policy::spec::LimitsSpec,
    /// `spec.snooze.maxDuration`: the longest an owner's snooze holds this policy's actions (`None`: the
    /// engine's cap alone).
    pub max_snooze: Option<PolicyDuration>,
    /// `spec.snooze.maxPerJob`: how many snoozes a job may have for this policy (`None`: no limit).
    pub max_snoozes: Option<u32>,
    /// What may make a rule a silent no-op without being certain to (a metric name no canonical list knows
    /// and the policy does not declare): `validate` prints them, `validate --strict` refuses the policy.
    pub warnings: Vec<FieldError>,
    /// Where the document was read from (`file:line`), for messages that name two definitions.
    pub origin: Option<String>,
    /// `spec.cohort`: how its jobs group for the cohort detectors.
    pub cohort: crate::policy::spec::CohortSpec,
    /// A condition calls a `cohort_*` script function: the evaluator keeps its cohorts' values.
    pub cohort_functions: bool,
}

impl CompiledPolicy {
    /// Whether a job with these labels in a namespace with these labels is selected.
    pub fn selects(
        &self,
        namespace: &str,
        job_labels: &std::collections::BTreeMap<String, String>,
        namespace_labels: Option<&std::collections::BTreeMap<String, String>>,
    ) -> bool {
        let in_scope = match &self.scope {
            PolicyScope::Namespace(ns) => ns == namespace,
            PolicyScope::Cluster { namespace_selector, .. } => {
                namespace_selector.is_empty()
                    || namespace_labels.is_some_and(|labels| namespace_selector.matches(labels))
            }
        };
        in_scope && self.selector.matches(job_labels)
    }

    /// Whether a ProgressPolicyException of `namespace` may hold this policy's actions: a ProgressPolicy's
    /// own namespace may, a ClusterProgressPolicy's `spec.exceptions.allowedNamespaces` may (none by default).
    pub fn honours_exceptions_from(&self, namespace: &str) -> bool {
        match &self.scope {
            PolicyScope::Namespace(ns) => ns == namespace,
            PolicyScope::Cluster { exception_namespaces, .. } => {
                exception_namespaces.iter().any(|n| n == namespace)
            }
        }
    }

    /// Whether some rule can change with time alone in a way no timer announces: a script that reads the
    /// clock (`hour()`, `runtime()`, …: `CompiledScript::reads_the_clock`) or a detector that does
    /// (`Detector::reads_the_clock`). Only such policies need the evaluator's `eval_interval` rounds.
    pub fn reads_the_clock(&self) -> bool {
        self.reads_the_clock_when(true)
    }

    /// [`CompiledPolicy::reads_the_clock`] for an engine that runs compiled conditions natively or not.
    pub fn reads_the_clock_when(&self, native_conditions: bool) -> bool {
        self.rules.iter().any(|r| {
            r.script.as_ref().is_some_and(|s| s.reads_the_clock_when(native_conditions))
                || r.detector.as_ref().is_some_and(|d| d.reads_the_clock())
        })
    }

    /// Whether some rule judges the jobs' GPU readings (`uses: gpu_idle`/`hang`, or a `when` calling a GPU
    /// function): the controller reports the GPU metrics' health on such policies.
    pub fn reads_gpus(&self) -> bool {
        self.rules.iter().any(|r| {
            r.script.as_ref().is_some_and(crate::judge::script::CompiledScript::reads_gpus)
                || r.detector.as_ref().is_some_and(|d| d.reads_gpus())
        })
    }

    /// Whether some `when` reads the demand queued in Kueue (`queue_pending()`, `queue_pending_gpus()`): the
    /// controller reports on such policies whether it reads Kueue's queues.
    pub fn reads_queue(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.script.as_ref().is_some_and(crate::judge::script::CompiledScript::reads_queue))
    }

    /// Whether `notify: {to: name}` reaches a receiver of this policy.
    pub fn has_receiver(&self, name: &str) -> bool {
        self.receivers.iter().any(|r| r.name == name)
    }

    /// What its `notify` actions would send nothing for (a policy without `spec.receivers` may notify, and
    /// is then only reported): one sentence per rule and receiver, to say before anything runs.
    pub fn notifies_nowhere(&self) -> Vec<String> {
        let mut out = Vec::new();
        for rule in &self.rules {
            for action in &rule.actions {
                if let ActionSpec::Notify(n) = action
                    && !self.has_receiver(&n.to)
                {
                    out.push(format!(
                        "{} {}: rule {} notifies {:?}, but the policy declares no such receiver: nothing will be sent (add spec.receivers with a Slack, email or webhook receiver named {:?})",
                        self.reference.kind, self.reference, rule.name, n.to, n.to
                    ));
                }
            }
        }
        out
    }
}

/// Validates and compiles a policy. `Err` lists every problem. One step per module, in the order their
/// errors are reported: the calendar, the policy-wide settings (here), the receivers, then the rules.
pub fn compile(doc: &PolicyDocument, engine: &ScriptEngine) -> Result<CompiledPolicy, FieldErrors> {
    let mut errors = Vec::new();
    let spec = &doc.spec;
    let calendar = calendar::calendar(spec, &mut errors);
    let sampling_interval = check_settings(doc, &mut errors);
    let receivers =
        receiver::compile_receivers(&spec.receivers, &doc.scope, calendar.time_zone(), &mut errors);
    let mut watched = Vec::new();
    let rules = rules::rules(spec, sampling_interval, engine, &mut errors, &mut watched);
    let mut warnings = Vec::new();
    metrics::check_declared(&spec.metrics, &mut errors);
    metrics::check(&watched, &spec.metrics, &mut errors, &mut warnings);
    // A field the compiler has something to say about needs no second, vaguer line from the schema.
    let own: std::collections::HashSet<String> = errors.iter().map(|e| e.path.clone()).collect();
    let reading_errors = doc.reading_errors.iter().filter(|e| !own.contains(&e.path)).cloned();
    let mut errors: Vec<FieldError> = reading_errors.chain(errors).collect();
    if !errors.is_empty() {
        let file = doc.positions.as_ref().map(|p| p.file.clone());
        locate(&mut errors, doc.positions.as_deref());
        // In file order, when the document came from a file (stable: errors of one field keep their order).
        errors.sort_by_key(|e| e.position.map_or((usize::MAX, 0), |p| (p.line, p.column)));
        return Err(FieldErrors { document: doc.reference.to_string(), file, errors });
    }
    locate(&mut warnings, doc.positions.as_deref());
    let origin = doc.positions.as_ref().map(|p| match p.of("metadata.name", false) {
        Some(at) => format!("{}:{}", p.file, at.line),
        None => p.file.clone(),
    });
    Ok(CompiledPolicy {
        reference: doc.reference.clone(),
        scope: doc.scope.clone(),
        selector: spec.selector.clone(),
        mode: spec.mode,
        env: Arc::new(PolicyEnv {
            calendar,
            gpu_hour_cost: spec.gpu_hour_cost,
            assume_gpus: spec.assume_gpus,
        }),
        sampling_interval,
        rules,
        receivers,
        limits: spec.limits.unwrap_or_default(),
        max_snooze: spec.snooze.as_ref().and_then(|s| s.max_duration.as_ref()).and_then(|d| d.parse().ok()),
        max_snoozes: spec.snooze.as_ref().and_then(|s| s.max_per_job),
        warnings,
        origin,
        cohort: spec.cohort.clone().unwrap_or_default(),
        cohort_functions: spec.rules.iter().any(|r| r.when.as_deref().is_some_and(|w| w.contains("cohort_"))),
    })
}

/// Step 2: the policy-wide settings (sampling interval, GPU price and size, selectors, at least one rule).
/// Returns the sampling interval the rules' windows are checked against.
fn check_settings(doc: &PolicyDocument, errors: &mut Vec<FieldError>) -> PolicyDuration {
    let spec = &doc.spec;
    let sampling_interval = match spec.sampling_interval.as_ref().map(super::spec::DurationText::parse) {
        None => PolicyDuration::from_secs(30),
        Some(Ok(d)) if d > PolicyDuration::from_secs(0) => d,
        Some(Ok(_)) => {
            errors.push(FieldError::new("spec.samplingInterval", "must be longer than 0s"));
            PolicyDuration::from_secs(30)
        }
        Some(Err(e)) => {
            errors.push(FieldError::new("spec.samplingInterval", e));
            PolicyDuration::from_secs(30)
        }
    };
    if let Some(cost) = spec.gpu_hour_cost
        && !(cost.is_finite() && cost >= 0.0)
    {
        errors.push(FieldError::new("spec.gpuHourCost", format!("must be a number >= 0, got {cost}")));
    }
    if let Some(gpus) = spec.assume_gpus
        && !(gpus.is_finite() && gpus >= 0.0)
    {
        errors.push(FieldError::new("spec.assumeGpus", format!("must be a number >= 0, got {gpus}")));
    }
    let limits = spec.limits.unwrap_or_default();
    for (field, value) in [
        ("spec.limits.maxActionsPerHour", limits.max_actions_per_hour),
        ("spec.limits.maxConcurrentSuspended", limits.max_concurrent_suspended),
    ] {
        if let Some(v) = value
            && !(1..=100_000).contains(&v)
        {
            let why = if v == 0 {
                " (0 would hold every action for ever; Audit mode reports without acting)"
            } else {
                ""
            };
            errors.push(FieldError::new(field, format!("must be from 1 to 100000, got {v}{why}")));
        }
    }
    if let Some(Err(e)) =
        spec.snooze.as_ref().and_then(|s| s.max_duration.as_ref()).map(super::spec::DurationText::parse)
    {
        errors.push(FieldError::new("spec.snooze.maxDuration", e));
    }
    if let Some(n) = spec.snooze.as_ref().and_then(|s| s.max_per_job)
        && n > 1000
    {
        errors.push(FieldError::new("spec.snooze.maxPerJob", format!("must be from 0 to 1000, got {n}")));
    }
    validate_selector(errors, "spec.selector", &spec.selector);
    if let PolicyScope::Cluster { namespace_selector, exception_namespaces } = &doc.scope {
        validate_selector(errors, "spec.namespaceSelector", namespace_selector);
        for (i, ns) in exception_namespaces.iter().enumerate() {
            if let Err(e) = dns_label(ns) {
                errors.push(FieldError::new(
                    format!("spec.exceptions.allowedNamespaces[{i}]"),
                    format!("Invalid value: {ns:?}: {e} (a namespace name; no wildcards)"),
                ));
            }
        }
    }
    if spec.rules.is_empty() {
        errors.push(FieldError::new("spec.rules", "a policy needs at least one rule"));
    }
    sampling_interval
}

/// Reads policy documents (one or more YAML documents, `---` separated) from text. `source` names the file in
/// errors. Every error of every document is reported, with its field path and line:column in the file;
/// the spec is checked against the CRD's schema first, so what the API server would refuse is
/// refused here too. A file with no document at all is an error.
pub fn parse_documents(text: &str, source: &str) -> Result<Vec<PolicyDocument>, FieldErrors> {
    let failed =
        |errors| FieldErrors { document: source.to_string(), file: Some(source.to_string()), errors };
    let values: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| failed(vec![yaml_error(&e.to_string())]))?;
    let positions = positions::scan(text, source);
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    // Empty documents (`---` twice) are not documents; `positions` skips them the same way.
    let mut exceptions = 0;
    for (i, value) in values.into_iter().filter(|v| !v.is_null()).enumerate() {
        // Exceptions may share a file with policies: `parse_exceptions` reads them.
        if super::exception::is_exception(&value) {
            exceptions += 1;
            continue;
        }
        let prefix = if i == 0 { String::new() } else { format!("document[{i}].") };
        let at = positions.get(i).cloned().map(Arc::new);
        match parse_document(value) {
            Ok(mut doc) => {
                doc.positions = at;
                docs.push(doc);
            }
            Err(mut es) => {
                locate(&mut es, at.as_deref());
                es.sort_by_key(|e| e.position.map_or((usize::MAX, 0), |p| (p.line, p.column)));
                errors
                    .extend(es.into_iter().map(|e| FieldError { path: format!("{prefix}{}", e.path), ..e }));
            }
        }
    }
    if docs.is_empty() && errors.is_empty() && exceptions == 0 {
        errors.push(FieldError {
            // The file's start: there is nothing else to point at.
            position: Some(crate::error::Position { line: 1, column: 1 }),
            ..FieldError::new(
                "(file)",
                "no policy in this file: it is empty, or holds only comments and `---`",
            )
        });
    }
    if errors.is_empty() { Ok(docs) } else { Err(failed(errors)) }
}

/// Puts the file position of each error's field on it (the key for an unknown field, else the value).
fn locate(errors: &mut [FieldError], positions: Option<&DocumentPositions>) {
    let Some(positions) = positions else { return };
    for e in errors {
        if e.position.is_none() {
            e.position = positions.of(&e.path, e.message.starts_with("unknown field"));
        }
    }
}

/// The YAML reader's `error: line 10 column 7: simple key expected ':'` (and a source snippet) as an error
/// at that position.
fn yaml_error(message: &str) -> FieldError {
    let first = message.lines().next().unwrap_or(message).trim();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let located = first.strip_prefix("line ").and_then(|rest| {
        let (line, rest) = rest.split_once(" column ")?;
        let (column, what) = rest.split_once(": ")?;
        Some((line.parse().ok()?, column.parse().ok()?, what))
    });
    match located {
        Some((line, column, what)) => FieldError {
            position: Some(crate::error::Position { line, column }),
            ..FieldError::new("(yaml)", plain_yaml_message(what))
        },
        None => FieldError::new("(yaml)", plain_yaml_message(first)),
    }
}

/// The reader's messages that speak of its own API (`set DuplicateKeyPolicy in Options`, `budget breached:
/// Nodes { nodes: 250001 }`) in the words of a policy's author.
fn plain_yaml_message(what: &str) -> String {
    if let Some(rest) = what.strip_prefix("duplicate mapping key: ") {
        let key = rest.split(", set DuplicateKeyPolicy").next().unwrap_or(rest);
        return format!("duplicate key {key:?}: a key may appear only once in a mapping");
    }
    if let Some(rest) = what.strip_prefix("non-finite float `") {
        let number = rest.split('`').next().unwrap_or(rest);
        return format!(
            "the number {number} is too large to represent (it would read as infinity); numbers in a policy are finite"
        );
    }
    if let Some(rest) = what.strip_prefix("budget breached: ") {
        let limit = rest.split([' ', '{']).next().unwrap_or(rest).to_lowercase();
        let number: String = rest.chars().filter(char::is_ascii_digit).collect();
        return format!(
            "the file is too large to be a policy: it exceeds the YAML reader's limit on {limit} ({number}); a policy needs a few hundred"
        );
    }
    what.to_string()
}

/// One policy object (as YAML/JSON value) to a document.
pub(crate) fn parse_document(value: Value) -> Result<PolicyDocument, Vec<FieldError>> {
    let mut errors = Vec::new();
    let Value::Object(mut obj) = value else {
        return Err(vec![FieldError::new(
            "(document)",
            "expected a ProgressPolicy or ClusterProgressPolicy object",
        )]);
    };
    let kind_text = obj.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = PolicyKind::parse(&kind_text).unwrap_or_else(|| {
        let got = if kind_text.is_empty() { "nothing".to_string() } else { format!("{kind_text:?}") };
        errors.push(FieldError::new(
            "kind",
            format!("expected {} or {}, got {got}", PolicyKind::Namespaced, PolicyKind::Cluster),
        ));
        PolicyKind::Namespaced
    });
    check_api_version(&obj, &mut errors);
    let metadata = obj.remove("metadata").unwrap_or(Value::Null);
    let name = metadata.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
    if name.is_empty() {
        errors.push(FieldError::new("metadata.name", "Required value"));
    } else if let Err(e) = dns_subdomain(&name) {
        errors.push(FieldError::new("metadata.name", format!("Invalid value: {name:?}: {e}")));
    }
    let namespace = metadata.get("namespace").and_then(Value::as_str).map(str::to_string);
    if let Some(ns) = &namespace
        && let Err(e) = dns_label(ns)
    {
        errors.push(FieldError::new("metadata.namespace", format!("Invalid value: {ns:?}: {e}")));
    }
    let generation = metadata.get("generation").and_then(Value::as_i64).unwrap_or(0);
    let spec_value = obj.remove("spec").unwrap_or(Value::Null);
    check_top_level_fields(&obj, &mut errors);
    if kind == PolicyKind::Cluster && namespace.is_some() {
        errors.push(FieldError::new(
            "metadata.namespace",
            "a ClusterProgressPolicy is cluster-scoped: remove the namespace",
        ));
    }
    if spec_value.is_null() {
        errors.push(FieldError::new("spec", "Required value"));
        return Err(errors);
    }
    // The CRD's schema first: it reports every type and structure error at once, where reading into the spec
    // types would stop at the first. If the spec can still be read, its errors go to `compile` with it.
    let mut spec_value = spec_value;
    schema::prune_nulls(&mut spec_value, schema::spec_schema(kind));
    let mut schema_errors = Vec::new();
    schema::check(&spec_value, schema::spec_schema(kind), "spec", &mut schema_errors);
    let mut serde_errors = Vec::new();
    let (scope, spec) = if kind == PolicyKind::Cluster {
        let parsed: Option<ClusterPolicySpec> =
            deserialize_reporting_unknown(spec_value, "spec", &mut serde_errors);
        match parsed {
            Some(c) => (
                PolicyScope::Cluster {
                    namespace_selector: c.namespace_selector,
                    exception_namespaces: c.exceptions.allowed_namespaces,
                },
                Some(c.policy),
            ),
            None => (
                PolicyScope::Cluster {
                    namespace_selector: LabelSelector::default(),
                    exception_namespaces: Vec::new(),
                },
                None,
            ),
        }
    } else {
        let parsed: Option<PolicySpec> = deserialize_reporting_unknown(spec_value, "spec", &mut serde_errors);
        (PolicyScope::Namespace(namespace.clone().unwrap_or_else(|| "default".into())), parsed)
    };
    // The schema's errors cover what reading into the types found (unknown fields, wrong types), better said.
    errors.extend(if schema_errors.is_empty() { serde_errors } else { schema_errors });
    // A spec that could be read goes on to `compile` with these errors, so that its own show too.
    match spec {
        Some(spec) => Ok(PolicyDocument {
            reference: PolicyRef {
                kind,
                namespace: if kind == PolicyKind::Namespaced {
                    Some(namespace.unwrap_or_else(|| "default".into()))
                } else {
                    None
                },
                name,
                generation,
            },
            scope,
            spec,
            positions: None,
            reading_errors: errors,
        }),
        None => Err(errors),
    }
}

fn deserialize_reporting_unknown<T: serde::de::DeserializeOwned>(
    value: Value,
    root: &str,
    errors: &mut Vec<FieldError>,
) -> Option<T> {
    if value.is_null() {
        errors.push(FieldError::new(root, "required"));
        return None;
    }
    let mut unknown = Vec::new();
    let result: Result<T, _> = serde_ignored::deserialize(value, |path| unknown.push(path.to_string()));
    for path in unknown {
        errors.push(FieldError::new(format!("{root}.{}", json_path(&path)), "unknown field"));
    }
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            // The schema check has passed, so this is a value the schema cannot express (a duration's
            // content, say). serde's message names the Rust types; keep only what is about the value.
            errors.push(FieldError::new(root, e.to_string()));
            None
        }
    }
}

/// serde_ignored writes `rules.0.foo`; Kubernetes users read `rules[0].foo`.
fn json_path(path: &str) -> String {
    let mut out = String::new();
    for part in path.split('.') {
        if part.parse::<usize>().is_ok() {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests;
