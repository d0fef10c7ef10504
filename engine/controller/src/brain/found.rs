//! Suspensions found recorded on TrainJobs (`trainwarden.dev/last-action`), for the hand-over count.
//!
//! A leader lost within its status interval after suspending a job leaves an action no status counts. A
//! live follower holds the same intent and finds it `already_done` when it leads; a replica that started
//! after the action (the lost one, restarted, winning the Lease) does not: the job is suspended, so its rule
//! does not fire again. Every replica therefore keeps the suspension each TrainJob records, and the one that
//! takes over counts those its inherited status does not (see [`super::counted`]).

use serde_json::Value;
use trainwarden_core::Timestamp;

/// A suspension a TrainJob's last-action record names.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct FoundSuspension {
    /// The intent id.
    pub(super) id: String,
    /// The policy as the record names it: `ProgressPolicy ns/name` or `ClusterProgressPolicy name`.
    pub(super) policy: String,
    pub(super) rule: String,
    /// When the intent was issued.
    pub(super) at: Timestamp,
    /// The GPU-hours (and dollars) the record says it frees.
    pub(super) gpu_hours: Option<f64>,
    pub(super) dollars: Option<f64>,
}

impl FoundSuspension {
    /// The suspension in a last-action record; `None` for another action or a record that does not read.
    pub(super) fn read(record: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(record).ok()?;
        if v.get("action")?.as_str()? != "suspend" {
            return None;
        }
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(FoundSuspension {
            id: text("id")?,
            policy: text("policy")?,
            rule: text("rule")?,
            at: v.get("at")?.as_str()?.parse().ok()?,
            gpu_hours: v.get("gpuHours").and_then(Value::as_f64).filter(|h| h.is_finite() && *h >= 0.0),
            dollars: v.get("dollars").and_then(Value::as_f64).filter(|d| d.is_finite()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspension_record_reads_and_other_records_do_not() {
        let record = r#"{"id":"i-1","action":"suspend","policy":"ProgressPolicy ml/stall","rule":"silent","reason":"r","at":"2026-10-02T22:03:00Z","gpuHours":38.25,"dollars":421.0}"#;
        let f = FoundSuspension::read(record).expect("reads");
        assert_eq!(
            (f.id.as_str(), f.policy.as_str(), f.rule.as_str()),
            ("i-1", "ProgressPolicy ml/stall", "silent")
        );
        assert_eq!((f.gpu_hours, f.dollars), (Some(38.25), Some(421.0)));
        assert_eq!(f.at, "2026-10-02T22:03:00Z".parse::<Timestamp>().unwrap());
        assert_eq!(FoundSuspension::read(&record.replace("\"suspend\"", "\"annotate\"")), None);
        assert_eq!(FoundSuspension::read(&record.replace("2026-10-02T22:03:00Z", "yesterday")), None);
        assert_eq!(FoundSuspension::read("not json"), None);
        let without_savings =
            FoundSuspension::read(&record.replace(",\"gpuHours\":38.25,\"dollars\":421.0", ""));
        assert_eq!(without_savings.map(|f| f.gpu_hours), Some(None));
    }
}
