//! The types a condition compares, so that a comparison that is always false is not quiet: at compile
//! time the sides whose type the parser's output makes plain (`metric("loss") > "abc"`, `labels.team == 1`)
//! and the value the condition ends in; at run time an error for every comparison of two different types.

use std::collections::BTreeSet;

use rhai::{Dynamic, Engine, Expr, FnCallExpr, Position, Stmt};

use super::{HOST_SIGNATURES, Problem, Returns};

/// The static type of an expression, where the parser's output makes it plain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Static {
    Bool,
    Number,
    Text,
    Nothing,
    Collection,
    Unknown,
}

fn static_type(expr: &Expr) -> Static {
    match expr {
        Expr::BoolConstant(..) | Expr::And(..) | Expr::Or(..) => Static::Bool,
        Expr::IntegerConstant(..) | Expr::FloatConstant(..) => Static::Number,
        Expr::StringConstant(..) | Expr::InterpolatedString(..) | Expr::CharConstant(..) => Static::Text,
        Expr::Unit(..) => Static::Nothing,
        Expr::Array(..) | Expr::Map(..) => Static::Collection,
        Expr::DynamicConstant(d, _) => dynamic_type(d),
        // `labels["team"]`, `labels.team`: label and annotation values are strings ("" when absent).
        Expr::Index(bin, ..) if job_map(&bin.lhs) && matches!(bin.rhs, Expr::StringConstant(..)) => {
            Static::Text
        }
        Expr::Dot(bin, ..) if job_map(&bin.lhs) && matches!(bin.rhs, Expr::Property(..)) => Static::Text,
        Expr::FnCall(call, _) if call.is_operator_call() => match call.name.as_str() {
            "==" | "!=" | "<" | "<=" | ">" | ">=" | "!" | "in" => Static::Bool,
            "+" | "-" | "*" | "/" | "%" | "**" => {
                let types: Vec<Static> = call.args.iter().map(static_type).collect();
                if types.iter().all(|t| *t == Static::Number) {
                    Static::Number
                } else if types.contains(&Static::Text) && call.name == "+" {
                    Static::Text
                } else {
                    Static::Unknown
                }
            }
            _ => Static::Unknown,
        },
        Expr::FnCall(call, _) if !call.is_qualified() => {
            let returns: BTreeSet<_> = HOST_SIGNATURES
                .iter()
                .filter(|s| s.name == call.name.as_str() && s.params.len() == call.args.len())
                .map(|s| s.returns)
                .collect();
            match returns.into_iter().collect::<Vec<_>>().as_slice() {
                [Returns::Bool] => Static::Bool,
                [Returns::Float | Returns::Int] => Static::Number,
                [Returns::Text] => Static::Text,
                _ => Static::Unknown,
            }
        }
        _ => Static::Unknown,
    }
}

fn dynamic_type(d: &Dynamic) -> Static {
    if d.is_bool() {
        Static::Bool
    } else if d.is_int() || d.is_float() {
        Static::Number
    } else if d.is_string() || d.is_char() {
        Static::Text
    } else if d.is_unit() {
        Static::Nothing
    } else if d.is_array() || d.is_map() {
        Static::Collection
    } else {
        Static::Unknown
    }
}

/// The value of a script is its last statement's; a condition that plainly ends in a number, a string or
/// nothing can never be true or false. (A script-defined function defined with a name shadowing a host
/// function is rare enough that host return types are trusted.)
pub(super) fn check_result(ast: &rhai::AST) -> Option<Problem> {
    let last = ast.statements().iter().rev().find(|s| !matches!(s, Stmt::Noop(..)));
    let (ty, pos) = match last {
        None => (Static::Nothing, Position::new(1, 1)),
        Some(Stmt::Expr(e)) => (static_type(e), e.start_position()),
        Some(Stmt::FnCall(call, pos)) => (static_type(&Expr::FnCall(call.clone(), *pos)), *pos),
        Some(Stmt::Var(_, _, pos)) => (Static::Nothing, *pos),
        Some(_) => (Static::Unknown, Position::NONE),
    };
    let what = match ty {
        Static::Bool | Static::Unknown => return None,
        Static::Number => "a number",
        Static::Text => "a string",
        Static::Nothing => "nothing (the last statement has no value)",
        Static::Collection => "an array or map",
    };
    let pos = if pos.is_none() { Position::new(1, 1) } else { pos };
    Some(Problem {
        pos,
        message: format!(
            "the condition must be true or false, but it ends in {what}; compare it, for example `metric(\"loss\") > 2.0`"
        ),
    })
}

