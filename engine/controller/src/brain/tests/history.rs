//! History checkpoints on TrainJobs: restored by a new leader, written at a firing after its suspension,
//! retried, never by a follower.

use super::*;

const RULE: &str = "    - {name: plateau, uses: plateau, with: {metric: loss, window: 5, minDelta: 0.01}, actions: [{suspend: {}}]}\n";
const UID: &str = "uid-1";

fn leader() -> Brain {
    let config = ControllerConfig { history_interval: Duration::from_secs(0), ..ControllerConfig::default() };
    let mut b = Brain::new(&config, Arc::new(Metrics::new()), None);
    b.lead(true);
    b.handle(policy_input(RULE, None), at_sec(0));
    b.work.clear();
    b
}

/// Report `i` (one a second) as the watch delivers it, carrying `annotation` as the TrainJob does.
fn report(i: i64, annotation: Option<&str>) -> Input {
    // From report 4 on, flat around the best (1.1 at report 3), each value a newly logged one: report 4 is
    // 1.101, not a repeat of 1.1 (a repeated value is the cached metric re-sent, not an observation).
    let loss = if i < 4 { 2.0 - 0.3 * i as f64 } else { 1.1 + 0.001 * ((i + 1) % 2) as f64 };
    let mut snapshot = JobSnapshot::new(JobKey::new("ml", "ft"));
    let mut sample = ProgressSample::empty(at_sec(i), SampleSource::TrainerStatus);
    sample.metrics.push(Metric { name: "loss".into(), value: loss });
    sample.current_step = Some(i as f64);
    snapshot.sample = Some(sample);
    if let Some(a) = annotation {
        snapshot.annotations.insert(crate::HISTORY_ANNOTATION.into(), a.into());
    }
    crate::brain::tests::watched(snapshot, Some(UID))
}

/// The executor's answer to a checkpoint write: stored.
fn stored(b: &mut Brain, s: &HistorySave, at: Timestamp) {
    b.handle(Input::HistorySaved { job: s.job.clone(), content: s.content, at: s.at, stored: true }, at);
}

/// Feeds reports `from..to` (each checkpoint write confirmed); the report at which a suspension was
/// issued and the last checkpoint saved.
fn run(b: &mut Brain, from: i64, to: i64, mut saved: Option<String>) -> (Option<i64>, Option<String>) {
    let mut fired = None;
    for i in from..to {
        b.handle(report(i, saved.as_deref()), at_sec(i));
        for w in b.work.drain(..).collect::<Vec<_>>() {
            match w {
                Work::Act(_) => {
                    fired.get_or_insert(i);
                }
                Work::SaveHistory(s) => {
                    stored(b, &s, at_sec(i));
                    saved = Some(s.text);
                }
                _ => {}
            }
        }
    }
    (fired, saved)
}

#[test]
fn a_new_leader_restores_the_history_from_the_trainjob_and_fires_on_the_same_report() {
    let (expected, _) = run(&mut leader(), 0, 20, None);
    assert_eq!(expected, Some(8), "5 reports without improvement after the best at report 3");
    let (fired, stored) = run(&mut leader(), 0, 6, None);
    assert_eq!(fired, None);
    let mut next = leader();
    // The TrainJob still shows report 5 and the checkpoint written after it.
    assert_eq!(run(&mut next, 5, 20, stored).0, expected);
    assert_eq!(
        next.metrics
            .history_checkpoints
            .get_or_create(&crate::metrics::HistoryLabels { result: HistoryResult::Restored })
            .get(),
        1
    );
}

