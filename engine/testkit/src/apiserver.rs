//! A real kube-apiserver + etcd for the integration tests, shared by every test of one test binary.
//!
//! Where the control plane comes from, in order:
//!
//! 1. `TRAINWARDEN_TEST_KUBECONFIG` (set by `tests/k8s/with-control-plane.sh`): use that plane as it is.
//! 2. Otherwise the first test starts one with `tests/k8s/control-plane.sh start` + `install-crds`, through a
//!    small supervisor process (see `SUPERVISOR`) that stops it and removes its directory when this test
//!    process exits, however it exits: the supervisor waits for EOF on a pipe whose only write end this
//!    process holds, and the kernel closes that at exit, also on a panic, `exit()` or SIGKILL. (A `Drop` on a
//!    static never runs, and a PID watch could hit a recycled PID.)
//! 3. If that fails: under `CI=true` every test fails with the reason; elsewhere too, unless
//!    `TRAINWARDEN_SKIP_APISERVER_TESTS=1`, in which case each test prints the reason and returns.
//!
//! The plane is shared, the [`kube::Client`] is not: `#[tokio::test]` gives every test its own runtime and a
//! client's connection pool and buffer task belong to the runtime that created it, so each test builds its
//! own client from the shared kubeconfig (a few microseconds). Every test also gets its own namespace
//! ([`Ctx::ns`]); nothing is deleted, because this control plane has no namespace controller and no garbage
//! collector (a deleted namespace would stay `Terminating` forever).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use trainwarden_kube::{FIELD_MANAGER, client, crd};

/// The repository root (this crate is engine/testkit).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

/// The shared fixtures directory: `TRAINWARDEN_SHARED_DIR`, else `<repo>/../shared`.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os("TRAINWARDEN_SHARED_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => repo_root().join("../shared"),
    }
}

/// A fixture file under the shared directory.
pub fn fixture(relative: &str) -> String {
    let path = shared_dir().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (set TRAINWARDEN_SHARED_DIR to the shared/ directory)", path.display())
    })
}

/// A running control plane.
pub struct Plane {
    /// Its kubeconfig (a token for an admin user).
    pub kubeconfig: PathBuf,
    /// kubectl to run against it (`TRAINWARDEN_KUBECTL`, or the one the plane was started with).
    pub kubectl: Option<PathBuf>,
    /// kubectl's discovery cache for this plane (keeps ~/.kube/cache free of throw-away ports).
    pub kube_cache_dir: Option<PathBuf>,
    /// The plane's directory (`control-plane.sh` state), for a private plane: what [`Plane::kill`] and
    /// [`Plane::revive`] act on.
    pub dir: Option<PathBuf>,
    /// Held, never written: its closing at process exit tells the supervisor to stop the plane.
    _lifeline: Option<ChildStdin>,
}

/// Runs as `bash -c SUPERVISOR supervisor DIR CONTROL_PLANE_SH`, in its own process group (so a Ctrl-C
/// aimed at `cargo test` does not kill it before it has cleaned up). Prints `key=value` lines and `READY`,
/// or `FAILED`, on stdout; logs go to DIR/supervisor.log. Then it blocks reading stdin until EOF, which
/// happens when the test process has exited, and stops the plane and removes DIR.
const SUPERVISOR: &str = r#"
set -u
trap '' INT HUP PIPE
dir="$1"; control_plane="$2"; log="$dir/supervisor.log"
if "$control_plane" start "$dir" >>"$log" 2>&1 && . "$dir/env" \
   && "$control_plane" install-crds "$KUBECONFIG" >>"$log" 2>&1; then
  printf 'kubeconfig=%s\nkubectl=%s\nkubecachedir=%s\nREADY\n' \
    "$KUBECONFIG" "$TRAINWARDEN_KUBECTL" "$KUBECACHEDIR" 2>/dev/null
else
  echo FAILED 2>/dev/null
fi
exec >>"$log" 2>&1
cat >/dev/null
echo "test process exited; stopping the control plane"
"$control_plane" stop "$dir"
cd / && rm -rf "$dir"
"#;

fn start_plane() -> Result<Plane, String> {
    if let Some(kc) = std::env::var_os("TRAINWARDEN_TEST_KUBECONFIG").filter(|v| !v.is_empty()) {
        return Ok(Plane {
            kubeconfig: kc.into(),
            kubectl: std::env::var_os("TRAINWARDEN_KUBECTL").filter(|v| !v.is_empty()).map(PathBuf::from),
            kube_cache_dir: std::env::var_os("KUBECACHEDIR").filter(|v| !v.is_empty()).map(PathBuf::from),
            dir: None,
            _lifeline: None,
        });
    }
    start_private_plane()
}

