//! The compiler's tests: every validation error reported at once with its path and position, receivers,
//! templates, unknown fields, what a valid policy compiles to.

use super::*;

fn compile_yaml(yaml: &str) -> Result<CompiledPolicy, Vec<String>> {
    let docs = parse_documents(yaml, "test.yaml")
        .map_err(|e| e.errors.iter().map(std::string::ToString::to_string).collect::<Vec<_>>())?;
    compile(&docs[0], &ScriptEngine::default())
        .map_err(|e| e.errors.iter().map(std::string::ToString::to_string).collect())
}

/// The issue's example policy, shared with the CRD and real-API tests.
const WEEKEND_SAFE: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/weekend-safe.yaml"));

#[test]
fn the_issue_example_compiles() {
    let p = compile_yaml(WEEKEND_SAFE).unwrap();
    assert_eq!(p.reference.to_string(), "fraud/weekend-safe");
    assert_eq!(p.mode, Mode::Enforce);
    assert_eq!(p.rules.len(), 4);
    assert_eq!(p.rules[1].for_, PolicyDuration::from_secs(900));
    assert_eq!(p.rules[3].cooldown, PolicyDuration::from_secs(6 * 3600));
    assert!(p.rules[2].script.is_some());
}

#[test]
fn every_validation_error_is_reported_at_once_with_its_path() {
    let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: broken, namespace: ns}
spec:
  timezone: Mars/Olympus
  samplingInterval: 1m
  activeWindows:
    - {start: "0 18 * * FRYDAY", duration: 62h}
    - {start: "0 18 * * FRI", duration: "-5m"}
  rules:
    - name: a
      uses: plato
    - name: a
      uses: plateau
      with: {metric: loss, window: 30s, minDelta: -1, colour: red}
      for: 15 minutes
    - name: c
      when: 'metric("loss") >'
    - name: d
    - name: e
      uses: over_budget
      with: {maxCost: 100}
      actions: [{annotate: {key: "bad key!"}}]
    - name: w
      uses: stalled
      with: {after: 30s}
      actions: [{annotate: {key: trainwarden.dev/verdict, value: "x"}}]
"#;
    let errors = compile_yaml(yaml).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        paths,
        vec![
            "spec.timezone",
            "spec.activeWindows[0].start",
            "spec.activeWindows[1].duration",
            "spec.rules[0].uses",
            "spec.rules[1].name",
            "spec.rules[1].with.minDelta",
            "spec.rules[1].with.colour",
            "spec.rules[1].for",
            "spec.rules[2].when",
            "spec.rules[3]",
            "spec.rules[4].with.maxCost",
            "spec.rules[4].actions[0].annotate.key",
            "spec.rules[5].with.after",
            "spec.rules[5].actions[0].annotate.key",
        ],
        "{errors:#?}"
    );
    assert!(errors[13].contains("an annotation the controller itself keeps"), "{}", errors[13]);
    assert!(errors[12].contains("30s is shorter than the sampling interval 1m"), "{}", errors[12]);
    assert!(errors[8].contains("line 1:17"), "{}", errors[8]);
}

#[test]
fn the_remaining_validation_errors() {
    let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ClusterProgressPolicy
metadata: {name: c, namespace: should-not-be-here}
spec:
  samplingInterval: 0s
  gpuHourCost: -1
  assumeGpus: -2
  namespaceSelector: {matchExpressions: [{key: tier, operator: Exists, values: [x]}]}
  selector: {matchExpressions: [{key: team, operator: In}]}
  rules:
    - name: r
      with: {metric: loss}
      when: "   "
      keepFiringFor: soon
      cooldown: 1x
      actions: [{notify: {to: " "}}, {scale: {numNodes: 0}}]
"#;
    // A document-level error does not hide the spec's: all come at once, in file order.
    let errors = compile_yaml(yaml).unwrap_err();
    assert_eq!(
        errors[0],
        "metadata.namespace: a ClusterProgressPolicy is cluster-scoped: remove the namespace"
    );
    assert_eq!(errors.len(), 12, "{errors:#?}");
    let yaml = yaml.replace("metadata: {name: c, namespace: should-not-be-here}", "metadata: {name: c}");
    let errors = compile_yaml(&yaml).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        paths,
        vec![
            "spec.samplingInterval",
            "spec.gpuHourCost",
            "spec.assumeGpus",
            "spec.namespaceSelector.matchExpressions[0].values",
            "spec.selector.matchExpressions[0].values",
            "spec.rules[0].with",
            "spec.rules[0].when",
            "spec.rules[0].keepFiringFor",
            "spec.rules[0].cooldown",
            "spec.rules[0].actions[0].notify.to",
            "spec.rules[0].actions[1].scale.numNodes",
        ],
        "{errors:#?}"
    );
    let e = compile_yaml("apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: e}\nspec: {rules: []}\n").unwrap_err();
    assert_eq!(e, vec!["spec.rules: a policy needs at least one rule"]);
}

