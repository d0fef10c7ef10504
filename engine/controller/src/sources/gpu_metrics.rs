//! The GPU source: the GPUs' own metrics, read from Prometheus, joined to TrainJobs through their pods.
//!
//! NVIDIA's DCGM exporter publishes one series per GPU and metric, labelled with the `namespace` and `pod`
//! the GPU is assigned to (through the kubelet's pod-resources API). A Trainer v2 TrainJob runs as a JobSet
//! of the same name (Trainer's jobset plugin names it after the TrainJob), and JobSet labels every pod it
//! creates `jobset.sigs.k8s.io/jobset-name=<name>`. So:
//!
//! 1. a metadata-only reflector keeps the pods carrying that label (their names, namespaces and the label;
//!    managedFields dropped), re-listed by kube's watcher with deletions found;
//! 2. every `interval`, **one** instant query asks for the four gauges of every GPU at once
//!    ([`QUERY_METRICS`]), keeping only the labels the join needs; `exported_namespace`/`exported_pod` are preferred where Prometheus renamed the
//!    exporter's own labels (a scrape without `honor_labels`);
//! 3. readings are grouped by the TrainJob their pod belongs to, one [`GpuSample`] per job, GPUs named
//!    `pod/gpu`, and sent to the evaluation loop as one [`Input::GpuReadings`].
//!
//! A failed query (timeout, connection refused, HTTP or PromQL error) is counted and logged, reported to
//! the loop as [`Input::GpuMetrics`] (the `GpuMetrics` condition of every policy with GPU rules), and tried
//! again after a capped exponential backoff. Nothing else waits for this task: progress rules go on, and
//! GPU rules only see no new readings (after 5 minutes they stop firing, since no reading is current).
//! Prometheus' own staleness handling decides what an instant query returns: a target that stopped being
//! scraped drops out at once (staleness markers), a missing sample after the lookback delta (5 min).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde::Deserialize;
use tokio::sync::mpsc;
use tracing::{info, warn};
use trainwarden_core::{GpuReading, GpuSample, JobKey, MAX_GPUS_PER_JOB, Timestamp, error_chain};

use crate::messages::{Input, SourceHealth};
use crate::metrics::{GpuQueryLabels, GpuQueryResult, Metrics};
use crate::runtime::config::GpuMetricsConfig;

/// The pod label JobSet sets to the JobSet's name, which Trainer v2 sets to the TrainJob's.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";

/// The DCGM exporter's gauges read, and which reading field each fills.
pub const QUERY_METRICS: [(&str, Field); 4] = [
    ("DCGM_FI_DEV_GPU_UTIL", Field::Util),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", Field::EngineActive),
    ("DCGM_FI_DEV_POWER_USAGE", Field::Power),
    ("DCGM_FI_DEV_FB_USED", Field::FbUsed),
];

/// A reading field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `util`, percent.
    Util,
    /// `engineActive`, 0–1.
    EngineActive,
    /// `power`, W.
    Power,
    /// `fbUsed`, MiB.
    FbUsed,
}

/// The longest wait between two attempts while queries fail.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// One series' value at an instant: its labels and the value as Prometheus wrote it.
type Value<'a> = (&'a HashMap<String, String>, &'a str);

/// The labels the answer keeps. Prometheus drops the others (`max by`), which makes the answer about a
/// third of what the exporter's labels (PCI bus, model, host, driver, instance) would, and folds the
/// copies an HA pair of Prometheus scrapers or two scrape jobs would return. `UUID` keeps the GPU's
/// identity across nodes: without it the free GPUs (no pod) with the same index on two nodes folded into
/// one series, and `trainwarden_gpu_series_unmatched` undercounted them.
const KEPT_LABELS: &str = "__name__, namespace, pod, exported_namespace, exported_pod, gpu, UUID, GPU_I_ID";

/// The PromQL of the poll: every GPU's four gauges, in the controller's namespace only when it watches one.
pub fn query(namespace: Option<&str>) -> String {
    let names: Vec<&str> = QUERY_METRICS.iter().map(|(n, _)| *n).collect();
    selecting(&names.join("|"), namespace)
}

