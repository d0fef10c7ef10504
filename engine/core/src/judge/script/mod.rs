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

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use rhai::packages::{
    BasicArrayPackage, BasicMapPackage, BasicMathPackage, CorePackage, LogicPackage, MoreStringPackage,
    Package,
};
use rhai::{Dynamic, Engine, EvalAltResult, ImmutableString, Map, Position, Scope};

use crate::history::job::{JobData, JobView, PolicyEnv};
use crate::history::series::{Direction, MetricSeries};
use crate::input::sample::JobPhase;
use crate::judge::detectors::{
    self, Detector, DetectorState, DirectionParam, Diverging, EtaAfter, EtaExceeds, Finding, NonFinite,
    Stalled,
};
use crate::time::Timestamp;
use crate::units::duration::Duration;

/// Explicit resource limits for rule scripts.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    pub max_operations: u64,
    pub max_call_levels: usize,
    pub max_expr_depth: usize,
    pub max_function_expr_depth: usize,
    pub max_string_size: usize,
    pub max_array_size: usize,
    pub max_map_size: usize,
    pub max_variables: usize,
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

/// The state host functions see during one evaluation.
pub struct Frame {
    pub job: Box<JobData>,
    pub env: Arc<PolicyEnv>,
    pub now: Timestamp,
    deadline: Instant,
    /// Findings of detector functions that returned true, reported as the rule's reason.
    pub evidence: Vec<Finding>,
    /// The earliest time a time-driven detector function that returned false (`stalled`, ...) would turn
    /// true with no new sample: the evaluator's timer for the rule.
    pub wake: Option<Timestamp>,
}

thread_local! {
    static FRAME: RefCell<Option<Frame>> = const { RefCell::new(None) };
}

fn with_frame<R>(f: impl FnOnce(&mut Frame) -> R) -> Result<R, Box<EvalAltResult>> {
    FRAME.with(|cell| match cell.try_borrow_mut() {
        Ok(mut guard) => match guard.as_mut() {
            Some(frame) => Ok(f(frame)),
            None => Err("trainwarden functions can only be used inside a rule evaluation".into()),
        },
        Err(_) => Err("re-entrant evaluation".into()),
    })
}

type HostResult<T> = Result<T, Box<EvalAltResult>>;

fn view_of(frame: &Frame) -> JobView<'_> {
    frame.job.view(&frame.env, frame.now)
}

fn metric_series<'a>(frame: &'a Frame, name: &str) -> Option<&'a MetricSeries> {
    frame.job.series.metric(name)
}

fn parse_duration(s: &str) -> HostResult<Duration> {
    s.parse::<Duration>().map_err(|e| format!("invalid duration {s:?}: {e}").into())
}

fn parse_direction(mode: &str) -> HostResult<Direction> {
    match mode {
        "min" => Ok(Direction::Min),
        "max" => Ok(Direction::Max),
        other => Err(format!("mode must be \"min\" or \"max\", got {other:?}").into()),
    }
}

/// Runs a stateless detector inside the frame, recording its finding as evidence.
fn detect(detector: &dyn Detector) -> HostResult<bool> {
    with_frame(|frame| {
        let finding = detector.check(&DetectorState::None, &view_of(frame));
        match finding {
            Some(f) => {
                frame.evidence.push(f);
                true
            }
            None => {
                if let Some(t) = detector.wake_at(&DetectorState::None, &view_of(frame)) {
                    frame.wake = Some(frame.wake.map_or(t, |w| w.min(t)));
                }
                false
            }
        }
    })
}

fn window_stat(name: &str, n: i64, pick: fn(&crate::history::series::WindowStats) -> f64) -> HostResult<f64> {
    if n < 1 {
        return Err(format!("the sample count must be at least 1, got {n}").into());
    }
    with_frame(|frame| {
        metric_series(frame, name)
            .and_then(|s| s.stats_last(n as usize))
            .map(|st| pick(&st))
            .unwrap_or(f64::NAN)
    })
}

