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
    v.extend(std::iter::repeat_n(1.15, 18));
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
    Plan { candidates, config: EngineConfig::default(), options: Options::default() }
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
    assert!((late.outcome.best_after.unwrap() - 0.79).abs() < 1e-9);
    // The run ends at minute 540: 250 minutes on 4 GPUs at $2.
    assert!((late.outcome.gpu_hours_saved - 4.0 * 250.0 / 60.0).abs() < 1e-9);
    assert!((p.totals.lost_gpu_hours - 4.0 * 250.0 / 60.0).abs() < 1e-9);
    let worst = p.totals.worst_regret.as_ref().unwrap();
    assert_eq!((worst.run_name.as_str(), worst.rule.as_str()), ("late", "loss-plateau"));
    assert!((worst.relative.unwrap() - 0.36 / 1.15).abs() < 1e-9);

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
    assert!(text.contains("FALSE STOP: loss improved 31.3 % afterwards"), "{text}");
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
    let plan = Plan { candidates, config: EngineConfig::default(), options: Options::default() };
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
    let plan = Plan { candidates, config: EngineConfig::default(), options: Options::default() };
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
    let plan = Plan { candidates, config: EngineConfig::default(), options: Options::default() };
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
