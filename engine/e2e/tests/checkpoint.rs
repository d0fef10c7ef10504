//! Checkpoint requests against a real kube-apiserver + etcd (sdk/python/PROTOCOL.md): the controller runs
//! in-process; the TrainJobs' JobSets and pods are written as Trainer and JobSet write them (no kubelet runs
//! here, so a pod is an object whose annotations are what counts); the job's answer is written through the
//! status subresource exactly as Kubeflow's status server writes it. What is checked: the request annotation
//! lands on the pods of the TrainJob's own JobSet only (never another job's, never those of a deleted
//! TrainJob of the same name, never finished ones), the acknowledgement is read from the reported status, a
//! new leader does not write a request in flight again and still recognises its answer, and `suspend:
//! {checkpointFirst}` suspends only after the answer, or after its timeout and says so.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainwarden_core::{CHECKPOINT_ANNOTATION, CHECKPOINT_REQUEST_ANNOTATION, RequestOutcome, RequestRecord};
use trainwarden_e2e::controller::*;
use trainwarden_e2e::plugin::plugin;
use trainwarden_kube::trainjob::{TRAINER_STATUS_FIELD_MANAGER, trainjob_api};
use trainwarden_testkit::apiserver::install_jobset_crd;
use trainwarden_testkit::setup;

const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
const JOBSET_UID: &str = "jobset.sigs.k8s.io/jobset-uid";

fn jobset_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let resource = kube::api::ApiResource {
        group: "jobset.x-k8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "jobset.x-k8s.io/v1alpha2".into(),
        kind: "JobSet".into(),
        plural: "jobsets".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The JobSet Trainer creates for `trainjob` (same name, controlled by it); returns its uid.
async fn create_jobset(client: &Client, ns: &str, trainjob: &DynamicObject) -> String {
    let name = trainjob.name_any();
    let jobset: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "ownerReferences": [{
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name,
                "uid": trainjob.uid().unwrap(), "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {"replicatedJobs": []},
    }))
    .unwrap();
    let created =
        jobset_api(client, ns).create(&PostParams::default(), &jobset).await.expect("create JobSet");
    created.uid().unwrap()
}

/// A pod as JobSet creates it (labelled with the JobSet's name and uid), mounting its annotations through a
/// downward-API volume as examples/checkpoint/ does; `phase`, when given, is written to its status.
async fn create_pod(
    client: &Client,
    ns: &str,
    name: &str,
    jobset: &str,
    jobset_uid: &str,
    phase: Option<&str>,
) {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {JOBSET_NAME: jobset, JOBSET_UID: jobset_uid}},
        "spec": {
            "containers": [{
                "name": "node", "image": "trainwarden-training:test",
                "volumeMounts": [{"name": "trainwarden-podinfo", "mountPath": "/etc/trainwarden", "readOnly": true}],
            }],
            "volumes": [{"name": "trainwarden-podinfo", "downwardAPI": {"items": [
                {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}
            ]}}],
        },
    }))
    .unwrap();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    api.create(&PostParams::default(), &pod).await.expect("create pod");
    if let Some(phase) = phase {
        let status = json!({"status": {"phase": phase}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod phase");
    }
}

async fn pod_request(client: &Client, ns: &str, name: &str) -> Option<Value> {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get(name).await.expect("get pod");
    pod.annotations().get(CHECKPOINT_REQUEST_ANNOTATION).map(|v| serde_json::from_str(v).expect("JSON value"))
}

fn record(job: &DynamicObject) -> Option<RequestRecord> {
    job.annotations().get(CHECKPOINT_ANNOTATION).map(|t| RequestRecord::parse(t).expect("the record reads"))
}

/// A report as the training process sends it through Kubeflow's status server: progress, the loss and, once
/// it has saved, its last checkpoint (`checkpoint_step`, `checkpoint_request_id`).
async fn report_checkpoint(
    client: &Client,
    ns: &str,
    name: &str,
    progress: i64,
    checkpoint: Option<(u64, u64)>,
) {
    let mut metrics = vec![json!({"name": "loss", "value": "1.5"})];
    if let Some((step, id)) = checkpoint {
        metrics.push(json!({"name": "checkpoint_step", "value": step.to_string()}));
        metrics.push(json!({"name": "checkpoint_request_id", "value": id.to_string()}));
    }
    let body = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "status": {"trainerStatus": {
            "progressPercentage": progress,
            "estimatedRemainingSeconds": 3600,
            "metrics": metrics,
            "lastUpdatedTime": seconds_ago(0).strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }},
    });
    trainjob_api(client.clone(), Some(ns))
        .patch_status(name, &PatchParams::apply(TRAINER_STATUS_FIELD_MANAGER).force(), &Patch::Apply(&body))
        .await
        .expect("report progress");
}

