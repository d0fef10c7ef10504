//! The readers' tests, on the recorded fixtures of both formats.

use std::borrow::Cow;

use serde_json::Value;

use crate::input::sample::{JobKey, JobPhase, JobSnapshot, ProgressSample, SampleSource};
use crate::testing::rng::Rng;
use crate::time::Timestamp;

use super::names::*;
use super::rhoai::*;
use super::trainer_status::*;
use super::trainjob::*;
use super::*;
use crate::testing::ts;
use serde_json::json;

macro_rules! fixture {
    ($file:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/fixtures/kubeflow/payloads/",
            $file
        ))
    };
}

const KEP: &str = fixture!("upstream-status-request.kep-example.json");
const HF_BEGIN: &str = fixture!("upstream-status-request.hf-callback-train-begin.json");
const HF_STEP: &str = fixture!("upstream-status-request.hf-callback-step.json");
const HF_END: &str = fixture!("upstream-status-request.hf-callback-train-end.json");
const INVALID_PROGRESS: &str = fixture!("upstream-status-request.invalid-progress.json");
const EMPTY: &str = fixture!("upstream-status-request.empty.json");
const ANN_RUNNING: &str = fixture!("rhoai-trainerStatus-annotation.running.json");
const ANN_COMPLETED: &str = fixture!("rhoai-trainerStatus-annotation.completed.json");
const ANN_FAILED: &str = fixture!("rhoai-trainerStatus-annotation.failed.json");
const ANN_NAN: &str = fixture!("rhoai-trainerStatus-annotation.nan-loss.json");
const ENDPOINT: &str = fixture!("rhoai-metrics-endpoint.response.json");
const ENDPOINT_PYNAN: &str = fixture!("rhoai-metrics-endpoint.response.nan-loss.pyjson.txt");
const UPSTREAM_JOB_YAML: &str = fixture!("upstream-trainjob-with-trainerStatus.yaml");
const RHOAI_JOB_YAML: &str = fixture!("rhoai-trainjob-annotated.yaml");

const TS: &str = "status.trainerStatus";

fn upstream(request_body: &str) -> ProgressSample {
    let body: Value = serde_json::from_str(request_body).unwrap();
    from_trainer_status(&body["trainerStatus"], TS).unwrap()
}

fn upstream_err(trainer_status: Value) -> NormalizeError {
    from_trainer_status(&trainer_status, TS).unwrap_err()
}

fn metrics(s: &ProgressSample) -> Vec<(&str, f64)> {
    s.metrics.iter().map(|m| (m.name.as_ref(), m.value)).collect()
}

/// Sample invariants that every successful parse must satisfy.
fn assert_sane(s: &ProgressSample) {
    if let Some(p) = s.progress_percent {
        assert!((0.0..=100.0).contains(&p), "{s:?}");
    }
    if let Some(e) = s.eta_seconds {
        assert!(e >= 0.0, "{s:?}");
    }
    for c in [s.current_step, s.total_steps, s.current_epoch, s.total_epochs].into_iter().flatten() {
        assert!(c.is_finite() && c >= 0.0, "{s:?}");
    }
    for (i, m) in s.metrics.iter().enumerate() {
        assert!(!m.name.is_empty(), "{s:?}");
        assert!(!Known::of(&m.name).is_some_and(Known::is_progress), "{s:?}");
        assert!(s.metrics[..i].iter().all(|o| o.name != m.name), "duplicate in {s:?}");
    }
}

// ----- upstream fixtures -------------------------------------------------------------------------

#[test]
fn interned_names_are_the_samples_own_and_aliases_stay_as_written() {
    let sample = upstream(
        r#"{"trainerStatus":{"metrics":[{"name":"loss","value":"1"}],"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#,
    );
    let (Cow::Borrowed(ours), Cow::Borrowed(theirs)) = (interned("loss"), &sample.metrics[0].name) else {
        panic!("canonical names are shared statics")
    };
    assert!(std::ptr::eq(ours, *theirs));
    assert!(crate::input::sample::same_name(ours, "loss") && !crate::input::sample::same_name(ours, "lost"));
    assert!(matches!(interned("lr"), Cow::Owned(n) if n == "lr"), "aliases are not resolved");
    assert!(matches!(interned("my_metric"), Cow::Owned(n) if n == "my_metric"));
}

#[test]
fn every_canonical_name_is_its_own_alias_so_no_other_name_spells_it() {
    for (id, known) in Known::ALL.into_iter().enumerate() {
        assert_eq!(known as usize, id);
        assert_eq!(Known::of(known.text()), Some(known), "{}", known.text());
        assert_eq!(canonical_name(known.text()), Name::Known(known));
    }
    // Built names are looked up too: an `evalMetrics` key that spells a known name after `eval_` is that name.
    for known in Known::ALL {
        if let Some(key) = known.text().strip_prefix("eval_") {
            assert_eq!(eval_name(key), Name::Known(known), "{key}");
        }
    }
    assert_eq!(eval_name("f1"), Name::Other("eval_f1".into()));
}

