//! Replay throughput: samples per second through decode → normalize → series → 5 rules (2 of them Rhai) →
//! lifecycle, against the same lines decoded by serde_json alone, measured in the same run; plus bytes per
//! tracked job, and heap allocations per sample by stage (a counting global allocator), so a regression
//! that allocates on the hot path shows up as a number. Run: `cargo bench -p trainwarden-core --bench replay`
//! (single-threaded: figures are per core).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use trainwarden_core::JobKey;
use trainwarden_core::StreamRecord;
use trainwarden_core::parse_line;
use trainwarden_core::replay::Replay;
use trainwarden_core::{CompiledPolicy, EngineConfig, Evaluator};
use trainwarden_core::{compile, parse_documents};

/// The system allocator, counting calls (allocations and reallocations).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations `f` makes.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATIONS.load(Relaxed);
    let out = f();
    (out, ALLOCATIONS.load(Relaxed) - before)
}

const POLICY: &str = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: bench, namespace: bench}
spec:
  mode: Audit
  gpuHourCost: 6.875
  rules:
    - {name: plateau, uses: plateau, with: {metric: loss, window: 2h, minDelta: 0.001, warmup: 10%}, for: 15m, actions: [{suspend: {}}]}
    - {name: nan, uses: non_finite, with: {metric: loss}, actions: [{suspend: {}}]}
    - {name: stalled, uses: stalled, with: {after: 30m}, actions: [{suspend: {}}]}
    - {name: grad-explosion, when: 'metric("grad_norm") > 10.0 * window_mean("grad_norm", 20)', actions: [{notify: {to: team}}]}
    - {name: late, when: 'progress() > 20.0 && eta() > duration("30h")', actions: [{notify: {to: team}}]}
"#;

/// The catalog's rules of issue 41 on the same stream (plateau.yaml, divergence.yaml, non-finite.yaml,
/// stall.yaml): levels, the planned end, the schedule, the projection to the end and the job's rhythm, all
/// native detectors. Measured beside `POLICY` in the same run.
const CATALOG_POLICY: &str = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: catalog, namespace: bench}
spec:
  mode: Audit
  gpuHourCost: 6.875
  rules:
    - {name: no-improvement, uses: plateau, with: {metric: auto, window: "30%", smoothing: 9, minDeltaPct: 1, minDelta: 0.001, minPoints: 5, warmup: "10%", minRemaining: "10%", schedule: true}, actions: [{suspend: {}}]}
    - {name: no-expected-gain, uses: no_expected_gain, with: {metric: auto, minGain: "1%", minDelta: 0.001, window: "33%", confidence: 2, warmup: "30%", minRemaining: "20%", schedule: true}, actions: [{suspend: {}}]}
    - {name: diverged, uses: diverging, with: {metric: auto, worseByPct: 10, sustain: "20%", minPoints: 3, smoothing: 5, minDelta: 0.001, warmup: "10%", minRemaining: "10%"}, actions: [{suspend: {}}]}
    - {name: nan-loss, uses: non_finite, with: {metric: loss, logs: 3}, actions: [{suspend: {}}]}
    - {name: stalled, uses: stalled, with: {after: 3h, factor: 3, floor: 3h, ceiling: 12h}, actions: [{suspend: {}}]}
"#;

