//! Backtest: what a policy would have saved on a fleet's real history, and which good runs it would have
//! killed.
//!
//! Each corpus entry is a complete recorded run (a stream that ran to its end without being stopped). Every
//! policy is replayed alone over each run — the same [`Replay`] and evaluator the controller runs, with every
//! rule as Enforce, since the question is what enforcing it would do — and each would-be stop is judged
//! against the rest of the recording ([`outcome::judge_stop`]): the GPU time to the run's real end, and how
//! much the target metric still improved afterwards. [`sweep`] turns `--set` values into candidates, all
//! evaluated in the same pass; [`report`] adds up per candidate, policy and rule.
//!
//! Pure like the rest of the core: the caller reads the files and spreads runs over threads
//! ([`Plan::backtest`] is `&self` and the plan is `Sync`).

pub mod outcome;
pub mod report;
pub mod sweep;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::drive::replay::Replay;
use crate::evaluate::{EngineConfig, Evaluator, Event};
use crate::history::metric_series::Direction;
use crate::input::sample::{JobKey, JobPhase, ProgressSample};
use crate::input::stream::StreamRecord;
use crate::policy::compile::{self, CompiledPolicy, PolicyDocument};
use crate::policy::{ActionSpec, Mode};
use crate::time::Timestamp;
use outcome::{Curve, RunFacts, StopOutcome};
use sweep::Candidate;

/// Points of each run's target curve kept for pictures (the verdicts use every point).
pub const CURVE_POINTS: usize = 400;

/// How stops are judged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// Improvement after a stop beyond which it is a false stop.
    pub tolerance: outcome::Tolerance,
    /// The metric regret is measured on; `None`: the stopping rule's own metric (`with.metric`), else `loss`.
    pub target: Option<String>,
    /// Namespaces' labels (`--namespace-labels`), for ClusterProgressPolicies' `namespaceSelector`.
    pub namespace_labels: crate::input::namespaces::NamespaceLabels,
}

/// One recorded run: one job of one corpus file.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    /// The file's name, plus the job when the file holds several.
    pub name: String,
    /// The job.
    pub job: JobKey,
    /// Its labels (the last seen).
    pub labels: BTreeMap<String, String>,
    /// GPUs it held, when recorded.
    pub gpus: Option<f64>,
    /// First record.
    pub start: Timestamp,
    /// When it really ended: its first completion, failure or deletion (a TrainJob is often deleted long
    /// after it completed), else its last record.
    pub end: Timestamp,
    /// Its last phase.
    pub phase: JobPhase,
    /// It ran to its end: it completed, failed or was deleted, and was not suspended when it ended (a
    /// Kueue job waits suspended before admission, or after a preemption, and that does not count). Only
    /// such runs are judged: of a run cut short, what would have come after a stop is unknown.
    pub complete: bool,
    /// When each distinct progress report arrived.
    pub reports: Vec<Timestamp>,
    /// Every reported metric (canonical names; `progress` is the percentage).
    pub curves: BTreeMap<String, Curve>,
}

/// The jobs of one stream, in order of first appearance. `name` names the file.
pub fn runs_of(records: &[StreamRecord], name: &str) -> Vec<Run> {
    let mut index: FxHashMap<&JobKey, usize> = FxHashMap::default();
    let mut runs: Vec<Run> = Vec::new();
    let mut last_report: Vec<Option<ProgressSample>> = Vec::new();
    let mut ended: Vec<bool> = Vec::new();
    for record in records {
        let key = record.job();
        let time = record.time();
        let i = *index.entry(key).or_insert_with(|| {
            runs.push(Run {
                name: name.to_string(),
                job: key.clone(),
                labels: BTreeMap::new(),
                gpus: None,
                start: time,
                end: time,
                phase: JobPhase::Running,
                complete: false,
                reports: Vec::new(),
                curves: BTreeMap::new(),
            });
            last_report.push(None);
            ended.push(false);
            runs.len() - 1
        });
        if ended[i] {
            continue; // After its end (a deletion days after completion): not part of the run.
        }
        let run = &mut runs[i];
        run.end = run.end.max(time);
        let (sample, phase, deleted) = match record {
            StreamRecord::Object { snapshot, .. } => {
                run.labels = snapshot.labels.clone();
                run.gpus = snapshot.gpus.or(run.gpus);
                (snapshot.sample.as_ref(), Some(snapshot.phase), false)
            }
            StreamRecord::Update(u) => {
                if let Some(l) = &u.labels {
                    run.labels = l.clone();
                }
                run.gpus = u.gpus.or(run.gpus);
                (u.sample.as_ref(), u.phase, u.deleted)
            }
        };
        let suspended_before = run.phase == JobPhase::Suspended;
        if let Some(p) = phase {
            run.phase = p;
        }
        if deleted || matches!(run.phase, JobPhase::Complete | JobPhase::Failed) {
            ended[i] = true;
            // Completing or failing means it ran again; a deletion while suspended leaves it cut short.
            run.complete = !(deleted && suspended_before);
        }
        // A watch re-delivers the same report when anything else about the job changes.
        if let Some(s) = sample
            && last_report[i].as_ref() != Some(s)
        {
            last_report[i] = Some(s.clone());
            run.reports.push(time);
            let mut push = |name: &str, value: f64| {
                run.curves.entry(name.to_string()).or_default().points.push((time, value));
            };
            if let Some(p) = s.progress_percent {
                push("progress", p);
            }
            for m in &s.metrics {
                push(&m.name, m.value);
            }
        }
    }
    if runs.len() > 1 {
        for run in &mut runs {
            run.name = format!("{name}: {}", run.job);
        }
    }
    runs
}