#[test]
fn kep_example() {
    let s = upstream(KEP);
    assert_eq!(s.source, SampleSource::TrainerStatus);
    assert_eq!(s.updated_at, ts("2025-01-23T10:30:45Z"));
    assert_eq!(s.progress_percent, Some(45.0));
    assert_eq!(s.eta_seconds, Some(795649.0));
    assert_eq!(metrics(&s), [("loss", 0.2347), ("eval_loss", 0.2451), ("accuracy", 0.9876)]);
    assert_eq!((s.current_epoch, s.total_epochs), (Some(2.0), Some(5.0)));
    assert_eq!((s.current_step, s.total_steps), (None, None));
    assert_eq!(s.summary, None);
    assert!(s.metrics.iter().all(|m| matches!(m.name, Cow::Borrowed(_))));
    assert_sane(&s);
}

#[test]
fn hf_callback_train_begin() {
    let s = upstream(HF_BEGIN);
    assert_eq!(s.updated_at, ts("2026-03-20T13:40:02.004411Z"));
    assert_eq!(s.progress_percent, Some(0.0));
    assert_eq!(s.eta_seconds, None);
    assert_eq!(s.total_steps, Some(3000.0));
    assert!(s.metrics.is_empty());
}

#[test]
fn hf_callback_step() {
    let s = upstream(HF_STEP);
    // Python isoformat: microseconds and "+00:00".
    assert_eq!(s.updated_at, ts("2026-03-20T14:02:11.532918Z"));
    assert_eq!(s.progress_percent, Some(37.0));
    assert_eq!(s.eta_seconds, Some(1284.0));
    assert_eq!(s.current_step, Some(1110.0));
    assert_eq!(s.total_steps, Some(3000.0));
    assert_eq!(s.current_epoch, Some(1.11));
    assert_eq!(s.total_epochs, None);
    assert_eq!(metrics(&s), [("loss", 1.8412), ("grad_norm", 2.7731), ("learning_rate", 3.1e-5)]);
    assert_sane(&s);
}

#[test]
fn hf_callback_train_end() {
    let s = upstream(HF_END);
    assert_eq!(s.progress_percent, Some(100.0));
    assert_eq!(s.eta_seconds, Some(0.0));
    assert_eq!(s.current_epoch, Some(3.0));
    assert_eq!(
        metrics(&s),
        [
            ("loss", 1.2207),
            ("grad_norm", 1.9015),
            ("learning_rate", 1e-7),
            ("eval_loss", 1.3391),
            ("eval_accuracy", 0.6512),
            ("train_runtime", 3338.1),
            ("throughput_samples_per_second", 28.76),
            ("train_loss", 1.5123),
        ]
    );
    assert!(s.metrics.iter().all(|m| matches!(m.name, Cow::Borrowed(_))));
    assert_sane(&s);
}

#[test]
fn invalid_progress_fixture_is_rejected_with_path() {
    let body: Value = serde_json::from_str(INVALID_PROGRESS).unwrap();
    let e = from_trainer_status(&body["trainerStatus"], TS).unwrap_err();
    assert_eq!(e.path, "status.trainerStatus.progressPercentage");
    assert!(e.message.contains("0..=100") && e.message.contains("150"), "{e}");
    assert_eq!(e.to_string(), format!("status.trainerStatus.progressPercentage: {}", e.message));
}

#[test]
fn empty_request() {
    let body: Value = serde_json::from_str(EMPTY).unwrap();
    // The status server leaves the status alone: there is no trainerStatus to normalize.
    assert!(body.get("trainerStatus").is_none());
    // Fed as a trainerStatus anyway, the missing required timestamp is reported.
    let e = from_trainer_status(&body, "trainerStatus").unwrap_err();
    assert_eq!(e.path, "trainerStatus.lastUpdatedTime");
    assert_eq!(e.message, "missing (required)");
    // An empty path prefix gives bare field paths.
    assert_eq!(from_trainer_status(&body, "").unwrap_err().path, "lastUpdatedTime");
}

#[test]
fn non_finite_value_strings_are_kept() {
    let cases = [
        ("nan", f64::NAN),
        ("NaN", f64::NAN),
        ("NAN", f64::NAN),
        ("inf", f64::INFINITY),
        ("+inf", f64::INFINITY),
        ("-inf", f64::NEG_INFINITY),
        ("INF", f64::INFINITY),
        ("Infinity", f64::INFINITY),
        ("-Infinity", f64::NEG_INFINITY),
        ("infinity", f64::INFINITY),
        ("+Infinity", f64::INFINITY),
        (" 0.5 ", 0.5),
        ("1e-07", 1e-7),
        ("42", 42.0),
    ];
    for (text, want) in cases {
        let v =
            json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": [{"name": "loss", "value": text}]});
        let got = from_trainer_status(&v, TS).unwrap().metric("loss").unwrap();
        if want.is_nan() {
            assert!(got.is_nan(), "{text}");
        } else {
            assert_eq!(got, want, "{text}");
        }
    }
}

