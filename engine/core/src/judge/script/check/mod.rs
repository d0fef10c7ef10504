//! Compile-time checks of a `when`, so that `validate` means "this runs": every call names a function that
//! exists with that many arguments; a host function's constant arguments are valid (durations, deadlines,
//! counts, modes, budgets) and of the right type; a time window is not shorter than the sampling interval
//! (as for `uses:` detectors); and the condition does not end in something that is plainly not true/false.
//! What passes can still fail at evaluation only on data (a variable argument, a script-defined function).
//!
//! The host functions' parameters are declared in [`HOST_SIGNATURES`]; a test keeps that table and the
//! registered functions identical.

use std::collections::{BTreeMap, BTreeSet};

use rhai::{ASTNode, Engine, Expr, FnCallExpr, Position, Stmt};

use crate::history::metric_series::WINDOW;
use crate::judge::detectors;
use crate::units::duration::PolicyDuration;

mod types;

pub(super) use types::register_type_mismatch_errors;
use types::{check_comparison, check_result};

/// What a script is checked against besides the engine: the policy settings that make an argument invalid.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScriptContext {
    /// Windows shorter than this have no sample to judge (zero: not checked).
    pub sampling_interval: PolicyDuration,
    /// `spec.gpuHourCost` is set (a cost budget needs it).
    pub has_gpu_hour_cost: bool,
}

/// One problem found by the checks, at a position inside the script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Problem {
    pub pos: Position,
    pub message: String,
}

/// What one parameter of a host function accepts; constant arguments are checked against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Param {
    /// A metric's canonical name: a non-empty string.
    Metric,
    /// A label or annotation key: a string.
    Key,
    /// A duration such as "30m" (zero allowed).
    Duration,
    /// A time window such as "30m": longer than 0 and not shorter than the sampling interval.
    Window,
    /// A duration longer than 0 that is not about progress samples (GPU readings come every poll), so not
    /// checked against the sampling interval.
    Span,
    /// An RFC 3339 time, such as "2026-12-01T09:00:00+01:00".
    Deadline,
    /// "min" or "max".
    Mode,
    /// A sample count: an integer of at least 1.
    Count,
    /// A sample count `plateau()` can judge on the kept history: 1 to WINDOW - 1.
    PlateauCount,
    /// A float of at least 0.
    MinDelta,
    /// A float greater than 1.
    Factor,
    /// A utilization in percent: a float above 0 and at most 100.
    Percent,
    /// Any float.
    Float,
    /// An integer or a float.
    Number,
    /// An object map of `over_budget` parameters.
    Budget,
}

/// What a host function returns, to know whether a condition ends in true/false.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Returns {
    Bool,
    Float,
    Int,
    Text,
}

/// One overload of a host function.
#[derive(Clone, Copy, Debug)]
pub(super) struct Signature {
    pub name: &'static str,
    pub params: &'static [Param],
    pub returns: Returns,
}

const fn sig(name: &'static str, params: &'static [Param], returns: Returns) -> Signature {
    Signature { name, params, returns }
}

use Param::*;
use Returns::{Bool, Float as F, Int, Text};

