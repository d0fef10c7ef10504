//! The wall-clock driver behind `trainwarden watch -- CMD`.
//!
//! One loop owns the evaluation: it takes accepted progress reports from the endpoint, runs timers at
//! [`Evaluator::next_tick`](trainwarden_core::Evaluator::next_tick) (so a command that stops
//! reporting is a stall), and acts on what the policy decides. Evaluation goes through
//! [`Replay`] — the same state machine `trainwarden replay` runs — fed with the very records the recorder
//! writes, so a recording replays to the same decisions by construction.
//!
//! Acting locally: an enforced `suspend` sends SIGTERM to the command's process group (code that
//! checkpoints on SIGTERM gets its chance) and SIGKILL after the grace period; an enforced `checkpoint` (and
//! the first phase of `suspend: {checkpointFirst}`) writes the request to the file the command reads as a
//! pod reads its annotations (`TRAINWARDEN_ANNOTATIONS_FILE`, sdk/python/PROTOCOL.md §2) and waits for the
//! acknowledgement in the reports the command sends to this endpoint, judged by the core's request record
//! as the controller judges it; Audit mode only reports;
//! every event goes to a [`Notifier`], which delivers `notify` actions (or only reports them); `annotate`,
//! `event` and `scale` need a TrainJob object and are reported as not applicable.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration as StdDuration;

use jiff::Unit;
use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::time::Instant;
use trainwarden_core::CompiledPolicy;
use trainwarden_core::JobData;
use trainwarden_core::StreamRecord;
use trainwarden_core::replay::{self, Replay, Summary};
use trainwarden_core::{ActionSpec, Mode};
use trainwarden_core::{EngineConfig, Event};
use trainwarden_core::{JobKey, JobPhase, Timestamp};

use trainwarden_core::{CheckpointRequest, ReportedCheckpoint, RequestOutcome, RequestRecord};

use crate::credentials::{Credentials, RunDir};
use crate::recorder::{self, Recorder};
use crate::server::{AcceptedUpdate, StatusServer};
use crate::status_api;
use crate::supervisor::{Exit, ProcessGroup, SpawnError, Supervised};

/// Environment variables Kubeflow Trainer injects into training pods (`trainjobstatus` plugin). The SDK's
/// `update_trainjob_status` and transformers' `KubeflowCallback` read exactly these; the job's namespace
/// and name travel inside the URL.
pub const ENV_SERVER_URL: &str = "KUBEFLOW_TRAINER_SERVER_URL";
/// A file path: the CA certificate to verify the endpoint with.
pub const ENV_CA_CERT: &str = "KUBEFLOW_TRAINER_SERVER_CA_CERT";
/// A file path: the bearer token (a projected service-account token in a cluster).
pub const ENV_TOKEN: &str = "KUBEFLOW_TRAINER_SERVER_TOKEN";
/// A file path: the pod's annotations as its downward-API volume would hold them (where checkpoint
/// requests arrive; sdk/python/PROTOCOL.md §2).
pub const ENV_ANNOTATIONS_FILE: &str = "TRAINWARDEN_ANNOTATIONS_FILE";

/// Prefix of every line trainwarden itself prints (the command's output passes through untouched).
pub const PREFIX: &str = "[trainwarden]";

/// Where evaluator events go for notifications: [`ReportOnly`] by default, [`crate::notify::Delivering`]
/// (the notifications crate) with `trainwarden watch --notify`.
pub trait Notifier: Send {
    /// Called once, before the command starts, with every policy of the watch.
    fn configure(&mut self, _policies: &[CompiledPolicy]) {}

    /// Called with every new evaluator event, in order, from the evaluation loop — every intent of a firing
    /// (so a message can say what was done) and every transition — with the event's job data (its latest
    /// progress), if known. It must not block: queue the delivery. For a `notify` intent, returns what to
    /// report about it (e.g. "queued for delivery"); `None` keeps the default report.
    fn observe(&mut self, event: &Event, job: Option<&JobData>) -> Option<String>;

