//! GPU rules end to end, with the GPUs' metrics read from a real Prometheus: the controller against the real
//! kube-apiserver + etcd, a real `prometheus` (built from the Go module proxy by tests/k8s/build-prometheus.sh)
//! scraping an exporter that serves what NVIDIA's dcgm-exporter serves for the test's pods, and the controller
//! querying that Prometheus (`--prometheus-url`). Queries, label joins and staleness are Prometheus' own.
//!
//! The exposition is dcgm-exporter's: the metric names, types and help texts of its `etc/default-counters.csv`
//! (`DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_POWER_USAGE`, `DCGM_FI_DEV_FB_USED`) and `etc/dcp-metrics-included.csv`
//! (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`), every series labelled as it labels them (`gpu`, `UUID`, `pci_bus_id`,
//! `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, and with the Kubernetes mapping on `container`,
//! `namespace`, `pod`). The pods are real Pod objects labelled as JobSet labels the pods of a TrainJob's JobSet
//! (`jobset.sigs.k8s.io/jobset-name`); on this tier no kubelet runs them, which the join does not need.

use trainwarden_testkit::setup;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use trainwarden_controller::{GpuMetricsConfig, LAST_ACTION_ANNOTATION};

use trainwarden_e2e::controller::*;

// Tests -----------------------------------------------------------------------------------------------------