/// `max by (KEPT_LABELS)` of the named gauges, of one namespace (either label may carry the pod's, see
/// `pod_of`) or of all.
fn selecting(names: &str, namespace: Option<&str>) -> String {
    let selector = match namespace {
        Some(ns) => format!(
            "{{__name__=~\"{names}\",namespace=\"{ns}\"}} or {{__name__=~\"{names}\",exported_namespace=\"{ns}\"}}"
        ),
        None => format!("{{__name__=~\"{names}\"}}"),
    };
    format!("max by ({KEPT_LABELS}) ({selector})")
}

/// Prometheus' answer to an instant query.
#[derive(Debug, Deserialize)]
pub struct QueryResponse {
    status: String,
    #[serde(default)]
    data: Option<QueryData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct QueryData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Series>,
}

/// One series of an answer: a vector's one `value` or a matrix's `values`.
#[derive(Debug, Deserialize)]
struct Series {
    metric: HashMap<String, String>,
    /// `[unix seconds, "value"]` (instant queries).
    #[serde(default)]
    value: Option<(f64, String)>,
    /// The same, one per step (range queries).
    #[serde(default)]
    values: Vec<(f64, String)>,
}

/// What one poll found.
#[derive(Debug, PartialEq)]
pub struct Readings {
    /// One sample per TrainJob, GPUs ordered by id.
    pub jobs: Vec<(JobKey, GpuSample)>,
    /// GPU series whose pod is not a TrainJob's (another workload, or no pod at all).
    pub unmatched: usize,
}

/// The pod of a series: the `exported_*` pair when there is one (Prometheus renames the exporter's
/// `namespace`/`pod` when the scrape target has its own and `honor_labels` is off), else the plain pair;
/// never one of each.
fn pod_of(labels: &HashMap<String, String>) -> Option<(&str, &str)> {
    let pair = |ns: &str, pod: &str| {
        let get = |k: &str| labels.get(k).map(String::as_str).filter(|v| !v.is_empty());
        Some((get(ns)?, get(pod)?))
    };
    pair("exported_namespace", "exported_pod").or_else(|| pair("namespace", "pod"))
}

/// Groups an answer's series by TrainJob: `trainjob_of(namespace, pod)` names the TrainJob a pod belongs
/// to. A value outside its unit's range (or not a number) is dropped, as DCGM reports blanks for fields a
/// GPU does not support.
pub fn readings(
    response: QueryResponse,
    at: Timestamp,
    trainjob_of: impl Fn(&str, &str) -> Option<String>,
) -> Result<Readings, String> {
    let data = answer_data(response, "vector")?;
    let series: Vec<Value<'_>> =
        data.result.iter().filter_map(|s| Some((&s.metric, s.value.as_ref()?.1.as_str()))).collect();
    Ok(group(&series, at, &trainjob_of))
}

/// A range query's answer, step by step in time order: what the poll would have read at each step.
pub fn readings_over_time(
    response: QueryResponse,
    trainjob_of: impl Fn(&str, &str) -> Option<String>,
) -> Result<Vec<Readings>, String> {
    let data = answer_data(response, "matrix")?;
    let mut steps: BTreeMap<i64, Vec<Value<'_>>> = BTreeMap::new();
    for s in &data.result {
        for (t, v) in &s.values {
            steps.entry((t * 1000.0).round() as i64).or_default().push((&s.metric, v.as_str()));
        }
    }
    Ok(steps
        .into_iter()
        .filter_map(|(ms, series)| Some(group(&series, Timestamp::from_millisecond(ms).ok()?, &trainjob_of)))
        .collect())
}

/// The data of a success answer of the expected type, or what Prometheus said.
fn answer_data(response: QueryResponse, expected: &str) -> Result<QueryData, String> {
    if response.status != "success" {
        return Err(format!(
            "{}: {}",
            response.error_type.as_deref().unwrap_or("error"),
            response.error.as_deref().unwrap_or("no message")
        ));
    }
    let data = response.data.ok_or("a success answer without data")?;
    if data.result_type != expected {
        return Err(format!("expected a {expected} answer, got {}", data.result_type));
    }
    Ok(data)
}

