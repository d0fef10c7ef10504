//! `trainwarden watch -- CMD` end to end, with the real Kubeflow SDK on the Python side: a training loop
//! (engine/local/tests/python/sdk_training_loop.py) reports through `kubeflow.trainer.update_trainjob_status`,
//! configured only by the variables watch sets; the policy stops it; the recording replays to the same
//! decisions.
//!
//! Python: `TRAINWARDEN_PYTHON`, else ~/.cache/trainwarden/venv/bin/python (tests/python/setup-venv.sh
//! installs tests/python/watch.txt there). Without it these tests are skipped, except under `CI=true`,
//! where that is a failure.
//!
//! The SDK sends at most one report per 5 s, so each scenario takes 5–20 s; they run in parallel.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const POLICY: &str = "engine/local/tests/fixtures/watch-policy.yaml";
const AUDIT_POLICY: &str = "engine/local/tests/fixtures/watch-policy-audit.yaml";
const SCRIPT: &str = "engine/local/tests/python/sdk_training_loop.py";
const NOTIFY_POLICY: &str = "engine/local/tests/fixtures/watch-policy-notify.yaml";
const HF_POLICY: &str = "engine/local/tests/fixtures/watch-policy-hf.yaml";
const HF_SCRIPT: &str = "engine/local/tests/python/hf_trainer.py";

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The tests' Python: `TRAINWARDEN_PYTHON`, else the venv tests/python/setup-venv.sh builds.
fn python_candidate() -> Option<PathBuf> {
    std::env::var_os("TRAINWARDEN_PYTHON").map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/trainwarden/venv/bin/python"))
    })
}

/// Why `python` cannot run `code`, if it cannot.
fn cannot_run(python: &Option<PathBuf>, code: &str) -> Option<String> {
    let Some(p) = python else { return Some("neither TRAINWARDEN_PYTHON nor HOME is set".into()) };
    match Command::new(p).args(["-c", code]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => {
            Some(format!("{}: `{code}` failed: {}", p.display(), String::from_utf8_lossy(&o.stderr).trim()))
        }
        Err(e) => Some(format!("{}: {e}", p.display())),
    }
}

/// The Python with the Kubeflow SDK, or `None` (skip) outside CI.
fn python() -> Option<PathBuf> {
    let candidate = python_candidate();
    let Some(problem) = cannot_run(&candidate, "import kubeflow.trainer") else { return candidate };
    let hint = "run tests/python/setup-venv.sh (installs tests/python/watch.txt)";
    if in_ci() {
        panic!("the watch tests need the Kubeflow SDK (CI=true, so this fails): {problem}; {hint}");
    }
    eprintln!("SKIPPED: the watch tests need the Kubeflow SDK: {problem}; {hint}");
    None
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trainwarden-watch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn trainwarden(args: &[&str]) -> Output {
    trainwarden_with_env(args, &[])
}

fn trainwarden_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(repo())
        .output()
        .expect("runs")
}

struct Run {
    output: Output,
    stderr: String,
    dir: PathBuf,
    recording: PathBuf,
}

impl Run {
    fn marker(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.dir.join("out/checkpoint.json")).ok()?;
        Some(serde_json::from_str(&text).expect("checkpoint marker is JSON"))
    }

    fn reports(&self) -> usize {
        std::fs::read_to_string(self.dir.join("out/reports.jsonl")).map(|t| t.lines().count()).unwrap_or(0)
    }

    /// `time` of each progress line of the recording.
    fn update_times(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.recording).expect("recording written");
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| serde_json::from_str::<Value>(l).expect("recording lines are JSON"))
            .filter(|v| v.get("trainerStatus").is_some())
            .map(|v| v["time"].as_str().unwrap().to_string())
            .collect()
    }
}

/// `trainwarden watch` on the SDK training loop.
fn watch(python: &Path, name: &str, policy: &str, scenario: &[&str], extra: &[&str]) -> Run {
    watch_script(python, SCRIPT, name, policy, scenario, extra, &[])
}

