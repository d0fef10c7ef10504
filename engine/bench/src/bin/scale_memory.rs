//! Memory at scale, without the controller: `scale_memory [JOBS] [SAMPLES]` (default 10,000 jobs × 100 samples,
//! enough to fill every 64-point window) feeds HF-shaped reports with 8 metrics per job through the evaluator
//! with the 5-rule bench policy (2 Rhai), as the controller would hold them, and reports the peak resident set
//! of the whole process from the OS (`VmHWM`) against the same process's peak before the first job (the
//! in-run baseline), plus bytes per job both ways (RSS growth / jobs, and `Evaluator::job_bytes`).

use std::time::Instant;

use trainwarden_bench::{Rng, hf_line, rss_bytes};
use trainwarden_core::JobKey;
use trainwarden_core::{EngineConfig, Evaluator};
use trainwarden_core::{StreamRecord, parse_line};
use trainwarden_core::{compile, parse_documents};

const POLICY: &str = r#"
apiVersion: trainwarden.dev/v1alpha1
kind: ProgressPolicy
metadata: {name: scale, namespace: scale}
spec:
  mode: Audit
  rules:
    - {name: plateau, uses: plateau, with: {metric: loss, window: 2h, minDelta: 0.001, warmup: 10%}, for: 15m, actions: [{suspend: {}}]}
    - {name: nan, uses: non_finite, with: {metric: loss}, actions: [{suspend: {}}]}
    - {name: stalled, uses: stalled, with: {after: 30m}, actions: [{suspend: {}}]}
    - {name: grad-explosion, when: 'metric("grad_norm") > 10.0 * window_mean("grad_norm", 20)', actions: [{notify: {to: team}}]}
    - {name: late, when: 'progress() > 20.0 && eta() > duration("30h")', actions: [{notify: {to: team}}]}
"#;

const MIB: f64 = 1024.0 * 1024.0;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let number = |i: usize, default: usize| args.get(i).map_or(default, |s| s.parse().expect("a number"));
    let (jobs, samples) = (number(1, 10_000), number(2, 100));

    let mut evaluator = Evaluator::new(EngineConfig::default());
    let docs = parse_documents(POLICY, "scale").expect("policy");
    let mut policy = Some(compile(&docs[0], evaluator.scripts()).expect("compiles"));
    let mut events = Vec::new();
    let (baseline_peak, baseline_rss) = rss_bytes().expect("/proc/self/status");
    let mut rng = Rng::new(7);
    let mut line = String::with_capacity(1024);
    let started = Instant::now();
    // In time order, as a recorded stream is: job j reports at second j % 30 of each 30 s round.
    let order: Vec<usize> = (0..30).flat_map(|second| (second..jobs).step_by(30)).collect();
    for i in 0..samples {
        for &j in &order {
            hf_line(&mut line, &mut rng, j, i, samples);
            let StreamRecord::Update(update) = parse_line(&line, "scale", 0, None).expect("valid line")
            else {
                unreachable!("compact lines are updates")
            };
            let now = update.time;
            if let Some(policy) = policy.take() {
                evaluator.upsert_policy(policy, now, &mut events);
            }
            while let Some(t) = evaluator.next_tick().filter(|t| *t < now) {
                evaluator.tick(t, &mut events);
            }
            evaluator.observe_sample(&update.job, update.sample.expect("progress"), now, &mut events);
            events.clear();
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (peak, rss) = rss_bytes().expect("/proc/self/status");
    let tracked = evaluator.job_count();
    let accounted: usize =
        (0..jobs).filter_map(|j| evaluator.job_bytes(&JobKey::new("scale", format!("job-{j:05}")))).sum();
    let metrics =
        evaluator.job(&JobKey::new("scale", "job-00000")).map_or(0, |d| d.series.metric_names().count());
    let window = evaluator
        .job(&JobKey::new("scale", "job-00000"))
        .and_then(|d| d.series.metric("loss").map(trainwarden_core::MetricSeries::window_len))
        .unwrap_or(0);

    println!(
        "{tracked} tracked jobs × {metrics} metrics, {window} points per window, {samples} samples each"
    );
    println!(
        "peak RSS before the first job (baseline)   {:>8.1} MiB (RSS {:.1} MiB)",
        baseline_peak as f64 / MIB,
        baseline_rss as f64 / MIB
    );
    println!(
        "peak RSS of the whole process (VmHWM)       {:>8.1} MiB (RSS now {:.1} MiB)   target ≤ 256 MiB",
        peak as f64 / MIB,
        rss as f64 / MIB
    );
    println!(
        "RSS growth per tracked job                  {:>8.0} bytes",
        rss.saturating_sub(baseline_rss) as f64 / tracked.max(1) as f64
    );
    println!(
        "Evaluator::job_bytes per tracked job        {:>8.0} bytes",
        accounted as f64 / tracked.max(1) as f64
    );
    println!(
        "throughput (line formatting included)       {:>8.0} samples/s",
        (jobs * samples) as f64 / elapsed
    );
}
