//! The Kueue source: the demand queued behind each Kueue-managed TrainJob, for `queue_pending()` and
//! `queue_pending_gpus()`.
//!
//! A TrainJob labelled `kueue.x-k8s.io/queue-name=<lq>` is queued in LocalQueue `<lq>` of its namespace,
//! which points at a ClusterQueue (`spec.clusterQueue`), which may belong to a cohort (`spec.cohortName` in
//! `v1beta2`, `spec.cohort` in `v1beta1`) whose ClusterQueues borrow each other's unused quota. The GPUs an
//! idle job holds could go to any Workload pending in its ClusterQueue or in a sibling of the cohort, so that
//! is the demand reported to the job's rules.
//!
//! A Workload is *pending* as Kueue's own queue manager counts it (`pkg/workload`: `IsActive`, not
//! `IsFinished`, not `HasQuotaReservation`): `spec.active` is not false, and neither a `Finished` nor a
//! `QuotaReserved` condition is `True`. An evicted or preempted Workload loses its reservation and so is
//! pending again. Its GPUs are Σ over `spec.podSets` of `count` × the pod template's containers' requests (or
//! limits, which stand for requests of extended resources) of every resource named `…/gpu`
//! (`nvidia.com/gpu`, `amd.com/gpu`).
//!
//! Three watches (Workloads, LocalQueues, ClusterQueues) at the API version discovery finds (`v1beta2`, which
//! Kueue 0.15+ serves, else `v1beta1`) keep a compact index (a Workload is a queue name and a GPU count, or
//! nothing when it is not pending); a re-list replaces a kind's part of the index whole at `InitDone`, so an
//! object deleted while the watch was down is gone from it. At most every [`SEND_EVERY`], when the demand
//! changed, the demand per LocalQueue goes to the evaluation loop as one [`Input::QueueDemand`].
//! With `--namespace`, Workloads and LocalQueues are read in that namespace only (demand elsewhere in the
//! cohort is not seen); ClusterQueues are cluster-scoped, and when they were never listed the demand is the
//! job's own ClusterQueue's (no cohort).
//! Kueue not installed is reported in the `KueueQueues` condition of the policies that read the queue, and
//! looked for again every [`DISCOVERY_RETRY`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{info, warn};
use trainwarden_core::QueueDemand;
use trainwarden_kube::kueue::WORKLOAD_VERSIONS;

use crate::messages::{Input, LocalQueueRef, QueueDemands, SourceHealth};
use crate::metrics::{ApiOperation, Metrics};

/// The least time between two demands sent to the evaluation loop: a burst of Workload changes (a queue of
/// 500 jobs admitted at once) is one re-evaluation, not 500.
pub const SEND_EVERY: Duration = Duration::from_secs(2);

/// How long to wait before looking for Kueue's API again when it is not served.
pub const DISCOVERY_RETRY: Duration = Duration::from_secs(60);

/// The three kinds read, as discovery lists them.
const KINDS: [(&str, &str); 3] =
    [("Workload", "workloads"), ("LocalQueue", "localqueues"), ("ClusterQueue", "clusterqueues")];

/// The newest of [`WORKLOAD_VERSIONS`] whose discovery document (`served`: version → resource plurals) has
/// all three kinds.
pub fn choose_version<'a>(served: &BTreeMap<&'a str, Vec<String>>) -> Option<&'a str> {
    WORKLOAD_VERSIONS.into_iter().find_map(|v| {
        let (version, resources) = served.get_key_value(v)?;
        KINDS.iter().all(|(_, plural)| resources.iter().any(|r| r == plural)).then_some(*version)
    })
}

/// One Workload as the index keeps it: pending in a queue with so many GPUs, or not pending.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingWorkload {
    /// The LocalQueue (`spec.queueName`) in the Workload's namespace.
    pub queue: LocalQueueRef,
    /// GPUs its pods request, all pod sets together.
    pub gpus: f64,
    /// The uid of the job Kueue made it for (its `kueue.x-k8s.io/job-uid` label, else its controller owner).
    pub owner: Option<String>,
}

