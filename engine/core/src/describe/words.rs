//! The phrases: what an action does (for a message, and as a timeline line says it), what holds it and
//! until when, a snooze's changes, GPU time freed. Money and spans of time are printed by the one formatter
//! of each in `units/` ([`crate::fmt_money`], [`crate::fmt_span`]), never here.

use crate::evaluate::{
    ActionIntent, ExceptionEnd, Limit, SNOOZE_ANNOTATION, Savings, SavingsBasis, SnoozeChange,
};
use crate::policy::exception::ExceptionRef;
use crate::policy::{ActionKind, ActionSpec, Mode};
use crate::time::{Timestamp, fmt_local, fmt_num, fmt_secs, plural, plural_num};
use crate::units::money::{Cents, fmt_money};

/// What an action does, in words, as a message says it: `suspend the TrainJob`, `notify team`.
pub fn action(action: &ActionSpec) -> String {
    match action {
        ActionSpec::Suspend(s) if s.checkpoint_first.is_some() => {
            "suspend the TrainJob once it has saved a checkpoint".into()
        }
        ActionSpec::Suspend(_) => "suspend the TrainJob".into(),
        ActionSpec::Checkpoint(_) => "request a checkpoint".into(),
        ActionSpec::Notify(n) => format!("notify {}", n.to),
        ActionSpec::Annotate(a) => format!("annotate the TrainJob with {}", a.key),
        ActionSpec::Event(_) => "emit a Kubernetes Event".into(),
        ActionSpec::Scale(s) => {
            format!(
                "scale the TrainJob to {}",
                plural(u64::try_from(s.num_nodes).unwrap_or(0), "node", "nodes")
            )
        }
    }
}

/// `suspend the TrainJob` → `suspending the TrainJob` (the verbs [`action`] uses).
pub fn progressive(description: &str) -> String {
    let (verb, rest) = description.split_once(' ').unwrap_or((description, ""));
    let ing = match verb {
        "emit" => "emitting".to_string(),
        v => format!("{}ing", v.strip_suffix('e').unwrap_or(v)),
    };
    if rest.is_empty() { ing } else { format!("{ing} {rest}") }
}

/// `suspend the TrainJob` → `suspended the TrainJob` (the verbs [`action`] uses).
pub fn past(description: &str) -> String {
    let (verb, rest) = description.split_once(' ').unwrap_or((description, ""));
    let ed = match verb {
        "emit" => "emitted".to_string(),
        "notify" => "notified".to_string(),
        v if v.ends_with('e') => format!("{v}d"),
        v => format!("{v}ed"),
    };
    if rest.is_empty() { ed } else { format!("{ed} {rest}") }
}

/// An intent as a timeline line says it: `→ will suspend the TrainJob (SIGTERM → just-in-time checkpoint);
/// frees …` (`would` in Audit mode).
pub fn intent_line(i: &ActionIntent) -> String {
    let what = match &i.action {
        ActionSpec::Suspend(s) => match s.checkpoint_first.as_ref() {
            Some(c) => format!(
                "request a checkpoint, then suspend the TrainJob once it is saved (or after {})",
                c.timeout.as_ref().map_or("10m", |t| t.0.as_str())
            ),
            None => "suspend the TrainJob (SIGTERM → just-in-time checkpoint)".to_string(),
        },
        ActionSpec::Checkpoint(c) => format!(
            "request a checkpoint (the job keeps training; timeout {})",
            c.timeout.as_ref().map_or("10m", |t| t.0.as_str())
        ),
        ActionSpec::Notify(n) => format!("notify {}", n.to),
        ActionSpec::Annotate(a) => format!("annotate {}", a.key),
        ActionSpec::Event(_) => "emit a Kubernetes Event".to_string(),
        ActionSpec::Scale(s) => {
            format!("scale to {}", plural(u64::try_from(s.num_nodes).unwrap_or(0), "node", "nodes"))
        }
    };
    let verb = if i.mode == Mode::Audit { "would" } else { "will" };
    let mut line = format!("→ {verb} {what}");
    if let Some(s) = &i.savings {
        line += &format!("; {}", savings(s));
    }
    line
}

