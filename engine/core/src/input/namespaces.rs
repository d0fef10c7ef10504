//! Namespaces' labels for offline runs (`replay`, `backtest`, `test`), which have no cluster to read them
//! from: a ClusterProgressPolicy's `namespaceSelector` needs them, and without them it selects nothing.
//!
//! A file (YAML or JSON) holds either a map of namespace to labels,
//!
//! ```yaml
//! team-a: {trainwarden.dev/reclaim: "true"}
//! team-b: {}
//! ```
//!
//! or what `kubectl get namespaces -o yaml` (or `-o json`) prints: a `NamespaceList` whose items' metadata
//! carry the name and labels. Streams can carry them too (a compact line's `namespaceLabels`).

use std::collections::BTreeMap;

/// Namespace → its labels.
pub type NamespaceLabels = BTreeMap<String, BTreeMap<String, String>>;

/// Reads a namespace-labels file named `source` (see the module); errors name the file and what is wrong.
pub fn parse_namespace_labels(text: &str, source: &str) -> Result<NamespaceLabels, String> {
    let value: serde_json::Value = serde_saphyr::from_str(text.trim_start_matches('\u{feff}'))
        .map_err(|e| format!("{source}: {}", e.to_string().lines().next().unwrap_or_default()))?;
    let serde_json::Value::Object(top) = &value else {
        return Err(format!(
            "{source}: expected a map of namespace to labels, or a NamespaceList (kubectl get namespaces -o yaml)"
        ));
    };
    let labels_of = |v: &serde_json::Value, path: &str| -> Result<BTreeMap<String, String>, String> {
        match v {
            serde_json::Value::Null => Ok(BTreeMap::new()),
            serde_json::Value::Object(m) => m
                .iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => Ok((k.clone(), s.clone())),
                    other => Err(format!("{source}: {path}.{k}: a label value is a string, got {other}")),
                })
                .collect(),
            other => Err(format!("{source}: {path}: expected a map of labels, got {other}")),
        }
    };
    let mut out = NamespaceLabels::new();
    if let Some(items) = top.get("items") {
        let serde_json::Value::Array(items) = items else {
            return Err(format!("{source}: items: expected a list of Namespaces"));
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("items[{i}].metadata");
            let name = item
                .pointer("/metadata/name")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| format!("{source}: {path}.name: required"))?;
            let labels = item.pointer("/metadata/labels").unwrap_or(&serde_json::Value::Null);
            out.insert(name.to_string(), labels_of(labels, &format!("{path}.labels"))?);
        }
        return Ok(out);
    }
    for (namespace, labels) in top {
        out.insert(namespace.clone(), labels_of(labels, namespace)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_or_a_namespace_list() {
        let map =
            parse_namespace_labels("team-a: {trainwarden.dev/reclaim: \"true\"}\nteam-b: {}\n", "ns.yaml")
                .unwrap();
        assert_eq!(map["team-a"]["trainwarden.dev/reclaim"], "true");
        assert!(map["team-b"].is_empty());
        let list = r#"{"apiVersion":"v1","kind":"NamespaceList","items":[
            {"metadata":{"name":"team-a","labels":{"tier":"small"}}},{"metadata":{"name":"bare"}}]}"#;
        let map = parse_namespace_labels(list, "ns.json").unwrap();
        assert_eq!(map["team-a"]["tier"], "small");
        assert!(map["bare"].is_empty());
        let e = parse_namespace_labels("team-a: {tier: 1}\n", "ns.yaml").unwrap_err();
        assert_eq!(e, "ns.yaml: team-a.tier: a label value is a string, got 1");
        assert!(
            parse_namespace_labels("- a\n", "ns.yaml").unwrap_err().starts_with("ns.yaml: expected a map")
        );
    }
}
