//! The deny cache's protocol ([`Denies`]; see "Deny cache" on [`RedisStore`]): which denied
//! checks are remembered, under what identity, for how long, what answers a check from
//! them, and what invalidates or forgets them.

use std::fmt::Write as _;

use arrayvec::ArrayVec;

use super::call::Call;
use super::RedisStore;
use crate::args::push_tier_identity;
use crate::deny_cache::{shift, DenyCache};
use crate::keys::{client_tag, key_tag, push_tier_key};
use crate::{RedisConfig, TimeSource};
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate::engine::hash::fnv1a;
use tollgate::policy::{Plan, PlannedTier, TierOutcome, MAX_TIERS};
use tollgate::{AnyAlgorithm, Decision, Nanos, PackedAlgorithm};

/// Invalidation stamps of a store's deny cache (keys share a stamp by their hash; 128 KiB
/// per store with the cache on, and as much for the latest deadline per stamp). A write to another key sharing a stamp invalidates a
/// cached deny needlessly, which costs one round trip: with `w` keys written per second by
/// this process, a deny of `k` keys survives about `16384 / (w·k)` seconds (80 s at 100
/// admitted checks of two tiers per second, 0.8 s at 10 000), against a hot client's
/// hundreds of checks per second.
const STAMPS: usize = 16_384;

/// A store's cached denies and what tells whether one still stands (see "Deny cache" on
/// [`RedisStore`]).
#[derive(Debug)]
pub(super) struct Denies {
    /// Denies of checks, answered locally until their retry time.
    cache: DenyCache<CachedDeny>,
    /// Invalidation stamps: slot `fnv1a(key) % STAMPS` holds the generation of the last
    /// refund or charge of a key mapped to it.
    stamps: Box<[AtomicU64]>,
    /// The invalidation generation: bumped by every refund and charge.
    generation: AtomicU64,
    /// Slot `fnv1a(key) % STAMPS`: the latest deadline (local ns, see
    /// [`RedisStore::cache_now`]) of a deny cached for a plan with a key mapped to it. A
    /// check whose first key's slot has passed has no deny in the cache (every key of a
    /// cached plan marks its slot before the deny is stored), so it skips building its
    /// identity and the cache's lock. Only a hint: a deny stored after the load that
    /// missed it costs a round trip.
    deny_until: Box<[AtomicU64]>,
    /// Bumped by every [`RedisStore::forget_denies`]: a deny whose check was sent before a
    /// forget is not cached (it may be one the forget was meant to drop).
    forgets: AtomicU64,
    /// [`RedisConfig::deny_cache_max_age`] in ns (saturated).
    max_age: u64,
}

/// What the deny cache remembers of a denied check.
#[derive(Debug)]
struct CachedDeny {
    /// The invalidation generation read before the request was sent.
    generation: u64,
    /// Each tier's decision as Redis gave it, in plan order.
    tiers: Box<[Decision]>,
}

/// A check's identity in the deny cache (see "Deny cache" on [`RedisStore`]).
pub(super) struct Identity {
    /// Each tier's key (length-prefixed), state tag and script parameters, and its cost if
    /// it differs from `cost`.
    text: String,
    /// The first tier's cost.
    cost: u32,
    /// Each tier's invalidation stamp.
    stamps: ArrayVec<usize, MAX_TIERS>,
}

impl Identity {
    /// The identity of a check of `plan` (its keys under `prefix`) in the deny cache: per
    /// tier, its key's length (16 hex digits) and the key, its state tag (which ends where
    /// its letter says) and script parameters, then `;` if its cost is the first tier's,
    /// else `=`, its cost in hex and `;`. Every part ends where the text says, so two plans
    /// never share an identity.
    pub(super) fn of(plan: &Plan<'_>, prefix: &str) -> Identity {
        let cost = plan.get(0).map_or(0, |p| p.cost);
        let mut text = String::with_capacity(plan.len() * 128);
        let mut stamps = ArrayVec::new();
        let mut key = String::with_capacity(64);
        for p in plan {
            key.clear();
            push_tier_key(&mut key, prefix, p);
            // Writing to a `String` cannot fail.
            let _ = write!(text, "{:016x}{key}", key.len());
            // A plan holds at most MAX_TIERS tiers: this never refuses.
            let _ = stamps.try_push(stamp_of(key.as_bytes()));
            push_tier_identity(&mut text, p.tier.algorithm());
            if p.cost == cost {
                text.push(';');
            } else {
                // Writing to a `String` cannot fail.
                let _ = write!(text, "={:x};", p.cost);
            }
        }
        Identity { text, cost, stamps }
    }
}

