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
    let rules = rules::rules(spec, sampling_interval, engine, &mut errors);
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
        errors.push(FieldError::new(
            "(file)",
            "no policy in this file: it is empty, or holds only comments and `---`",
        ));
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
mod tests {
    use super::*;

    fn compile_yaml(yaml: &str) -> Result<CompiledPolicy, Vec<String>> {
        let docs = parse_documents(yaml, "test.yaml")
            .map_err(|e| e.errors.iter().map(std::string::ToString::to_string).collect::<Vec<_>>())?;
        compile(&docs[0], &ScriptEngine::default())
            .map_err(|e| e.errors.iter().map(std::string::ToString::to_string).collect())
    }

    /// The issue's example policy, shared with the CRD and real-API tests.
    const WEEKEND_SAFE: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/weekend-safe.yaml"));

    #[test]
    fn the_issue_example_compiles() {
        let p = compile_yaml(WEEKEND_SAFE).unwrap();
        assert_eq!(p.reference.to_string(), "fraud/weekend-safe");
        assert_eq!(p.mode, Mode::Enforce);
        assert_eq!(p.rules.len(), 4);
        assert_eq!(p.rules[1].for_, PolicyDuration::from_secs(900));
        assert_eq!(p.rules[3].cooldown, PolicyDuration::from_secs(6 * 3600));
        assert!(p.rules[2].script.is_some());
    }

    #[test]
    fn every_validation_error_is_reported_at_once_with_its_path() {
        let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: broken, namespace: ns}
spec:
  timezone: Mars/Olympus
  samplingInterval: 1m
  activeWindows:
    - {start: "0 18 * * FRYDAY", duration: 62h}
    - {start: "0 18 * * FRI", duration: "-5m"}
  rules:
    - name: a
      uses: plato
    - name: a
      uses: plateau
      with: {metric: loss, window: 30s, minDelta: -1, colour: red}
      for: 15 minutes
    - name: c
      when: 'metric("loss") >'
    - name: d
    - name: e
      uses: over_budget
      with: {maxCost: 100}
      actions: [{annotate: {key: "bad key!"}}]
    - name: w
      uses: stalled
      with: {after: 30s}
      actions: [{annotate: {key: trainwarden.dev/verdict, value: "x"}}]
"#;
        let errors = compile_yaml(yaml).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.split(": ").next().unwrap()).collect();
        assert_eq!(
            paths,
            vec![
                "spec.timezone",
                "spec.activeWindows[0].start",
                "spec.activeWindows[1].duration",
                "spec.rules[0].uses",
                "spec.rules[1].name",
                "spec.rules[1].with.minDelta",
                "spec.rules[1].with.colour",
                "spec.rules[1].for",
                "spec.rules[2].when",
                "spec.rules[3]",
                "spec.rules[4].with.maxCost",
                "spec.rules[4].actions[0].annotate.key",
                "spec.rules[5].with.after",
                "spec.rules[5].actions[0].annotate.key",
            ],
            "{errors:#?}"
        );
        assert!(errors[13].contains("an annotation the controller itself keeps"), "{}", errors[13]);
        assert!(errors[12].contains("30s is shorter than the sampling interval 1m"), "{}", errors[12]);
        assert!(errors[8].contains("line 1:17"), "{}", errors[8]);
    }

    #[test]
    fn the_remaining_validation_errors() {
        let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ClusterProgressPolicy
metadata: {name: c, namespace: should-not-be-here}
spec:
  samplingInterval: 0s
  gpuHourCost: -1
  assumeGpus: -2
  namespaceSelector: {matchExpressions: [{key: tier, operator: Exists, values: [x]}]}
  selector: {matchExpressions: [{key: team, operator: In}]}
  rules:
    - name: r
      with: {metric: loss}
      when: "   "
      keepFiringFor: soon
      cooldown: 1x
      actions: [{notify: {to: " "}}, {scale: {numNodes: 0}}]
"#;
        // A document-level error does not hide the spec's: all come at once, in file order.
        let errors = compile_yaml(yaml).unwrap_err();
        assert_eq!(
            errors[0],
            "metadata.namespace: a ClusterProgressPolicy is cluster-scoped: remove the namespace"
        );
        assert_eq!(errors.len(), 12, "{errors:#?}");
        let yaml = yaml.replace("metadata: {name: c, namespace: should-not-be-here}", "metadata: {name: c}");
        let errors = compile_yaml(&yaml).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.split(": ").next().unwrap()).collect();
        assert_eq!(
            paths,
            vec![
                "spec.samplingInterval",
                "spec.gpuHourCost",
                "spec.assumeGpus",
                "spec.namespaceSelector.matchExpressions[0].values",
                "spec.selector.matchExpressions[0].values",
                "spec.rules[0].with",
                "spec.rules[0].when",
                "spec.rules[0].keepFiringFor",
                "spec.rules[0].cooldown",
                "spec.rules[0].actions[0].notify.to",
                "spec.rules[0].actions[1].scale.numNodes",
            ],
            "{errors:#?}"
        );
        let e = compile_yaml("apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: e}\nspec: {rules: []}\n").unwrap_err();
        assert_eq!(e, vec!["spec.rules: a policy needs at least one rule"]);
    }

    #[test]
    fn unknown_fields_are_errors_with_paths() {
        let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: typo}
