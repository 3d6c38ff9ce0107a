//! [`RedisStore`]: a [`Policy`](crate::policy::Policy)'s state in Redis or Redis Cluster, so
//! every process that runs the same rules on the same Redis shares the limits.

use std::sync::{mpsc, Arc};
use std::time::Instant;

use redis::Value;

use super::connection::Connection;
use super::fallback::{LocalOp, PlanFallback};
use super::rule::encode_algorithm;
use super::stats::Counters;
use super::{
    BuildError, FailureCause, FailurePolicy, LuaScript, RedisConfig, RedisStats, RedisTarget,
    TimeSource,
};
use crate::policy::{Partition, Plan, PlannedTier, Store, TierOutcome};
use crate::sync::plain::{AtomicU64, Ordering};
use crate::{Algorithm, AnyAlgorithm, Decision, InsufficientCapacity, Nanos, PackedAlgorithm};

/// The most permits one request may charge a sliding-log tier (the policy's
/// [`MAX_LOG_COST`](crate::policy::MAX_LOG_COST), the same in every store).
pub use crate::policy::MAX_LOG_COST;

/// A [`Store`] in Redis or Redis Cluster: a [`Policy`](crate::policy::Policy) built from
/// the same rules runs on it unchanged, shared by every process on the same target and
/// prefix.
///
/// The policy matches rules and compiles a plan exactly as in-process; the store runs the
/// plan's tiers in `scripts/store.lua`, which reuses the per-algorithm transitions of the
/// limiter's script (each the mirror of the core's `decide`, `refund` and `charge`; see the
/// [module docs](super) for the exact arithmetic).
///
/// ## Keys and round trips
///
/// A tier's state lives at `{prefix}:{rule}:{tier}:{{client}}` (rule and tier names with
/// `%`, `:`, `{` and `}` escaped as `%XX`). The client is the Redis Cluster hash tag, so all
/// per-client tiers of a check share one slot and run in **one round trip**, all or
/// nothing. A client that is empty or contains `{` or `}` cannot be a tag by itself; its
/// tag is then `#` and its 64-bit fingerprint in hex, followed by `:` and the client.
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
/// from the sliding log): the permits used are carried, never an error, never over the new
/// bound. The conversion is computed on every read of an old state and written with the
/// next admitted request, so two processes running different rule versions on one key (a
/// rolling deploy) each read the other's writes through the same rule. Keys of a removed
/// rule or tier are never read again and expire by their TTL.
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
/// first use; charges during the outage count there too, refunds are not applied).
/// Failures are scoped to what failed: a
/// script error (a value of another type at one of the call's keys) answers that call
/// only; a timeout or a lost connection skips Redis for the retry backoff, for every key
/// on a single node, and on a cluster only for the hash tags of the failed call's group
/// (one of 64), so one slow master does not degrade the keys of the others.
///
/// The store's methods block the calling thread until Redis answers (the policy's API is
/// synchronous): a plain thread drives the call itself on the store's own tokio runtime;
/// a tokio worker hands it to the store's I/O thread and waits (blocking that worker for
/// the round trip).
///
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
    /// The I/O runtime; `None` only while dropping.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        // Without waiting for the I/O thread: a store may be dropped inside an async
        // context (a server's shutdown), where blocking on a runtime's shutdown panics.
        if let Some(runtime) = self.runtime.take() {
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
    slack_ms: String,
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

/// Backoff groups of a cluster store: a slow or unreachable master backs off the hash tags
/// of the groups whose checks failed, not every key.
const BACKOFF_GROUPS: usize = 64;

/// One script call: its keys and arguments, and which plan tiers it covers.
struct Call {
    /// FNV-1a of the call's hash tag (the client, or `@`): its backoff group.
    tag: u64,
    keys: Vec<String>,
    args: Vec<String>,
    tiers: Vec<usize>,
}

fn hex(value: u64) -> String {
    format!("{value:016x}")
}

/// The state tag of `algorithm` (the shape a conversion needs, see `scripts/store.lua`) and
/// the most a window count holds in the core's layout (where a charge saturates; 0 for the
/// others).
fn tag(algorithm: &AnyAlgorithm) -> (String, u64) {
    let tat = |interval: Nanos| (format!("t{}", hex(interval.as_u64())), 0);
    match algorithm {
        AnyAlgorithm::Packed(PackedAlgorithm::Gcra(g)) => tat(g.emission_interval()),
        AnyAlgorithm::Packed(PackedAlgorithm::TokenBucket(t)) => tat(t.refill_interval()),
        AnyAlgorithm::Packed(PackedAlgorithm::LeakyBucket(l)) => tat(l.drain_interval()),
        AnyAlgorithm::Packed(PackedAlgorithm::FixedWindow(w)) => (
            format!("f{}{}", hex(w.window().as_u64()), hex(w.limit())),
            w.unpack(u64::MAX).1,
        ),
        AnyAlgorithm::Packed(PackedAlgorithm::SlidingWindowCounter(w)) => (
            format!("c{}{}", hex(w.window().as_u64()), hex(w.limit())),
            w.unpack(u64::MAX).2,
        ),
        AnyAlgorithm::Log(l) => (
            format!("l{}{}", hex(l.window().as_u64()), hex(l.limit())),
            0,
        ),
    }
}

/// Appends `name` with `%`, `:`, `{` and `}` escaped, so key parts cannot run together.
fn push_escaped(key: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '%' | ':' | '{' | '}' => key.push_str(&format!("%{:02X}", c as u32)),
            c => key.push(c),
        }
    }
}

