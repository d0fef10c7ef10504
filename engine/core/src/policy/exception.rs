//! `ProgressPolicyException`: a namespaced, time-bounded waiver of some policies' rules for some jobs, in the
//! shape of Kyverno's `PolicyException` (`spec.exceptions[].policyName/ruleNames`, `spec.match`), plus the
//! `expires` a waiver must have here.
//!
//! ```yaml
//! apiVersion: trainwarden.dev/v1alpha1
//! kind: ProgressPolicyException
//! metadata: {name: llama-eval-run, namespace: ml-research}
//! spec:
//!   exceptions:
//!     - policyName: reclaim-gpus               # a ClusterProgressPolicy: its name
//!       ruleNames: [idle-while-others-wait]    # omitted: every rule of it
//!     - policyName: ml-research/plateau        # a ProgressPolicy: namespace/name (this namespace only)
//!   match:
//!     names: [llama-eval]                      # TrainJob names; omitted: any name
//!     selector: {matchLabels: {team: eval}}    # omitted: any labels
//!   expires: "2026-12-05T18:00:00Z"
//!   reason: "evaluation pass runs on CPU for 2 hours, GPUs idle by design"
//! ```
//!
//! An exception reaches only the TrainJobs of its own namespace. Who may write exceptions is who may create
//! this kind in a namespace (RBAC); whether they count for a `ClusterProgressPolicy` is the administrator's
//! call, in that policy: `spec.exceptions.allowedNamespaces` lists the namespaces whose exceptions it honours,
//! and by default there are none. (Kyverno's GO-2024-3230 is what happens otherwise: anyone who could create
//! an exception anywhere waived the cluster's policies.) A `ProgressPolicy`'s own namespace may always except
//! its jobs from it: the same people own both.
//!
//! While an exception applies, the rules it names are evaluated as ever (history, pending, firing, status),
//! but a firing issues no intent: one `Held` event names the exception and its end. When it expires (on
//! its second: a job timer, not a poll), is deleted, or stops matching, every held rule still firing fires
//! again, as at the end of a snooze (see the evaluator's `snooze` module).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{FieldError, FieldErrors};
use crate::input::sample::JobKey;
use crate::policy::spec::{LabelSelector, PolicyKind, PolicyRef};
use crate::time::Timestamp;

/// The kind of an exception object.
pub const EXCEPTION_KIND: &str = "ProgressPolicyException";

/// The spec of a `ProgressPolicyException`: which rules of which policies it waives, for which TrainJobs of
/// its namespace, and until when.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExceptionSpec {
    /// The policies (and of each, the rules) whose actions are held for the matched jobs.
    #[schemars(length(min = 1, max = 32))]
    pub exceptions: Vec<ExceptedPolicy>,
    /// Which TrainJobs of this namespace: by name, by labels, or both (both must hold). Empty: every
    /// TrainJob of the namespace.
    #[serde(default, rename = "match", skip_serializing_if = "ExceptionMatch::is_empty")]
    pub match_: ExceptionMatch,
    /// When the exception stops applying (RFC 3339, e.g. 2026-12-05T18:00:00Z). Every exception ends: held
    /// rules still firing act on that second.
    #[schemars(extend("format" = "date-time"))]
    pub expires: String,
    /// Why, for the people who read the policy status and the job's Events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
}

/// One policy an exception waives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExceptedPolicy {
    /// A ClusterProgressPolicy by its name (`reclaim-gpus`), or a ProgressPolicy of this namespace as
    /// `namespace/name` (`ml-research/plateau`), as Kyverno names policies.
    #[schemars(length(min = 1, max = 317))]
    pub policy_name: String,
    /// The rules of that policy it waives; empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub rule_names: Vec<String>,
}

/// Which TrainJobs of its namespace an exception reaches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExceptionMatch {
    /// TrainJob names; empty: any name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub names: Vec<String>,
    /// TrainJob labels; empty: any labels.
    #[serde(default, skip_serializing_if = "LabelSelector::is_empty")]
    pub selector: LabelSelector,
}

impl ExceptionMatch {
    fn is_empty(&self) -> bool {
        self.names.is_empty() && self.selector.is_empty()
    }
}

/// An exception's identity: its namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ExceptionRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl std::fmt::Display for ExceptionRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A policy an exception names, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExceptedTarget {
    /// ProgressPolicy (of the exception's namespace) or ClusterProgressPolicy.
    pub kind: PolicyKind,
    /// `metadata.name`.
    pub name: String,
    /// Rule names; empty: every rule.
    pub rules: Vec<String>,
}

