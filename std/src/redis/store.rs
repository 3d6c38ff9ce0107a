//! [`RedisStore`]: a [`Policy`](crate::policy::Policy)'s state in Redis or Redis Cluster, so
//! every process that runs the same rules on the same Redis shares the limits.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::pin;
use std::sync::{mpsc, Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use redis::Value;

use super::args::{arg, encode_algorithm, script_algorithm};
use super::clock::ServerClock;
use super::connection::Connection;
use super::deny_cache::{shift, DenyCache};
use super::fallback::{LocalOp, PlanFallback};
use super::stats::Counters;
use super::{
    BuildError, FailureCause, FailurePolicy, LuaScript, RedisConfig, RedisStats, RedisTarget,
    TimeSource,
};
use crate::policy::{AsyncStore, Partition, Plan, PlannedTier, Store, TierOutcome, MAX_TIERS};
use crate::sync::plain::{AtomicU64, Ordering};
use crate::{Algorithm, AnyAlgorithm, Decision, InsufficientCapacity, Nanos, PackedAlgorithm};
use tollgate_core::hash::fnv1a;

/// The most permits one request may charge a sliding-log tier (the policy's
/// [`MAX_LOG_COST`](crate::policy::MAX_LOG_COST), the same in every store).
pub use crate::policy::MAX_LOG_COST;

/// A [`Store`] in Redis or Redis Cluster: a [`Policy`](crate::policy::Policy) built from
/// the same rules runs on it unchanged, shared by every process on the same target and
/// prefix.
///
/// The policy matches rules and compiles a plan exactly as in-process; the store runs the
/// plan's tiers in `scripts/store.lua`, with one Lua file per algorithm's transition
/// (each the mirror of the core's `decide`, `refund` and `charge`; see the
/// [module docs](super) for the exact arithmetic).
///
/// ## Keys and round trips
///
/// A tier's state lives at `{prefix}:{rule}:{tier}:{{client}}` (rule and tier names with
/// `%`, `:`, `{` and `}` escaped as `%XX`). The client is the Redis Cluster hash tag, so all
/// per-client tiers of a check share one slot and run in **one round trip**, all or
/// nothing. A client that is empty, is `@` or contains `{` or `}` cannot be a tag by
/// itself; its tag is then `#` and its 64-bit fingerprint in hex, followed by `:` and the
/// client (see [`RedisConfig::redis_key`]).
///
/// Tiers of `per = "global"` rules have one key for all clients,
/// `{prefix}:{rule}:{tier}:{@}`: every global key shares the tag `@`, so all global tiers of
/// a check also run in one round trip. A check with both kinds takes **two round trips**:
/// the client's tiers first (a client over its own limit never touches the hot global keys),
/// then, if they admitted, the global tiers; if a global tier denies, the client's tiers get
/// their permits back by the core's refund (a second script call). Between the two calls,
/// another check of the same client may see those permits taken: the error is on the
/// strict side, never over a limit. Refund is exact for windows and logs, and for the
/// buckets unless the key drained to idle in between.
///
/// ## Versioned state: reloads and rolling deploys
///
/// Every stored state carries a tag naming the shape and parameters it was written under
/// (see the header of `scripts/store.lua`). A check that reads a state written under other
/// parameters or another algorithm converts it, in the script, by the mirror of the core's
/// [`PackedAlgorithm::rescale`](crate::PackedAlgorithm::rescale) (and the
/// [`used`](crate::Algorithm::used) / [`with_used`](crate::Algorithm::with_used) pair to and
/// from the sliding log): exactly the permits used are carried, not capped at a lowered
/// limit (so a rollback never grants them twice), never an error, never over the new
/// bound on top of what was used. A log keeps up to its
/// [`ceiling`](crate::SlidingWindowLog::ceiling) of entries and drops those out of the
/// window at every write, as the in-process store does, so the two answer identically
/// (`tests/redis_rollback.rs`). The conversion is computed on every read of an old state and written with the
/// next admitted request, so two processes running different rule versions on one key (a
/// rolling deploy) each read the other's writes through the same rule. Keys of a removed
/// rule or tier are never read again and expire by their TTL.
///
/// ## Key lifetime
///
/// A key's TTL runs to the instant its state is fresh again (the reset, rounded up to the
/// millisecond, plus 3 ms and [`RedisConfig::with_ttl_slack`]), with one exception: a GCRA
/// or token bucket key whose TAT, or a leaky bucket key whose drain time, is at least half
/// the tier's tolerance τ (horizon) ahead of now is given *headroom*. Time is cut into
/// quanta τ long (counted from the Unix epoch, or the client's instant 0), the key's TTL
/// runs to the end of its state's quantum, and its value is marked (a trailing `h`); a
/// later admitted check whose new state stays in that quantum only rewrites the state
/// (`SETRANGE`, about a third of a `SET` with `PX`). Such a key therefore outlives its reset
/// by less than τ (plus the margins), so memory is bounded by the keys active within the
/// last `reset + τ`; keys far below their limit keep the exact TTL. Decisions are the same
/// either way (a state in the past reads as fresh). A marked value reads as no state to
/// versions of this crate before the headroom (a rolling upgrade's mixed period may then
/// forget such a key once); this version reads theirs as before.
///
/// ## Time
///
/// By default the script reads the server's `TIME` ([`TimeSource::Server`]): one clock for
/// the fleet. With [`TimeSource::Client`] it uses the instant the policy passes (its clock,
/// Unix time by default); clients whose clocks disagree then disagree on windows (see
/// [`TimeSource`]).
///
/// ## Failures
///
/// A call that fails (connection, timeout, server error) answers by the configured
/// [`FailurePolicy`]: fail open (every tier admits, nothing recorded), fail closed (every
/// tier denies with the configured `retry_after`), or a fallback: each tier decided in
/// this process with `share` of its limit, in a bounded lock-free keyed table per tier
/// (the in-process store's tables, [`RedisConfig::with_fallback_keys`] keys each, built on
/// first use; charges during the outage count there too, refunds are not applied). A
/// tier the fallback cannot decide (its scaled rule or its table cannot be built) is
/// denied, never skipped ([`RedisStats::fallback_failures`]).
/// Failures are scoped to what failed: a
/// script error (a value of another type at one of the call's keys) answers that call
/// only; a timeout, a lost connection or a call refused as expired skips Redis for the
/// retry backoff, for every key on a single node, and on a cluster only for the hash tags
/// of the failed call's group (one of 64), so one slow master does not degrade the keys of
/// the others. Every failure is counted in [`RedisStats::degraded`], and the last one's
/// [`FailureCause`] is [`RedisStats::last_failure`].
///
/// ## Deadlines
///
/// A call that times out has been sent: it waits in the server's input buffer while the
/// server is stalled (paused, swapping, `SIGSTOP`, a long script of another client) and
/// runs when the server resumes, long after the failure policy answered its caller. So
/// every script call carries a **deadline** on the server's clock: the instant after
/// which the store will have given up on it, less a tenth of the timeout (time for the
/// answer to come back) and the uncertainty of the store's estimate of that clock. The
/// script reads `TIME` first and, past the deadline, changes nothing and answers
/// `TGEXPIRED` (the failure policy answers the call, as [`FailureCause::Expired`], if the
/// store still listens; [`RedisStats::expired`]). Checks, peeks, refunds, charges and
/// leases alike, by `FCALL` or `EVALSHA` / `EVAL`, on a single node or a cluster: a
/// refund that comes too late is dropped (its permits come back with the window or the
/// drain: the strict side), a charge that comes too late is not recorded in Redis (under
/// [`FailurePolicy::Fallback`] it was recorded locally instead: once, not twice).
///
/// The estimate: a `TIME` before the first call, again in the background every 5 s,
/// and before the next call after a refused one ([`RedisStats::clock_syncs`]); a sample
/// is kept only if it took at most a quarter of the timeout. Each call's deadline is its
/// start plus the upper bound of the offset between the clocks plus the timeout, less a
/// tenth of the timeout, twice the sample's uncertainty (its round trip) and 200 ppm of
/// the sample's age for drift, rounded down to a step of at most a twentieth of the
/// timeout (a power of two ms, so that calls sent close together share one argument the
/// script parses once): a call the server runs within about 85 % of the timeout is never
/// refused, one it runs later than nine tenths never changes anything. In a cluster the
/// sample comes from one master (the calling key's), so the masters' clocks must agree
/// to well within a tenth of the timeout, as NTP keeps them. Not covered: a call the
/// server ran in time whose answer was delayed past the timeout (the server stopped
/// between running it and writing its answer, or the connection broke): its effect
/// stands, though the failure policy answered. The [`LeasedStore`](super::LeasedStore)
/// follows its own lease calls to their outcome for that reason.
///
/// ## Deny cache
///
/// A client over its limit keeps asking; each of its checks would cost a round trip only
/// to hear the same deny. The store therefore remembers a deny Redis gave to a check
/// ([`RedisConfig::with_deny_cache`] entries; 0 disables it) and answers the same request
/// locally, without a round trip ([`RedisStats::deny_cache_hits`] counts these answers):
///
/// - **Identity.** The same request is the same plan: every tier's Redis key, its state
///   tag and the parameters the script is given (algorithm, limit, tolerance or horizon:
///   a reload to other parameters is another request and misses), and every tier's cost.
///   Keys are length-prefixed in the identity, so no two plans share one. It is built
///   only when a deny of the check's first key may still stand (a per-store table of the
///   latest deadline cached for keys of each hash slot says so): a check that no cached
///   deny can answer pays one atomic load, not the identity and the cache's lock.
/// - **Answer.** Each tier's decision as Redis gave it, its durations (`retry_after`,
///   `reset_after`, `delay`) shortened by the time elapsed since the request was sent.
/// - **Until when.** As long as that answer is exactly what Redis would give if no other
///   process touched the keys: an algorithm's state only improves with time, and a tier
///   admits a cost exactly when it is at most `remaining`. So a denying tier denies until
///   its `retry_after`, with the same `remaining` if that cannot grow without the cost
///   fitting (`remaining + 1 ≥ cost`, or a fixed window, which only changes at its end);
///   a tier that admitted (reported as it stands, the request not counted) keeps its
///   answer while it is full, or, for a fixed window, until its window ends. The entry
///   lasts until the earliest of these; a deny with a bucket or sliding tier that is
///   neither full nor about to pass (its `remaining` would change at instants the
///   decision does not tell) is not cached, nor one whose durations reach the end of time
///   (clipped, not instants). The deadline is measured from when the request was sent
///   (before the round trip; the script ran later), so an entry can only stop early, never
///   late; in the frame of the [`TimeSource`]: with [`TimeSource::Client`] the policy's
///   `now` (the instant the script decides at, so the retry time is exact on the policy's
///   clock); with [`TimeSource::Server`] the store's monotonic clock (the policy's clock may
///   be unrelated to the server's, whose retry time is a duration of real time). And for
///   at most [`RedisConfig::with_deny_cache_max_age`] (1 s by default): what this process
///   cannot see (an operator's `DEL` of the key, a `FLUSHALL`, a restarted server) may
///   have freed the key since, and a daily quota's deny would otherwise stand until
///   midnight. [`forget_denies`](RedisStore::forget_denies) drops a client's cached denies
///   at once (what a reset of its state calls).
/// - **What is cached.** Only denies in which every script call succeeded: never an answer
///   of the failure policy, never an admission. Peeks are not cached (a peek reports the
///   admitting tiers with the request counted, a denied check without).
/// - **Invalidation.** Everything this process writes to a key invalidates the cached
///   denies that touch it: an admitted check (the permits taken move other requests' retry
///   times and `remaining`), a [`refund`](Store::refund) (which can make a deny stale) and
///   a [`charge`](Store::charge). Each key maps to one of 16 384 invalidation stamps; a
///   deny remembers the invalidation generation read before its request was sent, and is
///   dropped when a stamp of one of its keys has moved past it since (a write racing with
///   the check's round trip included). Stamps shared by other keys only cost a round trip.
/// - **Bounds.** At most the configured number of identities, and 4 costs per identity;
///   when the cache is full of live denies, new ones are not cached.
///
/// What this process cannot see is another process's writes. Its admissions only make a cached deny truer (the
/// real retry time is later, `remaining` lower: the cache stops early and asks again). Its
/// refunds, and states written under another version of a tier (by a process running other
/// rules, or by this one before a reload: such a state is converted on every read, and
/// the converted view does not simply age), can make Redis admit before a cached deny
/// ends: for at most that deny's retry time, and at most the cache's max age, this
/// process then denies a request Redis would admit. The strict side, never over a limit; a store that must follow such writes
/// exactly runs without the cache, or with a short
/// [`max age`](RedisConfig::with_deny_cache_max_age).
///
/// ## Blocking
///
/// The store's methods block the calling thread until Redis answers (the policy's API is
/// synchronous): a plain thread drives the call itself on the store's own tokio runtime;
/// a tokio worker hands it to the store's I/O thread and waits (blocking that worker for
/// the round trip). Async code awaits instead ([`AsyncStore`], through
/// [`Policy::allow_async`](crate::policy::Policy::allow_async)): the calling task makes
/// the call and no thread waits.
///
/// ## Which runtime drives the connection
///
/// [`new`](Self::new) starts one I/O thread of its own (a one-worker tokio runtime), so the
/// store works from any thread, inside any runtime or none. An awaited check then crosses
/// to that thread and back for its round trip. A server on a multi-threaded tokio runtime
/// builds the store with [`on_runtime`](Self::on_runtime) instead: the connection lives on
/// the server's runtime, and an awaited check sends and receives on it, as a plain
/// `redis` client on that runtime would: no two thread wake-ups per round trip, which
/// wait for a CPU when the machine is busy (see docs/benchmarks.md, `redis_bench`).
///
/// ```no_run
/// use tollgate::policy::Policy;
/// use tollgate::MonotonicClock;
/// use tollgate::redis::{RedisConfig, RedisStore, RedisTarget};
/// let store = RedisStore::new(
///     RedisTarget::Single("redis://127.0.0.1:6379".into()),
///     RedisConfig::new("api")?,
/// )?;
/// let policy = Policy::from_toml(r#"
///     [[rules]]
///     name = "default"
///     limit = 100
///     window = "1m"
/// "#, MonotonicClock::new())?
/// .store(store);
/// let decision = policy.allow("customer-42", "/search", 1)?;
/// println!("allowed: {}", decision.allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RedisStore {
    shared: Arc<Shared>,
    /// The in-process fallback, under [`FailurePolicy::Fallback`].
    fallback: Option<PlanFallback>,
    /// Where the I/O runs; `None` only while dropping.
    runtime: Option<IoRuntime>,
}

