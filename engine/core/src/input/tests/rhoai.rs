//! The RHOAI annotation (`trainer.opendatahub.io/trainerStatus`) and the metrics endpoint's response.

use super::*;

pub(super) const AP: &str = ANNOTATION_PATH;

#[test]
fn annotation_running() {
    let s = from_annotation(ANN_RUNNING, AP).unwrap();
    assert_eq!(s.source, SampleSource::Annotation);
    assert_eq!(s.updated_at, ts("2026-04-10T12:00:30Z"));
    assert_eq!(s.progress_percent, Some(45.0));
    assert_eq!(s.eta_seconds, Some(795649.0));
    assert_eq!(s.summary.as_deref(), Some("9 days 5 hours"));
    assert_eq!((s.current_step, s.total_steps), (Some(340.0), Some(750.0)));
    assert_eq!((s.current_epoch, s.total_epochs), (Some(1.36), Some(3.0)));
    assert_eq!(
        metrics(&s),
        [
            ("grad_norm", 1.734),
            ("learning_rate", 0.000052),
            ("loss", 0.4523),
            ("eval_accuracy", 0.8123),
            ("eval_loss", 0.5011),
        ]
    );
    assert!(s.metrics.iter().all(|m| matches!(m.name, Cow::Borrowed(_))));
    assert_sane(&s);
}

#[test]
fn annotation_completed() {
    let s = from_annotation(ANN_COMPLETED, AP).unwrap();
    assert_eq!(s.updated_at, ts("2026-04-10T15:12:03Z"));
    assert_eq!(s.summary.as_deref(), Some("complete"));
    assert_eq!((s.progress_percent, s.eta_seconds), (Some(100.0), Some(0.0)));
    assert_eq!((s.current_step, s.total_steps), (Some(750.0), Some(750.0)));
    assert_eq!((s.current_epoch, s.total_epochs), (Some(3.0), Some(3.0)));
    assert_eq!(
        metrics(&s),
        [
            ("grad_norm", 1.201),
            ("learning_rate", 1e-7),
            ("loss", 0.3011),
            ("train_loss", 0.3822),
            ("eval_accuracy", 0.8607),
            ("eval_loss", 0.4102),
        ]
    );
}

#[test]
fn annotation_failed() {
    let s = from_annotation(ANN_FAILED, AP).unwrap();
    assert_eq!(s.updated_at, ts("2026-04-10T13:40:00Z"));
    assert_eq!(s.summary.as_deref(), Some("failed at 62%"));
    assert_eq!((s.progress_percent, s.eta_seconds), (Some(62.0), Some(3120.0)));
    assert_eq!((s.current_step, s.current_epoch), (Some(465.0), Some(1.86)));
    assert_eq!(metrics(&s), [("loss", 0.4311)]);
}

#[test]
fn annotation_nan_loss_is_nan() {
    let s = from_annotation(ANN_NAN, AP).unwrap();
    assert_eq!(s.summary.as_deref(), Some("5 hours 41 minutes"));
    assert_eq!(s.progress_percent, Some(12.0));
    assert_eq!(s.current_step, Some(90.0));
    assert!(s.metric("loss").unwrap().is_nan());
    assert!(s.metric("grad_norm").unwrap().is_nan());
    assert_eq!(s.metric("learning_rate"), Some(0.000059));
    assert_eq!(s.metrics.len(), 3);
    assert_sane(&s);
}

#[test]
fn metrics_endpoint_response() {
    let at = ts("2026-04-10T12:00:00Z");
    let s = from_metrics_response(ENDPOINT, "pod", at).unwrap();
    assert_eq!(s.updated_at, at);
    assert_eq!(s.source, SampleSource::Annotation);
    assert_eq!(s.summary, None);
    assert_eq!((s.progress_percent, s.eta_seconds), (Some(45.0), Some(9840.0)));
    assert_eq!(
        metrics(&s),
        [
            ("loss", 0.4523),
            ("learning_rate", 5.2e-5),
            ("grad_norm", 1.734),
            ("eval_loss", 0.5011),
            ("eval_accuracy", 0.8123),
        ]
    );
    // The annotation needs the controller's timestamp.
    let e = from_annotation(ENDPOINT, "pod").unwrap_err();
    assert_eq!((e.path.as_str(), e.message.as_str()), ("pod.lastUpdatedTime", "missing (required)"));
    // A body timestamp wins over the receive time.
    let s = from_metrics_response(ANN_RUNNING, "pod", at).unwrap();
    assert_eq!(s.updated_at, ts("2026-04-10T12:00:30Z"));
}

