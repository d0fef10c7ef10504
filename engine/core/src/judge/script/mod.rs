//! Rhai conditions: a hardened engine, compiled once per policy version, with host functions over the job.
//!
//! The engine starts from `Engine::new_raw()` (no module resolver, so no `import` of files; no time
//! package, so scripts read only the evaluation clock) plus the core language, logic, math, string, array
//! and map packages. Every limit is explicit ([`Limits`]) so tests and production behave alike, and a
//! wall-clock deadline stops runaway scripts. `print`/`debug` go to tracing.
//!
//! Host functions read the job being evaluated from a thread-local [`Frame`] that the evaluator installs
//! for the duration of one evaluation ([`ScriptEngine::eval_condition`]); the job's data is moved in and
//! back out, so nothing is copied and no `unsafe` is needed. Each function is declared once in
//! [`BUILTINS`] with its signature, documentation, an example and the example's expected value; a test runs
//! every example, VRL style.

mod builtins;
mod check;
mod frame;
mod host;
mod job_maps;
mod native;

pub use builtins::BUILTINS;
pub use check::ScriptContext;
pub(crate) use check::edit_distance;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use rhai::packages::{
    BasicArrayPackage, BasicMapPackage, BasicMathPackage, CorePackage, LogicPackage, MoreStringPackage,
    Package,
};
use rhai::{Dynamic, Engine, EvalAltResult, Position, Scope};

use crate::history::job::{JobData, PolicyEnv};
use crate::judge::detectors::Finding;
use crate::time::Timestamp;

use frame::{FRAME, Frame};

/// Explicit resource limits for rule scripts.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Rhai operations one evaluation may run (the real bound on a script's work).
    pub max_operations: u64,
    /// Deepest nesting of function calls.
    pub max_call_levels: usize,
    /// Deepest nesting of expressions at the top level.
    pub max_expr_depth: usize,
    /// Deepest nesting of expressions inside functions.
    pub max_function_expr_depth: usize,
    /// Longest string, in bytes.
    pub max_string_size: usize,
    /// Most elements in an array.
    pub max_array_size: usize,
    /// Most entries in an object map.
    pub max_map_size: usize,
    /// Most variables in scope at any instant.
    pub max_variables: usize,
    /// Most functions a script may define.
    pub max_functions: usize,
    /// Wall-clock budget of one evaluation.
    pub deadline: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_operations: 50_000,
            max_call_levels: 16,
            max_expr_depth: 64,
            max_function_expr_depth: 32,
            max_string_size: 16 * 1024,
            max_array_size: 4096,
            max_map_size: 512,
            max_variables: 128,
            max_functions: 32,
            // Generous: the operations limit is the real bound; a tight wall-clock budget would make replay
            // and `trainwarden test` results depend on machine load.
            deadline: std::time::Duration::from_millis(250),
        }
    }
}

/// A script problem, located: which rule, and line:column inside its `when`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rule {rule:?}, line {line}:{column}: {message}")]
pub struct ScriptError {
    pub rule: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub kind: ScriptErrorKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptErrorKind {
    Compile,
    /// A limit (operations, depth, sizes, deadline) stopped the script.
    Limit,
    Runtime,
}

/// The hardened engine shared by all policies (it is `Send + Sync`).
pub struct ScriptEngine {
    engine: Engine,
    limits: Limits,
    /// What scripts may call, for [`ScriptEngine::check`].
    callables: check::Callables,
    /// Whether conditions compiled to native code run natively (see [`native`]).
    native_conditions: bool,
}

impl std::fmt::Debug for ScriptEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptEngine").field("limits", &self.limits).finish()
    }
}

