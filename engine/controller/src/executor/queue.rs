//! The executor's keyed queue: work of one TrainJob runs in order, one item at a time; different jobs run
//! concurrently. Work about a policy (receivers) is not queued: it is done on arrival.

use std::collections::{HashMap, HashSet, VecDeque};

use trainwarden_core::JobKey;

use crate::messages::Work;

/// Queued work per job, and which jobs may start their next item.
#[derive(Default)]
pub(super) struct JobQueues {
    queues: HashMap<JobKey, VecDeque<Work>>,
    /// Jobs with queued work and nothing running, in arrival order.
    ready: VecDeque<JobKey>,
    /// Jobs that are ready or running: a new item of theirs just queues.
    scheduled: HashSet<JobKey>,
}

impl JobQueues {
    /// Queues an item of `job`.
    pub(super) fn push(&mut self, job: JobKey, item: Work) {
        self.queues.entry(job.clone()).or_default().push_back(item);
        if self.scheduled.insert(job.clone()) {
            self.ready.push_back(job);
        }
    }

    /// The next item of a job that has nothing running, with its job.
    pub(super) fn next_ready(&mut self) -> Option<(JobKey, Work)> {
        while let Some(job) = self.ready.pop_front() {
            if let Some(item) = self.queues.get_mut(&job).and_then(VecDeque::pop_front) {
                return Some((job, item));
            }
        }
        None
    }

    /// `job`'s running item finished: its next item becomes ready, or the job leaves the queues.
    pub(super) fn finished(&mut self, job: JobKey) {
        match self.queues.get(&job) {
            Some(q) if !q.is_empty() => self.ready.push_back(job),
            _ => {
                self.queues.remove(&job);
                self.scheduled.remove(&job);
            }
        }
    }
}