/// Stateless plateau over the recorded history: the best value of the last `n` samples (or of the samples
/// in the last `duration` before the latest) did not beat the best before them by more than `min_delta`.
fn plateau_fn(name: &str, window: PlateauWindow, min_delta: f64) -> HostResult<bool> {
    if !min_delta.is_finite() || min_delta < 0.0 {
        return Err(format!("min_delta must be >= 0, got {min_delta}").into());
    }
    let verdict = with_frame(|frame| -> HostResult<Option<Finding>> {
        let Some(series) = metric_series(frame, name) else { return Ok(None) };
        let direction = Direction::infer(name);
        let Some((last_at, last)) = series.last() else { return Ok(None) };
        let n = match window {
            PlateauWindow::Samples(n) => {
                if n as usize >= crate::history::series::WINDOW {
                    return Err(format!(
                        "plateau() keeps {} samples; use `uses: plateau` for longer windows",
                        crate::history::series::WINDOW - 1
                    )
                    .into());
                }
                n as usize
            }
            PlateauWindow::Time(d) => {
                let since = crate::time::add_seconds(last_at, -d.as_secs_f64()).unwrap_or(Timestamp::MIN);
                let Some(stats) = series.stats_since(since) else { return Ok(None) };
                if stats.count >= series.window_len() && series.count() > series.window_len() as u64 {
                    return Err(format!(
                        "plateau() window {d} spans more than the {} samples kept; use `uses: plateau`",
                        crate::history::series::WINDOW
                    )
                    .into());
                }
                stats.count
            }
        };
        let (Some(before), Some(recent)) =
            (series.best_before_last(n, direction), series.best_of_last(n, direction))
        else {
            return Ok(None);
        };
        let improvement = match direction {
            Direction::Min => before - recent,
            Direction::Max => recent - before,
        };
        Ok((improvement <= min_delta).then(|| {
            Finding::new(format!(
                "{name} improved by {} over the last {n} samples (best before {}, last {})",
                crate::time::fmt_num(improvement.max(0.0)),
                crate::time::fmt_num(before),
                crate::time::fmt_num(last)
            ))
            .value("improvement", improvement)
        }))
    })??;
    with_frame(|frame| match verdict {
        Some(f) => {
            frame.evidence.push(f);
            true
        }
        None => false,
    })
}

#[derive(Clone, Copy)]
enum PlateauWindow {
    Samples(i64),
    Time(Duration),
}

fn map_to_json(map: &Map) -> HostResult<serde_json::Map<String, serde_json::Value>> {
    let value: serde_json::Value = rhai::serde::from_dynamic(&Dynamic::from_map(map.clone()))?;
    match value {
        serde_json::Value::Object(m) => Ok(m),
        _ => Err("expected an object map".into()),
    }
}

/// One host function: how to call it, what it does, an example and the example's value on the
/// documentation fixture ([`doc_fixture`]).
pub struct Builtin {
    pub signature: &'static str,
    pub doc: &'static str,
    pub example: &'static str,
    pub expected: &'static str,
    register: fn(&mut Engine),
}

