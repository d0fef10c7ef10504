//! `no_expected_gain`: even an optimistic projection of the metric to the job's planned end gains too
//! little to be worth the rest of the run.
//!
//! The planned end is what only the platform knows: the job's `total_steps` (its last step) against its
//! `current_step`, or its progress percentage when it reports no steps (a job that reports neither is never
//! judged). The recent curve — the logged values of the last `window` of the planned run (`"33%"`) — is fit
//! by an ensemble: a straight line and saturating power laws `a + b·x^-c` (c from 0.1 to 3, `b` improving)
//! in the step, each by weighted least squares (a power law's `c` by variable projection over a fixed grid).
//! Each fit's projected gain from now to the planned end gets an upper bound of `confidence` standard
//! errors, the errors from the residuals and widened for their autocorrelation (training curves are not
//! independent noise, and a fit that ignores it is too sure of itself). The *optimistic* projection is the
//! largest such bound among the fits that explain the data about as well as the best (residuals within
//! 50 %). For a curve that keeps bending flatter (a convex loss) the straight line through its recent slope
//! is already optimistic; a curve with a step ahead (a learning-rate drop, a new epoch) is not what a fit of
//! its past can see, which is why a scheduled drop ahead holds the rule (`schedule: true`).
//!
//! The ensemble also holds the *tangent*: a straight line through the newest third of the window's points,
//! whose projection bounds the gains of a curve that keeps bending flatter from above however well a
//! saturating law explains its older points (a fast fall early on makes a power law look saturated while the
//! curve still creeps down, as it does under a decaying learning rate).
//!
//! With `schedule: true` (the default) a training metric (not `eval_*`) is not judged while another epoch
//! of at least a tenth of the run begins before the planned end (the planned epochs are
//! `current_epoch / (current_step / total_steps)`): a training loss drops when the data repeat, which no fit
//! of the epoch so far can see.
//!
//! The rule fires when, for every watched metric, even the optimistic gain is less than `minGain` of its
//! level now (and no more than `minDelta` in its own units), after `warmup` of the run, with at least
//! `minPoints` logged values in the window, and not in the last `minRemaining` of the run. The reason
//! says the projection: "loss 0.612 now, at best 0.608 by step 24000 (0.7 %, less than 1 %)".
//!
//! Memory is bounded per watched metric: the last [`RECENT`] logged values at full resolution and the
//! run before them in at most [`HISTORY_BINS`] bins, log-spaced in the step (neighbouring bins closest in
//! log-step are merged, each bin keeping the mean step and value of what it holds).
//!
//! Example: `uses: no_expected_gain`, `with: {metric: auto, minGain: "1%", window: "33%", warmup: "30%",
//! minRemaining: "15%", schedule: true}`.

use std::collections::VecDeque;

use super::levels::{self, Significance, Tracks, Watch};
use super::{Detector, DetectorInfo, DetectorState, Finding, ParamDoc, Params};
use crate::history::job::JobView;
use crate::history::job_series::JobSeries;
use crate::history::metric_series::Direction;
use crate::input::sample::{ProgressSample, same_name};
use crate::time::fmt_num;