/// Reads a Workload: `Some` when it is pending in a named queue.
pub fn pending_workload(w: &DynamicObject) -> Option<PendingWorkload> {
    let data = &w.data;
    if data.pointer("/spec/active") == Some(&Value::Bool(false)) {
        return None;
    }
    let conditions = data.pointer("/status/conditions").and_then(Value::as_array);
    let holds = |kind: &str| {
        conditions.into_iter().flatten().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    if holds("Finished") || holds("QuotaReserved") {
        return None;
    }
    let queue = data.pointer("/spec/queueName").and_then(Value::as_str).filter(|q| !q.is_empty())?;
    let pod_sets = data.pointer("/spec/podSets").and_then(Value::as_array);
    let gpus = pod_sets.into_iter().flatten().map(pod_set_gpus).sum();
    let owner = (w.labels().get("kueue.x-k8s.io/job-uid").cloned())
        .or_else(|| w.owner_references().iter().find(|o| o.controller == Some(true)).map(|o| o.uid.clone()));
    Some(PendingWorkload { queue: LocalQueueRef::new(w.namespace()?, queue), gpus, owner })
}

/// `count` × the GPUs of one pod of a pod set.
///
/// A pod's GPUs are its effective request, as the scheduler and Kueue count it: the containers' sum plus
/// the sidecars' (init containers with `restartPolicy: Always`), or, when larger, what a plain init container
/// needs while it runs (its own plus the sidecars started before it).
fn pod_set_gpus(pod_set: &Value) -> f64 {
    let count = pod_set.get("count").and_then(Value::as_f64).unwrap_or(1.0);
    // Requests, else limits (an extended resource's request defaults to its limit).
    let gpus = |c: &Value| {
        let of = |part: &str| gpu_quantity(c.pointer(&format!("/resources/{part}")));
        of("requests").or_else(|| of("limits")).unwrap_or(0.0)
    };
    let list = |p: &str| pod_set.pointer(p).and_then(Value::as_array).into_iter().flatten();
    let mut sidecars = 0.0;
    let mut init_peak: f64 = 0.0;
    for c in list("/template/spec/initContainers") {
        if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            sidecars += gpus(c);
        } else {
            init_peak = init_peak.max(sidecars + gpus(c));
        }
    }
    let running: f64 = list("/template/spec/containers").map(gpus).sum::<f64>() + sidecars;
    count.max(0.0) * running.max(init_peak)
}

/// The sum of the `…/gpu` quantities of a resource list; `None` when it names none.
fn gpu_quantity(list: Option<&Value>) -> Option<f64> {
    let list = list?.as_object()?;
    let mut found = None;
    for (name, q) in list.iter().filter(|(n, _)| n.ends_with("/gpu")) {
        // GPUs are whole devices: a plain integer (as a string, as Kubernetes writes quantities, or a number).
        let n = match q {
            Value::String(s) => s.trim().parse::<f64>().ok(),
            Value::Number(n) => n.as_f64(),
            _ => None,
        };
        match n.filter(|n| n.is_finite() && *n >= 0.0) {
            Some(n) => *found.get_or_insert(0.0) += n,
            None => {
                warn!(resource = %name, quantity = %q, "a Workload's GPU quantity is not a number; not counted");
            }
        }
    }
    found
}

/// What the three watches know, compactly.
#[derive(Debug, Default)]
pub struct QueueIndex {
    /// Every Workload, by namespace and name: pending in a queue, or `None`.
    workloads: HashMap<(String, String), Option<PendingWorkload>>,
    /// LocalQueue → its ClusterQueue.
    local_queues: HashMap<LocalQueueRef, String>,
    /// ClusterQueue → its cohort, when it has one.
    cohorts: HashMap<String, Option<String>>,
}

/// One watched object, read for the index.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// A Workload (namespace, name) and whether it is pending.
    Workload((String, String), Option<PendingWorkload>),
    /// A LocalQueue and its ClusterQueue (`None`: it names none).
    LocalQueue(LocalQueueRef, Option<String>),
    /// A ClusterQueue and its cohort.
    ClusterQueue(String, Option<String>),
}

