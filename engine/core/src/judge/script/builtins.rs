//! The host functions rule scripts call, one [`Builtin`] entry each: signature, documentation, an example
//! and its expected value on the documentation fixture (a test runs every example, VRL style).

use rhai::Engine;

use super::host;
#[cfg(test)]
use crate::time::Timestamp;

/// One host function: how to call it, what it does, an example and the example's value on the
/// documentation fixture ([`doc_fixture`]).
pub struct Builtin {
    pub signature: &'static str,
    pub doc: &'static str,
    pub example: &'static str,
    pub expected: &'static str,
    pub(super) register: fn(&mut Engine),
}

/// Every function rule scripts can call, besides Rhai's own.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        signature: "metric(name) -> float",
        doc: "Latest observation of a metric (canonical name); NaN/Inf if the latest report was non-finite, NaN if never reported.",
        example: r#"metric("loss")"#,
        expected: "1.25",
        register: |e| {
            e.register_fn("metric", host::metric);
        },
    },
    Builtin {
        signature: "best(name) -> float, best(name, \"min\"|\"max\") -> float",
        doc: "Best finite value so far; the direction is inferred from the name (accuracy-like names are maximized) unless given.",
        example: r#"best("loss")"#,
        expected: "1.1",
        register: |e| {
            e.register_fn("best", host::best);
            e.register_fn("best", host::best_in);
        },
    },
    Builtin {
        signature: "window_mean(name, n) / window_min / window_max / window_std -> float",
        doc: "Mean, minimum, maximum or standard deviation of the last n finite values (at most 64 are kept).",
        example: r#"window_mean("loss", 2)"#,
        expected: "1.225",
        register: |e| {
            e.register_fn("window_mean", host::window_mean);
            e.register_fn("window_min", host::window_min);
            e.register_fn("window_max", host::window_max);
            e.register_fn("window_std", host::window_std);
        },
    },
    Builtin {
        signature: "slope(name, n) -> float",
        doc: "Least-squares slope of the last n finite values, in units per hour (negative = falling).",
        example: r#"slope("loss", 4) < 0"#,
        expected: "true",
        register: |e| {
            e.register_fn("slope", host::slope);
        },
    },
    Builtin {
        signature: "ema(name) -> float",
        doc: "Exponential moving average of the finite values (α = 0.1).",
        example: r#"ema("loss") > 1.2"#,
        expected: "true",
        register: |e| {
            e.register_fn("ema", host::ema);
        },
    },
    Builtin {
        signature: "count(name) -> int",
        doc: "Number of finite values of the metric observed so far.",
        example: r#"count("loss")"#,
        expected: "5",
        register: |e| {
            e.register_fn("count", host::count);
        },
    },
    Builtin {
        signature: "since_improvement(name) -> float",
        doc: "Seconds from the time the metric reached its best value to now.",
        example: r#"since_improvement("loss")"#,
        expected: "180.0",
        register: |e| {
            e.register_fn("since_improvement", host::since_improvement);
        },
    },
    Builtin {
        signature: "finite(x) -> bool",
        doc: "True unless x is NaN or ±Inf.",
        example: r#"finite(metric("grad_norm"))"#,
        expected: "false",
        register: |e| {
            e.register_fn("finite", host::finite);
            e.register_fn("finite", host::finite_int);
        },
    },
    Builtin {
        signature: "progress() -> float",
        doc: "Latest progress in percent (0–100), NaN if the job never reported it.",
        example: "progress()",
        expected: "42.0",
        register: |e| {
            e.register_fn("progress", host::progress);
        },
    },
    Builtin {
        signature: "eta() -> float",
        doc: "Seconds the job still needs, as of its latest report (NaN if unknown).",
        example: "eta() / 3600",
        expected: "10.0",
        register: |e| {
            e.register_fn("eta", host::eta);
        },
    },
    Builtin {
        signature: "step() -> float, total_steps() -> float, epoch() -> float",
        doc: "Latest reported training step, total steps and (fractional) epoch; NaN if unknown.",
        example: "step() / total_steps()",
        expected: "0.42",
        register: |e| {
            e.register_fn("step", host::step);
            e.register_fn("total_steps", host::total_steps);
            e.register_fn("epoch", host::epoch);
        },
    },
    Builtin {
        signature: "runtime() -> float",
        doc: "Seconds since the job last started running (creation or resume).",
        example: "runtime() / 3600",
        expected: "2.0",
        register: |e| {
            e.register_fn("runtime", host::runtime);
        },
    },
    Builtin {
        signature: "since_checkpoint() -> float",
        doc: "Seconds since the job's last checkpoint (the `checkpoint_step` and `checkpoint_request_id` metrics it reports, sdk/python/PROTOCOL.md), or since it last started running if it has not reported one since: the work a stop now would lose.",
        example: "since_checkpoint() / 60",
        expected: "2.0",
        register: |e| {
            e.register_fn("since_checkpoint", host::since_checkpoint);
        },
    },
    Builtin {
        signature: "checkpoint_step() -> float",
        doc: "The training step the job's last reported checkpoint holds; NaN if it never reported one.",
        example: "checkpoint_step()",
        expected: "400.0",
        register: |e| {
            e.register_fn("checkpoint_step", host::checkpoint_step);
        },
    },
    Builtin {
        signature: "silence() -> float",
        doc: "Seconds since the latest progress sample (or the job's start, if later).",
        example: "silence()",
        expected: "60.0",
        register: |e| {
            e.register_fn("silence", host::silence);
        },
    },
    Builtin {
        signature: "now() -> int",
        doc: "Evaluation time in Unix seconds (the stream's clock in replay).",
        example: "now()",
        expected: "1767232800",
        register: |e| {
            e.register_fn("now", host::now);
        },
    },
    Builtin {
        signature: "duration(text) -> float",
        doc: "Seconds in a duration such as \"90m\" or \"1h30m\", to compare with runtime(), eta() or silence().",
        example: r#"duration("1h30m")"#,
        expected: "5400.0",
        register: |e| {
            e.register_fn("duration", host::duration);
        },
    },
    Builtin {
        signature: "gpus() -> float, gpu_hours() -> float, cost() -> float",
        doc: "GPUs held (from the job or the policy's assumeGpus), GPU-hours since the last start, and their cost at gpuHourCost. NaN when unknown.",
        example: "cost()",
        expected: "110.0",
        register: |e| {
            e.register_fn("gpus", host::gpus);
            e.register_fn("gpu_hours", host::gpu_hours);
            e.register_fn("cost", host::cost);
        },
    },
    Builtin {
        signature: "gpu_util() -> float, gpu_util_min() -> float, gpu_power() -> float",
        doc: "The job's GPUs now, by their own metrics (DCGM through Prometheus, or a stream's `gpu` field): mean utilization and the idlest GPU's, in percent, and mean power draw per GPU in W. NaN when no reading is less than 5 minutes old.",
        example: "gpu_util_min() < 10.0 && gpu_util() > 50.0 && gpu_power() > 200.0",
        expected: "true",
        register: |e| {
            e.register_fn("gpu_util", host::gpu_util);
            e.register_fn("gpu_util_min", host::gpu_util_min);
            e.register_fn("gpu_power", host::gpu_power);
        },
    },
    Builtin {
        signature: "queue_pending() -> float, queue_pending_gpus() -> float",
        doc: "Who waits for the quota the job holds in Kueue: pending Workloads in its ClusterQueue and the other ClusterQueues of its cohort, and the GPUs they request. NaN when unknown (the job has no kueue.x-k8s.io/queue-name label, or Kueue is not read).",
        example: "queue_pending() >= 1.0 && queue_pending_gpus() >= 8.0",
        expected: "true",
        register: |e| {
            e.register_fn("queue_pending", host::queue_pending);
            e.register_fn("queue_pending_gpus", host::queue_pending_gpus);
        },
    },
    Builtin {
        signature: "gpu_idle(percent, duration) -> bool, gpu_idle_any(percent, duration) -> bool",
        doc: "The detector gpu_idle: every GPU (gpu_idle_any: at least one GPU in every reading) stayed below the utilization for the duration, readings continuous and current.",
        example: r#"gpu_idle_any(10.0, "3m") && !gpu_idle(10.0, "3m")"#,
        expected: "true",
        register: |e| {
            e.register_fn("gpu_idle", host::gpu_idle);
            e.register_fn("gpu_idle_any", host::gpu_idle_any);
        },
    },
    Builtin {
        signature: "hang(duration) -> bool",
        doc: "The detector hang with busyAbove 80: no progress for the duration while every GPU stayed at or above 80 %.",
        example: r#"hang("5m")"#,
        expected: "false",
        register: |e| {
            e.register_fn("hang", host::hang);
        },
    },
    Builtin {
        signature: "phase() -> string",
        doc: "Running, Suspended, Complete or Failed.",
        example: "phase()",
        expected: "Running",
        register: |e| {
            e.register_fn("phase", host::phase);
        },
    },
    Builtin {
        signature: "label(key) -> string, annotation(key) -> string; variables labels, annotations",
        doc: "A label or annotation of the TrainJob (\"\" if absent). The maps `labels` and `annotations` hold them all.",
        example: r#"label("team") == "fraud" && labels["team"] == "fraud""#,
        expected: "true",
        register: |e| {
            e.register_fn("label", host::label);
            e.register_fn("annotation", host::annotation);
        },
    },
    Builtin {
        signature: "weekday() -> int, hour() -> int, minute() -> int",
        doc: "ISO weekday (1 = Monday … 7 = Sunday), hour and minute of now() in the policy's time zone.",
        example: "weekday() == 4 && hour() == 2",
        expected: "true",
        register: |e| {
            e.register_fn("weekday", host::weekday);
            e.register_fn("hour", host::hour);
            e.register_fn("minute", host::minute);
        },
    },
    Builtin {
        signature: "non_finite(metric) -> bool",
        doc: "The detector non_finite: the metric's latest observation is NaN/Inf (\"*\" = any metric).",
        example: r#"non_finite("grad_norm")"#,
        expected: "true",
        register: |e| {
            e.register_fn("non_finite", host::non_finite);
        },
    },
    Builtin {
        signature: "stalled(duration) -> bool",
        doc: "The detector stalled: no progress sample for the duration while the job runs.",
        example: r#"stalled("30m")"#,
        expected: "false",
        register: |e| {
            e.register_fn("stalled", host::stalled);
        },
    },
    Builtin {
        signature: "eta_after(deadline) -> bool, eta_exceeds(duration) -> bool",
        doc: "The ETA detectors: estimated end later than an RFC 3339 deadline, or further away than a duration.",
        example: r#"eta_after("2026-01-01T09:00:00Z") && !eta_exceeds("12h")"#,
        expected: "true",
        register: |e| {
            e.register_fn("eta_after", host::eta_after);
            e.register_fn("eta_exceeds", host::eta_exceeds);
        },
    },
    Builtin {
        signature: "diverging(metric, threshold) -> bool, diverging_factor(metric, factor) -> bool",
        doc: "The detector diverging: latest value worse than a threshold, or worse than factor × best.",
        example: r#"diverging("loss", 1.15) && !diverging_factor("loss", 2.0)"#,
        expected: "true",
        register: |e| {
            e.register_fn("diverging", host::diverging);
            e.register_fn("diverging_factor", host::diverging_factor);
        },
    },
    Builtin {
        signature: "plateau(metric, n) / plateau(metric, duration) [, min_delta] -> bool",
        doc: "No improvement larger than min_delta (default 0) in the last n samples or the last duration before the latest sample, against the best before them. Works on the kept history (64 samples); `uses: plateau` has no such bound.",
        example: r#"plateau("loss", 2) && !plateau("loss", 4)"#,
        expected: "true",
        register: |e| {
            e.register_fn("plateau", host::plateau_samples);
            e.register_fn("plateau", host::plateau_samples_by);
            e.register_fn("plateau", host::plateau_time);
            e.register_fn("plateau", host::plateau_time_by);
        },
    },
    Builtin {
        signature: "over_budget(#{maxRuntime, maxGpuHours, maxCost}) -> bool",
        doc: "The detector over_budget with the same parameters.",
        example: r#"over_budget(#{maxGpuHours: 15.0}) && !over_budget(#{maxRuntime: "3h"})"#,
        expected: "true",
        register: |e| {
            e.register_fn("over_budget", host::over_budget);
        },
    },
    Builtin {
        signature: "cohort_size() -> int",
        doc: "Jobs in the job's cohort (spec.cohort: its sweep), the job included; 0 when it is in none.",
        example: "cohort_size()",
        expected: "8",
        register: |e| {
            e.register_fn("cohort_size", host::cohort_size);
        },
    },
    Builtin {
        signature: "cohort_median(name) -> float, cohort_best(name) -> float",
        doc: "Median and best value of a metric over the cohort's jobs that reported it at the job's latest step (alignBy), the job included; NaN when the job reported no value of it there, or is in no cohort.",
        example: r#"metric("loss") <= cohort_median("loss") && cohort_best("loss") < 1.0"#,
        expected: "true",
        register: |e| {
            e.register_fn("cohort_median", host::cohort_median);
            e.register_fn("cohort_best", host::cohort_best);
        },
    },
    Builtin {
        signature: "cohort_rank() -> float, cohort_rank(name) -> float",
        doc: "The job's rank on loss (or on `name`) among the cohort's jobs at its latest step: 1 is the best (ties share the better rank); NaN as cohort_median.",
        example: r#"cohort_rank("loss") / cohort_size()"#,
        expected: "0.375",
        register: |e| {
            e.register_fn("cohort_rank", host::cohort_rank_loss);
            e.register_fn("cohort_rank", host::cohort_rank);
        },
    },
];