/// The runtime that drives a store's connection, its timers and its reconnects.
#[derive(Debug)]
enum IoRuntime {
    /// The store's own, with one I/O thread ([`RedisStore::new`]).
    Own(tokio::runtime::Runtime),
    /// The application's multi-threaded runtime ([`RedisStore::on_runtime`]).
    Given(tokio::runtime::Handle),
}

impl IoRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        match self {
            IoRuntime::Own(runtime) => runtime.handle(),
            IoRuntime::Given(handle) => handle,
        }
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        // Without waiting for the I/O thread: a store may be dropped inside an async
        // context (a server's shutdown), where blocking on a runtime's shutdown panics.
        // A given runtime is the application's to shut down.
        if let Some(IoRuntime::Own(runtime)) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

#[derive(Debug)]
struct Shared {
    script: LuaScript,
    config: RedisConfig,
    connection: Connection,
    counters: Counters,
    epoch: Instant,
    /// Per group of hash tags (one group for a single node, [`BACKOFF_GROUPS`] for a
    /// cluster): local ns (since `epoch`) before which Redis is not tried again for the
    /// tags of that group; 0: no backoff.
    backoff_until: Box<[AtomicU64]>,
    /// Each [`Op`]'s mode argument ([`Shared::mode`]).
    modes: [String; 5],
    /// Denies of checks, answered locally until their retry time (see "Deny cache" on
    /// [`RedisStore`]).
    deny_cache: DenyCache<CachedDeny>,
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
    deny_max_age: u64,
    /// [`RedisConfig::timeout`] in ns.
    timeout_ns: u64,
    /// Deadlines are multiples of this many ms ([`deadline_quantum_ms`]).
    deadline_quantum_ms: u64,
    /// The estimate of the server's clock behind every call's deadline.
    clock: ServerClock,
}

/// How long a lease operation that timed out is still awaited for its answer (see
/// [`RedisStore::lease_op`]); a stall longer than this leaves its outcome unknown.
pub(crate) const SETTLE: Duration = Duration::from_secs(60);

/// Why a script call has no answer, and whether it may have run all the same.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Failure {
    cause: FailureCause,
    /// It may have reached the script (a timeout, a connection lost with it in flight):
    /// whether it changed anything is not known.
    maybe_ran: bool,
}

impl Failure {
    /// A failure before anything was sent (or that Redis answered: nothing ran).
    fn before(cause: FailureCause) -> Failure {
        Failure {
            cause,
            maybe_ran: false,
        }
    }

    /// The failure of a call that `error` ended.
    fn of(error: &redis::RedisError) -> Failure {
        let cause = FailureCause::of(error);
        Failure {
            cause,
            maybe_ran: match cause {
                FailureCause::Timeout => true,
                FailureCause::Connection => !error.is_connection_refusal(),
                FailureCause::Server
                | FailureCause::Backoff
                | FailureCause::Expired
                | FailureCause::FallbackUnavailable => false,
            },
        }
    }
}

/// A call's mode argument with its deadline, on the stack (no allocation): the operation's
/// mode ([`Shared::mode`]: its code and the TTL slack, at most 15 bytes), a space and the
/// deadline in ms (at most 20 digits).
struct ModeArg {
    bytes: [u8; 40],
    len: usize,
}

impl ModeArg {
    /// `mode`, a space and `deadline_ms` in decimal.
    fn new(mode: &str, deadline_ms: u64) -> ModeArg {
        let mut arg = ModeArg {
            bytes: [0; 40],
            len: 0,
        };
        let mode = &mode.as_bytes()[..mode.len().min(15)];
        arg.bytes[..mode.len()].copy_from_slice(mode);
        arg.bytes[mode.len()] = b' ';
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut value = deadline_ms;
        loop {
            i -= 1;
            digits[i] = b'0' + u8::try_from(value % 10).unwrap_or(0);
            value /= 10;
            if value == 0 {
                break;
            }
        }
        let start = mode.len() + 1;
        let end = start + digits.len() - i;
        arg.bytes[start..end].copy_from_slice(&digits[i..]);
        arg.len = end;
        arg
    }

