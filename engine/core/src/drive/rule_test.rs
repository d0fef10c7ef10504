//! `trainwarden test`: offline rule tests, like `promtool test rules` and `kyverno test`.
//!
//! A test file (YAML) names the policy files it tests and a list of cases. Each case builds an input —
//! series in promtool's expanding notation at an `interval`, or a recorded stream — runs it through the
//! replay driver (the controller's code path), and checks the expected rule states at given times and the
//! exact list of action intents. Every failing expectation is reported with what was expected and what
//! happened.
//!
//! ```yaml
//! policies: [plateau.yaml]
//! tests:
//!   - name: flat loss fires after the window
//!     interval: 1m
//!     job: {namespace: ml, name: ft, labels: {team: ml}, gpus: 8}
//!     series:
//!       loss: "2.0-0.01x100 1.0x150"
//!       progress: "0+0.4x250"
//!     expect:
//!       - {at: 3h, rule: loss-plateau, state: firing}
//!     expectActions:
//!       - {at: 3h31m, rule: loss-plateau, action: suspend, mode: Enforce}
//! ```
//!
//! Series names `progress`, `eta` (seconds), `step`, `totalSteps`, `epoch` fill the progress fields;
//! `gpuUtil` and `gpuPower` are GPU readings of every GPU of the job (`job.gpus`, default 1), `gpuUtil.N` and
//! `gpuPower.N` of GPU N alone (from 0); `queuePending` and `queuePendingGpus` are the demand queued behind the
//! job in Kueue (each holds its last value until the next; the other starts at 0); every other name is a
//! metric. A step where every series has a gap (`_`) sends no sample at all, which is how a stall is written. `at` is an offset from `start` (a duration) or an RFC 3339 time.

use std::collections::BTreeMap;

use crate::drive::notation::{self, Step};
use crate::drive::replay::Replay;
use crate::error::FieldError;
use crate::evaluate::{EngineConfig, Event, RuleState};
use crate::input::queue::QueueDemand;
use crate::input::sample::{JobKey, JobPhase, Metric, ProgressSample, SampleSource};
use crate::input::stream::{StreamRecord, Update};
use crate::policy::PolicyRef;
use crate::policy::compile::{CompiledPolicy, PolicyDocument};
use crate::time::Timestamp;
use crate::units::duration::PolicyDuration;

mod file;

pub use file::*;

fn parse_time_or_offset(s: &str, start: Timestamp) -> Result<Timestamp, String> {
    if let Ok(t) = s.parse::<Timestamp>() {
        return Ok(t);
    }
    let d: PolicyDuration =
        s.parse().map_err(|e| format!("{s:?} is neither an RFC 3339 time nor a duration: {e}"))?;
    crate::time::add_seconds(start, d.as_secs_f64()).ok_or_else(|| format!("{s:?} is out of range"))
}

fn offset_text(t: Timestamp, start: Timestamp) -> String {
    let secs = crate::time::seconds(start, t);
    if secs >= 0.0 && secs.fract() == 0.0 {
        PolicyDuration::from_secs(secs as u64).to_string()
    } else {
        t.to_string()
    }
}

struct Input {
    records: Vec<StreamRecord>,
    end: Timestamp,
}

/// GPU readings one test case may hold (steps × GPUs).
const MAX_GPU_READINGS: usize = 1_000_000;

/// Which GPU reading a series name writes: `(util?, device)`; `device` None means every GPU of the job.
fn gpu_series(name: &str) -> Option<(bool, Option<usize>)> {
    let (field, index) = match name.split_once('.') {
        Some((f, i)) => {
            (f, Some(i.parse::<usize>().ok().filter(|i| *i < crate::input::gpu::MAX_GPUS_PER_JOB)?))
        }
        None => (name, None),
    };
    match field {
        "gpuUtil" => Some((true, index)),
        "gpuPower" => Some((false, index)),
        _ => None,
    }
}

