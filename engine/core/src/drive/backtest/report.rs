//! The backtest's totals: per candidate (one combination of `--set` values), per policy and per rule — runs
//! seen, stopped, GPU time saved, false stops and the good work they would have cost, the worst regret, the
//! lead time of rightful stops; where runs carry an outcome label, healthy runs stopped, bad runs caught,
//! precision and recall — and, over candidates, which settings are on the Pareto front (no other saves more
//! GPU-hours with no more false stops). With several policies, they are also added up *together*: each run's
//! first stop by any of them, which is what running them side by side would do. The scoreboard puts every
//! policy and every external rule (a peer's stops) on one table.

use std::collections::BTreeMap;

mod text;

use super::outcome::median;
use super::{CURVE_POINTS, FileResult, Plan, Stop, Verdict, thinned};
use crate::input::sample::JobPhase;
use crate::time::Timestamp;

/// The whole answer.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Relative improvement beyond which a stop is false.
    pub tolerance: f64,
    /// And the least absolute improvement (0: any).
    pub min_improvement: f64,
    /// Logged values per rolling median the judgement compares (1: raw values).
    pub smoothing: usize,
    /// `--target`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `--runs`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_selector: Option<String>,
    /// Corpus files read.
    pub files: usize,
    /// Every judged run, in corpus order.
    pub runs: Vec<RunSummary>,
    /// Jobs of the corpus that `--runs` left out.
    pub excluded: Vec<String>,
    /// Judged runs by outcome label (complete runs only).
    pub outcomes: BTreeMap<String, u64>,
    /// Stops from stops files that did not fit their run: `file:line: why`. Not judged.
    pub stop_errors: Vec<String>,
    /// Runs not judged because they did not run to their end (still running, or suspended).
    pub incomplete: Vec<String>,
    /// Judged runs without a recorded GPU count: their GPU-hours are 0 unless the policy sets assumeGpus.
    pub runs_without_gpus: usize,
    /// One per combination of `--set` values (one without sweeps).
    pub candidates: Vec<CandidateReport>,
}

/// A run as the report shows it.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// The file (and job).
    pub name: String,
    /// `namespace/name`.
    pub job: String,
    /// GPUs, when recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<f64>,
    /// First record.
    pub start: Timestamp,
    /// Last record.
    pub end: Timestamp,
    /// How it ended: `Complete`, `Failed`, … (`Running`: the stream just stops).
    pub phase: String,
    /// Its outcome label, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Thinned curves of the metrics some stop was judged on (for pictures; not in JSON).
    #[serde(skip)]
    pub curves: BTreeMap<String, Vec<(Timestamp, f64)>>,
}

/// One combination of settings.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateReport {
    /// `path=value` per `--set`.
    pub settings: Vec<Setting>,
    /// One per policy, in file order, then one per external rule (stops files).
    pub policies: Vec<PolicyReport>,
    /// With two policies or more: each run's first stop by any of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub together: Option<PolicyReport>,
}

/// One `--set` value of a candidate.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Setting {
    /// The field, relative to `spec`.
    pub path: String,
    /// Its value here.
    pub value: String,
}

/// One policy's totals in one candidate.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    /// `namespace/name` (or the name of a cluster policy).
    pub policy: String,
    /// `spec.mode` as written (the backtest enforces every rule); `external` for a stops file's rule.
    pub mode_as_written: String,
    /// For an external rule: the stops files it came from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// The totals over its rules.
    #[serde(flatten)]
    pub totals: Tally,
    /// Per rule, in spec order (rules that never stopped a run included).
    pub rules: Vec<RuleReport>,
    /// Every stop, in corpus order.
    pub stops: Vec<StopEntry>,
    /// Runs labelled as gone bad that it saw and did not stop rightly, in corpus order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missed: Vec<String>,
    /// On the Pareto front among this policy's candidates (always true without sweeps).
    pub pareto: bool,
    /// Judged runs it did not select, by reason.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub not_selected: BTreeMap<String, u64>,
    /// `rule r watches m` for the watched metrics no judged run reported: those rules could not fire.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreported: Option<Vec<String>>,
    /// For a policy with cohort rules: per sweep (a value of its cohort label), what the rules did to it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sweeps: Vec<SweepReport>,
}