    /// Called once after the command has ended and its last events were observed: deliver what is pending
    /// (bounded in time) and return lines for the final summary (e.g. delivery counters per receiver).
    fn finish(&mut self) -> Pin<Box<dyn Future<Output = Vec<String>> + Send + '_>> {
        Box::pin(std::future::ready(Vec::new()))
    }
}

/// Reports notify intents without delivering them.
pub struct ReportOnly;

impl Notifier for ReportOnly {
    fn observe(&mut self, _event: &Event, _job: Option<&JobData>) -> Option<String> {
        None
    }
}

/// Everything a watch needs.
pub struct WatchOptions {
    /// The compiled policies to evaluate; those that select [`job`](Self::job) apply.
    pub policies: Vec<CompiledPolicy>,
    /// Script limits and other evaluator settings shared by every policy.
    pub engine: EngineConfig,
    /// The TrainJob the command reports as (namespace and name in the endpoint URL).
    pub job: JobKey,
    /// The job's labels, which the policies' selectors match against (`--label`).
    pub labels: BTreeMap<String, String>,
    /// Accelerators the command holds, for savings (`None`: the policy's `assumeGpus`).
    pub gpus: Option<f64>,
    /// SIGTERM → SIGKILL.
    pub grace_period: StdDuration,
    /// Where to write the run as a replayable stream (`--record`); `None` records nothing.
    pub record: Option<PathBuf>,
    /// Address for the endpoint; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Program and arguments.
    pub command: Vec<OsString>,
    /// The `trainwarden replay` invocation that reproduces this run, written into the recording's header.
    pub replay_hint: Option<String>,
}

/// How the command ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    /// It ran to its end.
    Finished(Exit),
    /// An enforced `suspend` stopped it.
    Suspended {
        /// The policy whose rule suspended the job.
        policy: String,
        /// The rule that fired.
        rule: String,
        /// When the suspension was issued (the wall clock of the firing).
        at: Timestamp,
        /// How the command exited once signalled.
        exit: Exit,
        /// Whether it had to be killed (SIGKILL) after the grace period or a second signal.
        killed: bool,
    },
    /// trainwarden was interrupted (Ctrl-C, SIGTERM) and stopped it.
    Interrupted {
        /// The signal trainwarden received (`SIGINT` or `SIGTERM`).
        signal: &'static str,
        /// How the command exited once signalled.
        exit: Exit,
        /// Whether it had to be killed (SIGKILL) after the grace period or a second signal.
        killed: bool,
    },
}

/// What a watch did.
#[derive(Debug)]
pub struct Outcome {
    /// Why the command stopped.
    pub ending: Ending,
    /// Every event the evaluator emitted, in order (firings, resolutions, actions).
    pub events: Vec<Event>,
    /// Totals as `replay` prints them (records, firings, intents, savings).
    pub summary: Summary,
}

/// Exit status of `trainwarden watch` when an enforced suspend stopped the command: 75, `EX_TEMPFAIL` of
/// `sysexits.h` ("a temporary failure: the user is invited to retry") — the run was stopped and can be resumed
/// from its checkpoint. Not 124, which GNU `timeout` uses for a command that ran out of time.
pub const EXIT_SUSPENDED: u8 = 75;

impl Outcome {
    /// The command's own status if it ran to its end; [`EXIT_SUSPENDED`] if the policy stopped it; 128 +
    /// the signal if trainwarden was interrupted.
    pub fn exit_code(&self) -> u8 {
        match &self.ending {
            Ending::Finished(exit) => exit.shell_code(),
            Ending::Suspended { .. } => EXIT_SUSPENDED,
            Ending::Interrupted { signal, .. } => {
                if *signal == "SIGINT" {
                    130
                } else {
                    143
                }
            }
        }
    }
}

/// A failure of trainwarden itself, with the exit status to use.
#[derive(Debug)]
pub struct WatchError {
    /// What went wrong, for the user.
    pub message: String,
    /// The status `trainwarden watch` exits with.
    pub exit_code: u8,
}