/// A compiled `when`.
#[derive(Clone, Debug)]
pub struct CompiledScript {
    pub rule: String,
    ast: rhai::AST,
    uses_labels: bool,
    uses_annotations: bool,
    /// What the AST shows (see `check::reads_the_clock`), for when the condition runs in Rhai.
    reads_the_clock_in_rhai: bool,
    /// Whether it calls a GPU function (see `check::reads_gpus`).
    reads_gpus: bool,
    /// Whether it calls a Kueue queue function (see `check::reads_queue`).
    reads_queue: bool,
    /// The condition compiled to native code, when it has one of the shapes [`native`] knows.
    native: Option<Arc<native::Condition>>,
}

impl CompiledScript {
    /// Whether time alone may change its answer in a way no wake announces: only then does the evaluator
    /// re-run it every `eval_interval`. Compiled, it announces its wakes unless it multiplies clocks or
    /// compares `now()`; run in Rhai, any call of `hour()`, `runtime()`, … reads the clock.
    pub fn reads_the_clock(&self) -> bool {
        self.reads_the_clock_when(true)
    }

    /// Whether it reads the job's GPU readings (`gpu_util()`, `hang()`, …).
    pub fn reads_gpus(&self) -> bool {
        self.reads_gpus
    }

    /// Whether it reads the demand queued behind the job in Kueue (`queue_pending()`, …).
    pub fn reads_queue(&self) -> bool {
        self.reads_queue
    }

    /// [`CompiledScript::reads_the_clock`] for an engine that runs compiled conditions natively or not
    /// ([`ScriptEngine::set_native_conditions`]).
    pub fn reads_the_clock_when(&self, native_conditions: bool) -> bool {
        match &self.native {
            Some(n) if native_conditions => n.reads_the_clock(),
            _ => self.reads_the_clock_in_rhai,
        }
    }
}

/// Result of one evaluation.
#[derive(Debug, PartialEq)]
pub struct ScriptOutcome {
    pub value: bool,
    pub evidence: Vec<Finding>,
    /// See [`Frame::wake`].
    pub wake: Option<Timestamp>,
}

impl Default for ScriptEngine {
    fn default() -> Self {
        ScriptEngine::new(Limits::default())
    }
}

impl ScriptEngine {
    /// A sandboxed engine under `limits`: Rhai's basic packages plus [`BUILTINS`]; no modules, no I/O.
    pub fn new(limits: Limits) -> Self {
        let mut engine = Engine::new_raw();
        for package in [
            CorePackage::new().as_shared_module(),
            LogicPackage::new().as_shared_module(),
            BasicMathPackage::new().as_shared_module(),
            MoreStringPackage::new().as_shared_module(),
            BasicArrayPackage::new().as_shared_module(),
            BasicMapPackage::new().as_shared_module(),
        ] {
            engine.register_global_module(package);
        }
        engine
            .set_max_operations(limits.max_operations)
            .set_max_call_levels(limits.max_call_levels)
            .set_max_expr_depths(limits.max_expr_depth, limits.max_function_expr_depth)
            .set_max_string_size(limits.max_string_size)
            .set_max_array_size(limits.max_array_size)
            .set_max_map_size(limits.max_map_size)
            .set_max_variables(limits.max_variables)
            .set_max_functions(limits.max_functions)
            .set_max_modules(0)
            .set_strict_variables(true)
            .set_fail_on_invalid_map_property(true);
        // Modules are off (no resolver, max 0); rejecting the keywords makes that a compile error with a position.
        engine.disable_symbol("import").disable_symbol("export");
        engine.on_print(|s| tracing::info!(target: "trainwarden::script", "{s}"));
        engine
            .on_debug(|s, source, pos| tracing::debug!(target: "trainwarden::script", ?source, %pos, "{s}"));
        engine.on_progress(|ops| {
            // Reading the clock on every operation would dominate cheap scripts; every 256 is plenty.
            if ops % 256 != 0 {
                return None;
            }
            let expired = FRAME.with(|cell| {
                cell.try_borrow()
                    .ok()
                    .and_then(|f| {
                        f.as_ref().and_then(|f| f.deadline).map(|deadline| Instant::now() > deadline)
                    })
                    .unwrap_or(false)
            });
            expired.then(|| Dynamic::from("deadline"))
        });
        // Fast operators bypass registered overloads; the IEEE comparisons below must win.
        engine.set_fast_operators(false);
        register_ieee_comparisons(&mut engine);
        check::register_type_mismatch_errors(&mut engine);
        for builtin in BUILTINS {
            (builtin.register)(&mut engine);
        }
        job_maps::register(&mut engine);
        let callables = check::Callables::of(&engine);
        ScriptEngine { engine, limits, callables, native_conditions: true }
    }

