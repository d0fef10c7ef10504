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

mod leader;
mod links;
mod load;
mod stale;

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
