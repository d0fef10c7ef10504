//! The client, made as kubectl makes it, and what the commands read from the cluster.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use trainwarden_core::{Mode, PolicyDocument, RuleState};
use trainwarden_kube::trainjob::trainjob_api;
use trainwarden_kube::{ClusterProgressPolicy, PolicyResource, ProgressPolicy, ProgressPolicyStatus};

/// The flags kubectl passes its plugins' users expect.
#[derive(clap::Args, Debug)]
pub(crate) struct Flags {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster account).
    #[arg(long, global = true)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub(crate) context: Option<String>,
    /// The namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    pub(crate) namespace: Option<String>,
    /// Act as this user (impersonation, as kubectl's `--as`).
    #[arg(long = "as", global = true, value_name = "USER")]
    pub(crate) as_user: Option<String>,
    /// Judge and print as of this instant instead of now (RFC 3339): for reproducible output.
    #[arg(long, global = true, hide = true)]
    pub(crate) now: Option<String>,
}

/// A connection and the namespace commands act in.
pub(crate) struct Cluster {
    pub(crate) client: Client,
    pub(crate) namespace: String,
}

/// Connects as kubectl would with these flags.
pub(crate) async fn connect(flags: &Flags) -> Result<Cluster, String> {
    trainwarden_kube::client::install_crypto_provider();
    let options = KubeConfigOptions { context: flags.context.clone(), ..KubeConfigOptions::default() };
    let config = match &flags.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => match Kubeconfig::read() {
            Ok(kubeconfig) => Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| format!("kubeconfig: {e}"))?,
            Err(_) if flags.context.is_none() => Config::incluster().map_err(|e| {
                format!("no kubeconfig (set --kubeconfig or KUBECONFIG) and not in a cluster: {e}")
            })?,
            Err(e) => return Err(format!("reading the kubeconfig for --context: {e}")),
        },
    };
    let mut config = config;
    if let Some(user) = &flags.as_user {
        config.auth_info.impersonate = Some(user.clone());
    }
    let namespace = flags.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let _ = SERVER.set(config.cluster_url.to_string());
    let client = Client::try_from(config).map_err(|e| format!("building the client: {e}"))?;
    Ok(Cluster { client, namespace })
}

/// The API server the client talks to (the kubeconfig's), for errors that never reached it.
static SERVER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// What an API error means to the person running the command. One that got no answer names the server and
/// every cause (`client error (Connect)` alone says neither where nor why).
pub(crate) fn api_error(what: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => format!("{what}: forbidden by RBAC ({})", s.message),
        kube::Error::Api(s) if s.code == 404 => format!("{what}: not found ({})", s.message),
        kube::Error::Api(s) => format!("{what}: {} ({})", s.message, s.code),
        e => {
            let server = SERVER.get().map_or("(unknown)", String::as_str);
            format!(
                "{what}: no answer from the API server at {server}: {}; is the cluster up, and is this the \
                 kubeconfig and context you meant?",
                trainwarden_core::error_chain(e)
            )
        }
    }
}

/// The TrainJobs of one namespace (or all), optionally by label selector.
pub(crate) async fn trainjobs(
    cluster: &Cluster,
    all_namespaces: bool,
    selector: Option<&str>,
) -> Result<Vec<DynamicObject>, String> {
    let api = trainjob_api(cluster.client.clone(), (!all_namespaces).then_some(cluster.namespace.as_str()));
    let mut params = ListParams::default();
    if let Some(s) = selector {
        params = params.labels(s);
    }
    let mut jobs = api.list(&params).await.map_err(|e| api_error("listing TrainJobs", &e))?.items;
    jobs.sort_by_key(|j| (j.namespace(), j.name_any()));
    Ok(jobs)
}

/// One TrainJob.
pub(crate) async fn trainjob(cluster: &Cluster, name: &str) -> Result<DynamicObject, String> {
    trainjob_api(cluster.client.clone(), Some(&cluster.namespace))
        .get(name)
        .await
        .map_err(|e| api_error(&format!("TrainJob {}/{name}", cluster.namespace), &e))
}

/// The Kueue Workloads of a namespace at the newest version the cluster serves (a version it does not serve
/// answers 404 and the next is tried); `Ok(None)` when it serves none (no Kueue).
pub(crate) async fn workloads(
    cluster: &Cluster,
    ns: &str,
) -> Result<Option<(Api<DynamicObject>, Vec<DynamicObject>)>, String> {
    use trainwarden_kube::kueue::{WORKLOAD_VERSIONS, workload_resource_version};
    for version in WORKLOAD_VERSIONS {
        let api: Api<DynamicObject> =
            Api::namespaced_with(cluster.client.clone(), ns, &workload_resource_version(version));
        match api.list(&ListParams::default()).await {
            Ok(list) => return Ok(Some((api, list.items))),
            Err(kube::Error::Api(e)) if e.code == 404 => continue,
            Err(e) => return Err(api_error(&format!("listing Kueue Workloads in {ns}"), &e)),
        }
    }
    Ok(None)
}

/// Whether the Kueue Workload of each of these jobs is active, by job uid; a job whose Workload is not found
/// (or may not be read) is missing.
pub(crate) async fn workload_activity(
    cluster: &Cluster,
    jobs: &[&DynamicObject],
) -> std::collections::HashMap<String, bool> {
    let mut out = std::collections::HashMap::new();
    let namespaces: std::collections::BTreeSet<String> = jobs.iter().filter_map(|j| j.namespace()).collect();
    for ns in namespaces {
        let Ok(Some((_, items))) = workloads(cluster, &ns).await else { continue };
        for job in jobs.iter().filter(|j| j.namespace().as_deref() == Some(ns.as_str())) {
            let Some(uid) = job.uid() else { continue };
            if let Some(w) = items.iter().find(|w| trainwarden_kube::kueue::workload_of(w, &uid)) {
                let active =
                    w.data.pointer("/spec/active").and_then(serde_json::Value::as_bool) != Some(false);
                out.insert(uid, active);
            }
        }
    }
    out
}

