//! What a job's judgement needs to survive a restart ([`Evaluator::checkpoint`],
//! [`Evaluator::restore_history`]): its history (`history::checkpoint`) and the memories of its stateful
//! detectors (the plateau's reference best and sample clock, the overtraining waits), versioned, tied to the
//! job's uid and at most [`MAX_CHECKPOINT_BYTES`] long. The controller keeps it in an annotation on the
//! TrainJob; the rule memories (pending, firing, cooldowns) stay in the policy status. A snooze in force
//! is kept too (its value and when it was first seen, so the administrator's cap runs from the same
//! instant after a restart, and a snooze that ended while no controller ran releases its actions at the
//! first evaluation after the restart).
//!
//! A detector memory is keyed by policy, rule name and the rule's definition hash, so a rule edited while
//! nobody watched starts afresh instead of inheriting a patience that belonged to other parameters.

use super::Evaluator;
use super::memory::rule_hash;
use super::snooze::SnoozeTrack;
use crate::history::checkpoint::{Num, SeriesWire};
use crate::history::fnv1a;
use crate::input::sample::JobKey;
use crate::judge::detectors::{DetectorState, OvertrainingState, PlateauState};
use crate::policy::PolicyRef;
use crate::time::{Timestamp, add_seconds, seconds};

/// The checkpoint format this build writes and reads.
pub const CHECKPOINT_VERSION: u32 = 1;

/// The most bytes a checkpoint takes. Ring points are left out, oldest first, then metrics, last reported
/// first, until it fits; the detector memories and the progress fields are never left out.
pub const MAX_CHECKPOINT_BYTES: usize = 4096;

/// A job's checkpoint, ready to be stored.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryCheckpoint {
    /// The JSON text (at most [`MAX_CHECKPOINT_BYTES`]).
    pub text: String,
    /// A hash of everything but the time it was taken: equal content, equal hash (so an unchanged history is
    /// not written again).
    pub content: u64,
    /// Ring points left out to fit the byte budget.
    pub points_left_out: usize,
    /// Metrics left out to fit the byte budget.
    pub metrics_left_out: usize,
}

/// What [`Evaluator::restore_history`] restored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRestored {
    /// Samples the history had counted.
    pub samples: u64,
    /// Metrics restored.
    pub metrics: usize,
    /// Detector memories restored.
    pub detectors: usize,
    /// Detector memories ignored: their policy or rule is gone or was edited since.
    pub detectors_ignored: usize,
}

/// Why a checkpoint was not restored. Each says what to do about it; none is fatal: the job's history
/// starts afresh, as it did before checkpoints existed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum HistoryRefused {
    /// Not a checkpoint this build can read (not JSON, a field of the wrong type, a time out of range).
    #[error("the checkpoint cannot be read ({0}); the job's history starts afresh and is saved anew")]
    Unreadable(String),
    /// Written by a newer (or unknown) format.
    #[error(
        "the checkpoint has format version {found}, this controller reads version {CHECKPOINT_VERSION}; the job's history starts afresh (a downgrade? upgrade the controller to keep it)"
    )]
    UnknownVersion {
        /// The version found.
        found: u32,
    },
    /// Saved for another object of the same name (the TrainJob was re-created with its annotations copied).
    #[error(
        "the checkpoint belongs to TrainJob uid {found}, not to this one ({expected}); the job's history starts afresh"
    )]
    OtherJob {
        /// This TrainJob's uid.
        expected: String,
        /// The uid the checkpoint names.
        found: String,
    },
    /// The job already has samples in this run: what this run recorded is newer than any checkpoint.
    #[error("the job already has history in this run; the checkpoint is not needed")]
    AlreadyHasHistory,
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Wire {
    v: u32,
    uid: String,
    /// The origin of every relative time: the newest sample (or when the job was first seen).
    o: Timestamp,
    /// When the job was first seen, relative to `o`.
    #[serde(rename = "fs")]
    first_seen: Num,
    #[serde(rename = "s")]
    series: SeriesWire,
    #[serde(rename = "d", default, skip_serializing_if = "Vec::is_empty")]
    detectors: Vec<DetectorWire>,
    /// The snooze holding the job's actions: its value and when it was first seen (the cap runs from
    /// there). Optional, so version 1 reads checkpoints written with and without it, either way round.
    #[serde(rename = "z", default, skip_serializing_if = "Option::is_none")]
    snooze: Option<SnoozeWire>,
    /// How many snoozes the job has had (for `spec.snooze.maxPerJob`); optional like `z`.
    #[serde(rename = "zn", default, skip_serializing_if = "is_zero")]
    snoozes: u32,
    /// The job's last training checkpoint (step, request id, when first reported); optional like `z`.
    #[serde(rename = "ck", default, skip_serializing_if = "Option::is_none")]
    training_checkpoint: Option<TrainingCheckpointWire>,
    /// When the checkpoint was taken. Last, and not part of [`HistoryCheckpoint::content`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at: Option<Timestamp>,
}

