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
fn replay_on_several_shards_prints_what_one_prints() {
    // The whole command (threads, output merge, notifications, summary), text and JSON, the corpus merged
    // from several files; the core's tests prove the order stream by stream.
    let corpus: Vec<String> = std::fs::read_dir(repo().join("examples/corpus"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .map(|p| p.display().to_string())
        .collect();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--policy", EXAMPLE_POLICY, EXAMPLE_STREAM],
        vec![
            "--output",
            "json",
            "--policy",
            EXAMPLE_POLICY,
            "--until",
            "2026-12-01T00:00:00Z",
            EXAMPLE_STREAM,
        ],
        [
            &["--output", "json", "--policy", "policies/stall.yaml", "--policy", "policies/plateau.yaml"][..],
            &corpus.iter().map(String::as_str).collect::<Vec<_>>(),
        ]
        .concat(),
    ];
    for args in cases {
        let run = |shards: &str| {
            let mut all = vec!["replay", "--shards", shards];
            all.extend(&args);
            trainwarden(&all)
        };
        let one = run("1");
        assert!(one.status.success(), "{}", String::from_utf8_lossy(&one.stderr));
        for shards in ["2", "3"] {
            let many = run(shards);
            assert_eq!(stdout(&many), stdout(&one), "{shards} shards, {args:?}");
            assert_eq!(many.status.code(), one.status.code());
        }
    }
}

#[test]
fn a_replay_stopped_by_a_bad_line_prints_the_events_before_it_on_any_number_of_shards() {
    let dir = temp_dir("bad-line-shards");
    let mut text = std::fs::read_to_string(repo().join(EXAMPLE_STREAM)).unwrap();
    text.push_str("{not json\n");
    let stream = dir.join("stream.jsonl");
    std::fs::write(&stream, text).unwrap();
    let stream = stream.display().to_string();
    let run = |shards: &str| {
        trainwarden(&["replay", "--shards", shards, "--output", "json", "--policy", EXAMPLE_POLICY, &stream])
    };
    let one = run("1");
    assert!(!one.status.success());
    assert!(
        String::from_utf8_lossy(&one.stderr).contains("invalid stream"),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    assert!(stdout(&one).lines().count() > 3, "the events before the bad line");
    assert!(stdout(&one).lines().all(|l| !l.starts_with("{\"summary\"")), "no summary for a refused stream");
    assert_eq!(stdout(&run("3")), stdout(&one));
    std::fs::remove_dir_all(&dir).unwrap();
}

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
fn bad_queue_series_in_a_rule_test_are_named() {
    let dir = temp_dir("queue-series");
    std::fs::write(
        dir.join("p.yaml"),
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p}\nspec:\n  rules:\n    - {name: blocking, when: \"queue_pending() > 0.0\"}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("p.test.yaml"),
        "policies: [p.yaml]\ntests:\n  - name: bad\n    series: {queuePending: \"1 1.5\", queuePendingGpus: \"-8\"}\n    expectActions: []\n",
    )
    .unwrap();
    let out = trainwarden(&["test", dir.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("series.queuePending: 1.5 is not a whole number of Workloads, >= 0"), "{text}");
    assert!(text.contains("series.queuePendingGpus: -8 is not GPUs, >= 0"), "{text}");
}

#[test]
fn bad_gpu_series_in_a_rule_test_are_named() {
    let dir = temp_dir("gpu-series");
    std::fs::write(
        dir.join("p.yaml"),
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p}\nspec:\n  rules:\n    - {name: idle, uses: gpu_idle}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("p.test.yaml"),
        "policies: [p.yaml]\ntests:\n  - name: bad\n    series: {gpuUtil: \"50 120\", gpuUtil.x: \"1\", gpuPowr: \"1\", gpu_mem: \"3\"}\n    expectActions: []\n  - name: huge\n    job: {gpus: 4096}\n    series: {gpuUtil: \"0x999\"}\n    expectActions: []\n",
    )
    .unwrap();
    let out = trainwarden(&["test", dir.to_str().unwrap()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("series.gpuUtil: 120 is not a utilization from 0 to 100"), "{text}");
    assert!(text.contains("series.gpuUtil.x: GPU series are gpuUtil, gpuPower"), "{text}");
    assert!(!text.contains("series.gpuPowr"), "other names are metrics: {text}");
    assert!(!text.contains("series.gpu_mem"), "other names are metrics: {text}");
    assert!(
        text.contains(
            "series: 1000 steps × 4096 GPUs = 4096000 GPU readings; a test case holds at most 1000000"
        ),
        "{text}"
    );
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

/// The example policy with a `team` receiver (Slack URL from a Secret, a plain webhook URL).
fn policy_with_receivers(dir: &Path, webhook_url: &str) -> PathBuf {
    let policy = std::fs::read_to_string(repo().join(EXAMPLE_POLICY)).unwrap();
    let path = dir.join("policy.yaml");
    std::fs::write(
        &path,
        format!(
            "{policy}  receivers:\n    - name: team\n      slack: {{urlSecret: {{name: slack, key: url}}}}\n      webhook: {{url: \"{webhook_url}\"}}\n"
        ),
    )
    .unwrap();
    path
}

/// A minimal HTTP server on 127.0.0.1 answering 200 to every request; returns the request heads and bodies.
fn http_recorder() -> (String, std::sync::mpsc::Receiver<String>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 8192];
            // Read the head, then as many body bytes as Content-Length says.
            loop {
                let n = stream.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request).to_string();
                if let Some(head_end) = text.find("\r\n\r\n") {
                    let length = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if request.len() >= head_end + 4 + length {
                        break;
                    }
                }
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
            let _ = tx.send(String::from_utf8_lossy(&request).into_owned());
        }
    });
    (url, rx)
}