/// Every overload of every host function in [`super::BUILTINS`], with what its parameters accept.
pub(super) const HOST_SIGNATURES: &[Signature] = &[
    sig("metric", &[Metric], F),
    sig("best", &[Metric], F),
    sig("best", &[Metric, Mode], F),
    sig("window_mean", &[Metric, Count], F),
    sig("window_min", &[Metric, Count], F),
    sig("window_max", &[Metric, Count], F),
    sig("window_std", &[Metric, Count], F),
    sig("slope", &[Metric, Count], F),
    sig("ema", &[Metric], F),
    sig("count", &[Metric], Int),
    sig("since_improvement", &[Metric], F),
    sig("finite", &[Number], Bool),
    sig("progress", &[], F),
    sig("cohort_size", &[], Int),
    sig("cohort_median", &[Metric], F),
    sig("cohort_best", &[Metric], F),
    sig("cohort_rank", &[], F),
    sig("cohort_rank", &[Metric], F),
    sig("eta", &[], F),
    sig("step", &[], F),
    sig("total_steps", &[], F),
    sig("epoch", &[], F),
    sig("runtime", &[], F),
    sig("silence", &[], F),
    sig("since_checkpoint", &[], F),
    sig("checkpoint_step", &[], F),
    sig("now", &[], Int),
    sig("duration", &[Duration], F),
    sig("gpus", &[], F),
    sig("gpu_util", &[], F),
    sig("gpu_util_min", &[], F),
    sig("gpu_power", &[], F),
    sig("queue_pending", &[], F),
    sig("queue_pending_gpus", &[], F),
    sig("gpu_idle", &[Percent, Span], Bool),
    sig("gpu_idle_any", &[Percent, Span], Bool),
    sig("hang", &[Window], Bool),
    sig("gpu_hours", &[], F),
    sig("cost", &[], F),
    sig("phase", &[], Text),
    sig("label", &[Key], Text),
    sig("annotation", &[Key], Text),
    sig("weekday", &[], Int),
    sig("hour", &[], Int),
    sig("minute", &[], Int),
    sig("non_finite", &[Metric], Bool),
    sig("stalled", &[Window], Bool),
    sig("eta_after", &[Deadline], Bool),
    sig("eta_exceeds", &[Duration], Bool),
    sig("diverging", &[Metric, Float], Bool),
    sig("diverging_factor", &[Metric, Factor], Bool),
    sig("plateau", &[Metric, PlateauCount], Bool),
    sig("plateau", &[Metric, PlateauCount, MinDelta], Bool),
    sig("plateau", &[Metric, Window], Bool),
    sig("plateau", &[Metric, Window, MinDelta], Bool),
    sig("over_budget", &[Budget], Bool),
];

/// Host functions whose answer changes with time alone and that announce no wake time: a script calling
/// one must be re-evaluated every `eval_interval`. The others judge samples, or (`stalled`, `eta_exceeds`,
/// `over_budget`) record the moment their answer will change (`Frame::wake`). A test evaluates every host
/// function at later times to keep this list complete.
pub(super) const CLOCK_READERS: &[&str] = &[
    "since_improvement",
    "since_checkpoint",
    "runtime",
    "silence",
    "now",
    "gpu_hours",
    "cost",
    "weekday",
    "hour",
    "minute",
];

/// Calls whose callee is only known at run time (a function pointer, a string to evaluate): they may reach
/// a clock reader.
const DYNAMIC_CALLS: &[&str] = &["call", "curry", "eval", "Fn"];

/// Host functions that read the job's GPU readings.
pub(super) const GPU_READERS: &[&str] =
    &["gpu_util", "gpu_util_min", "gpu_power", "gpu_idle", "gpu_idle_any", "hang"];

/// Whether a script may read the job's GPU readings: it calls a [`GPU_READERS`] function or a dynamic call.
pub(super) fn reads_gpus(ast: &rhai::AST) -> bool {
    calls_any(ast, GPU_READERS)
}

/// Host functions that read the demand queued behind the job in Kueue.
pub(super) const QUEUE_READERS: &[&str] = &["queue_pending", "queue_pending_gpus"];

/// Whether a script may read the job's Kueue queue: it calls a [`QUEUE_READERS`] function or a dynamic call.
pub(super) fn reads_queue(ast: &rhai::AST) -> bool {
    calls_any(ast, QUEUE_READERS)
}

/// Whether a script may change its answer with time alone, without a sample or an announced wake: it calls
/// a [`CLOCK_READERS`] function (directly, in a function of its own, or method style) or a dynamic call.
pub(super) fn reads_the_clock(ast: &rhai::AST) -> bool {
    calls_any(ast, CLOCK_READERS)
}

/// Whether a script calls one of `names` (directly, in a function of its own, or method style), or makes a
/// dynamic call that may reach one.
fn calls_any(ast: &rhai::AST, names: &[&str]) -> bool {
    let mut reads = false;
    ast.walk(&mut |path: &[ASTNode]| {
        let name = match path.last() {
            Some(
                ASTNode::Expr(Expr::FnCall(call, _) | Expr::MethodCall(call, _))
                | ASTNode::Stmt(Stmt::FnCall(call, _)),
            ) => call.name.as_str(),
            _ => return true,
        };
        reads = names.contains(&name) || DYNAMIC_CALLS.contains(&name);
        !reads
    });
    reads
}

