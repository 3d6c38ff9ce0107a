//! [`SplitMix64`]: a tiny deterministic generator for building key sets and orders before
//! any timing starts (no RNG runs inside a timed loop).

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

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// A uniform float in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// SplitMix64's finalizer: a bijection on `u64`, so distinct inputs give distinct outputs.
///
/// ```
/// assert_ne!(tollgate_bench::split_mix::mix(1), tollgate_bench::split_mix::mix(2));
/// ```
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