#[test]
fn upstream_error_paths() {
    let t = "2026-01-01T00:00:00Z";
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!([]), "status.trainerStatus", "expected an object, found an array"),
        (json!(null), "status.trainerStatus", "expected an object, found null"),
        (json!({}), "status.trainerStatus.lastUpdatedTime", "missing"),
        (json!({"lastUpdatedTime": 5}), "status.trainerStatus.lastUpdatedTime", "expected a string"),
        (json!({"lastUpdatedTime": "yesterday"}), "status.trainerStatus.lastUpdatedTime", "invalid RFC 3339"),
        (
            json!({"lastUpdatedTime": "2026-01-01T00:00:00"}),
            "status.trainerStatus.lastUpdatedTime",
            "invalid RFC 3339",
        ),
        (
            json!({"lastUpdatedTime": t, "progressPercentage": "45"}),
            "status.trainerStatus.progressPercentage",
            "expected a number, found a string",
        ),
        (
            json!({"lastUpdatedTime": t, "progressPercentage": -1}),
            "status.trainerStatus.progressPercentage",
            "0..=100",
        ),
        (
            json!({"lastUpdatedTime": t, "progressPercentage": 100.5}),
            "status.trainerStatus.progressPercentage",
            "0..=100",
        ),
        (
            json!({"lastUpdatedTime": t, "estimatedRemainingSeconds": -5}),
            "status.trainerStatus.estimatedRemainingSeconds",
            ">= 0",
        ),
        (
            json!({"lastUpdatedTime": t, "estimatedRemainingSeconds": [1]}),
            "status.trainerStatus.estimatedRemainingSeconds",
            "found an array",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": {"loss": "1"}}),
            "status.trainerStatus.metrics",
            "expected an array",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "a", "value": "1"}, 7]}),
            "status.trainerStatus.metrics[1]",
            "expected an object",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"value": "1"}]}),
            "status.trainerStatus.metrics[0].name",
            "missing",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "", "value": "1"}]}),
            "status.trainerStatus.metrics[0].name",
            "empty metric name",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": 3, "value": "1"}]}),
            "status.trainerStatus.metrics[0].name",
            "expected a string, found a number",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "a", "value": "1"}, {"name": "b", "value": "1"}, {"name": "loss", "value": 0.5}]}),
            "status.trainerStatus.metrics[2].value",
            "expected a string, found a number",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "loss", "value": "abc"}]}),
            "status.trainerStatus.metrics[0].value",
            "not a number: \"abc\"",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "loss", "value": ""}]}),
            "status.trainerStatus.metrics[0].value",
            "not a number",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "loss", "value": "0x10"}]}),
            "status.trainerStatus.metrics[0].value",
            "not a number",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "loss"}]}),
            "status.trainerStatus.metrics[0].value",
            "missing",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "current_step", "value": "nan"}]}),
            "status.trainerStatus.metrics[0].value",
            "finite number >= 0",
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "totalSteps", "value": "-3"}]}),
            "status.trainerStatus.metrics[0].value",
            "finite number >= 0",
        ),
    ];
    for (input, path, msg) in cases {
        let e = upstream_err(input.clone());
        assert_eq!(e.path, path, "{input}: {e}");
        assert!(e.message.contains(msg), "{input}: {e}");
    }
}

#[test]
fn long_garbage_values_are_cut_in_messages() {
    let long = "x".repeat(10_000);
    let e = upstream_err(
        json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "metrics": [{"name": "loss", "value": long}]}),
    );
    assert!(e.message.len() < 120, "{e}");
    let multibyte = "é".repeat(100);
    let e = upstream_err(json!({"lastUpdatedTime": multibyte}));
    assert!(e.message.contains('…'), "{e}");
}

#[test]
fn null_optional_fields_are_absent() {
    let v = json!({"lastUpdatedTime": "2026-01-01T00:00:00Z", "progressPercentage": null,
                   "estimatedRemainingSeconds": null, "metrics": null});
    let s = from_trainer_status(&v, TS).unwrap();
    assert_eq!(s, ProgressSample::empty(ts("2026-01-01T00:00:00Z"), SampleSource::TrainerStatus));
}

// ----- unknown fields (issue 14) ------------------------------------------------------------------

const TS_EXPECTED: &str =
    "unknown field; expected one of progressPercentage, estimatedRemainingSeconds, metrics, lastUpdatedTime";
const RHOAI_EXPECTED: &str = "unknown field; expected one of progressPercentage, estimatedRemainingSeconds, \
    estimatedRemainingTimeSummary, currentStep, totalSteps, currentEpoch, totalEpochs, trainMetrics, evalMetrics, \
    lastUpdatedTime";

