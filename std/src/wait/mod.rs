//! Waiting without an async runtime: the [`Delay`] timer future (one background thread of
//! tollgate's own), the [`SleepFn`] an `until_ready` sleeps with ([`DelaySleep`] by
//! default), and [`finish`], the blocking form of an operation written once as a future.
//!
//! Inside, the retry loop behind every `until_ready` (the policy's
//! [`PolicyCheck::until_ready`](crate::policy::PolicyCheck::until_ready),
//! [`RateLimiter::until_ready`](crate::RateLimiter::until_ready),
//! [`KeyedLimiter::until_key_ready`](crate::KeyedLimiter::until_key_ready)): check; if
//! denied, sleep until the decision's `retry_after` and check again; if admitted with a
//! `delay` (a leaky bucket's hold), sleep that long, then resolve. While it backs off
//! nothing is consumed; dropped while holding an admitted permit, it gives the permit back
//! (a policy refunds it).
//!
//! ```
//! use std::time::Duration;
//! use tollgate::wait::{finish, Delay};
//!
//! // No runtime: the timer thread wakes the future, `finish` polls it on this thread.
//! finish(Delay::new(Duration::from_millis(1)));
//! assert_eq!(finish(async { 1 + 1 }), 2);
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tollgate_core::{Decision, Nanos};

mod admitted;
pub(crate) mod delay;
mod finish;
mod jitter;

pub use admitted::Admitted;
pub use delay::Delay;
pub use finish::finish;
pub use jitter::Jitter;

use jitter::Draws;

/// A function from a duration to a sleep future.
pub trait SleepFn {
    /// The sleep future.
    type Fut: Future<Output = ()>;
    /// Starts sleeping for `d`.
    fn sleep(&mut self, d: Nanos) -> Self::Fut;
}

impl<S: FnMut(Nanos) -> F, F: Future<Output = ()>> SleepFn for S {
    type Fut = F;
    fn sleep(&mut self, d: Nanos) -> F {
        self(d)
    }
}

/// The sleep the `until_ready` methods use by default: a boxed [`Delay`], on tollgate's own
/// timer thread, so no particular async runtime is needed.
pub type DelaySleep = fn(Nanos) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The [`DelaySleep`] itself.
pub(crate) fn delay_sleep() -> DelaySleep {
    fn sleep(d: Nanos) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(Delay::new(d.as_duration()))
    }
    sleep
}

/// What one check answered, as far as waiting is concerned.
pub(crate) enum Verdict {
    /// Admitted; resolve after `delay` (zero: at once).
    Admitted {
        /// How long to hold the admitted permit before resolving.
        delay: Nanos,
    },
    /// Denied; check again after `retry_after`.
    Denied {
        /// When a retry can succeed.
        retry_after: Nanos,
    },
}

/// One check of whatever is being waited on.
pub(crate) trait Attempt {
    /// What an admitting check resolves to (a decision).
    type Output;
    /// Why a check can never succeed (retrying is pointless).
    type Error;

    /// Checks now.
    fn attempt(&mut self) -> Result<(Self::Output, Verdict), Self::Error>;

    /// The future was dropped while holding an admitted permit (during its `delay`).
    fn abandon(&mut self) {}
}

/// An [`Attempt`] that runs a check answering a core [`Decision`] (a direct or keyed
/// limiter's). Abandoning does nothing: those limiters have no refund, so a permit admitted
/// with a `delay` stays spent if the future is dropped during it.
pub(crate) struct Checks<F>(F);

impl<F: FnMut() -> Result<Decision, E>, E> Attempt for Checks<F> {
    type Output = Decision;
    type Error = E;

    fn attempt(&mut self) -> Result<(Decision, Verdict), E> {
        let decision = (self.0)()?;
        let verdict = if decision.allowed {
            Verdict::Admitted {
                delay: decision.delay,
            }
        } else {
            Verdict::Denied {
                retry_after: decision.retry_after,
            }
        };
        Ok((decision, verdict))
    }
}

/// Resolves to the first decision of `check` that admits (after its `delay`), or to its
/// first error; sleeps on [`DelaySleep`] in between.
pub(crate) fn until_admitted<F, E>(check: F) -> Waiting<Checks<F>, DelaySleep>
where
    F: FnMut() -> Result<Decision, E>,
{
    Waiting::new(Checks(check), delay_sleep())
}

enum Phase<F, T> {
    /// About to check.
    Check,
    /// Denied; sleeping until the retry time.
    Backoff(Pin<Box<F>>),
    /// Admitted with a delay (leaky bucket): holding the permit until forwarding.
    Delay(Pin<Box<F>>, Box<T>),
    /// Resolved.
    Done,
}

/// Resolves to the first admitting check's output (after its `delay`, if any), or to the
/// first error.
pub(crate) struct Waiting<A: Attempt, S: SleepFn> {
    attempt: A,
    sleep: S,
    /// The extra time of each backoff (none by default).
    jitter: Option<Draws>,
    phase: Phase<S::Fut, A::Output>,
}

impl<A: Attempt, S: SleepFn> Waiting<A, S> {
    pub(crate) fn new(attempt: A, sleep: S) -> Waiting<A, S> {
        Waiting {
            attempt,
            sleep,
            jitter: None,
            phase: Phase::Check,
        }
    }

