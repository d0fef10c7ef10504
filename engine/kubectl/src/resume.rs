//! `resume` and `snooze`.
//!
//! Resuming goes through whatever owns the job's suspension: a job Kueue manages (it carries the
//! `kueue.x-k8s.io/queue-name` label) is resumed by re-activating its Workload (`spec.active: true`; Kueue
//! owns the TrainJob's `spec.suspend` and would undo a direct change), any other by `spec.suspend: false`.
//! Either way trainwarden's `suspended-by` mark is removed, and `--snooze` writes the snooze annotation the
//! controller honours. What the user may do is asked first (SelfSubjectAccessReview), so a refusal changes
//! nothing; the snooze is written before the job is resumed (the controller must see it before the job
//! runs again), and taken back when the resume itself fails.

use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use trainwarden_core::{PolicyDuration, Timestamp};
use trainwarden_kube::annotations::SUSPENDED_BY_ANNOTATION;
use trainwarden_kube::kueue::{KUEUE_QUEUE_LABEL, workload_of};
use trainwarden_kube::trainjob::{TRAINJOB_GROUP, trainjob_api};

use crate::cluster::{self, Cluster, api_error};
use crate::job::{SNOOZE_ANNOTATION, short_time, span};

/// The field manager of the plugin's writes (shown in managedFields).
const FIELD_MANAGER: &str = "kubectl-trainwarden";

/// A duration as policies write them: `30m`, `4h`, `1d`.
pub(crate) fn parse_duration(text: &str) -> Result<PolicyDuration, String> {
    let d: PolicyDuration = text.parse().map_err(|e| format!("{text:?} is not a duration: {e}"))?;
    if d.as_secs_f64() <= 0.0 {
        return Err(format!(
            "{text:?}: a snooze must be longer than zero (use `snooze JOB --clear` to end one)"
        ));
    }
    Ok(d)
}

fn until(now: Timestamp, d: PolicyDuration) -> Result<Timestamp, String> {
    jiff::SignedDuration::try_from_secs_f64(d.as_secs_f64())
        .ok()
        .and_then(|d| now.checked_add(d).ok())
        .ok_or_else(|| format!("{d} from now is out of range"))
}

fn merge(patch: &Value) -> Patch<&Value> {
    Patch::Merge(patch)
}

/// The Workload Kueue made for the job, at the newest version this Kueue serves.
async fn workload_of_job(
    cluster: &Cluster,
    job: &DynamicObject,
) -> Result<(Api<DynamicObject>, DynamicObject), String> {
    let ns = job.namespace().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let Some((api, items)) = cluster::workloads(cluster, &ns).await? else {
        return Err(format!(
            "the job carries {KUEUE_QUEUE_LABEL}, but this cluster serves no Kueue Workload API; nothing was changed"
        ));
    };
    match items.into_iter().find(|w| workload_of(w, &uid)) {
        Some(w) => Ok((api, w)),
        None => Err(format!(
            "TrainJob {ns}/{} carries {KUEUE_QUEUE_LABEL} but Kueue has no Workload for it (yet); nothing was changed",
            job.name_any()
        )),
    }
}

