//! Names: aliases to canonical names, interning, duplicates in a report.

use super::*;

#[test]
fn alias_table() {
    let cases = [
        ("current_step", "current_step"),
        ("currentStep", "current_step"),
        ("step", "current_step"),
        ("total_steps", "total_steps"),
        ("totalSteps", "total_steps"),
        ("max_steps", "total_steps"),
        ("current_epoch", "current_epoch"),
        ("currentEpoch", "current_epoch"),
        ("epoch", "current_epoch"),
        ("total_epochs", "total_epochs"),
        ("totalEpochs", "total_epochs"),
        ("num_train_epochs", "total_epochs"),
        ("lr", "learning_rate"),
        ("learning_rate", "learning_rate"),
        ("gradient_norm", "grad_norm"),
        ("grad_norm", "grad_norm"),
        ("throughput_samples_sec", "throughput_samples_per_second"),
        ("train_samples_per_second", "throughput_samples_per_second"),
        ("throughput_samples_per_second", "throughput_samples_per_second"),
        ("loss", "loss"),
        ("train_loss", "train_loss"),
        ("eval_loss", "eval_loss"),
        ("accuracy", "accuracy"),
        ("eval_accuracy", "eval_accuracy"),
        ("train_runtime", "train_runtime"),
        ("train_steps_per_second", "train_steps_per_second"),
        ("total_flos", "total_flos"),
        ("eval_runtime", "eval_runtime"),
        ("eval_samples_per_second", "eval_samples_per_second"),
        ("eval_steps_per_second", "eval_steps_per_second"),
        ("trainMetrics.loss", "loss"),
        ("trainMetrics.lr", "learning_rate"),
        ("trainMetrics.throughput_samples_sec", "throughput_samples_per_second"),
        ("trainMetrics.train_loss", "train_loss"),
        ("evalMetrics.eval_loss", "eval_loss"),
        ("evalMetrics.loss", "eval_loss"),
        ("evalMetrics.accuracy", "eval_accuracy"),
    ];
    for (raw, want) in cases {
        let got = canonical_metric_name(raw);
        assert_eq!(got, want, "{raw}");
        assert!(matches!(got, Cow::Borrowed(_)), "{raw} allocated");
    }
    let owned = [
        ("perplexity", "perplexity"),
        ("Loss", "Loss"),
        ("eval_f1", "eval_f1"),
        ("trainMetrics.perplexity", "perplexity"),
        ("evalMetrics.f1", "eval_f1"),
        ("evalMetrics.eval_f1", "eval_f1"),
        // A bare prefix is not a prefix.
        ("trainMetrics.", "trainMetrics."),
        ("evalMetrics.", "evalMetrics."),
        ("", ""),
    ];
    for (raw, want) in owned {
        let got = canonical_metric_name(raw);
        assert_eq!(got, want, "{raw}");
        assert!(matches!(got, Cow::Owned(_)), "{raw}");
    }
}

#[test]
fn aliases_apply_inside_samples() {
    let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": [
        {"name": "lr", "value": "0.1"},
        {"name": "gradient_norm", "value": "2"},
        {"name": "throughput_samples_sec", "value": "9"},
        {"name": "step", "value": "10"},
        {"name": "max_steps", "value": "100"},
        {"name": "epoch", "value": "0.5"},
        {"name": "num_train_epochs", "value": "3"},
        {"name": "my_custom", "value": "-1"},
    ]});
    let s = from_trainer_status(&v, TS).unwrap();
    assert_eq!(
        metrics(&s),
        [
            ("learning_rate", 0.1),
            ("grad_norm", 2.0),
            ("throughput_samples_per_second", 9.0),
            ("my_custom", -1.0)
        ]
    );
    assert_eq!((s.current_step, s.total_steps), (Some(10.0), Some(100.0)));
    assert_eq!((s.current_epoch, s.total_epochs), (Some(0.5), Some(3.0)));
}

#[test]
fn duplicates_last_value_wins_first_position_kept() {
    let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": [
        {"name": "loss", "value": "1"},
        {"name": "grad_norm", "value": "2"},
        {"name": "lr", "value": "3"},
        {"name": "learning_rate", "value": "4"},
        {"name": "loss", "value": "5"},
        {"name": "current_step", "value": "1"},
        {"name": "step", "value": "2"},
    ]});
    let s = from_trainer_status(&v, TS).unwrap();
    assert_eq!(metrics(&s), [("loss", 5.0), ("grad_norm", 2.0), ("learning_rate", 4.0)]);
    assert_eq!(s.current_step, Some(2.0));
}

#[test]
fn duplicates_in_long_lists() {
    // Past LINEAR_DEDUP_MAX distinct names the collector switches to the sort-based merge.
    let mut items: Vec<Value> =
        (0..200).map(|i| json!({"name": format!("m{}", i % 70), "value": i.to_string()})).collect();
    items.insert(5, json!({"name": "loss", "value": "1"}));
    items.push(json!({"name": "loss", "value": "2"}));
    let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": items});
    let s = from_trainer_status(&v, TS).unwrap();
    assert_sane(&s);
    assert_eq!(s.metrics.len(), 71);
    assert_eq!(s.metrics[5].name, "loss");
    assert_eq!(s.metric("loss"), Some(2.0));
    // m0..m69 in first-seen order, each with its last value (i = k + 140 for k < 60, else k + 70).
    let m: Vec<_> = s.metrics.iter().filter(|m| m.name != "loss").collect();
    for (k, metric) in m.iter().enumerate() {
        assert_eq!(metric.name, format!("m{k}"));
        let last = if k < 60 { k + 140 } else { k + 70 };
        assert_eq!(metric.value, last as f64, "m{k}");
    }
}
