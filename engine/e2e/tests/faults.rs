//! Fault injection: the `trainwarden controller` binary, as real processes, against a real kube-apiserver +
//! etcd of this test binary's own, through a TCP fault proxy per replica. Faults are real: `kill -9` of
//! controllers, of the API server and of etcd, black holes and connection resets between a controller and
//! the API server, 429s from API Priority and Fairness. Each scenario ends by checking every TrainJob: suspended, its suspension recorded once
//! (the intent id in `trainwarden.dev/intents`), no second `Suspended` Event, and the policy's totals.
//!
//! The scenarios share one control plane and kill parts of it, so they run one at a time (a lock). Each
//! appends its row (scenario, expected, performed, doubled, lost, time to recover) to
//! `$CARGO_TARGET_TMPDIR/fault-table.tsv`, which `tests/run-all.sh` prints at the end.
//! `TRAINWARDEN_SOAK_JOBS` / `TRAINWARDEN_SOAK_SECONDS` size the leader-kill soak (CI: 30 jobs, 40 s;
//! the full one: 100 jobs, 120 s).

use trainwarden_testkit::apiserver as support;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use support::{Component, Plane};
use trainwarden_controller::INTENTS_ANNOTATION;
use trainwarden_kube::ProgressPolicy;
use trainwarden_kube::trainjob::trainjob_api;
use trainwarden_testkit::faultproxy::FaultProxy;

use trainwarden_e2e::controller::*;

// The plane, the lock, the table -------------------------------------------------------------------------

static PLANE: OnceLock<Result<Plane, String>> = OnceLock::new();
/// A plane with RHOAI 3.4's TrainJob CRD (mutable `spec.trainer`, so a `scale` can act); it has the upstream
/// CRD's name, so it cannot share the other scenarios' plane.
static RHOAI_PLANE: OnceLock<Result<Plane, String>> = OnceLock::new();
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Scene {
    client: Client,
    ns: String,
    plane: &'static Plane,
    dir: PathBuf,
    /// Held by the scene that took the lock (a round inside a scenario holds none).
    _serial: Option<tokio::sync::MutexGuard<'static, ()>>,
}

/// The private plane (started once), the lock, a client and a fresh namespace; `None`: skip (printed why).
async fn scene(name: &str) -> Option<Scene> {
    scene_on(&PLANE, name).await
}

async fn scene_on(plane: &'static OnceLock<Result<Plane, String>>, name: &str) -> Option<Scene> {
    let serial = SERIAL.lock().await;
    let plane = match plane.get_or_init(support::start_private_plane) {
        Ok(p) => p,
        Err(reason) => {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            if !ci && std::env::var("TRAINWARDEN_SKIP_APISERVER_TESTS").is_ok_and(|v| v == "1") {
                eprintln!("SKIPPED: no control plane for the fault tests: {reason}");
                return None;
            }
            panic!("no control plane for the fault tests: {reason}");
        }
    };
    let client = trainwarden_kube::client::client_from_kubeconfig(&plane.kubeconfig).await.expect("client");
    support::apply_crds(&client).await.expect("CRDs");
    let ns = namespace(&client, &format!("fault-{name}")).await;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&ns);
    std::fs::create_dir_all(&dir).expect("scene dir");
    Some(Scene { client, ns, plane, dir, _serial: Some(serial) })
}

/// One row of the reliability table.
struct Row {
    scenario: &'static str,
    expected: usize,
    performed: usize,
    doubled: usize,
    lost: usize,
    recovered_in: Duration,
}

fn record(row: &Row) {
    let line = format!(
        "{}\t{}\t{}\t{}\t{}\t{:.1} s\n",
        row.scenario,
        row.expected,
        row.performed,
        row.doubled,
        row.lost,
        row.recovered_in.as_secs_f64()
    );
    eprintln!("[fault table] {line}");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fault-table.tsv");
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("fault table");
    let _ = f.write_all(line.as_bytes());
    assert_eq!((row.performed, row.doubled, row.lost), (row.expected, 0, 0), "{}", row.scenario);
}

// Controller replicas as processes ----------------------------------------------------------------------

/// `trainwarden controller`, a real process, reaching the API server through its own fault proxy.
struct Replica {
    identity: String,
    child: Child,
    proxy: FaultProxy,
    log: PathBuf,
}

