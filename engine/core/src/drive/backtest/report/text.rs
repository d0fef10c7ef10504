//! The backtest's report for people: the header, per policy its totals, its rules and its stops, the
//! trade-off table of a sweep with its Pareto front, and the scoreboard that puts every policy and external
//! rule on one table.

use std::fmt::Write as _;

use super::super::OUTCOMES;
use super::super::outcome::Trouble;
use super::{CandidateReport, PolicyReport, Report, StopEntry};
use crate::time::{fmt_num, fmt_secs, plural};

/// A fraction as a percentage, to a tenth (finer when smaller: a 0.05 % tolerance does not print as 0 %).
fn percent(v: Option<f64>) -> String {
    match v {
        Some(r) if r.is_finite() => {
            let p = r * 100.0;
            let scale = if p.abs() >= 1.0 || p == 0.0 { 10.0 } else { 1000.0 };
            format!("{} %", fmt_num((p * scale).round() / scale))
        }
        Some(_) | None => "-".into(),
    }
}

/// The judgement of one stop in words.
fn verdict_text(s: &StopEntry) -> String {
    let o = &s.stop.outcome;
    if !o.measured {
        format!("not judged: the run never reported {}", s.stop.target)
    } else if o.false_stop && o.best_before.is_none() {
        format!("FALSE STOP: before any {} was reported; the run went on to report it", s.stop.target)
    } else if o.false_stop && o.relative_improvement.is_none() {
        format!(
            "FALSE STOP: {} improved from 0 to {} afterwards",
            s.stop.target,
            o.best_after.map_or_else(String::new, fmt_num)
        )
    } else if o.false_stop {
        format!("FALSE STOP: {} improved {} afterwards", s.stop.target, percent(o.relative_improvement))
    } else {
        match (o.trouble, o.lead_seconds) {
            (Some(Trouble::Diverged), Some(l)) => {
                format!("right: diverged, its best {} before the stop", fmt_secs(l.round()))
            }
            (Some(k), Some(l)) => {
                format!("right: {} for {} before the stop", k.as_str(), fmt_secs(l.round()))
            }
            _ => format!("right: {} did not improve", s.stop.target),
        }
    }
}

/// GPU-hours and hours by the one formatter ([`crate::fmt_gpu_hours`]): a small saving is never `0`.
fn hours(v: f64) -> String {
    crate::units::money::fmt_gpu_hours(v)
}

fn lead(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |s| fmt_secs(s.round()))
}

impl Report {
    /// Whether any rule failed to evaluate somewhere (such a backtest understates what the policy does).
    pub fn rule_errors(&self) -> u64 {
        self.candidates.iter().flat_map(|c| &c.policies).map(|p| p.totals.rule_errors).sum()
    }

