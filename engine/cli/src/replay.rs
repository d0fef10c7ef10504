//! `trainwarden replay`: recorded streams through the policies, streamed end to end. Each input is read line
//! by line (decompressed as it is read), the inputs are merged on their clocks through a bounded reorder
//! window (`--max-lateness`), and each event is printed as it happens; only the window, the jobs' state and
//! the notifications (printed after the timeline) are held, so memory does not grow with the stream's length.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use trainwarden_core::replay::shard::Sharding;
use trainwarden_core::replay::{self, Replay};
use trainwarden_core::{CompiledPolicy, Evaluator, Event, Merge, PolicyDuration, Timestamp};
use trainwarden_notify::delivery::RetryPolicy;
use trainwarden_notify::offline::{self, OfflineNotifications};
use trainwarden_notify::{FileSecrets, JobProgress, LocalSecrets, SendConfig, Sender};

use crate::commands::{config, load_exceptions, load_policies};
use crate::streams;

mod sharded;

/// The most evaluator threads `replay` starts by itself (one per core but one, up to this).
const MAX_SHARDS: usize = 8;

/// The most evaluation rounds (stream span ÷ `--eval-interval`) a replay runs: a year at 5 s.
const MAX_ROUNDS: f64 = 6_400_000.0;

/// What `replay` does with the notifications the policies' receivers would get.
pub(crate) struct ReplayNotify {
    /// `--notify`: send them for real (secrets from the environment or `secrets_dir`).
    pub send: bool,
    /// `--secrets-dir`: `<dir>/<namespace>/<secret>/<key>` files, after `TRAINWARDEN_SECRET_*` variables.
    pub secrets_dir: Option<PathBuf>,
}

/// The arguments of `replay`, as given.
pub(crate) struct ReplayArgs<'a> {
    pub policy_files: &'a [PathBuf],
    pub json: bool,
    pub eval_interval: &'a str,
    pub until: Option<&'a str>,
    /// `--max-lateness`, if given.
    pub max_lateness: Option<&'a str>,
    pub streams: &'a [PathBuf],
    pub namespace_labels: Option<&'a Path>,
    pub notify: &'a ReplayNotify,
    /// `--shards`: evaluator threads, jobs spread over them by key (`None`: one per core but one).
    pub shards: Option<usize>,
}

pub(crate) fn replay(args: &ReplayArgs<'_>) -> Result<bool, String> {
    let config = config(args.eval_interval)?;
    let until = args
        .until
        .map(|u| u.parse::<Timestamp>().map_err(|e| format!("--until: expected an RFC 3339 time: {e}")))
        .transpose()?;
    let inputs = streams::open_inputs(args.streams)?;
    let live = inputs.iter().any(|i| i.live);
    let max_lateness: PolicyDuration = match args.max_lateness {
        Some(text) => text.parse().map_err(|e| format!("--max-lateness: {e}"))?,
        None if live => PolicyDuration::from_secs(0),
        None => PolicyDuration::from_secs(300),
    };
    let engine = Evaluator::new(config.clone());
    let policies = load_policies(args.policy_files, engine.scripts())?;
    Replay::check_unique(&policies)?;
    let shards = match (args.shards, Sharding::refuses(&policies, &config)) {
        (Some(0), _) => return Err("--shards: at least 1".into()),
        (Some(n), Some(why)) if n > 1 => {
            eprintln!("note: replaying on one shard, not {n}: {why}");
            1
        }
        (_, Some(_)) => 1,
        (Some(n), None) => n,
        // One core is the decoding's (and the output's); the rest evaluate.
        (None, None) => {
            let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
            cores.saturating_sub(1).clamp(1, MAX_SHARDS)
        }
    };
    for note in policies.iter().flat_map(CompiledPolicy::notifies_nowhere) {
        eprintln!("note: {note}");
    }
    let tz = policies[0].env.calendar.time_zone().clone();
    let decoded = inputs.into_iter().map(streams::DecodedAhead::start).collect::<Result<Vec<_>, _>>()?;
    let mut merge = Merge::new(decoded, max_lateness);
    // Notifications are grouped on the stream's clock, event by event, with each job's progress at the time.
    let notifications = OfflineNotifications::new(&policies);
    if args.notify.send && !notifications.has_receivers() {
        return Err("--notify: no policy declares spec.receivers".into());
    }
    let mut rounds = RoundLimit { interval: config.eval_interval, until, first: None, last: None };
    let exceptions = load_exceptions(args.policy_files, &policies)?;
    let namespace_labels = match args.namespace_labels {
        Some(path) => {
            trainwarden_core::parse_namespace_labels(&crate::read(path)?, &path.display().to_string())?
        }
        None => trainwarden_core::NamespaceLabels::new(),
    };
    // Each shard its own evaluator (its own Rhai engine and timers), with the same policies, exceptions and
    // namespace labels.
    let mut replays = Vec::with_capacity(shards);
    let mut first = Some(policies);
    for _ in 0..shards {
        let policies = match first.take() {
            Some(p) => p,
            None => load_policies(args.policy_files, engine.scripts())?,
        };
        let mut replay = Replay::new(policies, config.clone());
        for (namespace, labels) in namespace_labels.clone() {
            replay.set_namespace_labels(&namespace, labels);
        }
        replay.add_exceptions(exceptions.clone());
        replays.push(replay);
    }
    let heading = "invalid stream (replayed up to the first bad line)";
    let run = sharded::Run { replays, until, json: args.json, tz, live, notifications, rounds: &mut rounds };
    let done = sharded::replay(&mut merge, heading, run)?;
    let notifications = done.notifications;
    let Some(summary) = done.summary else {
        return Err("the replay stopped before its end".into());
    };
    let delivered = if args.notify.send {
        send_notifications(&notifications, args.notify.secrets_dir.as_deref())?
    } else {
        true
    };
    // A rule that cannot be evaluated never fires: a replay that looks quiet would be a lie.
    let errors = summary.rule_errors;
    if errors > 0 {
        eprintln!(
            "error: {} failed (the RuleError lines above say where); those rules never fired",
            trainwarden_core::plural(errors, "rule evaluation", "rule evaluations")
        );
        return Ok(false);
    }
    Ok(delivered)
}

