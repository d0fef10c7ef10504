//! `--stops FILE.jsonl`: stops decided outside trainwarden — a peer stopper (Ray Tune, Optuna, Keras,
//! SageMaker) run on the same corpus — judged exactly as a policy's suspensions are. One JSON object per
//! line, one per stop:
//!
//! ```json
//! {"job": "default/whisper-large-flemish", "time": "2026-10-03T08:29:43Z", "rule": "ray-plateau-default", "metric": "loss"}
//! ```
//!
//! * `job`: the run's TrainJob, `namespace/name`;
//! * `time`: RFC 3339, the report at which the stopper stopped the run (the stop takes effect then);
//! * `rule`: which stopper and setting; every distinct `rule` is scored as a policy of its own;
//! * `metric`: what it watched; the stop is judged on that metric (which way it improves is inferred from
//!   the name as for `mode: auto`, or given by an optional `mode`: `min` or `max`);
//! * optional `reason`: a sentence shown with the stop.
//!
//! Blank lines are skipped. Anything else — a line that is not an object, a missing or mistyped field, an
//! unknown key, a time that does not parse, the same rule stopping the same job twice — is an error naming
//! the file, the line and the field.

use std::collections::BTreeMap;

use crate::history::metric_series::Direction;
use crate::input::names::canonical_metric_name;
use crate::input::sample::JobKey;
use crate::time::Timestamp;

/// One stop read from a stops file.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalStop {
    /// The job it stopped.
    pub job: JobKey,
    /// When.
    pub at: Timestamp,
    /// The metric it watched (canonical name).
    pub metric: String,
    /// Which way the metric improves.
    pub direction: Direction,
    /// Its own words, if given.
    pub reason: Option<String>,
    /// `file:line`, for messages.
    pub origin: String,
}

/// The stops of one `rule`: scored like one policy with one rule.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalRule {
    /// The `rule` field.
    pub rule: String,
    /// The files its stops came from, for the report.
    pub sources: Vec<String>,
    /// Its stops by job.
    pub stops: BTreeMap<JobKey, ExternalStop>,
}

const KEYS: [&str; 6] = ["job", "time", "rule", "metric", "mode", "reason"];