/// Three jobs on GPUs that Prometheus scrapes: one hung (no step, every GPU at 100 %), one idle (every GPU at
/// 0 %), one training (steps advance, GPUs busy). The hung and the idle one are suspended, each by its own
/// rule with a reason that says which; the training one is left alone. Then Prometheus goes away: the
/// policy's GpuMetrics condition says so, the query failures are counted, and a progress rule still acts.
#[tokio::test]
async fn hung_and_idle_jobs_are_told_apart_by_their_gpus_in_prometheus() {
    let Some(prometheus_bin) = prometheus_binary() else { return };
    let ctx = setup!("gpu_rules");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rules = "    - {name: hung, uses: hang, with: {after: 6s, busyAbove: 80}, actions: [{suspend: {}}]}\n\
                 \x20   - {name: idle, uses: gpu_idle, with: {threshold: 10, duration: 6s}, actions: [{suspend: {}}]}\n\
                 \x20   - {name: nan, uses: non_finite, with: {metric: loss}, actions: [{suspend: {}}]}\n";
    apply_policy(c, ns, &policy("gpus", "Enforce", rules)).await;
    for job in ["hung", "idle", "training", "diverging"] {
        create_trainjob(c, ns, job, &[]).await;
    }
    // The pods JobSet made for each TrainJob, two GPUs each.
    let exporter = Exporter::start().await;
    for (job, util) in [("hung", 100.0), ("idle", 0.0), ("training", 97.0), ("diverging", 50.0)] {
        let pod = format!("{job}-node-0-0-x7k2p");
        create_pod(c, ns, &pod, job).await;
        exporter.set(ns, &pod, &[util, util]);
    }
    let prometheus = Prometheus::start(&prometheus_bin, ns, exporter.port);
    prometheus.wait_until_scraped(ns).await;

    let mut config = config_for(ns);
    config.gpu_metrics = Some(GpuMetricsConfig {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
        ..GpuMetricsConfig::new(prometheus.url())
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let controller = start_with_listener(c, config, Some(listener));
    wait_until_watching(c, ns, "gpus", 4).await;
    // Every job reported once; only "training" goes on reporting.
    for job in ["hung", "idle", "training", "diverging"] {
        report(c, ns, job, seconds_ago(0), "1.0", 10).await;
    }
    let trainer = {
        let (c, ns) = (c.clone(), ns.to_string());
        tokio::spawn(async move {
            for i in 0..3600i32 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let loss = format!("{:.3}", 1.0 - 0.0002 * f64::from(i));
                report(&c, &ns, "training", seconds_ago(0), &loss, 11 + i64::from(i)).await;
            }
        })
    };

    let hung = eventually("the hung job's suspension", Duration::from_secs(30), || async {
        let j = job(c, ns, "hung").await;
        suspended(&j).then_some(j)
    })
    .await;
    assert!(
        hung.annotations()[LAST_ACTION_ANNOTATION].contains("\"rule\":\"hung\""),
        "{:?}",
        hung.annotations()
    );
    let idle = eventually("the idle job's suspension", Duration::from_secs(30), || async {
        let j = job(c, ns, "idle").await;
        suspended(&j).then_some(j)
    })
    .await;
    assert!(
        idle.annotations()[LAST_ACTION_ANNOTATION].contains("\"rule\":\"idle\""),
        "{:?}",
        idle.annotations()
    );
    let e = events_once_there(c, ns, "hung", "Suspended", 1).await;
    assert!(
        e.iter()
            .any(|(r, note, _)| r == "Suspended" && note.contains("while every GPU stayed at or above 80%")),
        "{e:?}"
    );
    let e = events_once_there(c, ns, "idle", "Suspended", 1).await;
    assert!(e.iter().any(|(r, note, _)| r == "Suspended" && note.contains("every GPU below 10%")), "{e:?}");
    let status = eventually("the GpuMetrics condition", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "gpus").await;
        s.conditions.iter().any(|c| c.type_ == "GpuMetrics" && c.status == "True").then_some(s)
    })
    .await;
    let condition = status.conditions.iter().find(|c| c.type_ == "GpuMetrics").unwrap();
    assert_eq!(condition.reason, "Reading");
    assert!(condition.message.contains(&prometheus.url()), "{}", condition.message);
    // The training job, busy and progressing, kept running through all of it.
    assert!(!suspended(&job(c, ns, "training").await));

    // Prometheus goes away: GPU rules see nothing new, the condition says why, progress rules go on.
    let prometheus_url = prometheus.url();
    drop(prometheus);
    let status = eventually("GpuMetrics turning False", Duration::from_secs(20), || async {
        let s = policy_status(c, ns, "gpus").await;
        s.conditions.iter().any(|c| c.type_ == "GpuMetrics" && c.status == "False").then_some(s)
    })
    .await;
    let condition = status.conditions.iter().find(|c| c.type_ == "GpuMetrics").unwrap();
    assert_eq!(condition.reason, "QueryFailing", "{condition:?}");
    assert!(condition.message.contains("progress rules are not affected"), "{}", condition.message);
    report(c, ns, "diverging", seconds_ago(0), "nan", 12).await;
    eventually("the NaN suspension during the outage", Duration::from_secs(15), || async {
        suspended(&job(c, ns, "diverging").await).then_some(())
    })
    .await;
    let metrics = trainwarden_testkit::http::http_get(port, "/metrics").await.expect("/metrics");
    let failed = metric_value(&metrics, "trainwarden_gpu_queries_total{result=\"failed\"}");
    let ok = metric_value(&metrics, "trainwarden_gpu_queries_total{result=\"ok\"}");
    assert!(failed >= 1.0 && ok >= 1.0, "ok {ok}, failed {failed}");
    let up = format!("trainwarden_gpu_metrics_up{{prometheus=\"{prometheus_url}\"}}");
    assert_eq!(metric_value(&metrics, &up), 0.0, "{metrics}");
    assert!(metrics.contains(&up), "{metrics}");
    assert!(!suspended(&job(c, ns, "training").await), "no GPU reading is current: nothing fires on GPUs");

    // Each suspension happened once.
    for j in ["hung", "idle", "diverging"] {
        let e = events(c, ns, j).await;
        assert_eq!(count(&e, "Suspended"), 1, "{j}: {e:?}");
    }
    trainer.abort();
    controller.stop().await;
}

