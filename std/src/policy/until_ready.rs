//! [`UntilReady`]: the future behind [`PolicyCheck::until_ready`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tollgate_core::InsufficientCapacity;

use super::{PolicyCheck, PolicyDecision, Request};
use crate::wait::{Attempt, SleepFn, Verdict, Waiting};

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
    waiting: Waiting<PolicyAttempt<'a, P>, S>,
}

/// One policy check of one request; a held permit is refunded if abandoned.
struct PolicyAttempt<'a, P> {
    policy: &'a P,
    request: Request<'a>,
}

impl<P: PolicyCheck> Attempt for PolicyAttempt<'_, P> {
    type Output = PolicyDecision;
    type Error = InsufficientCapacity;

    fn attempt(&mut self) -> Result<(PolicyDecision, Verdict), InsufficientCapacity> {
        let decision = self.policy.check_at(&self.request, self.policy.now())?;
        let verdict = if decision.allowed() {
            Verdict::Admitted {
                delay: decision.delay(),
            }
        } else {
            Verdict::Denied {
                retry_after: decision.retry_after(),
            }
        };
        Ok((decision, verdict))
    }

    fn abandon(&mut self) {
        // Admitted but never forwarded: give the permit back.
        self.policy.refund_at(&self.request, self.policy.now());
    }
}

impl<'a, P: PolicyCheck, S: SleepFn> UntilReady<'a, P, S> {
    pub(crate) fn new(policy: &'a P, request: Request<'a>, sleep: S) -> UntilReady<'a, P, S> {
        UntilReady {
            waiting: Waiting::new(PolicyAttempt { policy, request }, sleep),
        }
    }
}

impl<P: PolicyCheck, S: SleepFn> Future for UntilReady<'_, P, S> {
    type Output = Result<PolicyDecision, InsufficientCapacity>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.waiting).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use tollgate_core::Nanos;

    use crate::policy::{FnClock, Policy, PolicyCheck};
    use crate::wait::delay::registrations;

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
