//! The chart without an API server: its files (CRDs copied exactly, the app version), `helm lint` and the
//! package, and what each set of values renders (least-privilege RBAC, the controller's contract, recording,
//! GPU metrics), invalid values refused at render time.

use super::*;

fn yaml_files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let path = e.ok()?.path();
            let file = path.file_name()?.to_str()?.to_string();
            (file.ends_with(".yaml") || file.ends_with(".yml")).then(|| {
                (file, std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            })
        })
        .collect()
}

/// The chart ships a copy of `crds/` (not a symlink, which breaks on Windows checkouts and some GitOps tools);
/// this keeps the copy identical.
#[test]
fn chart_crds_are_an_exact_copy_of_the_repository_crds() {
    let repo = yaml_files(&support::repo_root().join("crds"));
    let chart = yaml_files(&chart_dir().join("crds"));
    assert!(!repo.is_empty(), "crds/ holds no CRDs");
    let fix = "The chart's CRDs are a copy of crds/; refresh it with\n\n    rm charts/trainwarden/crds/*.yaml && cp crds/*.yaml charts/trainwarden/crds/\n";
    assert_eq!(
        repo.keys().collect::<Vec<_>>(),
        chart.keys().collect::<Vec<_>>(),
        "different CRD files. {fix}"
    );
    for (file, content) in &repo {
        assert!(chart[file] == *content, "charts/trainwarden/crds/{file} differs from crds/{file}. {fix}");
    }
}

#[test]
fn chart_app_version_is_the_workspace_version() {
    let chart = chart_yaml();
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["name"], "trainwarden");
    assert_eq!(
        chart["appVersion"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "Chart.yaml appVersion (the default image tag) must follow the workspace version in Cargo.toml"
    );
}

// --- helm, no API server ---------------------------------------------------------------------------------------

