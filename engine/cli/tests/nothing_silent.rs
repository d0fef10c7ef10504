//! Issue 43, end to end through the binary: nothing a user cannot see. Rules that could never fire, admin
//! policies offline, reports dropped, duplicates across files, misleading errors, `--until`, empty test
//! files, live stdin — each case as a user would meet it, with the words the binary prints.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use trainwarden_testkit::fixtures::policy;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainwarden")).args(args).current_dir(dir).output().expect("runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trainwarden-silent-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn report(time: &str, stamp: &str, progress: u32, loss: f64) -> String {
    format!(
        r#"{{"time":"{time}","job":"ml/a","trainerStatus":{{"progressPercentage":{progress},"lastUpdatedTime":"{stamp}","metrics":[{{"name":"loss","value":"{loss}"}}]}}}}"#
    )
}

#[test]
fn metric_names_no_report_carries_are_refused_and_custom_ones_declared() {
    let dir = temp_dir("metrics");
    let notify = "actions: [{notify: {to: x}}]";
    std::fs::write(
        dir.join("typos.yaml"),
        policy("typos").rules(&format!(
                "    - {{name: a, uses: plateau, with: {{metric: lsos, window: 2h}}, {notify}}}\n    - {{name: b, when: 'metric(\"lsos\") > 1.0', {notify}}}\n    - {{name: c, uses: plateau, with: {{metric: \"*\", window: 2h}}, {notify}}}\n    - {{name: d, when: 'metric(\"lr\") > 0.1', {notify}}}\n"
            )).yaml(),
    )
    .unwrap();
    let out = run_in(&dir, &["validate", "typos.yaml"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    for want in [
        "typos.yaml:9:47: spec.rules[2].with.metric: \"*\" (every metric) is only understood by non_finite",
        "typos.yaml:10:23: spec.rules[3].when: line 1:8: metric(\"lr\"): reports carry \"lr\" as \"learning_rate\"",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
    // A near miss of a known name: a warning with a did-you-mean (a reporter may send such a name as it is),
    // refused with --strict.
    std::fs::write(
        dir.join("near.yaml"),
        policy("near").rules(&format!(
                "    - {{name: a, uses: plateau, with: {{metric: lsos, window: 2h}}, {notify}}}\n    - {{name: b, when: 'metric(\"lsos\") > 1.0', {notify}}}\n"
            )).yaml(),
    )
    .unwrap();
    let out = run_in(&dir, &["validate", "near.yaml"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    for want in [
        "near.yaml:7:47: spec.rules[0].with.metric: \"lsos\" is neither a canonical metric name nor declared; did you mean \"loss\"?",
        "near.yaml:8:23: spec.rules[1].when: line 1:8: metric(\"lsos\"): \"lsos\" is neither a canonical metric name nor declared; did you mean \"loss\"?",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
    assert_eq!(run_in(&dir, &["validate", "--strict", "near.yaml"]).status.code(), Some(1));
    // A custom name: a warning (exit 0) until declared; --strict refuses it.
    std::fs::write(
        dir.join("custom.yaml"),
        policy("custom")
            .rules(&format!("    - {{name: a, when: 'metric(\"perplexity\") > 50.0', {notify}}}\n"))
            .yaml(),
    )
    .unwrap();
    let out = run_in(&dir, &["validate", "custom.yaml"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(0), "{t}");
    assert!(t.contains("ProgressPolicy ml/custom is valid (1 rule), 1 warning:"), "{t}");
    assert!(t.contains("\"perplexity\" is not a canonical metric name"), "{t}");
    let out = run_in(&dir, &["validate", "--strict", "custom.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("is refused (--strict)"));
    std::fs::write(
        dir.join("custom.yaml"),
        policy("custom")
            .spec("metrics: [perplexity]")
            .rules(&format!("    - {{name: a, when: 'metric(\"perplexity\") > 50.0', {notify}}}\n"))
            .yaml(),
    )
    .unwrap();
    let out = run_in(&dir, &["validate", "--strict", "custom.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Replay names the watched metric no record reported.
    std::fs::write(
        dir.join("s.jsonl"),
        report("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", 1, 2.0) + "\n",
    )
    .unwrap();
    let out = run_in(&dir, &["replay", "--policy", "custom.yaml", "s.jsonl"]);
    assert!(
        text(&out).contains(
            "  unreported   rule a of ProgressPolicy ml/custom watches perplexity: no record reported it, so the rule could not fire on it"
        ),
        "{}",
        text(&out)
    );
}

#[test]
fn comparisons_of_different_types_are_refused_and_fail_when_only_the_data_shows_them() {
    let dir = temp_dir("types");
    let rules = "    - {name: a, when: 'metric(\"loss\") > \"abc\"', actions: [{suspend: {}}]}\n    - {name: b, when: 'labels.team == 1', actions: [{suspend: {}}]}\n    - {name: c, when: 'metric(\"loss\") == \"NaN\"', actions: [{suspend: {}}]}\n";
    std::fs::write(dir.join("p.yaml"), policy("p").rules(rules).yaml()).unwrap();
    let out = run_in(&dir, &["validate", "p.yaml"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("p.yaml: ml/p: 3 errors"), "{t}");
    assert_eq!(t.matches("which is always false").count(), 3, "{t}");
    // Only the data shows it: each evaluation is a counted rule error, and replay exits 1.
    let rules = "    - {name: a, when: 'let t = if progress() > 0.0 { \"abc\" } else { 1.0 }; metric(\"loss\") > t', actions: [{suspend: {}}]}\n";
    std::fs::write(dir.join("q.yaml"), policy("q").rules(rules).yaml()).unwrap();
    std::fs::write(
        dir.join("s.jsonl"),
        report("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", 1, 2.0) + "\n",
    )
    .unwrap();
    let out = run_in(&dir, &["replay", "--policy", "q.yaml", "s.jsonl"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("ERROR     ") && t.contains("`>` compares a number with a string"), "{t}");
    assert!(t.contains("1 rule evaluation failed"), "{t}");
}

#[test]
fn admin_policies_select_offline_with_namespace_labels_and_say_why_not_without() {
    let repo = repo();
    let args =
        ["replay", "--policy", "policies/reclaim-hung.yaml", "examples/friday-night-stall/stream.jsonl"];
    let out = run_in(&repo, &args);
    let t = text(&out);
    assert!(
        t.contains("  selection    ClusterProgressPolicy reclaim-hung selected 0 of 2 jobs: 2 in a namespace whose labels are unknown (give them with --namespace-labels FILE, or record them)"),
        "{t}"
    );
    assert!(!t.contains("FIRING"), "{t}");
    let dir = temp_dir("namespaces");
    let labels = dir.join("ns.yaml");
    std::fs::write(&labels, "fraud: {trainwarden.dev/reclaim: \"true\"}\nother: {}\n").unwrap();
    let mut with = args.to_vec();
    with.extend(["--namespace-labels", labels.to_str().unwrap()]);
    let t = text(&run_in(&repo, &with));
    assert!(t.contains("fraud/ft-llama-8b-fraud  silent           FIRING"), "{t}");
    assert!(t.contains("selected 1 of 2 jobs: 1 in a namespace whose labels are unknown"), "{t}");
    // Or the stream carries them, as a recorder writes them.
    let stream = dir.join("s.jsonl");
    std::fs::write(
        &stream,
        concat!(
            r#"{"time":"2026-01-01T00:00:00Z","job":"team-a/j","phase":"Running","namespaceLabels":{"trainwarden.dev/reclaim":"true"}}"#,
            "\n",
            r#"{"time":"2026-01-01T00:00:00Z","job":"team-a/j","trainerStatus":{"progressPercentage":1,"lastUpdatedTime":"2026-01-01T00:00:00Z"}}"#,
            "\n",
            r#"{"time":"2026-01-01T01:00:00Z","job":"team-a/j"}"#,
            "\n"
        ),
    )
    .unwrap();
    let t =
        text(&run_in(&repo, &["replay", "--policy", "policies/reclaim-hung.yaml", stream.to_str().unwrap()]));
    assert!(t.contains("team-a/j  silent           FIRING"), "{t}");
}

#[test]
fn a_report_from_the_future_does_not_silence_the_job() {
    let dir = temp_dir("future");
    let rules = "    - {name: half, when: 'progress() > 50.0', actions: [{notify: {to: x}}]}\n    - {name: stall, uses: stalled, with: {after: 30m}, actions: [{notify: {to: x}}]}\n";
    std::fs::write(dir.join("p.yaml"), policy("p").rules(rules).yaml()).unwrap();
    let stream = [
        report("2026-01-01T00:01:00Z", "2026-01-01T00:01:00Z", 10, 2.0),
        report("2026-01-01T00:02:00Z", "2030-01-01T00:02:00Z", 20, 1.9),
        report("2026-01-01T00:03:00Z", "2026-01-01T00:03:00Z", 60, 1.8),
        r#"{"time":"2026-01-01T01:03:00Z","job":"ml/a"}"#.to_string(),
    ];
    std::fs::write(dir.join("s.jsonl"), stream.join("\n") + "\n").unwrap();
    let t = text(&run_in(&dir, &["replay", "--policy", "p.yaml", "s.jsonl"]));
    assert!(t.contains("00:03:00 +00:00  ml/a  half             FIRING"), "{t}");
    assert!(t.contains("00:33:00 +00:00  ml/a  stall            FIRING"), "{t}");
    assert!(t.contains("  reports      ml/a: 1 report stamped more than 5m after its line's time"), "{t}");
}

#[test]
fn duplicates_across_files_and_exceptions_to_nothing_are_refused_naming_both_files() {
    let dir = temp_dir("duplicates");
    let rules = "    - {name: r, when: 'progress() > 50.0', actions: [{suspend: {}}]}\n";
    std::fs::write(dir.join("a.yaml"), policy("p").rules(rules).yaml()).unwrap();
    std::fs::write(dir.join("b.yaml"), policy("p").rules(rules).yaml()).unwrap();
    let out = run_in(&dir, &["validate", "a.yaml", "b.yaml"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert_eq!(
        t.matches("ProgressPolicy ml/p is defined twice: in a.yaml:3 and in b.yaml:3").count(),
        2,
        "both files say so:\n{t}"
    );
    std::fs::write(
        dir.join("s.jsonl"),
        report("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", 1, 2.0) + "\n",
    )
    .unwrap();
    let out = run_in(&dir, &["replay", "--policy", "a.yaml", "--policy", "b.yaml", "s.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("ProgressPolicy ml/p is defined twice: in a.yaml:3 and in b.yaml:3"),
        "{}",
        text(&out)
    );
    // Exceptions: a rule that does not exist is an error; a policy not among the files a warning.
    let exception = |policy: &str, rule: &str| {
        format!(
            "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicyException\nmetadata: {{name: e, namespace: ml}}\nspec:\n  exceptions:\n    - policyName: {policy}\n      ruleNames: [{rule}]\n  expires: \"2026-12-04T18:00:00Z\"\n"
        )
    };
    std::fs::write(dir.join("e.yaml"), exception("ml/p", "nope")).unwrap();
    let out = run_in(&dir, &["validate", "a.yaml", "e.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("spec.exceptions[0].ruleNames[0]: ProgressPolicy ml/p has no rule \"nope\""));
    std::fs::write(dir.join("e.yaml"), exception("ml/elsewhere", "r")).unwrap();
    let out = run_in(&dir, &["validate", "a.yaml", "e.yaml"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out).contains("e.yaml:6:19: spec.exceptions[0].policyName: ProgressPolicy ml/elsewhere is not among the policies given"),
        "{}",
        text(&out)
    );
    assert_eq!(run_in(&dir, &["validate", "--strict", "a.yaml", "e.yaml"]).status.code(), Some(1));
}

#[test]
fn validate_passes_the_projects_examples_whatever_the_order() {
    let repo = repo();
    // The shipped catalog and examples carry no warning either (`metric: auto` is a keyword, not a name).
    let strict = run_in(&repo, &["validate", "--strict", "policies/", "examples/"]);
    assert_eq!(strict.status.code(), Some(0), "{}", text(&strict));
    let out = run_in(&repo, &["validate", "examples/"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Kubeflow manifests beside the policies (examples/checkpoint/) are said to be skipped, not called
    // invalid policies; named on the command line, such a file is checked, and is no policy.
    assert!(
        text(&out).contains(
            "examples/checkpoint/trainingruntime.yaml: skipped: it holds TrainingRuntime (trainer.kubeflow.org/v1alpha1), no trainwarden object"
        ),
        "{}",
        text(&out)
    );
    let out = run_in(&repo, &["validate", "examples/checkpoint/trainingruntime.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out)
            .contains("kind: expected ProgressPolicy or ClusterProgressPolicy, got \"TrainingRuntime\"")
    );
    let out = run_in(&repo, &["validate", "examples/checkpoint/"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("error: no trainwarden object in examples/checkpoint/"), "{}", text(&out));
    let verdicts = |args: &[&str]| {
        let out = run_in(&repo, args);
        let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
        lines.sort();
        (out.status.code(), lines)
    };
    let one = verdicts(&["validate", "policies", "examples"]);
    let other = verdicts(&["validate", "examples", "policies"]);
    assert_eq!(one.0, Some(0), "{:?}", one.1);
    assert_eq!(one, other);
}

#[test]
fn until_empty_tests_duplicate_keys_and_namespaceless_lines() {
    let dir = temp_dir("inputs");
    let rules = "    - {name: r, when: 'progress() > 50.0', actions: [{notify: {to: x}}]}\n";
    std::fs::write(dir.join("p.yaml"), policy("p").rules(rules).yaml()).unwrap();
    let stream = [
        report("2026-01-01T00:01:00Z", "2026-01-01T00:01:00Z", 10, 2.0),
        report("2026-01-01T01:00:00Z", "2026-01-01T01:00:00Z", 60, 1.0),
    ];
    std::fs::write(dir.join("s.jsonl"), stream.join("\n") + "\n").unwrap();
    let out = run_in(&dir, &["replay", "--policy", "p.yaml", "--until", "2026-01-01T00:30:00Z", "s.jsonl"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(!t.contains("FIRING"), "the report after --until is not replayed:\n{t}");
    assert!(t.contains("→ Thu 2026-01-01 00:30:00 +00:00"), "{t}");
    assert!(t.contains("note: replayed up to --until 2026-01-01T00:30:00Z"), "{t}");
    // tests: [] checks nothing, so it fails.
    std::fs::write(dir.join("empty.test.yaml"), "policies: [p.yaml]\ntests: []\n").unwrap();
    let out = run_in(&dir, &["test", "empty.test.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("FAIL empty.test.yaml: tests: no test case"), "{}", text(&out));
    // A key twice, a TrainJob without its namespace: refused with file, line and path.
    std::fs::write(
        dir.join("bad.jsonl"),
        concat!(
            r#"{"time":"2026-01-01T00:00:00Z","job":"ml/a","labels":{"team":"a","team":"b"}}"#,
            "\n",
            r#"{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"b","creationTimestamp":"2026-01-01T00:00:00Z"}}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = run_in(&dir, &["replay", "--policy", "p.yaml", "bad.jsonl"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("bad.jsonl:1: labels.team: the key is given twice in one object"), "{t}");
    assert!(t.contains("bad.jsonl:2: metadata.namespace: required"), "{t}");
    // A stream that opens with a byte-order mark is read, as a policy with one is.
    std::fs::write(dir.join("bom.jsonl"), format!("\u{feff}{}\n", stream[0])).unwrap();
    let out = run_in(&dir, &["replay", "--policy", "p.yaml", "bom.jsonl"]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn errors_that_used_to_mislead() {
    let dir = temp_dir("errors");
    let limits = |v: &str| {
        policy("p")
            .spec(&format!("limits: {{maxActionsPerHour: {v}}}"))
            .rule("{name: r, when: 'progress() > 50.0', actions: [{suspend: {}}]}")
            .yaml()
    };
    for (value, want) in [
        ("-1", "spec.limits.maxActionsPerHour: Invalid value: -1: must be greater than or equal to 1"),
        ("1e400", "the number 1e400 is too large to represent"),
    ] {
        std::fs::write(dir.join("p.yaml"), limits(value)).unwrap();
        let t = text(&run_in(&dir, &["validate", "p.yaml"]));
        assert!(t.contains(want), "{value}: {t}");
    }
    // A file that is not UTF-8, one that does not exist: each named, and the rest still validated.
    std::fs::write(dir.join("latin1.yaml"), b"# caf\xe9\nkind: ProgressPolicy\n").unwrap();
    std::fs::write(dir.join("utf16.yaml"), b"\xff\xfek\x00i\x00").unwrap();
    std::fs::write(dir.join("good.yaml"), limits("5")).unwrap();
    let out = run_in(&dir, &["validate", "latin1.yaml", "missing.yaml", "utf16.yaml", "good.yaml"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("latin1.yaml:1:6: not UTF-8 (byte 0xe9"), "{t}");
    assert!(t.contains("missing.yaml: no such file or directory"), "{t}");
    assert!(t.contains("utf16.yaml:1:1: UTF-16 text"), "{t}");
    assert!(t.contains("good.yaml: ProgressPolicy ml/p is valid (1 rule)"), "{t}");
    // The evaluation-round limit says where the times are.
    std::fs::write(
        dir.join("epoch.jsonl"),
        concat!(
            r#"{"time":"1970-01-01T00:00:00Z","job":"ml/a","phase":"Running"}"#,
            "\n",
            r#"{"time":"2026-01-01T00:00:00Z","job":"ml/a","phase":"Running"}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = run_in(&dir, &["replay", "--policy", "good.yaml", "--max-lateness", "0s", "epoch.jsonl"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(2), "{t}");
    assert!(t.contains("error: epoch.jsonl:2: replaying from epoch.jsonl:1 (1970-01-01T00:00:00Z)"), "{t}");
    assert!(t.contains("is at the Unix epoch"), "{t}");
}

#[test]
fn money_is_unknown_without_a_price_and_spans_are_not_misread() {
    let repo = repo();
    let dir = temp_dir("money");
    let labels = dir.join("ns.yaml");
    std::fs::write(&labels, "fraud: {trainwarden.dev/reclaim: \"true\"}\n").unwrap();
    let t = text(&run_in(
        &repo,
        &[
            "replay",
            "--policy",
            "policies/reclaim-hung.yaml",
            "--namespace-labels",
            labels.to_str().unwrap(),
            "examples/friday-night-stall/stream.jsonl",
        ],
    ));
    assert!(t.contains("  would save   241.9 GPU-hours, cost unknown (no gpuHourCost) across 1 job"), "{t}");
    assert!(!t.contains("$0.00"), "{t}");
    let t = text(&run_in(
        &repo,
        &[
            "replay",
            "--policy",
            "examples/friday-night-stall/policy.yaml",
            "examples/friday-night-stall/stream.jsonl",
        ],
    ));
    assert!(t.contains("114 samples / 2h0m46s"), "{t}");
}

#[test]
fn a_live_stdin_prints_each_event_as_it_happens_and_dev_zero_ends() {
    let dir = temp_dir("live");
    let rules = "    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n";
    std::fs::write(dir.join("p.yaml"), policy("p").rules(rules).yaml()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args(["replay", "--policy", "p.yaml", "-"])
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{}", report("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", 1, 9.0)).unwrap();
    stdin.flush().unwrap();
    // The event comes while stdin stays open (before: only at the end of input).
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).expect("the event before the end of input");
    assert!(line.contains("ml/a  high             FIRING"), "{line}");
    drop(stdin);
    assert!(child.wait().unwrap().success());

    let started = Instant::now();
    let zero = std::fs::File::open("/dev/zero").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args(["replay", "--policy", "p.yaml", "-"])
        .current_dir(&dir)
        .stdin(Stdio::from(zero))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("stdin:1: no line end in the first 67108864 bytes"), "{}", text(&out));
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_failed_backtest_leaves_the_html_report_as_it_was() {
    let dir = temp_dir("html");
    let report_file = dir.join("report.html");
    std::fs::write(&report_file, "the last good report").unwrap();
    // A corpus with no complete run: the backtest fails after the report file was checked.
    std::fs::write(
        dir.join("running.jsonl"),
        report("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", 1, 2.0) + "\n",
    )
    .unwrap();
    let policy_file = repo().join("policies/plateau.yaml");
    let out = run_in(
        &dir,
        &[
            "backtest",
            policy_file.to_str().unwrap(),
            "running.jsonl",
            "--html",
            report_file.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&report_file).unwrap(), "the last good report");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "no temporary file left: {left:?}");
}

#[test]
fn the_controller_says_the_api_server_did_not_answer() {
    let dir = temp_dir("controller");
    let kubeconfig = dir.join("kubeconfig");
    // Port 9 (discard) on loopback: nothing listens, the connection is refused.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:9\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args(["controller", "--kubeconfig", kubeconfig.to_str().unwrap(), "--log-format", "text"])
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("no answer from the API server at https://127.0.0.1:9/"), "{t}");
    assert!(!t.contains("is not installed"), "{t}");
}

#[test]
fn backtest_says_which_runs_a_policy_did_not_select_and_which_metrics_no_run_reported() {
    let repo = repo();
    let out = run_in(&repo, &["backtest", "policies/reclaim-hung.yaml", "examples/corpus/"]);
    let t = text(&out);
    assert!(
        t.contains("  not selected 150 runs: 150 in a namespace whose labels are unknown (give them with --namespace-labels FILE, or record them)"),
        "{t}"
    );
    let dir = temp_dir("backtest");
    let labels = dir.join("ns.yaml");
    std::fs::write(&labels, "default: {trainwarden.dev/reclaim: \"true\"}\n").unwrap();
    let t = text(&run_in(
        &repo,
        &[
            "backtest",
            "policies/reclaim-hung.yaml",
            "examples/corpus/",
            "--namespace-labels",
            labels.to_str().unwrap(),
        ],
    ));
    assert!(t.contains("  runs seen 150,"), "{t}");
    assert!(!t.contains("not selected"), "{t}");
    std::fs::write(
        dir.join("bleu.yaml"),
        policy("bleu")
            .namespace("default")
            .spec("metrics: [eval_exact_match]")
            .rule("{name: r, uses: plateau, with: {metric: eval_exact_match, window: 2h}, actions: [{suspend: {}}]}")
            .yaml(),
    )
    .unwrap();
    let t = text(&run_in(&repo, &["backtest", dir.join("bleu.yaml").to_str().unwrap(), "examples/corpus/"]));
    assert!(
        t.contains(
            "  rule r watches eval_exact_match: no run reported it, so that rule could not fire on it"
        ),
        "{t}"
    );
}

#[test]
fn a_test_cases_exception_to_a_policy_it_does_not_test_fails_the_case() {
    let dir = temp_dir("test-exception");
    let rules = "    - {name: r, when: 'progress() > 50.0', actions: [{suspend: {}}]}\n";
    std::fs::write(dir.join("p.yaml"), policy("p").rules(rules).yaml()).unwrap();
    std::fs::write(
        dir.join("p.test.yaml"),
        "policies: [p.yaml]\ntests:\n  - name: held\n    job: {namespace: ml, name: a}\n    exceptions:\n      - {policyName: ml/q, ruleNames: [r], expires: 1h}\n    series: {progress: \"10+10x8\"}\n    expectActions: []\n",
    )
    .unwrap();
    let out = run_in(&dir, &["test", "p.test.yaml"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("exceptions[0]: spec.exceptions[0].policyName: ProgressPolicy ml/q is not among the policies given"), "{t}");
}

/// Issue 43: the backtest's HTML report printed lead times as `4.3 h` where its text said `4h16m59s`, and
/// both rounded a small GPU-hour saving to 0: one formatter of spans and one of GPU-hours for both.
#[test]
fn the_backtest_report_and_its_html_print_spans_and_hours_alike() {
    let repo = repo();
    let dir = temp_dir("backtest-html");
    let page = dir.join("report.html");
    let out = run_in(
        &repo,
        &["backtest", "policies/plateau.yaml", "examples/corpus/", "--html", page.to_str().unwrap()],
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let lead = t
        .lines()
        .find_map(|l| l.split_once("median lead time ").map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| panic!("a median lead time in\n{t}"));
    assert!(lead.ends_with('s') && lead.contains('m') && !lead.contains('.'), "a span to the second: {lead}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(&format!("<th>median lead time</th><td>{lead}</td>")), "{lead} in the HTML too");
    assert!(!html.contains(" h before the stop"), "spans, not decimal hours");
    // A saving under a tenth of a GPU-hour keeps two significant digits (it used to round to 0).
    assert!(t.lines().any(|l| l.contains(": 0.0") && l.contains(" GPU-h saved")), "{t}");
}
