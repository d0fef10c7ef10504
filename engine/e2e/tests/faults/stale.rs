//! Issue 47: a stale view must not act. The controller (a process, leader election off) reaches the API
//! server through a fault proxy in bridge mode, which sees each request: the link is cut, the cluster
//! changes during the cut (the policy deleted or edited, an exception created, or nothing) while the job
//! reports a loss its rule fires on, and at the heal the policy and exception watches are held while the
//! TrainJob watch resumes — the unlucky order, made certain. The brain judges the report under the policy it
//! still holds; the executor's check at the write decides. Each scenario asserts the exact actions: the
//! job's `Suspended` and `ActionAbandoned` Events, its `spec.suspend` and intents record, and
//! `trainwarden_actions_abandoned{reason}`.

use super::*;

const POLICY: &str = "nan-and-stall";
const JOB: &str = "ft";

/// `nan-and-stall`: a NaN loss suspends the job, and so does a loss above `threshold`.
fn nan_and_stall(threshold: u32) -> String {
    policy(
        POLICY,
        "Enforce",
        &format!(
            "    - {{name: nan-loss, uses: non_finite, with: {{metric: loss}}, actions: [{{suspend: {{}}}}]}}\n\
             \x20   - {{name: loss-high, uses: diverging, with: {{metric: loss, threshold: {threshold}}}, actions: [{{suspend: {{}}}}]}}\n"
        ),
    )
}

/// What changes in the cluster while the link is cut.
#[derive(Clone, Copy, PartialEq)]
enum DuringCut {
    /// The policy is deleted; the job reports a NaN loss.
    PolicyDeleted,
    /// The policy's `loss-high` threshold is raised from 5 to 100; the job reports a loss of 10.
    ThresholdRaised,
    /// A ProgressPolicyException for the job is created; the job reports a NaN loss.
    ExceptionCreated,
    /// Nothing; the job reports a NaN loss.
    Nothing,
}

/// What the job and the controller show at the end.
struct Seen {
    events: Vec<(String, String, String)>,
    suspended: bool,
    intents: Vec<String>,
    abandoned: Vec<(String, f64)>,
}

/// The value of `trainwarden_actions_abandoned_total` per reason, read from the replica's `/metrics`.
fn abandoned(replica: &Replica) -> Vec<(String, f64)> {
    let Some(addr) = replica.metrics_addr() else { return Vec::new() };
    let Ok(mut stream) = std::net::TcpStream::connect(&addr) else { return Vec::new() };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    let mut out: Vec<(String, f64)> = body
        .lines()
        .filter_map(|l| l.strip_prefix("trainwarden_actions_abandoned_total{reason=\""))
        .filter_map(|rest| {
            let (reason, value) = rest.split_once("\"} ")?;
            Some((reason.to_string(), value.trim().parse().ok()?))
        })
        .filter(|(_, v)| *v > 0.0)
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The scenario: a policy and a job watched through a bridge proxy; the cut, the change and the report;
/// the heal with the policy and exception watches held until the outcome of the report is known (`until`);
/// then the watches released and a few seconds for anything (wrong) to follow.
async fn cut(name: &str, during: DuringCut, until: &str) -> Option<Seen> {
    let s = scene(name).await?;
    let (c, ns) = (&s.client, s.ns.as_str());
    apply_policy(c, ns, &nan_and_stall(5)).await;
    create_trainjob(c, ns, JOB, &[]).await;
    report(c, ns, JOB, seconds_ago(0), "0.5", 10).await;
    let ca = s.plane.ca_pem().expect("the private plane's CA certificate");
    let proxy = FaultProxy::start_bridge(s.plane.apiserver_addr(), &ca).expect("bridge proxy");
    let kubeconfig = s.plane.kubeconfig_via_bridge(proxy.addr(), &s.dir.join("stale.kubeconfig"));
    let replica = Replica::start_with(&s, "stale", false, proxy, kubeconfig);
    wait_until_watching(c, ns, POLICY, 1).await;
    report(c, ns, JOB, seconds_ago(0), "0.5", 20).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    replica.proxy.black_hole();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let policies: Api<ProgressPolicy> = Api::namespaced(c.clone(), ns);
    match during {
        DuringCut::PolicyDeleted => {
            policies.delete(POLICY, &DeleteParams::default()).await.expect("delete the policy");
        }
        DuringCut::ThresholdRaised => {
            let raised: Value = serde_saphyr::from_str(&nan_and_stall(100)).expect("policy YAML");
            let patch = serde_json::json!({"spec": {"rules": raised["spec"]["rules"]}});
            policies
                .patch(POLICY, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
                .await
                .expect("raise the threshold");
        }
        DuringCut::ExceptionCreated => {
            let expires = Timestamp::from_second(Timestamp::now().as_second() + 600).unwrap();
            let exception: trainwarden_kube::ProgressPolicyException =
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "trainwarden.dev/v1alpha1",
                    "kind": "ProgressPolicyException",
                    "metadata": {"name": "eval-run", "namespace": ns},
                    "spec": {
                        "exceptions": [{"policyName": format!("{ns}/{POLICY}")}],
                        "match": {"names": [JOB]},
                        "expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                        "reason": "an evaluation run, expected to report NaN",
                    },
                }))
                .expect("an exception object");
            Api::<trainwarden_kube::ProgressPolicyException>::namespaced(c.clone(), ns)
                .create(&PostParams::default(), &exception)
                .await
                .expect("create the exception");
        }
        DuringCut::Nothing => {}
    }
    let loss = if during == DuringCut::ThresholdRaised { "10" } else { "NaN" };
    report(c, ns, JOB, seconds_ago(0), loss, 30).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    // The TrainJob watch resumes first: the policy and exception watches stay held.
    replica.proxy.hold_watches(&["progresspolicies", "progresspolicyexceptions"]);
    replica.proxy.heal();
    // The report's outcome: the one expected, or a suspension (which the assertions then refuse).
    eventually(
        &format!("the report's outcome ({until} or Suspended on {JOB})"),
        Duration::from_secs(30),
        || async {
            let e = events(c, ns, JOB).await;
            (count(&e, until) + count(&e, "Suspended") >= 1).then_some(())
        },
    )
    .await;
    replica.proxy.release_watches();
    // Whatever the watches bring now must change nothing more.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let j = job(c, ns, JOB).await;
    let seen = Seen {
        events: events(c, ns, JOB).await,
        suspended: suspended(&j),
        intents: j
            .annotations()
            .get(INTENTS_ANNOTATION)
            .and_then(|r| serde_json::from_str(r).ok())
            .unwrap_or_default(),
        abandoned: abandoned(&replica),
    };
    eprintln!("[stale {name}] events {:?}", seen.events);
    Some(seen)
}

