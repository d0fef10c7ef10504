//! The Kubeflow Trainer status endpoint, request by request, without I/O.
//!
//! Behaves like upstream `pkg/statusserver` (kubeflow/trainer): same path, same order of checks, same status
//! codes and `metav1.Status` bodies, so a client cannot tell the difference:
//!
//! 1. a declared body over 64 KiB → 413 `Payload too large` (upstream's body-size middleware runs first);
//! 2. anything but `POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status`
//!    → 404 `Not found`;
//! 3. a bearer token other than this run's → 403 `Forbidden`;
//! 4. a body over 64 KiB while reading (chunked) → 413; a body Go's `encoding/json` would not decode into
//!    `UpdateTrainJobStatusRequest` (one JSON value, integers for the int32 fields, strings for metrics, an
//!    RFC 3339 `lastUpdatedTime`) → 422 `Invalid payload`;
//! 5. no `trainerStatus` → 200, echo, nothing recorded;
//! 6. a TrainJob other than the watched one → 404 `Train job not found` (the server-side apply finds none);
//! 7. what the TrainJob CRD schema rejects (progress 150, 257 metrics, ...) → 422 with the API server's own
//!    message, e.g. `TrainJob.trainer.kubeflow.org "x" is invalid: status.trainerStatus.progressPercentage:
//!    Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100`
//!    (texts taken from kube-apiserver v1.35.4 with the upstream CRD);
//! 8. otherwise 200 and the parsed request echoed as Go re-encodes it (`lastUpdatedTime` as a `metav1.Time`:
//!    UTC, whole seconds), which is also what the cluster would store and the controller would read.
//!
//! Only an accepted update (8) reaches the evaluator: nothing a malformed request carries is ever observed.

use serde_json::{Map, Value, json};
use trainwarden_core::{JobKey, Timestamp};

/// Upstream `maxBodySize = 1 << 16`.
pub const MAX_BODY_BYTES: usize = 1 << 16;

const PATH_PREFIX: &str = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/";

/// The URL path the watched job reports to (upstream `StatusUrl`).
pub fn status_path(job: &JobKey) -> String {
    format!("{PATH_PREFIX}{}/trainjobs/{}/status", job.namespace, job.name)
}

/// A response: status code and JSON body (Go's encoder ends it with a newline).
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Response body: the echoed object on success, a Kubernetes `Status` (`Failure`) on error.
    pub body: String,
    /// The accepted `trainerStatus` (as stored: the echo's), for the evaluator. `None` for errors and for
    /// requests without a `trainerStatus`.
    pub accepted: Option<Value>,
}

impl Reply {
    fn failure(message: &str, reason: &str, code: u16) -> Reply {
        let body = ordered(&[
            ("metadata", "{}".into()),
            ("status", json!("Failure").to_string()),
            ("message", json!(message).to_string()),
            ("reason", json!(reason).to_string()),
            ("code", code.to_string()),
        ]);
        Reply { status: code, body: go_json(&body), accepted: None }
    }

    /// 413 `RequestEntityTooLarge`: the body is over [`MAX_BODY_BYTES`].
    pub fn payload_too_large() -> Reply {
        Reply::failure("Payload too large", "RequestEntityTooLarge", 413)
    }

    /// 404 `NotFound`: a request that is not a TrainJob status update (method or path).
    pub fn not_found() -> Reply {
        Reply::failure("Not found", "NotFound", 404)
    }

    /// 403 `Forbidden`: a missing or wrong bearer token.
    pub fn forbidden() -> Reply {
        Reply::failure("Forbidden", "Forbidden", 403)
    }

    /// 422 `Invalid`: a body Go's decoder would reject (not JSON, wrong types) or that could not be read.
    pub fn invalid_payload() -> Reply {
        Reply::failure("Invalid payload", "Invalid", 422)
    }

    fn job_not_found() -> Reply {
        Reply::failure("Train job not found", "NotFound", 404)
    }
}

/// What routing decided about a request line, before the body is read.
#[derive(Debug, PartialEq)]
pub enum Route {
    /// The status endpoint, for this job.
    Status(JobKey),
    /// Anything else: 404 `Not found`.
    Other,
}

/// Upstream's mux: `POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status`,
/// one non-empty segment each; everything else (other methods included) is the default 404 handler.
pub fn route(method: &str, path: &str) -> Route {
    if method != "POST" {
        return Route::Other;
    }
    let Some(rest) = path.strip_prefix(PATH_PREFIX) else { return Route::Other };
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [ns, "trainjobs", name, "status"] if !ns.is_empty() && !name.is_empty() => {
            Route::Status(JobKey::new(percent_decode(ns), percent_decode(name)))
        }
        _ => Route::Other,
    }
}

