//! The replay's summary: counts, money, reports out of order or from the future, what a policy did not
//! select and which watched metrics no record reported.

use super::render::savings_total_text;
use super::*;
use crate::describe::words;

#[test]
fn the_summary_counts_in_the_singular_and_the_plural() {
    let one = SavingsTotal { jobs: 1, gpu_hours: 8.0, dollars: None, unpriced_jobs: 1 };
    let summary =
        Summary { records: 1, jobs: 1, firings: 1, rule_errors: 0, saved: one, ..Summary::default() };
    let text = render_text(&[], &summary, &jiff::tz::TimeZone::UTC);
    assert!(
        text.contains("  input        1 record, 1 job, 0 ignored after an enforced suspension\n"),
        "{text}"
    );
    assert!(text.contains("  rules        1 firing, 0 evaluation errors\n"), "{text}");
    assert!(
        text.contains("  saved        8 GPU-hours, cost unknown (no gpuHourCost) across 1 job\n"),
        "{text}"
    );
    let s = crate::evaluate::Savings {
        until: Timestamp::UNIX_EPOCH,
        basis: crate::evaluate::SavingsBasis::EstimatedEnd,
        gpus: 1.0,
        gpu_hours: 2.0,
        dollars: None,
    };
    assert_eq!(words::savings(&s), "frees 1 GPU × 2h until its estimated end = 2 GPU-hours");
}

/// Issue 43: no gpuHourCost printed `$0.00` (free), a small saving `0 GPU-hours, $0.08`.
#[test]
fn the_summary_says_unknown_for_no_price_and_never_zero_hours_beside_dollars() {
    let priced = SavingsTotal { jobs: 1, gpu_hours: 262.4356, dollars: Some(1804.2356), unpriced_jobs: 0 };
    assert_eq!(savings_total_text(&priced), "262.4 GPU-hours, $1,804.24 across 1 job");
    let small = SavingsTotal { jobs: 1, gpu_hours: 0.0116, dollars: Some(0.08), unpriced_jobs: 0 };
    assert_eq!(savings_total_text(&small), "0.012 GPU-hours, $0.08 across 1 job");
    let mixed = SavingsTotal { jobs: 3, gpu_hours: 30.0, dollars: Some(100.0), unpriced_jobs: 1 };
    assert_eq!(
        savings_total_text(&mixed),
        "30 GPU-hours across 3 jobs: $100.00 for 2, cost unknown for 1 (no gpuHourCost)"
    );
}

