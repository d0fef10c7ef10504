//! The sharded replay's output against one replay's, byte for byte: the Friday example, every corpus stream,
//! and a generated stream out of order within each round, over 1 to 5 shards and several batch sizes.

use super::*;
use crate::input::merge::{Merge, StreamLines};
use crate::units::duration::PolicyDuration;
use crate::{EngineConfig, Evaluator, compile, parse_documents};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn policies(files: &[&str]) -> Vec<CompiledPolicy> {
    let engine = Evaluator::new(EngineConfig::default());
    let mut out = Vec::new();
    for file in files {
        let path = root().join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for doc in parse_documents(&text, file).expect("valid policies") {
            out.push(compile(&doc, engine.scripts()).expect("compiles"));
        }
    }
    out
}

/// The records of `text`, merged through the replay's reorder window (5 minutes, its default).
fn records(text: &str, name: &str) -> Vec<StreamRecord> {
    let lines = StreamLines::new(std::io::Cursor::new(text.as_bytes().to_vec()), name);
    let mut merge = Merge::new(vec![lines], PolicyDuration::from_secs(300));
    std::iter::from_fn(|| merge.next_record().expect("a valid stream")).collect()
}

fn line(event: &Event) -> String {
    format!("{}\n", super::super::event_json(event))
}

/// `replay --output json`'s lines from one replay.
fn one_replay(policy_files: &[&str], records: &[StreamRecord], until: Option<Timestamp>) -> String {
    let mut replay = Replay::new(policies(policy_files), EngineConfig::default());
    let mut out = String::new();
    for record in records {
        replay.feed(record.clone());
        out.extend(replay.events.drain(..).map(|e| line(&e)));
    }
    replay.finish(until);
    out.extend(replay.events.drain(..).map(|e| line(&e)));
    out + super::super::summary_json(&replay.summary).to_string().as_str()
}

/// The same from `shards` shards, run in turn on batches of `batch` records, events merged as they come.
fn sharded(
    policy_files: &[&str],
    records: &[StreamRecord],
    until: Option<Timestamp>,
    shards: usize,
    batch: usize,
) -> String {
    let sharding = Sharding::for_policies(shards, &policies(policy_files));
    let mut replays: Vec<ShardReplay> = (0..shards)
        .map(|i| ShardReplay::new(Replay::new(policies(policy_files), EngineConfig::default()), i))
        .collect();
    let mut dispatch = Dispatch::new(sharding);
    let mut merge = PlaceMerge::new(shards);
    let mut out = String::new();
    for chunk in records.chunks(batch) {
        let mut batches: Vec<Vec<ShardInput>> = (0..shards).map(|_| Vec::new()).collect();
        for record in chunk {
            dispatch.route(record.clone(), &mut batches);
        }
        let through = dispatch.steps() - 1;
        // The shards in reverse, so a later shard's events wait in the merge for an earlier one's.
        for (i, inputs) in batches.into_iter().enumerate().rev() {
            for input in inputs {
                replays[i].step(input);
            }
            let events: Vec<_> = replays[i].take_events().map(|(p, e)| (p, e, ())).collect();
            merge.push(i, events, through);
        }
        while let Some((event, ())) = merge.pop() {
            out += &line(&event);
        }
    }
    for (i, replay) in replays.iter_mut().enumerate() {
        replay.finish(dispatch.steps(), until);
        let events: Vec<_> = replay.take_events().map(|(p, e)| (p, e, ())).collect();
        merge.push(i, events, u64::MAX);
    }
    while let Some((event, ())) = merge.pop() {
        out += &line(&event);
    }
    let summary = merge.summary(replays.iter().map(ShardReplay::summary));
    out + super::super::summary_json(&summary).to_string().as_str()
}

