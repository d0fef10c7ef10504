//! The plateau detector on hand-made curves with known answers: a plateau after a share of the planned run,
//! a slow improver under noise, a flat stretch before a learning-rate drop, a recovered spike, an eval-gap
//! reporter, a strictly improving curve (property), and the windowed, Ray-style and parameter cases.

use super::super::testkit::{Job, detector, errors};
use serde_json::json;

/// Deterministic noise in [-1, 1].
fn noise(x: f64) -> f64 {
    ((x * 12.9898).sin() * 43758.5453).rem_euclid(1.0) * 2.0 - 1.0
}

/// Logs `metrics(step)` every 10 steps of a 10000-step run (one report a minute); the first firing.
fn first_fire(
    d: &dyn super::Detector,
    metrics: impl Fn(f64) -> Vec<(&'static str, f64)>,
) -> Option<(u32, String)> {
    let mut job = Job::new();
    for step in (10..=10_000).step_by(10) {
        let x = f64::from(step);
        job.sample_at_step(d, i64::from(step) * 6, &metrics(x), x, 10_000.0);
        if let Some(f) = job.check(d, i64::from(step) * 6) {
            return Some((step, f.summary));
        }
    }
    None
}

/// Like [`first_fire`], for a run of `epochs` equal epochs that reports its epoch.
fn first_fire_in_epochs(
    d: &dyn super::Detector,
    epochs: f64,
    metrics: impl Fn(f64) -> Vec<(&'static str, f64)>,
) -> Option<(u32, String)> {
    let mut job = Job::new();
    for step in (10..=10_000).step_by(10) {
        let x = f64::from(step);
        let epoch = (x / 10_000.0 * epochs * 100.0).round() / 100.0; // reporters round to two decimals
        job.sample_at_epoch(d, i64::from(step) * 6, &metrics(x), (x, 10_000.0), epoch);
        if let Some(f) = job.check(d, i64::from(step) * 6) {
            return Some((step, f.summary));
        }
    }
    None
}

fn levelled() -> Box<dyn super::Detector> {
    detector(
        "plateau",
        json!({"metric": "auto", "window": "30%", "smoothing": 5, "minDeltaPct": 1, "minDelta": 0.001,
               "minRemaining": "10%", "schedule": true}),
    )
}

#[test]
fn a_plateau_fires_after_a_share_of_the_run() {
    // Learns to 0.8 by step ~2600, then flat with ±1 % noise per log: fires 30 % of the run after its
    // last significant improvement (a lucky stretch of noise can still move the best a little later).
    let (step, summary) = first_fire(levelled().as_ref(), |x| {
        vec![("loss", 0.8 + 1.5 * (-x / 500.0).exp() + 0.008 * noise(x))]
    })
    .expect("flat for 30 % of the run");
    assert!((5600..=8000).contains(&step), "{step}: {summary}");
    assert!(summary.starts_with("loss (median of 5) has not improved by more than 0.00"), "{summary}");
    assert!(summary.contains("% of the planned run"), "{summary}");
}

#[test]
fn a_slow_improver_under_noise_is_left_alone() {
    // Creeps down 1.5 % of its level per 30 % of the run under noise four times each log's gain.
    let slow = |x: f64| vec![("loss", 1.0 - 0.05 * x / 10_000.0 + 0.003 * noise(x))];
    assert_eq!(first_fire(levelled().as_ref(), slow), None);
}

#[test]
fn a_flat_stretch_before_a_scheduled_drop_is_not_a_plateau() {
    // Step decay every 3500 steps: learning until 3000, then the loss is flat between drops and lower
    // after each.
    let lr = |x: f64| 1e-3 * 0.1f64.powi((x / 3500.0).floor() as i32);
    let staircase = move |x: f64| {
        let learning = 0.5 * (1.0 - x / 3000.0).max(0.0);
        vec![
            ("loss", 1.0 + learning - 0.1 * (x / 3500.0).floor() + 0.002 * noise(x)),
            ("learning_rate", lr(x)),
        ]
    };
    // Blind to the schedule it fires in the stretch before the second drop (at 7000)…
    let blind =
        detector("plateau", json!({"metric": "loss", "window": "30%", "smoothing": 5, "minDeltaPct": 1}));
    let (step, _) = first_fire(blind.as_ref(), staircase).expect("blind");
    assert!(step < 7000, "{step}");
    // …reading it, the first drop (one period after the start) says the next comes at 7000: it holds,
    // and the drop restarts its patience (30 % after 7000 is past the last 10 % it leaves alone).
    assert_eq!(first_fire(levelled().as_ref(), staircase), None);
}

#[test]
fn an_epoch_ahead_holds_a_training_loss_only_while_boundaries_bring_drops() {
    // Three epochs of 3333 steps. A memorising fine-tune: it learns in its first epoch, then its loss
    // falls by a step at each boundary and is flat within an epoch. The boundary ahead is a reason to
    // wait: left alone.
    let memorising = |x: f64| {
        let epoch = (x / 3333.4).floor();
        vec![("loss", 0.8 + 0.5 * (-x / 800.0).exp() - 0.2 * epoch + 0.002 * noise(x))]
    };
    assert_eq!(first_fire_in_epochs(levelled().as_ref(), 3.0, memorising), None);
    // Eight epochs, and a loss that went flat in its second and did not drop when the data repeated: a
    // boundary passed without a drop, so the next is no reason to wait; it fires 30 % of the run after
    // its last improvement. (Held for every boundary ahead, it would wait for the last epoch, at 87.5 %.)
    let flat = |x: f64| vec![("loss", 0.8 + 1.5 * (-x / 500.0).exp() + 0.004 * noise(x))];
    let (step, summary) =
        first_fire_in_epochs(levelled().as_ref(), 8.0, flat).expect("no drop at a boundary");
    assert!((5600..=8000).contains(&step), "{step}: {summary}");
}

#[test]
fn a_loss_at_its_floor_is_not_held_for_an_epoch_ahead() {
    // Two epochs; the loss collapses to (almost) zero in the first tenth and stays there: nothing the
    // second epoch could bring is a significant improvement, so the boundary ahead holds nothing.
    let collapsed = |x: f64| vec![("loss", 0.8 * (-x / 100.0).exp())];
    let (step, summary) =
        first_fire_in_epochs(levelled().as_ref(), 2.0, collapsed).expect("a loss at 0 is done");
    assert!(step < 5000, "fires in the first epoch, before any boundary: {step}: {summary}");
    // The same level far from zero (a loss stuck at 0.8) is held while the first boundary is ahead
    // and within the window: the data repeating may still bring it down.
    let stuck = |x: f64| vec![("loss", 0.8 + 0.8 * (-x / 100.0).exp())];
    let (step, _) = first_fire_in_epochs(levelled().as_ref(), 2.0, stuck).expect("fires after the boundary");
    assert!(step > 5000, "{step}");
}

#[test]
fn a_recovered_spike_or_a_lucky_batch_moves_nothing() {
    // Flat at 1.0 with small noise; one log at 0.5 (a lucky batch) and one at 3.0 (a spike).
    let flat = |x: f64| {
        let v = if x == 3000.0 {
            0.5
        } else if x == 3500.0 {
            3.0
        } else {
            1.0 + 0.002 * noise(x)
        };
        vec![("loss", v)]
    };
    let (step, summary) = first_fire(levelled().as_ref(), flat).expect("flat");
    // The median of 5 ignores both: the plateau counts from the start of the run.
    assert!(step <= 3100, "{step}: {summary}");
}

#[test]
fn an_eval_gap_reporter_is_judged_on_its_evaluation() {
    // Evaluates every 500 steps; the training loss is flat, the eval loss keeps improving: no plateau.
    let evaluating = |x: f64| {
        let mut m = vec![("loss", 0.3 + 0.003 * noise(x))];
        if (x as u32).is_multiple_of(500) {
            m.push(("eval_loss", 1.0 - x / 20_000.0));
            m.push(("eval_runtime", 5400.0 + noise(x)));
        }
        m
    };
    assert_eq!(first_fire(levelled().as_ref(), evaluating), None);
    // When the evaluation stops improving too, it fires on the evaluation (a run judged on what its
    // trainer evaluates), after 30 % of the run and enough evaluations.
    let stuck = |x: f64| {
        let mut m = vec![("loss", 0.3 + 0.003 * noise(x))];
        if (x as u32).is_multiple_of(500) {
            m.push(("eval_loss", 0.9 + 0.001 * noise(x)));
        }
        m
    };
    let (step, summary) = first_fire(levelled().as_ref(), stuck).expect("eval flat");
    assert!(summary.starts_with("eval_loss has not improved"), "{summary}");
    assert!(step >= 3000, "{step}");
}

#[test]
fn property_a_strictly_improving_curve_never_fires() {
    // Curves that improve by more than the threshold within every window never fire, whatever their
    // shape and scale, with or without levels.
    let d = detector("plateau", json!({"metric": "loss", "window": "30%", "smoothing": 5, "minDeltaPct": 1}));
    let raw = detector("plateau", json!({"metric": "loss", "window": 20, "minDeltaPct": 1}));
    for c in [0.05, 0.2, 0.5, 1.0] {
        for scale in [1e-3, 1.0, 1e4] {
            // A power law that flattens, plus a linear creep of 5 % over the run: more than 1 % in any
            // 30 % of the run, and in any 20 logs of 10.
            let curve =
                move |x: f64| vec![("loss", scale * (1.0 + x.powf(-c) + 0.05 * (1.0 - x / 10_000.0)))];
            assert_eq!(first_fire(d.as_ref(), curve), None, "c {c} scale {scale}");
            let steep = move |x: f64| vec![("loss", scale * (1.0 + 3.0 * (1.0 - x / 10_000.0)))];
            assert_eq!(first_fire(raw.as_ref(), steep), None, "c {c} scale {scale}");
        }
    }
}

#[test]
fn levelled_parameters_are_checked() {
    let e = errors("plateau", json!({"metric": "auto", "window": "0%", "smoothing": 20, "std": 0.1}));
    assert_eq!(
        e,
        vec![
            "with.window: must be more than 0%",
            "with.smoothing: must be from 1 to 15 logged values, got 20",
            "with.std: std works on raw values of one metric: leave smoothing, metric: auto, a share of the run, minPoints, minRemaining and schedule out",
        ]
    );
}

#[test]
fn fires_after_patience_samples_without_improvement() {
    let d = detector("plateau", json!({"metric": "loss", "window": 5}));
    let mut job = Job::new();
    // Improves for 10 samples, then flat.
    let mut values: Vec<f64> = (0..10).map(|i| 2.0 - 0.1 * i as f64).collect();
    values.extend([1.1003, 1.1001, 1.1004, 1.1002]);
    let last = job.feed(d.as_ref(), "loss", 60, &values);
    assert!(job.check(d.as_ref(), last).is_none(), "4 flat samples < patience 5");
    job.sample(d.as_ref(), last + 60, &[("loss", 1.1005)], None, None);
    let f = job.check(d.as_ref(), last + 60).expect("5 flat samples");
    assert!(f.summary.starts_with("loss has not improved by more than 0 for 5 samples"), "{}", f.summary);
}

#[test]
fn min_delta_ignores_tiny_improvements() {
    let d = detector("plateau", json!({"metric": "loss", "window": 3, "minDelta": 0.01}));
    let mut job = Job::new();
    // Improves by 0.001 per sample: never significant.
    let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 0.999, 0.998, 0.997]);
    assert!(job.check(d.as_ref(), last).is_some());
    // Cumulative improvement beyond min_delta relative to the reference counts (Lightning semantics).
    let d = detector("plateau", json!({"metric": "loss", "window": 3, "minDelta": 0.0025}));
    let mut job = Job::new();
    let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 0.999, 0.998, 0.997]);
    assert!(job.check(d.as_ref(), last).is_none(), "0.003 total > 0.0025 resets the reference");
}