/// A realistic stream: `jobs` jobs reporting every 30 s in the HF callback shape (8 metrics besides the
/// step and epoch counters), interleaved in time.
fn stream(jobs: usize, samples_per_job: usize) -> Vec<String> {
    let start = 1_795_798_800i64; // 2026-11-27T17:00:00Z
    let mut lines = Vec::with_capacity(jobs * samples_per_job);
    let mut state = 0x2545F4914F6CDD1Du64;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 10_000) as f64 / 10_000.0 - 0.5
    };
    // In time order, as a recorded stream is: job j reports at second j % 30 of each 30 s round.
    let order: Vec<usize> = (0..30).flat_map(|second| (second..jobs).step_by(30)).collect();
    for i in 0..samples_per_job {
        for &j in &order {
            let t = start + (i as i64) * 30 + j as i64 % 30;
            let time = jiff::Timestamp::from_second(t).unwrap();
            let step = i * 10;
            let total = samples_per_job * 10;
            // One job in ten stops learning after 400 samples, so plateau rules fire and intents flow.
            let learning_steps = if j % 10 == 0 { i.min(400) } else { i };
            let loss = 2.5 * (-(learning_steps as f64) / 800.0).exp() + 0.8 + 0.0002 * noise();
            let progress = (100 * step / total).min(99);
            let eta = (total - step) * 3;
            lines.push(format!(
                r#"{{"time":"{time}","job":"bench/job-{j}","trainerStatus":{{"progressPercentage":{progress},"estimatedRemainingSeconds":{eta},"metrics":[{{"name":"loss","value":"{loss:.4}"}},{{"name":"grad_norm","value":"{:.3}"}},{{"name":"learning_rate","value":"3.1e-05"}},{{"name":"eval_loss","value":"{:.4}"}},{{"name":"eval_accuracy","value":"{:.4}"}},{{"name":"train_samples_per_second","value":"{:.2}"}},{{"name":"train_loss","value":"{:.4}"}},{{"name":"total_flos","value":"{:.4e}"}},{{"name":"epoch","value":"{:.2}"}},{{"name":"current_step","value":"{step}"}},{{"name":"total_steps","value":"{total}"}},{{"name":"current_epoch","value":"{:.2}"}}],"lastUpdatedTime":"{time}"}}}}"#,
                1.5 + 0.2 * noise(),
                loss + 0.05,
                0.6 + 0.1 * noise(),
                28.0 + noise(),
                loss + 0.1,
                1.0e15 * (i as f64 + 1.0),
                i as f64 / 600.0,
                i as f64 / 600.0
            ));
        }
    }
    lines
}

fn best_of<F: FnMut() -> usize>(runs: usize, mut f: F) -> f64 {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// The lines decoded in order, each knowing the previous record's time, as a replay decodes them.
fn decoded(lines: &[String]) -> impl Iterator<Item = StreamRecord> + '_ {
    let mut previous = None;
    lines.iter().enumerate().map(move |(i, line)| {
        let record = parse_line(line, "bench", i + 1, previous).expect("valid line");
        previous = Some(record.time());
        record
    })
}

/// Every line through a replay of `policy`.
fn replay_all(lines: &[String], policy: CompiledPolicy, config: EngineConfig) -> Replay {
    let mut replay = Replay::new(vec![policy], config);
    for record in decoded(lines) {
        replay.feed(record);
    }
    replay
}