/// What a stop frees: `frees 8 GPUs × 1d8h until its estimated end = 262.4 GPU-hours ($1,804.24)`.
pub fn savings(s: &Savings) -> String {
    let basis = if s.basis == SavingsBasis::WindowEnd {
        "the end of the unattended window"
    } else {
        "its estimated end"
    };
    let mut out = format!(
        "frees {} × {} until {basis} = {} GPU-hours",
        plural_num(s.gpus, "GPU", "GPUs"),
        fmt_secs(s.gpu_hours / s.gpus * 3600.0),
        fmt_num(s.gpu_hours)
    );
    if let Some(d) = s.dollars {
        out += &format!(" ({})", fmt_money(Some(d), Cents::Shown));
    }
    out
}

/// `suspend waits for its grace, until …: done then if the rule still fires and the job is not snoozed`.
pub fn deferred(action: ActionKind, until: Timestamp) -> String {
    format!(
        "{} waits for its grace, until {until}: done then if the rule still fires and the job is not snoozed",
        action.as_str()
    )
}

/// `suspend, notify held: limit 5/h reached (spec.limits.maxActionsPerHour); a slot frees at …`.
pub fn limited(actions: &[ActionKind], limit: &Limit, retry: Option<Timestamp>) -> String {
    let names: Vec<&str> = actions.iter().map(|a| a.as_str()).collect();
    let when = match retry {
        Some(t) => format!("a slot frees at {t}; done then"),
        None => "done once a job it holds runs again, finishes or is deleted".to_string(),
    };
    format!("{} held: {limit}; {when} if the rule still fires", names.join(", "))
}

/// `suspend, notify held: snoozed until 2026-12-02T08:00:00Z by annotation trainwarden.dev/snooze-until`.
pub fn held(actions: &[ActionKind], until: Timestamp, exception: Option<&ExceptionRef>) -> String {
    let names: Vec<&str> = actions.iter().map(|a| a.as_str()).collect();
    match exception {
        Some(e) => format!(
            "{} held: excepted until {until} by ProgressPolicyException {e}; then, if the rule still fires, it \
             fires again (a grace runs anew)",
            names.join(", "),
        ),
        None => format!(
            "{} held: snoozed until {until} by annotation {}; done then if the rule still fires",
            names.join(", "),
            SNOOZE_ANNOTATION
        ),
    }
}

/// `ProgressPolicyException ml/eval no longer holds the rule: it expired; the rule still fires, so it fires
/// again now`.
pub fn exception_ended(exception: &ExceptionRef, why: ExceptionEnd, released: bool) -> String {
    let then = if released { "the rule still fires, so it fires again now" } else { "nothing is released" };
    format!("ProgressPolicyException {exception} no longer holds the rule: {}; {then}", why.text())
}

/// A snooze change for people, times in `tz`.
pub fn snooze(change: &SnoozeChange, tz: &jiff::tz::TimeZone) -> String {
    match change {
        SnoozeChange::Started(s) => {
            let mut text = format!(
                "snoozed until {} by annotation {}: actions are held",
                fmt_local(s.until, tz),
                SNOOZE_ANNOTATION
            );
            if s.capped() {
                text += &format!(
                    " (asked for {}; the longest snooze allowed ends then)",
                    fmt_local(s.requested, tz)
                );
            }
            text
        }
        SnoozeChange::Ended { until, why, released } => format!(
            "snooze until {} ended ({}): {}",
            fmt_local(*until, tz),
            why.text(),
            match released {
                0 => "no rule fires, nothing to do".to_string(),
                1 => "1 rule still firing acts now".to_string(),
                n => format!("{n} rules still firing act now"),
            }
        ),
        SnoozeChange::PolicyCapped { policy, cap, until, released } => format!(
            "the snooze no longer holds {} {policy} ({} at {}): {}",
            policy.kind,
            cap.text(),
            fmt_local(*until, tz),
            match released {
                0 => "no rule of it fires, nothing to do".to_string(),
                1 => "1 rule still firing acts now".to_string(),
                n => format!("{n} rules still firing act now"),
            }
        ),
        SnoozeChange::Invalid { message, .. } => message.clone(),
    }
}
