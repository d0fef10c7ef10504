//! The chart's monitoring (`monitoring.prometheusRule`, `monitoring.dashboard`), rendered by the real helm and
//! checked by the real promtool:
//!
//! - the PrometheusRule's groups pass `promtool check rules`, and `promtool test rules` on fixture series shows
//!   each alert firing or not and each recording rule's values;
//! - every PromQL expression of the Grafana dashboard (panel targets, annotations, template variables) passes
//!   `promtool check rules` and is evaluated on the same fixture series with its expected result, so a query that
//!   silently returns nothing fails;
//! - every metric and label the rules and queries name exists in the controller's real exposition
//!   ([`Metrics::encode`] with every family populated).
//!
//! helm: `TRAINWARDEN_HELM`, else the cache of `tests/k8s/build-helm.sh`. promtool: `TRAINWARDEN_PROMTOOL`, else
//! the cache of `tests/k8s/build-prometheus.sh` (`tests/k8s/with-control-plane.sh` exports both). Without them
//! these tests fail under `CI=true` and are skipped (saying why) elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use trainwarden_controller::messages::{ActionResult, ExecutedAction};
use trainwarden_controller::metrics::{
    ActionLabel, ApiOperation, DroppedWork, ExecutedActionLabels, JobLabels, JobMetricLabels, JobMetricName,
    JobPhaseLabel, JobPhaseLabels, Metrics, ModeLabel, ModeLabels, RuleStateLabel, RuleStateLabels,
    SavingsLabels, WorkKind,
};
use trainwarden_core::Mode;
use trainwarden_testkit::apiserver::repo_root;

// --- tools -----------------------------------------------------------------------------------------------------

use trainwarden_testkit::ci;

/// `env` if set, else `bin` in the cache dir `script --print-dir` names (no build: a cold build takes minutes).
fn locate(env: &str, script: &str, bin: &str) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(env).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{env}={} does not exist", path.display()))
        };
    }
    let script = repo_root().join(script);
    let out = Command::new("bash")
        .arg(&script)
        .arg("--print-dir")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let path = Path::new(&dir).join(bin);
    if out.status.success() && path.is_file() {
        Ok(path)
    } else {
        Err(format!("{env} is not set and {} is not built (run {})", path.display(), script.display()))
    }
}

/// helm and promtool, or `None` (after saying why) when they are missing outside CI.
fn tools() -> Option<(PathBuf, PathBuf)> {
    let found = locate("TRAINWARDEN_HELM", "tests/k8s/build-helm.sh", "bin/helm").and_then(|helm| {
        locate("TRAINWARDEN_PROMTOOL", "tests/k8s/build-prometheus.sh", "bin/promtool").map(|p| (helm, p))
    });
    match found {
        Ok(tools) => Some(tools),
        Err(reason) if ci() => {
            panic!("the monitoring tests need helm and promtool (CI=true, so this fails): {reason}")
        }
        Err(reason) => {
            eprintln!("SKIPPED: {reason}");
            None
        }
    }
}

macro_rules! tools_or_skip {
    () => {
        match tools() {
            Some(tools) => tools,
            None => return,
        }
    };
}

/// A fresh directory for one test's files.
fn work_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("monitoring").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// `promtool ARGS...` must succeed.
fn promtool_ok(promtool: &Path, args: &[&Path], sub: &[&str]) -> String {
    let (ok, text) = run(Command::new(promtool).args(sub).args(args));
    assert!(ok, "promtool {} {args:?} failed:\n{text}", sub.join(" "));
    text
}

/// Writes `value` as JSON (which is YAML) to `dir/name`.
fn write_json(dir: &Path, name: &str, value: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    path
}

// --- the rendered chart ----------------------------------------------------------------------------------------

struct Rendered {
    /// The PrometheusRule's `spec.groups`.
    groups: Value,
    /// The dashboard, parsed from the ConfigMap.
    dashboard: Value,
}

