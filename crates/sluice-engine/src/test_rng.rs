//! A seeded xorshift generator for the crate's randomized unit tests:
//! reproducible from the seed a failing assertion prints, and free of a
//! dependency.

/// xorshift64; seed it with an odd number (zero stays zero).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// The next raw 64 bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
