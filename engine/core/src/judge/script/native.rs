//! Conditions compiled to native code. Most `when` expressions are comparisons and boolean combinations of
//! host-function calls with constant arguments (`metric("loss") > 2.0 && runtime() > 86400.0`); those run
//! here as a small typed tree instead of through Rhai's interpreter, calling the same host functions
//! ([`super::host`]) in the same order, so value, evidence and errors are Rhai's (a property test compares
//! the two on generated expressions). Anything else, and any evaluation that fails, runs in Rhai.
//!
//! The tree also knows how each value moves with time alone: `runtime()` grows one second per second,
//! `hour()` changes only on quarter hours, `metric(…)` only with a sample. So a comparison can say when it
//! may next change its answer (`runtime() > 86400.0`: at the job's start plus a day), and such a condition
//! needs no `eval_interval` rounds, only that wake.

use rhai::{Expr, FnCallExpr, ImmutableString, Stmt};

use super::frame::{HostResult, with_frame};
use super::host;
use crate::time::Timestamp;

/// A compiled condition (its root is boolean).
#[derive(Clone, Debug)]
pub(super) struct Condition {
    root: Node,
    /// Some comparison moves with time in a way the wake cannot follow (`runtime() * runtime()`): the
    /// evaluator keeps re-evaluating it every `eval_interval`.
    reads_the_clock: bool,
}

/// A value's type, known at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ty {
    Float,
    Int,
    Bool,
    Text,
}

/// How a value can move with time alone, between samples, known at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Drift {
    /// Only a sample (or the job's object) changes it.
    Fixed,
    /// Changes at known instants (`hour()`).
    Steps,
    /// Piecewise linear in time with a known slope (`runtime()`, `cost()`), perhaps with steps.
    Linear,
    /// Anything else (a product of two clocks, `now()`).
    Any,
}

