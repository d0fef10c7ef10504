//! The backtest end to end on hand-made runs with known answers.

use super::report::ReportBuilder;
use super::sweep::{PolicyFile, Sweep, candidates};
use super::*;
use crate::history::metric_series::Direction;
use crate::input::stream::parse_stream;
use crate::judge::script::ScriptEngine;

const POLICY: &str = "apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: p, namespace: default}
spec:
  mode: Audit
  gpuHourCost: 2
  rules:
    - name: loss-plateau
      uses: plateau
      with: {metric: loss, window: 2h, minDelta: 0.001}
      actions: [{suspend: {}}]
    - name: nan-loss
      uses: non_finite
      with: {metric: loss}
      for: 20m
      actions: [{suspend: {}}]
";

const START: i64 = 1_790_000_000; // 2026-09-21T13:33:20Z

fn at(minutes: i64) -> String {
    Timestamp::from_second(START + minutes * 60).unwrap().to_string()
}

/// A run of `job` with a loss every 10 minutes, then `Complete` 10 minutes after the last.
fn stream(job: &str, losses: &[f64]) -> String {
    let mut lines = vec![format!(
        r#"{{"time":"{}","job":"default/{job}","phase":"Running","labels":{{}},"gpus":4}}"#,
        at(0)
    )];
    for (i, loss) in losses.iter().enumerate() {
        let m = i as i64 * 10;
        let value = if loss.is_nan() { "NaN".to_string() } else { loss.to_string() };
        lines.push(format!(
            r#"{{"time":"{t}","job":"default/{job}","trainerStatus":{{"progressPercentage":{p},"metrics":[{{"name":"loss","value":"{value}"}}],"lastUpdatedTime":"{t}"}}}}"#,
            t = at(m),
            p = (i * 100 / losses.len()).min(99),
        ));
    }
    lines.push(format!(
        r#"{{"time":"{}","job":"default/{job}","phase":"Complete"}}"#,
        at(losses.len() as i64 * 10)
    ));
    lines.join("\n")
}

/// 3 h of learning, 3 h flat, then 3 h of learning again: a plateau rule kills it wrongly.
fn late_improver() -> Vec<f64> {
    let mut v: Vec<f64> = (0..18).map(|i| 2.0 - i as f64 * 0.05).collect(); // down to 1.15
    // Flat, as a logged loss is: the same level with a last-digit wobble.
    v.extend((0..18).map(|i| if i % 2 == 0 { 1.15 } else { 1.1504 }));
    v.extend((1..=18).map(|i| 1.15 - i as f64 * 0.02)); // down to 0.79
    v
}

/// Learns for 2 h, then NaN for 4 h.
fn nan_run() -> Vec<f64> {
    let mut v: Vec<f64> = (0..12).map(|i| 2.0 - i as f64 * 0.05).collect();
    v.extend(std::iter::repeat_n(f64::NAN, 24));
    v
}

fn plan(sweeps: &[Sweep]) -> Plan {
    let files = [PolicyFile { source: "p.yaml".into(), text: POLICY.into() }];
    let candidates = candidates(&files, sweeps, &ScriptEngine::new(Default::default())).unwrap();
    Plan { candidates, config: EngineConfig::default(), options: Options::default(), ..Default::default() }
}

fn backtest(plan: &Plan, runs: &[(&str, Vec<f64>)]) -> report::Report {
    let mut builder = ReportBuilder::new(plan);
    for (name, losses) in runs {
        let records = parse_stream(&stream(name, losses), name).unwrap();
        builder.add(plan.backtest(&records, name).unwrap());
    }
    builder.finish()
}