/// The GPU readings of step `i`: one per GPU (the job's `gpus`, at least 1, or more if a series names a
/// higher GPU), from the GPU series with a value at that step; `None` when none has one.
fn gpu_sample(
    expanded: &[(&str, Vec<Step>)],
    i: usize,
    at: Timestamp,
    gpus: Option<f64>,
) -> Option<crate::input::gpu::GpuSample> {
    use crate::input::gpu::{GpuReading, GpuSample};
    let values: Vec<(bool, Option<usize>, f64)> = expanded
        .iter()
        .filter_map(|(name, steps)| match (gpu_series(name), steps.get(i)) {
            (Some((util, device)), Some(Step::Value(v))) => Some((util, device, *v)),
            _ => None,
        })
        .collect();
    if values.is_empty() {
        return None;
    }
    let highest = values.iter().filter_map(|(_, d, _)| *d).max().map_or(0, |d| d + 1);
    let count =
        highest.max(gpus.map_or(1, |g| g.round().max(1.0) as usize)).min(crate::input::gpu::MAX_GPUS_PER_JOB);
    let mut readings: Vec<GpuReading> = (0..count)
        .map(|d| GpuReading {
            id: d.to_string(),
            util: None,
            engine_active: None,
            power: None,
            fb_used: None,
        })
        .collect();
    // Every-GPU values first, so a GPU's own series overrides them.
    for pass_device in [false, true] {
        for (util, device, v) in &values {
            if device.is_some() != pass_device {
                continue;
            }
            for (d, r) in readings.iter_mut().enumerate() {
                if device.is_none_or(|x| x == d) {
                    if *util {
                        r.util = Some(*v);
                    } else {
                        r.power = Some(*v);
                    }
                }
            }
        }
    }
    readings.retain(|r| r.util.is_some() || r.power.is_some());
    Some(GpuSample { at, gpus: readings })
}

/// Series that are the demand queued behind the job in Kueue, not progress.
const QUEUE_SERIES: [&str; 2] = ["queuePending", "queuePendingGpus"];

/// The queue demand of step `i`, when a queue series has a value there; each series keeps its last value
/// (`last`) between its own steps.
fn queue_demand(expanded: &[(&str, Vec<Step>)], i: usize, last: &mut QueueDemand) -> Option<QueueDemand> {
    let mut changed = false;
    for (name, steps) in expanded {
        let Some(Step::Value(v)) = steps.get(i) else { continue };
        match *name {
            // Checked whole and in range when expanded.
            "queuePending" => last.pending = *v as u32,
            "queuePendingGpus" => last.pending_gpus = *v,
            _ => continue,
        }
        changed = true;
    }
    changed.then_some(*last)
}

