//! When jobs are evaluated with no new sample: the `eval_interval` cadence (for jobs of policies that read the
//! clock), calendar window changes and each job's one exact timer (the earliest of its `for`,
//! `keepFiringFor` and time-driven detector deadlines, and the end of its snooze).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::job_table::JobTable;
use super::{Alert, Evaluator, Event};
use crate::input::sample::JobPhase;
use crate::time::Timestamp;

/// The jobs' timers, earliest first: (time, job id) entries in two queues.
///
/// A job's timer moves with nearly every sample (a stall deadline is the last sample plus the limit), so a
/// move queues a new entry and leaves the old one where it is. An entry is live while its job's
/// [`super::JobEntry::wake`] is its time; the others are stale.
///
/// A new entry is mostly the latest timer of all: the job that just reported has the furthest stall
/// deadline. Such an entry goes to the back of `in_order`, a queue kept in time order, and only an entry
/// earlier than that queue's last one (a `for` that starts, another rule's limit) goes into `heap`. When
/// jobs report in turn, the stale entry a report leaves is `in_order`'s front, so each sample costs a push
/// and a pop at the ends of a queue, with nothing to sift (with the heap alone, its pop was 3 % of a sample's
/// cost).
///
/// A later entry at the back (a longer limit than the others', a snooze's end) sends the pushes before it to
/// the heap until one at or after it comes, so a fleet with mixed limits leans on the heap as before.
///
/// Stale entries are dropped whenever they reach the front of either queue, so both fronts are live and
/// [`Evaluator::next_tick`] stays exact; and all of them at once when the two queues hold more than twice
/// the jobs plus 64 entries, so they never hold more (a bulk drop costs what the pushes since the last one
/// did).
#[derive(Default)]
pub(super) struct Wakes {
    /// Each entry at or after the one before it.
    in_order: VecDeque<(Timestamp, usize)>,
    heap: BinaryHeap<Reverse<(Timestamp, usize)>>,
}

impl Wakes {
    fn live(jobs: &JobTable, (at, id): (Timestamp, usize)) -> bool {
        jobs.by_id(id).is_some_and(|job| job.wake == Some(at))
    }

    /// Queues a job's new timer (its `wake` already set to `at`).
    fn push(&mut self, jobs: &JobTable, at: Timestamp, id: usize) {
        if self.in_order.back().is_none_or(|(last, _)| *last <= at) {
            self.in_order.push_back((at, id));
        } else {
            self.heap.push(Reverse((at, id)));
        }
        self.settle(jobs);
    }

    /// The earlier of the two fronts.
    fn front(&self) -> Option<(Timestamp, usize)> {
        match (self.in_order.front(), self.heap.peek()) {
            (Some(ordered), Some(Reverse(heaped))) => Some(*ordered.min(heaped)),
            (Some(ordered), None) => Some(*ordered),
            (None, Some(Reverse(heaped))) => Some(*heaped),
            (None, None) => None,
        }
    }

    /// The earliest timer: the earlier front, live once [`Wakes::settle`] ran after the last change.
    pub(super) fn first(&self) -> Option<Timestamp> {
        self.front().map(|(at, _)| at)
    }

    /// Takes the next timer due at `now`, if any.
    fn pop_due(&mut self, jobs: &JobTable, now: Timestamp) -> Option<usize> {
        self.drop_stale_fronts(jobs);
        let (at, id) = self.front().filter(|(at, _)| *at <= now)?;
        if self.in_order.front() == Some(&(at, id)) {
            self.in_order.pop_front();
        } else {
            self.heap.pop();
        }
        Some(id)
    }

    /// Drops stale entries from the front of each queue, so both fronts are live.
    fn drop_stale_fronts(&mut self, jobs: &JobTable) {
        while self.in_order.front().is_some_and(|entry| !Self::live(jobs, *entry)) {
            self.in_order.pop_front();
        }
        while self.heap.peek().is_some_and(|Reverse(entry)| !Self::live(jobs, *entry)) {
            self.heap.pop();
        }
    }

    /// Restores the invariant after jobs' timers changed or a job left: both fronts are live, and the queues
    /// hold at most twice the jobs plus 64 entries.
    pub(super) fn settle(&mut self, jobs: &JobTable) {
        self.drop_stale_fronts(jobs);
        if self.in_order.len() + self.heap.len() > 2 * jobs.len() + 64 {
            let mut entries: Vec<(Timestamp, usize)> = self.in_order.drain(..).collect();
            entries.extend(std::mem::take(&mut self.heap).into_iter().map(|Reverse(entry)| entry));
            entries.retain(|entry| Self::live(jobs, *entry));
            // A timer back at a time it had before (or a reused id whose new job's timer is the old job's)
            // has two identical live entries: keep one. Sorted, they are all in order.
            entries.sort_unstable();
            entries.dedup();
            self.in_order = entries.into();
        }
    }

