//! Backtest: what a policy would have saved on a fleet's real history, and which good runs it would have
//! killed.
//!
//! Each corpus entry is a complete recorded run (a stream that ran to its end without being stopped). Every
//! policy is replayed alone over each run — the same [`Replay`] and evaluator the controller runs, with every
//! rule as Enforce, since the question is what enforcing it would do — and each would-be stop is judged
//! against the rest of the recording ([`outcome::judge_stop`]): the GPU time to the run's real end, and how
//! much the judged metric still improved afterwards. Stops decided elsewhere (a peer stopper run on the same
//! corpus, [`external`]) are judged the same way. [`sweep`] turns `--set` values into candidates, all
//! evaluated in the same pass; [`select`] picks the runs by label; [`report`] adds up per candidate, policy
//! and rule, and, where runs carry an outcome label ([`OUTCOME_LABEL`]), precision and recall.
//!
//! Pure like the rest of the core: the caller reads the files and spreads runs over threads
//! ([`Plan::backtest`] is `&self` and the plan is `Sync`).

pub mod external;
pub mod outcome;
pub mod report;
pub mod select;
pub mod sweep;

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::drive::replay::Replay;
use crate::evaluate::{EngineConfig, Evaluator, Event};
use crate::history::job_series::log_group;
use crate::history::metric_series::Direction;
use crate::input::sample::{JobKey, JobPhase, ProgressSample};
use crate::input::stream::StreamRecord;
use crate::policy::compile::{self, CompiledPolicy, PolicyDocument};
use crate::policy::{ActionSpec, Mode};
use crate::time::Timestamp;
use external::ExternalRule;
use outcome::{Curve, Judge, RunFacts, StopOutcome};
use select::RunSelector;
use sweep::Candidate;

/// The label that says how a corpus run went, read by a person from its curve: `healthy`, `plateau`,
/// `diverged`, `non-finite` or `stalled`. Runs that carry it give precision and recall.
pub const OUTCOME_LABEL: &str = "trainwarden.dev/outcome";

/// The outcome label's values; every one but `healthy` is a run that went bad.
pub const OUTCOMES: [&str; 5] = ["healthy", "plateau", "diverged", "non-finite", "stalled"];

/// Points of each run's target curve kept for pictures (the verdicts use every point).
pub const CURVE_POINTS: usize = 400;

/// How stops are judged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    /// The tolerance and the smoothing of the judgement.
    pub judge: Judge,
    /// The metric regret is measured on; `None`: the metric the stopping rule watched, else `loss`.
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

impl Run {
    /// The run's outcome label, when it is one of [`OUTCOMES`].
    pub fn outcome(&self) -> Option<&'static str> {
        let value = self.labels.get(OUTCOME_LABEL)?;
        OUTCOMES.iter().copied().find(|o| o == value)
    }
}

/// The jobs of one stream, in order of first appearance. `name` names the file.
///
/// A metric's curve holds the values it was *logged* with ([`crate::history::job_series::log_group`]): a
/// value that is bit for bit the previous report's, in a report where no other metric of its group changed
/// either, is a cached value re-sent (the status server's heartbeat between logging steps, an `eval_loss`
/// repeated beside every training loss), not a point of the curve.
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
            if let Some(p) = s.progress_percent {
                let curve = run.curves.entry("progress".to_string()).or_default();
                if curve.points.last().is_none_or(|(_, last)| *last != p) {
                    curve.points.push((time, p));
                }
            }
            let changed: Vec<bool> = s
                .metrics
                .iter()
                .map(|m| {
                    run.curves
                        .get(m.name.as_ref())
                        .and_then(|c| c.points.last())
                        .is_none_or(|(_, last)| last.to_bits() != m.value.to_bits())
                })
                .collect();
            let groups = s
                .metrics
                .iter()
                .zip(&changed)
                .fold(0u8, |g, (m, c)| if *c { g | log_group(&m.name) } else { g });
            for (m, c) in s.metrics.iter().zip(changed) {
                if c || groups & log_group(&m.name) != 0 {
                    run.curves.entry(m.name.to_string()).or_default().points.push((time, m.value));
                }
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
    /// For a stop read from a stops file that does not fit the run (before its first record, after its
    /// end): why, with the file and line. Such a stop is not judged.
    pub stop_error: Option<String>,
    /// For a policy with cohort rules: the run's sweep (its cohort label's value), and the metric its
    /// trials are ranked on (the first cohort rule's) with which way is better.
    pub sweep: Option<(String, String, Direction)>,
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
    /// The runs of the file that the plan's `--runs` selects.
    pub runs: Vec<Run>,
    /// Jobs of the file that `--runs` left out.
    pub excluded: Vec<JobKey>,
    /// `verdicts[candidate][policy][run]`: the candidate's policies, then one per external rule.
    pub verdicts: Vec<Vec<Vec<Verdict>>>,
}

