//! The rules: `promtool check rules` and their unit tests on the fixture fleet.

use super::*;

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
