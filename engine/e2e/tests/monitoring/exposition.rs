//! Names against the controller's exposition: every metric and label the rules and the dashboard use is
//! one the controller exports.

use super::dashboard::dashboard_queries;
use super::*;

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