/// An exception, ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledException {
    /// Namespace and name.
    pub reference: ExceptionRef,
    /// The policies and rules it waives.
    pub targets: Vec<ExceptedTarget>,
    /// `spec.match.names`.
    pub names: Vec<String>,
    /// `spec.match.selector`.
    pub selector: LabelSelector,
    /// When it stops applying.
    pub expires: Timestamp,
    /// `spec.reason`.
    pub reason: Option<String>,
    /// Where its fields are in the file it was read from (none for objects from the API).
    pub positions: Option<std::sync::Arc<super::positions::DocumentPositions>>,
}

impl CompiledException {
    /// Whether it names this rule of this policy (whether the policy honours it is the policy's call:
    /// [`crate::CompiledPolicy::honours_exceptions_from`]).
    pub fn names_rule(&self, policy: &PolicyRef, rule: &str) -> bool {
        self.targets.iter().any(|t| {
            t.kind == policy.kind
                && t.name == policy.name
                && (t.kind == PolicyKind::Cluster
                    || policy.namespace.as_deref() == Some(self.reference.namespace.as_str()))
                && (t.rules.is_empty() || t.rules.iter().any(|r| r == rule))
        })
    }

    /// Whether it names this policy at all.
    pub fn names_policy(&self, policy: &PolicyRef) -> bool {
        self.targets.iter().any(|t| {
            t.kind == policy.kind
                && t.name == policy.name
                && (t.kind == PolicyKind::Cluster
                    || policy.namespace.as_deref() == Some(self.reference.namespace.as_str()))
        })
    }

    /// Whether it reaches this job (its namespace, name and labels).
    pub fn matches_job(&self, job: &JobKey, labels: &BTreeMap<String, String>) -> bool {
        job.namespace == self.reference.namespace
            && (self.names.is_empty() || self.names.contains(&job.name))
            && self.selector.matches(labels)
    }

    /// Whether it still applies at `now`.
    pub fn in_force(&self, now: Timestamp) -> bool {
        now < self.expires
    }

    /// The rule names it waives in `policy`, for status: `None` when it names the policy for every rule.
    pub fn rules_of(&self, policy: &PolicyRef) -> Option<Vec<String>> {
        let mut rules = Vec::new();
        for t in self.targets.iter().filter(|t| t.kind == policy.kind && t.name == policy.name) {
            if t.rules.is_empty() {
                return None;
            }
            rules.extend(t.rules.iter().cloned());
        }
        Some(rules)
    }
}

impl CompiledException {
    /// [`CompiledException::check_against`] as a report on the file `source` (`file:line:column` per error).
    pub fn checked_against(
        &self,
        policies: &[crate::CompiledPolicy],
        source: &str,
    ) -> Result<(), FieldErrors> {
        let errors = self.check_against(policies);
        if errors.is_empty() {
            return Ok(());
        }
        let document = format!("{source}: {EXCEPTION_KIND} {}", self.reference);
        Err(FieldErrors { document, file: Some(source.to_string()), errors })
    }

    /// The policies it names that are not among `policies`, as warnings at their fields: checked with only
    /// these, it would hold nothing of theirs (`validate` prints them, `--strict` refuses them; `replay` and
    /// `test` say so before they run).
    pub fn absent_targets(&self, policies: &[crate::CompiledPolicy]) -> Vec<FieldError> {
        let mut warnings = Vec::new();
        for (i, t) in self.targets.iter().enumerate() {
            let present = policies.iter().any(|p| {
                p.reference.kind == t.kind
                    && p.reference.name == t.name
                    && (t.kind == PolicyKind::Cluster
                        || p.reference.namespace.as_deref() == Some(self.reference.namespace.as_str()))
            });
            if !present {
                let named = match t.kind {
                    PolicyKind::Cluster => format!("{} {}", t.kind, t.name),
                    PolicyKind::Namespaced => format!("{} {}/{}", t.kind, self.reference.namespace, t.name),
                };
                warnings.push(FieldError::new(
                    format!("spec.exceptions[{i}].policyName"),
                    format!(
                        "{named} is not among the policies given, so its rule names could not be checked and \
                         nothing of it is held here; give its file too"
                    ),
                ));
            }
        }
        if let Some(at) = &self.positions {
            for w in &mut warnings {
                w.position = at.of(&w.path, false);
            }
        }
        warnings
    }

