//! The controller against a real kube-apiserver + etcd: each test runs its own controller (scoped to the
//! test's namespace, or to its TrainJobs by label) in-process, writes TrainJob progress through the status
//! subresource exactly as Kubeflow Trainer's status server does (server-side apply by `trainer-status`), and
//! checks what the controller did to the TrainJob, the Kueue Workload, the Events and the policy status.

use trainwarden_testkit::apiserver as support;
use trainwarden_testkit::http::http_get;
use trainwarden_testkit::setup;

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use trainwarden_controller::executor::workload_resource;
use trainwarden_controller::{ControllerConfig, LAST_ACTION_ANNOTATION};
use trainwarden_core::TRAINER_STATUS_ANNOTATION;
use trainwarden_kube::trainjob::trainjob_api;

use trainwarden_e2e::controller::*;

// Tests -----------------------------------------------------------------------------------------------------

/// A plateau: the loss stops improving; after `for`, the Enforce policy suspends the job exactly once, with
/// an Event and a status entry. The same under Audit changes nothing on the TrainJob but reports it.
#[tokio::test]
async fn a_plateau_is_suspended_once_in_enforce_and_only_reported_in_audit() {
    let ctx = setup!("controller_plateau");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rule = "    - {name: plateau, uses: plateau, with: {metric: loss, window: 4, minDelta: 0.01}, for: 2s, actions: [{suspend: {}}]}\n";
    apply_policy(
        c,
        ns,
        &policy("enforce", "Enforce", rule)
            .replace("  rules:", "  selector: {matchLabels: {mode: enforce}}\n  rules:"),
    )
    .await;
    apply_policy(
        c,
        ns,
        &policy("audit", "Audit", rule)
            .replace("  rules:", "  selector: {matchLabels: {mode: audit}}\n  rules:"),
    )
    .await;
    create_trainjob(c, ns, "enforced", &[("mode", "enforce")]).await;
    create_trainjob(c, ns, "audited", &[("mode", "audit")]).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "enforce", 1).await;
    wait_until_watching(c, ns, "audit", 1).await;

    // Improving, then flat (values differ, but by less than minDelta).
    let losses = ["2.0", "1.5", "1.0", "0.80", "0.801", "0.799", "0.802", "0.800", "0.803"];
    for (i, loss) in losses.iter().enumerate() {
        let at = seconds_ago(losses.len() as i64 - i as i64);
        report(c, ns, "enforced", at, loss, 10 + i as i64).await;
        report(c, ns, "audited", at, loss, 10 + i as i64).await;
    }
    let enforced = eventually("the plateau suspension", Duration::from_secs(20), || async {
        let j = job(c, ns, "enforced").await;
        suspended(&j).then_some(j)
    })
    .await;
    assert!(enforced.annotations()[LAST_ACTION_ANNOTATION].contains("\"rule\":\"plateau\""));
    assert!(enforced.annotations()["trainwarden.dev/suspended-by"].contains("enforce"));
    let status = eventually("the enforce policy's status", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "enforce").await;
        s.last_action.is_some().then_some(s)
    })
    .await;
    assert_eq!(status.last_action.as_deref(), Some(format!("suspend {ns}/enforced (plateau)").as_str()));
    assert_eq!(status.matched_jobs, Some(1));
    assert_eq!(status.jobs[0].firing, vec!["plateau".to_string()]);
    assert!(status.gpu_hours_saved.unwrap_or(0.0) > 0.0, "{status:?}");
    assert_eq!(status.action_counts.get("suspend/done"), Some(&1));

    // Audit: reported in status and Events, the TrainJob untouched (no trainwarden field manager at all).
    let audit = eventually("the audit report", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "audit").await;
        s.last_action.is_some().then_some(s)
    })
    .await;
    assert_eq!(audit.last_action.as_deref(), Some(format!("would suspend {ns}/audited (plateau)").as_str()));
    assert!(audit.gpu_hours_would_save.unwrap_or(0.0) > 0.0 && audit.gpu_hours_saved.is_none(), "{audit:?}");
    let audited = job(c, ns, "audited").await;
    assert!(!suspended(&audited));
    assert!(
        !audited.annotations().keys().any(|k| k.starts_with("trainwarden.dev/")),
        "{:?}",
        audited.annotations()
    );
    assert!(
        !audited
            .managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some(trainwarden_kube::FIELD_MANAGER)),
        "Audit mode wrote to the TrainJob"
    );

    // The firing's Events, once written (after the suspension the test saw above).
    events_once_there(c, ns, "enforced", "Suspended", 1).await;
    events_once_there(c, ns, "enforced", "RuleFiring", 1).await;
    events_once_there(c, ns, "audited", "WouldSuspend", 1).await;
    events_once_there(c, ns, "audited", "RuleFiring", 1).await;

    // More flat reports change nothing: still one suspension, one Event each, once the controller has
    // evaluated them (the status shows their progress).
    report(c, ns, "enforced", seconds_ago(0), "0.801", 20).await;
    report(c, ns, "audited", seconds_ago(0), "0.801", 20).await;
    wait_until_evaluated(c, ns, "enforce", "enforced", 20).await;
    wait_until_evaluated(c, ns, "audit", "audited", 20).await;
    let e = events(c, ns, "enforced").await;
    assert_eq!(count(&e, "Suspended"), 1, "{e:?}");
    assert_eq!(count(&e, "RuleFiring"), 1, "{e:?}");
    let a = events(c, ns, "audited").await;
    assert_eq!(count(&a, "WouldSuspend"), 1, "{a:?}");
    assert!(a.iter().any(|(r, note, _)| r == "RuleFiring" && note.contains("has not improved")), "{a:?}");
    controller.stop().await;
}