pub(crate) async fn resume(
    cluster: &Cluster,
    name: &str,
    snooze: Option<PolicyDuration>,
    now: Timestamp,
) -> Result<(), String> {
    let ns = cluster.namespace.clone();
    cluster::may(cluster, "patch", TRAINJOB_GROUP, "trainjobs", &ns, Some(name)).await?;
    let job = cluster::trainjob(cluster, name).await?;
    let jobs = trainjob_api(cluster.client.clone(), Some(&ns));
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
    let snooze_until = snooze.map(|d| until(now, d)).transpose()?;
    let had_mark = job.annotations().contains_key(SUSPENDED_BY_ANNOTATION);
    let suspended = job.data.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
    // The mark is written only where trainwarden set spec.suspend itself (also for a Kueue job when the
    // controller runs with --kueue=false): then spec.suspend is what to undo.
    let through_kueue = job.labels().contains_key(KUEUE_QUEUE_LABEL) && !had_mark;
    let mut done = Vec::new();

    if through_kueue {
        let (workloads, workload) = workload_of_job(cluster, &job).await?;
        let wname = workload.name_any();
        cluster::may(cluster, "patch", "kueue.x-k8s.io", "workloads", &ns, Some(&wname)).await?;
        let active = workload.data.pointer("/spec/active").and_then(Value::as_bool) != Some(false);
        // The snooze first: the controller sees it before Kueue lets the job run; put back as it was if the
        // Workload cannot be re-activated.
        let previous = job.annotations().get(SNOOZE_ANNOTATION).cloned();
        if let Some(t) = snooze_until {
            let patch = json!({"metadata": {"annotations": { SNOOZE_ANNOTATION: t.to_string() }}});
            jobs.patch(name, &params, &merge(&patch))
                .await
                .map_err(|e| api_error(&format!("snoozing TrainJob {ns}/{name}"), &e))?;
        }
        if active {
            done.push(format!("its Kueue Workload {wname} is already active"));
        } else if let Err(e) =
            workloads.patch(&wname, &params, &merge(&json!({"spec": {"active": true}}))).await
        {
            let mut message = api_error(&format!("re-activating Kueue Workload {ns}/{wname}"), &e);
            if snooze_until.is_some() {
                let undo = json!({"metadata": {"annotations": { SNOOZE_ANNOTATION: previous }}});
                match jobs.patch(name, &params, &merge(&undo)).await {
                    Ok(_) => message.push_str("; the snooze was taken back, nothing changed"),
                    Err(u) => message.push_str(&format!(
                        "; taking the snooze back failed too ({}): remove it with `kubectl trainwarden snooze {name} --clear -n {ns}`",
                        api_error("annotating", &u)
                    )),
                }
            }
            return Err(message);
        } else {
            done.push(format!(
                "Kueue Workload {wname} re-activated (spec.active: true); Kueue admits the job again when its queue has room"
            ));
        }
    } else {
        let mut annotations = json!({ SUSPENDED_BY_ANNOTATION: null });
        if let Some(t) = snooze_until {
            annotations[SNOOZE_ANNOTATION] = json!(t.to_string());
        }
        // One write: the job runs again, unmarked and (when asked) snoozed, or nothing changes.
        let mut patch = json!({"metadata": {"annotations": annotations}});
        if suspended {
            patch["spec"] = json!({"suspend": false});
        }
        if suspended || had_mark || snooze_until.is_some() {
            jobs.patch(name, &params, &merge(&patch))
                .await
                .map_err(|e| api_error(&format!("resuming TrainJob {ns}/{name}"), &e))?;
        }
        done.push(if suspended {
            "spec.suspend set to false".to_string()
        } else {
            "it was not suspended".to_string()
        });
        if had_mark {
            done.push(format!("{SUSPENDED_BY_ANNOTATION} removed"));
        }
    }
    if let (Some(t), Some(d)) = (snooze_until, snooze) {
        done.push(format!("policies snoozed for it until {} ({})", short_time(t), span(d.as_secs_f64())));
    }
    crate::output::write(format!("TrainJob {ns}/{name}: {}\n", done.join("; ")).as_bytes());
    Ok(())
}

pub(crate) async fn snooze(
    cluster: &Cluster,
    name: &str,
    duration: Option<PolicyDuration>,
    now: Timestamp,
) -> Result<(), String> {
    let ns = cluster.namespace.clone();
    cluster::may(cluster, "patch", TRAINJOB_GROUP, "trainjobs", &ns, Some(name)).await?;
    cluster::trainjob(cluster, name).await?;
    let jobs = trainjob_api(cluster.client.clone(), Some(&ns));
    let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
    let value = match duration {
        Some(d) => json!(until(now, d)?.to_string()),
        None => Value::Null,
    };
    jobs.patch(name, &params, &merge(&json!({"metadata": {"annotations": { SNOOZE_ANNOTATION: value }}})))
        .await
        .map_err(|e| api_error(&format!("annotating TrainJob {ns}/{name}"), &e))?;
    match duration {
        Some(d) => crate::output::write(
            format!(
                "TrainJob {ns}/{name}: policies snoozed until {} ({}); its rules are still evaluated, their actions wait (the controller caps a snooze's length)\n",
                short_time(until(now, d)?),
                span(d.as_secs_f64())
            )
            .as_bytes(),
        ),
        None => crate::output::write(format!("TrainJob {ns}/{name}: snooze ended\n").as_bytes()),
    }
    Ok(())
}