/// [`crate::SavedCheckpoint`] in a history checkpoint.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct TrainingCheckpointWire {
    /// The step.
    s: u64,
    /// The request id it answered (0: none).
    i: u64,
    /// When it was first reported.
    t: Timestamp,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A snooze in force when the checkpoint was taken (see `super::snooze`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct SnoozeWire {
    /// The annotation's value.
    v: String,
    /// When the evaluator first saw it on the job.
    f: Timestamp,
}

/// Only the header, read first so that an unknown version is refused for what it is.
#[derive(serde::Deserialize)]
struct Header {
    v: u32,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct DetectorWire {
    /// The policy: `kind/namespace/name` (no namespace for a ClusterProgressPolicy).
    p: String,
    /// The rule's name.
    r: String,
    /// The rule's definition hash.
    h: String,
    #[serde(rename = "s")]
    state: StateWire,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "k")]
enum StateWire {
    /// Plateau: samples, first and last sample times, the reference (value, time, sample number).
    #[serde(rename = "plateau")]
    Plateau {
        n: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        f: Option<Num>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        l: Option<Num>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        b: Option<(Num, Num, u64)>,
    },
    /// Overtraining: best train value and wait, best validation value and wait.
    #[serde(rename = "overtraining")]
    Overtraining {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bt: Option<Num>,
        tw: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bv: Option<Num>,
        vw: u64,
    },
}

fn policy_key(p: &PolicyRef) -> String {
    match &p.namespace {
        Some(ns) => format!("{}/{ns}/{}", p.kind, p.name),
        None => format!("{}/{}", p.kind, p.name),
    }
}

impl StateWire {
    fn of(state: &DetectorState, origin: Timestamp) -> Option<StateWire> {
        let off = |t: Timestamp| Num::of(seconds(origin, t));
        match state {
            // The level trackers of levelled rules are not checkpointed (yet): after a restore those rules
            // start over, which can only delay a stop, never cause one.
            DetectorState::None
            | DetectorState::Levels(_)
            | DetectorState::NoGain(_)
            | DetectorState::Streak(_)
            // A cohort stop is a fact about the cohort, kept with the cohort's memory, not the job's.
            | DetectorState::CohortStop(_)
            | DetectorState::Plateau(PlateauState { levels: Some(_), .. }) => None,
            DetectorState::Plateau(s) => Some(StateWire::Plateau {
                n: s.samples,
                f: s.first_at.map(off),
                l: s.last_at.map(off),
                b: s.reference.map(|(v, t, n)| (Num::of(v), off(t), n)),
            }),
            DetectorState::Overtraining(s) => Some(StateWire::Overtraining {
                bt: s.best_train.filter(|v| v.is_finite()).map(Num::of),
                tw: s.train_wait,
                bv: s.best_validation.filter(|v| v.is_finite()).map(Num::of),
                vw: s.validation_wait,
            }),
        }
    }

    /// The detector memory, or `None` when a field is out of range or not finite (the annotation can be
    /// edited by anyone who may patch the TrainJob: a NaN best would keep a plateau from ever firing).
    fn to_state(&self, origin: Timestamp) -> Option<DetectorState> {
        let at = |t: Option<Num>| t.map(|t| add_seconds(origin, t.get())).map_or(Some(None), |t| t.map(Some));
        let finite = |v: Option<Num>| v.map(Num::get).is_none_or(f64::is_finite);
        let all_finite = match self {
            StateWire::Plateau { b, .. } => b.as_ref().is_none_or(|(v, _, _)| v.get().is_finite()),
            StateWire::Overtraining { bt, bv, .. } => finite(*bt) && finite(*bv),
        };
        if !all_finite {
            return None;
        }
        Some(match self {
            StateWire::Plateau { n, f, l, b } => DetectorState::Plateau(PlateauState {
                samples: *n,
                first_at: at(*f)?,
                last_at: at(*l)?,
                reference: match b {
                    Some((v, t, n)) => Some((v.get(), add_seconds(origin, t.get())?, *n)),
                    None => None,
                },
                levels: None,
            }),
            StateWire::Overtraining { bt, tw, bv, vw } => DetectorState::Overtraining(OvertrainingState {
                best_train: bt.map(Num::get),
                train_wait: *tw,
                best_validation: bv.map(Num::get),
                validation_wait: *vw,
            }),
        })
    }
}

impl HistoryCheckpoint {
    /// When a stored checkpoint was taken and its [`HistoryCheckpoint::content`]; `None` when it is not a
    /// checkpoint of this version. A new leader reads it off the TrainJob and goes on from there instead of
    /// writing every job again.
    pub fn stamp(text: &str) -> Option<(Timestamp, u64)> {
        let header: Header = serde_json::from_str(text).ok()?;
        if header.v != CHECKPOINT_VERSION {
            return None;
        }
        let mut wire: Wire = serde_json::from_str(text).ok()?;
        let at = wire.at.take()?;
        Some((at, fnv1a(wire.text().as_bytes())))
    }
}

impl Wire {
    fn text(&self) -> String {
        serde_json::to_string(self).expect("a checkpoint is plain data and always serializes")
    }
}

impl Evaluator {
    /// The checkpoint of a job's history and detector memories, `None` for a job not tracked, without a
    /// sample yet (nothing worth keeping) or judged by no Enforce rule (Audit mode writes nothing to a
    /// TrainJob, and this is meant to be stored on it). `uid` is the TrainJob's, so the checkpoint cannot be mistaken for
    /// that of a re-created job of the same name; `now` is when it is taken.
    pub fn checkpoint(&self, key: &JobKey, uid: &str, now: Timestamp) -> Option<HistoryCheckpoint> {
        let entry = self.jobs.get(key)?;
        let enforced = entry.selected_by.iter().any(|&p| {
            self.policies
                .get(p)
                .and_then(Option::as_ref)
                .is_some_and(|s| s.policy.rules.iter().any(|r| r.mode == crate::policy::Mode::Enforce))
        });
        if !enforced {
            return None;
        }
        let data = entry.data.as_ref()?;
        let series = &data.series;
        let origin = series.last_sample_at?;
        let mut detectors = Vec::new();
        for (p, tracks) in entry.tracks.iter().enumerate() {
            let Some(Some(slot)) = self.policies.get(p) else { continue };
            for (rule, track) in slot.policy.rules.iter().zip(tracks) {
                if let Some(state) = StateWire::of(&track.detector_state, origin) {
                    detectors.push(DetectorWire {
                        p: policy_key(&slot.policy.reference),
                        r: rule.name.clone(),
                        h: rule_hash(rule),
                        state,
                    });
                }
            }
        }
        let mut wire = Wire {
            v: CHECKPOINT_VERSION,
            uid: uid.to_string(),
            o: origin,
            first_seen: Num::of(seconds(origin, data.first_seen)),
            series: SeriesWire::of(series, origin),
            detectors,
            snooze: entry.snooze.holding().map(|s| SnoozeWire { v: s.value.clone(), f: s.since }),
            snoozes: entry.snooze.count,
            training_checkpoint: series.last_checkpoint.map(|c| TrainingCheckpointWire {
                s: c.reported.step,
                i: c.reported.request_id,
                t: c.at,
            }),
            at: Some(now),
        };
        let (points, metrics) = (wire.series.points(), wire.series.metric_count());
        fit(&mut wire);
        let (kept_points, kept_metrics) = (wire.series.points(), wire.series.metric_count());
        let text = wire.text();
        if text.len() > MAX_CHECKPOINT_BYTES {
            return None; // the detector memories alone do not fit (hundreds of rules on one job)
        }
        wire.at = None;
        Some(HistoryCheckpoint {
            content: fnv1a(wire.text().as_bytes()),
            text,
            points_left_out: points - kept_points,
            metrics_left_out: metrics - kept_metrics,
        })
    }

    /// Gives a job the history and detector memories of a checkpoint (see [`Evaluator::checkpoint`]),
    /// before its first report of this run is observed. `uid` is the TrainJob's as watched now.
    ///
    /// Refused, with the reason, when the checkpoint is unreadable, of another version or another uid, or
    /// when the job already has samples in this run (the live history is newer). Nothing is counted twice:
    /// the restored history remembers its newest report, so the same report observed next is a duplicate,
    /// and a report older than the checkpoint is dropped as out of order, as it would have been without
    /// the restart. Detector memories of rules that are gone or were edited since are ignored.
    pub fn restore_history(
        &mut self,
        key: &JobKey,
        text: &str,
        uid: &str,
        now: Timestamp,
    ) -> Result<HistoryRestored, HistoryRefused> {
        if self.jobs.get(key).and_then(|j| j.data.as_ref()).is_some_and(|d| d.series.samples > 0) {
            return Err(HistoryRefused::AlreadyHasHistory);
        }
        // What this controller writes is at most MAX_CHECKPOINT_BYTES; a much longer annotation is not one.
        if text.len() > 2 * MAX_CHECKPOINT_BYTES {
            return Err(HistoryRefused::Unreadable(format!(
                "{} bytes, more than a checkpoint can be ({MAX_CHECKPOINT_BYTES})",
                text.len()
            )));
        }
        let header: Header =
            serde_json::from_str(text).map_err(|e| HistoryRefused::Unreadable(e.to_string()))?;
        if header.v != CHECKPOINT_VERSION {
            return Err(HistoryRefused::UnknownVersion { found: header.v });
        }
        let wire: Wire = serde_json::from_str(text).map_err(|e| HistoryRefused::Unreadable(e.to_string()))?;
        if wire.uid != uid {
            return Err(HistoryRefused::OtherJob { expected: uid.to_string(), found: wire.uid });
        }
        let origin = wire.o;
        let unreadable = |what: &str| HistoryRefused::Unreadable(format!("{what} is out of range"));
        let mut series = wire.series.to_series(origin).ok_or_else(|| unreadable("a time"))?;
        if let Some(c) = &wire.training_checkpoint {
            let step = crate::exact_integer(c.s as f64)
                .ok_or_else(|| unreadable("the training checkpoint's step"))?;
            let request_id = crate::exact_integer(c.i as f64)
                .ok_or_else(|| unreadable("the training checkpoint's request id"))?;
            series.last_checkpoint = Some(crate::SavedCheckpoint {
                reported: crate::ReportedCheckpoint { step, request_id },
                at: c.t,
            });
        }
        let first_seen = add_seconds(origin, wire.first_seen.get()).ok_or_else(|| unreadable("firstSeen"))?;
        let mut states = Vec::new();
        for d in &wire.detectors {
            states.push((
                d,
                d.state.to_state(origin).ok_or_else(|| unreadable("a detector memory's time or value"))?,
            ));
        }
        let restored_samples = series.samples;
        let metrics = series.metric_names().count();
        let max_snooze = self.config.max_snooze;
        let entry = self.entry_or_insert(key, now);
        if let Some(data) = entry.data.as_mut() {
            data.series = series;
            data.first_seen = first_seen.min(data.first_seen);
        }
        // A first-seen time ahead of now would stretch the cap: it is taken as now at the latest.
        if let Some(z) = wire.snooze
            && !entry.snooze.seen()
            && let Some(track) = SnoozeTrack::restored(z.v, z.f.min(now), max_snooze)
        {
            entry.snooze = track;
        }
        entry.snooze.count = entry.snooze.count.max(wire.snoozes);
        let mut restored =
            HistoryRestored { samples: restored_samples, metrics, detectors: 0, detectors_ignored: 0 };
        for (d, state) in states {
            if self.give_detector_state(key, d, state) {
                restored.detectors += 1;
            } else {
                restored.detectors_ignored += 1;
            }
        }
        Ok(restored)
    }

    /// Puts a restored detector memory into its rule's track; false when the policy or rule is gone or the
    /// rule was edited since.
    fn give_detector_state(&mut self, key: &JobKey, d: &DetectorWire, state: DetectorState) -> bool {
        let Some((p, slot)) =
            self.policies.iter().enumerate().find_map(|(i, s)| {
                s.as_ref().filter(|s| policy_key(&s.policy.reference) == d.p).map(|s| (i, s))
            })
        else {
            return false;
        };
        let rules = &slot.policy.rules;
        let Some(r) = rules.iter().position(|rule| rule.name == d.r && rule_hash(rule) == d.h) else {
            return false;
        };
        if rules[r].detector.is_none() {
            return false;
        }
        let n = rules.len();
        let Some(entry) = self.jobs.get_mut(key) else { return false };
        entry.tracks_mut(p, n)[r].detector_state = state;
        true
    }
}

/// Shrinks `wire` until it fits [`MAX_CHECKPOINT_BYTES`]: the most ring points per metric that fit (a
/// binary search), then, if even none fit, fewer metrics.
fn fit(wire: &mut Wire) {
    if wire.text().len() <= MAX_CHECKPOINT_BYTES {
        return;
    }
    let (mut lo, mut hi) = (0usize, wire.series.max_points());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        let mut trial = wire.clone();
        trial.series.keep_newest(mid);
        if trial.text().len() <= MAX_CHECKPOINT_BYTES {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    wire.series.keep_newest(lo);
    let mut metrics = wire.series.metric_count();
    while metrics > 0 && wire.text().len() > MAX_CHECKPOINT_BYTES {
        metrics -= 1;
        wire.series.keep_metrics(metrics);
    }
}

#[cfg(test)]
mod tests;