    fn as_str(&self) -> &str {
        // A mode (ASCII: a letter and digits) and ASCII digits: always UTF-8.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

/// Invalidation stamps of a store's deny cache (keys share a stamp by their hash; 128 KiB
/// per store with the cache on, and as much for the latest deadline per stamp). A write to another key sharing a stamp invalidates a
/// cached deny needlessly, which costs one round trip: with `w` keys written per second by
/// this process, a deny of `k` keys survives about `16384 / (w·k)` seconds (80 s at 100
/// admitted checks of two tiers per second, 0.8 s at 10 000), against a hot client's
/// hundreds of checks per second.
const STAMPS: usize = 16_384;

/// What the deny cache remembers of a denied check.
#[derive(Debug)]
struct CachedDeny {
    /// The invalidation generation read before the request was sent.
    generation: u64,
    /// Each tier's decision as Redis gave it, in plan order.
    tiers: Box<[Decision]>,
}

/// A check's identity in the deny cache (see "Deny cache" on [`RedisStore`]).
struct Identity {
    /// Each tier's key (length-prefixed), state tag and script parameters, and its cost if
    /// it differs from `cost`.
    text: String,
    /// The first tier's cost.
    cost: u32,
    /// Each tier's invalidation stamp.
    stamps: [usize; MAX_TIERS],
    tiers: usize,
}

/// A script operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Op {
    /// Decide all, record all or nothing.
    Check,
    /// Decide all, record nothing.
    Peek,
    /// Decide all, record nothing, report admitting tiers at cost 0 (the request is denied
    /// elsewhere).
    PeekDenied,
    /// Give each tier's cost back.
    Refund,
    /// Record each tier's cost whatever the limits say.
    Charge,
}

impl Op {
    fn code(self) -> &'static str {
        match self {
            Op::Check => "c",
            Op::Peek => "p",
            Op::PeekDenied => "q",
            Op::Refund => "r",
            Op::Charge => "g",
        }
    }
}

/// How an operation makes its script calls.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Io {
    /// Blocking the calling thread until Redis answers (the [`Store`] methods).
    Blocking,
    /// Awaiting the answer in the caller's task, the connection driven by the store's
    /// runtime (the [`AsyncStore`] methods).
    Async,
}

/// The result of an operation made with [`Io::Blocking`]: every call in it blocks and
/// returns a ready value, so its future completes on the first poll (a second poll is
/// never needed; if one were, it would be polled again rather than lost).
pub(super) fn finish<F: Future>(operation: F) -> F::Output {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    static WAKER: OnceLock<Waker> = OnceLock::new();
    let waker = WAKER.get_or_init(|| Waker::from(Arc::new(Noop)));
    let mut cx = Context::from_waker(waker);
    let mut operation = pin!(operation);
    loop {
        if let Poll::Ready(output) = operation.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}

/// Backoff groups of a cluster store: a slow or unreachable master backs off the hash tags
/// of the groups whose checks failed, not every key.
const BACKOFF_GROUPS: usize = 64;

/// One script call: its keys and arguments, and which plan tiers it covers. Its texts lie
/// end to end in one buffer, so making a call allocates once.
#[derive(Clone)]
struct Call {
    /// FNV-1a of the call's hash tag (the client, or `@`): its backoff group.
    tag: u64,
    /// The keys, then the plan argument (the tiers' specs), then the client's time unless
    /// the server's is used (see `scripts/store.lua`); the mode, which
    /// [`RedisStore::call`] puts first, is not in it.
    text: String,
    /// Where each key ends in `text` (the first `len` entries).
    key_ends: [usize; MAX_TIERS],
    /// Where the plan argument ends in `text` (the client's time, if any, follows).
    spec_end: usize,
    /// The plan tiers the call covers, in order (the first `len` entries).
    tiers: [usize; MAX_TIERS],
    len: usize,
}

impl Call {
    /// A call with no tiers yet, of the backoff group `tag`.
    fn new(tag: u64) -> Call {
        Call {
            tag,
            text: String::with_capacity(160),
            key_ends: [0; MAX_TIERS],
            spec_end: 0,
            tiers: [0; MAX_TIERS],
            len: 0,
        }
    }

    /// The plan tiers it covers.
    fn tiers(&self) -> &[usize] {
        &self.tiers[..self.len]
    }

    /// Its keys, in order.
    fn keys(&self) -> impl Iterator<Item = &str> {
        let starts = core::iter::once(0).chain(self.key_ends[..self.len].iter().copied());
        starts
            .zip(&self.key_ends[..self.len])
            .map(|(start, &end)| &self.text[start..end])
    }

    /// Its keys and arguments as the script takes them, `mode` first (see
    /// `scripts/store.lua`; the deadline, which the sender appends to the mode, is not in
    /// it).
    fn script<'a>(&'a self, mode: &'a str) -> ScriptArgs<'a> {
        let mut keys = [""; MAX_TIERS];
        for (slot, key) in keys.iter_mut().zip(self.keys()) {
            *slot = key;
        }
        let keys_end = self.key_ends[..self.len].last().copied().unwrap_or(0);
        ScriptArgs {
            keys,
            keys_len: self.len,
            mode,
            plan: &self.text[keys_end..self.spec_end],
            time: &self.text[self.spec_end..],
        }
    }
}

/// A call's keys and arguments, borrowed from it (see [`Call::script`]).
struct ScriptArgs<'a> {
    keys: [&'a str; MAX_TIERS],
    keys_len: usize,
    mode: &'a str,
    plan: &'a str,
    /// The client's time, empty to use the server's.
    time: &'a str,
}

impl<'a> ScriptArgs<'a> {
    fn keys(&self) -> &[&'a str] {
        &self.keys[..self.keys_len]
    }

    /// The arguments with `mode` (the call's mode and deadline, see [`ModeArg`]) first:
    /// the mode, the plan, the client's time (if any).
    fn args<'m>(&self, mode: &'m str) -> ([&'m str; 3], usize)
    where
        'a: 'm,
    {
        (
            [mode, self.plan, self.time],
            if self.time.is_empty() { 2 } else { 3 },
        )
    }
}

/// Appends one tier's *spec* to a call's plan argument, which starts at `start` in `text`
/// (see `scripts/store.lua`), after a `;` if it is not the first: space-separated words, its algorithm's first encoded part, its
/// state tag, the most its window count holds, then the rest of the encoding. The script
/// parses a plan once and remembers it, so the tiers of a call cost one argument, read by
/// one table lookup.
fn push_tier_spec(text: &mut String, start: usize, algorithm: &AnyAlgorithm, cost: u32) {
    if text.len() > start {
        text.push(';');
    }
    with_cached(algorithm, Some(cost), |texts| text.push_str(&texts.spec));
}

/// Appends what the deny cache's identity says about a tier's algorithm: its state tag
/// ([`push_tag`]) and script parameters ([`push_params`]).
fn push_tier_identity(text: &mut String, algorithm: &AnyAlgorithm) {
    // Any cost's entry will do: the identity part has no cost in it.
    with_cached(algorithm, None, |texts| text.push_str(&texts.identity));
}

/// Runs `f` on the texts of `algorithm` at `cost` (any cost if `None`), from this thread's
/// cache (formatting and remembering them on a miss; at cost 1 for `None`, the commonest).
fn with_cached(algorithm: &AnyAlgorithm, cost: Option<u32>, f: impl FnOnce(&TierTexts)) {
    SPECS.with(|cache| {
        // Not reentrant: nothing below calls back into this function.
        let mut cache = cache.borrow_mut();
        let cache = &mut *cache;
        let hit = cache
            .entries
            .iter()
            .flatten()
            .find(|(a, c, _)| a == algorithm && cost.is_none_or(|cost| *c == cost));
        if let Some((_, _, texts)) = hit {
            f(texts);
            return;
        }
        let cost = cost.unwrap_or(1);
        let mut identity = String::with_capacity(64);
        push_tag(&mut identity, algorithm);
        push_params(&mut identity, algorithm);
        let texts = TierTexts {
            spec: tier_spec(algorithm, cost).into_boxed_str(),
            identity: identity.into_boxed_str(),
        };
        f(&texts);
        let slot = cache.next;
        cache.next = (slot + 1) % SPEC_CACHE;
        cache.entries[slot] = Some((*algorithm, cost, texts));
    });
}

/// How many (algorithm, cost) pairs each thread remembers (see [`SpecCache`]).
const SPEC_CACHE: usize = 8;

/// The texts a call and the deny cache write for one tier.
struct TierTexts {
    /// Its spec, at the cost it was made for ([`tier_spec`]).
    spec: Box<str>,
    /// Its tag and parameters, for the deny cache's identity (no cost in it).
    identity: Box<str>,
}

/// The tier texts this thread wrote last, with the algorithm and cost each was written
/// for: a pure cache of [`tier_spec`], [`push_tag`] and [`push_params`], which depend on
/// nothing else. A server checks the same few tiers at the same cost over and over, and
/// each text is half a dozen formatted numbers; the cache keeps them from being formatted
/// on every call. Replaced round robin.
#[derive(Default)]
struct SpecCache {
    entries: [Option<(AnyAlgorithm, u32, TierTexts)>; SPEC_CACHE],
    next: usize,
}

thread_local! {
    static SPECS: std::cell::RefCell<SpecCache> = std::cell::RefCell::default();
}

/// One tier's spec (see [`push_tier_spec`]).
fn tier_spec(algorithm: &AnyAlgorithm, cost: u32) -> String {
    let mut spec = String::with_capacity(80);
    let mut tag = String::with_capacity(33);
    let cmax = push_tag(&mut tag, algorithm);
    let mut encoded = Vec::with_capacity(6);
    encode_algorithm(algorithm, cost, &mut encoded);
    let mut parts = encoded.into_iter();
    spec.extend(parts.next());
    spec.push(' ');
    spec.push_str(&tag);
    spec.push(' ');
    spec.push_str(&arg(cmax));
    for part in parts {
        spec.push(' ');
        spec.push_str(&part);
    }
    spec
}

/// One tier of one key, owned (what a lease of [`LeasedStore`](super::LeasedStore) names
/// after the request that made the key hot is gone): its Redis key, backoff group and
/// algorithm.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TierKey {
    key: String,
    tag: u64,
    algorithm: AnyAlgorithm,
}

/// What became of a lease operation (see [`RedisStore::lease_op`]).
#[derive(Debug)]
pub(crate) enum LeaseReply {
    /// Redis ran it: its decision.
    Done(Decision),
    /// Redis did not run it, and never will.
    NotRun,
    /// No answer within the timeout: the outcome comes later.
    Pending(PendingLease),
    /// Whether Redis ran it is not known.
    Unknown,
}

/// A lease operation whose answer is still awaited (see [`RedisStore::lease_op`]).
#[derive(Debug)]
pub(crate) struct PendingLease {
    /// The outcome, and why the call failed if it did (counted when it came in time).
    rx: mpsc::Receiver<(LeaseReply, Option<FailureCause>)>,
}

impl PendingLease {
    /// Its outcome if it has one now: never [`LeaseReply::Pending`].
    pub(crate) fn settled(&self) -> Option<LeaseReply> {
        match self.rx.try_recv() {
            Ok((reply, _)) => Some(reply),
            Err(mpsc::TryRecvError::Empty) => None,
            // The task ended without an answer (its runtime shut down).
            Err(mpsc::TryRecvError::Disconnected) => Some(LeaseReply::Unknown),
        }
    }

    /// Its outcome, waiting at most `wait`: [`LeaseReply::Unknown`] if there is none by then.
    pub(crate) fn wait(&self, wait: Duration) -> LeaseReply {
        self.rx
            .recv_timeout(wait)
            .map_or(LeaseReply::Unknown, |(reply, _)| reply)
    }
}

/// What a single-tier operation of [`RedisStore::lease_op`] does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseOp {
    /// Take `cost` permits as a check of that cost would (all or nothing).
    Take,
    /// Give `cost` permits back (the core's refund).
    Return,
}