/// Series values at one instant, grouped by TrainJob and GPU.
fn group(
    series: &[Value<'_>],
    at: Timestamp,
    trainjob_of: &impl Fn(&str, &str) -> Option<String>,
) -> Readings {
    let mut jobs: BTreeMap<JobKey, BTreeMap<String, GpuReading>> = BTreeMap::new();
    let mut unmatched = 0;
    for (labels, value) in series {
        let Some(field) =
            labels.get("__name__").and_then(|n| QUERY_METRICS.iter().find(|(m, _)| m == n)).map(|(_, f)| *f)
        else {
            continue;
        };
        let Some((namespace, pod)) = pod_of(labels) else {
            unmatched += 1;
            continue;
        };
        let Some(job) = trainjob_of(namespace, pod) else {
            unmatched += 1;
            continue;
        };
        let Ok(value) = value.parse::<f64>() else { continue };
        let max = match field {
            Field::Util => 100.0,
            Field::EngineActive => 1.0,
            Field::Power | Field::FbUsed => f64::INFINITY,
        };
        if !(value.is_finite() && (0.0..=max).contains(&value)) {
            continue;
        }
        let Some(gpu) =
            ["gpu", "UUID", "device"].iter().find_map(|k| labels.get(*k).filter(|v| !v.is_empty()))
        else {
            // Without a GPU label, two GPUs of a pod could not be told apart (one would overwrite the other).
            unmatched += 1;
            continue;
        };
        // A MIG instance is its own device: `GPU_I_ID` names it within its GPU.
        let id = match labels.get("GPU_I_ID").filter(|v| !v.is_empty()) {
            Some(instance) => format!("{pod}/{gpu}/mig{instance}"),
            None => format!("{pod}/{gpu}"),
        };
        let devices = jobs.entry(JobKey::new(namespace, job)).or_default();
        if devices.len() >= MAX_GPUS_PER_JOB && !devices.contains_key(&id) {
            continue;
        }
        let reading = devices.entry(id.clone()).or_insert_with(|| GpuReading {
            id,
            util: None,
            engine_active: None,
            power: None,
            fb_used: None,
        });
        match field {
            Field::Util => reading.util = Some(value),
            Field::EngineActive => reading.engine_active = Some(value),
            Field::Power => reading.power = Some(value),
            Field::FbUsed => reading.fb_used = Some(value),
        }
    }
    Readings {
        jobs: jobs
            .into_iter()
            .map(|(job, devices)| (job, GpuSample { at, gpus: devices.into_values().collect() }))
            .collect(),
        unmatched,
    }
}

/// Prometheus' HTTP API, as the poll uses it.
struct Prometheus {
    http: reqwest::Client,
    /// The base URL, without a trailing `/`.
    base: String,
    /// `<base>/api/v1/query`, as messages name it.
    url: String,
    token_file: Option<std::path::PathBuf>,
}

impl Prometheus {
    fn new(config: &GpuMetricsConfig) -> Result<Self, String> {
        trainwarden_notify::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .user_agent(concat!("trainwarden/", env!("CARGO_PKG_VERSION")));
        for pem in &config.ca_pems {
            let cert =
                reqwest::Certificate::from_pem(pem).map_err(|e| format!("Prometheus CA certificate: {e}"))?;
            builder = builder.add_root_certificate(cert);
        }
        let http = builder.build().map_err(|e| format!("HTTP client: {e}"))?;
        let base = config.prometheus_url.trim_end_matches('/').to_string();
        let url = format!("{base}/api/v1/query");
        Ok(Prometheus { http, base, url, token_file: config.bearer_token_file.clone() })
    }

    async fn query(&self, promql: &str, at: Timestamp) -> Result<QueryResponse, String> {
        self.post(&self.url, &[("query", promql), ("time", &unix(at))]).await
    }

    /// `/api/v1/query_range` from `start` to `end` every `step`.
    async fn query_range(
        &self,
        promql: &str,
        start: Timestamp,
        end: Timestamp,
        step: Duration,
    ) -> Result<QueryResponse, String> {
        let url = format!("{}/api/v1/query_range", self.base);
        let step = format!("{:.3}", step.as_secs_f64());
        self.post(&url, &[("query", promql), ("start", &unix(start)), ("end", &unix(end)), ("step", &step)])
            .await
    }

    async fn post(&self, url: &str, form: &[(&str, &str)]) -> Result<QueryResponse, String> {
        let mut request = self.http.post(url).form(form);
        if let Some(file) = &self.token_file {
            let token = tokio::fs::read_to_string(file)
                .await
                .map_err(|e| format!("reading the bearer token {}: {e}", file.display()))?;
            request = request.bearer_auth(token.trim());
        }
        // reqwest's message names the URL already.
        let response = request.send().await.map_err(|e| error_chain(&e))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("{}: reading the answer: {}", self.url, error_chain(&e)))?;
        // Prometheus answers PromQL errors with 400/422 and a JSON error body; anything else is HTTP's.
        match serde_json::from_slice::<QueryResponse>(&body) {
            Ok(answer) => Ok(answer),
            Err(_) if !status.is_success() => Err(format!(
                "{url}: HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
            )),
            Err(e) => Err(format!("{url}: not a Prometheus answer: {e}")),
        }
    }
}