fn assert_same(what: &str, policy_files: &[&str], records: &[StreamRecord], until: Option<Timestamp>) {
    let expected = one_replay(policy_files, records, until);
    for (shards, batch) in [(1, 1000), (2, 1), (3, 7), (4, 64), (5, 1 << 20)] {
        let got = sharded(policy_files, records, until, shards, batch);
        if got != expected {
            let at = expected.lines().zip(got.lines()).position(|(a, b)| a != b);
            panic!(
                "{what}: {shards} shards (batches of {batch}) differ from one replay at line {at:?}:\n  one:     {:?}\n  sharded: {:?}",
                at.and_then(|i| expected.lines().nth(i)),
                at.and_then(|i| got.lines().nth(i)),
            );
        }
    }
}

#[test]
fn the_friday_example_sharded_is_byte_identical() {
    let text = std::fs::read_to_string(root().join("examples/friday-night-stall/stream.jsonl")).unwrap();
    let records = records(&text, "stream.jsonl");
    let policy = ["examples/friday-night-stall/policy.yaml"];
    let expected = one_replay(&policy, &records, None);
    assert!(expected.lines().count() > 3, "the example has events: {expected}");
    assert_same("friday", &policy, &records, None);
    // With the clock run on past the last record (the timers of the end).
    let until = records.last().unwrap().time() + jiff::SignedDuration::from_hours(30);
    assert_same("friday --until", &policy, &records, Some(until));
}

#[test]
fn every_corpus_stream_sharded_is_byte_identical() {
    let policy = [
        "policies/plateau.yaml",
        "policies/stall.yaml",
        "policies/divergence.yaml",
        "policies/non-finite.yaml",
        "policies/rhai-examples.yaml",
    ];
    let mut streams = 0;
    let mut events = 0;
    for entry in std::fs::read_dir(root().join("examples/corpus")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let records = records(&text, &name);
        events += one_replay(&policy, &records, None).lines().count() - 1;
        assert_same(&name, &policy, &records, None);
        streams += 1;
    }
    assert!(streams >= 30, "the corpus: {streams} streams");
    assert!(events > 100, "the corpus's replays decide things: {events} events");
}

/// `jobs` jobs × `rounds` reports 30 s apart, job `j` at second `j % 30` of its round, written in job order
/// within each round (up to 29 s back): plateaus, stalls (a job goes quiet), NaNs, a job deleted and one
/// that starts late.
fn disordered_stream(jobs: usize, rounds: usize) -> String {
    // The namespaces the policies below select.
    const NAMESPACES: [&str; 3] = ["default", "fraud", "peers"];
    let start = 1_795_798_800i64;
    let mut text = String::new();
    for i in 0..rounds {
        for j in 0..jobs {
            if (j % 11 == 3 && i > 40 && i < 110) || (j % 13 == 5 && i < 20) {
                continue; // quiet: a stall for the stall rule, or a late start
            }
            let time = Timestamp::from_second(start + i as i64 * 30 + (j % 30) as i64).unwrap();
            if j % 17 == 9 && i == 60 {
                text += &format!(
                    "{{\"time\":\"{time}\",\"job\":\"{}/job-{j:03}\",\"deleted\":true}}\n",
                    NAMESPACES[j % 3]
                );
                continue;
            }
            let loss = match j % 5 {
                0 => 0.5 + 2.0 * (-(i as f64) / 20.0).exp(), // plateaus early
                1 => 3.0 - i as f64 * 0.01,                  // still learning
                2 if i > 50 => f64::NAN,                     // NaN from a step on
                3 => 1.0 + 0.1 * ((i * 7 + j) % 13) as f64 / 13.0, // noisy flat
                _ => 2.0 * (-(i as f64) / 100.0).exp() + 0.001 * (i % 3) as f64, // slow
            };
            let loss = if loss.is_nan() { "NaN".to_string() } else { format!("{loss}") };
            text += &format!(
                "{{\"time\":\"{time}\",\"job\":\"{}/job-{j:03}\",\"phase\":\"Running\",\"labels\":{{\"team\":\"fraud\"}},\"gpus\":8,\"trainerStatus\":{{\"progressPercentage\":{},\"estimatedRemainingSeconds\":{},\"metrics\":[{{\"name\":\"loss\",\"value\":\"{loss}\"}},{{\"name\":\"current_step\",\"value\":\"{}\"}},{{\"name\":\"total_steps\",\"value\":\"{}\"}}],\"lastUpdatedTime\":\"{time}\"}}}}\n",
                NAMESPACES[j % 3],
                100 * i / rounds,
                (rounds - i) * 30,
                i * 10,
                rounds * 10,
            );
        }
    }
    text
}