#[test]
fn unknown_trainer_status_fields_are_errors() {
    let t = "2026-01-01T00:00:00Z";
    let cases = [
        (
            json!({"lastUpdatedTime": t, "trainMetricz": [{"name": "loss", "value": "1"}]}),
            "trainMetricz",
            TS_EXPECTED,
        ),
        (json!({"lastUpdatedTime": t, "metric": [{"name": "loss", "value": "1"}]}), "metric", TS_EXPECTED),
        (json!({"lastUpdatedTime": t, "unknownField": [1, 2]}), "unknownField", TS_EXPECTED),
        // A null value does not make an unknown key known.
        (json!({"lastUpdatedTime": t, "progress": null}), "progress", TS_EXPECTED),
        // The KEP's draft field, not in Trainer 2.2's TrainerStatus.
        (
            json!({"lastUpdatedTime": t, "estimatedRemainingTimeSummary": "1h"}),
            "estimatedRemainingTimeSummary",
            TS_EXPECTED,
        ),
        (
            json!({"lastUpdatedTime": t, "metrics": [{"name": "loss", "value": "1"}, {"name": "x", "value": "1", "Value": "2"}]}),
            "metrics[1].Value",
            "unknown field; expected one of name, value",
        ),
    ];
    for (v, field, message) in cases {
        let e = upstream_err(v.clone());
        assert_eq!(e.to_string(), format!("{TS}.{field}: {message}"), "{v}");
        // A TrainJob is read without them; they are reported with the same words.
        let job = json!({"metadata": {"name": "j"}, "status": {"trainerStatus": v}});
        let snap = from_trainjob(&job).unwrap();
        assert!(snap.sample.is_some());
        let found: Vec<String> = snap.unknown_fields.iter().map(ToString::to_string).collect();
        assert_eq!(found, [format!("{TS}.{field}: {message}")], "{v}");
    }
}

#[test]
fn unknown_annotation_fields_are_errors() {
    let t = r#""lastUpdatedTime":"2026-04-10T09:47:30Z""#;
    let cases = [
        (format!(r#"{{{t},"trainMetricz":{{"loss":0.5}}}}"#), "trainMetricz"),
        (format!(r#"{{{t},"metric":[{{"name":"loss","value":"0.5"}}]}}"#), "metric"),
        (format!(r#"{{{t},"metrics":{{"loss":0.5}}}}"#), "metrics"),
        (format!(r#"{{{t},"loss":0.5}}"#), "loss"),
        (format!(r#"{{{t},"newField":{{"x":[1,{{"y":2}}]}}}}"#), "newField"),
        (format!(r#"{{{t},"evalMetrics2":5}}"#), "evalMetrics2"),
        (format!(r#"{{{t},"progresspercentage":5}}"#), "progresspercentage"),
    ];
    for (json, field) in cases {
        let e = from_annotation(&json, AP).unwrap_err();
        assert_eq!(e.to_string(), format!("{AP}.{field}: {RHOAI_EXPECTED}"), "{json}");
        let e = from_metrics_response(&json, "pod", ts("2026-04-10T09:47:30Z")).unwrap_err();
        assert_eq!(e.to_string(), format!("pod.{field}: {RHOAI_EXPECTED}"), "{json}");
        let job = json!({"metadata": {"name": "j", "annotations": {TRAINER_STATUS_ANNOTATION: json}}});
        let snap = from_trainjob(&job).unwrap();
        assert!(snap.sample.is_some());
        let found: Vec<String> = snap.unknown_fields.iter().map(ToString::to_string).collect();
        assert_eq!(found, [format!("{ANNOTATION_PATH}.{field}: {RHOAI_EXPECTED}")], "{json}");
    }
    // Every unknown key of one report is reported, in its order; the known ones are still read.
    let json =
        format!(r#"{{{t},"metric":1,"currentStep":5,"trainMetricz":{{}},"trainMetrics":{{"loss":0.5}}}}"#);
    let job = json!({"metadata": {"name": "j", "annotations": {TRAINER_STATUS_ANNOTATION: json}}});
    let snap = from_trainjob(&job).unwrap();
    let paths: Vec<&str> = snap.unknown_fields.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, [format!("{ANNOTATION_PATH}.metric"), format!("{ANNOTATION_PATH}.trainMetricz")]);
    let sample = snap.sample.unwrap();
    assert_eq!((sample.current_step, sample.metric("loss")), (Some(5.0), Some(0.5)));
}

/// The real formats' keys are all known: Trainer 2.2's `TrainerStatus` and RHOAI 3.4's `AnnotationStatus`
/// (and the pod's `/metrics` body), as in the recorded fixtures.
#[test]
fn the_real_formats_have_no_unknown_fields() {
    for body in [KEP, HF_BEGIN, HF_STEP, HF_END] {
        upstream(body);
    }
    for ann in [ANN_RUNNING, ANN_COMPLETED, ANN_FAILED, ANN_NAN] {
        from_annotation(ann, AP).unwrap();
    }
    from_metrics_response(ENDPOINT, "pod", ts("2026-04-10T12:00:30Z")).unwrap();
    from_metrics_response(ENDPOINT_PYNAN, "pod", ts("2026-04-10T12:00:30Z")).unwrap();
    assert_eq!(from_trainjob(&upstream_job()).unwrap().unknown_fields, []);
    assert_eq!(from_trainjob(&rhoai_job()).unwrap().unknown_fields, []);
    // Every key of the CRD's trainerStatus schema is known.
    let crd: serde_json::Value = serde_saphyr::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/kubeflow/upstream-trainer/crds/trainer.kubeflow.org_trainjobs.yaml"
    )))
    .unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        ["trainerStatus"];
    let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 4);
    let mut status = serde_json::Map::new();
    for k in keys {
        status.insert(k.clone(), Value::Null);
    }
    status.insert("lastUpdatedTime".into(), json!("2026-01-01T00:00:00Z"));
    from_trainer_status(&Value::Object(status), TS).unwrap();
    let item: Vec<&String> =
        schema["properties"]["metrics"]["items"]["properties"].as_object().unwrap().keys().collect();
    assert_eq!(item, ["name", "value"]);
}

// ----- names --------------------------------------------------------------------------------------

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

// ----- RHOAI ----------------------------------------------------------------------------------------

const AP: &str = ANNOTATION_PATH;

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

// ----- TrainJob ---------------------------------------------------------------------------------------

/// `upstream-trainjob-with-trainerStatus.yaml` as JSON.
fn upstream_job() -> Value {
    assert!(
        UPSTREAM_JOB_YAML.contains("name: multi-node-example") && UPSTREAM_JOB_YAML.contains("numNodes: 3")
    );
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "multi-node-example",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}
        },
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
            "suspend": false,
            "managedBy": "trainer.kubeflow.org/trainjob-controller",
            "trainer": {
                "numNodes": 3,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}},
                "command": ["torchrun", "train.py"]
            }
        },
        "status": {
            "conditions": [{
                "type": "Suspended", "status": "False", "reason": "Resumed",
                "message": "TrainJob is resumed", "lastTransitionTime": "2025-01-23T09:00:00Z"
            }],
            "jobsStatus": [{"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}],
            "trainerStatus": {
                "progressPercentage": 45,
                "estimatedRemainingSeconds": 795649,
                "metrics": [
                    {"name": "loss", "value": "0.2347"},
                    {"name": "eval_loss", "value": "0.2451"},
                    {"name": "accuracy", "value": "0.9876"},
                    {"name": "currentEpoch", "value": "2"},
                    {"name": "totalEpochs", "value": "5"}
                ],
                "lastUpdatedTime": "2025-01-23T10:30:45Z"
            }
        }
    })
}

/// The annotation value of `rhoai-trainjob-annotated.yaml`, taken from the fixture itself.
fn rhoai_yaml_annotation() -> String {
    let line = RHOAI_JOB_YAML
        .lines()
        .find_map(|l| l.trim().strip_prefix("trainer.opendatahub.io/trainerStatus: '"))
        .unwrap();
    line.strip_suffix('\'').unwrap().replace("''", "'")
}

/// `rhoai-trainjob-annotated.yaml` as JSON.
fn rhoai_job() -> Value {
    assert!(RHOAI_JOB_YAML.contains("name: sft-llama") && RHOAI_JOB_YAML.contains("numNodes: 2"));
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "sft-llama",
            "namespace": "team-a",
            "annotations": {
                "trainer.opendatahub.io/progression-tracking": "true",
                "trainer.opendatahub.io/metrics-port": "28080",
                "trainer.opendatahub.io/metrics-poll-interval": "30",
                "trainer.opendatahub.io/trainerStatus": rhoai_yaml_annotation()
            }
        },
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}}
        },
        "status": {
            "conditions": [{
                "type": "Suspended", "status": "False", "reason": "Resumed",
                "message": "TrainJob is resumed", "lastTransitionTime": "2026-04-10T09:00:00Z"
            }]
        }
    })
}

