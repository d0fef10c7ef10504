//! The lines of one input that came earlier in time than a line above them, held until their turn: a ring
//! of time buckets over the reorder window ([`Buckets`]). A line goes to its bucket at the cost of a push;
//! a bucket is put in order once, when its first record is wanted, and then handed out from its end. So a
//! line that arrives out of order but within the window costs O(1) amortised (a bucket of whole-second
//! times written in job order is already in order, which the sort finds in one pass), where a binary heap
//! cost O(log n) moves of a whole record for each push and each pop (`BinaryHeap::pop` was the top of the
//! replay's profile on a stream written in job order within each round).
//!
//! The order is exactly the heap's: by time, then by line. Within an input, lines arrive in line order, so
//! a record put into the bucket being handed out goes after every record of the same time in it.

use std::collections::VecDeque;

use crate::time::Timestamp;

/// What the buckets hold: anything with a time and a line number that orders by `(time, line)`.
pub(crate) trait Timed: Ord {
    fn time(&self) -> Timestamp;
}

/// How many buckets the window is cut into, at most: enough that a bucket holds few distinct times (its sort
/// is then a pass), few enough that the ring of a long window stays small.
const BUCKETS_PER_WINDOW: i64 = 1024;

/// Records waiting out of line, by time bucket (see the module).
pub(crate) struct Buckets<T> {
    /// Whole seconds per bucket: at least one, more when the window is longer than 1,024 seconds.
    width: i64,
    /// The bucket number (time in seconds ÷ `width`, rounded down) of `ring[0]`.
    base: i64,
    /// The buckets from `base` on; only `ring[0]` may be in order (`front_sorted`), by descending
    /// `(time, line)`, so that its next record is its last.
    ring: VecDeque<Vec<T>>,
    front_sorted: bool,
    /// Records held, over every bucket.
    len: usize,
    /// Empty buckets kept for reuse, with their allocations.
    spare: Vec<Vec<T>>,
}

impl<T: Timed> Buckets<T> {
    /// Buckets for a reorder window of `window_secs` seconds.
    pub(crate) fn new(window_secs: i64) -> Self {
        let width = (window_secs.max(0) / BUCKETS_PER_WINDOW).max(1);
        Buckets { width, base: 0, ring: VecDeque::new(), front_sorted: false, len: 0, spare: Vec::new() }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn bucket_of(&self, time: Timestamp) -> i64 {
        time.as_second().div_euclid(self.width)
    }

    fn empty_bucket(&mut self) -> Vec<T> {
        self.spare.pop().unwrap_or_default()
    }

    pub(crate) fn push(&mut self, item: T) {
        let bucket = self.bucket_of(item.time());
        if self.len == 0 {
            // Everything handed out: start the ring at this bucket (the empty ones left are spares).
            while let Some(b) = self.ring.pop_front() {
                self.spare.push(b);
            }
            self.base = bucket;
            self.front_sorted = false;
        }
        if self.ring.is_empty() {
            let b = self.empty_bucket();
            self.ring.push_back(b);
        }
        while bucket < self.base {
            let b = self.empty_bucket();
            self.ring.push_front(b);
            self.base -= 1;
            self.front_sorted = false;
        }
        // Within the window the offset is at most the window's buckets and a few; a bucket number far out
        // (a clock gone wrong, within a huge window) costs empty buckets, never a wrong order.
        let offset = usize::try_from(bucket - self.base).unwrap_or(usize::MAX);
        while self.ring.len() <= offset {
            let b = self.empty_bucket();
            self.ring.push_back(b);
        }
        let target = &mut self.ring[offset];
        if offset == 0 && self.front_sorted {
            // The bucket being handed out, in descending order: the new record goes before (in the vector,
            // after) every record not later than it. Its line is the largest yet, so ties go after it.
            let at = target.partition_point(|held| *held > item);
            target.insert(at, item);
        } else {
            target.push(item);
        }
        self.len += 1;
    }

    /// The earliest record, put in order first if its bucket is not yet.
    pub(crate) fn peek(&mut self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        while self.ring.front().is_some_and(Vec::is_empty) {
            let b = self.ring.pop_front().expect("not empty");
            self.spare.push(b);
            self.base += 1;
            self.front_sorted = false;
        }
        let front = self.ring.front_mut().expect("len > 0: a bucket holds a record");
        if !self.front_sorted {
            // Stable and adaptive: a bucket of one time in line order is one descending run, reversed.
            front.sort_by(|a, b| b.cmp(a));
            self.front_sorted = true;
        }
        front.last()
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        self.peek()?;
        self.len -= 1;
        self.ring.front_mut().and_then(Vec::pop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
    struct Item(Timestamp, usize);

    impl Timed for Item {
        fn time(&self) -> Timestamp {
            self.0
        }
    }

    fn at(nanos: i64) -> Timestamp {
        Timestamp::from_nanosecond(i128::from(nanos)).unwrap()
    }

    /// Pushes and pops interleaved at random, against a sorted list: the buckets hand out exactly the
    /// smallest `(time, line)` each time, whatever the window, times before the epoch and sub-second ones.
    #[test]
    fn the_buckets_hand_out_what_a_sorted_list_would() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for window_secs in [0, 1, 300, 5000, 86_400 * 30] {
            let mut buckets = Buckets::new(window_secs);
            let mut model: Vec<Item> = Vec::new();
            let mut line = 0;
            let mut clock = -5_000_000_000i64;
            for _ in 0..20_000 {
                if next() % 3 != 0 {
                    line += 1;
                    clock += (next() % 2_000_000_000) as i64;
                    let spread = (window_secs.max(1) * 1_000_000_000) as u64;
                    let time = clock - (next() % spread) as i64;
                    // Ties: many records of one time (whole seconds), in line order.
                    let time = if next() % 2 == 0 { time - time.rem_euclid(1_000_000_000) } else { time };
                    buckets.push(Item(at(time), line));
                    model.push(Item(at(time), line));
                } else {
                    model.sort();
                    let expected = (!model.is_empty()).then(|| model.remove(0));
                    assert_eq!(buckets.peek(), expected.as_ref());
                    assert_eq!(buckets.pop(), expected);
                }
                assert_eq!(buckets.len(), model.len());
            }
            model.sort();
            for expected in model {
                assert_eq!(buckets.pop(), Some(expected));
            }
            assert_eq!(buckets.pop(), None);
        }
    }

    #[test]
    fn a_record_put_into_the_bucket_being_handed_out_takes_its_place() {
        let mut buckets = Buckets::new(300);
        buckets.push(Item(at(10_000_000_000), 1));
        buckets.push(Item(at(10_500_000_000), 2));
        assert_eq!(buckets.peek(), Some(&Item(at(10_000_000_000), 1)));
        buckets.push(Item(at(10_000_000_000), 3));
        buckets.push(Item(at(10_200_000_000), 4));
        buckets.push(Item(at(9_000_000_000), 5));
        let order: Vec<usize> = std::iter::from_fn(|| buckets.pop()).map(|i| i.1).collect();
        assert_eq!(order, vec![5, 1, 3, 4, 2]);
    }
}