/// What one policy did to one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The run was not complete ([`Run::complete`]): not judged.
    pub skipped: bool,
    /// The policy selected the job at some point.
    pub selected: bool,
    /// The first stop (suspension), with the rule and the metric it was judged on.
    pub stop: Option<Stop>,
    /// Rule evaluations that failed on this run, by rule: how many, and the first message.
    pub rule_errors: BTreeMap<String, (u64, String)>,
    /// Why the policy did not select the run (`None` when it did), as the replay summary says it.
    pub not_selected: Option<String>,
    /// `rule r watches m` for each metric a rule watches that no record of the run's file reported.
    pub unreported: Vec<String>,
}

/// A would-be stop and its verdict.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stop {
    /// The rule whose suspension stopped the run.
    pub rule: String,
    /// The metric regret was measured on.
    pub target: String,
    /// The reason the rule gave.
    pub reason: String,
    /// The judgement.
    #[serde(flatten)]
    pub outcome: StopOutcome,
}

/// Everything one corpus file gave: its runs and, per candidate and policy, a verdict per run.
#[derive(Clone, Debug)]
pub struct FileResult {
    /// The runs of the file.
    pub runs: Vec<Run>,
    /// `verdicts[candidate][policy][run]`.
    pub verdicts: Vec<Vec<Vec<Verdict>>>,
}

/// The candidates to evaluate and how.
#[derive(Debug)]
pub struct Plan {
    /// From [`sweep::candidates`]; each compiles.
    pub candidates: Vec<Candidate>,
    /// The evaluator's settings (`--eval-interval`).
    pub config: EngineConfig,
    /// How stops are judged.
    pub options: Options,
}

impl Plan {
    /// Replays every policy of every candidate alone over the records of one file (in time order) and
    /// judges each run's first stop.
    pub fn backtest(&self, records: &[StreamRecord], name: &str) -> Result<FileResult, String> {
        let runs = runs_of(records, name);
        let mut verdicts = Vec::with_capacity(self.candidates.len());
        for candidate in &self.candidates {
            let mut per_policy = Vec::with_capacity(candidate.documents.len());
            for doc in &candidate.documents {
                per_policy.push(self.one_policy(doc, records, &runs)?);
            }
            verdicts.push(per_policy);
        }
        Ok(FileResult { runs, verdicts })
    }