/// Appends the state tag of `algorithm` (the shape a conversion needs, see
/// `scripts/store.lua`: a letter, then 16 or 32 hex digits, so it ends where its letter
/// says) and returns the most a state counts: a window's full packed count in the core's
/// layout ([`FixedWindow::max_count`](crate::FixedWindow::max_count)), a log's
/// [`ceiling`](crate::SlidingWindowLog::ceiling), where a charge or a conversion
/// saturates; 0 for the others.
fn push_tag(out: &mut String, algorithm: &AnyAlgorithm) -> u64 {
    // Writing to a `String` cannot fail.
    let (letter, a, b, cmax) = match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => ('t', g.emission_interval(), None, 0),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => {
            ('t', t.refill_interval(), None, 0)
        }
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => ('t', l.drain_interval(), None, 0),
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(w)) => {
            ('f', w.window(), Some(w.limit()), w.max_count())
        }
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(w)) => {
            ('c', w.window(), Some(w.limit()), w.max_count())
        }
        AnyAlgorithm::Log(l) => ('l', l.window(), Some(l.limit()), l.ceiling()),
    };
    let _ = write!(out, "{letter}{:016x}", a.as_u64());
    if let Some(b) = b {
        let _ = write!(out, "{b:016x}");
    }
    cmax
}

/// Appends what, besides its state tag, decides a tier's answer in the script: the
/// algorithm's script name, its limit, and its tolerance (GCRA, token bucket) or horizon
/// (leaky bucket), which a bucket's tag does not name.
fn push_params(out: &mut String, algorithm: &AnyAlgorithm) {
    let extra = match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => g.tolerance(),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => t.as_gcra().tolerance(),
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => l.horizon(),
        AnyAlgorithm::Packed(
            PackedAlgorithm::FixedWindow(_) | PackedAlgorithm::SlidingWindowCounter(_),
        )
        | AnyAlgorithm::Log(_) => Nanos::ZERO,
    };
    // Writing to a `String` cannot fail.
    let _ = write!(
        out,
        "/{}/{:x}/{:x}",
        script_algorithm(algorithm),
        algorithm.limit(),
        extra.as_u64()
    );
}

/// Appends `name` with `%`, `:`, `{` and `}` escaped, so key parts cannot run together.
fn push_escaped(key: &mut String, name: &str) {
    // The common case, a name with nothing to escape, in one copy.
    if !name.contains(['%', ':', '{', '}']) {
        key.push_str(name);
        return;
    }
    for c in name.chars() {
        match c {
            // Writing to a `String` cannot fail.
            '%' | ':' | '{' | '}' => {
                let _ = write!(key, "%{:02X}", c as u32);
            }
            c => key.push(c),
        }
    }
}

/// Appends the Redis key of `tier` of `rule` for `client` under `prefix` to `key` (see
/// [`RedisConfig::redis_key`]).
pub(crate) fn push_key(
    key: &mut String,
    prefix: &str,
    rule: &str,
    tier: &str,
    client: Option<&str>,
) {
    key.push_str(prefix);
    key.push(':');
    push_escaped(key, rule);
    key.push(':');
    push_escaped(key, tier);
    key.push(':');
    match client {
        None => key.push_str("{@}"),
        // `@` is the global rules' tag: a client of that name is hashed, so it never shares
        // a key with the global state of a rule that a reload made per-client.
        Some(c) if !c.is_empty() && c != "@" && !c.contains(['{', '}']) => {
            key.push('{');
            key.push_str(c);
            key.push('}');
        }
        Some(c) => {
            // Writing to a `String` cannot fail.
            let _ = write!(key, "{{#{:016x}}}:", fnv1a(c.as_bytes()));
            key.push_str(c);
        }
    }
}

/// Writes the per-tier decisions of a check or peek reply into `out` (`None` if malformed).
fn decode_into(limits: &[u64], reply: &Value, out: &mut [Decision]) -> Option<()> {
    super::reply::decode_into(limits, reply, out)
}

impl RedisStore {
    /// A store on `target` with `config` (its prefix names the keys). Touches no network:
    /// the connection is made by the first check, and a store built while Redis is down
    /// works (by the failure policy) and recovers by itself. A setting out of its range
    /// is a [`BuildError`] ([`RedisConfig::validate`]).
    pub fn new(target: RedisTarget, config: RedisConfig) -> Result<RedisStore, BuildError> {
        let runtime = super::connection::io_runtime("tollgate-redis-store")?;
        RedisStore::build(target, config, IoRuntime::Own(runtime))
    }

    /// A store like [`new`](Self::new)'s whose I/O runs on `runtime`, the application's
    /// multi-threaded tokio runtime, instead of a thread of its own. An awaited check
    /// ([`Policy::allow_async`](crate::policy::Policy::allow_async), the HTTP layer's
    /// [`awaited`](crate::http::RateLimitLayer::awaited) mode) from a task on that runtime
    /// then sends and receives on the task's own runtime: no hand-off to the store's thread
    /// and back (two thread wake-ups per round trip, which on a busy machine wait for a
    /// CPU). Blocking checks keep working from any thread.
    ///
    /// The runtime must enable I/O and time (as `#[tokio::main]` does) and outlive the
    /// store's use: once it shuts down, checks fail over to the
    /// [`FailurePolicy`](super::FailurePolicy). A current-thread runtime is refused
    /// ([`BuildError::CurrentThreadRuntime`]): it drives I/O only while its own thread
    /// runs it, so a check blocking another thread on it could wait forever.
    ///
    /// ```no_run
    /// use tollgate::policy::Policy;
    /// use tollgate::MonotonicClock;
    /// use tollgate::redis::{RedisConfig, RedisStore, RedisTarget};
    ///
    /// #[tokio::main]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     let store = RedisStore::on_runtime(
    ///         RedisTarget::Single("redis://127.0.0.1:6379".into()),
    ///         RedisConfig::new("api")?,
    ///         tokio::runtime::Handle::current(),
    ///     )?;
    ///     let policy = Policy::from_toml(r#"
    ///         [[rules]]
    ///         name = "default"
    ///         limit = 100
    ///         window = "1m"
    ///     "#, MonotonicClock::new())?
    ///     .store(store);
    ///     println!("allowed: {}", policy.allow_async("customer-42", "/", 1).await?.allowed());
    ///     Ok(())
    /// }
    /// ```
    pub fn on_runtime(
        target: RedisTarget,
        config: RedisConfig,
        runtime: tokio::runtime::Handle,
    ) -> Result<RedisStore, BuildError> {
        if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread {
            return Err(BuildError::CurrentThreadRuntime);
        }
        RedisStore::build(target, config, IoRuntime::Given(runtime))
    }