/// A control plane of this test process's own, even when a shared one is given: for tests that must change
/// cluster-scoped objects other tests rely on (installing the RHOAI TrainJob CRD, which has the upstream
/// CRD's name). Stopped when the process exits, like the shared one. Under `CI=true` a failure to start is
/// the caller's to turn into a test failure.
pub fn start_private_plane() -> Result<Plane, String> {
    let control_plane = repo_root().join("tests/k8s/control-plane.sh");
    if !control_plane.is_file() {
        return Err(format!(
            "TRAINWARDEN_TEST_KUBECONFIG is not set and {} does not exist",
            control_plane.display()
        ));
    }
    let dir = std::env::temp_dir().join(format!("trainwarden-apiserver-tests.{}", unique_suffix()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let t0 = Instant::now();
    eprintln!("[apiserver tests] starting a control plane in {} (log: supervisor.log)", dir.display());
    let mut child = Command::new("bash")
        .args(["-c", SUPERVISOR, "supervisor"])
        .arg(&dir)
        .arg(&control_plane)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run bash for {}: {e}", control_plane.display()))?;
    let lifeline = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let mut values = std::collections::HashMap::new();
    let mut ready = false;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        match line.split_once('=') {
            Some((k, v)) => {
                values.insert(k.to_string(), v.to_string());
            }
            None if line == "READY" => {
                ready = true;
                break;
            }
            None => break,
        }
    }
    if !ready {
        let log = std::fs::read_to_string(dir.join("supervisor.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(80).collect::<Vec<_>>().into_iter().rev().collect();
        return Err(format!(
            "could not start a control plane with {} start/install-crds; last lines of its output:\n{}",
            control_plane.display(),
            tail.join("\n")
        ));
    }
    eprintln!("[apiserver tests] control plane ready in {:.1}s", t0.elapsed().as_secs_f64());
    let path = |k: &str| values.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    Ok(Plane {
        kubeconfig: path("kubeconfig").ok_or("the supervisor reported no kubeconfig")?,
        kubectl: path("kubectl"),
        kube_cache_dir: path("kubecachedir"),
        dir: Some(dir),
        _lifeline: lifeline,
    })
}

/// A component of the control plane, for fault injection.
#[derive(Clone, Copy, Debug)]
pub enum Component {
    /// etcd.
    Etcd,
    /// kube-apiserver.
    ApiServer,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "kube-apiserver",
        }
    }
}

impl Plane {
    /// `kill -9` of one component of a private plane (`control-plane.sh kill`).
    pub fn kill(&self, component: Component) {
        self.fault("kill", component);
    }

    /// Starts a killed component again as it was, and waits until it is ready (`control-plane.sh revive`).
    pub fn revive(&self, component: Component) {
        self.fault("revive", component);
    }

    fn fault(&self, verb: &str, component: Component) {
        let dir = self.dir.as_ref().expect("kill/revive need a private plane (start_private_plane)");
        let script = repo_root().join("tests/k8s/control-plane.sh");
        let out = Command::new(&script)
            .args([verb, component.name()])
            .arg(dir)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "control-plane.sh {verb} {} failed: {}",
            component.name(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The API server's address (from the kubeconfig's server URL).
    pub fn apiserver_addr(&self) -> std::net::SocketAddr {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server:"))
            .expect("a server: line in the kubeconfig")
            .trim()
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        server.parse().unwrap_or_else(|e| panic!("server address {server}: {e}"))
    }

    /// A copy of the kubeconfig whose server is `addr` (a [`crate::faultproxy::FaultProxy`] in front of
    /// the API server; the serving certificate names 127.0.0.1, so TLS still verifies), written to `path`.
    pub fn kubeconfig_via(&self, addr: std::net::SocketAddr, path: &Path) -> PathBuf {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig");
        let rewritten: Vec<String> = text
            .lines()
            .map(|l| match l.trim().strip_prefix("server:") {
                Some(_) => {
                    let indent = &l[..l.len() - l.trim_start().len()];
                    format!("{indent}server: https://{addr}")
                }
                None => l.to_string(),
            })
            .collect();
        std::fs::write(path, rewritten.join("\n") + "\n").expect("write kubeconfig");
        path.to_path_buf()
    }

    /// A copy of the kubeconfig whose server is plain `http://addr`: a
    /// [`crate::faultproxy::FaultProxy::start_bridge`] in front of the API server, which speaks TLS to it.
    pub fn kubeconfig_via_bridge(&self, addr: std::net::SocketAddr, path: &Path) -> PathBuf {
        let path = self.kubeconfig_via(addr, path);
        let text = std::fs::read_to_string(&path).expect("kubeconfig");
        let plain = text.replace(&format!("server: https://{addr}"), &format!("server: http://{addr}"));
        std::fs::write(&path, plain).expect("write kubeconfig");
        path
    }

    /// The API server's CA certificate (PEM) of a private plane (`None` for one this process did not
    /// start), for a [`crate::faultproxy::FaultProxy::start_bridge`].
    pub fn ca_pem(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir.as_ref()?.join("pki/ca.crt")).ok()
    }
}

static PLANE: OnceLock<Result<Plane, String>> = OnceLock::new();

/// The shared plane, or `None` when the tests are to be skipped (after printing why). Panics when the plane
/// is unavailable and skipping is not allowed.
pub fn plane() -> Option<&'static Plane> {
    match PLANE.get_or_init(start_plane) {
        Ok(plane) => Some(plane),
        Err(reason) => {
            let ci = crate::ci();
            if ci {
                panic!("no kube-apiserver for the integration tests (CI=true, so this fails): {reason}");
            }
            if std::env::var("TRAINWARDEN_SKIP_APISERVER_TESTS").is_ok_and(|v| v == "1") {
                eprintln!("SKIPPED (TRAINWARDEN_SKIP_APISERVER_TESTS=1): no kube-apiserver: {reason}");
                return None;
            }
            panic!(
                "no kube-apiserver for the integration tests: {reason}\n\
                 Run them under tests/k8s/with-control-plane.sh, point TRAINWARDEN_TEST_KUBECONFIG at a test \
                 control plane, or set TRAINWARDEN_SKIP_APISERVER_TESTS=1 to skip them."
            );
        }
    }
}

