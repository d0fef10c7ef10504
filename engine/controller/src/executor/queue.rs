//! The executor's keyed queue: work of one TrainJob runs in order, one item at a time; different jobs run
//! concurrently. Work about a policy (receivers) is not queued: it is done on arrival.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use trainwarden_core::JobKey;

use crate::messages::Work;

/// Queued work per job, and which jobs may start their next item.
#[derive(Default)]
pub(super) struct JobQueues {
    /// Each item with when it was queued.
    queues: HashMap<JobKey, VecDeque<(Instant, Work)>>,
    /// Jobs with queued work and nothing running, in arrival order, with when each became ready.
    ready: VecDeque<(JobKey, Instant)>,
    /// Jobs that are ready or running: a new item of theirs just queues.
    scheduled: HashSet<JobKey>,
}

/// How long an item waited before it started.
#[derive(Clone, Copy, Debug)]
pub(super) struct Waited {
    /// Since it was queued: behind its job's earlier work, then for a slot.
    pub(super) queued: Duration,
    /// Since its job's earlier work was done: for a free slot only.
    pub(super) for_slot: Duration,
}

impl JobQueues {
    /// Queues an item of `job`.
    pub(super) fn push(&mut self, job: JobKey, item: Work) {
        let now = Instant::now();
        self.queues.entry(job.clone()).or_default().push_back((now, item));
        if self.scheduled.insert(job.clone()) {
            self.ready.push_back((job, now));
        }
    }

    /// The next item of a job that has nothing running, with its job and how long it waited.
    pub(super) fn next_ready(&mut self) -> Option<(JobKey, Work, Waited)> {
        while let Some((job, ready)) = self.ready.pop_front() {
            if let Some((queued, item)) = self.queues.get_mut(&job).and_then(VecDeque::pop_front) {
                return Some((job, item, Waited { queued: queued.elapsed(), for_slot: ready.elapsed() }));
            }
        }
        None
    }

    /// `job`'s running item finished: its next item becomes ready, or the job leaves the queues.
    pub(super) fn finished(&mut self, job: JobKey) {
        match self.queues.get(&job) {
            Some(q) if !q.is_empty() => self.ready.push_back((job, Instant::now())),
            _ => {
                self.queues.remove(&job);
                self.scheduled.remove(&job);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Work;

    fn verdict(job: &JobKey) -> Work {
        Work::SaveVerdict(Box::new(crate::messages::VerdictSave { job: job.clone(), text: None, uid: None }))
    }

    /// An item's wait counts from when it was queued, also while an earlier item of its job runs.
    #[test]
    fn an_item_reports_how_long_it_waited_in_order_per_job() {
        let (a, b) = (JobKey::new("ml", "a"), JobKey::new("ml", "b"));
        let mut q = JobQueues::default();
        q.push(a.clone(), verdict(&a));
        q.push(a.clone(), verdict(&a));
        std::thread::sleep(Duration::from_millis(30));
        q.push(b.clone(), verdict(&b));
        let (first, _, waited) = q.next_ready().unwrap();
        assert_eq!(first, a);
        assert!(waited.queued >= Duration::from_millis(30), "{waited:?}");
        assert!(waited.for_slot >= Duration::from_millis(30), "ready since it was queued: {waited:?}");
        let (second, _, _) = q.next_ready().unwrap();
        assert_eq!(second, b, "a's second item waits for its first to finish");
        assert!(q.next_ready().is_none());
        std::thread::sleep(Duration::from_millis(10));
        q.finished(a.clone());
        std::thread::sleep(Duration::from_millis(5));
        let (third, _, waited) = q.next_ready().unwrap();
        assert_eq!(third, a);
        assert!(waited.queued >= Duration::from_millis(45), "queued before the sleeps: {waited:?}");
        // Ready only since its job's first item finished, 40 ms or more after it was queued.
        assert!(waited.for_slot >= Duration::from_millis(5), "{waited:?}");
        assert!(waited.queued - waited.for_slot >= Duration::from_millis(40), "{waited:?}");
    }
}
