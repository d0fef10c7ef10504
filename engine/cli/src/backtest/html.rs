//! The backtest as one self-contained HTML page (no network: styles, SVG charts and the small hover script
//! are inline). Per policy: its totals, the trade-off chart of the sweep's settings (GPU-hours saved against
//! false stops, the Pareto front joined), and per stopped run its target curve with the stop marked, what the
//! run did afterwards, and the saving — for false stops the improvement the stop would have thrown away.

use std::fmt::Write as _;

use trainwarden_core::Timestamp;
use trainwarden_core::backtest::report::{PolicyReport, Report, RunSummary, StopEntry};
use trainwarden_core::{fmt_num, plural};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 220.0;
const PAD_LEFT: f64 = 56.0;
const PAD_RIGHT: f64 = 16.0;
const PAD_TOP: f64 = 14.0;
const PAD_BOTTOM: f64 = 30.0;

/// Colours of the page; the tests look for the curve's in a screenshot.
pub(crate) const BEFORE_COLOUR: &str = "#1f5fbf";
const AFTER_COLOUR: &str = "#9aa5b1";
const STOP_COLOUR: &str = "#d62728";
const FRONT_COLOUR: &str = "#2ca02c";

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Hours and GPU-hours, as every output prints them ([`trainwarden_core::fmt_gpu_hours`]).
fn num(v: f64) -> String {
    trainwarden_core::fmt_gpu_hours(v)
}

fn pct(v: Option<f64>) -> String {
    match v {
        Some(r) if r.is_finite() => format!("{} %", fmt_num((r * 1000.0).round() / 10.0)),
        _ => "from nothing".into(),
    }
}

/// The page.
pub(crate) fn render(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(HEAD);
    let _ = writeln!(
        out,
        "<h1>trainwarden backtest</h1>\n<p class=\"lead\">{} from {}; every rule enforced; a stop is \
         <em>false</em> when {} improved by more than {}{} after it.</p>",
        plural(report.runs.len() as u64, "run", "runs"),
        plural(report.files as u64, "file", "files"),
        report
            .target
            .as_deref()
            .map_or("the rule's metric".to_string(), |t| format!("<code>{}</code>", escape(t))),
        pct(Some(report.tolerance)),
        if report.min_improvement > 0.0 {
            format!(" and {}", fmt_num(report.min_improvement))
        } else {
            String::new()
        },
    );
    let Some(base) = report.candidates.first() else {
        out.push_str(TAIL);
        return out;
    };
    if !base.settings.is_empty() {
        let set: Vec<String> = base.settings.iter().map(|s| format!("{}={}", s.path, s.value)).collect();
        let _ =
            writeln!(out, "<p>Runs below: the first setting, <code>{}</code>.</p>", escape(&set.join(" ")));
    }
    for (i, policy) in base.policies.iter().enumerate() {
        let _ = writeln!(out, "<section class=\"policy\"><h2>{}</h2>", escape(&policy.policy));
        totals(&mut out, policy);
        if report.candidates.len() > 1 {
            tradeoff(&mut out, report, i);
        }
        if policy.stops.is_empty() {
            out.push_str("<p>This policy stops no run of the corpus.</p>\n");
        }
        for stop in &policy.stops {
            run_chart(&mut out, &report.runs[stop.run], stop);
        }
        out.push_str("</section>\n");
    }
    out.push_str(TAIL);
    out
}