fn watch_script(
    python: &Path,
    script: &str,
    name: &str,
    policy: &str,
    scenario: &[&str],
    extra: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let dir = temp_dir(name);
    let recording = dir.join("run.jsonl");
    let out_dir = dir.join("out");
    let (recording_s, out_s, python_s) =
        (recording.to_str().unwrap(), out_dir.to_str().unwrap(), python.to_str().unwrap());
    let mut args =
        vec!["watch", "--policy", policy, "--record", recording_s, "--eval-interval", "1s", "--gpus", "1"];
    let job = format!("local/{name}");
    args.extend_from_slice(&["--job", &job]);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", python_s, script]);
    args.extend_from_slice(scenario);
    args.push(out_s);
    let output = trainwarden_with_env(&args, env);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    Run { output, stderr, dir, recording }
}

fn replay(policy: &str, run: &Run, json: bool) -> String {
    let mut args = vec!["replay", "--policy", policy, "--eval-interval", "1s"];
    if json {
        args.extend_from_slice(&["--output", "json"]);
    }
    args.push(run.recording.to_str().unwrap());
    let out = trainwarden(&args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "replay failed: {text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The replayed timeline and summary are the live ones: same events at the same times, same totals.
fn assert_replays_identically(policy: &str, run: &Run, job: &str) {
    let replayed = replay(policy, run, false);
    let live: Vec<String> = run
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("[trainwarden] "))
        // The live intent lines add what was done locally after "⤷".
        .map(|l| l.split("  ⤷ ").next().unwrap_or(l).to_string())
        .collect();
    let (events, summary) = replayed.split_once("\nSummary\n").expect("replay prints a summary");
    for line in events.lines() {
        assert!(
            live.iter().any(|l| l == line),
            "replayed event not seen live: {line}\nlive:\n{}",
            run.stderr
        );
    }
    let live_events = live.iter().filter(|l| l.contains(&format!("  {job}  "))).count();
    assert_eq!(live_events, events.lines().count(), "live:\n{}\nreplayed:\n{replayed}", run.stderr);
    for line in summary.lines() {
        assert!(
            live.iter().any(|l| l == line),
            "replayed summary line differs: {line}\nlive:\n{}",
            run.stderr
        );
    }
}

/// Intents in the replay's JSON output: (rule, action, time).
fn replayed_intents(policy: &str, run: &Run) -> Vec<(String, String, String)> {
    replay(policy, run, true)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("intentId").is_some())
        .map(|v| {
            (
                v["rule"].as_str().unwrap().into(),
                v["action"].as_str().unwrap().into(),
                v["time"].as_str().unwrap().into(),
            )
        })
        .collect()
}

fn seconds_between(a: &str, b: &str) -> f64 {
    let (a, b): (jiff::Timestamp, jiff::Timestamp) = (a.parse().unwrap(), b.parse().unwrap());
    b.duration_since(a).as_secs_f64()
}