    /// What would keep it from ever holding anything, against the policies it will run with (those it
    /// names that are among them): a rule name the policy lacks, or a ClusterProgressPolicy that does not
    /// honour exceptions of this namespace. A policy it names that is not among them is not an error (it
    /// may be applied later); `replay`, `test` and `validate` refuse these, the controller reports them in
    /// the policy's status.
    pub fn check_against(&self, policies: &[crate::CompiledPolicy]) -> Vec<FieldError> {
        let mut errors = Vec::new();
        for (i, t) in self.targets.iter().enumerate() {
            let Some(p) = policies.iter().find(|p| {
                p.reference.kind == t.kind
                    && p.reference.name == t.name
                    && (t.kind == PolicyKind::Cluster
                        || p.reference.namespace.as_deref() == Some(self.reference.namespace.as_str()))
            }) else {
                continue;
            };
            if !p.honours_exceptions_from(&self.reference.namespace) {
                errors.push(FieldError::new(
                    format!("spec.exceptions[{i}].policyName"),
                    format!(
                        "ClusterProgressPolicy {} does not honour exceptions from namespace {:?}: its \
                         spec.exceptions.allowedNamespaces must list it (the administrator's choice)",
                        t.name, self.reference.namespace
                    ),
                ));
            }
            for (j, r) in t.rules.iter().enumerate() {
                if !p.rules.iter().any(|x| x.name == *r) {
                    let names: Vec<&str> = p.rules.iter().map(|x| x.name.as_str()).collect();
                    errors.push(FieldError::new(
                        format!("spec.exceptions[{i}].ruleNames[{j}]"),
                        format!(
                            "{} {} has no rule {r:?} (its rules: {})",
                            t.kind,
                            p.reference,
                            names.join(", ")
                        ),
                    ));
                }
            }
        }
        if let Some(at) = &self.positions {
            for e in &mut errors {
                e.position = at.of(&e.path, false);
            }
        }
        errors
    }
}

/// Compiles an exception object's parts: its namespace and name, and its `spec` as JSON. Every problem is
/// reported, with its field path.
pub fn compile_exception(
    namespace: &str,
    name: &str,
    spec: Value,
) -> Result<CompiledException, Vec<FieldError>> {
    let mut errors = Vec::new();
    if let Err(e) = super::object::dns_label(namespace) {
        errors.push(FieldError::new("metadata.namespace", format!("Invalid value: {namespace:?}: {e}")));
    }
    if name.is_empty() {
        errors.push(FieldError::new("metadata.name", "Required value"));
    } else if let Err(e) = super::object::dns_subdomain(name) {
        errors.push(FieldError::new("metadata.name", format!("Invalid value: {name:?}: {e}")));
    }
    let mut spec_value = spec;
    if spec_value.is_null() {
        errors.push(FieldError::new("spec", "Required value"));
        return Err(errors);
    }
    let schema = super::schema::exception_spec_schema();
    super::schema::prune_nulls(&mut spec_value, schema);
    let mut schema_errors = Vec::new();
    super::schema::check(&spec_value, schema, "spec", &mut schema_errors);
    if !schema_errors.is_empty() {
        errors.extend(schema_errors);
        return Err(errors);
    }
    let spec: ExceptionSpec = match serde_json::from_value(spec_value) {
        Ok(s) => s,
        Err(e) => {
            errors.push(FieldError::new("spec", e.to_string()));
            return Err(errors);
        }
    };
    let expires = match spec.expires.parse::<Timestamp>() {
        Ok(t) => Some(t),
        Err(e) => {
            errors.push(FieldError::new(
                "spec.expires",
                format!(
                    "{:?} is not an RFC 3339 time ({e}); expected for example 2026-12-05T18:00:00Z",
                    spec.expires
                ),
            ));
            None
        }
    };
    let mut targets = Vec::new();
    for (i, p) in spec.exceptions.iter().enumerate() {
        let path = format!("spec.exceptions[{i}].policyName");
        let (kind, policy_name) = match p.policy_name.split_once('/') {
            Some((ns, policy_name)) => {
                if ns != namespace {
                    errors.push(FieldError::new(
                        &path,
                        format!(
                            "{:?} names a ProgressPolicy of namespace {ns:?}: an exception reaches only the \
                             TrainJobs of its own namespace ({namespace:?}), which only that namespace's \
                             ProgressPolicies and ClusterProgressPolicies judge; write {namespace}/NAME, or \
                             the bare name of a ClusterProgressPolicy",
                            p.policy_name
                        ),
                    ));
                }
                (PolicyKind::Namespaced, policy_name)
            }
            None => (PolicyKind::Cluster, p.policy_name.as_str()),
        };
        if let Err(e) = super::object::dns_subdomain(policy_name) {
            errors.push(FieldError::new(&path, format!("Invalid value: {policy_name:?}: {e}")));
        }
        for (j, r) in p.rule_names.iter().enumerate() {
            if r.is_empty() {
                errors.push(FieldError::new(
                    format!("spec.exceptions[{i}].ruleNames[{j}]"),
                    "must not be empty",
                ));
            }
        }
        targets.push(ExceptedTarget { kind, name: policy_name.to_string(), rules: p.rule_names.clone() });
    }
    super::object::validate_selector(&mut errors, "spec.match.selector", &spec.match_.selector);
    match expires {
        Some(expires) if errors.is_empty() => Ok(CompiledException {
            reference: ExceptionRef { namespace: namespace.to_string(), name: name.to_string() },
            targets,
            names: spec.match_.names,
            selector: spec.match_.selector,
            expires,
            reason: spec.reason,
            positions: None,
        }),
        _ => Err(errors),
    }
}