#[test]
fn helm_lint_passes_and_the_packaged_chart_carries_the_crds() {
    let helm = helm_or_skip!();
    let chart = chart_dir();
    let chart = chart.to_str().unwrap();
    helm.ok(&["lint", "--strict", chart, &format!("--kube-version={KUBE_VERSION}")]);
    let alternative = alternative_values(&["team-a", "team-b"]);
    let mut args = vec!["lint", "--strict", chart];
    args.extend(strs(&alternative));
    helm.ok(&args);

    // What helm installs from crds/, from the directory and from a packaged chart, is exactly crds/*.yaml.
    let repo_crds: Vec<Value> = yaml_files(&support::repo_root().join("crds"))
        .values()
        .flat_map(|y| parse_docs(y, "crds/"))
        .collect();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-package-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    helm.ok(&["package", chart, "--destination", out.to_str().unwrap()]);
    let package = out.join(format!("trainwarden-{}.tgz", chart_yaml()["version"].as_str().expect("version")));
    assert!(package.is_file(), "helm package did not write {}", package.display());
    for source in [chart, package.to_str().unwrap()] {
        let shown = parse_docs(&helm.ok(&["show", "crds", source]), "helm show crds");
        assert_eq!(shown, repo_crds, "helm show crds {source}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn default_values_render_least_privilege_rbac_and_the_controller_contract() {
    let helm = helm_or_skip!();
    let rendered = helm.render("trainwarden", "trainwarden-system", &[]);
    assert_eq!(
        rendered.kinds(),
        BTreeMap::from(
            [
                ("ClusterRole", 1),
                ("ClusterRoleBinding", 1),
                ("Deployment", 1),
                ("Role", 1),
                ("RoleBinding", 1),
                ("Service", 1),
                ("ServiceAccount", 1)
            ]
            .map(|(k, n)| (k.to_string(), n))
        ),
        "no ServiceMonitor or PodDisruptionBudget by default"
    );
    assert_least_privilege(&rendered, true, Some(DEFAULT_LEASE), &[]);
    assert_controller_contract(&rendered, &default_args("trainwarden-system"), "info");
    let deployment: Deployment = rendered.one("Deployment");
    assert_eq!(deployment.spec.unwrap().replicas, Some(2), "two replicas behind leader election");
    assert_eq!(
        rendered.service_account(),
        "trainwarden",
        "a release named like the chart is not prefixed twice"
    );
    // Namespaced objects carry the release namespace, so `kubectl apply` cannot put them elsewhere.
    for doc in &rendered.docs {
        if !kind(doc).starts_with("Cluster") {
            assert_eq!(doc["metadata"]["namespace"], "trainwarden-system", "{} {}", kind(doc), name(doc));
        }
    }
}

#[test]
fn kueue_off_service_monitor_and_secret_namespaces_render_least_privilege_rbac() {
    let helm = helm_or_skip!();
    let secret_namespaces = ["team-a", "team-b"];
    let rendered = helm.render("tw", "ops", &strs(&alternative_values(&secret_namespaces)));
    assert_least_privilege(&rendered, false, Some(DEFAULT_LEASE), &secret_namespaces);
    assert_controller_contract(&rendered, &alternative_args("ops"), "info,trainwarden=debug");
    assert_alternative_extras(&rendered);
    assert_eq!(rendered.service_account(), "tw-trainwarden");
}

#[test]
fn a_single_replica_without_leader_election_needs_no_lease() {
    let helm = helm_or_skip!();
    let rendered =
        helm.render("trainwarden", "ops", &["--set=replicas=1", "--set=leaderElection.enabled=false"]);
    assert_least_privilege(&rendered, true, None, &[]);
    let deployment: Deployment = rendered.one("Deployment");
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0].args.clone().unwrap();
    assert!(args.contains(&"--leader-election=false".to_string()), "{args:?}");
    assert!(
        !args.iter().any(|a| a.starts_with("--lease-")),
        "no lease flags without leader election: {args:?}"
    );
}

/// `record.enabled`: the recorder's flags, its volume (an emptyDir, or a claim the chart creates or is given)
/// mounted where `--record-dir` points, and an fsGroup so the non-root user can write the volume.
#[test]
fn recording_mounts_its_volume_and_passes_its_bounds() {
    let helm = helm_or_skip!();
    let pod_of = |rendered: &Rendered| -> Value {
        serde_json::to_value(rendered.one::<Deployment>("Deployment").spec.unwrap().template.spec.unwrap())
            .unwrap()
    };
    let rendered =
        helm.render("trainwarden", "ops", &["--set=record.enabled=true", "--set=record.maxBytes=500MB"]);
    let pod = pod_of(&rendered);
    let args: Vec<&str> =
        pod["containers"][0]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for flag in [
        "--record-dir=/var/lib/trainwarden/record",
        "--record-flush-interval=10s",
        "--record-max-bytes=500MB",
        "--record-max-file-bytes=16MiB",
        "--record-max-files=10000",
    ] {
        assert!(args.contains(&flag), "{flag} missing: {args:?}");
    }
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([{"name": "record", "mountPath": "/var/lib/trainwarden/record"}])
    );
    assert_eq!(pod["volumes"], json!([{"name": "record", "emptyDir": {}}]));
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);
    assert!(rendered.of_kind("PersistentVolumeClaim").is_empty());

    let rendered = helm.render(
        "trainwarden",
        "ops",
        &[
            "--set=record.enabled=true",
            "--set=record.persistence.enabled=true",
            "--set-json=record.persistence.accessModes=[\"ReadWriteMany\"]",
            "--set=record.persistence.storageClass=nfs",
        ],
    );
    let claim = rendered.of_kind("PersistentVolumeClaim");
    assert_eq!(claim.len(), 1);
    assert_eq!(claim[0]["spec"]["accessModes"], json!(["ReadWriteMany"]));
    assert_eq!(claim[0]["spec"]["storageClassName"], "nfs");
    assert_eq!(claim[0]["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    assert_eq!(pod_of(&rendered)["volumes"][0]["persistentVolumeClaim"]["claimName"], name(claim[0]));
    let strategy = |r: &Rendered| {
        serde_json::to_value(r.one::<Deployment>("Deployment").spec.unwrap().strategy).unwrap()
    };
    assert_eq!(strategy(&rendered), Value::Null, "a shared volume rolls as usual");
    let single = helm.render(
        "trainwarden",
        "ops",
        &[
            "--set=replicas=1",
            "--set=leaderElection.enabled=false",
            "--set=record.enabled=true",
            "--set=record.persistence.enabled=true",
        ],
    );
    assert_eq!(strategy(&single), json!({"type": "Recreate"}), "a ReadWriteOnce volume is let go of first");

    let rendered = helm.render(
        "trainwarden",
        "ops",
        &[
            "--set=record.enabled=true",
            "--set=record.persistence.enabled=true",
            "--set=record.persistence.existingClaim=mine",
        ],
    );
    assert!(rendered.of_kind("PersistentVolumeClaim").is_empty());
    assert_eq!(pod_of(&rendered)["volumes"][0]["persistentVolumeClaim"]["claimName"], "mine");
}

#[test]
fn gpu_metrics_pass_the_prometheus_flags_mount_token_and_ca_and_grant_pods_only_then() {
    let helm = helm_or_skip!();
    let cluster_grants = |r: &Rendered| {
        let role: ClusterRole = r.one("ClusterRole");
        expand(&role.rules.unwrap_or_default(), "the ClusterRole")
    };
    let off = helm.render("trainwarden", "ops", &[]);
    assert!(
        !cluster_grants(&off).iter().any(|g| g.resource == "pods" && g.verb == "watch"),
        "no pod watch without GPU metrics (checkpoint requests list and patch them)"
    );
    let rendered = helm.render(
        "trainwarden",
        "ops",
        &[
            "--set=gpuMetrics.prometheusUrl=https://thanos-querier.openshift-monitoring.svc:9091",
            "--set=gpuMetrics.interval=1m",
            "--set=gpuMetrics.bearerTokenSecret=thanos-token",
            "--set=gpuMetrics.caConfigMap=service-ca",
            "--set=gpuMetrics.caKey=service-ca.crt",
        ],
    );
    let mut expected = expected_cluster_grants(true);
    expected.extend(grants("", &["pods"], &["list", "watch"]));
    assert_eq!(cluster_grants(&rendered), expected);
    let pod =
        serde_json::to_value(rendered.one::<Deployment>("Deployment").spec.unwrap().template.spec.unwrap())
            .unwrap();
    let args: Vec<&str> =
        pod["containers"][0]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for flag in [
        "--prometheus-url=https://thanos-querier.openshift-monitoring.svc:9091",
        "--prometheus-interval=1m",
        "--prometheus-timeout=10s",
        "--prometheus-backfill=1h",
        "--prometheus-bearer-token-file=/var/run/trainwarden/prometheus-token/token",
        "--prometheus-ca=/var/run/trainwarden/prometheus-ca/service-ca.crt",
    ] {
        assert!(args.contains(&flag), "{flag} missing: {args:?}");
    }
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([
            {"name": "prometheus-token", "mountPath": "/var/run/trainwarden/prometheus-token", "readOnly": true},
            {"name": "prometheus-ca", "mountPath": "/var/run/trainwarden/prometheus-ca", "readOnly": true}
        ])
    );
    assert_eq!(
        pod["volumes"],
        json!([
            {"name": "prometheus-token", "secret": {"secretName": "thanos-token"}},
            {"name": "prometheus-ca", "configMap": {"name": "service-ca"}}
        ])
    );
    // The service account's own token instead of a Secret.
    let sa = helm.render(
        "trainwarden",
        "ops",
        &[
            "--set=gpuMetrics.prometheusUrl=http://prometheus:9090",
            "--set=gpuMetrics.serviceAccountToken=true",
        ],
    );
    let pod = serde_json::to_value(sa.one::<Deployment>("Deployment").spec.unwrap().template.spec.unwrap())
        .unwrap();
    let args: Vec<&str> =
        pod["containers"][0]["args"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(
        args.contains(&"--prometheus-bearer-token-file=/var/run/secrets/kubernetes.io/serviceaccount/token")
    );
    assert!(pod.get("volumes").is_none(), "{pod}");
    let error = helm.render_error(&["--set=gpuMetrics.prometheusUrl=prometheus:9090"]);
    assert!(error.contains("gpuMetrics/prometheusUrl"), "{error}");
}

#[test]
fn invalid_values_are_rejected_at_render_time() {
    let helm = helm_or_skip!();
    let cases: &[(&[&str], &str)] = &[
        (&["--set=logFormat=xml"], "logFormat"),
        (&["--set=kueu.enabled=false"], "kueu"),
        (&["--set-json=notifications.secretNamespaces=[\"Team_A\"]"], "secretNamespaces"),
        (&["--set-json=notifications.secretNamespaces=[\"a\",\"a\"]"], "secretNamespaces"),
        (&["--set=evalInterval=soon"], "evalInterval"),
        (&["--set=maxSnooze=forever"], "maxSnooze"),
        (&["--set=metrics.perJob=sometimes"], "perJob"),
        (&["--set=serviceMonitor.interval=15 seconds"], "interval"),
        (&["--set=replicas=2", "--set=leaderElection.enabled=false"], "needs leaderElection.enabled"),
        (&["--set=serviceAccount.create=false"], "serviceAccount.name is required"),
        (&["--set=record.maxBytes=lots"], "maxBytes"),
        (
            &["--set=record.enabled=true", "--set=record.persistence.enabled=true"],
            "needs accessModes [ReadWriteMany]",
        ),
    ];
    for (values, expected) in cases {
        let stderr = helm.render_error(values);
        assert!(
            stderr.contains(expected),
            "helm template {values:?} failed without naming {expected:?}:\n{stderr}"
        );
    }
}