impl Replica {
    fn start(s: &Scene, identity: &str, leader_election: bool) -> Replica {
        let proxy = FaultProxy::start(s.plane.apiserver_addr()).expect("fault proxy");
        Self::start_behind(s, identity, leader_election, proxy)
    }

    fn start_behind(s: &Scene, identity: &str, leader_election: bool, proxy: FaultProxy) -> Replica {
        let kubeconfig = s.plane.kubeconfig_via(proxy.addr(), &s.dir.join(format!("{identity}.kubeconfig")));
        Self::start_with(s, identity, leader_election, proxy, kubeconfig)
    }

    /// As a ServiceAccount (its token in the kubeconfig) rather than the plane's `system:masters` admin,
    /// whose requests API Priority and Fairness exempts.
    fn start_as(s: &Scene, identity: &str, token: &str) -> Replica {
        let proxy = FaultProxy::start(s.plane.apiserver_addr()).expect("fault proxy");
        let path = s.dir.join(format!("{identity}.kubeconfig"));
        let kubeconfig = s.plane.kubeconfig_via(proxy.addr(), &path);
        let text = std::fs::read_to_string(&kubeconfig).expect("kubeconfig");
        let with_token: Vec<String> = text
            .lines()
            .map(|l| match l.trim().strip_prefix("token:") {
                Some(_) => format!("{}token: {token}", &l[..l.len() - l.trim_start().len()]),
                None => l.to_string(),
            })
            .collect();
        assert!(with_token.iter().any(|l| l.contains(token)), "the kubeconfig has a token line");
        std::fs::write(&kubeconfig, with_token.join("\n") + "\n").expect("write kubeconfig");
        Self::start_with(s, identity, true, proxy, kubeconfig)
    }

    fn start_with(
        s: &Scene,
        identity: &str,
        leader_election: bool,
        proxy: FaultProxy,
        kubeconfig: PathBuf,
    ) -> Replica {
        let log = s.dir.join(format!("{identity}.log"));
        let out = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("log file");
        let child = Command::new(trainwarden_e2e::binaries::binary("trainwarden", "trainwarden"))
            .arg("controller")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", &s.ns, "--lease-namespace", &s.ns, "--identity", identity])
            .args(["--leader-election", if leader_election { "true" } else { "false" }])
            .args(["--lease-duration", "4s", "--api-timeout", "2s", "--eval-interval", "1s"])
            .args(["--status-interval", "200ms", "--notifications", "false", "--http-addr", "127.0.0.1:0"])
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("start trainwarden controller");
        Replica { identity: identity.to_string(), child, proxy, log }
    }

    /// `kill -9`: nothing is flushed, the Lease is not given up.
    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The `/metrics` address, from the log line that announces it.
    fn metrics_addr(&self) -> Option<String> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        text.lines().rev().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v.pointer("/fields/message")?.as_str()? == "serving /healthz, /readyz and /metrics")
                .then(|| v.pointer("/fields/addr")?.as_str().map(str::to_string))?
        })
    }

    /// The value of one metric series (the sum of its label sets), read from `/metrics`.
    fn metric(&self, name: &str) -> f64 {
        let Some(addr) = self.metrics_addr() else { return 0.0 };
        let Ok(mut stream) = std::net::TcpStream::connect(&addr) else { return 0.0 };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
        let mut body = String::new();
        let _ = stream.read_to_string(&mut body);
        body.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

async fn lease_holder(c: &Client, ns: &str) -> Option<String> {
    let lease = Api::<Lease>::namespaced(c.clone(), ns).get_opt("trainwarden-leader").await.ok()??;
    lease.spec?.holder_identity
}

/// Waits until exactly one of `replicas` says it leads (`trainwarden_leader` 1) and the Lease names it, the
/// same on two looks a second apart (two replicas starting together can both believe they lead for a moment,
/// until the loser's next renewal); returns its index.
async fn settled_leader(c: &Client, ns: &str, replicas: &[&Replica]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut previous = None;
    loop {
        let leading: Vec<usize> =
            (0..replicas.len()).filter(|i| replicas[*i].metric("trainwarden_leader") == 1.0).collect();
        let holder = lease_holder(c, ns).await;
        let now = match leading.as_slice() {
            [i] if holder.as_deref() == Some(replicas[*i].identity.as_str()) => Some(*i),
            _ => None,
        };
        if now.is_some() && now == previous {
            return now.unwrap_or_default();
        }
        assert!(
            Instant::now() < deadline,
            "no settled leader after 30 s (leading: {leading:?}, Lease: {holder:?})"
        );
        previous = now;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until one of `ids` holds the Lease; returns it.
async fn wait_for_leader(c: &Client, ns: &str, ids: &[&str]) -> String {
    eventually("a leader", Duration::from_secs(30), || async {
        lease_holder(c, ns).await.filter(|h| ids.contains(&h.as_str()))
    })
    .await
}

// What the cluster shows at the end ---------------------------------------------------------------------

/// How the jobs ended: suspended with the suspension recorded (performed) or not (lost), and `Suspended`
/// Events beyond one per job (doubled; an Event series counts each time).
struct Verdict {
    performed: usize,
    doubled: usize,
    lost: usize,
}

async fn suspended_events(c: &Client, ns: &str, name: &str) -> usize {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), ns);
    api.list(&Default::default())
        .await
        .expect("list events")
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some("Suspended"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1) as usize))
        .sum()
}