/// Our CRDs, as the code generates them, applied once per test binary (the plane may have been given the
/// committed files, which the `crds_up_to_date` test compares with the code separately).
static CRDS: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Applies trainwarden's CRDs (once per test process) and waits until the API server serves them.
pub async fn apply_crds(client: &Client) -> Result<(), kube::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for c in crd::crds() {
        api.patch(&c.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&c)).await?;
    }
    for c in crd::crds() {
        wait_established(&api, &c.name_any()).await;
    }
    Ok(())
}

/// Waits (up to 30 s, then panics) until the CRD `name` is `Established`.
pub async fn wait_established(api: &Api<CustomResourceDefinition>, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let crd = api.get(name).await.unwrap_or_else(|e| panic!("get CRD {name}: {e}"));
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return;
        }
        assert!(Instant::now() < deadline, "CRD {name} not Established after 30s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A minimal Kueue Workload CRD (the API server needs one to store Workloads; no Kueue runs here), serving
/// `v1beta2` (stored) and the deprecated `v1beta1`, as Kueue 0.17 does.
pub async fn install_workload_crd(client: &Client) {
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "active": {"type": "boolean"},
            "queueName": {"type": "string"},
            "podSets": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
        }},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    }}});
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "workloads.kueue.x-k8s.io"},
        "spec": {
            "group": "kueue.x-k8s.io",
            "names": {"kind": "Workload", "plural": "workloads", "singular": "workload", "listKind": "WorkloadList"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1beta2", "served": true, "storage": true, "subresources": {"status": {}}, "schema": schema},
                {"name": "v1beta1", "served": true, "storage": false, "subresources": {"status": {}}, "schema": schema}
            ]
        }
    }))
    .unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(&crd.name_any(), &PatchParams::apply("trainwarden-tests").force(), &Patch::Apply(&crd))
        .await
        .expect("install the Workload CRD");
    wait_established(&api, "workloads.kueue.x-k8s.io").await;
}

/// A minimal JobSet CRD (`jobset.x-k8s.io/v1alpha2`; the API server needs one to store JobSets; no JobSet
/// controller runs here): a test writes the JobSet a TrainJob controls and its pods as Trainer and JobSet
/// would.
pub async fn install_jobset_crd(client: &Client) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "jobsets.jobset.x-k8s.io"},
        "spec": {
            "group": "jobset.x-k8s.io",
            "names": {"kind": "JobSet", "plural": "jobsets", "singular": "jobset", "listKind": "JobSetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha2", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    }))
    .unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(&crd.name_any(), &PatchParams::apply("trainwarden-tests").force(), &Patch::Apply(&crd))
        .await
        .expect("install the JobSet CRD");
    wait_established(&api, "jobsets.jobset.x-k8s.io").await;
}

