//! Running the controller: an invalid script, a restart, namespaces, two replicas, an immutable trainer,
//! health and metrics, per-job gauges, the recorder.

use super::*;

/// A policy with a Rhai syntax error is Ready=False with line:column; the other policies keep working.
#[tokio::test]
async fn a_rhai_syntax_error_marks_its_policy_not_ready_and_others_keep_working() {
    let ctx = setup!("controller_rhai_error");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(
        c,
        ns,
        &policy(
            "broken",
            "Enforce",
            "    - name: bad\n      when: |\n        metric(\"loss\") >\n      actions: [{suspend: {}}]\n",
        ),
    )
    .await;
    apply_policy(c, ns, &policy("nan", "Enforce", NAN_RULE)).await;
    create_trainjob(c, ns, "j", &[]).await;
    let controller = start(c, config_for(ns));
    let broken = eventually("the broken policy's status", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "broken").await;
        s.conditions.iter().find(|c| c.type_ == "Ready").cloned()
    })
    .await;
    assert_eq!((broken.status.as_str(), broken.reason.as_str()), ("False", "InvalidPolicy"));
    assert!(broken.message.contains("spec.rules[0].when"), "{}", broken.message);
    assert!(broken.message.contains("line 2:1: Script is incomplete"), "{}", broken.message);
    report(c, ns, "j", seconds_ago(1), "nan", 10).await;
    eventually("the NaN suspension", Duration::from_secs(10), || async {
        suspended(&job(c, ns, "j").await).then_some(())
    })
    .await;
    eventually("the working policy Ready", Duration::from_secs(10), || async {
        let ok = policy_status(c, ns, "nan").await;
        ok.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True").then_some(())
    })
    .await;
    controller.stop().await;
}

/// Killing the controller while a rule is pending and restarting it fires at the original deadline, not
/// later, and never twice.
#[tokio::test]
async fn a_restart_keeps_the_pending_deadline_and_never_acts_twice() {
    let ctx = setup!("controller_restart");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(
        c,
        ns,
        &policy(
            "high",
            "Enforce",
            "    - {name: high-loss, when: 'metric(\"loss\") > 5.0', for: 10s, actions: [{suspend: {}}, {event: {reason: HighLoss}}]}\n",
        ),
    )
    .await;
    create_trainjob(c, ns, "j", &[]).await;
    let first = start(c, config_for(ns));
    report(c, ns, "j", seconds_ago(0), "9.5", 10).await;
    let pending = eventually("the pending state in status", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "high").await;
        s.rule_states
            .iter()
            .find(|m| m.rule == "high-loss" && m.state == trainwarden_core::RuleState::Pending)
            .cloned()
    })
    .await;
    let since = pending.since.expect("pending since");
    // `for: 10s` leaves a loaded machine ample time for the kill, 1 s down and the second start-up (listing
    // policies, restoring memories, listing TrainJobs) before the deadline.
    let deadline = since + jiff::SignedDuration::from_secs(10);
    first.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!suspended(&job(c, ns, "j").await), "acted before the deadline");

    let second = start(c, config_for(ns));
    let j = eventually("the suspension after the restart", Duration::from_secs(20), || async {
        let j = job(c, ns, "j").await;
        suspended(&j).then_some(j)
    })
    .await;
    let acted = action_time(&j).expect("last-action time");
    let lateness = acted.duration_since(deadline).as_secs_f64();
    eprintln!("pending since {since}, deadline {deadline}, fired at {acted} ({lateness:.3}s late)");
    assert!((0.0..=1.0).contains(&lateness), "fired {lateness:.3}s after the original deadline");
    // Both actions done (the Event action runs after the suspension), restart again: the rule is remembered
    // as firing, nothing is repeated.
    eventually("the HighLoss Event", Duration::from_secs(10), || async {
        (count(&events(c, ns, "j").await, "HighLoss") == 1).then_some(())
    })
    .await;
    eventually("the firing state in status", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "high").await;
        s.rule_states
            .iter()
            .any(|m| m.rule == "high-loss" && m.state == trainwarden_core::RuleState::Firing)
            .then_some(())
    })
    .await;
    second.kill();
    let third = start(c, config_for(ns));
    report(c, ns, "j", seconds_ago(0), "9.7", 12).await;
    wait_until_evaluated(c, ns, "high", "j", 12).await;
    let e = events(c, ns, "j").await;
    assert_eq!(count(&e, "Suspended"), 1, "{e:?}");
    assert_eq!(count(&e, "HighLoss"), 1, "{e:?}");
    third.stop().await;
}