    /// The report for people: per policy its totals, its rules and its stops; with sweeps, per policy the
    /// trade-off table with the Pareto front marked.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "backtest: {} from {}; every rule enforced; a stop is false when {} improved by more than {}{} afterwards{}",
            plural(self.runs.len() as u64, "run", "runs"),
            plural(self.files as u64, "file", "files"),
            self.target.as_deref().map_or("the rule's metric".to_string(), |t| format!("`{t}`")),
            percent(Some(self.tolerance)),
            if self.min_improvement > 0.0 {
                format!(" and {}", fmt_num(self.min_improvement))
            } else {
                String::new()
            },
            if self.smoothing > 1 {
                format!(" (levels: medians of {} logged values)", self.smoothing)
            } else {
                " (raw logged values)".to_string()
            },
        );
        if let Some(selector) = &self.runs_selector {
            let _ = writeln!(
                out,
                "runs: {selector} ({} left out)",
                plural(self.excluded.len() as u64, "run", "runs")
            );
        }
        if !self.outcomes.is_empty() {
            let labelled: u64 = self.outcomes.values().sum();
            let counts: Vec<String> =
                OUTCOMES.iter().filter_map(|o| self.outcomes.get(*o).map(|n| format!("{o} {n}"))).collect();
            let _ = writeln!(out, "outcome labels: {labelled} of the judged runs ({})", counts.join(", "));
        }
        if !self.incomplete.is_empty() {
            let shown: Vec<&str> = self.incomplete.iter().take(10).map(String::as_str).collect();
            let more = self.incomplete.len() - shown.len();
            let _ = writeln!(
                out,
                "not judged: {} that did not run to the end (still running, or suspended): {}{}",
                plural(self.incomplete.len() as u64, "run", "runs"),
                shown.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            );
        }
        if self.runs_without_gpus > 0 {
            let _ = writeln!(
                out,
                "note: {} no recorded GPU count: their GPU-hours are 0 unless the policy sets assumeGpus (hours saved still count)",
                plural(self.runs_without_gpus as u64, "run has", "runs have")
            );
        }
        let Some(base) = self.candidates.first() else { return out };
        if self.candidates.len() > 1 {
            let set = base.settings.iter().map(|s| format!("{}={}", s.path, s.value)).collect::<Vec<_>>();
            let _ = writeln!(out, "(details below are for the first setting: {})", set.join(" "));
        }
        for p in base.policies.iter().chain(base.together.as_ref()) {
            self.render_policy(&mut out, p);
        }
        if self.candidates.len() > 1 {
            for (i, p) in base.policies.iter().enumerate().filter(|(_, p)| p.mode_as_written != "external") {
                self.render_tradeoff(&mut out, i, &p.policy);
            }
        }
        if !self.outcomes.is_empty() || base.policies.len() > 1 {
            self.render_scoreboard(&mut out, base);
        }
        out
    }

    /// One line per policy, external rule and the policies together, as a Markdown table.
    fn render_scoreboard(&self, out: &mut String, base: &CandidateReport) {
        let labelled = !self.outcomes.is_empty();
        let _ = writeln!(
            out,
            "
scoreboard"
        );
        let mut head = vec!["policy", "stops", "false stops"];
        if labelled {
            head.extend(["healthy runs stopped", "bad runs caught", "precision"]);
        }
        head.extend(["GPU-h saved", "GPU-h lost", "lost / saved", "median lead"]);
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let _ = writeln!(
            out,
            "|{}",
            head.iter().enumerate().map(|(i, _)| if i == 0 { "---|" } else { "---:|" }).collect::<String>()
        );
        for p in base.together.iter().chain(&base.policies) {
            let t = &p.totals;
            let mut row = vec![p.policy.clone(), t.stopped.to_string(), t.false_stops.to_string()];
            if labelled {
                row.push(t.healthy_stopped.to_string());
                row.push(format!("{} of {} ({})", t.caught, t.bad_runs_seen, percent(t.recall)));
                row.push(percent(t.precision));
            }
            row.push(hours(t.gpu_hours_saved));
            row.push(hours(t.lost_gpu_hours));
            row.push(percent(t.lost_share()));
            row.push(lead(t.median_lead_seconds));
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
    }

    fn render_policy(&self, out: &mut String, p: &PolicyReport) {
        let t = &p.totals;
        let _ = writeln!(out, "\npolicy {} (mode {} as written)", p.policy, p.mode_as_written);
        let dollars = t
            .dollars_saved
            .map(|d| {
                format!(" ({})", crate::units::money::fmt_money(Some(d), crate::units::money::Cents::Rounded))
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  runs seen {}, stopped {}, saved {} GPU-h{dollars} ({} h of wall clock)",
            t.runs_seen,
            t.stopped,
            hours(t.gpu_hours_saved),
            hours(t.hours_saved),
        );
        for sw in &p.sweeps {
            let best = match (&sw.best_trial, sw.best_value) {
                (Some(trial), Some(v)) => format!(
                    "; its best trial {trial} ({} {}) {}",
                    sw.metric,
                    fmt_num(v),
                    if sw.best_stopped { "WOULD HAVE BEEN STOPPED" } else { "ran to its end" }
                ),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  sweep {}: {} of {} trials stopped, saved {} of its {} GPU-h{best}",
                sw.sweep,
                sw.stopped,
                sw.trials,
                hours(sw.gpu_hours_saved),
                hours(sw.gpu_hours)
            );
        }
        if !p.not_selected.is_empty() {
            let why: Vec<String> = p.not_selected.iter().map(|(r, n)| format!("{n} {r}")).collect();
            let n: u64 = p.not_selected.values().sum();
            let _ = writeln!(out, "  not selected {}: {}", plural(n, "run", "runs"), why.join(", "));
        }
        for u in p.unreported.iter().flatten() {
            let _ = writeln!(out, "  {u}: no run reported it, so that rule could not fire on it");
        }
        let _ = write!(
            out,
            "  false stops {} ({} GPU-h of good work lost)",
            t.false_stops,
            hours(t.lost_gpu_hours)
        );
        match &t.worst_regret {
            Some(w) if w.relative.is_some() => {
                let _ = write!(
                    out,
                    "; worst regret {} ({} improved by {}) in {} by {}",
                    percent(w.relative),
                    w.target,
                    fmt_num(w.improvement),
                    w.run_name,
                    w.rule
                );
            }
            Some(w) => {
                let _ = write!(
                    out,
                    "; worst: {} stopped by {} {}",
                    w.run_name,
                    w.rule,
                    if w.from_zero {
                        format!("at a best {} of 0", w.target)
                    } else {
                        format!("before any {} was reported", w.target)
                    }
                );
            }
            None => {}
        }
        let _ = writeln!(out);
        let troubles: Vec<String> = t.troubles.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            out,
            "  rightful stops {} ({}), median lead time {}",
            t.stopped - t.false_stops - t.unmeasured,
            if troubles.is_empty() { "none".into() } else { troubles.join(", ") },
            lead(t.median_lead_seconds)
        );
        let labelled = !self.outcomes.is_empty();
        if labelled {
            let by: Vec<String> = OUTCOMES[1..]
                .iter()
                .filter_map(|o| t.by_outcome.get(*o).map(|x| format!("{o} {} of {}", x.caught, x.runs)))
                .collect();
            let _ = writeln!(
                out,
                "  bad runs caught {} of {} (recall {}{}), precision {} ({} of {} labelled stops); healthy runs stopped {}",
                t.caught,
                t.bad_runs_seen,
                percent(t.recall),
                if by.is_empty() { String::new() } else { format!(": {}", by.join(", ")) },
                percent(t.precision),
                t.caught,
                t.labelled_stops,
                t.healthy_stopped
            );
            if !p.missed.is_empty() {
                let _ = writeln!(out, "    bad runs missed: {}", p.missed.join(", "));
            }
            for s in p.stops.iter().filter(|s| s.run_outcome.as_deref() == Some("healthy")) {
                let _ = writeln!(
                    out,
                    "    healthy run stopped: {} by {} at {}: {}",
                    s.run_name,
                    s.stop.rule,
                    s.stop.outcome.at,
                    verdict_text(s)
                );
            }
        }
        if t.unmeasured > 0 {
            let _ = writeln!(
                out,
                "  not judged: {} that never reported the target metric",
                plural(t.unmeasured, "stop of a run", "stops of runs")
            );
        }
        if t.rule_errors > 0 {
            let _ = writeln!(
                out,
                "  {} (those rules never fired there):",
                plural(t.rule_errors, "rule error", "rule errors")
            );
            for r in p.rules.iter().filter(|r| r.totals.rule_errors > 0) {
                let first = r.first_error.as_deref().unwrap_or("");
                let n = plural(r.totals.rule_errors, "error", "errors");
                let _ = writeln!(out, "    {}: {n}, the first in {first}", r.rule);
            }
        }
        let width = p.rules.iter().map(|r| r.rule.len()).max().unwrap_or(0).max(24);
        let _ = write!(
            out,
            "  {:<width$} {:>7} {:>11} {:>11} {:>10} {:>11}",
            "rule", "stopped", "GPU-h saved", "false stops", "GPU-h lost", "median lead"
        );
        let _ = if labelled { writeln!(out, " {:>7} {:>6}", "healthy", "caught") } else { writeln!(out) };
        for r in &p.rules {
            let x = &r.totals;
            let _ = write!(
                out,
                "  {:<width$} {:>7} {:>11} {:>11} {:>10} {:>11}",
                r.rule,
                x.stopped,
                hours(x.gpu_hours_saved),
                x.false_stops,
                hours(x.lost_gpu_hours),
                lead(x.median_lead_seconds)
            );
            let _ = if labelled {
                writeln!(out, " {:>7} {:>6}", x.healthy_stopped, x.caught)
            } else {
                writeln!(out)
            };
        }
        if !p.stops.is_empty() {
            let _ = writeln!(out, "  stops:");
        }
        for s in &p.stops {
            let o = &s.stop.outcome;
            let label = s.run_outcome.as_deref().map(|l| format!(" [{l}]")).unwrap_or_default();
            let _ = writeln!(
                out,
                "    {} {}{label} by {}: {} GPU-h saved; {}",
                o.at,
                s.run_name,
                s.stop.rule,
                hours(o.gpu_hours_saved),
                verdict_text(s)
            );
        }
    }

    fn render_tradeoff(&self, out: &mut String, policy: usize, name: &str) {
        let _ = writeln!(
            out,
            "\ntrade-off for {name} (* = Pareto front: no other setting saves as many GPU-hours with as few false stops and is better at one)"
        );
        let paths: Vec<&str> = self.candidates[0].settings.iter().map(|s| s.path.as_str()).collect();
        let widths: Vec<usize> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                self.candidates.iter().map(|c| c.settings[i].value.len()).max().unwrap_or(0).max(p.len())
            })
            .collect();
        let mut head = String::from("   ");
        for (p, w) in paths.iter().zip(&widths) {
            let _ = write!(head, " {p:<w$}");
        }
        let _ = writeln!(
            out,
            "{head} {:>7} {:>11} {:>11} {:>10} {:>11}",
            "stopped", "GPU-h saved", "false stops", "GPU-h lost", "median lead"
        );
        for c in &self.candidates {
            let p = &c.policies[policy];
            let mut line = format!("  {}", if p.pareto { '*' } else { ' ' });
            for (s, w) in c.settings.iter().zip(&widths) {
                let _ = write!(line, " {:<w$}", s.value);
            }
            let t = &p.totals;
            let _ = writeln!(
                out,
                "{line} {:>7} {:>11} {:>11} {:>10} {:>11}",
                t.stopped,
                hours(t.gpu_hours_saved),
                t.false_stops,
                hours(t.lost_gpu_hours),
                lead(t.median_lead_seconds)
            );
        }
    }
}
