//! The sandbox's tests: every builtin example, limits, errors with positions, no clock or files.

use std::collections::BTreeMap;
use std::time::Instant;

use rhai::Dynamic;

use super::builtins::*;
use super::*;
use crate::units::duration::PolicyDuration;

fn eval(engine: &ScriptEngine, src: &str) -> Result<ScriptOutcome, ScriptError> {
    let script = engine.compile("test", src)?;
    let (job, env, now) = doc_fixture();
    let mut slot = Some(job);
    let out = engine.eval_condition(&script, &mut slot, &env, now);
    assert!(slot.is_some(), "job data must come back");
    out
}

fn eval_value(engine: &ScriptEngine, src: &str) -> String {
    let script = engine.compile("doc", src).unwrap_or_else(|e| panic!("{src}: {e}"));
    let (job, env, now) = doc_fixture();
    let mut slot = Some(job);
    let labels = slot.as_ref().map(|j| j.snapshot.labels.clone()).unwrap_or_default();
    let annotations = BTreeMap::new();
    let mut scope = engine.scope(&labels, &annotations, (true, true));
    FRAME.with(|c| {
        *c.borrow_mut() = Some(Frame {
            job: slot.take().unwrap(),
            env,
            now,
            deadline: Instant::now() + std::time::Duration::from_secs(1),
            evidence: Vec::new(),
            wake: None,
        });
    });
    let v = engine.engine.eval_ast_with_scope::<Dynamic>(&mut scope, &script.ast);
    FRAME.with(|c| c.borrow_mut().take());
    match v {
        Ok(v) => v.to_string(),
        Err(e) => panic!("{src}: {e}"),
    }
}

#[test]
fn every_builtin_example_gives_its_documented_value() {
    let engine = ScriptEngine::default();
    for b in BUILTINS {
        let got = eval_value(&engine, b.example);
        assert_eq!(got, b.expected, "{}: example `{}`", b.signature, b.example);
    }
}