/// A namespaced policy never touches a TrainJob in another namespace, even when one controller watches
/// both namespaces.
#[tokio::test]
async fn a_namespaced_policy_never_touches_another_namespace() {
    let ctx = setup!("controller_isolation");
    let c = &ctx.client;
    let ns_a = ctx.ns.clone();
    let ns_b = ctx.unique_name("other");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns_b}})).unwrap())
        .await
        .expect("second namespace");
    let shard = ("trainwarden-test", ns_a.as_str());
    apply_policy(c, &ns_a, &policy("nan", "Enforce", NAN_RULE)).await;
    create_trainjob(c, &ns_a, "mine", &[shard]).await;
    create_trainjob(c, &ns_b, "theirs", &[shard]).await;
    // Cluster-wide, but only this test's TrainJobs (other tests run their own controllers).
    let config = ControllerConfig {
        namespace: None,
        trainjob_selector: Some(format!("trainwarden-test={ns_a}")),
        ..config_for(&ns_a)
    };
    let controller = start(c, config);
    report(c, &ns_a, "mine", seconds_ago(1), "nan", 10).await;
    report(c, &ns_b, "theirs", seconds_ago(1), "nan", 10).await;
    eventually("mine suspended", Duration::from_secs(10), || async {
        suspended(&job(c, &ns_a, "mine").await).then_some(())
    })
    .await;
    // One watch carries both namespaces' TrainJobs, in order: once a later report of mine is evaluated,
    // theirs has been too.
    report(c, &ns_a, "mine", seconds_ago(0), "nan", 11).await;
    wait_until_evaluated(c, &ns_a, "nan", "mine", 11).await;
    let theirs = job(c, &ns_b, "theirs").await;
    assert!(!suspended(&theirs));
    assert!(theirs.annotations().keys().all(|k| !k.starts_with("trainwarden.dev/")));
    assert!(events(c, &ns_b, "theirs").await.is_empty());
    controller.stop().await;
}

/// Two replicas with leader election: both evaluate, only the Lease holder acts.
#[tokio::test]
async fn of_two_replicas_only_the_leader_acts() {
    let ctx = setup!("controller_ha");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(c, ns, &policy("nan", "Enforce", NAN_RULE)).await;
    create_trainjob(c, ns, "j", &[]).await;
    let replica = |id: &str| ControllerConfig {
        leader_election: true,
        identity: id.to_string(),
        lease_name: "trainwarden-leader".into(),
        lease_duration: Duration::from_secs(15),
        ..config_for(ns)
    };
    let a = start(c, replica("replica-a"));
    let b = start(c, replica("replica-b"));
    let leases: Api<Lease> = Api::namespaced(c.clone(), ns);
    let holder = eventually("a lease holder", Duration::from_secs(15), || async {
        leases.get("trainwarden-leader").await.ok()?.spec?.holder_identity
    })
    .await;
    // The Lease names its holder a moment before that replica starts acting, and a firing evaluated in
    // between is dropped by both replicas (the hand-over hole of issue 13). Only the acting leader writes
    // status: once the status shows the job selected, the leader acts on what it evaluates next.
    wait_until_watching(c, ns, "nan", 1).await;
    report(c, ns, "j", seconds_ago(1), "nan", 10).await;
    eventually("suspended", Duration::from_secs(10), || async {
        suspended(&job(c, ns, "j").await).then_some(())
    })
    .await;
    events_once_there(c, ns, "j", "Suspended", 1).await;
    events_once_there(c, ns, "j", "RuleFiring", 1).await;
    // Another NaN report: once the leader has evaluated it (its status shows it), a second suspension or
    // Event from either replica would be there.
    report(c, ns, "j", seconds_ago(0), "nan", 11).await;
    wait_until_evaluated(c, ns, "nan", "j", 11).await;
    let e = events(c, ns, "j").await;
    // The lease did not change hands during the test (a slow renewal under load would hand it over, and
    // then both replicas may act around the switch, as with any lease without fencing).
    let still = leases.get("trainwarden-leader").await.ok().and_then(|l| l.spec?.holder_identity);
    assert_eq!(still.as_ref(), Some(&holder), "the lease changed hands during the test");
    assert_eq!(count(&e, "Suspended"), 1, "{e:?}");
    assert_eq!(count(&e, "RuleFiring"), 1, "{e:?}");
    assert!(
        e.iter().all(|(_, _, instance)| *instance == holder),
        "events from a non-leader: {e:?} (leader {holder})"
    );
    a.stop().await;
    b.stop().await;
}

