//! The controller against a real kube-apiserver + etcd: each test runs its own controller (scoped to the
//! test's namespace, or to its TrainJobs by label) in-process, writes TrainJob progress through the status
//! subresource exactly as Kubeflow Trainer's status server does (server-side apply by `trainer-status`), and
//! checks what the controller did to the TrainJob, the Kueue Workload, the Events and the policy status.

use trainwarden_testkit::apiserver as support;
use trainwarden_testkit::http::http_get;
use trainwarden_testkit::setup;

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use trainwarden_controller::executor::workload_resource;
use trainwarden_controller::{ControllerConfig, LAST_ACTION_ANNOTATION};
use trainwarden_core::TRAINER_STATUS_ANNOTATION;
use trainwarden_kube::trainjob::trainjob_api;

use trainwarden_e2e::controller::*;

mod holds;
mod kueue;
mod operations;

// Tests -----------------------------------------------------------------------------------------------------

/// A plateau: the loss stops improving; after `for`, the Enforce policy suspends the job exactly once, with
/// an Event and a status entry. The same under Audit changes nothing on the TrainJob but reports it.
#[tokio::test]
async fn a_plateau_is_suspended_once_in_enforce_and_only_reported_in_audit() {
    let ctx = setup!("controller_plateau");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    let rule = "    - {name: plateau, uses: plateau, with: {metric: loss, window: 4, minDelta: 0.01}, for: 2s, actions: [{suspend: {}}]}\n";
    apply_policy(
        c,
        ns,
        &policy("enforce", "Enforce", rule)
            .replace("  rules:", "  selector: {matchLabels: {mode: enforce}}\n  rules:"),
    )
    .await;
    apply_policy(
        c,
        ns,
        &policy("audit", "Audit", rule)
            .replace("  rules:", "  selector: {matchLabels: {mode: audit}}\n  rules:"),
    )
    .await;
    create_trainjob(c, ns, "enforced", &[("mode", "enforce")]).await;
    create_trainjob(c, ns, "audited", &[("mode", "audit")]).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "enforce", 1).await;
    wait_until_watching(c, ns, "audit", 1).await;

    // Improving, then flat (values differ, but by less than minDelta).
    let losses = ["2.0", "1.5", "1.0", "0.80", "0.801", "0.799", "0.802", "0.800", "0.803"];
    for (i, loss) in losses.iter().enumerate() {
        let at = seconds_ago(losses.len() as i64 - i as i64);
        report(c, ns, "enforced", at, loss, 10 + i as i64).await;
        report(c, ns, "audited", at, loss, 10 + i as i64).await;
    }
    let enforced = eventually("the plateau suspension", Duration::from_secs(20), || async {
        let j = job(c, ns, "enforced").await;
        suspended(&j).then_some(j)
    })
    .await;
    assert!(enforced.annotations()[LAST_ACTION_ANNOTATION].contains("\"rule\":\"plateau\""));
    assert!(enforced.annotations()["trainwarden.dev/suspended-by"].contains("enforce"));
    let status = eventually("the enforce policy's status", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "enforce").await;
        s.last_action.is_some().then_some(s)
    })
    .await;
    assert_eq!(status.last_action.as_deref(), Some(format!("suspend {ns}/enforced (plateau)").as_str()));
    assert_eq!(status.matched_jobs, Some(1));
    assert_eq!(status.jobs[0].firing, vec!["plateau".to_string()]);
    assert!(status.gpu_hours_saved.unwrap_or(0.0) > 0.0, "{status:?}");
    assert_eq!(status.action_counts.get("suspend/done"), Some(&1));

    // Audit: reported in status and Events, the TrainJob untouched (no trainwarden field manager at all).
    let audit = eventually("the audit report", Duration::from_secs(10), || async {
        let s = policy_status(c, ns, "audit").await;
        s.last_action.is_some().then_some(s)
    })
    .await;
    assert_eq!(audit.last_action.as_deref(), Some(format!("would suspend {ns}/audited (plateau)").as_str()));
    assert!(audit.gpu_hours_would_save.unwrap_or(0.0) > 0.0 && audit.gpu_hours_saved.is_none(), "{audit:?}");
    let audited = job(c, ns, "audited").await;
    assert!(!suspended(&audited));
    assert!(
        !audited.annotations().keys().any(|k| k.starts_with("trainwarden.dev/")),
        "{:?}",
        audited.annotations()
    );
    assert!(
        !audited
            .managed_fields()
            .iter()
            .any(|m| m.manager.as_deref() == Some(trainwarden_kube::FIELD_MANAGER)),
        "Audit mode wrote to the TrainJob"
    );

    // The firing's Events, once written (after the suspension the test saw above).
    events_once_there(c, ns, "enforced", "Suspended", 1).await;
    events_once_there(c, ns, "enforced", "RuleFiring", 1).await;
    events_once_there(c, ns, "audited", "WouldSuspend", 1).await;
    events_once_there(c, ns, "audited", "RuleFiring", 1).await;

    // More flat reports change nothing: still one suspension, one Event each, once the controller has
    // evaluated them (the status shows their progress).
    report(c, ns, "enforced", seconds_ago(0), "0.801", 20).await;
    report(c, ns, "audited", seconds_ago(0), "0.801", 20).await;
    wait_until_evaluated(c, ns, "enforce", "enforced", 20).await;
    wait_until_evaluated(c, ns, "audit", "audited", 20).await;
    let e = events(c, ns, "enforced").await;
    assert_eq!(count(&e, "Suspended"), 1, "{e:?}");
    assert_eq!(count(&e, "RuleFiring"), 1, "{e:?}");
    let a = events(c, ns, "audited").await;
    assert_eq!(count(&a, "WouldSuspend"), 1, "{a:?}");
    assert!(a.iter().any(|(r, note, _)| r == "RuleFiring" && note.contains("has not improved")), "{a:?}");
    controller.stop().await;
}

