//! Whole TrainJob objects: the fixtures of both flavours, phases, GPUs, Kueue, error paths.

use super::*;

/// `upstream-trainjob-with-trainerStatus.yaml` as JSON.
pub(super) fn upstream_job() -> Value {
    assert!(
        UPSTREAM_JOB_YAML.contains("name: multi-node-example") && UPSTREAM_JOB_YAML.contains("numNodes: 3")
    );
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "multi-node-example",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}
        },
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
            "suspend": false,
            "managedBy": "trainer.kubeflow.org/trainjob-controller",
            "trainer": {
                "numNodes": 3,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}},
                "command": ["torchrun", "train.py"]
            }
        },
        "status": {
            "conditions": [{
                "type": "Suspended", "status": "False", "reason": "Resumed",
                "message": "TrainJob is resumed", "lastTransitionTime": "2025-01-23T09:00:00Z"
            }],
            "jobsStatus": [{"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}],
            "trainerStatus": {
                "progressPercentage": 45,
                "estimatedRemainingSeconds": 795649,
                "metrics": [
                    {"name": "loss", "value": "0.2347"},
                    {"name": "eval_loss", "value": "0.2451"},
                    {"name": "accuracy", "value": "0.9876"},
                    {"name": "currentEpoch", "value": "2"},
                    {"name": "totalEpochs", "value": "5"}
                ],
                "lastUpdatedTime": "2025-01-23T10:30:45Z"
            }
        }
    })
}

/// The annotation value of `rhoai-trainjob-annotated.yaml`, taken from the fixture itself.
fn rhoai_yaml_annotation() -> String {
    let line = RHOAI_JOB_YAML
        .lines()
        .find_map(|l| l.trim().strip_prefix("trainer.opendatahub.io/trainerStatus: '"))
        .unwrap();
    line.strip_suffix('\'').unwrap().replace("''", "'")
}

/// `rhoai-trainjob-annotated.yaml` as JSON.
pub(super) fn rhoai_job() -> Value {
    assert!(RHOAI_JOB_YAML.contains("name: sft-llama") && RHOAI_JOB_YAML.contains("numNodes: 2"));
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "sft-llama",
            "namespace": "team-a",
            "annotations": {
                "trainer.opendatahub.io/progression-tracking": "true",
                "trainer.opendatahub.io/metrics-port": "28080",
                "trainer.opendatahub.io/metrics-poll-interval": "30",
                "trainer.opendatahub.io/trainerStatus": rhoai_yaml_annotation()
            }
        },
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}}
        },
        "status": {
            "conditions": [{
                "type": "Suspended", "status": "False", "reason": "Resumed",
                "message": "TrainJob is resumed", "lastTransitionTime": "2026-04-10T09:00:00Z"
            }]
        }
    })
}

#[test]
fn upstream_trainjob_fixture() {
    let snap = from_trainjob(&upstream_job()).unwrap();
    assert_eq!(snap.key, JobKey::new("team-a", "multi-node-example"));
    assert_eq!(snap.labels.len(), 1);
    assert!(snap.annotations.is_empty());
    assert_eq!(snap.phase, JobPhase::Running);
    assert_eq!(snap.gpus, Some(3.0));
    assert_eq!(snap.kueue_queue.as_deref(), Some("user-queue"));
    assert_eq!(snap.created_at, None);
    assert_eq!(snap.running_since, Some(ts("2025-01-23T09:00:00Z")));
    // The status copy of the KEP sample normalizes exactly like the KEP request.
    assert_eq!(snap.sample, Some(upstream(KEP)));
}

#[test]
fn rhoai_trainjob_fixture() {
    let snap = from_trainjob(&rhoai_job()).unwrap();
    assert_eq!(snap.key, JobKey::new("team-a", "sft-llama"));
    assert!(snap.labels.is_empty());
    assert_eq!(
        snap.annotations.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "trainer.opendatahub.io/metrics-poll-interval",
            "trainer.opendatahub.io/metrics-port",
            "trainer.opendatahub.io/progression-tracking",
        ]
    );
    assert_eq!(snap.phase, JobPhase::Running);
    assert_eq!(snap.gpus, Some(2.0));
    assert_eq!(snap.kueue_queue, None);
    assert_eq!(snap.running_since, Some(ts("2026-04-10T09:00:00Z")));
    let sample = snap.sample.unwrap();
    assert_eq!(sample.source, SampleSource::Annotation);
    assert_eq!(sample, from_annotation(ANN_RUNNING, AP).unwrap());
}