/// The report that fires a suspending rule sends the firing's Event first, then the suspension, then the
/// checkpoint taken at the firing: the suspension waits for no write that changes nothing.
#[test]
fn a_firings_checkpoint_is_stored_after_its_suspension() {
    let mut b = leader();
    let mut firing = None;
    for i in 0..20 {
        b.handle(report(i, None), at_sec(i));
        let work = b.outgoing();
        if work.iter().any(|w| matches!(w, Work::Act(_))) {
            firing = Some(work);
            break;
        }
        for w in work {
            if let Work::SaveHistory(s) = w {
                stored(&mut b, &s, at_sec(i));
            }
        }
    }
    let order: Vec<&str> = firing
        .expect("the plateau fires")
        .iter()
        .filter_map(|w| match w {
            Work::RecordEvent(e) if e.notice.reason == Reason::RuleFiring => Some("event"),
            Work::Act(i) if matches!(i.action, ActionSpec::Suspend(_)) => Some("suspend"),
            Work::SaveHistory(_) => Some("checkpoint"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["event", "suspend", "checkpoint"]);
}

/// A firing's Event names the TrainJob by the uid its report carried, so the executor records it without
/// reading the object first; a job the loop no longer knows is read first (no uid).
#[test]
fn a_firings_event_carries_the_uid_the_job_was_seen_with() {
    let mut b = leader();
    let mut events = Vec::new();
    for i in 0..20 {
        b.handle(report(i, None), at_sec(i));
        events.extend(b.outgoing().into_iter().filter_map(|w| match w {
            Work::RecordEvent(e) => Some((e.notice.reason, e.uid)),
            _ => None,
        }));
    }
    assert!(events.iter().any(|(reason, _)| *reason == Reason::RuleFiring), "{events:?}");
    assert!(events.iter().all(|(_, uid)| uid.as_deref() == Some(UID)), "{events:?}");
    b.handle(Input::JobGone(JobKey::new("ml", "ft")), at_sec(21));
    let mut gone = b.outgoing();
    gone.push(Work::RecordEvent(Box::new(TrainJobEvent {
        job: JobKey::new("ml", "ft"),
        notice: Notice::exempt("test"),
        uid: None,
    })));
    b.work = gone;
    for w in b.outgoing() {
        if let Work::RecordEvent(e) = w {
            assert_eq!(e.uid, None, "{} for a job no longer known", e.notice.reason);
        }
    }
}

#[test]
fn a_firing_is_checkpointed_without_waiting_for_the_interval() {
    let config =
        ControllerConfig { history_interval: Duration::from_secs(3600), ..ControllerConfig::default() };
    let mut b = Brain::new(&config, Arc::new(Metrics::new()), None);
    b.lead(true);
    b.handle(policy_input(RULE, None), at_sec(0));
    let mut writes = Vec::new();
    for i in 0..10 {
        b.handle(report(i, None), at_sec(i));
        for w in b.work.drain(..).collect::<Vec<_>>() {
            if let Work::SaveHistory(s) = w {
                stored(&mut b, &s, at_sec(i));
                writes.push(i);
            }
        }
    }
    assert_eq!(writes, vec![0, 8], "the first sample, then the report the plateau fired at");
}

#[test]
fn a_checkpoint_that_was_not_stored_is_written_again_on_a_timer_without_a_sample() {
    let mut b = leader();
    b.handle(report(0, None), at_sec(0));
    let save = b
        .work
        .drain(..)
        .find_map(|w| match w {
            Work::SaveHistory(s) => Some(s),
            _ => None,
        })
        .expect("a first checkpoint");
    // The write failed (or went to a replica that lost the Lease): the job then goes silent.
    b.handle(
        Input::HistorySaved { job: save.job.clone(), content: save.content, at: save.at, stored: false },
        at_sec(1),
    );
    let mut again: Vec<HistorySave> = Vec::new();
    for _ in 0..100 {
        let Some(next) = b.next_tick().filter(|n| *n <= at_sec(31)) else { break };
        b.tick(next);
        again.extend(b.work.drain(..).filter_map(|w| match w {
            Work::SaveHistory(s) => Some(*s),
            _ => None,
        }));
    }
    assert_eq!(again.len(), 1, "written again with no new sample");
    assert_eq!(again[0].content, save.content);
}

#[test]
fn the_echo_of_a_checkpoint_write_is_no_new_sample_and_no_new_write() {
    let mut b = leader();
    let (_, stored) = run(&mut b, 0, 3, None);
    let stored = stored.expect("written after a new sample");
    for _ in 0..3 {
        // The watch event our own write caused: the same report, now with the annotation.
        b.handle(report(2, Some(&stored)), at_sec(3));
        assert!(!b.work.iter().any(|w| matches!(w, Work::SaveHistory(_))), "no feedback loop");
    }
    assert_eq!(b.evaluator().job(&JobKey::new("ml", "ft")).unwrap().series.samples, 3);
    assert!(
        !b.evaluator()
            .job(&JobKey::new("ml", "ft"))
            .unwrap()
            .snapshot
            .annotations
            .contains_key(crate::HISTORY_ANNOTATION),
        "the evaluator does not keep the checkpoint text"
    );
}

#[test]
fn a_follower_writes_nothing_and_an_unusable_checkpoint_is_refused_not_fatal() {
    let mut b = leader();
    b.lead(false);
    let (_, stored) = run(&mut b, 0, 5, None);
    assert_eq!(stored, None, "only the leader writes");
    let mut fresh = leader();
    fresh.handle(report(0, Some("{\"v\":99}")), at_sec(0));
    assert_eq!(fresh.evaluator().job(&JobKey::new("ml", "ft")).unwrap().series.samples, 1);
    assert_eq!(
        fresh
            .metrics
            .history_checkpoints
            .get_or_create(&crate::metrics::HistoryLabels { result: HistoryResult::Refused })
            .get(),
        1
    );
}
