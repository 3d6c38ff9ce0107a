//! How a script call reaches Redis: the runtime that drives it ([`IoRuntime`]), blocking or
//! awaited ([`Io`]; blocking ones are `tollgate::wait::finish`ed), within its timeout and deadline, and the retry backoff of
//! the hash tags whose calls failed ([`Failure`]).

use std::future::Future;
use std::pin::pin;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use redis::Value;

use super::call::{Call, Mode, ModeArg, ScriptArgs};
use super::{RedisStore, Shared};
use crate::events;
use crate::stats::Counters;
use crate::FailureCause;
use std::sync::atomic::{AtomicU64, Ordering};

/// The runtime that drives a store's connection, its timers and its reconnects.
#[derive(Debug)]
pub(super) enum IoRuntime {
    /// The store's own, with one I/O thread ([`RedisStore::new`]).
    Own(tokio::runtime::Runtime),
    /// The application's multi-threaded runtime ([`RedisStore::on_runtime`]).
    Given(tokio::runtime::Handle),
}

impl IoRuntime {
    pub(super) fn handle(&self) -> &tokio::runtime::Handle {
        match self {
            IoRuntime::Own(runtime) => runtime.handle(),
            IoRuntime::Given(handle) => handle,
        }
    }
}

/// How an operation makes its script calls.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Io {
    /// Blocking the calling thread until Redis answers
    /// ([`Store::run`](tollgate::policy::Store::run)).
    Blocking,
    /// Awaiting the answer in the caller's task, the connection driven by the store's
    /// runtime ([`Store::run_async`](tollgate::policy::Store::run_async)).
    Async,
}

/// An operation's time: one timeout from its start, shared by all its calls (a check's
/// calls for the client's and the global tiers, a denied check's give-backs), so that an
/// operation waits at most the timeout whatever its number of calls. Every call's deadline
/// on the server is the operation's, at most nine tenths of the timeout after its start: a
/// call started later is not sent (the script would refuse it as expired), and answered as
/// a [`FailureCause::Timeout`] that backs nothing off (nothing failed).
#[derive(Copy, Clone, Debug)]
pub(super) struct Budget {
    started: Instant,
}

impl Budget {
    /// The budget of an operation starting now.
    pub(super) fn start() -> Budget {
        Budget {
            started: Instant::now(),
        }
    }
}

/// Why a script call has no answer, and whether it may have run all the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Failure {
    pub(super) cause: FailureCause,
    /// It may have reached the script (a timeout, a connection lost with it in flight):
    /// whether it changed anything is not known.
    pub(super) maybe_ran: bool,
    /// Not sent because its operation's earlier calls took its time ([`Budget`]): says
    /// nothing of the server, so it backs nothing off.
    pub(super) unsent: bool,
    /// What Redis or the connection said, for the operator (`None`: the cause says it
    /// all, as a timeout's does). Written on a failure only.
    pub(super) error: Option<Arc<str>>,
}

impl Failure {
    /// A failure before anything was sent (or that Redis answered: nothing ran).
    fn before(cause: FailureCause) -> Failure {
        Failure {
            cause,
            maybe_ran: false,
            unsent: false,
            error: None,
        }
    }

    /// A failure that `error` ended before anything was sent.
    fn before_sent(error: &redis::RedisError) -> Failure {
        Failure {
            error: Some(error.to_string().into()),
            ..Failure::before(FailureCause::of(error))
        }
    }

    /// A call not sent: its operation's time was spent ([`Budget`]).
    fn out_of_time() -> Failure {
        Failure {
            cause: FailureCause::Timeout,
            maybe_ran: false,
            unsent: true,
            error: None,
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
            unsent: false,
            error: Some(error.to_string().into()),
        }
    }
}

/// Backoff groups of a cluster store: a slow or unreachable master backs off the hash tags
/// of the groups whose checks failed, not every key.
pub(super) const BACKOFF_GROUPS: usize = 64;

