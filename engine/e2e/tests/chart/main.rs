//! The Helm chart (`charts/trainwarden`): `helm lint`, what `helm template` renders (least-privilege RBAC, the
//! controller's command-line contract, hardening), values the chart must refuse, its CRDs being the repository's,
//! and every rendered object accepted by a real kube-apiserver, whose RBAC authorizer then answers
//! SubjectAccessReviews for the controller's ServiceAccount exactly as the chart intends.
//!
//! helm comes from `TRAINWARDEN_HELM` (exported by `tests/k8s/with-control-plane.sh`), else from
//! `tests/k8s/build-helm.sh` (a cache hit, or a build from the Go module proxy). Without helm these tests fail under
//! `CI=true`; elsewhere too, unless `TRAINWARDEN_SKIP_HELM_TESTS=1`.
//!
//! The ServiceMonitor is applied for real: the tests install a minimal `monitoring.coreos.com/v1` ServiceMonitor
//! CRD (see [`SERVICE_MONITOR_CRD`]) once per test binary.

use trainwarden_testkit::apiserver as support;
use trainwarden_testkit::setup;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The Kubernetes version of the test control plane (tests/k8s/build-binaries.sh), given to `helm template` as
/// the cluster's version.
const KUBE_VERSION: &str = "v1.35.4";
/// The chart's default Lease name (values.yaml `leaderElection.leaseName`, the controller's `--lease-name` default).
const DEFAULT_LEASE: &str = "trainwarden-leader";

fn chart_dir() -> PathBuf {
    support::repo_root().join("charts/trainwarden")
}

fn chart_yaml() -> Value {
    let path = chart_dir().join("Chart.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// --- helm ------------------------------------------------------------------------------------------------------

fn locate_helm() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("TRAINWARDEN_HELM").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("TRAINWARDEN_HELM={} does not exist", path.display()))
        };
    }
    // A cache hit takes ~0.1 s; a cold build a few minutes (once per machine).
    let script = support::repo_root().join("tests/k8s/build-helm.sh");
    eprintln!("[chart tests] TRAINWARDEN_HELM is not set; running {}", script.display());
    let out = Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({})", script.display(), out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().ok_or_else(|| format!("{} printed no cache dir", script.display()))?;
    let helm = Path::new(dir.trim()).join("bin/helm");
    if helm.is_file() {
        Ok(helm)
    } else {
        Err(format!("{} did not produce {}", script.display(), helm.display()))
    }
}

static HELM: OnceLock<Result<Helm, String>> = OnceLock::new();

/// helm, or `None` when the tests are to be skipped (after printing why).
fn helm() -> Option<&'static Helm> {
    let found = HELM.get_or_init(|| {
        locate_helm().map(|binary| {
            // Keep helm away from the user's repositories, registries and plugins.
            let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
            Helm { binary, home }
        })
    });
    match found {
        Ok(helm) => Some(helm),
        Err(reason) => {
            if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
                panic!("no helm for the chart tests (CI=true, so this fails): {reason}");
            }
            if std::env::var("TRAINWARDEN_SKIP_HELM_TESTS").is_ok_and(|v| v == "1") {
                eprintln!("SKIPPED (TRAINWARDEN_SKIP_HELM_TESTS=1): no helm: {reason}");
                return None;
            }
            panic!(
                "no helm for the chart tests: {reason}\nBuild it with tests/k8s/build-helm.sh, point TRAINWARDEN_HELM \
                 at a helm binary, or set TRAINWARDEN_SKIP_HELM_TESTS=1 to skip these tests."
            );
        }
    }
}

macro_rules! helm_or_skip {
    () => {
        match helm() {
            Some(helm) => helm,
            None => return,
        }
    };
}

struct Helm {
    binary: PathBuf,
    home: PathBuf,
}