/// Two policies firing on one report of one TrainJob record two Events, each naming its own policy: the
/// Events name the job by the uid its report carried, and kube's Recorder would otherwise merge the second
/// into the first (same reason, same object), keeping only the first note.
#[tokio::test]
async fn two_firings_on_one_report_are_two_events_each_with_its_own_note() {
    let ctx = setup!("controller_two_firings");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(c, ns, &policy("nan-a", "Audit", NAN_RULE)).await;
    apply_policy(c, ns, &policy("nan-b", "Audit", NAN_RULE)).await;
    create_trainjob(c, ns, "twice", &[]).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "nan-a", 1).await;
    wait_until_watching(c, ns, "nan-b", 1).await;
    report(c, ns, "twice", seconds_ago(1), "nan", 10).await;
    events_once_there(c, ns, "twice", "RuleFiring", 2).await;
    let e = events(c, ns, "twice").await;
    for p in ["nan-a", "nan-b"] {
        let named = format!("ProgressPolicy {ns}/{p} ");
        assert!(e.iter().any(|(r, note, _)| r == "RuleFiring" && note.contains(&named)), "{named}: {e:?}");
    }
    controller.stop().await;
}

/// A job whose status stops updating is suspended by a stall rule within 1 s of the deadline, with no
/// further update arriving (a timer, not a poll).
#[tokio::test]
async fn a_stalled_job_is_suspended_within_a_second_of_its_deadline() {
    let ctx = setup!("controller_stall");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(
        c,
        ns,
        &policy(
            "stall",
            "Enforce",
            "    - {name: stalled, uses: stalled, with: {after: 4s}, actions: [{suspend: {}}]}\n",
        ),
    )
    .await;
    create_trainjob(c, ns, "hung", &[]).await;
    let controller = start(c, config_for(ns));
    let last = seconds_ago(0);
    report(c, ns, "hung", last, "0.5", 40).await;
    let deadline = Timestamp::from_second(last.as_second() + 4).unwrap();
    let j = eventually("the stall suspension", Duration::from_secs(15), || async {
        let j = job(c, ns, "hung").await;
        suspended(&j).then_some(j)
    })
    .await;
    let acted = action_time(&j).expect("last-action time");
    let written = write_time(&j).expect("trainwarden's managedFields entry");
    let lateness = acted.duration_since(deadline).as_secs_f64();
    eprintln!(
        "stall deadline {deadline}, fired at {acted} ({lateness:.3}s late), written at {written} (API server, whole seconds)"
    );
    assert!((0.0..=1.0).contains(&lateness), "fired {lateness:.3}s after the deadline");
    // The API server's own record of the write (whole seconds), not when this test got to look at it.
    assert!(written.duration_since(deadline).as_secs_f64() <= 2.0, "the write landed late: {written}");
    let e = events_once_there(c, ns, "hung", "Suspended", 1).await;
    assert!(e.iter().any(|(r, note, _)| r == "Suspended" && note.contains("no progress sample")), "{e:?}");
    controller.stop().await;
}