/// The step, in ms, that calls' deadlines are rounded down to for a `timeout`: the largest
/// power of two that is at most a twentieth of it (1 ms at least). Calls whose deadlines
/// fall in one step share one mode argument, which the script parses once (see `ARGV` in
/// `scripts/store.lua`); the rounding takes at most that step off each call's time on the
/// server.
pub(super) fn deadline_quantum_ms(timeout: Duration) -> u64 {
    let twentieth = u64::try_from(timeout.as_millis() / 20).unwrap_or(u64::MAX);
    if twentieth <= 1 {
        1
    } else {
        1 << twentieth.ilog2()
    }
}

impl RedisStore {
    /// Runs `call` as `op` by `io`, within what is left of `budget`: the reply, or why
    /// Redis could not answer.
    pub(super) async fn call(
        &self,
        call: &Call,
        op: Mode,
        io: Io,
        budget: Budget,
    ) -> Result<Value, FailureCause> {
        let shared = &self.shared;
        if shared.backing_off(call.tag) {
            return Err(FailureCause::Backoff);
        }
        let Some(runtime) = self.runtime.as_ref() else {
            shared.failed(
                call.tag,
                FailureCause::Connection,
                Some("the store has no runtime"),
            );
            return Err(FailureCause::Connection);
        };
        let handle = runtime.handle();
        let script = call.script(shared.mode(op));
        let result = match io {
            Io::Blocking => match (runtime, tokio::runtime::Handle::try_current()) {
                // A plain thread: drive the call on it (the store's own runtime: no
                // hand-off to the I/O thread and back).
                (IoRuntime::Own(runtime), Err(_)) => runtime.block_on(shared.eval(&script, budget)),
                // A plain thread, a given (multi-threaded) runtime, whose workers drive
                // the I/O while this thread polls the call.
                (IoRuntime::Given(handle), Err(_)) => handle.block_on(shared.eval(&script, budget)),
                // A worker of a multi-threaded runtime blocking on the given one: it hands
                // its other tasks to another thread first, so that blocking cannot starve
                // the runtime that would answer (the given runtime may be this one).
                (IoRuntime::Given(handle), Ok(current))
                    if current.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread =>
                {
                    tokio::task::block_in_place(|| handle.block_on(shared.eval(&script, budget)))
                }
                // Inside an async runtime, where blocking on another runtime is refused:
                // the call runs on the store's runtime and this thread waits for its answer.
                (_, Ok(_)) => {
                    let call = call.clone();
                    let task = Arc::clone(shared);
                    let (tx, rx) = mpsc::sync_channel(1);
                    handle.spawn(async move {
                        let script = call.script(task.mode(op));
                        let eval = task.eval(&script, budget);
                        // The receiver waits for this send; it is gone only if the caller
                        // panicked.
                        let _ = tx.send(eval.await);
                    });
                    rx.recv().unwrap_or_else(|_| {
                        Err(Failure {
                            error: Some("the store's runtime dropped the call".into()),
                            ..Failure::before(FailureCause::Connection)
                        })
                    })
                }
            },
            // This task makes the call itself, polled inside the store's runtime context:
            // whatever the caller's runtime (or its lack of timers), the timeout's timer,
            // a connect's socket and a reconnect's task belong to the store's runtime,
            // which drives the connection (its I/O thread, or the given runtime, which may
            // be this task's own: then nothing leaves this runtime). No task is spawned
            // per call.
            Io::Async => {
                let mut eval = pin!(shared.eval(&script, budget));
                std::future::poll_fn(|cx| {
                    let _context = handle.enter();
                    eval.as_mut().poll(cx)
                })
                .await
            }
        };
        match result {
            Ok(reply) => {
                shared.answered();
                Ok(reply)
            }
            Err(failure) if failure.unsent => {
                shared.unsent();
                Err(failure.cause)
            }
            Err(failure) => {
                shared.failed(call.tag, failure.cause, failure.error.as_deref());
                Err(failure.cause)
            }
        }
    }
}

impl Shared {
    /// One script call of an operation with `budget`: the reply, or why there is none.
    async fn eval(
        self: &Arc<Self>,
        script: &ScriptArgs<'_>,
        budget: Budget,
    ) -> Result<Value, Failure> {
        self.eval_for(script, budget.started, self.config.timeout())
            .await
    }