/// The policies that may select jobs in these namespaces, as documents, and what could not be read
/// (a forbidden list, an object that is not a valid policy): said, not hidden.
pub(crate) struct Policies {
    pub(crate) documents: Vec<PolicyDocument>,
    /// Each policy's status as the controller last wrote it, by document index.
    pub(crate) statuses: Vec<Option<ProgressPolicyStatus>>,
    pub(crate) problems: Vec<String>,
}

impl Policies {
    /// When the controller holds the job's snooze until (its cap applied), as a policy status lists it.
    pub(crate) fn snoozed_until(
        &self,
        job: &trainwarden_core::JobKey,
    ) -> Option<trainwarden_core::Timestamp> {
        let name = job.to_string();
        self.statuses
            .iter()
            .flatten()
            .filter_map(|s| s.jobs.iter().find(|j| j.name == name)?.snoozed_until.as_ref())
            .filter_map(|t| t.0.to_string().parse().ok())
            .min()
    }

    /// Rules of Audit policies the controller lists as pending or firing for the job in their status (Audit
    /// writes nothing on the TrainJob, so its verdict annotation leaves them out). The status lists at most 50
    /// jobs per policy, firing ones first.
    pub(crate) fn audit_rules(&self, job: &trainwarden_core::JobKey) -> Vec<trainwarden_kube::RuleVerdict> {
        let name = job.to_string();
        let mut out = Vec::new();
        for (document, status) in self.documents.iter().zip(&self.statuses) {
            let Some(entry) = status.as_ref().and_then(|s| s.jobs.iter().find(|j| j.name == name)) else {
                continue;
            };
            let r = &document.reference;
            let rule_mode = |rule: &str| {
                document
                    .spec
                    .rules
                    .iter()
                    .find(|x| x.name == rule)
                    .and_then(|x| x.mode)
                    .unwrap_or(document.spec.mode)
            };
            let states = entry
                .firing
                .iter()
                .map(|n| (n, RuleState::Firing))
                .chain(entry.pending.iter().map(|n| (n, RuleState::Pending)));
            for (rule, state) in states {
                if rule_mode(rule) != Mode::Audit {
                    continue;
                }
                out.push(trainwarden_kube::RuleVerdict {
                    kind: r.kind,
                    namespace: r.namespace.clone(),
                    policy: r.name.clone(),
                    rule: rule.clone(),
                    state,
                    since: None,
                    mode: Mode::Audit,
                    why: String::new(),
                });
            }
        }
        out
    }
}

/// The ProgressPolicies of `namespace` (all with `None`) and every ClusterProgressPolicy.
pub(crate) async fn policies(cluster: &Cluster, namespace: Option<&str>) -> Policies {
    let mut out = Policies { documents: Vec::new(), statuses: Vec::new(), problems: Vec::new() };
    let namespaced: Api<ProgressPolicy> = match namespace {
        Some(ns) => Api::namespaced(cluster.client.clone(), ns),
        None => Api::all(cluster.client.clone()),
    };
    list_policies(namespaced, "ProgressPolicies", |p| p.status, &mut out).await;
    let cluster_wide: Api<ClusterProgressPolicy> = Api::all(cluster.client.clone());
    list_policies(cluster_wide, "ClusterProgressPolicies", |p| p.status, &mut out).await;
    out
}

/// One policy kind into `out`: each object as a document with its status, or what is wrong with it.
async fn list_policies<K>(
    api: Api<K>,
    plural: &str,
    status: fn(K) -> Option<ProgressPolicyStatus>,
    out: &mut Policies,
) where
    K: PolicyResource + kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            for p in list.items {
                match p.to_document() {
                    Ok(d) => {
                        out.documents.push(d);
                        out.statuses.push(status(p));
                    }
                    Err(e) => out.problems.push(format!("{plural} {}: {e}", p.name_any())),
                }
            }
        }
        Err(e) => out.problems.push(api_error(&format!("listing {plural}"), &e)),
    }
}

/// The labels of these namespaces (for cluster policies' `namespaceSelector`); one that cannot be read is
/// missing from the map (its selection is then unknown, and said so).
pub(crate) async fn namespace_labels(
    cluster: &Cluster,
    names: impl IntoIterator<Item = String>,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let api: Api<Namespace> = Api::all(cluster.client.clone());
    let mut out = BTreeMap::new();
    for name in names {
        if out.contains_key(&name) {
            continue;
        }
        if let Ok(ns) = api.get(&name).await {
            out.insert(name, ns.labels().clone());
        }
    }
    out
}

/// Whether the user may `verb` the resource in the namespace, and the reason when not (a
/// SelfSubjectAccessReview: the API server's own answer, asked before anything is written).
pub(crate) async fn may(
    cluster: &Cluster,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: &str,
    name: Option<&str>,
) -> Result<(), String> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: Some(namespace.into()),
                name: name.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let api: Api<SelfSubjectAccessReview> = Api::all(cluster.client.clone());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| api_error("asking the API server what you may do (SelfSubjectAccessReview)", &e))?;
    let status = answer.status.unwrap_or_default();
    if status.allowed {
        return Ok(());
    }
    let why = status.reason.filter(|r| !r.is_empty()).map(|r| format!(" ({r})")).unwrap_or_default();
    Err(format!(
        "RBAC does not allow you to {verb} {resource}.{group} in namespace {namespace}{why}; nothing was changed. Ask an admin for a Role granting `{verb}` on {resource}.{group} there."
    ))
}
