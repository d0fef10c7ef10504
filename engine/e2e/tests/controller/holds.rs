//! What holds an action back, on the real API server: a snooze, a limit, a grace, a policy's snooze cap,
//! an exception.

use super::*;

/// An owner's snooze (trainwarden.dev/snooze-until): the rule fires and is reported, its suspension held
/// (an ActionsHeld Event, snoozedUntil in the status); at the snooze's end the rule, still firing, suspends
/// the job once, on that second (a timer: no report arrives then).
#[tokio::test]
async fn a_snoozed_job_is_suspended_once_when_its_snooze_ends_if_its_rule_still_fires() {
    let ctx = setup!("controller_snooze");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rule = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n";
    apply_policy(c, ns, &policy("snooze", "Enforce", rule)).await;
    create_trainjob(c, ns, "snoozed", &[]).await;
    let end = Timestamp::from_second(Timestamp::now().as_second() + 15).unwrap();
    let until = end.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let patch = json!({"metadata": {"annotations": {trainwarden_controller::SNOOZE_ANNOTATION: until}}});
    trainjob_api(c.clone(), Some(ns))
        .patch("snoozed", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate the TrainJob");
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "snooze", 1).await;

    report(c, ns, "snoozed", seconds_ago(0), "2.0", 10).await;
    let e = events_once_there(c, ns, "snoozed", "ActionsHeld", 1).await;
    assert!(
        e.iter().any(|(r, note, _)| r == "ActionsHeld"
            && note.contains("rule high firing")
            && note.contains(&format!(
                "suspend held: snoozed until {end} by annotation trainwarden.dev/snooze-until"
            ))),
        "{e:?}"
    );
    assert_eq!(count(&e, "Snoozed"), 1, "{e:?}");
    // The job is listed as snoozed as soon as it is watched, before its report fires the rule: wait for both.
    let status =
        eventually("snoozedUntil and the firing rule in the status", Duration::from_secs(10), || async {
            let s = policy_status(c, ns, "snooze").await;
            s.jobs.first().is_some_and(|j| j.snoozed_until.is_some() && j.firing == ["high"]).then_some(s)
        })
        .await;
    assert_eq!(status.jobs[0].snoozed_until.as_ref().map(|t| t.0), Some(end));
    assert_eq!(status.jobs[0].firing, vec!["high".to_string()]);
    // More reports while snoozed: still held, nothing done.
    report(c, ns, "snoozed", seconds_ago(0), "2.0", 20).await;
    wait_until_evaluated(c, ns, "snooze", "snoozed", 20).await;
    assert!(Timestamp::now() < end, "the test was too slow to look before the snooze ended");
    assert!(!suspended(&job(c, ns, "snoozed").await), "suspended while snoozed");
    assert_eq!(count(&events(c, ns, "snoozed").await, "Suspended"), 0);

    // The end: suspended by the timer, once.
    let j = eventually("the suspension at the snooze's end", Duration::from_secs(25), || async {
        let j = job(c, ns, "snoozed").await;
        suspended(&j).then_some(j)
    })
    .await;
    let lateness = action_time(&j).expect("last-action time").duration_since(end).as_secs_f64();
    assert!((0.0..=1.0).contains(&lateness), "acted {lateness:.3}s after the snooze's end");
    assert!(j.annotations()[LAST_ACTION_ANNOTATION].contains("\"rule\":\"high\""));
    let e = events_once_there(c, ns, "snoozed", "SnoozeEnded", 1).await;
    assert!(
        e.iter().any(|(r, note, _)| r == "SnoozeEnded" && note.contains("1 rule still firing acts now")),
        "{e:?}"
    );
    events_once_there(c, ns, "snoozed", "Suspended", 1).await;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(count(&events(c, ns, "snoozed").await, "Suspended"), 1, "suspended once");
    eventually("snoozedUntil gone from the status", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "snooze").await;
        s.jobs.iter().all(|j| j.snoozed_until.is_none()).then_some(())
    })
    .await;
    controller.stop().await;
}