/// The request the pod carries, once it carries one: its id.
async fn requested_on(client: &Client, ns: &str, pod: &str) -> u64 {
    let value =
        eventually(&format!("a checkpoint request on pod {pod}"), Duration::from_secs(20), || async {
            pod_request(client, ns, pod).await
        })
        .await;
    assert!(value["reason"].as_str().unwrap().contains("(rule save)"), "{value}");
    assert!(value["requestedAt"].as_str().unwrap().ends_with('Z'), "{value}");
    value["id"].as_u64().expect("an integer id")
}

fn checkpoint_policy(actions: &str) -> String {
    policy(
        "ckpt",
        "Enforce",
        &format!("    - {{name: save, when: 'progress() >= 10.0', actions: [{actions}]}}\n"),
    )
}

#[tokio::test]
async fn the_request_reaches_only_the_jobs_own_running_pods_and_its_answer_is_read_from_status() {
    let ctx = setup!("checkpoint_pods");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    install_jobset_crd(c).await;
    apply_policy(c, ns, &checkpoint_policy("{checkpoint: {timeout: 5m}}")).await;
    let ft = create_trainjob(c, ns, "ft", &[]).await;
    let other = create_trainjob(c, ns, "other", &[]).await;
    let ft_jobset = create_jobset(c, ns, &ft).await;
    let other_jobset = create_jobset(c, ns, &other).await;
    create_pod(c, ns, "ft-node-0", "ft", &ft_jobset, Some("Running")).await;
    create_pod(c, ns, "ft-node-1", "ft", &ft_jobset, None).await;
    create_pod(c, ns, "ft-initializer", "ft", &ft_jobset, Some("Succeeded")).await;
    // A pod of an earlier TrainJob `ft`, deleted and created again: same JobSet name, another JobSet uid.
    create_pod(c, ns, "ft-old-node-0", "ft", "00000000-0000-0000-0000-000000000000", Some("Running")).await;
    create_pod(c, ns, "other-node-0", "other", &other_jobset, Some("Running")).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "ckpt", 2).await;

    report_checkpoint(c, ns, "ft", 10, None).await;
    let id = requested_on(c, ns, "ft-node-0").await;
    assert_eq!(
        requested_on(c, ns, "ft-node-1").await,
        id,
        "every unfinished pod of the job gets the same request"
    );
    tokio::time::sleep(SETTLE).await;
    for untouched in ["ft-initializer", "ft-old-node-0", "other-node-0"] {
        assert_eq!(pod_request(c, ns, untouched).await, None, "{untouched} must not be touched");
    }
    let pending = record(&job(c, ns, "ft").await).expect("the TrainJob records the request");
    assert_eq!(pending.pending().map(|r| r.id), Some(id));
    assert_eq!(pending.last_id, id);
    events_once_there(c, ns, "ft", "CheckpointRequested", 1).await;

    // The job's own checkpoint (id 0) and an answer to a request never written do not acknowledge it.
    report_checkpoint(c, ns, "ft", 11, Some((100, 0))).await;
    report_checkpoint(c, ns, "ft", 12, Some((110, id + 1))).await;
    wait_until_evaluated(c, ns, "ckpt", "ft", 12).await;
    assert_eq!(record(&job(c, ns, "ft").await).unwrap().pending().map(|r| r.id), Some(id));
    assert!(pod_request(c, ns, "ft-node-0").await.is_some());

    report_checkpoint(c, ns, "ft", 13, Some((420, id))).await;
    let settled = eventually("the acknowledgement recorded", Duration::from_secs(20), || async {
        record(&job(c, ns, "ft").await).filter(|r| r.outcome.is_some())
    })
    .await;
    assert!(
        matches!(settled.outcome, Some(RequestOutcome::Acknowledged { step: 420, .. })),
        "{:?}",
        settled.outcome
    );
    assert_eq!(pod_request(c, ns, "ft-node-0").await, None, "the answered request leaves the pods");
    assert_eq!(pod_request(c, ns, "ft-node-1").await, None);
    let events = events_once_there(c, ns, "ft", "CheckpointSaved", 1).await;
    let saved = events.iter().find(|e| e.0 == "CheckpointSaved").unwrap();
    assert!(
        saved.1.contains(&format!("checkpoint request {id} acknowledged: saved at step 420")),
        "{}",
        saved.1
    );
    let status = eventually("the action counted", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "ckpt").await;
        s.action_counts.contains_key("checkpoint/done").then_some(s)
    })
    .await;
    assert_eq!(status.action_counts.get("checkpoint/done"), Some(&1));
    assert!(!suspended(&job(c, ns, "ft").await), "a checkpoint keeps the job running");
    controller.stop().await;
}