/// One exception document (as YAML/JSON value) compiled.
pub(crate) fn compile_exception_document(value: Value) -> Result<CompiledException, Vec<FieldError>> {
    let Value::Object(mut obj) = value else {
        return Err(vec![FieldError::new("(document)", format!("expected a {EXCEPTION_KIND} object"))]);
    };
    let mut errors = Vec::new();
    super::object::check_api_version(&obj, &mut errors);
    let metadata = obj.remove("metadata").unwrap_or(Value::Null);
    let name = metadata.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
    let namespace = metadata.get("namespace").and_then(Value::as_str).unwrap_or("default").to_string();
    let spec = obj.remove("spec").unwrap_or(Value::Null);
    super::object::check_top_level_fields(&obj, &mut errors);
    match compile_exception(&namespace, &name, spec) {
        Ok(e) if errors.is_empty() => Ok(e),
        Ok(_) => Err(errors),
        Err(es) => {
            errors.extend(es);
            Err(errors)
        }
    }
}

/// Reads the `ProgressPolicyException` documents of a YAML file (one that may also hold policies, which
/// [`crate::parse_documents`] reads). `source` names the file in errors, with line:column. A file that is
/// not YAML at all holds no exception here: its syntax error is [`crate::parse_documents`]'s to report,
/// and every caller reads the file with it first (so the error is said once).
pub fn parse_exceptions(text: &str, source: &str) -> Result<Vec<CompiledException>, FieldErrors> {
    let failed =
        |errors| FieldErrors { document: source.to_string(), file: Some(source.to_string()), errors };
    // The policies' reader reports YAML errors; here a file that does not parse holds no exception.
    let Ok(values) = serde_saphyr::from_multiple::<Value>(text) else { return Ok(Vec::new()) };
    let positions = super::positions::scan(text, source);
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, value) in values.into_iter().filter(|v| !v.is_null()).enumerate() {
        if value.get("kind").and_then(Value::as_str) != Some(EXCEPTION_KIND) {
            continue;
        }
        let prefix = if i == 0 { String::new() } else { format!("document[{i}].") };
        match compile_exception_document(value) {
            Ok(mut e) => {
                e.positions = positions.get(i).cloned().map(std::sync::Arc::new);
                out.push(e);
            }
            Err(mut es) => {
                if let Some(at) = positions.get(i) {
                    for e in &mut es {
                        e.position =
                            e.position.or_else(|| at.of(&e.path, e.message.starts_with("unknown field")));
                    }
                }
                errors
                    .extend(es.into_iter().map(|e| FieldError { path: format!("{prefix}{}", e.path), ..e }));
            }
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(failed(errors)) }
}