fn main() {
    let (jobs, per_job) = (200, 1_000);
    let lines = stream(jobs, per_job);
    let n = lines.len() as f64;
    let bytes: usize = lines.iter().map(std::string::String::len).sum();
    println!("stream: {} samples from {jobs} jobs, {:.0} bytes/line", lines.len(), bytes as f64 / n);

    // `REPLAY_BENCH_ONLY=catalog`: replay the catalog's rules alone, over and over, for a profiler
    // (`perf record`, `valgrind --tool=callgrind`) to see them without the rest of the bench.
    if std::env::var("REPLAY_BENCH_ONLY").is_ok_and(|v| v == "catalog") {
        let catalog_docs = parse_documents(CATALOG_POLICY, "bench-catalog").expect("catalog policy");
        let rounds: usize =
            std::env::var("REPLAY_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
        let time = best_of(rounds, || {
            let policy = compile(&catalog_docs[0], Evaluator::new(EngineConfig::default()).scripts())
                .expect("compiles");
            replay_all(&lines, policy, EngineConfig::default()).summary.firings as usize
        });
        println!(
            "full replay, the catalog's 5 rules (issue 41){:>9.0} samples/s  ({:.2} µs/sample)",
            n / time,
            time / n * 1e6
        );
        return;
    }

    let decode = best_of(5, || {
        lines
            .iter()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .map(|v| v.as_object().map_or(0, serde_json::Map::len))
                    .unwrap_or(0)
            })
            .sum()
    });

    // Decode + normalize alone: the fast path of `parse_line`, into a `StreamRecord`.
    let parse = best_of(5, || {
        decoded(&lines).map(|record| usize::from(matches!(record, StreamRecord::Update(_)))).sum()
    });
    let (_, parse_allocations) = allocations(|| {
        for (i, l) in lines.iter().enumerate() {
            black_box(parse_line(l, "bench", i + 1, None).expect("valid line"));
        }
    });

    let engine = Evaluator::new(EngineConfig::default());
    let docs = parse_documents(POLICY, "bench").expect("policy");
    let mut last_replay = None;
    let full = best_of(5, || {
        let policy = compile(&docs[0], engine.scripts()).expect("compiles");
        let replay = replay_all(&lines, policy, EngineConfig::default());
        let events = replay.events.len();
        last_replay = Some(replay);
        events
    });
    let replay = last_replay.expect("ran");
    // The same replay with every condition interpreted by Rhai (the native path off): the baseline of the
    // compiled conditions, which must decide the same.
    let rhai_only = EngineConfig { native_conditions: false, ..EngineConfig::default() };
    let mut rhai_replay = None;
    let full_rhai = best_of(5, || {
        let policy = compile(&docs[0], engine.scripts()).expect("compiles");
        let replay = replay_all(&lines, policy, rhai_only.clone());
        let events = replay.events.len();
        rhai_replay = Some(replay);
        events
    });
    let rhai_replay = rhai_replay.expect("ran");
    assert_eq!(rhai_replay.summary, replay.summary, "native and Rhai conditions decide the same");
    assert_eq!(rhai_replay.events.len(), replay.events.len());
    // The rules alone: the same records decoded beforehand (outside the timer), fed to a replay. This is the
    // "5 rules per core" figure; the full path above adds decoding, which has its own target.
    let records: Vec<StreamRecord> = decoded(&lines).collect();
    let mut evaluate_only = f64::INFINITY;
    for _ in 0..5 {
        let batch = records.clone();
        let policy = compile(&docs[0], engine.scripts()).expect("compiles");
        let mut rules = Replay::new(vec![policy], EngineConfig::default());
        let start = Instant::now();
        for record in batch {
            rules.feed(record);
        }
        evaluate_only = evaluate_only.min(start.elapsed().as_secs_f64());
        assert_eq!(rules.summary, replay.summary, "the same decisions as the full path");
    }
    // The catalog's rules (issue 41's detectors) on the same stream.
    let catalog_docs = parse_documents(CATALOG_POLICY, "bench-catalog").expect("catalog policy");
    let mut catalog_replay = None;
    let catalog = best_of(5, || {
        let policy = compile(&catalog_docs[0], engine.scripts()).expect("compiles");
        let replay = replay_all(&lines, policy, EngineConfig::default());
        let events = replay.events.len();
        catalog_replay = Some(replay);
        events
    });
    let catalog_replay = catalog_replay.expect("ran");
    assert_eq!(catalog_replay.summary.rule_errors, 0, "the catalog's rules must evaluate cleanly");
    let policy = compile(&docs[0], engine.scripts()).expect("compiles");
    let (_, full_allocations) =
        allocations(|| black_box(replay_all(&lines, policy, EngineConfig::default()).events.len()));
    assert_eq!(replay.summary.records as usize, lines.len());
    assert_eq!(replay.summary.rule_errors, 0, "the rules must evaluate cleanly");

    let per_job_bytes: Vec<usize> = (0..jobs)
        .filter_map(|j| replay.evaluator().job_bytes(&JobKey::new("bench", format!("job-{j}"))))
        .collect();
    let avg_bytes = per_job_bytes.iter().sum::<usize>() as f64 / per_job_bytes.len() as f64;
    let metrics =
        replay.evaluator().job(&JobKey::new("bench", "job-0")).map_or(0, |j| j.series.metric_names().count());

    println!(
        "serde_json decode only      {:>10.0} samples/s  ({:.2} µs/sample)",
        n / decode,
        decode / n * 1e6
    );
    println!(
        "decode + normalize (parse_line){:>8.0} samples/s  ({:.2} µs/sample, {:.1} allocations/sample)",
        n / parse,
        parse / n * 1e6,
        parse_allocations as f64 / n
    );
    println!(
        "full replay, 5 rules (2 Rhai){:>9.0} samples/s  ({:.2} µs/sample, {:.1} allocations/sample)",
        n / full,
        full / n * 1e6,
        full_allocations as f64 / n
    );
    println!(
        "same, conditions in Rhai only{:>9.0} samples/s  ({:.2} µs/sample; native is {:.2}× faster)",
        n / full_rhai,
        full_rhai / n * 1e6,
        full_rhai / full
    );
    println!(
        "rules alone (decoded records){:>9.0} samples/s  ({:.2} µs/sample; 5 rules, 2 Rhai, one core)",
        n / evaluate_only,
        evaluate_only / n * 1e6
    );
    println!(
        "full replay, the catalog's 5 rules (issue 41){:>9.0} samples/s  ({:.2} µs/sample; {:.2}× the 5 rules above; firings {})",
        n / catalog,
        catalog / n * 1e6,
        catalog / full,
        catalog_replay.summary.firings
    );
    println!("ratio full / decode          {:>9.2}×", full / decode);
    println!("memory per tracked job       {avg_bytes:>9.0} bytes ({metrics} metrics, history + rule state)");
    println!("firings {}, events {}", replay.summary.firings, replay.events.len());
}