async fn verdict(c: &Client, ns: &str, names: &[String]) -> Verdict {
    let mut v = Verdict { performed: 0, doubled: 0, lost: 0 };
    for name in names {
        let j = job(c, ns, name).await;
        let recorded: Vec<String> = j
            .annotations()
            .get(INTENTS_ANNOTATION)
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_default();
        let events = suspended_events(c, ns, name).await;
        if suspended(&j) && !recorded.is_empty() {
            v.performed += 1;
        } else {
            v.lost += 1;
        }
        v.doubled += events.saturating_sub(1);
    }
    v
}

/// Waits until every job is suspended (up to `within`), then lets the executors settle; returns when the
/// last suspension was first seen (polled every 100 ms).
async fn wait_all_suspended(c: &Client, ns: &str, names: &[String], within: Duration) -> Timestamp {
    let seen = eventually(&format!("{} job(s) suspended", names.len()), within, || async {
        for n in names {
            if !suspended(&job(c, ns, n).await) {
                return None;
            }
        }
        Some(Timestamp::now())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    seen
}

/// A namespace of its own for one round of a scenario.
async fn namespace(c: &Client, name: &str) -> String {
    let ns = format!("{name}-{}", std::process::id());
    let namespace = Namespace {
        metadata: ObjectMeta { name: Some(ns.clone()), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    Api::<Namespace>::all(c.clone()).create(&PostParams::default(), &namespace).await.expect("namespace");
    ns
}

const STALL_AFTER: i64 = 10;

fn stall_policy() -> String {
    policy(
        "stall",
        "Enforce",
        &format!(
            "    - {{name: stalled, uses: stalled, with: {{after: {STALL_AFTER}s}}, actions: [{{suspend: {{}}}}]}}\n"
        ),
    )
}

/// `n` TrainJobs that report once now; returns their names and the stall deadline.
async fn stalling_jobs(c: &Client, ns: &str, prefix: &str, n: usize) -> (Vec<String>, Timestamp) {
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i:03}")).collect();
    for name in &names {
        create_trainjob(c, ns, name, &[]).await;
    }
    let last = seconds_ago(0);
    for name in &names {
        report(c, ns, name, last, "0.5", 40).await;
    }
    (names, Timestamp::from_second(last.as_second() + STALL_AFTER).unwrap())
}

async fn sleep_until(t: Timestamp) {
    let wait = t.duration_since(Timestamp::now()).as_secs_f64();
    if wait > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
    }
}

fn since(t: Timestamp, end: Option<Timestamp>) -> Duration {
    let end = end.unwrap_or_else(Timestamp::now);
    Duration::from_secs_f64(end.duration_since(t).as_secs_f64().max(0.0))
}

/// The GPU-hours the evaluator (the pure core, the same code the controller runs) frees by suspending
/// `job` when the stall policy fires at `deadline`: the oracle for the soak's totals.
fn expected_savings(obj: &kube::api::DynamicObject, ns: &str, deadline: Timestamp) -> f64 {
    use trainwarden_core::{EngineConfig, Evaluator, Event};
    let yaml = stall_policy()
        .replace("metadata: {name: stall}", &format!("metadata: {{name: stall, namespace: {ns}}}"));
    let doc = trainwarden_core::parse_documents(&yaml, "stall").expect("policy").remove(0);
    let mut evaluator = Evaluator::new(EngineConfig::default());
    let compiled = trainwarden_core::compile(&doc, evaluator.scripts()).expect("compiles");
    let mut events = Vec::new();
    let snapshot = trainwarden_kube::trainjob::to_snapshot(obj).expect("a readable TrainJob");
    let observed_at = snapshot.sample.as_ref().map_or(deadline, |s| s.updated_at);
    evaluator.upsert_policy(compiled, observed_at, &mut events);
    evaluator.observe(snapshot, observed_at, &mut events);
    evaluator.tick(deadline, &mut events);
    events
        .iter()
        .find_map(|e| match e {
            Event::Intent(i) => i.savings.as_ref().map(|s| s.gpu_hours),
            _ => None,
        })
        .expect("the stall fires with savings")
}

// Scenarios ---------------------------------------------------------------------------------------------

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
    apply_policy(
        c,
        ns,
        "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\nmetadata: {name: shrink}\nspec:\n  mode: Enforce\n  samplingInterval: 1s\n  rules:\n    - {name: nan-loss, uses: non_finite, with: {metric: loss}, actions: [{scale: {numNodes: 1}}]}\n",
    )
    .await;
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

/// 4. A 30 s black hole between the only controller and the API server while a stall deadline passes
/// (the Lease expires meanwhile): acted on as soon as it heals.
#[tokio::test]
async fn a_thirty_second_black_hole_over_a_deadline_is_acted_on_when_it_heals() {
    let Some(s) = scene("black-hole").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    apply_policy(c, ns, &stall_policy()).await;
    let r = Replica::start(&s, "only", true);
    wait_for_leader(c, ns, &["only"]).await;
    wait_until_watching(c, ns, "stall", 0).await;
    let (names, deadline) = stalling_jobs(c, ns, "job", 1).await;
    wait_until_watching(c, ns, "stall", 1).await;
    sleep_until(Timestamp::from_second(deadline.as_second() - 2).unwrap()).await;
    r.proxy.black_hole();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(!suspended(&job(c, ns, &names[0]).await));
    r.proxy.heal();
    let healed = Timestamp::now();
    let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(45)).await;
    let v = verdict(c, ns, &names).await;
    record(&Row {
        scenario: "4. 30 s black hole over the deadline (time after healing)",
        expected: 1,
        performed: v.performed,
        doubled: v.doubled,
        lost: v.lost,
        recovered_in: since(healed, Some(seen)),
    });
}

/// 8. A slow link over a deadline (toxiproxy's latency and bandwidth toxics): 400 ms each way on every
/// chunk and 16 KiB/s each direction between the only controller and the API server. Its Lease renewals,
/// watches and writes still fit its 2 s API timeout: the stall is acted on, once, a little late.
#[tokio::test]
async fn a_slow_link_over_a_deadline_delays_the_action_and_does_not_double_it() {
    let Some(s) = scene("slow-link").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    apply_policy(c, ns, &stall_policy()).await;
    let r = Replica::start(&s, "only", true);
    wait_for_leader(c, ns, &["only"]).await;
    wait_until_watching(c, ns, "stall", 0).await;
    let (names, deadline) = stalling_jobs(c, ns, "job", 1).await;
    wait_until_watching(c, ns, "stall", 1).await;
    sleep_until(Timestamp::from_second(deadline.as_second() - 2).unwrap()).await;
    r.proxy.degrade(Duration::from_millis(400), 16 * 1024);
    let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(45)).await;
    // Still degraded while a repeat would come: the next evaluations see the job stalled and suspended.
    tokio::time::sleep(Duration::from_secs(5)).await;
    r.proxy.heal();
    let v = verdict(c, ns, &names).await;
    assert_eq!(lease_holder(c, ns).await.as_deref(), Some("only"), "the Lease was kept over the slow link");
    let status = eventually("counted", Duration::from_secs(10), || async {
        let st = policy_status(c, ns, "stall").await;
        (st.action_counts.values().sum::<i64>() >= 1).then_some(st)
    })
    .await;
    assert_eq!(status.action_counts.get("suspend/done"), Some(&1), "{:?}", status.action_counts);
    assert_eq!(status.action_counts.values().sum::<i64>(), 1, "{:?}", status.action_counts);
    record(&Row {
        scenario: "8. slow link over the deadline: 400 ms per chunk each way, 16 KiB/s (time after the deadline)",
        expected: 1,
        performed: v.performed,
        doubled: v.doubled,
        lost: v.lost,
        recovered_in: since(deadline, Some(seen)),
    });
}