    /// One script call of an operation that `started`, waiting for its answer until
    /// `wait` after that start. Its deadline is the configured timeout's after that start
    /// whatever `wait` is (see "Deadlines" on [`RedisStore`]): a longer wait only hears how
    /// a late call ended. Not sent once nine tenths of the timeout have passed since that
    /// start: the deadline has passed too.
    pub(super) async fn eval_for(
        self: &Arc<Self>,
        script: &ScriptArgs<'_>,
        started: Instant,
        wait: Duration,
    ) -> Result<Value, Failure> {
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
        // The deadline is at least a tenth of the timeout before the operation's end (see
        // `ServerClock::deadline_us`): past that, the script would only refuse the call as
        // expired, and the refusal would drop the clock's estimate and back off keys whose
        // server is fine. The operation's earlier calls took its time: not sent.
        let timeout = self.config.timeout();
        if started
            .checked_add(timeout - timeout / 10)
            .is_some_and(|last| Instant::now() >= last)
        {
            return Err(Failure::out_of_time());
        }
        let Some(end) = started.checked_add(wait) else {
            return run.await;
        };
        match tokio::time::timeout_at(end.into(), run).await {
            Ok(result) => result,
            Err(_elapsed) => Err(Failure {
                cause: FailureCause::Timeout,
                maybe_ran: true,
                unsent: false,
                error: None,
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
    /// [`FailureCause::Timeout`] if the sample was too uncertain to keep, twice in a row.
    /// The first `TIME` on a connection not yet made also waits for its setup (the
    /// connect and the handshake, round trips that say nothing of the clocks), so one
    /// sample too slow to keep is followed by another at once.
    async fn sample_clock(&self, key: Option<&str>) -> Result<(), Failure> {
        for _ in 0..2 {
            let t0 = self.local_now();
            let server = self
                .connection
                .server_time(key, &self.counters)
                .await
                // `TIME` changes nothing: the call itself was not sent.
                .map_err(|e| Failure::before_sent(&e))?;
            let t1 = self.local_now();
            if self.clock.record(t0, t1, server, self.timeout_ns) {
                return Ok(());
            }
        }
        Err(Failure::before(FailureCause::Timeout))
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
    pub(super) fn backing_off(&self, tag: u64) -> bool {
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

    /// Counts a call of hash tag `tag` that failed by `cause` (Redis or the connection
    /// saying `error`), and backs off its group unless the failure was the call's own.
    pub(super) fn failed(&self, tag: u64, cause: FailureCause, error: Option<&str>) {
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
        let now = self.local_now();
        self.backoff_of(tag)
            .store(now.saturating_add(backoff), Ordering::Relaxed);
        // Relaxed: a report's state; no data is published with it. Told once, as the store
        // becomes degraded (not once per group per backoff: a master that stays down
        // fails again every backoff, for each group of keys it holds).
        self.last_failure.store(now, Ordering::Relaxed);
        if !self.degraded.swap(true, Ordering::Relaxed) {
            events::degraded(
                self.config.prefix(),
                cause,
                error,
                self.config.retry_backoff(),
            );
        }
    }

    /// Counts a call not sent for lack of time ([`Failure::out_of_time`]): answered by the
    /// failure policy like a failed one, but Redis did not fail, so nothing backs off and
    /// the store is not reported degraded.
    pub(super) fn unsent(&self) {
        Counters::bump(&self.counters.degraded);
        self.counters.failed(FailureCause::Timeout);
    }

    /// Redis answered a call: if it is degraded and has not failed for the recovery time,
    /// it is back. (A failure racing this can be told recovered a moment early; the next
    /// failure tells it degraded again.)
    #[inline]
    fn answered(&self) {
        // Relaxed: see `failed`. The load first: the common case writes nothing, and reads
        // the clock only while degraded.
        if self.degraded.load(Ordering::Relaxed)
            && self
                .local_now()
                .saturating_sub(self.last_failure.load(Ordering::Relaxed))
                >= self.recovery_ns
            && self.degraded.swap(false, Ordering::Relaxed)
        {
            events::recovered(self.config.prefix());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::deadline_quantum_ms;
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
}