/// Which part of the index an entry belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Workloads.
    Workloads,
    /// LocalQueues.
    LocalQueues,
    /// ClusterQueues.
    ClusterQueues,
}

impl Entry {
    /// Reads a watched object of one kind; `None` when it has no namespace where it needs one.
    pub fn read(part: Part, obj: &DynamicObject) -> Option<Entry> {
        let name = obj.name_any();
        let text = |p: &str| obj.data.pointer(p).and_then(Value::as_str).filter(|s| !s.is_empty());
        Some(match part {
            Part::Workloads => Entry::Workload((obj.namespace()?, name), pending_workload(obj)),
            Part::LocalQueues => Entry::LocalQueue(
                LocalQueueRef::new(obj.namespace()?, name),
                text("/spec/clusterQueue").map(str::to_string),
            ),
            Part::ClusterQueues => Entry::ClusterQueue(
                name,
                text("/spec/cohortName").or_else(|| text("/spec/cohort")).map(str::to_string),
            ),
        })
    }
}

impl QueueIndex {
    /// An object appeared or changed.
    pub fn apply(&mut self, entry: Entry) {
        match entry {
            Entry::Workload(key, pending) => {
                self.workloads.insert(key, pending);
            }
            Entry::LocalQueue(lq, Some(cq)) => {
                self.local_queues.insert(lq, cq);
            }
            Entry::LocalQueue(lq, None) => {
                self.local_queues.remove(&lq);
            }
            Entry::ClusterQueue(cq, cohort) => {
                self.cohorts.insert(cq, cohort);
            }
        }
    }

    /// An object was deleted.
    pub fn delete(&mut self, entry: &Entry) {
        match entry {
            Entry::Workload(key, _) => {
                self.workloads.remove(key);
            }
            Entry::LocalQueue(lq, _) => {
                self.local_queues.remove(lq);
            }
            Entry::ClusterQueue(cq, _) => {
                self.cohorts.remove(cq);
            }
        }
    }

    /// A re-list of one kind completed: its part is exactly what it listed.
    pub fn replace(&mut self, part: Part, listed: Vec<Entry>) {
        match part {
            Part::Workloads => self.workloads.clear(),
            Part::LocalQueues => self.local_queues.clear(),
            Part::ClusterQueues => self.cohorts.clear(),
        }
        for e in listed {
            self.apply(e);
        }
    }

    /// The demand behind every known LocalQueue: the Workloads pending in its ClusterQueue, or in every
    /// ClusterQueue of that one's cohort.
    pub fn demand(&self) -> QueueDemands {
        let pool = |cq: &str| -> String {
            match self.cohorts.get(cq) {
                Some(Some(cohort)) => format!("cohort/{cohort}"),
                _ => format!("cq/{cq}"),
            }
        };
        let mut pools: HashMap<String, QueueDemand> = HashMap::new();
        let mut own = BTreeMap::new();
        for w in self.workloads.values().flatten() {
            // A Workload in a LocalQueue that does not exist is not queued anywhere (Kueue reports it
            // inadmissible): no one is waiting behind it.
            let Some(cq) = self.local_queues.get(&w.queue) else { continue };
            let d = pools.entry(pool(cq)).or_insert(QueueDemand { pending: 0, pending_gpus: 0.0 });
            d.pending = d.pending.saturating_add(1);
            d.pending_gpus += w.gpus;
            if let Some(uid) = &w.owner {
                own.insert(uid.clone(), (w.queue.clone(), QueueDemand { pending: 1, pending_gpus: w.gpus }));
            }
        }
        let queues = self
            .local_queues
            .iter()
            .map(|(lq, cq)| {
                let d =
                    pools.get(&pool(cq)).copied().unwrap_or(QueueDemand { pending: 0, pending_gpus: 0.0 });
                (lq.clone(), d)
            })
            .collect();
        QueueDemands { queues, own }
    }

    /// Counts for the health message: (pending Workloads, LocalQueues, ClusterQueues).
    fn counts(&self) -> (usize, usize, usize) {
        (self.workloads.values().flatten().count(), self.local_queues.len(), self.cohorts.len())
    }
}