impl From<String> for WatchError {
    fn from(message: String) -> Self {
        WatchError { message, exit_code: 2 }
    }
}

impl From<SpawnError> for WatchError {
    fn from(e: SpawnError) -> Self {
        WatchError { message: e.message, exit_code: e.exit_code }
    }
}

/// Checks that some policy selects the local job, and explains how to make one do so otherwise.
pub fn check_selected(
    policies: &[CompiledPolicy],
    job: &JobKey,
    labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    if policies.iter().any(|p| p.selects(&job.namespace, labels, None)) {
        return Ok(());
    }
    let mut why = Vec::new();
    for p in policies {
        let scope = match &p.reference.namespace {
            Some(ns) => format!("namespace {ns}"),
            None => "any namespace whose labels match its namespaceSelector (there are none locally)".into(),
        };
        why.push(format!(
            "  {} {} selects jobs in {scope} with labels matching {}",
            p.reference.kind,
            p.reference,
            serde_json::to_string(&p.selector).unwrap_or_default()
        ));
    }
    let labels = if labels.is_empty() {
        "no labels".to_string()
    } else {
        labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    };
    Err(format!(
        "no policy selects the local job {job} ({labels}); use --job NAMESPACE/NAME and --label KEY=VALUE to match one:\n{}",
        why.join("\n")
    ))
}

fn wall_now() -> Timestamp {
    let now = Timestamp::now();
    now.round(Unit::Millisecond).unwrap_or(now)
}

/// The evaluation loop's state.
struct Driver<'a> {
    replay: Replay,
    recorder: Recorder,
    tz: jiff::tz::TimeZone,
    /// Events of `replay` already reported.
    reported: usize,
    /// Latest time given to the evaluator: records and timers never go back, even if the wall clock does.
    clock: Timestamp,
    notifier: &'a mut dyn Notifier,
    out: &'a mut (dyn Write + Send),
    /// The first enforced suspension: (policy, rule, time).
    suspension: Option<(String, String, Timestamp)>,
    /// Checkpoint requests, as the controller keeps them on a TrainJob.
    requests: RequestRecord,
    /// The suspensions waiting for their checkpoint (`checkpointFirst`): intent id, policy, rule, time.
    waiting: Vec<(String, String, String, Timestamp)>,
    /// Where requests are written (`None` in tests that do not run a command).
    run_dir: Option<&'a RunDir>,
}

