//! `get`: one line per TrainJob.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;
use trainwarden_core::{JobPhase, RuleState, Timestamp};

use crate::Output;
use crate::cluster::{self, Cluster};
use crate::job::{JobRow, Judge, num, span, sparkline, trend};

/// What `get` was asked.
pub(crate) struct Request {
    pub(crate) names: Vec<String>,
    pub(crate) all_namespaces: bool,
    pub(crate) selector: Option<String>,
    pub(crate) output: Output,
    /// `--now` was given: a watch keeps that instant.
    pub(crate) fixed_now: bool,
}

pub(crate) async fn run(
    cluster: &Cluster,
    request: &Request,
    now: Timestamp,
    watch: bool,
) -> Result<(), String> {
    loop {
        let now = if request.fixed_now { now } else { Timestamp::now() };
        let text = match render(cluster, request, now).await {
            Ok(text) => text,
            // Watching, one failed read (the API server restarting, a timeout) is said and tried again.
            Err(e) if watch => format!("error: {e} (trying again in 2 s)\n"),
            Err(e) => return Err(e),
        };
        let mut frame = String::new();
        if watch {
            // Home and clear on a terminal, as `watch(1)` does; a pipe gets the frames one after the other.
            if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                frame += "\x1b[H\x1b[2J";
            } else {
                frame += &format!("--- {now}\n");
            }
        }
        frame += &text;
        // A closed pipe ends a watch too (quietly); it does not redraw for nobody.
        crate::output::write(frame.as_bytes());
        if !watch {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// Reads the jobs (and what judges them) and renders them.
pub(crate) async fn render(cluster: &Cluster, request: &Request, now: Timestamp) -> Result<String, String> {
    let mut jobs = cluster::trainjobs(cluster, request.all_namespaces, request.selector.as_deref()).await?;
    if !request.names.is_empty() {
        let missing: Vec<&String> =
            request.names.iter().filter(|n| !jobs.iter().any(|j| j.name_any() == **n)).collect();
        if !missing.is_empty() {
            let list = missing.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ");
            let place = if request.all_namespaces {
                "any namespace".to_string()
            } else {
                format!("namespace {}", cluster.namespace)
            };
            return Err(format!("TrainJob not found in {place}: {list}"));
        }
        jobs.retain(|j| request.names.contains(&j.name_any()));
    }
    let policies =
        cluster::policies(cluster, (!request.all_namespaces).then_some(cluster.namespace.as_str())).await;
    let namespaces: BTreeSet<String> = jobs.iter().filter_map(ResourceExt::namespace).collect();
    let kueue_jobs: Vec<&kube::api::DynamicObject> =
        jobs.iter().filter(|j| j.labels().contains_key(trainwarden_kube::kueue::KUEUE_QUEUE_LABEL)).collect();
    let workloads = cluster::workload_activity(cluster, &kueue_jobs).await;
    let labels = cluster::namespace_labels(cluster, namespaces).await;
    let mut judge = Judge::new(&policies.documents, &labels, now);
    let rows: Vec<JobRow> =
        jobs.iter().map(|j| JobRow::read(j, &mut judge, &policies, &workloads, now)).collect();
    let mut out = match request.output {
        Output::Json => {
            serde_json::to_string_pretty(&rows.iter().map(|r| json_row(r, now)).collect::<Vec<_>>())
                .map_err(|e| e.to_string())?
                + "\n"
        }
        Output::Yaml => serde_saphyr::to_string(&rows.iter().map(|r| json_row(r, now)).collect::<Vec<_>>())
            .map_err(|e| e.to_string())?,
        Output::Table | Output::Wide => {
            table(&rows, request.all_namespaces, request.output == Output::Wide, now)
        }
    };
    if matches!(request.output, Output::Table | Output::Wide) {
        if rows.is_empty() {
            out = match request.all_namespaces {
                true => "No TrainJobs found.\n".into(),
                false => format!("No TrainJobs found in namespace {}.\n", cluster.namespace),
            };
        }
        for problem in &policies.problems {
            out.push_str(&format!("warning: {problem}\n"));
        }
        for row in &rows {
            for problem in [&row.unreadable, &row.verdict_problem, &row.history_problem, &row.snooze_problem]
                .into_iter()
                .flatten()
            {
                out.push_str(&format!("warning: {}: {problem}\n", row.key));
            }
        }
        for (policy, _) in &judge.invalid {
            out.push_str(&format!(
                "warning: policy {policy} does not compile; see `kubectl get` of it for the errors\n"
            ));
        }
    }
    Ok(out)
}

/// Rules by policy: `ml/stall: silent (firing), plateau (pending)`.
fn rules(row: &JobRow) -> String {
    let mut by_policy: Vec<(String, Vec<String>)> = Vec::new();
    for r in &row.verdict.rules {
        let state = if r.state == RuleState::Firing { "firing" } else { "pending" };
        let entry = format!("{} ({state})", r.rule);
        let policy = row.short(&r.policy_name());
        match by_policy.iter_mut().find(|(p, _)| *p == policy) {
            Some((_, rules)) => rules.push(entry),
            None => by_policy.push((policy, vec![entry])),
        }
    }
    if by_policy.is_empty() {
        return "-".into();
    }
    by_policy.iter().map(|(p, rules)| format!("{p}: {}", rules.join(", "))).collect::<Vec<_>>().join("; ")
}

fn saved(row: &JobRow) -> String {
    let by_trainwarden = matches!(row.state, crate::job::Verdicts::SuspendedBy { .. });
    let Some(a) = row.last_action.as_ref().filter(|a| a.action == "suspend" && by_trainwarden) else {
        return "-".into();
    };
    match (a.gpu_hours, a.dollars) {
        (Some(h), Some(d)) => format!("{} GPU-h ({})", trainwarden_core::fmt_gpu_hours(h), dollars(d)),
        (Some(h), None) => format!("{} GPU-h", trainwarden_core::fmt_gpu_hours(h)),
        _ => "-".into(),
    }
}

/// Whole dollars, as tables print money: `$1,804` ([`trainwarden_core::fmt_money`]).
fn dollars(d: f64) -> String {
    trainwarden_core::fmt_money(Some(d), trainwarden_core::Cents::Rounded)
}

fn progress(row: &JobRow) -> String {
    row.sample().and_then(|s| s.progress_percent).map_or("-".into(), |p| format!("{}%", num(p)))
}

fn eta(row: &JobRow) -> String {
    let running = row.snapshot.as_ref().is_some_and(|s| s.phase == JobPhase::Running) && !row.suspended;
    match row.sample().and_then(|s| s.eta_seconds) {
        Some(e) if running => span(e),
        _ => "-".into(),
    }
}

fn step(row: &JobRow) -> String {
    let Some(s) = row.sample() else { return "-".into() };
    match (s.current_step, s.total_steps) {
        (Some(c), Some(t)) => format!("{}/{}", num(c), num(t)),
        (Some(c), None) => num(c),
        _ => "-".into(),
    }
}

fn loss(row: &JobRow) -> String {
    match row.metric("loss") {
        Some(v) => {
            let arrow = trend(&row.loss);
            if arrow.is_empty() { num(v) } else { format!("{} {arrow}", num(v)) }
        }
        None => "-".into(),
    }
}

fn table(rows: &[JobRow], all_namespaces: bool, wide: bool, now: Timestamp) -> String {
    let mut header = vec![];
    if all_namespaces {
        header.push("NAMESPACE");
    }
    header.extend(["NAME", "PROGRESS", "ETA", "STEP", "LOSS"]);
    if wide {
        header.extend(["TREND", "EVAL LOSS", "EPOCH", "GPUS", "REPORTED", "CHECKPOINT"]);
    }
    header.extend(["RULES", "VERDICT", "SAVED"]);
    if wide {
        header.push("POLICIES");
    }
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(ToString::to_string).collect()];
    for row in rows {
        let mut cells = Vec::new();
        if all_namespaces {
            cells.push(row.key.namespace.clone());
        }
        cells.extend([row.key.name.clone(), progress(row), eta(row), step(row), loss(row)]);
        if wide {
            let sample = row.sample();
            let epoch = match sample.map(|s| (s.current_epoch, s.total_epochs)) {
                Some((Some(c), Some(t))) => format!("{}/{}", num(c), num(t)),
                Some((Some(c), None)) => num(c),
                _ => "-".into(),
            };
            let reported = sample.map_or("-".into(), |s| {
                format!("{} ago", span(now.duration_since(s.updated_at).as_secs_f64()))
            });
            let gpus = row.snapshot.as_ref().and_then(|s| s.gpus).map_or("-".into(), num);
            let spark = if row.loss.is_empty() { "-".into() } else { sparkline(&row.loss) };
            let checkpoint = row.checkpoint.map_or("-".into(), |c| {
                format!("{} ({} ago)", c.reported.step, span(now.duration_since(c.at).as_secs_f64()))
            });
            cells.extend([
                spark,
                row.metric("eval_loss").map_or("-".into(), num),
                epoch,
                gpus,
                reported,
                checkpoint,
            ]);
        }
        cells.extend([rules(row), row.state.to_string(), saved(row)]);
        if wide {
            cells.push(if row.selected_by.is_empty() { "-".into() } else { row.selected_by.join(",") });
        }
        lines.push(cells);
    }
    let columns = lines[0].len();
    let widths: Vec<usize> =
        (0..columns).map(|c| lines.iter().map(|l| l[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for line in &lines {
        let mut text = String::new();
        for (c, cell) in line.iter().enumerate() {
            if c + 1 == columns {
                text.push_str(cell);
            } else {
                text.push_str(cell);
                text.push_str(&" ".repeat(widths[c] - cell.chars().count() + 3));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// The machine-readable row (`-o json|yaml`): every field the table shows, unformatted.
fn json_row(row: &JobRow, now: Timestamp) -> serde_json::Value {
    let sample = row.sample();
    let problems: Vec<&String> = [
        &row.unreadable,
        &row.verdict_problem,
        &row.history_problem,
        &row.snooze_problem,
        &row.checkpoint_problem,
    ]
    .into_iter()
    .flatten()
    .collect();
    let recent: Vec<serde_json::Value> = row
        .loss
        .iter()
        .map(|v| if v.is_finite() { serde_json::json!(v) } else { serde_json::json!(v.to_string()) })
        .collect();
    serde_json::json!({
        "namespace": row.key.namespace,
        "name": row.key.name,
        "progressPercent": sample.and_then(|s| s.progress_percent),
        "etaSeconds": sample.and_then(|s| s.eta_seconds),
        "step": sample.and_then(|s| s.current_step),
        "totalSteps": sample.and_then(|s| s.total_steps),
        "epoch": sample.and_then(|s| s.current_epoch),
        "totalEpochs": sample.and_then(|s| s.total_epochs),
        "loss": row.metric("loss"),
        "lossRecent": recent,
        "lastReport": sample.map(|s| s.updated_at.to_string()),
        "secondsSinceReport": sample.map(|s| now.duration_since(s.updated_at).as_secs_f64().round()),
        "verdict": row.state,
        "rules": row.verdict.rules,
        "selectedBy": row.selected_by,
        "lastAction": row.last_action,
        "suspended": row.suspended,
        "snoozeUntil": row.snooze_until.map(|t| t.to_string()),
        "lastCheckpoint": row.checkpoint.map(|c| serde_json::json!({
            "step": c.reported.step,
            "requestId": c.reported.request_id,
            "reportedAt": c.at.to_string(),
            "secondsAgo": now.duration_since(c.at).as_secs_f64().round(),
        })),
        "checkpointRequest": row.checkpoint_request,
        "problems": problems,
    })
}

#[cfg(test)]
mod tests {
    use super::dollars;

    #[test]
    fn dollars_are_whole_and_grouped_by_thousands() {
        assert_eq!(dollars(1804.24), "$1,804");
        assert_eq!(dollars(80.0), "$80");
        assert_eq!(dollars(999.5), "$1,000");
        assert_eq!(dollars(1_234_567.0), "$1,234,567");
        assert_eq!(dollars(0.0), "$0");
    }
}