#[test]
fn upstream_trainjob_fixture() {
    let snap = from_trainjob(&upstream_job()).unwrap();
    assert_eq!(snap.key, JobKey::new("team-a", "multi-node-example"));
    assert_eq!(snap.labels.len(), 1);
    assert!(snap.annotations.is_empty());
    assert_eq!(snap.phase, JobPhase::Running);
    assert_eq!(snap.gpus, Some(3.0));
    assert_eq!(snap.kueue_queue.as_deref(), Some("user-queue"));
    assert_eq!(snap.created_at, None);
    assert_eq!(snap.running_since, Some(ts("2025-01-23T09:00:00Z")));
    // The status copy of the KEP sample normalizes exactly like the KEP request.
    assert_eq!(snap.sample, Some(upstream(KEP)));
}

#[test]
fn rhoai_trainjob_fixture() {
    let snap = from_trainjob(&rhoai_job()).unwrap();
    assert_eq!(snap.key, JobKey::new("team-a", "sft-llama"));
    assert!(snap.labels.is_empty());
    assert_eq!(
        snap.annotations.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "trainer.opendatahub.io/metrics-poll-interval",
            "trainer.opendatahub.io/metrics-port",
            "trainer.opendatahub.io/progression-tracking",
        ]
    );
    assert_eq!(snap.phase, JobPhase::Running);
    assert_eq!(snap.gpus, Some(2.0));
    assert_eq!(snap.kueue_queue, None);
    assert_eq!(snap.running_since, Some(ts("2026-04-10T09:00:00Z")));
    let sample = snap.sample.unwrap();
    assert_eq!(sample.source, SampleSource::Annotation);
    assert_eq!(sample, from_annotation(ANN_RUNNING, AP).unwrap());
}

#[test]
fn trainer_status_is_preferred_over_the_annotation() {
    let mut job = upstream_job();
    job["metadata"]["annotations"] = json!({TRAINER_STATUS_ANNOTATION: rhoai_yaml_annotation()});
    let snap = from_trainjob(&job).unwrap();
    assert_eq!(snap.sample.unwrap().source, SampleSource::TrainerStatus);
    assert!(snap.annotations.is_empty());
    // A null trainerStatus falls back to the annotation; neither gives no sample.
    job["status"]["trainerStatus"] = Value::Null;
    assert_eq!(from_trainjob(&job).unwrap().sample.unwrap().source, SampleSource::Annotation);
    job["metadata"]["annotations"] = json!({});
    assert_eq!(from_trainjob(&job).unwrap().sample, None);
}

