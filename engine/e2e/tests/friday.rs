//! The Friday story of the README and the book on a real kube-apiserver + etcd: the recorded stream of
//! `examples/friday-night-stall/` is written to the API server as the Trainer's status server would write
//! it, the whole controller (in-process, on the stream's own clock: `Clock::Reports`) judges it with the
//! weekend-safe policy and acts, and `kubectl trainwarden get` shows the outcome. The controller must come to
//! what `trainwarden replay` says of the same stream (the same rule, the same GPU-hours and dollars saved),
//! and the table is the golden file the README and the book quote (engine/cli/tests/docs.rs checks they do).
//!
//! Run with `tests/k8s/with-control-plane.sh cargo test -p trainwarden-e2e --test friday`. Set
//! `TRAINWARDEN_BLESS=1` to rewrite the golden file after an intended change of the output.

use trainwarden_testkit::apiserver as support;
use trainwarden_testkit::objects::workload;
use trainwarden_testkit::setup;

use trainwarden_e2e::plugin::{assert_golden, plugin};

use std::path::PathBuf;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainwarden_controller::{Clock, ControllerConfig, LAST_ACTION_ANNOTATION};
use trainwarden_core::replay::Replay;
use trainwarden_core::{ActionSpec, EngineConfig, Event, Mode, ScriptEngine, Timestamp};
use trainwarden_e2e::controller::*;
use trainwarden_kube::kueue::workload_resource_version;
use trainwarden_kube::trainjob::{TRAINER_STATUS_FIELD_MANAGER, trainjob_api};

const STORY: &str = "examples/friday-night-stall";