    /// Whether both fronts are live (for a debug assertion).
    fn fronts_live(&self, jobs: &JobTable) -> bool {
        self.in_order.front().is_none_or(|entry| Self::live(jobs, *entry))
            && self.heap.peek().is_none_or(|Reverse(entry)| Self::live(jobs, *entry))
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.in_order.len() + self.heap.len()
    }

    /// Entries out of time order, in the heap.
    #[cfg(test)]
    pub(super) fn heap_len(&self) -> usize {
        self.heap.len()
    }

    #[cfg(test)]
    pub(super) fn contains(&self, at: Timestamp, id: usize) -> bool {
        self.in_order.contains(&(at, id)) || self.heap.iter().any(|Reverse(entry)| *entry == (at, id))
    }
}

impl Evaluator {
    /// When the next timer evaluation is due.
    pub fn next_tick(&self) -> Option<Timestamp> {
        debug_assert_eq!(self.next_round, self.compute_next_round(), "next_round is kept up to date");
        debug_assert!(self.wakes.fronts_live(&self.jobs), "both queues' fronts are live timers");
        [self.next_round, self.wakes.first()].into_iter().flatten().min()
    }

    /// The next `eval_interval` round or calendar change. A replay asks [`Evaluator::next_tick`] twice per
    /// record, so it is kept (in `next_round`) rather than computed there.
    fn compute_next_round(&self) -> Option<Timestamp> {
        let interval = self.config.eval_interval.as_secs_f64();
        let cadence = self.last_tick.and_then(|t| crate::time::add_seconds(t, interval));
        let calendar = self.policies.iter().flatten().filter_map(|s| s.next_calendar_change).min();
        [cadence, calendar].into_iter().flatten().min()
    }

    /// Call after `last_tick` or a policy's calendar changes, or a policy comes or goes.
    pub(super) fn update_next_round(&mut self) {
        self.next_round = self.compute_next_round();
    }

    /// Evaluates jobs not evaluated within the last interval (and every job when a calendar window opens
    /// or closes). Call it at [`Evaluator::next_tick`].
    pub fn tick(&mut self, now: Timestamp, out: &mut Vec<Event>) {
        let calendar_changed =
            self.policies.iter().flatten().any(|s| s.next_calendar_change.is_some_and(|c| c <= now));
        let interval = self.config.eval_interval.as_secs_f64();
        let cadence = self.last_tick.is_none_or(|t| crate::time::seconds(t, now) >= interval);
        // Only jobs of policies whose rules change with time alone need the rounds; the others change only
        // with samples and their exact timers (below), so a long idle stretch costs nothing for them.
        let policies = &self.policies;
        let reads_the_clock = |j: &super::JobEntry| {
            j.selected_by
                .iter()
                .any(|p| policies.get(*p).and_then(Option::as_ref).is_some_and(|s| s.reads_the_clock))
        };
        // A job never judged, or judged before a policy was added, changed or removed, is judged at the next
        // round whatever its policies read: a silent job may never send the sample that would judge it.
        let unjudged = |j: &super::JobEntry| j.last_evaluated.is_none() || j.selection_stale;
        let any_clock =
            policies.iter().flatten().any(|s| s.reads_the_clock) || self.jobs.values().any(unjudged);
        let mut due: Vec<usize> = if calendar_changed || (cadence && any_clock) {
            self.jobs.ids_where(|j| {
                calendar_changed
                    || unjudged(j)
                    || (reads_the_clock(j)
                        && j.last_evaluated.is_some_and(|t| crate::time::seconds(t, now) >= interval))
            })
        } else {
            Vec::new()
        };
        // Timers that ran out (the cheap path: only those jobs).
        // Taken off the queues with the job's `wake`, so the evaluation's re-arm always pushes its next one.
        while let Some(id) = self.wakes.pop_due(&self.jobs, now) {
            if let Some((_, job)) = self.jobs.key_and_entry(id) {
                job.wake = None;
            }
            due.push(id);
        }
        self.wakes.settle(&self.jobs);
        // In key order, so the events come out the same whichever ids the jobs were given.
        let jobs = &self.jobs;
        due.sort_by(|a, b| jobs.key(*a).cmp(&jobs.key(*b)));
        due.dedup();
        for id in due {
            self.tick_id(id, now, out);
        }
        if cadence {
            self.last_tick = Some(now);
        }
        if calendar_changed {
            self.refresh_calendar(now);
        }
        self.update_next_round();
    }