#[test]
fn min_delta_pct_is_relative_to_the_best() {
    let d = detector("plateau", json!({"metric": "loss", "window": 2, "minDeltaPct": 1.0}));
    let mut job = Job::new();
    // 100 -> 99.5 is 0.5 %: not significant; -> 98 is 2 % of 100: significant.
    let last = job.feed(d.as_ref(), "loss", 60, &[100.0, 99.5, 98.0]);
    assert!(job.check(d.as_ref(), last).is_none());
    let mut job = Job::new();
    let last = job.feed(d.as_ref(), "loss", 60, &[100.0, 99.5, 98.0, 97.5, 97.3]);
    let f = job.check(d.as_ref(), last).expect("0.5 and 0.7 below 1% of 98");
    assert!(f.summary.contains("best 98 at sample 3"), "{}", f.summary);
}

#[test]
fn wall_clock_window_counts_time_between_samples_not_silence() {
    let d = detector("plateau", json!({"metric": "loss", "window": "2h"}));
    let mut job = Job::new();
    let values = vec![1.0; 100];
    // One sample a minute: 99 minutes of flat values < 2h.
    let last = job.feed(d.as_ref(), "loss", 60, &values);
    assert!(job.check(d.as_ref(), last).is_none());
    // Long silence afterwards is a stall, not a plateau.
    assert!(job.check(d.as_ref(), last + 10 * 3600).is_none());
    job.sample(d.as_ref(), 2 * 3600, &[("loss", 1.0)], None, None);
    assert!(job.check(d.as_ref(), 2 * 3600).is_some());
}

