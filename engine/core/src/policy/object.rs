//! What every object of this API is checked for, policies and exceptions alike: its `apiVersion`, its top-level
//! fields, its name and namespace as the API server accepts them, its label selectors.

use serde_json::Value;

use crate::error::FieldError;
use crate::policy::spec::{API_VERSION, LabelSelector};

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