fn render(helm: &Path, dir: &Path) -> Rendered {
    let home = dir.join("helm-home");
    let chart = repo_root().join("charts/trainwarden");
    let (ok, text) = run(Command::new(helm)
        .args(["template", "tw", chart.to_str().unwrap(), "--namespace", "trainwarden-system"])
        .args([
            "--set=monitoring.prometheusRule.enabled=true",
            "--set=monitoring.prometheusRule.labels.release=prometheus",
            "--set=monitoring.dashboard.enabled=true",
            "--set=monitoring.dashboard.namespace=grafana",
        ])
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("KUBECONFIG"));
    assert!(ok, "helm template failed:\n{text}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("helm renders YAML");
    let of_kind = |kind: &str| -> Vec<&Value> { docs.iter().filter(|d| d["kind"] == kind).collect() };

    let rules = of_kind("PrometheusRule");
    assert_eq!(rules.len(), 1, "one PrometheusRule");
    let rule = rules[0];
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], "trainwarden-system");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    // The chart ships its rule file as it is.
    let file = std::fs::read_to_string(chart.join("rules/trainwarden.rules.yaml")).unwrap();
    let file: Value = serde_saphyr::from_str(&file).unwrap();
    assert_eq!(
        rule["spec"]["groups"], file["groups"],
        "the PrometheusRule's groups are rules/trainwarden.rules.yaml's"
    );

    let maps: Vec<&Value> = of_kind("ConfigMap")
        .into_iter()
        .filter(|d| d["metadata"]["name"] == "tw-trainwarden-dashboard")
        .collect();
    assert_eq!(maps.len(), 1, "one dashboard ConfigMap");
    let map = maps[0];
    assert_eq!(map["metadata"]["namespace"], "grafana");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1", "the grafana chart's sidecar label");
    let json = map["data"]["trainwarden-fleet.json"].as_str().expect("the dashboard JSON");
    let dashboard: Value = serde_json::from_str(json).expect("the dashboard is JSON");
    let file = std::fs::read_to_string(chart.join("dashboards/trainwarden-fleet.json")).unwrap();
    assert_eq!(dashboard, serde_json::from_str::<Value>(&file).unwrap());
    Rendered { groups: rule["spec"]["groups"].clone(), dashboard }
}

// --- fixture series --------------------------------------------------------------------------------------------

const LEADER: &str = "10.0.0.1:8080";
const STANDBY: &str = "10.0.0.2:8080";

/// Input series as promtool reads them.
#[derive(Default)]
struct Series(Vec<Value>);

impl Series {
    /// `metric{labels}` scraped from `instance`, with the target labels a ServiceMonitor gives.
    fn on(&mut self, instance: &str, metric: &str, labels: &str, values: &str) -> &mut Self {
        let sep = if labels.is_empty() { "" } else { ", " };
        let series = format!(
            r#"{metric}{{{labels}{sep}instance="{instance}", job="tw-trainwarden", pod="tw-trainwarden-{}", service="tw-trainwarden"}}"#,
            if instance == LEADER { "a" } else { "b" }
        );
        self.0.push(json!({"series": series, "values": values}));
        self
    }

    /// The same series from both replicas (every replica evaluates and exports it).
    fn both(&mut self, metric: &str, labels: &str, values: &str) -> &mut Self {
        self.on(LEADER, metric, labels, values).on(STANDBY, metric, labels, values)
    }