/// A controller that starts (a restart, a new leader) while a job's GPUs have been idle for longer than the
/// rule's duration acts at once, on the history Prometheus kept (one range query), not a whole duration later.
/// Without the backfill (`backfill: 0s`) the same job waits for a full duration of live readings.
#[tokio::test]
async fn a_starting_controller_judges_idle_gpus_on_the_history_prometheus_kept() {
    let Some(prometheus_bin) = prometheus_binary() else { return };
    let ctx = setup!("gpu_backfill");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rules = "    - {name: idle, uses: gpu_idle, with: {threshold: 10, duration: 15s}, actions: [{suspend: {}}]}\n";
    apply_policy(c, ns, &policy("gpus", "Enforce", rules)).await;
    let exporter = Exporter::start().await;
    for job in ["restarted", "without-backfill"] {
        create_trainjob(c, ns, job, &[("job", job)]).await;
        let pod = format!("{job}-node-0-0-q9d4s");
        create_pod(c, ns, &pod, job).await;
        exporter.set(ns, &pod, &[0.0, 0.0, 0.0, 0.0]);
    }
    let prometheus = Prometheus::start(&prometheus_bin, ns, exporter.port);
    prometheus.wait_until_scraped(ns).await;
    // The GPUs have been idle for 20 s when the controller starts.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let gpu = GpuMetricsConfig {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(2),
        backfill: Duration::from_secs(60),
        ..GpuMetricsConfig::new(prometheus.url())
    };
    // Two controllers, each judging one of the jobs (a TrainJob label selector): one reads the history
    // back, the other does not.
    let mut with = config_for(ns);
    with.gpu_metrics = Some(gpu.clone());
    let mut without = config_for(ns);
    without.identity = format!("test-{ns}-2");
    without.gpu_metrics = Some(GpuMetricsConfig { backfill: Duration::ZERO, ..gpu });
    let started = std::time::Instant::now();
    let controller = start(c, with_selector(with, "restarted"));
    let other = start(c, with_selector(without, "without-backfill"));
    eventually("the suspension on the backfilled history", Duration::from_secs(10), || async {
        suspended(&job(c, ns, "restarted").await).then_some(())
    })
    .await;
    let backfilled = started.elapsed();
    eventually("the suspension on live readings", Duration::from_secs(30), || async {
        suspended(&job(c, ns, "without-backfill").await).then_some(())
    })
    .await;
    let live = started.elapsed();
    eprintln!(
        "idle for 20 s before the start: suspended {backfilled:?} after it with the backfill, {live:?} without"
    );
    assert!(backfilled < Duration::from_secs(8), "acted {backfilled:?} after the start");
    // Readings are kept to the whole second, so "a whole duration" may come up to a second early.
    assert!(live >= Duration::from_secs(13), "without the history a whole duration must pass: {live:?}");
    controller.stop().await;
    other.stop().await;
    drop(prometheus);
}

/// A controller for one of the test's TrainJobs (by its `job` label).
fn with_selector(
    mut config: trainwarden_controller::ControllerConfig,
    job: &str,
) -> trainwarden_controller::ControllerConfig {
    config.trainjob_selector = Some(format!("job={job}"));
    config
}

// Fixtures --------------------------------------------------------------------------------------------------

use trainwarden_testkit::ci;

/// `TRAINWARDEN_PROMETHEUS` (tests/k8s/with-control-plane.sh exports it), or `None` outside CI.
fn prometheus_binary() -> Option<PathBuf> {
    let found = std::env::var_os("TRAINWARDEN_PROMETHEUS").map(PathBuf::from).filter(|p| p.is_file());
    match found {
        Some(p) => Some(p),
        None if ci() => panic!(
            "the GPU tests need prometheus (CI=true, so this fails): set TRAINWARDEN_PROMETHEUS (tests/k8s/with-control-plane.sh does, from tests/k8s/build-prometheus.sh)"
        ),
        None => {
            eprintln!(
                "SKIPPED: TRAINWARDEN_PROMETHEUS is not set (run through tests/k8s/with-control-plane.sh)"
            );
            None
        }
    }
}