/// Functions Rhai resolves itself (not in any module), with the argument counts it accepts.
const KEYWORD_FUNCTIONS: &[(&str, &[usize])] = &[
    ("print", &[0, 1]),
    ("debug", &[0, 1]),
    ("type_of", &[1]),
    ("Fn", &[1]),
    ("is_def_var", &[1]),
    ("is_def_fn", &[2]),
    ("is_shared", &[1]),
    ("eval", &[1]),
];

/// The functions a script may call and how many arguments each takes (Rhai's packages plus the host's).
pub(super) struct Callables {
    arities: BTreeMap<String, BTreeSet<usize>>,
}

impl Callables {
    pub(super) fn of(engine: &Engine) -> Self {
        let mut arities: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
        for (name, n) in engine.collect_fn_metadata(
            None,
            |f| Some((f.metadata.name.to_string(), f.metadata.num_params)),
            true,
        ) {
            arities.entry(name).or_default().insert(n);
        }
        for (name, counts) in KEYWORD_FUNCTIONS {
            arities.entry((*name).to_string()).or_default().extend(counts.iter().copied());
        }
        Callables { arities }
    }

    #[cfg(test)]
    pub(super) fn arities(&self, name: &str) -> Option<&BTreeSet<usize>> {
        self.arities.get(name)
    }
}

/// Checks a compiled script; every problem found, in source order.
pub(super) fn check(ast: &rhai::AST, callables: &Callables, context: &ScriptContext) -> Vec<Problem> {
    let mut script_fns: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for f in ast.iter_functions() {
        script_fns.entry(f.name.to_string()).or_default().insert(f.params.len());
    }
    // A variable holding a function pointer can be called like a function; such calls are not checked.
    let mut variables = BTreeSet::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Stmt(Stmt::Var(var, ..))) = path.last() {
            variables.insert(var.0.name.to_string());
        }
        true
    });
    let mut problems = Vec::new();
    // Method calls (`x.f(…)`) are not checked: `f` may be a function stored in a map property, and a script
    // function called that way binds `x` to `this` rather than to a parameter.
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Expr(Expr::FnCall(call, pos)) | ASTNode::Stmt(Stmt::FnCall(call, pos))) =
            path.last()
        {
            check_call(call, *pos, &script_fns, &variables, callables, context, &mut problems);
        }
        true
    });
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Expr(Expr::FnCall(call, pos)) | ASTNode::Stmt(Stmt::FnCall(call, pos))) =
            path.last()
            && let Some(problem) = check_comparison(call, *pos)
        {
            problems.push(problem);
        }
        true
    });
    if let Some(problem) = check_result(ast) {
        problems.push(problem);
    }
    problems.sort_by_key(|p| (p.pos.line().unwrap_or(0), p.pos.position().unwrap_or(0)));
    problems.dedup();
    problems
}

fn check_call(
    call: &FnCallExpr,
    pos: Position,
    script_fns: &BTreeMap<String, BTreeSet<usize>>,
    variables: &BTreeSet<String>,
    callables: &Callables,
    context: &ScriptContext,
    problems: &mut Vec<Problem>,
) {
    if call.is_operator_call() || call.is_qualified() {
        return;
    }
    let name = call.name.as_str();
    let n = call.args.len();
    if variables.contains(name) {
        return;
    }
    let known = script_fns.get(name).into_iter().chain(callables.arities.get(name)).flatten().copied();
    let known: BTreeSet<usize> = known.collect();
    // Function pointers: `f.call(x, …)` and `call(f, …)` take any number of arguments.
    if name == "call" || name == "curry" {
        return;
    }
    if known.is_empty() {
        problems.push(Problem { pos, message: unknown_function(name, callables, script_fns) });
        return;
    }
    if !known.contains(&n) {
        problems.push(Problem { pos, message: wrong_arity(name, n, &known) });
        return;
    }
    if !script_fns.contains_key(name) {
        check_host_arguments(call, pos, context, problems);
    }
}

