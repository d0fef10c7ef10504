//! The RHOAI 3.4 TrainJob CRD, where `spec.trainer` is mutable, so a `scale` action can act: suspend, change
//! `spec.trainer.numNodes`, resume. It has the upstream CRD's name, so this test binary runs its own control
//! plane (the shared one keeps the upstream CRD, where the same action is refused; see controller.rs).

use trainwarden_e2e::controller::shrink_policy;
use trainwarden_testkit::apiserver as support;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::watch;
use trainwarden_controller::ControllerConfig;
use trainwarden_core::TRAINER_STATUS_ANNOTATION;
use trainwarden_kube::ProgressPolicy;
use trainwarden_kube::trainjob::trainjob_api;

#[tokio::test]
async fn on_the_rhoai_crd_a_scale_action_suspends_resizes_and_resumes() {
    let plane = match support::start_private_plane() {
        Ok(p) => p,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("no private control plane (CI=true, so this fails): {e}")
        }
        Err(e) if std::env::var("TRAINWARDEN_SKIP_APISERVER_TESTS").is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPED (TRAINWARDEN_SKIP_APISERVER_TESTS=1): {e}");
            return;
        }
        Err(e) => panic!("no private control plane: {e}"),
    };
    let c = trainwarden_kube::client::client_from_kubeconfig(&plane.kubeconfig).await.expect("client");
    support::apply_crds(&c).await.expect("our CRDs");
    // Replace the upstream TrainJob CRD with RHOAI's.
    let rhoai: CustomResourceDefinition = serde_saphyr::from_str(&support::fixture(
        "fixtures/kubeflow/rhoai-3.4/crds/trainer.kubeflow.org_trainjobs.yaml",
    ))
    .expect("RHOAI TrainJob CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let mut rhoai = rhoai;
    rhoai.metadata.managed_fields = None;
    rhoai.metadata.resource_version = None;
    crds.patch(&rhoai.name_any(), &PatchParams::apply("trainwarden-tests").force(), &Patch::Apply(&rhoai))
        .await
        .expect("install the RHOAI CRD");
    support::wait_established(&crds, "trainjobs.trainer.kubeflow.org").await;

    let ns = "rhoai-scale";
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c.clone());
    namespaces
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .expect("namespace");
    let policy: ProgressPolicy = serde_saphyr::from_str(&shrink_policy()).unwrap();
    Api::<ProgressPolicy>::namespaced(c.clone(), ns)
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy");
    let mut job: DynamicObject =
        serde_saphyr::from_str(&support::fixture("fixtures/kubeflow/payloads/rhoai-trainjob-annotated.yaml"))
            .expect("RHOAI TrainJob");
    job.metadata.namespace = Some(ns.into());
    job.metadata.annotations.as_mut().map(|a| a.remove(TRAINER_STATUS_ANNOTATION));
    job.data.as_object_mut().map(|o| o.remove("status"));
    let name = job.name_any();
    let jobs = trainjob_api(c.clone(), Some(ns));
    let created = jobs.create(&PostParams::default(), &job).await.expect("create the RHOAI TrainJob");
    assert_eq!(created.data.pointer("/spec/trainer/numNodes"), Some(&json!(2)));

    let (stop, rx) = watch::channel(false);
    let config = ControllerConfig {
        http_addr: None,
        namespace: Some(ns.into()),
        leader_election: false,
        eval_interval: Duration::from_secs(1),
        status_interval: Duration::from_millis(200),
        ..ControllerConfig::default()
    };
    let controller = tokio::spawn(trainwarden_controller::run(c.clone(), config, rx));
    // The controller watches: its status says the policy selects the job.
    let policies: Api<ProgressPolicy> = Api::namespaced(c.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while policies.get("shrink").await.ok().and_then(|p| p.status?.matched_jobs) != Some(1) {
        assert!(tokio::time::Instant::now() < deadline, "the controller never selected the job");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The RHOAI controller's poll: the loss went NaN (null in the annotation).
    let nan = support::fixture("fixtures/kubeflow/payloads/rhoai-trainerStatus-annotation.nan-loss.json");
    let patch = json!({"metadata": {"annotations": {TRAINER_STATUS_ANNOTATION: nan.trim()}}});
    jobs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("RHOAI poll");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let scaled = loop {
        let j = jobs.get(&name).await.expect("get");
        let nodes = j.data.pointer("/spec/trainer/numNodes").cloned();
        let suspended = j.data.pointer("/spec/suspend").and_then(Value::as_bool).unwrap_or(false);
        if nodes == Some(json!(1)) && !suspended {
            break j;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not resized and resumed: numNodes {nodes:?}, suspend {suspended}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // trainwarden owns numNodes now (server-side apply) and gave spec.suspend back as false: resumed.
    assert!(
        scaled.managed_fields().iter().any(|m| m.manager.as_deref() == Some(trainwarden_kube::FIELD_MANAGER))
    );
    // The Event is written after the resume the loop above saw.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let scaled_event = loop {
        let events: Vec<Event> =
            Api::<Event>::namespaced(c.clone(), ns).list(&ListParams::default()).await.expect("events").items;
        if let Some(e) = events.into_iter().find(|e| e.reason.as_deref() == Some("Scaled")) {
            break e;
        }
        assert!(tokio::time::Instant::now() < deadline, "no Scaled Event");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(scaled_event.note.as_deref().unwrap_or("").contains("numNodes 2 → 1"), "{scaled_event:?}");
    let _ = stop.send(true);
    tokio::time::timeout(Duration::from_secs(10), controller)
        .await
        .expect("the controller stops within 10 s")
        .expect("the controller task did not panic")
        .expect("the controller ran without an error");
}