    /// The same wait with `jitter` added to each backoff.
    pub(crate) fn with_jitter(mut self, jitter: Jitter) -> Waiting<A, S> {
        self.jitter = Some(Draws::new(jitter));
        self
    }
}

// No field is structurally pinned: the sleep futures are boxed, `attempt` is never pinned.
impl<A: Attempt, S: SleepFn> Unpin for Waiting<A, S> {}

impl<A: Attempt, S: SleepFn> Future for Waiting<A, S> {
    type Output = Result<A::Output, A::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.phase {
                Phase::Check => match this.attempt.attempt() {
                    Err(e) => {
                        this.phase = Phase::Done;
                        return Poll::Ready(Err(e));
                    }
                    Ok((output, Verdict::Admitted { delay })) => {
                        if delay == Nanos::ZERO {
                            this.phase = Phase::Done;
                            return Poll::Ready(Ok(output));
                        }
                        let sleep = Box::pin(this.sleep.sleep(delay));
                        this.phase = Phase::Delay(sleep, Box::new(output));
                    }
                    Ok((_, Verdict::Denied { retry_after })) => {
                        let mut wait = retry_after.max(Nanos::new(1));
                        if let Some(draws) = &mut this.jitter {
                            wait = draws.add_to(wait);
                        }
                        this.phase = Phase::Backoff(Box::pin(this.sleep.sleep(wait)));
                    }
                },
                Phase::Backoff(sleep) => match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => this.phase = Phase::Check,
                    Poll::Pending => return Poll::Pending,
                },
                Phase::Delay(sleep, _) => match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        let Phase::Delay(_, output) =
                            std::mem::replace(&mut this.phase, Phase::Done)
                        else {
                            unreachable!("matched Phase::Delay above")
                        };
                        return Poll::Ready(Ok(*output));
                    }
                    Poll::Pending => return Poll::Pending,
                },
                Phase::Done => return Poll::Pending,
            }
        }
    }
}

impl<A: Attempt, S: SleepFn> Drop for Waiting<A, S> {
    fn drop(&mut self) {
        if let Phase::Delay(..) = self.phase {
            // Admitted but never resolved.
            self.attempt.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::future::{ready, Future, Ready};
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use tollgate_core::Nanos;

    use super::{Attempt, Verdict, Waiting};

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    /// Denied twice (after 5 ns, then 0 ns), then admitted with a delay of 7 ns.
    struct Script<'a> {
        calls: u32,
        abandoned: &'a Cell<bool>,
    }

    impl Attempt for Script<'_> {
        type Output = u32;
        type Error = ();
        fn attempt(&mut self) -> Result<(u32, Verdict), ()> {
            self.calls += 1;
            Ok(match self.calls {
                1 => (
                    0,
                    Verdict::Denied {
                        retry_after: Nanos::new(5),
                    },
                ),
                2 => (
                    0,
                    Verdict::Denied {
                        retry_after: Nanos::ZERO,
                    },
                ),
                n => (
                    n,
                    Verdict::Admitted {
                        delay: Nanos::new(7),
                    },
                ),
            })
        }
        fn abandon(&mut self) {
            self.abandoned.set(true);
        }
    }

    #[test]
    fn backs_off_by_retry_after_then_holds_the_delay() {
        let abandoned = Cell::new(false);
        let slept = Cell::new(Vec::new());
        let sleep = |d: Nanos| -> Ready<()> {
            let mut all = slept.take();
            all.push(d.as_u64());
            slept.set(all);
            ready(())
        };
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let script = Script {
            calls: 0,
            abandoned: &abandoned,
        };
        let mut waiting = pin!(Waiting::new(script, sleep));
        assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Ready(Ok(3)));
        // A zero `retry_after` still sleeps a nanosecond: no busy loop.
        assert_eq!(slept.take(), [5, 1, 7]);
        assert!(!abandoned.get());
    }

    #[test]
    fn jitter_lengthens_each_backoff_and_never_the_delay() {
        let abandoned = Cell::new(false);
        let slept = Cell::new(Vec::new());
        let sleep = |d: Nanos| -> Ready<()> {
            let mut all = slept.take();
            all.push(d.as_u64());
            slept.set(all);
            ready(())
        };
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let script = Script {
            calls: 0,
            abandoned: &abandoned,
        };
        // A fixed extra time (no spread), so the sleeps are exact.
        let jitter = super::Jitter::new(
            std::time::Duration::from_nanos(10),
            std::time::Duration::ZERO,
        );
        let mut waiting = pin!(Waiting::new(script, sleep).with_jitter(jitter));
        assert_eq!(waiting.as_mut().poll(&mut cx), Poll::Ready(Ok(3)));
        assert_eq!(slept.take(), [15, 11, 7]);
    }

    #[test]
    fn dropped_while_holding_a_permit_abandons_it() {
        let abandoned = Cell::new(false);
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let script = Script {
            calls: 2,
            abandoned: &abandoned,
        };
        let mut waiting = Box::pin(Waiting::new(script, |_| std::future::pending::<()>()));
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        drop(waiting);
        assert!(abandoned.get());
    }
}
