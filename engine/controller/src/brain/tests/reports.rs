//! A TrainJob's reports: from watched objects to a firing, unknown progress fields surfaced, an exempt job.

use super::*;

/// Issue 14: a misspelt key in a live TrainJob's progress is not a reason to stop judging the job, but
/// must not go unnoticed either: one warning Event per job and key, a counter by source.
#[test]
fn unknown_progress_fields_are_surfaced_once_per_job_and_key() {
    let job = |name: &str, at: i64, status: serde_json::Value| trainer_status("ml", name, at_sec(at), status);
    let events = |brain: &mut Brain| -> Vec<String> {
        brain
            .work
            .drain(..)
            .filter_map(|w| match w {
                Work::RecordEvent(e) => Some(format!(
                    "{} {} {}: {}",
                    e.job,
                    e.notice.reason.is_warning(),
                    e.notice.reason,
                    e.notice.note
                )),
                _ => None,
            })
            .collect()
    };
    let counted = |brain: &Brain, source: ProgressSource| {
        brain.metrics.unknown_progress_fields.get_or_create(&ProgressSourceLabels { source }).get()
    };
    let mut b = brain();
    let typo = serde_json::json!({"trainMetricz": [{"name": "loss", "value": "1"}]});
    b.handle(job("ft", 0, typo.clone()), at_sec(0));
    assert_eq!(
        events(&mut b),
        ["ml/ft true UnknownProgressFields: progress read without the fields its format does not define: \
          status.trainerStatus.trainMetricz: unknown field; expected one of progressPercentage, \
          estimatedRemainingSeconds, metrics, lastUpdatedTime"]
    );
    assert_eq!(counted(&b, ProgressSource::TrainerStatus), 1);
    assert!(b.evaluator().job(&JobKey::new("ml", "ft")).is_some(), "the job is still judged");
    // The next report with the same typo: nothing new to say.
    b.handle(job("ft", 5, typo.clone()), at_sec(5));
    assert_eq!(events(&mut b), Vec::<String>::new());
    assert_eq!(counted(&b, ProgressSource::TrainerStatus), 1);
    // Another key: said once more; another job: its own Event.
    b.handle(job("ft", 10, serde_json::json!({"trainMetricz": [], "metric": 1})), at_sec(10));
    assert_eq!(events(&mut b).len(), 1);
    b.handle(job("other", 10, typo.clone()), at_sec(10));
    assert_eq!(events(&mut b).len(), 1);
    assert_eq!(counted(&b, ProgressSource::TrainerStatus), 3);
    // Forgotten with the job.
    b.handle(Input::JobGone(JobKey::new("ml", "ft")), at_sec(11));
    b.handle(job("ft", 12, typo), at_sec(12));
    assert_eq!(events(&mut b).len(), 1);
    // A well-formed report says nothing.
    b.handle(job("clean", 12, serde_json::json!({"metrics": [{"name": "loss", "value": "1"}]})), at_sec(12));
    assert_eq!(events(&mut b), Vec::<String>::new());
    assert_eq!(counted(&b, ProgressSource::Annotation), 0);
}

#[test]
fn a_policy_whose_jobs_report_unknown_progress_fields_says_so_in_its_status() {
    let job = |namespace: &str, name: &str, status: serde_json::Value| {
        trainer_status(namespace, name, at_sec(1), status)
    };
    let understood = |b: &mut Brain, at| {
        let status = b.status_of(&key(), at);
        let c = status.conditions.iter().find(|c| c.type_ == CONDITION_PROGRESS_UNDERSTOOD).unwrap().clone();
        (c.status, c.reason, c.message)
    };
    let mut b = brain();
    b.handle(
        policy_input(
            "    - {name: nan, uses: non_finite, with: {metric: loss}, actions: [{suspend: {}}]}\n",
            None,
        ),
        at_sec(0),
    );
    assert_eq!(understood(&mut b, at_sec(0)).0, "True");
    b.handle(
        job("ml", "ft", serde_json::json!({"trainMetricz": [{"name": "loss", "value": "1"}]})),
        at_sec(1),
    );
    b.handle(job("ml", "ok", serde_json::json!({"metrics": [{"name": "loss", "value": "1"}]})), at_sec(1));
    let (status, reason, message) = understood(&mut b, at_sec(2));
    assert_eq!((status.as_str(), reason.as_str()), ("False", "UnknownProgressFields"));
    assert_eq!(
        message,
        "1 selected job reports progress fields their format does not define, so rules cannot see them \
         (check the spelling in the training code's report): ml/ft (status.trainerStatus.trainMetricz)"
    );
    // Another namespace's job is not this policy's concern.
    b.handle(job("other", "x", serde_json::json!({"metric": 1})), at_sec(3));
    assert!(understood(&mut b, at_sec(3)).2.starts_with("1 selected job reports"));
    // The training code fixes its report: the condition clears.
    b.handle(job("ml", "ft", serde_json::json!({"metrics": [{"name": "loss", "value": "1"}]})), at_sec(4));
    assert_eq!(understood(&mut b, at_sec(5)).1, "KnownFields");
}

