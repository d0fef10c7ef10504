//! `explain JOB`: which policies select the job and why (or why not), each rule's state as the controller
//! published it and as judged here now, with the rule's detector, thresholds and `for`, and what happens next.

use std::collections::BTreeMap;
use std::fmt::Write;

use kube::ResourceExt;
use trainwarden_core::{
    CompiledPolicy, DETECTORS, JobPhase, PolicyDocument, PolicyKind, PolicyScope, RuleState, Timestamp,
};
use trainwarden_kube::RuleVerdict;

use crate::cluster::{self, Cluster};
use crate::job::{JobRow, Judge, num, short_time, span, sparkline, trend};

pub(crate) async fn run(cluster: &Cluster, name: &str, now: Timestamp) -> Result<(), String> {
    crate::output::write(explain(cluster, name, now).await?.as_bytes());
    Ok(())
}

/// `1h52m ago` / `in 11m`.
fn relative(t: Timestamp, now: Timestamp) -> String {
    let s = now.duration_since(t).as_secs_f64();
    if s >= 0.0 { format!("{} ago", span(s)) } else { format!("in {}", span(-s)) }
}

fn labels_text(labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return "{}".into();
    }
    format!("{{{}}}", labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", "))
}

fn json_text(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// The whole explanation.
pub(crate) async fn explain(cluster: &Cluster, name: &str, now: Timestamp) -> Result<String, String> {
    let job = cluster::trainjob(cluster, name).await?;
    let namespace = job.namespace().unwrap_or_else(|| cluster.namespace.clone());
    let policies = cluster::policies(cluster, Some(&namespace)).await;
    let labels = cluster::namespace_labels(cluster, [namespace.clone()]).await;
    let mut judge = Judge::new(&policies.documents, &labels, now);
    let workloads = match job.labels().contains_key(trainwarden_kube::kueue::KUEUE_QUEUE_LABEL) {
        true => cluster::workload_activity(cluster, &[&job]).await,
        false => Default::default(),
    };
    let row = JobRow::read(&job, &mut judge, &policies, &workloads, now);
    let mut out = String::new();
    let o = &mut out;

    let _ = writeln!(o, "TrainJob {}", row.key);
    match (&row.snapshot, &row.unreadable) {
        (_, Some(e)) => {
            let _ = writeln!(o, "  progress cannot be read: {e}");
        }
        (Some(s), None) => {
            let phase =
                if row.suspended { "suspended".to_string() } else { format!("{:?}", s.phase).to_lowercase() };
            let mut facts = vec![phase];
            if let Some(g) = s.gpus {
                facts.push(format!("{} GPUs", num(g)));
            }
            if let Some(q) = &row.kueue_queue {
                facts.push(format!("Kueue queue {q}"));
            }
            if let Some(sample) = &s.sample {
                if let Some(p) = sample.progress_percent {
                    facts.push(format!("progress {}%", num(p)));
                }
                if let Some(e) = sample.eta_seconds {
                    facts.push(format!("ETA {}", span(e)));
                }
                match (sample.current_step, sample.total_steps) {
                    (Some(c), Some(t)) => facts.push(format!("step {}/{}", num(c), num(t))),
                    (Some(c), None) => facts.push(format!("step {}", num(c))),
                    _ => {}
                }
            }
            let _ = writeln!(o, "  {}", facts.join(" · "));
            match &s.sample {
                Some(sample) => {
                    let metrics: Vec<String> = sample
                        .metrics
                        .iter()
                        .map(|m| {
                            if m.name == "loss" && row.loss.len() > 1 {
                                format!("loss {} {} {}", num(m.value), trend(&row.loss), sparkline(&row.loss))
                            } else {
                                format!("{} {}", m.name, num(m.value))
                            }
                        })
                        .collect();
                    let _ = writeln!(
                        o,
                        "  last report {} ({}){}{}",
                        short_time(sample.updated_at),
                        relative(sample.updated_at, now),
                        if metrics.is_empty() { "" } else { ": " },
                        metrics.join(", ")
                    );
                }
                None => {
                    let _ = writeln!(o, "  no progress report yet");
                }
            }
        }
        (None, None) => {}
    }
    let _ = writeln!(o, "  verdict: {}", row.state);
    if let Some(a) = &row.last_action {
        let at = a.at.map(|t| format!(" at {} ({})", short_time(t), relative(t, now))).unwrap_or_default();
        let frees = a.gpu_hours.map(|h| format!("; frees {} GPU-h", num(h))).unwrap_or_default();
        let _ =
            writeln!(o, "  last action: {} by {} ({}){at}: {}{frees}", a.action, a.policy, a.rule, a.reason);
    }
    match &row.checkpoint {
        Some(c) => {
            let answered = match c.reported.request_id {
                0 => "its own".to_string(),
                id => format!("answering request {id}"),
            };
            let _ = writeln!(
                o,
                "  last checkpoint: step {} ({answered}), reported {} ({})",
                c.reported.step,
                short_time(c.at),
                relative(c.at, now)
            );
        }
        None => {
            let _ = writeln!(o, "  last checkpoint: none reported (checkpoint_step, checkpoint_request_id)");
        }
    }
    if let Some(r) = &row.checkpoint_request
        && let Some(request) = &r.request
    {
        let asked = format!(
            "checkpoint request {} at {} ({})",
            request.id,
            short_time(request.requested_at),
            relative(request.requested_at, now)
        );
        let state = match &r.outcome {
            None => format!(
                "pending, on the pods until acknowledged or {} ({})",
                short_time(request.deadline()),
                relative(request.deadline(), now)
            ),
            Some(trainwarden_core::RequestOutcome::Acknowledged { step, at }) => format!(
                "acknowledged at step {step}, {} after the request",
                span((at.as_millisecond() - request.requested_at.as_millisecond()) as f64 / 1000.0)
            ),
            Some(trainwarden_core::RequestOutcome::TimedOut { .. }) => {
                format!("not acknowledged within {}", span(request.timeout_seconds as f64))
            }
            Some(trainwarden_core::RequestOutcome::Withdrawn { why, .. }) => format!("withdrawn: {why}"),
        };
        let _ = writeln!(o, "  {asked}: {state} — {}", request.reason);
    }
    if row.exempt {
        let _ = writeln!(o, "  exempt: annotated trainwarden.dev/exempt=true, no policy judges it");
    }
    if let Some(until) = row.snooze_until {
        if until > now {
            let _ = writeln!(
                o,
                "  snoozed until {} ({}): rules are evaluated, their actions wait (the controller caps the length)",
                short_time(until),
                relative(until, now)
            );
        } else {
            let _ = writeln!(o, "  a snooze ended {} ({})", short_time(until), relative(until, now));
        }
    }
    for problem in [&row.verdict_problem, &row.history_problem, &row.snooze_problem, &row.checkpoint_problem]
        .into_iter()
        .flatten()
    {
        let _ = writeln!(o, "  warning: {problem}");
    }

    let _ = writeln!(o, "\nPolicies");
    if policies.documents.is_empty() {
        let _ = writeln!(
            o,
            "  none in namespace {namespace} and no ClusterProgressPolicy: nothing judges this job"
        );
    }
    let job_labels = row.snapshot.as_ref().map(|s| s.labels.clone()).unwrap_or_default();
    let mut next: Vec<String> = Vec::new();
    for document in &policies.documents {
        let compiled = judge.evaluator.policies().find(|p| p.reference.id() == document.reference.id());
        let Some(policy) = compiled else {
            let error = judge
                .invalid
                .iter()
                .find(|(r, _)| r.id() == document.reference.id())
                .map_or("", |(_, e)| e.as_str());
            let _ = writeln!(
                o,
                "  {} {}: does not compile, so the controller does not run it: {error}",
                document.reference.kind, document.reference
            );
            continue;
        };
        let job = JobView { row: &row, labels: &job_labels, namespace_labels: labels.get(&namespace), now };
        explain_policy(o, &mut next, &judge, &job, policy, document);
    }
    for problem in &policies.problems {
        let _ = writeln!(o, "  warning: {problem}");
    }

    let _ = writeln!(o, "\nNext");
    if row.suspended {
        next.insert(0, format!(
            "the job is suspended: its rules wait until it runs again (`kubectl trainwarden resume {} -n {}`, optionally with --snooze)",
            row.key.name, row.key.namespace
        ));
    }
    if next.is_empty() {
        next.push("nothing is due: a rule's condition must start to hold first".into());
    }
    for line in next {
        let _ = writeln!(o, "  {line}");
    }
    Ok(out)
}

/// The job a policy is explained for, as the explanation reads it.
struct JobView<'a> {
    row: &'a JobRow,
    labels: &'a BTreeMap<String, String>,
    /// Its namespace's labels, when they could be read (a cluster policy's `namespaceSelector`).
    namespace_labels: Option<&'a BTreeMap<String, String>>,
    now: Timestamp,
}