/// 3. kube-apiserver, then etcd, `kill -9`ed just before a deadline and started again 8 s later: the
/// controller (leader election on) acts once each is back. Each round has its own namespace and replica.
#[tokio::test]
async fn the_api_server_or_etcd_killed_over_a_deadline_delays_the_action_and_does_not_lose_it() {
    let Some(s) = scene("plane-killed").await else { return };
    let c = &s.client;
    for (component, prefix, label) in [
        (
            Component::ApiServer,
            "apiserver",
            "3a. kube-apiserver killed over the deadline (time after it is back)",
        ),
        (Component::Etcd, "etcd", "3b. etcd killed over the deadline (time after it is back)"),
    ] {
        let ns = namespace(c, &format!("fault-{prefix}")).await;
        let ns = ns.as_str();
        let round = Scene {
            client: c.clone(),
            ns: ns.to_string(),
            plane: s.plane,
            dir: s.dir.clone(),
            _serial: None,
        };
        apply_policy(c, ns, &stall_policy()).await;
        let _r = Replica::start(&round, prefix, true);
        wait_for_leader(c, ns, &[prefix]).await;
        wait_until_watching(c, ns, "stall", 0).await;
        let (names, deadline) = stalling_jobs(c, ns, "job", 1).await;
        wait_until_watching(c, ns, "stall", 1).await;
        sleep_until(Timestamp::from_second(deadline.as_second() - 1).unwrap()).await;
        s.plane.kill(component);
        tokio::time::sleep(Duration::from_secs(8)).await;
        s.plane.revive(component);
        let back = Timestamp::now();
        let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(45)).await;
        let v = verdict(c, ns, &names).await;
        record(&Row {
            scenario: label,
            expected: 1,
            performed: v.performed,
            doubled: v.doubled,
            lost: v.lost,
            recovered_in: since(back, Some(seen)),
        });
    }
}