impl Driver<'_> {
    fn say(&mut self, text: &str) {
        for line in text.lines() {
            let _ = writeln!(self.out, "{PREFIX} {line}");
        }
        let _ = self.out.flush();
    }

    fn now(&mut self) -> Timestamp {
        self.clock = self.clock.max(wall_now());
        self.clock
    }

    fn feed(&mut self, line: &str) -> Result<(), String> {
        let record: StreamRecord = self.recorder.record(line)?;
        self.replay.feed(record);
        self.report();
        Ok(())
    }

    /// An accepted report. Kubeflow stores any value the CRD schema allows, so a metric that is not a number
    /// (`"abc"`) was accepted too; it cannot be evaluated, so it is reported and left out of the evaluation
    /// and the recording rather than ending the watch.
    fn observe(&mut self, job: &JobKey, update: &AcceptedUpdate) -> Result<(), String> {
        if let Err(e) = trainwarden_core::from_trainer_status(&update.trainer_status, "trainerStatus") {
            self.say(&format!("sample accepted (as Kubeflow would) but not evaluated: {e}"));
            return Ok(());
        }
        let now = self.now();
        self.feed(&recorder::update_line(now, job, &update.trainer_status))?;
        let reported = trainwarden_core::from_trainer_status(&update.trainer_status, "trainerStatus")
            .ok()
            .and_then(|s| ReportedCheckpoint::of(&s.metrics));
        self.judge_request(reported, now);
        Ok(())
    }

    fn run_timers(&mut self) {
        let now = self.now();
        self.replay.advance_to(now);
        self.report();
        self.judge_request(None, now);
    }

    /// When the pending checkpoint request times out, if one is pending.
    fn request_deadline(&self) -> Option<Timestamp> {
        self.requests.pending().map(CheckpointRequest::deadline)
    }

    /// Intent `intent` asks for a checkpoint: a new request written to the annotations file, or the pending
    /// one joined.
    fn ask_checkpoint(&mut self, intent: &trainwarden_core::ActionIntent) -> String {
        let now = self.now();
        let timeout =
            intent.action.checkpoint_timeout().unwrap_or(trainwarden_core::DEFAULT_CHECKPOINT_TIMEOUT);
        let reason = format!(
            "{} {} (rule {}): {}",
            intent.policy.kind, intent.policy, intent.rule, intent.reason.summary
        );
        let new = self.requests.ask(&intent.id, reason, timeout, now);
        let Some(request) = self.requests.pending().cloned() else { return String::new() };
        if !new {
            return format!("joined checkpoint request {} (pending)", request.id);
        }
        match self.run_dir.map(|d| d.write_annotations(Some(&request.pod_annotation()))) {
            Some(Err(e)) => format!("checkpoint request {} could not be written: {e}", request.id),
            _ => format!(
                "checkpoint request {} written to ${ENV_ANNOTATIONS_FILE}; waiting up to {} for the acknowledgement",
                request.id,
                trainwarden_core::fmt_span(request.timeout_seconds as f64)
            ),
        }
    }

    /// Settles the pending request once the command's report answers it or its time is up; a suspension
    /// waiting on it goes ahead.
    fn judge_request(&mut self, reported: Option<ReportedCheckpoint>, now: Timestamp) {
        let Some(request) = self.requests.pending().cloned() else { return };
        let Some(outcome) = request.judge(reported, now) else { return };
        self.settle_request(&request, outcome);
    }

    fn settle_request(&mut self, request: &CheckpointRequest, outcome: RequestOutcome) {
        self.requests.settle(request.id, outcome.clone());
        if let Some(Err(e)) = self.run_dir.map(|d| d.write_annotations(None)) {
            self.say(&format!("warning: {e}"));
        }
        let seconds =
            |at: Timestamp| (at.as_millisecond() - request.requested_at.as_millisecond()) as f64 / 1000.0;
        let (said, note) = match &outcome {
            RequestOutcome::Acknowledged { step, at } => (
                format!(
                    "checkpoint request {} acknowledged: saved at step {step}, {} after the request",
                    request.id,
                    trainwarden_core::fmt_span(seconds(*at))
                ),
                format!("after its checkpoint at step {step}"),
            ),
            RequestOutcome::TimedOut { .. } => (
                format!(
                    "checkpoint request {} not acknowledged within {} (does the command read ${ENV_ANNOTATIONS_FILE} and report checkpoint_step and checkpoint_request_id?)",
                    request.id,
                    trainwarden_core::fmt_span(request.timeout_seconds as f64)
                ),
                "WITHOUT a new checkpoint".to_string(),
            ),
            RequestOutcome::Withdrawn { why, .. } => {
                (format!("checkpoint request {} withdrawn: {why}", request.id), String::new())
            }
        };
        self.say(&said);
        let waiting = std::mem::take(&mut self.waiting);
        for (id, policy, rule, at) in waiting {
            if !request.intents.contains(&id) {
                self.waiting.push((id, policy, rule, at));
                continue;
            }
            if self.suspension.is_none() && !matches!(outcome, RequestOutcome::Withdrawn { .. }) {
                self.say(&format!("suspend by {policy} rule {rule} goes ahead {note}"));
                self.suspension = Some((policy, rule, at));
            }
        }
    }

    /// Prints new events and acts on new intents.
    fn report(&mut self) {
        let events: Vec<Event> = self.replay.events[self.reported..].to_vec();
        self.reported = self.replay.events.len();
        for event in events {
            let job = match &event {
                Event::Intent(i) => Some(&i.job),
                Event::Transition { job, .. } => Some(job),
                _ => None,
            };
            let note = self.notifier.observe(&event, job.and_then(|k| self.replay.evaluator().job(k)));
            let mut text = replay::render_event(&event, &self.tz);
            if let Event::Intent(intent) = &event {
                let what = match (&intent.action, intent.mode, note) {
                    (ActionSpec::Notify(_), _, Some(note)) => note,
                    (_, Mode::Audit, _) => "Audit mode: reported only".to_string(),
                    (ActionSpec::Checkpoint(_), Mode::Enforce, _) => self.ask_checkpoint(intent),
                    (ActionSpec::Suspend(s), Mode::Enforce, _) if s.checkpoint_first.is_some() => {
                        let asked = self.ask_checkpoint(intent);
                        self.waiting.push((
                            intent.id.clone(),
                            intent.policy.to_string(),
                            intent.rule.clone(),
                            intent.at,
                        ));
                        format!("{asked}; the command is stopped once it is acknowledged or timed out")
                    }
                    (ActionSpec::Suspend(_), Mode::Enforce, _) => {
                        if self.suspension.is_none() {
                            self.suspension =
                                Some((intent.policy.to_string(), intent.rule.clone(), intent.at));
                        }
                        "stopping the command: SIGTERM to its process group".to_string()
                    }
                    (ActionSpec::Notify(n), Mode::Enforce, None) => {
                        format!("notify {}: reported only (delivered with --notify)", n.to)
                    }
                    (other, Mode::Enforce, _) => {
                        format!("{}: not applicable locally (there is no TrainJob object)", other.kind())
                    }
                };
                text = format!("{}  ⤷ {what}\n", text.trim_end());
            }
            self.say(&text);
        }
    }
}

