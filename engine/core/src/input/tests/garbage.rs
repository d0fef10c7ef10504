//! Garbage in never panics: generated and mangled reports come out as samples or errors.

use super::*;

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