    fn build(
        target: RedisTarget,
        config: RedisConfig,
        runtime: IoRuntime,
    ) -> Result<RedisStore, BuildError> {
        config.validate()?;
        let fallback = match config.failure_policy() {
            FailurePolicy::Fallback { share } => {
                // A tier the fallback cannot decide denies until Redis is tried again.
                let retry =
                    Nanos::from_duration(config.retry_backoff().max(Duration::from_millis(1)));
                Some(PlanFallback::new(share, config.fallback_keys(), retry)?)
            }
            FailurePolicy::FailOpen | FailurePolicy::FailClosed { .. } => None,
        };
        Ok(RedisStore {
            shared: Arc::new(Shared {
                script: LuaScript::for_store(),
                connection: Connection::new(&target, &config)?,
                counters: Counters::default(),
                epoch: Instant::now(),
                backoff_until: (0..match target {
                    RedisTarget::Single(_) => 1,
                    RedisTarget::Cluster(_) => BACKOFF_GROUPS,
                })
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                // In the order of `Op`'s variants, which `mode` indexes by.
                modes: [Op::Check, Op::Peek, Op::PeekDenied, Op::Refund, Op::Charge]
                    .map(|op| format!("{}{}", op.code(), config.ttl_slack_ms())),
                deny_cache: DenyCache::new(config.deny_cache()),
                stamps: (0..if config.deny_cache() > 0 { STAMPS } else { 0 })
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                generation: AtomicU64::new(0),
                deny_until: (0..if config.deny_cache() > 0 { STAMPS } else { 0 })
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                forgets: AtomicU64::new(0),
                deny_max_age: u64::try_from(config.deny_cache_max_age().as_nanos())
                    .unwrap_or(u64::MAX),
                // Validated: at most an hour.
                timeout_ns: u64::try_from(config.timeout().as_nanos()).unwrap_or(u64::MAX),
                deadline_quantum_ms: deadline_quantum_ms(config.timeout()),
                clock: ServerClock::default(),
                config,
            }),
            runtime: Some(runtime),
            fallback,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &RedisConfig {
        &self.shared.config
    }

    /// The script every operation runs.
    pub fn script(&self) -> &LuaScript {
        &self.shared.script
    }

    /// Counters since construction (`decisions`: checks and peeks; `round_trips`: script
    /// calls, two for a check with client and global tiers; `deny_cache_hits`: checks
    /// answered by the deny cache, without a round trip).
    pub fn stats(&self) -> RedisStats {
        self.shared.counters.snapshot()
    }

    /// The Redis key holding `tier` of `rule` for `client` (`None`: the rule is global):
    /// [`RedisConfig::redis_key`] of the store's configuration.
    pub fn redis_key(&self, rule: &str, tier: &str, client: Option<&str>) -> String {
        self.shared.config.redis_key(rule, tier, client)
    }

    /// The calls `plan` needs (any operation: [`run`](Self::run) adds the mode): client
    /// tiers, then global tiers (each group one slot), each with the tier indices it covers.
    fn calls(&self, plan: &Plan<'_>, now: Nanos) -> [Option<Call>; 2] {
        let client_time = self.shared.config.time_source() == TimeSource::Client;
        // Built in place (a call is a few hundred bytes: not moved around).
        let mut calls = [None, None];
        for (slot, global) in calls.iter_mut().zip([false, true]) {
            for (i, p) in plan.iter().enumerate() {
                if (p.rule.partition() == Partition::Global) != global {
                    continue;
                }
                let call = slot.get_or_insert_with(|| {
                    Call::new(if global {
                        fnv1a(b"@")
                    } else {
                        fnv1a(p.client.as_bytes())
                    })
                });
                if call.len == MAX_TIERS {
                    // A plan holds at most MAX_TIERS tiers.
                    break;
                }
                self.push_key_of(&mut call.text, p);
                call.key_ends[call.len] = call.text.len();
                call.tiers[call.len] = i;
                call.len += 1;
            }
            let Some(call) = slot else { continue };
            // The specs after the keys, in the same order.
            let keys_end = call.text.len();
            for &i in &call.tiers[..call.len] {
                if let Some(p) = plan.get(i) {
                    push_tier_spec(&mut call.text, keys_end, p.tier.algorithm(), p.cost);
                }
            }
            call.spec_end = call.text.len();
            if client_time {
                // Writing to a `String` cannot fail.
                let _ = write!(call.text, "{:016x}", now.as_u64());
            }
        }
        calls
    }

    /// Tier `p` of its key, owned (see [`TierKey`]).
    pub(crate) fn tier_key(&self, p: &PlannedTier<'_>) -> TierKey {
        TierKey {
            key: self.key_of(p),
            tag: match p.rule.partition() {
                Partition::Global => fnv1a(b"@"),
                Partition::Client => fnv1a(p.client.as_bytes()),
            },
            algorithm: *p.tier.algorithm(),
        }
    }

    /// Runs `op` of `cost` permits on one tier at `now` (the instant a client time source
    /// decides at), waiting at most the configured timeout for Redis (the failure policy is
    /// *not* applied: a lease is only what Redis granted):
    ///
    /// - [`LeaseReply::Done`]: Redis ran it: its decision (for a [`LeaseOp::Return`], the
    ///   refund's own reply is not a decision: an admitting one at the limit);
    /// - [`LeaseReply::NotRun`]: Redis did not run it and never will (not sent during a
    ///   backoff, refused as expired, answered by an error);
    /// - [`LeaseReply::Pending`]: no answer in time. The call goes on (in a task of the
    ///   store's runtime, for up to [`SETTLE`]) and its outcome comes later: it either ran
    ///   in time on the server and its answer was late, or it reached the script past its
    ///   deadline and changed nothing. Nothing Redis records is left unaccounted;
    /// - [`LeaseReply::Unknown`]: whether it ran is not known (the connection failed with it
    ///   in flight).
    pub(crate) fn lease_op(
        &self,
        tier: &TierKey,
        cost: u32,
        now: Nanos,
        op: LeaseOp,
    ) -> LeaseReply {
        let shared = &self.shared;
        let op = match op {
            LeaseOp::Take => Op::Check,
            LeaseOp::Return => Op::Refund,
        };
        let mut call = Call::new(tier.tag);
        call.text.push_str(&tier.key);
        call.key_ends[0] = call.text.len();
        call.len = 1;
        push_tier_spec(&mut call.text, tier.key.len(), &tier.algorithm, cost);
        call.spec_end = call.text.len();
        if shared.config.time_source() == TimeSource::Client {
            // Writing to a `String` cannot fail.
            let _ = write!(call.text, "{:016x}", now.as_u64());
        }
        if shared.backing_off(call.tag) {
            return LeaseReply::NotRun;
        }
        let Some(runtime) = self.runtime.as_ref() else {
            return LeaseReply::NotRun;
        };
        let limit = tier.algorithm.limit();
        let (tx, rx) = mpsc::sync_channel(1);
        let task = Arc::clone(shared);
        let tag = call.tag;
        runtime.handle().spawn(async move {
            let script = call.script(task.mode(op));
            let result = task.eval_for(&script, SETTLE).await;
            let cause = result.as_ref().err().map(|f| f.cause);
            let reply = match result {
                Ok(reply) => {
                    let decision = match op {
                        Op::Refund => Some(Decision::allow(limit, limit, Nanos::ZERO)),
                        _ => {
                            let mut decision = [Decision::allow(0, 0, Nanos::ZERO)];
                            decode_into(&[limit], &reply, &mut decision).map(|()| decision[0])
                        }
                    };
                    match decision {
                        Some(decision) => {
                            Counters::bump(&task.counters.redis_decisions);
                            if op == Op::Refund || decision.allowed {
                                task.invalidate([&call]);
                            }
                            LeaseReply::Done(decision)
                        }
                        // The script ran and answered something else: what it did is not
                        // known.
                        None => LeaseReply::Unknown,
                    }
                }
                Err(failure) if failure.maybe_ran => LeaseReply::Unknown,
                Err(_) => LeaseReply::NotRun,
            };
            // The receiver is gone only if the lease thread stopped waiting for good.
            let _ = tx.send((reply, cause));
        });
        match rx.recv_timeout(shared.config.timeout()) {
            Ok((reply, cause)) => {
                if let Some(cause) = cause {
                    shared.failed(tag, cause);
                }
                reply
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                shared.failed(tag, FailureCause::Timeout);
                LeaseReply::Pending(PendingLease { rx })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                shared.failed(tag, FailureCause::Connection);
                LeaseReply::Unknown
            }
        }
    }

    fn key_of(&self, p: &PlannedTier<'_>) -> String {
        let mut key = String::with_capacity(64);
        self.push_key_of(&mut key, p);
        key
    }

    /// Appends the Redis key of `p` to `out`.
    fn push_key_of(&self, out: &mut String, p: &PlannedTier<'_>) {
        let client = match p.rule.partition() {
            Partition::Global => None,
            Partition::Client => Some(p.client),
        };
        push_key(
            out,
            self.shared.config.prefix(),
            p.rule.name(),
            p.tier.name(),
            client,
        );
    }

    /// The identity of a check of `plan` in the deny cache: per tier, its key's length (16
    /// hex digits) and the key, its state tag (which ends where its letter says) and script
    /// parameters, then `;` if its cost is the first tier's, else `=`, its cost in hex and
    /// `;`. Every part ends where the text says, so two plans never share an identity.
    fn identity(&self, plan: &Plan<'_>) -> Identity {
        let cost = plan.get(0).map_or(0, |p| p.cost);
        let mut text = String::with_capacity(plan.len() * 128);
        let mut stamps = [0; MAX_TIERS];
        let mut key = String::with_capacity(64);
        for (i, p) in plan.iter().enumerate() {
            key.clear();
            self.push_key_of(&mut key, p);
            // Writing to a `String` cannot fail.
            let _ = write!(text, "{:016x}{key}", key.len());
            if let Some(slot) = stamps.get_mut(i) {
                *slot = stamp_of(key.as_bytes());
            }
            push_tier_identity(&mut text, p.tier.algorithm());
            if p.cost == cost {
                text.push(';');
            } else {
                // Writing to a `String` cannot fail.
                let _ = write!(text, "={:x};", p.cost);
            }
        }
        Identity {
            text,
            cost,
            stamps,
            tiers: plan.len().min(MAX_TIERS),
        }
    }

    /// The time frame of the deny cache at the policy's `now` (see "Deny cache" on
    /// [`RedisStore`]): the policy's clock when the script decides at it, the store's
    /// monotonic clock when the server's `TIME` decides.
    fn cache_now(&self, now: Nanos) -> u64 {
        match self.shared.config.time_source() {
            TimeSource::Client => now.as_u64(),
            TimeSource::Server => self.shared.local_now(),
        }
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
        let stamps = &self.shared.stamps;
        for &slot in &id.stamps[..id.tiers] {
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
    /// invalidation `generation` and forget `forgets`: until the earliest retry time of
    /// its denying tiers, and for at most [`RedisConfig::deny_cache_max_age`].
    fn remember(
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
        let deadline = sent.saturating_add(lasts.min(self.shared.deny_max_age));
        if deadline <= sent {
            return;
        }
        let tiers: Box<[Decision]> = decisions().copied().collect();
        for &slot in &id.stamps[..id.tiers] {
            // Relaxed: a hint (see `deny_until`).
            self.shared.deny_until[slot].fetch_max(deadline, Ordering::Relaxed);
        }
        self.shared.deny_cache.put(
            &id.text,
            id.cost,
            sent,
            deadline,
            CachedDeny { generation, tiers },
            // Relaxed: under the shard's lock, which `forget_denies` takes after its bump.
            || self.shared.forgets.load(Ordering::Relaxed) == forgets,
        );
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
    /// # use tollgate::redis::{RedisConfig, RedisStore, RedisTarget};
    /// let store = RedisStore::new(RedisTarget::Single("redis://127.0.0.1:6379".into()), RedisConfig::new("api")?)?;
    /// // After deleting the client's keys in Redis:
    /// store.forget_denies(Some("customer-42"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn forget_denies(&self, client: Option<&str>) -> usize {
        let shared = &self.shared;
        // AcqRel: a check that read the older value (Acquire, before its round trip) is
        // refused by `remember`'s comparison, under the shard lock taken below after this.
        shared.forgets.fetch_add(1, Ordering::AcqRel);
        if !shared.deny_cache.enabled() {
            return 0;
        }
        // The client's part of its keys, as `push_key` writes it: what follows the first
        // `{` (the prefix, rule and tier names cannot hold one: it is escaped).
        let mut tag = String::with_capacity(64);
        push_key(&mut tag, "", "", "", client);
        let tag = &tag[tag.find('{').unwrap_or(0)..];
        shared
            .deny_cache
            .forget(|identity| identity_keys(identity).any(|key| key_tag(key) == Some(tag)))
    }

    /// After this process wrote the keys of `calls` (an admitted check, a refund, a
    /// charge): invalidates the cached denies touching them (see "Deny cache" on
    /// [`RedisStore`]).
    fn invalidate<'c>(&self, calls: impl IntoIterator<Item = &'c Call>) {
        self.shared.invalidate(calls);
    }

    /// Runs `call` as `op` by `io`: the reply, or why Redis could not answer.
    async fn call(&self, call: &Call, op: Op, io: Io) -> Result<Value, FailureCause> {
        let shared = &self.shared;
        if shared.backing_off(call.tag) {
            return Err(FailureCause::Backoff);
        }
        let Some(runtime) = self.runtime.as_ref() else {
            shared.failed(call.tag, FailureCause::Connection);
            return Err(FailureCause::Connection);
        };
        let handle = runtime.handle();
        let script = call.script(shared.mode(op));
        let result = match io {
            Io::Blocking => match (runtime, tokio::runtime::Handle::try_current()) {
                // A plain thread: drive the call on it (the store's own runtime: no
                // hand-off to the I/O thread and back).
                (IoRuntime::Own(runtime), Err(_)) => runtime.block_on(shared.eval(&script)),
                // A plain thread, a given (multi-threaded) runtime, whose workers drive
                // the I/O while this thread polls the call.
                (IoRuntime::Given(handle), Err(_)) => handle.block_on(shared.eval(&script)),
                // A worker of a multi-threaded runtime blocking on the given one: it hands
                // its other tasks to another thread first, so that blocking cannot starve
                // the runtime that would answer (the given runtime may be this one).
                (IoRuntime::Given(handle), Ok(current))
                    if current.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread =>
                {
                    tokio::task::block_in_place(|| handle.block_on(shared.eval(&script)))
                }
                // Inside an async runtime, where blocking on another runtime is refused:
                // the call runs on the store's runtime and this thread waits for its answer.
                (_, Ok(_)) => {
                    let call = call.clone();
                    let task = Arc::clone(shared);
                    let (tx, rx) = mpsc::sync_channel(1);
                    handle.spawn(async move {
                        let script = call.script(task.mode(op));
                        let eval = task.eval(&script);
                        // The receiver waits for this send; it is gone only if the caller
                        // panicked.
                        let _ = tx.send(eval.await);
                    });
                    rx.recv()
                        .unwrap_or(Err(Failure::before(FailureCause::Connection)))
                }
            },
            // This task makes the call itself, polled inside the store's runtime context:
            // whatever the caller's runtime (or its lack of timers), the timeout's timer,
            // a connect's socket and a reconnect's task belong to the store's runtime,
            // which drives the connection (its I/O thread, or the given runtime, which may
            // be this task's own: then nothing leaves this runtime). No task is spawned
            // per call.
            Io::Async => {
                let mut eval = pin!(shared.eval(&script));
                std::future::poll_fn(|cx| {
                    let _context = handle.enter();
                    eval.as_mut().poll(cx)
                })
                .await
            }
        };
        result.map_err(|failure| {
            shared.failed(call.tag, failure.cause);
            failure.cause
        })
    }

    /// Runs a check or peek `call`, writing each covered tier's decision: whether every
    /// tier admitted, and whether Redis decided (`false`: the failure policy answered).
    async fn decide(
        &self,
        plan: &Plan<'_>,
        call: &Call,
        op: Op,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        io: Io,
    ) -> (bool, bool) {
        let reply = self.call(call, op, io).await;
        // (after the await: not kept in the future while Redis answers)
        let mut limits = [0; MAX_TIERS];
        for (limit, &i) in limits.iter_mut().zip(call.tiers()) {
            *limit = plan.get(i).map_or(0, |p| p.tier.algorithm().limit());
        }
        let limits = &limits[..call.len];
        let mut decisions = [Decision::allow(0, 0, Nanos::ZERO); MAX_TIERS];
        let decided = reply.and_then(|reply| {
            decode_into(limits, &reply, &mut decisions).ok_or(FailureCause::Server)
        });
        match decided {
            Ok(()) => {
                Counters::bump(&self.shared.counters.redis_decisions);
                let mut all = true;
                for (&i, decision) in call.tiers().iter().zip(decisions) {
                    all &= decision.allowed;
                    outcomes[i].decision = decision;
                }
                (all, true)
            }
            Err(_cause) => {
                if let Some(fallback) = &self.fallback {
                    let local = match op {
                        Op::Check => LocalOp::Check,
                        Op::Peek => LocalOp::Peek,
                        Op::PeekDenied | Op::Refund | Op::Charge => LocalOp::PeekDenied,
                    };
                    return (
                        fallback.run(
                            plan,
                            call.tiers(),
                            local,
                            now,
                            outcomes,
                            &self.shared.counters,
                        ),
                        false,
                    );
                }
                let policy = self.shared.config.failure_policy();
                for (&i, limit) in call.tiers().iter().zip(limits) {
                    let cost = plan.get(i).map_or(0, |p| u64::from(p.cost));
                    outcomes[i].decision = match policy {
                        FailurePolicy::FailClosed { retry_after } => {
                            let retry = Nanos::from_duration(retry_after);
                            Decision::deny(*limit, 0, retry, retry)
                        }
                        // Fail open (a fallback policy answered above).
                        _ => Decision::allow(*limit, limit.saturating_sub(cost), Nanos::ZERO),
                    };
                }
                (!matches!(policy, FailurePolicy::FailClosed { .. }), false)
            }
        }
    }
}

impl Shared {
    /// One script call within the configured timeout: the reply, or why there is none.
    async fn eval(self: &Arc<Self>, script: &ScriptArgs<'_>) -> Result<Value, Failure> {
        self.eval_for(script, self.config.timeout()).await
    }

    /// One script call, waiting at most `wait` for its answer. Its deadline is the
    /// configured timeout's whatever `wait` is (see "Deadlines" on [`RedisStore`]): a
    /// longer wait only hears how a late call ended.
    async fn eval_for(
        self: &Arc<Self>,
        script: &ScriptArgs<'_>,
        wait: Duration,
    ) -> Result<Value, Failure> {
        // One clock read for the deadline and the timeout's timer.
        let started = Instant::now();
        let start = self.local_at(started);
        let run = async {
            let deadline = self.deadline(script.keys().first().copied(), start).await?;
            // In ms, rounded down to the quantum: the script refuses the call once its
            // clock is past `ms · 1000` µs, at most the deadline.
            let ms = deadline / 1_000;
            let mode = ModeArg::new(script.mode, ms - ms % self.deadline_quantum_ms);
            let (args, n) = script.args(mode.as_str());
            self.connection
                .eval(&self.script, script.keys(), &args[..n], &self.counters)
                .await
                .map_err(|e| Failure::of(&e))
        };
        let Some(end) = started.checked_add(wait) else {
            return run.await;
        };
        match tokio::time::timeout_at(end.into(), run).await {
            Ok(result) => result,
            Err(_elapsed) => Err(Failure {
                cause: FailureCause::Timeout,
                maybe_ran: true,
            }),
        }
    }

    /// The deadline (server µs) of a call started at local `start` whose first key is
    /// `key`: from the estimate of the server's clock, sampled first if there is none (or
    /// it is too old or known wrong), and refreshed in the background when it ages.
    async fn deadline(self: &Arc<Self>, key: Option<&str>, start: u64) -> Result<u64, Failure> {
        if let Some(deadline) = self.clock.deadline_us(start, self.timeout_ns) {
            if self.clock.claim_refresh(start) {
                self.refresh_clock(key);
            }
            return Ok(deadline);
        }
        self.sample_clock(key).await?;
        self.clock
            .deadline_us(start, self.timeout_ns)
            .ok_or(Failure::before(FailureCause::Timeout))
    }

    /// Samples the server's clock (`TIME` at the master of `key`'s slot): a
    /// [`FailureCause::Timeout`] if the sample was too uncertain to keep.
    async fn sample_clock(&self, key: Option<&str>) -> Result<(), Failure> {
        let t0 = self.local_now();
        let server = self
            .connection
            .server_time(key, &self.counters)
            .await
            // `TIME` changes nothing: the call itself was not sent.
            .map_err(|e| Failure::before(FailureCause::of(&e)))?;
        let t1 = self.local_now();
        if self.clock.record(t0, t1, server, self.timeout_ns) {
            Ok(())
        } else {
            Err(Failure::before(FailureCause::Timeout))
        }
    }

    /// Samples the server's clock in a task of the store's runtime (within the timeout),
    /// while calls go on with the estimate they have.
    fn refresh_clock(self: &Arc<Self>, key: Option<&str>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.clock.refreshed();
            return;
        };
        let shared = Arc::clone(self);
        let key = key.map(str::to_owned);
        runtime.spawn(async move {
            let sample = shared.sample_clock(key.as_deref());
            // A failed or late sample keeps the estimate there is (it ages, and is
            // sampled before a call once too old).
            let _ = tokio::time::timeout(shared.config.timeout(), sample).await;
            shared.clock.refreshed();
        });
    }

    /// The backoff of hash tag `tag`'s group.
    fn backoff_of(&self, tag: u64) -> &AtomicU64 {
        let groups = self.backoff_until.len() as u64;
        // `groups` ≤ BACKOFF_GROUPS, so the remainder indexes the slice.
        // Truncation: the remainder is below `groups`, a slice length, so it fits a usize.
        #[allow(clippy::cast_possible_truncation)]
        &self.backoff_until[(tag % groups) as usize]
    }

    /// Whether calls of hash tag `tag` skip Redis now (a recent failure's backoff): if so
    /// the skip is counted as a failure ([`FailureCause::Backoff`]).
    fn backing_off(&self, tag: u64) -> bool {
        // Relaxed: a hint about when to try Redis again; no data is published with it.
        // The clock is read only while a backoff is set (0: none).
        let until = self.backoff_of(tag).load(Ordering::Relaxed);
        if until != 0 && self.local_now() < until {
            Counters::bump(&self.counters.degraded);
            self.counters.failed(FailureCause::Backoff);
            return true;
        }
        false
    }

    /// Counts a call of hash tag `tag` that failed by `cause`, and backs off its group
    /// unless the failure was the call's own.
    fn failed(&self, tag: u64, cause: FailureCause) {
        Counters::bump(&self.counters.degraded);
        self.counters.failed(cause);
        match cause {
            // A script error belongs to the keys of this call (a value of another type at
            // one of them): only this call is answered by the failure policy.
            FailureCause::Server | FailureCause::Backoff | FailureCause::FallbackUnavailable => {
                return
            }
            // The server ran the call too late to be waited for: it is slow, or the
            // estimate of its clock is off (the next call samples it again).
            FailureCause::Expired => {
                Counters::bump(&self.counters.expired);
                self.clock.invalidate();
            }
            FailureCause::Timeout | FailureCause::Connection => {}
        }
        // An unreachable or slow server: back off this call's group of hash tags (all
        // of them on a single node).
        let backoff = u64::try_from(self.config.retry_backoff().as_nanos()).unwrap_or(u64::MAX);
        // Relaxed: see `backing_off`.
        self.backoff_of(tag)
            .store(self.local_now().saturating_add(backoff), Ordering::Relaxed);
    }

    /// After this process wrote the keys of `calls` (an admitted check, a refund, a
    /// charge): invalidates the cached denies touching them (see "Deny cache" on
    /// [`RedisStore`]).
    fn invalidate<'c>(&self, calls: impl IntoIterator<Item = &'c Call>) {
        if !self.deny_cache.enabled() {
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

    /// The first script argument of `op`: its code and the TTL slack (see
    /// `scripts/store.lua`).
    fn mode(&self, op: Op) -> &str {
        &self.modes[op as usize]
    }

    /// Local monotonic ns since construction.
    fn local_now(&self) -> u64 {
        self.local_at(Instant::now())
    }

    /// `at` in local monotonic ns since construction.
    fn local_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
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
    let fixed = matches!(
        p.tier.algorithm(),
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(_))
    );
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

/// The step, in ms, that calls' deadlines are rounded down to for a `timeout`: the largest
/// power of two that is at most a twentieth of it (1 ms at least). Calls whose deadlines
/// fall in one step share one mode argument, which the script parses once (see `ARGV` in
/// `scripts/store.lua`); the rounding takes at most that step off each call's time on the
/// server.
fn deadline_quantum_ms(timeout: Duration) -> u64 {
    let twentieth = u64::try_from(timeout.as_millis() / 20).unwrap_or(u64::MAX);
    if twentieth <= 1 {
        1
    } else {
        1 << twentieth.ilog2()
    }
}

/// The keys of a deny cache identity (see [`RedisStore::identity`]): per tier, 16 hex
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

/// The client part of a Redis key: from its first `{` (see [`push_key`]).
fn key_tag(key: &str) -> Option<&str> {
    key.find('{').map(|i| &key[i..])
}

/// The invalidation stamp of a Redis key.
// Truncation: the remainder is below STAMPS (16 384), so it fits a usize.
#[allow(clippy::cast_possible_truncation)]
fn stamp_of(key: &[u8]) -> usize {
    (fnv1a(key) % STAMPS as u64) as usize
}

impl RedisStore {
    /// [`Store::check`] by `io`.
    pub(super) async fn check_io(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        io: Io,
    ) {
        let shared = &self.shared;
        Counters::bump(&shared.counters.decisions);
        let calls = self.calls(plan, now);
        // The deny cache first (see "Deny cache" on `RedisStore`), looked up only if a deny
        // of the plan's first key may still stand: most checks build no identity.
        let cache = if shared.deny_cache.enabled() && !plan.is_empty() {
            let local = self.cache_now(now);
            let first = calls.iter().flatten().flat_map(Call::keys).next();
            // Relaxed: a hint (see `deny_until`); a deny this load misses costs a round trip.
            let may_stand = first.is_some_and(|key| {
                shared.deny_until[stamp_of(key.as_bytes())].load(Ordering::Relaxed) > local
            });
            let id = if may_stand {
                let id = self.identity(plan);
                let hit = shared
                    .deny_cache
                    .find(&id.text, id.cost, local, |deny, sent| {
                        self.answer(deny, &id, sent, local, outcomes)
                    });
                if hit.is_some() {
                    Counters::bump(&shared.counters.deny_cache_hits);
                    return;
                }
                Some(id)
            } else {
                None
            };
            // Acquire: pairs with the AcqRel bump of `invalidate` (read before the round
            // trip, so a refund racing with it invalidates the deny it brings).
            let generation = shared.generation.load(Ordering::Acquire);
            // Acquire: pairs with the AcqRel bump of `forget_denies` (a forget during the
            // round trip keeps the deny it brings out of the cache).
            let forgets = shared.forgets.load(Ordering::Acquire);
            Some((id, local, generation, forgets))
        } else {
            None
        };
        let mut admitted: [Option<&Call>; 2] = [None; 2];
        let mut denied = false;
        // Whether Redis made every answer (only such denies are cached).
        let mut clean = true;
        for (slot, call) in admitted.iter_mut().zip(&calls) {
            let Some(call) = call else { continue };
            if denied {
                // An earlier group denied: this one only reports.
                clean &= self
                    .decide(plan, call, Op::PeekDenied, now, outcomes, io)
                    .await
                    .1;
                continue;
            }
            let (all, redis) = self.decide(plan, call, Op::Check, now, outcomes, io).await;
            clean &= redis;
            if all {
                *slot = Some(call);
            } else {
                denied = true;
            }
        }
        if denied {
            // Give back what the groups that admitted took, then report their state.
            for call in admitted.into_iter().flatten() {
                // If Redis cannot take the refund now, it keeps the permits: the strict side
                // (they return with the window or the drain).
                clean &= self.call(call, Op::Refund, io).await.is_ok();
                clean &= self
                    .decide(plan, call, Op::PeekDenied, now, outcomes, io)
                    .await
                    .1;
            }
            if let (true, Some((id, sent, generation, forgets))) = (clean, cache) {
                let id = id.unwrap_or_else(|| self.identity(plan));
                self.remember(plan, &id, sent, (generation, forgets), outcomes);
            }
        } else {
            // Admitted: the permits taken change what other cached denies of these keys
            // would now hear (a retry later, fewer remaining).
            self.invalidate(calls.iter().flatten());
        }
    }

    /// [`Store::peek`] by `io`.
    pub(super) async fn peek_io(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
        io: Io,
    ) {
        // Not answered from the deny cache: a peek reports the admitting tiers with the
        // request counted, a denied check without.
        Counters::bump(&self.shared.counters.decisions);
        for call in self.calls(plan, now).iter().flatten() {
            self.decide(plan, call, Op::Peek, now, outcomes, io).await;
        }
    }

    /// [`Store::refund`] by `io`.
    pub(super) async fn refund_io(&self, plan: &Plan<'_>, now: Nanos, io: Io) {
        let calls = self.calls(plan, now);
        for call in calls.iter().flatten() {
            // A refund Redis cannot take is dropped: the strict side (the permits come back
            // with the window or the drain).
            let _ = self.call(call, Op::Refund, io).await;
        }
        self.invalidate(calls.iter().flatten());
    }

    /// [`Store::charge`] by `io`.
    pub(super) async fn charge_io(&self, plan: &Plan<'_>, now: Nanos, io: Io) {
        let calls = self.calls(plan, now);
        for call in calls.iter().flatten() {
            if let (Err(_), Some(fallback)) =
                (self.call(call, Op::Charge, io).await, &self.fallback)
            {
                // Work done during an outage counts against the local share.
                fallback.run(
                    plan,
                    call.tiers(),
                    LocalOp::Charge,
                    now,
                    &mut [],
                    &self.shared.counters,
                );
            }
        }
        self.invalidate(calls.iter().flatten());
    }
}

impl Store for RedisStore {
    fn check(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        finish(self.check_io(plan, now, outcomes, Io::Blocking));
        Ok(())
    }

    fn peek(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        finish(self.peek_io(plan, now, outcomes, Io::Blocking));
        Ok(())
    }

    /// Also invalidates the cached denies touching the plan's keys (after the refund has
    /// its answer: see "Deny cache" on [`RedisStore`]).
    fn refund(&self, plan: &Plan<'_>, now: Nanos) {
        finish(self.refund_io(plan, now, Io::Blocking));
    }

    /// Also invalidates the cached denies touching the plan's keys, as
    /// [`refund`](Self::refund) does.
    fn charge(&self, plan: &Plan<'_>, now: Nanos) {
        finish(self.charge_io(plan, now, Io::Blocking));
    }
}

/// The same operations, awaited: the calling task sends each script call on the store's
/// connection (driven by the store's I/O thread) and waits for its reply without holding
/// its thread; no task is spawned per call (see "Blocking" on [`RedisStore`]).
impl AsyncStore for RedisStore {
    async fn check_async<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        now: Nanos,
        outcomes: &'a mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.check_io(plan, now, outcomes, Io::Async).await;
        Ok(())
    }

    async fn peek_async<'a>(
        &'a self,
        plan: &'a Plan<'a>,
        now: Nanos,
        outcomes: &'a mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        self.peek_io(plan, now, outcomes, Io::Async).await;
        Ok(())
    }

    async fn refund_async<'a>(&'a self, plan: &'a Plan<'a>, now: Nanos) {
        self.refund_io(plan, now, Io::Async).await
    }

    async fn charge_async<'a>(&'a self, plan: &'a Plan<'a>, now: Nanos) {
        self.charge_io(plan, now, Io::Async).await
    }
}

