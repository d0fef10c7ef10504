//! The leader lost mid-action: killed between firing and acting (1), and in the middle of a scale (2).

use super::*;

/// 1. The leader is lost between firing and acting: its connection black-holed just before the deadline
/// (it fires, its writes hang), then `kill -9`. The follower, which evaluated the same firing and parked
/// it, takes the Lease and performs it: once.
#[tokio::test]
async fn the_leader_killed_between_firing_and_acting_is_replaced_and_the_job_suspended_once() {
    let Some(s) = scene("leader-killed").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    apply_policy(c, ns, &stall_policy()).await;
    let mut a = Replica::start(&s, "replica-a", true);
    let mut b = Replica::start(&s, "replica-b", true);
    wait_for_leader(c, ns, &["replica-a", "replica-b"]).await;
    let leader = settled_leader(c, ns, &[&a, &b]).await;
    let (leading, following) = if leader == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };
    wait_until_watching(c, ns, "stall", 0).await;
    let (names, deadline) = stalling_jobs(c, ns, "job", 1).await;
    wait_until_watching(c, ns, "stall", 1).await;
    assert!(
        Timestamp::now() < Timestamp::from_second(deadline.as_second() - 1).unwrap(),
        "too slow to set up"
    );
    sleep_until(Timestamp::from_second(deadline.as_second() - 1).unwrap()).await;
    // Its Lease stays valid past the deadline (renewed up to a second ago, 4 s long): it fires, and its
    // writes hang in the black hole.
    leading.proxy.black_hole();
    sleep_until(deadline).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    leading.kill9();
    eprintln!(
        "black-holed the leader {} a second before the deadline, killed it 0.5 s after",
        leading.identity
    );
    let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(30)).await;
    assert_eq!(lease_holder(c, ns).await.as_deref(), Some(following.identity.as_str()));
    assert!(following.metric("trainwarden_actions_inherited_total") >= 1.0, "the new leader inherited it");
    let v = verdict(c, ns, &names).await;
    let status = policy_status(c, ns, "stall").await;
    assert_eq!(status.action_counts.values().sum::<i64>(), 1, "{:?}", status.action_counts);
    record(&Row {
        scenario: "1. leader killed between firing and acting (time after the deadline)",
        expected: 1,
        performed: v.performed,
        doubled: v.doubled,
        lost: v.lost,
        recovered_in: since(deadline, Some(seen)),
    });
}

