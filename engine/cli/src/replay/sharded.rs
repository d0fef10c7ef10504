//! `replay`'s threads: the merged stream is routed (this thread) to evaluator shards, one thread each, whose
//! events one output thread merges back into one replay's order and writes; decoding runs on the inputs' own
//! threads ([`crate::streams::DecodedAhead`]). With one shard the evaluation still has its own thread and
//! the output another. The order, the shards and why the output is byte for byte one replay's are in
//! `trainwarden_core::replay::shard`.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use trainwarden_core::replay::shard::{Dispatch, Place, PlaceMerge, ShardInput, ShardReplay, Sharding};
use trainwarden_core::replay::{Replay, Summary};
use trainwarden_core::{Event, Merge, RecordSource, Timestamp};
use trainwarden_notify::JobProgress;
use trainwarden_notify::offline::OfflineNotifications;

use super::{RoundLimit, Timeline};

/// Records per batch handed to the shards: enough that a hand-over costs little per record, few enough
/// that the shards' events wait little in the output merge.
const BATCH: usize = 2048;
/// Batches a shard may have waiting before routing waits for it.
const BATCHES_AHEAD: usize = 2;

/// An event, where it goes, and the job's progress when it happened (for the notifications).
type Placed = (Place, Event, Option<JobProgress>);

enum Work {
    /// Inputs up to and including step `through`.
    Batch(Vec<ShardInput>, u64),
    /// The stream ended after `steps` records: run the clock on to `until`.
    Finish(u64, Option<Timestamp>),
}

/// What a shard hands to the output thread.
struct Output {
    shard: usize,
    events: Vec<Placed>,
    /// The steps it has run; `u64::MAX` with `summary` once it has finished.
    through: u64,
    summary: Option<Summary>,
}

/// What the replay needs beyond the stream.
pub(super) struct Run<'a> {
    pub replays: Vec<Replay>,
    pub until: Option<Timestamp>,
    pub json: bool,
    pub tz: jiff::tz::TimeZone,
    /// An input is live: each record goes to the evaluator at once, and its events are written out at once.
    pub live: bool,
    pub notifications: OfflineNotifications,
    /// Checked before each record is routed, and at the end.
    pub rounds: &'a mut RoundLimit,
}

/// What the replay found: its summary (`None` if the stream was refused: the events up to the refused line
/// were written, not the summary) and the notifications.
pub(super) struct Done {
    pub summary: Option<Summary>,
    pub notifications: OfflineNotifications,
}

/// Replays `merge` over `run.replays.len()` shards (see the module). Errors in the stream stop it after
/// the events of every record before the bad one are written; errors writing stop it too.
pub(super) fn replay<S: RecordSource>(
    merge: &mut Merge<S>,
    heading: &str,
    run: Run<'_>,
) -> Result<Done, String> {
    let shards = run.replays.len();
    // A cohort's jobs share a shard (see the core's shard module).
    let sharding = Sharding::for_policies(
        shards,
        run.replays.first().into_iter().flat_map(|r| r.evaluator().policies()),
    );
    let Run { replays, until, json, tz, live, notifications, rounds } = run;
    let batch = if live { 1 } else { BATCH };
    std::thread::scope(|scope| {
        let (output_tx, output_rx) = sync_channel::<Output>(BATCHES_AHEAD * shards);
        let mut work = Vec::new();
        for (index, replay) in replays.into_iter().enumerate() {
            let (tx, rx) = sync_channel::<Work>(BATCHES_AHEAD);
            let output = output_tx.clone();
            let shard = ShardReplay::new(replay, index);
            std::thread::Builder::new()
                .name(format!("evaluate {index}"))
                .spawn_scoped(scope, move || evaluate(index, shard, &rx, &output))
                .map_err(|e| format!("cannot start an evaluation thread: {e}"))?;
            work.push(tx);
        }
        drop(output_tx);
        let writer = std::thread::Builder::new()
            .name("output".into())
            .spawn_scoped(scope, move || write(shards, output_rx, json, tz, live, notifications))
            .map_err(|e| format!("cannot start the output thread: {e}"))?;

        let routed = route(merge, heading, sharding, rounds, &work, until, batch);
        drop(work);
        let written =
            writer.join().map_err(|_| "the output thread stopped on a bug (a panic, reported above)")?;
        // A closed pipe ends the replay quietly, any other write error with status 2 (see `output`).
        let (summary, notifications) = written.unwrap_or_else(|e| crate::output::failed(&e));
        routed?;
        Ok(Done { summary, notifications })
    })
}