    /// Run conditions of the common shapes natively (the default), or every condition in Rhai.
    pub fn set_native_conditions(&mut self, on: bool) {
        self.native_conditions = on;
    }

    /// See [`ScriptEngine::set_native_conditions`].
    pub fn native_conditions(&self) -> bool {
        self.native_conditions
    }

    /// The limits scripts run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn scope(
        &self,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
        which: (bool, bool),
    ) -> Scope<'static> {
        // Plain variables, not constants: the optimizer would fold compile-time constants into the AST.
        let mut scope = Scope::new();
        if which.0 {
            scope.push("labels", job_maps::JobMap::new(labels));
        }
        if which.1 {
            scope.push("annotations", job_maps::JobMap::new(annotations));
        }
        scope
    }

    /// Compiles a rule's `when`. Errors carry the rule name and line:column inside the script.
    pub fn compile(&self, rule: &str, source: &str) -> Result<CompiledScript, ScriptError> {
        let empty = BTreeMap::new();
        let scope = self.scope(&empty, &empty, (true, true));
        let ast = self.engine.compile_with_scope(&scope, source).map_err(|e| {
            let (line, column) = line_column(e.position());
            ScriptError {
                rule: rule.to_string(),
                line,
                column,
                message: e.err_type().to_string(),
                kind: ScriptErrorKind::Compile,
            }
        })?;
        let native = native::compile(&ast).map(Arc::new);
        Ok(CompiledScript {
            rule: rule.to_string(),
            uses_labels: source.contains("labels"),
            uses_annotations: source.contains("annotations"),
            reads_the_clock_in_rhai: check::reads_the_clock(&ast),
            reads_gpus: check::reads_gpus(&ast),
            reads_queue: check::reads_queue(&ast),
            native,
            ast,
        })
    }

    /// The compile-time checks of a compiled `when` (the `check` module): unknown functions, wrong
    /// argument counts, invalid constant arguments of host functions, a condition that cannot be true or
    /// false. Every problem, in source order; empty means the script will run.
    pub fn check(&self, script: &CompiledScript, context: &ScriptContext) -> Vec<ScriptError> {
        check::check(&script.ast, &self.callables, context)
            .into_iter()
            .map(|p| {
                let (line, column) = line_column(p.pos);
                ScriptError {
                    rule: script.rule.clone(),
                    line,
                    column,
                    message: p.message,
                    kind: ScriptErrorKind::Compile,
                }
            })
            .collect()
    }

    /// The constant metric names the script's host calls watch, with the line and column of each and the
    /// function it is given to (`metric`, `plateau`, …), in source order.
    pub fn metric_arguments(&self, script: &CompiledScript) -> Vec<(String, usize, usize, &'static str)> {
        check::metric_arguments(&script.ast)
            .into_iter()
            .map(|(name, pos, function)| {
                let (line, column) = line_column(pos);
                (name, line, column, function)
            })
            .collect()
    }

    /// Evaluates a compiled condition for one job. The job's data is moved into the frame and handed back
    /// through `job` whatever the outcome.
    pub fn eval_condition(
        &self,
        script: &CompiledScript,
        job: &mut Option<Box<JobData>>,
        env: &Arc<PolicyEnv>,
        now: Timestamp,
    ) -> Result<ScriptOutcome, ScriptError> {
        let Some(data) = job.take() else {
            return Err(runtime_error(&script.rule, Position::NONE, "no job data".into()));
        };
        FRAME.with(|cell| {
            *cell.borrow_mut() = Some(Frame {
                job: data,
                env: frame::frame_env(env),
                now,
                deadline: None,
                evidence: Vec::new(),
                wake: None,
            });
        });
        // The job must come back out of the frame whatever happens, even if evaluation unwinds.
        struct Restore<'a> {
            job: &'a mut Option<Box<JobData>>,
            evidence: Vec<Finding>,
            wake: Option<Timestamp>,
        }
        impl Restore<'_> {
            fn take_back(&mut self) {
                if let Some(frame) = FRAME.with(|cell| cell.borrow_mut().take()) {
                    *self.job = Some(frame.job);
                    self.evidence = frame.evidence;
                    self.wake = frame.wake;
                    frame::keep_env(frame.env);
                }
            }
        }
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.take_back();
            }
        }
        let mut restore = Restore { job, evidence: Vec::new(), wake: None };
        if let Some(native) = script.native.as_ref().filter(|_| self.native_conditions) {
            if let Ok(value) = native.eval(now) {
                restore.take_back();
                let evidence = std::mem::take(&mut restore.evidence);
                return Ok(ScriptOutcome { value, evidence, wake: restore.wake });
            }
            // A host function failed: Rhai runs the condition from the start and reports the error its way.
            FRAME.with(|cell| {
                if let Some(frame) = cell.borrow_mut().as_mut() {
                    frame.evidence.clear();
                    frame.wake = None;
                }
            });
        }
        let which = (script.uses_labels, script.uses_annotations);
        let mut scope = FRAME.with(|cell| match cell.borrow_mut().as_mut() {
            Some(frame) => {
                frame.deadline = Some(Instant::now() + self.limits.deadline);
                self.scope(&frame.job.snapshot.labels, &frame.job.snapshot.annotations, which)
            }
            None => Scope::new(),
        });
        let result = self.engine.eval_ast_with_scope::<Dynamic>(&mut scope, &script.ast);
        restore.take_back();
        let evidence = std::mem::take(&mut restore.evidence);
        let wake = restore.wake;
        drop(restore);
        let value = result.map_err(|e| classify(&script.rule, &e))?;
        match value.as_bool() {
            Ok(b) => Ok(ScriptOutcome { value: b, evidence, wake }),
            Err(_) => Err(runtime_error(
                &script.rule,
                Position::new(1, 1),
                format!("the condition must be true or false, but it was {}", describe_value(&value)),
            )),
        }
    }
}