#[cfg(test)]
mod tests {
    use super::{
        deadline_quantum_ms, push_params, push_tag, push_tier_identity, push_tier_spec, tier_spec,
        Call, ModeArg, SPEC_CACHE,
    };
    use std::time::Duration;

    /// The deadline's step is a power of two ms, at most a twentieth of the timeout.
    #[test]
    fn deadlines_step_by_a_power_of_two_at_most_a_twentieth_of_the_timeout() {
        for (timeout_ms, step) in [(1, 1), (39, 1), (40, 2), (250, 8), (300, 8), (2_000, 64)] {
            assert_eq!(
                deadline_quantum_ms(Duration::from_millis(timeout_ms)),
                step,
                "{timeout_ms} ms"
            );
        }
        assert_eq!(deadline_quantum_ms(Duration::from_secs(3600)), 131_072);
    }
    use crate::{AlgorithmConfig, AnyAlgorithm, Nanos};

    /// A call's keys, plan and time share one buffer: each comes back whole and in order,
    /// the mode first among the arguments, the time only if there is one.
    #[test]
    fn a_call_gives_back_its_keys_and_arguments() {
        let mut call = Call::new(7);
        for (i, key) in ["p:r:a:{c}", "p:r:b:{c}", "p:other:t:{c}"]
            .iter()
            .enumerate()
        {
            call.text.push_str(key);
            call.key_ends[i] = call.text.len();
            call.tiers[i] = 2 * i;
            call.len = i + 1;
        }
        call.text.push_str("spec one;spec two;spec three");
        call.spec_end = call.text.len();
        let script = call.script("c1000");
        assert_eq!(script.keys(), ["p:r:a:{c}", "p:r:b:{c}", "p:other:t:{c}"]);
        let mode = ModeArg::new(script.mode, 1_700_000_000_000);
        assert_eq!(mode.as_str(), "c1000 1700000000000");
        let (args, n) = script.args(mode.as_str());
        assert_eq!(
            args[..n],
            ["c1000 1700000000000", "spec one;spec two;spec three"]
        );
        assert_eq!(
            ModeArg::new("g1099511627776", u64::MAX).as_str(),
            "g1099511627776 18446744073709551615"
        );
        assert_eq!(call.tiers(), [0, 2, 4]);
        assert_eq!(call.keys().count(), 3);
        // With the client's time after the plan.
        call.text.push_str("00000000000003e8");
        let script = call.script("p1000");
        assert_eq!(script.keys().len(), 3);
        let (args, n) = script.args("p1000 9");
        assert_eq!(
            args[..n],
            [
                "p1000 9",
                "spec one;spec two;spec three",
                "00000000000003e8"
            ]
        );
        // One key.
        let mut one = Call::new(1);
        one.text.push('k');
        one.key_ends[0] = 1;
        one.len = 1;
        one.text.push('s');
        one.spec_end = 2;
        assert_eq!(one.script("r5").keys(), ["k"]);
        let script = one.script("r5");
        let (args, n) = script.args("r5 0");
        assert_eq!(args[..n], ["r5 0", "s"]);
    }

