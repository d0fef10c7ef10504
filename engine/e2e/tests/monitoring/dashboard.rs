//! The dashboard: every query passes promtool and returns what it should on the fixture fleet.

use super::*;

/// What a dashboard query is: a panel's target, an annotation, a template variable.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Query {
    /// `panel title/refId`, `annotation name`, `variable name`.
    pub(super) key: String,
    /// PromQL with the dashboard's variables substituted.
    pub(super) expr: String,
}

/// Grafana's variables as the fixture is queried: two of the three teams, two jobs, an hour.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__range", "1h")
        .replace("$__interval", "1m")
        .replace("$namespace", "team-a|team-b")
        .replace("$trainjob", "firing-1")
}

pub(super) fn dashboard_queries(dashboard: &Value) -> Vec<Query> {
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