pub(super) const INFO: DetectorInfo = DetectorInfo {
    name: "no_expected_gain",
    summary: "Even an optimistic projection of the recent curve to the job's planned last step gains less than minGain.",
    params: &[
        ParamDoc {
            name: "metric",
            ty: "string",
            default: "required",
            doc: "Canonical metric name; auto: the job's eval metrics (each must be out of gains), else loss.",
        },
        ParamDoc {
            name: "mode",
            ty: "min|max|auto",
            default: "auto",
            doc: "Which way is better (named metric).",
        },
        ParamDoc {
            name: "minGain",
            ty: "percent",
            default: "1%",
            doc: "The least gain by the planned end worth the rest of the run, relative to the level now.",
        },
        ParamDoc {
            name: "minDelta",
            ty: "number",
            default: "0",
            doc: "Gains up to this much in the metric's own units are not worth it either.",
        },
        ParamDoc {
            name: "window",
            ty: "percent",
            default: "33%",
            doc: "The recent part of the planned run the fits use.",
        },
        ParamDoc {
            name: "confidence",
            ty: "number",
            default: "2",
            doc: "Standard errors added to each fit's projected gain (the optimism).",
        },
        ParamDoc {
            name: "warmup",
            ty: "percent",
            default: "30%",
            doc: "Share of the planned run before the rule may fire.",
        },
        ParamDoc {
            name: "minPoints",
            ty: "values",
            default: "8",
            doc: "Logged values of each metric the window must hold.",
        },
        ParamDoc {
            name: "minRemaining",
            ty: "percent",
            default: "10%",
            doc: "Never fire in the last share of the planned run.",
        },
        ParamDoc {
            name: "smoothing",
            ty: "values",
            default: "5",
            doc: "The level now is the median of the last N logged values.",
        },
        ParamDoc {
            name: "schedule",
            ty: "bool",
            default: "true",
            doc: "Read the schedule: fit only after the last learning-rate step drop; hold while another drop, or (training metrics) a new epoch, is expected before the end.",
        },
    ],
    example: r#"{"metric": "auto", "minGain": "1%", "window": "33%", "warmup": "30%", "minRemaining": "15%"}"#,
    build,
};

/// Logged values kept at full resolution per watched metric.
pub(crate) const RECENT: usize = 32;
/// Bins of log-spaced history per watched metric.
pub(crate) const HISTORY_BINS: usize = 24;
/// Exponents of the power laws.
const EXPONENTS: [f64; 8] = [0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 3.0];
/// Fits whose residual sum is within this share of the best one's are plausible.
const PLAUSIBLE: f64 = 0.5;

#[derive(Debug, Clone)]
pub(super) struct NoGain {
    watch: Watch,
    min_gain: f64,
    min_delta: f64,
    window: f64,
    confidence: f64,
    warmup: f64,
    min_points: u64,
    min_remaining: f64,
    smoothing: usize,
    schedule: bool,
}

fn build(p: &mut Params<'_>) -> Option<Box<dyn Detector>> {
    let watch = Watch::parse(p, true);
    let min_gain = p.percent("minGain").unwrap_or(0.01);
    let min_delta = p.positive("minDelta", true).unwrap_or(0.0);
    let window = p.percent("window").unwrap_or(0.33);
    if window <= 0.0 {
        p.error("window", "must be more than 0%");
    }
    let confidence = p.positive("confidence", true).unwrap_or(2.0);
    let warmup = p.percent("warmup").unwrap_or(0.3);
    let min_points = p.count("minPoints").unwrap_or(8);
    if min_points < 3 {
        p.error(
            "minPoints",
            format!("must be at least 3 (a fit with its errors needs them), got {min_points}"),
        );
    }
    let min_remaining = p.percent("minRemaining").unwrap_or(0.1);
    let smoothing = p.count("smoothing").unwrap_or(5);
    if !(1..=levels::MAX_SMOOTHING as u64).contains(&smoothing) {
        p.error(
            "smoothing",
            format!("must be from 1 to {} logged values, got {smoothing}", levels::MAX_SMOOTHING),
        );
    }
    let schedule = p.bool("schedule").unwrap_or(true);
    Some(Box::new(NoGain {
        watch: watch?,
        min_gain,
        min_delta,
        window,
        confidence,
        warmup,
        min_points,
        min_remaining,
        smoothing: smoothing.clamp(1, levels::MAX_SMOOTHING as u64) as usize,
        schedule,
    }))
}

/// The level trackers and, per watched metric, its bounded history of logged values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoGainState {
    pub tracks: Tracks,
    pub histories: Vec<History>,
}

/// Some logged values of one metric, merged: their mean position and value, and how many.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    /// `ln lo` and `ln hi` (positions below 1e-9 taken as 1e-9), computed once: merging compares them.
    pub ln_lo: f64,
    pub ln_hi: f64,
    pub x: f64,
    pub y: f64,
    pub n: f64,
}

/// One metric's logged values: the newest at full resolution, the older ones log-spaced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    pub name: std::borrow::Cow<'static, str>,
    pub recent: VecDeque<(f64, f64)>,
    pub bins: Vec<Bin>,
}