/// `spec.limits.maxConcurrentSuspended: 1`: of two jobs firing at once one is suspended, the other's actions
/// are held (an ActionsLimited Event, a `held` entry in the policy status, the metric) until the first one
/// runs again; then it is suspended, once.
#[tokio::test]
async fn a_limit_holds_the_second_suspension_until_the_first_job_runs_again() {
    let ctx = setup!("controller_limits");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rule = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n";
    let yaml = policy("limited", "Enforce", rule)
        .replace("  rules:", "  limits: {maxConcurrentSuspended: 1}\n  rules:");
    apply_policy(c, ns, &yaml).await;
    create_trainjob(c, ns, "first", &[]).await;
    create_trainjob(c, ns, "second", &[]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let controller = start_with_listener(c, config_for(ns), Some(listener));
    wait_until_watching(c, ns, "limited", 2).await;

    report(c, ns, "first", seconds_ago(0), "2.0", 10).await;
    eventually("first suspended", Duration::from_secs(20), || async {
        suspended(&job(c, ns, "first").await).then_some(())
    })
    .await;
    report(c, ns, "second", seconds_ago(0), "2.0", 10).await;
    let e = events_once_there(c, ns, "second", "ActionsLimited", 1).await;
    let held = "suspend held: limit of 1 suspended job reached (spec.limits.maxConcurrentSuspended)";
    assert!(e.iter().any(|(r, note, _)| r == "ActionsLimited" && note.contains(held)), "{e:?}");
    let status = eventually("the hold in the status", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "limited").await;
        s.jobs.iter().any(|j| j.name.ends_with("/second") && !j.held.is_empty()).then_some(s)
    })
    .await;
    let second = status.jobs.iter().find(|j| j.name.ends_with("/second")).unwrap();
    assert_eq!(
        second.held,
        vec![format!("high: held: limit of 1 suspended job reached (spec.limits.maxConcurrentSuspended)")]
    );
    assert_eq!(second.firing, vec!["high".to_string()]);
    let limited = "trainwarden_actions_limited_total{limit=\"policy_concurrent\"} 1";
    eventually("the metric", Duration::from_secs(10), || async {
        http_get(addr.port(), "/metrics").await.filter(|m| m.contains(limited))
    })
    .await;
    // Held, not forgotten: more reports and evaluations change nothing while first is suspended.
    report(c, ns, "second", seconds_ago(0), "2.0", 20).await;
    wait_until_evaluated(c, ns, "limited", "second", 20).await;
    tokio::time::sleep(SETTLE).await;
    assert!(!suspended(&job(c, ns, "second").await), "suspended over the limit");

    // Someone resumes first (the Trainer marks it running again, later than its suspension): the slot
    // frees and second's hold, asked again within the evaluation interval, acts.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let resume = json!({"spec": {"suspend": false}});
    trainjob_api(c.clone(), Some(ns))
        .patch("first", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .expect("resume first");
    let resumed = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "status": {"conditions": [
        {"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed",
         "lastTransitionTime": seconds_ago(0).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}});
    trainjob_api(c.clone(), Some(ns))
        .patch_status("first", &PatchParams::apply("trainer-controller").force(), &Patch::Apply(&resumed))
        .await
        .expect("the Trainer's Resumed condition");
    eventually("second suspended once first runs again", Duration::from_secs(20), || async {
        suspended(&job(c, ns, "second").await).then_some(())
    })
    .await;
    events_once_there(c, ns, "second", "Suspended", 1).await;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(count(&events(c, ns, "second").await, "Suspended"), 1, "suspended once");
    assert_eq!(count(&events(c, ns, "first").await, "Suspended"), 1, "first not suspended again");
    controller.stop().await;
}

