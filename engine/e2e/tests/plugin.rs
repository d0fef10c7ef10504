//! `kubectl trainwarden` against the real kube-apiserver + etcd, reading what the real controller (run
//! in-process) published: `get`'s golden output for jobs in known states, `explain` for pending, firing,
//! not-selected and window-closed cases, `resume` of a plain and of a Kueue job, `snooze`, and an RBAC
//! refusal that changes nothing.
//!
//! Run with `tests/k8s/with-control-plane.sh cargo test -p trainwarden-e2e --test plugin`. Set
//! `TRAINWARDEN_BLESS=1` to rewrite the golden file after an intended change of the output.

use trainwarden_testkit::apiserver as support;
use trainwarden_testkit::objects::workload;
use trainwarden_testkit::setup;

use trainwarden_e2e::plugin::{assert_golden, plugin};

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use trainwarden_controller::ControllerConfig;
use trainwarden_e2e::controller::*;
use trainwarden_kube::VERDICT_ANNOTATION;
use trainwarden_kube::kueue::workload_resource_version;
use trainwarden_kube::trainjob::trainjob_api;

async fn annotate(c: &Client, ns: &str, name: &str, key: &str, value: &str) {
    trainjob_api(c.clone(), Some(ns))
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .expect("annotate");
}

const GUARD: &str = "    - {name: huge, when: 'metric(\"loss\") > 9.0', actions: [{suspend: {}}]}\n    - {name: high, when: 'metric(\"loss\") > 5.0', for: 1h, actions: [{suspend: {}}]}\n";
const WATCH: &str = "    - {name: over, when: 'metric(\"loss\") > 7.0', actions: [{suspend: {}}]}\n";
const NIGHTS: &str = "    - {name: silent, uses: stalled, with: {after: 30m}, actions: [{suspend: {}}]}\n";

