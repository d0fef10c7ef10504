//! `trainwarden replay --output json` without loading the stream first: `replay_stream POLICY.yaml STREAM.jsonl`
//! reads a time-ordered stream line by line and feeds each record as it is decoded (as the controller feeds
//! watch events), printing the same event lines. The CLI reads every file, decodes every line into memory and
//! sorts before replaying (it merges several streams); this shows what the engine costs without that.
//!
//! With `--evaluate-only` it decodes every line first and then times only `Replay::feed` (evaluation without
//! decoding), printing `evaluate_seconds S` on stderr: the counterpart of timing a Python stopper's calls
//! on results decoded beforehand.

use std::io::{BufRead, BufReader, Write};
use std::time::Instant;

use trainwarden_core::parse_line;
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
    let mut previous = None;
    let mut decoded = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let line = line.expect("read the stream");
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let record = parse_line(line, stream, i + 1, previous).unwrap_or_else(|e| panic!("{e}"));
        previous = Some(record.time());
        if evaluate_only {
            decoded.push(record);
        } else {
            replay.feed(record);
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
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for event in &replay.events {
        writeln!(out, "{}", replay::event_json(event)).expect("write");
    }
    writeln!(out, "{}", replay::summary_json(&replay.summary)).expect("write");
}
