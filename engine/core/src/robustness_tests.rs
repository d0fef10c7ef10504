//! Bad input never panics: mutated streams and policies go through parsing, compilation and replay and come
//! out as values or errors. The tests' deterministic generator keeps the runs reproducible.

use crate::drive::replay::Replay;
use crate::evaluate::EngineConfig;
use crate::input::stream::parse_stream;
use crate::judge::script::ScriptEngine;
use crate::policy::compile::{compile, parse_documents};
use crate::testing::rng::Rng;

const TOKENS: &[&str] = &[
    "-1",
    "0",
    "1e308",
    "-1e308",
    "\"nan\"",
    "\"inf\"",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
    "\"9999-12-31T23:59:59Z\"",
    "\"-5m\"",
    "\"416000w\"",
    "\"0s\"",
    "\"ab/cd\"",
    "\"\\u0000\"",
    "18446744073709551615",
    "0.5",
    "\"x\"",
];

/// Replaces a random JSON value-ish span (a token after `:` up to the next `,` or `}`) with a hostile token.
fn mutate(text: &str, rng: &mut Rng) -> String {
    let colons: Vec<usize> = text.match_indices(':').map(|(i, _)| i).collect();
    if colons.is_empty() {
        return text.to_string();
    }
    let at = colons[rng.below(colons.len())] + 1;
    let end = text[at..].find([',', '}', '\n']).map_or(text.len(), |e| at + e);
    format!("{}{}{}", &text[..at], TOKENS[rng.below(TOKENS.len())], &text[end..])
}

const STREAM: &str = r#"{"time":"2026-11-27T17:00:00Z","job":"ml/a","trainerStatus":{"progressPercentage":5,"estimatedRemainingSeconds":3600,"metrics":[{"name":"loss","value":"2.5"},{"name":"current_step","value":"10"}],"lastUpdatedTime":"2026-11-27T17:00:00Z"},"gpus":8,"labels":{"team":"ml"}}
{"time":"2026-11-27T17:01:00Z","job":"ml/a","annotation":"{\"progressPercentage\":6,\"trainMetrics\":{\"loss\":null},\"lastUpdatedTime\":\"2026-11-27T17:01:00Z\"}"}
{"time":"2026-11-27T17:40:00Z","job":"ml/a","phase":"Suspended"}
{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":"b","namespace":"ml","labels":{"team":"ml"},"creationTimestamp":"2026-11-27T17:00:00Z"},"spec":{"trainer":{"numNodes":2,"resourcesPerNode":{"limits":{"nvidia.com/gpu":"4"}}}},"status":{"trainerStatus":{"progressPercentage":1,"metrics":[{"name":"loss","value":"inf"}],"lastUpdatedTime":"2026-11-27T17:02:00Z"}}}
{"time":"2026-11-28T17:01:00Z","job":"ml/a","phase":"Running"}
{"time":"2026-11-28T19:01:00Z","job":"ml/b","deleted":true}"#;

const POLICY: &str = r#"{"apiVersion": "trainwarden.dev/v1alpha1", "kind": "ProgressPolicy", "metadata": {"name": "p", "namespace": "ml"},
"spec": {"mode": "Enforce", "timezone": "Europe/Rome", "gpuHourCost": 6.875, "samplingInterval": "30s",
"activeWindows": [{"start": "0 18 * * FRI", "duration": "62h"}],
"rules": [
 {"name": "plateau", "uses": "plateau", "with": {"metric": "loss", "window": "2h", "minDelta": 0.001, "warmup": "10%", "std": 0.01}, "for": "15m", "actions": [{"suspend": {}}]},
 {"name": "nan", "uses": "non_finite", "with": {"metric": "*"}, "keepFiringFor": "10m", "actions": [{"notify": {"to": "team"}}]},
 {"name": "budget", "uses": "over_budget", "with": {"maxCost": 100, "maxRuntime": "48h"}, "cooldown": "6h", "actions": [{"suspend": {}}]},
 {"name": "rhai", "when": "plateau(\"loss\", \"1h\", 0.01) || eta_exceeds(\"10h\") || over_budget(#{maxGpuHours: 5.0})", "actions": [{"event": {}}]},
 {"name": "lnd", "uses": "loss_not_decreasing", "with": {"num_steps": 3}},
 {"name": "ot", "uses": "overtraining", "with": {"patience_validation": 2}}
]}}"#;

fn run(policy_text: &str, stream_text: &str) -> Option<crate::drive::replay::Summary> {
    let engine = ScriptEngine::default();
    let docs = parse_documents(policy_text, "p.json").ok()?;
    let policies: Vec<_> = docs.iter().filter_map(|d| compile(d, &engine).ok()).collect();
    let records = parse_stream(stream_text, "s.jsonl").ok()?;
    let mut replay = Replay::new(policies, EngineConfig::default());
    for r in records {
        replay.feed(r);
    }
    let until = replay.summary.last_time.and_then(|t| crate::time::add_seconds(t, 3.0 * 86400.0));
    replay.finish(until);
    Some(replay.summary.clone())
}

#[test]
fn the_unmutated_inputs_do_something() {
    let engine = ScriptEngine::default();
    let docs = parse_documents(POLICY, "p.json").unwrap();
    compile(&docs[0], &engine).unwrap();
    assert_eq!(parse_stream(STREAM, "s").unwrap().len(), 6);
    let summary = run(POLICY, STREAM).expect("valid inputs");
    assert!(summary.firings >= 2, "{summary:?}");
    assert_eq!(summary.rule_errors, 0, "{summary:?}");
}

#[test]
fn mutated_streams_and_policies_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..400 {
        let mut stream = STREAM.to_string();
        let mut policy = POLICY.to_string();
        for _ in 0..1 + rng.below(3) {
            if rng.below(2) == 0 {
                stream = mutate(&stream, &mut rng);
            } else {
                policy = mutate(&policy, &mut rng);
            }
        }
        run(&policy, &stream);
        // Line by line too, so one bad line does not hide the others.
        for line in stream.lines() {
            let _ = crate::input::stream::parse_line(line, "s", 1, None);
        }
    }
}