/// Two policies firing on one report of one TrainJob record two Events, each naming its own policy: the
/// Events name the job by the uid its report carried, and kube's Recorder would otherwise merge the second
/// into the first (same reason, same object), keeping only the first note.
#[tokio::test]
async fn two_firings_on_one_report_are_two_events_each_with_its_own_note() {
    let ctx = setup!("controller_two_firings");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(c, ns, &policy("nan-a", "Audit", NAN_RULE)).await;
    apply_policy(c, ns, &policy("nan-b", "Audit", NAN_RULE)).await;
    create_trainjob(c, ns, "twice", &[]).await;
    let controller = start(c, config_for(ns));
    wait_until_watching(c, ns, "nan-a", 1).await;
    wait_until_watching(c, ns, "nan-b", 1).await;
    report(c, ns, "twice", seconds_ago(1), "nan", 10).await;
    events_once_there(c, ns, "twice", "RuleFiring", 2).await;
    let e = events(c, ns, "twice").await;
    for p in ["nan-a", "nan-b"] {
        let named = format!("ProgressPolicy {ns}/{p} ");
        assert!(e.iter().any(|(r, note, _)| r == "RuleFiring" && note.contains(&named)), "{named}: {e:?}");
    }
    controller.stop().await;
}

/// A job whose status stops updating is suspended by a stall rule within 1 s of the deadline, with no
/// further update arriving (a timer, not a poll).
#[tokio::test]
async fn a_stalled_job_is_suspended_within_a_second_of_its_deadline() {
    let ctx = setup!("controller_stall");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(
        c,
        ns,
        &policy(
            "stall",
            "Enforce",
            "    - {name: stalled, uses: stalled, with: {after: 4s}, actions: [{suspend: {}}]}\n",
        ),
    )
    .await;
    create_trainjob(c, ns, "hung", &[]).await;
    let controller = start(c, config_for(ns));
    let last = seconds_ago(0);
    report(c, ns, "hung", last, "0.5", 40).await;
    let deadline = Timestamp::from_second(last.as_second() + 4).unwrap();
    let j = eventually("the stall suspension", Duration::from_secs(15), || async {
        let j = job(c, ns, "hung").await;
        suspended(&j).then_some(j)
    })
    .await;
    let acted = action_time(&j).expect("last-action time");
    let written = write_time(&j).expect("trainwarden's managedFields entry");
    let lateness = acted.duration_since(deadline).as_secs_f64();
    eprintln!(
        "stall deadline {deadline}, fired at {acted} ({lateness:.3}s late), written at {written} (API server, whole seconds)"
    );
    assert!((0.0..=1.0).contains(&lateness), "fired {lateness:.3}s after the deadline");
    // The API server's own record of the write (whole seconds), not when this test got to look at it.
    assert!(written.duration_since(deadline).as_secs_f64() <= 2.0, "the write landed late: {written}");
    let e = events_once_there(c, ns, "hung", "Suspended", 1).await;
    assert!(e.iter().any(|(r, note, _)| r == "Suspended" && note.contains("no progress sample")), "{e:?}");
    controller.stop().await;
}

/// NaN loss in either source suspends at once: upstream's "nan" string and RHOAI's null.
#[tokio::test]
async fn nan_loss_in_either_source_suspends_at_once() {
    let ctx = setup!("controller_nan");
    let (c, ns) = (&ctx.client, ctx.ns.as_str());
    apply_policy(c, ns, &policy("nan", "Enforce", NAN_RULE)).await;
    create_trainjob(c, ns, "upstream", &[]).await;
    create_trainjob(c, ns, "rhoai", &[]).await;
    let controller = start(c, config_for(ns));
    report(c, ns, "upstream", seconds_ago(2), "0.9", 10).await;
    report(c, ns, "upstream", seconds_ago(1), "nan", 11).await;
    let annotation =
        support::fixture("fixtures/kubeflow/payloads/rhoai-trainerStatus-annotation.nan-loss.json")
            .replace("2026-04-10T09:47:30Z", &seconds_ago(1).strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    let patch = json!({"metadata": {"annotations": {TRAINER_STATUS_ANNOTATION: annotation.trim()}}});
    trainjob_api(c.clone(), Some(ns))
        .patch("rhoai", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("RHOAI poll");
    for name in ["upstream", "rhoai"] {
        eventually(&format!("{name} suspended"), Duration::from_secs(10), || async {
            suspended(&job(c, ns, name).await).then_some(())
        })
        .await;
        let e = events_once_there(c, ns, name, "Suspended", 1).await;
        assert!(
            e.iter().any(|(r, note, _)| r == "Suspended" && note.contains("loss is NaN")),
            "{name}: {e:?}"
        );
    }
    controller.stop().await;
}
