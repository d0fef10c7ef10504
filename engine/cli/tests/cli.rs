//! The `trainwarden` binary end to end: replay of the shipped example, validation errors, and `test` reporting
//! a failing expectation with a diff and a non-zero exit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn trainwarden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainwarden")).args(args).current_dir(repo()).output().expect("runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trainwarden-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const EXAMPLE_POLICY: &str = "examples/friday-night-stall/policy.yaml";
const EXAMPLE_STREAM: &str = "examples/friday-night-stall/stream.jsonl";

#[test]
fn replay_tells_the_friday_night_story() {
    let out = trainwarden(&["replay", "--policy", EXAMPLE_POLICY, EXAMPLE_STREAM]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("FIRING"), "{text}");
    assert!(text.contains("will suspend the TrainJob"), "{text}");
    assert!(text.contains("\nSummary\n"), "{text}");
    assert!(text.contains("  saved "), "an enforced suspension saves GPU-hours: {text}");
}

#[test]
fn replay_json_prints_one_object_per_event_and_a_summary() {
    let out = trainwarden(&["replay", "--output", "json", "--policy", EXAMPLE_POLICY, EXAMPLE_STREAM]);
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> =
        stdout(&out).lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
    let (summary, events) = lines.split_last().expect("at least the summary");
    assert!(summary["summary"]["saved"]["gpuHours"].as_f64().unwrap() > 0.0, "{summary}");
    assert!(!events.is_empty());
    for e in events {
        for key in ["time", "job", "rule", "state", "action", "mode", "reason"] {
            assert!(e.get(key).is_some(), "{key} missing in {e}");
        }
    }
    let suspend = events.iter().find(|e| e["action"] == "suspend").expect("a suspend intent");
    assert_eq!(suspend["mode"], "Enforce");
    assert!(suspend["savings"]["gpuHours"].as_f64().unwrap() > 0.0);
}

#[test]
fn invalid_policies_are_reported_with_field_paths() {
    let dir = temp_dir("validate");
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: bad}\nspec:\n  timezone: Nowhere/City\n  rules:\n    - {name: r, uses: plateau, with: {metric: loss, window: -3}}\n    - {name: s, when: 'metric(\"loss\") >'}\n",
    )
    .unwrap();
    let out = trainwarden(&["validate", file.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("spec.timezone: unknown time zone"), "{text}");
    assert!(text.contains("spec.rules[0].with.window"), "{text}");
    assert!(text.contains("spec.rules[1].when: line 1:"), "{text}");
    // The replay refuses it too, without running anything.
    let out = trainwarden(&["replay", "--policy", file.to_str().unwrap(), EXAMPLE_STREAM]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid policy"));
}

#[test]
fn a_failing_expectation_is_shown_with_a_diff() {
    let dir = temp_dir("test");
    std::fs::write(
        dir.join("p.yaml"),
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p}\nspec:\n  mode: Enforce\n  rules:\n    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("p.test.yaml"),
        "policies: [p.yaml]\ntests:\n  - name: wrong on purpose\n    series: {loss: \"0.5 0.5 2.0\"}\n    expect: [{at: 1m, rule: high, state: firing}]\n    expectActions: [{at: 1m, rule: high, action: suspend}]\n",
    )
    .unwrap();
    let out = trainwarden(&["test", dir.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("expected state firing, got inactive"), "{text}");
    assert!(text.contains("actions differ"), "{text}");
    assert!(
        text.contains("{at: 2m, rule: high, action: suspend, mode: Enforce, job: default/job}"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("0 passed, 1 failed"), "{text}");
}

#[test]
fn a_rule_that_cannot_be_evaluated_fails_its_test() {
    let dir = temp_dir("rule-error");
    std::fs::write(
        dir.join("p.yaml"),
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p}\nspec:\n  rules:\n    - {name: deadline, when: 'eta_after(annotation(\"trainwarden.dev/deadline\"))'}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("p.test.yaml"),
        "policies: [p.yaml]\ntests:\n  - name: never fires, but only because it errors\n    series: {loss: \"1 1 1\"}\n    expectActions: []\n",
    )
    .unwrap();
    let out = trainwarden(&["test", dir.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("rule deadline on default/job could not be evaluated"), "{text}");
}

#[test]
fn bad_stream_lines_name_file_and_line() {
    let dir = temp_dir("stream");
    let file = dir.join("s.jsonl");
    std::fs::write(&file, "{\"time\":\"2026-11-27T17:00:00Z\",\"job\":\"a/b\"}\n{\"time\": oops}\n").unwrap();
    let out = trainwarden(&["replay", "--policy", EXAMPLE_POLICY, file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("s.jsonl:2:10: invalid JSON"), "{err}");
}