/// The per-tier decisions of a check or peek reply (`None` if malformed).
fn decode(limits: &[u64], reply: &Value) -> Option<Vec<Decision>> {
    super::reply::decode_limits(limits, reply)
}

impl RedisStore {
    /// A store on `target` with `config` (its prefix names the keys). Touches no network:
    /// the connection is made by the first check, and a store built while Redis is down
    /// works (by the failure policy) and recovers by itself.
    pub fn new(target: RedisTarget, config: RedisConfig) -> Result<RedisStore, BuildError> {
        let fallback = match config.failure_policy() {
            FailurePolicy::Fallback { share } => {
                Some(PlanFallback::new(share, config.fallback_keys()))
            }
            FailurePolicy::FailOpen | FailurePolicy::FailClosed { .. } => None,
        };
        let runtime = super::connection::io_runtime("tollgate-redis-store")?;
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
                slack_ms: config.ttl_slack().as_millis().to_string(),
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
    /// calls, two for a check with client and global tiers).
    pub fn stats(&self) -> RedisStats {
        self.shared.counters.snapshot()
    }

    /// The Redis key holding `tier` of `rule` for `client` (`None`: the rule is global).
    ///
    /// ```
    /// # use tollgate::redis::{RedisConfig, RedisStore, RedisTarget};
    /// let store = RedisStore::new(RedisTarget::Single("redis://127.0.0.1:1".into()), RedisConfig::new("api")?)?;
    /// assert_eq!(store.redis_key("default", "minute", Some("alice")), "api:default:minute:{alice}");
    /// assert_eq!(store.redis_key("all", "second", None), "api:all:second:{@}");
    /// assert_eq!(store.redis_key("a:b", "t", Some("")), "api:a%3Ab:t:{#cbf29ce484222325}:");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn redis_key(&self, rule: &str, tier: &str, client: Option<&str>) -> String {
        let mut key = String::with_capacity(64);
        key.push_str(self.shared.config.prefix());
        key.push(':');
        push_escaped(&mut key, rule);
        key.push(':');
        push_escaped(&mut key, tier);
        key.push(':');
        match client {
            None => key.push_str("{@}"),
            Some(c) if !c.is_empty() && !c.contains(['{', '}']) => {
                key.push('{');
                key.push_str(c);
                key.push('}');
            }
            Some(c) => {
                key.push_str(&format!("{{#{:016x}}}:", fnv1a(c.as_bytes())));
                key.push_str(c);
            }
        }
        key
    }