/// Rhai's checked float comparisons are relative-epsilon (`(x - y) / max(|x|, |y|) > ε`), which makes every
/// comparison with an infinite value false — `metric("loss") > 10` would miss an exploded loss — and treats
/// values within ε as equal. Metrics need plain IEEE 754 comparisons, so the operators are registered for
/// float/float and float/int pairs; registered functions take precedence over the built-ins once fast
/// operators are off.
fn register_ieee_comparisons(engine: &mut Engine) {
    macro_rules! ops {
        ($($op:literal => $f:expr),* $(,)?) => {$(
            engine.register_fn($op, |x: f64, y: f64| -> bool { $f(x, y) });
            engine.register_fn($op, |x: f64, y: i64| -> bool { $f(x, y as f64) });
            engine.register_fn($op, |x: i64, y: f64| -> bool { $f(x as f64, y) });
        )*};
    }
    ops!(
        ">" => |x: f64, y: f64| x > y,
        ">=" => |x: f64, y: f64| x >= y,
        "<" => |x: f64, y: f64| x < y,
        "<=" => |x: f64, y: f64| x <= y,
        "==" => |x: f64, y: f64| x == y,
        "!=" => |x: f64, y: f64| x != y,
    );
}

/// A value as a person reads it: `the integer 2`, `the string "x"`, `nothing (())`.
fn describe_value(value: &Dynamic) -> String {
    let shown = crate::error::clip_tokens(&value.to_string());
    if value.is_unit() {
        "nothing (())".into()
    } else if value.is_int() {
        format!("the integer {shown}")
    } else if value.is_float() {
        format!("the number {shown}")
    } else if value.is_string() {
        format!("the string {shown:?}")
    } else if value.is_array() {
        "an array".into()
    } else if value.is_map() {
        "an object map".into()
    } else {
        format!("a value of type {}", friendly_type(value.type_name()))
    }
}