/// Go's `r.PathValue` is the unescaped segment.
fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Upstream `extractRawToken` (since kubeflow/trainer#3782): exactly `<scheme> <token>`, scheme `Bearer` in
/// any case. Compared in constant time.
pub fn authorized(authorization: Option<&[u8]>, token: &str) -> bool {
    let Some(header) = authorization.and_then(|h| std::str::from_utf8(h).ok()) else { return false };
    let parts: Vec<&str> = header.split(' ').collect();
    let [scheme, presented] = parts.as_slice() else { return false };
    if !scheme.eq_ignore_ascii_case("Bearer") {
        return false;
    }
    let (a, b) = (presented.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Steps 4–8 for an authorized request to `target` whose body was read in full (at most [`MAX_BODY_BYTES`]).
pub fn handle_update(watched: &JobKey, target: &JobKey, body: &[u8]) -> Reply {
    let request = match decode_request(body) {
        Ok(r) => r,
        Err(()) => return Reply::invalid_payload(),
    };
    let Some(status) = request else {
        return Reply { status: 200, body: "{}\n".into(), accepted: None };
    };
    if target != watched {
        return Reply::job_not_found();
    }
    let errors = validate(&status);
    if !errors.is_empty() {
        let detail = if errors.len() == 1 { errors[0].clone() } else { format!("[{}]", errors.join(", ")) };
        let message = format!("TrainJob.trainer.kubeflow.org {:?} is invalid: {detail}", target.name);
        return Reply::failure(&message, "Invalid", 422);
    }
    let body = go_json(&ordered(&[("trainerStatus", status.to_go_json())]));
    Reply { status: 200, body, accepted: Some(status.to_json()) }
}

/// `trainerStatus` as Go decodes it into `TrainerStatus`.
#[derive(Debug, Default, PartialEq)]
struct DecodedStatus {
    progress_percentage: Option<i32>,
    estimated_remaining_seconds: Option<i32>,
    metrics: Vec<(String, String)>,
    /// `None` is Go's zero `metav1.Time` (absent or null).
    last_updated_time: Option<Timestamp>,
}

impl DecodedStatus {
    /// The echo as Go writes it: `TrainerStatus` field order, `omitempty`, `metav1.Time` as UTC whole seconds.
    fn to_go_json(&self) -> String {
        let mut fields = Vec::new();
        if let Some(p) = self.progress_percentage {
            fields.push(("progressPercentage", p.to_string()));
        }
        if let Some(e) = self.estimated_remaining_seconds {
            fields.push(("estimatedRemainingSeconds", e.to_string()));
        }
        if !self.metrics.is_empty() {
            let items: Vec<String> = self
                .metrics
                .iter()
                .map(|(n, v)| ordered(&[("name", json!(n).to_string()), ("value", json!(v).to_string())]))
                .collect();
            fields.push(("metrics", format!("[{}]", items.join(","))));
        }
        let time =
            self.last_updated_time.map_or_else(|| "null".to_string(), |t| json!(metav1_time(t)).to_string());
        fields.push(("lastUpdatedTime", time));
        ordered(&fields)
    }

    /// The stored form (the same content as the echo), for the evaluator and the recording.
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if let Some(p) = self.progress_percentage {
            m.insert("progressPercentage".into(), p.into());
        }
        if let Some(e) = self.estimated_remaining_seconds {
            m.insert("estimatedRemainingSeconds".into(), e.into());
        }
        if !self.metrics.is_empty() {
            let items = self.metrics.iter().map(|(n, v)| json!({"name": n, "value": v})).collect();
            m.insert("metrics".into(), Value::Array(items));
        }
        m.insert(
            "lastUpdatedTime".into(),
            match self.last_updated_time {
                Some(t) => Value::String(metav1_time(t)),
                None => Value::Null,
            },
        );
        Value::Object(m)
    }
}

/// A JSON object with its fields in the given order (Go encodes struct fields in declaration order; a
/// serde_json map would sort them). Values are JSON text.
fn ordered(fields: &[(&str, String)]) -> String {
    let inner: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{v}", json!(k))).collect();
    format!("{{{}}}", inner.join(","))
}

/// `metav1.Time` marshals as `t.UTC().Format(time.RFC3339)`: whole seconds, `Z`.
fn metav1_time(t: Timestamp) -> String {
    let secs = Timestamp::from_second(t.as_second()).unwrap_or(t);
    secs.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Go `encoding/json` into `UpdateTrainJobStatusRequest`: exactly one JSON value (trailing data is an error,
/// as upstream tests require), `null` or an object; keys match case-insensitively; unknown keys are ignored;
/// `null` leaves a field at its zero value. `Ok(None)`: no `trainerStatus`.
fn decode_request(body: &[u8]) -> Result<Option<DecodedStatus>, ()> {
    let value: Value = serde_json::from_slice(body).map_err(|_| ())?;
    let object = match value {
        Value::Null => return Ok(None),
        Value::Object(o) => o,
        _ => return Err(()),
    };
    match go_field(&object, "trainerStatus") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(ts)) => decode_status(ts).map(Some),
        Some(_) => Err(()),
    }
}

/// Go's field matching: an exact key first, else a case-insensitive one. serde_json keeps the last of
/// duplicate keys, as Go does.
fn go_field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).or_else(|| object.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v))
}

