//! The replay engine alone, fed line by line: `replay_stream POLICY.yaml STREAM.jsonl` reads a time-ordered
//! stream with the CLI's line reader ([`StreamLines`]) and feeds each record as it is decoded (as the
//! controller feeds watch events), printing the same event lines as `trainwarden replay --output json`,
//! without the CLI's reorder window, notification grouping or checks. `trainwarden replay` streams the same
//! way; this bounds what its extra steps cost.
//!
//! With `--evaluate-only` it decodes every line first and then times only `Replay::feed` (evaluation without
//! decoding), printing `evaluate_seconds S` on stderr: the counterpart of timing a Python stopper's calls
//! on results decoded beforehand.

use std::io::{BufReader, Write};
use std::time::Instant;

use trainwarden_core::StreamLines;
use trainwarden_core::replay::{self, Replay};
use trainwarden_core::{EngineConfig, Evaluator};
use trainwarden_core::{compile, parse_documents};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let evaluate_only = args.iter().any(|a| a == "--evaluate-only");
    let args: Vec<&String> = args.iter().filter(|a| *a != "--evaluate-only").collect();
    let (Some(policy), Some(stream)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: replay_stream [--evaluate-only] POLICY.yaml STREAM.jsonl");
        std::process::exit(2);
    };
    let engine = Evaluator::new(EngineConfig::default());
    let text = std::fs::read_to_string(policy).expect("read the policy");
    let docs = parse_documents(&text, policy).expect("a valid policy");
    let policies = docs.iter().map(|d| compile(d, engine.scripts()).expect("compiles")).collect();
    let mut replay = Replay::new(policies, EngineConfig::default());
    let reader = BufReader::with_capacity(1 << 20, std::fs::File::open(stream).expect("open the stream"));
    let mut lines = StreamLines::new(reader, stream.as_str());
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut print = |replay: &mut Replay| {
        for event in replay.events.drain(..) {
            writeln!(out, "{}", replay::event_json(&event)).expect("write");
        }
    };
    let mut decoded = Vec::new();
    while let Some(record) = lines.next_record() {
        let (_, record) = record.unwrap_or_else(|e| panic!("{e}"));
        if evaluate_only {
            decoded.push(record);
        } else {
            replay.feed(record);
            print(&mut replay);
        }
    }
    if evaluate_only {
        let started = Instant::now();
        for record in decoded {
            replay.feed(record);
        }
        eprintln!("evaluate_seconds {}", started.elapsed().as_secs_f64());
    }
    replay.finish(None);
    print(&mut replay);
    writeln!(out, "{}", replay::summary_json(&replay.summary)).expect("write");
}
