//! Graceful stops of the real `trainwarden controller` binary, as the chart runs it (leader election on,
//! notifications on, its HTTP listener for `/readyz` and `/metrics`), against a real kube-apiserver + etcd:
//! 50 SIGTERMs, each after a report the controller has just counted. Every stop must exit 0 within seconds,
//! log the shutdown steps in their order, and leave on the TrainJob the history checkpoint with that last
//! report in it — which, with `--history-interval 1h`, only the stop's flush writes.
//!
//! [`LANES`] controllers run side by side, each in a namespace of its own with its own Lease and TrainJob,
//! and each is stopped and started again [`ROUNDS`] times (so every start after the first also restores
//! the checkpoint the previous stop stored).

use trainwarden_testkit::setup;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use trainwarden_controller::HISTORY_ANNOTATION;
use trainwarden_controller::runtime::shutdown::Step;
use trainwarden_kube::trainjob::{TRAINER_STATUS_FIELD_MANAGER, trainjob_api};
use trainwarden_testkit::http::http_get;

use trainwarden_e2e::controller::*;

/// Controllers stopped at the same time.
const LANES: usize = 10;
/// Stops per lane: LANES × ROUNDS = 50.
const ROUNDS: usize = 5;
/// The longest one stop may take (SIGTERM → exit). Its steps' deadlines add up to 30 s; a stop with
/// nothing slow takes well under a second.
const STOP_WITHIN: Duration = Duration::from_secs(5);