#[test]
fn a_disordered_generated_stream_sharded_is_byte_identical() {
    let text = disordered_stream(90, 150);
    let records = records(&text, "generated.jsonl");
    let times: Vec<Timestamp> = records.iter().map(StreamRecord::time).collect();
    assert!(times.is_sorted(), "the merge put it in time order");
    let mut lines = StreamLines::new(std::io::Cursor::new(text.as_bytes().to_vec()), "generated.jsonl");
    let as_written: Vec<Timestamp> =
        std::iter::from_fn(|| lines.next_record()).map(|r| r.unwrap().1.time()).collect();
    assert_eq!(as_written.len(), records.len());
    assert!(!as_written.is_sorted(), "and it was written out of order");
    let policy = [
        "policies/plateau.yaml",
        "policies/stall.yaml",
        "policies/non-finite.yaml",
        "examples/friday-night-stall/policy.yaml",
        "engine/bench/peers/ray-plateau.yaml",
    ];
    let expected = one_replay(&policy, &records, None);
    assert!(expected.lines().count() > 50, "the stream's replay decides things: {expected}");
    assert_same("generated", &policy, &records, None);
}

#[test]
fn limits_keep_a_replay_on_one_shard() {
    let budget = policies(&["policies/reclaim-hung.yaml"]);
    assert!(Sharding::refuses(&budget, &EngineConfig::default()).is_some());
    let plain = policies(&["policies/plateau.yaml"]);
    assert_eq!(Sharding::refuses(&plain, &EngineConfig::default()), None);
    let capped = EngineConfig { max_actions_per_hour: Some(3), ..EngineConfig::default() };
    assert!(Sharding::refuses(&plain, &capped).is_some());
}

#[test]
fn jobs_spread_over_every_shard() {
    let sharding = Sharding::new(4);
    let mut counts = [0; 4];
    for j in 0..4000 {
        counts[sharding.shard_of(&JobKey::new("peers", format!("plateau-{j:04}")))] += 1;
    }
    assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
}

/// A sweep judged by a cohort rule: each cohort's jobs share a shard, so any number of shards decides as one
/// replay does (with the jobs spread by their own key, a trial would be judged against part of its siblings).
#[test]
fn a_sweep_judged_by_its_cohorts_sharded_is_byte_identical() {
    let text =
        std::fs::read_to_string(root().join("examples/sweep/stream.jsonl")).expect("the sweep example");
    let records = records(&text, "stream.jsonl");
    let one = one_replay(&["examples/sweep/policy.yaml"], &records, None);
    assert!(one.matches("\"suspend\"").count() >= 10, "the example suspends trials");
    assert_same("examples/sweep", &["examples/sweep/policy.yaml"], &records, None);
    // Spread by job key instead, the decisions change: the test can tell.
    let by_job = {
        let policies = policies(&["examples/sweep/policy.yaml"]);
        let cohort = Sharding::for_policies(4, &policies);
        let jobs: Vec<&JobKey> = records.iter().map(StreamRecord::job).collect();
        let labels = std::collections::BTreeMap::from([(
            "katib.kubeflow.org/experiment".to_string(),
            "spread".to_string(),
        )]);
        let shards: std::collections::BTreeSet<usize> = jobs
            .iter()
            .filter(|j| j.name.starts_with("spread-"))
            .map(|j| cohort.shard_of_labelled(j, Some(&labels)))
            .collect();
        assert_eq!(shards.len(), 1, "a cohort on one shard");
        jobs.iter()
            .filter(|j| j.name.starts_with("spread-"))
            .map(|j| Sharding::new(4).shard_of(j))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    assert!(by_job > 1, "by job key, the spread sweep's trials would be on several shards");
}