#[test]
fn phases() {
    let cond =
        |ty: &str, st: &str| json!({"type": ty, "status": st, "lastTransitionTime": "2026-01-02T00:00:00Z"});
    let cases = [
        (false, vec![], JobPhase::Running),
        (true, vec![], JobPhase::Suspended),
        (false, vec![cond("Suspended", "True")], JobPhase::Suspended),
        (false, vec![cond("Suspended", "False")], JobPhase::Running),
        (false, vec![cond("Suspended", "False"), cond("Complete", "True")], JobPhase::Complete),
        (true, vec![cond("Complete", "True")], JobPhase::Complete),
        (false, vec![cond("Failed", "True")], JobPhase::Failed),
        (false, vec![cond("Complete", "True"), cond("Failed", "True")], JobPhase::Failed),
        (false, vec![cond("Complete", "False"), cond("Failed", "Unknown")], JobPhase::Running),
    ];
    for (suspend, conditions, want) in cases {
        let job = json!({"metadata": {"name": "j"}, "spec": {"suspend": suspend}, "status": {"conditions": conditions}});
        assert_eq!(from_trainjob(&job).unwrap().phase, want, "{job}");
    }
}

#[test]
fn running_since() {
    let created = "2026-01-01T00:00:00Z";
    let job = |conds: Value| json!({"metadata": {"name": "j", "creationTimestamp": created}, "status": {"conditions": conds}});
    let snap = from_trainjob(&job(json!([]))).unwrap();
    assert_eq!((snap.created_at, snap.running_since), (Some(ts(created)), Some(ts(created))));
    let resumed =
        json!([{"type": "Suspended", "status": "False", "lastTransitionTime": "2026-01-03T00:00:00Z"}]);
    assert_eq!(from_trainjob(&job(resumed)).unwrap().running_since, Some(ts("2026-01-03T00:00:00Z")));
    let suspended =
        json!([{"type": "Suspended", "status": "True", "lastTransitionTime": "2026-01-03T00:00:00Z"}]);
    assert_eq!(from_trainjob(&job(suspended)).unwrap().running_since, Some(ts(created)));
    let no_time = json!([{"type": "Suspended", "status": "False"}]);
    assert_eq!(from_trainjob(&job(no_time)).unwrap().running_since, Some(ts(created)));
    let no_created = json!({"metadata": {"name": "j"}});
    assert_eq!(from_trainjob(&no_created).unwrap().running_since, None);
}

#[test]
fn gpus() {
    let job = |trainer: Value| json!({"metadata": {"name": "j"}, "spec": {"trainer": trainer}});
    let gpus = |trainer: Value| from_trainjob(&job(trainer)).unwrap().gpus;
    assert_eq!(
        gpus(json!({"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})),
        Some(8.0)
    );
    assert_eq!(gpus(json!({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}})), Some(8.0));
    assert_eq!(
        gpus(
            json!({"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1", "amd.com/gpu": "2", "cpu": "4"}}})
        ),
        Some(6.0)
    );
    assert_eq!(
        gpus(json!({"numNodes": 2, "resourcesPerNode": {"requests": {"amd.com/gpu": "4"}}})),
        Some(8.0)
    );
    assert_eq!(
        gpus(
            json!({"numNodes": 2, "resourcesPerNode": {"limits": {"cpu": "4"}, "requests": {"nvidia.com/gpu": "1"}}})
        ),
        Some(2.0)
    );
    assert_eq!(
        gpus(json!({"numNodes": 2, "resourcesPerNode": {"limits": {"cpu": "4", "memory": "8Gi"}}})),
        None
    );
    assert_eq!(gpus(json!({"numNodes": 2})), None);
    assert_eq!(
        gpus(json!({"numNodes": 0, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}})),
        Some(0.0)
    );
    assert_eq!(from_trainjob(&json!({"metadata": {"name": "j"}})).unwrap().gpus, None);
}

#[test]
fn trainjob_defaults_and_kueue() {
    let job = json!({"metadata": {"name": "j", "labels": {"kueue.x-k8s.io/queue-name": "q", "team": "a"}}});
    let snap = from_trainjob(&job).unwrap();
    assert_eq!(snap.key, JobKey::new("default", "j"));
    assert_eq!(snap.kueue_queue.as_deref(), Some("q"));
    assert_eq!(snap.labels.get("team").map(String::as_str), Some("a"));
    let mut expected = JobSnapshot::new(JobKey::new("default", "j"));
    expected.labels = snap.labels.clone();
    expected.kueue_queue = Some("q".into());
    assert_eq!(snap, expected);
    let empty_ns = json!({"metadata": {"name": "j", "namespace": ""}});
    assert_eq!(from_trainjob(&empty_ns).unwrap().key.namespace, "default");
}