#[test]
fn replay_shows_grouped_notifications_and_notify_sends_them() {
    let dir = temp_dir("notify");
    let (url, requests) = http_recorder();
    let policy = policy_with_receivers(&dir, &format!("{url}/hook"));
    let policy = policy.to_str().unwrap();

    let out = trainwarden(&["replay", "--policy", policy, EXAMPLE_STREAM]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let section = text.split("\nNotifications (").nth(1).expect("a Notifications section");
    assert!(
        section.contains(
            "→ team of fraud/weekend-safe [slack, webhook]  [firing] loss-plateau on fraud/ft-llama-8b-fraud"
        ),
        "{section}"
    );
    assert!(section.contains("; suspended the TrainJob; 262.4"), "{section}");
    assert!(
        section.contains(
            "      To resume it: kubectl -n fraud patch trainjob ft-llama-8b-fraud --type=merge -p '{\"spec\":{\"suspend\":false}}'\n"
        ),
        "{section}"
    );
    assert!(section.contains(" GPU-hours ($1,80"), "{section}");
    assert!(requests.try_recv().is_err(), "nothing is sent without --notify");

    let json = trainwarden(&["replay", "--output", "json", "--policy", policy, EXAMPLE_STREAM]);
    let lines: Vec<serde_json::Value> =
        stdout(&json).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let first = lines.iter().find_map(|l| l.get("notification")).expect("notification lines");
    assert_eq!(first["version"], "trainwarden.dev/notification/v1");
    assert_eq!(first["alerts"][0]["rule"], "loss-plateau");
    let messages = lines.iter().filter(|l| l.get("notification").is_some()).count();

    // --notify without the Slack secret: the webhook is sent, Slack is reported as not sent, exit 1.
    let out = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args([
            "replay",
            "--notify",
            "--until",
            "2026-11-28T01:00:00+01:00",
            "--policy",
            policy,
            EXAMPLE_STREAM,
        ])
        .env("TRAINWARDEN_SECRET_FRAUD_SLACK_URL", format!("{url}/services/T0/B0/secret-path"))
        .current_dir(repo())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("notification 1: sent to team (slack)"), "{stderr}");
    assert!(stderr.contains("notification 1: sent to team (webhook)"), "{stderr}");
    let got: Vec<String> =
        (0..2).map(|_| requests.recv_timeout(std::time::Duration::from_secs(10)).unwrap()).collect();
    assert!(got.iter().any(|r| r.starts_with("POST /services/T0/B0/secret-path ")), "{got:?}");
    let hook = got.iter().find(|r| r.starts_with("POST /hook ")).expect("the webhook request");
    assert!(hook.contains("\"version\":\"trainwarden.dev/notification/v1\""), "{hook}");
    assert!(messages >= 1);

    let out = trainwarden(&[
        "replay",
        "--notify",
        "--until",
        "2026-11-28T01:00:00+01:00",
        "--policy",
        policy,
        EXAMPLE_STREAM,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("NOT sent to team (slack): secret fraud/slack[url] not found: environment variable TRAINWARDEN_SECRET_FRAUD_SLACK_URL is not set"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
