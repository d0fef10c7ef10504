//! Subcommand bodies. `Ok(false)` means "ran, but found problems" (exit 1); `Err` is a usage or I/O error (exit 2).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use trainwarden_core::CompiledPolicy;
use trainwarden_core::PolicyDuration;
use trainwarden_core::Timestamp;
use trainwarden_core::replay::{self, Replay};
use trainwarden_core::rule_test::{self, FileSource};
use trainwarden_core::{BUILTINS, ScriptEngine};
use trainwarden_core::{EngineConfig, Evaluator, Event};

use trainwarden_notify::delivery::RetryPolicy;
use trainwarden_notify::offline::{self, OfflineNotifications};
use trainwarden_notify::{FileSecrets, JobProgress, LocalSecrets, SendConfig, Sender};

use crate::read;

/// The most evaluation rounds (stream span ÷ `--eval-interval`) a replay runs: a year at 5 s.
const MAX_ROUNDS: f64 = 6_400_000.0;

pub(crate) fn config(eval_interval: &str) -> Result<EngineConfig, String> {
    let eval_interval: PolicyDuration = eval_interval.parse().map_err(|e| format!("--eval-interval: {e}"))?;
    // Each round re-evaluates every job; reports come seconds apart, so a shorter round only burns time.
    if eval_interval < PolicyDuration::from_secs(1) {
        return Err(format!("--eval-interval {eval_interval} is shorter than 1s, the shortest useful round"));
    }
    Ok(EngineConfig { eval_interval, ..EngineConfig::default() })
}

/// Reads and compiles every policy document in the files; all errors of all files are reported.
pub(crate) fn load_policies(files: &[PathBuf], engine: &ScriptEngine) -> Result<Vec<CompiledPolicy>, String> {
    let mut compiled = Vec::new();
    let mut report = Vec::new();
    for file in files {
        let text = read(file)?;
        let source = file.display().to_string();
        match trainwarden_core::parse_documents(&text, &source) {
            Ok(docs) => {
                for doc in docs {
                    match trainwarden_core::compile(&doc, engine) {
                        Ok(p) => compiled.push(p),
                        Err(e) => report.push(format!("{source}: {e}")),
                    }
                }
            }
            Err(e) => report.push(e.to_string()),
        }
    }
    if !report.is_empty() {
        return Err(format!("invalid policy\n{}", report.join("\n")));
    }
    if compiled.is_empty() {
        return Err("no policy documents found".into());
    }
    Ok(compiled)
}

/// What `replay` does with the notifications the policies' receivers would get.
pub(crate) struct ReplayNotify {
    /// `--notify`: send them for real (secrets from the environment or `secrets_dir`).
    pub send: bool,
    /// `--secrets-dir`: `<dir>/<namespace>/<secret>/<key>` files, after `TRAINWARDEN_SECRET_*` variables.
    pub secrets_dir: Option<PathBuf>,
}