/// A plateau (stateful, so the checkpoint holds a detector memory) that never fires on a loss falling by
/// 0.1 a report, and a rule that stays pending.
const RULES: &str = "    - {name: plateau, uses: plateau, with: {metric: loss, window: 1h, minDelta: 0.01}, actions: [{suspend: {}}]}\n    - {name: reporting, when: 'metric(\"loss\") > 0.0', for: 1h}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_sigterms_each_exit_zero_with_the_steps_in_order_and_the_last_report_checkpointed() {
    let ctx = setup!("controller_fifty_sigterms");
    let started = Instant::now();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&ctx.ns);
    std::fs::create_dir_all(&dir).expect("log dir");
    let binary = trainwarden_e2e::binaries::binary("trainwarden", "trainwarden");
    let lanes_started = Instant::now();
    let lanes: Vec<_> = (0..LANES)
        .map(|lane| {
            let (c, ns, dir, binary) =
                (ctx.client.clone(), format!("{}-{lane}", ctx.ns), dir.clone(), binary.clone());
            let kubeconfig = ctx.plane.kubeconfig.clone();
            tokio::spawn(async move { run_lane(&c, &ns, lane, &binary, &kubeconfig, &dir).await })
        })
        .collect();
    let (mut stops, mut not_ready_seen): (Vec<Duration>, usize) = (Vec::new(), 0);
    for lane in lanes {
        let (took, seen) = lane.await.expect("a lane panicked (its assertion is above)");
        stops.extend(took);
        not_ready_seen += seen;
    }
    assert_eq!(stops.len(), LANES * ROUNDS);
    // Most stops take a few hundred ms, so a GET sent right after the signal lands in the middle of most.
    assert!(not_ready_seen > 0, "no stop was seen answering /readyz 503 while it stopped");
    stops.sort();
    eprintln!(
        "[stops] {} SIGTERMs, {} at a time: each exited 0; /readyz 503 seen during {} stops; stop took min {} ms, median {} ms, p90 {} ms, max {} ms; the lanes took {:.1} s (the test {:.1} s, building the binary included)",
        stops.len(),
        LANES,
        not_ready_seen,
        stops[0].as_millis(),
        stops[stops.len() / 2].as_millis(),
        stops[stops.len() * 9 / 10].as_millis(),
        stops[stops.len() - 1].as_millis(),
        lanes_started.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// One lane: a namespace, a policy, a TrainJob, and [`ROUNDS`] controllers one after the other, each sent
/// one report and SIGTERM. Returns how long each stop took, and how many times `/readyz` was caught
/// answering 503 `shutting down` during a stop.
async fn run_lane(
    c: &Client,
    ns: &str,
    lane: usize,
    binary: &Path,
    kubeconfig: &Path,
    dir: &Path,
) -> (Vec<Duration>, usize) {
    create_namespace(c, ns).await;
    apply_policy(c, ns, &policy("p", "Enforce", RULES)).await;
    create_trainjob(c, ns, "ft", &[]).await;
    // Report times a second apart, in the past, so they never pass the policy's sampling interval.
    let base = seconds_ago(600);
    let mut took = Vec::new();
    let mut not_ready_seen = 0;
    for round in 0..ROUNDS {
        let identity = format!("lane{lane}-round{round}");
        let log = dir.join(format!("{identity}.log"));
        let mut child = Command::new(binary)
            .arg("controller")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--namespace", ns, "--lease-namespace", ns, "--identity", &identity])
            .args(["--leader-election", "true", "--lease-duration", "4s", "--eval-interval", "1s"])
            .args(["--status-interval", "200ms", "--history-interval", "1h", "--http-addr", "127.0.0.1:0"])
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start trainwarden controller");
        let port = eventually(&format!("{identity} serving"), Duration::from_secs(20), || async {
            served_port(&log)
        })
        .await;
        // Ready (policies and TrainJobs listed, the checkpoint restored) and leading (only a leader stores
        // checkpoints): the previous round gave the Lease up, so this one takes it at once.
        eventually(&format!("{identity} ready and leading"), Duration::from_secs(20), || async {
            let ready = http_get(port, "/readyz").await?.contains(" 200 ");
            (ready && metric(port, "trainwarden_leader").await? == 1.0).then_some(())
        })
        .await;
        let samples = metric(port, "trainwarden_samples_total").await.expect("/metrics");
        let at = Timestamp::from_second(base.as_second() + round as i64).unwrap();
        report_loss(c, ns, at, 2.0 - 0.1 * round as f64, round).await;
        // The moment the controller has counted the report, it is stopped.
        eventually(&format!("{identity} counting the report"), Duration::from_secs(10), || async {
            (metric(port, "trainwarden_samples_total").await? > samples).then_some(())
        })
        .await;
        if round > 0 {
            let n = checkpoint_samples(c, ns).await;
            assert!(
                n < Some(round as u64 + 1),
                "{identity}: the checkpoint already holds the last report before the stop ({n:?}); the test would prove nothing"
            );
        }
        let signalled = Instant::now();
        let kill =
            Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill -TERM");
        assert!(kill.success(), "{identity}: kill -TERM failed");
        // While it stops, /readyz already says so (or the port is closed: it was quicker than the GET).
        let readyz = http_get(port, "/readyz").await;
        if readyz.as_deref().is_some_and(|r| r.contains(" 503 ") && r.contains("shutting down")) {
            not_ready_seen += 1;
        }
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for the controller") {
                break status;
            }
            if signalled.elapsed() > STOP_WITHIN {
                let _ = child.kill();
                panic!("{identity} did not stop within {STOP_WITHIN:?} of SIGTERM; log: {}", log.display());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        took.push(signalled.elapsed());
        let text = std::fs::read_to_string(&log).expect("read log");
        assert_eq!(status.code(), Some(0), "{identity} exited {status} after SIGTERM; log:\n{text}");
        assert_steps_in_order(&identity, &text);
        // The stop stored the checkpoint with every report so far, the last one included.
        let n = checkpoint_samples(c, ns).await;
        assert_eq!(n, Some(round as u64 + 1), "{identity}: the checkpoint after the stop; log:\n{text}");
        let progress = checkpoint(c, ns).await.and_then(|v| v.pointer("/s/lp/0")?.as_f64());
        assert_eq!(
            progress,
            Some(10.0 + round as f64),
            "{identity}: the checkpoint's last report is the last sent"
        );
    }
    (took, not_ready_seen)
}

/// The shutdown steps logged, each once and in order, all within their deadlines, then the clean end; no
/// ERROR line at all.
fn assert_steps_in_order(identity: &str, log: &str) {
    let lines: Vec<Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let errors: Vec<&Value> = lines.iter().filter(|l| l["level"] == "ERROR").collect();
    assert!(errors.is_empty(), "{identity} logged errors: {errors:?}");
    let steps: Vec<(u64, String, bool)> = lines
        .iter()
        .filter(|l| l.pointer("/fields/message").and_then(Value::as_str) == Some("shutdown step"))
        .map(|l| {
            let f = &l["fields"];
            (f["number"].as_u64().unwrap_or(0), f["step"].as_str().unwrap_or("").to_string(), f["ok"] == true)
        })
        .collect();
    let expected: Vec<(u64, String, bool)> =
        Step::ALL.iter().map(|s| (s.number() as u64, s.as_str().to_string(), true)).collect();
    assert_eq!(steps, expected, "{identity}: the shutdown steps, in order, each within its deadline");
    let last = lines.last().and_then(|l| l.pointer("/fields/message")).and_then(Value::as_str);
    assert_eq!(last, Some("controller stopped cleanly"), "{identity}: the last line");
}

async fn create_namespace(c: &Client, ns: &str) {
    let namespace = Namespace {
        metadata: ObjectMeta { name: Some(ns.to_string()), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("create namespace {ns}: {e}"));
}

/// What Kubeflow's status server writes for one report.
async fn report_loss(c: &Client, ns: &str, at: Timestamp, loss: f64, round: usize) {
    let body = json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "status": {"trainerStatus": {
            "progressPercentage": 10 + round,
            "estimatedRemainingSeconds": 3600,
            "metrics": [{"name": "loss", "value": format!("{loss:.3}")}],
            "lastUpdatedTime": at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }},
    });
    trainjob_api(c.clone(), Some(ns))
        .patch_status("ft", &PatchParams::apply(TRAINER_STATUS_FIELD_MANAGER).force(), &Patch::Apply(&body))
        .await
        .expect("report progress");
}

