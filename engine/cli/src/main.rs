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
mod output;
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
        /// a reorder window this long); a line later than that stops the replay with an error. Default 5m;
        /// 0s for a live stdin (a terminal or a pipe), whose events a window would hold back by its length.
        #[arg(long, value_name = "DURATION")]
        max_lateness: Option<String>,
        /// Stream files (JSONL, or gzip / zstd compressed JSONL); `-` reads stdin.
        #[arg(required = true)]
        streams: Vec<PathBuf>,
        /// Namespaces' labels, for ClusterProgressPolicies' namespaceSelector (a stream has no cluster to read
        /// them from): YAML or JSON, `NAMESPACE: {LABEL: VALUE}` or `kubectl get namespaces -o yaml`.
        #[arg(long, value_name = "FILE")]
        namespace_labels: Option<PathBuf>,
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
    ///   trainwarden backtest policies/plateau.yaml examples/corpus/ --set rules[no-improvement].with.window=20%,30%,40% --html report.html
    #[command(verbatim_doc_comment)]
    Backtest(backtest::BacktestArgs),
    /// Run policy test files (*.test.yaml); directories are searched recursively. Default: policies/.
    Test { paths: Vec<PathBuf> },
    /// Validate policy files (directories are searched for *.yaml, test files excepted) and report every
    /// problem with its field path and file:line:column. Valid means the API server accepts it and it runs.
    Validate {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Refuse what is only a warning (a metric name neither canonical nor declared in spec.metrics, an
        /// exception whose policy is not among the files), as a CI gate should.
        #[arg(long)]
        strict: bool,
    },
    /// Print the built-in detectors and their parameters.
    Detectors,
    /// Print the functions available to Rhai conditions.
    Functions,
    /// Run a training command under policies: it reports to a Kubeflow-compatible endpoint (the SDK's
    /// update_trainjob_status, transformers' KubeflowCallback) and is stopped (SIGTERM, then SIGKILL) when a
    /// policy suspends it.
    ///
    /// Exit status: the command's own when it ran to its end; 75 (EX_TEMPFAIL) when a policy stopped it;
    /// 130/143 after Ctrl-C/SIGTERM; 2 for usage errors; 126/127 when the command cannot be started.
    Watch(watch::WatchArgs),
    /// Run the Kubernetes controller: watch TrainJobs and progress policies, act on firing rules.
    Controller(Box<controller::ControllerArgs>),
    /// Print the ProgressPolicy, ClusterProgressPolicy and ProgressPolicyException CRDs (YAML), or write them
    /// into a directory.
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
            namespace_labels,
            notify,
            secrets_dir,
            shards,
        } => replay::replay(&replay::ReplayArgs {
            policy_files: &policies,
            json: matches!(output, Output::Json),
            eval_interval: &eval_interval,
            until: until.as_deref(),
            max_lateness: max_lateness.as_deref(),
            streams: &streams,
            namespace_labels: namespace_labels.as_deref(),
            notify: &replay::ReplayNotify { send: notify, secrets_dir },
            shards,
        }),
        Command::Test { paths } => {
            let paths = if paths.is_empty() { vec![PathBuf::from("policies")] } else { paths };
            commands::test(&paths)
        }
        Command::Validate { files, strict } => commands::validate(&files, strict),
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
    // Output still buffered is written now, and a failure to write it is an error like any other.
    output::finish();
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

/// A text file (a policy, a test file): UTF-8, a byte-order mark allowed. What it cannot be read as is said
/// with the file and, for bytes that are not UTF-8, the line and column of the first one.
pub(crate) fn read(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {}", path.display(), io_error(&e)))?;
    text_of(bytes, &path.display().to_string())
}

/// An I/O error as people say it: `no such file or directory`, not `No such file or directory (os error 2)`.
pub(crate) fn io_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::IsADirectory => "is a directory".into(),
        _ => e.to_string(),
    }
}

/// `bytes` as UTF-8 text, or why not, at `name:line:column`.
pub(crate) fn text_of(bytes: Vec<u8>, name: &str) -> Result<String, String> {
    if bytes.starts_with(&[0xff, 0xfe]) || bytes.starts_with(&[0xfe, 0xff]) {
        return Err(format!(
            "{name}:1:1: UTF-16 text (it starts with a UTF-16 byte-order mark); trainwarden reads UTF-8: convert it, \
             e.g. iconv -f UTF-16 -t UTF-8"
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let before = &bytes[..at];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let line_start = before.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
        format!(
            "{name}:{line}:{column}: not UTF-8 (byte 0x{:02x}; Latin-1 or another encoding?): save the file as UTF-8",
            bytes[at]
        )
    })
}
