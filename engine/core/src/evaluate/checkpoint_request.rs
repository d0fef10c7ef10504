//! A checkpoint request's life (sdk/python/PROTOCOL.md): requested → acknowledged at a step, timed out, or
//! withdrawn because the job stopped running. Sans-IO like the rest of the
//! evaluator, so the controller (which keeps the [`RequestRecord`] on the TrainJob, the
//! [`CHECKPOINT_ANNOTATION`]) and `trainwarden watch` (which keeps it in memory) judge a request alike.
//!
//! The request id rule: strictly greater than every id used before for the job, `max(request time in Unix
//! ms, previous + 1)`; the previous id is part of the record, so a restarted or new leader continues the
//! sequence and does not repeat a request in flight (the record says it is pending).

use serde::{Deserialize, Serialize};

use crate::input::checkpoint_report::{MAX_EXACT_INTEGER, ReportedCheckpoint};
use crate::time::Timestamp;
use crate::units::duration::PolicyDuration;

/// The annotation that carries a pending request to the job's pods (read there through a downward-API
/// volume), and its local-mode file line.
pub const CHECKPOINT_REQUEST_ANNOTATION: &str = "trainwarden.dev/checkpoint-request";

/// The annotation on the TrainJob where the controller keeps its [`RequestRecord`]: the last id used, the
/// last request and its outcome.
pub const CHECKPOINT_ANNOTATION: &str = "trainwarden.dev/checkpoint";

/// A request's reason is cut to this many characters on the pods (the job only logs it).
pub const MAX_REASON_CHARS: usize = 512;

/// How many action intents may wait on one request (a firing issues at most 16 actions).
pub const MAX_WAITERS: usize = 16;

/// One checkpoint request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRequest {
    /// Its id (see the module's id rule).
    pub id: u64,
    /// Why, for people: the policy, rule and cause, or `kubectl trainwarden checkpoint`.
    pub reason: String,
    /// When it was written.
    pub requested_at: Timestamp,
    /// How long it may stay unanswered.
    pub timeout_seconds: u64,
    /// The action intents that wait on it (a `checkpoint`, or a `suspend` with `checkpointFirst`), in the
    /// order they asked, at most [`MAX_WAITERS`]; empty for a manual request. An intent that finds a request
    /// pending joins it instead of writing another one: at most one request per job is in flight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intents: Vec<String>,
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum RequestOutcome {
    /// The job reported a checkpoint answering it: at `step`, observed at `at`.
    Acknowledged {
        /// The step the checkpoint holds.
        step: u64,
        /// When trainwarden observed the acknowledgement.
        at: Timestamp,
    },
    /// No acknowledgement within its timeout.
    TimedOut {
        /// When the timeout was noticed.
        at: Timestamp,
    },
    /// The job stopped running (suspended, completed, failed) while it was pending.
    Withdrawn {
        /// When.
        at: Timestamp,
        /// What the job did, in words.
        why: String,
    },
}

impl RequestOutcome {
    /// When the request ended.
    pub fn at(&self) -> Timestamp {
        match self {
            RequestOutcome::Acknowledged { at, .. }
            | RequestOutcome::TimedOut { at }
            | RequestOutcome::Withdrawn { at, .. } => *at,
        }
    }

    /// The name in status, Events and metrics: `acknowledged`, `timed_out`, `withdrawn`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RequestOutcome::Acknowledged { .. } => "acknowledged",
            RequestOutcome::TimedOut { .. } => "timed_out",
            RequestOutcome::Withdrawn { .. } => "withdrawn",
        }
    }
}

impl CheckpointRequest {
    /// When it times out unless acknowledged first.
    pub fn deadline(&self) -> Timestamp {
        let timeout = PolicyDuration::from_secs(self.timeout_seconds).to_signed_duration();
        self.requested_at.checked_add(timeout).unwrap_or(Timestamp::MAX)
    }

    /// The value of [`CHECKPOINT_REQUEST_ANNOTATION`] the pods get: compact JSON with the id, the reason
    /// (cut to [`MAX_REASON_CHARS`], ending in `…` when cut) and `requestedAt` (RFC 3339, whole seconds, UTC).
    pub fn pod_annotation(&self) -> String {
        let reason = if self.reason.chars().count() > MAX_REASON_CHARS {
            let mut cut: String = self.reason.chars().take(MAX_REASON_CHARS - 1).collect();
            cut.push('…');
            cut
        } else {
            self.reason.clone()
        };
        let requested_at = Timestamp::from_second(self.requested_at.as_second()).unwrap_or(self.requested_at);
        serde_json::json!({"id": self.id, "reason": reason, "requestedAt": requested_at.to_string()})
            .to_string()
    }

