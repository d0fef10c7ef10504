//! Integration tests against a real kube-apiserver + etcd (see `trainwarden_testkit::apiserver` for where it
//! comes from): the CRDs as the API server sees them, validation, status subresources and the Kubeflow TrainJob status flow.

use trainwarden_testkit::apiserver as support;
use trainwarden_testkit::setup;

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainwarden_core::ScriptEngine;
use trainwarden_core::{Mode, PolicyKind, PolicyScope};
use trainwarden_kube::FIELD_MANAGER;
use trainwarden_kube::crd::{self, ClusterProgressPolicy, PolicyResource, ProgressPolicy};
use trainwarden_kube::status::{CONDITION_READY, JobStatus, ProgressPolicyStatus};
use trainwarden_kube::trainjob::{self, TRAINER_STATUS_FIELD_MANAGER};

/// The issue's example policy, shared with the core and CRD tests.
const WEEKEND_SAFE: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/weekend-safe.yaml"));

fn weekend_safe_value(ns: &str) -> Value {
    serde_saphyr::from_str(
        // The API server sets metadata.generation itself.
        &WEEKEND_SAFE.replace("namespace: fraud, generation: 3", &format!("namespace: {ns}")),
    )
    .expect("weekend-safe YAML")
}

fn weekend_safe(ns: &str) -> ProgressPolicy {
    serde_json::from_value(weekend_safe_value(ns)).expect("weekend-safe is a ProgressPolicy")
}

/// Untyped access, to send what the typed structs cannot express (invalid values).
fn raw_policies(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<ProgressPolicy>(&()))
}

fn api_status(result: Result<impl std::fmt::Debug, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

// (a) ------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn crds_are_established_and_server_side_apply_again() {
    let ctx = setup!("crds_established");
    let api: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    for name in [
        "progresspolicies.trainwarden.dev",
        "clusterprogresspolicies.trainwarden.dev",
        "trainjobs.trainer.kubeflow.org",
    ] {
        support::wait_established(&api, name).await;
    }
    for c in crd::crds() {
        let name = c.name_any();
        let applied = api
            .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&c))
            .await
            .unwrap_or_else(|e| panic!("server-side apply of {name}: {e}"));
        assert!(
            applied.managed_fields().iter().any(|m| m.manager.as_deref() == Some(FIELD_MANAGER)),
            "{name}"
        );
        // The API server accepted the schema as structural: no NonStructuralSchema condition.
        support::wait_established(&api, &name).await;
        let conditions = api.get(&name).await.unwrap().status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            !conditions.iter().any(|c| c.type_ == "NonStructuralSchema" && c.status == "True"),
            "{name}: {conditions:?}"
        );
        // What the server stores is what we generate (nothing pruned or defaulted away).
        let stored = applied.spec.versions[0].schema.clone().unwrap().open_api_v3_schema.unwrap();
        let ours = c.spec.versions[0].schema.clone().unwrap().open_api_v3_schema.unwrap();
        assert_eq!(serde_json::to_value(stored).unwrap(), serde_json::to_value(ours).unwrap(), "{name}");
    }
}