/// What a policy's cohort rules did to one sweep: the regret that matters for a sweep is stopping the trial
/// that would have won it.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SweepReport {
    /// The cohort label's value.
    pub sweep: String,
    /// The metric trials are ranked on.
    pub metric: String,
    /// Its judged (complete) trials.
    pub trials: u64,
    /// Trials stopped.
    pub stopped: u64,
    /// The completed trial with the best final value of the metric (its last finite report), had nothing
    /// been stopped: the one the sweep would have picked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_trial: Option<String>,
    /// Its final value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_value: Option<f64>,
    /// The policy would have stopped it (and so picked another winner).
    pub best_stopped: bool,
    /// GPU-hours from the stops to the trials' real ends.
    pub gpu_hours_saved: f64,
    /// GPU-hours the sweep's trials used, start to end, unstopped.
    pub gpu_hours: f64,
}

/// One rule's totals.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReport {
    /// The rule's name.
    pub rule: String,
    /// The first evaluation error, with its run, when it failed somewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Its totals (`runsSeen` is the policy's).
    #[serde(flatten)]
    pub totals: Tally,
}

/// A stop, with the run it stopped.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StopEntry {
    /// Index into [`Report::runs`].
    pub run: usize,
    /// The run's name.
    pub run_name: String,
    /// The run's outcome label, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_outcome: Option<String>,
    /// The stop and its verdict.
    #[serde(flatten)]
    pub stop: Stop,
}

/// Totals of a set of stops.
#[derive(Clone, Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    /// Runs the policy selected.
    pub runs_seen: u64,
    /// Runs stopped.
    pub stopped: u64,
    /// Wall-clock hours from the stops to the runs' real ends.
    pub hours_saved: f64,
    /// GPU-hours from the stops to the runs' real ends.
    pub gpu_hours_saved: f64,
    /// Dollars, when the policy prices GPU-hours.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dollars_saved: Option<f64>,
    /// Stops after which the run still improved by more than the tolerance.
    pub false_stops: u64,
    /// GPU-hours the false stops would have cut: good work lost.
    pub lost_gpu_hours: f64,
    /// The false stop with the largest relative improvement afterwards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worst_regret: Option<Regret>,
    /// Stops of runs that never reported the target metric: not judged either way.
    pub unmeasured: u64,
    /// Rightful stops by how the run had gone bad (`plateau`, `nonFinite`, `stalled`, `diverged`).
    pub troubles: BTreeMap<String, u64>,
    /// Median seconds from the trouble's onset to the stop, over rightful stops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_lead_seconds: Option<f64>,
    /// Rule evaluations that failed (those rules never fired there).
    pub rule_errors: u64,
    /// Stops of runs that carry an outcome label.
    pub labelled_stops: u64,
    /// Stops of runs labelled `healthy`.
    pub healthy_stopped: u64,
    /// Rightful stops of runs labelled as gone bad (any label but `healthy`): bad runs caught.
    pub caught: u64,
    /// Runs seen that are labelled as gone bad.
    pub bad_runs_seen: u64,
    /// `caught` / `labelled_stops`, when there are labelled stops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<f64>,
    /// `caught` / `bad_runs_seen`, when bad runs were seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall: Option<f64>,
    /// Per outcome label: runs seen, stopped, caught (rightful stops) and false stops.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_outcome: BTreeMap<String, OutcomeTally>,
    #[serde(skip)]
    leads: Vec<f64>,
}