fn unknown_function(
    name: &str,
    callables: &Callables,
    script_fns: &BTreeMap<String, BTreeSet<usize>>,
) -> String {
    let is_identifier = |k: &&String| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let candidates = callables.arities.keys().chain(script_fns.keys()).filter(is_identifier);
    let closest = candidates
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k.clone());
    match closest {
        Some(k) => {
            format!("unknown function {name}(); did you mean {k}()? (`trainwarden functions` lists them)")
        }
        None => {
            format!("unknown function {name}() (`trainwarden functions` lists the functions rules can call)")
        }
    }
}

fn wrong_arity(name: &str, n: usize, known: &BTreeSet<usize>) -> String {
    let host: Vec<String> = HOST_SIGNATURES
        .iter()
        .filter(|s| s.name == name)
        .map(|s| format!("{name}({})", s.params.iter().map(|p| p.noun()).collect::<Vec<_>>().join(", ")))
        .collect();
    let counts: Vec<String> = known.iter().map(ToString::to_string).collect();
    let takes = if host.is_empty() {
        format!("takes {} argument{}", join_or(&counts), if counts == ["1"] { "" } else { "s" })
    } else {
        format!("is called as {}", host.join(" or "))
    };
    format!("{name}() {takes}, but is given {n} argument{}", if n == 1 { "" } else { "s" })
}

