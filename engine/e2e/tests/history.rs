//! History across a restart, against a real kube-apiserver + etcd: a job's loss plateaus, the controller is
//! killed in the middle of the plateau's window, a new one starts, and the rule fires at the same report,
//! with the same reason, as the evaluator fed every report without a restart.

use trainwarden_testkit::http::http_get;
use trainwarden_testkit::setup;

use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use trainwarden_controller::{ControllerConfig, HISTORY_ANNOTATION, LAST_ACTION_ANNOTATION};
use trainwarden_core::{EngineConfig, Evaluator, Event, MAX_CHECKPOINT_BYTES, compile, parse_documents};
use trainwarden_kube::trainjob::{TRAINER_STATUS_FIELD_MANAGER, trainjob_api};

use trainwarden_e2e::controller::*;

/// The plateau, and a rule that stays pending so the policy status lists the job with its progress (how the
/// test knows a report was evaluated).
const RULES: &str = "    - {name: plateau, uses: plateau, with: {metric: loss, window: 20s, minDelta: 0.01}, actions: [{suspend: {}}]}\n    - {name: reporting, when: 'metric(\"loss\") > 0.0', for: 1h}\n";

/// Improving until report 3 (0.80), then flat within minDelta: with reports 2 s apart the 20 s window is
/// over at report 13.
const LOSSES: [&str; 21] = [
    "2.0", "1.5", "1.0", "0.80", "0.801", "0.799", "0.802", "0.800", "0.803", "0.801", "0.802", "0.800",
    "0.799", "0.801", "0.803", "0.802", "0.800", "0.801", "0.799", "0.802", "0.800",
];

/// The last report the first controller sees: 10 s into the 20 s window.
const STOP_AFTER: usize = 8;

fn trainer_status(at: Timestamp, i: usize) -> Value {
    json!({
        "progressPercentage": 10 + i,
        "estimatedRemainingSeconds": 3600,
        "metrics": [{"name": "loss", "value": LOSSES[i]}],
        "lastUpdatedTime": at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    })
}

/// What Kubeflow's status server writes for report `i`.
async fn send(c: &kube::Client, ns: &str, at: Timestamp, i: usize) {
    let body = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "status": {"trainerStatus": trainer_status(at, i)},
    });
    trainjob_api(c.clone(), Some(ns))
        .patch_status("ft", &PatchParams::apply(TRAINER_STATUS_FIELD_MANAGER).force(), &Patch::Apply(&body))
        .await
        .expect("report progress");
}

/// The report at which the evaluator fires, and its reason, fed the same TrainJob with reports `from..`
/// and no restart.
fn evaluator_fires(policy_yaml: &str, trainjob: &Value, times: &[Timestamp], from: usize) -> (usize, String) {
    let mut ev = Evaluator::new(EngineConfig::default());
    let doc = parse_documents(policy_yaml, "test").unwrap().remove(0);
    let mut events = Vec::new();
    ev.upsert_policy(compile(&doc, ev.scripts()).unwrap(), times[0], &mut events);
    for (i, at) in times.iter().enumerate().skip(from) {
        let mut obj = trainjob.clone();
        obj["status"] = json!({"trainerStatus": trainer_status(*at, i)});
        ev.observe(trainwarden_core::from_trainjob(&obj).unwrap(), *at, &mut events);
        if let Some(Event::Intent(intent)) = events.iter().find(|e| matches!(e, Event::Intent(_))) {
            return (i, intent.reason.summary.clone());
        }
    }
    panic!("the evaluator never fired on these reports");
}

/// The checkpoint on the TrainJob, once it has counted `samples` samples.
async fn checkpoint_with(c: &kube::Client, ns: &str, samples: u64) -> String {
    eventually(&format!("a checkpoint of {samples} samples"), Duration::from_secs(20), || async {
        let text = job(c, ns, "ft").await.annotations().get(HISTORY_ANNOTATION)?.clone();
        let v: Value = serde_json::from_str(&text).ok()?;
        (v.pointer("/s/n")?.as_u64()? == samples).then_some(text)
    })
    .await
}

/// Killed (`kill -9`, nothing flushed) with a checkpoint written after every sample.
#[tokio::test]
async fn a_plateau_fires_on_schedule_after_the_controller_is_killed_mid_window() {
    let ctx = setup!("controller_history_kill");
    restart_mid_window(&ctx.client, &ctx.ns, Duration::from_secs(0), Stop::Kill).await;
}