    /// Controller-level series carry the target's `namespace` (the per-job ones their own).
    fn controller(&mut self, instance: &str, metric: &str, labels: &str, values: &str) -> &mut Self {
        let sep = if labels.is_empty() { "" } else { ", " };
        self.on(instance, metric, &format!(r#"{labels}{sep}namespace="trainwarden-system""#), values)
    }

    /// A histogram's cumulative buckets on the controller `instance`: `(le, values)` pairs, `labels` besides
    /// `le`.
    fn buckets(
        &mut self,
        instance: &str,
        histogram: &str,
        labels: &str,
        buckets: &[(&str, &str)],
    ) -> &mut Self {
        let sep = if labels.is_empty() { "" } else { ", " };
        for (le, values) in buckets {
            self.controller(
                instance,
                &format!("{histogram}_bucket"),
                &format!(r#"{labels}{sep}le="{le}""#),
                values,
            );
        }
        self
    }
}

const WEEKEND_SAFE: &str = "ProgressPolicy/team-a/weekend-safe";
const FLEET_GUARD: &str = "ClusterProgressPolicy/fleet-guard";

/// Seven judged TrainJobs, two replicas, an hour at one sample a minute (evaluated at 60m, time() = 3600):
///
/// | job | phase | GPUs | rules | last report |
/// |---|---|---|---|---|
/// | team-a/healthy-1 | running | 8 | — | every minute |
/// | team-a/pending-1 | running | 4 | loss-plateau pending | every minute |
/// | team-a/firing-1 | running | 8 | loss-plateau firing, stalled pending | every minute |
/// | team-b/silent-1 | running | 2 | — | at 16m (2640 s ago) |
/// | team-b/suspended-1 | suspended | 8 | stalled firing | at 10m |
/// | team-b/done-1 | complete | 1 | — | at 5m |
/// | team-c/unsized | running | — | — | every minute |
///
/// The leader booked 12 GPU-hours (120 $) saved in team-a, 9 that Audit would save in team-b and 3 saved in
/// team-c; suspends are done and fail once a minute each, retried once a minute; patch_trainjob requests 2 a
/// minute, failing since 51m once a minute; the standby's TrainJob watch fails once a minute; the standby (not
/// the leader) holds 3 owed intents.
fn fleet() -> Vec<Value> {
    let mut s = Series::default();
    let job = |ns: &str, name: &str| format!(r#"namespace="{ns}", trainjob="{name}""#);
    for (ns, name, phase, gpus, last) in [
        ("team-a", "healthy-1", "running", Some(8), "0+60x60"),
        ("team-a", "pending-1", "running", Some(4), "0+60x60"),
        ("team-a", "firing-1", "running", Some(8), "0+60x60"),
        ("team-b", "silent-1", "running", Some(2), "0+60x16 960+0x44"),
        ("team-b", "suspended-1", "suspended", Some(8), "0+60x10 600+0x50"),
        ("team-b", "done-1", "complete", Some(1), "0+60x5 300+0x55"),
        ("team-c", "unsized", "running", None, "0+60x60"),
    ] {
        let j = job(ns, name);
        s.both("trainwarden_job_phase", &format!(r#"{j}, phase="{phase}""#), "1+0x60");
        if let Some(g) = gpus {
            s.both("trainwarden_job_gpus", &j, &format!("{g}+0x60"));
        }
        s.both("trainwarden_job_last_report_timestamp_seconds", &j, last);
    }
    let rule = |ns: &str, name: &str, policy: &str, rule: &str, state: &str| {
        format!(r#"{}, policy="{policy}", rule="{rule}", state="{state}""#, job(ns, name))
    };
    s.both(
        "trainwarden_rule_state",
        &rule("team-a", "pending-1", WEEKEND_SAFE, "loss-plateau", "pending"),
        "1+0x60",
    )
    .both(
        "trainwarden_rule_state",
        &rule("team-a", "firing-1", WEEKEND_SAFE, "loss-plateau", "firing"),
        "1+0x60",
    )
    .both("trainwarden_rule_state", &rule("team-a", "firing-1", WEEKEND_SAFE, "stalled", "pending"), "1+0x60")
    .both(
        "trainwarden_rule_state",
        &rule("team-b", "suspended-1", FLEET_GUARD, "stalled", "firing"),
        "1+0x60",
    );
    for (name, progress) in [("firing-1", "0+1x60"), ("healthy-1", "0+0.5x60")] {
        let j = job("team-a", name);
        s.both("trainwarden_job_progress_percent", &j, progress)
            .both("trainwarden_job_eta_seconds", &j, "7200-60x60")
            .both("trainwarden_job_metric", &format!(r#"{j}, metric="loss""#), "4-0.5x4 2+0x56")
            .both("trainwarden_job_metric", &format!(r#"{j}, metric="eval_loss""#), "2.5+0x60")
            .both("trainwarden_job_metric", &format!(r#"{j}, metric="grad_norm""#), "1+0x60")
            .both("trainwarden_job_metric", &format!(r#"{j}, metric="learning_rate""#), "0.0002+0x60");
    }
    // Savings: the leader books them; every replica has the series from zero.
    for (policy, ns, mode, leader) in [
        (WEEKEND_SAFE, "team-a", "Enforce", "0+0x30 12+0x30"),
        (FLEET_GUARD, "team-b", "Audit", "0+0x10 5+0x20 9+0x30"),
        ("ClusterProgressPolicy/fleet-guard", "team-c", "Enforce", "0+0x20 3+0x40"),
    ] {
        let labels = format!(r#"policy="{policy}", namespace="{ns}", mode="{mode}""#);
        s.on(LEADER, "trainwarden_gpu_hours_saved_total", &labels, leader).on(
            STANDBY,
            "trainwarden_gpu_hours_saved_total",
            &labels,
            "0+0x60",
        );
    }
    let labels = format!(r#"policy="{WEEKEND_SAFE}", namespace="team-a", mode="Enforce""#);
    s.on(LEADER, "trainwarden_dollars_saved_total", &labels, "0+0x30 120+0x30").on(
        STANDBY,
        "trainwarden_dollars_saved_total",
        &labels,
        "0+0x60",
    );
    // The controller.
    s.controller(LEADER, "trainwarden_leader", "", "1+0x60")
        .controller(STANDBY, "trainwarden_leader", "", "0+0x60")
        .controller(LEADER, "trainwarden_actions_owed", "", "0+0x60")
        .controller(STANDBY, "trainwarden_actions_owed", "", "3+0x60");
    for instance in [LEADER, STANDBY] {
        s.controller(instance, "trainwarden_jobs", "", "7+0x60")
            .controller(instance, "trainwarden_policies", "", "2+0x60")
            .controller(instance, "trainwarden_firings_total", r#"mode="Enforce""#, "0+1x60")
            .controller(instance, "trainwarden_evaluation_seconds_bucket", r#"le="0.001""#, "0+10x60")
            .controller(instance, "trainwarden_evaluation_seconds_bucket", r#"le="0.01""#, "0+20x60")
            .controller(instance, "trainwarden_evaluation_seconds_bucket", r#"le="+Inf""#, "0+20x60");
    }
    s.controller(
        LEADER,
        "trainwarden_actions_total",
        r#"action="suspend", mode="Enforce", result="done""#,
        "0+1x60",
    )
    .controller(
        LEADER,
        "trainwarden_actions_total",
        r#"action="suspend", mode="Enforce", result="failed""#,
        "0+0x20 1+1x40",
    )
    .controller(LEADER, "trainwarden_action_retries_total", r#"action="suspend""#, "0+0x20 0+1x40")
    .controller(LEADER, "trainwarden_api_requests_total", r#"operation="patch_trainjob""#, "0+2x60")
    .controller(LEADER, "trainwarden_api_errors_total", r#"operation="patch_trainjob""#, "0+0x50 1+1x10")
    .controller(STANDBY, "trainwarden_api_errors_total", r#"operation="watch_trainjobs""#, "0+1x60")
    .controller(LEADER, "trainwarden_work_dropped_total", r#"reason="notifier_refused""#, "0+0x60")
    .controller(LEADER, "trainwarden_executor_panics_total", "", "0+0x60");
    // The executor's latencies: actions wait 32-64 ms for half of them, a slot is free within 1 ms, a GET
    // takes 4-8 ms for half of them, a watch event waits under 1 ms.
    let within_1ms = [("0.001", "0+10x60"), ("+Inf", "0+10x60")];
    s.buckets(
        LEADER,
        "trainwarden_executor_queue_seconds",
        r#"work="act""#,
        &[("0.032", "0+5x60"), ("0.064", "0+10x60"), ("+Inf", "0+10x60")],
    )
    .buckets(LEADER, "trainwarden_executor_slot_wait_seconds", "", &within_1ms)
    .buckets(LEADER, "trainwarden_input_lag_seconds", "", &within_1ms)
    .buckets(
        LEADER,
        "trainwarden_api_request_duration_seconds",
        r#"operation="get_trainjob""#,
        &[("0.004", "0+2x60"), ("0.008", "0+4x60"), ("+Inf", "0+4x60")],
    );
    s.0
}

// --- promtool test files -------------------------------------------------------------------------------------

/// An expected sample: labels as PromQL writes them (`{}` for none), and its value.
type Sample = (&'static str, f64);

fn expr_test(expr: &str, at: &str, samples: &[(String, f64)]) -> Value {
    let exp: Vec<Value> = samples.iter().map(|(l, v)| json!({"labels": l, "value": v})).collect();
    json!({"expr": expr, "eval_time": at, "exp_samples": exp})
}

fn owned(samples: &[Sample]) -> Vec<(String, f64)> {
    samples.iter().map(|(l, v)| ((*l).to_string(), *v)).collect()
}

/// The alerting rules of the rendered groups, by name: (labels, annotations).
fn alert_rules(groups: &Value) -> BTreeMap<String, (Value, Value)> {
    let mut out = BTreeMap::new();
    for group in groups.as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            if let Some(name) = rule["alert"].as_str() {
                out.insert(name.to_string(), (rule["labels"].clone(), rule["annotations"].clone()));
            }
        }
    }
    out
}

/// Prometheus' `humanize` for 0 and values of at least 1 (`%.4g` with k, M, G... prefixes).
fn humanize(v: f64) -> String {
    assert!(v == 0.0 || v >= 1.0, "humanize({v}): the test's copy covers 0 and values >= 1 only");
    let mut v = v;
    let mut prefix = "";
    for p in ["k", "M", "G", "T", "P", "E", "Z", "Y"] {
        if v.abs() < 1000.0 {
            break;
        }
        prefix = p;
        v /= 1000.0;
    }
    // %.4g of a value in [1, 1000): four significant digits, trailing zeros dropped.
    let digits = if v == 0.0 { 3 } else { 3 - v.abs().log10().floor() as usize };
    let mut text = format!("{v:.digits$}");
    if text.contains('.') {
        text = text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{text}{prefix}")
}

/// Prometheus' `humanizeDuration` for whole seconds of at least 1.
fn humanize_duration(v: f64) -> String {
    assert!(v >= 1.0 && v.fract() == 0.0, "humanizeDuration({v}): the test's copy covers whole seconds >= 1");
    let s = v as i64;
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m {s}s"),
        _ => format!("{d}d {h}h {m}m {s}s"),
    }
}

/// The rule's annotation templates expanded as Prometheus does for `labels` and `value`: `{{ $labels.x }}`,
/// `{{ $value }}` and `{{ $value | humanize }}` / `humanizeDuration`. Anything else fails the test (extend
/// this, or keep the annotations simple).
fn expand(template: &str, labels: &BTreeMap<&str, &str>, value: f64) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("}}").expect("a closed template action") + start;
        let action = rest[start + 2..end].trim();
        let text = if let Some(name) = action.strip_prefix("$labels.") {
            (*labels.get(name).unwrap_or_else(|| panic!("{template}: no label {name} on the alert")))
                .to_string()
        } else {
            match action {
                "$value" => format!("{value}"),
                "$value | humanize" => humanize(value),
                "$value | humanizeDuration" => humanize_duration(value),
                other => panic!("{template}: the test does not expand {{{{ {other} }}}}"),
            }
        };
        out.push_str(&text);
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// `alertname` at `at` fires exactly with these (labels, value), annotations expanded from the rule.
fn alert_test(
    rules: &BTreeMap<String, (Value, Value)>,
    alertname: &str,
    at: &str,
    firing: &[(&str, f64)],
) -> Value {
    let (rule_labels, annotations) = rules.get(alertname).unwrap_or_else(|| panic!("no alert {alertname}"));
    let exp: Vec<Value> = firing
        .iter()
        .map(|(labels, value)| {
            let mut all: BTreeMap<&str, &str> = BTreeMap::new();
            for pair in labels.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap();
                all.insert(k, v.trim_matches('"'));
            }
            let series = all.clone();
            for (k, v) in rule_labels.as_object().unwrap() {
                all.insert(k, v.as_str().unwrap());
            }
            let annotations: serde_json::Map<String, Value> = annotations
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(expand(v.as_str().unwrap(), &series, *value))))
                .collect();
            json!({"exp_labels": all, "exp_annotations": annotations})
        })
        .collect();
    json!({"alertname": alertname, "eval_time": at, "exp_alerts": exp})
}

fn test_file(rules: &Path, tests: Vec<Value>) -> Value {
    json!({
        "rule_files": [rules.file_name().unwrap().to_str().unwrap()],
        "evaluation_interval": "1m",
        "fuzzy_compare": true,
        "tests": tests,
    })
}

fn group(series: Vec<Value>, alerts: Vec<Value>, exprs: Vec<Value>) -> Value {
    json!({"interval": "1m", "input_series": series, "alert_rule_test": alerts, "promql_expr_test": exprs})
}

// The tests, by subject (after the macros above, which they use).
mod dashboard;
mod exposition;
mod rules;
