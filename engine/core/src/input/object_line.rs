//! A whole TrainJob as a watch delivers it, one per stream line, read typed and borrowed: only the fields
//! [`from_trainjob`](super::from_trainjob) reads are decoded; the rest (managedFields, the pod spec, the
//! jobs' status) is skipped without building anything. Through a `serde_json::Value` a 2.7 KB object took
//! twice as long (BENCHMARKS.md).
//!
//! It accepts a subset of what `from_trainjob` accepts and gives the same snapshot for it: the rules from
//! what is read to the snapshot are shared ([`TrainJobRead::into_snapshot`], [`Conditions::see`]), and every
//! field is read by the same rule or a stricter one. Stricter: a condition's `lastTransitionTime` must be a
//! string even when it is not read; a string with an escape where a borrowed one is read; two `*/gpu`
//! resources. A line whose skipped parts a `Value` parse would refuse is declined ([`parses_with_distinct_keys`]), and so is a line
//! that gives a key twice in one object.
//! Anything else, valid or not, is `None`, and the caller reads the line through the `Value` path, which
//! also words the errors. The tests at the bottom compare the two on generated and mutated objects.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::input::TRAINER_STATUS_ANNOTATION;
use crate::input::json::{MapOnly, parse_time};
use crate::input::rhoai::from_annotation;
use crate::input::sample::{JobSnapshot, ProgressSample};
use crate::input::trainer_status::{TrainerStatusWire, from_trainer_status_wire};
use crate::input::trainjob::{
    ANNOTATION_PATH, API_VERSION, Conditions, KIND, TrainJobRead, accepted_quantity, quantity_text,
};
use crate::time::Timestamp;

/// The snapshot of a TrainJob line, or `None` when the line is not one this reader takes (see the module).
pub(super) fn read(line: &str) -> Option<JobSnapshot> {
    let MapOnly(wire): MapOnly<TrainJobWire<'_>> = serde_json::from_str(line).ok()?;
    // A line with neither is a compact line (or not a TrainJob at all): the general path decides.
    if wire.api_version.is_none() && wire.kind.is_none() {
        return None;
    }
    if wire.api_version.is_some_and(|v| v != API_VERSION) || wire.kind.is_some_and(|k| k != KIND) {
        return None;
    }
    let MapOnly(meta) = wire.metadata?;
    let name = meta.name.filter(|n| !n.is_empty())?;
    // A recorded TrainJob always has its namespace (a watch delivers it); the general path refuses a line
    // without one rather than judge it as `default`'s.
    meta.namespace.filter(|ns| !ns.is_empty())?;
    let created_at = meta.creation_timestamp.map(parse_time).transpose().ok()?;
    let spec = wire.spec.map(|s| s.0).unwrap_or_default();
    let status = wire.status.map(|s| s.0).unwrap_or_default();
    let gpus = gpus(spec.trainer.map(|t| t.0))?;
    let annotations = meta.annotations.unwrap_or_default();
    // The RHOAI annotation is JSON in a string: its keys too must be distinct.
    if annotations.progress.as_deref().is_some_and(|json| super::json::duplicate_key(json).is_some()) {
        return None;
    }
    let sample: Option<ProgressSample> = match status.trainer_status {
        Some(MapOnly(wire)) => Some(from_trainer_status_wire(wire, "status.trainerStatus").ok()?),
        None => match annotations.progress {
            Some(json) => Some(from_annotation(&json, ANNOTATION_PATH).ok()?),
            None => None,
        },
    };
    if !parses_with_distinct_keys(line) {
        return None;
    }

    let read = TrainJobRead {
        namespace: meta.namespace.filter(|ns| !ns.is_empty()),
        name,
        labels: meta.labels.unwrap_or_default(),
        annotations: annotations.others,
        created_at,
        suspend: spec.suspend.unwrap_or(false),
        conditions: status.conditions.map(|c| c.0).unwrap_or_default(),
        gpus,
        sample,
        unknown_fields: Vec::new(),
    };
    Some(read.into_snapshot())
}