/// Every function rule scripts can call, besides Rhai's own.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        signature: "metric(name) -> float",
        doc: "Latest observation of a metric (canonical name); NaN/Inf if the latest report was non-finite, NaN if never reported.",
        example: r#"metric("loss")"#,
        expected: "1.25",
        register: |e| {
            e.register_fn("metric", |name: &str| -> HostResult<f64> {
                with_frame(|f| {
                    metric_series(f, name).and_then(MetricSeries::latest_observation).unwrap_or(f64::NAN)
                })
            });
        },
    },
    Builtin {
        signature: "best(name) -> float, best(name, \"min\"|\"max\") -> float",
        doc: "Best finite value so far; the direction is inferred from the name (accuracy-like names are maximized) unless given.",
        example: r#"best("loss")"#,
        expected: "1.1",
        register: |e| {
            e.register_fn("best", |name: &str| -> HostResult<f64> {
                with_frame(|f| {
                    metric_series(f, name)
                        .and_then(|s| s.best(Direction::infer(name)))
                        .map_or(f64::NAN, |b| b.value)
                })
            });
            e.register_fn("best", |name: &str, mode: &str| -> HostResult<f64> {
                let d = parse_direction(mode)?;
                with_frame(|f| metric_series(f, name).and_then(|s| s.best(d)).map_or(f64::NAN, |b| b.value))
            });
        },
    },
    Builtin {
        signature: "window_mean(name, n) / window_min / window_max / window_std -> float",
        doc: "Mean, minimum, maximum or standard deviation of the last n finite values (at most 64 are kept).",
        example: r#"window_mean("loss", 2)"#,
        expected: "1.225",
        register: |e| {
            e.register_fn("window_mean", |name: &str, n: i64| window_stat(name, n, |s| s.mean));
            e.register_fn("window_min", |name: &str, n: i64| window_stat(name, n, |s| s.min));
            e.register_fn("window_max", |name: &str, n: i64| window_stat(name, n, |s| s.max));
            e.register_fn("window_std", |name: &str, n: i64| window_stat(name, n, |s| s.std));
        },
    },
    Builtin {
        signature: "slope(name, n) -> float",
        doc: "Least-squares slope of the last n finite values, in units per hour (negative = falling).",
        example: r#"slope("loss", 4) < 0"#,
        expected: "true",
        register: |e| {
            e.register_fn("slope", |name: &str, n: i64| {
                window_stat(name, n, |s| s.slope_per_second * 3600.0)
            });
        },
    },
    Builtin {
        signature: "ema(name) -> float",
        doc: "Exponential moving average of the finite values (α = 0.1).",
        example: r#"ema("loss") > 1.2"#,
        expected: "true",
        register: |e| {
            e.register_fn("ema", |name: &str| -> HostResult<f64> {
                with_frame(|f| metric_series(f, name).and_then(MetricSeries::ema).unwrap_or(f64::NAN))
            });
        },
    },
    Builtin {
        signature: "count(name) -> int",
        doc: "Number of finite values of the metric observed so far.",
        example: r#"count("loss")"#,
        expected: "5",
        register: |e| {
            e.register_fn("count", |name: &str| -> HostResult<i64> {
                with_frame(|f| metric_series(f, name).map_or(0, |s| s.count() as i64))
            });
        },
    },
    Builtin {
        signature: "since_improvement(name) -> float",
        doc: "Seconds from the time the metric reached its best value to now.",
        example: r#"since_improvement("loss")"#,
        expected: "180.0",
        register: |e| {
            e.register_fn("since_improvement", |name: &str| -> HostResult<f64> {
                with_frame(|f| {
                    metric_series(f, name)
                        .and_then(|s| s.best(Direction::infer(name)))
                        .map_or(f64::NAN, |b| crate::time::seconds(b.at, f.now))
                })
            });
        },
    },
    Builtin {
        signature: "finite(x) -> bool",
        doc: "True unless x is NaN or ±Inf.",
        example: r#"finite(metric("grad_norm"))"#,
        expected: "false",
        register: |e| {
            e.register_fn("finite", |x: f64| x.is_finite());
            e.register_fn("finite", |_: i64| true);
        },
    },
    Builtin {
        signature: "progress() -> float",
        doc: "Latest progress in percent (0–100), NaN if the job never reported it.",
        example: "progress()",
        expected: "42.0",
        register: |e| {
            e.register_fn("progress", || -> HostResult<f64> {
                with_frame(|f| f.job.series.last.and_then(|l| l.progress_percent).unwrap_or(f64::NAN))
            });
        },
    },
    Builtin {
        signature: "eta() -> float",
        doc: "Seconds the job still needs, as of its latest report (NaN if unknown).",
        example: "eta() / 3600",
        expected: "10.0",
        register: |e| {
            e.register_fn("eta", || -> HostResult<f64> {
                with_frame(|f| f.job.series.last.and_then(|l| l.eta_seconds).unwrap_or(f64::NAN))
            });
        },
    },
    Builtin {
        signature: "step() -> float, total_steps() -> float, epoch() -> float",
        doc: "Latest reported training step, total steps and (fractional) epoch; NaN if unknown.",
        example: "step() / total_steps()",
        expected: "0.42",
        register: |e| {
            e.register_fn("step", || -> HostResult<f64> {
                with_frame(|f| f.job.series.last.and_then(|l| l.current_step).unwrap_or(f64::NAN))
            });
            e.register_fn("total_steps", || -> HostResult<f64> {
                with_frame(|f| f.job.series.last.and_then(|l| l.total_steps).unwrap_or(f64::NAN))
            });
            e.register_fn("epoch", || -> HostResult<f64> {
                with_frame(|f| f.job.series.last.and_then(|l| l.current_epoch).unwrap_or(f64::NAN))
            });
        },
    },
    Builtin {
        signature: "runtime() -> float",
        doc: "Seconds since the job last started running (creation or resume).",
        example: "runtime() / 3600",
        expected: "2.0",
        register: |e| {
            e.register_fn("runtime", || -> HostResult<f64> { with_frame(|f| view_of(f).runtime_seconds()) });
        },
    },
    Builtin {
        signature: "silence() -> float",
        doc: "Seconds since the latest progress sample (or the job's start, if later).",
        example: "silence()",
        expected: "60.0",
        register: |e| {
            e.register_fn("silence", || -> HostResult<f64> {
                with_frame(|f| crate::time::seconds(view_of(f).last_activity(), f.now))
            });
        },
    },
    Builtin {
        signature: "now() -> int",
        doc: "Evaluation time in Unix seconds (the stream's clock in replay).",
        example: "now()",
        expected: "1767232800",
        register: |e| {
            e.register_fn("now", || -> HostResult<i64> { with_frame(|f| f.now.as_second()) });
        },
    },
    Builtin {
        signature: "duration(text) -> float",
        doc: "Seconds in a duration such as \"90m\" or \"1h30m\", to compare with runtime(), eta() or silence().",
        example: r#"duration("1h30m")"#,
        expected: "5400.0",
        register: |e| {
            e.register_fn("duration", |s: &str| -> HostResult<f64> { Ok(parse_duration(s)?.as_secs_f64()) });
        },
    },
    Builtin {
        signature: "gpus() -> float, gpu_hours() -> float, cost() -> float",
        doc: "GPUs held (from the job or the policy's assumeGpus), GPU-hours since the last start, and their cost at gpuHourCost. NaN when unknown.",
        example: "cost()",
        expected: "110.0",
        register: |e| {
            e.register_fn("gpus", || -> HostResult<f64> {
                with_frame(|f| view_of(f).gpus.unwrap_or(f64::NAN))
            });
            e.register_fn("gpu_hours", || -> HostResult<f64> {
                with_frame(|f| {
                    let v = view_of(f);
                    v.gpus.map_or(f64::NAN, |g| g * v.runtime_seconds() / 3600.0)
                })
            });
            e.register_fn("cost", || -> HostResult<f64> {
                with_frame(|f| {
                    let v = view_of(f);
                    match (v.gpus, v.gpu_hour_cost) {
                        (Some(g), Some(c)) => g * v.runtime_seconds() / 3600.0 * c,
                        _ => f64::NAN,
                    }
                })
            });
        },
    },
    Builtin {
        signature: "phase() -> string",
        doc: "Running, Suspended, Complete or Failed.",
        example: "phase()",
        expected: "Running",
        register: |e| {
            e.register_fn("phase", || -> HostResult<ImmutableString> {
                with_frame(|f| {
                    match f.job.snapshot.phase {
                        JobPhase::Running => "Running",
                        JobPhase::Suspended => "Suspended",
                        JobPhase::Complete => "Complete",
                        JobPhase::Failed => "Failed",
                    }
                    .into()
                })
            });
        },
    },
    Builtin {
        signature: "label(key) -> string, annotation(key) -> string; variables labels, annotations",
        doc: "A label or annotation of the TrainJob (\"\" if absent). The maps `labels` and `annotations` hold them all.",
        example: r#"label("team") == "fraud" && labels["team"] == "fraud""#,
        expected: "true",
        register: |e| {
            e.register_fn("label", |k: &str| -> HostResult<ImmutableString> {
                with_frame(|f| f.job.snapshot.labels.get(k).map(|v| v.as_str().into()).unwrap_or_default())
            });
            e.register_fn("annotation", |k: &str| -> HostResult<ImmutableString> {
                with_frame(|f| {
                    f.job.snapshot.annotations.get(k).map(|v| v.as_str().into()).unwrap_or_default()
                })
            });
        },
    },
    Builtin {
        signature: "weekday() -> int, hour() -> int, minute() -> int",
        doc: "ISO weekday (1 = Monday … 7 = Sunday), hour and minute of now() in the policy's time zone.",
        example: "weekday() == 4 && hour() == 2",
        expected: "true",
        register: |e| {
            e.register_fn("weekday", || -> HostResult<i64> {
                with_frame(|f| f.env.calendar.weekday_hour(f.now).0 as i64)
            });
            e.register_fn("hour", || -> HostResult<i64> {
                with_frame(|f| f.env.calendar.weekday_hour(f.now).1 as i64)
            });
            e.register_fn("minute", || -> HostResult<i64> {
                with_frame(|f| f.env.calendar.weekday_hour(f.now).2 as i64)
            });
        },
    },
    Builtin {
        signature: "non_finite(metric) -> bool",
        doc: "The detector non_finite: the metric's latest observation is NaN/Inf (\"*\" = any metric).",
        example: r#"non_finite("grad_norm")"#,
        expected: "true",
        register: |e| {
            e.register_fn("non_finite", |metric: &str| {
                detect(&NonFinite { metric: (metric != "*").then(|| metric.to_string()) })
            });
        },
    },
    Builtin {
        signature: "stalled(duration) -> bool",
        doc: "The detector stalled: no progress sample for the duration while the job runs.",
        example: r#"stalled("30m")"#,
        expected: "false",
        register: |e| {
            e.register_fn("stalled", |after: &str| {
                detect(&Stalled { after: parse_duration(after)?, require_first_sample: true })
            });
        },
    },
    Builtin {
        signature: "eta_after(deadline) -> bool, eta_exceeds(duration) -> bool",
        doc: "The ETA detectors: estimated end later than an RFC 3339 deadline, or further away than a duration.",
        example: r#"eta_after("2026-01-01T09:00:00Z") && !eta_exceeds("12h")"#,
        expected: "true",
        register: |e| {
            e.register_fn("eta_after", |deadline: &str| {
                let deadline =
                    detectors::parse_deadline(deadline).map_err(|m| -> Box<EvalAltResult> { m.into() })?;
                detect(&EtaAfter { deadline })
            });
            e.register_fn("eta_exceeds", |d: &str| detect(&EtaExceeds { duration: parse_duration(d)? }));
        },
    },
    Builtin {
        signature: "diverging(metric, threshold) -> bool, diverging_factor(metric, factor) -> bool",
        doc: "The detector diverging: latest value worse than a threshold, or worse than factor × best.",
        example: r#"diverging("loss", 1.15) && !diverging_factor("loss", 2.0)"#,
        expected: "true",
        register: |e| {
            e.register_fn("diverging", |metric: &str, threshold: f64| {
                detect(&Diverging {
                    metric: metric.to_string(),
                    mode: DirectionParam::Auto,
                    threshold: Some(threshold),
                    factor: None,
                    warmup: 0,
                })
            });
            e.register_fn("diverging_factor", |metric: &str, factor: f64| -> HostResult<bool> {
                if factor.is_nan() || factor <= 1.0 {
                    return Err(format!("factor must be > 1, got {factor}").into());
                }
                detect(&Diverging {
                    metric: metric.to_string(),
                    mode: DirectionParam::Auto,
                    threshold: None,
                    factor: Some(factor),
                    warmup: 0,
                })
            });
        },
    },
    Builtin {
        signature: "plateau(metric, n) / plateau(metric, duration) [, min_delta] -> bool",
        doc: "No improvement larger than min_delta (default 0) in the last n samples or the last duration before the latest sample, against the best before them. Works on the kept history (64 samples); `uses: plateau` has no such bound.",
        example: r#"plateau("loss", 2) && !plateau("loss", 4)"#,
        expected: "true",
        register: |e| {
            e.register_fn("plateau", |m: &str, n: i64| plateau_fn(m, PlateauWindow::Samples(n.max(1)), 0.0));
            e.register_fn("plateau", |m: &str, n: i64, d: f64| {
                plateau_fn(m, PlateauWindow::Samples(n.max(1)), d)
            });
            e.register_fn("plateau", |m: &str, w: &str| {
                plateau_fn(m, PlateauWindow::Time(parse_duration(w)?), 0.0)
            });
            e.register_fn("plateau", |m: &str, w: &str, d: f64| {
                plateau_fn(m, PlateauWindow::Time(parse_duration(w)?), d)
            });
        },
    },
    Builtin {
        signature: "over_budget(#{maxRuntime, maxGpuHours, maxCost}) -> bool",
        doc: "The detector over_budget with the same parameters.",
        example: r#"over_budget(#{maxGpuHours: 15.0}) && !over_budget(#{maxRuntime: "3h"})"#,
        expected: "true",
        register: |e| {
            e.register_fn("over_budget", |params: Map| -> HostResult<bool> {
                let json = map_to_json(&params)?;
                if json.contains_key("maxCost") && with_frame(|f| f.env.gpu_hour_cost.is_none())? {
                    return Err("over_budget(#{maxCost}) needs spec.gpuHourCost".into());
                }
                let detector = detectors::build("over_budget", Some(&json), "over_budget()").map_err(
                    |errs| -> Box<EvalAltResult> {
                        errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ").into()
                    },
                )?;
                detect(detector.as_ref())
            });
        },
    },
];

