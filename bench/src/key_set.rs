//! [`KeySet`]: `n` distinct keys and the access orders the keyed cases replay (round robin
//! and Zipf-skewed), all generated before timing.

use crate::{SplitMix64, Zipf};
use std::net::Ipv6Addr;
use tollgate::engine::hash::splitmix64;

/// `n` distinct `u64` keys (SplitMix64's bijective mixer over `0..n`, so they look random
/// to a hash table but never repeat), plus helpers deriving the other key types from them.
///
/// ```
/// use tollgate_bench::KeySet;
/// let keys = KeySet::new(100);
/// let mut sorted = keys.u64s().to_vec();
/// sorted.sort_unstable();
/// sorted.dedup();
/// assert_eq!(sorted.len(), 100);
/// assert_eq!(keys.round_robin(250).len(), 250);
/// assert!(keys.strings(24).iter().all(|s| s.len() == 24));
/// ```
#[derive(Clone, Debug)]
pub struct KeySet {
    keys: Vec<u64>,
}

impl KeySet {
    /// `n` distinct keys.
    pub fn new(n: usize) -> KeySet {
        KeySet::with_offset(n, 0)
    }

    /// `n` distinct keys disjoint from every other `KeySet` built with a different
    /// `offset` range (keys are `mix(offset..offset + n)`).
    pub fn with_offset(n: usize, offset: u64) -> KeySet {
        KeySet {
            keys: (0..n as u64).map(|i| splitmix64(offset + i)).collect(),
        }
    }

    /// The keys.
    pub fn u64s(&self) -> &[u64] {
        &self.keys
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// `len` accesses cycling through every key in turn.
    pub fn round_robin(&self, len: usize) -> Vec<u64> {
        self.keys.iter().copied().cycle().take(len).collect()
    }

    /// `len` accesses drawn from Zipf(`n`, `s`) over the keys (key 0 hottest).
    pub fn zipf(&self, len: usize, s: f64, seed: u64) -> Vec<u64> {
        let zipf = Zipf::new(self.keys.len(), s);
        let mut rng = SplitMix64::new(seed);
        (0..len).map(|_| self.keys[zipf.sample(&mut rng)]).collect()
    }

    /// The keys as IPv6 addresses (each u64 key spread over 128 bits).
    pub fn ipv6s(&self) -> Vec<Ipv6Addr> {
        self.keys
            .iter()
            .map(|&k| Ipv6Addr::from((u128::from(k) << 64) | u128::from(splitmix64(k))))
            .collect()
    }

    /// The keys as distinct `String`s of exactly `len ≥ 16` ASCII bytes (hex of the key,
    /// left-padded).
    pub fn strings(&self, len: usize) -> Vec<String> {
        self.keys
            .iter()
            .map(|&k| format!("{k:0>len$x}", len = len))
            .collect()
    }
}