spec:
  mode: Audit
  rules:
    - name: r
      when: "true"
      keepFiringfor: 10m
"#;
        let errors = compile_yaml(yaml).unwrap_err();
        assert_eq!(
            errors,
            vec![
                "spec.rules[0].keepFiringfor: unknown field; expected one of actions, cooldown, for, keepFiringFor, mode, name, uses, when, with"
            ]
        );
    }

    #[test]
    fn bad_enums_and_kinds_are_reported() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {mode: Sometimes, rules: []}\n";
        let errors = compile_yaml(yaml).unwrap_err();
        assert!(errors[0].starts_with("apiVersion:"), "{errors:?}");
        assert!(errors[1].starts_with("kind: expected ProgressPolicy"), "{errors:?}");
        assert_eq!(
            errors[2],
            "spec.mode: Unsupported value: \"Sometimes\": supported values: \"Audit\", \"Enforce\""
        );
        assert_eq!(errors[3], "spec.rules: must have at least 1 item");
    }

    #[test]
    fn yaml_syntax_errors_carry_a_position() {
        let e = parse_documents("spec: [unclosed", "bad.yaml").unwrap_err();
        assert_eq!(e.document, "bad.yaml");
        assert_eq!(e.errors[0].position, Some(crate::error::Position { line: 1, column: 7 }));
        assert_eq!(e.to_string(), "bad.yaml: 1 error\n  - bad.yaml:1:7: (yaml): unclosed bracket '['");
    }

    #[test]
    fn the_yaml_readers_own_words_are_translated() {
        let e = parse_documents("kind: A\nkind: B\n", "d.yaml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "d.yaml: 1 error\n  - d.yaml:2:1: (yaml): duplicate key \"kind\": a key may appear only once in a mapping"
        );
        let big = format!("a: [{}]\n", vec!["1"; 300_000].join(","));
        let e = parse_documents(&big, "big.yaml").unwrap_err();
        assert!(
            e.errors[0].message.starts_with(
                "the file is too large to be a policy: it exceeds the YAML reader's limit on nodes ("
            ),
            "{e}"
        );
    }

    #[test]
    fn cluster_policies_select_by_namespace_labels() {
        let yaml = r"
apiVersion: trainwarden.dev/v1alpha1
kind: ClusterProgressPolicy
metadata: {name: gpu-reclaim}
spec:
  namespaceSelector: {matchLabels: {tier: research}}
  selector: {matchExpressions: [{key: team, operator: Exists}]}
  rules: [{name: stalled, uses: stalled, with: {after: 1h}}]
";
        let p = compile_yaml(yaml).unwrap();
        let labels =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(p.selects("any", &labels(&[("team", "x")]), Some(&labels(&[("tier", "research")]))));
        assert!(!p.selects("any", &labels(&[("team", "x")]), Some(&labels(&[("tier", "prod")]))));
        assert!(!p.selects("any", &labels(&[]), Some(&labels(&[("tier", "research")]))));
        assert!(p.reference.namespace.is_none());
    }

    #[test]
    fn receivers_compile_with_defaults_and_settled_secret_namespaces() {
        let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: p, namespace: fraud}
