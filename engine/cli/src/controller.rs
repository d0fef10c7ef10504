//! `trainwarden controller`: flags, logging and the runtime around [`trainwarden_controller::run`].

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use trainwarden_controller::ControllerConfig;

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Json,
    Text,
}

#[derive(Args)]
pub(crate) struct ControllerArgs {
    /// Address for /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
    /// Log format (the filter comes from RUST_LOG, default info).
    #[arg(long, value_enum, default_value = "json")]
    log_format: LogFormat,
    /// Elect a leader on a Lease; only the leader acts and writes status. Off: run exactly one replica.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_election: bool,
    #[arg(long, default_value = "trainwarden-leader")]
    lease_name: String,
    /// How long the leader Lease is valid without renewal: a new leader takes over at most this long after
    /// the old one was lost.
    #[arg(long, default_value = "15s", value_parser = parse_positive_duration)]
    lease_duration: Duration,
    /// Deadline of each API call the executor and status writer make.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    api_timeout: Duration,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else "default").
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else the host name).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Watch only this namespace (TrainJobs and ProgressPolicies); default: the whole cluster.
    #[arg(long)]
    namespace: Option<String>,
    /// Deliver notify actions to the policies' receivers (Slack, email, webhooks); false only records them.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    notifications: bool,
    /// A PEM file of CA certificates trusted for notification receivers behind a private CA. Repeatable.
    #[arg(long, value_name = "FILE")]
    notification_ca: Vec<std::path::PathBuf>,
    /// Watch only TrainJobs matching this label selector (e.g. team=ml), to shard a cluster.
    #[arg(long)]
    trainjob_selector: Option<String>,
    /// Stop Kueue-managed TrainJobs by deactivating their Workload (Kueue owns spec.suspend).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    kueue: bool,
    /// Watch Kueue's Workloads, LocalQueues and ClusterQueues, so that rules can read the demand queued
    /// behind a job (queue_pending(), queue_pending_gpus()); needs list/watch on them.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    kueue_queues: bool,
    /// How often jobs without news are re-evaluated (exact timers fire regardless).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    eval_interval: Duration,
    /// Least time between two status writes of one policy.
    #[arg(long, default_value = "1s", value_parser = parse_positive_duration)]
    status_interval: Duration,
    /// Least time between two writes of one TrainJob's history checkpoint (trainwarden.dev/history); a job
    /// whose history did not change is not written.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    history_interval: Duration,
    /// Most history checkpoint writes per second over all TrainJobs.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    history_writes_per_second: u32,
    /// Export per-job gauges on /metrics (progress, ETA, last report time, loss, eval_loss, grad_norm,
    /// learning_rate, pending/firing rules) for every TrainJob a policy selects; false registers none of them.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    job_metrics: bool,
    /// Record every TrainJob's progress as it is seen, as gzip streams `trainwarden replay` reads, one per job,
    /// in DIR/<identity>/ (off when absent).
    #[arg(long, value_name = "DIR")]
    record_dir: Option<std::path::PathBuf>,
    /// The longest a recorded line waits in memory before it is written (as its own gzip member).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    record_flush_interval: Duration,
    /// A stream file that reaches this size is closed; the job goes on in the next part (.1, .2 ...).
    #[arg(long, default_value = "16MiB", value_parser = parse_bytes)]
    record_max_file_bytes: u64,
    /// The most bytes of stream files under --record-dir (every replica's); the oldest are deleted first.
    #[arg(long, default_value = "1GiB", value_parser = parse_bytes)]
    record_max_bytes: u64,
    /// The most stream files under --record-dir (every replica's); the oldest are deleted first.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    record_max_files: u64,
    /// The longest an owner's snooze (the TrainJob annotation trainwarden.dev/snooze-until) holds a job's
    /// actions, from when the controller first saw the annotation's value; 0s allows no snooze.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    max_snooze: Duration,
    /// At most this many Enforce firings that suspend or scale a job in any rolling hour, over every policy
    /// (a blast-radius limit on top of each policy's spec.limits); the next waits, with an ActionsLimited
    /// Event, until the hour allows. Unset: no cap.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_actions_per_hour: Option<u32>,
    /// Read the GPUs' DCGM metrics (DCGM_FI_DEV_GPU_UTIL, …_POWER_USAGE, …_FB_USED,
    /// DCGM_FI_PROF_GR_ENGINE_ACTIVE) from this Prometheus (or Thanos querier) for the GPU rules (gpu_idle,
    /// hang, gpu_util(), …). Unset: GPU rules judge nothing, and the policies that have them say so.
    #[arg(long, value_name = "URL", value_parser = parse_prometheus_url)]
    prometheus_url: Option<String>,
    /// Time between two GPU metrics queries (one query for every job).
    #[arg(long, default_value = "30s", value_parser = parse_prometheus_interval)]
    prometheus_interval: Duration,
    /// Deadline of one GPU metrics query.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    prometheus_timeout: Duration,
    /// At start, read this much GPU utilization history back from Prometheus (one range query), so GPU
    /// rules judge after a restart or hand-over as if the controller had never stopped; 0s: not at all.
    #[arg(long, default_value = "1h", value_parser = parse_prometheus_backfill)]
    prometheus_backfill: Duration,
    /// A file holding a bearer token for Prometheus (OpenShift's Thanos querier takes the service account's
    /// token, or mount a Secret), read again at every query.
    #[arg(long, value_name = "FILE", requires = "prometheus_url")]
    prometheus_bearer_token_file: Option<std::path::PathBuf>,
    /// A PEM file of CA certificates trusted for Prometheus (a cluster's service CA). Repeatable.
    #[arg(long, value_name = "FILE", requires = "prometheus_url")]
    prometheus_ca: Vec<std::path::PathBuf>,
    /// Path of a kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
}