fn totals(out: &mut String, p: &PolicyReport) {
    let t = &p.totals;
    let dollars = t
        .dollars_saved
        .map(|d| format!(" ({})", trainwarden_core::fmt_money(Some(d), trainwarden_core::Cents::Rounded)))
        .unwrap_or_default();
    let worst = match &t.worst_regret {
        None => "none".to_string(),
        Some(w) if w.relative.is_none() => format!(
            "{} stopped by {} {} {}",
            escape(&w.run_name),
            escape(&w.rule),
            if w.from_zero { "at a best of 0 of" } else { "before any report of" },
            escape(&w.target)
        ),
        Some(w) => format!("{} in {} by {}", pct(w.relative), escape(&w.run_name), escape(&w.rule)),
    };
    let lead = t.median_lead_seconds.map_or("-".to_string(), trainwarden_core::fmt_span);
    let _ = writeln!(
        out,
        "<table class=\"totals\"><tr><th>mode as written</th><td>{}</td><th>runs seen</th><td>{}</td><th>stopped</th>\
         <td>{}</td></tr>\n<tr><th>GPU-h saved</th><td>{}{dollars}</td><th>false stops</th><td class=\"{}\">{}</td>\
         <th>GPU-h of good work lost</th><td>{}</td></tr>\n<tr><th>worst regret</th><td colspan=\"3\">{worst}</td>\
         <th>median lead time</th><td>{lead}</td></tr></table>",
        escape(&p.mode_as_written),
        t.runs_seen,
        t.stopped,
        num(t.gpu_hours_saved),
        if t.false_stops > 0 { "bad" } else { "good" },
        t.false_stops,
        num(t.lost_gpu_hours),
    );
    out.push_str("<table class=\"rules\"><tr><th>rule</th><th>stopped</th><th>GPU-h saved</th><th>false stops</th><th>GPU-h lost</th></tr>\n");
    for r in &p.rules {
        let x = &r.totals;
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.rule),
            x.stopped,
            num(x.gpu_hours_saved),
            x.false_stops,
            num(x.lost_gpu_hours)
        );
    }
    out.push_str("</table>\n");
}