/// One outcome label's share of a [`Tally`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutcomeTally {
    /// Runs with this label the policy selected.
    pub runs: u64,
    /// Of them, stopped.
    pub stopped: u64,
    /// Stopped rightly.
    pub caught: u64,
    /// Stopped falsely.
    pub false_stops: u64,
}

/// The worst false stop.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Regret {
    /// The run.
    pub run_name: String,
    /// The rule that stopped it.
    pub rule: String,
    /// The metric.
    pub target: String,
    /// How much better it got after the stop.
    pub improvement: f64,
    /// Relative to the best before the stop (`None`: nothing had been measured yet, or the best was 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative: Option<f64>,
    /// The best before the stop was exactly 0 (so there is no relative size).
    pub from_zero: bool,
}

impl Tally {
    /// A run the policy selected, with its outcome label.
    fn see(&mut self, outcome: Option<&str>) {
        self.runs_seen += 1;
        if let Some(label) = outcome {
            self.by_outcome.entry(label.to_string()).or_default().runs += 1;
            if label != "healthy" {
                self.bad_runs_seen += 1;
            }
        }
    }

    fn add(&mut self, run_name: &str, stop: &Stop, outcome: Option<&str>) {
        let o = &stop.outcome;
        if let Some(label) = outcome {
            self.labelled_stops += 1;
            let rightful = o.measured && !o.false_stop;
            let entry = self.by_outcome.entry(label.to_string()).or_default();
            entry.stopped += 1;
            entry.false_stops += u64::from(o.false_stop);
            if label == "healthy" {
                self.healthy_stopped += 1;
            } else if rightful {
                self.caught += 1;
                entry.caught += 1;
            }
        }
        self.stopped += 1;
        self.hours_saved += o.hours_saved;
        self.gpu_hours_saved += o.gpu_hours_saved;
        if let Some(d) = o.dollars_saved {
            *self.dollars_saved.get_or_insert(0.0) += d;
        }
        if !o.measured {
            self.unmeasured += 1;
        }
        if o.false_stop {
            self.false_stops += 1;
            self.lost_gpu_hours += o.gpu_hours_saved;
            let rank = |r: Option<f64>| r.unwrap_or(f64::INFINITY);
            if self.worst_regret.as_ref().is_none_or(|w| rank(o.relative_improvement) > rank(w.relative)) {
                self.worst_regret = Some(Regret {
                    run_name: run_name.to_string(),
                    rule: stop.rule.clone(),
                    target: stop.target.clone(),
                    improvement: o.improvement,
                    relative: o.relative_improvement,
                    from_zero: o.best_before == Some(0.0),
                });
            }
        }
        if let Some(t) = o.trouble {
            *self.troubles.entry(t.as_str().to_string()).or_default() += 1;
        }
        if let Some(l) = o.lead_seconds {
            self.leads.push(l);
        }
    }

    fn close(&mut self) {
        self.median_lead_seconds = median(&mut self.leads);
        self.precision = (self.labelled_stops > 0).then(|| self.caught as f64 / self.labelled_stops as f64);
        self.recall = (self.bad_runs_seen > 0).then(|| self.caught as f64 / self.bad_runs_seen as f64);
    }

    /// Good work lost per GPU-hour saved (`None` when nothing was saved).
    pub fn lost_share(&self) -> Option<f64> {
        (self.gpu_hours_saved > 0.0).then(|| self.lost_gpu_hours / self.gpu_hours_saved)
    }
}

/// Adds files' results up, in corpus order (so the report does not depend on which thread finished first).
pub struct ReportBuilder {
    report: Report,
    /// Policies (not external rules) per candidate: what `together` adds up.
    documents: usize,
}