    /// This request's outcome given the checkpoint the job's latest report names (`None`: it names none)
    /// and the time now; `None` while it is still pending. An acknowledgement counts first: one observed
    /// in the same step as the deadline is an acknowledgement.
    pub fn judge(&self, reported: Option<ReportedCheckpoint>, now: Timestamp) -> Option<RequestOutcome> {
        if let Some(r) = reported
            && r.request_id == self.id
        {
            return Some(RequestOutcome::Acknowledged { step: r.step, at: now });
        }
        (now >= self.deadline()).then_some(RequestOutcome::TimedOut { at: now })
    }
}

/// What the controller keeps on a TrainJob about its checkpoint requests ([`CHECKPOINT_ANNOTATION`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// The last id used for the job (0: none yet).
    pub last_id: u64,
    /// The last request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<CheckpointRequest>,
    /// How it ended; `None` while it is pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RequestOutcome>,
}

impl RequestRecord {
    /// Reads the annotation's text; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<RequestRecord, String> {
        let record: RequestRecord = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if record.last_id > MAX_EXACT_INTEGER {
            return Err(format!("lastId {} is above 2^53-1", record.last_id));
        }
        if let Some(r) = &record.request
            && (r.id == 0 || r.id > record.last_id)
        {
            return Err(format!("request id {} is not in 1..=lastId ({})", r.id, record.last_id));
        }
        Ok(record)
    }

    /// The annotation's text.
    pub fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The request in flight, if any.
    pub fn pending(&self) -> Option<&CheckpointRequest> {
        self.request.as_ref().filter(|_| self.outcome.is_none())
    }

    /// The id a request made at `now` gets: `max(now in Unix ms, last id + 1)`, at most 2^53−1.
    pub fn next_id(&self, now: Timestamp) -> u64 {
        let ms = u64::try_from(now.as_millisecond()).unwrap_or(0);
        ms.max(self.last_id.saturating_add(1)).min(MAX_EXACT_INTEGER)
    }

    /// Intent `intent` asks for a checkpoint at `now`: it joins the request in flight, if any (false), or
    /// a new request is recorded (true). Either way the pending request lists it. `intent` empty: a manual
    /// request, which waits for nothing.
    pub fn ask(&mut self, intent: &str, reason: String, timeout: PolicyDuration, now: Timestamp) -> bool {
        let new = self.pending().is_none();
        if new {
            let id = self.next_id(now);
            self.last_id = id;
            self.outcome = None;
            self.request = Some(CheckpointRequest {
                id,
                reason,
                requested_at: now,
                timeout_seconds: timeout.as_millis().div_ceil(1000).max(1),
                intents: Vec::new(),
            });
        }
        if let Some(r) = self.request.as_mut()
            && !intent.is_empty()
            && !r.intents.iter().any(|i| i == intent)
            && r.intents.len() < MAX_WAITERS
        {
            r.intents.push(intent.to_string());
        }
        new
    }

    /// The last request, if intent `intent` waits (or waited) on it.
    pub fn request_of(&self, intent: &str) -> Option<&CheckpointRequest> {
        self.request.as_ref().filter(|r| r.intents.iter().any(|i| i == intent))
    }

    /// Settles the pending request `id` with `outcome`; false (nothing changed) when `id` is not the one
    /// pending.
    pub fn settle(&mut self, id: u64, outcome: RequestOutcome) -> bool {
        if self.pending().is_some_and(|r| r.id == id) {
            self.outcome = Some(outcome);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    const TEN_MINUTES: PolicyDuration = PolicyDuration::from_secs(600);

    fn asked(record: &mut RequestRecord, intent: &str, at: Timestamp) -> CheckpointRequest {
        record.ask(intent, "policy ml/p, rule r: ETA passes the deadline".into(), TEN_MINUTES, at);
        record.request.clone().unwrap()
    }

    fn settle_pending(record: &mut RequestRecord, at: Timestamp) {
        let id = record.pending().unwrap().id;
        assert!(record.settle(id, RequestOutcome::TimedOut { at }));
    }

    #[test]
    fn ids_follow_the_clock_and_always_grow() {
        let mut record = RequestRecord::default();
        let first = asked(&mut record, "i-1", t(0));
        assert_eq!(first.id, 1_767_225_600_000);
        settle_pending(&mut record, t(0));
        // The same millisecond again, or a clock that went back: the next id still grows.
        let second = asked(&mut record, "i-2", t(0));
        assert_eq!(second.id, 1_767_225_600_001);
        let after_restart = RequestRecord::parse(&record.text()).unwrap();
        assert_eq!(
            after_restart.next_id(t(-3600)),
            1_767_225_600_002,
            "a restarted leader continues the sequence"
        );
        assert_eq!(after_restart.next_id(t(10)), 1_767_225_610_000);
    }

    #[test]
    fn an_intent_that_finds_a_request_in_flight_joins_it() {
        let mut record = RequestRecord::default();
        assert!(record.ask("i-1", "first".into(), TEN_MINUTES, t(0)));
        assert!(!record.ask("i-2", "second".into(), PolicyDuration::from_secs(60), t(5)));
        assert!(!record.ask("i-1", "first again".into(), TEN_MINUTES, t(6)), "asking twice changes nothing");
        assert!(!record.ask("", "kubectl trainwarden checkpoint".into(), TEN_MINUTES, t(7)));
        let r = record.pending().unwrap();
        assert_eq!((r.id, r.reason.as_str(), r.requested_at), (1_767_225_600_000, "first", t(0)));
        assert_eq!(r.intents, ["i-1", "i-2"]);
        assert_eq!(record.request_of("i-2").map(|r| r.id), Some(r.id));
        assert_eq!(record.request_of("i-3"), None);
        settle_pending(&mut record, t(600));
        assert!(record.ask("i-3", "third".into(), TEN_MINUTES, t(700)), "a settled request is not joined");
        assert_eq!(record.request_of("i-1"), None, "the record keeps the last request only");
    }

    #[test]
    fn only_the_pending_id_acknowledges_and_the_timeout_counts_from_the_request() {
        let mut record = RequestRecord::default();
        let r = asked(&mut record, "i-1", t(0));
        let ack = |id, step| Some(ReportedCheckpoint { step, request_id: id });
        assert_eq!(r.judge(None, t(599)), None);
        assert_eq!(r.judge(ack(0, 50), t(30)), None, "the job's own checkpoint answers nothing");
        assert_eq!(r.judge(ack(r.id - 1, 50), t(30)), None, "an older request's answer");
        assert_eq!(r.judge(ack(r.id + 1, 50), t(30)), None, "an id never written");
        assert_eq!(
            r.judge(ack(r.id, 420), t(42)),
            Some(RequestOutcome::Acknowledged { step: 420, at: t(42) })
        );
        assert_eq!(r.judge(None, t(600)), Some(RequestOutcome::TimedOut { at: t(600) }));
        assert_eq!(
            r.judge(ack(r.id, 7), t(900)),
            Some(RequestOutcome::Acknowledged { step: 7, at: t(900) }),
            "an acknowledgement seen with the deadline passed still counts as one"
        );
    }

    #[test]
    fn a_settled_request_stays_settled_and_survives_a_restart() {
        let mut record = RequestRecord::default();
        let r = asked(&mut record, "i-1", t(0));
        assert!(record.settle(r.id, RequestOutcome::Acknowledged { step: 4, at: t(40) }));
        assert!(!record.settle(r.id, RequestOutcome::TimedOut { at: t(600) }));
        assert_eq!(record.pending(), None);
        let back = RequestRecord::parse(&record.text()).unwrap();
        assert_eq!(back, record);
        assert_eq!(back.request_of("i-1").map(|r| r.id), Some(r.id));
        assert!(!record.settle(r.id + 1, RequestOutcome::TimedOut { at: t(601) }), "not the pending id");
    }

    #[test]
    fn the_pod_annotation_is_compact_json_with_a_cut_reason_and_whole_seconds() {
        let mut record = RequestRecord::default();
        let at = Timestamp::from_millisecond(1_767_225_600_123).unwrap();
        record.ask("i", "é".repeat(600), PolicyDuration::from_secs(60), at);
        let r = record.pending().unwrap();
        let v: serde_json::Value = serde_json::from_str(&r.pod_annotation()).unwrap();
        assert_eq!(v["id"], 1_767_225_600_123u64);
        assert_eq!(v["requestedAt"], "2026-01-01T00:00:00Z");
        let reason = v["reason"].as_str().unwrap();
        assert_eq!(reason.chars().count(), MAX_REASON_CHARS);
        assert!(reason.ends_with('…'));
    }

    #[test]
    fn a_record_that_does_not_hold_together_is_refused_with_the_reason() {
        assert!(RequestRecord::parse("not json").is_err());
        let e = RequestRecord::parse(
            r#"{"lastId":5,"request":{"id":9,"reason":"","requestedAt":"2026-01-01T00:00:00Z","timeoutSeconds":60}}"#,
        )
        .unwrap_err();
        assert!(e.contains("request id 9"), "{e}");
    }
}