impl Helm {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.binary)
            .args(args)
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .env_remove("KUBECONFIG")
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.binary.display()))
    }

    /// Runs helm and returns its stdout; panics with stderr when it fails.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "helm {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("helm prints UTF-8")
    }

    /// `helm template` of the chart with extra value arguments (`--set`, `--set-json`).
    fn template_args(release: &str, namespace: &str, values: &[&str]) -> Vec<String> {
        let chart = chart_dir();
        let mut args: Vec<String> = ["template", release, chart.to_str().unwrap(), "--namespace", namespace]
            .into_iter()
            .map(String::from)
            .collect();
        args.push(format!("--kube-version={KUBE_VERSION}"));
        args.extend(values.iter().map(std::string::ToString::to_string));
        args
    }

    fn render(&self, release: &str, namespace: &str, values: &[&str]) -> Rendered {
        let args = Self::template_args(release, namespace, values);
        let yaml = self.ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        Rendered { docs: parse_docs(&yaml, "helm template"), yaml, release_namespace: namespace.to_string() }
    }

    /// `helm template` that must fail; returns its stderr.
    fn render_error(&self, values: &[&str]) -> String {
        let args = Self::template_args("trainwarden", "trainwarden-system", values);
        let out = self.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            !out.status.success(),
            "helm template {} succeeded but must fail; it rendered:\n{}",
            values.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

/// Non-empty YAML documents as JSON values.
fn parse_docs(yaml: &str, what: &str) -> Vec<Value> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).unwrap_or_else(|e| panic!("{what}: invalid YAML: {e}"));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

// --- the rendered chart ----------------------------------------------------------------------------------------

/// The values the second configuration sets: Kueue off, a ServiceMonitor, Secrets in two namespaces, a PDB, text
/// logs with a filter that needs escaping, a compound interval.
fn alternative_values(secret_namespaces: &[&str]) -> Vec<String> {
    vec![
        "--set=kueue.enabled=false".into(),
        "--set=serviceMonitor.enabled=true".into(),
        "--set=serviceMonitor.interval=15s".into(),
        "--set=serviceMonitor.labels.release=prometheus".into(),
        format!("--set-json=notifications.secretNamespaces={}", json!(secret_namespaces)),
        "--set=podDisruptionBudget.enabled=true".into(),
        "--set=logFormat=text".into(),
        "--set=logLevel=info\\,trainwarden=debug".into(),
        "--set=evalInterval=1m30s".into(),
        "--set=maxSnooze=8h".into(),
        "--set=metrics.perJob=false".into(),
        "--set=record.enabled=true".into(),
        "--set=record.persistence.enabled=true".into(),
        "--set-json=record.persistence.accessModes=[\"ReadWriteMany\"]".into(),
        "--set=record.maxFiles=500".into(),
    ]
}

fn strs(values: &[String]) -> Vec<&str> {
    values.iter().map(String::as_str).collect()
}

struct Rendered {
    yaml: String,
    docs: Vec<Value>,
    release_namespace: String,
}

fn kind(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_else(|| panic!("a rendered document without kind: {doc}"))
}

fn name(doc: &Value) -> &str {
    doc["metadata"]["name"].as_str().unwrap_or_else(|| panic!("a rendered document without a name: {doc}"))
}

impl Rendered {
    fn of_kind(&self, wanted: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| kind(d) == wanted).collect()
    }

    fn one<T: serde::de::DeserializeOwned>(&self, wanted: &str) -> T {
        let docs = self.of_kind(wanted);
        assert_eq!(docs.len(), 1, "expected exactly one {wanted}, got {}", docs.len());
        serde_json::from_value(docs[0].clone()).unwrap_or_else(|e| panic!("{wanted}: {e}"))
    }

    fn all<T: serde::de::DeserializeOwned>(&self, wanted: &str) -> Vec<T> {
        self.of_kind(wanted)
            .into_iter()
            .map(|d| serde_json::from_value(d.clone()).unwrap_or_else(|e| panic!("{wanted}: {e}")))
            .collect()
    }

    fn kinds(&self) -> BTreeMap<String, usize> {
        let mut kinds = BTreeMap::new();
        for doc in &self.docs {
            *kinds.entry(kind(doc).to_string()).or_default() += 1;
        }
        kinds
    }

    fn service_account(&self) -> String {
        let accounts = self.of_kind("ServiceAccount");
        assert_eq!(accounts.len(), 1, "expected one ServiceAccount");
        name(accounts[0]).to_string()
    }
}

/// One permission: API group, resource (with `/subresource`), verb, and the object name it is limited to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    group: String,
    resource: String,
    verb: String,
    only_name: Option<String>,
}

fn grant(group: &str, resource: &str, verb: &str) -> Grant {
    Grant { group: group.into(), resource: resource.into(), verb: verb.into(), only_name: None }
}

fn grants(group: &str, resources: &[&str], verbs: &[&str]) -> Vec<Grant> {
    resources.iter().flat_map(|r| verbs.iter().map(move |v| grant(group, r, v))).collect()
}

