//! The evaluation loop's "now" ([`Clock`]): the machine's clock, or a recorded stream's own, where time
//! moves with the reports and the timers a report passes run at their own instants before it, as
//! `trainwarden replay` runs them (its driver: `trainwarden_core::replay`).

use std::time::Duration;

use trainwarden_core::Timestamp;

use super::Brain;
use crate::messages::Input;
use crate::runtime::config::Clock;

/// The loop's clock and, for [`Clock::Reports`], where the stream's time stands.
pub(super) struct LoopClock {
    clock: Clock,
    /// The stream's time ([`Clock::Reports`]): `from`, then the newest report's.
    stream: Timestamp,
}

impl LoopClock {
    pub(super) fn new(clock: Clock) -> Self {
        let stream = match clock {
            Clock::Wall => Timestamp::UNIX_EPOCH,
            Clock::Reports { from } => from,
        };
        LoopClock { clock, stream }
    }

    pub(super) fn now(&self) -> Timestamp {
        match self.clock {
            Clock::Wall => Timestamp::now(),
            Clock::Reports { .. } => self.stream,
        }
    }

    /// How long the loop may sleep before the next timer. On a stream's clock timers run only as reports
    /// move time past them, never after a wall-clock sleep.
    pub(super) fn sleep_before(&self, next: Option<Timestamp>) -> Duration {
        let hour = Duration::from_secs(3600);
        match (self.clock, next) {
            (Clock::Wall, Some(t)) => {
                let secs = t.duration_since(Timestamp::now()).as_secs_f64();
                Duration::from_secs_f64(secs.clamp(0.0, 3600.0))
            }
            _ => hour,
        }
    }

    /// The time the timer due at `next` runs at once its sleep ended: never before it (a sleep can end a
    /// hair early on some clocks). `None` on a stream's clock.
    pub(super) fn timer_time(&self, next: Option<Timestamp>) -> Option<Timestamp> {
        match self.clock {
            Clock::Wall => Some(next.map_or_else(Timestamp::now, |n| Timestamp::now().max(n))),
            Clock::Reports { .. } => None,
        }
    }

    /// The time `input` is handled at. On a stream's clock a report newer than the stream's time moves it
    /// there, after running the timers due before that instant, each at its own.
    pub(super) fn before(&mut self, brain: &mut Brain, input: &Input) -> Timestamp {
        if let Clock::Reports { .. } = self.clock
            && let Some(t) = report_time(input)
            && t > self.stream
        {
            run_timers(brain, t, false);
            self.stream = t;
        }
        self.now()
    }

    /// After an input on a stream's clock: the timers due at the stream's time run (a report arriving
    /// exactly at a deadline counts first, as in a replay).
    pub(super) fn after(&self, brain: &mut Brain) {
        if let Clock::Reports { .. } = self.clock {
            run_timers(brain, self.stream, true);
        }
    }
}

/// The report's `lastUpdatedTime`, for a TrainJob that carries one.
fn report_time(input: &Input) -> Option<Timestamp> {
    match input {
        Input::Job(job) => job.snapshot.as_ref().ok()?.sample.as_ref().map(|s| s.updated_at),
        _ => None,
    }
}

/// Runs the brain's timers due before `until` (or at it, when `inclusive`), in order, each at its instant.
fn run_timers(brain: &mut Brain, until: Timestamp, inclusive: bool) {
    let mut last = None;
    while let Some(t) = brain.next_tick() {
        // A timer that ticking did not move on would repeat forever: leave it for the next report.
        if t > until || (!inclusive && t == until) || last == Some(t) {
            break;
        }
        brain.tick(t);
        last = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{job_reporting, policy_input};
    use super::*;
    use crate::messages::Work;
    use crate::metrics::Metrics;
    use crate::runtime::config::ControllerConfig;
    use std::sync::Arc;
    use trainwarden_testkit::fixtures::at_sec;

    fn acts(brain: &mut Brain) -> Vec<Timestamp> {
        brain
            .work
            .drain(..)
            .filter_map(|w| match w {
                Work::Act(i) => Some(i.at),
                _ => None,
            })
            .collect()
    }

    /// On a stream's clock a report an hour after the last one first runs the stall timer it passed, at the
    /// stall's own second, as `replay` does; the wall clock never enters.
    #[test]
    fn a_report_moves_the_stream_clock_after_the_timers_it_passes() {
        let mut brain = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
        brain.lead(true);
        let mut clock = LoopClock::new(Clock::Reports { from: at_sec(0) });
        assert_eq!(clock.now(), at_sec(0));
        let rules = "    - {name: stalled, uses: stalled, with: {after: 10m}, actions: [{suspend: {}}]}\n";
        for input in [policy_input(rules, None), Input::JobsListed, job_reporting(2.0, at_sec(0))] {
            let now = clock.before(&mut brain, &input);
            brain.handle(input, now);
            clock.after(&mut brain);
        }
        assert!(acts(&mut brain).is_empty());
        assert_eq!(clock.sleep_before(brain.next_tick()), Duration::from_secs(3600), "no wall-clock timer");
        assert_eq!(clock.timer_time(brain.next_tick()), None);

        let late = job_reporting(1.0, at_sec(3600));
        let now = clock.before(&mut brain, &late);
        assert_eq!(now, at_sec(3600));
        assert_eq!(
            acts(&mut brain),
            vec![at_sec(600)],
            "suspended at the stall deadline, not at the late report"
        );
        // An echo of the same report does not move time.
        let echo = job_reporting(1.0, at_sec(3600));
        assert_eq!(clock.before(&mut brain, &echo), at_sec(3600));
    }
}
