//! What is known beside a job's own reports: its namespace's labels (ClusterProgressPolicy selectors), its
//! GPUs' readings (`--prometheus-url`: each poll, and the history read back at start), the demand queued
//! behind its Kueue LocalQueue (`--kueue-queues`), and whether those sources can be read. A reading never
//! creates a job: only jobs the TrainJob watch delivered (and not exempt) are judged on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use trainwarden_core::{GpuSample, JobKey, QueueDemand, Timestamp};

use super::Brain;
use crate::messages::{LocalQueueRef, QueueDemands, SourceHealth};

impl Brain {
    /// A namespace's labels: every job's selection (and so its gauges and verdict) may change.
    pub(super) fn on_namespace(&mut self, name: &str, labels: BTreeMap<String, String>) {
        self.evaluator.set_namespace_labels(name, labels);
        if let Some(g) = &mut self.gauges {
            g.touch_all();
        }
        self.verdicts.touch_all();
    }

    /// The GPUs' readings of one Prometheus poll, each judged with its job.
    pub(super) fn on_gpu_readings(&mut self, readings: Vec<(JobKey, GpuSample)>, now: Timestamp) {
        let started = Instant::now();
        for (key, sample) in readings {
            // Only jobs the TrainJob watch delivered: a reading never creates a job.
            if self.exempt.contains(&key) || self.evaluator.job(&key).is_none() {
                continue;
            }
            if let Some(g) = &mut self.gauges {
                g.touch(&key);
            }
            self.evaluator.observe_gpu(&key, &sample, now, &mut self.events);
            self.metrics.evaluations.inc();
        }
        self.metrics.evaluation_seconds.observe(started.elapsed().as_secs_f64());
    }

    /// The GPUs' history read back at start, oldest step first: recorded whole, then each job judged once.
    pub(super) fn on_gpu_history(&mut self, steps: Vec<Vec<(JobKey, GpuSample)>>, now: Timestamp) {
        let mut touched = BTreeSet::new();
        for (key, sample) in steps.into_iter().flatten() {
            if self.exempt.contains(&key) || self.evaluator.job(&key).is_none() {
                continue;
            }
            self.evaluator.record_gpu(&key, &sample, now);
            touched.insert(key);
        }
        for key in touched {
            if let Some(g) = &mut self.gauges {
                g.touch(&key);
            }
            self.evaluator.tick_job(&key, now, &mut self.events);
            self.metrics.evaluations.inc();
        }
    }

    /// The demand behind every known LocalQueue, whole.
    pub(super) fn on_queue_demand(&mut self, queues: Arc<QueueDemands>, now: Timestamp) {
        self.queues = queues;
        self.judge_queues(now);
    }

    /// Whether Kueue's queues can be read.
    pub(super) fn on_kueue_health(&mut self, health: SourceHealth, now: Timestamp) {
        if !health.healthy && !self.queues.queues.is_empty() {
            // What was known is no longer current: rules read the queue as unknown, not as the
            // demand of whenever the watch last worked.
            self.queues = Arc::default();
            self.judge_queues(now);
        }
        self.queue_health = Some(health);
    }

    /// The demand behind a job's LocalQueue (`queue`, in the job's namespace), less the job's own pending
    /// Workload (`uid`: the job's); `None` when the job is not Kueue's or its LocalQueue is not known.
    pub(super) fn queue_of(
        &self,
        queue: Option<&str>,
        job: &JobKey,
        uid: Option<&str>,
    ) -> Option<QueueDemand> {
        self.queues.for_job(&LocalQueueRef::new(job.namespace.as_str(), queue?), uid)
    }

    /// Every Kueue-managed job is given its LocalQueue's demand, and judged again where it changed.
    pub(super) fn judge_queues(&mut self, now: Timestamp) {
        let started = Instant::now();
        let queued: Vec<(JobKey, Option<QueueDemand>)> = self
            .evaluator
            .job_keys()
            .filter_map(|key| {
                let q = self.evaluator.job(key)?.snapshot.kueue_queue.as_deref()?;
                let uid = self.history.uid_of(key);
                Some((key.clone(), self.queue_of(Some(q), key, uid.as_deref())))
            })
            .collect();
        for (key, demand) in queued {
            if !self.exempt.contains(&key) {
                self.evaluator.observe_queue(&key, demand, now, &mut self.events);
            }
        }
        self.metrics.evaluation_seconds.observe(started.elapsed().as_secs_f64());
    }
}