/// `suspend: {grace: 5s}`: the firing's Event says when the job will be suspended and how to snooze it, and
/// the suspension comes on the grace's second, once; a job that recovers within its grace is left running.
#[tokio::test]
async fn a_grace_warns_with_the_snooze_command_then_suspends_unless_the_job_recovers() {
    let ctx = setup!("controller_grace");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rule = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {grace: 5s}}]}\n";
    apply_policy(c, ns, &policy("graced", "Enforce", rule)).await;
    create_trainjob(c, ns, "warned", &[]).await;
    create_trainjob(c, ns, "recovers", &[]).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "graced", 2).await;

    report(c, ns, "warned", seconds_ago(0), "2.0", 10).await;
    report(c, ns, "recovers", seconds_ago(0), "2.0", 10).await;
    let fired_by = Timestamp::now();
    // recovers reports a healthy loss at once, well within its grace.
    wait_until_evaluated(c, ns, "graced", "recovers", 10).await;
    report(c, ns, "recovers", seconds_ago(0), "0.5", 11).await;
    let e = events_once_there(c, ns, "warned", "ActionDeferred", 1).await;
    let command = format!("kubectl trainwarden snooze warned -n {ns} 4h");
    assert!(
        e.iter().any(|(r, note, _)| r == "ActionDeferred"
            && note.contains("suspend waits for its grace, until")
            && note.contains(&command)),
        "{e:?}"
    );
    let j = eventually("warned suspended when its grace ends", Duration::from_secs(20), || async {
        let j = job(c, ns, "warned").await;
        suspended(&j).then_some(j)
    })
    .await;
    let waited = action_time(&j).expect("last-action time").duration_since(fired_by).as_secs_f64();
    assert!(waited >= 4.0, "suspended {waited:.1}s after the firing, before its 5s grace");
    events_once_there(c, ns, "warned", "Suspended", 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!suspended(&job(c, ns, "recovers").await), "a job that recovered within its grace was suspended");
    assert_eq!(count(&events(c, ns, "warned").await, "Suspended"), 1, "suspended once");
    controller.stop().await;
}

/// `spec.snooze.maxDuration: 4s`: the owner's hour-long snooze holds this policy's action for 4 seconds from
/// when the controller first saw it; then the rule still firing acts, once, with a SnoozeCapped Event.
#[tokio::test]
async fn a_policys_snooze_cap_ends_the_snooze_for_it() {
    let ctx = setup!("controller_snooze_cap");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rule = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n";
    let yaml = policy("capped", "Enforce", rule).replace("  rules:", "  snooze: {maxDuration: 4s}\n  rules:");
    apply_policy(c, ns, &yaml).await;
    create_trainjob(c, ns, "snoozed", &[]).await;
    let until = Timestamp::from_second(Timestamp::now().as_second() + 3600).unwrap();
    let patch = json!({"metadata": {"annotations": {trainwarden_controller::SNOOZE_ANNOTATION:
        until.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}}});
    trainjob_api(c.clone(), Some(ns))
        .patch("snoozed", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate the TrainJob");
    // The cap runs from when the controller first sees the value: not before it starts.
    let seen = Timestamp::now();
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "capped", 1).await;
    report(c, ns, "snoozed", seconds_ago(0), "2.0", 10).await;
    events_once_there(c, ns, "snoozed", "ActionsHeld", 1).await;
    assert!(!suspended(&job(c, ns, "snoozed").await), "suspended while the snooze holds the policy");
    let j =
        eventually("suspended when the policy's cap ends the snooze", Duration::from_secs(20), || async {
            let j = job(c, ns, "snoozed").await;
            suspended(&j).then_some(j)
        })
        .await;
    let after = action_time(&j).expect("last-action time").duration_since(seen).as_secs_f64();
    // (The write's time has whole seconds.)
    assert!(after >= 3.0, "acted {after:.1}s after the controller started, before the 4s cap");
    let e = events_once_there(c, ns, "snoozed", "SnoozeCapped", 1).await;
    assert!(
        e.iter().any(|(r, note, _)| r == "SnoozeCapped"
            && note.contains("its spec.snooze.maxDuration ended")
            && note.contains("1 rule still firing acts now")),
        "{e:?}"
    );
    events_once_there(c, ns, "snoozed", "Suspended", 1).await;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(count(&events(c, ns, "snoozed").await, "Suspended"), 1, "suspended once");
    controller.stop().await;
}

