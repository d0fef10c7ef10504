//! `kubectl trainwarden`: every TrainJob's progress and verdict, why a rule fired or did not, and the way
//! back (resume, snooze).
//!
//! It reads what the controller publishes on the objects themselves — each TrainJob's verdict
//! (`trainwarden.dev/verdict`, its pending and firing rules), last action, suspension and history
//! checkpoint, and the policies — and never needs the controller's pod to be reachable. `explain` judges the
//! job again here, with the same evaluation core the controller runs, to say what each rule sees now.
//!
//! ```text
//! main.rs     flags and commands
//! cluster.rs  the client (kubeconfig, context, namespace as kubectl takes them), listing what is read
//! job.rs      one TrainJob as read: progress, loss trend, verdict, savings
//! get.rs      the table (-o wide|json|yaml, --watch)
//! explain.rs  which policies select the job and why, each rule's state, what happens next
//! resume.rs   resume (TrainJob spec.suspend or the Kueue Workload's spec.active) and snooze
//! ```
#![forbid(unsafe_code)]

mod checkpoint;
mod cluster;
mod explain;
mod get;
mod job;
mod output;
mod resume;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use trainwarden_core::Timestamp;

/// kubectl trainwarden: TrainJob progress, verdicts and the way back.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl-trainwarden",
    bin_name = "kubectl trainwarden",
    version,
    after_help = "Examples:\n  kubectl trainwarden get -A\n  kubectl trainwarden get -n fraud -o wide --watch\n  kubectl trainwarden explain bert-ft -n fraud\n  kubectl trainwarden resume bert-ft -n fraud --snooze 4h\n  kubectl trainwarden snooze bert-ft 8h -n fraud\n  kubectl trainwarden checkpoint bert-ft -n fraud\n\nInstall: put kubectl-trainwarden on PATH (cargo install --path engine/kubectl); kubectl finds plugins there."
)]
struct Cli {
    #[command(flatten)]
    flags: cluster::Flags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One line per TrainJob: progress, ETA, step, loss and its trend, pending/firing rules, verdict, GPU
    /// time saved.
    #[command(
        after_help = "Examples:\n  kubectl trainwarden get\n  kubectl trainwarden get -A -l team=ml -o wide\n  kubectl trainwarden get -n fraud -o json"
    )]
    Get {
        /// Only these TrainJobs (names); all when none.
        names: Vec<String>,
        /// All namespaces.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Label selector, as kubectl's `-l`.
        #[arg(short = 'l', long)]
        selector: Option<String>,
        /// Output format.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
        /// Redraw every 2 seconds until interrupted.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Which policies select the TrainJob and why, each rule's state with the values it sees and its
    /// thresholds, and what happens next.
    #[command(after_help = "Example:\n  kubectl trainwarden explain bert-ft -n fraud")]
    Explain {
        /// The TrainJob.
        job: String,
    },
    /// Resumes a TrainJob trainwarden (or anyone) suspended: its `spec.suspend`, or for a job Kueue manages
    /// its Workload's `spec.active`; clears trainwarden's suspended-by mark; optionally snoozes the policies
    /// for the job.
    #[command(
        after_help = "Examples:\n  kubectl trainwarden resume bert-ft -n fraud\n  kubectl trainwarden resume bert-ft -n fraud --snooze 4h"
    )]
    Resume {
        /// The TrainJob.
        job: String,
        /// Also snooze the job's policies for this long (e.g. 4h; the controller caps it).
        #[arg(long, value_name = "DURATION")]
        snooze: Option<String>,
    },
    /// Snoozes the policies for a TrainJob: rules still evaluate, their actions wait until the snooze ends
    /// (the controller caps its length).
    #[command(
        after_help = "Examples:\n  kubectl trainwarden snooze bert-ft 8h -n fraud\n  kubectl trainwarden snooze bert-ft --clear -n fraud"
    )]
    Snooze {
        /// The TrainJob.
        job: String,
        /// How long, e.g. 30m, 8h, 1d.
        #[arg(required_unless_present = "clear")]
        duration: Option<String>,
        /// End a snooze now.
        #[arg(long, conflicts_with = "duration")]
        clear: bool,
    },
    /// Asks a running TrainJob for a checkpoint, through the channel the `checkpoint` action uses: the
    /// controller puts the request on the job's pods (read there through a downward-API volume) and records
    /// the job's acknowledgement, or the timeout, in an Event and in `explain`.
    #[command(
        after_help = "Examples:\n  kubectl trainwarden checkpoint bert-ft -n fraud\n  kubectl trainwarden checkpoint bert-ft -n fraud --timeout 30m"
    )]
    Checkpoint {
        /// The TrainJob.
        job: String,
        /// How long the acknowledgement is waited for (at most 24h).
        #[arg(long, value_name = "DURATION", default_value = "10m")]
        timeout: String,
    },
    /// Prints a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Example:\n  kubectl-trainwarden completion bash > /etc/bash_completion.d/kubectl-trainwarden"
    )]
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// How `get` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    /// The table.
    Table,
    /// The table with more columns.
    Wide,
    /// JSON, one array.
    Json,
    /// YAML, one sequence.
    Yaml,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Completion { shell } = cli.command {
        let mut command = Cli::command();
        // Into memory first: clap_complete panics when its writer fails.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command, "kubectl-trainwarden", &mut script);
        output::write(&script);
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let now = match &cli.flags.now {
        Some(t) => t
            .parse::<Timestamp>()
            .map_err(|e| format!("--now {t}: {e} (expected RFC 3339, e.g. 2026-10-03T01:00:00Z)"))?,
        None => Timestamp::now(),
    };
    let cluster = cluster::connect(&cli.flags).await?;
    match cli.command {
        Command::Get { names, all_namespaces, selector, output, watch } => {
            let request =
                get::Request { names, all_namespaces, selector, output, fixed_now: cli.flags.now.is_some() };
            get::run(&cluster, &request, now, watch).await
        }
        Command::Explain { job } => explain::run(&cluster, &job, now).await,
        Command::Resume { job, snooze } => {
            let snooze = snooze.map(|d| resume::parse_duration(&d)).transpose()?;
            resume::resume(&cluster, &job, snooze, now).await
        }
        Command::Snooze { job, duration, clear } => {
            let duration =
                if clear { None } else { duration.map(|d| resume::parse_duration(&d)).transpose()? };
            resume::snooze(&cluster, &job, duration, now).await
        }
        Command::Checkpoint { job, timeout } => {
            let timeout: trainwarden_core::PolicyDuration =
                timeout.parse().map_err(|e| format!("--timeout {timeout:?} is not a duration: {e}"))?;
            if timeout.is_zero() || timeout > trainwarden_core::MAX_CHECKPOINT_TIMEOUT {
                return Err("--timeout must be longer than 0s and at most 24h".into());
            }
            checkpoint::request(&cluster, &job, timeout, now).await
        }
        Command::Completion { .. } => unreachable!("handled before connecting"),
    }
}
