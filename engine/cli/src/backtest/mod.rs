//! `trainwarden backtest`: policies over a corpus of complete recorded runs — what enforcing them would have
//! saved, and which good runs they would have killed. The arithmetic is `trainwarden_core::backtest`; here
//! are the files, the threads (runs are independent, so files are spread over every core and the totals
//! added up in corpus order), and the output: text, JSON, and a self-contained HTML report ([`html`]).

mod html;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Args;
use trainwarden_core::backtest::outcome::Tolerance;
use trainwarden_core::backtest::report::{Report, ReportBuilder};
use trainwarden_core::backtest::sweep::{self, PolicyFile, Sweep};
use trainwarden_core::backtest::{FileResult, Options, Plan};
use trainwarden_core::{Evaluator, Merge, MergeError, PolicyDuration, StreamRecord};

use crate::commands::{collect_files, config};
use crate::{Output, read, streams};

#[derive(Args)]
pub(crate) struct BacktestArgs {
    /// Policy file (YAML). Repeatable; positional *.yaml / *.yml files are policies too.
    #[arg(long = "policy", value_name = "FILE")]
    policies: Vec<PathBuf>,
    /// Policy files (*.yaml, *.yml) and the corpus: stream files (JSONL, gzip or zstd) or directories of
    /// them (*.jsonl, *.jsonl.gz, *.jsonl.zst, searched recursively). Each job of each stream is one
    /// complete run.
    #[arg(required = true, value_name = "POLICY|CORPUS")]
    paths: Vec<PathBuf>,
    /// The metric regret is measured on (default: the stopping rule's own metric, else loss).
    #[arg(long)]
    target: Option<String>,
    /// A stop is false when the target improved by more than this afterwards: a fraction (0.01) or a
    /// percentage (1%), relative to the best before the stop.
    #[arg(long, default_value = "1%")]
    tolerance: String,
    /// And by at least this much in the metric's own units (default 0: any amount), so that a loss
    /// creeping from 0.0002 to 0.0001 need not count.
    #[arg(long, value_name = "AMOUNT", default_value_t = 0.0)]
    min_improvement: f64,
    /// Try several values of a policy field: PATH=V1,V2,… (PATH relative to spec, rules by name:
    /// rules[loss-plateau].with.window=1h,2h,4h). Repeatable; every combination is evaluated.
    #[arg(long = "set", value_name = "PATH=VALUES")]
    sets: Vec<String>,
    /// text or json (the whole report as one object).
    #[arg(long, value_enum, default_value = "text")]
    output: Output,
    /// Also write a self-contained HTML report (charts, no network) to this file.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Worker threads (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Timer resolution of the replays.
    #[arg(long, default_value = "30s")]
    eval_interval: String,
    /// How far out of order a stream's lines may be (see `replay --max-lateness`).
    #[arg(long, value_name = "DURATION", default_value = "5m")]
    max_lateness: String,
}

/// Names of corpus files in a directory.
fn is_stream_name(name: &str) -> bool {
    [".jsonl", ".jsonl.gz", ".jsonl.zst", ".ndjson"].iter().any(|s| name.ends_with(s))
}