/// Expands rules into single grants, refusing wildcards and non-resource URLs outright.
fn expand(rules: &[PolicyRule], owner: &str) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let groups = rule.api_groups.clone().unwrap_or_default();
        let resources = rule.resources.clone().unwrap_or_default();
        assert!(rule.non_resource_urls.is_none(), "{owner} grants non-resource URLs: {rule:?}");
        for field in [&groups, &resources, &rule.verbs] {
            assert!(!field.iter().any(|v| v.contains('*')), "{owner} uses a wildcard: {rule:?}");
        }
        assert!(
            !groups.is_empty() && !resources.is_empty() && !rule.verbs.is_empty(),
            "{owner}: empty rule {rule:?}"
        );
        let names: Vec<Option<String>> = match &rule.resource_names {
            Some(names) if !names.is_empty() => names.iter().cloned().map(Some).collect(),
            _ => vec![None],
        };
        for g in &groups {
            for r in &resources {
                for v in &rule.verbs {
                    for n in &names {
                        out.insert(Grant {
                            group: g.clone(),
                            resource: r.clone(),
                            verb: v.clone(),
                            only_name: n.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// The controller's cluster-wide permissions, exactly (issue 4's chart section).
fn expected_cluster_grants(kueue: bool) -> BTreeSet<Grant> {
    let mut expected = BTreeSet::new();
    expected.extend(grants("trainer.kubeflow.org", &["trainjobs"], &["get", "list", "watch", "patch"]));
    expected.extend(grants(
        "trainwarden.dev",
        &["progresspolicies", "clusterprogresspolicies", "progresspolicyexceptions"],
        &["get", "list", "watch"],
    ));
    expected.extend(grants(
        "trainwarden.dev",
        &["progresspolicies/status", "clusterprogresspolicies/status"],
        &["get", "patch", "update"],
    ));
    expected.extend(grants("", &["namespaces"], &["get", "list", "watch"]));
    expected.extend(grants("events.k8s.io", &["events"], &["create", "patch"]));
    // Checkpoint requests: the annotation on the pods of a TrainJob's JobSet.
    expected.extend(grants("", &["pods"], &["list", "patch"]));
    expected.extend(grants("jobset.x-k8s.io", &["jobsets"], &["get"]));
    if kueue {
        expected.extend(grants("kueue.x-k8s.io", &["workloads"], &["get", "list", "watch", "patch"]));
        expected.extend(grants("kueue.x-k8s.io", &["localqueues", "clusterqueues"], &["list", "watch"]));
    }
    expected
}

/// The controller's namespaced permissions, by namespace, exactly.
fn expected_namespaced_grants(
    release_namespace: &str,
    lease: Option<&str>,
    secret_namespaces: &[&str],
) -> BTreeMap<String, BTreeSet<Grant>> {
    let mut expected: BTreeMap<String, BTreeSet<Grant>> = BTreeMap::new();
    if let Some(lease) = lease {
        let leases = expected.entry(release_namespace.to_string()).or_default();
        leases.insert(grant("coordination.k8s.io", "leases", "create"));
        for verb in ["get", "update", "patch"] {
            leases.insert(Grant {
                only_name: Some(lease.to_string()),
                ..grant("coordination.k8s.io", "leases", verb)
            });
        }
    }
    for ns in secret_namespaces {
        expected.entry(ns.to_string()).or_default().insert(grant("", "secrets", "get"));
    }
    expected
}

/// The RBAC of a render grants exactly the expected permissions, to the chart's ServiceAccount only.
fn assert_least_privilege(rendered: &Rendered, kueue: bool, lease: Option<&str>, secret_namespaces: &[&str]) {
    let account = rendered.service_account();
    let release_ns = &rendered.release_namespace;
    let is_our_account = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        let subjects = subjects.clone().unwrap_or_default();
        subjects.len() == 1
            && subjects[0].kind == "ServiceAccount"
            && subjects[0].name == account
            && subjects[0].namespace.as_deref() == Some(release_ns.as_str())
    };

    // Cluster-wide: one ClusterRole, bound once to our ServiceAccount, with exactly the expected grants.
    let cluster_role: ClusterRole = rendered.one("ClusterRole");
    assert!(
        cluster_role.aggregation_rule.is_none(),
        "an aggregated ClusterRole would pull in other roles' rules"
    );
    let cluster_grants = expand(&cluster_role.rules.clone().unwrap_or_default(), "the ClusterRole");
    let expected = expected_cluster_grants(kueue);
    assert_eq!(
        cluster_grants,
        expected,
        "ClusterRole grants differ.\n  extra:   {:?}\n  missing: {:?}",
        cluster_grants.difference(&expected).collect::<Vec<_>>(),
        expected.difference(&cluster_grants).collect::<Vec<_>>()
    );
    assert!(
        !cluster_grants.iter().any(|g| g.resource == "secrets"),
        "Secrets must never be readable cluster-wide"
    );
    assert!(
        !cluster_grants.iter().any(|g| g.resource == "leases"),
        "Leases must only be granted in the release namespace"
    );
    assert_eq!(
        cluster_grants.iter().any(|g| g.group == "kueue.x-k8s.io" && g.resource == "workloads"),
        kueue,
        "the Kueue Workload rule must be present exactly when kueue.enabled"
    );
    let binding: ClusterRoleBinding = rendered.one("ClusterRoleBinding");
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(binding.role_ref.name, cluster_role.name_any());
    assert!(is_our_account(&binding.subjects), "ClusterRoleBinding subjects: {:?}", binding.subjects);

    // Namespaced: Roles with exactly the expected grants per namespace, each bound to our ServiceAccount.
    let roles: Vec<Role> = rendered.all("Role");
    let bindings: Vec<RoleBinding> = rendered.all("RoleBinding");
    let mut actual: BTreeMap<String, BTreeSet<Grant>> = BTreeMap::new();
    for role in &roles {
        let ns = role.namespace().unwrap_or_else(|| panic!("Role {} has no namespace", role.name_any()));
        let owner = format!("Role {ns}/{}", role.name_any());
        actual.entry(ns.clone()).or_default().extend(expand(&role.rules.clone().unwrap_or_default(), &owner));
        let bound = bindings.iter().filter(|b| {
            b.namespace() == Some(ns.clone())
                && b.role_ref.kind == "Role"
                && b.role_ref.name == role.name_any()
                && is_our_account(&b.subjects)
        });
        assert_eq!(bound.count(), 1, "{owner} must be bound exactly once, to {release_ns}/{account}");
        for g in expand(&role.rules.clone().unwrap_or_default(), &owner) {
            if g.resource == "secrets" {
                assert_eq!(
                    g.verb, "get",
                    "{owner}: Secrets are get-only (no list/watch: they would read every Secret)"
                );
            }
        }
    }
    assert_eq!(bindings.len(), roles.len(), "a RoleBinding without its Role: {bindings:?}");
    let expected = expected_namespaced_grants(release_ns, lease, secret_namespaces);
    assert_eq!(actual, expected, "namespaced grants differ");
}

/// The controller's command line, environment and hardening (the contract of `trainwarden controller`).
fn assert_controller_contract(rendered: &Rendered, expected_args: &[String], log_level: &str) {
    let deployment: Deployment = rendered.one("Deployment");
    let account = rendered.service_account();
    let spec = deployment.spec.as_ref().expect("Deployment spec");
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(account.as_str()));
    assert_eq!(pod.containers.len(), 1);
    let container = &pod.containers[0];
    assert_eq!(container.args.as_deref(), Some(expected_args), "controller arguments");
    assert!(container.command.is_none(), "the image's entrypoint is the trainwarden binary");
    let chart = chart_yaml();
    let image = container.image.as_deref().expect("image");
    assert!(
        image.ends_with(&format!(":{}", chart["appVersion"].as_str().unwrap())),
        "image tag defaults to appVersion: {image}"
    );

    let env: BTreeMap<String, Value> = container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name.clone(), serde_json::to_value(&e).unwrap()))
        .collect();
    assert_eq!(env.len(), 3, "env: {env:?}");
    assert_eq!(env["RUST_LOG"]["value"], log_level);
    assert_eq!(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    assert_eq!(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");

    let port = &container.ports.as_ref().expect("ports")[0];
    assert_eq!((port.name.as_deref(), port.container_port), (Some("http"), 8080));
    let probe_path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe.as_ref().and_then(|p| p.http_get.as_ref()).and_then(|h| h.path.clone())
    };
    assert_eq!(probe_path(&container.liveness_probe).as_deref(), Some("/healthz"));
    assert_eq!(probe_path(&container.readiness_probe).as_deref(), Some("/readyz"));

    let resources = serde_json::to_value(container.resources.as_ref().expect("resources")).unwrap();
    assert_eq!(
        resources,
        json!({"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}})
    );

    let pod_security = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert!(pod_security.run_as_user.is_some_and(|uid| uid != 0), "a non-root UID");
    let security = container.security_context.as_ref().expect("container securityContext");
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.privileged, None);
    let caps = security.capabilities.as_ref().expect("capabilities");
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert!(caps.add.is_none(), "no added capabilities");
    for profile in [&pod_security.seccomp_profile, &security.seccomp_profile] {
        assert_eq!(profile.as_ref().map(|p| p.type_.as_str()), Some("RuntimeDefault"));
    }

    // The Service reaches exactly the controller pods on the named port.
    let service: Service = rendered.one("Service");
    let service_spec = service.spec.as_ref().expect("Service spec");
    let pod_labels = spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    let selector = service_spec.selector.clone().expect("Service selector");
    assert!(
        selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "Service selector {selector:?} vs pods {pod_labels:?}"
    );
    assert_eq!(
        Some(&selector),
        spec.selector.match_labels.as_ref(),
        "Service and Deployment select the same pods"
    );
    let service_port = &service_spec.ports.as_ref().expect("ports")[0];
    assert_eq!(service_port.name.as_deref(), Some("http"));
    assert_eq!(serde_json::to_value(&service_port.target_port).unwrap(), json!("http"));
}

fn default_args(namespace: &str) -> Vec<String> {
    [
        "controller",
        "--http-addr=0.0.0.0:8080",
        "--log-format=json",
        "--leader-election=true",
        &format!("--lease-name={DEFAULT_LEASE}"),
        &format!("--lease-namespace={namespace}"),
        "--kueue=true",
        "--kueue-queues=true",
        "--eval-interval=30s",
        "--max-snooze=24h",
        "--job-metrics=true",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

fn alternative_args(namespace: &str) -> Vec<String> {
    [
        "controller",
        "--http-addr=0.0.0.0:8080",
        "--log-format=text",
        "--leader-election=true",
        &format!("--lease-name={DEFAULT_LEASE}"),
        &format!("--lease-namespace={namespace}"),
        "--kueue=false",
        "--kueue-queues=false",
        "--eval-interval=1m30s",
        "--max-snooze=8h",
        "--job-metrics=false",
        "--record-dir=/var/lib/trainwarden/record",
        "--record-flush-interval=10s",
        "--record-max-bytes=1GiB",
        "--record-max-file-bytes=16MiB",
        "--record-max-files=500",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

fn assert_alternative_extras(rendered: &Rendered) {
    let ns = &rendered.release_namespace;
    let service: Service = rendered.one("Service");
    let monitors = rendered.of_kind("ServiceMonitor");
    assert_eq!(monitors.len(), 1, "serviceMonitor.enabled renders one ServiceMonitor");
    let monitor = monitors[0];
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["metadata"]["namespace"], ns.as_str());
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus", "serviceMonitor.labels");
    assert_eq!(
        monitor["spec"]["endpoints"],
        json!([{"port": "http", "path": "/metrics", "honorLabels": true, "interval": "15s"}])
    );
    assert_eq!(monitor["spec"]["namespaceSelector"], json!({"matchNames": [ns]}));
    let service_labels = serde_json::to_value(service.metadata.labels.clone().unwrap_or_default()).unwrap();
    for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels") {
        assert_eq!(&service_labels[k], v, "the ServiceMonitor selects the Service by {k}");
    }
    assert_eq!(rendered.of_kind("PersistentVolumeClaim").len(), 1, "record.persistence renders its claim");
    let pdb: PodDisruptionBudget = rendered.one("PodDisruptionBudget");
    let pdb_spec = pdb.spec.expect("PDB spec");
    assert_eq!(serde_json::to_value(pdb_spec.max_unavailable).unwrap(), json!(1));
    assert!(pdb_spec.min_available.is_none());
    let deployment: Deployment = rendered.one("Deployment");
    assert_eq!(
        pdb_spec.selector,
        Some(deployment.spec.unwrap().selector),
        "the PDB covers the controller pods"
    );
}

// The tests, by subject (after the macros above, which they use).
mod apply;
mod render;