/// 6. A TrainJob and a policy deleted while the controller cannot see (black hole), then the API server
/// restarted (its watch cache starts over, so resuming the watches answers 410 Gone and they re-list): the
/// re-list reports both as gone; the deleted policy never acts, the kept one acts on the kept job only.
#[tokio::test]
async fn a_job_and_a_policy_deleted_during_a_relist_are_forgotten() {
    let Some(s) = scene("relist").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    let slow = |name: &str| {
        policy(
            name,
            "Enforce",
            "    - {name: stalled, uses: stalled, with: {after: 25s}, actions: [{suspend: {}}]}\n",
        )
    };
    apply_policy(c, ns, &slow("kept")).await;
    apply_policy(c, ns, &slow("deleted")).await;
    let r = Replica::start(&s, "only", false);
    wait_until_watching(c, ns, "kept", 0).await;
    for name in ["stays", "goes"] {
        create_trainjob(c, ns, name, &[]).await;
    }
    let last = seconds_ago(0);
    for name in ["stays", "goes"] {
        report(c, ns, name, last, "0.5", 40).await;
    }
    let deadline = Timestamp::from_second(last.as_second() + 25).unwrap();
    wait_until_watching(c, ns, "kept", 2).await;
    r.proxy.black_hole();
    let t0 = Instant::now();
    trainjob_api(c.clone(), Some(ns)).delete("goes", &DeleteParams::default()).await.expect("delete job");
    Api::<ProgressPolicy>::namespaced(c.clone(), ns)
        .delete("deleted", &DeleteParams::default())
        .await
        .expect("delete policy");
    s.plane.kill(Component::ApiServer);
    s.plane.revive(Component::ApiServer);
    // The old connections are reset (what they held back, the Delete events among it, is lost with them),
    // so the controller reconnects to the new server and its watches resume from their old versions.
    r.proxy.reset();
    tokio::time::sleep(Duration::from_millis(500)).await;
    r.proxy.heal();
    let c = &trainwarden_kube::client::client_from_kubeconfig(&s.plane.kubeconfig).await.expect("client");
    eventually("the kept policy's status without the deleted job", Duration::from_secs(30), || async {
        let st = policy_status(c, ns, "kept").await;
        (st.matched_jobs == Some(1) && st.jobs.iter().all(|j| !j.name.ends_with("/goes"))).then_some(())
    })
    .await;
    let recovered = t0.elapsed();
    // Both by a re-list (no Delete event got through): the policy watches re-list on their own backoff,
    // possibly after the TrainJob watch has.
    eventually("both deletions found by a re-list", Duration::from_secs(30), || async {
        (r.metric("trainwarden_relist_deletions_total") >= 2.0).then_some(())
    })
    .await;
    sleep_until(Timestamp::from_second(deadline.as_second() + 1).unwrap()).await;
    let names = vec!["stays".to_string()];
    wait_all_suspended(c, ns, &names, Duration::from_secs(15)).await;
    assert_eq!(count(&events(c, ns, "stays").await, "Suspended"), 1);
    let j = job(c, ns, "stays").await;
    let by =
        j.annotations().get(trainwarden_controller::SUSPENDED_BY_ANNOTATION).cloned().unwrap_or_default();
    assert!(by.contains("kept") && !by.contains("deleted"), "suspended by {by}");
    let v = verdict(c, ns, &names).await;
    record(&Row {
        scenario: "6. job and policy deleted during a re-list (time to forget)",
        expected: 1,
        performed: v.performed,
        doubled: v.doubled,
        lost: v.lost,
        recovered_in: recovered,
    });
}

