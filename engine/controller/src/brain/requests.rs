//! Checkpoint requests as the brain follows them (sdk/python/PROTOCOL.md §4): each TrainJob's request record
//! (the executor's, read back from the TrainJob) beside the checkpoint its latest report names.
//!
//! - An intent waiting on a request (`checkpoint`, `suspend` with `checkpointFirst`: parked in the ledger
//!   until the request's deadline) is woken as soon as the job's report names the request's id, or the job
//!   stops running, so the executor settles it then and not at the deadline.
//! - A request no owed intent waits on (a manual `kubectl trainwarden checkpoint`, or one whose rule
//!   resolved while it waited) is settled by [`Work::Checkpoint`] once answered, timed out or withdrawn.
//! - While a request is pending, its pods are synced every [`SYNC_INTERVAL`], so pods created meanwhile (a
//!   JobSet restart) get it too.
//!
//! Only the leader sends work; every replica follows the records, so a new leader goes on from them (the
//! records say which request is in flight: it is never written again).

use std::collections::{HashMap, HashSet};

use trainwarden_core::{JobKey, JobPhase, ReportedCheckpoint, RequestRecord, Timestamp};

use crate::messages::{CheckpointWork, CheckpointWorkKind, Work};

/// How often the pods of a job with a pending request are synced (new pods get the request).
pub(super) const SYNC_INTERVAL: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);
/// How long a settle sent for a request waits for the record to show it before it is sent again.
pub(super) const SETTLE_RETRY: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// One job's request as the brain last saw it.
#[derive(Debug, Default)]
struct Followed {
    uid: Option<String>,
    record: Option<RequestRecord>,
    reported: Option<ReportedCheckpoint>,
    running: bool,
    /// When the pods were last synced and a settle last sent, for the pending request's id.
    synced: Option<(u64, Timestamp)>,
    settle_sent: Option<(u64, Timestamp)>,
}

/// Every job's checkpoint request (see the module).
#[derive(Debug, Default)]
pub(super) struct RequestBook {
    jobs: HashMap<JobKey, Followed>,
    /// The jobs whose record has a request pending: the only ones [`RequestBook::due`] looks at (a settled
    /// record stays on its TrainJob for good).
    pending: HashSet<JobKey>,
}

/// What [`RequestBook::read`] found changed for a job.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Seen {
    /// The pending request's id is now answered by the report, or the job stopped running: intents waiting
    /// on it are due now.
    pub(super) wake: bool,
}

impl RequestBook {
    /// A TrainJob as watched: its record, the checkpoint its latest report names, whether it runs.
    pub(super) fn read(
        &mut self,
        job: &JobKey,
        uid: Option<&str>,
        record: Option<&Result<RequestRecord, String>>,
        reported: Option<ReportedCheckpoint>,
        phase: JobPhase,
    ) -> Seen {
        let record = record.and_then(|r| r.as_ref().ok()).cloned();
        if record.is_none() && !self.jobs.contains_key(job) {
            return Seen::default();
        }
        let f = self.jobs.entry(job.clone()).or_default();
        f.uid = uid.map(str::to_string);
        let running = phase == JobPhase::Running;
        let pending = record.as_ref().and_then(RequestRecord::pending).map(|r| r.id);
        let answered = |rep: Option<ReportedCheckpoint>| {
            pending.is_some_and(|id| rep.is_some_and(|r| r.request_id == id))
        };
        let wake =
            pending.is_some() && ((answered(reported) && !answered(f.reported)) || (f.running && !running));
        f.record = record;
        f.reported = reported;
        f.running = running;
        if pending.is_some() {
            self.pending.insert(job.clone());
        } else {
            self.pending.remove(job);
        }
        Seen { wake }
    }

    /// The job is gone.
    pub(super) fn forget(&mut self, job: &JobKey) {
        self.jobs.remove(job);
        self.pending.remove(job);
    }

    /// The work due at `now` for pending requests (leader only; after every input and at ticks): pods to
    /// sync (at once for a request not synced yet, then every [`SYNC_INTERVAL`]), and requests without a
    /// live waiter to settle (`waited_on(job, intent ids)`: whether an owed intent waits on it).
    pub(super) fn due(
        &mut self,
        now: Timestamp,
        waited_on: impl Fn(&JobKey, &[String]) -> bool,
    ) -> Vec<Work> {
        let mut work = Vec::new();
        for job in &self.pending {
            let Some(f) = self.jobs.get_mut(job) else { continue };
            let Some(request) = f.record.as_ref().and_then(RequestRecord::pending) else { continue };
            let id = request.id;
            let settles =
                !f.running || f.reported.is_some_and(|r| r.request_id == id) || now >= request.deadline();
            let resent = |last: Option<(u64, Timestamp)>, every| {
                last.is_none_or(|(i, at)| i != id || at.checked_add(every).is_ok_and(|due| due <= now))
            };
            let kind = if settles && !waited_on(job, &request.intents) {
                resent(f.settle_sent, SETTLE_RETRY).then(|| {
                    f.settle_sent = Some((id, now));
                    CheckpointWorkKind::Settle
                })
            } else if f.running {
                resent(f.synced, SYNC_INTERVAL).then(|| {
                    f.synced = Some((id, now));
                    CheckpointWorkKind::SyncPods
                })
            } else {
                None
            };
            if let Some(kind) = kind {
                work.push(Work::Checkpoint(Box::new(CheckpointWork {
                    job: job.clone(),
                    uid: f.uid.clone(),
                    id,
                    kind,
                })));
            }
        }
        work
    }