/// A GPU poll interval: readings more than 5 minutes apart do not make a continuous run, so no GPU rule
/// could ever fire; half of that leaves room for a slow or failed query.
fn parse_prometheus_interval(text: &str) -> Result<Duration, String> {
    let d = parse_positive_duration(text)?;
    let max = trainwarden_controller::sources::gpu_metrics::MAX_STEP;
    if d > max {
        return Err(format!(
            "at most {}s: GPU readings more than 5 minutes apart never make a continuous run",
            max.as_secs()
        ));
    }
    Ok(d)
}

/// How much GPU history to read back: at most 120 steps of at most 150 s (5 hours).
fn parse_prometheus_backfill(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    let max = trainwarden_controller::sources::gpu_metrics::MAX_STEP
        * trainwarden_controller::sources::gpu_metrics::BACKFILL_STEPS;
    if d > max {
        return Err(format!(
            "at most {}h: the history is read at 120 steps of at most 150 s",
            max.as_secs() / 3600
        ));
    }
    Ok(d)
}

/// An http(s) URL with a host (Prometheus' base URL).
fn parse_prometheus_url(text: &str) -> Result<String, String> {
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))
        .ok_or_else(|| format!("expected an http:// or https:// URL, got {text:?}"))?;
    if rest.split(['/', '?', '#']).next().is_none_or(str::is_empty) {
        return Err(format!("the URL {text:?} has no host"));
    }
    if text.contains(['?', '#']) {
        return Err(format!("give Prometheus' base URL without a query or fragment, got {text:?}"));
    }
    Ok(text.to_string())
}

/// A size in bytes: a whole number, optionally with a unit: `B`; `k`/`KB`, `M`/`MB`, `G`/`GB` (powers of
/// 1000); `Ki`/`KiB`, `Mi`/`MiB`, `Gi`/`GiB` (powers of 1024, as Kubernetes quantities write them).
pub(crate) fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("expected a size like 16MiB, got {text:?}"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "k" | "K" | "KB" | "kB" => 1000,
        "M" | "MB" => 1000 * 1000,
        "G" | "GB" => 1000 * 1000 * 1000,
        "Ki" | "KiB" => 1 << 10,
        "Mi" | "MiB" => 1 << 20,
        "Gi" | "GiB" => 1 << 30,
        "Ti" | "TiB" => 1 << 40,
        other => {
            return Err(format!("unknown size unit {other:?} (use B, KB, MB, GB, KiB, MiB, GiB or TiB)"));
        }
    };
    match n.checked_mul(scale) {
        Some(0) => Err("must be more than 0 bytes".into()),
        Some(b) => Ok(b),
        None => Err(format!("{text} is too large")),
    }
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() { Err("must be longer than 0s".into()) } else { Ok(d) }
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let d: trainwarden_core::PolicyDuration = text.parse().map_err(|e| format!("{e}"))?;
    Ok(Duration::from_secs_f64(d.as_secs_f64()))
}