/// 7. Many TrainJobs stall at once while the leader is `kill -9`ed every 10 s (and started again) for the
/// whole soak: every job suspended exactly once and the savings total the sum of the jobs' savings.
#[tokio::test]
async fn many_jobs_firing_while_the_leader_is_killed_every_ten_seconds_are_each_suspended_once() {
    let Some(s) = scene("soak").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    let n: usize = std::env::var("TRAINWARDEN_SOAK_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let soak = Duration::from_secs(
        std::env::var("TRAINWARDEN_SOAK_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40),
    );
    apply_policy(c, ns, &stall_policy()).await;
    // Like a Deployment's pods: a replica started again has a new name (one restarted under the holder's
    // name would find the Lease its own and lead at once).
    let mut ids: Vec<String> = vec!["soak-a".into(), "soak-b".into()];
    let mut replicas: Vec<Replica> = ids.iter().map(|id| Replica::start(&s, id, true)).collect();
    wait_for_leader(c, ns, &["soak-a", "soak-b"]).await;
    wait_until_watching(c, ns, "stall", 0).await;
    let (names, deadline) = stalling_jobs(c, ns, "job", n).await;
    let one_job = expected_savings(&job(c, ns, &names[0]).await, ns, deadline);
    // The first kill lands just after the deadline, in the middle of acting on the burst.
    sleep_until(deadline).await;
    let started = Instant::now();
    let mut kills = 0;
    let mut all_suspended_at: Option<Timestamp> = None;
    let mut next_kill = Duration::from_millis(300);
    while started.elapsed() < soak {
        tokio::time::sleep(next_kill.saturating_sub(started.elapsed()).min(Duration::from_millis(250))).await;
        if all_suspended_at.is_none() {
            let jobs = trainjob_api(c.clone(), Some(ns)).list(&Default::default()).await.expect("list");
            if jobs.items.iter().filter(|j| suspended(j)).count() == n {
                all_suspended_at = Some(Timestamp::now());
            }
        }
        if started.elapsed() < next_kill {
            continue;
        }
        next_kill += Duration::from_secs(10);
        if let Some(holder) = lease_holder(c, ns).await
            && let Some(i) = ids.iter().position(|id| *id == holder)
        {
            replicas[i].kill9();
            kills += 1;
            ids[i] = format!("{}-{kills}", &ids[i][..6]);
            replicas[i] = Replica::start(&s, &ids[i], true);
        }
    }
    eprintln!("killed the leader {kills} times in {:.0} s", soak.as_secs_f64());
    let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(60)).await;
    let v = verdict(c, ns, &names).await;
    let counted = |st: &trainwarden_kube::ProgressPolicyStatus| -> i64 {
        ["suspend/done", "suspend/already_done"]
            .iter()
            .map(|k| st.action_counts.get(*k).copied().unwrap_or(0))
            .sum()
    };
    let waited = Instant::now();
    let status = loop {
        let st = policy_status(c, ns, "stall").await;
        if counted(&st) == n as i64 || waited.elapsed() > Duration::from_secs(20) {
            break st;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Every suspension counted once: performed by a leader, found done by the next one (re-issued), or found
    // recorded on its TrainJob by the replica that takes over when no status counted it (a leader lost within
    // its status interval after acting).
    let total = status.gpu_hours_saved.unwrap_or(0.0);
    eprintln!(
        "counted {} of {n} suspensions, {total} GPU-hours ({:?}); the evaluator's figure per job: {one_job}",
        counted(&status),
        status.action_counts
    );
    assert_eq!(counted(&status), n as i64, "each suspension counted once: {:?}", status.action_counts);
    // A suspension found recorded counts the record's GPU-hours (rounded to 0.01); one found done by a
    // replica that restarted counts the savings of its own (later) firing, a little less than the
    // original's: at most a minute late here, 8 GPUs, so within 0.15 GPU-hours.
    let high = (one_job + 0.005) * n as f64 + 0.002;
    assert!(total <= high, "GPU-hours {total} exceed {n} x {one_job} (at most {high})");
    let low = (one_job - 0.15) * n as f64;
    assert!(total >= low, "GPU-hours {total} for {n} suspensions (at least {low})");
    if let Some(dollars) = status.dollars_saved {
        // The last-action record keeps whole dollars and GPU-hours to 0.01: a suspension counted from it may
        // be off by half a dollar (plus $10 x 0.005) against the GPU-hours.
        let found = status.action_counts.get("suspend/already_done").copied().unwrap_or(0) as f64;
        let tolerance = 0.5 + 0.55 * found;
        assert!(
            (dollars - total * 10.0).abs() < tolerance,
            "{dollars} dollars for {total} GPU-hours at $10 (±{tolerance})"
        );
    }
    record(&Row {
        scenario: if n >= 100 {
            "7. 100 jobs fire, leader killed every 10 s (time until all suspended)"
        } else {
            "7. jobs fire, leader killed every 10 s (CI size; time until all suspended)"
        },
        expected: n,
        performed: v.performed,
        doubled: v.doubled,
        lost: v.lost,
        recovered_in: since(deadline, Some(all_suspended_at.unwrap_or(seen))),
    });
}

/// A ServiceAccount bound to `cluster-admin` (RBAC allows everything, but it is not in `system:masters`, so
/// API Priority and Fairness applies to it) and a token for it.
async fn service_account(c: &Client, ns: &str) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some("trainwarden".into()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    let accounts = Api::<ServiceAccount>::namespaced(c.clone(), ns);
    accounts.create(&PostParams::default(), &sa).await.expect("service account");
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("trainwarden-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "trainwarden", "namespace": ns}],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(c.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
    let request = TokenRequest {
        spec: TokenRequestSpec { expiration_seconds: Some(3600), ..TokenRequestSpec::default() },
        ..TokenRequest::default()
    };
    let token =
        accounts.create_token_request("trainwarden", &PostParams::default(), &request).await.expect("token");
    token.status.expect("token status").token
}

/// API Priority and Fairness: the ServiceAccount's requests in a priority level of no seats that rejects
/// what it cannot seat. Such a level still admits a request when none of its requests is executing (the
/// queue set's rule for a request wider than the limit), so [`hammer`] keeps one executing: every other
/// request then gets a real `429 Too Many Requests`.
async fn jail(
    c: &Client,
    ns: &str,
) -> (
    Api<k8s_openapi::api::flowcontrol::v1::FlowSchema>,
    Api<k8s_openapi::api::flowcontrol::v1::PriorityLevelConfiguration>,
    String,
) {
    use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
    let name = format!("trainwarden-jail-{ns}");
    let level: PriorityLevelConfiguration = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Reject"},
        }},
    }))
    .expect("priority level");
    let schema: FlowSchema = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": 50,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": "trainwarden", "namespace": ns}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }],
        },
    }))
    .expect("flow schema");
    let pp = PostParams::default();
    Api::<PriorityLevelConfiguration>::all(c.clone()).create(&pp, &level).await.expect("priority level");
    Api::<FlowSchema>::all(c.clone()).create(&pp, &schema).await.expect("flow schema");
    (Api::<FlowSchema>::all(c.clone()), Api::<PriorityLevelConfiguration>::all(c.clone()), name)
}