/// A ProgressPolicyException written by the team: the firing rule's suspension of the job it names is
/// held (an ActionsHeld Event naming it, the policy status listing it as Active and holding the job) while
/// another job of the namespace is suspended at once; on the second it expires the held job is suspended,
/// once, by the timer (no report comes then). A mid-firing expiry on the real API server.
#[tokio::test]
async fn an_exception_holds_a_suspension_until_the_second_it_expires() {
    let ctx = setup!("controller_exception");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rule = "    - {name: high, when: 'metric(\"loss\") > 1.0', actions: [{suspend: {}}]}\n";
    apply_policy(c, ns, &policy("exc", "Enforce", rule)).await;
    create_trainjob(c, ns, "eval-pass", &[]).await;
    create_trainjob(c, ns, "other", &[]).await;
    let end = Timestamp::from_second(Timestamp::now().as_second() + 14).unwrap();
    let exception: trainwarden_kube::ProgressPolicyException = serde_json::from_value(json!({
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "ProgressPolicyException",
        "metadata": {"name": "eval-on-cpu", "namespace": ns},
        "spec": {
            "exceptions": [{"policyName": format!("{ns}/exc"), "ruleNames": ["high"]}],
            "match": {"names": ["eval-pass"]},
            "expires": end.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "reason": "evaluation on CPU",
        },
    }))
    .expect("an exception object");
    Api::<trainwarden_kube::ProgressPolicyException>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &exception)
        .await
        .expect("the API server accepts the exception");
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "exc", 2).await;

    report(c, ns, "eval-pass", seconds_ago(0), "2.0", 10).await;
    report(c, ns, "other", seconds_ago(0), "2.0", 10).await;
    let e = events_once_there(c, ns, "eval-pass", "ActionsHeld", 1).await;
    let exception_name = format!("{ns}/eval-on-cpu");
    assert!(
        e.iter().any(|(r, note, _)| r == "ActionsHeld"
            && note.contains(&format!(
                "suspend held: excepted until {end} by ProgressPolicyException {exception_name}"
            ))),
        "{e:?}"
    );
    eventually("the other job suspended at once", Duration::from_secs(10), || async {
        suspended(&job(c, ns, "other").await).then_some(())
    })
    .await;
    let status =
        eventually("the exception in the status, holding the job", Duration::from_secs(10), || async {
            let s = policy_status(c, ns, "exc").await;
            s.exceptions.first().is_some_and(|x| x.holding == [format!("{ns}/eval-pass")]).then_some(s)
        })
        .await;
    let listed = &status.exceptions[0];
    assert_eq!((listed.name.as_str(), listed.state.as_str()), (exception_name.as_str(), "Active"));
    assert_eq!(listed.expires.as_ref().map(|t| t.0), Some(end));
    assert!(Timestamp::now() < end, "the test was too slow to look before the exception expired");
    assert!(!suspended(&job(c, ns, "eval-pass").await), "suspended while excepted");

    // The expiry: suspended by the timer, on its second, once.
    let j = eventually("the suspension at the exception's expiry", Duration::from_secs(25), || async {
        let j = job(c, ns, "eval-pass").await;
        suspended(&j).then_some(j)
    })
    .await;
    let lateness = action_time(&j).expect("last-action time").duration_since(end).as_secs_f64();
    assert!((0.0..=1.0).contains(&lateness), "acted {lateness:.3}s after the exception expired");
    let e = events_once_there(c, ns, "eval-pass", "ExceptionEnded", 1).await;
    assert!(
        e.iter().any(|(r, note, _)| r == "ExceptionEnded"
            && note.contains(&format!("ProgressPolicyException {exception_name} no longer holds the rule: it expired; the rule still fires, so it fires again now"))),
        "{e:?}"
    );
    events_once_there(c, ns, "eval-pass", "Suspended", 1).await;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(count(&events(c, ns, "eval-pass").await, "Suspended"), 1, "suspended once");
    assert_eq!(count(&events(c, ns, "other").await, "Suspended"), 1, "the other once");
    eventually("the exception listed as Expired", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "exc").await;
        s.exceptions.first().is_some_and(|x| x.state == "Expired" && x.holding.is_empty()).then_some(())
    })
    .await;
    controller.stop().await;
}