enum Stop {
    Running,
    /// Signalled; SIGKILL at `deadline` unless the command exits first.
    Stopping {
        deadline: Instant,
        killed: bool,
    },
}

/// Runs the command under the policies until it exits. Trainwarden's own lines go to `out`.
pub async fn watch(
    options: WatchOptions,
    notifier: &mut dyn Notifier,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, WatchError> {
    let WatchOptions {
        policies,
        engine,
        job,
        labels,
        gpus,
        grace_period,
        record,
        listen,
        command,
        replay_hint,
    } = options;
    Replay::check_unique(&policies)?;
    check_selected(&policies, &job, &labels)?;
    // check_selected found a policy, so there is a first one; its zone is the timeline's, as in replay.
    let tz = policies.first().map_or(jiff::tz::TimeZone::UTC, |p| p.env.calendar.time_zone().clone());
    let policy_names: Vec<String> = policies.iter().map(|p| p.reference.to_string()).collect();
    // When the first report is overdue: the longest samplingInterval of the policies that apply.
    let first_report_within = policies
        .iter()
        .filter(|p| p.selects(&job.namespace, &labels, None))
        .map(|p| p.sampling_interval.to_std())
        .max()
        .unwrap_or(StdDuration::from_secs(30));
    notifier.configure(&policies);

    let credentials = Credentials::generate()?;
    let run_dir = RunDir::create(&credentials)?;
    let (updates_tx, mut updates) = mpsc::channel::<AcceptedUpdate>(256);
    let server = StatusServer::start(
        listen,
        credentials.tls.clone(),
        job.clone(),
        credentials.token.clone(),
        updates_tx,
    )
    .await?;
    let host = match server.addr.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip @ std::net::IpAddr::V4(_) => ip.to_string(),
    };
    let url = format!("https://{host}:{}{}", server.addr.port(), status_api::status_path(&job));

    let mut header = vec![format!(
        "trainwarden watch: job {job}, policies {}, eval interval {}",
        policy_names.join(", "),
        engine.eval_interval
    )];
    header.extend(replay_hint.map(|h| format!("replay: {h}")));
    let recorder = Recorder::create(record.as_deref(), &header)?;
    let start = wall_now();
    let mut driver = Driver {
        replay: Replay::new(policies, engine),
        recorder,
        tz,
        reported: 0,
        clock: start,
        notifier,
        out,
        suspension: None,
        requests: RequestRecord::default(),
        waiting: Vec::new(),
        run_dir: Some(&run_dir),
    };
    driver.say(&format!("job {job} under {}; progress endpoint {url}", policy_names.join(", ")));
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(|e| format!("installing the Ctrl-C handler: {e}"))?;
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| format!("installing the SIGTERM handler: {e}"))?;

    driver.feed(&recorder::start_line(start, &job, &labels, gpus))?;
    let env = vec![
        (ENV_SERVER_URL.to_string(), OsString::from(&url)),
        (ENV_CA_CERT.to_string(), run_dir.ca_file.clone().into_os_string()),
        (ENV_TOKEN.to_string(), run_dir.token_file.clone().into_os_string()),
        (ENV_ANNOTATIONS_FILE.to_string(), run_dir.annotations_file.clone().into_os_string()),
    ];
    let mut child = Supervised::spawn(&command, &env)?;
    let group: ProcessGroup = child.group();
    driver.say(&format!("started {} (pid {})", display_command(&command), group.id()));

    let mut stop = Stop::Running;
    let mut first_report_due = Some(Instant::now() + first_report_within);
    // Whether a suspension actually signalled the command (one decided after it exited did not).
    let mut suspend_signalled = false;
    let mut interrupted: Option<&'static str> = None;
    let exit = loop {
        if let (Stop::Running, Some((policy, rule, _))) = (&stop, &driver.suspension) {
            let message = format!("suspend by {policy} rule {rule}: SIGTERM to process group {}", group.id());
            driver.say(&message);
            group.signal(Signal::SIGTERM)?;
            stop = Stop::Stopping { deadline: Instant::now() + grace_period, killed: false };
            suspend_signalled = true;
        }
        let next_tick = [driver.replay.evaluator().next_tick(), driver.request_deadline()]
            .into_iter()
            .flatten()
            .min()
            .map(|t| {
                let wait = t.duration_since(wall_now()).as_secs_f64().max(0.0);
                Instant::now() + StdDuration::from_secs_f64(wait.min(86_400.0))
            });
        let kill_at = match stop {
            Stop::Stopping { deadline, killed: false } => Some(deadline),
            _ => None,
        };
        tokio::select! {
            exit = child.wait() => break exit?,
            Some(update) = updates.recv() => {
                first_report_due = None;
                driver.observe(&job, &update)?;
            }
            () = sleep_until(first_report_due) => {
                first_report_due = None;
                driver.say(&no_report_yet(first_report_within, &url));
            }
            () = sleep_until(next_tick) => driver.run_timers(),
            () = sleep_until(kill_at) => {
                driver.say(&format!("grace period {grace_period:?} is over: SIGKILL to process group {}", group.id()));
                group.signal(Signal::SIGKILL)?;
                stop = Stop::Stopping { deadline: Instant::now(), killed: true };
            }
            Some(()) = sigint.recv() => {
                stop = forward(&mut driver, group, stop, Signal::SIGINT, grace_period)?;
                interrupted.get_or_insert("SIGINT");
            }
            Some(()) = sigterm.recv() => {
                stop = forward(&mut driver, group, stop, Signal::SIGTERM, grace_period)?;
                interrupted.get_or_insert("SIGTERM");
            }
        }
    };
    let killed = matches!(stop, Stop::Stopping { killed: true, .. });
    if !matches!(stop, Stop::Running) {
        // What the command left behind in its group dies with it, as with a pod's termination.
        let _ = group.signal(Signal::SIGKILL);
    }
    // Reports that arrived before the exit still count.
    while let Ok(update) = updates.try_recv() {
        driver.observe(&job, &update)?;
    }
    if let Some(request) = driver.requests.pending().cloned() {
        let at = driver.now();
        let why = "the command exited".to_string();
        driver.settle_request(&request, RequestOutcome::Withdrawn { at, why });
    }
    drop(server);
    let ending = match (&driver.suspension, interrupted) {
        (Some((policy, rule, at)), _) if suspend_signalled => {
            Ending::Suspended { policy: policy.clone(), rule: rule.clone(), at: *at, exit, killed }
        }
        (_, Some(signal)) => Ending::Interrupted { signal, exit, killed },
        (_, None) => Ending::Finished(exit),
    };
    let phase = match &ending {
        Ending::Suspended { .. } => Some(JobPhase::Suspended),
        Ending::Interrupted { .. } => None,
        Ending::Finished(exit) if exit.success() => Some(JobPhase::Complete),
        Ending::Finished(_) => Some(JobPhase::Failed),
    };
    let end = driver.now();
    driver.feed(&recorder::end_line(end, &job, phase))?;

    // Pending notifications go out now (the notifier bounds the wait); another signal stops waiting.
    let delivery = tokio::select! {
        lines = driver.notifier.finish() => lines,
        Some(()) = sigint.recv() => vec!["delivery cut short by SIGINT".to_string()],
        Some(()) = sigterm.recv() => vec!["delivery cut short by SIGTERM".to_string()],
    };

    let summary = driver.replay.summary.clone();
    let mut text = replay::render_text(&[], &summary, &driver.tz);
    text = text.trim_start_matches('\n').to_string();
    for line in delivery {
        text += &format!("  notified     {line}\n");
    }
    text += &format!("  command      {}\n", describe(&ending, &driver.tz, grace_period));
    if let Some(path) = driver.recorder.path() {
        text += &format!("  recorded     {}\n", path.display());
    }
    driver.say(&text);
    let events = driver.replay.events.clone();
    drop(driver);
    drop(run_dir);
    Ok(Outcome { ending, events, summary })
}