#[test]
fn python_nan_tokens_are_accepted() {
    assert!(serde_json::from_str::<Value>(ENDPOINT_PYNAN).is_err(), "fixture is not JSON");
    let at = ts("2026-04-10T09:47:30Z");
    let s = from_metrics_response(ENDPOINT_PYNAN, "pod", at).unwrap();
    assert_eq!(s.updated_at, at);
    assert_eq!(s.progress_percent, Some(12.0));
    assert_eq!(s.eta_seconds, Some(20511.0));
    assert_eq!((s.current_step, s.total_steps), (Some(90.0), Some(750.0)));
    assert_eq!((s.current_epoch, s.total_epochs), (Some(0.36), Some(3.0)));
    assert_eq!(s.metrics.len(), 3);
    assert_eq!(s.metrics[0].name, "loss");
    assert!(s.metrics[0].value.is_nan());
    assert_eq!(metrics(&s)[1..], [("learning_rate", 5.9e-5), ("grad_norm", f64::INFINITY)]);
    // Through from_annotation the tokens parse too; only the timestamp is missing.
    let e = from_annotation(ENDPOINT_PYNAN, AP).unwrap_err();
    assert_eq!(e.path, format!("{AP}.lastUpdatedTime"));
    let with_time = ENDPOINT_PYNAN.replacen('{', "{\"lastUpdatedTime\": \"2026-04-10T09:47:30Z\", ", 1);
    let s2 = from_annotation(&with_time, AP).unwrap();
    assert_eq!(s2.metric("grad_norm"), Some(f64::INFINITY));
    let neg = with_time.replace("Infinity", "-Infinity");
    assert_eq!(from_annotation(&neg, AP).unwrap().metric("grad_norm"), Some(f64::NEG_INFINITY));
}