#[test]
fn a_plateau_reported_through_the_kubeflow_sdk_is_stopped_by_sigterm_and_replays_the_same() {
    let Some(python) = python() else { return };
    let run = watch(&python, "plateau", POLICY, &["plateau"], &["--grace-period", "20s"]);
    assert_eq!(
        run.output.status.code(),
        Some(trainwarden_local::watch::EXIT_SUSPENDED.into()),
        "stopped by policy:\n{}",
        run.stderr
    );
    // The loss flattened after report 2; a 2-sample plateau is complete at report 4, and the loop got SIGTERM
    // before it could send a 5th (the SDK waits 5 s between reports).
    let marker = run
        .marker()
        .unwrap_or_else(|| panic!("no checkpoint marker: the loop never saw SIGTERM\n{}", run.stderr));
    assert_eq!(
        (marker["signal"].as_str(), marker["reports"].as_u64()),
        (Some("SIGTERM"), Some(4)),
        "{marker}"
    );
    assert_eq!(run.reports(), 4);
    assert!(
        run.stderr.contains(
            "loss-plateau     FIRING    [Enforce] loss has not improved by more than 0.01 for 2 samples"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("stopped by local/local-fast rule loss-plateau"), "{}", run.stderr);
    assert!(run.stderr.contains("exited after SIGTERM (exit status 0)"), "{}", run.stderr);
    assert!(run.stderr.contains("notify ml-team: reported only"), "{}", run.stderr);
    // ETA ~2.8 h on 1 GPU at $2.5/GPU-hour.
    assert!(run.stderr.contains("  saved        2.8 GPU-hours, $6.9"), "{}", run.stderr);

    let updates = run.update_times();
    assert_eq!(updates.len(), 4, "{updates:?}");
    let intents = replayed_intents(POLICY, &run);
    let expected: Vec<(String, String, String)> = [("loss-plateau", "notify"), ("loss-plateau", "suspend")]
        .iter()
        .map(|(r, a)| (r.to_string(), a.to_string(), updates[3].clone()))
        .collect();
    assert_eq!(intents, expected, "the replayed decision: on the 4th report, at its time");
    assert_replays_identically(POLICY, &run, "local/plateau");
    let _ = std::fs::remove_dir_all(&run.dir);
}

#[test]
fn a_nan_loss_stops_the_command_at_once() {
    let Some(python) = python() else { return };
    let run = watch(&python, "nan", POLICY, &["nan"], &["--grace-period", "20s"]);
    assert_eq!(
        run.output.status.code(),
        Some(trainwarden_local::watch::EXIT_SUSPENDED.into()),
        "{}",
        run.stderr
    );
    assert_eq!(run.marker().and_then(|m| m["reports"].as_u64()), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("nan-loss         FIRING    [Enforce]"), "{}", run.stderr);
    let updates = run.update_times();
    assert_eq!(
        replayed_intents(POLICY, &run),
        vec![("nan-loss".into(), "suspend".into(), updates[1].clone())]
    );
    assert_replays_identically(POLICY, &run, "local/nan");
    let _ = std::fs::remove_dir_all(&run.dir);
}

/// A local HTTP server standing in for Slack's incoming webhooks: records every request (path, body) and
/// answers 200 `ok`.
struct HttpRecorder {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<(String, String)>>>,
}

impl HttpRecorder {
    fn start() -> HttpRecorder {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let recorded = recorded.clone();
                std::thread::spawn(move || Self::serve(stream, &recorded));
            }
        });
        HttpRecorder { addr, requests }
    }

    /// HTTP/1.1 with keep-alive; bodies with Content-Length (as reqwest sends a JSON body).
    fn serve(mut stream: TcpStream, recorded: &Mutex<Vec<(String, String)>>) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                return;
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or_default().to_string();
            let mut length = 0;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 {
                    return;
                }
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            recorded.lock().unwrap().push((path, String::from_utf8_lossy(&body).into_owned()));
            let answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok";
            if stream.write_all(answer).is_err() {
                return;
            }
        }
    }

    fn requests(&self) -> Vec<(String, String)> {
        self.requests.lock().unwrap().clone()
    }
}

#[test]
fn with_notify_a_nan_loss_sends_one_slack_message_and_never_prints_the_secret_url() {
    let Some(python) = python() else { return };
    let slack = HttpRecorder::start();
    // The webhook URL is the secret (Slack's carry their token in the path).
    let token_path = "/services/T0LOCAL/B0LOCAL/xoxb-must-not-leak";
    let url = format!("http://{}{token_path}", slack.addr);
    let env = [("TRAINWARDEN_SECRET_LOCAL_SLACK_HOOK_URL", url.as_str())];
    let extra = ["--grace-period", "20s", "--notify"];
    let run = watch_script(&python, SCRIPT, "notify-nan", NOTIFY_POLICY, &["nan"], &extra, &env);
    assert_eq!(
        run.output.status.code(),
        Some(trainwarden_local::watch::EXIT_SUSPENDED.into()),
        "stopped by policy:\n{}",
        run.stderr
    );
    assert_eq!(run.marker().and_then(|m| m["reports"].as_u64()), Some(2), "{}", run.stderr);

    // trainwarden waits for delivery before it exits: the message is there, and only one.
    let requests = slack.requests();
    assert_eq!(requests.len(), 1, "one Slack message: {requests:?}\n{}", run.stderr);
    let (path, body) = &requests[0];
    assert_eq!(path, token_path, "posted to the URL from the environment");
    let message: Value = serde_json::from_str(body).expect("a JSON Slack message");
    let text = message.to_string();
    assert!(text.contains("local/notify-nan"), "the message names the job: {message:#}");
    assert!(text.contains("nan-loss"), "the message names the rule: {message:#}");

    assert!(run.stderr.contains("nan-loss         FIRING    [Enforce]"), "{}", run.stderr);
    assert!(run.stderr.contains("⤷ notify ml-team: queued for delivery"), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "  notified     ml-team (slack) of ProgressPolicy local/local-notify: 1 sent, 0 failed, 0 retried, 0 dropped\n"
        ),
        "the summary has the delivery counters:\n{}",
        run.stderr
    );
    assert!(!run.stderr.contains("xoxb-must-not-leak"), "the secret URL leaked:\n{}", run.stderr);
    assert!(!run.stderr.contains(&slack.addr.to_string()), "the secret URL leaked:\n{}", run.stderr);
    let _ = std::fs::remove_dir_all(&run.dir);
}