fn build_input(case: &TestCase, start: Timestamp, files: &dyn FileSource) -> Result<Input, Vec<String>> {
    let mut errors = Vec::new();
    let key = JobKey::new(case.job.namespace.clone(), case.job.name.clone());
    let mut records = Vec::new();
    if let Some(stream) = &case.stream {
        if !case.series.is_empty() {
            errors.push("give series or stream, not both".to_string());
        }
        match files.read(stream) {
            Ok(text) => match crate::input::stream::parse_stream(&text, stream) {
                Ok(r) => records = r,
                Err(es) => errors.extend(es.into_iter().map(|e| e.to_string())),
            },
            Err(e) => errors.push(format!("stream {stream}: {e}")),
        }
    } else {
        let interval: PolicyDuration = match case.interval.as_deref().unwrap_or("1m").parse() {
            Ok(d) => d,
            Err(e) => {
                errors.push(format!("interval: {e}"));
                PolicyDuration::from_secs(60)
            }
        };
        let mut expanded: Vec<(&str, Vec<Step>)> = Vec::new();
        for (name, text) in &case.series {
            if (name.starts_with("gpuUtil") || name.starts_with("gpuPower")) && gpu_series(name).is_none() {
                errors.push(format!(
                    "series.{name}: GPU series are gpuUtil, gpuPower (every GPU of the job) or gpuUtil.N, gpuPower.N (GPU N, from 0, below {})",
                    crate::input::gpu::MAX_GPUS_PER_JOB
                ));
                continue;
            }
            match notation::expand(text) {
                Ok(steps) => {
                    if let Some((util, _)) = gpu_series(name) {
                        let bad = steps.iter().find_map(|step| match step {
                            Step::Value(v) if !(v.is_finite() && *v >= 0.0 && (!util || *v <= 100.0)) => {
                                Some(*v)
                            }
                            _ => None,
                        });
                        if let Some(v) = bad {
                            let range = if util { "a utilization from 0 to 100" } else { "watts, >= 0" };
                            errors.push(format!("series.{name}: {v} is not {range}"));
                            continue;
                        }
                    }
                    if QUEUE_SERIES.contains(&name.as_str()) {
                        let whole = name == "queuePending";
                        let bad = steps.iter().find_map(|step| match step {
                            Step::Value(v)
                                if !(v.is_finite()
                                    && *v >= 0.0
                                    && (!whole || (v.fract() == 0.0 && *v <= f64::from(u32::MAX)))) =>
                            {
                                Some(*v)
                            }
                            _ => None,
                        });
                        if let Some(v) = bad {
                            let what = if whole { "a whole number of Workloads, >= 0" } else { "GPUs, >= 0" };
                            errors.push(format!("series.{name}: {v} is not {what}"));
                            continue;
                        }
                    }
                    expanded.push((name.as_str(), steps));
                }
                Err(e) => errors.push(format!("series.{name}: {e}")),
            }
        }
        let len = expanded.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
        // GPU readings are held for the whole case: bound steps × GPUs, as a stream line bounds its GPUs.
        if expanded.iter().any(|(name, _)| gpu_series(name).is_some()) {
            let gpus = case.job.gpus.map_or(1.0, |g| g.round().max(1.0));
            let readings = len as f64 * gpus;
            if readings > MAX_GPU_READINGS as f64 {
                errors.push(format!(
                    "series: {len} steps × {gpus} GPUs = {readings} GPU readings; a test case holds at most {MAX_GPU_READINGS}"
                ));
                expanded.retain(|(name, _)| gpu_series(name).is_none());
            }
        }
        let mut last_queue = QueueDemand::default();
        for i in 0..len {
            let Some(t) = crate::time::add_seconds(start, interval.as_secs_f64() * i as f64) else {
                break;
            };
            let mut sample = ProgressSample::empty(t, SampleSource::TrainerStatus);
            let mut any = false;
            for (name, steps) in &expanded {
                let Some(Step::Value(v)) = steps.get(i) else { continue };
                if gpu_series(name).is_some() || QUEUE_SERIES.contains(name) {
                    continue;
                }
                any = true;
                match *name {
                    "progress" => sample.progress_percent = Some(*v),
                    "eta" => sample.eta_seconds = Some(*v),
                    "step" => sample.current_step = Some(*v),
                    "totalSteps" => sample.total_steps = Some(*v),
                    "epoch" => sample.current_epoch = Some(*v),
                    metric => sample
                        .metrics
                        .push(Metric { name: crate::input::canonical_metric_name(metric), value: *v }),
                }
            }
            let first = records.is_empty();
            let gpu = gpu_sample(&expanded, i, t, case.job.gpus);
            let queue = queue_demand(&expanded, i, &mut last_queue);
            if any || first || gpu.is_some() || queue.is_some() {
                records.push(StreamRecord::Update(Update {
                    sample: any.then_some(sample),
                    labels: first.then(|| case.job.labels.clone()),
                    gpus: if first { case.job.gpus } else { None },
                    gpu,
                    queue,
                    ..Update::new(t, key.clone())
                }));
            }
        }
        if records.is_empty() {
            records.push(StreamRecord::Update(Update {
                labels: Some(case.job.labels.clone()),
                gpus: case.job.gpus,
                ..Update::new(start, key.clone())
            }));
        }
        let end = crate::time::add_seconds(start, interval.as_secs_f64() * len.saturating_sub(1) as f64)
            .unwrap_or(start);
        records.push(StreamRecord::Update(Update::new(end, key.clone())));
    }
    for (i, p) in case.phases.iter().enumerate() {
        let phase = match p.phase.as_str() {
            "Running" => JobPhase::Running,
            "Suspended" => JobPhase::Suspended,
            "Complete" => JobPhase::Complete,
            "Failed" => JobPhase::Failed,
            other => {
                errors.push(format!(
                    "phases[{i}].phase: expected Running, Suspended, Complete or Failed, got {other:?}"
                ));
                continue;
            }
        };
        match parse_time_or_offset(&p.at, start) {
            Ok(t) => records
                .push(StreamRecord::Update(Update { phase: Some(phase), ..Update::new(t, key.clone()) })),
            Err(e) => errors.push(format!("phases[{i}].at: {e}")),
        }
    }
    records.sort_by_key(super::super::input::stream::StreamRecord::time);
    let end = records.iter().map(super::super::input::stream::StreamRecord::time).max().unwrap_or(start);
    if errors.is_empty() { Ok(Input { records, end }) } else { Err(errors) }
}