/// Whether a YAML/JSON document is an exception (which the policies' reader leaves to [`parse_exceptions`]).
pub(crate) fn is_exception(value: &Value) -> bool {
    value.get("kind").and_then(Value::as_str) == Some(EXCEPTION_KIND)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXCEPTION: &str = "\
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicyException
metadata: {name: eval-run, namespace: ml}
spec:
  exceptions:
    - policyName: reclaim-gpus
      ruleNames: [idle]
    - policyName: ml/plateau
  match:
    names: [ft]
    selector: {matchLabels: {team: eval}}
  expires: \"2026-12-05T18:00:00Z\"
  reason: evaluation on CPU
";

    fn cluster(name: &str) -> PolicyRef {
        PolicyRef { kind: PolicyKind::Cluster, namespace: None, name: name.into(), generation: 1 }
    }

    #[test]
    fn an_exception_names_rules_of_policies_and_reaches_jobs_of_its_namespace() {
        let e = parse_exceptions(EXCEPTION, "e.yaml").unwrap().remove(0);
        assert_eq!(e.reference.to_string(), "ml/eval-run");
        assert!(e.names_rule(&cluster("reclaim-gpus"), "idle"));
        assert!(!e.names_rule(&cluster("reclaim-gpus"), "hung"), "only the rules it lists");
        let plateau = PolicyRef {
            kind: PolicyKind::Namespaced,
            namespace: Some("ml".into()),
            name: "plateau".into(),
            generation: 1,
        };
        assert!(e.names_rule(&plateau, "anything"), "no ruleNames: every rule");
        let elsewhere = PolicyRef { namespace: Some("other".into()), ..plateau.clone() };
        assert!(!e.names_rule(&elsewhere, "anything"));
        assert!(!e.names_rule(&cluster("plateau"), "x"), "a bare name is a ClusterProgressPolicy");
        let labels = BTreeMap::from([("team".to_string(), "eval".to_string())]);
        assert!(e.matches_job(&JobKey::new("ml", "ft"), &labels));
        assert!(!e.matches_job(&JobKey::new("ml", "other"), &labels), "by name");
        assert!(!e.matches_job(&JobKey::new("ml", "ft"), &BTreeMap::new()), "by labels");
        assert!(!e.matches_job(&JobKey::new("prod", "ft"), &labels), "its own namespace only");
        assert!(e.in_force("2026-12-05T17:59:59Z".parse().unwrap()));
        assert!(!e.in_force("2026-12-05T18:00:00Z".parse().unwrap()), "ends on its second");
        assert_eq!(e.rules_of(&cluster("reclaim-gpus")), Some(vec!["idle".to_string()]));
        assert_eq!(e.rules_of(&plateau), None);
    }

    #[test]
    fn bad_exceptions_are_refused_with_field_paths_and_positions() {
        let bad = EXCEPTION
            .replace("ml/plateau", "prod/plateau")
            .replace("\"2026-12-05T18:00:00Z\"", "friday")
            .replace("ruleNames: [idle]", "ruleNames: [idle]\n      rules: [x]");
        let e = parse_exceptions(&bad, "e.yaml").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("e.yaml:8:7: spec.exceptions[0].rules: unknown field"), "{text}");
        let bad =
            EXCEPTION.replace("ml/plateau", "prod/plateau").replace("\"2026-12-05T18:00:00Z\"", "friday");
        let text = parse_exceptions(&bad, "e.yaml").unwrap_err().to_string();
        assert!(text.contains("spec.expires: \"friday\" is not an RFC 3339 time"), "{text}");
        assert!(
            text.contains(
                "spec.exceptions[1].policyName: \"prod/plateau\" names a ProgressPolicy of namespace \"prod\""
            ),
            "{text}"
        );
        assert!(text.contains("e.yaml:12:12: spec.expires"), "positioned: {text}");
        assert!(text.contains("e.yaml:8:19: spec.exceptions[1].policyName"), "positioned: {text}");
        let none = EXCEPTION.replace("  exceptions:\n    - policyName: reclaim-gpus\n      ruleNames: [idle]\n    - policyName: ml/plateau\n", "  exceptions: []\n");
        let text = parse_exceptions(&none, "e.yaml").unwrap_err().to_string();
        assert!(text.contains("spec.exceptions"), "{text}");
        let no_expiry = EXCEPTION.replace("  expires: \"2026-12-05T18:00:00Z\"\n", "");
        let text = parse_exceptions(&no_expiry, "e.yaml").unwrap_err().to_string();
        assert!(text.contains("spec.expires"), "every exception ends: {text}");
    }

    #[test]
    fn a_file_of_policies_holds_no_exception_and_the_policies_reader_skips_exceptions() {
        assert!(
            parse_exceptions("kind: ProgressPolicy\nmetadata: {name: x}\n", "p.yaml").unwrap().is_empty()
        );
        let docs = crate::parse_documents(EXCEPTION, "e.yaml").unwrap();
        assert!(docs.is_empty(), "an exception is not a policy");
    }
}
