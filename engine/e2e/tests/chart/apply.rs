//! The chart on the real API server: every rendered object applied, and the grants checked by
//! SubjectAccessReviews: what it allows, and nothing more.

use super::*;

/// A minimal prometheus-operator ServiceMonitor CRD: the fields the chart uses, typed, with Prometheus' duration
/// format. Unknown fields are rejected by the strict field validation of the apply, so a field the chart renders
/// wrongly (or one this schema lacks) fails the test instead of being pruned.
const SERVICE_MONITOR_CRD: &str = r"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          required: [spec]
          properties:
            spec:
              type: object
              required: [selector, endpoints]
              properties:
                jobLabel: {type: string}
                selector:
                  type: object
                  properties:
                    matchLabels: {type: object, additionalProperties: {type: string}}
                namespaceSelector:
                  type: object
                  properties:
                    any: {type: boolean}
                    matchNames: {type: array, items: {type: string}}
                endpoints:
                  type: array
                  minItems: 1
                  items:
                    type: object
                    properties:
                      port: {type: string}
                      path: {type: string}
                      honorLabels: {type: boolean}
                      interval: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                      scrapeTimeout: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
";

static SERVICE_MONITOR: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

async fn install_service_monitor_crd(client: &Client) {
    SERVICE_MONITOR
        .get_or_init(|| async {
            let crd: CustomResourceDefinition =
                serde_saphyr::from_str(SERVICE_MONITOR_CRD).expect("ServiceMonitor CRD");
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            api.patch(&crd.name_any(), &PatchParams::apply("trainwarden-tests").force(), &Patch::Apply(&crd))
                .await
                .expect("apply the ServiceMonitor CRD");
            support::wait_established(&api, &crd.name_any()).await;
        })
        .await;
}