/// This thread's part: the merge's records to the shards, in batches. After a refused record, the batches
/// so far are still sent (their events are written), and no `Finish`.
fn route<S: RecordSource>(
    merge: &mut Merge<S>,
    heading: &str,
    sharding: Sharding,
    rounds: &mut RoundLimit,
    work: &[SyncSender<Work>],
    until: Option<Timestamp>,
    batch: usize,
) -> Result<(), String> {
    let shards = work.len();
    let mut dispatch = Dispatch::new(sharding);
    let mut batches: Vec<Vec<ShardInput>> = (0..shards).map(|_| Vec::with_capacity(batch)).collect();
    let mut in_batch = 0;
    // A shard gone (a panic) ends the replay; its own thread's report says why.
    let gone = || "an evaluation thread stopped on a bug (a panic, reported above)".to_string();
    let send = |batches: &mut Vec<Vec<ShardInput>>, through: u64| -> Result<(), String> {
        for (tx, batch) in work.iter().zip(batches.iter_mut()) {
            tx.send(Work::Batch(std::mem::take(batch), through)).map_err(|_| gone())?;
        }
        Ok(())
    };
    let outcome = loop {
        let record = match crate::streams::next_record(merge, heading) {
            Ok(Some(record)) => record,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        // `--until` ends the replay where it says, before the stream's end too.
        if let Some(u) = until
            && record.time() > u
        {
            if dispatch.steps() == 0 {
                break Err(format!(
                    "--until {u} is before the first record ({}): there is nothing to replay",
                    record.time()
                ));
            }
            eprintln!("note: replayed up to --until {u}; the records after it were not read");
            break Ok(());
        }
        if let Err(e) = rounds.check(record.time(), || merge.last_position().unwrap_or_default()) {
            break Err(e);
        }
        dispatch.route(record, &mut batches);
        in_batch += 1;
        if in_batch == batch {
            send(&mut batches, dispatch.steps() - 1)?;
            in_batch = 0;
        }
    };
    if in_batch > 0 {
        send(&mut batches, dispatch.steps() - 1)?;
    }
    outcome?;
    if let Some(job) = dispatch.misplaced().first() {
        return Err(format!(
            "TrainJob {job} got its cohort label only after its first line, and its cohort was replayed on another \
             evaluator thread: its cohort rules judged it apart from its siblings; replay with --shards 1 (or record \
             the job's labels on its first line)"
        ));
    }
    rounds.check_until()?;
    for tx in work {
        tx.send(Work::Finish(dispatch.steps(), until)).map_err(|_| gone())?;
    }
    Ok(())
}

/// A shard's thread: its inputs run, its events handed on with the job's progress at the time.
fn evaluate(index: usize, mut shard: ShardReplay, work: &Receiver<Work>, output: &SyncSender<Output>) {
    let placed = |shard: &mut ShardReplay| -> Vec<Placed> {
        let events: Vec<(Place, Event)> = shard.take_events().collect();
        events
            .into_iter()
            .map(|(place, event)| {
                let job = match &event {
                    Event::Intent(i) => Some(&i.job),
                    Event::Transition { job, .. } => Some(job),
                    _ => None,
                };
                let progress = job.and_then(|k| shard.replay().evaluator().job(k)).and_then(JobProgress::of);
                (place, event, progress)
            })
            .collect()
    };
    while let Ok(w) = work.recv() {
        let out = match w {
            Work::Batch(inputs, through) => {
                // The progress beside an event is the job's after the whole record (one replay prints a
                // record's events after feeding it): taken after each input, not after the batch.
                let mut events = Vec::new();
                for input in inputs {
                    shard.step(input);
                    events.extend(placed(&mut shard));
                }
                Output { shard: index, events, through, summary: None }
            }
            Work::Finish(steps, until) => {
                shard.finish(steps, until);
                let events = placed(&mut shard);
                Output { shard: index, events, through: u64::MAX, summary: Some(shard.summary().clone()) }
            }
        };
        if output.send(out).is_err() {
            return; // the output thread is gone (a write failed): nobody wants the rest
        }
    }
}

/// The output thread: the shards' events merged into one replay's order, written as they become final;
/// then, when every shard has finished, the notifications and the summary.
fn write(
    shards: usize,
    outputs: Receiver<Output>,
    json: bool,
    tz: jiff::tz::TimeZone,
    live: bool,
    mut notifications: OfflineNotifications,
) -> std::io::Result<(Option<Summary>, OfflineNotifications)> {
    let mut timeline = Timeline::new(json, tz, live);
    let mut merge = PlaceMerge::new(shards);
    let mut summaries: Vec<Option<Summary>> = vec![None; shards];
    for output in outputs.iter() {
        merge.push(output.shard, output.events, output.through);
        if let Some(s) = output.summary {
            summaries[output.shard] = Some(s);
        }
        while let Some((event, progress)) = merge.pop() {
            timeline.write(&event, progress, &mut notifications)?;
        }
        timeline.record_done()?;
    }
    // Every shard's channel is closed: it finished, or the stream was refused (no summary then).
    let summary = if summaries.iter().all(Option::is_some) {
        let summary = merge.summary(summaries.iter().flatten());
        if let Some(end) = summary.last_time {
            notifications.finish(end);
        }
        timeline.finish(&summary, &notifications)?;
        Some(summary)
    } else {
        timeline.flush()?;
        None
    };
    Ok((summary, notifications))
}