spec:
  receivers:
    - name: team
      slack: {urlSecret: {name: slack, key: url}, text: "{{rule}}: {{summary}}"}
      email:
        smarthost: smtp.example.com:587
        from: Trainwarden <tw@example.com>
        to: [ml@example.com]
        username: tw
        passwordSecret: {name: smtp, key: password, namespace: fraud}
    - name: hook
      groupBy: [job, rule, job]
      groupWait: 0s
      sendResolved: true
      webhook: {url: "https://hooks.example.com/x", hmacSecret: {name: hook, key: hmac}}
  rules:
    - {name: r, when: "true", actions: [{notify: {to: team}}, {notify: {to: hook}}]}
"#;
        let p = compile_yaml(yaml).unwrap();
        let team = &p.receivers[0];
        assert_eq!(team.group_by, vec![crate::policy::GroupLabel::Policy, crate::policy::GroupLabel::Job]);
        assert_eq!(team.group_wait, PolicyDuration::from_secs(30));
        assert_eq!(team.repeat_interval, PolicyDuration::from_secs(4 * 3600));
        assert_eq!(team.slack.as_ref().unwrap().url.to_string(), "fraud/slack[url]");
        let email = team.email.as_ref().unwrap();
        assert_eq!((email.host.as_str(), email.port), ("smtp.example.com", 587));
        assert_eq!(email.password.as_ref().unwrap().to_string(), "fraud/smtp[password]");
        let hook = &p.receivers[1];
        assert_eq!(hook.group_by, vec![crate::policy::GroupLabel::Job, crate::policy::GroupLabel::Rule]);
        assert!(hook.group_wait.is_zero() && hook.send_resolved);
    }

    #[test]
    fn receiver_errors_have_paths() {
        let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: p, namespace: fraud}
spec:
  receivers:
    - name: team
      groupInterval: 0s
      slack: {urlSecret: {name: slack, key: url, namespace: payments}, title: "{{summary}}", text: "{{rule}"}
    - name: team
      email: {smarthost: smtp, tls: None, from: me, to: [], passwordSecret: {name: s, key: p}}
    - name: hook
      webhook: {url: "ftp://x", urlSecret: {name: h, key: u}}
    - name: empty
  rules:
    - {name: r, when: "true", actions: [{notify: {to: oncall}}]}
"#;
        let errors = compile_yaml(yaml).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.split(": ").next().unwrap()).collect();
        assert_eq!(
            paths,
            vec![
                "spec.receivers[0].groupInterval",
                "spec.receivers[0].slack.urlSecret.namespace",
                "spec.receivers[0].slack.title",
                "spec.receivers[0].slack.text",
                "spec.receivers[1].name",
                "spec.receivers[1].email.username",
                "spec.receivers[1].email.smarthost",
                "spec.receivers[1].email.tls",
                "spec.receivers[1].email.from",
                "spec.receivers[1].email.to",
                "spec.receivers[2].webhook",
                "spec.receivers[2].webhook.url",
                "spec.receivers[3]",
                "spec.rules[0].actions[0].notify.to",
            ],
            "{errors:#?}"
        );
        assert!(errors[1].contains("own namespace \"fraud\", not \"payments\""), "{}", errors[1]);
        assert!(errors[3].contains("column 1: `{{` is not closed"), "{}", errors[3]);
        assert!(errors[13].contains("no receiver named \"oncall\""), "{}", errors[13]);
        let cluster = yaml
            .replace("kind: ProgressPolicy", "kind: ClusterProgressPolicy")
            .replace("{name: p, namespace: fraud}", "{name: p}");
        let errors = compile_yaml(&cluster).unwrap_err();
        assert!(
            errors.contains(&"spec.receivers[1].email.passwordSecret.namespace: a ClusterProgressPolicy must name the Secret's namespace".to_string()),
            "{errors:#?}"
        );
    }

    #[test]
    fn namespaced_policies_only_see_their_namespace() {
        let p = compile_yaml(WEEKEND_SAFE).unwrap();
        let labels = [("team".to_string(), "fraud".to_string())].into_iter().collect();
        assert!(p.selects("fraud", &labels, None));
        assert!(!p.selects("other", &labels, None));
    }
}