/// NaN loss in either source suspends at once: upstream's "nan" string and RHOAI's null.
#[tokio::test]
async fn nan_loss_in_either_source_suspends_at_once() {
    let ctx = setup!("controller_nan");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(c, ns, &policy("nan", "Enforce", NAN_RULE)).await;
    create_trainjob(c, ns, "upstream", &[]).await;
    create_trainjob(c, ns, "rhoai", &[]).await;
    let controller = start(c, config_for(ns));
    report(c, ns, "upstream", seconds_ago(2), "0.9", 10).await;
    report(c, ns, "upstream", seconds_ago(1), "nan", 11).await;
    let annotation =
        support::fixture("fixtures/kubeflow/payloads/rhoai-trainerStatus-annotation.nan-loss.json")
            .replace("2026-04-10T09:47:30Z", &seconds_ago(1).strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    let patch = json!({"metadata": {"annotations": {TRAINER_STATUS_ANNOTATION: annotation.trim()}}});
    trainjob_api(c.clone(), Some(ns))
        .patch("rhoai", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("RHOAI poll");
    for name in ["upstream", "rhoai"] {
        eventually(&format!("{name} suspended"), Duration::from_secs(10), || async {
            suspended(&job(c, ns, name).await).then_some(())
        })
        .await;
        let e = events_once_there(c, ns, name, "Suspended", 1).await;
        assert!(
            e.iter().any(|(r, note, _)| r == "Suspended" && note.contains("loss is NaN")),
            "{name}: {e:?}"
        );
    }
    controller.stop().await;
}

/// A Kueue-managed TrainJob is stopped by deactivating its Workload: Kueue owns spec.suspend.
#[tokio::test]
async fn a_kueue_managed_job_is_stopped_by_deactivating_its_workload() {
    let ctx = setup!("controller_kueue");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    support::install_workload_crd(c).await;
    apply_policy(c, ns, &policy("nan", "Enforce", NAN_RULE)).await;
    let tj = create_trainjob(c, ns, "queued", &[("kueue.x-k8s.io/queue-name", "gpu-queue")]).await;
    // What Kueue creates for it: a Workload owned by the TrainJob.
    let workloads: Api<DynamicObject> = Api::namespaced_with(c.clone(), ns, &workload_resource());
    let workload: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "trainjob-queued-1a2b3", "namespace": ns, "ownerReferences": [{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "queued",
            "uid": tj.uid().unwrap(), "controller": true}]},
        "spec": {"active": true, "queueName": "gpu-queue", "podSets": [{"name": "node", "count": 2}]}
    }))
    .unwrap();
    workloads.create(&PostParams::default(), &workload).await.expect("create Workload");
    let controller = start(c, config_for(ns));
    report(c, ns, "queued", seconds_ago(1), "nan", 10).await;
    eventually("the Workload deactivated", Duration::from_secs(10), || async {
        let w = workloads.get("trainjob-queued-1a2b3").await.ok()?;
        (w.data.pointer("/spec/active") == Some(&json!(false))).then_some(())
    })
    .await;
    // Written through v1beta2, the version Kueue 0.17 stores (its v1beta1 rules refuse writes to a Workload
    // that holds quota).
    let w = workloads.get("trainjob-queued-1a2b3").await.expect("the Workload");
    let ours: Vec<_> = w
        .managed_fields()
        .iter()
        .filter(|m| m.manager.as_deref() == Some(trainwarden_kube::FIELD_MANAGER))
        .map(|m| m.api_version.clone())
        .collect();
    assert_eq!(ours, [Some("kueue.x-k8s.io/v1beta2".to_string())], "{:?}", w.managed_fields());
    // The Event is the executor's last step for this action: after it, the TrainJob is as trainwarden left it.
    let e = eventually("the Event", Duration::from_secs(10), || async {
        let e = events(c, ns, "queued").await;
        (count(&e, "WorkloadDeactivated") == 1).then_some(e)
    })
    .await;
    // spec.suspend is Kueue's: trainwarden does not touch it.
    assert!(!suspended(&job(c, ns, "queued").await));
    assert!(e.iter().any(|(_, note, _)| note.contains("Kueue") && note.contains("gpu-queue")), "{e:?}");
    let s = eventually("status", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "nan").await;
        s.last_action.is_some().then_some(s)
    })
    .await;
    assert_eq!(s.last_action.as_deref(), Some(format!("deactivate {ns}/queued (nan-loss)").as_str()));
    controller.stop().await;
}