fn is_policy_path(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

pub(crate) fn backtest(args: &BacktestArgs) -> Result<bool, String> {
    let config = config(&args.eval_interval)?;
    let max_lateness: PolicyDuration =
        args.max_lateness.parse().map_err(|e| format!("--max-lateness: {e}"))?;
    if !(args.min_improvement.is_finite() && args.min_improvement >= 0.0) {
        return Err(format!("--min-improvement {}: must be 0 or more", args.min_improvement));
    }
    let tolerance = Tolerance { relative: tolerance(&args.tolerance)?, absolute: args.min_improvement };
    let options = Options { tolerance, target: args.target.clone() };
    let mut policy_paths = args.policies.clone();
    let mut corpus = Vec::new();
    for p in &args.paths {
        if is_policy_path(p) {
            policy_paths.push(p.clone());
        } else if p.is_dir() {
            let before = corpus.len();
            collect_files(p, is_stream_name, &mut corpus)?;
            if corpus.len() == before {
                return Err(format!(
                    "{}: no stream files (*.jsonl, *.jsonl.gz, *.jsonl.zst) in it",
                    p.display()
                ));
            }
        } else if p.is_file() {
            corpus.push(p.clone());
        } else {
            return Err(format!("{}: no such file or directory", p.display()));
        }
    }
    if policy_paths.is_empty() {
        return Err("no policy given (a *.yaml file or --policy FILE)".into());
    }
    if corpus.is_empty() {
        return Err("no corpus given (stream files or directories of them)".into());
    }
    let files = policy_paths
        .iter()
        .map(|p| Ok(PolicyFile { source: p.display().to_string(), text: read(p)? }))
        .collect::<Result<Vec<_>, String>>()?;
    let sweeps = args.sets.iter().map(|s| Sweep::parse(s)).collect::<Result<Vec<_>, _>>()?;
    let engine = Evaluator::new(config.clone());
    let candidates = sweep::candidates(&files, &sweeps, engine.scripts())?;
    let plan = Plan { candidates, config, options };
    let workers =
        args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let report = run(&plan, &corpus, max_lateness, workers.max(1))?;

    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = |e: io::Error| format!("writing output: {e}");
    match args.output {
        Output::Json => writeln!(out, "{}", serde_json::json!({ "backtest": report })).map_err(written)?,
        Output::Text => out.write_all(report.render_text().as_bytes()).map_err(written)?,
    }
    out.flush().map_err(written)?;
    if let Some(path) = &args.html {
        std::fs::write(path, html::render(&report)).map_err(|e| format!("--html {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    let errors = report.rule_errors();
    if errors > 0 {
        eprintln!(
            "error: {} failed; those rules never fired there, so the figures understate what the policies do",
            trainwarden_core::plural(errors, "rule evaluation", "rule evaluations")
        );
        return Ok(false);
    }
    Ok(true)
}

/// `1%` or `0.01`.
fn tolerance(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let value = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("--tolerance {text:?}: expected a fraction (0.01) or a percentage (1%)"))?;
    if !(value.is_finite() && value >= 0.0) {
        return Err(format!("--tolerance {text:?}: must be 0 or more"));
    }
    Ok(value)
}

/// Every file through the plan on `workers` threads; results are added up in corpus order as soon as the
/// ones before them are in, so only the out-of-order ones wait in memory.
fn run(
    plan: &Plan,
    corpus: &[PathBuf],
    max_lateness: PolicyDuration,
    workers: usize,
) -> Result<Report, String> {
    struct Progress {
        next: usize,
        waiting: BTreeMap<usize, FileResult>,
        builder: ReportBuilder,
        error: Option<(usize, String)>,
    }
    let progress = Mutex::new(Progress {
        next: 0,
        waiting: BTreeMap::new(),
        builder: ReportBuilder::new(plan),
        error: None,
    });
    let taken = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..workers.min(corpus.len()) {
            scope.spawn(|| {
                loop {
                    let i = taken.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = corpus.get(i) else { break };
                    let name = path
                        .file_name()
                        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
                    let result = records(path, max_lateness).and_then(|r| plan.backtest(&r, &name));
                    let mut p = progress.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    match result {
                        Ok(r) => {
                            p.waiting.insert(i, r);
                        }
                        Err(e) => {
                            if p.error.as_ref().is_none_or(|(j, _)| i < *j) {
                                p.error = Some((i, e));
                            }
                            break;
                        }
                    }
                    while let Some(r) = {
                        let next = p.next;
                        p.waiting.remove(&next)
                    } {
                        p.builder.add(r);
                        p.next += 1;
                    }
                    if p.error.is_some() {
                        break;
                    }
                }
            });
        }
    });
    let p = progress.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, e)) = p.error {
        return Err(e);
    }
    Ok(p.builder.finish())
}

/// One corpus file's records in time order (through the same reorder window as `replay`).
fn records(path: &Path, max_lateness: PolicyDuration) -> Result<Vec<StreamRecord>, String> {
    let mut merge = Merge::new(streams::open_all(&[path.to_path_buf()])?, max_lateness);
    let mut out = Vec::new();
    loop {
        match merge.next_record() {
            Ok(Some(r)) => out.push(r),
            Ok(None) => return Ok(out),
            Err(MergeError::Invalid(first)) => {
                let lines: Vec<String> =
                    merge.invalid_lines(first, 20).iter().map(ToString::to_string).collect();
                return Err(format!("invalid stream\n{}", lines.join("\n")));
            }
            Err(MergeError::Late(late)) => {
                return Err(format!("{late}; sort the stream or raise --max-lateness"));
            }
        }
    }
}