fn decode_status(ts: &Map<String, Value>) -> Result<DecodedStatus, ()> {
    let int32 = |v: Option<&Value>| -> Result<Option<i32>, ()> {
        match v {
            None | Some(Value::Null) => Ok(None),
            // Go rejects 45.0 and 1e2 for an int32 field: only integer literals in range decode.
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                n.as_i64().and_then(|i| i32::try_from(i).ok()).map(Some).ok_or(())
            }
            Some(_) => Err(()),
        }
    };
    let mut status = DecodedStatus {
        progress_percentage: int32(go_field(ts, "progressPercentage"))?,
        estimated_remaining_seconds: int32(go_field(ts, "estimatedRemainingSeconds"))?,
        ..DecodedStatus::default()
    };
    match go_field(ts, "metrics") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                let string = |v: Option<&Value>| match v {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(_) => Err(()),
                };
                match item {
                    Value::Null => status.metrics.push((String::new(), String::new())),
                    Value::Object(m) => {
                        status.metrics.push((string(go_field(m, "name"))?, string(go_field(m, "value"))?));
                    }
                    _ => return Err(()),
                }
            }
        }
        Some(_) => return Err(()),
    }
    status.last_updated_time = match go_field(ts, "lastUpdatedTime") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(parse_rfc3339(s)?),
        Some(_) => return Err(()),
    };
    Ok(status)
}

/// Go's `time.Parse(time.RFC3339, s)`: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn parse_rfc3339(s: &str) -> Result<Timestamp, ()> {
    let b = s.as_bytes();
    let shape_ok = b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && (s.ends_with('Z') || {
            let tail = &b[b.len() - 6..];
            (tail[0] == b'+' || tail[0] == b'-') && tail[3] == b':'
        });
    if !shape_ok {
        return Err(());
    }
    s.parse::<Timestamp>().map_err(|_| ())
}