/// Scaling: the upstream CRD makes spec.trainer immutable (CEL `self == oldSelf`), so a scale action is
/// refused with the API server's reason, once, and never retried.
#[tokio::test]
async fn scaling_an_immutable_trainer_is_refused_once_with_the_reason() {
    let ctx = setup!("controller_scale");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(
        c,
        ns,
        &policy("shrink", "Enforce", "    - {name: nan-loss, uses: non_finite, with: {metric: loss}, actions: [{scale: {numNodes: 1}}]}\n"),
    )
    .await;
    create_trainjob(c, ns, "big", &[]).await;
    let before = job(c, ns, "big").await.data.pointer("/spec/trainer/numNodes").cloned();
    let controller = start(c, config_for(ns));
    report(c, ns, "big", seconds_ago(2), "nan", 10).await;
    let e = eventually("the refusal", Duration::from_secs(10), || async {
        let e = events(c, ns, "big").await;
        (count(&e, "ScaleRefused") == 1).then_some(e)
    })
    .await;
    assert!(e.iter().any(|(r, note, _)| r == "ScaleRefused" && note.contains("immutable")), "{e:?}");
    report(c, ns, "big", seconds_ago(0), "nan", 11).await;
    wait_until_evaluated(c, ns, "shrink", "big", 11).await;
    assert_eq!(count(&events(c, ns, "big").await, "ScaleRefused"), 1);
    let after = job(c, ns, "big").await;
    assert_eq!(after.data.pointer("/spec/trainer/numNodes").cloned(), before);
    assert!(!suspended(&after), "a refused scale must not leave the job suspended");
    let s = policy_status(c, ns, "shrink").await;
    assert_eq!(s.action_counts.get("scale/refused"), Some(&1), "{s:?}");
    controller.stop().await;
}

/// /healthz, /readyz and /metrics on one port, with the counters the issue names.
#[tokio::test]
async fn health_readiness_and_metrics_are_served() {
    let ctx = setup!("controller_http");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(c, ns, &policy("nan", "Audit", NAN_RULE)).await;
    create_trainjob(c, ns, "j", &[]).await;
    // Bound here and handed over: no window in which another process could take the port.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().unwrap().port();
    let controller = start_with_listener(c, config_for(ns), Some(listener));
    let get = |path: &'static str| http_get(port, path);
    eventually("healthz", Duration::from_secs(10), || async {
        get("/healthz").await.filter(|r| r.contains(" 200 "))
    })
    .await;
    eventually("readyz", Duration::from_secs(10), || async {
        get("/readyz").await.filter(|r| r.contains(" 200 "))
    })
    .await;
    report(c, ns, "j", seconds_ago(1), "nan", 10).await;
    let metrics = eventually("an audited action in /metrics", Duration::from_secs(10), || async {
        get("/metrics").await.filter(|m| {
            m.contains("trainwarden_actions_total{action=\"suspend\",mode=\"Audit\",result=\"reported\"} 1")
        })
    })
    .await;
    for name in [
        "trainwarden_samples_total",
        "trainwarden_evaluations_total",
        "trainwarden_firings_total{mode=\"Audit\"} 1",
        "trainwarden_evaluation_seconds_bucket",
        "trainwarden_input_lag_seconds_count",
        r#"trainwarden_executor_queue_seconds_count{work="act"} 1"#,
        r#"trainwarden_api_request_duration_seconds_count{operation="get_trainjob"}"#,
        "trainwarden_jobs 1",
        "trainwarden_leader 1",
    ] {
        assert!(metrics.contains(name), "{name} missing in:\n{metrics}");
    }
    controller.stop().await;
}