#[test]
fn a_command_that_stops_reporting_is_a_stall_and_is_killed_after_the_grace_period() {
    let Some(python) = python() else { return };
    let run = watch(&python, "stall", POLICY, &["stall"], &["--grace-period", "2s"]);
    assert_eq!(
        run.output.status.code(),
        Some(trainwarden_local::watch::EXIT_SUSPENDED.into()),
        "{}",
        run.stderr
    );
    // The hung loop noted SIGTERM but did not exit: SIGKILL after 2 s.
    assert_eq!(run.marker().and_then(|m| m["reports"].as_u64()), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("grace period 2s is over: SIGKILL"), "{}", run.stderr);
    assert!(
        run.stderr.contains("did not exit within 2s of SIGTERM; SIGKILL (killed by SIGKILL)"),
        "{}",
        run.stderr
    );
    let updates = run.update_times();
    assert_eq!(updates.len(), 2);
    let intents = replayed_intents(POLICY, &run);
    assert_eq!(intents.len(), 1, "{intents:?}");
    assert_eq!((intents[0].0.as_str(), intents[0].1.as_str()), ("stalled", "suspend"));
    // Silence is measured from the report's own lastUpdatedTime (whole seconds) and judged on 1 s ticks.
    let silence = seconds_between(&updates[1], &intents[0].2);
    assert!((8.0..=11.0).contains(&silence), "stall declared {silence}s after the last report");
    assert_replays_identically(POLICY, &run, "local/stall");
    let _ = std::fs::remove_dir_all(&run.dir);
}

#[test]
fn audit_mode_only_reports_and_the_command_runs_to_its_end() {
    let Some(python) = python() else { return };
    let run = watch(&python, "audit", AUDIT_POLICY, &["nan"], &["--grace-period", "2s"]);
    // Nothing stops the loop: it sends its whole schedule (2.0, nan, 1.9, 1.8) and exits 0.
    assert_eq!(run.output.status.code(), Some(0), "{}", run.stderr);
    assert!(run.marker().is_none(), "Audit mode must not signal the command");
    assert_eq!(run.reports(), 4);
    assert!(run.stderr.contains("→ would suspend the TrainJob"), "{}", run.stderr);
    assert!(run.stderr.contains("Audit mode: reported only"), "{}", run.stderr);
    assert!(run.stderr.contains("ran to its end (exit status 0)"), "{}", run.stderr);
    assert_replays_identically(AUDIT_POLICY, &run, "local/audit");
    let _ = std::fs::remove_dir_all(&run.dir);
}