    /// When [`RequestBook::due`] next has something to do (a pending request's next sync, settle retry or
    /// deadline); `None`: nothing pending.
    pub(super) fn next_due(&self) -> Option<Timestamp> {
        self.pending
            .iter()
            .filter_map(|job| {
                let f = self.jobs.get(job)?;
                let request = f.record.as_ref().and_then(RequestRecord::pending)?;
                let after = |last: Option<(u64, Timestamp)>, every: jiff::SignedDuration| match last {
                    Some((i, at)) if i == request.id => at.checked_add(every).ok(),
                    _ => None,
                };
                [Some(request.deadline()), after(f.synced, SYNC_INTERVAL), after(f.settle_sent, SETTLE_RETRY)]
                    .into_iter()
                    .flatten()
                    .min()
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use trainwarden_core::PolicyDuration;

    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    fn pending(intent: &str) -> RequestRecord {
        let mut r = RequestRecord::default();
        r.ask(intent, "policy ml/p (rule r): why".into(), PolicyDuration::from_secs(600), t(0));
        r
    }

    fn kinds(work: &[Work]) -> Vec<CheckpointWorkKind> {
        work.iter()
            .map(|w| match w {
                Work::Checkpoint(c) => c.kind,
                _ => panic!("only checkpoint work"),
            })
            .collect()
    }

    #[test]
    fn an_answer_or_a_stop_wakes_the_intents_waiting_once() {
        let job = JobKey::new("ml", "ft");
        let mut book = RequestBook::default();
        let record = Ok(pending("i-1"));
        let id = record.as_ref().unwrap().pending().unwrap().id;
        let own = ReportedCheckpoint { step: 10, request_id: 0 };
        let answer = ReportedCheckpoint { step: 42, request_id: id };
        assert_eq!(book.read(&job, None, Some(&record), Some(own), JobPhase::Running), Seen { wake: false });
        assert_eq!(
            book.read(&job, None, Some(&record), Some(answer), JobPhase::Running),
            Seen { wake: true }
        );
        assert_eq!(
            book.read(&job, None, Some(&record), Some(answer), JobPhase::Running),
            Seen { wake: false }
        );
        let other = JobKey::new("ml", "other");
        book.read(&other, None, Some(&record), None, JobPhase::Running);
        assert_eq!(book.read(&other, None, Some(&record), None, JobPhase::Suspended), Seen { wake: true });
        assert_eq!(
            book.read(&JobKey::new("ml", "none"), None, None, Some(answer), JobPhase::Running),
            Seen::default(),
            "a job without a record is not followed"
        );
    }

    #[test]
    fn pods_are_synced_while_pending_and_an_orphan_request_is_settled_once_due() {
        let job = JobKey::new("ml", "ft");
        let mut book = RequestBook::default();
        let record = Ok(pending("i-1"));
        book.read(&job, Some("u"), Some(&record), None, JobPhase::Running);
        let waited = |_: &JobKey, intents: &[String]| intents.iter().any(|i| i == "i-1");
        assert_eq!(kinds(&book.due(t(1), waited)), [CheckpointWorkKind::SyncPods]);
        assert!(book.due(t(2), waited).is_empty(), "synced a second ago");
        assert_eq!(book.next_due(), Some(t(31)));
        assert_eq!(kinds(&book.due(t(31), waited)), [CheckpointWorkKind::SyncPods]);
        // The waiting intent settles it at the deadline; nobody waiting: the book does.
        assert_eq!(kinds(&book.due(t(600), waited)), [CheckpointWorkKind::SyncPods]);
        let nobody = |_: &JobKey, _: &[String]| false;
        assert_eq!(kinds(&book.due(t(601), nobody)), [CheckpointWorkKind::Settle]);
        assert!(book.due(t(602), nobody).is_empty(), "sent; the record will show it");
        assert_eq!(kinds(&book.due(t(631), nobody)), [CheckpointWorkKind::Settle], "not shown: sent again");
        let mut settled = pending("i-1");
        let id = settled.pending().unwrap().id;
        settled.settle(id, trainwarden_core::RequestOutcome::TimedOut { at: t(631) });
        book.read(&job, Some("u"), Some(&Ok(settled)), None, JobPhase::Running);
        assert!(book.due(t(700), nobody).is_empty());
        assert_eq!(book.next_due(), None);
    }
}