/// The TrainJob CRD's `status.trainerStatus` schema and CEL rule, in kube-apiserver's order and words.
fn validate(s: &DecodedStatus) -> Vec<String> {
    const P: &str = "status.trainerStatus";
    let mut errors = Vec::new();
    // Errors that make the API server skip CEL rules (their cost depends on the sizes that failed).
    let mut skips_cel = false;
    if let Some(e) = s.estimated_remaining_seconds
        && e < 0
    {
        errors.push(format!(
            "{P}.estimatedRemainingSeconds: Invalid value: {e}: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0"
        ));
    }
    if s.metrics.len() > 256 {
        errors.push(format!("{P}.metrics: Too many: {}: must have at most 256 items", s.metrics.len()));
        skips_cel = true;
    }
    for (i, (name, value)) in s.metrics.iter().enumerate() {
        for (field, text) in [("name", name), ("value", value)] {
            let path = format!("{P}.metrics[{i}].{field}");
            if text.is_empty() {
                errors.push(format!(
                    "{path}: Invalid value: \"\": trainerStatus.metrics[{i}].{field} in body should be at least 1 chars long"
                ));
            } else if text.chars().count() > 64 {
                errors.push(format!("{path}: Too long: may not be more than 64 bytes"));
                skips_cel = true;
            }
        }
    }
    if let Some(p) = s.progress_percentage {
        let bound = if p > 100 {
            Some("less than or equal to 100")
        } else if p < 0 {
            Some("greater than or equal to 0")
        } else {
            None
        };
        if let Some(bound) = bound {
            errors.push(format!(
                "{P}.progressPercentage: Invalid value: {p}: trainerStatus.progressPercentage in body should be {bound}"
            ));
        }
    }
    if skips_cel {
        errors.push("<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into());
    } else if s.last_updated_time.is_none() {
        errors.push(format!("{P}: Invalid value: lastUpdatedTime is required when trainerStatus is present"));
    }
    errors
}

/// JSON as Go's `json.Encoder` writes it: HTML-safe escapes and a trailing newline. The characters escaped
/// only ever occur inside strings, so a textual pass is exact.
fn go_json(json_text: &str) -> String {
    let mut out = String::new();
    for c in json_text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobKey {
        JobKey::new("team", "train")
    }

    fn post(body: &str) -> Reply {
        handle_update(&job(), &job(), body.as_bytes())
    }

    fn fixture(name: &str) -> String {
        let path =
            format!("{}/../../../shared/fixtures/kubeflow/payloads/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn routes_only_the_status_path_for_post() {
        assert_eq!(route("POST", &status_path(&job())), Route::Status(job()));
        assert_eq!(
            route("POST", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/a%2Db/trainjobs/x/status"),
            Route::Status(JobKey::new("a-b", "x"))
        );
        for (method, path) in [
            ("GET", status_path(&job()).as_str()),
            ("POST", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/train/status/"),
            ("POST", "/apis/trainer.kubeflow.org/v1alpha1/namespaces//trainjobs/train/status"),
            ("POST", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/train"),
            ("POST", "/"),
        ] {
            assert_eq!(route(method, path), Route::Other, "{method} {path}");
        }
    }

    #[test]
    fn bearer_tokens_as_upstream_extracts_them() {
        assert!(authorized(Some(b"Bearer abc"), "abc"));
        assert!(authorized(Some(b"bearer abc"), "abc"));
        for bad in
            [&b"Bearer abd"[..], b"Bearer  abc", b"Bearer abc x", b"Basic abc", b"abc", b"Bearer ", b""]
        {
            assert!(!authorized(Some(bad), "abc"), "{}", String::from_utf8_lossy(bad));
        }
        assert!(!authorized(None, "abc"));
    }

    #[test]
    fn error_bodies_are_the_upstream_fixtures() {
        assert_eq!(
            Reply::forbidden().body.trim_end(),
            fixture("upstream-status-response.forbidden.json").trim_end()
        );
        assert_eq!(
            handle_update(
                &job(),
                &JobKey::new("team", "other"),
                fixture("upstream-status-request.kep-example.json").as_bytes()
            )
            .body
            .trim_end(),
            fixture("upstream-status-response.not-found.json").trim_end()
        );
        assert_eq!(
            Reply::payload_too_large().body,
            "{\"metadata\":{},\"status\":\"Failure\",\"message\":\"Payload too large\",\"reason\":\"RequestEntityTooLarge\",\"code\":413}\n"
        );
    }

    #[test]
    fn accepted_updates_are_echoed_as_go_stores_them() {
        let reply = post(&fixture("upstream-status-request.hf-callback-step.json"));
        assert_eq!(reply.status, 200, "{}", reply.body);
        let echo: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(echo["trainerStatus"]["lastUpdatedTime"], "2026-03-20T14:02:11Z");
        assert_eq!(echo["trainerStatus"]["metrics"][0], json!({"name": "loss", "value": "1.8412"}));
        assert_eq!(Some(&echo["trainerStatus"]), reply.accepted.as_ref());
        // Go struct order, not input order.
        assert!(reply.body.starts_with(
            "{\"trainerStatus\":{\"progressPercentage\":37,\"estimatedRemainingSeconds\":1284,\"metrics\":"
        ));
        for f in [
            "upstream-status-request.kep-example.json",
            "upstream-status-request.hf-callback-train-begin.json",
            "upstream-status-request.hf-callback-train-end.json",
        ] {
            assert_eq!(post(&fixture(f)).status, 200, "{f}");
        }
        let empty = post(&fixture("upstream-status-request.empty.json"));
        assert_eq!((empty.status, empty.body.as_str(), empty.accepted), (200, "{}\n", None));
        assert_eq!(post("null").status, 200);
        assert_eq!(
            post(r#"{"TRAINERSTATUS": {"lastUpdatedTime": "2026-03-20T14:02:11+01:00"}}"#).accepted,
            Some(json!({"lastUpdatedTime": "2026-03-20T13:02:11Z"}))
        );
        assert!(post(r#"{"trainerStatus":{"metrics":[{"name":"a<b","value":"1"}],"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#)
            .body
            .contains("a\\u003cb"));
    }

    #[test]
    fn what_go_cannot_decode_is_an_invalid_payload() {
        for body in [
            "invalid payload",
            "",
            "{}{}",
            "{} invalid payload",
            "{}]",
            "[]",
            "\"x\"",
            r#"{"trainerStatus": 5}"#,
            r#"{"trainerStatus": {"progressPercentage": 45.5}}"#,
            r#"{"trainerStatus": {"progressPercentage": 45.0}}"#,
            r#"{"trainerStatus": {"progressPercentage": 3000000000}}"#,
            r#"{"trainerStatus": {"progressPercentage": "45"}}"#,
            r#"{"trainerStatus": {"metrics": [{"name": "loss", "value": 0.5}]}}"#,
            r#"{"trainerStatus": {"metrics": {"loss": "0.5"}}}"#,
            r#"{"trainerStatus": {"lastUpdatedTime": "yesterday"}}"#,
            r#"{"trainerStatus": {"lastUpdatedTime": "2026-03-20 14:02:11Z"}}"#,
        ] {
            assert_eq!(post(body), Reply::invalid_payload(), "{body}");
        }
    }

    #[test]
    fn schema_violations_get_the_api_servers_words() {
        let reply = post(&fixture("upstream-status-request.invalid-progress.json"));
        assert_eq!(reply.status, 422);
        let status: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(
            status["message"],
            "TrainJob.trainer.kubeflow.org \"train\" is invalid: status.trainerStatus.progressPercentage: Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100"
        );
        let reply = post(
            r#"{"trainerStatus":{"progressPercentage":150,"estimatedRemainingSeconds":-3,"metrics":[{"name":"","value":"x"}],"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#,
        );
        let status: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(
            status["message"],
            "TrainJob.trainer.kubeflow.org \"train\" is invalid: [status.trainerStatus.estimatedRemainingSeconds: Invalid value: -3: trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0, status.trainerStatus.metrics[0].name: Invalid value: \"\": trainerStatus.metrics[0].name in body should be at least 1 chars long, status.trainerStatus.progressPercentage: Invalid value: 150: trainerStatus.progressPercentage in body should be less than or equal to 100]"
        );
        let reply = post(r#"{"trainerStatus":{"progressPercentage":101}}"#);
        let status: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(
            status["message"],
            "TrainJob.trainer.kubeflow.org \"train\" is invalid: [status.trainerStatus.progressPercentage: Invalid value: 101: trainerStatus.progressPercentage in body should be less than or equal to 100, status.trainerStatus: Invalid value: lastUpdatedTime is required when trainerStatus is present]"
        );
        let long = "1".repeat(65);
        let reply = post(&format!(
            r#"{{"trainerStatus":{{"metrics":[{{"name":"loss","value":"{long}"}}],"progressPercentage":101}}}}"#
        ));
        let status: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(
            status["message"],
            "TrainJob.trainer.kubeflow.org \"train\" is invalid: [status.trainerStatus.metrics[0].value: Too long: may not be more than 64 bytes, status.trainerStatus.progressPercentage: Invalid value: 101: trainerStatus.progressPercentage in body should be less than or equal to 100, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
        );
        let many: Vec<Value> = (0..257).map(|i| json!({"name": format!("m{i}"), "value": "1"})).collect();
        let reply = post(
            &json!({"trainerStatus": {"metrics": many, "lastUpdatedTime": "2026-03-20T14:02:11Z"}})
                .to_string(),
        );
        let status: Value = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(
            status["message"],
            "TrainJob.trainer.kubeflow.org \"train\" is invalid: [status.trainerStatus.metrics: Too many: 257: must have at most 256 items, <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]"
        );
        // A missing metric value decodes to "" in Go, so it is a length error, not "Required value".
        let reply = post(
            r#"{"trainerStatus":{"metrics":[{"name":"loss"}],"lastUpdatedTime":"2026-03-20T14:02:11Z"}}"#,
        );
        assert!(reply.body.contains("metrics[0].value: Invalid value: \\\"\\\": trainerStatus.metrics[0].value in body should be at least 1 chars long"), "{}", reply.body);
    }

    #[test]
    fn unknown_jobs_are_not_found_after_decoding() {
        let other = JobKey::new("team", "other");
        assert_eq!(handle_update(&job(), &other, b"{bad").status, 422);
        assert_eq!(handle_update(&job(), &other, b"{}").status, 200);
        assert_eq!(
            handle_update(&job(), &other, br#"{"trainerStatus":{"progressPercentage":150}}"#).status,
            404
        );
    }
}
