//! Which stopping actions a policy's totals (savings, action counts) include, by intent id, so that each is
//! counted once across restarts and hand-overs.
//!
//! An action is performed by one write and counted by a later one (the policy status, at most a beat
//! later). A replica that takes over can therefore find an action performed that the status it inherited
//! does or does not count: re-issued and found `already_done`, or found recorded on a TrainJob its rule no
//! longer fires for. The status lists the recent counted ones ([`CountedActions`]), so the next leader
//! counts exactly those it does not list: none twice (a firing re-issued after a hand-over because a
//! sibling action was still owed), none lost (a leader lost within its status interval after acting).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use trainwarden_core::Timestamp;
use trainwarden_kube::{COUNTED_ACTIONS_KEPT, CountedAction, CountedActions, MAX_COUNTED_ACTIONS};

/// The counted stopping actions of one policy issued after `since`, by intent id.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Counted {
    /// Actions issued at or before this are not listed; one found performed then is never counted.
    since: Timestamp,
    /// Intent id → when it was issued.
    ids: BTreeMap<String, Timestamp>,
}

impl Counted {
    /// Nothing counted yet; actions issued before `now` will not be counted when found.
    pub(super) fn starting(now: Timestamp) -> Self {
        Counted { since: now, ids: BTreeMap::new() }
    }

    /// What a status says is counted. A status without the list (written by a version before it) may count
    /// anything performed before `now`, so only what is issued later can be counted when found.
    pub(super) fn from_status(status: Option<&CountedActions>, now: Timestamp) -> Self {
        let Some(s) = status else { return Counted::starting(now) };
        Counted { since: s.since.0, ids: s.actions.iter().map(|a| (a.id.clone(), a.at.0)).collect() }
    }

    /// Whether an action issued at `at` and found performed must be counted now: it is not counted yet.
    pub(super) fn owes(&self, id: &str, at: Timestamp) -> bool {
        at > self.since && !self.ids.contains_key(id)
    }

    /// Whether `id` is listed as counted.
    pub(super) fn includes(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    /// Notes `id` (issued at `at`) as counted.
    pub(super) fn insert(&mut self, id: &str, at: Timestamp) {
        if at > self.since {
            self.ids.insert(id.to_string(), at);
        }
    }

    /// Drops what was issued more than [`COUNTED_ACTIONS_KEPT`] before `now`, and the oldest beyond
    /// [`MAX_COUNTED_ACTIONS`], moving `since` up to the newest dropped.
    pub(super) fn prune(&mut self, now: Timestamp) {
        let keep = jiff::SignedDuration::from_secs(COUNTED_ACTIONS_KEPT.as_secs() as i64);
        let horizon = now.checked_sub(keep).unwrap_or(Timestamp::MIN);
        let mut dropped: Vec<(String, Timestamp)> =
            self.ids.iter().filter(|(_, at)| **at <= horizon).map(|(id, at)| (id.clone(), *at)).collect();
        if self.ids.len() - dropped.len() > MAX_COUNTED_ACTIONS {
            let mut rest: Vec<(&String, &Timestamp)> =
                self.ids.iter().filter(|(_, at)| **at > horizon).collect();
            rest.sort_by_key(|(id, at)| (**at, (*id).clone()));
            let over = rest.len() - MAX_COUNTED_ACTIONS;
            dropped.extend(rest.into_iter().take(over).map(|(id, at)| (id.clone(), *at)));
        }
        for (id, at) in dropped {
            self.ids.remove(&id);
            self.since = self.since.max(at);
        }
        // Equal times: everything at `since` is unlisted, so nothing issued then is listed either.
        let since = self.since;
        self.ids.retain(|_, at| *at > since);
    }

    /// The status form (oldest first).
    pub(super) fn to_status(&self) -> CountedActions {
        let mut actions: Vec<CountedAction> =
            self.ids.iter().map(|(id, at)| CountedAction { id: id.clone(), at: Time(*at) }).collect();
        actions.sort_by(|a, b| (a.at.0, &a.id).cmp(&(b.at.0, &b.id)));
        CountedActions { since: Time(self.since), actions }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainwarden_testkit::fixtures::at_sec;

    #[test]
    fn an_action_is_owed_until_counted_and_never_when_issued_before_since() {
        let mut c = Counted::starting(at_sec(10));
        assert!(!c.owes("old", at_sec(5)), "issued before the list began: its status may count it");
        assert!(!c.owes("edge", at_sec(10)));
        assert!(c.owes("new", at_sec(11)));
        c.insert("new", at_sec(11));
        assert!(!c.owes("new", at_sec(11)) && c.includes("new"));
        // Round trip through the status.
        let back = Counted::from_status(Some(&c.to_status()), at_sec(99));
        assert_eq!(back, c);
        assert!(!back.owes("new", at_sec(11)) && back.owes("other", at_sec(12)));
    }

    #[test]
    fn a_status_without_the_list_counts_only_what_comes_after_it_was_read() {
        let c = Counted::from_status(None, at_sec(100));
        assert!(!c.owes("before-the-upgrade", at_sec(99)));
        assert!(c.owes("after", at_sec(101)));
    }

    #[test]
    fn pruning_keeps_an_hour_and_at_most_the_cap_and_moves_since_up() {
        let mut c = Counted::starting(at_sec(0));
        c.insert("a", at_sec(1));
        c.insert("b", at_sec(2));
        c.prune(at_sec(2 + 3600));
        assert!(!c.includes("a") && !c.includes("b"), "older than an hour");
        assert!(
            !c.owes("a", at_sec(1)) && !c.owes("b", at_sec(2)),
            "dropped, and not counted again when found"
        );
        assert!(c.owes("c", at_sec(3)));
        for i in 0..(MAX_COUNTED_ACTIONS as i64 + 10) {
            c.insert(&format!("x{i:04}"), at_sec(4000 + i));
        }
        c.prune(at_sec(4000));
        let status = c.to_status();
        assert_eq!(status.actions.len(), MAX_COUNTED_ACTIONS);
        assert_eq!(status.actions[0].id, "x0010", "the oldest dropped first");
        assert_eq!(status.since, Time(at_sec(4009)));
        assert!(!c.owes("x0003", at_sec(4003)), "dropped by the cap: never counted again");
    }
}