// (b) ------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn trainjob_progress_through_the_status_subresource() {
    let ctx = setup!("trainjob_status");
    let jobs = trainjob::trainjob_api(ctx.client.clone(), Some(&ctx.ns));
    let mut job: DynamicObject = serde_saphyr::from_str(&support::fixture(
        "fixtures/kubeflow/upstream-trainer/examples/01-multi-node.yaml",
    ))
    .expect("01-multi-node.yaml");
    job.metadata.namespace = Some(ctx.ns.clone());
    job.labels_mut().insert("team".into(), "fraud".into());
    let name = job.name_any();
    jobs.create(&PostParams::default(), &job).await.expect("create TrainJob");

    // What Kubeflow Trainer's status server does with a POST: server-side apply of status.trainerStatus on
    // the status subresource, field manager trainer-status, forced.
    let payload: Value = serde_json::from_str(&support::fixture(
        "fixtures/kubeflow/payloads/upstream-status-request.kep-example.json",
    ))
    .unwrap();
    let apply = |trainer_status: Value| {
        Patch::Apply(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "status": {"trainerStatus": trainer_status},
        }))
    };
    let params = PatchParams::apply(TRAINER_STATUS_FIELD_MANAGER).force();
    jobs.patch_status(&name, &params, &apply(payload["trainerStatus"].clone()))
        .await
        .expect("apply trainerStatus");

    let fetched = jobs.get(&name).await.expect("get TrainJob");
    let status_manager = fetched
        .managed_fields()
        .iter()
        .find(|m| m.manager.as_deref() == Some(TRAINER_STATUS_FIELD_MANAGER))
        .unwrap_or_else(|| panic!("no trainer-status manager in {:?}", fetched.managed_fields()));
    assert_eq!(status_manager.subresource.as_deref(), Some("status"));
    assert_eq!(status_manager.operation.as_deref(), Some("Apply"));

    let snapshot = trainjob::to_snapshot(&fetched).expect("normalize");
    assert_eq!(snapshot.key.namespace, ctx.ns);
    assert_eq!(snapshot.key.name, name);
    assert_eq!(snapshot.labels.get("team").map(String::as_str), Some("fraud"));
    let sample = snapshot.sample.expect("a progress sample");
    assert_eq!(sample.progress_percent, Some(45.0));
    assert_eq!(sample.eta_seconds, Some(795649.0));
    assert_eq!(sample.metric("loss"), Some(0.2347));
    assert_eq!(sample.metric("eval_loss"), Some(0.2451));
    assert_eq!(sample.current_epoch, Some(2.0));
    assert_eq!(sample.total_epochs, Some(5.0));
    assert_eq!(sample.updated_at.to_string(), "2025-01-23T10:30:45Z");
    // The same through the core's entry point on the raw JSON.
    assert_eq!(
        trainwarden_core::from_trainjob(&serde_json::to_value(&fetched).unwrap()).unwrap().sample,
        Some(sample)
    );

    // The CRD's validation rejects progress > 100 with 422 and the schema's message.
    let invalid: Value = serde_json::from_str(&support::fixture(
        "fixtures/kubeflow/payloads/upstream-status-request.invalid-progress.json",
    ))
    .unwrap();
    let status =
        api_status(jobs.patch_status(&name, &params, &apply(invalid["trainerStatus"].clone())).await);
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.is_invalid(), "{status:?}");
    assert!(status.message.contains("status.trainerStatus.progressPercentage"), "{}", status.message);
    assert!(status.message.contains("less than or equal to 100"), "{}", status.message);
    // ... and leaves the accepted report in place.
    let again = trainjob::to_snapshot(&jobs.get(&name).await.unwrap()).unwrap();
    assert_eq!(again.sample.unwrap().progress_percent, Some(45.0));
}