#[test]
fn bare_tokens_inside_strings_are_left_alone() {
    let json = r#"{"lastUpdatedTime":"2026-04-10T09:47:30Z","estimatedRemainingTimeSummary":"NaN \"Infinity\" -Infinity\\","trainMetrics":{"loss":NaN,"NaN":Infinity}}"#;
    let s = from_annotation(json, AP).unwrap();
    assert_eq!(s.summary.as_deref(), Some(r#"NaN "Infinity" -Infinity\"#));
    assert!(s.metric("loss").unwrap().is_nan());
    assert_eq!(s.metric("NaN"), Some(f64::INFINITY));
    // Not a token: part of a longer word.
    let e = from_annotation(r#"{"trainMetrics":{"loss":NaNx}}"#, AP).unwrap_err();
    assert!(e.message.starts_with("invalid JSON at line 1 column 25"), "{e}");
}

#[test]
fn invalid_json_positions_refer_to_the_callers_text() {
    // Same-length stand-ins for each token: the error must be reported at the same place.
    let bodies = [
        "{\"trainMetrics\": {\"loss\": NaN, \"x\": Infinity, \"y\": -Infinity,}}",
        "{\n  \"trainMetrics\": {\n    \"loss\": NaN,\n    \"g\": -Infinity\n  },\n  \"evalMetrics\": {\"e\": Infinity} oops\n}",
        "{\"trainMetrics\": {\"loss\": NaN \"x\": 1}}",
        "{\"trainMetrics\": {\"loss\": Infinity",
    ];
    for body in bodies {
        let plain =
            body.replace("-Infinity", "-12345678").replace("Infinity", "12345678").replace("NaN", "0.0");
        let want = from_annotation(&plain, AP).unwrap_err();
        let got = from_annotation(body, AP).unwrap_err();
        assert_eq!(got, want, "{body}");
        assert!(got.message.starts_with("invalid JSON at line "), "{got}");
    }
    // Errors on a quoted token itself map into the bare token.
    let e = from_annotation("{\"a\" NaN}", AP).unwrap_err();
    assert_eq!(e.message, from_annotation("{\"a\" 0.0}", AP).unwrap_err().message);
}

#[test]
fn annotation_errors() {
    let t = r#""lastUpdatedTime":"2026-04-10T09:47:30Z""#;
    let cases: Vec<(String, String, &str)> = vec![
        (String::new(), AP.into(), "invalid JSON at line 1 column 0: EOF while parsing a value"),
        ("{\"progressPercentage\":45,}".into(), AP.into(), "invalid JSON at line 1 column 26"),
        ("{} trailing".into(), AP.into(), "invalid JSON at line 1 column 4: trailing characters"),
        ("[1,2]".into(), AP.into(), "expected an object, found an array"),
        ("\"str\"".into(), AP.into(), "expected an object, found a string"),
        (format!("{{{t},\"progressPercentage\":101}}"), format!("{AP}.progressPercentage"), "0..=100"),
        (
            format!("{{{t},\"progressPercentage\":\"45\"}}"),
            format!("{AP}.progressPercentage"),
            "expected a number",
        ),
        (
            format!("{{{t},\"progressPercentage\":NaN}}"),
            format!("{AP}.progressPercentage"),
            "expected a number, found a string",
        ),
        (
            format!("{{{t},\"estimatedRemainingSeconds\":-1}}"),
            format!("{AP}.estimatedRemainingSeconds"),
            ">= 0",
        ),
        (
            format!("{{{t},\"estimatedRemainingTimeSummary\":5}}"),
            format!("{AP}.estimatedRemainingTimeSummary"),
            "expected a string",
        ),
        (format!("{{{t},\"currentStep\":-2}}"), format!("{AP}.currentStep"), ">= 0"),
        (format!("{{{t},\"totalEpochs\":true}}"), format!("{AP}.totalEpochs"), "found a boolean"),
        (
            format!("{{{t},\"trainMetrics\":[1]}}"),
            format!("{AP}.trainMetrics"),
            "expected an object, found an array",
        ),
        (
            format!("{{{t},\"trainMetrics\":{{\"loss\":\"abc\"}}}}"),
            format!("{AP}.trainMetrics.loss"),
            "expected a number or null, found a string",
        ),
        (
            format!("{{{t},\"trainMetrics\":{{\"loss\":\"0.5\"}}}}"),
            format!("{AP}.trainMetrics.loss"),
            "found a string",
        ),
        (
            format!("{{{t},\"evalMetrics\":{{\"eval_loss\":{{}}}}}}"),
            format!("{AP}.evalMetrics.eval_loss"),
            "found an object",
        ),
        (format!("{{{t},\"trainMetrics\":{{\"\":1}}}}"), format!("{AP}.trainMetrics."), "empty metric name"),
        (
            format!("{{{t},\"trainMetrics\":{{\"epoch\":-1}}}}"),
            format!("{AP}.trainMetrics.epoch"),
            "finite number >= 0",
        ),
        (
            "{\"lastUpdatedTime\":\"2026-13-01T00:00:00Z\"}".into(),
            format!("{AP}.lastUpdatedTime"),
            "invalid RFC 3339",
        ),
        ("{\"lastUpdatedTime\":1}".into(), format!("{AP}.lastUpdatedTime"), "expected a string"),
        ("{\"lastUpdatedTime\":null}".into(), format!("{AP}.lastUpdatedTime"), "missing"),
    ];
    for (input, path, msg) in cases {
        let e = from_annotation(&input, AP).unwrap_err();
        assert_eq!(e.path, path, "{input}: {e}");
        assert!(e.message.contains(msg), "{input}: {e}");
    }
}

#[test]
fn annotation_leniency() {
    let json = r#"{"lastUpdatedTime":"2026-04-10T09:47:30Z","estimatedRemainingSeconds":null,
        "estimatedRemainingTimeSummary":null,"trainMetrics":{"current_step":null,
        "lr":0.1,"throughput_samples_sec":12.5,"l\u006fss":2},"evalMetrics":{"loss":1,"eval_f1":0.5,"f1":0.25}}"#;
    let s = from_annotation(json, AP).unwrap();
    assert_eq!((s.eta_seconds, s.summary.clone(), s.current_step), (None, None, None));
    assert_eq!(
        metrics(&s),
        [
            ("learning_rate", 0.1),
            ("throughput_samples_per_second", 12.5),
            ("loss", 2.0),
            ("eval_loss", 1.0),
            ("eval_f1", 0.25)
        ]
    );
    assert_sane(&s);
}