fn notes<'a>(seen: &'a Seen, reason: &str) -> Vec<&'a str> {
    seen.events.iter().filter(|e| e.0 == reason).map(|e| e.1.as_str()).collect()
}

/// 1. The policy is deleted during the cut and the job reports a NaN; the TrainJob watch resumes first, so
/// the brain fires under the policy it still holds. The write finds the policy gone: never suspended, the
/// intent abandoned, and the job told why.
#[tokio::test]
async fn a_policy_deleted_during_a_cut_never_suspends_even_when_the_job_watch_resumes_first() {
    let Some(seen) = cut("stale-deleted", DuringCut::PolicyDeleted, "ActionAbandoned").await else { return };
    assert!(!seen.suspended && seen.intents.is_empty(), "suspended by a deleted policy: {:?}", seen.events);
    assert_eq!(count(&seen.events, "Suspended"), 0, "{:?}", seen.events);
    assert_eq!(
        notes(&seen, "ActionAbandoned"),
        vec![format!("not suspended: policy {POLICY} was deleted (rule nan-loss)")],
        "{:?}",
        seen.events
    );
    assert_eq!(seen.abandoned, vec![("policy_deleted".to_string(), 1.0)]);
}

/// 2. The policy is edited during the cut so that the rule no longer fires (its threshold raised from 5 to
/// 100) and the job reports a loss of 10: the write finds a newer generation, the brain judges the job
/// again under it, and the rule that no longer fires does nothing. Never suspended.
#[tokio::test]
async fn a_policy_edited_during_a_cut_so_its_rule_no_longer_fires_never_suspends() {
    let Some(seen) = cut("stale-edited", DuringCut::ThresholdRaised, "ActionAbandoned").await else { return };
    assert!(!seen.suspended && seen.intents.is_empty(), "suspended by an old generation: {:?}", seen.events);
    assert_eq!(count(&seen.events, "Suspended"), 0, "{:?}", seen.events);
    assert_eq!(
        notes(&seen, "ActionAbandoned"),
        vec![format!(
            "not suspended: policy {POLICY} changed (generation 1 → 2) and under it rule loss-high no longer fires as it did (rule loss-high)"
        )],
        "{:?}",
        seen.events
    );
    assert_eq!(seen.abandoned, vec![("policy_changed".to_string(), 1.0)]);
}

/// 3. An exception for the job is created during the cut: the write finds it holding the rule, so the job
/// is held, not suspended.
#[tokio::test]
async fn an_exception_created_during_a_cut_holds_the_job() {
    let Some(seen) = cut("stale-excepted", DuringCut::ExceptionCreated, "ActionAbandoned").await else {
        return;
    };
    assert!(!seen.suspended && seen.intents.is_empty(), "suspended despite the exception: {:?}", seen.events);
    assert_eq!(count(&seen.events, "Suspended"), 0, "{:?}", seen.events);
    let abandoned = notes(&seen, "ActionAbandoned");
    assert_eq!(abandoned.len(), 1, "{:?}", seen.events);
    assert!(
        abandoned[0].starts_with(&format!(
            "not suspended: exception eval-run holds rule nan-loss of policy {POLICY} until "
        )),
        "{abandoned:?}"
    );
    assert_eq!(seen.abandoned, vec![("excepted".to_string(), 1.0)]);
}

/// 4. The control: nothing changes during the cut; the NaN suspends the job once, as ever, with the two
/// extra reads at the write.
#[tokio::test]
async fn nothing_changed_during_a_cut_suspends_once() {
    let Some(seen) = cut("stale-control", DuringCut::Nothing, "Suspended").await else { return };
    assert!(seen.suspended && seen.intents.len() == 1, "{:?} {:?}", seen.intents, seen.events);
    assert_eq!(count(&seen.events, "Suspended"), 1, "{:?}", seen.events);
    assert_eq!(count(&seen.events, "ActionAbandoned"), 0, "{:?}", seen.events);
    assert!(seen.abandoned.is_empty(), "{:?}", seen.abandoned);
}