fn repo_file(path: &str) -> String {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// What `trainwarden replay` says of the story: when the job was suspended, and what that saved.
struct Replayed {
    suspended_at: Timestamp,
    gpu_hours: f64,
    dollars: f64,
    rule: String,
}

fn replay_the_story(policy_yaml: &str, stream: &str) -> Replayed {
    let engine = ScriptEngine::default();
    let docs = trainwarden_core::parse_documents(policy_yaml, "policy.yaml").expect("policy.yaml");
    let policies = docs.iter().map(|d| trainwarden_core::compile(d, &engine).expect("compile")).collect();
    let mut replay = Replay::new(policies, EngineConfig::default());
    let records = trainwarden_core::parse_stream(stream, "stream.jsonl").expect("stream.jsonl");
    for record in records {
        replay.feed(record);
    }
    replay.finish(None);
    let suspend = replay
        .events
        .iter()
        .find_map(|e| match e {
            Event::Intent(i) if matches!(i.action, ActionSpec::Suspend(_)) && i.mode == Mode::Enforce => {
                Some(i)
            }
            _ => None,
        })
        .expect("the replay suspends the fraud job");
    let savings = suspend.savings.as_ref().expect("the suspension's savings");
    Replayed {
        suspended_at: suspend.at,
        gpu_hours: savings.gpu_hours,
        dollars: savings.dollars.unwrap_or(0.0),
        rule: suspend.rule.clone(),
    }
}

/// A stream line's TrainJob (`namespace/name`) and time; the first line of each job is its whole object.
fn line_job_and_time(line: &Value) -> (String, Timestamp) {
    if let Some(meta) = line.get("metadata") {
        let name = meta["name"].as_str().unwrap();
        let at = line["status"]["trainerStatus"]["lastUpdatedTime"].as_str().unwrap();
        (name.to_string(), at.parse().unwrap())
    } else {
        let job = line["job"].as_str().unwrap();
        (job.split('/').nth(1).unwrap().to_string(), line["time"].as_str().unwrap().parse().unwrap())
    }
}

/// The field manager of the Trainer's controller (conditions, jobsStatus), apart from its status server's
/// (`trainerStatus`): with server-side apply each writes only its own part, as on a real cluster.
const TRAINER_CONTROLLER: &str = "trainer-controller";

/// The stream, written as the Trainer would write it: the first line of a job creates the TrainJob (with a
/// Kueue Workload for a queued job), a report sets `status.trainerStatus`, a phase line the condition the
/// Trainer's controller sets. `controller_status` keeps what the Trainer's controller owns per job, so each
/// of its applies states all of it.
struct Trainer {
    client: Client,
    ns: String,
    controller_status: std::collections::HashMap<String, Value>,
}

impl Trainer {
    async fn apply(&self, name: &str, manager: &str, status: Value) {
        let body =
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "status": status});
        trainjob_api(self.client.clone(), Some(&self.ns))
            .patch_status(name, &PatchParams::apply(manager).force(), &Patch::Apply(&body))
            .await
            .unwrap_or_else(|e| panic!("{manager} writing {name}'s status: {e}"));
    }

    /// Sets the condition `kind` (replacing one of the same type) as the Trainer's controller does.
    async fn condition(&mut self, name: &str, kind: &str, reason: &str, at: Timestamp) {
        let status = self.controller_status.get_mut(name).expect("the job was created");
        let conditions = status["conditions"].as_array_mut().expect("conditions");
        conditions.retain(|c| c["type"] != kind);
        conditions.push(json!({"type": kind, "status": "True", "reason": reason,
            "message": format!("TrainJob is {}", reason.to_lowercase()),
            "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}));
        let status = status.clone();
        self.apply(name, TRAINER_CONTROLLER, status).await;
    }

    async fn write(&mut self, line: &Value) {
        let (name, at) = line_job_and_time(line);
        if line.get("metadata").is_some() {
            let mut object = line.clone();
            let meta = object["metadata"].as_object_mut().unwrap();
            for server_set in ["uid", "resourceVersion", "generation", "creationTimestamp"] {
                meta.remove(server_set);
            }
            meta.insert("namespace".into(), json!(self.ns));
            let mut status = object.as_object_mut().unwrap().remove("status").unwrap();
            let job: DynamicObject = serde_json::from_value(object).unwrap();
            let jobs = trainjob_api(self.client.clone(), Some(&self.ns));
            let created = jobs.create(&PostParams::default(), &job).await.expect("create TrainJob");
            if let Some(queue) = created.labels().get(trainwarden_kube::kueue::KUEUE_QUEUE_LABEL) {
                create_workload(&self.client, &self.ns, &created, queue).await;
            }
            let report = status.as_object_mut().unwrap().remove("trainerStatus");
            self.controller_status.insert(name.clone(), status.clone());
            self.apply(&name, TRAINER_CONTROLLER, status).await;
            if let Some(report) = report {
                self.apply(&name, TRAINER_STATUS_FIELD_MANAGER, json!({"trainerStatus": report})).await;
            }
        } else if let Some(report) = line.get("trainerStatus") {
            self.apply(&name, TRAINER_STATUS_FIELD_MANAGER, json!({"trainerStatus": report})).await;
        } else if let Some(phase) = line["phase"].as_str() {
            match phase {
                "Complete" | "Failed" => self.condition(&name, phase, phase, at).await,
                other => panic!("phase {other} before the suspension: not in this story"),
            }
        } else {
            panic!("a line this story does not write before the suspension: {line}");
        }
    }
}

/// The Workload Kueue makes for a queued TrainJob (admitted: active).
async fn create_workload(c: &Client, ns: &str, job: &DynamicObject, queue: &str) {
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(c.clone(), ns, &workload_resource_version("v1beta2"));
    let name = format!("trainjob-{}-5c2f1", job.name_any());
    let workload = workload("v1beta2", ns, &name, queue)
        .owned_by(&job.name_any(), &job.uid().unwrap())
        .active(true)
        .build();
    let workload: DynamicObject = serde_json::from_value(workload).unwrap();
    workloads.create(&PostParams::default(), &workload).await.expect("create Workload");
}

/// Waits for trainwarden to deactivate the job's Workload, then does what Kueue and the Trainer do next
/// (no Kueue controller runs on this tier; the cluster tier's e2e `kueue` test has the real one): Kueue
/// suspends the job of an inactive Workload, the Trainer's controller says so in a condition.
async fn kueue_suspends(c: &Client, ns: &str, trainer: &mut Trainer, name: &str, at: Timestamp) {
    let workload = format!("trainjob-{name}-5c2f1");
    eventually("the Workload deactivated", Duration::from_secs(30), || async {
        let workloads: Api<DynamicObject> =
            Api::namespaced_with(c.clone(), ns, &workload_resource_version("v1beta2"));
        let w = workloads.get(&workload).await.ok()?;
        (w.data["spec"]["active"] == json!(false)).then_some(())
    })
    .await;
    let suspend =
        json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "spec": {"suspend": true}});
    trainjob_api(c.clone(), Some(ns))
        .patch(name, &PatchParams::apply("kueue-admission").force(), &Patch::Apply(&suspend))
        .await
        .expect("suspend as Kueue does");
    trainer.condition(name, "Suspended", "Suspended", at).await;
}