/// A fleet in known states, judged by the real controller: healthy, pending, suspended, exempt, snoozed and
/// not selected. `get` prints the same table every run.
#[tokio::test]
async fn get_shows_every_job_in_its_state_and_explain_says_why() {
    let ctx = setup!("plugin_get");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let team = |p: String| p.replace("  rules:", "  selector: {matchLabels: {team: ml}}\n  rules:");
    apply_policy(c, ns, &team(policy("guard", "Enforce", GUARD))).await;
    apply_policy(c, ns, &team(policy("watch", "Audit", WATCH))).await;
    // Open on Saturdays only (UTC).
    let nights = policy("nights", "Enforce", NIGHTS)
        .replace("  rules:", "  selector: {matchLabels: {team: ml}}\n  activeWindows:\n    - {start: \"0 0 * * SAT\", duration: 24h}\n  rules:");
    apply_policy(c, ns, &nights).await;

    for (name, team) in [
        ("a-healthy", "ml"),
        ("b-pending", "ml"),
        ("c-suspended", "ml"),
        ("d-exempt", "ml"),
        ("e-snoozed", "ml"),
        ("f-other-team", "cv"),
    ] {
        create_trainjob(c, ns, name, &[("team", team)]).await;
    }
    annotate(c, ns, "d-exempt", "trainwarden.dev/exempt", "true").await;
    annotate(c, ns, "e-snoozed", "trainwarden.dev/snooze-until", "2099-01-01T00:00:00Z").await;
    let config = ControllerConfig { history_interval: Duration::from_secs(0), ..config_for(ns) };
    let controller = start(c, config);
    wait_until_watching(c, ns, "guard", 4).await;

    for (i, loss) in ["1.5", "1.3", "1.2"].iter().enumerate() {
        report(c, ns, "a-healthy", seconds_ago(3 - i as i64), loss, 28 + i as i64).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    report(c, ns, "b-pending", seconds_ago(1), "6.0", 40).await;
    report(c, ns, "c-suspended", seconds_ago(1), "10.0", 55).await;
    report(c, ns, "d-exempt", seconds_ago(1), "10.0", 60).await;
    report(c, ns, "e-snoozed", seconds_ago(1), "1.0", 70).await;
    report(c, ns, "f-other-team", seconds_ago(1), "10.0", 80).await;

    eventually("c-suspended suspended", Duration::from_secs(20), || async {
        suspended(&job(c, ns, "c-suspended").await).then_some(())
    })
    .await;
    eventually("b-pending's verdict", Duration::from_secs(20), || async {
        job(c, ns, "b-pending")
            .await
            .annotations()
            .get(VERDICT_ANNOTATION)
            .filter(|v| v.contains("high"))
            .map(|_| ())
    })
    .await;
    // The trend comes from the history checkpoint: three reports in it, falling.
    eventually("a-healthy's falling loss from its history", Duration::from_secs(20), || async {
        let (ok, table, _) = plugin(&ctx, &["get", "a-healthy"]);
        (ok && table.contains("1.2 ↓")).then_some(())
    })
    .await;
    eventually("the Audit policy lists c-suspended as firing", Duration::from_secs(20), || async {
        let s = policy_status(c, ns, "watch").await;
        s.jobs.iter().any(|j| j.name.ends_with("/c-suspended") && j.firing == ["over"]).then_some(())
    })
    .await;
    // The Enforce rules in the table come from c-suspended's verdict annotation, written after its suspension
    // and its firing's checkpoint: the suspension being seen does not mean the verdict is there yet.
    eventually("c-suspended's verdict", Duration::from_secs(20), || async {
        job(c, ns, "c-suspended")
            .await
            .annotations()
            .get(VERDICT_ANNOTATION)
            .filter(|v| v.contains("huge") && v.contains("high"))
            .map(|_| ())
    })
    .await;
    controller.stop().await;

    let (ok, table, err) = plugin(&ctx, &["get"]);
    assert!(ok, "{err}");
    eprintln!("{table}");
    let saved = regex_lite_saved(&table);
    assert!((7.5..=8.01).contains(&saved), "8 GPUs × the hour left: {saved}\n{table}");
    let dollars =
        table.split("GPU-h ($").nth(1).and_then(|r| r.split(')').next()).unwrap_or("none").to_string();
    // The snooze ends where the controller's cap (24h after it first saw the annotation) puts it, not in 2099.
    let snoozed = table.lines().find(|l| l.starts_with("e-snoozed")).expect("e-snoozed's row");
    let until_text =
        snoozed.split("snoozed until ").nth(1).and_then(|r| r.get(..17)).expect("snoozed until T");
    let until: jiff::Timestamp =
        format!("{}:00Z", until_text.replace(' ', "T").trim_end_matches('Z')).parse().unwrap();
    let hours = until.duration_since(jiff::Timestamp::now()).as_secs_f64() / 3600.0;
    assert!((23.9..=24.0).contains(&hours), "capped at 24h: {hours}h\n{table}");
    let normalized = table
        .replace(&format!("{saved} GPU-h (${dollars})"), "N GPU-h ($M)")
        .replace(&format!("snoozed until {until_text}"), "snoozed until <now + 24h>      ");
    assert_golden("get.txt", &normalized);

    let (ok, json_out, err) = plugin(&ctx, &["get", "c-suspended", "-o", "json"]);
    assert!(ok, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(rows[0]["verdict"]["state"], "suspendedBy");
    assert_eq!(rows[0]["verdict"]["rule"], "huge");
    assert_eq!(rows[0]["suspended"], true);

    // explain: pending, firing, not selected, window closed.
    let (ok, pending, err) = plugin(&ctx, &["explain", "b-pending"]);
    assert!(ok, "{err}");
    for want in [
        "verdict: pending guard/high",
        "rule high: pending since",
        "when `metric(\"loss\") > 5.0`",
        "for 1h; actions: suspend (Enforce)",
        "judged here now, from the job's report and history checkpoint: its condition holds",
        "guard/high fires at",
        "rule huge: inactive",
    ] {
        assert!(pending.replace(ns, "NS").contains(want), "{want:?} not in:\n{pending}");
    }
    let (ok, firing, err) = plugin(&ctx, &["explain", "c-suspended"]);
    assert!(ok, "{err}");
    for want in [
        "verdict: suspended by guard/huge",
        "rule huge: firing since",
        "last action: suspend by ProgressPolicy NS/guard (huge)",
        "ProgressPolicy NS/watch (Audit): selects this job",
        "rule over: firing (Audit, as the policy status lists it)",
        "the job is suspended: its rules wait until it runs again (`kubectl trainwarden resume c-suspended -n NS`",
    ] {
        assert!(firing.replace(ns, "NS").contains(want), "{want:?} not in:\n{firing}");
    }
    let (ok, other, err) = plugin(&ctx, &["explain", "f-other-team"]);
    assert!(ok, "{err}");
    assert!(
        other.contains("does not select this job: its selector {\"matchLabels\":{\"team\":\"ml\"}} does not match the job's labels {team=cv}"),
        "{other}"
    );
    // A Tuesday: the Saturday window is closed and says when it opens.
    let (ok, closed, err) = plugin(&ctx, &["--now", "2026-12-01T12:00:00Z", "explain", "a-healthy"]);
    assert!(ok, "{err}");
    assert!(
        closed.contains("active window: closed now, the rules do not run; opens 2026-12-05 00:00Z"),
        "{closed}"
    );
    assert!(!closed.contains("nights/silent fires if"), "a closed window sets no stall deadline: {closed}");
    let (ok, open, err) = plugin(&ctx, &["--now", "2026-12-05T12:00:00Z", "explain", "a-healthy"]);
    assert!(ok, "{err}");
    assert!(open.contains("active window: open now until 2026-12-06 00:00Z"), "{open}");
}

/// The SAVED figure of c-suspended's row.
fn regex_lite_saved(table: &str) -> f64 {
    let line = table.lines().find(|l| l.starts_with("c-suspended")).expect("c-suspended's row");
    let before = line.split(" GPU-h").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("a number in {line}"))
}

/// resume of a job trainwarden suspended: `spec.suspend` back to false, the mark gone, snoozed; a Kueue job
/// through its Workload; an RBAC refusal changes nothing.
#[tokio::test]
async fn resume_goes_through_whatever_owns_the_suspension() {
    let ctx = setup!("plugin_resume");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(c, ns, &policy("guard", "Enforce", GUARD)).await;
    create_trainjob(c, ns, "stopped", &[]).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "guard", 1).await;
    report(c, ns, "stopped", seconds_ago(1), "10.0", 50).await;
    eventually("suspended", Duration::from_secs(20), || async {
        suspended(&job(c, ns, "stopped").await).then_some(())
    })
    .await;
    controller.stop().await;

    // Someone without the right may not: nothing changes.
    let (ok, _, err) = plugin(&ctx, &["--as", "system:serviceaccount:default:nobody", "resume", "stopped"]);
    assert!(!ok);
    assert!(
        err.contains("RBAC does not allow you to patch trainjobs.trainer.kubeflow.org")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(suspended(&job(c, ns, "stopped").await));

    let before = jiff::Timestamp::now();
    let (ok, out, err) = plugin(&ctx, &["resume", "stopped", "--snooze", "4h"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("spec.suspend set to false") && out.contains("trainwarden.dev/suspended-by removed"),
        "{out}"
    );
    let j = job(c, ns, "stopped").await;
    assert!(!suspended(&j));
    assert!(!j.annotations().contains_key("trainwarden.dev/suspended-by"));
    let until: jiff::Timestamp = j.annotations()["trainwarden.dev/snooze-until"].parse().unwrap();
    let hours = until.duration_since(before).as_secs_f64() / 3600.0;
    assert!((3.99..4.01).contains(&hours), "{hours}");

    let (ok, out, err) = plugin(&ctx, &["snooze", "stopped", "--clear"]);
    assert!(ok && out.contains("snooze ended"), "{out}{err}");
    assert!(!job(c, ns, "stopped").await.annotations().contains_key("trainwarden.dev/snooze-until"));
    let (ok, _, err) = plugin(&ctx, &["snooze", "stopped", "soon"]);
    assert!(!ok && err.contains("\"soon\" is not a duration"), "{err}");

    // A Kueue job: Kueue owns spec.suspend, the Workload's spec.active is what trainwarden turned off.
    support::install_workload_crd(c).await;
    let queued = create_trainjob(c, ns, "queued", &[("kueue.x-k8s.io/queue-name", "team-a")]).await;
    let workloads: Api<DynamicObject> =
        Api::namespaced_with(c.clone(), ns, &workload_resource_version("v1beta2"));
    let workload = workload("v1beta2", ns, "trainjob-queued-1a2b3", "team-a")
        .owned_by("queued", &queued.uid().unwrap())
        .active(false)
        .build();
    let workload: DynamicObject = serde_json::from_value(workload).unwrap();
    workloads.create(&PostParams::default(), &workload).await.expect("create Workload");
    // Someone who may patch TrainJobs but not Workloads: refused before anything is written, no snooze left.
    for yaml in [
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: trainjobs-only, namespace: {ns}}}\nrules:\n\
             - {{apiGroups: [trainer.kubeflow.org], resources: [trainjobs], verbs: [get, list, patch]}}\n\
             - {{apiGroups: [kueue.x-k8s.io], resources: [workloads], verbs: [list]}}\n"
        ),
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: trainjobs-only, namespace: {ns}}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: trainjobs-only}}\n\
             subjects: [{{kind: ServiceAccount, name: owner, namespace: {ns}}}]\n"
        ),
    ] {
        let path = std::env::temp_dir().join(format!("{ns}-rbac.yaml"));
        std::fs::write(&path, yaml).unwrap();
        let out = ctx.kubectl(&["apply", "-f", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let owner = format!("system:serviceaccount:{ns}:owner");
    let (ok, _, err) = plugin(&ctx, &["--as", &owner, "resume", "queued", "--snooze", "1h"]);
    assert!(!ok);
    assert!(
        err.contains("RBAC does not allow you to patch workloads.kueue.x-k8s.io")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(
        !job(c, ns, "queued").await.annotations().contains_key("trainwarden.dev/snooze-until"),
        "half-applied"
    );
    let w = workloads.get("trainjob-queued-1a2b3").await.unwrap();
    assert_eq!(w.data.pointer("/spec/active"), Some(&json!(false)));

    let (ok, out, err) = plugin(&ctx, &["resume", "queued"]);
    assert!(ok, "{err}");
    assert!(out.contains("Kueue Workload trainjob-queued-1a2b3 re-activated"), "{out}");
    let w = workloads.get("trainjob-queued-1a2b3").await.unwrap();
    assert_eq!(w.data.pointer("/spec/active"), Some(&json!(true)));
    assert!(!suspended(&job(c, ns, "queued").await), "the TrainJob itself is left to Kueue");
    // Kueue has not admitted it yet (none runs here): its TrainJob is still suspended, and waits in its queue.
    trainjob_api(c.clone(), Some(ns))
        .patch("queued", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}})))
        .await
        .unwrap();
    let (ok, out, err) = plugin(&ctx, &["get", "queued", "-o", "json"]);
    assert!(ok, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["verdict"], json!({"state": "queued", "queue": "team-a"}), "{out}");
}
