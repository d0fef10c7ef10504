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

// --- the rules -------------------------------------------------------------------------------------------------

#[test]
fn rules_pass_promtool_check_and_their_unit_tests() {
    let (helm, promtool) = tools_or_skip!();
    let dir = work_dir("rules");
    let rendered = render(&helm, &dir);
    let rules_file = write_json(&dir, "rules.yaml", &json!({"groups": rendered.groups}));
    let checked = promtool_ok(&promtool, &[&rules_file], &["check", "rules"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let alerts = alert_rules(&rendered.groups);

    let verdict = |ns: &str, job: &str, v: &str| {
        (format!(r#"trainwarden:job_verdict{{namespace="{ns}", trainjob="{job}", verdict="{v}"}}"#), 1.0)
    };
    let silent = |ns: &str, job: &str, v: f64| {
        (format!(r#"trainwarden:job_silent_seconds{{namespace="{ns}", trainjob="{job}"}}"#), v)
    };
    let fleet_exprs = vec![
        expr_test(
            "trainwarden:job_verdict",
            "60m",
            &[
                verdict("team-a", "healthy-1", "healthy"),
                verdict("team-a", "pending-1", "pending"),
                verdict("team-a", "firing-1", "firing"),
                verdict("team-b", "silent-1", "healthy"),
                verdict("team-b", "suspended-1", "suspended"),
                verdict("team-b", "done-1", "finished"),
                verdict("team-c", "unsized", "healthy"),
            ],
        ),
        expr_test(
            "verdict:trainwarden_jobs:count",
            "60m",
            &owned(&[
                (r#"verdict:trainwarden_jobs:count{verdict="healthy"}"#, 3.0),
                (r#"verdict:trainwarden_jobs:count{verdict="pending"}"#, 1.0),
                (r#"verdict:trainwarden_jobs:count{verdict="firing"}"#, 1.0),
                (r#"verdict:trainwarden_jobs:count{verdict="suspended"}"#, 1.0),
                (r#"verdict:trainwarden_jobs:count{verdict="finished"}"#, 1.0),
            ]),
        ),
        expr_test(
            "trainwarden:job_silent_seconds",
            "60m",
            &[
                silent("team-a", "healthy-1", 0.0),
                silent("team-a", "pending-1", 0.0),
                silent("team-a", "firing-1", 0.0),
                silent("team-b", "silent-1", 2640.0),
                silent("team-b", "suspended-1", 3000.0),
                silent("team-b", "done-1", 3300.0),
                silent("team-c", "unsized", 0.0),
            ],
        ),
        expr_test(
            "namespace:trainwarden_gpus_running:sum",
            "60m",
            &owned(&[
                (r#"namespace:trainwarden_gpus_running:sum{namespace="team-a"}"#, 20.0),
                (r#"namespace:trainwarden_gpus_running:sum{namespace="team-b"}"#, 2.0),
            ]),
        ),
        expr_test(
            "namespace:trainwarden_gpus_stalled:sum",
            "60m",
            &owned(&[
                (r#"namespace:trainwarden_gpus_stalled:sum{namespace="team-a"}"#, 8.0),
                (r#"namespace:trainwarden_gpus_stalled:sum{namespace="team-b"}"#, 2.0),
            ]),
        ),
        // Before silent-1 had been silent for 15 minutes (at 31m: since 16m), only firing-1 stalls.
        expr_test(
            "namespace:trainwarden_gpus_stalled:sum",
            "30m",
            &owned(&[(r#"namespace:trainwarden_gpus_stalled:sum{namespace="team-a"}"#, 8.0)]),
        ),
        expr_test(
            "namespace_mode:trainwarden_gpu_hours_saved:increase1d",
            "60m",
            &owned(&[
                (
                    r#"namespace_mode:trainwarden_gpu_hours_saved:increase1d{namespace="team-a", mode="Enforce"}"#,
                    12.0,
                ),
                (
                    r#"namespace_mode:trainwarden_gpu_hours_saved:increase1d{namespace="team-b", mode="Audit"}"#,
                    9.0,
                ),
                (
                    r#"namespace_mode:trainwarden_gpu_hours_saved:increase1d{namespace="team-c", mode="Enforce"}"#,
                    3.0,
                ),
            ]),
        ),
        expr_test("trainwarden:leaders:sum", "60m", &owned(&[("trainwarden:leaders:sum", 1.0)])),
    ];
    let fleet_alerts = vec![
        alert_test(&alerts, "TrainwardenActionsFailing", "60m", &[(r#"action="suspend""#, 15.0)]),
        // Failing since 21m; `for: 10m`: not yet at 25m.
        alert_test(&alerts, "TrainwardenActionsFailing", "25m", &[]),
        alert_test(&alerts, "TrainwardenActionRetries", "60m", &[(r#"action="suspend""#, 30.0)]),
        // The standby's watch has failed since the start; patch_trainjob only since 51m (pending at 60m).
        alert_test(&alerts, "TrainwardenApiErrors", "60m", &[(r#"operation="watch_trainjobs""#, 10.0)]),
        alert_test(
            &alerts,
            "TrainwardenJobSilent",
            "60m",
            &[(r#"namespace="team-b", trainjob="silent-1""#, 2640.0)],
        ),
        // silent-1 is silent for more than 30 minutes from 46m; `for: 5m`.
        alert_test(&alerts, "TrainwardenJobSilent", "50m", &[]),
        // The standby's owed intents are not the leader's.
        alert_test(&alerts, "TrainwardenActionsOwed", "60m", &[]),
        alert_test(&alerts, "TrainwardenControllerDown", "60m", &[]),
        alert_test(&alerts, "TrainwardenNoLeader", "60m", &[]),
        alert_test(&alerts, "TrainwardenSeveralLeaders", "60m", &[]),
        alert_test(&alerts, "TrainwardenWorkDropped", "60m", &[]),
        alert_test(&alerts, "TrainwardenExecutorPanics", "60m", &[]),
    ];

    // The leader owes 2 intents from 6m on.
    let mut owed = Series::default();
    owed.controller(LEADER, "trainwarden_leader", "", "1+0x60")
        .controller(STANDBY, "trainwarden_leader", "", "0+0x60")
        .controller(LEADER, "trainwarden_actions_owed", "", "0+0x5 2+0x55");
    let owed_alerts = vec![
        alert_test(&alerts, "TrainwardenActionsOwed", "30m", &[]),
        alert_test(&alerts, "TrainwardenActionsOwed", "40m", &[("", 2.0)]),
    ];

    // The leader loses its Lease at 11m and nobody takes it.
    let mut leaderless = Series::default();
    leaderless.controller(LEADER, "trainwarden_leader", "", "1+0x10 0+0x50").controller(
        STANDBY,
        "trainwarden_leader",
        "",
        "0+0x60",
    );
    let leaderless_alerts = vec![
        alert_test(&alerts, "TrainwardenNoLeader", "14m", &[]),
        alert_test(&alerts, "TrainwardenNoLeader", "20m", &[("", 0.0)]),
        alert_test(&alerts, "TrainwardenControllerDown", "20m", &[]),
    ];

    // Both replicas claim the Lease; then both go away at 30m (their series go stale).
    let mut split = Series::default();
    split.controller(LEADER, "trainwarden_leader", "", "1+0x29 stale").controller(
        STANDBY,
        "trainwarden_leader",
        "",
        "1+0x29 stale",
    );
    let split_alerts = vec![
        alert_test(&alerts, "TrainwardenSeveralLeaders", "4m", &[]),
        alert_test(&alerts, "TrainwardenSeveralLeaders", "10m", &[("", 2.0)]),
        alert_test(&alerts, "TrainwardenControllerDown", "33m", &[]),
        alert_test(&alerts, "TrainwardenControllerDown", "40m", &[("", 1.0)]),
    ];

    // GPU metrics: the leader's query fails from 5m, the standby's from 20m; both read again from 45m.
    let mut gpu = Series::default();
    let at = r#"prometheus="http://prometheus:9090""#;
    gpu.controller(LEADER, "trainwarden_gpu_metrics_up", at, "1+0x4 0+0x40 1+0x15").controller(
        STANDBY,
        "trainwarden_gpu_metrics_up",
        at,
        "1+0x19 0+0x25 1+0x15",
    );
    let gpu_alerts = vec![
        // One replica still reads them: no alert.
        alert_test(&alerts, "TrainwardenGpuMetricsDown", "18m", &[]),
        // Both fail from 20m; `for: 10m`.
        alert_test(&alerts, "TrainwardenGpuMetricsDown", "29m", &[]),
        alert_test(&alerts, "TrainwardenGpuMetricsDown", "31m", &[("", 0.0)]),
        alert_test(&alerts, "TrainwardenGpuMetricsDown", "50m", &[]),
    ];

    let tests = vec![
        group(fleet(), fleet_alerts, fleet_exprs),
        group(gpu.0, gpu_alerts, vec![]),
        group(owed.0, owed_alerts, vec![]),
        group(leaderless.0, leaderless_alerts, vec![]),
        group(split.0, split_alerts, vec![]),
    ];
    let test = write_json(&dir, "rules.test.yaml", &test_file(&rules_file, tests));
    let out = promtool_ok(&promtool, &[&test], &["test", "rules"]);
    assert!(out.contains("SUCCESS"), "{out}");
}

// --- the dashboard ---------------------------------------------------------------------------------------------

/// What a dashboard query is: a panel's target, an annotation, a template variable.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Query {
    /// `panel title/refId`, `annotation name`, `variable name`.
    key: String,
    /// PromQL with the dashboard's variables substituted.
    expr: String,
}

/// Grafana's variables as the fixture is queried: two of the three teams, two jobs, an hour.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__range", "1h")
        .replace("$__interval", "1m")
        .replace("$namespace", "team-a|team-b")
        .replace("$trainjob", "firing-1")
}

fn dashboard_queries(dashboard: &Value) -> Vec<Query> {
    let mut out = Vec::new();
    fn panels<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            panels(&p["panels"], out);
        }
    }
    let mut all = Vec::new();
    panels(&dashboard["panels"], &mut all);
    for p in all {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr =
                t["expr"].as_str().unwrap_or_else(|| panic!("a target of {} without expr", p["title"]));
            let key = format!("{}/{}", p["title"].as_str().unwrap(), t["refId"].as_str().unwrap());
            out.push(Query { key, expr: substitute(expr) });
        }
    }
    for a in dashboard["annotations"]["list"].as_array().unwrap() {
        if let Some(expr) = a["expr"].as_str() {
            out.push(Query {
                key: format!("annotation {}", a["name"].as_str().unwrap()),
                expr: substitute(expr),
            });
        }
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if v["type"] != "query" {
            continue;
        }
        // label_values(SELECTOR, LABEL): what Grafana asks is the label's values on the selector's series.
        let q = v["query"]["query"].as_str().unwrap();
        let inner =
            q.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')).expect("label_values(...)");
        let (selector, label) = inner.rsplit_once(',').unwrap();
        out.push(Query {
            key: format!("variable {}", v["name"].as_str().unwrap()),
            expr: substitute(&format!("group by ({}) ({})", label.trim(), selector.trim())),
        });
    }
    let keys: BTreeSet<_> = out.iter().map(|q| &q.key).collect();
    assert_eq!(keys.len(), out.len(), "dashboard query keys are unique");
    out
}

const A_FIRING: &str = r#"namespace="team-a", trainjob="firing-1""#;
const MIN: f64 = 1.0 / 60.0;

/// What each dashboard query gives on [`fleet`] at 60m with [`substitute`]'s variables.
fn dashboard_expectations() -> BTreeMap<&'static str, Vec<(String, f64)>> {
    let one = |v: f64| vec![("{}".to_string(), v)];
    let l = |labels: &str, v: f64| (format!("{{{labels}}}"), v);
    let job = |extra: &str, v: f64| l(&format!("{A_FIRING}{extra}"), v);
    BTreeMap::from([
        // team-c's unsized job is outside $namespace; silent-1 runs without a rule.
        ("Jobs by verdict/A", one(2.0)),
        ("Jobs by verdict/B", one(1.0)),
        ("Jobs by verdict/C", one(1.0)),
        ("Jobs by verdict/D", one(1.0)),
        ("Jobs by verdict/E", one(1.0)),
        ("GPUs stalled or idle now/A", one(10.0)),
        ("GPUs stalled or idle now/B", one(22.0)),
        ("Saved in the time range/A", one(12.0)),
        ("Saved in the time range/B", one(120.0)),
        ("Saved in the time range/C", one(9.0)),
        ("GPU-hours saved per team/A", vec![l(r#"namespace="team-a""#, 12.0)]),
        ("GPU-hours saved per team/B", vec![l(r#"namespace="team-b""#, 9.0)]),
        (
            "Stalled or idle GPUs by team/A",
            vec![l(r#"namespace="team-a""#, 8.0), l(r#"namespace="team-b""#, 2.0)],
        ),
        (
            "Running jobs by silence/A",
            vec![
                l(r#"namespace="team-a", trainjob="healthy-1""#, 0.0),
                l(r#"namespace="team-a", trainjob="pending-1""#, 0.0),
                l(r#"namespace="team-a", trainjob="firing-1""#, 0.0),
                l(r#"namespace="team-b", trainjob="silent-1""#, 2640.0),
            ],
        ),
        (
            "Firing rules by policy/A",
            vec![
                l(&format!(r#"policy="{WEEKEND_SAFE}", rule="loss-plateau""#), 1.0),
                l(&format!(r#"policy="{FLEET_GUARD}", rule="stalled""#), 1.0),
            ],
        ),
        // Every replica counts firings; the leader's count.
        ("Rules that started firing/A", vec![l(r#"mode="Enforce""#, MIN)]),
        (
            "Actions by result/A",
            vec![
                l(r#"action="suspend", mode="Enforce", result="done""#, MIN),
                l(r#"action="suspend", mode="Enforce", result="failed""#, MIN),
            ],
        ),
        ("Retries and owed actions/A", vec![l(r#"action="suspend""#, MIN)]),
        // The standby's 3 are not the leader's.
        ("Retries and owed actions/B", one(0.0)),
        ("Errors/A", vec![l(r#"operation="patch_trainjob""#, MIN), l(r#"operation="watch_trainjobs""#, MIN)]),
        ("Errors/B", vec![l(r#"reason="notifier_refused""#, 0.0)]),
        ("Errors/C", one(0.0)),
        ("Leader and replicas/A", one(1.0)),
        ("Leader and replicas/B", one(2.0)),
        ("Tracked/A", one(7.0)),
        ("Tracked/B", one(2.0)),
        ("API requests and error ratio/A", vec![l(r#"operation="patch_trainjob""#, 2.0 * MIN)]),
        // Watch errors are not requests: 1 of 2 patch_trainjob calls failed.
        ("API requests and error ratio/B", one(0.5)),
        (
            "Evaluation latency/A",
            vec![
                l(&format!(r#"instance="{LEADER}""#), 0.00982),
                l(&format!(r#"instance="{STANDBY}""#), 0.00982),
            ],
        ),
        (
            "Evaluation latency/B",
            vec![l(&format!(r#"instance="{LEADER}""#), 0.001), l(&format!(r#"instance="{STANDBY}""#), 0.001)],
        ),
        // Linear within the bucket: 32 ms + 32 ms × 4.9/5; 1 ms × 9.9/10; 4 ms + 4 ms × 1.96/2.
        ("Executor queue wait/A", vec![l(r#"work="act""#, 0.06336)]),
        ("Executor queue wait/B", one(0.00099)),
        ("API request latency/A", vec![l(r#"operation="get_trainjob""#, 0.00792)]),
        ("API request latency/B", one(0.00099)),
        ("Progress/A", vec![job("", 60.0)]),
        ("Loss/A", vec![job(r#", metric="loss""#, 2.0), job(r#", metric="eval_loss""#, 2.5)]),
        (
            "Gradient norm and learning rate/A",
            vec![job(r#", metric="grad_norm""#, 1.0), job(r#", metric="learning_rate""#, 0.0002)],
        ),
        ("ETA and silence/A", vec![job("", 3600.0)]),
        ("ETA and silence/B", vec![job("", 0.0)]),
        (
            "Rule states/A",
            vec![
                l(&format!(r#"policy="{WEEKEND_SAFE}", rule="loss-plateau", state="firing""#), 1.0),
                l(&format!(r#"policy="{WEEKEND_SAFE}", rule="stalled", state="pending""#), 1.0),
            ],
        ),
        (
            "annotation Firing rules",
            vec![job(&format!(r#", policy="{WEEKEND_SAFE}", rule="loss-plateau""#), 1.0)],
        ),
        (
            "annotation Pending rules",
            vec![job(&format!(r#", policy="{WEEKEND_SAFE}", rule="stalled""#), 1.0)],
        ),
        (
            "variable namespace",
            vec![
                l(r#"namespace="team-a""#, 1.0),
                l(r#"namespace="team-b""#, 1.0),
                l(r#"namespace="team-c""#, 1.0),
            ],
        ),
        (
            "variable trainjob",
            ["healthy-1", "pending-1", "firing-1", "silent-1", "suspended-1", "done-1"]
                .into_iter()
                .map(|j| l(&format!(r#"trainjob="{j}""#), 1.0))
                .collect(),
        ),
    ])
}

#[test]
fn every_dashboard_query_passes_promtool_and_returns_what_it_should() {
    let (helm, promtool) = tools_or_skip!();
    let dir = work_dir("dashboard");
    let rendered = render(&helm, &dir);
    let queries = dashboard_queries(&rendered.dashboard);
    assert!(queries.len() >= 30, "{} queries: the dashboard lost panels?", queries.len());

    // (a) Each query is a valid expression: as recording rules, promtool checks them all.
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({"record": format!("dashboard:query_{i}"), "expr": q.expr}))
        .collect();
    let rules_file =
        write_json(&dir, "dashboard.rules.yaml", &json!({"groups": [{"name": "dashboard", "rules": rules}]}));
    let (ok, text) = run(Command::new(&promtool).args(["check", "rules"]).arg(&rules_file));
    assert!(ok, "promtool check rules of the dashboard's queries failed:\n{text}\nqueries:\n{queries:#?}");

    // (b) Each query gives its expected result on the fixture.
    let expected = dashboard_expectations();
    let keys: BTreeSet<&str> = queries.iter().map(|q| q.key.as_str()).collect();
    let known: BTreeSet<&str> = expected.keys().copied().collect();
    assert_eq!(
        keys.difference(&known).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "dashboard queries without an expectation in this test"
    );
    assert_eq!(known.difference(&keys).collect::<Vec<_>>(), Vec::<&&str>::new(), "expectations of no query");
    let tests: Vec<Value> = queries
        .iter()
        .map(|q| {
            let exp = &expected[q.key.as_str()];
            assert!(!exp.is_empty(), "{}: expect a result, not nothing", q.key);
            expr_test(&q.expr, "60m", exp)
        })
        .collect();
    let empty = write_json(&dir, "empty.rules.yaml", &json!({"groups": []}));
    let test =
        write_json(&dir, "dashboard.test.yaml", &test_file(&empty, vec![group(fleet(), vec![], tests)]));
    let (ok, out) = run(Command::new(&promtool).args(["test", "rules"]).arg(&test));
    assert!(ok && out.contains("SUCCESS"), "promtool test rules of the dashboard's queries failed:\n{out}");
}

// --- names against the controller's exposition --------------------------------------------------------------

/// A [`Metrics`] with a series in every family the chart's rules and dashboard read.
fn populated_metrics() -> Metrics {
    let metrics = Metrics::with_job_metrics(true);
    metrics.samples.inc();
    metrics.evaluations.inc();
    metrics.evaluation_seconds.observe(0.002);
    metrics.firings.get_or_create(&ModeLabels { mode: ModeLabel(Some(Mode::Enforce)) }).inc();
    metrics.action(
        ActionLabel::Executed(ExecutedAction::Suspend),
        ModeLabel(Some(Mode::Enforce)),
        ActionResult::Failed,
    );
    metrics.api_request(ApiOperation::PatchTrainjob);
    metrics.api_request_took(ApiOperation::GetTrainjob, std::time::Duration::from_millis(5));
    metrics.queued(WorkKind::Act, std::time::Duration::from_millis(40));
    metrics.slot_wait_seconds.observe(0.0005);
    metrics.input_lag_seconds.observe(0.0005);
    metrics.api_error(ApiOperation::WatchTrainjobs);
    metrics.dropped(DroppedWork::NotifierRefused);
    metrics.executor_panics.inc();
    metrics.jobs.set(1);
    metrics.policies.set(1);
    metrics.leader.set(1);
    metrics.actions_owed.set(1);
    metrics
        .action_retries
        .get_or_create(&ExecutedActionLabels { action: ActionLabel::Executed(ExecutedAction::Suspend) })
        .inc();
    let saved = SavingsLabels {
        policy: WEEKEND_SAFE.into(),
        namespace: "team-a".into(),
        mode: ModeLabel(Some(Mode::Enforce)),
    };
    metrics.saved(&saved, 8.0, Some(80.0));
    // GPU metrics on (--prometheus-url): without it the family has no series.
    metrics
        .gpu_metrics_up
        .get_or_create(&trainwarden_controller::metrics::PrometheusLabels {
            prometheus: "http://prometheus:9090".into(),
        })
        .set(0);
    let families = metrics.job.as_ref().expect("per-job families registered");
    let job = JobLabels { namespace: "team-a".into(), trainjob: "ft".into() };
    families.progress_percent.get_or_create(&job).set(45.0);
    families.eta_seconds.get_or_create(&job).set(3600.0);
    families.last_report_timestamp_seconds.get_or_create(&job).set(1.8e9);
    families.gpus.get_or_create(&job).set(8.0);
    families
        .phase
        .get_or_create(&JobPhaseLabels {
            namespace: job.namespace.clone(),
            trainjob: job.trainjob.clone(),
            phase: JobPhaseLabel::Running,
        })
        .set(1);
    for metric in JobMetricName::ALL {
        families
            .metric
            .get_or_create(&JobMetricLabels {
                namespace: job.namespace.clone(),
                trainjob: job.trainjob.clone(),
                metric,
            })
            .set(1.0);
    }
    families
        .rule_state
        .get_or_create(&RuleStateLabels {
            namespace: job.namespace.clone(),
            trainjob: job.trainjob.clone(),
            policy: WEEKEND_SAFE.into(),
            rule: "loss-plateau".into(),
            state: RuleStateLabel::Firing,
        })
        .set(1);
    metrics
}

/// Sample names of the exposition and the label names each carries.
fn exposition_labels(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_string()).or_default();
        if line[name_end..].starts_with('{') {
            let end = line.rfind('}').unwrap();
            for pair in split_matchers(&line[name_end + 1..end]) {
                labels.insert(pair.split_once('=').unwrap().0.trim().to_string());
            }
        }
    }
    out
}

/// Splits `a="x",b="y, z"` at the commas outside quotes.
fn split_matchers(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut escaped) = (Vec::new(), String::new(), false, false);
    for c in s.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

/// Labels a scrape adds to every series (ServiceMonitor target labels; `le` and `quantile` come with the
/// histogram's buckets).
const TARGET_LABELS: [&str; 7] = ["instance", "job", "namespace", "pod", "service", "endpoint", "container"];

#[derive(Debug, Default)]
struct Names {
    /// Metric selectors: name and the label names its matchers use.
    selectors: Vec<(String, Vec<String>)>,
    /// Labels of `by`, `without`, `on`, `ignoring`, `group_left`, `group_right` lists.
    grouping: Vec<String>,
    /// Labels `label_replace` writes.
    written: Vec<String>,
}

const KEYWORDS: [&str; 10] = ["and", "or", "unless", "bool", "offset", "inf", "nan", "atan2", "start", "end"];
const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const GROUPING: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names, label matchers and grouping labels of a PromQL expression: a small tokenizer that knows
/// selectors `name{l="v"}`, function calls `f(...)`, grouping lists, durations `[5m]` and strings.
fn names(expr: &str) -> Names {
    #[derive(Debug, PartialEq)]
    enum Tok {
        Ident(String),
        Str,
        Punct(char),
        Other,
    }
    let chars: Vec<char> = expr.chars().collect();
    let mut toks = Vec::new();
    let mut strings = Vec::new(); // the string literals, in token order
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            let mut j = i + 1;
            let mut s = String::new();
            while chars[j] != c {
                if chars[j] == '\\' && c != '`' {
                    j += 1;
                }
                s.push(chars[j]);
                j += 1;
            }
            strings.push(s);
            toks.push(Tok::Str);
            i = j + 1;
        } else if c == '[' {
            while chars[i] != ']' {
                i += 1;
            }
            i += 1;
            toks.push(Tok::Other);
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            toks.push(Tok::Other);
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            toks.push(Tok::Ident(chars[start..i].iter().collect()));
        } else {
            toks.push(Tok::Punct(c));
            i += 1;
        }
    }
    let mut out = Names::default();
    let mut string_at = 0; // index into `strings` of the next Tok::Str
    let mut k = 0;
    // `label_replace(` calls whose destination (their first string) is still to come, by paren depth.
    let mut depth = 0usize;
    let mut replace_depths: Vec<usize> = Vec::new();
    while k < toks.len() {
        match &toks[k] {
            Tok::Str => {
                if replace_depths.last() == Some(&depth) {
                    out.written.push(strings[string_at].clone());
                    replace_depths.pop();
                }
                string_at += 1;
                k += 1;
            }
            Tok::Punct('(') => {
                depth += 1;
                k += 1;
            }
            Tok::Punct(')') => {
                depth -= 1;
                k += 1;
            }
            Tok::Ident(id)
                if GROUPING.contains(&id.as_str()) && toks.get(k + 1) == Some(&Tok::Punct('(')) =>
            {
                k += 2;
                while toks[k] != Tok::Punct(')') {
                    if let Tok::Ident(l) = &toks[k] {
                        out.grouping.push(l.clone());
                    }
                    k += 1;
                }
                k += 1;
            }
            Tok::Ident(id) if toks.get(k + 1) == Some(&Tok::Punct('(')) => {
                if id == "label_replace" {
                    replace_depths.push(depth + 1);
                }
                k += 1; // a function or an aggregation
            }
            // `max by (...) (...)`, `sum without (...) (...)`: an aggregation, its grouping next.
            Tok::Ident(id)
                if AGGREGATIONS.contains(&id.as_str())
                    && matches!(toks.get(k + 1), Some(Tok::Ident(g)) if g == "by" || g == "without") =>
            {
                k += 1;
            }
            Tok::Ident(id) if KEYWORDS.contains(&id.as_str()) || GROUPING.contains(&id.as_str()) => k += 1,
            Tok::Ident(id) => {
                let mut labels = Vec::new();
                k += 1;
                if toks.get(k) == Some(&Tok::Punct('{')) {
                    k += 1;
                    while toks[k] != Tok::Punct('}') {
                        if let (Tok::Ident(l), Some(Tok::Punct('=' | '!'))) = (&toks[k], toks.get(k + 1)) {
                            labels.push(l.clone());
                        }
                        if toks[k] == Tok::Str {
                            string_at += 1;
                        }
                        k += 1;
                    }
                    k += 1;
                }
                out.selectors.push((id.clone(), labels));
            }
            _ => k += 1,
        }
    }
    out
}

#[test]
fn the_tokenizer_finds_names_labels_and_label_replace_targets() {
    let n = names(
        r#"label_replace(max by (namespace, trainjob) (trainwarden_rule_state{state="firing", rule=~"a,b"}) and on (namespace) trainwarden_job_phase{phase="running"} , "verdict", "x", "", "") + rate(trainwarden_actions_total[5m]) > 0.5"#,
    );
    assert_eq!(
        n.selectors,
        vec![
            ("trainwarden_rule_state".to_string(), vec!["state".to_string(), "rule".to_string()]),
            ("trainwarden_job_phase".to_string(), vec!["phase".to_string()]),
            ("trainwarden_actions_total".to_string(), vec![]),
        ]
    );
    assert_eq!(n.grouping, vec!["namespace", "trainjob", "namespace"]);
    assert_eq!(n.written, vec!["verdict"]);
}

#[test]
fn every_metric_and_label_the_rules_and_the_dashboard_use_is_in_the_controllers_exposition() {
    let (helm, _) = tools_or_skip!();
    let dir = work_dir("names");
    let rendered = render(&helm, &dir);
    let exposed = exposition_labels(&populated_metrics().encode());
    assert!(exposed.contains_key("trainwarden_gpu_hours_saved_total"), "{exposed:#?}");

    // Recording rules: what they record, with the labels their expressions can give.
    let mut recorded: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut exprs: Vec<(String, String)> = Vec::new();
    for group in rendered.groups.as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let expr = rule["expr"].as_str().unwrap().to_string();
            let name = rule["record"].as_str().or(rule["alert"].as_str()).unwrap().to_string();
            if rule["record"].is_string() {
                let n = names(&expr);
                let labels = recorded.entry(name.clone()).or_default();
                labels.extend(n.grouping.iter().cloned());
                labels.extend(n.written.iter().cloned());
            }
            exprs.push((format!("rule {name}"), expr));
        }
    }
    exprs.extend(
        dashboard_queries(&rendered.dashboard).into_iter().map(|q| (format!("dashboard {}", q.key), q.expr)),
    );

    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (what, expr) in &exprs {
        let n = names(expr);
        let mut available: BTreeSet<String> = TARGET_LABELS.iter().map(|l| (*l).to_string()).collect();
        available.extend(n.written.iter().cloned());
        for (metric, labels) in &n.selectors {
            let known = if metric.starts_with("trainwarden_") {
                exposed.get(metric)
            } else if metric.contains(':') {
                recorded.get(metric)
            } else {
                problems.push(format!("{what}: {metric} is not trainwarden's"));
                continue;
            };
            let Some(known) = known else {
                problems.push(format!("{what}: {metric} is not in the controller's exposition nor recorded"));
                continue;
            };
            used.insert(metric.clone());
            let mut own = known.clone();
            if metric.ends_with("_bucket") {
                own.insert("le".into());
            }
            for l in labels {
                if !own.contains(l) && !TARGET_LABELS.contains(&l.as_str()) {
                    problems.push(format!("{what}: {metric} has no label {l} (it has {own:?})"));
                }
            }
            available.extend(own);
        }
        for l in &n.grouping {
            if !available.contains(l) {
                problems.push(format!("{what}: groups by {l}, which none of its series has"));
            }
        }
    }
    assert_eq!(problems, Vec::<String>::new());
    // The dashboard and rules read the per-job families and the new savings counters.
    for metric in [
        "trainwarden_job_gpus",
        "trainwarden_job_phase",
        "trainwarden_rule_state",
        "trainwarden_job_metric",
        "trainwarden_gpu_hours_saved_total",
        "trainwarden_dollars_saved_total",
        "trainwarden_leader",
    ] {
        assert!(used.contains(metric), "nothing reads {metric}");
    }
}