/// The RHOAI 3.4 flavour: the RHOAI controller merge-patches the `trainer.opendatahub.io/trainerStatus`
/// annotation (a JSON string; `null` where the loss was NaN). Annotations are metadata, so the upstream CRD
/// carries them too; the RHOAI CRD itself has the same name and cannot be installed beside it.
#[tokio::test]
async fn rhoai_annotation_progress_is_read_from_the_api() {
    let ctx = setup!("rhoai_annotation");
    let jobs = trainjob::trainjob_api(ctx.client.clone(), Some(&ctx.ns));
    let mut job: DynamicObject =
        serde_saphyr::from_str(&support::fixture("fixtures/kubeflow/payloads/rhoai-trainjob-annotated.yaml"))
            .expect("rhoai-trainjob-annotated.yaml");
    job.metadata.namespace = Some(ctx.ns.clone());
    job.data.as_object_mut().map(|o| o.remove("status"));
    let name = job.name_any();
    jobs.create(&PostParams::default(), &job).await.expect("create TrainJob");
    let snapshot = trainjob::to_snapshot(&jobs.get(&name).await.unwrap()).expect("normalize");
    let sample = snapshot.sample.expect("the annotation's sample");
    assert_eq!(sample.source, trainwarden_core::SampleSource::Annotation);
    assert_eq!((sample.progress_percent, sample.current_step), (Some(45.0), Some(340.0)));
    assert_eq!(sample.metric("loss"), Some(0.4523));
    assert_eq!(sample.metric("eval_accuracy"), Some(0.8123));
    assert_eq!(snapshot.gpus, Some(2.0));
    assert!(!snapshot.annotations.contains_key(trainwarden_core::TRAINER_STATUS_ANNOTATION));

    // The next poll: the loss went NaN, which the RHOAI controller writes as null.
    let nan = support::fixture("fixtures/kubeflow/payloads/rhoai-trainerStatus-annotation.nan-loss.json");
    let patch =
        json!({"metadata": {"annotations": {trainwarden_core::TRAINER_STATUS_ANNOTATION: nan.trim()}}});
    jobs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("merge-patch annotation");
    let sample = trainjob::to_snapshot(&jobs.get(&name).await.unwrap()).unwrap().sample.unwrap();
    assert!(sample.metric("loss").is_some_and(f64::is_nan), "{sample:?}");
    assert_eq!(sample.summary.as_deref(), Some("5 hours 41 minutes"));
}

// (c) ------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn valid_policy_is_stored_and_compiles() {
    let ctx = setup!("valid_policy");
    let api: Api<ProgressPolicy> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let sent = weekend_safe(&ctx.ns);
    let created = api.create(&PostParams::default(), &sent).await.expect("create weekend-safe");
    assert_eq!(created.spec, sent.spec, "the API server stored the spec as sent (nothing pruned)");

    let fetched = api.get("weekend-safe").await.unwrap();
    assert_eq!(fetched.spec, sent.spec);
    // Nothing pruned on the wire either: the JSON we sent is a subset of the stored object.
    let stored = serde_json::to_value(&fetched).unwrap();
    assert_eq!(stored["spec"], weekend_safe_value(&ctx.ns)["spec"]);

    let doc = fetched.to_document().expect("document");
    assert_eq!(doc.reference.kind, PolicyKind::Namespaced);
    assert_eq!(doc.reference.namespace.as_deref(), Some(ctx.ns.as_str()));
    assert_eq!(doc.reference.name, "weekend-safe");
    assert_eq!(doc.reference.generation, 1);
    assert_eq!(doc.scope, PolicyScope::Namespace(ctx.ns.clone()));
    assert_eq!(doc.spec.mode, Mode::Enforce);
    let compiled =
        trainwarden_core::compile(&doc, &ScriptEngine::default()).unwrap_or_else(|e| panic!("{e}"));
    let rules: Vec<_> = compiled.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(rules, ["nan-loss", "loss-plateau", "stalled", "late"]);

    // The mode default is applied by the API server (schema default), not only by serde.
    let mut audit = weekend_safe_value(&ctx.ns);
    audit["metadata"]["name"] = "audit-default".into();
    audit["spec"].as_object_mut().unwrap().remove("mode");
    let created = raw_policies(&ctx.client, &ctx.ns)
        .create(&PostParams::default(), &serde_json::from_value(audit).unwrap())
        .await
        .expect("create without mode");
    assert_eq!(created.data["spec"]["mode"], "Audit");
}