#[test]
fn a_missing_command_exits_127_and_a_policy_that_selects_nothing_is_a_usage_error() {
    let out = trainwarden(&["watch", "--policy", POLICY, "--", "/nonexistent/train"]);
    assert_eq!(out.status.code(), Some(127), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("[trainwarden] error: cannot run /nonexistent/train")
    );
    let out = trainwarden(&["watch", "--policy", POLICY, "--job", "other/train", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no policy selects the local job other/train (no labels)"), "{stderr}");
    assert!(stderr.contains("ProgressPolicy local/local-fast selects jobs in namespace local"), "{stderr}");
}

#[test]
fn the_exit_status_is_the_commands_when_it_runs_to_its_end() {
    let out = trainwarden(&["watch", "--policy", POLICY, "--", "sh", "-c", "echo from-the-command; exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    // The command's output passes through untouched; trainwarden's own lines go to stderr, prefixed.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from-the-command\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.lines().all(|l| l.starts_with("[trainwarden] ")), "{stderr}");
    assert!(stderr.contains("ran to its end (exit status 7)"), "{stderr}");
}

#[test]
fn ctrl_c_is_forwarded_to_the_command_which_stops_cleanly() {
    let dir = temp_dir("ctrl-c");
    let ready = dir.join("ready");
    // A non-interactive shell's background jobs ignore SIGINT: `sleep` outlives the shell unless trainwarden
    // cleans up the process group, which it does once the command has exited.
    let script = format!("trap 'echo got-sigint; exit 0' INT; touch '{}'; sleep 30 & wait", ready.display());
    let child = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args(["watch", "--policy", POLICY, "--grace-period", "5s", "--", "sh", "-c", &script])
        .current_dir(repo())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !ready.exists() {
        assert!(started.elapsed().as_secs() < 20, "the command did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let interrupted = std::time::Instant::now();
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "got-sigint\n");
    assert!(stderr.contains("SIGINT: forwarding it to the command"), "{stderr}");
    assert!(stderr.contains("interrupted (SIGINT forwarded): exited (exit status 0)"), "{stderr}");
    assert!(interrupted.elapsed().as_secs() < 5, "stopped without waiting for the 5 s grace period");
    let _ = std::fs::remove_dir_all(&dir);
}

/// transformers' `Trainer` with its built-in `KubeflowCallback`, on CPU. torch and transformers are not
/// installed by the test setup (about 5.7 GB and 2 minutes from PyPI: torch brings the CUDA wheels), so this
/// runs only where they are importable — see the book's Local mode page.
#[test]
fn a_transformers_trainer_reporting_through_kubeflow_callback_is_checkpointed_and_stopped() {
    let candidate = python_candidate();
    let needs =
        "import torch, accelerate, transformers; from transformers.integrations import KubeflowCallback";
    if let Some(problem) = cannot_run(&candidate, needs) {
        eprintln!(
            "SKIPPED: the transformers Trainer test needs torch, accelerate and transformers: {problem}"
        );
        return;
    }
    let python = candidate.unwrap();
    let run = watch_script(&python, HF_SCRIPT, "hf-trainer", HF_POLICY, &[], &["--grace-period", "60s"], &[]);
    assert_eq!(
        run.output.status.code(),
        Some(trainwarden_local::watch::EXIT_SUSPENDED.into()),
        "{}",
        run.stderr
    );
    let marker = run.marker().unwrap_or_else(|| panic!("no checkpoint marker\n{}", run.stderr));
    let step = marker["global_step"].as_u64().unwrap();
    assert_eq!(marker["checkpoints"], serde_json::json!([format!("checkpoint-{step}")]), "{marker}");
    assert!(run.dir.join(format!("out/checkpoints/checkpoint-{step}")).is_dir());
    assert!(
        run.stderr.contains("loss-plateau     FIRING    [Enforce] loss has not improved by more than 0.2"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("exited after SIGTERM (exit status 0)"), "{}", run.stderr);
    // KubeflowCallback's first report (train begin) has no loss; the plateau needs 3 loss reports after it.
    let updates = run.update_times();
    let intents = replayed_intents(HF_POLICY, &run);
    assert_eq!(intents, vec![("loss-plateau".to_string(), "suspend".to_string(), updates[3].clone())]);
    assert_replays_identically(HF_POLICY, &run, "local/hf-trainer");
    let _ = std::fs::remove_dir_all(&run.dir);
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet: it runs no more).
fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name.
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

/// Waits up to 20 s for `path` and returns its first line.
fn wait_for_line(path: &Path) -> String {
    let started = std::time::Instant::now();
    loop {
        if let Some(line) =
            std::fs::read_to_string(path).ok().and_then(|t| t.lines().next().map(String::from))
        {
            return line;
        }
        assert!(
            started.elapsed().as_secs() < 20,
            "{} did not appear: the command did not start",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Issue 14: `kill -9` of `trainwarden watch` (no handler runs) left the command running, orphaned, with its
/// GPUs. Now the command gets SIGKILL from the kernel when trainwarden dies (PR_SET_PDEATHSIG), and what it
/// started (here `sleep` under `sh`, like `python` under `sh -c` or `torchrun`'s ranks) from the watchdog
/// of its process group.
#[cfg(target_os = "linux")]
#[test]
fn the_command_and_its_children_die_with_a_sigkilled_trainwarden() {
    let dir = temp_dir("kill-9");
    let pid_file = dir.join("pids");
    let script =
        format!("sleep 1000 & echo $$ $! > '{0}.tmp' && mv '{0}.tmp' '{0}'; wait", pid_file.display());
    let mut watch = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args(["watch", "--policy", POLICY, "--eval-interval", "1s", "--", "sh", "-c", &script])
        .current_dir(repo())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let line = wait_for_line(&pid_file);
    let pids: Vec<&str> = line.split_whitespace().collect();
    let [shell, sleep] = pids[..] else { panic!("unexpected pid file: {line:?}") };
    // Past a few evaluation ticks, so that trainwarden's own threads have come and gone meanwhile.
    std::thread::sleep(std::time::Duration::from_secs(3));
    for (pid, program) in [(shell, "sh"), (sleep, "sleep")] {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(String::from_utf8_lossy(&cmdline).starts_with(program), "pid {pid} is not {program}");
        assert!(!process_gone(pid), "{program} ended before trainwarden was killed");
    }
    watch.kill().unwrap(); // SIGKILL
    watch.wait().unwrap();
    let killed = std::time::Instant::now();
    while !(process_gone(shell) && process_gone(sleep)) {
        if killed.elapsed().as_secs() >= 5 {
            let _ = Command::new("kill").args(["-KILL", shell, sleep]).status();
            panic!(
                "outlived trainwarden by 5 s: the command (pid {shell}) {}, its child (pid {sleep}) {}",
                if process_gone(shell) { "did not" } else { "did" },
                if process_gone(sleep) { "did not" } else { "did" }
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

const SILENT_POLICY: &str = "engine/local/tests/fixtures/watch-policy-silent.yaml";

/// Lines of trainwarden's warning that the command has not reported yet.
fn no_report_warnings(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("[trainwarden] warning: no progress report yet")).collect()
}

/// Issue 14: a command that never reports is never stopped by a default `stalled` rule (it requires a first
/// report), and nothing said so. Now trainwarden warns once, after the sampling interval, with the URL and
/// the variables the command should use.
#[test]
fn a_command_that_never_reports_gets_one_warning_naming_the_endpoint() {
    // POLICY's samplingInterval is 5s and its `stalled` rule (after 9s) requires a first report.
    let out = trainwarden(&["watch", "--policy", POLICY, "--eval-interval", "1s", "--", "sleep", "12"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the default stalled rule does not stop it:\n{stderr}");
    let warnings = no_report_warnings(&stderr);
    assert_eq!(warnings.len(), 1, "one warning:\n{stderr}");
    let url = stderr
        .split("progress endpoint ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the endpoint URL is printed");
    for needed in [
        "no progress report yet after 5s (the policy's samplingInterval)",
        url,
        "$KUBEFLOW_TRAINER_SERVER_URL",
        "$KUBEFLOW_TRAINER_SERVER_CA_CERT",
        "$KUBEFLOW_TRAINER_SERVER_TOKEN",
        "requireFirstSample: false",
    ] {
        assert!(warnings[0].contains(needed), "the warning lacks {needed:?}: {}", warnings[0]);
    }
    assert!(!stderr.contains("FIRING"), "{stderr}");
}

/// What the book's Local mode page advises for such a command: a `stalled` rule with `requireFirstSample: false` stops it
/// after `after` of silence from its start, and the recording replays to the same decision.
#[test]
fn a_stalled_rule_without_a_first_sample_stops_a_command_that_never_reports() {
    let dir = temp_dir("silent");
    let recording = dir.join("run.jsonl");
    let args = [
        "watch",
        "--policy",
        SILENT_POLICY,
        "--eval-interval",
        "1s",
        "--grace-period",
        "5s",
        "--record",
        recording.to_str().unwrap(),
        "--job",
        "local/silent",
        "--",
        "sleep",
        "60",
    ];
    let started = std::time::Instant::now();
    let output = trainwarden(&args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(trainwarden_local::watch::EXIT_SUSPENDED.into()),
        "stopped by policy:\n{stderr}"
    );
    assert!(started.elapsed().as_secs() < 20, "stopped after 3 s of silence, not at the end:\n{stderr}");
    assert!(stderr.contains("never-reported   FIRING    [Enforce] no progress sample yet for"), "{stderr}");
    assert!(stderr.contains("stopped by local/local-silent rule never-reported"), "{stderr}");
    assert!(stderr.contains("exited after SIGTERM (killed by SIGTERM)"), "{stderr}");
    assert_eq!(no_report_warnings(&stderr).len(), 1, "{stderr}");
    let run = Run { output, stderr, dir, recording };
    let intents = replayed_intents(SILENT_POLICY, &run);
    assert_eq!(intents.len(), 1, "{intents:?}");
    assert_eq!((intents[0].0.as_str(), intents[0].1.as_str()), ("never-reported", "suspend"));
    assert_replays_identically(SILENT_POLICY, &run, "local/silent");
    let _ = std::fs::remove_dir_all(&run.dir);
}

const CHECKPOINT_POLICY: &str = "engine/local/tests/fixtures/watch-policy-checkpoint.yaml";
const CHECKPOINT_SCRIPT: &str = "engine/local/tests/python/checkpoint_loop.py";

/// The companion package (sdk/python, standard library only) from this checkout, as a pod's image would
/// have it installed.
const SDK_PATH: (&str, &str) = ("PYTHONPATH", "sdk/python/src");

/// A `checkpoint` action under `watch`: the request reaches the command through the file watch names in
/// `TRAINWARDEN_ANNOTATIONS_FILE`, the companion package saves and acknowledges it in its next report, and the
/// command keeps training to its end.
#[test]
fn a_checkpoint_request_reaches_the_command_through_its_file_and_it_keeps_training() {
    let Some(python) = python() else { return };
    let run = watch_script(
        &python,
        CHECKPOINT_SCRIPT,
        "checkpoint",
        CHECKPOINT_POLICY,
        &["1"],
        &["--label", "stop=no"],
        &[SDK_PATH],
    );
    // trainwarden's own lines go to stderr, the command's output to stdout.
    let stdout = &run.stderr;
    assert_eq!(run.output.status.code(), Some(0), "ran to its end\n{stdout}");
    let acknowledged = stdout
        .lines()
        .find(|l| l.contains("acknowledged: saved at step"))
        .unwrap_or_else(|| panic!("no acknowledgement\n{stdout}"));
    let step: u64 = acknowledged
        .split("saved at step ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|s| s.parse().ok())
        .expect("the step");
    assert!(step >= 40, "{acknowledged}");
    assert!(
        run.dir.join(format!("out/ckpt-{step}.json")).exists(),
        "the checkpoint the acknowledgement names"
    );
    assert!(stdout.contains("ran to its end (exit status 0)"), "{stdout}");
    assert!(!run.dir.join("out/stopped.json").exists(), "never stopped");
}

/// `suspend: {checkpointFirst}` under `watch`: the command's save (3 s) takes longer than its SIGTERM grace
/// (1 s); it is signalled only once the checkpoint is acknowledged, so the checkpoint is complete and the
/// command stopped right after the step it holds.
#[test]
fn checkpoint_first_stops_the_command_only_after_its_checkpoint_is_complete() {
    let Some(python) = python() else { return };
    let run = watch_script(
        &python,
        CHECKPOINT_SCRIPT,
        "checkpoint-first",
        CHECKPOINT_POLICY,
        &["3"],
        &["--label", "stop=yes", "--grace-period", "1s"],
        &[SDK_PATH],
    );
    let stdout = &run.stderr;
    assert_eq!(run.output.status.code(), Some(75), "stopped by the policy\n{stdout}");
    let saved: Vec<u64> = std::fs::read_dir(run.dir.join("out"))
        .unwrap()
        .filter_map(|e| {
            e.ok()?.file_name().to_str()?.strip_prefix("ckpt-")?.strip_suffix(".json")?.parse().ok()
        })
        .collect();
    assert_eq!(saved.len(), 1, "one complete checkpoint: {saved:?}");
    let stopped: Value =
        serde_json::from_str(&std::fs::read_to_string(run.dir.join("out/stopped.json")).unwrap()).unwrap();
    let stopped = stopped["step"].as_u64().unwrap();
    assert!(
        stopped >= saved[0] && stopped <= saved[0] + 5,
        "stopped right after step {}: {stopped}",
        saved[0]
    );
    let ack = stdout.find(&format!("acknowledged: saved at step {}", saved[0])).expect("acknowledged");
    let signalled = stdout.find("SIGTERM to process group").expect("signalled");
    assert!(ack < signalled, "SIGTERM only after the acknowledgement\n{stdout}");
    assert!(stdout.contains(&format!("goes ahead after its checkpoint at step {}", saved[0])), "{stdout}");
}