/// `numNodes` × the `*/gpu` quantity per node (limits, else requests), as `from_trainjob` computes it; `None`
/// declines (a negative `numNodes`), `Some(None)` is a job that names no accelerator.
fn gpus(trainer: Option<TrainerWire>) -> Option<Option<f64>> {
    let Some(TrainerWire { num_nodes, resources_per_node: Some(MapOnly(resources)) }) = trainer else {
        return Some(None);
    };
    let quantity = |list: Option<MapOnly<GpuQuantity>>| list.and_then(|l| l.0.0);
    let Some(per_node) = quantity(resources.limits).or_else(|| quantity(resources.requests)) else {
        return Some(None);
    };
    let nodes = match num_nodes {
        Some(n) if n >= 0.0 => n,
        Some(_) => return None,
        None => 1.0,
    };
    Some(Some(nodes * per_node))
}

/// Whether a `Value` parse of `line` would succeed, without building anything. serde_json skips the parts
/// the typed reader ignores more leniently than it parses them: it does not check a skipped number's range
/// (`1e999`), a skipped string's lone UTF-16 surrogates (`\ud800`), or how deep skipped values nest. So the
/// line is parsed once more by the same parser, to a visitor that keeps nothing: the checks are the
/// `Value` parse's own, not a copy of them. It costs most of a skip of the line (BENCHMARKS.md).
/// The same pass checks that no object in it gives a key twice: the general path refuses such a line, where a
/// typed reader would keep one of the two values in silence.
fn parses_with_distinct_keys(line: &str) -> bool {
    let mut d = serde_json::Deserializer::from_str(line);
    matches!(super::json::distinct_keys(&mut d), Ok(None)) && d.end().is_ok()
}

/// The fields of a TrainJob that `from_trainjob` reads. Every `Option` is also what a `null` gives, as there.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct TrainJobWire<'a> {
    #[serde(borrow)]
    api_version: Option<&'a str>,
    #[serde(borrow)]
    kind: Option<&'a str>,
    #[serde(borrow)]
    metadata: Option<MapOnly<MetadataWire<'a>>>,
    spec: Option<MapOnly<SpecWire>>,
    #[serde(borrow)]
    status: Option<MapOnly<StatusWire<'a>>>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataWire<'a> {
    #[serde(borrow)]
    name: Option<&'a str>,
    #[serde(borrow)]
    namespace: Option<&'a str>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<AnnotationsWire>,
    #[serde(borrow)]
    creation_timestamp: Option<&'a str>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecWire {
    suspend: Option<bool>,
    trainer: Option<MapOnly<TrainerWire>>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct TrainerWire {
    num_nodes: Option<f64>,
    resources_per_node: Option<MapOnly<ResourcesWire>>,
}

#[derive(serde::Deserialize)]
struct ResourcesWire {
    limits: Option<MapOnly<GpuQuantity>>,
    requests: Option<MapOnly<GpuQuantity>>,
}

#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusWire<'a> {
    conditions: Option<ConditionsWire>,
    #[serde(borrow)]
    trainer_status: Option<MapOnly<TrainerStatusWire<'a>>>,
}

/// `metadata.annotations` without the RHOAI progress annotation, which is kept apart (`null` counts as absent).
#[derive(Default)]
struct AnnotationsWire {
    others: BTreeMap<String, String>,
    progress: Option<String>,
}

impl<'de> Deserialize<'de> for AnnotationsWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct AnnotationsVisitor;
        impl<'de> Visitor<'de> for AnnotationsVisitor {
            type Value = AnnotationsWire;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnnotationsWire, A::Error> {
                let mut out = AnnotationsWire::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == TRAINER_STATUS_ANNOTATION {
                        // The last of a repeated key wins, as in a `Value`'s map.
                        out.progress = map.next_value()?;
                    } else {
                        out.others.insert(key, map.next_value()?);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(AnnotationsVisitor)
    }
}

/// `status.conditions`, folded in list order by the rule `from_trainjob` uses.
struct ConditionsWire(Conditions);

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConditionWire<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<&'a str>,
    #[serde(borrow)]
    status: Option<&'a str>,
    #[serde(borrow)]
    last_transition_time: Option<&'a str>,
}

impl<'de> Deserialize<'de> for ConditionsWire {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ConditionsVisitor;
        impl<'de> Visitor<'de> for ConditionsVisitor {
            type Value = ConditionsWire;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of conditions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ConditionsWire, A::Error> {
                let mut out = Conditions::default();
                while let Some(MapOnly(c)) = seq.next_element::<MapOnly<ConditionWire<'de>>>()? {
                    out.see(c.kind, c.status, || -> Result<Option<Timestamp>, A::Error> {
                        c.last_transition_time.map(parse_time).transpose().map_err(de::Error::custom)
                    })?;
                }
                Ok(ConditionsWire(out))
            }
        }
        d.deserialize_seq(ConditionsVisitor)
    }
}