/// The comparison operators, whose sides must be of one type.
const COMPARISONS: &[&str] = &["==", "!=", "<", "<=", ">", ">="];

/// Whether `expr` is the `labels` or `annotations` variable (the job's maps of strings).
fn job_map(expr: &Expr) -> bool {
    matches!(expr, Expr::Variable(var, ..) if var.2.is_empty() && matches!(var.1.as_str(), "labels" | "annotations"))
}

/// A comparison whose sides are plainly of different types (`metric("loss") > "abc"`,
/// `labels.team == 1`): Rhai would quietly answer false (true for `!=`), so the rule could never fire (or
/// always would). Sides of unknown type are left to the run-time check ([`register_type_mismatch_errors`]);
/// `()` is left alone (`x == ()` asks whether `x` is nothing).
pub(super) fn check_comparison(call: &FnCallExpr, pos: Position) -> Option<Problem> {
    let op = call.name.as_str();
    if !call.is_operator_call() || !COMPARISONS.contains(&op) || call.args.len() != 2 {
        return None;
    }
    let (a, b) = (static_type(&call.args[0]), static_type(&call.args[1]));
    let noun = |t: Static| match t {
        Static::Number => Some("a number"),
        Static::Text => Some("a string"),
        Static::Bool => Some("true/false"),
        Static::Collection => Some("an array or map"),
        Static::Nothing | Static::Unknown => None,
    };
    let (na, nb) = (noun(a)?, noun(b)?);
    if a == b {
        return None;
    }
    let always = if op == "!=" { "true" } else { "false" };
    let hint = if a == Static::Text || b == Static::Text {
        " (labels and annotations are strings: labels.team == \"1\"; a metric is a number: metric(\"loss\") > 2.0; \
         NaN is caught with !finite(...))"
    } else {
        ""
    };
    Some(Problem {
        pos,
        message: format!(
            "`{op}` compares {na} with {nb}, which is always {always}: values of different types are never equal \
             or ordered; compare like with like{hint}"
        ),
    })
}

/// Registers, for every comparison operator, an overload for each pair of different types a script can
/// compare (number, string, true/false) that fails the evaluation with what was compared. Rhai would answer
/// false (true for `!=`); a rule that can never fire must be an error (counted, reported), not quiet. The
/// engine runs with fast operators off, so registered overloads come before Rhai's built-in fallback.
pub(in crate::judge::script) fn register_type_mismatch_errors(engine: &mut Engine) {
    use rhai::ImmutableString as Str;
    fn mismatch(op: &str, a: &str, b: &str) -> Box<rhai::EvalAltResult> {
        format!(
            "`{op}` compares {a} with {b}, which is never true: values of different types are never equal or \
             ordered (compare like with like)"
        )
        .into()
    }
    macro_rules! pair {
        ($op:literal, $ta:ty, $na:literal, $tb:ty, $nb:literal) => {
            engine.register_fn($op, |_: $ta, _: $tb| -> Result<bool, Box<rhai::EvalAltResult>> {
                Err(mismatch($op, $na, $nb))
            });
            engine.register_fn($op, |_: $tb, _: $ta| -> Result<bool, Box<rhai::EvalAltResult>> {
                Err(mismatch($op, $nb, $na))
            });
        };
    }
    macro_rules! ops {
        ($($op:literal),*) => {$(
            pair!($op, f64, "a number", Str, "a string");
            pair!($op, i64, "an integer", Str, "a string");
            pair!($op, f64, "a number", bool, "true/false");
            pair!($op, i64, "an integer", bool, "true/false");
            pair!($op, Str, "a string", bool, "true/false");
        )*};
    }
    ops!("==", "!=", "<", "<=", ">", ">=");
}