pub(crate) fn replay(
    policy_files: &[PathBuf],
    json: bool,
    eval_interval: &str,
    until: Option<&str>,
    streams: &[PathBuf],
    notify: &ReplayNotify,
) -> Result<bool, String> {
    let config = config(eval_interval)?;
    let until = until
        .map(|u| u.parse::<Timestamp>().map_err(|e| format!("--until: expected an RFC 3339 time: {e}")))
        .transpose()?;
    let engine = Evaluator::new(config.clone());
    let policies = load_policies(policy_files, engine.scripts())?;
    Replay::check_unique(&policies)?;
    for note in policies.iter().flat_map(CompiledPolicy::notifies_nowhere) {
        eprintln!("note: {note}");
    }
    let tz = policies[0].env.calendar.time_zone().clone();
    let mut records = Vec::new();
    let mut errors = Vec::new();
    for path in streams {
        let text = read(path)?;
        match trainwarden_core::parse_stream(&text, &path.display().to_string()) {
            Ok(r) => records.extend(r),
            Err(es) => errors.extend(es.into_iter().map(|e| e.to_string())),
        }
    }
    if !errors.is_empty() {
        return Err(format!("invalid stream\n{}", errors.join("\n")));
    }
    // Several streams are merged on their clocks; the sort is stable, so each file keeps its own order.
    records.sort_by_key(trainwarden_core::StreamRecord::time);
    if let (Some(until), Some(last)) = (until, records.last().map(trainwarden_core::StreamRecord::time))
        && until.duration_since(last).as_secs() > 366 * 86_400
    {
        return Err(format!("--until {until} is more than a year after the last record ({last})"));
    }
    // Time costs one round of evaluation per interval: refuse a replay that could not finish.
    if let (Some(first), Some(last)) = (records.first(), records.last()) {
        let end = until.unwrap_or_else(|| last.time()).max(last.time());
        let rounds = end.duration_since(first.time()).as_secs_f64() / config.eval_interval.as_secs_f64();
        if rounds > MAX_ROUNDS {
            return Err(format!(
                "replaying {} to {end} every {} is {} evaluation rounds (at most {}): raise --eval-interval",
                first.time(),
                config.eval_interval,
                rounds.round(),
                MAX_ROUNDS
            ));
        }
    }
    // Notifications are grouped on the stream's clock, event by event, with each job's progress at the time.
    let mut notifications = OfflineNotifications::new(&policies);
    if notify.send && !notifications.has_receivers() {
        return Err("--notify: no policy declares spec.receivers".into());
    }
    let mut seen = 0;
    let mut replay = Replay::new(policies, config);
    for r in records {
        replay.feed(r);
        observe_notifications(&replay, &mut notifications, &mut seen);
    }
    replay.finish(until);
    observe_notifications(&replay, &mut notifications, &mut seen);
    if let Some(end) = replay.summary.last_time {
        notifications.finish(end);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let result = if json {
        replay
            .events
            .iter()
            .map(replay::event_json)
            .chain(notifications.notifications.iter().map(offline::notification_json))
            .chain(std::iter::once(replay::summary_json(&replay.summary)))
            .try_for_each(|v| writeln!(out, "{v}"))
    } else {
        write!(out, "{}", replay::render_text(&replay.events, &replay.summary, &tz)).and_then(|()| {
            if notifications.has_receivers() {
                write!(out, "{}", offline::render_text(&notifications, &tz))
            } else {
                Ok(())
            }
        })
    };
    result.map_err(|e| format!("writing output: {e}"))?;
    drop(out);
    let delivered =
        if notify.send { send_notifications(&notifications, notify.secrets_dir.as_deref())? } else { true };
    // A rule that cannot be evaluated never fires: a replay that looks quiet would be a lie.
    let errors = replay.summary.rule_errors;
    if errors > 0 {
        eprintln!(
            "error: {} failed (the RuleError lines above say where); those rules never fired",
            trainwarden_core::plural(errors, "rule evaluation", "rule evaluations")
        );
        return Ok(false);
    }
    Ok(delivered)
}

/// Feeds the replay's new events to the notification grouper.
fn observe_notifications(replay: &Replay, notifications: &mut OfflineNotifications, seen: &mut usize) {
    for event in &replay.events[*seen..] {
        let job = match event {
            Event::Intent(i) => Some(&i.job),
            Event::Transition { job, .. } => Some(job),
            _ => None,
        };
        let progress = job.and_then(|k| replay.evaluator().job(k)).and_then(JobProgress::of);
        notifications.observe(event, progress);
    }
    *seen = replay.events.len();
}

/// `replay --notify`: sends every notification (channels concurrently, each at its rate limit), with retries
/// up to a printed deadline; reports each on stderr.
fn send_notifications(
    notifications: &OfflineNotifications,
    secrets_dir: Option<&Path>,
) -> Result<bool, String> {
    let secrets = LocalSecrets { files: secrets_dir.map(FileSecrets::new) };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the async runtime: {e}"))?;
    let outcomes = runtime.block_on(async {
        let sender = Sender::new(SendConfig::default(), Arc::new(secrets))?;
        let retry = RetryPolicy {
            initial_backoff: std::time::Duration::from_secs(1),
            max_backoff: std::time::Duration::from_secs(10),
            give_up_after: std::time::Duration::from_secs(60),
        };
        let wait = retry.give_up_after;
        eprintln!("sending; failed deliveries are retried for up to {}s", wait.as_secs());
        Ok::<_, String>(offline::send_all(&notifications.notifications, &sender, &retry, wait).await)
    })?;
    let mut ok = true;
    for o in &outcomes {
        match &o.result {
            Ok(()) => {
                eprintln!("notification {}: sent to {} ({})", o.index + 1, o.receiver, o.channel.as_str());
            }
            Err(e) => {
                ok = false;
                eprintln!(
                    "notification {}: NOT sent to {} ({}): {e}",
                    o.index + 1,
                    o.receiver,
                    o.channel.as_str()
                );
            }
        }
    }
    Ok(ok)
}

struct Dir(PathBuf);

impl FileSource for Dir {
    fn read(&self, relative: &str) -> Result<String, String> {
        let path = self.0.join(relative);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// Files under `path` that `wanted` takes by name: the path itself if it is a file, else every such file
/// below the directory, in name order. Links into directories are not followed ([`is_real_dir`]).
fn collect_files(path: &Path, wanted: fn(&str) -> bool, out: &mut Vec<PathBuf>) -> Result<(), String> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            let name = e.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if is_real_dir(&e) {
                collect_files(&e, wanted, out)?;
            } else if wanted(&name) {
                out.push(e);
            }
        }
        Ok(())
    } else if path.exists() {
        out.push(path.to_path_buf());
        Ok(())
    } else {
        Err(format!("{}: no such file or directory", path.display()))
    }
}