fn join_or(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// A literal's value, as far as the checks need it.
enum Constant {
    Text(String),
    Int(i64),
    Float(f64),
    Bool,
    /// An object map; its entries when they are all constants.
    Map(Option<serde_json::Map<String, serde_json::Value>>),
    Other,
}

fn constant(expr: &Expr) -> Option<Constant> {
    Some(match expr {
        Expr::StringConstant(s, _) => Constant::Text(s.to_string()),
        Expr::IntegerConstant(i, _) => Constant::Int(*i),
        Expr::FloatConstant(f, _) => Constant::Float(**f),
        Expr::BoolConstant(..) => Constant::Bool,
        Expr::Map(entries, _) => Constant::Map(constant_map(&entries.0)),
        Expr::Array(..) | Expr::CharConstant(..) | Expr::Unit(..) => Constant::Other,
        Expr::DynamicConstant(d, _) => {
            if d.is_string() {
                Constant::Text(d.to_string())
            } else if let Ok(i) = d.as_int() {
                Constant::Int(i)
            } else if let Ok(f) = d.as_float() {
                Constant::Float(f)
            } else if d.is_bool() {
                Constant::Bool
            } else if d.is_map() {
                Constant::Map(rhai::serde::from_dynamic::<serde_json::Map<String, serde_json::Value>>(d).ok())
            } else {
                Constant::Other
            }
        }
        _ => return None,
    })
}

fn check_host_arguments(
    call: &FnCallExpr,
    pos: Position,
    context: &ScriptContext,
    problems: &mut Vec<Problem>,
) {
    let name = call.name.as_str();
    let overloads: Vec<&Signature> =
        HOST_SIGNATURES.iter().filter(|s| s.name == name && s.params.len() == call.args.len()).collect();
    if overloads.is_empty() {
        return; // a Rhai package function
    }
    // The call is fine if one overload accepts every constant argument. Otherwise the complaints of the
    // first overload whose parameter types fit (its complaints are about values), else of the first one.
    let mut chosen: Option<(bool, Vec<Problem>)> = None;
    for overload in &overloads {
        let mut complaints = Vec::new();
        let mut types_fit = true;
        for (i, (param, arg)) in overload.params.iter().zip(call.args.iter()).enumerate() {
            let Some(value) = constant(arg) else { continue };
            if let Err(complaint) = param.accepts(&value, context) {
                types_fit &= !complaint.is_type;
                let at = if arg.start_position().is_none() { pos } else { arg.start_position() };
                complaints.push(Problem {
                    pos: at,
                    message: format!(
                        "{name}(): argument {} ({}): {}",
                        i + 1,
                        param.noun(),
                        complaint.message
                    ),
                });
            }
        }
        if complaints.is_empty() {
            return;
        }
        if chosen.as_ref().is_none_or(|(fit, _)| !fit && types_fit) {
            chosen = Some((types_fit, complaints));
        }
    }
    problems.extend(chosen.map(|(_, c)| c).unwrap_or_default());
}

/// Why a constant argument is refused: a wrong type, or a wrong value of the right type.
struct Complaint {
    is_type: bool,
    message: String,
}

impl From<String> for Complaint {
    fn from(message: String) -> Self {
        Complaint { is_type: false, message }
    }
}

fn wrong_type(message: String) -> Complaint {
    Complaint { is_type: true, message }
}

impl Param {
    /// How the parameter is named in messages.
    pub(super) fn noun(self) -> &'static str {
        match self {
            Metric => "metric name",
            Key => "key",
            Duration => "duration",
            Window => "window",
            Span => "duration",
            Deadline => "deadline",
            Mode => "\"min\"|\"max\"",
            Count | PlateauCount => "n",
            MinDelta => "min_delta",
            Factor => "factor",
            Percent => "percent",
            Float => "threshold",
            Number => "x",
            Budget => "#{…}",
        }
    }

    fn accepts(self, value: &Constant, context: &ScriptContext) -> Result<(), Complaint> {
        let kind = match value {
            Constant::Text(_) => "a string",
            Constant::Int(_) => "an integer",
            Constant::Float(_) => "a float",
            Constant::Bool => "true/false",
            Constant::Map(_) => "an object map",
            Constant::Other => "a value of another type",
        };
        match (self, value) {
            (Metric, Constant::Text(s)) if s.is_empty() => {
                Err(String::from("a metric name cannot be empty").into())
            }
            (Metric | Key, Constant::Text(_)) => Ok(()),
            (Duration, Constant::Text(s)) => {
                s.parse::<PolicyDuration>().map(drop).map_err(|e| e.to_string().into())
            }
            (Window, Constant::Text(s)) => {
                let window = s.parse::<PolicyDuration>().map_err(|e| Complaint::from(e.to_string()))?;
                if window.is_zero() {
                    Err(String::from("must be longer than 0s").into())
                } else if window < context.sampling_interval {
                    Err(format!(
                        "{window} is shorter than the sampling interval {}: there would be no sample to judge; raise it or set spec.samplingInterval",
                        context.sampling_interval
                    )
                    .into())
                } else {
                    Ok(())
                }
            }
            (Span, Constant::Text(s)) => {
                let d = s.parse::<PolicyDuration>().map_err(|e| Complaint::from(e.to_string()))?;
                if d.is_zero() { Err(String::from("must be longer than 0s").into()) } else { Ok(()) }
            }
            (Deadline, Constant::Text(s)) => detectors::parse_deadline(s).map(drop).map_err(Complaint::from),
            (Mode, Constant::Text(s)) => match s.as_str() {
                "min" | "max" => Ok(()),
                other => Err(format!("must be \"min\" or \"max\", got {other:?}").into()),
            },
            (Count, Constant::Int(n)) => {
                if *n >= 1 {
                    Ok(())
                } else {
                    Err(format!("must be at least 1, got {n}").into())
                }
            }
            (PlateauCount, Constant::Int(n)) => {
                if *n < 1 {
                    Err(format!("must be at least 1, got {n}").into())
                } else if *n >= WINDOW as i64 {
                    Err(format!(
                        "plateau() judges the last {} samples at most, got {n}; use `uses: plateau` for longer windows",
                        WINDOW - 1
                    )
                    .into())
                } else {
                    Ok(())
                }
            }
            (MinDelta, Constant::Float(f)) => {
                if f.is_finite() && *f >= 0.0 {
                    Ok(())
                } else {
                    Err(format!("must be >= 0, got {f}").into())
                }
            }
            (Factor, Constant::Float(f)) => {
                if *f > 1.0 {
                    Ok(())
                } else {
                    Err(format!("must be > 1, got {f}").into())
                }
            }
            (Percent, Constant::Float(f)) => {
                if *f > 0.0 && *f <= 100.0 {
                    Ok(())
                } else {
                    Err(format!("must be a utilization above 0 and at most 100 (percent), got {f}").into())
                }
            }
            (Float, Constant::Float(_)) | (Number, Constant::Int(_) | Constant::Float(_)) => Ok(()),
            (MinDelta | Factor | Percent | Float, Constant::Int(i)) => {
                Err(wrong_type(format!("must be a float, got the integer {i}: write {i}.0")))
            }
            (Budget, Constant::Map(Some(map))) => check_budget(map, context).map_err(Complaint::from),
            (Budget, Constant::Map(None)) => Ok(()),
            (Metric | Key | Duration | Window | Span | Deadline | Mode, _) => {
                Err(wrong_type(format!("must be a string, got {kind}")))
            }
            (Count | PlateauCount, _) => Err(wrong_type(format!("must be an integer, got {kind}"))),
            (MinDelta | Factor | Percent | Float, _) => {
                Err(wrong_type(format!("must be a float, got {kind}")))
            }
            (Number, _) => Err(wrong_type(format!("must be a number, got {kind}"))),
            (Budget, _) => {
                Err(wrong_type(format!("must be an object map such as #{{maxGpuHours: 100.0}}, got {kind}")))
            }
        }
    }
}