/// The candidates to evaluate and how.
#[derive(Debug, Default)]
pub struct Plan {
    /// From [`sweep::candidates`]; each compiles.
    pub candidates: Vec<Candidate>,
    /// The evaluator's settings (`--eval-interval`).
    pub config: EngineConfig,
    /// How stops are judged.
    pub options: Options,
    /// Stops read from stops files, one entry per rule: scored after the policies, in every candidate.
    pub external: Vec<ExternalRule>,
    /// `--runs`: only runs whose labels match are judged.
    pub runs: Option<RunSelector>,
}

impl Plan {
    /// Replays every policy of every candidate alone over the records of one file (in time order) and
    /// judges each run's first stop.
    pub fn backtest(&self, records: &[StreamRecord], name: &str) -> Result<FileResult, String> {
        let (runs, excluded): (Vec<Run>, Vec<Run>) = runs_of(records, name)
            .into_iter()
            .partition(|r| self.runs.as_ref().is_none_or(|s| s.matches(&r.labels)));
        let excluded = excluded.into_iter().map(|r| r.job).collect();
        let external: Vec<Vec<Verdict>> =
            self.external.iter().map(|rule| self.external_rule(rule, &runs)).collect();
        let mut verdicts = Vec::with_capacity(self.candidates.len());
        for candidate in &self.candidates {
            let mut per_policy = Vec::with_capacity(candidate.documents.len() + external.len());
            for doc in &candidate.documents {
                per_policy.push(self.one_policy(doc, records, &runs)?);
            }
            per_policy.extend(external.iter().cloned());
            verdicts.push(per_policy);
        }
        Ok(FileResult { runs, excluded, verdicts })
    }

    /// The verdicts of one external rule's stops on the runs of a file: a stop is judged as a policy's
    /// suspension is, on the metric it names. A stop outside its run's records is an error, not a verdict.
    fn external_rule(&self, rule: &ExternalRule, runs: &[Run]) -> Vec<Verdict> {
        runs.iter()
            .map(|run| {
                let mut verdict = Verdict {
                    skipped: !run.complete,
                    selected: run.complete,
                    stop: None,
                    rule_errors: BTreeMap::new(),
                    stop_error: None,
                    not_selected: None,
                    unreported: Vec::new(),
                    sweep: None,
                };
                let Some(stop) = rule.stops.get(&run.job) else { return verdict };
                if !run.complete {
                    return verdict;
                }
                if stop.at < run.start || stop.at > run.end {
                    verdict.stop_error = Some(format!(
                        "{}: the stop of {} at {} is outside the run ({} to {})",
                        stop.origin, run.job, stop.at, run.start, run.end
                    ));
                    return verdict;
                }
                let (target, direction) = match &self.options.target {
                    Some(_) => self.target(None),
                    None => (stop.metric.clone(), stop.direction),
                };
                let outcome = self.judge(run, &target, direction, None, stop.at);
                let reason = stop
                    .reason
                    .clone()
                    .unwrap_or_else(|| format!("stopped by {} ({})", rule.rule, stop.origin));
                verdict.stop = Some(Stop { rule: rule.rule.clone(), target, reason, outcome });
                verdict
            })
            .collect()
    }

