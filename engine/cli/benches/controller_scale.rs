//! The controller at cluster scale, against a real kube-apiserver + etcd (issue 6, "Controller, real API
//! server"): 1,000 TrainJobs whose status a load generator updates every 5 s through the status subresource
//! (200 updates/s, server-side apply by `trainer-status`, as Kubeflow's status server writes it), 3 policies,
//! and the real `trainwarden controller` binary in its own process. Injected: NaN losses, plateaus and stalls.
//! Printed: update → action latency (p50, p99), stall-timer lateness, the controller's CPU and peak RSS, the API
//! requests it made per second, writes per action and status writes per policy per second.
//!
//! Run: `tests/k8s/with-control-plane.sh cargo bench -p trainwarden --bench controller_scale`
//! (`TRAINWARDEN_SCALE_JOBS`, `TRAINWARDEN_SCALE_SECONDS` and `TRAINWARDEN_SCALE_PERIOD_SECONDS`, how often each
//! job reports, change the size.)

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use std::sync::Mutex;
use trainwarden_kube::ProgressPolicy;
use trainwarden_kube::trainjob::{TRAINER_STATUS_FIELD_MANAGER, trainjob_api};

/// How often each job reports, by default (`TRAINWARDEN_SCALE_PERIOD_SECONDS`).
const PERIOD: Duration = Duration::from_secs(5);
/// A job is stalled after this long without a report (at least 4 report periods, so healthy jobs never are).
fn stall_after(period: Duration) -> i64 {
    20.max(4 * period.as_secs() as i64)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fate {
    Healthy,
    Nan,
    Plateau,
    Stall,
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// utime + stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The `q` quantile of the observations a histogram family's series `selector` (e.g. `work="act"`) gained
/// between two scrapes, as the upper bound of the bucket it falls in (buckets double, so within 2×).
fn quantile_between(before: &str, after: &str, family: &str, selector: &str, q: f64) -> f64 {
    let buckets = |text: &str| -> Vec<(f64, f64)> {
        let prefix = format!("{family}_bucket{{");
        let mut out: Vec<(f64, f64)> = text
            .lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(selector))
            .filter_map(|l| {
                let le = l.split("le=\"").nth(1)?.split('"').next()?;
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
                Some((le, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    };
    let (b0, b1) = (buckets(before), buckets(after));
    let count = |le: f64, b: &[(f64, f64)]| b.iter().find(|(l, _)| *l == le).map_or(0.0, |(_, c)| *c);
    let total = b1.last().map_or(0.0, |(le, c)| c - count(*le, &b0));
    if total == 0.0 {
        return f64::NAN;
    }
    b1.iter().find(|(le, c)| c - count(*le, &b0) >= q * total).map_or(f64::NAN, |(le, _)| *le)
}

/// The mean of the observations a histogram family's series `selector` gained between two scrapes.
fn mean_between(before: &str, after: &str, family: &str, selector: &str) -> f64 {
    let total = |text: &str, suffix: &str| {
        let prefix = format!("{family}_{suffix}");
        text.lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(selector))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let count = total(after, "count") - total(before, "count");
    (total(after, "sum") - total(before, "sum")) / count
}

async fn scrape(port: u16) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return String::new() };
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out).await;
    out
}

fn status_body(loss: &str, at: Timestamp, step: i64) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "status": {"trainerStatus": {
            "progressPercentage": (step % 100),
            "estimatedRemainingSeconds": 36000,
            "metrics": [{"name": "loss", "value": loss}, {"name": "learning_rate", "value": "0.0001"}],
            "lastUpdatedTime": at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }},
    })
}

/// Per job: when each of its reports was sent, with the report's progressPercentage (which identifies it).
type SentReports = HashMap<String, Vec<(Timestamp, i64)>>;

struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::main]
async fn main() {
    let Some(kubeconfig) = std::env::var_os("TRAINWARDEN_TEST_KUBECONFIG") else {
        eprintln!(
            "controller_scale needs a real API server: run it as\n  tests/k8s/with-control-plane.sh cargo bench -p trainwarden --bench controller_scale"
        );
        std::process::exit(if std::env::var("CI").is_ok_and(|v| v == "true") { 1 } else { 0 });
    };
    let jobs = env_usize("TRAINWARDEN_SCALE_JOBS", 1000);
    let seconds = env_usize("TRAINWARDEN_SCALE_SECONDS", 75) as u64;
    let period =
        Duration::from_secs(env_usize("TRAINWARDEN_SCALE_PERIOD_SECONDS", PERIOD.as_secs() as usize) as u64);
    let stalls_due =
        Duration::from_secs(30).max(period * 2) + period + Duration::from_secs(stall_after(period) as u64);
    assert!(
        Duration::from_secs(seconds) > stalls_due,
        "TRAINWARDEN_SCALE_SECONDS must exceed {}s for the stalls to be due within the run",
        stalls_due.as_secs()
    );
    let client = trainwarden_kube::client::client_from_kubeconfig(std::path::Path::new(&kubeconfig))
        .await
        .expect("client");
    let ns = format!("scale-{}", Timestamp::now().as_second());
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .expect("namespace");

    // 3 policies: NaN, plateau, stall — all Enforce, suspend.
    let policies: Api<ProgressPolicy> = Api::namespaced(client.clone(), &ns);
    for (name, rule) in [
        ("nan", "{name: nan-loss, uses: non_finite, with: {metric: loss}, actions: [{suspend: {}}]}"),
        (
            "plateau",
            "{name: plateau, uses: plateau, with: {metric: loss, window: 4, minDelta: 0.001}, actions: [{suspend: {}}]}",
        ),
        ("stall", "{name: stalled, uses: stalled, with: {after: STALL_AFTERs}, actions: [{suspend: {}}]}"),
    ] {
        let rule = rule.replace("STALL_AFTER", &stall_after(period).to_string());
        let yaml = format!(
            "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {{name: {name}}}\nspec:\n  mode: Enforce\n  samplingInterval: 5s\n  rules:\n    - {rule}\n"
        );
        let p: ProgressPolicy = serde_saphyr::from_str(&yaml).expect("policy");
        policies.create(&PostParams::default(), &p).await.expect("create policy");
    }

    // The TrainJobs: 1 in 25 of each injected fate, the rest healthy.
    let template: DynamicObject = serde_saphyr::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../../shared/fixtures/kubeflow/upstream-trainer/examples/01-multi-node.yaml"),
        )
        .expect("TrainJob fixture"),
    )
    .expect("fixture YAML");
    let api = trainjob_api(client.clone(), Some(&ns));
    let fate = |i: usize| match i % 25 {
        1 => Fate::Nan,
        2 => Fate::Plateau,
        3 => Fate::Stall,
        _ => Fate::Healthy,
    };
    let t0 = Instant::now();
    futures::stream::iter(0..jobs)
        .map(|i| {
            let (api, mut job) = (api.clone(), template.clone());
            job.metadata.name = Some(format!("job-{i:05}"));
            job.metadata.namespace = Some(ns.clone());
            async move { api.create(&PostParams::default(), &job).await.map(|_| ()) }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await
        .expect("create TrainJobs");
    println!("created {jobs} TrainJobs in {:.1}s", t0.elapsed().as_secs_f64());

    // The controller, in its own process.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(env!("CARGO_BIN_EXE_trainwarden"))
        .args(["controller", "--leader-election=false", "--log-format=text", "--eval-interval=30s"])
        .args(["--namespace", &ns, "--http-addr", &format!("127.0.0.1:{port}")])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the controller");
    let pid = child.id();
    let _controller = Controller(child);
    let ready = Instant::now();
    loop {
        if scrape(port).await.contains("trainwarden_jobs")
            && metric(&scrape(port).await, "trainwarden_jobs ") >= jobs as f64
        {
            break;
        }
        let patience = Duration::from_secs(60).max(Duration::from_millis(20) * jobs as u32);
        assert!(ready.elapsed() < patience, "the controller did not list the TrainJobs");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("controller listed {jobs} TrainJobs {:.1}s after start", ready.elapsed().as_secs_f64());

    // When each job was suspended, as a watch sees it; and when the same watch first saw each report of a
    // NaN or plateau job (keyed by its progressPercentage, the step mod 100: unique within a run), which
    // splits the latency into the API server's part and the controller's.
    let suspended_at: Arc<Mutex<HashMap<String, Timestamp>>> = Arc::default();
    let report_seen_at: Arc<Mutex<HashMap<(String, i64), Timestamp>>> = Arc::default();
    {
        let (api, seen, reports_seen) = (api.clone(), suspended_at.clone(), report_seen_at.clone());
        tokio::spawn(async move {
            let mut stream = watcher(api, watcher::Config::default()).applied_objects().boxed();
            while let Some(Ok(job)) = stream.next().await {
                let now = Timestamp::now();
                let name = job.name_any();
                if job.data.pointer("/spec/suspend") == Some(&json!(true)) {
                    seen.lock().unwrap().entry(name.clone()).or_insert(now);
                }
                let index = name.strip_prefix("job-").and_then(|i| i.parse::<usize>().ok());
                if index.is_some_and(|i| matches!(fate(i), Fate::Nan | Fate::Plateau))
                    && let Some(step) =
                        job.data.pointer("/status/trainerStatus/progressPercentage").and_then(Value::as_i64)
                {
                    reports_seen.lock().unwrap().entry((name, step)).or_insert(now);
                }
            }
        });
    }

    // The load: every job reports every 5 s, spread evenly (200 updates/s for 1,000 jobs). Injections happen
    // after 30 s: NaN jobs report "nan", plateau jobs go flat, stalled jobs stop reporting.
    // (With slower reports, after every job has reported twice.)
    let inject_after = Duration::from_secs(30).max(period * 2);
    let start = Instant::now();
    let cpu0 = cpu_seconds(pid);
    // The API server's and etcd's processes, from the control plane's directory (beside the kubeconfig), so
    // their CPU per update is measured over the same window.
    let plane =
        std::path::Path::new(&kubeconfig).parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let plane_pid = |name: &str| {
        std::fs::read_to_string(plane.join(format!("{name}.pid")))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
    };
    let (apiserver_pid, etcd_pid) = (plane_pid("kube-apiserver"), plane_pid("etcd"));
    let plane_cpu0 = (apiserver_pid.map(cpu_seconds), etcd_pid.map(cpu_seconds));
    let metrics0 = scrape(port).await;
    // Per injected job: when each report went out (the one before the suspension triggered it); for stalled
    // jobs, the lastUpdatedTime of their last report.
    let reports: Arc<Mutex<SentReports>> = Arc::default();
    let mut last_stall_report: HashMap<String, Timestamp> = HashMap::new();
    let params = PatchParams::apply(TRAINER_STATUS_FIELD_MANAGER).force();
    let mut step: HashMap<usize, i64> = HashMap::new();
    let slot = period / jobs as u32;
    let mut sent = 0u64;
    let mut late_sends = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut next_job = 0usize;
    let mut pending = futures::stream::FuturesUnordered::new();
    while start.elapsed() < Duration::from_secs(seconds) {
        tick.tick().await;
        let due = (start.elapsed().as_nanos() / slot.as_nanos().max(1)) as usize;
        while next_job < due {
            let i = next_job % jobs;
            next_job += 1;
            let s = step.entry(i).or_insert(0);
            *s += 1;
            let injecting = start.elapsed() >= inject_after;
            let name = format!("job-{i:05}");
            if suspended_at.lock().unwrap().contains_key(&name) {
                continue; // its pods are gone: nothing reports any more
            }
            let loss = match (fate(i), injecting) {
                (Fate::Stall, true) => continue,
                (Fate::Nan, true) => "nan".to_string(),
                // Flat within minDelta: the 4-sample window fills within 4 reports.
                (Fate::Plateau, true) => format!("{:.4}", 0.5 + 0.0001 * (*s % 3) as f64),
                _ => format!("{:.4}", 2.0 / (1.0 + *s as f64 * 0.1)),
            };
            let now = Timestamp::now();
            if fate(i) == Fate::Stall {
                last_stall_report.insert(name.clone(), now);
            }
            let body = status_body(&loss, now, *s);
            let (api, params, reports) = (api.clone(), params.clone(), reports.clone());
            let record = injecting && matches!(fate(i), Fate::Nan | Fate::Plateau);
            let progress = *s % 100;
            pending.push(async move {
                let r = api.patch_status(&name, &params, &Patch::Apply(&body)).await;
                // The time the update was sent: latency counts the API server's write and watch delivery too.
                if r.is_ok() && record {
                    reports.lock().unwrap().entry(name).or_default().push((now, progress));
                }
                r.is_ok()
            });
            sent += 1;
        }
        while pending.len() > 256 {
            if let Some(false) = pending.next().await {
                late_sends += 1;
            }
        }
        while let Some(Some(ok)) = futures::FutureExt::now_or_never(pending.next()) {
            late_sends += (!ok) as u64;
        }
    }
    while let Some(ok) = pending.next().await {
        late_sends += (!ok) as u64;
    }
    // Let the last actions land (the stalls fire `stall_after` after their last report).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    let apiserver_cpu = apiserver_pid.map(cpu_seconds).zip(plane_cpu0.0).map(|(b, a)| b - a);
    let etcd_cpu = etcd_pid.map(cpu_seconds).zip(plane_cpu0.1).map(|(b, a)| b - a);
    let metrics1 = scrape(port).await;
    let rss = peak_rss_mib(pid);

    // Latencies: from the report that triggered the suspension (the last one before it was seen) to the
    // suspension as a watch sees it; for stalls, from the deadline (last lastUpdatedTime + `stall_after`).
    let seen = suspended_at.lock().unwrap().clone();
    let reports = reports.lock().unwrap().clone();
    let reports_seen = report_seen_at.lock().unwrap().clone();
    let (mut nan, mut plateau, mut stall) = (Vec::new(), Vec::new(), Vec::new());
    // The NaN and plateau latencies split at the moment the bench's watch saw the triggering report:
    // sent → seen is the API server's write and a watch delivery (the controller's watch gets the same
    // event); seen → suspended is the controller's part (its watch, evaluation, GET and apply) and one more
    // watch delivery. Triggers the watch saw only after the suspension are left out of the split.
    let (mut to_watch, mut after_watch, mut unsplit) = (Vec::new(), Vec::new(), 0usize);
    let mut missed = Vec::new();
    let mut wrong = 0;
    for i in 0..jobs {
        let name = format!("job-{i:05}");
        match (fate(i), seen.get(&name)) {
            (Fate::Healthy, Some(_)) => wrong += 1,
            (Fate::Healthy, None) => {}
            (f, None) => missed.push((name, f)),
            (Fate::Stall, Some(at)) => {
                if let Some(last) = last_stall_report.get(&name) {
                    let deadline = Timestamp::from_second(last.as_second() + stall_after(period)).unwrap();
                    stall.push(at.duration_since(deadline).as_secs_f64());
                }
            }
            (f, Some(at)) => {
                if let Some((trigger, progress)) =
                    reports.get(&name).and_then(|r| r.iter().filter(|(t, _)| t <= at).max_by_key(|(t, _)| *t))
                {
                    let latency = at.duration_since(*trigger).as_secs_f64();
                    if f == Fate::Nan {
                        nan.push(latency);
                    } else {
                        plateau.push(latency);
                    }
                    match reports_seen.get(&(name.clone(), *progress)) {
                        Some(watched) if watched <= at => {
                            to_watch.push(watched.duration_since(*trigger).as_secs_f64());
                            after_watch.push(at.duration_since(*watched).as_secs_f64());
                        }
                        _ => unsplit += 1,
                    }
                }
            }
        }
    }
    stall.sort_by(f64::total_cmp);
    nan.sort_by(f64::total_cmp);
    plateau.sort_by(f64::total_cmp);
    to_watch.sort_by(f64::total_cmp);
    after_watch.sort_by(f64::total_cmp);
    let delta = |name: &str| metric(&metrics1, name) - metric(&metrics0, name);
    let requests = delta("trainwarden_api_requests_total");
    let patches = delta("trainwarden_api_requests_total{operation=\"patch_trainjob\"}");
    let history_writes = delta("trainwarden_api_requests_total{operation=\"patch_history\"}");
    let verdict_writes = delta("trainwarden_api_requests_total{operation=\"patch_verdict\"}");
    let actions_done =
        delta("trainwarden_actions_total{action=\"suspend\",mode=\"Enforce\",result=\"done\"}");
    let status_writes = delta("trainwarden_status_writes_total{result=\"done\"}");
    println!(
        "load: {sent} status updates in {:.1}s = {:.0}/s ({late_sends} failed)",
        seconds as f64,
        sent as f64 / seconds as f64
    );
    println!(
        "update → suspend, NaN      ({:>3} jobs): p50 {:.3}s  p99 {:.3}s",
        nan.len(),
        percentile(&nan, 0.5),
        percentile(&nan, 0.99)
    );
    println!(
        "update → suspend, plateau  ({:>3} jobs): p50 {:.3}s  p99 {:.3}s",
        plateau.len(),
        percentile(&plateau, 0.5),
        percentile(&plateau, 0.99)
    );
    println!(
        "  split ({} of them): sent → watch sees the report p50 {:.3}s p99 {:.3}s; seen → seen suspended p50 {:.3}s p99 {:.3}s ({unsplit} not split)",
        to_watch.len(),
        percentile(&to_watch, 0.5),
        percentile(&to_watch, 0.99),
        percentile(&after_watch, 0.5),
        percentile(&after_watch, 0.99)
    );
    println!(
        "stall lateness after the deadline ({:>3} jobs): p50 {:.3}s  p99 {:.3}s  max {:.3}s",
        stall.len(),
        percentile(&stall, 0.5),
        percentile(&stall, 0.99),
        stall.last().copied().unwrap_or(f64::NAN)
    );
    // The controller's own view of its part (its histograms' buckets, so each figure is an upper bound within
    // 2×): how long watch events waited for the evaluation loop, actions for an executor slot, and its calls.
    let inside = |family: &str, selector: &str| {
        let q = |p| quantile_between(&metrics0, &metrics1, family, selector, p);
        format!(
            "mean {:.3}s p50 ≤ {:.3}s p99 ≤ {:.3}s",
            mean_between(&metrics0, &metrics1, family, selector),
            q(0.5),
            q(0.99)
        )
    };
    println!(
        "  inside the controller: watch event → evaluation loop {}; action queued → started {}; GET TrainJob {}; patch TrainJob {}",
        inside("trainwarden_input_lag_seconds", ""),
        inside("trainwarden_executor_queue_seconds", "work=\"act\""),
        inside("trainwarden_api_request_duration_seconds", "operation=\"get_trainjob\""),
        inside("trainwarden_api_request_duration_seconds", "operation=\"patch_trainjob\""),
    );
    println!(
        "  other executor work queued → started: history {}; verdict {}; event {}; any work waiting for a slot {}",
        inside("trainwarden_executor_queue_seconds", "work=\"history\""),
        inside("trainwarden_executor_queue_seconds", "work=\"verdict\""),
        inside("trainwarden_executor_queue_seconds", "work=\"event\""),
        inside("trainwarden_executor_slot_wait_seconds", ""),
    );
    println!(
        "  the controller's other API requests: create Event {}; patch history {}; patch verdict {}",
        inside("trainwarden_api_request_duration_seconds", "operation=\"create_event\""),
        inside("trainwarden_api_request_duration_seconds", "operation=\"patch_history\""),
        inside("trainwarden_api_request_duration_seconds", "operation=\"patch_verdict\""),
    );
    println!("missed: {missed:?}; healthy jobs suspended: {wrong}");
    println!("controller: CPU {:.2} cores ({:.1}s over {wall:.1}s), peak RSS {rss:.1} MiB", cpu / wall, cpu);
    if let (Some(a), Some(e)) = (apiserver_cpu, etcd_cpu) {
        println!(
            "kube-apiserver: CPU {:.2} cores = {:.2} ms per status update; etcd: {:.2} cores = {:.2} ms per update (the controller: {:.2} ms)",
            a / wall,
            1000.0 * a / sent.max(1) as f64,
            e / wall,
            1000.0 * e / sent.max(1) as f64,
            1000.0 * cpu / sent.max(1) as f64
        );
    }
    println!(
        "controller API requests (executor + status writer): {requests:.0} = {:.1}/s; trainjob patches per suspension: {:.2}",
        requests / wall,
        patches / actions_done.max(1.0)
    );
    println!(
        "bookkeeping writes on TrainJobs: {history_writes:.0} history checkpoints ({:.1}/s), {verdict_writes:.0} verdict annotations ({:.2} per suspension)",
        history_writes / wall,
        verdict_writes / actions_done.max(1.0)
    );
    println!(
        "status writes: {status_writes:.0} over {wall:.1}s for 3 policies = {:.2}/s per policy",
        status_writes / wall / 3.0
    );
    let _ = namespaces;
}