    pub(super) fn refresh_calendar(&mut self, now: Timestamp) {
        for slot in self.policies.iter_mut().flatten() {
            slot.next_calendar_change = slot.policy.env.calendar.next_change_after(now);
            slot.active = Some(slot.policy.env.calendar.is_active(now));
        }
        if self.last_tick.is_none() {
            self.last_tick = Some(now);
        }
        self.update_next_round();
    }

    /// Recomputes a job's timer after an evaluation: the earliest of its pending rules' `for`, its firing
    /// rules' `keepFiringFor`, and, in every rule state, its detectors' and scripts' wakes (when time alone
    /// may change their answer).
    pub(super) fn rearm(&mut self, id: usize, now: Timestamp) {
        let Some((_, entry)) = self.jobs.key_and_entry(id) else { return };
        let mut wake: Option<Timestamp> = None;
        let mut consider = |t: Option<Timestamp>| {
            if let Some(t) = t.filter(|t| *t > now) {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        };
        // A snooze ends on its second whatever the job's phase (its status and Events say so then).
        consider(entry.snooze.current(now).map(|s| s.until));
        // And where a policy's own cap (spec.snooze.maxDuration) ends it for that policy.
        if entry.snooze.current(now).is_some() {
            for &p in &entry.selected_by {
                if let Some(Some(slot)) = self.policies.get(p)
                    && slot.policy.max_snooze.is_some()
                {
                    consider(entry.snooze.policy_end(slot.policy.max_snooze));
                }
            }
        }
        // An exception holding a firing ends on its second too.
        for track in entry.tracks.iter().flatten() {
            if let Some(e) =
                track.excepted.as_deref().and_then(|e| super::exceptions::get(&self.exceptions, e))
            {
                consider(Some(e.expires));
            }
        }
        if let Some(data) = entry.data.as_deref()
            && data.snapshot.phase == JobPhase::Running
        {
            for &p in &entry.selected_by {
                let Some(Some(slot)) = self.policies.get(p) else { continue };
                let Some(tracks) = entry.tracks.get(p) else { continue };
                for (rule, track) in slot.policy.rules.iter().zip(tracks) {
                    // When a script's answer may change with time alone, either way: a false `stalled()`
                    // turning true, a true `runtime() < 600.0` turning false (see `judge::script::native`).
                    consider(track.script_wake);
                    if let Some(d) = &rule.detector {
                        consider(d.wake_at(&track.detector_state, &data.view(&slot.policy.env, now)));
                    }
                    match track.alert {
                        Alert::Pending { since } => {
                            consider(
                                since.and_then(|s| crate::time::add_seconds(s, rule.for_.as_secs_f64())),
                            );
                        }
                        Alert::Firing { cleared_at, .. } => {
                            consider(cleared_at.and_then(|c| {
                                crate::time::add_seconds(c, rule.keep_firing_for.as_secs_f64())
                            }));
                            // A grace that ends.
                            for due in &track.deferred {
                                consider(*due);
                            }
                            // A held firing asks its limit again when an hourly slot frees, and at least
                            // every interval (a suspended job elsewhere may have run again).
                            if let Some(hold) = track.held {
                                consider(hold.retry);
                                consider(crate::time::add_seconds(
                                    now,
                                    self.config.eval_interval.as_secs_f64(),
                                ));
                            }
                        }
                        Alert::Inactive => {}
                    }
                }
            }
        }
        if entry.wake != wake {
            entry.wake = wake;
            match wake {
                Some(new) => self.wakes.push(&self.jobs, new, id),
                None => self.wakes.settle(&self.jobs),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::JobEntry;
    use crate::input::sample::JobKey;
    use crate::testing::at_sec;

    /// `n` jobs with no timer, ids 0..n.
    fn jobs(n: usize) -> JobTable {
        let mut table = JobTable::default();
        for i in 0..n {
            let key = JobKey::new("ml", format!("job-{i}"));
            assert_eq!(table.insert(key.clone(), JobEntry::new(&key, at_sec(0))), i);
        }
        table
    }

    /// `n` jobs whose timers are set, in this order, to these seconds.
    fn with_timers(n: usize, timers: &[(usize, i64)]) -> (Wakes, JobTable) {
        let (mut wakes, mut table) = (Wakes::default(), jobs(n));
        for &(id, second) in timers {
            set(&mut wakes, &mut table, id, Some(second));
        }
        (wakes, table)
    }

    /// Sets a job's timer as `rearm` does.
    fn set(wakes: &mut Wakes, jobs: &mut JobTable, id: usize, second: Option<i64>) {
        let wake = second.map(at_sec);
        jobs.key_and_entry(id).expect("a job").1.wake = wake;
        match wake {
            Some(t) => wakes.push(jobs, t, id),
            None => wakes.settle(jobs),
        }
    }

    /// Takes every timer due at `now` as `tick` does (clearing each job's timer), in order.
    fn take_due(wakes: &mut Wakes, jobs: &mut JobTable, now: i64) -> Vec<usize> {
        let mut taken = Vec::new();
        while let Some(id) = wakes.pop_due(jobs, at_sec(now)) {
            jobs.key_and_entry(id).expect("a job").1.wake = None;
            taken.push(id);
        }
        wakes.settle(jobs);
        taken
    }

    #[test]
    fn a_timer_back_at_a_time_it_had_is_taken_once_though_queued_twice() {
        // Job 0's last two moves are earlier than the last queued (40): into the heap, twice; its first
        // entry, (30, 0), is live again after them.
        let (mut wakes, mut table) = with_timers(3, &[(1, 20), (0, 30), (2, 40), (0, 35), (0, 30)]);
        // (30, 0) is in the deque since the start and in the heap now, beside the stale (35, 0).
        assert!(wakes.contains(at_sec(30), 0));
        assert_eq!(wakes.heap_len(), 2);
        assert_eq!(wakes.first(), Some(at_sec(20)));
        assert_eq!(take_due(&mut wakes, &mut table, 100), vec![1, 0, 2], "each job once, in time order");
        assert_eq!(wakes.first(), None);
        assert_eq!(wakes.len(), 0, "the twin and the stale entry went with them");
    }

    #[test]
    fn equal_times_in_both_queues_are_all_taken() {
        // Both at 10: job 1 in the heap (earlier than 50), job 2 in the queue.
        let (mut wakes, mut table) = with_timers(3, &[(2, 10), (0, 50), (1, 10)]);
        assert_eq!(wakes.heap_len(), 1);
        assert_eq!(take_due(&mut wakes, &mut table, 10), vec![1, 2]);
        assert_eq!(wakes.first(), Some(at_sec(50)));
        assert_eq!(take_due(&mut wakes, &mut table, 49), Vec::<usize>::new());
        assert_eq!(take_due(&mut wakes, &mut table, 50), vec![0]);
    }

    #[test]
    fn the_bulk_drop_keeps_every_live_timer_in_time_order() {
        let (mut wakes, mut table) = with_timers(4, &[(3, 10_000)]);
        let live = |table: &JobTable| -> Vec<(Timestamp, usize)> {
            let mut timers: Vec<_> =
                (0..4).filter_map(|id| table.by_id(id).and_then(|j| j.wake).map(|t| (t, id))).collect();
            timers.sort();
            timers
        };
        let (mut most_in_heap, mut drops) = (0, 0);
        // Jobs 0–2 move back and forth before job 3's timer, which stays at the deque's back: every move
        // goes into the heap, until a bulk drop puts the live timers in the deque.
        for step in 0..500 {
            let id = step % 3;
            set(&mut wakes, &mut table, id, Some(5_000 - (step as i64 % 7) * 100));
            most_in_heap = most_in_heap.max(wakes.heap_len());
            assert!(wakes.len() <= 2 * 4 + 64, "step {step}: {}", wakes.len());
            if wakes.heap_len() == 0 {
                drops += 1;
                let timers = live(&table);
                assert_eq!(wakes.len(), timers.len(), "step {step}: one entry per live timer");
                assert!(wakes.in_order.iter().eq(timers.iter()), "step {step}: all of them, in time order");
            }
        }
        assert!(most_in_heap > 40 && drops >= 2, "{most_in_heap} entries in the heap at most, {drops} drops");
        let order: Vec<usize> = live(&table).iter().map(|(_, id)| *id).collect();
        assert_eq!(wakes.first(), live(&table).first().map(|(t, _)| *t));
        assert_eq!(take_due(&mut wakes, &mut table, 10_000), order);
    }
}