    fn one_policy(
        &self,
        doc: &PolicyDocument,
        records: &[StreamRecord],
        runs: &[Run],
    ) -> Result<Vec<Verdict>, String> {
        let engine = Evaluator::new(self.config.clone());
        let mut policy = compile::compile(doc, engine.scripts()).map_err(|e| e.to_string())?;
        as_enforced(&mut policy);
        let watched: FxHashMap<String, (String, Direction)> = policy
            .rules
            .iter()
            .filter_map(|r| {
                let (metric, direction) = r.detector.as_ref()?.watched_metric()?;
                Some((r.name.clone(), (metric.to_string(), direction)))
            })
            .collect();
        let reference = policy.reference.clone();
        let gpu_hour_cost = policy.env.gpu_hour_cost;
        let assume_gpus = policy.env.assume_gpus;
        let mut replay = Replay::new(vec![policy], self.config.clone());
        for (namespace, labels) in &self.options.namespace_labels {
            replay.set_namespace_labels(namespace, labels.clone());
        }
        let mut verdicts: Vec<Verdict> = runs
            .iter()
            .map(|r| Verdict {
                skipped: !r.complete,
                selected: false,
                stop: None,
                rule_errors: BTreeMap::new(),
                not_selected: None,
                unreported: Vec::new(),
            })
            .collect();
        // Only complete runs are replayed.
        let index: FxHashMap<&JobKey, usize> =
            runs.iter().enumerate().filter(|(_, r)| r.complete).map(|(i, r)| (&r.job, i)).collect();
        if index.is_empty() {
            return Ok(verdicts);
        }
        let mut events = Vec::new();
        let mut note = |replay: &mut Replay, verdicts: &mut Vec<Verdict>| {
            std::mem::swap(&mut events, &mut replay.events);
            for event in events.drain(..) {
                let (job, stop) = match event {
                    Event::Intent(i) if matches!(i.action, ActionSpec::Suspend(_)) => {
                        (i.job, Some((i.rule, i.at, i.reason.summary)))
                    }
                    Event::RuleError { job, rule, message, .. } => {
                        if let Some(&r) = index.get(&job) {
                            let e = verdicts[r].rule_errors.entry(rule).or_insert((0, message));
                            e.0 += 1;
                        }
                        continue;
                    }
                    _ => continue,
                };
                let Some(&r) = index.get(&job) else { continue };
                if let Some((rule, at, reason)) = stop
                    && verdicts[r].stop.is_none()
                {
                    let run = &runs[r];
                    let (target, direction) = self.target(watched.get(&rule));
                    let empty = Curve::default();
                    let curve = run.curves.get(&target).unwrap_or(&empty);
                    let facts = RunFacts {
                        end: run.end,
                        gpus: run.gpus.or(assume_gpus).unwrap_or(0.0),
                        gpu_hour_cost,
                        reports: &run.reports,
                    };
                    let outcome = outcome::judge_stop(curve, direction, self.options.tolerance, &facts, at);
                    verdicts[r].stop = Some(Stop { rule, target, reason, outcome });
                }
            }
        };
        for record in records.iter().filter(|r| index.contains_key(r.job())) {
            replay.feed(record.clone());
            note(&mut replay, &mut verdicts);
            let job = record.job();
            if let Some(&r) = index.get(job)
                && !verdicts[r].selected
            {
                verdicts[r].selected = replay.evaluator().selects(&reference, job);
            }
        }
        replay.finish(None);
        note(&mut replay, &mut verdicts);
        // What the replay summary says of selection and unreported metrics, per run.
        let unreported: Vec<String> = replay
            .summary
            .unreported_metrics
            .iter()
            .map(|u| format!("rule {} watches {}", u.rule, u.metric))
            .collect();
        for (r, run) in runs.iter().enumerate().filter(|(_, r)| r.complete) {
            verdicts[r].unreported.clone_from(&unreported);
            if !verdicts[r].selected {
                verdicts[r].not_selected = replay.why_not_selected(0, &run.job);
            }
        }
        Ok(verdicts)
    }

    /// The metric stops are judged on and which way it improves: `--target` (higher is better for
    /// `progress` and accuracy-like names), else the metric the stopping rule's detector watches, else
    /// `loss` (stall, time, cost and Rhai rules: was the run still learning?).
    fn target(&self, watched: Option<&(String, Direction)>) -> (String, Direction) {
        if let Some(t) = &self.options.target {
            let name = crate::input::names::canonical_metric_name(t).into_owned();
            let direction = if name == "progress" { Direction::Max } else { Direction::infer(&name) };
            return (name, direction);
        }
        watched.cloned().unwrap_or_else(|| ("loss".to_string(), Direction::Min))
    }
}

/// The replay stops evaluating a run once its policy suspends it, as it would stop live: every rule
/// enforces (an Audit rule's first suspension is the stop just the same).
fn as_enforced(policy: &mut CompiledPolicy) {
    policy.mode = Mode::Enforce;
    for rule in &mut policy.rules {
        rule.mode = Mode::Enforce;
    }
}

/// Every `step`-th point of a curve, plus its last, so a picture of a long run stays small.
pub fn thinned(curve: &Curve, points: usize) -> Vec<(Timestamp, f64)> {
    let n = curve.points.len();
    if n <= points || points < 2 {
        return curve.points.clone();
    }
    let step = n.div_ceil(points - 1);
    let mut out: Vec<(Timestamp, f64)> = curve.points.iter().step_by(step).copied().collect();
    if out.last() != curve.points.last() {
        out.extend(curve.points.last().copied());
    }
    out
}

#[cfg(test)]
mod tests;
