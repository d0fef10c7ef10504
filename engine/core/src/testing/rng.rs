//! Deterministic pseudo-random numbers for the generated inputs of property and robustness tests
//! (xorshift64*), in every crate's tests: no dependency, and the same sequence on every machine, so a
//! failure repeats.

/// A generator seeded with its field (any non-zero value).
pub struct Rng(pub u64);

impl Rng {
    /// The next number of the sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// One of `items` (not empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn the_sequence_is_the_same_on_every_run_and_stays_in_range() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        let first: Vec<usize> = (0..1000).map(|_| a.below(10)).collect();
        assert_eq!(first, (0..1000).map(|_| b.below(10)).collect::<Vec<_>>());
        assert!(first.iter().all(|n| *n < 10));
        assert!((0..10).all(|d| first.contains(&d)), "every value in range comes up");
    }
}
