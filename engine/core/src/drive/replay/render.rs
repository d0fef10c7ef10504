//! How a replay is told: the timeline's lines, the summary's text, and `--output json`'s objects. The
//! phrases come from [`crate::describe`], money and spans of time from their one formatter in `units/`.

use super::{SavingsTotal, Summary};
use crate::describe::words;
use crate::evaluate::Event;
use crate::time::{Timestamp, fmt_secs, plural};
use crate::units::money::{Cents, fmt_gpu_hours, fmt_money};

/// One output line of `replay --output json`.
pub fn event_json(event: &Event) -> serde_json::Value {
    use serde_json::json;
    match event {
        Event::Transition { at, job, policy, rule, kind, reason, mode } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": kind.as_str(), "action": null, "mode": mode.as_str(), "reason": reason,
        }),
        Event::Intent(i) => {
            let mut v = json!({
                "time": i.at.to_string(), "job": i.job.to_string(), "policy": i.policy.to_string(), "rule": i.rule,
                "state": "firing", "action": i.action.kind(), "actionSpec": i.action, "mode": i.mode.as_str(),
                "reason": i.reason, "intentId": i.id,
            });
            if let Some(s) = &i.savings {
                v["savings"] = json!(s);
            }
            v
        }
        Event::Suppressed { at, job, policy, rule, action, until } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "suppressed", "action": action, "mode": null,
            "reason": {"summary": format!("cooldown until {until}")},
        }),
        Event::RuleError { at, job, policy, rule, message } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "error", "action": null, "mode": null, "reason": {"summary": message},
        }),
        Event::Held { at, job, policy, rule, actions, until, mode, exception: None } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "held", "action": null, "actions": actions, "mode": mode.as_str(), "snoozedUntil": until.to_string(),
            "reason": {"summary": words::held(actions, *until, None)},
        }),
        Event::Held { at, job, policy, rule, actions, until, mode, exception: Some(e) } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "held", "action": null, "actions": actions, "mode": mode.as_str(), "exceptedUntil": until.to_string(),
            "exception": e.to_string(),
            "reason": {"summary": words::held(actions, *until, Some(e))},
        }),
        Event::ExceptionEnded { at, job, policy, rule, exception, why, released } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "exceptionEnded", "action": null, "mode": null, "exception": exception.to_string(),
            "why": why, "released": released,
            "reason": {"summary": words::exception_ended(exception, *why, *released)},
        }),
        Event::Limited { at, job, policy, rule, actions, limit, retry, mode } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "held", "action": null, "actions": actions, "mode": mode.as_str(), "limit": limit,
            "retry": retry.map(|t| t.to_string()),
            "reason": {"summary": words::limited(actions, limit, *retry)},
        }),
        Event::Deferred { at, job, policy, rule, action, until, mode } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": policy.to_string(), "rule": rule,
            "state": "deferred", "action": action, "mode": mode.as_str(), "until": until.to_string(),
            "reason": {"summary": words::deferred(*action, *until)},
        }),
        Event::Snooze { at, job, change } => json!({
            "time": at.to_string(), "job": job.to_string(), "policy": null, "rule": null,
            "state": "snooze", "action": null, "mode": null, "snooze": change,
            "reason": {"summary": words::snooze(change, &jiff::tz::TimeZone::UTC)},
        }),
    }
}

/// The `summary` object of `replay --output json`.
pub fn summary_json(summary: &Summary) -> serde_json::Value {
    serde_json::json!({ "summary": summary })
}

fn local(t: Timestamp, tz: &jiff::tz::TimeZone) -> String {
    crate::time::fmt_local(t, tz)
}

/// `262.4 GPU-hours, $1,804.24 across 1 job`, or with `cost unknown` for jobs whose policy sets no
/// `gpuHourCost` (their GPU time is not free).
pub(super) fn savings_total_text(total: &SavingsTotal) -> String {
    let hours = fmt_gpu_hours(total.gpu_hours);
    let jobs = plural(total.jobs, "job", "jobs");
    match (total.dollars, total.unpriced_jobs) {
        (Some(d), 0) => format!("{hours} GPU-hours, {} across {jobs}", fmt_money(Some(d), Cents::Shown)),
        (None, _) => format!("{hours} GPU-hours, cost unknown (no gpuHourCost) across {jobs}"),
        (Some(d), unpriced) => format!(
            "{hours} GPU-hours across {jobs}: {} for {}, cost unknown for {unpriced} (no gpuHourCost)",
            fmt_money(Some(d), Cents::Shown),
            total.jobs - unpriced
        ),
    }
}

