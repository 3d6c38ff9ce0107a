//! The stable hashes every layer shares: FNV-1a (64-bit), the same in every process, build
//! and platform, for what a fleet must agree on (an algorithm's version, a client's hash tag
//! on Redis, the `pk` a response names a partition by), and the splitmix64 finaliser, a
//! bijection for spreading indices into well-mixed constants. Neither is for hash tables
//! fed by clients (FNV is not keyed): the keyed tables use a seeded hasher of their own.

/// FNV-1a's 64-bit offset basis.
const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a (64-bit) written byte by byte, for a hash over several fields without gathering
/// them into one buffer.
///
/// ```
/// use tollgate_core::hash::{fnv1a, Fnv1a};
/// let mut h = Fnv1a::new();
/// h.write(b"acct");
/// h.write(b"_1");
/// assert_eq!(h.finish(), fnv1a(b"acct_1"));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Fnv1a(u64);

impl Fnv1a {
    /// The hash of nothing.
    #[inline]
    pub const fn new() -> Fnv1a {
        Fnv1a(OFFSET_BASIS)
    }

    /// Hashes `bytes` in, in order.
    #[inline]
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(PRIME);
        }
    }

    /// The hash of everything written so far.
    #[inline]
    pub const fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Fnv1a {
        Fnv1a::new()
    }
}

/// FNV-1a (64-bit) of `bytes`.
///
/// ```
/// use tollgate_core::hash::fnv1a;
/// // The published test vectors of FNV-1a 64.
/// assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
/// ```
#[inline]
pub const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = OFFSET_BASIS;
    let mut i = 0;
    while i < bytes.len() {
        hash = (hash ^ bytes[i] as u64).wrapping_mul(PRIME);
        i += 1;
    }
    hash
}

/// The splitmix64 finaliser of `x`: a bijection of `u64` whose every output bit depends on
/// every input bit (distinct inputs give distinct outputs).
///
/// ```
/// use tollgate_core::hash::splitmix64;
/// assert_eq!(splitmix64(0), 0);
/// assert_ne!(splitmix64(1), splitmix64(2));
/// ```
#[inline]
pub const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