#[test]
fn unknown_fields_are_errors_with_paths() {
    let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: typo}
spec:
  mode: Audit
  rules:
    - name: r
      when: "true"
      keepFiringfor: 10m
"#;
    let errors = compile_yaml(yaml).unwrap_err();
    assert_eq!(
        errors,
        vec![
            "spec.rules[0].keepFiringfor: unknown field; expected one of actions, cooldown, for, keepFiringFor, mode, name, uses, when, with"
        ]
    );
}

#[test]
fn bad_enums_and_kinds_are_reported() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {mode: Sometimes, rules: []}\n";
    let errors = compile_yaml(yaml).unwrap_err();
    assert!(errors[0].starts_with("apiVersion:"), "{errors:?}");
    assert!(errors[1].starts_with("kind: expected ProgressPolicy"), "{errors:?}");
    assert_eq!(
        errors[2],
        "spec.mode: Unsupported value: \"Sometimes\": supported values: \"Audit\", \"Enforce\""
    );
    assert_eq!(errors[3], "spec.rules: must have at least 1 item");
}

#[test]
fn yaml_syntax_errors_carry_a_position() {
    let e = parse_documents("spec: [unclosed", "bad.yaml").unwrap_err();
    assert_eq!(e.document, "bad.yaml");
    assert_eq!(e.errors[0].position, Some(crate::error::Position { line: 1, column: 7 }));
    assert_eq!(e.to_string(), "bad.yaml: 1 error\n  - bad.yaml:1:7: (yaml): unclosed bracket '['");
}

#[test]
fn the_yaml_readers_own_words_are_translated() {
    let e = parse_documents("kind: A\nkind: B\n", "d.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "d.yaml: 1 error\n  - d.yaml:2:1: (yaml): duplicate key \"kind\": a key may appear only once in a mapping"
    );
    let big = format!("a: [{}]\n", vec!["1"; 300_000].join(","));
    let e = parse_documents(&big, "big.yaml").unwrap_err();
    assert!(
        e.errors[0].message.starts_with(
            "the file is too large to be a policy: it exceeds the YAML reader's limit on nodes ("
        ),
        "{e}"
    );
}

#[test]
fn cluster_policies_select_by_namespace_labels() {
    let yaml = r"
apiVersion: trainwarden.dev/v1alpha1
kind: ClusterProgressPolicy
metadata: {name: gpu-reclaim}
spec:
  namespaceSelector: {matchLabels: {tier: research}}
  selector: {matchExpressions: [{key: team, operator: Exists}]}
  rules: [{name: stalled, uses: stalled, with: {after: 1h}}]
";
    let p = compile_yaml(yaml).unwrap();
    let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    assert!(p.selects("any", &labels(&[("team", "x")]), Some(&labels(&[("tier", "research")]))));
    assert!(!p.selects("any", &labels(&[("team", "x")]), Some(&labels(&[("tier", "prod")]))));
    assert!(!p.selects("any", &labels(&[]), Some(&labels(&[("tier", "research")]))));
    assert!(p.reference.namespace.is_none());
}

#[test]
fn receivers_compile_with_defaults_and_settled_secret_namespaces() {
    let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: p, namespace: fraud}
spec:
  receivers:
    - name: team
      slack: {urlSecret: {name: slack, key: url}, text: "{{rule}}: {{summary}}"}
      email:
        smarthost: smtp.example.com:587
        from: Trainwarden <tw@example.com>
        to: [ml@example.com]
        username: tw
        passwordSecret: {name: smtp, key: password, namespace: fraud}
    - name: hook
      groupBy: [job, rule, job]
      groupWait: 0s
      sendResolved: true
      webhook: {url: "https://hooks.example.com/x", hmacSecret: {name: hook, key: hmac}}
  rules:
    - {name: r, when: "true", actions: [{notify: {to: team}}, {notify: {to: hook}}]}
"#;
    let p = compile_yaml(yaml).unwrap();
    let team = &p.receivers[0];
    assert_eq!(team.group_by, vec![crate::policy::GroupLabel::Policy, crate::policy::GroupLabel::Job]);
    assert_eq!(team.group_wait, PolicyDuration::from_secs(30));
    assert_eq!(team.repeat_interval, PolicyDuration::from_secs(4 * 3600));
    assert_eq!(team.slack.as_ref().unwrap().url.to_string(), "fraud/slack[url]");
    let email = team.email.as_ref().unwrap();
    assert_eq!((email.host.as_str(), email.port), ("smtp.example.com", 587));
    assert_eq!(email.password.as_ref().unwrap().to_string(), "fraud/smtp[password]");
    let hook = &p.receivers[1];
    assert_eq!(hook.group_by, vec![crate::policy::GroupLabel::Job, crate::policy::GroupLabel::Rule]);
    assert!(hook.group_wait.is_zero() && hook.send_resolved);
}