impl Denies {
    /// The cache `config` asks for ([`RedisConfig::deny_cache`] entries; none: disabled).
    pub(super) fn new(config: &RedisConfig) -> Denies {
        Denies {
            cache: DenyCache::new(config.deny_cache()),
            stamps: (0..if config.deny_cache() > 0 { STAMPS } else { 0 })
                .map(|_| AtomicU64::new(0))
                .collect(),
            generation: AtomicU64::new(0),
            deny_until: (0..if config.deny_cache() > 0 { STAMPS } else { 0 })
                .map(|_| AtomicU64::new(0))
                .collect(),
            forgets: AtomicU64::new(0),
            max_age: u64::try_from(config.deny_cache_max_age().as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// Whether the cache may hold anything.
    pub(super) fn enabled(&self) -> bool {
        self.cache.enabled()
    }

    /// Whether a deny cached for a plan whose first key is `key` may still stand at local
    /// `now` (see `deny_until`): if not, no deny in the cache answers it.
    pub(super) fn may_stand(&self, key: &str, now: u64) -> bool {
        // Relaxed: a hint (see `deny_until`); a deny this load misses costs a round trip.
        self.deny_until[stamp_of(key.as_bytes())].load(Ordering::Relaxed) > now
    }

    /// Answers the check `id` from a deny cached for it, at local `now`, into `outcomes`:
    /// whether one did.
    pub(super) fn find(&self, id: &Identity, now: u64, outcomes: &mut [TierOutcome]) -> bool {
        self.cache
            .find(&id.text, id.cost, now, |deny, sent| {
                self.answer(deny, id, sent, now, outcomes)
            })
            .is_some()
    }

    /// The invalidation generation and the forget count, read before a check is sent:
    /// what [`remember`](Self::remember) compares against when its deny comes back.
    pub(super) fn marks(&self) -> (u64, u64) {
        // Acquire: pairs with the AcqRel bump of `invalidate` (read before the round
        // trip, so a refund racing with it invalidates the deny it brings).
        let generation = self.generation.load(Ordering::Acquire);
        // Acquire: pairs with the AcqRel bump of `forget` (a forget during the round trip
        // keeps the deny it brings out of the cache).
        let forgets = self.forgets.load(Ordering::Acquire);
        (generation, forgets)
    }

    /// Writes the cached `deny` (for a request sent at `sent`) into `outcomes` as of
    /// `now`; `None` if a refund or charge of one of its keys has invalidated it.
    fn answer(
        &self,
        deny: &CachedDeny,
        id: &Identity,
        sent: u64,
        now: u64,
        outcomes: &mut [TierOutcome],
    ) -> Option<()> {
        let stamps = &self.stamps;
        for &slot in &id.stamps {
            // Acquire: pairs with the Release `fetch_max` of `invalidate`, so a lookup that
            // follows a refund sees its stamp.
            if stamps[slot].load(Ordering::Acquire) > deny.generation {
                return None;
            }
        }
        for (outcome, decision) in outcomes.iter_mut().zip(deny.tiers.iter()) {
            outcome.decision = shift(*decision, sent, now);
        }
        Some(())
    }

    /// Caches the deny now in `outcomes` of a check of `plan` sent at `sent`, after
    /// invalidation `generation` and forget `forgets` ([`marks`](Self::marks)): until the
    /// earliest retry time of its denying tiers, and for at most
    /// [`RedisConfig::deny_cache_max_age`].
    pub(super) fn remember(
        &self,
        plan: &Plan<'_>,
        id: &Identity,
        sent: u64,
        (generation, forgets): (u64, u64),
        outcomes: &[TierOutcome],
    ) {
        let decisions = || outcomes.iter().take(plan.len()).map(|o| &o.decision);
        // Durations reaching the end of time (near `u64::MAX` ns) are clipped, not instants
        // that shift: such a deny is not cached.
        let exact = |d: Nanos| {
            d == Nanos::ZERO || sent.checked_add(d.as_u64()).is_some_and(|t| t < u64::MAX)
        };
        if decisions().all(|d| d.allowed)
            || !decisions().all(|d| exact(d.retry_after) && exact(d.reset_after) && exact(d.delay))
        {
            return;
        }
        let lasts = plan
            .iter()
            .zip(decisions())
            .map(|(p, d)| lasts(p, d))
            .min()
            .unwrap_or(0);
        // Trusted for at most the configured age: what this process cannot see (a DEL, a
        // FLUSHALL, a restart) may have freed the key since.
        let deadline = sent.saturating_add(lasts.min(self.max_age));
        if deadline <= sent {
            return;
        }
        let tiers: Box<[Decision]> = decisions().copied().collect();
        for &slot in &id.stamps {
            // Relaxed: a hint (see `deny_until`).
            self.deny_until[slot].fetch_max(deadline, Ordering::Relaxed);
        }
        self.cache.put(
            &id.text,
            id.cost,
            sent,
            deadline,
            CachedDeny { generation, tiers },
            // Relaxed: under the shard's lock, which `forget_denies` takes after its bump.
            || self.forgets.load(Ordering::Relaxed) == forgets,
        );
    }

    /// [`RedisStore::forget_denies`].
    fn forget(&self, client: Option<&str>) -> usize {
        // AcqRel: a check that read the older value (Acquire, before its round trip) is
        // refused by `remember`'s comparison, under the shard lock taken below after this.
        self.forgets.fetch_add(1, Ordering::AcqRel);
        if !self.cache.enabled() {
            return 0;
        }
        let tag = client_tag(client);
        self.cache.forget(|identity| {
            identity_keys(identity).any(|key| key_tag(key) == Some(tag.as_str()))
        })
    }

    /// After this process wrote the keys of `calls` (an admitted check, a refund, a
    /// charge): invalidates the cached denies touching them (see "Deny cache" on
    /// [`RedisStore`]).
    pub(super) fn invalidate<'c>(&self, calls: impl IntoIterator<Item = &'c Call>) {
        if !self.cache.enabled() {
            return;
        }
        // AcqRel: a check that reads this generation or a later one (Acquire, before its
        // round trip) was sent after this write had its answer, so Redis' deny already
        // counts it; one that read an earlier generation is stamped below it.
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        for key in calls.into_iter().flat_map(Call::keys) {
            // Release: pairs with the Acquire load in `answer`.
            self.stamps[stamp_of(key.as_bytes())].fetch_max(generation, Ordering::Release);
        }
    }
}

impl RedisStore {
    /// The time frame of the deny cache at the policy's `now` (see "Deny cache" on
    /// [`RedisStore`]): the policy's clock when the script decides at it, the store's
    /// monotonic clock when the server's `TIME` decides.
    pub(super) fn cache_now(&self, now: Nanos) -> u64 {
        match self.shared.config.time_source() {
            TimeSource::Client => now.as_u64(),
            TimeSource::Server => self.shared.local_now(),
        }
    }

    /// Drops the cached denies of `client` (`None`: of the global rules' keys) at once, so
    /// that its next checks ask Redis: what a reset of the client's state (an operator's
    /// `DEL`, an admin API) calls after writing Redis. How many it dropped. A deny of the
    /// client whose check is in flight meanwhile is not cached (nor any other check's
    /// in flight during the call: they only cost one round trip more).
    ///
    /// Costs a pass over the whole cache (under each of its 16 shard locks in turn):
    /// for resets, not for every request.
    ///
    /// ```no_run
    /// # use tollgate_redis::{RedisConfig, RedisStore, RedisTarget};
    /// let store = RedisStore::new(RedisTarget::Single("redis://127.0.0.1:6379".into()), RedisConfig::new("api")?)?;
    /// // After deleting the client's keys in Redis:
    /// store.forget_denies(Some("customer-42"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forget_denies(&self, client: Option<&str>) -> usize {
        self.shared.denies.forget(client)
    }
}

/// How long tier `p`'s `decision` in a denied check stays exactly what Redis would answer
/// (its durations shortened by the time elapsed) if no other request touches the key; 0:
/// not at all, `u64::MAX`: for good. Every algorithm's state only improves with time, and
/// a tier admits a cost exactly when it is at most `remaining`, so:
///
/// - a denying tier denies until its `retry_after` (the earliest time the cost fits), and
///   its `remaining` holds until then if it cannot grow without making the cost fit
///   (`remaining + 1 ≥ cost`), or in a fixed window (which changes only at its end, the
///   retry time);
/// - an admitting tier (reported as it stands) holds while it is full (a bucket, sliding
///   window or log: `remaining` at the limit, and its `reset_after` runs down to 0 and stays
///   there), and a fixed window until its window ends (`reset_after`; for good if 0);
///   a bucket or sliding window that is not full refills at instants the decision does not
///   tell, so not at all.
fn lasts(p: &PlannedTier<'_>, decision: &Decision) -> u64 {
    let fixed = match p.tier.algorithm() {
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(_)) => true,
        AnyAlgorithm::Packed(
            PackedAlgorithm::Gcra(_)
            | PackedAlgorithm::TokenBucket(_)
            | PackedAlgorithm::LeakyBucket(_)
            | PackedAlgorithm::SlidingWindowCounter(_),
        )
        | AnyAlgorithm::Log(_) => false,
    };
    let reset = decision.reset_after.as_u64();
    if !decision.allowed {
        if fixed || decision.remaining.saturating_add(1) >= u64::from(p.cost) {
            decision.retry_after.as_u64()
        } else {
            0
        }
    } else if fixed {
        if reset == 0 {
            u64::MAX
        } else {
            reset
        }
    } else if decision.remaining >= decision.limit {
        u64::MAX
    } else {
        0
    }
}

/// The keys of a deny cache identity (see [`Identity::of`]): per tier, 16 hex
/// digits of length, the key, then its tag and parameters up to a `;`.
fn identity_keys(identity: &str) -> impl Iterator<Item = &str> {
    let mut rest = identity;
    std::iter::from_fn(move || {
        let len = usize::from_str_radix(rest.get(..16)?, 16).ok()?;
        let key = rest.get(16..16 + len)?;
        let after = rest.get(16 + len..)?;
        rest = &after[after.find(';')? + 1..];
        Some(key)
    })
}

/// The invalidation stamp of a Redis key.
// Truncation: the remainder is below STAMPS (16 384), so it fits a usize.
#[allow(clippy::cast_possible_truncation)]
fn stamp_of(key: &[u8]) -> usize {
    (fnv1a(key) % STAMPS as u64) as usize
}