/// Minimal Kueue LocalQueue and ClusterQueue CRDs beside the Workload's ([`install_workload_crd`]), serving
/// `v1beta2` (stored) and `v1beta1` as Kueue 0.17 does, with the spec fields trainwarden reads
/// (`spec.clusterQueue`; `spec.cohortName`, `v1beta1`'s `spec.cohort`). No Kueue runs here: a test writes
/// Workloads and their conditions as Kueue would.
pub async fn install_kueue_queue_crds(client: &Client) {
    install_workload_crd(client).await;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (kind, plural, scope, spec) in [
        ("LocalQueue", "localqueues", "Namespaced", json!({"clusterQueue": {"type": "string"}})),
        (
            "ClusterQueue",
            "clusterqueues",
            "Cluster",
            json!({"cohortName": {"type": "string"}, "cohort": {"type": "string"}}),
        ),
    ] {
        let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": spec},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }}});
        let name = format!("{plural}.kueue.x-k8s.io");
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": "kueue.x-k8s.io",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                "scope": scope,
                "versions": [
                    {"name": "v1beta2", "served": true, "storage": true, "subresources": {"status": {}}, "schema": schema},
                    {"name": "v1beta1", "served": true, "storage": false, "subresources": {"status": {}}, "schema": schema}
                ]
            }
        }))
        .unwrap();
        api.patch(&name, &PatchParams::apply("trainwarden-tests").force(), &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|e| panic!("install the {kind} CRD: {e}"));
        wait_established(&api, &name).await;
    }
}

/// One test's view: a client, a fresh namespace, the plane.
pub struct Ctx {
    /// A client of this test's own (see the module doc).
    pub client: Client,
    /// This test's namespace, created for it.
    pub ns: String,
    /// The shared control plane.
    pub plane: &'static Plane,
    test: &'static str,
    started: Instant,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        eprintln!(
            "[apiserver tests] {} (namespace {}) took {} ms",
            self.test,
            self.ns,
            self.started.elapsed().as_millis()
        );
    }
}

fn unique_suffix() -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{:x}{:05x}{:x}", std::process::id(), nanos >> 12, COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Sets up a test: `None` means skip (the reason is printed).
pub async fn setup(test: &'static str) -> Option<Ctx> {
    let started = Instant::now();
    let plane = plane()?;
    let client = client::client_from_kubeconfig(&plane.kubeconfig)
        .await
        .unwrap_or_else(|e| panic!("client for {}: {e}", plane.kubeconfig.display()));
    CRDS.get_or_try_init(|| apply_crds(&client)).await.unwrap_or_else(|e| panic!("applying the CRDs: {e}"));
    // A DNS label: at most 63 characters.
    let mut ns = format!("tw-{}-{}", test.replace('_', "-"), unique_suffix());
    if ns.len() > 63 {
        ns = format!("tw-{}-{}", &test.replace('_', "-")[..30], unique_suffix());
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.clone()),
            labels: Some([("trainwarden.dev/test".to_string(), test.replace('_', "-"))].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("create namespace {ns}: {e}"));
    Some(Ctx { client, ns, plane, test, started })
}

impl Ctx {
    /// A name unique to this test run, for cluster-scoped objects.
    pub fn unique_name(&self, prefix: &str) -> String {
        format!("{prefix}-{}", unique_suffix())
    }

    /// Runs the plane's kubectl; panics when there is none.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        let kubectl = self.plane.kubectl.clone().unwrap_or_else(|| {
            panic!("no kubectl: set TRAINWARDEN_KUBECTL (tests/k8s/with-control-plane.sh does) to the built kubectl")
        });
        let mut cmd = Command::new(&kubectl);
        cmd.arg("--kubeconfig").arg(&self.plane.kubeconfig).args(args);
        if let Some(cache) = &self.plane.kube_cache_dir {
            cmd.env("KUBECACHEDIR", cache);
        }
        cmd.output().unwrap_or_else(|e| panic!("running {}: {e}", kubectl.display()))
    }
}

/// Skips the test (returns) when [`setup`] says so.
#[macro_export]
macro_rules! setup {
    ($name:expr) => {
        match $crate::apiserver::setup($name).await {
            Some(ctx) => ctx,
            None => return,
        }
    };
}