impl ReportBuilder {
    /// An empty report for `plan`'s candidates.
    pub fn new(plan: &Plan) -> Self {
        let candidates = plan
            .candidates
            .iter()
            .map(|c| CandidateReport {
                settings: c
                    .settings
                    .iter()
                    .map(|(p, v)| Setting { path: p.clone(), value: v.clone() })
                    .collect(),
                policies: c
                    .documents
                    .iter()
                    .map(|d| PolicyReport {
                        policy: d.reference.to_string(),
                        mode_as_written: d.spec.mode.as_str().to_string(),
                        sources: Vec::new(),
                        totals: Tally::default(),
                        rules: d.spec.rules.iter().map(|r| RuleReport::new(&r.name)).collect(),
                        stops: Vec::new(),
                        missed: Vec::new(),
                        pareto: true,
                        not_selected: BTreeMap::new(),
                        unreported: None,
                        sweeps: Vec::new(),
                    })
                    .chain(plan.external.iter().map(|e| PolicyReport {
                        policy: e.rule.clone(),
                        mode_as_written: "external".into(),
                        sources: e.sources.clone(),
                        totals: Tally::default(),
                        rules: vec![RuleReport::new(&e.rule)],
                        stops: Vec::new(),
                        missed: Vec::new(),
                        pareto: true,
                        not_selected: BTreeMap::new(),
                        unreported: None,
                        sweeps: Vec::new(),
                    }))
                    .collect(),
                together: (c.documents.len() > 1).then(|| PolicyReport {
                    policy: format!("all {} policies together", c.documents.len()),
                    mode_as_written: "Enforce".into(),
                    sources: Vec::new(),
                    totals: Tally::default(),
                    rules: c
                        .documents
                        .iter()
                        .flat_map(|d| {
                            d.spec.rules.iter().map(move |r| {
                                RuleReport::new(&together_rule(&d.reference.to_string(), &r.name))
                            })
                        })
                        .collect(),
                    stops: Vec::new(),
                    missed: Vec::new(),
                    pareto: true,
                    not_selected: BTreeMap::new(),
                    unreported: None,
                    sweeps: Vec::new(),
                }),
            })
            .collect();
        ReportBuilder {
            report: Report {
                tolerance: plan.options.judge.tolerance.relative,
                min_improvement: plan.options.judge.tolerance.absolute,
                smoothing: plan.options.judge.smoothing,
                target: plan.options.target.clone(),
                runs_selector: plan.runs.as_ref().map(ToString::to_string),
                files: 0,
                runs: Vec::new(),
                excluded: Vec::new(),
                outcomes: BTreeMap::new(),
                stop_errors: Vec::new(),
                incomplete: Vec::new(),
                runs_without_gpus: 0,
                candidates,
            },
            documents: plan.candidates.first().map_or(0, |c| c.documents.len()),
        }
    }

