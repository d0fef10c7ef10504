//! Kueue-managed jobs: a suspension is the Workload's deactivation, found done by its intent after a
//! lost record; a queue-aware rule acts only once others wait in the job's cohort.

use super::*;
use trainwarden_testkit::objects::workload;

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
    let workload = workload("v1beta1", ns, "trainjob-queued-1a2b3", "gpu-queue")
        .owned_by("queued", &tj.uid().unwrap())
        .active(true)
        .pod_set("node", 2, None)
        .build();
    let workload: DynamicObject = serde_json::from_value(workload).unwrap();
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
    let workload = workload("v1beta1", ns, "trainjob-queued-9f8e7", "gpu-queue")
        .owned_by("queued", &tj.uid().unwrap())
        .active(true)
        .pod_set("node", 2, None)
        .build();
    let workload: DynamicObject = serde_json::from_value(workload).unwrap();
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
    let queued = |name: &str, queue: &str, pods: u32| {
        workload("v1beta2", ns, name, queue).pod_set("node", pods, Some(4))
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
    let own = queued("trainjob-idle-1a2b3", "team", 2).owned_by("idle", &tj.uid().unwrap()).build();
    create(workloads(), own).await;
    admit("trainjob-idle-1a2b3".into()).await;
    // Waiting, but in another cohort; and admitted in the sibling queue: nobody waits behind the job.
    create(workloads(), queued("prod-waits", "prod", 4).build()).await;
    create(workloads(), queued("sibling-runs", "neighbours", 4).build()).await;
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
    create(workloads(), queued("neighbour-waits", "neighbours", 2).build()).await;
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