#[test]
fn a_late_improver_is_a_false_stop_and_a_nan_run_a_rightful_one() {
    let report = backtest(&plan(&[]), &[("late", late_improver()), ("nan", nan_run())]);
    assert_eq!(report.runs.len(), 2);
    let p = &report.candidates[0].policies[0];
    assert_eq!(p.policy, "default/p");
    assert_eq!(p.mode_as_written, "Audit", "reported as written, enforced anyway");
    assert_eq!(p.totals.runs_seen, 2);
    assert_eq!(p.totals.stopped, 2);
    assert_eq!(p.totals.false_stops, 1);

    let late = &p.stops.iter().find(|s| s.run_name == "late").unwrap().stop;
    assert_eq!(late.rule, "loss-plateau");
    assert!(late.outcome.false_stop);
    // Flat since minute 170 (loss 1.15); the plateau is 2 h old at minute 290.
    assert_eq!(late.outcome.at.to_string(), at(290));
    assert_eq!(late.outcome.best_before, Some(1.15));
    // Its best level afterwards: the median of its last 5 logged values, 0.87 … 0.79.
    assert!((late.outcome.best_after.unwrap() - 0.83).abs() < 1e-9);
    // The run ends at minute 540: 250 minutes on 4 GPUs at $2.
    assert!((late.outcome.gpu_hours_saved - 4.0 * 250.0 / 60.0).abs() < 1e-9);
    assert!((p.totals.lost_gpu_hours - 4.0 * 250.0 / 60.0).abs() < 1e-9);
    let worst = p.totals.worst_regret.as_ref().unwrap();
    assert_eq!((worst.run_name.as_str(), worst.rule.as_str()), ("late", "loss-plateau"));
    assert!((worst.relative.unwrap() - 0.32 / 1.15).abs() < 1e-9);

    let nan = &p.stops.iter().find(|s| s.run_name == "nan").unwrap().stop;
    assert_eq!(nan.rule, "nan-loss");
    assert!(!nan.outcome.false_stop);
    assert_eq!(nan.outcome.improvement, 0.0, "a NaN run's stop has zero regret");
    assert_eq!(nan.outcome.trouble, Some(outcome::Trouble::NonFinite));
    // NaN from minute 120; `for: 20m` fires at minute 140.
    assert_eq!(nan.outcome.onset.unwrap().to_string(), at(120));
    assert_eq!(nan.outcome.lead_seconds, Some(1200.0));
    assert_eq!(p.totals.median_lead_seconds, Some(1200.0));
    let dollars = p.totals.dollars_saved.unwrap();
    assert!((dollars - 2.0 * p.totals.gpu_hours_saved).abs() < 1e-9);

    let text = report.render_text();
    assert!(text.contains("runs seen 2, stopped 2"), "{text}");
    assert!(text.contains("false stops 1"), "{text}");
    assert!(text.contains("FALSE STOP: loss improved 27.8 % afterwards"), "{text}");
}

#[test]
fn a_sweep_evaluates_every_setting_and_marks_the_pareto_front() {
    // A 4 h window outlasts the 3 h plateau: no false stop, but nothing saved on the late improver either.
    let sweeps = [Sweep::parse("rules[loss-plateau].with.window=2h,4h").unwrap()];
    let report = backtest(&plan(&sweeps), &[("late", late_improver()), ("nan", nan_run())]);
    assert_eq!(report.candidates.len(), 2);
    let two = &report.candidates[0].policies[0].totals;
    let four = &report.candidates[1].policies[0].totals;
    assert_eq!((two.stopped, two.false_stops), (2, 1));
    assert_eq!((four.stopped, four.false_stops), (1, 0));
    assert!(two.gpu_hours_saved > four.gpu_hours_saved);
    // Neither dominates: 2h saves more, 4h kills nothing good.
    assert!(report.candidates[0].policies[0].pareto && report.candidates[1].policies[0].pareto);
    let text = report.render_text();
    assert!(text.contains("trade-off for default/p"), "{text}");
    assert!(text.contains("rules[loss-plateau].with.window"), "{text}");
}