    /// Adds the next file's result.
    pub fn add(&mut self, file: FileResult) {
        self.report.files += 1;
        self.report.excluded.extend(file.excluded.iter().map(ToString::to_string));
        let first = self.report.runs.len();
        let outcomes: Vec<Option<&'static str>> = file.runs.iter().map(super::Run::outcome).collect();
        let mut targets: Vec<std::collections::BTreeSet<String>> = vec![Default::default(); file.runs.len()];
        let documents = self.documents;
        for (candidate, per_policy) in self.report.candidates.iter_mut().zip(&file.verdicts) {
            for (policy, verdicts) in candidate.policies.iter_mut().zip(per_policy) {
                for (r, verdict) in verdicts.iter().enumerate() {
                    let name = &file.runs[r].name;
                    if let Some(why) = &verdict.not_selected {
                        *policy.not_selected.entry(why.clone()).or_default() += 1;
                    }
                    if !verdict.skipped {
                        let seen = policy.unreported.get_or_insert_with(|| verdict.unreported.clone());
                        seen.retain(|u| verdict.unreported.contains(u));
                    }
                    if let Some(e) = &verdict.stop_error
                        && !self.report.stop_errors.contains(e)
                    {
                        self.report.stop_errors.push(e.clone());
                    }
                    add_verdict(policy, verdict, name, first + r, outcomes[r], None);
                    if let Some(stop) = &verdict.stop {
                        targets[r].insert(stop.target.clone());
                    }
                }
                policy.sweeps.extend(sweeps(&file.runs, verdicts));
            }
            // Together: per run, the earliest stop of any policy (external rules are not part of it).
            if let Some(together) = &mut candidate.together {
                for r in 0..file.runs.len() {
                    let policies = &per_policy[..documents.min(per_policy.len())];
                    let selected = policies.iter().any(|v| v[r].selected);
                    let first_stop = policies
                        .iter()
                        .zip(&candidate.policies)
                        .filter_map(|(v, p)| v[r].stop.as_ref().map(|s| (s, p.policy.as_str())))
                        .min_by_key(|(s, _)| s.outcome.at);
                    let verdict = Verdict {
                        skipped: policies.iter().all(|v| v[r].skipped),
                        selected,
                        stop: None,
                        rule_errors: BTreeMap::new(),
                        stop_error: None,
                        not_selected: None,
                        unreported: Vec::new(),
                        sweep: None,
                    };
                    let stop = first_stop
                        .map(|(s, policy)| Stop { rule: together_rule(policy, &s.rule), ..s.clone() });
                    add_verdict(together, &verdict, &file.runs[r].name, first + r, outcomes[r], stop);
                }
            }
        }
        for ((run, wanted), outcome) in file.runs.into_iter().zip(targets).zip(outcomes) {
            if !run.complete {
                self.report.incomplete.push(run.name.clone());
            } else {
                if run.gpus.is_none() {
                    self.report.runs_without_gpus += 1;
                }
                if let Some(o) = outcome {
                    *self.report.outcomes.entry(o.to_string()).or_default() += 1;
                }
            }
            let curves = wanted
                .into_iter()
                .filter_map(|m| run.curves.get(&m).map(|c| (m, thinned(c, CURVE_POINTS))))
                .collect();
            self.report.runs.push(RunSummary {
                name: run.name,
                job: run.job.to_string(),
                gpus: run.gpus,
                start: run.start,
                end: run.end,
                phase: phase_name(run.phase).to_string(),
                outcome: outcome.map(str::to_string),
                curves,
            });
        }
    }

    /// The finished report: medians, precision and recall, and the Pareto front.
    pub fn finish(mut self) -> Report {
        for c in &mut self.report.candidates {
            for p in c.policies.iter_mut().chain(c.together.as_mut()) {
                p.totals.close();
                for r in &mut p.rules {
                    r.totals.close();
                }
            }
        }
        let policies = self.report.candidates.first().map_or(0, |c| c.policies.len());
        for p in 0..policies {
            let points: Vec<(f64, u64)> = self
                .report
                .candidates
                .iter()
                .map(|c| (c.policies[p].totals.gpu_hours_saved, c.policies[p].totals.false_stops))
                .collect();
            for (i, c) in self.report.candidates.iter_mut().enumerate() {
                let (saved, false_stops) = points[i];
                c.policies[p].pareto = !points
                    .iter()
                    .any(|&(s, f)| s >= saved && f <= false_stops && (s > saved || f < false_stops));
            }
        }
        self.report
    }
}

impl RuleReport {
    fn new(rule: &str) -> Self {
        RuleReport { rule: rule.to_string(), first_error: None, totals: Tally::default() }
    }
}