/// The hardened engine shared by all policies (it is `Send + Sync`).
pub struct ScriptEngine {
    engine: Engine,
    limits: Limits,
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
                    .and_then(|f| f.as_ref().map(|f| Instant::now() > f.deadline))
                    .unwrap_or(false)
            });
            expired.then(|| Dynamic::from("deadline"))
        });
        // Fast operators bypass registered overloads; the IEEE comparisons below must win.
        engine.set_fast_operators(false);
        register_ieee_comparisons(&mut engine);
        for builtin in BUILTINS {
            (builtin.register)(&mut engine);
        }
        ScriptEngine { engine, limits }
    }

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
        let to_map = |m: &BTreeMap<String, String>| -> Map {
            m.iter()
                .map(|(k, v)| (k.as_str().into(), Dynamic::from(ImmutableString::from(v.as_str()))))
                .collect()
        };
        if which.0 {
            scope.push("labels", to_map(labels));
        }
        if which.1 {
            scope.push("annotations", to_map(annotations));
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
        Ok(CompiledScript {
            rule: rule.to_string(),
            uses_labels: source.contains("labels"),
            uses_annotations: source.contains("annotations"),
            ast,
        })
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
        let mut scope = self.scope(
            &data.snapshot.labels,
            &data.snapshot.annotations,
            (script.uses_labels, script.uses_annotations),
        );
        FRAME.with(|cell| {
            *cell.borrow_mut() = Some(Frame {
                job: data,
                env: env.clone(),
                now,
                deadline: Instant::now() + self.limits.deadline,
                evidence: Vec::new(),
                wake: None,
            })
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
                }
            }
        }
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.take_back();
            }
        }
        let mut restore = Restore { job, evidence: Vec::new(), wake: None };
        let result = self.engine.eval_ast_with_scope::<Dynamic>(&mut scope, &script.ast);
        restore.take_back();
        let evidence = std::mem::take(&mut restore.evidence);
        let wake = restore.wake;
        drop(restore);
        let value = result.map_err(|e| classify(&script.rule, &e))?;
        match value.as_bool() {
            Ok(b) => Ok(ScriptOutcome { value: b, evidence, wake }),
            Err(type_name) => Err(runtime_error(
                &script.rule,
                Position::new(1, 1),
                format!("the condition must evaluate to true or false, got {type_name} ({value})"),
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
        other => (
            ScriptErrorKind::Runtime,
            other.to_string().split(" (line ").next().unwrap_or_default().to_string(),
        ),
    };
    ScriptError { rule: rule.to_string(), line, column, message, kind }
}

/// The job every builtin example runs against: loss 1.5, 1.3, 1.1, 1.2, 1.25 one per minute from
/// 2026-01-01T01:55Z, grad_norm ended in Inf, progress 42 %, step 420 of 1000, ETA 10 h, 10 GPUs at $5.5,
/// running since 00:00Z, evaluated at 02:00Z (a Thursday), label team=fraud.
#[cfg(test)]
pub(crate) fn doc_fixture() -> (Box<JobData>, Arc<PolicyEnv>, Timestamp) {
    use crate::history::series::JobSeries;
    use crate::input::sample::JobSnapshot;
    use crate::input::sample::{JobKey, Metric, ProgressSample, SampleSource};
    use crate::units::calendar::Calendar;
    let t0 = Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH);
    let at = |m: i64| Timestamp::from_second(t0.as_second() + m * 60).unwrap_or(t0);
    let mut snapshot = JobSnapshot::new(JobKey::new("fraud", "ft-llama"));
    snapshot.labels.insert("team".into(), "fraud".into());
    snapshot.gpus = Some(10.0);
    snapshot.running_since = Some(t0);
    let mut series = JobSeries::new(t0);
    for (i, loss) in [1.5, 1.3, 1.1, 1.2, 1.25].iter().enumerate() {
        let mut s = ProgressSample::empty(at(115 + i as i64), SampleSource::TrainerStatus);
        s.metrics.push(Metric { name: "loss".into(), value: *loss });
        s.metrics.push(Metric { name: "grad_norm".into(), value: if i == 4 { f64::INFINITY } else { 2.0 } });
        s.progress_percent = Some(42.0);
        s.current_step = Some(420.0);
        s.total_steps = Some(1000.0);
        s.eta_seconds = Some(36_000.0);
        series.record(&s);
    }
    let env = PolicyEnv {
        calendar: Calendar::new(jiff::tz::TimeZone::UTC, Vec::new()),
        gpu_hour_cost: Some(5.5),
        assume_gpus: None,
    };
    (Box::new(JobData { snapshot, series, first_seen: t0 }), Arc::new(env), at(120))
}

#[cfg(test)]
mod tests {
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
            })
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
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ScriptErrorKind::Limit, "exceeded the evaluation deadline")
        );

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
}
