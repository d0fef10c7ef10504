//! Policy documents for tests, written by a builder: `policy("p").rule("{name: high, when: …}")` is a
//! `ProgressPolicy` `ml/p` in Enforce mode with that rule, instead of its header written inline again.

use crate::judge::script::ScriptEngine;
use crate::policy::compile::{CompiledPolicy, PolicyDocument, compile, parse_documents};

/// A policy document being written (see [`policy`], [`cluster_policy`]).
#[derive(Clone, Debug)]
pub struct PolicyBuilder {
    kind: &'static str,
    name: String,
    namespace: Option<String>,
    mode: String,
    spec: Vec<String>,
    rules: Vec<String>,
}

/// A `ProgressPolicy` named `name` in namespace `ml`, in Enforce mode, with no rule yet.
pub fn policy(name: &str) -> PolicyBuilder {
    PolicyBuilder {
        kind: "ProgressPolicy",
        name: name.into(),
        namespace: Some("ml".into()),
        mode: "Enforce".into(),
        spec: Vec::new(),
        rules: Vec::new(),
    }
}

/// A `ClusterProgressPolicy` named `name`, in Enforce mode, with no rule yet.
pub fn cluster_policy(name: &str) -> PolicyBuilder {
    PolicyBuilder { kind: "ClusterProgressPolicy", namespace: None, ..policy(name) }
}

impl PolicyBuilder {
    /// In namespace `namespace` (a `ProgressPolicy`).
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// With no namespace in its metadata: created in whichever namespace the test creates it in.
    pub fn without_namespace(mut self) -> Self {
        self.namespace = None;
        self
    }

    /// In mode `mode` (`Enforce` or `Audit`).
    pub fn mode(mut self, mode: &str) -> Self {
        self.mode = mode.into();
        self
    }

    /// A line of `spec` besides `mode` and `rules`, as YAML (`gpuHourCost: 5`, `samplingInterval: 30s`);
    /// several lines are written indented under `spec` as given (each line of `yaml` gets two spaces).
    pub fn spec(mut self, yaml: &str) -> Self {
        self.spec.extend(yaml.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
        self
    }

    /// A rule as a YAML flow mapping: `{name: high, when: 'metric("loss") > 1.0', actions: [{suspend: {}}]}`.
    pub fn rule(mut self, flow: &str) -> Self {
        self.rules.push(format!("    - {flow}\n"));
        self
    }

    /// Rules as YAML list items, already indented under `rules:` (`    - {name: …}\n`, or block style).
    pub fn rules(mut self, yaml: &str) -> Self {
        self.rules.push(yaml.to_string());
        self
    }

    /// The document's YAML text.
    pub fn yaml(&self) -> String {
        let metadata = match &self.namespace {
            Some(ns) if self.kind == "ProgressPolicy" => format!("{{name: {}, namespace: {ns}}}", self.name),
            _ => format!("{{name: {}}}", self.name),
        };
        let mut out = format!(
            "apiVersion: trainwarden.dev/v1alpha1\nkind: {}\nmetadata: {metadata}\nspec:\n  mode: {}\n",
            self.kind, self.mode
        );
        for line in &self.spec {
            out += &format!("  {line}\n");
        }
        out += "  rules:\n";
        for rule in &self.rules {
            out += rule;
        }
        out
    }

    /// The parsed document.
    pub fn document(&self) -> PolicyDocument {
        parse_documents(&self.yaml(), "test").unwrap_or_else(|e| panic!("{e}\n{}", self.yaml())).remove(0)
    }

    /// The policy compiled with `scripts` (an evaluator's, [`crate::Evaluator::scripts`]).
    pub fn compile(&self, scripts: &ScriptEngine) -> CompiledPolicy {
        compile(&self.document(), scripts).unwrap_or_else(|e| panic!("{e}\n{}", self.yaml()))
    }
}