// (d) ------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn invalid_policies_are_rejected_with_the_schema_message() {
    let ctx = setup!("invalid_policies");
    let api = raw_policies(&ctx.client, &ctx.ns);
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &[&str]); 11] = [
        (
            "bad-mode",
            |p| p["spec"]["mode"] = "Sometimes".into(),
            &["spec.mode", "Unsupported value: \"Sometimes\"", "\"Audit\", \"Enforce\""],
        ),
        (
            "negative-for",
            |p| p["spec"]["rules"][1]["for"] = "-5m".into(),
            &["spec.rules[1].for", "\"-5m\"", "should match"],
        ),
        (
            "bad-detector",
            |p| p["spec"]["rules"][0]["uses"] = "plato".into(),
            &["spec.rules[0].uses", "Unsupported value: \"plato\"", "\"plateau\""],
        ),
        (
            "negative-cost",
            |p| p["spec"]["gpuHourCost"] = json!(-1.5),
            &["spec.gpuHourCost", "greater than or equal to 0"],
        ),
        (
            "two-actions-in-one",
            |p| p["spec"]["rules"][0]["actions"][0] = json!({"suspend": {}, "notify": {"to": "team"}}),
            &["spec.rules[0].actions[0]", "must validate one and only one schema (oneOf)"],
        ),
        ("no-rules", |p| p["spec"]["rules"] = json!([]), &["spec.rules", "should have at least 1 items"]),
        (
            "rule-without-condition",
            |p| p["spec"]["rules"][2] = json!({"name": "empty", "actions": [{"suspend": {}}]}),
            &["spec.rules[2]", "a rule needs uses (a detector), when (a Rhai condition), or both"],
        ),
        (
            "duplicate-rule-names",
            |p| p["spec"]["rules"][1]["name"] = "nan-loss".into(),
            &["spec.rules[1]", "Duplicate value"],
        ),
        (
            "uppercase-rule-name",
            |p| p["spec"]["rules"][0]["name"] = "Nan_Loss".into(),
            &["spec.rules[0].name", "should match '^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$'"],
        ),
        (
            "long-rule-name",
            |p| p["spec"]["rules"][0]["name"] = "r".repeat(64).into(),
            &["spec.rules[0].name", "Too long", "63"],
        ),
        (
            "too-many-rules",
            |p| {
                p["spec"]["rules"] = (0..65)
                    .map(|i| json!({"name": format!("r{i}"), "when": "true", "actions": [{"suspend": {}}]}))
                    .collect();
            },
            &["spec.rules", "Too many: 65: must have at most 64 items"],
        ),
    ];
    for (name, edit, expected) in cases {
        let mut policy = weekend_safe_value(&ctx.ns);
        policy["metadata"]["name"] = name.into();
        edit(&mut policy);
        // `trainwarden validate` refuses it too, at the same field (JSON is YAML).
        let text = serde_json::to_string(&policy).unwrap();
        let ours = trainwarden_core::parse_documents(&text, name)
            .and_then(|docs| trainwarden_core::compile(&docs[0], &ScriptEngine::default()).map(drop));
        let Err(ours) = ours else { panic!("{name}: the API server refuses it, validate accepted it") };
        assert!(ours.errors.iter().any(|e| e.path.starts_with(expected[0])), "{name}: {ours}");
        let object: DynamicObject = serde_json::from_value(policy).unwrap();
        let status = api_status(api.create(&PostParams::default(), &object).await);
        assert!(status.is_invalid(), "{name}: {status:?}");
        assert_eq!(status.code, 422, "{name}");
        for phrase in expected {
            assert!(status.message.contains(phrase), "{name}: {phrase:?} not in {:?}", status.message);
        }
        // The field path is also in the structured causes, for clients that show them (for a oneOf failure
        // the API server leaves `field` as "<nil>" and names the path in the cause's message only).
        let causes = status.details.as_ref().map(|d| d.causes.clone()).unwrap_or_default();
        assert!(
            causes.iter().any(|c| c.field.starts_with(expected[0]) || c.message.contains(expected[0])),
            "{name}: {causes:?}"
        );
    }
    // None of them was stored.
    assert!(api.list(&Default::default()).await.unwrap().items.is_empty());
}