/// The job every builtin example runs against: loss 1.5, 1.3, 1.1, 1.2, 1.25 one per minute from
/// 2026-01-01T01:55Z, grad_norm ended in Inf, a checkpoint at step 400 reported from 01:58Z, progress 42 %, step 420 of 1000, ETA 10 h, 10 GPUs at $5.5,
/// running since 00:00Z, evaluated at 02:00Z (a Thursday), label team=fraud; four GPU readings a minute
/// apart to 01:59Z, each with GPUs at 0, 60, 90 and 90 % drawing 70, 250, 300 and 300 W.
#[cfg(test)]
pub(super) fn doc_fixture()
-> (Box<crate::history::job::JobData>, std::sync::Arc<crate::history::job::PolicyEnv>, Timestamp) {
    use std::sync::Arc;

    use crate::history::job::{JobData, PolicyEnv};
    use crate::history::job_series::JobSeries;
    use crate::input::sample::JobSnapshot;
    use crate::input::sample::{JobKey, Metric, ProgressSample, SampleSource};
    use crate::units::calendar::Calendar;
    let t0 = Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH);
    let at = |m: i64| Timestamp::from_second(t0.as_second() + m * 60).unwrap_or(t0);
    let mut snapshot = JobSnapshot::new(JobKey::new("fraud", "ft-llama"));
    snapshot.labels.insert("team".into(), "fraud".into());
    snapshot.gpus = Some(10.0);
    snapshot.running_since = Some(t0);
    let mut series = JobSeries::new(t0);
    for (i, loss) in [1.5, 1.3, 1.1, 1.2, 1.25].iter().enumerate() {
        let mut s = ProgressSample::empty(at(115 + i as i64), SampleSource::TrainerStatus);
        s.metrics.push(Metric { name: "loss".into(), value: *loss });
        s.metrics.push(Metric { name: "grad_norm".into(), value: if i == 4 { f64::INFINITY } else { 2.0 } });
        s.progress_percent = Some(42.0);
        s.current_step = Some(420.0);
        s.total_steps = Some(1000.0);
        s.eta_seconds = Some(36_000.0);
        if i >= 3 {
            // The job saved at step 400, answering nobody's request, and reports it from 01:58 on.
            s.metrics.push(Metric { name: "checkpoint_step".into(), value: 400.0 });
            s.metrics.push(Metric { name: "checkpoint_request_id".into(), value: 0.0 });
        }
        series.record(&s);
    }
    let mut gpu = crate::history::gpu_series::GpuSeries::default();
    for m in 116..120 {
        let gpus = [(0.0, 70.0), (60.0, 250.0), (90.0, 300.0), (90.0, 300.0)]
            .iter()
            .enumerate()
            .map(|(i, (util, power))| crate::input::gpu::GpuReading {
                id: format!("ft-llama-node-0-0/{i}"),
                util: Some(*util),
                engine_active: None,
                power: Some(*power),
                fb_used: None,
            })
            .collect();
        gpu.record(&crate::input::gpu::GpuSample { at: at(m), gpus });
    }
    let env = PolicyEnv {
        calendar: Calendar::new(jiff::tz::TimeZone::UTC, Vec::new()),
        gpu_hour_cost: Some(5.5),
        assume_gpus: None,
    };
    let queue = Some(crate::input::queue::QueueDemand { pending: 3, pending_gpus: 16.0 });
    // Its cohort: 8 trials; at its step, 5 of them reported loss (its 1.25 is the 3rd best).
    let cohort = Some(Box::new(crate::history::job::CohortFacts {
        size: 8,
        metrics: vec![crate::history::job::CohortMetric {
            name: "loss".into(),
            median: 1.25,
            best: 0.9,
            rank: 3.0,
        }],
    }));
    (Box::new(JobData { snapshot, series, gpu, queue, first_seen: t0, cohort }), Arc::new(env), at(120))
}