    /// The calls `plan` needs for `op`: client tiers, then global tiers (each group one
    /// slot), each with the tier indices it covers.
    fn calls(&self, plan: &Plan<'_>, now: Nanos, op: Op) -> Vec<Call> {
        let shared = &self.shared;
        let now_arg = match shared.config.time_source() {
            TimeSource::Client => hex(now.as_u64()),
            TimeSource::Server => String::new(),
        };
        let mut calls: Vec<Call> = Vec::with_capacity(2);
        for global in [false, true] {
            let mut call = Call {
                tag: 0,
                keys: Vec::new(),
                args: vec![
                    now_arg.clone(),
                    shared.slack_ms.clone(),
                    op.code().to_owned(),
                    String::new(),
                ],
                tiers: Vec::new(),
            };
            for (i, p) in plan.iter().enumerate() {
                if (p.rule.partition() == Partition::Global) != global {
                    continue;
                }
                let algorithm = p.tier.algorithm();
                call.keys.push(self.key_of(p));
                let (tag, cmax) = tag(algorithm);
                let mut encoded = Vec::with_capacity(6);
                encode_algorithm(algorithm, p.cost, &mut encoded);
                let mut parts = encoded.into_iter();
                call.args.extend(parts.next());
                call.args.push(tag);
                call.args.push(hex(cmax));
                call.args.extend(parts);
                call.tiers.push(i);
                call.tag = if global {
                    fnv1a(b"@")
                } else {
                    fnv1a(p.client.as_bytes())
                };
            }
            if !call.tiers.is_empty() {
                call.args[3] = call.tiers.len().to_string();
                calls.push(call);
            }
        }
        calls
    }

    fn key_of(&self, p: &PlannedTier<'_>) -> String {
        let client = match p.rule.partition() {
            Partition::Global => None,
            Partition::Client => Some(p.client),
        };
        self.redis_key(p.rule.name(), p.tier.name(), client)
    }

    /// Runs `call` as `op`: the reply, or why Redis could not answer.
    fn run(&self, call: &Call, op: Op) -> Result<Value, FailureCause> {
        let shared = &self.shared;
        let groups = shared.backoff_until.len() as u64;
        // `groups` ≤ BACKOFF_GROUPS, so the remainder indexes the slice.
        let backoff_until = &shared.backoff_until[(call.tag % groups) as usize];
        // Relaxed: a hint about when to try Redis again; no data is published with it.
        if shared.local_now() < backoff_until.load(Ordering::Relaxed) {
            Counters::bump(&shared.counters.degraded);
            return Err(FailureCause::Backoff);
        }
        let Some(runtime) = self.runtime.as_ref() else {
            return Err(FailureCause::Connection);
        };
        let mut args = call.args.clone();
        op.code().clone_into(&mut args[2]);
        let result = if tokio::runtime::Handle::try_current().is_err() {
            // A plain thread: drive the call on it (no hand-off to the I/O thread and back).
            runtime.block_on(shared.eval(&call.keys, &args))
        } else {
            // Inside an async runtime, where blocking on another runtime is refused: the
            // call runs on the store's I/O thread and this thread waits for its answer.
            let keys = call.keys.clone();
            let task = Arc::clone(shared);
            let (tx, rx) = mpsc::sync_channel(1);
            runtime.spawn(async move {
                // The receiver waits for this send; it is gone only if the caller panicked.
                let _ = tx.send(task.eval(&keys, &args).await);
            });
            rx.recv().unwrap_or(Err(FailureCause::Connection))
        };
        match result {
            Ok(_) => {}
            // A script error belongs to the keys of this call (a value of another type at
            // one of them): only this call is answered by the failure policy.
            Err(FailureCause::Server) => Counters::bump(&shared.counters.degraded),
            // An unreachable or slow server: back off this call's group of hash tags (all
            // of them on a single node).
            Err(_) => {
                let backoff =
                    u64::try_from(shared.config.retry_backoff().as_nanos()).unwrap_or(u64::MAX);
                // Relaxed: see the load above.
                backoff_until.store(
                    shared.local_now().saturating_add(backoff),
                    Ordering::Relaxed,
                );
                Counters::bump(&shared.counters.degraded);
            }
        }
        result
    }