#[test]
fn a_policy_that_selects_nothing_sees_no_runs() {
    let text = POLICY.replace("rules:\n", "selector: {matchLabels: {team: nobody}}\n  rules:\n");
    let files = [PolicyFile { source: "p.yaml".into(), text }];
    let candidates = candidates(&files, &[], &ScriptEngine::new(Default::default())).unwrap();
    let plan = Plan {
        candidates,
        config: EngineConfig::default(),
        options: Options::default(),
        ..Default::default()
    };
    let report = backtest(&plan, &[("late", late_improver())]);
    let t = &report.candidates[0].policies[0].totals;
    assert_eq!((t.runs_seen, t.stopped), (0, 0));
}

#[test]
fn runs_of_a_file_with_two_jobs_are_named_by_job() {
    let text = format!("{}\n{}", stream("a", &[1.0, 0.9]), stream("b", &[1.0]));
    let records = parse_stream(&text, "two.jsonl").unwrap();
    let runs = runs_of(&records, "two.jsonl");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].name, "two.jsonl: default/a");
    assert_eq!(runs[0].curves["loss"].points.len(), 2);
    assert_eq!(runs[0].gpus, Some(4.0));
    assert_eq!(runs[0].phase, JobPhase::Complete);
    assert_eq!(runs[1].reports.len(), 1);
}