/// Reads the stops of one file (`source` names it in messages) into `rules`, merging rules of the same
/// name across files. Every bad line is reported, each as `source:line: message`.
pub fn read_stops(text: &str, source: &str, rules: &mut Vec<ExternalRule>) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let origin = format!("{source}:{}", n + 1);
        match parse_stop(line, &origin) {
            Ok((rule, stop)) => {
                let i = match rules.iter().position(|r| r.rule == rule) {
                    Some(i) => i,
                    None => {
                        rules.push(ExternalRule {
                            rule: rule.clone(),
                            sources: Vec::new(),
                            stops: BTreeMap::new(),
                        });
                        rules.len() - 1
                    }
                };
                let entry = &mut rules[i];
                if !entry.sources.iter().any(|s| s == source) {
                    entry.sources.push(source.to_string());
                }
                if let Some(first) = entry.stops.get(&stop.job) {
                    errors.push(format!(
                        "{origin}: rule {rule:?} stops job {} a second time (first at {}); a stopped run cannot be stopped again",
                        stop.job, first.origin
                    ));
                    continue;
                }
                entry.stops.insert(stop.job.clone(), stop);
            }
            Err(e) => errors.push(format!("{origin}: {e}")),
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

fn parse_stop(line: &str, origin: &str) -> Result<(String, ExternalStop), String> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let serde_json::Value::Object(map) = value else {
        return Err("expected an object {\"job\", \"time\", \"rule\", \"metric\"}".into());
    };
    for key in map.keys() {
        if !KEYS.contains(&key.as_str()) {
            return Err(format!("unknown field {key:?}; the fields are {}", KEYS.join(", ")));
        }
    }
    let text = |key: &str| -> Result<&str, String> {
        match map.get(key) {
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Ok(s.as_str()),
            Some(serde_json::Value::String(_)) => Err(format!("{key}: must not be empty")),
            Some(other) => Err(format!("{key}: expected a string, got {other}")),
            None => Err(format!("{key}: required")),
        }
    };
    let job_text = text("job")?;
    let job =
        JobKey::parse(job_text).ok_or_else(|| format!("job: expected namespace/name, got {job_text:?}"))?;
    let time = text("time")?;
    let at: Timestamp = crate::time::parse_timestamp(time)
        .map_err(|e| format!("time: {time:?} is not an RFC 3339 time: {e}"))?;
    let rule = text("rule")?.to_string();
    let metric = canonical_metric_name(text("metric")?).into_owned();
    let direction = match map.get("mode") {
        None => Direction::infer(&metric),
        Some(serde_json::Value::String(m)) if m == "min" => Direction::Min,
        Some(serde_json::Value::String(m)) if m == "max" => Direction::Max,
        Some(other) => return Err(format!("mode: expected \"min\" or \"max\", got {other}")),
    };
    let reason = match map.get("reason") {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("reason: expected a string, got {other}")),
    };
    Ok((rule, ExternalStop { job, at, metric, direction, reason, origin: origin.to_string() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_are_grouped_by_rule() {
        let text = r#"{"job": "default/a", "time": "2026-10-03T08:29:43Z", "rule": "ray-plateau-default", "metric": "loss"}

{"job": "default/b", "time": "2026-10-03T09:00:00+02:00", "rule": "optuna-patient", "metric": "eval_accuracy", "reason": "patience 5"}
{"job": "default/b", "time": "2026-10-03T09:00:00Z", "rule": "ray-plateau-default", "metric": "trainMetrics.loss", "mode": "max"}
"#;
        let mut rules = Vec::new();
        read_stops(text, "peers.jsonl", &mut rules).unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].rule, "ray-plateau-default");
        assert_eq!(rules[0].stops.len(), 2);
        let b = &rules[0].stops[&JobKey::new("default", "b")];
        assert_eq!((b.metric.as_str(), b.direction), ("loss", Direction::Max));
        assert_eq!(b.origin, "peers.jsonl:4");
        let optuna = &rules[1].stops[&JobKey::new("default", "b")];
        assert_eq!(optuna.direction, Direction::Max, "inferred from the name");
        assert_eq!(optuna.at.to_string(), "2026-10-03T07:00:00Z");
        assert_eq!(optuna.reason.as_deref(), Some("patience 5"));
        // A second file adds to the same rules.
        read_stops(r#"{"job": "default/c", "time": "2026-10-03T08:00:00Z", "rule": "optuna-patient", "metric": "loss"}"#, "more.jsonl", &mut rules).unwrap();
        assert_eq!(rules[1].stops.len(), 2);
        assert_eq!(rules[1].sources, ["peers.jsonl", "more.jsonl"]);
    }

    #[test]
    fn every_bad_line_is_reported_with_its_file_line_and_field() {
        let text = r#"{"job": "default/a", "time": "2026-10-03T08:29:43Z", "rule": "r", "metric": "loss"}
[1, 2]
{"job": "a", "time": "2026-10-03T08:29:43Z", "rule": "r", "metric": "loss"}
{"job": "default/b", "time": "yesterday", "rule": "r", "metric": "loss"}
{"job": "default/b", "time": "2026-10-03T08:29:43Z", "rule": "r"}
{"job": "default/b", "time": "2026-10-03T08:29:43Z", "rule": "r", "metric": "loss", "step": 3}
{"job": "default/a", "time": "2026-10-03T09:29:43Z", "rule": "r", "metric": "loss"}
{"job": "default/b", "time": 5, "rule": "r", "metric": "loss", "mode": "up"}
{"job": "default/b",
"#;
        let mut rules = Vec::new();
        let errors = read_stops(text, "s.jsonl", &mut rules).unwrap_err();
        let expected = [
            "s.jsonl:2: expected an object",
            "s.jsonl:3: job: expected namespace/name, got \"a\"",
            "s.jsonl:4: time: \"yesterday\" is not an RFC 3339 time",
            "s.jsonl:5: metric: required",
            "s.jsonl:6: unknown field \"step\"",
            "s.jsonl:7: rule \"r\" stops job default/a a second time (first at s.jsonl:1)",
            "s.jsonl:8: time: expected a string, got 5",
            "s.jsonl:9: not JSON: EOF while parsing a value at line 1 column 20",
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (e, want) in errors.iter().zip(expected) {
            assert!(e.starts_with(want), "{e:?} should start with {want:?}");
        }
    }
}