/// Issue 18: a judged TrainJob's gauges are on /metrics with its latest report's values, and every series of
/// the job is gone once the TrainJob is deleted.
#[tokio::test]
async fn a_jobs_gauges_are_on_metrics_until_it_is_deleted() {
    let ctx = setup!("controller_gauges");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(c, ns, &policy("nan", "Audit", NAN_RULE)).await;
    create_trainjob(c, ns, "gauged", &[]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().unwrap().port();
    let controller = start_with_listener(c, config_for(ns), Some(listener));
    let at = seconds_ago(1);
    report(c, ns, "gauged", at, "0.5", 40).await;
    let job = format!("namespace=\"{ns}\",trainjob=\"gauged\"");
    let progress = format!("trainwarden_job_progress_percent{{{job}}} 40.0");
    let metrics = eventually("the job's progress in /metrics", Duration::from_secs(10), || async {
        http_get(port, "/metrics").await.filter(|m| m.contains(&progress))
    })
    .await;
    for line in [
        format!("trainwarden_job_eta_seconds{{{job}}} 3600.0"),
        format!("trainwarden_job_metric{{{job},metric=\"loss\"}} 0.5"),
        format!("trainwarden_job_last_report_timestamp_seconds{{{job}}} {}.0", at.as_second()),
        format!("trainwarden_job_phase{{{job},phase=\"running\"}} 1"),
    ] {
        assert!(metrics.contains(&line), "{line} missing in:\n{metrics}");
    }

    trainjob_api(c.clone(), Some(ns)).delete("gauged", &Default::default()).await.expect("delete");
    let trainjob = "trainjob=\"gauged\"";
    eventually("the job's series gone from /metrics", Duration::from_secs(10), || async {
        http_get(port, "/metrics").await.filter(|m| m.contains("trainwarden_jobs 0") && !m.contains(trainjob))
    })
    .await;
    controller.stop().await;
}

/// `--record-dir`: the controller writes what the TrainJob watch sees as a gzip stream the replay parser
/// reads: a first line, each progress report once (a watch re-delivers them), and the deletion; and the
/// labels of the job's namespace, when known and when they change (issue 43: a ClusterProgressPolicy's
/// `namespaceSelector` selected nothing offline).
#[tokio::test]
async fn the_recorder_writes_each_report_once_in_a_replayable_stream() {
    use std::io::Read;
    let ctx = setup!("controller_record");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let dir = std::env::temp_dir().join(format!("trainwarden-record-{ns}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let record = trainwarden_controller::config::RecordConfig {
        flush_interval: Duration::from_millis(200),
        ..trainwarden_controller::config::RecordConfig::new(&dir)
    };
    let job = create_trainjob(c, ns, "recorded", &[("team", "fraud")]).await;
    let uid = job.uid().expect("a uid");
    let controller = start(c, ControllerConfig { record: Some(record), ..config_for(ns) });
    let file = dir.join(format!("test-{ns}")).join(format!("{ns}_recorded_{}.jsonl.gz", &uid[..8]));
    let read = |file: std::path::PathBuf| {
        let mut text = String::new();
        std::fs::File::open(&file)
            .ok()
            .and_then(|f| flate2::read::MultiGzDecoder::new(f).read_to_string(&mut text).ok())
            .map(|_| trainwarden_core::parse_stream(&text, "recorded").expect("a valid stream"))
    };
    // Lines that say only the namespace's labels: written when the Namespace watch tells the recorder after
    // the job's first line (the two watches race) and when they change.
    let about_the_job = |records: &[trainwarden_core::StreamRecord]| {
        records
            .iter()
            .filter(|r| match r {
                trainwarden_core::StreamRecord::Update(u) => {
                    !(u.namespace_labels.is_some()
                        && u.sample.is_none()
                        && u.labels.is_none()
                        && u.phase.is_none())
                }
                trainwarden_core::StreamRecord::Object { .. } => true,
            })
            .count()
    };
    let namespace_label = |records: &[trainwarden_core::StreamRecord], key: &str| {
        records.iter().rev().find_map(|r| match r {
            trainwarden_core::StreamRecord::Update(u) => {
                u.namespace_labels.as_ref().map(|l| l.get(key).cloned())
            }
            trainwarden_core::StreamRecord::Object { .. } => None,
        })
    };
    let lines_with_progress = |records: &[trainwarden_core::StreamRecord]| {
        records
            .iter()
            .filter_map(|r| match r {
                trainwarden_core::StreamRecord::Update(u) => u.sample.as_ref().and_then(|s| s.metric("loss")),
                trainwarden_core::StreamRecord::Object { .. } => panic!("compact lines only"),
            })
            .collect::<Vec<f64>>()
    };
    eventually("the first line", Duration::from_secs(15), || async {
        read(file.clone()).filter(|r| !r.is_empty())
    })
    .await;
    report(c, ns, "recorded", seconds_ago(2), "0.9", 10).await;
    report(c, ns, "recorded", seconds_ago(1), "0.7", 20).await;
    // Re-delivers the last report unchanged: not a line.
    trainjob_api(c.clone(), Some(ns))
        .patch(
            "recorded",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .expect("label the TrainJob");
    let records = eventually("both reports recorded", Duration::from_secs(15), || async {
        read(file.clone()).filter(|r| lines_with_progress(r) == [0.9, 0.7] && about_the_job(r) == 4)
    })
    .await;
    // Every namespace carries its own name as a label.
    eventually("the namespace's labels recorded", Duration::from_secs(15), || async {
        read(file.clone())
            .filter(|r| namespace_label(r, "kubernetes.io/metadata.name") == Some(Some(ns.to_string())))
    })
    .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    namespaces
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"trainwarden.dev/reclaim": "true"}}})),
        )
        .await
        .expect("label the namespace");
    eventually("the namespace's new label recorded", Duration::from_secs(15), || async {
        read(file.clone())
            .filter(|r| namespace_label(r, "trainwarden.dev/reclaim") == Some(Some("true".to_string())))
    })
    .await;
    let trainwarden_core::StreamRecord::Update(first) = &records[0] else { unreachable!() };
    assert_eq!(first.labels.as_ref().and_then(|l| l.get("team")).map(String::as_str), Some("fraud"));
    assert_eq!(first.phase, Some(trainwarden_core::JobPhase::Running));
    assert!(
        records.iter().any(|r| matches!(r, trainwarden_core::StreamRecord::Update(u)
            if u.sample.is_none() && u.labels.as_ref().is_some_and(|l| l.contains_key("x")))),
        "the relabel is a line of its own"
    );
    trainjob_api(c.clone(), Some(ns)).delete("recorded", &Default::default()).await.expect("delete");
    eventually("the deletion recorded", Duration::from_secs(15), || async {
        read(file.clone())
            .filter(|r| matches!(r.last(), Some(trainwarden_core::StreamRecord::Update(u)) if u.deleted))
    })
    .await;
    controller.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