#[test]
fn runs_that_did_not_run_to_their_end_are_not_judged() {
    let cut = stream("cut", &late_improver()).replace(r#""phase":"Complete""#, r#""phase":"Suspended""#);
    let records = parse_stream(&cut, "cut").unwrap();
    let plan = plan(&[]);
    let result = plan.backtest(&records, "cut").unwrap();
    assert!(!result.runs[0].complete);
    assert!(result.verdicts[0][0][0].skipped);
    assert_eq!(result.verdicts[0][0][0].stop, None);
    let mut builder = ReportBuilder::new(&plan);
    builder.add(result);
    let report = builder.finish();
    assert_eq!(report.incomplete, ["cut"]);
    assert_eq!(report.candidates[0].policies[0].totals.runs_seen, 0);
    assert!(
        report.render_text().contains("not judged: 1 run that did not run to the end"),
        "{}",
        report.render_text()
    );
}

#[test]
fn a_run_ends_at_its_completion_not_at_a_later_deletion() {
    let mut text = stream("late", &late_improver());
    text.push_str(&format!(
        "\n{{\"time\":\"{}\",\"job\":\"default/late\",\"deleted\":true}}",
        at(540 + 24 * 60)
    ));
    let records = parse_stream(&text, "late").unwrap();
    let runs = runs_of(&records, "late");
    assert_eq!(runs[0].end.to_string(), at(540));
    assert!(runs[0].complete);
    let report = backtest(&plan(&[]), &[("late", late_improver())]);
    let saved = report.candidates[0].policies[0].totals.gpu_hours_saved;
    assert!((saved - 4.0 * 250.0 / 60.0).abs() < 1e-9, "{saved}");
}

#[test]
fn a_kueue_job_that_waited_suspended_before_admission_is_judged() {
    let text =
        stream("queued", &late_improver()).replacen(r#""phase":"Running""#, r#""phase":"Suspended""#, 1);
    let text = text.replacen(
        r#"{"time""#,
        &format!(
            r#"{{"time":"{}","job":"default/queued","phase":"Running"}}
{{"time""#,
            at(0)
        ),
        2,
    );
    let records = parse_stream(&text, "queued").unwrap();
    let runs = runs_of(&records, "queued");
    assert!(runs[0].complete, "suspended only while it waited for admission");
    // Deleted while suspended: cut short.
    let cut = format!(
        "{}\n{{\"time\":\"{}\",\"job\":\"default/x\",\"phase\":\"Suspended\"}}\n{{\"time\":\"{}\",\"job\":\"default/x\",\"deleted\":true}}",
        stream("x", &[1.0, 0.9]).lines().take(3).collect::<Vec<_>>().join("\n"),
        at(30),
        at(40)
    );
    let records = parse_stream(&cut, "x").unwrap();
    assert!(!runs_of(&records, "x")[0].complete);
}

#[test]
fn a_repeated_report_with_new_content_is_kept() {
    // Two reports with the same lastUpdatedTime but different content: both are points of the curve.
    let line = |loss: &str| {
        format!(
            r#"{{"time":"{t}","job":"default/r","trainerStatus":{{"metrics":[{{"name":"loss","value":"{loss}"}}],"lastUpdatedTime":"{t}"}}}}"#,
            t = at(5)
        )
    };
    let text = format!("{}\n{}\n{}", line("1.0"), line("1.0"), line("0.5"));
    let records = parse_stream(&text, "r").unwrap();
    let runs = runs_of(&records, "r");
    assert_eq!(runs[0].curves["loss"].points.len(), 2, "the exact repeat is dropped, the new content kept");
}

#[test]
fn stops_are_judged_on_the_metric_the_detector_watches() {
    let text = POLICY.replace(
        "with: {metric: loss, window: 2h, minDelta: 0.001}",
        "with: {metric: eval_loss, window: 2h, minDelta: 0.001}",
    );
    let files = [PolicyFile { source: "p.yaml".into(), text }];
    let candidates = candidates(&files, &[], &ScriptEngine::new(Default::default())).unwrap();
    let plan = Plan {
        candidates,
        config: EngineConfig::default(),
        options: Options::default(),
        ..Default::default()
    };
    let losses = late_improver();
    let stream_text = stream("late", &losses).replace(r#""name":"loss""#, r#""name":"eval_loss""#);
    let records = parse_stream(&stream_text, "late").unwrap();
    let result = plan.backtest(&records, "late").unwrap();
    let stop = result.verdicts[0][0][0].stop.as_ref().unwrap();
    assert_eq!(stop.target, "eval_loss");
    assert!(stop.outcome.false_stop);
    // --target overrides it; `progress` improves upwards.
    let mut plan = plan;
    plan.options.target = Some("progress".into());
    assert_eq!(plan.target(None), ("progress".to_string(), Direction::Max));
    plan.options.target = Some("train_loss".into());
    assert_eq!(plan.target(None).1, Direction::Min);
}

#[test]
fn rule_errors_are_kept_per_rule_with_the_first_message() {
    let text = POLICY.replace("    - name: nan-loss", "    - name: boom\n      when: 'let z = runtime().to_int() * 0; 1 / z > 0'\n      actions: [{suspend: {}}]\n    - name: nan-loss");
    let files = [PolicyFile { source: "p.yaml".into(), text }];
    let candidates = candidates(&files, &[], &ScriptEngine::new(Default::default())).unwrap();
    let plan = Plan {
        candidates,
        config: EngineConfig::default(),
        options: Options::default(),
        ..Default::default()
    };
    let mut builder = ReportBuilder::new(&plan);
    let records = parse_stream(&stream("late", &late_improver()), "late").unwrap();
    builder.add(plan.backtest(&records, "late").unwrap());
    let report = builder.finish();
    let p = &report.candidates[0].policies[0];
    let boom = p.rules.iter().find(|r| r.rule == "boom").unwrap();
    assert!(boom.totals.rule_errors > 0);
    assert_eq!(p.totals.rule_errors, boom.totals.rule_errors);
    assert!(boom.first_error.as_ref().unwrap().starts_with("late: "), "{:?}", boom.first_error);
    assert!(report.render_text().contains("boom: "), "{}", report.render_text());
}

#[test]
fn thinning_keeps_the_first_and_last_points() {
    let c = Curve { points: (0..1000).map(|i| (Timestamp::from_second(i).unwrap(), i as f64)).collect() };
    let t = thinned(&c, 100);
    assert!(t.len() <= 101, "{}", t.len());
    assert_eq!(t.first(), c.points.first());
    assert_eq!(t.last(), c.points.last());
}

/// `stream` with labels on the job.
fn labelled(job: &str, losses: &[f64], labels: &str) -> String {
    stream(job, losses).replacen(r#""labels":{}"#, &format!(r#""labels":{{{labels}}}"#), 1)
}

fn backtest_texts(plan: &Plan, streams: &[(&str, String)]) -> report::Report {
    let mut builder = ReportBuilder::new(plan);
    for (name, text) in streams {
        let records = parse_stream(text, name).unwrap();
        builder.add(plan.backtest(&records, name).unwrap());
    }
    builder.finish()
}

#[test]
fn an_external_stop_is_judged_exactly_as_the_policys_suspension() {
    // The plateau policy stops the late improver at minute 290; a peer's stop at the same time, on the same
    // metric, gets the very same verdict.
    let mut plan = plan(&[]);
    let stops = format!(
        "{}\n{}\n",
        format_args!(r#"{{"job": "default/late", "time": "{}", "rule": "peer", "metric": "loss"}}"#, at(290)),
        format_args!(
            r#"{{"job": "default/nan", "time": "{}", "rule": "peer", "metric": "loss", "reason": "NaN"}}"#,
            at(140)
        ),
    );
    external::read_stops(&stops, "peer.jsonl", &mut plan.external).unwrap();
    let report = backtest(&plan, &[("late", late_improver()), ("nan", nan_run())]);
    let policies = &report.candidates[0].policies;
    assert_eq!(policies.len(), 2);
    let (ours, peer) = (&policies[0], &policies[1]);
    assert_eq!((peer.policy.as_str(), peer.mode_as_written.as_str()), ("peer", "external"));
    assert_eq!(peer.sources, ["peer.jsonl"]);
    assert_eq!(peer.totals.runs_seen, 2);
    for run in ["late", "nan"] {
        let a = &ours.stops.iter().find(|s| s.run_name == run).unwrap().stop;
        let b = &peer.stops.iter().find(|s| s.run_name == run).unwrap().stop;
        // The same judgement; only the dollars are the policy's own (a peer prices no GPU-hour).
        let priced_as_the_peer = outcome::StopOutcome { dollars_saved: None, ..a.outcome.clone() };
        assert_eq!(priced_as_the_peer, b.outcome, "{run}");
        assert_eq!(a.target, b.target);
    }
    assert_eq!(peer.stops[1].stop.reason, "NaN");
    assert_eq!(peer.totals.false_stops, ours.totals.false_stops);
    assert!(report.render_text().contains("scoreboard"), "{}", report.render_text());
}

#[test]
fn an_external_stop_outside_its_run_is_an_error() {
    let mut plan = plan(&[]);
    let stop =
        format!(r#"{{"job": "default/late", "time": "{}", "rule": "peer", "metric": "loss"}}"#, at(5000));
    external::read_stops(&stop, "peer.jsonl", &mut plan.external).unwrap();
    let report = backtest(&plan, &[("late", late_improver())]);
    assert_eq!(report.stop_errors.len(), 1);
    assert!(
        report.stop_errors[0].starts_with("peer.jsonl:1: the stop of default/late at"),
        "{:?}",
        report.stop_errors
    );
    assert_eq!(report.candidates[0].policies[1].totals.stopped, 0);
}

#[test]
fn runs_are_selected_by_label() {
    let mut plan = plan(&[]);
    plan.runs = Some(select::RunSelector::parse("trainwarden.dev/corpus-split=heldout").unwrap());
    let report = backtest_texts(
        &plan,
        &[
            ("late", labelled("late", &late_improver(), r#""trainwarden.dev/corpus-split":"heldout""#)),
            ("nan", labelled("nan", &nan_run(), r#""trainwarden.dev/corpus-split":"tune""#)),
        ],
    );
    assert_eq!(report.runs.len(), 1);
    assert_eq!(report.runs[0].name, "late");
    assert_eq!(report.excluded, ["default/nan"]);
    assert_eq!(report.candidates[0].policies[0].totals.runs_seen, 1);
    assert!(report.render_text().contains("runs: trainwarden.dev/corpus-split=heldout (1 run left out)"));
}

#[test]
fn outcome_labels_give_precision_recall_and_the_healthy_runs_stopped() {
    // The late improver is healthy (stopped falsely), the NaN run non-finite (caught), a third run a
    // plateau that the policy never stops (missed: the plateau is shorter than 2 h).
    let mut short_plateau: Vec<f64> = (0..12).map(|i| 2.0 - i as f64 * 0.05).collect();
    short_plateau.extend((0..6).map(|i| if i % 2 == 0 { 1.45 } else { 1.4504 }));
    let label = |o: &str| format!(r#""trainwarden.dev/outcome":"{o}""#);
    let report = backtest_texts(
        &plan(&[]),
        &[
            ("late", labelled("late", &late_improver(), &label("healthy"))),
            ("nan", labelled("nan", &nan_run(), &label("non-finite"))),
            ("flat", labelled("flat", &short_plateau, &label("plateau"))),
        ],
    );
    assert_eq!(report.outcomes.get("healthy"), Some(&1));
    let t = &report.candidates[0].policies[0].totals;
    assert_eq!((t.labelled_stops, t.healthy_stopped, t.caught, t.bad_runs_seen), (2, 1, 1, 2));
    assert_eq!(t.precision, Some(0.5));
    assert_eq!(t.recall, Some(0.5));
    assert_eq!(
        t.by_outcome["plateau"],
        report::OutcomeTally { runs: 1, stopped: 0, caught: 0, false_stops: 0 }
    );
    assert_eq!(t.by_outcome["non-finite"].caught, 1);
    let text = report.render_text();
    assert!(
        text.contains(
            "bad runs caught 1 of 2 (recall 50 %: plateau 0 of 1, non-finite 1 of 1), precision 50 %"
        ),
        "{text}"
    );
    assert!(text.contains("healthy run stopped: late by loss-plateau at"), "{text}");
    assert!(text.contains("| default/p | 2 | 1 | 1 | 1 of 2 (50 %) | 50 % |"), "{text}");
}

#[test]
fn policies_together_stop_each_run_at_the_earliest_of_their_stops() {
    let nan_only = POLICY.replace("name: p,", "name: q,").replace(
        "    - name: loss-plateau\n      uses: plateau\n      with: {metric: loss, window: 2h, minDelta: 0.001}\n      actions: [{suspend: {}}]\n",
        "",
    );
    let files = [
        PolicyFile { source: "p.yaml".into(), text: POLICY.into() },
        PolicyFile { source: "q.yaml".into(), text: nan_only },
    ];
    let candidates = candidates(&files, &[], &ScriptEngine::new(Default::default())).unwrap();
    let plan = Plan { candidates, ..Default::default() };
    let report = backtest(&plan, &[("late", late_improver()), ("nan", nan_run())]);
    let c = &report.candidates[0];
    let together = c.together.as_ref().unwrap();
    assert_eq!(together.policy, "all 2 policies together");
    assert_eq!(together.totals.stopped, 2);
    assert_eq!(together.totals.runs_seen, 2);
    let rules: Vec<&str> = together.stops.iter().map(|s| s.stop.rule.as_str()).collect();
    assert_eq!(rules, ["p/loss-plateau", "p/nan-loss"], "ties go to the first policy");
    assert!(report.render_text().contains("policy all 2 policies together"));
}

#[test]
fn a_heartbeat_repeating_a_cached_value_is_not_a_point_of_the_curve() {
    // Logged at steps 10 and 20; heartbeats at steps 12..18 repeat loss and grad_norm. At step 30 the loss
    // repeats its rounded value while grad_norm changes: logged again. eval_loss stays cached throughout.
    let line = |m: i64, step: u32, loss: &str, grad: &str| {
        format!(
            r#"{{"time":"{t}","job":"default/h","trainerStatus":{{"metrics":[{{"name":"loss","value":"{loss}"}},{{"name":"grad_norm","value":"{grad}"}},{{"name":"eval_loss","value":"0.9"}},{{"name":"current_step","value":"{step}"}}],"lastUpdatedTime":"{t}"}}}}"#,
            t = at(m)
        )
    };
    let text = [
        line(0, 10, "1.0", "0.5"),
        line(1, 12, "1.0", "0.5"),
        line(2, 14, "1.0", "0.5"),
        line(3, 20, "0.9", "0.4"),
        line(4, 24, "0.9", "0.4"),
        line(5, 30, "0.9", "0.45"),
    ]
    .join("\n");
    let records = parse_stream(&text, "h").unwrap();
    let runs = runs_of(&records, "h");
    let times = |m: &str| runs[0].curves[m].points.iter().map(|p| p.0).collect::<Vec<_>>();
    let mins =
        |ms: &[i64]| ms.iter().map(|m| Timestamp::from_second(START + m * 60).unwrap()).collect::<Vec<_>>();
    assert_eq!(times("loss"), mins(&[0, 3, 5]));
    assert_eq!(times("grad_norm"), mins(&[0, 3, 5]));
    assert_eq!(times("eval_loss"), mins(&[0]));
    assert_eq!(runs[0].reports.len(), 6, "every report is still a report (for stalls)");
}

#[test]
fn an_overtraining_stop_by_its_training_half_is_judged_on_the_training_loss() {
    let text = POLICY.replace(
        "uses: plateau\n      with: {metric: loss, window: 2h, minDelta: 0.001}",
        "uses: overtraining\n      with: {patience_train: 12, patience_validation: 1000, delta: 0.001}",
    );
    let files = [PolicyFile { source: "p.yaml".into(), text }];
    let candidates = candidates(&files, &[], &ScriptEngine::new(Default::default())).unwrap();
    let plan = Plan { candidates, ..Default::default() };
    let records = parse_stream(&stream("late", &late_improver()), "late").unwrap();
    let result = plan.backtest(&records, "late").unwrap();
    let stop = result.verdicts[0][0][0].stop.as_ref().unwrap();
    assert_eq!(stop.target, "loss", "the training half fired: judged on the training loss, not eval_loss");
    assert!(stop.outcome.measured);
    assert!(stop.outcome.false_stop);
}

/// A sweep in one file (four trials of one Katib experiment, in lockstep): `median_stop` stops the worst, and
/// the sweep's line says the best trial ran to its end, with the GPU-hours saved of the sweep's.
#[test]
fn a_sweep_reports_whether_its_best_trial_was_stopped() {
    const SWEEP: &str = "apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: sweep, namespace: default}
spec:
  cohort: {alignBy: progress}
  rules:
    - name: worse-than-siblings
      uses: median_stop
      with: {metric: loss, minJobs: 2, startStep: 20}
      actions: [{suspend: {}}]
";
    let files = [PolicyFile { source: "sweep.yaml".into(), text: SWEEP.into() }];
    let candidates = candidates(&files, &[], &ScriptEngine::new(Default::default())).unwrap();
    let plan = Plan { candidates, ..Default::default() };
    let curve = |floor: f64| (0..10).map(|i| floor + 1.0 / (1.0 + i as f64)).collect::<Vec<f64>>();
    let mut lines: Vec<String> = [("a", 0.5), ("b", 0.4), ("c", 1.5), ("d", 0.2)]
        .iter()
        .flat_map(|(job, floor)| {
            labelled(job, &curve(*floor), r#""katib.kubeflow.org/experiment":"lr""#)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort_by(|x, y| x[..30].cmp(&y[..30])); // by time: the trials report in lockstep
    let report = backtest_texts(&plan, &[("lr.jsonl", lines.join("\n"))]);
    let sweeps = &report.candidates[0].policies[0].sweeps;
    assert_eq!(sweeps.len(), 1, "{sweeps:?}");
    let s = &sweeps[0];
    assert_eq!((s.sweep.as_str(), s.trials), ("lr", 4));
    assert_eq!(s.best_trial.as_deref(), Some("lr.jsonl: default/d"));
    assert!(!s.best_stopped);
    assert_eq!(s.stopped, 1, "the worst trial (c) only");
    assert!(s.gpu_hours_saved > 0.0 && s.gpu_hours_saved < s.gpu_hours, "{s:?}");
    assert!(report.render_text().contains("sweep lr: 1 of 4 trials stopped"), "{}", report.render_text());
}