/// One event as a timeline line (with its newline), as [`render_text`] prints it. Times are shown in `tz`.
pub fn render_event(e: &Event, tz: &jiff::tz::TimeZone) -> String {
    let mut out = String::new();
    match e {
        Event::Transition { at, job, rule, kind, reason, mode, .. } => {
            out += &format!(
                "{}  {job}  {rule:<16} {:<9} [{}] {}\n",
                local(*at, tz),
                kind.as_str().to_uppercase(),
                mode.as_str(),
                reason.summary
            );
        }
        Event::Intent(i) => {
            out += &format!(
                "{}  {}  {:<16}           {}\n",
                local(i.at, tz),
                i.job,
                i.rule,
                words::intent_line(i)
            );
        }
        Event::Suppressed { at, job, rule, action, until, .. } => {
            out += &format!(
                "{}  {job}  {rule:<16}           ✗ {action} suppressed by cooldown until {}\n",
                local(*at, tz),
                local(*until, tz)
            );
        }
        Event::RuleError { at, job, rule, message, .. } => {
            out += &format!("{}  {job}  {rule:<16} ERROR     {message}\n", local(*at, tz));
        }
        Event::Held { at, job, rule, actions, until, exception, .. } => {
            out += &format!(
                "{}  {job}  {rule:<16}           ✗ {}\n",
                local(*at, tz),
                words::held(actions, *until, exception.as_ref())
                    .replace(&until.to_string(), &local(*until, tz))
            );
        }
        Event::ExceptionEnded { at, job, rule, exception, why, released, .. } => {
            out += &format!(
                "{}  {job}  {rule:<16} EXCEPTION {}\n",
                local(*at, tz),
                words::exception_ended(exception, *why, *released)
            );
        }
        Event::Limited { at, job, rule, actions, limit, retry, .. } => {
            let mut text = words::limited(actions, limit, *retry);
            if let Some(t) = retry {
                text = text.replace(&t.to_string(), &local(*t, tz));
            }
            out += &format!("{}  {job}  {rule:<16}           ✗ {text}\n", local(*at, tz));
        }
        Event::Deferred { at, job, rule, action, until, .. } => {
            let text = words::deferred(*action, *until).replace(&until.to_string(), &local(*until, tz));
            out += &format!("{}  {job}  {rule:<16}           … {text}\n", local(*at, tz));
        }
        Event::Snooze { at, job, change } => {
            out +=
                &format!("{}  {job}  {:<16} SNOOZE    {}\n", local(*at, tz), "", words::snooze(change, tz));
        }
    }
    out
}

/// Renders the human timeline and summary. Times are shown in `tz` (the policy's zone).
pub fn render_text(events: &[Event], summary: &Summary, tz: &jiff::tz::TimeZone) -> String {
    let mut out = String::new();
    for e in events {
        out += &render_event(e, tz);
    }
    out.push_str(&render_summary(summary, tz));
    out
}

/// The summary that ends [`render_text`] (from its blank line on), for a timeline printed as it happens.
pub fn render_summary(summary: &Summary, tz: &jiff::tz::TimeZone) -> String {
    let mut out = String::from("\nSummary\n");
    if let (Some(a), Some(b)) = (summary.first_record, summary.last_time) {
        out += &format!(
            "  stream       {} → {} ({})\n",
            local(a, tz),
            local(b, tz),
            fmt_secs(crate::time::seconds(a, b))
        );
    }
    out += &format!(
        "  input        {}, {}, {} ignored after an enforced suspension\n",
        plural(summary.records, "record", "records"),
        plural(summary.jobs as u64, "job", "jobs"),
        summary.ignored_after_suspend
    );
    out += &format!(
        "  rules        {}, {}\n",
        plural(summary.firings, "firing", "firings"),
        plural(summary.rule_errors, "evaluation error", "evaluation errors")
    );
    let intents: Vec<String> = summary.intents.iter().map(|(k, v)| format!("{v} {k}")).collect();
    out += &format!(
        "  actions      {}\n",
        if intents.is_empty() { "none".to_string() } else { intents.join(", ") }
    );
    for n in &summary.not_selected {
        let jobs = n.selected + n.reasons.values().sum::<u64>();
        let why: Vec<String> = n.reasons.iter().map(|(reason, k)| format!("{k} {reason}")).collect();
        out += &format!(
            "  selection    {} selected {} of {}: {}\n",
            n.policy,
            n.selected,
            plural(jobs, "job", "jobs"),
            why.join(", ")
        );
    }
    for policy in &summary.never_active {
        out += &format!(
            "  inactive     {policy}: its activeWindows never opened during the stream, so its rules judged nothing\n"
        );
    }
    for o in &summary.odd_reports {
        let mut parts = Vec::new();
        if o.stamped_ahead > 0 {
            parts.push(format!(
                "{} stamped more than 5m after its line's time (a clock that jumped ahead; judged at the line's time)",
                plural(o.stamped_ahead, "report", "reports")
            ));
        }
        if o.out_of_order > 0 {
            parts.push(format!(
                "{} older than the report before (out of order; dropped)",
                plural(o.out_of_order, "report", "reports")
            ));
        }
        out += &format!("  reports      {}: {}\n", o.job, parts.join(", "));
    }
    for u in &summary.unreported_metrics {
        out += &format!(
            "  unreported   rule {} of {} watches {}: no record reported it, so the rule could not fire on it\n",
            u.rule, u.policy, u.metric
        );
    }
    for (label, total) in [("saved", &summary.saved), ("would save", &summary.would_save)] {
        if total.jobs > 0 {
            out += &format!("  {label:<12} {}\n", savings_total_text(total));
        }
    }
    out
}
