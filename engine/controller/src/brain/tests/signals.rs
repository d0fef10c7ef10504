//! What is known beside the reports: GPU readings and whether they can be read; the demand behind a
//! job's Kueue LocalQueue.

use super::*;

/// A policy with GPU rules says whether they can see anything: not configured, failing, reading; a
/// policy without them has no GpuMetrics condition. Readings of a job the TrainJob watch never delivered
/// create nothing; readings of a known one are judged.
#[test]
fn gpu_rules_report_whether_gpu_metrics_are_read() {
    let gpu_condition = |b: &mut Brain| {
        b.status_of(&key(), at_sec(30))
            .conditions
            .into_iter()
            .find(|c| c.type_ == trainwarden_kube::status::CONDITION_GPU_METRICS)
            .map(|c| (c.status, c.reason))
    };
    let rule = "    - {name: idle, uses: gpu_idle, with: {threshold: 10, duration: 10s}, actions: [{suspend: {}}]}\n";
    let mut b = brain();
    b.handle(policy_input(rule, None), at_sec(0));
    assert_eq!(gpu_condition(&mut b), Some(("False".into(), "NotConfigured".into())));
    let mut b = brain();
    b.handle(
        policy_input("    - {name: nan, uses: non_finite, with: {metric: loss}, actions: []}\n", None),
        at_sec(0),
    );
    assert_eq!(gpu_condition(&mut b), None, "no GPU rule, no GpuMetrics condition");

    let config = ControllerConfig {
        gpu_metrics: Some(crate::GpuMetricsConfig::new("http://prometheus:9090")),
        ..ControllerConfig::default()
    };
    let mut b = Brain::new(&config, Arc::new(Metrics::new()), None);
    b.handle(policy_input(rule, None), at_sec(0));
    assert_eq!(gpu_condition(&mut b), Some(("False".into(), "NotReadYet".into())));
    let health = |healthy| crate::messages::SourceHealth { healthy, message: "m".into() };
    b.handle(Input::GpuMetrics(health(false)), at_sec(1));
    assert_eq!(gpu_condition(&mut b), Some(("False".into(), "QueryFailing".into())));
    b.handle(Input::GpuMetrics(health(true)), at_sec(2));
    assert_eq!(gpu_condition(&mut b), Some(("True".into(), "Reading".into())));

    let idle = |at: i64| {
        let gpus = vec![trainwarden_core::GpuReading {
            id: "ft-node-0-0-x/0".into(),
            util: Some(0.0),
            engine_active: None,
            power: Some(60.0),
            fb_used: None,
        }];
        (JobKey::new("ml", "ft"), trainwarden_core::GpuSample { at: at_sec(at), gpus })
    };
    b.handle(Input::GpuReadings(vec![idle(3)]), at_sec(3));
    assert!(b.evaluator().job(&JobKey::new("ml", "ft")).is_none(), "a reading never creates a job");
    b.handle(job_reporting(1.0, at_sec(3)), at_sec(3));
    for at in 4..=14 {
        b.handle(Input::GpuReadings(vec![idle(at)]), at_sec(at));
    }
    assert_eq!(actions(&mut b), ["suspend ml/ft"]);
}

/// Issue 17 part 2: a queue-aware rule fires when demand arrives behind the job's LocalQueue, not before;
/// a job of another LocalQueue, or not Kueue's, reads the queue as unknown; the policy's KueueQueues
/// condition says whether the queues are read, and a failing watch makes the demand unknown.
#[test]
fn queue_rules_fire_when_others_wait_behind_the_job_s_local_queue() {
    use crate::messages::{LocalQueueRef, SourceHealth};
    use trainwarden_core::QueueDemand;
    let condition = |b: &mut Brain| {
        b.status_of(&key(), at_sec(30))
            .conditions
            .into_iter()
            .find(|c| c.type_ == trainwarden_kube::status::CONDITION_KUEUE_QUEUES)
            .map(|c| (c.status, c.reason))
    };
    let rule = "    - {name: waiting, when: 'queue_pending_gpus() >= 8.0', actions: [{suspend: {}}]}\n";
    let mut b = brain();
    b.handle(policy_input(rule, None), at_sec(0));
    assert_eq!(condition(&mut b), Some(("False".into(), "NotReadYet".into())));
    let demand = |lq: &str, pending, pending_gpus| {
        Input::QueueDemand(Arc::new(crate::messages::QueueDemands {
            queues: BTreeMap::from([(LocalQueueRef::new("ml", lq), QueueDemand { pending, pending_gpus })]),
            own: BTreeMap::new(),
        }))
    };
    let queued_job = |queue: Option<&str>, at| {
        let Input::Job(mut job) = job_reporting(1.0, at_sec(at)) else { unreachable!() };
        if let Ok(s) = &mut job.snapshot {
            s.kueue_queue = queue.map(str::to_string);
        }
        Input::Job(job)
    };
    b.handle(Input::KueueQueues(SourceHealth { healthy: true, message: "m".into() }), at_sec(1));
    assert_eq!(condition(&mut b), Some(("True".into(), "Reading".into())));
    b.handle(demand("team", 1, 4.0), at_sec(1));
    b.handle(queued_job(Some("team"), 2), at_sec(2));
    let queue = |b: &Brain| b.evaluator().job(&JobKey::new("ml", "ft")).and_then(|j| j.queue);
    assert_eq!(queue(&b), Some(QueueDemand { pending: 1, pending_gpus: 4.0 }));
    assert!(actions(&mut b).is_empty(), "4 GPUs wait: not enough");
    b.handle(demand("other", 3, 24.0), at_sec(3));
    assert_eq!(queue(&b), None, "its LocalQueue is no longer known");
    assert!(actions(&mut b).is_empty(), "another queue's demand is not this job's");
    b.handle(demand("team", 2, 12.0), at_sec(4));
    assert_eq!(actions(&mut b), ["suspend ml/ft"]);

    // Not Kueue's: the queue is unknown whatever waits.
    let mut b = brain();
    b.handle(policy_input(rule, None), at_sec(0));
    b.handle(demand("team", 2, 12.0), at_sec(1));
    b.handle(queued_job(None, 2), at_sec(2));
    assert_eq!(queue(&b), None);
    assert!(actions(&mut b).is_empty());
    // A failing watch: what was known is dropped.
    b.handle(queued_job(Some("team"), 3), at_sec(3));
    assert_eq!(queue(&b), Some(QueueDemand { pending: 2, pending_gpus: 12.0 }));
    b.handle(Input::KueueQueues(SourceHealth { healthy: false, message: "forbidden".into() }), at_sec(4));
    assert_eq!(condition(&mut b), Some(("False".into(), "Unavailable".into())));
    assert_eq!(queue(&b), None);

    let config = ControllerConfig { kueue_queues: false, ..ControllerConfig::default() };
    let mut b = Brain::new(&config, Arc::new(Metrics::new()), None);
    b.handle(policy_input(rule, None), at_sec(0));
    assert_eq!(condition(&mut b), Some(("False".into(), "NotConfigured".into())));
    let mut b = brain();
    b.handle(
        policy_input("    - {name: nan, uses: non_finite, with: {metric: loss}, actions: []}\n", None),
        at_sec(0),
    );
    assert_eq!(condition(&mut b), None, "no queue rule, no KueueQueues condition");
}