/// A linear scale from a data range onto pixels.
#[derive(Clone, Copy)]
struct Scale {
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Scale {
    fn new(lo: f64, hi: f64, from: f64, to: f64) -> Self {
        let (lo, hi) = if hi > lo { (lo, hi) } else { (lo - 0.5, lo + 0.5) };
        Scale { lo, hi, from, to }
    }

    fn at(self, v: f64) -> f64 {
        self.from + (v - self.lo) / (self.hi - self.lo) * (self.to - self.from)
    }
}

/// Axes with five ticks each; `whole_x`: the x values are counts, ticked at whole numbers.
fn axes(out: &mut String, x: Scale, y: Scale, x_label: &str, y_label: &str, whole_x: bool) {
    let _ = write!(
        out,
        "<line class=\"axis\" x1=\"{l}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\"/><line class=\"axis\" x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{b}\"/>",
        l = PAD_LEFT,
        r = WIDTH - PAD_RIGHT,
        t = PAD_TOP,
        b = HEIGHT - PAD_BOTTOM
    );
    for i in 0..=4 {
        let v = y.lo + (y.hi - y.lo) * f64::from(i) / 4.0;
        let py = y.at(v);
        let _ = write!(
            out,
            "<text class=\"tick\" x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            PAD_LEFT - 4.0,
            py + 4.0,
            short(v)
        );
        let vx = x.lo + (x.hi - x.lo) * f64::from(i) / 4.0;
        if whole_x && vx.fract() != 0.0 {
            continue;
        }
        let _ = write!(
            out,
            "<text class=\"tick\" x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            x.at(vx),
            HEIGHT - PAD_BOTTOM + 14.0,
            if whole_x { format!("{vx:.0}") } else { short(vx) }
        );
    }
    let _ = write!(
        out,
        "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><text class=\"label\" x=\"4\" y=\"10\">{}</text>",
        WIDTH - PAD_RIGHT,
        HEIGHT - 2.0,
        escape(x_label),
        escape(y_label)
    );
}

fn short(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn hours_since(start: Timestamp, t: Timestamp) -> f64 {
    (t.as_second() - start.as_second()) as f64 / 3600.0
}

/// One stopped run: its target curve up to the stop, afterwards in grey, the stop as a red line, and for
/// a false stop the best before and the better best after.
fn run_chart(out: &mut String, run: &RunSummary, entry: &StopEntry) {
    let stop = &entry.stop;
    let o = &stop.outcome;
    let points = run.curves.get(&stop.target).map(Vec::as_slice).unwrap_or(&[]);
    let finite: Vec<(f64, f64)> =
        points.iter().filter(|(_, v)| v.is_finite()).map(|(t, v)| (hours_since(run.start, *t), *v)).collect();
    let end = hours_since(run.start, run.end).max(0.0);
    let at = hours_since(run.start, o.at);
    let (lo, hi) =
        finite.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, v)| (a.min(*v), b.max(*v)));
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) };
    let margin = (hi - lo) * 0.05;
    let x = Scale::new(0.0, end.max(at), PAD_LEFT, WIDTH - PAD_RIGHT);
    let y = Scale::new(lo - margin, hi + margin, HEIGHT - PAD_BOTTOM, PAD_TOP);
    let verdict = if !o.measured {
        format!("not judged: the run never reported {}", escape(&stop.target))
    } else if o.false_stop && o.best_before.is_none() {
        format!("<span class=\"bad\">false stop</span>: before any {} was reported", escape(&stop.target))
    } else if o.false_stop && o.relative_improvement.is_none() {
        format!(
            "<span class=\"bad\">false stop</span>: {} improved from 0 to {} afterwards",
            escape(&stop.target),
            o.best_after.map_or("-".into(), short)
        )
    } else if o.false_stop {
        format!(
            "<span class=\"bad\">false stop</span>: {} improved {} afterwards ({} → {})",
            escape(&stop.target),
            pct(o.relative_improvement),
            o.best_before.map_or("-".into(), short),
            o.best_after.map_or("-".into(), short)
        )
    } else {
        match (o.trouble, o.lead_seconds) {
            (Some(k), Some(l)) => format!(
                "<span class=\"good\">right</span>: {} for {} before the stop",
                k.as_str(),
                trainwarden_core::fmt_span(l)
            ),
            _ => format!(
                "<span class=\"good\">right</span>: {} did not improve afterwards",
                escape(&stop.target)
            ),
        }
    };
    let _ = writeln!(
        out,
        "<figure class=\"run\"><figcaption><b>{}</b> stopped by <code>{}</code> at {:.1} h of {:.1} h: saved {} GPU-h; {verdict}</figcaption>",
        escape(&run.name),
        escape(&stop.rule),
        at,
        end,
        num(o.gpu_hours_saved)
    );
    let data: Vec<String> = finite.iter().map(|(t, v)| format!("[{t:.4},{v}]")).collect();
    let _ = write!(
        out,
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" data-x0=\"{}\" data-x1=\"{}\" \
         data-px0=\"{PAD_LEFT}\" data-px1=\"{}\" data-points=\"[{}]\" role=\"img\" aria-label=\"{} over time\">",
        x.lo,
        x.hi,
        WIDTH - PAD_RIGHT,
        data.join(","),
        escape(&stop.target)
    );
    axes(out, x, y, "hours since start", &stop.target, false);
    // The saving: the span from the stop to the real end.
    let _ = write!(
        out,
        "<rect class=\"saved\" x=\"{:.1}\" y=\"{PAD_TOP}\" width=\"{:.1}\" height=\"{}\"/>",
        x.at(at),
        (x.at(end) - x.at(at)).max(0.0),
        HEIGHT - PAD_BOTTOM - PAD_TOP
    );
    let path = |pts: &[(f64, f64)]| -> String {
        pts.iter()
            .enumerate()
            .map(|(i, (t, v))| format!("{}{:.1},{:.1}", if i == 0 { 'M' } else { 'L' }, x.at(*t), y.at(*v)))
            .collect()
    };
    let split = finite.partition_point(|(t, _)| *t <= at);
    let after_from = split.saturating_sub(1);
    if split < finite.len() {
        let _ = write!(
            out,
            "<path d=\"{}\" stroke=\"{AFTER_COLOUR}\" class=\"after\"/>",
            path(&finite[after_from..])
        );
    }
    if split > 0 {
        let _ = write!(
            out,
            "<path d=\"{}\" stroke=\"{BEFORE_COLOUR}\" class=\"before\"/>",
            path(&finite[..split])
        );
    }
    for (t, v) in points.iter().filter(|(_, v)| !v.is_finite()) {
        let _ = write!(
            out,
            "<line class=\"nonfinite\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{}\" y2=\"{}\"><title>{v} at {:.2} h</title></line>",
            HEIGHT - PAD_BOTTOM - 8.0,
            HEIGHT - PAD_BOTTOM,
            hours_since(run.start, *t),
            x = x.at(hours_since(run.start, *t)),
        );
    }
    if o.false_stop
        && let (Some(b), Some(a)) = (o.best_before, o.best_after)
    {
        for (value, class) in [(b, "best-before"), (a, "best-after")] {
            let _ = write!(
                out,
                "<line class=\"{class}\" x1=\"{PAD_LEFT}\" x2=\"{}\" y1=\"{py:.1}\" y2=\"{py:.1}\"/>",
                WIDTH - PAD_RIGHT,
                py = y.at(value)
            );
        }
    }
    let _ = write!(
        out,
        "<line x1=\"{sx:.1}\" x2=\"{sx:.1}\" y1=\"{PAD_TOP}\" y2=\"{}\" stroke=\"{STOP_COLOUR}\" class=\"stop\"/>\
         <text class=\"stoplabel\" x=\"{:.1}\" y=\"{}\">stop</text>",
        HEIGHT - PAD_BOTTOM,
        x.at(at) + 3.0,
        PAD_TOP + 10.0,
        sx = x.at(at),
    );
    out.push_str("<text class=\"hover\" x=\"0\" y=\"0\"></text></svg></figure>\n");
}