#[test]
fn trainjob_error_paths() {
    let ann = |v: Value| json!({"metadata": {"name": "j", "annotations": {TRAINER_STATUS_ANNOTATION: v}}});
    let cases: Vec<(Value, String, &str)> = vec![
        (json!([]), "$".into(), "expected a TrainJob object"),
        (json!({"kind": "JobSet", "metadata": {"name": "j"}}), "kind".into(), "expected \"TrainJob\""),
        (json!({"kind": 1, "metadata": {"name": "j"}}), "kind".into(), "expected a string"),
        (
            json!({"apiVersion": "trainer.kubeflow.org/v2", "metadata": {"name": "j"}}),
            "apiVersion".into(),
            "trainer.kubeflow.org/v1alpha1",
        ),
        (json!({}), "metadata.name".into(), "missing"),
        (json!({"metadata": {}}), "metadata.name".into(), "missing"),
        (json!({"metadata": {"name": ""}}), "metadata.name".into(), "empty"),
        (json!({"metadata": {"name": 7}}), "metadata.name".into(), "expected a string"),
        (json!({"metadata": []}), "metadata".into(), "expected an object"),
        (
            json!({"metadata": {"name": "j", "namespace": 1}}),
            "metadata.namespace".into(),
            "expected a string",
        ),
        (
            json!({"metadata": {"name": "j", "labels": {"a": 1}}}),
            "metadata.labels[\"a\"]".into(),
            "expected a string",
        ),
        (json!({"metadata": {"name": "j", "labels": "a=b"}}), "metadata.labels".into(), "expected an object"),
        (
            json!({"metadata": {"name": "j", "creationTimestamp": "today"}}),
            "metadata.creationTimestamp".into(),
            "invalid RFC 3339",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"suspend": "yes"}}),
            "spec.suspend".into(),
            "expected a boolean",
        ),
        (json!({"metadata": {"name": "j"}, "spec": 3}), "spec".into(), "expected an object"),
        (
            json!({"metadata": {"name": "j"}, "status": {"conditions": {}}}),
            "status.conditions".into(),
            "expected an array",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"conditions": [null]}}),
            "status.conditions[0]".into(),
            "expected an object",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": 1}]}}),
            "status.conditions[0].type".into(),
            "expected a string",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"conditions": [{"type": "Suspended", "status": "False", "lastTransitionTime": "x"}]}}),
            "status.conditions[0].lastTransitionTime".into(),
            "invalid RFC 3339",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"trainer": []}}),
            "spec.trainer".into(),
            "expected an object",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "1k8"}}}}}),
            "spec.trainer.resourcesPerNode.limits[\"nvidia.com/gpu\"]".into(),
            "unsupported quantity \"1k8\"",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"trainer": {"resourcesPerNode": {"requests": {"amd.com/gpu": true}}}}}),
            "spec.trainer.resourcesPerNode.requests[\"amd.com/gpu\"]".into(),
            "expected a quantity",
        ),
        (
            json!({"metadata": {"name": "j"}, "spec": {"trainer": {"numNodes": -1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}}),
            "spec.trainer.numNodes".into(),
            ">= 0",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"trainerStatus": {"progressPercentage": 1}}}),
            "status.trainerStatus.lastUpdatedTime".into(),
            "missing",
        ),
        (
            json!({"metadata": {"name": "j"}, "status": {"trainerStatus": "x"}}),
            "status.trainerStatus".into(),
            "expected an object",
        ),
        (ann(json!(5)), format!("metadata.annotations[{TRAINER_STATUS_ANNOTATION:?}]"), "expected a string"),
        (ann(json!("{not json")), ANNOTATION_PATH.into(), "invalid JSON at line 1 column 2"),
        (
            ann(json!(r#"{"lastUpdatedTime":"2026-04-10T09:47:30Z","trainMetrics":{"loss":"x"}}"#)),
            r#"metadata.annotations["trainer.opendatahub.io/trainerStatus"].trainMetrics.loss"#.into(),
            "expected a number or null",
        ),
    ];
    for (input, path, msg) in cases {
        let e = from_trainjob(&input).unwrap_err();
        assert_eq!(e.path, path, "{input}: {e}");
        assert!(e.message.contains(msg), "{input}: {e}");
    }
}

// ----- garbage ------------------------------------------------------------------------------------------

const KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "labels",
    "annotations",
    "creationTimestamp",
    "spec",
    "suspend",
    "trainer",
    "numNodes",
    "resourcesPerNode",
    "limits",
    "requests",
    "nvidia.com/gpu",
    "amd.com/gpu",
    "status",
    "conditions",
    "type",
    "lastTransitionTime",
    "trainerStatus",
    "metrics",
    "value",
    "progressPercentage",
    "estimatedRemainingSeconds",
    "lastUpdatedTime",
    "trainMetrics",
    "evalMetrics",
    "currentStep",
    "totalSteps",
    "currentEpoch",
    "epoch",
    "loss",
    "lr",
    "",
    "kueue.x-k8s.io/queue-name",
    TRAINER_STATUS_ANNOTATION,
    "estimatedRemainingTimeSummary",
];
const STRINGS: &[&str] = &[
    "",
    "nan",
    "-inf",
    "Infinity",
    "1e309",
    "-0",
    "0.5",
    "abc",
    "True",
    "2026-03-20T14:02:11Z",
    "2026-03-20T14:02:11.532918+00:00",
    "9999-99-99T99:99:99Z",
    "not a time",
    "TrainJob",
    "Suspended",
    "False",
    "Complete",
    "Failed",
    "trainer.kubeflow.org/v1alpha1",
    "{",
    "{\"lastUpdatedTime\":\"2026-03-20T14:02:11Z\"}",
    "{\"trainMetrics\":{\"loss\":NaN}}",
    "💥é",
    "1k",
    "100",
    "-1",
];