#[tokio::test]
async fn a_new_leader_does_not_repeat_a_request_in_flight_and_recognises_its_answer() {
    let ctx = setup!("checkpoint_failover");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    install_jobset_crd(c).await;
    apply_policy(c, ns, &checkpoint_policy("{checkpoint: {timeout: 10m}}")).await;
    let ft = create_trainjob(c, ns, "ft", &[]).await;
    let jobset = create_jobset(c, ns, &ft).await;
    create_pod(c, ns, "ft-node-0", "ft", &jobset, Some("Running")).await;
    let first = start(c, config_for(ns));
    wait_until_watching(c, ns, "ckpt", 1).await;
    report_checkpoint(c, ns, "ft", 10, None).await;
    let id = requested_on(c, ns, "ft-node-0").await;
    events_once_there(c, ns, "ft", "CheckpointRequested", 1).await;
    // The leader dies with the request in flight: nothing flushed, its intent never settled.
    first.kill();

    let second = start(c, config_for(ns));
    wait_until_watching(c, ns, "ckpt", 1).await;
    report_checkpoint(c, ns, "ft", 11, None).await;
    wait_until_evaluated(c, ns, "ckpt", "ft", 11).await;
    tokio::time::sleep(SETTLE).await;
    let still = record(&job(c, ns, "ft").await).unwrap();
    assert_eq!((still.last_id, still.pending().map(|r| r.id)), (id, Some(id)), "no new request was written");
    assert_eq!(pod_request(c, ns, "ft-node-0").await.unwrap()["id"].as_u64(), Some(id));

    report_checkpoint(c, ns, "ft", 12, Some((77, id))).await;
    let settled =
        eventually("the acknowledgement recognised by the new leader", Duration::from_secs(20), || async {
            record(&job(c, ns, "ft").await).filter(|r| r.outcome.is_some())
        })
        .await;
    assert!(matches!(settled.outcome, Some(RequestOutcome::Acknowledged { step: 77, .. })), "{settled:?}");
    assert_eq!(pod_request(c, ns, "ft-node-0").await, None);
    let events = events_once_there(c, ns, "ft", "CheckpointSaved", 1).await;
    assert_eq!(count(&events, "CheckpointRequested"), 1, "one request, across the hand-over: {events:?}");
    second.stop().await;
}

#[tokio::test]
async fn checkpoint_first_suspends_after_the_answer_or_after_the_timeout_and_says_which() {
    let ctx = setup!("checkpoint_first");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    install_jobset_crd(c).await;
    apply_policy(
        c,
        ns,
        &checkpoint_policy("{suspend: {checkpointFirst: {timeout: 4s}, message: before the night}}")
            .replace("  rules:", "  selector: {matchLabels: {answers: \"no\"}}\n  rules:"),
    )
    .await;
    let long = checkpoint_policy("{suspend: {checkpointFirst: {timeout: 10m}}}")
        .replace("name: ckpt", "name: ckpt-answered")
        .replace("  rules:", "  selector: {matchLabels: {answers: \"yes\"}}\n  rules:");
    apply_policy(c, ns, &long).await;
    let answering = create_trainjob(c, ns, "answering", &[("answers", "yes")]).await;
    let silent = create_trainjob(c, ns, "silent", &[("answers", "no")]).await;
    let answering_jobset = create_jobset(c, ns, &answering).await;
    let silent_jobset = create_jobset(c, ns, &silent).await;
    create_pod(c, ns, "answering-node-0", "answering", &answering_jobset, Some("Running")).await;
    create_pod(c, ns, "silent-node-0", "silent", &silent_jobset, Some("Running")).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "ckpt", 1).await;
    wait_until_watching(c, ns, "ckpt-answered", 1).await;

    report_checkpoint(c, ns, "answering", 10, None).await;
    report_checkpoint(c, ns, "silent", 10, None).await;
    let id = requested_on(c, ns, "answering-node-0").await;
    requested_on(c, ns, "silent-node-0").await;
    // Waiting for the answer: not suspended, however long the save takes (its own timeout is 10 minutes).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!suspended(&job(c, ns, "answering").await), "suspended before the checkpoint was acknowledged");
    report_checkpoint(c, ns, "answering", 11, Some((1234, id))).await;
    let events = events_once_there(c, ns, "answering", "Suspended", 1).await;
    let note = &events.iter().find(|e| e.0 == "Suspended").unwrap().1;
    assert!(note.contains("after its checkpoint at step 1234, acknowledged"), "{note}");
    assert!(suspended(&job(c, ns, "answering").await));
    assert_eq!(count(&events, "CheckpointSaved"), 1, "{events:?}");
    assert_eq!(pod_request(c, ns, "answering-node-0").await, None);

    // The silent job never answers: suspended anyway once the 4 s pass, and the Events say so.
    let events = events_once_there(c, ns, "silent", "Suspended", 1).await;
    let note = &events.iter().find(|e| e.0 == "Suspended").unwrap().1;
    assert!(note.contains("before the night (WITHOUT a new checkpoint: request"), "{note}");
    assert_eq!(count(&events, "CheckpointTimedOut"), 1, "{events:?}");
    let timed_out = &events.iter().find(|e| e.0 == "CheckpointTimedOut").unwrap().1;
    assert!(timed_out.contains("not acknowledged within 4s"), "{timed_out}");
    let settled = record(&job(c, ns, "silent").await).unwrap();
    assert!(matches!(settled.outcome, Some(RequestOutcome::TimedOut { .. })), "{settled:?}");
    assert_eq!(pod_request(c, ns, "silent-node-0").await, None);
    controller.stop().await;
}