// (e) ------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn cluster_policy_is_cluster_scoped_with_a_namespace_selector() {
    let ctx = setup!("cluster_policy");
    let api: Api<ClusterProgressPolicy> = Api::all(ctx.client.clone());
    let mut value = weekend_safe_value(&ctx.ns);
    let name = ctx.unique_name("fleet-weekend-safe");
    value["kind"] = "ClusterProgressPolicy".into();
    value["metadata"] = json!({"name": name});
    value["spec"]["namespaceSelector"] = json!({
        "matchLabels": {"trainwarden.dev/test": "cluster-policy"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["cpu"]}],
    });
    let cpp: ClusterProgressPolicy = serde_json::from_value(value).unwrap();
    let created = api.create(&PostParams::default(), &cpp).await.expect("create ClusterProgressPolicy");
    assert_eq!(created.metadata.namespace, None);
    assert_eq!(created.spec, cpp.spec);

    let doc = api.get(&name).await.unwrap().to_document().unwrap();
    assert_eq!(doc.reference.kind, PolicyKind::Cluster);
    assert_eq!(doc.reference.namespace, None);
    let PolicyScope::Cluster { namespace_selector, .. } = &doc.scope else { panic!("{:?}", doc.scope) };
    assert_eq!(
        namespace_selector.match_labels.get("trainwarden.dev/test").map(String::as_str),
        Some("cluster-policy")
    );
    assert_eq!(namespace_selector.match_expressions.len(), 1);
    let compiled =
        trainwarden_core::compile(&doc, &ScriptEngine::default()).unwrap_or_else(|e| panic!("{e}"));
    // The test namespace carries that label, so the policy reaches a team=fraud job there.
    let job_labels = [("team".to_string(), "fraud".to_string())].into();
    let ns_labels = [("trainwarden.dev/test".to_string(), "cluster-policy".to_string())].into();
    assert!(compiled.selects(&ctx.ns, &job_labels, Some(&ns_labels)));

    // A namespaced create of a cluster-scoped kind is refused by the server (404: no such resource path).
    let namespaced: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ctx.ns, &ApiResource::erase::<ClusterProgressPolicy>(&()));
    assert!(namespaced.list(&Default::default()).await.is_err());

    // Cluster-scoped objects outlive the test namespace; this one has no finalizers, so deletion is immediate.
    api.delete(&name, &Default::default()).await.expect("delete");
}

// (f) ------------------------------------------------------------------------------------------------------

fn sample_status(generation: i64) -> ProgressPolicyStatus {
    // metav1.Time has second precision.
    let now = Time(jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap());
    ProgressPolicyStatus {
        observed_generation: Some(generation),
        matched_jobs: Some(3),
        firing_rules: Some(1),
        pending_rules: Some(2),
        last_action: Some("suspend fraud/bert-ft (loss-plateau)".into()),
        last_action_time: Some(now.clone()),
        gpu_hours_saved: Some(12.5),
        dollars_saved: Some(85.9375),
        conditions: vec![Condition {
            type_: CONDITION_READY.into(),
            status: "True".into(),
            reason: "Compiled".into(),
            message: "4 rules".into(),
            last_transition_time: now.clone(),
            observed_generation: Some(generation),
        }],
        jobs: JobStatus::cap(vec![JobStatus {
            name: "fraud/bert-ft".into(),
            firing: vec!["loss-plateau".into()],
            held: vec!["loss-plateau: held: limit 5/h reached (spec.limits.maxActionsPerHour)".into()],
            pending: vec!["late".into(), "stalled".into()],
            progress_percent: Some(45.0),
            last_action: Some("suspend (loss-plateau)".into()),
            last_action_time: Some(now.clone()),
            snoozed_until: None,
        }]),
        gpu_hours_would_save: None,
        dollars_would_save: None,
        action_counts: [("suspend/done".to_string(), 1)].into(),
        notifications: vec![trainwarden_kube::status::NotificationStatus {
            receiver: "team".into(),
            channel: "slack".into(),
            sent: 2,
            failed: 0,
            retried: 1,
            dropped: 0,
            last_error: None,
        }],
        // Rule memories round-trip through the API server (restart safety depends on it).
        rule_states: vec![trainwarden_core::RuleMemory {
            job: "fraud/bert-ft".into(),
            rule: "late".into(),
            state: trainwarden_core::RuleState::Pending,
            since: Some(now.0),
            cleared_at: None,
            firings: 2,
            last_issued: vec![None, Some(now.0)],
            rule_hash: None,
            held: None,
            deferred: vec![],
            snooze_held: false,
            excepted_by: Some("fraud/eval-on-cpu".into()),
        }],
        exceptions: vec![trainwarden_kube::ExceptionStatus {
            name: "fraud/eval-on-cpu".into(),
            rules: vec!["late".into()],
            expires: Some(now.clone()),
            state: "Active".into(),
            message: None,
            holding: vec!["fraud/bert-ft".into()],
        }],
        // The counted intents round-trip too: a new leader reads them to count each suspension once.
        counted_actions: Some(trainwarden_kube::status::CountedActions {
            since: now.clone(),
            actions: vec![trainwarden_kube::status::CountedAction {
                id: "fraud/bert-ft/loss-plateau/1".into(),
                at: now.clone(),
            }],
        }),
    }
}