/// Stopped gracefully with the interval so long that only the first sample was written while it ran: the
/// stop's flush stores the rest.
#[tokio::test]
async fn a_graceful_stop_flushes_the_history_and_the_plateau_fires_on_schedule() {
    let ctx = setup!("controller_history_stop");
    restart_mid_window(&ctx.client, &ctx.ns, Duration::from_secs(3600), Stop::Graceful).await;
}

enum Stop {
    Kill,
    Graceful,
}

async fn restart_mid_window(c: &kube::Client, ns: &str, history_interval: Duration, how: Stop) {
    let yaml = policy("p", "Enforce", RULES);
    apply_policy(c, ns, &yaml).await;
    let created = create_trainjob(c, ns, "ft", &[]).await;
    let config = ControllerConfig { history_interval, history_writes_per_second: 50, ..config_for(ns) };
    // Report times 2 s apart, in the past (lastUpdatedTime is what the plateau's window measures).
    let base = seconds_ago(100);
    let times: Vec<Timestamp> =
        (0..LOSSES.len()).map(|i| Timestamp::from_second(base.as_second() + 2 * i as i64).unwrap()).collect();

    let first = start(c, config.clone());
    wait_until_watching(c, ns, "p", 1).await;
    for (i, at) in times.iter().enumerate().take(STOP_AFTER + 1) {
        send(c, ns, *at, i).await;
    }
    wait_until_evaluated(c, ns, "p", "ft", 10 + STOP_AFTER as i64).await;
    assert!(!suspended(&job(c, ns, "ft").await), "10 s of a 20 s window: not yet");
    let saved = match how {
        Stop::Kill => {
            let saved = checkpoint_with(c, ns, STOP_AFTER as u64 + 1).await;
            // Nothing is flushed: what survives is on the TrainJob and in the policy status.
            first.kill();
            saved
        }
        Stop::Graceful => {
            let written =
                job(c, ns, "ft").await.annotations().get(HISTORY_ANNOTATION).cloned().unwrap_or_default();
            assert!(
                written.contains("\"s\":{\"n\":1,"),
                "only the first sample was written while running: {written}"
            );
            first.stop().await;
            checkpoint_with(c, ns, STOP_AFTER as u64 + 1).await
        }
    };
    assert!(saved.len() <= MAX_CHECKPOINT_BYTES, "{} bytes", saved.len());
    assert!(saved.contains(&format!("\"uid\":\"{}\"", created.uid().unwrap())), "{saved}");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().unwrap().port();
    let second = start_with_listener(c, config, Some(listener));
    // Ready once the TrainJobs are listed, and the history is restored while they are.
    eventually("readyz", Duration::from_secs(15), || async {
        http_get(port, "/readyz").await.filter(|r| r.contains(" 200 "))
    })
    .await;
    let metrics = http_get(port, "/metrics").await.unwrap_or_default();
    assert!(
        metrics.contains("trainwarden_history_checkpoints_total{result=\"restored\"} 1"),
        "the new controller restored the checkpoint:\n{metrics}"
    );
    for (i, at) in times.iter().enumerate().skip(STOP_AFTER + 1) {
        send(c, ns, *at, i).await;
    }
    let suspended_job = eventually("the plateau suspension", Duration::from_secs(20), || async {
        let j = job(c, ns, "ft").await;
        suspended(&j).then_some(j)
    })
    .await;
    let action: Value = serde_json::from_str(&suspended_job.annotations()[LAST_ACTION_ANNOTATION]).unwrap();
    let reason = action["reason"].as_str().unwrap().to_string();

    let trainjob = serde_json::to_value(&created).unwrap();
    let namespaced = yaml.replace("metadata: {name: p}", &format!("metadata: {{name: p, namespace: {ns}}}"));
    let (at_report, expected) = evaluator_fires(&namespaced, &trainjob, &times, 0);
    assert_eq!(at_report, 13, "the 20 s window after the best at report 3");
    assert_eq!(reason, expected, "the restarted controller fired as the uninterrupted evaluator did");
    assert!(reason.contains("for 10 samples / 20s (best 0.8 at sample 4"), "{reason}");

    // Without the checkpoint the window would have started over at the first report the new controller saw.
    let (late, _) = evaluator_fires(&namespaced, &trainjob, &times, STOP_AFTER);
    assert_eq!(late, 18, "a restart without the checkpoint fires 5 reports (10 s) late");
    second.stop().await;
}
