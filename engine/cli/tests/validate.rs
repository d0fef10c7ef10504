//! `validate` means "the API server accepts it and it runs": bad policies in a table, each with the exact
//! lines the binary prints and its exit code, plus what the other commands say about input they cannot use.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn trainwarden_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainwarden")).args(args).current_dir(dir).output().expect("runs")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trainwarden-validate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A one-rule ProgressPolicy `ml/p` with `rule` (YAML lines at the rules' indentation) and `spec` extra lines.
fn policy(spec: &str, rule: &str) -> String {
    format!(
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata:\n  name: p\n  namespace: ml\nspec:\n{spec}  rules:\n    - name: r\n{rule}"
    )
}

/// One report of job ml/a (loss 2.0), as a stream file.
const ONE_REPORT: &str = concat!(
    r#"{"time":"2026-01-01T00:00:00Z","job":"ml/a","trainerStatus":{"progressPercentage":1,"#,
    r#""lastUpdatedTime":"2026-01-01T00:00:00Z","metrics":[{"name":"loss","value":"2.0"}]}}"#,
    "\n"
);

fn when(condition: &str) -> String {
    policy("", &format!("      when: '{condition}'\n      actions: [{{suspend: {{}}}}]\n"))
}

#[test]
fn bad_policies_get_every_error_with_its_place_and_exit_1() {
    let dir = temp_dir("table");
    let long_name = "x".repeat(100_000);
    let cases: Vec<(&str, String, Vec<String>)> = vec![
        (
            "unknown-function",
            when("undefined_fn(3)"),
            vec!["  - unknown-function.yaml:9:13: spec.rules[0].when: line 1:1: unknown function undefined_fn() (`trainwarden functions` lists the functions rules can call)".into()],
        ),
        (
            "arity",
            when(r#"metric("loss",1,2) > 1"#),
            vec!["  - arity.yaml:9:13: spec.rules[0].when: line 1:1: metric() is called as metric(metric name), but is given 3 arguments".into()],
        ),
        (
            "not-boolean",
            when("1 + 1"),
            vec!["  - not-boolean.yaml:9:13: spec.rules[0].when: line 1:3: the condition must be true or false, but it ends in a number; compare it, for example `metric(\"loss\") > 2.0`".into()],
        ),
        (
            "negative-window",
            when(r#"stalled("-5m")"#),
            vec!["  - negative-window.yaml:9:13: spec.rules[0].when: line 1:9: stalled(): argument 1 (window): invalid duration \"-5m\": durations cannot be negative".into()],
        ),
        (
            "short-window",
            when(r#"stalled("20s")"#),
            vec!["  - short-window.yaml:9:13: spec.rules[0].when: line 1:9: stalled(): argument 1 (window): 20s is shorter than the sampling interval 30s: there would be no sample to judge; raise it or set spec.samplingInterval".into()],
        ),
        (
            "short-window-with",
            policy("", "      uses: stalled\n      with: {after: 20s}\n      actions: [{suspend: {}}]\n"),
            vec!["  - short-window-with.yaml:10:21: spec.rules[0].with.after: 20s is shorter than the sampling interval 30s: there would be no sample to judge; raise it or set spec.samplingInterval".into()],
        ),
        (
            "deadline",
            when(r#"eta_after("tomorrow")"#),
            vec!["  - deadline.yaml:9:13: spec.rules[0].when: line 1:11: eta_after(): argument 1 (deadline): \"tomorrow\" is not a time: expected RFC 3339 with an offset, such as 2026-12-01T09:00:00+01:00".into()],
        ),
        (
            "plateau-count",
            when(r#"plateau("loss",100000)"#),
            vec!["  - plateau-count.yaml:9:13: spec.rules[0].when: line 1:16: plateau(): argument 2 (n): plateau() judges the last 63 samples at most, got 100000; use `uses: plateau` for longer windows".into()],
        ),
        (
            "lowercase-enum",
            policy("  mode: enforce\n", "      when: 'true'\n"),
            vec!["  - lowercase-enum.yaml:7:9: spec.mode: Unsupported value: \"enforce\": supported values: \"Audit\", \"Enforce\"".into()],
        ),
        (
            "structure",
            policy(
                "  gpuHourCost: \"cheap\"\n  foo: 1\n",
                "      when: 'true'\n      for: 5\n      actions: [{explode: {}}, {scale: {}}]\n",
            ),
            vec![
                "  - structure.yaml:7:16: spec.gpuHourCost: must be a number, got the string \"cheap\"".into(),
                "  - structure.yaml:8:3: spec.foo: unknown field; expected one of activeWindows, assumeGpus, cohort, gpuHourCost, limits, metrics, mode, receivers, rules, samplingInterval, selector, snooze, timezone".into(),
                "  - structure.yaml:12:12: spec.rules[0].for: must be a string, got the integer 5".into(),
                "  - structure.yaml:13:17: spec.rules[0].actions[0]: exactly one of suspend, notify, annotate, event, scale, checkpoint must be set, found none".into(),
                "  - structure.yaml:13:18: spec.rules[0].actions[0].explode: unknown field; expected one of annotate, checkpoint, event, notify, scale, suspend".into(),
                "  - structure.yaml:13:40: spec.rules[0].actions[1].scale.numNodes: Required value".into(),
            ],
        ),
        (
            "rules-mapping",
            "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: p}\nspec:\n  rules: {name: r}\n".into(),
            vec!["  - rules-mapping.yaml:5:10: spec.rules: must be a list, got a mapping".into()],
        ),
        (
            "names",
            "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: Bad_Name, namespace: ml}\nspec:\n  rules:\n    - name: Rule_1\n      when: 'true'\n".into(),
            vec![
                "  - names.yaml:3:18: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')".into(),
                "  - names.yaml:6:13: spec.rules[0].name: Invalid value: \"Rule_1\": should match '^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$' (lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or digit)".into(),
            ],
        ),
        (
            "long-token",
            policy("", &format!("      uses: {long_name}\n")),
            vec![format!(
                "  - long-token.yaml:9:13: spec.rules[0].uses: unknown detector \"{}…(100003 bytes){}",
                "x".repeat(79),
                " known detectors: plateau, diverging, no_expected_gain, non_finite, stalled, eta_after, eta_exceeds, over_budget, loss_not_decreasing, overtraining, stalled_training, gpu_idle, hang, median_stop, percentile, successive_halving"
            )],
        ),
        (
            "yaml-syntax",
            "apiVersion: trainwarden.dev/v1alpha1\nspec: {rules: [\n".into(),
            vec!["  - yaml-syntax.yaml:2:15: (yaml): unclosed bracket '['".into()],
        ),
        ("empty", String::new(), vec!["  - empty.yaml:1:1: (file): no policy in this file: it is empty, or holds only comments and `---`".into()]),
        ("comments", "# nothing\n".into(), vec!["  - comments.yaml:1:1: (file): no policy in this file: it is empty, or holds only comments and `---`".into()]),
        ("separators", "---\n---\n".into(), vec!["  - separators.yaml:1:1: (file): no policy in this file: it is empty, or holds only comments and `---`".into()]),
    ];
    let mut mismatches = Vec::new();
    for (name, text, expected) in &cases {
        let file = format!("{name}.yaml");
        std::fs::write(dir.join(&file), text).unwrap();
        let out = trainwarden_in(&dir, &["validate", &file]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: {stdout}");
        let errors: Vec<&str> = stdout.lines().filter(|l| l.starts_with("  - ")).collect();
        if errors != *expected {
            mismatches.push(format!("{name}:\n{}", errors.join("\n")));
        }
        assert!(stdout.len() < 2_000, "{name}: the output is bounded, got {} bytes", stdout.len());
    }
    assert!(mismatches.is_empty(), "got:\n{}", mismatches.join("\n"));
}

#[test]
fn what_validate_accepts_runs_and_directories_are_searched() {
    let dir = temp_dir("accepts");
    std::fs::create_dir_all(dir.join("team/nested")).unwrap();
    std::fs::write(
        dir.join("team/missing-label.yaml"),
        when(r#"labels["nope"] == "x" || label("team") == "fraud""#),
    )
    .unwrap();
    // Another name: two files defining one policy are refused (issue 43).
    std::fs::write(
        dir.join("team/nested/two.yml"),
        policy("", "      uses: stalled\n      with: {after: 30m}\n").replace("  name: p\n", "  name: q\n"),
    )
    .unwrap();
    std::fs::write(dir.join("team/nested/ignored.test.yaml"), "not a policy").unwrap();
    let out = trainwarden_in(&dir, &["validate", "team"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        vec![
            "team/missing-label.yaml: ProgressPolicy ml/p is valid (1 rule)",
            "team/nested/two.yml: ProgressPolicy ml/q is valid (1 rule)",
        ]
    );
    // The policy with a missing label runs: a job without the label is judged, not an error.
    let stream = r#"{"time":"2026-01-01T00:00:00Z","job":"ml/a","labels":{"team":"fraud"},"trainerStatus":{"progressPercentage":1,"lastUpdatedTime":"2026-01-01T00:00:00Z","metrics":[{"name":"loss","value":"2.0"}]}}"#;
    std::fs::write(dir.join("s.jsonl"), format!("{stream}\n")).unwrap();
    let out = trainwarden_in(&dir, &["replay", "--policy", "team/missing-label.yaml", "s.jsonl"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("FIRING"), "{stdout}");
    // A link loop is not followed.
    std::os::unix::fs::symlink("..", dir.join("team/nested/loop")).unwrap();
    let out = trainwarden_in(&dir, &["validate", "team"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = trainwarden_in(&dir, &["validate", "nowhere"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "error: nowhere: no such file or directory\n");
}

#[test]
fn a_rule_that_fails_at_evaluation_makes_replay_exit_1() {
    let dir = temp_dir("rule-error");
    // The duration is computed, so only evaluation can find it invalid.
    std::fs::write(dir.join("p.yaml"), when(r#"let d = "5" + "x"; stalled(d)"#)).unwrap();
    std::fs::write(dir.join("s.jsonl"), ONE_REPORT).unwrap();
    let out = trainwarden_in(&dir, &["replay", "--policy", "p.yaml", "s.jsonl"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(r#"ERROR     rule "r", line 1:20: invalid duration "5x": unknown unit "x" (valid units: w, d, h, m, s, ms)"#),
        "{stdout}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: 1 rule evaluation failed (the RuleError lines above say where); those rules never fired\n"
    );
}

#[test]
fn a_test_case_whose_job_no_policy_selects_says_so() {
    let dir = temp_dir("unselected");
    std::fs::write(
        dir.join("p.yaml"),
        policy(
            "  selector: {matchLabels: {team: fraud}}\n",
            "      uses: stalled\n      with: {after: 30m}\n",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("p.test.yaml"),
        "policies: [p.yaml]\ntests:\n  - name: quiet\n    job: {namespace: ml, name: ft, labels: {team: ml}}\n    series: {loss: \"2.0x20\", progress: \"1+1x20\"}\n    expect: [{at: 10m, rule: r, state: inactive}]\n",
    )
    .unwrap();
    let out = trainwarden_in(&dir, &["test", "p.test.yaml"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("    job ml/ft (labels team=ml) is not selected by any policy (ml/p: namespace ml, labels team=fraud): set job.namespace and job.labels in the case, or expectSelected: false if that is the point"),
        "{stdout}"
    );
}

#[test]
fn a_closed_pipe_ends_output_quietly_and_piped_logs_have_no_colour() {
    // Reads nothing: the pipe closes at once, as `| head -0` would.
    let with_stdout_closed = |args: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
            .args(args)
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runs");
        drop(child.stdout.take());
        child.wait_with_output().unwrap()
    };
    let out = with_stdout_closed(&["crd"]);
    assert_eq!(out.status.code(), Some(0), "a listing cut short is fine");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no panic message");
    // A closed pipe is the normal end of a pipeline for every command (the book promises 0).
    let out = with_stdout_closed(&["validate", "policies"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no panic message");

    let dir = temp_dir("colour");
    std::fs::write(dir.join("p.yaml"), when("true")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args(["validate", "p.yaml"])
        .current_dir(&dir)
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    assert!(
        !out.stderr.contains(&0x1b),
        "no ANSI escape in piped stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_notify_without_receivers_is_said_to_send_nothing() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = trainwarden_in(
        &repo,
        &[
            "replay",
            "--policy",
            "examples/friday-night-stall/policy.yaml",
            "examples/friday-night-stall/stream.jsonl",
        ],
    );
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("note: ProgressPolicy fraud/weekend-safe: rule loss-plateau notifies \"team\", but the policy declares no such receiver: nothing will be sent (add spec.receivers with a Slack, email or webhook receiver named \"team\")"),
        "{stderr}"
    );
}

#[test]
fn replays_that_could_not_finish_are_refused_up_front() {
    let dir = temp_dir("bounded");
    std::fs::write(dir.join("p.yaml"), when(r#"stalled("30m")"#)).unwrap();
    std::fs::write(dir.join("s.jsonl"), ONE_REPORT).unwrap();
    let stderr = |out: &Output| String::from_utf8_lossy(&out.stderr).into_owned();
    let out = trainwarden_in(&dir, &["replay", "--eval-interval", "1ms", "--policy", "p.yaml", "s.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out), "error: --eval-interval 1ms is shorter than 1s, the shortest useful round\n");
    let args = [
        "replay",
        "--eval-interval",
        "1s",
        "--until",
        "2026-12-01T00:00:00Z",
        "--policy",
        "p.yaml",
        "s.jsonl",
    ];
    let out = trainwarden_in(&dir, &args);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: replaying from s.jsonl:1 (2026-01-01T00:00:00Z) to --until 2026-12-01T00:00:00Z every 1s is 28857600 evaluation rounds (at most 6400000): check the stream's times, or raise --eval-interval\n"
    );
    std::fs::write(
        dir.join("p.test.yaml"),
        "policies: [p.yaml]\ntests:\n  - name: forever\n    job: {namespace: ml, name: ft}\n    series: {loss: \"2.0x20\"}\n    until: 1000000d\n    expectActions: []\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = trainwarden_in(&dir, &["test", "p.test.yaml"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("    until: ") && stdout.contains("is more than a year after the input ends"),
        "{stdout}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "refused, not run");
}

/// A ProgressPolicyException of namespace `ns` for `policy_name` (rules `rules`), in a file with `policy`.
fn with_exception(policy: &str, ns: &str, policy_name: &str, rules: &str) -> String {
    format!(
        "{policy}---\napiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicyException\nmetadata: {{name: e, namespace: {ns}}}\n\
spec:\n  exceptions:\n    - policyName: {policy_name}\n      ruleNames: [{rules}]\n  expires: \"2026-01-01T00:10:00Z\"\n"
    )
}

#[test]
fn exceptions_are_validated_against_the_policies_and_replay_holds_then_releases_at_expiry() {
    let dir = temp_dir("exceptions");
    let cluster = when(r#"metric("loss") > 1.0"#)
        .replace("kind: ProgressPolicy", "kind: ClusterProgressPolicy")
        .replace("  namespace: ml\n", "")
        .replace("spec:\n", "spec:\n  exceptions: {allowedNamespaces: [team-eval]}\n");
    let cases = [
        (
            "not-allowed",
            with_exception(&cluster, "ml", "p", "r"),
            "  - not-allowed.yaml:17:19: spec.exceptions[0].policyName: ClusterProgressPolicy p does not honour exceptions from namespace \"ml\": its spec.exceptions.allowedNamespaces must list it (the administrator's choice)",
        ),
        (
            "no-such-rule",
            with_exception(&when(r#"metric("loss") > 1.0"#), "ml", "ml/p", "r, typo"),
            "  - no-such-rule.yaml:18:22: spec.exceptions[0].ruleNames[1]: ProgressPolicy ml/p has no rule \"typo\" (its rules: r)",
        ),
        (
            "other-namespace",
            with_exception(&when(r#"metric("loss") > 1.0"#), "ml", "prod/p", "r"),
            "  - other-namespace.yaml:17:19: document[1].spec.exceptions[0].policyName: \"prod/p\" names a ProgressPolicy of namespace \"prod\": an exception reaches only the TrainJobs of its own namespace (\"ml\"), which only that namespace's ProgressPolicies and ClusterProgressPolicies judge; write ml/NAME, or the bare name of a ClusterProgressPolicy",
        ),
    ];
    for (name, text, line) in cases {
        let file = format!("{name}.yaml");
        std::fs::write(dir.join(&file), text).unwrap();
        let out = trainwarden_in(&dir, &["validate", &file]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: {stdout}");
        assert!(stdout.lines().any(|l| l == line), "{name}: expected\n{line}\nin\n{stdout}");
        // replay refuses what validate refuses.
        std::fs::write(dir.join("s.jsonl"), ONE_REPORT).unwrap();
        let out = trainwarden_in(&dir, &["replay", "--policy", &file, "s.jsonl"]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    }

    // A valid one: the rule fires at 00:00 with its suspension held, and acts on 00:10:00, when the
    // exception expires, with no report at that time.
    let file = "ok.yaml";
    std::fs::write(dir.join(file), with_exception(&when(r#"metric("loss") > 1.0"#), "ml", "ml/p", "r"))
        .unwrap();
    let out = trainwarden_in(&dir, &["validate", file]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("ok.yaml: ProgressPolicyException ml/e is valid (expires 2026-01-01T00:10:00Z)"),
        "{stdout}"
    );
    let later = ONE_REPORT.replace("00:00:00Z", "00:20:00Z");
    std::fs::write(dir.join("s.jsonl"), format!("{ONE_REPORT}{later}")).unwrap();
    let out = trainwarden_in(&dir, &["replay", "--output", "json", "--policy", file, "s.jsonl"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e.get("summary").is_none())
        .collect();
    let held = events.iter().find(|e| e["state"] == "held").expect("held");
    assert_eq!(held["time"], "2026-01-01T00:00:00Z");
    assert_eq!(held["exception"], "ml/e");
    assert_eq!(held["exceptedUntil"], "2026-01-01T00:10:00Z");
    let ended = events.iter().find(|e| e["state"] == "exceptionEnded").expect("ended");
    assert_eq!(
        (ended["time"].as_str(), ended["why"].as_str(), ended["released"].as_bool()),
        (Some("2026-01-01T00:10:00Z"), Some("expired"), Some(true))
    );
    let suspends: Vec<&str> =
        events.iter().filter(|e| e["action"] == "suspend").filter_map(|e| e["time"].as_str()).collect();
    assert_eq!(suspends, ["2026-01-01T00:10:00Z"], "once, on the second it expired");
}