/// Unix seconds with milliseconds, as Prometheus' API takes times.
fn unix(at: Timestamp) -> String {
    format!("{:.3}", at.as_millisecond() as f64 / 1000.0)
}

/// Polls Prometheus until the loop's channel closes; returns the task's name.
pub async fn run(
    client: Client,
    config: GpuMetricsConfig,
    namespace: Option<String>,
    inputs: mpsc::Sender<Input>,
    mut ready: tokio::sync::watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> &'static str {
    const NAME: &str = "GPU metrics poll";
    let prometheus = match Prometheus::new(&config) {
        Ok(p) => p,
        Err(message) => {
            warn!(%message, "GPU metrics cannot be read");
            let _ = inputs.send(Input::GpuMetrics(SourceHealth { healthy: false, message })).await;
            // Not a reason to stop the controller: progress rules go on without GPU readings.
            std::future::pending::<()>().await;
            return NAME;
        }
    };
    let pods = pod_store(client, namespace.as_deref());
    // The first poll joins nothing until the pods are listed.
    if tokio::time::timeout(POD_LIST_WAIT, pods.wait_until_ready()).await.is_err() {
        warn!("the pods of TrainJobs are not listed after {POD_LIST_WAIT:?}; reading GPU metrics anyway");
    }
    // Readings of jobs the loop does not know yet are dropped: wait until the TrainJobs are listed.
    if ready.wait_for(|listed| *listed).await.is_err() {
        return NAME;
    }
    let promql = query(namespace.as_deref());
    let up_labels = crate::metrics::PrometheusLabels { prometheus: prometheus.base.clone() };
    info!(url = %prometheus.url, interval = ?config.interval, "reading GPU metrics from Prometheus");
    if !config.backfill.is_zero() {
        match backfill(&prometheus, &config, namespace.as_deref(), &pods).await {
            Ok(steps) => {
                let (n, jobs) = (steps.len(), steps.iter().map(|r| r.jobs.len()).max().unwrap_or(0));
                // One message: every step is recorded before any job is judged, so no rule fires on the
                // first part of the history before the rest (a job idle an hour ago and busy now).
                let history = steps.into_iter().map(|r| r.jobs).filter(|j| !j.is_empty()).collect();
                if inputs.send(Input::GpuHistory(history)).await.is_err() {
                    return NAME;
                }
                info!(steps = n, jobs, window = ?config.backfill, "GPU history read back from Prometheus");
            }
            // Not fatal: the rules then wait for a whole window of live readings.
            Err(e) => warn!(error = %e, "reading the GPU history back from Prometheus failed"),
        }
    }
    let mut failures: u32 = 0;
    let mut last_health: Option<SourceHealth> = None;
    loop {
        let at = Timestamp::now();
        let started = Instant::now();
        let outcome = match prometheus.query(&promql, at).await {
            Ok(answer) => readings(answer, at, |ns, pod| trainjob_of(&pods, ns, pod))
                .map_err(|e| format!("{}: {e}", prometheus.url)),
            Err(e) => Err(e),
        };
        metrics.gpu_query_seconds.observe(started.elapsed().as_secs_f64());
        let (health, wait) = match outcome {
            Ok(found) => {
                failures = 0;
                metrics.gpu_queries.get_or_create(&GpuQueryLabels { result: GpuQueryResult::Ok }).inc();
                metrics.gpu_metrics_up.get_or_create(&up_labels).set(1);
                metrics.gpu_jobs.set(found.jobs.len() as i64);
                metrics.gpu_series_unmatched.set(found.unmatched as i64);
                let message = format!(
                    "reading the GPUs' DCGM metrics from {} every {}",
                    prometheus.url,
                    // The flags' own notation (`30s`, `1m30s`).
                    trainwarden_core::PolicyDuration::from_millis(
                        u64::try_from(config.interval.as_millis()).unwrap_or(u64::MAX)
                    )
                );
                if !found.jobs.is_empty() && inputs.send(Input::GpuReadings(found.jobs)).await.is_err() {
                    return NAME;
                }
                (SourceHealth { healthy: true, message }, config.interval)
            }
            Err(message) => {
                failures = failures.saturating_add(1);
                metrics.gpu_queries.get_or_create(&GpuQueryLabels { result: GpuQueryResult::Failed }).inc();
                metrics.gpu_metrics_up.get_or_create(&up_labels).set(0);
                let wait = backoff(config.interval, failures);
                warn!(error = %message, failures, retry_in = ?wait, "GPU metrics query failed");
                (
                    SourceHealth {
                        healthy: false,
                        message: format!(
                            "the GPU metrics query fails (GPU rules judge no new reading; progress rules are not affected): {message}"
                        ),
                    },
                    wait,
                )
            }
        };
        // Sent when it changes (the messages carry no counts, so a steady state sends nothing).
        if last_health.as_ref() != Some(&health) {
            if inputs.send(Input::GpuMetrics(health.clone())).await.is_err() {
                return NAME;
            }
            last_health = Some(health);
        }
        tokio::time::sleep(wait).await;
    }
}