impl History {
    fn push(&mut self, x: f64, y: f64) {
        if self.recent.len() == RECENT
            && let Some((ox, oy)) = self.recent.pop_front()
        {
            let ln = ox.max(1e-9).ln();
            self.bins.push(Bin { lo: ox, hi: ox, ln_lo: ln, ln_hi: ln, x: ox, y: oy, n: 1.0 });
            if self.bins.len() > HISTORY_BINS {
                self.merge_closest();
            }
        }
        self.recent.push_back((x, y));
    }

    /// Merges the two neighbouring bins that are closest in log-position, so the history stays log-spaced.
    fn merge_closest(&mut self) {
        let span = |a: &Bin, b: &Bin| b.ln_hi - a.ln_lo;
        let Some(i) = (0..self.bins.len() - 1).min_by(|&i, &j| {
            span(&self.bins[i], &self.bins[i + 1]).total_cmp(&span(&self.bins[j], &self.bins[j + 1]))
        }) else {
            return;
        };
        let (a, b) = (self.bins[i], self.bins[i + 1]);
        let n = a.n + b.n;
        self.bins[i] = Bin {
            lo: a.lo,
            hi: b.hi,
            ln_lo: a.ln_lo,
            ln_hi: b.ln_hi,
            x: (a.x * a.n + b.x * b.n) / n,
            y: (a.y * a.n + b.y * b.n) / n,
            n,
        };
        self.bins.remove(i + 1);
    }

    fn clear(&mut self) {
        self.recent.clear();
        self.bins.clear();
    }

    /// The points from `from` on: `(position, value, weight)`, oldest first.
    fn points_since(&self, from: f64) -> impl Iterator<Item = (f64, f64, f64)> + Clone + '_ {
        self.bins
            .iter()
            .filter(move |b| b.x >= from)
            .map(|b| (b.x, b.y, b.n))
            .chain(self.recent.iter().filter(move |(x, _)| *x >= from).map(|&(x, y)| (x, y, 1.0)))
    }
}

/// A fit's projection: its gain from now to the end, and the optimistic bound of that gain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Projection {
    pub gain: f64,
    pub optimistic: f64,
}