/// Load in the jail: `loops` tasks listing the namespace's ConfigMaps (a slow LIST: 150 of 16 KiB) as the
/// ServiceAccount, back to back, until `until`; returns how many requests were answered and how many got
/// 429.
async fn hammer(client: Client, ns: String, loops: usize, until: Instant) -> (u64, u64) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let tasks: Vec<_> = (0..loops)
        .map(|_| {
            let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
            tokio::spawn(async move {
                let (mut served, mut refused) = (0u64, 0u64);
                while Instant::now() < until {
                    match api.list(&Default::default()).await {
                        Ok(_) => served += 1,
                        Err(kube::Error::Api(e)) if e.code == 429 => refused += 1,
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
                (served, refused)
            })
        })
        .collect();
    let mut totals = (0, 0);
    for t in tasks {
        let (s, r) = t.await.expect("load task");
        totals = (totals.0 + s, totals.1 + r);
    }
    totals
}

/// 5. A minute of sustained 429s over the deadline (API Priority and Fairness, a jailed priority level kept
/// busy), then the limit lifted: every job is suspended, each once. (A 409 needs an update that carries a
/// resourceVersion; trainwarden's writes are forced server-side applies, so only its Lease can conflict,
/// which the leader-election scenarios exercise.)
#[tokio::test]
async fn a_minute_of_429s_from_api_priority_and_fairness_delays_the_actions_and_does_not_double_them() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let Some(s) = scene("too-many-requests").await else { return };
    let (c, ns) = (&s.client, s.ns.as_str());
    apply_policy(c, ns, &stall_policy()).await;
    let token = service_account(c, ns).await;
    let filler = "x".repeat(16 * 1024);
    for i in 0..150 {
        let cm: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": format!("ballast-{i}")}, "data": {"x": filler}}),
        )
        .expect("config map");
        Api::<ConfigMap>::namespaced(c.clone(), ns)
            .create(&PostParams::default(), &cm)
            .await
            .expect("ballast");
    }
    let r = Replica::start_as(&s, "only", &token);
    wait_for_leader(c, ns, &["only"]).await;
    wait_until_watching(c, ns, "stall", 0).await;
    let (names, deadline) = stalling_jobs(c, ns, "job", 3).await;
    wait_until_watching(c, ns, "stall", 3).await;
    sleep_until(Timestamp::from_second(deadline.as_second() - 5).unwrap()).await;
    let errors_before = r.metric("trainwarden_api_errors_total");
    let (schemas, levels, name) = jail(c, ns).await;
    // The load's own client does not retry 429s (kube's default does), so it counts each one.
    let as_account = {
        trainwarden_kube::client::install_crypto_provider();
        let mut config = trainwarden_kube::client::config_from_kubeconfig(&s.dir.join("only.kubeconfig"))
            .await
            .expect("the service account's kubeconfig");
        config.default_retry = false;
        Client::try_from(config).expect("a client as the service account")
    };
    let (served, refused) =
        hammer(as_account, ns.to_string(), 12, Instant::now() + Duration::from_secs(60)).await;
    let errors = r.metric("trainwarden_api_errors_total") - errors_before;
    schemas.delete(&name, &DeleteParams::default()).await.expect("lift the flow schema");
    levels.delete(&name, &DeleteParams::default()).await.expect("lift the priority level");
    eprintln!(
        "in the jail for 60 s: load {served} served, {refused} refused with 429; the controller counted {errors} failed API calls"
    );
    assert!(refused >= 60, "the jail must refuse requests all minute: {served} served, {refused} refused");
    assert!(errors > 0.0, "the controller's calls must have been refused too");
    let seen = wait_all_suspended(c, ns, &names, Duration::from_secs(360)).await;
    // Suspended at the deadline, the 429s would not have been in the way: the scenario would test nothing.
    assert!(
        since(deadline, Some(seen)) > Duration::from_secs(10),
        "suspended {:?} after the deadline, as if the jail refused nothing",
        since(deadline, Some(seen))
    );
    let v = verdict(c, ns, &names).await;
    let bindings = Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(c.clone());
    bindings.delete(&format!("trainwarden-{ns}"), &DeleteParams::default()).await.expect("binding");
    record(&Row {
        scenario: "5. sustained 429s for 60 s over the deadline, API Priority and Fairness (time after the deadline)",
        expected: names.len(),
        performed: v.performed,
        doubled: v.doubled,
        lost: v.lost,
        recovered_in: since(deadline, Some(seen)),
    });
}
