//! Cohort rules through the evaluator: jobs grouped by their label, judged at each report against their
//! siblings, stopped once; a job in another cohort, or in none, is never compared; a completed job becomes a
//! reference for `percentile`; a deleted job leaves its cohort.

use super::*;
use crate::testing::policy::policy;
use crate::testing::{at_sec, job};

/// A job of experiment `exp` reporting `loss` at `step` (of 100) at second `secs`.
fn report(h: &mut Harness, name: &str, exp: Option<&str>, secs: i64, step: f64, loss: f64, phase: JobPhase) {
    let mut b = job("ml", name)
        .gpus(1.0)
        .phase(phase)
        .running_since(at_sec(0))
        .reporting(at_sec(secs), &[("loss", loss)])
        .sample(|s| {
            s.current_step = Some(step);
            s.total_steps = Some(100.0);
        });
    if let Some(exp) = exp {
        b = b.label("katib.kubeflow.org/experiment", exp);
    }
    h.observe(b.build(), at_sec(secs));
}

fn suspended(h: &Harness) -> Vec<(String, i64)> {
    h.intents()
        .iter()
        .filter(|i| matches!(i.action, crate::policy::ActionSpec::Suspend(_)))
        .map(|i| (i.job.name.clone(), i.at.as_second() - at_sec(0).as_second()))
        .collect()
}

fn harness(with: &str, detector: &str) -> Harness {
    let yaml = policy("sweep")
        .rule(&format!("{{name: cohort, uses: {detector}, with: {with}, actions: [{{suspend: {{}}}}]}}"))
        .yaml();
    Harness::new(&[yaml])
}

/// Five trials of one experiment report in lockstep; `median_stop` (minJobs 3, startStep 2) suspends the two
/// worst at the first step they are worse than the median of the others' running averages; the trial of
/// another experiment and the unlabelled one are never compared with them.
#[test]
fn median_stop_suspends_the_worst_trials_of_one_experiment() {
    let mut h = harness("{metric: loss, minJobs: 3, startStep: 2}", "median_stop");
    let curves: [(&str, Option<&str>, [f64; 4]); 7] = [
        ("a", Some("lr"), [1.0, 0.8, 0.6, 0.5]),
        ("b", Some("lr"), [1.0, 0.7, 0.5, 0.4]),
        ("c", Some("lr"), [1.0, 0.9, 0.7, 0.6]),
        ("d", Some("lr"), [1.5, 1.4, 1.3, 1.2]),
        ("e", Some("lr"), [1.0, 0.85, 0.8, 0.75]),
        ("other", Some("bs"), [9.0, 9.0, 9.0, 9.0]),
        ("loner", None, [9.0, 9.0, 9.0, 9.0]),
    ];
    let mut secs = 0;
    for step in 0..4 {
        for (name, exp, curve) in &curves {
            secs += 1;
            report(&mut h, name, *exp, secs, step as f64 + 1.0, curve[step], JobPhase::Running);
        }
    }
    // Step 2: d sees a, b, c (0.8, 0.7, 0.9; median 0.8) and stops (best 1.4); e sees a, b, c, d
    // (median 0.85): 0.85 ties. Step 3: e's best 0.8 vs running averages (from step 2) a 0.7, b 0.6, c 0.8,
    // d 1.35 -> median 0.75: stops.
    assert_eq!(suspended(&h), [("d".to_string(), 11), ("e".to_string(), 19)]);
    let p = h.ev.policies().next().unwrap().reference.clone();
    assert_eq!(h.ev.cohort_size(&JobKey::new("ml", "a"), &p, "cohort"), Some(5));
    assert_eq!(h.ev.cohort_size(&JobKey::new("ml", "other"), &p, "cohort"), Some(1));
    assert_eq!(h.ev.cohort_size(&JobKey::new("ml", "loner"), &p, "cohort"), None);
    // A deleted trial leaves its cohort.
    h.ev.forget_job(&JobKey::new("ml", "a"), at_sec(100), &mut h.events);
    assert_eq!(h.ev.cohort_size(&JobKey::new("ml", "b"), &p, "cohort"), Some(4));
}

