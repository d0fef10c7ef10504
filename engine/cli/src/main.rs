//! The `trainwarden` command: offline replay and tests of progress policies (more subcommands arrive with the
//! controller). Thin by design: argument parsing and file I/O here, everything else in `trainwarden-core`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

mod allocator;
mod backtest;
mod commands;
mod controller;
mod crd;
mod replay;
mod streams;
mod watch;

#[derive(Parser)]
#[command(name = "trainwarden", version, about = "Watch Kubeflow TrainJob progress and act on it.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Feed recorded progress streams (JSONL) through policies on the stream's own clock and print the timeline.
    Replay {
        /// Policy file (YAML, one or more ProgressPolicy / ClusterProgressPolicy documents). Repeatable.
        #[arg(long = "policy", required = true)]
        policies: Vec<PathBuf>,
        /// text (a timeline and a summary) or json (one object per event, then a summary object).
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
        /// Timer resolution: how often jobs without new samples are re-evaluated.
        #[arg(long, default_value = "30s")]
        eval_interval: String,
        /// Keep the clock running until this RFC 3339 time (default: the last record).
        #[arg(long)]
        until: Option<String>,
        /// How much earlier than the latest line above it a line may be (a stream is read in order, through
        /// a reorder window this long); a line later than that stops the replay with an error.
        #[arg(long, value_name = "DURATION", default_value = "5m")]
        max_lateness: String,
        /// Stream files (JSONL, or gzip / zstd compressed JSONL); `-` reads stdin.
        #[arg(required = true)]
        streams: Vec<PathBuf>,
        /// Send the notifications the policies' receivers would get, for real. Secrets come from
        /// TRAINWARDEN_SECRET_<NAMESPACE>_<NAME>_<KEY> variables, then from --secrets-dir.
        #[arg(long)]
        notify: bool,
        /// Secrets as files, <DIR>/<namespace>/<secret name>/<key> (a mounted Secret's layout).
        #[arg(long, value_name = "DIR", requires = "notify")]
        secrets_dir: Option<PathBuf>,
        /// Evaluator threads, the jobs spread over them by name (default: one per core but one, 1 to 8). The
        /// output is the same whatever the number; policies with spec.limits replay on one.
        #[arg(long, value_name = "N")]
        shards: Option<usize>,
    },
    /// What enforcing policies would have saved on a corpus of complete recorded runs, and which good runs
    /// they would have killed (false stops), with parameter sweeps and an HTML report.
    ///
    /// Examples:
    ///   trainwarden backtest policies/plateau.yaml examples/corpus/
    ///   trainwarden backtest policies/plateau.yaml examples/corpus/ --set rules[loss-plateau].with.window=1h,2h,4h --html report.html
    #[command(verbatim_doc_comment)]
    Backtest(backtest::BacktestArgs),
    /// Run policy test files (*.test.yaml); directories are searched recursively. Default: policies/.
    Test { paths: Vec<PathBuf> },
    /// Validate policy files (directories are searched for *.yaml, test files excepted) and report every
    /// problem with its field path and file:line:column. Valid means the API server accepts it and it runs.
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the built-in detectors and their parameters.
    Detectors,
    /// Print the functions available to Rhai conditions.
    Functions,
    /// Run a training command under policies: it reports to a Kubeflow-compatible endpoint (the SDK's
    /// update_trainjob_status, transformers' KubeflowCallback) and is stopped (SIGTERM, then SIGKILL) when a
    /// policy suspends it.
    Watch(watch::WatchArgs),
    /// Run the Kubernetes controller: watch TrainJobs and progress policies, act on firing rules.
    Controller(Box<controller::ControllerArgs>),
    /// Print the ProgressPolicy and ClusterProgressPolicy CRDs (YAML), or write them into a directory.
    Crd {
        /// Write one file per CRD into this directory instead of printing. Repeatable: the repository keeps
        /// crds/ and the Helm chart's copy, charts/trainwarden/crds/.
        #[arg(long, value_name = "DIR")]
        write: Vec<PathBuf>,
    },
}

fn main() -> ExitCode {
    allocator::return_freed_memory_promptly();
    let command = Cli::parse().command;
    // A command that prints a verdict must not look like it passed when its output was cut off.
    exit_quietly_on_broken_pipe(match command {
        Command::Crd { .. } | Command::Detectors | Command::Functions => 0,
        _ => 141,
    });
    let command = match command {
        // The controller sets up its own logging (JSON by default) and runtime.
        Command::Controller(args) => return controller::run(*args),
        other => other,
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr())
        .init();
    let result = match command {
        Command::Replay {
            policies,
            output,
            eval_interval,
            until,
            max_lateness,
            streams,
            notify,
            secrets_dir,
            shards,
        } => replay::replay(&replay::ReplayArgs {
            policy_files: &policies,
            json: matches!(output, Output::Json),
            eval_interval: &eval_interval,
            until: until.as_deref(),
            max_lateness: &max_lateness,
            streams: &streams,
            notify: &replay::ReplayNotify { send: notify, secrets_dir },
            shards,
        }),
        Command::Test { paths } => {
            let paths = if paths.is_empty() { vec![PathBuf::from("policies")] } else { paths };
            commands::test(&paths)
        }
        Command::Validate { files } => commands::validate(&files),
        Command::Backtest(args) => backtest::backtest(&args),
        Command::Detectors => {
            commands::detectors();
            Ok(true)
        }
        Command::Functions => {
            commands::functions();
            Ok(true)
        }
        Command::Crd { write } => crd::crd(&write),
        Command::Watch(args) => return watch::run(args),
        Command::Controller(_) => unreachable!("handled before logging is set up"),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}

/// Colour codes only for a person at a terminal, and never with `NO_COLOR` set (no-color.org).
pub(crate) fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `trainwarden crd | head`: when the reader goes away, printing fails with EPIPE and `println!` panics.
/// That is the normal end of a pipeline, not a failure: exit quietly, with `status` — 0 for commands that
/// only print a listing (a `pipefail` pipeline still passes), 141 (as if killed by SIGPIPE) for those whose
/// output is a verdict that was not all read. Rust ignores SIGPIPE, so sockets are unaffected.
fn exit_quietly_on_broken_pipe(status: i32) {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(status);
        }
        default(info);
    }));
}

pub(crate) fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}