/// Per sweep among a file's runs (a policy's verdicts on them), in order of first appearance.
fn sweeps(runs: &[super::Run], verdicts: &[Verdict]) -> Vec<SweepReport> {
    let mut order: Vec<&str> = Vec::new();
    let mut members: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (r, v) in verdicts.iter().enumerate() {
        let Some((sweep, _, _)) = &v.sweep else { continue };
        if v.skipped {
            continue;
        }
        if !members.contains_key(sweep.as_str()) {
            order.push(sweep);
        }
        members.entry(sweep).or_default().push(r);
    }
    order
        .into_iter()
        .filter_map(|sweep| {
            let trials = &members[sweep];
            let (_, metric, direction) = verdicts[trials[0]].sweep.clone()?;
            let final_value = |r: usize| {
                runs[r].curves.get(&metric)?.points.iter().rev().map(|p| p.1).find(|v| v.is_finite())
            };
            // A trial that failed is no winner (Optuna leaves FAIL trials out of its best trial).
            let finished = |r: &&usize| runs[**r].phase == JobPhase::Complete;
            let best = trials.iter().filter(finished).filter_map(|&r| final_value(r).map(|v| (r, v))).reduce(
                |a, b| {
                    let better = match direction {
                        crate::history::metric_series::Direction::Min => b.1 < a.1,
                        crate::history::metric_series::Direction::Max => b.1 > a.1,
                    };
                    if better { b } else { a }
                },
            );
            let hours = |r: usize| {
                let run = &runs[r];
                run.gpus.unwrap_or(0.0) * crate::time::seconds(run.start, run.end).max(0.0) / 3600.0
            };
            Some(SweepReport {
                sweep: sweep.to_string(),
                metric: metric.clone(),
                trials: trials.len() as u64,
                stopped: trials.iter().filter(|&&r| verdicts[r].stop.is_some()).count() as u64,
                best_trial: best.map(|(r, _)| runs[r].name.clone()),
                best_value: best.map(|(_, v)| v),
                best_stopped: best.is_some_and(|(r, _)| verdicts[r].stop.is_some()),
                gpu_hours_saved: trials
                    .iter()
                    .filter_map(|&r| verdicts[r].stop.as_ref())
                    .map(|s| s.outcome.gpu_hours_saved)
                    .sum(),
                gpu_hours: trials.iter().map(|&r| hours(r)).sum(),
            })
        })
        .collect()
}

/// A rule's name in the `together` totals: `policy/rule`.
fn together_rule(policy: &str, rule: &str) -> String {
    format!("{}/{rule}", policy.rsplit('/').next().unwrap_or(policy))
}

/// Adds one run's verdict to a policy's totals; `stop` overrides the verdict's own (for `together`).
fn add_verdict(
    policy: &mut PolicyReport,
    verdict: &Verdict,
    name: &str,
    run: usize,
    outcome: Option<&str>,
    stop: Option<Stop>,
) {
    if verdict.selected {
        policy.totals.see(outcome);
        for rule in &mut policy.rules {
            rule.totals.see(outcome);
        }
    }
    for (rule, (count, message)) in &verdict.rule_errors {
        policy.totals.rule_errors += count;
        if let Some(r) = policy.rules.iter_mut().find(|x| &x.rule == rule) {
            r.totals.rule_errors += count;
            r.first_error.get_or_insert_with(|| format!("{name}: {message}"));
        }
    }
    let stop = stop.or_else(|| verdict.stop.clone());
    let caught = stop.as_ref().is_some_and(|s| s.outcome.measured && !s.outcome.false_stop);
    if verdict.selected && outcome.is_some_and(|o| o != "healthy") && !caught {
        policy.missed.push(format!("{name} ({})", outcome.unwrap_or_default()));
    }
    let Some(stop) = stop else { return };
    policy.totals.add(name, &stop, outcome);
    if let Some(rule) = policy.rules.iter_mut().find(|x| x.rule == stop.rule) {
        rule.totals.add(name, &stop, outcome);
    }
    policy.stops.push(StopEntry {
        run,
        run_name: name.to_string(),
        run_outcome: outcome.map(str::to_string),
        stop,
    });
}

fn phase_name(p: JobPhase) -> &'static str {
    match p {
        JobPhase::Running => "Running",
        JobPhase::Suspended => "Suspended",
        JobPhase::Complete => "Complete",
        JobPhase::Failed => "Failed",
    }
}
