//! Keyed rate limiting in bounded memory: [`KeyedLimiter`].
//!
//! # Sizing the capacity
//!
//! The capacity is the number of keys the limiter remembers at once. Keys beyond it are not
//! refused (unless you ask for [`WhenFull::Refuse`]): an entry is evicted to make room, and
//! evicting an *idle* entry (one whose state already equals a fresh key's) loses nothing.
//! So the capacity only has to cover the keys that are **being limited at the same time**:
//! roughly `arrival rate of distinct keys × the time a key's state takes to return to
//! fresh` (for GCRA, `burst × emission interval`; for a fixed window, one window).
//!
//! Example: 20 000 distinct clients per minute, limited at 100 per minute (a key recovers
//! within a minute) → about 20 000 limited keys at once; a capacity of 25 000 leaves
//! headroom, costs 25 000 × 19.2 B ≈ 480 KB, and a flood of a million spoofed keys cannot
//! grow that. It can push limited clients out (eviction weighs the entries in view, not
//! the whole shard: see "What eviction costs"), which the
//! [debt summary](KeyedLimiterBuilder::debt_summary) makes harmless.
//!
//! # How memory is bounded
//!
//! Everything is allocated by [`KeyedLimiterBuilder::build`]: `1.2 × capacity` slots of
//! 16 bytes (key identity + packed state) in 64-byte buckets, plus one small shard header per
//! insert lock. Nothing is allocated afterwards, whatever the key stream: integer keys and
//! fingerprinted keys are stored inside the slot (**19.2 bytes per key of capacity**, and at
//! most 256 KiB more where that fills whole huge pages: see "Sizing for speed";
//! [`KeyedLimiter::memory_bytes`] reports the exact figure), and exact mode for other key
//! types adds a pre-allocated cell of `size_of::<K>() + 4` bytes per slot (plus whatever heap
//! a stored key owns, e.g. a `String`'s bytes: up to one key per slot).
//! `len() ≤ capacity()` holds at every moment.
//!
//! The key quota is split between the shards (90 % of an even share each) and a shared pool
//! (the rest) that a shard draws on once its share is used, because hashing never spreads
//! keys perfectly evenly: a table holds its full capacity of distinct keys, not the quota of
//! its emptiest shard (with [`WhenFull::Refuse`], a shard that finds the pool spent also
//! moves another shard's unused share into it). A new key lives in one of two 4-slot buckets of its shard; when both
//! are full, entries are moved to their other bucket (cuckoo hashing, up to two moves) before
//! anything is evicted, so at 83 % slot occupancy a key practically always finds a place.
//!
//! # Sizing for speed
//!
//! A lookup reads one 64-byte cache line (two for the ~19 % of keys that live in their
//! second bucket at full capacity). A table that fits in the
//! CPU's L2 cache (about 50 000 keys per MB of L2) answers fastest; beyond the L3 cache every
//! lookup of a random key pays a memory miss, as any table would. Tables of 2 MiB and more
//! start on a 2 MiB boundary and, on Linux, ask for transparent huge pages (`madvise`), so
//! that a lookup does not add a page walk to the cache miss. A table of integer or
//! fingerprinted keys within 256 KiB of a whole number of huge pages gets the buckets that
//! fill them (from about 95 000 keys on: 100 000 keys take 2 MiB rather than 1.83 MiB, one
//! huge page, where the smaller table would be all in 4 KiB pages; a policy tier's table at
//! its default capacity is that one). Exact mode's tables keep their size: their key cells
//! would grow too.
//!
//! # What eviction costs
//!
//! Lookups of resident keys never evict and never lock. Only a **new** key in a full shard
//! pays: under the shard's lock it inspects its two candidate buckets (8 slots) and, when
//! they have room but the quota is spent, the next 16 slots under the shard's sweeping
//! hand, evicting every idle entry seen there. That is a bounded amount of work per insert
//! (≈ 24 state reads), amortised: a sweep that frees several idle entries pays for the next
//! inserts, and the hand moves on each time, so idle entries anywhere in the shard are found
//! within `slots per shard / 16` inserts. The victim, in order:
//!
//! 1. an idle entry (state equal to a fresh key's, so a compare-and-swap confirms nothing
//!    changed and eviction is lossless);
//! 2. with [`WhenFull::Evict`], the resident entry in view (the 8 candidate slots, plus the
//!    16 under the hand when the candidates have room) that **loses least**: smallest
//!    `reset_after` (closest to fresh), then most `remaining`. This is the rate-limiting
//!    analogue of LRU: a key that has not been seen for a while is the one that has recovered
//!    most, and it costs no write per lookup to track. A key hammering its limit has the
//!    largest `reset_after` and is the last to go.
//! 3. with [`WhenFull::Refuse`], nobody: the new key gets [`KeyedError::Full`]. Before
//!    refusing for want of quota (its shard's share and the pool spent), a shard takes an
//!    unused unit of another shard's share into the pool, so the quota refuses only at the
//!    capacity; full buckets (both of the key's, no one- or two-move path out) can refuse a
//!    key short of it, most often with many small shards (see [`WhenFull::Refuse`]).
//!
//! Without more, an entry evicted under pressure is forgotten: its key comes back fresh,
//! so a client that floods the table with other keys can launder its limit (as with
//! nginx's `limit_req` or Envoy's and HAProxy's tables). The opt-in
//! [debt summary](KeyedLimiterBuilder::debt_summary) (a fixed-size sketch, about 12 bytes
//! per debt it is sized for) keeps evicted debts, with a stated bound on the phantom debt
//! new keys may inherit from collisions.
//!
//! A small table (up to 13 keys in one shard: 16 slots) is seen whole by every eviction, so
//! the policy is then exact: the globally least-loss entry goes (see the crate's eviction
//! tests). [`KeyedLimiter::stats`] counts idle evictions, pressure evictions and refusals;
//! [`KeyedLimiter::evict_idle_at`] sweeps every idle entry out at once if you want `len()` to
//! show live keys only.
//!
//! # Key storage
//!
//! Integer keys (`u8`…`u64`, `i8`…`i64`, `usize`, `isize`, `char`, `Ipv4Addr`) are stored as
//! a seeded bijection of their value: exact, 8 bytes. Other keys are stored exactly (cloned
//! once, on insert) or, with [`KeyStorage::Fingerprint`], as a 64-bit hash (collision
//! probability in [`KeyStorage`]'s docs).
//!
//! ```
//! use tollgate::{Gcra, KeyedLimiter, Nanos, WhenFull};
//!
//! // 10 requests per second per client, bursts of 5, at most 100 000 clients remembered.
//! let limiter: KeyedLimiter<u64, Gcra> =
//!     KeyedLimiter::builder(Gcra::per_second(10).burst(5).build()?)
//!         .capacity(100_000)
//!         .when_full(WhenFull::Evict)
//!         .build()?;
//! let now = Nanos::from_secs(1);
//! let admitted = (0..10).filter(|_| limiter.check_at(&7, now).unwrap().allowed).count();
//! assert_eq!(admitted, 5);
//! // 19.2 bytes per client, rounded up to fill one 2 MiB huge page.
//! assert!(limiter.memory_bytes() <= 22 * limiter.capacity());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The public items are declared in these modules and re-exported at the crate root only
// (one path each); this module keeps the guide above and the crate-internal paths.
pub(crate) mod builder;
pub(crate) mod config;
mod debt_summary;
pub(crate) mod error;
mod key;
pub(crate) mod limiter;
#[cfg(tollgate_loom)]
pub(crate) mod loom_fault;
mod table;

pub(crate) use debt_summary::DebtSummary;
pub(crate) use table::{loss_of, Geometry, Judge, Loc, Mode, Seen, Table, Upsert};

pub(crate) use builder::{DefaultHashBuilder, KeyedLimiterBuilder, DEFAULT_CAPACITY};
pub(crate) use config::{KeyStorage, WhenFull};
pub(crate) use error::{KeyedBuildError, KeyedError};
pub(crate) use limiter::{KeyedLimiter, KeyedStats};
#[cfg(tollgate_loom)]
pub(crate) use loom_fault::LoomFault;