/// The `*/gpu` quantity of a resource list (`None` without one), the other resources skipped unread. A second
/// `*/gpu` key fails: `from_trainjob` sums different ones but keeps the last of a repeated one, and this
/// reader does not tell the two apart.
struct GpuQuantity(Option<f64>);

impl<'de> Deserialize<'de> for GpuQuantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = GpuQuantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource list")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<GpuQuantity, A::Error> {
                let mut found = None;
                while let Some(GpuKey(is_gpu)) = map.next_key()? {
                    if !is_gpu {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    }
                    if found.is_some() {
                        return Err(de::Error::custom("more than one */gpu resource"));
                    }
                    let Quantity(n) = map.next_value()?;
                    let n =
                        n.filter(|&n| accepted_quantity(n)).ok_or_else(|| de::Error::custom("quantity"))?;
                    // `from_trainjob` adds to a sum that starts at 0.0, which turns -0.0 into 0.0.
                    found = Some(0.0 + n);
                }
                Ok(GpuQuantity(found))
            }
        }
        d.deserialize_map(ListVisitor)
    }
}

/// Whether a resource's name ends in `/gpu`, read without copying it.
struct GpuKey(bool);

impl<'de> Deserialize<'de> for GpuKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = GpuKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a resource name")
            }
            fn visit_str<E>(self, s: &str) -> Result<GpuKey, E> {
                Ok(GpuKey(s.ends_with("/gpu")))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// A quantity as a JSON number or a plain decimal string, read as `from_trainjob` reads it.
struct Quantity(Option<f64>);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct QuantityVisitor;
        impl Visitor<'_> for QuantityVisitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity")
            }
            // A `Value`'s number converts to `f64` the same way: `as` for integers.
            fn visit_u64<E>(self, n: u64) -> Result<Quantity, E> {
                Ok(Quantity(Some(n as f64)))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Quantity, E> {
                Ok(Quantity(Some(n as f64)))
            }
            fn visit_f64<E>(self, n: f64) -> Result<Quantity, E> {
                Ok(Quantity(Some(n)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Quantity, E> {
                Ok(Quantity(quantity_text(s)))
            }
        }
        d.deserialize_any(QuantityVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::read;
    use crate::input::from_trainjob;
    use crate::input::stream::{parse_line, parse_line_general, read_fast};
    use crate::testing::rng::Rng;

    /// A TrainJob as kube-apiserver v1.35.4 (the test plane) returned it: the upstream `01-multi-node`
    /// example with 8 GPUs per node, created by `kubectl create`, its status applied server-side by
    /// `trainer-status` as Trainer's status server does, labelled, then read with `kubectl get -o json
    /// --show-managed-fields`.
    const FROM_APISERVER: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/trainjob-from-apiserver.json"
    ));
    const RHOAI_JOB_YAML: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/kubeflow/payloads/rhoai-trainjob-annotated.yaml"
    ));
    const UPSTREAM_JOB_YAML: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/kubeflow/payloads/upstream-trainjob-with-trainerStatus.yaml"
    ));

    /// The two readers' verdicts on a line, through `Debug` (so NaN and -0.0 compare too): this reader's, and
    /// the `Value` path's when it reads the job with no unknown field (what a stream line must be).
    fn decide(line: &str) -> (Option<String>, Option<String>) {
        let reference = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| from_trainjob(&v).ok())
            .filter(|s| s.unknown_fields.is_empty());
        (read(line).map(|s| format!("{s:?}")), reference.map(|s| format!("{s:?}")))
    }

    fn from_yaml(text: &str) -> Value {
        serde_saphyr::from_str(text).expect("fixture parses")
    }

    #[test]
    fn real_objects_take_this_path_and_read_alike() {
        let rhoai = from_yaml(RHOAI_JOB_YAML);
        let upstream = from_yaml(UPSTREAM_JOB_YAML);
        let apiserver: Value = serde_json::from_str(FROM_APISERVER).unwrap();
        for job in [apiserver, rhoai, upstream] {
            let line = job.to_string();
            let (fast, reference) = decide(&line);
            assert!(fast.is_some(), "declined a real object: {line}");
            assert_eq!(fast, reference, "{line}");
        }
        let line = serde_json::from_str::<Value>(FROM_APISERVER).unwrap().to_string();
        assert!(read_fast(&line, None).is_some(), "parse_line leaves a TrainJob to the general path");
        let snapshot = read(&line).unwrap();
        assert_eq!(snapshot.key.to_string(), "team-a/multi-node-example");
        assert_eq!(snapshot.gpus, Some(24.0));
        assert_eq!(snapshot.kueue_queue.as_deref(), Some("gpu-queue"));
        assert_eq!(snapshot.sample.as_ref().and_then(|s| s.metric("loss")), Some(0.8123));
        assert_eq!(snapshot.sample.as_ref().and_then(|s| s.current_step), Some(4200.0));
    }

    /// One of `good` mostly, one of `bad` one time in eight; `None` leaves the field out.
    fn some(rng: &mut Rng, good: &[Value], bad: &[Value], plain: bool) -> Option<Value> {
        if !plain && rng.below(8) == 0 {
            return if rng.below(3) == 0 { None } else { Some(bad[rng.below(bad.len())].clone()) };
        }
        Some(good[rng.below(good.len())].clone())
    }

    fn put(obj: &mut Value, key: &str, value: Option<Value>) {
        match value {
            Some(v) => obj[key] = v,
            None => drop(obj.as_object_mut().and_then(|o| o.remove(key))),
        }
    }

    /// A TrainJob, every field of it drawn from valid values, or (unless `plain`) sometimes a wrong one.
    fn object(rng: &mut Rng, plain: bool) -> Value {
        let time = |s: &str| json!(format!("2026-11-27T{s}Z"));
        let mut job: Value = serde_json::from_str(FROM_APISERVER).unwrap();
        put(
            &mut job,
            "apiVersion",
            some(
                rng,
                &[json!("trainer.kubeflow.org/v1alpha1")],
                &[json!("v1"), json!(null), json!(2)],
                plain,
            ),
        );
        put(&mut job, "kind", some(rng, &[json!("TrainJob")], &[json!("Job"), json!(null)], plain));
        let meta = &mut job["metadata"];
        put(
            meta,
            "name",
            some(rng, &[json!("ft"), json!("naïve-run")], &[json!(""), json!(null), json!(7)], plain),
        );
        put(
            meta,
            "namespace",
            some(rng, &[json!("team-a"), json!("b")], &[json!(""), json!(null), json!(["x"])], plain),
        );
        let queue = rng.pick(&["gpu-queue", ""]);
        put(
            meta,
            "labels",
            some(
                rng,
                &[json!({"team": "fraud", "kueue.x-k8s.io/queue-name": queue}), json!({}), json!(null)],
                &[json!({"team": 5}), json!("x")],
                plain,
            ),
        );
        let report = json!({"progressPercentage": 45, "currentStep": 340, "totalSteps": 750, "currentEpoch": 1.36,
            "trainMetrics": {"loss": 0.4523, "grad_norm": null}, "evalMetrics": {"loss": 0.5011}, "lastUpdatedTime": "2026-11-27T17:00:30Z"});
        let bad_report = json!({"trainMetricz": {}, "lastUpdatedTime": "2026-11-27T17:00:30Z"});
        put(
            meta,
            "annotations",
            some(
                rng,
                &[
                    json!({"trainer.opendatahub.io/trainerStatus": report.to_string(), "note": "a \"quoted\" note"}),
                    json!({"trainer.opendatahub.io/trainerStatus": null}),
                    json!({"a": "b"}),
                ],
                &[
                    json!({"trainer.opendatahub.io/trainerStatus": bad_report.to_string()}),
                    json!({"trainer.opendatahub.io/trainerStatus": 5}),
                    json!({"a": null}),
                ],
                plain,
            ),
        );
        put(
            meta,
            "creationTimestamp",
            some(rng, &[time("16:00:00"), json!(null)], &[json!("yesterday"), json!(5)], plain),
        );
        let quantity = |rng: &mut Rng| {
            let good = [
                json!(8),
                json!("8"),
                json!(" 4 "),
                json!("1.5"),
                json!(0),
                json!(2.5),
                json!(-0.0),
                json!("-0"),
            ];
            some(rng, &good, &[json!(-1), json!("abc"), json!(null), json!(true), json!("1e999")], plain)
        };
        let mut limits = json!({"cpu": "16", "memory": "64Gi"});
        put(&mut limits, "nvidia.com/gpu", quantity(rng));
        if !plain && rng.below(6) == 0 {
            limits["amd.com/gpu"] = json!(1);
        }
        let mut requests = json!({"cpu": "8"});
        if rng.below(2) == 0 {
            put(&mut requests, "nvidia.com/gpu", quantity(rng));
        }
        let mut resources = json!({});
        put(&mut resources, "limits", some(rng, &[limits, json!({}), json!(null)], &[json!([1])], plain));
        put(&mut resources, "requests", some(rng, &[requests, json!(null)], &[json!("8")], plain));
        let trainer = &mut job["spec"]["trainer"];
        put(
            trainer,
            "numNodes",
            some(rng, &[json!(3), json!(1), json!(null)], &[json!(-1), json!("3")], plain),
        );
        put(trainer, "resourcesPerNode", some(rng, &[resources, json!(null)], &[json!(4)], plain));
        put(
            &mut job["spec"],
            "suspend",
            some(rng, &[json!(true), json!(false), json!(null)], &[json!("yes")], plain),
        );
        let conditions: Vec<Value> = (0..rng.below(4))
            .map(|i| {
                let mut c = json!({"reason": "R", "message": "m"});
                put(
                    &mut c,
                    "type",
                    some(
                        rng,
                        &[json!("Suspended"), json!("Complete"), json!("Failed"), json!("Created")],
                        &[json!(5)],
                        plain,
                    ),
                );
                put(
                    &mut c,
                    "status",
                    some(
                        rng,
                        &[json!("True"), json!("False"), json!("Unknown")],
                        &[json!(null), json!(true)],
                        plain,
                    ),
                );
                let at = time(&format!("1{i}:00:00"));
                put(
                    &mut c,
                    "lastTransitionTime",
                    some(rng, &[at], &[json!("soon"), json!(null), json!(1)], plain),
                );
                c
            })
            .collect();
        let status = &mut job["status"];
        put(status, "conditions", some(rng, &[json!(conditions), json!(null)], &[json!({})], plain));
        let metrics = json!([{"name": "loss", "value": "0.81"}, {"name": "step", "value": "40"}, {"name": "lr", "value": "nan"}]);
        put(
            status,
            "trainerStatus",
            some(
                rng,
                &[
                    json!({"progressPercentage": 12, "metrics": metrics, "lastUpdatedTime": "2026-11-27T17:00:00Z"}),
                    json!(null),
                ],
                &[
                    json!({"progressPercentage": 150, "lastUpdatedTime": "2026-11-27T17:00:00Z"}),
                    json!({"progres": 1, "lastUpdatedTime": "2026-11-27T17:00:00Z"}),
                    json!({"metrics": []}),
                ],
                plain,
            ),
        );
        put(
            status,
            "jobsStatus",
            Some(
                json!([{"name": "node", "ready": 3, "active": 3, "succeeded": 0, "failed": 0, "suspended": 0}]),
            ),
        );
        if !plain && rng.below(10) == 0 {
            job["unexpected"] = json!({"any": [1, "thing"]});
        }
        job
    }

    /// One departure from plain JSON text, valid or not.
    fn odd(rng: &mut Rng, line: String) -> String {
        let once = |from: &str, to: &str| line.replacen(from, to, 1);
        match rng.below(10) {
            8 => once("\"nvidia.com/gpu\":", "\"nvidia.com/gpu\":2,\"nvidia.com/gpu\":"),
            9 => once("\"annotations\":{", "\"annotations\":{\"trainer.opendatahub.io/trainerStatus\":5,"),
            0 => once("\"name\":\"ft\"", "\"name\":\"f\\u0074\""),
            1 => once("\"metadata\":{", "\"metadata\":{\"name\":\"dup\","),
            2 => once("\"status\":{", "\"status\":null,\"status\":{"),
            3 => once("\"creationTimestamp\":\"", "\"creationTimestamp\":\"\\u0032"),
            4 => once("\"nvidia.com/gpu\"", "\"nvidia.com\\/gpu\""),
            5 => format!("{line} x"),
            6 => {
                let mut cut = rng.below(line.len());
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line[..cut].to_string()
            }
            _ => once(",", " ,\n\t"),
        }
    }

    /// This reader decides every TrainJob line as the `Value` path does, field by field, and declines
    /// only what it is documented to decline.
    #[test]
    fn the_typed_reader_agrees_with_the_value_reader() {
        let mut rng = Rng(0x000B_1EC7_11E5);
        let (mut alike, mut refused, mut declined) = (0, 0, 0);
        for i in 0..6_000 {
            let plain = i % 4 == 0;
            let mut line = object(&mut rng, plain).to_string();
            if i % 4 == 3 {
                line = odd(&mut rng, line);
            }
            // The whole line's record, placed in time, as the general path gives it (errors included).
            let previous = [None, Some(crate::time::Timestamp::from_second(1_795_798_800).unwrap())][i % 2];
            let record = parse_line(&line, "s", 1, previous);
            assert_eq!(
                format!("{record:?}"),
                format!("{:?}", parse_line_general(&line, "s", 1, previous)),
                "{line}"
            );
            match decide(&line) {
                (Some(a), Some(b)) => {
                    assert_eq!(a, b, "decided differently: {line}");
                    alike += 1;
                }
                (Some(a), None) => panic!("accepted what the Value path refuses: {line}\n{a}"),
                (None, Some(_)) => {
                    assert!(!plain, "declined a plain object: {line}");
                    declined += 1;
                }
                (None, None) => refused += 1,
            }
        }
        eprintln!(
            "{alike} read alike, {refused} refused by both, {declined} declined and read by the Value path"
        );
        assert!(alike > 2_500 && refused > 1_000 && declined > 100, "{alike} {refused} {declined}");
    }

    /// What serde_json reads more leniently than a `Value` is left to the general path: a struct given as an
    /// array; a lone surrogate, deep nesting or an out-of-range number in a skipped part. And -0 GPUs are 0,
    /// as that path sums them.
    #[test]
    fn what_a_value_parse_refuses_is_left_to_it() {
        let job: Value = serde_json::from_str(FROM_APISERVER).unwrap();
        let with = |edit: &dyn Fn(&mut Value)| {
            let mut job = job.clone();
            edit(&mut job);
            job.to_string()
        };
        let mut deep = json!(1);
        for _ in 0..130 {
            deep = json!([deep]);
        }
        let lines = [
            r#"[null,"TrainJob",{"name":"x","labels":{"kind":"k"},"creationTimestamp":"2026-11-27T16:00:00Z"},null,null]"#.to_owned(),
            with(&|j| j["status"]["conditions"] = json!([["Suspended", "False", "2026-11-27T10:00:00Z"]])),
            with(&|j| j["spec"] = json!([true, null])),
            with(&|j| j["status"]["trainerStatus"] = json!([12, null, null, "2026-11-27T17:00:00Z"])),
            with(&|j| j["status"]["conditions"] = json!([{"type": "Created", "status": "True", "message": "LONE"}]))
                .replace("LONE", "\\ud800"),
            with(&|j| j["spec"]["trainer"]["env"] = deep.clone()),
            // Numbers a `Value` cannot hold, where they are skipped: serde_json checks only their grammar there.
            with(&|j| j["spec"]["trainer"]["numProcPerNode"] = json!("BIG")).replace("\"BIG\"", "1e999"),
            with(&|j| j["metadata"]["generation"] = json!("BIG")).replace("\"BIG\"", &"9".repeat(400)),
        ];
        for line in &lines {
            assert!(read(line).is_none(), "taken: {line}");
            assert_eq!(
                format!("{:?}", parse_line(line, "s", 1, None)),
                format!("{:?}", parse_line_general(line, "s", 1, None))
            );
            assert!(parse_line(line, "s", 1, None).is_err(), "the general path refuses it: {line}");
        }
        let minus_zero =
            with(&|j| j["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"] = json!(-0.0));
        let snapshot = read(&minus_zero).expect("taken");
        assert_eq!(snapshot.gpus.map(f64::to_bits), Some(0.0f64.to_bits()));
        assert_eq!(
            format!("{:?}", parse_line(&minus_zero, "s", 1, None)),
            format!("{:?}", parse_line_general(&minus_zero, "s", 1, None))
        );
    }
}