/// GPU-hours saved against false stops, one point per setting; the Pareto front joined.
fn tradeoff(out: &mut String, report: &Report, policy: usize) {
    let points: Vec<(f64, f64, bool, String)> = report
        .candidates
        .iter()
        .map(|c| {
            let p = &c.policies[policy];
            let label =
                c.settings.iter().map(|s| format!("{}={}", leaf(&s.path), s.value)).collect::<Vec<_>>();
            (p.totals.false_stops as f64, p.totals.gpu_hours_saved, p.pareto, label.join(" "))
        })
        .collect();
    let max_x = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let max_y = points.iter().map(|p| p.1).fold(0.0, f64::max);
    // Four whole-number steps, so every tick of the count axis is a whole number.
    let x = Scale::new(0.0, ((max_x + 1.0) / 4.0).ceil().max(1.0) * 4.0, PAD_LEFT, WIDTH - PAD_RIGHT);
    let y = Scale::new(0.0, (max_y * 1.1).max(1.0), HEIGHT - PAD_BOTTOM, PAD_TOP);
    let _ = write!(
        out,
        "<figure class=\"tradeoff\"><figcaption>Trade-off over the settings: GPU-hours saved against false stops \
         (green: the Pareto front, where no other setting saves as many GPU-hours with as few false stops and is better at one).</figcaption>\
         <svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"trade-off\">"
    );
    axes(out, x, y, "false stops", "GPU-h saved", true);
    let mut front: Vec<&(f64, f64, bool, String)> = points.iter().filter(|p| p.2).collect();
    front.sort_by(|a, b| a.0.total_cmp(&b.0));
    let d: String = front
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}{:.1},{:.1}", if i == 0 { 'M' } else { 'L' }, x.at(p.0), y.at(p.1)))
        .collect();
    let _ = write!(out, "<path d=\"{d}\" stroke=\"{FRONT_COLOUR}\" class=\"front\"/>");
    for (fx, fy, on_front, label) in &points {
        let _ = write!(
            out,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\" class=\"{}\"><title>{}: {} GPU-h saved, {} false stops</title></circle>",
            x.at(*fx),
            y.at(*fy),
            if *on_front { "on-front" } else { "dominated" },
            escape(label),
            num(*fy),
            fx
        );
    }
    out.push_str("</svg></figure>\n<table class=\"rules\"><tr><th></th><th>setting</th><th>stopped</th><th>GPU-h saved</th><th>false stops</th><th>GPU-h lost</th></tr>\n");
    for (c, (_, _, on_front, label)) in report.candidates.iter().zip(&points) {
        let t = &c.policies[policy].totals;
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if *on_front { "★" } else { "" },
            escape(label),
            t.stopped,
            num(t.gpu_hours_saved),
            t.false_stops,
            num(t.lost_gpu_hours)
        );
    }
    out.push_str("</table>\n");
}