/// Weighted least squares of `y = a + b·φ` over `(φ, y, w)`: `(a, b, rss, var_b)`, `var_b` per unit of
/// residual variance.
fn least_squares(points: impl Iterator<Item = (f64, f64, f64)> + Clone) -> Option<(f64, f64, f64, f64)> {
    let (mut sw, mut sx, mut sxx, mut sy, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (x, y, w) in points.clone() {
        sw += w;
        sx += w * x;
        sxx += w * x * x;
        sy += w * y;
        sxy += w * x * y;
    }
    let det = sw * sxx - sx * sx;
    if !(det.is_finite() && det > 1e-12 * (sw * sxx).abs().max(f64::MIN_POSITIVE)) {
        return None;
    }
    let b = (sw * sxy - sx * sy) / det;
    let a = (sy - b * sx) / sw;
    let rss: f64 = points.map(|(x, y, w)| w * (y - a - b * x).powi(2)).sum();
    Some((a, b, rss, sw / det))
}

/// How much the autocorrelation of residuals widens a standard error: `sqrt((1 + ρ) / (1 − ρ))`, ρ the
/// lag-1 autocorrelation, clamped to [0, 0.9].
fn autocorrelation_factor(residuals: impl Iterator<Item = f64> + Clone) -> f64 {
    let (mut den, mut num, mut n, mut previous) = (0.0, 0.0, 0usize, None);
    for r in residuals {
        den += r * r;
        if let Some(p) = previous {
            num += p * r;
        }
        previous = Some(r);
        n += 1;
    }
    if n < 3 || den <= 0.0 {
        return 1.0;
    }
    let rho = (num / den).clamp(0.0, 0.9);
    ((1.0 + rho) / (1.0 - rho)).sqrt()
}

/// The ensemble's projection of improvement (in the "lower is better" sense) from position `now` to `end`
/// over `points` (`(position, value, weight)`, already oriented so that lower is better).
pub(crate) fn project(points: &[(f64, f64, f64)], now: f64, end: f64, z: f64) -> Option<Projection> {
    if points.len() < 3 || now <= 0.0 || end <= now {
        return None;
    }
    let k = points.len() as f64;
    // Positions as multiples of now: the grid of exponents then means the same on any step scale.
    let u: Vec<(f64, f64, f64)> = points.iter().map(|&(x, y, w)| ((x / now).max(1e-6), y, w)).collect();
    let ln_u: Vec<f64> = u.iter().map(|p| p.0.ln()).collect();
    let e = end / now;
    let mut fits: Vec<(f64, Projection)> = Vec::with_capacity(EXPONENTS.len() + 1);
    let mut phi: Vec<(f64, f64, f64)> = Vec::with_capacity(u.len());
    let mut residuals: Vec<f64> = Vec::with_capacity(u.len());
    // `basis` at every point (by its index, with its position) and at now (1) and the end (e).
    let mut add = |basis: &dyn Fn(usize, f64) -> f64, at_now: f64, at_end: f64, convex_only: bool| {
        phi.clear();
        phi.extend(u.iter().enumerate().map(|(i, &(x, y, w))| (basis(i, x), y, w)));
        let Some((a, b, rss, var_b)) = least_squares(phi.iter().copied()) else { return };
        if convex_only && b < 0.0 {
            return; // a power law that gets worse: not a saturating improvement
        }
        residuals.clear();
        residuals.extend(phi.iter().map(|&(x, y, _)| y - a - b * x));
        let sigma2 = rss / (k - 2.0).max(1.0);
        let dphi = at_now - at_end;
        let gain = b * dphi;
        let se =
            (sigma2 * var_b).max(0.0).sqrt() * dphi.abs() * autocorrelation_factor(residuals.iter().copied());
        fits.push((rss, Projection { gain, optimistic: gain + z * se }));
    };
    add(&|_, x: f64| -x, -1.0, -e, false);
    for c in EXPONENTS {
        // x^-c as exp(-c ln x), the logarithms taken once for all exponents.
        add(&|i, _| (-c * ln_u[i]).exp(), 1.0, e.powf(-c), true);
    }
    let best_rss = fits.iter().map(|f| f.0).fold(f64::INFINITY, f64::min);
    let plausible = fits.iter().filter(|f| f.0 <= best_rss * (1.0 + PLAUSIBLE) + f64::MIN_POSITIVE);
    let point = fits.iter().min_by(|a, b| a.0.total_cmp(&b.0))?.1.gain;
    let mut optimistic = plausible.map(|f| f.1.optimistic).fold(f64::NEG_INFINITY, f64::max);
    if let Some(tangent) = tangent_bound(u.iter().copied(), e, z) {
        optimistic = optimistic.max(tangent);
    }
    optimistic.is_finite().then(|| Projection { gain: point.max(0.0), optimistic: optimistic.max(0.0) })
}

/// The tangent's optimistic gain: a straight line through the newest third of the points, projected from
/// now to the planned end. For a curve that keeps bending flatter it bounds the gains from above, however
/// well a saturating law explains the older points (a fast fall early on makes a power law look saturated
/// while the curve still creeps down). The ensemble's optimistic gain is at least this, so a tangent that
/// already promises enough decides without the fits ([`NoGain`]'s check asks it first, on the points as
/// they lie in the history: no copy, two passes).
pub(crate) fn optimistic_tangent(
    points: impl Iterator<Item = (f64, f64, f64)> + Clone,
    now: f64,
    end: f64,
    z: f64,
) -> Option<f64> {
    if now <= 0.0 || end <= now {
        return None;
    }
    tangent_bound(points.map(move |(x, y, w)| ((x / now).max(1e-6), y, w)), end / now, z)
}

/// [`optimistic_tangent`] on positions already in multiples of now, `e` the end in the same unit.
fn tangent_bound(u: impl Iterator<Item = (f64, f64, f64)> + Clone, e: f64, z: f64) -> Option<f64> {
    let (lo, hi) =
        u.clone().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
    let from = hi - (hi - lo) / 3.0;
    let newest = u.filter(move |p| p.0 >= from);
    let count = newest.clone().count();
    if count < 3 {
        return None;
    }
    let (a, b, rss, var_b) = least_squares(newest.clone().map(|(x, y, w)| (-x, y, w)))?;
    let residuals = newest.map(move |(x, y, _)| y - a + b * x);
    let sigma2 = rss / (count as f64 - 2.0).max(1.0);
    let se = (sigma2 * var_b).max(0.0).sqrt() * (e - 1.0) * autocorrelation_factor(residuals);
    Some(b * (e - 1.0) + z * se)
}

impl NoGain {
    fn significance(&self) -> Significance {
        Significance { min_delta: self.min_delta, min_delta_pct: 0.0 }
    }
}

impl Detector for NoGain {
    fn watched_metric(&self) -> Option<(&str, Direction)> {
        match &self.watch {
            Watch::Named { metric, direction } => Some((metric, *direction)),
            Watch::Auto => None,
        }
    }

    fn judged_metrics(&self, finding: &std::collections::BTreeMap<String, f64>) -> Vec<(String, Direction)> {
        super::judged_from_finding(self.watched_metric(), finding)
    }

    fn reads_the_clock(&self) -> bool {
        false
    }

    fn observe(&self, state: &mut DetectorState, series: &JobSeries, sample: &ProgressSample) {
        if !matches!(state, DetectorState::NoGain(_)) {
            *state = DetectorState::NoGain(Box::default());
        }
        let DetectorState::NoGain(s) = state else { return };
        let drops = s.tracks.lr.drops;
        s.tracks.observe(&self.watch, self.smoothing, self.significance(), 0.0, series, sample);
        if self.schedule && s.tracks.lr.drops != drops {
            // A new regime: the fit starts afresh after a step drop of the learning rate.
            s.histories.iter_mut().for_each(History::clear);
        }
        let Some((x, _)) = levels::position(series) else { return };
        let NoGainState { tracks, histories } = &mut **s;
        for (name, _) in tracks.watching() {
            let name = name.as_ref();
            let Some(value) = sample.metric(name).filter(|v| v.is_finite()) else { continue };
            if !series.logged(name) {
                continue;
            }
            let i = match histories.iter().position(|h| same_name(&h.name, name)) {
                Some(i) => i,
                None if histories.len() < levels::MAX_TRACKS => {
                    histories.push(History { name: crate::input::interned(name), ..History::default() });
                    histories.len() - 1
                }
                None => continue,
            };
            histories[i].push(x, value);
        }
    }

    fn check(&self, state: &DetectorState, view: &JobView<'_>) -> Option<Finding> {
        let DetectorState::NoGain(s) = state else { return None };
        let fraction = levels::run_fraction(view.series)?;
        let (now, end) = levels::position(view.series)?;
        if fraction < self.warmup || 1.0 - fraction < self.min_remaining || end <= now {
            return None;
        }
        if self.schedule && s.tracks.lr.next_drop().is_some_and(|d| d > now && d <= end) {
            return None;
        }
        let watched = s.tracks.watched(&self.watch, view.series);
        if watched.is_empty() {
            return None;
        }
        // A training metric on a data set the run goes over again: the next epoch begins before the planned
        // end, and a training loss drops when the data repeat, which no fit of the epoch so far can see.
        let needed = Significance { min_delta: self.min_delta, min_delta_pct: self.min_gain * 100.0 };
        if self.schedule
            && watched.iter().any(|t| t.may_drop_at_epoch(needed))
            && levels::epoch_ahead(view.series, 1.0)
        {
            return None;
        }
        let from = now - self.window * end;
        let unit = if view.series.last.is_some_and(|l| l.current_step.is_some() && l.total_steps.is_some()) {
            "step "
        } else {
            ""
        };
        let mut parts = Vec::with_capacity(watched.len());
        let mut finding = Finding::new("");
        for t in watched {
            let history = s.histories.iter().find(|h| same_name(&h.name, &t.name))?;
            let sign = if t.direction == Direction::Min { 1.0 } else { -1.0 };
            // The window's points, on the stack (a history holds at most RECENT + HISTORY_BINS).
            let mut buffer = [(0.0, 0.0, 0.0); RECENT + HISTORY_BINS];
            let mut len = 0;
            let mut held = 0.0;
            for (slot, (x, y, w)) in buffer.iter_mut().zip(history.points_since(from)) {
                *slot = (x, sign * y, w);
                held += w;
                len += 1;
            }
            let points = &buffer[..len];
            if held < self.min_points as f64 {
                return None;
            }
            let level = t.current;
            let needed = (self.min_gain * level.abs()).max(self.min_delta);
            if !level.is_finite()
                || optimistic_tangent(points.iter().copied(), now, end, self.confidence)
                    .is_some_and(|g| g >= needed)
            {
                return None; // the tangent alone promises enough: the fits cannot say less
            }
            let projection = project(points, now, end, self.confidence)?;
            if projection.optimistic >= needed {
                return None;
            }
            let at_best = level - sign * projection.optimistic;
            let share = if level != 0.0 { projection.optimistic / level.abs() } else { 0.0 };
            parts.push(format!(
                "{} {} now, at best {} by {unit}{} ({} %, less than {} %)",
                t.name,
                fmt_num(round_sig(level)),
                fmt_num(round_sig(at_best)),
                fmt_num(end.round()),
                fmt_num((share * 1000.0).round() / 10.0),
                fmt_num((self.min_gain * 1000.0).round() / 10.0)
            ));
            finding = finding
                .value(&format!("level:{}", t.name), level)
                .value(&format!("atBest:{}", t.name), at_best)
                .value(&format!("projected:{}", t.name), level - sign * projection.gain);
        }
        finding.summary = parts.join("; ");
        Some(finding.value("plannedEnd", end).value("position", now))
    }
}

/// Four significant digits, for reasons.
fn round_sig(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(3 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{Job, detector, errors};
    use super::*;
    use serde_json::json;

    /// Feeds `values(step)` logged every `every` steps up to `upto` of `total`, with a learning rate.
    fn run(
        d: &dyn Detector,
        total: u32,
        every: u32,
        upto: u32,
        value: impl Fn(f64) -> f64,
        lr: impl Fn(f64) -> f64,
    ) -> (Job, Vec<(u32, Option<Finding>)>) {
        let mut job = Job::new();
        let mut fired = Vec::new();
        for step in (every..=upto).step_by(every as usize) {
            let x = f64::from(step);
            let t = i64::from(step) * 10;
            job.sample_at_step(d, t, &[("loss", value(x)), ("learning_rate", lr(x))], x, f64::from(total));
            fired.push((step, job.check(d, t)));
        }
        (job, fired)
    }

    fn first_fire(fired: &[(u32, Option<Finding>)]) -> Option<(u32, String)> {
        fired.iter().find_map(|(s, f)| f.as_ref().map(|f| (*s, f.summary.clone())))
    }

    /// Deterministic noise in [-1, 1].
    fn noise(x: f64) -> f64 {
        ((x * 12.9898).sin() * 43758.5453).rem_euclid(1.0) * 2.0 - 1.0
    }

    #[test]
    fn a_plateau_with_noise_fires_and_says_its_projection() {
        let d = detector("no_expected_gain", json!({"metric": "loss", "minGain": "1%"}));
        // Falls to 0.6 by step 2000, then flat with ±0.2 % noise to step 10000.
        let (_, fired) = run(
            d.as_ref(),
            10000,
            50,
            9000,
            |x| 0.6 + 0.8 * (-x / 400.0).exp() + 0.0012 * noise(x),
            |_| 1e-4,
        );
        let (step, summary) = first_fire(&fired).expect("a flat curve is out of gains");
        // Not before the warmup (30 %), and once the fit's window (33 % of the run) has left the fall behind.
        assert!((3000..=6500).contains(&step), "at {step}: {summary}");
        assert!(summary.starts_with("loss 0.") && summary.contains(" now, at best 0."), "{summary}");
        assert!(summary.contains("by step 10000 ("), "{summary}");
        assert!(summary.ends_with("less than 1 %)"), "{summary}");
    }

    #[test]
    fn a_slow_improver_is_left_alone() {
        // A loss creeping down 1 % of its level every 10 % of the run, under noise twice as large as each
        // log's gain: still 2 % or more to gain when the rule may judge it.
        let d = detector("no_expected_gain", json!({"metric": "loss", "minGain": "1%"}));
        let (_, fired) = run(
            d.as_ref(),
            10000,
            50,
            9000,
            |x| 0.5 + 0.05 * (1.0 - x / 10000.0) + 0.002 * noise(x),
            |_| 1e-4,
        );
        assert_eq!(first_fire(&fired), None);
    }

    #[test]
    fn a_scheduled_drop_ahead_holds_it() {
        // Step decay every 4000 steps: flat between drops, each drop lowers the loss by 10 %. Blind to the
        // schedule, the flat stretch before the drop at 8000 fires; reading it, the rule expects that drop
        // from the first one (at 4000, one period after the start) and holds. (Before the first drop no
        // schedule is known: the warmup, 45 %, starts judging after it.)
        let lr = |x: f64| 1e-3 * 0.1f64.powi((x / 4000.0).floor() as i32);
        let loss = |x: f64| 1.0 - 0.1 * (x / 4000.0).floor() + 0.001 * noise(x);
        let aware = detector("no_expected_gain", json!({"metric": "loss", "warmup": "45%"}));
        let (_, fired) = run(aware.as_ref(), 10000, 50, 8900, loss, lr);
        // It holds through the flat stretch before the drop, and judges the new regime after it on its own
        // values (flat again here, with no further drop expected before the end).
        let (step, _) = first_fire(&fired).expect("flat after the last drop");
        assert!(step > 8000, "held until the drop: {step}");
        let blind =
            detector("no_expected_gain", json!({"metric": "loss", "warmup": "45%", "schedule": false}));
        let (_, fired) = run(blind.as_ref(), 10000, 50, 8900, loss, lr);
        let (step, _) = first_fire(&fired).expect("blind to the schedule");
        assert!((7000..8000).contains(&step), "{step}");
    }

    #[test]
    fn a_recovered_spike_is_not_a_loss_of_gains() {
        // A loss still falling 10 % over the rest of the run, with a 5× spike at step 5000 that it recovers
        // from at the next log: the spike moves neither the level nor the fits enough to call it flat.
        let d = detector("no_expected_gain", json!({"metric": "loss", "minGain": "1%"}));
        let base = |x: f64| 0.5 + 0.2 * (1.0 - x / 10000.0) + 0.001 * noise(x);
        let (_, fired) =
            run(d.as_ref(), 10000, 50, 9000, |x| if x == 5000.0 { 5.0 * base(x) } else { base(x) }, |_| 1e-4);
        assert_eq!(first_fire(&fired), None);
    }

    /// Feeds a run of 10000 steps that logs its training loss every 50 steps and evaluates every 1000 (each
    /// report re-sends the latest eval_loss, as the callback does); the first fire.
    fn eval_gap_run(
        d: &dyn Detector,
        loss: impl Fn(f64) -> f64,
        eval: impl Fn(f64) -> f64,
    ) -> Option<(u32, String)> {
        let mut job = Job::new();
        let mut latest_eval = None;
        for step in (50..=9000u32).step_by(50) {
            let x = f64::from(step);
            if step % 1000 == 0 {
                latest_eval = Some(eval(x));
            }
            let mut metrics = vec![("loss", loss(x))];
            if let Some(e) = latest_eval {
                metrics.push(("eval_loss", e));
            }
            let t = i64::from(step) * 10;
            job.sample_at_step(d, t, &metrics, x, 10000.0);
            if let Some(f) = job.check(d, t) {
                return Some((step, f.summary));
            }
        }
        None
    }

    #[test]
    fn an_eval_gap_reporter_is_judged_on_its_evaluations() {
        // metric: auto watches eval_loss once the job reports one. A training loss flat from the start
        // does not stop a run whose evaluation still improves 3 % per evaluation ...
        let d = detector("no_expected_gain", json!({"metric": "auto", "minGain": "1%", "minPoints": 4}));
        let flat = |x: f64| 0.8 + 0.001 * noise(x);
        assert_eq!(eval_gap_run(d.as_ref(), flat, |x| 1.0 - 0.03 * x / 1000.0), None);
        // ... and an evaluation that stopped improving is out of gains, whatever the training loss does.
        let falling = |x: f64| 0.8 - 0.3 * x / 10000.0;
        let (step, summary) =
            eval_gap_run(d.as_ref(), falling, |x| 0.7 + 0.0005 * noise(x)).expect("a flat evaluation");
        assert!(summary.starts_with("eval_loss "), "{step}: {summary}");
    }

    #[test]
    fn it_needs_a_planned_end() {
        let d = detector("no_expected_gain", json!({"metric": "loss"}));
        let mut job = Job::new();
        for i in 0..200 {
            job.sample(d.as_ref(), i * 60, &[("loss", 1.0)], None, None);
        }
        assert!(job.check(d.as_ref(), 200 * 60).is_none());
    }

    #[test]
    fn memory_stays_bounded_and_log_spaced() {
        let mut h = History::default();
        for i in 1..=100_000 {
            h.push(f64::from(i), 1.0);
        }
        assert_eq!(h.recent.len(), RECENT);
        assert_eq!(h.bins.len(), HISTORY_BINS);
        let held: f64 = h.bins.iter().map(|b| b.n).sum::<f64>() + h.recent.len() as f64;
        assert_eq!(held, 100_000.0, "nothing is lost, only merged");
        // Log-spaced: each bin spans a similar log-range (within a factor of 3 of the median span).
        let mut spans: Vec<f64> = h.bins.iter().map(|b| (b.hi / b.lo).ln()).filter(|s| *s > 0.0).collect();
        spans.sort_by(f64::total_cmp);
        let median = spans[spans.len() / 2];
        assert!(spans.iter().all(|s| *s < 3.0 * median + 1e-9), "{spans:?}");
    }

    #[test]
    fn projections_of_known_curves() {
        // An exact power law 1 + x^-0.5 from 1000 to 2000 (of 10000): the fits find the gain to 10000.
        let pts: Vec<(f64, f64, f64)> =
            (1000..=2000).step_by(50).map(|x| (f64::from(x), 1.0 + f64::from(x).powf(-0.5), 1.0)).collect();
        let p = project(&pts, 2000.0, 10000.0, 2.0).unwrap();
        let truth = 2000f64.powf(-0.5) - 10000f64.powf(-0.5);
        assert!((p.gain - truth).abs() < 0.1 * truth, "{p:?} vs {truth}");
        assert!(p.optimistic >= p.gain);
        // A flat line: no gain, and with no noise no optimism either.
        let flat: Vec<(f64, f64, f64)> = (1..=20).map(|x| (f64::from(x), 3.0, 1.0)).collect();
        let p = project(&flat, 20.0, 100.0, 2.0).unwrap();
        assert!(p.gain.abs() < 1e-9 && p.optimistic < 1e-9, "{p:?}");
    }

    #[test]
    fn parameters_are_checked() {
        let e = errors(
            "no_expected_gain",
            json!({"metric": "auto", "mode": "min", "minGain": "150%", "minPoints": 2, "window": 0}),
        );
        assert_eq!(
            e,
            vec![
                "with.mode: metric: auto infers each metric's direction from its name; leave mode out",
                "with.minGain: expected a percentage from 0 to 100 such as \"25%\", got \"150%\"",
                "with.window: must be more than 0%",
                "with.minPoints: must be at least 3 (a fit with its errors needs them), got 2",
            ]
        );
    }

    #[test]
    fn property_a_strictly_improving_curve_never_fires() {
        // Strictly decreasing curves of many shapes and scales, still improving by more than minGain over
        // the rest of the run: the rule never fires on any of them.
        let d = detector("no_expected_gain", json!({"metric": "loss", "minGain": "1%"}));
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % 10_000) as f64 / 10_000.0
        };
        for case in 0..40 {
            let scale = 10f64.powf(next() * 4.0 - 2.0);
            let floor = scale * next();
            let c = 0.2 + next();
            // Linear decay that keeps a 5 % gain over the last 10 % of the run, on top of a power law.
            let curve = move |x: f64| floor + scale * (x.powf(-c) + 0.5 * (1.0 - x / 10000.0));
            let (_, fired) = run(d.as_ref(), 10000, 50, 9000, curve, |_| 1e-4);
            assert_eq!(first_fire(&fired), None, "case {case}: scale {scale} floor {floor} c {c}");
        }
    }
}