/// A Kueue job's suspension is two writes: the Workload's deactivation, which records the intent id on the
/// Workload, then the record on the TrainJob. When the second does not land (a leader lost between them;
/// here a real ValidatingAdmissionPolicy refuses TrainJob writes), the next attempt finds the Workload
/// deactivated by this very intent: done (its savings counted, its Event published, once), not "found
/// already inactive" with neither.
#[tokio::test]
async fn a_workload_deactivated_before_its_trainjob_record_is_found_done_by_its_intent() {
    let ctx = setup!("controller_kueue_record");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    support::install_workload_crd(c).await;
    apply_policy(c, ns, &policy("nan", "Enforce", NAN_RULE)).await;
    let tj = create_trainjob(c, ns, "queued", &[("kueue.x-k8s.io/queue-name", "gpu-queue")]).await;
    let workloads: Api<DynamicObject> = Api::namespaced_with(c.clone(), ns, &workload_resource());
    let workload: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "trainjob-queued-9f8e7", "namespace": ns, "ownerReferences": [{
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "queued",
            "uid": tj.uid().unwrap(), "controller": true}]},
        "spec": {"active": true, "queueName": "gpu-queue", "podSets": [{"name": "node", "count": 2}]}
    }))
    .unwrap();
    workloads.create(&PostParams::default(), &workload).await.expect("create Workload");
    let frozen = TrainJobRefusal::install(c, ns, &ctx.unique_name("tw-frozen"), "true").await;
    // The API server enforces a new policy once its informer has it: probe with a write of our own.
    let probe = json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"annotations": {"test.trainwarden.dev/probe": "x"}}});
    let jobs = trainjob_api(c.clone(), Some(ns));
    eventually("the admission policy enforced", Duration::from_secs(20), || async {
        let e = jobs.patch("queued", &PatchParams::apply("probe"), &Patch::Apply(&probe)).await.err()?;
        TrainJobRefusal::refused(&e).then_some(())
    })
    .await;

    let controller = start(c, config_for(ns));
    report(c, ns, "queued", seconds_ago(1), "nan", 10).await;
    let w = eventually("the Workload deactivated", Duration::from_secs(10), || async {
        let w = workloads.get("trainjob-queued-9f8e7").await.ok()?;
        (w.data.pointer("/spec/active") == Some(&json!(false))).then_some(w)
    })
    .await;
    let on_workload: Vec<String> = serde_json::from_str(
        w.annotations()
            .get(trainwarden_controller::INTENTS_ANNOTATION)
            .expect("the intent recorded on the Workload"),
    )
    .unwrap();
    assert_eq!(on_workload.len(), 1, "{on_workload:?}");
    // The TrainJob record is refused, and retried.
    eventually("a refused record", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "nan").await;
        (s.action_counts.get("deactivate/failed").copied().unwrap_or(0) >= 1).then_some(())
    })
    .await;
    assert!(
        !job(c, ns, "queued").await.annotations().contains_key(trainwarden_controller::INTENTS_ANNOTATION)
    );
    assert_eq!(count(&events(c, ns, "queued").await, "WorkloadDeactivated"), 0);

    frozen.lift().await;
    let e = eventually("the Event", Duration::from_secs(30), || async {
        let e = events(c, ns, "queued").await;
        (count(&e, "WorkloadDeactivated") == 1).then_some(e)
    })
    .await;
    assert!(e.iter().any(|(_, note, _)| note.contains("deactivated by this intent")), "{e:?}");
    let s = eventually("counted", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "nan").await;
        s.action_counts.contains_key("deactivate/already_done").then_some(s)
    })
    .await;
    let recorded: Vec<String> = serde_json::from_str(
        &job(c, ns, "queued").await.annotations()[trainwarden_controller::INTENTS_ANNOTATION],
    )
    .unwrap();
    assert_eq!(recorded, on_workload, "the same intent, now recorded on the TrainJob");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s2 = policy_status(c, ns, "nan").await;
    assert_eq!(s2.action_counts.get("deactivate/already_done"), Some(&1), "{:?}", s2.action_counts);
    assert!(
        !s2.action_counts.contains_key("deactivate/done")
            && !s2.action_counts.contains_key("deactivate/unchanged")
    );
    // 8 GPUs (assumeGpus) for the hour the job still expected to run, at $10: once.
    let saved = s2.gpu_hours_saved.expect("savings counted");
    assert!((7.9..=8.0).contains(&saved), "{saved} GPU-hours ({s:?})");
    let listed = s2.counted_actions.expect("the status lists the counted suspension");
    assert_eq!(listed.actions.iter().map(|a| a.id.clone()).collect::<Vec<_>>(), on_workload);
    assert_eq!(count(&events(c, ns, "queued").await, "WorkloadDeactivated"), 1);
    controller.stop().await;
}