/// The PEM files a repeatable CA flag names, read; an unreadable one is an error naming the flag and file.
fn read_pems(flag: &str, paths: &[std::path::PathBuf]) -> Result<Vec<Vec<u8>>, String> {
    paths.iter().map(|p| std::fs::read(p).map_err(|e| format!("{flag} {}: {e}", p.display()))).collect()
}

pub(crate) fn run(args: ControllerArgs) -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(crate::colour_on_stderr());
    match args.log_format {
        LogFormat::Json => builder.json().with_current_span(true).init(),
        LogFormat::Text => builder.init(),
    }
    let identity = args.identity.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| format!("trainwarden-{}", std::process::id()))
    });
    let (notification_ca_pems, prometheus_ca_pems) = match (
        read_pems("--notification-ca", &args.notification_ca),
        read_pems("--prometheus-ca", &args.prometheus_ca),
    ) {
        (Ok(n), Ok(p)) => (n, p),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let config = ControllerConfig {
        http_addr: Some(args.http_addr),
        namespace: args.namespace.clone(),
        trainjob_selector: args.trainjob_selector.clone(),
        leader_election: args.leader_election,
        lease_name: args.lease_name.clone(),
        lease_namespace: args.lease_namespace.clone(),
        lease_duration: args.lease_duration,
        api_timeout: args.api_timeout,
        identity,
        kueue: args.kueue,
        kueue_queues: args.kueue_queues,
        notifications: args.notifications,
        notification_ca_pems,
        gpu_metrics: match &args.prometheus_url {
            None => None,
            Some(url) => Some(trainwarden_controller::GpuMetricsConfig {
                interval: args.prometheus_interval,
                timeout: args.prometheus_timeout,
                bearer_token_file: args.prometheus_bearer_token_file.clone(),
                backfill: args.prometheus_backfill,
                ca_pems: prometheus_ca_pems,
                ..trainwarden_controller::GpuMetricsConfig::new(url)
            }),
        },
        eval_interval: args.eval_interval,
        status_interval: args.status_interval,
        history_interval: args.history_interval,
        history_writes_per_second: args.history_writes_per_second,
        job_metrics: args.job_metrics,
        max_snooze: args.max_snooze,
        max_actions_per_hour: args.max_actions_per_hour,
        record: args.record_dir.as_ref().map(|dir| trainwarden_controller::config::RecordConfig {
            flush_interval: args.record_flush_interval,
            max_file_bytes: args.record_max_file_bytes,
            max_bytes: args.record_max_bytes,
            max_files: usize::try_from(args.record_max_files).unwrap_or(usize::MAX),
            ..trainwarden_controller::config::RecordConfig::new(dir)
        }),
        ..ControllerConfig::default()
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        let client = match &args.kubeconfig {
            Some(path) => trainwarden_kube::client::client_from_kubeconfig(path).await,
            None => trainwarden_kube::client::client_from_env().await,
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "cannot build a Kubernetes client");
                return ExitCode::from(2);
            }
        };
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
        match trainwarden_controller::run(client, config, stop_rx).await {
            Ok(()) => ExitCode::SUCCESS,
            // Only a 404 says a CRD is missing; a server that never answered is another matter.
            Err(trainwarden_controller::Error::MissingCrd(crd, e)) if !matches!(&e, kube::Error::Api(s) if s.code == 404) => {
                let server = match &args.kubeconfig {
                    Some(path) => trainwarden_kube::client::config_from_kubeconfig(path)
                        .await
                        .map_or_else(|_| format!("of {}", path.display()), |c| format!("at {}", c.cluster_url)),
                    None => "(from KUBECONFIG, ~/.kube/config or the in-cluster service account)".into(),
                };
                tracing::error!(
                    error = %trainwarden_core::error_chain(&e),
                    "no answer from the API server {server} while checking that the {crd} CRD is installed; \
                     is it up, and is this the cluster you meant?"
                );
                ExitCode::from(1)
            }
            Err(e) => {
                tracing::error!(error = %e, "controller stopped");
                ExitCode::from(1)
            }
        }
    })
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_read_in_both_unit_families() {
        assert_eq!(parse_bytes("16MiB"), Ok(16 << 20));
        assert_eq!(parse_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(parse_bytes("500MB"), Ok(500_000_000));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("99999999999TiB").is_err());
    }
}