#[test]
fn a_cached_value_re_sent_is_not_a_new_sample() {
    // The HF callback repeats the last logged loss in every report until the next logging step.
    let d = detector("plateau", json!({"metric": "loss", "window": 5}));
    let mut job = Job::new();
    let mut last = 0;
    for (i, v) in [2.0, 1.9, 1.8].iter().enumerate() {
        for r in 0..10 {
            last = (i * 10 + r) as i64 * 5;
            job.sample(d.as_ref(), last, &[("loss", *v)], None, None);
        }
    }
    assert!(job.check(d.as_ref(), last).is_none(), "3 observations, each re-sent 10 times, all improving");
    assert_eq!(job.series.metric("loss").unwrap().repeats(), 27);
}

#[test]
fn max_mode_and_auto_direction() {
    let d = detector("plateau", json!({"metric": "eval_accuracy", "window": 3}));
    let mut job = Job::new();
    let last = job.feed(d.as_ref(), "eval_accuracy", 60, &[0.5, 0.6, 0.7, 0.8]);
    assert!(job.check(d.as_ref(), last).is_none(), "accuracy rising is improvement");
    let d = detector("plateau", json!({"metric": "eval_accuracy", "window": 3, "mode": "min"}));
    let mut job = Job::new();
    let last = job.feed(d.as_ref(), "eval_accuracy", 60, &[0.5, 0.6, 0.7, 0.8]);
    assert!(job.check(d.as_ref(), last).is_some(), "in min mode rising is no improvement");
}

