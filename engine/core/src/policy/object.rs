//! What every object of this API is checked for, policies and exceptions alike: its `apiVersion`, its top-level
//! fields, its name and namespace as the API server accepts them, its label selectors.

use serde_json::Value;

use crate::error::FieldError;
use crate::policy::spec::{API_VERSION, LabelSelector};

/// When every document of `text` is an object of another API (`apiVersion: trainer.kubeflow.org/v1alpha1`,
/// `v1`, …), each as `Kind (apiVersion)`: a directory of manifests holds such files beside policies, and
/// `validate DIR` says it skipped them rather than calling a TrainJob an invalid policy. `None` when a
/// document is (or may be meant as) one of this API's — no `apiVersion`, one of `trainwarden.dev`, not a
/// mapping — or the text does not parse: those are checked, and their errors reported, as policies.
pub fn objects_of_other_apis(text: &str) -> Option<Vec<String>> {
    let values: Vec<Value> = serde_saphyr::from_multiple(text).ok()?;
    let group = API_VERSION.split('/').next().unwrap_or(API_VERSION);
    let mut found = Vec::new();
    for value in values.iter().filter(|v| !v.is_null()) {
        let version = value.get("apiVersion")?.as_str()?;
        let version_group = version.rsplit_once('/').map_or("", |(g, _)| g);
        // Ours, or a misspelling of ours (`trainwarden.io`): checked as a policy, so the error is said.
        if version_group == group || version_group.contains("trainwarden") {
            return None;
        }
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("an object");
        found.push(format!("{kind} ({version})"));
    }
    if found.is_empty() { None } else { Some(found) }
}

/// A label selector's expressions: `In` and `NotIn` need values, `Exists` and `DoesNotExist` take none.
pub(crate) fn validate_selector(errors: &mut Vec<FieldError>, path: &str, selector: &LabelSelector) {
    use crate::policy::SelectorOperator::*;
    for (i, e) in selector.match_expressions.iter().enumerate() {
        let p = format!("{path}.matchExpressions[{i}].values");
        match e.operator {
            In | NotIn if e.values.is_empty() => errors.push(FieldError::new(p, "In and NotIn need values")),
            Exists | DoesNotExist if !e.values.is_empty() => {
                errors.push(FieldError::new(p, "Exists and DoesNotExist take no values"));
            }
            _ => {}
        }
    }
}

/// `apiVersion` of one of this API's objects (policies and exceptions alike).
pub(crate) fn check_api_version(obj: &serde_json::Map<String, Value>, errors: &mut Vec<FieldError>) {
    match obj.get("apiVersion") {
        Some(Value::String(v)) if v == API_VERSION => {}
        Some(Value::String(v)) => {
            errors.push(FieldError::new("apiVersion", format!("expected {API_VERSION}, got {v:?}")));
        }
        Some(_) => errors.push(FieldError::new("apiVersion", format!("expected the string {API_VERSION}"))),
        None => errors.push(FieldError::new("apiVersion", format!("required: {API_VERSION}"))),
    }
}

/// What is left of an object once `metadata` and `spec` were taken out: only `apiVersion`, `kind` and
/// `status` may remain.
pub(crate) fn check_top_level_fields(obj: &serde_json::Map<String, Value>, errors: &mut Vec<FieldError>) {
    for key in obj.keys() {
        if !matches!(key.as_str(), "apiVersion" | "kind" | "status") {
            errors.push(FieldError::new(
                key.clone(),
                "unknown field; expected apiVersion, kind, metadata or spec",
            ));
        }
    }
}

/// A Kubernetes object name (RFC 1123 subdomain): what the API server accepts as `metadata.name`.
pub(crate) fn dns_subdomain(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err(format!("must be no more than 253 characters, got {}", name.len()));
    }
    // Dot-separated parts of lowercase alphanumerics and '-', each starting and ending alphanumeric (no
    // per-part length limit: that is for labels).
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let part_ok = |part: &str| {
        let b = part.as_bytes();
        b.iter().all(|c| alnum(*c) || *c == b'-')
            && b.first().copied().is_some_and(alnum)
            && b.last().copied().is_some_and(alnum)
    };
    if name.split('.').all(part_ok) {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')".into())
    }
}

/// A namespace name (RFC 1123 label).
pub(crate) fn dns_label(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if name.is_empty() || name.len() > 63 {
        return Err(format!("must be 1 to 63 characters, got {}", name.len()));
    }
    if bytes.iter().all(|b| alnum(b) || *b == b'-')
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
    {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name')".into())
    }
}

#[cfg(test)]
mod tests {
    use super::objects_of_other_apis;

    #[test]
    fn files_of_other_apis_are_told_apart_from_policies() {
        let runtime = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata: {name: r}\n---\napiVersion: v1\nkind: ConfigMap\n";
        assert_eq!(
            objects_of_other_apis(runtime),
            Some(vec![
                "TrainingRuntime (trainer.kubeflow.org/v1alpha1)".to_string(),
                "ConfigMap (v1)".to_string()
            ])
        );
        for ours in [
            "apiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\n",
            "apiVersion: trainwarden.dev/v2\nkind: ProgressPolicy\n",
            "apiVersion: trainwarden.io/v1alpha1\nkind: ProgressPolicy\n",
            "kind: ProgressPolicy\n",
            "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: trainwarden.dev/v1alpha1\nkind: ProgressPolicy\n",
            "- a list\n",
            "",
            "key: [unclosed\n",
        ] {
            assert_eq!(objects_of_other_apis(ours), None, "{ours:?}");
        }
    }
}
