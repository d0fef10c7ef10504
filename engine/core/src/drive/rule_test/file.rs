//! What a test file says: the policies it tests, its cases (input, job, expectations), and what a case's
//! run reports.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A test file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestFile {
    /// Policy files, relative to the test file.
    pub policies: Vec<String>,
    /// Timer resolution (default 30s).
    #[serde(default)]
    pub eval_interval: Option<String>,
    /// The test cases, run independently of each other.
    pub tests: Vec<TestCase>,
}

/// One test case: a job, its input, and the rule states and actions expected from it.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestCase {
    /// Name of the case, as reported.
    pub name: String,
    /// Start of the input (default 2026-01-05T00:00:00Z, a Monday).
    #[serde(default)]
    pub start: Option<String>,
    /// Spacing of series steps (default 1m).
    #[serde(default)]
    pub interval: Option<String>,
    /// The job the series and phases describe (default `default/job`).
    #[serde(default)]
    pub job: TestJob,
    /// Input series in expanding notation.
    #[serde(default)]
    pub series: BTreeMap<String, String>,
    /// Or a JSONL stream file, relative to the test file.
    #[serde(default)]
    pub stream: Option<String>,
    /// Phase changes of the job: `{at: 3h, phase: Complete}`.
    #[serde(default)]
    pub phases: Vec<PhaseChange>,
    /// Keep the clock running until this offset/time after the input ends (for stalls).
    #[serde(default)]
    pub until: Option<String>,
    /// Rule states to check at given instants.
    #[serde(default)]
    pub expect: Vec<StateExpectation>,
    /// The exact list of intents issued over the whole run (omit to not check).
    #[serde(default)]
    pub expect_actions: Option<Vec<ActionExpectation>>,
    /// ProgressPolicyExceptions in the job's namespace, in force from the start: `{name, policyName,
    /// ruleNames, match, expires, reason}`, `expires` an offset from the start (`2h`) or an RFC 3339 time
    /// (exceptions in the tested policy files apply to every case).
    #[serde(default)]
    pub exceptions: Vec<TestException>,
    /// Whether some tested policy selects the case's job (default true). A case whose job is selected by
    /// none would pass every "does not fire" expectation for the wrong reason, so that is a failure unless
    /// the case says it is the point (`expectSelected: false`).
    #[serde(default = "selected_by_default")]
    pub expect_selected: bool,
}

fn selected_by_default() -> bool {
    true
}

/// The TrainJob a case's series and phases describe.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestJob {
    /// Its namespace (default `default`).
    #[serde(default = "default_ns")]
    pub namespace: String,
    /// Its name (default `job`).
    #[serde(default = "default_name")]
    pub name: String,
    /// Its labels, for the policies' selectors.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Its namespace's labels, for a ClusterProgressPolicy's namespaceSelector.
    #[serde(default)]
    pub namespace_labels: BTreeMap<String, String>,
    /// Accelerators it holds; leave out for a job that does not say (the policy's `assumeGpus` applies).
    #[serde(default)]
    pub gpus: Option<f64>,
}

impl Default for TestJob {
    fn default() -> Self {
        TestJob {
            namespace: default_ns(),
            name: default_name(),
            labels: BTreeMap::new(),
            namespace_labels: BTreeMap::new(),
            gpus: None,
        }
    }
}

fn default_ns() -> String {
    "default".into()
}
fn default_name() -> String {
    "job".into()
}

/// A ProgressPolicyException of a case: one policy of `spec.exceptions`, written inline.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestException {
    /// `metadata.name` (default `exception`); the namespace is the case's job's.
    #[serde(default)]
    pub name: Option<String>,
    /// The policy, as `spec.exceptions[].policyName` names it.
    pub policy_name: String,
    /// Its rules; empty: all.
    #[serde(default)]
    pub rule_names: Vec<String>,
    /// `spec.match`, as in the CRD.
    #[serde(default, rename = "match")]
    pub match_: Option<serde_json::Value>,
    /// When it stops applying: an offset from the case's start (`2h`) or an RFC 3339 time.
    pub expires: String,
    /// `spec.reason`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A change of the job's phase at one instant.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PhaseChange {
    /// When: an offset from the case's start (`3h`) or an RFC 3339 time.
    pub at: String,
    /// Running, Suspended, Complete or Failed.
    pub phase: String,
}

/// The state a rule must be in at one instant.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateExpectation {
    /// When: an offset from the case's start (`3h`) or an RFC 3339 time.
    pub at: String,
    /// The rule's name.
    pub rule: String,
    /// inactive, pending or firing.
    pub state: String,
    /// Policy name, when the file loads several policies with the same rule name.
    #[serde(default)]
    pub policy: Option<String>,
    /// Job `ns/name` for stream inputs with several jobs.
    #[serde(default)]
    pub job: Option<String>,
}

/// One action intent expected in `expectActions`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionExpectation {
    /// When it is issued: an offset from the case's start (`3h`) or an RFC 3339 time.
    pub at: String,
    /// The rule that issues it.
    pub rule: String,
    /// The action kind: `suspend`, `notify`, ...
    pub action: String,
    /// Audit or Enforce; leave out to accept either.
    #[serde(default)]
    pub mode: Option<String>,
    /// Job `ns/name` (default the case's job).
    #[serde(default)]
    pub job: Option<String>,
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// What did not match, one message each; empty when the case passed.
    pub failures: Vec<String>,
}

/// Access to files next to the test file, so the core stays free of I/O.
pub trait FileSource {
    /// The text of the file at `relative` (a path relative to the test file), or why it cannot be read.
    fn read(&self, relative: &str) -> Result<String, String>;
}

/// Parses a test file; errors carry the YAML position or field.
pub fn parse_test_file(text: &str) -> Result<TestFile, String> {
    let file = serde_saphyr::from_str::<TestFile>(text).map_err(|e| e.to_string())?;
    // A file without cases would pass having tested nothing.
    if file.tests.is_empty() {
        return Err("tests: no test case (a file with none would pass having checked nothing)".into());
    }
    Ok(file)
}