#[test]
fn warmup_in_samples_and_progress() {
    let d = detector("plateau", json!({"metric": "loss", "window": 2, "warmup": 10}));
    let mut job = Job::new();
    let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 1.001, 1.002, 1.003, 1.004]);
    assert!(job.check(d.as_ref(), last).is_none(), "5 samples < warmup 10");
    let d = detector("plateau", json!({"metric": "loss", "window": 2, "warmup": "50%"}));
    let mut job = Job::new();
    for i in 0..5 {
        job.sample(d.as_ref(), i * 60, &[("loss", 1.0 + i as f64 * 1e-3)], Some(10.0 * i as f64), None);
    }
    assert!(job.check(d.as_ref(), 240).is_none(), "progress 40% < 50%");
    job.sample(d.as_ref(), 300, &[("loss", 1.01)], Some(50.0), None);
    assert!(job.check(d.as_ref(), 300).is_some());
}

#[test]
fn std_below_threshold_fires_even_with_tiny_improvements() {
    let d = detector("plateau", json!({"metric": "loss", "window": 4, "std": 0.01}));
    let mut job = Job::new();
    let last = job.feed(d.as_ref(), "loss", 60, &[1.0, 0.999, 0.998, 0.997, 0.996]);
    let f = job.check(d.as_ref(), last).expect("std of 0.001 steps is below 0.01");
    assert!(f.summary.contains("std over the last 4 samples"), "{}", f.summary);
}

