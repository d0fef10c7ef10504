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

mod garbage;
mod names;
mod rhoai;
mod trainjob;

use rhoai::AP;
use trainjob::{rhoai_job, upstream_job};