async fn create_namespace(client: &Client, name: &str) {
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some([("trainwarden.dev/test".to_string(), "chart".to_string())].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
}

/// `kind.group/name`, as `kubectl apply -o name` prints it.
fn kubectl_name(doc: &Value) -> String {
    let api_version = doc["apiVersion"].as_str().expect("apiVersion");
    let kind = kind(doc).to_lowercase();
    match api_version.rsplit_once('/') {
        Some((group, _)) => format!("{kind}.{group}/{}", name(doc)),
        None => format!("{kind}/{}", name(doc)),
    }
}

/// Server-side applies the rendered manifests as helm would create them, with strict field validation (an
/// unknown or misspelt field is an error, not silently dropped), and checks that every object was accepted.
fn apply(ctx: &support::Ctx, rendered: &Rendered, release: &str) {
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-{release}.yaml"));
    std::fs::write(&file, &rendered.yaml).unwrap();
    let out = ctx.kubectl(&[
        "apply",
        "--server-side",
        "--field-manager=helm",
        "--validate=strict",
        "-o",
        "name",
        "-f",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "the API server refused the rendered chart:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut applied: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    let mut expected: Vec<String> = rendered.docs.iter().map(kubectl_name).collect();
    applied.sort();
    expected.sort();
    assert_eq!(applied, expected, "every rendered object, and only those, is applied");
    std::fs::remove_file(&file).unwrap();
}

/// Asks the API server's RBAC authorizer what the chart's ServiceAccount may do.
struct AccessCheck {
    client: Client,
    user: String,
    groups: Vec<String>,
}

/// `(verb, group, resource[/subresource], namespace, name)`: one request the controller could make.
type Request<'a> = (&'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>);

impl AccessCheck {
    fn new(client: &Client, namespace: &str, account: &str) -> Self {
        AccessCheck {
            client: client.clone(),
            user: format!("system:serviceaccount:{namespace}:{account}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    async fn allowed(&self, (verb, group, resource, namespace, name): Request<'_>) -> bool {
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, s)) => (r, Some(s.to_string())),
            None => (resource, None),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(self.user.clone()),
                groups: Some(self.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    subresource,
                    namespace: namespace.map(String::from),
                    name: name.map(String::from),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .expect("create SubjectAccessReview");
        answer.status.expect("SubjectAccessReview status").allowed
    }

    /// Every request is allowed. The authorizer reads RBAC objects from an informer, so a just-applied binding
    /// may take a moment to count.
    async fn assert_allowed(&self, requests: &[Request<'_>]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for request in requests {
            while !self.allowed(*request).await {
                assert!(Instant::now() < deadline, "{} is refused {request:?}", self.user);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Every request is refused. Call after [`Self::assert_allowed`] has seen the chart's bindings take effect.
    async fn assert_refused(&self, requests: &[Request<'_>]) {
        for request in requests {
            assert!(!self.allowed(*request).await, "{} is allowed {request:?}", self.user);
        }
    }
}

/// What both configurations must refuse, wherever the controller runs.
fn always_refused<'a>(release_ns: &'a str, elsewhere: &'a str) -> Vec<Request<'a>> {
    vec![
        ("delete", "trainer.kubeflow.org", "trainjobs", Some(elsewhere), None),
        ("create", "trainer.kubeflow.org", "trainjobs", Some(elsewhere), None),
        ("patch", "trainer.kubeflow.org", "trainjobs/status", Some(elsewhere), None),
        ("update", "trainwarden.dev", "progresspolicies", Some(elsewhere), None),
        ("delete", "trainwarden.dev", "clusterprogresspolicies", None, Some("any")),
        // Exceptions are the teams' to write; the controller only reads them.
        ("create", "trainwarden.dev", "progresspolicyexceptions", Some(elsewhere), None),
        ("update", "trainwarden.dev", "progresspolicyexceptions", Some(elsewhere), Some("any")),
        ("list", "", "secrets", None, None),
        ("get", "", "secrets", Some(release_ns), Some("any")),
        ("get", "", "secrets", Some(elsewhere), Some("any")),
        ("create", "coordination.k8s.io", "leases", Some(elsewhere), None),
        ("update", "coordination.k8s.io", "leases", Some(release_ns), Some("someone-elses-lease")),
        ("update", "coordination.k8s.io", "leases", Some(elsewhere), Some(DEFAULT_LEASE)),
        ("create", "", "pods", Some(release_ns), None),
        ("create", "", "events", Some(elsewhere), None),
        ("get", "", "configmaps", Some(release_ns), Some("any")),
        ("create", "rbac.authorization.k8s.io", "rolebindings", Some(release_ns), None),
        ("update", "", "namespaces", None, Some(elsewhere)),
    ]
}

/// What both configurations must allow (the controller's cluster-wide work plus its Lease).
fn always_allowed<'a>(release_ns: &'a str, elsewhere: &'a str) -> Vec<Request<'a>> {
    vec![
        ("watch", "trainer.kubeflow.org", "trainjobs", None, None),
        ("patch", "trainer.kubeflow.org", "trainjobs", Some(elsewhere), Some("any")),
        ("list", "trainwarden.dev", "clusterprogresspolicies", None, None),
        ("watch", "trainwarden.dev", "progresspolicies", Some(elsewhere), None),
        ("watch", "trainwarden.dev", "progresspolicyexceptions", Some(elsewhere), None),
        ("patch", "trainwarden.dev", "progresspolicies/status", Some(elsewhere), Some("any")),
        ("update", "trainwarden.dev", "clusterprogresspolicies/status", None, Some("any")),
        ("list", "", "namespaces", None, None),
        ("create", "events.k8s.io", "events", Some(elsewhere), None),
        ("patch", "events.k8s.io", "events", Some(elsewhere), Some("any")),
        ("create", "coordination.k8s.io", "leases", Some(release_ns), None),
        ("get", "coordination.k8s.io", "leases", Some(release_ns), Some(DEFAULT_LEASE)),
        ("update", "coordination.k8s.io", "leases", Some(release_ns), Some(DEFAULT_LEASE)),
    ]
}

#[tokio::test]
async fn default_render_is_accepted_by_the_api_server_and_grants_only_what_it_should() {
    let helm = helm_or_skip!();
    let ctx = setup!("chart_default");
    let release = ctx.unique_name("tw");
    let rendered = helm.render(&release, &ctx.ns, &[]);
    apply(&ctx, &rendered, &release);

    // Stored as rendered: the controller's arguments and the ClusterRole's rules.
    let fullname = format!("{release}-trainwarden");
    let stored: Deployment =
        Api::namespaced(ctx.client.clone(), &ctx.ns).get(&fullname).await.expect("get Deployment");
    let stored_args = stored.spec.unwrap().template.spec.unwrap().containers[0].args.clone();
    assert_eq!(stored_args, Some(default_args(&ctx.ns)));
    let stored_role: ClusterRole =
        Api::all(ctx.client.clone()).get(&fullname).await.expect("get ClusterRole");
    assert_eq!(stored_role.rules, rendered.one::<ClusterRole>("ClusterRole").rules);

    let elsewhere = "team-elsewhere";
    let access = AccessCheck::new(&ctx.client, &ctx.ns, &rendered.service_account());
    let mut allowed = always_allowed(&ctx.ns, elsewhere);
    allowed.push(("patch", "kueue.x-k8s.io", "workloads", Some(elsewhere), Some("any")));
    allowed.push(("watch", "kueue.x-k8s.io", "workloads", None, None));
    access.assert_allowed(&allowed).await;
    access.assert_refused(&always_refused(&ctx.ns, elsewhere)).await;
    access.assert_refused(&[("delete", "kueue.x-k8s.io", "workloads", Some(elsewhere), Some("any"))]).await;
}

#[tokio::test]
async fn alternative_render_is_accepted_by_the_api_server_and_grants_only_what_it_should() {
    let helm = helm_or_skip!();
    let ctx = setup!("chart_alternative");
    install_service_monitor_crd(&ctx.client).await;
    let secret_namespaces = [ctx.unique_name("tw-secrets"), ctx.unique_name("tw-secrets")];
    for ns in &secret_namespaces {
        create_namespace(&ctx.client, ns).await;
    }
    let secret_namespaces: Vec<&str> = secret_namespaces.iter().map(String::as_str).collect();
    let release = ctx.unique_name("tw");
    let rendered = helm.render(&release, &ctx.ns, &strs(&alternative_values(&secret_namespaces)));
    assert!(
        !rendered.of_kind("ServiceMonitor").is_empty() && !rendered.of_kind("PodDisruptionBudget").is_empty()
    );
    apply(&ctx, &rendered, &release);

    let fullname = format!("{release}-trainwarden");
    let monitor = ctx.kubectl(&[
        "get",
        "servicemonitors.monitoring.coreos.com",
        &fullname,
        "-n",
        &ctx.ns,
        "-o",
        "json",
    ]);
    assert!(monitor.status.success(), "{}", String::from_utf8_lossy(&monitor.stderr));
    let monitor: Value = serde_json::from_slice(&monitor.stdout).unwrap();
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics", "stored without pruning: {monitor}");
    for ns in &secret_namespaces {
        let role: Role = Api::namespaced(ctx.client.clone(), ns)
            .get(&format!("{fullname}-secrets"))
            .await
            .expect("get Role");
        assert_eq!(
            expand(&role.rules.unwrap_or_default(), "secrets Role"),
            BTreeSet::from([grant("", "secrets", "get")])
        );
    }

    let elsewhere = "team-elsewhere";
    let access = AccessCheck::new(&ctx.client, &ctx.ns, &rendered.service_account());
    let mut allowed = always_allowed(&ctx.ns, elsewhere);
    for ns in &secret_namespaces {
        allowed.push(("get", "", "secrets", Some(ns), Some("slack-webhook")));
    }
    access.assert_allowed(&allowed).await;
    let mut refused = always_refused(&ctx.ns, elsewhere);
    refused.push(("patch", "kueue.x-k8s.io", "workloads", Some(elsewhere), Some("any")));
    refused.push(("watch", "kueue.x-k8s.io", "workloads", None, None));
    for ns in &secret_namespaces {
        refused.push(("list", "", "secrets", Some(ns), None));
        refused.push(("watch", "", "secrets", Some(ns), None));
        refused.push(("update", "", "secrets", Some(ns), Some("slack-webhook")));
    }
    access.assert_refused(&refused).await;
}