/// Issue 17 part 2: a queue-aware rule leaves an idle Kueue job alone while nobody waits and stops it once
/// GPUs are pending in a sibling ClusterQueue of its cohort; Workloads with quota, or in another cohort, do
/// not count. Kueue's objects are written here as Kueue writes them (no Kueue runs on this plane).
#[tokio::test]
async fn a_queue_aware_rule_stops_a_kueue_job_only_once_others_wait_in_its_cohort() {
    let ctx = setup!("controller_kueue_queues");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    support::install_kueue_queue_crds(c).await;
    let kueue = |kind: &str, plural: &str| {
        kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("kueue.x-k8s.io", "v1beta2", kind),
            plural,
        )
    };
    let create = |api: Api<DynamicObject>, body: serde_json::Value| async move {
        let obj: DynamicObject = serde_json::from_value(body).unwrap();
        api.create(&PostParams::default(), &obj).await.expect("create a Kueue object")
    };
    // ClusterQueues are cluster-scoped: named after this test's namespace.
    let cqs = || Api::<DynamicObject>::all_with(c.clone(), &kueue("ClusterQueue", "clusterqueues"));
    for (cq, cohort) in [("mine", "research"), ("sibling", "research"), ("elsewhere", "prod")] {
        let cohort = format!("{ns}-{cohort}");
        create(
            cqs(),
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": format!("{ns}-{cq}")}, "spec": {"cohortName": cohort}}),
        )
        .await;
    }
    let lqs = || Api::<DynamicObject>::namespaced_with(c.clone(), ns, &kueue("LocalQueue", "localqueues"));
    for (lq, cq) in [("team", "mine"), ("neighbours", "sibling"), ("prod", "elsewhere")] {
        create(
            lqs(),
            json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": lq, "namespace": ns}, "spec": {"clusterQueue": format!("{ns}-{cq}")}}),
        )
        .await;
    }
    let rule = "    - {name: others-wait, when: 'queue_pending_gpus() >= 8.0', actions: [{suspend: {}}]}\n";
    apply_policy(c, ns, &policy("reclaim", "Enforce", rule)).await;
    let tj = create_trainjob(c, ns, "idle", &[("kueue.x-k8s.io/queue-name", "team")]).await;
    let workloads = || Api::<DynamicObject>::namespaced_with(c.clone(), ns, &kueue("Workload", "workloads"));
    let workload = |name: &str, queue: &str, pods: u32| {
        json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"queueName": queue, "podSets": [{"name": "node", "count": pods, "template": {"spec": {
                "containers": [{"name": "trainer", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}]}})
    };
    let admit = |name: String| async move {
        let status = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "status": {"conditions": [{
            "type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "admitted",
            "lastTransitionTime": "2026-12-01T00:00:00Z"}]}});
        workloads()
            .patch_status(&name, &PatchParams::apply("kueue-admission").force(), &Patch::Apply(&status))
            .await
            .expect("reserve quota");
    };
    // The job's own Workload, admitted (it runs).
    let mut own = workload("trainjob-idle-1a2b3", "team", 2);
    own["metadata"]["ownerReferences"] = json!([{"apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob", "name": "idle", "uid": tj.uid().unwrap(), "controller": true}]);
    create(workloads(), own).await;
    admit("trainjob-idle-1a2b3".into()).await;
    // Waiting, but in another cohort; and admitted in the sibling queue: nobody waits behind the job.
    create(workloads(), workload("prod-waits", "prod", 4)).await;
    create(workloads(), workload("sibling-runs", "neighbours", 4)).await;
    admit("sibling-runs".into()).await;
    let controller = start(c, config_for(ns));
    report(c, ns, "idle", seconds_ago(1), "0.9", 10).await;
    let reading = eventually("the KueueQueues condition", Duration::from_secs(15), || async {
        let s = policy_status(c, ns, "reclaim").await;
        s.conditions.into_iter().find(|c| c.type_ == "KueueQueues" && c.status == "True")
    })
    .await;
    assert!(
        reading.message.starts_with("Kueue v1beta2: 1 pending Workload, 3 LocalQueues, "),
        "{}",
        reading.message
    );
    let active = || async {
        workloads().get("trainjob-idle-1a2b3").await.unwrap().data.pointer("/spec/active")
            != Some(&json!(false))
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(active().await, "nobody waits in the job's cohort: left alone");

    // 2 pods × 4 GPUs queue in the sibling ClusterQueue of the same cohort.
    create(workloads(), workload("neighbour-waits", "neighbours", 2)).await;
    eventually("the Workload deactivated", Duration::from_secs(15), || async {
        (!active().await).then_some(())
    })
    .await;
    let e = eventually("the Event", Duration::from_secs(10), || async {
        let e = events(c, ns, "idle").await;
        (count(&e, "WorkloadDeactivated") == 1).then_some(e)
    })
    .await;
    assert!(e.iter().any(|(_, note, _)| note.contains("others-wait")), "{e:?}");
    // Once, still, after more demand updates and evaluation rounds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(count(&events(c, ns, "idle").await, "WorkloadDeactivated"), 1, "deactivated once");
    controller.stop().await;
}

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
/// reads: a first line, each progress report once (a watch re-delivers them), and the deletion.
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
        read(file.clone()).filter(|r| lines_with_progress(r) == [0.9, 0.7] && r.len() == 4)
    })
    .await;
    let trainwarden_core::StreamRecord::Update(first) = &records[0] else { unreachable!() };
    assert_eq!(first.labels.as_ref().and_then(|l| l.get("team")).map(String::as_str), Some("fraud"));
    assert_eq!(first.phase, Some(trainwarden_core::JobPhase::Running));
    let trainwarden_core::StreamRecord::Update(relabel) = &records[3] else { unreachable!() };
    assert!(relabel.sample.is_none() && relabel.labels.as_ref().is_some_and(|l| l.contains_key("x")));
    trainjob_api(c.clone(), Some(ns)).delete("recorded", &Default::default()).await.expect("delete");
    eventually("the deletion recorded", Duration::from_secs(15), || async {
        read(file.clone())
            .filter(|r| matches!(r.last(), Some(trainwarden_core::StreamRecord::Update(u)) if u.deleted))
    })
    .await;
    controller.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

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