/// Rhai's Rust type names as script types: `&str | ImmutableString | String` is a string, `i64` an integer.
fn friendly_type(rust: &str) -> &str {
    match rust.trim() {
        "&str | ImmutableString | String" | "ImmutableString" | "string" | "&str" => "string",
        "i64" | "int" => "integer",
        "f64" | "float" => "float",
        "bool" => "bool",
        "()" => "()",
        "char" => "char",
        "array" | "Array" | "rhai::Array" => "array",
        "map" | "Map" | "rhai::Map" => "map",
        other => other.rsplit("::").next().unwrap_or(other),
    }
}

/// `Function not found: metric (&str | ImmutableString | String, i64, i64)` as a person reads it:
/// `no function metric(string, integer, integer)`.
fn function_not_found(signature: &str) -> String {
    let signature = signature.trim();
    let (name, args) = match signature.split_once(" (") {
        Some((name, rest)) => (name, rest.strip_suffix(')').unwrap_or(rest)),
        None => (signature, ""),
    };
    // Split on the commas between arguments; a union type has no commas, only `|`.
    let args: Vec<&str> =
        if args.trim().is_empty() { Vec::new() } else { args.split(',').map(friendly_type).collect() };
    format!("no function {name}({}) for these argument types", args.join(", "))
}

fn line_column(pos: Position) -> (usize, usize) {
    (pos.line().unwrap_or(0), pos.position().unwrap_or(0))
}

fn runtime_error(rule: &str, pos: Position, message: String) -> ScriptError {
    let (line, column) = line_column(pos);
    ScriptError { rule: rule.to_string(), line, column, message, kind: ScriptErrorKind::Runtime }
}

fn classify(rule: &str, err: &EvalAltResult) -> ScriptError {
    let pos = err.position();
    let (line, column) = line_column(pos);
    let (kind, message) = match err {
        EvalAltResult::ErrorTerminated(..) => {
            (ScriptErrorKind::Limit, "exceeded the evaluation deadline".to_string())
        }
        EvalAltResult::ErrorTooManyOperations(..) => {
            (ScriptErrorKind::Limit, "exceeded the operations limit".to_string())
        }
        EvalAltResult::ErrorStackOverflow(..) => {
            (ScriptErrorKind::Limit, "exceeded the call depth limit".to_string())
        }
        EvalAltResult::ErrorDataTooLarge(what, ..) => {
            (ScriptErrorKind::Limit, format!("{what} exceeds its size limit"))
        }
        EvalAltResult::ErrorTooManyVariables(..) => {
            (ScriptErrorKind::Limit, "exceeded the variables limit".to_string())
        }
        EvalAltResult::ErrorInFunctionCall(name, _, inner, _) => {
            let inner = classify(rule, inner);
            (inner.kind, format!("in {name}(): {}", inner.message))
        }
        // A host function's own message (`invalid duration "5x": …`), without Rhai's "Runtime error:" prefix.
        EvalAltResult::ErrorRuntime(value, _) => {
            (ScriptErrorKind::Runtime, crate::error::clip_tokens(&value.to_string()))
        }
        EvalAltResult::ErrorFunctionNotFound(signature, _) => {
            (ScriptErrorKind::Runtime, function_not_found(signature))
        }
        other => (
            ScriptErrorKind::Runtime,
            crate::error::clip_tokens(other.to_string().split(" (line ").next().unwrap_or_default()),
        ),
    };
    ScriptError { rule: rule.to_string(), line, column, message, kind }
}

#[cfg(test)]
mod tests;