/// A pod as JobSet creates it for a TrainJob (`jobset.sigs.k8s.io/jobset-name` = the TrainJob's name).
async fn create_pod(client: &Client, ns: &str, name: &str, trainjob: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": trainjob,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "batch.kubernetes.io/job-completion-index": "0",
            },
        },
        "spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"}]},
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

/// The GPUs assigned to one pod: its namespace, name and each GPU's utilization.
type PodGpus = (String, String, Vec<f64>);

/// One DCGM gauge: name, dcgm-exporter's help text, its value for a GPU at a utilization.
type Gauge = (&'static str, &'static str, fn(f64) -> f64);

/// What dcgm-exporter serves on :9400/metrics, for the GPUs of the pods it is told about.
struct Exporter {
    port: u16,
    gpus: Arc<Mutex<Vec<PodGpus>>>,
}

impl Exporter {
    async fn start() -> Exporter {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let gpus: Arc<Mutex<Vec<PodGpus>>> = Arc::default();
        let shared = gpus.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let body = exposition(&shared.lock().unwrap());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(body.as_bytes()).await;
                });
            }
        });
        Exporter { port, gpus }
    }

    /// The GPUs assigned to `pod` and their utilization.
    fn set(&self, ns: &str, pod: &str, utils: &[f64]) {
        let mut gpus = self.gpus.lock().unwrap();
        gpus.retain(|(n, p, _)| !(n == ns && p == pod));
        gpus.push((ns.to_string(), pod.to_string(), utils.to_vec()));
    }
}

/// dcgm-exporter's text: a HELP and TYPE line per metric (from its counters files), a series per GPU.
fn exposition(gpus: &[PodGpus]) -> String {
    let metrics: [Gauge; 4] =
        [
            ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |u| u),
            ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |u| 60.0 + 6.4 * u),
            ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", |u| {
                if u > 0.0 { 61_440.0 } else { 512.0 }
            }),
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", |u| u / 100.0),
        ];
    let mut out = String::new();
    for (name, help, value) in metrics {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} gauge\n"));
        let mut index = 0;
        for (ns, pod, utils) in gpus {
            for u in utils {
                out.push_str(&format!(
                    "{name}{{gpu=\"{index}\",UUID=\"GPU-3b4f{index:04}-7c1d-4e2a-9f10-5a6b7c8d9e0f\",pci_bus_id=\"00000000:{:02X}:00.0\",device=\"nvidia{index}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"gpu-node-1\",DCGM_FI_DRIVER_VERSION=\"580.105.08\",container=\"node\",namespace=\"{ns}\",pod=\"{pod}\"}} {}\n",
                    0x18 + index,
                    value(*u)
                ));
                index += 1;
            }
        }
    }
    out
}

/// A real Prometheus scraping the exporter every second, as the GPU Operator's ServiceMonitor does
/// (`honorLabels: true`: the exporter's `namespace`/`pod` labels are the GPUs' pods).
struct Prometheus {
    child: Child,
    port: u16,
    _dir: PathBuf,
}

impl Prometheus {
    /// A Prometheus of its own for the test namespace `ns` (its config and TSDB in their own directory).
    fn start(bin: &std::path::Path, ns: &str, exporter_port: u16) -> Prometheus {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("prometheus-{ns}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s}}\n\
             scrape_configs:\n  - job_name: dcgm-exporter\n    honor_labels: true\n    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let port = trainwarden_testkit::receivers::free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus { child, port, _dir: dir }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Until Prometheus answers a query with the exporter's series for the namespace.
    async fn wait_until_scraped(&self, ns: &str) {
        let path = format!("/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL%7Bnamespace%3D%22{ns}%22%7D");
        eventually("prometheus scraping the exporter", Duration::from_secs(60), || async {
            let body = trainwarden_testkit::http::http_get(self.port, &path).await?;
            body.contains(&format!("\"namespace\":\"{ns}\"")).then_some(())
        })
        .await;
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of one series in an exposition (0 when absent).
fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().split(' ').next()?.parse().ok()))
        .unwrap_or(0.0)
}