#[tokio::test]
async fn policy_status_subresource_and_printer_columns() {
    let ctx = setup!("policy_status");
    let api: Api<ProgressPolicy> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let created = api.create(&PostParams::default(), &weekend_safe(&ctx.ns)).await.unwrap();
    let generation = created.metadata.generation.unwrap();

    // Status is ignored on the main resource ...
    let mut with_status = weekend_safe(&ctx.ns);
    with_status.metadata.name = Some("status-ignored".into());
    with_status.status = Some(sample_status(1));
    let ignored = api.create(&PostParams::default(), &with_status).await.unwrap();
    assert_eq!(ignored.status, None);

    // ... and written through the status subresource with our field manager.
    let status = sample_status(generation);
    let patch = Patch::Apply(json!({
        "apiVersion": "trainwarden.dev/v1alpha1",
        "kind": "ProgressPolicy",
        "status": status,
    }));
    let updated = api
        .patch_status("weekend-safe", &PatchParams::apply(FIELD_MANAGER).force(), &patch)
        .await
        .expect("patch_status");
    assert_eq!(updated.status.as_ref(), Some(&status));
    assert_eq!(updated.metadata.generation, Some(generation), "a status write does not bump the generation");
    let manager = updated
        .managed_fields()
        .iter()
        .find(|m| m.manager.as_deref() == Some(FIELD_MANAGER) && m.subresource.as_deref() == Some("status"));
    assert!(manager.is_some(), "{:?}", updated.managed_fields());

    // The status schema is enforced too (jobs is capped at 50 entries).
    let mut too_many = status.clone();
    too_many.jobs = (0..51).map(|i| JobStatus { name: format!("ns/j{i}"), ..JobStatus::default() }).collect();
    let patch = Patch::Apply(
        json!({"apiVersion": "trainwarden.dev/v1alpha1", "kind": "ProgressPolicy", "status": too_many}),
    );
    let rejected = api_status(
        api.patch_status("weekend-safe", &PatchParams::apply(FIELD_MANAGER).force(), &patch).await,
    );
    assert!(rejected.is_invalid() && rejected.message.contains("status.jobs"), "{rejected:?}");

    // Printer columns, as kubectl asks for them: a Table.
    let request = http::Request::get(format!(
        "/apis/trainwarden.dev/v1alpha1/namespaces/{}/progresspolicies?fieldSelector=metadata.name%3Dweekend-safe",
        ctx.ns
    ))
    .header(http::header::ACCEPT, "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let table: Value = ctx.client.request(request).await.expect("table request");
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(columns, ["Name", "Mode", "Jobs", "Firing", "Last Action", "GPU-h Saved", "Age"]);
    let priorities: Vec<i64> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["priority"].as_i64().unwrap())
        .collect();
    assert_eq!(priorities, [0, 0, 0, 0, 1, 0, 0], "Last Action only with -o wide");
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let cells = &rows[0]["cells"];
    assert_eq!(cells[0], "weekend-safe");
    assert_eq!(cells[1], "Enforce");
    assert_eq!(cells[2], 3);
    assert_eq!(cells[3], 1);
    assert_eq!(cells[4], "suspend fraud/bert-ft (loss-plateau)");
    assert_eq!(cells[5], 12.5);
}