#[test]
fn an_exempt_job_is_announced_once_and_never_judged() {
    let mut b = brain();
    b.handle(
        policy_input("    - {name: high, when: 'metric(\"loss\") > 5.0', actions: [{suspend: {}}]}\n", None),
        at_sec(0),
    );
    for s in 1..3 {
        let Input::Job(mut job) = job_reporting(9.0, at_sec(s)) else { unreachable!() };
        job.exempt = true;
        b.handle(Input::Job(job), at_sec(s));
    }
    let reasons: Vec<String> = b
        .work
        .drain(..)
        .map(|w| match w {
            Work::RecordEvent(a) => a.notice.reason.to_string(),
            Work::Act(i) => format!("act {}", i.action.kind()),
            Work::Notify(..) => "notify".into(),
            Work::Receivers(_) => "receivers".into(),
            Work::SaveHistory(_) | Work::FlushHistory(..) => "history".into(),
            Work::SaveVerdict(_) => "verdict".into(),
            Work::Checkpoint(_) => "checkpoint".into(),
        })
        .collect();
    assert_eq!(reasons, vec!["Exempt"]);
}

/// The controller's path end to end without a cluster: watched TrainJob objects (as JSON, the way the
/// API server sends them) through `inputs::job_input` into the brain, with a plateau rule.
#[test]
fn a_plateau_fires_from_watched_trainjob_objects() {
    let mut b = Brain::new(&ControllerConfig::default(), Arc::new(Metrics::new()), None);
    let written = policy("p")
        .namespace("ns")
        .spec("samplingInterval: 1s")
        .rule("{name: plateau, uses: plateau, with: {metric: loss, window: 4, minDelta: 0.01}, actions: [{suspend: {}}]}");
    let doc = written.document();
    let key =
        PolicyId { kind: PolicyKind::Namespaced, namespace: Some("ns".to_string()), name: "p".to_string() };
    b.handle(
        Input::Policy(Box::new(PolicyInput {
            key,
            uid: None,
            generation: 1,
            document: Ok(doc),
            status: None,
        })),
        at_sec(0),
    );
    let losses = ["2.0", "1.5", "1.0", "0.80", "0.801", "0.799", "0.802", "0.800", "0.803"];
    let mut fired = None;
    for (i, loss) in losses.iter().enumerate() {
        let obj: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": "2026-11-30T09:59:00Z"},
            "spec": {"trainer": {"numNodes": 1}},
            "status": {"trainerStatus": {"progressPercentage": 10 + i, "metrics": [{"name": "loss", "value": loss}],
                       "lastUpdatedTime": format!("2026-11-30T10:00:{i:02}Z")}}
        }))
        .unwrap();
        if i == 5 {
            // A status write comes back as a watch event of the unchanged policy: nothing may reset.
            let doc = written.document();
            let key = PolicyId {
                kind: PolicyKind::Namespaced,
                namespace: Some("ns".to_string()),
                name: "p".to_string(),
            };
            let input = PolicyInput { key, uid: None, generation: 1, document: Ok(doc), status: None };
            b.handle(Input::Policy(Box::new(input)), at_sec(i as i64));
        }
        let input = crate::sources::trainjobs::job_input(&obj).expect("a namespaced TrainJob");
        b.handle(Input::Job(Box::new(input)), at_sec(i as i64));
        if b.work.drain(..).any(|w| matches!(w, Work::Act(_))) {
            fired.get_or_insert(i);
        }
    }
    assert_eq!(fired, Some(7), "fires on the 4th report without improvement after the best (0.80)");
}
