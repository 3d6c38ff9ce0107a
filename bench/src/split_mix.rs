//! [`SplitMix64`]: a tiny deterministic generator for building key sets and orders before
//! any timing starts (no RNG runs inside a timed loop). Its mixer is the core's
//! [`splitmix64`] (the one owner of the project's hashes).

use tollgate::engine::hash::splitmix64;

/// Steele, Lea and Flood's SplitMix64: a 64-bit counter passed through a bijective mixer.
/// Deterministic for a seed, so every contender and every run sees the same keys.
///
/// ```
/// use tollgate_bench::SplitMix64;
/// let mut a = SplitMix64::new(1);
/// let mut b = SplitMix64::new(1);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.next_f64() < 1.0);
/// ```
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits: [`splitmix64`] of the next counter value (SplitMix64 seeded
    /// with the seed times its golden-ratio increment).
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(1);
        splitmix64(self.state)
    }

    /// A uniform float in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}