#[test]
fn conditions_return_true_or_false_with_evidence() {
    let engine = ScriptEngine::default();
    let out = eval(&engine, r#"non_finite("grad_norm") && progress() > 20"#).unwrap();
    assert!(out.value);
    assert_eq!(out.evidence.len(), 1);
    assert_eq!(out.evidence[0].summary, "grad_norm is inf");
    let out = eval(&engine, r#"metric("loss") > 2 * best("loss")"#).unwrap();
    assert!(!out.value);
}

#[test]
fn compile_errors_name_the_rule_and_position() {
    let engine = ScriptEngine::default();
    let e = engine.compile("loss-spike", "metric(\"loss\") >\n  > 3").unwrap_err();
    assert_eq!((e.rule.as_str(), e.line, e.kind), ("loss-spike", 2, ScriptErrorKind::Compile));
    assert!(e.to_string().starts_with("rule \"loss-spike\", line 2:"), "{e}");
    let e = engine.compile("r", "lossy > 3").unwrap_err();
    assert!(e.message.contains("lossy"), "strict variables: {e}");
    let e = engine.compile("r", "import \"x\" as y; true").unwrap_err();
    assert_eq!(e.kind, ScriptErrorKind::Compile, "no modules: {e}");
}

#[test]
fn comparisons_follow_ieee_754_so_infinite_metrics_are_caught() {
    let engine = ScriptEngine::default();
    for (src, expected) in [
        (r#"metric("grad_norm") > 0.5"#, true),
        (r#"metric("grad_norm") >= 1"#, true),
        (r#"1 < metric("grad_norm")"#, true),
        (r#"metric("grad_norm") == metric("grad_norm")"#, true),
        (r#"metric("grad_norm") < 1e300"#, false),
        ("-1.0/0.0 < -1e308", true),
        ("1.0000000000000002 > 1.0", true),
        ("0.1 + 0.2 == 0.3", false),
        (r#"metric("nothing") > 0 || metric("nothing") <= 0"#, false),
        ("2 > 1 && 2.5 > 1 && 1 < 2.5", true),
    ] {
        assert_eq!(eval(&engine, src).unwrap().value, expected, "{src}");
    }
}

#[test]
fn a_non_boolean_condition_is_an_error() {
    let engine = ScriptEngine::default();
    let e = eval(&engine, r#"let x = metric("loss"); x"#).unwrap_err();
    assert_eq!(e.message, "the condition must be true or false, but it was the number 1.25");
    let e = eval(&engine, "if progress() > 1 { 2 } else { false }").unwrap_err();
    assert_eq!(e.message, "the condition must be true or false, but it was the integer 2");
}

/// What `check` says about a script, as `line:column: message` lines.
fn problems(src: &str, context: ScriptContext) -> Vec<String> {
    let engine = ScriptEngine::default();
    let script = engine.compile("r", src).unwrap_or_else(|e| panic!("{src}: {e}"));
    engine
        .check(&script, &context)
        .iter()
        .map(|e| format!("{}:{}: {}", e.line, e.column, e.message))
        .collect()
}

#[test]
fn the_checks_reject_what_would_fail_at_every_evaluation() {
    let policy = ScriptContext { sampling_interval: PolicyDuration::from_secs(30), has_gpu_hour_cost: false };
    let compare = "compare it, for example `metric(\"loss\") > 2.0`";
    for (src, expected) in [
        ("undefined_fn(3)", "1:1: unknown function undefined_fn() (`trainwarden functions` lists the functions rules can call)".to_string()),
        (r#"metrc("loss") > 1.0"#, "1:1: unknown function metrc(); did you mean metric()? (`trainwarden functions` lists them)".into()),
        (r#"metric("loss", 1, 2) > 1"#, "1:1: metric() is called as metric(metric name), but is given 3 arguments".into()),
        (r#"plateau("loss")"#, "1:1: plateau() is called as plateau(metric name, n) or plateau(metric name, n, min_delta) or plateau(metric name, window) or plateau(metric name, window, min_delta), but is given 1 argument".into()),
        ("1 + 1", format!("1:3: the condition must be true or false, but it ends in a number; {compare}")),
        (r#"metric("loss")"#, format!("1:1: the condition must be true or false, but it ends in a number; {compare}")),
        (r#""yes""#, format!("1:1: the condition must be true or false, but it ends in a string; {compare}")),
        ("let x = 1;", format!("1:1: the condition must be true or false, but it ends in nothing (the last statement has no value); {compare}")),
        (r#"stalled("-5m")"#, r#"1:9: stalled(): argument 1 (window): invalid duration "-5m": durations cannot be negative"#.into()),
        (r#"stalled("20s")"#, "1:9: stalled(): argument 1 (window): 20s is shorter than the sampling interval 30s: there would be no sample to judge; raise it or set spec.samplingInterval".into()),
        (r#"stalled("0s")"#, "1:9: stalled(): argument 1 (window): must be longer than 0s".into()),
        ("stalled(30)", "1:9: stalled(): argument 1 (window): must be a string, got an integer".into()),
        (r#"eta_after("tomorrow")"#, r#"1:11: eta_after(): argument 1 (deadline): "tomorrow" is not a time: expected RFC 3339 with an offset, such as 2026-12-01T09:00:00+01:00"#.into()),
        (r#"plateau("loss", 100000)"#, "1:17: plateau(): argument 2 (n): plateau() judges the last 63 samples at most, got 100000; use `uses: plateau` for longer windows".into()),
        (r#"plateau("loss", 0)"#, "1:17: plateau(): argument 2 (n): must be at least 1, got 0".into()),
        (r#"plateau("loss", 20, 0)"#, "1:21: plateau(): argument 3 (min_delta): must be a float, got the integer 0: write 0.0".into()),
        (r#"plateau("loss", "1h", -0.5)"#, "1:23: plateau(): argument 3 (min_delta): must be >= 0, got -0.5".into()),
        (r#"best("loss", "lowest") > 1.0"#, r#"1:14: best(): argument 2 ("min"|"max"): must be "min" or "max", got "lowest""#.into()),
        (r#"window_mean("loss", 0) > 1.0"#, "1:21: window_mean(): argument 2 (n): must be at least 1, got 0".into()),
        (r#"diverging("loss", 10)"#, "1:19: diverging(): argument 2 (threshold): must be a float, got the integer 10: write 10.0".into()),
        (r#"diverging_factor("loss", 0.5)"#, "1:26: diverging_factor(): argument 2 (factor): must be > 1, got 0.5".into()),
        (r#"metric("") > 1.0"#, "1:8: metric(): argument 1 (metric name): a metric name cannot be empty".into()),
        ("over_budget(#{maxCost: 10.0})", "1:13: over_budget(): argument 1 (#{…}): a cost budget (maxCost) needs spec.gpuHourCost".into()),
    ] {
        assert_eq!(problems(src, policy), vec![expected], "{src}");
    }
    let budget = problems("over_budget(#{maxGpuHourz: 10.0})", policy);
    assert_eq!(budget.len(), 1, "{budget:?}");
    assert!(budget[0].starts_with("1:13: over_budget(): argument 1 (#{…}): "), "{budget:?}");
    assert!(budget[0].contains("#{…}.maxGpuHourz: unknown parameter"), "{budget:?}");
}

#[test]
fn the_checks_report_every_problem_at_once() {
    let got =
        problems("undefined_fn(1) || stalled(\"-1m\") ||\n metric(\"a\", 2) > 0.0", ScriptContext::default());
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].starts_with("1:1: unknown function"), "{got:?}");
    assert!(got[1].starts_with("1:20: stalled()") || got[1].starts_with("1:28: stalled()"), "{got:?}");
    assert!(got[2].starts_with("2:2: metric() is called as"), "{got:?}");
}

#[test]
fn the_checks_accept_what_runs() {
    for src in [
        r#"metric("loss") > 2.0 * best("loss")"#,
        r#"plateau("loss", 20) || plateau("loss", "2h", 0.001) || plateau("loss", 5, 0.1)"#,
        r#"stalled("30m") && eta_after("2026-12-01T09:00:00+01:00")"#,
        r#"let n = 3; slope("loss", n) > 0.0"#,
        r#"fn worse(m) { metric(m) > best(m) } worse("loss")"#,
        r#"let f = |x| x > 1; f.call(metric("loss"))"#,
        r#"labels["team"] == "fraud" && "team" in labels && labels.team.len() > 0"#,
        r#"annotations.keys().len() >= 0 && label("x") == """#,
        r#"finite(metric("loss")) && finite(3)"#,
        r#"over_budget(#{maxRuntime: "3h", maxGpuHours: 10.0})"#,
        r#"type_of(metric("loss")) == "f64""#,
        r#"[1, 2].len() == 2 && "abc".contains("b")"#,
        r#"if progress() > 50.0 { true } else { metric("loss") > 1.0 }"#,
        r#"fn is_big() { this > 10.0 } metric("loss").is_big()"#,
        "let o = #{act: |x| x > 1}; o.act(2)",
        r#"labels.get("team") == "fraud" && labels.to_json().len() > 2"#,
    ] {
        assert_eq!(problems(src, ScriptContext::default()), Vec::<String>::new(), "{src}");
    }
}

#[test]
fn the_host_signatures_are_exactly_the_registered_host_functions() {
    use std::any::TypeId;
    use std::collections::BTreeSet;

    use rhai::{ImmutableString, Map};

    let mut host = rhai::Engine::new_raw();
    for b in BUILTINS {
        (b.register)(&mut host);
    }
    let registered: BTreeSet<(String, Vec<TypeId>)> = host
        .collect_fn_metadata(
            None,
            |f| Some((f.metadata.name.to_string(), f.metadata.param_types.to_vec())),
            false,
        )
        .into_iter()
        .collect();
    let type_of = |p: check::Param| -> Vec<TypeId> {
        use check::Param::*;
        match p {
            Metric | Key | Duration | Window | Deadline | Mode => vec![TypeId::of::<ImmutableString>()],
            Count | PlateauCount => vec![TypeId::of::<i64>()],
            MinDelta | Factor | Float => vec![TypeId::of::<f64>()],
            Number => vec![TypeId::of::<f64>(), TypeId::of::<i64>()],
            Budget => vec![TypeId::of::<Map>()],
        }
    };
    let mut declared = BTreeSet::new();
    for s in check::HOST_SIGNATURES {
        // Every combination of the parameters' types is one registered overload.
        let mut overloads: Vec<Vec<TypeId>> = vec![Vec::new()];
        for p in s.params {
            overloads = overloads
                .into_iter()
                .flat_map(|o| type_of(*p).into_iter().map(move |t| [o.clone(), vec![t]].concat()))
                .collect();
        }
        declared.extend(overloads.into_iter().map(|o| (s.name.to_string(), o)));
    }
    let missing: Vec<_> = registered.difference(&declared).map(|(n, t)| (n, t.len())).collect();
    let extra: Vec<_> = declared.difference(&registered).map(|(n, t)| (n, t.len())).collect();
    assert!(missing.is_empty(), "registered but not in HOST_SIGNATURES: {missing:?}");
    assert!(extra.is_empty(), "in HOST_SIGNATURES but not registered: {extra:?}");
}

#[test]
fn rhai_package_functions_are_known_with_their_arities() {
    let engine = ScriptEngine::default();
    assert!(engine.callables.arities("contains").is_some());
    assert!(engine.callables.arities("sqrt").is_some_and(|a| a.contains(&1)));
    assert!(engine.callables.arities("no_such_function").is_none());
}

#[test]
fn missing_labels_read_as_empty_strings() {
    let engine = ScriptEngine::default();
    for (src, expected) in [
        (r#"labels["nope"] == "x""#, false),
        (r#"labels["nope"] == """#, true),
        (r#"labels.nope == """#, true),
        (r#""nope" in labels"#, false),
        (r#""team" in labels && labels["team"] == "fraud" && labels.team == "fraud""#, true),
        (r#"annotations["missing"] == "" && labels.len() == 1 && labels.keys() == ["team"]"#, true),
        (r#"labels.get("nope") == "" && labels.to_json() == "{\"team\":\"fraud\"}""#, true),
    ] {
        assert_eq!(eval(&engine, src).map(|o| o.value), Ok(expected), "{src}");
    }
}

#[test]
fn runtime_type_errors_name_script_types_not_rust_types() {
    let engine = ScriptEngine::default();
    let e = eval(&engine, r#"let n = "3"; slope("loss", n) > 0.0"#).unwrap_err();
    assert_eq!(e.message, "no function slope(string, string) for these argument types");
}

#[test]
fn runaway_scripts_hit_limits_and_keep_the_job() {
    let engine = ScriptEngine::new(Limits { max_operations: 1000, ..Limits::default() });
    let e = eval(&engine, "let x = 0; loop { x += 1; }").unwrap_err();
    assert_eq!(e.kind, ScriptErrorKind::Limit);
    assert!(e.message.contains("operations"), "{e}");

    let engine = ScriptEngine::new(Limits {
        max_operations: u64::MAX / 2,
        deadline: std::time::Duration::from_millis(5),
        ..Limits::default()
    });
    let e = eval(&engine, "let x = 0; loop { x += 1; }").unwrap_err();
    assert_eq!((e.kind, e.message.as_str()), (ScriptErrorKind::Limit, "exceeded the evaluation deadline"));

    let engine = ScriptEngine::default();
    let e = eval(&engine, "fn f(n) { f(n + 1) } f(0)").unwrap_err();
    assert_eq!(e.kind, ScriptErrorKind::Limit, "{e}");
    let e = eval(&engine, r#"let s = "x"; loop { s += s; }"#).unwrap_err();
    assert_eq!(e.kind, ScriptErrorKind::Limit, "{e}");
}

#[test]
fn host_errors_are_runtime_errors_with_positions() {
    let engine = ScriptEngine::default();
    let e = eval(&engine, "\nstalled(\"thirty minutes\")").unwrap_err();
    assert_eq!((e.kind, e.line), (ScriptErrorKind::Runtime, 2));
    assert!(e.message.contains("invalid duration"), "{e}");
}

#[test]
fn no_clock_or_file_access_is_available() {
    let engine = ScriptEngine::default();
    assert!(eval(&engine, "timestamp(); true").is_err());
    assert!(eval(&engine, r#"open_file("/etc/passwd"); true"#).is_err());
}

#[test]
fn functions_outside_an_evaluation_fail_cleanly() {
    let engine = ScriptEngine::default();
    let r = engine.engine.eval::<f64>(r#"metric("loss")"#);
    assert!(r.unwrap_err().to_string().contains("only be used inside a rule evaluation"));
}

/// Evaluates `src` on the documentation fixture at `now` plus `later` seconds: its value and its wake.
fn eval_later(engine: &ScriptEngine, src: &str, later: i64) -> (String, Option<Timestamp>) {
    let script = engine.compile("doc", src).unwrap_or_else(|e| panic!("{src}: {e}"));
    let (job, env, now) = doc_fixture();
    let now = Timestamp::from_second(now.as_second() + later).unwrap();
    let mut scope = engine.scope(&job.snapshot.labels.clone(), &BTreeMap::new(), (true, true));
    FRAME.with(|c| {
        *c.borrow_mut() = Some(Frame {
            job,
            env,
            now,
            deadline: Instant::now() + std::time::Duration::from_secs(1),
            evidence: Vec::new(),
            wake: None,
        });
    });
    let v = engine.engine.eval_ast_with_scope::<Dynamic>(&mut scope, &script.ast);
    let wake = FRAME.with(|c| c.borrow_mut().take()).and_then(|f| f.wake);
    (v.unwrap_or_else(|e| panic!("{src}: {e}")).to_string(), wake)
}

/// A call of `sig` with a valid constant for each parameter.
fn sample_call(sig: &check::Signature) -> String {
    use check::Param::*;
    let args: Vec<&str> = sig
        .params
        .iter()
        .map(|p| match p {
            Metric => "\"loss\"",
            Key => "\"team\"",
            Duration => "\"90m\"",
            Window => "\"3m\"",
            Deadline => "\"2026-01-01T12:00:00Z\"",
            Mode => "\"min\"",
            Count | PlateauCount => "3",
            MinDelta => "0.01",
            Factor => "2.0",
            Float => "1.0",
            Number => "1.0",
            Budget => "#{maxRuntime: \"3h\"}",
        })
        .collect();
    format!("{}({})", sig.name, args.join(", "))
}

#[test]
fn host_functions_that_time_alone_changes_are_clock_readers_or_announce_a_wake() {
    // The evaluator skips the eval_interval rounds for scripts that call no clock reader; a host function
    // whose answer drifts with time and is not listed would then go stale between samples.
    let engine = ScriptEngine::default();
    let now = doc_fixture().2;
    for sig in check::HOST_SIGNATURES {
        let call = sample_call(sig);
        let (at_now, wake) = eval_later(&engine, &call, 0);
        for later in [1, 59 * 60, 3 * 3600, 26 * 3600, 9 * 86_400] {
            let (value, _) = eval_later(&engine, &call, later);
            let announced = wake.is_some_and(|w| w.as_second() <= now.as_second() + later);
            assert!(
                value == at_now || announced || check::CLOCK_READERS.contains(&sig.name),
                "{call} is {at_now} now and {value} {later}s later, announces no wake and is not in CLOCK_READERS"
            );
        }
    }
    // Every listed reader is a host function.
    for name in check::CLOCK_READERS {
        assert!(check::HOST_SIGNATURES.iter().any(|s| s.name == *name), "{name} is not a host function");
    }
}

#[test]
fn scripts_that_call_a_clock_reader_anywhere_read_the_clock() {
    let engine = ScriptEngine::default();
    let reads =
        |src: &str| engine.compile("r", src).unwrap_or_else(|e| panic!("{src}: {e}")).reads_the_clock();
    assert!(!reads(r#"metric("loss") > 2.0 && !finite(metric("grad_norm"))"#));
    assert!(!reads(r#"stalled("30m") || plateau("loss", "2h", 0.001)"#));
    assert!(!reads(r#"labels["team"] == "fraud" && over_budget(#{maxRuntime: "3h"})"#));
    assert!(reads("runtime() > 86400.0"));
    assert!(reads(r#"metric("loss") > 2.0 && hour() >= 18"#));
    assert!(reads("fn late() { hour() >= 18 } late()"), "inside a script function");
    assert!(reads(r#""loss".since_improvement() > 600.0"#), "method style");
    assert!(reads(r#"let f = Fn("hour"); f.call() > 3"#), "through a function pointer");
    assert!(reads(r#"eval("true")"#), "eval may call anything");
}