/// How long the poll waits for the pod list before its first query.
const POD_LIST_WAIT: Duration = Duration::from_secs(60);

/// The coarsest backfill step: readings further apart than half the staleness (5 min) might not join.
pub const MAX_STEP: Duration = Duration::from_secs(150);

/// Steps a backfill reads at most per series: the step is the interval, or coarser for a long window, so
/// a fleet's backfill stays one bounded answer (10,000 GPUs × 2 gauges × 120 steps).
pub const BACKFILL_STEPS: u32 = 120;

/// The GPUs' utilization over the last `config.backfill`, as the poll would have read it: a controller that
/// (re)starts judges `gpu_idle` and `hang` on the history Prometheus kept, not from nothing. Only the two
/// utilization gauges are read (the rules' windows judge them; power and memory are read live).
async fn backfill(
    prometheus: &Prometheus,
    config: &GpuMetricsConfig,
    namespace: Option<&str>,
    pods: &Store<PartialObjectMeta<Pod>>,
) -> Result<Vec<Readings>, String> {
    let end = Timestamp::now();
    let start = end
        .checked_sub(jiff::SignedDuration::try_from(config.backfill).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    // Readings further apart than the staleness would not join into runs: a window too long for that at
    // BACKFILL_STEPS steps is read for its most recent part (the CLI refuses such windows anyway).
    let step = config.interval.max(config.backfill / BACKFILL_STEPS).min(MAX_STEP);
    let start = start.max(
        end.checked_sub(jiff::SignedDuration::try_from(step * BACKFILL_STEPS).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?,
    );
    let promql = utilization_query(namespace);
    let answer = prometheus.query_range(&promql, start, end, step).await?;
    readings_over_time(answer, |ns, pod| trainjob_of(pods, ns, pod))
        .map_err(|e| format!("{}: {e}", prometheus.url))
}

/// [`query`] for the two utilization gauges only.
pub fn utilization_query(namespace: Option<&str>) -> String {
    selecting("DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE", namespace)
}

/// The wait before the next attempt after `failures` failed ones in a row: the interval, doubled per
/// failure from the second, at most 5 minutes (or the interval, if longer).
pub fn backoff(interval: Duration, failures: u32) -> Duration {
    if failures <= 1 {
        return interval;
    }
    let doubled = interval.saturating_mul(1u32 << (failures - 1).min(16));
    doubled.min(MAX_BACKOFF.max(interval))
}

/// The TrainJob a pod belongs to, by its JobSet label.
fn trainjob_of(pods: &Store<PartialObjectMeta<Pod>>, namespace: &str, pod: &str) -> Option<String> {
    let key = reflector::ObjectRef::<PartialObjectMeta<Pod>>::new_with(pod, ()).within(namespace);
    pods.get(&key).and_then(|p| p.labels().get(JOBSET_NAME_LABEL).cloned())
}

/// A store of the pods JobSets made, kept by a metadata watch in its own task.
fn pod_store(client: Client, namespace: Option<&str>) -> Store<PartialObjectMeta<Pod>> {
    // An Api of PartialObjectMeta lists and watches metadata only.
    let api: Api<PartialObjectMeta<Pod>> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default().labels(JOBSET_NAME_LABEL))
        .default_backoff()
        .modify(|pod| {
            pod.managed_fields_mut().clear();
            pod.annotations_mut().clear();
        })
        .reflect(writer)
        .applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(e) = event {
                warn!(error = %e, "watching the pods of TrainJobs (for their GPU metrics)");
            }
        }
    });
    reader
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Timestamp {
        "2026-11-27T23:00:00Z".parse().unwrap()
    }

    /// One series of an answer: metric name, labels, value.
    type Series<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);

    fn answer(series: &[Series<'_>]) -> QueryResponse {
        let result: Vec<serde_json::Value> = series
            .iter()
            .map(|(name, labels, value)| {
                let mut metric: serde_json::Map<String, serde_json::Value> =
                    labels.iter().map(|(k, v)| ((*k).to_string(), serde_json::json!(v))).collect();
                metric.insert("__name__".into(), serde_json::json!(name));
                serde_json::json!({"metric": metric, "value": [1_795_820_400.0, value]})
            })
            .collect();
        serde_json::from_value(
            serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}}),
        )
        .unwrap()
    }

    fn jobset(ns: &str, pod: &str) -> Option<String> {
        (ns == "team-a" && pod.starts_with("ft-node-")).then(|| "ft".to_string())
    }

    #[test]
    fn series_are_grouped_by_trainjob_and_gpu() {
        let pod0 = [("namespace", "team-a"), ("pod", "ft-node-0-0-abcde"), ("gpu", "0"), ("UUID", "GPU-1")];
        let pod0b = [("namespace", "team-a"), ("pod", "ft-node-0-0-abcde"), ("gpu", "1"), ("UUID", "GPU-2")];
        let other = [("namespace", "team-b"), ("pod", "notebook-0"), ("gpu", "0")];
        let free = [("gpu", "3"), ("namespace", ""), ("pod", "")];
        let r = readings(
            answer(&[
                ("DCGM_FI_DEV_GPU_UTIL", &pod0, "97"),
                ("DCGM_FI_DEV_POWER_USAGE", &pod0, "301.5"),
                ("DCGM_FI_DEV_GPU_UTIL", &pod0b, "3"),
                ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &pod0b, "0.02"),
                ("DCGM_FI_DEV_FB_USED", &pod0b, "40211"),
                ("DCGM_FI_DEV_GPU_UTIL", &other, "50"),
                ("DCGM_FI_DEV_GPU_UTIL", &free, "0"),
            ]),
            at(),
            jobset,
        )
        .unwrap();
        assert_eq!(r.unmatched, 2);
        assert_eq!(r.jobs.len(), 1);
        let (job, sample) = &r.jobs[0];
        assert_eq!(job, &JobKey::new("team-a", "ft"));
        assert_eq!(sample.at, at());
        let ids: Vec<&str> = sample.gpus.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, ["ft-node-0-0-abcde/0", "ft-node-0-0-abcde/1"]);
        assert_eq!((sample.gpus[0].util, sample.gpus[0].power), (Some(97.0), Some(301.5)));
        assert_eq!((sample.gpus[1].engine_active, sample.gpus[1].fb_used), (Some(0.02), Some(40211.0)));
    }

    #[test]
    fn exported_labels_win_and_bad_values_are_dropped() {
        let renamed = [
            ("namespace", "gpu-operator"),
            ("pod", "nvidia-dcgm-exporter-x"),
            ("exported_namespace", "team-a"),
            ("exported_pod", "ft-node-0-1-zzz"),
            ("gpu", "0"),
        ];
        let r = readings(
            answer(&[
                ("DCGM_FI_DEV_GPU_UTIL", &renamed, "NaN"),
                ("DCGM_FI_DEV_POWER_USAGE", &renamed, "88"),
                ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", &renamed, "1.5"),
            ]),
            at(),
            jobset,
        )
        .unwrap();
        let g = &r.jobs[0].1.gpus[0];
        assert_eq!(g.id, "ft-node-0-1-zzz/0");
        assert_eq!((g.util, g.engine_active, g.power), (None, None, Some(88.0)));
    }

    #[test]
    fn a_range_answer_becomes_one_reading_per_step_in_time_order() {
        let answer: QueryResponse = serde_json::from_value(serde_json::json!({"status": "success", "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "namespace": "team-a", "pod": "ft-node-0-0-a", "gpu": "0"},
                 "values": [[1795820400, "0"], [1795820430, "1"], [1795820460, "2"]]},
                {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "namespace": "team-a", "pod": "ft-node-0-0-a", "gpu": "1"},
                 "values": [[1795820430, "5"]]}
            ]}}))
        .unwrap();
        let steps = readings_over_time(answer, jobset).unwrap();
        let at: Vec<i64> = steps.iter().map(|r| r.jobs[0].1.at.as_second()).collect();
        assert_eq!(at, [1_795_820_400, 1_795_820_430, 1_795_820_460]);
        assert_eq!(steps[1].jobs[0].1.gpus.len(), 2);
        assert_eq!(steps[2].jobs[0].1.gpus[0].util, Some(2.0));
    }

    #[test]
    fn a_pod_is_one_label_pair_and_a_gpu_needs_a_name() {
        // exported_namespace alone is not paired with the exporter's own pod.
        let half =
            [("namespace", "team-a"), ("pod", "ft-node-0-0-a"), ("exported_namespace", "x"), ("gpu", "0")];
        let mig = [("namespace", "team-a"), ("pod", "ft-node-0-0-a"), ("gpu", "1"), ("GPU_I_ID", "3")];
        let nameless = [("namespace", "team-a"), ("pod", "ft-node-0-0-a")];
        let r = readings(
            answer(&[
                ("DCGM_FI_DEV_GPU_UTIL", &half, "10"),
                ("DCGM_FI_DEV_GPU_UTIL", &mig, "20"),
                ("DCGM_FI_DEV_GPU_UTIL", &nameless, "0"),
            ]),
            at(),
            jobset,
        )
        .unwrap();
        let ids: Vec<&str> = r.jobs[0].1.gpus.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, ["ft-node-0-0-a/0", "ft-node-0-0-a/1/mig3"]);
        assert_eq!(r.unmatched, 1, "a series without gpu, UUID or device is not guessed at");
    }

    #[test]
    fn error_answers_say_what_prometheus_said() {
        let error: QueryResponse = serde_json::from_value(serde_json::json!(
            {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}
        ))
        .unwrap();
        assert_eq!(readings(error, at(), jobset).unwrap_err(), "bad_data: parse error at char 3");
        let matrix: QueryResponse = serde_json::from_value(serde_json::json!(
            {"status": "success", "data": {"resultType": "matrix", "result": []}}
        ))
        .unwrap();
        assert_eq!(readings(matrix, at(), jobset).unwrap_err(), "expected a vector answer, got matrix");
    }

    #[test]
    fn the_query_asks_for_the_four_gauges_once() {
        assert_eq!(
            query(None),
            r#"max by (__name__, namespace, pod, exported_namespace, exported_pod, gpu, UUID, GPU_I_ID) ({__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_POWER_USAGE|DCGM_FI_DEV_FB_USED"})"#
        );
        assert!(query(Some("team-a")).contains(r#"exported_namespace="team-a""#));
    }

    #[test]
    fn backoff_doubles_to_a_cap() {
        let i = Duration::from_secs(30);
        assert_eq!(backoff(i, 1), i);
        assert_eq!(backoff(i, 2), Duration::from_secs(60));
        assert_eq!(backoff(i, 4), Duration::from_secs(240));
        assert_eq!(backoff(i, 5), Duration::from_secs(300));
        assert_eq!(backoff(i, 40), Duration::from_secs(300));
        assert_eq!(backoff(Duration::from_secs(600), 3), Duration::from_secs(600));
    }
}
