//! The SIMD JSON parsers against serde_json on the lines `trainwarden replay` reads, in one run: skipping a
//! line (reading the JSON at all), and the typed read of a TrainJob line's metadata (borrowed strings, the
//! rest skipped) as `trainwarden-core`'s `object_line` does it. Each parser through serde, the way the
//! engine would use it; simd-json needs a mutable copy of each line, and that copy is timed with it.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use serde::de::IgnoredAny;
use serde_json::{Value, json};

const FROM_APISERVER: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../tests/fixtures/trainjob-from-apiserver.json"
));

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct Line<'a> {
    #[serde(borrow)]
    api_version: Option<&'a str>,
    #[serde(borrow)]
    metadata: Option<Metadata<'a>>,
    spec: Option<IgnoredAny>,
    status: Option<IgnoredAny>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct Metadata<'a> {
    #[serde(borrow)]
    name: Option<&'a str>,
    #[serde(borrow)]
    namespace: Option<&'a str>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(borrow)]
    creation_timestamp: Option<&'a str>,
}

fn best(mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn compare(shape: &str, lines: &[String], typed: bool) {
    let us = |t: f64| t / lines.len() as f64 * 1e6;
    let mut copies: Vec<Vec<u8>> = lines.iter().map(|l| l.clone().into_bytes()).collect();
    let serde_skip = best(|| {
        lines.iter().for_each(|l| {
            black_box(serde_json::from_str::<IgnoredAny>(l).unwrap());
        })
    });
    let sonic_skip = best(|| {
        lines.iter().for_each(|l| {
            black_box(sonic_rs::from_str::<IgnoredAny>(l).unwrap());
        })
    });
    let simd_skip = best(|| {
        copies.iter_mut().for_each(|l| {
            let mut copy = l.clone();
            black_box(simd_json::serde::from_slice::<IgnoredAny>(&mut copy).unwrap());
        })
    });
    println!(
        "{shape}: skip  serde_json {:.2} µs  sonic-rs {:.2} µs  simd-json {:.2} µs",
        us(serde_skip),
        us(sonic_skip),
        us(simd_skip)
    );
    if typed {
        let serde_typed = best(|| {
            lines.iter().for_each(|l| {
                black_box(serde_json::from_str::<Line>(l).unwrap());
            })
        });
        let sonic_typed = best(|| {
            lines.iter().for_each(|l| {
                black_box(sonic_rs::from_str::<Line>(l).unwrap());
            })
        });
        println!("{shape}: typed serde_json {:.2} µs  sonic-rs {:.2} µs", us(serde_typed), us(sonic_typed));
    }
}

fn main() {
    let base: Value = serde_json::from_str(FROM_APISERVER).unwrap();
    let time = |i: usize| format!("2026-11-27T17:{:02}:{:02}Z", i / 60 % 60, i % 60);
    let objects: Vec<String> = (0..20_000)
        .map(|i| {
            let mut job = base.clone();
            job["metadata"]["name"] = json!(format!("job-{}", i % 200));
            job["status"]["conditions"] = json!([{"type": "Suspended", "status": "False", "reason": "Resumed",
                "message": "TrainJob is resumed", "lastTransitionTime": "2026-11-27T16:00:00Z"}]);
            job["status"]["trainerStatus"]["lastUpdatedTime"] = json!(time(i));
            job.to_string()
        })
        .collect();
    let compact: Vec<String> = (0..20_000)
        .map(|i| json!({"time": time(i), "job": format!("team-a/job-{}", i % 200), "trainerStatus": base["status"]["trainerStatus"]}).to_string())
        .collect();
    println!("20,000 lines each, per line, best of 5");
    compare("TrainJob object", &objects, true);
    compare("compact line", &compact, false);
}