fn forward(
    driver: &mut Driver<'_>,
    group: ProcessGroup,
    stop: Stop,
    signal: Signal,
    grace_period: StdDuration,
) -> Result<Stop, String> {
    match stop {
        Stop::Running => {
            driver.say(&format!(
                "{}: forwarding it to the command; SIGKILL in {grace_period:?}",
                signal.as_str()
            ));
            group.signal(signal)?;
            Ok(Stop::Stopping { deadline: Instant::now() + grace_period, killed: false })
        }
        Stop::Stopping { .. } => {
            driver.say(&format!("{} again: SIGKILL to the command", signal.as_str()));
            group.signal(Signal::SIGKILL)?;
            Ok(Stop::Stopping { deadline: Instant::now(), killed: true })
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The warning, printed once, for a command that has not reported within the sampling interval.
fn no_report_yet(within: StdDuration, url: &str) -> String {
    format!(
        "warning: no progress report yet after {within:?} (the policy's samplingInterval). The command is \
         expected to POST its progress to {url}, as given in ${ENV_SERVER_URL}, with the CA certificate in the \
         file ${ENV_CA_CERT} and the bearer token in the file ${ENV_TOKEN} (the Kubeflow SDK's \
         update_trainjob_status and transformers' KubeflowCallback do this by themselves). Until it reports, \
         rules that judge reports cannot fire, and a `uses: stalled` rule stops it only if it sets \
         requireFirstSample: false."
    )
}

fn display_command(command: &[OsString]) -> String {
    command.iter().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>().join(" ")
}

fn describe(ending: &Ending, tz: &jiff::tz::TimeZone, grace_period: StdDuration) -> String {
    match ending {
        Ending::Finished(exit) => format!("ran to its end ({exit})"),
        Ending::Suspended { policy, rule, at, exit, killed } => {
            let local = at.to_zoned(tz.clone()).strftime("%H:%M:%S");
            let how = if *killed {
                format!("did not exit within {grace_period:?} of SIGTERM; SIGKILL ({exit})")
            } else {
                format!("exited after SIGTERM ({exit})")
            };
            format!("stopped by {policy} rule {rule} at {local}: {how}")
        }
        Ending::Interrupted { signal, exit, killed } => {
            let how = if *killed { "SIGKILL after the grace period or a second signal" } else { "exited" };
            format!("interrupted ({signal} forwarded): {how} ({exit})")
        }
    }
}
