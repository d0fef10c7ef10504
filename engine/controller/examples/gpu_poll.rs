//! What one GPU metrics poll costs at fleet scale: decoding Prometheus' answer for every GPU, joining it to
//! TrainJobs, and judging every job's GPU rules, against a plain `serde_json::Value` decode of the same
//! answer measured in the same run.
//!
//! Run: `cargo run --release -p trainwarden-controller --example gpu_poll`
//! (`TRAINWARDEN_GPU_JOBS`, default 10,000 TrainJobs × 8 GPUs, 4 DCGM gauges each).
//!
//! The answer is what Prometheus returns for the poll's query: one vector sample per GPU and gauge, with the
//! labels its `max by (…)` keeps (`__name__`, `namespace`, `pod`, `gpu`). The join looks pods up in a hash map, as the controller's pod store does.
//! The judge is the core's `Evaluator` with `policies/reclaim-gpus.yaml`'s three rules (hang, gpu_idle, and a
//! Rhai `gpu_util()` rule) over every job, after 30 polls of history.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use trainwarden_controller::sources::gpu_metrics::{QueryResponse, readings};
use trainwarden_core::{EngineConfig, Evaluator, JobKey, JobSnapshot, ScriptEngine, Timestamp};

const GPUS_PER_JOB: usize = 8;
const GAUGES: [&str; 4] = [
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_FB_USED",
];

fn answer(jobs: usize, at: i64, busy: bool) -> String {
    let mut out = String::with_capacity(jobs * GPUS_PER_JOB * GAUGES.len() * 330);
    out.push_str(r#"{"status":"success","data":{"resultType":"vector","result":["#);
    let mut first = true;
    for j in 0..jobs {
        let ns = format!("team-{}", j % 50);
        for g in 0..GPUS_PER_JOB {
            let pod = format!("ft-{j}-node-0-{}-x7k2p", g / 4);
            let util = if busy || j % 10 != 0 { 90 + (j + g) % 10 } else { 0 };
            for gauge in GAUGES {
                let value = match gauge {
                    "DCGM_FI_DEV_GPU_UTIL" => util.to_string(),
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => format!("{:.2}", util as f64 / 100.0),
                    "DCGM_FI_DEV_POWER_USAGE" => format!("{:.1}", 60.0 + 6.0 * util as f64),
                    _ => "71680".to_string(),
                };
                if !first {
                    out.push(',');
                }
                first = false;
                // The labels the poll's `max by` keeps (the exporter's UUID, PCI bus, model, host, driver and
                // the scrape's instance are dropped by Prometheus).
                out.push_str(&format!(
                    r#"{{"metric":{{"__name__":"{gauge}","gpu":"{}","namespace":"{ns}","pod":"{pod}"}},"value":[{at},"{value}"]}}"#,
                    g % 4
                ));
            }
        }
    }
    out.push_str("]}}");
    out
}

fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let started = Instant::now();
        let out = f();
        best = best.min(started.elapsed());
        last = Some(out);
    }
    (best, last.expect("at least one run"))
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_string))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let jobs: usize =
        std::env::var("TRAINWARDEN_GPU_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let t0: i64 = 1_795_820_400;
    let text = answer(jobs, t0, false);
    let pods: HashMap<(String, String), String> = (0..jobs)
        .flat_map(|j| {
            (0..GPUS_PER_JOB / 4).map(move |n| {
                ((format!("team-{}", j % 50), format!("ft-{j}-node-0-{n}-x7k2p")), format!("ft-{j}"))
            })
        })
        .collect();
    let trainjob_of = |ns: &str, pod: &str| pods.get(&(ns.to_string(), pod.to_string())).cloned();
    let at = Timestamp::from_second(t0).expect("a time");

    let (baseline, _) =
        best(3, || serde_json::from_str::<serde_json::Value>(&text).expect("the answer is JSON"));
    let (poll, found) = best(3, || {
        let answer: QueryResponse = serde_json::from_str(&text).expect("a Prometheus answer");
        readings(answer, at, trainjob_of).expect("a vector")
    });
    assert_eq!(found.jobs.len(), jobs);
    assert_eq!(found.jobs[0].1.gpus.len(), GPUS_PER_JOB);

    // The judge: every job known, 30 polls of history (30 s apart), then one more poll timed.
    let yaml =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../policies/reclaim-gpus.yaml"))
            .expect("policies/reclaim-gpus.yaml")
            .replace(
                "namespaceSelector:\n    matchLabels:\n      trainwarden.dev/reclaim: \"true\"\n",
                "namespaceSelector: {}\n",
            );
    let doc = trainwarden_core::parse_documents(&yaml, "reclaim-gpus.yaml").expect("policy").remove(0);
    let policy = trainwarden_core::compile(&doc, &ScriptEngine::default()).expect("compiles");
    let mut evaluator = Evaluator::new(EngineConfig::default());
    let mut events = Vec::new();
    evaluator.upsert_policy(policy, at, &mut events);
    for (key, _) in &found.jobs {
        let mut snapshot = JobSnapshot::new(JobKey::new(key.namespace.clone(), key.name.clone()));
        snapshot.running_since = Some(at);
        evaluator.observe(snapshot, at, &mut events);
    }
    let mut judge = Duration::ZERO;
    for poll_no in 1..=31 {
        let now = Timestamp::from_second(t0 + 30 * poll_no).expect("a time");
        let mut step = found.jobs.clone();
        for (_, sample) in &mut step {
            sample.at = now;
        }
        let started = Instant::now();
        for (key, sample) in &step {
            evaluator.observe_gpu(key, sample, now, &mut events);
        }
        if poll_no == 31 {
            judge = started.elapsed();
        }
        events.clear();
    }
    let per_poll = poll + judge;
    println!(
        "GPU metrics poll, {jobs} TrainJobs × {GPUS_PER_JOB} GPUs × {} gauges = {} series",
        GAUGES.len(),
        jobs * GPUS_PER_JOB * GAUGES.len()
    );
    println!("  answer                         {:.1} MB", text.len() as f64 / 1e6);
    println!("  baseline: serde_json::Value    {:>8.1} ms", baseline.as_secs_f64() * 1e3);
    println!(
        "  decode + join (readings)       {:>8.1} ms  ({:.2}× the baseline)",
        poll.as_secs_f64() * 1e3,
        poll.as_secs_f64() / baseline.as_secs_f64()
    );
    println!("  judge 3 GPU rules, every job   {:>8.1} ms", judge.as_secs_f64() * 1e3);
    println!(
        "  one poll in all                {:>8.1} ms = {:.2} % of one core at a 30 s interval",
        per_poll.as_secs_f64() * 1e3,
        per_poll.as_secs_f64() / 30.0 * 100.0
    );
    println!(
        "  peak RSS of this process       {:>8.1} MiB (answer text and its decode included)",
        peak_rss_mib()
    );
}