/// A map literal's entries as JSON, if they are all constants.
fn constant_map(entries: &[(rhai::Ident, Expr)]) -> Option<serde_json::Map<String, serde_json::Value>> {
    let mut json = serde_json::Map::new();
    for (key, value) in entries {
        let value = match value {
            Expr::StringConstant(s, _) => serde_json::Value::from(s.as_str()),
            Expr::IntegerConstant(i, _) => serde_json::Value::from(*i),
            Expr::FloatConstant(f, _) => serde_json::Value::from(**f),
            Expr::BoolConstant(b, _) => serde_json::Value::from(*b),
            Expr::DynamicConstant(d, _) => rhai::serde::from_dynamic::<serde_json::Value>(d).ok()?,
            _ => return None, // computed at run time
        };
        json.insert(key.name.to_string(), value);
    }
    Some(json)
}

/// An `over_budget(#{…})` literal: the same parameter checks as `uses: over_budget, with: {…}`.
fn check_budget(
    json: &serde_json::Map<String, serde_json::Value>,
    context: &ScriptContext,
) -> Result<(), String> {
    let detector = detectors::build("over_budget", Some(json), "#{…}")
        .map_err(|errs| errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))?;
    if detector.needs_gpu_hour_cost() && !context.has_gpu_hour_cost {
        return Err("a cost budget (maxCost) needs spec.gpuHourCost".into());
    }
    Ok(())
}

/// The constant metric names a script's host calls watch (`metric("loss")`, `plateau("eval_loss", "2h")`),
/// each with its position and the function: what `validate` checks against the names reports carry.
pub(super) fn metric_arguments(ast: &rhai::AST) -> Vec<(String, Position, &'static str)> {
    let mut found = Vec::new();
    ast.walk(&mut |path: &[ASTNode]| {
        if let Some(ASTNode::Expr(Expr::FnCall(call, pos)) | ASTNode::Stmt(Stmt::FnCall(call, pos))) =
            path.last()
            && !call.is_operator_call()
            && !call.is_qualified()
        {
            for signature in HOST_SIGNATURES.iter().filter(|s| s.name == call.name.as_str()) {
                if signature.params.len() != call.args.len() {
                    continue;
                }
                for (param, arg) in signature.params.iter().zip(call.args.iter()) {
                    if let (Param::Metric, Some(Constant::Text(name))) = (param, constant(arg)) {
                        let at = if arg.start_position().is_none() { *pos } else { arg.start_position() };
                        found.push((name, at, signature.name));
                    }
                }
                break;
            }
        }
        true
    });
    found
}

/// Levenshtein distance, for "did you mean".
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb { prev } else { 1 + prev.min(row[j]).min(row[j + 1]) };
            prev = cur;
        }
    }
    row[b.len()]
}
