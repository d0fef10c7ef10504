//! The `labels` and `annotations` variables of rule scripts: read-only maps in which a missing key reads as
//! `""`, as `label(key)` does. With Rhai's object maps, `labels["team"] == "x"` on a job without a `team`
//! label compares `()` with a string and fails on every evaluation; users expect it to be false.
//! `"team" in labels` tells a missing label from an empty one.

use std::collections::BTreeMap;

use rhai::{Array, Dynamic, Engine, ImmutableString};

/// A job's labels or annotations, as scripts see them.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct JobMap(BTreeMap<String, String>);

impl JobMap {
    pub(super) fn new(entries: &BTreeMap<String, String>) -> Self {
        JobMap(entries.clone())
    }
}

pub(super) fn register(engine: &mut Engine) {
    engine.register_type_with_name::<JobMap>("map of strings");
    // `labels["team"]`, and `labels.team` (Rhai falls back to the indexer for a property).
    engine.register_indexer_get(|m: &mut JobMap, key: &str| -> ImmutableString {
        m.0.get(key).map(|v| v.as_str().into()).unwrap_or_default()
    });
    engine.register_fn("get", |m: &mut JobMap, key: &str| -> ImmutableString {
        m.0.get(key).map(|v| v.as_str().into()).unwrap_or_default()
    });
    engine.register_fn("to_json", |m: &mut JobMap| serde_json::to_string(&m.0).unwrap_or_default());
    // `"team" in labels`
    engine.register_fn("contains", |m: &mut JobMap, key: &str| m.0.contains_key(key));
    engine.register_fn("keys", |m: &mut JobMap| -> Array {
        m.0.keys().map(|k| Dynamic::from(ImmutableString::from(k.as_str()))).collect()
    });
    engine.register_fn("values", |m: &mut JobMap| -> Array {
        m.0.values().map(|v| Dynamic::from(ImmutableString::from(v.as_str()))).collect()
    });
    engine.register_fn("len", |m: &mut JobMap| m.0.len() as i64);
    engine.register_fn("is_empty", |m: &mut JobMap| m.0.is_empty());
    let show = |m: &mut JobMap| -> String {
        let entries: Vec<String> = m.0.iter().map(|(k, v)| format!("{k:?}: {v:?}")).collect();
        format!("#{{{}}}", entries.join(", "))
    };
    engine.register_fn("to_string", show).register_fn("to_debug", show);
}
