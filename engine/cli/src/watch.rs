//! `trainwarden watch`: arguments and files; the work is `trainwarden-local`'s.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use trainwarden_core::Evaluator;
use trainwarden_core::JobKey;
use trainwarden_core::PolicyDuration;
use trainwarden_local::watch::PREFIX;
use trainwarden_local::{Delivering, Notifier, ReportOnly, WatchOptions};
use trainwarden_notify::{FileSecrets, LocalSecrets, NotifierConfig};

use crate::commands;

#[derive(clap::Args)]
pub(crate) struct WatchArgs {
    /// Policy file (YAML, one or more ProgressPolicy / ClusterProgressPolicy documents). Repeatable.
    #[arg(long = "policy", required = true)]
    policies: Vec<PathBuf>,
    /// Write the progress stream here (JSONL that `trainwarden replay` reads, to the same decisions).
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// After SIGTERM, how long the command may take to exit (checkpoint) before SIGKILL.
    #[arg(long, default_value = "30s")]
    grace_period: String,
    /// Timer resolution: how often a command without new reports is re-evaluated (pass the same to replay).
    #[arg(long, default_value = "30s")]
    eval_interval: String,
    /// The TrainJob the command reports as. Default: the first namespaced policy's namespace (else
    /// `default`) and a name from the command (`python train.py` → `train`).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    job: Option<String>,
    /// A label of the job, for policy selectors. Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Accelerators the command holds, for GPU-hour and cost savings (default: the policy's assumeGpus).
    #[arg(long)]
    gpus: Option<f64>,
    /// Deliver `notify` actions to the policies' receivers (without it they are only reported). Secrets come
    /// from `TRAINWARDEN_SECRET_<NAMESPACE>_<NAME>_<KEY>` variables, then `--secrets-dir`.
    #[arg(long)]
    notify: bool,
    /// With --notify: Secrets as `DIR/<namespace>/<name>/<key>` files (after the environment variables).
    #[arg(long, value_name = "DIR", requires = "notify")]
    secrets_dir: Option<PathBuf>,
    /// Address of the progress endpoint (HTTPS); port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The training command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// After the command's end, how long `--notify` waits for pending notifications to be delivered (retries
/// stop then).
const NOTIFY_FLUSH_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs the watch; the exit status is the command's (or 75, `EX_TEMPFAIL`, when a policy stopped it; 2 for usage errors).
pub(crate) fn run(args: WatchArgs) -> ExitCode {
    let (send, secrets_dir) = (args.notify, args.secrets_dir.clone());
    let options = match prepare(args) {
        Ok(options) => options,
        Err(message) => return fail(&message, 2),
    };
    if send && options.policies.iter().all(|p| p.receivers.is_empty()) {
        return fail("--notify: no policy declares spec.receivers", 2);
    }
    for note in options.policies.iter().flat_map(trainwarden_core::CompiledPolicy::notifies_nowhere) {
        eprintln!("{PREFIX} note: {note}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(&format!("starting the async runtime: {e}"), 2),
    };
    let mut notifier: Box<dyn Notifier> = if send {
        // As `replay --notify`: environment variables first, then files; resolved at each delivery.
        let secrets = LocalSecrets { files: secrets_dir.map(FileSecrets::new) };
        let _runtime = runtime.enter();
        match Delivering::new(Arc::new(secrets), NotifierConfig::default(), NOTIFY_FLUSH_TIMEOUT) {
            Ok(d) => Box::new(d),
            Err(e) => return fail(&format!("--notify: {e}"), 2),
        }
    } else {
        Box::new(ReportOnly)
    };
    let mut stderr = std::io::stderr();
    match runtime.block_on(trainwarden_local::watch(options, notifier.as_mut(), &mut stderr)) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(e) => fail(&e.message, e.exit_code),
    }
}

fn fail(message: &str, code: u8) -> ExitCode {
    eprintln!("{PREFIX} error: {message}");
    ExitCode::from(code)
}

fn prepare(args: WatchArgs) -> Result<WatchOptions, String> {
    let engine = commands::config(&args.eval_interval)?;
    let grace: PolicyDuration = args.grace_period.parse().map_err(|e| format!("--grace-period: {e}"))?;
    let policies = commands::load_policies(&args.policies, Evaluator::new(engine.clone()).scripts())?;
    let job = match &args.job {
        Some(text) => {
            JobKey::parse(text).ok_or_else(|| format!("--job: expected NAMESPACE/NAME, got {text:?}"))?
        }
        None => {
            let namespace =
                policies.iter().find_map(|p| p.reference.namespace.clone()).unwrap_or("default".into());
            JobKey::new(namespace, default_job_name(&args.command))
        }
    };
    let mut labels = BTreeMap::new();
    for l in &args.labels {
        let (k, v) = l.split_once('=').ok_or_else(|| format!("--label: expected KEY=VALUE, got {l:?}"))?;
        if k.is_empty() {
            return Err(format!("--label: empty key in {l:?}"));
        }
        labels.insert(k.to_string(), v.to_string());
    }
    if let Some(g) = args.gpus
        && !(g.is_finite() && g >= 0.0)
    {
        return Err(format!("--gpus: expected a number >= 0, got {g}"));
    }
    let replay_hint = args.record.as_ref().map(|record| {
        let policies: Vec<String> =
            args.policies.iter().map(|p| format!("--policy {}", p.display())).collect();
        format!(
            "trainwarden replay {} --eval-interval {} {}",
            policies.join(" "),
            args.eval_interval,
            record.display()
        )
    });
    Ok(WatchOptions {
        policies,
        engine,
        job,
        labels,
        gpus: args.gpus,
        grace_period: grace.to_std(),
        record: args.record,
        listen: args.listen,
        command: args.command,
        replay_hint,
    })
}

/// A DNS-label name from the command: the script of an interpreter (`python train.py` → `train`), else the
/// program (`./finetune.sh` → `finetune`).
fn default_job_name(command: &[OsString]) -> String {
    let stem =
        |a: &OsString| Path::new(a).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let program = command.first().map(stem).unwrap_or_default();
    let interpreter = ["python", "python3", "uv", "torchrun", "accelerate", "deepspeed", "bash", "sh"]
        .iter()
        .any(|i| program == *i || program.starts_with("python3."));
    let script = command.iter().skip(1).find(|a| {
        let s = a.to_string_lossy();
        !s.starts_with('-') && (s.ends_with(".py") || s.ends_with(".sh"))
    });
    let raw = match (interpreter, script) {
        (true, Some(s)) => stem(s),
        _ => program,
    };
    let mut name: String =
        raw.to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    name = name.trim_matches('-').chars().take(63).collect::<String>().trim_end_matches('-').to_string();
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name = format!("job-{name}").trim_end_matches('-').chars().take(63).collect();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::default_job_name;

    fn name(args: &[&str]) -> String {
        default_job_name(&args.iter().map(Into::into).collect::<Vec<_>>())
    }

    #[test]
    fn job_names_come_from_the_script_or_program() {
        assert_eq!(name(&["python", "train.py", "--lr", "1e-4"]), "train");
        assert_eq!(name(&["python3.12", "-u", "/src/Fine_Tune.py"]), "fine-tune");
        assert_eq!(name(&["./finetune.sh"]), "finetune");
        assert_eq!(name(&["torchrun", "--nproc-per-node", "2", "ddp.py"]), "ddp");
        assert_eq!(name(&["7zip"]), "job-7zip");
        assert_eq!(name(&["__"]), "job");
    }
}
