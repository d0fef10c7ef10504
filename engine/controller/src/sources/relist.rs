//! Re-lists: a watch that restarts (after a 410 Gone, an API server restart, a long disconnect) lists again
//! (`Init`, `InitApply`… `InitDone`) with no `Delete` for objects deleted while it was down; [`Relist`]
//! compares the keys and reports those as gone.

use std::collections::HashSet;
use std::hash::Hash;

/// The keys a watch has delivered, so that a re-list reports the objects deleted while the watch was down.
#[derive(Debug)]
pub struct Relist<K> {
    known: HashSet<K>,
    /// Keys listed so far by the re-list in progress.
    listing: Option<HashSet<K>>,
}

impl<K> Default for Relist<K> {
    fn default() -> Self {
        Relist { known: HashSet::new(), listing: None }
    }
}

impl<K: Eq + Hash + Clone> Relist<K> {
    /// A (re-)list starts (`Init`).
    pub fn started(&mut self) {
        self.listing = Some(HashSet::new());
    }

    /// An object was listed or changed (`InitApply`, `Apply`).
    pub fn seen(&mut self, key: &K) {
        if let Some(listing) = &mut self.listing {
            listing.insert(key.clone());
        }
        self.known.insert(key.clone());
    }

    /// An object's `Delete` event.
    pub fn deleted(&mut self, key: &K) {
        self.known.remove(key);
        if let Some(listing) = &mut self.listing {
            listing.remove(key);
        }
    }

    /// The list is complete (`InitDone`): the keys known before that it did not list, which are gone.
    pub fn done(&mut self) -> Vec<K> {
        let Some(listed) = self.listing.take() else { return Vec::new() };
        let gone = self.known.iter().filter(|k| !listed.contains(*k)).cloned().collect();
        self.known = listed;
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::Relist;

    #[test]
    fn a_relist_reports_the_keys_it_no_longer_lists() {
        let mut r = Relist::default();
        r.started();
        for k in ["a", "b", "c"] {
            r.seen(&k);
        }
        assert!(r.done().is_empty(), "the first list finds nothing gone");
        r.seen(&"d");
        r.deleted(&"c");
        // Re-list: b and d were deleted while the watch was down; e is new.
        r.started();
        r.seen(&"a");
        r.seen(&"e");
        let mut gone = r.done();
        gone.sort();
        assert_eq!(gone, vec!["b", "d"]);
        r.started();
        r.seen(&"a");
        r.seen(&"e");
        assert!(r.done().is_empty());
    }

    #[test]
    fn a_delete_during_the_relist_is_not_reported_twice() {
        let mut r = Relist::default();
        r.started();
        r.seen(&"a");
        r.seen(&"b");
        r.done();
        r.started();
        r.seen(&"a");
        r.deleted(&"a");
        assert_eq!(r.done(), vec!["b"]);
        assert!(r.done().is_empty(), "no list in progress: nothing");
    }
}