/// What a kind's watch delivered, in index terms.
enum Change {
    Apply(Entry),
    Delete(Entry),
    ListStarted,
    Listed(Entry),
    ListDone,
    Failed(String),
}

fn watch_part(
    client: &Client,
    part: Part,
    version: &str,
    namespace: Option<&str>,
) -> impl Stream<Item = (Part, Change)> + Send + 'static {
    let (kind, plural) = match part {
        Part::Workloads => KINDS[0],
        Part::LocalQueues => KINDS[1],
        Part::ClusterQueues => KINDS[2],
    };
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("kueue.x-k8s.io", version, kind), plural);
    let api: Api<DynamicObject> = match (part, namespace) {
        (Part::ClusterQueues, _) | (_, None) => Api::all_with(client.clone(), &resource),
        (_, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
    };
    watcher(api, watcher::Config::default()).default_backoff().filter_map(move |event| async move {
        let change = match event {
            Ok(watcher::Event::Apply(o)) => Change::Apply(Entry::read(part, &o)?),
            Ok(watcher::Event::Delete(o)) => Change::Delete(Entry::read(part, &o)?),
            Ok(watcher::Event::Init) => Change::ListStarted,
            Ok(watcher::Event::InitApply(o)) => Change::Listed(Entry::read(part, &o)?),
            Ok(watcher::Event::InitDone) => Change::ListDone,
            Err(e) => Change::Failed(format!("watching Kueue {plural}: {e}")),
        };
        Some((part, change))
    })
}

