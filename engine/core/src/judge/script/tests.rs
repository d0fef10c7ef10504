//! The sandbox's tests: every builtin example, limits, errors with positions, no clock or files.

use std::collections::BTreeMap;
use std::time::Instant;

use rhai::Dynamic;

use super::builtins::*;
use super::*;
use crate::testing::rng::Rng;
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
    eval_later(engine, src, 0).0
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
            Metric | Key | Duration | Window | Span | Deadline | Mode => {
                vec![TypeId::of::<ImmutableString>()]
            }
            Count | PlateauCount => vec![TypeId::of::<i64>()],
            MinDelta | Factor | Percent | Float => vec![TypeId::of::<f64>()],
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
            deadline: Some(Instant::now() + std::time::Duration::from_secs(1)),
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
            Span => "\"3m\"",
            Deadline => "\"2026-01-01T12:00:00Z\"",
            Mode => "\"min\"",
            Count | PlateauCount => "3",
            MinDelta => "0.01",
            Factor => "2.0",
            Percent => "10.0",
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
    // Compiled conditions follow runtime(), cost(), hour(), … with a wake; a product of two clocks they
    // cannot.
    assert!(!reads("runtime() > 86400.0 || cost() / 2 > 500.0"));
    assert!(!reads(r#"metric("loss") > 2.0 && hour() >= 18"#));
    assert!(reads("runtime() * runtime() > 86400.0"));
    assert!(reads("now() >= 1767232801"), "now() is whole seconds: no wake follows it, rounds do");
    assert!(!reads(r#"eta_exceeds("12h")"#), "it records when it stops exceeding");
    // Scripts that are not compiled: any clock reader anywhere.
    assert!(reads("let r = runtime(); r > 86400.0"));
    assert!(reads("fn late() { hour() >= 18 } late()"), "inside a script function");
    assert!(reads(r#""loss".since_improvement() > 600.0"#), "method style");
    assert!(reads(r#"let f = Fn("hour"); f.call() > 3"#), "through a function pointer");
    assert!(reads(r#"eval("true")"#), "eval may call anything");
}

const FLOATS: &[&str] =
    &["0.0", "1.0", "1.25", "(-3.5)", "600.0", "7200.0", "86400.0", "1.0e300", "0.001", "110.0", "60.0"];
const INTS: &[&str] = &["0", "1", "3", "5", "18", "1767232800", "(-2)", "4", "2"];
const FLOAT_CALLS: &[&str] = &[
    r#"metric("loss")"#,
    r#"metric("grad_norm")"#,
    r#"metric("nope")"#,
    r#"best("loss")"#,
    r#"best("loss", "max")"#,
    r#"window_mean("loss", 3)"#,
    r#"window_std("loss", 4)"#,
    r#"window_min("loss", 2)"#,
    r#"window_max("loss", 9)"#,
    r#"slope("loss", 4)"#,
    r#"ema("loss")"#,
    r#"since_improvement("loss")"#,
    "progress()",
    "eta()",
    "step()",
    "total_steps()",
    "epoch()",
    "runtime()",
    "silence()",
    r#"duration("90m")"#,
    r#"duration("90 parsecs")"#,
    "gpus()",
    "gpu_hours()",
    "cost()",
];
const INT_CALLS: &[&str] = &[r#"count("loss")"#, "now()", "hour()", "minute()", "weekday()"];
const BOOL_CALLS: &[&str] = &[
    r#"non_finite("grad_norm")"#,
    r#"non_finite("*")"#,
    r#"non_finite("loss")"#,
    r#"stalled("3m")"#,
    r#"stalled("2h")"#,
    r#"eta_after("2026-01-01T09:00:00Z")"#,
    r#"eta_exceeds("12h")"#,
    r#"diverging("loss", 1.15)"#,
    r#"diverging_factor("loss", 2.0)"#,
    r#"plateau("loss", 2)"#,
    r#"plateau("loss", 3, 0.01)"#,
    r#"plateau("loss", "3m")"#,
    r#"plateau("loss", "2m", 0.05)"#,
    r#"window_mean("loss", 0) > 1.0"#,
];
const TEXT_TESTS: &[&str] = &[
    r#"phase() == "Running""#,
    r#"label("team") == "fraud""#,
    r#"labels["team"] != "x""#,
    r#"annotations["owner"] == """#,
    r#"annotation("owner") != "me""#,
];
const COMPARISONS: &[&str] = &["<", "<=", ">", ">=", "==", "!="];

/// A number-valued expression and whether it is a float.
fn gen_number(rng: &mut Rng, depth: u32) -> (String, bool) {
    match if depth == 0 { rng.below(4) } else { rng.below(7) } {
        0 => (rng.pick(FLOATS).to_string(), true),
        1 => (rng.pick(INTS).to_string(), false),
        2 => (rng.pick(FLOAT_CALLS).to_string(), true),
        3 => (rng.pick(INT_CALLS).to_string(), false),
        4 => (format!("-({})", gen_float(rng, depth - 1)), true),
        _ => {
            // Float arithmetic: one side a float, as Rhai's mixed operators need.
            let float = gen_float(rng, depth - 1);
            let (other, _) = gen_number(rng, depth - 1);
            let op = rng.pick(&["+", "-", "*", "/"]);
            if rng.below(2) == 0 {
                (format!("({float} {op} {other})"), true)
            } else {
                (format!("({other} {op} {float})"), true)
            }
        }
    }
}

fn gen_float(rng: &mut Rng, depth: u32) -> String {
    loop {
        let (text, float) = gen_number(rng, depth);
        if float {
            return text;
        }
    }
}

fn gen_condition(rng: &mut Rng, depth: u32) -> String {
    match if depth == 0 { rng.below(4) } else { rng.below(8) } {
        0 => rng.pick(BOOL_CALLS).to_string(),
        1 => rng.pick(TEXT_TESTS).to_string(),
        2 | 3 => {
            let (a, _) = gen_number(rng, depth.saturating_sub(1));
            let (b, _) = gen_number(rng, depth.saturating_sub(1));
            format!("{a} {} {b}", rng.pick(COMPARISONS))
        }
        4 => format!("!({})", gen_condition(rng, depth - 1)),
        5 => format!("finite({})", gen_number(rng, depth - 1).0),
        _ => {
            let op = rng.pick(&["&&", "||"]);
            format!("({} {op} {})", gen_condition(rng, depth - 1), gen_condition(rng, depth - 1))
        }
    }
}

/// The documentation fixture and two variations: no GPUs, labels or price, suspended; and a start an hour
/// in the future, with a NaN latest loss.
fn fixtures() -> Vec<(Box<crate::history::job::JobData>, Arc<crate::history::job::PolicyEnv>, Timestamp)> {
    let plain = doc_fixture();
    let (mut bare, env, now) = doc_fixture();
    bare.snapshot.gpus = None;
    bare.snapshot.labels.clear();
    bare.snapshot.phase = crate::input::sample::JobPhase::Suspended;
    let no_price = crate::history::job::PolicyEnv {
        calendar: env.calendar.clone(),
        gpu_hour_cost: None,
        assume_gpus: env.assume_gpus,
    };
    let (mut later, env2, _) = doc_fixture();
    later.snapshot.running_since = Some(Timestamp::from_second(now.as_second() + 3600).unwrap());
    let mut s = crate::input::sample::ProgressSample::empty(
        Timestamp::from_second(now.as_second() - 1).unwrap(),
        crate::input::sample::SampleSource::TrainerStatus,
    );
    s.metrics.push(crate::input::sample::Metric { name: "loss".into(), value: f64::NAN });
    later.series.record(&s);
    vec![plain, (bare, Arc::new(no_price), now), (later, env2, now)]
}

fn outcome_at(
    engine: &ScriptEngine,
    script: &CompiledScript,
    fixture: &(Box<crate::history::job::JobData>, Arc<crate::history::job::PolicyEnv>, Timestamp),
    later: i64,
) -> Result<ScriptOutcome, ScriptError> {
    let mut slot = Some(fixture.0.clone());
    let now = Timestamp::from_second(fixture.2.as_second() + later).unwrap();
    engine.eval_condition(script, &mut slot, &fixture.1, now)
}

#[test]
fn compiled_conditions_decide_exactly_as_rhai_and_their_wakes_are_sound() {
    let native = ScriptEngine::default();
    let mut rhai_only = ScriptEngine::default();
    rhai_only.set_native_conditions(false);
    let fixtures = fixtures();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let offsets = [0, 1, 59, 61, 599, 601, 899, 901, 3599, 3601, 7201, 86_399, 86_401, 9 * 86_400];
    let mut compared = 0;
    for case in 0..1500 {
        let src = gen_condition(&mut rng, 1 + (case % 4) as u32);
        let script = native.compile("gen", &src).unwrap_or_else(|e| panic!("{src}: {e}"));
        assert!(script.native.is_some(), "not compiled natively: {src}");
        for fixture in &fixtures {
            let first = outcome_at(&native, &script, fixture, 0);
            for later in offsets {
                let got = outcome_at(&native, &script, fixture, later);
                let want = outcome_at(&rhai_only, &script, fixture, later);
                match (&got, &want) {
                    (Ok(g), Ok(w)) => {
                        // Debug text: a NaN in the evidence equals itself there.
                        let (g, w) = (
                            format!("{:?}", (g.value, &g.evidence)),
                            format!("{:?}", (w.value, &w.evidence)),
                        );
                        assert_eq!(g, w, "{src} at +{later}s");
                    }
                    (Err(g), Err(w)) => assert_eq!(g, w, "{src} at +{later}s"),
                    _ => panic!("{src} at +{later}s: native {got:?}, Rhai {want:?}"),
                }
                compared += 1;
                // Nothing but time passes: before the announced wake, the answer is the first one.
                if let (Ok(first), Ok(w)) = (&first, &want)
                    && !script.reads_the_clock()
                    && first.wake.is_none_or(|t| fixture.2.as_second() + later < t.as_second())
                {
                    assert_eq!(
                        w.value, first.value,
                        "{src}: changed at +{later}s before its wake {:?}",
                        first.wake
                    );
                }
            }
        }
    }
    assert!(compared > 50_000);
}

#[test]
fn conditions_of_other_shapes_run_in_rhai() {
    let engine = ScriptEngine::default();
    for src in [
        "let x = metric(\"loss\"); x > 1.0",
        "count(\"loss\") + 1 > 5",
        "fn f() { true } f()",
        "over_budget(#{maxRuntime: \"3h\"})",
        "labels.team == \"fraud\"",
        "metric(\"loss\") % 2.0 > 1.0",
    ] {
        assert!(engine.compile("r", src).unwrap().native.is_none(), "{src}");
    }
}

/// The thread keeps the last policy context for the next frame (`frame::frame_env`): each condition must
/// still see its own policy's, through switches between policies on one thread and on both paths.
#[test]
fn each_condition_sees_its_own_policy_context_when_policies_alternate() {
    let (job, priced, now) = doc_fixture();
    let env = |price: Option<f64>| {
        Arc::new(crate::history::job::PolicyEnv {
            calendar: crate::units::calendar::Calendar::new(jiff::tz::TimeZone::UTC, vec![]),
            gpu_hour_cost: price,
            assume_gpus: None,
        })
    };
    let (cheap, unpriced) = (env(Some(0.001)), env(None));
    let native = ScriptEngine::default();
    let mut rhai_only = ScriptEngine::default();
    rhai_only.set_native_conditions(false);
    let script = native.compile("cost", "cost() > 1.0").expect("compiles");
    let mut slot = Some(job);
    for engine in [&native, &rhai_only] {
        for (env, want) in
            [(&priced, true), (&cheap, false), (&cheap, false), (&priced, true), (&unpriced, false)]
        {
            let got = engine.eval_condition(&script, &mut slot, env, now).expect("evaluates").value;
            assert_eq!(got, want, "cost() > 1.0 at {:?} $/GPU-hour", env.gpu_hour_cost);
        }
    }
}

/// Issue 43: `metric("loss") > "abc"`, `metric("loss") == "NaN"` and `labels.team == 1` were quietly false.
/// Where the types are plain, `validate` refuses them; where only the data shows them, the evaluation fails
/// (a counted, reported rule error), never a quiet false.
#[test]
fn comparisons_of_different_types_are_refused_or_fail() {
    for src in [
        r#"metric("loss") > "abc""#,
        r#"metric("loss") == "NaN""#,
        "labels.team == 1",
        r#"labels["team"] != 1.5"#,
        "progress() > 10.0 && phase() == 3",
        r#""x" < true"#,
    ] {
        let found = problems(src, ScriptContext::default());
        assert_eq!(found.len(), 1, "{src}: {found:?}");
        assert!(found[0].contains("compares") && found[0].contains("always"), "{src}: {found:?}");
    }
    // Like with like, and `()`, pass.
    for src in
        [r#"labels.team == "1""#, r#"metric("loss") > 2"#, r#"phase() == "Running""#, "let x = (); x == ()"]
    {
        assert_eq!(problems(src, ScriptContext::default()), Vec::<String>::new(), "{src}");
    }
    // Types only the data shows: an error at evaluation, in Rhai and natively compiled alike.
    let engine = ScriptEngine::default();
    for src in [
        r#"let t = if progress() > 0.0 { "abc" } else { 1 }; metric("loss") > t"#,
        "let n = 1; labels.team == n",
        r#"let b = true; let s = label("team"); s != b"#,
    ] {
        let e = eval(&engine, src).unwrap_err();
        assert!(e.message.contains("compares") && e.message.contains("never true"), "{src}: {e}");
    }
}

/// The metric names a script watches, for `validate` and the replay summary.
#[test]
fn metric_arguments_are_the_constant_names_of_metric_functions() {
    let engine = ScriptEngine::default();
    let script = engine
        .compile(
            "r",
            r#"metric("loss") > 2.0 * best("eval_loss") && plateau("lsos", "2h") && label("team") == "x""#,
        )
        .unwrap();
    let names: Vec<(String, &str)> =
        engine.metric_arguments(&script).into_iter().map(|(n, _, _, f)| (n, f)).collect();
    assert_eq!(names, [("loss".into(), "metric"), ("eval_loss".into(), "best"), ("lsos".into(), "plateau")]);
}