    /// Judges a stop of `run` at `at` on `target`.
    fn judge(
        &self,
        run: &Run,
        target: &str,
        direction: Direction,
        gpu_hour_cost: Option<f64>,
        at: Timestamp,
    ) -> StopOutcome {
        self.judge_with(run, target, direction, run.gpus.unwrap_or(0.0), gpu_hour_cost, at)
    }

    fn judge_with(
        &self,
        run: &Run,
        target: &str,
        direction: Direction,
        gpus: f64,
        gpu_hour_cost: Option<f64>,
        at: Timestamp,
    ) -> StopOutcome {
        let empty = Curve::default();
        let curve = run.curves.get(target).unwrap_or(&empty);
        let facts = RunFacts { end: run.end, gpus, gpu_hour_cost, reports: &run.reports };
        outcome::judge_stop(curve, direction, self.options.judge, &facts, at)
    }

    /// Judges a stop on the metrics its rule watched (`--target` overrides them): a stop is false when any
    /// of them improved afterwards, and is then reported on the one that improved most; else on the first
    /// the run logged.
    fn judge_watched(
        &self,
        run: &Run,
        watched: &[(String, Direction)],
        gpus: f64,
        gpu_hour_cost: Option<f64>,
        at: Timestamp,
    ) -> (String, StopOutcome) {
        if self.options.target.is_some() || watched.is_empty() {
            let (target, direction) = self.target(None);
            let outcome = self.judge_with(run, &target, direction, gpus, gpu_hour_cost, at);
            return (target, outcome);
        }
        let judged: Vec<(String, StopOutcome)> = watched
            .iter()
            .map(|(m, d)| (m.clone(), self.judge_with(run, m, *d, gpus, gpu_hour_cost, at)))
            .collect();
        let rank = |o: &StopOutcome| o.relative_improvement.unwrap_or(f64::INFINITY);
        let worst_false =
            judged.iter().filter(|(_, o)| o.false_stop).max_by(|a, b| rank(&a.1).total_cmp(&rank(&b.1)));
        let pick = worst_false.or_else(|| judged.iter().find(|(_, o)| o.measured)).unwrap_or(&judged[0]);
        pick.clone()
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
        // Which metric each rule's stop is judged on: the one its detector watched when it fired (a second
        // compilation of the policy answers it; the first goes into the replay).
        let judging = compile::compile(doc, engine.scripts()).map_err(|e| e.to_string())?;
        let judged = |rule: &str, values: &BTreeMap<String, f64>| -> Vec<(String, Direction)> {
            judging
                .rules
                .iter()
                .find(|r| r.name == rule)
                .and_then(|r| r.detector.as_ref())
                .map(|d| d.judged_metrics(values))
                .unwrap_or_default()
        };
        let reference = policy.reference.clone();
        // A sweep is the runs with one value of the cohort label, ranked on the first cohort rule's metric.
        let sweep_of =
            policy.rules.iter().find_map(|r| r.detector.as_ref()?.cohort()).map(|judge| {
                (policy.cohort.label().to_string(), judge.metric().to_string(), judge.direction())
            });
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
                stop_error: None,
                sweep: sweep_of.as_ref().and_then(|(label, metric, direction)| {
                    Some((r.labels.get(label)?.clone(), metric.clone(), *direction))
                }),
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
                        (i.job, Some((i.rule, i.at, i.reason.summary, i.reason.values)))
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
                if let Some((rule, at, reason, values)) = stop
                    && verdicts[r].stop.is_none()
                {
                    let run = &runs[r];
                    let gpus = run.gpus.or(assume_gpus).unwrap_or(0.0);
                    let (target, outcome) =
                        self.judge_watched(run, &judged(&rule, &values), gpus, gpu_hour_cost, at);
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
    /// `progress` and accuracy-like names), else the metric the stopping rule's detector watched, else
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