#[test]
fn std_only_decides_like_rays_trial_plateau_stopper() {
    // Ray: append, count, no stop before grace_period results, then np.std(last num_results) < std.
    fn ray(values: &[f64], std: f64, num_results: usize, grace_period: usize) -> Option<usize> {
        (0..values.len()).find(|&i| {
            let seen = i + 1;
            if seen < grace_period || seen < num_results {
                return false;
            }
            let window = &values[seen - num_results..seen];
            let mean = window.iter().sum::<f64>() / num_results as f64;
            let var = window.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / num_results as f64;
            var.sqrt() < std
        })
    }
    let params = json!({"metric": "loss", "window": 5, "std": 0.01, "warmup": 8, "stdOnly": true});
    let d = detector("plateau", params);
    // Diverging: never a new best, so the patience test alone would fire; the std test does not.
    let diverging: Vec<f64> = (0..30).map(|i| 1.0 + 0.05 * i as f64).collect();
    // Falling, then flat with small noise: the std test fires once the window is flat.
    let mut flattening: Vec<f64> = (0..12).map(|i| 2.0 - 0.1 * i as f64).collect();
    flattening.extend((0..20).map(|i| 0.9 + 0.001 * ((i * 7 % 5) as f64)));
    for values in [diverging, flattening] {
        let mut job = Job::new();
        let fired = (0..values.len()).find(|&i| {
            job.sample(d.as_ref(), i as i64 * 60, &[("loss", values[i])], None, None);
            job.check(d.as_ref(), i as i64 * 60).is_some()
        });
        assert_eq!(fired, ray(&values, 0.01, 5, 8), "{values:?}");
    }
    let e = errors("plateau", json!({"metric": "loss", "stdOnly": true}));
    assert_eq!(e, vec!["with.stdOnly: needs std"]);
}

#[test]
fn nan_does_not_reset_or_poison_the_reference() {
    let d = detector("plateau", json!({"metric": "loss", "window": 3}));
    let mut job = Job::new();
    let last = job.feed(d.as_ref(), "loss", 60, &[1.0, f64::NAN, 1.001, f64::NAN, 1.002, 1.003]);
    let f = job.check(d.as_ref(), last).expect("4 finite flat samples");
    assert!(f.summary.contains("best 1 at sample 1"), "{}", f.summary);
}

#[test]
fn parameter_errors_are_reported_together() {
    let e = errors("plateau", json!({"window": 0, "minDelta": -1, "foo": 1}));
    assert_eq!(
        e,
        vec![
            "with.metric: required",
            "with.minDelta: must be >= 0, got -1",
            "with.window: must be at least 1 sample",
            "with.foo: unknown parameter",
        ]
    );
    let e = errors("plateau", json!({"metric": "loss", "window": 3, "patience": 3}));
    assert!(e[0].contains("either window or patience"));
}
