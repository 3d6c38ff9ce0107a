//! [`UntilReady`]: the future behind [`PolicyCheck::until_ready`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tollgate_core::{InsufficientCapacity, Nanos};

use super::{PolicyCheck, PolicyDecision, Request};

/// The sleep [`PolicyCheck::until_ready`] uses: a boxed [`Delay`](super::Delay).
pub type DelaySleep = fn(Nanos) -> Pin<Box<dyn Future<Output = ()> + Send>>;

enum Phase<F> {
    /// About to check.
    Check,
    /// Denied; sleeping until the retry time.
    Backoff(Pin<Box<F>>),
    /// Admitted with a delay (leaky bucket): holding the permit until forwarding.
    Delay(Pin<Box<F>>, Box<PolicyDecision>),
    /// Resolved.
    Done,
}

/// Resolves to the admitting decision once the request passes (after the leaky bucket's
/// `delay`, if any), or to `InsufficientCapacity` if it never can.
///
/// Cancellation: while backing off nothing has been consumed. If dropped while holding an
/// admitted permit during a `delay`, it refunds the permit, so a dropped future leaves the
/// limiter as if it had never asked.
///
/// ```
/// use std::future::Future;
/// use std::sync::Arc;
/// use std::task::{Context, Poll, Wake, Waker};
/// use tollgate::policy::{FnClock, Policy, PolicyCheck};
/// use tollgate::Nanos;
/// let policy = Policy::from_toml("[[rules]]\nname = \"d\"\nlimit = 1\nwindow = \"1s\"\n", FnClock(|| Nanos::ZERO))?;
/// let mut ready = std::pin::pin!(policy.until_ready("a", "/", 1));
/// struct Noop;
/// impl Wake for Noop { fn wake(self: Arc<Self>) {} }
/// let waker = Waker::from(Arc::new(Noop));
/// let mut cx = Context::from_waker(&waker);
/// assert!(matches!(ready.as_mut().poll(&mut cx), Poll::Ready(Ok(d)) if d.allowed()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct UntilReady<'a, P: PolicyCheck, S: SleepFn> {
    policy: &'a P,
    request: Request<'a>,
    sleep: S,
    phase: Phase<<S as SleepFn>::Fut>,
}

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

impl<'a, P: PolicyCheck, S: SleepFn> UntilReady<'a, P, S> {
    pub(crate) fn new(policy: &'a P, request: Request<'a>, sleep: S) -> UntilReady<'a, P, S> {
        UntilReady {
            policy,
            request,
            sleep,
            phase: Phase::Check,
        }
    }
}

// No field is structurally pinned: the sleep futures are boxed.
impl<P: PolicyCheck, S: SleepFn> Unpin for UntilReady<'_, P, S> {}

impl<P: PolicyCheck, S: SleepFn> Future for UntilReady<'_, P, S> {
    type Output = Result<PolicyDecision, InsufficientCapacity>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            match &mut this.phase {
                Phase::Check => {
                    let now = this.policy.now();
                    let decision = match this.policy.check_at(&this.request, now) {
                        Ok(d) => d,
                        Err(e) => {
                            this.phase = Phase::Done;
                            return Poll::Ready(Err(e));
                        }
                    };
                    if decision.allowed() {
                        if decision.delay() == Nanos::ZERO {
                            this.phase = Phase::Done;
                            return Poll::Ready(Ok(decision));
                        }
                        let sleep = Box::pin(this.sleep.sleep(decision.delay()));
                        this.phase = Phase::Delay(sleep, Box::new(decision));
                    } else {
                        let wait = decision.retry_after().max(Nanos::new(1));
                        this.phase = Phase::Backoff(Box::pin(this.sleep.sleep(wait)));
                    }
                }
                Phase::Backoff(sleep) => match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => this.phase = Phase::Check,
                    Poll::Pending => return Poll::Pending,
                },
                Phase::Delay(sleep, decision) => match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        let decision = **decision;
                        this.phase = Phase::Done;
                        return Poll::Ready(Ok(decision));
                    }
                    Poll::Pending => return Poll::Pending,
                },
                Phase::Done => return Poll::Pending,
            }
        }
    }
}

impl<P: PolicyCheck, S: SleepFn> Drop for UntilReady<'_, P, S> {
    fn drop(&mut self) {
        if let Phase::Delay(..) = self.phase {
            // Admitted but never forwarded: give the permit back.
            self.policy.refund_at(&self.request, self.policy.now());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use tollgate_core::Nanos;

    use crate::policy::delay::registrations;
    use crate::policy::{FnClock, Policy, PolicyCheck};

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    /// Issue 16, item 2: 10 000 `until_ready` futures backing off on an hourly limit, then
    /// dropped, leave no timer registration behind (before: all 10 000 stayed for an hour).
    /// The only test in this binary on the process-wide timer, so the counts are exact.
    #[test]
    fn dropped_until_ready_futures_leave_no_registration() {
        let rules = "[[rules]]\nname = \"h\"\nlimit = 1\nwindow = \"1h\"\n";
        let policy = Policy::from_toml(rules, FnClock(|| Nanos::from_secs(1))).unwrap();
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        let mut first = Box::pin(policy.until_ready("a", "/", 1));
        assert!(matches!(first.as_mut().poll(&mut cx), Poll::Ready(Ok(_))));
        let mut waiting: Vec<Pin<Box<_>>> = (0..10_000)
            .map(|_| Box::pin(policy.until_ready("a", "/", 1)))
            .collect();
        for _ in 0..2 {
            for f in &mut waiting {
                assert!(f.as_mut().poll(&mut cx).is_pending());
            }
        }
        assert_eq!(registrations(), 10_000, "one registration per live future");
        drop(waiting);
        assert_eq!(registrations(), 0);
    }
}