#[derive(Clone, Debug)]
enum Node {
    Float(f64),
    Int(i64),
    Bool(bool),
    Text(ImmutableString),
    Host(Host),
    /// `finite(x)` of any number.
    Finite(Box<Node>),
    /// `labels["key"]`, `annotations["key"]`.
    Labels(ImmutableString),
    Annotations(ImmutableString),
    Not(Box<Node>),
    And(Vec<Node>),
    Or(Vec<Node>),
    Compare(Cmp, Box<Node>, Box<Node>),
    /// Float arithmetic (at least one side is a float, as in Rhai's mixed operators).
    Arith(Op, Box<Node>, Box<Node>),
    Neg(Box<Node>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

type Str = ImmutableString;

/// A host function call with constant arguments.
#[derive(Clone, Debug)]
enum Host {
    Metric(Str),
    Best(Str),
    BestIn(Str, Str),
    WindowMean(Str, i64),
    WindowMin(Str, i64),
    WindowMax(Str, i64),
    WindowStd(Str, i64),
    Slope(Str, i64),
    Ema(Str),
    Count(Str),
    SinceImprovement(Str),
    Progress,
    Eta,
    Step,
    TotalSteps,
    Epoch,
    Runtime,
    Silence,
    SinceCheckpoint,
    CheckpointStep,
    Now,
    Duration(Str),
    Gpus,
    GpuHours,
    Cost,
    Phase,
    Label(Str),
    Annotation(Str),
    Weekday,
    Hour,
    Minute,
    NonFinite(Str),
    Stalled(Str),
    EtaAfter(Str),
    EtaExceeds(Str),
    Diverging(Str, f64),
    DivergingFactor(Str, f64),
    PlateauSamples(Str, i64),
    PlateauSamplesBy(Str, i64, f64),
    PlateauTime(Str, Str),
    PlateauTimeBy(Str, Str, f64),
}

/// A constant argument.
enum Arg<'a> {
    Text(&'a Str),
    Int(i64),
    Float(f64),
}

impl Host {
    fn of(name: &str, args: &[Arg<'_>]) -> Option<Host> {
        use Arg::{Float as F, Int as I, Text as T};
        let t = |s: &Str| s.clone();
        Some(match (name, args) {
            ("metric", [T(m)]) => Host::Metric(t(m)),
            ("best", [T(m)]) => Host::Best(t(m)),
            ("best", [T(m), T(d)]) => Host::BestIn(t(m), t(d)),
            ("window_mean", [T(m), I(n)]) => Host::WindowMean(t(m), *n),
            ("window_min", [T(m), I(n)]) => Host::WindowMin(t(m), *n),
            ("window_max", [T(m), I(n)]) => Host::WindowMax(t(m), *n),
            ("window_std", [T(m), I(n)]) => Host::WindowStd(t(m), *n),
            ("slope", [T(m), I(n)]) => Host::Slope(t(m), *n),
            ("ema", [T(m)]) => Host::Ema(t(m)),
            ("count", [T(m)]) => Host::Count(t(m)),
            ("since_improvement", [T(m)]) => Host::SinceImprovement(t(m)),
            ("progress", []) => Host::Progress,
            ("eta", []) => Host::Eta,
            ("step", []) => Host::Step,
            ("total_steps", []) => Host::TotalSteps,
            ("epoch", []) => Host::Epoch,
            ("runtime", []) => Host::Runtime,
            ("silence", []) => Host::Silence,
            ("since_checkpoint", []) => Host::SinceCheckpoint,
            ("checkpoint_step", []) => Host::CheckpointStep,
            ("now", []) => Host::Now,
            ("duration", [T(d)]) => Host::Duration(t(d)),
            ("gpus", []) => Host::Gpus,
            ("gpu_hours", []) => Host::GpuHours,
            ("cost", []) => Host::Cost,
            ("phase", []) => Host::Phase,
            ("label", [T(k)]) => Host::Label(t(k)),
            ("annotation", [T(k)]) => Host::Annotation(t(k)),
            ("weekday", []) => Host::Weekday,
            ("hour", []) => Host::Hour,
            ("minute", []) => Host::Minute,
            ("non_finite", [T(m)]) => Host::NonFinite(t(m)),
            ("stalled", [T(d)]) => Host::Stalled(t(d)),
            ("eta_after", [T(d)]) => Host::EtaAfter(t(d)),
            ("eta_exceeds", [T(d)]) => Host::EtaExceeds(t(d)),
            ("diverging", [T(m), F(x)]) => Host::Diverging(t(m), *x),
            ("diverging_factor", [T(m), F(x)]) => Host::DivergingFactor(t(m), *x),
            ("plateau", [T(m), I(n)]) => Host::PlateauSamples(t(m), *n),
            ("plateau", [T(m), I(n), F(d)]) => Host::PlateauSamplesBy(t(m), *n, *d),
            ("plateau", [T(m), T(w)]) => Host::PlateauTime(t(m), t(w)),
            ("plateau", [T(m), T(w), F(d)]) => Host::PlateauTimeBy(t(m), t(w), *d),
            _ => return None,
        })
    }

    fn ty(&self) -> Ty {
        match self {
            Host::Count(_) | Host::Now | Host::Weekday | Host::Hour | Host::Minute => Ty::Int,
            Host::Phase | Host::Label(_) | Host::Annotation(_) => Ty::Text,
            Host::NonFinite(_)
            | Host::Stalled(_)
            | Host::EtaAfter(_)
            | Host::EtaExceeds(_)
            | Host::Diverging(..)
            | Host::DivergingFactor(..)
            | Host::PlateauSamples(..)
            | Host::PlateauSamplesBy(..)
            | Host::PlateauTime(..)
            | Host::PlateauTimeBy(..) => Ty::Bool,
            _ => Ty::Float,
        }
    }

    /// How the answer moves with time. Detector functions whose answer changes with time (`stalled`,
    /// `eta_exceeds`) record their own wake, so they are `Fixed` here.
    fn drift(&self) -> Drift {
        match self {
            Host::Runtime
            | Host::Silence
            | Host::SinceImprovement(_)
            | Host::SinceCheckpoint
            | Host::GpuHours
            | Host::Cost => Drift::Linear,
            // Whole seconds, read at an instant that need not be one: a slope would announce a crossing up
            // to a second late, and a step at every second would wake the job every second. Rounds, then.
            Host::Now => Drift::Any,
            Host::Weekday | Host::Hour | Host::Minute => Drift::Steps,
            _ => Drift::Fixed,
        }
    }

    fn call(&self) -> HostResult<Value> {
        use Value::{Bool as B, Float as F, Int as I, Text as T};
        Ok(match self {
            Host::Metric(m) => F(host::metric(m)?),
            Host::Best(m) => F(host::best(m)?),
            Host::BestIn(m, d) => F(host::best_in(m, d)?),
            Host::WindowMean(m, n) => F(host::window_mean(m, *n)?),
            Host::WindowMin(m, n) => F(host::window_min(m, *n)?),
            Host::WindowMax(m, n) => F(host::window_max(m, *n)?),
            Host::WindowStd(m, n) => F(host::window_std(m, *n)?),
            Host::Slope(m, n) => F(host::slope(m, *n)?),
            Host::Ema(m) => F(host::ema(m)?),
            Host::Count(m) => I(host::count(m)?),
            Host::SinceImprovement(m) => F(host::since_improvement(m)?),
            Host::Progress => F(host::progress()?),
            Host::Eta => F(host::eta()?),
            Host::Step => F(host::step()?),
            Host::TotalSteps => F(host::total_steps()?),
            Host::Epoch => F(host::epoch()?),
            Host::Runtime => F(host::runtime()?),
            Host::Silence => F(host::silence()?),
            Host::SinceCheckpoint => F(host::since_checkpoint()?),
            Host::CheckpointStep => F(host::checkpoint_step()?),
            Host::Now => I(host::now()?),
            Host::Duration(d) => F(host::duration(d)?),
            Host::Gpus => F(host::gpus()?),
            Host::GpuHours => F(host::gpu_hours()?),
            Host::Cost => F(host::cost()?),
            Host::Phase => T(host::phase()?),
            Host::Label(k) => T(host::label(k)?),
            Host::Annotation(k) => T(host::annotation(k)?),
            Host::Weekday => I(host::weekday()?),
            Host::Hour => I(host::hour()?),
            Host::Minute => I(host::minute()?),
            Host::NonFinite(m) => B(host::non_finite(m)?),
            Host::Stalled(d) => B(host::stalled(d)?),
            Host::EtaAfter(d) => B(host::eta_after(d)?),
            Host::EtaExceeds(d) => B(host::eta_exceeds(d)?),
            Host::Diverging(m, x) => B(host::diverging(m, *x)?),
            Host::DivergingFactor(m, x) => B(host::diverging_factor(m, *x)?),
            Host::PlateauSamples(m, n) => B(host::plateau_samples(m, *n)?),
            Host::PlateauSamplesBy(m, n, d) => B(host::plateau_samples_by(m, *n, *d)?),
            Host::PlateauTime(m, w) => B(host::plateau_time(m, w)?),
            Host::PlateauTimeBy(m, w, d) => B(host::plateau_time_by(m, w, *d)?),
        })
    }

    /// How the value just read moves from `now` on (see [`Motion`]).
    fn motion(&self, value: &Value, now: Timestamp) -> HostResult<Motion> {
        let per_hour_of_runtime = |rate: f64| -> HostResult<Motion> {
            if !value.as_f64().is_finite() {
                return Ok(Motion::FIXED);
            }
            let start = with_frame(|f| f.job.snapshot.running_since.unwrap_or(f.job.first_seen))?;
            // Runtime is 0 until a start in the future, then grows.
            Ok(if start > now { Motion { step: Some(start), ..Motion::FIXED } } else { Motion::slope(rate) })
        };
        match self {
            Host::Runtime => per_hour_of_runtime(1.0),
            Host::GpuHours => {
                let gpus = host::gpus()?;
                per_hour_of_runtime(gpus / 3600.0)
            }
            Host::Cost => {
                let gpus = host::gpus()?;
                let price = with_frame(|f| f.env.gpu_hour_cost.unwrap_or(f64::NAN))?;
                per_hour_of_runtime(gpus * price / 3600.0)
            }
            // Zero until a start in the future, then one second per second.
            Host::SinceCheckpoint => {
                let origin = host::since_checkpoint_origin()?;
                Ok(if origin > now {
                    Motion { step: Some(origin), ..Motion::FIXED }
                } else {
                    Motion::slope(1.0)
                })
            }
            Host::Silence | Host::SinceImprovement(_) => {
                Ok(if value.as_f64().is_finite() { Motion::slope(1.0) } else { Motion::FIXED })
            }
            // Every modern time zone's offset is a whole number of quarter hours (local mean times before
            // 1900 aside): the local hour and weekday change only on a UTC quarter hour, the minute on a UTC
            // minute.
            Host::Weekday | Host::Hour => Ok(Motion { step: next_multiple(now, 900), ..Motion::FIXED }),
            Host::Minute => Ok(Motion { step: next_multiple(now, 60), ..Motion::FIXED }),
            // Its drift is `Any` (rounds judge it): announce nothing, rather than a crossing that is wrong.
            Host::Now => Ok(Motion::UNKNOWN),
            _ => Ok(Motion::FIXED),
        }
    }
}

fn next_multiple(now: Timestamp, seconds: i64) -> Option<Timestamp> {
    Timestamp::from_second((now.as_second().div_euclid(seconds) + 1) * seconds).ok()
}

#[derive(Clone, Debug, PartialEq)]
enum Value {
    Float(f64),
    Int(i64),
    Bool(bool),
    Text(ImmutableString),
}

impl Value {
    fn as_f64(&self) -> f64 {
        match self {
            Value::Float(x) => *x,
            Value::Int(i) => *i as f64,
            _ => f64::NAN,
        }
    }
}

/// How a number moves with time alone from the evaluation instant: `value + slope × t` until `step`, when
/// it may jump; `unknown` when neither describes it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Motion {
    slope: f64,
    step: Option<Timestamp>,
    unknown: bool,
}

impl Motion {
    const FIXED: Motion = Motion { slope: 0.0, step: None, unknown: false };
    const UNKNOWN: Motion = Motion { slope: 0.0, step: None, unknown: true };

    fn slope(slope: f64) -> Motion {
        if slope.is_finite() { Motion { slope, ..Motion::FIXED } } else { Motion::FIXED }
    }

    fn is_fixed(&self) -> bool {
        self.slope == 0.0 && self.step.is_none() && !self.unknown
    }

    fn first_step(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

// ---- compiling ----------------------------------------------------------------------------------------

/// Compiles a script's AST when it is one boolean expression of the supported shapes.
pub(super) fn compile(ast: &rhai::AST) -> Option<Condition> {
    if ast.iter_functions().next().is_some() {
        return None;
    }
    let [statement] = ast.statements() else { return None };
    let (root, ty) = match statement {
        Stmt::Expr(e) => node(e)?,
        Stmt::FnCall(call, _) => call_node(call)?,
        _ => return None,
    };
    if ty != Ty::Bool {
        return None;
    }
    let reads_the_clock = clock_bound(&root);
    Some(Condition { root, reads_the_clock })
}

/// Whether some comparison or `finite()` in the tree moves with time in a way [`Motion`] cannot follow.
fn clock_bound(node: &Node) -> bool {
    match node {
        Node::Compare(_, a, b) => drift(a).max(drift(b)) == Drift::Any,
        Node::Finite(x) => drift(x) == Drift::Any,
        Node::Host(h) => h.drift() == Drift::Any,
        Node::Not(x) => clock_bound(x),
        Node::And(xs) | Node::Or(xs) => xs.iter().any(clock_bound),
        _ => false,
    }
}

fn drift(node: &Node) -> Drift {
    match node {
        Node::Float(_)
        | Node::Int(_)
        | Node::Bool(_)
        | Node::Text(_)
        | Node::Labels(_)
        | Node::Annotations(_) => Drift::Fixed,
        Node::Host(h) => h.drift(),
        Node::Neg(x) => drift(x),
        Node::Arith(op, a, b) => {
            let (a, b) = (drift(a), drift(b));
            match op {
                Op::Add | Op::Sub => a.max(b),
                Op::Mul if a == Drift::Fixed || b == Drift::Fixed => a.max(b),
                Op::Div if b == Drift::Fixed => a,
                Op::Mul | Op::Div if a <= Drift::Steps && b <= Drift::Steps => Drift::Steps,
                _ => Drift::Any,
            }
        }
        // Booleans inside comparisons (`(a > b) == true`) are judged where they are compared.
        Node::Compare(..) | Node::Finite(_) | Node::Not(_) | Node::And(_) | Node::Or(_) => {
            if clock_bound(node) { Drift::Any } else { Drift::Fixed }
        }
    }
}

fn node(e: &Expr) -> Option<(Node, Ty)> {
    Some(match e {
        Expr::BoolConstant(b, _) => (Node::Bool(*b), Ty::Bool),
        Expr::IntegerConstant(i, _) => (Node::Int(*i), Ty::Int),
        Expr::FloatConstant(f, _) => (Node::Float(**f), Ty::Float),
        Expr::StringConstant(s, _) => (Node::Text(s.clone()), Ty::Text),
        Expr::Index(bin, _, _) => {
            let (Expr::Variable(var, _, _), Expr::StringConstant(key, _)) = (&bin.lhs, &bin.rhs) else {
                return None;
            };
            if !var.2.is_empty() {
                return None;
            }
            match var.1.as_str() {
                "labels" => (Node::Labels(key.clone()), Ty::Text),
                "annotations" => (Node::Annotations(key.clone()), Ty::Text),
                _ => return None,
            }
        }
        Expr::And(xs, _) | Expr::Or(xs, _) => {
            let mut nodes = Vec::with_capacity(xs.len());
            for x in xs.iter() {
                let (n, ty) = node(x)?;
                if ty != Ty::Bool {
                    return None;
                }
                nodes.push(n);
            }
            let n = if matches!(e, Expr::And(..)) { Node::And(nodes) } else { Node::Or(nodes) };
            (n, Ty::Bool)
        }
        Expr::FnCall(call, _) => call_node(call)?,
        _ => return None,
    })
}

fn call_node(call: &FnCallExpr) -> Option<(Node, Ty)> {
    if call.is_qualified() {
        return None;
    }
    let name = call.name.as_str();
    let args = call.args.as_slice();
    if call.is_operator_call()
        || matches!(name, "!" | "-" | "+" | "*" | "/" | "<" | "<=" | ">" | ">=" | "==" | "!=")
    {
        return operator(name, args);
    }
    if name == "finite" {
        let [x] = args else { return None };
        let (x, ty) = node(x)?;
        return matches!(ty, Ty::Float | Ty::Int).then(|| (Node::Finite(Box::new(x)), Ty::Bool));
    }
    let mut constants = Vec::with_capacity(args.len());
    for a in args {
        constants.push(match a {
            Expr::StringConstant(s, _) => Arg::Text(s),
            Expr::IntegerConstant(i, _) => Arg::Int(*i),
            Expr::FloatConstant(f, _) => Arg::Float(**f),
            _ => return None,
        });
    }
    let host = Host::of(name, &constants)?;
    // `duration("30h")` is a constant: read once here, not at every evaluation. A text that does not read
    // stays a call, so the evaluation fails and Rhai reports the error its way.
    if let Host::Duration(text) = &host
        && let Ok(seconds) = host::duration(text)
    {
        return Some((Node::Float(seconds), Ty::Float));
    }
    let ty = host.ty();
    Some((Node::Host(host), ty))
}

fn operator(name: &str, args: &[Expr]) -> Option<(Node, Ty)> {
    match args {
        [x] => {
            let (x, ty) = node(x)?;
            match (name, ty) {
                ("!", Ty::Bool) => Some((Node::Not(Box::new(x)), Ty::Bool)),
                ("-", Ty::Float) => Some((Node::Neg(Box::new(x)), Ty::Float)),
                _ => None,
            }
        }
        [a, b] => {
            let (a, ta) = node(a)?;
            let (b, tb) = node(b)?;
            let numbers = matches!(ta, Ty::Float | Ty::Int) && matches!(tb, Ty::Float | Ty::Int);
            let cmp = match name {
                "<" => Some(Cmp::Lt),
                "<=" => Some(Cmp::Le),
                ">" => Some(Cmp::Gt),
                ">=" => Some(Cmp::Ge),
                "==" => Some(Cmp::Eq),
                "!=" => Some(Cmp::Ne),
                _ => None,
            };
            if let Some(cmp) = cmp {
                let equality = matches!(cmp, Cmp::Eq | Cmp::Ne);
                let comparable = numbers || (ta == tb && equality && matches!(ta, Ty::Text | Ty::Bool));
                return comparable.then(|| (Node::Compare(cmp, Box::new(a), Box::new(b)), Ty::Bool));
            }
            let op = match name {
                "+" => Op::Add,
                "-" => Op::Sub,
                "*" => Op::Mul,
                "/" => Op::Div,
                _ => return None,
            };
            // Integer arithmetic is checked in Rhai (overflow, division by zero): left to Rhai.
            (numbers && (ta == Ty::Float || tb == Ty::Float))
                .then(|| (Node::Arith(op, Box::new(a), Box::new(b)), Ty::Float))
        }
        _ => None,
    }
}

// ---- evaluating ---------------------------------------------------------------------------------------

impl Condition {
    /// Whether some comparison moves with time in a way the wake cannot follow (see the field).
    pub(super) fn reads_the_clock(&self) -> bool {
        self.reads_the_clock
    }

    /// Evaluates inside the installed frame. The earliest instant a comparison may change its answer with
    /// time alone is folded into the frame's wake. An error means: run the script in Rhai instead.
    pub(super) fn eval(&self, now: Timestamp) -> HostResult<bool> {
        let mut wake = None;
        let value = eval(&self.root, now, &mut wake)?.0;
        if let Some(w) = wake {
            with_frame(|f| f.wake = Some(f.wake.map_or(w, |old: Timestamp| old.min(w))))?;
        }
        match value {
            Value::Bool(b) => Ok(b),
            _ => Err("not a boolean".into()),
        }
    }
}

fn eval(node: &Node, now: Timestamp, wake: &mut Option<Timestamp>) -> HostResult<(Value, Motion)> {
    let fixed = |v: Value| Ok((v, Motion::FIXED));
    match node {
        Node::Float(x) => fixed(Value::Float(*x)),
        Node::Int(i) => fixed(Value::Int(*i)),
        Node::Bool(b) => fixed(Value::Bool(*b)),
        Node::Text(s) => fixed(Value::Text(s.clone())),
        Node::Labels(k) => fixed(Value::Text(host::label(k)?)),
        Node::Annotations(k) => fixed(Value::Text(host::annotation(k)?)),
        Node::Host(h) => {
            let v = h.call()?;
            // A detector function records its own wake (`stalled`, `eta_exceeds`).
            if matches!(v, Value::Bool(_)) {
                return fixed(v);
            }
            let motion = h.motion(&v, now)?;
            Ok((v, motion))
        }
        Node::Finite(x) => {
            // A finite number moving linearly stays finite, and NaN and ±Inf stay; only a step (a division by
            // `minute()` that was 0) can change it.
            let (v, motion) = eval(x, now, wake)?;
            if !motion.unknown {
                *wake = Motion::first_step(*wake, motion.step);
            }
            fixed(Value::Bool(match v {
                Value::Float(x) => host::finite(x),
                Value::Int(i) => host::finite_int(i),
                _ => return Err("finite() of a non-number".into()),
            }))
        }
        Node::Not(x) => match eval(x, now, wake)?.0 {
            Value::Bool(b) => fixed(Value::Bool(!b)),
            _ => Err("! of a non-boolean".into()),
        },
        Node::And(xs) | Node::Or(xs) => {
            let stop_at = matches!(node, Node::Or(_));
            for x in xs {
                match eval(x, now, wake)?.0 {
                    Value::Bool(b) if b == stop_at => return fixed(Value::Bool(b)),
                    Value::Bool(_) => {}
                    _ => return Err("&& or || of a non-boolean".into()),
                }
            }
            fixed(Value::Bool(!stop_at))
        }
        Node::Compare(cmp, a, b) => {
            let (a, ma) = eval(a, now, wake)?;
            let (b, mb) = eval(b, now, wake)?;
            let answer = compare(*cmp, &a, &b)?;
            let (x, y) = (a.as_f64(), b.as_f64());
            let gap = Motion {
                slope: ma.slope - mb.slope,
                step: Motion::first_step(ma.step, mb.step),
                unknown: ma.unknown || mb.unknown,
            };
            if x.is_finite() && y.is_finite() {
                note_crossing(wake, now, x - y, gap);
            } else {
                // A non-finite side changes only at a step of its own (see `Node::Arith`).
                note_crossing(wake, now, 0.0, Motion { slope: 0.0, ..gap });
            }
            fixed(Value::Bool(answer))
        }
        Node::Arith(op, a, b) => {
            let (a, ma) = eval(a, now, wake)?;
            let (b, mb) = eval(b, now, wake)?;
            let (x, y) = (a.as_f64(), b.as_f64());
            let value = match op {
                Op::Add => x + y,
                Op::Sub => x - y,
                Op::Mul => x * y,
                Op::Div => x / y,
            };
            let step = Motion::first_step(ma.step, mb.step);
            let unknown = ma.unknown || mb.unknown;
            let motion = if !value.is_finite() {
                // NaN and ±Inf stay what they are while the finite parts move, until one of those crosses
                // zero in a product or quotient (`silence() * inf` turns from -inf to +inf).
                let flips = |v: f64, m: Motion| {
                    if matches!(op, Op::Mul | Op::Div) && v.is_finite() {
                        zero_crossing(now, v, m.slope)
                    } else {
                        None
                    }
                };
                let step = Motion::first_step(step, Motion::first_step(flips(x, ma), flips(y, mb)));
                Motion { slope: 0.0, step, unknown }
            } else {
                match op {
                    Op::Add => Motion { slope: ma.slope + mb.slope, step, unknown },
                    Op::Sub => Motion { slope: ma.slope - mb.slope, step, unknown },
                    Op::Mul if mb.is_fixed() => Motion { slope: ma.slope * y, ..ma },
                    Op::Mul if ma.is_fixed() => Motion { slope: mb.slope * x, ..mb },
                    Op::Div if mb.is_fixed() => Motion { slope: ma.slope / y, ..ma },
                    Op::Mul | Op::Div if ma.slope == 0.0 && mb.slope == 0.0 => {
                        Motion { slope: 0.0, step, unknown }
                    }
                    _ => Motion::UNKNOWN,
                }
            };
            Ok((Value::Float(value), motion))
        }
        Node::Neg(x) => {
            let (v, m) = eval(x, now, wake)?;
            Ok((Value::Float(-v.as_f64()), Motion { slope: -m.slope, ..m }))
        }
    }
}

/// The comparison as Rhai makes it: IEEE 754 for numbers (an integer side as a float, like the registered
/// comparisons), exact for two integers, equality for strings and booleans.
fn compare(cmp: Cmp, a: &Value, b: &Value) -> HostResult<bool> {
    fn by<T: PartialOrd>(cmp: Cmp, a: T, b: T) -> bool {
        match cmp {
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
            Cmp::Eq => a == b,
            Cmp::Ne => a != b,
        }
    }
    Ok(match (a, b) {
        (Value::Int(x), Value::Int(y)) => by(cmp, x, y),
        (Value::Float(_) | Value::Int(_), Value::Float(_) | Value::Int(_)) => by(cmp, a.as_f64(), b.as_f64()),
        (Value::Text(x), Value::Text(y)) if matches!(cmp, Cmp::Eq | Cmp::Ne) => by(cmp, x, y),
        (Value::Bool(x), Value::Bool(y)) if matches!(cmp, Cmp::Eq | Cmp::Ne) => by(cmp, x, y),
        _ => return Err("incomparable values".into()),
    })
}

/// Folds the instant a comparison of `gap` (left − right, now) against 0 may change into `wake`. An
/// unknown motion adds nothing: only a condition that [`Condition::reads_the_clock`] has one, and the
/// evaluator's rounds re-evaluate it.
fn note_crossing(wake: &mut Option<Timestamp>, now: Timestamp, gap: f64, motion: Motion) {
    if motion.unknown {
        return;
    }
    let at = Motion::first_step(motion.step, zero_crossing(now, gap, motion.slope));
    *wake = Motion::first_step(*wake, at);
}

/// When `value + slope × t` reaches 0 (or just after, when it is 0 now): the answer of `<`, `<=`, `==`, …
/// against 0, and the sign of a product with ±Inf, change there. `None` when it moves away from 0.
fn zero_crossing(now: Timestamp, value: f64, slope: f64) -> Option<Timestamp> {
    if slope == 0.0 {
        None
    } else if value == 0.0 {
        crossing_second(now, 0.0)
    } else if (value < 0.0) == (slope > 0.0) {
        crossing_second(now, -value / slope)
    } else {
        None
    }
}

/// The first whole second at or after `now + seconds`, and at least one second after `now`: timers run
/// on seconds, and a strict comparison that is equal at the crossing changes just after it.
fn crossing_second(now: Timestamp, seconds: f64) -> Option<Timestamp> {
    let at = (now.as_nanosecond() as f64 / 1e9 + seconds).ceil();
    if !at.is_finite() || at > i64::MAX as f64 {
        return None;
    }
    let at = (at as i64).max(now.as_second() + 1);
    Timestamp::from_second(at).ok()
}