/// Finds the Kueue version to read: `Ok(None)` when Kueue is not installed.
async fn discover(client: &Client) -> Result<Option<&'static str>, kube::Error> {
    let mut served = BTreeMap::new();
    for version in WORKLOAD_VERSIONS {
        match client.list_api_group_resources(&format!("kueue.x-k8s.io/{version}")).await {
            Ok(list) => {
                served.insert(version, list.resources.into_iter().map(|r| r.name).collect());
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(choose_version(&served))
}

/// Reads Kueue's queues until the loop's channel closes; returns the task's name.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    tx: mpsc::Sender<Input>,
    metrics: Arc<Metrics>,
) -> &'static str {
    const NAME: &str = "Kueue queue watch";
    let health = |healthy, message: String| Input::KueueQueues(SourceHealth { healthy, message });
    let version = loop {
        let (reported, retry) = match discover(&client).await {
            Ok(Some(v)) => break v,
            Ok(None) => (
                health(false, "Kueue is not installed (no kueue.x-k8s.io v1beta2 or v1beta1 API serves workloads, localqueues and clusterqueues): queue_pending() is unknown".into()),
                DISCOVERY_RETRY,
            ),
            Err(e) => {
                metrics.api_error(ApiOperation::WatchKueue);
                (health(false, format!("discovering Kueue's API: {e}")), Duration::from_secs(10))
            }
        };
        if tx.send(reported).await.is_err() {
            return NAME;
        }
        tokio::time::sleep(retry).await;
    };
    info!(version, namespace = namespace.as_deref().unwrap_or("(all)"), "reading Kueue's queues");
    let ns = namespace.as_deref();
    let mut changes = futures::stream::select_all([
        watch_part(&client, Part::Workloads, version, ns).boxed(),
        watch_part(&client, Part::LocalQueues, version, ns).boxed(),
        watch_part(&client, Part::ClusterQueues, version, ns).boxed(),
    ]);
    let mut index = QueueIndex::default();
    let mut listing: HashMap<Part, Vec<Entry>> = HashMap::new();
    let mut listed: Vec<Part> = Vec::new();
    let mut failing: HashMap<Part, String> = HashMap::new();
    let mut last_sent: Option<QueueDemands> = None;
    let mut last_health: Option<SourceHealth> = None;
    let mut tick = tokio::time::interval(SEND_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            next = changes.next() => {
                let Some((part, change)) = next else { return NAME };
                match change {
                    Change::Apply(e) => { failing.remove(&part); index.apply(e) }
                    Change::Delete(e) => { failing.remove(&part); index.delete(&e) }
                    Change::ListStarted => { listing.insert(part, Vec::new()); }
                    Change::Listed(e) => listing.entry(part).or_default().push(e),
                    Change::ListDone => {
                        failing.remove(&part);
                        index.replace(part, listing.remove(&part).unwrap_or_default());
                        if !listed.contains(&part) { listed.push(part); }
                    }
                    Change::Failed(message) => {
                        metrics.api_error(ApiOperation::WatchKueue);
                        warn!(error = %message, "reading Kueue's queues");
                        failing.insert(part, message);
                    }
                }
            }
            _ = tick.tick() => {
                // Nothing is sent before Workloads and LocalQueues were listed once: a partial index would
                // say "nobody waits" for queues that have a line.
                let ready = listed.contains(&Part::Workloads) && listed.contains(&Part::LocalQueues);
                let now_health = match (ready, failing.get(&Part::Workloads).or_else(|| failing.get(&Part::LocalQueues))) {
                    (_, Some(m)) => SourceHealth { healthy: false, message: m.clone() },
                    (false, None) => continue,
                    (true, None) => {
                        let (pending, lqs, cqs) = index.counts();
                        let cohorts = match failing.get(&Part::ClusterQueues) {
                            Some(m) => format!("; cohorts unknown, each ClusterQueue counted alone ({m})"),
                            None => String::new(),
                        };
                        use trainwarden_core::plural;
                        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
                        SourceHealth {
                            healthy: true,
                            message: format!(
                                "Kueue {version}: {}, {}, {}{cohorts}",
                                plural(n(pending), "pending Workload", "pending Workloads"),
                                plural(n(lqs), "LocalQueue", "LocalQueues"),
                                plural(n(cqs), "ClusterQueue", "ClusterQueues"),
                            ),
                        }
                    }
                };
                if last_health.as_ref() != Some(&now_health) {
                    if tx.send(Input::KueueQueues(now_health.clone())).await.is_err() {
                        return NAME;
                    }
                    last_health = Some(now_health);
                }
                if !ready || !last_health.as_ref().is_some_and(|h| h.healthy) {
                    // The loop drops what it knew when told the watch fails: once healthy again, the
                    // demand is sent whether or not it changed meanwhile.
                    last_sent = None;
                    continue;
                }
                let demand = index.demand();
                if last_sent.as_ref() != Some(&demand) {
                    if tx.send(Input::QueueDemand(Arc::new(demand.clone()))).await.is_err() {
                        return NAME;
                    }
                    last_sent = Some(demand);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, ns: Option<&str>, name: &str, body: Value) -> DynamicObject {
        let mut v = json!({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": name}});
        if let Some(ns) = ns {
            v["metadata"]["namespace"] = json!(ns);
        }
        for (k, val) in body.as_object().unwrap() {
            v[k] = val.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    /// A Workload in `ns` queued in `queue`, `pods` pods of `gpus` GPUs each, with these condition types True.
    fn workload(
        ns: &str,
        name: &str,
        queue: &str,
        pods: u32,
        gpus: &str,
        conditions: &[&str],
    ) -> DynamicObject {
        let conditions: Vec<Value> =
            conditions.iter().map(|t| json!({"type": t, "status": "True", "reason": "r"})).collect();
        object(
            "Workload",
            Some(ns),
            name,
            json!({
                "spec": {"queueName": queue, "podSets": [{"name": "node", "count": pods, "template": {"spec": {
                    "containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "8"}}}]
                }}}]},
                "status": {"conditions": conditions}
            }),
        )
    }

    fn lq(ns: &str, name: &str, cq: &str) -> Entry {
        Entry::read(
            Part::LocalQueues,
            &object("LocalQueue", Some(ns), name, json!({"spec": {"clusterQueue": cq}})),
        )
        .unwrap()
    }

    fn cq(name: &str, cohort_field: &str, cohort: &str) -> Entry {
        Entry::read(
            Part::ClusterQueues,
            &object("ClusterQueue", None, name, json!({"spec": {cohort_field: cohort}})),
        )
        .unwrap()
    }

    fn wl(w: DynamicObject) -> Entry {
        Entry::read(Part::Workloads, &w).unwrap()
    }

    fn d(pending: u32, pending_gpus: f64) -> QueueDemand {
        QueueDemand { pending, pending_gpus }
    }

    #[test]
    fn a_workload_is_pending_until_it_reserves_quota_or_finishes_and_while_active() {
        let p = pending_workload(&workload("nlp", "w", "team", 2, "4", &[])).unwrap();
        assert_eq!((p.queue, p.gpus), (LocalQueueRef::new("nlp", "team"), 8.0));
        assert!(pending_workload(&workload("nlp", "w", "team", 2, "4", &["QuotaReserved"])).is_none());
        assert!(pending_workload(&workload("nlp", "w", "team", 2, "4", &["Finished"])).is_none());
        // Evicted (preempted) and requeued: the reservation is gone, it waits again.
        assert!(pending_workload(&workload("nlp", "w", "team", 2, "4", &["Evicted"])).is_some());
        let mut inactive = workload("nlp", "w", "team", 2, "4", &[]);
        inactive.data["spec"]["active"] = json!(false);
        assert!(pending_workload(&inactive).is_none(), "deactivated (by trainwarden too): nobody waits");
        let no_queue = workload("nlp", "w", "", 2, "4", &[]);
        assert!(pending_workload(&no_queue).is_none());
    }

    #[test]
    fn gpus_are_requests_else_limits_of_every_gpu_resource_times_the_pod_count() {
        let mut w = workload("nlp", "w", "team", 3, "2", &[]);
        w.data["spec"]["podSets"][0]["template"]["spec"]["containers"] = json!([
            {"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}},
            {"name": "b", "resources": {"limits": {"amd.com/gpu": 2}}},
            {"name": "c", "resources": {"requests": {"cpu": "4"}}}
        ]);
        assert_eq!(pending_workload(&w).unwrap().gpus, 9.0);
        w.data["spec"]["podSets"][0]["template"]["spec"]["containers"][1]["resources"]["limits"]["amd.com/gpu"] =
            json!("many");
        assert_eq!(pending_workload(&w).unwrap().gpus, 3.0, "an unreadable quantity is not counted");
    }

    #[test]
    fn init_containers_count_as_the_scheduler_counts_them() {
        let mut w = workload("nlp", "w", "team", 2, "2", &[]);
        let gpu = |n: u32| json!({"limits": {"nvidia.com/gpu": n.to_string()}});
        // A plain init container needing more than the containers: the pod needs that much while it runs.
        w.data["spec"]["podSets"][0]["template"]["spec"]["initContainers"] =
            json!([{"name": "warmup", "resources": gpu(4)}]);
        assert_eq!(pending_workload(&w).unwrap().gpus, 8.0, "2 pods x max(2, 4)");
        // A sidecar runs beside the containers: added to them, and to the init containers after it.
        w.data["spec"]["podSets"][0]["template"]["spec"]["initContainers"] = json!([
            {"name": "proxy", "restartPolicy": "Always", "resources": gpu(1)},
            {"name": "warmup", "resources": gpu(2)}
        ]);
        assert_eq!(pending_workload(&w).unwrap().gpus, 6.0, "2 pods x max(2 + 1, 1 + 2)");
    }

    #[test]
    fn demand_is_the_cluster_queue_s_or_the_whole_cohort_s() {
        let mut index = QueueIndex::default();
        for e in [
            lq("nlp", "team", "cq-nlp"),
            lq("vision", "team", "cq-vision"),
            lq("solo", "batch", "cq-solo"),
            cq("cq-nlp", "cohortName", "research"),
            cq("cq-vision", "cohort", "research"),
            cq("cq-solo", "cohortName", ""),
            wl(workload("vision", "a", "team", 1, "8", &[])),
            wl(workload("vision", "b", "team", 2, "8", &[])),
            wl(workload("vision", "admitted", "team", 4, "8", &["QuotaReserved"])),
            wl(workload("solo", "c", "batch", 1, "1", &[])),
            wl(workload("nlp", "lost", "no-such-queue", 1, "8", &[])),
        ] {
            index.apply(e);
        }
        let demand = index.demand().queues;
        assert_eq!(demand[&LocalQueueRef::new("nlp", "team")], d(2, 24.0), "the cohort's sibling waits");
        assert_eq!(demand[&LocalQueueRef::new("vision", "team")], d(2, 24.0));
        assert_eq!(demand[&LocalQueueRef::new("solo", "batch")], d(1, 1.0), "no cohort: its own queue only");
        assert_eq!(demand.len(), 3);

        // A ClusterQueue unknown (cannot be read) is counted alone.
        index.delete(&cq("cq-nlp", "cohortName", "research"));
        assert_eq!(index.demand().queues[&LocalQueueRef::new("nlp", "team")], d(0, 0.0));
    }

    #[test]
    fn a_relist_drops_what_it_no_longer_lists() {
        let mut index = QueueIndex::default();
        index.apply(lq("nlp", "team", "cq"));
        index.apply(wl(workload("nlp", "a", "team", 1, "8", &[])));
        index.apply(wl(workload("nlp", "b", "team", 1, "8", &[])));
        assert_eq!(index.demand().queues[&LocalQueueRef::new("nlp", "team")], d(2, 16.0));
        // b was deleted while the watch was down.
        index.replace(Part::Workloads, vec![wl(workload("nlp", "a", "team", 1, "8", &[]))]);
        assert_eq!(index.demand().queues[&LocalQueueRef::new("nlp", "team")], d(1, 8.0));
        index.replace(Part::LocalQueues, vec![]);
        assert!(index.demand().queues.is_empty(), "no LocalQueue: no demand known for any job");
    }

    /// A job requeued or preempted has its own Workload pending: the demand behind it is the others'.
    #[test]
    fn a_jobs_own_pending_workload_is_not_demand_behind_it() {
        let mut index = QueueIndex::default();
        index.apply(lq("nlp", "team", "cq"));
        let mut own = workload("nlp", "mine", "team", 2, "4", &["Evicted"]);
        own.metadata.labels = Some([("kueue.x-k8s.io/job-uid".to_string(), "uid-mine".to_string())].into());
        index.apply(wl(own));
        let mut other = workload("nlp", "theirs", "team", 1, "8", &[]);
        other.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "theirs",
                "uid": "uid-theirs", "controller": true
            }))
            .unwrap(),
        ]);
        index.apply(wl(other));
        let demand = index.demand();
        let team = LocalQueueRef::new("nlp", "team");
        assert_eq!(demand.queues[&team], d(2, 16.0), "both wait");
        assert_eq!(demand.for_job(&team, Some("uid-mine")), Some(d(1, 8.0)), "behind mine: theirs");
        assert_eq!(demand.for_job(&team, Some("uid-theirs")), Some(d(1, 8.0)), "owner reference");
        assert_eq!(demand.for_job(&team, Some("uid-admitted")), Some(d(2, 16.0)));
        assert_eq!(demand.for_job(&team, None), Some(d(2, 16.0)));
        // Its own Workload in another queue (the label changed) is not taken from this one.
        index.apply(lq("nlp", "other", "cq2"));
        assert_eq!(
            demand.for_job(&LocalQueueRef::new("nlp", "other"), Some("uid-mine")),
            None,
            "not sent yet"
        );
        let demand = index.demand();
        assert_eq!(demand.for_job(&LocalQueueRef::new("nlp", "other"), Some("uid-mine")), Some(d(0, 0.0)));
    }

    #[test]
    fn the_newest_version_serving_all_three_kinds_is_read() {
        let all = || KINDS.iter().map(|(_, p)| p.to_string()).collect::<Vec<_>>();
        let served = BTreeMap::from([("v1beta2", all()), ("v1beta1", all())]);
        assert_eq!(choose_version(&served), Some("v1beta2"));
        let served = BTreeMap::from([("v1beta1", all())]);
        assert_eq!(choose_version(&served), Some("v1beta1"), "an older Kueue");
        // Only the Workload CRD installed (as some test planes do): not Kueue's queues.
        let served = BTreeMap::from([("v1beta2", vec!["workloads".to_string()])]);
        assert_eq!(choose_version(&served), None);
        assert_eq!(choose_version(&BTreeMap::new()), None);
    }
}
