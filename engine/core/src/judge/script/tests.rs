//! The sandbox's tests: every builtin example, limits, errors with positions, no clock or files.

use std::collections::BTreeMap;
use std::time::Instant;

use rhai::Dynamic;

use super::builtins::*;
use super::*;

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
    let e = eval(&engine, r#"metric("loss")"#).unwrap_err();
    assert!(e.message.contains("must evaluate to true or false"), "{e}");
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