#[tokio::test]
async fn the_friday_story_judged_by_the_controller_as_replay_judges_it() {
    let ctx = setup!("friday");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    support::install_workload_crd(c).await;
    let policy_yaml = repo_file(&format!("{STORY}/policy.yaml"));
    let stream = repo_file(&format!("{STORY}/stream.jsonl"));
    let expected = replay_the_story(&policy_yaml, &stream);

    // Both of the story's jobs in the test's namespace; the policy still selects only team=fraud.
    apply_policy(c, ns, &policy_yaml.replace("namespace: fraud", &format!("namespace: {ns}"))).await;
    let lines: Vec<Value> = stream.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (_, from) = line_job_and_time(&lines[0]);
    let config = ControllerConfig {
        clock: Clock::Reports { from },
        eval_interval: Duration::from_secs(30),
        history_interval: Duration::from_secs(300),
        ..config_for(ns)
    };
    let controller = start(c, config);
    eventually("the controller watching", Duration::from_secs(15), || async {
        policy_status(c, ns, "weekend-safe").await.matched_jobs.map(|_| ())
    })
    .await;

    // In stream order, as the Trainer would have written them; the fraud job's lines after its suspension
    // describe a run that no longer happens (replay ignores them too).
    let mut trainer =
        Trainer { client: c.clone(), ns: ns.to_string(), controller_status: Default::default() };
    let mut written = 0;
    let mut stopped = false;
    for line in &lines {
        let (name, at) = line_job_and_time(line);
        if name == "ft-llama-8b-fraud" && at > expected.suspended_at {
            continue;
        }
        trainer.write(line).await;
        written += 1;
        if !stopped && at > expected.suspended_at {
            // This report moved the controller's clock past the firing: it deactivates the Workload, and
            // the job stops before the stream goes on (else its silence would look like a hang).
            kueue_suspends(c, ns, &mut trainer, "ft-llama-8b-fraud", expected.suspended_at).await;
            stopped = true;
        }
    }
    eprintln!("wrote {written} of {} lines", lines.len());
    let last_action = eventually("the last-action annotation", Duration::from_secs(30), || async {
        job(c, ns, "ft-llama-8b-fraud").await.annotations().get(LAST_ACTION_ANNOTATION).cloned()
    })
    .await;
    // The history checkpoint (for LOSS's trend) is written at the firing; let the writes settle.
    eventually("the fraud job's history checkpoint", Duration::from_secs(30), || async {
        job(c, ns, "ft-llama-8b-fraud").await.annotations().get("trainwarden.dev/history").map(|_| ())
    })
    .await;
    let status = eventually("the policy's savings in its status", Duration::from_secs(30), || async {
        let s = policy_status(c, ns, "weekend-safe").await;
        s.gpu_hours_saved.is_some().then_some(s)
    })
    .await;
    let events = events_once_there(c, ns, "ft-llama-8b-fraud", "WorkloadDeactivated", 1).await;
    tokio::time::sleep(SETTLE).await;
    controller.stop().await;

    // The same decision as the replay: rule, instant, GPU-hours and dollars (the annotation rounds them
    // to 0.01 GPU-h and $1, the policy's status to 0.001 GPU-h and $0.01).
    let action: Value = serde_json::from_str(&last_action).unwrap();
    eprintln!("last action: {action}");
    assert_eq!(action["rule"], expected.rule.as_str(), "{action}");
    assert_eq!(action["at"].as_str().map(|t| t.parse::<Timestamp>().unwrap()), Some(expected.suspended_at));
    assert_eq!(action["gpuHours"].as_f64(), Some((expected.gpu_hours * 100.0).round() / 100.0), "{action}");
    assert_eq!(action["dollars"].as_f64(), Some(expected.dollars.round()), "{action}");
    let saved = status.gpu_hours_saved.unwrap_or_default();
    assert!(
        (saved - expected.gpu_hours).abs() <= 0.0005,
        "status {saved} GPU-h, replay {}",
        expected.gpu_hours
    );
    let dollars = status.dollars_saved.unwrap_or_default();
    assert!((dollars - expected.dollars).abs() <= 0.005, "status ${dollars}, replay ${}", expected.dollars);
    assert_eq!(count(&events, "WorkloadDeactivated"), 1, "suspended once, through Kueue: {events:?}");

    // What the README shows, at the end of the recorded weekend.
    let end = lines.last().map(line_job_and_time).unwrap().1.to_string();
    let (ok, table, err) = plugin(&ctx, &["--now", &end, "get"]);
    assert!(ok, "{err}");
    eprintln!("{table}");
    assert_golden("friday.txt", &table);
}