    /// Runs a check or peek `call`, writing each covered tier's decision; `false` if any
    /// tier denied. A failure answers by the failure policy.
    fn decide(
        &self,
        plan: &Plan<'_>,
        call: &Call,
        op: Op,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> bool {
        let limits: Vec<u64> = call
            .tiers
            .iter()
            .filter_map(|&i| plan.get(i).map(|p| p.tier.algorithm().limit()))
            .collect();
        let decided = self
            .run(call, op)
            .and_then(|reply| decode(&limits, &reply).ok_or(FailureCause::Server));
        match decided {
            Ok(decisions) => {
                Counters::bump(&self.shared.counters.redis_decisions);
                let mut all = true;
                for (&i, decision) in call.tiers.iter().zip(decisions) {
                    all &= decision.allowed;
                    outcomes[i].decision = decision;
                }
                all
            }
            Err(_cause) => {
                if let Some(fallback) = &self.fallback {
                    let local = match op {
                        Op::Check => LocalOp::Check,
                        Op::Peek => LocalOp::Peek,
                        Op::PeekDenied | Op::Refund | Op::Charge => LocalOp::PeekDenied,
                    };
                    return fallback.run(plan, &call.tiers, local, now, outcomes);
                }
                let policy = self.shared.config.failure_policy();
                for (&i, limit) in call.tiers.iter().zip(&limits) {
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
                !matches!(policy, FailurePolicy::FailClosed { .. })
            }
        }
    }
}

impl Shared {
    /// One script call within the configured timeout: the reply, or why there is none.
    async fn eval(&self, keys: &[String], args: &[String]) -> Result<Value, FailureCause> {
        let eval = self
            .connection
            .eval(&self.script, keys, args, &self.counters);
        match tokio::time::timeout(self.config.timeout(), eval).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(FailureCause::of(&error)),
            Err(_elapsed) => Err(FailureCause::Timeout),
        }
    }

    /// Local monotonic ns since construction.
    fn local_now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// FNV-1a over `bytes`: the stable tag of a client that cannot be a hash tag itself.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Store for RedisStore {
    fn check(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        let calls = self.calls(plan, now, Op::Check);
        Counters::bump(&self.shared.counters.decisions);
        let mut admitted: Vec<&Call> = Vec::with_capacity(2);
        let mut denied = false;
        for call in &calls {
            if denied {
                // An earlier group denied: this one only reports.
                self.decide(plan, call, Op::PeekDenied, now, outcomes);
                continue;
            }
            if self.decide(plan, call, Op::Check, now, outcomes) {
                admitted.push(call);
            } else {
                denied = true;
            }
        }
        if denied {
            // Give back what the groups that admitted took, then report their state.
            for call in admitted {
                // If Redis cannot take the refund now, it keeps the permits: the strict side
                // (they return with the window or the drain).
                let _ = self.run(call, Op::Refund);
                self.decide(plan, call, Op::PeekDenied, now, outcomes);
            }
        }
        Ok(())
    }

    fn peek(
        &self,
        plan: &Plan<'_>,
        now: Nanos,
        outcomes: &mut [TierOutcome],
    ) -> Result<(), InsufficientCapacity> {
        Counters::bump(&self.shared.counters.decisions);
        for call in self.calls(plan, now, Op::Peek) {
            self.decide(plan, &call, Op::Peek, now, outcomes);
        }
        Ok(())
    }

    fn refund(&self, plan: &Plan<'_>, now: Nanos) {
        for call in self.calls(plan, now, Op::Refund) {
            // A refund Redis cannot take is dropped: the strict side (the permits come back
            // with the window or the drain).
            let _ = self.run(&call, Op::Refund);
        }
    }

    fn charge(&self, plan: &Plan<'_>, now: Nanos) {
        for call in self.calls(plan, now, Op::Charge) {
            if let (Err(_), Some(fallback)) = (self.run(&call, Op::Charge), &self.fallback) {
                // Work done during an outage counts against the local share.
                fallback.run(plan, &call.tiers, LocalOp::Charge, now, &mut []);
            }
        }
    }
}