/// `kubectl trainwarden checkpoint JOB` records a request the controller carries to the pods like a policy's;
/// the answer is recorded, and `explain` and `get -o wide` show the job's last checkpoint and the request's
/// outcome.
#[tokio::test]
async fn a_request_by_hand_goes_through_the_same_channel_and_explain_shows_the_outcome() {
    let ctx = setup!("checkpoint_by_hand");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    install_jobset_crd(c).await;
    // A policy that selects the job and never fires: the controller follows the job.
    apply_policy(
        c,
        ns,
        &policy(
            "watch",
            "Enforce",
            "    - {name: never, when: 'progress() > 200.0', actions: [{checkpoint: {}}]}\n",
        ),
    )
    .await;
    let ft = create_trainjob(c, ns, "ft", &[]).await;
    let jobset = create_jobset(c, ns, &ft).await;
    create_pod(c, ns, "ft-node-0", "ft", &jobset, Some("Running")).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "watch", 1).await;
    report_checkpoint(c, ns, "ft", 10, None).await;

    let (ok, out, err) = plugin(&ctx, &["checkpoint", "ft", "--timeout", "5m"]);
    assert!(ok, "{err}");
    assert!(out.contains("checkpoint request ") && out.contains(" recorded"), "{out}");
    let id = eventually("the manual request on the pod", Duration::from_secs(20), || async {
        pod_request(c, ns, "ft-node-0").await
    })
    .await["id"]
        .as_u64()
        .unwrap();
    let (ok, again, err) = plugin(&ctx, &["checkpoint", "ft"]);
    assert!(ok, "{err}");
    assert!(
        again.contains(&format!("checkpoint request {id} (made")) && again.contains("still pending"),
        "{again}"
    );

    report_checkpoint(c, ns, "ft", 11, Some((900, id))).await;
    eventually("the manual request acknowledged", Duration::from_secs(20), || async {
        record(&job(c, ns, "ft").await).filter(|r| r.outcome.is_some())
    })
    .await;
    assert_eq!(pod_request(c, ns, "ft-node-0").await, None);
    events_once_there(c, ns, "ft", "CheckpointSaved", 1).await;
    let (ok, explained, err) = plugin(&ctx, &["explain", "ft"]);
    assert!(ok, "{err}");
    assert!(
        explained.contains(&format!("last checkpoint: step 900 (answering request {id})")),
        "{explained}"
    );
    assert!(explained.contains(&format!("checkpoint request {id} at")), "{explained}");
    assert!(
        explained.contains("acknowledged at step 900")
            && explained.contains("kubectl trainwarden checkpoint"),
        "{explained}"
    );
    let (ok, wide, err) = plugin(&ctx, &["get", "-o", "wide"]);
    assert!(ok, "{err}");
    assert!(wide.contains("CHECKPOINT") && wide.contains("900 ("), "{wide}");
    controller.stop().await;
}