fn is_test_file(name: &str) -> bool {
    name.ends_with(".test.yaml")
}

/// Policy files: `*.yaml`/`*.yml` except test files (`*.test.yaml`, checked by `trainwarden test`).
fn is_policy_file(name: &str) -> bool {
    (name.ends_with(".yaml") || name.ends_with(".yml"))
        && !name.ends_with(".test.yaml")
        && !name.ends_with(".test.yml")
}

pub(crate) fn test(paths: &[PathBuf]) -> Result<bool, String> {
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, is_test_file, &mut files)?;
    }
    if files.is_empty() {
        return Err("no *.test.yaml files found".into());
    }
    let (mut passed, mut failed) = (0u64, 0u64);
    for file in files {
        let text = read(&file)?;
        let name = file.display().to_string();
        let parsed = match rule_test::parse_test_file(&text) {
            Ok(t) => t,
            Err(e) => {
                println!("FAIL {name}: {e}");
                failed += 1;
                continue;
            }
        };
        let dir = Dir(file.parent().map(Path::to_path_buf).unwrap_or_default());
        let config = match parsed.eval_interval.as_deref().map(config).transpose() {
            Ok(c) => c.unwrap_or_default(),
            Err(e) => {
                println!("FAIL {name}: {e}");
                failed += 1;
                continue;
            }
        };
        let docs = match rule_test::load_policies(&parsed, &dir) {
            Ok(d) => d,
            Err(errors) => {
                println!("FAIL {name}: invalid policy");
                for e in errors {
                    println!("    {e}");
                }
                failed += 1;
                continue;
            }
        };
        for case in &parsed.tests {
            // Every case gets freshly compiled policies: no state leaks between cases.
            let engine = Evaluator::new(config.clone());
            let compiled: Result<Vec<_>, _> =
                docs.iter().map(|d| trainwarden_core::compile(d, engine.scripts())).collect();
            let result = match compiled
                .map_err(|e| e.to_string())
                .and_then(|p| Replay::check_unique(&p).map(|()| p))
            {
                Ok(policies) => rule_test::run_case(case, policies, config.clone(), &dir),
                Err(e) => rule_test::CaseResult { name: case.name.clone(), failures: vec![e] },
            };
            if result.failures.is_empty() {
                passed += 1;
                println!("ok   {name} :: {}", result.name);
            } else {
                failed += 1;
                println!("FAIL {name} :: {}", result.name);
                for f in &result.failures {
                    for line in f.lines() {
                        println!("    {line}");
                    }
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(failed == 0)
}

/// A directory that is not a symbolic link: a search does not follow links into directories, so a link loop
/// cannot send it round forever (a link named on the command line is followed).
fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

pub(crate) fn validate(paths: &[PathBuf]) -> Result<bool, String> {
    let mut files = Vec::new();
    for p in paths {
        collect_files(p, is_policy_file, &mut files)?;
    }
    if files.is_empty() {
        return Err(format!(
            "no policy files (*.yaml, *.yml) in {}",
            paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ));
    }
    let engine = ScriptEngine::default();
    let mut ok = true;
    for file in files {
        let text = read(&file)?;
        let source = file.display().to_string();
        match trainwarden_core::parse_documents(&text, &source) {
            Ok(docs) => {
                for doc in docs {
                    match trainwarden_core::compile(&doc, &engine) {
                        Ok(p) => println!(
                            "{source}: {} {} is valid ({})",
                            p.reference.kind,
                            p.reference,
                            trainwarden_core::plural(p.rules.len() as u64, "rule", "rules")
                        ),
                        Err(e) => {
                            ok = false;
                            println!("{source}: {e}");
                        }
                    }
                }
            }
            Err(e) => {
                ok = false;
                println!("{e}");
            }
        }
    }
    Ok(ok)
}

pub(crate) fn detectors() {
    for d in trainwarden_core::DETECTORS {
        println!("{}\n  {}", d.name, d.summary);
        for trainwarden_core::ParamDoc { name, ty, default, doc } in d.params {
            println!("    {name:<28} {ty:<20} default {default:<10} {doc}");
        }
        println!("  example with: {}\n", d.example);
    }
}

pub(crate) fn functions() {
    for b in BUILTINS {
        println!("{}\n  {}\n  e.g. {}  →  {}\n", b.signature, b.doc, b.example, b.expected);
    }
}
