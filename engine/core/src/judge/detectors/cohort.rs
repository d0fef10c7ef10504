//! What the cohort detectors share: judging a job against its siblings (`median_stop`, `percentile`,
//! `successive_halving`).
//!
//! A cohort is the jobs of one policy that carry the same value of the policy's `spec.cohort.by` label (a
//! Katib experiment's trials by default). A cohort detector keeps one [`CohortMemory`] per cohort: what each
//! member reported at each aligned position (`spec.cohort.alignBy`: step, epoch or progress) that its rule
//! compares at — the peers' "intermediate values", bounded per member by [`MAX_REPORTS`]. The decision is
//! made when a report arrives, as Optuna's `should_prune()` and Ray Tune's `on_trial_result()` make it, so
//! that the same reports in the same order give the same decisions; the evaluator keeps a stop as the
//! job's detector state and the rule fires on it.
//!
//! A memory is a function of its members' report sequences (and which members finished), not of the order
//! in which members interleaved: that is what lets the evaluator rebuild it from checkpointed reports after
//! a restart, and remove a deleted job exactly. The order statistics a decision needs ([`OrderStats`]) cost
//! O(log n) per report for a cohort of n jobs; percentiles follow numpy's `linear` method bit for bit, since
//! the peers compute them with `np.percentile`/`np.nanpercentile`/`np.median`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

use super::Finding;
use crate::history::metric_series::Direction;

/// The evaluator's id of a job (stable while the job is known).
pub(crate) type MemberId = usize;

/// Reports a member keeps per rule; later reports are still judged but no longer remembered (they do not
/// count as references for other jobs). A 1,000-step run reporting every step fits four times over.
pub(crate) const MAX_REPORTS: usize = 4096;

/// A cohort detector's memory of one cohort.
pub trait CohortMemory: fmt::Debug + Send + Sync {
    /// A report of `member` at aligned position `x` with `value` of the watched metric (NaN included:
    /// each detector says how it counts). A second report at a position already reported is ignored, as
    /// Optuna ignores a repeated step. Returns why the member is to stop now, if it is.
    fn report(&mut self, member: MemberId, x: f64, value: f64) -> Option<Finding>;

    /// The member finished (its TrainJob completed): `percentile`'s reference population, as Optuna's
    /// COMPLETE trials are.
    fn finished(&mut self, _member: MemberId) {}

    /// The member's job was deleted: everything it contributed is removed.
    fn forget(&mut self, member: MemberId);

    /// Members it knows.
    fn members(&self) -> usize;

    /// Approximate bytes held.
    fn approx_bytes(&self) -> usize;
}

/// The [`Detector`](super::Detector) side every cohort detector shares: the decision is the cohort's (made
/// when a report reaches the cohort memory, kept in the job's state), so `check` only reads it back, and the
/// watched metric is the cohort's. One place, so the three detectors cannot drift apart.
macro_rules! cohort_detector {
    ($detector:ty) => {
        impl super::Detector for $detector {
            fn check(
                &self,
                state: &super::DetectorState,
                _view: &crate::history::job::JobView<'_>,
            ) -> Option<super::Finding> {
                state.cohort_stop()
            }

            fn reads_the_clock(&self) -> bool {
                false
            }

            fn watched_metric(&self) -> Option<(&str, crate::history::metric_series::Direction)> {
                Some((super::cohort::CohortJudge::metric(self), super::cohort::CohortJudge::direction(self)))
            }

            fn cohort(&self) -> Option<&dyn super::cohort::CohortJudge> {
                Some(self)
            }
        }
    };
}
pub(super) use cohort_detector;

/// A detector that judges a job against its cohort.
pub trait CohortJudge: fmt::Debug + Send + Sync {
    /// The metric it compares.
    fn metric(&self) -> &str;

    /// Which way the metric improves.
    fn direction(&self) -> Direction;

    /// An empty memory for a new cohort.
    fn new_memory(&self) -> Box<dyn CohortMemory>;
}

/// An f64 ordered by `total_cmp` (cohort values are never NaN: callers filter NaN first).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Total(f64);