    /// The spec cache is a pure cache: whatever it holds, evicts or hits, every spec is the
    /// one `tier_spec` formats (each tier of a plan separated by `;`), and every identity
    /// part the one `push_tag` and `push_params` format.
    #[test]
    fn cached_specs_are_the_formatted_ones() {
        let algorithms: Vec<AnyAlgorithm> = (1..=6u64)
            .flat_map(|n| {
                let window = Nanos::from_secs(n);
                [
                    AlgorithmConfig::Gcra {
                        limit: 10 * n,
                        period: window,
                        burst: n,
                    },
                    AlgorithmConfig::FixedWindow {
                        limit: 10 * n,
                        window,
                    },
                ]
            })
            .map(|config| config.build().unwrap())
            .collect();
        // More (algorithm, cost) pairs than the cache holds, visited three times in an order
        // that both hits and evicts.
        assert!(algorithms.len() * 2 > SPEC_CACHE);
        for round in 0..3u32 {
            for (i, algorithm) in algorithms.iter().enumerate() {
                for cost in [1, 1 + round % 2] {
                    let mut plan = String::new();
                    push_tier_spec(&mut plan, 0, algorithm, cost);
                    push_tier_spec(&mut plan, 0, &algorithms[(i + 1) % algorithms.len()], cost);
                    let expected = format!(
                        "{};{}",
                        tier_spec(algorithm, cost),
                        tier_spec(&algorithms[(i + 1) % algorithms.len()], cost)
                    );
                    assert_eq!(plan, expected, "round {round}, algorithm {i}, cost {cost}");
                    let mut identity = String::new();
                    push_tier_identity(&mut identity, algorithm);
                    let mut formatted = String::new();
                    push_tag(&mut formatted, algorithm);
                    push_params(&mut formatted, algorithm);
                    assert_eq!(identity, formatted, "round {round}, algorithm {i}");
                }
            }
        }
        // A GCRA spec names the algorithm, then the tag.
        assert!(tier_spec(&algorithms[0], 1).starts_with("gcra t"));
    }
}