fn garbage(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth >= 4 { 6 } else { 9 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 1),
        2 => json!(rng.pick(&[0i64, 1, -1, 100, 101, i64::MIN, i64::MAX])),
        3 => json!(rng.pick(&[0.5f64, -0.0, 1e308, -1e-300, 99.999, f64::MAX])),
        4 => json!(u64::MAX - rng.below(3) as u64),
        5 => Value::String(rng.pick(STRINGS).to_owned()),
        6 => (0..rng.below(5)).map(|_| garbage(rng, depth + 1)).collect(),
        7 => Value::Object(
            (0..rng.below(6)).map(|_| (rng.pick(KEYS).to_owned(), garbage(rng, depth + 1))).collect(),
        ),
        _ => json!({"name": rng.pick(KEYS), "value": rng.pick(STRINGS)}),
    }
}

/// Replaces one random subtree of `v` with garbage.
fn mutate(v: &mut Value, rng: &mut Rng) {
    if rng.below(5) == 0 {
        *v = garbage(rng, 0);
        return;
    }
    match v {
        Value::Object(m) if !m.is_empty() => {
            let key = m.keys().nth(rng.below(m.len())).cloned().unwrap_or_default();
            if let Some(child) = m.get_mut(&key) {
                mutate(child, rng);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = rng.below(a.len());
            mutate(&mut a[i], rng);
        }
        _ => *v = garbage(rng, 0),
    }
}

/// Mangles JSON text: inserted tokens, deleted chars, truncation.
fn mangle(text: &str, rng: &mut Rng) -> String {
    const BITS: &[&str] = &[
        "NaN",
        "-Infinity",
        "Infinity",
        "\"",
        "\\",
        "{",
        "}",
        "[",
        ",",
        ":",
        "null",
        "1e999",
        "\n",
        "-",
        "é",
    ];
    let mut s = text.to_owned();
    for _ in 0..1 + rng.below(3) {
        let mut at = rng.below(s.len() + 1);
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        match rng.below(3) {
            0 => {
                let bit: &str = rng.pick(BITS);
                s.insert_str(at, bit);
            }
            1 if at < s.len() => {
                s.remove(at);
            }
            _ => s.truncate(at),
        }
    }
    s
}

#[test]
fn garbage_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let bases = [upstream_job(), rhoai_job()];
    let status_bases: Vec<Value> = [KEP, HF_STEP, HF_END]
        .iter()
        .map(|t| serde_json::from_str::<Value>(t).unwrap()["trainerStatus"].clone())
        .collect();
    let text_bases = [ANN_RUNNING, ANN_COMPLETED, ANN_NAN, ENDPOINT_PYNAN, ENDPOINT];
    let (mut ok, mut err) = (0, 0);
    let mut tally = |r: Result<ProgressSample, NormalizeError>, prefix: &str| match r {
        Ok(s) => {
            assert_sane(&s);
            ok += 1;
        }
        Err(e) => {
            assert!(e.path.starts_with(prefix), "{e}");
            err += 1;
        }
    };
    for _ in 0..3000 {
        let g = garbage(&mut rng, 0);
        tally(from_trainer_status(&g, "p"), "p");
        let _ = from_trainjob(&g);

        let mut status = status_bases[rng.below(status_bases.len())].clone();
        for _ in 0..1 + rng.below(3) {
            mutate(&mut status, &mut rng);
        }
        tally(from_trainer_status(&status, "p"), "p");

        let mut job = bases[rng.below(bases.len())].clone();
        for _ in 0..1 + rng.below(3) {
            mutate(&mut job, &mut rng);
        }
        match from_trainjob(&job) {
            Ok(snap) => {
                if let Some(s) = &snap.sample {
                    assert_sane(s);
                }
                assert!(!snap.annotations.contains_key(TRAINER_STATUS_ANNOTATION));
            }
            Err(e) => assert!(!e.path.is_empty(), "{e}"),
        }

        let text = if rng.below(2) == 0 {
            {
                let base: &str = rng.pick(&text_bases);
                mangle(base, &mut rng)
            }
        } else {
            mangle(&garbage(&mut rng, 0).to_string(), &mut rng)
        };
        tally(from_annotation(&text, "a"), "a");
        tally(from_metrics_response(&text, "a", Timestamp::UNIX_EPOCH), "a");
        let _ = canonical_metric_name(&text);
    }
    // Deep nesting is refused by serde_json's recursion limit, not by a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(from_annotation(&deep, "a").is_err());
    let deep_obj = format!("{{\"trainMetrics\":{}1{}}}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    assert!(from_annotation(&deep_obj, "a").is_err());
    assert!(ok > 100 && err > 100, "ok {ok}, err {err}");
}
