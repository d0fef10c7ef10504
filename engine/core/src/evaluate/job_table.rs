//! The evaluator's jobs: looked up by key once per call, then addressed by a stable id.
//!
//! A sample used to look its job up about six times on its way through the evaluator (create if new,
//! refresh the selection, record, evaluate, re-arm the timer), each a hash of the namespace and name and a
//! string comparison. Now the public entry points resolve the key to an id once and the steps take the id.
//! Timers carry the id too, so a job's timer moving does not copy its key.

use rustc_hash::FxHashMap;

use super::JobEntry;
use crate::input::sample::JobKey;

/// Jobs by key and by id. An id stays the job's until the job is removed; then it is reused.
#[derive(Default)]
pub(super) struct JobTable {
    ids: FxHashMap<JobKey, usize>,
    /// By id; `None` marks a free id. Kept apart from `entries` so a step can hold the key while it
    /// changes the entry (see [`JobTable::key_and_entry`]).
    keys: Vec<Option<JobKey>>,
    entries: Vec<Option<JobEntry>>,
    free: Vec<usize>,
}

impl JobTable {
    pub(super) fn id(&self, key: &JobKey) -> Option<usize> {
        self.ids.get(key).copied()
    }

    pub(super) fn get(&self, key: &JobKey) -> Option<&JobEntry> {
        self.by_id(self.id(key)?)
    }

    pub(super) fn get_mut(&mut self, key: &JobKey) -> Option<&mut JobEntry> {
        let id = self.id(key)?;
        self.entries.get_mut(id)?.as_mut()
    }

    pub(super) fn by_id(&self, id: usize) -> Option<&JobEntry> {
        self.entries.get(id)?.as_ref()
    }

    pub(super) fn key(&self, id: usize) -> Option<&JobKey> {
        self.keys.get(id)?.as_ref()
    }

    /// The job's key and its entry, to change the entry while naming the job in events.
    pub(super) fn key_and_entry(&mut self, id: usize) -> Option<(&JobKey, &mut JobEntry)> {
        Some((self.keys.get(id)?.as_ref()?, self.entries.get_mut(id)?.as_mut()?))
    }

    /// Adds a job that is not in the table, returning its id.
    pub(super) fn insert(&mut self, key: JobKey, entry: JobEntry) -> usize {
        debug_assert!(!self.ids.contains_key(&key), "{key} is in the table already");
        let id = match self.free.pop() {
            Some(id) => {
                self.keys[id] = Some(key.clone());
                self.entries[id] = Some(entry);
                id
            }
            None => {
                self.keys.push(Some(key.clone()));
                self.entries.push(Some(entry));
                self.keys.len() - 1
            }
        };
        self.ids.insert(key, id);
        id
    }

    /// Removes a job, returning the id it had and its entry.
    pub(super) fn remove(&mut self, key: &JobKey) -> Option<(usize, JobEntry)> {
        let id = self.ids.remove(key)?;
        self.keys[id] = None;
        let entry = self.entries[id].take()?;
        self.free.push(id);
        Some((id, entry))
    }

    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Every job, in id order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&JobKey, &JobEntry)> {
        self.keys.iter().zip(&self.entries).filter_map(|(k, e)| Some((k.as_ref()?, e.as_ref()?)))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&JobKey, &mut JobEntry)> {
        self.keys.iter().zip(&mut self.entries).filter_map(|(k, e)| Some((k.as_ref()?, e.as_mut()?)))
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &JobKey> {
        self.keys.iter().flatten()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &JobEntry> {
        self.entries.iter().flatten()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut JobEntry> {
        self.entries.iter_mut().flatten()
    }

    /// The ids of jobs matching `wanted`, in id order.
    pub(super) fn ids_where(&self, wanted: impl Fn(&JobEntry) -> bool) -> Vec<usize> {
        let matching = |(id, e): (usize, &Option<JobEntry>)| e.as_ref().filter(|e| wanted(e)).map(|_| id);
        self.entries.iter().enumerate().filter_map(matching).collect()
    }

    /// The keys of jobs matching `wanted`, sorted: the order in which batch steps judge jobs, so their
    /// events come out the same on every run.
    pub(super) fn sorted_keys(&self, wanted: impl Fn(&JobKey, &JobEntry) -> bool) -> Vec<JobKey> {
        let mut keys: Vec<JobKey> =
            self.iter().filter(|(k, e)| wanted(k, e)).map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Timestamp;

    fn job(name: &str) -> JobKey {
        JobKey::new("team", name)
    }

    fn table_of(names: &[&str]) -> JobTable {
        let mut table = JobTable::default();
        for name in names {
            table.insert(job(name), JobEntry::new(&job(name), Timestamp::UNIX_EPOCH));
        }
        table
    }

    #[test]
    fn a_job_is_found_by_key_and_by_id() {
        let table = table_of(&["a", "b"]);
        let id = table.id(&job("b")).expect("b is in the table");
        assert_eq!(table.key(id), Some(&job("b")));
        assert!(table.by_id(id).is_some());
        assert!(table.get(&job("c")).is_none());
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn a_removed_job_frees_its_id_for_the_next_one() {
        let mut table = table_of(&["a", "b", "c"]);
        let (freed, _) = table.remove(&job("b")).expect("b was in the table");
        assert!(table.key(freed).is_none() && table.by_id(freed).is_none());
        assert!(table.id(&job("b")).is_none());
        assert_eq!(table.insert(job("d"), JobEntry::new(&job("d"), Timestamp::UNIX_EPOCH)), freed);
        assert_eq!(table.key(freed), Some(&job("d")));
        assert_eq!(table.keys().count(), 3);
        assert!(table.remove(&job("b")).is_none(), "removed once");
    }

    #[test]
    fn batch_steps_see_jobs_in_key_order() {
        let mut table = table_of(&["c", "a", "d", "b"]);
        table.remove(&job("a"));
        table.insert(job("e"), JobEntry::new(&job("e"), Timestamp::UNIX_EPOCH));
        assert_eq!(table.sorted_keys(|_, _| true), vec![job("b"), job("c"), job("d"), job("e")]);
        assert_eq!(table.sorted_keys(|k, _| k.name != "c"), vec![job("b"), job("d"), job("e")]);
    }
}