#[test]
fn receiver_errors_have_paths() {
    let yaml = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: p, namespace: fraud}
spec:
  receivers:
    - name: team
      groupInterval: 0s
      slack: {urlSecret: {name: slack, key: url, namespace: payments}, title: "{{summary}}", text: "{{rule}"}
    - name: team
      email: {smarthost: smtp, tls: None, from: me, to: [], passwordSecret: {name: s, key: p}}
    - name: hook
      webhook: {url: "ftp://x", urlSecret: {name: h, key: u}}
    - name: empty
  rules:
    - {name: r, when: "true", actions: [{notify: {to: oncall}}]}
"#;
    let errors = compile_yaml(yaml).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.split(": ").next().unwrap()).collect();
    assert_eq!(
        paths,
        vec![
            "spec.receivers[0].groupInterval",
            "spec.receivers[0].slack.urlSecret.namespace",
            "spec.receivers[0].slack.title",
            "spec.receivers[0].slack.text",
            "spec.receivers[1].name",
            "spec.receivers[1].email.username",
            "spec.receivers[1].email.smarthost",
            "spec.receivers[1].email.tls",
            "spec.receivers[1].email.from",
            "spec.receivers[1].email.to",
            "spec.receivers[2].webhook",
            "spec.receivers[2].webhook.url",
            "spec.receivers[3]",
            "spec.rules[0].actions[0].notify.to",
        ],
        "{errors:#?}"
    );
    assert!(errors[1].contains("own namespace \"fraud\", not \"payments\""), "{}", errors[1]);
    assert!(errors[3].contains("column 1: `{{` is not closed"), "{}", errors[3]);
    assert!(errors[13].contains("no receiver named \"oncall\""), "{}", errors[13]);
    let cluster = yaml
        .replace("kind: ProgressPolicy", "kind: ClusterProgressPolicy")
        .replace("{name: p, namespace: fraud}", "{name: p}");
    let errors = compile_yaml(&cluster).unwrap_err();
    assert!(
            errors.contains(&"spec.receivers[1].email.passwordSecret.namespace: a ClusterProgressPolicy must name the Secret's namespace".to_string()),
            "{errors:#?}"
        );
}

#[test]
fn namespaced_policies_only_see_their_namespace() {
    let p = compile_yaml(WEEKEND_SAFE).unwrap();
    let labels = [("team".to_string(), "fraud".to_string())].into_iter().collect();
    assert!(p.selects("fraud", &labels, None));
    assert!(!p.selects("other", &labels, None));
}

#[test]
fn checkpoint_timeouts_are_checked_where_they_are_written() {
    let yaml = r"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: ckpt, namespace: ns}
spec:
  rules:
    - name: a
      uses: stalled
      with: {after: 30m}
      actions:
        - checkpoint: {timeout: 0s}
        - checkpoint: {timeout: 25h}
        - checkpoint: {timeout: soon}
        - suspend: {checkpointFirst: {timeout: 0m}}
        - suspend: {grace: 5m, checkpointFirst: {timeout: 2d}}
";
    let errors = compile_yaml(yaml).unwrap_err();
    assert_eq!(
        errors,
        vec![
            "spec.rules[0].actions[0].checkpoint.timeout: must be longer than 0s (leave it out for the default, 10m)",
            "spec.rules[0].actions[1].checkpoint.timeout: must be at most 24h, got 25h",
            "spec.rules[0].actions[2].checkpoint.timeout: invalid duration \"soon\": expected a number before \"soon\"",
            "spec.rules[0].actions[3].suspend.checkpointFirst.timeout: must be longer than 0s (leave it out for the default, 10m)",
            "spec.rules[0].actions[4].suspend.checkpointFirst.timeout: must be at most 24h, got 2d",
        ]
    );
    let ok = yaml
        .replace("{timeout: 0s}", "{}")
        .replace("{timeout: 25h}", "{timeout: 24h}")
        .replace("{timeout: soon}", "{timeout: 90s}")
        .replace("{timeout: 0m}", "{}")
        .replace("{timeout: 2d}", "{timeout: 1h}");
    let policy = compile_yaml(&ok).expect("valid");
    let timeouts: Vec<Option<u64>> = policy.rules[0]
        .actions
        .iter()
        .map(|a| a.checkpoint_timeout().map(|d| d.as_millis() / 1000))
        .collect();
    assert_eq!(timeouts, vec![Some(600), Some(86_400), Some(90), Some(600), Some(3600)]);
}