fn state_name(s: RuleState) -> &'static str {
    match s {
        RuleState::Inactive => "inactive",
        RuleState::Pending => "pending",
        RuleState::Firing => "firing",
    }
}

fn find_policy<'a>(policies: &'a [PolicyRef], rule_policy: Option<&str>) -> Vec<&'a PolicyRef> {
    policies.iter().filter(|p| rule_policy.is_none_or(|n| p.name == n)).collect()
}

/// `job ml/ft is not selected by any policy (ml/p: namespace ml, labels team=fraud)`, with a hint.
fn not_selected(job: &JobKey, labels: &BTreeMap<String, String>, policies: &[CompiledPolicy]) -> String {
    let show_labels = |m: &BTreeMap<String, String>| {
        if m.is_empty() {
            "none".to_string()
        } else {
            m.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
        }
    };
    let described: Vec<String> = policies
        .iter()
        .map(|p| {
            let scope = match &p.scope {
                crate::policy::PolicyScope::Namespace(ns) => format!("namespace {ns}"),
                crate::policy::PolicyScope::Cluster { namespace_selector, .. }
                    if namespace_selector.is_empty() =>
                {
                    "every namespace".to_string()
                }
                crate::policy::PolicyScope::Cluster { .. } => {
                    "namespaces by label (set job.namespaceLabels)".to_string()
                }
            };
            let mut selector = show_labels(&p.selector.match_labels);
            if !p.selector.match_expressions.is_empty() {
                selector.push_str(&format!(" and {} matchExpressions", p.selector.match_expressions.len()));
            }
            format!("{}: {scope}, labels {selector}", p.reference)
        })
        .collect();
    format!(
        "job {job} (labels {}) is not selected by any policy ({}): set job.namespace and job.labels in the case, or expectSelected: false if that is the point",
        show_labels(labels),
        described.join("; ")
    )
}