// (g) ------------------------------------------------------------------------------------------------------

#[tokio::test]
async fn kubectl_explain_and_get_show_the_descriptions_and_columns() {
    let ctx = setup!("kubectl");
    let api: Api<ProgressPolicy> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    api.create(&PostParams::default(), &weekend_safe(&ctx.ns)).await.unwrap();

    // The OpenAPI v3 document of a just-(re)applied CRD is published asynchronously: retry briefly.
    let explain = |path: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let out = ctx.kubectl(&["explain", path]);
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() || std::time::Instant::now() > deadline {
                assert!(
                    out.status.success(),
                    "kubectl explain {path}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                return stdout;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    let rules = explain("progresspolicy.spec.rules");
    for phrase in [
        "The rules, evaluated independently for every selected TrainJob.",
        "A built-in detector: plateau, diverging, non_finite",
        "A Rhai expression that must be true for the rule to fire",
        "Overrides the policy's mode for this rule.",
        "enum: Audit, Enforce",
    ] {
        assert!(rules.contains(phrase), "{phrase:?} not in:\n{rules}");
    }
    let suspend = explain("progresspolicy.spec.rules.actions.suspend");
    assert!(suspend.contains("Suspend the TrainJob"), "{suspend}");
    let with = explain("cpp.spec.namespaceSelector");
    assert!(with.contains("Namespaces whose TrainJobs this policy applies to"), "{with}");
    let status = explain("pp.status.jobs");
    assert!(status.contains("at most 50 entries"), "{status}");

    // kubectl get -o wide shows every column, category and short names resolve.
    let out = ctx.kubectl(&["get", "pp", "-n", &ctx.ns, "-o", "wide"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(header, ["NAME", "MODE", "JOBS", "FIRING", "LAST ACTION", "GPU-H SAVED", "AGE"], "{table}");
    assert!(table.contains("weekend-safe") && table.contains("Enforce"), "{table}");
    // The category: `kubectl get trainwarden` lists ProgressPolicies (and ClusterProgressPolicies).
    let out = ctx.kubectl(&["get", "trainwarden", "-n", &ctx.ns, "-o", "name"]);
    let names = String::from_utf8_lossy(&out.stdout);
    assert!(names.lines().any(|l| l == "progresspolicy.trainwarden.dev/weekend-safe"), "{names}");
}

// (h) ------------------------------------------------------------------------------------------------------

/// Every example policy in `policies/` is accepted by the API server as it is (server-side dry run), so the
/// CRD schema and the file-based validator agree on the examples.
#[tokio::test]
async fn example_policies_pass_server_side_validation() {
    let ctx = setup!("example_policies");
    let dir = support::repo_root().join("policies");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    files.retain(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        name.ends_with(".yaml") && !name.ends_with(".test.yaml")
    });
    files.sort();
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let mut object: DynamicObject = serde_json::from_value(doc).unwrap();
            let result = match object.types.as_ref().and_then(|t| PolicyKind::parse(&t.kind)) {
                Some(PolicyKind::Cluster) => {
                    object.metadata.name = Some(ctx.unique_name(&object.name_any()));
                    Api::<DynamicObject>::all_with(
                        ctx.client.clone(),
                        &ApiResource::erase::<ClusterProgressPolicy>(&()),
                    )
                    .create(&dry_run, &object)
                    .await
                }
                _ => {
                    object.metadata.namespace = Some(ctx.ns.clone());
                    raw_policies(&ctx.client, &ctx.ns).create(&dry_run, &object).await
                }
            };
            if let Err(e) = result {
                failures.push(format!("{} ({}): {e}", file.display(), object.name_any()));
            }
        }
    }
    assert!(failures.is_empty(), "rejected by the API server:\n{}", failures.join("\n"));
    eprintln!("[apiserver tests] {} example policy files accepted", files.len());
}
