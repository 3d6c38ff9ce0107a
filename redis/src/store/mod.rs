//! [`RedisStore`]: a [`Policy`](tollgate::policy::Policy)'s state in Redis or Redis Cluster, so
//! every process that runs the same rules on the same Redis shares the limits: the type, its
//! construction and state. Its calls are built in `call`, made in `io`, run by the
//! operations of `operations`; its deny cache is `denies`, its lease calls `lease_op`.

mod call;
mod denies;
mod io;
mod lease_op;
mod operations;
mod scan;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) use self::call::Mode;
use self::denies::Denies;
pub(super) use self::io::Io;
use self::io::{deadline_quantum_ms, IoRuntime, BACKOFF_GROUPS};
pub(super) use self::lease_op::{LeaseOp, LeaseReply, PendingLease, SETTLE};
pub(super) use self::operations::store_by_io;
use super::clock::ServerClock;
use super::connection::Connection;
use super::fallback::PlanFallback;
use super::stats::Counters;
use super::{BuildError, FailurePolicy, LuaScript, RedisConfig, RedisStats, RedisTarget};
use std::sync::atomic::{AtomicBool, AtomicU64};
pub(super) use tollgate::wait::finish;
use tollgate::Nanos;

/// A [`Store`] in Redis or Redis Cluster: a [`Policy`](tollgate::policy::Policy) built from
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
/// their permits back by the core's refund (a second script call), within what is left of
/// the check's timeout (a refund left too little is not sent, and the permits stay taken
/// until the window or the drain returns them). Between the two calls, another check of
/// the same client may see those permits taken: the error is on the strict side, never
/// over a limit. Refund is exact for windows and logs, and for the
/// buckets unless the key drained to idle in between.
///
/// A plan of several clients' tiers (a batch, `Policy::check_all`) is one call for all of
/// them on a single server. On a cluster their keys live in several slots, so each
/// client's tiers are a call of their own, decided one after the other the same way: the
/// first call that denies has the calls before it give their permits back.
///
/// ## Versioned state: reloads and rolling deploys
///
/// Every stored state carries a tag naming the shape and parameters it was written under
/// (see the header of `scripts/store.lua`). A check that reads a state written under other
/// parameters or another algorithm converts it, in the script, by the mirror of the core's
/// [`PackedAlgorithm::rescale`](tollgate::PackedAlgorithm::rescale) (and the
/// [`used`](tollgate::Algorithm::used) / [`with_used`](tollgate::Algorithm::with_used) pair to and
/// from the sliding log): exactly the permits used are carried, not capped at a lowered
/// limit (so a rollback never grants them twice), never an error, never over the new
/// bound on top of what was used. A log keeps up to its
/// [`ceiling`](tollgate::SlidingWindowLog::ceiling) of entries and drops those out of the
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
/// is kept only if it took at most a quarter of the timeout (if the first is not, another
/// is sent at once: the first `TIME` on a new connection also waits for its setup).
/// Each call's deadline is its
/// operation's start (the calls of one check share one timeout, see
/// [`RedisConfig::with_timeout`]) plus the upper bound of the offset between the clocks plus the timeout, less a
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
///   cannot see (a reset by another process, an operator's `DEL` of the key, a
///   `FLUSHALL`, a restarted server) may
///   have freed the key since, and a daily quota's deny would otherwise stand until
///   midnight. [`forget_denies`](RedisStore::forget_denies) drops a client's cached denies
///   at once (what a reset of its state calls).
/// - **What is cached.** Only denies in which every script call succeeded: never an answer
///   of the failure policy, never an admission. Peeks are not cached (a peek reports the
///   admitting tiers with the request counted, a denied check without).
/// - **Invalidation.** Everything this process writes to a key invalidates the cached
///   denies that touch it: an admitted check (the permits taken move other requests' retry
///   times and `remaining`), a [refund](tollgate::policy::Op::Refund) (which can make a
///   deny stale) and a [charge](tollgate::policy::Op::Charge). Each key maps to one of
///   16 384 invalidation stamps; a deny remembers the invalidation generation read before
///   its request was sent, and is dropped when a stamp of one of its keys has moved past it
///   since (a write racing with the check's round trip included). Stamps shared by other
///   keys only cost a round trip.
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
/// the round trip). Async code awaits instead ([`Store::run_async`], through
/// [`Policy::allow_async`](tollgate::policy::Policy::allow_async)): the calling task makes
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
/// use tollgate_redis::{RedisConfig, RedisStore, RedisTarget};
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
///
/// [`Store::run_async`]: tollgate::policy::Store::run_async
/// [`FailureCause`]: super::FailureCause
/// [`FailureCause::Expired`]: super::FailureCause::Expired
/// [`Store`]: tollgate::policy::Store
/// [`TimeSource`]: super::TimeSource
/// [`TimeSource::Client`]: super::TimeSource::Client
/// [`TimeSource::Server`]: super::TimeSource::Server
#[derive(Debug)]
pub struct RedisStore {
    shared: Arc<Shared>,
    /// The in-process fallback, under [`FailurePolicy::Fallback`].
    fallback: Option<PlanFallback>,
    /// Where the I/O runs; `None` only while dropping.
    runtime: Option<IoRuntime>,
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
    /// Whether the target is a Redis Cluster (a plan's clients then each need a call of
    /// their own: see `Calls`).
    cluster: bool,
    /// Per group of hash tags (one group for a single node, [`BACKOFF_GROUPS`] for a
    /// cluster): local ns (since `epoch`) before which Redis is not tried again for the
    /// tags of that group; 0: no backoff.
    backoff_until: Box<[AtomicU64]>,
    /// Whether Redis failed (a backoff began) and has not yet answered with no failure for
    /// [`recovery_ns`](Self::recovery_ns): what the `tollgate_redis_degraded` gauge, the
    /// failure's `warn` and the recovery event report.
    degraded: AtomicBool,
    /// Local ns (since `epoch`) of the last failure that began a backoff.
    last_failure: AtomicU64,
    /// How long Redis must go without such a failure, answering, to count as recovered:
    /// twice the retry backoff plus the timeout. A part that stays down (a cluster master,
    /// of the 64 backoff groups' keys) fails again at most a backoff and a timeout after
    /// its last failure while traffic reaches it, so the store does not flap between
    /// degraded and recovered with every call the other masters answer.
    recovery_ns: u64,
    /// Each [`Mode`]'s mode argument ([`Shared::mode`]).
    modes: [String; 6],
    /// Denies of checks, answered locally until their retry time (see "Deny cache" on
    /// [`RedisStore`]).
    denies: Denies,
    /// [`RedisConfig::timeout`] in ns.
    timeout_ns: u64,
    /// Deadlines are multiples of this many ms ([`deadline_quantum_ms`]).
    deadline_quantum_ms: u64,
    /// The estimate of the server's clock behind every call's deadline.
    clock: ServerClock,
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
    /// ([`Policy::allow_async`](tollgate::policy::Policy::allow_async), or
    /// `tollgate_http::RateLimitLayer::awaited`) from a task on that runtime
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
    /// use tollgate_redis::{RedisConfig, RedisStore, RedisTarget};
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
                cluster: matches!(target, RedisTarget::Cluster(_)),
                backoff_until: (0..match target {
                    RedisTarget::Single(_) => 1,
                    RedisTarget::Cluster(_) => BACKOFF_GROUPS,
                })
                    .map(|_| AtomicU64::new(0))
                    .collect(),
                degraded: AtomicBool::new(false),
                last_failure: AtomicU64::new(0),
                // Validated: at most an hour each.
                recovery_ns: u64::try_from(
                    (2 * (config.retry_backoff() + config.timeout())).as_nanos(),
                )
                .unwrap_or(u64::MAX),
                modes: Mode::modes(config.ttl_slack_ms()),
                denies: Denies::new(&config),
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
}

impl Shared {
    /// The first script argument of `op`: its code and the TTL slack (see
    /// `scripts/store.lua`).
    fn mode(&self, op: Mode) -> &str {
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