#[test]
fn trainer_status_is_preferred_over_the_annotation() {
    let mut job = upstream_job();
    job["metadata"]["annotations"] = json!({TRAINER_STATUS_ANNOTATION: rhoai_yaml_annotation()});
    let snap = from_trainjob(&job).unwrap();
    assert_eq!(snap.sample.unwrap().source, SampleSource::TrainerStatus);
    assert!(snap.annotations.is_empty());
    // A null trainerStatus falls back to the annotation; neither gives no sample.
    job["status"]["trainerStatus"] = Value::Null;
    assert_eq!(from_trainjob(&job).unwrap().sample.unwrap().source, SampleSource::Annotation);
    job["metadata"]["annotations"] = json!({});
    assert_eq!(from_trainjob(&job).unwrap().sample, None);
}

#[test]
fn phases() {
    let cond =
        |ty: &str, st: &str| json!({"type": ty, "status": st, "lastTransitionTime": "2026-01-02T00:00:00Z"});
    let cases = [
        (false, vec![], JobPhase::Running),
        (true, vec![], JobPhase::Suspended),
        (false, vec![cond("Suspended", "True")], JobPhase::Suspended),
        (false, vec![cond("Suspended", "False")], JobPhase::Running),
        (false, vec![cond("Suspended", "False"), cond("Complete", "True")], JobPhase::Complete),
        (true, vec![cond("Complete", "True")], JobPhase::Complete),
        (false, vec![cond("Failed", "True")], JobPhase::Failed),
        (false, vec![cond("Complete", "True"), cond("Failed", "True")], JobPhase::Failed),
        (false, vec![cond("Complete", "False"), cond("Failed", "Unknown")], JobPhase::Running),
    ];
    for (suspend, conditions, want) in cases {
        let job = json!({"metadata": {"name": "j"}, "spec": {"suspend": suspend}, "status": {"conditions": conditions}});
        assert_eq!(from_trainjob(&job).unwrap().phase, want, "{job}");
    }
}

#[test]
fn running_since() {
    let created = "2026-01-01T00:00:00Z";
    let job = |conds: Value| json!({"metadata": {"name": "j", "creationTimestamp": created}, "status": {"conditions": conds}});
    let snap = from_trainjob(&job(json!([]))).unwrap();
    assert_eq!((snap.created_at, snap.running_since), (Some(ts(created)), Some(ts(created))));
    let resumed =
        json!([{"type": "Suspended", "status": "False", "lastTransitionTime": "2026-01-03T00:00:00Z"}]);
    assert_eq!(from_trainjob(&job(resumed)).unwrap().running_since, Some(ts("2026-01-03T00:00:00Z")));
    let suspended =
        json!([{"type": "Suspended", "status": "True", "lastTransitionTime": "2026-01-03T00:00:00Z"}]);
    assert_eq!(from_trainjob(&job(suspended)).unwrap().running_since, Some(ts(created)));
    let no_time = json!([{"type": "Suspended", "status": "False"}]);
    assert_eq!(from_trainjob(&job(no_time)).unwrap().running_since, Some(ts(created)));
    let no_created = json!({"metadata": {"name": "j"}});
    assert_eq!(from_trainjob(&no_created).unwrap().running_since, None);
}

#[test]
fn gpus() {
    let job = |trainer: Value| json!({"metadata": {"name": "j"}, "spec": {"trainer": trainer}});
    let gpus = |trainer: Value| from_trainjob(&job(trainer)).unwrap().gpus;
    assert_eq!(
        gpus(json!({"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})),
        Some(8.0)
    );
    assert_eq!(gpus(json!({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}})), Some(8.0));
    assert_eq!(
        gpus(
            json!({"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1", "amd.com/gpu": "2", "cpu": "4"}}})
        ),
        Some(6.0)
    );
    assert_eq!(
        gpus(json!({"numNodes": 2, "resourcesPerNode": {"requests": {"amd.com/gpu": "4"}}})),
        Some(8.0)
    );
    assert_eq!(
        gpus(
            json!({"numNodes": 2, "resourcesPerNode": {"limits": {"cpu": "4"}, "requests": {"nvidia.com/gpu": "1"}}})
        ),
        Some(2.0)
    );
    assert_eq!(
        gpus(json!({"numNodes": 2, "resourcesPerNode": {"limits": {"cpu": "4", "memory": "8Gi"}}})),
        None
    );
    assert_eq!(gpus(json!({"numNodes": 2})), None);
    assert_eq!(
        gpus(json!({"numNodes": 0, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}})),
        Some(0.0)
    );
    assert_eq!(from_trainjob(&json!({"metadata": {"name": "j"}})).unwrap().gpus, None);
}