/// 2. The leader killed in the middle of a scale: its first write (suspend and resize, marked
/// `scale-pending` with the intent id) landed, its second (resume) is refused by a real admission policy, and
/// it is `kill -9`ed while it retries. The follower that takes over finishes the scale: resumed once, one
/// `Scaled` Event, the intent recorded.
#[tokio::test]
async fn the_leader_killed_in_the_middle_of_a_scale_is_replaced_and_the_scale_finished_once() {
    let Some(s) = scene_on(&RHOAI_PLANE, "scale-killed").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    install_rhoai_trainjob_crd(c).await;
    apply_policy(c, ns, &shrink_policy()).await;
    let name = create_rhoai_trainjob(c, ns, None).await;
    let probe = create_rhoai_trainjob(c, ns, Some("probe")).await;
    // Resuming is refused: a write that takes spec.suspend from true to false.
    let resume = "has(oldObject.spec.suspend) && oldObject.spec.suspend && !(has(object.spec.suspend) && object.spec.suspend)";
    let refusal = TrainJobRefusal::install(c, ns, &format!("{ns}-no-resume"), resume).await;
    let jobs = trainjob_api(c.clone(), Some(ns));
    let set_suspend = |v: bool| serde_json::json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "spec": {"suspend": v}});
    let params = kube::api::PatchParams::apply("probe").force();
    // Until the policy is enforced a resume goes through: suspend the probe again before each try.
    eventually("the admission policy enforced", Duration::from_secs(20), || async {
        jobs.patch(&probe, &params, &kube::api::Patch::Apply(&set_suspend(true)))
            .await
            .expect("suspend the probe");
        let e = jobs.patch(&probe, &params, &kube::api::Patch::Apply(&set_suspend(false))).await.err()?;
        TrainJobRefusal::refused(&e).then_some(())
    })
    .await;

    let mut a = Replica::start(&s, "replica-a", true);
    let mut b = Replica::start(&s, "replica-b", true);
    wait_for_leader(c, ns, &["replica-a", "replica-b"]).await;
    let leader = settled_leader(c, ns, &[&a, &b]).await;
    let (leading, following) = if leader == 0 { (&mut a, &mut b) } else { (&mut b, &mut a) };
    wait_until_watching(c, ns, "shrink", 2).await;
    // The RHOAI controller's poll: the loss went NaN (null in the annotation).
    let nan = support::fixture("fixtures/kubeflow/payloads/rhoai-trainerStatus-annotation.nan-loss.json");
    let patch = serde_json::json!({"metadata": {"annotations": {trainwarden_core::TRAINER_STATUS_ANNOTATION: nan.trim()}}});
    jobs.patch(&name, &Default::default(), &kube::api::Patch::Merge(&patch)).await.expect("RHOAI poll");
    // Half done: suspended and resized, the pending mark set, the resume refused (its Event says so).
    let pending =
        eventually("suspended and resized, the resume refused", Duration::from_secs(20), || async {
            let j = job(c, ns, &name).await;
            let resized = j.data.pointer("/spec/trainer/numNodes") == Some(&serde_json::json!(1));
            let mark = j.annotations().get("trainwarden.dev/scale-pending").cloned();
            let refused =
                events(c, ns, &name).await.iter().any(|(reason, _, _)| reason == "ScaleResumeFailed");
            (resized && suspended(&j) && refused).then_some(mark?)
        })
        .await;
    leading.kill9();
    let killed = Timestamp::now();
    eprintln!("killed the leader {} in the middle of the scale (intent {pending})", leading.identity);
    refusal.lift().await;
    let finished = eventually("resumed by the new leader", Duration::from_secs(40), || async {
        let j = job(c, ns, &name).await;
        (!suspended(&j) && !j.annotations().contains_key("trainwarden.dev/scale-pending")).then_some(j)
    })
    .await;
    let recovered = Timestamp::now();
    assert_eq!(finished.data.pointer("/spec/trainer/numNodes"), Some(&serde_json::json!(1)));
    let recorded: Vec<String> = finished
        .annotations()
        .get(INTENTS_ANNOTATION)
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default();
    assert_eq!(recorded, std::slice::from_ref(&pending), "the interrupted intent, recorded once");
    assert_eq!(lease_holder(c, ns).await.as_deref(), Some(following.identity.as_str()));
    // The Scaled Event is the last step: once it is there, a repeat would be too.
    events_once_there(c, ns, &name, "Scaled", 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let e = events(c, ns, &name).await;
    let scaled: Vec<_> = e.iter().filter(|(reason, _, _)| reason == "Scaled").collect();
    assert_eq!(scaled.len(), 1, "{e:?}");
    assert_eq!(scaled[0].2, following.identity, "finished by the new leader: {e:?}");
    assert!(scaled[0].1.contains("interrupted before resuming"), "{e:?}");
    let status = eventually("counted", Duration::from_secs(10), || async {
        let st = policy_status(c, ns, "shrink").await;
        st.action_counts.contains_key("scale/done").then_some(st)
    })
    .await;
    assert_eq!(status.action_counts.get("scale/done"), Some(&1), "{:?}", status.action_counts);
    let j = job(c, ns, &name).await;
    assert!(!suspended(&j) && j.data.pointer("/spec/trainer/numNodes") == Some(&serde_json::json!(1)));
    record(&Row {
        scenario: "2. leader killed in the middle of a scale: resized, resume refused (time after the kill)",
        expected: 1,
        performed: 1,
        doubled: scaled.len() - 1,
        lost: 0,
        recovered_in: since(killed, Some(recovered)),
    });
}

/// Replaces the upstream TrainJob CRD with RHOAI 3.4's (mutable `spec.trainer`).
async fn install_rhoai_trainjob_crd(c: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let mut rhoai: CustomResourceDefinition = serde_saphyr::from_str(&support::fixture(
        "fixtures/kubeflow/rhoai-3.4/crds/trainer.kubeflow.org_trainjobs.yaml",
    ))
    .expect("RHOAI TrainJob CRD");
    rhoai.metadata.managed_fields = None;
    rhoai.metadata.resource_version = None;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let params = kube::api::PatchParams::apply("trainwarden-tests").force();
    crds.patch(&rhoai.name_any(), &params, &kube::api::Patch::Apply(&rhoai))
        .await
        .expect("install the RHOAI CRD");
    support::wait_established(&crds, "trainjobs.trainer.kubeflow.org").await;
}

/// RHOAI's example TrainJob (two nodes), without its progress, under `name` or its own; returns the name.
async fn create_rhoai_trainjob(c: &Client, ns: &str, name: Option<&str>) -> String {
    let mut job: kube::api::DynamicObject =
        serde_saphyr::from_str(&support::fixture("fixtures/kubeflow/payloads/rhoai-trainjob-annotated.yaml"))
            .expect("RHOAI TrainJob");
    job.metadata.namespace = Some(ns.into());
    if let Some(n) = name {
        job.metadata.name = Some(n.into());
    }
    job.metadata.annotations.as_mut().map(|a| a.remove(trainwarden_core::TRAINER_STATUS_ANNOTATION));
    job.data.as_object_mut().map(|o| o.remove("status"));
    let created =
        trainjob_api(c.clone(), Some(ns)).create(&PostParams::default(), &job).await.expect("create");
    assert_eq!(created.data.pointer("/spec/trainer/numNodes"), Some(&serde_json::json!(2)));
    created.name_any()
}