fn explain_policy(
    o: &mut String,
    next: &mut Vec<String>,
    judge: &Judge,
    job: &JobView<'_>,
    policy: &CompiledPolicy,
    document: &PolicyDocument,
) {
    let &JobView { row, labels: job_labels, namespace_labels, now } = job;
    let reference = &policy.reference;
    let head = format!("  {} {} ({:?})", reference.kind, reference, policy.mode);
    if !judge.evaluator.selects(reference, &row.key) {
        let why = if !policy.selector.matches(job_labels) {
            format!(
                "its selector {} does not match the job's labels {}",
                json_text(&policy.selector),
                labels_text(job_labels)
            )
        } else if let PolicyScope::Cluster { namespace_selector, .. } = &policy.scope {
            match namespace_labels {
                Some(l) => format!(
                    "its namespaceSelector {} does not match namespace {}'s labels {}",
                    json_text(namespace_selector),
                    row.key.namespace,
                    labels_text(l)
                ),
                None => format!(
                    "its namespaceSelector {} needs namespace {}'s labels, which you may not read",
                    json_text(namespace_selector),
                    row.key.namespace
                ),
            }
        } else {
            "the job is exempt or finished".into()
        };
        let _ = writeln!(o, "{head}: does not select this job: {why}");
        return;
    }
    let selector = if policy.selector.is_empty() { "every job".into() } else { json_text(&policy.selector) };
    let scope = match (&policy.scope, reference.kind) {
        (PolicyScope::Cluster { namespace_selector, .. }, PolicyKind::Cluster)
            if !namespace_selector.is_empty() =>
        {
            format!(" in namespaces {}", json_text(namespace_selector))
        }
        _ => String::new(),
    };
    let _ = writeln!(o, "{head}: selects this job (selector: {selector}{scope})");
    let calendar = &policy.env.calendar;
    if calendar.windows().is_empty() {
        let _ = writeln!(o, "    active windows: none, always active");
    } else if calendar.is_active(now) {
        let until = calendar
            .next_change_after(now)
            .map(|t| format!(" until {} ({})", short_time(t), relative(t, now)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "    active window: open now{until} ({})",
            calendar.time_zone().iana_name().unwrap_or("UTC")
        );
    } else {
        let opens = calendar
            .next_change_after(now)
            .map(|t| format!("; opens {} ({})", short_time(t), relative(t, now)))
            .unwrap_or_default();
        let _ = writeln!(o, "    active window: closed now, the rules do not run{opens}");
    }
    for (rule, spec) in policy.rules.iter().zip(&document.spec.rules) {
        let published = row.verdict.rules.iter().find(|r| {
            r.kind == reference.kind
                && r.namespace == reference.namespace
                && r.policy == reference.name
                && r.rule == rule.name
        });
        let state = match published {
            Some(r) => published_state(r, now),
            None => "inactive".into(),
        };
        let _ = writeln!(o, "    rule {}: {state}", rule.name);
        if let Some(r) = published.filter(|r| !r.why.is_empty()) {
            let _ = writeln!(o, "      why: {}", r.why);
        }
        let mut how = Vec::new();
        if let Some(d) = &rule.detector_name {
            let given = spec.with.clone().unwrap_or_default();
            let mut params: Vec<String> = given.iter().map(|(k, v)| format!("{k}: {}", plain(v))).collect();
            if let Some(info) = DETECTORS.iter().find(|i| i.name == d) {
                for p in info.params.iter().filter(|p| !given.contains_key(p.name)) {
                    params.push(format!("{}: {} (default)", p.name, p.default));
                }
                how.push(format!("detector {d} {{{}}}: {}", params.join(", "), info.summary));
            } else {
                how.push(format!("detector {d} {{{}}}", params.join(", ")));
            }
        }
        if let Some(w) = &rule.when {
            how.push(format!("when `{}`", w.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
        let _ = writeln!(o, "      {}", how.join("; "));
        let actions: Vec<String> = rule.actions.iter().map(|a| a.kind().to_string()).collect();
        let _ = writeln!(
            o,
            "      for {}; actions: {} ({:?})",
            rule.for_,
            if actions.is_empty() { "none".into() } else { actions.join(", ") },
            rule.mode
        );
        let running = row.snapshot.as_ref().is_some_and(|s| s.phase == JobPhase::Running) && !row.suspended;
        let here = match judge.local_state(&row.key, reference, &rule.name) {
            _ if !running => "the job is not running, so its rules are not judged (they resume when it runs)",
            RuleState::Inactive => "its condition does not hold",
            _ => "its condition holds",
        };
        let _ = writeln!(o, "      judged here now, from the job's report and history checkpoint: {here}");
        // A stall rule's deadline: the last report plus its silence (the catalog's default when the rule
        // gives none), plus its `for`.
        if running && calendar.is_active(now) && rule.detector_name.as_deref() == Some("stalled") {
            let default = DETECTORS
                .iter()
                .find(|i| i.name == "stalled")
                .and_then(|i| i.params.iter().find(|p| p.name == "after"))
                .map_or("30m", |p| p.default);
            let after =
                spec.with.as_ref().and_then(|w| w.get("after")).and_then(|v| v.as_str()).unwrap_or(default);
            let deadline = after
                .parse::<trainwarden_core::PolicyDuration>()
                .ok()
                .map(|d| d.as_secs_f64() + rule.for_.as_secs_f64())
                .and_then(|secs| jiff::SignedDuration::try_from_secs_f64(secs).ok())
                .zip(row.sample().map(|s| s.updated_at))
                .and_then(|(d, last)| last.checked_add(d).ok());
            if let Some(at) = deadline.filter(|at| *at > now) {
                next.push(format!(
                    "{}/{} fires if the job sends no report by {} ({})",
                    reference.name,
                    rule.name,
                    short_time(at),
                    relative(at, now)
                ));
            }
        }
        if let Some(r) = published.filter(|_| running) {
            match r.state {
                RuleState::Pending => {
                    let fires = jiff::SignedDuration::try_from_secs_f64(rule.for_.as_secs_f64())
                        .ok()
                        .and_then(|d| r.since?.checked_add(d).ok());
                    if let Some(at) = fires {
                        next.push(format!(
                            "{}/{} fires at {} ({}) unless its condition clears first",
                            reference.name,
                            rule.name,
                            short_time(at),
                            relative(at, now)
                        ));
                    }
                }
                RuleState::Firing => next.push(format!(
                    "{}/{} is firing: its actions were issued{}",
                    reference.name,
                    rule.name,
                    if rule.mode == trainwarden_core::Mode::Audit { " (Audit: only reported)" } else { "" }
                )),
                RuleState::Inactive => {}
            }
        }
    }
}

fn published_state(r: &RuleVerdict, now: Timestamp) -> String {
    let state = if r.state == RuleState::Firing { "firing" } else { "pending" };
    match r.since {
        Some(since) => format!("{state} since {} ({})", short_time(since), relative(since, now)),
        None => format!("{state} (Audit, as the policy status lists it)"),
    }
}

/// A JSON value as a policy author wrote it: strings without quotes.
fn plain(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}