#[test]
fn trainjob_defaults_and_kueue() {
    let job = json!({"metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "q", "team": "a"}}});
    let snap = from_trainjob(&job).unwrap();
    assert_eq!(snap.key, JobKey::new("default", "j"));
    assert_eq!(snap.kueue_queue.as_deref(), Some("q"));
    assert_eq!(snap.labels.get("team").map(String::as_str), Some("a"));
    let mut expected = JobSnapshot::new(JobKey::new("default", "j"));
    expected.labels = snap.labels.clone();
    expected.kueue_queue = Some("q".into());
    assert_eq!(snap, expected);
    let empty_ns = json!({"metadata": {"name": "j", "namespace": ""}});
    assert_eq!(from_trainjob(&empty_ns).unwrap().key.namespace, "default");
}

#[test]
fn trainjob_error_paths() {
    let ann = |v: Value| json!({"metadata": {"name": "j", "annotations": {TRAINER_STATUS_ANNOTATION: v}}});
    let cases: Vec<(Value, String, &str)> = vec![
        (json!([]), "$".into(), "expected a TrainJob object"),
        (json!({"kind": "JobSet", "metadata": {"name": "j"}}), "kind".into(), "expected \"TrainJob\""),
        (json!({"kind": 1, "metadata": {"name": "j"}}), "kind".into(), "expected a string"),
        (
            json!({"apiVersion": "trainer.kubeflow.org/v2", "metadata": {"name": "j"}}),
            "apiVersion".into(),
            "trainer.kubeflow.org/v1alpha1",
        ),
        (json!({}), "metadata.name".into(), "missing"),
        (json!({"metadata": {}}), "metadata.name".into(), "missing"),
        (json!({"metadata": {"name": ""}}), "metadata.name".into(), "empty"),
        (json!({"metadata": {"name": 7}}), "metadata.name".into(), "expected a string"),
        (json!({"metadata": []}), "metadata".into(), "expected an object"),
        (
            json!({"metadata": {"name": "j", "namespace": 1}}),
            "metadata.namespace".into(),
            "expected a string",
        ),
        (
            json!({"metadata": {"name": "j", "labels": {"a": 1}}}),
            "metadata.labels[\"a\"]".into(),
            "expected a string",
        ),
        (json!({"metadata": {"name": "j", "labels": "a=b"}}), "metadata.labels".into(), "expected an object"),
        (
            json!({"metadata": {"name": "j", "creationTimestamp": "today"}}),
            "metadata.creationTimestamp".into(),
            "invalid RFC 3339",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"suspend": "yes"}}),
            "spec.suspend".into(),
            "expected a boolean",
        ),
        (json!({"metadata": {"name": "j"}, "spec": 3}), "spec".into(), "expected an object"),
        (
            json!({"metadata": {"name": "j"}, "status": {"conditions": {}}}),
            "status.conditions".into(),
            "expected an array",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"conditions": [null]}}),
            "status.conditions[0]".into(),
            "expected an object",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": 1}]}}),
            "status.conditions[0].type".into(),
            "expected a string",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Suspended", "status": "False", "lastTransitionTime": "x"}]}}),
            "status.conditions[0].lastTransitionTime".into(),
            "invalid RFC 3339",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"trainer": []}}),
            "spec.trainer".into(),
            "expected an object",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "1k8"}}}}}),
            "spec.trainer.resourcesPerNode.limits[\"nvidia.com/gpu\"]".into(),
            "unsupported quantity \"1k8\"",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"trainer": {"resourcesPerNode": {"requests": {"amd.com/gpu": true}}}}}),
            "spec.trainer.resourcesPerNode.requests[\"amd.com/gpu\"]".into(),
            "expected a quantity",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"trainer": {"numNodes": -1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}}),
            "spec.trainer.numNodes".into(),
            ">= 0",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"trainerStatus": {"progressPercentage": 1}}}),
            "status.trainerStatus.lastUpdatedTime".into(),
            "missing",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"trainerStatus": "x"}}),
            "status.trainerStatus".into(),
            "expected an object",
        ),
        (ann(json!(5)), format!("metadata.annotations[{TRAINER_STATUS_ANNOTATION:?}]"), "expected a string"),
        (ann(json!("{not json")), ANNOTATION_PATH.into(), "invalid JSON at line 1 column 2"),
        (
            ann(json!(r#"{"lastUpdatedTime":"2026-04-10T09:47:30Z","trainMetrics":{"loss":"x"}}"#)),
            r#"metadata.annotations["trainer.opendatahub.io/trainerStatus"].trainMetrics.loss"#.into(),
            "expected a number or null",
        ),
    ];
    for (input, path, msg) in cases {
        let e = from_trainjob(&input).unwrap_err();
        assert_eq!(e.path, path, "{input}: {e}");
        assert!(e.message.contains(msg), "{input}: {e}");
    }
}