fn replayed(policy_yaml: &str, stream: &str, labels: &[(&str, &[(&str, &str)])]) -> Replay {
    let engine = crate::judge::script::ScriptEngine::default();
    let policies: Vec<CompiledPolicy> = crate::policy::compile::parse_documents(policy_yaml, "p.yaml")
        .unwrap()
        .iter()
        .map(|d| crate::policy::compile::compile(d, &engine).unwrap())
        .collect();
    let mut replay = Replay::new(policies, EngineConfig::default());
    for (ns, l) in labels {
        replay.set_namespace_labels(ns, l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    }
    for record in crate::input::stream::parse_stream(stream, "s.jsonl").unwrap() {
        replay.feed(record);
    }
    replay.finish(None);
    replay
}

/// `half` fires past 50 %, `stall` after 30 minutes without a report.
fn stall_policy() -> String {
    crate::testing::policy("p")
        .rule("{name: half, when: 'progress() > 50.0', actions: [{notify: {to: x}}]}")
        .rule("{name: stall, uses: stalled, with: {after: 30m}, actions: [{notify: {to: x}}]}")
        .yaml()
}

fn report(minute: u32, stamp: &str, progress: u32) -> String {
    format!(
        r#"{{"time":"2026-01-01T00:{minute:02}:00Z","job":"ml/a","trainerStatus":{{"progressPercentage":{progress},"lastUpdatedTime":"{stamp}","metrics":[{{"name":"loss","value":"2.0"}}]}}}}"#
    )
}

/// Issue 43: one report stamped in 2030 made every later report look older and be dropped, so neither
/// `progress() > 50` nor `stalled` ever fired. Now it is judged at its line's time, and said.
#[test]
fn a_report_from_the_future_is_judged_at_its_time_and_said() {
    let stream = [
        report(1, "2026-01-01T00:01:00Z", 10),
        report(2, "2030-01-01T00:02:00Z", 20),
        report(3, "2026-01-01T00:03:00Z", 60),
        r#"{"time":"2026-01-01T01:03:00Z","job":"ml/a"}"#.to_string(),
    ]
    .join("\n");
    let replay = replayed(&stall_policy(), &stream, &[]);
    let fired: Vec<&str> = replay
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Transition { rule, kind: crate::evaluate::TransitionKind::Firing, .. } => {
                Some(rule.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(fired, ["half", "stall"]);
    assert_eq!(
        replay.summary.odd_reports,
        [OddReports { job: "ml/a".into(), out_of_order: 0, stamped_ahead: 1 }]
    );
    let text = render_summary(&replay.summary, &jiff::tz::TimeZone::UTC);
    assert!(
        text.contains("  reports      ml/a: 1 report stamped more than 5m after its line's time"),
        "{text}"
    );
    // Older than the report before: dropped, as the controller drops it, and counted.
    let stream = [report(1, "2026-01-01T00:01:00Z", 10), report(2, "2025-12-31T00:00:00Z", 20)].join("\n");
    let replay = replayed(&stall_policy(), &stream, &[]);
    assert_eq!(replay.summary.odd_reports[0].out_of_order, 1);
}

/// Issue 43: a ClusterProgressPolicy with a namespaceSelector selected nothing offline, with no reason.
#[test]
fn the_summary_says_which_jobs_a_policy_did_not_select_and_why() {
    let policy = crate::testing::cluster_policy("c")
        .spec("namespaceSelector: {matchLabels: {reclaim: \"true\"}}\nselector: {matchLabels: {team: a}}")
        .rule("{name: r, uses: plateau, with: {metric: eval_loss, window: 2h}, actions: [{notify: {to: x}}]}")
        .yaml();
    let stream = [
        r#"{"time":"2026-01-01T00:00:00Z","job":"yes/a","labels":{"team":"a"}}"#,
        r#"{"time":"2026-01-01T00:00:00Z","job":"yes/b","labels":{"team":"b"}}"#,
        r#"{"time":"2026-01-01T00:00:00Z","job":"no/c","labels":{"team":"a"}}"#,
        r#"{"time":"2026-01-01T00:00:00Z","job":"unknown/d","labels":{"team":"a"}}"#,
        r#"{"time":"2026-01-01T00:00:00Z","job":"rec/e","labels":{"team":"a"},"namespaceLabels":{"reclaim":"true"}}"#,
    ]
    .join("\n");
    let replay = replayed(&policy, &stream, &[("yes", &[("reclaim", "true")]), ("no", &[])]);
    let n = &replay.summary.not_selected[0];
    assert_eq!((n.policy.as_str(), n.selected), ("ClusterProgressPolicy c", 2), "{n:?}");
    let reasons: Vec<(&str, u64)> = n.reasons.iter().map(|(r, k)| (r.as_str(), *k)).collect();
    assert_eq!(
        reasons,
        [
            ("in a namespace its namespaceSelector does not match", 1),
            (
                "in a namespace whose labels are unknown (give them with --namespace-labels FILE, or record them)",
                1
            ),
            ("whose labels its selector does not match", 1),
        ]
    );
    // No record reported eval_loss: the rule could not fire.
    assert_eq!(
        replay.summary.unreported_metrics,
        [UnreportedMetric {
            policy: "ClusterProgressPolicy c".into(),
            rule: "r".into(),
            metric: "eval_loss".into()
        }]
    );
    let text = render_summary(&replay.summary, &jiff::tz::TimeZone::UTC);
    assert!(
        text.contains("  selection    ClusterProgressPolicy c selected 2 of 5 jobs: 1 in a namespace its"),
        "{text}"
    );
    assert!(
        text.contains(
            "  unreported   rule r of ClusterProgressPolicy c watches eval_loss: no record reported it"
        ),
        "{text}"
    );
}