/// The checkpoint on the TrainJob, parsed.
async fn checkpoint(c: &Client, ns: &str) -> Option<Value> {
    let text = job(c, ns, "ft").await.annotations().get(HISTORY_ANNOTATION)?.clone();
    serde_json::from_str(&text).ok()
}

/// How many samples the checkpoint counts.
async fn checkpoint_samples(c: &Client, ns: &str) -> Option<u64> {
    checkpoint(c, ns).await?.pointer("/s/n")?.as_u64()
}

/// The port the controller announced (`serving /healthz, /readyz and /metrics`).
fn served_port(log: &Path) -> Option<u16> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        if v.pointer("/fields/message")?.as_str()? != "serving /healthz, /readyz and /metrics" {
            return None;
        }
        v.pointer("/fields/addr")?.as_str()?.rsplit(':').next()?.parse().ok()
    })
}

/// One metric's value (the sum over its label sets) from `/metrics`.
async fn metric(port: u16, name: &str) -> Option<f64> {
    let body = http_get(port, "/metrics").await?;
    if !body.contains(" 200 ") {
        return None;
    }
    Some(
        body.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

// Notifications across a graceful stop -------------------------------------------------------------------

/// Policy `name` for the jobs labelled `phase: <name>`, with a receiver `team` (a webhook on `url`) that
/// waits `group_wait` before a group's first message; a job silent for 3 s fires and notifies.
fn notify_policy(name: &str, group_wait: &str, url: &str) -> String {
    live_policy(name)
        .spec(&format!(
            "selector: {{matchLabels: {{phase: {name}}}}}\nreceivers:\n  - name: team\n    groupWait: {group_wait}\n    webhook: {{url: \"{url}\"}}"
        ))
        .rule("{name: stalled, uses: stalled, with: {after: 3s}, actions: [{notify: {to: team}}]}")
        .yaml()
}

/// Two replicas in process (leader election on the test namespace's Lease).
fn replica(c: &Client, ns: &str, identity: &str) -> Running {
    let config = trainwarden_controller::ControllerConfig {
        leader_election: true,
        identity: identity.to_string(),
        lease_duration: Duration::from_secs(4),
        ..config_for(ns)
    };
    start(c, config)
}

async fn lease_holder(c: &Client, ns: &str) -> Option<String> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(c.clone(), ns);
    api.get_opt("trainwarden-leader").await.ok()??.spec?.holder_identity
}

async fn wait_for_leader(c: &Client, ns: &str, identity: &str) {
    eventually(&format!("{identity} leading"), Duration::from_secs(20), || async {
        (lease_holder(c, ns).await.as_deref() == Some(identity)).then_some(())
    })
    .await;
}

/// The messages the receiver got about job `name`, each with its alerts' intent ids.
fn messages_about(
    receiver: &trainwarden_testkit::receivers::HttpReceiver,
    ns: &str,
    name: &str,
) -> Vec<Vec<String>> {
    receiver
        .requests_to("/hook")
        .iter()
        .map(trainwarden_testkit::receivers::Request::json)
        .filter(|m| {
            m["alerts"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["job"]["name"] == name && x["job"]["namespace"] == ns))
        })
        .map(|m| {
            m["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a["intentId"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .collect()
}

/// A message pending when the leader is stopped is delivered by that leader's stop, and the next leader does
/// not send it again; one the stop could not deliver (the receiver failing) stays owed, and the next leader
/// sends it once, with the same intent id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_notification_pending_at_a_graceful_stop_is_sent_once_by_the_stop_or_by_the_next_leader() {
    let ctx = setup!("controller_stop_notifications");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let receiver = trainwarden_testkit::receivers::HttpReceiver::start().await;
    // `held` keeps its message until the stop (an hour's groupWait); `prompt` sends after a second.
    apply_policy(c, ns, &notify_policy("held", "1h", &receiver.url("/hook"))).await;
    apply_policy(c, ns, &notify_policy("prompt", "1s", &receiver.url("/hook"))).await;
    create_trainjob(c, ns, "first", &[("phase", "held")]).await;
    create_trainjob(c, ns, "second", &[("phase", "prompt")]).await;

    // 1. Pending at the stop, delivered by it.
    let a = replica(c, ns, "a");
    wait_for_leader(c, ns, "a").await;
    let b = replica(c, ns, "b");
    wait_until_watching(c, ns, "held", 1).await;
    wait_until_watching(c, ns, "prompt", 1).await;
    report(c, ns, "first", Timestamp::from_second(Timestamp::now().as_second()).unwrap(), "0.5", 10).await;
    eventually("the stall firing on first", Duration::from_secs(20), || async {
        let s = policy_status(c, ns, "held").await;
        s.jobs.iter().any(|j| j.name == format!("{ns}/first") && !j.firing.is_empty()).then_some(())
    })
    .await;
    assert!(messages_about(&receiver, ns, "first").is_empty(), "held by groupWait until the stop");
    a.stop().await;
    let first = messages_about(&receiver, ns, "first");
    assert_eq!(first.len(), 1, "the stop delivered the pending message before it returned");
    wait_for_leader(c, ns, "b").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(messages_about(&receiver, ns, "first"), first, "the next leader did not send it again");

    // 2. Not deliverable (503s, retried) when the leader stops: owed, and sent once by the next leader.
    let a2 = replica(c, ns, "a2");
    tokio::time::sleep(Duration::from_secs(2)).await;
    receiver.fail_with(&[503; 100]);
    report(c, ns, "second", Timestamp::from_second(Timestamp::now().as_second()).unwrap(), "0.5", 10).await;
    receiver.wait_for("/hook", first.len() + 1, Duration::from_secs(20)).await;
    let stopping = Instant::now();
    b.stop().await;
    let refused = messages_about(&receiver, ns, "second");
    assert!(!refused.is_empty(), "the leader tried to deliver it (and got 503s)");
    eprintln!(
        "[stops] the leader tried {} time(s); its stop took {:.1} s",
        refused.len(),
        stopping.elapsed().as_secs_f64()
    );
    receiver.heal();
    wait_for_leader(c, ns, "a2").await;
    let sent = eventually("the next leader sending it", Duration::from_secs(20), || async {
        let all = messages_about(&receiver, ns, "second");
        (all.len() > refused.len()).then_some(all)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = messages_about(&receiver, ns, "second");
    assert_eq!(all.len(), refused.len() + 1, "one message from the next leader, not more");
    assert_eq!(sent.last(), refused.last(), "the same alert, by the same intent id");
    assert!(sent.last().unwrap().iter().all(|id| !id.is_empty()), "the message carries the intent id");
    assert_eq!(messages_about(&receiver, ns, "first"), first, "and the first job's message was not repeated");
    a2.stop().await;
}