/// Runs one case against freshly compiled policies.
pub fn run_case(
    case: &TestCase,
    policies: Vec<CompiledPolicy>,
    exceptions: &[crate::CompiledException],
    config: EngineConfig,
    files: &dyn FileSource,
) -> CaseResult {
    let mut failures = Vec::new();
    let start = match case.start.as_deref().unwrap_or("2026-01-05T00:00:00Z").parse::<Timestamp>() {
        Ok(t) => t,
        Err(e) => return CaseResult { name: case.name.clone(), failures: vec![format!("start: {e}")] },
    };
    let input = match build_input(case, start, files) {
        Ok(i) => i,
        Err(e) => return CaseResult { name: case.name.clone(), failures: e },
    };
    let refs: Vec<PolicyRef> = policies.iter().map(|p| p.reference.clone()).collect();
    let rules_of: BTreeMap<String, Vec<String>> = policies
        .iter()
        .map(|p| (p.reference.name.clone(), p.rules.iter().map(|r| r.name.clone()).collect()))
        .collect();
    let default_job = JobKey::new(case.job.namespace.clone(), case.job.name.clone());
    let mut checkpoints = Vec::new();
    for (i, e) in case.expect.iter().enumerate() {
        match parse_time_or_offset(&e.at, start) {
            Ok(t) => checkpoints.push((t, i)),
            Err(err) => failures.push(format!("expect[{i}].at: {err}")),
        }
        if !matches!(e.state.as_str(), "inactive" | "pending" | "firing") {
            failures
                .push(format!("expect[{i}].state: expected inactive, pending or firing, got {:?}", e.state));
        }
        if !rules_of
            .iter()
            .any(|(p, rules)| e.policy.as_deref().is_none_or(|n| n == p) && rules.contains(&e.rule))
        {
            failures.push(format!("expect[{i}].rule: no rule {:?} in the tested policies", e.rule));
        }
    }
    let until = match case.until.as_deref().map(|u| parse_time_or_offset(u, start)) {
        None => input.end,
        // The clock costs a round of evaluation per interval: a year past the input is plenty.
        Some(Ok(t)) if t.duration_since(input.end).as_secs() > 366 * 86_400 => {
            failures.push(format!("until: {t} is more than a year after the input ends ({})", input.end));
            input.end
        }
        Some(Ok(t)) => t.max(input.end),
        Some(Err(e)) => {
            failures.push(format!("until: {e}"));
            input.end
        }
    };
    // A case whose job no policy selects passes every "does not fire" expectation for the wrong reason.
    // (A recorded stream brings its jobs' own labels: the check is for the job the case describes.)
    if case.stream.is_none() {
        let ns_labels = Some(&case.job.namespace_labels);
        let selected =
            policies.iter().any(|p| p.selects(&default_job.namespace, &case.job.labels, ns_labels));
        if case.expect_selected && !selected {
            failures.push(not_selected(&default_job, &case.job.labels, &policies));
        }
        if !case.expect_selected && selected {
            failures.push(format!("expectSelected: false, but a tested policy selects job {default_job}"));
        }
    }
    let mut in_force: Vec<crate::CompiledException> = exceptions.to_vec();
    for (i, e) in case.exceptions.iter().enumerate() {
        let expires = match parse_time_or_offset(&e.expires, start) {
            Ok(t) => t,
            Err(err) => {
                failures.push(format!("exceptions[{i}].expires: {err}"));
                continue;
            }
        };
        let mut spec = serde_json::json!({
            "exceptions": [{"policyName": e.policy_name, "ruleNames": e.rule_names}],
            "expires": expires.to_string(),
        });
        if let Some(m) = &e.match_ {
            spec["match"] = m.clone();
        }
        if let Some(r) = &e.reason {
            spec["reason"] = serde_json::json!(r);
        }
        let name = e.name.as_deref().unwrap_or("exception");
        match crate::compile_exception(&case.job.namespace, name, spec) {
            Ok(c) => {
                let mut refused = c.check_against(&policies);
                refused.extend(c.absent_targets(&policies));
                if refused.is_empty() {
                    in_force.push(c);
                }
                failures.extend(refused.into_iter().map(|x| format!("exceptions[{i}]: {x}")));
            }
            Err(es) => failures.extend(es.into_iter().map(|x| format!("exceptions[{i}]: {x}"))),
        }
    }
    if !failures.is_empty() {
        return CaseResult { name: case.name.clone(), failures };
    }
    checkpoints.sort();
    let mut replay = Replay::new(policies, config);
    replay.add_exceptions(in_force);
    replay.set_namespace_labels(&case.job.namespace, case.job.namespace_labels.clone());
    let mut records = input.records.into_iter().peekable();
    for (t, i) in checkpoints {
        while let Some(r) = records.next_if(|r| r.time() <= t) {
            replay.feed(r);
        }
        replay.advance_to(t);
        let e = &case.expect[i];
        let job = match &e.job {
            Some(j) => match JobKey::parse(j) {
                Some(k) => k,
                None => {
                    failures.push(format!("expect[{i}].job: expected ns/name, got {j:?}"));
                    continue;
                }
            },
            None => default_job.clone(),
        };
        let states: Vec<RuleState> = find_policy(&refs, e.policy.as_deref())
            .into_iter()
            .filter_map(|p| replay.evaluator().rule_state(&job, p, &e.rule))
            .collect();
        let got = states.first().copied().unwrap_or(RuleState::Inactive);
        if state_name(got) != e.state {
            failures.push(format!(
                "at {} ({}): rule {} on {job}: expected state {}, got {}",
                e.at,
                t,
                e.rule,
                e.state,
                state_name(got)
            ));
        }
    }
    for r in records {
        replay.feed(r);
    }
    replay.finish(Some(until));
    // A rule that cannot be evaluated never fires, which would make every "must not fire" case pass.
    for e in &replay.events {
        if let Event::RuleError { at, job, rule, message, .. } = e {
            failures.push(format!(
                "at {}: rule {rule} on {job} could not be evaluated: {message}",
                offset_text(*at, start)
            ));
        }
    }
    if let Some(expected) = &case.expect_actions {
        let got: Vec<ActionExpectation> = replay
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Intent(i) => Some(ActionExpectation {
                    at: offset_text(i.at, start),
                    rule: i.rule.clone(),
                    action: i.action.kind().to_string(),
                    mode: Some(i.mode.as_str().to_string()),
                    job: Some(i.job.to_string()),
                }),
                _ => None,
            })
            .collect();
        let normalize =
            |e: &ActionExpectation| -> Option<(Timestamp, String, String, Option<String>, String)> {
                let at = parse_time_or_offset(&e.at, start).ok()?;
                Some((
                    at,
                    e.rule.clone(),
                    e.action.clone(),
                    e.mode.clone(),
                    e.job.clone().unwrap_or_else(|| default_job.to_string()),
                ))
            };
        let want: Vec<_> = expected.iter().map(normalize).collect();
        let have: Vec<_> = got.iter().map(normalize).collect();
        let matches = want.len() == have.len()
            && want.iter().zip(&have).all(|(w, h)| match (w, h) {
                (Some(w), Some(h)) => {
                    w.0 == h.0 && w.1 == h.1 && w.2 == h.2 && w.4 == h.4 && (w.3.is_none() || w.3 == h.3)
                }
                _ => false,
            });
        if !matches {
            let fmt = |list: &[ActionExpectation]| {
                list.iter()
                    .map(|a| {
                        format!(
                            "    {{at: {}, rule: {}, action: {}{}{}}}",
                            a.at,
                            a.rule,
                            a.action,
                            a.mode.as_ref().map(|m| format!(", mode: {m}")).unwrap_or_default(),
                            a.job.as_ref().map(|j| format!(", job: {j}")).unwrap_or_default()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            failures.push(format!(
                "actions differ\n  expected:\n{}\n  got:\n{}",
                if expected.is_empty() { "    (none)".into() } else { fmt(expected) },
                if got.is_empty() { "    (none)".into() } else { fmt(&got) }
            ));
        }
    }
    CaseResult { name: case.name.clone(), failures }
}

/// The ProgressPolicyExceptions in the test file's policy files (each checked against `policies`).
pub fn load_exceptions(
    file: &TestFile,
    files: &dyn FileSource,
    policies: &[CompiledPolicy],
) -> Result<Vec<crate::CompiledException>, Vec<FieldError>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for path in &file.policies {
        let Ok(text) = files.read(path) else { continue }; // load_policies reports it
        match crate::parse_exceptions(&text, path) {
            Ok(es) => {
                for e in es {
                    // In a test the policies are all there: an exception to another holds nothing, and a
                    // case that counts on it would pass or fail for the wrong reason.
                    let mut refused = e.check_against(policies);
                    refused.extend(e.absent_targets(policies));
                    errors.extend(refused.iter().map(|x| {
                        FieldError::new(format!("{path}: {} {}", e.reference, x.path), x.message.clone())
                    }));
                    if refused.is_empty() {
                        out.push(e);
                    }
                }
            }
            Err(e) => errors.extend(
                e.errors.into_iter().map(|x| FieldError::new(format!("{path}: {}", x.path), x.message)),
            ),
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(errors) }
}

/// Loads the policy documents a test file names. Errors are prefixed with the policy file.
pub fn load_policies(
    file: &TestFile,
    files: &dyn FileSource,
) -> Result<Vec<PolicyDocument>, Vec<FieldError>> {
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for path in &file.policies {
        match files.read(path) {
            Ok(text) => match crate::policy::compile::parse_documents(&text, path) {
                Ok(d) => docs.extend(d),
                Err(e) => errors.extend(
                    e.errors.into_iter().map(|x| FieldError::new(format!("{path}: {}", x.path), x.message)),
                ),
            },
            Err(e) => errors.push(FieldError::new(path.clone(), e)),
        }
    }
    if errors.is_empty() { Ok(docs) } else { Err(errors) }
}
