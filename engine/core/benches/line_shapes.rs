//! Decoding each shape of stream line `trainwarden replay` reads, against two baselines measured in the same
//! run on the same lines: a `serde_json::Value` decode (what the general reader starts with, before it
//! normalizes anything) and serde_json skipping the line (`IgnoredAny`: reading the JSON at all).
//! Run: `cargo bench -p trainwarden-core --bench line_shapes` (single-threaded).
//!
//! The TrainJob lines are a real object: kube-apiserver's answer for the upstream multi-node example, with
//! its managedFields (`tests/fixtures/trainjob-from-apiserver.json`), plus the conditions and jobsStatus the
//! Trainer controller adds.

use std::hint::black_box;
use std::time::Instant;

use serde_json::{Value, json};
use trainwarden_core::parse_line;

const FROM_APISERVER: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/trainjob-from-apiserver.json"));
const LINES: usize = 20_000;
const JOBS: usize = 200;

fn time(i: usize) -> String {
    jiff::Timestamp::from_second(1_795_798_800 + i as i64 * 30 / JOBS as i64).unwrap().to_string()
}

/// Loss falling with `i`, printed as writers print it.
fn loss(i: usize) -> f64 {
    0.8 + 1.7 * (-(i as f64) / 8_000.0).exp()
}

/// The RHOAI annotation of report `i`, as the RHOAI controller writes it.
fn rhoai_report(i: usize) -> Value {
    json!({"progressPercentage": i * 100 / LINES, "estimatedRemainingSeconds": (LINES - i) * 3,
        "estimatedRemainingTimeSummary": "2 hours 1 minute", "currentStep": i, "totalSteps": LINES, "currentEpoch": i as f64 / 6_000.0,
        "totalEpochs": 3, "trainMetrics": {"loss": loss(i), "grad_norm": 1.532, "learning_rate": 3.1e-05, "train_samples_per_second": 28.41},
        "evalMetrics": {"eval_loss": loss(i) + 0.05, "eval_accuracy": 0.6413}, "lastUpdatedTime": time(i)})
}

/// The upstream `trainerStatus` of report `i`, as Kubeflow's HF callback sends it.
fn trainer_status(i: usize) -> Value {
    let m = |name: &str, value: String| json!({"name": name, "value": value});
    json!({"progressPercentage": i * 100 / LINES, "estimatedRemainingSeconds": (LINES - i) * 3, "lastUpdatedTime": time(i),
        "metrics": [m("loss", format!("{:.4}", loss(i))), m("grad_norm", "1.532".into()), m("learning_rate", "3.1e-05".into()),
            m("eval_loss", format!("{:.4}", loss(i) + 0.05)), m("epoch", format!("{:.2}", i as f64 / 6_000.0)),
            m("current_step", i.to_string()), m("total_steps", LINES.to_string())]})
}

/// The TrainJob of report `i` as a watch delivers it, its progress upstream or (`rhoai`) in the annotation.
fn trainjob(base: &Value, i: usize, rhoai: bool) -> String {
    let mut job = base.clone();
    job["metadata"]["name"] = json!(format!("job-{}", i % JOBS));
    job["metadata"]["resourceVersion"] = json!((1_000 + i).to_string());
    job["status"]["conditions"] = json!([{"type": "Suspended", "status": "False", "reason": "Resumed",
        "message": "TrainJob is resumed", "lastTransitionTime": "2026-11-27T16:00:00Z"}]);
    job["status"]["jobsStatus"] =
        json!([{"name": "node", "ready": 3, "succeeded": 0, "failed": 0, "active": 3, "suspended": 0}]);
    if rhoai {
        job["status"].as_object_mut().unwrap().remove("trainerStatus");
        job["metadata"]["annotations"] = json!({"trainer.opendatahub.io/trainerStatus": rhoai_report(i).to_string(),
            "trainer.opendatahub.io/progression-tracking": "true"});
    } else {
        job["status"]["trainerStatus"] = trainer_status(i);
    }
    job.to_string()
}

fn best_of(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn measure(shape: &str, lines: &[String]) {
    let n = lines.len() as f64;
    let bytes = lines.iter().map(String::len).sum::<usize>() as f64;
    let mut previous = None;
    for (i, line) in lines.iter().enumerate() {
        previous = Some(parse_line(line, "bench", i + 1, previous).expect("valid line").time());
    }
    let read = best_of(5, || {
        let mut previous = None;
        for (i, line) in lines.iter().enumerate() {
            let record = parse_line(line, "bench", i + 1, previous).expect("valid line");
            previous = Some(record.time());
            black_box(record);
        }
    });
    let value = best_of(5, || {
        for line in lines {
            black_box(serde_json::from_str::<Value>(line).expect("JSON"));
        }
    });
    let skip = best_of(5, || {
        for line in lines {
            black_box(serde_json::from_str::<serde::de::IgnoredAny>(line).expect("JSON"));
        }
    });
    let us = |t: f64| t / n * 1e6;
    println!(
        "{shape:<34} {:>5.0} B  parse_line {:>6.2} µs ({:>4.0} MB/s)  Value decode {:>6.2} µs  skip {:>5.2} µs  parse_line / Value {:.2}×",
        bytes / n,
        us(read),
        bytes / read / 1e6,
        us(value),
        us(skip),
        read / value
    );
}

fn main() {
    let base: Value = serde_json::from_str(FROM_APISERVER).expect("fixture");
    let job = |i: usize| format!("team-a/job-{}", i % JOBS);
    let compact: Vec<String> = (0..LINES)
        .map(|i| json!({"time": time(i), "job": job(i), "trainerStatus": trainer_status(i)}).to_string())
        .collect();
    let annotation: Vec<String> = (0..LINES)
        .map(|i| {
            json!({"time": time(i), "job": job(i), "annotation": rhoai_report(i).to_string()}).to_string()
        })
        .collect();
    let objects: Vec<String> = (0..LINES).map(|i| trainjob(&base, i, false)).collect();
    let rhoai_objects: Vec<String> = (0..LINES).map(|i| trainjob(&base, i, true)).collect();
    println!("{LINES} lines of each shape, {JOBS} jobs; per line, best of 5");
    measure("compact, trainerStatus", &compact);
    measure("compact, RHOAI annotation", &annotation);
    measure("TrainJob object, trainerStatus", &objects);
    measure("TrainJob object, RHOAI annotation", &rhoai_objects);
}