/// `percentile` compares with completed trials only: before two trials complete nothing stops; then a
/// trial worse than their median at the same step is suspended.
#[test]
fn percentile_waits_for_completed_trials() {
    let mut h = harness("{metric: loss, percentile: 50, minJobs: 2}", "percentile");
    let mut secs = 0;
    for (name, losses) in [("a", [1.0, 0.5, 0.3]), ("b", [1.0, 0.6, 0.4])] {
        for (i, loss) in losses.iter().enumerate() {
            secs += 1;
            let phase = if i == 2 { JobPhase::Complete } else { JobPhase::Running };
            report(&mut h, name, Some("lr"), secs, i as f64 + 1.0, *loss, phase);
        }
    }
    // A late trial, judged against a and b at each step: 1.0 ties at step 1, 0.9 > 0.55 at step 2.
    report(&mut h, "late", Some("lr"), 10, 1.0, 1.0, JobPhase::Running);
    assert!(suspended(&h).is_empty());
    report(&mut h, "late", Some("lr"), 11, 2.0, 0.9, JobPhase::Running);
    assert_eq!(suspended(&h), [("late".to_string(), 11)]);
    let reason = &h.intents()[0].reason.summary;
    assert!(reason.contains("0.55") && reason.contains("2 finished sibling jobs"), "{reason}");
}

/// `successive_halving` with η = 2 and rungs at steps 1, 2, 4: a policy change that keeps the rule keeps
/// its cohorts; the second trial at rung 1 that is not the best stops.
#[test]
fn successive_halving_keeps_its_cohorts_across_an_unchanged_policy() {
    let with = "{metric: loss, minResource: 1, reductionFactor: 2}";
    let mut h = harness(with, "successive_halving");
    report(&mut h, "a", Some("lr"), 1, 1.0, 0.5, JobPhase::Running);
    // The same policy applied again (a resync): the cohort is kept.
    let yaml = policy("sweep").rule(&format!(
        "{{name: cohort, uses: successive_halving, with: {with}, actions: [{{suspend: {{}}}}]}}"
    ));
    let p = yaml.compile(h.ev.scripts());
    h.ev.upsert_policy(p, at_sec(2), &mut h.events);
    report(&mut h, "b", Some("lr"), 3, 1.0, 0.6, JobPhase::Running);
    assert_eq!(suspended(&h), [("b".to_string(), 3)]);
}

/// The `cohort_*` functions in a condition: a trial fires when it is ranked below the second of a cohort of
/// at least four at its step, and the reason's values come from its cohort as of its report.
#[test]
fn cohort_functions_rank_a_trial_among_its_siblings_at_its_step() {
    let yaml = policy("sweep")
        .rule(r#"{name: bottom, when: 'cohort_size() >= 4 && cohort_rank() > 2 && metric("loss") > cohort_median("loss")', actions: [{suspend: {}}]}"#)
        .yaml();
    let mut h = Harness::new(&[yaml]);
    for (i, (name, loss)) in [("a", 1.0), ("b", 2.0), ("c", 0.5), ("d", 3.0), ("e", 0.1)].iter().enumerate() {
        report(&mut h, name, Some("lr"), i as i64 + 1, 1.0, *loss, JobPhase::Running);
    }
    // c is 1st of 3 (too few); d is 4th of 4 (0.5 1 2 3; median 1.5): fires; e is 1st of 5.
    assert_eq!(suspended(&h), [("d".to_string(), 4)]);
    // A job of another experiment is alone in its cohort: its rank is 1, its cohort size 1.
    report(&mut h, "z", Some("other"), 10, 1.0, 9.0, JobPhase::Running);
    assert_eq!(suspended(&h).len(), 1);
}