impl Eq for Total {}
impl PartialOrd for Total {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Total {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A multiset of numbers split in two heaps at a movable rank: the `k` smallest in a max-heap, the rest in
/// a min-heap, so the k-th and (k+1)-th smallest are the two tops. A percentile at a fixed fraction, or the
/// `len/η`-th value of successive halving, moves the split by at most one per insertion: O(log n) per
/// report. Removal (a deleted job) rebuilds, O(n log n), which deletions are rare enough to afford.
#[derive(Clone, Debug, Default)]
pub(crate) struct OrderStats {
    low: BinaryHeap<Total>,
    high: BinaryHeap<Reverse<Total>>,
}

impl OrderStats {
    pub(crate) fn len(&self) -> usize {
        self.low.len() + self.high.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a value (not NaN).
    pub(crate) fn insert(&mut self, v: f64) {
        debug_assert!(!v.is_nan());
        match self.low.peek() {
            Some(top) if v <= top.0 => self.low.push(Total(v)),
            _ => self.high.push(Reverse(Total(v))),
        }
    }

    /// Removes one occurrence of `v` (bit-equal), if present.
    pub(crate) fn remove(&mut self, v: f64) {
        let mut all: Vec<f64> =
            self.low.drain().map(|t| t.0).chain(self.high.drain().map(|r| r.0.0)).collect();
        if let Some(i) = all.iter().position(|x| x.to_bits() == v.to_bits()) {
            all.swap_remove(i);
        }
        for x in all {
            self.high.push(Reverse(Total(x)));
        }
    }

    /// The `i`-th smallest (0-based) and the one after it, if any. `i < len`.
    pub(crate) fn pair_at(&mut self, i: usize) -> (f64, Option<f64>) {
        debug_assert!(i < self.len());
        while self.low.len() > i + 1 {
            let Some(t) = self.low.pop() else { break };
            self.high.push(Reverse(t));
        }
        while self.low.len() < i + 1 {
            let Some(Reverse(t)) = self.high.pop() else { break };
            self.low.push(t);
        }
        (self.low.peek().map_or(f64::NAN, |t| t.0), self.high.peek().map(|r| r.0.0))
    }

    /// The `i`-th smallest (0-based).
    pub(crate) fn nth(&mut self, i: usize) -> f64 {
        self.pair_at(i).0
    }

    /// numpy's `percentile(values, 100·q)` with the default `linear` method (`q` in 0..=1), bit for bit;
    /// `None` when empty.
    pub(crate) fn percentile(&mut self, q: f64) -> Option<f64> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let virtual_index = (n as f64 - 1.0) * q;
        if virtual_index >= (n - 1) as f64 {
            return Some(self.nth(n - 1));
        }
        if virtual_index < 0.0 {
            return Some(self.nth(0));
        }
        let below = virtual_index.floor();
        let gamma = virtual_index - below;
        let (a, b) = self.pair_at(below as usize);
        Some(lerp(a, b.unwrap_or(a), gamma))
    }

    /// numpy's `median`: the middle value, or the mean of the two middle ones; `None` when empty.
    pub(crate) fn median(&mut self) -> Option<f64> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let (a, b) = self.pair_at((n - 1) / 2);
        if n % 2 == 1 { Some(a) } else { Some((a + b.unwrap_or(a)) / 2.0) }
    }

    /// Approximate bytes held.
    pub(crate) fn approx_bytes(&self) -> usize {
        (self.low.capacity() + self.high.capacity()) * 8
    }
}

/// numpy's `_lerp`: from the nearer end, so `gamma` 0 and 1 give the ends exactly.
fn lerp(a: f64, b: f64, gamma: f64) -> f64 {
    let diff = b - a;
    if gamma >= 0.5 { b - diff * (1.0 - gamma) } else { a + diff * gamma }
}

/// An aligned position as a map key: positions are compared exactly, as the peers compare steps (`-0` is 0).
pub(crate) fn position_key(x: f64) -> u64 {
    if x == 0.0 { 0 } else { x.to_bits() }
}

/// `value` is better than `than` (strictly).
pub(crate) fn better(direction: Direction, value: f64, than: f64) -> bool {
    match direction {
        Direction::Min => value < than,
        Direction::Max => value > than,
    }
}

/// The better of a best-so-far and a new value, NaN ignored (numpy's `nanmin`/`nanmax` over a run).
pub(crate) fn best_of(direction: Direction, best: f64, value: f64) -> f64 {
    if value.is_nan() {
        best
    } else if best.is_nan() || better(direction, value, best) {
        value
    } else {
        best
    }
}

/// How a position prints in a finding: `step 120`, `epoch 3`, `42%`.
pub(crate) fn fmt_position(x: f64) -> String {
    crate::time::fmt_num(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// numpy 2.4.6: `np.percentile([...], p)` for these inputs (printed with repr).
    #[test]
    fn percentiles_match_numpy_bit_for_bit() {
        let cases: &[(&[f64], f64, f64)] = &[
            (&[1.0, 2.0, 3.0, 4.0], 0.75, 3.25),
            (&[0.3, 0.1, 0.2], 0.5, 0.2),
            (&[5.0], 0.25, 5.0),
            (&[1.0, 10.0], 0.6666666666666667, 7.000000000000001),
            (&[0.1, 0.7, 0.2, 0.9, 0.4], 0.25, 0.2),
            (&[0.1, 0.7, 0.2, 0.9, 0.4, 0.35], 0.75, 0.625),
        ];
        for (values, q, want) in cases {
            let mut s = OrderStats::default();
            for v in *values {
                s.insert(*v);
            }
            let got = s.percentile(*q).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{values:?} q={q}: {got} != {want}");
        }
    }

    #[test]
    fn median_is_numpys() {
        let mut s = OrderStats::default();
        assert_eq!(s.median(), None);
        for v in [3.0, 1.0, 2.0] {
            s.insert(v);
        }
        assert_eq!(s.median(), Some(2.0));
        s.insert(10.0);
        assert_eq!(s.median(), Some(2.5));
        s.remove(10.0);
        assert_eq!(s.median(), Some(2.0));
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn order_statistics_follow_a_moving_rank() {
        let mut s = OrderStats::default();
        let mut plain = Vec::new();
        let mut rng = crate::testing::rng::Rng(7);
        for n in 1..500usize {
            let v = rng.below(1000) as f64 / 7.0;
            s.insert(v);
            plain.push(v);
            plain.sort_by(f64::total_cmp);
            let i = n / 4;
            assert_eq!(s.nth(i.min(n - 1)), plain[i.min(n - 1)]);
            assert_eq!(s.median().unwrap(), {
                if n % 2 == 1 { plain[n / 2] } else { (plain[n / 2 - 1] + plain[n / 2]) / 2.0 }
            });
        }
    }
}