/// Time costs one round of evaluation per interval: a replay that could not finish is refused as soon as
/// it is known — from the first record when `--until` is given, else at the first record past the limit
/// (what ran before it is within the limit).
struct RoundLimit {
    interval: PolicyDuration,
    until: Option<Timestamp>,
    /// The first record's time and where it is (`file:line`).
    first: Option<(Timestamp, String)>,
    last: Option<Timestamp>,
}

impl RoundLimit {
    /// Before the record at `time` (records come in time order), at `position()`, is fed.
    fn check(&mut self, time: Timestamp, position: impl Fn() -> String) -> Result<(), String> {
        let (first, first_at) = self.first.get_or_insert_with(|| (time, position())).clone();
        self.last = Some(time);
        let end = self.until.unwrap_or(time).max(time);
        let rounds = end.duration_since(first).as_secs_f64() / self.interval.as_secs_f64();
        if rounds > MAX_ROUNDS {
            let (why, at) = match self.until {
                Some(u) if u >= time => (format!("to --until {u}"), String::new()),
                _ => (format!("to {}: its time {time}", position()), format!("{}: ", position())),
            };
            let epoch = if first.as_second() < 86_400 {
                format!(" ({first_at} is at the Unix epoch: a time that was never set?)")
            } else {
                String::new()
            };
            return Err(format!(
                "{at}replaying from {first_at} ({first}) {why} every {} is {} evaluation rounds (at most \
                 {MAX_ROUNDS}){epoch}: check the stream's times, or raise --eval-interval",
                self.interval,
                rounds.round(),
            ));
        }
        Ok(())
    }

    /// After the last record, before the clock runs on to `--until`.
    fn check_until(&self) -> Result<(), String> {
        if let (Some(until), Some(last)) = (self.until, self.last)
            && until.duration_since(last).as_secs() > 366 * 86_400
        {
            return Err(format!("--until {until} is more than a year after the last record ({last})"));
        }
        Ok(())
    }
}

/// The output, written as events happen: one line per event (JSON) or the timeline (text); then the
/// notifications and the summary, which only the end knows.
struct Timeline {
    out: BufWriter<io::StdoutLock<'static>>,
    json: bool,
    tz: jiff::tz::TimeZone,
    /// The input is live: each record's events are written out at once, not when the buffer fills.
    live: bool,
}

impl Timeline {
    fn new(json: bool, tz: jiff::tz::TimeZone, live: bool) -> Self {
        Timeline { out: crate::output::stdout(), json, tz, live }
    }

    /// Prints an event and feeds it to the notification grouper, with its job's progress at the time.
    fn write(
        &mut self,
        event: &Event,
        progress: Option<JobProgress>,
        notifications: &mut OfflineNotifications,
    ) -> io::Result<()> {
        notifications.observe(event, progress);
        if self.json {
            writeln!(self.out, "{}", replay::event_json(event))
        } else {
            self.out.write_all(replay::render_event(event, &self.tz).as_bytes())
        }
    }

    /// After a record's events: a live input's are written out at once, not when the buffer fills.
    fn record_done(&mut self) -> io::Result<()> {
        if self.live { self.out.flush() } else { Ok(()) }
    }

    /// Writes out what is buffered (a replay stopped by a bad line shows the events before it).
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    fn finish(&mut self, summary: &replay::Summary, notifications: &OfflineNotifications) -> io::Result<()> {
        if self.json {
            for n in &notifications.notifications {
                writeln!(self.out, "{}", offline::notification_json(n))?;
            }
            writeln!(self.out, "{}", replay::summary_json(summary))?;
        } else {
            self.out.write_all(replay::render_summary(summary, &self.tz).as_bytes())?;
            if notifications.has_receivers() {
                self.out.write_all(offline::render_text(notifications, &self.tz).as_bytes())?;
            }
        }
        self.out.flush()
    }
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