/// `rules[loss-plateau].with.window` → `window`.
fn leaf(path: &str) -> &str {
    path.rsplit('.').next().unwrap_or(path)
}

const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>trainwarden backtest</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2733; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #d0d7de; }
table { border-collapse: collapse; margin: 8px 0; } th, td { padding: 3px 10px; text-align: left; }
table.totals th { color: #57606a; font-weight: normal; } table.rules th { border-bottom: 1px solid #d0d7de; }
.bad { color: #b42318; font-weight: 600; } .good { color: #18794e; font-weight: 600; }
figure { display: inline-block; margin: 8px 16px 16px 0; vertical-align: top; }
figcaption { max-width: 640px; font-size: 13px; margin-bottom: 4px; }
svg.chart { background: #fff; border: 1px solid #d0d7de; }
.axis { stroke: #57606a; stroke-width: 1; } .tick, .label { font-size: 10px; fill: #57606a; }
path { fill: none; stroke-width: 2; } path.after { stroke-dasharray: 4 3; }
rect.saved { fill: #d62728; fill-opacity: 0.07; }
line.stop { stroke-width: 2; } .stoplabel { font-size: 10px; fill: #d62728; }
line.nonfinite { stroke: #d62728; stroke-width: 2; }
line.best-before { stroke: #1f5fbf; stroke-dasharray: 2 2; } line.best-after { stroke: #18794e; stroke-dasharray: 2 2; }
circle.on-front { fill: #2ca02c; } circle.dominated { fill: #9aa5b1; }
.hover { font-size: 11px; fill: #1d2733; }
</style></head><body>
"#;

/// The hover read-out: the nearest recorded point under the pointer.
const TAIL: &str = r#"<script>
"use strict";
for (const svg of document.querySelectorAll("svg[data-points]")) {
  const points = JSON.parse(svg.dataset.points);
  const x0 = Number(svg.dataset.x0), x1 = Number(svg.dataset.x1);
  const px0 = Number(svg.dataset.px0), px1 = Number(svg.dataset.px1);
  const label = svg.querySelector("text.hover");
  svg.addEventListener("mousemove", (e) => {
    const box = svg.getBoundingClientRect();
    const px = (e.clientX - box.left) * (svg.viewBox.baseVal.width / box.width);
    const hours = x0 + (px - px0) / (px1 - px0) * (x1 - x0);
    let best = null;
    for (const p of points) if (best === null || Math.abs(p[0] - hours) < Math.abs(best[0] - hours)) best = p;
    if (best === null) return;
    label.setAttribute("x", String(Math.min(px + 6, px1 - 120)));
    label.setAttribute("y", "24");
    label.textContent = best[0].toFixed(2) + " h: " + best[1];
  });
}
document.body.dataset.charts = String(document.querySelectorAll("svg.chart").length);
</script>
</body></html>
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped() {
        assert_eq!(escape("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn scales_map_ranges_and_survive_flat_data() {
        let s = Scale::new(0.0, 10.0, 100.0, 200.0);
        assert_eq!(s.at(5.0), 150.0);
        let flat = Scale::new(3.0, 3.0, 0.0, 10.0);
        assert_eq!(flat.at(3.0), 5.0);
    }
}
